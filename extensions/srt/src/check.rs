//! The doctor check `sandbox` (`check.run`): can srt confine a command on this
//! machine? For each srt program the bindings' sandboxes name (`srt` when none
//! does), it finds the program, bubblewrap (`bwrap`) and srt's helpers (`socat`,
//! `rg`) on `PATH`, asks bubblewrap for a user namespace, and runs a trivial command
//! through srt with a settings file that allows nothing: ok when its output comes
//! back, fail with the reason (srt missing, bwrap missing, user namespaces refused,
//! srt failing) otherwise. Without a binding that uses an srt sandbox a failure is
//! only a warning. It also says how runs' process limits hold ([`process_limit`]):
//! as root without a writable pids cgroup they cannot, which warns (fails when a
//! binding sets `max_processes`).

use crate::config;
use protocol::wire::{CheckRunParams, CheckRunResult, ResourceBinding};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The check's name (doctor lists it as `srt_sandbox`).
pub const CHECK: &str = "sandbox";
/// The longest one probe may run: doctor waits 30 s for a whole `check.run`.
pub const PROBE_BOUND: Duration = Duration::from_secs(20);
/// The most srt programs probed.
pub const MAX_PROGRAMS: usize = 8;
/// What the probe command prints.
const MARKER: &str = "oc-srt-sandbox-ok";
/// The most bytes of a failing probe's error output reported.
const MAX_DETAIL: usize = 400;

/// One probe's failure: a stable code and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `srt_missing`, `bwrap_missing`, `helper_missing`, `user_namespaces_refused`,
    /// `srt_failed`.
    pub code: &'static str,
    /// Why.
    pub reason: String,
}

fn fail(code: &'static str, reason: impl Into<String>) -> Failure {
    Failure {
        code,
        reason: reason.into(),
    }
}

/// `program` as `PATH` finds it (a path with a `/` as it is).
pub fn find(program: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

fn clipped(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    protocol::wire::clip_line(text, MAX_DETAIL)
}

/// Runs `program args…` bounded by [`PROBE_BOUND`]: its output, or why not.
async fn run(program: &Path, args: &[&str]) -> Result<std::process::Output, String> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{} does not start: {e}", program.display()))?;
    match tokio::time::timeout(PROBE_BOUND, child.wait_with_output()).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("{}: {e}", program.display())),
        Err(_) => Err(format!(
            "{} did not finish within {PROBE_BOUND:?}",
            program.display()
        )),
    }
}

/// The settings of the probe: nothing readable but the system, nothing writable,
/// no network.
fn probe_settings() -> serde_json::Value {
    serde_json::json!({
        "network": {"allowedDomains": [], "deniedDomains": [],
                    "allowAllUnixSockets": true, "allowLocalBinding": false},
        "filesystem": {"denyRead": [], "allowRead": [], "allowWrite": [], "denyWrite": []},
    })
}

/// Probes `srt`: answers what it ran, or the first thing that fails.
pub async fn probe(srt: &str, scratch: &Path) -> Result<String, Failure> {
    let Some(program) = find(srt) else {
        return Err(fail(
            "srt_missing",
            format!("{srt:?} is not an executable on PATH (npm install -g @anthropic-ai/sandbox-runtime)"),
        ));
    };
    let Some(bwrap) = find("bwrap") else {
        return Err(fail(
            "bwrap_missing",
            "bubblewrap (bwrap) is not on PATH: srt confines commands with it on Linux",
        ));
    };
    let helpers: Vec<&str> = ["socat", "rg"]
        .into_iter()
        .filter(|h| find(h).is_none())
        .collect();
    if !helpers.is_empty() {
        return Err(fail(
            "helper_missing",
            format!(
                "srt needs {} on PATH (packages socat, ripgrep)",
                helpers.join(" and ")
            ),
        ));
    }
    let ns = run(
        &bwrap,
        &[
            "--ro-bind",
            "/",
            "/",
            "--unshare-user",
            "--unshare-net",
            "true",
        ],
    )
    .await
    .map_err(|e| fail("user_namespaces_refused", e))?;
    if !ns.status.success() {
        return Err(fail(
            "user_namespaces_refused",
            format!(
                "bubblewrap cannot make a user namespace here ({}): {}",
                ns.status,
                clipped(&ns.stderr)
            ),
        ));
    }
    let settings = scratch.join(format!("srt-check-{}.json", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&settings)?;
        f.write_all(probe_settings().to_string().as_bytes())
    })();
    if let Err(e) = written {
        return Err(fail(
            "srt_failed",
            format!(
                "cannot write the probe's settings {}: {e}",
                settings.display()
            ),
        ));
    }
    let settings_arg = settings.display().to_string();
    let out = run(
        &program,
        &["--settings", &settings_arg, "-c", &format!("echo {MARKER}")],
    )
    .await;
    let _ = std::fs::remove_file(&settings);
    let out = out.map_err(|e| fail("srt_failed", e))?;
    if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains(MARKER) {
        return Err(fail(
            "srt_failed",
            format!(
                "{} did not run a command in a sandbox ({}): {}",
                program.display(),
                out.status,
                clipped(&out.stderr)
            ),
        ));
    }
    Ok(format!(
        "{} ran a command in a sandbox (bubblewrap {})",
        program.display(),
        bwrap.display()
    ))
}

