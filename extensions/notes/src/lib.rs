//! The notes example extension: one small KV layout across three releases, to
//! show (and test) the KV layout migration of `configure`.
//!
//! - Release 1 (`kv_version` 1) keeps a note under `note/<id>` as `{"text": ..}`.
//! - Release 2 (`kv_version` 2) keeps `{"body": .., "v": 2}`; its migration 1→2
//!   rewrites every release-1 note.
//! - Release 3 (`kv_version` 3) keeps `{"body": .., "v": 3, "len": <chars>}`; its
//!   migration 2→3 adds `len`.
//!
//! Every migration step rewrites a note with a `kv.commit` guarded by the
//! version it read, and leaves a note already in the new shape alone, so it is
//! idempotent: a migration interrupted by a crash runs again at the next start
//! (the host records the new layout only after configure succeeds) and
//! finishes what is left. Each rewrite is logged to stderr as
//! `migrated note/<id> to <version>`.
//!
//! The binary picks its release from `OC_NOTES_RELEASE` (`1`, `2` or `3`; `3`
//! when unset) and serves the manifest `release-<n>.json` beside this code;
//! `OC_NOTES_CRASH_MID_MIGRATION=1` makes it exit right after the first note it
//! migrates (for the tests). Both must be granted to the package by the
//! operator (`pass_env`).
//!
//! Out of scope for now: the spec's other notes features (ingress, webhook
//! routes, operations, emissions, recurrences, tasks, the `notes-relay`
//! tunnel type).

use protocol::wire::{
    KvCheck, KvCommitParams, KvGetParams, KvGetResult, KvListParams, KvListResult, KvPut,
};
use protocol::{CallError, Code, RpcError};
use serde::Deserialize;
use serde_json::{json, Value};

/// The release manifests, by release.
pub const MANIFESTS: [&str; 3] = [
    include_str!("../release-1.json"),
    include_str!("../release-2.json"),
    include_str!("../release-3.json"),
];

/// The variable naming the release (`1`, `2`, `3`).
pub const RELEASE_ENV: &str = "OC_NOTES_RELEASE";
/// The variable that makes a migration exit after its first note.
pub const CRASH_ENV: &str = "OC_NOTES_CRASH_MID_MIGRATION";
/// The KV key prefix of the notes.
pub const NOTE_PREFIX: &str = "note/";

/// The manifest of `release` (1 to 3).
pub fn manifest(release: u32) -> Option<&'static str> {
    let i = usize::try_from(release.checked_sub(1)?).ok()?;
    MANIFESTS.get(i).copied()
}

/// A note's text, whatever the shape it is stored in.
pub fn text_of(value: &Value) -> Option<&str> {
    value
        .get("body")
        .or_else(|| value.get("text"))
        .and_then(Value::as_str)
}

/// The layout version a stored note is in (release 1's has no `v`).
pub fn layout_of(value: &Value) -> u64 {
    value.get("v").and_then(Value::as_u64).unwrap_or(1)
}

/// A note with `text` in the shape of layout `version`.
pub fn shape(version: u32, text: &str) -> Value {
    match version {
        0 | 1 => json!({ "text": text }),
        2 => json!({ "body": text, "v": 2 }),
        v => json!({ "body": text, "v": v, "len": text.chars().count() }),
    }
}

/// The note as migration step `to` leaves it, or `None` when it is already
/// there (or past it): that is what makes a step idempotent.
pub fn migrate_value(to: u32, value: &Value) -> Option<Value> {
    if to <= 1 || layout_of(value) >= u64::from(to) {
        return None;
    }
    let text = text_of(value)?;
    Some(shape(to, text))
}

fn rpc(e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => RpcError::new(Code::Unavailable, other.to_string()),
    }
}

/// Migrate every note from layout `from` to `to`, one step at a time. With
/// `crash_after_first`, exit the process right after the first rewrite.
pub async fn migrate(
    host: &sdk::Host,
    from: u32,
    to: u32,
    crash_after_first: bool,
) -> Result<(), RpcError> {
    for step in from.saturating_add(1)..=to {
        let mut after = String::new();
        loop {
            let page: KvListResult = host
                .call_typed(&KvListParams {
                    prefix: NOTE_PREFIX.into(),
                    after: after.clone(),
                    ..KvListParams::default()
                })
                .await
                .map_err(rpc)?;
            for entry in &page.entries {
                if migrate_note(host, step, &entry.key, &entry.value, &entry.version).await? {
                    eprintln!("migrated {} to {step}", entry.key);
                    if crash_after_first {
                        eprintln!("notes: exiting mid-migration, as asked");
                        std::process::exit(3);
                    }
                }
            }
            if page.next.is_empty() {
                break;
            }
            after = page.next;
        }
    }
    Ok(())
}

