//! `oc-shell-extension`: the shell executor, served over stdio; and, run as
//! `oc-shell-extension __wrap <run dir> <nonce>`, the wrapper of one run.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_shell::main());
}
