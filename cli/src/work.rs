//! The `work` commands: a Work named by a unique start of its ID, the list, one
//! Work shown with its attempts, inputs and Waits, its last attempt's log, and the
//! scheduler's controls (cancel, retry, interrupt).

use std::path::Path;

use busapi::sched::{CancelRequest, CancelResult, InterruptRequest, RetryRequest};
use busapi::store::{
    ArtifactGetRequest, ArtifactReadRequest, ExecutionsRequest, RoutingRequest, WaitsRequest,
    WorkGetRequest, WorkInputsRequest, WorksRequest,
};
use serde_json::{json, Value};

use crate::output::{call, paint, print_json, Failure, Out};

/// The Work states `work list --state` takes: the store's.
pub use busapi::store::WORK_STATES;

/// The most bytes of an artifact `work log` reads at once.
const LOG_CHUNK: u64 = 256 * 1024;

pub use crate::lookup::resolve_work;

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
        &WorksRequest {
            scope_id: scope,
            state,
            limit: 1000,
            ..WorksRequest::default()
        },
    )?;
    if json_out {
        // A listing is an array of objects; each Work also says `scope`.
        let list: Vec<Value> = w
            .works
            .iter()
            .map(|w| {
                let mut w = json!(w);
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
    for w in &w.works {
        let title = w.display.as_ref().map_or("", |d| d.title.as_str());
        println!(
            "{}  {} {:<10} {}",
            w.id,
            paint(&w.state, 10),
            w.scope_id,
            title
        );
    }
    Ok(())
}

/// `work show ID`: the Work, its attempts, its inputs and why each came.
pub fn work_show(bus: &Path, id: &str, json_out: bool) -> Out {
    let id = &resolve_work(bus, id)?;
    let work = call(bus, &WorkGetRequest { id: id.clone() })?.work;
    let ex = call(
        bus,
        &ExecutionsRequest {
            work_id: Some(id.clone()),
            ..ExecutionsRequest::default()
        },
    )?;
    let inputs = call(
        bus,
        &WorkInputsRequest {
            work_id: id.clone(),
            state: None,
            after: 0,
            limit: 0,
        },
    )?;
    let mut why = Vec::new();
    for i in &inputs.inputs {
        let r = call(bus, &RoutingRequest { seq: i.seq }).ok();
        why.push((i, r));
    }
    let waits = call(
        bus,
        &WaitsRequest {
            work_id: Some(id.clone()),
            ..WaitsRequest::default()
        },
    )
    .ok();
    if json_out {
        let inputs: Vec<Value> = why
            .iter()
            .map(|(i, r)| json!({"seq": i.seq, "state": i.state, "routing": r}))
            .collect();
        print_json(
            &json!({"work": work, "executions": ex.executions, "inputs": inputs,
                           "waits": waits.map(|w| w.waits),
                           "decisions": crate::asks::decisions(bus, id),
                           "workspaces": crate::resources::workspace_json(bus, id)}),
        );
        return Ok(());
    }
    println!("{}  {}", work.id, work.state);
    let display = work.display.unwrap_or_default();
    if !display.title.is_empty() {
        let t = &display.title;
        match Some(&display.reference).filter(|r| !r.is_empty()) {
            Some(r) => println!("  title:   {t} {r}"),
            None => println!("  title:   {t}"),
        }
    }
    println!(
        "  scope:   {}  binding: {}  kind: {}",
        work.scope_id, work.binding, work.kind
    );
    println!("  keys:    {}", json!(work.keys));
    println!("  failures: {}", work.failures);
    if let Some(hold) = &work.hold {
        println!(
            "  held:    {} ({}, since {}): open-conduit work admit {}",
            hold.reason, hold.owner, hold.held_at, work.id
        );
    }
    for line in crate::resources::workspace_lines(bus, id) {
        println!("{line}");
    }
    println!("attempts:");
    for e in &ex.executions {
        // The result is the executor's document: its summary and error, when given.
        let r = &e.result;
        println!(
            "  {} #{} epoch {} {}  {}{}",
            e.id,
            e.attempt,
            e.epoch,
            e.state,
            r["summary"].as_str().unwrap_or(""),
            r["error"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(|s| format!(" — {s}"))
                .unwrap_or_default()
        );
    }
    for w in waits.iter().flat_map(|w| &w.waits) {
        println!("wait {}: {} ({})", w.id, w.description, w.state);
        if !w.progress.is_empty() {
            println!("  progress: {}", w.progress);
        }
        if w.state == "active" {
            for line in crate::asks::wait_lines(w) {
                println!("  {line}");
            }
        }
    }
    let decisions = crate::asks::decisions(bus, id);
    if !decisions.is_empty() {
        println!("decisions:");
        for d in &decisions {
            println!("  {}", crate::asks::decision_line(d));
        }
    }
    println!("inputs:");
    for (i, r) in &why {
        let reasons: Vec<String> = r
            .iter()
            .flat_map(|r| &r.records)
            .map(|x| format!("{}: {}", x.handler, x.reason))
            .collect();
        println!(
            "  event {} ({}): {} — {}",
            i.seq,
            i.state,
            r.as_ref()
                .and_then(|r| r.disposition.as_deref())
                .unwrap_or(""),
            reasons.join("; ")
        );
    }
    Ok(())
}

/// `work log ID`: the artifacts of the Work's last attempt.
pub fn work_log(bus: &Path, id: &str) -> Out {
    let id = &resolve_work(bus, id)?;
    let ex = call(
        bus,
        &ExecutionsRequest {
            work_id: Some(id.clone()),
            ..ExecutionsRequest::default()
        },
    )?;
    let Some(last) = ex.executions.last() else {
        return Err(format!("Work {id} has no attempt yet").into());
    };
    // The executor's result names the artifacts it wrote.
    for a in last.result["artifacts"].as_array().into_iter().flatten() {
        let aid = a.as_str().unwrap_or_default();
        let name = call(
            bus,
            &ArtifactGetRequest {
                artifact_id: aid.to_owned(),
            },
        )
        .map_or_else(|_| "artifact".to_owned(), |m| m.name);
        println!("--- {name} ({aid})");
        let mut offset = 0u64;
        loop {
            let r = call(
                bus,
                &ArtifactReadRequest {
                    artifact_id: aid.to_owned(),
                    offset,
                    length: LOG_CHUNK,
                },
            )?;
            offset += r.data.len() as u64;
            print!("{}", String::from_utf8_lossy(&r.data));
            if r.eof || r.data.is_empty() {
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
    let request = CancelRequest {
        work_id: id.clone(),
        reason: reason.to_owned(),
    };
    println!("{}", cancel_said(id, &call(bus, &request)?));
    Ok(())
}

/// What `work cancel` prints of `sched.cancel`'s answer `r`.
fn cancel_said(id: &str, r: &CancelResult) -> String {
    let state = Some(r.state.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("cancelled");
    let Some(a) = &r.attempt else {
        return format!("{id}: {state} (no attempt was running)");
    };
    let (execution, host, detail) = (&a.execution_id, &a.host, &a.detail);
    if a.stopped {
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
    let request = RetryRequest {
        work_id: id.clone(),
        reason: reason.to_owned(),
        seq: None,
    };
    let r = call(bus, &request)?;
    let inputs: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
    println!(
        "{id}: {} (was {}); its next attempt takes event {}",
        r.state,
        r.was,
        inputs.join(", ")
    );
    Ok(())
}

/// `work interrupt ID`.
pub fn work_interrupt(bus: &Path, id: &str, reason: &str) -> Out {
    let id = &resolve_work(bus, id)?;
    let request = InterruptRequest {
        work_id: id.clone(),
        reason: reason.to_owned(),
    };
    let r = call(bus, &request)?;
    println!("{id}: interrupted execution {}", r.execution_id);
    Ok(())
}