/// Rewrite one note for step `to`, guarded by the version read; on a conflict
/// (it changed meanwhile) re-read and decide again. Answers whether it wrote.
async fn migrate_note(
    host: &sdk::Host,
    to: u32,
    key: &str,
    value: &Value,
    version: &str,
) -> Result<bool, RpcError> {
    let (mut value, mut version) = (value.clone(), version.to_string());
    for _ in 0..8 {
        let Some(new) = migrate_value(to, &value) else {
            return Ok(false);
        };
        let batch = KvCommitParams {
            checks: vec![KvCheck::version(key, version.clone())],
            puts: vec![KvPut {
                key: key.into(),
                value: new,
                ..KvPut::default()
            }],
            ..KvCommitParams::default()
        };
        match host.kv_commit(&batch).await {
            Ok(_) => return Ok(true),
            Err(CallError::Rpc(e)) if e.is(Code::Conflict) => {
                let now = host.kv_get(key).await.map_err(rpc)?;
                match (now.value, now.version) {
                    (Some(v), Some(ver)) => (value, version) = (v, ver),
                    _ => return Ok(false), // deleted meanwhile
                }
            }
            Err(e) => return Err(rpc(e)),
        }
    }
    Err(RpcError::new(
        Code::Conflict,
        format!("{key} kept changing while it was migrated"),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutParams {
    id: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetParams {
    id: String,
}

fn note_key(id: &str) -> Result<String, RpcError> {
    if id.is_empty() || id.contains('/') {
        return Err(RpcError::invalid_params(
            "id must be non-empty, without '/'",
        ));
    }
    Ok(format!("{NOTE_PREFIX}{id}"))
}

/// The extension of `release` (1 to 3).
pub fn extension(release: u32, crash_mid_migration: bool) -> Result<sdk::Extension, String> {
    let manifest = manifest(release).ok_or_else(|| format!("no release {release}"))?;
    let ext = sdk::Extension::new(manifest)
        .map_err(|e| e.to_string())?
        .on_migrate(move |ctx, from, to| async move {
            migrate(&ctx.host, from, to, crash_mid_migration).await
        })
        .method("notes.put", move |ctx, p: PutParams| async move {
            let key = note_key(&p.id)?;
            let batch = KvCommitParams {
                puts: vec![KvPut {
                    key,
                    value: shape(release, &p.text),
                    ..KvPut::default()
                }],
                ..KvCommitParams::default()
            };
            ctx.host.kv_commit(&batch).await.map_err(rpc)?;
            Ok(json!({}))
        })
        .method("notes.get", |ctx, p: GetParams| async move {
            let key = note_key(&p.id)?;
            let got: KvGetResult = ctx
                .host
                .call_typed(&KvGetParams {
                    key,
                    ..KvGetParams::default()
                })
                .await
                .map_err(rpc)?;
            match got.value {
                Some(v) => Ok(json!({ "note": v })),
                None => Err(RpcError::new(Code::NotFound, format!("no note {:?}", p.id))),
            }
        });
    match ext.errors().first() {
        Some(e) => Err(e.to_string()),
        None => Ok(ext),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_idempotent() {
        let r1 = shape(1, "héllo");
        let r2 = migrate_value(2, &r1).expect("migrates");
        assert_eq!(r2, json!({"body": "héllo", "v": 2}));
        assert_eq!(migrate_value(2, &r2), None);
        let r3 = migrate_value(3, &r2).expect("migrates");
        assert_eq!(r3, json!({"body": "héllo", "v": 3, "len": 5}));
        assert_eq!(migrate_value(3, &r3), None);
        assert_eq!(migrate_value(2, &r3), None);
    }

    #[test]
    fn every_manifest_parses() {
        for release in 1..=3 {
            extension(release, false).expect("a valid release");
        }
        assert!(manifest(0).is_none() && manifest(4).is_none());
    }
}
