//! A real git origin over HTTP, as GitHub serves one, for system tests.
//!
//! The real `git http-backend` (a CGI program, found as `$(git --exec-path)/git-http-backend`)
//! behind a small HTTP/1.1 server on 127.0.0.1 (an ephemeral port): plain std
//! [`TcpListener`], one thread per connection, one request per connection (every answer
//! says `Connection: close`). The request head is bounded ([`MAX_HEAD`], else 431) and so
//! is the body ([`MAX_BODY`], else 413); a chunked request body is decoded before the CGI
//! reads it.
//!
//! Every request (fetch and push) needs HTTP Basic auth `x-access-token:<token>`, as
//! GitHub asks of an installation token:
//! - no `Authorization`, or one that is not well-formed Basic: 401 with
//!   `WWW-Authenticate: Basic realm="GitHub"` (so git asks its credential helper);
//! - a user other than `x-access-token` (or the one [`GitHttp::allow_user`] named for
//!   the token), or a token not accepted now: 401 as well;
//! - a token accepted only for other repositories ([`GitHttp::allow`]): 404, as GitHub
//!   hides a repository from a token that may not see it;
//! - else `git http-backend` answers, with the repositories under [`GitHttp::root`].
//!
//! Each request is recorded ([`GitHttp::requests`]), refused ones included.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::HANG;

/// The longest request head read (and the longest CGI head taken from the backend).
pub const MAX_HEAD: usize = 64 * 1024;
/// The largest request body read (after chunked decoding, before gzip decoding).
pub const MAX_BODY: usize = 64 * 1024 * 1024;
/// The body of git's probe request (a lone flush packet, `0000`).
const PROBE_LEN: usize = 4;
/// The Basic user GitHub takes a token with.
pub const TOKEN_USER: &str = "x-access-token";

/// One request the server answered (or refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, without the query (`/o/r.git/info/refs`).
    pub path: String,
    /// `git-upload-pack` (fetch) or `git-receive-pack` (push), from the `service` query
    /// parameter or the path's last segment; `None` for anything else.
    pub service: Option<String>,
    /// The Basic user as sent; `None` when there was no well-formed Basic auth.
    pub user: Option<String>,
    /// The Basic password (the token) as sent; `None` when there was no well-formed
    /// Basic auth.
    pub token: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
    /// The length of the request body as read (chunks decoded, gzip not); 0 when it was
    /// not read (a refusal).
    pub body_len: usize,
    /// The body came `Transfer-Encoding: chunked`.
    pub chunked: bool,
}

impl GitRequest {
    /// A push: a `POST` to `git-receive-pack` with more than a lone flush packet
    /// (`0000`, the probe git sends before a push over its post buffer).
    pub fn is_push(&self) -> bool {
        self.method == "POST"
            && self.service.as_deref() == Some("git-receive-pack")
            && self.body_len > PROBE_LEN
    }
}

/// What a token may reach.
#[derive(Debug, Clone)]
enum Grant {
    All,
    Repos(Vec<String>),
}

struct Shared {
    root: PathBuf,
    backend: PathBuf,
    /// By token: the Basic user it must come with, and what it may see.
    grants: Mutex<HashMap<String, (String, Grant)>>,
    requests: Mutex<Vec<GitRequest>>,
}

impl Shared {
    fn grants(&self) -> MutexGuard<'_, HashMap<String, (String, Grant)>> {
        self.grants.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, r: GitRequest) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r);
    }
}

/// The running origin. Dropping it stops accepting and removes [`GitHttp::root`].
pub struct GitHttp {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for GitHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHttp")
            .field("addr", &self.addr)
            .field("root", &self.shared.root)
            .finish()
    }
}

fn io_err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::other(msg.into())
}

fn bad(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

/// A `git` command that reads no configuration of the machine's or the user's.
fn git() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null());
    c
}

