//! The `config` commands: `check` (offline, with the packages the document uses
//! started to check their own objects), `apply` and `show`; and where the
//! configuration directory is.

use std::path::{Path, PathBuf};

use busapi::store::{ConfigApplyRequest, ConfigCurrentRequest};
use serde_json::{json, Value};

use crate::output::{call, count, print_json, Failure, Out};

/// `config check FILE`: offline, every problem with its JSON pointer. With
/// `extensions` (a configuration directory), the packages whose types the document
/// uses, bundled and installed there, are started to check their own objects
/// ([`extrunner::offline`]).
pub fn config_check(file: &Path, extensions: Option<&Path>) -> Out {
    let doc = read_json(file)?;
    let config = match protocol::config::Config::parse(&doc) {
        Ok(c) => c,
        Err(problems) => {
            for p in &problems {
                println!("{}: {}: {}", file.display(), p.pointer, p.message);
            }
            return Err(Failure {
                message: count(problems.len(), "problem"),
                status: 1,
            });
        }
    };
    let mut findings: Vec<extrunner::offline::Finding> =
        protocol::config::Config::unknown_fields(&doc)
            .into_iter()
            .map(|p| extrunner::offline::Finding {
                pointer: p.pointer,
                code: "unknown_field".into(),
                message: p.message,
                warning: true,
            })
            .collect();
    if let Some(dir) = extensions {
        findings.extend(offline_findings(&config, dir)?);
    }
    let errors = findings.iter().filter(|f| !f.warning).count();
    for f in &findings {
        let level = if f.warning { "warning: " } else { "" };
        // A package's message may start with its own pointer, which the full one
        // already ends with: print it once.
        let message = match f.message.split_once(": ") {
            Some((p, rest)) if p.starts_with('/') && f.pointer.ends_with(p) => rest,
            _ => f.message.as_str(),
        };
        println!(
            "{}: {}: {level}{message} ({})",
            file.display(),
            f.pointer,
            f.code
        );
    }
    if errors > 0 {
        return Err(Failure {
            message: count(errors, "problem"),
            status: 1,
        });
    }
    println!(
        "{}: ok ({} connections, {} scopes)",
        file.display(),
        config.connections.len(),
        config.scopes.len()
    );
    Ok(())
}

/// Start the packages `config` uses (bundled, and installed under `config_dir`) for
/// `validate` alone, under a scratch directory removed afterwards.
fn offline_findings(
    config: &protocol::config::Config,
    config_dir: &Path,
) -> Result<Vec<extrunner::offline::Finding>, Failure> {
    let scratch = std::env::temp_dir().join(format!("open-conduit-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let bundled = scratch.join("bundled");
    crate::bundled::write_bundled_to(&bundled, &exe)?;
    let discovery =
        extrunner::discovery::discover(&config_dir.join("extensions"), Some(bundled.as_path()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let findings = rt.block_on(extrunner::offline::validate(config, &discovery, &scratch));
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(findings)
}

fn read_json(file: &Path) -> Result<Value, Failure> {
    let text = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    serde_json::from_slice(&text)
        .map_err(|e| Failure::from(format!("{}: not JSON: {e}", file.display())))
}

/// `config apply FILE`: checked, then stored as a new generation.
pub fn config_apply(bus: &Path, file: &Path, config_dir: &Path) -> Out {
    config_check(file, Some(config_dir))?;
    let doc = read_json(file)?;
    let a = call(bus, &ConfigApplyRequest { config: doc })?;
    if a.changed {
        println!("applied as generation {} ({})", a.generation, a.hash);
    } else {
        println!("unchanged: generation {} is the same", a.generation);
    }
    Ok(())
}

/// `config show`: the stored configuration; secret references shown by name only.
pub fn config_show(bus: &Path) -> Out {
    let mut c = json!(call(bus, &ConfigCurrentRequest {})?);
    for conn in c["config"]["connections"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if let Some(refs) = conn["secret_refs"].as_object_mut() {
            for v in refs.values_mut() {
                *v = json!("(set)");
            }
        }
    }
    print_json(&c);
    Ok(())
}

/// The configuration directory: the flag, else `<state>/etc` when the bus is `up`'s
/// (`<state>/run/bus.sock`), else the packaged `/etc/open-conduit`.
pub fn config_dir(flag: Option<PathBuf>, bus: &Path) -> PathBuf {
    if let Some(d) = flag {
        return d;
    }
    if let Some(state) = bus.parent().and_then(Path::parent) {
        let etc = state.join("etc");
        if bus.ends_with("run/bus.sock") && etc.is_dir() {
            return etc;
        }
    }
    PathBuf::from("/etc/open-conduit")
}
