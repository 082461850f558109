//! The WebDriver client against a real headless Chromium: a tiny page served from
//! a thread here, a button whose click changes a text through a script, and a
//! screenshot. Without chromium and chromedriver it skips, saying why, unless
//! `OC_REQUIRE_PEERS=1` (as `.ci/run` sets), under which it fails.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use oc_systest::webdriver::Browser;
use oc_systest::HANG;
use serde_json::json;

const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>smoke</title></head>
<body>
<p id="said">not yet</p>
<input id="name" value="">
<button id="go" data-kind="primary">Go</button>
<script>
document.getElementById('go').addEventListener('click', function () {
  setTimeout(function () {
    document.getElementById('said').textContent =
      'clicked by ' + document.getElementById('name').value;
  }, 100);
});
</script>
</body></html>"#;

/// Serve [`PAGE`] to every request on a loopback port, from a thread: its URL.
fn serve() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}/", l.local_addr().expect("its address"));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nSet-Cookie: smoke=1; Path=/; HttpOnly; SameSite=Strict\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PAGE}",
                PAGE.len()
            );
        }
    });
    url
}

#[test]
fn a_click_changes_the_page_and_the_screenshot_is_a_png() {
    let Some(b) = Browser::start().expect("the browser") else {
        return;
    };
    let url = serve();
    b.goto(&url).expect("the page");
    assert_eq!(b.text("#said").expect("the text"), "not yet");
    assert_eq!(
        b.attribute("#go", "data-kind").expect("the attribute"),
        Some("primary".to_owned())
    );
    assert_eq!(
        b.attribute("#go", "title").expect("no such attribute"),
        None
    );
    assert_eq!(b.find_all("button, input").expect("elements").len(), 2);
    assert!(b.find_all("table").expect("none").is_empty());
    b.send_keys("#name", "ada").expect("typing");
    b.click("#go").expect("the click");
    let said = b
        .wait_for("the text to change", HANG, |b| {
            let t = b.text("#said")?;
            Ok((t != "not yet").then_some(t))
        })
        .expect("the changed text");
    assert_eq!(said, "clicked by ada");
    let sum = b
        .execute(
            "return arguments[0] + arguments[1];",
            vec![json!(2), json!(3)],
        )
        .expect("the script");
    assert_eq!(sum, json!(5));
    let cookies = b.cookies().expect("the cookies");
    let smoke = cookies
        .iter()
        .find(|c| c.name == "smoke")
        .unwrap_or_else(|| panic!("no cookie smoke: {cookies:?}"));
    assert!(
        smoke.http_only && smoke.same_site.as_deref() == Some("Strict"),
        "{smoke:?}"
    );

    // What a failure says: WebDriver's error, and what was waited for.
    let missing = b.find("#nosuch").unwrap_err();
    assert!(
        missing.contains("#nosuch") && missing.contains("no such element"),
        "{missing}"
    );
    let waited = b
        .wait_for("a text that never comes", Duration::from_millis(300), |b| {
            Ok((b.text("#said")? == "never").then_some(()))
        })
        .unwrap_err();
    assert!(waited.contains("for a text that never comes"), "{waited}");

    let shot = std::env::temp_dir().join(format!("oc-smoke-{}.png", std::process::id()));
    b.screenshot(&shot).expect("the screenshot");
    let png = std::fs::read(&shot).expect("the PNG file");
    let _ = std::fs::remove_file(&shot);
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000,
        "not a PNG: {} bytes",
        png.len()
    );
    // The window's size, read from the PNG's header (width, height big-endian).
    let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
    assert!(width >= 1000, "width {width}");
}

/// Dropping the browser stops chromedriver and its Chromium: no process that uses
/// the session's profile is left.
#[test]
fn dropping_the_browser_leaves_no_process() {
    let Some(b) = Browser::start().expect("the browser") else {
        return;
    };
    b.goto("about:blank").expect("a blank page");
    let profile = b.profile().display().to_string();
    let with_profile = || -> Vec<(i32, String)> {
        processes()
            .into_iter()
            .filter(|(_, cmd)| cmd.contains(&profile))
            .collect()
    };
    assert!(!with_profile().is_empty(), "no chromium runs on {profile}");
    drop(b);
    assert!(
        !std::path::Path::new(&profile).exists(),
        "{profile} is left"
    );
    // SIGKILLed processes take a moment to go.
    let deadline = std::time::Instant::now() + HANG;
    loop {
        let left = with_profile();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every live process: pid and command line.
fn processes() -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.contains(") Z ") {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if !cmd.is_empty() {
            out.push((pid, cmd));
        }
    }
    out
}
