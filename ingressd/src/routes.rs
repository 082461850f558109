//! Webhook paths and the extensions that own them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Webhook paths and their owning extensions. A path covers the paths beneath it
/// (`/hooks/github` covers `/hooks/github/x`, not `/hooks/githubx`); the longest
/// registered path wins. Replaceable at runtime, as extensions register paths in `configure`.
///
/// Until the routes are known to be complete ([`Routes::set_complete`]), a path that
/// matches none is answered 503 rather than 404: a webhook arriving while ingressd or
/// extrunner starts is told to come back, not that its path does not exist.
#[derive(Debug)]
pub struct Routes {
    table: RwLock<Arc<HashMap<String, (String, String)>>>,
    complete: AtomicBool,
}

impl Default for Routes {
    fn default() -> Routes {
        Routes {
            table: RwLock::default(),
            complete: AtomicBool::new(true),
        }
    }
}

/// A request path's route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteMatch {
    /// The registered path that matched.
    pub route: String,
    /// The extension that owns it.
    pub owner: String,
    /// The ingress source its deliveries feed (empty when not known).
    pub source: String,
}

/// `/a/b/` and `/a/b` are one path; `/` stays `/`; a path without a leading `/` gets one.
fn normalize(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.starts_with('/') {
        trimmed.to_owned()
    } else {
        format!("/{trimmed}")
    }
}

impl Routes {
    /// No webhook paths.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// No webhook paths yet, and not known to be complete.
    pub fn pending() -> Routes {
        let r = Routes::default();
        r.set_complete(false);
        r
    }

    /// Whether the table is known to hold every registered path.
    pub fn is_complete(&self) -> bool {
        self.complete.load(Ordering::SeqCst)
    }

    /// Say whether the table holds every registered path.
    pub fn set_complete(&self, complete: bool) {
        self.complete.store(complete, Ordering::SeqCst);
    }

    /// Routes from `(path, owner)` pairs.
    pub fn from_pairs<P: Into<String>, O: Into<String>>(
        pairs: impl IntoIterator<Item = (P, O)>,
    ) -> Routes {
        let routes = Routes::new();
        routes.replace(pairs);
        routes
    }

    fn snapshot(&self) -> Arc<HashMap<String, (String, String)>> {
        match self.table.read() {
            Ok(t) => Arc::clone(&t),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    fn store(&self, table: HashMap<String, (String, String)>) {
        let table = Arc::new(table);
        match self.table.write() {
            Ok(mut t) => *t = table,
            Err(poisoned) => *poisoned.into_inner() = table,
        }
    }

    /// Replaces every route with `pairs` (a later pair for the same path wins).
    pub fn replace<P: Into<String>, O: Into<String>>(
        &self,
        pairs: impl IntoIterator<Item = (P, O)>,
    ) {
        let table = pairs
            .into_iter()
            .map(|(p, o)| (normalize(&p.into()), (o.into(), String::new())))
            .collect();
        self.store(table);
    }

    /// Replaces every route with `(path, owner, source)` triples.
    pub fn replace_with_sources(&self, routes: impl IntoIterator<Item = (String, String, String)>) {
        let table = routes
            .into_iter()
            .map(|(p, o, s)| (normalize(&p), (o, s)))
            .collect();
        self.store(table);
    }

    /// Adds or replaces one route.
    pub fn insert(&self, path: &str, owner: &str) {
        let mut table = (*self.snapshot()).clone();
        table.insert(normalize(path), (owner.to_owned(), String::new()));
        self.store(table);
    }

    /// Removes one route; whether it was there.
    pub fn remove(&self, path: &str) -> bool {
        let mut table = (*self.snapshot()).clone();
        let was = table.remove(&normalize(path)).is_some();
        self.store(table);
        was
    }

    /// Every route, sorted by path.
    pub fn list(&self) -> Vec<(String, String)> {
        let mut all: Vec<_> = self
            .snapshot()
            .iter()
            .map(|(p, (o, _))| (p.clone(), o.clone()))
            .collect();
        all.sort();
        all
    }

    /// The route of a request path: the longest registered path that is `path` or
    /// one of its ancestors.
    pub fn lookup(&self, path: &str) -> Option<RouteMatch> {
        let table = self.snapshot();
        if table.is_empty() {
            return None;
        }
        let mut candidate = normalize(path);
        loop {
            if let Some((owner, source)) = table.get(&candidate) {
                return Some(RouteMatch {
                    route: candidate,
                    owner: owner.clone(),
                    source: source.clone(),
                });
            }
            if candidate == "/" {
                return None;
            }
            match candidate.rfind('/') {
                Some(0) => candidate.truncate(1),
                Some(i) => candidate.truncate(i),
                None => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_on_segment_boundaries() {
        let r = Routes::from_pairs([("/hooks/github", "github"), ("/hooks/github/app", "app")]);
        let owner = |p: &str| r.lookup(p).map(|m| m.owner);
        assert_eq!(owner("/hooks/github").as_deref(), Some("github"));
        assert_eq!(owner("/hooks/github/").as_deref(), Some("github"));
        assert_eq!(owner("/hooks/github/x").as_deref(), Some("github"));
        assert_eq!(owner("/hooks/github/app/1").as_deref(), Some("app"));
        assert_eq!(owner("/hooks/githubx"), None);
        assert_eq!(owner("/hooks"), None);
        assert_eq!(owner("/"), None);
        r.insert("/", "root");
        assert_eq!(owner("/other").as_deref(), Some("root"));
        assert!(r.remove("/"));
        assert_eq!(owner("/other"), None);
    }
}
