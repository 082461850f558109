//! `event.render_owned`: an executor renders its prompt's Events through the
//! extensions that own their families (spec: Prompt rendering).
//!
//! The executor names the Events (at most [`MAX_RENDER_EVENTS`]); the host reads each
//! again from the store, in the executor's own scopes, so what is rendered is the
//! Event as accepted, never what the executor sent: an Event, or a Work, outside the
//! scopes whose configuration uses the executor refuses the whole call
//! (`unauthorized`), as does a connection not bound to it. The scopes an executor
//! serves are those of its identity and those whose bindings name one of its
//! executors ([`served_scopes`]). Each Event then goes to
//! the running extension that declares its family, as `event.render` (with the Work,
//! the binding's connection and the byte bound), after the payload read gate: an
//! Event whose payload the owner cannot read is not sent. The calls run at most
//! [`RENDER_CONCURRENCY`] at once, each bounded by [`RENDER_TIMEOUT`] and all of them
//! by [`RENDER_TOTAL`].
//!
//! An Event with no owner, or whose owner is not running, refuses, errs, times out, or
//! whose payload is unreadable, gets an empty text: the executor renders it
//! generically. One Event never fails the call. The host cuts an owner's text to the
//! bound again (at a character boundary, `truncated`), whatever the owner said.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use crate::identity::{declared_family, gate_wire_event, Identity};
use crate::storage::read_event;
use busapi::store::WorkGetRequest;
use busapi::Call;
use daemon::bus::Bus;
use protocol::config::Config;
use protocol::manifest::Manifest;
use protocol::wire::{
    render_action, EventRenderOwnedParams, EventRenderOwnedResult, EventRenderParams,
    EventRenderResult, RenderedEvent, ACTION_EVENT_FAMILY, CORE_PROVIDER, MAX_RENDERED_BYTES,
};
use protocol::{CallError, Code, Reply, RpcError};
use serde_json::value::RawValue;
use serde_json::Value;

/// The most Events one `event.render_owned` may name.
pub const MAX_RENDER_EVENTS: usize = 100;
/// How long one owner's `event.render` may take.
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long all the renderings of one `event.render_owned` may take together; an
/// Event not rendered by then gets an empty text.
pub const RENDER_TOTAL: Duration = Duration::from_secs(20);
/// How many `event.render` calls one `event.render_owned` has in flight at once.
pub const RENDER_CONCURRENCY: usize = 8;

/// A call to a running package, answered with its raw reply.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, RpcError>> + Send + 'a>>;

/// What the renderings need of the packages (extrunner's runner implements it): their
/// manifests, the configuration in force, and a call to one of them.
pub trait Packages: Send + Sync {
    /// The names of the packages, in discovery order.
    fn names(&self) -> Vec<&str>;
    /// The manifest of the package `name`.
    fn manifest(&self, name: &str) -> Option<&Manifest>;
    /// The configuration generation last applied, if any.
    /// The scopes whose configuration uses the package `name`.
    fn scopes_of(&self, name: &str) -> Vec<String>;
    fn applied(&self) -> Option<Arc<Config>>;
    /// A host-to-extension call of `method` to the package `name`, bounded by `timeout`
    /// (the runner's `Runner::call`, not in a transaction, without cancellation).
    fn call<'a>(
        &'a self,
        name: &'a str,
        method: &'a str,
        params: Box<RawValue>,
        timeout: Duration,
    ) -> CallFuture<'a>;
}

/// The running extensions the host renders through: extrunner's runner, attached
/// once it is shared (`Runner::shared`).
#[derive(Default)]
pub struct Owners {
    runner: OnceLock<Weak<dyn Packages>>,
}

impl std::fmt::Debug for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owners")
            .field("attached", &self.runner.get().is_some())
            .finish()
    }
}

impl Owners {
    /// Nothing attached yet: every Event renders generically.
    pub fn new() -> Arc<Owners> {
        Arc::new(Owners::default())
    }

    /// Render through `packages`.
    pub fn attach(&self, packages: Weak<dyn Packages>) {
        let _ = self.runner.set(packages);
    }

    /// The packages, while the runner lives.
    pub fn runner(&self) -> Option<Arc<dyn Packages>> {
        self.runner.get().and_then(Weak::upgrade)
    }
}

/// The extension among `packages` whose manifest declares `event_type`'s family.
pub fn owner_of<'a>(
    packages: impl IntoIterator<Item = (&'a str, &'a Manifest)>,
    event_type: &str,
) -> Option<(&'a str, &'a Manifest)> {
    packages
        .into_iter()
        .find(|(_, m)| declared_family(m, event_type))
}

