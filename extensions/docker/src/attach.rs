//! The attach client, `EXE __docker-attach --socket S --container NAME`: the
//! command an executor runs (under its own wrapper) instead of the launch. It
//! attaches to the created container's stdin, stdout and stderr (a hijacked
//! `attach` stream), starts it, copies its own stdin in (closing the container's on
//! EOF), its output frames out to its own stdout and stderr, passes SIGTERM and
//! SIGINT on to it, and when the stream ends takes its exit status, removes it and
//! exits with that status. Nothing ran (engine unreachable, the container missing,
//! start refused): a line on stderr and [`NOTHING_RAN`].

use crate::engine::{chain, enc, Engine, EngineError, EXCHANGE_BOUND};
use crate::plan::ATTACH_ARG;
use hyper::body::Bytes;
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The exit status when nothing ran (as `docker run` says when the engine fails).
pub const NOTHING_RAN: i32 = 125;
/// The exit status when the container's end could not be learnt.
pub const LOST: i32 = 255;
/// The longest one `wait` request is held open before asking again.
pub const WAIT_ROUND: Duration = Duration::from_secs(60);
/// How many times an unreachable engine is asked again for the exit status (a
/// second apart).
pub const WAIT_RETRIES: u32 = 30;
/// The most bytes copied at once from a frame.
const CHUNK: usize = 64 * 1024;

/// The attach client's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The engine's socket.
    pub socket: String,
    /// The container.
    pub container: String,
}

/// Reads `--socket S --container NAME` (after [`ATTACH_ARG`]).
pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let (mut socket, mut container) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--socket" => socket = it.next().cloned(),
            "--container" => container = it.next().cloned(),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match (socket, container) {
        (Some(socket), Some(container)) if !socket.is_empty() && !container.is_empty() => {
            Ok(Args { socket, container })
        }
        _ => Err(format!(
            "usage: {ATTACH_ARG} --socket SOCKET --container NAME"
        )),
    }
}

/// The entry point: `args` are those after [`ATTACH_ARG`]. Returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("docker-attach: {e}");
            return 2;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("docker-attach: cannot make a runtime: {e}");
            return NOTHING_RAN;
        }
    };
    let status = rt.block_on(run(&args));
    // The copy of stdin may still be blocked reading it: do not wait for it.
    rt.shutdown_background();
    status
}

/// Why the run could not start: the line printed, and the status.
fn nothing_ran(why: impl std::fmt::Display) -> i32 {
    eprintln!("docker-attach: nothing ran: {why}");
    NOTHING_RAN
}

