//! People in the loop from the command line: `asks` lists what waits for a person
//! (agents' questions, operations waiting for approval, Work waiting for
//! admission) across every Work; `ask answer|approve|reject` and `work admit`
//! decide; `work actions` and `work act` reach every provider's actions. Each
//! decision goes through extrunner's `ext.act`, recorded as one `core.action.*`
//! Event naming the person as `cli:<user>`, with a key derived from what is decided
//! (`answer/<ask>`, `decision/<gate>`, `admit/<work>`), so deciding twice applies
//! once.

use std::path::Path;

use busapi::ext::{ActRequest, ActionsRequest};
use busapi::store::{WaitRow, WaitsRequest, WorksRequest};
use serde_json::{json, Value};

use crate::lookup::resolve_work;
use crate::output::{call, print_json, Failure, Out};

/// The most open Waits (and held Works) `asks` reads.
pub const MAX_LISTED: usize = 2000;
/// One page of the reads.
const PAGE: u32 = 200;

/// The person the CLI acts for: `cli:<user>`, the user who runs it (the one behind
/// `sudo`, when root runs it through sudo).
pub fn person() -> String {
    let uid = nix::unistd::getuid();
    let name = match std::env::var("SUDO_USER") {
        Ok(u) if uid.is_root() && !u.is_empty() => Some(u),
        _ => nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.name),
    };
    format!("cli:{}", name.unwrap_or_else(|| format!("uid{uid}")))
}

pub use busapi::people::Open;
use busapi::people::{from_hold, from_wait};

fn open_json(o: &Open) -> Value {
    json!(o)
}

/// What `work show` prints under an active Wait that is an ask or an approval: the
/// question, its choices and how to answer.
pub fn wait_lines(w: &WaitRow) -> Vec<String> {
    let Some(o) = from_wait(w, "") else {
        return Vec::new();
    };
    let mut out = vec![format!("{} {}: {}", o.kind, o.id, o.text)];
    for (i, c) in o.choices.iter().enumerate() {
        out.push(format!("  {}. {c}", i + 1));
    }
    out.push(match o.kind.as_str() {
        "ask" if o.choices.is_empty() => format!("answer: open-conduit ask answer {} TEXT", o.id),
        "ask" => format!("answer: open-conduit ask answer {} --choice N", o.id),
        _ => format!(
            "decide: open-conduit ask approve {0}  |  open-conduit ask reject {0} --reason WHY",
            o.id
        ),
    });
    out
}

/// The people's decisions on a Work (its `core.action.*` Events, oldest first), as
/// `work show` prints them: `event N: answer by cli:alice: answer=release-2.x`.
pub fn decisions(bus: &Path, work_id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    // A Work's Events are read a page at a time, at most MAX_LISTED of them.
    for _ in 0..(MAX_LISTED / PAGE as usize) {
        let Ok(page) = call(
            bus,
            &busapi::store::WorkEventsRequest {
                work_id: work_id.to_owned(),
                after,
                limit: Some(PAGE),
                scopes: None,
            },
        ) else {
            break;
        };
        out.extend(
            page.events
                .iter()
                .filter_map(busapi::people::decision)
                .map(|d| json!(d)),
        );
        if page.events.is_empty() || page.next_after <= after {
            break;
        }
        after = page.next_after;
    }
    out
}

/// One decision in a line.
pub fn decision_line(d: &Value) -> String {
    let mut line = format!(
        "event {}: {} by {}",
        d["seq"],
        d["action"].as_str().unwrap_or_default(),
        d["caller"].as_str().unwrap_or_default()
    );
    let fields: Vec<String> = d["decision"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v.as_str() {
            Some(t) => format!("{k}={}", t.replace('\n', " ")),
            None => format!("{k}={v}"),
        })
        .collect();
    if !fields.is_empty() {
        line.push_str(": ");
        line.push_str(&fields.join(", "));
    }
    line
}

