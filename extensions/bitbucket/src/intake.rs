//! `webhook.handle`: one Bitbucket Cloud webhook delivery, verified and turned into at
//! most one Event.
//!
//! In order: a method other than POST is 405; a path no entry covers is 404; a body
//! over [`MAX_BODY_BYTES`] is 413; an unresolvable `webhook_secret` is 503 with
//! `Retry-After`; a missing or wrong `X-Hub-Signature` (`sha256=` and the hex
//! HMAC-SHA256 of the raw body under the webhook secret, checked in constant time by
//! [`sdk::tracker::verify_hmac_hex`]) is 401; a body that is not a JSON object, or
//! lacks what its `X-Event-Key` needs, is 400. Then one Event, or 200 and nothing
//! (Bitbucket retries a failed delivery, so an ignored one is still a 200).
//!
//! The delivery's identity is the change the payload reports ([`change_id`]: a pull
//! request's creation, a comment, a merge or decline, an approval or change request,
//! a commit status's state, an issue's creation or comment), which reconcile
//! (reconcile.rs) derives the same way from a polled pull request, so a
//! change is one Event whichever way it comes (docs/decisions.md, issue 44). Such an
//! Event is a `snapshot`: its delivery ID alone is its identity, so a poll reading
//! the pull request as it is now (a title edited since) is the same Event again.
//! Only a delivery naming no change (`pullrequest:updated`, `issue:updated`) keeps
//! its `X-Request-UUID` (the same on Bitbucket's redeliveries), or, when it lacks
//! one, a digest of the body: the host keeps a delivery once, so a redelivery adds
//! nothing.
//!
//! Taken ([`project`]), for a repository of the entry's:
//! - `pullrequest:created|updated|comment_created|approved|changes_request_created|
//!   fulfilled|rejected` → `bitbucket.pullrequest.<kind>` (`changes_requested` for
//!   `changes_request_created`), keyed by the pull request ([`key`]). A comment,
//!   approval or change request by the agent's own account is dropped (it must not
//!   wake its own Work).
//! - `repo:commit_status_created|updated` → `bitbucket.commit_status.<created|updated>`,
//!   keyed by the commit ([`commit_key`]).
//! - `issue:created|updated|comment_created` → `bitbucket.issue.<kind>`, keyed by the
//!   issue ([`issue_key`]).
//!
//! A pull request Event carries `mentioned` (a comment's text mentions the agent),
//! `review_requested` (its reviewers name `agent_account_id`) and
//! `jira_key` (its source branch names an issue of the entry's `jira_projects`), which
//! routing reads.

use protocol::wire::{
    Delivery, HttpAnswer, IngressEvent, Payload, WebhookHandleParams, WebhookHandleResult,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::config::{EntryConfig, ParsedConfig, Registry};
use crate::{COMMIT_STATUS, ISSUE, PULLREQUEST};

/// The largest body read, in bytes.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Seconds a 503 asks Bitbucket to wait.
pub const RETRY_AFTER_SECONDS: u32 = 5;
/// The most bytes of a pull request's or issue's description an Event carries.
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// The most bytes of a comment's text an Event carries.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-hub-signature";
/// The delivery's identity.
pub const DELIVERY_HEADER: &str = "x-request-uuid";
/// The event's name (`pullrequest:comment_created`).
pub const EVENT_HEADER: &str = "x-event-key";
/// What precedes the hex digest in the signature.
pub const SIGNATURE_PREFIX: &str = "sha256=";

/// The Work key of pull request `id` of `repository` (`workspace/repo_slug`):
/// `bitbucket:<workspace>/<repo_slug>#<id>`, lower case.
pub fn key(repository: &str, id: u64) -> String {
    format!("bitbucket:{}#{id}", repository.to_ascii_lowercase())
}

/// The repository and pull request ID of a key made by [`key`].
pub fn parse_key(key: &str) -> Option<(&str, u64)> {
    let (repo, id) = key.strip_prefix("bitbucket:")?.split_once('#')?;
    let id = id.parse().ok().filter(|n| *n > 0)?;
    crate::config::is_repository(repo).then_some((repo, id))
}

/// The key of an issue of the repository's tracker.
pub fn issue_key(repository: &str, id: u64) -> String {
    format!("bitbucket:{}/issues/{id}", repository.to_ascii_lowercase())
}

/// The key of a commit of the repository (commit statuses).
pub fn commit_key(repository: &str, hash: &str) -> String {
    format!(
        "bitbucket:{}@{}",
        repository.to_ascii_lowercase(),
        hash.to_ascii_lowercase()
    )
}

/// The `X-Hub-Signature` Bitbucket would send for `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!(
        "{SIGNATURE_PREFIX}{}",
        sdk::tracker::hmac_sha256_hex(secret, body)
    )
}

