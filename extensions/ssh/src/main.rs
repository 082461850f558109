//! `oc-ssh-extension`: the ssh tunnel provider, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_ssh::main());
}
