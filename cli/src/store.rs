//! `open-conduit store export|import`: a whole store copied between backends
//! (SQLite to PostgreSQL, or back), checked by row counts and a digest.
//!
//! Both open the database themselves, as storaged does (`--state`, and
//! `--config-dir` for `settings.storage`): stop storaged first, so the export
//! is the last word and nothing writes to the target while it fills.

use crate::output::{Failure, Out};
use std::io::{BufReader, Write};
use std::path::Path;
use storaged::{transfer, Limits, Store};

fn open(state: &Path, config_dir: Option<&Path>) -> Result<Store, Failure> {
    let target = storaged::target::storage_target(config_dir)?;
    let store = std::thread::scope(|s| {
        s.spawn(|| Store::open_with(state, Limits::default(), &target))
            .join()
            .unwrap_or_else(|_| Err(storaged::StoreError::Internal("open panicked".into())))
    })
    .map_err(|e| format!("open the store in {}: {e}", state.display()))?;
    eprintln!("store: {}", store.describe());
    Ok(store)
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::from(format!("runtime: {e}")))
}

fn report(what: &str, s: &transfer::Summary, json_out: bool) {
    if json_out {
        println!(
            "{}",
            serde_json::json!({"rows": s.rows, "total": s.total(), "digest": s.digest})
        );
    } else {
        println!(
            "{what} {} rows in {} tables, digest {}",
            s.total(),
            s.rows.len(),
            s.digest
        );
    }
}

/// `store export FILE` (`-`: standard output).
pub fn export(state: &Path, config_dir: Option<&Path>, file: &Path, json_out: bool) -> Out {
    let store = open(state, config_dir)?;
    let out: Box<dyn Write + Send> = if file == Path::new("-") {
        Box::new(std::io::stdout())
    } else {
        Box::new(std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?)
    };
    let done = runtime()?.block_on(transfer::export(&store, out, |table, rows| {
        eprintln!("exported {table}: {rows} rows");
    }));
    store.close();
    let summary = done.map_err(|e| format!("export: {e}"))?;
    if file != Path::new("-") {
        report("exported", &summary, json_out);
    }
    Ok(())
}

/// `store import FILE` into an empty store.
pub fn import(state: &Path, config_dir: Option<&Path>, file: &Path, json_out: bool) -> Out {
    let input = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let store = open(state, config_dir)?;
    let done = runtime()?.block_on(transfer::import(
        &store,
        BufReader::new(input),
        |table, rows| eprintln!("imported {table}: {rows} rows"),
    ));
    store.close();
    let summary = done.map_err(|e| format!("import: {e}"))?;
    report("imported and checked:", &summary, json_out);
    Ok(())
}
