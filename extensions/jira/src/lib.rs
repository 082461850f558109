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
//! - [`render`] serves `event.render`: the Event as markdown for the prompt (a
//!   comment's text read from Jira then, [`comment_text`]).
//! - [`reconcile`] serves `ingress.reconcile`: the projects' issues polled since the
//!   checkpoint, through the REST calls of [`poll`]; an Event's identity is its
//!   change's, whichever way it comes.

#![warn(missing_docs)]

pub mod adf;
pub mod api;
pub mod check;
pub mod config;
pub mod intake;
pub mod ops;
pub mod playbooks;
pub mod poll;
pub mod reconcile;
pub mod render;
pub mod route;
pub mod signature;
pub mod status;
pub mod wait;

use std::collections::HashMap;
use std::sync::Arc;

use protocol::wire::{
    ConfigureResult, OperationCallParams, RouteMatchParams, SecretResolveParams, ValidateParams,
    ValidateResult, WebhookHandleParams, WebhookHandleResult,
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
    configured: sdk::package::Configured<config::Registry>,
}

impl State {
    /// The entries in force.
    pub fn registry(&self) -> Arc<config::Registry> {
        self.configured.registry()
    }

    /// Serves `configure`.
    pub fn configure(
        &self,
        params: &protocol::wire::ConfigureParams,
    ) -> Result<ConfigureResult, RpcError> {
        let registry = config::Registry::from_params(params)?;
        let result = registry.configure_result();
        if !params.dry_run {
            self.configured.put(registry, &params.connections);
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
        let conn = self.configured.required_connection(connection, NAME)?;
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
        let secret = self
            .secrets(host, &entry.scope_id, &entry.connection, &[WEBHOOK_SECRET])
            .await
            .and_then(|mut s| {
                s.remove(WEBHOOK_SECRET).ok_or_else(|| {
                    RpcError::new(
                        Code::Unauthorized,
                        format!("connection {} has no {WEBHOOK_SECRET}", entry.connection),
                    )
                })
            });
        sdk::package::signed_webhook(
            NAME,
            &entry.scope_id,
            &entry.name,
            secret,
            intake::unavailable,
            |secret| intake::process(entry, secret, params),
        )
    }
}

/// How long reading a comment's text for a rendering may take (the host gives a
/// rendering 10 s).
pub const RENDER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(6);

/// Puts a comment Event's text into its payload for [`render`]: an Event carries
/// no free text (see [`intake`]), so the comment is read from Jira
/// (`GET …/comment/{id}`) with the Work's connection (else the entry's), bounded by
/// [`RENDER_READ_TIMEOUT`]. A read that fails leaves a line saying where the
/// comment is.
pub async fn comment_text(
    state: &State,
    host: &sdk::Host,
    params: &mut protocol::wire::EventRenderParams,
) {
    let data = &params.event.payload.data;
    let (Some(issue), Some(id)) = (
        data.get("issue_id").and_then(serde_json::Value::as_str),
        data.pointer("/comment/id")
            .and_then(serde_json::Value::as_str),
    ) else {
        return;
    };
    if data.pointer("/comment/text").is_some() || issue.is_empty() || id.is_empty() {
        return;
    }
    let (issue, id) = (issue.to_string(), id.to_string());
    let connection = match params.connection.as_str() {
        "" => state
            .registry()
            .entries
            .iter()
            .find(|e| e.source == params.event.source)
            .map(|e| e.connection.clone())
            .unwrap_or_default(),
        c => c.to_string(),
    };
    let read = async {
        let client = state
            .client(host, &params.event.scope_id, &connection)
            .await?;
        poll::comment(&client, &issue, &id).await
    };
    let text = match tokio::time::timeout(RENDER_READ_TIMEOUT, read).await {
        Ok(Ok(c)) => match c.get("body") {
            Some(serde_json::Value::String(t)) => t.clone(),
            Some(b) => adf::to_text(b, intake::MAX_TEXT_BYTES),
            None => String::new(),
        },
        Ok(Err(e)) => format!(
            "(comment {id} not read from Jira: {}; jira.read_issue has it)",
            e.message
        ),
        Err(_) => format!(
            "(comment {id} not read from Jira within {} s (RENDER_READ_TIMEOUT); jira.read_issue has it)",
            RENDER_READ_TIMEOUT.as_secs()
        ),
    };
    let (text, cut) = intake::truncate(&text, intake::MAX_TEXT_BYTES);
    params.event.payload.data["comment"]["text"] = serde_json::json!(text);
    params.event.payload.data["comment"]["text_truncated"] = serde_json::json!(cut);
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
    connection: |c| config::check_connection_config(c).map(|_| ()),
};

/// The package, ready for [`sdk::run`].
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let state = Arc::new(State::default());
    let configure_state = state.clone();
    let webhook_state = state.clone();
    let task_state = state.clone();
    let reconcile_state = state.clone();
    let render_state = state.clone();
    let check_state = state.clone();
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
        .on::<protocol::wire::EventRenderParams, _, _>(move |ctx, mut params| {
            let state = render_state.clone();
            async move {
                comment_text(&state, &ctx.host, &mut params).await;
                render::serve(&params)
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
        .on::<protocol::wire::CheckRunParams, _, _>(move |ctx, params| {
            let state = check_state.clone();
            async move { Ok(check::run(&state, &ctx.host, &params).await) }
        })
        .on::<protocol::wire::OperationWaitParams, _, _>(|ctx, params| async move {
            wait::plan(&ctx.host, &params).await
        })
        .on::<ValidateParams, _, _>(|_ctx, params| async move { Ok(validate(&params)) }))
}
