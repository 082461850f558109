//! `view.render` (H→E, with manifest `provides.panels`): the panels a package shows in
//! the web view, on a Work's page (surface `work`) or on one of its own pages (surface
//! `page`, manifest `provides.pages`).
//!
//! A panel is a constrained document of plain text: core draws it, and nothing the
//! package sends is read as markup. A section holds a heading, a text, label/value
//! fields, a conversation (messages), buttons and one text box. A button names one of
//! the package's own actions (`work.actions`/`work.act`): pressing it is that action on
//! the panel's Work, with the button's input. A text box's value goes to
//! `input[name]` of its action, beside the box's own `input`.
//!
//! Every list and text is bounded ([`MAX_PANELS`], [`MAX_SECTIONS`], [`MAX_MESSAGES`],
//! [`MAX_BUTTONS`], [`MAX_PANEL_TEXT_BYTES`], ...); [`Panel::validate`] refuses a panel
//! past a bound, naming the field and the limit.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::actions::{MAX_ACTION_CHOICES, MAX_ACTION_INPUT_BYTES, MAX_ACTION_NAME_BYTES};
use super::WireError;

/// The most panels one `view.render` answers.
pub const MAX_PANELS: usize = 8;
/// The most sections of a panel.
pub const MAX_SECTIONS: usize = 16;
/// The most messages of a section.
pub const MAX_MESSAGES: usize = 50;
/// The most buttons of a section.
pub const MAX_BUTTONS: usize = 8;
/// The most label/value fields of a section.
pub const MAX_FIELDS: usize = 32;
/// The longest text (a section's text, a field's value, a message), in bytes.
pub const MAX_PANEL_TEXT_BYTES: usize = 8 * 1024;
/// The longest one-line label (a title, heading, label, choice), in bytes.
pub const MAX_PANEL_LABEL_BYTES: usize = 200;
/// The longest panel ID or Work ID a panel names, in bytes.
pub const MAX_PANEL_ID_BYTES: usize = 200;
/// The most bytes of one panel, as JSON text.
pub const MAX_PANEL_BYTES: usize = 128 * 1024;

/// Where a panel is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ViewSurface {
    /// A Work's page: the panels of `work_id`.
    #[default]
    Work,
    /// One of the package's own pages (`page`, manifest `provides.pages`).
    Page,
}

/// `view.render` (H→E, with manifest `provides.panels`): the package's panels on a
/// surface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewRenderParams {
    /// `work` or `page`.
    pub surface: ViewSurface,
    /// The Work (surface `work`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The page's ID (surface `page`), one of the manifest's `provides.pages`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub page: String,
    /// The scope: the Work's (surface `work`); on a page, only this scope when set,
    /// else every scope whose configuration uses the package.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
}

/// Result of `view.render`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ViewRenderResult {
    /// The panels, in the order shown (at most [`MAX_PANELS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub panels: Vec<Panel>,
}

/// One panel: a titled document of sections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Panel {
    /// The panel's ID, distinct among the package's panels of one render.
    pub id: String,
    /// Its title: one line.
    pub title: String,
    /// The Work its buttons act on (on a page, each panel names its own; on a Work,
    /// that Work).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The sections, in order (at most [`MAX_SECTIONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sections: Vec<Section>,
}

/// A section of a panel: each part is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    /// A heading: one line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub heading: String,
    /// Plain text (lines kept).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Label/value pairs (at most [`MAX_FIELDS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Field>,
    /// A conversation (at most [`MAX_MESSAGES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// Buttons, each one of the package's actions (at most [`MAX_BUTTONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<Button>,
    /// A text box that sends its value to an action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputBox>,
}

/// A label and its value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// The label: one line.
    pub label: String,
    /// The value: plain text.
    #[serde(default)]
    pub value: String,
}

/// Who said a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageFrom {
    /// The operator (a person on this side).
    Operator,
    /// The other participant (an agent; `agent`, its old name, is read as this).
    #[default]
    #[serde(alias = "agent")]
    Participant,
    /// A note of neither.
    Note,
}

/// One message of a conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub from: MessageFrom,
    /// Who, by name: one line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// What was said: plain text.
    pub text: String,
    /// When, as RFC 3339 text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
    /// The answers it offered (at most 20, one line each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// The answer picked, once one was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chosen: String,
}

/// How a button is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ButtonStyle {
    /// The expected choice.
    Primary,
    /// A choice that cancels or refuses something.
    Danger,
}

/// A button: pressing it takes the package's action `action` on the panel's Work
/// with `input`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Button {
    /// What it says: one line.
    pub label: String,
    /// One of the package's own actions.
    pub action: String,
    /// The action's input.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// How it is drawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<ButtonStyle>,
}

