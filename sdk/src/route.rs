//! What the route handlers of the packages whose Events come in families (`jira`,
//! `linear`, `bitbucket`, `slack`) share in `route.match`.
//!
//! A route's config is `{"events": [prefix, ...]}` (`null` is `{}`): the Event
//! types it takes, each a family of the package or a type below one; none takes
//! all of them ([`RouteConfig`], [`EventRoute::events`], [`takes`]). [`EventRoute::admit`] refuses,
//! in this order, another handler, a route config that does not parse (invalid
//! params), an Event of no family of the package, a payload schema other than the
//! family's `<family>.v1`, a type the route's `events` do not take, and an Event
//! without keys. [`start_or_join`] is the decision that follows: an Event joins the
//! open Work of its keys; with none open it starts one when one of the package's
//! triggers matched, else it matches nothing. A match that joins Work which already
//! has a display leaves it alone; any other gives the Event's display.

use crate::config::ConfigError;
use protocol::wire::{RouteMatchParams, RouteMatchResult, WorkDisplay};
use protocol::RpcError;
use serde::Deserialize;
use serde_json::Value;
use std::marker::PhantomData;

/// A package's route handler, as `route.match` checks an Event against it.
#[derive(Debug, Clone, Copy)]
pub struct EventRoute<'a> {
    /// The handler's name (a `route.match` for another matches nothing).
    pub handler: &'a str,
    /// The Event families it takes (`jira.issue`); an Event of family `f` carries
    /// a payload of schema `f.v1`.
    pub families: &'a [&'a str],
    /// Whether a type named in `events` may have dots below its family's type
    /// (`slack.message.app_mention.x`); without, only `[a-z_]` follows the dot.
    pub subtypes: bool,
    /// What an `events` prefix must be, in words: the error of one that is not.
    pub events_hint: &'a str,
    /// What an Event's keys name (`issue key`): the reason when it has none.
    pub key_noun: &'a str,
    /// What a route without `events` takes, in one line (`takes Jira issues …`).
    pub takes_all: &'a str,
}

/// A package's route handler, named by a marker type for [`RouteConfig`].
pub trait Handler {
    /// The handler.
    const ROUTE: EventRoute<'static>;
}

/// The config of a route of handler `H`: `{"events": [prefix, ...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig<H> {
    /// Event type prefixes the route takes (all of the handler's when empty).
    pub events: Vec<String>,
    handler: PhantomData<H>,
}

impl<H: Handler> RouteConfig<H> {
    /// Parses a route config (`null` is the empty config), its error naming the
    /// field as a JSON pointer.
    pub fn check(config: &Value) -> Result<Self, ConfigError> {
        Ok(RouteConfig {
            events: H::ROUTE.events(config)?,
            handler: PhantomData,
        })
    }

    /// A route config's error in a sentence.
    pub fn message(e: &ConfigError) -> String {
        config_message(e)
    }

    /// What the route takes, in one line.
    pub fn describe(&self) -> String {
        describe(&self.events, H::ROUTE.takes_all)
    }

