//! `view.render`: what waits for a person, as panels of the web view.
//!
//! - surface `work`: one panel per open item of the Work: an ask (its question; its
//!   choices as buttons of the action `answer`, input `{ask_id, choice}`, or a text
//!   box sending `{ask_id, answer}`), a parked call (`approve` and `reject` buttons,
//!   and a text box rejecting with a reason), a hold for admission (`admit` and
//!   `reject` buttons, and a text box rejecting with a reason);
//! - surface `page`, page [`PAGE_ASKS`]: the same panels for every open item across
//!   the package's scopes (or the one asked), each naming its Work.
//!
//! At most [`MAX_PANELS`] panels: past that, the last one says how to list them all.

use crate::actions::clip_text;
use crate::{
    gate, plan_choices, plan_str, waits_of, work_of, State, ACTION_ADMIT, ACTION_ANSWER,
    ACTION_APPROVE, ACTION_REJECT, NAME, WAIT_ACTIVE,
};
use protocol::wire::{
    clip_line, Button, ButtonStyle, Field, InputBox, Panel, Section, StateWorksParams,
    ViewRenderParams, ViewRenderResult, ViewSurface, Wait, Work, MAX_BUTTONS, MAX_PANELS,
    MAX_PANEL_LABEL_BYTES, MAX_PANEL_TEXT_BYTES,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

/// The package's page: every open ask, approval and admission.
pub const PAGE_ASKS: &str = "asks";
/// The Work states an open item is found in: held Work is `pending`; a Work with an
/// open ask or a parked call is `waiting` or `running`.
const OPEN_STATES: [&str; 3] = ["waiting", "running", "pending"];
/// The most Works the page reads, across scopes and states.
pub const MAX_WORKS_READ: usize = 1000;
/// A page of `state.works`.
const WORKS_PAGE: u32 = 200;

fn label(text: &str) -> String {
    clip_line(text.trim(), MAX_PANEL_LABEL_BYTES)
}

fn button(text: &str, action: &str, input: Value, style: Option<ButtonStyle>) -> Button {
    Button {
        label: label(text),
        action: action.to_string(),
        input,
        style,
    }
}

/// A text box rejecting with a reason, beside `input`.
fn reason_box(input: Value) -> InputBox {
    InputBox {
        action: ACTION_REJECT.to_string(),
        name: "reason".to_string(),
        label: "Reject, saying why".to_string(),
        choices: Vec::new(),
        input,
    }
}

/// What a Work is called: its display title, else its ID.
fn work_name(work: &Work) -> &str {
    work.display
        .as_ref()
        .map(|d| d.title.as_str())
        .filter(|t| !t.trim().is_empty())
        .unwrap_or(work.id.as_str())
}

/// The fields every panel of `work` shows: the Work (on a page), when the item opened
/// and when it times out.
fn fields(work: &Work, on_page: bool, wait: Option<&Wait>) -> Vec<Field> {
    let mut out = Vec::new();
    if on_page {
        let name = work_name(work);
        out.push(Field {
            label: "Work".into(),
            value: if name == work.id {
                label(&work.id)
            } else {
                label(&format!("{name} ({})", work.id))
            },
        });
    }
    if let Some(w) = wait {
        if !w.created_at.is_empty() {
            out.push(Field {
                label: "Since".into(),
                value: label(&w.created_at),
            });
        }
        if !w.due_at.is_empty() {
            out.push(Field {
                label: "Times out".into(),
                value: label(&w.due_at),
            });
        }
    }
    out
}

/// An open ask's panel.
fn ask_panel(work: &Work, w: &Wait, on_page: bool) -> Option<Panel> {
    let ask_id = plan_str(&w.plan, "ask_id")?;
    let question = plan_str(&w.plan, "question").unwrap_or(&w.description);
    let choices = plan_choices(&w.plan);
    let mut section = Section {
        text: clip_text(question.trim(), MAX_PANEL_TEXT_BYTES),
        fields: fields(work, on_page, Some(w)),
        ..Section::default()
    };
    if choices.is_empty() {
        section.input = Some(InputBox {
            action: ACTION_ANSWER.into(),
            name: "answer".into(),
            label: "Your answer".into(),
            choices: Vec::new(),
            input: json!({ "ask_id": ask_id }),
        });
    } else if choices.len() <= MAX_BUTTONS {
        section.buttons = choices
            .iter()
            .map(|c| {
                button(
                    c,
                    ACTION_ANSWER,
                    json!({"ask_id": ask_id, "choice": c}),
                    None,
                )
            })
            .collect();
    } else {
        // More choices than buttons: a box that takes one of them.
        section.input = Some(InputBox {
            action: ACTION_ANSWER.into(),
            name: "answer".into(),
            label: "Your answer (one of the choices)".into(),
            choices: choices.iter().map(|c| label(c)).collect(),
            input: json!({ "ask_id": ask_id }),
        });
    }
    let first = question.trim().lines().next().unwrap_or_default();
    Some(Panel {
        id: format!("ask-{ask_id}"),
        title: label(&format!("An agent asks: {first}")),
        work_id: work.id.clone(),
        sections: vec![section],
    })
}

/// A parked call's panel.
fn gate_panel(work: &Work, w: &Wait, on_page: bool) -> Option<Panel> {
    let gate_id = plan_str(&w.plan, "gate_id")?;
    let op = plan_str(&w.plan, "operation").unwrap_or("an operation");
    let input = json!({ "gate_id": gate_id });
    Some(Panel {
        id: format!("approval-{gate_id}"),
        title: label(&format!("Approve {op}?")),
        work_id: work.id.clone(),
        sections: vec![Section {
            text: clip_text(&gate::detail(&w.plan), MAX_PANEL_TEXT_BYTES),
            fields: fields(work, on_page, Some(w)),
            buttons: vec![
                button(
                    "Approve",
                    ACTION_APPROVE,
                    input.clone(),
                    Some(ButtonStyle::Primary),
                ),
                button(
                    "Reject",
                    ACTION_REJECT,
                    input.clone(),
                    Some(ButtonStyle::Danger),
                ),
            ],
            input: Some(reason_box(input)),
            ..Section::default()
        }],
    })
}

/// The panel of a Work held for admission by this package.
fn hold_panel(work: &Work, on_page: bool) -> Option<Panel> {
    let hold = work.hold.as_ref().filter(|h| h.owner == NAME)?;
    Some(Panel {
        id: format!("admission-{}", work.id),
        title: label(&format!("Admit {}?", work_name(work))),
        work_id: work.id.clone(),
        sections: vec![Section {
            text: clip_text(&hold.reason, MAX_PANEL_TEXT_BYTES),
            fields: fields(work, on_page, None),
            buttons: vec![
                button(
                    "Admit",
                    ACTION_ADMIT,
                    Value::Null,
                    Some(ButtonStyle::Primary),
                ),
                button(
                    "Reject",
                    ACTION_REJECT,
                    Value::Null,
                    Some(ButtonStyle::Danger),
                ),
            ],
            input: Some(reason_box(Value::Null)),
            ..Section::default()
        }],
    })
}

/// One panel per open item of `work` (its `waits`): its asks and parked calls, then
/// its hold. `on_page`: each panel also names the Work.
pub fn panels_of(work: &Work, waits: &[Wait], on_page: bool) -> Vec<Panel> {
    let mut out: Vec<Panel> = waits
        .iter()
        .filter(|w| w.owner == NAME && w.state == WAIT_ACTIVE)
        .filter_map(|w| match plan_str(&w.plan, "kind") {
            Some("ask") => ask_panel(work, w, on_page),
            Some("gate") => gate_panel(work, w, on_page),
            _ => None,
        })
        .collect();
    out.extend(hold_panel(work, on_page));
    out
}

/// `panels` within [`MAX_PANELS`]: past it, the last says more wait.
pub fn bounded(mut panels: Vec<Panel>, more: bool) -> Vec<Panel> {
    if panels.len() <= MAX_PANELS && !more {
        return panels;
    }
    panels.truncate(MAX_PANELS - 1);
    panels.push(Panel {
        id: "more".into(),
        title: "More waits for a person".into(),
        work_id: String::new(),
        sections: vec![Section {
            text: "More asks, approvals and admissions are open than this shows: \
                   `open-conduit asks` lists every one."
                .into(),
            ..Section::default()
        }],
    });
    panels
}

/// Serves `view.render` (see the module doc).
pub async fn render(
    state: &State,
    host: &sdk::Host,
    p: &ViewRenderParams,
) -> Result<ViewRenderResult, RpcError> {
    match p.surface {
        ViewSurface::Work => work_panels(state, host, p).await,
        ViewSurface::Page if p.page == PAGE_ASKS => page_panels(state, host, p).await,
        ViewSurface::Page => Err(RpcError::new(
            Code::NotFound,
            format!("{NAME} has no page {:?} (its page is {PAGE_ASKS})", p.page),
        )),
    }
}

async fn work_panels(
    state: &State,
    host: &sdk::Host,
    p: &ViewRenderParams,
) -> Result<ViewRenderResult, RpcError> {
    if p.work_id.is_empty() || state.config(&p.scope_id).is_none() {
        return Ok(ViewRenderResult::default());
    }
    let work = match work_of(host, &p.scope_id, &p.work_id).await {
        Ok(work) => work,
        // A Work out of reach (or of another scope) shows nothing.
        Err(e) if e.is(Code::NotFound) => return Ok(ViewRenderResult::default()),
        Err(e) => return Err(e),
    };
    let waits = waits_of(host, &work.id).await?;
    Ok(ViewRenderResult {
        panels: bounded(panels_of(&work, &waits, false), false),
    })
}

async fn page_panels(
    state: &State,
    host: &sdk::Host,
    p: &ViewRenderParams,
) -> Result<ViewRenderResult, RpcError> {
    let registry = state.registry();
    let scopes: Vec<&String> = registry
        .scopes
        .keys()
        .filter(|s| p.scope_id.is_empty() || **s == p.scope_id)
        .collect();
    let mut panels = Vec::new();
    let mut read = 0usize;
    let mut more = false;
    'scopes: for scope in scopes {
        for state_name in OPEN_STATES {
            let mut after = String::new();
            loop {
                let page = host
                    .call_typed(&StateWorksParams {
                        scope_id: scope.clone(),
                        states: vec![state_name.to_string()],
                        after: after.clone(),
                        limit: WORKS_PAGE,
                        ..StateWorksParams::default()
                    })
                    .await
                    .map_err(|e| {
                        crate::host_error(
                            &format!("listing scope {scope}'s {state_name} Work (state.works)"),
                            &e,
                        )
                    })?;
                for work in &page.works {
                    if panels.len() > MAX_PANELS || read >= MAX_WORKS_READ {
                        more = true;
                        break 'scopes;
                    }
                    read += 1;
                    let waits = if work.state == "pending" {
                        Vec::new()
                    } else {
                        waits_of(host, &work.id).await?
                    };
                    panels.extend(panels_of(work, &waits, true));
                }
                if page.next.is_empty() {
                    break;
                }
                after = page.next;
            }
        }
    }
    Ok(ViewRenderResult {
        panels: bounded(panels, more),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{WorkDisplay, WorkHold};

    fn ask(id: &str, choices: Value) -> Wait {
        Wait {
            id: format!("wt-{id}"),
            work_id: "w-1".into(),
            state: WAIT_ACTIVE.into(),
            owner: NAME.into(),
            operation: "human.ask".into(),
            plan: json!({"kind": "ask", "ask_id": id, "question": "Which branch?\nIt matters.",
                         "choices": choices}),
            created_at: "2026-10-25T09:00:00Z".into(),
            ..Wait::default()
        }
    }

    fn work(held: bool) -> Work {
        Work {
            id: "w-1".into(),
            scope_id: "acme".into(),
            state: if held { "pending" } else { "waiting" }.into(),
            display: Some(WorkDisplay {
                title: "Fix the parser".into(),
                ..WorkDisplay::default()
            }),
            hold: held.then(|| WorkHold {
                owner: NAME.into(),
                reason: "waiting for a person to admit it".into(),
                held_at: String::new(),
            }),
            ..Work::default()
        }
    }

    #[test]
    fn an_asks_choices_are_buttons_taking_the_answer_action() {
        let panels = panels_of(
            &work(false),
            &[ask("a-1", json!(["main", "release-2.x"]))],
            false,
        );
        assert_eq!(panels.len(), 1);
        let p = &panels[0];
        p.validate().unwrap();
        assert_eq!(
            (p.id.as_str(), p.title.as_str(), p.work_id.as_str()),
            ("ask-a-1", "An agent asks: Which branch?", "w-1")
        );
        let s = &p.sections[0];
        assert_eq!(s.text, "Which branch?\nIt matters.");
        let buttons: Vec<(&str, &str, &Value)> = s
            .buttons
            .iter()
            .map(|b| (b.label.as_str(), b.action.as_str(), &b.input))
            .collect();
        assert_eq!(
            buttons,
            [
                (
                    "main",
                    "answer",
                    &json!({"ask_id": "a-1", "choice": "main"})
                ),
                (
                    "release-2.x",
                    "answer",
                    &json!({"ask_id": "a-1", "choice": "release-2.x"})
                ),
            ]
        );
        assert!(s.input.is_none());
        // Each button's input is one the answer action takes.
        let config = crate::config::parse_config(&json!({})).unwrap();
        let waits = [ask("a-1", json!(["main", "release-2.x"]))];
        let plan = crate::actions::act(
            &config,
            &protocol::wire::WorkActParams {
                scope_id: "acme".into(),
                work_id: "w-1".into(),
                action: s.buttons[1].action.clone(),
                input: s.buttons[1].input.clone(),
                caller: "web:alice".into(),
                key: "k".into(),
            },
            &work(false),
            &waits,
        )
        .unwrap();
        assert_eq!(plan.decision["answer"], "release-2.x");
    }

    #[test]
    fn a_free_text_ask_is_a_box_and_many_choices_a_box_with_them() {
        let p = &panels_of(&work(false), &[ask("a-2", json!([]))], false)[0];
        let b = p.sections[0].input.as_ref().unwrap();
        assert_eq!(
            (b.action.as_str(), b.name.as_str(), &b.input),
            ("answer", "answer", &json!({"ask_id": "a-2"}))
        );
        assert!(p.sections[0].buttons.is_empty());
        let many: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
        let p = &panels_of(&work(false), &[ask("a-3", json!(many))], false)[0];
        p.validate().unwrap();
        assert!(p.sections[0].buttons.is_empty());
        assert_eq!(p.sections[0].input.as_ref().unwrap().choices.len(), 12);
    }

    #[test]
    fn approvals_and_holds_have_their_buttons_and_a_reason_box() {
        let gate = Wait {
            id: "wt-g".into(),
            work_id: "w-1".into(),
            state: WAIT_ACTIVE.into(),
            owner: NAME.into(),
            plan: json!({"kind": "gate", "gate_id": "g-1", "operation": "github.merge",
                         "input": "number=3"}),
            due_at: "2026-10-26T09:00:00Z".into(),
            ..Wait::default()
        };
        let closed = Wait {
            state: "woken".into(),
            ..ask("a-9", json!([]))
        };
        let panels = panels_of(&work(true), &[gate, closed], true);
        let ids: Vec<&str> = panels.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            ["approval-g-1", "admission-w-1"],
            "a closed ask shows nothing"
        );
        for p in &panels {
            p.validate().unwrap();
        }
        let g = &panels[0];
        assert_eq!(g.title, "Approve github.merge?");
        assert_eq!(g.sections[0].text, "github.merge number=3");
        let actions: Vec<(&str, &Value)> = g.sections[0]
            .buttons
            .iter()
            .map(|b| (b.action.as_str(), &b.input))
            .collect();
        assert_eq!(
            actions,
            [
                ("approve", &json!({"gate_id": "g-1"})),
                ("reject", &json!({"gate_id": "g-1"}))
            ]
        );
        let reason = g.sections[0].input.as_ref().unwrap();
        assert_eq!(
            (reason.action.as_str(), reason.name.as_str()),
            ("reject", "reason")
        );
        let fields: Vec<(&str, &str)> = g.sections[0]
            .fields
            .iter()
            .map(|f| (f.label.as_str(), f.value.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("Work", "Fix the parser (w-1)"),
                ("Times out", "2026-10-26T09:00:00Z")
            ]
        );
        let h = &panels[1];
        assert_eq!(h.title, "Admit Fix the parser?");
        let labels: Vec<&str> = h.sections[0]
            .buttons
            .iter()
            .map(|b| b.action.as_str())
            .collect();
        assert_eq!(labels, ["admit", "reject"]);
    }

    #[test]
    fn past_the_panel_bound_the_last_panel_says_more_wait() {
        let waits: Vec<Wait> = (0..10).map(|i| ask(&format!("a-{i}"), json!([]))).collect();
        let panels = bounded(panels_of(&work(false), &waits, false), false);
        assert_eq!(panels.len(), MAX_PANELS);
        assert_eq!(panels[MAX_PANELS - 1].id, "more");
        assert!(panels[MAX_PANELS - 1].sections[0]
            .text
            .contains("open-conduit asks"));
        let r = ViewRenderResult { panels };
        r.validate().unwrap();
        assert_eq!(bounded(Vec::new(), false), Vec::<Panel>::new());
    }
}
