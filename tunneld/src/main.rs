//! `open-conduit-tunneld`: the tunnel daemon (see [`tunneld::cli`]).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(tunneld::cli::main(std::env::args()));
}
