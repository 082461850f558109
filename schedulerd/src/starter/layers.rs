//! What the extensions add around a run (spec, Inventory rows "Run environment" and
//! "Container segment end"):
//!
//! - `run.environment`: before a new attempt's `executor.run`, every extension whose
//!   configuration uses the Work's scope and that declares `provides.run_environment`
//!   is asked for an environment layer, told the run's authority (its binding's
//!   connection), every connection the binding names, its resource and where the
//!   host's `open-conduit` is. The layers are merged in extension-name order
//!   ([`protocol::wire::apply_env`]: later wins, git's `GIT_CONFIG_*` pairs are
//!   appended) into the run request's `env`, which the executor applies after the
//!   workspace provider's layer; the network hosts the layers name go into its
//!   `hosts` (a sandboxed run's network needs). An extension that errs or does not answer within
//!   [`LAYER_TIMEOUT`] fails the run before launch (retried like any failure). A
//!   resumed segment keeps the layer its run started with.
//! - `segment.ended`: after every settle (a turn that ends, parks on a Wait, fails or
//!   is handed off), every such extension declaring `provides.segment_end` is told,
//!   best effort and not awaited, so it revokes what it issued for the segment.

use std::collections::BTreeMap;
use std::time::Duration;

use busapi::ext::ExtCall;
use busapi::store::WorkRow;
use busapi::Call;
use protocol::wire::{
    self, apply_env, Authority, RunEnvironmentParams, RunEnvironmentResult, SegmentEndedParams,
};

use super::{epoch_u64, Starter};
use crate::knowledge::binding_connections;
use crate::ports::ms;

/// How long one extension may take to answer `run.environment`.
pub const LAYER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one `segment.ended` call may take (nobody waits for it).
const SEGMENT_END_TIMEOUT: Duration = Duration::from_secs(30);

/// The authority of a run of `work` on `binding`.
pub fn authority(
    work: &WorkRow,
    binding: &wire::Binding,
    execution_id: &str,
    epoch: i64,
) -> Authority {
    Authority {
        scope_id: work.scope_id.clone(),
        work_id: work.id.clone(),
        execution_id: execution_id.to_owned(),
        epoch: epoch_u64(epoch),
        binding: binding.name.clone(),
        connection: binding.connection.clone(),
    }
}

impl Starter {
    /// The extensions of `scope` whose surface `pick` selects, by name.
    fn surface_holders(
        &self,
        scope: &str,
        pick: impl Fn(&crate::knowledge::ExtensionSurfaces) -> bool,
    ) -> Vec<String> {
        let k = self.router.knowledge();
        let mut names = k
            .read()
            .map(|k| k.with_surface(scope, pick))
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The merged `run.environment` layers for a run (module docs); an error names the
    /// extension that failed.
    pub(super) async fn run_environment(
        &self,
        authority: &Authority,
        binding: &wire::Binding,
    ) -> Result<(BTreeMap<String, String>, Vec<String>), String> {
        let mut env = BTreeMap::new();
        let mut hosts: Vec<String> = Vec::new();
        let holders = self.surface_holders(&authority.scope_id, |s| s.run_environment);
        if holders.is_empty() {
            return Ok((env, hosts));
        }
        let params = RunEnvironmentParams {
            authority: authority.clone(),
            connections: binding_connections(binding),
            executor: binding.executor.clone(),
            resource: binding.resource.clone(),
            toolbelt_dir: self
                .toolbelt
                .get()
                .map(|tb| tb.dir().to_owned())
                .unwrap_or_default(),
        };
        for name in holders {
            let answer = self
                .ext_call(&name, params.clone(), LAYER_TIMEOUT)
                .await
                .map_err(|e| format!("run.environment of the {name} extension: {e}"))?;
            let layer: RunEnvironmentResult = serde_json::from_str(answer.get()).map_err(|e| {
                format!("run.environment of the {name} extension answered something else: {e}")
            })?;
            apply_env(&mut env, &layer.env);
            for h in layer.hosts {
                if !h.is_empty() && !hosts.contains(&h) {
                    hosts.push(h);
                }
            }
        }
        Ok((env, hosts))
    }

    /// Tell the extensions that declare `segment_end` that a segment of the run
    /// `authority` names ended (not awaited).
    pub(super) fn segment_ended(&self, authority: Authority, outcome: &str) {
        let holders = self.surface_holders(&authority.scope_id, |s| s.segment_end);
        if holders.is_empty() {
            return;
        }
        let params = SegmentEndedParams {
            authority,
            outcome: outcome.to_owned(),
        };
        let extensions = self.extensions.clone();
        tokio::spawn(async move {
            for name in holders {
                let call =
                    ExtCall::new(name.clone(), params.clone()).timeout_ms(ms(SEGMENT_END_TIMEOUT));
                if let Err(e) = extensions.answer(&call).await {
                    tracing::warn!(extension = %name, error = %e, "{} was not taken", SegmentEndedParams::METHOD);
                }
            }
        });
    }
}
