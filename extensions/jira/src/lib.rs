//! The bundled Jira package (`jira`): Jira Cloud issues given to the agent (assigned
//! to its account, moved to a configured status, or labelled) become Work; the
//! agent reads, comments on and transitions its issue through the package's
//! operations.
//!
//! Built so far (issue 43, see the crate's README):
//!
//! - [`config`] parses the `configure` entries and the `jira` connection's config.
//! - [`signature`] verifies `X-Hub-Signature` (`sha256=` HMAC of the raw body).
//! - [`intake`] serves `webhook.handle`: one delivery to at most one Event.
//! - [`route`] serves `route.match`: an issue is one Work, with the spec's display.
//! - [`api`] is a client of the Jira Cloud platform REST API v3; [`adf`] converts
//!   the agent's text to Atlassian Document Format and back.
//! - [`ops`] serves the toolbelt operations on `operation.call`.
//! - [`render`] serves `event.render`: the Event as markdown for the prompt.

#![warn(missing_docs)]

pub mod adf;
pub mod api;
pub mod config;
pub mod intake;
pub mod ops;
pub mod render;
pub mod route;
pub mod signature;
pub mod status;
pub mod wait;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::{
    ConfigureResult, Connection, OperationCallParams, RouteMatchParams, SecretResolveParams,
    ValidateParams, ValidateResult, WebhookHandleParams, WebhookHandleResult,
};
use protocol::{Code, RpcError};

/// The extension's manifest, as shipped beside the binary.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");
/// The package's name, also its entry, connection and route handler type.
pub const NAME: &str = "jira";
/// The package's Event family.
pub const FAMILY: &str = "jira.issue";
/// The payload schema of its Events.
pub const SCHEMA: &str = "jira.issue.v1";
/// The connection secret that signs webhooks.
pub const WEBHOOK_SECRET: &str = "webhook_secret";
/// The connection secret sent with the email as Basic auth.
pub const API_TOKEN: &str = "api_token";
/// The connection secret sent as a Bearer token.
pub const BEARER_TOKEN: &str = "bearer_token";

/// What the handlers share: the entries and connections of the last configure.
#[derive(Default)]
pub struct State {
    registry: Mutex<Arc<config::Registry>>,
    connections: Mutex<HashMap<String, Connection>>,
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
            *lock(&self.registry) = Arc::new(registry);
        }
        Ok(result)
    }

    /// The non-empty secrets among `names` of `connection` in `scope_id`. The
    /// error never holds a secret.
    pub async fn secrets(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
        names: &[&str],
    ) -> Result<HashMap<String, String>, RpcError> {
        let resolved = host
            .secret_resolve(&SecretResolveParams {
                scope_id: scope_id.to_string(),
                connection: connection.to_string(),
                names: names.iter().map(|n| n.to_string()).collect(),
            })
            .await
            .map_err(|e| {
                RpcError::new(
                    Code::Unavailable,
                    format!("resolving the secrets of connection {connection}: {e}"),
                )
            })?;
        Ok(resolved
            .values
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .collect())
    }

    /// The REST client of `connection` in `scope_id`: its `base_url`, and Basic
    /// auth (`email` + `api_token`) or its `bearer_token`.
    pub async fn client(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
    ) -> Result<api::Client, RpcError> {
        let conn = lock(&self.connections).get(connection).cloned();
        let conn = conn.ok_or_else(|| {
            RpcError::new(
                Code::Invalid,
                format!("no connection {connection} is configured"),
            )
        })?;
        if conn.connection_type != NAME {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "connection {connection} is of type {}, not {NAME}",
                    conn.connection_type
                ),
            ));
        }
        let parsed = config::check_connection_config(&conn.config).map_err(|e| {
            RpcError::new(
                Code::Invalid,
                format!("connection {connection}: {}{}", e.pointer, e.reason),
            )
        })?;
        // Only the secrets the connection sets: the host refuses a name it has no
        // reference for.
        let names: Vec<&str> = [API_TOKEN, BEARER_TOKEN]
            .into_iter()
            .filter(|n| conn.secrets.iter().any(|s| s == n))
            .collect();
        let mut secrets = self.secrets(host, scope_id, connection, &names).await?;
        let auth = match (
            parsed.email,
            secrets.remove(API_TOKEN),
            secrets.remove(BEARER_TOKEN),
        ) {
            (Some(email), Some(token), _) => api::Auth::Basic { email, token },
            (_, _, Some(token)) => api::Auth::Bearer(token),
            _ => {
                return Err(RpcError::new(
                    Code::Unauthorized,
                    format!(
                        "connection {connection} has neither email and api_token nor bearer_token"
                    ),
                ))
            }
        };
        api::Client::new(&parsed.base_url, auth)
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
            Err(answer) => return intake::answer_only(answer),
        };
        match self
            .secrets(host, &entry.scope_id, &entry.connection, &[WEBHOOK_SECRET])
            .await
            .and_then(|mut s| {
                s.remove(WEBHOOK_SECRET).ok_or_else(|| {
                    RpcError::new(
                        Code::Unauthorized,
                        format!("connection {} has no {WEBHOOK_SECRET}", entry.connection),
                    )
                })
            }) {
            Ok(secret) => intake::process(entry, secret.as_bytes(), params),
            Err(e) => {
                eprintln!(
                    "jira: scope {}, entry {}: {}",
                    entry.scope_id, entry.name, e.message
                );
                intake::answer_only(intake::unavailable())
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
                    .push(diagnostic("jira_entry_invalid", e.reason, &e.pointer))
            }
        },
        protocol::wire::validate_kind::ROUTE => match route::RouteConfig::check(&params.config) {
            Ok(parsed) => result.describe.push(parsed.describe()),
            Err(e) => result.diagnostics.push(diagnostic(
                "jira_route_invalid",
                route::RouteConfig::message(&e),
                &e.pointer,
            )),
        },
        protocol::wire::validate_kind::CONNECTION => {
            if let Err(e) = config::check_connection_config(&params.config) {
                result.diagnostics.push(diagnostic(
                    "jira_connection_invalid",
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
        .on::<OperationCallParams, _, _>(move |ctx, params| {
            let state = op_state.clone();
            async move { ops::call(&state, &ctx.host, &params).await }
        })
        .on::<protocol::wire::EventRenderParams, _, _>(|_ctx, params| async move {
            render::serve(&params)
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
