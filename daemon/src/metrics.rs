//! What every daemon's metrics share: histograms on atomics, the Prometheus text
//! writer ([`Text`]), and the bus server's call times by method ([`CallTimes`], fed
//! by the bus connection itself). The scrape that gathers every daemon's samples
//! over the bus into one exposition is [`crate::scrape`].
//!
//! Recording costs atomics only: no lock, no allocation, no system call. Every
//! label set is bounded (the methods a daemon serves, the states of a table).

use std::fmt::{Display, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Buckets (seconds) for call and request times.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A histogram of fixed buckets: one atomic add per observation (and one for the
/// sum).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bucket (not cumulative), the last past every bound (`+Inf`).
    counts: Box<[AtomicU64]>,
    sum_bits: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Record `value`.
    pub fn observe(&self, value: f64) {
        let i = self.bounds.partition_point(|b| *b < value);
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    /// Record a duration, in seconds.
    pub fn observe_duration(&self, took: Duration) {
        self.observe(took.as_secs_f64());
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The sum of the values recorded.
    pub fn sum(&self) -> f64 {
        f64::from_bits(self.sum_bits.load(Ordering::Relaxed))
    }
}

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, sum and count.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A label value as the text format quotes it.
pub fn escape(label: &str) -> String {
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

/// The Prometheus text format (0.0.4), written family by family: [`Text::family`]
/// first, then its samples.
#[derive(Debug, Default)]
pub struct Text {
    out: String,
}

impl Text {
    /// An empty exposition.
    pub fn new() -> Text {
        Text::default()
    }

    /// Start a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
    }

    /// One sample of the family started last.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    /// A family of one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The samples of one histogram of the family `name` started last: its
    /// cumulative buckets, sum and count.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let mut cumulative = 0u64;
        for (i, c) in h.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = match h.bounds.get(i) {
                Some(b) => b.to_string(),
                None => "+Inf".to_string(),
            };
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", h.sum());
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {cumulative}");
    }

    /// Text already in the format (another daemon's), as it is.
    pub fn push_text(&mut self, text: &str) {
        self.out.push_str(text);
        if !text.is_empty() && !text.ends_with('\n') {
            self.out.push('\n');
        }
    }

    /// The exposition.
    pub fn into_string(self) -> String {
        self.out
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        for (k, v) in labels {
            if !first {
                self.out.push(',');
            }
            first = false;
            let _ = write!(self.out, "{k}=\"{}\"", escape(v));
        }
        if let Some(le) = le {
            if !first {
                self.out.push(',');
            }
            let _ = write!(self.out, "le=\"{le}\"");
        }
        self.out.push('}');
    }
}

/// How long the requests a daemon's bus connection served took, by method: one
/// histogram per method the daemon serves (its families' methods in `busapi`, and
/// their `*.batch`), and one (`other`) for any other name. Fed by the bus
/// connection ([`protocol::ServeTimes`]).
#[derive(Debug)]
pub struct CallTimes {
    /// Sorted.
    methods: Vec<Box<str>>,
    /// One per method, then `other`.
    times: Vec<Histogram>,
}

impl CallTimes {
    /// Times for the methods of these prefixes (`store` for `store.*`).
    pub fn for_prefixes(prefixes: &[String]) -> CallTimes {
        let mut methods: Vec<Box<str>> = busapi::all_methods()
            .into_iter()
            .filter(|m| {
                m.split_once('.')
                    .is_some_and(|(p, _)| prefixes.iter().any(|q| q == p))
            })
            .map(Box::from)
            .collect();
        methods.extend(prefixes.iter().map(|p| format!("{p}.batch").into()));
        methods.sort_unstable();
        methods.dedup();
        let times = (0..=methods.len())
            .map(|_| Histogram::new(LATENCY_BUCKETS))
            .collect();
        CallTimes { methods, times }
    }

    /// Write the family `name` (a histogram labelled `method`): the methods called
    /// at least once.
    pub fn render(&self, t: &mut Text, name: &str) {
        t.family(
            name,
            Kind::Histogram,
            "Time from a bus request's arrival to its answer, by method.",
        );
        for (i, h) in self.times.iter().enumerate() {
            if h.count() == 0 {
                continue;
            }
            let method = self.methods.get(i).map_or("other", |m| &**m);
            t.histogram(name, &[("method", method)], h);
        }
    }
}

impl protocol::ServeTimes for CallTimes {
    fn slot(&self, method: &str) -> usize {
        self.methods
            .binary_search_by(|m| (**m).cmp(method))
            .unwrap_or(self.methods.len())
    }

    fn served(&self, slot: usize, took: Duration) {
        if let Some(h) = self.times.get(slot) {
            h.observe_duration(took);
        }
    }
}

static CALL_TIMES: OnceLock<Arc<CallTimes>> = OnceLock::new();

/// This process's bus call times, set by the first service to join the bus
/// ([`crate::bus::Bus::start`]); `None` in a process that serves nothing.
pub fn call_times() -> Option<&'static Arc<CallTimes>> {
    CALL_TIMES.get()
}

/// The call times of a service owning `prefixes` (the process's first one's).
pub(crate) fn service_call_times(prefixes: &[String]) -> Arc<CallTimes> {
    CALL_TIMES
        .get_or_init(|| Arc::new(CallTimes::for_prefixes(prefixes)))
        .clone()
}

/// Write `oc_<daemon>_bus_call_duration_seconds` from this process's call times
/// (nothing when it serves nothing).
pub fn render_call_times(t: &mut Text, daemon: &str) {
    if let Some(times) = call_times() {
        times.render(t, &format!("oc_{daemon}_bus_call_duration_seconds"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use busapi::Call;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[1.0, 2.0]);
        h.observe(0.5);
        h.observe(1.0);
        h.observe(1.5);
        h.observe(9.0);
        let mut t = Text::new();
        t.family("x", Kind::Histogram, "x.");
        t.histogram("x", &[("a", "b\"c")], &h);
        let text = t.into_string();
        assert!(
            text.contains("x_bucket{a=\"b\\\"c\",le=\"1\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("x_bucket{a=\"b\\\"c\",le=\"2\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("x_bucket{a=\"b\\\"c\",le=\"+Inf\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("x_sum{a=\"b\\\"c\"} 12\n"), "{text}");
        assert!(text.contains("x_count{a=\"b\\\"c\"} 4\n"), "{text}");
    }

    #[test]
    fn call_times_label_only_served_methods() {
        use protocol::ServeTimes;
        let times = CallTimes::for_prefixes(&["store".to_string()]);
        let known = busapi::store::MethodsRequest::METHOD;
        let slot = times.slot(known);
        times.served(slot, Duration::from_millis(3));
        let other = times.slot("nothing.at_all");
        times.served(other, Duration::from_millis(3));
        let mut t = Text::new();
        times.render(&mut t, "oc_x_bus_call_duration_seconds");
        let text = t.into_string();
        assert!(text.contains(&format!("method=\"{known}\"")), "{text}");
        assert!(text.contains("method=\"other\""), "{text}");
        assert!(!text.contains("nothing.at_all"), "{text}");
    }
}
