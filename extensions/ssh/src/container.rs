//! The `ssh` container provider: a binding's launch runs on another machine, over
//! SSH, in a folder of its own there (`<remote_dir>/oc-<execution>`).
//!
//! `container_provider.plan` (pure) answers the attach program
//! (`__ssh-attach`, [`crate::attach`]) with the SSH options and the remote folder;
//! `create` writes, over one `ssh … sh -s` whose standard input carries them (never
//! its argv), the folder's `env` (the launch's environment, mode 0600), `labels`
//! (execution, Work, host) and `run` (records its pid, enters the launch's cwd,
//! reads `env`, execs the launch). `inspect`, `list`, `signal`, `stop` and `remove`
//! are each one `ssh` running a short POSIX shell script on the remote; a remote
//! that does not answer is an error, never "gone" or an empty list. The remote must
//! see the launch's needs at the same paths (the workspace on a shared filesystem,
//! or the same machine): this provider copies nothing.
//!
//! The remote's shell is POSIX `sh`, and its processes are read from Linux's
//! `/proc` (the process group of the launch is the fifth field of its `stat`).

use protocol::container::{
    ContainerCreated, ContainerDone, ContainerInfo, ContainerList, ContainerPlan,
    ContainerProviderCreateParams, ContainerProviderInspectParams, ContainerProviderListParams,
    ContainerProviderPlanParams, ContainerProviderRemoveParams, ContainerProviderSignalParams,
    ContainerProviderStopParams, LABEL_EXECUTION, LABEL_HOST, LABEL_WORK,
};
use protocol::wire::{validate_kind, ValidateParams, ValidateResult};
use protocol::{Code, RpcError};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub use sdk::tunnel::Problem;

/// The container type.
pub const CONTAINER_TYPE: &str = "ssh";
/// Where the remote keeps its launches when the config names no `remote_dir`.
pub const DEFAULT_REMOTE_DIR: &str = "/var/tmp/open-conduit/containers";
/// The attach program's argument.
pub const ATTACH_ARG: &str = "__ssh-attach";
/// The longest an answer from the remote may be.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;
/// The longest one ssh exchange may take (the stop's grace added).
pub const EXCHANGE: Duration = Duration::from_secs(60);
/// The most seconds a stop waits between SIGTERM and SIGKILL.
pub const MAX_GRACE_S: u64 = 300;

/// A checked container config: how to reach the remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The SSH server.
    pub host: String,
    /// The login.
    pub user: String,
    /// Its SSH port.
    pub port: u16,
    /// The private key file.
    pub identity_file: Option<String>,
    /// The known_hosts file.
    pub known_hosts: Option<String>,
    /// `yes`, `accept-new` or `no`.
    pub strict_host_key_checking: String,
    /// The ssh program.
    pub ssh: String,
    /// The remote folder of launches.
    pub remote_dir: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    identity_file: Option<String>,
    #[serde(default)]
    known_hosts: Option<String>,
    #[serde(default)]
    strict_host_key_checking: Option<String>,
    #[serde(default)]
    ssh: Option<String>,
    #[serde(default)]
    remote_dir: Option<String>,
}

fn safe_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
}

fn safe_path(s: &str) -> bool {
    s.starts_with('/')
        && s.len() <= 1024
        && !s.split('/').any(|c| c == "..")
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'-' | b'_'))
}

