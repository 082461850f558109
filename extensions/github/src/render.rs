//! `event.render`: an Event of the package's families as Markdown for an agent's
//! prompt.
//!
//! What each family shows is in the crate's README (Rendering). The payload gives
//! most of it; with the Work's connection (`params.connection`, resolved like the
//! operations' client) the package also reads from GitHub:
//!
//! - an issue comment: the conversation's last [`MAX_THREAD_COMMENTS`] comments
//!   (`GET /repos/{r}/issues/{n}` for the count, then the last page or two of
//!   `GET …/comments?per_page=20&page=P`), newest last;
//! - a review (and a `github.wait` woken by one): its comments with their diff
//!   hunks (`GET /repos/{r}/pulls/{n}/reviews/{id}/comments`);
//! - a failed check run: its output title and summary (`GET /repos/{r}/check-runs/{id}`).
//!
//! A read that fails (or a missing connection) leaves what the payload has, and the
//! text says so in one line (the error, made safe by
//! [`protocol::toolbelt::agent_message`]; the client never puts a token in one).
//! The reads share a bound of [`API_BUDGET`]. The text is cut to `max_bytes`
//! (default [`DEFAULT_MAX_BYTES`], at most [`MAX_RENDERED_BYTES`]) at a character
//! boundary, with `truncated: true`.

use std::time::Duration;

use protocol::wire::{Event, EventRenderParams, EventRenderResult, MAX_RENDERED_BYTES};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::api::Client;
use crate::project::truncate;
use crate::route::one_line;
use crate::Family;

/// The bound when the host names none (`max_bytes` 0).
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024;
/// The most comments of a conversation shown with an issue comment.
pub const MAX_THREAD_COMMENTS: usize = 20;
/// The most bytes of one conversation comment shown (cut, marked `…`).
pub const MAX_THREAD_COMMENT_BYTES: usize = 2 * 1024;
/// The most lines of a diff hunk shown (its last ones: a hunk ends at the
/// commented line).
pub const MAX_HUNK_LINES: usize = 30;
/// The most pages of a review's comments read (100 a page).
pub const MAX_REVIEW_COMMENT_PAGES: usize = 3;
/// How long the reads of one rendering may take together.
pub const API_BUDGET: Duration = Duration::from_secs(10);

/// The bound a request asks for: `max_bytes`, [`DEFAULT_MAX_BYTES`] for 0, at most
/// [`MAX_RENDERED_BYTES`].
pub fn bound(max_bytes: u32) -> usize {
    match usize::try_from(max_bytes).unwrap_or(usize::MAX) {
        0 => DEFAULT_MAX_BYTES,
        n => n.min(MAX_RENDERED_BYTES),
    }
}

/// What the API added to an Event's payload, or why it could not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra {
    /// An issue comment's conversation (GitHub's issue comment objects, oldest first).
    pub thread: Option<Vec<Value>>,
    /// A review's comments (GitHub's review comment objects).
    pub review_comments: Option<Vec<Value>>,
    /// A failed check run, as `GET …/check-runs/{id}` answers it.
    pub check_run: Option<Value>,
    /// One line per read that could not be made.
    pub notes: Vec<String>,
}

/// Serves `event.render`.
pub async fn serve(
    state: &crate::State,
    host: &sdk::Host,
    params: &EventRenderParams,
) -> Result<EventRenderResult, RpcError> {
    let event = &params.event;
    let family = family_of(event)?;
    let wanted = wants(family, event);
    let extra = if wanted.is_none() {
        Extra::default()
    } else if params.connection.is_empty() {
        Extra {
            notes: vec![format!(
                "{} not read from GitHub: the Work's binding names no GitHub connection.",
                what(wanted)
            )],
            ..Extra::default()
        }
    } else {
        match state
            .client(host, &event.scope_id, &params.connection)
            .await
        {
            Ok(client) => gather(&client, family, event).await,
            Err(e) => Extra {
                notes: vec![format!(
                    "{} not read from GitHub ({}); showing what the event carries.",
                    what(wanted),
                    protocol::toolbelt::agent_message(&e.message)
                )],
                ..Extra::default()
            },
        }
    };
    Ok(finish(
        &markdown(family, event, &extra),
        bound(params.max_bytes),
    ))
}

