//! `open-conduit-ingressd`: HTTP webhook intake.
//!
//! Not wired yet: every delivery is answered 503 ("the extension path is not wired yet",
//! `Retry-After: 5`) and `/healthz` is 503, until the bus-backed intake replaces
//! [`ingressd::cli::NotWired`].
fn main() {
    std::process::exit(ingressd::cli::main(std::env::args()));
}
