//! What the kernel counted for a thread.

/// The write calls (`syscw`) in a thread's `io` file (`/proc/thread-self/io`,
/// `/proc/self/task/TID/io`): every `write`/`pwrite`, whatever it wrote to.
pub fn write_calls(io_file: &str) -> u64 {
    let io = std::fs::read_to_string(io_file).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("syscw: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
