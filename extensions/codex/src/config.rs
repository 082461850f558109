//! The binding's executor config (`RunRequest.config`): strict (an unknown field is
//! refused), every field optional, each error naming its field as a JSON pointer
//! without quoting a value.
//!
//! ```json
//! {"model": "gpt-5.5", "base_url": "https://api.openai.com/v1", "env_key": "OPENAI_API_KEY",
//!  "secret_env": {"OPENAI_API_KEY": "api_key"}, "sandbox_mode": "workspace-write"}
//! ```

use sdk::agent::secret_env::{is_var_name, RawSecret, SecretSource};
use sdk::config::ConfigError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The CLI run when the config names none.
pub const DEFAULT_BINARY: &str = "codex";
/// The model when the config (and the Work) names none.
pub const DEFAULT_MODEL: &str = "gpt-5.5";
/// The provider's base URL by default.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The provider's id by default.
pub const DEFAULT_PROVIDER: &str = "oc";
/// The provider's name by default.
pub const DEFAULT_PROVIDER_NAME: &str = "Open Conduit";
/// The key's variable by default.
pub const DEFAULT_ENV_KEY: &str = "OPENAI_API_KEY";
/// The turn's arguments template by default.
pub const DEFAULT_ARGS: &str = "{number}";
/// The outcome data schema by default.
pub const DEFAULT_STATUS_SCHEMA: &str = "core.turn.v1";
/// The sandbox modes.
pub const SANDBOX_MODES: &[&str] = &[
    "read-only",
    "workspace-write",
    "danger-full-access",
    "bypass",
];
/// The settings the executor sets itself, which `config` may not.
pub const RESERVED: &[&str] = &[
    "model",
    "model_provider",
    "model_providers",
    "mcp_servers.open-conduit",
    "shell_environment_policy",
    "features.plugins",
    "analytics",
    "sandbox_mode",
];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    binary: Option<String>,
    model: Option<String>,
    models: Option<Vec<String>>,
    base_url: Option<String>,
    provider: Option<String>,
    provider_name: Option<String>,
    env_key: Option<String>,
    sandbox_mode: Option<String>,
    args: Option<String>,
    structured: Option<bool>,
    status_schema: Option<String>,
    branch: Option<String>,
    workspace_mode: Option<String>,
    dir: Option<String>,
    env: Option<BTreeMap<String, String>>,
    pass_env: Option<Vec<String>>,
    secret_env: Option<BTreeMap<String, RawSecret>>,
    config: Option<BTreeMap<String, Value>>,
}

/// The binding's config, checked, with its defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct CodexConfig {
    /// The CLI.
    pub binary: String,
    /// The model.
    pub model: String,
    /// Models a Work may pick through `model` in its context.
    pub models: Vec<String>,
    /// The provider's Responses API base URL.
    pub base_url: String,
    /// The provider's id.
    pub provider: String,
    /// The provider's name.
    pub provider_name: String,
    /// The variable codex reads the key from.
    pub env_key: String,
    /// codex's sandbox (`bypass`: none of its own).
    pub sandbox_mode: String,
    /// The turn's arguments template.
    pub args: String,
    /// Ask for the structured status.
    pub structured: bool,
    /// The outcome data schema.
    pub status_schema: String,
    /// The workspace request's branch.
    pub branch: Option<String>,
    /// The workspace request's mode.
    pub workspace_mode: String,
    /// A workspace-free binding's folder.
    pub dir: Option<String>,
    /// Variables set for codex.
    pub env: BTreeMap<String, String>,
    /// This process's variables passed to codex.
    pub pass_env: Vec<String>,
    /// Variables set from secrets.
    pub secret_env: BTreeMap<String, SecretSource>,
    /// More `-c key=value` settings, the values as TOML.
    pub config: BTreeMap<String, String>,
}

