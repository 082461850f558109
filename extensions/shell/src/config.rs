//! The binding's executor config (`RunRequest.config`): parsed and checked, with
//! errors that name the field and never quote a value.
//!
//! ```json
//! {"command": ["make", "deploy"], "cwd": "deploy", "env": {"STAGE": "prod"},
//!  "deadline_s": 600, "grace_s": 10}
//! ```
//!
//! Exactly one of `command` (an argv, run as it is) or `script` (text run with
//! `/bin/sh -c`) is required; every other field is optional. An unknown field is
//! refused, so a misspelt `deadline_s` never silently runs without its deadline.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The default seconds between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE_S: u64 = 10;
/// The longest deadline or grace accepted, in seconds (a year): keeps every
/// deadline representable as an instant.
pub const MAX_SECONDS: u64 = 366 * 24 * 3600;
/// The shell a `script` runs with.
pub const SHELL: &str = "/bin/sh";

pub use sdk::config::ConfigError;

/// What the binding asks to run, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellConfig {
    /// The argv: the `command` as given, or `/bin/sh -c <script>`.
    pub argv: Vec<String>,
    /// True when the argv came from `script`.
    pub script: bool,
    /// The working directory as given (resolved when the run starts).
    pub cwd: Option<String>,
    /// Variables set over the run's environment.
    pub env: BTreeMap<String, String>,
    /// Kill the group after this many seconds.
    pub deadline_s: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL.
    pub grace_s: u64,
}

impl ShellConfig {
    /// One line saying what the config runs, for the config view and dry runs.
    pub fn describe(&self) -> String {
        let what = if self.script {
            "runs a /bin/sh script".to_string()
        } else {
            format!(
                "runs {}",
                self.argv.first().map(String::as_str).unwrap_or("")
            )
        };
        match self.deadline_s {
            Some(d) => format!("{what}, killed after {d} s"),
            None => what,
        }
    }
}

/// The config as written (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    script: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    deadline_s: Option<u64>,
    #[serde(default)]
    grace_s: Option<u64>,
}

fn no_nul(at: &str, s: &str) -> Result<(), ConfigError> {
    if s.contains('\0') {
        return Err(ConfigError::new(at, "must not contain a NUL byte"));
    }
    Ok(())
}

fn seconds(at: &str, n: u64, min: u64) -> Result<u64, ConfigError> {
    if n < min {
        return Err(ConfigError::new(at, format!("must be at least {min}")));
    }
    if n > MAX_SECONDS {
        return Err(ConfigError::new(
            at,
            format!("must be at most {MAX_SECONDS} seconds"),
        ));
    }
    Ok(n)
}

