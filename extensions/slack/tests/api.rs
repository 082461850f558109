//! The Web API client and the operations' calls: against Prism serving Slack's own
//! Web API description (every request must be valid against it), and against a
//! scripted stand-in for what Prism cannot make (`ok: false` errors, 429 with
//! `Retry-After`), asserting the error text the agent is shown.

#![allow(clippy::unwrap_used)]

mod webapi;

use std::time::Duration;

use oc_slack::api::{Client, Limits, SlackError};
use oc_slack::ops::{self, Thread};
use protocol::Code;
use serde_json::{json, Value};
use webapi::{Adapter, StandIn};

const TOKEN: &str = "xoxb-test-0123456789-abcdefghij";

fn thread() -> Thread {
    Thread {
        channel: "C0123456789".into(),
        thread_ts: "1610241741.000200".into(),
    }
}

fn agent_message(e: &protocol::RpcError) -> String {
    e.data.as_ref().unwrap()["agent_message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn every_operation_sends_what_slacks_description_accepts() {
    let Some(prism) = webapi::prism_or_skip() else {
        return;
    };
    let adapter = Adapter::start(prism);
    let client = Client::new(&adapter.url, TOKEN).unwrap();
    let t = thread();
    let calls: Vec<(&str, Value)> = vec![
        (
            ops::POST,
            json!({"text": "On it: *deploying* the docs", "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": "On it"}}]}),
        ),
        (
            ops::UPDATE,
            json!({"ts": "1610241800.000300", "text": "Done."}),
        ),
        (ops::REACT, json!({"name": ":eyes:"})),
        (ops::READ_THREAD, json!({"limit": 20})),
        (ops::USER, json!({"user": "U0123ABCD"})),
    ];
    for (op, input) in calls {
        let out = ops::run(&client, op, &input, &t).await;
        assert!(
            out.is_ok(),
            "{op}: {:?}; violations: {:?}",
            out.err(),
            adapter.seen().violations
        );
    }
    let seen = adapter.seen();
    assert!(seen.violations.is_empty(), "{:?}", seen.violations);
    let paths: Vec<String> = seen
        .exchanges
        .iter()
        .map(|(r, _)| format!("{} {}", r.method, r.path()))
        .collect();
    assert_eq!(
        paths,
        vec![
            "POST /chat.postMessage",
            "POST /chat.update",
            "POST /reactions.add",
            "GET /conversations.replies",
            "GET /users.info",
        ]
    );
    let post = &seen.exchanges[0].0;
    assert_eq!(post.field("channel").as_deref(), Some("C0123456789"));
    assert_eq!(
        post.field("thread_ts").as_deref(),
        Some("1610241741.000200")
    );
    let blocks: Value = serde_json::from_str(&post.field("blocks").unwrap()).unwrap();
    assert_eq!(blocks[0]["type"], "section");
    let react = &seen.exchanges[2].0;
    assert_eq!(react.field("name").as_deref(), Some("eyes"));
    assert_eq!(
        react.field("timestamp").as_deref(),
        Some("1610241741.000200")
    );
    // The token went in the Authorization header alone: never in a URL or a body.
    for (r, _) in &seen.exchanges {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(!r.target.contains(TOKEN) && !String::from_utf8_lossy(&r.body).contains(TOKEN));
    }
}

#[tokio::test]
async fn a_request_the_description_refuses_is_a_violation() {
    let Some(prism) = webapi::prism_or_skip() else {
        return;
    };
    let adapter = Adapter::start(prism);
    let client = Client::new(&adapter.url, TOKEN).unwrap();
    // chat.postMessage without its required channel, and with a JSON body Slack's
    // description does not list: both refused.
    let e = client
        .post("chat.postMessage", vec![("text", "hi".to_string())])
        .await
        .unwrap_err();
    assert_eq!(e.status, Some(422), "{e}");
    let seen = adapter.seen();
    assert_eq!(seen.violations.len(), 1, "{:?}", seen.violations);
    assert!(
        seen.violations[0].contains("channel"),
        "{:?}",
        seen.violations
    );
}

