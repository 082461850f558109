//! The webhooks an entry receives, kept as configured when the entry sets
//! `manage_webhook` (the `linear.webhooks` task), and the `webhooks` doctor check.
//!
//! A Linear webhook belongs to one team (`teamId`, which `webhookUpdate` cannot
//! change), so a managed entry has one webhook per team it names: URL
//! `{public_url}{entry path}`, resource types `Issue` and `Comment`, signed with the
//! connection's `webhook_secret`, enabled. A pass lists the workspace's webhooks
//! ([`WEBHOOKS_QUERY`], pages of 100, at most [`MAX_HOOK_PAGES`]), finds each team's
//! by the ID kept in KV (`hook/<scope>/<entry>/<TEAM>`) or, when KV lost it, by a
//! URL ending with the entry's path and the team; creates it
//! ([`WEBHOOK_CREATE_MUTATION`]) when there is none, and updates it
//! ([`WEBHOOK_UPDATE_MUTATION`]) only when its URL, resource types or enabled flag
//! differ, or when the secret is not the one last set: KV keeps a digest of the
//! secret last sent ([`sdk::hooks`], shared with the github package), never the
//! secret, and the package never reads a webhook's secret back. A pass with nothing
//! changed makes no write. Without a `public_url` the pass says why and changes
//! nothing. Webhooks of teams the entry no longer names are left alone.

use std::collections::BTreeSet;

use protocol::wire::{CheckRunResult, TaskRunResult};
use protocol::{Code, RpcError};
use sdk::hooks::{Findings, Level};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::{State, WEBHOOK_SECRET};

/// The manifest task that keeps managed webhooks as configured.
pub const TASK: &str = "linear.webhooks";
/// The doctor check that reports each entry's webhooks.
pub const CHECK: &str = "webhooks";
/// Webhooks asked for a page.
pub const HOOKS_PER_PAGE: u32 = 100;
/// At most this many pages of the workspace's webhooks are read.
pub const MAX_HOOK_PAGES: usize = 5;
/// The resource types a managed webhook sends.
pub const RESOURCE_TYPES: [&str; 2] = ["Comment", "Issue"];

/// What KV keeps of a team's managed webhook.
pub type Kept = sdk::hooks::Kept<String>;

/// The workspace's webhooks, a page.
pub const WEBHOOKS_QUERY: &str = "query OcWebhooks($first: Int!, $after: String) {
  webhooks(first: $first, after: $after) {
    nodes { id url enabled resourceTypes team { id key } }
    pageInfo { hasNextPage endCursor }
  }
}";

/// A webhook created.
pub const WEBHOOK_CREATE_MUTATION: &str = "mutation OcWebhookCreate($input: WebhookCreateInput!) {
  webhookCreate(input: $input) {
    success
    webhook { id url enabled resourceTypes team { id key } }
  }
}";

/// A webhook updated.
pub const WEBHOOK_UPDATE_MUTATION: &str =
    "mutation OcWebhookUpdate($id: String!, $input: WebhookUpdateInput!) {
  webhookUpdate(id: $id, input: $input) {
    success
    webhook { id url enabled resourceTypes team { id key } }
  }
}";

/// Every document this module sends.
pub const DOCUMENTS: [(&str, &str); 3] = [
    ("OcWebhooks", WEBHOOKS_QUERY),
    ("OcWebhookCreate", WEBHOOK_CREATE_MUTATION),
    ("OcWebhookUpdate", WEBHOOK_UPDATE_MUTATION),
];

/// The KV key of an entry's webhook for `team`.
pub fn kv_key(entry: &EntryConfig, team: &str) -> String {
    format!("hook/{}/{}/{}", entry.scope_id, entry.name, team)
}

/// The digest KV keeps of a secret (never the secret).
pub fn secret_digest(secret: &[u8]) -> String {
    sdk::hooks::secret_digest(crate::NAME, secret)
}

/// What a managed webhook should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// `{public_url}{path}`.
    pub url: String,
    /// The team's key.
    pub team: String,
}

impl Desired {
    /// The webhook of `entry` for `team` under `public_url`.
    pub fn of(entry: &EntryConfig, team: &str, public_url: &str) -> Desired {
        Desired {
            url: format!("{}{}", public_url.trim_end_matches('/'), entry.path),
            team: team.to_string(),
        }
    }

    /// The input of `webhookUpdate`: what a webhook can be changed in.
    pub fn update_input(&self, secret: &str) -> Value {
        json!({
            "url": self.url,
            "resourceTypes": RESOURCE_TYPES,
            "secret": secret,
            "enabled": true,
        })
    }

