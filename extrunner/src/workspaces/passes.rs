//! Passes over the providers: `provider.reconcile` before a provider process is
//! first served and at start ([`Workspaces::reconcile_all`]), `provider.sweep` of
//! closed Works' workspaces ([`Workspaces::sweep`]), and the `provider.owner_status`
//! a provider asks within a pass ([`Workspaces::owner_status`]).

use super::*;
use busapi::store::{LeaseDropRequest, OwnerStatusRequest, WorkGetRequest};

impl Workspaces {
    pub(super) fn begin_pass(&self, runner: &dyn Providers, provider: &str) -> String {
        let id = random_id();
        let peer = runner.peer(provider);
        lock(&self.passes).insert(
            id.clone(),
            Pass {
                extension: provider.to_owned(),
                peer,
            },
        );
        id
    }

    pub(super) fn end_pass(&self, id: &str) {
        lock(&self.passes).remove(id);
    }

    /// Runs `provider.reconcile` on `provider`'s current process unless that process
    /// was reconciled already.
    pub(super) async fn ensure_reconciled(
        &self,
        runner: &dyn Providers,
        provider: &str,
        resource_type: &str,
    ) -> Result<(), RpcError> {
        let gate = lock(&self.reconciling)
            .entry(provider.to_owned())
            .or_default()
            .clone();
        let _held = gate.lock().await;
        let current = runner.peer(provider);
        if let (Some(done), Some(now)) = (lock(&self.reconciled).get(provider), &current) {
            if done.same_connection(now) && !now.is_closed() {
                return Ok(());
            }
        }
        self.reconcile(runner, provider, resource_type).await?;
        if let Some(peer) = runner.peer(provider) {
            lock(&self.reconciled).insert(provider.to_owned(), peer);
        }
        Ok(())
    }

    /// `provider.reconcile` on `provider`, then the leases made to agree with the
    /// workspaces it answers.
    pub(super) async fn reconcile(
        &self,
        runner: &dyn Providers,
        provider: &str,
        resource_type: &str,
    ) -> Result<(), RpcError> {
        let pass_id = self.begin_pass(runner, provider);
        let params = ProviderReconcileParams {
            resource_type: resource_type.to_owned(),
            pass_id: pass_id.clone(),
        };
        let answer = call_provider(runner, provider, &params, PASS_TIMEOUT).await;
        self.end_pass(&pass_id);
        let result: ProviderReconcileResult = serde_json::from_value(answer?).map_err(|e| {
            RpcError::unauthored(format_args!(
                "{provider:?} answered provider.reconcile with something else: {e}"
            ))
        })?;
        for note in &result.removed {
            tracing::warn!(OC_EXTENSION = %provider, reference = %note.reference, owner = %note.owner,
                dir = %note.dir, reason = %note.reason, "reconcile removed a half-made workspace");
        }
        let leases = self.leases(Some(resource_type), None).await?;
        let held: HashMap<&str, &LeaseRow> =
            leases.iter().map(|l| (l.reference.as_str(), l)).collect();
        let mut recorded = 0usize;
        for r in &result.resources {
            if held.contains_key(r.reference.as_str()) || r.owner.is_empty() {
                continue;
            }
            // A whole workspace the host holds no lease for: extrunner stopped between
            // the provider's answer and the record.
            let (scope_id, binding) = self.work_place(&r.owner).await;
            self.record(resource_type, r, &r.owner, &scope_id, &binding, "")
                .await?;
            recorded += 1;
        }
        let whole: std::collections::HashSet<&str> = result
            .resources
            .iter()
            .map(|r| r.reference.as_str())
            .collect();
        let mut dropped = 0usize;
        for l in &leases {
            if !whole.contains(l.reference.as_str()) {
                self.drop_lease(resource_type, &l.reference).await?;
                dropped += 1;
            }
        }
        tracing::info!(OC_EXTENSION = %provider, resource_type, workspaces = result.resources.len(),
            removed = result.removed.len(), recorded, dropped, "workspaces reconciled");
        Ok(())
    }

    /// The scope and binding of Work `id`, when storaged has it.
    pub(super) async fn work_place(&self, id: &str) -> (String, String) {
        match self.store(&WorkGetRequest { id: id.to_owned() }).await {
            Ok(got) => (got.work.scope_id, got.work.binding),
            Err(_) => (String::new(), String::new()),
        }
    }

    pub(super) async fn drop_lease(
        &self,
        resource_type: &str,
        reference: &str,
    ) -> Result<(), RpcError> {
        self.store(&LeaseDropRequest {
            resource_type: resource_type.to_owned(),
            reference: reference.to_owned(),
        })
        .await?;
        Ok(())
    }