    /// True when the route's `events` take `event_type`.
    pub fn takes_type(&self, event_type: &str) -> bool {
        takes(&self.events, event_type)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    events: Option<Vec<String>>,
}

/// True when `event_type` is `prefix` or a type below it (`prefix.…`).
pub fn under(prefix: &str, event_type: &str) -> bool {
    event_type
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// True when a route's `events` take `event_type`: it has none, or one of them is
/// `event_type` or a prefix of it ending before a dot.
pub fn takes(events: &[String], event_type: &str) -> bool {
    events.is_empty() || events.iter().any(|p| under(p, event_type))
}

/// A route config's error in a sentence.
pub fn config_message(e: &ConfigError) -> String {
    if e.pointer.is_empty() {
        format!("route config {}", e.reason)
    } else {
        format!("route config {}: {}", e.pointer, e.reason)
    }
}

/// What a route with these `events` takes, in one line: `all` when it has none.
pub fn describe(events: &[String], all: &str) -> String {
    if events.is_empty() {
        all.into()
    } else {
        format!("takes {}", events.join(", "))
    }
}

/// An answer that matches nothing, with why.
pub fn unmatched(reason: String) -> RouteMatchResult {
    RouteMatchResult {
        matched: false,
        reason,
        ..Default::default()
    }
}

impl<'a> EventRoute<'a> {
    /// The `events` of a route config (`null` is the empty config), its error
    /// naming the field.
    pub fn events(&self, config: &Value) -> Result<Vec<String>, ConfigError> {
        let raw: RawRoute = match config {
            Value::Null => RawRoute::default(),
            Value::Object(_) => crate::config::parse(config)?,
            _ => return Err(ConfigError::whole("must be an object")),
        };
        let events = raw.events.unwrap_or_default();
        if let Some(i) = events.iter().position(|p| !self.names_types(p)) {
            return Err(ConfigError::new(format!("/events/{i}"), self.events_hint));
        }
        Ok(events)
    }

    /// True when `prefix` is one of the families or a type below one.
    fn names_types(&self, prefix: &str) -> bool {
        self.families.iter().any(|f| {
            prefix.strip_prefix(f).is_some_and(|rest| {
                rest.is_empty()
                    || (rest.len() > 1
                        && rest.starts_with('.')
                        && rest[1..].bytes().all(|b| {
                            b.is_ascii_lowercase() || b == b'_' || (self.subtypes && b == b'.')
                        }))
            })
        })
    }

    /// The family of `params.event` when the route may take it, else the answer
    /// that matches nothing, with why; invalid params when the route's config does
    /// not parse.
    pub fn admit(
        &self,
        params: &RouteMatchParams,
    ) -> Result<Result<&'a str, RouteMatchResult>, RpcError> {
        let no = |reason| Ok(Err(unmatched(reason)));
        if params.handler != self.handler {
            return no(format!("handler `{}` is not served here", params.handler));
        }
        let events = self
            .events(&params.route.config)
            .map_err(|e| RpcError::invalid_params(config_message(&e)))?;
        let event = &params.event;
        let Some(family) = self
            .families
            .iter()
            .copied()
            .find(|f| under(f, &event.event_type))
        else {
            return no(match self.families {
                [one] => format!("Event type `{}` is not {one}", event.event_type),
                all => format!(
                    "Event type `{}` is not one of the package's ({})",
                    event.event_type,
                    all.join(", ")
                ),
            });
        };
        let schema = format!("{family}.v1");
        if event.payload.schema != schema {
            return no(format!(
                "unreadable payload schema `{}` (this release reads {schema})",
                event.payload.schema
            ));
        }
        if !takes(&events, &event.event_type) {
            return no(format!(
                "Event type `{}` is not in the route's events ({})",
                event.event_type,
                events.join(", ")
            ));
        }
        if event.keys.is_empty() {
            return no(format!("`{}` has no {}", event.event_type, self.key_noun));
        }
        Ok(Ok(family))
    }
}

/// What an admitted Event claims, for [`start_or_join`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    /// The keys of its Work.
    pub keys: Vec<String>,
    /// What the keys name in a reason (`jira:ENG-1`, `thread slack:T1/C1/1.2`).
    pub subject: String,
    /// Why it starts a Work when none is open (one of the package's triggers
    /// matched; empty says no more), or `None` when it only joins open Work.
    pub starts: Option<String>,
    /// Why it matches nothing when it starts no Work and none is open.
    pub neither: String,
}

