//! What every tunnel provider (`tunnel.run`) shares: its program as a child in a
//! process group of its own that dies with the extension, its output as bounded
//! lines, how it ended, and the public URL published through `tunnel.url`.
//!
//! The child runs with `PR_SET_PDEATHSIG` (SIGTERM) and in its own process group;
//! dropping [`Child`] (the run answered, failed, or was cancelled and its future
//! dropped) sends SIGTERM to the group and SIGKILL past the grace. When the child
//! dies, [`Child::next`] answers the run's error, naming how it died and quoting its
//! last lines.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use protocol::wire::{TunnelRunParams, TunnelUrlParams};
use protocol::{Code, RpcError};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::mpsc;

/// The longest output line kept (longer ones are cut).
pub const MAX_LINE: u64 = 4096;
/// How many of the child's last lines an ended run quotes.
pub const KEPT_LINES: usize = 8;
/// How long a stopped child gets after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Output lines buffered between the readers and the run.
const LINE_QUEUE: usize = 64;

/// An `invalid` error: the config cannot run (the host does not retry it).
pub fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, message)
}

/// Refuse a run of another tunnel type than `expected`.
pub fn check_type(p: &TunnelRunParams, expected: &str) -> Result<(), RpcError> {
    if p.tunnel_type == expected {
        Ok(())
    } else {
        Err(invalid(format!(
            "tunnel type {:?} is not this package's ({expected:?})",
            p.tunnel_type
        )))
    }
}

/// A tunnel provider package: `manifest`, serving `tunnel.run` with `run` and
/// `validate` with `validate` (what every bundled tunnel provider is).
pub fn provider<F, Fut>(
    manifest: &str,
    run: F,
    validate: fn(&protocol::wire::ValidateParams) -> protocol::wire::ValidateResult,
) -> Result<crate::Extension, String>
where
    F: Fn(crate::Ctx, TunnelRunParams) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<protocol::wire::TunnelRunResult, RpcError>>
        + Send
        + 'static,
{
    let ext = crate::Extension::new(manifest)
        .map_err(|e| e.to_string())?
        .on::<TunnelRunParams, _, _>(run)
        .on::<protocol::wire::ValidateParams, _, _>(move |_ctx, p| async move { Ok(validate(&p)) });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// A provider binary's entry point: `ext` served over stdio, or why it could not be
/// made (exit status 2). Returns the exit status.
pub fn serve(name: &str, ext: Result<crate::Extension, String>) -> i32 {
    match ext {
        Ok(ext) => crate::run(ext),
        Err(e) => {
            eprintln!("{name}: {e}");
            2
        }
    }
}

/// One problem with a tunnel config: the JSON pointer into it and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// JSON pointer.
    pub path: String,
    /// Message.
    pub message: String,
}

/// The start of checking a tunnel config of type `tunnel_type`: `T` (a
/// `#[serde(deny_unknown_fields)]` type whose fields are all optional) read from
/// the fields that read, and a problem for each that does not (an unknown field, a
/// field of the wrong type: see [`crate::config::parse_each`]); not an object is the
/// one problem.
pub fn read_config<T: serde::de::DeserializeOwned>(
    v: &serde_json::Value,
    tunnel_type: &str,
) -> Result<(T, Vec<Problem>), Vec<Problem>> {
    let not_object = || Problem {
        path: String::new(),
        message: format!("the {tunnel_type} tunnel config is an object"),
    };
    if !v.is_object() {
        return Err(vec![not_object()]);
    }
    let (read, errors) = crate::config::parse_each::<T>(v);
    let problems: Vec<Problem> = errors
        .into_iter()
        .map(|e| Problem {
            path: e.pointer,
            message: e.reason,
        })
        .collect();
    match read {
        Some(t) => Ok((t, problems)),
        None if problems.is_empty() => Err(vec![not_object()]),
        None => Err(problems),
    }
}

/// Adds a problem at `path` unless one there is known already (a field that did not
/// read is reported once, not again by the checks that find it missing).
pub fn add_problem(problems: &mut Vec<Problem>, path: &str, message: String) {
    if !problems.iter().any(|p| p.path == path) {
        problems.push(Problem {
            path: path.to_owned(),
            message,
        });
    }
}

