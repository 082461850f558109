//! The wire types of `resources` (moved from storaged).

use protocol::wire::OwnerStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A resource lease, as storaged's reads answer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRow {
    /// The resource type (`git`).
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The provider's lease reference.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The Work the workspace is for.
    pub owner: String,
    /// The scope of the binding.
    pub scope_id: String,
    /// The binding.
    pub binding: String,
    /// The mode it was made in (`shared`, `work`, `fresh`).
    pub mode: String,
    /// The workspace directory (absolute).
    pub dir: String,
    /// What the provider says about it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
    /// The execution that acquired it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
    /// First recorded (RFC 3339).
    pub created_at: String,
    /// Last recorded (RFC 3339).
    pub updated_at: String,
}

/// `store.resource_lease_put`: record (or update) the lease of (type, ref).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeasePutRequest {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The provider's lease reference.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The Work the workspace is for (need not exist).
    pub owner: String,
    /// The scope of the binding.
    #[serde(default)]
    pub scope_id: String,
    /// The binding.
    #[serde(default)]
    pub binding: String,
    /// The mode.
    #[serde(default)]
    pub mode: String,
    /// The workspace directory: absolute, at most [`MAX_DIR_BYTES`].
    pub dir: String,
    /// What the provider says about it: at most [`MAX_LEASE_DATA_BYTES`] of JSON.
    #[serde(default)]
    pub data: Option<Value>,
    /// The execution that acquired it.
    #[serde(default)]
    pub execution_id: Option<String>,
}

/// Result of `store.resource_lease_put`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeasePutResponse {
    /// The lease as recorded.
    pub lease: LeaseRow,
    /// Whether it is new (false: an existing lease was updated).
    pub created: bool,
}

/// `store.resource_lease_drop`: forget the lease of (type, ref).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseDropRequest {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The lease reference.
    #[serde(rename = "ref")]
    pub reference: String,
}

/// Result of `store.resource_lease_drop`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseDropResponse {
    /// Whether there was such a lease (dropping none is not an error).
    pub dropped: bool,
}

/// `store.resource_leases`: a page of leases by (type, ref).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeasesRequest {
    /// Only this type's.
    #[serde(default, rename = "type")]
    pub resource_type: Option<String>,
    /// Only this owner's.
    #[serde(default)]
    pub owner: Option<String>,
    /// The cursor (the previous page's `next`); empty for the first page.
    #[serde(default)]
    pub after: String,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.resource_leases`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeasesResponse {
    /// The leases.
    pub leases: Vec<LeaseRow>,
    /// The next page's cursor; empty at the end.
    #[serde(default)]
    pub next: String,
}

/// `store.owner_status`: whether each Work is open, closed or unknown.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerStatusRequest {
    /// The Work IDs asked about (at most [`MAX_OWNER_STATUS`]).
    pub owners: Vec<String>,
}

/// Result of `store.owner_status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OwnerStatusResponse {
    /// One status per owner asked about, in the order asked.
    pub owners: Vec<OwnerStatus>,
}
