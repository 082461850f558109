//! The repository webhook an entry receives: finding it (for reconcile and
//! doctor), and keeping it as configured when the entry sets `manage_webhook`
//! (the `github.webhooks` task).
//!
//! A managed hook points at `{public_url}{entry path}`, sends JSON, is signed
//! with the connection's `webhook_secret`, carries the entry's events (all seven
//! when it names none) and is active. A pass lists the repository's hooks
//! (`GET /repos/{o}/{r}/hooks`), finds ours by the ID kept in KV (`hook/<scope>/<entry>`)
//! or, when KV lost it, by the URL ending with the entry's path; creates it
//! (`POST`) when there is none, and updates it (`PATCH`) only when its URL, events,
//! active flag or content type differ, or when the secret is not the one last set:
//! GitHub never shows a hook's secret, so KV keeps a SHA-256 digest of the secret
//! last sent, and a rotated `webhook_secret` is sent again. A pass with nothing
//! changed makes no write request. Without a `public_url` the pass says why and
//! changes nothing.

use std::collections::BTreeSet;

use protocol::wire::{CheckRunResult, KvCheck, TaskRunResult};
use protocol::{Code, RpcError};
use sdk::hooks::{Findings, Level};
use serde_json::{json, Value};

use crate::api::{ApiError, Client};
use crate::config::EntryConfig;
use crate::State;

/// The manifest task that keeps managed hooks as configured.
pub const TASK: &str = "github.webhooks";
/// The doctor check that reports each entry's hook.
pub const CHECK: &str = "webhooks";
/// At most this many pages of a repository's hooks are read (100 a page).
pub const MAX_HOOK_PAGES: usize = 5;

/// What KV keeps of an entry's managed hook (shared with linear's, [`sdk::hooks`]).
pub type Kept = sdk::hooks::Kept<u64>;

/// The KV key of an entry's hook.
pub fn kv_key(entry: &EntryConfig) -> String {
    format!("hook/{}/{}", entry.scope_id, entry.name)
}

/// The digest KV keeps of a secret (never the secret).
pub fn secret_digest(secret: &[u8]) -> String {
    sdk::hooks::secret_digest("github", secret)
}

/// What a managed hook should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// `{public_url}{path}`.
    pub url: String,
    /// The GitHub events.
    pub events: Vec<String>,
}

impl Desired {
    /// The hook of `entry` under `public_url`.
    pub fn of(entry: &EntryConfig, public_url: &str) -> Desired {
        Desired {
            url: format!("{}{}", public_url.trim_end_matches('/'), entry.path),
            events: entry
                .github_events()
                .into_iter()
                .map(str::to_string)
                .collect(),
        }
    }

    /// The body of an update (`PATCH`): the hook's whole configuration. A
    /// create's adds `"name": "web"`.
    pub fn body(&self, secret: &str) -> Value {
        json!({
            "active": true,
            "events": self.events,
            "config": {"url": self.url, "content_type": "json", "secret": secret, "insecure_ssl": "0"},
        })
    }
}

