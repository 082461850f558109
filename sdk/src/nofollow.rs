//! Files in a folder a run may write (a detached run's directory, claude's config
//! directory), opened the only way the host may open them there: never through a
//! symlink, and only when they are regular files.
//!
//! The code that opens them runs outside the sandbox (the executor, the wrapper),
//! as a user that can write and read much more than the run: a path it followed
//! would make it a confused deputy, writing or reading for the run where the run
//! cannot. So a [`Dir`] is opened once (`O_DIRECTORY|O_NOFOLLOW`), and every file in
//! it is opened under its descriptor by one name (`openat` with `O_NOFOLLOW`):
//!
//! * a read opens with `O_NOFOLLOW|O_NONBLOCK` (a FIFO cannot block it) and checks
//!   with `fstat` that it has a regular file, bounded ([`Dir::read`] refuses a file
//!   over its limit, [`Dir::read_bounded`] keeps the first and last halves);
//! * a whole-file write ([`Dir::write_atomic`]) creates a fresh, randomly named
//!   temporary file with `O_CREAT|O_EXCL|O_NOFOLLOW` and renames it over the name
//!   within the same directory (`renameat`: a symlink at the name is replaced, never
//!   followed);
//! * a new file ([`Dir::create_new`]) is `O_CREAT|O_EXCL|O_NOFOLLOW`: anything
//!   already at the name is refused;
//! * an append ([`Dir::append`]) is `O_APPEND|O_CREAT|O_NOFOLLOW` onto a regular
//!   file only.
//!
//! A symlink or anything but a regular file where a file should be is refused with
//! an error that names it and what it is.

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The most bytes a record of a run's folder (`spec.json`, `meta.json`, `status`,
/// `result.json`, ...) may hold; a bigger one is refused, not read.
pub const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// How many fresh temporary names a write tries before it gives up.
const TMP_TRIES: usize = 8;

/// A directory opened once, whose files are opened under its descriptor.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a name of a directory is, not following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, a socket or a device.
    Other,
}

impl Kind {
    fn of(mode: u32) -> Kind {
        let kind = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
        if kind == SFlag::S_IFREG {
            Kind::File
        } else if kind == SFlag::S_IFDIR {
            Kind::Dir
        } else if kind == SFlag::S_IFLNK {
            Kind::Symlink
        } else {
            Kind::Other
        }
    }

    /// In words: `a regular file`, `a symbolic link`, ...
    pub fn words(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Other => "a FIFO, socket or device",
        }
    }
}

fn refused(path: &Path, kind: Kind) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is {}, not a regular file: refused (the host never follows or opens anything else in a run's folder)",
            path.display(),
            kind.words()
        ),
    )
}

/// The refusal of `path` where a directory was wanted: it is `kind`.
fn not_a_directory(path: &Path, kind: Kind) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is {}, not a directory: refused",
            path.display(),
            kind.words()
        ),
    )
}

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// `name` must be one path component: not empty, `.` or `..`, without `/` or NUL.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not one path component"),
        ));
    }
    Ok(())
}

/// 64 random bits from the kernel, in hex.
fn random_hex() -> io::Result<String> {
    protocol::random::hex(8)
}

/// Reads `f` (of `len` bytes), bounded: all of it up to `max` bytes; beyond that its
/// first and last `max / 2` bytes with a marker.
fn read_head_tail(mut f: File, len: u64, max: u64) -> io::Result<Vec<u8>> {
    if len <= max {
        let mut out = Vec::new();
        (&mut f).take(max).read_to_end(&mut out)?;
        return Ok(out);
    }
    let half = max / 2;
    let mut out = Vec::new();
    (&mut f).take(half).read_to_end(&mut out)?;
    out.extend_from_slice(
        format!(
            "\n[... {} bytes left out: the output passed {max} bytes ...]\n",
            len - 2 * half
        )
        .as_bytes(),
    );
    f.seek(SeekFrom::Start(len - half))?;
    f.take(half).read_to_end(&mut out)?;
    Ok(out)
}

