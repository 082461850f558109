//! The ssh tunnel's config (`settings.webhooks.tunnel.config`), checked with a JSON
//! pointer for each problem.

use protocol::wire::{validate_kind, ValidateParams, ValidateResult};
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;

/// The longest host, user or path taken.
pub const MAX_TEXT: usize = 1024;
/// The longest keep-alive interval.
pub const MAX_ALIVE_S: u64 = 3600;

/// A checked config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The SSH server.
    pub host: String,
    /// The login.
    pub user: String,
    /// The server's SSH port.
    pub port: u16,
    /// The forwarded port on the server.
    pub remote_port: u16,
    /// The address the server binds it to (empty: its default).
    pub remote_bind: String,
    /// The public URL, templated.
    pub url: String,
    /// The private key.
    pub identity_file: Option<PathBuf>,
    /// Or the connection and secret holding it (`connection`, `secret`): resolved
    /// through the host when a run starts, written to a file of the run's own.
    pub key_secret: Option<(String, String)>,
    /// The known_hosts file.
    pub known_hosts: Option<PathBuf>,
    /// `yes`, `accept-new` or `no`.
    pub strict_host_key_checking: String,
    /// Keep-alive interval.
    pub server_alive_interval_s: u64,
    /// The ssh program.
    pub ssh: String,
}

pub use sdk::tunnel::Problem;

/// The config as written (strict; every field optional: the required ones are
/// checked after, with the others).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    remote_port: Option<u16>,
    #[serde(default)]
    remote_bind: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    identity_file: Option<String>,
    #[serde(default)]
    connection: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    known_hosts: Option<String>,
    #[serde(default)]
    strict_host_key_checking: Option<String>,
    #[serde(default)]
    server_alive_interval_s: Option<u64>,
    #[serde(default)]
    ssh: Option<String>,
}

fn safe_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TEXT
        && !s.starts_with('-')
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
}

impl Config {
    /// Parse and check `v`: every problem, each with its pointer.
    pub fn parse(v: &Value) -> Result<Config, Vec<Problem>> {
        let (raw, mut problems) = sdk::tunnel::read_config::<Raw>(v, crate::TUNNEL_TYPE)?;
        let mut bad =
            |path: &str, message: String| sdk::tunnel::add_problem(&mut problems, path, message);
        let host = raw.host.unwrap_or_default();
        if !safe_word(&host) {
            bad("/host", "host is required: a host name or address".into());
        }
        let user = raw.user.unwrap_or_default();
        if !safe_word(&user) || user.contains(':') {
            bad("/user", "user is required: a login name".into());
        }
        let port = match raw.port {
            None => 22,
            Some(0) => {
                bad("/port", "port is a port, 1 to 65535".into());
                0
            }
            Some(p) => p,
        };
        let remote_port = match raw.remote_port {
            None => {
                bad(
                    "/remote_port",
                    "remote_port is required: a port, 1 to 65535".into(),
                );
                0
            }
            Some(0) => {
                bad("/remote_port", "remote_port is a port, 1 to 65535".into());
                0
            }
            Some(p) => p,
        };
        let remote_bind = match raw.remote_bind {
            None => String::new(),
            Some(b) => {
                if !safe_word(&b) {
                    bad("/remote_bind", "remote_bind is an address".into());
                }
                b
            }
        };
        let url = raw.url.unwrap_or_default();
        let expanded = expand(&url, &host, remote_port);
        if url.is_empty() {
            bad(
                "/url",
                "url is required: the public URL, such as https://hooks.example.com".into(),
            );
        } else if let Err(e) = protocol::config::check_public_url(&expanded) {
            bad("/url", e);
        }
        let mut path_of = |k: &str, v: Option<String>| match v {
            None => None,
            Some(s) if s.starts_with('/') && s.len() <= MAX_TEXT => Some(PathBuf::from(s)),
            Some(_) => {
                bad(&format!("/{k}"), format!("{k} is an absolute path"));
                None
            }
        };
        let identity_file = path_of("identity_file", raw.identity_file);
        let known_hosts = path_of("known_hosts", raw.known_hosts);
        let key_secret = match raw.connection {
            None => {
                if raw.secret.is_some() {
                    bad(
                        "/secret",
                        "secret needs a connection (the one holding the key)".into(),
                    );
                }
                None
            }
            Some(c) => {
                let secret = raw.secret.unwrap_or_else(|| "private_key".into());
                if !safe_word(&c) {
                    bad("/connection", "connection is a connection's name".into());
                }
                if !safe_word(&secret) {
                    bad("/secret", "secret is a secret's name".into());
                }
                if identity_file.is_some() {
                    bad(
                        "/connection",
                        "give the key as identity_file or as a connection's secret, not both"
                            .into(),
                    );
                }
                Some((c, secret))
            }
        };
        let strict = raw.strict_host_key_checking.unwrap_or_else(|| "yes".into());
        if !matches!(strict.as_str(), "yes" | "accept-new" | "no") {
            bad(
                "/strict_host_key_checking",
                "strict_host_key_checking is yes, accept-new or no".into(),
            );
        }
        let alive = match raw.server_alive_interval_s {
            None => 15,
            Some(s) if (1..=MAX_ALIVE_S).contains(&s) => s,
            Some(_) => {
                bad(
                    "/server_alive_interval_s",
                    format!("server_alive_interval_s is 1 to {MAX_ALIVE_S} seconds"),
                );
                15
            }
        };
        let ssh = raw.ssh.unwrap_or_else(|| "ssh".into());
        if ssh.is_empty() || ssh.len() > MAX_TEXT || ssh.starts_with('-') {
            bad("/ssh", "ssh is a program name or path".into());
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Config {
            host,
            user,
            port,
            remote_port,
            remote_bind,
            url: expanded,
            identity_file,
            key_secret,
            known_hosts,
            strict_host_key_checking: strict,
            server_alive_interval_s: alive,
            ssh,
        })
    }