/// How `hook` differs from `desired` (URL, events, active, content type), one
/// line each; empty when it is as wanted.
pub fn drift(hook: &Value, desired: &Desired) -> Vec<String> {
    let mut out = Vec::new();
    let url = hook.pointer("/config/url").and_then(Value::as_str);
    if url != Some(desired.url.as_str()) {
        out.push(format!(
            "delivers to {}, not {}",
            url.unwrap_or("no URL"),
            desired.url
        ));
    }
    let have: BTreeSet<&str> = hook["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let want: BTreeSet<&str> = desired.events.iter().map(String::as_str).collect();
    if have != want {
        out.push(format!(
            "sends events [{}], not [{}]",
            have.into_iter().collect::<Vec<_>>().join(", "),
            want.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if hook["active"] != json!(true) {
        out.push("is inactive".into());
    }
    let content_type = hook.pointer("/config/content_type").and_then(Value::as_str);
    if content_type != Some("json") {
        out.push(format!(
            "sends content type {}, not json",
            content_type.unwrap_or("form (the default)")
        ));
    }
    out
}

/// The hook delivering to `entry`: the one with the kept ID, else the first
/// whose URL ends with the entry's path.
pub fn find<'a>(
    hooks: &'a [Value],
    kept_id: Option<u64>,
    entry: &EntryConfig,
) -> Option<&'a Value> {
    if let Some(id) = kept_id {
        if let Some(h) = hooks.iter().find(|h| h["id"].as_u64() == Some(id)) {
            return Some(h);
        }
    }
    hooks.iter().find(|h| {
        h.pointer("/config/url")
            .and_then(Value::as_str)
            .map(|u| u.split(['?', '#']).next().unwrap_or_default())
            .is_some_and(|u| u.trim_end_matches('/').ends_with(&entry.path))
    })
}

/// An API failure on the repository's hooks, with what the token needs when it
/// is a permission problem (401, 403, 404).
pub fn explain(e: &ApiError, entry: &EntryConfig, what: &str) -> RpcError {
    let mut r = e.to_rpc();
    if matches!(e.status, Some(401 | 403 | 404)) {
        r.message = format!(
            "{what} of {}: {e}; the connection's token needs the repository's Webhooks \
             permission (read for reconcile, read and write for manage_webhook; \
             admin:repo_hook for a classic token)",
            entry.repository
        );
    } else {
        r.message = format!("{what} of {}: {e}", entry.repository);
    }
    r
}

/// Every hook of the entry's repository.
pub async fn list(client: &Client, entry: &EntryConfig) -> Result<Vec<Value>, RpcError> {
    let (owner, repo) = entry.owner_repo();
    let (hooks, more) = client
        .get_all(
            &format!("/repos/{owner}/{repo}/hooks?per_page=100"),
            MAX_HOOK_PAGES,
        )
        .await
        .map_err(|e| explain(&e, entry, "listing the webhooks"))?;
    if more {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "{} has more than {} pages of webhooks (MAX_HOOK_PAGES)",
                entry.repository, MAX_HOOK_PAGES
            ),
        ));
    }
    Ok(hooks)
}

/// What KV keeps of the entry's hook, with the read's precondition.
pub async fn kept(
    host: &sdk::Host,
    entry: &EntryConfig,
) -> Result<(Option<Kept>, KvCheck), RpcError> {
    sdk::hooks::read(host, &kv_key(entry)).await
}

/// The ID of the hook delivering to `entry` (for reconcile): a clear error when
/// there is none.
pub async fn hook_id(
    client: &Client,
    host: &sdk::Host,
    entry: &EntryConfig,
) -> Result<u64, RpcError> {
    let (kept, _) = kept(host, entry).await?;
    let hooks = list(client, entry).await?;
    find(&hooks, kept.map(|k| k.id), entry)
        .and_then(|h| h["id"].as_u64())
        .ok_or_else(|| {
            RpcError::new(
                Code::NotFound,
                format!(
                    "{} has no webhook delivering to …{} ({} hooks listed): add one, or set \
                     the entry's manage_webhook",
                    entry.repository,
                    entry.path,
                    hooks.len()
                ),
            )
        })
}

