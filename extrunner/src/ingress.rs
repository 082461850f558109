//! Ingress: deliveries accepted durably for the source that registered them.
//!
//! Three ways lead here, all with the same checks and the same store write:
//! the deliveries a `webhook.handle` answer carries (ingressd's `ext.webhook`),
//! `ingress.push` (an extension pushing while it serves `webhook.handle`), and
//! `ingress.deliver` (an extension's own receiver, which acknowledges upstream only
//! after this answers).
//!
//! A delivery must be of a source the last `configure` registered; its events are
//! accepted into that source's scope, each of a family the manifest declares, under the
//! extension's name, with a payload of the current version of one of its schemas. The
//! identity of the i-th event of a delivery is (source, delivery_id) for the first and
//! (source, `delivery_id#i`) for the others, so a redelivery names the same events and
//! adds nothing. All the deliveries of one call are one atomic store write: either all
//! are durable when this answers, or none is.

use busapi::store::{AcceptedEvent, EventInput, EventsAcceptRequest, EventsAcceptResponse};
use busapi::Call;
use daemon::bus::Bus;
use protocol::wire::{self, DeliveryAccepted};
use protocol::{CallError, Code, RpcError};

use crate::configuration::Registered;
use crate::identity::{check_payload, declared_family, Identity};

/// The longest delivery ID.
pub const MAX_DELIVERY_ID_BYTES: usize = 1024;

/// The delivery identity of the `i`-th event of a delivery.
pub fn event_delivery_id(delivery_id: &str, i: usize) -> String {
    if i == 0 {
        delivery_id.to_owned()
    } else {
        format!("{delivery_id}#{i}")
    }
}

fn own_type(name: &str, t: &str) -> bool {
    t == name
        || t.strip_prefix(name)
            .and_then(|r| r.strip_prefix('.'))
            .is_some_and(|r| !r.is_empty())
}

/// Check the deliveries against the identity and the registration, and turn them
/// into the store's event inputs (with, for each delivery, how many events it has).
/// The payloads move into the inputs (a payload may be 25 MiB): the deliveries are
/// left without them.
pub fn prepare(
    identity: &Identity,
    registered: &Registered,
    deliveries: &mut [wire::Delivery],
) -> Result<(Vec<EventInput>, Vec<usize>), RpcError> {
    let name = identity.name.as_str();
    let mut inputs = Vec::new();
    let mut counts = Vec::with_capacity(deliveries.len());
    for (d_i, d) in deliveries.iter_mut().enumerate() {
        let at = |what: String| format!("deliveries[{d_i}]: {what}");
        let Some(source) = registered.source(&d.source) else {
            return Err(RpcError::new(
                Code::Unauthorized,
                at(format!(
                    "source {:?} is not registered by {name:?}'s last configure",
                    d.source
                )),
            ));
        };
        if d.delivery_id.is_empty() || d.delivery_id.len() > MAX_DELIVERY_ID_BYTES {
            return Err(RpcError::invalid_params(at(format!(
                "delivery_id must be 1 to {MAX_DELIVERY_ID_BYTES} bytes"
            ))));
        }
        if source.scope_id.is_empty() || !identity.scopes.contains(&source.scope_id) {
            return Err(RpcError::new(
                Code::Unauthorized,
                at(format!(
                    "source {:?} feeds scope {:?}, which is not configured for {name:?}",
                    d.source, source.scope_id
                )),
            ));
        }
        for (i, e) in d.events.iter_mut().enumerate() {
            let at = |what: String| format!("deliveries[{d_i}].events[{i}]: {what}");
            if !own_type(name, &e.event_type) || !declared_family(&identity.manifest, &e.event_type)
            {
                return Err(RpcError::new(
                    Code::Undeclared,
                    at(format!(
                        "event type {:?} is not of a family {name:?} declares",
                        e.event_type
                    )),
                ));
            }
            if !source.families.is_empty()
                && !source.families.iter().any(|f| {
                    e.event_type == *f
                        || e.event_type
                            .strip_prefix(f.as_str())
                            .is_some_and(|r| r.starts_with('.'))
                })
            {
                return Err(RpcError::new(
                    Code::Undeclared,
                    at(format!(
                        "event type {:?} is not of the families source {:?} registered",
                        e.event_type, d.source
                    )),
                ));
            }
            if !e.payload.schema.is_empty() {
                check_payload(&identity.manifest, &e.payload.schema).map_err(|mut err| {
                    err.message = at(err.message);
                    err
                })?;
            }
            let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
            inputs.push(EventInput {
                scope_id: source.scope_id.clone(),
                event_type: e.event_type.clone(),
                source: d.source.clone(),
                delivery_id: Some(event_delivery_id(&d.delivery_id, i)),
                payload: std::mem::take(&mut e.payload.data),
                keys: e.keys.clone(),
                schema: some(&e.payload.schema),
                occurred_at: some(&e.occurred_at),
                snapshot: e.snapshot,
                ..EventInput::default()
            });
        }
        counts.push(d.events.len());
    }
    Ok((inputs, counts))
}

/// How a store failure reaches the extension or ingressd: a store that cannot be
/// reached is `unavailable` (retry), its own refusals cross as they are, and events
/// too large for one bus message are `invalid` with `data.too_large`.
pub fn store_failure(e: CallError) -> RpcError {
    let method = EventsAcceptRequest::METHOD;
    match e {
        CallError::Rpc(e) => e,
        // Deterministic: the same events will never fit (ingressd answers 413).
        CallError::TooLarge { size, limit } => RpcError::too_large(
            size,
            limit,
            format!(
                "the {method} request of {size} bytes exceeds the bus's {limit}-byte message limit (max_message_bytes)"
            ),
        ),
        other => RpcError::new(
            Code::Unavailable,
            format!("storaged did not answer {method}: {other}"),
        ),
    }
}

