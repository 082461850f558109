//! Running `git` as a child process: bounded in time, never prompting, in its
//! own process group (killed whole on a timeout), and killed with the provider
//! (`PR_SET_PDEATHSIG`), so a provider that dies leaves no git running on.
//!
//! Every command is neutralised ([`crate::neutral`]): its repository named, never
//! discovered ([`Repo`]), its command-running config overridden, nothing outside
//! the repository read, so nothing a run planted in its workspace runs here.

use crate::neutral::{self, Repo, LISTING, LISTING_BOUND};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// How much of git's stderr a message quotes, at most.
const STDERR_QUOTE: usize = 600;

/// The credential helper [`Git::with_credential`] adds: it answers `username` and
/// the password from two variables of the child, so neither is on a command line
/// or in any repository's config.
const HELPER: &str = r#"!f() { test "$1" = get || exit 0; printf 'username=%s\npassword=%s\n' "$OC_GIT_USERNAME" "$OC_GIT_PASSWORD"; }; f"#;

/// One git invocation's settings.
#[derive(Debug, Clone)]
pub struct Git {
    /// The bound on the command.
    pub timeout: Duration,
    /// Extra environment (the acquisition's `host_env`).
    pub env: BTreeMap<String, String>,
    /// Where each running git's process group is noted (`<pgid>`: its start time and
    /// the provider's pid), so a provider restarted after a SIGKILL can end what the
    /// dead one left running ([`reap`]) before it repairs anything.
    pub track: Option<PathBuf>,
    /// Whether [`Git::with_credential`] gave it a credential helper.
    credential: bool,
}

/// What a git process gave back, as bytes.
struct Raw {
    stdout: Vec<u8>,
    stderr: String,
}

/// What a finished git said.
#[derive(Debug, Clone)]
pub struct Output {
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// Why a git command failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// It could not be started (no git on PATH).
    Spawn(String),
    /// It ran over its bound and was killed.
    Timeout(Duration),
    /// It exited non-zero.
    Exit {
        /// The exit code (-1 for a signal).
        code: i32,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// The provider would not run it: the repository's config could not be listed
    /// or names more drivers than it blanks (see [`crate::neutral`]).
    Refused(String),
}

impl Failure {
    /// git's own words (or ours), clipped to a quotable length.
    pub fn detail(&self) -> String {
        match self {
            Failure::Spawn(e) => format!("cannot run git: {e}"),
            Failure::Refused(why) => clip(why),
            Failure::Timeout(d) => {
                format!("git ran over its bound of {} s and was killed", d.as_secs())
            }
            Failure::Exit { code, stderr } => {
                let s = clip(stderr.trim());
                if s.is_empty() {
                    format!("git exited with status {code}")
                } else {
                    s
                }
            }
        }
    }

