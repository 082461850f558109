//! `route.match` for handler `webhook`: free of side effects, decided from its
//! input alone.

use crate::config::parse_route_config;
use crate::intake::{scalar_text, FAMILY, SCHEMA};
use protocol::wire::{
    clip_line, RouteMatchParams, RouteMatchResult, WorkDisplay, MAX_DISPLAY_REF_BYTES,
    MAX_DISPLAY_TITLE_BYTES,
};
use serde_json::Value;

/// The route handler's name.
pub const HANDLER: &str = "webhook";

/// True for the Event types of family `webhook.delivery`.
pub fn is_delivery_type(event_type: &str) -> bool {
    event_type == FAMILY
        || event_type
            .strip_prefix(FAMILY)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1)
}

/// A delivery ID short enough for a title: 12 hex digits of a body hash, else at
/// most 24 characters.
pub fn short_id(id: &str) -> String {
    match id.strip_prefix("sha256:") {
        Some(hex) => hex.chars().take(12).collect(),
        None => id.chars().take(24).collect(),
    }
}

fn no(reason: impl Into<String>) -> RouteMatchResult {
    RouteMatchResult {
        matched: false,
        reason: reason.into(),
        ..RouteMatchResult::default()
    }
}

fn text<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Decides whether the route takes the Event: a `webhook.delivery` Event in schema
/// `webhook.delivery.v1`, of the route's `entry` when it names one. A match goes to
/// the Work of the Event's keys (or, without any, a Work of its own per delivery)
/// with a display: the title at the route's `title_pointer` in the body, else
/// `<entry>: delivery <short id>`, and the correlation value as its ref.
pub fn route_match(p: &RouteMatchParams) -> RouteMatchResult {
    let event = &p.event;
    if !is_delivery_type(&event.event_type) {
        return no(format!(
            "event type {} is not a webhook delivery ({FAMILY})",
            event.event_type
        ));
    }
    if event.payload.schema != SCHEMA {
        let schema = if event.payload.schema.is_empty() {
            "(none)"
        } else {
            event.payload.schema.as_str()
        };
        return no(format!("payload schema {schema} is not {SCHEMA}"));
    }
    let config = match parse_route_config(&p.route.config) {
        Ok(c) => c,
        Err(e) => return no(format!("the route's config is not valid: {e}")),
    };
    let data = &event.payload.data;
    let Some(entry) = text(data, "entry") else {
        return no("the delivery's payload names no entry");
    };
    if let Some(wanted) = &config.entry {
        if wanted != entry {
            return no(format!(
                "event type {} from entry {entry}, but the route takes entry {wanted}",
                event.event_type
            ));
        }
    }
    let scope = text(data, "scope").unwrap_or(&event.scope_id);
    let delivery_id = text(data, "delivery_id").unwrap_or(&event.delivery_id);
    let keys = if event.keys.is_empty() {
        vec![format!("webhook:{scope}/{entry}:{delivery_id}")]
    } else {
        event.keys.clone()
    };

    let body = data.get("body").unwrap_or(&Value::Null);
    let title = config
        .title_pointer
        .as_deref()
        .and_then(|ptr| body.pointer(ptr))
        .and_then(scalar_text)
        .map(|t| clip_line(t.trim(), MAX_DISPLAY_TITLE_BYTES))
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| {
            clip_line(
                &format!("{entry}: delivery {}", short_id(delivery_id)),
                MAX_DISPLAY_TITLE_BYTES,
            )
        });
    let reference = text(data, "correlation")
        .map(|c| clip_line(c, MAX_DISPLAY_REF_BYTES))
        .unwrap_or_default();
    let display = WorkDisplay {
        title,
        reference,
        ..WorkDisplay::default()
    };
    RouteMatchResult {
        matched: true,
        keys,
        reason: format!("event type {} from entry {entry}", event.event_type),
        display: display.validate().is_ok().then_some(display),
        ..RouteMatchResult::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::wire::{Event, Payload, Route};
    use serde_json::json;

    fn params(event_type: &str, data: Value, keys: &[&str], route: Value) -> RouteMatchParams {
        RouteMatchParams {
            handler: HANDLER.into(),
            route: Route {
                handler: HANDLER.into(),
                config: route,
                ..Route::default()
            },
            event: Event {
                id: "ev1".into(),
                event_type: event_type.into(),
                scope_id: "s".into(),
                keys: keys.iter().map(|k| k.to_string()).collect(),
                payload: Payload {
                    schema: SCHEMA.into(),
                    data,
                },
                ..Event::default()
            },
            ..RouteMatchParams::default()
        }
    }

    fn data() -> Value {
        json!({
            "scope": "s", "entry": "ci",
            "delivery_id": "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "headers": {}, "body": {"head_commit": {"message": "Fix it\nfor real"}, "n": 7},
            "correlation": "main",
        })
    }

    #[test]
    fn a_delivery_matches_with_its_keys_and_display() {
        let r = route_match(&params(
            "webhook.delivery.push",
            data(),
            &["webhook:s/ci:main"],
            Value::Null,
        ));
        assert!(r.matched, "{}", r.reason);
        assert_eq!(r.reason, "event type webhook.delivery.push from entry ci");
        assert_eq!(r.keys, vec!["webhook:s/ci:main".to_string()]);
        assert_eq!(r.kind, "");
        let d = r.display.expect("a display");
        assert_eq!(d.title, "ci: delivery ba7816bf8f01");
        assert_eq!(d.reference, "main");
    }

    #[test]
    fn without_keys_each_delivery_is_its_own_work() {
        let mut d = data();
        d["delivery_id"] = json!("d-1");
        let r = route_match(&params("webhook.delivery", d, &[], Value::Null));
        assert!(r.matched);
        assert_eq!(r.keys, vec!["webhook:s/ci:d-1".to_string()]);
        assert_eq!(r.display.expect("a display").title, "ci: delivery d-1");
    }

    #[test]
    fn the_title_pointer_titles_the_work() {
        let r = route_match(&params(
            "webhook.delivery",
            data(),
            &[],
            json!({"title_pointer": "/head_commit/message"}),
        ));
        assert_eq!(r.display.expect("a display").title, "Fix it");
        let r = route_match(&params(
            "webhook.delivery",
            data(),
            &[],
            json!({"title_pointer": "/n"}),
        ));
        assert_eq!(r.display.expect("a display").title, "7");
        // Nothing there: the default title.
        let r = route_match(&params(
            "webhook.delivery",
            data(),
            &[],
            json!({"title_pointer": "/nope"}),
        ));
        assert_eq!(
            r.display.expect("a display").title,
            "ci: delivery ba7816bf8f01"
        );
    }

    #[test]
    fn the_entry_filter_and_the_type_and_schema_gates() {
        let r = route_match(&params(
            "webhook.delivery",
            data(),
            &[],
            json!({"entry": "ci"}),
        ));
        assert!(r.matched);
        let r = route_match(&params(
            "webhook.delivery",
            data(),
            &[],
            json!({"entry": "deploy"}),
        ));
        assert!(!r.matched);
        assert!(r.reason.contains("takes entry deploy"), "{}", r.reason);
        assert!(r.keys.is_empty() && r.display.is_none());

        for other in ["github.push", "webhook.deliveryx", "webhook.delivery."] {
            let r = route_match(&params(other, data(), &[], Value::Null));
            assert!(!r.matched, "{other}");
            assert!(r.reason.contains("not a webhook delivery"), "{}", r.reason);
        }

        let mut p = params("webhook.delivery", data(), &[], Value::Null);
        p.event.payload.schema = "webhook.delivery.v2".into();
        let r = route_match(&p);
        assert!(!r.matched);
        assert_eq!(
            r.reason,
            "payload schema webhook.delivery.v2 is not webhook.delivery.v1"
        );

        let r = route_match(&params(
            "webhook.delivery",
            data(),
            &[],
            json!({"entyr": "ci"}),
        ));
        assert!(!r.matched);
        assert!(r.reason.contains("/entyr"), "{}", r.reason);
    }

    #[test]
    fn a_long_ref_is_clipped() {
        let mut d = data();
        d["correlation"] = json!("x".repeat(100));
        let r = route_match(&params("webhook.delivery", d, &[], Value::Null));
        assert_eq!(r.display.expect("a display").reference.len(), 40);
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id(&"y".repeat(30)).len(), 24);
    }
}
