//! Socket activation (`sd_listen_fds`) and binding a socket by hand.
//!
//! Under systemd (a `.socket` unit) or `open-conduit up`, the listening sockets are created
//! by the supervisor and passed as file descriptors 3, 4, ... with `LISTEN_FDS` (their
//! count), `LISTEN_PID` (the pid they are meant for) and `LISTEN_FDNAMES` (their names,
//! colon-separated, from `FileDescriptorName=`). [`Activation::from_env`] takes them; the
//! daemon then asks for each socket by name and binds it itself with [`bind_unix`] when it
//! was not passed (a daemon started by hand).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::path::Path::new("/run/open-conduit/bus.sock");
//! let mut activation = daemon::Activation::from_env()?; // before any thread starts
//! let listener = match activation.take_unix_listener("bus")? {
//!     Some(listener) => listener,
//!     None => daemon::bind_unix(path, 0o660)?,
//! };
//! # Ok(()) }
//! ```

use std::ffi::OsString;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::socket::{
    getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike, SockaddrStorage,
};

use crate::Error;

const LISTEN_PID: &str = "LISTEN_PID";
const LISTEN_FDS: &str = "LISTEN_FDS";
const LISTEN_FDNAMES: &str = "LISTEN_FDNAMES";

/// The first passed file descriptor (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;

/// The name systemd gives a file descriptor that has none.
const UNKNOWN: &str = "unknown";

/// The sockets passed to this process by socket activation, not yet taken.
#[derive(Debug, Default)]
pub struct Activation {
    fds: Vec<(String, OwnedFd)>,
}

impl Activation {
    /// Takes the file descriptors passed by socket activation, if `LISTEN_PID` is our pid
    /// (otherwise they were meant for another process, and nothing is taken). Each is made
    /// close-on-exec, so children such as extensions do not inherit it, and non-blocking, as
    /// tokio requires. `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` are then removed from
    /// the environment, whether or not they were for us.
    ///
    /// Call it once, early in `main`, before any thread is started (the tokio runtime
    /// included): removing environment variables is not thread-safe, and the passed
    /// descriptors must not be touched by anyone else first.
    ///
    /// Missing names are `unknown`, as with systemd. Errors: values that are not numbers, or
    /// a descriptor that is not open or whose flags cannot be set; the descriptors taken so
    /// far are closed then.
    pub fn from_env() -> Result<Activation, Error> {
        let pid = std::env::var_os(LISTEN_PID);
        let count = std::env::var_os(LISTEN_FDS);
        let names = std::env::var_os(LISTEN_FDNAMES);
        for var in [LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES] {
            std::env::remove_var(var);
        }

        let (Some(pid), Some(count)) = (pid, count) else {
            return Ok(Activation::default());
        };
        let pid: u32 = parse_env(LISTEN_PID, &pid)?;
        if pid != std::process::id() {
            tracing::debug!("LISTEN_PID={pid} is not our pid: no socket activation");
            return Ok(Activation::default());
        }
        let count: u32 = parse_env(LISTEN_FDS, &count)?;
        let names = names.map(|n| n.to_string_lossy().into_owned());
        let names: Vec<&str> = names
            .as_deref()
            .map(|n| n.split(':').collect())
            .unwrap_or_default();

        let mut fds = Vec::new();
        for i in 0..count {
            let fd = RawFd::try_from(i)
                .ok()
                .and_then(|i| i.checked_add(FIRST_FD))
                .ok_or_else(|| Error::InvalidEnv {
                    var: LISTEN_FDS,
                    value: count.to_string(),
                    reason: "too many file descriptors".to_owned(),
                })?;
            let name = match names.get(i as usize) {
                Some(n) if !n.is_empty() => (*n).to_owned(),
                _ => UNKNOWN.to_owned(),
            };
            let owned = take_fd(fd, &name)?;
            fds.push((name, owned));
        }
        if names.len() > fds.len() {
            tracing::debug!(
                "LISTEN_FDNAMES has {} names for {} file descriptors: ignoring the rest",
                names.len(),
                fds.len()
            );
        }
        if !fds.is_empty() {
            let list: Vec<String> = fds
                .iter()
                .map(|(n, fd)| format!("{n}={}", fd.as_raw_fd()))
                .collect();
            tracing::debug!("socket activation: {}", list.join(" "));
        }
        Ok(Activation { fds })
    }

    /// An activation holding these descriptors, as [`from_env`](Self::from_env) would have
    /// found them (the caller sets their flags).
    pub fn from_fds(fds: Vec<(String, OwnedFd)>) -> Activation {
        Activation { fds }
    }

