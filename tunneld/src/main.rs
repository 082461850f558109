//! `open-conduit-tunneld`: the tunnel daemon (see [`tunneld::cli`]).
fn main() {
    std::process::exit(tunneld::cli::main(std::env::args()));
}
