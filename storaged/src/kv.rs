//! Extension KV: namespaced values with digest versions, read one at a time or
//! paged by key, and the checks and writes of an atomic batch with preconditions,
//! which `store.kv_commit` ([`crate::commit`]) applies, optionally together with
//! Events (emissions). The reserved `core.extensions`
//! namespace, which no extension can address, is the `reserved` module's.
//!
//! Namespace rule (spec, "Authority and scoping"): an empty namespace is the
//! owner's own name; any other must be the owner's name or `owner.` + suffix. A
//! request naming any other namespace, anywhere in a batch, applies nothing
//! (`unauthorized`).

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::sql::{params, Connection, OptionalExtension};
use crate::util;

pub use busapi::store::kv::*;
use serde_json::Value;

/// The namespace that holds each extension's KV layout version.
pub const RESERVED_NAMESPACE: &str = "core.extensions";

/// The page size of `kv_list` when the request names none.
pub const DEFAULT_PAGE: usize = 100;

// ---------------------------------------------------------------------------
// Requests and responses

// ---------------------------------------------------------------------------
// Rules

/// The owner must be an extension name (`[a-z][a-z0-9_-]*`, at most 64 bytes).
pub fn check_owner(owner: &str) -> Result<(), StoreError> {
    if !protocol::manifest::is_identifier(owner) {
        return Err(StoreError::invalid(format!(
            "owner {owner:?} is not an extension name"
        )));
    }
    Ok(())
}

/// The namespace a request addresses: empty is the owner's name; otherwise it must
/// be `owner` or `owner.` + suffix, and never the reserved `core.extensions`.
pub fn resolve_namespace(owner: &str, namespace: &str) -> Result<String, StoreError> {
    if namespace.is_empty() {
        return Ok(owner.to_string());
    }
    let reserved = namespace == RESERVED_NAMESPACE
        || namespace
            .strip_prefix(RESERVED_NAMESPACE)
            .is_some_and(|rest| rest.starts_with('.'));
    let own = namespace == owner
        || namespace
            .strip_prefix(owner)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| !rest.is_empty());
    if reserved || !own {
        return Err(StoreError::Unauthorized(format!(
            "namespace {namespace:?} is not {owner:?}'s (only {owner:?} or \"{owner}.…\")"
        )));
    }
    Ok(namespace.to_string())
}

fn check_key(limits: &Limits, key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::invalid("a KV key must not be empty"));
    }
    if key.len() > limits.max_key_bytes {
        return Err(StoreError::invalid(format!(
            "key is {} bytes, over max_key_bytes ({})",
            key.len(),
            limits.max_key_bytes
        )));
    }
    Ok(())
}

fn check_namespace_len(limits: &Limits, namespace: &str) -> Result<(), StoreError> {
    if namespace.len() > limits.max_key_bytes {
        return Err(StoreError::invalid(format!(
            "namespace is {} bytes, over max_key_bytes ({})",
            namespace.len(),
            limits.max_key_bytes
        )));
    }
    Ok(())
}

/// The stored text and the version of a value, refusing one over max_value_bytes.
pub fn encode_value(limits: &Limits, value: &Value) -> Result<(String, String), StoreError> {
    let text = util::canonical(value);
    if text.len() > limits.max_value_bytes {
        return Err(StoreError::invalid(format!(
            "value is {} bytes, over max_value_bytes ({})",
            text.len(),
            limits.max_value_bytes
        )));
    }
    let version = util::digest(text.as_bytes());
    Ok((text, version))
}

fn page_limit(limits: &Limits, limit: Option<u32>) -> Result<usize, StoreError> {
    match limit {
        None | Some(0) => Ok(DEFAULT_PAGE.min(limits.max_page.max(1))),
        Some(n) if n as usize > limits.max_page => Err(StoreError::invalid(format!(
            "limit {n} is over max_page ({})",
            limits.max_page
        ))),
        Some(n) => Ok(n as usize),
    }
}

/// A batch's KV operations, validated: the owner, namespaces, keys and sizes.
/// Nothing is read or written.
pub fn validate_ops(
    limits: &Limits,
    owner: &str,
    checks: &[KvCheckItem],
    puts: &[KvPutItem],
    deletes: &[KvDeleteItem],
) -> Result<(), StoreError> {
    check_owner(owner)?;
    for c in checks {
        resolve_namespace(owner, &c.namespace)?;
        check_namespace_len(limits, &c.namespace)?;
        check_key(limits, &c.key)?;
        match (&c.version, c.absent) {
            (Some(_), true) => {
                return Err(StoreError::invalid(format!(
                    "check of {:?}: version and absent are exclusive",
                    c.key
                )))
            }
            (None, false) => {
                return Err(StoreError::invalid(format!(
                    "check of {:?}: needs a version or absent: true",
                    c.key
                )))
            }
            (Some(v), false) if v.len() > limits.max_key_bytes => {
                return Err(StoreError::invalid(format!(
                    "check of {:?}: version is {} bytes, over max_key_bytes ({})",
                    c.key,
                    v.len(),
                    limits.max_key_bytes
                )))
            }
            _ => {}
        }
    }
    for p in puts {
        resolve_namespace(owner, &p.namespace)?;
        check_namespace_len(limits, &p.namespace)?;
        check_key(limits, &p.key)?;
        encode_value(limits, &p.value)?;
    }
    for d in deletes {
        resolve_namespace(owner, &d.namespace)?;
        check_namespace_len(limits, &d.namespace)?;
        check_key(limits, &d.key)?;
    }
    Ok(())
}

