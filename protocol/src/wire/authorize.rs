//! `scope.authorize` (E→H, spec "Cross-scope authority"): may Work of one of the
//! extension's scopes read another scope's resources, or file in it? The host answers
//! from the configuration (`scopes[].authorization.read_scopes` and `file_scopes`;
//! filing implies reading), asked only about the extension's own scopes.

use serde::{Deserialize, Serialize};

/// `scope.authorize` (E→H).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeAuthorizeParams {
    /// The asking scope: one of the extension's.
    pub scope_id: String,
    /// The scope it would read or file in.
    pub target_scope_id: String,
    /// `read` or `file`.
    pub access: String,
}

/// Result of `scope.authorize`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeAuthorizeResult {
    /// True when the configuration allows it.
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub allowed: bool,
    /// Why not (naming the field that would allow it), or why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}
