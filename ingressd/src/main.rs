//! `open-conduit-ingressd`: HTTP webhook intake (see [`ingressd::cli`]).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(ingressd::cli::main(std::env::args()));
}
