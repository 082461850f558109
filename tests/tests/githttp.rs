#![allow(clippy::unwrap_used)]
//! The git origin over HTTP (`oc_systest::githttp`) with the real `git` client: a token
//! clones, commits and pushes; no credentials, a wrong user or an unknown token get
//! 401; a token for another repository gets 404; a revoked token is refused; a push
//! larger than git's post buffer (sent chunked) arrives whole; oversized requests are
//! refused naming the limit.

use oc_systest::githttp::{GitHttp, MAX_BODY, MAX_HEAD};
use oc_systest::parse_response;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A scratch directory for this test's clones, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("oc-githttp-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `git ARGS` in `dir`, reading no configuration of the machine's, never prompting; with
/// `token`, a credential helper that answers `x-access-token:<token>`; without, none.
fn git(dir: &Path, token: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_ASKPASS")
        .env_remove("SSH_ASKPASS")
        .args([
            "-c",
            "user.name=Tester",
            "-c",
            "user.email=tester@example.invalid",
        ])
        .args(["-c", "protocol.version=2", "-c", "credential.helper="]);
    if let Some(t) = token {
        c.arg("-c").arg(format!(
            "credential.helper=!f() {{ echo username=x-access-token; echo password={t}; }}; f"
        ));
    }
    c.args(args).stdin(Stdio::null()).output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "git failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_token_clones_commits_and_pushes_a_branch() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/widget", true);
    origin.allow("tok-good", &["acme/widget"]);
    let seed = origin.branch_head("acme/widget", "main").unwrap();
    assert_eq!(seed.len(), 40, "a full commit id: {seed}");

    let scratch = Scratch::new("push");
    let url = origin.repo_url("acme/widget");
    assert_eq!(url, format!("{}/acme/widget.git", origin.url()));
    ok(&git(&scratch.0, Some("tok-good"), &["clone", &url, "w"]));
    let work = scratch.0.join("w");
    assert_eq!(
        std::fs::read_to_string(work.join("README.md")).unwrap(),
        "# acme/widget\n"
    );
    assert_eq!(ok(&git(&work, None, &["rev-parse", "HEAD"])), seed);

    std::fs::write(work.join("change.txt"), "a change\n").unwrap();
    ok(&git(&work, None, &["checkout", "-q", "-b", "feature/one"]));
    ok(&git(&work, None, &["add", "change.txt"]));
    ok(&git(&work, None, &["commit", "-q", "-m", "A change"]));
    let head = ok(&git(&work, None, &["rev-parse", "HEAD"]));
    ok(&git(
        &work,
        Some("tok-good"),
        &["push", "origin", "feature/one"],
    ));

    assert_eq!(
        origin.branch_head("acme/widget", "feature/one").as_deref(),
        Some(head.as_str())
    );
    assert_eq!(origin.branch_head("acme/widget", "main"), Some(seed));
    assert_eq!(origin.branch_head("acme/widget", "nope"), None);
    assert_eq!(origin.branch_head("acme/nothing", "main"), None);

    let pushes = origin.pushes();
    assert_eq!(pushes.len(), 1, "one push: {pushes:?}");
    assert_eq!(pushes[0].path, "/acme/widget.git/git-receive-pack");
    assert_eq!(pushes[0].user.as_deref(), Some("x-access-token"));
    assert_eq!(pushes[0].token.as_deref(), Some("tok-good"));

    let requests = origin.requests();
    // git asks without credentials first, is challenged, then asks its helper.
    assert!(
        requests
            .iter()
            .any(|r| r.status == 401 && r.token.is_none()),
        "a challenge: {requests:?}"
    );
    assert!(requests.iter().any(|r| r.status == 200
        && r.method == "POST"
        && r.service.as_deref() == Some("git-upload-pack")));
    for r in requests.iter().filter(|r| r.status == 200) {
        assert_eq!(r.token.as_deref(), Some("tok-good"), "{r:?}");
    }
}

