//! Commands on GitHub: a comment whose first line is a `/oc` command on an issue or
//! pull request steers the Work that issue or pull request belongs to (`/oc stop`,
//! `/oc retry`), or gives a person's word where the Work waits for one (`/oc answer`,
//! `/oc approve`, `/oc reject`, `/oc admit`).
//!
//! After `webhook.handle` has answered an `issue_comment` `created` delivery with its
//! Event, the command is handled in the background (the delivery's answer never
//! waits on GitHub):
//!
//! 1. The comment of the connection's own login (the bot's) is ignored.
//! 2. An unknown `/oc …` is answered with the commands there are, and an `/oc answer`
//!    with no answer with how to give one.
//! 3. The commenter's permission on the repository is asked of GitHub
//!    (`GET /repos/{owner}/{repo}/collaborators/{username}/permission`): only
//!    `admin`, `maintain` or `write` may steer; anyone else is answered
//!    `@login: /oc stop needs write permission on owner/repo (you have read)`.
//! 4. The Work is the one the key `github:<repo lowercased>#<number>` names now
//!    (`state.works`); with none, the reply says there is none.
//! 5. `/oc stop` and `/oc retry` become the host's action `core` `stop` or `retry`.
//!    The others pick, among the actions the Work's providers offer and await
//!    (`action.list`), the one the command names ([`pick`]): the open ask's `answer`,
//!    the parked call's `approve` or `reject`, the held Work's `admit` or `reject`;
//!    its input is the offer's with the person's answer or reason added.
//! 6. The action is submitted (`action.submit`, caller the login, key
//!    `comment/<comment id>`), and the reply says what was done, or why not.
//!
//! Each comment is handled once: KV `command/<comment id>` is claimed (an `absent`
//! check) before anything is written or replied, so a redelivery of the same comment
//! does nothing. A failure (GitHub or the host unavailable) is logged to stderr; a
//! command that failed before its claim is handled again if GitHub redelivers it.

use std::sync::Arc;

use protocol::wire::{
    ActionListParams, ActionSubmitParams, KvCheck, KvCommitParams, KvPut, ListedAction,
    StateWorksParams, WebhookHandleParams, WebhookHandleResult, ACTION_RETRY, ACTION_STOP,
    CORE_PROVIDER,
};
use protocol::{CallError, Code, RpcError};
use serde_json::{json, Map, Value};

use crate::config::EntryConfig;
use crate::{project, webhook, State};

/// What a command comment starts with.
pub const PREFIX: &str = "/oc";
/// The permissions that may steer a Work (`role_name` or `permission`).
pub const STEERING: &[&str] = &["admin", "maintain", "write"];
/// The action that answers an ask.
pub const ACTION_ANSWER: &str = "answer";
/// The action that approves a parked call.
pub const ACTION_APPROVE: &str = "approve";
/// The action that rejects a parked call, or Work held for admission.
pub const ACTION_REJECT: &str = "reject";
/// The action that admits Work held for admission.
pub const ACTION_ADMIT: &str = "admit";
/// The longest command word quoted back in a reply.
const MAX_QUOTED_BYTES: usize = 40;
/// The longest question (or other detail) quoted back in a reply naming several.
const MAX_QUOTED_DETAIL_BYTES: usize = 100;

/// A command read from a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/oc stop`: cancel the Work, stopping its run.
    Stop,
    /// `/oc retry`: run the Work again.
    Retry,
    /// `/oc answer TEXT`: answer the Work's open ask (TEXT the rest of the first
    /// line, else the comment's following lines; empty when there is none).
    Answer(String),
    /// `/oc approve [REASON]`: approve the Work's parked call.
    Approve(String),
    /// `/oc reject REASON`: reject the Work's parked call, or else the Work held for
    /// admission (the reason may be empty; a parked call's rejection needs one).
    Reject(String),
    /// `/oc admit [REASON]`: admit the Work held for admission.
    Admit(String),
    /// `/oc` followed by anything else (or nothing): answered with the commands.
    Unknown(String),
}

impl Command {
    /// The command as written, without what the person gave (`/oc answer`).
    pub fn text(&self) -> String {
        let word = match self {
            Command::Stop => ACTION_STOP,
            Command::Retry => ACTION_RETRY,
            Command::Answer(_) => ACTION_ANSWER,
            Command::Approve(_) => ACTION_APPROVE,
            Command::Reject(_) => ACTION_REJECT,
            Command::Admit(_) => ACTION_ADMIT,
            Command::Unknown(w) if w.is_empty() => return PREFIX.to_string(),
            Command::Unknown(w) => w,
        };
        format!("{PREFIX} {word}")
    }

