//! `oc-webhook-extension`: the webhook extension, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    match oc_webhook::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("webhook: {e}");
            std::process::exit(2);
        }
    }
}
