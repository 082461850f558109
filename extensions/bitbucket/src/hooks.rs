//! The webhooks an entry receives, kept as configured when the entry sets
//! `manage_webhook` (the `bitbucket.webhooks` task), and the `webhooks` doctor check.
//!
//! A managed entry has one repository webhook per repository it names
//! (`/repositories/{workspace}/{repo_slug}/hooks`): URL `{public_url}{entry path}`,
//! the events the package takes ([`EVENTS`], as [`crate::intake`] maps them),
//! `active`, signed with the connection's `webhook_secret`. A pass lists the
//! repository's webhooks (pages of [`HOOKS_PER_PAGE`], at most [`MAX_HOOK_PAGES`]),
//! finds the entry's by the uuid kept in KV (`hook/<scope>/<entry>/<workspace>/<repo>`)
//! or, when KV lost it, by a URL ending with the entry's path; creates it (`POST`)
//! when there is none, and updates it (`PUT .../hooks/{uid}`) only when its URL,
//! events or active flag differ, or when the secret is not the one last set: KV
//! keeps a digest of the secret last sent ([`sdk::hooks`]), never the secret, and
//! Bitbucket never shows a webhook's secret. A pass with nothing changed makes no
//! write. Without a `public_url` the pass says why and changes nothing. Webhooks of
//! repositories the entry no longer names are left alone.

use std::collections::BTreeSet;

use protocol::wire::{CheckRunResult, TaskRunResult};
use protocol::{Code, RpcError};
use sdk::hooks::{Findings, Level};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::{State, WEBHOOK_SECRET};

/// The manifest task that keeps managed webhooks as configured.
pub const TASK: &str = "bitbucket.webhooks";
/// The doctor check that reports each entry's webhooks.
pub const CHECK: &str = "webhooks";
/// Webhooks asked for a page (`pagelen`).
pub const HOOKS_PER_PAGE: u32 = 100;
/// At most this many pages of a repository's webhooks are read.
pub const MAX_HOOK_PAGES: u32 = 5;
/// The events a managed webhook sends: every event the package takes.
pub const EVENTS: [&str; 12] = [
    "issue:comment_created",
    "issue:created",
    "issue:updated",
    "pullrequest:approved",
    "pullrequest:changes_request_created",
    "pullrequest:comment_created",
    "pullrequest:created",
    "pullrequest:fulfilled",
    "pullrequest:rejected",
    "pullrequest:updated",
    "repo:commit_status_created",
    "repo:commit_status_updated",
];

/// What KV keeps of a repository's managed webhook (its uuid).
pub type Kept = sdk::hooks::Kept<String>;

/// The KV key of an entry's webhook on `repository` (`workspace/repo_slug`).
pub fn kv_key(entry: &EntryConfig, repository: &str) -> String {
    format!("hook/{}/{}/{}", entry.scope_id, entry.name, repository)
}

/// The digest KV keeps of a secret (never the secret).
pub fn secret_digest(secret: &[u8]) -> String {
    sdk::hooks::secret_digest(crate::NAME, secret)
}

/// The URL a managed webhook of `entry` delivers to under `public_url`.
pub fn desired_url(entry: &EntryConfig, public_url: &str) -> String {
    format!("{}{}", public_url.trim_end_matches('/'), entry.path)
}

/// The body of a create or update: description, URL, active, events, secret (and
/// `type`, which the description requires of every object and Bitbucket accepts).
pub fn body(entry: &EntryConfig, url: &str, secret: &str) -> Value {
    json!({
        "type": "webhook_subscription",
        "description": format!("Open Conduit {}/{}", entry.scope_id, entry.name),
        "url": url,
        "active": true,
        "events": EVENTS,
        "secret": secret,
    })
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// How `hook` differs from one delivering to `url` (URL, events, active), one
/// line each; empty when it is as wanted.
pub fn drift(hook: &Value, url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let have_url = hook.get("url").and_then(Value::as_str);
    if have_url != Some(url) {
        out.push(format!(
            "delivers to {}, not {url}",
            have_url.unwrap_or("no URL")
        ));
    }
    let have: BTreeSet<&str> = hook["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let want: BTreeSet<&str> = EVENTS.into_iter().collect();
    if have != want {
        let missing: Vec<&str> = want.difference(&have).copied().collect();
        let extra: Vec<&str> = have.difference(&want).copied().collect();
        let mut why = Vec::new();
        if !missing.is_empty() {
            why.push(format!("lacks {}", missing.join(", ")));
        }
        if !extra.is_empty() {
            why.push(format!("also sends {}", extra.join(", ")));
        }
        out.push(format!("its events differ ({})", why.join("; ")));
    }
    if hook["active"] != json!(true) {
        out.push("is inactive".into());
    }
    out
}

/// The webhook of `entry`: the one with the kept uuid, else the first whose URL
/// ends with the entry's path.
pub fn find<'a>(
    hooks: &'a [Value],
    kept_id: Option<&str>,
    entry: &EntryConfig,
) -> Option<&'a Value> {
    if let Some(id) = kept_id {
        if let Some(h) = hooks.iter().find(|h| text(h, "uuid") == id) {
            return Some(h);
        }
    }
    hooks.iter().find(|h| {
        h.get("url")
            .and_then(Value::as_str)
            .map(|u| u.split(['?', '#']).next().unwrap_or_default())
            .is_some_and(|u| u.trim_end_matches('/').ends_with(&entry.path))
    })
}

