//! The checks an extension makes of the entries of a `configure`, and the request
//! paths they claim, alike for every webhook-fed extension (`bitbucket`, `jira`,
//! `linear`, `slack`, `github`): each problem is an invalid-params error naming the
//! entry and its field (`scope s1, entry a: field `connection` is required: …`).
//!
//! An extension whose entries are all alike ([`Registered`]) reads them with
//! [`register`] and declares them with [`declare`]; one whose entries differ keeps its
//! own entry type and calls the checks in the order they run, so the first problem
//! found is the one answered.

use crate::config::ConfigError;
use protocol::wire::{
    ConfigureParams, ConfigureResult, Connection, Entry, SourceDecl, WebhookPath,
};
use protocol::RpcError;
use serde_json::Value;

/// The error of `entry`'s `field`: `scope <scope>, entry <name>: field `<field>`
/// <message>`.
pub fn invalid(entry: &Entry, field: &str, message: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "scope {}, entry {}: field `{field}` {message}",
        entry.scope_id, entry.name
    ))
}

/// A problem of `entry`'s config, as [`invalid`]: the field is the error's pointer
/// without its leading `/` (`config` for the config as a whole).
pub fn invalid_config(entry: &Entry, e: &ConfigError) -> RpcError {
    invalid(
        entry,
        e.pointer.strip_prefix('/').unwrap_or("config"),
        &e.reason,
    )
}

/// Refuses an entry whose type is not `kind` (the extension's one entry type).
pub fn check_type(entry: &Entry, kind: &str) -> Result<(), RpcError> {
    if entry.entry_type != kind {
        return Err(invalid(
            entry,
            "type",
            &format!("is `{}`, not `{kind}`", entry.entry_type),
        ));
    }
    Ok(())
}

/// Refuses an entry without a name or a scope.
pub fn check_named(entry: &Entry) -> Result<(), RpcError> {
    if entry.name.is_empty() || entry.scope_id.is_empty() {
        return Err(invalid(entry, "name", "and the scope must not be empty"));
    }
    Ok(())
}

/// The connection called `name`, if configured.
pub fn find_connection<'a>(connections: &'a [Connection], name: &str) -> Option<&'a Connection> {
    connections.iter().find(|c| c.name == name)
}

/// The connection `entry` names, checked: it must name one (else `field
/// `connection` is required: <required>`), and the one it names, when configured,
/// must be of type `kind`. `None` when it names one that is not configured.
pub fn connection<'a>(
    entry: &Entry,
    connections: &'a [Connection],
    kind: &str,
    required: &str,
) -> Result<Option<&'a Connection>, RpcError> {
    if entry.connection.is_empty() {
        return Err(invalid(
            entry,
            "connection",
            &format!("is required: {required}"),
        ));
    }
    let found = find_connection(connections, &entry.connection);
    if let Some(conn) = found {
        if conn.connection_type != kind {
            return Err(invalid(
                entry,
                "connection",
                &format!(
                    "names `{}`, of type `{}`, not `{kind}`",
                    conn.name, conn.connection_type
                ),
            ));
        }
    }
    Ok(found)
}

/// `entry`'s request path: `given`, else `<prefix>/<scope>/<entry>`.
pub fn request_path(entry: &Entry, prefix: &str, given: Option<String>) -> String {
    given.unwrap_or_else(|| format!("{prefix}/{}/{}", entry.scope_id, entry.name))
}

/// The longest request path an entry may give.
pub const MAX_PATH_BYTES: usize = 512;

/// The request path an entry's config gives, checked and without its trailing `/`s:
/// at most [`MAX_PATH_BYTES`], `prefix` or under it, without whitespace, control
/// characters, `?#%\`, or an empty, `.` or `..` segment. The error is the reason.
pub fn normalize_path(path: &str, prefix: &str) -> Result<String, String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("is longer than {MAX_PATH_BYTES} bytes"));
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed != prefix && !trimmed.starts_with(&format!("{prefix}/")) {
        return Err(format!("`{path}` is not under {prefix}/"));
    }
    if trimmed
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '%' | '\\'))
        || trimmed
            .split('/')
            .skip(1)
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "`{path}` has whitespace, a control character, `?#%\\`, or an empty, `.` or `..` segment"
        ));
    }
    Ok(trimmed.to_string())
}

