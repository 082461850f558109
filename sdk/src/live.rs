//! `executor.live` of a detached run: the outputs a running run has written so far
//! in its directory ([`crate::detached`]), each as its name, media type, size and
//! last bytes. The shell and claude-code executors answer it with [`answer`], each
//! naming its own output files ([`Output`]).
//!
//! What the run wrote is not trusted: every output is opened under the run
//! directory's descriptor without following a symlink, and only when it is a
//! regular file (`O_NOFOLLOW|O_NONBLOCK`, then `fstat`: a FIFO never blocks the read,
//! [`crate::nofollow`]); a symlink, FIFO or anything else put at an output's name is
//! left out of the answer (and complained about on stderr, the extension's log),
//! never read. Of a file, only its last `tail` bytes are read, by seeking to them:
//! a huge file costs no more than a small one. The tail is the file's raw bytes, so
//! its first line may be cut.

use crate::detached::{self, Launch};
use protocol::wire::{ExecutorLiveResult, LiveOutput};
use protocol::{Code, RpcError};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// The bytes of each output's tail answered when the call asks for none (`tail` 0).
pub const DEFAULT_TAIL: u64 = 16 * 1024;
/// The most bytes of each output's tail one call may ask for; more is refused.
pub const MAX_TAIL: u64 = 64 * 1024;

/// Plain text (the shell's outputs, claude's stderr).
pub const TEXT: &str = "text/plain";
/// JSON lines (claude's `--output-format stream-json`).
pub const NDJSON: &str = "application/x-ndjson";

/// One output file of a run's directory, as the executor names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    /// The file's name in the run directory, which is also the output's name.
    pub file: &'static str,
    /// Its media type.
    pub media_type: &'static str,
}

/// The tail asked for, in bytes: [`DEFAULT_TAIL`] for 0; more than [`MAX_TAIL`] is
/// refused (`invalid`), naming the limit.
pub fn tail_bytes(tail: u64) -> Result<u64, RpcError> {
    match tail {
        0 => Ok(DEFAULT_TAIL),
        t if t <= MAX_TAIL => Ok(t),
        t => Err(RpcError::new(
            Code::Invalid,
            format!("tail {t} is over the limit of {MAX_TAIL} bytes of each output (MAX_TAIL)"),
        )),
    }
}

/// `not_live` for execution `id`, saying why.
pub fn not_live(id: &str, why: impl std::fmt::Display) -> RpcError {
    RpcError::new(
        Code::NotLive,
        format!("execution {id} is not running here: {why}"),
    )
}

/// The last `tail` bytes of `f` (a regular file), and its size.
fn tail_of(mut f: std::fs::File, tail: u64) -> io::Result<(u64, Vec<u8>)> {
    let size = f.metadata()?.len();
    let start = size.saturating_sub(tail);
    f.seek(SeekFrom::Start(start))?;
    let mut out = Vec::new();
    // A file that grew since the fstat is still read no further than the bound.
    f.take(tail).read_to_end(&mut out)?;
    Ok((size, out))
}

/// Reads the `outputs` of the run directory `dir`: each output's size and its last
/// `tail` bytes (at most [`MAX_TAIL`], whatever is asked). A missing output reads
/// as empty (size 0); one that is not a regular file of `dir` is left out, its
/// refusal written to stderr. Fails only when `dir` itself cannot be opened (a
/// symlink there is refused).
pub fn read(dir: &Path, outputs: &[Output], tail: u64) -> io::Result<ExecutorLiveResult> {
    let tail = tail.min(MAX_TAIL);
    let d = crate::nofollow::Dir::open(dir)?;
    let mut result = ExecutorLiveResult::default();
    for o in outputs {
        let (size, bytes) = match d.open_file(o.file) {
            Ok(None) => (0, Vec::new()),
            Ok(Some(f)) => match tail_of(f, tail) {
                Ok(got) => got,
                Err(e) => {
                    eprintln!("live output: {}: not read: {e}", dir.join(o.file).display());
                    continue;
                }
            },
            Err(e) => {
                eprintln!("live output: not read: {e}");
                continue;
            }
        };
        result.outputs.push(LiveOutput {
            name: o.file.to_string(),
            media_type: o.media_type.to_string(),
            size,
            tail: bytes,
        });
    }
    Ok(result)
}

/// Whether `launch` is running: its end is not recorded and its wrapper is still
/// there (a wrapper gone without a `status` is a lost run, not a live one).
pub fn running(launch: &Launch) -> bool {
    !detached::exists(&launch.dir, detached::STATUS) && launch.wrapper_alive()
}

