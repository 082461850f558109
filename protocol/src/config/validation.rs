//! Reading and checking a document: [`Config::parse`], the fields this release does not
//! know ([`Config::unknown_fields`]) and the structural problems ([`Config::problems`]:
//! names, uniqueness, references).

use std::collections::BTreeSet;

use serde_json::Value;

use super::scopes::{
    allowed_unconfined, binding_connections, ALLOW_UNCONFINED_CREATE_WORK, BINDING_CONNECTIONS,
};
use super::secrets::check_secret_ref;
use super::settings::check_public_url;
use super::{is_name, seg, Config, Problem};

impl Config {
    /// Parse and check a document. Every problem is reported, each with its pointer.
    pub fn parse(doc: &Value) -> Result<Config, Vec<Problem>> {
        let config: Config = match serde_json::from_value(doc.clone()) {
            Ok(c) => c,
            Err(e) => {
                return Err(vec![Problem {
                    pointer: String::new(),
                    message: format!("not a configuration document: {e}"),
                }])
            }
        };
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems)
        }
    }

    /// The fields of `doc` this release does not know, each with its pointer: a
    /// misspelt field is otherwise ignored without a word. (Extension configs, under
    /// each object's `config`, are their extensions' to check.)
    pub fn unknown_fields(doc: &Value) -> Vec<Problem> {
        const TOP: &[&str] = &["settings", "connections", "scopes"];
        const SETTINGS: &[&str] = &[
            "concurrency",
            "job_concurrency",
            "webhooks",
            "extensions",
            "storage",
        ];
        const WEBHOOKS: &[&str] = &["public_url", "tunnel"];
        const CONNECTION: &[&str] = &["name", "type", "config", "secret_refs"];
        const SCOPE: &[&str] = &[
            "id",
            "enabled",
            "entries",
            "routes",
            "bindings",
            "unmatched",
            "authorization",
            "admission",
        ];
        const ENTRY: &[&str] = &["type", "name", "connection", "config"];
        const ROUTE: &[&str] = &["handler", "binding", "config"];
        const BINDING: &[&str] = &[
            "name",
            "executor",
            "toolbelt",
            "operations",
            "grants",
            "connection",
            BINDING_CONNECTIONS,
            "resource",
            "sandbox",
            "container",
            "config",
            ALLOW_UNCONFINED_CREATE_WORK,
        ];
        let mut out = Vec::new();
        let mut check = |v: &Value, at: &str, known: &[&str]| {
            for key in v.as_object().into_iter().flat_map(|o| o.keys()) {
                if !known.contains(&key.as_str()) {
                    out.push(Problem {
                        pointer: format!("{at}/{}", seg(key)),
                        message: format!("unknown field {key:?} (ignored)"),
                    });
                }
            }
        };
        let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
        check(doc, "", TOP);
        check(&doc["settings"], "/settings", SETTINGS);
        check(&doc["settings"]["webhooks"], "/settings/webhooks", WEBHOOKS);
        check(
            &doc["settings"]["storage"],
            "/settings/storage",
            &["backend", "url_ref"],
        );
        check(
            &doc["settings"]["webhooks"]["tunnel"],
            "/settings/webhooks/tunnel",
            &["provider", "config"],
        );
        for (i, c) in items(&doc["connections"]).iter().enumerate() {
            check(c, &format!("/connections/{i}"), CONNECTION);
        }
        for (i, s) in items(&doc["scopes"]).iter().enumerate() {
            let at = format!("/scopes/{i}");
            check(s, &at, SCOPE);
            for (j, e) in items(&s["entries"]).iter().enumerate() {
                check(e, &format!("{at}/entries/{j}"), ENTRY);
            }
            for (j, r) in items(&s["routes"]).iter().enumerate() {
                check(r, &format!("{at}/routes/{j}"), ROUTE);
            }
            for (j, b) in items(&s["bindings"]).iter().enumerate() {
                check(b, &format!("{at}/bindings/{j}"), BINDING);
            }
        }
        out
    }

    /// The document's structural problems (names, uniqueness, references).
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut problem = |pointer: String, message: String| out.push(Problem { pointer, message });
        let w = &self.settings.webhooks;
        if !w.public_url.is_empty() {
            if let Err(e) = check_public_url(&w.public_url) {
                problem("/settings/webhooks/public_url".into(), e);
            }
        }
        if let Some(st) = &self.settings.storage {
            for (field, message) in st.problems() {
                problem(format!("/settings/storage/{field}"), message);
            }
        }
        if let Some(t) = &w.tunnel {
            if !is_name(&t.provider) {
                problem(
                    "/settings/webhooks/tunnel/provider".into(),
                    format!(
                        "{:?} is not a tunnel type (a package's provides.tunnels[].type)",
                        t.provider
                    ),
                );
            }
            if !(t.config.is_null() || t.config.is_object()) {
                problem(
                    "/settings/webhooks/tunnel/config".into(),
                    "a tunnel config is an object".into(),
                );
            }
        }
        let mut connections = BTreeSet::new();
        for (i, c) in self.connections.iter().enumerate() {
            let at = format!("/connections/{i}");
            if !is_name(&c.name) {
                problem(
                    format!("{at}/name"),
                    format!(
                        "{:?} is not a name (letters, digits, -, _, ., at most 128 bytes)",
                        c.name
                    ),
                );
            } else if !connections.insert(c.name.as_str()) {
                problem(
                    format!("{at}/name"),
                    format!("connection {:?} is defined twice", c.name),
                );
            }
            if c.connection_type.is_empty() {
                problem(format!("{at}/type"), "a connection needs a type".into());
            }
            for (name, r) in &c.secret_refs {
                if let Err(e) = check_secret_ref(r) {
                    problem(format!("{at}/secret_refs/{}", seg(name)), e);
                }
            }
        }
        let mut scopes = BTreeSet::new();
        for (i, s) in self.scopes.iter().enumerate() {
            let at = format!("/scopes/{i}");
            if !is_name(&s.id) {
                problem(format!("{at}/id"), format!("{:?} is not a scope ID", s.id));
            } else if !scopes.insert(s.id.as_str()) {
                problem(
                    format!("{at}/id"),
                    format!("scope {:?} is defined twice", s.id),
                );
            }
            let mut entries = BTreeSet::new();
            for (j, e) in s.entries.iter().enumerate() {
                let at = format!("{at}/entries/{j}");
                if e.entry_type.is_empty() {
                    problem(format!("{at}/type"), "an entry needs a type".into());
                }
                if !is_name(&e.name) {
                    problem(
                        format!("{at}/name"),
                        format!("{:?} is not an entry name", e.name),
                    );
                } else if !entries.insert(e.name.as_str()) {
                    problem(
                        format!("{at}/name"),
                        format!("entry {:?} is defined twice in scope {:?}", e.name, s.id),
                    );
                }
                if !e.connection.is_empty() && !connections.contains(e.connection.as_str()) {
                    problem(
                        format!("{at}/connection"),
                        format!("no connection is named {:?}", e.connection),
                    );
                }
            }
            if s.admission.max_agent_turns == Some(0) {
                problem(
                    format!("{at}/admission/max_agent_turns"),
                    "max_agent_turns must be at least 1 (leave it out for no limit)".into(),
                );
            }
            let ids: BTreeSet<&str> = self.scopes.iter().map(|x| x.id.as_str()).collect();
            for (field, list) in [
                ("read_scopes", &s.authorization.read_scopes),
                ("file_scopes", &s.authorization.file_scopes),
            ] {
                for (k, other) in list.iter().enumerate() {
                    let at = format!("{at}/authorization/{field}/{k}");
                    if other == &s.id {
                        problem(
                            at,
                            format!("scope {other:?} needs no authority over itself"),
                        );
                    } else if !ids.contains(other.as_str()) {
                        problem(at, format!("no scope is named {other:?}"));
                    }
                }
            }
            let mut bindings = BTreeSet::new();
            let names: BTreeSet<&str> = s
                .bindings
                .iter()
                .filter_map(|b| b.get("name").and_then(Value::as_str))
                .collect();
            for (j, b) in s.bindings.iter().enumerate() {
                let at = format!("{at}/bindings/{j}");
                match allowed_unconfined(b) {
                    Ok(allowed) => {
                        for (k, name) in allowed.iter().enumerate() {
                            if !names.contains(name.as_str()) {
                                problem(
                                    format!("{at}/{ALLOW_UNCONFINED_CREATE_WORK}/{k}"),
                                    format!("scope {:?} has no binding {name:?}", s.id),
                                );
                            }
                        }
                    }
                    Err(e) => problem(format!("{at}/{ALLOW_UNCONFINED_CREATE_WORK}"), e),
                }
                let Some(b) = b.as_object() else {
                    problem(at, "a binding is an object".into());
                    continue;
                };
                match b.get("name").and_then(Value::as_str) {
                    Some(name) if is_name(name) => {
                        if !bindings.insert(name) {
                            problem(
                                format!("{at}/name"),
                                format!("binding {name:?} is defined twice in scope {:?}", s.id),
                            );
                        }
                    }
                    _ => problem(format!("{at}/name"), "a binding needs a name".into()),
                }
                if b.get("executor")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    problem(
                        format!("{at}/executor"),
                        "a binding needs an executor".into(),
                    );
                }
                let own = b.get("connection").and_then(Value::as_str).unwrap_or("");
                match binding_connections(&Value::Object(b.clone())) {
                    Ok(more) => {
                        let mut seen = BTreeSet::new();
                        for (k, name) in more.iter().enumerate() {
                            let at = format!("{at}/{BINDING_CONNECTIONS}/{k}");
                            if !connections.contains(name.as_str()) {
                                problem(at, format!("no connection is named {name:?}"));
                            } else if name == own {
                                problem(
                                    at,
                                    format!("{name:?} is already the binding's connection"),
                                );
                            } else if !seen.insert(name.as_str()) {
                                problem(at, format!("connection {name:?} is named twice"));
                            }
                        }
                    }
                    Err(e) => problem(format!("{at}/{BINDING_CONNECTIONS}"), e),
                }
            }
            for (j, r) in s.routes.iter().enumerate() {
                if r.handler.is_empty() {
                    problem(
                        format!("{at}/routes/{j}/handler"),
                        "a route needs a handler".into(),
                    );
                }
                if !r.binding.is_empty() && !bindings.contains(r.binding.as_str()) {
                    problem(
                        format!("{at}/routes/{j}/binding"),
                        format!("scope {:?} has no binding {:?}", s.id, r.binding),
                    );
                }
            }
        }
        out
    }
}
