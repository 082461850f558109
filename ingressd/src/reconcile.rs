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

use busapi::ext::ReconcileRequest;
use busapi::store::{CheckpointGetRequest, CheckpointSetRequest};
use busapi::Call;
use daemon::bus::Bus;
use protocol::wire::{IngressReconcileParams, SourceDecl};

pub use busapi::ingress::PassReport;

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

/// One pass over `source`: every page, then the checkpoint (only after a complete scan).
pub async fn pass(bus: &Bus, owner: &str, source: &str, limits: PageLimits) -> PassReport {
    let mut report = PassReport {
        source: source.to_owned(),
        owner: owner.to_owned(),
        outcome: "failed".to_owned(),
        ..PassReport::default()
    };
    let get = CheckpointGetRequest {
        source: source.to_owned(),
    };
    let before = match bus.call_typed(&get).await {
        Ok(v) => v.checkpoint,
        Err(e) => {
            report.error = format!("{}: {e}", CheckpointGetRequest::METHOD);
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
        let request = ReconcileRequest {
            name: owner.to_owned(),
            page: params,
            timeout_ms,
        };
        let page = match bus.call_typed(&request).await {
            Ok(p) => p,
            Err(e) => {
                report.error = format!("page {}: {e}", report.pages + 1);
                return report;
            }
        };
        report.pages += 1;
        report.items += page.items as u64;
        report.added += page.added as u64;
        if page.complete {
            let set = CheckpointSetRequest {
                source: source.to_owned(),
                checkpoint: page.checkpoint.clone(),
                generation: generation.to_string(),
                expect: before.clone(),
                expect_absent: before.is_none(),
            };
            if let Err(e) = bus.call_typed(&set).await {
                report.error = format!("{}: {e}", CheckpointSetRequest::METHOD);
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
