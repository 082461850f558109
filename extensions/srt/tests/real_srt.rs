#![allow(clippy::unwrap_used)]
//! The provider's plans run through the real srt (pinned in tests/srt) and
//! bubblewrap, as root and as an unprivileged user (`nobody`, through `setpriv`):
//! srt's own default write paths (`~/.npm/_logs`, `~/.claude/debug`,
//! `/tmp/claude`) take no write and nothing lands on the host, while the
//! workspace takes one; a fork bomb stops at the binding's `max_processes`.
//!
//! Skips, saying why, where srt, bubblewrap or user namespaces are missing (and
//! fails under OC_REQUIRE_PEERS=1 unless the kernel refuses the namespaces); the
//! unprivileged half needs root (to switch users) and `setpriv`, the root half
//! root.

use oc_srt::plan::{plan, CGROUP, SETTINGS, SRT_ARGS};
use protocol::sandbox::{SandboxLaunch, SandboxNeeds, SandboxPlan, SandboxProviderPlanParams};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The unprivileged user.
const NOBODY: u32 = 65534;

fn srt() -> Option<PathBuf> {
    let srt = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/srt/node_modules/.bin/srt");
    let scratch = std::env::temp_dir();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt.block_on(oc_srt::check::probe(&srt.display().to_string(), &scratch)) {
        Ok(_) => Some(srt),
        Err(f) => {
            let peers = std::env::var_os("OC_REQUIRE_PEERS").is_some();
            assert!(
                !peers || f.code == "user_namespaces_refused",
                "srt does not run: {f:?}"
            );
            eprintln!("SKIPPED: {}", f.reason);
            None
        }
    }
}

fn is_root() -> bool {
    oc_srt::limit::is_root()
}

/// Who runs srt: root (the provider's own plan, with its pids cgroup) and, when
/// the test is root, `nobody` (the srt part of the plan, as a provider that is not
/// root plans it).
fn users() -> Vec<Option<u32>> {
    if !is_root() {
        eprintln!("note: not root: srt runs as this user only");
        return vec![None];
    }
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !setpriv {
        eprintln!("SKIPPED (unprivileged half): setpriv is missing");
        return vec![None];
    }
    vec![None, Some(NOBODY)]
}