/// The Event's family, when the package can read its payload.
pub fn family_of(event: &Event) -> Result<Family, RpcError> {
    let family = Family::of_type(&event.event_type).ok_or_else(|| {
        RpcError::new(
            Code::Invalid,
            format!("`{}` is of no github family", event.event_type),
        )
    })?;
    if event.payload.schema != family.schema() {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "unreadable payload schema `{}` (this release reads {})",
                event.payload.schema,
                family.schema()
            ),
        ));
    }
    Ok(family)
}

/// `text` cut to `max` bytes at a character boundary.
pub fn finish(text: &str, max: usize) -> EventRenderResult {
    let (cut, truncated) = truncate(text, max);
    EventRenderResult {
        text: cut.to_string(),
        truncated,
    }
}

/// What an Event's rendering reads from GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Thread,
    ReviewComments,
    CheckRun,
}

fn wants(family: Family, event: &Event) -> Option<Want> {
    let data = &event.payload.data;
    match family {
        Family::IssueComment => Some(Want::Thread),
        Family::PullRequestReview => Some(Want::ReviewComments),
        Family::Wait if data.get("review").is_some_and(Value::is_object) => {
            Some(Want::ReviewComments)
        }
        Family::CheckRun if failed(s(data, "conclusion")) => Some(Want::CheckRun),
        _ => None,
    }
}

fn what(want: Option<Want>) -> &'static str {
    match want {
        Some(Want::Thread) => "The conversation's comments were",
        Some(Want::ReviewComments) => "The review's comments were",
        Some(Want::CheckRun) => "The check run's output was",
        None => "Nothing was",
    }
}

/// Check conclusions that mean the check failed.
pub fn failed(conclusion: &str) -> bool {
    matches!(
        conclusion,
        "failure" | "timed_out" | "cancelled" | "action_required" | "startup_failure" | "stale"
    )
}

/// Reads what the Event's rendering adds from GitHub, within [`API_BUDGET`].
pub async fn gather(client: &Client, family: Family, event: &Event) -> Extra {
    let Some(want) = wants(family, event) else {
        return Extra::default();
    };
    let data = &event.payload.data;
    let repo = s(data, "repository").to_string();
    let number = data.get("number").and_then(Value::as_u64).unwrap_or(0);
    let read = async {
        match want {
            Want::Thread => thread(client, &repo, number).await.map(|t| Extra {
                thread: Some(t),
                ..Extra::default()
            }),
            Want::ReviewComments => {
                let id = data
                    .pointer("/review/id")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                client
                    .get_all(
                        &format!("/repos/{repo}/pulls/{number}/reviews/{id}/comments?per_page=100"),
                        MAX_REVIEW_COMMENT_PAGES,
                    )
                    .await
                    .map(|(list, _)| Extra {
                        review_comments: Some(list),
                        ..Extra::default()
                    })
                    .map_err(|e| e.to_string())
            }
            Want::CheckRun => {
                let id = data.get("id").and_then(Value::as_u64).unwrap_or(0);
                client
                    .request("GET", &format!("/repos/{repo}/check-runs/{id}"), None)
                    .await
                    .map(|run| Extra {
                        check_run: Some(run),
                        ..Extra::default()
                    })
                    .map_err(|e| e.to_string())
            }
        }
    };
    let outcome = match tokio::time::timeout(API_BUDGET, read).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", API_BUDGET.as_secs())),
    };
    match outcome {
        Ok(extra) => extra,
        Err(why) => Extra {
            notes: vec![format!(
                "{} not read from GitHub ({}); showing what the event carries.",
                what(Some(want)),
                protocol::toolbelt::agent_message(&why)
            )],
            ..Extra::default()
        },
    }
}

