//! The Socket Mode receiver: one [`crate::socket`] client per connection that
//! `socket` entries name (however many entries name it), started and stopped by
//! `configure`.
//!
//! - `open` asks `apps.connections.open` with the connection's `app_token` (resolved
//!   through `secret.resolve` each time, so a new token takes effect at the next
//!   connection) for a fresh WebSocket URL.
//! - `deliver` turns an `events_api` envelope's payload (the Events API
//!   `event_callback`, unsigned: the socket is the app's own) into the Event the
//!   HTTP intake makes for each `socket` entry of the connection
//!   ([`crate::project::event_callback`]: delivery ID = `event_id`, the entry's
//!   source), hands it to the host with `ingress.deliver`, and returns `Ok` only once
//!   the host answered, so the envelope is acknowledged only once it is kept; the same
//!   event again (re-sent, or over the Events API at the entry's path) is the same
//!   delivery and kept once. An `interactive` envelope (a Block Kit press) goes to the
//!   same handler as the HTTP interactivity path ([`crate::actions::handle`]). What
//!   the package does not take (another payload type, a slash command, an event it
//!   ignores, an unreadable payload) is acknowledged with a log line: Slack sending
//!   it again would not change that.
//! - A later `configure` that no longer has a connection's `socket` entries stops its
//!   client; one that changes its `api_url` or scope restarts it; one that changes
//!   only which entries name it hands the new entries to the running client. When
//!   the host's connection closes (shutdown), every client stops.
//! - [`Receivers::status`] is what the doctor check reads (connected, since, last
//!   error).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use protocol::wire::IngressDeliverParams;
use serde_json::Value;
use tokio::sync::watch;

use crate::config::{EntryConfig, SocketConnection};
use crate::socket::{self, Envelope, Status, StatusHandle};
use crate::{api, lock, project, State, APP_TOKEN};

/// One running client.
struct Running {
    scope_id: String,
    api_url: String,
    entries: Arc<Mutex<Vec<EntryConfig>>>,
    stop: watch::Sender<bool>,
    status: StatusHandle,
}

/// The running Socket Mode clients, by connection name.
#[derive(Default)]
pub struct Receivers {
    running: Mutex<HashMap<String, Running>>,
    /// Options for new clients (tests shorten the bounds).
    options: Mutex<Option<socket::Options>>,
}

impl Receivers {
    /// Sets the options new clients get (the default: [`socket::Options::default`]).
    pub fn set_options(&self, options: socket::Options) {
        *lock(&self.options) = Some(options);
    }

    /// The status of `connection`'s client, when one runs.
    pub fn status(&self, connection: &str) -> Option<Status> {
        lock(&self.running).get(connection).map(|r| r.status.get())
    }

    /// The connections with a running client.
    pub fn connections(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.running).keys().cloned().collect();
        names.sort();
        names
    }

    /// Stops every client.
    pub fn stop_all(&self) {
        for (name, r) in lock(&self.running).drain() {
            r.stop.send_replace(true);
            eprintln!("slack: Socket Mode for connection {name} stopped");
        }
    }

    /// Puts `wanted` in force: stops the clients no longer wanted (or whose
    /// `api_url` or scope changed), starts the missing ones, and gives the rest
    /// their entries.
    pub fn apply(&self, state: &Arc<State>, host: &sdk::Host, wanted: Vec<SocketConnection>) {
        let mut running = lock(&self.running);
        running.retain(|name, r| {
            let keep = wanted.iter().any(|w| {
                &w.connection == name && w.api_url == r.api_url && w.scope_id == r.scope_id
            });
            if !keep {
                r.stop.send_replace(true);
                eprintln!("slack: Socket Mode for connection {name} stopped (configuration)");
            }
            keep
        });
        for w in wanted {
            if let Some(r) = running.get(&w.connection) {
                *lock(&r.entries) = w.entries;
                continue;
            }
            let (stop, stopped) = watch::channel(false);
            let status = StatusHandle::new();
            let entries = Arc::new(Mutex::new(w.entries.clone()));
            let options = lock(&self.options).clone().unwrap_or_default();
            eprintln!(
                "slack: Socket Mode for connection {} starting ({} entries)",
                w.connection,
                w.entries.len()
            );
            tokio::spawn(serve(
                Client {
                    state: state.clone(),
                    host: host.clone(),
                    connection: w.connection.clone(),
                    scope_id: w.scope_id.clone(),
                    api_url: w.api_url.clone(),
                    entries: entries.clone(),
                },
                options,
                stop.clone(),
                stopped,
                status.clone(),
            ));
            running.insert(
                w.connection,
                Running {
                    scope_id: w.scope_id,
                    api_url: w.api_url,
                    entries,
                    stop,
                    status,
                },
            );
        }
    }
}

/// What one client's `open` and `deliver` need.
#[derive(Clone)]
struct Client {
    state: Arc<State>,
    host: sdk::Host,
    connection: String,
    scope_id: String,
    api_url: String,
    entries: Arc<Mutex<Vec<EntryConfig>>>,
}

