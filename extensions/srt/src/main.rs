//! `oc-srt-extension`: the srt sandbox provider, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_srt::main());
}
