//! `open-conduit-broker`: the bus.
fn main() {
    std::process::exit(broker::cli::main(std::env::args()));
}
