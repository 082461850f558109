//! `bitbucket.wait_build` (`operation.wait`): park the Work until the builds of its
//! pull request's head commit have finished.
//!
//! Planning ([`plan`]) reads, as the binding's connection:
//! 1. the Work's pull request (its first `bitbucket:<workspace>/<repo>#<id>` key):
//!    `GET /repositories/{workspace}/{repo_slug}/pullrequests/{id}`, whose
//!    `source.commit.hash` is the head commit (Bitbucket answers 12 hex digits);
//! 2. the commit, for its full hash (`GET …/commit/{hash}`), since the commit status
//!    webhooks, and so their Events' key (`bitbucket:<workspace>/<repo>@<hash>`), name
//!    the full one;
//! 3. its commit statuses (`GET …/commit/{hash}/statuses`, pages of
//!    [`STATUSES_PER_PAGE`], at most [`MAX_STATUS_PAGES`]).
//!
//! When at least one status exists and none is `INPROGRESS`, there is nothing to wait
//! for: the call is answered at once, refused `conflict` with every build's state in
//! the message the agent reads ([`finished_message`]); `operation.wait` has no other
//! answer than a Wait. Otherwise (a build in progress, or none reported yet) it
//! answers a Wait on the commit's key for the types `bitbucket.commit_status.created`
//! and `…updated` ([`WAKE_TYPES`]), due `timeout_s` later (default
//! [`DEFAULT_TIMEOUT_S`], from [`MIN_TIMEOUT_S`] to [`MAX_TIMEOUT_S`]), with a
//! [`Plan`] naming the repository and commit.
//!
//! The host asks the package's `dependency.filter` ([`decide`]) whether a status
//! Event on that key wakes it: only a status of that commit that reached a final
//! state (`SUCCESSFUL`, `FAILED`, `STOPPED`). The filter keeps no state, so with
//! several builds in progress the first to finish wakes the Work; its Event (the
//! build's name, state and link) is the next turn's input, and calling the wait again
//! answers at once with every state once all have finished, or parks again.

use protocol::wire::{Event, OperationWaitParams, OperationWaitResult, WaitRequest};
use protocol::{Code, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::api::Client;
use crate::{intake, COMMIT_STATUS};

/// The operation's name.
pub const OPERATION: &str = "bitbucket.wait_build";
/// The Event types that may wake it (the filter decides).
pub const WAKE_TYPES: [&str; 2] = [
    "bitbucket.commit_status.created",
    "bitbucket.commit_status.updated",
];
/// The timeout when the call names none (an hour).
pub const DEFAULT_TIMEOUT_S: u64 = 3_600;
/// The shortest timeout.
pub const MIN_TIMEOUT_S: u64 = 60;
/// The longest timeout (a day).
pub const MAX_TIMEOUT_S: u64 = 86_400;
/// Statuses asked for a page (`pagelen`, Bitbucket's largest).
pub const STATUSES_PER_PAGE: usize = 100;
/// At most this many pages of a commit's statuses are read.
pub const MAX_STATUS_PAGES: usize = 5;
/// The states a build ends in.
pub const FINAL_STATES: [&str; 3] = ["SUCCESSFUL", "FAILED", "STOPPED"];
/// The state of a build still running.
pub const IN_PROGRESS: &str = "INPROGRESS";
/// The most builds a plan or an answer names.
pub const MAX_NAMED: usize = 20;
/// The plan's `wait` field, which tells the filter it is a build wait's.
pub const PLAN_KIND: &str = "build";

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// One build: a commit status's key, name, state and link.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// The status's key (unique per commit and vendor).
    pub key: String,
    /// Its name (its key when it has none).
    pub name: String,
    /// `INPROGRESS`, `SUCCESSFUL`, `FAILED` or `STOPPED`.
    pub state: String,
    /// The build's page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
}

impl Build {
    /// Whether it has finished.
    pub fn finished(&self) -> bool {
        FINAL_STATES.contains(&self.state.as_str())
    }
}

/// A build wait's plan: the Wait's plan, which `dependency.filter` receives back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Always [`PLAN_KIND`].
    pub wait: String,
    /// The Work.
    pub work_id: String,
    /// `workspace/repo_slug`, lower case.
    pub repository: String,
    /// The pull request.
    pub pull_request: u64,
    /// The head commit's full hash, lower case.
    pub commit: String,
    /// The builds in progress when it was planned (at most [`MAX_NAMED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_progress: Vec<String>,
}

