//! `oc-github-extension`: the bundled GitHub extension, served over stdio
//! (see the `oc_github` crate).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    match oc_github::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("github: {e}");
            std::process::exit(2);
        }
    }
}
