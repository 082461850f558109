//! The bundled Slack package (`slack`): Slack threads become Work, over the Events
//! API (signed HTTP requests through ingressd) or Socket Mode (a WebSocket the
//! package opens itself, delivering through `ingress.deliver`); the agent answers in
//! the thread through the package's operations; people steer the Work from Slack.
//!
//! Built so far (issue 42, see the crate's README):
//!
//! - [`config`] parses the `configure` entries and the `slack` connection's config,
//!   and registers a source and a request path for each entry.
//! - [`signature`] verifies `X-Slack-Signature` (v0) with its timestamp window.
//! - [`intake`] serves `webhook.handle`: verify, answer `url_verification`, and
//!   turn an `event_callback` into at most one Event ([`project`]).
//! - [`route`] serves `route.match`: a thread is one Work, with the spec's display.
//! - [`api`] is a client of Slack's Web API (rate limits, `ok: false` errors).
//! - [`ops`] serves the toolbelt operations on `operation.call`.
//! - [`status`] is the projector (`task.run` `slack.status`): one status message
//!   and a reaction on each Work's thread; [`actions`] turns its Block Kit button
//!   presses into `action.submit`; [`render`] serves `event.render`.
//! - [`socket`] is the Socket Mode client; [`receiver`] runs one per connection
//!   that `socket` entries name, delivering through `ingress.deliver`.
//! - [`check`] serves the doctor checks (`auth.test`, the Socket Mode connection).
//! - [`manifest_gen`] makes the Slack app manifest of each connection from the
//!   configuration (method `slack.manifest`, and a file in the state directory).

#![warn(missing_docs)]

pub mod actions;
pub mod api;
pub mod check;
pub mod config;
pub mod intake;
pub mod manifest_gen;
pub mod ops;
pub mod project;
pub mod receiver;
pub mod render;
pub mod route;
pub mod signature;
pub mod socket;
pub mod status;
pub mod wait;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::{
    ConfigureResult, OperationCallParams, RouteMatchParams, TaskRunParams, ValidateParams,
    ValidateResult, WebhookHandleParams, WebhookHandleResult,
};
use protocol::{Code, RpcError};

/// The extension's manifest, as shipped beside the binary.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The package's name, also its entry, connection and route handler type.
pub const NAME: &str = "slack";

/// The package's Event family.
pub const FAMILY: &str = "slack.message";
/// The payload schema of its Events.
pub const SCHEMA: &str = "slack.message.v1";

/// The connection secret the Web API is called with (`xoxb-…`).
pub const BOT_TOKEN: &str = "bot_token";
/// The connection secret that signs Events API and interactivity requests.
pub const SIGNING_SECRET: &str = "signing_secret";
/// The connection secret Socket Mode connects with (`xapp-…`).
pub const APP_TOKEN: &str = "app_token";

/// What the handlers share: the entries and connections of the last configure, the
/// secret cache and the Web API clients.
#[derive(Default)]
pub struct State {
    configured: sdk::package::Configured<config::Registry>,
    secrets: sdk::secrets::SecretCache,
    clients: Mutex<HashMap<(String, String), api::Client>>,
    receivers: receiver::Receivers,
    setup: manifest_gen::Setup,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// The Socket Mode clients.
    pub fn receivers(&self) -> &receiver::Receivers {
        &self.receivers
    }

    /// The public URL and state directory the app manifests are made with.
    pub fn setup(&self) -> &manifest_gen::Setup {
        &self.setup
    }

    /// The entries in force.
    pub fn registry(&self) -> Arc<config::Registry> {
        self.configured.registry()
    }

    /// Serves `configure`: parses the entries, registers their sources and request
    /// paths, and (unless it is a dry run) puts them in force, dropping every cached
    /// secret and client.
    pub fn configure(
        &self,
        params: &protocol::wire::ConfigureParams,
    ) -> Result<ConfigureResult, RpcError> {
        let registry = config::Registry::from_params(params)?;
        let result = registry.configure_result();
        if !params.dry_run {
            self.configured.set_connections(&params.connections);
            eprintln!(
                "slack: configured {} entries (generation {})",
                registry.entries.len(),
                params.generation
            );
            self.secrets.clear();
            lock(&self.clients).clear();
            self.configured.set_registry(registry);
        }
        Ok(result)
    }

