//! The `ext.*` bus methods, served by the [`Runner`].
//!
//! - `ext.list {}`: every package (name, origin, version, state, restarts, pid,
//!   protocol version, refusal), the discovery reports and the conflicts;
//! - `ext.inspect {name}`: one package in detail; `not_found` for an unknown name;
//! - `ext.restart {name}`: stop and start again (a refused one is tried again);
//! - `ext.call {name, method, params, in_transaction?}`: a host-to-extension call
//!   on a running extension (see [`Runner::call`]).

use crate::runner::Runner;
use protocol::{reply, BoxFuture, Code, Handler, Reply, Request, RpcError};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// `ext.list`.
pub const LIST: &str = "ext.list";
/// `ext.inspect`.
pub const INSPECT: &str = "ext.inspect";
/// `ext.restart`.
pub const RESTART: &str = "ext.restart";
/// `ext.call`.
pub const CALL: &str = "ext.call";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams {
    name: String,
    method: String,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    in_transaction: bool,
    /// How long to wait for the answer (ms); default [`CALL_TIMEOUT_DEFAULT`], at
    /// most [`CALL_TIMEOUT_MAX`]. Past it the call is cancelled and answered
    /// `unavailable`.
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// How long `ext.call` waits for an answer unless told otherwise.
pub const CALL_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(300);
/// The longest `ext.call` may be told to wait.
pub const CALL_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// The bus handler of extrunner's service.
#[derive(Debug, Clone)]
pub struct Service {
    runner: Arc<Runner>,
}

impl Service {
    /// Serve `runner` on the bus.
    pub fn new(runner: Arc<Runner>) -> Service {
        Service { runner }
    }

    /// The runner served.
    pub fn runner(&self) -> &Arc<Runner> {
        &self.runner
    }
}

async fn serve(runner: Arc<Runner>, request: Request) -> Result<Reply, RpcError> {
    match request.method.as_str() {
        LIST => reply(&runner.list()),
        INSPECT => {
            let p: NameParams = request.params()?;
            match runner.inspect(&p.name) {
                Some(v) => reply(&v),
                None => Err(RpcError::new(
                    Code::NotFound,
                    format!("no extension named `{}`", p.name),
                )),
            }
        }
        RESTART => {
            let p: NameParams = request.params()?;
            reply(&runner.restart(&p.name).await?)
        }
        CALL => {
            let p: CallParams = request.params()?;
            let params = p
                .params
                .unwrap_or_else(|| Value::Object(Default::default()));
            let timeout = match p.timeout_ms {
                None => CALL_TIMEOUT_DEFAULT,
                Some(ms) if std::time::Duration::from_millis(ms) <= CALL_TIMEOUT_MAX => {
                    std::time::Duration::from_millis(ms)
                }
                Some(ms) => {
                    return Err(RpcError::new(
                        Code::Invalid,
                        format!(
                            "timeout_ms {ms} is over the longest call ({} ms, CALL_TIMEOUT_MAX)",
                            CALL_TIMEOUT_MAX.as_millis()
                        ),
                    ))
                }
            };
            runner
                .call(
                    &p.name,
                    &p.method,
                    &params,
                    p.in_transaction,
                    timeout,
                    Some(request.cancel.clone()),
                )
                .await
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        Box::pin(serve(self.runner.clone(), request))
    }
}