/// Answers `executor.live` for execution `id`, whose current launch is `launch`
/// (`None` when it started no process here): its `outputs` with their last `tail`
/// bytes ([`tail_bytes`]), read off the async runtime. A launch that has ended, or
/// none, is `not_live`; a tail over [`MAX_TAIL`] is `invalid`.
pub async fn answer(
    launch: Option<&Launch>,
    id: &str,
    outputs: &'static [Output],
    tail: u64,
) -> Result<ExecutorLiveResult, RpcError> {
    let tail = tail_bytes(tail)?;
    let Some(launch) = launch else {
        return Err(not_live(id, "it started no process here"));
    };
    if !running(launch) {
        return Err(not_live(id, "it has ended"));
    }
    let dir = launch.dir.clone();
    tokio::task::spawn_blocking(move || read(&dir, outputs, tail))
        .await
        .map_err(|e| RpcError::new(Code::Internal, format!("reading the live output: {e}")))?
        .map_err(|e| {
            RpcError::new(
                Code::Internal,
                format!("reading the live output of execution {id}: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("oc-live-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("run")).unwrap();
            Scratch(dir)
        }
        fn run(&self) -> PathBuf {
            self.0.join("run")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const OUTPUTS: &[Output] = &[
        Output {
            file: "stdout",
            media_type: TEXT,
        },
        Output {
            file: "stderr",
            media_type: TEXT,
        },
        Output {
            file: "out.jsonl",
            media_type: NDJSON,
        },
    ];

    #[test]
    fn tails_are_bounded_and_a_larger_ask_is_refused_naming_the_limit() {
        assert_eq!(tail_bytes(0).unwrap(), DEFAULT_TAIL);
        assert_eq!(tail_bytes(10).unwrap(), 10);
        assert_eq!(tail_bytes(MAX_TAIL).unwrap(), MAX_TAIL);
        let e = tail_bytes(MAX_TAIL + 1).unwrap_err();
        assert!(e.is(Code::Invalid), "{e}");
        assert!(e.message.contains("65536"), "{e}");
    }

    #[test]
    fn the_last_bytes_of_each_output_and_its_size() {
        let s = Scratch::new("tail");
        let run = s.run();
        std::fs::write(run.join("stdout"), b"line 1\nline 2\n").unwrap();
        std::fs::write(run.join("out.jsonl"), b"{\"type\":\"system\"}\n").unwrap();
        let r = read(&run, OUTPUTS, 9).unwrap();
        let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["stdout", "stderr", "out.jsonl"]);
        assert_eq!(r.outputs[0].size, 14);
        assert_eq!(r.outputs[0].tail, b"1\nline 2\n");
        assert_eq!(r.outputs[0].media_type, "text/plain");
        // Not written yet: empty.
        assert_eq!((r.outputs[1].size, r.outputs[1].tail.len()), (0, 0));
        assert_eq!(r.outputs[2].media_type, "application/x-ndjson");
        assert_eq!(r.outputs[2].tail, b"system\"}\n");
        // A whole file when it is shorter than the tail.
        let r = read(&run, OUTPUTS, 1024).unwrap();
        assert_eq!(r.outputs[0].tail, b"line 1\nline 2\n");
    }

    #[test]
    fn a_huge_output_is_read_no_further_than_the_bound() {
        let s = Scratch::new("huge");
        let run = s.run();
        // A sparse file of 8 GiB, as a run could leave; its last bytes are known.
        let f = std::fs::File::create(run.join("stdout")).unwrap();
        let size = 8u64 << 30;
        f.set_len(size - 4).unwrap();
        drop(f);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(run.join("stdout"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"end\n").unwrap();
        // Even an ask over the limit reads no more than the limit.
        let r = read(&run, OUTPUTS, u64::MAX).unwrap();
        assert_eq!(r.outputs[0].size, size);
        assert_eq!(r.outputs[0].tail.len() as u64, MAX_TAIL);
        assert!(r.outputs[0].tail.ends_with(b"end\n"));
    }

    #[test]
    fn symlinks_fifos_and_directories_are_left_out_never_read() {
        let s = Scratch::new("hostile");
        let run = s.run();
        let secret = s.0.join("secret");
        std::fs::write(&secret, b"the secret\n").unwrap();
        symlink(&secret, run.join("stdout")).unwrap();
        // A FIFO nobody writes: a read that opened it would block for good.
        nix::unistd::mkfifo(
            &run.join("stderr"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::create_dir(run.join("out.jsonl")).unwrap();
        let r = read(&run, OUTPUTS, 1024).unwrap();
        assert!(r.outputs.is_empty(), "{r:?}");
        // The run directory itself as a symlink is refused.
        symlink(&run, s.0.join("linked")).unwrap();
        assert!(read(&s.0.join("linked"), OUTPUTS, 1024).is_err());
    }

    #[tokio::test]
    async fn an_ended_launch_or_none_is_not_live() {
        let s = Scratch::new("ended");
        let run = s.run();
        let e = answer(None, "ex-1", OUTPUTS, 0).await.unwrap_err();
        assert!(e.is(Code::NotLive), "{e}");
        assert!(e.message.contains("ex-1"), "{e}");
        // The wrapper is gone (no such process) and the end is recorded.
        detached::write_json(&run, detached::STATUS, &detached::Status::default()).unwrap();
        let launch = Launch {
            dir: run.clone(),
            pid: i32::MAX,
            start: 1,
            nonce: "0".repeat(32),
            wrap_arg: "__wrap",
        };
        let e = answer(Some(&launch), "ex-1", OUTPUTS, 0).await.unwrap_err();
        assert!(e.is(Code::NotLive), "{e}");
        assert!(e.message.contains("ended"), "{e}");
        // The bound is checked first.
        let e = answer(Some(&launch), "ex-1", OUTPUTS, MAX_TAIL + 1)
            .await
            .unwrap_err();
        assert!(e.is(Code::Invalid), "{e}");
    }
}
