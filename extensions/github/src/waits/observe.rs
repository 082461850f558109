//! What GitHub shows of a wait's condition: before the wait (the head commit and its
//! pending check runs, the newest review or comment), and on each look of the task
//! (the checks' progress, a new review, a reply that is not the bot's own).

use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};

use super::{newest_id, Kind, PendingCheck, Plan, MAX_PAGES, MAX_PENDING_CHECKS, MAX_RUNS_LISTED};
use crate::api::Client;

/// What there was when a wait was planned.
#[derive(Debug, Default)]
pub(super) struct Before {
    pub(super) head_sha: String,
    pub(super) after_id: u64,
    pub(super) pending: Vec<PendingCheck>,
    pub(super) pending_truncated: bool,
}

/// The check runs of `runs` that have not completed, at most
/// [`MAX_PENDING_CHECKS`] (none and `true` when there were more).
pub fn pending_checks(runs: &[Value]) -> (Vec<PendingCheck>, bool) {
    let pending: Vec<PendingCheck> = runs
        .iter()
        .filter(|r| r["status"].as_str() != Some("completed"))
        .map(|r| PendingCheck {
            id: r["id"].as_u64().unwrap_or(0),
            name: r["name"].as_str().unwrap_or_default().to_string(),
            suite_id: r["check_suite"]["id"].as_u64().unwrap_or(0),
        })
        .collect();
    if pending.len() > MAX_PENDING_CHECKS {
        (Vec::new(), true)
    } else {
        (pending, false)
    }
}

/// What there is before the wait: the head commit and its pending check runs for
/// checks (the pull request's read also proves the number is a pull request), the
/// newest review or comment ID for the others.
pub(super) async fn look_before(
    client: &Client,
    kind: Kind,
    repo: &str,
    number: u64,
) -> Result<Before, RpcError> {
    let api = |e: crate::api::ApiError| e.to_rpc();
    match kind {
        Kind::Checks => {
            let pr = client
                .request("GET", &format!("/repos/{repo}/pulls/{number}"), None)
                .await
                .map_err(api)?;
            let sha = pr["head"]["sha"]
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    RpcError::new(
                        Code::Unavailable,
                        format!("GitHub answered pull request #{number} without a head commit"),
                    )
                })?;
            let (runs, more) = client
                .get_all_in(
                    &format!("/repos/{repo}/commits/{sha}/check-runs?per_page=100"),
                    "check_runs",
                    MAX_PAGES,
                )
                .await
                .map_err(api)?;
            let (pending, truncated) = pending_checks(&runs);
            let truncated = truncated || more;
            Ok(Before {
                head_sha: sha.to_string(),
                pending: if truncated { Vec::new() } else { pending },
                pending_truncated: truncated,
                ..Before::default()
            })
        }
        Kind::Review => {
            let (reviews, _) = client
                .get_all(
                    &format!("/repos/{repo}/pulls/{number}/reviews?per_page=100"),
                    MAX_PAGES,
                )
                .await
                .map_err(api)?;
            Ok(Before {
                after_id: newest_id(&reviews),
                ..Before::default()
            })
        }
        Kind::Reply => {
            let (comments, _) = client
                .get_all(
                    &format!("/repos/{repo}/issues/{number}/comments?per_page=100"),
                    MAX_PAGES,
                )
                .await
                .map_err(api)?;
            Ok(Before {
                after_id: newest_id(&comments),
                ..Before::default()
            })
        }
    }
}

/// What a look found.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// Not yet: the progress line to show.
    Pending(String),
    /// The condition holds: what the waking Event carries beside the plan's fields.
    Done(Map<String, Value>),
}

/// Check runs that ended badly.
fn failed(conclusion: &str) -> bool {
    matches!(
        conclusion,
        "failure" | "timed_out" | "cancelled" | "action_required" | "startup_failure" | "stale"
    )
}

