//! `ingress.reconcile`: the deliveries GitHub could not hand over, read back
//! from the webhook's delivery log.
//!
//! A scan finds the webhook delivering to the entry ([`crate::hooks::hook_id`]),
//! lists its recent deliveries newest first
//! (`GET /repos/{o}/{r}/hooks/{id}/deliveries`, `per_page` the page's `max_items`,
//! at most 100, paged by the `cursor` of the `Link` header) down to the
//! checkpoint (the newest delivery ID of the last complete scan), and for each
//! delivery that got no 2xx, whose GUID has no 2xx attempt on the same list page,
//! reads the delivery (`GET …/deliveries/{id}`: the request's headers and payload)
//! and returns it as an observation whose `delivery_id` is the delivery's GUID,
//! carrying the Event the webhook path would have made ([`crate::webhook::event_of`]:
//! events the entry does not take are skipped the same way). The GUID is the
//! identity the live delivery has, so the Event is kept once whether the original,
//! a redelivery or reconcile brings it. Nothing is redelivered (see
//! docs/decisions.md): the delivery record needs no working public URL.
//!
//! Every API failure fails the page, so nothing is inferred and the checkpoint
//! stays. The cursor is `v1:<hook>:<newest>:<skip>:<GitHub cursor>`: a page cut
//! short by `max_bytes` resumes on the same GitHub page past `skip` deliveries.

use std::collections::HashSet;

use protocol::wire::{IngressReconcileParams, IngressReconcileResult, Observation};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::api::{percent_encode, query_param};
use crate::config::EntryConfig;
use crate::hooks::explain;
use crate::webhook::{event_of, DELIVERY_HEADER, EVENT_HEADER, MAX_DELIVERY_ID_BYTES};
use crate::State;

/// GitHub's largest `per_page` for deliveries.
pub const MAX_PER_PAGE: u32 = 100;

/// Where a scan is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The hook the scan reads.
    pub hook_id: u64,
    /// The newest delivery ID seen so far (the next checkpoint).
    pub newest: u64,
    /// Deliveries of the GitHub page already handled.
    pub skip: usize,
    /// GitHub's cursor of the page (empty: the first).
    pub github: String,
}

impl Cursor {
    /// The wire form.
    pub fn encode(&self) -> String {
        format!(
            "v1:{}:{}:{}:{}",
            self.hook_id, self.newest, self.skip, self.github
        )
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Result<Cursor, RpcError> {
        let bad = || RpcError::invalid_params(format!("cursor {s:?} is not one this package made"));
        let mut parts = s.splitn(5, ':');
        if parts.next() != Some("v1") {
            return Err(bad());
        }
        let mut num = || {
            parts
                .next()
                .and_then(|p| p.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let hook_id = num()?;
        let newest = num()?;
        let skip = usize::try_from(num()?).map_err(|_| bad())?;
        let github = parts.next().ok_or_else(bad)?.to_string();
        Ok(Cursor {
            hook_id,
            newest,
            skip,
            github,
        })
    }
}

/// True when a delivery record got a 2xx.
fn delivered(d: &Value) -> bool {
    d["status_code"]
        .as_u64()
        .is_some_and(|s| (200..300).contains(&s))
}

/// A header of a delivery record's request, by case-insensitive name.
fn header<'a>(full: &'a Value, name: &str) -> Option<&'a str> {
    full.pointer("/request/headers")?
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_str())
}

/// The observation of one delivery record (`GET …/deliveries/{id}`), or `None`
/// for one the webhook path would not deliver either (a ping, an event the entry
/// does not take, another repository, an unreadable payload); `Err` for a record
/// that is not one.
pub fn observation(entry: &EntryConfig, full: &Value) -> Result<Option<Observation>, String> {
    let guid = full["guid"]
        .as_str()
        .or_else(|| header(full, DELIVERY_HEADER))
        .map(str::trim)
        .unwrap_or_default();
    if guid.is_empty()
        || guid.len() > MAX_DELIVERY_ID_BYTES
        || !guid.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "delivery {} has no usable guid (at most {MAX_DELIVERY_ID_BYTES} bytes)",
            full["id"]
        ));
    }
    let event = header(full, EVENT_HEADER)
        .or_else(|| full["event"].as_str())
        .map(str::trim)
        .unwrap_or_default();
    let Some(payload) = full.pointer("/request/payload").filter(|p| p.is_object()) else {
        eprintln!("github: reconcile: delivery {guid} has no JSON payload; skipped");
        return Ok(None);
    };
    if event.is_empty() || event == "ping" {
        return Ok(None);
    }
    match event_of(entry, event, guid, payload) {
        Ok(ev) => Ok(Some(Observation {
            item: guid.to_string(),
            version: "1".into(),
            delivery_id: guid.to_string(),
            events: vec![ev],
        })),
        Err(answer) => {
            eprintln!(
                "github: reconcile: delivery {guid} ({event}) skipped as the webhook path \
                 would ({}: {})",
                answer.status,
                String::from_utf8_lossy(&answer.body).trim()
            );
            Ok(None)
        }
    }
}

