//! `open-conduit-schedulerd`: the scheduler (see [`schedulerd::cli`]).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(schedulerd::cli::main(std::env::args()));
}
