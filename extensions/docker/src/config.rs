//! The binding's `container.config` for type `docker`.

use protocol::wire::{validate_kind, Diagnostic, ValidateParams, ValidateResult};
use serde::Deserialize;
use serde_json::Value;

/// The engine's socket when the config names none.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// The pids limit of a container when `max_processes` is absent or 0.
pub const DEFAULT_MAX_PROCESSES: u64 = 1024;
/// The highest `max_processes` (the kernel's `PID_MAX_LIMIT`).
pub const MAX_PROCESSES: u64 = 4_194_304;
/// The lowest `memory_mb` (the engines refuse less than 6 MiB).
pub const MIN_MEMORY_MB: u64 = 6;
/// The highest `memory_mb` (1 TiB).
pub const MAX_MEMORY_MB: u64 = 1 << 20;
/// The longest string field, in bytes.
pub const MAX_FIELD_BYTES: usize = 1024;

/// A parsed config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// The image, by its full name.
    pub image: String,
    /// The engine's unix socket.
    pub socket: String,
    /// `none`, `host` or an engine network's name.
    pub network: String,
    /// `uid:gid` (or what the config wrote); `None`: the provider's own.
    pub user: Option<String>,
    /// The pids limit.
    pub max_processes: u64,
    /// The memory limit in MiB.
    pub memory_mb: Option<u64>,
    /// Whether the root file system is read-only.
    pub read_only_root: bool,
}

impl DockerConfig {
    /// The user the container runs as: the config's, else this process's own
    /// `uid:gid` (the service user's).
    pub fn user(&self) -> String {
        self.user.clone().unwrap_or_else(|| {
            format!(
                "{}:{}",
                nix::unistd::getuid().as_raw(),
                nix::unistd::getgid().as_raw()
            )
        })
    }
}

/// A config problem: its JSON pointer and what is wrong.
pub use sdk::config::ConfigError as Problem;

/// The config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    socket: Option<String>,
    #[serde(default)]
    network: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    max_processes: Option<u64>,
    #[serde(default)]
    memory_mb: Option<u64>,
    #[serde(default)]
    read_only_root: Option<bool>,
}

fn text(value: Option<String>, at: &str) -> Result<Option<String>, Problem> {
    match value {
        None => Ok(None),
        Some(s) if s.is_empty() || s.len() > MAX_FIELD_BYTES => Err(Problem::new(
            at,
            format!("must be a non-empty string within {MAX_FIELD_BYTES} bytes"),
        )),
        Some(s) if s.chars().any(|c| c.is_whitespace() || c.is_control()) => Err(Problem::new(
            at,
            "must not contain white space or control characters",
        )),
        Some(s) => Ok(Some(s)),
    }
}

