//! Artifacts: files under `<state>/artifacts`, written in acknowledged chunks of at
//! most `max_chunk_bytes` and committed atomically (write, fsync, rename, row).
//!
//! An open artifact is nothing but files, so no table of open artifacts lives in
//! memory: `artifacts/tmp/<id>` holds the bytes written so far (its length is the
//! offset the next chunk must be at) and `artifacts/tmp/<id>.meta` what the
//! creator asked for (execution, name, media type, cap). Every operation on an
//! open artifact holds an exclusive, non-blocking `flock` on its tmp file, so two
//! chunks (or a chunk and a commit) never interleave: the second is `conflict`.
//!
//! Commit: fsync the tmp file, rename it to `artifacts/<id>`, fsync the directory,
//! then insert the row through the writer; only then is the `.meta` removed. A row
//! therefore means the bytes are durable. A crash between the rename and the row
//! leaves the file and its `.meta`: committing again finishes the job, and
//! retention removes both once the `.meta` is stale. Retention removes a file in
//! `artifacts/` only when it has neither a row nor a `.meta`.
//!
//! All file I/O runs in `spawn_blocking`, never on the writer thread.

use crate::db::Store;
use crate::error::StoreError;
use crate::sql::{Connection, OptionalExtension};
use crate::util;
pub use busapi::store::artifacts::*;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Most artifacts open (created, neither committed nor aborted) at once.
pub const MAX_OPEN_ARTIFACTS: usize = 64;
/// Longest artifact id.
pub const MAX_ID_BYTES: usize = 64;
/// Longest name, media type or execution id of an artifact.
pub const MAX_NAME_BYTES: usize = 256;
/// The page size of `store.artifacts` when the request names none.
pub const DEFAULT_PAGE: usize = 100;

/// The suffix of an open artifact's sidecar file.
pub(crate) const META_SUFFIX: &str = ".meta";
/// The lock file that serialises creations (for the open-artifact bound).
const CREATE_LOCK: &str = ".create.lock";

// ---------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------

/// What `artifacts/tmp/<id>.meta` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenMeta {
    execution_id: String,
    name: String,
    media_type: String,
    /// The cap in force.
    max_bytes: u64,
    /// Which limit the cap is: `max_bytes` (the creator's) or `max_artifact_bytes`.
    cap_name: String,
    created_ms: i64,
}

// ---------------------------------------------------------------------------------------
// Paths and ids
// ---------------------------------------------------------------------------------------

/// `<state>/artifacts`.
pub fn artifacts_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("artifacts")
}

/// `<state>/artifacts/tmp`.
pub fn tmp_dir(state_dir: &Path) -> PathBuf {
    artifacts_dir(state_dir).join("tmp")
}

/// Whether `id` may name an artifact: 1 to 64 of `[a-z0-9_]`, so that it can never
/// escape the artifacts directory.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Refuse an id that is not [`is_valid_id`].
pub fn check_id(id: &str) -> Result<(), StoreError> {
    if is_valid_id(id) {
        return Ok(());
    }
    let shown: String = id.chars().take(MAX_ID_BYTES).collect();
    Err(StoreError::invalid(format!(
        "invalid artifact id {shown:?}: 1 to {MAX_ID_BYTES} characters of a-z, 0-9 and _"
    )))
}

fn check_text(field: &str, value: &str) -> Result<(), StoreError> {
    if value.len() > MAX_NAME_BYTES {
        return Err(StoreError::invalid(format!(
            "artifact {field} is {} bytes, over the limit of {MAX_NAME_BYTES} bytes",
            value.len()
        )));
    }
    Ok(())
}

fn io(what: impl std::fmt::Display, e: std::io::Error) -> StoreError {
    StoreError::io(what, &e)
}

/// Run blocking file work off the async threads.
async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Internal(format!("artifact file task: {e}")))?
}

/// fsync a directory, so a rename or removal in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(format_args!("fsync {}", dir.display()), e))
}

// ---------------------------------------------------------------------------------------
// Open artifacts (files only)
// ---------------------------------------------------------------------------------------

fn read_meta(path: &Path) -> Result<OpenMeta, StoreError> {
    let text = std::fs::read(path).map_err(|e| io(format_args!("read {}", path.display()), e))?;
    serde_json::from_slice(&text)
        .map_err(|e| StoreError::Internal(format!("corrupt {}: {e}", path.display())))
}

/// Why an artifact is not open: it was committed, or it never was (or is gone).
fn not_open(state_dir: &Path, id: &str) -> StoreError {
    if artifacts_dir(state_dir).join(id).exists() {
        StoreError::conflict(format!("artifact {id} is already committed"))
    } else {
        StoreError::not_found(format!("no open artifact {id}"))
    }
}

