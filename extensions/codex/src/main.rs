//! `oc-codex-extension`: the codex executor, served over stdio; and, run as
//! `oc-codex-extension __wrap-codex <segment dir> <nonce>`, the wrapper of one
//! segment.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_codex::main());
}
