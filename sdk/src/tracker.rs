//! What the tracker packages (`linear`, `jira`) share: the webhook answers, an
//! HMAC-SHA256 hex signature check with a timestamp window, the display of an issue's
//! Work (title, issue key, author: the spec's display for a tracker issue), the
//! results of changing operations kept in KV by request ID (so a retry answers the
//! first result instead of acting twice), the opening of `operation.call` (its
//! checks, the replay, the refusal as the agent sees it), the doctor's credential
//! check (one sentence a connection), bounded markdown clipping for the prompt,
//! and the back-off of a tracker's API client ([`backoff`]: rate limits
//! waited out or not, and the credential held back after a refusal).

use hmac::{Hmac, Mac};
use protocol::wire::{
    CheckRunResult, Delivery, DisplayLink, HttpAnswer, OperationCallParams, OperationCallResult,
    WebhookHandleResult, WorkDisplay, MAX_DISPLAY_REF_BYTES, MAX_DISPLAY_REQUESTER_BYTES,
    MAX_DISPLAY_TITLE_BYTES,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

// ---- webhook answers ----

/// 200 and nothing delivered, with the reason (a tracker retries anything else).
pub fn ignored(reason: &str) -> HttpAnswer {
    HttpAnswer::json(200, &json!({"ok": true, "ignored": true, "reason": reason}))
}

/// 503 with `Retry-After`: what the request needs (a secret) cannot be had now.
pub fn unavailable(what: &str, retry_after_s: u32) -> HttpAnswer {
    HttpAnswer::text(503, &format!("{what} is unavailable; try again"))
        .with_header("Retry-After", &retry_after_s.to_string())
}

/// A result with no delivery.
pub fn answer_only(response: HttpAnswer) -> WebhookHandleResult {
    WebhookHandleResult {
        deliveries: Vec::new(),
        response,
    }
}

/// A result with one delivery, answered 200 (sent only once it is kept).
pub fn deliver(delivery: Delivery) -> WebhookHandleResult {
    WebhookHandleResult {
        deliveries: vec![delivery],
        response: HttpAnswer::json(200, &json!({"ok": true})),
    }
}

// ---- signatures ----

/// Why a signed request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    /// No signature header.
    Missing,
    /// The signature is not the expected prefix and 64 hex digits.
    Malformed,
    /// The signature does not match the body under the secret.
    Mismatch,
    /// No timestamp where one is required.
    MissingTimestamp,
    /// The timestamp is outside the window around now.
    Stale,
}

impl SignatureError {
    /// The reason in a sentence, naming `header` (the signature header) and
    /// `timestamp` (where the timestamp is read).
    pub fn reason(self, header: &str, timestamp: &str) -> String {
        match self {
            SignatureError::Missing => format!("missing {header} header"),
            SignatureError::Malformed => {
                format!("malformed {header} header (expected a hex HMAC-SHA256)")
            }
            SignatureError::Mismatch => format!("{header} does not match the body"),
            SignatureError::MissingTimestamp => format!("missing or unreadable {timestamp}"),
            SignatureError::Stale => format!(
                "{timestamp} is outside the accepted window around now (a replay, or a clock off)"
            ),
        }
    }
}

/// The lowercase hex HMAC-SHA256 of `body` under `secret`.
pub fn hmac_sha256_hex(secret: &[u8], body: &[u8]) -> String {
    match HmacSha256::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(body);
            protocol::hex::encode(&mac.finalize().into_bytes())
        }
        // An HMAC takes a key of any length: not reached.
        Err(_) => String::new(),
    }
}

