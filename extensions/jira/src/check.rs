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
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for e in &registry.entries {
        if !seen.iter().any(|(c, _)| *c == e.connection) {
            seen.push((&e.connection, &e.scope_id));
        }
    }
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

/// One connection's sentence: `(failed, line)`; `None` when it timed out.
pub fn line(connection: &str, outcome: Option<Result<Value, String>>) -> (bool, String) {
    match outcome {
        None => (
            true,
            format!(
                "connection {connection}: Jira gave no answer within {}s (CHECK_TIMEOUT); \
                 check the connection's base_url and the network",
                CHECK_TIMEOUT.as_secs()
            ),
        ),
        Some(Err(message)) => (
            true,
            format!("connection {connection}: {message}; {REMEDY}"),
        ),
        Some(Ok(me)) => {
            let s = |k: &str| me.get(k).and_then(Value::as_str).unwrap_or("?");
            (
                false,
                format!(
                    "connection {connection}: the credentials are {} (account {})",
                    s("displayName"),
                    s("accountId")
                ),
            )
        }
    }
}

/// The check's result from its lines.
pub fn result(lines: Vec<(bool, String)>) -> CheckRunResult {
    if lines.is_empty() {
        return CheckRunResult {
            status: "ok".into(),
            detail: "no jira entries".into(),
            ..CheckRunResult::default()
        };
    }
    let failed = lines.iter().any(|(f, _)| *f);
    let mut sorted = lines;
    sorted.sort_by_key(|(f, _)| !*f);
    let items: Vec<String> = sorted.into_iter().map(|(_, l)| l).collect();
    CheckRunResult {
        status: if failed { "fail" } else { "ok" }.into(),
        code: if failed {
            "jira_credentials_invalid".into()
        } else {
            String::new()
        },
        detail: items.join("; "),
        items,
        ..CheckRunResult::default()
    }
}
