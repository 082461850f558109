//! `oc-bitbucket-extension`: the bitbucket package, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    match oc_bitbucket::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("bitbucket: {e}");
            std::process::exit(2);
        }
    }
}
