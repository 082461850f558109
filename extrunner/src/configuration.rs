//! What one extension is configured with, and what it registered.
//!
//! A [`Configuration`] belongs to one package for the life of extrunner: the runner
//! fills it from the stored configuration generation ([`Configuration::set`]), every
//! `configure` (at each start, and again on every config apply without a restart) sends
//! its params, and the answer, once checked against the manifest
//! ([`check_registration`]), becomes the package's [`Registered`] sources and webhook
//! paths. The scoped host reads the secret references of the connections bound to the
//! package from it, and ingress accepts deliveries only for the sources registered by
//! the last configure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use protocol::manifest::Manifest;
use protocol::wire::{ConfigureParams, ConfigureResult, SourceDecl, WebhookPath};
use tokio::sync::watch;

/// Paths no extension may register: ingressd's own.
pub const RESERVED_PATHS: &[&str] = &["/healthz", "/metrics"];
/// The longest webhook path.
pub const MAX_PATH_BYTES: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sources and webhook paths the last successful `configure` registered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registered {
    /// The configuration generation configure carried.
    pub generation: String,
    /// The ingress sources.
    pub sources: Vec<SourceDecl>,
    /// The webhook paths.
    pub webhooks: Vec<WebhookPath>,
    /// Bumped on every registration, so a watcher sees each one.
    pub serial: u64,
    /// The last configuration generation the package refused, and why; cleared by
    /// the next one it takes.
    pub refusal: Option<ConfigRefusal>,
}

/// A configuration generation a package refused (as `ext.registrations` shows it).
pub use busapi::ext::ConfigRefusal;

impl Registered {
    /// The registered source named `name`.
    pub fn source(&self, name: &str) -> Option<&SourceDecl> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// One package's configuration and registrations.
#[derive(Debug)]
pub struct Configuration {
    manifest: Option<Manifest>,
    params: Mutex<ConfigureParams>,
    /// The tunnel's public URL, which wins over the configuration's `public_url`.
    tunnel_url: Mutex<Option<String>>,
    secret_refs: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// The configuration document in force (for `scope.authorize`).
    document: Mutex<Option<std::sync::Arc<protocol::config::Config>>>,
    registered: watch::Sender<Registered>,
}

impl Default for Configuration {
    fn default() -> Configuration {
        Configuration::new(None)
    }
}

impl Configuration {
    /// An empty configuration; with a manifest, configure's answers are checked
    /// against it.
    pub fn new(manifest: Option<Manifest>) -> Configuration {
        Configuration {
            manifest,
            params: Mutex::new(ConfigureParams::default()),
            tunnel_url: Mutex::new(None),
            secret_refs: Mutex::new(BTreeMap::new()),
            document: Mutex::new(None),
            registered: watch::channel(Registered::default()).0,
        }
    }

    /// Replace what the next configure sends, and the secret references of the
    /// connections bound to the package (by connection, then secret name).
    pub fn set(&self, params: ConfigureParams, refs: BTreeMap<String, BTreeMap<String, String>>) {
        *lock(&self.params) = params;
        *lock(&self.secret_refs) = refs;
    }

    /// Keep the configuration document in force.
    pub fn set_document(&self, doc: std::sync::Arc<protocol::config::Config>) {
        *lock(&self.document) = Some(doc);
    }

    /// The configuration document in force (`state.scopes` reads its scopes' routes
    /// and bindings); `None` until one is applied.
    pub fn document(&self) -> Option<std::sync::Arc<protocol::config::Config>> {
        lock(&self.document).clone()
    }

    /// Whether Work of scope `from` may `access` scope `to`, by the document in force.
    pub fn authorizes(
        &self,
        from: &str,
        to: &str,
        access: protocol::config::Access,
    ) -> Result<(), String> {
        match &*lock(&self.document) {
            Some(doc) => doc.authorizes(from, to, access),
            None => Err("no configuration is applied".into()),
        }
    }

    /// What configure sends now (its `kv` is the caller's): the tunnel's public URL,
    /// when one is published, in place of the configuration's.
    pub fn params(&self) -> ConfigureParams {
        let mut params = lock(&self.params).clone();
        if let Some(url) = lock(&self.tunnel_url).as_ref() {
            params.public_url = url.clone();
        }
        params
    }

    /// The tunnel's public URL (`None`: the configuration's `public_url` is sent).
    pub fn set_tunnel_url(&self, url: Option<String>) {
        *lock(&self.tunnel_url) = url;
    }

    /// The reference of secret `name` of connection `connection`.
    pub fn secret_ref(&self, connection: &str, name: &str) -> Option<String> {
        lock(&self.secret_refs)
            .get(connection)
            .and_then(|m| m.get(name))
            .cloned()
    }

    /// Check configure's answer and make it the registration. An answer that breaks
    /// a rule changes nothing and is returned as the reason.
    pub fn register(&self, generation: &str, result: &ConfigureResult) -> Result<(), String> {
        if let Some(m) = &self.manifest {
            check_registration(m, result)?;
        }
        self.registered.send_modify(|r| {
            r.generation = generation.to_owned();
            r.sources = result.sources.clone();
            r.webhooks = result.webhooks.clone();
            r.serial += 1;
            r.refusal = None;
        });
        Ok(())
    }

    /// The package refused `generation` (its earlier registration stays).
    pub fn refuse(&self, generation: &str, error: &str) {
        self.registered.send_modify(|r| {
            r.serial += 1;
            r.refusal = Some(ConfigRefusal {
                generation: generation.to_owned(),
                error: error.to_owned(),
            });
        });
    }

    /// The registration now.
    pub fn registered(&self) -> Registered {
        self.registered.borrow().clone()
    }

