//! What the packages that keep a service's webhook as configured share (github's
//! `github.webhooks` task, linear's `linear.webhooks`, bitbucket's
//! `bitbucket.webhooks`): the record KV keeps of a managed hook, and the doctor
//! check's summary.
//!
//! A tracker never shows (or should not be asked for) a hook's secret, so the
//! record is the hook's ID and a SHA-256 digest of the secret last set on it
//! ([`secret_digest`], never the secret): a pass whose connection's
//! `webhook_secret` no longer has that digest sends the secret again. The record is
//! read with its version ([`read`]) and written under that precondition, only when
//! it changed ([`keep`]), so a pass with nothing changed writes nothing.
//!
//! [`Findings`] gathers a check's lines (ok, drift, missing) and makes the
//! `check.run` answer: `fail` when a hook is missing or unreadable, `warn` when one
//! differs from its entry, `ok` else, with the codes `<package>_webhook_missing`
//! and `<package>_webhook_drift`.

use protocol::wire::{CheckRunResult, KvCheck, KvCommitParams, KvPut, TaskRunResult};
use protocol::{Code, RpcError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What KV keeps of a managed hook: its ID (`I`: a number on GitHub, a string on
/// Linear) and the digest of the secret last set on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept<I> {
    /// The hook's ID.
    pub id: I,
    /// The SHA-256 (hex) of the secret last set on it ([`secret_digest`]).
    #[serde(default)]
    pub secret_sha256: String,
}

impl<I> Kept<I> {
    /// True when `digest` is not the digest of the secret last set (or nothing
    /// is kept).
    pub fn secret_differs(kept: Option<&Kept<I>>, digest: &str) -> bool {
        kept.is_none_or(|k| k.secret_sha256 != digest)
    }
}

/// The digest KV keeps of a `package`'s webhook secret (never the secret): the
/// SHA-256, in hex, of `open-conduit <package> webhook secret\n` and the secret.
pub fn secret_digest(package: &str, secret: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(format!("open-conduit {package} webhook secret\n").as_bytes());
    h.update(secret);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The record under `key` (in the extension's own namespace), with the read's
/// precondition. A record that does not parse is none.
pub async fn read<I: DeserializeOwned>(
    host: &crate::Host,
    key: &str,
) -> Result<(Option<Kept<I>>, KvCheck), RpcError> {
    let got = host
        .kv_get(key)
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.get {key}: {e}")))?;
    let kept = got
        .value
        .as_ref()
        .and_then(|v| serde_json::from_value::<Kept<I>>(v.clone()).ok());
    Ok((kept, got.check("", key)))
}

/// Writes `now` under `key` with the read's precondition `check`, unless it is
/// what was read (`was`).
pub async fn keep<I: Serialize + PartialEq>(
    host: &crate::Host,
    key: &str,
    check: KvCheck,
    was: Option<&Kept<I>>,
    now: &Kept<I>,
) -> Result<(), RpcError> {
    if was == Some(now) {
        return Ok(());
    }
    host.kv_commit(&KvCommitParams {
        checks: vec![check],
        puts: vec![KvPut {
            namespace: String::new(),
            key: key.to_string(),
            value: serde_json::to_value(now).unwrap_or(Value::Null),
        }],
        ..Default::default()
    })
    .await
    .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.commit {key}: {e}")))?;
    Ok(())
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// As configured (or nothing to say).
    Ok,
    /// Differs from its entry (drift), or cannot be managed as asked.
    Warn,
    /// Missing, unreadable, or the last pass failed.
    Fail,
}

/// The lines of a webhooks check.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    items: Vec<(Level, String)>,
}

impl Findings {
    /// Adds a line.
    pub fn push(&mut self, level: Level, line: impl Into<String>) {
        self.items.push((level, line.into()));
    }

    /// The worst level so far.
    pub fn worst(&self) -> Level {
        self.items
            .iter()
            .map(|(l, _)| *l)
            .max()
            .unwrap_or(Level::Ok)
    }

    /// The `check.run` answer of `package` over `entries` entries and `hooks`
    /// webhooks: every line as an item; the detail names the lines that are not ok
    /// (all of them when none is bad).
    pub fn result(self, package: &str, entries: usize, hooks: usize) -> CheckRunResult {
        let worst = self.worst();
        let (status, code, detail) = match worst {
            Level::Ok if entries == 0 => ("ok", String::new(), format!("no {package} entries")),
            Level::Ok => (
                "ok",
                String::new(),
                format!("{hooks} webhook(s) as expected"),
            ),
            Level::Warn => (
                "warn",
                format!("{package}_webhook_drift"),
                "a webhook differs from its entry".to_string(),
            ),
            Level::Fail => (
                "fail",
                format!("{package}_webhook_missing"),
                "a webhook is missing or unreadable".to_string(),
            ),
        };
        let shown: Vec<&str> = self
            .items
            .iter()
            .filter(|(l, _)| worst == Level::Ok || *l != Level::Ok)
            .map(|(_, s)| s.as_str())
            .collect();
        let detail = if shown.is_empty() {
            detail
        } else {
            format!("{detail}: {}", shown.join("; "))
        };
        CheckRunResult {
            ok: None,
            status: status.into(),
            code,
            detail,
            items: self.items.into_iter().map(|(_, s)| s).collect(),
        }
    }
}

/// What a pass of a package's webhooks task reports: a line per hook kept, and
/// each entry's failure (said on stderr, kept by the package for doctor). A pass
/// with any failure fails with every entry's lines.
#[derive(Debug, Default)]
pub struct PassReport {
    lines: Vec<String>,
    failed: bool,
}

impl PassReport {
    /// Adds one entry's outcome; answers its failure (for the package to keep for
    /// doctor), `None` when it went well.
    pub fn add(&mut self, package: &str, outcome: Result<Vec<String>, RpcError>) -> Option<String> {
        match outcome {
            Ok(more) => {
                self.lines.extend(more);
                None
            }
            Err(e) => {
                self.failed = true;
                eprintln!("{package}: webhooks task: {}", e.message);
                self.lines.push(e.message.clone());
                Some(e.message)
            }
        }
    }

    /// The task's answer.
    pub fn finish(mut self) -> Result<TaskRunResult, RpcError> {
        if self.lines.is_empty() {
            self.lines.push("no entry sets manage_webhook".into());
        }
        let detail = self.lines.join("\n");
        if self.failed {
            Err(RpcError::new(Code::Unavailable, detail))
        } else {
            Ok(TaskRunResult { detail })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_the_packages_and_never_the_secret() {
        let d = secret_digest("linear", b"s3cret");
        assert_eq!(d.len(), 64);
        assert!(!d.contains("s3cret"));
        assert_ne!(d, secret_digest("github", b"s3cret"));
        let kept = Kept {
            id: "h1".to_string(),
            secret_sha256: d.clone(),
        };
        assert!(!Kept::secret_differs(Some(&kept), &d));
        assert!(Kept::secret_differs(Some(&kept), "other"));
        assert!(Kept::<String>::secret_differs(None, &d));
    }

    #[test]
    fn findings_make_the_worst_status_and_show_what_is_wrong() {
        let mut f = Findings::default();
        f.push(Level::Ok, "a: ok");
        assert_eq!(f.clone().result("linear", 1, 1).status, "ok");
        f.push(Level::Warn, "b: drift");
        let r = f.clone().result("linear", 2, 2);
        assert_eq!(
            (r.status.as_str(), r.code.as_str()),
            ("warn", "linear_webhook_drift")
        );
        assert!(r.detail.ends_with(": b: drift"), "{}", r.detail);
        assert_eq!(r.items.len(), 2);
        f.push(Level::Fail, "c: missing");
        assert_eq!(f.result("linear", 3, 3).code, "linear_webhook_missing");
        assert_eq!(Findings::default().result("x", 0, 0).detail, "no x entries");
    }

    #[test]
    fn a_pass_with_a_failed_entry_fails_with_every_entrys_lines() {
        let mut r = PassReport::default();
        assert_eq!(r.add("x", Ok(vec!["a: ok".into()])), None);
        let failure = r.add("x", Err(RpcError::new(Code::Unavailable, "b: refused")));
        assert_eq!(failure.as_deref(), Some("b: refused"));
        let e = r.finish().err();
        assert!(e.is_some_and(|e| e.message == "a: ok\nb: refused"));
        let none = PassReport::default().finish().ok().map(|t| t.detail);
        assert_eq!(none.as_deref(), Some("no entry sets manage_webhook"));
    }
}
