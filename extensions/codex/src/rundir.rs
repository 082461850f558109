//! A segment's directory, `<runs>/<execution_id>/<segment>/`: the shared files of
//! [`sdk::detached`], plus this executor's own.
//!
//! | file | written by | when |
//! | --- | --- | --- |
//! | `segment.json` | extension | before the launch: the session, how it launched, the totals before the turn |
//! | `status-schema.json` | extension | before the launch, for `--output-schema` |
//! | `toolbelt-token` | extension | before the launch, when the run has a toolbelt (0600) |
//! | `out.jsonl`, `err.log` | codex | while it runs: its `--json` events and its stderr |
//! | `last-message.txt` | codex | at the turn's end (`-o`): the last agent message |
//!
//! and `spec.json`, `wrapper.log`, `meta.json`, `kill`, `status`, `result.json` as
//! [`sdk::detached`] describes them.

pub use sdk::detached::*;

/// The segment's decision and baseline.
pub const SEGMENT: &str = "segment.json";
/// The structured status's schema.
pub const SCHEMA: &str = "status-schema.json";
/// codex's standard output (`--json` events).
pub const STDOUT: &str = "out.jsonl";
/// codex's standard error.
pub const STDERR: &str = "err.log";
/// The last agent message (`-o`).
pub const LAST: &str = "last-message.txt";
/// The toolbelt token file (0600).
pub const TOKEN: &str = "toolbelt-token";
/// What `executor.live` shows of a running segment.
pub const LIVE_OUTPUTS: &[sdk::live::Output] = &[
    sdk::live::Output {
        file: STDOUT,
        media_type: sdk::live::NDJSON,
    },
    sdk::live::Output {
        file: STDERR,
        media_type: sdk::live::TEXT,
    },
];
/// The hidden first argument that makes the binary the wrapper.
pub const WRAP_ARG: &str = "__wrap-codex";

/// The wrapper's entry point, with the arguments after [`WRAP_ARG`]: codex's stdin
/// is the rest of the extension's pipe (the prompt, then EOF).
pub fn wrap(args: &[std::ffi::OsString]) -> i32 {
    sdk::wrapper::main(
        args,
        sdk::wrapper::WrapperOptions {
            label: "codex",
            stdin_from_extension: true,
            stdout: STDOUT,
            stderr: STDERR,
        },
    )
}
