//! A scripted Bitbucket Cloud behind Prism's validation proxy over Atlassian's
//! published API 2.0 description (tests/bitbucket-api, a Swagger 2.0 document): every
//! request the bitbucket package sends is checked against the description (a
//! violation is answered 422 and shows in Prism's log), and the scripted Bitbucket
//! answers what the operations need, in the description's shapes: a pull request,
//! its comments, its diffstat and diff (each behind the 302 to the repository's, as
//! Bitbucket answers them), a made comment, a made pull request, an approval and a
//! change request. Each request it serves is recorded. Without Prism ([`Scripted`]) it
//! can be told to answer every request with one error, for 401, 403, 404, 429.
//!
//! The file stands alone (std and serde_json): the system tests use it as
//! `oc_systest::bitbucket`, and the package's own tests include it by path.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

/// The largest request body the scripted Bitbucket reads.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// The repository root (the directory holding tests/bitbucket-api).
fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|a| a.join("tests/bitbucket-api").is_dir())
        .unwrap_or(here)
        .to_path_buf()
}

/// Atlassian's Bitbucket Cloud API 2.0 description in tests/bitbucket-api.
pub fn description_path() -> PathBuf {
    root().join("tests/bitbucket-api/swagger.json")
}

/// The published description with what it gets wrong for the package, amended as
/// Bitbucket behaves (docs/decisions.md, issue 44), in a copy in the temporary
/// directory; nothing else changes:
/// - it declares no request body for `POST .../hooks` and `PUT .../hooks/{uid}` (so
///   Prism refuses any body), though Bitbucket takes a `webhook_subscription` there
///   (the operation's own example): the copy declares that body (JSON, the
///   description's `webhook_subscription` schema), so Prism checks what is sent;
/// - its text says `state` on `GET …/pullrequests` "can be repeated" (one for each
///   state wanted), but it declares a single string, so Prism refuses a repeated
///   one: the copy declares it as the text says (an array of the same enum, `multi`).
pub fn amended_description() -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(description_path()).map_err(|e| e.to_string())?;
    let mut d: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    for (path, method) in [
        ("/repositories/{workspace}/{repo_slug}/hooks", "post"),
        ("/repositories/{workspace}/{repo_slug}/hooks/{uid}", "put"),
    ] {
        let op = d
            .get_mut("paths")
            .and_then(|p| p.get_mut(path))
            .and_then(|p| p.get_mut(method))
            .ok_or_else(|| format!("the description has no {method} {path}"))?;
        op["consumes"] = json!(["application/json"]);
        op["parameters"] = json!([{"in": "body", "name": "_body", "required": true,
            "schema": {"$ref": "#/definitions/webhook_subscription"}}]);
    }
    let params = d
        .pointer_mut("/paths/~1repositories~1{workspace}~1{repo_slug}~1pullrequests/get/parameters")
        .and_then(Value::as_array_mut)
        .ok_or("the description has no GET …/pullrequests parameters")?;
    let state = params
        .iter_mut()
        .find(|p| p["name"] == "state" && p["in"] == "query")
        .ok_or("GET …/pullrequests declares no state")?;
    let allowed = state["enum"].take();
    *state = json!({"in": "query", "name": "state", "type": "array",
        "collectionFormat": "multi", "items": {"type": "string", "enum": allowed}});
    let out = std::env::temp_dir().join(format!(
        "oc-bitbucket-amended-{}-swagger.json",
        std::process::id()
    ));
    std::fs::write(&out, d.to_string()).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The test binary's one scripted Bitbucket behind Prism over the