/// `<kind>/<scope>/<entry>`, the source name of `entry`.
pub fn source_name(kind: &str, entry: &Entry) -> String {
    format!("{kind}/{}/{}", entry.scope_id, entry.name)
}

/// The request paths the entries of one configure have claimed so far.
#[derive(Debug, Default)]
pub struct Paths {
    /// Each path, with the scope and entry that claimed it.
    claimed: Vec<(String, String, String)>,
}

impl Paths {
    /// Claims `path` for `entry`: refused (`field `path` `<path>` is already the
    /// path of scope <scope>, entry <name>`) when an entry before claimed it.
    pub fn claim(&mut self, entry: &Entry, path: &str) -> Result<(), RpcError> {
        if let Some((_, scope, name)) = self.claimed.iter().find(|(p, _, _)| p == path) {
            return Err(invalid(
                entry,
                "path",
                &format!("`{path}` is already the path of scope {scope}, entry {name}"),
            ));
        }
        self.claimed
            .push((path.to_string(), entry.scope_id.clone(), entry.name.clone()));
        Ok(())
    }
}

/// The request path `path` declared for `source` (its name, scope and entry).
pub fn webhook(source: &SourceDecl, path: &str) -> WebhookPath {
    WebhookPath {
        path: path.to_string(),
        source: source.name.clone(),
        scope_id: source.scope_id.clone(),
        entry: source.entry.clone(),
    }
}

/// Of `entries`, the one whose request path (`path_of`) is the longest that covers
/// `request_path` ([`WebhookPath::covers`]); the last of equals.
pub fn longest_cover<'a, T: 'a>(
    entries: impl IntoIterator<Item = &'a T>,
    path_of: impl Fn(&T) -> &str,
    request_path: &str,
) -> Option<&'a T> {
    entries
        .into_iter()
        .filter(|e| {
            WebhookPath {
                path: path_of(e).to_string(),
                ..Default::default()
            }
            .covers(request_path)
        })
        .max_by_key(|e| path_of(e).len())
}

/// One configured entry, in force until the next configure, of an extension whose
/// entries all take a config `C`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered<C> {
    /// The scope.
    pub scope_id: String,
    /// The entry's name within the scope.
    pub name: String,
    /// The connection it names, of the extension's type.
    pub connection: String,
    /// The request path.
    pub path: String,
    /// What the entry takes.
    pub config: C,
    /// Its source name, `<type>/<scope_id>/<entry>`.
    pub source: String,
}

/// The entry of `entries` registering `source`: a reconcile page (or a pass)
/// asking for a source this package no longer has is `not_found`, naming it.
pub fn by_source<'a, C>(
    entries: &'a [Registered<C>],
    source: &str,
) -> Result<&'a Registered<C>, RpcError> {
    entries.iter().find(|e| e.source == source).ok_or_else(|| {
        RpcError::new(
            protocol::Code::NotFound,
            format!("source {source:?} is not one of this package's entries"),
        )
    })
}

/// What [`register`] takes an extension's entries to be.
#[derive(Debug, Clone, Copy)]
pub struct Kind<'a> {
    /// The type of the entries, of their connections and of their sources (the
    /// extension's name).
    pub name: &'a str,
    /// The prefix of an entry's default request path (`/jira`).
    pub path_prefix: &'a str,
    /// What connection an entry needs, as the error for one without says it (`a jira
    /// connection`).
    pub connection: &'a str,
    /// Whether an entry without a name or a scope is refused.
    pub named: bool,
}