/// A name of letters, digits and `_.-`, starting with a letter or digit.
fn plain_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Whether `image` names its registry host (`localhost/…`, `docker.io/…`,
/// `registry:5000/…`): a short name would mean different images on Docker and on
/// podman.
fn full_image_name(image: &str) -> bool {
    match image.split_once('/') {
        Some((host, rest)) => {
            !rest.is_empty()
                && (host == "localhost" || host.contains('.') || host.contains(':'))
                && !image.contains("//")
        }
        None => false,
    }
}

/// Parses the config (it must be an object with `image`): the first problem.
pub fn parse(config: &Value) -> Result<DockerConfig, Problem> {
    check(config).map_err(|mut all| all.remove(0))
}

/// Parses the config: every problem, each with its pointer.
pub fn check(config: &Value) -> Result<DockerConfig, Vec<Problem>> {
    let (raw, mut problems): (Raw, Vec<Problem>) = match config {
        Value::Object(_) => {
            let (raw, problems) = sdk::config::parse_each::<Raw>(config);
            (raw.unwrap_or_default(), problems)
        }
        Value::Null => return Err(vec![Problem::new("/image", "is required")]),
        _ => {
            return Err(vec![Problem::whole(
                "the container config must be an object",
            )])
        }
    };
    let mut bad = |p: Problem| {
        if !problems.iter().any(|x| x.pointer == p.pointer) {
            problems.push(p);
        }
    };
    let mut field = |value: Option<String>, at: &str| match text(value, at) {
        Ok(v) => v,
        Err(p) => {
            bad(p);
            None
        }
    };
    let image = field(raw.image, "/image");
    let socket = field(raw.socket, "/socket").unwrap_or_else(|| DEFAULT_SOCKET.to_owned());
    let network = field(raw.network, "/network").unwrap_or_else(|| "none".to_owned());
    let user = field(raw.user, "/user");
    match &image {
        None => bad(Problem::new("/image", "is required")),
        Some(image) if !full_image_name(image) => bad(Problem::new(
            "/image",
            format!("{image:?} must be the image's full name, with its registry host (localhost/{image}, docker.io/library/{image})"),
        )),
        Some(_) => {}
    }
    if !socket.starts_with('/') {
        bad(Problem::new(
            "/socket",
            "must be the absolute path of the engine's unix socket",
        ));
    }
    if !plain_name(&network) {
        bad(Problem::new(
            "/network",
            "must be none, host, or an engine network's name (letters, digits, _ . -)",
        ));
    }
    if let Some(u) = &user {
        let ok = match u.split_once(':') {
            Some((a, b)) => plain_name(a) && plain_name(b),
            None => plain_name(u),
        };
        if !ok {
            bad(Problem::new(
                "/user",
                "must be uid:gid (or a user of the image, user:group)",
            ));
        }
    }
    let max_processes = match raw.max_processes {
        None | Some(0) => DEFAULT_MAX_PROCESSES,
        Some(n) if n <= MAX_PROCESSES => n,
        Some(n) => {
            bad(Problem::new(
                "/max_processes",
                format!("{n} is out of bounds: 1 to {MAX_PROCESSES} processes, or 0 for the default ({DEFAULT_MAX_PROCESSES})"),
            ));
            DEFAULT_MAX_PROCESSES
        }
    };
    let memory_mb = match raw.memory_mb {
        None => None,
        Some(n) if (MIN_MEMORY_MB..=MAX_MEMORY_MB).contains(&n) => Some(n),
        Some(n) => {
            bad(Problem::new(
                "/memory_mb",
                format!("{n} is out of bounds: {MIN_MEMORY_MB} to {MAX_MEMORY_MB} MiB"),
            ));
            None
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(DockerConfig {
        image: image.unwrap_or_default(),
        socket,
        network,
        user,
        max_processes,
        memory_mb,
        read_only_root: raw.read_only_root.unwrap_or(true),
    })
}

/// Answers `validate` kind `container`, type `docker`.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind != validate_kind::CONTAINER || p.type_name != crate::CONTAINER_TYPE {
        return result;
    }
    match check(&p.config) {
        Ok(c) => result.describe.push(format!(
            "runs each launch in a container of {} on the engine at {}: network {}, at most {} processes{}{}",
            c.image,
            c.socket,
            c.network,
            c.max_processes,
            c.memory_mb
                .map(|m| format!(", {m} MiB of memory"))
                .unwrap_or_default(),
            if c.read_only_root {
                ", read-only root"
            } else {
                ""
            },
        )),
        Err(problems) => {
            for e in problems {
                result.diagnostics.push(Diagnostic {
                    code: "invalid_config".into(),
                    message: e.reason,
                    path: e.pointer,
                });
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_config_takes_its_defaults_and_names_the_bad_field() {
        let c = parse(&json!({"image": "localhost/oc-debian:test"})).unwrap();
        assert_eq!(c.socket, DEFAULT_SOCKET);
        assert_eq!(c.network, "none");
        assert_eq!(c.max_processes, 1024);
        assert!(c.read_only_root && c.memory_mb.is_none() && c.user.is_none());
        assert!(c.user().contains(':'));
        for (bad, pointer) in [
            (json!({}), "/image"),
            (Value::Null, "/image"),
            (json!({"image": "debian"}), "/image"),
            (json!({"image": "localhost/x", "nope": 1}), "/nope"),
            (
                json!({"image": "localhost/x", "socket": "rel.sock"}),
                "/socket",
            ),
            (
                json!({"image": "localhost/x", "network": "container:x"}),
                "/network",
            ),
            (json!({"image": "localhost/x", "user": "a b"}), "/user"),
            (
                json!({"image": "localhost/x", "max_processes": -1}),
                "/max_processes",
            ),
            (
                json!({"image": "localhost/x", "max_processes": 5_000_000}),
                "/max_processes",
            ),
            (
                json!({"image": "localhost/x", "memory_mb": 1}),
                "/memory_mb",
            ),
            (
                json!({"image": "localhost/x", "read_only_root": "yes"}),
                "/read_only_root",
            ),
        ] {
            assert_eq!(parse(&bad).unwrap_err().pointer, pointer, "{bad}");
        }
        assert!(parse(&json!([])).is_err());
        let c = parse(
            &json!({"image": "docker.io/library/debian:bookworm", "network": "host",
                               "user": "1000:1000", "memory_mb": 512, "read_only_root": false}),
        )
        .unwrap();
        assert_eq!(
            (
                c.network.as_str(),
                c.user().as_str(),
                c.memory_mb,
                c.read_only_root
            ),
            ("host", "1000:1000", Some(512), false)
        );
    }

    #[test]
    fn validate_answers_a_diagnostic_with_its_pointer() {
        let p = ValidateParams {
            kind: validate_kind::CONTAINER.into(),
            type_name: crate::CONTAINER_TYPE.into(),
            config: json!({"image": "localhost/x", "memory_mb": 2}),
            ..ValidateParams::default()
        };
        let r = validate(&p);
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].path, "/memory_mb");
        let ok = validate(&ValidateParams {
            config: json!({"image": "localhost/x"}),
            ..p
        });
        assert!(
            ok.diagnostics.is_empty() && ok.describe.len() == 1,
            "{ok:?}"
        );
    }
}
