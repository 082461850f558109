//! `container_provider.create`, `inspect`, `list`, `signal`, `stop` and `remove` on
//! the engine. Fails closed: a create it cannot make is `sandbox_unavailable`; an
//! inspect or list it cannot answer is an error, never "gone" or empty.

use crate::config;
use crate::engine::{enc, Answer, Engine, EngineError, EXCHANGE_BOUND};
use protocol::container::{
    container_name, ContainerCreated, ContainerDone, ContainerInfo, ContainerList,
    ContainerProviderCreateParams, ContainerProviderInspectParams, ContainerProviderListParams,
    ContainerProviderRemoveParams, ContainerProviderSignalParams, ContainerProviderStopParams,
    LABEL_EXECUTION, LABEL_HOST, LABEL_WORK,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// The most containers `list` answers.
pub const MAX_LISTED: usize = 4096;
/// The longest `grace_s` a stop waits before SIGKILL.
pub const MAX_GRACE_S: u64 = 600;

fn unavailable(e: EngineError) -> RpcError {
    RpcError::new(Code::SandboxUnavailable, e.to_string())
}

fn check_type(t: &str) -> Result<(), RpcError> {
    if t == crate::CONTAINER_TYPE {
        Ok(())
    } else {
        Err(RpcError::new(
            Code::Unsupported,
            format!("no container type {t:?} here (this package has docker)"),
        ))
    }
}

/// The engine a binding's config names.
fn engine_of(t: &str, config: &Value) -> Result<Engine, RpcError> {
    check_type(t)?;
    let c = config::parse(config)
        .map_err(|e| RpcError::new(Code::Invalid, format!("the container config: {e}")))?;
    Ok(Engine::new(&c.socket))
}

/// A container reference (an engine ID or a name) as a path segment.
fn reference(container: &str) -> Result<String, RpcError> {
    if container.is_empty() || container.len() > 256 {
        return Err(RpcError::new(
            Code::Invalid,
            "a container is named by a non-empty ID or name within 256 bytes",
        ));
    }
    Ok(enc(container))
}

fn failed(what: &str, engine: &Engine, a: &Answer) -> RpcError {
    RpcError::new(
        Code::SandboxUnavailable,
        format!(
            "{what} on the engine at {}: {} {}",
            engine.socket,
            a.status,
            a.message()
        ),
    )
}

/// Answers `container_provider.create`: makes the pinned plan's container (not
/// started). Every bind source must exist (the engines would make a missing one);
/// the image must be on the engine (nothing is pulled). A second create for the
/// same execution finds the first.
pub async fn create(p: &ContainerProviderCreateParams) -> Result<ContainerCreated, RpcError> {
    check_type(&p.container_type)?;
    let name = container_name(&p.execution_id);
    if p.plan.name != name {
        return Err(RpcError::new(
            Code::SandboxDenied,
            format!(
                "the plan names the container {:?}, not {name:?}",
                p.plan.name
            ),
        ));
    }
    let socket = p.plan.data["socket"].as_str().unwrap_or_default();
    let body = &p.plan.data["create"];
    if socket.is_empty() || !body.is_object() {
        return Err(RpcError::new(
            Code::Invalid,
            "the plan's data has no socket and create body",
        ));
    }
    if body["Labels"][LABEL_EXECUTION] != json!(p.execution_id) {
        return Err(RpcError::new(
            Code::SandboxDenied,
            format!(
                "the plan's container is not labelled with {}",
                p.execution_id
            ),
        ));
    }
    let engine = Engine::new(socket);
    for bind in body["HostConfig"]["Binds"].as_array().into_iter().flatten() {
        let source = bind
            .as_str()
            .and_then(|b| b.split(':').next())
            .unwrap_or_default();
        if std::fs::symlink_metadata(source).is_err() {
            return Err(RpcError::new(
                Code::SandboxUnavailable,
                format!("the launch's need {source} does not exist on this host (the engine would make it empty)"),
            ));
        }
    }
    let body = &with_env(body, &p.env)?;
    let image = body["Image"].as_str().unwrap_or_default();
    let a = engine
        .call(
            "POST",
            &format!("/containers/create?name={}", enc(&name)),
            Some(body),
        )
        .await
        .map_err(unavailable)?;
    if a.ok() {
        return match a.json()["Id"].as_str() {
            Some(id) => Ok(ContainerCreated {
                container: id.to_owned(),
            }),
            None => Err(failed("create answered no Id", &engine, &a)),
        };
    }
    if a.status == 404 {
        return Err(RpcError::new(
            Code::SandboxUnavailable,
            format!(
                "the image {image} is not on the engine at {} ({}); pull or build it there (nothing is pulled)",
                engine.socket,
                a.message()
            ),
        ));
    }
    // In use: Docker answers 409, podman 500 ("… is already in use by …").
    if a.status == 409 || a.message().contains("already in use") {
        let info = inspect_on(&engine, &name).await?;
        if info.state != "gone" && info.execution_id == p.execution_id {
            return Ok(ContainerCreated { container: info.id });
        }
        return Err(RpcError::new(
            Code::SandboxUnavailable,
            format!(
                "the name {name} is taken on the engine at {} by a container of another execution ({:?})",
                engine.socket, info.execution_id
            ),
        ));
    }
    Err(failed(&format!("create {name}"), &engine, &a))
}

/// The create body with the launch's environment: the plan names each variable
/// (`NAME=`, its value left out of the pinned plan); create brings the values. A
/// variable the plan does not name is refused.
pub fn with_env(body: &Value, env: &BTreeMap<String, String>) -> Result<Value, RpcError> {
    let names: Vec<&str> = body["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|e| e.split_once('=').map_or(e, |(k, _)| k))
        .collect();
    if let Some(extra) = env.keys().find(|k| !names.contains(&k.as_str())) {
        return Err(RpcError::new(
            Code::Invalid,
            format!("the environment variable {extra} is not in the pinned plan"),
        ));
    }
    let mut body = body.clone();
    body["Env"] = json!(names
        .iter()
        .map(|k| format!(
            "{k}={}",
            env.get(*k).map(String::as_str).unwrap_or_default()
        ))
        .collect::<Vec<_>>());
    Ok(body)
}

fn labels(v: &Value) -> (String, String, String) {
    let get = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    (get(LABEL_EXECUTION), get(LABEL_WORK), get(LABEL_HOST))
}

/// The inspect of `container` on `engine` (state `gone` on 404).
pub async fn inspect_on(engine: &Engine, container: &str) -> Result<ContainerInfo, RpcError> {
    let a = engine
        .call(
            "GET",
            &format!("/containers/{}/json", reference(container)?),
            None,
        )
        .await
        .map_err(unavailable)?;
    if a.status == 404 {
        return Ok(ContainerInfo {
            id: container.to_owned(),
            state: "gone".into(),
            ..ContainerInfo::default()
        });
    }
    if !a.ok() {
        return Err(failed(&format!("inspect {container}"), engine, &a));
    }
    let v = a.json();
    let Some(id) = v["Id"].as_str() else {
        return Err(failed(&format!("inspect {container} (no Id)"), engine, &a));
    };
    let state = &v["State"];
    let status = state["Status"].as_str().unwrap_or("unknown").to_owned();
    let (execution_id, work_id, host) = labels(&v["Config"]["Labels"]);
    Ok(ContainerInfo {
        id: id.to_owned(),
        name: v["Name"]
            .as_str()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_owned(),
        exit_code: (status == "exited")
            .then(|| state["ExitCode"].as_i64())
            .flatten(),
        pid: if status == "running" {
            state["Pid"].as_i64().unwrap_or(0)
        } else {
            0
        },
        state: status,
        execution_id,
        work_id,
        host,
    })
}

/// Answers `container_provider.inspect`.
pub async fn inspect(p: &ContainerProviderInspectParams) -> Result<ContainerInfo, RpcError> {
    let engine = engine_of(&p.container_type, &p.config)?;
    inspect_on(&engine, &p.container).await
}

/// The exit status in a listing's `Status` ("Exited (3) 5 seconds ago").
fn listed_exit(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split(')').next()?.parse().ok()
}

/// Answers `container_provider.list`: every container labelled with the host.
pub async fn list(p: &ContainerProviderListParams) -> Result<ContainerList, RpcError> {
    let engine = engine_of(&p.container_type, &p.config)?;
    if p.host.is_empty() {
        return Err(RpcError::new(Code::Invalid, "list needs the host's label"));
    }
    let filters = json!({"label": [format!("{LABEL_HOST}={}", p.host)]}).to_string();
    let a = engine
        .call(
            "GET",
            &format!("/containers/json?all=true&filters={}", enc(&filters)),
            None,
        )
        .await
        .map_err(unavailable)?;
    if !a.ok() {
        return Err(failed("list", &engine, &a));
    }
    let Value::Array(items) = a.json() else {
        return Err(failed("list (not a JSON array)", &engine, &a));
    };
    if items.len() > MAX_LISTED {
        return Err(RpcError::new(
            Code::ResourceExhausted,
            format!(
                "the engine at {} lists {} containers of host {}, over the limit of {MAX_LISTED}",
                engine.socket,
                items.len(),
                p.host
            ),
        ));
    }
    let mut containers = Vec::new();
    for c in items {
        let Some(id) = c["Id"].as_str() else { continue };
        let (execution_id, work_id, host) = labels(&c["Labels"]);
        // The filter is the engine's; keep to it here too.
        if host != p.host {
            continue;
        }
        let state = c["State"].as_str().unwrap_or("unknown").to_owned();
        containers.push(ContainerInfo {
            id: id.to_owned(),
            name: c["Names"][0]
                .as_str()
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_owned(),
            exit_code: (state == "exited")
                .then(|| listed_exit(c["Status"].as_str().unwrap_or_default()))
                .flatten(),
            state,
            execution_id,
            work_id,
            host,
            pid: 0,
        });
    }
    Ok(ContainerList { containers })
}

/// One action on a container: found, gone (404), or an error.
async fn act(
    engine: &Engine,
    method: &str,
    path: String,
    what: &str,
    bound: Duration,
) -> Result<ContainerDone, RpcError> {
    let a = engine
        .call_within(method, &path, None, bound)
        .await
        .map_err(unavailable)?;
    match a.status {
        404 => Ok(ContainerDone { found: false }),
        // 304: already stopped (stop); 409: not running (kill).
        s if (200..300).contains(&s) || s == 304 || s == 409 => Ok(ContainerDone { found: true }),
        _ => Err(failed(what, engine, &a)),
    }
}

/// A signal name the engines take: `SIG` and capitals.
fn signal_name(s: &str) -> Result<String, RpcError> {
    let name = if s.starts_with("SIG") {
        s.to_owned()
    } else {
        format!("SIG{s}")
    };
    if name.len() > 12
        || !name[3..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        return Err(RpcError::new(
            Code::Invalid,
            format!("{s:?} is not a signal's name (SIGTERM, SIGINT, SIGKILL)"),
        ));
    }
    Ok(name)
}

/// Answers `container_provider.signal`.
pub async fn signal(p: &ContainerProviderSignalParams) -> Result<ContainerDone, RpcError> {
    let engine = engine_of(&p.container_type, &p.config)?;
    let sig = signal_name(&p.signal)?;
    act(
        &engine,
        "POST",
        format!("/containers/{}/kill?signal={sig}", reference(&p.container)?),
        &format!("{sig} to {}", p.container),
        EXCHANGE_BOUND,
    )
    .await
}

/// Answers `container_provider.stop`: SIGTERM, SIGKILL after `grace_s`.
pub async fn stop(p: &ContainerProviderStopParams) -> Result<ContainerDone, RpcError> {
    let engine = engine_of(&p.container_type, &p.config)?;
    if p.grace_s > MAX_GRACE_S {
        return Err(RpcError::new(
            Code::Invalid,
            format!("grace_s {} is over the limit of {MAX_GRACE_S}", p.grace_s),
        ));
    }
    act(
        &engine,
        "POST",
        format!(
            "/containers/{}/stop?t={}",
            reference(&p.container)?,
            p.grace_s
        ),
        &format!("stop {}", p.container),
        EXCHANGE_BOUND + Duration::from_secs(p.grace_s),
    )
    .await
}

/// Answers `container_provider.remove` (running or not, with its anonymous
/// volumes).
pub async fn remove(p: &ContainerProviderRemoveParams) -> Result<ContainerDone, RpcError> {
    let engine = engine_of(&p.container_type, &p.config)?;
    act(
        &engine,
        "DELETE",
        format!("/containers/{}?force=true&v=true", reference(&p.container)?),
        &format!("remove {}", p.container),
        EXCHANGE_BOUND,
    )
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn signal_names_and_listed_exits_read() {
        assert_eq!(signal_name("TERM").unwrap(), "SIGTERM");
        assert_eq!(signal_name("SIGKILL").unwrap(), "SIGKILL");
        assert!(signal_name("SIGTERM&x=1").is_err());
        assert_eq!(listed_exit("Exited (3) 5 seconds ago"), Some(3));
        assert_eq!(listed_exit("Up 5 seconds"), None);
    }

    #[test]
    fn create_brings_the_values_of_the_variables_the_plan_names() {
        let body = json!({"Image": "localhost/x", "Env": ["A=", "B="]});
        let env = BTreeMap::from([("A".to_owned(), "secret".to_owned())]);
        assert_eq!(
            with_env(&body, &env).unwrap()["Env"],
            json!(["A=secret", "B="])
        );
        let extra = BTreeMap::from([("C".to_owned(), "x".to_owned())]);
        assert_eq!(
            with_env(&body, &extra).unwrap_err().app_code(),
            Some("invalid")
        );
    }

    #[test]
    fn an_unreachable_engine_is_sandbox_unavailable_naming_the_socket() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let p = ContainerProviderListParams {
            container_type: "docker".into(),
            config: json!({"image": "localhost/x", "socket": "/nonexistent/oc-docker.sock"}),
            host: "h".into(),
        };
        let e = rt.block_on(list(&p)).unwrap_err();
        assert_eq!(e.app_code(), Some("sandbox_unavailable"), "{e}");
        assert!(e.message.contains("/nonexistent/oc-docker.sock"), "{e}");
    }
}
