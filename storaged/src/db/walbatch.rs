//! The writer's SQLite VFS: the default one (`unix`) with the WAL's writes gathered,
//! so that a commit's frames reach the file in one `pwrite` instead of two a frame.
//!
//! SQLite writes each WAL frame as two calls, its 24-byte header and its page; a
//! group commit of a few dozen events writes a few dozen frames, and under `bench
//! intake` those calls were two thirds of the suite's system calls per delivery
//! (docs/benchmarks.md). This VFS keeps the writes to a WAL file that continue the
//! previous one in a buffer of the open file (at most [`MAX_GATHERED`] bytes), and
//! writes the buffer with one call (one a 124 KiB: the default VFS writes no more in
//! a call) before anything that could observe the file:
//!
//! - `xSync`: with `synchronous=FULL` SQLite syncs the WAL at every commit, before it
//!   publishes the new frames in the wal-index, so no other connection (reader,
//!   checkpointer) ever learns of a frame still in the buffer; and a commit is
//!   answered only after the sync, so nothing answered is lost with the process;
//! - `xRead` (the writer reading a frame it spilled, a checkpoint), `xTruncate`,
//!   `xFileSize`, `xFileControl`, `xClose`;
//! - a write that does not continue the buffer (a frame rewritten in place, the
//!   header of a restarted WAL): the buffer first, then that write, in the order
//!   SQLite issued them.
//!
//! A write the buffer took is answered `SQLITE_OK` at once; if writing the buffer
//! fails later (a full disk), the call that wrote it (the commit's `xSync`) fails,
//! so the transaction fails as it would have at the write. Every other file, and
//! every other method, goes to the default VFS unchanged.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub const NAME: &str = "oc-walbatch";
const NAME_C: &CStr = c"oc-walbatch";

/// The most bytes a WAL file's buffer holds before it is written.
pub const MAX_GATHERED: usize = 8 << 20;

/// The most bytes written in one call: the default VFS writes at most 128 KiB - 1
/// a call (it masks the length with `0x1ffff`, and takes a longer write for a
/// full disk when the kernel then writes nothing), so a larger buffer goes in
/// chunks of 124 KiB.
const MAX_WRITE: usize = 124 * 1024;

/// What a WAL file has gathered: `bytes` to be written at `start`.
struct Gathered {
    start: i64,
    bytes: Vec<u8>,
}

/// The file SQLite allocates (`szOsFile` bytes): ours, then the default VFS's.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// Null for a file that is not a WAL.
    gathered: *mut Gathered,
}

/// Where the default VFS's file starts within ours (8-byte aligned).
const REAL_AT: usize = std::mem::size_of::<File>().next_multiple_of(8);

/// Registers the VFS (once per process); answers its name.
pub fn register() -> Result<&'static str, String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            // SAFETY: sqlite3_vfs_find and sqlite3_vfs_register are thread-safe; the
            // VFS object is leaked on purpose (SQLite keeps the pointer for the
            // process's life) and every pointer it holds is 'static.
            unsafe {
                let real = ffi::sqlite3_vfs_find(ptr::null());
                if real.is_null() {
                    return Err("SQLite has no default VFS".to_string());
                }
                let size = c_int::try_from(REAL_AT)
                    .ok()
                    .and_then(|ours| ours.checked_add((*real).szOsFile))
                    .ok_or("the default VFS's file is too large")?;
                let vfs = Box::new(ffi::sqlite3_vfs {
                    // Version 2: the system-call overrides of version 3 are for
                    // SQLite's own tests, and are not forwarded.
                    iVersion: (*real).iVersion.min(2),
                    szOsFile: size,
                    mxPathname: (*real).mxPathname,
                    pNext: ptr::null_mut(),
                    zName: NAME_C.as_ptr(),
                    pAppData: real.cast(),
                    xOpen: Some(x_open),
                    xDelete: Some(x_delete),
                    xAccess: Some(x_access),
                    xFullPathname: Some(x_full_pathname),
                    xDlOpen: Some(x_dl_open),
                    xDlError: Some(x_dl_error),
                    xDlSym: Some(x_dl_sym),
                    xDlClose: Some(x_dl_close),
                    xRandomness: Some(x_randomness),
                    xSleep: Some(x_sleep),
                    xCurrentTime: Some(x_current_time),
                    xGetLastError: Some(x_get_last_error),
                    xCurrentTimeInt64: (*real).xCurrentTimeInt64.and(Some(x_current_time_int64)),
                    xSetSystemCall: None,
                    xGetSystemCall: None,
                    xNextSystemCall: None,
                });
                let rc = ffi::sqlite3_vfs_register(Box::into_raw(vfs), 0);
                if rc != ffi::SQLITE_OK {
                    return Err(format!("sqlite3_vfs_register: {rc}"));
                }
                Ok(())
            }
        })
        .clone()
        .map(|()| NAME)
}

// ---- the VFS: open wraps, the rest forwards ----

