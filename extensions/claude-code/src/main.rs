//! `oc-claude-code-extension`: the claude-code executor, served over stdio;
//! and, run as `oc-claude-code-extension __wrap-claude-code <segment dir> <nonce>`, the
//! wrapper of one segment.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_claude_code::main());
}
