//! `container_provider.plan`: the Docker create body of a launch and the attach
//! client's argv. Pure: no engine is asked.

use crate::config::{self, DockerConfig};
use protocol::container::{
    container_name, ContainerPlan, ContainerProviderPlanParams, LABEL_EXECUTION, LABEL_HOST,
    LABEL_WORK,
};
use protocol::sandbox::{SandboxLaunch, SandboxNeeds};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Component, Path};

/// The attach client's first argument (`EXE __docker-attach --socket S --container N`).
pub const ATTACH_ARG: &str = "__docker-attach";
/// The tmpfs at `/tmp` of a read-only root.
pub const TMPFS_OPTIONS: &str = "rw,nosuid,nodev,size=256m";
/// The PATH the attach client runs with.
pub const ATTACH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn denied(why: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxDenied, why)
}

/// A need's path: absolute, not `/`, plain (no `.`, `..` or `:`, which a bind spec
/// cannot carry).
fn need_path(p: &str) -> Result<&Path, RpcError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(denied(format!("the need {p:?} is not an absolute path")));
    }
    if path.components().all(|c| c == Component::RootDir) {
        return Err(denied(format!(
            "the need {p:?} is the whole file system: a container mounts only what a launch needs"
        )));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
        || p.contains([':', ',', '\0', '\n'])
    {
        return Err(denied(format!(
            "the need {p:?} must be a plain absolute path (no . or .. parts, no : or ,)"
        )));
    }
    Ok(path)
}

/// The binds of `needs`: each write path `P:P:rw`, each read path `P:P:ro`. A need
/// that is relative, `/`, or around a denied path (which it would re-open) is
/// refused. A need inside a denied path is mounted: the host allows only the run's
/// own folders there (its run folder, its Work's workspace under the state
/// directory), and a container sees nothing of the host but its needs, so a
/// denial needs no mount of its own.
pub fn binds(needs: &SandboxNeeds) -> Result<Vec<String>, RpcError> {
    let deny: Vec<&Path> = needs.deny.iter().map(Path::new).collect();
    let mut out = Vec::new();
    for (paths, mode) in [(&needs.write, "rw"), (&needs.read, "ro")] {
        for p in paths {
            let path = need_path(p)?;
            if let Some(d) = deny.iter().find(|d| d.starts_with(path)) {
                return Err(denied(format!(
                    "the need {p} contains the denied path {}",
                    d.display()
                )));
            }
            let clean = path.display().to_string();
            let bind = format!("{clean}:{clean}:{mode}");
            if !out.contains(&bind) {
                out.push(bind);
            }
        }
    }
    Ok(out)
}

/// The Docker create body of `launch` under `config`.
pub fn create_body(
    config: &DockerConfig,
    execution_id: &str,
    work_id: &str,
    host: &str,
    launch: &SandboxLaunch,
    needs: &SandboxNeeds,
) -> Result<Value, RpcError> {
    if launch.argv.is_empty() {
        return Err(RpcError::new(Code::Invalid, "the launch has no argv"));
    }
    if !launch.cwd.starts_with('/') {
        return Err(RpcError::new(
            Code::Invalid,
            format!("the launch's cwd {:?} is not absolute", launch.cwd),
        ));
    }
    let binds = binds(needs)?;
    // The variables' names only: their values come with create, never into the
    // pinned plan.
    let env: Vec<String> = launch.env.keys().map(|k| format!("{k}=")).collect();
    let mut host_config = json!({
        "Binds": binds,
        "NetworkMode": config.network,
        "Privileged": false,
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],
        "Init": true,
        "PidsLimit": config.max_processes,
        "ReadonlyRootfs": config.read_only_root,
    });
    if let Some(mb) = config.memory_mb {
        host_config["Memory"] = json!(mb * 1024 * 1024);
    }
    // A private /tmp on a read-only root, unless a need is /tmp itself.
    let tmp_needed = needs
        .write
        .iter()
        .chain(&needs.read)
        .any(|p| Path::new(p).components().eq(Path::new("/tmp").components()));
    if config.read_only_root && !tmp_needed {
        host_config["Tmpfs"] = json!({ "/tmp": TMPFS_OPTIONS });
    }
    Ok(json!({
        "Image": config.image,
        "Cmd": launch.argv,
        "Env": env,
        "WorkingDir": launch.cwd,
        "User": config.user(),
        "Labels": {
            LABEL_EXECUTION: execution_id,
            LABEL_WORK: work_id,
            LABEL_HOST: host,
        },
        "OpenStdin": true,
        "StdinOnce": true,
        "AttachStdin": true,
        "AttachStdout": true,
        "AttachStderr": true,
        "Tty": false,
        "HostConfig": host_config,
    }))
}

/// The attach client's argv: this program as `__docker-attach`.
pub fn attach_argv(socket: &str, name: &str) -> Result<Vec<String>, RpcError> {
    let exe = std::env::current_exe().map_err(|e| {
        RpcError::new(
            Code::SandboxUnavailable,
            format!("cannot name this program for the attach client: {e}"),
        )
    })?;
    Ok(vec![
        exe.display().to_string(),
        ATTACH_ARG.into(),
        "--socket".into(),
        socket.into(),
        "--container".into(),
        name.into(),
    ])
}