/// A text box: its value goes to `input[name]` of the package's action `action`, the
/// rest of the action's input being `input`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputBox {
    /// One of the package's own actions.
    pub action: String,
    /// The input field the value goes to.
    pub name: String,
    /// What the box asks for: one line.
    pub label: String,
    /// Suggested values (at most 20, one line each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// The rest of the action's input (an object), the value added as `name`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

// ---------------------------------------------------------------------------------------
// Bounds
// ---------------------------------------------------------------------------------------

fn bytes_over(field: &str, len: usize, max: usize) -> WireError {
    WireError::new(field, format!("{len} bytes, over the limit of {max} bytes"))
}

fn count_over(field: &str, what: &str, n: usize, max: usize) -> WireError {
    WireError::new(field, format!("{n} {what}, over the limit of {max}"))
}

/// One line of at most `max` bytes, without control characters; empty only when
/// `required` is false.
fn line(field: &str, text: &str, max: usize, required: bool) -> Result<(), WireError> {
    if required && text.trim().is_empty() {
        return Err(WireError::new(field, "is required"));
    }
    if text.len() > max {
        return Err(bytes_over(field, text.len(), max));
    }
    if text.chars().any(char::is_control) {
        return Err(WireError::new(
            field,
            "must be one line without control characters",
        ));
    }
    Ok(())
}

/// Plain text of at most [`MAX_PANEL_TEXT_BYTES`]: lines and tabs, no other control
/// characters.
fn text(field: &str, text: &str) -> Result<(), WireError> {
    if text.len() > MAX_PANEL_TEXT_BYTES {
        return Err(bytes_over(field, text.len(), MAX_PANEL_TEXT_BYTES));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(WireError::new(
            field,
            "must be plain text (no control characters but newlines and tabs)",
        ));
    }
    Ok(())
}

fn choices(field: &str, list: &[String]) -> Result<(), WireError> {
    if list.len() > MAX_ACTION_CHOICES {
        return Err(count_over(field, "choices", list.len(), MAX_ACTION_CHOICES));
    }
    for (i, c) in list.iter().enumerate() {
        line(&format!("{field}[{i}]"), c, MAX_PANEL_LABEL_BYTES, true)?;
    }
    Ok(())
}

fn action_input(field: &str, input: &Value) -> Result<(), WireError> {
    let len = serde_json::to_string(input).map_or(usize::MAX, |t| t.len());
    if len > MAX_ACTION_INPUT_BYTES {
        return Err(bytes_over(field, len, MAX_ACTION_INPUT_BYTES));
    }
    Ok(())
}

impl ViewRenderResult {
    /// Checks the count ([`MAX_PANELS`]), each panel ([`Panel::validate`]) and that
    /// the panels' IDs are distinct. The error's field is `panels[i]…`.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.panels.len() > MAX_PANELS {
            return Err(count_over(
                "panels",
                "panels",
                self.panels.len(),
                MAX_PANELS,
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, p) in self.panels.iter().enumerate() {
            p.validate().map_err(|e| WireError {
                field: format!("panels[{i}].{}", e.field),
                reason: e.reason,
            })?;
            if !seen.insert(p.id.as_str()) {
                return Err(WireError::new(
                    format!("panels[{i}].id"),
                    format!("{:?} is the ID of an earlier panel", p.id),
                ));
            }
        }
        Ok(())
    }
}

impl Panel {
    /// Checks every bound of the panel: its ID, title and Work (one line),
    /// [`MAX_SECTIONS`] sections, and in each [`MAX_FIELDS`] fields,
    /// [`MAX_MESSAGES`] messages, [`MAX_BUTTONS`] buttons, texts of at most
    /// [`MAX_PANEL_TEXT_BYTES`], labels of one line of at most
    /// [`MAX_PANEL_LABEL_BYTES`], actions named within [`MAX_ACTION_NAME_BYTES`],
    /// inputs within [`MAX_ACTION_INPUT_BYTES`]; and the whole within
    /// [`MAX_PANEL_BYTES`]. The error names the field (`sections[2].buttons`) and
    /// the limit.
    pub fn validate(&self) -> Result<(), WireError> {
        line("id", &self.id, MAX_PANEL_ID_BYTES, true)?;
        line("title", &self.title, MAX_PANEL_LABEL_BYTES, true)?;
        line("work_id", &self.work_id, MAX_PANEL_ID_BYTES, false)?;
        if self.sections.len() > MAX_SECTIONS {
            return Err(count_over(
                "sections",
                "sections",
                self.sections.len(),
                MAX_SECTIONS,
            ));
        }
        for (i, s) in self.sections.iter().enumerate() {
            s.validate(&format!("sections[{i}]"))?;
        }
        let len = serde_json::to_string(self).map_or(usize::MAX, |t| t.len());
        if len > MAX_PANEL_BYTES {
            return Err(WireError::new(
                "sections",
                format!(
                    "the panel is {len} bytes as JSON, over the limit of {MAX_PANEL_BYTES} bytes"
                ),
            ));
        }
        Ok(())
    }

