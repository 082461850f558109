//! `open-conduit`: see [`cli`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::main(std::env::args().collect()));
}