fn stored_version(
    conn: &Connection,
    namespace: &str,
    key: &str,
) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT version FROM kv WHERE namespace = ?1 AND key = ?2")?
        .query_row(params![namespace, key], |r| r.get::<_, String>(0))
        .optional()?)
}

/// Apply the preconditions (validated by [`validate_ops`]): the first that fails is
/// `conflict`, naming its key.
pub fn apply_checks(
    conn: &Connection,
    owner: &str,
    checks: &[KvCheckItem],
) -> Result<(), StoreError> {
    for c in checks {
        let ns = resolve_namespace(owner, &c.namespace)?;
        let found = stored_version(conn, &ns, &c.key)?;
        let ok = match (&c.version, &found) {
            (Some(want), Some(have)) => want == have,
            (None, None) => c.absent,
            _ => false,
        };
        if !ok {
            let want = c.version.as_deref().unwrap_or("absent");
            let have = found.as_deref().unwrap_or("absent");
            return Err(StoreError::conflict(format!(
                "check failed on {ns}/{}: expected {want}, found {have}",
                c.key
            )));
        }
    }
    Ok(())
}

/// Apply the deletes, then the puts (validated by [`validate_ops`]).
pub fn apply_writes(
    conn: &Connection,
    limits: &Limits,
    owner: &str,
    puts: &[KvPutItem],
    deletes: &[KvDeleteItem],
) -> Result<(), StoreError> {
    let mut del = conn.prepare_cached("DELETE FROM kv WHERE namespace = ?1 AND key = ?2")?;
    for d in deletes {
        let ns = resolve_namespace(owner, &d.namespace)?;
        del.execute(params![ns, d.key])?;
    }
    let now = util::now();
    for p in puts {
        let ns = resolve_namespace(owner, &p.namespace)?;
        let (text, version) = encode_value(limits, &p.value)?;
        put_raw(conn, &ns, &p.key, &text, &version, &now)?;
    }
    Ok(())
}

pub(crate) fn put_raw(
    conn: &Connection,
    namespace: &str,
    key: &str,
    text: &str,
    version: &str,
    now: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO kv (namespace, key, value, version, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value,
             version = excluded.version, updated_at = excluded.updated_at",
    )?
    .execute(params![namespace, key, text, version, now])?;
    Ok(())
}

pub(crate) fn decode_value(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Internal(format!("a stored KV value is not JSON: {e}")))
}

// ---------------------------------------------------------------------------
// The sync cores

/// `store.kv_get`.
pub fn kv_get(
    conn: &Connection,
    limits: &Limits,
    req: &KvGetRequest,
) -> Result<KvGetResponse, StoreError> {
    check_owner(&req.owner)?;
    let ns = resolve_namespace(&req.owner, &req.namespace)?;
    check_key(limits, &req.key)?;
    let row = conn
        .prepare_cached("SELECT value, version FROM kv WHERE namespace = ?1 AND key = ?2")?
        .query_row(params![ns, req.key], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .optional()?;
    match row {
        None => Ok(KvGetResponse::default()),
        Some((text, version)) => Ok(KvGetResponse {
            value: Some(decode_value(&text)?),
            version: Some(version),
        }),
    }
}

/// `store.kv_list`.
pub fn kv_list(
    conn: &Connection,
    limits: &Limits,
    req: &KvListRequest,
) -> Result<KvListResponse, StoreError> {
    check_owner(&req.owner)?;
    let ns = resolve_namespace(&req.owner, &req.namespace)?;
    let limit = page_limit(limits, req.limit)?;
    for (what, s) in [("prefix", &req.prefix), ("after", &req.after)] {
        if s.len() > limits.max_key_bytes {
            return Err(StoreError::invalid(format!(
                "{what} is {} bytes, over max_key_bytes ({})",
                s.len(),
                limits.max_key_bytes
            )));
        }
    }
    // Keys sort bytewise, so the keys with a prefix are contiguous from the prefix
    // itself: read from there and stop at the first key without it.
    let mut stmt = conn.prepare_cached(
        "SELECT key, value, version FROM kv
         WHERE namespace = ?1 AND key >= ?2 AND key > ?3
         ORDER BY key LIMIT ?4",
    )?;
    let mut rows = stmt.query(params![ns, req.prefix, req.after, (limit + 1) as i64])?;
    let mut out = KvListResponse::default();
    while let Some(row) = rows.next()? {
        let key: String = row.get(0)?;
        if !key.starts_with(&req.prefix) {
            break;
        }
        if out.entries.len() == limit {
            out.next = out
                .entries
                .last()
                .map(|e| e.key.clone())
                .unwrap_or_default();
            break;
        }
        let text: String = row.get(1)?;
        out.entries.push(KvListEntry {
            key,
            value: decode_value(&text)?,
            version: row.get(2)?,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// The store's methods and the bus dispatch

impl Store {
    /// `store.kv_get`.
    pub async fn kv_get(&self, req: KvGetRequest) -> Result<KvGetResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| kv_get(conn, &limits, &req)).await
    }

    /// `store.kv_list`.
    pub async fn kv_list(&self, req: KvListRequest) -> Result<KvListResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| kv_list(conn, &limits, &req)).await
    }
}

crate::store_methods! {
    KvGetRequest => kv_get,
    KvListRequest => kv_list,
}
