//! The binding's `sandbox.config` for type `srt`.

use protocol::wire::{validate_kind, Diagnostic, ValidateParams, ValidateResult};
use serde::Deserialize;
use serde_json::Value;

/// The most entries in `allowed_domains` or `deny_read`.
pub const MAX_ENTRIES: usize = 256;
/// The process limit of a run when `max_processes` is absent or 0.
pub const DEFAULT_MAX_PROCESSES: u64 = 1024;
/// The lowest `max_processes`: srt, bubblewrap and their helpers count too (as
/// root, in the run's pids cgroup, node's threads as well: about 20).
pub const MIN_PROCESSES: u64 = 32;
/// The highest `max_processes` (the kernel's `PID_MAX_LIMIT`).
pub const MAX_PROCESSES: u64 = 4_194_304;

/// A parsed config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrtConfig {
    /// The srt program.
    pub srt: String,
    /// Hosts the command may reach.
    pub allowed_domains: Vec<String>,
    /// More paths it must not read.
    pub deny_read: Vec<String>,
    /// The process limit the binding sets (`max_processes`); `None`: the default,
    /// [`DEFAULT_MAX_PROCESSES`].
    pub max_processes: Option<u64>,
}

impl SrtConfig {
    /// The run's process limit: the configured one, else the default.
    pub fn process_limit(&self) -> u64 {
        self.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES)
    }
}

/// A config problem: its JSON pointer and what is wrong.
pub use sdk::config::ConfigError as Problem;

/// The config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    srt: Option<String>,
    #[serde(default)]
    allowed_domains: Vec<String>,
    #[serde(default)]
    deny_read: Vec<String>,
    #[serde(default)]
    max_processes: Option<u64>,
}

fn strings(items: Vec<String>, at: &str, path: bool) -> Result<Vec<String>, Problem> {
    if items.len() > MAX_ENTRIES {
        return Err(Problem::new(
            at,
            format!("{} entries, over the limit of {MAX_ENTRIES}", items.len()),
        ));
    }
    for (i, s) in items.iter().enumerate() {
        let at = format!("{at}/{i}");
        if s.is_empty() || s.len() > 4096 {
            return Err(Problem::new(
                at,
                "must be a non-empty string within 4096 bytes",
            ));
        }
        if path && !std::path::Path::new(s).is_absolute() {
            return Err(Problem::new(at, "must be an absolute path"));
        }
        if !path && s.contains(['/', ' ', '\0']) {
            return Err(Problem::new(
                at,
                "must be a host name (a leading *. allowed)",
            ));
        }
    }
    Ok(items)
}

/// `max_processes`: null or 0 is the default, else [`MIN_PROCESSES`] to
/// [`MAX_PROCESSES`].
fn max_processes(n: Option<u64>) -> Result<Option<u64>, Problem> {
    match n {
        None | Some(0) => Ok(None),
        Some(n) if (MIN_PROCESSES..=MAX_PROCESSES).contains(&n) => Ok(Some(n)),
        Some(n) => Err(Problem::new(
            "/max_processes",
            format!(
                "{n} is out of bounds: {MIN_PROCESSES} to {MAX_PROCESSES} processes (srt and bubblewrap count too), or 0 for the default ({DEFAULT_MAX_PROCESSES})"
            ),
        )),
    }
}

/// Parses the config (null is the defaults).
pub fn parse(config: &Value) -> Result<SrtConfig, Problem> {
    let raw: Raw = match config {
        Value::Null => Raw::default(),
        Value::Object(_) => sdk::config::parse(config)?,
        _ => return Err(Problem::whole("the sandbox config must be an object")),
    };
    let srt = match raw.srt {
        None => "srt".to_owned(),
        Some(s) if !s.is_empty() && !s.contains('\0') => s,
        Some(_) => {
            return Err(Problem::new(
                "/srt",
                "must be the srt program, a non-empty string",
            ))
        }
    };
    Ok(SrtConfig {
        srt,
        allowed_domains: strings(raw.allowed_domains, "/allowed_domains", false)?,
        deny_read: strings(raw.deny_read, "/deny_read", true)?,
        max_processes: max_processes(raw.max_processes)?,
    })
}

/// Answers `validate` kind `sandbox`, type `srt`.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind != validate_kind::SANDBOX || p.type_name != crate::SANDBOX_TYPE {
        return result;
    }
    match parse(&p.config) {
        Ok(c) => result.describe.push(format!(
            "runs each launch in an srt sandbox ({}) of at most {} processes, network to {}",
            c.srt,
            c.process_limit(),
            if c.allowed_domains.is_empty() {
                "what the executor needs only".to_owned()
            } else {
                c.allowed_domains.join(", ")
            }
        )),
        Err(e) => result.diagnostics.push(Diagnostic {
            code: "invalid_config".into(),
            message: e.reason,
            path: e.pointer,
        }),
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_config_names_the_bad_field() {
        assert_eq!(parse(&Value::Null).unwrap().srt, "srt");
        let c = parse(&json!({"srt": "/opt/srt", "allowed_domains": ["api.github.com"]})).unwrap();
        assert_eq!(c.allowed_domains, ["api.github.com"]);
        assert_eq!(parse(&json!({"x": 1})).unwrap_err().pointer, "/x");
        assert_eq!(
            parse(&json!({"x": 1})).unwrap_err().reason,
            "unknown field (known: srt, allowed_domains, deny_read, max_processes)"
        );
        assert_eq!(
            parse(&json!({"deny_read": ["/a", 3]})).unwrap_err().pointer,
            "/deny_read/1"
        );
        assert_eq!(
            parse(&json!({"deny_read": ["rel"]})).unwrap_err().pointer,
            "/deny_read/0"
        );
        assert!(parse(&json!({"allowed_domains": ["http://x/"]})).is_err());
    }

    #[test]
    fn max_processes_is_bounded_and_zero_is_the_default() {
        assert_eq!(parse(&Value::Null).unwrap().process_limit(), 1024);
        for default in [json!(0), Value::Null] {
            let c = parse(&json!({ "max_processes": default })).unwrap();
            assert_eq!((c.max_processes, c.process_limit()), (None, 1024));
        }
        let c = parse(&json!({"max_processes": 64})).unwrap();
        assert_eq!((c.max_processes, c.process_limit()), (Some(64), 64));
        for bad in [
            json!(5),
            json!(4_194_305),
            json!(-1),
            json!(1.5),
            json!("64"),
        ] {
            let e = parse(&json!({ "max_processes": bad })).unwrap_err();
            assert_eq!(e.pointer, "/max_processes", "{bad}: {e}");
        }
        let e = parse(&json!({"max_processes": 5})).unwrap_err();
        assert!(
            e.reason.contains("32 to 4194304") && e.reason.contains("5 is out of bounds"),
            "{e}"
        );
        let e = parse(&json!({"max_processes": "64"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/max_processes: must be a whole, non-negative number"
        );
    }
}
