//! `oc-slack-extension`: the slack package, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    match oc_slack::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("slack: {e}");
            std::process::exit(2);
        }
    }
}