/// Verifies `signature` (a header's value, if any: `prefix` then 64 hex digits,
/// e.g. `""` for Linear, `"sha256="` for Jira) as the HMAC-SHA256 of `body` under
/// `secret`, in constant time.
pub fn verify_hmac_hex(
    secret: &[u8],
    body: &[u8],
    signature: Option<&str>,
    prefix: &str,
) -> Result<(), SignatureError> {
    let signature = signature.ok_or(SignatureError::Missing)?.trim();
    let hex = signature
        .strip_prefix(prefix)
        .ok_or(SignatureError::Malformed)?;
    if hex.len() != 64 {
        return Err(SignatureError::Malformed);
    }
    let expected = protocol::hex::decode(hex).ok_or(SignatureError::Malformed)?;
    let mut mac = HmacSha256::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
    mac.update(body);
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}

/// Checks a timestamp in Unix milliseconds against `now_ms`: at most `window_ms`
/// away, either way.
pub fn check_timestamp_ms(
    timestamp_ms: Option<i64>,
    now_ms: i64,
    window_ms: i64,
) -> Result<(), SignatureError> {
    let ts = timestamp_ms
        .filter(|t| *t > 0)
        .ok_or(SignatureError::MissingTimestamp)?;
    if now_ms.saturating_sub(ts).abs() > window_ms {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

// ---- display ----

/// `text` cut to at most `max` bytes at a character boundary, and whether it was cut.
pub fn clip(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// One line: control characters become spaces, runs of spaces one, the ends are
/// trimmed, and the text is cut to `max` bytes at a character boundary.
pub fn one_line(text: &str, max: usize) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let squeezed = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    clip(&squeezed, max).0.trim_end().to_string()
}

/// A tracker issue as its Work shows it: the spec's display for a tracker issue is
/// the issue title, the issue key and the author.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssueDisplay {
    /// The issue's title.
    pub title: String,
    /// The issue key (`ENG-123`, `PROJ-7`).
    pub key: String,
    /// Who opened the issue (a name, or an ID when no name is known).
    pub author: String,
    /// The issue's web page, when known.
    pub url: String,
}

impl IssueDisplay {
    /// The Work display: title, ref (the key) and requester (the author), each made
    /// one line and cut to its bound, and a link to the issue when its URL is an
    /// http(s) URL. None when neither a title nor a key is left.
    pub fn work_display(&self) -> Option<WorkDisplay> {
        let mut display = WorkDisplay {
            title: one_line(&self.title, MAX_DISPLAY_TITLE_BYTES),
            reference: one_line(&self.key, MAX_DISPLAY_REF_BYTES),
            requester: one_line(&self.author, MAX_DISPLAY_REQUESTER_BYTES),
            links: Vec::new(),
        };
        if display.title.is_empty() && display.reference.is_empty() {
            return None;
        }
        if !self.url.is_empty() && protocol::wire::check_display_url("url", &self.url).is_ok() {
            let label = if self.key.is_empty() {
                "Issue".to_string()
            } else {
                one_line(&self.key, 40)
            };
            display.links.push(DisplayLink {
                label,
                url: self.url.clone(),
            });
        }
        if display.validate().is_err() {
            display.links.clear();
        }
        display.validate().is_ok().then_some(display)
    }
}

// ---- markdown ----

/// Markdown cut to at most about `max` bytes for the prompt: at a line boundary when
/// one is near, an open code fence closed, and a last line saying how much was left.
pub fn clip_markdown(text: &str, max: usize) -> String {
    let (head, cut) = clip(text, max);
    if !cut {
        return text.to_string();
    }
    let head = match head.rfind('\n') {
        Some(i) if i >= head.len() / 2 => &head[..i],
        _ => head,
    };
    let fences = head
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    let mut out = head.trim_end().to_string();
    if fences % 2 == 1 {
        out.push_str("\n```");
    }
    out.push_str(&format!(
        "\n\n_(cut at {max} bytes: {} more bytes not shown)_",
        text.len() - head.len()
    ));
    out
}

// ---- idempotent operations ----

pub use crate::replay::{keep_result, kept_result, replay_key};

// ---- the opening of `operation.call` ----

/// The checks that open a tracker's `operation.call`, in order: the operation is one of
/// `all` (else not found), the binding names a connection (else unauthorized, naming
/// `package`'s connection), and the input is an object (`null` reads as `{}`). Returns
/// the input.
pub fn operation_input(
    params: &OperationCallParams,
    all: &[&str],
    package: &str,
) -> Result<Value, RpcError> {
    let op = params.operation.as_str();
    if !all.contains(&op) {
        return Err(RpcError::new(
            Code::NotFound,
            format!("`{op}` is not an operation of this package"),
        ));
    }
    if params.authority.connection.is_empty() {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "the binding names no connection: a {package} operation acts as the binding's {package} connection"
            ),
        ));
    }
    match &params.input {
        Value::Null => Ok(json!({})),
        v if v.is_object() => Ok(v.clone()),
        _ => Err(RpcError::new(Code::Invalid, "the input must be an object")),
    }
}