pub use sdk::tracker::answer_only;
use sdk::tracker::ignored;

/// 503 with `Retry-After`: the webhook secret could not be resolved.
pub fn unavailable() -> HttpAnswer {
    sdk::tracker::unavailable("the webhook secret", RETRY_AFTER_SECONDS)
}

/// What is decided before the secret is needed: method, entry, body size.
pub fn precheck<'a>(
    registry: &'a Registry,
    params: &WebhookHandleParams,
) -> Result<&'a EntryConfig, HttpAnswer> {
    if !params.method.eq_ignore_ascii_case("POST") {
        return Err(HttpAnswer::text(405, "only POST is accepted").with_header("Allow", "POST"));
    }
    let entry = registry
        .entry_for(&params.path)
        .ok_or_else(|| HttpAnswer::text(404, "no Bitbucket entry is configured at this path"))?;
    if params.body.len() > MAX_BODY_BYTES {
        return Err(HttpAnswer::text(
            413,
            &format!("the body is larger than {MAX_BODY_BYTES} bytes (MAX_BODY_BYTES)"),
        ));
    }
    Ok(entry)
}

/// Serves a delivery `precheck` admitted for `entry`, with its webhook secret.
pub fn process(
    entry: &EntryConfig,
    secret: &[u8],
    params: &WebhookHandleParams,
) -> WebhookHandleResult {
    if let Err(e) = sdk::tracker::verify_hmac_hex(
        secret,
        &params.body,
        params.header(SIGNATURE_HEADER),
        SIGNATURE_PREFIX,
    ) {
        let mut why = e.reason("X-Hub-Signature", "");
        if e == sdk::tracker::SignatureError::Missing {
            why.push_str(" (is the webhook's secret set in Bitbucket?)");
        }
        return answer_only(HttpAnswer::text(401, &why));
    }
    let Some(payload) = serde_json::from_slice::<Value>(&params.body)
        .ok()
        .filter(Value::is_object)
    else {
        return answer_only(HttpAnswer::text(400, "the body is not a JSON object"));
    };
    let event_key = params.header(EVENT_HEADER).unwrap_or_default().trim();
    let change = change_id(event_key, &payload);
    let snapshot = change.is_some();
    let delivery_id = match (change, params.header(DELIVERY_HEADER).map(str::trim)) {
        (Some(change), _) => change,
        (None, Some(id))
            if !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            id.to_string()
        }
        (None, _) => format!(
            "sha256:{}",
            protocol::hex::encode(&Sha256::digest(&params.body))
        ),
    };
    match project(&entry.config, event_key, &payload) {
        Ok(Some(mut event)) => {
            event.snapshot = snapshot;
            sdk::tracker::deliver(Delivery {
                source: entry.source.clone(),
                delivery_id,
                body: None,
                events: vec![event],
            })
        }
        Ok(None) => answer_only(ignored(
            "not an event this entry takes (its repositories' pull requests, commit statuses and issues, not by the agent)",
        )),
        Err(why) => answer_only(HttpAnswer::text(
            400,
            &format!("unreadable Bitbucket webhook: {why}"),
        )),
    }
}

/// The longest part of a change's identity (an ID, a commit, a key, a time), in
/// bytes.
const MAX_ID_BYTES: usize = 64;

/// A part of a change's identity: 1 to [`MAX_ID_BYTES`] printable ASCII bytes, no
/// `/` (numbers are written in decimal).
fn id_part(v: Option<&Value>) -> Option<String> {
    let text = match v? {
        Value::Number(n) => n.as_u64()?.to_string(),
        Value::String(t) => t.trim().to_string(),
        _ => return None,
    };
    (!text.is_empty()
        && text.len() <= MAX_ID_BYTES
        && text.bytes().all(|b| b.is_ascii_graphic() && b != b'/'))
    .then_some(text)
}

