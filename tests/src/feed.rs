//! `feed`: a test extension with a polled source, for reconcile passes.
//!
//! Each `feed` entry names a JSON file of items (`[{item, version, title}]`); the
//! source `feed/<scope>/<entry>` is reconciled every `interval_s` seconds, `page_size`
//! items a page, the cursor being the next item's index. A file `<file>.fail-page-<N>`
//! makes page N (from 1) fail once (the marker is removed), or every time while the
//! marker says `always`, as a service that errs halfway through a scan would. The checkpoint of a complete scan is the number of
//! items it saw.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use protocol::wire::{
    ConfigureResult, IngressEvent, IngressReconcileParams, IngressReconcileResult, Observation,
    Payload, SourceDecl,
};
use protocol::{Code, RpcError};
use serde::Deserialize;
use serde_json::json;

/// The manifest.
pub const MANIFEST: &str = include_str!("../feed.json");

#[derive(Debug, Clone, Deserialize)]
struct EntryConfig {
    file: String,
    #[serde(default = "ten")]
    page_size: usize,
    #[serde(default = "one")]
    interval_s: u64,
}

fn ten() -> usize {
    10
}
fn one() -> u64 {
    1
}

#[derive(Debug, Deserialize)]
struct Item {
    item: String,
    version: String,
    #[serde(default)]
    title: String,
}

type Entries = Arc<RwLock<HashMap<String, EntryConfig>>>;

fn page(cfg: &EntryConfig, p: &IngressReconcileParams) -> Result<IngressReconcileResult, RpcError> {
    let start: usize = if p.cursor.is_empty() {
        0
    } else {
        p.cursor
            .parse()
            .map_err(|_| RpcError::invalid_params(format!("bad cursor {:?}", p.cursor)))?
    };
    let page_no = start / cfg.page_size.max(1) + 1;
    let marker = format!("{}.fail-page-{page_no}", cfg.file);
    if let Ok(text) = std::fs::read_to_string(&marker) {
        if text.trim() != "always" {
            let _ = std::fs::remove_file(&marker);
        }
        return Err(RpcError::new(
            Code::Unavailable,
            format!("the feed failed on page {page_no}"),
        ));
    }
    let text = std::fs::read_to_string(&cfg.file)
        .map_err(|e| RpcError::new(Code::Unavailable, format!("{}: {e}", cfg.file)))?;
    let items: Vec<Item> = serde_json::from_str(&text)
        .map_err(|e| RpcError::new(Code::Invalid, format!("{}: {e}", cfg.file)))?;
    let max = if p.max_items == 0 {
        cfg.page_size
    } else {
        cfg.page_size.min(p.max_items as usize)
    };
    let end = (start + max).min(items.len());
    let mut out = IngressReconcileResult::default();
    for it in items.get(start..end).unwrap_or_default() {
        out.items.push(Observation {
            item: it.item.clone(),
            version: it.version.clone(),
            delivery_id: String::new(),
            events: vec![IngressEvent {
                event_type: "feed.item.seen".into(),
                payload: Payload {
                    schema: "feed.item.v1".into(),
                    data: json!({"item": it.item, "version": it.version, "title": it.title}),
                },
                keys: vec![format!("feed:{}", it.item)],
                occurred_at: String::new(),
                snapshot: false,
            }],
        });
    }
    if end >= items.len() {
        out.complete = true;
        out.checkpoint = items.len().to_string();
    } else {
        out.cursor = end.to_string();
    }
    Ok(out)
}

/// The extension.
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let entries: Entries = Arc::default();
    let for_configure = entries.clone();
    let ext = sdk::Extension::new(MANIFEST)?
        .on_configure(move |_ctx, params| {
            let entries = for_configure.clone();
            async move {
                let mut out = ConfigureResult::default();
                let mut next = HashMap::new();
                for e in params.entries {
                    let cfg: EntryConfig =
                        serde_json::from_value(e.config.clone()).map_err(|err| {
                            RpcError::invalid_params(format!(
                                "/scopes/{}/entries/{}/config: {err}",
                                e.scope_id, e.name
                            ))
                        })?;
                    let source = format!("feed/{}/{}", e.scope_id, e.name);
                    out.sources.push(SourceDecl {
                        name: source.clone(),
                        source_type: "feed".into(),
                        scope_id: e.scope_id.clone(),
                        entry: e.name.clone(),
                        families: vec!["feed.item".into()],
                        reconcile_interval_s: cfg.interval_s,
                    });
                    next.insert(source, cfg);
                }
                if let Ok(mut m) = entries.write() {
                    *m = next;
                }
                Ok(out)
            }
        })
        .on::<protocol::wire::TaskRunParams, _, _>({
            let entries = entries.clone();
            move |_ctx, p| {
                let entries = entries.clone();
                async move {
                    let files: Vec<String> = entries
                        .read()
                        .map(|m| m.values().map(|c| c.file.clone()).collect())
                        .unwrap_or_default();
                    for f in &files {
                        use std::io::Write;
                        let mut out = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(format!("{f}.tasks"))
                            .map_err(|e| RpcError::new(Code::Unavailable, e.to_string()))?;
                        writeln!(out, "{} {}", p.task, p.now)
                            .map_err(|e| RpcError::new(Code::Unavailable, e.to_string()))?;
                    }
                    Ok(protocol::wire::TaskRunResult {
                        detail: format!("touched {} files", files.len()),
                    })
                }
            }
        })
        .on::<IngressReconcileParams, _, _>(move |_ctx, p| {
            let entries = entries.clone();
            async move {
                let cfg = entries
                    .read()
                    .ok()
                    .and_then(|m| m.get(&p.source).cloned())
                    .ok_or_else(|| {
                        RpcError::new(Code::NotFound, format!("no source {:?}", p.source))
                    })?;
                page(&cfg, &p)
            }
        });
    Ok(ext)
}

/// `oc-suite ext-feed`.
pub fn main_entry() -> i32 {
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("feed: {e}");
            2
        }
    }
}
