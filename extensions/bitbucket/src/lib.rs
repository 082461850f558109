//! The bundled Bitbucket package (`bitbucket`): Bitbucket Cloud pull requests whose
//! comments mention the agent, or whose branch names a Jira issue, become Work; the
//! agent reads, comments on (inline too), opens, approves and reviews pull requests
//! through the package's operations.
//!
//! Built so far (issue 44, first step; see the crate's README):
//!
//! - [`config`] parses the `configure` entries and the `bitbucket` connection's config.
//! - [`intake`] serves `webhook.handle`: a delivery verified by `X-Hub-Signature`,
//!   identified by the change it reports (else `X-Request-UUID`), to at most one
//!   Event.
//! - [`route`] serves `route.match`: one Work per pull request, with the spec's display.
//! - [`api`] is a client of the Bitbucket Cloud REST API 2.0.
//! - [`ops`] serves the toolbelt operations on `operation.call`.
//! - [`render`] serves `event.render`: the Event as markdown for the prompt.
//! - [`wait`] plans `bitbucket.wait_reply` (`operation.wait`): a person's comment or
//!   change request; and serves `dependency.filter` for the package's waits.
//! - [`build`] plans `bitbucket.wait_build`: the builds of the pull request's head
//!   commit finished.
//! - [`link`] links a pull request the agent opens to its Work.
//! - [`hooks`] is the `bitbucket.webhooks` task (an entry's managed webhooks, one
//!   per repository) and the `webhooks` doctor check.
//! - [`reconcile`] serves `ingress.reconcile`: pull requests updated and comments
//!   made since the checkpoint, polled, each change under the identity a webhook of
//!   it carries.
//! - [`credential`] serves `run.environment` and `run.credential`: a run's own git
//!   credential (the connection's token or app password) through
//!   `open-conduit git-credential bitbucket`.

#![warn(missing_docs)]

pub mod api;
pub mod build;
pub mod config;
pub mod credential;
pub mod hooks;
pub mod intake;
pub mod link;
pub mod ops;
pub mod reconcile;
pub mod render;
pub mod route;
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
pub const NAME: &str = "bitbucket";
/// The pull request Event family.
pub const PULLREQUEST: &str = "bitbucket.pullrequest";
/// The commit status Event family.
pub const COMMIT_STATUS: &str = "bitbucket.commit_status";
/// The issue Event family.
pub const ISSUE: &str = "bitbucket.issue";
/// The package's Event families (each with schema `<family>.v1`).
pub const FAMILIES: [&str; 3] = [PULLREQUEST, COMMIT_STATUS, ISSUE];
/// The connection secret that signs webhooks.
pub const WEBHOOK_SECRET: &str = "webhook_secret";
/// The connection secret sent as a Bearer token (workspace or repository access token).
pub const TOKEN: &str = "token";
/// The connection secret sent with the username as Basic auth.
pub const APP_PASSWORD: &str = "app_password";

/// What the handlers share: the entries and connections of the last configure, and
/// the secrets resolved under it.
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

    /// A secret of `connection` in `scope_id`, through the cache.
    pub async fn secret(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
        name: &'static str,
    ) -> Result<String, RpcError> {
        Ok(self
            .secrets
            .get(host, scope_id, connection, name)
            .await?
            .to_string())
    }

    /// Serves `configure`.
    pub fn configure(
        &self,
        params: &protocol::wire::ConfigureParams,
    ) -> Result<ConfigureResult, RpcError> {
        let registry = config::Registry::from_params(params)?;
        let result = registry.configure_result();
        if !params.dry_run {
            *lock(&self.public_url) = params.public_url.trim().to_string();
            lock(&self.notes)
                .retain(|source, _| registry.entries.iter().any(|e| &e.source == source));
            self.configured.put(registry, &params.connections);
            self.secrets.clear();
        }
        Ok(result)
    }

    /// The REST client of `connection` in `scope_id`: its `api_url`, and its `token`
    /// (Bearer) or its `username` and `app_password` (Basic).
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
        let has = |n: &str| conn.secrets.iter().any(|s| s == n);
        let auth = if has(TOKEN) {
            let token = self.secrets.get(host, scope_id, connection, TOKEN).await?;
            api::Auth::Bearer(token.to_string())
        } else if let (true, Some(username)) = (has(APP_PASSWORD), parsed.username) {
            let password = self
                .secrets
                .get(host, scope_id, connection, APP_PASSWORD)
                .await?;
            api::Auth::Basic {
                username,
                password: password.to_string(),
            }
        } else {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "connection {connection} has neither a token nor a username and app_password"
                ),
            ));
        };
        api::Client::new(&parsed.api_url, auth)
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
            .secrets
            .get(host, &entry.scope_id, &entry.connection, WEBHOOK_SECRET)
            .await;
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

/// Serves `task.run`: one pass of the named task.
pub async fn run_task(
    state: &State,
    host: &sdk::Host,
    params: &TaskRunParams,
) -> Result<TaskRunResult, RpcError> {
    match params.task.as_str() {
        hooks::TASK => hooks::pass(state, host).await,
        other => Err(RpcError::new(
            Code::Invalid,
            format!("no task `{other}` (this package runs `{}`)", hooks::TASK),
        )),
    }
}

/// Serves `check.run`: the named doctor check.
pub async fn run_check(state: &State, host: &sdk::Host, params: &CheckRunParams) -> CheckRunResult {
    match params.check.as_str() {
        hooks::CHECK => hooks::check(state, host).await,
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
    let task_state = state.clone();
    let check_state = state.clone();
    let reconcile_state = state.clone();
    let env_state = state.clone();
    let cred_state = state.clone();
    let wait_state = state.clone();
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
                            eprintln!("bitbucket: webhooks pass after configure: {}", e.message);
                        }
                    });
                }
                Ok(result)
            }
        })
        .on::<TaskRunParams, _, _>(move |ctx, params| {
            let state = task_state.clone();
            async move { run_task(&state, &ctx.host, &params).await }
        })
        .on::<CheckRunParams, _, _>(move |ctx, params| {
            let state = check_state.clone();
            async move { Ok(run_check(&state, &ctx.host, &params).await) }
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
        .on::<protocol::wire::OperationWaitParams, _, _>(move |ctx, params| {
            let state = wait_state.clone();
            async move { wait::plan(&state, &ctx.host, &params).await }
        })
        .on::<protocol::wire::DependencyFilterParams, _, _>(|_ctx, params| async move {
            wait::filter(&params)
        })
        .on::<protocol::wire::RunEnvironmentParams, _, _>(move |_ctx, params| {
            let state = env_state.clone();
            async move { credential::environment(&state, &params) }
        })
        .on::<protocol::wire::RunCredentialParams, _, _>(move |ctx, params| {
            let state = cred_state.clone();
            async move { credential::credential(&state, &ctx.host, &params).await }
        })
        .on::<protocol::wire::IngressReconcileParams, _, _>(move |ctx, params| {
            let state = reconcile_state.clone();
            async move { reconcile::page(&state, &ctx.host, &params).await }
        })
        .on::<ValidateParams, _, _>(|_ctx, params| async move { Ok(validate(&params)) }))
}
