//! `work.admit` and the hours task: new Work of a scope with admission waits for a
//! person, or for the hours, before its first attempt; the task (`human.hours`)
//! settles the package's holds once nothing holds them any more (the hours opened,
//! or the scope's admission was taken away).

use crate::config::{Admission, HumanConfig};
use crate::{Registry, NAME};
use protocol::wire::{
    clip_line, Hold, StateWorksParams, Work, WorkAdmitResult, WorkSettleHoldParams,
    MAX_HOLD_REASON_BYTES,
};
use protocol::{CallError, RpcError};

/// The task that settles holds when the hours open.
pub const HOURS_TASK: &str = "human.hours";
/// Why Work admitted by a person waits.
pub const BY_PERSON: &str = "waiting for a person to admit it";
/// The state a held Work is listed in.
pub const HELD_STATE: &str = "pending";
/// The most pages of Works one pass reads per scope (of 1000 each).
const MAX_PAGES: usize = 100;

/// What `work.admit` answers under `config` at `now`: a hold for admission by a
/// person, a hold outside the hours, else nothing.
pub fn admission(config: &HumanConfig, now: jiff::Timestamp) -> WorkAdmitResult {
    let reason = match &config.admission {
        Admission::None => return WorkAdmitResult::default(),
        Admission::Person => BY_PERSON.to_string(),
        Admission::Hours(h) if h.is_open(now) => return WorkAdmitResult::default(),
        Admission::Hours(h) => format!("outside the hours of admission ({})", h.describe()),
    };
    WorkAdmitResult {
        hold: Some(Hold {
            reason: clip_line(&reason, MAX_HOLD_REASON_BYTES),
        }),
    }
}

/// Why the hours task lets a held Work of a scope under `config` through at `now`;
/// `None` while it stays held (a person admits it, or the hours are closed).
pub fn release(config: &HumanConfig, now: jiff::Timestamp) -> Option<String> {
    match &config.admission {
        Admission::None => Some("admitted: the scope no longer holds new Work".into()),
        Admission::Person => None,
        Admission::Hours(h) if h.is_open(now) => Some(clip_line(
            &format!("admitted: within the hours ({})", h.describe()),
            MAX_HOLD_REASON_BYTES,
        )),
        Admission::Hours(_) => None,
    }
}

/// The settlement key of the hours task's admission of `work`: one per Work (a Work
/// is held only before its first attempt).
pub fn release_key(work: &Work) -> String {
    format!("{NAME}/hours/{}", work.id)
}

/// One pass of [`HOURS_TASK`]: in each scope whose holds are released at `now`
/// ([`release`]), every Work held by this package is admitted (`work.settle_hold`).
/// A failed read or settlement is reported and the pass goes on.
pub async fn hours_pass(
    host: &sdk::Host,
    registry: &Registry,
    now: jiff::Timestamp,
) -> Result<protocol::wire::TaskRunResult, RpcError> {
    let mut admitted = 0usize;
    let mut failures: Vec<String> = Vec::new();
    for (scope, entry) in &registry.scopes {
        let Some(reason) = release(&entry.config, now) else {
            continue;
        };
        let mut after = String::new();
        for _ in 0..MAX_PAGES {
            let page = host
                .call_typed(&StateWorksParams {
                    scope_id: scope.clone(),
                    states: vec![HELD_STATE.to_string()],
                    after: after.clone(),
                    limit: 1000,
                    ..StateWorksParams::default()
                })
                .await;
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!(
                        "scope {scope}: listing held Work (state.works): {e}"
                    ));
                    break;
                }
            };
            for w in page
                .works
                .iter()
                .filter(|w| w.hold.as_ref().is_some_and(|h| h.owner == NAME))
            {
                let settle = WorkSettleHoldParams {
                    work_id: w.id.clone(),
                    admit: true,
                    reason: reason.clone(),
                    key: release_key(w),
                };
                match host.call_typed(&settle).await {
                    Ok(r) if r.settled => admitted += 1,
                    Ok(_) => {}
                    Err(e) => failures.push(describe_failure(scope, &w.id, &e)),
                }
            }
            if page.next.is_empty() {
                break;
            }
            after = page.next;
        }
    }
    for f in &failures {
        eprintln!("{NAME}: {HOURS_TASK}: {f}");
    }
    let mut detail = format!("admitted {admitted} held Work");
    if let Some(first) = failures.first() {
        detail.push_str(&format!("; {} failed, first: {first}", failures.len()));
    }
    Ok(protocol::wire::TaskRunResult { detail })
}

fn describe_failure(scope: &str, work: &str, e: &CallError) -> String {
    format!("scope {scope}: admitting Work {work} (work.settle_hold): {e}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn admission_holds_by_person_or_outside_the_hours() {
        let none = crate::config::parse_config(&json!({})).unwrap();
        assert_eq!(
            admission(&none, at("2026-10-26T03:00:00Z")),
            WorkAdmitResult::default()
        );
        assert!(release(&none, at("2026-10-26T03:00:00Z")).is_some());
        let person = crate::config::parse_config(&json!({"admission": {"by": "person"}})).unwrap();
        assert_eq!(
            admission(&person, at("2026-10-26T10:00:00Z"))
                .hold
                .unwrap()
                .reason,
            "waiting for a person to admit it"
        );
        assert_eq!(release(&person, at("2026-10-26T10:00:00Z")), None);
        let hours = crate::config::parse_config(&json!({"admission": {"hours":
            {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "to": "17:00"}}}))
        .unwrap();
        // Monday 10:00 UTC: through; Saturday: held.
        assert_eq!(
            admission(&hours, at("2026-10-26T10:00:00Z")),
            WorkAdmitResult::default()
        );
        assert_eq!(
            admission(&hours, at("2026-10-31T10:00:00Z"))
                .hold
                .unwrap()
                .reason,
            "outside the hours of admission (mon,tue,wed,thu,fri 09:00-17:00 UTC)"
        );
        assert_eq!(
            release(&hours, at("2026-10-26T10:00:00Z")).unwrap(),
            "admitted: within the hours (mon,tue,wed,thu,fri 09:00-17:00 UTC)"
        );
        assert_eq!(release(&hours, at("2026-10-31T10:00:00Z")), None);
    }
}