    /// The stderr, lower-cased, for classification.
    pub fn lower(&self) -> String {
        match self {
            Failure::Exit { stderr, .. } => stderr.to_lowercase(),
            other => other.detail().to_lowercase(),
        }
    }
}

fn clip(s: &str) -> String {
    if s.len() <= STDERR_QUOTE {
        return s.to_string();
    }
    let mut start = s.len() - STDERR_QUOTE;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

impl Git {
    /// Settings for git commands bounded by `timeout`, with `env` (the acquisition's
    /// `host_env`) and their process groups noted under `track`.
    pub fn new(timeout: Duration, env: BTreeMap<String, String>, track: Option<PathBuf>) -> Git {
        Git {
            timeout,
            env,
            track,
            credential: false,
        }
    }

    /// Runs `git <args>` for `repo`, neutralised (see [`crate::neutral`]):
    /// in a workspace, the config git would read there is listed first and each
    /// driver it names blanked; a config that cannot be listed runs nothing.
    pub async fn run<S: AsRef<OsStr>>(&self, repo: &Repo, args: &[S]) -> Result<Output, Failure> {
        let mut pairs = neutral::neutral();
        if repo.is_workspace() {
            let listed = self
                .spawn(repo, &pairs, LISTING, self.timeout.min(LISTING_BOUND))
                .await
                .map_err(|f| match f {
                    Failure::Spawn(_) => f,
                    _ => Failure::Refused(format!(
                        "the config of {} cannot be listed, so git was not run there: {}",
                        repo.describe(),
                        f.detail()
                    )),
                })?;
            pairs.extend(
                neutral::blank_drivers(&listed.stdout, &repo.describe())
                    .map_err(Failure::Refused)?,
            );
        }
        if self.credential {
            pairs.push(("credential.helper".into(), HELPER.into()));
        }
        let raw = self.spawn(repo, &pairs, args, self.timeout).await?;
        Ok(Output {
            stdout: String::from_utf8_lossy(&raw.stdout).into_owned(),
            stderr: raw.stderr,
        })
    }

    /// Starts one git with the command-scope `pairs` and waits for it.
    async fn spawn<S: AsRef<OsStr>>(
        &self,
        repo: &Repo,
        pairs: &[(OsString, OsString)],
        args: &[S],
        bound: Duration,
    ) -> Result<Raw, Failure> {
        let (options, dir) = repo.options();
        let mut cmd = Command::new("git");
        cmd.arg("--no-pager").args(options).args(args);
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        neutral::environment(&mut cmd, &self.env, pairs);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: only prctl between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().map_err(|e| Failure::Spawn(e.to_string()))?;
        let pid = child.id();
        let noted = self.note(pid);
        let result = self.finish(child, pid, bound).await;
        if let Some(path) = noted {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// This git with an HTTP(S) credential for the commands it runs: a helper given
    /// in the command scope alone (never written to any repository's config), after
    /// the empty `credential.helper` that clears every other, which answers
    /// `username` and the password from two variables of the child.
    pub fn with_credential(mut self, username: &str, password: &str) -> Git {
        self.credential = true;
        self.env
            .insert("OC_GIT_USERNAME".to_string(), username.to_string());
        self.env
            .insert("OC_GIT_PASSWORD".to_string(), password.to_string());
        self
    }

    fn note(&self, pid: Option<u32>) -> Option<PathBuf> {
        let (dir, pid) = (self.track.as_ref()?, pid?);
        let start = start_time(pid)?;
        std::fs::create_dir_all(dir).ok()?;
        let path = dir.join(pid.to_string());
        std::fs::write(&path, format!("{start} {}", std::process::id())).ok()?;
        Some(path)
    }

    async fn finish(
        &self,
        child: tokio::process::Child,
        pid: Option<u32>,
        bound: Duration,
    ) -> Result<Raw, Failure> {
        match tokio::time::timeout(bound, child.wait_with_output()).await {
            Ok(Ok(out)) => {
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                if out.status.success() {
                    Ok(Raw {
                        stdout: out.stdout,
                        stderr,
                    })
                } else {
                    Err(Failure::Exit {
                        code: out.status.code().unwrap_or(-1),
                        stderr,
                    })
                }
            }
            Ok(Err(e)) => Err(Failure::Spawn(e.to_string())),
            Err(_) => {
                // The future (and with it the child) is dropped: kill its whole group,
                // the helpers it started (ssh, upload-pack, filters) too.
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                Err(Failure::Timeout(bound))
            }
        }
    }

    /// The commit checked out in `repo` (`git rev-parse HEAD`): empty when the
    /// repository could not be named (`Err`) or git fails there.
    pub async fn head(&self, repo: Result<Repo, String>) -> String {
        match repo {
            Ok(repo) => self
                .run(&repo, &["rev-parse", "HEAD"])
                .await
                .map(|o| o.stdout.trim().to_string())
                .unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Runs git and answers whether it succeeded (for checks such as `rev-parse --verify`).
    pub async fn ok<S: AsRef<OsStr>>(&self, repo: &Repo, args: &[S]) -> bool {
        self.run(repo, args).await.is_ok()
    }
}

/// A process's start time (`/proc/<pid>/stat` field 22), which tells a live process
/// from a later one that reused its pid.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_string)
}

/// Ends the process groups of git commands a previous provider process left running
/// (SIGKILLed mid-acquisition, its git's own children live on), so nothing writes into
/// a workspace while it is repaired. Answers how many it ended.
pub async fn reap(track: &Path) -> usize {
    let mut ended = 0;
    let Ok(entries) = std::fs::read_dir(track) else {
        return 0;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let noted = std::fs::read_to_string(&path).unwrap_or_default();
        let mut parts = noted.split_whitespace();
        let (start, owner) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if owner == std::process::id().to_string() {
            continue;
        }
        let pid = entry.file_name().to_string_lossy().parse::<u32>().ok();
        // The group is ended when its leader is the git noted (same start time), or is
        // gone: while any member of a group lives, Linux hands its number to no new
        // process, so a number no process holds can only name the old group's
        // survivors (or nothing). A number reused by a later process is left alone.
        let ours = |p: &u32| match start_time(*p) {
            Some(now) => now == start,
            None => !Path::new(&format!("/proc/{p}")).exists(),
        };
        if let Some(pid) = pid.filter(ours) {
            if let Ok(raw) = i32::try_from(pid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(raw),
                    nix::sys::signal::Signal::SIGKILL,
                );
                ended += 1;
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    if ended > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    ended
}

/// What a failed fetch or clone most likely means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The repository needs a credential the provider lacks (or was refused).
    Credential,
    /// The repository cannot be reached or does not exist there.
    Unreachable,
    /// It ran over its bound.
    Timeout,
    /// Something else.
    Other,
}

impl Cause {
    /// The cause's name in an error's `data.what`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Credential => "credential",
            Cause::Unreachable => "unreachable",
            Cause::Timeout => "timeout",
            Cause::Other => "fetch",
        }
    }
}

/// Classifies a failed fetch from git's words.
pub fn classify(f: &Failure) -> Cause {
    if matches!(f, Failure::Timeout(_)) {
        return Cause::Timeout;
    }
    let s = f.lower();
    let credential = [
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "authentication failed",
        "permission denied (publickey",
        "host key verification failed",
        "invalid username or password",
        "http basic: access denied",
        "401",
        "403",
    ];
    if credential.iter().any(|p| s.contains(p)) {
        return Cause::Credential;
    }
    let unreachable = [
        "could not resolve host",
        "connection refused",
        "unable to access",
        "does not appear to be a git repository",
        "repository not found",
        "not found",
        "could not read from remote repository",
        "unable to connect",
        "connection timed out",
        "no route to host",
        "network is unreachable",
        "unable to look up",
        "does not exist",
    ];
    if unreachable.iter().any(|p| s.contains(p)) {
        return Cause::Unreachable;
    }
    Cause::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(s: &str) -> Failure {
        Failure::Exit {
            code: 128,
            stderr: s.into(),
        }
    }

    #[test]
    fn failures_are_classified_from_gits_words() {
        assert_eq!(
            classify(&exit("fatal: could not read Username for 'https://example.com': terminal prompts disabled")),
            Cause::Credential
        );
        assert_eq!(
            classify(&exit("git@example.com: Permission denied (publickey).")),
            Cause::Credential
        );
        assert_eq!(
            classify(&exit("fatal: unable to connect to 127.0.0.1:\n127.0.0.1[0: 127.0.0.1]: errno=Connection refused")),
            Cause::Unreachable
        );
        assert_eq!(
            classify(&exit(
                "fatal: '/nope' does not appear to be a git repository"
            )),
            Cause::Unreachable
        );
        assert_eq!(
            classify(&Failure::Timeout(Duration::from_secs(1))),
            Cause::Timeout
        );
        assert_eq!(classify(&exit("fatal: bad object")), Cause::Other);
        let long = "x".repeat(2000);
        assert!(exit(&long).detail().len() < 700);
    }
}
