//! An agent turn's prompt (shared by the agent executors, claude-code and codex):
//! the playbook skill and arguments, the body of its shape (a session's first turn,
//! another turn, a handoff to a fresh session), the inputs, and the text of an
//! injected Event.
//!
//! Each input is shown as the extension owning its family renders it
//! (`event.render_owned`, [`owned_renderings`]: a review with its comments and their
//! diff hunks), or, when it has no rendering, by the default renderer,
//! which knows no service schema: each Event's type, the common payload fields and
//! the body or text. The inputs together take at most [`MAX_INPUTS_BYTES`]; past it
//! the prompt says what was cut. An injected Event is rendered by the default
//! renderer.

use std::collections::HashMap;
use std::time::Duration;

use protocol::wire::{
    Event, EventRenderOwnedParams, RenderedEvent, RunRequest, Work, MAX_RENDERED_BYTES,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most bytes of one Event's body or text the renderer shows.
pub const MAX_BODY_BYTES: usize = 20_000;
/// The most bytes a turn's rendered inputs take together (64 KiB); past it the
/// prompt says what was cut.
pub const MAX_INPUTS_BYTES: usize = 64 * 1024;
/// The most inputs asked of `event.render_owned` (its limit); the rest are rendered
/// by the default renderer.
pub const MAX_OWNED_EVENTS: usize = 100;
/// How long a turn's start waits for the owners' renderings; past it every input
/// is rendered by the default renderer.
pub const RENDER_WAIT: Duration = Duration::from_secs(15);

/// The renderings the Events' owners gave (`event.render_owned`), by Event ID.
pub type Renderings = HashMap<String, RenderedEvent>;
/// What an injected Event's message carries so its echo can be told apart.
pub const EVENT_MARK: &str = "<!-- open-conduit event ";
const MARK_END: &str = " -->";

/// The shape of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// A session's first turn.
    First,
    /// Another turn of the session, or a resumed wake.
    Events,
    /// A handoff to a fresh session, from the last session's note.
    Handoff,
}

/// Expands `{key}`, `{number}` and `{work}` in a template. `{key}` is the Work's
/// first correlation key, `{number}` the first number in it (the key itself
/// when it has none), `{work}` the Work ID.
pub fn template(t: &str, work: &Work) -> String {
    let key = work.keys.first().cloned().unwrap_or_default();
    let number = first_number(&key).unwrap_or_else(|| key.clone());
    t.replace("{key}", &key)
        .replace("{number}", &number)
        .replace("{work}", &work.id)
}

