//! What every command shares: where the bus is, calling it (saying how to reach a
//! suite when none answers), a command's failure and exit status, and printing for a
//! person (coloured words, counts) or as JSON.

use std::path::{Path, PathBuf};

use busapi::Call;
use serde_json::Value;

use crate::client;

/// The packaged bus socket.
pub const DEFAULT_BUS: &str = "/run/open-conduit/bus.sock";

/// Where the bus is: the flag, the environment, or the packaged path.
pub fn bus_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("OPEN_CONDUIT_BUS").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BUS))
}

/// A command's failure: what to print, and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// The message.
    pub message: String,
    /// The exit status (1: failed; 2: usage; 3: something is down).
    pub status: i32,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { message, status: 1 }
    }
}

/// A command's outcome.
pub type Out = Result<(), Failure>;

/// Print `v` as pretty JSON.
pub fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// `word` padded to `width`, coloured by what it says when stdout is a terminal and
/// `NO_COLOR` is unset (never in a pipe or a file).
pub fn paint(word: &str, width: usize) -> String {
    use std::io::IsTerminal;
    let padded = format!("{word:<width$}");
    let colour = match word {
        "ok" | "completed" | "running" | "ready" => "32",
        "warn" | "waiting" | "pending" | "idle" | "starting" => "33",
        "fail" | "failed" | "cancelled" | "down" | "refused" | "crashed" => "31",
        _ => return padded,
    };
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
        || !std::io::stdout().is_terminal()
    {
        return padded;
    }
    format!("\x1b[{colour}m{padded}\x1b[0m")
}

/// The string field `k` of `v`, or empty.
pub fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

/// Call a daemon's method on the suite's bus, by its params type: its answer
/// decoded. Says how to reach a suite when none answers.
pub fn call<C: Call>(bus: &Path, params: &C) -> Result<C::Result, String> {
    call_json(bus, params).and_then(client::decode::<C>)
}

pub use crate::client::decode;

/// [`call`], the answer as the daemon wrote it (for a command that prints it so).
pub fn call_json<C: Call>(bus: &Path, params: &C) -> Result<Value, String> {
    client::call_json(bus, params).map_err(|e| suite_hint(bus, e))
}

/// Call a method that is no daemon's (the broker's own `bus.status`), saying how to
/// reach a suite when none answers.
pub fn call_method(bus: &Path, method: &str, params: Value) -> Result<Value, String> {
    client::bus_call(bus, method, params).map_err(|e| suite_hint(bus, e))
}

/// `e`, and how to reach a suite when it says none answers on `bus`.
fn suite_hint(bus: &Path, e: String) -> String {
    if e.contains("No such file") || e.contains("Connection refused") {
        let up_bus = crate::up::default_state().join("run/bus.sock");
        format!(
            "{e}\nis the suite running? No suite answers on {}. `open-conduit up` serves {} (with its default state), the package {DEFAULT_BUS}; --bus or OPEN_CONDUIT_BUS name another socket",
            bus.display(),
            up_bus.display()
        )
    } else {
        e
    }
}

/// `n` and the noun, singular or plural: `1 problem`, `2 problems`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// One doctor check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The check's name.
    pub name: String,
    /// `ok`, `warn` or `fail`.
    pub status: &'static str,
    /// What was found.
    pub detail: String,
    /// What to do about a warning or a failure.
    pub fix: String,
}

/// A verdict.
pub fn verdict(name: &str, status: &'static str, detail: String, fix: &str) -> Verdict {
    Verdict {
        name: name.to_owned(),
        status,
        detail,
        fix: fix.to_owned(),
    }
}