/// Serves one page of `ingress.reconcile`; its failure is also kept for doctor.
pub async fn page(
    state: &State,
    host: &sdk::Host,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let registry = state.registry();
    let entry = registry.entry_of_source(&p.source).ok_or_else(|| {
        RpcError::new(
            Code::NotFound,
            format!("source {:?} is not one of this package's entries", p.source),
        )
    })?;
    let result = scan(state, host, entry, p).await;
    match &result {
        Ok(r) if r.complete => state.note(&entry.source, crate::NOTE_RECONCILE, None),
        Ok(_) => {}
        Err(e) => {
            eprintln!("github: reconcile {}: {}", entry.source, e.message);
            state.note(
                &entry.source,
                crate::NOTE_RECONCILE,
                Some(e.message.clone()),
            );
        }
    }
    result
}

async fn scan(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let checkpoint: Option<u64> = match p.checkpoint.as_str() {
        "" => None,
        c => Some(c.parse().map_err(|_| {
            RpcError::invalid_params(format!("checkpoint {c:?} is not a delivery id"))
        })?),
    };
    let per_page = match p.max_items {
        0 => MAX_PER_PAGE,
        n => n.min(MAX_PER_PAGE),
    };
    let max_bytes = match p.max_bytes {
        0 => u64::MAX,
        n => n,
    };
    let client = state
        .client(host, &entry.scope_id, &entry.connection)
        .await?;
    let mut cur = if p.cursor.is_empty() {
        Cursor {
            hook_id: crate::hooks::hook_id(&client, host, entry).await?,
            ..Cursor::default()
        }
    } else {
        Cursor::parse(&p.cursor)?
    };
    let (owner, repo) = entry.owner_repo();
    let base = format!("/repos/{owner}/{repo}/hooks/{}/deliveries", cur.hook_id);
    let mut path = format!("{base}?per_page={per_page}");
    if !cur.github.is_empty() {
        path.push_str(&format!("&cursor={}", percent_encode(&cur.github)));
    }
    let listed = client
        .get_page(&path)
        .await
        .map_err(|e| explain(&e, entry, "listing the webhook's deliveries"))?;
    let Value::Array(list) = &listed.body else {
        return Err(RpcError::new(
            Code::Unavailable,
            format!("GET {path} answered no list"),
        ));
    };
    let ok_guids: HashSet<&str> = list
        .iter()
        .filter(|d| delivered(d))
        .filter_map(|d| d["guid"].as_str())
        .collect();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = IngressReconcileResult::default();
    let mut bytes = 0u64;
    let mut reached = false;
    for (i, d) in list.iter().enumerate().skip(cur.skip) {
        let id = d["id"].as_u64().ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                format!("GET {path}: a delivery without an id"),
            )
        })?;
        if checkpoint.is_some_and(|c| id <= c) {
            reached = true;
            break;
        }
        cur.newest = cur.newest.max(id);
        let guid = d["guid"].as_str().unwrap_or_default();
        if delivered(d) || ok_guids.contains(guid) || !seen.insert(guid) {
            continue;
        }
        let full = client
            .request("GET", &format!("{base}/{id}"), None)
            .await
            .map_err(|e| explain(&e, entry, &format!("reading delivery {id}")))?;
        let Some(o) =
            observation(entry, &full).map_err(|why| RpcError::new(Code::Unavailable, why))?
        else {
            continue;
        };
        let size = serde_json::to_vec(&o).map(|v| v.len()).unwrap_or(0) as u64;
        if bytes.saturating_add(size) > max_bytes {
            if out.items.is_empty() {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "delivery {id} is {size} bytes as an observation, over the page's \
                         max_bytes {max_bytes}"
                    ),
                ));
            }
            cur.skip = i;
            out.cursor = cur.encode();
            return Ok(out);
        }
        bytes += size;
        out.items.push(o);
    }
    match listed.next.as_deref() {
        Some(next) if !reached => {
            cur.github = query_param(next, "cursor").ok_or_else(|| {
                RpcError::new(
                    Code::Unavailable,
                    format!("the deliveries' next page ({next}) has no cursor"),
                )
            })?;
            cur.skip = 0;
            out.cursor = cur.encode();
        }
        _ => {
            out.complete = true;
            out.checkpoint = cur.newest.max(checkpoint.unwrap_or(0)).to_string();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let c = Cursor {
            hook_id: 7,
            newest: 99,
            skip: 3,
            github: "v1_1:2?x".into(),
        };
        assert_eq!(Cursor::parse(&c.encode()).ok(), Some(c));
        assert!(Cursor::parse("12").is_err());
        assert!(Cursor::parse("v1:a:1:1:").is_err());
    }

    #[test]
    fn only_a_2xx_counts_as_delivered() {
        assert!(delivered(&json!({"status_code": 202})));
        assert!(!delivered(&json!({"status_code": 0})));
        assert!(!delivered(&json!({"status_code": 502})));
        assert!(!delivered(&json!({})));
    }
}
