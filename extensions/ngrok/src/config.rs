//! The ngrok tunnel's config (`settings.webhooks.tunnel.config`), checked with a JSON
//! pointer for each problem.

use protocol::wire::{validate_kind, ValidateParams, ValidateResult};
use serde::Deserialize;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The longest program name, path or domain taken.
pub const MAX_TEXT: usize = 1024;
/// The agent's API address when the config names none (ngrok's `web_addr` default).
pub const DEFAULT_API: &str = "127.0.0.1:4040";

/// A checked config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The ngrok program.
    pub binary: String,
    /// The authtoken's file.
    pub authtoken_file: Option<PathBuf>,
    /// A reserved domain.
    pub domain: Option<String>,
    /// The agent's local API.
    pub api_addr: SocketAddr,
}

pub use sdk::tunnel::Problem;

/// The config as written (strict; every field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    binary: Option<String>,
    #[serde(default)]
    authtoken_file: Option<String>,
    #[serde(default)]
    domain: Option<String>,
    #[serde(default)]
    api_addr: Option<String>,
}

fn is_domain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').count() >= 2
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl Config {
    /// Parse and check `v`: every problem, each with its pointer.
    pub fn parse(v: &Value) -> Result<Config, Vec<Problem>> {
        let (raw, mut problems) = sdk::tunnel::read_config::<Raw>(v, crate::TUNNEL_TYPE)?;
        let mut bad =
            |path: &str, message: String| sdk::tunnel::add_problem(&mut problems, path, message);
        let binary = match raw.binary {
            None => "ngrok".to_owned(),
            Some(s) if !s.is_empty() && s.len() <= MAX_TEXT && !s.starts_with('-') => s,
            Some(_) => {
                bad(
                    "/binary",
                    format!("binary is a program name or path (at most {MAX_TEXT} bytes)"),
                );
                String::new()
            }
        };
        let authtoken_file = match raw.authtoken_file {
            None => None,
            Some(s) if s.starts_with('/') && s.len() <= MAX_TEXT => Some(PathBuf::from(s)),
            Some(_) => {
                bad(
                    "/authtoken_file",
                    format!("authtoken_file is an absolute path (at most {MAX_TEXT} bytes)"),
                );
                None
            }
        };
        let domain = match raw.domain {
            None => None,
            Some(s) if is_domain(&s) => {
                if let Err(e) = sdk::tunnel::check_https(&format!("https://{s}")) {
                    bad("/domain", e);
                }
                Some(s.to_ascii_lowercase())
            }
            Some(_) => {
                bad(
                    "/domain",
                    "domain is a host name, such as hooks.ngrok.app (no scheme, no port)".into(),
                );
                None
            }
        };
        let default_api: SocketAddr = ([127, 0, 0, 1], 4040).into();
        let api_addr = match raw.api_addr {
            None => default_api,
            Some(s) => match s.parse::<SocketAddr>() {
                Ok(a) if a.ip().is_loopback() && a.port() != 0 => a,
                _ => {
                    bad(
                        "/api_addr",
                        format!("api_addr is a loopback address and port, such as {DEFAULT_API}"),
                    );
                    default_api
                }
            },
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Config {
            binary,
            authtoken_file,
            domain,
            api_addr,
        })
    }

    /// The agent's arguments, forwarding to `addr`.
    pub fn args(&self, addr: &str) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "http".into(),
            addr.into(),
            "--log".into(),
            "stdout".into(),
            "--log-format".into(),
            "json".into(),
        ];
        if let Some(d) = &self.domain {
            a.push("--domain".into());
            a.push(d.clone());
        }
        a
    }
}

/// `validate`: kind `tunnel` of type `ngrok` checks the config; anything else is
/// valid.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    if p.kind != validate_kind::TUNNEL || p.type_name != crate::TUNNEL_TYPE {
        return ValidateResult::default();
    }
    sdk::tunnel::validation(Config::parse(&p.config).map(|c| {
        format!(
            "runs {} http to the webhook listener; public URL {}, read from the agent's API on {}",
            c.binary,
            c.domain.as_ref().map_or_else(
                || "the account's (https)".to_owned(),
                |d| format!("https://{d}")
            ),
            c.api_addr
        )
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_config_becomes_ngrok_arguments() {
        let c = Config::parse(&json!({})).unwrap();
        assert_eq!(c.api_addr.to_string(), DEFAULT_API);
        assert_eq!(
            c.args("127.0.0.1:8420").join(" "),
            "http 127.0.0.1:8420 --log stdout --log-format json"
        );
        let c = Config::parse(&json!({"domain": "Hooks.ngrok.app", "authtoken_file": "/t",
                                      "api_addr": "127.0.0.1:4041"}))
        .unwrap();
        assert!(c.args("a").join(" ").ends_with("--domain hooks.ngrok.app"));
        assert_eq!(c.api_addr.port(), 4041);
    }

    #[test]
    fn validate_points_at_each_problem() {
        let p = ValidateParams {
            kind: validate_kind::TUNNEL.into(),
            type_name: "ngrok".into(),
            config: json!({"binary": "", "authtoken_file": "rel", "domain": "https://x.example",
                           "api_addr": "10.0.0.1:4040", "bogus": 1}),
            ..ValidateParams::default()
        };
        let paths: Vec<String> = validate(&p)
            .diagnostics
            .into_iter()
            .map(|d| d.path)
            .collect();
        for want in [
            "/bogus",
            "/binary",
            "/authtoken_file",
            "/domain",
            "/api_addr",
        ] {
            assert!(paths.iter().any(|p| p == want), "{want} in {paths:?}");
        }
        let typed = ValidateParams {
            config: json!({"api_addr": 4040, "bogus": 1}),
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
                ("/api_addr", "must be a string"),
                (
                    "/bogus",
                    "unknown field (known: binary, authtoken_file, domain, api_addr)"
                )
            ]
        );
        let ok = ValidateParams {
            config: json!({"domain": "hooks.ngrok.app"}),
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