/// Parses and checks a binding's executor config.
pub fn parse(config: &Value) -> Result<ShellConfig, ConfigError> {
    match config {
        Value::Object(_) => {}
        Value::Null => {
            return Err(ConfigError::new(
                "/command",
                "is required: the shell executor needs a command or a script",
            ))
        }
        _ => return Err(ConfigError::whole("must be an object")),
    }
    let raw: Raw = sdk::config::parse(config)?;
    let (argv, script) = match (raw.command, raw.script) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                "/script",
                "give either command or script, not both",
            ))
        }
        (None, None) => {
            return Err(ConfigError::new(
                "/command",
                "is required: the shell executor needs a command or a script",
            ))
        }
        (Some(argv), None) => {
            if argv.is_empty() {
                return Err(ConfigError::new("/command", "must not be empty"));
            }
            for (i, arg) in argv.iter().enumerate() {
                no_nul(&format!("/command/{i}"), arg)?;
            }
            if argv.first().is_some_and(String::is_empty) {
                return Err(ConfigError::new(
                    "/command/0",
                    "the program must not be empty",
                ));
            }
            (argv, false)
        }
        (None, Some(s)) => {
            no_nul("/script", &s)?;
            if s.trim().is_empty() {
                return Err(ConfigError::new("/script", "must not be empty"));
            }
            (vec![SHELL.to_string(), "-c".to_string(), s], true)
        }
    };
    if let Some(cwd) = &raw.cwd {
        no_nul("/cwd", cwd)?;
        if cwd.is_empty() {
            return Err(ConfigError::new("/cwd", "must not be empty"));
        }
    }
    for (name, value) in &raw.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(ConfigError::new(
                "/env",
                "a variable name must be non-empty, without = or NUL",
            ));
        }
        no_nul(&sdk::config::pointer(["env", name.as_str()]), value)?;
    }
    let deadline_s = match raw.deadline_s {
        None => None,
        Some(n) => Some(seconds("/deadline_s", n, 1)?),
    };
    let grace_s = match raw.grace_s {
        None => DEFAULT_GRACE_S,
        Some(n) => seconds("/grace_s", n, 0)?,
    };
    Ok(ShellConfig {
        argv,
        script,
        cwd: raw.cwd,
        env: raw.env,
        deadline_s,
        grace_s,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_command_with_every_field() {
        let c = parse(&json!({
            "command": ["make", "deploy"], "cwd": "x", "env": {"A": "1"},
            "deadline_s": 30, "grace_s": 0,
        }))
        .unwrap();
        assert_eq!(c.argv, ["make", "deploy"]);
        assert!(!c.script);
        assert_eq!(c.cwd.as_deref(), Some("x"));
        assert_eq!(c.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(c.deadline_s, Some(30));
        assert_eq!(c.grace_s, 0);
        assert_eq!(c.describe(), "runs make, killed after 30 s");
    }

    #[test]
    fn a_script_runs_with_sh() {
        let c = parse(&json!({"script": "echo hi"})).unwrap();
        assert_eq!(c.argv, ["/bin/sh", "-c", "echo hi"]);
        assert_eq!(c.grace_s, DEFAULT_GRACE_S);
        assert_eq!(c.deadline_s, None);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!(null), "/command"),
            (json!([]), ""),
            (json!({}), "/command"),
            (json!({"command": []}), "/command"),
            (json!({"command": "make"}), "/command"),
            (json!({"command": ["make", 3]}), "/command/1"),
            (json!({"command": [""]}), "/command/0"),
            (json!({"command": ["a\u{0}b"]}), "/command/0"),
            (json!({"command": ["a"], "script": "b"}), "/script"),
            (json!({"script": "  "}), "/script"),
            (json!({"command": ["a"], "cwd": ""}), "/cwd"),
            (json!({"command": ["a"], "env": {"A": 1}}), "/env/A"),
            (
                json!({"command": ["a"], "env": {"A/B": "\u{0}"}}),
                "/env/A~1B",
            ),
            (json!({"command": ["a"], "env": {"A=B": "1"}}), "/env"),
            (json!({"command": ["a"], "env": []}), "/env"),
            (json!({"command": ["a"], "deadline_s": 0}), "/deadline_s"),
            (json!({"command": ["a"], "deadline_s": 1.5}), "/deadline_s"),
            (json!({"command": ["a"], "deadline_s": -1}), "/deadline_s"),
            (json!({"command": ["a"], "grace_s": "10"}), "/grace_s"),
            (
                json!({"command": ["a"], "grace_s": MAX_SECONDS + 1}),
                "/grace_s",
            ),
            (json!({"command": ["a"], "deadline": 5}), "/deadline"),
        ];
        for (config, pointer) in cases {
            let e = parse(&config).unwrap_err();
            assert_eq!(e.pointer, pointer, "{config}: {e}");
            if !pointer.is_empty() {
                assert!(e.to_string().starts_with(pointer), "{e}");
            }
        }
        // The reasons say what the field must be, never what it was.
        let reason = |config: Value| parse(&config).unwrap_err().to_string();
        assert_eq!(
            reason(json!({"command": ["a"], "grace_s": "10"})),
            "/grace_s: must be a whole, non-negative number"
        );
        assert_eq!(
            reason(json!({"command": ["a"], "deadline": 5})),
            "/deadline: unknown field (known: command, script, cwd, env, deadline_s, grace_s)"
        );
        assert_eq!(reason(json!([])), "the config: must be an object");
    }
}
