//! The KV layout versions storaged records, reached over the bus.

use super::*;
use busapi::store::{KvLayoutGetRequest, KvLayoutSetRequest};
use busapi::Call;

/// The KV layout versions storaged records (`store.kv_layout_get/set`), over
/// the bus.
#[derive(Debug, Clone)]
pub struct BusKvLayouts {
    bus: Bus,
}

impl BusKvLayouts {
    /// The layouts storaged keeps, reached on `bus`.
    pub fn new(bus: Bus) -> BusKvLayouts {
        BusKvLayouts { bus }
    }
}

impl KvLayouts for BusKvLayouts {
    fn get<'a>(&'a self, name: &'a str) -> LayoutFuture<'a, u32> {
        Box::pin(async move {
            let method = KvLayoutGetRequest::METHOD;
            let answer = self
                .bus
                .call_typed(&KvLayoutGetRequest {
                    extension: name.to_owned(),
                })
                .await
                .map_err(|e| format!("{method}: {e}"))?;
            match answer.version {
                None => Ok(0),
                Some(v) => u32::try_from(v).map_err(|_| format!("{method} answered version {v}")),
            }
        })
    }

    fn set<'a>(&'a self, name: &'a str, version: u32) -> LayoutFuture<'a, ()> {
        Box::pin(async move {
            self.bus
                .call_typed(&KvLayoutSetRequest {
                    extension: name.to_owned(),
                    version: u64::from(version),
                })
                .await
                .map(|_| ())
                .map_err(|e| format!("{}: {e}", KvLayoutSetRequest::METHOD))
        })
    }
}