    /// Secret `name` of `connection` in `scope_id`: cached, or resolved through the
    /// host (and cached unless a configure came in between). The error never holds
    /// a secret.
    pub async fn secret(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
        name: &'static str,
    ) -> Result<Arc<str>, RpcError> {
        self.secrets.get(host, scope_id, connection, name).await
    }

    /// The Web API client of `connection` in `scope_id`: kept, or made from the
    /// connection's `api_url` and its `bot_token`.
    pub async fn client(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
    ) -> Result<api::Client, RpcError> {
        let key = (scope_id.to_string(), connection.to_string());
        if let Some(c) = lock(&self.clients).get(&key) {
            return Ok(c.clone());
        }
        let generation = self.secrets.generation();
        let conn = self.configured.connection_of_type(connection, NAME)?;
        let config = conn.map(|c| c.config).unwrap_or_default();
        config::check_connection_config(&config)
            .map_err(|e| RpcError::new(Code::Invalid, format!("connection {connection}: {e}")))?;
        let token = self.secret(host, scope_id, connection, BOT_TOKEN).await?;
        let client = api::Client::new(&config::api_url(&config), &token).map_err(|e| e.to_rpc())?;
        if self.secrets.generation() == generation {
            lock(&self.clients).insert(key, client.clone());
        }
        Ok(client)
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
            .secret(host, &entry.scope_id, &entry.connection, SIGNING_SECRET)
            .await;
        sdk::package::signed_webhook(
            NAME,
            &entry.scope_id,
            &entry.name,
            secret,
            intake::unavailable,
            |secret| intake::process(entry, secret, params, protocol::time::now_ms() / 1000),
        )
    }
}

/// Serves `validate` for the package's own types: an entry's config
/// (`extension`), a route's (`route`) and a connection's (`connection`), each
/// problem named by a JSON pointer. Other kinds and types are answered valid.
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
    params: &protocol::wire::TaskRunParams,
) -> Result<protocol::wire::TaskRunResult, RpcError> {
    match params.task.as_str() {
        status::TASK => status::pass(state, host).await,
        other => Err(RpcError::new(
            Code::NotFound,
            format!("no task `{other}` (this package runs `{}`)", status::TASK),
        )),
    }
}

/// The package, ready for [`sdk::run`].
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let state = Arc::new(State::default());
    let configure_state = state.clone();
    let check_state = state.clone();
    let manifest_state = state.clone();
    let init_state = state.clone();
    let webhook_state = state.clone();
    let task_state = state.clone();
    let render_state = state.clone();
    let op_state = state;
    Ok(sdk::Extension::new(MANIFEST)?
        .on_initialize(move |params| init_state.setup().record_initialize(params))
        .on_configure(move |ctx, params| {
            let state = configure_state.clone();
            async move {
                let result = state.configure(&params)?;
                if !params.dry_run {
                    receiver::after_configure(&state, &ctx.host, &params);
                }
                Ok(result)
            }
        })
        .on::<protocol::wire::CheckRunParams, _, _>(move |ctx, params| {
            let state = check_state.clone();
            async move { Ok(check::run(&state, &ctx.host, &params).await) }
        })
        .method(
            receiver::MANIFEST_METHOD,
            move |_ctx, _params: serde_json::Value| {
                let state = manifest_state.clone();
                async move { Ok(receiver::manifests(&state)) }
            },
        )
        .on::<WebhookHandleParams, _, _>(move |ctx, params| {
            let state = webhook_state.clone();
            async move {
                let mut result = state.webhook(&ctx.host, &params).await;
                actions::after_webhook(&state, &ctx.host, &params, &mut result).await;
                Ok(result)
            }
        })
        .on::<TaskRunParams, _, _>(move |ctx, params| {
            let state = task_state.clone();
            async move { run_task(&state, &ctx.host, &params).await }
        })
        .on::<protocol::wire::EventRenderParams, _, _>(move |ctx, params| {
            let state = render_state.clone();
            async move { render::serve(&state, &ctx.host, &params).await }
        })
        .on::<RouteMatchParams, _, _>(|_ctx, params| async move { route::match_route(&params) })
        .on::<OperationCallParams, _, _>(move |ctx, params| {
            let state = op_state.clone();
            async move {
                ops::call(&state, &ctx.host, &params)
                    .await
                    .map_err(ops::for_agent)
            }
        })
        .on::<protocol::wire::OperationWaitParams, _, _>(|ctx, params| async move {
            wait::plan(&ctx.host, &params).await
        })
        .on::<ValidateParams, _, _>(|_ctx, params| async move { Ok(validate(&params)) }))
}