/// [`amended_description`] (its tests use repositories of their own), started at
/// the first call; `None` after printing `SKIPPED: why` when Prism cannot run (a
/// failure under `OC_REQUIRE_PEERS=1`).
pub fn shared_or_skip() -> Option<&'static Bitbucket> {
    static BB: OnceLock<Result<Bitbucket, String>> = OnceLock::new();
    match BB.get_or_init(Bitbucket::start_amended) {
        Ok(b) => Some(b),
        Err(why) => {
            assert!(!required(), "no Prism under OC_REQUIRE_PEERS=1: {why}");
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// True when the peers (node, Prism) must be there: `OC_REQUIRE_PEERS=1`.
pub fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// One request the scripted Bitbucket served.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path with its query.
    pub target: String,
    /// The `Authorization` header.
    pub authorization: String,
    /// The body, as JSON (null when empty or not JSON).
    pub body: Value,
}

/// An error every request is answered with: status, extra header lines, body.
type Failure = (u16, String, String);

/// A stored repository's pull requests, and each one's comments by pull request ID.
type Listed = (Vec<Value>, std::collections::BTreeMap<u64, Vec<Value>>);

#[derive(Default)]
struct Shared {
    seen: Vec<Seen>,
    failure: Option<Failure>,
    /// The repository webhooks (`/repositories/{w}/{r}/hooks`): repository and hook.
    hooks: Vec<(String, Value)>,
    /// Webhooks created so far (for their uuids).
    hooks_made: u64,
    /// Repositories whose pull request list and comments are stored ([`Scripted::list`]):
    /// their pull requests, and each one's comments by pull request ID.
    listed: std::collections::BTreeMap<String, Listed>,
    /// The base URL of `next` links (Prism's, set by the test).
    next_base: String,
}

/// A running Prism (validation proxy), killed when dropped.
pub struct Prism {
    /// Its base URL.
    pub url: String,
    log: Arc<Mutex<Vec<String>>>,
    child: Child,
}

impl Drop for Prism {
    fn drop(&mut self) {
        // The wrapper kills Prism when its stdin closes.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Prism {
    /// Its output so far.
    pub fn lines(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// Prism (from tests/github-api/node_modules) as a validation proxy over `spec` in
/// front of `upstream`; `Err` says why it cannot run.
pub fn start_prism_proxy(spec: &Path, upstream: &str) -> Result<Prism, String> {
    let bin = root().join("tests/github-api/node_modules/.bin/prism");
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("node is not installed".into());
    }
    if !bin.exists() {
        return Err(
            "tests/github-api has no node_modules (run npm ci --prefix tests/github-api)".into(),
        );
    }
    if !spec.exists() {
        return Err(format!("{} is missing", spec.display()));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let script = format!(
        "'{}' proxy --errors -h 127.0.0.1 -p {port} '{}' '{upstream}' 2>&1 & pid=$!; cat >/dev/null; kill $pid",
        bin.display(),
        spec.display()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting prism: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = log.clone();
    std::thread::spawn(move || {
        let mut ready = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("Prism is listening") {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(true);
                }
            }
            if let Ok(mut l) = lines.lock() {
                l.push(line);
            }
        }
        if let Some(tx) = ready.take() {
            let _ = tx.send(false);
        }
    });
    let prism = Prism {
        url: format!("http://127.0.0.1:{port}"),
        log,
        child,
    };
    // A bound on a hang only: loading the description takes Prism some seconds.
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(true) => Ok(prism),
        _ => Err(format!(
            "prism did not start listening: {}",
            prism.lines().join("\n")
        )),
    }
}

/// The scripted Bitbucket alone (no Prism): for answers the description does not
/// declare, as [`Scripted::fail_with`] makes them.
pub struct Scripted {
    /// Its URL.
    pub url: String,
    shared: Arc<Mutex<Shared>>,
}

impl Scripted {
    /// Start it on a free loopback port.
    pub fn start() -> Result<Scripted, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let url = format!(
            "http://{}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let record = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let record = record.clone();
                std::thread::spawn(move || serve(stream, &record));
            }
        });
        Ok(Scripted { url, shared })
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared
            .lock()
            .map(|s| s.seen.clone())
            .unwrap_or_default()
    }

    /// The requests served so far with `method` whose path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|s| {
                s.method == method && s.target.split('?').next().unwrap_or("").ends_with(suffix)
            })
            .collect()
    }

    /// The repository webhooks of `repository` (`workspace/repo_slug`), as stored.
    pub fn hooks(&self, repository: &str) -> Vec<Value> {
        self.shared
            .lock()
            .map(|s| {
                s.hooks
                    .iter()
                    .filter(|(r, _)| r == repository)
                    .map(|(_, h)| h.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Changes the stored webhooks of `repository` as a person would at Bitbucket.
    pub fn edit_hooks(&self, repository: &str, edit: impl FnOnce(&mut Vec<Value>)) {
        if let Ok(mut s) = self.shared.lock() {
            let mut mine: Vec<Value> = s
                .hooks
                .iter()
                .filter(|(r, _)| r == repository)
                .map(|(_, h)| h.clone())
                .collect();
            edit(&mut mine);
            s.hooks.retain(|(r, _)| r != repository);
            s.hooks
                .extend(mine.into_iter().map(|h| (repository.to_string(), h)));
        }
    }

    /// Answer every request from now on with `status`, the extra header lines
    /// `headers` (each ending `\r\n`) and `body`; `None` goes back to the script.
    pub fn fail_with(&self, failure: Option<(u16, &str, &str)>) {
        if let Ok(mut s) = self.shared.lock() {
            s.failure = failure.map(|(st, h, b)| (st, h.to_string(), b.to_string()));
        }
    }

    /// Stores `repository`'s pull requests and each one's comments (by ID): from now
    /// on its pull request list and comment lists answer them, filtered by `q`
    /// (`updated_on>"…"`, `created_on>"…"`) and `state`, sorted by `sort`, paged by
    /// `pagelen` and `page` with `next` links under [`Scripted::set_next_base`].
    pub fn list(&self, repository: &str, prs: Vec<Value>, comments: Vec<(u64, Vec<Value>)>) {
        if let Ok(mut s) = self.shared.lock() {
            s.listed.insert(
                repository.to_string(),
                (prs, comments.into_iter().collect()),
            );
        }
    }

    /// The base URL of the `next` links of stored lists (the API's URL as the
    /// package sees it: Prism's).
    pub fn set_next_base(&self, url: &str) {
        if let Ok(mut s) = self.shared.lock() {
            s.next_base = url.trim_end_matches('/').to_string();
        }
    }
}

/// The scripted Bitbucket and Prism in front of it.
pub struct Bitbucket {
    /// Prism's URL: the connection's `api_url`.
    pub url: String,
    /// The scripted Bitbucket behind Prism.
    pub scripted: Scripted,
    /// Prism.
    pub prism: Prism,
}

impl Bitbucket {
    /// Start the scripted Bitbucket and Prism over the description in front of it;
    /// `Err` says why Prism cannot run.
    pub fn start() -> Result<Bitbucket, String> {
        let scripted = Scripted::start()?;
        let prism = start_prism_proxy(&description_path(), &scripted.url)?;
        Ok(Bitbucket {
            url: prism.url.clone(),
            scripted,
            prism,
        })
    }

    /// [`Bitbucket::start`] over [`amended_description`], for the managed webhooks'
    /// and reconcile's requests.
    pub fn start_amended() -> Result<Bitbucket, String> {
        let spec = amended_description()?;
        let scripted = Scripted::start()?;
        let prism = start_prism_proxy(&spec, &scripted.url)?;
        Ok(Bitbucket {
            url: prism.url.clone(),
            scripted,
            prism,
        })
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.scripted.requests()
    }

    /// The requests served so far with `method` whose path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<Seen> {
        self.scripted.requests_to(method, suffix)
    }

    /// Prism's lines reporting a violation of the description.
    pub fn violations(&self) -> Vec<String> {
        self.prism
            .lines()
            .into_iter()
            .filter(|l| l.contains("violation") || l.contains("did not pass the validation"))
            .collect()
    }
}

fn serve(stream: TcpStream, shared: &Mutex<Shared>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut authorization = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("authorization:") {
                authorization = line["authorization:".len()..].trim().to_string();
            }
        }
        let mut body = vec![0u8; length.min(MAX_BODY)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let failure = shared.lock().ok().and_then(|s| s.failure.clone());
        let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, headers, content_type, text) = match failure {
            Some((status, headers, body)) => (status, headers, "application/json", body),
            None => match shared.lock().ok().and_then(|mut s| {
                hook_answer(&mut s, &method, &target, &json_body)
                    .or_else(|| list_answer(&s, &method, &target))
            }) {
                Some(a) => a,
                None => answer(&method, &target),
            },
        };
        if let Ok(mut s) = shared.lock() {
            s.seen.push(Seen {
                method,
                target,
                authorization,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
        }
        let content_type = if content_type.is_empty() {
            String::new()
        } else {
            format!("Content-Type: {content_type}\r\n")
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\n{content_type}{headers}Content-Length: {}\r\n\r\n",
            text.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// The answer to a repository webhook request (list, create, read, update), kept
/// in `shared`; none for any other request. The secret is kept as `secret_set`
/// (Bitbucket never shows it) and, for tests, under `_secret`, never answered.
fn hook_answer(
    shared: &mut Shared,
    method: &str,
    target: &str,
    body: &Value,
) -> Option<(u16, String, &'static str, String)> {
    let path = target.split('?').next().unwrap_or_default();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (repo, uid) = match segs.as_slice() {
        ["repositories", w, r, "hooks"] => (format!("{w}/{r}"), None),
        ["repositories", w, r, "hooks", uid] => (
            format!("{w}/{r}"),
            Some(
                uid.replace("%7B", "{")
                    .replace("%7D", "}")
                    .replace("%7b", "{")
                    .replace("%7d", "}"),
            ),
        ),
        _ => return None,
    };
    let shown = |h: &Value| {
        let mut h = h.clone();
        if let Some(o) = h.as_object_mut() {
            o.remove("_secret");
        }
        h
    };
    let ok =
        |status: u16, v: Value| Some((status, String::new(), "application/json", v.to_string()));
    let not_found = || {
        ok(
            404,
            json!({"type": "error", "error": {"message": "no such webhook"}}),
        )
    };
    let apply = |hook: &mut Value, body: &Value| {
        for key in ["url", "description", "active", "events"] {
            if let Some(v) = body.get(key) {
                hook[key] = v.clone();
            }
        }
        if let Some(secret) = body.get("secret") {
            let set = secret.as_str().is_some_and(|s| !s.is_empty());
            hook["secret_set"] = json!(set);
            hook["_secret"] = secret.clone();
        }
    };
    match (method, uid) {
        ("GET", None) => {
            let values: Vec<Value> = shared
                .hooks
                .iter()
                .filter(|(r, _)| *r == repo)
                .map(|(_, h)| shown(h))
                .collect();
            ok(
                200,
                json!({"pagelen": 100, "page": 1, "size": values.len(), "values": values}),
            )
        }
        ("POST", None) => {
            shared.hooks_made += 1;
            let uuid = format!("{{5f6e8a2c-0000-4000-8000-{:012}}}", shared.hooks_made);
            let mut hook = json!({
                "type": "webhook_subscription", "uuid": uuid, "subject_type": "repository",
                "subject": {"type": "repository", "full_name": repo},
                "active": false, "events": [], "url": "", "secret_set": false,
                "created_at": "2026-01-05T10:00:00.000000+00:00",
            });
            apply(&mut hook, body);
            shared.hooks.push((repo, hook.clone()));
            ok(201, shown(&hook))
        }
        ("GET", Some(uid)) => match shared
            .hooks
            .iter()
            .find(|(r, h)| *r == repo && h["uuid"] == json!(uid))
        {
            Some((_, h)) => ok(200, shown(h)),
            None => not_found(),
        },
        ("PUT", Some(uid)) => match shared
            .hooks
            .iter_mut()
            .find(|(r, h)| *r == repo && h["uuid"] == json!(uid))
        {
            Some((_, h)) => {
                apply(h, body);
                ok(200, shown(h))
            }
            None => not_found(),
        },
        _ => None,
    }
}

/// The scripted pull request's source and destination commits.
pub const SOURCE_COMMIT: &str = "d3022fc0ca3d";
/// The destination commit.
pub const DESTINATION_COMMIT: &str = "ce5965ddd289";
/// The full hash of [`SOURCE_COMMIT`]: one build passed, one in progress.
pub const SOURCE_COMMIT_FULL: &str = "d3022fc0ca3d4a8e9b1c2d3e4f5061728394a5b6";
/// The head commit of pull request 8, whose builds have all finished (one failed).
pub const BUILT_COMMIT: &str = "5b1e0a7c9d21";
/// Its full hash.
pub const BUILT_COMMIT_FULL: &str = "5b1e0a7c9d21e3f405162738495a6b7c8d9e0f1a";
/// The head commit of pull request 9, which no build has reported on.
pub const UNBUILT_COMMIT: &str = "7a3c4e5f6b70";
/// Its full hash.
pub const UNBUILT_COMMIT_FULL: &str = "7a3c4e5f6b708192a3b4c5d6e7f8091a2b3c4d5e";

/// The full hash of a scripted commit given by a prefix of it.
fn full_commit(hash: &str) -> Option<&'static str> {
    [SOURCE_COMMIT_FULL, BUILT_COMMIT_FULL, UNBUILT_COMMIT_FULL]
        .into_iter()
        .find(|f| hash.len() >= 7 && f.starts_with(&hash.to_ascii_lowercase()))
}

/// A commit status (a build) of `commit` in `repo`.
fn commit_status(repo: &str, commit: &str, key: &str, name: &str, state: &str) -> Value {
    json!({
        "type": "build", "key": key, "name": name, "state": state,
        "description": format!("{name}: {state}"), "refname": "feature/PROJ-12-login",
        "url": format!("https://ci.example.test/{repo}/{key}"),
        "created_on": "2026-01-05T10:10:00.000000+00:00", "updated_on": "2026-01-05T10:20:00.000000+00:00",
        "links": {"commit": {"href": format!("https://api.bitbucket.org/2.0/repositories/{repo}/commit/{commit}")}},
    })
}

/// The builds of a scripted commit (its full hash): [`SOURCE_COMMIT_FULL`] has one
/// passed and one in progress, [`BUILT_COMMIT_FULL`] one passed and one failed,
/// any other none.
pub fn builds_of(repo: &str, commit: &str) -> Vec<Value> {
    match commit {
        SOURCE_COMMIT_FULL => vec![
            commit_status(repo, commit, "lint", "Lint", "SUCCESSFUL"),
            commit_status(repo, commit, "unit", "Unit tests", "INPROGRESS"),
        ],
        BUILT_COMMIT_FULL => vec![
            commit_status(repo, commit, "lint", "Lint", "FAILED"),
            commit_status(repo, commit, "unit", "Unit tests", "SUCCESSFUL"),
        ],
        _ => Vec::new(),
    }
}

fn user(name: &str, account_id: &str) -> Value {
    json!({"type": "user", "display_name": name, "account_id": account_id,
           "uuid": "{a54f16da-24e9-4d7f-a3a7-b1ba2cd98aa3}", "nickname": name.to_lowercase()})
}

fn pull_request(repo: &str, id: u64, source: &str, destination: &str) -> Value {
    json!({
        "type": "pullrequest", "id": id, "title": "Fix the login page",
        "description": "The login page loops. PROJ-12", "state": "OPEN",
        "author": user("Ann", "557058:ann"),
        "source": {"branch": {"name": source}, "commit": {"hash": SOURCE_COMMIT}},
        "destination": {"branch": {"name": destination}, "commit": {"hash": DESTINATION_COMMIT}},
        "links": {"html": {"href": format!("https://bitbucket.org/{repo}/pull-requests/{id}")}},
        "comment_count": 1, "task_count": 0, "close_source_branch": false,
        "created_on": "2026-01-05T10:00:00.000000+00:00", "updated_on": "2026-01-05T10:00:00.000000+00:00",
    })
}

fn comment(repo: &str, pr: u64, id: u64, text: &str, inline: Option<&Value>) -> Value {
    let mut c = json!({
        "type": "pullrequest_comment", "id": id,
        "content": {"raw": text, "markup": "markdown", "html": format!("<p>{text}</p>")},
        "user": user("Ann", "557058:ann"), "deleted": false,
        "created_on": "2026-01-05T10:05:00.000000+00:00", "updated_on": "2026-01-05T10:05:00.000000+00:00",
        "links": {"html": {"href": format!("https://bitbucket.org/{repo}/pull-requests/{pr}#comment-{id}")}},
    });
    if let Some(i) = inline {
        c["inline"] = i.clone();
    }
    c
}

/// The scripted answer: status, extra header lines, content type, body.
fn answer(method: &str, target: &str) -> (u16, String, &'static str, String) {
    let path = target.split('?').next().unwrap_or_default();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let json_ok =
        |status: u16, v: Value| (status, String::new(), "application/json", v.to_string());
    // /repositories/{w}/{r}/...
    if segs.len() < 3 || segs[0] != "repositories" {
        return json_ok(
            404,
            json!({"type": "error", "error": {"message": "not scripted"}}),
        );
    }
    let repo = format!("{}/{}", segs[1], segs[2]);
    let rest = &segs[3..];
    match (method, rest) {
        ("POST", ["pullrequests"]) => json_ok(201, pull_request(&repo, 7, "PROJ-12-fix", "main")),
        ("GET", ["pullrequests", id @ ("8" | "9")]) => {
            let mut pr = pull_request(&repo, id.parse().unwrap_or(8), "feature/PROJ-12-login", "main");
            let head = if *id == "8" { BUILT_COMMIT } else { UNBUILT_COMMIT };
            pr["source"]["commit"]["hash"] = json!(head);
            json_ok(200, pr)
        }
        ("GET", ["pullrequests", id]) => json_ok(
            200,
            pull_request(&repo, id.parse().unwrap_or(1), "feature/PROJ-12-login", "main"),
        ),
        ("GET", ["pullrequests", id, "comments"]) => json_ok(
            200,
            json!({"pagelen": 50, "size": 2, "page": 1, "values": [
                comment(&repo, id.parse().unwrap_or(1), 101, "@conduit please look at the redirect", None),
                comment(&repo, id.parse().unwrap_or(1), 102, "This line loops.", Some(&json!({"path": "src/login.rs", "to": 12}))),
            ]}),
        ),
        ("POST", ["pullrequests", id, "comments"]) => json_ok(
            201,
            comment(&repo, id.parse().unwrap_or(1), 103, "made", None),
        ),
        ("GET", ["pullrequests", _, kind @ ("diff" | "diffstat")]) => (
            302,
            format!(
                "Location: /repositories/{repo}/{kind}/{SOURCE_COMMIT}..{DESTINATION_COMMIT}?topic=true\r\n"
            ),
            "",
            String::new(),
        ),
        ("GET", ["diffstat", _]) => json_ok(
            200,
            json!({"pagelen": 500, "size": 1, "page": 1, "values": [{
                "type": "diffstat", "status": "modified", "lines_added": 2, "lines_removed": 1,
                "old": {"type": "commit_file", "path": "src/login.rs", "escaped_path": "src/login.rs"},
                "new": {"type": "commit_file", "path": "src/login.rs", "escaped_path": "src/login.rs"}}]}),
        ),
        ("GET", ["diff", _]) => (
            200,
            String::new(),
            "text/plain",
            "diff --git a/src/login.rs b/src/login.rs\n--- a/src/login.rs\n+++ b/src/login.rs\n@@ -10,3 +10,4 @@\n-    redirect(login)\n+    if !logged_in {\n+        redirect(login)\n+    }\n".to_string(),
        ),
        ("GET", ["commit", hash]) => match full_commit(hash) {
            Some(full) => json_ok(
                200,
                json!({"type": "commit", "hash": full, "message": "Fix the login loop",
                       "date": "2026-01-05T09:55:00+00:00"}),
            ),
            None => json_ok(
                404,
                json!({"type": "error", "error": {"message": "no such commit"}}),
            ),
        },
        ("GET", ["commit", hash, "statuses"]) => {
            let values = builds_of(&repo, full_commit(hash).unwrap_or_default());
            json_ok(
                200,
                json!({"pagelen": 100, "size": values.len(), "page": 1, "values": values}),
            )
        }
        ("POST", ["pullrequests", _, "approve"]) => json_ok(
            200,
            json!({"type": "participant", "user": user("Conduit", "557058:agent"), "role": "PARTICIPANT",
                   "approved": true, "state": "approved", "participated_on": "2026-01-05T11:00:00.000000+00:00"}),
        ),
        ("POST", ["pullrequests", _, "request-changes"]) => json_ok(
            200,
            json!({"type": "participant", "user": user("Conduit", "557058:agent"), "role": "PARTICIPANT",
                   "approved": false, "state": "changes_requested", "participated_on": "2026-01-05T11:00:00.000000+00:00"}),
        ),
        _ => json_ok(
            404,
            json!({"type": "error", "error": {"message": "not scripted"}}),
        ),
    }
}

/// `s` percent-decoded (`+` kept: Bitbucket's `q` sends `%2B`).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A UTC time of the scripted data or a query (`2026-01-05T10:00:00.000+00:00`),
/// comparable as text: seconds and a six-digit fraction.
fn time_key(t: &str) -> String {
    let t = t.trim_end_matches("+00:00").trim_end_matches('Z');
    let (secs, frac) = t.split_once('.').unwrap_or((t, ""));
    format!("{secs}.{frac:0<6}")
}

/// The answer to a stored repository's pull request list or comment list (see
/// [`Scripted::list`]); none for any other request.
fn list_answer(
    shared: &Shared,
    method: &str,
    target: &str,
) -> Option<(u16, String, &'static str, String)> {
    if method != "GET" {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (repo, pr) = match segs.as_slice() {
        ["repositories", w, r, "pullrequests"] => (format!("{w}/{r}"), None),
        ["repositories", w, r, "pullrequests", id, "comments"] => {
            (format!("{w}/{r}"), Some(id.parse::<u64>().ok()?))
        }
        _ => return None,
    };
    let (prs, comments) = shared.listed.get(&repo)?;
    let params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), percent_decode(v))
        })
        .collect();
    let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut values: Vec<Value> = match pr {
        None => {
            let states: Vec<&str> = params
                .iter()
                .filter(|(n, _)| n == "state")
                .map(|(_, v)| v.as_str())
                .collect();
            prs.iter()
                .filter(|p| {
                    let state = p["state"].as_str().unwrap_or_default();
                    if states.is_empty() {
                        state == "OPEN"
                    } else {
                        states.contains(&state)
                    }
                })
                .cloned()
                .collect()
        }
        Some(id) => comments.get(&id).cloned().unwrap_or_default(),
    };
    // q: one `field>"time"` comparison.
    if let Some(q) = param("q") {
        let (field, rest) = q.split_once('>')?;
        let since = time_key(rest.trim().trim_matches('"'));
        let field = field.trim().to_string();
        values.retain(|v| time_key(v[&field].as_str().unwrap_or_default()) > since);
    }
    if let Some(sort) = param("sort") {
        let (desc, field) = match sort.strip_prefix('-') {
            Some(f) => (true, f.to_string()),
            None => (false, sort.clone()),
        };
        values.sort_by_key(|v| time_key(v[&field].as_str().unwrap_or_default()));
        if desc {
            values.reverse();
        }
    }
    let pagelen: usize = param("pagelen").and_then(|p| p.parse().ok()).unwrap_or(10);
    let page: usize = param("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    let size = values.len();
    let shown: Vec<Value> = values
        .into_iter()
        .skip((page.max(1) - 1) * pagelen)
        .take(pagelen)
        .collect();
    let mut body = json!({"pagelen": pagelen.max(1), "size": size, "page": page, "values": shown});
    if page * pagelen < size {
        let mut rest: Vec<String> = query
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("page="))
            .map(str::to_string)
            .collect();
        rest.push(format!("page={}", page + 1));
        body["next"] = json!(format!("{}{path}?{}", shared.next_base, rest.join("&")));
    }
    Some((200, String::new(), "application/json", body.to_string()))
}
