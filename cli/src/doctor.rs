//! `open-conduit doctor`: every health check with ok, warn or fail, and what to do
//! about a failure: the bus, each daemon, the store, the disk, the configuration, each
//! extension and the checks it declares, the webhooks, the web view, the tunnel.

use std::path::Path;
use std::time::Duration;

use busapi::ext::{ExtCall, RegistrationsRequest};
use busapi::ingress::RoutesRequest;
use busapi::store::{CheckRequest, ConfigCurrentRequest};
use busapi::web::{StatusRequest as WebStatusRequest, DEFAULT_LISTEN, HEALTH_PATH};
use busapi::Call as _;
use protocol::wire::{CheckConfig, CheckRunParams};
use serde_json::{json, Value};

use crate::output::{call, call_method, count, paint, print_json, verdict, Failure, Out, Verdict};

/// How long an extension's check may take.
const CHECK_TIMEOUT_MS: u64 = 30_000;

/// How long each of the web view's checks (`web.status`, `GET /healthz`) may take.
pub const WEB_TIMEOUT: Duration = Duration::from_secs(2);

/// Every check `doctor` runs, in order.
pub fn diagnose(bus: &Path) -> Vec<Verdict> {
    let mut out = Vec::new();
    let broker = match call_method(bus, "bus.status", json!({})) {
        Ok(b) => {
            out.push(verdict(
                "bus",
                "ok",
                format!("the broker answers on {}", bus.display()),
                "",
            ));
            b
        }
        Err(e) => {
            out.push(verdict(
                "bus",
                "fail",
                e,
                "start the suite (`open-conduit up`, or `systemctl start open-conduit.target`), or point --bus at its socket",
            ));
            return out;
        }
    };
    for d in ["storaged", "extrunner", "schedulerd", "ingressd"] {
        if broker["services"][d].is_null() {
            out.push(verdict(
                d,
                "fail",
                format!("{d} is not on the bus"),
                &format!("look at its log (`open-conduit logs {d}`) and start it (`systemctl restart open-conduit-{d}`)"),
            ));
        } else {
            out.push(verdict(
                d,
                "ok",
                format!("pid {}", broker["services"][d]["pid"]),
                "",
            ));
        }
    }
    match call(bus, &CheckRequest::default()) {
        Ok(c) => {
            let integrity = c.integrity.as_str();
            let database = c.database.as_str();
            let postgres = database.starts_with("postgres ");
            out.push(if integrity == "ok" {
                verdict("store", "ok", format!("integrity ok ({database})"), "")
            } else if postgres {
                verdict(
                    "store",
                    "fail",
                    format!("{database}: {integrity}"),
                    "check the database's schema version and the role's rights on its tables",
                )
            } else {
                verdict(
                    "store",
                    "fail",
                    format!("SQLite quick_check: {integrity}"),
                    "stop the suite, back up the state directory, and restore the last good backup",
                )
            });
            let free = c.free_bytes;
            let total = c.total_bytes.max(1);
            let mib = free / (1024 * 1024);
            let detail = format!("{mib} MiB free in {}", c.dir);
            out.push(if let Some(full) = c.full() {
                verdict(
                    "disk",
                    "fail",
                    full,
                    "free space on that filesystem (deliveries are refused with 503 until then, and everything resumes by itself once there is room), or set storaged's retention (--max-event-age-days)",
                )
            } else if free < 256 * 1024 * 1024 || free * 20 < total {
                verdict(
                    "disk",
                    if free < 64 * 1024 * 1024 { "fail" } else { "warn" },
                    detail,
                    "free space on that filesystem, or set storaged's retention (--max-event-age-days)",
                )
            } else {
                verdict("disk", "ok", detail, "")
            });
        }
        Err(e) => out.push(verdict(
            "store",
            "fail",
            e,
            "see `open-conduit logs storaged`",
        )),
    }
    match call(bus, &ConfigCurrentRequest {}) {
        Ok(c) => match protocol::config::Config::parse(&c.config) {
            Ok(_) => out.push(verdict(
                "config",
                "ok",
                format!("generation {} is valid", c.generation),
                "",
            )),
            Err(p) => out.push(verdict(
                "config",
                "fail",
                p.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                "fix the file and `open-conduit config apply` it",
            )),
        },
        Err(e) => out.push(verdict(
            "config",
            "warn",
            e,
            "apply a configuration: `open-conduit config apply FILE`",
        )),
    }
    let regs = call(bus, &RegistrationsRequest {}).unwrap_or_default();
    for e in &regs.extensions {
        let name = e.name.as_str();
        if e.state != "running" {
            out.push(verdict(
                &format!("extension {name}"),
                "fail",
                format!("state {}", e.state),
                &format!("`open-conduit extension inspect {name}` says why; fix it and `open-conduit extension restart {name}`"),
            ));
            continue;
        }
        if let Some(r) = &e.refusal {
            out.push(verdict(
                &format!("extension {name}"),
                "fail",
                format!(
                    "refuses configuration generation {}: {}",
                    r.generation, r.error
                ),
                "fix the configuration (`open-conduit config check FILE` finds it offline) and apply it again",
            ));
            continue;
        }
        out.push(verdict(
            &format!("extension {name}"),
            "ok",
            "running".into(),
            "",
        ));
        for c in &e.checks {
            let check = c.name.as_str();
            let label = if check == name
                || check.starts_with(&format!("{name}_"))
                || check.starts_with(&format!("{name}-"))
            {
                check.to_owned()
            } else {
                format!("{name}_{check}")
            };
            let run = CheckRunParams {
                check: check.to_owned(),
                deep: false,
                config: CheckConfig::default(),
            };
            let r = call(bus, &ExtCall::new(name, run).timeout_ms(CHECK_TIMEOUT_MS));
            out.push(match r {
                Ok(r) => {
                    // Without a status (the short form), `ok` says.
                    let status: &'static str = match r.status.as_str() {
                        "ok" | "info" => "ok",
                        "fail" => "fail",
                        "" if r.ok == Some(true) => "ok",
                        _ => "warn",
                    };
                    verdict(
                        &label,
                        status,
                        r.detail,
                        "see the extension's documentation",
                    )
                }
                Err(e) => verdict(
                    &label,
                    "warn",
                    format!("the check failed to run: {e}"),
                    "see `open-conduit logs extrunner`",
                ),
            });
        }
    }
    match call(bus, &RoutesRequest {}) {
        Ok(r) => {
            let listen = r.listen;
            match listen.parse::<std::net::SocketAddr>() {
                Ok(addr) => {
                    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
                        Ok(_) => out.push(verdict(
                            "webhooks",
                            "ok",
                            format!("accepting on {listen}"),
                            "",
                        )),
                        Err(e) => out.push(verdict(
                            "webhooks",
                            "fail",
                            format!("{listen}: {e}"),
                            "check open-conduit-ingressd.socket's ListenStream and the firewall",
                        )),
                    }
                }
                Err(_) => out.push(verdict(
                    "webhooks",
                    "warn",
                    "ingressd does not say where it listens".into(),
                    "",
                )),
            }
        }
        Err(e) => out.push(verdict(
            "webhooks",
            "fail",
            e,
            "see `open-conduit logs ingressd`",
        )),
    }
    out.push(web(bus, &broker));
    out.extend(crate::reach::public_url(bus));
    out
}

