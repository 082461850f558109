//! GitHub payloads to Events: one [`IngressEvent`] per delivery, of type
//! `<family>.<action>`, with a trimmed projection of the payload as its data
//! (schema `<family>.v1`), the issue or pull request keys and the time it
//! happened. The projection of each family is described in the crate's
//! README.

use protocol::wire::{IngressEvent, Payload};
use serde_json::{json, Map, Value};

use crate::Family;

/// The most bytes of an issue, pull request, comment or review body an Event
/// carries; longer bodies are cut at a character boundary and marked
/// `body_truncated`.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The most bytes of a review comment's `diff_hunk` or a check run's output
/// summary an Event carries; longer ones are cut at a character boundary and
/// marked (`diff_hunk_truncated`, `summary_truncated`).
pub const MAX_HUNK_BYTES: usize = 16 * 1024;

/// The key of issue or pull request `number` of `repository` (`owner/name`):
/// `github:<owner>/<name>#<number>`, the repository lowercased.
pub fn key(repository: &str, number: u64) -> String {
    format!("github:{}#{number}", repository.to_ascii_lowercase())
}

/// The Event type's action part: the payload's action lowercased, every
/// character outside `[a-z0-9_]` turned into `_`.
pub fn sanitize_action(action: &str) -> String {
    action
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `text` cut to at most `max` bytes at a character boundary, and whether it
/// was cut.
pub fn truncate(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// The string at `pointer` (a JSON pointer), if it is one.
fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// The string at `pointer`, or `""`.
fn text_or_empty(value: &Value, pointer: &str) -> Value {
    Value::String(text(value, pointer).unwrap_or_default().to_string())
}

/// The value at `pointer`, or `null`.
fn copy(value: &Value, pointer: &str) -> Value {
    value.pointer(pointer).cloned().unwrap_or(Value::Null)
}

/// An RFC 3339 UTC time (`2019-05-15T15:20:18Z`, with optional fractions) at
/// `pointer`, if there is one.
fn timestamp<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    text(value, pointer).filter(|t| is_utc_timestamp(t))
}

/// True for `YYYY-MM-DDTHH:MM:SS[.fraction]Z`.
pub fn is_utc_timestamp(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && (at(10, b'T') || at(10, b't'))
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19))
    {
        return false;
    }
    let rest = b.get(19..).unwrap_or_default();
    let rest = match rest.strip_prefix(b".") {
        Some(frac) => {
            let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return false;
            }
            frac.get(n..).unwrap_or_default()
        }
        None => rest,
    };
    rest == b"Z" || rest == b"z"
}

/// The body at `pointer` into `out` as `body` (cut to [`MAX_BODY_BYTES`]), with
/// `body_truncated: true` when it was cut.
fn put_body(out: &mut Map<String, Value>, value: &Value, pointer: &str) {
    let (body, cut) = truncate(text(value, pointer).unwrap_or_default(), MAX_BODY_BYTES);
    out.insert("body".into(), Value::String(body.to_string()));
    if cut {
        out.insert("body_truncated".into(), Value::Bool(true));
    }
}

/// The text at `pointer` into `out` as `field` (cut to `max` bytes, `null` when
/// GitHub sent none), with `<field>_truncated: true` when it was cut.
fn put_bounded(
    out: &mut Map<String, Value>,
    value: &Value,
    pointer: &str,
    field: &str,
    max: usize,
) {
    match text(value, pointer) {
        None => {
            out.insert(field.into(), Value::Null);
        }
        Some(t) => {
            let (t, cut) = truncate(t, max);
            out.insert(field.into(), Value::String(t.to_string()));
            if cut {
                out.insert(format!("{field}_truncated"), Value::Bool(true));
            }
        }
    }
}

/// The distinct pull request numbers of the list at `pointer` (a check run's or
/// suite's `pull_requests`).
fn pull_request_numbers(payload: &Value, pointer: &str) -> Vec<u64> {
    let mut numbers: Vec<u64> = Vec::new();
    for pr in payload
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = pr.get("number").and_then(Value::as_u64) {
            if !numbers.contains(&n) {
                numbers.push(n);
            }
        }
    }
    numbers
}

