//! `oc-git-extension`: the git resource provider, served over stdio.

fn main() {
    std::process::exit(oc_git::main());
}
