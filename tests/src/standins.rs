//! Stand-ins for Cloudflare's `cloudflared` and ngrok's agent, for the tunnel tests:
//! neither service can be reached here. Each reproduces what the provider reads of
//! the real program and nothing else; **neither forwards any traffic**.
//!
//! * `fake-cloudflared tunnel --no-autoupdate --url http://ADDR` logs on stderr, in
//!   cloudflared's console format (time, `INF`, message), the lines a quick tunnel
//!   logs: the banner box of `cmd/cloudflared/tunnel/quick_tunnel.go` (`AsciiBox`)
//!   around `https://standin-<pid>.trycloudflare.com`, then `Registered tunnel
//!   connection connIndex=0 ...` (`connection/observer.go`, `logConnected`), and
//!   waits to be killed. `tunnel --no-autoupdate run` (a named tunnel) logs the
//!   connection line only. `--version` prints a version line.
//! * `fake-ngrok http ADDR --log stdout --log-format json [--domain D]` logs a JSON
//!   line on stdout and serves `GET /api/tunnels` on `$OC_STANDIN_NGROK_API` (the
//!   real agent's `web_addr`, which has no flag) in the format of ngrok's agent API
//!   documentation (<https://ngrok.com/docs/agent/api/>, "List tunnels"): one
//!   `command_line` tunnel, `proto` `https`, `public_url`
//!   `https://standin-<pid>.ngrok-free.app` (`https://D` with `--domain`), `config.addr`
//!   `http://ADDR`.

use std::io::{Read, Write};
use std::net::TcpListener;

/// The quick tunnel URL the cloudflared stand-in with process ID `pid` prints.
pub fn cloudflared_url(pid: i32) -> String {
    format!("https://standin-{pid}.trycloudflare.com")
}

/// The URL the ngrok stand-in with process ID `pid` serves (without `--domain`).
pub fn ngrok_url(pid: i32) -> String {
    format!("https://standin-{pid}.ngrok-free.app")
}

fn park() -> i32 {
    loop {
        std::thread::park();
    }
}

/// `fake-cloudflared ARGS…`.
pub fn cloudflared(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--version" || a == "version") {
        println!("cloudflared version 2024.6.1 (stand-in)");
        return 0;
    }
    let log = |msg: &str| eprintln!("2024-06-01T10:00:00Z INF {msg}");
    let pid = std::process::id();
    let named = args.iter().any(|a| a == "run");
    if !named {
        log("Requesting new quick Tunnel on trycloudflare.com...");
        let lines = [
            "Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):".to_owned(),
            cloudflared_url(pid as i32),
        ];
        let width = lines.iter().map(String::len).max().unwrap_or(0);
        let border = format!("+{}+", "-".repeat(width + 4));
        log(&border);
        for l in &lines {
            log(&format!("|  {l}{}  |", " ".repeat(width - l.len())));
        }
        log(&border);
    }
    log("Registered tunnel connection connIndex=0 connection=00000000-0000-0000-0000-000000000000 event=0 ip=127.0.0.1 location=standin protocol=quic");
    park()
}

/// `fake-ngrok ARGS…`.
pub fn ngrok(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--version" || a == "version") {
        println!("ngrok version 3.10.0 (stand-in)");
        return 0;
    }
    let addr = args.get(1).cloned().unwrap_or_default();
    let domain = args
        .windows(2)
        .find(|w| w[0] == "--domain")
        .map(|w| w[1].clone());
    let pid = std::process::id() as i32;
    let url = domain.map_or_else(|| ngrok_url(pid), |d| format!("https://{d}"));
    let api = std::env::var("OC_STANDIN_NGROK_API").unwrap_or_else(|_| "127.0.0.1:4040".into());
    let listener = match TcpListener::bind(&api) {
        Ok(l) => l,
        Err(e) => {
            println!(
                r#"{{"lvl":"crit","msg":"failed to start web service","addr":"{api}","err":"{e}"}}"#
            );
            return 1;
        }
    };
    println!(
        r#"{{"addr":"http://{addr}","lvl":"info","msg":"started tunnel","name":"command_line","obj":"tunnels","t":"2024-06-01T10:00:00Z","url":"{url}"}}"#
    );
    let body = serde_json::json!({"tunnels": [{
        "name": "command_line", "uri": "/api/tunnels/command_line",
        "public_url": url, "proto": "https",
        "config": {"addr": format!("http://{addr}"), "inspect": true},
        "metrics": {"conns": {"count": 0, "gauge": 0, "rate1": 0, "rate5": 0, "rate15": 0,
                              "p50": 0, "p90": 0, "p95": 0, "p99": 0},
                    "http": {"count": 0, "rate1": 0, "rate5": 0, "rate15": 0,
                             "p50": 0, "p90": 0, "p95": 0, "p99": 0}}}],
        "uri": "/api/tunnels"})
    .to_string();
    for conn in listener.incoming().flatten() {
        let mut conn = conn;
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf).unwrap_or(0);
        let head = String::from_utf8_lossy(&buf[..n]);
        let answer = if head.starts_with("GET /api/tunnels ") {
            format!(
                "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        } else {
            "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_owned()
        };
        let _ = conn.write_all(answer.as_bytes());
    }
    0
}
