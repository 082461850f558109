//! `open-conduit`: see [`cli`].
fn main() {
    std::process::exit(cli::main(std::env::args().collect()));
}