#[tokio::test]
async fn ok_false_errors_name_the_method_and_slacks_code() {
    let stand_in = StandIn::start(|_, req| {
        let error = if req.path() == "/chat.postMessage" {
            "channel_not_found"
        } else {
            "invalid_auth"
        };
        (
            200,
            vec![],
            json!({"ok": false, "error": error}).to_string(),
        )
    });
    let client = Client::new(&stand_in.url, TOKEN).unwrap();
    let e = ops::run(&client, ops::POST, &json!({"text": "hi"}), &thread())
        .await
        .unwrap_err();
    assert!(e.is(Code::NotFound), "{e:?}");
    assert_eq!(
        agent_message(&e),
        "Slack chat.postMessage failed: channel_not_found (the conversation does not exist, \
         or the app cannot see it (invite the app))"
    );
    assert_eq!(
        e.data.as_ref().unwrap()["slack"]["error"],
        "channel_not_found"
    );
    let e = ops::run(&client, ops::USER, &json!({"user": "U1"}), &thread())
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    assert_eq!(
        agent_message(&e),
        "Slack users.info failed: invalid_auth (the connection's bot_token is not a valid token)"
    );
    assert!(!format!("{e:?}").contains(TOKEN));
    // already_reacted is no error for slack.react.
    let reacted = StandIn::start(|_, _| {
        (
            200,
            vec![],
            json!({"ok": false, "error": "already_reacted"}).to_string(),
        )
    });
    let client = Client::new(&reacted.url, TOKEN).unwrap();
    let out = ops::run(&client, ops::REACT, &json!({"name": "eyes"}), &thread())
        .await
        .unwrap();
    assert_eq!(out["already"], true);
}

#[tokio::test]
async fn a_429_is_waited_out_within_bounds() {
    // Rate limited once, for a second: the call waits and goes through.
    let once = StandIn::start(|n, _| {
        if n == 1 {
            (
                429,
                vec![("Retry-After", "1".into())],
                json!({"ok": false, "error": "ratelimited"}).to_string(),
            )
        } else {
            (
                200,
                vec![],
                json!({"ok": true, "channel": "C0123456789", "ts": "1610241800.000300"})
                    .to_string(),
            )
        }
    });
    let client = Client::new(&once.url, TOKEN).unwrap();
    let out = ops::run(&client, ops::POST, &json!({"text": "hi"}), &thread())
        .await
        .unwrap();
    assert_eq!(out["ts"], "1610241800.000300");
    assert_eq!(once.requests().len(), 2);

    // A Retry-After past the longest wait: not waited, the error names the bound.
    let long = StandIn::start(|_, _| {
        (
            429,
            vec![("Retry-After", "120".into())],
            json!({"ok": false, "error": "ratelimited"}).to_string(),
        )
    });
    let client = Client::new(&long.url, TOKEN).unwrap();
    let e: SlackError = client
        .post(
            "chat.postMessage",
            vec![("channel", "C1".into()), ("text", "x".into())],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::Unavailable);
    assert_eq!(long.requests().len(), 1);
    assert_eq!(
        e.to_string(),
        "Slack chat.postMessage failed: ratelimited (Slack's rate limit for this method was hit): \
         Retry-After 120 s is longer than the 30 s this package waits"
    );

    // Rate limited every time: at most `retries` waits, then the error says so.
    let always = StandIn::start(|_, _| {
        (
            429,
            vec![("Retry-After", "0".into())],
            json!({"ok": false, "error": "ratelimited"}).to_string(),
        )
    });
    let client = Client::build(
        &always.url,
        TOKEN,
        Limits {
            retries: 2,
            max_wait: Duration::from_secs(5),
        },
    )
    .unwrap();
    let e = client
        .get("users.info", vec![("user", "U1".into())])
        .await
        .unwrap_err();
    assert_eq!(always.requests().len(), 3);
    assert!(
        e.to_string()
            .ends_with("still rate limited after 2 retries (at most 2)"),
        "{e}"
    );
}

#[tokio::test]
async fn other_failures_are_clear_and_hold_no_token() {
    let broken = StandIn::start(|_, _| (502, vec![], "<html>bad gateway</html>".into()));
    let client = Client::new(&broken.url, TOKEN).unwrap();
    let e = client
        .get("users.info", vec![("user", "U1".into())])
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Slack users.info answered HTTP 502");
    // Nobody listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(&format!("http://127.0.0.1:{port}"), TOKEN).unwrap();
    let e = client.post("chat.postMessage", vec![]).await.unwrap_err();
    assert_eq!(e.code, Code::Unavailable);
    assert!(e.to_string().starts_with("Slack chat.postMessage: "), "{e}");
    assert!(!e.to_string().contains(TOKEN));
}

// Issue 42: per-method rate limit tiers (client-side pacing) and the back-off after
// Slack refused a token. The pacer here is the test's own (not the process's), so
// its counts are this test's; nothing is measured, the calls delayed and refused
// are counted.

