//! `open-conduit-ingressd`: HTTP webhook intake (see [`ingressd::cli`]).
fn main() {
    std::process::exit(ingressd::cli::main(std::env::args()));
}
