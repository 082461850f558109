//! `open-conduit doctor`: every health check with ok, warn or fail, and what to do
//! about a failure: the bus, each daemon, the store, the disk, the configuration, each
//! extension and the checks it declares, the webhooks, the tunnel.

use std::path::Path;
use std::time::Duration;

use busapi::ext::{ExtCall, RegistrationsRequest};
use busapi::ingress::RoutesRequest;
use busapi::store::{CheckRequest, ConfigCurrentRequest};
use protocol::wire::{CheckConfig, CheckRunParams};
use serde_json::{json, Value};

use crate::output::{call, call_method, count, paint, print_json, verdict, Failure, Out, Verdict};

/// How long an extension's check may take.
const CHECK_TIMEOUT_MS: u64 = 30_000;

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
    match call(bus, &CheckRequest {}) {
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
            out.push(if free < 256 * 1024 * 1024 || free * 20 < total {
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
    out.extend(crate::reach::public_url(bus));
    out
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