/// Open `tmp/<id>` and take its exclusive lock, checking the path still names the
/// file locked (a commit may have renamed it in between).
fn open_locked(state_dir: &Path, id: &str) -> Result<Flock<File>, StoreError> {
    let path = tmp_dir(state_dir).join(id);
    let file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(not_open(state_dir, id)),
        Err(e) => return Err(io(format_args!("open {}", path.display()), e)),
    };
    let locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, Errno::EWOULDBLOCK)) => {
            return Err(StoreError::conflict(format!(
                "artifact {id} is busy: another write, commit or abort of it is in progress"
            )))
        }
        Err((_, errno)) => {
            return Err(StoreError::Io(format!("lock {}: {errno}", path.display())));
        }
    };
    let held = locked
        .metadata()
        .map_err(|e| io(format_args!("stat {}", path.display()), e))?;
    match std::fs::metadata(&path) {
        Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => Ok(locked),
        Ok(_) => Err(not_open(state_dir, id)),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(not_open(state_dir, id)),
        Err(e) => Err(io(format_args!("stat {}", path.display()), e)),
    }
}

/// Create the files of a new open artifact, within the open-artifact bound.
fn create_files(state_dir: &Path, id: &str, meta: &OpenMeta) -> Result<(), StoreError> {
    let tmp = tmp_dir(state_dir);
    std::fs::create_dir_all(&tmp).map_err(|e| io(format_args!("create {}", tmp.display()), e))?;
    let lock_path = tmp.join(CREATE_LOCK);
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io(format_args!("open {}", lock_path.display()), e))?;
    let _guard = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| StoreError::Io(format!("lock {}: {errno}", lock_path.display())))?;
    let entries =
        std::fs::read_dir(&tmp).map_err(|e| io(format_args!("list {}", tmp.display()), e))?;
    let mut open = 0usize;
    for entry in entries {
        let entry = entry.map_err(|e| io(format_args!("list {}", tmp.display()), e))?;
        if entry.file_name().to_string_lossy().ends_with(META_SUFFIX) {
            open += 1;
        }
    }
    if open >= MAX_OPEN_ARTIFACTS {
        return Err(StoreError::invalid(format!(
            "{open} artifacts are open, the limit is {MAX_OPEN_ARTIFACTS} (max_open_artifacts): commit or abort one first"
        )));
    }
    let meta_path = tmp.join(format!("{id}{META_SUFFIX}"));
    let data_path = tmp.join(id);
    let text = serde_json::to_vec(meta)
        .map_err(|e| StoreError::Internal(format!("encode artifact meta: {e}")))?;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&meta_path)
        .map_err(|e| io(format_args!("create {}", meta_path.display()), e))?;
    if let Err(e) = f.write_all(&text) {
        let _ = std::fs::remove_file(&meta_path);
        return Err(io(format_args!("write {}", meta_path.display()), e));
    }
    if let Err(e) = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&data_path)
    {
        let _ = std::fs::remove_file(&meta_path);
        return Err(io(format_args!("create {}", data_path.display()), e));
    }
    Ok(())
}

/// Append one chunk at exactly the current size.
fn write_chunk(state_dir: &Path, id: &str, offset: u64, data: &[u8]) -> Result<u64, StoreError> {
    let mut file = open_locked(state_dir, id)?;
    let meta = read_meta(&tmp_dir(state_dir).join(format!("{id}{META_SUFFIX}")))?;
    let size = file
        .metadata()
        .map_err(|e| io(format_args!("stat artifact {id}"), e))?
        .len();
    if offset != size {
        return Err(StoreError::conflict(format!(
            "artifact {id}: the chunk is at offset {offset}, but the artifact holds {size} bytes"
        )));
    }
    let after = size.saturating_add(data.len() as u64);
    if after > meta.max_bytes {
        return Err(StoreError::invalid(format!(
            "artifact {id} would be {after} bytes, over {} ({})",
            meta.cap_name, meta.max_bytes
        )));
    }
    if data.is_empty() {
        return Ok(size);
    }
    let written = file
        .seek(SeekFrom::Start(size))
        .and_then(|_| file.write_all(data));
    if let Err(e) = written {
        // Leave the artifact at its acknowledged size, so the chunk can be retried.
        let _ = file.set_len(size);
        return Err(io(format_args!("write artifact {id}"), e));
    }
    Ok(after)
}