/// One entry's pass: the line the task reports.
async fn ensure(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    public_url: &str,
) -> Result<String, RpcError> {
    let label = format!("{}/{}", entry.scope_id, entry.name);
    if public_url.is_empty() {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "{label}: no public_url (settings.webhooks.public_url or a tunnel): the \
                 webhook's URL is unknown, so nothing was changed"
            ),
        ));
    }
    let desired = Desired::of(entry, public_url);
    let secret = state
        .webhook_secret(host, &entry.scope_id, &entry.connection)
        .await
        .map_err(|why| RpcError::new(Code::Unavailable, format!("{label}: {why}")))?;
    let secret = std::str::from_utf8(&secret)
        .map_err(|_| {
            RpcError::new(
                Code::Invalid,
                format!("{label}: the webhook_secret is not UTF-8 text"),
            )
        })?
        .to_string();
    let digest = secret_digest(secret.as_bytes());
    let client = state
        .client(host, &entry.scope_id, &entry.connection)
        .await?;
    let (kept, check) = kept(host, entry).await?;
    let hooks = list(&client, entry).await?;
    let (owner, repo) = entry.owner_repo();
    let found = find(&hooks, kept.as_ref().map(|k| k.id), entry);
    let (id, line) = match found.and_then(|h| h["id"].as_u64().map(|id| (id, h))) {
        None => {
            let made = client
                .request(
                    "POST",
                    &format!("/repos/{owner}/{repo}/hooks"),
                    Some({
                        let mut body = desired.body(&secret);
                        body["name"] = json!("web");
                        body
                    }),
                )
                .await
                .map_err(|e| explain(&e, entry, "creating the webhook"))?;
            let id = made["id"].as_u64().ok_or_else(|| {
                RpcError::new(
                    Code::Unavailable,
                    format!("{label}: GitHub created a webhook but answered no id"),
                )
            })?;
            (id, format!("{label}: created hook {id} → {}", desired.url))
        }
        Some((id, hook)) => {
            let mut why = drift(hook, &desired);
            if Kept::secret_differs(kept.as_ref(), &digest) {
                why.push("its secret is not the one last set".into());
            }
            if why.is_empty() {
                (id, format!("{label}: hook {id} is as configured"))
            } else {
                client
                    .request(
                        "PATCH",
                        &format!("/repos/{owner}/{repo}/hooks/{id}"),
                        Some(desired.body(&secret)),
                    )
                    .await
                    .map_err(|e| explain(&e, entry, "updating the webhook"))?;
                (
                    id,
                    format!("{label}: updated hook {id} ({})", why.join("; ")),
                )
            }
        }
    };
    let now = Kept {
        id,
        secret_sha256: digest,
    };
    sdk::hooks::keep(host, &kv_key(entry), check, kept.as_ref(), &now).await?;
    Ok(line)
}

/// A pass of the `github.webhooks` task over every entry with `manage_webhook`. Passes
/// never overlap. Each entry's outcome is kept for doctor; any failure fails the
/// pass with every entry's line.
pub async fn pass(state: &State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let _one = state.webhook_pass.lock().await;
    let registry = state.registry();
    let public_url = state.public_url();
    let mut lines = Vec::new();
    let mut failed = false;
    for entry in registry.entries.iter().filter(|e| e.manage_webhook) {
        match ensure(state, host, entry, &public_url).await {
            Ok(line) => {
                state.note(&entry.source, crate::NOTE_WEBHOOK, None);
                lines.push(line);
            }
            Err(e) => {
                failed = true;
                eprintln!("github: webhooks task: {}", e.message);
                state.note(&entry.source, crate::NOTE_WEBHOOK, Some(e.message.clone()));
                lines.push(e.message);
            }
        }
    }
    if lines.is_empty() {
        lines.push("no entry sets manage_webhook".into());
    }
    let detail = lines.join("\n");
    if failed {
        Err(RpcError::new(Code::Unavailable, detail))
    } else {
        Ok(TaskRunResult { detail })
    }
}

