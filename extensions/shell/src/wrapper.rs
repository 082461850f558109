//! The wrapper: `oc-shell-extension __wrap <run dir> <nonce>`, the process that owns
//! one run's command and outlives the extension that started it ([`sdk::wrapper`]):
//! the command's stdin is `/dev/null`, its output goes to `stdout` and `stderr`.

use std::ffi::OsString;

/// The wrapper's entry point, with the arguments after `__wrap`.
pub fn main(args: &[OsString]) -> i32 {
    sdk::wrapper::main(
        args,
        sdk::wrapper::WrapperOptions {
            label: "shell",
            stdin_from_extension: false,
            stdout: crate::rundir::STDOUT,
            stderr: crate::rundir::STDERR,
        },
    )
}
