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
//! - [`reconcile`] serves `ingress.reconcile`: issues polled since the checkpoint.
//! - [`status`] is the projector (`task.run` of `linear.status`): a comment on
//!   the issue showing the Work's state, edited in place.
//! - [`wait`] serves `operation.wait` (`linear.wait_reply`).

#![warn(missing_docs)]

pub mod api;
pub mod config;
pub mod intake;
pub mod ops;
pub mod project;
pub mod reconcile;
pub mod render;
pub mod route;
pub mod status;
pub mod wait;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::{
    ConfigureResult, Connection, OperationCallParams, RouteMatchParams, ValidateParams,
    ValidateResult, WebhookHandleParams, WebhookHandleResult,
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
    registry: Mutex<Arc<config::Registry>>,
    connections: Mutex<HashMap<String, Connection>>,
    secrets: sdk::secrets::SecretCache,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// The entries in force.
    pub fn registry(&self) -> Arc<config::Registry> {
        lock(&self.registry).clone()
    }

    /// Serves `configure`.
    pub fn configure(
        &self,
        params: &protocol::wire::ConfigureParams,
    ) -> Result<ConfigureResult, RpcError> {
        let registry = config::Registry::from_params(params)?;
        let result = registry.configure_result();
        if !params.dry_run {
            *lock(&self.connections) = params
                .connections
                .iter()
                .map(|c| (c.name.clone(), c.clone()))
                .collect();
            self.secrets.clear();
            *lock(&self.registry) = Arc::new(registry);
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
        let conn = lock(&self.connections).get(connection).cloned();
        if let Some(c) = &conn {
            if c.connection_type != NAME {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "connection {connection} is of type {}, not {NAME}",
                        c.connection_type
                    ),
                ));
            }
        }
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
        match self
            .secret(host, &entry.scope_id, &entry.connection, WEBHOOK_SECRET)
            .await
        {
            Ok(secret) => {
                intake::process(entry, secret.as_bytes(), params, protocol::time::now_ms())
            }
            Err(e) => {
                eprintln!(
                    "linear: scope {}, entry {}: {}",
                    entry.scope_id, entry.name, e.message
                );
                sdk::tracker::answer_only(intake::unavailable())
            }
        }
    }
}

/// Serves `validate` for the package's own types, each problem named by a JSON
/// pointer.
pub fn validate(params: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if params.type_name != NAME {
        return result;
    }
    let diagnostic = |code: &str, message: String, path: &str| protocol::wire::Diagnostic {
        code: code.to_string(),
        message,
        path: path.to_string(),
    };
    match params.kind.as_str() {
        protocol::wire::validate_kind::EXTENSION => match config::parse_entry(&params.config) {
            Ok(parsed) => result.describe.push(parsed.describe()),
            Err(e) => {
                result
                    .diagnostics
                    .push(diagnostic("linear_entry_invalid", e.reason, &e.pointer))
            }
        },
        protocol::wire::validate_kind::ROUTE => match route::RouteConfig::check(&params.config) {
            Ok(parsed) => result.describe.push(parsed.describe()),
            Err(e) => result.diagnostics.push(diagnostic(
                "linear_route_invalid",
                route::RouteConfig::message(&e),
                &e.pointer,
            )),
        },
        protocol::wire::validate_kind::CONNECTION => {
            if let Err(e) = config::check_connection_config(&params.config) {
                result.diagnostics.push(diagnostic(
                    "linear_connection_invalid",
                    e.reason,
                    &e.pointer,
                ));
            }
        }
        _ => {}
    }
    result
}

/// The package, ready for [`sdk::run`].
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let state = Arc::new(State::default());
    let configure_state = state.clone();
    let webhook_state = state.clone();
    let reconcile_state = state.clone();
    let task_state = state.clone();
    let op_state = state;
    Ok(sdk::Extension::new(MANIFEST)?
        .on_configure(move |_ctx, params| {
            let state = configure_state.clone();
            async move { state.configure(&params) }
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
        .on::<protocol::wire::TaskRunParams, _, _>(move |ctx, params| {
            let state = task_state.clone();
            async move {
                match params.task.as_str() {
                    status::TASK => status::pass(&state, &ctx.host).await,
                    other => Err(RpcError::new(
                        Code::NotFound,
                        format!("no task `{other}` (this package runs `{}`)", status::TASK),
                    )),
                }
            }
        })
        .on::<protocol::wire::OperationWaitParams, _, _>(|ctx, params| async move {
            wait::plan(&ctx.host, &params).await
        })
        .on::<ValidateParams, _, _>(|_ctx, params| async move { Ok(validate(&params)) }))
}
