//! The conflict check: a whole set of packages at once, against the names the
//! host takes itself and against each other. Either every package is admitted
//! or none is, and a refusal lists every conflict, so an operator fixes them
//! in one pass.
//!
//! The checked kinds are those of [`Manifest::declared_names`](protocol::manifest::Manifest::declared_names):
//! the name, config types, handlers, executors, resource types, operations,
//! families, work kinds, recurrences, schemas (and sandbox, container and
//! tunnel types). A name conflicts with the same name of the same kind; a
//! reserved name conflicts with a name of any kind.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use protocol::manifest::RESERVED_NAMES;

use crate::discovery::Package;

/// The names the host takes itself: reserved names (of every kind) and the
/// names of each kind it registers, such as its own route handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNames {
    reserved: BTreeSet<String>,
    by_kind: BTreeMap<String, BTreeSet<String>>,
}

impl Default for HostNames {
    /// The reserved names ([`RESERVED_NAMES`]) and nothing else.
    fn default() -> Self {
        HostNames {
            reserved: RESERVED_NAMES.iter().map(|s| (*s).to_string()).collect(),
            by_kind: BTreeMap::new(),
        }
    }
}

impl HostNames {
    /// No names at all, not even the reserved ones.
    pub fn empty() -> Self {
        HostNames {
            reserved: BTreeSet::new(),
            by_kind: BTreeMap::new(),
        }
    }

    /// Reserves `name` in every kind.
    pub fn reserve(&mut self, name: impl Into<String>) -> &mut Self {
        self.reserved.insert(name.into());
        self
    }

    /// Takes `name` of `kind` (a kind of
    /// [`Manifest::declared_names`](protocol::manifest::Manifest::declared_names),
    /// such as `handlers`).
    pub fn add(&mut self, kind: &str, name: impl Into<String>) -> &mut Self {
        self.by_kind
            .entry(kind.to_string())
            .or_default()
            .insert(name.into());
        self
    }

    /// [`HostNames::add`], by value.
    pub fn with(mut self, kind: &str, name: impl Into<String>) -> Self {
        self.add(kind, name);
        self
    }

    /// Whether the host takes `name` of `kind` (or reserves it).
    pub fn takes(&self, kind: &str, name: &str) -> bool {
        self.reserved.contains(name) || self.by_kind.get(kind).is_some_and(|s| s.contains(name))
    }

    /// The reserved names.
    pub fn reserved(&self) -> impl Iterator<Item = &str> {
        self.reserved.iter().map(String::as_str)
    }
}

/// Who claims a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Claimant {
    /// The host itself (a reserved name or one it registers).
    Host,
    /// A package.
    Package {
        /// The package's name.
        name: String,
        /// Its directory.
        dir: PathBuf,
    },
}

impl fmt::Display for Claimant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claimant::Host => f.write_str("the host"),
            Claimant::Package { name, dir } => {
                write!(f, "extension `{name}` ({})", dir.display())
            }
        }
    }
}

/// A name of one kind claimed twice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("{kind} `{name}` is claimed by {first} and by {second}")]
pub struct Conflict {
    /// The kind (`name`, `families`, `operations`, …).
    pub kind: String,
    /// The name.
    pub name: String,
    /// Who claims it first: the host, or the first package in name order.
    pub first: Claimant,
    /// Who claims it again.
    pub second: Claimant,
}

impl Conflict {
    /// The names of the packages involved (one or two).
    pub fn packages(&self) -> impl Iterator<Item = &str> {
        [&self.first, &self.second]
            .into_iter()
            .filter_map(|c| match c {
                Claimant::Host => None,
                Claimant::Package { name, .. } => Some(name.as_str()),
            })
    }
}

/// One line per conflict, for an error message.
pub fn describe(conflicts: &[Conflict]) -> String {
    let mut out = format!(
        "{} extension conflict{}; no extension is admitted:",
        conflicts.len(),
        if conflicts.len() == 1 { "" } else { "s" }
    );
    for c in conflicts {
        out.push_str("\n  ");
        out.push_str(&c.to_string());
    }
    out
}

/// Checks the whole set at once. `Ok` admits every package; `Err` admits none
/// and lists every conflict, sorted by kind and name.
///
/// For each name of each kind, the first claimant is the host when it takes
/// the name, else the first package in (name, directory) order; every other
/// claimant conflicts with it.
pub fn check_conflicts(packages: &[Package], host: &HostNames) -> Result<(), Vec<Conflict>> {
    let mut ordered: Vec<&Package> = packages.iter().collect();
    ordered.sort_by(|a, b| (&a.name, &a.dir).cmp(&(&b.name, &b.dir)));

    // kind -> name -> claimants, in order.
    let mut claims: BTreeMap<&str, BTreeMap<&str, Vec<Claimant>>> = BTreeMap::new();
    for pkg in &ordered {
        for (kind, names) in pkg.manifest.declared_names() {
            for name in names {
                let claimants = claims.entry(kind).or_default().entry(name).or_default();
                if claimants.is_empty() && host.takes(kind, name) {
                    claimants.push(Claimant::Host);
                }
                claimants.push(Claimant::Package {
                    name: pkg.name.clone(),
                    dir: pkg.dir.clone(),
                });
            }
        }
    }

    let mut conflicts = Vec::new();
    for (kind, names) in claims {
        for (name, claimants) in names {
            let mut it = claimants.into_iter();
            let Some(first) = it.next() else { continue };
            for second in it {
                conflicts.push(Conflict {
                    kind: kind.to_string(),
                    name: name.to_string(),
                    first: first.clone(),
                    second,
                });
            }
        }
    }

    if conflicts.is_empty() {
        Ok(())
    } else {
        for c in &conflicts {
            tracing::warn!(kind = %c.kind, name = %c.name, "{c}");
        }
        Err(conflicts)
    }
}