/// Answers `container_provider.plan`.
pub fn plan(p: &ContainerProviderPlanParams) -> Result<ContainerPlan, RpcError> {
    if p.container_type != crate::CONTAINER_TYPE {
        return Err(RpcError::new(
            Code::Unsupported,
            format!(
                "no container type {:?} here (this package has docker)",
                p.container_type
            ),
        ));
    }
    let config = config::parse(&p.config)
        .map_err(|e| RpcError::new(Code::Invalid, format!("the container config: {e}")))?;
    let name = container_name(&p.execution_id);
    let body = create_body(
        &config,
        &p.execution_id,
        &p.work_id,
        &p.host,
        &p.launch,
        &p.needs,
    )?;
    Ok(ContainerPlan {
        argv: attach_argv(&config.socket, &name)?,
        name,
        cwd: "/".into(),
        env: BTreeMap::from([("PATH".to_owned(), ATTACH_PATH.to_owned())]),
        data: json!({"socket": config.socket, "create": body}),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn params() -> ContainerProviderPlanParams {
        ContainerProviderPlanParams {
            container_type: "docker".into(),
            config: json!({"image": "localhost/oc-debian:test", "memory_mb": 256, "user": "1000:1000"}),
            execution_id: "exe-1".into(),
            work_id: "work-1".into(),
            host: "host-a".into(),
            launch: SandboxLaunch {
                argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
                cwd: "/srv/work/ws".into(),
                env: BTreeMap::from([("A".into(), "1".into())]),
            },
            needs: SandboxNeeds {
                write: vec!["/srv/work/ws".into(), "/srv/work/tmp".into()],
                read: vec!["/srv/tools".into()],
                deny: vec!["/srv/state".into()],
                hosts: vec![],
            },
        }
    }

    #[test]
    fn the_create_body_mounts_the_needs_only_and_drops_every_privilege() {
        let plan = plan(&params()).unwrap();
        assert_eq!(plan.name, "oc-exe-1");
        assert_eq!(plan.cwd, "/");
        assert_eq!(
            plan.argv[1..],
            [
                "__docker-attach",
                "--socket",
                "/var/run/docker.sock",
                "--container",
                "oc-exe-1"
            ]
        );
        assert_eq!(plan.data["socket"], "/var/run/docker.sock");
        let b = &plan.data["create"];
        assert_eq!(b["Image"], "localhost/oc-debian:test");
        assert_eq!(b["Cmd"], json!(["sh", "-c", "echo hi"]));
        // Names only: the values come with create.
        assert_eq!(b["Env"], json!(["A="]));
        assert_eq!(b["WorkingDir"], "/srv/work/ws");
        assert_eq!(b["User"], "1000:1000");
        assert_eq!(
            b["Labels"],
            json!({"open-conduit.execution": "exe-1", "open-conduit.work": "work-1", "open-conduit.host": "host-a"})
        );
        for k in [
            "OpenStdin",
            "StdinOnce",
            "AttachStdin",
            "AttachStdout",
            "AttachStderr",
        ] {
            assert_eq!(b[k], true, "{k}");
        }
        let h = &b["HostConfig"];
        assert_eq!(
            h["Binds"],
            json!([
                "/srv/work/ws:/srv/work/ws:rw",
                "/srv/work/tmp:/srv/work/tmp:rw",
                "/srv/tools:/srv/tools:ro"
            ])
        );
        assert_eq!(h["NetworkMode"], "none");
        assert_eq!(h["Privileged"], false);
        assert_eq!(h["CapDrop"], json!(["ALL"]));
        assert_eq!(h["SecurityOpt"], json!(["no-new-privileges"]));
        assert_eq!(h["Init"], true);
        assert_eq!(h["PidsLimit"], 1024);
        assert_eq!(h["Memory"], 256 * 1024 * 1024);
        assert_eq!(h["ReadonlyRootfs"], true);
        assert_eq!(h["Tmpfs"]["/tmp"], TMPFS_OPTIONS);
        // The same plan twice is the same plan (its digest is pinned).
        assert_eq!(plan, super::plan(&params()).unwrap());
    }

    #[test]
    fn a_need_that_is_relative_the_root_or_above_a_denied_path_is_refused() {
        for (write, deny) in [
            ("rel/ws", "/srv/state"),
            ("/", "/srv/state"),
            ("/srv/../etc", "/srv/state"),
            ("/srv/a:b", "/srv/state"),
            ("/srv", "/srv/state"),
            ("/srv/state", "/srv/state"),
        ] {
            let mut p = params();
            p.needs.write = vec![write.into()];
            p.needs.deny = vec![deny.into()];
            let e = plan(&p).unwrap_err();
            assert_eq!(e.app_code(), Some("sandbox_denied"), "{write}: {e}");
        }
        // Inside a denied path: the run's own folder, which the host let through.
        let mut p = params();
        p.needs.write = vec!["/srv/state/runs/exe-1/tmp".into()];
        p.needs.deny = vec!["/srv/state".into()];
        assert!(plan(&p).is_ok());
        let mut p = params();
        p.config = json!({"image": "oc-debian"});
        assert_eq!(plan(&p).unwrap_err().app_code(), Some("invalid"));
        // A writable root has no tmpfs; /tmp as a need keeps the host's.
        let mut p = params();
        p.config = json!({"image": "localhost/x", "read_only_root": false, "network": "host"});
        let b = &plan(&p).unwrap().data["create"];
        assert!(b["HostConfig"].get("Tmpfs").is_none());
        assert!(b["HostConfig"].get("Memory").is_none());
        assert_eq!(b["HostConfig"]["NetworkMode"], "host");
        let mut p = params();
        p.needs.write.push("/tmp".into());
        assert!(plan(&p).unwrap().data["create"]["HostConfig"]
            .get("Tmpfs")
            .is_none());
    }
}
