//! The list pages: Works, deliveries, extensions and hosts, and the configuration
//! with its check and a route trace. Each draws a read's JSON value as HTML, every
//! value escaped.

use serde_json::Value;

use crate::http::{percent_encode, ApiError};
use crate::reads::{TraceAsk, WorkFilter};
use busapi::store::WORK_STATES;

/// `s` escaped for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value as text: a string as it is, anything else as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `v[key]` as escaped text.
pub fn field(v: &Value, key: &str) -> String {
    esc(&text(&v[key]))
}

/// A Work's link, by its ID.
pub fn work_link(id: &str) -> String {
    format!("<a href=\"/works/{}\">{}</a>", percent_encode(id), esc(id))
}

/// A state as a badge (its words, never a colour alone).
pub fn badge(state: &str) -> String {
    format!(
        "<span class=\"state state-{}\">{}</span>",
        esc(&state.replace(|c: char| !c.is_ascii_alphanumeric(), "-")),
        esc(state)
    )
}

/// A table from a head and rows of cells (already HTML).
pub fn table(caption: &str, head: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"empty\">{}</p>", esc(empty));
    }
    let mut out = format!("<table><caption>{}</caption><thead><tr>", esc(caption));
    for h in head {
        out.push_str(&format!("<th scope=\"col\">{}</th>", esc(h)));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            out.push_str(&format!("<td>{cell}</td>"));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// The Works page: the filters, then the live table.
pub fn works(f: &WorkFilter, list: &Value) -> String {
    let mut states = String::from("<option value=\"\">any</option>");
    for s in WORK_STATES {
        let sel = if f.state.as_deref() == Some(s) {
            " selected"
        } else {
            ""
        };
        states.push_str(&format!("<option{sel}>{}</option>", esc(s)));
    }
    let filters = format!(
        "<form method=\"get\" action=\"/works\" class=\"filters\" aria-label=\"Filter the Works\">\
         <label>State <select name=\"state\">{states}</select></label>\
         <label>Scope <input name=\"scope\" value=\"{}\"></label>\
         <label>Binding <input name=\"binding\" value=\"{}\"></label>\
         <button type=\"submit\">Filter</button></form>",
        esc(f.scope.as_deref().unwrap_or("")),
        esc(f.binding.as_deref().unwrap_or(""))
    );
    let rows: Vec<Vec<String>> = list["works"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let id = w["id"].as_str().unwrap_or("");
            let title = w["display"]["title"].as_str().unwrap_or("");
            vec![
                work_link(id),
                esc(title),
                field(w, "scope_id"),
                field(w, "binding"),
                badge(w["state"].as_str().unwrap_or("")),
                field(w, "updated_at"),
            ]
        })
        .collect();
    let mut next = String::new();
    if let Some(n) = list["next"].as_str().filter(|n| !n.is_empty()) {
        let mut q = format!("after={}", percent_encode(n));
        for (k, v) in [
            ("state", &f.state),
            ("scope", &f.scope),
            ("binding", &f.binding),
        ] {
            if let Some(v) = v {
                q.push_str(&format!("&{k}={}", percent_encode(v)));
            }
        }
        next = format!("<p><a href=\"/works?{q}\">Older Works</a></p>");
    }
    format!(
        "{filters}<div id=\"works\" data-refresh>{}{next}</div>",
        table(
            "Works, the last changed first",
            &["Work", "Title", "Scope", "Binding", "State", "Changed"],
            &rows,
            "No Work matches.",
        )
    )
}

/// Why an Event went where it did: each route's verdict.
pub fn routing(r: &Value) -> String {
    let records = r["records"].as_array().cloned().unwrap_or_default();
    if records.is_empty() {
        let d = r["disposition"].as_str().unwrap_or("not routed yet");
        return format!("<span class=\"muted\">{}</span>", esc(d));
    }
    let mut out = String::from("<ul class=\"routing\">");
    for rec in &records {
        let verdict = if rec["matched"].as_bool() == Some(true) {
            "matched"
        } else {
            "passed"
        };
        let work = rec["work_id"]
            .as_str()
            .map(|w| format!(" → {}", work_link(w)))
            .unwrap_or_default();
        out.push_str(&format!(
            "<li><strong>{}</strong> {} <em>{verdict}</em>: {}{work}</li>",
            field(rec, "handler"),
            field(rec, "binding"),
            field(rec, "reason"),
        ));
    }
    out.push_str("</ul>");
    out
}

/// The deliveries page: the last Events and why each routed where it did.
pub fn deliveries(events: &Value) -> String {
    let rows: Vec<Vec<String>> = events["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            vec![
                field(e, "seq"),
                field(e, "accepted_at"),
                field(e, "scope_id"),
                format!("<code>{}</code>", field(e, "type")),
                field(e, "source"),
                field(e, "delivery_id"),
                routing(&e["routing"]),
            ]
        })
        .collect();
    format!(
        "<div id=\"deliveries\" data-refresh>{}</div>",
        table(
            "The last Events, newest first",
            &["Seq", "Accepted", "Scope", "Type", "Source", "Delivery", "Routing"],
            &rows,
            "No Event yet.",
        )
    )
}

