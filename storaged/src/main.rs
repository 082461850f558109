//! `open-conduit-storaged`: the durable store.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(storaged::cli::main(std::env::args()));
}
