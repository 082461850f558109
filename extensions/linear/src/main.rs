//! `oc-linear-extension`: the linear package, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    match oc_linear::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("linear: {e}");
            std::process::exit(2);
        }
    }
}