fn posted() -> (u16, Vec<(&'static str, String)>, String) {
    (
        200,
        vec![],
        json!({"ok": true, "channel": "C1", "ts": "1610241800.000300"}).to_string(),
    )
}

fn pacer(bound: Duration) -> &'static oc_slack::api::pace::Pacer {
    Box::leak(Box::new(oc_slack::api::pace::Pacer::new(bound)))
}

#[tokio::test]
async fn chat_post_message_is_paced_per_conversation_and_refused_past_the_bound() {
    let stand_in = StandIn::start(|_, _| posted());
    // A bound shorter than one slot's wait (a second): the call past the burst is
    // refused, not sent.
    let p = pacer(Duration::from_millis(500));
    let client = Client::with_pacer(&stand_in.url, TOKEN, Limits::default(), p).unwrap();
    let post = |channel: &'static str| {
        let client = client.clone();
        async move {
            client
                .post(
                    "chat.postMessage",
                    vec![("channel", channel.into()), ("text", "x".into())],
                )
                .await
        }
    };
    for _ in 0..3 {
        post("C1").await.unwrap();
    }
    let e = post("C1").await.unwrap_err();
    assert_eq!(e.code, Code::Unavailable);
    assert_eq!(e.method, "chat.postMessage");
    assert!(
        e.to_string().starts_with(
            "Slack chat.postMessage not sent: chat.postMessage's special tier allows \
             about 60 calls a minute per conversation"
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("longer than the 0.5 s bound (MAX_PACE_WAIT)"),
        "{e}"
    );
    assert_eq!(
        stand_in.requests().len(),
        3,
        "the refused call was not sent"
    );
    assert_eq!((p.delayed(), p.refused()), (0, 1));
    // Another conversation has its own bucket.
    post("C2").await.unwrap();
    assert_eq!(stand_in.requests().len(), 4);
    // Another method too (chat.update: Tier 3).
    client
        .post(
            "chat.update",
            vec![
                ("channel", "C1".into()),
                ("ts", "1610241800.000300".into()),
                ("text", "y".into()),
            ],
        )
        .await
        .unwrap();
    assert_eq!((p.delayed(), p.refused()), (0, 1));
}

#[tokio::test]
async fn a_call_past_the_burst_waits_for_its_slot() {
    let stand_in = StandIn::start(|_, _| posted());
    let p = pacer(Duration::from_secs(5));
    let client = Client::with_pacer(&stand_in.url, TOKEN, Limits::default(), p).unwrap();
    for _ in 0..4 {
        client
            .post(
                "chat.postMessage",
                vec![("channel", "C1".into()), ("text", "x".into())],
            )
            .await
            .unwrap();
    }
    // Three at once (the burst), the fourth waited for its slot; all were sent.
    assert_eq!(stand_in.requests().len(), 4);
    assert_eq!((p.delayed(), p.refused()), (1, 0));
}

#[tokio::test]
async fn a_refused_token_is_not_sent_again_for_a_while() {
    let stand_in = StandIn::start(|_, _| {
        (
            200,
            vec![],
            json!({"ok": false, "error": "invalid_auth"}).to_string(),
        )
    });
    let p = pacer(Duration::from_secs(5));
    let client = Client::with_pacer(&stand_in.url, TOKEN, Limits::default(), p).unwrap();
    let first = ops::run(&client, ops::USER, &json!({"user": "U1"}), &thread())
        .await
        .unwrap_err();
    assert!(first.is(Code::Unauthorized), "{first:?}");
    // The projector's next passes and the agent's next calls: the same error at
    // once, without asking Slack.
    for op in [ops::POST, ops::REACT, ops::USER] {
        let input = json!({"text": "x", "name": "eyes", "user": "U1"});
        let e = ops::run(&client, op, &input, &thread()).await.unwrap_err();
        assert!(e.is(Code::Unauthorized), "{e:?}");
        let said = agent_message(&e);
        assert!(said.contains("failed: invalid_auth"), "{said}");
        assert!(
            said.contains("Slack refused it on users.info: not asked again for"),
            "{said}"
        );
        assert!(!format!("{e:?}").contains(TOKEN));
    }
    assert_eq!(stand_in.requests().len(), 1, "one request reached Slack");
    // Another token (the operator put a new one in) is asked at once.
    let other = Client::with_pacer(&stand_in.url, "xoxb-new-token", Limits::default(), p).unwrap();
    let _ = other.get("auth.test", vec![]).await.unwrap_err();
    assert_eq!(stand_in.requests().len(), 2);
}
