//! Commands on GitHub: a comment whose first line is `/oc stop` or `/oc retry` on an
//! issue or pull request steers the Work that issue or pull request belongs to.
//!
//! After `webhook.handle` has answered an `issue_comment` `created` delivery with its
//! Event, the command is handled in the background (the delivery's answer never
//! waits on GitHub):
//!
//! 1. The comment of the connection's own login (the bot's) is ignored.
//! 2. An unknown `/oc …` is answered with the commands there are.
//! 3. The commenter's permission on the repository is asked of GitHub
//!    (`GET /repos/{owner}/{repo}/collaborators/{username}/permission`): only
//!    `admin`, `maintain` or `write` may steer; anyone else is answered
//!    `@login: /oc stop needs write permission on owner/repo (you have read)`.
//! 4. The Work is the one the key `github:<repo lowercased>#<number>` names now
//!    (`state.works`); with none, the reply says there is none.
//! 5. The command becomes the host's action `core` `stop` or `retry`
//!    (`action.submit`, caller the login, key `comment/<comment id>`), and the reply
//!    says what was done, or why the host refused.
//!
//! Each comment is handled once: KV `command/<comment id>` is claimed (an `absent`
//! check) before anything is written or replied, so a redelivery of the same comment
//! does nothing. A failure (GitHub or the host unavailable) is logged to stderr; a
//! command that failed before its claim is handled again if GitHub redelivers it.

use std::sync::Arc;

use protocol::wire::{
    ActionSubmitParams, KvCheck, KvCommitParams, KvPut, StateWorksParams, WebhookHandleParams,
    WebhookHandleResult, ACTION_RETRY, ACTION_STOP, CORE_PROVIDER,
};
use protocol::{CallError, Code, RpcError};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::{project, webhook, State};

/// What a command comment starts with.
pub const PREFIX: &str = "/oc";
/// The permissions that may steer a Work (`role_name` or `permission`).
pub const STEERING: &[&str] = &["admin", "maintain", "write"];
/// The longest command word quoted back in a reply.
const MAX_QUOTED_BYTES: usize = 40;

/// A command read from a comment's first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/oc stop`: cancel the Work, stopping its run.
    Stop,
    /// `/oc retry`: run the Work again.
    Retry,
    /// `/oc` followed by anything else (or nothing): answered with the commands.
    Unknown(String),
}

impl Command {
    /// The command as written (`/oc stop`).
    pub fn text(&self) -> String {
        match self {
            Command::Stop => format!("{PREFIX} {ACTION_STOP}"),
            Command::Retry => format!("{PREFIX} {ACTION_RETRY}"),
            Command::Unknown(w) if w.is_empty() => PREFIX.to_string(),
            Command::Unknown(w) => format!("{PREFIX} {w}"),
        }
    }

    /// The host action it becomes, if any.
    pub fn action(&self) -> Option<&'static str> {
        match self {
            Command::Stop => Some(ACTION_STOP),
            Command::Retry => Some(ACTION_RETRY),
            Command::Unknown(_) => None,
        }
    }
}

/// The command a comment body's first line gives, if it is one: `/oc` as the first
/// word, then the command word (case-insensitive); anything after it is ignored.
pub fn parse(body: &str) -> Option<Command> {
    let first = body.lines().next().unwrap_or_default();
    let mut words = first.split_whitespace();
    if words.next()? != PREFIX {
        return None;
    }
    let word = words.next().unwrap_or_default().to_ascii_lowercase();
    Some(match word.as_str() {
        "stop" => Command::Stop,
        "retry" => Command::Retry,
        _ => Command::Unknown(crate::route::one_line(&word, MAX_QUOTED_BYTES)),
    })
}

/// The commands there are, for a reply.
pub fn help(login: &str, command: &Command, repository: &str) -> String {
    format!(
        "@{login}: `{}` is not a command. The commands are `{PREFIX} {ACTION_STOP}` (cancel \
         this issue's or pull request's Work, stopping its run) and `{PREFIX} {ACTION_RETRY}` \
         (run it again), for people with write permission on {repository}.",
        command.text()
    )
}

