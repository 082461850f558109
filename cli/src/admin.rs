//! The admin commands: each one a few calls through the broker, printed for a person
//! (or, with `--json`, as the JSON the daemons answered).
//!
//! The bus socket is found at `--bus PATH`, else `$OPEN_CONDUIT_BUS`, else the packaged
//! path (`/run/open-conduit/bus.sock`); `open-conduit up` prints the one it uses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

pub use crate::doctor::{diagnose, doctor};
pub use crate::output::{
    bus_path, call, count, paint, print_json, text, verdict, Failure, Out, Verdict, DEFAULT_BUS,
};

/// The Work states `work list --state` takes.
pub const WORK_STATES: [&str; 8] = [
    "pending",
    "running",
    "waiting",
    "woken",
    "idle",
    "completed",
    "failed",
    "cancelled",
];

/// The Work `id` names: itself, or the one Work whose ID starts with it (with or
/// without `work_`), as git takes a unique prefix of a commit.
pub fn resolve_work(bus: &Path, id: &str) -> Result<String, Failure> {
    if call(bus, "store.work_get", json!({ "id": id })).is_ok() {
        return Ok(id.to_owned());
    }
    let prefix = if id.starts_with("work_") {
        id.to_owned()
    } else {
        format!("work_{id}")
    };
    // IDs are paged in order: those with the prefix come right after it.
    let page = call(bus, "store.works", json!({"after": prefix, "limit": 2}))?;
    let found: Vec<String> = page["works"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["id"].as_str())
        .filter(|w| w.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    match found.as_slice() {
        _ if id.trim_start_matches("work_").len() < 4 => {
            Err(format!("no such Work {id} (a shortened ID needs at least 4 characters)").into())
        }
        [one] => Ok(one.clone()),
        [] => Err(format!("no such Work {id}").into()),
        _ => Err(format!("{id} is the start of more than one Work: give more of its ID").into()),
    }
}

/// A daemon's last `STATUS=` line: under `up`, the file it keeps beside the bus
/// socket; under systemd, the unit's `StatusText`.
fn last_status(bus: &Path, daemon: &str) -> Option<String> {
    if let Some(run) = bus.parent() {
        if let Ok(t) = std::fs::read_to_string(run.join(format!("{daemon}.status"))) {
            return Some(t.trim().to_owned()).filter(|t| !t.is_empty());
        }
    }
    let out = std::process::Command::new("systemctl")
        .args(["show", "-p", "StatusText", "--value"])
        .arg(format!("open-conduit-{daemon}.service"))
        .output()
        .ok()?;
    let t = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !t.is_empty()).then_some(t)
}