/// Runs one client until it is stopped or the host's connection closes.
async fn serve(
    client: Client,
    options: socket::Options,
    stop: watch::Sender<bool>,
    stopped: watch::Receiver<bool>,
    status: StatusHandle,
) {
    let host = client.host.clone();
    let closing = stop.clone();
    // The host went (shutdown, or it died): stop the socket too.
    let on_close = tokio::spawn(async move {
        host.peer().closed().await;
        closing.send_replace(true);
    });
    let (o, d) = (client.clone(), client);
    socket::run(
        options,
        move || {
            let c = o.clone();
            async move { c.open().await }
        },
        move |env| {
            let c = d.clone();
            async move { c.deliver(env).await }
        },
        stopped,
        status,
    )
    .await;
    on_close.abort();
}

impl Client {
    /// A fresh Socket Mode URL, or why not (never the token or the URL).
    async fn open(&self) -> Result<String, String> {
        let token = self
            .state
            .secret(&self.host, &self.scope_id, &self.connection, APP_TOKEN)
            .await
            .map_err(|e| e.message)?;
        let client = api::Client::new(&self.api_url, &token).map_err(|e| e.message)?;
        api::connections_open(&client)
            .await
            .map_err(|e| e.message.replace("bot_token", "app_token"))
    }

    /// Delivers one envelope (see the module documentation); `Ok` once it is kept
    /// or there is nothing to keep.
    async fn deliver(&self, env: Envelope) -> Result<(), String> {
        match env.kind.as_str() {
            "events_api" => self.events_api(&env).await,
            "interactive" => self.interactive(&env).await,
            other => {
                eprintln!(
                    "slack: Socket Mode envelope {} of type `{other}` acknowledged and not acted on",
                    env.envelope_id
                );
                Ok(())
            }
        }
    }

    async fn events_api(&self, env: &Envelope) -> Result<(), String> {
        let payload = &env.payload;
        let kind = payload
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != "event_callback" {
            eprintln!(
                "slack: Socket Mode envelope {}: payload type `{kind}` is not one this package takes",
                env.envelope_id
            );
            return Ok(());
        }
        let entries = lock(&self.entries).clone();
        for entry in &entries {
            let delivery = match project::event_callback(entry, payload) {
                Ok(project::Verdict::Deliver(d)) => d,
                Ok(project::Verdict::Ignored(why)) => {
                    tracing::debug!(entry = %entry.name, why = %why, "socket mode: event ignored");
                    continue;
                }
                Err(why) => {
                    eprintln!(
                        "slack: Socket Mode envelope {}: unreadable event_callback: {why}",
                        env.envelope_id
                    );
                    return Ok(());
                }
            };
            let delivery_id = delivery.delivery_id.clone();
            let accepted = self
                .host
                .call_typed(&IngressDeliverParams {
                    delivery: delivery.clone(),
                })
                .await
                .map_err(|e| format!("ingress.deliver of {delivery_id}: {e}"))?;
            tracing::info!(
                entry = %entry.name,
                event_id = %delivery_id,
                answer = ?accepted,
                "socket mode: event kept"
            );
            crate::status::after_deliveries(
                &self.host,
                &entry.scope_id,
                &protocol::wire::WebhookHandleResult {
                    deliveries: vec![delivery],
                    ..Default::default()
                },
            );
        }
        Ok(())
    }

    async fn interactive(&self, env: &Envelope) -> Result<(), String> {
        let payload = &env.payload;
        let channel = payload
            .pointer("/channel/id")
            .or_else(|| payload.pointer("/container/channel_id"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let im = channel.starts_with('D');
        let entry = lock(&self.entries)
            .iter()
            .find(|e| channel.is_empty() || e.allows(channel, im))
            .cloned();
        let Some(entry) = entry else {
            eprintln!(
                "slack: Socket Mode envelope {}: an interaction from a conversation no entry takes",
                env.envelope_id
            );
            return Ok(());
        };
        let answer = crate::actions::handle(&self.state, &self.host, &entry, payload).await;
        if answer.status == 503 {
            // Nothing was claimed: let Slack send it again.
            return Err("the interaction could not be claimed (503)".into());
        }
        Ok(())
    }
}

/// After a configure put its entries in force (not a dry run): starts and stops the
/// Socket Mode clients, and records the public URL and the app manifests.
pub fn after_configure(
    state: &Arc<State>,
    host: &sdk::Host,
    params: &protocol::wire::ConfigureParams,
) {
    let registry = state.registry();
    state.receivers().apply(
        state,
        host,
        registry.socket_connections(&params.connections),
    );
    state
        .setup()
        .configure(&registry.entries, &params.public_url);
}

/// The package's own method that answers the app manifest of each connection the
/// entries name (`{"manifests": [{connection, entries, manifest, notes}]}`).
pub const MANIFEST_METHOD: &str = "slack.manifest";

/// Serves [`MANIFEST_METHOD`].
pub fn manifests(state: &State) -> Value {
    let registry = state.registry();
    serde_json::json!({
        "manifests": crate::manifest_gen::manifests(&registry.entries, &state.setup().public_url()),
    })
}
