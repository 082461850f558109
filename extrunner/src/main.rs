//! `open-conduit-extrunner`: every extension as a supervised process.
fn main() {
    std::process::exit(extrunner::cli::main(std::env::args()));
}
