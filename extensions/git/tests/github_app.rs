#![allow(clippy::unwrap_used)]
//! A `git` resource on a GitHub App connection, with the real `oc-git-extension`
//! binary driven as the host drives it (`initialize`, `configure` with the
//! connection, `provider.acquire`, `check.run`; the host's `secret.resolve` served
//! here with a key `openssl genrsa` made). A stand-in GitHub on 127.0.0.1 mints the
//! installation tokens; the origin is an HTTP server that records the Basic
//! credential git sends and refuses it (the authenticated origin, real
//! `git http-backend`, is the system test tests/tests/git_app.rs). A `bitbucket`
//! connection, which mints nothing, is here too: its token goes as `x-token-auth`,
//! else its app password with its username. Nothing here measures time: the
//! timeouts only guard against hangs.

use protocol::{connect, CallError, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-git-extension");
/// Only against hangs.
const HANG: Duration = Duration::from_secs(120);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

fn have_tools() -> bool {
    let ok = |cmd: &str, arg: &str| {
        std::process::Command::new(cmd)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let have = ok("git", "--version") && ok("openssl", "version");
    if !have {
        eprintln!("skipped: no `git` or `openssl` on PATH");
    }
    have
}

fn generate_key() -> String {
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "2048"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl genrsa failed");
    String::from_utf8(out.stdout).unwrap()
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-git-app-{test}-{}", std::process::id()));
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

/// One HTTP request a test server got.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    authorization: String,
    body: Value,
}

/// A one-request-per-connection HTTP server on 127.0.0.1 answering with `answer`.
fn serve(
    answer: impl Fn(&Seen) -> (u16, String, Vec<(String, String)>) + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut raw = Vec::new();
            let mut buf = [0u8; 8192];
            let head_end = loop {
                if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(p);
                }
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
            let mut lines = head.split("\r\n");
            let mut first = lines.next().unwrap_or_default().split(' ');
            let method = first.next().unwrap_or_default().to_string();
            let path = first.next().unwrap_or_default().to_string();
            let mut authorization = String::new();
            let mut length = 0usize;
            for l in lines {
                if let Some((k, v)) = l.split_once(':') {
                    if k.eq_ignore_ascii_case("authorization") {
                        authorization = v.trim().to_string();
                    } else if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = raw[head_end + 4..].to_vec();
            while body.len() < length {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&buf[..n]),
                }
            }
            let s = Seen {
                method,
                path,
                authorization,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            };
            log.lock().unwrap().push(s.clone());
            let (status, text, headers) = answer(&s);
            let mut reply = format!("HTTP/1.1 {status} X\r\n");
            for (k, v) in headers {
                reply.push_str(&format!("{k}: {v}\r\n"));
            }
            reply.push_str(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            ));
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    (port, seen)
}

/// A stand-in GitHub: `POST /app/installations/42/access_tokens` mints `ghs_<n>`,
/// expiring in `ttl_s(n)` seconds; installation 13 is refused with 403.
fn github(ttl_s: fn(usize) -> i64) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let minted = Arc::new(Mutex::new(0usize));
    serve(move |s| {
        let json_type = vec![("Content-Type".into(), "application/json".into())];
        match (s.method.as_str(), s.path.as_str()) {
            ("POST", "/app/installations/42/access_tokens") => {
                let mut n = minted.lock().unwrap();
                *n += 1;
                let at =
                    protocol::time::format_rfc3339_ms(protocol::time::now_ms() + ttl_s(*n) * 1000);
                let body = json!({"token": format!("ghs_minted_{}", *n), "expires_at": at});
                (201, body.to_string(), json_type)
            }
            ("POST", "/app/installations/13/access_tokens") => (
                403,
                json!({"message": "Resource not accessible by integration"}).to_string(),
                json_type,
            ),
            _ => (404, json!({"message": "Not Found"}).to_string(), json_type),
        }
    })
}

/// An origin that asks for a password and refuses every one, recording them.
fn refusing_origin() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    serve(|_| {
        (
            401,
            String::new(),
            vec![("WWW-Authenticate".into(), "Basic realm=\"GitHub\"".into())],
        )
    })
}

/// A `bb*` connection's `token`.
const BB_TOKEN: &str = "bbtok-GIT-SECRET-5a0";
/// A `bb*` connection's `app_password`.
const BB_APP_PASSWORD: &str = "bbapp-GIT-SECRET-c37";

