//! webd's API end to end: the real suite (broker, storaged, extrunner, schedulerd,
//! ingressd, webd) as processes of this test binary, which is also the suite's
//! multi-call binary (`oc_systest::dispatch`), and a login token from the real
//! `open-conduit web login`.
//!
//! - without a token, or with one not minted, every route is 401;
//! - a POST not sent as `application/json` is 403 (a cross-site form cannot send it);
//! - a Work made through the store is in `/api/works` and `/api/works/{id}`;
//! - acting `stop` records a `core.action.stop` Event naming `web:<name>`;
//! - every answer passes Prism's validation proxy over webd/openapi.json (skipped with
//!   a printed reason when node or tests/github-api/node_modules is missing, unless
//!   `OC_REQUIRE_PEERS=1`);
//! - no answer carries the configured webhook secret.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;

use oc_systest::{parse_response, Daemon, Response, Suite, HANG};
use serde_json::{json, Value};

const HOOK: &str = "/hooks/ci";
const SECRET: &str = "webd-test-secret-4f1c9a";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(status) = oc_systest::dispatch(&args) {
        std::process::exit(status);
    }
    if args.iter().any(|a| a == "--list") {
        println!("the_web_api: test");
        return;
    }
    the_web_api();
    println!("test the_web_api ... ok");
}

/// One request on a new connection (`Connection: close`), and the whole answer.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    s.write_all(&bytes).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_response(&raw).unwrap()
}

/// The client of one address, signing in with a token (or none), keeping every
/// answer to check them all for the secret at the end.
struct Client {
    addr: SocketAddr,
    token: Option<String>,
    seen: Vec<(String, Response)>,
    /// A session cookie (`oc_session=…`) and its CSRF token, sent when set.
    cookie: Option<String>,
    csrf: Option<String>,
}

impl Client {
    fn new(addr: SocketAddr, token: Option<String>) -> Client {
        Client {
            addr,
            token,
            seen: Vec::new(),
            cookie: None,
            csrf: None,
        }
    }
}

impl Client {
    fn send(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Response {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        if let Some(c) = content_type {
            headers.push(("Content-Type", c));
        }
        if let Some(c) = &self.cookie {
            headers.push(("Cookie", c.as_str()));
        }
        if let Some(c) = &self.csrf {
            headers.push(("X-CSRF-Token", c.as_str()));
        }
        let r = request(self.addr, method, path, &headers, body);
        self.seen.push((format!("{method} {path}"), r.clone()));
        r
    }

    fn get(&mut self, path: &str) -> (u16, Value) {
        let r = self.send("GET", path, None, b"");
        (r.status, body(&r))
    }

    fn ok(&mut self, path: &str) -> Value {
        let (status, v) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    fn post_json(&mut self, path: &str, v: &Value) -> (u16, Value) {
        let r = self.send(
            "POST",
            path,
            Some("application/json"),
            v.to_string().as_bytes(),
        );
        (r.status, body(&r))
    }
}

fn body(r: &Response) -> Value {
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{} {}",
        r.status,
        r.text()
    );
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.text()))
}

fn config(suite: &Suite) -> Value {
    let secret = suite.dir.join("secrets/hook-secret");
    std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    json!({
        "connections": [{"name": "hooks", "type": "webhook",
                         "secret_refs": {"secret": format!("file:{}", secret.display())}}],
        "scopes": [{"id": "demo", "entries": [
            {"type": "webhook", "name": "ci", "connection": "hooks",
             "config": {"path": HOOK, "delivery_id": {"header": "X-Delivery-Id"},
                        "correlate": "/number"}}]}]
    })
}

/// A Work in scope `demo`, made through the store as the router makes one.
fn work_through_the_store(suite: &Suite, key: &str) -> (String, i64) {
    let accepted = suite
        .call(
            "store.events_accept",
            json!({"events": [{"scope_id": "demo", "type": "test.poked", "source": "test",
                               "delivery_id": key, "payload": {"n": 1}, "keys": [key]}]}),
        )
        .unwrap();
    let seq = accepted["events"][0]["seq"].as_i64().unwrap();
    let routed = suite
        .call(
            "store.route_decide",
            json!({"seq": seq, "scope_id": "demo",
                   "outcome": {"type": "create", "kind": "work", "keys": [key]}}),
        )
        .unwrap();
    (routed["work_id"].as_str().unwrap().to_owned(), seq)
}

