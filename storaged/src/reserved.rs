//! The reserved `core.extensions` namespace of the KV table, which no extension
//! can address: each extension's KV layout version, which extrunner keeps
//! (`store.kv_layout_get`, `store.kv_layout_set`), and the tunnel's current public
//! URL, which tunneld records (`store.tunnel_get`, `store.tunnel_set`).

use crate::db::Store;
use crate::error::StoreError;
use crate::kv::{decode_value, put_raw, RESERVED_NAMESPACE};
use crate::sql::{params, Connection, OptionalExtension};
use crate::util;
pub use busapi::store::reserved::*;
use serde_json::Value;

/// The key, in the reserved namespace, of the tunnel's current public URL (never an
/// extension's name, so never a KV layout's key).
pub const TUNNEL_KEY: &str = "~tunnel";

fn check_extension(extension: &str) -> Result<(), StoreError> {
    if !protocol::manifest::is_identifier(extension) {
        return Err(StoreError::invalid(format!(
            "extension {extension:?} is not an extension name"
        )));
    }
    Ok(())
}

fn layout_version(conn: &Connection, extension: &str) -> Result<Option<u64>, StoreError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT value FROM kv WHERE namespace = ?1 AND key = ?2")?
        .query_row(params![RESERVED_NAMESPACE, extension], |r| r.get(0))
        .optional()?;
    match text {
        None => Ok(None),
        Some(t) => match decode_value(&t)?.as_u64() {
            Some(v) => Ok(Some(v)),
            None => Err(StoreError::Internal(format!(
                "the KV layout version of {extension:?} is not a number: {t}"
            ))),
        },
    }
}

/// `store.kv_layout_get`.
pub fn kv_layout_get(
    conn: &Connection,
    req: &KvLayoutGetRequest,
) -> Result<KvLayoutGetResponse, StoreError> {
    check_extension(&req.extension)?;
    Ok(KvLayoutGetResponse {
        version: layout_version(conn, &req.extension)?,
    })
}

/// `store.kv_layout_set`: a lower version than stored is `conflict` (kv_downgrade).
pub fn kv_layout_set(
    conn: &Connection,
    req: &KvLayoutSetRequest,
) -> Result<KvLayoutSetResponse, StoreError> {
    check_extension(&req.extension)?;
    let previous = layout_version(conn, &req.extension)?;
    if let Some(stored) = previous {
        if req.version < stored {
            return Err(StoreError::conflict(format!(
                "kv_downgrade: stored {stored}, declared {}",
                req.version
            )));
        }
    }
    let value = Value::from(req.version);
    let text = util::canonical(&value);
    let version = util::digest(text.as_bytes());
    put_raw(
        conn,
        RESERVED_NAMESPACE,
        &req.extension,
        &text,
        &version,
        &util::now(),
    )?;
    Ok(KvLayoutSetResponse { previous })
}

/// `store.tunnel_get`.
pub fn tunnel_get(
    conn: &Connection,
    _req: &TunnelGetRequest,
) -> Result<TunnelGetResponse, StoreError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT value FROM kv WHERE namespace = ?1 AND key = ?2")?
        .query_row(params![RESERVED_NAMESPACE, TUNNEL_KEY], |r| r.get(0))
        .optional()?;
    let tunnel = match text {
        None => None,
        Some(t) => Some(
            serde_json::from_value(decode_value(&t)?)
                .map_err(|e| StoreError::Internal(format!("the tunnel record: {e}")))?,
        ),
    };
    Ok(TunnelGetResponse { tunnel })
}

/// `store.tunnel_set`: the URL must be empty or one the operator's `public_url` could
/// be (`invalid` otherwise).
pub fn tunnel_set(conn: &Connection, req: &TunnelRecord) -> Result<TunnelSetResponse, StoreError> {
    if !req.url.is_empty() {
        protocol::config::check_public_url(&req.url).map_err(StoreError::invalid)?;
    }
    for (what, v) in [("run_id", &req.run_id), ("provider", &req.provider)] {
        if v.len() > 256 {
            return Err(StoreError::invalid(format!("{what} is over 256 bytes")));
        }
    }
    let mut record = req.clone();
    record.reason = record.reason.chars().take(1024).collect();
    record.updated_at = util::now();
    let value = serde_json::to_value(&record)
        .map_err(|e| StoreError::Internal(format!("the tunnel record: {e}")))?;
    let text = util::canonical(&value);
    let version = util::digest(text.as_bytes());
    put_raw(
        conn,
        RESERVED_NAMESPACE,
        TUNNEL_KEY,
        &text,
        &version,
        &record.updated_at,
    )?;
    Ok(TunnelSetResponse {})
}

impl Store {
    /// `store.kv_layout_get`.
    pub async fn kv_layout_get(
        &self,
        req: KvLayoutGetRequest,
    ) -> Result<KvLayoutGetResponse, StoreError> {
        self.read(move |conn| kv_layout_get(conn, &req)).await
    }

    /// `store.kv_layout_set`.
    pub async fn kv_layout_set(
        &self,
        req: KvLayoutSetRequest,
    ) -> Result<KvLayoutSetResponse, StoreError> {
        self.write(move |conn| kv_layout_set(conn, &req)).await
    }

    /// `store.tunnel_get`.
    pub async fn tunnel_get(&self, req: TunnelGetRequest) -> Result<TunnelGetResponse, StoreError> {
        self.read(move |conn| tunnel_get(conn, &req)).await
    }

    /// `store.tunnel_set`.
    pub async fn tunnel_set(&self, req: TunnelRecord) -> Result<TunnelSetResponse, StoreError> {
        self.write(move |conn| tunnel_set(conn, &req)).await
    }
}

crate::store_methods! {
    KvLayoutGetRequest => kv_layout_get,
    KvLayoutSetRequest => kv_layout_set,
    TunnelGetRequest => tunnel_get,
    TunnelRecord => tunnel_set,
}