fn nonempty(at: &str, s: &str) -> Result<(), ConfigError> {
    if s.trim().is_empty() {
        return Err(ConfigError::new(at, "must not be empty"));
    }
    if s.contains(['\0', '\n']) {
        return Err(ConfigError::new(at, "must be one line"));
    }
    Ok(())
}

fn var(at: &str, name: &str) -> Result<(), ConfigError> {
    if is_var_name(name) {
        Ok(())
    } else {
        Err(ConfigError::new(
            at,
            "a variable name must be letters, digits and _, not starting with a digit",
        ))
    }
}

/// A JSON string as a TOML basic string.
pub fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON value as a TOML value: a string, number, boolean, or an array of them.
fn toml_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(toml_string(s)),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Array(a) => {
            let items: Option<Vec<String>> = a
                .iter()
                .map(|x| (!x.is_array()).then(|| toml_value(x)).flatten())
                .collect();
            Some(format!("[{}]", items?.join(", ")))
        }
        _ => None,
    }
}

impl CodexConfig {
    /// The model a Work runs on: the one its context names when the config lists
    /// it, else the config's.
    pub fn model_for(&self, context: &Value) -> String {
        if let Some(m) = context.get("model").and_then(Value::as_str) {
            if self.models.iter().any(|x| x == m) {
                return m.to_string();
            }
        }
        self.model.clone()
    }

    /// One line saying what the config runs.
    pub fn describe(&self) -> String {
        format!(
            "runs {} on {} at {} (sandbox {})",
            self.binary, self.model, self.base_url, self.sandbox_mode
        )
    }

    /// Settings that should change.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.secret_env.contains_key(&self.env_key) && !self.pass_env.contains(&self.env_key) {
            out.push(format!(
                "env_key {} is set by neither secret_env nor pass_env: codex sends no key (a provider that wants one fails every turn)",
                self.env_key
            ));
        }
        if self.sandbox_mode == "danger-full-access" {
            out.push("sandbox_mode danger-full-access runs the agent's commands unconfined: give the binding a sandbox or container, and set bypass".into());
        }
        out
    }

    /// The connection secrets `secret_env` resolves.
    pub fn secret_uses(&self) -> Vec<protocol::wire::SecretUse> {
        sdk::agent::secret_env::uses(&self.secret_env)
    }
}

