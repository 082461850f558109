//! `event.render`: one of the package's Events as markdown for the agent's prompt,
//! from the Event alone (the pull request's or issue's title, key, author, branches
//! and description; the comment's author, place and text; a commit status's state),
//! bounded by the request's `max_bytes` with [`sdk::tracker::clip_markdown`].

use protocol::wire::{EventRenderParams, EventRenderResult, MAX_RENDERED_BYTES};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::{COMMIT_STATUS, FAMILIES, ISSUE};

/// The bound used when the request gives none.
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024;

/// The request's bound: its `max_bytes`, at most [`MAX_RENDERED_BYTES`].
pub fn bound(max_bytes: u32) -> usize {
    match usize::try_from(max_bytes).unwrap_or(MAX_RENDERED_BYTES) {
        0 => DEFAULT_MAX_BYTES,
        n => n.min(MAX_RENDERED_BYTES),
    }
}

/// The markdown of an Event of `family` with `data`.
pub fn markdown(family: &str, event_type: &str, data: &Value) -> String {
    let f = |p: &str| data.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let id = data.get("id").and_then(Value::as_u64).unwrap_or_default();
    if family == COMMIT_STATUS {
        let mut out = format!(
            "**Bitbucket build status** on {} commit {}: {} is {}",
            f("/repository"),
            f("/commit"),
            if f("/name").is_empty() {
                f("/key")
            } else {
                f("/name")
            },
            f("/state")
        );
        let word = match f("/state") {
            "SUCCESSFUL" => "passed",
            "FAILED" => "failed",
            "STOPPED" => "was stopped before it finished",
            "INPROGRESS" => "is still running",
            _ => "",
        };
        if !word.is_empty() {
            out.push_str(&format!(": the build {word}"));
        }
        if !f("/status_description").is_empty() {
            out.push_str(&format!(" ({})", f("/status_description")));
        }
        if !f("/url").is_empty() {
            out.push_str(&format!("\n\n{}", f("/url")));
        }
        return out;
    }
    let (what, key) = if family == ISSUE {
        ("issue", format!("{}/issues/{id}", f("/repository")))
    } else {
        ("pull request", format!("{}#{id}", f("/repository")))
    };
    let mut out = format!("**Bitbucket {what} {key}**: {}\n\n", f("/title"));
    let mut facts = Vec::new();
    if !f("/state").is_empty() {
        facts.push(format!("State: {}", f("/state")));
    }
    if !f("/author").is_empty() {
        facts.push(format!("Author: {}", f("/author")));
    }
    if !f("/source_branch").is_empty() {
        facts.push(format!(
            "Branch: {} → {}",
            f("/source_branch"),
            f("/destination_branch")
        ));
    }
    if !f("/jira_key").is_empty() {
        facts.push(format!("Jira issue: {}", f("/jira_key")));
    }
    let why = match f("/kind") {
        "created" if data.get("linked").and_then(Value::as_bool) == Some(true) => {
            "opened by the agent from this Work (linked)".to_string()
        }
        "created" => "opened".to_string(),
        "updated" => "updated".to_string(),
        "comment_created" => "a new comment".to_string(),
        "approved" => format!("approved by {}", f("/actor")),
        "changes_requested" => format!("changes requested by {}", f("/actor")),
        "fulfilled" => "merged".to_string(),
        "rejected" => "declined".to_string(),
        _ => String::new(),
    };
    if !why.is_empty() {
        facts.push(format!("Event: {why} ({event_type})"));
    }
    out.push_str(&facts.join(" · "));
    out.push_str("\n\n");
    if !f("/reason").is_empty() {
        out.push_str(&format!("Reason: {}\n\n", f("/reason")));
    }
    if !f("/description").is_empty() && f("/kind") != "comment_created" {
        out.push_str("Description:\n\n");
        out.push_str(f("/description"));
        out.push_str("\n\n");
    }
    if data.get("comment").is_some() {
        let place = match f("/comment/inline/path") {
            "" => String::new(),
            p => match data.pointer("/comment/inline/to").and_then(Value::as_u64) {
                Some(line) => format!(" on {p} line {line}"),
                None => format!(" on {p}"),
            },
        };
        out.push_str(&format!(
            "**Comment by {}{place}:**\n\n",
            f("/comment/author")
        ));
        out.push_str(f("/comment/text"));
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// Serves `event.render`.
pub fn serve(params: &EventRenderParams) -> Result<EventRenderResult, RpcError> {
    let event = &params.event;
    let family = FAMILIES.iter().copied().find(|f| {
        event
            .event_type
            .strip_prefix(f)
            .is_some_and(|r| r.is_empty() || r.starts_with('.'))
    });
    let Some(family) = family.filter(|f| event.payload.schema == format!("{f}.v1")) else {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "`{}` ({}) is not an Event of this package this release reads",
                event.event_type, event.payload.schema
            ),
        ));
    };
    let full = markdown(family, &event.event_type, &event.payload.data);
    let max = bound(params.max_bytes);
    let text = sdk::tracker::clip_markdown(&full, max);
    let truncated = text != full;
    let text = if text.len() > max {
        sdk::tracker::clip(&text, max).0.to_string()
    } else {
        text
    };
    Ok(EventRenderResult { text, truncated })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_build_status_says_whether_it_passed_or_failed() {
        let status = |state: &str| {
            markdown(
                COMMIT_STATUS,
                "bitbucket.commit_status.updated",
                &json!({"repository": "acme/widgets", "commit": "9fec8477", "name": "Unit tests",
                        "state": state, "url": "https://ci.example.test/1"}),
            )
        };
        assert_eq!(
            status("FAILED"),
            "**Bitbucket build status** on acme/widgets commit 9fec8477: Unit tests is FAILED: the build failed\n\nhttps://ci.example.test/1"
        );
        assert!(status("SUCCESSFUL").contains("is SUCCESSFUL: the build passed"));
        assert!(status("STOPPED").contains("the build was stopped before it finished"));
        assert!(status("INPROGRESS").contains("the build is still running"));
    }

    #[test]
    fn a_linked_pull_request_says_the_agent_opened_it() {
        let md = markdown(
            crate::PULLREQUEST,
            "bitbucket.pullrequest.created",
            &json!({"repository": "acme/widgets", "id": 7, "title": "Fix", "kind": "created", "linked": true}),
        );
        assert!(
            md.contains("Event: opened by the agent from this Work (linked)"),
            "{md}"
        );
    }
}
