//! The binding's executor config (`RunRequest.config`): strict (an unknown
//! field is refused), every field optional, and each error naming its field as
//! a JSON pointer without quoting a value.
//!
//! ```json
//! {"model": "opus", "playbook": "work-item", "args": "{number}",
//!  "handoff_minutes": 55, "cold_turns": "handoff", "handoff_tokens": 400000}
//! ```
//!
//! `handoff_share`, the removed experiment's setting, is accepted and ignored
//! with a warning ([`ClaudeConfig::warnings`]).
//!
//! `secret_env` maps a variable to a secret: a name (a secret of the binding's
//! `connection`) or `{"connection": "<name>", "secret": "<name>"}` (a secret of
//! one of the connections the binding names, `connection` or one of `connections`).

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The CLI run when the config names none.
pub const DEFAULT_BINARY: &str = "claude";
/// The model when the config (and the Work) names none.
pub const DEFAULT_MODEL: &str = "opus";
/// claude's `--permission-mode` by default.
pub const DEFAULT_PERMISSION_MODE: &str = "bypassPermissions";
/// The turn's arguments template by default.
pub const DEFAULT_ARGS: &str = "{number}";
/// The outcome data schema by default.
pub const DEFAULT_STATUS_SCHEMA: &str = "core.turn.v1";
/// Minutes after a turn when a session counts as cold, by default.
pub const DEFAULT_HANDOFF_MINUTES: u64 = 55;
/// The context a session may end a turn with before the next one starts afresh.
pub const DEFAULT_HANDOFF_TOKENS: u64 = 400_000;
/// `CLAUDE_CODE_AUTO_COMPACT_WINDOW` by default.
pub const DEFAULT_AUTO_COMPACT_TOKENS: u64 = 600_000;

/// Every field the config may set.
pub const FIELDS: &[&str] = &[
    "binary",
    "model",
    "permission_mode",
    "playbook",
    "plugin_dir",
    "args",
    "structured",
    "status_schema",
    "branch",
    "workspace_mode",
    "dir",
    "handoff_minutes",
    "cold_turns",
    "handoff_share",
    "handoff_tokens",
    "auto_compact_tokens",
    "env",
    "pass_env",
    "secret_env",
    "extra_args",
    "builtin_tools",
    "strict_mcp",
    "usage",
    "home_seed",
    "models",
];

/// Arguments `extra_args` may not carry: the print mode, the session and the
/// MCP flags belong to the executor.
const RESERVED_ARGS: &[&str] = &[
    "-p",
    "--print",
    "--resume",
    "-r",
    "--session-id",
    "--continue",
    "-c",
    "--fork-session",
    "--mcp-config",
    "--strict-mcp-config",
    "--input-format",
    "--output-format",
    "--replay-user-messages",
    "--json-schema",
];

pub use sdk::config::ConfigError;

/// What a cold session's next turn does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColdTurns {
    /// Start a fresh session from the handoff note.
    #[default]
    Handoff,
    /// Resume the session.
    Resume,
}

pub use sdk::agent::secret_env::{RawSecret, SecretSource};

/// The config as written (strict).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    binary: Option<String>,
    model: Option<String>,
    permission_mode: Option<String>,
    playbook: Option<String>,
    plugin_dir: Option<String>,
    args: Option<String>,
    structured: Option<bool>,
    status_schema: Option<String>,
    branch: Option<String>,
    workspace_mode: Option<String>,
    dir: Option<String>,
    handoff_minutes: Option<u64>,
    cold_turns: Option<ColdTurns>,
    handoff_share: Option<Value>,
    handoff_tokens: Option<u64>,
    auto_compact_tokens: Option<u64>,
    env: Option<BTreeMap<String, String>>,
    pass_env: Option<Vec<String>>,
    secret_env: Option<BTreeMap<String, RawSecret>>,
    extra_args: Option<Vec<String>>,
    builtin_tools: Option<Vec<String>>,
    strict_mcp: Option<bool>,
    usage: Option<bool>,
    home_seed: Option<String>,
    models: Option<Vec<String>>,
}