unsafe fn real_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: pAppData is the default VFS, set at registration.
    unsafe { (*vfs).pAppData.cast() }
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite gives `file` szOsFile bytes, 8-byte aligned: ours, then room
    // for the default VFS's file at REAL_AT.
    unsafe {
        let real = real_vfs(vfs);
        let ours = file.cast::<File>();
        let inner = file.cast::<u8>().add(REAL_AT).cast::<ffi::sqlite3_file>();
        ptr::write(
            ours,
            File {
                base: ffi::sqlite3_file {
                    pMethods: ptr::null(),
                },
                real: inner,
                gathered: ptr::null_mut(),
            },
        );
        (*inner).pMethods = ptr::null();
        let Some(open) = (*real).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = open(real, name, inner, flags, out_flags);
        if (*inner).pMethods.is_null() {
            return if rc == ffi::SQLITE_OK {
                ffi::SQLITE_CANTOPEN
            } else {
                rc
            };
        }
        // SQLite closes a file whose pMethods is set, even after a failed open.
        (*ours).base.pMethods = &METHODS;
        if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_WAL != 0 {
            (*ours).gathered = Box::into_raw(Box::new(Gathered {
                start: 0,
                bytes: Vec::new(),
            }));
        }
        rc
    }
}

macro_rules! forward_vfs {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*), $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(vfs: *mut ffi::sqlite3_vfs, $($arg: $ty),*) -> $ret {
            // SAFETY: the default VFS's own method, with its own object.
            unsafe {
                let real = real_vfs(vfs);
                match (*real).$field {
                    Some(f) => f(real, $($arg),*),
                    None => $missing,
                }
            }
        }
    };
}

forward_vfs!(x_delete, xDelete, (name: *const c_char, sync_dir: c_int), c_int, ffi::SQLITE_IOERR_DELETE);
forward_vfs!(x_access, xAccess, (name: *const c_char, flags: c_int, out: *mut c_int), c_int, ffi::SQLITE_IOERR_ACCESS);
forward_vfs!(x_full_pathname, xFullPathname, (name: *const c_char, n: c_int, out: *mut c_char), c_int, ffi::SQLITE_CANTOPEN);
forward_vfs!(x_dl_open, xDlOpen, (name: *const c_char), *mut c_void, ptr::null_mut());
forward_vfs!(x_dl_error, xDlError, (n: c_int, out: *mut c_char), (), ());
forward_vfs!(x_dl_close, xDlClose, (handle: *mut c_void), (), ());
forward_vfs!(x_randomness, xRandomness, (n: c_int, out: *mut c_char), c_int, 0);
forward_vfs!(x_sleep, xSleep, (micros: c_int), c_int, 0);
forward_vfs!(x_current_time, xCurrentTime, (out: *mut f64), c_int, ffi::SQLITE_ERROR);
forward_vfs!(x_get_last_error, xGetLastError, (n: c_int, out: *mut c_char), c_int, 0);
forward_vfs!(x_current_time_int64, xCurrentTimeInt64, (out: *mut ffi::sqlite3_int64), c_int, ffi::SQLITE_ERROR);

unsafe extern "C" fn x_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    handle: *mut c_void,
    symbol: *const c_char,
) -> Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)> {
    // SAFETY: the default VFS's own method, with its own object.
    unsafe {
        let real = real_vfs(vfs);
        match (*real).xDlSym {
            Some(f) => f(real, handle, symbol),
            None => None,
        }
    }
}

// ---- the files ----

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(f_close),
    xRead: Some(f_read),
    xWrite: Some(f_write),
    xTruncate: Some(f_truncate),
    xSync: Some(f_sync),
    xFileSize: Some(f_file_size),
    xLock: Some(f_lock),
    xUnlock: Some(f_unlock),
    xCheckReservedLock: Some(f_check_reserved_lock),
    xFileControl: Some(f_file_control),
    xSectorSize: Some(f_sector_size),
    xDeviceCharacteristics: Some(f_device_characteristics),
    xShmMap: Some(f_shm_map),
    xShmLock: Some(f_shm_lock),
    xShmBarrier: Some(f_shm_barrier),
    xShmUnmap: Some(f_shm_unmap),
    xFetch: Some(f_fetch),
    xUnfetch: Some(f_unfetch),
};

/// The default VFS's file and its methods.
unsafe fn inner(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: `file` is one of ours (its pMethods is METHODS), opened: its real
    // file's pMethods is set and lives as long as the default VFS.
    unsafe {
        let real = (*file.cast::<File>()).real;
        (real, &*(*real).pMethods)
    }
}

