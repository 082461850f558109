//! `oc-notes-extension`: the notes example, in the release `OC_NOTES_RELEASE`
//! names (see the crate's documentation).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let release = match std::env::var(oc_notes::RELEASE_ENV) {
        Ok(r) => match r.parse::<u32>() {
            Ok(r) => r,
            Err(_) => {
                eprintln!(
                    "notes: {} must be 1, 2 or 3, not {r:?}",
                    oc_notes::RELEASE_ENV
                );
                std::process::exit(2);
            }
        },
        Err(_) => 3,
    };
    let crash = std::env::var(oc_notes::CRASH_ENV).is_ok_and(|v| v == "1");
    match oc_notes::extension(release, crash) {
        Ok(ext) => std::process::exit(sdk::run(ext)),
        Err(e) => {
            eprintln!("notes: {e}");
            std::process::exit(2);
        }
    }
}
