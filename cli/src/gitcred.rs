//! `open-conduit git-credential EXTENSION get|store|erase`: git's credential helper for
//! a run's own git. An extension's `run.environment` layer names it on
//! `GIT_CONFIG_*` (`credential.<url>.helper`), so the credential never sits in the
//! run's environment, argv, a file or the repository's config: when git needs one it
//! runs this helper, which reads git's request on stdin and asks the toolbelt
//! (`toolbelt.git_credential`, `OS_ENDPOINT` and the token in `OS_TOKEN_FILE`), which
//! asks the extension for this run. `get` prints `username=` and `password=` (and
//! `password_expiry_utc=` when the credential expires); a refusal prints `quit=1`, so
//! git tries no other helper and does not prompt, and says why on stderr. `store`
//! and `erase` do nothing: nothing is kept.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};

use protocol::toolbelt::GitCredentialParams;

use crate::mcp::Client;

/// The most bytes of git's request read from stdin.
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// git's credential request: `key=value` lines up to a blank line or the end.
pub fn parse_request(input: impl Read) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let reader = std::io::BufReader::new(input.take(MAX_REQUEST_BYTES));
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.insert(k.to_owned(), v.to_owned());
        }
    }
    out
}

/// What `get` prints for `answer` (git's credential format).
pub fn format_answer(answer: &protocol::wire::RunCredentialResult) -> String {
    let mut out = format!(
        "username={}\npassword={}\n",
        answer.username, answer.password
    );
    if let Some(ms) = protocol::time::parse_rfc3339_ms(&answer.expires_at) {
        out.push_str(&format!("password_expiry_utc={}\n", ms / 1000));
    }
    out
}

/// Run the helper; the exit status (0 even for a refusal: `quit=1` says it to git).
pub fn main(extension: &str, operation: &str) -> i32 {
    if operation != "get" {
        // store and erase: nothing is kept, nothing to forget.
        return 0;
    }
    let request = parse_request(std::io::stdin().lock());
    let refuse = |why: String| {
        eprintln!("open-conduit git-credential: {why}");
        let _ = std::io::stdout().write_all(b"quit=1\n");
        0
    };
    let client = match Client::from_env() {
        Ok(c) => c,
        Err(e) => return refuse(format!("not in a run with a toolbelt: {e}")),
    };
    let field = |k: &str| request.get(k).cloned().unwrap_or_default();
    let params = GitCredentialParams {
        token: String::new(),
        extension: extension.to_owned(),
        protocol: field("protocol"),
        host: field("host"),
        path: field("path"),
    };
    match client.git_credential(params) {
        Ok(answer) => {
            let _ = std::io::stdout().write_all(format_answer(&answer).as_bytes());
            0
        }
        Err(e) => refuse(format!(
            "no credential for {}://{}/{}: {e}",
            field("protocol"),
            field("host"),
            field("path")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_stops_at_a_blank_line() {
        let r = parse_request(&b"protocol=https\nhost=127.0.0.1:9\npath=o/r.git\n\nhost=x\n"[..]);
        assert_eq!(r["protocol"], "https");
        assert_eq!(r["host"], "127.0.0.1:9");
        assert_eq!(r["path"], "o/r.git");
    }

    #[test]
    fn the_answer_is_in_gits_format() {
        let a = protocol::wire::RunCredentialResult {
            username: "x-access-token".into(),
            password: "t0k".into(),
            expires_at: "2026-12-03T13:00:00Z".into(),
        };
        assert_eq!(
            format_answer(&a),
            "username=x-access-token\npassword=t0k\npassword_expiry_utc=1796302800\n"
        );
    }
}
