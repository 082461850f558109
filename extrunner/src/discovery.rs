//! Discovery: the packages installed in `<config dir>/extensions/<name>/`,
//! then the bundled ones (`/usr/lib/open-conduit/extensions/<name>/` when
//! packaged).
//!
//! Every manifest is parsed strictly and offline ([`protocol::manifest::load_manifest`]).
//! An invalid or misnamed manifest, or a directory without one, is reported and
//! skipped. An installed package replaces a bundled one of the same directory
//! name, even when the installed one is refused: the bundled one is then not
//! offered, and a report says so, so a release that needs a newer Open Conduit
//! is reported rather than silently swapped for the bundled one. A missing
//! root means no packages from it.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use protocol::manifest::{load_manifest, parse_manifest, Manifest, ManifestError, MANIFEST_FILE};

/// Where a package was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// Under the installed root (`<config dir>/extensions`).
    Installed,
    /// Under the bundled root (shipped with the binary).
    Bundled,
}

impl Origin {
    /// `installed` or `bundled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Installed => "installed",
            Origin::Bundled => "bundled",
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A discovered package whose manifest is valid.
#[derive(Debug, Clone)]
pub struct Package {
    /// The manifest's name, which is also its directory's name.
    pub name: String,
    /// The package directory.
    pub dir: PathBuf,
    /// Installed or bundled.
    pub origin: Origin,
    /// The validated manifest.
    pub manifest: Manifest,
    /// The manifest file as parsed JSON, for the handshake's semantic
    /// comparison with the manifest the process reports.
    pub manifest_json: serde_json::Value,
}

/// Why a directory was not offered as a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportKind {
    /// The manifest is refused: invalid, misnamed, malformed, unreadable or
    /// needing a newer Open Conduit.
    Invalid {
        /// The refusal, as text.
        error: String,
        /// The broken rule's identifier (such as `name_reserved` or
        /// `directory_name`), when the refusal is a broken rule.
        rule: Option<&'static str>,
        /// The package needs a newer Open Conduit (an unknown field).
        needs_newer: bool,
    },
    /// The directory has no `open-conduit-extension.json`.
    NoManifest,
    /// A bundled package not offered because an installed package of the same
    /// name replaces it.
    ShadowedBundled {
        /// The installed package that replaces it is itself refused, so
        /// neither is offered.
        installed_refused: bool,
    },
    /// A root or a directory entry could not be read.
    Unreadable {
        /// The error, as text.
        error: String,
    },
}

/// One directory discovery did not offer, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The directory's name (the package name it stands for), lossily
    /// converted when it is not UTF-8.
    pub name: String,
    /// The directory.
    pub dir: PathBuf,
    /// Under which root it was found.
    pub origin: Origin,
    /// Why it is not offered.
    pub kind: ReportKind,
    /// A sentence for the operator.
    pub message: String,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What discovery found.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// The packages offered, sorted by name.
    pub packages: Vec<Package>,
    /// The directories not offered, sorted by name, installed before bundled.
    pub reports: Vec<Report>,
}

impl Discovery {
    /// The package named `name`, if it is offered.
    pub fn package(&self, name: &str) -> Option<&Package> {
        self.packages.iter().find(|p| p.name == name)
    }

    /// The reports about directories named `name`.
    pub fn reports_for<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Report> + 'a {
        self.reports.iter().filter(move |r| r.name == name)
    }
}

/// Discovers the packages under `installed_root`, then under `bundled_root`.
/// See the module documentation.
pub fn discover(installed_root: &Path, bundled_root: Option<&Path>) -> Discovery {
    let mut out = Discovery::default();

    // Names of the installed directories, offered or refused: each replaces a
    // bundled package of the same name. The value says whether it was refused.
    let mut installed: BTreeMap<String, bool> = BTreeMap::new();
    for (name, dir) in package_dirs(installed_root, Origin::Installed, &mut out.reports) {
        let offered = load_one(&name, &dir, Origin::Installed, &mut out);
        installed.insert(name, !offered);
    }

    if let Some(root) = bundled_root {
        for (name, dir) in package_dirs(root, Origin::Bundled, &mut out.reports) {
            if let Some(&installed_refused) = installed.get(&name) {
                let message = if installed_refused {
                    format!(
                        "bundled extension `{name}` ({}) is not offered: an installed package of \
                         the same name replaces it, and that installed package is refused \
                         (remove it to bring the bundled one back)",
                        dir.display()
                    )
                } else {
                    format!(
                        "bundled extension `{name}` ({}) is replaced by the installed package of \
                         the same name",
                        dir.display()
                    )
                };
                if installed_refused {
                    tracing::warn!(extension = %name, dir = %dir.display(), "{message}");
                } else {
                    tracing::info!(extension = %name, dir = %dir.display(), "{message}");
                }
                out.reports.push(Report {
                    name,
                    dir,
                    origin: Origin::Bundled,
                    kind: ReportKind::ShadowedBundled { installed_refused },
                    message,
                });
                continue;
            }
            load_one(&name, &dir, Origin::Bundled, &mut out);
        }
    }

    out.packages
        .sort_by(|a, b| (&a.name, a.origin, &a.dir).cmp(&(&b.name, b.origin, &b.dir)));
    out.reports
        .sort_by(|a, b| (&a.name, a.origin, &a.dir).cmp(&(&b.name, b.origin, &b.dir)));
    out
}

