//! The configuration document (`/etc/open-conduit/config.json`): settings, connections,
//! scopes with their entries, routes and bindings.
//!
//! [`Config::parse`] reads and checks the document, reporting every problem with its JSON
//! pointer. [`Config::for_extension`] is what one extension is configured with: its entries
//! (those of the types its manifest declares) in enabled scopes, the connections those
//! entries name (secret *names* only), the public URL, its entries in disabled scopes, and
//! the scopes and connections its identity is bound to. [`resolve_secret_ref`] reads one
//! secret reference (`env:NAME` or `file:/path`); the values never enter the document.
//!
//! Unknown top-level and object fields are kept (`extra`) rather than refused, so a newer
//! document still configures the daemons that understand part of it; `config check` (the
//! CLI) reports them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod extension;
mod scopes;
mod secrets;
mod settings;
mod validation;
pub use extension::*;
pub use scopes::*;
pub use secrets::*;
pub use settings::*;

/// The whole document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Suite-wide settings.
    #[serde(default)]
    pub settings: Settings,
    /// Connections: a service account's config and secret references.
    #[serde(default)]
    pub connections: Vec<ConnectionConfig>,
    /// The scopes.
    #[serde(default)]
    pub scopes: Vec<ScopeConfig>,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One problem in a document, at a JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Where (RFC 6901).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Escape one JSON pointer segment.
fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::manifest::Manifest;
    use serde_json::json;

    #[test]
    fn a_scope_reads_or_files_in_another_only_as_its_authorization_says() {
        let doc = json!({"scopes": [
            {"id": "a", "authorization": {"read_scopes": ["b"], "file_scopes": ["c"]}},
            {"id": "b"}, {"id": "c"}, {"id": "d"}
        ]});
        let config = Config::parse(&doc).unwrap();
        assert!(config.authorizes("a", "b", Access::Read).is_ok());
        let why = config.authorizes("a", "b", Access::File).unwrap_err();
        assert!(why.contains("authorization.file_scopes"), "{why}");
        assert!(config.authorizes("a", "c", Access::File).is_ok());
        assert!(
            config.authorizes("a", "c", Access::Read).is_ok(),
            "filing implies reading"
        );
        assert!(config.authorizes("a", "d", Access::Read).is_err());
        assert!(
            config.authorizes("b", "a", Access::Read).is_err(),
            "not symmetric"
        );
        assert!(config.authorizes("a", "a", Access::File).is_ok());
        // Unknown and self-naming scopes are refused with their pointers.
        let bad = json!({"scopes": [
            {"id": "a", "authorization": {"read_scopes": ["nope"], "file_scopes": ["a"]}}
        ]});
        let problems = Config::parse(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert!(
            pointers.contains(&"/scopes/0/authorization/read_scopes/0"),
            "{problems:?}"
        );
        assert!(
            pointers.contains(&"/scopes/0/authorization/file_scopes/0"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_scopes_admission_bounds_its_agent_turns_from_one() {
        let doc =
            json!({"scopes": [{"id": "a", "admission": {"max_agent_turns": 2}}, {"id": "b"}]});
        let config = Config::parse(&doc).unwrap();
        assert_eq!(config.scopes[0].admission.max_agent_turns, Some(2));
        assert!(config.scopes[1].admission.is_empty());
        assert!(Config::unknown_fields(&doc).is_empty());
        let zero = json!({"scopes": [{"id": "a", "admission": {"max_agent_turns": 0}}]});
        let problems = Config::parse(&zero).unwrap_err();
        assert_eq!(problems[0].pointer, "/scopes/0/admission/max_agent_turns");
        assert!(problems[0].message.contains("at least 1"), "{problems:?}");
        let typo = json!({"scopes": [{"id": "a", "admission": {"max_agent_turn": 2}}]});
        assert!(Config::parse(&typo).is_err());
    }

    #[test]
    fn a_check_sees_the_scopes_that_use_its_package() {
        let git = crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"git","version":"1","command":["x"],
                "provides":{"resources":[{"type":"git","modes":["work"]}]}}"#,
        )
        .unwrap();
        let doc = json!({"scopes": [
            {"id": "a", "bindings": [
                {"name": "agent", "executor": "claude-code", "config": {"model": "opus"},
                 "resource": {"type": "git", "config": {"repository": "/r"}}},
                {"name": "plain", "executor": "shell", "config": {"script": "true"}}]},
            {"id": "b", "bindings": [{"name": "other", "executor": "shell"}]},
            {"id": "c", "enabled": false, "bindings": [
                {"name": "off", "executor": "shell", "resource": {"type": "git"}}]}
        ]});
        let config = Config::parse(&doc).unwrap();
        let view = config.check_view(&git, "/etc/open-conduit");
        assert_eq!(view.dir, "/etc/open-conduit");
        assert_eq!(view.scopes.len(), 1, "{view:?}");
        let b = &view.scopes[0].bindings;
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].name, "agent");
        assert_eq!(b[0].resource.as_ref().unwrap().config["repository"], "/r");
        // Another package's executor config is not the provider's to see.
        assert!(b[0].config.is_null());
        // A sandbox provider sees the bindings on its sandbox type.
        let srt = crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"srt","version":"1","command":["x"],
                "provides":{"sandboxes":[{"type":"srt"}]}}"#,
        )
        .unwrap();
        let doc = json!({"scopes": [{"id": "a", "bindings": [
            {"name": "boxed", "executor": "shell", "sandbox": {"type": "srt", "config": {"srt": "/s"}}},
            {"name": "plain", "executor": "shell"}]}]});
        let view = Config::parse(&doc).unwrap().check_view(&srt, "");
        let b = &view.scopes[0].bindings;
        assert_eq!(b.len(), 1, "{view:?}");
        assert_eq!(b[0].sandbox.as_ref().unwrap()["config"]["srt"], "/s");
    }

    #[test]
    fn an_unconfined_create_work_grant_names_bindings_of_its_scope() {
        let doc = json!({"scopes": [{"id": "a", "bindings": [
            {"name": "boxed", "executor": "shell", "sandbox": {"type": "srt"},
             "allow_unconfined_create_work": ["open"]},
            {"name": "open", "executor": "shell"}]}]});
        let c = Config::parse(&doc).unwrap();
        assert_eq!(
            allowed_unconfined(&c.scopes[0].bindings[0]).unwrap(),
            vec!["open".to_owned()]
        );
        assert!(allowed_unconfined(&c.scopes[0].bindings[1])
            .unwrap()
            .is_empty());
        assert!(Config::unknown_fields(&doc).is_empty());
        // A name the scope does not have, and a field that is not an array of names,
        // are refused at their pointers.
        let mut bad = doc.clone();
        bad["scopes"][0]["bindings"][0][ALLOW_UNCONFINED_CREATE_WORK] = json!(["open", "gone"]);
        let p = Config::parse(&bad).unwrap_err();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].pointer,
            "/scopes/0/bindings/0/allow_unconfined_create_work/1"
        );
        assert!(p[0].message.contains("\"gone\""), "{}", p[0].message);
        bad["scopes"][0]["bindings"][0][ALLOW_UNCONFINED_CREATE_WORK] = json!(true);
        let p = Config::parse(&bad).unwrap_err();
        assert_eq!(
            p[0].pointer,
            "/scopes/0/bindings/0/allow_unconfined_create_work"
        );
        assert!(
            p[0].message.contains("array of binding names"),
            "{}",
            p[0].message
        );
    }

    fn manifest() -> Manifest {
        crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"hook","version":"1","command":["x"],
            "provides":{"families":[{"name":"hook.delivery","re_derivable":false,"loss":"gone"}],
            "connections":[{"type":"hook","fields":[{"name":"secret","secret":true}]}],
            "extensions":[{"type":"hook","ingress":true,"webhooks":true,"families":["hook.delivery"]}]}}"#,
        )
        .unwrap()
    }

    fn doc() -> Value {
        json!({
            "settings": {"webhooks": {"public_url": "https://x.example"}},
            "connections": [
                {"name": "c1", "type": "hook", "secret_refs": {"secret": "env:HOOK_SECRET"}},
                {"name": "gh", "type": "github", "secret_refs": {"token": "file:/etc/t"}}
            ],
            "scopes": [
                {"id": "a", "entries": [
                    {"type": "hook", "name": "one", "connection": "c1", "config": {"path": "/h/a"}},
                    {"type": "github", "name": "repo", "connection": "gh"}
                ]},
                {"id": "b", "enabled": false, "entries": [{"type": "hook", "name": "two"}]}
            ]
        })
    }

    #[test]
    fn an_extension_gets_its_own_entries_and_connections() {
        let c = Config::parse(&doc()).unwrap();
        let e = c.for_extension(&manifest(), "g1");
        assert_eq!(e.scopes, vec!["a".to_owned()]);
        assert_eq!(e.connections, vec!["c1".to_owned()]);
        assert_eq!(e.params.entries.len(), 1);
        assert_eq!(e.params.entries[0].name, "one");
        assert_eq!(e.params.entries[0].connection, "c1");
        assert_eq!(e.params.disabled.len(), 1);
        assert_eq!(e.params.connections[0].secrets, vec!["secret".to_owned()]);
        assert_eq!(e.params.public_url, "https://x.example");
        assert_eq!(e.params.generation, "g1");
    }

    #[test]
    fn an_executor_gets_the_connections_its_bindings_name() {
        let m = crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"cc","version":"1","command":["x"],
            "provides":{"executors":[{"name":"cc"}]}}"#,
        )
        .unwrap();
        let mut d = doc();
        d["connections"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "key", "type": "anthropic", "secret_refs": {"api_key": "env:K"}}));
        d["scopes"][0]["bindings"] = json!([
            {"name": "agent", "executor": "cc", "connection": "key"},
            {"name": "other", "executor": "shell", "connection": "gh"}
        ]);
        let c = Config::parse(&d).unwrap();
        let e = c.for_extension(&m, "g1");
        assert_eq!(e.scopes, vec!["a".to_owned()]);
        assert_eq!(e.connections, vec!["key".to_owned()]);
        assert!(e.params.entries.is_empty());
        // Before: an executor had no entries, so nothing at all.
        let e = c.for_extension(&manifest(), "g1");
        assert_eq!(e.connections, vec!["c1".to_owned()]);
        // A binding's further `connections` are the executor's to resolve too,
        // whatever their type; another executor's binding's are not.
        d["scopes"][0]["bindings"] = json!([
            {"name": "agent", "executor": "cc", "connection": "gh", "connections": ["key"]},
            {"name": "other", "executor": "shell", "connection": "gh", "connections": ["c1"]}
        ]);
        let c = Config::parse(&d).unwrap();
        assert!(Config::unknown_fields(&d).is_empty());
        let e = c.for_extension(&m, "g1");
        assert_eq!(e.connections, vec!["gh".to_owned(), "key".to_owned()]);
        assert_eq!(e.scopes, vec!["a".to_owned()]);
        // The check view's binding carries them.
        let view = c.check_view(&m, "");
        assert_eq!(view.scopes[0].bindings[0].connection, "gh");
        assert_eq!(
            view.scopes[0].bindings[0].connections,
            vec!["key".to_owned()]
        );
    }

    #[test]
    fn a_bindings_connections_exist_once_and_apart_from_its_connection() {
        let mut d = doc();
        d["scopes"][0]["bindings"] = json!([
            {"name": "ok", "executor": "cc", "connection": "gh", "connections": ["c1"]},
            {"name": "bad", "executor": "cc", "connection": "gh",
             "connections": ["c1", "gone", "gh", "c1"]},
            {"name": "none", "executor": "cc", "connections": null}
        ]);
        let p = Config::parse(&d).unwrap_err();
        let got: Vec<(&str, &str)> = p
            .iter()
            .map(|p| (p.pointer.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "/scopes/0/bindings/1/connections/1",
                    "no connection is named \"gone\""
                ),
                (
                    "/scopes/0/bindings/1/connections/2",
                    "\"gh\" is already the binding's connection"
                ),
                (
                    "/scopes/0/bindings/1/connections/3",
                    "connection \"c1\" is named twice"
                ),
            ],
            "{p:?}"
        );
        assert!(p
            .iter()
            .all(|p| !p.pointer.starts_with("/scopes/0/bindings/0")));
        let typed = &Config::parse(&json!({"scopes": [{"id": "a", "bindings": [
            {"name": "typed", "executor": "cc", "connections": "c1"}]}]}))
        .unwrap_err()[0];
        assert_eq!(typed.pointer, "/scopes/0/bindings/0/connections");
        assert!(
            typed.message.contains("an array of connection names"),
            "{}",
            typed.message
        );
    }

    #[test]
    fn problems_are_reported_with_pointers() {
        let bad = json!({
            "connections": [{"name": "c", "type": "x", "secret_refs": {"s": "plain"}}],
            "scopes": [
                {"id": "a", "entries": [{"type": "t", "name": "e", "connection": "nope"},
                                        {"type": "t", "name": "e"}]},
                {"id": "a"}
            ]
        });
        let problems = Config::parse(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            vec![
                "/connections/0/secret_refs/s",
                "/scopes/0/entries/0/connection",
                "/scopes/0/entries/1/name",
                "/scopes/1/id"
            ]
        );
    }

    #[test]
    fn secret_refs_resolve_from_files_and_say_why_not() {
        let dir = std::env::temp_dir().join(format!("oc-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s");
        std::fs::write(&f, "hunter2\n").unwrap();
        assert_eq!(
            resolve_secret_ref(&format!("file:{}", f.display())).unwrap(),
            "hunter2"
        );
        let e = resolve_secret_ref("env:OC_SURELY_UNSET_VARIABLE_42").unwrap_err();
        assert!(e.contains("not set"), "{e}");
        assert!(resolve_secret_ref("file:relative").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn public_urls_are_http_with_a_host_and_no_credentials() {
        for ok in [
            "https://hooks.example.com",
            "http://127.0.0.1:8080/x",
            "https://[::1]:443/p?q",
            "HTTPS://Example.COM",
        ] {
            assert!(check_public_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ftp://x.example",
            "https://",
            "https://user:pw@x.example",
            "https://token@x.example/p",
            "https://x.example:99999",
            "https://x.example/a b",
            "x.example",
            "",
        ] {
            assert!(check_public_url(bad).is_err(), "{bad}");
        }
        assert!(check_public_url(&format!("https://x.example/{}", "a".repeat(3000))).is_err());
    }

    #[test]
    fn the_tunnel_setting_is_parsed_and_checked() {
        let doc = serde_json::json!({"settings": {"webhooks": {"tunnel": {
            "provider": "ssh", "config": {"host": "h", "url": "https://x.example"}}}}});
        let c = Config::parse(&doc).unwrap();
        let t = c.settings.webhooks.tunnel.clone().unwrap();
        assert_eq!(t.provider, "ssh");
        assert_eq!(t.run_config()["host"], "h");
        assert!(Config::unknown_fields(&doc).is_empty());
        let none = TunnelSettings {
            provider: "ssh".into(),
            config: Value::Null,
        };
        assert_eq!(none.run_config(), serde_json::json!({}));
        let bad = serde_json::json!({"settings": {"webhooks": {
            "public_url": "https://u:p@x.example",
            "tunnel": {"provider": "", "config": [], "extra": 1}}}});
        let problems = Config::parse(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/settings/webhooks/public_url",
                "/settings/webhooks/tunnel/provider",
                "/settings/webhooks/tunnel/config"
            ]
        );
        let unknown = Config::unknown_fields(&bad);
        assert_eq!(unknown[0].pointer, "/settings/webhooks/tunnel/extra");
    }
}