/// The scopes the executor bound to `identity` serves: those whose configuration
/// uses the package, and every enabled scope of `applied` with a binding naming one
/// of its executors (a binding without a connection binds no scope to the identity).
pub fn served_scopes(identity: &Identity, applied: Option<&Config>) -> Vec<String> {
    let mut scopes = identity.scopes.clone();
    let executors = &identity.manifest.provides.executors;
    for scope in applied.into_iter().flat_map(|c| &c.scopes) {
        let binds = scope.bindings.iter().any(|b| {
            b["executor"]
                .as_str()
                .is_some_and(|x| executors.iter().any(|e| e.name == x))
        });
        if scope.enabled && binds && !scopes.contains(&scope.id) {
            scopes.push(scope.id.clone());
        }
    }
    scopes
}

/// `text` cut to at most `max` bytes at a character boundary; true when it was cut.
pub fn bound_text(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// The byte bound of each rendering: `max_bytes`, or [`MAX_RENDERED_BYTES`] when 0.
pub fn byte_bound(max_bytes: u32) -> Result<usize, RpcError> {
    let asked = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    if asked > MAX_RENDERED_BYTES {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "max_bytes {max_bytes} is over the bound of one rendering ({MAX_RENDERED_BYTES} bytes, MAX_RENDERED_BYTES)"
            ),
        ));
    }
    Ok(if asked == 0 {
        MAX_RENDERED_BYTES
    } else {
        asked
    })
}

/// `event.render_owned` for the executor bound to `identity` (see the module).
pub async fn render_owned(
    identity: &Identity,
    bus: &Bus,
    owners: Option<&Owners>,
    p: EventRenderOwnedParams,
) -> Result<EventRenderOwnedResult, RpcError> {
    if p.events.len() > MAX_RENDER_EVENTS {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "{} Events to render, over the limit of {MAX_RENDER_EVENTS} (MAX_RENDER_EVENTS): ask in several calls",
                p.events.len()
            ),
        ));
    }
    let max = byte_bound(p.max_bytes)?;
    let runner = owners.and_then(Owners::runner);
    let scopes = served_scopes(
        identity,
        runner.as_ref().and_then(|r| r.applied()).as_deref(),
    );
    let refuse = |what: String| {
        RpcError::new(
            Code::Unauthorized,
            format!(
                "{what} is not of a scope whose configuration uses {:?}: nothing was rendered",
                identity.name
            ),
        )
    };
    if !p.connection.is_empty() && !identity.connections.contains(&p.connection) {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "connection {:?} is not bound to {:?}'s bindings: nothing was rendered",
                p.connection, identity.name
            ),
        ));
    }
    if !p.work_id.is_empty() {
        let scope = match bus
            .call_typed(&WorkGetRequest {
                id: p.work_id.clone(),
            })
            .await
        {
            Ok(w) => w.work.scope_id,
            Err(CallError::Rpc(e)) if e.is(Code::NotFound) => String::new(),
            Err(e) => {
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("the store is unavailable ({e})"),
                ))
            }
        };
        if scope.is_empty() || !scopes.contains(&scope) {
            return Err(refuse(format!("Work {:?}", p.work_id)));
        }
    }
    // The Events as accepted, read in the executor's scopes.
    let mut events = Vec::with_capacity(p.events.len());
    for e in &p.events {
        match read_event(bus, &e.id, &scopes).await {
            Ok(stored) => events.push(stored),
            Err(err) if err.is(Code::NotFound) => return Err(refuse(format!("Event {:?}", e.id))),
            Err(err) => return Err(err),
        }
    }
    let mut out: Vec<RenderedEvent> = events
        .iter()
        .map(|e| RenderedEvent {
            id: e.id.clone(),
            ..RenderedEvent::default()
        })
        .collect();
    // An action's Event is the host's own: it renders it (who decided what).
    for (slot, e) in out.iter_mut().zip(&events) {
        if e.event_type.starts_with(&format!("{ACTION_EVENT_FAMILY}.")) {
            let (text, cut) = bound_text(render_action(&e.payload.data), max);
            slot.rendered_by = CORE_PROVIDER.to_owned();
            slot.truncated = cut;
            slot.text = text;
        }
    }
    let Some(runner) = runner else {
        return Ok(EventRenderOwnedResult { events: out });
    };
    // Each Event with its owner, when one runs and may read its payload.
    let mut calls = Vec::new();
    for (index, event) in events.into_iter().enumerate() {
        let owner = {
            let packages = runner
                .names()
                .into_iter()
                .filter_map(|n| runner.manifest(n).map(|m| (n, m)));
            owner_of(packages, &event.event_type)
                .and_then(|(name, m)| gate_wire_event(m, event).map(|e| (name.to_owned(), e)))
        };
        if let Some((name, event)) = owner {
            calls.push((index, name, event));
        }
    }
    let deadline = tokio::time::Instant::now() + RENDER_TOTAL;
    let permits = Arc::new(tokio::sync::Semaphore::new(RENDER_CONCURRENCY));
    let mut set = tokio::task::JoinSet::new();
    for (index, owner, event) in calls {
        let params = EventRenderParams {
            event,
            work_id: p.work_id.clone(),
            connection: p.connection.clone(),
            max_bytes: u32::try_from(max).unwrap_or(u32::MAX),
        };
        let (runner, permits) = (runner.clone(), permits.clone());
        set.spawn(async move {
            let rendered = tokio::time::timeout_at(deadline, async {
                let _permit = permits.acquire_owned().await.ok()?;
                render_one(runner.as_ref(), &owner, &params).await
            })
            .await
            .ok()
            .flatten();
            (index, owner, rendered)
        });
    }
    while let Some(joined) = set.join_next().await {
        let Ok((index, owner, Some(r))) = joined else {
            continue;
        };
        let (text, cut) = bound_text(r.text, max);
        if let Some(slot) = out.get_mut(index) {
            if !text.is_empty() {
                slot.rendered_by = owner;
                slot.truncated = r.truncated || cut;
                slot.text = text;
            }
        }
    }
    Ok(EventRenderOwnedResult { events: out })
}