/// `open-conduit web login --name NAME`, as an operator runs it: the token it prints.
fn login(bin: &Path, suite: &Suite, name: &str) -> String {
    let out = Command::new(bin)
        .args(["open-conduit", "web", "login", "--name", name, "--state"])
        .arg(suite.dir.join("state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "web login: {said}");
    assert!(said.contains(&format!("web:{name}")), "{said}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The reads every client makes, checked for what a user would see.
fn reads(c: &mut Client, work: &str, seq: i64) {
    let page = c.ok("/api/works?scope=demo&limit=200");
    let ids: Vec<&str> = page["works"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["id"].as_str())
        .collect();
    assert!(ids.contains(&work), "{page}");
    let one = c.ok("/api/works?limit=1");
    assert_eq!(one["works"].as_array().unwrap().len(), 1, "{one}");
    let shown = c.ok(&format!("/api/works/{work}"));
    assert_eq!(shown["work"]["id"], work, "{shown}");
    assert_eq!(shown["work"]["scope_id"], "demo", "{shown}");
    assert_eq!(shown["inputs"][0]["seq"], seq, "{shown}");
    let (status, missing) = c.get("/api/works/work_nope");
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "not_found", "{missing}");
    let events = c.ok("/api/events?after=0&limit=200");
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["seq"] == seq),
        "{events}"
    );
    let exts = c.ok("/api/extensions");
    assert!(
        exts["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "webhook"),
        "{exts}"
    );
    let asks = c.ok("/api/asks");
    assert!(asks["asks"].is_array(), "{asks}");
    let actions = c.ok(&format!("/api/works/{work}/actions"));
    assert!(actions.is_object(), "{actions}");
    let session = c.ok("/api/session");
    assert_eq!(session["person"], "web:alice", "{session}");
    let hosts = c.ok("/api/hosts");
    assert!(hosts["hosts"].is_array(), "{hosts}");
    // The configuration, its secret reference redacted.
    let config = c.ok("/api/config");
    assert_eq!(config["check"]["ok"], true, "{config}");
    assert_eq!(config["scopes"], json!(["demo"]), "{config}");
    assert_eq!(
        config["config"]["connections"][0]["secret_refs"]["secret"], "[redacted]",
        "{config}"
    );
    assert!(!config.to_string().contains("hook-secret"), "{config}");
    // A route trace of the recorded Event, and of one given by type: the webhook
    // entry's route has its verdict, and nothing is written.
    let before = c.ok("/api/events?after=0&limit=200")["events"]
        .as_array()
        .unwrap()
        .len();
    let trace = c.ok(&format!("/api/route-trace?scope=demo&sample={seq}"));
    assert_eq!(trace["event"]["type"], "test.poked", "{trace}");
    assert!(trace["records"].is_array(), "{trace}");
    let typed =
        c.ok("/api/route-trace?scope=demo&type=webhook.received&source=webhook%2Fci&keys=a%2Cb");
    assert_eq!(typed["event"]["keys"], json!(["a", "b"]), "{typed}");
    let after = c.ok("/api/events?after=0&limit=200&routing=true");
    assert_eq!(after["events"].as_array().unwrap().len(), before, "{after}");
    assert!(after["events"][0]["routing"].is_object(), "{after}");
    let panels = c.ok(&format!("/api/works/{work}/panels"));
    assert!(panels["panels"].is_array(), "{panels}");
    let output = c.ok(&format!("/api/works/{work}/output"));
    assert!(output["outputs"].is_array(), "{output}");
    let pages = c.ok("/api/pages");
    assert!(pages["pages"].is_array(), "{pages}");
    let none = c.ok("/api/works?scope=demo&binding=no-such-binding");
    assert_eq!(none["works"], json!([]), "{none}");
}

fn the_web_api() {
    let bin = std::env::current_exe().unwrap();
    let suite = Suite::new(&bin, "webd", &Suite::first_party()).unwrap();
    suite.start_all().unwrap();
    suite.apply_config(&config(&suite), HOOK).unwrap();
    suite.start(Daemon::Webd).unwrap();
    let token = login(&bin, &suite, "alice");
    assert!(token.starts_with("oct_"), "{token}");
    let kept = std::fs::read_to_string(suite.dir.join("state/webd/tokens")).unwrap();
    assert!(
        !kept.contains(&token),
        "the token itself is not kept: {kept}"
    );

    // Not signed in: 401, with the way to sign in.
    let mut nobody = Client::new(suite.web, None);
    for path in [
        "/api/works",
        "/api/events",
        "/api/asks",
        "/api/works/x/actions",
    ] {
        let r = nobody.send("GET", path, None, b"");
        assert_eq!(r.status, 401, "GET {path}: {}", r.text());
        assert_eq!(body(&r)["error"]["code"], "unauthorized");
        assert!(r
            .header("www-authenticate")
            .is_some_and(|h| h.starts_with("Bearer")));
    }
    let r = nobody.send(
        "POST",
        "/api/works/x/actions",
        Some("application/json"),
        b"{}",
    );
    assert_eq!(r.status, 401, "{}", r.text());
    let mut stranger = Client::new(suite.web, Some("oct_not-a-minted-token".into()));
    assert_eq!(stranger.get("/api/works").0, 401);
    // The document is served to anyone, and is the checked-in one.
    let doc = nobody.ok("/api/openapi.json");
    let file: Value = serde_json::from_str(webd::OPENAPI).unwrap();
    assert_eq!(doc, file);

    let mut alice = Client::new(suite.web, Some(token.clone()));
    let mut all_pages = Vec::new();
    let (work, seq) = work_through_the_store(&suite, "test:1");
    reads(&mut alice, &work, seq);
    // Bounds and bad parameters: 400 naming them.
    let (status, said) = alice.get("/api/works?limit=201");
    assert_eq!(status, 400, "{said}");
    assert!(
        said["error"]["message"].as_str().unwrap().contains("200"),
        "{said}"
    );
    let (status, said) = alice.get("/api/works?state=asleep");
    assert_eq!(status, 400, "{said}");
    let (status, said) = alice.get("/api/works?colour=red");
    assert_eq!(status, 400, "{said}");
    let (status, said) = alice.get("/api/route-trace?type=x");
    assert_eq!(status, 400, "{said}");

    // A POST that is not JSON (what a cross-site form sends): 403, nothing recorded.
    let before = suite.events().unwrap().len();
    let path = format!("/api/works/{work}/actions");
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let r = alice.send("POST", &path, ct, b"{\"action\": \"stop\"}");
        assert_eq!(r.status, 403, "{ct:?}: {}", r.text());
        assert_eq!(body(&r)["error"]["code"], "forbidden");
    }
    assert_eq!(suite.events().unwrap().len(), before);

    // Stop, as alice: a core.action.stop Event naming web:alice.
    let (status, acted) =
        alice.post_json(&path, &json!({"action": "stop", "key": "web-test/stop-1"}));
    assert_eq!(status, 200, "{acted}");
    let event_id = acted["event"].as_str().unwrap().to_owned();
    let event = suite.call("store.event", json!({"id": event_id})).unwrap()["event"].clone();
    assert_eq!(event["type"], "core.action.stop", "{event}");
    assert_eq!(event["payload"]["caller"], "web:alice", "{event}");
    let shown = alice.ok(&format!("/api/works/{work}"));
    let decisions = shown["decisions"].as_array().unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d["type"] == "core.action.stop" && d["caller"] == "web:alice"),
        "{shown}"
    );
    assert_eq!(shown["work"]["state"], "cancelled", "{shown}");

    // Signing in in a browser: a session cookie (HttpOnly, SameSite=Strict), whose
    // POSTs need its CSRF token; the pages, drawn for that session.
    let mut browser = Client::new(suite.web, None);
    let r = browser.send("GET", "/works", None, b"");
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/login?next=%2Fworks"));
    let r = browser.send(
        "POST",
        "/login",
        Some("application/x-www-form-urlencoded"),
        b"token=oct_wrong&next=%2Fworks",
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.header("set-cookie").is_none());
    let form = format!("token={token}&next=%2Fdeliveries");
    let r = browser.send(
        "POST",
        "/login",
        Some("application/x-www-form-urlencoded"),
        form.as_bytes(),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/deliveries"));
    let set = r.header("set-cookie").unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains(&token), "{set}");
    browser.cookie = Some(set.split(';').next().unwrap().to_owned());
    let (status, session) = browser.get("/api/session");
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["person"], "web:alice", "{session}");
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    assert!(!csrf.is_empty());
    let (third, _) = work_through_the_store(&suite, "test:3");
    let third_path = format!("/api/works/{third}/actions");
    let before = suite.events().unwrap().len();
    // A cross-site POST carries the cookie but not the token: 403, nothing recorded.
    for ct in ["application/json", "text/plain"] {
        let r = browser.send("POST", &third_path, Some(ct), b"{\"action\": \"stop\"}");
        assert_eq!(r.status, 403, "{ct}: {}", r.text());
    }
    browser.csrf = Some("0".repeat(64));
    let (status, said) = browser.post_json(&third_path, &json!({"action": "stop"}));
    assert_eq!(
        (status, said["error"]["code"].as_str()),
        (403, Some("csrf")),
        "{said}"
    );
    assert_eq!(suite.events().unwrap().len(), before);
    browser.csrf = Some(csrf);
    let (status, acted) = browser.post_json(&third_path, &json!({"action": "stop"}));
    assert_eq!(status, 200, "{acted}");
    let event = suite
        .call("store.event", json!({"id": acted["event"]}))
        .unwrap()["event"]
        .clone();
    assert_eq!(event["payload"]["caller"], "web:alice", "{event}");
    for path in [
        "/works".to_owned(),
        "/works?state=cancelled&scope=demo".to_owned(),
        format!("/works/{third}"),
        "/deliveries".to_owned(),
        "/extensions".to_owned(),
        "/config".to_owned(),
        format!("/config?scope=demo&sample={seq}"),
        "/pages".to_owned(),
    ] {
        let r = browser.send("GET", &path, None, b"");
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{path}"
        );
        let html = r.text();
        assert!(html.contains("web:alice"), "{path}: {html}");
        if path.starts_with("/works") && !path.contains('?') {
            assert!(html.contains(&third), "{path}: {html}");
        }
        if path.contains("sample") {
            assert!(html.contains("trace-result"), "{path}: {html}");
        }
    }
    all_pages.extend(std::mem::take(&mut browser.seen));

    // Every answer, against the document, through a third-party validator.
    let mut all = std::mem::take(&mut alice.seen);
    all.append(&mut all_pages);
    all.extend(std::mem::take(&mut nobody.seen));
    all.extend(std::mem::take(&mut stranger.seen));
    match prism(&suite) {
        None => {}
        Some(prism) => {
            let addr: SocketAddr = prism.url.trim_start_matches("http://").parse().unwrap();
            let mut via = Client::new(addr, Some(token.clone()));
            let (other, seq) = work_through_the_store(&suite, "test:2");
            reads(&mut via, &other, seq);
            let (status, acted) = via.post_json(
                &format!("/api/works/{other}/actions"),
                &json!({"action": "stop", "key": "web-test/stop-2"}),
            );
            assert_eq!(status, 200, "{acted}");
            // The same key again: the same Event, nothing done again.
            let (status, again) = via.post_json(
                &format!("/api/works/{other}/actions"),
                &json!({"action": "stop", "key": "web-test/stop-2"}),
            );
            assert_eq!((status, &again["event"]), (200, &acted["event"]), "{again}");
            let mut anonymous = Client::new(addr, None);
            // Prism itself answers a request without the bearer scheme.
            assert_eq!(anonymous.send("GET", "/api/works", None, b"").status, 401);
            for (what, r) in via.seen.iter().chain(anonymous.seen.iter()) {
                assert!(
                    r.header("sl-violations").is_none(),
                    "{what}: Prism found violations: {:?}\n{}",
                    r.header("sl-violations"),
                    prism.lines().join("\n")
                );
            }
            let log = prism.lines().join("\n");
            assert!(!log.to_lowercase().contains("violation"), "{log}");
            all.extend(via.seen);
            all.extend(anonymous.seen);
            drop(prism);
            // The validator can fail: over a document that wants a field webd does
            // not send, the same answer is a violation.
            let mut strict: Value = serde_json::from_str(webd::OPENAPI).unwrap();
            strict["components"]["schemas"]["WorkPage"]["required"] =
                json!(["works", "next", "total"]);
            let spec = suite.dir.join("strict-openapi.json");
            std::fs::write(&spec, strict.to_string()).unwrap();
            let prism =
                oc_systest::github::start_prism_proxy(&spec, &format!("http://{}", suite.web))
                    .unwrap();
            let addr: SocketAddr = prism.url.trim_start_matches("http://").parse().unwrap();
            let mut strict = Client::new(addr, Some(token.clone()));
            let r = strict.send("GET", "/api/works", None, b"");
            assert!(
                r.header("sl-violations")
                    .is_some_and(|v| v.contains("total")),
                "{} {:?} {}\n{}",
                r.status,
                r.headers,
                r.text(),
                prism.lines().join("\n")
            );
        }
    }

    // No answer carries the configured secret.
    assert!(!all.is_empty());
    for (what, r) in &all {
        let mut text = r.text();
        for (n, v) in &r.headers {
            text.push_str(&format!("\n{n}: {v}"));
        }
        assert!(!text.contains(SECRET), "{what} carries the secret");
    }
}

/// Prism's validation proxy in front of webd, or `None` after printing why not.
fn prism(suite: &Suite) -> Option<oc_systest::github::Prism> {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    match oc_systest::github::start_prism_proxy(&spec, &format!("http://{}", suite.web)) {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(
                !oc_systest::github::required(),
                "no Prism under OC_REQUIRE_PEERS=1: {why}"
            );
            eprintln!("SKIPPED (the OpenAPI validation): {why}");
            None
        }
    }
}
