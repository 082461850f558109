//! codex's environment (later wins): the baseline of this process's own environment
//! (`PATH`, `HOME`, locale, certificates, `TMPDIR`) plus the config's `pass_env` and
//! the binding's `host_env`, with `OS_*`, `CODEX_*` and credential-like names
//! dropped; the workspace provider's layer and the run layer (`RunRequest.env`,
//! without `OS_*`); the toolbelt client (`OS_ENDPOINT`, `OS_TOKEN_FILE`, never the
//! token); the binding's `env`; the `secret_env` values; `CODEX_HOME`; the execution's
//! identity (`OS_SCOPE_ID`, `OS_WORK_ID`, `OS_EXECUTION_ID`, `OS_ATTEMPT`).
//!
//! This is codex's own environment. The agent's commands get only codex's `core`
//! set (`shell_environment_policy.inherit="core"`), and the toolbelt's MCP server
//! only what `env_vars` names, so neither sees the key.

use crate::config::CodexConfig;
use protocol::wire::RunRequest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
];

/// The variables the toolbelt's MCP server gets (`mcp_servers.open-conduit.env_vars`).
pub const TOOLBELT_VARS: &[&str] = &["OS_ENDPOINT", "OS_TOKEN_FILE"];

/// A name that looks like a credential.
pub fn credential_like(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "_TOKEN",
        "_API_KEY",
        "_KEY",
        "_SECRET",
        "_PASSWORD",
        "_CREDENTIALS",
    ]
    .iter()
    .any(|s| upper.ends_with(s))
        || matches!(upper.as_str(), "TOKEN" | "API_KEY" | "SECRET" | "PASSWORD")
}

fn dropped(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("OS_") || upper.starts_with("CODEX_") || credential_like(&upper)
}

fn valid(k: &str, v: &str) -> bool {
    !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0')
}

/// The toolbelt client's variables.
#[derive(Debug, Clone, Default)]
pub struct ToolbeltClient {
    /// `OS_ENDPOINT`.
    pub endpoint: String,
    /// `OS_TOKEN_FILE`.
    pub token_file: String,
}

/// The binding config as a segment records it: credential-like `env` values
/// replaced by `<redacted>`.
pub fn redacted_config(config: &serde_json::Value) -> serde_json::Value {
    let mut c = config.clone();
    if let Some(env) = c.get_mut("env").and_then(serde_json::Value::as_object_mut) {
        for (name, value) in env.iter_mut() {
            if credential_like(name) {
                *value = serde_json::Value::String("<redacted>".into());
            }
        }
    }
    c
}

/// Everything that goes into codex's environment.
pub struct Layers<'a> {
    /// This process's environment.
    pub own: &'a BTreeMap<String, String>,
    /// The run.
    pub req: &'a RunRequest,
    /// The config.
    pub cfg: &'a CodexConfig,
    /// The workspace provider's layer.
    pub provider: &'a BTreeMap<String, String>,
    /// The resolved `secret_env`.
    pub secrets: &'a BTreeMap<String, String>,
    /// The toolbelt client, when the run has a toolbelt.
    pub toolbelt: Option<&'a ToolbeltClient>,
    /// `CODEX_HOME`.
    pub home: &'a Path,
}

/// codex's environment.
pub fn build(l: &Layers<'_>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (k, v) in l.own {
        if (BASELINE.contains(&k.as_str()) || k.starts_with("LC_")) && valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in &l.req.host_env {
        if valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    env.retain(|k, _| !dropped(k));
    for name in &l.cfg.pass_env {
        if let Some(v) = l.own.get(name).filter(|v| valid(name, v)) {
            env.insert(name.clone(), v.clone());
        }
    }
    let layer = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.iter()
            .filter(|(k, v)| valid(k, v) && !k.to_ascii_uppercase().starts_with("OS_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    protocol::wire::apply_env(&mut env, &layer(l.provider));
    protocol::wire::apply_env(&mut env, &layer(&l.req.env));
    if let Some(t) = l.toolbelt {
        env.insert("OS_ENDPOINT".into(), t.endpoint.clone());
        env.insert("OS_TOKEN_FILE".into(), t.token_file.clone());
    }
    for (k, v) in &l.cfg.env {
        if valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in l.secrets {
        if valid(k, v) {
            env.insert(k.clone(), v.clone());
        }
    }
    env.insert("CODEX_HOME".into(), l.home.display().to_string());
    env.insert("OS_SCOPE_ID".into(), l.req.work.scope_id.clone());
    env.insert("OS_WORK_ID".into(), l.req.work.id.clone());
    env.insert("OS_EXECUTION_ID".into(), l.req.execution_id.clone());
    env.insert("OS_ATTEMPT".into(), l.req.attempt.to_string());
    env
}

/// Finds `program` as `env`'s `PATH` would.
pub fn find_program(program: &str, env: &BTreeMap<String, String>) -> Option<PathBuf> {
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn layers_drop_credentials_and_set_the_home() {
        let own: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "k"),
            ("CODEX_HOME", "/x"),
            ("X", "y"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let cfg = crate::config::parse(&json!({"env": {"A": "1"}})).unwrap();
        let req = RunRequest::default();
        let secrets = BTreeMap::from([("OPENAI_API_KEY".to_string(), "sk".to_string())]);
        let none = BTreeMap::new();
        let env = build(&Layers {
            own: &own,
            req: &req,
            cfg: &cfg,
            provider: &none,
            secrets: &secrets,
            toolbelt: None,
            home: Path::new("/h"),
        });
        assert_eq!(env["PATH"], "/bin");
        assert_eq!(env["OPENAI_API_KEY"], "sk");
        assert_eq!(env["CODEX_HOME"], "/h");
        assert_eq!(env["A"], "1");
        assert!(!env.contains_key("X"));
        assert_eq!(
            redacted_config(&json!({"env": {"OPENAI_API_KEY": "k"}}))["env"]["OPENAI_API_KEY"],
            "<redacted>"
        );
    }
}