impl Remote {
    /// Parse and check `v`: every problem, each with its pointer.
    pub fn parse(v: &Value) -> Result<Remote, Vec<Problem>> {
        let (raw, mut problems) = sdk::tunnel::read_config::<Raw>(v, "ssh container")?;
        let mut bad =
            |path: &str, message: String| sdk::tunnel::add_problem(&mut problems, path, message);
        let host = raw.host.unwrap_or_default();
        if !safe_word(&host) {
            bad("/host", "host is required: a host name or address".into());
        }
        let user = raw.user.unwrap_or_default();
        if !safe_word(&user) || user.contains(':') {
            bad("/user", "user is required: a login name".into());
        }
        let port = raw.port.unwrap_or(22);
        if port == 0 {
            bad("/port", "port is a port, 1 to 65535".into());
        }
        let mut path_of = |field: &str, v: Option<String>| {
            let p = v?;
            if !Path::new(&p).is_absolute() || p.len() > 1024 || p.contains(['\0', '\n']) {
                bad(&format!("/{field}"), format!("{field} is an absolute path"));
            }
            Some(p)
        };
        let identity_file = path_of("identity_file", raw.identity_file);
        let known_hosts = path_of("known_hosts", raw.known_hosts);
        let strict = raw.strict_host_key_checking.unwrap_or_else(|| "yes".into());
        if !["yes", "accept-new", "no"].contains(&strict.as_str()) {
            bad(
                "/strict_host_key_checking",
                "strict_host_key_checking is yes, accept-new or no".into(),
            );
        }
        let ssh = raw.ssh.unwrap_or_else(|| "ssh".into());
        if ssh.is_empty() || ssh.contains(['\0', '\n']) {
            bad("/ssh", "ssh is the ssh program".into());
        }
        let remote_dir = raw.remote_dir.unwrap_or_else(|| DEFAULT_REMOTE_DIR.into());
        if !safe_path(&remote_dir) || remote_dir == "/" {
            bad(
                "/remote_dir",
                "remote_dir is an absolute path of letters, digits, '.', '-', '_' and '/' (not /)"
                    .into(),
            );
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Remote {
            host,
            user,
            port,
            identity_file,
            known_hosts,
            strict_host_key_checking: strict,
            ssh,
            remote_dir,
        })
    }

    /// ssh's options and destination, before the remote command.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-T".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "ConnectTimeout=10".into(),
            "-o".into(),
            format!("StrictHostKeyChecking={}", self.strict_host_key_checking),
            "-p".into(),
            self.port.to_string(),
        ];
        if let Some(k) = &self.known_hosts {
            a.extend(["-o".into(), format!("UserKnownHostsFile={k}")]);
        }
        if let Some(k) = &self.identity_file {
            a.extend([
                "-i".into(),
                k.clone(),
                "-o".into(),
                "IdentitiesOnly=yes".into(),
            ]);
        }
        a.push(format!("{}@{}", self.user, self.host));
        a
    }

    /// The remote folder of `name`.
    pub fn dir(&self, name: &str) -> String {
        format!("{}/{name}", self.remote_dir.trim_end_matches('/'))
    }

    /// Runs `script` on the remote (through `sh -s`, the script on its stdin):
    /// its exit status and output, or why ssh could not run it.
    pub fn run(&self, script: &str, timeout: Duration) -> Result<(i32, String), String> {
        let mut child = Command::new(&self.ssh)
            .args(self.args())
            .arg("sh -s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", self.ssh))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(script.as_bytes());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = rx
            .recv_timeout(timeout)
            .map_err(|_| format!("ssh to {} did not finish within {timeout:?}", self.host))?
            .map_err(|e| format!("ssh to {}: {e}", self.host))?;
        let code = out.status.code().unwrap_or(255);
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "the remote's answer is over the limit of {MAX_ANSWER_BYTES} bytes"
            ));
        }
        if code == 255 {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "ssh to {}@{}:{} failed: {}",
                self.user,
                self.host,
                self.port,
                err.trim().lines().last().unwrap_or("no answer")
            ));
        }
        text.truncate(MAX_ANSWER_BYTES);
        Ok((code, text))
    }
}

/// `s` quoted for a POSIX shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn unavailable(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxUnavailable, message)
}

fn denied(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxDenied, message)
}

fn remote(config: &Value) -> Result<Remote, RpcError> {
    Remote::parse(config).map_err(|problems| {
        RpcError::new(
            Code::Invalid,
            problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; "),
        )
    })
}

fn check_name(name: &str) -> Result<(), RpcError> {
    if name.starts_with("oc-")
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "{name:?} is not one of this provider's containers"
        )))
    }
}

