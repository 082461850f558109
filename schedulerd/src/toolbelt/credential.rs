//! `toolbelt.git_credential`: a credential for a run's own git, asked by
//! `open-conduit git-credential EXTENSION get`, which an extension's `run.environment`
//! layer names as git's credential helper. The toolbelt checks the token (a running
//! execution at its epoch), that the named extension adds a run environment in the
//! run's scope, and git's request (`https` or `http`, a host, bounded fields), then
//! asks the extension (`run.credential`) with the run's authority, its binding's
//! connections and resource. The extension decides which repositories the run may
//! have (the GitHub package: only the Work's); its refusal reaches git's stderr
//! through the same safe codes and agent messages as an operation's.

use busapi::ext::ExtCall;
use protocol::toolbelt::GitCredentialParams;
use protocol::wire::{Call, RunCredentialParams, RunCredentialResult};
use protocol::{CallError, Code, RpcError};

use super::refusal::refusal;
use super::{refuse, Toolbelt, OPERATION_TIMEOUT};
use crate::knowledge::binding_connections;
use crate::ports::ms;

/// The longest host or path git's request may name.
const MAX_FIELD_BYTES: usize = 1024;

impl Toolbelt {
    pub(super) async fn git_credential(
        &self,
        p: GitCredentialParams,
    ) -> Result<RunCredentialResult, RpcError> {
        let caller = self.caller(&p.token).await?;
        if !matches!(p.protocol.as_str(), "https" | "http") {
            return Err(refuse(
                Code::Invalid,
                format!(
                    "a run's git credential is for https:// and http:// repositories, not {:?}",
                    p.protocol
                ),
            ));
        }
        if p.host.is_empty() || p.host.len() > MAX_FIELD_BYTES || p.path.len() > MAX_FIELD_BYTES {
            return Err(refuse(
                Code::Invalid,
                format!(
                    "git's request needs a host; a host or path is at most {MAX_FIELD_BYTES} bytes"
                ),
            ));
        }
        let scope = caller.authority.scope_id.clone();
        let offers = {
            let k = self
                .inner
                .knowledge
                .read()
                .map_err(|_| refuse(Code::Internal, "internal error"))?;
            k.with_surface(&scope, |s| s.run_environment)
                .contains(&p.extension)
        };
        if !offers {
            return Err(refuse(
                Code::Unauthorized,
                format!(
                    "the {:?} extension adds no run environment in scope {scope:?}, so it gives this run no credential",
                    p.extension
                ),
            ));
        }
        let params = RunCredentialParams {
            authority: caller.authority.clone(),
            connections: binding_connections(&caller.binding),
            resource: caller.binding.resource.clone(),
            protocol: p.protocol,
            host: p.host,
            path: p.path,
        };
        let call = ExtCall::new(p.extension.clone(), params).timeout_ms(ms(OPERATION_TIMEOUT));
        let answer = self.inner.extensions.answer(&call).await;
        let answer = match answer {
            Ok(a) => a,
            Err(CallError::Rpc(e)) => return Err(refusal(RunCredentialParams::METHOD, &e)),
            Err(e) => {
                return Err(refuse(
                    Code::Unavailable,
                    format!("{}: {e}", RunCredentialParams::METHOD),
                ))
            }
        };
        let got: RunCredentialResult = serde_json::from_str(answer.get())
            .map_err(|_| refuse(Code::Internal, "internal error"))?;
        tracing::info!(OC_WORK_ID = %caller.authority.work_id, OC_EXECUTION_ID = %caller.authority.execution_id, extension = %p.extension, "gave a run its git credential");
        Ok(got)
    }
}
