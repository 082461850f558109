//! POSIX shell quoting, shared by the plan's command line ([`crate::plan`]) and the
//! cgroup's enter script ([`crate::limit`]).

/// `arg` single-quoted for a POSIX shell.
pub fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// `argv` as one POSIX shell command line (each argument single-quoted).
pub fn shell_line(argv: &[String]) -> String {
    argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}