/// Whether runs' process limits hold here: how, or (status, code, why not).
/// `RLIMIT_NPROC` (`ulimit -u` inside the sandbox) holds every user but root; as
/// root a writable pids cgroup is needed. `explicit` names the bindings that set
/// `max_processes`: their runs are refused without it (fail), the default's run
/// unlimited (warn).
pub fn process_limit(explicit: &[String]) -> Result<String, (&'static str, &'static str, String)> {
    if !crate::limit::is_root() {
        return Ok(
            "runs are held to max_processes by RLIMIT_NPROC in their user namespace (ulimit -u)"
                .into(),
        );
    }
    match crate::limit::base() {
        Ok(base) => Ok(format!(
            "runs are held to max_processes by a pids cgroup under {} (RLIMIT_NPROC does not limit root)",
            base.display()
        )),
        Err(why) if explicit.is_empty() => Err((
            "warn",
            "process_limit_unenforced",
            format!(
                "the provider runs as root, whom RLIMIT_NPROC does not limit, and {why}: runs have no process limit (run the suite as its service user, or give it a writable pids cgroup)"
            ),
        )),
        Err(why) => Err((
            "fail",
            "process_limit_unavailable",
            format!(
                "{} set max_processes, which cannot hold: the provider runs as root, whom RLIMIT_NPROC does not limit, and {why}; their runs are refused",
                explicit.join(", ")
            ),
        )),
    }
}

