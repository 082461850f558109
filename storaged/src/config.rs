//! Applied configurations: each apply of a changed configuration stores a new
//! generation with the digest of its canonical JSON. Daemons read the stored
//! generation, never the file.
//!
//! Applying the configuration of the latest generation again adds nothing
//! (`changed: false`). The schema keeps each hash once (`UNIQUE`), so re-applying
//! an older configuration after another moves it to a new generation: its old row
//! is removed and a new one, with the next number, is written.

use crate::db::Store;
use crate::error::StoreError;
use crate::sql::{Connection, OptionalExtension};
use crate::util;
pub use busapi::store::config::*;
use serde_json::Value;

/// The largest configuration (its canonical JSON).
pub const MAX_CONFIG_BYTES: usize = 8 * 1024 * 1024;

/// The digest a configuration is known by, and its canonical text.
pub fn config_hash(config: &Value) -> (String, String) {
    let text = util::canonical(config);
    (util::digest(text.as_bytes()), text)
}

/// Store `config` as the current generation unless it already is.
pub fn config_apply(conn: &Connection, config: &Value) -> Result<ConfigApplyResponse, StoreError> {
    if !config.is_object() {
        return Err(StoreError::invalid("a configuration must be a JSON object"));
    }
    let (hash, text) = config_hash(config);
    if text.len() > MAX_CONFIG_BYTES {
        return Err(StoreError::invalid(format!(
            "the configuration is {} bytes, over max_config_bytes ({MAX_CONFIG_BYTES})",
            text.len()
        )));
    }
    let latest: Option<(i64, String)> = conn
        .query_row(
            "SELECT generation, hash FROM config_generations ORDER BY generation DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    if let Some((generation, latest_hash)) = latest {
        if latest_hash == hash {
            return Ok(ConfigApplyResponse {
                generation,
                hash,
                changed: false,
            });
        }
    }
    let generation: i64 = conn.query_row(
        "INSERT INTO config_generations (hash, config, applied_at) VALUES (?1, ?2, ?3)
         RETURNING generation",
        crate::sql::params![hash, text, util::now()],
        |r| r.get(0),
    )?;
    Ok(ConfigApplyResponse {
        generation,
        hash,
        changed: true,
    })
}

fn row_to_generation(r: &crate::sql::Row<'_>) -> crate::sql::Result<(i64, String, String, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
}

fn to_generation(row: (i64, String, String, String)) -> Result<ConfigGeneration, StoreError> {
    let (generation, hash, text, applied_at) = row;
    let config = serde_json::from_str(&text).map_err(|e| {
        StoreError::Internal(format!("stored configuration {generation} is corrupt: {e}"))
    })?;
    Ok(ConfigGeneration {
        generation,
        hash,
        config,
        applied_at,
    })
}

/// The latest generation, if any.
pub fn config_current(conn: &Connection) -> Result<Option<ConfigGeneration>, StoreError> {
    conn.query_row(
        "SELECT generation, hash, config, applied_at FROM config_generations
          ORDER BY generation DESC LIMIT 1",
        [],
        row_to_generation,
    )
    .optional()?
    .map(to_generation)
    .transpose()
}

/// One generation, if stored.
pub fn config_generation(
    conn: &Connection,
    generation: i64,
) -> Result<Option<ConfigGeneration>, StoreError> {
    conn.query_row(
        "SELECT generation, hash, config, applied_at FROM config_generations
          WHERE generation = ?1",
        [generation],
        row_to_generation,
    )
    .optional()?
    .map(to_generation)
    .transpose()
}

impl Store {
    /// `store.config_apply`.
    pub async fn config_apply(
        &self,
        req: ConfigApplyRequest,
    ) -> Result<ConfigApplyResponse, StoreError> {
        self.write(move |conn| config_apply(conn, &req.config))
            .await
    }

    /// `store.config_current`.
    pub async fn config_current(
        &self,
        _req: ConfigCurrentRequest,
    ) -> Result<ConfigGeneration, StoreError> {
        self.read(config_current)
            .await?
            .ok_or_else(|| StoreError::not_found("no configuration has been applied"))
    }

    /// `store.config_generation`.
    pub async fn config_generation(
        &self,
        req: ConfigGenerationRequest,
    ) -> Result<ConfigGeneration, StoreError> {
        let generation = req.generation;
        self.read(move |conn| config_generation(conn, generation))
            .await?
            .ok_or_else(|| {
                StoreError::not_found(format!("no configuration generation {generation}"))
            })
    }
}

crate::store_methods! {
    ConfigApplyRequest => config_apply,
    ConfigCurrentRequest => config_current,
    ConfigGenerationRequest => config_generation,
}