/// The extensions and hosts page.
pub fn extensions(ext: &Value, hosts: &Value) -> String {
    let rows: Vec<Vec<String>> = ext["extensions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            vec![
                format!("<strong>{}</strong>", field(e, "name")),
                field(e, "version"),
                field(e, "origin"),
                badge(e["state"].as_str().unwrap_or("")),
                field(e, "restarts"),
                field(e, "pid"),
            ]
        })
        .collect();
    let host_rows: Vec<Vec<String>> = hosts["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            vec![
                field(h, "name"),
                format!("<code>{}</code>", field(h, "id")),
                badge(if h["alive"].as_bool() == Some(true) {
                    "alive"
                } else {
                    "gone"
                }),
                field(h, "running"),
                field(h, "started_at"),
            ]
        })
        .collect();
    format!(
        "<div id=\"extensions\" data-refresh>{}<h2>Hosts</h2>{}</div>",
        table(
            "Extensions",
            &["Package", "Version", "From", "State", "Restarts", "PID"],
            &rows,
            "No extension.",
        ),
        table(
            "Hosts of the suite",
            &["Name", "ID", "State", "Running attempts", "Since"],
            &host_rows,
            "No host has beaten yet.",
        )
    )
}

fn problems(list: &Value, title: &str) -> String {
    let items: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "<li><code>{}</code>: {}</li>",
                field(p, "pointer"),
                field(p, "message")
            )
        })
        .collect();
    if items.is_empty() {
        return String::new();
    }
    format!("<h3>{}</h3><ul>{}</ul>", esc(title), items.join(""))
}

/// The configuration page: its check, a route trace against a sample event, and the
/// document itself, redacted.
pub fn config(
    config: &Value,
    ask: Option<&TraceAsk>,
    trace: Option<Result<Value, ApiError>>,
    samples: &Value,
) -> String {
    let check = &config["check"];
    let verdict = if check["ok"].as_bool() == Some(true) {
        format!(
            "<p class=\"ok\">Generation {} is valid ({} warning(s)).</p>",
            field(config, "generation"),
            check["warnings"].as_array().map_or(0, Vec::len)
        )
    } else {
        format!(
            "<p class=\"error\">Generation {} has problems.</p>",
            field(config, "generation")
        )
    };
    let mut scopes = String::new();
    for s in config["scopes"].as_array().into_iter().flatten() {
        let s = s.as_str().unwrap_or("");
        let sel = if ask.is_some_and(|a| a.scope == s) {
            " selected"
        } else {
            ""
        };
        scopes.push_str(&format!(
            "<option value=\"{v}\"{sel}>{v}</option>",
            v = esc(s)
        ));
    }
    let mut sample_opts = String::from("<option value=\"\">none: use the type below</option>");
    for e in samples["events"].as_array().into_iter().flatten() {
        let seq = e["seq"].as_i64().unwrap_or(0);
        let sel = if ask.and_then(|a| a.sample) == Some(seq) {
            " selected"
        } else {
            ""
        };
        sample_opts.push_str(&format!(
            "<option value=\"{seq}\"{sel}>#{seq} {} ({}, {})</option>",
            field(e, "type"),
            field(e, "source"),
            field(e, "scope_id")
        ));
    }
    let form = format!(
        "<form method=\"get\" action=\"/config\" class=\"trace\" aria-label=\"Route trace\">\
         <label>Scope <select name=\"scope\" required>{scopes}</select></label>\
         <label>Sample event <select name=\"sample\">{sample_opts}</select></label>\
         <label>or type <input name=\"type\" value=\"{}\"></label>\
         <label>source <input name=\"source\" value=\"{}\"></label>\
         <label>keys <input name=\"keys\" value=\"{}\" placeholder=\"k1, k2\"></label>\
         <button type=\"submit\">Trace</button></form>",
        esc(ask.map_or("", |a| a.event_type.as_str())),
        esc(ask.map_or("", |a| a.source.as_str())),
        esc(&ask.map(|a| a.keys.join(", ")).unwrap_or_default()),
    );
    let result = match trace {
        None => String::new(),
        Some(Err(e)) => format!(
            "<p class=\"error\" role=\"alert\">The trace: {}</p>",
            esc(&e.message)
        ),
        Some(Ok(t)) => {
            let rows: Vec<Vec<String>> = t["records"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    vec![
                        field(r, "handler"),
                        field(r, "binding"),
                        if r["matched"].as_bool() == Some(true) {
                            "<strong>matched</strong>".to_owned()
                        } else {
                            "no".to_owned()
                        },
                        field(r, "reason"),
                    ]
                })
                .collect();
            format!(
                "<section id=\"trace-result\" aria-label=\"Trace result\"><p>Event <code>{}</code> from {} in scope {}:</p>{}<p>Outcome: <code>{}</code></p></section>",
                esc(t["event"]["type"].as_str().unwrap_or("")),
                esc(t["event"]["source"].as_str().unwrap_or("")),
                field(&t, "scope"),
                table("Each route's verdict", &["Handler", "Binding", "Matched", "Why"], &rows, "The scope has no route."),
                esc(&text(&t["outcome"]))
            )
        }
    };
    let doc = serde_json::to_string_pretty(&config["config"]).unwrap_or_default();
    format!(
        "<section aria-labelledby=\"check\"><h2 id=\"check\">Check</h2><div id=\"check-result\" data-refresh>{verdict}{}{}</div></section>\
         <section aria-labelledby=\"trace\"><h2 id=\"trace\">Route trace</h2>\
         <p>How every route of a scope would decide an event; nothing is written.</p>{form}{result}</section>\
         <section aria-labelledby=\"doc\"><h2 id=\"doc\">The configuration</h2>\
         <p>Generation {}, hash <code>{}</code>; secret references are redacted.</p><pre class=\"doc\">{}</pre></section>",
        problems(&check["problems"], "Problems"),
        problems(&check["warnings"], "Warnings"),
        field(config, "generation"),
        field(config, "hash"),
        esc(&doc)
    )
}