/// The conversation's last [`MAX_THREAD_COMMENTS`] comments, oldest first.
async fn thread(client: &Client, repo: &str, number: u64) -> Result<Vec<Value>, String> {
    let issue = client
        .request("GET", &format!("/repos/{repo}/issues/{number}"), None)
        .await
        .map_err(|e| e.to_string())?;
    let count = issue.get("comments").and_then(Value::as_u64).unwrap_or(0);
    if count == 0 {
        return Ok(Vec::new());
    }
    let per = MAX_THREAD_COMMENTS as u64;
    let last = count.div_ceil(per);
    let page = |p: u64| {
        let path = format!("/repos/{repo}/issues/{number}/comments?per_page={per}&page={p}");
        async move {
            client
                .request("GET", &path, None)
                .await
                .map_err(|e| e.to_string())
                .map(|v| match v {
                    Value::Array(list) => list,
                    _ => Vec::new(),
                })
        }
    };
    let mut comments = page(last).await?;
    if comments.len() < MAX_THREAD_COMMENTS && last > 1 {
        let mut before = page(last - 1).await?;
        before.append(&mut comments);
        comments = before;
    }
    let skip = comments.len().saturating_sub(MAX_THREAD_COMMENTS);
    Ok(comments.split_off(skip))
}

fn s<'a>(data: &'a Value, field: &str) -> &'a str {
    data.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn at<'a>(data: &'a Value, pointer: &str) -> &'a str {
    data.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `@login`, or `someone` for none.
fn who(login: &str) -> String {
    if login.is_empty() {
        "someone".into()
    } else {
        format!("@{login}")
    }
}