/// `container_provider.plan`: the attach program and the remote folder.
pub fn plan(p: &ContainerProviderPlanParams) -> Result<ContainerPlan, RpcError> {
    if p.container_type != CONTAINER_TYPE {
        return Err(RpcError::invalid_params(format!(
            "this package provides the container type {CONTAINER_TYPE:?}, not {:?}",
            p.container_type
        )));
    }
    let r = remote(&p.config).map_err(|e| unavailable(e.message))?;
    for need in p.needs.read.iter().chain(&p.needs.write) {
        if !Path::new(need).is_absolute() || need == "/" {
            return Err(denied(format!(
                "the need {need:?} is not a folder or file to share"
            )));
        }
    }
    if p.launch.argv.is_empty() || !Path::new(&p.launch.cwd).is_absolute() {
        return Err(RpcError::invalid_params(
            "a launch needs a program and an absolute cwd",
        ));
    }
    if let Some(bad) = p.launch.env.keys().find(|k| !env_name(k)) {
        return Err(denied(format!(
            "the variable name {bad:?} cannot be set by a POSIX shell on the remote"
        )));
    }
    let name = protocol::container::container_name(&p.execution_id);
    check_name(&name)?;
    let exe = std::env::current_exe()
        .map_err(|e| unavailable(format!("cannot name the attach program: {e}")))?;
    let mut argv = vec![
        exe.display().to_string(),
        ATTACH_ARG.to_owned(),
        "--dir".to_owned(),
        r.dir(&name),
        "--".to_owned(),
        r.ssh.clone(),
    ];
    argv.extend(r.args());
    Ok(ContainerPlan {
        name,
        argv,
        cwd: "/".into(),
        env: [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())].into(),
        data: json!({
            "remote": format!("{}@{}:{}", r.user, r.host, r.port),
            "dir": r.dir(&protocol::container::container_name(&p.execution_id)),
            "argv": p.launch.argv,
            "cwd": p.launch.cwd,
            "env": p.launch.env.keys().collect::<Vec<_>>(),
            "labels": {
                LABEL_EXECUTION: p.execution_id,
                LABEL_WORK: p.work_id,
                LABEL_HOST: p.host,
            },
        }),
    })
}

fn env_name(k: &str) -> bool {
    let mut b = k.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// The `run` script of a launch: records its pid, enters the cwd, reads `env`,
/// execs the launch.
fn run_script(dir: &str, argv: &[String], cwd: &str) -> String {
    let words: Vec<String> = argv.iter().map(|a| quote(a)).collect();
    format!(
        "echo $$ > {pid}\ncd {cwd} || exit 125\n. {env}\nexec {argv}\n",
        pid = quote(&format!("{dir}/pid")),
        cwd = quote(cwd),
        env = quote(&format!("{dir}/env")),
        argv = words.join(" ")
    )
}

/// `container_provider.create`: writes the launch's folder on the remote.
pub fn create(p: &ContainerProviderCreateParams) -> Result<ContainerCreated, RpcError> {
    let r = remote(&p.config).map_err(|e| unavailable(e.message))?;
    check_name(&p.plan.name)?;
    let dir = r.dir(&p.plan.name);
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let argv = strings(&p.plan.data["argv"]);
    let cwd = p.plan.data["cwd"].as_str().unwrap_or_default();
    if argv.is_empty() || cwd.is_empty() {
        return Err(unavailable("the pinned plan names no launch"));
    }
    let mut env = String::new();
    for (k, v) in &p.env {
        if !env_name(k) {
            return Err(denied(format!("the variable name {k:?} cannot be set")));
        }
        env.push_str(&format!("export {k}={}\n", quote(v)));
    }
    let labels = p.plan.data["labels"].to_string();
    let script = format!(
        "set -e\numask 077\nd={d}\n\
         if [ -e \"$d/pid\" ] && kill -0 \"$(cat \"$d/pid\")\" 2>/dev/null; then echo running; exit 0; fi\n\
         mkdir -p \"$d\"\n\
         printf '%s' {env} > \"$d/env\"\n\
         printf '%s' {labels} > \"$d/labels\"\n\
         printf '%s' {run} > \"$d/run\"\n\
         rm -f \"$d/pid\"\necho created\n",
        d = quote(&dir),
        env = quote(&env),
        labels = quote(&labels),
        run = quote(&run_script(&dir, &argv, cwd)),
    );
    match r.run(&script, EXCHANGE) {
        Ok((0, _)) => Ok(ContainerCreated {
            container: p.plan.name.clone(),
        }),
        Ok((code, out)) => Err(unavailable(format!(
            "the remote {}@{} could not make {dir} (exit {code}): {}",
            r.user,
            r.host,
            out.trim()
        ))),
        Err(e) => Err(unavailable(format!("the remote is unavailable: {e}"))),
    }
}

/// The shell that reads one folder's state: `<labels JSON>\t<state>\t<pid>`.
const READ_ONE: &str = r#"one() {
  l=$(tr -d '\n' < "$1/labels" 2>/dev/null || echo '{}')
  p=$(cat "$1/pid" 2>/dev/null || true)
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then s=running; elif [ -n "$p" ]; then s=exited; else s=created; fi
  printf '%s\t%s\t%s\t%s\n' "${1##*/}" "$l" "$s" "${p:-0}"
}
"#;

