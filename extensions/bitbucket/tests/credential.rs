//! A run's own git credential, through the real `oc-bitbucket-extension` binary with
//! this test as the host (`secret.resolve`, `state.work_events`): the
//! `run.environment` layer names `open-conduit git-credential bitbucket` for the
//! connection's git base and carries no secret; `run.credential` answers
//! `x-token-auth` and the connection's token for the run's own repository (the Work's
//! Bitbucket repository, or the binding's git resource under the git base) and
//! refuses any other repository or host; an app-password connection answers its
//! username and app password; a connection with neither is refused. No secret is in
//! a layer, an error or a line of the package's log. Nothing here measures time: the
//! timeouts only guard against hangs.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::wire::{
    Authority, Call, ConfigureParams, Connection, Event, HostInfo, InitializeParams,
    ResourceBinding, RunCredentialParams, RunCredentialResult, RunEnvironmentParams,
    SecretResolveParams, StateEventsResult, StateWorkEventsParams,
};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

const EXE: &str = env!("CARGO_BIN_EXE_oc-bitbucket-extension");
const HANG: Duration = Duration::from_secs(60);
const TOKEN: &str = "bbtok-CRED-SECRET-7f1";
const APP_PASSWORD: &str = "bbapp-CRED-SECRET-92c";
const WEBHOOK_SECRET: &str = "whsec-CRED-SECRET-0d4";
/// Where the app-password connection's repositories are cloned from.
const GIT_URL: &str = "http://127.0.0.1:9/git";

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// What the host serves: the connections' secrets (recorded as asked) and Work
/// `w1`'s Events.
#[derive(Default)]
struct Host {
    resolved: Mutex<Vec<(String, String, Vec<String>)>>,
}

fn event(sequence: u64, event_type: &str, repository: &str) -> Event {
    serde_json::from_value(json!({
        "id": format!("e{sequence}"), "sequence": sequence, "type": event_type,
        "payload": {"schema": "bitbucket.pullrequest.v1",
                    "data": {"repository": repository, "id": 7}}
    }))
    .unwrap()
}

fn serve(host: &Host, request: &protocol::Request) -> Result<Value, RpcError> {
    let m = request.method.as_str();
    if m == <SecretResolveParams as Call>::METHOD {
        let p: SecretResolveParams = request.params()?;
        host.resolved
            .lock()
            .unwrap()
            .push((p.scope_id, p.connection, p.names.clone()));
        let values: HashMap<String, String> = p
            .names
            .iter()
            .filter_map(|n| {
                let v = match n.as_str() {
                    "token" => TOKEN,
                    "app_password" => APP_PASSWORD,
                    "webhook_secret" => WEBHOOK_SECRET,
                    _ => return None,
                };
                Some((n.clone(), v.to_string()))
            })
            .collect();
        return Ok(json!({ "values": values }));
    }
    if m == <StateWorkEventsParams as Call>::METHOD {
        let p: StateWorkEventsParams = request.params()?;
        // Work w1: an older Event of another repository, the newest of acme/widgets,
        // and an Event of another package.
        let all = if p.id == "w1" {
            vec![
                event(1, "bitbucket.pullrequest.created", "acme/old"),
                event(2, "bitbucket.pullrequest.comment_created", "acme/widgets"),
                event(3, "github.issue.opened", "acme/gh"),
            ]
        } else {
            Vec::new()
        };
        let events = all.into_iter().filter(|e| e.sequence > p.after).collect();
        return Ok(serde_json::to_value(StateEventsResult { events }).unwrap());
    }
    Err(RpcError::method_not_found(m))
}

struct Ext {
    peer: Peer,
    child: tokio::process::Child,
    log: tokio::task::JoinHandle<String>,
}