/// The web view: webd's `web.status` when webd is on the bus, then its `/healthz`;
/// with no webd on the bus (under systemd it starts on its socket's first
/// connection), `/healthz` on the default address, which starts it.
fn web(bus: &Path, broker: &Value) -> Verdict {
    if broker["services"]["webd"].is_null() {
        let url = format!("http://{DEFAULT_LISTEN}/");
        return web_verdict(&url, false, health(&url));
    }
    let status = serde_json::to_value(WebStatusRequest {})
        .map_err(|e| e.to_string())
        .and_then(|p| crate::client::bus_call_within(bus, WebStatusRequest::METHOD, p, WEB_TIMEOUT))
        .and_then(crate::client::decode::<WebStatusRequest>);
    match status {
        Ok(s) => {
            let url = if s.url.is_empty() {
                format!("http://{}/", s.listen)
            } else {
                s.url
            };
            web_verdict(&url, true, health(&url))
        }
        Err(e) => verdict(
            "web",
            "fail",
            format!("webd is on the bus but does not answer web.status: {e}"),
            "see `open-conduit logs webd`",
        ),
    }
}

/// `GET <url>/healthz` within [`WEB_TIMEOUT`]: the status it answered.
fn health(url: &str) -> Result<u16, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(WEB_TIMEOUT))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .build()
        .into();
    let target = format!("{}{HEALTH_PATH}", url.trim_end_matches('/'));
    let answer = agent.get(&target).call().map_err(|e| e.to_string())?;
    Ok(answer.status().as_u16())
}