fn info(line: &str) -> Option<ContainerInfo> {
    let mut parts = line.splitn(4, '\t');
    let name = parts.next()?.to_owned();
    let labels: Value = serde_json::from_str(parts.next()?).unwrap_or(Value::Null);
    let state = parts.next()?.to_owned();
    let pid = parts.next()?.trim().parse().unwrap_or(0);
    let label = |k: &str| labels[k].as_str().unwrap_or_default().to_owned();
    Some(ContainerInfo {
        id: name.clone(),
        name,
        state,
        execution_id: label(LABEL_EXECUTION),
        work_id: label(LABEL_WORK),
        host: label(LABEL_HOST),
        exit_code: None,
        // A remote process is not this host's.
        pid: if pid > 0 { -1 } else { 0 },
    })
}

/// `container_provider.inspect`.
pub fn inspect(p: &ContainerProviderInspectParams) -> Result<ContainerInfo, RpcError> {
    let r = remote(&p.config)?;
    check_name(&p.container)?;
    let dir = r.dir(&p.container);
    let script = format!(
        "{READ_ONE}d={}\nif [ -d \"$d\" ]; then one \"$d\"; else echo gone; fi\n",
        quote(&dir)
    );
    let (_, out) = r
        .run(&script, EXCHANGE)
        .map_err(|e| RpcError::new(Code::Unavailable, e))?;
    let line = out.lines().next().unwrap_or_default();
    if line.trim() == "gone" {
        return Ok(ContainerInfo {
            id: p.container.clone(),
            name: p.container.clone(),
            state: "gone".into(),
            ..ContainerInfo::default()
        });
    }
    info(line).ok_or_else(|| {
        RpcError::new(
            Code::Unavailable,
            format!("the remote answered {line:?} for {dir}"),
        )
    })
}

/// `container_provider.list`: the folders whose labels name `host`.
pub fn list(p: &ContainerProviderListParams) -> Result<ContainerList, RpcError> {
    let r = remote(&p.config)?;
    let script = format!(
        "{READ_ONE}for d in {}/oc-*; do [ -d \"$d\" ] && one \"$d\"; done; true\n",
        quote(r.remote_dir.trim_end_matches('/'))
    );
    let (code, out) = r
        .run(&script, EXCHANGE)
        .map_err(|e| RpcError::new(Code::Unavailable, e))?;
    if code != 0 {
        return Err(RpcError::new(
            Code::Unavailable,
            format!("listing {} failed (exit {code})", r.remote_dir),
        ));
    }
    Ok(ContainerList {
        containers: out
            .lines()
            .filter_map(info)
            .filter(|c| c.host == p.host)
            .collect(),
    })
}

/// The shell that signals the launch's process group: exits 3 when there is none.
fn signal_script(dir: &str, signal: &str) -> String {
    format!(
        "d={}\np=$(cat \"$d/pid\" 2>/dev/null) || exit 3\n\
         g=$(cut -d' ' -f5 \"/proc/$p/stat\" 2>/dev/null) || exit 3\n\
         kill -s {signal} -- \"-$g\" 2>/dev/null || exit 3\n",
        quote(dir)
    )
}

fn signal_name(s: &str) -> Result<&'static str, RpcError> {
    match s.trim_start_matches("SIG") {
        "TERM" => Ok("TERM"),
        "INT" => Ok("INT"),
        "KILL" => Ok("KILL"),
        "HUP" => Ok("HUP"),
        other => Err(RpcError::invalid_params(format!(
            "the signal {other:?} is not TERM, INT, KILL or HUP"
        ))),
    }
}

