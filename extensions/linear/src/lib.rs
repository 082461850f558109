//! The bundled Linear package (`linear`): Linear issues assigned to the agent's user
//! (or moved to a configured state, or labelled) become Work keyed by the issue
//! (`linear:ENG-123`); comments join it; the agent reads, comments on and moves the
//! issue through the package's operations.
//!
//! Built so far (issue 43, see the crate's README):
//!
//! - [`config`] parses the entries and the `linear` connection's config.
//! - [`intake`] serves `webhook.handle`: `Linear-Signature` and `webhookTimestamp`
//!   verified, the payload turned into at most one Event ([`project`]).
//! - [`route`] serves `route.match`: an issue is one Work, with the spec's display.
//! - [`api`] is the GraphQL client; [`ops`] serves the toolbelt operations.
//! - [`render`] serves `event.render`: an Event as bounded markdown.
//! - [`reconcile`] serves `ingress.reconcile`: issues and comments polled since the
//!   checkpoint.
//! - [`hooks`] is the `linear.webhooks` task (an entry's managed webhooks, one per
//!   team) and the `webhooks` doctor check.
//! - [`status`] is the projector (`task.run` of `linear.status`): a comment on
//!   the issue showing the Work's state, edited in place.
//! - [`wait`] serves `operation.wait` (`linear.wait_reply`).

#![warn(missing_docs)]

pub mod api;
pub mod check;
pub mod config;
pub mod hooks;
pub mod intake;
pub mod ops;
pub mod playbooks;
pub mod project;
pub mod reconcile;
pub mod render;
pub mod route;
pub mod status;
pub mod wait;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::{
    CheckRunParams, CheckRunResult, ConfigureResult, OperationCallParams, RouteMatchParams,
    TaskRunParams, TaskRunResult, ValidateParams, ValidateResult, WebhookHandleParams,
    WebhookHandleResult,
};
use protocol::{Code, RpcError};

/// The extension's manifest, as shipped beside the binary.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");
/// The package's name, also its entry, connection and route handler type.
pub const NAME: &str = "linear";
/// The package's Event family.
pub const FAMILY: &str = "linear.issue";
/// The payload schema of its Events.
pub const SCHEMA: &str = "linear.issue.v1";
/// The connection secret the API is called with.
pub const API_KEY: &str = "api_key";
/// The connection secret that signs webhooks.
pub const WEBHOOK_SECRET: &str = "webhook_secret";

/// What the handlers share: the entries and connections of the last configure and
/// the secret cache.
#[derive(Default)]
pub struct State {
    configured: sdk::package::Configured<config::Registry>,
    secrets: sdk::secrets::SecretCache,
    /// The configure's `public_url` (trimmed; empty when there is none).
    public_url: Mutex<String>,
    /// The last failure of each source's webhooks pass, for doctor.
    notes: Mutex<BTreeMap<String, String>>,
    /// Held by a webhooks pass: passes never overlap.
    webhook_pass: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// The entries in force.
    pub fn registry(&self) -> Arc<config::Registry> {
        self.configured.registry()
    }

    /// The `public_url` of the last configure (empty: none).
    pub fn public_url(&self) -> String {
        lock(&self.public_url).clone()
    }

    /// Keeps (or, with `None`, clears) the last webhooks pass failure of `source`.
    pub fn note(&self, source: &str, why: Option<String>) {
        let mut notes = lock(&self.notes);
        match why {
            Some(why) => notes.insert(source.to_string(), why),
            None => notes.remove(source),
        };
    }

    /// The kept webhooks pass failure of `source`.
    pub fn note_of(&self, source: &str) -> Option<String> {
        lock(&self.notes).get(source).cloned()
    }

    /// Serves `configure`.
    pub fn configure(
        &self,
        params: &protocol::wire::ConfigureParams,
    ) -> Result<ConfigureResult, RpcError> {
        let registry = config::Registry::from_params(params)?;
        let result = registry.configure_result();
        if !params.dry_run {
            self.configured.set_connections(&params.connections);
            self.secrets.clear();
            *lock(&self.public_url) = params.public_url.trim().to_string();
            lock(&self.notes)
                .retain(|source, _| registry.entries.iter().any(|e| &e.source == source));
            self.configured.set_registry(registry);
        }
        Ok(result)
    }

    /// Secret `name` of `connection` in `scope_id`, cached until the next configure.
    /// The error never holds a secret.
    pub async fn secret(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
        name: &'static str,
    ) -> Result<Arc<str>, RpcError> {
        self.secrets.get(host, scope_id, connection, name).await
    }

    /// The GraphQL client of `connection` in `scope_id`.
    pub async fn client(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
    ) -> Result<api::Client, RpcError> {
        let conn = self.configured.connection_of_type(connection, NAME)?;
        let config = conn.map(|c| c.config).unwrap_or_default();
        config::check_connection_config(&config)
            .map_err(|e| RpcError::new(Code::Invalid, format!("connection {connection}: {e}")))?;
        let key = self.secret(host, scope_id, connection, API_KEY).await?;
        api::Client::new(&config::api_url(&config), &key)
    }