/// Run `cmd`; an error naming `what` and its stderr when it fails.
fn run(cmd: &mut Command, what: &str) -> std::io::Result<String> {
    let out = cmd
        .output()
        .map_err(|e| io_err(format!("{what}: cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(io_err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `o/r`, if `name` is one: two segments of letters, digits, `.`, `_` and `-`, neither
/// of them `.`/`..` nor ending in `.git`.
fn check_name(name: &str) -> std::io::Result<()> {
    let ok_segment = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && !s.ends_with(".git")
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    match name.split_once('/') {
        Some((o, r)) if ok_segment(o) && ok_segment(r) => Ok(()),
        _ => Err(io_err(format!(
            "{name:?} is not a repository name of the form owner/name"
        ))),
    }
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

impl GitHttp {
    /// Starts the origin on an ephemeral port of 127.0.0.1, with a fresh, empty
    /// repository root and no token accepted.
    pub fn start() -> std::io::Result<GitHttp> {
        Self::start_on("127.0.0.1")
    }

    /// [`GitHttp::start`] on an address of `ip` (a sandboxed git reaches `127.0.0.2`
    /// through srt's proxy, which `127.0.0.1` bypasses as `NO_PROXY`).
    pub fn start_on(ip: &str) -> std::io::Result<GitHttp> {
        let exec = run(git().arg("--exec-path"), "git --exec-path")?;
        let backend = Path::new(exec.trim()).join("git-http-backend");
        if !backend.is_file() {
            return Err(io_err(format!(
                "git has no http-backend at {}",
                backend.display()
            )));
        }
        let root = std::env::temp_dir().join(format!(
            "oc-githttp-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            root,
            backend,
            grants: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = Arc::clone(&shared);
                    std::thread::spawn(move || {
                        if let Err(e) = serve(conn, &shared) {
                            eprintln!("git http origin: {e}");
                        }
                    });
                }
            });
        }
        Ok(GitHttp { addr, shared, stop })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `{url}/o/r.git`, the clone URL of `name` (`o/r`).
    pub fn repo_url(&self, name: &str) -> String {
        format!("{}/{name}.git", self.url())
    }

    /// The directory the repositories are in (`GIT_PROJECT_ROOT`): `o/r` is the bare
    /// repository `<root>/o/r.git`.
    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// The bare repository of `name` (`o/r`) on disk, `<root>/o/r.git`.
    pub fn repo_dir(&self, name: &str) -> PathBuf {
        self.shared.root.join(format!("{name}.git"))
    }

    /// Creates the bare repository `<root>/o/r.git` (default branch `main`, pushes over
    /// HTTP enabled: `http.receivepack=true`). With `seed`, it gets one commit on `main`
    /// holding a `README.md` (`# o/r`), made in a scratch clone and pushed by path (not
    /// over HTTP).
    ///
    /// # Panics
    ///
    /// When it cannot (a bad name, an existing repository, git failing): a test's
    /// setup, with the reason. [`GitHttp::try_create_repo`] answers the error instead.
    pub fn create_repo(&self, name: &str, seed: bool) {
        if let Err(e) = self.try_create_repo(name, seed) {
            panic!("cannot create the repository {name}: {e}");
        }
    }

    /// [`GitHttp::create_repo`], answering its failure.
    pub fn try_create_repo(&self, name: &str, seed: bool) -> std::io::Result<()> {
        check_name(name)?;
        let dir = self.repo_dir(name);
        if dir.exists() {
            return Err(io_err(format!("the repository {name} exists already")));
        }
        run(
            git()
                .args(["init", "--quiet", "--bare", "--initial-branch=main"])
                .arg(&dir),
            &format!("git init --bare {name}"),
        )?;
        run(
            git()
                .arg("--git-dir")
                .arg(&dir)
                .args(["config", "http.receivepack", "true"]),
            &format!("enabling pushes to {name}"),
        )?;
        if !seed {
            return Ok(());
        }
        let work = self
            .shared
            .root
            .join(format!(".seed-{}", SERIAL.fetch_add(1, Ordering::SeqCst)));
        let result = (|| {
            run(
                git()
                    .args(["init", "--quiet", "--initial-branch=main"])
                    .arg(&work),
                "git init (seed)",
            )?;
            std::fs::write(work.join("README.md"), format!("# {name}\n"))?;
            let in_work = || {
                let mut c = git();
                c.arg("-C").arg(&work).args([
                    "-c",
                    "user.name=Seed",
                    "-c",
                    "user.email=seed@example.invalid",
                ]);
                c
            };
            run(in_work().args(["add", "README.md"]), "git add (seed)")?;
            run(
                in_work().args(["commit", "--quiet", "-m", "Initial commit"]),
                "git commit (seed)",
            )?;
            run(
                in_work()
                    .args(["push", "--quiet"])
                    .arg(&dir)
                    .arg("main:refs/heads/main"),
                "git push (seed)",
            )
            .map(|_| ())
        })();
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    /// Accepts `token` for exactly these repositories (`o/r`) from now on, replacing
    /// what it was accepted for; asked for another repository, it gets 404.
    pub fn allow(&self, token: &str, repos: &[&str]) {
        self.allow_user(TOKEN_USER, token, repos);
    }

    /// [`GitHttp::allow`] with the Basic user `user` instead of [`TOKEN_USER`]
    /// (Bitbucket takes an access token as `x-token-auth`); another user with the
    /// token is 401.
    pub fn allow_user(&self, user: &str, token: &str, repos: &[&str]) {
        self.shared.grants().insert(
            token.to_owned(),
            (
                user.to_owned(),
                Grant::Repos(repos.iter().map(|r| (*r).to_owned()).collect()),
            ),
        );
    }

    /// Accepts `token` for every repository from now on.
    pub fn allow_all(&self, token: &str) {
        self.shared
            .grants()
            .insert(token.to_owned(), (TOKEN_USER.to_owned(), Grant::All));
    }

    /// Refuses `token` (401) from now on, until it is allowed again.
    pub fn revoke(&self, token: &str) {
        self.shared.grants().remove(token);
    }

    /// Every request so far, in the order they were answered.
    pub fn requests(&self) -> Vec<GitRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The pushes so far: the `git-receive-pack` POSTs answered 200 ([`GitRequest::is_push`]:
    /// git's probe before a large push is not one).
    pub fn pushes(&self) -> Vec<GitRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_push() && r.status == 200)
            .collect()
    }

    /// The commit `branch` of `name` (`o/r`) points at, read on disk; `None` when the
    /// repository or the branch does not exist.
    pub fn branch_head(&self, name: &str, branch: &str) -> Option<String> {
        check_name(name).ok()?;
        let out = git()
            .arg("--git-dir")
            .arg(self.repo_dir(name))
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}^{{commit}}"))
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let sha = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!sha.is_empty()).then_some(sha)
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        let _ = std::fs::remove_dir_all(&self.shared.root);
    }
}

/// A request head.
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read: the status to answer, and the reason.
struct Refusal(u16, String);

fn read_head(r: &mut impl BufRead) -> Result<Head, Refusal> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        let room = (MAX_HEAD + 1).saturating_sub(head.len()) as u64;
        let n = r
            .take(room)
            .read_until(b'\n', &mut line)
            .map_err(|e| Refusal(400, format!("reading the request head: {e}")))?;
        if n == 0 {
            return Err(Refusal(
                400,
                "the connection closed in the request head".into(),
            ));
        }
        head.extend_from_slice(&line);
        if head.len() > MAX_HEAD {
            return Err(Refusal(
                431,
                format!("the request head is over {MAX_HEAD} bytes"),
            ));
        }
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(Refusal(400, format!("a bad request line {first:?}")));
    };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
    })
}

