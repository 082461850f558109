//! `oc-schedule-extension`: the schedule extension, served over stdio.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    match oc_schedule::extension() {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("schedule: {e}");
            std::process::exit(2);
        }
    }
}
