//! Payload schema evolution.

use super::*;

// ---------------------------------------------------------------------------
// Payload schema evolution

/// How a payload's schema stands against the extension's declared schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadStatus {
    /// Absent, or outside the extension's namespace: passed verbatim.
    Foreign,
    /// The version the extension writes: passed.
    Current,
    /// An older version still listed: passed, upcast by the SDK.
    Upcast,
    /// Own, older than every listed version (or an unlisted older one): not
    /// passed for decisions.
    Retired,
    /// Own, newer than the written version: not passed for decisions.
    Newer,
    /// Own namespace, undeclared base or no version suffix: not passed.
    Undeclared,
}

impl PayloadStatus {
    /// The status's wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadStatus::Foreign => "foreign",
            PayloadStatus::Current => "current",
            PayloadStatus::Upcast => "upcast",
            PayloadStatus::Retired => "retired",
            PayloadStatus::Newer => "newer",
            PayloadStatus::Undeclared => "undeclared",
        }
    }

    /// Whether a payload of this status is passed to the extension for its
    /// decisions.
    pub fn readable(self) -> bool {
        matches!(
            self,
            PayloadStatus::Foreign | PayloadStatus::Current | PayloadStatus::Upcast
        )
    }
}

impl fmt::Display for PayloadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A payload an extension may not write (wire code `unreadable_schema`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable_schema: payload schema `{schema}` is {status}; a payload must be unversioned or the current version of one of the extension's schemas")]
pub struct UnreadableSchema {
    /// The schema the payload names.
    pub schema: String,
    /// How it stands.
    pub status: PayloadStatus,
}

impl UnreadableSchema {
    /// The wire error code.
    pub const CODE: &'static str = "unreadable_schema";
}

impl Manifest {
    /// Classifies a payload schema identifier (`<base>.v<N>`).
    pub fn payload_status(&self, schema: Option<&str>) -> PayloadStatus {
        let Some(schema) = schema.filter(|s| !s.is_empty()) else {
            return PayloadStatus::Foreign;
        };
        let own = schema == self.name
            || schema
                .strip_prefix(self.name.as_str())
                .is_some_and(|rest| rest.starts_with('.'));
        if !own {
            return PayloadStatus::Foreign;
        }
        let Some((base, n)) = version_suffix(schema) else {
            return PayloadStatus::Undeclared;
        };
        let Some(declared) = self.provides.schemas.iter().find(|s| s.base == base) else {
            return PayloadStatus::Undeclared;
        };
        let (Some(&first), Some(&current)) = (declared.versions.first(), declared.versions.last())
        else {
            return PayloadStatus::Undeclared;
        };
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        if n == current {
            PayloadStatus::Current
        } else if n > current {
            PayloadStatus::Newer
        } else if n < first || !declared.versions.contains(&n) {
            PayloadStatus::Retired
        } else {
            PayloadStatus::Upcast
        }
    }

    /// Whether the extension may write a payload of `schema`: absent, or the
    /// current version of one of its own schemas.
    pub fn check_write(&self, schema: Option<&str>) -> Result<(), UnreadableSchema> {
        match schema.filter(|s| !s.is_empty()) {
            None => Ok(()),
            Some(s) => match self.payload_status(Some(s)) {
                PayloadStatus::Current => Ok(()),
                status => Err(UnreadableSchema {
                    schema: s.to_string(),
                    status,
                }),
            },
        }
    }

    /// Every name the manifest declares, by kind (for conflict checks across
    /// packages): `families`, `operations`, `executors`, … .
    pub fn declared_names(&self) -> BTreeMap<&'static str, BTreeSet<&str>> {
        let p = &self.provides;
        let mut out: BTreeMap<&'static str, BTreeSet<&str>> = BTreeMap::new();
        out.entry("name").or_default().insert(self.name.as_str());
        let groups: [(&'static str, Vec<&str>); 12] = [
            (
                "families",
                p.families.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "config_types",
                p.connections
                    .iter()
                    .map(|x| x.type_name.as_str())
                    .chain(p.extensions.iter().map(|x| x.type_name.as_str()))
                    .collect(),
            ),
            (
                "handlers",
                p.routes.iter().map(|x| x.handler.as_str()).collect(),
            ),
            (
                "executors",
                p.executors.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "resource_types",
                p.resources.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "operations",
                p.operations.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "work_kinds",
                p.work_kinds.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "recurrences",
                p.recurrences.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "schemas",
                p.schemas.iter().map(|x| x.base.as_str()).collect(),
            ),
            (
                "sandbox_types",
                p.sandboxes.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "container_types",
                p.containers.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "tunnel_types",
                p.tunnels.iter().map(|x| x.type_name.as_str()).collect(),
            ),
        ];
        for (kind, names) in groups {
            if !names.is_empty() {
                out.entry(kind).or_default().extend(names);
            }
        }
        out
    }
}
