//! `tunnel.run`: ssh as a child in its own process group, for as long as the host
//! holds the call.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::Stdio;

use protocol::wire::{TunnelRunParams, TunnelRunResult, TunnelUrlParams};
use protocol::{Code, RpcError};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::config::Config;

/// The longest ssh diagnostic line kept.
pub const MAX_LINE: u64 = 4096;
/// How many of ssh's last lines an ended run quotes.
pub const KEPT_LINES: usize = 8;

/// What ssh says (with `-v`) once the server took the reverse forward.
pub const FORWARD_UP: &str = "remote forward success";

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, message)
}

/// The ssh process group, stopped when dropped (the run answered, failed, or was
/// cancelled and its future dropped): SIGTERM to the group; the child handle's
/// `kill_on_drop` then SIGKILLs ssh itself, and tokio reaps it.
struct Group(Option<nix::unistd::Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM);
        }
    }
}

/// Serve one `tunnel.run`: an error when the config cannot run (`invalid`, which
/// the host does not retry), when ssh cannot start or dies (`unavailable`), or when
/// the host refuses the URL.
pub async fn run(ctx: sdk::Ctx, p: TunnelRunParams) -> Result<TunnelRunResult, RpcError> {
    if p.tunnel_type != crate::TUNNEL_TYPE {
        return Err(invalid(format!(
            "tunnel type {:?} is not this package's ({:?})",
            p.tunnel_type,
            crate::TUNNEL_TYPE
        )));
    }
    let config = Config::parse(&p.config).map_err(|problems| {
        invalid(
            problems
                .iter()
                .map(|pr| format!("{}: {}", pr.path, pr.message))
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    let addr: SocketAddr = p.addr.parse().map_err(|_| {
        invalid(format!(
            "the listener's address {:?} is not an IP address and port",
            p.addr
        ))
    })?;
    let mut cmd = tokio::process::Command::new(&config.ssh);
    cmd.args(config.args(&addr.to_string()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let parent = nix::unistd::getpid();
    // SAFETY: between fork and exec the hook only calls async-signal-safe functions
    // (setpgid, prctl, getppid).
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
    let mut child = cmd.spawn().map_err(|e| {
        RpcError::new(
            Code::Unavailable,
            format!("cannot start {:?}: {e}", config.ssh),
        )
    })?;
    let _group = Group(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(nix::unistd::Pid::from_raw),
    );
    eprintln!(
        "ssh: run {}: forwarding {} on {}@{}:{} to {addr}",
        p.run_id, config.remote_port, config.user, config.host, config.port
    );
    let Some(stderr) = child.stderr.take() else {
        return Err(RpcError::new(Code::Unavailable, "ssh has no stderr"));
    };
    let mut reader = BufReader::new(stderr);
    let mut last: VecDeque<String> = VecDeque::new();
    let mut published = false;
    let mut eof = false;
    loop {
        let mut buf = Vec::new();
        let mut limited = (&mut reader).take(MAX_LINE);
        tokio::select! {
            n = limited.read_until(b'\n', &mut buf), if !eof => {
                match n {
                    Ok(0) | Err(_) => eof = true,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
                        if !line.starts_with("debug") || line.contains(FORWARD_UP) {
                            eprintln!("ssh: {line}");
                        }
                        if !published && line.contains(FORWARD_UP) {
                            published = true;
                            ctx.host
                                .call_typed(&TunnelUrlParams {
                                    run_id: p.run_id.clone(),
                                    url: config.url.clone(),
                                })
                                .await
                                .map_err(|e| {
                                    RpcError::new(
                                        Code::Unavailable,
                                        format!("the host did not take the URL {}: {e}", config.url),
                                    )
                                })?;
                        }
                        if !line.starts_with("debug") {
                            if last.len() == KEPT_LINES {
                                last.pop_front();
                            }
                            last.push_back(line);
                        }
                    }
                }
            }
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                let said: Vec<String> = last.into_iter().collect();
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("ssh ended ({status}): {}", said.join(" | ")),
                ));
            }
        }
    }
}
