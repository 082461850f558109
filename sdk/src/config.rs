//! What an extension's config check answers about one field: shared by the executors
//! whose binding configs name a field and why it is refused.

use std::fmt;

/// A config that cannot run: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The field (`command`, `env.PATH`, `extra_args[1]`), or empty for the config as a
    /// whole.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    /// The error of `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The field as a JSON pointer into the config (`/env/PATH`, `/extra_args/1`).
    pub fn pointer(&self) -> String {
        fn escape(part: &str) -> String {
            part.replace('~', "~0").replace('/', "~1")
        }
        if self.field.is_empty() {
            return String::new();
        }
        let (head, rest) = match self.field.split_once('.') {
            Some((head, rest)) => (head, Some(rest)),
            None => (self.field.as_str(), None),
        };
        let mut out = match head.strip_suffix(']').and_then(|h| h.split_once('[')) {
            Some((name, index)) => format!("/{}/{index}", escape(name)),
            None => format!("/{}", escape(head)),
        };
        if let Some(rest) = rest {
            out.push('/');
            out.push_str(&escape(rest));
        }
        out
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}
