//! Ingress checkpoints, one per source.

use super::*;
use crate::db::Limits;
use crate::error::StoreError;
use crate::sql::{params, Connection, OptionalExtension};
use crate::util;

/// `store.checkpoint_get`.
pub fn checkpoint_get(
    conn: &Connection,
    req: &CheckpointGetRequest,
) -> Result<CheckpointGetResponse, StoreError> {
    too_long("source", &req.source, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
    let row = conn
        .prepare_cached(
            "SELECT checkpoint, generation, updated_at FROM checkpoints WHERE source = ?1",
        )?
        .query_row([&req.source], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .optional()?;
    Ok(match row {
        None => CheckpointGetResponse::default(),
        Some((checkpoint, generation, updated_at)) => CheckpointGetResponse {
            checkpoint: Some(checkpoint),
            generation: Some(generation),
            updated_at: Some(updated_at),
        },
    })
}

/// `store.checkpoint_set`: a failed precondition is `conflict`.
pub fn checkpoint_set(
    conn: &Connection,
    limits: &Limits,
    req: &CheckpointSetRequest,
) -> Result<CheckpointSetResponse, StoreError> {
    if req.source.is_empty() {
        return Err(StoreError::invalid("a checkpoint needs a source"));
    }
    too_long("source", &req.source, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
    too_long(
        "generation",
        &req.generation,
        MAX_FIELD_BYTES,
        "MAX_FIELD_BYTES",
    )?;
    too_long(
        "checkpoint",
        &req.checkpoint,
        limits.max_value_bytes,
        "max_value_bytes",
    )?;
    if req.expect.is_some() && req.expect_absent {
        return Err(StoreError::invalid(
            "expect and expect_absent are exclusive",
        ));
    }
    let previous: Option<String> = conn
        .prepare_cached("SELECT checkpoint FROM checkpoints WHERE source = ?1")?
        .query_row([&req.source], |r| r.get(0))
        .optional()?;
    let holds = match (&req.expect, req.expect_absent) {
        (Some(want), _) => previous.as_ref() == Some(want),
        (None, true) => previous.is_none(),
        (None, false) => true,
    };
    if !holds {
        return Err(StoreError::conflict(format!(
            "checkpoint of {:?}: expected {}, found {}",
            req.source,
            req.expect.as_deref().unwrap_or("none"),
            previous.as_deref().unwrap_or("none")
        )));
    }
    conn.prepare_cached(
        "INSERT INTO checkpoints (source, checkpoint, generation, updated_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (source) DO UPDATE SET checkpoint = excluded.checkpoint,
             generation = excluded.generation, updated_at = excluded.updated_at",
    )?
    .execute(params![
        req.source,
        req.checkpoint,
        req.generation,
        util::now()
    ])?;
    Ok(CheckpointSetResponse { previous })
}
