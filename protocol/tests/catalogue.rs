//! The method catalogue: its shape, and which methods each manifest enables.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use protocol::catalogue::{method, Direction, Surface, METHODS};
use protocol::manifest::{parse_manifest, Manifest, PERMISSIONS};
use serde_json::{json, Value};

fn example(file: &str) -> Manifest {
    let path = format!("{}/testdata/{file}", env!("CARGO_MANIFEST_DIR"));
    parse_manifest(&std::fs::read(path).unwrap()).unwrap()
}

fn manifest(v: Value) -> Manifest {
    parse_manifest(&serde_json::to_vec(&v).unwrap()).unwrap()
}

/// A valid manifest that declares every surface, and every permission when
/// `permissions` is true.
fn everything(permissions: bool) -> Value {
    let perms: Vec<&str> = if permissions {
        PERMISSIONS.to_vec()
    } else {
        vec![]
    };
    json!({
        "protocol": [1], "name": "all", "version": "1", "command": ["all"],
        "permissions": perms,
        "provides": {
            "families": [{"name": "all.thing", "re_derivable": true}],
            "connections": [{"type": "all"}],
            "extensions": [{"type": "all", "ingress": true, "families": ["all.thing"], "webhooks": true}],
            "routes": [{"handler": "all", "samples": true, "binding": true}],
            "work_kinds": [{"name": "all-job", "handler": "all", "trigger": true}],
            "recurrences": [{"name": "all.daily"}],
            "operations": [
                {"name": "all.do", "kind": "handler"},
                {"name": "all.await", "kind": "wait"},
                {"name": "all.emit", "kind": "emit", "commit": true}
            ],
            "targets": ["thing"],
            "dependency_filter": true,
            "executors": [{
                "name": "all",
                "labels": {"interrupt": true, "inject": true, "resume": true, "workspace": true, "toolbelt": "mcp"},
                "controls": ["stop", "forget", "attach", "container_attach", "live", "interactive_launch"]
            }],
            "resources": [{"type": "all-workspace", "modes": ["work"], "sweep": true}],
            "sandboxes": [{"type": "all-sandbox"}],
            "containers": [{"type": "all-container", "forward": true}],
            "tunnels": [{"type": "all-tunnel"}],
            "tasks": [{"name": "all.pass", "interval_s": 1}],
            "checks": [{"name": "all"}],
            "probes": [{"name": "status"}],
            "segment_end": true, "operation_gate": true, "start_gate": true,
            "config_candidate": true, "entry_named": true, "actions": true, "panels": true,
            "annotations": true, "run_environment": true, "exporter": true, "setup": true
        }
    })
}

fn minimal() -> Manifest {
    manifest(json!({"protocol": [1], "name": "tiny", "version": "1", "command": ["tiny"]}))
}

#[test]
fn names_are_unique() {
    let mut seen = BTreeSet::new();
    for m in METHODS {
        assert!(seen.insert(m.name), "{} is listed twice", m.name);
    }
}

#[test]
fn names_are_dotted_or_lifecycle_words() {
    for m in METHODS {
        assert!(
            m.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_'),
            "{}",
            m.name
        );
    }
}

#[test]
fn exactly_four_methods_run_in_a_transaction() {
    let in_tx: BTreeSet<&str> = METHODS
        .iter()
        .filter(|m| m.in_transaction)
        .map(|m| m.name)
        .collect();
    let want: BTreeSet<&str> = [
        "recurrence.next",
        "work_kind.trigger",
        "dependency.filter",
        "emit.commit",
    ]
    .into();
    assert_eq!(in_tx, want);
    for m in METHODS.iter().filter(|m| m.in_transaction) {
        assert_eq!(m.direction, Direction::HostToExtension, "{}", m.name);
        assert!(m.permission.is_none(), "{}", m.name);
    }
}

#[test]
fn every_method_names_a_shipped_user() {
    for m in METHODS {
        assert!(!m.users.trim().is_empty(), "{} has no user", m.name);
    }
}