/// Parses and checks a binding's executor config.
pub fn parse(config: &Value) -> Result<CodexConfig, ConfigError> {
    let raw: Raw = match config {
        Value::Object(_) => sdk::config::parse(config)?,
        Value::Null => Raw::default(),
        _ => return Err(ConfigError::whole("must be an object")),
    };
    let text = |v: Option<String>, d: &str| v.unwrap_or_else(|| d.to_string());
    let binary = text(raw.binary, DEFAULT_BINARY);
    nonempty("/binary", &binary)?;
    let model = text(raw.model, DEFAULT_MODEL);
    nonempty("/model", &model)?;
    let models = raw.models.unwrap_or_default();
    for (i, m) in models.iter().enumerate() {
        nonempty(&format!("/models/{i}"), m)?;
    }
    let base_url = text(raw.base_url, DEFAULT_BASE_URL);
    nonempty("/base_url", &base_url)?;
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(ConfigError::new(
            "/base_url",
            "must be an http or https URL",
        ));
    }
    let provider = text(raw.provider, DEFAULT_PROVIDER);
    let id_ok = !provider.is_empty()
        && provider
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !id_ok {
        return Err(ConfigError::new(
            "/provider",
            "must be letters, digits, - and _",
        ));
    }
    let provider_name = text(raw.provider_name, DEFAULT_PROVIDER_NAME);
    nonempty("/provider_name", &provider_name)?;
    let env_key = text(raw.env_key, DEFAULT_ENV_KEY);
    var("/env_key", &env_key)?;
    let sandbox_mode = text(raw.sandbox_mode, "workspace-write");
    if !SANDBOX_MODES.contains(&sandbox_mode.as_str()) {
        return Err(ConfigError::new(
            "/sandbox_mode",
            "must be read-only, workspace-write, danger-full-access or bypass",
        ));
    }
    let args = text(raw.args, DEFAULT_ARGS);
    if args.contains(['\n', '\0']) {
        return Err(ConfigError::new("/args", "must be one line"));
    }
    let status_schema = text(raw.status_schema, DEFAULT_STATUS_SCHEMA);
    nonempty("/status_schema", &status_schema)?;
    let workspace_mode = text(raw.workspace_mode, "work");
    if workspace_mode != "work" && workspace_mode != "clone" {
        return Err(ConfigError::new("/workspace_mode", "must be work or clone"));
    }
    if let Some(b) = &raw.branch {
        nonempty("/branch", b)?;
    }
    if let Some(d) = &raw.dir {
        nonempty("/dir", d)?;
        if !std::path::Path::new(d).is_absolute() {
            return Err(ConfigError::new("/dir", "must be an absolute path"));
        }
    }
    let env = raw.env.unwrap_or_default();
    for (name, value) in &env {
        var("/env", name)?;
        if value.contains('\0') {
            return Err(ConfigError::new(
                sdk::config::pointer(["env", name.as_str()]),
                "must not contain a NUL byte",
            ));
        }
    }
    let pass_env = raw.pass_env.unwrap_or_default();
    for (i, name) in pass_env.iter().enumerate() {
        var(&format!("/pass_env/{i}"), name)?;
    }
    let secret_env = sdk::agent::secret_env::check(raw.secret_env.unwrap_or_default())?;
    let mut settings = BTreeMap::new();
    for (key, value) in raw.config.unwrap_or_default() {
        let at = sdk::config::pointer(["config", key.as_str()]);
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !key_ok {
            return Err(ConfigError::new(
                at,
                "a setting is a dotted key of letters, digits, -, _ and .",
            ));
        }
        let reserved = RESERVED
            .iter()
            .any(|r| key == *r || key.starts_with(&format!("{r}.")));
        if reserved {
            return Err(ConfigError::new(
                at,
                "is set by the executor (the model, the provider, the toolbelt, the shell environment, plugins, analytics, the sandbox)",
            ));
        }
        let Some(v) = toml_value(&value) else {
            return Err(ConfigError::new(
                at,
                "must be a string, number, boolean or an array of them",
            ));
        };
        settings.insert(key, v);
    }
    Ok(CodexConfig {
        binary,
        model,
        models,
        base_url,
        provider,
        provider_name,
        env_key,
        sandbox_mode,
        args,
        structured: raw.structured.unwrap_or(true),
        status_schema,
        branch: raw.branch,
        workspace_mode,
        dir: raw.dir,
        env,
        pass_env,
        secret_env,
        config: settings,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_pointers_and_reserved_settings() {
        let c = parse(&json!({})).unwrap();
        assert_eq!(c.binary, "codex");
        assert_eq!(c.env_key, "OPENAI_API_KEY");
        assert_eq!(c.sandbox_mode, "workspace-write");
        assert!(c.warnings()[0].contains("OPENAI_API_KEY"));
        let e = parse(&json!({"sandbox_mode": "open"})).unwrap_err();
        assert_eq!(e.pointer, "/sandbox_mode");
        let e = parse(&json!({"config": {"model_providers.x.base_url": "u"}})).unwrap_err();
        assert_eq!(e.pointer, "/config/model_providers.x.base_url");
        let e = parse(&json!({"nope": 1})).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let c = parse(
            &json!({"config": {"model_reasoning_effort": "low", "x.y": [1, "a\"b"]},
            "secret_env": {"OPENAI_API_KEY": "api_key"}}),
        )
        .unwrap();
        assert_eq!(c.config["x.y"], "[1, \"a\\\"b\"]");
        assert!(c.warnings().is_empty());
        assert_eq!(c.secret_uses()[0].path, "/secret_env/OPENAI_API_KEY");
    }
}