/// The identity of the change a payload of `event_key` reports, the same for a
/// webhook delivery and for a poll of the change (repository lower case):
///
/// - `pullrequest/<workspace>/<slug>/<id>/created`, `…/<id>/comment/<comment id>`,
///   `…/<id>/fulfilled`, `…/<id>/rejected` (a pull request is merged or declined
///   once);
/// - `…/<id>/approved/<account>/<approval.date>` and
///   `…/<id>/changes_requested/<account>/<changes_request.date>` (the reviewer's
///   account ID, else UUID);
/// - `status/<workspace>/<slug>/<commit>/<key>/<state>/<updated_on>` (a commit
///   status's key in a state, as of its update);
/// - `issue/<workspace>/<slug>/<id>/created`, `…/<id>/comment/<comment id>`.
///
/// None for a payload naming no change (`pullrequest:updated`, `issue:updated`,
/// an event the package does not take) or one without the parts.
pub fn change_id(event_key: &str, payload: &Value) -> Option<String> {
    let repo = repository(payload).ok()?;
    let p = |pointer: &str| id_part(payload.pointer(pointer));
    let account =
        |at: &str| p(&format!("{at}/user/account_id")).or_else(|| p(&format!("{at}/user/uuid")));
    let pr = || Some(format!("pullrequest/{repo}/{}", p("/pullrequest/id")?));
    let issue = || Some(format!("issue/{repo}/{}", p("/issue/id")?));
    match event_key {
        "pullrequest:created" => Some(format!("{}/created", pr()?)),
        "pullrequest:comment_created" => Some(format!("{}/comment/{}", pr()?, p("/comment/id")?)),
        "pullrequest:fulfilled" => Some(format!("{}/fulfilled", pr()?)),
        "pullrequest:rejected" => Some(format!("{}/rejected", pr()?)),
        "pullrequest:approved" => Some(format!(
            "{}/approved/{}/{}",
            pr()?,
            account("/approval")?,
            p("/approval/date")?
        )),
        "pullrequest:changes_request_created" => Some(format!(
            "{}/changes_requested/{}/{}",
            pr()?,
            account("/changes_request")?,
            p("/changes_request/date")?
        )),
        "repo:commit_status_created" | "repo:commit_status_updated" => {
            let hash = s(payload, "/commit_status/links/commit/href")
                .rsplit('/')
                .next()
                .map(str::to_ascii_lowercase)
                .filter(|h| {
                    (7..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit())
                })?;
            Some(format!(
                "status/{repo}/{hash}/{}/{}/{}",
                p("/commit_status/key")?,
                p("/commit_status/state")?,
                p("/commit_status/updated_on")?
            ))
        }
        "issue:created" => Some(format!("{}/created", issue()?)),
        "issue:comment_created" => Some(format!("{}/comment/{}", issue()?, p("/comment/id")?)),
        _ => None,
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

use sdk::tracker::clip;

/// An account's display name, or its nickname, or its account ID.
fn who(user: &Value) -> String {
    ["/display_name", "/nickname", "/account_id"]
        .iter()
        .map(|p| s(user, p))
        .find(|n| !n.is_empty())
        .unwrap_or_default()
        .to_string()
}

/// Whether `text` mentions the agent: the configured mention as a word (any case),
/// or `@{agent_account_id}` (how Bitbucket writes a mention in raw markdown).
pub fn mentions(config: &ParsedConfig, text: &str) -> bool {
    let lower = text.to_lowercase();
    let m = config.mention.to_lowercase();
    let word = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.');
    let by_name = lower.match_indices(&m).any(|(i, _)| {
        let before = lower[..i].chars().next_back();
        let after = lower[i + m.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(|c| word(c) && c != '.')
    });
    by_name
        || config
            .agent_account_id
            .as_ref()
            .is_some_and(|a| text.contains(&format!("@{{{a}}}")))
}

/// The first issue key of one of `projects` that `branch` names (`feature/PROJ-12-x`
/// names `PROJ-12`; case is ignored), upper case.
pub fn jira_key_in(projects: &[String], branch: &str) -> Option<String> {
    let upper = branch.to_ascii_uppercase();
    let bytes = upper.as_bytes();
    for p in projects {
        for (i, _) in upper.match_indices(&format!("{p}-")) {
            if i > 0 && bytes[i - 1].is_ascii_alphanumeric() {
                continue;
            }
            let start = i + p.len() + 1;
            let digits = bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if (1..=12).contains(&digits) {
                return Some(upper[i..start + digits].to_string());
            }
        }
    }
    None
}

/// Whether the pull request names the agent's account among its reviewers: on
/// Bitbucket, which has no pull request labels, the way to hand a pull request to
/// the agent without a comment.
fn review_requested(config: &ParsedConfig, pr: &Value) -> bool {
    pr.get("reviewers")
        .and_then(Value::as_array)
        .is_some_and(|reviewers| reviewers.iter().take(100).any(|r| by_agent(config, r)))
}

fn by_agent(config: &ParsedConfig, actor: &Value) -> bool {
    config
        .agent_account_id
        .as_deref()
        .is_some_and(|a| s(actor, "/account_id") == a || s(actor, "/uuid") == a)
}

/// The repository `workspace/repo_slug` of a payload, checked.
fn repository(payload: &Value) -> Result<String, String> {
    let full = s(payload, "/repository/full_name");
    if full.is_empty() {
        return Err("no repository.full_name".into());
    }
    if !crate::config::is_repository(full) {
        return Err(format!(
            "repository.full_name `{}` is not workspace/repo_slug",
            clip(full, 200).0
        ));
    }
    Ok(full.to_ascii_lowercase())
}

/// A comment's data, and whether it mentions the agent. Its author is its `user`,
/// or the delivery's actor (who made the comment) when it names none.
fn comment_of(config: &ParsedConfig, comment: &Value, actor: &Value) -> (Value, bool) {
    let raw = s(comment, "/content/raw");
    let user = comment
        .get("user")
        .filter(|u| u.is_object())
        .unwrap_or(actor);
    let (text, cut) = clip(raw, MAX_TEXT_BYTES);
    let mut c = json!({
        "id": comment.get("id").and_then(Value::as_u64).unwrap_or_default(),
        "author": who(user),
        "author_account_id": s(user, "/account_id"),
        "text": text,
        "text_truncated": cut,
        "url": s(comment, "/links/html/href"),
    });
    if let Some(parent) = comment.pointer("/parent/id").and_then(Value::as_u64) {
        c["parent_id"] = json!(parent);
    }
    if let Some(inline) = comment.get("inline").filter(|i| i.is_object()) {
        c["inline"] = json!({
            "path": s(inline, "/path"),
            "from": inline.get("from").cloned().unwrap_or(Value::Null),
            "to": inline.get("to").cloned().unwrap_or(Value::Null),
        });
    }
    (c, mentions(config, raw))
}

/// The Event (or none) a webhook payload with `event_key` makes for an entry's
/// `config`. `Err` is a payload that cannot be read.
pub fn project(
    config: &ParsedConfig,
    event_key: &str,
    payload: &Value,
) -> Result<Option<IngressEvent>, String> {
    let (family, kind) = match event_key {
        "pullrequest:created" => (PULLREQUEST, "created"),
        "pullrequest:updated" => (PULLREQUEST, "updated"),
        "pullrequest:comment_created" => (PULLREQUEST, "comment_created"),
        "pullrequest:approved" => (PULLREQUEST, "approved"),
        "pullrequest:changes_request_created" => (PULLREQUEST, "changes_requested"),
        "pullrequest:fulfilled" => (PULLREQUEST, "fulfilled"),
        "pullrequest:rejected" => (PULLREQUEST, "rejected"),
        "repo:commit_status_created" => (COMMIT_STATUS, "created"),
        "repo:commit_status_updated" => (COMMIT_STATUS, "updated"),
        "issue:created" => (ISSUE, "created"),
        "issue:updated" => (ISSUE, "updated"),
        "issue:comment_created" => (ISSUE, "comment_created"),
        _ => return Ok(None),
    };
    let repo = repository(payload)?;
    if !config.takes(&repo) {
        return Ok(None);
    }
    let actor = payload.get("actor").cloned().unwrap_or(Value::Null);
    let agent = by_agent(config, &actor);
    let (workspace, slug) = repo.split_once('/').unwrap_or_default();
    let mut data = json!({
        "repository": repo,
        "workspace": workspace,
        "repo_slug": slug,
        "event_key": event_key,
        "kind": kind,
        "actor": who(&actor),
        "actor_account_id": s(&actor, "/account_id"),
        "by_agent": agent,
    });
    let keys = match family {
        PULLREQUEST => {
            if agent && matches!(kind, "comment_created" | "approved" | "changes_requested") {
                return Ok(None);
            }
            let pr = payload
                .get("pullrequest")
                .ok_or_else(|| format!("a `{event_key}` without pullrequest"))?;
            let id = pr
                .get("id")
                .and_then(Value::as_u64)
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("a `{event_key}` without pullrequest.id"))?;
            let branch = s(pr, "/source/branch/name");
            data["id"] = json!(id);
            data["title"] = json!(clip(s(pr, "/title"), 1024).0);
            data["description"] = json!(clip(s(pr, "/description"), MAX_DESCRIPTION_BYTES).0);
            data["state"] = json!(s(pr, "/state"));
            data["author"] = json!(pr.get("author").map(who).unwrap_or_default());
            data["author_account_id"] = json!(s(pr, "/author/account_id"));
            data["source_branch"] = json!(branch);
            data["source_commit"] = json!(s(pr, "/source/commit/hash"));
            data["destination_branch"] = json!(s(pr, "/destination/branch/name"));
            data["url"] = json!(s(pr, "/links/html/href"));
            data["jira_key"] = json!(jira_key_in(&config.jira_projects, branch));
            data["review_requested"] = json!(review_requested(config, pr));
            let mut mentioned = false;
            if kind == "comment_created" {
                let comment = payload
                    .get("comment")
                    .ok_or_else(|| format!("a `{event_key}` without comment"))?;
                let (c, m) = comment_of(config, comment, &actor);
                data["comment"] = c;
                mentioned = m;
            }
            if kind == "rejected" {
                data["reason"] = json!(clip(s(pr, "/reason"), 1024).0);
            }
            data["mentioned"] = json!(mentioned);
            vec![key(&repo, id)]
        }
        COMMIT_STATUS => {
            let status = payload
                .get("commit_status")
                .ok_or_else(|| format!("a `{event_key}` without commit_status"))?;
            let hash = s(status, "/links/commit/href")
                .rsplit('/')
                .next()
                .unwrap_or_default();
            if hash.len() < 7 || hash.len() > 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "a `{event_key}` whose commit_status.links.commit names no commit"
                ));
            }
            data["commit"] = json!(hash);
            for f in ["key", "name", "state", "url", "refname"] {
                data[f] = json!(clip(s(status, &format!("/{f}")), 1024).0);
            }
            data["status_description"] = json!(clip(s(status, "/description"), 1024).0);
            vec![commit_key(&repo, hash)]
        }
        _ => {
            let issue = payload
                .get("issue")
                .ok_or_else(|| format!("a `{event_key}` without issue"))?;
            let id = issue
                .get("id")
                .and_then(Value::as_u64)
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("a `{event_key}` without issue.id"))?;
            if agent && kind == "comment_created" {
                return Ok(None);
            }
            let content = s(issue, "/content/raw");
            data["id"] = json!(id);
            data["title"] = json!(clip(s(issue, "/title"), 1024).0);
            data["description"] = json!(clip(content, MAX_DESCRIPTION_BYTES).0);
            data["state"] = json!(s(issue, "/state"));
            let reporter = issue.get("reporter").filter(|r| r.is_object());
            data["author"] = json!(match (reporter, kind) {
                (Some(r), _) => who(r),
                (None, "created") => who(&actor),
                _ => String::new(),
            });
            data["url"] = json!(s(issue, "/links/html/href"));
            let mut mentioned = kind == "created" && mentions(config, content);
            if kind == "comment_created" {
                let comment = payload
                    .get("comment")
                    .ok_or_else(|| format!("a `{event_key}` without comment"))?;
                let (c, m) = comment_of(config, comment, &actor);
                data["comment"] = c;
                mentioned = m;
            }
            data["mentioned"] = json!(mentioned && !agent);
            vec![issue_key(&repo, id)]
        }
    };
    Ok(Some(IngressEvent {
        event_type: format!("{family}.{kind}"),
        payload: Payload {
            schema: format!("{family}.v1"),
            data,
        },
        keys,
        occurred_at: String::new(),
        snapshot: false,
    }))
}
