//! A segment's directory, `<runs>/<execution_id>/<segment>/`: the shared files of
//! [`sdk::detached`] and its `/proc` reads ([`sdk::procs`]), plus this executor's
//! own files.
//!
//! | file | written by | when |
//! | --- | --- | --- |
//! | `segment.json` | extension | before the launch: the decision, the session, the turn |
//! | `mcp.json`, `toolbelt-token` | extension | before the launch, when the run has a toolbelt (the token file is 0600) |
//! | `out.jsonl`, `err.log` | claude | while it runs: its stream-json output and its stderr |
//! | `injected.jsonl` | extension | each Event written to claude's stdin, by ID |
//!
//! and `spec.json`, `wrapper.log`, `meta.json`, `kill`, `status`, `result.json` as
//! [`sdk::detached`] describes them.

pub use sdk::detached::*;

/// The segment's decision and turn.
pub const SEGMENT: &str = "segment.json";
/// claude's standard output (stream-json).
pub const STDOUT: &str = "out.jsonl";
/// claude's standard error.
pub const STDERR: &str = "err.log";
/// The MCP config claude reads.
pub const MCP: &str = "mcp.json";
/// The toolbelt token file (0600).
pub const TOKEN: &str = "toolbelt-token";
/// The Events written to claude's stdin.
pub const INJECTED: &str = "injected.jsonl";
/// What `executor.live` shows of a running segment: claude's stream (the JSON
/// lines of `--output-format stream-json`) and its stderr.
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
pub const WRAP_ARG: &str = "__wrap-claude-code";