/// The web view's verdict: `url` as webd gave it (`on_bus`) or the default one,
/// and what its `/healthz` answered.
fn web_verdict(url: &str, on_bus: bool, got: Result<u16, String>) -> Verdict {
    let target = format!("{}{HEALTH_PATH}", url.trim_end_matches('/'));
    match (got, on_bus) {
        (Ok(200), _) => verdict("web", "ok", format!("serving {url}"), ""),
        (Ok(status), true) => verdict(
            "web",
            "warn",
            format!("{target} answered {status}"),
            "see `open-conduit logs webd`",
        ),
        (Err(e), true) => verdict(
            "web",
            "fail",
            format!("webd serves {url} by its own account, but {target}: {e}"),
            "see `open-conduit logs webd`, and the address in front of it",
        ),
        (got, false) => {
            let why = match got {
                Ok(status) => format!("{target} answered {status}"),
                Err(e) => format!("{target}: {e}"),
            };
            let addr = url
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned();
            verdict(
                "web",
                "warn",
                format!("the web view does not answer on {addr} ({why})"),
                "enable it: `sudo systemctl enable --now open-conduit-webd.socket` (under `open-conduit up`, it runs on --web-listen)",
            )
        }
    }
}

/// `doctor`: every check with ok, warn or fail, and what to do about each failure.
/// Exits 1 when any check fails.
pub fn doctor(bus: &Path, json_out: bool) -> Out {
    let verdicts = diagnose(bus);
    if json_out {
        let list: Vec<Value> = verdicts
            .iter()
            .map(|v| json!({"check": v.name, "status": v.status, "detail": v.detail, "fix": v.fix}))
            .collect();
        print_json(&json!(list));
    } else {
        for v in &verdicts {
            println!("{} {:<22} {}", paint(v.status, 4), v.name, v.detail);
            if v.status != "ok" && !v.fix.is_empty() {
                println!("     {:<22} → {}", "", v.fix);
            }
        }
    }
    let failed = verdicts.iter().filter(|v| v.status == "fail").count();
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure {
            message: format!("{} failed", count(failed, "check")),
            status: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A one-request HTTP server on loopback answering `status`: its URL and the
    /// request line it got.
    fn answering(status: u16) -> (String, std::thread::JoinHandle<String>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}/", l.local_addr().expect("its address"));
        let served = std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else {
                return String::new();
            };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            );
            String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        });
        (url, served)
    }

    #[test]
    fn nothing_answering_on_the_default_address_is_a_warning_with_the_fix() {
        // A port that was free a moment ago: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a loopback port")
            .port();
        let url = format!("http://127.0.0.1:{port}/");
        let v = web_verdict(&url, false, health(&url));
        assert_eq!(v.status, "warn", "{v:?}");
        assert!(
            v.detail.starts_with(&format!(
                "the web view does not answer on 127.0.0.1:{port} ("
            )),
            "{v:?}"
        );
        assert!(
            v.fix
                .contains("systemctl enable --now open-conduit-webd.socket"),
            "{v:?}"
        );
    }

    #[test]
    fn a_healthy_web_view_is_ok_and_anything_else_is_not() {
        let (url, served) = answering(200);
        let v = web_verdict(&url, false, health(&url));
        assert_eq!(served.join().expect("served"), "GET /healthz HTTP/1.1");
        assert_eq!(
            (v.status, v.detail.clone()),
            ("ok", format!("serving {url}"))
        );
        let (url, _) = answering(404);
        let v = web_verdict(&url, true, health(&url));
        assert_eq!(v.status, "warn", "{v:?}");
        assert!(v.detail.ends_with("/healthz answered 404"), "{v:?}");
        let (url, _) = answering(503);
        let v = web_verdict(&url, false, health(&url));
        assert_eq!(v.status, "warn", "{v:?}");
        assert!(v.detail.contains("does not answer on"), "{v:?}");
        let gone = web_verdict(
            "http://127.0.0.1:9/",
            true,
            Err("connection refused".into()),
        );
        assert_eq!(gone.status, "fail", "{gone:?}");
    }
}