    /// The host's own (`core`) action it becomes, if it is one.
    pub fn core_action(&self) -> Option<&'static str> {
        match self {
            Command::Stop => Some(ACTION_STOP),
            Command::Retry => Some(ACTION_RETRY),
            _ => None,
        }
    }
}

/// The command a comment body gives, if it is one: its first line has `/oc` as the
/// first word, then the command word (case-insensitive). What follows the word on
/// that line is `/oc answer`'s answer (else the following lines are) and the reason
/// of `/oc approve`, `/oc reject` and `/oc admit`; `/oc stop` and `/oc retry` ignore
/// it.
pub fn parse(body: &str) -> Option<Command> {
    let first = body.lines().next().unwrap_or_default().trim();
    let after = first.strip_prefix(PREFIX)?;
    if !after.is_empty() && !after.starts_with(char::is_whitespace) {
        return None;
    }
    let after = after.trim_start();
    let (word, rest) = after
        .split_once(char::is_whitespace)
        .map_or((after, ""), |(w, r)| (w, r.trim()));
    let rest = rest.to_string();
    Some(match word.to_ascii_lowercase().as_str() {
        "stop" => Command::Stop,
        "retry" => Command::Retry,
        ACTION_ANSWER if rest.is_empty() => {
            let following: Vec<&str> = body.lines().skip(1).collect();
            Command::Answer(following.join("\n").trim().to_string())
        }
        ACTION_ANSWER => Command::Answer(rest),
        ACTION_APPROVE => Command::Approve(rest),
        ACTION_REJECT => Command::Reject(rest),
        ACTION_ADMIT => Command::Admit(rest),
        other => Command::Unknown(crate::route::one_line(other, MAX_QUOTED_BYTES)),
    })
}

/// The commands there are, for a reply.
pub fn help(login: &str, command: &Command, repository: &str) -> String {
    format!(
        "@{login}: `{}` is not a command. The commands, for people with write permission on \
         {repository}, are `{PREFIX} {ACTION_STOP}` (cancel this issue's or pull request's \
         Work, stopping its run), `{PREFIX} {ACTION_RETRY}` (run it again), \
         `{PREFIX} {ACTION_ANSWER} TEXT` (answer the question the Work asks: N picks its Nth \
         choice, and the answer may be the comment's next lines), `{PREFIX} {ACTION_APPROVE} \
         [REASON]` and `{PREFIX} {ACTION_REJECT} REASON` (decide the call that waits for \
         approval), `{PREFIX} {ACTION_ADMIT}` and `{PREFIX} {ACTION_REJECT} [REASON]` (start, or \
         cancel, a Work held for admission).",
        command.text()
    )
}

