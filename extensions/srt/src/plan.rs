//! Planning a launch: the settings file and the `srt` invocation.
//!
//! The settings deny every write outside the launch's write needs (its workspace,
//! its own folders): srt adds its own default write paths to every sandbox
//! ([`SRT_DEFAULT_WRITES`], `~` being the home srt will see), and the plan puts
//! each one the launch does not need in `denyWrite`. The command line inside
//! starts with the run's process limit (`ulimit -u N`), and as root the argv
//! enters the run's pids cgroup first ([`crate::limit`]).

use crate::config;
use crate::shell::shell_line;
use protocol::sandbox::{within, SandboxPlan, SandboxProviderPlanParams};
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
/// The plan data's key for the run's process limit.
pub const PROCESS_LIMIT: &str = "max_processes";
/// The plan data's key for the run's pids cgroup (as root).
pub const CGROUP: &str = "cgroup";
/// The srt arguments every plan's argv ends with: `--settings FILE -c LINE`.
pub const SRT_ARGS: usize = 4;
/// The paths srt makes writable in every sandbox (its `getDefaultWritePaths()`,
/// `~` for the home it sees; the devices it lists are its own `/dev`'s).
pub const SRT_DEFAULT_WRITES: [&str; 4] = [
    "/tmp/claude",
    "/private/tmp/claude",
    "~/.npm/_logs",
    "~/.claude/debug",
];

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

/// The command line srt runs inside (in bash): the run's process limit, then the
/// launch. A hard limit the run inherits below `max` stays (it is lower).
pub fn limited_line(argv: &[String], max: u64) -> String {
    format!(
        "{{ ulimit -u {max} 2>/dev/null || ulimit -u hard; }} && {}",
        shell_line(argv)
    )
}

/// The home of the user with uid `uid` in `/etc/passwd`.
fn passwd_home(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.get(2)?.parse::<u32>().ok()? == uid)
            .then(|| f.get(5).map(|h| (*h).to_owned()))
            .flatten()
    })
}