impl Plan {
    /// The key the Wait is on: the commit's ([`intake::commit_key`]).
    pub fn key(&self) -> String {
        intake::commit_key(&self.repository, &self.commit)
    }
}

/// What planning found.
#[derive(Debug, Clone, PartialEq)]
pub enum Looked {
    /// Every build has finished (at least one exists): these.
    Finished {
        /// The head commit.
        commit: String,
        /// Its builds.
        builds: Vec<Build>,
    },
    /// A build is in progress, or none has been reported: the Wait to declare.
    Wait(WaitRequest),
}

/// The call's `timeout_s`: absent is [`DEFAULT_TIMEOUT_S`]; else whole seconds from
/// [`MIN_TIMEOUT_S`] to [`MAX_TIMEOUT_S`].
pub fn timeout_s(input: &Value) -> Result<u64, RpcError> {
    match input {
        Value::Null => return Ok(DEFAULT_TIMEOUT_S),
        Value::Object(_) => {}
        _ => return Err(invalid("the input must be an object")),
    }
    match input.get("timeout_s") {
        None | Some(Value::Null) => Ok(DEFAULT_TIMEOUT_S),
        Some(v) => v
            .as_u64()
            .filter(|s| (MIN_TIMEOUT_S..=MAX_TIMEOUT_S).contains(s))
            .ok_or_else(|| {
                invalid(format!(
                    "timeout_s must be a whole number of seconds from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S} (MAX_TIMEOUT_S, a day)"
                ))
            }),
    }
}

fn is_hash(h: &str) -> bool {
    (7..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The full hash of pull request `id`'s head commit.
pub async fn head_commit(client: &Client, repository: &str, id: u64) -> Result<String, RpcError> {
    let path = format!("/repositories/{repository}/pullrequests/{id}");
    let pr = client.json("GET", path.clone(), None).await?;
    let hash = pr
        .pointer("/source/commit/hash")
        .and_then(Value::as_str)
        .filter(|h| is_hash(h))
        .ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                format!("{path} names no head commit (source.commit.hash)"),
            )
        })?;
    if hash.len() >= 40 {
        return Ok(hash.to_ascii_lowercase());
    }
    let path = format!("/repositories/{repository}/commit/{hash}");
    let commit = client.json("GET", path.clone(), None).await?;
    commit
        .get("hash")
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase)
        .filter(|h| is_hash(h) && h.starts_with(&hash.to_ascii_lowercase()))
        .ok_or_else(|| RpcError::new(Code::Unavailable, format!("{path} answered no commit hash")))
}

/// The builds (commit statuses) of `commit`.
pub async fn builds(
    client: &Client,
    repository: &str,
    commit: &str,
) -> Result<Vec<Build>, RpcError> {
    let mut out = Vec::new();
    for page in 1..=MAX_STATUS_PAGES {
        let answer = client
            .json(
                "GET",
                format!(
                    "/repositories/{repository}/commit/{commit}/statuses?pagelen={STATUSES_PER_PAGE}&page={page}"
                ),
                None,
            )
            .await?;
        let s = |v: &Value, f: &str| {
            sdk::tracker::one_line(v.get(f).and_then(Value::as_str).unwrap_or_default(), 200)
        };
        for v in answer
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = s(v, "key");
            let name = match s(v, "name") {
                n if n.is_empty() => key.clone(),
                n => n,
            };
            out.push(Build {
                key,
                name,
                state: s(v, "state"),
                url: s(v, "url"),
            });
        }
        if answer.get("next").is_none() {
            return Ok(out);
        }
    }
    Err(RpcError::new(
        Code::Unavailable,
        format!(
            "commit {commit} of {repository} has more than {MAX_STATUS_PAGES} pages of {STATUSES_PER_PAGE} statuses (MAX_STATUS_PAGES)"
        ),
    ))
}

/// The builds as one line: `Unit tests SUCCESSFUL; lint FAILED`, at most
/// [`MAX_NAMED`] named.
pub fn summary(builds: &[Build]) -> String {
    let mut parts: Vec<String> = builds
        .iter()
        .take(MAX_NAMED)
        .map(|b| format!("{} {}", b.name, b.state))
        .collect();
    if builds.len() > MAX_NAMED {
        parts.push(format!("and {} more", builds.len() - MAX_NAMED));
    }
    parts.join("; ")
}