#[test]
fn without_credentials_the_clone_fails_with_401() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/widget", true);
    origin.allow_all("tok-good");
    let scratch = Scratch::new("nocreds");
    let out = git(
        &scratch.0,
        None,
        &["clone", &origin.repo_url("acme/widget"), "w"],
    );
    assert!(!out.status.success(), "cloned without credentials");
    assert!(!scratch.0.join("w").exists());
    let requests = origin.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.user, None, "{r:?}");
        assert_eq!(r.token, None, "{r:?}");
    }
    assert_eq!(requests[0].path, "/acme/widget.git/info/refs");
    assert_eq!(requests[0].service.as_deref(), Some("git-upload-pack"));

    // The challenge asks for Basic credentials, as GitHub's does.
    let mut s = TcpStream::connect(origin.addr()).unwrap();
    s.write_all(
        b"GET /acme/widget.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let r = parse_response(&raw).unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"GitHub\""));
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn a_wrong_user_or_an_unknown_token_gets_401() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/widget", true);
    origin.allow_all("tok-good");
    let scratch = Scratch::new("wrong");
    let with_user = origin
        .repo_url("acme/widget")
        .replace("http://", "http://someone:tok-good@");
    let out = git(&scratch.0, None, &["clone", &with_user, "a"]);
    assert!(!out.status.success(), "cloned as someone");
    let out = git(
        &scratch.0,
        Some("tok-unknown"),
        &["clone", &origin.repo_url("acme/widget"), "b"],
    );
    assert!(!out.status.success(), "cloned with an unknown token");
    assert!(
        stderr(&out).contains("Authentication failed"),
        "{}",
        stderr(&out)
    );
    let requests = origin.requests();
    assert!(requests.iter().all(|r| r.status == 401), "{requests:?}");
    assert!(requests
        .iter()
        .any(|r| r.user.as_deref() == Some("someone") && r.token.as_deref() == Some("tok-good")));
    assert!(requests
        .iter()
        .any(|r| r.user.as_deref() == Some("x-access-token")
            && r.token.as_deref() == Some("tok-unknown")));
}

#[test]
fn a_token_for_another_repository_gets_404() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/widget", true);
    origin.create_repo("acme/secret", true);
    origin.allow("tok-widget", &["acme/widget"]);
    let scratch = Scratch::new("other");
    let out = git(
        &scratch.0,
        Some("tok-widget"),
        &["clone", &origin.repo_url("acme/secret"), "s"],
    );
    assert!(!out.status.success(), "cloned a repository not allowed");
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
    let requests = origin.requests();
    assert!(
        requests.iter().any(|r| r.status == 404
            && r.path == "/acme/secret.git/info/refs"
            && r.token.as_deref() == Some("tok-widget")),
        "{requests:?}"
    );
    // The same token still reaches its own repository.
    ok(&git(
        &scratch.0,
        Some("tok-widget"),
        &["clone", &origin.repo_url("acme/widget"), "w"],
    ));
}