impl Dir {
    fn opened(path: &Path, flags: OFlag) -> io::Result<Dir> {
        let flags = flags | OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir {
                fd,
                path: path.to_path_buf(),
            }),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                let kind = std::fs::symlink_metadata(path)
                    .map(|m| Kind::of(m.mode()))
                    .unwrap_or(Kind::Other);
                Err(not_a_directory(path, kind))
            }
            Err(e) => Err(errno(e)),
        }
    }

    /// Opens the directory `path`; a symlink at its last component is refused (the
    /// folders above it are the host's own).
    pub fn open(path: &Path) -> io::Result<Dir> {
        Dir::opened(path, OFlag::O_NOFOLLOW)
    }

    /// Opens the directory `path` as the operator configured it, following a
    /// symlink anywhere in it (claude's config directory may be one); what is
    /// opened under it follows none.
    pub fn open_configured(path: &Path) -> io::Result<Dir> {
        Dir::opened(path, OFlag::empty())
    }

    /// Its path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its descriptor's number (`/proc/self/fd/<n>` lists the directory opened).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    fn at(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What is at `name` (not following a symlink); `None` when nothing is.
    pub fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        check_name(name)?;
        match fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Kind::of(st.st_mode))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }

    /// Whether a regular file is at `name` (a symlink to one is not).
    pub fn is_file(&self, name: &str) -> bool {
        matches!(self.kind(name), Ok(Some(Kind::File)))
    }

    /// When the regular file at `name` last changed status (`ctime`, which nobody
    /// can set), as seconds and nanoseconds; `None` when no regular file is there.
    pub fn changed(&self, name: &str) -> Option<(i64, i64)> {
        check_name(name).ok()?;
        let st = fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        (Kind::of(st.st_mode) == Kind::File).then_some((st.st_ctime, st.st_ctime_nsec))
    }

    /// Opens the subdirectory `name`; a symlink there is refused.
    pub fn subdir(&self, name: &str) -> io::Result<Dir> {
        check_name(name)?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(self.fd.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir {
                fd,
                path: self.at(name),
            }),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                let kind = self.kind(name)?.unwrap_or(Kind::Other);
                Err(not_a_directory(&self.at(name), kind))
            }
            Err(e) => Err(errno(e)),
        }
    }

    /// Makes the subdirectory `name` (mode `mode`), or finds it there: a directory,
    /// never a symlink to one.
    pub fn make_subdir(&self, name: &str, mode: u32) -> io::Result<Dir> {
        check_name(name)?;
        match mkdirat(self.fd.as_fd(), name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => self.subdir(name),
            Err(e) => Err(errno(e)),
        }
    }

    /// Opens the regular file at `name` for reading; `None` when nothing is there.
    /// Anything else there (a symlink, a FIFO, a directory) is refused.
    pub fn open_file(&self, name: &str) -> io::Result<Option<File>> {
        check_name(name)?;
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        self.open_regular(name, flags, Mode::empty())
    }

    /// Opens `name` with `flags` (which hold `O_NOFOLLOW`) and `mode`: the file when
    /// it is a regular file, `None` when nothing is there (`ENOENT`); a symlink or
    /// anything else there is refused, naming what it is.
    fn open_regular(&self, name: &str, flags: OFlag, mode: Mode) -> io::Result<Option<File>> {
        let file = match openat(self.fd.as_fd(), name, flags, mode) {
            Ok(fd) => File::from(fd),
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => return Err(refused(&self.at(name), Kind::Symlink)),
            Err(e) => {
                return match self.kind(name) {
                    Ok(Some(kind)) if kind != Kind::File => Err(refused(&self.at(name), kind)),
                    _ => Err(errno(e)),
                }
            }
        };
        let kind = Kind::of(file.metadata()?.mode());
        if kind != Kind::File {
            return Err(refused(&self.at(name), kind));
        }
        Ok(Some(file))
    }

    /// Reads the regular file at `name` whole, when it holds at most `max` bytes
    /// (more is refused, naming the limit); `None` when nothing is there.
    pub fn read(&self, name: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
        let Some(f) = self.open_file(name)? else {
            return Ok(None);
        };
        let mut out = Vec::new();
        f.take(max.saturating_add(1)).read_to_end(&mut out)?;
        if out.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds more than {max} bytes, the limit of a record: refused",
                    self.at(name).display()
                ),
            ));
        }
        Ok(Some(out))
    }

    /// Reads the regular file at `name`, bounded: all of it up to `max` bytes;
    /// beyond that its first and last `max / 2` bytes with a marker. Nothing there
    /// reads as empty.
    pub fn read_bounded(&self, name: &str, max: u64) -> io::Result<Vec<u8>> {
        match self.open_file(name)? {
            None => Ok(Vec::new()),
            Some(f) => {
                let len = f.metadata()?.len();
                read_head_tail(f, len, max)
            }
        }
    }

    /// Reads `name` as JSON (at most [`MAX_RECORD_BYTES`]): `None` when nothing is
    /// there.
    pub fn read_json<T: DeserializeOwned>(&self, name: &str) -> io::Result<Option<T>> {
        match self.read(name, MAX_RECORD_BYTES)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: {e}"))),
        }
    }

    /// Creates the file `name` (mode `mode`) for writing: anything already there is
    /// refused.
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<File> {
        check_name(name)?;
        let flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_EXCL
            | OFlag::O_NOFOLLOW
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        match openat(self.fd.as_fd(), name, flags, Mode::from_bits_truncate(mode)) {
            Ok(fd) => Ok(File::from(fd)),
            Err(Errno::EEXIST) => {
                let kind = self.kind(name).ok().flatten().unwrap_or(Kind::Other);
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists already ({}): refused (the host creates its files in a run's folder afresh)",
                        self.at(name).display(),
                        kind.words()
                    ),
                ))
            }
            Err(e) => Err(errno(e)),
        }
    }

    /// Opens the regular file `name` to append to it, creating it (mode `mode`)
    /// when nothing is there; anything else there is refused.
    pub fn append(&self, name: &str, mode: u32) -> io::Result<File> {
        check_name(name)?;
        let flags = OFlag::O_WRONLY
            | OFlag::O_APPEND
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        // O_CREAT: nothing there only when the directory itself is gone.
        self.open_regular(name, flags, Mode::from_bits_truncate(mode))?
            .ok_or_else(|| errno(Errno::ENOENT))
    }

    /// Writes `bytes` to `name` whole (mode 0600): a fresh temporary file
    /// (`.<name>.tmp.<random>`, created exclusively), synced, renamed over `name`
    /// within this directory. A symlink at `name` is replaced, never followed; a
    /// directory there fails the write.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace(name, bytes, true)
    }

    /// [`Dir::write_atomic`] without the sync: every reader sees the whole file or
    /// none, but after a crash of the host the file may be the older one or absent.
    /// For what means nothing after a reboot (a run's spec, inputs and `meta.json`:
    /// every process they name is gone then), where the sync would cost a journal
    /// commit on the way to starting the run.
    pub fn write_for_boot(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace(name, bytes, false)
    }

    fn replace(&self, name: &str, bytes: &[u8], sync: bool) -> io::Result<()> {
        check_name(name)?;
        let mut last = None;
        for _ in 0..TMP_TRIES {
            let tmp = format!(".{name}.tmp.{}", random_hex()?);
            let mut f = match self.create_new(&tmp, 0o600) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let written = f
                .write_all(bytes)
                .and_then(|()| if sync { f.sync_all() } else { Ok(()) })
                .and_then(|()| {
                    renameat(self.fd.as_fd(), tmp.as_str(), self.fd.as_fd(), name).map_err(errno)
                });
            if written.is_err() {
                let _ = unlinkat(self.fd.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            }
            return written.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("writing {}: {e}", self.at(name).display()),
                )
            });
        }
        Err(last.unwrap_or_else(|| io::Error::other("no temporary name was free")))
    }

    /// Removes the file (or symlink) `name` in this directory; a missing one is no
    /// error.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }

    /// Writes `value` as JSON to `name` whole ([`Dir::write_atomic`]).
    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
        self.write_atomic(name, &bytes)
    }

    /// Writes `value` as JSON to `name` whole, unsynced ([`Dir::write_for_boot`]).
    pub fn write_json_for_boot<T: Serialize>(&self, name: &str, value: &T) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
        self.write_for_boot(name, &bytes)
    }

    /// Makes `name` a new file of `len` bytes whose blocks are allocated
    /// (`fallocate`; zeros written where the filesystem cannot), unsynced: room
    /// taken on the disk, to give back later. Anything already at `name` is removed
    /// first (a symlink is not followed).
    pub fn reserve(&self, name: &str, len: usize) -> io::Result<()> {
        self.remove(name)?;
        let f = self.create_new(name, 0o600)?;
        let size = i64::try_from(len).unwrap_or(i64::MAX);
        let taken = match nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::empty(), 0, size) {
            Ok(()) => Ok(()),
            Err(Errno::EOPNOTSUPP) => {
                let mut f = f;
                f.write_all(&vec![0u8; len])
            }
            Err(e) => Err(errno(e)),
        };
        taken.map_err(|e| {
            let _ = self.remove(name);
            io::Error::new(
                e.kind(),
                format!("reserving {}: {e}", self.at(name).display()),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("oc-nofollow-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("run")).unwrap();
            Scratch(dir)
        }
        fn run(&self) -> PathBuf {
            self.0.join("run")
        }
        /// A file outside the run's folder, holding `text`.
        fn outside(&self, name: &str, text: &str) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_write_replaces_a_symlink_and_never_writes_through_one() {
        let s = Scratch::new("write");
        let target = s.outside("victim.db", "precious");
        let run = s.run();
        // At the name itself, and at the temporary names of the earlier scheme.
        symlink(&target, run.join("status")).unwrap();
        symlink(
            &target,
            run.join(format!(".status.tmp.{}", std::process::id())),
        )
        .unwrap();
        let dir = Dir::open(&run).unwrap();
        dir.write_atomic("status", b"{\"exit_code\": 0}").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(dir.is_file("status"));
        assert_eq!(
            std::fs::read_to_string(run.join("status")).unwrap(),
            "{\"exit_code\": 0}"
        );
        // No temporary file is left behind.
        let left: Vec<String> = std::fs::read_dir(&run)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.starts_with(".status.tmp.") && !n.ends_with(&std::process::id().to_string())
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // A directory at the name fails the write, and nothing is written.
        std::fs::create_dir(run.join("kill")).unwrap();
        assert!(dir.write_atomic("kill", b"x").is_err());
    }

    #[test]
    fn reads_refuse_symlinks_and_what_is_not_a_regular_file() {
        let s = Scratch::new("read");
        let secret = s.outside("secret", "the secret\n");
        let run = s.run();
        symlink(&secret, run.join("stdout")).unwrap();
        nix::unistd::mkfifo(&run.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::create_dir(run.join("adir")).unwrap();
        std::fs::write(run.join("big"), vec![b'x'; 100]).unwrap();
        std::fs::write(run.join("out"), b"0123456789abcdefghij").unwrap();
        let dir = Dir::open(&run).unwrap();
        let e = dir.read_bounded("stdout", 1024).unwrap_err();
        assert!(
            e.to_string()
                .contains("is a symbolic link, not a regular file: refused"),
            "{e}"
        );
        // A FIFO does not block the read: it is refused.
        let e = dir.read("fifo", 1024).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(dir.read("adir", 1024).is_err());
        assert_eq!(dir.kind("stdout").unwrap(), Some(Kind::Symlink));
        assert!(!dir.is_file("stdout"));
        let e = dir.read("big", 10).unwrap_err();
        assert!(e.to_string().contains("more than 10 bytes"), "{e}");
        assert_eq!(dir.read("none", 10).unwrap(), None);
        assert!(dir.read_bounded("none", 8).unwrap().is_empty());
        assert_eq!(
            dir.read_bounded("out", 64).unwrap(),
            b"0123456789abcdefghij"
        );
        let cut = String::from_utf8(dir.read_bounded("out", 8).unwrap()).unwrap();
        assert!(cut.starts_with("0123\n[... 12 bytes left out"), "{cut}");
        assert!(cut.ends_with("...]\nghij"), "{cut}");
        // Appends and new files are refused through a symlink, and write nothing.
        assert!(dir.append("stdout", 0o600).is_err());
        let e = dir.create_new("stdout", 0o600).unwrap_err();
        assert!(
            e.to_string().contains("exists already (a symbolic link)"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the secret\n");
        // A symlinked directory is refused too, and names are one component.
        symlink(s.0.clone(), run.join("linked")).unwrap();
        assert!(dir.subdir("linked").is_err());
        assert!(Dir::open(&run.join("linked")).is_err());
        assert!(dir.read("../secret", 64).is_err());
    }

    #[test]
    fn appends_and_subdirectories() {
        let s = Scratch::new("append");
        let dir = Dir::open(&s.run()).unwrap();
        dir.append("log", 0o600).unwrap().write_all(b"a\n").unwrap();
        dir.append("log", 0o600).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(dir.read("log", 64).unwrap().unwrap(), b"a\nb\n");
        let tmp = dir.make_subdir("tmp", 0o700).unwrap();
        assert!(dir.make_subdir("tmp", 0o700).is_ok());
        assert_eq!(tmp.path(), s.run().join("tmp"));
        assert!(dir.changed("log").is_some());
        assert!(dir.changed("tmp").is_none());
    }
}
