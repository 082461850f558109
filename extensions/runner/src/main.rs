//! `oc-runner-extension`: the example `runner` executor, served over stdio.

fn main() {
    std::process::exit(oc_runner::main());
}
