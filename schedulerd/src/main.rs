//! `open-conduit-schedulerd`: the scheduler (see [`schedulerd::cli`]).
fn main() {
    std::process::exit(schedulerd::cli::main(std::env::args()));
}
