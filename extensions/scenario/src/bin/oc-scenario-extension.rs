//! The transport scenario extension, served over stdio.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(oc_scenario::main_entry(&args));
}
