//! The cloudflared tunnel's config (`settings.webhooks.tunnel.config`), checked with
//! a JSON pointer for each problem.

use protocol::wire::{validate_kind, ValidateParams, ValidateResult};
use serde_json::Value;
use std::path::PathBuf;

/// The longest program name or path taken.
pub const MAX_TEXT: usize = 1024;

/// A checked config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The cloudflared program.
    pub binary: String,
    /// A named tunnel's token file; none runs a quick tunnel.
    pub token_file: Option<PathBuf>,
    /// Or the connection and secret holding the token (`connection`, `secret`).
    pub token_secret: Option<(String, String)>,
    /// A named tunnel's public URL.
    pub url: Option<String>,
}

pub use sdk::tunnel::Problem;

const FIELDS: &[&str] = &["binary", "token_file", "connection", "secret", "url"];

impl Config {
    /// Parse and check `v`: every problem, each with its pointer.
    pub fn parse(v: &Value) -> Result<Config, Vec<Problem>> {
        let (obj, mut problems) = sdk::tunnel::config_object(v, crate::TUNNEL_TYPE, FIELDS)?;
        let mut bad = |path: &str, message: String| {
            problems.push(Problem {
                path: path.to_owned(),
                message,
            })
        };
        let binary = match obj.get("binary") {
            None => "cloudflared".to_owned(),
            Some(Value::String(s))
                if !s.is_empty() && s.len() <= MAX_TEXT && !s.starts_with('-') =>
            {
                s.clone()
            }
            Some(_) => {
                bad(
                    "/binary",
                    format!("binary is a program name or path (at most {MAX_TEXT} bytes)"),
                );
                String::new()
            }
        };
        let token_file = match obj.get("token_file") {
            None => None,
            Some(Value::String(s)) if s.starts_with('/') && s.len() <= MAX_TEXT => {
                Some(PathBuf::from(s))
            }
            Some(_) => {
                bad(
                    "/token_file",
                    format!("token_file is an absolute path (at most {MAX_TEXT} bytes)"),
                );
                None
            }
        };
        let url = match obj.get("url") {
            None => None,
            Some(Value::String(s)) => {
                if let Err(e) = sdk::tunnel::check_https(s) {
                    bad("/url", e);
                }
                Some(s.clone())
            }
            Some(_) => {
                bad("/url", "url is an https:// URL".into());
                None
            }
        };
        let word = |k: &str| match obj.get(k) {
            Some(Value::String(s))
                if !s.is_empty() && s.len() <= MAX_TEXT && !s.chars().any(char::is_control) =>
            {
                Some(Ok(s.clone()))
            }
            Some(_) => Some(Err(())),
            None => None,
        };
        let token_secret = match (word("connection"), word("secret")) {
            (None, None) => None,
            (None, Some(_)) => {
                bad(
                    "/secret",
                    "secret needs a connection (the one holding the token)".into(),
                );
                None
            }
            (Some(Err(())), _) => {
                bad("/connection", "connection is a connection's name".into());
                None
            }
            (_, Some(Err(()))) => {
                bad("/secret", "secret is a secret's name".into());
                None
            }
            (Some(Ok(c)), s) => {
                if token_file.is_some() {
                    bad(
                        "/connection",
                        "give the token as token_file or as a connection's secret, not both".into(),
                    );
                }
                let secret = match s {
                    Some(Ok(s)) => s,
                    _ => "token".to_owned(),
                };
                Some((c, secret))
            }
        };
        let named = token_file.is_some() || token_secret.is_some();
        match (named, &url) {
            (true, None) if !obj.contains_key("url") => bad(
                "/url",
                "url is required with token_file: the hostname the named tunnel's DNS route gives it, such as https://hooks.example.com".into(),
            ),
            (false, Some(_)) => bad(
                "/url",
                "url is a named tunnel's (with token_file); a quick tunnel's URL is the one cloudflared prints".into(),
            ),
            _ => {}
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Config {
            binary,
            token_file,
            token_secret,
            url,
        })
    }

    /// A named tunnel (a token from a file or a connection), else a quick one.
    pub fn named(&self) -> bool {
        self.token_file.is_some() || self.token_secret.is_some()
    }

    /// cloudflared's arguments, forwarding to `addr`.
    pub fn args(&self, addr: &str) -> Vec<String> {
        let mut a: Vec<String> = vec!["tunnel".into(), "--no-autoupdate".into()];
        if self.named() {
            a.push("run".into());
        } else {
            a.push("--url".into());
            a.push(format!("http://{addr}"));
        }
        a
    }
}

/// `validate`: kind `tunnel` of type `cloudflared` checks the config; anything else
/// is valid.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    if p.kind != validate_kind::TUNNEL || p.type_name != crate::TUNNEL_TYPE {
        return ValidateResult::default();
    }
    sdk::tunnel::validation(Config::parse(&p.config).map(|c| match (&c.token_file, &c.token_secret, &c.url) {
            (Some(t), _, Some(u)) => format!(
                "runs {} as the named tunnel whose token is in {}; public URL {u}",
                c.binary,
                t.display()
            ),
            (_, Some((conn, secret)), Some(u)) => format!(
                "runs {} as the named tunnel whose token is secret {secret:?} of connection {conn:?}; public URL {u}",
                c.binary
            ),
            _ => format!(
                "runs {} as a quick tunnel; public URL https://<random>.trycloudflare.com, new on each start",
                c.binary
            ),
        }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_config_becomes_cloudflared_arguments() {
        let quick = Config::parse(&json!({})).unwrap();
        assert_eq!(quick.binary, "cloudflared");
        assert_eq!(
            quick.args("127.0.0.1:8420").join(" "),
            "tunnel --no-autoupdate --url http://127.0.0.1:8420"
        );
        let named = Config::parse(
            &json!({"token_file": "/etc/oc/cf-token", "url": "https://hooks.example.com"}),
        )
        .unwrap();
        // The token goes on the environment, never the command line.
        assert_eq!(
            named.args("127.0.0.1:8420").join(" "),
            "tunnel --no-autoupdate run"
        );
    }

    #[test]
    fn validate_points_at_each_problem() {
        let p = ValidateParams {
            kind: validate_kind::TUNNEL.into(),
            type_name: "cloudflared".into(),
            config: json!({"binary": "-x", "token_file": "rel", "url": "http://h.example", "bogus": 1}),
            ..ValidateParams::default()
        };
        let paths: Vec<String> = validate(&p)
            .diagnostics
            .into_iter()
            .map(|d| d.path)
            .collect();
        for want in ["/bogus", "/binary", "/token_file", "/url"] {
            assert!(paths.iter().any(|p| p == want), "{want} in {paths:?}");
        }
        let named_without_url = ValidateParams {
            config: json!({"token_file": "/t"}),
            ..p.clone()
        };
        assert_eq!(validate(&named_without_url).diagnostics[0].path, "/url");
        let quick_with_url = ValidateParams {
            config: json!({"url": "https://h.example"}),
            ..p.clone()
        };
        assert_eq!(validate(&quick_with_url).diagnostics[0].path, "/url");
        let ok = ValidateParams {
            config: json!({}),
            ..p.clone()
        };
        let r = validate(&ok);
        assert!(r.diagnostics.is_empty(), "{r:?}");
        assert_eq!(r.describe.len(), 1);
        let other = ValidateParams {
            type_name: "ssh".into(),
            ..p
        };
        assert!(validate(&other).diagnostics.is_empty());
    }
}
