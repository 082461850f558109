//! `open-conduit-broker`: the bus.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(broker::cli::main(std::env::args()));
}
