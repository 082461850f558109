//! Configuration generations and the tunnel's URL sent to the packages (`configure`
//! again without a restart), and what each package registered.

use super::*;

/// Set what `configure` sends `manifest`'s package from `doc`, and rebind its identity.
pub(super) fn configure_entry(
    doc: &Config,
    generation: &str,
    manifest: &protocol::manifest::Manifest,
    configuration: &Configuration,
    identity: &BoundIdentity,
) {
    let ec = doc.for_extension(manifest, generation);
    let refs: BTreeMap<String, BTreeMap<String, String>> = ec
        .connections
        .iter()
        .filter_map(|c| doc.connection(c))
        .map(|c| (c.name.clone(), c.secret_refs.clone()))
        .collect();
    configuration.set(ec.params, refs);
    configuration.set_document(std::sync::Arc::new(doc.clone()));
    identity.rebind(ec.scopes, ec.connections);
    identity.rebind_unscoped(ec.unscoped_connections);
}

impl Runner {
    /// A new configuration generation: every package's configure params and
    /// identity are replaced, and each running one is sent `configure` again without
    /// a restart (with its KV layout current). Answers, for each package configured
    /// again, the reason it failed, if it did; a failed one keeps its earlier
    /// registration and gets the new configuration at its next start.
    pub async fn apply(&self, doc: &Config, generation: &str) -> Vec<(String, Result<(), String>)> {
        *lock(&self.applied) = Some(Arc::new(doc.clone()));
        for e in &self.entries {
            configure_entry(
                doc,
                generation,
                &e.package.manifest,
                &e.configuration,
                &e.identity,
            );
        }
        self.configure_running(generation).await
    }

    /// The tunnel's public URL changed (`None`: none published): every package is
    /// configured with it in place of `settings.webhooks.public_url`, the running ones
    /// again at once without a restart (spec: configure is sent again on every tunnel
    /// URL change). Answers what [`Runner::apply`] does; nothing when it did not change.
    pub async fn set_public_url(&self, url: Option<String>) -> Vec<(String, Result<(), String>)> {
        if !self.tunnels.set_public_url(url) {
            return Vec::new();
        }
        let url = self.tunnels.public_url();
        let mut generation = String::new();
        for e in &self.entries {
            e.configuration.set_tunnel_url(url.clone());
            generation = e.configuration.params().generation;
        }
        self.configure_running(&generation).await
    }

    async fn configure_running(&self, generation: &str) -> Vec<(String, Result<(), String>)> {
        let mut out = Vec::new();
        for e in &self.entries {
            let Some(peer) = e.supervisor().and_then(|s| s.peer()) else {
                continue;
            };
            let declared = crate::process::declared_kv_version(&e.spec.manifest_json);
            let kv = KvLayout {
                stored: declared,
                declared,
            };
            let r = send_configure(&peer, &e.options, kv, e.options.configure_timeout)
                .await
                .map(|_| ())
                .map_err(|err| err.to_string());
            match &r {
                Ok(()) => {
                    tracing::info!(OC_EXTENSION = %e.package.name, %generation, "configured again")
                }
                Err(why) => {
                    tracing::error!(OC_EXTENSION = %e.package.name, %generation, %why, "configure failed");
                    e.configuration.refuse(generation, why);
                }
            }
            out.push((e.package.name.clone(), r));
        }
        out
    }

    /// What each package registered in its last configure, with its state.
    pub fn registrations(&self) -> Vec<(String, &'static str, Registered)> {
        self.entries
            .iter()
            .map(|e| {
                let sup = e.supervisor();
                let (state, _) = Self::state_of(sup.as_deref());
                (e.package.name.clone(), state, e.configuration.registered())
            })
            .collect()
    }

    /// Follow each package's registrations (name, receiver).
    pub fn watch_registrations(&self) -> Vec<(String, watch::Receiver<Registered>)> {
        self.entries
            .iter()
            .map(|e| (e.package.name.clone(), e.configuration.subscribe()))
            .collect()
    }
}
