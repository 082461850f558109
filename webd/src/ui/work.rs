//! A Work's page (its story: actions, panels, live output, attempts, inputs and why
//! each came, Waits, decisions) and the pages extensions declare, drawn by the core
//! from their panels: plain text, fields, conversations, buttons naming the
//! provider's own actions and text boxes, never markup from the package.

use serde_json::Value;

use super::draw::{badge, esc, field, table, text, work_link};
use crate::http::percent_encode;

/// A button that takes `action` of `provider` on `work` with `input` (the script
/// posts it to `/api/works/{work}/actions`).
fn act_button(
    work: &str,
    provider: &str,
    action: &str,
    input: &Value,
    label: &str,
    style: &str,
) -> String {
    let input = if input.is_null() {
        String::new()
    } else {
        input.to_string()
    };
    let class = match style {
        "danger" => "act danger",
        "primary" => "act primary",
        _ => "act",
    };
    format!(
        "<button type=\"button\" class=\"{class}\" data-work=\"{}\" data-provider=\"{}\" data-action=\"{}\" data-input=\"{}\">{}</button>",
        esc(work),
        esc(provider),
        esc(action),
        esc(&input),
        esc(label)
    )
}

/// The Work's actions, as buttons.
fn actions(id: &str, list: &Value) -> String {
    let buttons: Vec<String> = list["actions"]
        .as_array()
        .into_iter()
        .flatten()
        // An action that asks for words is drawn by its provider's panel.
        .filter(|a| {
            a["prompt"].as_str().is_none_or(str::is_empty)
                && a["choices"].as_array().is_none_or(Vec::is_empty)
        })
        .map(|a| {
            let label = a["label"]
                .as_str()
                .filter(|l| !l.is_empty())
                .or(a["id"].as_str())
                .unwrap_or("");
            let style = if a["id"] == "stop" { "danger" } else { "" };
            act_button(
                id,
                a["provider"].as_str().unwrap_or(""),
                a["id"].as_str().unwrap_or(""),
                &a["input"],
                label,
                style,
            )
        })
        .collect();
    if buttons.is_empty() {
        return "<p class=\"empty\">No action applies to this Work now.</p>".to_owned();
    }
    format!(
        "<div class=\"actions\" role=\"group\" aria-label=\"Actions\">{}</div>",
        buttons.join("")
    )
}

/// One panel: its sections in order.
pub fn panel(p: &Value, provider: &str, work: &str) -> String {
    let work = p["work_id"]
        .as_str()
        .filter(|w| !w.is_empty())
        .unwrap_or(work);
    let mut out = format!(
        "<section class=\"panel\" aria-label=\"{}\"><h3>{}</h3>",
        field(p, "title"),
        field(p, "title")
    );
    if !work.is_empty() && p["work_id"].as_str().is_some_and(|w| !w.is_empty()) {
        out.push_str(&format!("<p class=\"muted\">Work {}</p>", work_link(work)));
    }
    for s in p["sections"].as_array().into_iter().flatten() {
        out.push_str("<div class=\"section\">");
        if let Some(h) = s["heading"].as_str().filter(|h| !h.is_empty()) {
            out.push_str(&format!("<h4>{}</h4>", esc(h)));
        }
        if let Some(t) = s["text"].as_str().filter(|t| !t.is_empty()) {
            out.push_str(&format!("<p class=\"text\">{}</p>", esc(t)));
        }
        let fields: Vec<String> = s["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                format!(
                    "<dt>{}</dt><dd>{}</dd>",
                    field(f, "label"),
                    field(f, "value")
                )
            })
            .collect();
        if !fields.is_empty() {
            out.push_str(&format!("<dl>{}</dl>", fields.join("")));
        }
        let messages: Vec<String> = s["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let from = m["from"].as_str().unwrap_or("note");
                let label = m["label"].as_str().filter(|l| !l.is_empty()).unwrap_or(from);
                format!(
                    "<li class=\"msg from-{}\"><span class=\"from\">{}</span> <span class=\"at\">{}</span><p>{}</p></li>",
                    esc(from),
                    esc(label),
                    field(m, "at"),
                    field(m, "text")
                )
            })
            .collect();
        if !messages.is_empty() {
            out.push_str(&format!(
                "<ol class=\"conversation\">{}</ol>",
                messages.join("")
            ));
        }
        let buttons: Vec<String> = s["buttons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                act_button(
                    work,
                    provider,
                    b["action"].as_str().unwrap_or(""),
                    &b["input"],
                    b["label"].as_str().unwrap_or(""),
                    b["style"].as_str().unwrap_or(""),
                )
            })
            .collect();
        if !buttons.is_empty() {
            out.push_str(&format!(
                "<div class=\"actions\" role=\"group\">{}</div>",
                buttons.join("")
            ));
        }
        if let Some(i) = s.get("input").filter(|i| i.is_object()) {
            let label = i["label"]
                .as_str()
                .filter(|l| !l.is_empty())
                .unwrap_or("Answer");
            let id = format!(
                "in-{}-{}",
                percent_encode(work).replace('%', "_"),
                esc(i["action"].as_str().unwrap_or(""))
            );
            out.push_str(&format!(
                "<form class=\"act-form\" data-work=\"{}\" data-provider=\"{}\" data-action=\"{}\" data-name=\"{}\" data-input=\"{}\">\
                 <label for=\"{id}\">{}</label><input id=\"{id}\" name=\"value\" required>\
                 <button type=\"submit\">Send</button></form>",
                esc(work),
                esc(provider),
                field(i, "action"),
                field(i, "name"),
                esc(&if i["input"].is_object() { i["input"].to_string() } else { String::new() }),
                esc(label)
            ));
        }
        out.push_str("</div>");
    }
    out.push_str("</section>");
    out
}