/// Every webhook of `repository`.
pub async fn list(client: &crate::api::Client, repository: &str) -> Result<Vec<Value>, RpcError> {
    let mut out = Vec::new();
    for page in 1..=MAX_HOOK_PAGES {
        let data = client
            .json(
                "GET",
                format!("/repositories/{repository}/hooks?pagelen={HOOKS_PER_PAGE}&page={page}"),
                None,
            )
            .await
            .map_err(scope_hint)?;
        let values = data
            .get("values")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                RpcError::new(
                    Code::Unavailable,
                    format!("Bitbucket answered no webhooks list for {repository}"),
                )
            })?;
        out.extend(values.iter().cloned());
        if data
            .get("next")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Ok(out);
        }
    }
    Err(RpcError::new(
        Code::Invalid,
        format!(
            "{repository} has more than {MAX_HOOK_PAGES} pages of {HOOKS_PER_PAGE} webhooks (MAX_HOOK_PAGES)"
        ),
    ))
}

/// A refused credential's error, saying what managing webhooks needs.
fn scope_hint(mut e: RpcError) -> RpcError {
    let code = e
        .data
        .as_ref()
        .and_then(|d| d.get("code"))
        .and_then(Value::as_str);
    if code == Some(Code::Unauthorized.as_str()) {
        e.message.push_str(
            "; reading and writing webhooks needs the webhook scope (and admin on the repository)",
        );
    }
    e
}

/// A webhook's uuid (`{…}`) as a path segment: its braces percent-encoded.
pub fn path_uid(uid: &str) -> String {
    uid.replace('{', "%7B").replace('}', "%7D")
}

fn labelled(label: &str, mut e: RpcError) -> RpcError {
    e.message = format!("{label}: {}", e.message);
    e
}

fn label(entry: &EntryConfig) -> String {
    format!("{}/{}", entry.scope_id, entry.name)
}

/// One entry's pass: a line per repository.
async fn ensure(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    public_url: &str,
) -> Result<Vec<String>, RpcError> {
    let label = label(entry);
    if public_url.is_empty() {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "{label}: no public_url (settings.webhooks.public_url or a tunnel): the \
                 webhook's URL is unknown, so nothing was changed"
            ),
        ));
    }
    let secret = state
        .secret(host, &entry.scope_id, &entry.connection, WEBHOOK_SECRET)
        .await
        .map_err(|e| labelled(&label, e))?;
    let digest = secret_digest(secret.as_bytes());
    let client = state
        .client(host, &entry.scope_id, &entry.connection)
        .await
        .map_err(|e| labelled(&label, e))?;
    let url = desired_url(entry, public_url);
    let mut lines = Vec::new();
    for repo in &entry.config.repositories {
        let hooks = list(&client, repo).await.map_err(|e| labelled(&label, e))?;
        let key = kv_key(entry, repo);
        let (kept, check) = sdk::hooks::read::<String>(host, &key).await?;
        let found = find(&hooks, kept.as_ref().map(|k| k.id.as_str()), entry);
        let (id, line) = match found.map(|h| (text(h, "uuid").to_string(), h)) {
            Some((id, hook)) if !id.is_empty() => {
                let mut why = drift(hook, &url);
                if Kept::secret_differs(kept.as_ref(), &digest) {
                    why.push("its secret is not the one last set".into());
                }
                if why.is_empty() {
                    (
                        id.clone(),
                        format!("{label}: {repo} webhook {id} is as configured"),
                    )
                } else {
                    client
                        .json(
                            "PUT",
                            format!("/repositories/{repo}/hooks/{}", path_uid(&id)),
                            Some(body(entry, &url, &secret)),
                        )
                        .await
                        .map_err(|e| labelled(&label, scope_hint(e)))?;
                    (
                        id.clone(),
                        format!("{label}: updated {repo} webhook {id} ({})", why.join("; ")),
                    )
                }
            }
            _ => {
                let made = client
                    .json(
                        "POST",
                        format!("/repositories/{repo}/hooks"),
                        Some(body(entry, &url, &secret)),
                    )
                    .await
                    .map_err(|e| labelled(&label, scope_hint(e)))?;
                let id = text(&made, "uuid").to_string();
                if id.is_empty() {
                    return Err(RpcError::new(
                        Code::Unavailable,
                        format!(
                            "{label}: Bitbucket answered no uuid for the webhook created on {repo}"
                        ),
                    ));
                }
                (
                    id.clone(),
                    format!("{label}: created {repo} webhook {id} → {url}"),
                )
            }
        };
        let now = Kept {
            id,
            secret_sha256: digest.clone(),
        };
        sdk::hooks::keep(host, &key, check, kept.as_ref(), &now).await?;
        lines.push(line);
    }
    Ok(lines)
}

