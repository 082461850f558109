//! The doctor check `codex` (`check.run`): each codex binding's CLI is found (its
//! `binary`, on the PATH its `env` and this process give it) and answers
//! `--version`; `ok` with each binding's version, or `fail` naming the binding and
//! what is wrong (`binary_missing`, `binary_failed`). Without a codex binding it
//! checks the default `codex` and only warns.

use crate::config;
use protocol::wire::{CheckRunParams, CheckRunResult};
use std::collections::BTreeMap;
use std::time::Duration;

/// The check's name.
pub const CHECK: &str = "codex";
/// How long `codex --version` may take.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

/// The CLI's first line of `--version`, or why it has none.
async fn version(binary: &std::path::Path) -> Result<String, String> {
    let run = tokio::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(VERSION_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!(
                "`{} --version` did not answer within {VERSION_TIMEOUT:?}",
                binary.display()
            )
        })?
        .map_err(|e| format!("`{} --version` did not start: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or_default().trim().to_owned();
    if !out.status.success() || line.is_empty() {
        return Err(format!(
            "`{} --version` ended {} saying {:?}",
            binary.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(protocol::wire::clip_line(&line, 200))
}

/// Runs the check.
pub async fn check(p: &CheckRunParams) -> CheckRunResult {
    if p.check != CHECK {
        return CheckRunResult {
            status: "warn".into(),
            code: "unknown_check".into(),
            detail: format!("no check named {:?}", p.check),
            ..CheckRunResult::default()
        };
    }
    let own: BTreeMap<String, String> = std::env::vars().collect();
    let mut bindings: Vec<(String, String, BTreeMap<String, String>)> = Vec::new();
    for scope in &p.config.scopes {
        for b in scope
            .bindings
            .iter()
            .filter(|b| b.executor == crate::executor::EXECUTOR)
        {
            // A config that does not parse is config check's to report.
            if let Ok(c) = config::parse(&b.config) {
                let mut env = own.clone();
                env.extend(c.env.clone());
                bindings.push((format!("{}.{}", scope.id, b.name), c.binary, env));
            }
        }
    }
    let none = bindings.is_empty();
    if none {
        bindings.push(("(no codex binding)".into(), "codex".into(), own));
    }
    let mut items = Vec::new();
    let mut failed = Vec::new();
    for (name, binary, env) in &bindings {
        let Some(found) = crate::env::find_program(binary, env) else {
            failed.push((
                "binary_missing",
                format!("{name}: the Codex CLI `{binary}` was not found"),
            ));
            continue;
        };
        match version(&found).await {
            Ok(v) => items.push(format!("{name}: {} ({v})", found.display())),
            Err(why) => failed.push(("binary_failed", format!("{name}: {why}"))),
        }
    }
    if let Some((code, _)) = failed.first() {
        return CheckRunResult {
            status: if none { "warn" } else { "fail" }.into(),
            code: (*code).into(),
            detail: failed
                .iter()
                .map(|(_, d)| d.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            items,
            ..CheckRunResult::default()
        };
    }
    CheckRunResult {
        status: "ok".into(),
        detail: format!("the Codex CLI answers: {}", items.join("; ")),
        items,
        ..CheckRunResult::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{Binding, CheckConfig, CheckScope};
    use serde_json::json;

    fn params(binary: &str) -> CheckRunParams {
        CheckRunParams {
            check: CHECK.into(),
            config: CheckConfig {
                scopes: vec![CheckScope {
                    id: "demo".into(),
                    bindings: vec![Binding {
                        name: "agent".into(),
                        executor: "codex".into(),
                        config: json!({"binary": binary}),
                        ..Binding::default()
                    }],
                    ..CheckScope::default()
                }],
                ..CheckConfig::default()
            },
            ..CheckRunParams::default()
        }
    }

    #[tokio::test]
    async fn a_missing_or_failing_cli_fails_naming_the_binding_and_a_working_one_is_ok() {
        let r = check(&params("/nonexistent/codex")).await;
        assert_eq!(
            (r.status.as_str(), r.code.as_str()),
            ("fail", "binary_missing"),
            "{r:?}"
        );
        assert!(r.detail.contains("demo.agent"), "{r:?}");
        // A program that ends in failure.
        let r = check(&params("/bin/false")).await;
        assert_eq!(
            (r.status.as_str(), r.code.as_str()),
            ("fail", "binary_failed"),
            "{r:?}"
        );
        // A program that answers a version line.
        let dir = std::env::temp_dir().join(format!("oc-codex-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("codex");
        std::fs::write(&fake, "#!/bin/sh\necho 'codex-cli 9.9.9'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = check(&params(&fake.display().to_string())).await;
        assert_eq!(r.status, "ok", "{r:?}");
        assert!(r.detail.contains("codex-cli 9.9.9"), "{r:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