/// sha256 of a whole file, and its length.
fn hash_file(file: &mut File) -> Result<(u64, String), std::io::Error> {
    use sha2::{Digest, Sha256};
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in hasher.finalize() {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
    }
    Ok((total, out))
}

/// The bytes of an artifact made durable under their final name.
struct Finished {
    meta: OpenMeta,
    size: u64,
    digest: String,
}

fn check_size(id: &str, expected: Option<u64>, size: u64) -> Result<(), StoreError> {
    match expected {
        Some(want) if want != size => Err(StoreError::conflict(format!(
            "artifact {id}: the commit expects {want} bytes, but the artifact holds {size}"
        ))),
        _ => Ok(()),
    }
}

/// fsync, rename into place, fsync the directory. Also finishes a commit whose
/// rename happened but whose row did not (a crash or a failed write).
fn finish_file(state_dir: &Path, id: &str, expected: Option<u64>) -> Result<Finished, StoreError> {
    let dir = artifacts_dir(state_dir);
    let tmp = tmp_dir(state_dir);
    let meta_path = tmp.join(format!("{id}{META_SUFFIX}"));
    let final_path = dir.join(id);
    let tmp_path = tmp.join(id);
    if !tmp_path.exists() && final_path.exists() && meta_path.exists() {
        let meta = read_meta(&meta_path)?;
        let mut f = File::open(&final_path)
            .map_err(|e| io(format_args!("open {}", final_path.display()), e))?;
        let (size, digest) =
            hash_file(&mut f).map_err(|e| io(format_args!("read {}", final_path.display()), e))?;
        check_size(id, expected, size)?;
        return Ok(Finished { meta, size, digest });
    }
    let mut file = open_locked(state_dir, id)?;
    let meta = read_meta(&meta_path)?;
    let (size, digest) =
        hash_file(&mut file).map_err(|e| io(format_args!("read {}", tmp_path.display()), e))?;
    check_size(id, expected, size)?;
    file.sync_all()
        .map_err(|e| io(format_args!("fsync {}", tmp_path.display()), e))?;
    std::fs::rename(&tmp_path, &final_path).map_err(|e| {
        io(
            format_args!("rename {} to {}", tmp_path.display(), final_path.display()),
            e,
        )
    })?;
    sync_dir(&dir)?;
    sync_dir(&tmp)?;
    drop(file);
    Ok(Finished { meta, size, digest })
}

fn abort_files(state_dir: &Path, id: &str) -> Result<(), StoreError> {
    let file = open_locked(state_dir, id)?;
    let tmp = tmp_dir(state_dir);
    let data_path = tmp.join(id);
    std::fs::remove_file(&data_path)
        .map_err(|e| io(format_args!("remove {}", data_path.display()), e))?;
    drop(file);
    let meta_path = tmp.join(format!("{id}{META_SUFFIX}"));
    match std::fs::remove_file(&meta_path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(format_args!("remove {}", meta_path.display()), e)),
    }
}

fn read_range(path: &Path, offset: u64, length: u64) -> Result<Vec<u8>, StoreError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(StoreError::Internal(format!(
                "the file of a committed artifact is missing: {}",
                path.display()
            )))
        }
        Err(e) => return Err(io(format_args!("open {}", path.display()), e)),
    };
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| io(format_args!("seek {}", path.display()), e))?;
    let mut data = Vec::with_capacity(length as usize);
    f.take(length)
        .read_to_end(&mut data)
        .map_err(|e| io(format_args!("read {}", path.display()), e))?;
    Ok(data)
}

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------

const COLUMNS: &str =
    "id, execution_id, name, media_type, size, digest, created_at, created_ms, rowid";

fn row_to_artifact(r: &crate::sql::Row<'_>) -> crate::sql::Result<(Artifact, i64)> {
    let size: i64 = r.get(4)?;
    Ok((
        Artifact {
            artifact_id: r.get(0)?,
            execution_id: r.get(1)?,
            name: r.get(2)?,
            media_type: r.get(3)?,
            size: size.max(0) as u64,
            digest: r.get(5)?,
            created_at: r.get(6)?,
            created_ms: r.get(7)?,
        },
        r.get(8)?,
    ))
}

/// One committed artifact's row.
pub fn get_artifact(conn: &Connection, id: &str) -> Result<Option<Artifact>, StoreError> {
    let row = conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM artifacts WHERE id = ?1"),
            [id],
            row_to_artifact,
        )
        .optional()?;
    Ok(row.map(|(a, _)| a))
}

