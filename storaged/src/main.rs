//! `open-conduit-storaged`: the durable store.
fn main() {
    std::process::exit(storaged::cli::main(std::env::args()));
}
