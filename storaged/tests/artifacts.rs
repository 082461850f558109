//! Artifacts: chunked writes at exact offsets, bounded chunks and sizes, atomic
//! commit (fsync, rename, row), abort, reads, paging, and ids that can never
//! escape the artifacts directory.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use std::path::{Path, PathBuf};
use storaged::artifacts::{
    self, ArtifactAbortRequest, ArtifactCommitRequest, ArtifactCreateRequest, ArtifactGetRequest,
    ArtifactReadRequest, ArtifactWriteRequest, ArtifactsRequest, MAX_OPEN_ARTIFACTS,
};
use storaged::{util, Limits, Store, StoreError};

const CHUNK: usize = 256 * 1024;

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "oc-art-{name}-{}-{}",
            std::process::id(),
            util::new_id("t")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(b: Backend, dir: &TempDir) -> Store {
    b.open(&dir.0, Limits::default())
}

fn tmp_file(dir: &Path, id: &str) -> PathBuf {
    dir.join("artifacts").join("tmp").join(id)
}

fn meta_file(dir: &Path, id: &str) -> PathBuf {
    dir.join("artifacts").join("tmp").join(format!("{id}.meta"))
}

fn final_file(dir: &Path, id: &str) -> PathBuf {
    dir.join("artifacts").join(id)
}

/// Deterministic, non-repeating-looking bytes.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 7) as u8
        })
        .collect()
}

async fn create(store: &Store, execution: Option<&str>, max_bytes: Option<u64>) -> String {
    store
        .artifact_create(ArtifactCreateRequest {
            execution_id: execution.map(str::to_string),
            name: "transcript".into(),
            media_type: Some("text/plain".into()),
            max_bytes,
        })
        .await
        .unwrap()
        .artifact_id
}

async fn write(store: &Store, id: &str, offset: u64, data: &[u8]) -> Result<u64, StoreError> {
    store
        .artifact_write(ArtifactWriteRequest {
            artifact_id: id.into(),
            offset,
            data: data.to_vec(),
        })
        .await
        .map(|r| r.size)
}

async fn commit(
    store: &Store,
    id: &str,
    size: Option<u64>,
) -> Result<artifacts::ArtifactCommitResponse, StoreError> {
    store
        .artifact_commit(ArtifactCommitRequest {
            artifact_id: id.into(),
            size,
        })
        .await
}

async fn read(
    store: &Store,
    id: &str,
    offset: u64,
    length: u64,
) -> Result<artifacts::ArtifactReadResponse, StoreError> {
    store
        .artifact_read(ArtifactReadRequest {
            artifact_id: id.into(),
            offset,
            length,
        })
        .await
}

async fn abort(store: &Store, id: &str) -> Result<(), StoreError> {
    store
        .artifact_abort(ArtifactAbortRequest {
            artifact_id: id.into(),
        })
        .await
        .map(|_| ())
}

