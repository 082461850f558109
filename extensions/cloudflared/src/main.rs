//! `oc-cloudflared-extension`: the cloudflared tunnel provider, served over stdio.

fn main() {
    std::process::exit(oc_cloudflared::main());
}
