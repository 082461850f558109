//! `status`: the daemons (with each one's last `STATUS=` line), the extensions, Work
//! by state, the hosts sharing the store, the public URL and the webhook paths.

use std::path::Path;

use busapi::ext::ListRequest;
use busapi::ingress::RoutesRequest;
use busapi::sched::StatusRequest as SchedStatusRequest;
use busapi::store::{CheckRequest, HostsRequest, TunnelGetRequest, WorksRequest};
use serde_json::{json, Value};

use crate::output::{call, call_json, call_method, decode, print_json, Failure, Out};

/// A daemon's last `STATUS=` line: under `up`, the file it keeps beside the bus
/// socket; under systemd, the unit's `StatusText`.
fn last_status(bus: &Path, daemon: &str) -> Option<String> {
    if let Some(run) = bus.parent() {
        if let Ok(t) = std::fs::read_to_string(run.join(format!("{daemon}.status"))) {
            return Some(t.trim().to_owned()).filter(|t| !t.is_empty());
        }
    }
    let out = std::process::Command::new("systemctl")
        .args(["show", "-p", "StatusText", "--value"])
        .arg(format!("open-conduit-{daemon}.service"))
        .output()
        .ok()?;
    let t = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !t.is_empty()).then_some(t)
}

/// `status`: the daemons, the extensions, Work by state, where webhooks are accepted.
/// Exits 3 when a daemon or an extension is down.
pub fn status(bus: &Path, json_out: bool) -> Out {
    let broker = call_method(bus, "bus.status", json!({}))?;
    let services = &broker["services"];
    let mut down = Vec::new();
    // `--json` shows these as extrunner and schedulerd wrote them.
    let ext = call_json(bus, &ListRequest {}).unwrap_or(Value::Null);
    let sched = call_json(bus, &SchedStatusRequest {}).unwrap_or(Value::Null);
    let extensions = decode::<ListRequest>(ext.clone())
        .map(|l| l.extensions)
        .unwrap_or_default();
    let routes = call(bus, &RoutesRequest {}).ok().map(|r| r.routes);
    let tunnel = call(bus, &TunnelGetRequest {}).ok().and_then(|t| t.tunnel);
    // The hosts sharing the store (one, unless several run one suite on PostgreSQL).
    let hosts = call(
        bus,
        &HostsRequest {
            after: String::new(),
            limit: 100,
        },
    )
    .ok()
    .map(|h| h.hosts);
    // The room left in the state directory (no integrity check: that is doctor's).
    let space = call(bus, &CheckRequest { space_only: true }).ok();
    let mut counts = serde_json::Map::new();
    for state in [
        "pending",
        "running",
        "waiting",
        "woken",
        "idle",
        "completed",
        "failed",
    ] {
        let works = call(
            bus,
            &WorksRequest {
                state: Some(state.to_owned()),
                limit: 1000,
                ..WorksRequest::default()
            },
        );
        let n = works.map_or(0, |w| w.works.len());
        counts.insert(state.to_owned(), json!(n));
    }
    for d in ["storaged", "extrunner", "schedulerd", "ingressd"] {
        if services[d].is_null() {
            down.push(d.to_owned());
        }
    }
    for e in &extensions {
        if e.state != "running" {
            down.push(format!("extension {}", e.name));
        } else if e.refusal.is_some() {
            down.push(format!("extension {} refuses the configuration", e.name));
        }
    }
    let full = space.as_ref().and_then(busapi::store::CheckResponse::full);
    if let Some(full) = &full {
        down.push(full.clone());
    }
    if json_out {
        let disk = space.as_ref().map(|c| {
            json!({"dir": c.dir, "free_bytes": c.free_bytes, "total_bytes": c.total_bytes,
                   "full": full.is_some()})
        });
        print_json(
            &json!({"services": services, "extensions": ext["extensions"],
                           "router": sched["router"], "work": counts,
                           "routes": routes, "tunnel": tunnel, "hosts": hosts,
                           "disk": disk, "down": down}),
        );
    } else {
        println!("daemons:");
        let mut daemons = vec!["broker", "storaged", "extrunner", "schedulerd", "ingressd"];
        if !services["tunneld"].is_null() {
            daemons.push("tunneld");
        }
        for d in daemons {
            let s = &services[d];
            if d == "broker" {
                let status = last_status(bus, d)
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default();
                println!(
                    "  {d:<11} up, pid {}, {:.0} s{status}",
                    broker["pid"],
                    broker["uptime_s"].as_f64().unwrap_or(0.0)
                );
            } else if s.is_null() {
                println!("  {d:<11} DOWN");
            } else {
                let status = last_status(bus, d)
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default();
                println!(
                    "  {d:<11} up, pid {}, {:.0} s{status}",
                    s["pid"],
                    s["uptime_s"].as_f64().unwrap_or(0.0)
                );
            }
        }
        println!("extensions:");
        for e in &extensions {
            println!(
                "  {:<11} {} {} (restarts {}){}",
                e.name,
                e.version,
                e.state,
                e.restarts,
                e.refusal
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        let counts: Vec<String> = counts
            .iter()
            .filter(|(_, n)| n.as_u64() != Some(0))
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        if let Some(c) = &space {
            match &full {
                Some(full) => println!("disk: {}", paint_full(full)),
                None => println!(
                    "disk: {} MiB free of {} MiB in {}",
                    c.free_bytes / (1024 * 1024),
                    c.total_bytes / (1024 * 1024),
                    c.dir
                ),
            }
        }
        println!(
            "work: {}",
            if counts.is_empty() {
                "none".to_owned()
            } else {
                counts.join(", ")
            }
        );
        let hosts = hosts.unwrap_or_default();
        if hosts.len() > 1 {
            println!("hosts (sharing the database):");
            for h in &hosts {
                let alive = if h.alive {
                    "alive".to_owned()
                } else {
                    format!(
                        "GONE since {}",
                        protocol::time::format_rfc3339_ms(h.expires_ms)
                    )
                };
                println!("  {} {} {alive}, {} running", h.id, h.name, h.running);
            }
        }
        println!("webhooks:");
        if let Some(tunnel) = &tunnel {
            let url = &tunnel.url;
            if url.is_empty() {
                let reason = &tunnel.reason;
                println!(
                    "  public URL: none (the {} tunnel is down{})",
                    tunnel.provider,
                    if reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {reason}")
                    }
                );
            } else {
                println!("  public URL: {url} (the {} tunnel)", tunnel.provider);
            }
        }
        for r in routes.iter().flatten() {
            println!("  {} ({})", r.path, r.owner);
        }
    }
    if down.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            message: format!("down: {}", down.join(", ")),
            status: 3,
        })
    }
}

/// A full disk, said so that it stands out: deliveries are refused until space is
/// freed.
fn paint_full(full: &str) -> String {
    format!("{full} (deliveries are refused with 503 until space is freed)")
}