/// The label names of the object at `pointer`.
fn labels(value: &Value, pointer: &str) -> Value {
    let names = value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|l| l.get("name").and_then(Value::as_str))
                .map(|n| Value::String(n.to_string()))
                .collect()
        })
        .unwrap_or_default();
    Value::Array(names)
}

/// The fields an issue or a pull request shares, from the object at `at`
/// (`/issue`, `/pull_request`): number, title, state, html_url, author,
/// labels.
fn subject(payload: &Value, at: &str, what: &str) -> Result<(u64, Map<String, Value>), String> {
    if !payload.pointer(at).is_some_and(Value::is_object) {
        return Err(format!("the payload has no {what}"));
    }
    let number = payload
        .pointer(&format!("{at}/number"))
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("the payload's {what} has no number"))?;
    let mut m = Map::new();
    m.insert("number".into(), json!(number));
    m.insert(
        "title".into(),
        text_or_empty(payload, &format!("{at}/title")),
    );
    m.insert(
        "state".into(),
        text_or_empty(payload, &format!("{at}/state")),
    );
    m.insert(
        "html_url".into(),
        text_or_empty(payload, &format!("{at}/html_url")),
    );
    m.insert(
        "author".into(),
        text_or_empty(payload, &format!("{at}/user/login")),
    );
    m.insert("labels".into(), labels(payload, &format!("{at}/labels")));
    Ok((number, m))
}

