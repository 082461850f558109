//! One routing pass: the pending events in order, a page at a time.
//!
//! Two things keep a busy intake from costing the store three messages per event:
//! - One wait lookup per page (`store.waits_matching` with the page's keys and
//!   types together). Only an event some active Wait may be for is looked up again
//!   on its own when it is routed (the full path, [`Router::route`]); the others
//!   cannot be for a Wait.
//! - A run of unmatched decisions goes to the store as one message and one write
//!   (`store.route_decide_many`). An unmatched decision changes no Work, so it
//!   cannot change how a later event of the page routes. Any other decision is
//!   recorded on its own, after the run before it. If the store refuses a run, its
//!   events are decided one by one, as before, so each refusal is handled as one.

use super::{poisoned, store_err, RouteError, Router, Stats, PAGE};
use busapi::store::{
    RouteDecideManyRequest, RouteDecideRequest, RouteDecideResponse, RouteOutcome, UnroutedEvent,
    UnroutedRequest, WaitsMatchingRequest,
};
use busapi::Call;
use std::collections::{BTreeSet, HashSet};

/// The most distinct keys, or types, one page's wait lookup asks about; past it
/// each event with keys is looked up on its own.
const MAX_LOOKUP: usize = 500;

/// The most Waits the page's lookup reads; when it finds that many, each event with
/// keys is looked up on its own.
const LOOKUP_LIMIT: usize = 200;

/// What one routing pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Events routed.
    pub routed: usize,
    /// Of them, those routed to a Work (created or attached).
    pub to_work: usize,
}

/// Unmatched decisions not recorded yet: (event, `store.route_decide` params).
type Run<'a> = Vec<(&'a UnroutedEvent, RouteDecideRequest)>;

