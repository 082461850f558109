//! The transport scenario extension, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(oc_scenario::main_entry(&args));
}