/// The homes srt may take for `~` (its `os.homedir()`): the launch's `HOME`; or,
/// when it has none, this provider's `HOME` and its user's home in
/// `/etc/passwd` (srt runs as the same user).
pub fn srt_homes(env: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    if let Some(home) = env.get("HOME").filter(|h| h.starts_with('/')) {
        return vec![home.clone()];
    }
    let mut out = Vec::new();
    let own = std::env::var("HOME").ok();
    let passwd = crate::limit::effective_uid().and_then(passwd_home);
    for h in [own, passwd].into_iter().flatten() {
        if h.starts_with('/') && !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

/// srt's default write paths the launch does not need (none inside or around one
/// of its write needs), with `~` as each of `homes`.
pub fn unneeded_default_writes(write: &[String], homes: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in SRT_DEFAULT_WRITES {
        let paths: Vec<String> = match d.strip_prefix("~/") {
            Some(rest) => homes
                .iter()
                .map(|h| Path::new(h).join(rest).display().to_string())
                .collect(),
            None => vec![d.to_owned()],
        };
        for p in paths {
            let needed = write.iter().any(|w| within(&p, w) || within(w, &p));
            if !needed && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
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

/// srt's settings for the needs and config: writes only where the needs say
/// (srt's own default write paths the launch does not need are denied).
pub fn settings(p: &SandboxProviderPlanParams, c: &config::SrtConfig) -> Value {
    let n = &p.needs;
    let homes = srt_homes(&p.launch.env);
    let deny_write = union(&n.deny, &unneeded_default_writes(&n.write, &homes));
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
            "denyWrite": deny_write,
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
    let max = c.process_limit();
    let mut data = json!({SETTINGS: settings_path, SHA256: digest, PROCESS_LIMIT: max});
    let srt = vec![
        c.srt.clone(),
        "--settings".into(),
        settings_path.clone(),
        "-c".into(),
        limited_line(&p.launch.argv, max),
    ];
    // RLIMIT_NPROC does not hold root: as root the run gets a pids cgroup.
    let argv = match process_cgroup(&p.execution_id, &c)? {
        None => srt,
        Some(group) => {
            data[CGROUP] = json!(group.display().to_string());
            let mut argv = vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                crate::limit::enter_script(&group, max),
                "sh".to_owned(),
            ];
            argv.extend(srt);
            argv
        }
    };
    Ok(SandboxPlan {
        argv,
        cwd: p.launch.cwd.clone(),
        env,
        data,
    })
}

/// The run's cgroup name: its execution ID as a file name (a digest of it when it
/// has other characters).
pub fn cgroup_name(execution_id: &str) -> String {
    let safe: String = execution_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(128)
        .collect();
    if !safe.is_empty() && safe == execution_id {
        return safe;
    }
    format!("{safe}-{}", &sha256(execution_id.as_bytes())[..16])
}

/// As root, the run's pids cgroup (`None` when not root). Without a writable one
/// an explicit `max_processes` fails closed; the default runs without (the
/// doctor check `sandbox` warns).
fn process_cgroup(
    execution_id: &str,
    c: &config::SrtConfig,
) -> Result<Option<std::path::PathBuf>, RpcError> {
    if !crate::limit::is_root() {
        return Ok(None);
    }
    match crate::limit::run_cgroup(&cgroup_name(execution_id), c.process_limit()) {
        Ok(group) => Ok(Some(group)),
        Err(why) if c.max_processes.is_some() => Err(unavailable(format!(
            "max_processes {} cannot be held: the sandbox provider runs as root, whom RLIMIT_NPROC does not limit, and {why}",
            c.process_limit()
        ))),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::sandbox::{SandboxLaunch, SandboxNeeds};

    fn params(config: Value, home: &str, write: &[&str]) -> SandboxProviderPlanParams {
        SandboxProviderPlanParams {
            sandbox_type: "srt".into(),
            config,
            execution_id: "exec_1".into(),
            launch: SandboxLaunch {
                argv: vec!["sh".into(), "-c".into(), "echo 'hi'".into()],
                cwd: "/w".into(),
                env: [
                    ("TMPDIR".to_owned(), "/w/tmp".to_owned()),
                    ("HOME".to_owned(), home.to_owned()),
                ]
                .into(),
            },
            needs: SandboxNeeds {
                write: write.iter().map(|w| (*w).to_owned()).collect(),
                deny: vec!["/var/lib/oc".into(), "/etc/oc/secrets".into()],
                hosts: vec!["api.anthropic.com".into()],
                ..SandboxNeeds::default()
            },
        }
    }

    fn settings_of(plan: &SandboxPlan) -> Value {
        let file = std::fs::read(plan.data[SETTINGS].as_str().unwrap()).unwrap();
        assert_eq!(plan.data[SHA256], sha256(&file));
        serde_json::from_slice(&file).unwrap()
    }

    /// The srt part of a plan's argv: `srt --settings FILE -c LINE`.
    fn srt_part(plan: &SandboxPlan) -> &[String] {
        &plan.argv[plan.argv.len() - SRT_ARGS - 1..]
    }

    #[test]
    fn a_plan_is_srt_with_a_settings_file_of_the_needs() {
        let dir = std::env::temp_dir().join(format!("oc-srt-plan-{}", std::process::id()));
        let p = params(
            json!({"allowed_domains": ["api.github.com"], "max_processes": 64}),
            "/home/op",
            &["/w"],
        );
        let plan = plan(Some(&dir), &p).unwrap();
        let srt = srt_part(&plan);
        assert_eq!(srt[0], "srt");
        // srt keeps its own TMPDIR and gives the command the launch's.
        assert_eq!(plan.env.get("TMPDIR"), None);
        assert_eq!(plan.env["CLAUDE_CODE_TMPDIR"], "/w/tmp");
        assert_eq!(
            srt[4],
            r#"{ ulimit -u 64 2>/dev/null || ulimit -u hard; } && 'sh' '-c' 'echo '\''hi'\'''"#
        );
        assert_eq!(plan.data[PROCESS_LIMIT], 64);
        let s = settings_of(&plan);
        assert_eq!(s["filesystem"]["allowWrite"], json!(["/w"]));
        assert_eq!(
            s["filesystem"]["denyRead"],
            json!(["/var/lib/oc", "/etc/oc/secrets"])
        );
        // Every write srt allows by itself is denied, with the secrets' folder.
        assert_eq!(
            s["filesystem"]["denyWrite"],
            json!([
                "/var/lib/oc",
                "/etc/oc/secrets",
                "/tmp/claude",
                "/private/tmp/claude",
                "/home/op/.npm/_logs",
                "/home/op/.claude/debug"
            ])
        );
        assert_eq!(
            s["network"]["allowedDomains"],
            json!(["api.anthropic.com", "api.github.com"])
        );
        // The same launch plans the same: the digest the host pins holds.
        let again = super::plan(Some(&dir), &p).unwrap();
        assert_eq!(
            protocol::sandbox::plan_digest(&again),
            protocol::sandbox::plan_digest(&plan)
        );
        if let Some(group) = plan.data[CGROUP].as_str() {
            let _ = std::fs::remove_dir(group);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn default_write_paths_the_launch_needs_stay_writable() {
        // claude-code's config folder under ~/.claude: its debug folder is the
        // run's; npm's logs are not.
        let deny = unneeded_default_writes(
            &["/home/op/.claude".into(), "/w".into()],
            &["/home/op".into()],
        );
        assert_eq!(
            deny,
            ["/tmp/claude", "/private/tmp/claude", "/home/op/.npm/_logs"]
        );
        // A need inside a default path keeps it too (a read-only bind over it
        // would hide the need).
        let deny = unneeded_default_writes(&["/tmp/claude/run".into()], &["/h".into()]);
        assert!(!deny.contains(&"/tmp/claude".to_owned()), "{deny:?}");
        // No HOME in the launch: the provider's own, as srt would take it.
        let homes = srt_homes(&Default::default());
        assert!(!homes.is_empty() && homes.iter().all(|h| h.starts_with('/')));
        assert_eq!(
            srt_homes(&[("HOME".to_owned(), "/x".to_owned())].into()),
            ["/x"]
        );
    }

    #[test]
    fn the_default_limit_is_1024_and_root_plans_a_pids_cgroup() {
        let dir = std::env::temp_dir().join(format!("oc-srt-limit-{}", std::process::id()));
        let p = params(json!({}), "/home/op", &["/w"]);
        let plan = match plan(Some(&dir), &p) {
            Ok(plan) => plan,
            Err(e) => panic!("{e}"),
        };
        assert!(srt_part(&plan)[4].starts_with("{ ulimit -u 1024 "));
        assert_eq!(plan.data[PROCESS_LIMIT], 1024);
        if !crate::limit::is_root() {
            assert_eq!(plan.argv.len(), 5, "{:?}", plan.argv);
            assert!(plan.data.get(CGROUP).is_none());
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        match crate::limit::base() {
            Ok(base) => {
                let group = base.join("exec_1");
                assert_eq!(plan.data[CGROUP], json!(group.display().to_string()));
                assert_eq!(plan.argv[..2], ["/bin/sh", "-c"]);
                assert_eq!(plan.argv[3], "sh");
                assert!(plan.argv[2].contains("cgroup.procs"), "{:?}", plan.argv);
                let max = std::fs::read_to_string(group.join("pids.max")).unwrap();
                assert_eq!(max.trim(), "1024");
                let _ = std::fs::remove_dir(&group);
            }
            // Root without a writable pids cgroup: the default runs without one,
            // an explicit limit is refused saying why.
            Err(why) => {
                assert_eq!(plan.argv.len(), 5, "{:?}", plan.argv);
                let explicit = params(json!({"max_processes": 64}), "/h", &["/w"]);
                let e = super::plan(Some(&dir), &explicit).unwrap_err();
                assert_eq!(e.app_code(), Some("sandbox_unavailable"), "{e}");
                assert!(
                    e.message.contains("root") && e.message.contains(&why),
                    "{e}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cgroup_names_are_file_names() {
        assert_eq!(cgroup_name("exec_01H"), "exec_01H");
        let odd = cgroup_name("../x y");
        assert!(odd.starts_with("xy-") && !odd.contains(['/', ' ']), "{odd}");
        assert_ne!(cgroup_name("a/b"), cgroup_name("a b"));
        // Never the folder of every run's cgroup itself.
        assert_eq!(cgroup_name("").len(), 17, "{}", cgroup_name(""));
    }
}
