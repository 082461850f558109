//! A small service for the bus's tests and benchmark: it joins the bus through
//! `daemon::bus` (so it reconnects and re-registers as every daemon does) and
//! serves `<prefix>.echo`, `<prefix>.sleep` (ms), `<prefix>.pid`, `<prefix>.fail`,
//! `<prefix>.maybe` (echoes, or fails when the params say `"fail": true`) and
//! `<prefix>.publish {topic, params}`. It prints `ready` on stdout once
//! registered, and runs until killed or stdin closes.
//!
//! Usage: oc-bus-probe serve SOCKET SERVICE PREFIX | call SOCKET METHOD [PARAMS]

use daemon::bus::{Bus, BusOptions, ServiceFn};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::AsyncReadExt;

static BUS: OnceLock<Bus> = OnceLock::new();

async fn serve(prefix: String, method: String, params: Value) -> Result<Value, RpcError> {
    let own = method
        .strip_prefix(prefix.as_str())
        .and_then(|m| m.strip_prefix('.'))
        .unwrap_or_default();
    match own {
        "echo" => Ok(params),
        "sleep" => {
            let ms = params.as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json!(ms))
        }
        "pid" => Ok(json!(std::process::id())),
        "maybe" if params.get("fail") == Some(&Value::Bool(true)) => Err(RpcError::authored(
            "probe_failed",
            format!("the probe fails on request: {params}"),
        )),
        "maybe" => Ok(params),
        "fail" => Err(RpcError::authored(
            "probe_failed",
            "the probe fails on request",
        )),
        "publish" => {
            let topic = params
                .get("topic")
                .and_then(Value::as_str)
                .unwrap_or("probe.topic");
            let sent = BUS
                .get()
                .is_some_and(|bus| bus.publish(topic, &params["params"]));
            Ok(json!({ "sent": sent }))
        }
        _ => Err(RpcError::new(Code::NotFound, format!("no method {method}"))),
    }
}

/// The probe's main: `serve SOCKET SERVICE PREFIX`, or `call SOCKET METHOD
/// [PARAMS-JSON]` (prints the answer, or the error and exits 1).
pub fn main(args: &[String]) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oc-bus-probe: {e}");
            return 1;
        }
    };
    match args {
        [mode, socket, service, prefix] if mode == "serve" => {
            rt.block_on(serve_forever(socket, service, prefix));
            0
        }
        [mode, socket, method, rest @ ..] if mode == "call" && rest.len() <= 1 => {
            let params: Value = rest
                .first()
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or(Value::Null);
            rt.block_on(call_once(socket, method, params))
        }
        _ => {
            eprintln!(
                "usage: oc-bus-probe serve SOCKET SERVICE PREFIX | call SOCKET METHOD [PARAMS]"
            );
            2
        }
    }
}

async fn call_once(socket: &str, method: &str, params: Value) -> i32 {
    let stream = match tokio::net::UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("connect {socket}: {e}");
            return 1;
        }
    };
    let (r, w) = stream.into_split();
    let peer = protocol::connect(r, w, protocol::NoHandler, protocol::Options::named("probe"));
    let call = peer.call(method, &params);
    match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(Ok(v)) => {
            println!("{v}");
            0
        }
        Ok(Err(e)) => {
            eprintln!("{e}");
            1
        }
        Err(_) => {
            eprintln!("no answer within 30 s");
            1
        }
    }
}

async fn serve_forever(socket: &str, service: &str, prefix: &str) {
    let prefix = prefix.to_string();
    {
        let p = prefix.clone();
        let handler =
            ServiceFn(move |method: String, params: Value| serve(p.clone(), method, params));
        let bus = Bus::start(BusOptions::service(
            socket,
            service,
            &[prefix.as_str()],
            Arc::new(handler),
        ));
        let _ = BUS.set(bus.clone());
        if bus.connected(Duration::from_secs(60)).await.is_ok() {
            println!("ready");
        }
        // Until stdin closes (the test is done) or a signal kills us.
        let stdin_open = async {
            let mut sink = [0u8; 64];
            let mut stdin = tokio::io::stdin();
            while let Ok(n) = stdin.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        // Or until another instance replaces this one.
        tokio::select! {
            _ = stdin_open => {}
            _ = bus.left() => {}
        }
        bus.close();
    }
}