async fn start(host: Arc<Host>) -> Ext {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all).await;
        String::from_utf8_lossy(&all).into_owned()
    });
    let handler = FnHandler(move |request: protocol::Request| {
        let host = host.clone();
        async move { serve(&host, &request) }
    });
    let peer = connect(
        stdout,
        stdin,
        handler,
        Options::named("extension bitbucket"),
    );
    within(peer.call_typed(&InitializeParams {
        protocol_versions: vec![1],
        host: HostInfo {
            name: "open-conduit".into(),
            version: "test".into(),
        },
        state_dir: std::env::temp_dir().display().to_string(),
        ..Default::default()
    }))
    .await
    .unwrap();
    let connection = |name: &str, config: Value, secrets: &[&str]| Connection {
        name: name.into(),
        connection_type: "bitbucket".into(),
        config,
        secrets: secrets.iter().map(|s| s.to_string()).collect(),
    };
    within(peer.call_typed(&ConfigureParams {
        connections: vec![
            connection("bb", json!({}), &["token", "webhook_secret"]),
            connection(
                "bbapp",
                json!({"username": "conduit-bot", "git_url": GIT_URL}),
                &["app_password", "webhook_secret"],
            ),
            connection("bare", json!({}), &["webhook_secret"]),
        ],
        ..Default::default()
    }))
    .await
    .unwrap();
    Ext { peer, child, log }
}

fn authority() -> Authority {
    Authority {
        scope_id: "s1".into(),
        work_id: "w1".into(),
        execution_id: "x1".into(),
        epoch: 1,
        binding: "agent".into(),
        connection: "bb".into(),
    }
}

fn git_resource(repository: &str) -> Option<ResourceBinding> {
    Some(ResourceBinding {
        resource_type: "git".into(),
        config: json!({"repository": repository, "connection": "bb"}),
    })
}

async fn ask(
    ext: &Ext,
    connections: &[&str],
    resource: Option<ResourceBinding>,
    url: &str,
) -> Result<RunCredentialResult, CallError> {
    let (protocol, rest) = url.split_once("://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    within(ext.peer.call_typed(&RunCredentialParams {
        authority: authority(),
        connections: connections.iter().map(|c| c.to_string()).collect(),
        resource,
        protocol: protocol.into(),
        host: host.into(),
        path: path.into(),
    }))
    .await
}

fn refused(answer: Result<RunCredentialResult, CallError>) -> RpcError {
    let e = answer.unwrap_err();
    let e = e
        .rpc()
        .unwrap_or_else(|| panic!("not authored: {e}"))
        .clone();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    let said = &e.data.as_ref().unwrap()[protocol::toolbelt::AGENT_MESSAGE_FIELD];
    assert!(said.is_string(), "a message for the agent: {e:?}");
    e
}

fn no_secret_in(what: &str, text: &str) {
    for s in [TOKEN, APP_PASSWORD, WEBHOOK_SECRET] {
        assert!(!text.contains(s), "a secret in {what}: {text}");
    }
}