/// `status`: the daemons, the extensions, Work by state, where webhooks are accepted.
/// Exits 3 when a daemon or an extension is down.
pub fn status(bus: &Path, json_out: bool) -> Out {
    let broker = call(bus, "bus.status", json!({}))?;
    let services = &broker["services"];
    let mut down = Vec::new();
    let ext = call(bus, "ext.list", json!({})).unwrap_or(Value::Null);
    let sched = call(bus, "sched.status", json!({})).unwrap_or(Value::Null);
    let routes = call(bus, "ingress.routes", json!({})).unwrap_or(Value::Null);
    let tunnel = call(bus, "store.tunnel_get", json!({})).unwrap_or(Value::Null)["tunnel"].clone();
    // The hosts sharing the store (one, unless several run one suite on PostgreSQL).
    let hosts =
        call(bus, "store.hosts", json!({"limit": 100})).unwrap_or(Value::Null)["hosts"].clone();
    let mut counts = serde_json::Map::new();
    for state in [
        "pending",
        "running",
        "waiting",
        "woken",
        "idle",
        "completed",
        "failed",
    ] {
        let works =
            call(bus, "store.works", json!({"state": state, "limit": 1000})).unwrap_or(Value::Null);
        let n = works["works"].as_array().map_or(0, Vec::len);
        counts.insert(state.to_owned(), json!(n));
    }
    for d in ["storaged", "extrunner", "schedulerd", "ingressd"] {
        if services[d].is_null() {
            down.push(d.to_owned());
        }
    }
    for e in ext["extensions"].as_array().into_iter().flatten() {
        if e["state"] != "running" {
            down.push(format!("extension {}", text(e, "name")));
        } else if e["refusal"].is_string() {
            down.push(format!(
                "extension {} refuses the configuration",
                text(e, "name")
            ));
        }
    }
    if json_out {
        print_json(
            &json!({"services": services, "extensions": ext["extensions"],
                           "router": sched["router"], "work": counts,
                           "routes": routes["routes"], "tunnel": tunnel, "hosts": hosts,
                           "down": down}),
        );
    } else {
        println!("daemons:");
        let mut daemons = vec!["broker", "storaged", "extrunner", "schedulerd", "ingressd"];
        if !services["tunneld"].is_null() {
            daemons.push("tunneld");
        }
        for d in daemons {
            let s = &services[d];
            if d == "broker" {
                let status = last_status(bus, d)
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default();
                println!(
                    "  {d:<11} up, pid {}, {:.0} s{status}",
                    broker["pid"],
                    broker["uptime_s"].as_f64().unwrap_or(0.0)
                );
            } else if s.is_null() {
                println!("  {d:<11} DOWN");
            } else {
                let status = last_status(bus, d)
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default();
                println!(
                    "  {d:<11} up, pid {}, {:.0} s{status}",
                    s["pid"],
                    s["uptime_s"].as_f64().unwrap_or(0.0)
                );
            }
        }
        println!("extensions:");
        for e in ext["extensions"].as_array().into_iter().flatten() {
            println!(
                "  {:<11} {} {} (restarts {}){}",
                text(e, "name"),
                text(e, "version"),
                text(e, "state"),
                e["restarts"],
                e["refusal"]
                    .as_str()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        let counts: Vec<String> = counts
            .iter()
            .filter(|(_, n)| n.as_u64() != Some(0))
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        println!(
            "work: {}",
            if counts.is_empty() {
                "none".to_owned()
            } else {
                counts.join(", ")
            }
        );
        let hosts = hosts.as_array().cloned().unwrap_or_default();
        if hosts.len() > 1 {
            println!("hosts (sharing the database):");
            for h in &hosts {
                let alive = if h["alive"] == true {
                    "alive".to_owned()
                } else {
                    format!(
                        "GONE since {}",
                        protocol::time::format_rfc3339_ms(h["expires_ms"].as_i64().unwrap_or(0))
                    )
                };
                println!(
                    "  {} {} {alive}, {} running",
                    text(h, "id"),
                    text(h, "name"),
                    h["running"]
                );
            }
        }
        println!("webhooks:");
        if tunnel.is_object() {
            let url = text(&tunnel, "url");
            if url.is_empty() {
                let reason = text(&tunnel, "reason");
                println!(
                    "  public URL: none (the {} tunnel is down{})",
                    text(&tunnel, "provider"),
                    if reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {reason}")
                    }
                );
            } else {
                println!(
                    "  public URL: {url} (the {} tunnel)",
                    text(&tunnel, "provider")
                );
            }
        }
        for r in routes["routes"].as_array().into_iter().flatten() {
            println!("  {} ({})", text(r, "path"), text(r, "owner"));
        }
    }
    if down.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            message: format!("down: {}", down.join(", ")),
            status: 3,
        })
    }
}

/// `config check FILE`: offline, every problem with its JSON pointer. With
/// `extensions` (a configuration directory), the packages whose types the document
/// uses, bundled and installed there, are started to check their own objects
/// ([`extrunner::offline`]).
pub fn config_check(file: &Path, extensions: Option<&Path>) -> Out {
    let doc = read_json(file)?;
    let config = match protocol::config::Config::parse(&doc) {
        Ok(c) => c,
        Err(problems) => {
            for p in &problems {
                println!("{}: {}: {}", file.display(), p.pointer, p.message);
            }
            return Err(Failure {
                message: count(problems.len(), "problem"),
                status: 1,
            });
        }
    };
    let mut findings: Vec<extrunner::offline::Finding> =
        protocol::config::Config::unknown_fields(&doc)
            .into_iter()
            .map(|p| extrunner::offline::Finding {
                pointer: p.pointer,
                code: "unknown_field".into(),
                message: p.message,
                warning: true,
            })
            .collect();
    if let Some(dir) = extensions {
        findings.extend(offline_findings(&config, dir)?);
    }
    let errors = findings.iter().filter(|f| !f.warning).count();
    for f in &findings {
        let level = if f.warning { "warning: " } else { "" };
        // A package's message may start with its own pointer, which the full one
        // already ends with: print it once.
        let message = match f.message.split_once(": ") {
            Some((p, rest)) if p.starts_with('/') && f.pointer.ends_with(p) => rest,
            _ => f.message.as_str(),
        };
        println!(
            "{}: {}: {level}{message} ({})",
            file.display(),
            f.pointer,
            f.code
        );
    }
    if errors > 0 {
        return Err(Failure {
            message: count(errors, "problem"),
            status: 1,
        });
    }
    println!(
        "{}: ok ({} connections, {} scopes)",
        file.display(),
        config.connections.len(),
        config.scopes.len()
    );
    Ok(())
}