/// Runs `act` for `params` with request-ID replay: when `changes` (the operation
/// changes something) and the call has a request ID, a kept result for it is answered
/// without running `act`, and `act`'s output is kept under it. `act` is not polled
/// when the kept result answers.
pub async fn replayed(
    host: &crate::Host,
    params: &OperationCallParams,
    changes: bool,
    act: impl std::future::Future<Output = Result<Value, RpcError>>,
) -> Result<OperationCallResult, RpcError> {
    let op = params.operation.as_str();
    let authority = &params.authority;
    let replay = changes && !params.request_id.is_empty();
    if replay {
        if let Some(output) = kept_result(host, authority, &params.request_id, op).await? {
            tracing::info!(operation = op, "replaying the kept result of a request_id");
            return Ok(OperationCallResult { output });
        }
    }
    let output = act.await?;
    if !replay {
        return Ok(OperationCallResult { output });
    }
    let output = keep_result(host, authority, &params.request_id, op, output).await?;
    Ok(OperationCallResult { output })
}

/// `e` with its message as `data.agent_message`, unless it carries one.
pub fn for_agent(mut e: RpcError) -> RpcError {
    let message = json!(protocol::toolbelt::agent_message(&e.message));
    match e.data.as_mut() {
        Some(Value::Object(data)) => {
            data.entry(protocol::toolbelt::AGENT_MESSAGE_FIELD)
                .or_insert(message);
        }
        Some(_) => {}
        None => e.data = Some(json!({ protocol::toolbelt::AGENT_MESSAGE_FIELD: message })),
    }
    e
}

// ---- the doctor's credential check ----

/// The connections `pairs` (`(connection, scope_id)`) name, each once (the first
/// scope that names it), in order.
pub fn distinct_connections<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(&'a str, &'a str)> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (connection, scope_id) in pairs {
        if !seen.iter().any(|(c, _)| *c == connection) {
            seen.push((connection, scope_id));
        }
    }
    seen
}

/// What a credential check says of its calls: the product asked, the connection's
/// address field, the bound of one call, and where the operator makes credentials.
#[derive(Debug, Clone, Copy)]
pub struct CredentialCheck<'a> {
    /// The product, as the sentences name it (`Jira`).
    pub product: &'a str,
    /// The connection's field naming where the product is (`base_url`).
    pub address_field: &'a str,
    /// The bound of one connection's call.
    pub timeout: std::time::Duration,
    /// Where the operator makes credentials.
    pub remedy: &'a str,
}

impl CredentialCheck<'_> {
    /// One connection's sentence: `(failed, line)`; `outcome` is `None` when the call
    /// timed out, and `ok` words an answer.
    pub fn line(
        &self,
        connection: &str,
        outcome: Option<Result<Value, String>>,
        ok: impl FnOnce(&Value) -> String,
    ) -> (bool, String) {
        match outcome {
            None => (
                true,
                format!(
                    "connection {connection}: {} gave no answer within {}s (CHECK_TIMEOUT); \
                     check the connection's {} and the network",
                    self.product,
                    self.timeout.as_secs(),
                    self.address_field
                ),
            ),
            Some(Err(message)) => (
                true,
                format!("connection {connection}: {message}; {}", self.remedy),
            ),
            Some(Ok(answer)) => (false, format!("connection {connection}: {}", ok(&answer))),
        }
    }
}