    /// Reconciles every provider now (at extrunner's start), logging failures.
    pub async fn reconcile_all(&self) {
        let Ok(runner) = self.runner() else { return };
        for (resource_type, provider) in runner.resource_types() {
            if let Err(e) = self
                .ensure_reconciled(runner.as_ref(), &provider, &resource_type)
                .await
            {
                tracing::warn!(OC_EXTENSION = %provider, resource_type, error = %e.message,
                    "the workspaces could not be reconciled; trying again at the next acquisition");
            }
        }
    }

    /// Sweeps every provider whose resource type is marked `sweep` (only
    /// `resource_type` when given): each removes the workspaces of Works closed for
    /// longer than `grace`, keeping dirty ones unless `remove_dirty`.
    pub async fn sweep(
        &self,
        resource_type: Option<&str>,
        grace: Duration,
        remove_dirty: bool,
    ) -> Result<Vec<SweepReport>, RpcError> {
        let runner = self.runner()?;
        let mut out = Vec::new();
        let types = runner.resource_types();
        if let Some(t) = resource_type {
            if !types.iter().any(|(rt, _)| rt == t) {
                return Err(RpcError::new(
                    Code::NotFound,
                    format!("no installed package provides the resource type {t:?}"),
                ));
            }
        }
        for (rt, provider) in types {
            if resource_type.is_some_and(|t| t != rt) || !runner.sweeps(&provider, &rt) {
                continue;
            }
            let mut report = SweepReport {
                resource_type: rt.clone(),
                provider: provider.clone(),
                ..SweepReport::default()
            };
            match self
                .sweep_one(runner.as_ref(), &provider, &rt, grace, remove_dirty)
                .await
            {
                Ok(result) => report.result = result,
                Err(e) => {
                    tracing::warn!(OC_EXTENSION = %provider, resource_type = %rt, error = %e.message, "the sweep failed");
                    report.error = e.message;
                }
            }
            out.push(report);
        }
        Ok(out)
    }

    pub(super) async fn sweep_one(
        &self,
        runner: &dyn Providers,
        provider: &str,
        resource_type: &str,
        grace: Duration,
        remove_dirty: bool,
    ) -> Result<ProviderSweepResult, RpcError> {
        self.ensure_reconciled(runner, provider, resource_type)
            .await?;
        let pass_id = self.begin_pass(runner, provider);
        let params = ProviderSweepParams {
            resource_type: resource_type.to_owned(),
            pass_id: pass_id.clone(),
            grace_s: grace.as_secs(),
            remove_dirty,
        };
        let answer = call_provider(runner, provider, &params, PASS_TIMEOUT).await;
        self.end_pass(&pass_id);
        let result: ProviderSweepResult = serde_json::from_value(answer?).map_err(|e| {
            RpcError::unauthored(format_args!(
                "{provider:?} answered provider.sweep with something else: {e}"
            ))
        })?;
        for note in &result.removed {
            self.drop_lease(resource_type, &note.reference).await?;
            tracing::info!(OC_EXTENSION = %provider, reference = %note.reference, owner = %note.owner,
                dir = %note.dir, reason = %note.reason, "swept a spare workspace");
        }
        for note in &result.kept {
            tracing::warn!(OC_EXTENSION = %provider, reference = %note.reference, owner = %note.owner,
                dir = %note.dir, reason = %note.reason, "kept a spare workspace");
        }
        Ok(result)
    }

    /// `provider.owner_status` from `caller` over `peer`: only within a pass the host
    /// opened on that provider process.
    pub async fn owner_status(
        &self,
        caller: &str,
        peer: &Peer,
        p: ProviderOwnerStatusParams,
    ) -> Result<ProviderOwnerStatusResult, RpcError> {
        let known = lock(&self.passes).get(&p.pass_id).cloned();
        let ours = known.is_some_and(|pass| {
            pass.extension == caller && pass.peer.is_none_or(|x| x.same_connection(peer))
        });
        if !ours {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "pass {:?} is not a reconcile or sweep the host opened on this process",
                    p.pass_id
                ),
            ));
        }
        if p.owners.len() > MAX_PAGE_LIMIT as usize {
            return Err(RpcError::invalid_params(format!(
                "{} owners in one provider.owner_status, over the page limit of {MAX_PAGE_LIMIT}",
                p.owners.len()
            )));
        }
        let answer = self.store(&OwnerStatusRequest { owners: p.owners }).await?;
        Ok(ProviderOwnerStatusResult {
            owners: answer.owners,
        })
    }
}
