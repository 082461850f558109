#![allow(clippy::unwrap_used)]
//! The agents' toolbelt with real daemons and the real `open-conduit mcp` server: a
//! delivery becomes Work whose turn (the `agent` test executor, driven from here as an
//! agent would) reads its context, calls an extension operation (retried with the same
//! request ID, the handler runs once), emits, creates Work, parks on a wait that the next matching delivery
//! wakes (the same attempt resumes), declares its outcome, and a token that is not the
//! running execution's is refused. `create_work` from a run of a sandboxed binding
//! names only bindings with a sandbox of the same type, unless the operator opts in.

mod common;
use common::*;

use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The MCP server, as an agent runs it.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(endpoint: &str, token_file: &Path) -> Mcp {
        let mut child = Command::new(BIN)
            .arg("mcp")
            .env("OS_ENDPOINT", endpoint)
            .env("OS_TOKEN_FILE", token_file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mcp {
            child,
            stdin,
            stdout,
            next: 1,
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        let v: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["id"], id, "{v}");
        v
    }

    fn tool(&mut self, name: &str, arguments: Value) -> (bool, Value) {
        let v = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        let r = &v["result"];
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        let out = serde_json::from_str(text).unwrap_or_else(|_| json!(text));
        (r["isError"] == true, out)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn work_state(suite: &Suite, id: &str) -> String {
    suite.call("store.work_get", json!({ "id": id })).unwrap()["work"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The run file the `agent` executor wrote for segment `segment`.
fn run_file(dir: &Path, segment: u64) -> (PathBuf, Value) {
    wait_for(&format!("the agent's segment {segment}"), || {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).ok()?).ok()?;
                if v["segment"] == segment {
                    return Some((p, v));
                }
            }
        }
        None
    })
}

fn end_turn(run: &Path, outcome: &str) {
    std::fs::write(
        run.with_extension("end"),
        json!({"outcome": outcome, "summary": "turn over"}).to_string(),
    )
    .unwrap();
}