/// Whether a permission answer lets its user steer: its `role_name` or `permission`
/// is `admin`, `maintain` or `write`. Answers the permission to quote otherwise.
pub fn may_steer(answer: &Value) -> Result<(), String> {
    let role = answer["role_name"].as_str().unwrap_or_default();
    let permission = answer["permission"].as_str().unwrap_or_default();
    if STEERING.contains(&role) || STEERING.contains(&permission) {
        return Ok(());
    }
    let has = [role, permission]
        .into_iter()
        .find(|p| !p.is_empty())
        .unwrap_or("none");
    Err(has.to_string())
}

/// The refusal of a commenter without write permission.
pub fn refusal(login: &str, command: &Command, repository: &str, has: &str) -> String {
    format!(
        "@{login}: `{}` needs write permission on {repository} (you have {has})",
        command.text()
    )
}

/// A command comment of an accepted delivery: what the handler needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Comment {
    /// The comment's ID.
    pub id: u64,
    /// Its author.
    pub login: String,
    /// Its URL.
    pub url: String,
    /// `owner/name`, as the payload spells it.
    pub repository: String,
    /// The issue or pull request it is on.
    pub number: u64,
    /// The command.
    pub command: Command,
}

/// The command comment of a webhook request whose answer carries a delivery: an
/// `issue_comment` `created` whose body's first line is a command.
pub fn command_of(params: &WebhookHandleParams, result: &WebhookHandleResult) -> Option<Comment> {
    if result.deliveries.is_empty()
        || params.header(webhook::EVENT_HEADER).map(str::trim) != Some("issue_comment")
    {
        return None;
    }
    let payload: Value = serde_json::from_slice(&params.body).ok()?;
    if payload["action"] != "created" {
        return None;
    }
    let comment = &payload["comment"];
    let command = parse(comment["body"].as_str()?)?;
    Some(Comment {
        id: comment["id"].as_u64()?,
        login: comment["user"]["login"].as_str()?.to_string(),
        url: comment["html_url"].as_str().unwrap_or_default().to_string(),
        repository: payload["repository"]["full_name"].as_str()?.to_string(),
        number: payload["issue"]["number"].as_u64()?,
        command,
    })
}

/// After `webhook.handle`: handles the request's command comment, if it carries one,
/// in the background.
pub fn spawn_after(
    state: &Arc<State>,
    host: &sdk::Host,
    params: &WebhookHandleParams,
    result: &WebhookHandleResult,
) {
    let Some(comment) = command_of(params, result) else {
        return;
    };
    let Some(entry) = state.registry().entry_for(&params.path).cloned() else {
        return;
    };
    let (state, host) = (state.clone(), host.clone());
    tokio::spawn(async move {
        if let Err(e) = handle(&state, &host, &entry, &comment).await {
            eprintln!(
                "github: `{}` in comment {} on {}#{}: {}",
                comment.command.text(),
                comment.id,
                comment.repository,
                comment.number,
                e.message
            );
        }
    });
}

fn unavailable(what: &str, e: CallError) -> RpcError {
    RpcError::new(Code::Unavailable, format!("{what}: {e}"))
}

/// Claims the comment (KV `command/<id>`, absent): false when it was handled before.
async fn claim(host: &sdk::Host, comment: &Comment) -> Result<bool, RpcError> {
    let key = format!("command/{}", comment.id);
    let r = host
        .call_typed(&KvCommitParams {
            checks: vec![KvCheck::absent(key.clone())],
            puts: vec![KvPut {
                namespace: String::new(),
                key,
                value: json!({"command": comment.command.text(), "login": comment.login,
                              "repository": comment.repository, "number": comment.number}),
            }],
            ..Default::default()
        })
        .await;
    match r {
        Ok(_) => Ok(true),
        Err(CallError::Rpc(e)) if e.is(Code::Conflict) => Ok(false),
        Err(e) => Err(unavailable("claiming the comment", e)),
    }
}