/// The reply to an `/oc answer` with no answer.
pub fn no_answer(login: &str) -> String {
    format!(
        "@{login}: `{PREFIX} {ACTION_ANSWER}` needs the answer: `{PREFIX} {ACTION_ANSWER} TEXT`, \
         `{PREFIX} {ACTION_ANSWER} N` for the Nth choice, or the answer on the lines after \
         `{PREFIX} {ACTION_ANSWER}`"
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

/// `input` (an offer's, an object or null) with `fields` added.
fn merged(input: &Value, fields: &[(&str, Value)]) -> Value {
    let mut out = input.as_object().cloned().unwrap_or_else(Map::new);
    for (k, v) in fields {
        out.insert((*k).to_string(), v.clone());
    }
    Value::Object(out)
}

/// `/oc answer`'s field for an ask offering `choices`: the text itself when it is
/// one of them (or there are none), else a number N as `choice` N (the Nth, from 1),
/// else the text (which the provider refuses when choices are offered).
fn answer_field(text: &str, choices: &[String]) -> (&'static str, Value) {
    let t = text.trim();
    if choices.is_empty() || choices.iter().any(|c| c.trim() == t) {
        return ("answer", json!(text));
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = t.parse::<u64>() {
            return ("choice", json!(n));
        }
    }
    ("answer", json!(text))
}

/// The refusal naming the offers when several are open and the command cannot tell
/// which one the person means.
fn several(work_id: &str, what: &str, command: &Command, offers: &[&ListedAction]) -> String {
    let named: Vec<String> = offers
        .iter()
        .map(|o| {
            let d = if o.offer.detail.is_empty() {
                &o.offer.prompt
            } else {
                &o.offer.detail
            };
            format!(
                "\"{}\"",
                crate::route::one_line(d, MAX_QUOTED_DETAIL_BYTES).replace('`', "'")
            )
        })
        .collect();
    format!(
        "Work {work_id} has {} {what} ({}): `{}` acts only when one is open; decide them from \
         the CLI (`open-conduit asks`)",
        offers.len(),
        named.join(", "),
        command.text()
    )
}

/// The action a command picks among those `offers` (`action.list`'s) of Work
/// `work_id`, with its input: only actions a provider other than `core` offers as
/// awaited count. Answers the reply's text (after `@login: `) when there is none to
/// take, or several and the command cannot tell which.
///
/// - `/oc answer`: the open ask's `answer` (input `+ {answer}` or `+ {choice: N}`);
/// - `/oc approve`: the parked call's `approve` (input `+ {reason}` when given);
/// - `/oc reject`: the parked call's `reject` (the `reject` offered with the same
///   input as an `approve`; a reason is required), else the held Work's `reject` (the
///   one offered with an `admit`'s input);
/// - `/oc admit`: the held Work's `admit`.
pub fn pick(
    command: &Command,
    work_id: &str,
    offers: &[ListedAction],
) -> Result<(ListedAction, Value), String> {
    let awaited: Vec<&ListedAction> = offers
        .iter()
        .filter(|a| a.offer.awaited && a.provider != CORE_PROVIDER)
        .collect();
    let of = |id: &str| -> Vec<&ListedAction> {
        awaited
            .iter()
            .copied()
            .filter(|a| a.offer.id == id)
            .collect()
    };
    // A `reject` paired with an `approve` (a parked call's) or an `admit` (a hold's).
    let paired = |with: &str| -> Vec<&ListedAction> {
        let others = of(with);
        of(ACTION_REJECT)
            .into_iter()
            .filter(|r| {
                others
                    .iter()
                    .any(|o| o.provider == r.provider && o.offer.input == r.offer.input)
            })
            .collect()
    };
    let reason = |r: &str| -> Vec<(&str, Value)> {
        if r.is_empty() {
            Vec::new()
        } else {
            vec![("reason", json!(r))]
        }
    };
    let one = |found: Vec<&ListedAction>, what: &str, none: String| match found.as_slice() {
        [] => Err(none),
        [one] => Ok((*one).clone()),
        more => Err(several(work_id, what, command, more)),
    };
    let held = !of(ACTION_ADMIT).is_empty();
    let c = command.text();
    match command {
        Command::Answer(text) => {
            let ask = one(
                of(ACTION_ANSWER),
                "open asks",
                format!("Work {work_id} has no open ask: `{c}` has nothing to answer"),
            )?;
            let field = answer_field(text, &ask.offer.choices);
            let input = merged(&ask.offer.input, &[field]);
            Ok((ask, input))
        }
        Command::Approve(r) => {
            let none = if held {
                format!(
                    "no call of Work {work_id} waits for approval; the Work is held for \
                     admission: `{PREFIX} {ACTION_ADMIT}` starts it"
                )
            } else {
                format!(
                    "no call of Work {work_id} waits for approval: `{c}` has nothing to approve"
                )
            };
            let gate = one(of(ACTION_APPROVE), "calls waiting for approval", none)?;
            let input = merged(&gate.offer.input, &reason(r));
            Ok((gate, input))
        }
        Command::Reject(r) => {
            let gates = paired(ACTION_APPROVE);
            if !gates.is_empty() {
                let gate = one(gates, "calls waiting for approval", String::new())?;
                if r.is_empty() {
                    return Err(format!(
                        "`{c}` needs a reason, which the agent reads: `{c} REASON`"
                    ));
                }
                let input = merged(&gate.offer.input, &reason(r));
                return Ok((gate, input));
            }
            let hold = one(
                paired(ACTION_ADMIT),
                "holds",
                format!(
                    "no call of Work {work_id} waits for approval and the Work is not held \
                     for admission: `{c}` has nothing to reject"
                ),
            )?;
            let input = merged(&hold.offer.input, &reason(r));
            Ok((hold, input))
        }
        Command::Admit(r) => {
            let hold = one(
                of(ACTION_ADMIT),
                "holds",
                format!("Work {work_id} is not held for admission: `{c}` has nothing to admit"),
            )?;
            let input = merged(&hold.offer.input, &reason(r));
            Ok((hold, input))
        }
        Command::Stop | Command::Retry | Command::Unknown(_) => {
            Err(format!("`{c}` is not a decision on what the Work awaits"))
        }
    }
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
    let usage = match &comment.command {
        Command::Unknown(_) => Some(help(login, &comment.command, repo)),
        Command::Answer(text) if text.is_empty() => Some(no_answer(login)),
        _ => None,
    };
    if let Some(body) = usage {
        if claim(host, comment).await? {
            reply(body).await?;
        }
        return Ok(());
    }
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
    let work = works.works.first();
    // What the Work's providers offer, read before the claim so that a failure leaves
    // the comment to a redelivery.
    let offered = match (work, comment.command.core_action()) {
        (Some(work), None) => {
            host.call_typed(&ActionListParams {
                scope_id: entry.scope_id.clone(),
                work_id: work.id.clone(),
            })
            .await
            .map_err(|e| unavailable("listing the Work's actions", e))?
            .actions
        }
        _ => Vec::new(),
    };
    if !claim(host, comment).await? {
        return Ok(());
    }
    let Some(work) = work else {
        return reply(format!(
            "@{login}: there is no Work for {repo}#{}: `{}` has nothing to act on",
            comment.number,
            comment.command.text()
        ))
        .await
        .map(drop);
    };
    let (provider, action, input) = match comment.command.core_action() {
        Some(action) => (
            CORE_PROVIDER.to_string(),
            action.to_string(),
            json!({"comment_id": comment.id, "url": comment.url}),
        ),
        None => match pick(&comment.command, &work.id, &offered) {
            Ok((listed, input)) => (listed.provider, listed.offer.id, input),
            Err(why) => return reply(format!("@{login}: {why}")).await.map(drop),
        },
    };
    let submitted = host
        .call_typed(&ActionSubmitParams {
            scope_id: entry.scope_id.clone(),
            work_id: work.id.clone(),
            provider,
            action,
            input,
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
    use protocol::wire::ActionOffer;

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
    fn answers_take_the_rest_of_the_line_or_the_lines_after() {
        assert_eq!(
            parse("/oc answer  release-2.x  please \nignored"),
            Some(Command::Answer("release-2.x  please".into()))
        );
        assert_eq!(
            parse("/oc Answer\r\n\r\nTuesday,\r\nafter 5\r\n\r\n"),
            Some(Command::Answer("Tuesday,\nafter 5".into()))
        );
        assert_eq!(parse("/oc answer"), Some(Command::Answer(String::new())));
        assert_eq!(parse("/oc answer 2"), Some(Command::Answer("2".into())));
        assert_eq!(parse("/oc approve"), Some(Command::Approve(String::new())));
        assert_eq!(
            parse("/oc approve looks right\nsecond line"),
            Some(Command::Approve("looks right".into()))
        );
        assert_eq!(
            parse("/oc REJECT not on a Friday"),
            Some(Command::Reject("not on a Friday".into()))
        );
        assert_eq!(
            parse("/oc reject\nwhy"),
            Some(Command::Reject(String::new()))
        );
        assert_eq!(parse("/oc admit"), Some(Command::Admit(String::new())));
        assert_eq!(Command::Answer("secret".into()).text(), "/oc answer");
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
        for c in [
            "`/oc stop`",
            "`/oc retry`",
            "`/oc answer TEXT`",
            "`/oc approve [REASON]`",
            "`/oc reject REASON`",
            "`/oc admit`",
        ] {
            assert!(h.contains(c), "{c} in {h}");
        }
    }

    fn listed(provider: &str, id: &str, input: Value, detail: &str) -> ListedAction {
        ListedAction {
            provider: provider.into(),
            offer: ActionOffer {
                id: id.into(),
                label: id.into(),
                detail: detail.into(),
                awaited: provider != CORE_PROVIDER,
                input,
                ..ActionOffer::default()
            },
        }
    }

    fn ask(id: &str, question: &str, choices: &[&str]) -> ListedAction {
        let mut a = listed("people", "answer", json!({ "ask_id": id }), question);
        a.offer.choices = choices.iter().map(|c| c.to_string()).collect();
        a
    }

    fn gate(id: &str) -> Vec<ListedAction> {
        let input = json!({ "gate_id": id });
        vec![
            listed(
                "people",
                "approve",
                input.clone(),
                "github.open_pull_request",
            ),
            listed("people", "reject", input, "github.open_pull_request"),
        ]
    }

    fn hold() -> Vec<ListedAction> {
        vec![
            listed("people", "admit", json!({}), "start w1"),
            listed("people", "reject", json!({}), "start w1"),
        ]
    }

    fn core() -> Vec<ListedAction> {
        vec![listed(CORE_PROVIDER, "stop", Value::Null, "")]
    }

    fn picked(c: &Command, offers: &[ListedAction]) -> (String, String, Value) {
        let (a, input) = pick(c, "w1", offers).unwrap();
        (a.provider, a.offer.id, input)
    }

    #[test]
    fn an_answer_picks_the_open_ask_and_a_number_its_choice() {
        let mut offers = core();
        offers.push(ask("a-1", "Which base?", &["main", "release-2.x", "3"]));
        let answer = |t: &str| picked(&Command::Answer(t.into()), &offers);
        assert_eq!(
            answer("release-2.x"),
            (
                "people".into(),
                "answer".into(),
                json!({"ask_id": "a-1", "answer": "release-2.x"})
            )
        );
        assert_eq!(answer("2").2, json!({"ask_id": "a-1", "choice": 2}));
        // A choice's own text wins over its number.
        assert_eq!(answer("3").2, json!({"ask_id": "a-1", "answer": "3"}));
        // Text that is no choice goes to the provider, which refuses it.
        assert_eq!(
            answer("maybe").2,
            json!({"ask_id": "a-1", "answer": "maybe"})
        );
        assert_eq!(
            answer("99999999999999999999999").2,
            json!({"ask_id": "a-1", "answer": "99999999999999999999999"})
        );
        // Free text: a number is an answer like any other.
        let free = [ask("a-2", "How many?", &[])];
        assert_eq!(
            picked(&Command::Answer("2".into()), &free).2,
            json!({"ask_id": "a-2", "answer": "2"})
        );
    }

    #[test]
    fn nothing_open_or_several_open_is_said_so() {
        let e = pick(&Command::Answer("x".into()), "w1", &core()).unwrap_err();
        assert_eq!(
            e,
            "Work w1 has no open ask: `/oc answer` has nothing to answer"
        );
        let two = [
            ask("a-1", "Which base?", &[]),
            ask("a-2", "Which `tag`?", &[]),
        ];
        let e = pick(&Command::Answer("x".into()), "w1", &two).unwrap_err();
        assert_eq!(
            e,
            "Work w1 has 2 open asks (\"Which base?\", \"Which 'tag'?\"): `/oc answer` acts \
             only when one is open; decide them from the CLI (`open-conduit asks`)"
        );
        let e = pick(&Command::Approve(String::new()), "w1", &hold()).unwrap_err();
        assert!(e.contains("`/oc admit` starts it"), "{e}");
        let e = pick(&Command::Approve(String::new()), "w1", &core()).unwrap_err();
        assert_eq!(
            e,
            "no call of Work w1 waits for approval: `/oc approve` has nothing to approve"
        );
        let e = pick(&Command::Reject("no".into()), "w1", &core()).unwrap_err();
        assert!(e.contains("has nothing to reject"), "{e}");
        let e = pick(&Command::Admit(String::new()), "w1", &gate("g-1")).unwrap_err();
        assert_eq!(
            e,
            "Work w1 is not held for admission: `/oc admit` has nothing to admit"
        );
    }

    #[test]
    fn decisions_pick_the_gate_first_then_the_hold() {
        let mut both = gate("g-1");
        both.extend(hold());
        assert_eq!(
            picked(&Command::Approve(String::new()), &both),
            ("people".into(), "approve".into(), json!({"gate_id": "g-1"}))
        );
        assert_eq!(
            picked(&Command::Approve("fine".into()), &both).2,
            json!({"gate_id": "g-1", "reason": "fine"})
        );
        assert_eq!(
            picked(&Command::Reject("wrong base".into()), &both),
            (
                "people".into(),
                "reject".into(),
                json!({"gate_id": "g-1", "reason": "wrong base"})
            )
        );
        let e = pick(&Command::Reject(String::new()), "w1", &both).unwrap_err();
        assert_eq!(
            e,
            "`/oc reject` needs a reason, which the agent reads: `/oc reject REASON`"
        );
        assert_eq!(
            picked(&Command::Reject(String::new()), &hold()),
            ("people".into(), "reject".into(), json!({}))
        );
        assert_eq!(
            picked(&Command::Reject("not now".into()), &hold()).2,
            json!({"reason": "not now"})
        );
        assert_eq!(
            picked(&Command::Admit(String::new()), &both),
            ("people".into(), "admit".into(), json!({}))
        );
    }
}
