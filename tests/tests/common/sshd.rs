//! An OpenSSH server on loopback for the tests (Debian's openssh-server): its own
//! host key, a client key made here with ssh-keygen and authorised, a known_hosts
//! naming the server; as the current user; killed on drop.

use oc_systest::HANG;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A test that needs sshd and cannot have it: skips saying `why`, or fails under
/// `OC_REQUIRE_PEERS` (`.ci/run` installs Debian's openssh-server).
pub fn skip(why: &str) {
    assert!(
        std::env::var_os("OC_REQUIRE_PEERS").is_none(),
        "{why}, and OC_REQUIRE_PEERS is set (.ci/run installs Debian's openssh-server)"
    );
    eprintln!("SKIPPED: {why} (Debian's openssh-server; .ci/run installs it)");
}

/// Debian's sshd.
pub const SSHD: &str = "/usr/sbin/sshd";

/// A port free on loopback now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An sshd on loopback as the current user; killed on drop.
pub struct Sshd {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its folder: `client_key`, `known_hosts`, `sshd.log`.
    pub dir: PathBuf,
    /// The user it lets in (the current one).
    pub user: String,
}

impl Sshd {
    /// Starts it in `dir`; `Err(why)` when it cannot run here.
    pub fn start(dir: &Path) -> Result<Sshd, String> {
        if !Path::new(SSHD).exists() {
            return Err(format!("{SSHD} is missing"));
        }
        for tool in ["ssh", "ssh-keygen"] {
            if Command::new(tool).arg("-V").output().is_err()
                && Command::new(tool).arg("-?").output().is_err()
            {
                return Err(format!("{tool} is missing"));
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        for key in ["host_key", "client_key"] {
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err("ssh-keygen failed".into());
            }
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        let port = free_port();
        let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
        std::fs::write(
            dir.join("known_hosts"),
            format!("[127.0.0.1]:{port} {host_pub}"),
        )
        .unwrap();
        let config = format!(
            "ListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
             StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nUsePAM no\nPidFile {d}/sshd.pid\nAllowTcpForwarding yes\n\
             LogLevel VERBOSE\n",
            d = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        if nix::unistd::getuid().is_root() {
            // Debian's sshd wants its privilege separation directory.
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
        let mut child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .args(["-o", &format!("Port={port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start sshd: {e}"))?;
        let deadline = Instant::now() + HANG;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let said = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
                return Err(format!("sshd exited ({status}): {}", said.trim()));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("sshd did not listen".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .ok_or("no user name")?;
        Ok(Sshd {
            child,
            port,
            dir: dir.to_path_buf(),
            user,
        })
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