/// What `config check` and `doctor` say about `bypassPermissions` as root.
pub const ROOT_BYPASS: &str = "permission_mode bypassPermissions (the default) fails every turn as root: claude refuses --dangerously-skip-permissions with root/sudo privileges; run Open Conduit as a non-root user (the packaged service does), or set IS_SANDBOX=1 in the binding's env when the machine is a disposable sandbox, or choose another permission_mode (acceptEdits keeps the toolbelt)";

/// The binding's config, checked, with its defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeConfig {
    /// The CLI.
    pub binary: String,
    /// The model.
    pub model: String,
    /// `--permission-mode`.
    pub permission_mode: String,
    /// The playbook turns start on; `None` for none.
    pub playbook: Option<String>,
    /// `--plugin-dir`.
    pub plugin_dir: Option<String>,
    /// The arguments template.
    pub args: String,
    /// Ask for the structured status.
    pub structured: bool,
    /// The outcome data's schema.
    pub status_schema: String,
    /// The workspace request's branch (`resource.acquire`'s `branch` parameter).
    pub branch: Option<String>,
    /// The workspace request's mode (`work` or `clone`; it wins over the resource's own).
    pub workspace_mode: String,
    /// Whether the binding set `workspace_mode` (a sandboxed binding that did not gets
    /// `clone`: see [`ClaudeConfig::mode_for`]).
    pub workspace_mode_set: bool,
    /// The absolute folder sessions run in.
    pub dir: Option<String>,
    /// Minutes after a turn when the session is cold.
    pub handoff_minutes: u64,
    /// What a cold turn does.
    pub cold_turns: ColdTurns,
    /// True when the removed `handoff_share` is set.
    pub handoff_share: bool,
    /// The context that makes a session large; 0 turns it off.
    pub handoff_tokens: u64,
    /// `CLAUDE_CODE_AUTO_COMPACT_WINDOW`; 0 leaves it unset.
    pub auto_compact_tokens: u64,
    /// Variables set for claude.
    pub env: BTreeMap<String, String>,
    /// This process's variables passed on.
    pub pass_env: Vec<String>,
    /// Variables set from secrets of the connections the binding names.
    pub secret_env: BTreeMap<String, SecretSource>,
    /// Extra arguments.
    pub extra_args: Vec<String>,
    /// `--tools`, when set.
    pub builtin_tools: Option<Vec<String>>,
    /// `--strict-mcp-config`.
    pub strict_mcp: bool,
    /// Doctor may read usage windows (not built).
    pub usage: bool,
    /// A container home seed (not built).
    pub home_seed: Option<String>,
    /// Models a Work may pick.
    pub models: Vec<String>,
}

impl ClaudeConfig {
    /// The mode a workspace is requested in: `workspace_mode`, except that a sandboxed
    /// binding that names none gets `clone`: a worktree's git directory is in the
    /// provider's cache under the state directory, which a sandbox denies, so git in a
    /// sandboxed worktree could not even read its branch.
    pub fn mode_for(&self, sandboxed: bool) -> &str {
        if sandboxed && !self.workspace_mode_set {
            "clone"
        } else {
            &self.workspace_mode
        }
    }

    /// Fixed sentences about a valid config that should change.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.handoff_share {
            out.push(
                "handoff_share is ignored: the handoff experiment was removed; a cold turn follows cold_turns"
                    .to_string(),
            );
        }
        if !self.pass_env.is_empty() {
            out.push(
                "pass_env in the executor config reaches only the executor's own process; name the daemon's variables in the binding's pass_env"
                    .to_string(),
            );
        }
        out
    }

    /// Why this config fails every turn when the executor runs as root, with the
    /// fix: claude refuses `--dangerously-skip-permissions` (what
    /// `bypassPermissions` is) with root privileges unless `IS_SANDBOX=1`.
    pub fn root_problem(&self, root: bool) -> Option<String> {
        let sandbox = self.env.get("IS_SANDBOX").is_some_and(|v| v == "1");
        (root && self.permission_mode == "bypassPermissions" && !sandbox)
            .then(|| ROOT_BYPASS.to_string())
    }

    /// The connection secrets `secret_env` resolves, each with its pointer into the
    /// config (`validate` kind `executor_secrets`).
    pub fn secret_uses(&self) -> Vec<protocol::wire::SecretUse> {
        sdk::agent::secret_env::uses(&self.secret_env)
    }

    /// One line saying what the config runs.
    pub fn describe(&self) -> String {
        let start = match &self.playbook {
            Some(p) => format!("the playbook {p}"),
            None => "the rendered Work".to_string(),
        };
        format!("runs {} on {} starting on {start}", self.binary, self.model)
    }

    /// The model a Work runs on: the one its context names when the config
    /// lists it, else the config's.
    pub fn model_for(&self, context: &Value) -> String {
        if let Some(m) = context.get("model").and_then(Value::as_str) {
            if self.models.iter().any(|x| x == m) {
                return m.to_string();
            }
        }
        self.model.clone()
    }
}

