//! Resource leases: which workspace a resource provider made for which Work, so the
//! host finds it again after any restart (`provider.lookup` by its `ref`) and knows
//! which workspaces it has handed out.
//!
//! A lease is keyed by (type, ref). `store.resource_lease_put` upserts it: a put for
//! an existing lease keeps its `created_at` and takes the new fields and
//! `updated_at`. Its `owner` is a Work ID that need not exist (a provider's
//! reconcile may report an owner storaged no longer has). A lease goes only by
//! `store.resource_lease_drop`, once the provider removed the workspace: retention
//! never removes one, even when its owner is long closed.
//!
//! `store.resource_leases` pages by (type, ref); its cursor (`next`, passed back as
//! `after`) is the last row's type and ref joined by a NUL character (`"git\u0000r1"`),
//! unambiguous because a type may not hold a NUL.
//!
//! `store.owner_status` answers, for each Work ID asked (at most
//! [`MAX_OWNER_STATUS`]), `open` (pending, idle, running, waiting, woken), `closed`
//! (completed, failed, cancelled; `closed_at` is the Work's `updated_at`) or
//! `unknown` (no such Work), in the order asked.

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::fields::{check_name, check_opt_name, check_text, page_limit, parse_json};
use crate::rpc::{read_method, write_method};
use crate::sql::{params, Connection, OptionalExtension, Row};
use crate::util;
use crate::work::state;
pub use busapi::store::resources::*;
use protocol::wire::{owner_status, OwnerStatus};

/// The longest lease directory, in bytes.
pub const MAX_DIR_BYTES: usize = 4096;
/// The largest lease `data` (its JSON text), in bytes.
pub const MAX_LEASE_DATA_BYTES: usize = 16 * 1024;
/// The most owners one `store.owner_status` asks about.
pub const MAX_OWNER_STATUS: usize = 500;

/// What separates the type from the ref in a `store.resource_leases` cursor.
const CURSOR_SEP: char = '\u{0}';

const LEASE_COLS: &str =
    "type, ref, owner, scope_id, binding, mode, dir, data, execution_id, created_at, updated_at";

fn lease_from_row(r: &Row<'_>) -> crate::sql::Result<LeaseRow> {
    Ok(LeaseRow {
        resource_type: r.get(0)?,
        reference: r.get(1)?,
        owner: r.get(2)?,
        scope_id: r.get(3)?,
        binding: r.get(4)?,
        mode: r.get(5)?,
        dir: r.get(6)?,
        data: parse_json(r.get(7)?),
        execution_id: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
    })
}

fn load(conn: &Connection, ty: &str, reference: &str) -> Result<Option<LeaseRow>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {LEASE_COLS} FROM resource_leases WHERE type = ?1 AND ref = ?2"),
            params![ty, reference],
            lease_from_row,
        )
        .optional()?)
}

