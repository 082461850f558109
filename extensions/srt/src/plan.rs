//! Planning a launch: the settings file and the `srt` invocation.

use crate::config;
use protocol::sandbox::{SandboxPlan, SandboxProviderPlanParams};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The plan data's key for the settings file.
pub const SETTINGS: &str = "settings";
/// The plan data's key for the settings file's SHA-256 (hex).
pub const SHA256: &str = "sha256";

fn unavailable(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxUnavailable, message)
}

/// SHA-256 of `bytes`, hex.
pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `argv` as one POSIX shell command line (each argument single-quoted).
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in a.iter().chain(b) {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// srt's settings for the needs and config.
pub fn settings(p: &SandboxProviderPlanParams, c: &config::SrtConfig) -> Value {
    let n = &p.needs;
    json!({
        "network": {
            "allowedDomains": union(&n.hosts, &c.allowed_domains),
            "deniedDomains": [],
            // Unix sockets are kept from the command by the filesystem (the bus and
            // toolbelt sockets are denied paths): srt's seccomp filter for them needs
            // a helper that cannot run everywhere (see docs/decisions.md).
            "allowAllUnixSockets": true,
            "allowLocalBinding": false,
        },
        "filesystem": {
            "denyRead": union(&n.deny, &c.deny_read),
            "allowRead": union(&n.read, &n.write),
            "allowWrite": n.write,
            "denyWrite": n.deny,
        },
    })
}

/// `sandbox_provider.plan`: writes the launch's settings file under `state_dir`
/// and answers the `srt` invocation.
pub fn plan(
    state_dir: Option<&Path>,
    p: &SandboxProviderPlanParams,
) -> Result<SandboxPlan, RpcError> {
    if p.sandbox_type != crate::SANDBOX_TYPE {
        return Err(RpcError::invalid_params(format!(
            "this package plans sandboxes of type srt, not {:?}",
            p.sandbox_type
        )));
    }
    let c = config::parse(&p.config)
        .map_err(|e| RpcError::new(Code::SandboxDenied, format!("invalid srt config: {e}")))?;
    if p.launch.argv.is_empty() {
        return Err(RpcError::invalid_params("the launch has no program"));
    }
    let Some(state) = state_dir else {
        return Err(unavailable(
            "the host gave no state directory for settings files",
        ));
    };
    let dir = state.join("settings");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| unavailable(format!("cannot create {}: {e}", dir.display())))?;
    let bytes = serde_json::to_vec_pretty(&settings(p, &c))
        .map_err(|e| unavailable(format!("the settings do not serialise: {e}")))?;
    let digest = sha256(&bytes);
    let safe: String = p
        .execution_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(128)
        .collect();
    let path = dir.join(format!("{safe}-{}.json", &digest[..16]));
    let written = (|| -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    written.map_err(|e| unavailable(format!("cannot write {}: {e}", path.display())))?;
    let settings_path = path.display().to_string();
    // srt makes its bridge sockets in its own TMPDIR (a socket's path is at most 108
    // bytes: it keeps /tmp) and sets the command's TMPDIR from CLAUDE_CODE_TMPDIR:
    // the launch's TMPDIR goes there.
    let mut env = p.launch.env.clone();
    if let Some(tmp) = env.remove("TMPDIR") {
        env.entry("CLAUDE_CODE_TMPDIR".to_owned()).or_insert(tmp);
    }
    Ok(SandboxPlan {
        argv: vec![
            c.srt.clone(),
            "--settings".into(),
            settings_path.clone(),
            "-c".into(),
            shell_line(&p.launch.argv),
        ],
        cwd: p.launch.cwd.clone(),
        env,
        data: json!({SETTINGS: settings_path, SHA256: digest}),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::sandbox::{SandboxLaunch, SandboxNeeds};

    #[test]
    fn a_plan_is_srt_with_a_settings_file_of_the_needs() {
        let dir = std::env::temp_dir().join(format!("oc-srt-plan-{}", std::process::id()));
        let p = SandboxProviderPlanParams {
            sandbox_type: "srt".into(),
            config: json!({"allowed_domains": ["api.github.com"]}),
            execution_id: "exec_1".into(),
            launch: SandboxLaunch {
                argv: vec!["sh".into(), "-c".into(), "echo 'hi'".into()],
                cwd: "/w".into(),
                env: [("TMPDIR".to_owned(), "/w/tmp".to_owned())].into(),
            },
            needs: SandboxNeeds {
                write: vec!["/w".into()],
                deny: vec!["/var/lib/oc".into()],
                hosts: vec!["api.anthropic.com".into()],
                ..SandboxNeeds::default()
            },
        };
        let plan = plan(Some(&dir), &p).unwrap();
        assert_eq!(plan.argv[0], "srt");
        // srt keeps its own TMPDIR and gives the command the launch's.
        assert_eq!(plan.env.get("TMPDIR"), None);
        assert_eq!(plan.env["CLAUDE_CODE_TMPDIR"], "/w/tmp");
        assert_eq!(plan.argv[4], r#"'sh' '-c' 'echo '\''hi'\'''"#);
        let file = std::fs::read(&plan.argv[2]).unwrap();
        assert_eq!(plan.data[SHA256], sha256(&file));
        let s: Value = serde_json::from_slice(&file).unwrap();
        assert_eq!(s["filesystem"]["allowWrite"], json!(["/w"]));
        assert_eq!(s["filesystem"]["denyRead"], json!(["/var/lib/oc"]));
        assert_eq!(
            s["network"]["allowedDomains"],
            json!(["api.anthropic.com", "api.github.com"])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
