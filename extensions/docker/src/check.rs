//! The doctor check `engine` (`check.run`): for each binding with a docker
//! container, is its engine there (`/_ping`, `/version`) and its image on it? A
//! failure names the socket or the image. Without such a binding it probes the
//! default socket and a failure only warns.

use crate::config::{self, DEFAULT_SOCKET};
use crate::engine::Engine;
use protocol::wire::{CheckRunParams, CheckRunResult, ResourceBinding};
use serde_json::Value;
use std::time::Duration;

/// The check's name (doctor lists it as `docker_engine`).
pub const CHECK: &str = "engine";
/// The longest one request of the check may take: doctor waits 30 s for a whole
/// `check.run`.
pub const PROBE_BOUND: Duration = Duration::from_secs(5);
/// The most (socket, image) pairs probed.
pub const MAX_PROBES: usize = 8;

/// One probe's failure: a stable code and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `engine_unavailable` or `image_missing`.
    pub code: &'static str,
    /// Why.
    pub reason: String,
}

/// Probes the engine at `socket` and, when given, `image` on it.
pub async fn probe(socket: &str, image: Option<&str>) -> Result<String, Failure> {
    let engine = Engine::new(socket);
    let down = |why: String| Failure {
        code: "engine_unavailable",
        reason: why,
    };
    let ping = engine
        .call_within("GET", "/_ping", None, PROBE_BOUND)
        .await
        .map_err(|e| down(e.to_string()))?;
    if !ping.ok() {
        return Err(down(format!(
            "the engine at {socket} is unavailable: /_ping answered {} {}",
            ping.status,
            ping.message()
        )));
    }
    let version = engine
        .call_within("GET", "/version", None, PROBE_BOUND)
        .await
        .map_err(|e| down(e.to_string()))?;
    if !version.ok() {
        return Err(down(format!(
            "the engine at {socket} is unavailable: /version answered {} {}",
            version.status,
            version.message()
        )));
    }
    let v = version.json();
    let what = format!(
        "the engine at {socket} answers ({} {}, API {})",
        v["Components"][0]["Name"].as_str().unwrap_or("engine"),
        v["Version"].as_str().unwrap_or("?"),
        v["ApiVersion"].as_str().unwrap_or("?"),
    );
    let Some(image) = image else {
        return Ok(what);
    };
    let a = engine
        .call_within("GET", &format!("/images/{image}/json"), None, PROBE_BOUND)
        .await
        .map_err(|e| down(e.to_string()))?;
    match a.status {
        200 => Ok(format!("{what} and has the image {image}")),
        404 => Err(Failure {
            code: "image_missing",
            reason: format!(
                "the image {image} is not on the engine at {socket} (nothing is pulled: pull or build it there)"
            ),
        }),
        s => Err(down(format!(
            "the engine at {socket} is unavailable: the image {image}: {s} {}",
            a.message()
        ))),
    }
}

/// `check.run`: probes each binding's engine and image.
pub async fn check(p: &CheckRunParams) -> CheckRunResult {
    if p.check != CHECK {
        return CheckRunResult {
            status: "warn".into(),
            code: "unknown_check".into(),
            detail: format!("no check named {:?} (this package has `{CHECK}`)", p.check),
            ..CheckRunResult::default()
        };
    }
    let mut probes: Vec<(String, Option<String>)> = Vec::new();
    let mut invalid = Vec::new();
    for scope in &p.config.scopes {
        for b in &scope.bindings {
            let Some(container) = &b.container else {
                continue;
            };
            let Ok(container) = serde_json::from_value::<ResourceBinding>(container.clone()) else {
                continue;
            };
            if container.resource_type != crate::CONTAINER_TYPE {
                continue;
            }
            match config::parse(&container.config) {
                Ok(c) => {
                    let pair = (c.socket, Some(c.image));
                    if !probes.contains(&pair) {
                        probes.push(pair);
                    }
                }
                Err(e) => invalid.push(format!("{}.{}: {e}", scope.id, b.name)),
            }
        }
    }
    let used = !probes.is_empty() || !invalid.is_empty();
    if probes.is_empty() && invalid.is_empty() {
        probes.push((DEFAULT_SOCKET.to_owned(), None));
    }
    let mut items = Vec::new();
    if probes.len() > MAX_PROBES {
        items.push(format!(
            "{} more engines and images not probed (the limit is {MAX_PROBES})",
            probes.len() - MAX_PROBES
        ));
        probes.truncate(MAX_PROBES);
    }
    let mut first: Option<Failure> = None;
    for (socket, image) in &probes {
        match probe(socket, image.as_deref()).await {
            Ok(what) => items.push(what),
            Err(f) => {
                items.push(f.reason.clone());
                first.get_or_insert(f);
            }
        }
    }
    items.extend(
        invalid
            .iter()
            .map(|i| format!("invalid container config {i}")),
    );
    let (status, code, detail) = match (first, invalid.is_empty()) {
        (Some(f), _) if used => ("fail", f.code.to_owned(), f.reason),
        (Some(f), _) => (
            "warn",
            f.code.to_owned(),
            format!("no binding uses a docker container, but: {}", f.reason),
        ),
        (None, false) => (
            "fail",
            "invalid_config".to_owned(),
            format!("{} binding container configs do not read", invalid.len()),
        ),
        (None, true) => (
            "ok",
            String::new(),
            if used {
                "the engines answer and have the bindings' images".to_owned()
            } else {
                "no binding uses a docker container; the default engine answers".to_owned()
            },
        ),
    };
    CheckRunResult {
        ok: Some(status == "ok"),
        status: status.into(),
        code,
        detail,
        items,
    }
}

/// A binding's `container` value of type docker (for tests and callers).
pub fn container(config: Value) -> Value {
    serde_json::json!({"type": crate::CONTAINER_TYPE, "config": config})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{Binding, CheckConfig, CheckScope};
    use serde_json::json;

    #[test]
    fn a_missing_engine_fails_naming_the_socket() {
        let p = CheckRunParams {
            check: CHECK.into(),
            deep: false,
            config: CheckConfig {
                scopes: vec![CheckScope {
                    id: "demo".into(),
                    bindings: vec![Binding {
                        name: "run".into(),
                        executor: "shell".into(),
                        container: Some(container(
                            json!({"image": "localhost/x", "socket": "/nonexistent/oc.sock"}),
                        )),
                        ..Binding::default()
                    }],
                    ..CheckScope::default()
                }],
                ..CheckConfig::default()
            },
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(check(&p));
        assert_eq!(
            (r.status.as_str(), r.code.as_str()),
            ("fail", "engine_unavailable"),
            "{r:?}"
        );
        assert!(r.detail.contains("/nonexistent/oc.sock"), "{r:?}");
        let other = CheckRunParams {
            check: "nope".into(),
            ..p
        };
        assert_eq!(rt.block_on(check(&other)).code, "unknown_check");
    }
}
