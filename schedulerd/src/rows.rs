//! The store's rows as the extension protocol carries them: an event the router
//! routes (`store.unrouted`, its payload kept as text until a route handler or the
//! toolbelt needs it) and a Work's input (`store.work_events`) as a [`wire::Event`],
//! a Work row as a [`wire::Work`].

use busapi::store::{StoredEvent, UnroutedEvent, WorkRow};
use protocol::wire;
use serde_json::Value;

/// The payload of `ev` as JSON (`null` if the store kept something else).
pub fn payload_value(ev: &UnroutedEvent) -> Value {
    serde_json::from_str(ev.payload.get()).unwrap_or(Value::Null)
}

/// An event being routed, as `route.match` (and `dependency.filter`) carry it.
pub fn routed_event(ev: &UnroutedEvent) -> wire::Event {
    wire::Event {
        id: ev.id.clone(),
        sequence: u64::try_from(ev.seq).unwrap_or(0),
        event_type: ev.event_type.clone(),
        source: ev.source.clone(),
        delivery_id: ev.delivery_id.clone().unwrap_or_default(),
        scope_id: ev.scope_id.clone(),
        keys: ev.keys.clone(),
        payload: wire::Payload {
            schema: ev.schema.clone().unwrap_or_default(),
            data: payload_value(ev),
        },
        occurred_at: ev.occurred_at.clone().unwrap_or_default(),
        accepted_at: ev.accepted_at.clone(),
        parent_id: ev.parent_id.clone().unwrap_or_default(),
        root_id: ev.root_id.clone(),
        depth: u32::try_from(ev.depth).unwrap_or(0),
        execution_id: String::new(),
    }
}

/// A Work's input, as a run (or an injection) carries it.
pub fn input_event(ev: StoredEvent) -> wire::Event {
    wire::Event {
        id: ev.id,
        sequence: u64::try_from(ev.seq).unwrap_or(0),
        event_type: ev.event_type,
        source: ev.source,
        delivery_id: ev.delivery_id.unwrap_or_default(),
        scope_id: ev.scope_id,
        keys: ev.keys,
        payload: wire::Payload {
            schema: ev.schema.unwrap_or_default(),
            data: ev.payload,
        },
        occurred_at: ev.occurred_at.unwrap_or_default(),
        accepted_at: ev.accepted_at,
        parent_id: ev.parent_id.unwrap_or_default(),
        root_id: ev.root_id,
        depth: u32::try_from(ev.depth).unwrap_or(0),
        execution_id: String::new(),
    }
}

/// A Work as the wire shows it (one conversion, [`wire::Work::from_store_row`], for
/// every reader of storaged's Work rows).
pub fn work(row: &WorkRow) -> wire::Work {
    wire::Work::from_store_row(&serde_json::to_value(row).unwrap_or_default())
}