/// Attach, start, carry, wait, remove.
pub async fn run(args: &Args) -> i32 {
    let engine = Engine::new(&args.socket);
    let name = enc(&args.container);
    // Signals first, so none is lost between start and the copy.
    let signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => return nothing_ran(format!("cannot take SIGTERM and SIGINT: {e}")),
    };
    let stream = match tokio::time::timeout(EXCHANGE_BOUND, attach(&engine, &args.container)).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return nothing_ran(e),
        Err(_) => {
            return nothing_ran(format!(
                "the engine at {} is unavailable: attach: no answer within {EXCHANGE_BOUND:?}",
                args.socket
            ))
        }
    };
    let mut signals = signals;
    // Told to end before the container started: it does not start.
    let early = tokio::select! {
        biased;
        sig = signals.next() => Some(sig),
        () = std::future::ready(()) => None,
    };
    if let Some(sig) = early {
        let _ = remove(&engine, &name).await;
        eprintln!(
            "docker-attach: {sig} before {} started: not started",
            args.container
        );
        return 128 + if sig == "SIGINT" { 2 } else { 15 };
    }
    let start = engine
        .call("POST", &format!("/containers/{name}/start"), None)
        .await;
    match start {
        Ok(a) if a.ok() || a.status == 304 => {}
        Ok(a) if a.status == 404 => {
            return nothing_ran(format!(
                "the container {} is not on the engine at {}",
                args.container, args.socket
            ))
        }
        Ok(a) => {
            let _ = remove(&engine, &name).await;
            return nothing_ran(format!(
                "the engine at {} did not start {}: {} {}",
                args.socket,
                args.container,
                a.status,
                a.message()
            ));
        }
        Err(e) => return nothing_ran(e),
    }
    let (reader, writer) = tokio::io::split(stream);
    let stdin = tokio::spawn(carry_stdin(writer));
    let output = demux(reader);
    tokio::pin!(output);
    loop {
        tokio::select! {
            r = &mut output => {
                if let Err(e) = r {
                    eprintln!("docker-attach: the output of {} broke off: {e}", args.container);
                }
                break;
            }
            sig = signals.next() => {
                let path = format!("/containers/{name}/kill?signal={sig}");
                if let Err(e) = engine.call("POST", &path, None).await {
                    eprintln!("docker-attach: passing {sig} on to {}: {e}", args.container);
                }
            }
        }
    }
    stdin.abort();
    // A signal while waiting is passed on too.
    let waiting = wait(&engine, &name, &args.container);
    tokio::pin!(waiting);
    let status = loop {
        tokio::select! {
            s = &mut waiting => break s,
            sig = signals.next() => {
                let path = format!("/containers/{name}/kill?signal={sig}");
                let _ = engine.call("POST", &path, None).await;
            }
        }
    };
    if let Err(e) = remove(&engine, &name).await {
        eprintln!("docker-attach: removing {}: {e}", args.container);
    }
    status
}

/// SIGTERM and SIGINT, as the engine names them.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// The hijacked attach stream of `container` (stdin, stdout, stderr, with what it
/// printed so far).
async fn attach(
    engine: &Engine,
    container: &str,
) -> Result<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>, String> {
    let mut sender = engine.connect().await.map_err(|e| e.to_string())?;
    let path = format!(
        "/containers/{}/attach?stream=1&stdin=1&stdout=1&stderr=1&logs=1",
        enc(container)
    );
    let req = hyper::Request::builder()
        .method("POST")
        .uri(Engine::full(&path))
        .header("Host", "docker")
        .header("Connection", "Upgrade")
        .header("Upgrade", "tcp")
        .body(http_body_util::Full::new(Bytes::new()))
        .map_err(|e| format!("bad request: {e}"))?;
    let answer = sender.send_request(req).await.map_err(|e| {
        engine
            .unavailable(format!("attach: {}", chain(&e)))
            .to_string()
    })?;
    let status = answer.status().as_u16();
    if status == 404 {
        return Err(format!(
            "the container {container} is not on the engine at {}",
            engine.socket
        ));
    }
    if status != 101 {
        use http_body_util::BodyExt;
        let body = http_body_util::Limited::new(answer.into_body(), 4096)
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_owned())
            .unwrap_or_default();
        return Err(format!(
            "the engine at {} did not hand over {container}'s streams (attach answered {status}, not 101 Switching Protocols): {}",
            engine.socket,
            protocol::wire::clip_line(&body, 400)
        ));
    }
    let upgraded = hyper::upgrade::on(answer)
        .await
        .map_err(|e| format!("the engine at {} attach: {}", engine.socket, chain(&e)))?;
    Ok(hyper_util::rt::TokioIo::new(upgraded))
}

/// Copies this process's stdin into the container, then closes the container's
/// stdin (the write half).
async fn carry_stdin<W: AsyncWrite + Unpin>(mut writer: W) {
    let mut stdin = tokio::io::stdin();
    let _ = tokio::io::copy(&mut stdin, &mut writer).await;
    let _ = writer.shutdown().await;
}

/// Demultiplexes the output frames (`[stream, 0, 0, 0, len u32 BE]` then `len`
/// bytes; 1 stdout, 2 stderr) to this process's stdout and stderr, until the stream
/// ends.
pub async fn demux<R: AsyncRead + Unpin>(mut reader: R) -> std::io::Result<()> {
    let mut out = tokio::io::stdout();
    let mut err = tokio::io::stderr();
    demux_to(&mut reader, &mut out, &mut err).await
}