/// Every open ask, approval and admission, oldest first within each kind.
pub fn open_items(bus: &Path) -> Result<Vec<Open>, Failure> {
    let mut out = Vec::new();
    let mut after = String::new();
    let mut read = 0;
    let mut scopes = std::collections::HashMap::<String, String>::new();
    loop {
        let page = call(
            bus,
            &WaitsRequest {
                state: Some("active".into()),
                after: after.clone(),
                limit: PAGE,
                ..WaitsRequest::default()
            },
        )?;
        read += page.waits.len();
        for w in &page.waits {
            if w.owner.is_empty() {
                continue;
            }
            if !scopes.contains_key(&w.work_id) {
                let scope = call(
                    bus,
                    &busapi::store::WorkGetRequest {
                        id: w.work_id.clone(),
                    },
                )
                .map(|r| r.work.scope_id)
                .unwrap_or_default();
                scopes.insert(w.work_id.clone(), scope);
            }
            let scope = scopes.get(&w.work_id).cloned().unwrap_or_default();
            out.extend(from_wait(w, &scope));
        }
        if page.next.is_empty() || read >= MAX_LISTED {
            break;
        }
        after = page.next;
    }
    let mut after = String::new();
    let mut read = 0;
    loop {
        let page = call(
            bus,
            &WorksRequest {
                state: Some("pending".into()),
                after: after.clone(),
                limit: PAGE,
                ..WorksRequest::default()
            },
        )?;
        read += page.works.len();
        out.extend(page.works.iter().filter_map(from_hold));
        if page.next.is_empty() || read >= MAX_LISTED {
            break;
        }
        after = page.next;
    }
    Ok(out)
}

/// `asks`: what waits for a person.
pub fn asks(bus: &Path, json_out: bool) -> Out {
    let items = open_items(bus)?;
    if json_out {
        print_json(&json!({"asks": items.iter().map(open_json).collect::<Vec<_>>()}));
        return Ok(());
    }
    if items.is_empty() {
        println!("nothing waits for a person");
        return Ok(());
    }
    for o in &items {
        println!(
            "{} {}  Work {}  scope {}  since {}",
            o.kind, o.id, o.work_id, o.scope_id, o.since
        );
        println!("  {}", o.text);
        for (i, c) in o.choices.iter().enumerate() {
            println!("  {}. {c}", i + 1);
        }
        if !o.due_at.is_empty() {
            println!("  until {}", o.due_at);
        }
        let how = match o.kind.as_str() {
            "ask" if o.choices.is_empty() => format!("open-conduit ask answer {} TEXT", o.id),
            "ask" => format!("open-conduit ask answer {} --choice N", o.id),
            "approval" => format!(
                "open-conduit ask approve {0}  |  open-conduit ask reject {0} --reason WHY",
                o.id
            ),
            _ => format!(
                "open-conduit work admit {}  |  open-conduit work reject {0} --reason WHY",
                o.id
            ),
        };
        println!("  → {how}");
    }
    Ok(())
}

/// The open ask or approval `id` (its whole ID), or a clear error.
fn find(bus: &Path, id: &str, kind: &str) -> Result<Open, Failure> {
    let items = open_items(bus)?;
    items
        .into_iter()
        .find(|o| o.kind == kind && o.id == id)
        .ok_or_else(|| {
            Failure::from(format!(
                "no open {kind} {id:?} (open-conduit asks lists them; one answered or timed out is closed)"
            ))
        })
}

fn act(bus: &Path, req: ActRequest, json_out: bool) -> Out {
    let r = call(bus, &req)?;
    if json_out {
        print_json(&json!(r));
    } else {
        println!("{} (event {})", r.message, r.event);
    }
    Ok(())
}

