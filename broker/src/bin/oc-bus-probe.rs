//! The bus probe: a small service and client for the bus's tests and benchmark.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(broker::probe::main(&args));
}
