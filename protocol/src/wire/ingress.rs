//! Ingress: deliveries and observations (`webhook.handle`, `ingress.push`,
//! `ingress.deliver`, `ingress.reconcile`) and the Events they carry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::events::{Event, Payload};
use super::{is_false, is_zero_u32, is_zero_u64};

/// An Event an ingress delivery or observation carries, before acceptance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressEvent {
    /// The Event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload.
    #[serde(default)]
    pub payload: Payload,
    /// Correlation keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// When it happened at the source.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub occurred_at: String,
    /// The payload is a snapshot of the change its delivery ID names, read when the
    /// change was delivered or polled: the delivery ID alone is the Event's identity,
    /// so another snapshot under it (a poll of a change a webhook brought, with a
    /// title edited since) is that Event again, not a conflict. The first one kept
    /// stands.
    #[serde(default, skip_serializing_if = "is_false")]
    pub snapshot: bool,
}

/// A pushed delivery of one registered source: its identity, the raw body as evidence,
/// and the Events it carries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The source (registered by the last configure).
    pub source: String,
    /// The delivery ID within the source (a redelivery repeats it).
    pub delivery_id: String,
    /// The raw body, base64.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::b64::option"
    )]
    pub body: Option<Vec<u8>>,
    /// The Events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<IngressEvent>,
}

/// What the host accepted durably for a delivery.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAccepted {
    /// The accepted Events (the earlier ones for a redelivery).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// True when this delivery was new; false for a redelivery, which added nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub added: bool,
}

/// An HTTP response the host sends for a webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpAnswer {
    /// The status (2xx is sent only after the deliveries are durably accepted).
    pub status: u16,
    /// Response headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::b64")]
    pub body: Vec<u8>,
}

impl HttpAnswer {
    /// A plain-text answer: `message` and a newline.
    pub fn text(status: u16, message: &str) -> HttpAnswer {
        let mut body = message.as_bytes().to_vec();
        body.push(b'\n');
        HttpAnswer {
            status,
            headers: BTreeMap::from([(
                "Content-Type".to_string(),
                "text/plain; charset=utf-8".to_string(),
            )]),
            body,
        }
    }

    /// A JSON answer.
    pub fn json(status: u16, value: &serde_json::Value) -> HttpAnswer {
        HttpAnswer {
            status,
            headers: BTreeMap::from([("Content-Type".to_string(), "application/json".to_string())]),
            body: value.to_string().into_bytes(),
        }
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> HttpAnswer {
        self.headers.insert(name.to_string(), value.to_string());
        self
    }
}

/// `webhook.handle` (H→E): verify and parse one webhook request under a registered path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookHandleParams {
    /// The HTTP method.
    pub method: String,
    /// The request path (under a registered webhook path).
    pub path: String,
    /// The raw query string, without `?`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query: String,
    /// The request headers, each name with its values in order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Vec<String>>,
    /// The raw body, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::b64")]
    pub body: Vec<u8>,
    /// The sender's address (`ip:port`) as ingressd saw it; an addition, so an entry can
    /// accept unsigned deliveries from loopback alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_addr: String,
}

impl WebhookHandleParams {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.first())
            .map(String::as_str)
    }
}

/// Result of `webhook.handle`: the deliveries to accept durably, then the HTTP answer
/// (which the host replaces with a non-2xx when acceptance fails).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookHandleResult {
    /// Deliveries to accept before answering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
    /// The answer.
    pub response: HttpAnswer,
}

/// `ingress.push` (E→H): push a delivery while serving a host call (`webhook.handle`);
/// answered after durable acceptance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressPushParams {
    /// The delivery.
    pub delivery: Delivery,
}

/// Result of `ingress.push`.
pub type IngressPushResult = DeliveryAccepted;

/// `ingress.deliver` (E→H): a delivery from the extension's own receiver (Slack Socket
/// Mode); acknowledge upstream only after the answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressDeliverParams {
    /// The delivery.
    pub delivery: Delivery,
}

/// Result of `ingress.deliver`.
pub type IngressDeliverResult = DeliveryAccepted;

/// One observed item of a reconcile page: the item's identity and version, and its
/// Events. An item missing from a complete scan is inferred absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The item's identity within the source.
    pub item: String,
    /// The item's version (a new version means a visible change).
    pub version: String,
    /// The delivery ID of what this observation carries.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub delivery_id: String,
    /// The Events it carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<IngressEvent>,
}

/// `ingress.reconcile` (H→E): one page of a source's reconcile scan, under the runtime's
/// page timeout and item and byte limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngressReconcileParams {
    /// The source.
    pub source: String,
    /// The scan generation.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub generation: u64,
    /// The page cursor (empty for the first page).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cursor: String,
    /// The checkpoint of the last complete scan.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checkpoint: String,
    /// At most this many items.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_items: u32,
    /// At most this many bytes of items.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_bytes: u64,
}

/// Result of `ingress.reconcile`: a page of items, the next cursor, and on the last page
/// `complete` and the new checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressReconcileResult {
    /// The observed items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Observation>,
    /// The cursor of the next page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cursor: String,
    /// The checkpoint to keep once the scan is complete.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checkpoint: String,
    /// True on the scan's last page.
    #[serde(default, skip_serializing_if = "is_false")]
    pub complete: bool,
}