/// The create-or-attach decision of `route.match`: the Event joins the open Work
/// of its keys (`params.work`); with none, it starts one when `claim.starts` says
/// why, else it matches nothing. The display is `display()`'s unless the open Work
/// already has one.
pub fn start_or_join(
    params: &RouteMatchParams,
    claim: Claim,
    display: impl FnOnce() -> Option<WorkDisplay>,
) -> RouteMatchResult {
    let event_type = &params.event.event_type;
    let Claim {
        keys,
        subject,
        starts,
        neither,
    } = claim;
    let reason = match (&params.work, starts) {
        (Some(_), _) => format!("`{event_type}` joins the Work of {subject}"),
        (None, Some(why)) if why.is_empty() => {
            format!("`{event_type}` starts the Work of {subject}")
        }
        (None, Some(why)) => format!("`{event_type}` starts the Work of {subject}: {why}"),
        (None, None) => return unmatched(neither),
    };
    let has_display = params
        .work
        .as_ref()
        .and_then(|w| w.display.as_ref())
        .is_some_and(|d| !d.is_empty());
    RouteMatchResult {
        matched: true,
        keys,
        reason,
        display: if has_display { None } else { display() },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{Event, Payload, Route, Work};
    use serde_json::json;

    const ROUTE: EventRoute = EventRoute {
        handler: "demo",
        families: &["demo.issue", "demo.pull"],
        subtypes: false,
        events_hint: "must be demo.issue, demo.pull or one of their types",
        key_noun: "issue key",
        takes_all: "takes everything",
    };

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Demo;

    impl Handler for Demo {
        const ROUTE: EventRoute<'static> = ROUTE;
    }

    fn params(event_type: &str, schema: &str, keys: &[&str], config: Value) -> RouteMatchParams {
        RouteMatchParams {
            handler: "demo".into(),
            route: Route {
                handler: "demo".into(),
                binding: "agent".into(),
                config,
            },
            event: Event {
                id: "e1".into(),
                event_type: event_type.into(),
                payload: Payload {
                    schema: schema.into(),
                    data: json!({}),
                },
                keys: keys.iter().map(|k| k.to_string()).collect(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn refused(p: &RouteMatchParams) -> String {
        match ROUTE.admit(p) {
            Ok(Err(no)) => {
                assert!(!no.matched);
                no.reason
            }
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_prefix_takes_its_type_and_those_below_at_a_dot() {
        assert!(under("demo.issue", "demo.issue"));
        assert!(under("demo.issue", "demo.issue.assigned"));
        assert!(!under("demo.issue", "demo.issues"));
        assert!(!under("demo.issue.assigned", "demo.issue"));
        assert!(takes(&[], "anything"));
        let events = vec!["demo.pull".to_string(), "demo.issue.assigned".to_string()];
        assert!(takes(&events, "demo.pull.created"));
        assert!(takes(&events, "demo.issue.assigned"));
        assert!(!takes(&events, "demo.issue.commented"));
    }

    #[test]
    fn the_events_of_a_config_name_families_or_their_types() {
        assert_eq!(ROUTE.events(&Value::Null).unwrap(), Vec::<String>::new());
        assert_eq!(
            ROUTE.events(&json!({"events": null})).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            ROUTE
                .events(&json!({"events": ["demo.issue", "demo.pull.comment_created"]}))
                .unwrap(),
            vec!["demo.issue", "demo.pull.comment_created"]
        );
        let e = ROUTE
            .events(&json!({"events": ["demo.issue", "demo.issues"]}))
            .unwrap_err();
        assert_eq!(e.pointer, "/events/1");
        assert_eq!(e.reason, ROUTE.events_hint);
        for bad in [
            "demo.issue.",
            "demo.issue.Assigned",
            "demo.issue.a.b",
            "other",
        ] {
            let e = ROUTE.events(&json!({"events": [bad]})).unwrap_err();
            assert_eq!(e.pointer, "/events/0", "{bad}");
        }
        let dotted = EventRoute {
            subtypes: true,
            ..ROUTE
        };
        assert!(dotted
            .events(&json!({"events": ["demo.issue.a.b"]}))
            .is_ok());
        assert!(ROUTE.events(&json!({"labels": []})).is_err());
        let e = ROUTE.events(&json!([])).unwrap_err();
        assert_eq!(config_message(&e), "route config must be an object");
        let e = ConfigError::new("/events/0", "must be x");
        assert_eq!(config_message(&e), "route config /events/0: must be x");
    }

    #[test]
    fn a_route_config_says_what_it_takes() {
        let all = RouteConfig::<Demo>::check(&Value::Null).unwrap();
        assert_eq!(all, RouteConfig::default());
        assert_eq!(all.describe(), "takes everything");
        assert!(all.takes_type("demo.issue.assigned"));
        let some =
            RouteConfig::<Demo>::check(&json!({"events": ["demo.issue", "demo.pull"]})).unwrap();
        assert_eq!(some.events, vec!["demo.issue", "demo.pull"]);
        assert_eq!(some.describe(), "takes demo.issue, demo.pull");
        let one = RouteConfig::<Demo>::check(&json!({"events": ["demo.pull"]})).unwrap();
        assert!(!one.takes_type("demo.issue.assigned"));
        let e = RouteConfig::<Demo>::check(&json!({"events": ["x"]})).unwrap_err();
        assert_eq!(
            RouteConfig::<Demo>::message(&e),
            format!("route config /events/0: {}", ROUTE.events_hint)
        );
    }

    #[test]
    fn admit_refuses_in_order_and_names_the_family() {
        let ok = params(
            "demo.pull.created",
            "demo.pull.v1",
            &["demo:1"],
            Value::Null,
        );
        assert_eq!(ROUTE.admit(&ok).unwrap(), Ok("demo.pull"));

        let mut other = ok.clone();
        other.handler = "other".into();
        other.route.config = json!(3);
        assert_eq!(refused(&other), "handler `other` is not served here");

        let mut bad = ok.clone();
        bad.route.config = json!({"events": ["nope"]});
        let Err(e) = ROUTE.admit(&bad) else {
            panic!("a bad config is not invalid params");
        };
        assert!(e.message.contains("route config /events/0"), "{e:?}");

        let p = params("demox.pull", "demo.pull.v1", &["k"], Value::Null);
        assert_eq!(
            refused(&p),
            "Event type `demox.pull` is not one of the package's (demo.issue, demo.pull)"
        );
        let one = EventRoute {
            families: &["demo.issue"],
            ..ROUTE
        };
        let Ok(Err(no)) = one.admit(&p) else {
            panic!("admitted")
        };
        assert_eq!(no.reason, "Event type `demox.pull` is not demo.issue");

        let p = params("demo.pull.created", "demo.issue.v1", &["k"], Value::Null);
        assert_eq!(
            refused(&p),
            "unreadable payload schema `demo.issue.v1` (this release reads demo.pull.v1)"
        );
        let p = params(
            "demo.pull.created",
            "demo.pull.v1",
            &["k"],
            json!({"events": ["demo.issue"]}),
        );
        assert_eq!(
            refused(&p),
            "Event type `demo.pull.created` is not in the route's events (demo.issue)"
        );
        let p = params("demo.pull.created", "demo.pull.v1", &[], Value::Null);
        assert_eq!(refused(&p), "`demo.pull.created` has no issue key");
    }

    fn claim(starts: Option<&str>) -> Claim {
        Claim {
            keys: vec!["demo:1".into()],
            subject: "demo:1".into(),
            starts: starts.map(String::from),
            neither: "nothing starts it".into(),
        }
    }

    fn shown() -> Option<WorkDisplay> {
        Some(WorkDisplay {
            title: "Fix it".into(),
            ..Default::default()
        })
    }

    #[test]
    fn a_trigger_starts_work_and_anything_joins_open_work() {
        let mut p = params(
            "demo.issue.assigned",
            "demo.issue.v1",
            &["demo:1"],
            json!({}),
        );
        let started = start_or_join(&p, claim(Some("assigned to the agent")), shown);
        assert!(started.matched);
        assert_eq!(started.keys, vec!["demo:1"]);
        assert_eq!(
            started.reason,
            "`demo.issue.assigned` starts the Work of demo:1: assigned to the agent"
        );
        assert_eq!(started.display, shown());
        let plain = start_or_join(&p, claim(Some("")), shown);
        assert_eq!(
            plain.reason,
            "`demo.issue.assigned` starts the Work of demo:1"
        );

        let alone = start_or_join(&p, claim(None), || panic!("no display wanted"));
        assert!(!alone.matched);
        assert_eq!(alone.reason, "nothing starts it");
        assert!(alone.keys.is_empty());

        // Open Work without a display is given one; with one, it keeps it.
        p.work = Some(Work {
            id: "w1".into(),
            ..Default::default()
        });
        let joined = start_or_join(&p, claim(None), shown);
        assert!(joined.matched);
        assert_eq!(
            joined.reason,
            "`demo.issue.assigned` joins the Work of demo:1"
        );
        assert_eq!(joined.display, shown());
        p.work = Some(Work {
            id: "w1".into(),
            display: shown(),
            ..Default::default()
        });
        let kept = start_or_join(&p, claim(Some("again")), || panic!("display asked"));
        assert!(kept.matched);
        assert_eq!(kept.display, None);
        assert_eq!(
            kept.reason,
            "`demo.issue.assigned` joins the Work of demo:1"
        );
    }
}