    /// Follow the registrations.
    pub fn subscribe(&self) -> watch::Receiver<Registered> {
        self.registered.subscribe()
    }
}

fn under(name: &str, s: &str, sep: char) -> bool {
    s == name
        || s.strip_prefix(name)
            .and_then(|r| r.strip_prefix(sep))
            .is_some_and(|r| !r.is_empty())
}

/// Is `path` a webhook path an extension may register: absolute, at most
/// [`MAX_PATH_BYTES`], of plain segments (no `.`/`..`, no empty segment, no query or
/// fragment, no control characters), not one of ingressd's own ([`RESERVED_PATHS`]).
pub fn check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("webhook path {path:?} does not start with /"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "webhook path {path:?} is {} bytes, over {MAX_PATH_BYTES}",
            path.len()
        ));
    }
    if path.len() > 1 {
        for seg in path[1..].trim_end_matches('/').split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(format!(
                    "webhook path {path:?} has an empty, . or .. segment"
                ));
            }
        }
    }
    if path
        .chars()
        .any(|c| c.is_control() || c == '?' || c == '#' || c == ' ' || c == '%')
    {
        return Err(format!(
            "webhook path {path:?} has a character a path cannot carry (?, #, %, space or control)"
        ));
    }
    let trimmed = path.trim_end_matches('/');
    if RESERVED_PATHS
        .iter()
        .any(|r| trimmed == *r || trimmed.starts_with(&format!("{r}/")))
        || trimmed.is_empty()
    {
        return Err(format!("webhook path {path:?} is reserved for ingressd"));
    }
    Ok(())
}

/// The spec's rule for configure's answer: every source is named `<name>` or
/// `<name>/…`, of an ingress type the manifest declares, its families declared by that
/// type; every webhook path is a valid path that names a registered source, and no two
/// sources or paths repeat. (Webhook paths are not confined to `/<name>/…`: the operator
/// chooses them in the entry's config; see docs/decisions.md.)
pub fn check_registration(m: &Manifest, r: &ConfigureResult) -> Result<(), String> {
    let name = m.name.as_str();
    let mut sources = BTreeSet::new();
    for s in &r.sources {
        if !under(name, &s.name, '/') {
            return Err(format!(
                "source {:?} is not in {name:?}'s namespace ({name} or {name}/…)",
                s.name
            ));
        }
        if !sources.insert(s.name.as_str()) {
            return Err(format!("source {:?} is registered twice", s.name));
        }
        let Some(t) = m
            .provides
            .extensions
            .iter()
            .find(|t| t.type_name == s.source_type && t.ingress)
        else {
            return Err(format!(
                "source {:?} is of type {:?}, which the manifest does not declare as an ingress type",
                s.name, s.source_type
            ));
        };
        for f in &s.families {
            if !t.families.contains(f) {
                return Err(format!(
                    "source {:?} names family {f:?}, which type {:?} does not declare",
                    s.name, t.type_name
                ));
            }
        }
    }
    let mut paths = BTreeSet::new();
    for w in &r.webhooks {
        check_path(&w.path)?;
        if !paths.insert(w.path.trim_end_matches('/')) {
            return Err(format!("webhook path {:?} is registered twice", w.path));
        }
        if !sources.contains(w.source.as_str()) {
            return Err(format!(
                "webhook path {:?} feeds source {:?}, which this configure does not register",
                w.path, w.source
            ));
        }
        let webhooks = r
            .sources
            .iter()
            .find(|s| s.name == w.source)
            .and_then(|s| {
                m.provides
                    .extensions
                    .iter()
                    .find(|t| t.type_name == s.source_type)
            })
            .is_some_and(|t| t.webhooks);
        if !webhooks {
            return Err(format!(
                "webhook path {:?}: the source's type does not declare webhooks",
                w.path
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn manifest() -> Manifest {
        protocol::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"hook","version":"1","command":["x"],
            "provides":{"families":[{"name":"hook.delivery","re_derivable":false,"loss":"gone"}],
            "extensions":[{"type":"hook","ingress":true,"webhooks":true,"families":["hook.delivery"]}]}}"#,
        )
        .unwrap()
    }

    fn result(source: &str, path: &str) -> ConfigureResult {
        ConfigureResult {
            sources: vec![SourceDecl {
                name: source.into(),
                source_type: "hook".into(),
                scope_id: "s".into(),
                entry: "e".into(),
                families: vec!["hook.delivery".into()],
                reconcile_interval_s: 0,
            }],
            webhooks: vec![WebhookPath {
                path: path.into(),
                source: source.into(),
                scope_id: "s".into(),
                entry: "e".into(),
            }],
        }
    }

    #[test]
    fn registrations_stay_in_the_namespace() {
        let m = manifest();
        check_registration(&m, &result("hook/s/e", "/hooks/demo")).unwrap();
        let e = check_registration(&m, &result("other/s", "/x")).unwrap_err();
        assert!(e.contains("namespace"), "{e}");
        let e = check_registration(&m, &result("hook/s", "/metrics")).unwrap_err();
        assert!(e.contains("reserved"), "{e}");
        let e = check_registration(&m, &result("hook/s", "/a/../b")).unwrap_err();
        assert!(e.contains(".."), "{e}");
        let mut r = result("hook/s", "/a");
        r.webhooks[0].source = "hook/t".into();
        assert!(check_registration(&m, &r).is_err());
    }

    #[test]
    fn a_registration_is_seen_by_watchers() {
        let c = Configuration::new(Some(manifest()));
        let mut rx = c.subscribe();
        c.register("g", &result("hook/s", "/a")).unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().webhooks[0].path, "/a");
        assert!(c.register("g", &result("nope", "/a")).is_err());
        assert!(!rx.has_changed().unwrap());
    }
}
