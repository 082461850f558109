//! `open-conduit-extrunner`: every extension as a supervised process.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(extrunner::cli::main(std::env::args()));
}