    /// The `-R` spec forwarding to `addr`.
    pub fn forward(&self, addr: &str) -> String {
        if self.remote_bind.is_empty() {
            format!("{}:{addr}", self.remote_port)
        } else {
            format!("{}:{}:{addr}", self.remote_bind, self.remote_port)
        }
    }

    /// ssh's arguments, forwarding to `addr`.
    pub fn args(&self, addr: &str) -> Vec<String> {
        let mut a: Vec<String> = vec!["-v".into(), "-N".into(), "-R".into(), self.forward(addr)];
        let opt = |a: &mut Vec<String>, o: String| {
            a.push("-o".into());
            a.push(o);
        };
        opt(&mut a, "ExitOnForwardFailure=yes".into());
        opt(&mut a, "BatchMode=yes".into());
        opt(
            &mut a,
            format!("ServerAliveInterval={}", self.server_alive_interval_s),
        );
        opt(&mut a, "ServerAliveCountMax=3".into());
        opt(
            &mut a,
            format!("StrictHostKeyChecking={}", self.strict_host_key_checking),
        );
        opt(&mut a, "ConnectTimeout=30".into());
        if let Some(k) = &self.known_hosts {
            opt(&mut a, format!("UserKnownHostsFile={}", k.display()));
        }
        if let Some(k) = &self.identity_file {
            a.push("-i".into());
            a.push(k.display().to_string());
            opt(&mut a, "IdentitiesOnly=yes".into());
        }
        a.push("-p".into());
        a.push(self.port.to_string());
        a.push(format!("{}@{}", self.user, self.host));
        a
    }
}

/// The URL template with `{host}` and `{remote_port}` replaced.
pub fn expand(url: &str, host: &str, remote_port: u16) -> String {
    url.replace("{host}", host)
        .replace("{remote_port}", &remote_port.to_string())
}

/// `validate`: kind `tunnel` of type `ssh` checks the config; anything else is valid.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    if p.kind != validate_kind::TUNNEL || p.type_name != crate::TUNNEL_TYPE {
        return ValidateResult::default();
    }
    sdk::tunnel::validation(Config::parse(&p.config).map(|c| {
        format!(
            "forwards {}:{} on {}@{}:{} to the webhook listener; public URL {}",
            if c.remote_bind.is_empty() {
                "*"
            } else {
                &c.remote_bind
            },
            c.remote_port,
            c.user,
            c.host,
            c.port,
            c.url
        )
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_config_becomes_ssh_arguments() {
        let c = Config::parse(&json!({
            "host": "tunnel.example.com", "user": "hooks", "remote_port": 9000,
            "url": "https://{host}:{remote_port}", "identity_file": "/k/id",
            "known_hosts": "/k/kh"
        }))
        .unwrap();
        assert_eq!(c.url, "https://tunnel.example.com:9000");
        let args = c.args("127.0.0.1:8080").join(" ");
        assert!(
            args.starts_with("-v -N -R 9000:127.0.0.1:8080 -o ExitOnForwardFailure=yes"),
            "{args}"
        );
        for part in [
            "BatchMode=yes",
            "ServerAliveInterval=15",
            "StrictHostKeyChecking=yes",
            "UserKnownHostsFile=/k/kh",
            "-i /k/id",
            "-p 22 hooks@tunnel.example.com",
        ] {
            assert!(args.contains(part), "{part} in {args}");
        }
    }

    #[test]
    fn validate_points_at_each_problem() {
        let p = ValidateParams {
            kind: validate_kind::TUNNEL.into(),
            type_name: "ssh".into(),
            config: json!({"host": "-oProxyCommand=x", "remote_port": 70000,
                           "url": "https://u:p@x.example", "known_hosts": "rel",
                           "strict_host_key_checking": "maybe", "bogus": 1}),
            ..ValidateParams::default()
        };
        let r = validate(&p);
        let paths: Vec<&str> = r.diagnostics.iter().map(|d| d.path.as_str()).collect();
        for want in [
            "/bogus",
            "/host",
            "/user",
            "/remote_port",
            "/url",
            "/known_hosts",
            "/strict_host_key_checking",
        ] {
            assert!(paths.contains(&want), "{want} in {paths:?}");
        }
        // A field of the wrong type is one problem, not another as missing.
        let typed = ValidateParams {
            config: json!({"host": "h", "user": "u", "remote_port": "9000", "url": "https://h"}),
            ..p.clone()
        };
        let d = validate(&typed).diagnostics;
        let got: Vec<(&str, &str)> = d
            .iter()
            .map(|d| (d.path.as_str(), d.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [("/remote_port", "must be a whole number from 0 to 65535")]
        );
        let ok = ValidateParams {
            config: json!({"host": "h", "user": "u", "remote_port": 9000, "url": "https://h"}),
            ..p.clone()
        };
        let r = validate(&ok);
        assert!(r.diagnostics.is_empty(), "{r:?}");
        assert_eq!(r.describe.len(), 1);
        // Another kind or type is not the provider's to check.
        let other = ValidateParams {
            type_name: "ngrok".into(),
            ..p
        };
        assert!(validate(&other).diagnostics.is_empty());
    }
}