/// Insert a committed artifact's row; an existing row (a commit retried) is kept
/// and returned.
pub fn insert_artifact(conn: &Connection, a: &Artifact) -> Result<Artifact, StoreError> {
    conn.execute(
        "INSERT INTO artifacts
             (id, execution_id, name, media_type, size, digest, created_at, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
        crate::sql::params![
            a.artifact_id,
            a.execution_id,
            a.name,
            a.media_type,
            a.size as i64,
            a.digest,
            a.created_at,
            a.created_ms
        ],
    )?;
    get_artifact(conn, &a.artifact_id)?
        .ok_or_else(|| StoreError::Internal(format!("artifact {} vanished", a.artifact_id)))
}

/// A page of committed artifacts.
pub fn list_artifacts(
    conn: &Connection,
    req: &ArtifactsRequest,
    max_page: usize,
) -> Result<ArtifactsResponse, StoreError> {
    let limit = req.limit.unwrap_or(DEFAULT_PAGE.min(max_page));
    if limit == 0 || limit > max_page {
        return Err(StoreError::invalid(format!(
            "limit {limit} is outside 1 to max_page ({max_page})"
        )));
    }
    if let Some(e) = &req.execution_id {
        check_text("execution_id", e)?;
    }
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM artifacts
         WHERE rowid > ?1 AND (?2 IS NULL OR execution_id = ?2)
         ORDER BY rowid LIMIT ?3"
    ))?;
    let rows = stmt.query_map(
        crate::sql::params![req.after, req.execution_id, limit as i64 + 1],
        row_to_artifact,
    )?;
    let mut artifacts = Vec::with_capacity(limit);
    let mut last = None;
    let mut more = false;
    for row in rows {
        let (a, rowid) = row?;
        if artifacts.len() == limit {
            more = true;
            break;
        }
        artifacts.push(a);
        last = Some(rowid);
    }
    Ok(ArtifactsResponse {
        artifacts,
        next: if more { last } else { None },
    })
}

// ---------------------------------------------------------------------------------------
// The methods
// ---------------------------------------------------------------------------------------

impl Store {
    /// `store.artifact_create`.
    pub async fn artifact_create(
        &self,
        req: ArtifactCreateRequest,
    ) -> Result<ArtifactCreateResponse, StoreError> {
        if req.name.is_empty() {
            return Err(StoreError::invalid("an artifact needs a name"));
        }
        check_text("name", &req.name)?;
        let execution_id = req.execution_id.unwrap_or_default();
        check_text("execution_id", &execution_id)?;
        let media_type = req.media_type.unwrap_or_default();
        check_text("media_type", &media_type)?;
        let limit = self.limits().max_artifact_bytes;
        let (max_bytes, cap_name) = match req.max_bytes {
            None | Some(0) => (limit, "max_artifact_bytes"),
            Some(n) if n > limit => {
                return Err(StoreError::invalid(format!(
                    "max_bytes {n} is over max_artifact_bytes ({limit})"
                )))
            }
            Some(n) => (n, "max_bytes"),
        };
        let meta = OpenMeta {
            execution_id,
            name: req.name,
            media_type,
            max_bytes,
            cap_name: cap_name.to_string(),
            created_ms: util::now_ms(),
        };
        let id = util::new_id("art");
        let dir = self.dir().to_path_buf();
        let for_files = id.clone();
        blocking(move || create_files(&dir, &for_files, &meta)).await?;
        Ok(ArtifactCreateResponse { artifact_id: id })
    }

    /// `store.artifact_write`.
    pub async fn artifact_write(
        &self,
        req: ArtifactWriteRequest,
    ) -> Result<ArtifactWriteResponse, StoreError> {
        check_id(&req.artifact_id)?;
        let max = self.limits().max_chunk_bytes;
        if req.data.len() > max {
            return Err(StoreError::invalid(format!(
                "chunk is {} bytes, over max_chunk_bytes ({max})",
                req.data.len()
            )));
        }
        let dir = self.dir().to_path_buf();
        let size =
            blocking(move || write_chunk(&dir, &req.artifact_id, req.offset, &req.data)).await?;
        Ok(ArtifactWriteResponse { size })
    }

