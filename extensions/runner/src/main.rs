//! `oc-runner-extension`: the example `runner` executor, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_runner::main());
}
