//! The scrape an operator's one endpoint serves (ingressd's `/metrics`, webd's):
//! the serving daemon's own samples, then every other daemon's asked over the bus
//! at once (`<family>.metrics`, [`busapi::metrics`]), each waited for a bounded
//! time, and which of them answered (`oc_scrape_up`).

use crate::bus::Bus;
use crate::metrics::{Kind, Text};
use busapi::metrics::{MetricsText, MAX_METRICS_BYTES};
use busapi::Call;
use std::time::{Duration, Instant};

/// The daemons a scrape gathers, by component name.
pub const COMPONENTS: &[&str] = &[
    "broker",
    "storaged",
    "schedulerd",
    "extrunner",
    "ingressd",
    "webd",
];

/// How long a scrape waits for each daemon's answer (all are asked at once).
pub const SCRAPE_WAIT: Duration = Duration::from_secs(2);

async fn ask<C: Call<Result = MetricsText>>(
    bus: &Bus,
    params: C,
    wait: Duration,
) -> Result<String, String> {
    match tokio::time::timeout(wait, bus.call_typed(&params)).await {
        Err(_) => Err(format!("no answer to {} within {wait:?}", C::METHOD)),
        Ok(Err(e)) => Err(format!("{}: {e}", C::METHOD)),
        Ok(Ok(m)) if m.text.len() > MAX_METRICS_BYTES => Err(format!(
            "the answer to {} is {} bytes, over MAX_METRICS_BYTES ({MAX_METRICS_BYTES})",
            C::METHOD,
            m.text.len()
        )),
        Ok(Ok(m)) => Ok(m.text),
    }
}

async fn ask_component(bus: &Bus, component: &str, wait: Duration) -> Result<String, String> {
    match component {
        "broker" => ask(bus, busapi::bus::MetricsRequest {}, wait).await,
        "storaged" => ask(bus, busapi::store::MetricsRequest {}, wait).await,
        "schedulerd" => ask(bus, busapi::sched::MetricsRequest {}, wait).await,
        "extrunner" => ask(bus, busapi::ext::MetricsRequest {}, wait).await,
        "ingressd" => ask(bus, busapi::ingress::MetricsRequest {}, wait).await,
        "webd" => ask(bus, busapi::web::MetricsRequest {}, wait).await,
        other => Err(format!("no metrics method for {other}")),
    }
}

/// One exposition of the whole suite: `own` (the serving daemon's, named
/// `component`), then every other daemon's of [`COMPONENTS`] asked over `bus` at
/// once, each waited for at most `wait`; then `oc_scrape_up{component}` (1: its
/// samples are in, 0: it did not answer in time, or failed) and
/// `oc_scrape_duration_seconds{component}`. Never waits longer than `wait` in all.
pub async fn gather(bus: &Bus, component: &str, own: String, wait: Duration) -> String {
    let asks = COMPONENTS
        .iter()
        .filter(|c| **c != component)
        .map(|c| async move {
            let started = Instant::now();
            let answer = ask_component(bus, c, wait).await;
            (*c, answer, started.elapsed())
        });
    let answers = futures_join(asks).await;
    let mut t = Text::new();
    t.push_text(&own);
    for (c, answer, _) in &answers {
        match answer {
            Ok(text) => t.push_text(text),
            Err(why) => tracing::debug!(component = %c, %why, "metrics not gathered"),
        }
    }
    t.family(
        "oc_scrape_up",
        Kind::Gauge,
        "1 if the component's metrics are in this scrape, 0 if it did not answer in time.",
    );
    t.sample("oc_scrape_up", &[("component", component)], 1);
    for (c, answer, _) in &answers {
        t.sample(
            "oc_scrape_up",
            &[("component", c)],
            u8::from(answer.is_ok()),
        );
    }
    t.family(
        "oc_scrape_duration_seconds",
        Kind::Gauge,
        "How long gathering the component's metrics took.",
    );
    for (c, _, took) in &answers {
        t.sample(
            "oc_scrape_duration_seconds",
            &[("component", c)],
            took.as_secs_f64(),
        );
    }
    t.into_string()
}

/// Run the futures at once, answering in order.
async fn futures_join<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(out.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            match f.as_mut().poll(cx) {
                std::task::Poll::Ready(v) => *slot = Some(v),
                std::task::Poll::Pending => pending = true,
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