/// `text` as a Markdown block quote (`> ` before every line); `(no text)` quoted
/// for none.
pub fn quote(text: &str) -> String {
    let text = text.trim_end();
    if text.is_empty() {
        return "> (no text)\n".into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.lines() {
        if line.is_empty() {
            out.push_str(">\n");
        } else {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `text` in a fenced block of `lang` whose fence is longer than any run of
/// backticks inside.
pub fn fence(text: &str, lang: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let ticks = "`".repeat(longest.max(2) + 1);
    format!("{ticks}{lang}\n{}\n{ticks}\n", text.trim_end_matches('\n'))
}

/// The last [`MAX_HUNK_LINES`] lines of a diff hunk, with a note of how many were
/// left out.
pub fn hunk_tail(hunk: &str) -> String {
    let lines: Vec<&str> = hunk.lines().collect();
    if lines.len() <= MAX_HUNK_LINES {
        return hunk.to_string();
    }
    let skipped = lines.len() - MAX_HUNK_LINES;
    let mut out = format!("… ({skipped} earlier lines of the hunk left out)\n");
    out.push_str(&lines[skipped..].join("\n"));
    out
}

fn labels(data: &Value) -> String {
    let list: Vec<&str> = data
        .get("labels")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

fn short_sha(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

fn review_state(state: &str) -> String {
    match state.to_ascii_lowercase().as_str() {
        "approved" => "approved".into(),
        "changes_requested" => "changes requested".into(),
        "commented" => "commented".into(),
        "dismissed" => "dismissed".into(),
        "" => "submitted".into(),
        other => other.replace('_', " "),
    }
}

fn push_notes(out: &mut String, extra: &Extra) {
    for n in &extra.notes {
        out.push_str(&format!("\n_{}_\n", one_line(n, 600)));
    }
}

/// The Markdown of `event` (of `family`) with what `extra` adds; not yet bounded.
pub fn markdown(family: Family, event: &Event, extra: &Extra) -> String {
    let d = &event.payload.data;
    let mut out = String::new();
    let repo = s(d, "repository");
    let number = d.get("number").and_then(Value::as_u64).unwrap_or(0);
    let action = s(d, "action");
    let title = one_line(s(d, "title"), 300);
    match family {
        Family::Issue => {
            out.push_str(&format!("## Issue #{number} {action}: {title}\n"));
            let mut line = format!(
                "{repo} · state: {} · author: {} · labels: {}",
                s(d, "state"),
                who(s(d, "author")),
                labels(d)
            );
            if !s(d, "label").is_empty() {
                line.push_str(&format!(" · label {action}: {}", s(d, "label")));
            }
            if s(d, "sender") != s(d, "author") {
                line.push_str(&format!(" · by {}", who(s(d, "sender"))));
            }
            out.push_str(&format!("{line}\n{}\n\n", s(d, "html_url")));
            out.push_str(&quote(s(d, "body")));
        }
        Family::IssueComment => {
            let what = if d.get("is_pull_request").and_then(Value::as_bool) == Some(true) {
                "pull request"
            } else {
                "issue"
            };
            let verb = match action {
                "created" => "commented",
                "edited" => "edited a comment",
                "deleted" => "deleted a comment",
                other => other,
            };
            out.push_str(&format!(
                "## {} {verb} on {what} #{number}: {title}\n",
                who(at(d, "/comment/author"))
            ));
            out.push_str(&format!(
                "{repo} · {what} state: {} · labels: {} · {}\n\n",
                s(d, "state"),
                labels(d),
                at(d, "/comment/html_url")
            ));
            out.push_str(&quote(at(d, "/comment/body")));
            if let Some(thread) = &extra.thread {
                let own = d.pointer("/comment/id").and_then(Value::as_u64);
                let others: Vec<&Value> = thread
                    .iter()
                    .filter(|c| c.get("id").and_then(Value::as_u64) != own || own.is_none())
                    .collect();
                if others.is_empty() {
                    out.push_str(&format!("\n_No other comments on #{number}._\n"));
                } else {
                    out.push_str(&format!(
                        "\n### The conversation on #{number} (its last comments, newest last)\n"
                    ));
                    for c in others {
                        let (body, cut) = truncate(at(c, "/body"), MAX_THREAD_COMMENT_BYTES);
                        out.push_str(&format!(
                            "\n**{}** ({}):\n",
                            who(at(c, "/user/login")),
                            at(c, "/created_at")
                        ));
                        let mut body = body.to_string();
                        if cut {
                            body.push('…');
                        }
                        out.push_str(&quote(&body));
                    }
                }
            }
        }
        Family::PullRequest => {
            let merged = d.get("merged").and_then(Value::as_bool) == Some(true);
            let happened = match action {
                "closed" if merged => "merged".to_string(),
                "closed" => "closed without merging".to_string(),
                other => other.to_string(),
            };
            out.push_str(&format!("## Pull request #{number} {happened}: {title}\n"));
            let mut line = format!(
                "{repo} · `{}` → `{}` · head {} · state: {}{}{} · author: {} · labels: {}",
                s(d, "head_ref"),
                s(d, "base_ref"),
                short_sha(s(d, "head_sha")),
                s(d, "state"),
                if merged { ", merged" } else { "" },
                if d.get("draft").and_then(Value::as_bool) == Some(true) {
                    ", draft"
                } else {
                    ""
                },
                who(s(d, "author")),
                labels(d)
            );
            if s(d, "sender") != s(d, "author") {
                line.push_str(&format!(" · by {}", who(s(d, "sender"))));
            }
            out.push_str(&format!("{line}\n{}\n\n", s(d, "html_url")));
            out.push_str(&quote(s(d, "body")));
        }
        Family::PullRequestReview => {
            let state = review_state(at(d, "/review/state"));
            out.push_str(&format!(
                "## {} reviewed pull request #{number}: {state}\n",
                who(at(d, "/review/author"))
            ));
            out.push_str(&format!(
                "{title} · {repo} · `{}` → `{}` · commit {} · {}\n\n",
                s(d, "head_ref"),
                s(d, "base_ref"),
                short_sha(at(d, "/review/commit_id")),
                at(d, "/review/html_url")
            ));
            out.push_str(&quote(at(d, "/review/body")));
            review_comments(&mut out, extra);
        }
        Family::PullRequestReviewComment => {
            let c = d.get("comment").unwrap_or(&Value::Null);
            let line = c
                .get("line")
                .and_then(Value::as_u64)
                .or(c.get("original_line").and_then(Value::as_u64));
            let place = match line {
                Some(l) => format!("`{}` line {l}", s(c, "path")),
                None => format!("`{}`", s(c, "path")),
            };
            let verb = match action {
                "created" => "commented on",
                "edited" => "edited a comment on",
                "deleted" => "deleted a comment on",
                other => other,
            };
            out.push_str(&format!(
                "## {} {verb} {place} in pull request #{number}\n",
                who(s(c, "author"))
            ));
            let mut meta = format!(
                "{title} · {repo} · `{}` → `{}`",
                s(d, "head_ref"),
                s(d, "base_ref")
            );
            if let Some(r) = c.get("in_reply_to_id").and_then(Value::as_u64) {
                meta.push_str(&format!(" · in reply to comment {r}"));
            }
            out.push_str(&format!("{meta} · {}\n\n", s(c, "html_url")));
            let hunk = s(c, "diff_hunk");
            if !hunk.is_empty() {
                out.push_str(&fence(&hunk_tail(hunk), "diff"));
            }
            out.push_str(&quote(s(c, "body")));
        }
        Family::CheckRun => {
            let outcome = d
                .get("conclusion")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .unwrap_or(s(d, "status"));
            out.push_str(&format!(
                "## Check run \"{}\" {action}: {outcome}\n",
                one_line(s(d, "name"), 200)
            ));
            out.push_str(&format!(
                "{repo} · commit {} · {} · {}\n",
                short_sha(s(d, "head_sha")),
                prs(d),
                s(d, "html_url")
            ));
            if failed(outcome) {
                let (title, summary) = match &extra.check_run {
                    Some(run) => (at(run, "/output/title"), at(run, "/output/summary")),
                    None => (at(d, "/output/title"), at(d, "/output/summary")),
                };
                if title.is_empty() && summary.is_empty() {
                    out.push_str("\n_The check run reported no output._\n");
                } else {
                    out.push('\n');
                    if !title.is_empty() {
                        out.push_str(&format!("**{}**\n\n", one_line(title, 500)));
                    }
                    if !summary.is_empty() {
                        out.push_str(&quote(summary));
                    }
                }
            }
        }
        Family::CheckSuite => {
            let outcome = d
                .get("conclusion")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .unwrap_or(s(d, "status"));
            out.push_str(&format!(
                "## Checks of {} {action}: {outcome}\n",
                one_line(s(d, "app"), 200)
            ));
            let branch = s(d, "head_branch");
            out.push_str(&format!(
                "{repo} · {}commit {} · {}\n",
                if branch.is_empty() {
                    String::new()
                } else {
                    format!("branch `{branch}` · ")
                },
                short_sha(s(d, "head_sha")),
                prs(d)
            ));
        }
        Family::Wait => wait(&mut out, d, extra),
    }
    push_notes(&mut out, extra);
    out
}

fn prs(d: &Value) -> String {
    let list: Vec<String> = d
        .get("pull_requests")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_u64)
                .map(|n| format!("#{n}"))
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        "no pull request".into()
    } else {
        format!("pull request {}", list.join(", "))
    }
}

/// A review's comments from the API: path and line, the hunk, the text.
fn review_comments(out: &mut String, extra: &Extra) {
    let Some(comments) = &extra.review_comments else {
        return;
    };
    if comments.is_empty() {
        out.push_str("\n_The review has no comments on the code._\n");
        return;
    }
    out.push_str(&format!("\n### Review comments ({})\n", comments.len()));
    for c in comments {
        let line = c
            .get("line")
            .and_then(Value::as_u64)
            .or(c.get("original_line").and_then(Value::as_u64));
        let place = match line {
            Some(l) => format!("`{}` line {l}", at(c, "/path")),
            None => format!("`{}`", at(c, "/path")),
        };
        out.push_str(&format!("\n#### {place} ({})\n", who(at(c, "/user/login"))));
        let hunk = at(c, "/diff_hunk");
        if !hunk.is_empty() {
            out.push_str(&fence(&hunk_tail(hunk), "diff"));
        }
        out.push_str(&quote(at(c, "/body")));
    }
}

/// What woke a `github.wait`.
fn wait(out: &mut String, d: &Value, extra: &Extra) {
    let repo = s(d, "repository");
    let number = d.get("number").and_then(Value::as_u64).unwrap_or(0);
    match s(d, "for") {
        "checks" => {
            let checks = d.get("checks").unwrap_or(&Value::Null);
            let total = checks.get("total").and_then(Value::as_u64).unwrap_or(0);
            let bad = checks.get("failed").and_then(Value::as_u64).unwrap_or(0);
            out.push_str(&format!(
                "## The wait is over: every check on pull request #{number} finished ({})\n",
                at(checks, "/conclusion")
            ));
            out.push_str(&format!(
                "{repo} · commit {} · {total} checks, {bad} failed\n\n",
                short_sha(s(d, "head_sha"))
            ));
            for r in checks
                .get("runs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let outcome = r
                    .get("conclusion")
                    .and_then(Value::as_str)
                    .unwrap_or(at(r, "/status"));
                out.push_str(&format!(
                    "- {}: {outcome} {}\n",
                    one_line(at(r, "/name"), 200),
                    at(r, "/html_url")
                ));
            }
        }
        "review" => {
            let r = d.get("review").unwrap_or(&Value::Null);
            out.push_str(&format!(
                "## The wait is over: {} reviewed pull request #{number}: {}\n",
                who(s(r, "author")),
                review_state(s(r, "state"))
            ));
            out.push_str(&format!("{repo} · {}\n\n", s(r, "html_url")));
            out.push_str(&quote(s(r, "body")));
            review_comments(out, extra);
        }
        "reply" => {
            let c = d.get("comment").unwrap_or(&Value::Null);
            out.push_str(&format!(
                "## The wait is over: {} replied on #{number}\n",
                who(s(c, "author"))
            ));
            out.push_str(&format!("{repo} · {}\n\n", s(c, "html_url")));
            out.push_str(&quote(s(c, "body")));
        }
        other => {
            out.push_str(&format!(
                "## The wait for {other} on #{number} is over\n{repo}\n"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_defaults_and_caps() {
        assert_eq!(bound(0), DEFAULT_MAX_BYTES);
        assert_eq!(bound(100), 100);
        assert_eq!(bound(u32::MAX), MAX_RENDERED_BYTES);
    }

    #[test]
    fn a_fence_outgrows_the_backticks_inside() {
        assert_eq!(fence("a", "diff"), "```diff\na\n```\n");
        assert_eq!(fence("x ```` y", ""), "`````\nx ```` y\n`````\n");
    }

    #[test]
    fn a_quote_marks_every_line() {
        assert_eq!(quote("a\n\nb\n"), "> a\n>\n> b\n");
        assert_eq!(quote(""), "> (no text)\n");
    }

    #[test]
    fn a_long_hunk_keeps_its_last_lines() {
        let hunk: Vec<String> = (0..40).map(|i| format!("+{i}")).collect();
        let tail = hunk_tail(&hunk.join("\n"));
        assert!(tail.starts_with("… (10 earlier lines"), "{tail}");
        assert!(tail.ends_with("+39"));
        assert!(!tail.contains("+9\n"));
    }

    #[test]
    fn the_text_is_cut_at_a_character_boundary() {
        let r = finish("ééé", 3);
        assert_eq!(r.text, "é");
        assert!(r.truncated);
        assert!(!finish("abc", 3).truncated);
    }
}