/// A type: a name without a NUL (the cursor's separator).
fn check_type(field: &str, v: &str, limits: &Limits) -> Result<(), StoreError> {
    check_name(field, v, limits)?;
    if v.contains(CURSOR_SEP) {
        return Err(StoreError::invalid(format!(
            "{field} holds a NUL character"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// store.resource_lease_put, store.resource_lease_drop
// ---------------------------------------------------------------------------------------

/// Record a lease.
pub fn resource_lease_put(
    conn: &Connection,
    limits: &Limits,
    req: &LeasePutRequest,
) -> Result<LeasePutResponse, StoreError> {
    check_type("type", &req.resource_type, limits)?;
    check_name("ref", &req.reference, limits)?;
    check_name("owner", &req.owner, limits)?;
    check_opt_name("scope_id", &req.scope_id, limits)?;
    check_opt_name("binding", &req.binding, limits)?;
    check_opt_name("mode", &req.mode, limits)?;
    let execution_id = req.execution_id.as_deref().unwrap_or("");
    check_opt_name("execution_id", execution_id, limits)?;
    check_text("dir", &req.dir, MAX_DIR_BYTES, "max_dir_bytes")?;
    if !req.dir.starts_with('/') {
        return Err(StoreError::invalid(format!(
            "dir {:?} is not an absolute path",
            req.dir
        )));
    }
    if req.dir.contains('\u{0}') {
        return Err(StoreError::invalid("dir holds a NUL character"));
    }
    let data = match &req.data {
        Some(v) if !v.is_null() => {
            let text = serde_json::to_string(v)
                .map_err(|e| StoreError::invalid(format!("data is not JSON: {e}")))?;
            check_text("data", &text, MAX_LEASE_DATA_BYTES, "max_lease_data_bytes")?;
            Some(text)
        }
        _ => None,
    };
    let created = load(conn, &req.resource_type, &req.reference)?.is_none();
    let now = util::now();
    conn.execute(
        "INSERT INTO resource_leases (type, ref, owner, scope_id, binding, mode, dir, data, \
         execution_id, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10) \
         ON CONFLICT (type, ref) DO UPDATE SET owner = excluded.owner, \
         scope_id = excluded.scope_id, binding = excluded.binding, mode = excluded.mode, \
         dir = excluded.dir, data = excluded.data, execution_id = excluded.execution_id, \
         updated_at = excluded.updated_at",
        params![
            req.resource_type,
            req.reference,
            req.owner,
            req.scope_id,
            req.binding,
            req.mode,
            req.dir,
            data,
            execution_id,
            now
        ],
    )?;
    let lease = load(conn, &req.resource_type, &req.reference)?.ok_or_else(|| {
        StoreError::Internal(format!(
            "lease {}/{} vanished while recorded",
            req.resource_type, req.reference
        ))
    })?;
    Ok(LeasePutResponse { lease, created })
}

/// Drop a lease.
pub fn resource_lease_drop(
    conn: &Connection,
    limits: &Limits,
    req: &LeaseDropRequest,
) -> Result<LeaseDropResponse, StoreError> {
    check_type("type", &req.resource_type, limits)?;
    check_name("ref", &req.reference, limits)?;
    let n = conn.execute(
        "DELETE FROM resource_leases WHERE type = ?1 AND ref = ?2",
        params![req.resource_type, req.reference],
    )?;
    Ok(LeaseDropResponse { dropped: n > 0 })
}

// ---------------------------------------------------------------------------------------
// store.resource_leases
// ---------------------------------------------------------------------------------------

/// The cursor of a lease: its type and ref joined by NUL.
fn cursor(lease: &LeaseRow) -> String {
    format!("{}{CURSOR_SEP}{}", lease.resource_type, lease.reference)
}

/// A page of leases.
pub fn resource_leases(
    conn: &Connection,
    limits: &Limits,
    req: &LeasesRequest,
) -> Result<LeasesResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    let (after_type, after_ref) = if req.after.is_empty() {
        ("", "")
    } else {
        let Some((ty, reference)) = req.after.split_once(CURSOR_SEP) else {
            return Err(StoreError::invalid(
                "after is not a cursor store.resource_leases answered (type NUL ref)",
            ));
        };
        check_opt_name("after type", ty, limits)?;
        check_opt_name("after ref", reference, limits)?;
        (ty, reference)
    };
    let mut sql = format!("SELECT {LEASE_COLS} FROM resource_leases WHERE (type, ref) > (?1, ?2)");
    let mut args: Vec<&dyn crate::sql::ToSql> = vec![&after_type, &after_ref];
    for (col, v) in [("type", &req.resource_type), ("owner", &req.owner)] {
        if let Some(v) = v {
            check_opt_name(col, v, limits)?;
            args.push(v);
            sql.push_str(&format!(" AND {col} = ?{}", args.len()));
        }
    }
    args.push(&limit);
    sql.push_str(&format!(" ORDER BY type, ref LIMIT ?{}", args.len()));
    let mut stmt = conn.prepare(&sql)?;
    let leases = stmt
        .query_map(args.as_slice(), lease_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = match leases.last() {
        Some(l) if leases.len() as i64 == limit => cursor(l),
        _ => String::new(),
    };
    Ok(LeasesResponse { leases, next })
}

// ---------------------------------------------------------------------------------------
// store.owner_status
// ---------------------------------------------------------------------------------------

/// The owners' statuses.
pub fn owner_status(
    conn: &Connection,
    limits: &Limits,
    req: &OwnerStatusRequest,
) -> Result<OwnerStatusResponse, StoreError> {
    if req.owners.len() > MAX_OWNER_STATUS {
        return Err(StoreError::invalid(format!(
            "owners has {} entries, over max_owner_status ({MAX_OWNER_STATUS})",
            req.owners.len()
        )));
    }
    for owner in &req.owners {
        check_name("owners entry", owner, limits)?;
    }
    let mut stmt = conn.prepare_cached("SELECT state, updated_at FROM works WHERE id = ?1")?;
    let mut owners = Vec::with_capacity(req.owners.len());
    for owner in &req.owners {
        let found: Option<(String, String)> = stmt
            .query_row([owner], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let (status, closed_at) = match found {
            None => (owner_status::UNKNOWN, String::new()),
            Some((s, updated_at))
                if s == state::COMPLETED || s == state::FAILED || s == state::CANCELLED =>
            {
                (owner_status::CLOSED, updated_at)
            }
            Some(_) => (owner_status::OPEN, String::new()),
        };
        owners.push(OwnerStatus {
            owner: owner.clone(),
            status: status.to_string(),
            closed_at,
        });
    }
    Ok(OwnerStatusResponse { owners })
}

impl Store {
    write_method!(resource_lease_put, LeasePutRequest, LeasePutResponse);
    read_method!(resource_leases, LeasesRequest, LeasesResponse);
    write_method!(resource_lease_drop, LeaseDropRequest, LeaseDropResponse);
    read_method!(owner_status, OwnerStatusRequest, OwnerStatusResponse);
}

crate::store_methods! {
    LeasePutRequest => resource_lease_put,
    LeasesRequest => resource_leases,
    LeaseDropRequest => resource_lease_drop,
    OwnerStatusRequest => owner_status,
}
