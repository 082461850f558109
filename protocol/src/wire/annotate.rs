//! `work.annotate` (H→E, manifest `provides.annotations`): the host tells the
//! extensions configured for a Work's scope how the Work stands whenever it moves
//! (queued, running, waiting, done, failed, cancelled), so a package can show it on its
//! own surface (the GitHub package's status comment). Best effort and not awaited;
//! `version` orders the annotations of one Work (an older one than the last seen is
//! stale).

use serde::{Deserialize, Serialize};

use super::Work;

/// `work.annotate` (H→E).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkAnnotateParams {
    /// The Work as it stands now (its state, display and keys).
    pub work: Work,
    /// The Work's version: bumped by every change, so a later annotation has a larger one.
    #[serde(default)]
    pub version: i64,
    /// Its latest attempt, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<AnnotatedAttempt>,
    /// What it waits for, while it waits.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waiting_for: String,
    /// The Wait's progress line (`2 of 3 checks finished`), while it waits.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress: String,
}

/// The latest attempt of an annotated Work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnotatedAttempt {
    /// The execution.
    pub execution_id: String,
    /// Its number (1 for the first).
    #[serde(default)]
    pub attempt: i64,
    /// `running`, `completed`, `failed`, `waiting`, `cancelled`, ...
    pub state: String,
    /// Its summary, when it ended with one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Result of `work.annotate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkAnnotateResult {}