    /// Serves `webhook.handle` with the host's secrets.
    pub async fn webhook(
        &self,
        host: &sdk::Host,
        params: &WebhookHandleParams,
    ) -> WebhookHandleResult {
        let registry = self.registry();
        let entry = match intake::precheck(&registry, params) {
            Ok(entry) => entry,
            Err(answer) => return sdk::tracker::answer_only(answer),
        };
        let secret = self
            .secret(host, &entry.scope_id, &entry.connection, WEBHOOK_SECRET)
            .await;
        sdk::package::signed_webhook(
            NAME,
            &entry.scope_id,
            &entry.name,
            secret,
            intake::unavailable,
            |secret| intake::process(entry, secret, params, protocol::time::now_ms()),
        )
    }
}

/// Serves `validate` for the package's own types, each problem named by a JSON
/// pointer.
pub fn validate(params: &ValidateParams) -> ValidateResult {
    OWN_TYPES.validate(params)
}

/// The package's own types (entry, route handler and connection), for [`validate`].
const OWN_TYPES: sdk::package::OwnTypes = sdk::package::OwnTypes {
    name: NAME,
    entry: |c| config::parse_entry(c).map(|p| p.describe()),
    route: |c| route::RouteConfig::check(c).map(|r| r.describe()),
    route_message: route::RouteConfig::message,
    connection: config::check_connection_config,
};

/// Serves `task.run`: one pass of the named task.
pub async fn run_task(
    state: &State,
    host: &sdk::Host,
    params: &TaskRunParams,
) -> Result<TaskRunResult, RpcError> {
    match params.task.as_str() {
        status::TASK => status::pass(state, host).await,
        hooks::TASK => hooks::pass(state, host).await,
        other => Err(RpcError::new(
            Code::NotFound,
            format!(
                "no task `{other}` (this package runs `{}` and `{}`)",
                status::TASK,
                hooks::TASK
            ),
        )),
    }
}

/// Serves `check.run`: the named doctor check.
pub async fn run_check(state: &State, host: &sdk::Host, params: &CheckRunParams) -> CheckRunResult {
    match params.check.as_str() {
        hooks::CHECK => hooks::check(state, host).await,
        check::API_KEY => check::run(state, host, params).await,
        other => CheckRunResult {
            status: "warn".into(),
            code: "extension_check_invalid".into(),
            detail: format!("no check `{other}` (this package runs `{}`)", hooks::CHECK),
            ..CheckRunResult::default()
        },
    }
}

/// The package, ready for [`sdk::run`].
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let state = Arc::new(State::default());
    let configure_state = state.clone();
    let webhook_state = state.clone();
    let reconcile_state = state.clone();
    let task_state = state.clone();
    let check_state = state.clone();
    let op_state = state;
    Ok(sdk::Extension::new(MANIFEST)?
        .on_configure(move |ctx, params| {
            let state = configure_state.clone();
            async move {
                let result = state.configure(&params)?;
                if !params.dry_run
                    && state
                        .registry()
                        .entries
                        .iter()
                        .any(|e| e.config.manage_webhook)
                {
                    // The first pass soon after a configure (a new entry or public
                    // URL), besides the task's own interval.
                    tokio::spawn(async move {
                        if let Err(e) = hooks::pass(&state, &ctx.host).await {
                            eprintln!("linear: webhooks pass after configure: {}", e.message);
                        }
                    });
                }
                Ok(result)
            }
        })
        .on::<WebhookHandleParams, _, _>(move |ctx, params| {
            let state = webhook_state.clone();
            async move { Ok(state.webhook(&ctx.host, &params).await) }
        })
        .on::<RouteMatchParams, _, _>(|_ctx, params| async move { route::match_route(&params) })
        .on::<protocol::wire::EventRenderParams, _, _>(|_ctx, params| async move {
            render::serve(&params)
        })
        .on::<OperationCallParams, _, _>(move |ctx, params| {
            let state = op_state.clone();
            async move {
                ops::call(&state, &ctx.host, &params)
                    .await
                    .map_err(ops::for_agent)
            }
        })
        .on::<protocol::wire::IngressReconcileParams, _, _>(move |ctx, params| {
            let state = reconcile_state.clone();
            async move { reconcile::page(&state, &ctx.host, &params).await }
        })
        .on::<TaskRunParams, _, _>(move |ctx, params| {
            let state = task_state.clone();
            async move { run_task(&state, &ctx.host, &params).await }
        })
        .on::<CheckRunParams, _, _>(move |ctx, params| {
            let state = check_state.clone();
            async move { Ok(run_check(&state, &ctx.host, &params).await) }
        })
        .on::<protocol::wire::OperationWaitParams, _, _>(|ctx, params| async move {
            wait::plan(&ctx.host, &params).await
        })
        .on::<ValidateParams, _, _>(|_ctx, params| async move { Ok(validate(&params)) }))
}
