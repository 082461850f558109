#![allow(clippy::unwrap_used)]
//! Large webhook bodies end to end, with real daemons on real sockets: every body up
//! to ingressd's documented 25 MiB is verified by its extension, crosses the bus and
//! the extension protocol (base64, so over the spec's 16 MiB message), is kept once,
//! and reads back intact; a body over 25 MiB is 413 before it is read.

use oc_systest::{post, sign_sha256, Daemon, Response, Suite, HANG};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

mod common;
use common::*;

const MIB: usize = 1024 * 1024;

/// The suite with the demo configuration and ingressd's default timeouts (a 24 MiB
/// body must not race a short test timeout).
fn started_with_default_timeouts(name: &str) -> Suite {
    let suite = Suite::new(Path::new(BIN), name, &Suite::first_party()).unwrap();
    suite.start_all().unwrap();
    suite.apply_config(&config(&suite), HOOK).unwrap();
    suite.wait_for_route("/github/demo/repo").unwrap();
    suite
}

/// `len` bytes of letters and digits, not all alike, the same for the same `seed`.
fn blob(len: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x % ALPHABET.len() as u64) as usize])
        })
        .collect()
}

/// `{"number": n, "blob": "…"}` of exactly `total` bytes, and the blob's hash.
fn big_body(number: u64, total: usize) -> (Vec<u8>, String, usize) {
    let frame = format!("{{\"number\": {number}, \"blob\": \"\"}}").len();
    let b = blob(total - frame, number);
    let hash = hex(&Sha256::digest(b.as_bytes()));
    let body = format!("{{\"number\": {number}, \"blob\": \"{b}\"}}").into_bytes();
    assert_eq!(body.len(), total);
    (body, hash, b.len())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The first string under a key named `key`, anywhere in `v`.
fn find_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    match v {
        Value::Object(m) => m
            .get(key)
            .and_then(Value::as_str)
            .or_else(|| m.values().find_map(|x| find_str(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_str(x, key)),
        _ => None,
    }
}

/// Send `head` and the first `body_part` bytes of a body it announces, then read
/// the answer to the end.
fn head_then_read(suite: &Suite, head: &str, body_part: usize) -> Response {
    let mut s = TcpStream::connect(suite.http).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    // The server may already have answered and closed: a failed write is fine.
    let _ = s.write_all(&vec![b' '; body_part]);
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    oc_systest::parse_response(&answer).unwrap()
}

/// A figure, not a check: each process's peak resident memory so far.
fn print_peak_memory(suite: &Suite) {
    let hwm = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .map(|l| l.trim_start_matches("VmHWM:").trim().to_owned())
            })
            .unwrap_or_default()
    };
    for d in Daemon::ALL {
        if let Some(pid) = suite.pid(d) {
            eprintln!("peak memory of {}: {}", d.name(), hwm(pid));
        }
    }
    if let Ok(list) = suite.call("ext.list", serde_json::json!({})) {
        for e in list["extensions"].as_array().into_iter().flatten() {
            if let Some(pid) = e["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) {
                eprintln!("peak memory of extension {}: {}", e["name"], hwm(pid));
            }
        }
    }
}