fn first_number(s: &str) -> Option<String> {
    let start = s.find(|c: char| c.is_ascii_digit())?;
    let digits: String = s[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some(digits)
}

fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A field of the payload data: at the top level, else in one of its objects.
fn lookup(data: &Value, names: &[&str]) -> Option<String> {
    for n in names {
        if let Some(s) = data.get(*n).and_then(scalar) {
            return Some(s);
        }
    }
    let obj = data.as_object()?;
    for v in obj.values().filter(|v| v.is_object()) {
        for n in names {
            if let Some(s) = v.get(*n).and_then(scalar) {
                return Some(s);
            }
        }
    }
    None
}

/// One Event, rendered: its type, the common fields, its body or text.
pub fn render_event(e: &Event) -> String {
    let data = &e.payload.data;
    let mut out = format!("### {}\n", e.event_type);
    let fields: [(&str, &[&str]); 8] = [
        ("author", &["author"]),
        ("kind", &["kind"]),
        ("number", &["number"]),
        ("path", &["path"]),
        ("line", &["line"]),
        ("state", &["state"]),
        ("title", &["title"]),
        ("url", &["url", "html_url"]),
    ];
    for (label, names) in fields {
        if let Some(v) = lookup(data, names) {
            out.push_str(&format!("{label}: {}\n", v.replace('\n', " ")));
        }
    }
    if let Some(body) = lookup(data, &["body", "text"]) {
        out.push('\n');
        out.push_str(clip(&body, MAX_BODY_BYTES));
        out.push('\n');
    }
    out
}

/// One input: its owner's rendering under its type, or the default rendering.
fn render_input(e: &Event, rendered: &Renderings) -> String {
    match rendered.get(&e.id).filter(|r| !r.text.is_empty()) {
        Some(r) => {
            let mut out = format!("### {}\n\n{}\n", e.event_type, r.text.trim_end());
            if r.truncated {
                out.push_str("\n(this rendering was cut to its bound)\n");
            }
            out
        }
        None => render_event(e),
    }
}

/// The inputs, in acceptance order, each as [`render_input`] shows it, at most
/// [`MAX_INPUTS_BYTES`] together: the input that does not fit is shown in part, the
/// later ones not at all, and a last line says so.
pub fn render_inputs(inputs: &[Event], rendered: &Renderings) -> String {
    if inputs.is_empty() {
        return "(nothing new)\n".to_string();
    }
    let mut out = String::new();
    for (i, e) in inputs.iter().enumerate() {
        let sep = if i == 0 { "" } else { "\n" };
        let block = render_input(e, rendered);
        if out.len() + sep.len() + block.len() <= MAX_INPUTS_BYTES {
            out.push_str(sep);
            out.push_str(&block);
            continue;
        }
        let room = MAX_INPUTS_BYTES.saturating_sub(out.len() + sep.len());
        let part = clip(&block, room);
        let later = inputs.len() - i - 1;
        let more = |n: usize| match n {
            1 => "1 more input is not shown".to_string(),
            n => format!("{n} more inputs are not shown"),
        };
        let what = if part.is_empty() {
            more(later + 1)
        } else {
            out.push_str(sep);
            out.push_str(part);
            format!("the input above is shown in part, and {}", more(later))
        };
        out.push_str(&format!(
            "\n\n[cut: the inputs are shown in at most {MAX_INPUTS_BYTES} bytes; {what}]\n"
        ));
        break;
    }
    out
}

/// The renderings of `req`'s inputs by the extensions owning their families
/// (`event.render_owned` with the Work and the binding's connection; the host reads
/// the Events again by ID). Empty when the host answers anything else or not within
/// [`RENDER_WAIT`]: every input then gets the default rendering.
pub async fn owned_renderings(host: &crate::Host, req: &RunRequest) -> Renderings {
    if req.inputs.is_empty() {
        return Renderings::new();
    }
    let params = EventRenderOwnedParams {
        events: req
            .inputs
            .iter()
            .take(MAX_OWNED_EVENTS)
            .map(|e| Event {
                id: e.id.clone(),
                event_type: e.event_type.clone(),
                scope_id: e.scope_id.clone(),
                ..Event::default()
            })
            .collect(),
        work_id: req.work.id.clone(),
        connection: req.binding.connection.clone(),
        max_bytes: u32::try_from(MAX_RENDERED_BYTES).unwrap_or(u32::MAX),
    };
    let why = match tokio::time::timeout(RENDER_WAIT, host.call_typed(&params)).await {
        Ok(Ok(r)) => {
            return r
                .events
                .into_iter()
                .filter(|e| !e.text.is_empty())
                .map(|e| (e.id.clone(), e))
                .collect()
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {RENDER_WAIT:?}"),
    };
    eprintln!(
        "agent: work {}: event.render_owned: {why}; the inputs get the default rendering",
        req.work.id
    );
    Renderings::new()
}

/// The whole prompt of a turn.
pub fn prompt(
    playbook: Option<&str>,
    args: &str,
    shape: Shape,
    note: &str,
    inputs: &[Event],
    rendered: &Renderings,
) -> String {
    let args = match shape {
        Shape::First => args.to_string(),
        Shape::Events => format!("{args} events"),
        Shape::Handoff => format!("{args} handoff"),
    };
    let args = args.trim().to_string();
    let head = match playbook {
        Some(p) => format!("/open-conduit:{p} {args}").trim_end().to_string(),
        None => args,
    };
    let rendered = render_inputs(inputs, rendered);
    let body = match shape {
        Shape::First => format!("## Already waiting\n\n{rendered}"),
        Shape::Events => format!("## Since your last turn\n\n{rendered}"),
        Shape::Handoff => format!(
            "## Handoff from your last session\n\n{}\n\n## Since your last turn\n\n{rendered}",
            note.trim()
        ),
    };
    if head.is_empty() {
        body
    } else {
        format!("{head}\n\n{body}")
    }
}

/// The text of an injected Event: marked with its ID so the echo proves it.
pub fn inject_text(e: &Event, rendered: &Renderings) -> String {
    format!(
        "## Arrived during this turn\n\n{EVENT_MARK}{}{MARK_END}\n\n{}",
        e.id,
        clip(&render_input(e, rendered), MAX_INPUTS_BYTES)
    )
}

/// The Event IDs marked in a message's text.
pub fn marked_ids(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(EVENT_MARK) {
        rest = &rest[i + EVENT_MARK.len()..];
        if let Some(end) = rest.find(MARK_END) {
            let id = &rest[..end];
            if !id.is_empty() && !id.contains(char::is_whitespace) {
                out.push(id.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::Payload;
    use serde_json::json;

    fn work(keys: &[&str]) -> Work {
        Work {
            id: "w-9".into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            ..Work::default()
        }
    }

    #[test]
    fn templates() {
        assert_eq!(template("{number}", &work(&["acme/api#42"])), "42");
        assert_eq!(template("{number}", &work(&["topic"])), "topic");
        assert_eq!(template("{key} {work}", &work(&["k1", "k2"])), "k1 w-9");
        assert_eq!(template("{number}", &work(&[])), "");
    }

    #[test]
    fn shapes() {
        let e = Event {
            id: "ev-1".into(),
            event_type: "tracker.comment".into(),
            payload: Payload {
                schema: "x.v1".into(),
                data: json!({"author": "ann", "number": 7, "html_url": "https://x/7", "body": "please fix"}),
            },
            ..Event::default()
        };
        let p = prompt(
            Some("work"),
            "7",
            Shape::First,
            "",
            std::slice::from_ref(&e),
            &Renderings::new(),
        );
        assert!(p.starts_with("/open-conduit:work 7\n\n## Already waiting\n\n### tracker.comment\nauthor: ann\nnumber: 7\nurl: https://x/7\n\nplease fix"), "{p}");
        let p = prompt(None, "7", Shape::Events, "", &[], &Renderings::new());
        assert!(p.starts_with("7 events\n\n## Since your last turn"), "{p}");
        let p = prompt(
            None,
            "7",
            Shape::Handoff,
            "the note",
            &[],
            &Renderings::new(),
        );
        assert!(p.starts_with("7 handoff\n\n## Handoff from your last session\n\nthe note\n\n## Since your last turn"), "{p}");
        let t = inject_text(&e, &Renderings::new());
        assert!(t.starts_with("## Arrived during this turn"));
        assert_eq!(marked_ids(&t), ["ev-1"]);
        // An injected Event its owner rendered shows the rendering.
        let mut owned = Renderings::new();
        owned.insert(
            "ev-1".into(),
            protocol::wire::RenderedEvent {
                id: "ev-1".into(),
                text: "## Review by ann: changes requested".into(),
                truncated: false,
                rendered_by: "tracker".into(),
            },
        );
        let t = inject_text(&e, &owned);
        assert!(t.contains("## Review by ann: changes requested"), "{t}");
        assert_eq!(marked_ids(&t), ["ev-1"]);
        assert!(marked_ids("nothing").is_empty());
    }

    fn comment(id: &str, body: &str) -> Event {
        Event {
            id: id.into(),
            event_type: "tracker.comment".into(),
            payload: Payload {
                schema: "x.v1".into(),
                data: json!({"author": "ann", "body": body}),
            },
            ..Event::default()
        }
    }

    #[test]
    fn an_owner_rendering_replaces_the_default_one() {
        let inputs = [comment("ev-1", "generic"), comment("ev-2", "also generic")];
        let rendered = Renderings::from([(
            "ev-1".to_string(),
            RenderedEvent {
                id: "ev-1".into(),
                text: "**ann** asked for changes\n```diff\n+x\n```".into(),
                truncated: true,
                rendered_by: "tracker".into(),
            },
        )]);
        let text = render_inputs(&inputs, &rendered);
        assert!(
            text.starts_with("### tracker.comment\n\n**ann** asked for changes\n```diff\n+x\n```\n\n(this rendering was cut to its bound)\n"),
            "{text}"
        );
        assert!(!text.contains("\ngeneric\n"), "{text}");
        // The one without a rendering keeps the default one.
        assert!(
            text.ends_with("### tracker.comment\nauthor: ann\n\nalso generic\n"),
            "{text}"
        );
    }

    #[test]
    fn the_inputs_are_bounded_together_and_the_cut_is_said() {
        // Each body is cut to MAX_BODY_BYTES (20 kB) by the default renderer.
        let body = "é".repeat(15_000);
        let inputs: Vec<Event> = (0..5).map(|i| comment(&format!("ev-{i}"), &body)).collect();
        let text = render_inputs(&inputs, &Renderings::new());
        let (shown, note) = text.split_once("\n\n[cut: ").unwrap();
        assert!(shown.len() <= MAX_INPUTS_BYTES, "{}", shown.len());
        // Three whole inputs fit; the fourth is shown in part.
        assert_eq!(shown.matches("### tracker.comment").count(), 4);
        assert_eq!(
            note,
            format!("the inputs are shown in at most {MAX_INPUTS_BYTES} bytes; the input above is shown in part, and 1 more input is not shown]\n")
        );
        // Under the bound nothing is cut.
        let small = render_inputs(&inputs[..3], &Renderings::new());
        assert!(!small.contains("[cut:"));
    }
}