/// Handles one command comment (see the module doc).
pub async fn handle(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    comment: &Comment,
) -> Result<(), RpcError> {
    let client = state
        .client(host, &entry.scope_id, &entry.connection)
        .await?;
    let me = state
        .acting_login(&client, &entry.scope_id, &entry.connection)
        .await
        .map_err(|e| e.to_rpc())?;
    if me.eq_ignore_ascii_case(&comment.login) {
        return Ok(());
    }
    let repo = comment.repository.as_str();
    let login = comment.login.as_str();
    let reply = |body: String| {
        let client = client.clone();
        let path = format!("/repos/{repo}/issues/{}/comments", comment.number);
        async move {
            client
                .request("POST", &path, Some(json!({ "body": body })))
                .await
                .map_err(|e| e.to_rpc())
        }
    };
    let Some(action) = comment.command.action() else {
        if claim(host, comment).await? {
            reply(help(login, &comment.command, repo)).await?;
        }
        return Ok(());
    };
    let permission = client
        .request(
            "GET",
            &format!(
                "/repos/{repo}/collaborators/{}/permission",
                crate::api::percent_encode(login)
            ),
            None,
        )
        .await;
    let permission = match permission {
        Ok(p) => may_steer(&p),
        // Not a collaborator (or not a user GitHub knows): no permission.
        Err(e) if e.status == Some(404) => Err("none".to_string()),
        Err(e) => return Err(e.to_rpc()),
    };
    if let Err(has) = permission {
        if claim(host, comment).await? {
            reply(refusal(login, &comment.command, repo, &has)).await?;
        }
        return Ok(());
    }
    let works = host
        .call_typed(&StateWorksParams {
            scope_id: entry.scope_id.clone(),
            key: project::key(repo, comment.number),
            limit: 1,
            ..Default::default()
        })
        .await
        .map_err(|e| unavailable("finding the Work", e))?;
    if !claim(host, comment).await? {
        return Ok(());
    }
    let Some(work) = works.works.first() else {
        return reply(format!(
            "@{login}: there is no Work for {repo}#{}: `{}` has nothing to act on",
            comment.number,
            comment.command.text()
        ))
        .await
        .map(drop);
    };
    let submitted = host
        .call_typed(&ActionSubmitParams {
            scope_id: entry.scope_id.clone(),
            work_id: work.id.clone(),
            provider: CORE_PROVIDER.to_string(),
            action: action.to_string(),
            input: json!({"comment_id": comment.id, "url": comment.url}),
            caller: login.to_string(),
            key: format!("comment/{}", comment.id),
        })
        .await;
    let body = match submitted {
        Ok(r) if !r.added => return Ok(()),
        Ok(r) => format!("@{login}: {}", r.message),
        Err(CallError::Rpc(e)) if !e.is(Code::Unavailable) && !e.is(Code::Internal) => format!(
            "@{login}: `{}` was refused: {}",
            comment.command.text(),
            crate::route::one_line(&e.message, 300)
        ),
        Err(e) => return Err(unavailable("action.submit", e)),
    };
    reply(body).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_first_line_starting_with_oc_is_a_command() {
        assert_eq!(parse("/oc stop"), Some(Command::Stop));
        assert_eq!(
            parse("  /oc   RETRY please\nmore text"),
            Some(Command::Retry)
        );
        assert_eq!(parse("/oc"), Some(Command::Unknown(String::new())));
        assert_eq!(
            parse("/oc merge it"),
            Some(Command::Unknown("merge".into()))
        );
        assert_eq!(parse("please /oc stop"), None);
        assert_eq!(parse("hello\n/oc stop"), None);
        assert_eq!(parse("/ocstop"), None);
        assert_eq!(parse(""), None);
        let long = format!("/oc {}", "x".repeat(500));
        match parse(&long) {
            Some(Command::Unknown(w)) => assert!(w.len() <= MAX_QUOTED_BYTES),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn write_maintain_and_admin_steer_and_the_rest_are_told_what_they_have() {
        assert_eq!(
            may_steer(&json!({"permission": "write", "role_name": "write"})),
            Ok(())
        );
        assert_eq!(
            may_steer(&json!({"permission": "write", "role_name": "maintain"})),
            Ok(())
        );
        assert_eq!(may_steer(&json!({"permission": "admin"})), Ok(()));
        assert_eq!(
            may_steer(&json!({"permission": "read", "role_name": "triage"})),
            Err("triage".into())
        );
        assert_eq!(
            may_steer(&json!({"permission": "read"})),
            Err("read".into())
        );
        assert_eq!(may_steer(&json!({})), Err("none".into()));
        assert_eq!(
            refusal("octocat", &Command::Stop, "o/r", "read"),
            "@octocat: `/oc stop` needs write permission on o/r (you have read)"
        );
        let h = help("octocat", &Command::Unknown("xyz".into()), "o/r");
        assert!(
            h.starts_with("@octocat: `/oc xyz` is not a command."),
            "{h}"
        );
        assert!(h.contains("`/oc stop`") && h.contains("`/oc retry`"), "{h}");
    }
}