/// What the agent reads when every build of `commit` has finished.
pub fn finished_message(repository: &str, id: u64, commit: &str, builds: &[Build]) -> String {
    let failed = builds.iter().filter(|b| b.state != "SUCCESSFUL").count();
    let short: String = commit.chars().take(12).collect();
    format!(
        "nothing to wait for: the builds of {repository}#{id} (commit {short}) have finished, {} passed, {failed} did not: {}",
        builds.len() - failed,
        summary(builds)
    )
}

/// Looks at pull request `id` of `repository`: [`Looked::Finished`] when every build
/// of its head commit has finished, else the Wait (due `timeout_s` after `now_ms`).
pub async fn look(
    client: &Client,
    work_id: &str,
    repository: &str,
    id: u64,
    timeout_s: u64,
    now_ms: i64,
) -> Result<Looked, RpcError> {
    let repository = repository.to_ascii_lowercase();
    let commit = head_commit(client, &repository, id).await?;
    let builds = builds(client, &repository, &commit).await?;
    let running: Vec<&Build> = builds.iter().filter(|b| !b.finished()).collect();
    if !builds.is_empty() && running.is_empty() {
        return Ok(Looked::Finished { commit, builds });
    }
    let plan = Plan {
        wait: PLAN_KIND.into(),
        work_id: work_id.to_string(),
        repository: repository.clone(),
        pull_request: id,
        commit,
        in_progress: running
            .iter()
            .take(MAX_NAMED)
            .map(|b| b.name.clone())
            .collect(),
    };
    let short: String = plan.commit.chars().take(12).collect();
    let description = if running.is_empty() {
        format!("builds of {repository}#{id} (commit {short}): none reported yet")
    } else {
        format!(
            "builds of {repository}#{id} (commit {short}): {} of {} in progress",
            running.len(),
            builds.len()
        )
    };
    let due_ms =
        now_ms.saturating_add(i64::try_from(timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX));
    Ok(Looked::Wait(WaitRequest {
        keys: vec![plan.key()],
        types: WAKE_TYPES.iter().map(|t| t.to_string()).collect(),
        due_at: protocol::time::format_rfc3339_ms(due_ms),
        description,
        plan: serde_json::to_value(&plan).map_err(|e| RpcError::unauthored(format_args!("{e}")))?,
    }))
}

/// Serves `operation.wait` for [`OPERATION`].
pub async fn plan(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationWaitParams,
) -> Result<OperationWaitResult, RpcError> {
    let timeout = timeout_s(&params.input)?;
    let authority = &params.authority;
    if authority.connection.is_empty() {
        return Err(RpcError::new(
            Code::Unauthorized,
            "the binding names no connection: bitbucket.wait_build reads Bitbucket as the binding's bitbucket connection",
        ));
    }
    if authority.work_id.is_empty() {
        return Err(invalid("bitbucket.wait_build needs a Work"));
    }
    let work = host
        .call_typed(&protocol::wire::StateWorkParams {
            id: authority.work_id.clone(),
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("reading the Work: {e}")))?
        .work;
    let (repository, id) = work
        .keys
        .iter()
        .find_map(|k| intake::parse_key(k))
        .ok_or_else(|| {
            invalid("the Work has no Bitbucket pull request (it was not started by one, nor opened one)")
        })?;
    let client = state
        .client(host, &authority.scope_id, &authority.connection)
        .await?;
    match look(
        &client,
        &authority.work_id,
        repository,
        id,
        timeout,
        protocol::time::now_ms(),
    )
    .await?
    {
        Looked::Wait(wait) => Ok(OperationWaitResult { wait }),
        Looked::Finished { commit, builds } => {
            let text = finished_message(repository, id, &commit, &builds);
            // The code stays in the data; the states go beside the agent's message.
            let mut e = sdk::tracker::for_agent(RpcError::new(Code::Conflict, text));
            if let Some(Value::Object(data)) = e.data.as_mut() {
                data.insert("builds".into(), json!(builds));
            }
            Err(e)
        }
    }
}