/// A credential check's result from its lines (`(failed, line)`): ok with no lines
/// (`no {package} entries`), else failed with `code` when a line failed; the
/// problems first.
pub fn credential_result(lines: Vec<(bool, String)>, package: &str, code: &str) -> CheckRunResult {
    if lines.is_empty() {
        return CheckRunResult {
            status: "ok".into(),
            detail: format!("no {package} entries"),
            ..CheckRunResult::default()
        };
    }
    let failed = lines.iter().any(|(f, _)| *f);
    let mut sorted = lines;
    sorted.sort_by_key(|(f, _)| !*f);
    let items: Vec<String> = sorted.into_iter().map(|(_, l)| l).collect();
    CheckRunResult {
        status: if failed { "fail" } else { "ok" }.into(),
        code: if failed { code.into() } else { String::new() },
        detail: items.join("; "),
        items,
        ..CheckRunResult::default()
    }
}

// ---- the reply wait ----

/// How long a tracker's reply wait lasts without `timeout_s` (a day).
pub const REPLY_WAIT_DEFAULT_S: u64 = 86_400;
/// The longest `timeout_s` of a reply wait (a week).
pub const REPLY_WAIT_MAX_S: u64 = 7 * 86_400;

/// The reply wait's `timeout_s` from an operation's input: absent is a day; a whole
/// number of seconds from 1 to a week, else an error naming the bounds.
pub fn reply_wait_timeout_s(input: &Value) -> Result<u64, RpcError> {
    match input.get("timeout_s") {
        None | Some(Value::Null) => Ok(REPLY_WAIT_DEFAULT_S),
        Some(v) => v
            .as_u64()
            .filter(|s| (1..=REPLY_WAIT_MAX_S).contains(s))
            .ok_or_else(|| {
                RpcError::new(
                    Code::Invalid,
                    format!(
                        "timeout_s must be a whole number of seconds from 1 to {REPLY_WAIT_MAX_S}"
                    ),
                )
            }),
    }
}

/// The Wait for a person's reply (a comment on an issue, a message in a thread) to
/// the Work whose key is `key`: woken only by `comment_type` Events with that key, due `timeout_s` after `now_ms`.
pub fn reply_wait(
    key: &str,
    comment_type: &str,
    description: &str,
    timeout_s: u64,
    now_ms: i64,
) -> protocol::wire::WaitRequest {
    let due_ms =
        now_ms.saturating_add(i64::try_from(timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX));
    protocol::wire::WaitRequest {
        keys: vec![key.to_string()],
        types: vec![comment_type.to_string()],
        due_at: protocol::time::format_rfc3339_ms(due_ms),
        description: description.to_string(),
        plan: json!({ "key": key }),
    }
}

/// A reply wait's plan, the same for every package: which wait operation it is, the
/// Event type that wakes it, its description, and how a Work key of the package looks.
pub struct ReplyWait<'a> {
    /// The wait operation's name (`slack.wait_reply`).
    pub operation: &'a str,
    /// The Event type that wakes it (`slack.message.reply`).
    pub wake_type: &'a str,
    /// What it waits for, in words.
    pub description: &'a str,
    /// Whether a Work key is the package's (the thread's or issue's key).
    pub is_key: fn(&str) -> bool,
    /// The error when the Work has none.
    pub no_key: &'a str,
}