/// Turns a GitHub webhook payload of `family` into its Event. Fails (with the
/// reason) when the payload lacks what the family needs: an action, the
/// repository's full name, the issue or pull request and its number.
pub fn project(family: Family, delivery_id: &str, payload: &Value) -> Result<IngressEvent, String> {
    let action = text(payload, "/action")
        .filter(|a| !a.is_empty())
        .ok_or("the payload has no action")?;
    let repository =
        text(payload, "/repository/full_name").ok_or("the payload has no repository.full_name")?;
    let mut data = Map::new();
    data.insert("action".into(), Value::String(action.to_string()));
    data.insert("delivery_id".into(), Value::String(delivery_id.to_string()));
    data.insert("repository".into(), Value::String(repository.to_string()));
    data.insert("sender".into(), text_or_empty(payload, "/sender/login"));
    let mut keys = Vec::new();
    let occurred_at = match family {
        Family::Issue => {
            let (number, fields) = subject(payload, "/issue", "issue")?;
            data.extend(fields);
            put_body(&mut data, payload, "/issue/body");
            if let Some(label) = text(payload, "/label/name") {
                data.insert("label".into(), Value::String(label.to_string()));
            }
            data.insert("created_at".into(), copy(payload, "/issue/created_at"));
            data.insert("updated_at".into(), copy(payload, "/issue/updated_at"));
            keys.push(key(repository, number));
            timestamp(payload, "/issue/updated_at").or(timestamp(payload, "/issue/created_at"))
        }
        Family::IssueComment => {
            let (number, fields) = subject(payload, "/issue", "issue")?;
            data.extend(fields);
            data.insert(
                "is_pull_request".into(),
                Value::Bool(
                    payload
                        .pointer("/issue/pull_request")
                        .is_some_and(Value::is_object),
                ),
            );
            if !payload.pointer("/comment").is_some_and(Value::is_object) {
                return Err("the payload has no comment".into());
            }
            let mut comment = Map::new();
            comment.insert("id".into(), copy(payload, "/comment/id"));
            put_body(&mut comment, payload, "/comment/body");
            comment.insert(
                "author".into(),
                text_or_empty(payload, "/comment/user/login"),
            );
            comment.insert(
                "html_url".into(),
                text_or_empty(payload, "/comment/html_url"),
            );
            comment.insert("created_at".into(), copy(payload, "/comment/created_at"));
            comment.insert("updated_at".into(), copy(payload, "/comment/updated_at"));
            data.insert("comment".into(), Value::Object(comment));
            keys.push(key(repository, number));
            timestamp(payload, "/comment/updated_at").or(timestamp(payload, "/comment/created_at"))
        }
        Family::PullRequest => {
            let (number, fields) = subject(payload, "/pull_request", "pull_request")?;
            data.extend(fields);
            put_body(&mut data, payload, "/pull_request/body");
            if let Some(label) = text(payload, "/label/name") {
                data.insert("label".into(), Value::String(label.to_string()));
            }
            pull_request_refs(&mut data, payload);
            data.insert(
                "merged".into(),
                json!(payload
                    .pointer("/pull_request/merged")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)),
            );
            data.insert(
                "created_at".into(),
                copy(payload, "/pull_request/created_at"),
            );
            data.insert(
                "updated_at".into(),
                copy(payload, "/pull_request/updated_at"),
            );
            keys.push(key(repository, number));
            timestamp(payload, "/pull_request/updated_at")
                .or(timestamp(payload, "/pull_request/created_at"))
        }
        Family::PullRequestReview => {
            let (number, fields) = subject(payload, "/pull_request", "pull_request")?;
            data.extend(fields);
            pull_request_refs(&mut data, payload);
            if !payload.pointer("/review").is_some_and(Value::is_object) {
                return Err("the payload has no review".into());
            }
            let mut review = Map::new();
            review.insert("id".into(), copy(payload, "/review/id"));
            review.insert("state".into(), text_or_empty(payload, "/review/state"));
            put_body(&mut review, payload, "/review/body");
            review.insert(
                "author".into(),
                text_or_empty(payload, "/review/user/login"),
            );
            review.insert(
                "html_url".into(),
                text_or_empty(payload, "/review/html_url"),
            );
            review.insert(
                "commit_id".into(),
                text_or_empty(payload, "/review/commit_id"),
            );
            review.insert("submitted_at".into(), copy(payload, "/review/submitted_at"));
            data.insert("review".into(), Value::Object(review));
            keys.push(key(repository, number));
            timestamp(payload, "/review/submitted_at")
                .or(timestamp(payload, "/pull_request/updated_at"))
        }
        Family::PullRequestReviewComment => {
            let (number, fields) = subject(payload, "/pull_request", "pull_request")?;
            data.extend(fields);
            pull_request_refs(&mut data, payload);
            if !payload.pointer("/comment").is_some_and(Value::is_object) {
                return Err("the payload has no comment".into());
            }
            let mut comment = Map::new();
            comment.insert("id".into(), copy(payload, "/comment/id"));
            put_body(&mut comment, payload, "/comment/body");
            comment.insert(
                "author".into(),
                text_or_empty(payload, "/comment/user/login"),
            );
            comment.insert("path".into(), text_or_empty(payload, "/comment/path"));
            comment.insert("line".into(), copy(payload, "/comment/line"));
            comment.insert(
                "original_line".into(),
                copy(payload, "/comment/original_line"),
            );
            put_bounded(
                &mut comment,
                payload,
                "/comment/diff_hunk",
                "diff_hunk",
                MAX_HUNK_BYTES,
            );
            comment.insert(
                "html_url".into(),
                text_or_empty(payload, "/comment/html_url"),
            );
            comment.insert(
                "in_reply_to_id".into(),
                copy(payload, "/comment/in_reply_to_id"),
            );
            comment.insert(
                "pull_request_review_id".into(),
                copy(payload, "/comment/pull_request_review_id"),
            );
            comment.insert("created_at".into(), copy(payload, "/comment/created_at"));
            comment.insert("updated_at".into(), copy(payload, "/comment/updated_at"));
            data.insert("comment".into(), Value::Object(comment));
            keys.push(key(repository, number));
            timestamp(payload, "/comment/updated_at").or(timestamp(payload, "/comment/created_at"))
        }
        Family::CheckRun => {
            if !payload.pointer("/check_run").is_some_and(Value::is_object) {
                return Err("the payload has no check_run".into());
            }
            data.insert("id".into(), copy(payload, "/check_run/id"));
            data.insert("name".into(), text_or_empty(payload, "/check_run/name"));
            data.insert("status".into(), text_or_empty(payload, "/check_run/status"));
            data.insert("conclusion".into(), copy(payload, "/check_run/conclusion"));
            data.insert(
                "head_sha".into(),
                text_or_empty(payload, "/check_run/head_sha"),
            );
            data.insert(
                "html_url".into(),
                text_or_empty(payload, "/check_run/html_url"),
            );
            data.insert("started_at".into(), copy(payload, "/check_run/started_at"));
            data.insert(
                "completed_at".into(),
                copy(payload, "/check_run/completed_at"),
            );
            data.insert(
                "check_suite_id".into(),
                copy(payload, "/check_run/check_suite/id"),
            );
            let mut output = Map::new();
            put_bounded(
                &mut output,
                payload,
                "/check_run/output/title",
                "title",
                MAX_HUNK_BYTES,
            );
            put_bounded(
                &mut output,
                payload,
                "/check_run/output/summary",
                "summary",
                MAX_HUNK_BYTES,
            );
            data.insert("output".into(), Value::Object(output));
            let numbers = pull_request_numbers(payload, "/check_run/pull_requests");
            data.insert("pull_requests".into(), json!(numbers));
            keys.extend(numbers.iter().map(|n| key(repository, *n)));
            timestamp(payload, "/check_run/completed_at")
                .or(timestamp(payload, "/check_run/started_at"))
        }
        Family::CheckSuite => {
            if !payload
                .pointer("/check_suite")
                .is_some_and(Value::is_object)
            {
                return Err("the payload has no check_suite".into());
            }
            data.insert("id".into(), copy(payload, "/check_suite/id"));
            data.insert(
                "status".into(),
                text_or_empty(payload, "/check_suite/status"),
            );
            data.insert(
                "conclusion".into(),
                copy(payload, "/check_suite/conclusion"),
            );
            data.insert(
                "head_sha".into(),
                text_or_empty(payload, "/check_suite/head_sha"),
            );
            data.insert(
                "head_branch".into(),
                copy(payload, "/check_suite/head_branch"),
            );
            let app = text(payload, "/check_suite/app/slug")
                .filter(|s| !s.is_empty())
                .or(text(payload, "/check_suite/app/name"))
                .unwrap_or_default();
            data.insert("app".into(), Value::String(app.to_string()));
            let numbers = pull_request_numbers(payload, "/check_suite/pull_requests");
            data.insert("pull_requests".into(), json!(numbers));
            data.insert(
                "created_at".into(),
                copy(payload, "/check_suite/created_at"),
            );
            data.insert(
                "updated_at".into(),
                copy(payload, "/check_suite/updated_at"),
            );
            keys.extend(numbers.iter().map(|n| key(repository, *n)));
            timestamp(payload, "/check_suite/updated_at")
                .or(timestamp(payload, "/check_suite/created_at"))
        }
        Family::Wait => return Err("github.wait is no webhook event".into()),
    };
    Ok(IngressEvent {
        event_type: format!("{}.{}", family.name(), sanitize_action(action)),
        payload: Payload {
            schema: family.schema().to_string(),
            data: Value::Object(data),
        },
        keys,
        occurred_at: occurred_at.unwrap_or_default().to_string(),
        snapshot: false,
    })
}

/// A pull request's draft flag, head and base refs and head commit.
fn pull_request_refs(data: &mut Map<String, Value>, payload: &Value) {
    data.insert(
        "draft".into(),
        json!(payload
            .pointer("/pull_request/draft")
            .and_then(Value::as_bool)
            .unwrap_or(false)),
    );
    data.insert(
        "head_ref".into(),
        text_or_empty(payload, "/pull_request/head/ref"),
    );
    data.insert(
        "head_sha".into(),
        text_or_empty(payload, "/pull_request/head/sha"),
    );
    data.insert(
        "base_ref".into(),
        text_or_empty(payload, "/pull_request/base/ref"),
    );
}