/// A pass of the `bitbucket.webhooks` task over every entry with `manage_webhook`.
/// Passes never overlap. Each entry's failure is kept for doctor; any failure
/// fails the pass with every entry's lines.
pub async fn pass(state: &State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let _one = state.webhook_pass.lock().await;
    let registry = state.registry();
    let public_url = state.public_url();
    let mut report = sdk::hooks::PassReport::default();
    for entry in registry.entries.iter().filter(|e| e.config.manage_webhook) {
        let failure = report.add("bitbucket", ensure(state, host, entry, &public_url).await);
        state.note(&entry.source, failure);
    }
    report.finish()
}

/// One managed entry's findings, a line per repository.
async fn check_entry(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    public_url: &str,
    findings: &mut Findings,
) {
    let label = label(entry);
    if let Some(why) = state.note_of(&entry.source) {
        findings.push(
            Level::Fail,
            format!("{label}: last webhooks pass failed: {why}"),
        );
    }
    if public_url.is_empty() {
        findings.push(
            Level::Warn,
            format!("{label}: manage_webhook is set but there is no public_url"),
        );
        return;
    }
    let client = match state.client(host, &entry.scope_id, &entry.connection).await {
        Ok(c) => c,
        Err(e) => return findings.push(Level::Fail, format!("{label}: {}", e.message)),
    };
    let digest = match state
        .secret(host, &entry.scope_id, &entry.connection, WEBHOOK_SECRET)
        .await
    {
        Ok(s) => Some(secret_digest(s.as_bytes())),
        Err(e) => {
            findings.push(Level::Fail, format!("{label}: {}", e.message));
            None
        }
    };
    let url = desired_url(entry, public_url);
    for repo in &entry.config.repositories {
        let listed = match list(&client, repo).await {
            Ok(h) => h,
            Err(e) => {
                findings.push(Level::Fail, format!("{label}: {repo}: {}", e.message));
                continue;
            }
        };
        let kept = match sdk::hooks::read::<String>(host, &kv_key(entry, repo)).await {
            Ok((kept, _)) => kept,
            Err(e) => {
                findings.push(Level::Fail, format!("{label}: {}", e.message));
                continue;
            }
        };
        match find(&listed, kept.as_ref().map(|k| k.id.as_str()), entry) {
            None => findings.push(
                Level::Fail,
                format!(
                    "{label}: {repo} webhook missing (none delivers to …{})",
                    entry.path
                ),
            ),
            Some(hook) => {
                let id = text(hook, "uuid");
                let mut why = drift(hook, &url);
                if digest
                    .as_deref()
                    .is_some_and(|d| Kept::secret_differs(kept.as_ref(), d))
                {
                    why.push("its secret is not the one last set".into());
                }
                if why.is_empty() {
                    findings.push(Level::Ok, format!("{label}: {repo} webhook {id} ok"));
                } else {
                    findings.push(
                        Level::Warn,
                        format!("{label}: {repo} webhook {id} drifted: {}", why.join("; ")),
                    );
                }
            }
        }
    }
}

/// The `webhooks` doctor check: each managed entry's webhook per repository as
/// ok, missing, or drifted (what differs), and the last pass's failure; an entry
/// without `manage_webhook` is "not managed".
pub async fn check(state: &State, host: &sdk::Host) -> CheckRunResult {
    let registry = state.registry();
    let public_url = state.public_url();
    let mut findings = Findings::default();
    let mut hooks = 0;
    for entry in &registry.entries {
        if !entry.config.manage_webhook {
            findings.push(Level::Ok, format!("{}: not managed", label(entry)));
            continue;
        }
        hooks += entry.config.repositories.len();
        check_entry(state, host, entry, &public_url, &mut findings).await;
    }
    findings.result(crate::NAME, registry.entries.len(), hooks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_are_the_ones_intake_takes() {
        let config = crate::config::ParsedConfig::default();
        // An event intake takes reads the payload (an empty one cannot be read);
        // one it does not take is none before that.
        for e in EVENTS {
            assert!(
                crate::intake::project(&config, e, &json!({})).is_err(),
                "{e} is not an event intake takes"
            );
        }
        assert!(matches!(
            crate::intake::project(&config, "repo:push", &json!({})),
            Ok(None)
        ));
    }
}