impl Router {
    /// One pass: route every pending event in order, stopping at the first that cannot
    /// be routed now. Answers how many were routed, and how many of them went to a
    /// Work (only those can make Work ready to start).
    pub async fn pass(&self, stats: &Stats) -> Result<Pass, RouteError> {
        {
            let k = self.knowledge.read().map_err(|_| poisoned())?;
            if !k.config_loaded {
                return Err(RouteError::NotLoaded("configuration"));
            }
            if !k.handlers_loaded {
                return Err(RouteError::NotLoaded("extensions' registrations"));
            }
        }
        let mut done = Pass::default();
        loop {
            let page = self
                .store
                .call(&UnroutedRequest {
                    after: 0,
                    limit: PAGE,
                })
                .await
                .map_err(|e| store_err(UnroutedRequest::METHOD, e))?;
            let (events, more) = (page.events, page.more);
            stats.set_queue(events.len());
            if events.is_empty() {
                return Ok(done);
            }
            let waiting = self.maybe_waiting(&events).await?;
            let mut run: Run<'_> = Vec::new();
            let mut read_again = false;
            for ev in &events {
                let decided = if waiting.contains(&ev.seq) {
                    None
                } else {
                    match self.evaluate(ev).await {
                        Ok(d) if matches!(d.outcome, RouteOutcome::Unmatched { .. }) => {
                            run.push((ev, Self::decide_params(ev, &d)));
                            continue;
                        }
                        Ok(d) => Some(d),
                        Err(e) => {
                            self.record_run(&mut run, stats, &mut done).await?;
                            return Err(e);
                        }
                    }
                };
                if !self.record_run(&mut run, stats, &mut done).await? {
                    read_again = true;
                    break;
                }
                let answer = match decided {
                    Some(d) => self.decide(ev, &d).await,
                    None => self.route(ev).await,
                };
                match answer {
                    Ok(a) => self.routed(ev, &a, stats, &mut done),
                    // Every host's router routes, in order; one decision per event
                    // holds (storaged's precondition). One that lost to another
                    // reads again.
                    Err(RouteError::RoutedElsewhere(seq)) => {
                        tracing::debug!(seq, "routed by another host meanwhile");
                        read_again = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !read_again {
                self.record_run(&mut run, stats, &mut done).await?;
                // The store had no more when it answered: an event accepted since
                // comes with its own nudge, so no read just to find the log empty.
                if !more {
                    stats.set_queue(0);
                    return Ok(done);
                }
            }
        }
    }

    /// The events of a page that some active Wait may be for: one lookup with all
    /// their keys and types, then each event against the Waits found.
    async fn maybe_waiting(&self, events: &[UnroutedEvent]) -> Result<HashSet<i64>, RouteError> {
        let with_keys: Vec<&UnroutedEvent> = events.iter().filter(|e| !e.keys.is_empty()).collect();
        let every = || with_keys.iter().map(|e| e.seq).collect::<HashSet<i64>>();
        if with_keys.is_empty() {
            return Ok(HashSet::new());
        }
        let keys: BTreeSet<&str> = with_keys
            .iter()
            .flat_map(|e| e.keys.iter().map(String::as_str))
            .collect();
        let types: BTreeSet<&str> = with_keys.iter().map(|e| e.event_type.as_str()).collect();
        if keys.len() > MAX_LOOKUP || types.len() > MAX_LOOKUP {
            return Ok(every());
        }
        let found = self
            .store
            .call(&WaitsMatchingRequest {
                keys: keys.into_iter().map(str::to_owned).collect(),
                types: types.into_iter().map(str::to_owned).collect(),
                limit: LOOKUP_LIMIT as u32,
            })
            .await
            .map_err(|e| store_err(WaitsMatchingRequest::METHOD, e))?;
        let waits = found.waits;
        if waits.len() >= LOOKUP_LIMIT {
            return Ok(every());
        }
        Ok(with_keys
            .iter()
            .filter(|ev| {
                waits.iter().any(|w| {
                    w.keys.iter().any(|k| ev.keys.contains(k))
                        && (w.types.is_empty() || w.types.contains(&ev.event_type))
                })
            })
            .map(|ev| ev.seq)
            .collect())
    }

    /// Record the run of unmatched decisions, in one write when the store takes it
    /// whole, else one by one. `false`: an event of it was routed by another host
    /// meanwhile, and the page must be read again.
    async fn record_run(
        &self,
        run: &mut Run<'_>,
        stats: &Stats,
        done: &mut Pass,
    ) -> Result<bool, RouteError> {
        if run.is_empty() {
            return Ok(true);
        }
        let (events, decisions): (Vec<&UnroutedEvent>, Vec<RouteDecideRequest>) =
            std::mem::take(run).into_iter().unzip();
        let many = RouteDecideManyRequest { decisions };
        let decided = self
            .store
            .call(&many)
            .await
            .ok()
            .map(|a| a.decided)
            .filter(|d| d.len() == events.len());
        if let Some(decided) = decided {
            for (ev, answer) in events.into_iter().zip(decided) {
                self.routed(ev, &answer, stats, done);
            }
            return Ok(true);
        }
        for (ev, params) in events.into_iter().zip(many.decisions) {
            let answer = self.decide_with(ev, &params).await;
            match answer {
                Ok(a) => self.routed(ev, &a, stats, done),
                Err(RouteError::RoutedElsewhere(seq)) => {
                    tracing::debug!(seq, "routed by another host meanwhile");
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Count one routed event, and queue it for its Work's running attempt.
    fn routed(
        &self,
        ev: &UnroutedEvent,
        answer: &RouteDecideResponse,
        stats: &Stats,
        done: &mut Pass,
    ) {
        done.routed += 1;
        if let Some(w) = &answer.work_id {
            done.to_work += 1;
            // The link between the intake's record (OC_EVENT_ID) and the Work's story.
            tracing::info!(OC_WORK_ID = %w, OC_EVENT_ID = %ev.id, OC_SCOPE = %ev.scope_id, event_type = %ev.event_type, created = answer.created, "event routed to the Work");
        }
        // An event for a Work whose attempt runs goes to that attempt too.
        if answer.work_state.as_deref() == Some("running") && !answer.created {
            if let Some(w) = &answer.work_id {
                self.queue_injection(w, ev.seq);
            }
        }
        stats.note(ev, answer);
    }
}
