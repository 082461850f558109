//! `oc-webhook-extension`: the webhook extension, served over stdio.

fn main() {
    match oc_webhook::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("webhook: {e}");
            std::process::exit(2);
        }
    }
}
