//! `ext.metrics`: extrunner's samples in the Prometheus text format (every family
//! `oc_extrunner_…`): each package's crash restarts and whether it runs, the
//! packages by state, and the bus call times. The label sets are the packages
//! installed and their states.

use busapi::ext::ListResponse;
use busapi::metrics::MetricsText;
use daemon::metrics::{Kind, Text};
use std::collections::BTreeMap;

/// The samples of the packages `list` (`ext.list`'s answer) describes.
pub fn render(list: &ListResponse) -> MetricsText {
    let mut t = Text::new();
    t.family(
        "oc_extrunner_extension_restarts_total",
        Kind::Counter,
        "Times extrunner restarted the extension's process after it exited.",
    );
    for e in &list.extensions {
        t.sample(
            "oc_extrunner_extension_restarts_total",
            &[("extension", &e.name)],
            e.restarts,
        );
    }
    t.family(
        "oc_extrunner_extension_up",
        Kind::Gauge,
        "1 while the extension's process runs and serves.",
    );
    for e in &list.extensions {
        t.sample(
            "oc_extrunner_extension_up",
            &[("extension", &e.name)],
            u8::from(e.state == "running"),
        );
    }
    let running = list
        .extensions
        .iter()
        .filter(|e| e.state == "running")
        .count();
    t.single(
        "oc_extrunner_extensions_running",
        Kind::Gauge,
        "Extensions whose process runs now.",
        running,
    );
    let mut states = BTreeMap::<&str, u64>::new();
    for e in &list.extensions {
        *states.entry(e.state.as_str()).or_default() += 1;
    }
    t.family(
        "oc_extrunner_extensions",
        Kind::Gauge,
        "Extensions installed, by state.",
    );
    for (state, n) in states {
        t.sample("oc_extrunner_extensions", &[("state", state)], n);
    }
    daemon::metrics::render_call_times(&mut t, "extrunner");
    MetricsText {
        text: t.into_string(),
    }
}
