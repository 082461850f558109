//! A bus connection's unix socket, split into halves that wake their task only for
//! what it waits for.
//!
//! tokio's `UnixStream` registers its socket for reading and writing at once. On a
//! unix stream socket, every message the other end reads frees send space, and the
//! kernel then wakes whoever polls the socket for writing (`unix_write_space`): a
//! daemon idle in `epoll_wait` is woken for each message the broker reads off its
//! socket, only to find nothing to do. Under `bench intake` a third of the broker's
//! wake-ups were that alone (strace: 1,000 of 3,120 `epoll_wait` returns carried no
//! `EPOLLIN`).
//!
//! Here the reading half is registered for reading only. The writing half writes
//! straight to the socket and registers (a duplicate of) it for writing only while
//! a write waits for space, which on the bus is rare: the socket's buffer holds
//! many messages.

use nix::errno::Errno;
use nix::sys::socket::{send, shutdown, MsgFlags, Shutdown};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Split a connected unix stream socket into its halves. The socket is closed
/// once both are dropped; dropping the writing half ends the sending direction.
pub fn split(stream: tokio::net::UnixStream) -> io::Result<(SockReader, SockWriter)> {
    let std = stream.into_std()?;
    std.set_nonblocking(true)?;
    let fd = OwnedFd::from(std);
    let write_fd = fd.try_clone()?;
    Ok((
        SockReader {
            fd: register(fd, Interest::READABLE)?,
        },
        SockWriter {
            fd: Some(Writable::Idle(write_fd)),
        },
    ))
}

/// `fd` registered with the runtime's reactor for `interest` only.
fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is an open descriptor that stays open, as the same
    // one, for as long as the `AsyncFd` owns it.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(io::Error::from)
}

/// The reading half: registered for reading only.
#[derive(Debug)]
pub struct SockReader {
    fd: AsyncFd<OwnedFd>,
}

impl AsyncRead for SockReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            // Into the spare room as it is: the line reader hands over a buffer's
            // spare capacity, which zeroing first would cost a pass over it per read.
            // SAFETY: `read(2)` only writes into the slice's bytes, and only the
            // `n` it reports written are marked initialized below.
            let unfilled = unsafe { buf.unfilled_mut() };
            match guard.try_io(|fd| {
                let n = unsafe {
                    nix::libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            }) {
                Ok(Ok(n)) => {
                    // SAFETY: `read(2)` wrote these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Not readable after all: readiness is cleared, wait again.
                Err(_would_block) => continue,
            }
        }
    }
}

/// The writing half's descriptor: unregistered while writes go through, and
/// registered for writing only while one waits for space.
#[derive(Debug)]
enum Writable {
    Idle(OwnedFd),
    Waiting(AsyncFd<OwnedFd>),
}

impl Writable {
    fn fd(&self) -> &OwnedFd {
        match self {
            Writable::Idle(fd) => fd,
            Writable::Waiting(fd) => fd.get_ref(),
        }
    }
}

/// The writing half.
#[derive(Debug)]
pub struct SockWriter {
    /// `None` only while moving between the two states, or after a failed
    /// registration.
    fd: Option<Writable>,
}

impl SockWriter {
    fn closed() -> io::Error {
        io::Error::new(
            io::ErrorKind::NotConnected,
            "the socket's writing half is gone",
        )
    }

    /// Back to unregistered once a write went through.
    fn settle(&mut self) {
        if let Some(Writable::Waiting(_)) = &self.fd {
            if let Some(Writable::Waiting(afd)) = self.fd.take() {
                self.fd = Some(Writable::Idle(afd.into_inner()));
            }
        }
    }
}

impl AsyncWrite for SockWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let Some(state) = self.fd.take() else {
                return Poll::Ready(Err(Self::closed()));
            };
            match state {
                Writable::Idle(fd) => {
                    // MSG_NOSIGNAL: a peer gone is an error here, not SIGPIPE.
                    match send(fd.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL) {
                        Ok(n) => {
                            self.fd = Some(Writable::Idle(fd));
                            return Poll::Ready(Ok(n));
                        }
                        Err(Errno::EINTR) => self.fd = Some(Writable::Idle(fd)),
                        Err(Errno::EAGAIN) => {
                            // Full: wait for space, registered for it from now.
                            self.fd = Some(Writable::Waiting(register(fd, Interest::WRITABLE)?));
                        }
                        Err(e) => {
                            self.fd = Some(Writable::Idle(fd));
                            return Poll::Ready(Err(e.into()));
                        }
                    }
                }
                Writable::Waiting(afd) => {
                    let outcome = match afd.poll_write_ready(cx) {
                        Poll::Pending => None,
                        Poll::Ready(Err(e)) => Some(Err(e)),
                        Poll::Ready(Ok(mut guard)) => match guard.try_io(|fd| {
                            send(fd.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL)
                                .map_err(io::Error::from)
                        }) {
                            Ok(result) => Some(result),
                            Err(_would_block) => Some(Err(io::ErrorKind::WouldBlock.into())),
                        },
                    };
                    self.fd = Some(Writable::Waiting(afd));
                    match outcome {
                        None => return Poll::Pending,
                        Some(Ok(n)) => {
                            self.settle();
                            return Poll::Ready(Ok(n));
                        }
                        Some(Err(e))
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                            ) =>
                        {
                            continue
                        }
                        Some(Err(e)) => return Poll::Ready(Err(e)),
                    }
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(state) = &self.fd else {
            return Poll::Ready(Err(Self::closed()));
        };
        Poll::Ready(match shutdown(state.fd().as_raw_fd(), Shutdown::Write) {
            Ok(()) | Err(Errno::ENOTCONN) => Ok(()),
            Err(e) => Err(e.into()),
        })
    }
}

impl Drop for SockWriter {
    /// As tokio's write half does: the peer reads the end of the stream even while
    /// the reading half is still open.
    fn drop(&mut self) {
        if let Some(state) = &self.fd {
            let _ = shutdown(state.fd().as_raw_fd(), Shutdown::Write);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// More than a socket buffer holds goes through whole while the other end
    /// reads slowly (the writer waits for space, registered for it, and goes back
    /// to unregistered), and dropping the writer ends the stream for the reader.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_larger_than_the_buffer_waits_for_space_and_arrives_whole() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (mut ar, mut aw) = split(a).unwrap();
        let (mut br, mut bw) = split(b).unwrap();
        let sent: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            aw.write_all(&sent).await.unwrap();
            assert!(matches!(aw.fd, Some(Writable::Idle(_))), "{:?}", aw.fd);
            drop(aw);
        });
        let mut got = Vec::new();
        let mut chunk = vec![0u8; 7000];
        loop {
            let n = br.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
            tokio::task::yield_now().await;
        }
        writer.await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the bytes arrived changed");
        // The other direction still works after one side's end.
        bw.write_all(b"still here\n").await.unwrap();
        let mut line = [0u8; 11];
        ar.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"still here\n");
    }

    /// A write to a socket whose other end is gone is an error, not a SIGPIPE.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_to_a_closed_peer_fails() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (_ar, mut aw) = split(a).unwrap();
        drop(b);
        let mut failed = None;
        for _ in 0..4 {
            if let Err(e) = aw.write_all(&[0u8; 4096]).await {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("writes to a closed peer kept succeeding");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    }
}
