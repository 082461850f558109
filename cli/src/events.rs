//! The event log (`events`, a page at a time or following it) and how each route
//! would decide an event (`route --trace`).

use std::path::Path;
use std::time::Duration;

use busapi::sched::{RouteTraceRequest, TraceEvent};
use busapi::store::EventsListRequest;
use busapi::Call;
use serde_json::{json, Value};

use crate::output::{call, call_json, decode, Out};

/// The most events one page of `events` asks for.
const EVENTS_PAGE: u32 = 200;

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
        let list = call(
            bus,
            &EventsListRequest {
                after,
                limit: Some(EVENTS_PAGE),
                scopes: None,
            },
        )?
        .events;
        for e in &list {
            after = after.max(e.seq);
            if array {
                print!("{}\n{}", if first { "" } else { "," }, json!(e));
                first = false;
            } else if json_out {
                println!("{}", json!(e));
            } else {
                // The sequence as it has always been printed: not padded.
                println!(
                    "{} {} {:<10} {:<28} {} {}",
                    e.seq,
                    e.accepted_at,
                    e.scope_id,
                    e.event_type,
                    e.source,
                    e.delivery_id.as_deref().unwrap_or("")
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
    // Refused as schedulerd refuses params that do not decode.
    let event: TraceEvent = serde_json::from_value(event)
        .map_err(|e| format!("{}: invalid params: {e}", RouteTraceRequest::METHOD))?;
    let request = RouteTraceRequest {
        scope_id: scope.to_owned(),
        event,
    };
    let answer = call_json(bus, &request)?;
    let trace = decode::<RouteTraceRequest>(answer.clone())?;
    for rec in &trace.records {
        println!(
            "{:<10} {:<8} {} — {}",
            rec.handler,
            if rec.matched { "matched" } else { "no" },
            rec.binding,
            rec.reason
        );
    }
    // The decision as schedulerd wrote it.
    println!("outcome: {}", answer["outcome"]);
    Ok(())
}