    /// `store.artifact_commit`.
    pub async fn artifact_commit(
        &self,
        req: ArtifactCommitRequest,
    ) -> Result<ArtifactCommitResponse, StoreError> {
        check_id(&req.artifact_id)?;
        let id = req.artifact_id.clone();
        if let Some(done) = self.committed(&id, req.size).await? {
            return Ok(done);
        }
        let dir = self.dir().to_path_buf();
        let files_id = id.clone();
        let finished = match blocking(move || finish_file(&dir, &files_id, req.size)).await {
            Ok(f) => f,
            Err(StoreError::NotFound(m)) => {
                // A concurrent commit may have finished in between.
                return match self.committed(&id, req.size).await? {
                    Some(done) => Ok(done),
                    None => Err(StoreError::NotFound(m)),
                };
            }
            Err(e) => return Err(e),
        };
        let now = util::now_ms();
        let row = Artifact {
            artifact_id: id.clone(),
            execution_id: finished.meta.execution_id,
            name: finished.meta.name,
            media_type: finished.meta.media_type,
            size: finished.size,
            digest: finished.digest,
            created_at: util::rfc3339(now),
            created_ms: now,
        };
        let row = self.write(move |conn| insert_artifact(conn, &row)).await?;
        self.forget_meta(&id).await;
        Ok(ArtifactCommitResponse {
            artifact_id: row.artifact_id,
            size: row.size,
            digest: row.digest,
        })
    }

    /// The answer to a commit of an artifact that already has its row.
    async fn committed(
        &self,
        id: &str,
        expected: Option<u64>,
    ) -> Result<Option<ArtifactCommitResponse>, StoreError> {
        let rid = id.to_string();
        let Some(row) = self.read(move |conn| get_artifact(conn, &rid)).await? else {
            return Ok(None);
        };
        check_size(id, expected, row.size)?;
        self.forget_meta(id).await;
        Ok(Some(ArtifactCommitResponse {
            artifact_id: row.artifact_id,
            size: row.size,
            digest: row.digest,
        }))
    }

    /// Remove a committed artifact's `.meta` (best effort: retention removes what
    /// is left).
    async fn forget_meta(&self, id: &str) {
        let path = tmp_dir(self.dir()).join(format!("{id}{META_SUFFIX}"));
        let _ = blocking(move || match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an artifact's meta");
                Ok(())
            }
            _ => Ok(()),
        })
        .await;
    }

    /// `store.artifact_abort`.
    pub async fn artifact_abort(
        &self,
        req: ArtifactAbortRequest,
    ) -> Result<ArtifactAbortResponse, StoreError> {
        check_id(&req.artifact_id)?;
        let dir = self.dir().to_path_buf();
        blocking(move || abort_files(&dir, &req.artifact_id)).await?;
        Ok(ArtifactAbortResponse {})
    }

    /// `store.artifact_read`.
    pub async fn artifact_read(
        &self,
        req: ArtifactReadRequest,
    ) -> Result<ArtifactReadResponse, StoreError> {
        check_id(&req.artifact_id)?;
        let max = self.limits().max_chunk_bytes as u64;
        if req.length > max {
            return Err(StoreError::invalid(format!(
                "length {} is over max_chunk_bytes ({max})",
                req.length
            )));
        }
        let id = req.artifact_id.clone();
        let row = self
            .read(move |conn| get_artifact(conn, &id))
            .await?
            .ok_or_else(|| StoreError::not_found(format!("no artifact {}", req.artifact_id)))?;
        if req.offset > row.size {
            return Err(StoreError::invalid(format!(
                "offset {} is past the end of artifact {} ({} bytes)",
                req.offset, row.artifact_id, row.size
            )));
        }
        let path = artifacts_dir(self.dir()).join(&row.artifact_id);
        let length = req.length.min(row.size - req.offset);
        let offset = req.offset;
        let data = blocking(move || read_range(&path, offset, length)).await?;
        let eof = offset + data.len() as u64 >= row.size;
        Ok(ArtifactReadResponse {
            data,
            size: row.size,
            eof,
        })
    }

    /// `store.artifact_get`.
    pub async fn artifact_get(&self, req: ArtifactGetRequest) -> Result<Artifact, StoreError> {
        check_id(&req.artifact_id)?;
        let id = req.artifact_id.clone();
        self.read(move |conn| get_artifact(conn, &id))
            .await?
            .ok_or_else(|| StoreError::not_found(format!("no artifact {}", req.artifact_id)))
    }

    /// `store.artifacts`.
    pub async fn artifacts(&self, req: ArtifactsRequest) -> Result<ArtifactsResponse, StoreError> {
        let max_page = self.limits().max_page;
        self.read(move |conn| list_artifacts(conn, &req, max_page))
            .await
    }
}

// ---------------------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------------------

crate::store_methods! {
    ArtifactCreateRequest => artifact_create,
    ArtifactWriteRequest => artifact_write,
    ArtifactCommitRequest => artifact_commit,
    ArtifactAbortRequest => artifact_abort,
    ArtifactReadRequest => artifact_read,
    ArtifactGetRequest => artifact_get,
    ArtifactsRequest => artifacts,
}
