//! A run's directory, `<runs>/<execution_id>/`: the shared files of
//! [`sdk::detached`] and its `/proc` reads ([`sdk::procs`]), plus the shell
//! executor's own files.
//!
//! | file | written by | when |
//! | --- | --- | --- |
//! | `inputs.json` | extension | before the launch: the Work, the inputs, the attempt |
//! | `stdout`, `stderr` | the command | while it runs |
//!
//! and `spec.json`, `wrapper.log`, `meta.json`, `kill`, `status`, `result.json` as
//! [`sdk::detached`] describes them.

pub use sdk::detached::*;

/// The inputs given to the command (`OS_INPUTS` names it).
pub const INPUTS: &str = "inputs.json";
/// The command's standard output.
pub const STDOUT: &str = "stdout";
/// The command's standard error.
pub const STDERR: &str = "stderr";
/// What `executor.live` shows of a running run: its stdout and stderr, as text.
pub const LIVE_OUTPUTS: &[sdk::live::Output] = &[
    sdk::live::Output {
        file: STDOUT,
        media_type: sdk::live::TEXT,
    },
    sdk::live::Output {
        file: STDERR,
        media_type: sdk::live::TEXT,
    },
];
/// The hidden first argument that makes the binary the wrapper.
pub const WRAP_ARG: &str = "__wrap";
