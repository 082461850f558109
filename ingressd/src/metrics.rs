//! The counters `/metrics` serves, in Prometheus text format (the writer and the
//! histogram are the suite's shared ones, [`daemon::metrics`]). ingressd's own
//! families keep their `ingressd_` names; the rest of the suite's are gathered over
//! the bus ([`crate::Intake::metrics`]).

use daemon::metrics::{Histogram, Kind, Text, LATENCY_BUCKETS};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The counters of the server serving now (the last started), for
/// `ingress.metrics`.
static SERVING: Mutex<Weak<Metrics>> = Mutex::new(Weak::new());

/// New counters for a server, which `ingress.metrics` reports from now on.
pub(crate) fn serving() -> Arc<Metrics> {
    let m = Arc::new(Metrics::default());
    if let Ok(mut s) = SERVING.lock() {
        *s = Arc::downgrade(&m);
    }
    m
}

/// `ingress.metrics`: the serving server's samples (only the bus call times when
/// none serves).
pub(crate) fn render_serving() -> String {
    let serving = SERVING.lock().ok().and_then(|s| s.upgrade());
    match serving {
        Some(m) => m.render(),
        None => {
            let mut t = Text::new();
            daemon::metrics::render_call_times(&mut t, "ingressd");
            t.into_string()
        }
    }
}

#[derive(Debug)]
pub(crate) struct Metrics {
    deliveries: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    responses: Mutex<BTreeMap<u16, u64>>,
    latency: Histogram,
    pub(crate) in_flight: AtomicI64,
    pub(crate) connections_open: AtomicI64,
    pub(crate) connections_total: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            deliveries: Mutex::default(),
            responses: Mutex::default(),
            latency: Histogram::new(LATENCY_BUCKETS),
            in_flight: AtomicI64::new(0),
            connections_open: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub(crate) fn delivery(
        &self,
        owner: &str,
        source: &str,
        outcome: &'static str,
        took: Duration,
    ) {
        if let Ok(mut d) = self.deliveries.lock() {
            *d.entry((owner.to_owned(), source.to_owned(), outcome))
                .or_insert(0) += 1;
        }
        self.latency.observe_duration(took);
    }

    pub(crate) fn response(&self, status: u16) {
        if let Ok(mut r) = self.responses.lock() {
            *r.entry(status).or_insert(0) += 1;
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut t = Text::new();
        t.family(
            "ingressd_deliveries_total",
            Kind::Counter,
            "Webhook deliveries by owning extension, source and outcome.",
        );
        if let Ok(d) = self.deliveries.lock() {
            for ((owner, source, outcome), n) in d.iter() {
                t.sample(
                    "ingressd_deliveries_total",
                    &[("owner", owner), ("source", source), ("outcome", outcome)],
                    n,
                );
            }
        }
        t.family(
            "ingressd_intake_duration_seconds",
            Kind::Histogram,
            "Time from a complete request to the intake's answer.",
        );
        t.histogram("ingressd_intake_duration_seconds", &[], &self.latency);
        t.single(
            "ingressd_deliveries_in_flight",
            Kind::Gauge,
            "Deliveries handed to the intake and not yet answered.",
            self.in_flight.load(Ordering::Relaxed),
        );
        t.single(
            "ingressd_connections_open",
            Kind::Gauge,
            "Open HTTP connections.",
            self.connections_open.load(Ordering::Relaxed),
        );
        t.single(
            "ingressd_connections_total",
            Kind::Counter,
            "HTTP connections accepted.",
            self.connections_total.load(Ordering::Relaxed),
        );
        t.single(
            "ingressd_connections_refused_total",
            Kind::Counter,
            "HTTP connections refused (503) past the connection limit.",
            self.connections_refused.load(Ordering::Relaxed),
        );
        t.family(
            "ingressd_http_responses_total",
            Kind::Counter,
            "HTTP responses by status code.",
        );
        if let Ok(r) = self.responses.lock() {
            for (code, n) in r.iter() {
                t.sample(
                    "ingressd_http_responses_total",
                    &[("code", &code.to_string())],
                    n,
                );
            }
        }
        daemon::metrics::render_call_times(&mut t, "ingressd");
        t.into_string()
    }
}