async fn rows(store: &Store) -> i64 {
    store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM artifacts", [], |r| r.get(0))?))
        .await
        .unwrap()
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

async fn sixteen_mib_round_trip_in_256_kib_chunks(b: Backend) {
    let dir = TempDir::new("roundtrip");
    let store = open(b, &dir);
    let id = create(&store, Some("exe_1"), None).await;
    assert!(id.starts_with("art_"), "{id}");
    assert!(tmp_file(&dir.0, &id).exists());
    assert!(meta_file(&dir.0, &id).exists());

    let total = 16 * 1024 * 1024;
    let bytes = pattern(total, 7);
    let mut offset = 0u64;
    for chunk in bytes.chunks(CHUNK) {
        let size = write(&store, &id, offset, chunk).await.unwrap();
        offset += chunk.len() as u64;
        assert_eq!(size, offset);
    }
    // Not visible before the commit.
    assert!(matches!(
        read(&store, &id, 0, 10).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(rows(&store).await, 0);

    let done = commit(&store, &id, Some(total as u64)).await.unwrap();
    assert_eq!(done.artifact_id, id);
    assert_eq!(done.size, total as u64);
    assert_eq!(done.digest, util::digest(&bytes));

    // The committed file is in place, the tmp files are gone.
    assert!(final_file(&dir.0, &id).exists());
    assert_eq!(file_len(&final_file(&dir.0, &id)), total as u64);
    assert!(!tmp_file(&dir.0, &id).exists());
    assert!(!meta_file(&dir.0, &id).exists());
    assert_eq!(std::fs::read(final_file(&dir.0, &id)).unwrap(), bytes);

    // The row.
    let row = store
        .artifact_get(ArtifactGetRequest {
            artifact_id: id.clone(),
        })
        .await
        .unwrap();
    assert_eq!(row.artifact_id, id);
    assert_eq!(row.execution_id, "exe_1");
    assert_eq!(row.name, "transcript");
    assert_eq!(row.media_type, "text/plain");
    assert_eq!(row.size, total as u64);
    assert_eq!(row.digest, util::digest(&bytes));
    assert!(row.created_ms > 0 && row.created_at.ends_with('Z'));

    // Read it all back, every byte.
    let mut back = Vec::with_capacity(total);
    let mut offset = 0u64;
    loop {
        let r = read(&store, &id, offset, CHUNK as u64).await.unwrap();
        assert_eq!(r.size, total as u64);
        offset += r.data.len() as u64;
        back.extend_from_slice(&r.data);
        assert_eq!(r.eof, offset == total as u64);
        if r.eof {
            break;
        }
        assert_eq!(r.data.len(), CHUNK);
    }
    assert_eq!(back.len(), bytes.len());
    assert!(
        back == bytes,
        "the bytes read differ from the bytes written"
    );

    // An unaligned read, a short read at the end, an empty read at the end.
    let r = read(&store, &id, 12_345, 1000).await.unwrap();
    assert_eq!(r.data, bytes[12_345..13_345]);
    assert!(!r.eof);
    let r = read(&store, &id, total as u64 - 10, 1000).await.unwrap();
    assert_eq!(r.data, bytes[total - 10..]);
    assert!(r.eof);
    let r = read(&store, &id, total as u64, 1000).await.unwrap();
    assert!(r.data.is_empty() && r.eof);

    // Committing again answers the same (a retried commit); with another size, conflict.
    let again = commit(&store, &id, None).await.unwrap();
    assert_eq!(again.digest, done.digest);
    assert_eq!(again.size, done.size);
    let e = commit(&store, &id, Some(1)).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    assert_eq!(rows(&store).await, 1);

    // A committed artifact takes no more chunks and cannot be aborted.
    let e = write(&store, &id, total as u64, b"x").await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("committed")),
        "{e}"
    );
    let e = abort(&store, &id).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    assert_eq!(file_len(&final_file(&dir.0, &id)), total as u64);
    store.close();
}

async fn a_chunk_must_be_at_the_current_size(b: Backend) {
    let dir = TempDir::new("offset");
    let store = open(b, &dir);
    let id = create(&store, None, None).await;
    assert_eq!(write(&store, &id, 0, b"0123456789").await.unwrap(), 10);
    for wrong in [0u64, 9, 11, 1 << 40] {
        let e = write(&store, &id, wrong, b"abc").await.unwrap_err();
        match &e {
            StoreError::Conflict(m) => {
                assert!(m.contains(&wrong.to_string()) && m.contains("10"), "{m}")
            }
            other => panic!("expected conflict, got {other:?}"),
        }
    }
    // Nothing was written by the refused chunks.
    assert_eq!(file_len(&tmp_file(&dir.0, &id)), 10);
    // An empty chunk at the right offset is fine and changes nothing.
    assert_eq!(write(&store, &id, 10, b"").await.unwrap(), 10);
    assert_eq!(write(&store, &id, 10, b"abc").await.unwrap(), 13);
    let done = commit(&store, &id, Some(13)).await.unwrap();
    assert_eq!(done.digest, util::digest(b"0123456789abc"));
    store.close();
}

async fn a_chunk_over_256_kib_is_invalid(b: Backend) {
    let dir = TempDir::new("chunk");
    let store = open(b, &dir);
    let id = create(&store, None, None).await;
    assert_eq!(
        write(&store, &id, 0, &vec![1u8; CHUNK]).await.unwrap(),
        CHUNK as u64
    );
    let e = write(&store, &id, CHUNK as u64, &vec![1u8; CHUNK + 1])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_chunk_bytes") && m.contains(&CHUNK.to_string())),
        "{e}"
    );
    assert_eq!(file_len(&tmp_file(&dir.0, &id)), CHUNK as u64);
    // A read over the chunk bound is refused as well.
    commit(&store, &id, None).await.unwrap();
    let e = read(&store, &id, 0, CHUNK as u64 + 1).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_chunk_bytes")),
        "{e}"
    );
    store.close();
}

