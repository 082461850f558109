//! The cloudflared tunnel's config (`settings.webhooks.tunnel.config`), checked with
//! a JSON pointer for each problem.

use protocol::wire::{validate_kind, ValidateParams, ValidateResult};
use serde::Deserialize;
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

/// The config as written (strict; every field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    binary: Option<String>,
    #[serde(default)]
    token_file: Option<String>,
    #[serde(default)]
    connection: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

impl Config {
    /// Parse and check `v`: every problem, each with its pointer.
    pub fn parse(v: &Value) -> Result<Config, Vec<Problem>> {
        let (raw, mut problems) = sdk::tunnel::read_config::<Raw>(v, crate::TUNNEL_TYPE)?;
        // A field that did not read is reported once, not again as missing.
        let failed: Vec<String> = problems.iter().map(|p| p.path.clone()).collect();
        let mut bad =
            |path: &str, message: String| sdk::tunnel::add_problem(&mut problems, path, message);
        let binary = match raw.binary {
            None => "cloudflared".to_owned(),
            Some(s) if !s.is_empty() && s.len() <= MAX_TEXT && !s.starts_with('-') => s,
            Some(_) => {
                bad(
                    "/binary",
                    format!("binary is a program name or path (at most {MAX_TEXT} bytes)"),
                );
                String::new()
            }
        };
        let token_file = match raw.token_file {
            None => None,
            Some(s) if s.starts_with('/') && s.len() <= MAX_TEXT => Some(PathBuf::from(s)),
            Some(_) => {
                bad(
                    "/token_file",
                    format!("token_file is an absolute path (at most {MAX_TEXT} bytes)"),
                );
                None
            }
        };
        let url = match raw.url {
            None => None,
            Some(s) => {
                if let Err(e) = sdk::tunnel::check_https(&s) {
                    bad("/url", e);
                }
                Some(s)
            }
        };
        let word = |w: Option<String>| {
            w.map(|s| {
                if !s.is_empty() && s.len() <= MAX_TEXT && !s.chars().any(char::is_control) {
                    Ok(s)
                } else {
                    Err(())
                }
            })
        };
        let token_secret = match (word(raw.connection), word(raw.secret)) {
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
            (true, None) if !failed.iter().any(|p| p == "/url") => bad(
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
        // A field of the wrong type is one problem, however many checks it fails.
        let typed = ValidateParams {
            config: json!({"token_file": "/t", "url": 5, "secret": 1}),
            ..p.clone()
        };
        let d = validate(&typed).diagnostics;
        let got: Vec<(&str, &str)> = d
            .iter()
            .map(|d| (d.path.as_str(), d.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("/secret", "must be a string"),
                ("/url", "must be a string")
            ]
        );
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
