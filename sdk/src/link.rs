//! Linking something the agent made (a pull request it opened) to its Work: the
//! package accepts a derived Event (`event.accept`) whose parent is the Work's newest
//! Event of the package and whose keys are the new thing's key first, then the
//! parent's keys. Routed, it attaches to the Work through the parent's keys and binds
//! the new key to it, so what happens on the new thing (a review, a comment) reaches
//! the same Work. Its delivery ID makes a repeat add nothing. GitHub and Bitbucket
//! link the pull requests their `open_pull_request` opens this way; both treat it as
//! best effort.

use protocol::wire::{Emission, Event, EventAcceptParams, Payload, StateWorkEventsParams};
use protocol::{Code, RpcError};

/// The most pages (of 1000) of the Work's Events read to find the parent.
pub const MAX_PAGES: usize = 10;

/// The newest Event of Work `work_id` that `ours` takes (reading at most
/// [`MAX_PAGES`] pages of its Events); `None` when it has none.
pub async fn newest_work_event(
    host: &crate::Host,
    work_id: &str,
    ours: impl Fn(&Event) -> bool,
) -> Result<Option<Event>, RpcError> {
    let mut parent = None;
    let mut after = 0;
    for _ in 0..MAX_PAGES {
        let page = host
            .call_typed(&StateWorkEventsParams {
                id: work_id.to_string(),
                after,
                limit: 1000,
            })
            .await
            .map_err(|e| {
                RpcError::new(Code::Unavailable, format!("reading the Work's Events: {e}"))
            })?;
        if page.events.is_empty() {
            break;
        }
        after = page.next_after(after);
        for e in page.events {
            if ours(&e) {
                parent = Some(e);
            }
        }
    }
    Ok(parent)
}

/// The keys of a linking Event: `first` (the new thing's key), then each of the
/// parent's keys not already there.
pub fn linked_keys(first: &str, parent_keys: &[String]) -> Vec<String> {
    let mut keys = vec![first.to_string()];
    for k in parent_keys {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    keys
}

/// The linking Event, as [`accept`] sends it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Linked {
    /// The entry's source the Event is accepted on.
    pub source: String,
    /// Its delivery ID (the same for a repeat of the same link).
    pub delivery_id: String,
    /// Its type, of one of the package's families.
    pub event_type: String,
    /// Its payload.
    pub payload: Payload,
    /// Its keys ([`linked_keys`]).
    pub keys: Vec<String>,
}

/// Accepts `linked` as an Event derived from `parent` (`event.accept`).
pub async fn accept(host: &crate::Host, parent: &Event, linked: Linked) -> Result<(), RpcError> {
    host.call_typed(&EventAcceptParams {
        event: Emission {
            parent_id: parent.id.clone(),
            source: linked.source,
            delivery_id: linked.delivery_id,
            event_type: linked.event_type,
            payload: linked.payload,
            keys: linked.keys,
            ..Emission::default()
        },
        ..EventAcceptParams::default()
    })
    .await
    .map_err(|e| RpcError::new(Code::Unavailable, format!("event.accept: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_key_comes_first_and_the_parents_follow_once() {
        let parent = vec!["a:1".to_string(), "b:2".to_string(), "a:1".to_string()];
        assert_eq!(linked_keys("n:7", &parent), ["n:7", "a:1", "b:2"]);
        assert_eq!(linked_keys("a:1", &parent), ["a:1", "b:2"]);
        assert_eq!(linked_keys("n:7", &[]), ["n:7"]);
    }
}