/// Writes what the file gathered, in one call; `SQLITE_OK` when there was nothing.
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is one of ours; `gathered` is null or the Box made at open.
    unsafe {
        let gathered = (*file.cast::<File>()).gathered;
        if gathered.is_null() || (*gathered).bytes.is_empty() {
            return ffi::SQLITE_OK;
        }
        let g = &mut *gathered;
        let (real, m) = inner(file);
        let Some(write) = m.xWrite else {
            g.bytes.clear();
            return ffi::SQLITE_IOERR_WRITE;
        };
        let mut rc = ffi::SQLITE_OK;
        let mut at = g.start;
        for chunk in g.bytes.chunks(MAX_WRITE) {
            // A chunk's length fits: MAX_WRITE is far below c_int::MAX.
            let len = c_int::try_from(chunk.len()).unwrap_or(c_int::MAX);
            rc = write(real, chunk.as_ptr().cast(), len, at);
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += i64::from(len);
        }
        // Written or not, it is not kept: a failure fails the call that flushed
        // (the commit's sync), which SQLite then rolls back.
        g.bytes.clear();
        rc
    }
}

unsafe extern "C" fn f_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: one of ours; closed once by SQLite.
    unsafe {
        let flushed = flush(file);
        let (real, m) = inner(file);
        let rc = m.xClose.map_or(ffi::SQLITE_OK, |close| close(real));
        let ours = file.cast::<File>();
        if !(*ours).gathered.is_null() {
            drop(Box::from_raw((*ours).gathered));
            (*ours).gathered = ptr::null_mut();
        }
        if flushed != ffi::SQLITE_OK {
            flushed
        } else {
            rc
        }
    }
}

unsafe extern "C" fn f_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: one of ours; `data` holds `amount` bytes (SQLite's contract).
    unsafe {
        let gathered = (*file.cast::<File>()).gathered;
        let n = usize::try_from(amount).unwrap_or(0);
        if !gathered.is_null() && n > 0 {
            let g = &mut *gathered;
            let end = g
                .start
                .saturating_add(i64::try_from(g.bytes.len()).unwrap_or(i64::MAX));
            let continues = g.bytes.is_empty() || offset == end;
            if continues && g.bytes.len() + n <= MAX_GATHERED {
                if g.bytes.is_empty() {
                    g.start = offset;
                }
                g.bytes
                    .extend_from_slice(std::slice::from_raw_parts(data.cast::<u8>(), n));
                return ffi::SQLITE_OK;
            }
            let rc = flush(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let (real, m) = inner(file);
        match m.xWrite {
            Some(write) => write(real, data, amount, offset),
            None => ffi::SQLITE_IOERR_WRITE,
        }
    }
}

/// A method that must see the file as written: the gathered bytes first.
macro_rules! flush_then {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: one of ours; the default VFS's method with its own file.
            unsafe {
                let rc = flush(file);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                let (real, m) = inner(file);
                match m.$field {
                    Some(f) => f(real, $($arg),*),
                    None => $missing,
                }
            }
        }
    };
}

flush_then!(f_read, xRead, (out: *mut c_void, amount: c_int, offset: ffi::sqlite3_int64), ffi::SQLITE_IOERR_READ);
flush_then!(f_truncate, xTruncate, (size: ffi::sqlite3_int64), ffi::SQLITE_IOERR_TRUNCATE);
flush_then!(f_sync, xSync, (flags: c_int), ffi::SQLITE_IOERR_FSYNC);
flush_then!(f_file_size, xFileSize, (size: *mut ffi::sqlite3_int64), ffi::SQLITE_IOERR_FSTAT);
flush_then!(f_file_control, xFileControl, (op: c_int, arg: *mut c_void), ffi::SQLITE_NOTFOUND);

/// A method that does not touch the file's bytes.
macro_rules! forward {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*), $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> $ret {
            // SAFETY: one of ours; the default VFS's method with its own file.
            unsafe {
                let (real, m) = inner(file);
                match m.$field {
                    Some(f) => f(real, $($arg),*),
                    None => $missing,
                }
            }
        }
    };
}

forward!(f_lock, xLock, (level: c_int), c_int, ffi::SQLITE_IOERR_LOCK);
forward!(f_unlock, xUnlock, (level: c_int), c_int, ffi::SQLITE_IOERR_UNLOCK);
forward!(f_check_reserved_lock, xCheckReservedLock, (out: *mut c_int), c_int, ffi::SQLITE_IOERR_CHECKRESERVEDLOCK);
forward!(f_sector_size, xSectorSize, (), c_int, 4096);
forward!(
    f_device_characteristics,
    xDeviceCharacteristics,
    (),
    c_int,
    0
);
forward!(f_shm_map, xShmMap, (page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), c_int, ffi::SQLITE_IOERR_SHMMAP);
forward!(f_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int), c_int, ffi::SQLITE_IOERR_SHMLOCK);
forward!(f_shm_barrier, xShmBarrier, (), (), ());
forward!(f_shm_unmap, xShmUnmap, (delete: c_int), c_int, ffi::SQLITE_OK);
// Without the default VFS's fetch, no mapping: SQLite then reads the page instead.
forward!(f_fetch, xFetch, (offset: ffi::sqlite3_int64, amount: c_int, out: *mut *mut c_void), c_int, {
    *out = ptr::null_mut();
    ffi::SQLITE_OK
});
forward!(f_unfetch, xUnfetch, (offset: ffi::sqlite3_int64, page: *mut c_void), c_int, ffi::SQLITE_OK);
