//! Deliveries through a package: `ext.webhook` and `ext.reconcile`.

use super::*;

use busapi::ext::{ReconcilePage, WebhookAnswer};
use busapi::Call;
use daemon::bus::Bus;
use protocol::wire::{
    HttpAnswer, IngressReconcileParams, IngressReconcileResult, WebhookHandleParams,
    WebhookHandleResult,
};
use protocol::{Code, RpcError};
use serde_json::value::RawValue;
use serde_json::Value;
use std::time::Duration;

/// How long a `webhook.handle` may take.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// A redelivery of what was kept already: a JSON object answer says so with
/// `"duplicate": true` (any other answer is left as the extension gave it).
fn mark_duplicate(response: &mut HttpAnswer) {
    if let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&response.body) {
        body.insert("duplicate".into(), Value::Bool(true));
        if let Ok(bytes) = serde_json::to_vec(&body) {
            response.body = bytes;
        }
    }
}

impl Runner {
    /// The package `name` and the bus its deliveries are accepted on.
    fn ingress_entry(&self, name: &str) -> Result<(&Entry, &Bus), RpcError> {
        let Some(e) = self.entry(name) else {
            return Err(RpcError::new(
                Code::NotFound,
                format!("no extension named `{name}`"),
            ));
        };
        let Some(bus) = &self.host_bus else {
            return Err(unavailable("this extrunner has no store to accept into"));
        };
        Ok((e, bus))
    }

    /// `ext.webhook`: hand one webhook request to `name`'s `webhook.handle`, accept
    /// the deliveries its answer carries durably (all or none), and only then answer
    /// its HTTP response. An extension that is not running, crashes or does not
    /// answer in time, and a store that cannot be reached, are `unavailable`.
    pub async fn webhook(&self, name: &str, request: &RawValue) -> Result<WebhookAnswer, RpcError> {
        let (e, bus) = self.ingress_entry(name)?;
        // The request goes to the extension as ingressd sent it, undecoded.
        let begun = tokio::time::Instant::now();
        let handle = |timeout| {
            self.call(
                name,
                WebhookHandleParams::METHOD,
                request,
                false,
                timeout,
                None,
            )
        };
        let reply = match handle(WEBHOOK_TIMEOUT).await {
            // webhook.handle only verifies and parses (nothing is kept until the host
            // accepts), so a call the extension's crash ended is asked again of the
            // restarted process, within what is left of the deadline.
            Err(e) if e.data.as_ref().is_some_and(|d| d["crashed"] == true) => {
                tracing::info!(OC_EXTENSION = %name, "webhook.handle asked again after the extension's crash");
                handle(WEBHOOK_TIMEOUT.saturating_sub(begun.elapsed())).await?
            }
            other => other?,
        };
        let result: WebhookHandleResult = serde_json::from_str(reply.get()).map_err(|err| {
            RpcError::new(
                Code::Internal,
                format!(
                    "`{name}` answered webhook.handle with something that does not decode: {err}"
                ),
            )
        })?;
        let ok = (200..300).contains(&result.response.status);
        if !ok && !result.deliveries.is_empty() {
            return Err(RpcError::new(
                Code::Internal,
                format!(
                    "`{name}` answered status {} with deliveries: deliveries go with a 2xx only",
                    result.response.status
                ),
            ));
        }
        let identity = e.identity.current();
        let registered = e.configuration.registered();
        let sources = result.deliveries.iter().map(|d| d.source.clone()).collect();
        let mut deliveries =
            crate::ingress::accept(&identity, &registered, bus, result.deliveries).await?;
        // The events go back without their payloads: ingressd needs none, and a
        // payload may be as large as the body (25 MiB) to send across the bus again.
        for e in deliveries.iter_mut().flat_map(|d| d.events.iter_mut()) {
            e.payload.data = Value::Null;
        }
        let mut response = result.response;
        if !deliveries.is_empty() && deliveries.iter().all(|d| !d.added) {
            mark_duplicate(&mut response);
        }
        Ok(WebhookAnswer {
            response,
            deliveries,
            sources,
        })
    }

    /// `ext.reconcile`: one page of `name`'s reconcile scan of one of its sources,
    /// under the page timeout and the item and byte limits; the page's observations
    /// are accepted durably (all or none) before it answers. A page over a limit, an
    /// error, a crash or a timeout accepts nothing, and the caller advances no
    /// checkpoint.
    pub async fn reconcile(
        &self,
        name: &str,
        params: &IngressReconcileParams,
        page_timeout: Duration,
    ) -> Result<ReconcilePage, RpcError> {
        let (e, bus) = self.ingress_entry(name)?;
        let registered = e.configuration.registered();
        if registered.source(&params.source).is_none() {
            return Err(RpcError::new(
                Code::NotFound,
                format!("`{name}` registered no source {:?}", params.source),
            ));
        }
        let value = serde_json::to_value(params).map_err(|err| {
            RpcError::unauthored(format_args!(
                "{} params: {err}",
                IngressReconcileParams::METHOD
            ))
        })?;
        let reply = self
            .call(
                name,
                IngressReconcileParams::METHOD,
                &value,
                false,
                page_timeout,
                None,
            )
            .await?;
        let bytes = reply.get().len() as u64;
        if params.max_bytes > 0 && bytes > params.max_bytes {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "`{name}` answered a page of {bytes} bytes, over max_bytes ({})",
                    params.max_bytes
                ),
            ));
        }
        let page: IngressReconcileResult = serde_json::from_str(reply.get()).map_err(|err| {
            RpcError::new(
                Code::Internal,
                format!("`{name}` answered ingress.reconcile with something that does not decode: {err}"),
            )
        })?;
        if params.max_items > 0 && page.items.len() > params.max_items as usize {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "`{name}` answered {} items, over max_items ({})",
                    page.items.len(),
                    params.max_items
                ),
            ));
        }
        if !page.complete && page.cursor.is_empty() {
            return Err(RpcError::new(
                Code::Invalid,
                format!("`{name}` answered an incomplete page without a cursor"),
            ));
        }
        let identity = e.identity.current();
        let accepted = crate::ingress::accept_observations(
            &identity,
            &registered,
            bus,
            &params.source,
            &page.items,
        )
        .await?;
        Ok(ReconcilePage {
            items: page.items.len(),
            events: accepted.events,
            added: accepted.added,
            cursor: page.cursor,
            checkpoint: page.checkpoint,
            complete: page.complete,
        })
    }
}
