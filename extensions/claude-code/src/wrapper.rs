//! The wrapper: `oc-claude-code-extension __wrap-claude-code <segment dir> <nonce>`,
//! the process that owns one segment's claude and outlives the extension that started
//! it ([`sdk::wrapper`]): claude's stdin is the rest of the extension's pipe (the
//! prompt, then injected input), its output goes to `out.jsonl` and `err.log`.

use std::ffi::OsString;

/// The wrapper's entry point, with the arguments after `__wrap-claude-code`.
pub fn main(args: &[OsString]) -> i32 {
    sdk::wrapper::main(
        args,
        sdk::wrapper::WrapperOptions {
            label: "claude-code",
            stdin_from_extension: true,
            stdout: crate::rundir::STDOUT,
            stderr: crate::rundir::STDERR,
        },
    )
}