/// `ask answer ID TEXT | --choice N`.
pub fn answer(
    bus: &Path,
    id: &str,
    text: Option<String>,
    choice: Option<usize>,
    json_out: bool,
) -> Out {
    let ask = find(bus, id, "ask")?;
    let answer = match (text, choice) {
        (Some(t), None) => t,
        (None, Some(n)) => ask.choices.get(n.wrapping_sub(1)).cloned().ok_or_else(|| {
            Failure::from(format!(
                "--choice {n}: ask {id} offers {} choices (1 to {0})",
                ask.choices.len()
            ))
        })?,
        (Some(_), Some(_)) => {
            return Err("give the answer as TEXT or --choice N, not both"
                .to_owned()
                .into())
        }
        (None, None) => return Err("give the answer as TEXT or --choice N".to_owned().into()),
    };
    act(
        bus,
        ActRequest {
            work_id: ask.work_id,
            provider: ask.provider,
            action: "answer".into(),
            input: json!({"ask_id": ask.id, "answer": answer}),
            caller: person(),
            key: format!("answer/{}", ask.id),
        },
        json_out,
    )
}

/// `ask approve ID` and `ask reject ID --reason WHY`.
pub fn decide(bus: &Path, id: &str, approve: bool, reason: Option<String>, json_out: bool) -> Out {
    let gate = find(bus, id, "approval")?;
    let mut input = json!({"gate_id": gate.id});
    if let Some(r) = reason {
        input["reason"] = json!(r);
    }
    act(
        bus,
        ActRequest {
            work_id: gate.work_id,
            provider: gate.provider,
            action: if approve { "approve" } else { "reject" }.into(),
            input,
            caller: person(),
            key: format!("decision/{}", gate.id),
        },
        json_out,
    )
}

/// `work admit ID` and `work reject ID --reason WHY`: settle the Work's hold.
pub fn admit(bus: &Path, id: &str, admit: bool, reason: Option<String>, json_out: bool) -> Out {
    let id = resolve_work(bus, id)?;
    let work = call(bus, &busapi::store::WorkGetRequest { id: id.clone() })?.work;
    let Some(hold) = work.hold else {
        return Err(format!("Work {id} is not held for admission (it is {})", work.state).into());
    };
    let mut input = json!({});
    if let Some(r) = reason {
        input["reason"] = json!(r);
    }
    act(
        bus,
        ActRequest {
            work_id: id.clone(),
            provider: hold.owner,
            action: if admit { "admit" } else { "reject" }.into(),
            input,
            caller: person(),
            key: format!("admit/{id}"),
        },
        json_out,
    )
}

/// `work actions ID`: what every provider offers on the Work.
pub fn actions(bus: &Path, id: &str, json_out: bool) -> Out {
    let id = resolve_work(bus, id)?;
    let r = call(
        bus,
        &ActionsRequest {
            work_id: id.clone(),
        },
    )?;
    if json_out {
        print_json(&json!(r));
        return Ok(());
    }
    if r.actions.is_empty() {
        println!("no actions are offered on Work {id} now");
    }
    for a in &r.actions {
        let awaited = if a.offer.awaited { "  (awaited)" } else { "" };
        println!("{} {}  {}{awaited}", a.provider, a.offer.id, a.offer.label);
        if !a.offer.detail.is_empty() {
            println!("  {}", a.offer.detail);
        }
        if !a.offer.input.is_null() {
            println!("  input: {}", a.offer.input);
        }
    }
    Ok(())
}

/// `work act ID ACTION [--provider P] [--input JSON] [--key K]`.
pub fn work_act(
    bus: &Path,
    id: &str,
    action: &str,
    provider: Option<String>,
    input: Option<String>,
    key: Option<String>,
    json_out: bool,
) -> Out {
    let id = resolve_work(bus, id)?;
    let input: Value = match input {
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| Failure::from(format!("--input is not JSON: {e}")))?,
        None => Value::Null,
    };
    let key = match key {
        Some(k) => k,
        None => format!(
            "cli/{}",
            protocol::random::hex(8).map_err(|e| Failure::from(e.to_string()))?
        ),
    };
    act(
        bus,
        ActRequest {
            work_id: id,
            provider: provider.unwrap_or_default(),
            action: action.to_owned(),
            input,
            caller: person(),
            key,
        },
        json_out,
    )
}