fn too_big() -> Refusal {
    Refusal(413, format!("the request body is over {MAX_BODY} bytes"))
}

/// The body: `Content-Length` bytes, or the chunks decoded; bounded by [`MAX_BODY`].
fn read_body(r: &mut impl BufRead, head: &Head) -> Result<Vec<u8>, Refusal> {
    let io = |e: std::io::Error| Refusal(400, format!("reading the request body: {e}"));
    let mut body = Vec::new();
    if head
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.take(1024).read_line(&mut size).map_err(io)?;
            let digits = size.trim().split(';').next().unwrap_or_default().trim();
            let n = usize::from_str_radix(digits, 16)
                .map_err(|_| Refusal(400, format!("a bad chunk size {size:?}")))?;
            if n == 0 {
                // Trailers, up to the blank line.
                let mut seen = 0usize;
                loop {
                    let mut line = String::new();
                    let got = r.take(MAX_HEAD as u64).read_line(&mut line).map_err(io)?;
                    seen += got;
                    if got == 0 || line == "\r\n" || line == "\n" {
                        break;
                    }
                    if seen > MAX_HEAD {
                        return Err(Refusal(
                            431,
                            format!("the request trailers are over {MAX_HEAD} bytes"),
                        ));
                    }
                }
                return Ok(body);
            }
            if body.len().saturating_add(n) > MAX_BODY {
                return Err(too_big());
            }
            let start = body.len();
            body.resize(start + n, 0);
            r.read_exact(&mut body[start..]).map_err(io)?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).map_err(io)?;
            if &crlf != b"\r\n" {
                return Err(Refusal(400, "a chunk is not followed by CRLF".into()));
            }
        }
    }
    if let Some(len) = head.header("content-length") {
        let n: usize = len
            .parse()
            .map_err(|_| Refusal(400, format!("a bad content-length {len:?}")))?;
        if n > MAX_BODY {
            return Err(too_big());
        }
        body.resize(n, 0);
        r.read_exact(&mut body).map_err(io)?;
    }
    Ok(body)
}