/// The `webhooks` doctor check: for each entry, the hook delivering to it (none
/// is a failure: reconcile needs one), its drift from what a managed entry
/// wants, and the last reconcile or webhook pass error.
pub async fn check(state: &State, host: &sdk::Host) -> CheckRunResult {
    let registry = state.registry();
    let public_url = state.public_url();
    let mut findings = Findings::default();
    for entry in &registry.entries {
        let label = format!("{}/{}", entry.scope_id, entry.name);
        let mut problems: Vec<(Level, String)> = state
            .notes_of(&entry.source)
            .into_iter()
            .map(|(kind, why)| {
                (
                    Level::Fail,
                    format!("{label}: last {kind} pass failed: {why}"),
                )
            })
            .collect();
        let found = async {
            let client = state
                .client(host, &entry.scope_id, &entry.connection)
                .await?;
            let (kept, _) = kept(host, entry).await?;
            let hooks = list(&client, entry).await?;
            Ok::<_, RpcError>(find(&hooks, kept.map(|k| k.id), entry).cloned())
        }
        .await;
        match found {
            Err(e) => problems.push((Level::Fail, format!("{label}: {}", e.message))),
            Ok(None) => problems.push((
                Level::Fail,
                format!(
                    "{label}: {} has no webhook delivering to …{}",
                    entry.repository, entry.path
                ),
            )),
            Ok(Some(hook)) => {
                let why = if entry.manage_webhook && !public_url.is_empty() {
                    drift(&hook, &Desired::of(entry, &public_url))
                } else if hook["active"] != json!(true) {
                    vec!["is inactive".into()]
                } else {
                    Vec::new()
                };
                let id = hook["id"].as_u64().unwrap_or_default();
                if why.is_empty() {
                    findings.push(Level::Ok, format!("{label}: hook {id} ok"));
                } else {
                    problems.push((
                        Level::Warn,
                        format!("{label}: hook {id} {}", why.join("; ")),
                    ));
                }
            }
        }
        if entry.manage_webhook && public_url.is_empty() {
            problems.push((
                Level::Warn,
                format!("{label}: manage_webhook is set but there is no public_url"),
            ));
        }
        for (level, line) in problems {
            findings.push(level, line);
        }
    }
    findings.result("github", registry.entries.len(), registry.entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::wire::{ConfigureParams, Entry};

    fn entry(config: Value) -> EntryConfig {
        let params = ConfigureParams {
            entries: vec![Entry {
                scope_id: "demo".into(),
                name: "repo".into(),
                entry_type: "github".into(),
                connection: "gh".into(),
                config,
                ..Default::default()
            }],
            ..Default::default()
        };
        match crate::config::Registry::from_params(&params) {
            Ok(r) => r.entries[0].clone(),
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_managed_entry_wants_its_url_events_json_and_active() {
        let e = entry(
            json!({"repository": "o/r", "events": ["issues", "check_run"], "manage_webhook": true}),
        );
        assert!(e.manage_webhook);
        assert_eq!(e.reconcile_interval_s, 300);
        let d = Desired::of(&e, "https://hooks.example.com/");
        assert_eq!(d.url, "https://hooks.example.com/github/demo/repo");
        assert_eq!(d.events, vec!["issues", "check_run"]);
        let body = d.body("s3cret");
        assert_eq!(body["config"]["secret"], "s3cret");
        assert_eq!(body["config"]["content_type"], "json");
        let same = json!({"id": 1, "active": true, "events": ["check_run", "issues"],
            "config": {"url": d.url, "content_type": "json"}});
        assert!(drift(&same, &d).is_empty());
        let off = json!({"id": 1, "active": false, "events": ["push"],
            "config": {"url": "https://old.example.com/github/demo/repo", "content_type": "form"}});
        assert_eq!(drift(&off, &d).len(), 4, "{:?}", drift(&off, &d));
    }

    #[test]
    fn the_hook_is_found_by_kept_id_else_by_path() {
        let e = entry(json!({"repository": "o/r"}));
        let hooks = vec![
            json!({"id": 1, "config": {"url": "https://a.example.com/other"}}),
            json!({"id": 2, "config": {"url": "https://a.example.com/github/demo/repo/"}}),
            json!({"id": 3, "config": {"url": "https://b.example.com/x"}}),
        ];
        assert_eq!(
            find(&hooks, None, &e).map(|h| h["id"].clone()),
            Some(json!(2))
        );
        assert_eq!(
            find(&hooks, Some(3), &e).map(|h| h["id"].clone()),
            Some(json!(3))
        );
        assert_eq!(
            find(&hooks, Some(9), &e).map(|h| h["id"].clone()),
            Some(json!(2))
        );
        assert!(find(&hooks[..1], None, &e).is_none());
    }

    #[test]
    fn bad_new_fields_are_refused_naming_them() {
        for (config, field) in [
            (
                json!({"repository": "o/r", "reconcile_interval_s": -1}),
                "/reconcile_interval_s",
            ),
            (
                json!({"repository": "o/r", "reconcile_interval_s": "5"}),
                "/reconcile_interval_s",
            ),
            (
                json!({"repository": "o/r", "manage_webhook": "yes"}),
                "/manage_webhook",
            ),
            (
                json!({"repository": "o/r", "manage_webhok": true}),
                "/manage_webhok",
            ),
        ] {
            match EntryConfig::parse_config(&config) {
                Err(e) => assert_eq!(e.pointer, field),
                Ok(p) => panic!("{config} parsed: {p:?}"),
            }
        }
        let off =
            EntryConfig::parse_config(&json!({"repository": "o/r", "reconcile_interval_s": 0}));
        assert_eq!(off.map(|p| p.reconcile_interval_s).ok(), Some(0));
    }
}
