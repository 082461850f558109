//! Prompt rendering: `event.render` (H→E, to the extension owning an Event's family)
//! and `event.render_owned` (E→H, from an executor, which the host forwards to the
//! owner). The rendered form is the package's; the host falls back to a generic
//! rendering when the owner is absent, refuses, or the payload is unreadable.

use serde::{Deserialize, Serialize};

use super::Event;

/// The most bytes one rendered Event may take; a longer rendering is cut at a
/// character boundary by whoever produced it, and marked cut.
pub const MAX_RENDERED_BYTES: usize = 32 * 1024;

/// `event.render` (H→E): render one Event of the extension's own families for an
/// agent's prompt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventRenderParams {
    /// The Event (in one of the package's families).
    pub event: Event,
    /// The Work whose prompt it is for, when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The connection the Work's binding names, for a renderer that reads more
    /// from its service (a review's comments); empty when it names none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// The most bytes the answer's `text` may have (at most [`MAX_RENDERED_BYTES`]).
    #[serde(default)]
    pub max_bytes: u32,
}

/// Result of `event.render`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRenderResult {
    /// The rendering, Markdown.
    pub text: String,
    /// True when the text was cut to the bound.
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub truncated: bool,
}

/// `event.render_owned` (E→H, from an executor): render Events of any family through
/// the extensions that own them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventRenderOwnedParams {
    /// The Events, in prompt order (at most 100).
    pub events: Vec<Event>,
    /// The Work whose prompt they are for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The binding's connection, passed on to each renderer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// The most bytes each rendering may have (at most [`MAX_RENDERED_BYTES`]).
    #[serde(default)]
    pub max_bytes: u32,
}

/// One Event's rendering in `event.render_owned`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedEvent {
    /// The Event's ID.
    pub id: String,
    /// The rendering; empty when the owner gave none (render it generically).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// True when the text was cut to the bound.
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub truncated: bool,
    /// Which extension rendered it; empty when none did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rendered_by: String,
}

/// Result of `event.render_owned`: one entry per Event, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRenderOwnedResult {
    /// The renderings.
    pub events: Vec<RenderedEvent>,
}