fn nonempty(name: &str, s: &str) -> Result<(), ConfigError> {
    if s.trim().is_empty() {
        return Err(ConfigError::new(name, "must not be empty"));
    }
    if s.contains('\0') {
        return Err(ConfigError::new(name, "must not contain a NUL byte"));
    }
    Ok(())
}

fn var_name(field: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            "a variable name must be letters, digits and _, not starting with a digit",
        ))
    }
}

/// Parses and checks a binding's executor config.
pub fn parse(config: &Value) -> Result<ClaudeConfig, ConfigError> {
    let raw: Raw = match config {
        Value::Object(_) => sdk::config::parse(config)?,
        Value::Null => Raw::default(),
        _ => return Err(ConfigError::whole("must be an object")),
    };
    let binary = raw.binary.unwrap_or_else(|| DEFAULT_BINARY.to_string());
    nonempty("/binary", &binary)?;
    let model = raw.model.unwrap_or_else(|| DEFAULT_MODEL.to_string());
    nonempty("/model", &model)?;
    let permission_mode = raw
        .permission_mode
        .unwrap_or_else(|| DEFAULT_PERMISSION_MODE.to_string());
    nonempty("/permission_mode", &permission_mode)?;
    let playbook = match raw.playbook {
        None => None,
        Some(p) if p == "-" || p.is_empty() => None,
        Some(p) => {
            let ok = p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
            if !ok {
                return Err(ConfigError::new(
                    "/playbook",
                    "must be a name (letters, digits, -, _ and .) or -",
                ));
            }
            Some(p)
        }
    };
    if let Some(d) = &raw.plugin_dir {
        nonempty("/plugin_dir", d)?;
    }
    let args = raw.args.unwrap_or_else(|| DEFAULT_ARGS.to_string());
    if args.contains(['\n', '\0']) {
        return Err(ConfigError::new("/args", "must be one line"));
    }
    let status_schema = raw
        .status_schema
        .unwrap_or_else(|| DEFAULT_STATUS_SCHEMA.to_string());
    nonempty("/status_schema", &status_schema)?;
    let workspace_mode_set = raw.workspace_mode.is_some();
    let workspace_mode = raw.workspace_mode.unwrap_or_else(|| "work".to_string());
    if workspace_mode != "work" && workspace_mode != "clone" {
        return Err(ConfigError::new("/workspace_mode", "must be work or clone"));
    }
    if let Some(d) = &raw.dir {
        nonempty("/dir", d)?;
        if !std::path::Path::new(d).is_absolute() {
            return Err(ConfigError::new("/dir", "must be an absolute path"));
        }
    }
    if let Some(d) = &raw.home_seed {
        if !std::path::Path::new(d).is_absolute() {
            return Err(ConfigError::new("/home_seed", "must be an absolute path"));
        }
    }
    let env = raw.env.unwrap_or_default();
    for name in env.keys() {
        var_name("/env", name)?;
    }
    let pass_env = raw.pass_env.unwrap_or_default();
    for (i, name) in pass_env.iter().enumerate() {
        var_name(&format!("/pass_env/{i}"), name)?;
    }
    let secret_env = sdk::agent::secret_env::check(raw.secret_env.unwrap_or_default())?;
    let extra_args = raw.extra_args.unwrap_or_default();
    for (i, a) in extra_args.iter().enumerate() {
        if a.contains('\0') {
            return Err(ConfigError::new(
                format!("/extra_args/{i}"),
                "must not contain a NUL byte",
            ));
        }
        let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
        if RESERVED_ARGS.contains(&flag) || (raw.builtin_tools.is_some() && flag == "--tools") {
            return Err(ConfigError::new(
                format!("/extra_args/{i}"),
                "may not set -p, the session, the input and output formats, the MCP flags, or --tools when builtin_tools is set",
            ));
        }
    }
    let models = raw.models.unwrap_or_default();
    for (i, m) in models.iter().enumerate() {
        nonempty(&format!("/models/{i}"), m)?;
    }
    Ok(ClaudeConfig {
        binary,
        model,
        permission_mode,
        playbook,
        plugin_dir: raw.plugin_dir,
        args,
        structured: raw.structured.unwrap_or(true),
        status_schema,
        branch: raw.branch,
        workspace_mode,
        workspace_mode_set,
        dir: raw.dir,
        handoff_minutes: raw.handoff_minutes.unwrap_or(DEFAULT_HANDOFF_MINUTES),
        cold_turns: raw.cold_turns.unwrap_or_default(),
        handoff_share: raw.handoff_share.is_some(),
        handoff_tokens: raw.handoff_tokens.unwrap_or(DEFAULT_HANDOFF_TOKENS),
        auto_compact_tokens: raw
            .auto_compact_tokens
            .unwrap_or(DEFAULT_AUTO_COMPACT_TOKENS),
        env,
        pass_env,
        secret_env,
        extra_args,
        builtin_tools: raw.builtin_tools,
        strict_mcp: raw.strict_mcp.unwrap_or(false),
        usage: raw.usage.unwrap_or(false),
        home_seed: raw.home_seed,
        models,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults() {
        let c = parse(&json!(null)).unwrap();
        assert_eq!(c.binary, "claude");
        assert_eq!(c.model, "opus");
        assert_eq!(c.permission_mode, "bypassPermissions");
        assert_eq!(c.playbook, None);
        assert_eq!(c.args, "{number}");
        assert!(c.structured);
        assert_eq!(c.status_schema, "core.turn.v1");
        assert_eq!(c.handoff_minutes, 55);
        assert_eq!(c.cold_turns, ColdTurns::Handoff);
        assert_eq!(c.handoff_tokens, 400_000);
        assert_eq!(c.auto_compact_tokens, 600_000);
        assert!(c.warnings().is_empty());
        assert_eq!(parse(&json!({"playbook": "-"})).unwrap().playbook, None);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!([]), ""),
            (json!({"modle": "x"}), "/modle"),
            (json!({"model": 3}), "/model"),
            (json!({"model": ""}), "/model"),
            (json!({"structured": "yes"}), "/structured"),
            (json!({"handoff_tokens": -1}), "/handoff_tokens"),
            (json!({"cold_turns": "later"}), "/cold_turns"),
            (json!({"env": {"A": 1}}), "/env/A"),
            (json!({"env": {"A=B": "1"}}), "/env"),
            (json!({"extra_args": ["--verbose", 2]}), "/extra_args/1"),
            (json!({"extra_args": ["--resume=x"]}), "/extra_args/0"),
            (
                json!({"extra_args": ["--tools", "Bash"], "builtin_tools": []}),
                "/extra_args/0",
            ),
            (json!({"dir": "relative/dir"}), "/dir"),
            (json!({"workspace_mode": "fresh"}), "/workspace_mode"),
            (json!({"playbook": "a b"}), "/playbook"),
            (json!({"pass_env": ["OK", "1BAD"]}), "/pass_env/1"),
            (json!({"models": ["haiku", ""]}), "/models/1"),
        ];
        for (config, pointer) in cases {
            let e = parse(&config).unwrap_err();
            assert_eq!(e.pointer, pointer, "{config}: {e}");
        }
        assert_eq!(
            parse(&json!({"extra_args": [1]})).unwrap_err().to_string(),
            "/extra_args/0: must be a string"
        );
        assert_eq!(
            parse(&json!({"env": {"A": 1}})).unwrap_err().to_string(),
            "/env/A: must be a string"
        );
        assert_eq!(
            parse(&json!({"cold_turns": "later"}))
                .unwrap_err()
                .to_string(),
            "/cold_turns: must be handoff or resume"
        );
        assert_eq!(
            parse(&json!({"handoff_tokens": "400k"}))
                .unwrap_err()
                .to_string(),
            "/handoff_tokens: must be a whole, non-negative number"
        );
        assert_eq!(
            parse(&json!([])).unwrap_err().to_string(),
            "the config: must be an object"
        );
        // An unknown field's error lists every field there is.
        let e = parse(&json!({"modle": "x"})).unwrap_err();
        assert_eq!(
            e.reason,
            format!("unknown field (known: {})", FIELDS.join(", "))
        );
    }

    #[test]
    fn a_secret_comes_from_the_binding_connection_or_a_named_one() {
        let c = parse(&json!({"secret_env": {
            "GH_TOKEN": "token",
            "ANTHROPIC_API_KEY": {"connection": "anthropic", "secret": "api_key"}}}))
        .unwrap();
        assert_eq!(
            c.secret_env["GH_TOKEN"],
            SecretSource {
                connection: String::new(),
                secret: "token".into()
            }
        );
        assert_eq!(c.secret_env["GH_TOKEN"].connection_or("gh"), "gh");
        let key = &c.secret_env["ANTHROPIC_API_KEY"];
        assert_eq!(
            (key.connection.as_str(), key.secret.as_str()),
            ("anthropic", "api_key")
        );
        assert_eq!(key.connection_or("gh"), "anthropic");
        let uses = c.secret_uses();
        assert_eq!(uses.len(), 2);
        assert_eq!(uses[0].path, "/secret_env/ANTHROPIC_API_KEY");
        assert_eq!(
            (uses[0].connection.as_str(), uses[0].secret.as_str()),
            ("anthropic", "api_key")
        );
        assert_eq!(uses[1].path, "/secret_env/GH_TOKEN");
        assert_eq!(uses[1].connection, "");
        // Each malformed value is refused at its variable's pointer.
        for bad in [
            json!({"K": {"connection": "a"}}),
            json!({"K": {"connection": "a", "secret": "s", "extra": 1}}),
            json!({"K": {"connection": "", "secret": "s"}}),
            json!({"K": {"connection": "a", "secret": ""}}),
            json!({"K": {"connection": 1, "secret": "s"}}),
            json!({"K": ""}),
            json!({"K": 3}),
            json!({"K": ["a"]}),
            json!({"K": ["a", "s"]}),
        ] {
            let e = parse(&json!({ "secret_env": bad })).unwrap_err();
            assert_eq!(e.pointer, "/secret_env/K", "{bad}: {e}");
        }
        let e = parse(&json!({"secret_env": {"K": {"secret": "s"}}})).unwrap_err();
        assert!(e.reason.contains("{\"connection\""), "{e}");
        let e = parse(&json!({"secret_env": ["K"]})).unwrap_err();
        assert_eq!(e.pointer, "/secret_env");
        let e = parse(&json!({"secret_env": {"1K": "s"}})).unwrap_err();
        assert_eq!(e.pointer, "/secret_env");
    }

    #[test]
    fn the_removed_setting_warns() {
        let c = parse(&json!({"handoff_share": 0.5, "extra_args": ["--tools", "Bash"]})).unwrap();
        assert_eq!(c.warnings().len(), 1);
        assert!(c.warnings()[0].contains("handoff_share"));
    }

    #[test]
    fn a_work_picks_a_listed_model() {
        let c = parse(&json!({"models": ["haiku"]})).unwrap();
        assert_eq!(c.model_for(&json!({"model": "haiku"})), "haiku");
        assert_eq!(c.model_for(&json!({"model": "other"})), "opus");
        assert_eq!(c.model_for(&Value::Null), "opus");
    }
    #[test]
    fn a_sandboxed_binding_without_a_mode_gets_a_clone() {
        let unset = parse(&json!({})).unwrap();
        assert_eq!(unset.mode_for(false), "work");
        assert_eq!(unset.mode_for(true), "clone");
        let set = parse(&json!({"workspace_mode": "work"})).unwrap();
        assert_eq!(set.mode_for(true), "work", "the binding's own choice wins");
    }
}