/// A config's problems as `tunnel.run`'s refusal (`invalid`: the host does not
/// retry it until the configuration changes).
pub fn refusal(problems: &[Problem]) -> RpcError {
    invalid(
        problems
            .iter()
            .map(|pr| format!("{}: {}", pr.path, pr.message))
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// `validate` kind `tunnel`: what a valid config sets up, or each problem as an
/// `invalid_config` diagnostic at its pointer.
pub fn validation(checked: Result<String, Vec<Problem>>) -> protocol::wire::ValidateResult {
    let mut result = protocol::wire::ValidateResult::default();
    match checked {
        Ok(describe) => result.describe.push(describe),
        Err(problems) => {
            for pr in problems {
                result.diagnostics.push(protocol::wire::Diagnostic {
                    code: "invalid_config".into(),
                    message: pr.message,
                    path: pr.path,
                });
            }
        }
    }
    result
}

/// The listener `tunnel.run` names, as an IP address and port.
pub fn listener(p: &TunnelRunParams) -> Result<std::net::SocketAddr, RpcError> {
    p.addr.parse().map_err(|_| {
        invalid(format!(
            "the listener's address {:?} is not an IP address and port",
            p.addr
        ))
    })
}

/// A one-word secret from the file a config names in `field` (a token): at most
/// `max` bytes, UTF-8, trimmed, no whitespace or control character inside.
pub async fn read_secret_file(
    field: &str,
    path: &std::path::Path,
    max: u64,
) -> Result<String, RpcError> {
    let unavailable = |e: String| {
        RpcError::new(
            Code::Unavailable,
            format!("{field} {}: {e}", path.display()),
        )
    };
    let f = tokio::fs::File::open(path)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let mut buf = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    if buf.len() as u64 > max {
        return Err(unavailable(format!("over the {max}-byte limit")));
    }
    let secret = String::from_utf8(buf)
        .map_err(|_| unavailable("not UTF-8".into()))?
        .trim()
        .to_owned();
    if secret.is_empty() || secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(unavailable("holds no secret (one word)".into()));
    }
    Ok(secret)
}

/// The secret `secret` of the connection the tunnel config names (a key or a
/// token), through the host: the tunnel is the suite's, so it is asked with no
/// scope, which the host allows only for the connection of the tunnel the package
/// runs. A refusal is `invalid` (the config names something it cannot have).
pub async fn connection_secret(
    ctx: &crate::Ctx,
    connection: &str,
    secret: &str,
) -> Result<String, RpcError> {
    let got = ctx
        .host
        .call_typed(&protocol::wire::SecretResolveParams {
            scope_id: String::new(),
            connection: connection.to_owned(),
            names: vec![secret.to_owned()],
        })
        .await
        .map_err(|e| {
            invalid(format!(
                "secret {secret:?} of connection {connection:?} cannot be read: {}",
                e.rpc().map_or_else(|| e.to_string(), |r| r.message.clone())
            ))
        })?;
    match got.values.get(secret) {
        Some(v) if !v.trim().is_empty() => Ok(v.clone()),
        _ => Err(invalid(format!(
            "connection {connection:?} has no secret {secret:?}"
        ))),
    }
}

/// Check a public URL a provider found (in its program's output or API): an
/// `https://` URL with a host and nothing the host would refuse.
pub fn check_https(url: &str) -> Result<(), String> {
    if !url.to_ascii_lowercase().starts_with("https://") {
        return Err(format!("{url:?} is not an https:// URL"));
    }
    protocol::config::check_public_url(url)
}

/// Publish `url` as run `run_id`'s public URL (`tunnel.url`); the host's refusal
/// ends the run.
pub async fn publish(ctx: &crate::Ctx, run_id: &str, url: &str) -> Result<(), RpcError> {
    ctx.host
        .call_typed(&TunnelUrlParams {
            run_id: run_id.to_owned(),
            url: url.to_owned(),
        })
        .await
        .map(|_| ())
        .map_err(|e| {
            RpcError::new(
                Code::Unavailable,
                format!("the host did not take the URL {url}: {e}"),
            )
        })
}

/// How a child ended, in words: "exited with status 1", "killed by SIGKILL".
pub fn how_it_ended(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => match nix::sys::signal::Signal::try_from(sig) {
            Ok(s) => format!("killed by {}", s.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        None => status.to_string(),
    }
}

/// How long an ended child's last output is waited for.
pub const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// What [`Child::next`] saw.
#[derive(Debug)]
pub enum Event {
    /// A line of the child's output (stdout or stderr), without its line end.
    Line(String),
    /// The child is gone: the run's error, naming how it ended.
    Ended(RpcError),
}

/// The tunnel program, in a process group of its own; stopped when dropped.
pub struct Child {
    child: Option<tokio::process::Child>,
    pgid: Option<nix::unistd::Pid>,
    name: String,
    grace: Duration,
    lines: mpsc::Receiver<String>,
    last: VecDeque<String>,
    ended: Option<String>,
}

fn forward_lines<R: AsyncRead + Unpin + Send + 'static>(out: R, tx: mpsc::Sender<String>) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(out);
        loop {
            let mut buf = Vec::new();
            let mut limited = (&mut reader).take(MAX_LINE);
            match limited.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
                    if tx.send(line).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
}

impl Child {
    /// Start `cmd` (named `name` in messages) with its stdout and stderr read as
    /// lines, no stdin, in a new process group that gets SIGTERM when the
    /// extension dies.
    pub fn spawn(name: &str, mut cmd: tokio::process::Command) -> Result<Child, RpcError> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let parent = nix::unistd::getpid();
        // SAFETY: between fork and exec the hook only calls async-signal-safe
        // functions (setpgid, prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0))
                    .map_err(std::io::Error::from)?;
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)?;
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::other("the extension is gone"));
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| RpcError::new(Code::Unavailable, format!("cannot start {name}: {e}")))?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(nix::unistd::Pid::from_raw);
        let (tx, rx) = mpsc::channel(LINE_QUEUE);
        if let Some(out) = child.stdout.take() {
            forward_lines(out, tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            forward_lines(err, tx);
        }
        Ok(Child {
            child: Some(child),
            pgid,
            name: name.to_owned(),
            grace: STOP_GRACE,
            lines: rx,
            last: VecDeque::new(),
            ended: None,
        })
    }

    /// The child's pid (its process group's ID).
    pub fn pid(&self) -> Option<i32> {
        self.pgid.map(nix::unistd::Pid::as_raw)
    }

    /// Keep `line` among the last lines an ended run quotes.
    pub fn remember(&mut self, line: &str) {
        if self.last.len() == KEPT_LINES {
            self.last.pop_front();
        }
        self.last.push_back(line.to_owned());
    }

    /// The next output line, or the child's end (then always that end again).
    pub async fn next(&mut self) -> Event {
        if let Some(how) = &self.ended {
            return Event::Ended(self.error(how.clone()));
        }
        let Some(child) = self.child.as_mut() else {
            return Event::Ended(RpcError::new(Code::Unavailable, "no child"));
        };
        let status = tokio::select! {
            line = self.lines.recv() => match line {
                Some(line) => return Event::Line(line),
                // Both outputs closed: wait for the exit itself.
                None => child.wait().await,
            },
            status = child.wait() => status,
        };
        self.end(status).await
    }

    async fn end(&mut self, status: std::io::Result<ExitStatus>) -> Event {
        let how = match status {
            Ok(s) => how_it_ended(&s),
            Err(e) => format!("could not be waited for: {e}"),
        };
        if let Some(pgid) = self.pgid {
            // Anything left in its group goes with it.
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
        // What it said last, before it went: its output up to the end of its pipes
        // (the readers may not have reached it yet), for at most DRAIN_WAIT.
        let lines = &mut self.lines;
        let mut said = Vec::new();
        let _ = tokio::time::timeout(DRAIN_WAIT, async {
            while let Some(line) = lines.recv().await {
                said.push(line);
            }
        })
        .await;
        for line in said {
            self.remember(&line);
        }
        self.ended = Some(how.clone());
        Event::Ended(self.error(how))
    }

    fn error(&self, how: String) -> RpcError {
        let said: Vec<&str> = self.last.iter().map(String::as_str).collect();
        RpcError::new(
            Code::Unavailable,
            format!("{} {how}: {}", self.name, said.join(" | ")),
        )
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let Some(pgid) = self.pgid else {
            return;
        };
        if self.ended.is_some() || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            return;
        }
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM);
        let grace = self.grace;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let _ = tokio::time::timeout(grace, child.wait()).await;
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait().await;
                });
            }
            // No runtime to wait on: SIGKILL now (the child's kill_on_drop too).
            Err(_) => {
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_https_urls_are_published() {
        assert!(check_https("https://a-b.trycloudflare.com").is_ok());
        assert!(check_https("http://a.example").is_err());
        assert!(check_https("https://u:p@a.example").is_err());
        assert!(check_https("https://").is_err());
    }

    #[tokio::test]
    async fn a_child_ends_the_run_naming_how_it_died_and_what_it_said() {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let mut child = Child::spawn("sh", cmd).unwrap();
        let mut said = Vec::new();
        let err = loop {
            match child.next().await {
                Event::Line(l) => {
                    child.remember(&l);
                    said.push(l);
                }
                Event::Ended(e) => break e,
            }
        };
        assert!(err.message.contains("sh exited with status 3"), "{err:?}");
        assert!(
            err.message.contains("out") && err.message.contains("err"),
            "{err:?}"
        );

        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "kill -9 $$"]);
        let mut child = Child::spawn("sh", cmd).unwrap();
        let err = loop {
            if let Event::Ended(e) = child.next().await {
                break e;
            }
        };
        assert!(err.message.contains("killed by SIGKILL"), "{err:?}");
    }

    /// Whether a live (not zombie) process is in group `pgid`, from `/proc`.
    fn group_alive(pgid: i32) -> bool {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid pgrp ...
            let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
        })
    }

    #[tokio::test]
    async fn a_dropped_child_and_its_group_are_stopped() {
        let mut cmd = tokio::process::Command::new("sh");
        // The shell ignores nothing: SIGTERM ends it and its sleeping child.
        cmd.args(["-c", "sleep 1000 & echo started; wait"]);
        let mut child = Child::spawn("sh", cmd).unwrap();
        assert!(matches!(child.next().await, Event::Line(l) if l == "started"));
        let pgid = nix::unistd::Pid::from_raw(child.pid().unwrap());
        drop(child);
        // The group is gone once SIGTERM (or SIGKILL past the grace) took it; the
        // bound only keeps a failure from hanging.
        let mut tries = 0;
        while group_alive(pgid.as_raw()) {
            tries += 1;
            assert!(
                tries < 3000,
                "the group {pgid} is still there after a minute"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
