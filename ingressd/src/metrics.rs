//! The counters `/metrics` serves, in Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    deliveries: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    responses: Mutex<BTreeMap<u16, u64>>,
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    pub(crate) in_flight: AtomicI64,
    pub(crate) connections_open: AtomicI64,
    pub(crate) connections_total: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
}

fn escape(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for c in label.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
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
        let secs = took.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub(crate) fn response(&self, status: u16) {
        if let Ok(mut r) = self.responses.lock() {
            *r.entry(status).or_insert(0) += 1;
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP ingressd_deliveries_total Webhook deliveries by owning extension, source and outcome."
        );
        let _ = writeln!(s, "# TYPE ingressd_deliveries_total counter");
        if let Ok(d) = self.deliveries.lock() {
            for ((owner, source, outcome), n) in d.iter() {
                let _ = writeln!(
                    s,
                    "ingressd_deliveries_total{{owner=\"{}\",source=\"{}\",outcome=\"{}\"}} {n}",
                    escape(owner),
                    escape(source),
                    outcome
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP ingressd_intake_duration_seconds Time from a complete request to the intake's answer."
        );
        let _ = writeln!(s, "# TYPE ingressd_intake_duration_seconds histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                s,
                "ingressd_intake_duration_seconds_bucket{{le=\"{b}\"}} {}",
                self.latency_buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "ingressd_intake_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(s, "ingressd_intake_duration_seconds_sum {sum}");
        let _ = writeln!(s, "ingressd_intake_duration_seconds_count {count}");
        let gauges = [
            (
                "ingressd_deliveries_in_flight",
                "Deliveries handed to the intake and not yet answered.",
                "gauge",
                self.in_flight.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ingressd_connections_open",
                "Open HTTP connections.",
                "gauge",
                self.connections_open.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ingressd_connections_total",
                "HTTP connections accepted.",
                "counter",
                self.connections_total.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ingressd_connections_refused_total",
                "HTTP connections refused (503) past the connection limit.",
                "counter",
                self.connections_refused.load(Ordering::Relaxed).to_string(),
            ),
        ];
        for (name, help, kind, value) in gauges {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} {kind}");
            let _ = writeln!(s, "{name} {value}");
        }
        let _ = writeln!(
            s,
            "# HELP ingressd_http_responses_total HTTP responses by status code."
        );
        let _ = writeln!(s, "# TYPE ingressd_http_responses_total counter");
        if let Ok(r) = self.responses.lock() {
            for (code, n) in r.iter() {
                let _ = writeln!(s, "ingressd_http_responses_total{{code=\"{code}\"}} {n}");
            }
        }
        s
    }
}