/// One owner's `event.render`; `None` on any failure (logged), so the Event renders
/// generically.
async fn render_one(
    runner: &dyn Packages,
    owner: &str,
    params: &EventRenderParams,
) -> Option<EventRenderResult> {
    let id = params.event.id.as_str();
    let answer = match serde_json::value::to_raw_value(params) {
        Ok(raw) => {
            runner
                .call(owner, EventRenderParams::METHOD, raw, RENDER_TIMEOUT)
                .await
        }
        Err(e) => Err(RpcError::unauthored(e)),
    };
    let reply = match answer {
        Ok(reply) => reply,
        Err(e) => {
            tracing::info!(OC_EXTENSION = %owner, event = %id, error = %e, "event.render failed; the Event renders generically");
            return None;
        }
    };
    match serde_json::from_str::<EventRenderResult>(reply.get()) {
        Ok(r) => Some(r),
        Err(e) => {
            let shown: Value = serde_json::from_str(reply.get()).unwrap_or(Value::Null);
            tracing::info!(OC_EXTENSION = %owner, event = %id, error = %e, answer = %shown, "event.render answered something else; the Event renders generically");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn manifest(name: &str, family: &str) -> Manifest {
        protocol::manifest::parse_manifest(
            json!({"protocol": [1], "name": name, "version": "1.0.0", "command": ["x"],
                   "provides": {"families": [{"name": family, "re_derivable": true}]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn the_owner_is_the_package_declaring_the_family() {
        let (a, b) = (manifest("github", "github"), manifest("slack", "slack"));
        let all = [("github", &a), ("slack", &b)];
        assert_eq!(owner_of(all, "github.review").map(|o| o.0), Some("github"));
        assert_eq!(owner_of(all, "slack").map(|o| o.0), Some("slack"));
        assert!(owner_of(all, "githubx.review").is_none());
        assert!(owner_of(all, "tracker.comment").is_none());
    }

    #[test]
    fn texts_are_cut_at_a_character_boundary() {
        assert_eq!(bound_text("abc".into(), 3), ("abc".into(), false));
        // "é" is two bytes: a cut inside it falls back before it.
        assert_eq!(bound_text("aéé".into(), 4), ("aé".into(), true));
        assert_eq!(bound_text("éé".into(), 1), (String::new(), true));
    }

    #[test]
    fn the_byte_bound_is_the_spec_one_at_most() {
        assert_eq!(byte_bound(0).unwrap(), MAX_RENDERED_BYTES);
        assert_eq!(byte_bound(100).unwrap(), 100);
        let over = u32::try_from(MAX_RENDERED_BYTES + 1).unwrap();
        let e = byte_bound(over).unwrap_err();
        assert!(
            e.is(Code::Invalid) && e.message.contains("MAX_RENDERED_BYTES"),
            "{e:?}"
        );
    }
}
