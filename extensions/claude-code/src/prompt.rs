//! The turn's prompt: the playbook skill and arguments, the body of its shape
//! (a session's first turn, another turn, a handoff to a fresh session), the
//! inputs rendered by the default renderer, and the stream-json user messages
//! written to claude's stdin (the prompt, and each injected Event).
//!
//! The default renderer knows no service schema: it shows each Event's type,
//! the common payload fields and the body or text.

use protocol::wire::{Event, Work};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The most bytes of one Event's body or text the renderer shows.
pub const MAX_BODY_BYTES: usize = 20_000;
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

/// The inputs, in acceptance order.
pub fn render_inputs(inputs: &[Event]) -> String {
    if inputs.is_empty() {
        return "(nothing new)\n".to_string();
    }
    inputs
        .iter()
        .map(render_event)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The whole prompt of a turn.
pub fn prompt(
    playbook: Option<&str>,
    args: &str,
    shape: Shape,
    note: &str,
    inputs: &[Event],
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
    let rendered = render_inputs(inputs);
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

/// A stream-json user message carrying `text`, as one line with its newline.
pub fn user_message(text: &str) -> String {
    let msg = json!({
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    });
    format!("{msg}\n")
}

/// The text of an injected Event: marked with its ID so the echo proves it.
pub fn inject_text(e: &Event) -> String {
    format!(
        "## Arrived during this turn\n\n{EVENT_MARK}{}{MARK_END}\n\n{}",
        e.id,
        render_event(e)
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
        );
        assert!(p.starts_with("/open-conduit:work 7\n\n## Already waiting\n\n### tracker.comment\nauthor: ann\nnumber: 7\nurl: https://x/7\n\nplease fix"), "{p}");
        let p = prompt(None, "7", Shape::Events, "", &[]);
        assert!(p.starts_with("7 events\n\n## Since your last turn"), "{p}");
        let p = prompt(None, "7", Shape::Handoff, "the note", &[]);
        assert!(p.starts_with("7 handoff\n\n## Handoff from your last session\n\nthe note\n\n## Since your last turn"), "{p}");
        let t = inject_text(&e);
        assert!(t.starts_with("## Arrived during this turn"));
        assert_eq!(marked_ids(&t), ["ev-1"]);
        assert!(marked_ids("nothing").is_empty());
    }
}
