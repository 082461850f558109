//! Login tokens: `open-conduit web login` mints one ([`mint`]) and records only its
//! SHA-256 with the person's name in `<state>/webd/tokens` (mode 0600, one
//! `sha256:<hex> web:<name>` line per token); webd reads the file ([`Tokens`]) and
//! takes a request's `Authorization: Bearer <token>` as that person.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// The tokens file, under the state directory.
pub const TOKENS_FILE: &str = "webd/tokens";
/// The largest tokens file webd reads.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most tokens the file may hold.
pub const MAX_TOKENS: usize = 1000;
/// The longest person name.
pub const MAX_NAME: usize = 64;

/// `<state>/webd/tokens`.
pub fn path(state: &Path) -> PathBuf {
    state.join(TOKENS_FILE)
}

/// The digest a token is recorded by: `sha256:<hex>`.
pub fn digest(token: &str) -> String {
    format!(
        "sha256:{}",
        protocol::hex::encode(&Sha256::digest(token.as_bytes()))
    )
}

/// The person a login token names: `web:<name>`, where `name` is 1 to [`MAX_NAME`]
/// letters, digits, `.`, `_`, `-` or `@`.
pub fn person(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if !ok {
        return Err(format!(
            "the name {name:?} must be 1 to {MAX_NAME} letters, digits, '.', '_', '-' or '@'"
        ));
    }
    Ok(format!("web:{name}"))
}

fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (hash, who) = l.trim().split_once(' ')?;
            Some((hash.to_owned(), who.trim().to_owned()))
        })
        .filter(|(h, w)| h.starts_with("sha256:") && w.starts_with("web:"))
        .collect()
}

/// Mint a login token for `name` (see [`person`]), record its digest in
/// `<state>/webd/tokens` and answer the token (shown once; only its digest is kept).
/// Run as root, the directory and file are handed to the owner of `state` (the
/// service user webd runs as).
pub fn mint(state: &Path, name: &str) -> Result<String, String> {
    let who = person(name)?;
    let token = format!(
        "oct_{}",
        protocol::random::hex(32).map_err(|e| format!("no randomness: {e}"))?
    );
    let file = path(state);
    let dir = file.parent().unwrap_or(state);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let old = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    if parse(&old).len() >= MAX_TOKENS {
        return Err(format!(
            "{} holds {MAX_TOKENS} tokens already (the most it may): remove old lines first",
            file.display()
        ));
    }
    let mut text = old;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("{} {who}\n", digest(&token)));
    let tmp = dir.join(".tokens.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    if nix::unistd::getuid().is_root() {
        let meta = std::fs::metadata(state).map_err(|e| format!("{}: {e}", state.display()))?;
        for p in [dir, tmp.as_path()] {
            std::os::unix::fs::chown(p, Some(meta.uid()), Some(meta.gid()))
                .map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    std::fs::rename(&tmp, &file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(token)
}

/// What tells that the file changed: its mtime (seconds, nanoseconds), inode and size.
type Stamp = (i64, i64, u64, u64);

/// The tokens file as webd reads it: read again whenever it changes, so a login
/// takes effect at once.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    cache: Mutex<Option<(Stamp, HashMap<String, String>)>>,
}

impl Tokens {
    /// The tokens recorded in `path`.
    pub fn new(path: PathBuf) -> Tokens {
        Tokens {
            path,
            cache: Mutex::new(None),
        }
    }

    /// The person `token` signs in as, if it is a recorded login token.
    pub fn person(&self, token: &str) -> Result<Option<String>, String> {
        let d = digest(token);
        self.with(|m| m.get(&d).cloned())
    }

    /// The recorded token whose session ID ([`session_id`]) is `id`: its digest and
    /// its person.
    pub fn by_session_id(&self, id: &str) -> Result<Option<(String, String)>, String> {
        self.with(|m| {
            m.iter()
                .find(|(d, _)| session_id(d) == id)
                .map(|(d, p)| (d.clone(), p.clone()))
        })
    }

    /// Read the file again when it changed, then look in it.
    fn with<T>(
        &self,
        look: impl FnOnce(&HashMap<String, String>) -> Option<T>,
    ) -> Result<Option<T>, String> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "{} is larger than {MAX_FILE_BYTES} bytes",
                self.path.display()
            ));
        }
        let stamp = (meta.mtime(), meta.mtime_nsec(), meta.ino(), meta.len());
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.as_ref().is_none_or(|(s, _)| *s != stamp) {
            let text = std::fs::read_to_string(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            *cache = Some((stamp, parse(&text)));
        }
        Ok(cache.as_ref().and_then(|(_, m)| look(m)))
    }
}

/// The public name of a recorded token in a session cookie: 16 hex digits of the
/// SHA-256 of its digest (which says nothing of the token).
pub fn session_id(digest: &str) -> String {
    let h = protocol::hex::encode(&Sha256::digest(digest.as_bytes()));
    h.get(..16).unwrap_or(&h).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_names_its_person_and_only_its_digest_is_kept() {
        let dir = std::env::temp_dir().join(format!("webd-tokens-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let t = mint(&dir, "alice").unwrap_or_default();
        let u = mint(&dir, "bob").unwrap_or_default();
        let tokens = Tokens::new(path(&dir));
        assert_eq!(tokens.person(&t), Ok(Some("web:alice".into())));
        assert_eq!(tokens.person(&u), Ok(Some("web:bob".into())));
        assert_eq!(tokens.person("oct_nope"), Ok(None));
        let text = std::fs::read_to_string(path(&dir)).unwrap_or_default();
        assert!(!text.contains(&t) && text.contains(&digest(&t)), "{text}");
        let mode = std::fs::metadata(path(&dir)).map(|m| m.mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600));
        assert!(mint(&dir, "no spaces").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
