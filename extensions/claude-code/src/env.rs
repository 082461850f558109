//! claude's environment, in the spec's layers (later wins):
//!
//! 1. the sanitized baseline: the shell baseline of this process's own
//!    environment, plus `CLAUDE_CONFIG_DIR` and the config's `pass_env` names
//!    from it, plus the binding's `host_env`; with `ANTHROPIC_API_KEY`,
//!    `CLAUDECODE`, `CLAUDE_CODE_*`, `OS_*` and credential-like names dropped;
//!    then `CLAUDE_CODE_AUTO_COMPACT_WINDOW` from `auto_compact_tokens`;
//! 2. the provider layer (none: workspace resources are not built);
//! 3. the run layer (`RunRequest.env`), without `OS_*` names; with a toolbelt
//!    it also gets the toolbelt client (`OS_ENDPOINT`, `OS_TOKEN_FILE`, the
//!    toolbelt directory first on `PATH`), never the token itself;
//! 4. the binding's `env`;
//! 5. the selected secrets (`secret_env`);
//! 6. the execution identity: `OS_SCOPE_ID`, `OS_WORK_ID`, `OS_EXECUTION_ID`,
//!    `OS_ATTEMPT`.

use crate::config::ClaudeConfig;
use protocol::wire::RunRequest;
use std::collections::BTreeMap;
use std::path::Path;

/// The variable `auto_compact_tokens` sets.
pub const AUTO_COMPACT: &str = "CLAUDE_CODE_AUTO_COMPACT_WINDOW";

/// The shell baseline: the names a command needs to run as the user.
const BASELINE: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CLAUDE_CONFIG_DIR",
];

/// True for a name that must never reach claude from the baseline.
pub fn dropped(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper == "ANTHROPIC_API_KEY"
        || upper == "ANTHROPIC_AUTH_TOKEN"
        || upper == "CLAUDECODE"
        || upper.starts_with("CLAUDE_CODE_")
        || upper.starts_with("OS_")
        || credential_like(&upper)
}

/// The binding config as a segment records it (`segment.json`): the values of its
/// `env` whose names look like credentials (`ANTHROPIC_API_KEY` among them)
/// replaced by `<redacted>`.
pub fn redacted_config(config: &serde_json::Value) -> serde_json::Value {
    let mut c = config.clone();
    if let Some(env) = c.get_mut("env").and_then(serde_json::Value::as_object_mut) {
        for (name, value) in env.iter_mut() {
            let upper = name.to_ascii_uppercase();
            if credential_like(&upper) {
                *value = serde_json::Value::String("<redacted>".into());
            }
        }
    }
    c
}

/// A name that looks like a credential.
pub fn credential_like(upper: &str) -> bool {
    ["_TOKEN", "_API_KEY", "_SECRET", "_PASSWORD", "_CREDENTIALS"]
        .iter()
        .any(|s| upper.ends_with(s))
        || matches!(upper, "TOKEN" | "API_KEY" | "SECRET" | "PASSWORD")
}

fn valid(k: &str, v: &str) -> bool {
    !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0')
}

/// The toolbelt client for a run layer: where the endpoint and token file are.
#[derive(Debug, Clone, Default)]
pub struct ToolbeltClient {
    /// `OS_ENDPOINT`.
    pub endpoint: String,
    /// `OS_TOKEN_FILE`.
    pub token_file: String,
    /// The toolbelt directory (first on `PATH`).
    pub dir: String,
}

