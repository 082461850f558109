//! Reconcile passes: each registered source with a `reconcile_interval_s` is scanned on
//! that schedule, page by page, through extrunner's `ext.reconcile` (which asks the
//! owning extension for `ingress.reconcile` under the page timeout and the item and
//! byte limits, and accepts the page's observations durably before it answers).
//!
//! The source's checkpoint advances only when the scan's last page is complete and
//! accepted, and only from the checkpoint the pass started from (a precondition), so a
//! pass that fails halfway (an error, a crash, a timeout, a page over a limit) leaves
//! it where it was; the next pass scans again from there. No absence is ever inferred
//! from a partial scan (and this release infers none at all).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daemon::bus::Bus;
use protocol::wire::{IngressReconcileParams, SourceDecl};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The bounds of one page.
#[derive(Debug, Clone, Copy)]
pub struct PageLimits {
    /// How long a page may take.
    pub timeout: Duration,
    /// At most this many items a page.
    pub max_items: u32,
    /// At most this many bytes a page.
    pub max_bytes: u64,
    /// At most this many pages a pass.
    pub max_pages: u32,
}

impl Default for PageLimits {
    fn default() -> PageLimits {
        PageLimits {
            timeout: Duration::from_secs(30),
            max_items: 500,
            max_bytes: 4 * 1024 * 1024,
            max_pages: 1000,
        }
    }
}

/// The sources to reconcile: (owner, source), as extrunner registered them.
pub type Sources = Arc<Mutex<Vec<(String, SourceDecl)>>>;

/// How the last pass of a source went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    /// The source.
    pub source: String,
    /// Its owner.
    pub owner: String,
    /// `complete` or `failed`.
    pub outcome: String,
    /// Pages read.
    pub pages: u32,
    /// Items observed.
    pub items: u64,
    /// Events newly accepted.
    pub added: u64,
    /// The checkpoint now.
    pub checkpoint: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

#[derive(Debug, Deserialize)]
struct Page {
    items: u64,
    added: u64,
    #[serde(default)]
    cursor: String,
    #[serde(default)]
    checkpoint: String,
    #[serde(default)]
    complete: bool,
}

/// One pass over `source`: every page, then the checkpoint (only after a complete scan).
pub async fn pass(bus: &Bus, owner: &str, source: &str, limits: PageLimits) -> PassReport {
    let mut report = PassReport {
        source: source.to_owned(),
        owner: owner.to_owned(),
        outcome: "failed".to_owned(),
        ..PassReport::default()
    };
    let before = match bus
        .call("store.checkpoint_get", &json!({ "source": source }))
        .await
    {
        Ok(v) => v
            .get("checkpoint")
            .and_then(Value::as_str)
            .map(str::to_owned),
        Err(e) => {
            report.error = format!("store.checkpoint_get: {e}");
            return report;
        }
    };
    report.checkpoint = before.clone().unwrap_or_default();
    let generation = u64::try_from(protocol::time::now_ms()).unwrap_or(0);
    let mut cursor = String::new();
    for _ in 0..limits.max_pages {
        let params = IngressReconcileParams {
            source: source.to_owned(),
            generation,
            cursor: cursor.clone(),
            checkpoint: before.clone().unwrap_or_default(),
            max_items: limits.max_items,
            max_bytes: limits.max_bytes,
        };
        let timeout_ms = u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX);
        let page: Page = match bus
            .call_as(
                "ext.reconcile",
                &json!({"name": owner, "page": params, "timeout_ms": timeout_ms}),
            )
            .await
        {
            Ok(p) => p,
            Err(e) => {
                report.error = format!("page {}: {e}", report.pages + 1);
                return report;
            }
        };
        report.pages += 1;
        report.items += page.items;
        report.added += page.added;
        if page.complete {
            let mut set = json!({
                "source": source,
                "checkpoint": page.checkpoint,
                "generation": generation.to_string(),
            });
            match &before {
                Some(b) => set["expect"] = json!(b),
                None => set["expect_absent"] = json!(true),
            }
            if let Err(e) = bus.call("store.checkpoint_set", &set).await {
                report.error = format!("store.checkpoint_set: {e}");
                return report;
            }
            report.checkpoint = page.checkpoint;
            report.outcome = "complete".to_owned();
            return report;
        }
        cursor = page.cursor;
    }
    report.error = format!(
        "the scan did not complete within {} pages (max_pages)",
        limits.max_pages
    );
    report
}

/// The last pass of each source.
pub type Reports = Arc<Mutex<HashMap<String, PassReport>>>;

/// Run every source's passes on its schedule (the first at once), one at a time.
pub async fn run(bus: Bus, sources: Sources, reports: Reports, limits: PageLimits) {
    let mut due: HashMap<String, Instant> = HashMap::new();
    loop {
        let list: Vec<(String, SourceDecl)> = sources
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let now = Instant::now();
        due.retain(|k, _| list.iter().any(|(_, s)| &s.name == k));
        for (owner, s) in &list {
            if s.reconcile_interval_s == 0 {
                continue;
            }
            let next = *due.entry(s.name.clone()).or_insert(now);
            if next > now {
                continue;
            }
            let report = pass(&bus, owner, &s.name, limits).await;
            if report.outcome == "complete" {
                tracing::info!(OC_EXTENSION = %owner, source = %s.name, pages = report.pages, items = report.items, added = report.added, "reconcile pass complete");
            } else {
                tracing::warn!(OC_EXTENSION = %owner, source = %s.name, pages = report.pages, error = %report.error, "reconcile pass failed; the checkpoint stays where it was");
            }
            if let Ok(mut r) = reports.lock() {
                r.insert(s.name.clone(), report);
            }
            due.insert(
                s.name.clone(),
                Instant::now() + Duration::from_secs(s.reconcile_interval_s),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