#[test]
fn deliveries_up_to_25_mib_are_verified_and_kept_once_and_larger_ones_are_413() {
    let suite = started_with_default_timeouts("bodies");

    // 24 MiB: base64 makes it 32 MiB in `webhook.handle`, twice the spec's message.
    let (body, hash, blob_len) = big_body(1, 24 * MIB);
    let t = std::time::Instant::now();
    let r = deliver(&suite, "big-1", &body).unwrap();
    eprintln!("24 MiB delivery answered in {:?}", t.elapsed());
    assert_eq!(r.status, 200, "{}", r.text());

    // Kept once, and its payload reads back from storaged intact (the store's pages
    // carry it alone: it is larger than a page's byte bound).
    let t = std::time::Instant::now();
    let events = hook_events(&suite);
    eprintln!("events read back in {:?}", t.elapsed());
    assert_eq!(events.len(), 1, "{} events", events.len());
    assert_eq!(events[0]["delivery_id"], "big-1");
    let kept = find_str(&events[0]["payload"], "blob").expect("the blob in the kept payload");
    assert_eq!(kept.len(), blob_len);
    assert_eq!(hex(&Sha256::digest(kept.as_bytes())), hash);
    // And by its id, as an extension or the CLI reads one event.
    let one = suite
        .call("store.event", serde_json::json!({"id": events[0]["id"]}))
        .unwrap();
    let kept = find_str(&one["event"]["payload"], "blob").expect("the blob in store.event");
    assert_eq!(hex(&Sha256::digest(kept.as_bytes())), hash);

    // The same delivery again: the same answer, nothing added.
    let t = std::time::Instant::now();
    let again = deliver(&suite, "big-1", &body).unwrap();
    eprintln!("24 MiB redelivery answered in {:?}", t.elapsed());
    assert_eq!(again.status, 200, "{}", again.text());
    assert!(
        again.text().contains("\"duplicate\":true"),
        "{}",
        again.text()
    );
    assert_eq!(hook_events(&suite).len(), 1);
    drop(body);
    print_peak_memory(&suite);

    // A bad signature on a big body is still 401: it was verified, not waved through.
    let (other, _, _) = big_body(2, 20 * MIB);
    let forged = post(
        suite.http,
        HOOK,
        &[
            ("X-Delivery-Id", "big-forged".into()),
            ("X-Signature-256", sign_sha256(b"not the secret", &other)),
        ],
        &other,
    )
    .unwrap();
    assert_eq!(forged.status, 401, "{}", forged.text());
    drop(other);

    // 26 MiB: 413 from the Content-Length, before the body is read, and nothing kept.
    let (body, _, _) = big_body(3, 26 * MIB);
    let sig = sign_sha256(SECRET.as_bytes(), &body);
    let head = format!(
        "POST {HOOK} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         X-Delivery-Id: big-3\r\nX-Signature-256: {sig}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let too_big = head_then_read(&suite, &head, 0);
    assert_eq!(too_big.status, 413, "{}", too_big.text());
    assert!(
        too_big.text().contains(&(25 * MIB).to_string()),
        "the 413 names the limit: {}",
        too_big.text()
    );
    // The same with part of the body already sent.
    let too_big = head_then_read(&suite, &head, 64 * 1024);
    assert_eq!(too_big.status, 413, "{}", too_big.text());
    let events = hook_events(&suite);
    assert_eq!(events.len(), 1, "only big-1 is kept");

    // Nothing was taken for a 503 on the way: ingressd counted one refusal per kind.
    let metrics = head_then_read(
        &suite,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        0,
    )
    .text();
    for line in [
        "ingressd_deliveries_total{owner=\"webhook\",source=\"webhook/demo/ci\",outcome=\"accepted\"} 2",
        "ingressd_http_responses_total{code=\"413\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    assert!(
        !metrics.contains("code=\"503\""),
        "no delivery was answered 503: {metrics}"
    );
    assert!(suite.pid(Daemon::Broker).is_some());

    // Through the github extension too: an issue whose body makes the delivery
    // 22 MiB is verified and kept once, its body cut to the extension's 64 KiB.
    let mut issue: Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../extensions/github/tests/fixtures/issues.opened.json"),
        )
        .unwrap(),
    )
    .unwrap();
    issue["issue"]["body"] = Value::String(blob(22 * MIB, 4));
    let body = serde_json::to_vec(&issue).unwrap();
    assert!(body.len() > 22 * MIB && body.len() < 25 * MIB);
    let r = post(
        suite.http,
        "/github/demo/repo",
        &[
            ("Content-Type", "application/json".into()),
            ("X-GitHub-Event", "issues".into()),
            ("X-GitHub-Delivery", "big-issue".into()),
            (
                "X-Hub-Signature-256",
                sign_sha256(GH_SECRET.as_bytes(), &body),
            ),
        ],
        &body,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let kept: Vec<Value> = suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["source"] == "github/demo/repo")
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["type"], "github.issue.opened");
    assert_eq!(kept[0]["delivery_id"], "big-issue");
    assert_eq!(
        kept[0]["payload"]["body_truncated"], true,
        "{}",
        kept[0]["payload"]["title"]
    );
}