impl ReplyWait<'_> {
    /// Serves `operation.wait`: the call's `timeout_s`, the Work's key (read through
    /// `state.work`) and the Wait keyed by it.
    pub async fn plan(
        &self,
        host: &crate::Host,
        params: &protocol::wire::OperationWaitParams,
    ) -> Result<protocol::wire::OperationWaitResult, RpcError> {
        if params.operation != self.operation {
            return Err(RpcError::new(
                Code::NotFound,
                format!("no wait operation {}", params.operation),
            ));
        }
        let timeout = reply_wait_timeout_s(&params.input)?;
        let work = host
            .call_typed(&protocol::wire::StateWorkParams {
                id: params.authority.work_id.clone(),
            })
            .await
            .map_err(|e| RpcError::new(Code::Unavailable, format!("reading the Work: {e}")))?
            .work;
        let key = work
            .keys
            .iter()
            .find(|k| (self.is_key)(k))
            .ok_or_else(|| RpcError::new(Code::Invalid, self.no_key.to_string()))?;
        Ok(protocol::wire::OperationWaitResult {
            wait: reply_wait(
                key,
                self.wake_type,
                self.description,
                timeout,
                protocol::time::now_ms(),
            ),
        })
    }
}

// ---- back-off ----

pub mod backoff;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn call(op: &str, connection: &str, input: Value) -> OperationCallParams {
        let mut p = OperationCallParams {
            operation: op.into(),
            input,
            ..Default::default()
        };
        p.authority.connection = connection.into();
        p
    }

    #[test]
    fn operation_input_checks_in_order() {
        let all = ["a.read", "a.write"];
        let e = operation_input(&call("a.nope", "", json!(1)), &all, "jira").unwrap_err();
        assert!(e.is(Code::NotFound));
        assert_eq!(e.message, "`a.nope` is not an operation of this package");
        let e = operation_input(&call("a.read", "", json!(1)), &all, "jira").unwrap_err();
        assert!(e.is(Code::Unauthorized));
        assert_eq!(
            e.message,
            "the binding names no connection: a jira operation acts as the binding's jira connection"
        );
        let e = operation_input(&call("a.read", "c", json!(1)), &all, "jira").unwrap_err();
        assert!(e.is(Code::Invalid));
        assert_eq!(e.message, "the input must be an object");
        let p = call("a.write", "c", Value::Null);
        assert_eq!(operation_input(&p, &all, "jira").unwrap(), json!({}));
        let p = call("a.write", "c", json!({"k": 1}));
        assert_eq!(operation_input(&p, &all, "jira").unwrap(), json!({"k": 1}));
    }

    #[test]
    fn credential_check_lines_and_result() {
        let pairs = [("a", "s1"), ("b", "s1"), ("a", "s2")];
        assert_eq!(distinct_connections(pairs), vec![("a", "s1"), ("b", "s1")]);
        let check = CredentialCheck {
            product: "Jira",
            address_field: "base_url",
            timeout: std::time::Duration::from_secs(15),
            remedy: "make one",
        };
        let word = |v: &Value| format!("account {}", v["id"]);
        assert_eq!(
            check.line("a", None, word),
            (
                true,
                "connection a: Jira gave no answer within 15s (CHECK_TIMEOUT); \
                 check the connection's base_url and the network"
                    .into()
            )
        );
        assert_eq!(
            check.line("a", Some(Err("401".into())), word),
            (true, "connection a: 401; make one".into())
        );
        assert_eq!(
            check.line("a", Some(Ok(json!({"id": 7}))), word),
            (false, "connection a: account 7".into())
        );
        let r = credential_result(Vec::new(), "jira", "jira_bad");
        assert_eq!(
            (r.status.as_str(), r.detail.as_str()),
            ("ok", "no jira entries")
        );
        let r = credential_result(
            vec![(false, "x".into()), (true, "y".into())],
            "jira",
            "jira_bad",
        );
        assert_eq!((r.status.as_str(), r.code.as_str()), ("fail", "jira_bad"));
        assert_eq!(r.detail, "y; x");
        assert_eq!(r.items, vec!["y".to_string(), "x".to_string()]);
        let r = credential_result(vec![(false, "x".into())], "jira", "jira_bad");
        assert_eq!((r.status.as_str(), r.code.as_str()), ("ok", ""));
    }

    #[test]
    fn for_agent_keeps_a_carried_message() {
        let field = protocol::toolbelt::AGENT_MESSAGE_FIELD;
        let said = json!(protocol::toolbelt::agent_message("bad"));
        let e = for_agent(RpcError::new(Code::Invalid, "bad"));
        assert!(e.is(Code::Invalid));
        assert_eq!(e.data.as_ref().unwrap()[field], said);
        let mut bare = RpcError::new(Code::Invalid, "bad");
        bare.data = None;
        assert_eq!(for_agent(bare).data.unwrap(), json!({ field: said }));
        let mut carried = RpcError::new(Code::Invalid, "bad");
        carried.data = Some(json!({ field: "mine", "other": 1 }));
        let e = for_agent(carried);
        assert_eq!(e.data.unwrap(), json!({ field: "mine", "other": 1 }));
        let mut odd = RpcError::new(Code::Invalid, "bad");
        odd.data = Some(json!([1]));
        assert_eq!(for_agent(odd).data.unwrap(), json!([1]));
    }

    #[test]
    fn hmac_hex_good_bad_malformed() {
        let sig = hmac_sha256_hex(b"secret", b"body");
        assert_eq!(sig.len(), 64);
        assert!(verify_hmac_hex(b"secret", b"body", Some(&sig), "").is_ok());
        let prefixed = format!("sha256={sig}");
        assert!(verify_hmac_hex(b"secret", b"body", Some(&prefixed), "sha256=").is_ok());
        assert_eq!(
            verify_hmac_hex(b"other", b"body", Some(&sig), ""),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_hmac_hex(b"secret", b"body!", Some(&sig), ""),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_hmac_hex(b"secret", b"body", Some("abc"), ""),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_hmac_hex(b"secret", b"body", None, ""),
            Err(SignatureError::Missing)
        );
    }

    #[test]
    fn timestamp_window() {
        assert!(check_timestamp_ms(Some(1_000_000), 1_030_000, 60_000).is_ok());
        assert!(check_timestamp_ms(Some(1_090_000), 1_030_000, 60_000).is_ok());
        assert_eq!(
            check_timestamp_ms(Some(1_000_000), 1_060_001, 60_000),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            check_timestamp_ms(None, 1, 60_000),
            Err(SignatureError::MissingTimestamp)
        );
    }

    #[test]
    fn issue_display() {
        let d = IssueDisplay {
            title: "Fix the\nlogin".into(),
            key: "ENG-123".into(),
            author: "Ada".into(),
            url: "https://linear.app/acme/issue/ENG-123/fix".into(),
        }
        .work_display()
        .unwrap();
        assert_eq!(d.title, "Fix the login");
        assert_eq!(d.reference, "ENG-123");
        assert_eq!(d.requester, "Ada");
        assert_eq!(d.links.len(), 1);
        assert!(IssueDisplay::default().work_display().is_none());
    }

    #[test]
    fn markdown_clipping() {
        assert_eq!(clip_markdown("short", 100), "short");
        let text = format!("intro\n```\n{}\n```\n", "x\n".repeat(100));
        let clipped = clip_markdown(&text, 50);
        assert!(clipped.len() < 50 + 80);
        assert_eq!(clipped.matches("```").count() % 2, 0);
        assert!(clipped.contains("more bytes not shown"));
        let multi = "é".repeat(40);
        assert!(clip_markdown(&multi, 5).starts_with("éé"));
    }

    #[test]
    fn reply_wait_timeout_is_bounded_and_the_error_names_the_bounds() {
        assert_eq!(
            reply_wait_timeout_s(&json!({})).ok(),
            Some(REPLY_WAIT_DEFAULT_S)
        );
        assert_eq!(reply_wait_timeout_s(&json!({"timeout_s": 5})).ok(), Some(5));
        for bad in [
            json!({"timeout_s": 0}),
            json!({"timeout_s": REPLY_WAIT_MAX_S + 1}),
            json!({"timeout_s": "1"}),
        ] {
            let e = reply_wait_timeout_s(&bad).expect_err("refused");
            assert!(e.message.contains("604800"), "{}", e.message);
        }
    }
}