#[test]
fn an_agent_turn_reads_calls_once_waits_and_resumes_through_the_toolbelt() {
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "agent".into(),
        manifest: oc_systest::agent::MANIFEST.into(),
        command: vec!["ext-agent".into()],
    });
    let suite = Suite::new(Path::new(BIN), "toolbelt", &packages).unwrap();
    suite.start_all().unwrap();
    let turns = suite.dir.join("turns");
    std::fs::create_dir_all(&turns).unwrap();
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "agent", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "agent", "executor": "agent",
        "operations": ["agent.count"], "config": {"dir": turns}}]);
    suite.apply_config(&c, HOOK).unwrap();
    assert_eq!(
        deliver(&suite, "t-1", br#"{"number": 5}"#).unwrap().status,
        200
    );

    // The turn is given the toolbelt: an endpoint and a token, which goes in a 0600 file.
    let (run, record) = run_file(&turns, 0);
    let endpoint = record["toolbelt"]["endpoint"].as_str().unwrap().to_owned();
    let token = record["toolbelt"]["token"].as_str().unwrap().to_owned();
    assert!(!endpoint.is_empty() && !token.is_empty(), "{record}");
    let work_id = record["work_id"].as_str().unwrap().to_owned();
    let token_file = turns.join("token");
    std::fs::write(&token_file, &token).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut mcp = Mcp::start(&endpoint, &token_file);

    // initialize: the granted operation, with its summary, fields and guidance.
    let init = mcp.request(
        "initialize",
        json!({"protocolVersion": "2099-01-01", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(
        instructions.contains(
            "- agent.count: Count this call and answer how many calls ran (input: note?)"
        ) && instructions.contains("a retry with the same one is not counted again"),
        "{instructions}"
    );
    writeln!(
        mcp.stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    assert_eq!(mcp.request("ping", json!({}))["result"], json!({}));
    let tools = mcp.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "read_context",
            "emit",
            "create_work",
            "wait",
            "declare_outcome",
            "call"
        ]
    );

    // read_context: this Work and the delivery that made it.
    let (err, ctx) = mcp.tool("read_context", json!({}));
    assert!(!err, "{ctx}");
    assert_eq!(ctx["work"]["id"], work_id.as_str(), "{ctx}");
    assert_eq!(ctx["events"][0]["type"], "webhook.delivery", "{ctx}");
    let key = ctx["work"]["keys"][0].as_str().unwrap().to_owned();

    // call, retried with the same request ID: the handler runs once.
    let calls = suite.dir.join("bundled/agent/calls");
    let args = json!({"operation": "agent.count", "input": {"note": "hi"}, "request_id": "r-1"});
    let (err, first) = mcp.tool("call", args.clone());
    assert!(!err, "{first}");
    assert_eq!(first["count"], 1, "{first}");
    let (err, again) = mcp.tool("call", args);
    assert!(!err, "{again}");
    assert_eq!(again, first);
    assert_eq!(std::fs::read_to_string(&calls).unwrap().lines().count(), 1);
    let (_, other) = mcp.tool(
        "call",
        json!({"operation": "agent.count", "request_id": "r-2"}),
    );
    assert_eq!(other["count"], 2, "{other}");
    // An operation the binding does not grant is refused with its safe code.
    let (err, refused) = mcp.tool("call", json!({"operation": "github.comment"}));
    assert!(
        err && refused.as_str().unwrap().starts_with("unauthorized"),
        "{refused}"
    );

    // emit: an agent.* event derived from this Work's input.
    let (err, emitted) = mcp.tool(
        "emit",
        json!({"type": "agent.note", "payload": {"text": "looked"}, "request_id": "e-1"}),
    );
    assert!(!err, "{emitted}");
    let note = suite
        .events()
        .unwrap()
        .into_iter()
        .find(|e| e["type"] == "agent.note")
        .unwrap();
    assert_eq!(note["id"], emitted["event_id"], "{note}");
    assert_eq!(note["source"], "toolbelt/demo", "{note}");
    assert_eq!(note["depth"], 1, "derived from the delivery: {note}");
    let (err, refused) = mcp.tool("emit", json!({"type": "github.issues"}));
    assert!(
        err && refused.as_str().unwrap().starts_with("invalid"),
        "{refused}"
    );

    // A token that is not this execution's is refused, and the next call reads the file
    // afresh.
    std::fs::write(&token_file, format!("{token}x")).unwrap();
    let (err, refused) = mcp.tool("read_context", json!({}));
    assert!(
        err && refused.as_str().unwrap().starts_with("unauthorized"),
        "{refused}"
    );
    std::fs::write(&token_file, &token).unwrap();

    // wait: the turn ends parked, and the next delivery on its key resumes the same
    // attempt with that delivery.
    let (err, w) = mcp.tool(
        "wait",
        json!({"description": "the next delivery about #5", "keys": [key]}),
    );
    assert!(!err, "{w}");
    end_turn(&run, "handoff");
    wait_for("the Work waiting", || {
        (work_state(&suite, &work_id) == "waiting").then_some(())
    });
    let waits = suite
        .call("store.waits", json!({ "work_id": work_id }))
        .unwrap();
    assert_eq!(
        waits["waits"][0]["description"], "the next delivery about #5",
        "{waits}"
    );
    assert_eq!(
        deliver(&suite, "t-2", br#"{"number": 5}"#).unwrap().status,
        200
    );
    let (run2, record2) = run_file(&turns, 1);
    assert_eq!(run2, run, "the same execution resumes");
    assert_eq!(record2["inputs"].as_array().unwrap().len(), 1, "{record2}");
    // The resumed segment runs at a new epoch, with a new token (the old one is fenced):
    // the executor replaces the token file, and the MCP server reads it on the next call.
    let token2 = record2["toolbelt"]["token"].as_str().unwrap();
    assert_ne!(token2, token);
    let (err, refused) = mcp.tool("read_context", json!({}));
    assert!(
        err && refused.as_str().unwrap().starts_with("unauthorized"),
        "{refused}"
    );
    std::fs::write(&token_file, token2).unwrap();
    let (err, ctx) = mcp.tool("read_context", json!({}));
    assert!(!err, "{ctx}");
    assert_eq!(
        ctx["events"].as_array().unwrap().len(),
        2,
        "the two deliveries: {ctx}"
    );

    // create_work: new Work in the scope, on this binding, with the title asked for.
    let (err, created) = mcp.tool(
        "create_work",
        json!({"title": "follow-up on #5", "keys": ["follow:5"], "request_id": "c-1"}),
    );
    assert!(!err, "{created}");
    let follow = wait_for("the Work create_work asked for", || {
        let w = suite
            .call(
                "store.works",
                json!({"scope_id": "demo", "key": "follow:5"}),
            )
            .unwrap();
        w["works"].as_array()?.first().cloned()
    });
    assert_eq!(follow["display"]["title"], "follow-up on #5", "{follow}");
    assert_eq!(follow["binding"], "agent", "{follow}");

    // declare_outcome replaces the executor's handoff: the Work completes.
    let (err, d) = mcp.tool(
        "declare_outcome",
        json!({"outcome": "completed", "summary": "fixed it"}),
    );
    assert!(!err, "{d}");
    end_turn(&run, "handoff");
    wait_for("the Work completed", || {
        (work_state(&suite, &work_id) == "completed").then_some(())
    });
    let ex = suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap();
    assert_eq!(ex["executions"][0]["result"]["summary"], "fixed it", "{ex}");

    // The attempt is over: its token no longer works.
    let (err, refused) = mcp.tool("read_context", json!({}));
    assert!(
        err && refused.as_str().unwrap().starts_with("unauthorized"),
        "{refused}"
    );

    // With schedulerd down, a call says the toolbelt is unreachable (not a timeout).
    suite.kill(Daemon::Schedulerd);
    let (err, down) = mcp.tool("read_context", json!({}));
    assert!(
        err && down.as_str().unwrap().starts_with("unreachable"),
        "{down}"
    );
}

/// `create_work` from a run whose binding has a sandbox: another binding with a
/// sandbox of the same type is fine; one without a sandbox, or with another type, is
/// refused `unauthorized` (naming both bindings and the rule) and makes no Work;
/// `allow_unconfined_create_work` on the caller's binding lets exactly the bindings
/// it names through. (The `agent` test executor launches no process, in a sandbox or
/// not: what is tested is the toolbelt's check of the configuration.)
#[test]
fn create_work_from_a_sandboxed_run_names_only_bindings_as_confined() {
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "agent".into(),
        manifest: oc_systest::agent::MANIFEST.into(),
        command: vec!["ext-agent".into()],
    });
    let suite = Suite::new(Path::new(BIN), "toolbelt-confined", &packages).unwrap();
    suite.start_all().unwrap();
    let turns = suite.dir.join("turns");
    std::fs::create_dir_all(&turns).unwrap();
    let bindings = |opt_in: Value| {
        let mut boxed = json!({"name": "boxed", "executor": "agent", "config": {"dir": turns},
                               "sandbox": {"type": "srt"}});
        if !opt_in.is_null() {
            boxed["allow_unconfined_create_work"] = opt_in;
        }
        json!([
            boxed,
            {"name": "same", "executor": "agent", "config": {"dir": turns},
             "sandbox": {"type": "srt", "config": {"allowed_domains": ["example.com"]}}},
            {"name": "open", "executor": "agent", "config": {"dir": turns}},
            {"name": "other", "executor": "agent", "config": {"dir": turns},
             "sandbox": {"type": "other-box"}}
        ])
    };
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "boxed", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = bindings(Value::Null);
    suite.apply_config(&c, HOOK).unwrap();
    assert_eq!(
        deliver(&suite, "t-1", br#"{"number": 5}"#).unwrap().status,
        200
    );
    let (_, record) = run_file(&turns, 0);
    let endpoint = record["toolbelt"]["endpoint"].as_str().unwrap().to_owned();
    let token_file = turns.join("token");
    std::fs::write(&token_file, record["toolbelt"]["token"].as_str().unwrap()).unwrap();
    let mut mcp = Mcp::start(&endpoint, &token_file);
    mcp.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}}),
    );
    let works_on = |binding: &str| -> Vec<Value> {
        let w = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        w["works"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["binding"] == binding)
            .cloned()
            .collect()
    };
    let create = |mcp: &mut Mcp, binding: &str, id: &str| {
        mcp.tool(
            "create_work",
            json!({"title": format!("on {binding}"), "binding": binding,
                   "keys": [format!("made:{id}")], "request_id": id}),
        )
    };

    // No sandbox, or another type: refused, and no Work.
    let (err, refused) = create(&mut mcp, "open", "c-open");
    let text = refused.as_str().unwrap_or_default().to_owned();
    assert!(err && text.starts_with("unauthorized"), "{refused}");
    assert!(
        text.contains("binding \"boxed\" of this run has a sandbox of type \"srt\"")
            && text.contains("binding \"open\" has no sandbox")
            && text.contains("allow_unconfined_create_work"),
        "{text}"
    );
    let (err, refused) = create(&mut mcp, "other", "c-other");
    let text = refused.as_str().unwrap_or_default().to_owned();
    assert!(err && text.starts_with("unauthorized"), "{refused}");
    assert!(text.contains("\"other-box\""), "{text}");
    // The same sandbox type: the Work is made there.
    let (err, made) = create(&mut mcp, "same", "c-same");
    assert!(!err, "{made}");
    wait_for("the Work on binding same", || {
        works_on("same").first().cloned()
    });
    assert!(works_on("open").is_empty() && works_on("other").is_empty());

    // The operator opts in for `open` alone.
    c["scopes"][0]["bindings"] = bindings(json!(["open"]));
    suite.apply_config(&c, HOOK).unwrap();
    let made = wait_for("create_work on open allowed", || {
        let (err, made) = create(&mut mcp, "open", "c-open-2");
        (!err).then_some(made)
    });
    assert!(made["event_id"].is_string(), "{made}");
    let open = wait_for("the Work on binding open", || {
        works_on("open").first().cloned()
    });
    assert_eq!(open["display"]["title"], "on open", "{open}");
    let (err, refused) = create(&mut mcp, "other", "c-other-2");
    assert!(
        err && refused.as_str().unwrap().starts_with("unauthorized"),
        "{refused}"
    );
    assert!(works_on("other").is_empty());
    // `config check` names an opt-in for a binding the scope does not have.
    c["scopes"][0]["bindings"] = bindings(json!(["gone"]));
    let file = suite.dir.join("opt-in.json");
    std::fs::write(&file, c.to_string()).unwrap();
    let (code, said) = cli(
        &suite,
        &["config", "check", "--no-extensions", file.to_str().unwrap()],
    );
    assert_ne!(code, 0, "{said}");
    assert!(
        said.contains(
            "/scopes/0/bindings/0/allow_unconfined_create_work/0: scope \"demo\" has no binding \"gone\""
        ),
        "{said}"
    );
}