    /// Whether any section has a button or a text box (it acts on a Work).
    pub fn acts(&self) -> bool {
        self.sections
            .iter()
            .any(|s| !s.buttons.is_empty() || s.input.is_some())
    }
}

impl Section {
    fn validate(&self, at: &str) -> Result<(), WireError> {
        let f = |name: &str| format!("{at}.{name}");
        line(&f("heading"), &self.heading, MAX_PANEL_LABEL_BYTES, false)?;
        text(&f("text"), &self.text)?;
        if self.fields.len() > MAX_FIELDS {
            return Err(count_over(
                &f("fields"),
                "fields",
                self.fields.len(),
                MAX_FIELDS,
            ));
        }
        for (i, x) in self.fields.iter().enumerate() {
            line(
                &f(&format!("fields[{i}].label")),
                &x.label,
                MAX_PANEL_LABEL_BYTES,
                true,
            )?;
            text(&f(&format!("fields[{i}].value")), &x.value)?;
        }
        if self.messages.len() > MAX_MESSAGES {
            return Err(count_over(
                &f("messages"),
                "messages",
                self.messages.len(),
                MAX_MESSAGES,
            ));
        }
        for (i, m) in self.messages.iter().enumerate() {
            let g = |name: &str| f(&format!("messages[{i}].{name}"));
            line(&g("label"), &m.label, MAX_PANEL_LABEL_BYTES, false)?;
            text(&g("text"), &m.text)?;
            line(&g("at"), &m.at, MAX_PANEL_LABEL_BYTES, false)?;
            choices(&g("choices"), &m.choices)?;
            line(&g("chosen"), &m.chosen, MAX_PANEL_LABEL_BYTES, false)?;
        }
        if self.buttons.len() > MAX_BUTTONS {
            return Err(count_over(
                &f("buttons"),
                "buttons",
                self.buttons.len(),
                MAX_BUTTONS,
            ));
        }
        for (i, b) in self.buttons.iter().enumerate() {
            let g = |name: &str| f(&format!("buttons[{i}].{name}"));
            line(&g("label"), &b.label, MAX_PANEL_LABEL_BYTES, true)?;
            line(&g("action"), &b.action, MAX_ACTION_NAME_BYTES, true)?;
            action_input(&g("input"), &b.input)?;
        }
        if let Some(b) = &self.input {
            let g = |name: &str| f(&format!("input.{name}"));
            line(&g("action"), &b.action, MAX_ACTION_NAME_BYTES, true)?;
            line(&g("name"), &b.name, MAX_ACTION_NAME_BYTES, true)?;
            line(&g("label"), &b.label, MAX_PANEL_LABEL_BYTES, true)?;
            choices(&g("choices"), &b.choices)?;
            if !(b.input.is_null() || b.input.is_object()) {
                return Err(WireError::new(
                    g("input"),
                    "must be an object (the value is added to it as its name)",
                ));
            }
            action_input(&g("input"), &b.input)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn panel() -> Panel {
        Panel {
            id: "ask-a-1".into(),
            title: "Which branch?".into(),
            work_id: "w-1".into(),
            sections: vec![Section {
                text: "Which branch should the fix go to?\nIt is urgent.".into(),
                fields: vec![Field {
                    label: "asked".into(),
                    value: "2026-10-25T09:00:00Z".into(),
                }],
                messages: vec![Message {
                    from: MessageFrom::Participant,
                    text: "Which?".into(),
                    choices: vec!["main".into(), "release-2.x".into()],
                    ..Message::default()
                }],
                buttons: vec![Button {
                    label: "main".into(),
                    action: "answer".into(),
                    input: json!({"ask_id": "a-1", "choice": "main"}),
                    style: Some(ButtonStyle::Primary),
                }],
                input: Some(InputBox {
                    action: "answer".into(),
                    name: "answer".into(),
                    label: "Your answer".into(),
                    input: json!({"ask_id": "a-1"}),
                    ..InputBox::default()
                }),
                ..Section::default()
            }],
        }
    }

    fn refused(p: &Panel) -> String {
        p.validate().unwrap_err().to_string()
    }

    #[test]
    fn a_full_panel_is_valid_and_reads_back() {
        let p = panel();
        p.validate().unwrap();
        assert!(p.acts());
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["sections"][0]["messages"][0]["from"], "participant");
        assert_eq!(v["sections"][0]["buttons"][0]["style"], "primary");
        assert_eq!(serde_json::from_value::<Panel>(v).unwrap(), p);
        // The old name of a participant is read as one.
        let m: Message = serde_json::from_value(json!({"from": "agent", "text": "hi"})).unwrap();
        assert_eq!(m.from, MessageFrom::Participant);
        let params: ViewRenderParams =
            serde_json::from_value(json!({"surface": "page", "page": "asks"})).unwrap();
        assert_eq!(params.surface, ViewSurface::Page);
        assert!(serde_json::from_value::<ViewRenderParams>(json!({"surface": "scope"})).is_err());
    }

    #[test]
    fn each_count_is_bounded_and_named() {
        let mut p = panel();
        p.sections[0].buttons = vec![p.sections[0].buttons[0].clone(); MAX_BUTTONS];
        p.validate().unwrap();
        let one = p.sections[0].buttons[0].clone();
        p.sections[0].buttons.push(one);
        assert_eq!(
            refused(&p),
            "sections[0].buttons: 9 buttons, over the limit of 8"
        );

        let mut p = panel();
        p.sections[0].messages = vec![p.sections[0].messages[0].clone(); MAX_MESSAGES + 1];
        assert_eq!(
            refused(&p),
            "sections[0].messages: 51 messages, over the limit of 50"
        );

        let mut p = panel();
        p.sections = vec![Section::default(); MAX_SECTIONS];
        p.validate().unwrap();
        p.sections.push(Section::default());
        assert_eq!(refused(&p), "sections: 17 sections, over the limit of 16");

        let mut p = panel();
        p.sections[0].fields = vec![p.sections[0].fields[0].clone(); MAX_FIELDS + 1];
        assert_eq!(
            refused(&p),
            "sections[0].fields: 33 fields, over the limit of 32"
        );

        let mut p = panel();
        p.sections[0].messages[0].choices = (0..21).map(|i| i.to_string()).collect();
        assert_eq!(
            refused(&p),
            "sections[0].messages[0].choices: 21 choices, over the limit of 20"
        );

        let r = ViewRenderResult {
            panels: (0..=MAX_PANELS)
                .map(|i| Panel {
                    id: format!("p-{i}"),
                    ..panel()
                })
                .collect(),
        };
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "panels: 9 panels, over the limit of 8"
        );
    }

