//! `oc-srt-extension`: the srt sandbox provider, served over stdio.

fn main() {
    std::process::exit(oc_srt::main());
}
