//! `dispatch-stamp DIR`: the command `bench dispatch` gives its shell runs. It reads
//! the wall clock first thing and writes it, with the run's inputs (`OS_INPUTS`), to
//! `DIR/<execution id>` (written aside and renamed). A program of its own, with
//! nothing but the standard library, so that its start costs about what a small
//! command's does (`true`), not what the bench's large binary's would.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: dispatch-stamp DIR");
        std::process::exit(2);
    };
    let inputs = std::env::var_os("OS_INPUTS")
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let name = std::env::var("OS_EXECUTION_ID").unwrap_or_else(|_| std::process::id().to_string());
    let tmp = Path::new(&dir).join(format!(".{name}"));
    let done = Path::new(&dir).join(&name);
    let text = format!("{now_ns}\n{inputs}");
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &done)) {
        eprintln!("dispatch stamp: {e}");
        std::process::exit(1);
    }
}
