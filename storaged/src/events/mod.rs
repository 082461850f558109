//! The event log: accepting events (a batch as one atomic unit; one derived event
//! with KV records), ingress checkpoints, and the reads of the log.
//!
//! Identity (spec, "Event payload schema evolution"): an event's delivery identity
//! (source, delivery_id) and observation identity (source, item, item_version) are
//! bound to a canonical signature of its envelope. The same identity with the same
//! signature is the same event (answered, nothing added); with another signature
//! it is `conflict`, and the whole batch applies nothing. The signature of an event
//! with a delivery_id leaves its item and item_version out, so an observation that
//! names a delivery (a webhook delivery read back by reconcile) and that delivery
//! arriving live are one event, whichever comes first.
//!
//! An event with a delivery_id is named `evt_` + the first 32 hex digits of
//! sha256(source "\n" delivery_id) (the spec's EmittedEventID), so a transaction's
//! own records can name it before it commits; any other gets a random ID.
//!
//! A derived event (with a parent) takes its parent's scope and root, one more
//! than its parent's depth; the chain's depth and per-minute count are bounded
//! (`causal_limit`, naming the bound).

use crate::db::Store;
use crate::error::StoreError;
pub use busapi::store::events::*;

mod accept;
mod ahead;
mod checkpoints;
mod reads;

pub use accept::*;
pub use ahead::{AcceptAhead, MAX_AHEAD_BYTES};
pub use checkpoints::*;
pub use reads::*;

/// The longest scope, type, source, delivery ID, item, item version, schema,
/// parent, execution, occurred_at, checkpoint source or generation.
pub const MAX_FIELD_BYTES: usize = 1024;
/// The most correlation keys one event carries.
pub const MAX_KEYS_PER_EVENT: usize = 256;
/// The page size of the reads when the request names none.
pub const DEFAULT_PAGE: usize = 100;
/// The most payload bytes one page of `store.events` or `store.work_events` carries
/// (at least one event): a page stays within the bus's 64 MiB message even when one
/// event is as large as the largest webhook body.
pub const MAX_EVENTS_PAGE_BYTES: usize = 8 * 1024 * 1024;
/// The window of the per-chain derivation rate, in ms.
pub const DERIVED_WINDOW_MS: i64 = 60_000;

// ---------------------------------------------------------------------------
// Requests and responses

// ---------------------------------------------------------------------------
// Accepting

/// Who is accepting: an extension's identity, or (owner `None`) a trusted daemon.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptContext<'a> {
    /// The extension; `None` skips the family and namespace checks.
    pub owner: Option<&'a str>,
    /// Its declared families.
    pub families: &'a [String],
    /// Its configured scopes, when they bound what it may touch.
    pub scopes: Option<&'a [String]>,
}

// The store's methods and the bus dispatch.
impl Store {
    /// `store.events_accept`.
    pub async fn events_accept(
        &self,
        req: EventsAcceptRequest,
    ) -> Result<EventsAcceptResponse, StoreError> {
        let limits = self.limits().clone();
        // The batch's root events are checked and signed here, so the writer
        // thread, which every write waits for, runs only the statements.
        let ready = std::sync::Arc::new(presign(&limits, &req));
        // On PostgreSQL a batch of new deliveries is inserted ahead, with its
        // group's ([`ahead`]).
        let ahead = (self.backend() == crate::sql::Backend::Postgres)
            .then(|| AcceptAhead::new(&req, ready.clone()))
            .flatten();
        let write = move |conn: &crate::sql::Connection| accept_events(conn, &limits, &req, &ready);
        match ahead {
            Some(a) => self.write_repeatable_ahead(write, Box::new(a)).await,
            None => self.write_repeatable(write).await,
        }
    }

    /// `store.event_accept_derived`.
    pub async fn event_accept_derived(
        &self,
        req: EventAcceptDerivedRequest,
    ) -> Result<AcceptedEvent, StoreError> {
        let limits = self.limits().clone();
        self.write(move |conn| event_accept_derived(conn, &limits, &req))
            .await
    }

    /// `store.checkpoint_get`.
    pub async fn checkpoint_get(
        &self,
        req: CheckpointGetRequest,
    ) -> Result<CheckpointGetResponse, StoreError> {
        self.read(move |conn| checkpoint_get(conn, &req)).await
    }

    /// `store.checkpoint_set`.
    pub async fn checkpoint_set(
        &self,
        req: CheckpointSetRequest,
    ) -> Result<CheckpointSetResponse, StoreError> {
        let limits = self.limits().clone();
        self.write(move |conn| checkpoint_set(conn, &limits, &req))
            .await
    }

    /// `store.event`.
    pub async fn event(&self, req: EventGetRequest) -> Result<EventGetResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| event_get(conn, &limits, &req)).await
    }

    /// `store.events`.
    pub async fn events(&self, req: EventsListRequest) -> Result<EventsPageResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| events_list(conn, &limits, &req))
            .await
    }

    /// `store.work_events`.
    pub async fn work_events(
        &self,
        req: WorkEventsRequest,
    ) -> Result<EventsPageResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| work_events(conn, &limits, &req))
            .await
    }

    /// `store.sequence`.
    pub async fn sequence(&self, _req: SequenceRequest) -> Result<SequenceResponse, StoreError> {
        self.read(sequence).await
    }
}

crate::store_methods! {
    EventsAcceptRequest => events_accept,
    EventAcceptDerivedRequest => event_accept_derived,
    CheckpointGetRequest => checkpoint_get,
    CheckpointSetRequest => checkpoint_set,
    EventGetRequest => event,
    EventsListRequest => events,
    WorkEventsRequest => work_events,
    SequenceRequest => sequence,
}

fn too_long(what: &str, s: &str, max: usize, name: &str) -> Result<(), StoreError> {
    if s.len() > max {
        return Err(StoreError::invalid(format!(
            "{what} is {} bytes, over {name} ({max})",
            s.len()
        )));
    }
    Ok(())
}
