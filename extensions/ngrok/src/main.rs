//! `oc-ngrok-extension`: the ngrok tunnel provider, served over stdio.

fn main() {
    std::process::exit(oc_ngrok::main());
}