    /// The names of the descriptors not yet taken, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fds.iter().map(|(n, _)| n.as_str())
    }

    /// How many descriptors are not yet taken.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether no descriptor is left.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Takes the first descriptor named `name`, whatever it is. When exactly one descriptor
    /// is left and it is named `unknown` (no `FileDescriptorName=`), it is taken for any
    /// name.
    pub fn take_fd(&mut self, name: &str) -> Option<(String, OwnedFd)> {
        let index = match self.fds.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None if self.fds.len() == 1 && self.fds[0].0 == UNKNOWN => 0,
            None => return None,
        };
        Some(self.fds.remove(index))
    }

    /// Takes the descriptor named `name` (see [`take_fd`](Self::take_fd)) as a unix stream
    /// listener. `Ok(None)` when there is none; an error naming the descriptor when it is not
    /// a listening unix stream socket (it is closed then).
    pub fn take_unix_listener(&mut self, name: &str) -> Result<Option<UnixListener>, Error> {
        let Some((name, fd)) = self.take_fd(name) else {
            return Ok(None);
        };
        check_listener(&fd, &name, Want::Unix)?;
        Ok(Some(UnixListener::from(fd)))
    }

    /// Takes the descriptor named `name` (see [`take_fd`](Self::take_fd)) as a TCP listener
    /// (IPv4 or IPv6). `Ok(None)` when there is none; an error naming the descriptor when it
    /// is not a listening TCP socket (it is closed then).
    pub fn take_tcp_listener(&mut self, name: &str) -> Result<Option<TcpListener>, Error> {
        let Some((name, fd)) = self.take_fd(name) else {
            return Ok(None);
        };
        check_listener(&fd, &name, Want::Tcp)?;
        Ok(Some(TcpListener::from(fd)))
    }

    /// The TCP listener systemd passed as `name` (non-blocking, for tokio), or one
    /// bound on `fallback` when none was passed: what a socket-activated HTTP daemon
    /// serves on. The error says which socket could not be used.
    pub async fn tcp_listener_or_bind(
        &mut self,
        name: &str,
        fallback: std::net::SocketAddr,
    ) -> Result<tokio::net::TcpListener, String> {
        if let Some(l) = self.take_tcp_listener(name).map_err(|e| e.to_string())? {
            let l = tokio::net::TcpListener::from_std(l)
                .map_err(|e| format!("the passed socket {name:?}: {e}"))?;
            tracing::info!("serving on the socket systemd passed");
            return Ok(l);
        }
        let l = tokio::net::TcpListener::bind(fallback)
            .await
            .map_err(|e| format!("bind {fallback}: {e}"))?;
        tracing::info!(listen = %fallback, "serving on a socket of its own");
        Ok(l)
    }
}

fn parse_env<T: std::str::FromStr>(var: &'static str, value: &OsString) -> Result<T, Error> {
    value
        .to_str()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::InvalidEnv {
            var,
            value: value.to_string_lossy().into_owned(),
            reason: "not a number".to_owned(),
        })
}

/// Takes ownership of a passed descriptor and makes it close-on-exec and non-blocking.
fn take_fd(fd: RawFd, name: &str) -> Result<OwnedFd, Error> {
    let err = |op: &'static str| {
        let name = name.to_owned();
        move |source| Error::Fd {
            fd,
            name,
            op,
            source,
        }
    };
    // SAFETY: the borrow lasts for this one call; on a descriptor that is not open, fcntl
    // fails with EBADF and touches nothing.
    let flags = fcntl(unsafe { BorrowedFd::borrow_raw(fd) }, FcntlArg::F_GETFD);
    flags.map_err(|e| match e {
        Errno::EBADF => Error::Fd {
            fd,
            name: name.to_owned(),
            op: "not open, although LISTEN_FDS counts it",
            source: e,
        },
        e => err("F_GETFD")(e),
    })?;
    // SAFETY: the descriptor is open, and the socket activation protocol (LISTEN_PID is our
    // pid) hands it to this process; `from_env` runs once, before other threads exist, so
    // nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(err("setting FD_CLOEXEC"))?;
    let fl = fcntl(&owned, FcntlArg::F_GETFL).map_err(err("F_GETFL"))?;
    let fl = OFlag::from_bits_retain(fl) | OFlag::O_NONBLOCK;
    fcntl(&owned, FcntlArg::F_SETFL(fl)).map_err(err("setting O_NONBLOCK"))?;
    Ok(owned)
}

#[derive(Clone, Copy)]
enum Want {
    Unix,
    Tcp,
}

impl Want {
    fn describe(self) -> &'static str {
        match self {
            Want::Unix => "a listening unix stream socket",
            Want::Tcp => "a listening TCP socket",
        }
    }

    fn accepts(self, family: AddressFamily) -> bool {
        match self {
            Want::Unix => family == AddressFamily::Unix,
            Want::Tcp => matches!(family, AddressFamily::Inet | AddressFamily::Inet6),
        }
    }
}