/// One atomic `store.events_accept` of `inputs` for `identity`, bounded to `scopes`;
/// the inputs come back with the answer (the accepted events are made of them).
async fn events_accept(
    bus: &Bus,
    identity: &Identity,
    inputs: Vec<EventInput>,
    scopes: &[String],
) -> Result<(EventsAcceptResponse, Vec<EventInput>), RpcError> {
    let params = EventsAcceptRequest {
        events: inputs,
        owner: Some(identity.name.clone()),
        families: Some(identity.families()),
        scopes: Some(scopes.to_vec()),
    };
    // Gathered with the other accepts under way into one message to storaged;
    // each is still its own atomic write, answered on its own.
    let answer = bus
        .call_gathered_typed("", &params)
        .await
        .map_err(|e| match e {
            CallError::Codec(detail) => RpcError::unauthored(format_args!(
                "the answer to {}: {detail}",
                EventsAcceptRequest::METHOD
            )),
            other => store_failure(other),
        })?;
    Ok((answer, params.events))
}

/// Accept `deliveries` durably, all or none, and answer what each one is now.
pub async fn accept(
    identity: &Identity,
    registered: &Registered,
    bus: &Bus,
    mut deliveries: Vec<wire::Delivery>,
) -> Result<Vec<DeliveryAccepted>, RpcError> {
    let (inputs, counts) = prepare(identity, registered, &mut deliveries)?;
    if inputs.is_empty() {
        return Ok(deliveries
            .iter()
            .map(|_| DeliveryAccepted::default())
            .collect());
    }
    let (answer, inputs) = events_accept(bus, identity, inputs, &identity.scopes).await?;
    if answer.events.len() != inputs.len() {
        return Err(RpcError::unauthored(format_args!(
            "{} answered {} events for {}",
            EventsAcceptRequest::METHOD,
            answer.events.len(),
            inputs.len()
        )));
    }
    let mut accepted = answer.events.into_iter();
    let mut out = Vec::with_capacity(deliveries.len());
    let mut inputs = inputs.into_iter();
    for (d, n) in deliveries.iter().zip(counts) {
        let mut one = DeliveryAccepted {
            events: Vec::with_capacity(n),
            ..DeliveryAccepted::default()
        };
        for _ in 0..n {
            let (Some(a), Some(input)) = (accepted.next(), inputs.next()) else {
                break;
            };
            one.added |= a.added;
            one.events.push(event_of(a, input, d));
        }
        out.push(one);
    }
    Ok(out)
}

/// The accepted event as the wire shows it, from what was sent and the store's answer
/// (no read back: the envelope is what was sent, or the identical one already kept).
/// The payload moves from `input` into the event.
fn event_of(a: AcceptedEvent, input: EventInput, d: &wire::Delivery) -> wire::Event {
    wire::Event {
        id: a.id,
        sequence: u64::try_from(a.seq).unwrap_or(0),
        event_type: input.event_type,
        source: d.source.clone(),
        delivery_id: input.delivery_id.unwrap_or_default(),
        scope_id: input.scope_id,
        keys: input.keys,
        payload: wire::Payload {
            schema: input.schema.unwrap_or_default(),
            data: input.payload,
        },
        occurred_at: input.occurred_at.unwrap_or_default(),
        ..wire::Event::default()
    }
}

/// What one reconcile page accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageAccepted {
    /// Events in the page's observations.
    pub events: usize,
    /// Of them, how many were new.
    pub added: usize,
}

/// Accept the events of one reconcile page's observations of `source`, all or none.
/// The i-th event of an observation is identified by (source, item, `version` for the
/// first, `version#i` after) and, when the observation names one, by its delivery ID
/// the same way; an unchanged item is therefore the same event again and adds nothing.
pub async fn accept_observations(
    identity: &Identity,
    registered: &Registered,
    bus: &Bus,
    source: &str,
    items: &[wire::Observation],
) -> Result<PageAccepted, RpcError> {
    let name = identity.name.as_str();
    let Some(decl) = registered.source(source) else {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!("source {source:?} is not registered by {name:?}'s last configure"),
        ));
    };
    let mut inputs = Vec::new();
    for (o_i, o) in items.iter().enumerate() {
        if o.item.is_empty() || o.item.len() > MAX_DELIVERY_ID_BYTES || o.version.is_empty() {
            return Err(RpcError::invalid_params(format!(
                "items[{o_i}]: item and version are required (item at most {MAX_DELIVERY_ID_BYTES} bytes)"
            )));
        }
        // The same checks as a delivery's, through a delivery of this source.
        let mut as_delivery = wire::Delivery {
            source: source.to_owned(),
            delivery_id: if o.delivery_id.is_empty() {
                o.item.clone()
            } else {
                o.delivery_id.clone()
            },
            body: None,
            events: o.events.clone(),
        };
        let (mut events, _) = prepare(identity, registered, std::slice::from_mut(&mut as_delivery))
            .map_err(|mut e| {
                e.message = format!("items[{o_i}]: {}", e.message);
                e
            })?;
        for (i, ev) in events.iter_mut().enumerate() {
            if o.delivery_id.is_empty() {
                ev.delivery_id = None;
            }
            ev.item = Some(o.item.clone());
            ev.item_version = Some(event_delivery_id(&o.version, i));
        }
        inputs.extend(events);
    }
    if inputs.is_empty() {
        return Ok(PageAccepted::default());
    }
    let n = inputs.len();
    let (answer, _) =
        events_accept(bus, identity, inputs, std::slice::from_ref(&decl.scope_id)).await?;
    Ok(PageAccepted {
        events: n,
        added: answer.events.iter().filter(|a| a.added).count(),
    })
}
