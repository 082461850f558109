//! The binding's `sandbox.config` for type `srt`.

use protocol::wire::{validate_kind, Diagnostic, ValidateParams, ValidateResult};
use serde_json::Value;

/// The most entries in `allowed_domains` or `deny_read`.
pub const MAX_ENTRIES: usize = 256;

/// A parsed config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrtConfig {
    /// The srt program.
    pub srt: String,
    /// Hosts the command may reach.
    pub allowed_domains: Vec<String>,
    /// More paths it must not read.
    pub deny_read: Vec<String>,
}

/// A config problem: its JSON pointer and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field's pointer inside the config.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

fn problem(pointer: &str, message: impl Into<String>) -> Problem {
    Problem {
        pointer: pointer.into(),
        message: message.into(),
    }
}

fn strings(v: &Value, pointer: &str, path: bool) -> Result<Vec<String>, Problem> {
    let Some(items) = v.as_array() else {
        return Err(problem(pointer, "must be a list of strings"));
    };
    if items.len() > MAX_ENTRIES {
        return Err(problem(
            pointer,
            format!("{} entries, over the limit of {MAX_ENTRIES}", items.len()),
        ));
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{pointer}/{i}");
        let Some(s) = item.as_str().filter(|s| !s.is_empty() && s.len() <= 4096) else {
            return Err(problem(&at, "must be a non-empty string within 4096 bytes"));
        };
        if path && !std::path::Path::new(s).is_absolute() {
            return Err(problem(&at, "must be an absolute path"));
        }
        if !path && s.contains(['/', ' ', '\0']) {
            return Err(problem(&at, "must be a host name (a leading *. allowed)"));
        }
        out.push(s.to_owned());
    }
    Ok(out)
}

/// Parses the config (null is the defaults).
pub fn parse(config: &Value) -> Result<SrtConfig, Problem> {
    let mut out = SrtConfig {
        srt: "srt".into(),
        ..SrtConfig::default()
    };
    let obj = match config {
        Value::Null => return Ok(out),
        Value::Object(o) => o,
        _ => return Err(problem("", "the sandbox config must be an object")),
    };
    for (k, v) in obj {
        let at = format!("/{k}");
        match k.as_str() {
            "srt" => match v.as_str().filter(|s| !s.is_empty() && !s.contains('\0')) {
                Some(s) => out.srt = s.to_owned(),
                None => return Err(problem(&at, "must be the srt program, a non-empty string")),
            },
            "allowed_domains" => out.allowed_domains = strings(v, &at, false)?,
            "deny_read" => out.deny_read = strings(v, &at, true)?,
            other => {
                return Err(problem(
                    &at,
                    format!("unknown field {other:?} (srt, allowed_domains, deny_read)"),
                ))
            }
        }
    }
    Ok(out)
}

/// Answers `validate` kind `sandbox`, type `srt`.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind != validate_kind::SANDBOX || p.type_name != crate::SANDBOX_TYPE {
        return result;
    }
    match parse(&p.config) {
        Ok(c) => result.describe.push(format!(
            "runs each launch in an srt sandbox ({}), network to {}",
            c.srt,
            if c.allowed_domains.is_empty() {
                "what the executor needs only".to_owned()
            } else {
                c.allowed_domains.join(", ")
            }
        )),
        Err(e) => result.diagnostics.push(Diagnostic {
            code: "invalid_config".into(),
            message: e.message,
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
            parse(&json!({"deny_read": ["rel"]})).unwrap_err().pointer,
            "/deny_read/0"
        );
        assert!(parse(&json!({"allowed_domains": ["http://x/"]})).is_err());
    }
}
