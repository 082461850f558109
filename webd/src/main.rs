//! `open-conduit-webd`: the JSON HTTP API of the web view (see [`webd::cli`]).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(webd::cli::main(std::env::args()));
}