/// The Basic user and password of an `Authorization` value, if it is well-formed Basic.
fn basic(value: &str) -> Option<(String, String)> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = String::from_utf8(base64_decode(rest.trim())?).ok()?;
    let (user, pass) = raw.split_once(':')?;
    Some((user.to_owned(), pass.to_owned()))
}

/// Standard base64 (padding optional); `None` on anything else.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The repository (`o/r`) a request path names: `/o/r.git/...`.
fn repo_of(path: &str) -> Option<String> {
    let mut segs = path.trim_start_matches('/').split('/');
    let owner = segs.next()?;
    let repo = segs.next()?.strip_suffix(".git")?;
    let name = format!("{owner}/{repo}");
    check_name(&name).ok()?;
    Some(name)
}

/// The git service a request is for, from its query or path.
fn service_of(path: &str, query: &str) -> Option<String> {
    let from_query = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("service="))
        .map(str::to_owned);
    let from_path = path.rsplit('/').next().map(str::to_owned);
    [from_query, from_path]
        .into_iter()
        .flatten()
        .find(|s| s == "git-upload-pack" || s == "git-receive-pack")
}

fn respond(
    conn: &mut TcpStream,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        reason(status),
        body.len()
    );
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    conn.write_all(out.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// Answer a refusal without the request body read: after the answer, the rest of what
/// the client sends is read and dropped (bounded), so closing does not reset the
/// connection under the answer.
fn refuse(conn: &mut TcpStream, status: u16, headers: &[(&str, &str)], msg: &str) {
    let _ = respond(conn, status, headers, format!("{msg}\n").as_bytes());
    let _ = conn.shutdown(Shutdown::Write);
    let _ = std::io::copy(&mut (&*conn).take(MAX_BODY as u64), &mut std::io::sink());
}

fn serve(mut conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    conn.set_read_timeout(Some(HANG))?;
    conn.set_write_timeout(Some(HANG))?;
    let peer = conn.peer_addr()?;
    let mut r = BufReader::new(conn.try_clone()?);
    let head = match read_head(&mut r) {
        Ok(h) => h,
        Err(Refusal(status, msg)) => {
            refuse(&mut conn, status, &[], &msg);
            return Err(bad(msg));
        }
    };
    let (path, query) = match head.target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (head.target.clone(), String::new()),
    };
    let auth = head.header("authorization").and_then(basic);
    let mut record = GitRequest {
        method: head.method.clone(),
        path: path.clone(),
        service: service_of(&path, &query),
        user: auth.as_ref().map(|(u, _)| u.clone()),
        token: auth.as_ref().map(|(_, p)| p.clone()),
        status: 0,
        body_len: 0,
        chunked: head
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked")),
    };
    let expects = head
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    // Who may see what, decided on the head alone.
    let denied: Option<(u16, &str)> = match &auth {
        None => Some((401, "authentication required")),
        Some((user, token)) => {
            let grant = shared
                .grants()
                .get(token)
                .filter(|(u, _)| u == user)
                .map(|(_, g)| g.clone());
            match (grant, repo_of(&path)) {
                (None, _) => Some((401, "bad credentials")),
                (Some(_), None) => Some((404, "repository not found")),
                (Some(Grant::All), Some(_)) => None,
                (Some(Grant::Repos(repos)), Some(repo)) => {
                    (!repos.contains(&repo)).then_some((404, "repository not found"))
                }
            }
        }
    };
    if let Some((status, msg)) = denied {
        record.status = status;
        shared.record(record);
        let challenge = [("WWW-Authenticate", "Basic realm=\"GitHub\"")];
        let headers: &[(&str, &str)] = if status == 401 { &challenge } else { &[] };
        if !expects {
            // Take the body first, so the client reads the answer whole.
            let _ = read_body(&mut r, &head);
        }
        refuse(&mut conn, status, headers, msg);
        return Ok(());
    }
    if expects {
        conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = match read_body(&mut r, &head) {
        Ok(b) => b,
        Err(Refusal(status, msg)) => {
            record.status = status;
            shared.record(record);
            refuse(&mut conn, status, &[], &msg);
            return Err(bad(msg));
        }
    };
    record.body_len = body.len();
    let status = cgi(&mut conn, shared, &head, &path, &query, peer, body)?;
    record.status = status;
    shared.record(record);
    Ok(())
}

/// Run `git http-backend` on the request and send its answer; the status sent.
fn cgi(
    conn: &mut TcpStream,
    shared: &Shared,
    head: &Head,
    path: &str,
    query: &str,
    peer: SocketAddr,
    body: Vec<u8>,
) -> std::io::Result<u16> {
    let mut cmd = Command::new(&shared.backend);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &shared.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &shared.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", &head.method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", TOKEN_USER)
        .env("REMOTE_ADDR", peer.ip().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (var, header) in [
        ("CONTENT_TYPE", "content-type"),
        ("HTTP_CONTENT_ENCODING", "content-encoding"),
        ("HTTP_GIT_PROTOCOL", "git-protocol"),
    ] {
        if let Some(v) = head.header(header) {
            cmd.env(var, v);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("cannot run {}: {e}", shared.backend.display());
            let _ = respond(conn, 500, &[], format!("{msg}\n").as_bytes());
            return Err(io_err(msg));
        }
    };
    // Feed the body and drain stderr beside reading the answer, so no pipe fills up.
    let feeder = child.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        })
    });
    let errs = child.stderr.take().map(|mut stderr| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        })
    });
    let outcome = match child.stdout.take() {
        Some(stdout) => relay(conn, BufReader::new(stdout)),
        None => Err(io_err("the backend's stdout is not a pipe")),
    };
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let status = child.wait();
    if let Some(e) = errs.and_then(|t| t.join().ok()) {
        if !e.trim().is_empty() {
            eprintln!("git http-backend ({} {path}): {}", head.method, e.trim());
        }
    }
    let exit = status?;
    let sent = outcome?;
    if !exit.success() && sent == 200 {
        eprintln!("git http-backend ({} {path}) exited {exit}", head.method);
    }
    Ok(sent)
}