fn chown_all(path: &Path, uid: u32) {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

struct Scratch {
    dir: PathBuf,
    home: PathBuf,
    work: PathBuf,
    user: Option<u32>,
}

impl Scratch {
    fn new(name: &str, user: Option<u32>) -> Scratch {
        let who = user.map_or("self".to_owned(), |u| u.to_string());
        let dir =
            std::env::temp_dir().join(format!("oc-srt-real-{name}-{who}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let home = dir.join("home");
        let work = dir.join("work");
        // srt's default write paths exist, as after npm or Claude Code ran: srt
        // would bind them writable.
        for d in [
            home.join(".npm/_logs"),
            home.join(".claude/debug"),
            work.clone(),
        ] {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch {
            dir,
            home,
            work,
            user,
        }
    }

    fn params(&self, id: &str, config: Value, script: &str) -> SandboxProviderPlanParams {
        let env = [
            ("HOME", self.home.display().to_string()),
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("W", self.work.display().to_string()),
            ("TMPDIR", self.work.display().to_string()),
        ]
        .map(|(k, v)| (k.to_owned(), v));
        SandboxProviderPlanParams {
            sandbox_type: "srt".into(),
            config,
            execution_id: format!("{id}_{}_{}", self.user.unwrap_or(0), std::process::id()),
            launch: SandboxLaunch {
                argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
                cwd: self.work.display().to_string(),
                env: env.into(),
            },
            needs: SandboxNeeds {
                write: vec![self.work.display().to_string()],
                ..SandboxNeeds::default()
            },
        }
    }

    /// Plans `p` and runs the plan (as `nobody`: its srt part, as a provider
    /// that is not root plans it).
    fn run(&self, p: &SandboxProviderPlanParams) -> (SandboxPlan, Output) {
        let plan = plan(Some(&self.dir.join("state")), p).unwrap();
        let argv: Vec<String> = match self.user {
            None => plan.argv.clone(),
            Some(uid) => {
                chown_all(&self.dir, uid);
                let srt = &plan.argv[plan.argv.len() - SRT_ARGS - 1..];
                let mut argv = vec![
                    "setpriv".to_owned(),
                    format!("--reuid={uid}"),
                    format!("--regid={uid}"),
                    "--clear-groups".to_owned(),
                ];
                argv.extend(srt.iter().cloned());
                argv
            }
        };
        assert!(Path::new(plan.data[SETTINGS].as_str().unwrap()).exists());
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&self.work)
            .env_clear()
            .envs(&plan.env)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (plan, out)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn forget(plan: &SandboxPlan) {
    if let Some(group) = plan.data[CGROUP].as_str() {
        let _ = std::fs::remove_dir(group);
    }
}

#[test]
fn srt_default_write_paths_take_no_write_and_land_nothing_on_the_host() {
    let Some(srt) = srt() else { return };
    // /tmp/claude as Claude Code leaves it: srt binds it writable when it exists.
    let tmp_claude = Path::new("/tmp/claude");
    let made_tmp_claude = !tmp_claude.exists();
    if made_tmp_claude {
        std::fs::create_dir_all(tmp_claude).unwrap();
        std::fs::set_permissions(tmp_claude, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let marker = format!("oc-srt-escape-{}", std::process::id());
    let script = format!(
        "echo ok > \"$W/inside\" || echo 'workspace refused'
for d in \"$HOME/.npm/_logs\" \"$HOME/.claude/debug\" /tmp/claude; do
  if echo x > \"$d/{marker}\" 2>/dev/null; then echo \"wrote $d\"; else echo \"denied $d\"; fi
done"
    );
    let mut failures = Vec::new();
    // The home denied too, as the package's (its state directory) is: srt's
    // tmpfs over it re-binds its default write paths inside.
    let cases = users().into_iter().flat_map(|u| [(u, false), (u, true)]);
    for (user, deny_home) in cases {
        let s = Scratch::new(if deny_home { "denied-home" } else { "writes" }, user);
        let mut p = s.params(
            "exec_writes",
            json!({"srt": srt.display().to_string()}),
            &script,
        );
        if deny_home {
            p.needs.deny.push(s.home.display().to_string());
        }
        let (plan, out) = s.run(&p);
        forget(&plan);
        let said = text(&out);
        let who = format!(
            "{}{}",
            user.map_or("root or self".to_owned(), |u| format!("uid {u}")),
            if deny_home { ", home denied" } else { "" }
        );
        if !out.status.success() || !s.work.join("inside").exists() {
            failures.push(format!("{who}: the workspace took no write: {said}"));
        }
        for d in [
            s.home.join(".npm/_logs"),
            s.home.join(".claude/debug"),
            tmp_claude.to_path_buf(),
        ] {
            if !said.contains(&format!("denied {}", d.display())) {
                failures.push(format!("{who}: {} took a write: {said}", d.display()));
            }
            if d.join(&marker).exists() {
                failures.push(format!("{who}: {} landed on the host", d.display()));
                let _ = std::fs::remove_file(d.join(&marker));
            }
        }
    }
    if made_tmp_claude {
        let _ = std::fs::remove_dir(tmp_claude);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_fork_bomb_stops_at_max_processes() {
    let Some(srt) = srt() else { return };
    // dash (and bash) stop at the first fork the kernel refuses.
    let script = "i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); echo $i > \"$W/count\"; done; echo 'all started'";
    let max = 40u64;
    for user in users() {
        let s = Scratch::new("bomb", user);
        let p = s.params(
            "exec_bomb",
            json!({"srt": srt.display().to_string(), "max_processes": max}),
            script,
        );
        if user.is_none() && is_root() {
            if let Err(why) = oc_srt::limit::base() {
                // Root without a writable pids cgroup: an explicit limit is refused.
                let e = plan(Some(&s.dir.join("state")), &p).unwrap_err();
                assert_eq!(e.app_code(), Some("sandbox_unavailable"), "{e}");
                eprintln!("SKIPPED (root half): {why}");
                continue;
            }
        }
        let (plan, out) = s.run(&p);
        forget(&plan);
        let said = text(&out);
        let count: u64 = std::fs::read_to_string(s.work.join("count"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(
            !said.contains("all started"),
            "{user:?}: every fork was allowed: {said}"
        );
        assert!(
            count > 0 && count < max,
            "{user:?}: {count} started: {said}"
        );
    }
}
