//! The bundled GitHub extension (`github`): signed repository webhooks in,
//! Events of seven families out, and the `github` route handler that turns them
//! into Work.
//!
//! - [`config`] parses the `configure` entries (one per repository webhook) and
//!   registers a source and a webhook path for each.
//! - [`signature`] verifies `X-Hub-Signature-256`.
//! - [`webhook`] serves `webhook.handle`: verify, classify, project, deliver.
//! - [`project`] turns a GitHub payload into one [`protocol::wire::IngressEvent`]
//!   (the payload projection of each family is in the crate's README).
//! - [`route`] serves `route.match`: route filters, keys and the Work display.
//! - [`render`] serves `event.render`: an Event of the package's families as
//!   Markdown for an agent's prompt, with what the API adds (a review's comments,
//!   a comment's thread, a failed check's output).
//!
//! - [`api`] is a client of GitHub's REST API (token or GitHub App auth,
//!   pagination, conditional GETs, rate limits); [`app`] signs the App's JWT.
//! - [`ops`] serves the toolbelt operations on `operation.call` (each acting on the
//!   [`target`] its input names); [`waits`] serves
//!   `github.wait` on `operation.wait` and the `github.waits` task that wakes it;
//!   [`filter`] serves `dependency.filter`: whether a delivery satisfies a wait's plan.
//! - [`reconcile`] serves `ingress.reconcile`: the webhook's failed deliveries,
//!   read back from GitHub's delivery log.
//! - [`commands`] turns `/oc stop` and `/oc retry` comments from people with write
//!   permission into the host's actions on the Work (`action.submit`).
//! - [`hooks`] finds the webhook an entry receives, keeps a managed one as
//!   configured (the `github.webhooks` task on `task.run`) and reports it to doctor
//!   (`check.run`).

#![warn(missing_docs)]

pub mod api;
pub mod app;
pub mod authority;
pub mod commands;
pub mod config;
pub mod credential;
pub mod error;
pub mod filter;
pub mod hooks;
pub mod link;
pub mod ops;
pub mod playbooks;
pub mod project;
pub mod reconcile;
pub mod render;
pub mod route;
pub mod signature;
pub mod status;
pub mod target;
pub mod waits;
pub mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::{
    CheckRunParams, CheckRunResult, ConfigureResult, Connection, IngressReconcileParams,
    OperationCallParams, OperationWaitParams, RouteMatchParams, RunCredentialParams,
    RunEnvironmentParams, SecretResolveParams, SegmentEndedParams, TaskRunParams, TaskRunResult,
    ValidateParams, ValidateResult, WebhookHandleParams, WorkAnnotateParams,
};
use protocol::RpcError;

/// The extension's manifest, as shipped beside the binary.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The extension's name, also its entry, connection and route handler type.
pub const NAME: &str = "github";

/// The secret of a connection that signs webhook deliveries.
pub const WEBHOOK_SECRET: &str = "webhook_secret";

/// The secret of a connection that authenticates API calls by token.
pub const TOKEN: &str = "token";

/// The secret of a connection that holds a GitHub App's private key (PEM).
pub const PRIVATE_KEY: &str = "private_key";

/// What a kept note is about: the last reconcile pass.
pub const NOTE_RECONCILE: &str = "reconcile";
/// What a kept note is about: the last `webhooks` task pass.
pub const NOTE_WEBHOOK: &str = "webhooks";

/// The Event families: seven fed by GitHub webhook events, and `github.wait`, which
/// the package delivers itself when a `github.wait` operation's condition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `issues` → `github.issue`.
    Issue,
    /// `issue_comment` → `github.issue_comment`.
    IssueComment,
    /// `pull_request` → `github.pull_request`.
    PullRequest,
    /// `pull_request_review` → `github.pull_request_review`.
    PullRequestReview,
    /// `pull_request_review_comment` → `github.pull_request_review_comment`.
    PullRequestReviewComment,
    /// `check_run` → `github.check_run`.
    CheckRun,
    /// `check_suite` → `github.check_suite`.
    CheckSuite,
    /// No webhook event: what wakes a `github.wait` (`github.wait.checks_completed`,
    /// `github.wait.reviewed`, `github.wait.replied`), see [`waits`].
    Wait,
}

impl Family {
    /// Every family, in manifest order.
    pub const ALL: [Family; 8] = [
        Family::Issue,
        Family::IssueComment,
        Family::PullRequest,
        Family::PullRequestReview,
        Family::PullRequestReviewComment,
        Family::CheckRun,
        Family::CheckSuite,
        Family::Wait,
    ];