/// Reads the entries of a configure (a broken entry fails it all), checking each in
/// turn: its type, its name and scope (when [`Kind::named`]), its config (`parse`),
/// its connection, and its request path (the one `path` finds in its config, else
/// the default), which no entry before may have.
pub fn register<C>(
    params: &ConfigureParams,
    kind: &Kind<'_>,
    parse: impl Fn(&Value) -> Result<C, ConfigError>,
    path: impl Fn(&C) -> Option<String>,
) -> Result<Vec<Registered<C>>, RpcError> {
    let mut kept = Vec::new();
    let mut paths = Paths::default();
    for entry in &params.entries {
        check_type(entry, kind.name)?;
        if kind.named {
            check_named(entry)?;
        }
        let config = parse(&entry.config).map_err(|e| invalid_config(entry, &e))?;
        connection(entry, &params.connections, kind.name, kind.connection)?;
        let path = request_path(entry, kind.path_prefix, path(&config));
        paths.claim(entry, &path)?;
        kept.push(Registered {
            scope_id: entry.scope_id.clone(),
            name: entry.name.clone(),
            connection: entry.connection.clone(),
            path,
            config,
            source: source_name(kind.name, entry),
        });
    }
    Ok(kept)
}

/// The sources and request paths `entries` register: each source of type `kind`,
/// of `families`, reconciled every `interval` of its config seconds (0: never).
pub fn declare<C>(
    entries: &[Registered<C>],
    kind: &str,
    families: &[&str],
    interval: impl Fn(&C) -> u64,
) -> ConfigureResult {
    let mut result = ConfigureResult::default();
    for e in entries {
        let source = SourceDecl {
            name: e.source.clone(),
            source_type: kind.to_string(),
            scope_id: e.scope_id.clone(),
            entry: e.name.clone(),
            families: families.iter().map(|f| f.to_string()).collect(),
            reconcile_interval_s: interval(&e.config),
        };
        result.webhooks.push(webhook(&source, &e.path));
        result.sources.push(source);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(scope: &str, name: &str, kind: &str, connection: &str) -> Entry {
        Entry {
            scope_id: scope.into(),
            entry_type: kind.into(),
            name: name.into(),
            connection: connection.into(),
            ..Default::default()
        }
    }

    fn conn(name: &str, kind: &str) -> Connection {
        Connection {
            name: name.into(),
            connection_type: kind.into(),
            config: serde_json::Value::Null,
            secrets: Vec::new(),
        }
    }

    /// The message of an invalid-params error, without the prefix every one has.
    fn message(e: RpcError) -> String {
        let text = e
            .message
            .strip_prefix("invalid params: ")
            .unwrap()
            .to_string();
        assert_eq!(e, RpcError::invalid_params(text.clone()));
        text
    }

    #[test]
    fn a_field_is_named_with_its_scope_and_entry() {
        let e = entry("s1", "a", "jira", "c");
        assert_eq!(
            message(invalid(&e, "path", "is wrong")),
            "scope s1, entry a: field `path` is wrong"
        );
        let deep = ConfigError::new("/filter/0", "must be a string");
        assert_eq!(
            message(invalid_config(&e, &deep)),
            "scope s1, entry a: field `filter/0` must be a string"
        );
        let whole = ConfigError::whole("must be an object");
        assert_eq!(
            message(invalid_config(&e, &whole)),
            "scope s1, entry a: field `config` must be an object"
        );
    }

    #[test]
    fn the_type_and_the_names_are_checked() {
        assert!(check_type(&entry("s", "a", "jira", ""), "jira").is_ok());
        assert_eq!(
            message(check_type(&entry("s", "a", "linear", ""), "jira").unwrap_err()),
            "scope s, entry a: field `type` is `linear`, not `jira`"
        );
        assert!(check_named(&entry("s", "a", "jira", "")).is_ok());
        for (scope, name) in [("", "a"), ("s", ""), ("", "")] {
            assert_eq!(
                message(check_named(&entry(scope, name, "jira", "")).unwrap_err()),
                format!(
                    "scope {scope}, entry {name}: field `name` and the scope must not be empty"
                )
            );
        }
    }

    #[test]
    fn an_entry_names_a_connection_of_the_extension_type() {
        let conns = [conn("mine", "jira"), conn("theirs", "slack")];
        let none = entry("s", "a", "jira", "");
        assert_eq!(
            message(connection(&none, &conns, "jira", "a jira connection").unwrap_err()),
            "scope s, entry a: field `connection` is required: a jira connection"
        );
        let other = entry("s", "a", "jira", "theirs");
        assert_eq!(
            message(connection(&other, &conns, "jira", "x").unwrap_err()),
            "scope s, entry a: field `connection` names `theirs`, of type `slack`, not `jira`"
        );
        let mine = entry("s", "a", "jira", "mine");
        let found = connection(&mine, &conns, "jira", "x").unwrap();
        assert_eq!(found.map(|c| c.name.as_str()), Some("mine"));
        let unknown = entry("s", "a", "jira", "later");
        assert_eq!(connection(&unknown, &conns, "jira", "x").unwrap(), None);
        assert_eq!(find_connection(&conns, "theirs"), Some(&conns[1]));
        assert_eq!(find_connection(&conns, "nobody"), None);
    }

    #[test]
    fn a_path_defaults_under_the_prefix_and_is_claimed_once() {
        let a = entry("s1", "a", "jira", "c");
        let b = entry("s2", "b", "jira", "c");
        assert_eq!(request_path(&a, "/jira", None), "/jira/s1/a");
        assert_eq!(request_path(&a, "/jira", Some("/own".into())), "/own");
        assert_eq!(source_name("jira", &b), "jira/s2/b");
        let mut paths = Paths::default();
        paths.claim(&a, "/same").unwrap();
        paths.claim(&b, "/other").unwrap();
        assert_eq!(
            message(paths.claim(&b, "/same").unwrap_err()),
            "scope s2, entry b: field `path` `/same` is already the path of scope s1, entry a"
        );
    }

    #[test]
    fn a_webhook_is_declared_for_its_source() {
        let source = SourceDecl {
            name: "jira/s/a".into(),
            source_type: "jira".into(),
            scope_id: "s".into(),
            entry: "a".into(),
            ..Default::default()
        };
        assert_eq!(
            webhook(&source, "/jira/s/a"),
            WebhookPath {
                path: "/jira/s/a".into(),
                source: "jira/s/a".into(),
                scope_id: "s".into(),
                entry: "a".into(),
            }
        );
    }

    #[test]
    fn the_longest_covering_path_wins() {
        let paths = [("a", "/x"), ("b", "/x/y"), ("c", "/x/yz"), ("d", "/x/y")];
        let found = |request: &str| longest_cover(&paths, |p| p.1, request).map(|p| p.0);
        assert_eq!(found("/x/y/z"), Some("d"), "the last of equals");
        assert_eq!(found("/x/yz"), Some("c"));
        assert_eq!(found("/x/w"), Some("a"));
        assert_eq!(found("/x"), Some("a"));
        assert_eq!(found("/xy"), None);
        assert_eq!(found("/other"), None);
    }

    const JIRA: Kind<'static> = Kind {
        name: "jira",
        path_prefix: "/jira",
        connection: "a jira connection",
        named: false,
    };

    /// A config of one optional field, `path`.
    fn parse(config: &Value) -> Result<Option<String>, ConfigError> {
        match config.get("path") {
            None => Ok(None),
            Some(Value::String(p)) => Ok(Some(p.clone())),
            Some(_) => Err(ConfigError::new("/path", "must be a string")),
        }
    }

    fn configure(entries: Vec<Entry>) -> ConfigureParams {
        ConfigureParams {
            entries,
            connections: vec![conn("c", "jira"), conn("theirs", "slack")],
            ..Default::default()
        }
    }

    fn with(mut e: Entry, config: Value) -> Entry {
        e.config = config;
        e
    }

    #[test]
    fn entries_are_registered_and_declared() {
        let params = configure(vec![
            entry("s1", "a", "jira", "c"),
            with(
                entry("s2", "b", "jira", "c"),
                serde_json::json!({"path": "/jira/own"}),
            ),
        ]);
        let kept = register(&params, &JIRA, parse, Clone::clone).unwrap();
        assert_eq!(
            kept[0],
            Registered {
                scope_id: "s1".into(),
                name: "a".into(),
                connection: "c".into(),
                path: "/jira/s1/a".into(),
                config: None,
                source: "jira/s1/a".into(),
            }
        );
        assert_eq!(kept[1].path, "/jira/own");
        let declared = declare(&kept, "jira", &["jira.issue"], |c| {
            if c.is_some() {
                60
            } else {
                0
            }
        });
        assert_eq!(declared.sources.len(), 2);
        assert_eq!(declared.sources[1].name, "jira/s2/b");
        assert_eq!(declared.sources[1].families, ["jira.issue"]);
        assert_eq!(declared.sources[1].reconcile_interval_s, 60);
        assert_eq!(declared.sources[0].reconcile_interval_s, 0);
        assert_eq!(
            declared.webhooks[1],
            webhook(&declared.sources[1], "/jira/own")
        );
    }

    #[test]
    fn the_first_problem_of_an_entry_is_answered() {
        let fails = |kind: &Kind<'_>, e: Entry| {
            message(register(&configure(vec![e]), kind, parse, Clone::clone).unwrap_err())
        };
        let bad_path = serde_json::json!({"path": 7});
        assert_eq!(
            fails(&JIRA, with(entry("s", "a", "slack", ""), bad_path.clone())),
            "scope s, entry a: field `type` is `slack`, not `jira`"
        );
        assert!(register(
            &configure(vec![entry("", "a", "jira", "c")]),
            &JIRA,
            parse,
            Clone::clone
        )
        .is_ok());
        let named = Kind {
            named: true,
            ..JIRA
        };
        assert_eq!(
            fails(&named, with(entry("", "a", "jira", ""), bad_path.clone())),
            "scope , entry a: field `name` and the scope must not be empty"
        );
        assert_eq!(
            fails(&JIRA, with(entry("s", "a", "jira", ""), bad_path)),
            "scope s, entry a: field `path` must be a string"
        );
        assert_eq!(
            fails(&JIRA, entry("s", "a", "jira", "")),
            "scope s, entry a: field `connection` is required: a jira connection"
        );
        assert_eq!(
            fails(&JIRA, entry("s", "a", "jira", "theirs")),
            "scope s, entry a: field `connection` names `theirs`, of type `slack`, not `jira`"
        );
        let twice = configure(vec![
            entry("s1", "a", "jira", "c"),
            with(
                entry("s2", "b", "jira", "c"),
                serde_json::json!({"path": "/jira/s1/a"}),
            ),
        ]);
        assert_eq!(
            message(register(&twice, &JIRA, parse, Clone::clone).unwrap_err()),
            "scope s2, entry b: field `path` `/jira/s1/a` is already the path of scope s1, entry a"
        );
    }

    #[test]
    fn a_given_path_is_checked_and_trimmed() {
        assert_eq!(normalize_path("/jira/", "/jira").unwrap(), "/jira");
        assert_eq!(normalize_path("/jira/own//", "/jira").unwrap(), "/jira/own");
        assert_eq!(
            normalize_path("/jiraz", "/jira").unwrap_err(),
            "`/jiraz` is not under /jira/"
        );
        let bad = "has whitespace, a control character, `?#%\\`, or an empty, `.` or `..` segment";
        for path in [
            "/jira/a b",
            "/jira/a?b",
            "/jira/%",
            "/jira/a\\b",
            "/jira//a",
            "/jira/./a",
            "/jira/../a",
        ] {
            assert_eq!(
                normalize_path(path, "/jira").unwrap_err(),
                format!("`{path}` {bad}")
            );
        }
        let long = format!("/jira/{}", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(
            normalize_path(&long, "/jira").unwrap_err(),
            "is longer than 512 bytes"
        );
        assert!(normalize_path(&long[..MAX_PATH_BYTES], "/jira").is_ok());
    }
}