/// The host: `secret.resolve` of an App connection's `private_key`, and of a `bb*`
/// connection's `token` and `app_password`, recorded.
struct HostState {
    key: String,
    asked: Mutex<Vec<Value>>,
}

async fn serve_host(state: Arc<HostState>, request: Request) -> Result<Value, RpcError> {
    match request.method.as_str() {
        "secret.resolve" => {
            let p: Value = request.params()?;
            state.asked.lock().unwrap().push(p.clone());
            let names: Vec<String> = serde_json::from_value(p["names"].clone()).unwrap();
            let mut values = serde_json::Map::new();
            let bitbucket = p["connection"].as_str().unwrap_or("").starts_with("bb");
            for n in names {
                match n.as_str() {
                    "private_key" => {
                        values.insert(n, json!(state.key));
                    }
                    "token" if bitbucket => {
                        values.insert(n, json!(BB_TOKEN));
                    }
                    "app_password" if bitbucket => {
                        values.insert(n, json!(BB_APP_PASSWORD));
                    }
                    _ => {}
                }
            }
            Ok(json!({ "values": values }))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Ext {
    _child: Child,
    peer: Peer,
    stderr: Arc<Mutex<String>>,
}

impl Ext {
    async fn start(s: &Scratch, host: &Arc<HostState>) -> Ext {
        let mut child = Command::new(EXE)
            .current_dir(&s.0)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let into = Arc::clone(&stderr);
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let state = Arc::clone(host);
        let handler = FnHandler(move |request: Request| serve_host(Arc::clone(&state), request));
        let peer = connect(stdout, stdin, handler, Options::named("git provider"));
        within(peer.call(
            "initialize",
            &json!({
                "protocol_versions": [1],
                "host": {"name": "test-host", "version": "0"},
                "state_dir": s.0.join("state").to_str().unwrap(),
                "resource_dirs": {"git": s.0.join("resources/git").to_str().unwrap()},
            }),
        ))
        .await
        .unwrap();
        Ext {
            _child: child,
            peer,
            stderr,
        }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.peer.call(method, &params)).await
    }

    async fn acquire(&self, owner: &str, config: Value) -> Result<Value, CallError> {
        self.call(
            "provider.acquire",
            json!({"type": "git", "owner": owner, "mode": "work", "config": config,
                   "params": null, "scope_id": "acme", "binding": "agent"}),
        )
        .await
    }
}

fn app_connection(name: &str, api: u16, git: u16, installation: u64) -> Value {
    json!({"name": name, "type": "github", "secrets": ["webhook_secret", "private_key"],
           "config": {"app_id": 1234, "installation_id": installation,
                      "api_url": format!("http://127.0.0.1:{api}"),
                      "git_url": format!("http://127.0.0.1:{git}")}})
}

fn what(e: &CallError) -> (String, String, String) {
    let rpc = e.rpc().unwrap_or_else(|| panic!("not authored: {e}"));
    let data = rpc.data.clone().unwrap_or(Value::Null);
    (
        data["code"].as_str().unwrap_or("").to_string(),
        data["what"].as_str().unwrap_or("").to_string(),
        rpc.message.clone(),
    )
}

/// The Basic credential an HTTP request sent, decoded.
fn basic(s: &Seen) -> Option<String> {
    let b = s.authorization.strip_prefix("Basic ")?;
    String::from_utf8(protocol::b64::decode(b.trim()).ok()?).ok()
}

#[tokio::test]
async fn an_app_connection_mints_one_read_only_token_per_repository_and_reuses_it() {
    if !have_tools() {
        return;
    }
    let s = Scratch::new("mint");
    // The first token expires within the five-minute margin, the others in an hour.
    let (api, minted) = github(|n| if n == 1 { 120 } else { 3600 });
    let (origin, fetched) = refusing_origin();
    let key = generate_key();
    let host = Arc::new(HostState {
        key: key.clone(),
        asked: Mutex::new(Vec::new()),
    });
    let ext = Ext::start(&s, &host).await;
    ext.call(
        "configure",
        json!({"generation": "g1", "connections": [
            app_connection("app", api, origin, 42),
            app_connection("refused", api, origin, 13),
            {"name": "plain", "type": "github", "secrets": ["token"], "config": {}}
        ]}),
    )
    .await
    .unwrap();
    let repo = format!("http://127.0.0.1:{origin}/octo/hello.git");
    let config = json!({"repository": repo, "connection": "app", "timeout_s": 60});

    // The token is minted for the one repository, read-only, with the App's key, and
    // git sends it as x-access-token (the origin here refuses it).
    let e = ext.acquire("w-1", config.clone()).await.unwrap_err();
    let (code, what_failed, _) = what(&e);
    assert_eq!(
        (code.as_str(), what_failed.as_str()),
        ("resource_setup_failed", "credential"),
        "{e}"
    );
    let mints = minted.lock().unwrap().clone();
    assert_eq!(mints.len(), 1, "{mints:?}");
    assert_eq!(mints[0].body["repositories"], json!(["hello"]));
    assert_eq!(mints[0].body["permissions"], json!({"contents": "read"}));
    assert!(mints[0].authorization.starts_with("Bearer ey"), "a JWT");
    let asked = host.asked.lock().unwrap().clone();
    assert_eq!(asked[0]["connection"], "app");
    assert_eq!(asked[0]["scope_id"], "acme");
    assert_eq!(asked[0]["names"], json!(["private_key"]));
    let sent: Vec<String> = fetched.lock().unwrap().iter().filter_map(basic).collect();
    assert!(
        sent.contains(&"x-access-token:ghs_minted_1".to_string()),
        "{sent:?}"
    );

    // ghs_minted_1 expires within five minutes: minted anew; ghs_minted_2 is reused,
    // by acquisitions and by the doctor check alike.
    ext.acquire("w-2", config.clone()).await.unwrap_err();
    ext.acquire("w-3", config.clone()).await.unwrap_err();
    let check = ext
        .call(
            "check.run",
            json!({"check": "repositories", "config": {"dir": s.0.to_str().unwrap(),
                "scopes": [{"id": "acme", "bindings": [{"name": "agent", "executor": "shell",
                    "resource": {"type": "git", "config": config}}]}]}}),
        )
        .await
        .unwrap();
    assert_eq!(
        check["status"], "fail",
        "the origin refuses every token: {check}"
    );
    assert_eq!(minted.lock().unwrap().len(), 2);
    let sent: Vec<String> = fetched.lock().unwrap().iter().filter_map(basic).collect();
    assert!(
        sent.contains(&"x-access-token:ghs_minted_2".to_string()),
        "{sent:?}"
    );
    assert!(
        !sent.iter().any(|c| c.ends_with("ghs_minted_3")),
        "reused: {sent:?}"
    );

    // Another repository of the same App: a token of its own.
    let other = json!({"repository": format!("http://127.0.0.1:{origin}/octo/other"),
                       "connection": "app", "timeout_s": 60});
    ext.acquire("w-4", other).await.unwrap_err();
    let mints = minted.lock().unwrap().clone();
    assert_eq!(mints.len(), 3);
    assert_eq!(mints[2].body["repositories"], json!(["other"]));

    // A secret named explicitly is that secret, not the App (the host has no `token`).
    let explicit = json!({"repository": repo, "connection": "app", "secret": "token"});
    let e = ext.acquire("w-5", explicit).await.unwrap_err();
    assert!(e.to_string().contains("has no secret \"token\""), "{e}");
    // A token connection is unchanged.
    let plain = json!({"repository": repo, "connection": "plain"});
    let e = ext.acquire("w-6", plain).await.unwrap_err();
    assert!(e.to_string().contains("has no secret \"token\""), "{e}");
    assert_eq!(minted.lock().unwrap().len(), 3);

    // A mint GitHub refuses fails the acquisition, naming the connection and the
    // status, never the key.
    let refused = json!({"repository": repo, "connection": "refused"});
    let e = ext.acquire("w-7", refused).await.unwrap_err();
    let (code, what_failed, message) = what(&e);
    assert_eq!(
        (code.as_str(), what_failed.as_str()),
        ("resource_setup_failed", "credential"),
        "{e}"
    );
    assert!(
        message.contains("\"refused\"") && message.contains("403"),
        "{message}"
    );
    // A repository not under the connection's git_url gets no token.
    let elsewhere =
        json!({"repository": "https://example.com/octo/hello.git", "connection": "app"});
    let e = ext.acquire("w-8", elsewhere).await.unwrap_err();
    assert!(e.to_string().contains("git_url"), "{e}");
    assert_eq!(minted.lock().unwrap().len(), 4, "one refused mint");

    // No token and no key in any file the provider made, nor in its log.
    let body_line = key.lines().nth(1).unwrap().to_string();
    let grep = std::process::Command::new("grep")
        .args(["-rlF", "-e", "ghs_minted", "-e", &body_line])
        .arg(&s.0)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&grep.stdout).trim().is_empty(),
        "leaked into {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    let log = ext.stderr.lock().unwrap().clone();
    assert!(
        !log.contains("ghs_minted") && !log.contains(&body_line),
        "the log: {log}"
    );
}

#[tokio::test]
async fn a_bitbucket_connection_signs_git_in_with_its_token_else_its_app_password() {
    if !have_tools() {
        return;
    }
    let s = Scratch::new("bitbucket");
    let (origin, fetched) = refusing_origin();
    let host = Arc::new(HostState {
        key: String::new(),
        asked: Mutex::new(Vec::new()),
    });
    let ext = Ext::start(&s, &host).await;
    let bitbucket = |name: &str, config: Value, secrets: &[&str]| json!({"name": name, "type": "bitbucket", "config": config, "secrets": secrets});
    ext.call(
        "configure",
        json!({"generation": "g1", "connections": [
            bitbucket("bb", json!({}), &["token", "webhook_secret"]),
            bitbucket("bbapp", json!({"username": "conduit-bot"}),
                      &["app_password", "webhook_secret"]),
            bitbucket("bbnone", json!({}), &["webhook_secret"]),
        ]}),
    )
    .await
    .unwrap();
    let repo = format!("http://127.0.0.1:{origin}/acme/widgets.git");
    let sent = || -> Vec<String> { fetched.lock().unwrap().iter().filter_map(basic).collect() };

    // Only the connection named: its token, as x-token-auth (the origin refuses it).
    let e = ext
        .acquire("w-1", json!({"repository": repo, "connection": "bb"}))
        .await
        .unwrap_err();
    let (code, what_failed, _) = what(&e);
    assert_eq!(
        (code.as_str(), what_failed.as_str()),
        ("resource_setup_failed", "credential"),
        "{e}"
    );
    assert!(
        sent().contains(&format!("x-token-auth:{BB_TOKEN}")),
        "{:?}",
        sent()
    );
    let asked = host.asked.lock().unwrap().clone();
    assert_eq!(asked[0]["connection"], "bb");
    assert_eq!(asked[0]["names"], json!(["token"]));

    // An app-password connection: its username and app password.
    ext.acquire("w-2", json!({"repository": repo, "connection": "bbapp"}))
        .await
        .unwrap_err();
    assert!(
        sent().contains(&format!("conduit-bot:{BB_APP_PASSWORD}")),
        "{:?}",
        sent()
    );

    // What the resource names wins.
    let named = json!({"repository": repo, "connection": "bb", "username": "someone"});
    ext.acquire("w-3", named).await.unwrap_err();
    assert!(
        sent().contains(&format!("someone:{BB_TOKEN}")),
        "{:?}",
        sent()
    );

    // A connection with neither fails before git runs, saying what it lacks.
    let before = fetched.lock().unwrap().len();
    let e = ext
        .acquire("w-4", json!({"repository": repo, "connection": "bbnone"}))
        .await
        .unwrap_err();
    let (code, what_failed, message) = what(&e);
    assert_eq!(
        (code.as_str(), what_failed.as_str()),
        ("resource_setup_failed", "credential"),
        "{e}"
    );
    assert!(
        message.contains("\"bbnone\"") && message.contains("app_password"),
        "{message}"
    );
    assert_eq!(fetched.lock().unwrap().len(), before, "git never ran");

    // No secret in any file the provider made, nor in its log.
    let grep = std::process::Command::new("grep")
        .args(["-rlF", "-e", BB_TOKEN, "-e", BB_APP_PASSWORD])
        .arg(&s.0)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&grep.stdout).trim().is_empty(),
        "leaked into {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    let log = ext.stderr.lock().unwrap().clone();
    assert!(
        !log.contains(BB_TOKEN) && !log.contains(BB_APP_PASSWORD),
        "the log: {log}"
    );
}