/// The checks' state from a commit's check runs.
pub fn checks_state(runs: &[Value]) -> Observed {
    let total = runs.len();
    if total == 0 {
        return Observed::Pending("no checks reported yet".into());
    }
    let completed = runs
        .iter()
        .filter(|r| r["status"].as_str() == Some("completed"))
        .count();
    let bad = runs
        .iter()
        .filter(|r| failed(r["conclusion"].as_str().unwrap_or_default()))
        .count();
    if completed < total {
        let mut line = format!("{completed} of {total} checks finished");
        if bad > 0 {
            line.push_str(&format!(", {bad} failed"));
        }
        return Observed::Pending(line);
    }
    let listed: Vec<Value> = runs
        .iter()
        .take(MAX_RUNS_LISTED)
        .map(|r| {
            json!({"name": r["name"], "status": r["status"], "conclusion": r["conclusion"],
                   "html_url": r["html_url"]})
        })
        .collect();
    let mut m = Map::new();
    m.insert(
        "checks".into(),
        json!({
            "total": total,
            "failed": bad,
            "conclusion": if bad > 0 { "failure" } else { "success" },
            "runs": listed,
        }),
    );
    Observed::Done(m)
}

/// True when `login` is `bot` (compared case-insensitively; an empty `bot` is
/// nobody).
pub fn is_bot(login: &str, bot: &str) -> bool {
    !bot.is_empty() && login.eq_ignore_ascii_case(bot)
}

/// The first review submitted after `after_id` by someone other than `bot` (a
/// pending review is a draft).
pub fn review_state(reviews: &[Value], after_id: u64, bot: &str) -> Observed {
    let first = reviews
        .iter()
        .filter(|r| r["id"].as_u64().is_some_and(|id| id > after_id))
        .filter(|r| r["state"].as_str().is_some_and(|s| s != "PENDING"))
        .filter(|r| !is_bot(r["user"]["login"].as_str().unwrap_or_default(), bot))
        .min_by_key(|r| r["id"].as_u64().unwrap_or(u64::MAX));
    match first {
        None => Observed::Pending(String::new()),
        Some(r) => {
            let mut m = Map::new();
            m.insert(
                "review".into(),
                json!({"id": r["id"], "state": r["state"], "author": r["user"]["login"],
                       "body": r["body"], "html_url": r["html_url"],
                       "submitted_at": r["submitted_at"]}),
            );
            Observed::Done(m)
        }
    }
}

/// The first comment made after `after_id` by someone other than `bot`.
pub fn reply_state(comments: &[Value], after_id: u64, bot: &str) -> Observed {
    let first = comments
        .iter()
        .filter(|c| c["id"].as_u64().is_some_and(|id| id > after_id))
        .filter(|c| !is_bot(c["user"]["login"].as_str().unwrap_or_default(), bot))
        .min_by_key(|c| c["id"].as_u64().unwrap_or(u64::MAX));
    match first {
        None => Observed::Pending(String::new()),
        Some(c) => {
            let mut m = Map::new();
            m.insert(
                "comment".into(),
                json!({"id": c["id"], "author": c["user"]["login"], "body": c["body"],
                       "html_url": c["html_url"], "created_at": c["created_at"]}),
            );
            Observed::Done(m)
        }
    }
}