/// The package directories under `root`, sorted by name. A missing root is
/// none; an unreadable one is reported. Entries that are not directories
/// (following links) and hidden entries (`.name`, such as an installer's
/// staging directory) are skipped.
fn package_dirs(root: &Path, origin: Origin, reports: &mut Vec<Report>) -> Vec<(String, PathBuf)> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(root = %root.display(), %origin, "no extensions root");
            return Vec::new();
        }
        Err(err) => {
            report_unreadable(root, origin, &err, reports);
            return Vec::new();
        }
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                report_unreadable(root, origin, &err, reports);
                continue;
            }
        };
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            tracing::debug!(dir = %path.display(), "skipping a hidden entry");
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => dirs.push((name, path)),
            Ok(_) => tracing::debug!(path = %path.display(), "skipping a non-directory entry"),
            Err(err) => report_unreadable(&path, origin, &err, reports),
        }
    }
    dirs.sort();
    dirs
}

fn report_unreadable(path: &Path, origin: Origin, err: &io::Error, reports: &mut Vec<Report>) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let message = format!("{origin} extensions: reading {}: {err}", path.display());
    tracing::warn!(path = %path.display(), %origin, "{message}");
    reports.push(Report {
        name,
        dir: path.to_path_buf(),
        origin,
        kind: ReportKind::Unreadable {
            error: err.to_string(),
        },
        message,
    });
}

/// Loads one package directory into `out`: offered as a package (true) or
/// reported (false).
fn load_one(name: &str, dir: &Path, origin: Origin, out: &mut Discovery) -> bool {
    match load_package(dir) {
        Ok((manifest, manifest_json)) => {
            tracing::debug!(extension = %manifest.name, dir = %dir.display(), %origin, "discovered");
            out.packages.push(Package {
                name: manifest.name.clone(),
                dir: dir.to_path_buf(),
                origin,
                manifest,
                manifest_json,
            });
            true
        }
        Err(kind) => {
            let message = match &kind {
                ReportKind::NoManifest => format!(
                    "{origin} extension directory `{name}` ({}) has no {MANIFEST_FILE}; skipped",
                    dir.display()
                ),
                ReportKind::Invalid { error, .. } => format!(
                    "{origin} extension `{name}` ({}) is refused: {error}",
                    dir.display()
                ),
                ReportKind::Unreadable { error } => format!(
                    "{origin} extension `{name}` ({}) is unreadable: {error}",
                    dir.display()
                ),
                ReportKind::ShadowedBundled { .. } => format!(
                    "{origin} extension `{name}` ({}) is shadowed",
                    dir.display()
                ),
            };
            tracing::warn!(extension = %name, dir = %dir.display(), %origin, "{message}");
            out.reports.push(Report {
                name: name.to_string(),
                dir: dir.to_path_buf(),
                origin,
                kind,
                message,
            });
            false
        }
    }
}

/// The validated manifest of `dir` and its file as JSON.
fn load_package(dir: &Path) -> Result<(Manifest, serde_json::Value), ReportKind> {
    let file = dir.join(MANIFEST_FILE);
    match std::fs::symlink_metadata(&file) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(ReportKind::NoManifest),
        _ => {}
    }
    let manifest = load_manifest(dir).map_err(|err| invalid_kind(&err))?;
    // Read the file again for its JSON, and make sure it is still the file
    // that was validated (it may be replaced while we read it).
    let bytes = std::fs::read(&file).map_err(|err| ReportKind::Invalid {
        error: format!("reading {}: {err}", file.display()),
        rule: None,
        needs_newer: false,
    })?;
    let changed = || ReportKind::Invalid {
        error: format!("{} changed while it was read", file.display()),
        rule: Some("manifest_changed"),
        needs_newer: false,
    };
    let again = parse_manifest(&bytes).map_err(|_| changed())?;
    if again != manifest {
        return Err(changed());
    }
    let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| changed())?;
    Ok((manifest, json))
}

fn invalid_kind(err: &ManifestError) -> ReportKind {
    ReportKind::Invalid {
        error: err.to_string(),
        rule: err.rule(),
        needs_newer: err.needs_newer(),
    }
}
