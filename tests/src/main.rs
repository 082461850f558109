//! `oc-suite`: every daemon of the suite (and the bundled extensions) in one binary,
//! chosen by the first argument, for the cross-daemon tests.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match oc_systest::dispatch(&args) {
        Some(status) => std::process::exit(status),
        None => {
            eprintln!(
                "usage: oc-suite broker|storaged|extrunner|ingressd|ext-webhook|ext-github [ARGS]"
            );
            std::process::exit(2);
        }
    }
}