/// claude's environment for `req` under `cfg`. `own` is this process's
/// environment; `secrets` the resolved `secret_env` values.
pub fn build(
    own: &BTreeMap<String, String>,
    req: &RunRequest,
    cfg: &ClaudeConfig,
    provider: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, String>,
    toolbelt: Option<&ToolbeltClient>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    // 1. The baseline.
    for (k, v) in own {
        let base = BASELINE.contains(&k.as_str()) || k.starts_with("LC_");
        if base && valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    let mut passed_compact = false;
    for name in &cfg.pass_env {
        if let Some(v) = own.get(name) {
            if name == AUTO_COMPACT {
                passed_compact = true;
            }
            if valid(name, v) {
                env.insert(name.clone(), v.clone());
            }
        }
    }
    for (k, v) in &req.host_env {
        if valid(k, v) {
            if k == AUTO_COMPACT {
                passed_compact = true;
            }
            env.insert(k.clone(), v.clone());
        }
    }
    env.retain(|k, _| !dropped(k) || (k == AUTO_COMPACT && passed_compact));
    if cfg.auto_compact_tokens > 0 && !passed_compact {
        env.insert(
            AUTO_COMPACT.to_string(),
            cfg.auto_compact_tokens.to_string(),
        );
    }
    // 2. The provider layer (the workspace's `GIT_*`; never `OS_*`), then 3. the run
    // layer (the extensions' `run.environment`): later wins, git's `GIT_CONFIG_*`
    // pairs are appended.
    let layer = |l: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        l.iter()
            .filter(|(k, v)| valid(k, v) && !k.to_ascii_uppercase().starts_with("OS_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    protocol::wire::apply_env(&mut env, &layer(provider));
    let run = layer(&req.env);
    let run_layer = !run.is_empty();
    protocol::wire::apply_env(&mut env, &run);
    if run_layer {
        if let Some(t) = toolbelt {
            env.insert("OS_ENDPOINT".into(), t.endpoint.clone());
            env.insert("OS_TOKEN_FILE".into(), t.token_file.clone());
            if !t.dir.is_empty() {
                let path = env.get("PATH").cloned().unwrap_or_default();
                let joined = if path.is_empty() {
                    t.dir.clone()
                } else {
                    format!("{}:{path}", t.dir)
                };
                env.insert("PATH".into(), joined);
            }
        }
    }
    // 4. The binding's env.
    for (k, v) in &cfg.env {
        if valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    // 5. The selected secrets.
    for (k, v) in secrets {
        if valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    // 6. The execution identity.
    env.insert("OS_SCOPE_ID".into(), req.work.scope_id.clone());
    env.insert("OS_WORK_ID".into(), req.work.id.clone());
    env.insert("OS_EXECUTION_ID".into(), req.execution_id.clone());
    env.insert("OS_ATTEMPT".into(), req.attempt.to_string());
    env
}

/// Claude's config directory under `env`: `CLAUDE_CONFIG_DIR`, else
/// `$HOME/.claude`.
pub fn claude_config_dir(env: &BTreeMap<String, String>) -> std::path::PathBuf {
    if let Some(d) = env.get("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return d.into();
    }
    let home = env.get("HOME").cloned().unwrap_or_default();
    Path::new(&home).join(".claude")
}

/// Finds `program` as `env`'s `PATH` would: a path with a `/` as it is, else
/// the first executable file of that name on `PATH`.
pub fn find_program(program: &str, env: &BTreeMap<String, String>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = Path::new(program);
        return executable(p).then(|| p.to_path_buf());
    }
    let path = env.get("PATH").cloned().unwrap_or_default();
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
}

#[cfg(test)]
mod redaction_tests {
    #[test]
    fn a_recorded_config_holds_no_credential() {
        let c = serde_json::json!({"model": "m", "env": {"ANTHROPIC_API_KEY": "sk-1",
            "GH_TOKEN": "t", "ANTHROPIC_BASE_URL": "http://x"}});
        let r = super::redacted_config(&c);
        assert_eq!(r["env"]["ANTHROPIC_API_KEY"], "<redacted>");
        assert_eq!(r["env"]["GH_TOKEN"], "<redacted>");
        assert_eq!(r["env"]["ANTHROPIC_BASE_URL"], "http://x");
        assert_eq!(r["model"], "m");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn layers() {
        let own: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("ANTHROPIC_API_KEY", "k"),
            ("CLAUDECODE", "1"),
            ("CLAUDE_CODE_ENTRYPOINT", "x"),
            ("HOSTING_TOKEN", "t"),
            ("RANDOM_DAEMON_VAR", "r"),
            ("HTTPS_PROXY", "p"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let cfg =
            crate::config::parse(&json!({"pass_env": ["HTTPS_PROXY"], "env": {"A": "1"}})).unwrap();
        let mut req = RunRequest {
            execution_id: "ex".into(),
            attempt: 2,
            ..RunRequest::default()
        };
        req.work.id = "w".into();
        req.work.scope_id = "s".into();
        req.host_env.insert("OS_TOKEN".into(), "no".into());
        let env = build(&own, &req, &cfg, &BTreeMap::new(), &BTreeMap::new(), None);
        assert_eq!(env.get("PATH").unwrap(), "/bin");
        assert_eq!(env.get("HTTPS_PROXY").unwrap(), "p");
        assert_eq!(env.get("A").unwrap(), "1");
        assert_eq!(env.get(AUTO_COMPACT).unwrap(), "600000");
        assert_eq!(env.get("OS_ATTEMPT").unwrap(), "2");
        for gone in [
            "ANTHROPIC_API_KEY",
            "CLAUDECODE",
            "CLAUDE_CODE_ENTRYPOINT",
            "HOSTING_TOKEN",
            "RANDOM_DAEMON_VAR",
            "OS_TOKEN",
        ] {
            assert!(!env.contains_key(gone), "{gone}");
        }
        let cfg0 = crate::config::parse(&json!({"auto_compact_tokens": 0})).unwrap();
        assert!(
            !build(&own, &req, &cfg0, &BTreeMap::new(), &BTreeMap::new(), None)
                .contains_key(AUTO_COMPACT)
        );
        let over = crate::config::parse(&json!({"env": {AUTO_COMPACT: "5"}})).unwrap();
        assert_eq!(
            build(&own, &req, &over, &BTreeMap::new(), &BTreeMap::new(), None)
                .get(AUTO_COMPACT)
                .unwrap(),
            "5"
        );
    }
}