/// Checks that `fd` is a listening stream socket of the wanted family.
fn check_listener(fd: &OwnedFd, name: &str, want: Want) -> Result<(), Error> {
    let raw = fd.as_raw_fd();
    let wrong = |found: String| Error::WrongSocket {
        fd: raw,
        name: name.to_owned(),
        expected: want.describe(),
        found,
    };
    let failed = |op: &'static str| {
        move |source| Error::Fd {
            fd: raw,
            name: name.to_owned(),
            op,
            source,
        }
    };

    let ty = match getsockopt(fd, sockopt::SockType) {
        Ok(ty) => ty,
        Err(Errno::ENOTSOCK) => return Err(wrong(describe_non_socket(fd))),
        Err(e) => return Err(failed("getsockopt(SO_TYPE)")(e)),
    };
    let family = getsockname::<SockaddrStorage>(raw)
        .map_err(failed("getsockname"))?
        .family();
    let family_name = match family {
        Some(AddressFamily::Unix) => "unix".to_owned(),
        Some(AddressFamily::Inet) => "IPv4".to_owned(),
        Some(AddressFamily::Inet6) => "IPv6".to_owned(),
        Some(other) => format!("{other:?}"),
        None => "unknown-family".to_owned(),
    };
    let type_name = match ty {
        SockType::Stream => "stream",
        SockType::Datagram => "datagram",
        SockType::SeqPacket => "seqpacket",
        SockType::Raw => "raw",
        _ => "other",
    };
    if ty != SockType::Stream || !family.is_some_and(|f| want.accepts(f)) {
        return Err(wrong(format!("a {type_name} socket ({family_name})")));
    }
    let listening =
        getsockopt(fd, sockopt::AcceptConn).map_err(failed("getsockopt(SO_ACCEPTCONN)"))?;
    if !listening {
        return Err(wrong(format!(
            "a {type_name} socket ({family_name}) that is not listening"
        )));
    }
    Ok(())
}

fn describe_non_socket(fd: &OwnedFd) -> String {
    match nix::sys::stat::fstat(fd) {
        Ok(st) => {
            let kind = nix::sys::stat::SFlag::from_bits_truncate(st.st_mode)
                & nix::sys::stat::SFlag::S_IFMT;
            let what = if kind == nix::sys::stat::SFlag::S_IFREG {
                "a regular file"
            } else if kind == nix::sys::stat::SFlag::S_IFDIR {
                "a directory"
            } else if kind == nix::sys::stat::SFlag::S_IFIFO {
                "a pipe"
            } else if kind == nix::sys::stat::SFlag::S_IFCHR {
                "a character device"
            } else {
                "not a socket"
            };
            what.to_owned()
        }
        Err(_) => "not a socket".to_owned(),
    }
}