async fn the_size_cap_is_invalid_to_cross(b: Backend) {
    let dir = TempDir::new("cap");
    let store = b.open(
        &dir.0,
        Limits {
            max_artifact_bytes: 1000,
            ..Limits::default()
        },
    );
    // The creator's cap.
    let id = create(&store, None, Some(100)).await;
    assert_eq!(write(&store, &id, 0, &[0u8; 60]).await.unwrap(), 60);
    let e = write(&store, &id, 60, &[0u8; 41]).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_bytes (100)")),
        "{e}"
    );
    assert_eq!(file_len(&tmp_file(&dir.0, &id)), 60);
    assert_eq!(write(&store, &id, 60, &[0u8; 40]).await.unwrap(), 100);
    let e = write(&store, &id, 100, &[0u8; 1]).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    commit(&store, &id, Some(100)).await.unwrap();

    // The store's cap, when the creator names none (or 0).
    for max in [None, Some(0)] {
        let id = create(&store, None, max).await;
        assert_eq!(write(&store, &id, 0, &[0u8; 1000]).await.unwrap(), 1000);
        let e = write(&store, &id, 1000, &[0u8; 1]).await.unwrap_err();
        assert!(
            matches!(&e, StoreError::Invalid(m) if m.contains("max_artifact_bytes (1000)")),
            "{e}"
        );
        abort(&store, &id).await.unwrap();
    }

    // A cap over the store's is refused at creation, and nothing is created.
    let before = std::fs::read_dir(dir.0.join("artifacts/tmp"))
        .unwrap()
        .count();
    let e = store
        .artifact_create(ArtifactCreateRequest {
            execution_id: None,
            name: "big".into(),
            media_type: None,
            max_bytes: Some(1001),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_artifact_bytes (1000)")),
        "{e}"
    );
    let after = std::fs::read_dir(dir.0.join("artifacts/tmp"))
        .unwrap()
        .count();
    assert_eq!(before, after);
    store.close();
}

async fn a_commit_with_the_wrong_size_is_a_conflict_and_changes_nothing(b: Backend) {
    let dir = TempDir::new("size");
    let store = open(b, &dir);
    let id = create(&store, None, None).await;
    write(&store, &id, 0, b"hello").await.unwrap();
    for wrong in [0u64, 4, 6] {
        let e = commit(&store, &id, Some(wrong)).await.unwrap_err();
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains(&wrong.to_string()) && m.contains('5')),
            "{e}"
        );
    }
    assert_eq!(rows(&store).await, 0);
    assert!(tmp_file(&dir.0, &id).exists());
    assert!(!final_file(&dir.0, &id).exists());
    // Still open: write on and commit with the right size.
    write(&store, &id, 5, b" world").await.unwrap();
    let done = commit(&store, &id, Some(11)).await.unwrap();
    assert_eq!(done.digest, util::digest(b"hello world"));
    store.close();
}

async fn abort_removes_the_files(b: Backend) {
    let dir = TempDir::new("abort");
    let store = open(b, &dir);
    let id = create(&store, None, None).await;
    write(&store, &id, 0, b"discard me").await.unwrap();
    abort(&store, &id).await.unwrap();
    assert!(!tmp_file(&dir.0, &id).exists());
    assert!(!meta_file(&dir.0, &id).exists());
    assert!(!final_file(&dir.0, &id).exists());
    assert_eq!(rows(&store).await, 0);
    for e in [
        write(&store, &id, 10, b"x").await.unwrap_err(),
        commit(&store, &id, None).await.unwrap_err(),
        abort(&store, &id).await.unwrap_err(),
        read(&store, &id, 0, 1).await.unwrap_err(),
    ] {
        assert!(matches!(e, StoreError::NotFound(_)), "{e}");
    }
    // An id never created.
    let e = write(&store, "art_nope", 0, b"x").await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e}");
    store.close();
}