/// One look at GitHub for `plan`.
pub async fn look(client: &Client, plan: &Plan) -> Result<Observed, crate::api::ApiError> {
    let repo = &plan.repository;
    let n = plan.number;
    match plan.kind {
        Kind::Checks => {
            let (runs, _) = client
                .get_all_in(
                    &format!(
                        "/repos/{repo}/commits/{}/check-runs?per_page=100",
                        plan.head_sha
                    ),
                    "check_runs",
                    MAX_PAGES,
                )
                .await?;
            Ok(checks_state(&runs))
        }
        Kind::Review => {
            let (reviews, _) = client
                .get_all(
                    &format!("/repos/{repo}/pulls/{n}/reviews?per_page=100"),
                    MAX_PAGES,
                )
                .await?;
            Ok(review_state(&reviews, plan.after_id, &plan.bot))
        }
        Kind::Reply => {
            let (comments, _) = client
                .get_all(
                    &format!(
                        "/repos/{repo}/issues/{n}/comments?per_page=100&since={}",
                        plan.planned_at
                    ),
                    MAX_PAGES,
                )
                .await?;
            Ok(reply_state(&comments, plan.after_id, &plan.bot))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waits::waking_event;

    fn run(status: &str, conclusion: Value) -> Value {
        json!({"name": "ci", "status": status, "conclusion": conclusion, "html_url": "https://x"})
    }

    #[test]
    fn checks_report_progress_until_every_run_finished() {
        assert_eq!(
            checks_state(&[]),
            Observed::Pending("no checks reported yet".into())
        );
        let runs = [
            run("completed", json!("success")),
            run("in_progress", Value::Null),
            run("completed", json!("failure")),
        ];
        assert_eq!(
            checks_state(&runs),
            Observed::Pending("2 of 3 checks finished, 1 failed".into())
        );
        let runs = [
            run("completed", json!("success")),
            run("completed", json!("timed_out")),
        ];
        let Observed::Done(m) = checks_state(&runs) else {
            panic!("done")
        };
        assert_eq!(m["checks"]["conclusion"], "failure");
        assert_eq!(m["checks"]["failed"], 1);
        assert_eq!(m["checks"]["runs"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn a_review_or_reply_counts_only_after_the_plan() {
        let reviews = [
            json!({"id": 5, "state": "COMMENTED", "user": {"login": "a"}}),
            json!({"id": 9, "state": "PENDING", "user": {"login": "b"}}),
        ];
        assert_eq!(
            review_state(&reviews, 5, ""),
            Observed::Pending(String::new())
        );
        let Observed::Done(m) = review_state(&reviews, 4, "") else {
            panic!("done")
        };
        assert_eq!(m["review"]["id"], 5);
        // The bot's own review does not count (its login compared case-insensitively).
        assert_eq!(
            review_state(&reviews, 4, "A"),
            Observed::Pending(String::new())
        );
        let comments = [json!({"id": 7, "user": {"login": "c"}, "body": "hi"})];
        assert_eq!(
            reply_state(&comments, 7, ""),
            Observed::Pending(String::new())
        );
        assert!(matches!(
            reply_state(&comments, 6, "bot"),
            Observed::Done(_)
        ));
        assert_eq!(
            reply_state(&comments, 6, "c"),
            Observed::Pending(String::new())
        );
    }

    #[test]
    fn pending_checks_list_the_unfinished_runs_with_their_suites() {
        let runs = [
            json!({"id": 1, "name": "lint", "status": "completed", "check_suite": {"id": 10}}),
            json!({"id": 2, "name": "test", "status": "in_progress", "check_suite": {"id": 11}}),
            json!({"id": 3, "name": "build", "status": "queued"}),
        ];
        let (pending, truncated) = pending_checks(&runs);
        assert!(!truncated);
        assert_eq!(
            pending,
            vec![
                PendingCheck {
                    id: 2,
                    name: "test".into(),
                    suite_id: 11
                },
                PendingCheck {
                    id: 3,
                    name: "build".into(),
                    suite_id: 0
                },
            ]
        );
        let many: Vec<Value> = (0..=MAX_PENDING_CHECKS)
            .map(|i| json!({"id": i, "name": "x", "status": "queued"}))
            .collect();
        assert_eq!(pending_checks(&many), (Vec::new(), true));
    }

    #[test]
    fn the_waking_event_carries_the_plan_key_and_its_type() {
        let plan = Plan {
            id: "abc".into(),
            kind: Kind::Checks,
            work_id: "w".into(),
            scope_id: "s".into(),
            connection: "gh".into(),
            source: "github/s/e".into(),
            repository: "o/r".into(),
            number: 3,
            head_sha: "deadbeef".into(),
            after_id: 0,
            pending_checks: Vec::new(),
            pending_checks_truncated: false,
            bot: String::new(),
            planned_at: "2026-12-01T00:00:00.000Z".into(),
            due_ms: 0,
            progress: String::new(),
        };
        assert_eq!(
            plan.wait_keys(),
            vec!["github:o/r#3".to_string(), "github-wait:abc".to_string()]
        );
        assert_eq!(
            Kind::Checks.wait_types(),
            vec![
                "github.check_suite.completed",
                "github.check_run.completed",
                "github.wait.checks_completed"
            ]
        );
        let ev = waking_event(&plan, Map::new());
        assert_eq!(ev.event_type, "github.wait.checks_completed");
        assert_eq!(ev.keys, vec!["github-wait:abc".to_string()]);
        assert_eq!(ev.payload.schema, "github.wait.v1");
        assert_eq!(ev.payload.data["head_sha"], "deadbeef");
        assert_eq!(ev.payload.data["for"], "checks");
    }
}