/// Start the packages `config` uses (bundled, and installed under `config_dir`) for
/// `validate` alone, under a scratch directory removed afterwards.
fn offline_findings(
    config: &protocol::config::Config,
    config_dir: &Path,
) -> Result<Vec<extrunner::offline::Finding>, Failure> {
    let scratch = std::env::temp_dir().join(format!("open-conduit-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let bundled = scratch.join("bundled");
    crate::up::write_bundled_to(&bundled, &exe)?;
    let discovery =
        extrunner::discovery::discover(&config_dir.join("extensions"), Some(bundled.as_path()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let findings = rt.block_on(extrunner::offline::validate(config, &discovery, &scratch));
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(findings)
}

fn read_json(file: &Path) -> Result<Value, Failure> {
    let text = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    serde_json::from_slice(&text)
        .map_err(|e| Failure::from(format!("{}: not JSON: {e}", file.display())))
}

/// `config apply FILE`: checked, then stored as a new generation.
pub fn config_apply(bus: &Path, file: &Path, config_dir: &Path) -> Out {
    config_check(file, Some(config_dir))?;
    let doc = read_json(file)?;
    let a = call(bus, "store.config_apply", json!({ "config": doc }))?;
    if a["changed"] == true {
        println!(
            "applied as generation {} ({})",
            a["generation"],
            text(&a, "hash")
        );
    } else {
        println!("unchanged: generation {} is the same", a["generation"]);
    }
    Ok(())
}

/// `config show`: the stored configuration; secret references shown by name only.
pub fn config_show(bus: &Path) -> Out {
    let mut c = call(bus, "store.config_current", json!({}))?;
    for conn in c["config"]["connections"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if let Some(refs) = conn["secret_refs"].as_object_mut() {
            for v in refs.values_mut() {
                *v = json!("(set)");
            }
        }
    }
    print_json(&c);
    Ok(())
}

/// `extension list`.
pub fn extension_list(bus: &Path, json_out: bool) -> Out {
    let ext = call(bus, "ext.list", json!({}))?;
    if json_out {
        print_json(&ext["extensions"]);
        return Ok(());
    }
    for e in ext["extensions"].as_array().into_iter().flatten() {
        println!(
            "{:<12} {:<8} {} {:<9} restarts {}{}",
            text(e, "name"),
            text(e, "version"),
            paint(text(e, "state"), 10),
            text(e, "origin"),
            e["restarts"],
            e["refusal"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    for r in ext["reports"].as_array().into_iter().flatten() {
        println!("not offered: {}", text(r, "message"));
    }
    Ok(())
}

/// `extension inspect NAME`.
pub fn extension_inspect(bus: &Path, name: &str) -> Out {
    print_json(&call(bus, "ext.inspect", json!({ "name": name }))?);
    Ok(())
}

/// `extension restart NAME`.
pub fn extension_restart(bus: &Path, name: &str) -> Out {
    let r = call(bus, "ext.restart", json!({ "name": name }))?;
    println!("{name}: {}", text(&r, "state"));
    Ok(())
}

/// `work list`.
pub fn work_list(bus: &Path, scope: Option<String>, state: Option<String>, json_out: bool) -> Out {
    if let Some(s) = &state {
        if !WORK_STATES.contains(&s.as_str()) {
            return Err(Failure {
                message: format!("no Work state {s:?} (one of {})", WORK_STATES.join(", ")),
                status: 2,
            });
        }
    }
    let w = call(
        bus,
        "store.works",
        json!({"scope_id": scope, "state": state, "limit": 1000}),
    )?;
    if json_out {
        // A listing is an array of objects; each Work also says `scope`.
        let list: Vec<Value> = w["works"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| {
                let mut w = w.clone();
                if let Some(o) = w.as_object_mut() {
                    let scope = o.get("scope_id").cloned().unwrap_or(Value::Null);
                    o.insert("scope".into(), scope);
                }
                w
            })
            .collect();
        print_json(&json!(list));
        return Ok(());
    }
    for w in w["works"].as_array().into_iter().flatten() {
        let title = w["display"]["title"].as_str().unwrap_or("");
        println!(
            "{}  {} {:<10} {}",
            text(w, "id"),
            paint(text(w, "state"), 10),
            text(w, "scope_id"),
            title
        );
    }
    Ok(())
}

/// `work show ID`: the Work, its attempts, its inputs and why each came.
pub fn work_show(bus: &Path, id: &str, json_out: bool) -> Out {
    let id = &resolve_work(bus, id)?;
    let work = call(bus, "store.work_get", json!({ "id": id }))?["work"].clone();
    let ex = call(bus, "store.executions", json!({ "work_id": id }))?;
    let inputs = call(bus, "store.work_inputs", json!({ "work_id": id }))?;
    let mut why = Vec::new();
    for i in inputs["inputs"].as_array().into_iter().flatten() {
        let r = call(bus, "store.routing", json!({"seq": i["seq"]})).unwrap_or(Value::Null);
        why.push(json!({"seq": i["seq"], "state": i["state"], "routing": r}));
    }
    let waits = call(bus, "store.waits", json!({ "work_id": id })).unwrap_or(Value::Null);
    if json_out {
        print_json(
            &json!({"work": work, "executions": ex["executions"], "inputs": why,
                           "waits": waits["waits"],
                           "workspaces": crate::resources::workspace_json(bus, id)}),
        );
        return Ok(());
    }
    println!("{}  {}", text(&work, "id"), text(&work, "state"));
    if let Some(t) = work["display"]["title"].as_str() {
        match work["display"]["ref"].as_str().filter(|r| !r.is_empty()) {
            Some(r) => println!("  title:   {t} {r}"),
            None => println!("  title:   {t}"),
        }
    }
    println!(
        "  scope:   {}  binding: {}  kind: {}",
        text(&work, "scope_id"),
        text(&work, "binding"),
        text(&work, "kind")
    );
    println!("  keys:    {}", work["keys"]);
    println!("  failures: {}", work["failures"]);
    for line in crate::resources::workspace_lines(bus, id) {
        println!("{line}");
    }
    println!("attempts:");
    for e in ex["executions"].as_array().into_iter().flatten() {
        let r = &e["result"];
        println!(
            "  {} #{} epoch {} {}  {}{}",
            text(e, "id"),
            e["attempt"],
            e["epoch"],
            text(e, "state"),
            r["summary"].as_str().unwrap_or(""),
            r["error"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(|s| format!(" — {s}"))
                .unwrap_or_default()
        );
    }
    for w in waits["waits"].as_array().into_iter().flatten() {
        println!(
            "wait {}: {} ({})",
            text(w, "id"),
            text(w, "description"),
            text(w, "state")
        );
        if let Some(p) = w["progress"].as_str().filter(|p| !p.is_empty()) {
            println!("  progress: {p}");
        }
    }
    println!("inputs:");
    for i in &why {
        let r = &i["routing"];
        let reasons: Vec<String> = r["records"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| format!("{}: {}", text(x, "handler"), text(x, "reason")))
            .collect();
        println!(
            "  event {} ({}): {} — {}",
            i["seq"],
            text(i, "state"),
            text(r, "disposition"),
            reasons.join("; ")
        );
    }
    Ok(())
}

/// `work log ID`: the artifacts of the Work's last attempt.
pub fn work_log(bus: &Path, id: &str) -> Out {
    let id = &resolve_work(bus, id)?;
    let ex = call(bus, "store.executions", json!({ "work_id": id }))?;
    let Some(last) = ex["executions"].as_array().and_then(|a| a.last()).cloned() else {
        return Err(format!("Work {id} has no attempt yet").into());
    };
    for a in last["result"]["artifacts"].as_array().into_iter().flatten() {
        let aid = a.as_str().unwrap_or_default();
        let meta =
            call(bus, "store.artifact_get", json!({ "artifact_id": aid })).unwrap_or(Value::Null);
        println!(
            "--- {} ({aid})",
            meta["name"].as_str().unwrap_or("artifact")
        );
        let mut offset = 0u64;
        loop {
            let r = call(
                bus,
                "store.artifact_read",
                json!({"artifact_id": aid, "offset": offset, "length": 256 * 1024}),
            )?;
            let data = protocol::b64::decode(r["data"].as_str().unwrap_or_default())
                .map_err(|e| format!("artifact {aid}: {e}"))?;
            offset += data.len() as u64;
            print!("{}", String::from_utf8_lossy(&data));
            if r["eof"] == true || data.is_empty() {
                break;
            }
        }
    }
    Ok(())
}

/// `work cancel ID`: `sched.cancel`, which stops the Work's running attempt (when it
/// runs on the host schedulerd answers for) before it cancels the Work. Says whether
/// the run was stopped, or plainly that it may still be running and where.
pub fn work_cancel(bus: &Path, id: &str, reason: &str) -> Out {
    let id = &resolve_work(bus, id)?;
    let r = call(
        bus,
        "sched.cancel",
        json!({"work_id": id, "reason": reason}),
    )?;
    println!("{}", cancel_said(id, &r));
    Ok(())
}

/// What `work cancel` prints of `sched.cancel`'s answer `r`.
fn cancel_said(id: &str, r: &Value) -> String {
    let state = r["state"].as_str().unwrap_or("cancelled");
    let a = &r["attempt"];
    if a.is_null() {
        return format!("{id}: {state} (no attempt was running)");
    }
    let (execution, host, detail) = (text(a, "execution_id"), text(a, "host"), text(a, "detail"));
    if a["stopped"] == true {
        format!("{id}: {state}; its running attempt {execution} was stopped first on host {host}: {detail}")
    } else {
        format!(
            "{id}: {state}, but its run may still be running: attempt {execution} on host {host} \
             was not stopped: {detail}"
        )
    }
}

/// `work retry ID`: `sched.retry`: a failed or cancelled Work is reopened with the
/// inputs it ended with, an idle or completed one gets a new turn on its latest
/// input; one that runs, waits or is queued already is refused (`conflict`).
pub fn work_retry(bus: &Path, id: &str, reason: &str) -> Out {
    let id = &resolve_work(bus, id)?;
    let r = call(bus, "sched.retry", json!({"work_id": id, "reason": reason}))?;
    let inputs: Vec<String> = r["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    println!(
        "{id}: {} (was {}); its next attempt takes event {}",
        text(&r, "state"),
        text(&r, "was"),
        inputs.join(", ")
    );
    Ok(())
}

/// `work interrupt ID`.
pub fn work_interrupt(bus: &Path, id: &str, reason: &str) -> Out {
    let id = &resolve_work(bus, id)?;
    let r = call(
        bus,
        "sched.interrupt",
        json!({"work_id": id, "reason": reason}),
    )?;
    println!("{id}: interrupted execution {}", text(&r, "execution_id"));
    Ok(())
}

/// `events`: the log, a page at a time; with `follow`, forever.
///
/// With `--json`: a JSON array written a page at a time (so memory stays bounded);
/// with `--follow` too, one JSON object per line, as events arrive.
pub fn events(bus: &Path, after: i64, follow: bool, json_out: bool) -> Out {
    let mut after = after;
    let array = json_out && !follow;
    let mut first = true;
    if array {
        print!("[");
    }
    loop {
        let page = call(bus, "store.events", json!({"after": after, "limit": 200}))?;
        let list = page["events"].as_array().cloned().unwrap_or_default();
        for e in &list {
            after = after.max(e["seq"].as_i64().unwrap_or(after));
            if array {
                print!("{}\n{e}", if first { "" } else { "," });
                first = false;
            } else if json_out {
                println!("{e}");
            } else {
                println!(
                    "{:>6} {} {:<10} {:<28} {} {}",
                    e["seq"],
                    text(e, "accepted_at"),
                    text(e, "scope_id"),
                    text(e, "type"),
                    text(e, "source"),
                    text(e, "delivery_id")
                );
            }
        }
        if list.is_empty() {
            if !follow {
                if array {
                    println!("]");
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// `route --trace SCOPE`: how each route would decide an event (from a file, or
/// built from `--type` and `--key`).
pub fn route_trace(bus: &Path, scope: &str, event: Value) -> Out {
    let r = call(
        bus,
        "sched.route_trace",
        json!({"scope_id": scope, "event": event}),
    )?;
    for rec in r["records"].as_array().into_iter().flatten() {
        println!(
            "{:<10} {:<8} {} — {}",
            text(rec, "handler"),
            if rec["matched"] == true {
                "matched"
            } else {
                "no"
            },
            text(rec, "binding"),
            text(rec, "reason")
        );
    }
    println!("outcome: {}", r["outcome"]);
    Ok(())
}

/// The daemons `logs` knows.
pub const COMPONENTS: [&str; 5] = ["broker", "storaged", "extrunner", "schedulerd", "ingressd"];

/// `logs [COMPONENT]`: under `up` (the bus is `<state>/run/bus.sock` and
/// `<state>/logs/` exists), the log files `up` writes; otherwise the journal
/// (`journalctl -u open-conduit-<component>`, or every unit of the suite).
pub fn logs(bus: &Path, component: Option<&str>, lines: usize) -> Out {
    if let Some(c) = component {
        if !COMPONENTS.contains(&c) {
            return Err(Failure {
                message: format!("no component {c:?} (one of {})", COMPONENTS.join(", ")),
                status: 1,
            });
        }
    }
    let state = bus.parent().and_then(Path::parent);
    let dir = state.map(|s| s.join("logs")).filter(|d| d.is_dir());
    if let Some(dir) = dir {
        let wanted: Vec<&str> = component.map_or(COMPONENTS.to_vec(), |c| vec![c]);
        for c in wanted {
            let path = dir.join(format!("{c}.log"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            for l in &all[from..] {
                println!("{c:>10} | {l}");
            }
        }
        return Ok(());
    }
    let mut cmd = std::process::Command::new("journalctl");
    cmd.args(["--no-pager", "-n", &lines.to_string()]);
    match component {
        Some(c) => {
            cmd.arg("-u").arg(format!("open-conduit-{c}.service"));
        }
        None => {
            for c in COMPONENTS {
                cmd.arg("-u").arg(format!("open-conduit-{c}.service"));
            }
        }
    }
    let status = cmd.status().map_err(|e| {
        format!(
            "journalctl: {e} (is this a systemd machine? under `up`, point --bus at its socket)"
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("journalctl: {status}").into())
    }
}

/// The configuration directory: the flag, else `<state>/etc` when the bus is `up`'s
/// (`<state>/run/bus.sock`), else the packaged `/etc/open-conduit`.
pub fn config_dir(flag: Option<PathBuf>, bus: &Path) -> PathBuf {
    if let Some(d) = flag {
        return d;
    }
    if let Some(state) = bus.parent().and_then(Path::parent) {
        let etc = state.join("etc");
        if bus.ends_with("run/bus.sock") && etc.is_dir() {
            return etc;
        }
    }
    PathBuf::from("/etc/open-conduit")
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dest)
                .map_err(|e| format!("{}: {e}", entry.path().display()))?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(entry.path()).map_err(|e| e.to_string())?;
            std::os::unix::fs::symlink(target, &dest).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// `extension install DIR`: the package's manifest is checked offline, then the
/// directory is copied to `<config dir>/extensions/<name>` (staged under a hidden name
/// and renamed, so extrunner never sees half a package). It replaces a bundled package
/// of the same name; extrunner loads it at its next start.
pub fn extension_install(config_dir: &Path, dir: &Path) -> Out {
    // Checked as extrunner will (but for the directory's name: the copy takes the
    // manifest's).
    let file = dir.join(protocol::manifest::MANIFEST_FILE);
    let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let manifest = protocol::manifest::parse_manifest(&bytes)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let root = config_dir.join("extensions");
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let dest = root.join(&manifest.name);
    let staging = root.join(format!(".{}.installing", manifest.name));
    let _ = std::fs::remove_dir_all(&staging);
    copy_tree(dir, &staging)?;
    let old = root.join(format!(".{}.old", manifest.name));
    let _ = std::fs::remove_dir_all(&old);
    if dest.exists() {
        std::fs::rename(&dest, &old).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    std::fs::rename(&staging, &dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    println!(
        "installed {} {} in {}; restart extrunner to load it (`systemctl restart open-conduit-extrunner`, or restart `open-conduit up`)",
        manifest.name,
        manifest.version,
        dest.display()
    );
    Ok(())
}

/// `extension remove NAME`: removes an installed package (a bundled one of the same
/// name comes back at extrunner's next start).
pub fn extension_remove(config_dir: &Path, name: &str) -> Out {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(Failure {
            message: format!("{name:?} is not a package name"),
            status: 2,
        });
    }
    let dest = config_dir.join("extensions").join(name);
    if !dest.is_dir() {
        return Err(format!("no installed package {name} in {}", dest.display()).into());
    }
    std::fs::remove_dir_all(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    println!(
        "removed {name} from {}; restart extrunner for it to take effect",
        dest.display()
    );
    Ok(())
}