/// [`demux`] to any two writers.
pub async fn demux_to<R, O, E>(reader: &mut R, out: &mut O, err: &mut E) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    O: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    let mut header = [0u8; 8];
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut left = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        while left > 0 {
            let n = reader.read(&mut buf[..left.min(CHUNK)]).await?;
            if n == 0 {
                return Ok(());
            }
            left -= n;
            // A closed stdout or stderr of ours does not stop the run.
            let _ = match header[0] {
                2 => err.write_all(&buf[..n]).await.and(err.flush().await),
                _ => out.write_all(&buf[..n]).await.and(out.flush().await),
            };
        }
    }
}

/// The container's exit status (`wait?condition=not-running`, asked again while it
/// runs; an unreachable engine is asked again up to [`WAIT_RETRIES`] times).
async fn wait(engine: &Engine, name: &str, container: &str) -> i32 {
    let path = format!("/containers/{name}/wait?condition=not-running");
    let mut retries = 0;
    loop {
        match engine.call_within("POST", &path, None, WAIT_ROUND).await {
            Ok(a) if a.ok() => return exit_status(&a.json()),
            Ok(a) if a.status == 404 => {
                eprintln!(
                    "docker-attach: {container} is gone from the engine at {}: its exit status is unknown",
                    engine.socket
                );
                return LOST;
            }
            Ok(a) => {
                eprintln!(
                    "docker-attach: waiting for {container}: {} {}",
                    a.status,
                    a.message()
                );
                return LOST;
            }
            // Still running: the round ended.
            Err(EngineError::Unavailable(m)) if m.contains("no answer within") => {}
            Err(e) => {
                retries += 1;
                if retries > WAIT_RETRIES {
                    eprintln!("docker-attach: waiting for {container}: {e} ({WAIT_RETRIES} tries)");
                    return LOST;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The exit status a wait answered (`StatusCode`, 128+N for a signal as the engine
/// reports it), as an exit status of this process.
pub fn exit_status(v: &Value) -> i32 {
    match v["StatusCode"].as_i64() {
        Some(c) if (0..=255).contains(&c) => c as i32,
        Some(_) => LOST,
        None => LOST,
    }
}

async fn remove(engine: &Engine, name: &str) -> Result<(), String> {
    let a = engine
        .call(
            "DELETE",
            &format!("/containers/{name}?force=true&v=true"),
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
    if a.ok() || a.status == 404 {
        Ok(())
    } else {
        Err(format!("{} {}", a.status, a.message()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frames_go_to_their_stream_and_args_read() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut input = Vec::new();
        for (s, text) in [(1u8, "out\n"), (2, "err\n"), (1, "more")] {
            input.extend([s, 0, 0, 0]);
            input.extend((text.len() as u32).to_be_bytes());
            input.extend(text.as_bytes());
        }
        let (mut out, mut err) = (Vec::new(), Vec::new());
        rt.block_on(demux_to(&mut input.as_slice(), &mut out, &mut err))
            .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "out\nmore");
        assert_eq!(String::from_utf8(err).unwrap(), "err\n");
        let a: Vec<String> = ["--socket", "/s", "--container", "oc-x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            parse_args(&a).unwrap(),
            Args {
                socket: "/s".into(),
                container: "oc-x".into()
            }
        );
        assert!(parse_args(&a[..2]).is_err());
        assert_eq!(exit_status(&serde_json::json!({"StatusCode": 143})), 143);
        assert_eq!(exit_status(&serde_json::json!({})), LOST);
    }

    #[test]
    fn an_unreachable_engine_means_nothing_ran() {
        let args = Args {
            socket: "/nonexistent/oc-docker.sock".into(),
            container: "oc-x".into(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(run(&args)), NOTHING_RAN);
    }
}