    /// The family name (`github.issue`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Issue => "github.issue",
            Family::IssueComment => "github.issue_comment",
            Family::PullRequest => "github.pull_request",
            Family::PullRequestReview => "github.pull_request_review",
            Family::PullRequestReviewComment => "github.pull_request_review_comment",
            Family::CheckRun => "github.check_run",
            Family::CheckSuite => "github.check_suite",
            Family::Wait => "github.wait",
        }
    }

    /// The payload schema the family's Events carry (`github.issue.v1`).
    pub fn schema(self) -> &'static str {
        match self {
            Family::Issue => "github.issue.v1",
            Family::IssueComment => "github.issue_comment.v1",
            Family::PullRequest => "github.pull_request.v1",
            Family::PullRequestReview => "github.pull_request_review.v1",
            Family::PullRequestReviewComment => "github.pull_request_review_comment.v1",
            Family::CheckRun => "github.check_run.v1",
            Family::CheckSuite => "github.check_suite.v1",
            Family::Wait => "github.wait.v1",
        }
    }

    /// The GitHub webhook event (`X-GitHub-Event`) that feeds it (none for
    /// [`Family::Wait`]: "").
    pub fn github_event(self) -> &'static str {
        match self {
            Family::Issue => "issues",
            Family::IssueComment => "issue_comment",
            Family::PullRequest => "pull_request",
            Family::PullRequestReview => "pull_request_review",
            Family::PullRequestReviewComment => "pull_request_review_comment",
            Family::CheckRun => "check_run",
            Family::CheckSuite => "check_suite",
            Family::Wait => "",
        }
    }

    /// The family a GitHub webhook event feeds, if any.
    pub fn from_github_event(event: &str) -> Option<Family> {
        Family::ALL
            .into_iter()
            .find(|f| !f.github_event().is_empty() && f.github_event() == event)
    }

    /// The family an Event type belongs to: the type is the family name or
    /// `<family>.<action>`.
    pub fn of_type(event_type: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| {
            event_type
                .strip_prefix(f.name())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    }

    /// The family names, in manifest order.
    pub fn names() -> Vec<String> {
        Family::ALL.iter().map(|f| f.name().to_string()).collect()
    }
}

/// Webhook secrets resolved through `secret.resolve`, per (scope, connection),
/// for one configuration: every `configure` drops them.
#[derive(Default)]
struct Secrets {
    /// Bumped by every configure, so a resolve that started before one does
    /// not cache what it got.
    generation: u64,
    values: HashMap<(String, String), Arc<[u8]>>,
}