#[test]
fn permissions_follow_the_permissions_table() {
    let gated: BTreeMap<&str, &str> = METHODS
        .iter()
        .filter_map(|m| m.permission.map(|p| (m.name, p)))
        .collect();
    let want: BTreeMap<&str, &str> = [
        ("telemetry.sink", "telemetry.sink"),
        ("telemetry.capture", "telemetry.capture"),
        ("probe.list", "probes"),
        ("probe.run", "probes"),
        ("config.base", "config.read"),
        ("config.edit", "config.read"),
        ("config.validate", "config.read"),
        ("config.trace", "config.read"),
        ("config.candidate", "config.read"),
        ("work.admit", "work.start_gate"),
        ("work.settle_hold", "work.start_gate"),
        ("operation.gate", "operation.gate"),
        ("action.submit", "action.submit"),
        ("action.list", "action.submit"),
    ]
    .into();
    assert_eq!(gated, want);
    for p in gated.values() {
        assert!(PERMISSIONS.contains(p), "{p} is not a known permission");
    }
    for p in PERMISSIONS {
        assert!(gated.values().any(|g| g == p), "{p} gates nothing");
    }
}

#[test]
fn directions_match_the_inventory() {
    for (name, dir) in [
        ("initialize", Direction::HostToExtension),
        ("ingress.deliver", Direction::ExtensionToHost),
        ("kv.commit", Direction::ExtensionToHost),
        ("state.events", Direction::ExtensionToHost),
        ("tunnel.url", Direction::ExtensionToHost),
        ("tunnel.run", Direction::HostToExtension),
        ("telemetry.sink", Direction::HostToExtension),
        ("telemetry.capture", Direction::ExtensionToHost),
        ("config.candidate", Direction::HostToExtension),
        ("probe.serve", Direction::HostToExtension),
        ("probe.run", Direction::ExtensionToHost),
        ("execution.persist_recovery", Direction::ExtensionToHost),
        ("provider.owner_status", Direction::ExtensionToHost),
        ("event.render_owned", Direction::ExtensionToHost),
    ] {
        assert_eq!(method(name).unwrap().direction, dir, "{name}");
    }
    assert!(method("no.such").is_none());
}

#[test]
fn every_method_is_reachable() {
    let all = manifest(everything(true));
    let enabled = all.enabled();
    for m in METHODS {
        assert!(enabled.contains(m.name), "{} is not reachable", m.name);
    }
}

#[test]
fn a_permission_gated_method_needs_its_permission() {
    let without = manifest(everything(false));
    for m in METHODS.iter().filter(|m| m.permission.is_some()) {
        assert!(
            !m.enabled_by(&without),
            "{} enabled without permission",
            m.name
        );
        let mut v = everything(false);
        v["permissions"] = json!([m.permission.unwrap()]);
        assert!(m.enabled_by(&manifest(v)), "{} not enabled with it", m.name);
    }
    // Every ungated method is still enabled without any permission.
    for m in METHODS.iter().filter(|m| m.permission.is_none()) {
        assert!(m.enabled_by(&without), "{}", m.name);
    }
}

#[test]
fn a_permission_alone_does_not_enable_a_surface_method() {
    let mut v = json!({"protocol": [1], "name": "tiny", "version": "1", "command": ["tiny"]});
    v["permissions"] = json!(PERMISSIONS);
    let m = manifest(v);
    let enabled = m.enabled();
    for name in [
        "telemetry.sink",
        "probe.run",
        "config.base",
        "action.submit",
        "work.settle_hold",
    ] {
        assert!(enabled.contains(name), "{name}");
    }
    for name in ["config.candidate", "work.admit", "operation.gate"] {
        assert!(
            !enabled.contains(name),
            "{name} needs its manifest declaration"
        );
    }
}

