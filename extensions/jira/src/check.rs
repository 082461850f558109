//! The doctor's check (`check.run`) [`CREDENTIALS`]: for each connection the
//! entries name, `GET /rest/api/3/myself` with its credentials, asked even while
//! they are held back after a refusal. Credentials Jira refuses (401), a 403, a
//! rate limit, or credentials that cannot be resolved fail the check, the detail
//! naming the connection, Jira's answer and the remedy. Each connection's call is
//! bounded by [`CHECK_TIMEOUT`].
//!
//! `open-conduit doctor` shows the detail only, so the detail carries everything
//! (one sentence per connection, problems first).

use std::time::Duration;

use protocol::wire::{CheckRunParams, CheckRunResult};
use serde_json::Value;

use crate::State;

/// The check of the connections' credentials.
pub const CREDENTIALS: &str = "credentials";
/// The longest one connection's call may take in the check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(15);
/// The path asked: the credentials' own account.
pub const MYSELF: &str = "/rest/api/3/myself";

/// Where the operator makes credentials.
const REMEDY: &str = "put the account's email and an Atlassian API token \
     (id.atlassian.com, Security, API tokens) in the connection's email and api_token, \
     or an OAuth access token in bearer_token, and apply the configuration";

/// Serves `check.run`.
pub async fn run(state: &State, host: &sdk::Host, params: &CheckRunParams) -> CheckRunResult {
    match params.check.as_str() {
        CREDENTIALS => credentials(state, host).await,
        other => CheckRunResult {
            status: "warn".into(),
            code: "extension_check_invalid".into(),
            detail: format!("no check `{other}` (this package runs `{CREDENTIALS}`)"),
            ..CheckRunResult::default()
        },
    }
}

/// `myself` for each connection the entries name.
async fn credentials(state: &State, host: &sdk::Host) -> CheckRunResult {
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
                .call("GET", MYSELF.to_string(), None)
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
    product: "Jira",
    address_field: "base_url",
    timeout: CHECK_TIMEOUT,
    remedy: REMEDY,
};

/// One connection's sentence: `(failed, line)`; `None` when it timed out.
pub fn line(connection: &str, outcome: Option<Result<Value, String>>) -> (bool, String) {
    CHECK.line(connection, outcome, |me| {
        let s = |k: &str| me.get(k).and_then(Value::as_str).unwrap_or("?");
        format!(
            "the credentials are {} (account {})",
            s("displayName"),
            s("accountId")
        )
    })
}

/// The check's result from its lines.
pub fn result(lines: Vec<(bool, String)>) -> CheckRunResult {
    sdk::tracker::credential_result(lines, "jira", "jira_credentials_invalid")
}