/// Binds a unix stream listener at `path` for a daemon started by hand (without socket
/// activation).
///
/// Creates the parent directory if it is missing; removes a stale socket file left by a
/// process that died (only when it is a socket and a connection to it is refused: a live
/// one is the error "another process is listening on PATH"; any other kind of file there is
/// an error too); binds; sets the permissions to `mode` (such as `0o660`), and makes the
/// listener non-blocking (for tokio) and close-on-exec.
///
/// Between the bind and the chmod the socket has the permissions the umask gives; the parent
/// directory's permissions are what protect it (systemd's `RuntimeDirectory=` or tmpfiles).
pub fn bind_unix(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let with_path = |e: io::Error, what: &str| {
        io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| with_path(e, "cannot create the directory of"))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another process is listening on {}", path.display()),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::debug!("removing the stale socket {}", path.display());
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(with_path(e, "cannot remove the stale socket")),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(with_path(e, "cannot check the existing socket")),
        },
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(with_path(e, "cannot inspect")),
    }
    // std creates the socket close-on-exec.
    let listener = UnixListener::bind(path).map_err(|e| with_path(e, "cannot bind"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| with_path(e, "cannot set the permissions of"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    fn act(items: Vec<(&str, OwnedFd)>) -> Activation {
        Activation::from_fds(items.into_iter().map(|(n, f)| (n.to_owned(), f)).collect())
    }

    fn tcp() -> OwnedFd {
        TcpListener::bind("127.0.0.1:0").unwrap().into()
    }

    #[test]
    fn take_by_name() {
        let mut a = act(vec![("http", tcp()), ("metrics", tcp())]);
        assert_eq!(a.names().collect::<Vec<_>>(), ["http", "metrics"]);
        assert!(a.take_tcp_listener("bus").unwrap().is_none());
        assert!(a.take_tcp_listener("metrics").unwrap().is_some());
        assert!(a.take_tcp_listener("metrics").unwrap().is_none());
        assert_eq!(a.len(), 1);
        assert!(a.take_tcp_listener("http").unwrap().is_some());
        assert!(a.is_empty());
    }

    #[test]
    fn single_unknown_is_taken_for_any_name() {
        let mut a = act(vec![("unknown", tcp())]);
        assert!(a.take_tcp_listener("http").unwrap().is_some());

        let mut a = act(vec![("unknown", tcp()), ("unknown", tcp())]);
        assert!(a.take_tcp_listener("http").unwrap().is_none());
        assert!(a.take_tcp_listener("unknown").unwrap().is_some());
    }

    #[test]
    fn wrong_kinds_are_named() {
        let mut a = act(vec![("bus", tcp())]);
        let err = a.take_unix_listener("bus").unwrap_err();
        let fd_text = "is not a listening unix stream socket: it is a stream socket (IPv4)";
        assert!(err.to_string().contains(fd_text), "{err}");
        assert!(err.to_string().contains("\"bus\""), "{err}");

        let udp: OwnedFd = UdpSocket::bind("127.0.0.1:0").unwrap().into();
        let mut a = act(vec![("http", udp)]);
        let err = a.take_tcp_listener("http").unwrap_err();
        assert!(
            err.to_string().contains("it is a datagram socket (IPv4)"),
            "{err}"
        );

        let (s, _peer) = UnixStream::pair().unwrap();
        let mut a = act(vec![("bus", s.into())]);
        let err = a.take_unix_listener("bus").unwrap_err();
        assert!(err.to_string().contains("not listening"), "{err}");

        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut a = act(vec![("bus", file.into())]);
        let err = a.take_unix_listener("bus").unwrap_err();
        assert!(err.to_string().contains("it is a regular file"), "{err}");
    }

    #[test]
    fn wrong_family() {
        let dir = std::env::temp_dir().join(format!("oc-daemon-unit-{}", std::process::id()));
        let path = dir.join("fam.sock");
        let l = bind_unix(&path, 0o600).unwrap();
        let mut a = act(vec![("http", l.as_fd().try_clone_to_owned().unwrap())]);
        let err = a.take_tcp_listener("http").unwrap_err();
        assert!(
            err.to_string().contains("it is a stream socket (unix)"),
            "{err}"
        );
        let mut a = act(vec![("bus", l.into())]);
        assert!(a.take_unix_listener("bus").unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Passing sockets as systemd does, from a supervisor that is not systemd
/// (`open-conduit up`, the test harness).
///
/// `LISTEN_PID` must be the child's own pid, which only the child knows after the fork;
/// so the supervisor sets [`PASS_FDS`] (and [`PASS_FDNAMES`]) and puts the socket at
/// fd 3 with [`to_fd3`], and the child calls [`take_passed`] first thing in `main`,
/// which turns them into `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES`.
pub mod pass {
    use std::io;
    use std::os::fd::RawFd;

    /// How many sockets were passed (at fd 3 on).
    pub const PASS_FDS: &str = "OC_PASS_LISTEN_FDS";
    /// Their names, colon-separated.
    pub const PASS_FDNAMES: &str = "OC_PASS_LISTEN_FDNAMES";

    /// In the child, before any thread starts: the passed sockets become systemd's
    /// variables, with `LISTEN_PID` this process's pid.
    pub fn take_passed() {
        if let Ok(n) = std::env::var(PASS_FDS) {
            std::env::set_var("LISTEN_FDS", n);
            std::env::set_var("LISTEN_PID", std::process::id().to_string());
            if let Ok(names) = std::env::var(PASS_FDNAMES) {
                std::env::set_var("LISTEN_FDNAMES", names);
            }
            std::env::remove_var(PASS_FDS);
            std::env::remove_var(PASS_FDNAMES);
        }
    }

    /// A `pre_exec` hook that puts `fd` at fd 3 of the child, inheritable. Only
    /// `dup2` and `fcntl` run in it (both async-signal-safe); nothing allocates.
    pub fn to_fd3(fd: RawFd) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
        move || {
            // SAFETY: plain syscalls on file descriptors, valid after fork.
            unsafe {
                if fd == 3 {
                    let flags = nix::libc::fcntl(3, nix::libc::F_GETFD);
                    if flags < 0
                        || nix::libc::fcntl(3, nix::libc::F_SETFD, flags & !nix::libc::FD_CLOEXEC)
                            < 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                } else if nix::libc::dup2(fd, 3) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        }
    }
}