/// `check.run`: probes each srt program the bindings' sandboxes name.
pub async fn check(p: &CheckRunParams, scratch: &Path) -> CheckRunResult {
    if p.check != CHECK {
        return CheckRunResult {
            status: "warn".into(),
            code: "unknown_check".into(),
            detail: format!("no check named {:?} (this package has `{CHECK}`)", p.check),
            ..CheckRunResult::default()
        };
    }
    let mut programs: Vec<String> = Vec::new();
    let mut invalid = Vec::new();
    // Bindings that set `max_processes` themselves.
    let mut explicit = Vec::new();
    for scope in &p.config.scopes {
        for b in &scope.bindings {
            let Some(sandbox) = &b.sandbox else { continue };
            // A sandbox is a provider type and its config, as a resource is.
            let Ok(sandbox) = serde_json::from_value::<ResourceBinding>(sandbox.clone()) else {
                continue;
            };
            if sandbox.resource_type != crate::SANDBOX_TYPE {
                continue;
            }
            match config::parse(&sandbox.config) {
                Ok(c) => {
                    if c.max_processes.is_some() {
                        explicit.push(format!("{}.{}", scope.id, b.name));
                    }
                    if !programs.contains(&c.srt) {
                        programs.push(c.srt);
                    }
                }
                Err(e) => invalid.push(format!("{}.{}: {e}", scope.id, b.name)),
            }
        }
    }
    let used = !programs.is_empty() || !invalid.is_empty();
    if programs.is_empty() {
        programs.push("srt".into());
    }
    let mut items = Vec::new();
    if programs.len() > MAX_PROGRAMS {
        items.push(format!(
            "{} more srt programs not probed (the limit is {MAX_PROGRAMS})",
            programs.len() - MAX_PROGRAMS
        ));
        programs.truncate(MAX_PROGRAMS);
    }
    let mut first: Option<Failure> = None;
    for srt in &programs {
        match probe(srt, scratch).await {
            Ok(what) => items.push(what),
            Err(f) => {
                items.push(format!("{srt}: {}", f.reason));
                first.get_or_insert(f);
            }
        }
    }
    items.extend(
        invalid
            .iter()
            .map(|i| format!("invalid sandbox config {i}")),
    );
    let limit = process_limit(&explicit);
    items.push(match &limit {
        Ok(how) => how.clone(),
        Err((_, _, why)) => why.clone(),
    });
    let (status, code, detail) = match (&first, invalid.is_empty()) {
        (None, true) => ("ok", String::new(), "srt confines commands here".to_owned()),
        (None, false) => (
            "fail",
            "invalid_config".to_owned(),
            format!("{} binding sandbox configs do not read", invalid.len()),
        ),
        (Some(f), _) => (
            if used { "fail" } else { "warn" },
            f.code.to_owned(),
            if used {
                f.reason.clone()
            } else {
                format!("no binding uses an srt sandbox, but: {}", f.reason)
            },
        ),
    };
    // The process limit: a limit that cannot hold fails where a binding sets it,
    // and warns where only the default would apply.
    let (status, code, detail) = match limit {
        Err((limit_status, limit_code, why))
            if status == "ok" || (status == "warn" && limit_status == "fail") =>
        {
            (limit_status, limit_code.to_owned(), why)
        }
        _ => (status, code, detail),
    };
    CheckRunResult {
        ok: Some(status == "ok"),
        status: status.into(),
        code,
        detail,
        items,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{Binding, CheckConfig, CheckScope};
    use serde_json::json;

    fn params(srt: &str) -> CheckRunParams {
        CheckRunParams {
            check: CHECK.into(),
            deep: false,
            config: CheckConfig {
                scopes: vec![CheckScope {
                    id: "demo".into(),
                    bindings: vec![Binding {
                        name: "run".into(),
                        executor: "shell".into(),
                        sandbox: Some(json!({"type": "srt", "config": {"srt": srt}})),
                        ..Binding::default()
                    }],
                    ..CheckScope::default()
                }],
                ..CheckConfig::default()
            },
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_limit_that_cannot_hold_fails_only_where_a_binding_sets_it() {
        let who = vec!["demo.run".to_owned()];
        match (process_limit(&[]), process_limit(&who)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b);
                assert!(a.contains("held to max_processes"), "{a}");
            }
            (Err(warn), Err(fail)) => {
                assert!(crate::limit::is_root());
                assert_eq!((warn.0, warn.1), ("warn", "process_limit_unenforced"));
                assert_eq!((fail.0, fail.1), ("fail", "process_limit_unavailable"));
                assert!(
                    fail.2.contains("demo.run") && fail.2.contains("root"),
                    "{fail:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_srt_fails_saying_so() {
        let r = rt().block_on(check(
            &params("/nonexistent/oc-srt-check/srt"),
            &std::env::temp_dir(),
        ));
        assert_eq!(r.status, "fail", "{r:?}");
        assert_eq!(r.code, "srt_missing", "{r:?}");
        assert!(r.detail.contains("/nonexistent/oc-srt-check/srt"), "{r:?}");
        let other = CheckRunParams {
            check: "nope".into(),
            ..params("srt")
        };
        assert_eq!(
            rt().block_on(check(&other, Path::new("/tmp"))).code,
            "unknown_check"
        );
    }

    /// With the pinned srt (`npm ci --prefix tests/srt`), bubblewrap and user
    /// namespaces, the check passes; else it says which is missing.
    #[test]
    fn the_check_runs_a_command_through_the_real_srt() {
        let srt =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/srt/node_modules/.bin/srt");
        let r = rt().block_on(check(
            &params(&srt.display().to_string()),
            &std::env::temp_dir(),
        ));
        if r.status == "ok" {
            assert!(r.items[0].contains("ran a command in a sandbox"), "{r:?}");
            // How runs' process limits hold here.
            assert!(
                r.items.iter().any(|i| i.contains("held to max_processes")),
                "{r:?}"
            );
            return;
        }
        // Root without a writable pids cgroup: the default's runs are unlimited.
        if r.code == "process_limit_unenforced" {
            assert_eq!(r.status, "warn", "{r:?}");
            assert!(crate::limit::is_root() && crate::limit::base().is_err());
            eprintln!("note: {}", r.detail);
            return;
        }
        let peers = std::env::var_os("OC_REQUIRE_PEERS").is_some();
        match r.code.as_str() {
            // The kernel's refusal is no package's to mend.
            "user_namespaces_refused" => eprintln!("SKIPPED: {}", r.detail),
            "srt_missing" | "bwrap_missing" | "helper_missing" if !peers => {
                eprintln!("SKIPPED: {} (.ci/run installs it)", r.detail)
            }
            _ => panic!("the check failed: {r:?}"),
        }
    }
}