async fn bad_ids_are_invalid_and_touch_nothing(b: Backend) {
    let dir = TempDir::new("ids");
    let store = open(b, &dir);
    // A file a path escape would reach.
    std::fs::write(dir.0.join("x"), b"keep").unwrap();
    let long = "a".repeat(65);
    for bad in [
        "../x",
        "",
        "A",
        "a/b",
        "..",
        "art_1.meta",
        "a b",
        "é",
        long.as_str(),
    ] {
        let errs = [
            write(&store, bad, 0, b"x").await.unwrap_err(),
            commit(&store, bad, None).await.unwrap_err(),
            abort(&store, bad).await.unwrap_err(),
            read(&store, bad, 0, 1).await.unwrap_err(),
            store
                .artifact_get(ArtifactGetRequest {
                    artifact_id: bad.into(),
                })
                .await
                .unwrap_err(),
        ];
        for e in errs {
            assert!(
                matches!(&e, StoreError::Invalid(m) if m.contains("artifact id")),
                "{bad:?}: {e}"
            );
        }
    }
    assert_eq!(std::fs::read(dir.0.join("x")).unwrap(), b"keep");
    assert!(artifacts::is_valid_id("art_0123abc"));
    store.close();
}

async fn create_validates_its_fields_and_bounds_open_artifacts(b: Backend) {
    let dir = TempDir::new("create");
    let store = open(b, &dir);
    let long = "n".repeat(257);
    for (name, media, exe) in [
        ("", None, None),
        (long.as_str(), None, None),
        ("ok", Some(long.clone()), None),
        ("ok", None, Some(long.clone())),
    ] {
        let e = store
            .artifact_create(ArtifactCreateRequest {
                execution_id: exe,
                name: name.into(),
                media_type: media,
                max_bytes: None,
            })
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    }
    let mut ids = Vec::new();
    for _ in 0..MAX_OPEN_ARTIFACTS {
        ids.push(create(&store, None, None).await);
    }
    let e = store
        .artifact_create(ArtifactCreateRequest {
            execution_id: None,
            name: "one too many".into(),
            media_type: None,
            max_bytes: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_open_artifacts") && m.contains("64")),
        "{e}"
    );
    // Committing or aborting one frees a place.
    abort(&store, &ids[0]).await.unwrap();
    let fresh = create(&store, None, None).await;
    let e = store
        .artifact_create(ArtifactCreateRequest {
            execution_id: None,
            name: "still too many".into(),
            media_type: None,
            max_bytes: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    commit(&store, &ids[1], None).await.unwrap();
    create(&store, None, None).await;
    assert_ne!(fresh, ids[0]);
    store.close();
}

async fn a_busy_artifact_is_a_conflict(b: Backend) {
    use nix::fcntl::{Flock, FlockArg};
    let dir = TempDir::new("busy");
    let store = open(b, &dir);
    let id = create(&store, None, None).await;
    write(&store, &id, 0, b"abc").await.unwrap();
    // Another writer holds the artifact (as a concurrent chunk would).
    let f = std::fs::File::open(tmp_file(&dir.0, &id)).unwrap();
    let held = Flock::lock(f, FlockArg::LockExclusive).unwrap();
    for e in [
        write(&store, &id, 3, b"def").await.unwrap_err(),
        commit(&store, &id, None).await.unwrap_err(),
        abort(&store, &id).await.unwrap_err(),
    ] {
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains("busy")),
            "{e}"
        );
    }
    drop(held);
    assert_eq!(write(&store, &id, 3, b"def").await.unwrap(), 6);
    commit(&store, &id, Some(6)).await.unwrap();
    store.close();
}

async fn a_commit_interrupted_after_the_rename_is_finished_by_committing_again(b: Backend) {
    let dir = TempDir::new("resume");
    let store = open(b, &dir);
    let id = create(&store, Some("exe_9"), None).await;
    write(&store, &id, 0, b"durable bytes").await.unwrap();
    // As if the process died after the rename, before the row.
    std::fs::rename(tmp_file(&dir.0, &id), final_file(&dir.0, &id)).unwrap();
    assert_eq!(rows(&store).await, 0);
    let e = commit(&store, &id, Some(3)).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    assert_eq!(rows(&store).await, 0);
    let done = commit(&store, &id, Some(13)).await.unwrap();
    assert_eq!(done.digest, util::digest(b"durable bytes"));
    assert!(!meta_file(&dir.0, &id).exists());
    let row = store
        .artifact_get(ArtifactGetRequest {
            artifact_id: id.clone(),
        })
        .await
        .unwrap();
    assert_eq!(row.execution_id, "exe_9");
    store.close();
}

async fn reads_are_bounded_and_lists_are_paged(b: Backend) {
    let dir = TempDir::new("list");
    let store = open(b, &dir);
    let mut ids = Vec::new();
    for i in 0..5 {
        let exe = if i % 2 == 0 { "exe_even" } else { "exe_odd" };
        let id = create(&store, Some(exe), None).await;
        write(&store, &id, 0, format!("artifact {i}").as_bytes())
            .await
            .unwrap();
        commit(&store, &id, None).await.unwrap();
        ids.push(id);
    }
    // Offset past the end.
    let e = read(&store, &ids[0], 11, 1).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    let e = store
        .artifact_get(ArtifactGetRequest {
            artifact_id: "art_missing".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e}");

    // Pages of two, in commit order.
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .artifacts(ArtifactsRequest {
                execution_id: None,
                after,
                limit: Some(2),
            })
            .await
            .unwrap();
        assert!(page.artifacts.len() <= 2);
        seen.extend(page.artifacts.iter().map(|a| a.artifact_id.clone()));
        match page.next {
            Some(n) => after = n,
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let even = store
        .artifacts(ArtifactsRequest {
            execution_id: Some("exe_even".into()),
            after: 0,
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(even.artifacts.len(), 3);
    assert!(even.next.is_none());
    assert!(even.artifacts.iter().all(|a| a.execution_id == "exe_even"));
    for bad in [0usize, 1001] {
        let e = store
            .artifacts(ArtifactsRequest {
                execution_id: None,
                after: 0,
                limit: Some(bad),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Invalid(m) if m.contains("max_page")),
            "{e}"
        );
    }
    store.close();
}

async fn dispatch_speaks_json_and_base64(b: Backend) {
    let dir = TempDir::new("dispatch");
    let store = open(b, &dir);
    let raw = |v: serde_json::Value| serde_json::value::to_raw_value(&v).unwrap();
    assert!(artifacts::dispatch(&store, "store.kv_get", &raw(json!({})))
        .await
        .is_none());
    for m in artifacts::METHODS {
        let e = artifacts::dispatch(&store, m, &raw(json!({"bogus": 1})))
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Invalid(t) if t.contains("invalid params for")),
            "{m}: {e}"
        );
    }
    let created = artifacts::dispatch(
        &store,
        "store.artifact_create",
        &raw(json!({"name": "log", "execution_id": "exe_1"})),
    )
    .await
    .unwrap()
    .unwrap();
    let id = created["artifact_id"].as_str().unwrap().to_string();
    let e = artifacts::dispatch(
        &store,
        "store.artifact_write",
        &raw(json!({"artifact_id": id, "offset": 0, "data": "not base64!"})),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    let w = artifacts::dispatch(
        &store,
        "store.artifact_write",
        &raw(json!({"artifact_id": id, "offset": 0, "data": "aGVsbG8="})),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(w, json!({"size": 5}));
    let c = artifacts::dispatch(
        &store,
        "store.artifact_commit",
        &raw(json!({"artifact_id": id, "size": 5})),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(c["digest"], json!(util::digest(b"hello")));
    let r = artifacts::dispatch(
        &store,
        "store.artifact_read",
        &raw(json!({"artifact_id": id, "offset": 1, "length": 3})),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r, json!({"data": "ZWxs", "size": 5, "eof": false}));
    let l = artifacts::dispatch(&store, "store.artifacts", &raw(json!({})))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l["artifacts"][0]["artifact_id"], json!(id));
    store.close();
}

on_both!(
    sixteen_mib_round_trip_in_256_kib_chunks,
    a_chunk_must_be_at_the_current_size,
    a_chunk_over_256_kib_is_invalid,
    the_size_cap_is_invalid_to_cross,
    a_commit_with_the_wrong_size_is_a_conflict_and_changes_nothing,
    abort_removes_the_files,
    bad_ids_are_invalid_and_touch_nothing,
    create_validates_its_fields_and_bounds_open_artifacts,
    a_busy_artifact_is_a_conflict,
    a_commit_interrupted_after_the_rename_is_finished_by_committing_again,
    reads_are_bounded_and_lists_are_paged,
    dispatch_speaks_json_and_base64,
);