/// What the handlers share: the entries of the last configure and the secret
/// cache.
#[derive(Default)]
pub struct State {
    registry: Mutex<Arc<config::Registry>>,
    secrets: Mutex<Secrets>,
    /// The connections of the last configure, by name.
    connections: Mutex<HashMap<String, Connection>>,
    /// API clients per (scope, connection), dropped by every configure.
    clients: Mutex<HashMap<(String, String), api::Client>>,
    /// The login each (scope, connection) acts as on GitHub, dropped by every
    /// configure (see [`State::acting_login`]).
    logins: Mutex<HashMap<(String, String), String>>,
    /// The public URL of the last configure (empty: none).
    public_url: Mutex<String>,
    /// The last failure of each (source, pass kind), for doctor.
    notes: Mutex<BTreeMap<(String, &'static str), String>>,
    /// Held by a `webhooks` pass: passes never overlap.
    webhook_pass: tokio::sync::Mutex<()>,
    /// The installation tokens minted for runs' own git, by execution.
    issued: credential::Issued,
    /// Held while a status comment is posted or edited ([`status`]).
    status_lock: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// The entries in force.
    pub fn registry(&self) -> Arc<config::Registry> {
        lock(&self.registry).clone()
    }

    /// The public URL of the last configure (empty: none).
    pub fn public_url(&self) -> String {
        lock(&self.public_url).clone()
    }

    /// Keeps (or, with `None`, clears) the last failure of a pass of `kind` over
    /// `source`.
    pub fn note(&self, source: &str, kind: &'static str, why: Option<String>) {
        let mut notes = lock(&self.notes);
        match why {
            Some(why) => notes.insert((source.to_string(), kind), why),
            None => notes.remove(&(source.to_string(), kind)),
        };
    }

    /// The kept failures of `source`'s passes: (kind, why).
    pub fn notes_of(&self, source: &str) -> Vec<(&'static str, String)> {
        lock(&self.notes)
            .iter()
            .filter(|((s, _), _)| s == source)
            .map(|((_, k), why)| (*k, why.clone()))
            .collect()
    }

    /// Replaces the entries and drops every cached secret.
    pub fn replace(&self, registry: config::Registry) {
        let mut secrets = lock(&self.secrets);
        secrets.generation += 1;
        secrets.values.clear();
        lock(&self.clients).clear();
        lock(&self.logins).clear();
        *lock(&self.registry) = Arc::new(registry);
    }

    /// The login `connection` acts as on GitHub (a token's user, an App's
    /// `<slug>[bot]`): kept, or asked of GitHub with `client` and kept until the
    /// next configure. A failed ask is not kept.
    pub async fn acting_login(
        &self,
        client: &api::Client,
        scope_id: &str,
        connection: &str,
    ) -> Result<String, api::ApiError> {
        let key = (scope_id.to_string(), connection.to_string());
        if let Some(login) = lock(&self.logins).get(&key) {
            return Ok(login.clone());
        }
        let login = client.acting_login().await?;
        lock(&self.logins).insert(key, login.clone());
        Ok(login)
    }

    /// The API client of `connection` in `scope_id`: kept, or made from the
    /// connection's config (`api_url`, `app_id`, `installation_id`) and its
    /// secrets (`private_key` for an App, else `token`) resolved through the host.
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
        let generation = lock(&self.secrets).generation;
        let conn = lock(&self.connections).get(connection).cloned();
        let config = conn.as_ref().map(|c| c.config.clone()).unwrap_or_default();
        if let Some(c) = &conn {
            if c.connection_type != NAME {
                return Err(RpcError::new(
                    protocol::Code::Invalid,
                    format!(
                        "connection {connection} is of type {}, not {NAME}",
                        c.connection_type
                    ),
                ));
            }
        }
        let app = config::AppConfig::parse(&config).map_err(|e| {
            RpcError::new(
                protocol::Code::Invalid,
                format!("connection {connection}: {e}"),
            )
        })?;
        let name = if app.is_some() { PRIVATE_KEY } else { TOKEN };
        let resolved = host
            .secret_resolve(&SecretResolveParams {
                scope_id: scope_id.to_string(),
                connection: connection.to_string(),
                names: vec![name.to_string()],
            })
            .await
            .map_err(|e| {
                RpcError::new(
                    protocol::Code::Unavailable,
                    format!("resolving {name} of connection {connection}: {e}"),
                )
            })?;
        let secret = resolved
            .values
            .get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                RpcError::new(
                    protocol::Code::Unauthorized,
                    format!("connection {connection} has no {name}"),
                )
            })?;
        let credentials = match app {
            Some(app) => api::Credentials::App(Arc::new(
                app::AppCredentials::new(&app.app_id, app.installation_id, secret)
                    .map_err(|e| e.to_rpc())?,
            )),
            None => api::Credentials::Token(secret.clone()),
        };
        let api_url = config
            .get("api_url")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(api::DEFAULT_API_URL);
        let client = api::Client::new(api_url, credentials).map_err(|e| e.to_rpc())?;
        if lock(&self.secrets).generation == generation {
            lock(&self.clients).insert(key, client.clone());
        }
        Ok(client)
    }

    /// Serves `configure`: parses the entries, registers their sources and
    /// webhook paths, and (unless it is a dry run) puts them in force.
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
            *lock(&self.public_url) = params.public_url.trim().to_string();
            eprintln!(
                "github: configured {} entries (generation {}, public_url {:?})",
                registry.entries.len(),
                params.generation,
                params.public_url
            );
            let sources: Vec<String> = registry.entries.iter().map(|e| e.source.clone()).collect();
            lock(&self.notes).retain(|(s, _), _| sources.contains(s));
            self.replace(registry);
        }
        Ok(result)
    }

    /// The webhook secret of `connection` in `scope_id`: cached, or resolved
    /// through the host (and cached unless a configure came in between).
    pub async fn webhook_secret(
        &self,
        host: &sdk::Host,
        scope_id: &str,
        connection: &str,
    ) -> Result<Arc<[u8]>, String> {
        let key = (scope_id.to_string(), connection.to_string());
        let generation = {
            let secrets = lock(&self.secrets);
            if let Some(v) = secrets.values.get(&key) {
                return Ok(v.clone());
            }
            secrets.generation
        };
        let resolved = host
            .secret_resolve(&SecretResolveParams {
                scope_id: scope_id.to_string(),
                connection: connection.to_string(),
                names: vec![WEBHOOK_SECRET.to_string()],
            })
            .await
            .map_err(|e| format!("resolving {WEBHOOK_SECRET} of connection {connection}: {e}"))?;
        let value = resolved
            .values
            .get(WEBHOOK_SECRET)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                format!("connection {connection} resolved no value for {WEBHOOK_SECRET}")
            })?;
        let value: Arc<[u8]> = Arc::from(value.as_bytes());
        let mut secrets = lock(&self.secrets);
        if secrets.generation == generation {
            secrets.values.insert(key, value.clone());
        }
        Ok(value)
    }

    /// Serves `webhook.handle` with the host's secrets.
    pub async fn webhook(
        &self,
        host: &sdk::Host,
        params: &WebhookHandleParams,
    ) -> protocol::wire::WebhookHandleResult {
        let registry = self.registry();
        let entry = match webhook::precheck(&registry, params) {
            Ok(entry) => entry,
            Err(answer) => return webhook::answer_only(answer),
        };
        match self
            .webhook_secret(host, &entry.scope_id, &entry.connection)
            .await
        {
            Ok(secret) => webhook::process(entry, &secret, params),
            Err(why) => {
                // stderr is the extension's log; the answer says no more.
                eprintln!(
                    "github: scope {}, entry {}: {why}",
                    entry.scope_id, entry.name
                );
                webhook::answer_only(webhook::unavailable())
            }
        }
    }
}