#[test]
fn a_revoked_token_is_refused() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/widget", true);
    origin.allow_all("tok-run");
    let scratch = Scratch::new("revoked");
    ok(&git(
        &scratch.0,
        Some("tok-run"),
        &["clone", &origin.repo_url("acme/widget"), "w"],
    ));
    let work = scratch.0.join("w");
    std::fs::write(work.join("late.txt"), "too late\n").unwrap();
    ok(&git(&work, None, &["checkout", "-q", "-b", "late"]));
    ok(&git(&work, None, &["add", "late.txt"]));
    ok(&git(&work, None, &["commit", "-q", "-m", "Late"]));
    let before = origin.requests().len();

    origin.revoke("tok-run");
    let out = git(&work, Some("tok-run"), &["push", "origin", "late"]);
    assert!(!out.status.success(), "pushed with a revoked token");
    assert!(
        stderr(&out).contains("Authentication failed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(origin.branch_head("acme/widget", "late"), None);
    assert!(origin.pushes().is_empty());
    let after = &origin.requests()[before..];
    assert!(
        after
            .iter()
            .any(|r| r.status == 401 && r.token.as_deref() == Some("tok-run")),
        "{after:?}"
    );
    assert!(after.iter().all(|r| r.status == 401), "{after:?}");
}

/// `len` bytes that do not compress, the same for the same `seed`.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn a_push_over_the_post_buffer_arrives_whole() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/big", false);
    origin.allow_all("tok-big");
    let scratch = Scratch::new("big");
    let work = scratch.0.join("w");
    std::fs::create_dir_all(&work).unwrap();
    ok(&git(&work, None, &["init", "-q", "-b", "main"]));
    // Three MiB that do not compress: over git's 1 MiB post buffer, so git sends the
    // pack chunked.
    let blob = noise(3 * 1024 * 1024, 0x9e37_79b9_7f4a_7c15);
    std::fs::write(work.join("blob.bin"), &blob).unwrap();
    ok(&git(&work, None, &["add", "blob.bin"]));
    ok(&git(&work, None, &["commit", "-q", "-m", "Big"]));
    let head = ok(&git(&work, None, &["rev-parse", "HEAD"]));
    ok(&git(
        &work,
        Some("tok-big"),
        &["push", &origin.repo_url("acme/big"), "main"],
    ));
    assert_eq!(origin.branch_head("acme/big", "main"), Some(head));
    let pushes = origin.pushes();
    assert_eq!(pushes.len(), 1, "{:#?}", origin.requests());
    assert!(pushes[0].chunked, "{:?}", pushes[0]);
    assert!(pushes[0].body_len > blob.len(), "{:?}", pushes[0]);

    ok(&git(
        &scratch.0,
        Some("tok-big"),
        &["clone", &origin.repo_url("acme/big"), "again"],
    ));
    assert!(std::fs::read(scratch.0.join("again/blob.bin")).unwrap() == blob);
}

fn raw_request(origin: &GitHttp, bytes: &[u8]) -> oc_systest::Response {
    let mut s = TcpStream::connect(origin.addr()).unwrap();
    // The server may answer before it has read everything; what it says counts.
    let _ = s.write_all(bytes);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw).unwrap()
}

#[test]
fn oversized_requests_are_refused_naming_the_limit() {
    let origin = GitHttp::start().unwrap();
    origin.create_repo("acme/widget", false);
    origin.allow_all("tok");
    // Basic x-access-token:tok
    let auth = "Authorization: Basic eC1hY2Nlc3MtdG9rZW46dG9r\r\n";

    let mut head = format!("GET /acme/widget.git/info/refs HTTP/1.1\r\n{auth}");
    while head.len() <= MAX_HEAD {
        head.push_str("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    head.push_str("\r\n");
    let r = raw_request(&origin, head.as_bytes());
    assert_eq!(r.status, 431);
    assert!(r.text().contains(&MAX_HEAD.to_string()), "{}", r.text());

    let post = format!(
        "POST /acme/widget.git/git-receive-pack HTTP/1.1\r\n{auth}Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    let r = raw_request(&origin, post.as_bytes());
    assert_eq!(r.status, 413);
    assert!(r.text().contains(&MAX_BODY.to_string()), "{}", r.text());
    let last = origin.requests().pop().unwrap();
    assert_eq!(last.status, 413);
    assert_eq!(last.service.as_deref(), Some("git-receive-pack"));
    assert_eq!(last.token.as_deref(), Some("tok"));

    // A well-formed request with the same credentials is served.
    let ok = raw_request(
        &origin,
        format!("GET /acme/widget.git/info/refs?service=git-upload-pack HTTP/1.1\r\n{auth}\r\n")
            .as_bytes(),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(
        ok.header("content-type"),
        Some("application/x-git-upload-pack-advertisement")
    );
}