/// The panels the packages draw on a Work (`view.panels`).
fn panels(id: &str, answer: &Value) -> String {
    let mut out = String::new();
    for p in answer["panels"].as_array().into_iter().flatten() {
        out.push_str(&panel(
            &p["panel"],
            p["provider"].as_str().unwrap_or(""),
            id,
        ));
    }
    for e in answer["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "<p class=\"error\">{} drew no panel: {}</p>",
            field(e, "provider"),
            field(e, "error")
        ));
    }
    out
}

/// A Work's page.
pub fn story(id: &str, s: &Value, acts: &Value, pans: &Value) -> String {
    let w = &s["work"];
    let head = format!(
        "<dl class=\"facts\"><dt>Title</dt><dd>{}</dd><dt>State</dt><dd>{}</dd><dt>Scope</dt><dd>{}</dd>\
         <dt>Binding</dt><dd>{}</dd><dt>Kind</dt><dd>{}</dd><dt>Created</dt><dd>{}</dd><dt>Changed</dt><dd>{}</dd></dl>",
        esc(w["display"]["title"].as_str().unwrap_or("")),
        badge(w["state"].as_str().unwrap_or("")),
        field(w, "scope_id"),
        field(w, "binding"),
        field(w, "kind"),
        field(w, "created_at"),
        field(w, "updated_at"),
    );
    let attempts: Vec<Vec<String>> = s["executions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            vec![
                field(e, "attempt"),
                format!("<code>{}</code>", field(e, "id")),
                field(e, "executor"),
                badge(e["state"].as_str().unwrap_or("")),
                esc(&text(&e["result"]["outcome"]["detail"])
                    .chars()
                    .take(300)
                    .collect::<String>()),
                field(e, "started_at"),
                field(e, "ended_at"),
            ]
        })
        .collect();
    let inputs: Vec<Vec<String>> = s["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            vec![
                field(i, "seq"),
                field(i, "state"),
                super::draw::routing(&i["routing"]),
            ]
        })
        .collect();
    let waits: Vec<Vec<String>> = s["waits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            vec![
                field(w, "description"),
                field(w, "owner"),
                badge(w["state"].as_str().unwrap_or("")),
                field(w, "due_at"),
                field(w, "created_at"),
            ]
        })
        .collect();
    let decisions: Vec<Vec<String>> = s["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            vec![
                field(d, "seq"),
                field(d, "action"),
                format!("<span class=\"caller\">{}</span>", field(d, "caller")),
                field(d, "provider"),
                esc(&text(&d["decision"])),
            ]
        })
        .collect();
    format!(
        "<div id=\"story\" data-refresh>{head}{}{}\
         <h2>Attempts</h2>{}<h2>Inputs and why each came</h2>{}<h2>Waits</h2>{}<h2>Decisions</h2>{}</div>\
         <section aria-labelledby=\"out-h\"><h2 id=\"out-h\">Live output</h2>\
         <div id=\"output\" data-work=\"{}\" aria-live=\"off\"><p class=\"muted\">No attempt runs now.</p></div></section>",
        actions(id, acts),
        panels(id, pans),
        table("Attempts", &["#", "Execution", "Executor", "State", "Outcome", "Started", "Ended"], &attempts, "No attempt yet."),
        table("Inputs", &["Event", "State", "Routing"], &inputs, "No input."),
        table("Waits", &["What", "Owner", "State", "Due", "Since"], &waits, "No Wait."),
        table("Decisions", &["Event", "Action", "By", "Provider", "Decision"], &decisions, "No decision yet."),
        esc(id),
    )
}

/// The pages extensions declare.
pub fn pages(list: &Value) -> String {
    let rows: Vec<Vec<String>> = list["pages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let (pkg, id) = (
                p["package"].as_str().unwrap_or(""),
                p["id"].as_str().unwrap_or(""),
            );
            vec![
                format!(
                    "<a href=\"/pages/{}/{}\">{}</a>",
                    percent_encode(pkg),
                    percent_encode(id),
                    field(p, "title")
                ),
                esc(pkg),
                field(p, "summary"),
            ]
        })
        .collect();
    table(
        "Pages of the extensions",
        &["Page", "Package", "What"],
        &rows,
        "No extension declares a page.",
    )
}

/// An extension's page: its panels, each on its own Work.
pub fn extension_page(decl: &Value, drawn: &Value) -> String {
    let provider = decl["package"].as_str().unwrap_or("");
    let mut out = String::new();
    if let Some(s) = decl["summary"].as_str().filter(|s| !s.is_empty()) {
        out.push_str(&format!("<p>{}</p>", esc(s)));
    }
    let mut body = String::new();
    for p in drawn["panels"].as_array().into_iter().flatten() {
        body.push_str(&panel(
            &p["panel"],
            p["provider"].as_str().unwrap_or(provider),
            "",
        ));
    }
    if body.is_empty() {
        body = "<p class=\"empty\">Nothing here now.</p>".to_owned();
    }
    out.push_str(&format!(
        "<div id=\"page-panels\" data-refresh>{body}</div>"
    ));
    out
}