/// Serves `validate` for the extension's own types: an entry's config
/// (`extension`), a route's config (`route`) and a connection's config
/// (`connection`). Other kinds and types are answered valid.
pub fn validate(params: &ValidateParams) -> ValidateResult {
    OWN_TYPES.validate(params)
}

/// The package's own types (entry, route handler and connection), for [`validate`].
const OWN_TYPES: sdk::package::OwnTypes = sdk::package::OwnTypes {
    name: NAME,
    entry: |c| config::EntryConfig::parse_config(c).map(|p| p.describe()),
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
        hooks::TASK => hooks::pass(state, host).await,
        waits::TASK => waits::pass(state, host).await,
        other => Err(RpcError::new(
            protocol::Code::NotFound,
            format!(
                "no task `{other}` (this package runs `{}` and `{}`)",
                hooks::TASK,
                waits::TASK
            ),
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

/// The extension, ready for [`sdk::run`].
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let state = Arc::new(State::default());
    let configure_state = state.clone();
    let webhook_state = state.clone();
    let reconcile_state = state.clone();
    let task_state = state.clone();
    let check_state = state.clone();
    let wait_state = state.clone();
    let env_state = state.clone();
    let cred_state = state.clone();
    let seg_state = state.clone();
    let status_state = state.clone();
    let render_state = state.clone();
    let op_state = state;
    Ok(sdk::Extension::new(MANIFEST)?
        .on::<RunEnvironmentParams, _, _>(move |_ctx, params| {
            let state = env_state.clone();
            async move { credential::environment(&state, &params) }
        })
        .on::<RunCredentialParams, _, _>(move |ctx, params| {
            let state = cred_state.clone();
            async move { credential::credential(&state, &ctx.host, &params).await }
        })
        .on::<WorkAnnotateParams, _, _>(move |ctx, params| {
            let state = status_state.clone();
            async move { status::annotate(&state, &ctx.host, &params).await }
        })
        .on::<SegmentEndedParams, _, _>(move |ctx, params| {
            let state = seg_state.clone();
            async move { credential::segment_ended(&state, &ctx.host, &params).await }
        })
        .on_configure(move |ctx, params| {
            let state = configure_state.clone();
            async move {
                let result = state.configure(&params)?;
                if !params.dry_run && state.registry().entries.iter().any(|e| e.manage_webhook) {
                    // The first pass soon after a configure (a new entry or
                    // public URL), besides the task's own interval.
                    tokio::spawn(async move {
                        if let Err(e) = hooks::pass(&state, &ctx.host).await {
                            eprintln!("github: webhooks pass after configure: {}", e.message);
                        }
                    });
                }
                Ok(result)
            }
        })
        .on::<WebhookHandleParams, _, _>(move |ctx, params| {
            let state = webhook_state.clone();
            async move {
                let result = state.webhook(&ctx.host, &params).await;
                commands::spawn_after(&state, &ctx.host, &params, &result);
                Ok(result)
            }
        })
        .on::<IngressReconcileParams, _, _>(move |ctx, params| {
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
        .on::<RouteMatchParams, _, _>(|_ctx, params| async move { route::match_route(&params) })
        .on::<protocol::wire::EventRenderParams, _, _>(move |ctx, params| {
            let state = render_state.clone();
            async move { render::serve(&state, &ctx.host, &params).await }
        })
        .on::<protocol::wire::DependencyFilterParams, _, _>(|_ctx, params| async move {
            filter::filter(&params)
        })
        .on::<OperationCallParams, _, _>(move |ctx, params| {
            let state = op_state.clone();
            async move {
                ops::call(&state, &ctx.host, &params)
                    .await
                    .map_err(ops::for_agent)
            }
        })
        .on::<OperationWaitParams, _, _>(move |ctx, params| {
            let state = wait_state.clone();
            async move {
                waits::plan(&state, &ctx.host, &params)
                    .await
                    .map_err(ops::for_agent)
            }
        })
        .on::<ValidateParams, _, _>(|_ctx, params| async move { Ok(validate(&params)) }))
}