/// Send the CGI answer (`Status:` and other headers, a blank line, the body) as an HTTP
/// answer; the status sent.
fn relay(conn: &mut TcpStream, mut out: impl BufRead) -> std::io::Result<u16> {
    let mut status = 200u16;
    let mut headers = Vec::new();
    let mut seen = 0usize;
    loop {
        let mut line = String::new();
        let n = (&mut out).take(MAX_HEAD as u64).read_line(&mut line)?;
        seen += n;
        if seen > MAX_HEAD {
            let _ = respond(conn, 500, &[], b"the backend's head is too long\n");
            return Err(bad(format!("the backend's head is over {MAX_HEAD} bytes")));
        }
        if n == 0 {
            let _ = respond(conn, 500, &[], b"the backend answered no head\n");
            return Err(bad("git http-backend ended before its head was complete"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("status") {
            status = value
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad(format!("a bad CGI status {value:?}")))?;
        } else if !name.eq_ignore_ascii_case("connection") {
            headers.push(format!("{name}: {value}\r\n"));
        }
    }
    let mut text = format!(
        "HTTP/1.1 {status} {}\r\nConnection: close\r\n",
        reason(status)
    );
    for h in headers {
        text.push_str(&h);
    }
    text.push_str("\r\n");
    conn.write_all(text.as_bytes())?;
    // Without a Content-Length, the body ends where the connection closes.
    std::io::copy(&mut out, conn)?;
    conn.flush()?;
    let _ = conn.shutdown(Shutdown::Write);
    Ok(status)
}
