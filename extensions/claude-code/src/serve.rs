//! Serving over stdio, with the `initialize` params kept (copied from the
//! shell executor: one executor never imports another).
//!
//! The SDK answers `initialize` itself and does not hand its params to the
//! extension, but the executor needs them: `state_dir`, `executor_dirs` and
//! `config_dir` say where runs live and how a relative `cwd` resolves. So the
//! protocol's input passes through a tap on its way to the SDK: a copy loop
//! that reads each line until the first `initialize` request, records its
//! params ([`Dirs`]) before forwarding that line, and then only copies. The
//! SDK serves the other end of a socket pair exactly as it would stdin, so
//! framing, EOF and everything else are its own; and because the params are
//! recorded before the SDK sees `initialize`, no executor method (which the SDK
//! refuses before `initialize`) can run without them.

use protocol::conn::MAX_MESSAGE_BYTES;
use serde_json::Value;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The directories `initialize` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dirs {
    /// The extension's private state directory (`state_dir`).
    pub state_dir: Option<PathBuf>,
    /// The directory the executor keeps its runs in (`executor_dirs.claude-code`).
    pub executor_dir: Option<PathBuf>,
    /// The config file's directory (`config_dir`).
    pub config_dir: Option<PathBuf>,
}

impl Dirs {
    /// Reads the directories from `initialize` params (absent or empty ones are `None`).
    pub fn from_initialize(params: &Value, executor: &str) -> Dirs {
        let path = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        };
        Dirs {
            state_dir: path(params.get("state_dir")),
            executor_dir: path(params.get("executor_dirs").and_then(|d| d.get(executor))),
            config_dir: path(params.get("config_dir")),
        }
    }

    /// Where the private per-Work directories live: `<state_dir>/work`, else
    /// `work` beside the runs directory.
    pub fn works(&self) -> PathBuf {
        match &self.state_dir {
            Some(state) => state.join("work"),
            None => self
                .runs()
                .parent()
                .map_or_else(|| PathBuf::from("work"), |p| p.join("work")),
        }
    }

    /// Where runs live: `executor_dirs.<executor>` (the spec's
    /// `<state>/executors/<name>`), else `<state_dir>/runs`, else `state/runs`
    /// in the current directory.
    pub fn runs(&self) -> PathBuf {
        if let Some(dir) = &self.executor_dir {
            return dir.clone();
        }
        match &self.state_dir {
            Some(state) => state.join("runs"),
            None => PathBuf::from("state").join("runs"),
        }
    }
}

/// Where the tap records what it saw (shared with the handlers).
pub type SharedDirs = Arc<Mutex<Dirs>>;

/// Copies `input` to `output`, recording the params of the first `initialize`
/// request in `dirs` before forwarding it. Shuts `output` down at EOF.
pub async fn tap<R, W>(input: R, mut output: W, dirs: SharedDirs, executor: &str)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut line: Vec<u8> = Vec::new();
    let mut watching = true;
    loop {
        if !watching {
            let _ = tokio::io::copy_buf(&mut reader, &mut output).await;
            break;
        }
        let buf = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let (take, complete) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if complete {
            if let Some(params) = initialize_params(&line) {
                let seen = Dirs::from_initialize(&params, executor);
                *dirs.lock().unwrap_or_else(|p| p.into_inner()) = seen;
                watching = false;
            }
        } else if line.len() <= MAX_MESSAGE_BYTES {
            continue;
        } else {
            // Longer than any message: the SDK refuses it; stop looking.
            watching = false;
        }
        if output.write_all(&line).await.is_err() {
            return;
        }
        line.clear();
    }
    let _ = output.write_all(&line).await;
    let _ = output.shutdown().await;
}

fn initialize_params(line: &[u8]) -> Option<Value> {
    let msg: Value = serde_json::from_slice(line).ok()?;
    if msg.get("method").and_then(Value::as_str) != Some("initialize") {
        return None;
    }
    Some(msg.get("params").cloned().unwrap_or(Value::Null))
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// An async reader over a descriptor: a pipe, a socket or a file.
fn reader(fd: OwnedFd) -> std::io::Result<Reader> {
    let file = std::fs::File::from(fd);
    let kind = file.metadata()?.file_type();
    if kind.is_fifo() {
        return Ok(Box::new(tokio::net::unix::pipe::Receiver::from_file(file)?));
    }
    if kind.is_socket() {
        let s = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        s.set_nonblocking(true)?;
        return Ok(Box::new(tokio::net::UnixStream::from_std(s)?));
    }
    Ok(Box::new(tokio::fs::File::from_std(file)))
}

/// Serves `ext` over this process's stdio, with the tap in front of the SDK,
/// until the host closes the connection or stdin reaches EOF. Returns the exit
/// status, as [`sdk::run`] does: 0 when the host closed the connection, 1 when
/// serving could not start or the connection broke.
pub fn run(ext: sdk::Extension, dirs: SharedDirs, executor: &'static str) -> i32 {
    let name = ext.name().to_string();
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("{name}: {what}: {e}");
        1
    };
    let (input, output) = match sdk::take_stdio() {
        Ok(fds) => fds,
        Err(e) => return fail("cannot take stdio", &e),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("cannot start a runtime", &e),
    };
    let served = rt.block_on(async move {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let ours = tokio::net::UnixStream::from_std(ours)?;
        let input = reader(input)?;
        tokio::spawn(tap(input, ours, dirs, executor));
        sdk::serve_fds(ext, OwnedFd::from(theirs), output)
            .await
            .map_err(std::io::Error::other)
    });
    match served {
        Ok(reason) => match &*reason {
            protocol::CloseReason::PeerClosed | protocol::CloseReason::Local(_) => 0,
            other => fail("the connection ended", other),
        },
        Err(e) => fail("cannot serve", &e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use tokio::io::AsyncReadExt;

    #[test]
    fn runs_dir_prefers_the_executor_dir() {
        let p = json!({"state_dir": "/s", "executor_dirs": {"claude-code": "/e/cc"}, "config_dir": "/c"});
        let d = Dirs::from_initialize(&p, "claude-code");
        assert_eq!(d.runs(), PathBuf::from("/e/cc"));
        assert_eq!(d.works(), PathBuf::from("/s/work"));
        assert_eq!(d.config_dir, Some(PathBuf::from("/c")));
        let d = Dirs::from_initialize(
            &json!({"state_dir": "/s", "executor_dirs": {}}),
            "claude-code",
        );
        assert_eq!(d.runs(), PathBuf::from("/s/runs"));
        assert_eq!(Dirs::default().runs(), PathBuf::from("state/runs"));
    }

    #[tokio::test]
    async fn the_tap_forwards_every_byte_and_keeps_initialize() {
        let input = concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"other\",\"params\":{\"state_dir\":\"/no\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"state_dir\":\"/st\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"state_dir\":\"/later\"}}\n",
            "no newline at the end",
        );
        let (mut a, b) = tokio::io::duplex(16);
        let dirs = SharedDirs::default();
        let task = tokio::spawn(tap(input.as_bytes(), b, dirs.clone(), "claude-code"));
        let mut out = String::new();
        a.read_to_string(&mut out).await.unwrap();
        task.await.unwrap();
        assert_eq!(out, input);
        assert_eq!(dirs.lock().unwrap().state_dir, Some(PathBuf::from("/st")));
    }
}