/// `container_provider.signal`.
pub fn signal(p: &ContainerProviderSignalParams) -> Result<ContainerDone, RpcError> {
    let r = remote(&p.config)?;
    check_name(&p.container)?;
    let sig = signal_name(&p.signal)?;
    let (code, _) = r
        .run(&signal_script(&r.dir(&p.container), sig), EXCHANGE)
        .map_err(|e| RpcError::new(Code::Unavailable, e))?;
    Ok(ContainerDone { found: code == 0 })
}

/// The shell that stops the launch: TERM, then KILL after `grace_s`.
fn stop_script(dir: &str, grace_s: u64) -> String {
    format!(
        "d={}\np=$(cat \"$d/pid\" 2>/dev/null) || exit 3\n\
         g=$(cut -d' ' -f5 \"/proc/$p/stat\" 2>/dev/null) || exit 0\n\
         kill -s TERM -- \"-$g\" 2>/dev/null || exit 0\n\
         i=0; while kill -0 -- \"-$g\" 2>/dev/null && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done\n\
         kill -s KILL -- \"-$g\" 2>/dev/null; exit 0\n",
        quote(dir),
        ticks = grace_s * 10
    )
}

/// `container_provider.stop`.
pub fn stop(p: &ContainerProviderStopParams) -> Result<ContainerDone, RpcError> {
    let r = remote(&p.config)?;
    check_name(&p.container)?;
    let grace = p.grace_s.min(MAX_GRACE_S);
    let (code, _) = r
        .run(
            &stop_script(&r.dir(&p.container), grace),
            EXCHANGE + Duration::from_secs(grace),
        )
        .map_err(|e| RpcError::new(Code::Unavailable, e))?;
    Ok(ContainerDone { found: code != 3 })
}

/// `container_provider.remove`: kills what is left and removes the folder.
pub fn remove(p: &ContainerProviderRemoveParams) -> Result<ContainerDone, RpcError> {
    let r = remote(&p.config)?;
    check_name(&p.container)?;
    let dir = r.dir(&p.container);
    let script = format!(
        "{}\nd={}\nif [ -d \"$d\" ]; then rm -rf -- \"$d\"; echo removed; fi\n",
        stop_script(&dir, 0)
            .replace("exit 3", "true")
            .replace("exit 0", "true"),
        quote(&dir)
    );
    let (_, out) = r
        .run(&script, EXCHANGE)
        .map_err(|e| RpcError::new(Code::Unavailable, e))?;
    Ok(ContainerDone {
        found: out.contains("removed"),
    })
}

/// `validate` kind `container` for type `ssh`.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    if p.kind != validate_kind::CONTAINER || p.type_name != CONTAINER_TYPE {
        return ValidateResult::default();
    }
    sdk::tunnel::validation(Remote::parse(&p.config).map(|r| {
        format!(
            "runs each launch as {}@{}:{} in {}/oc-<execution>",
            r.user, r.host, r.port, r.remote_dir
        )
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_config_is_checked_with_pointers_and_quoting_holds() {
        let r = Remote::parse(&json!({"host": "127.0.0.1", "user": "op", "port": 2222,
            "identity_file": "/k", "known_hosts": "/kh"}))
        .unwrap();
        assert_eq!(r.remote_dir, DEFAULT_REMOTE_DIR);
        let a = r.args();
        assert_eq!(a.last().unwrap(), "op@127.0.0.1");
        assert!(a.contains(&"UserKnownHostsFile=/kh".to_owned()), "{a:?}");
        let e = Remote::parse(&json!({"host": "-oProxyCommand=x", "user": "op",
            "remote_dir": "/a/../b", "colour": 1}))
        .unwrap_err();
        let paths: Vec<&str> = e.iter().map(|p| p.path.as_str()).collect();
        for p in ["/host", "/remote_dir", "/colour"] {
            assert!(paths.contains(&p), "{p}: {e:?}");
        }
        assert_eq!(quote("it's"), "'it'\\''s'");
        let script = run_script("/d", &["sh".into(), "-c".into(), "echo '$x'".into()], "/w");
        assert!(
            script.contains("exec 'sh' '-c' 'echo '\\''$x'\\'''"),
            "{script}"
        );
        assert!(env_name("OS_WORK_ID") && !env_name("1X") && !env_name("A-B"));
    }
}