/// `Ok` when `event` wakes the build wait of `plan` (a status of its commit reached
/// a final state), else why not. From the params alone: no call, no clock.
pub fn decide(plan: &Plan, event: &Event) -> Result<(), String> {
    if !WAKE_TYPES.contains(&event.event_type.as_str()) {
        return Err(format!("`{}` does not wake a build wait", event.event_type));
    }
    let schema = format!("{COMMIT_STATUS}.v1");
    if event.payload.schema != schema {
        return Err(format!(
            "unreadable payload schema `{}` (this release reads {schema})",
            event.payload.schema
        ));
    }
    let data = &event.payload.data;
    let text = |f: &str| data.get(f).and_then(Value::as_str).unwrap_or_default();
    if !text("repository").eq_ignore_ascii_case(&plan.repository) {
        return Err(format!(
            "the status is of {}, the wait on {}",
            text("repository"),
            plan.repository
        ));
    }
    if plan.commit.is_empty() || !text("commit").eq_ignore_ascii_case(&plan.commit) {
        return Err(format!(
            "the status is of commit {}, the wait on {}",
            text("commit"),
            plan.commit
        ));
    }
    if !FINAL_STATES.contains(&text("state")) {
        return Err(format!(
            "{} is {}, not finished",
            text("name"),
            text("state")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::Payload;

    fn plan() -> Plan {
        Plan {
            wait: PLAN_KIND.into(),
            work_id: "w1".into(),
            repository: "acme/widgets".into(),
            pull_request: 5,
            commit: "9fec847784abb10b2fa567ee63b85bd238955d0e".into(),
            in_progress: vec!["Unit tests".into()],
        }
    }

    fn status(event_type: &str, state: &str, commit: &str) -> Event {
        Event {
            event_type: event_type.into(),
            keys: vec![intake::commit_key("acme/widgets", commit)],
            payload: Payload {
                schema: "bitbucket.commit_status.v1".into(),
                data: json!({"repository": "acme/widgets", "commit": commit, "name": "Unit tests",
                             "key": "unit", "state": state}),
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_a_final_state_of_the_plans_commit_wakes_it() {
        let p = plan();
        let c = p.commit.clone();
        for state in FINAL_STATES {
            assert_eq!(decide(&p, &status(WAKE_TYPES[1], state, &c)), Ok(()));
            assert_eq!(decide(&p, &status(WAKE_TYPES[0], state, &c)), Ok(()));
        }
        let e = decide(&p, &status(WAKE_TYPES[1], "INPROGRESS", &c)).unwrap_err();
        assert_eq!(e, "Unit tests is INPROGRESS, not finished");
        let e = decide(&p, &status(WAKE_TYPES[1], "FAILED", "abcdef0123")).unwrap_err();
        assert!(e.contains("commit abcdef0123"), "{e}");
        let mut other = status(WAKE_TYPES[1], "FAILED", &c);
        other.payload.data["repository"] = json!("acme/other");
        assert!(decide(&p, &other).is_err());
        let mut odd = status("bitbucket.pullrequest.updated", "FAILED", &c);
        assert!(decide(&p, &odd).is_err());
        odd.event_type = WAKE_TYPES[1].into();
        odd.payload.schema = "bitbucket.commit_status.v2".into();
        assert!(decide(&p, &odd).unwrap_err().contains("schema"));
        assert_eq!(
            p.key(),
            "bitbucket:acme/widgets@9fec847784abb10b2fa567ee63b85bd238955d0e"
        );
    }

    #[test]
    fn the_timeout_is_bounded_and_the_error_names_the_bounds() {
        assert_eq!(timeout_s(&Value::Null).unwrap(), DEFAULT_TIMEOUT_S);
        assert_eq!(timeout_s(&json!({})).unwrap(), DEFAULT_TIMEOUT_S);
        assert_eq!(timeout_s(&json!({"timeout_s": 600})).unwrap(), 600);
        for bad in [
            json!({"timeout_s": 59}),
            json!({"timeout_s": 86_401}),
            json!({"timeout_s": "1h"}),
        ] {
            let e = timeout_s(&bad).unwrap_err();
            assert_eq!(
                e.message,
                "timeout_s must be a whole number of seconds from 60 to 86400 (MAX_TIMEOUT_S, a day)"
            );
        }
        assert!(timeout_s(&json!([1])).is_err());
    }

    #[test]
    fn the_finished_answer_names_every_state_within_bounds() {
        let builds: Vec<Build> = (0..25)
            .map(|i| Build {
                key: format!("k{i}"),
                name: format!("b{i}"),
                state: if i == 3 { "FAILED" } else { "SUCCESSFUL" }.into(),
                url: String::new(),
            })
            .collect();
        let m = finished_message(
            "acme/widgets",
            5,
            "9fec847784abb10b2fa567ee63b85bd238955d0e",
            &builds,
        );
        assert!(m.starts_with("nothing to wait for: the builds of acme/widgets#5 (commit 9fec847784ab) have finished, 24 passed, 1 did not: b0 SUCCESSFUL;"), "{m}");
        assert!(m.contains("b3 FAILED") && m.ends_with("and 5 more"), "{m}");
    }
}
