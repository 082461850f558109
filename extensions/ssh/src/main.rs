//! `oc-ssh-extension`: the ssh tunnel provider, served over stdio.

fn main() {
    std::process::exit(oc_ssh::main());
}