#[tokio::test]
async fn a_run_gets_its_own_repositorys_credential_and_no_other() {
    let host = Arc::new(Host::default());
    let ext = start(host.clone()).await;

    // The layer names the helper for https://bitbucket.org and holds no secret.
    let layer = within(ext.peer.call_typed(&RunEnvironmentParams {
        authority: authority(),
        connections: vec!["bb".into()],
        toolbelt_dir: "/opt/oc/bin".into(),
        ..Default::default()
    }))
    .await
    .unwrap();
    let env = &layer.env;
    assert_eq!(env["GIT_CONFIG_COUNT"], "3", "{env:?}");
    assert_eq!(
        env["GIT_CONFIG_KEY_0"],
        "credential.https://bitbucket.org.helper"
    );
    assert_eq!(env["GIT_CONFIG_VALUE_0"], "", "the helper list cleared");
    assert_eq!(
        env["GIT_CONFIG_VALUE_1"],
        "!'/opt/oc/bin/open-conduit' git-credential bitbucket"
    );
    assert_eq!(
        env["GIT_CONFIG_KEY_2"],
        "credential.https://bitbucket.org.useHttpPath"
    );
    assert_eq!(env["GIT_TERMINAL_PROMPT"], "0");
    assert_eq!(layer.hosts, vec!["bitbucket.org".to_string()]);
    no_secret_in("the layer", &serde_json::to_string(&layer).unwrap());
    assert!(
        host.resolved.lock().unwrap().is_empty(),
        "the layer resolves no secret"
    );

    // A binding naming no bitbucket connection gets no layer.
    let none = within(ext.peer.call_typed(&RunEnvironmentParams {
        authority: authority(),
        connections: vec!["elsewhere".into()],
        ..Default::default()
    }))
    .await
    .unwrap();
    assert!(none.env.is_empty() && none.hosts.is_empty(), "{none:?}");

    // The app-password connection's layer is for its git_url.
    let app_layer = within(ext.peer.call_typed(&RunEnvironmentParams {
        authority: authority(),
        connections: vec!["elsewhere".into(), "bbapp".into()],
        ..Default::default()
    }))
    .await
    .unwrap();
    assert_eq!(
        app_layer.env["GIT_CONFIG_KEY_1"],
        format!("credential.{GIT_URL}.helper")
    );
    assert_eq!(
        app_layer.env["GIT_CONFIG_VALUE_1"],
        "!open-conduit git-credential bitbucket"
    );
    assert_eq!(app_layer.hosts, vec!["127.0.0.1".to_string()]);

    // The Work's repository (its newest bitbucket Event's): x-token-auth and the token.
    let got = ask(
        &ext,
        &["bb"],
        None,
        "https://bitbucket.org/acme/widgets.git",
    )
    .await
    .unwrap();
    assert_eq!(
        (got.username.as_str(), got.password.as_str()),
        ("x-token-auth", TOKEN)
    );
    assert!(got.expires_at.is_empty());
    assert_eq!(
        host.resolved.lock().unwrap()[0],
        (
            "s1".to_string(),
            "bb".to_string(),
            vec!["token".to_string()]
        )
    );

    // Another repository, the Work's older one, another host: refused, no secret said.
    for url in [
        "https://bitbucket.org/acme/other.git",
        "https://bitbucket.org/acme/old.git",
        "https://github.com/acme/widgets.git",
        "http://bitbucket.org/acme/widgets.git",
    ] {
        let e = refused(ask(&ext, &["bb"], None, url).await);
        no_secret_in("a refusal", &format!("{e:?}"));
    }
    let e = refused(ask(&ext, &["bb"], None, "https://bitbucket.org/acme/other.git").await);
    assert!(
        e.message.contains("acme/widgets only, not acme/other"),
        "{}",
        e.message
    );

    // The binding's git resource under the git base is the run's repository instead.
    let resource = git_resource("https://bitbucket.org/acme/tools.git");
    let got = ask(
        &ext,
        &["bb"],
        resource.clone(),
        "https://bitbucket.org/acme/tools.git",
    )
    .await
    .unwrap();
    assert_eq!(got.password, TOKEN);
    refused(
        ask(
            &ext,
            &["bb"],
            resource,
            "https://bitbucket.org/acme/widgets.git",
        )
        .await,
    );

    // An app-password connection: its username and app password, for its git_url.
    let got = ask(
        &ext,
        &["bbapp"],
        None,
        "http://127.0.0.1:9/git/acme/widgets.git",
    )
    .await
    .unwrap();
    assert_eq!(
        (got.username.as_str(), got.password.as_str()),
        ("conduit-bot", APP_PASSWORD)
    );
    refused(
        ask(
            &ext,
            &["bbapp"],
            None,
            "https://bitbucket.org/acme/widgets.git",
        )
        .await,
    );

    // A connection with neither, or no bitbucket connection at all: refused.
    let e = refused(
        ask(
            &ext,
            &["bare"],
            None,
            "https://bitbucket.org/acme/widgets.git",
        )
        .await,
    );
    assert!(e.message.contains("\"bare\""), "{}", e.message);
    refused(
        ask(
            &ext,
            &["elsewhere"],
            None,
            "https://bitbucket.org/acme/widgets.git",
        )
        .await,
    );

    // The package's log says what it refused, and holds no secret.
    let Ext {
        peer,
        mut child,
        log,
    } = ext;
    drop(peer);
    let _ = child.kill().await;
    let log = within(log).await.unwrap();
    assert!(
        log.contains("asked for a credential for acme/other, refused"),
        "{log}"
    );
    no_secret_in("the log", &log);
}
