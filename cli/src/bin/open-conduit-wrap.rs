//! `open-conduit-wrap <wrap arg> <run dir> <nonce>`: the wrapper of a detached run
//! (`sdk::wrapper`), as a program of its own. The executors start it instead of
//! re-executing the multi-call `open-conduit` (which is the wrapper too), so that
//! every run does not load and relocate the whole suite: it links only the wrapper.
//! The wrap argument says whose run it is (shell, claude-code, codex).

use std::ffi::OsString;

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let status = match args.first().and_then(|a| a.to_str()) {
        Some(oc_shell::rundir::WRAP_ARG) => oc_shell::wrapper::main(rest),
        Some(oc_claude_code::rundir::WRAP_ARG) => oc_claude_code::wrapper::main(rest),
        Some(oc_codex::rundir::WRAP_ARG) => oc_codex::rundir::wrap(rest),
        _ => {
            eprintln!(
                "usage: open-conduit-wrap {{{}|{}|{}}} <run dir> <nonce>",
                oc_shell::rundir::WRAP_ARG,
                oc_claude_code::rundir::WRAP_ARG,
                oc_codex::rundir::WRAP_ARG
            );
            2
        }
    };
    std::process::exit(status);
}