#[test]
fn a_manifest_with_no_surfaces_enables_only_the_always_on_set() {
    let enabled = minimal().enabled();
    let always: BTreeSet<&str> = METHODS
        .iter()
        .filter(|m| m.surface == Surface::Always && m.permission.is_none())
        .map(|m| m.name)
        .collect();
    assert_eq!(enabled, always);
    for name in [
        "initialize",
        "configure",
        "shutdown",
        "validate",
        "kv.get",
        "kv.list",
        "kv.commit",
        "state.work",
        "state.events",
        "state.sequence",
        "secret.resolve",
        "artifact.create",
        "artifact.commit",
    ] {
        assert!(enabled.contains(name), "{name}");
    }
    for name in [
        "route.match",
        "task.run",
        "check.run",
        "executor.run",
        "event.accept",
    ] {
        assert!(!enabled.contains(name), "{name}");
    }
}

fn has_prefix(enabled: &BTreeSet<&str>, prefixes: &[&str]) -> Vec<String> {
    enabled
        .iter()
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
        .map(|n| n.to_string())
        .collect()
}

const EXECUTION: &[&str] = &[
    "executor.",
    "execution.",
    "resource.",
    "provider.",
    "sandbox",
    "container",
    "event.render_owned",
];

#[test]
fn the_ingress_example_enables_ingress_and_no_execution() {
    let m = example("ingress-support.json");
    let enabled = m.enabled();
    for name in [
        "webhook.handle",
        "ingress.push",
        "ingress.reconcile",
        "ingress.deliver",
        "route.match",
        "route.samples",
        "operation.call",
        "event.render",
        "event.accept",
        "work.cancel",
        "task.run",
        "check.run",
        "telemetry.capture",
        "setup.run",
        "setup.prompt",
    ] {
        assert!(enabled.contains(name), "{name}");
    }
    assert_eq!(has_prefix(&enabled, EXECUTION), Vec::<String>::new());
    for name in [
        "operation.wait",
        "operation.emit",
        "emit.commit",
        "recurrence.next",
        "telemetry.sink",
        "tunnel.run",
    ] {
        assert!(!enabled.contains(name), "{name}");
    }
}

#[test]
fn the_executor_example_enables_its_controls_only() {
    let m = example("executor-workspace.json");
    let enabled = m.enabled();
    for name in [
        "executor.run",
        "executor.recover",
        "executor.wait",
        "executor.resume",
        "executor.inject",
        "executor.interrupt",
        "executor.stop",
        "executor.forget",
        "executor.attach",
        "execution.persist_recovery",
        "event.render_owned",
        "resource.acquire",
        "provider.acquire",
        "provider.lookup",
        "provider.reconcile",
        "provider.sweep",
        "provider.owner_status",
        "artifact.write",
        "probe.serve",
    ] {
        assert!(enabled.contains(name), "{name}");
    }
    for name in [
        "executor.live",
        "executor.container_attach",
        "executor.interactive_launch",
        "webhook.handle",
        "ingress.push",
        "route.match",
        "operation.call",
        "sandbox_provider.plan",
        "container_provider.plan",
        "probe.list",
    ] {
        assert!(!enabled.contains(name), "{name}");
    }
}

#[test]
fn the_reporting_example_enables_timers_triggers_and_commits() {
    let m = example("scheduled-reporting.json");
    let enabled = m.enabled();
    for name in [
        "recurrence.next",
        "timer.arm",
        "timer.cancel",
        "work_kind.trigger",
        "operation.emit",
        "emit.commit",
        "operation.wait",
        "wait.progress",
        "wait.target",
        "dependency.filter",
        "target.resolve",
        "route.match",
        "route.samples",
        "event.accept",
        "task.run",
    ] {
        assert!(enabled.contains(name), "{name}");
    }
    assert_eq!(has_prefix(&enabled, EXECUTION), Vec::<String>::new());
    for name in [
        "webhook.handle",
        "ingress.push",
        "operation.gate",
        "setup.run",
    ] {
        assert!(!enabled.contains(name), "{name}");
    }
    assert!(m.enables("emit.commit") && !m.enables("no.such"));
}

#[test]
fn an_emit_without_commit_enables_no_commit() {
    let mut v: Value = serde_json::from_slice(
        &std::fs::read(format!(
            "{}/testdata/scheduled-reporting.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    v["provides"]["operations"][0]["commit"] = json!(false);
    let m = manifest(v);
    assert!(m.enables("operation.emit"));
    assert!(!m.enables("emit.commit"));
}