    #[test]
    fn texts_are_bounded_and_plain() {
        let mut p = panel();
        p.sections[0].text = "a".repeat(MAX_PANEL_TEXT_BYTES);
        p.validate().unwrap();
        p.sections[0].text.push('a');
        assert_eq!(
            refused(&p),
            "sections[0].text: 8193 bytes, over the limit of 8192 bytes"
        );

        let mut p = panel();
        p.sections[0].messages[0].text = "ring\u{7}".into();
        assert!(refused(&p).starts_with("sections[0].messages[0].text: must be plain text"));

        let mut p = panel();
        p.title = "two\nlines".into();
        assert!(refused(&p).starts_with("title: must be one line"));
        p.title = " ".into();
        assert_eq!(refused(&p), "title: is required");

        let mut p = panel();
        p.sections[0].buttons[0].action = String::new();
        assert_eq!(refused(&p), "sections[0].buttons[0].action: is required");

        let mut p = panel();
        p.sections[0].buttons[0].input = json!({"x": "i".repeat(MAX_ACTION_INPUT_BYTES)});
        assert!(refused(&p).starts_with("sections[0].buttons[0].input: "));

        let mut p = panel();
        if let Some(b) = p.sections[0].input.as_mut() {
            b.input = json!("a-1");
        }
        assert!(refused(&p).starts_with("sections[0].input.input: must be an object"));
    }

    #[test]
    fn a_panel_is_bounded_as_a_whole_and_ids_are_distinct() {
        let mut p = panel();
        let long = Section {
            text: "a".repeat(MAX_PANEL_TEXT_BYTES),
            ..Section::default()
        };
        p.sections = vec![long; MAX_SECTIONS];
        p.sections[0].fields = vec![
            Field {
                label: "l".into(),
                value: "v".repeat(MAX_PANEL_TEXT_BYTES)
            };
            MAX_FIELDS
        ];
        let said = refused(&p);
        assert!(
            said.starts_with("sections: the panel is ") && said.ends_with("limit of 131072 bytes"),
            "{said}"
        );

        let r = ViewRenderResult {
            panels: vec![panel(), panel()],
        };
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "panels[1].id: \"ask-a-1\" is the ID of an earlier panel"
        );
        let mut bad = panel();
        bad.sections[0].heading = "x".repeat(201);
        let r = ViewRenderResult {
            panels: vec![
                panel(),
                Panel {
                    id: "b".into(),
                    ..bad
                },
            ],
        };
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "panels[1].sections[0].heading: 201 bytes, over the limit of 200 bytes"
        );
    }
}
