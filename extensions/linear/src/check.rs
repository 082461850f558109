//! The doctor's check (`check.run`) [`API_KEY`]: for each connection the entries
//! name, `viewer` (`OcViewer`) with its api_key, asked even while the key is held
//! back after a refusal. A key Linear refuses (HTTP 401, `AUTHENTICATION_ERROR`),
//! a forbidden or rate limited call, or a key that cannot be resolved fails the
//! check, the detail naming the connection, Linear's answer and the remedy. Each
//! connection's call is bounded by [`CHECK_TIMEOUT`].
//!
//! `open-conduit doctor` shows the detail only, so the detail carries everything
//! (one sentence per connection, problems first).

use std::time::Duration;

use protocol::wire::{CheckRunParams, CheckRunResult};
use serde_json::{json, Value};

use crate::{api, State};

/// The check of the connections' keys.
pub const API_KEY: &str = "api_key";
/// The longest one connection's call may take in the check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the operator makes a key.
const REMEDY: &str = "put a valid Linear API key (Linear: Settings, Security & access, \
     Personal API keys; or an OAuth token) in the connection's api_key and apply the \
     configuration";

/// Serves `check.run`.
pub async fn run(state: &State, host: &sdk::Host, params: &CheckRunParams) -> CheckRunResult {
    match params.check.as_str() {
        API_KEY => api_key(state, host).await,
        other => CheckRunResult {
            status: "warn".into(),
            code: "extension_check_invalid".into(),
            detail: format!("no check `{other}` (this package runs `{API_KEY}`)"),
            ..CheckRunResult::default()
        },
    }
}

/// `viewer` for each connection the entries name.
async fn api_key(state: &State, host: &sdk::Host) -> CheckRunResult {
    let registry = state.registry();
    let seen = sdk::tracker::distinct_connections(
        registry
            .entries
            .iter()
            .map(|e| (e.connection.as_str(), e.scope_id.as_str())),
    );
    let mut lines = Vec::new();
    for (connection, scope_id) in seen {
        let outcome = tokio::time::timeout(CHECK_TIMEOUT, async {
            let client = state
                .client(host, scope_id, connection)
                .await
                .map_err(|e| e.message)?
                .without_backoff();
            client
                .send("viewer", api::VIEWER_QUERY, json!({}))
                .await
                .map_err(|e| e.message)
        })
        .await;
        lines.push(line(connection, outcome.ok()));
    }
    result(lines)
}

/// What the check says of its calls.
const CHECK: sdk::tracker::CredentialCheck<'static> = sdk::tracker::CredentialCheck {
    product: "Linear",
    address_field: "api_url",
    timeout: CHECK_TIMEOUT,
    remedy: REMEDY,
};

/// One connection's sentence: `(failed, line)`; `None` when it timed out.
pub fn line(connection: &str, outcome: Option<Result<Value, String>>) -> (bool, String) {
    CHECK.line(connection, outcome, |data| {
        let s = |p: &str| data.pointer(p).and_then(Value::as_str).unwrap_or("?");
        format!(
            "the key is {} ({}) of workspace {} ({})",
            s("/viewer/name"),
            s("/viewer/email"),
            s("/organization/name"),
            s("/organization/urlKey")
        )
    })
}

/// The check's result from its lines.
pub fn result(lines: Vec<(bool, String)>) -> CheckRunResult {
    sdk::tracker::credential_result(lines, "linear", "linear_api_key_invalid")
}