    /// The input of `webhookCreate`: the update's, with the team and a label.
    pub fn create_input(&self, secret: &str, entry: &EntryConfig) -> Value {
        let mut input = self.update_input(secret);
        input["teamId"] = json!(self.team);
        input["label"] = json!(format!("Open Conduit {}/{}", entry.scope_id, entry.name));
        input
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// How `hook` differs from `desired` (URL, resource types, enabled), one line
/// each; empty when it is as wanted.
pub fn drift(hook: &Value, desired: &Desired) -> Vec<String> {
    let mut out = Vec::new();
    let url = hook.get("url").and_then(Value::as_str);
    if url != Some(desired.url.as_str()) {
        out.push(format!(
            "delivers to {}, not {}",
            url.unwrap_or("no URL"),
            desired.url
        ));
    }
    let have: BTreeSet<&str> = hook["resourceTypes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let want: BTreeSet<&str> = RESOURCE_TYPES.into_iter().collect();
    if have != want {
        out.push(format!(
            "sends [{}], not [{}]",
            have.into_iter().collect::<Vec<_>>().join(", "),
            want.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if hook["enabled"] != json!(true) {
        out.push("is disabled".into());
    }
    out
}

/// The webhook of `entry` for `team`: the one with the kept ID (when it is the
/// team's), else the first of the team whose URL ends with the entry's path.
pub fn find<'a>(
    hooks: &'a [Value],
    kept_id: Option<&str>,
    entry: &EntryConfig,
    team: &str,
) -> Option<&'a Value> {
    let of_team = |h: &&Value| text(h, "/team/key").eq_ignore_ascii_case(team);
    if let Some(id) = kept_id {
        if let Some(h) = hooks.iter().filter(of_team).find(|h| text(h, "/id") == id) {
            return Some(h);
        }
    }
    hooks.iter().filter(of_team).find(|h| {
        h.get("url")
            .and_then(Value::as_str)
            .map(|u| u.split(['?', '#']).next().unwrap_or_default())
            .is_some_and(|u| u.trim_end_matches('/').ends_with(&entry.path))
    })
}

/// Every webhook of the workspace the connection's key sees.
pub async fn list(client: &crate::api::Client) -> Result<Vec<Value>, RpcError> {
    let mut out = Vec::new();
    let mut after = Value::Null;
    for _ in 0..MAX_HOOK_PAGES {
        let data = client
            .send(
                "listing the webhooks",
                WEBHOOKS_QUERY,
                json!({"first": HOOKS_PER_PAGE, "after": after}),
            )
            .await
            .map_err(admin_hint)?;
        let nodes = data
            .pointer("/webhooks/nodes")
            .and_then(Value::as_array)
            .ok_or_else(|| RpcError::new(Code::Unavailable, "Linear answered no webhooks list"))?;
        out.extend(nodes.iter().cloned());
        let next = data
            .pointer("/webhooks/pageInfo/endCursor")
            .and_then(Value::as_str)
            .filter(|c| {
                !c.is_empty()
                    && data.pointer("/webhooks/pageInfo/hasNextPage") == Some(&json!(true))
            });
        match next {
            Some(c) => after = json!(c),
            None => return Ok(out),
        }
    }
    Err(RpcError::new(
        Code::Invalid,
        format!(
            "the workspace has more than {} pages of {HOOKS_PER_PAGE} webhooks (MAX_HOOK_PAGES)",
            MAX_HOOK_PAGES
        ),
    ))
}

/// A refused key's error, saying what managing webhooks needs.
fn admin_hint(mut e: RpcError) -> RpcError {
    let code = e
        .data
        .as_ref()
        .and_then(|d| d.get("code"))
        .and_then(Value::as_str);
    if code == Some(Code::Unauthorized.as_str()) {
        e.message
            .push_str("; reading and writing webhooks needs a key with admin scope");
    }
    e
}

fn labelled(label: &str, mut e: RpcError) -> RpcError {
    e.message = format!("{label}: {}", e.message);
    e
}

fn label(entry: &EntryConfig) -> String {
    format!("{}/{}", entry.scope_id, entry.name)
}

/// One entry's pass: a line per team.
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
    let hooks = list(&client).await.map_err(|e| labelled(&label, e))?;
    let mut lines = Vec::new();
    for team in &entry.config.teams {
        let desired = Desired::of(entry, team, public_url);
        let key = kv_key(entry, team);
        let (kept, check) = sdk::hooks::read::<String>(host, &key).await?;
        let found = find(&hooks, kept.as_ref().map(|k| k.id.as_str()), entry, team);
        let (id, line) = match found.map(|h| (text(h, "/id").to_string(), h)) {
            Some((id, hook)) if !id.is_empty() => {
                let mut why = drift(hook, &desired);
                if Kept::secret_differs(kept.as_ref(), &digest) {
                    why.push("its secret is not the one last set".into());
                }
                if why.is_empty() {
                    (
                        id.clone(),
                        format!("{label}: {team} webhook {id} is as configured"),
                    )
                } else {
                    let data = client
                        .send(
                            "updating the webhook",
                            WEBHOOK_UPDATE_MUTATION,
                            json!({"id": id, "input": desired.update_input(&secret)}),
                        )
                        .await
                        .map_err(|e| labelled(&label, admin_hint(e)))?;
                    if data.pointer("/webhookUpdate/success") != Some(&json!(true)) {
                        return Err(RpcError::new(
                            Code::Unavailable,
                            format!("{label}: Linear did not update webhook {id}"),
                        ));
                    }
                    (
                        id.clone(),
                        format!("{label}: updated {team} webhook {id} ({})", why.join("; ")),
                    )
                }
            }
            _ => {
                let data = client
                    .send(
                        "creating the webhook",
                        WEBHOOK_CREATE_MUTATION,
                        json!({"input": desired.create_input(&secret, entry)}),
                    )
                    .await
                    .map_err(|e| labelled(&label, admin_hint(e)))?;
                let id = text(&data, "/webhookCreate/webhook/id").to_string();
                if id.is_empty() || data.pointer("/webhookCreate/success") != Some(&json!(true)) {
                    return Err(RpcError::new(
                        Code::Unavailable,
                        format!("{label}: Linear created no webhook for team {team}"),
                    ));
                }
                (
                    id.clone(),
                    format!("{label}: created {team} webhook {id} → {}", desired.url),
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

/// A pass of the `linear.webhooks` task over every entry with `manage_webhook`.
/// Passes never overlap. Each entry's failure is kept for doctor; any failure
/// fails the pass with every entry's lines.
pub async fn pass(state: &State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let _one = state.webhook_pass.lock().await;
    let registry = state.registry();
    let public_url = state.public_url();
    let mut report = sdk::hooks::PassReport::default();
    for entry in registry.entries.iter().filter(|e| e.config.manage_webhook) {
        let failure = report.add("linear", ensure(state, host, entry, &public_url).await);
        state.note(&entry.source, failure);
    }
    report.finish()
}

/// One managed entry's findings.
async fn check_entry(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    public_url: &str,
    hooks: &mut Option<Result<Vec<Value>, String>>,
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
    // One listing serves every entry of the same connection (its workspace's
    // webhooks).
    if hooks.is_none() {
        *hooks = Some(list(&client).await.map_err(|e| e.message));
    }
    let listed = match hooks {
        Some(Ok(h)) => h.clone(),
        Some(Err(why)) => return findings.push(Level::Fail, format!("{label}: {why}")),
        None => Vec::new(),
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
    for team in &entry.config.teams {
        let kept = match sdk::hooks::read::<String>(host, &kv_key(entry, team)).await {
            Ok((kept, _)) => kept,
            Err(e) => {
                findings.push(Level::Fail, format!("{label}: {}", e.message));
                continue;
            }
        };
        let desired = Desired::of(entry, team, public_url);
        match find(&listed, kept.as_ref().map(|k| k.id.as_str()), entry, team) {
            None => findings.push(
                Level::Fail,
                format!(
                    "{label}: {team} webhook missing (none delivers to …{})",
                    entry.path
                ),
            ),
            Some(hook) => {
                let id = text(hook, "/id");
                let mut why = drift(hook, &desired);
                if digest
                    .as_deref()
                    .is_some_and(|d| Kept::secret_differs(kept.as_ref(), d))
                {
                    why.push("its secret is not the one last set".into());
                }
                if why.is_empty() {
                    findings.push(Level::Ok, format!("{label}: {team} webhook {id} ok"));
                } else {
                    findings.push(
                        Level::Warn,
                        format!("{label}: {team} webhook {id} drifted: {}", why.join("; ")),
                    );
                }
            }
        }
    }
}

/// The `webhooks` doctor check: each managed entry's webhook per team as ok,
/// missing, or drifted (what differs), and the last pass's failure; an entry
/// without `manage_webhook` is "not managed".
pub async fn check(state: &State, host: &sdk::Host) -> CheckRunResult {
    let registry = state.registry();
    let public_url = state.public_url();
    let mut findings = Findings::default();
    let mut listings: std::collections::HashMap<String, Option<Result<Vec<Value>, String>>> =
        Default::default();
    let mut hooks = 0;
    for entry in &registry.entries {
        if !entry.config.manage_webhook {
            findings.push(Level::Ok, format!("{}: not managed", label(entry)));
            continue;
        }
        hooks += entry.config.teams.len();
        let listing = listings
            .entry(format!("{}\n{}", entry.scope_id, entry.connection))
            .or_default();
        check_entry(state, host, entry, &public_url, listing, &mut findings).await;
    }
    findings.result(crate::NAME, registry.entries.len(), hooks)
}
