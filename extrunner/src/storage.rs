//! storaged as the extensions see it: its typed calls' failures in the extension's
//! terms, and its stored Event as the wire shows it. Below the scoped host
//! ([`crate::host`]) and the renderings ([`crate::render`]), which both read Events
//! back in an extension's scopes ([`read_event`]).

use busapi::store::{EventGetRequest, StoredEvent};
use busapi::Call;
use daemon::bus::Bus;
use protocol::wire;
use protocol::{CallError, Code, RpcError};

/// A call's answer as the extension sees it: storaged's authored errors pass on,
/// anything else is `unavailable` or `internal`.
pub fn store_error(method: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        CallError::Transport(_) | CallError::Timeout(_) | CallError::Cancelled => {
            RpcError::new(Code::Unavailable, format!("the store is unavailable ({e})"))
        }
        other => RpcError::unauthored(format_args!("{method}: {other}")),
    }
}

/// A typed call to storaged on `bus`, its failure as [`store_error`] says.
pub async fn call<C: Call>(bus: &Bus, params: &C) -> Result<C::Result, RpcError> {
    bus.call_typed(params)
        .await
        .map_err(|e| store_error(C::METHOD, e))
}

/// storaged's accepted Event as the wire shows it.
pub fn wire_event(e: StoredEvent) -> wire::Event {
    wire::Event {
        id: e.id,
        sequence: u64::try_from(e.seq).unwrap_or(0),
        event_type: e.event_type,
        source: e.source,
        delivery_id: e.delivery_id.unwrap_or_default(),
        scope_id: e.scope_id,
        keys: e.keys,
        payload: wire::Payload {
            schema: e.schema.unwrap_or_default(),
            data: e.payload,
        },
        occurred_at: e.occurred_at.unwrap_or_default(),
        accepted_at: e.accepted_at,
        parent_id: e.parent_id.unwrap_or_default(),
        root_id: e.root_id,
        depth: u32::try_from(e.depth).unwrap_or(u32::MAX),
        execution_id: e.execution_id.unwrap_or_default(),
    }
}

/// The Event `id` as accepted, read from the store in `scopes` (`not_found` outside
/// them, as for an absent one).
pub async fn read_event(bus: &Bus, id: &str, scopes: &[String]) -> Result<wire::Event, RpcError> {
    let read = call(
        bus,
        &EventGetRequest {
            id: id.to_owned(),
            scopes: Some(scopes.to_vec()),
        },
    )
    .await?;
    Ok(wire_event(read.event))
}
