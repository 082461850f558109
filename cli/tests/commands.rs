#![allow(clippy::unwrap_used)]
//! The `open-conduit` commands that need no running suite: completions, man pages,
//! offline config checks, and a clear error when the bus is not there.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_open-conduit");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completions_and_man_pages_come_from_the_same_definitions() {
    let (status, bash, _) = run(&["completions", "bash"]);
    assert_eq!(status, 0);
    for word in ["open-conduit", "work", "status", "config", "interrupt"] {
        assert!(bash.contains(word), "{word} in the bash completions");
    }
    let dir = std::env::temp_dir().join(format!("oc-man-{}", std::process::id()));
    let (status, out, err) = run(&["man", dir.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}{err}");
    let page = std::fs::read_to_string(dir.join("open-conduit-work-show.1")).unwrap();
    assert!(
        page.contains(".TH") && page.contains("open-conduit-work-show"),
        "{page}"
    );
    assert!(dir.join("open-conduit-up.1").exists());
    // The synopsis as it is typed, the version in the footer (.TH's source).
    assert!(page.contains("\\fBopen\\-conduit work show\\fR"), "{page}");
    let version = concat!("\"open-conduit ", env!("CARGO_PKG_VERSION"), "\"");
    // The main commands' pages say what --help does not.
    for name in [
        "open-conduit",
        "open-conduit-up",
        "open-conduit-status",
        "open-conduit-doctor",
        "open-conduit-config",
        "open-conduit-work",
    ] {
        let page = std::fs::read_to_string(dir.join(format!("{name}.1"))).unwrap();
        let th = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
        assert!(th.contains(version), "{name}: {th}");
        for section in [
            ".SH DESCRIPTION",
            ".SH FILES",
            ".SH ENVIRONMENT",
            ".SH \"EXIT STATUS\"",
            ".SH EXAMPLES",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(page.contains(section), "{name} has no {section}");
        }
        assert!(
            !page.contains("open\\-conduit\\-up\\fR ["),
            "{name}: {page}"
        );
    }
    let up = std::fs::read_to_string(dir.join("open-conduit-up.1")).unwrap();
    assert!(up.contains("\\fBopen\\-conduit up\\fR"), "{up}");
    assert!(up.contains("OC_LOG"), "{up}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_check_is_offline_and_names_every_problem() {
    let dir = std::env::temp_dir().join(format!("oc-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    std::fs::write(
        &good,
        r#"{"scopes": [{"id": "a", "entries": [{"type": "webhook", "name": "in"}]}]}"#,
    )
    .unwrap();
    let (status, out, _) = run(&[
        "--bus",
        "/nonexistent.sock",
        "config",
        "check",
        good.to_str().unwrap(),
    ]);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("ok (0 connections, 1 scopes)"), "{out}");
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"connections": [{"name": "c", "type": "t", "secret_refs": {"s": "plain"}}],
            "scopes": [{"id": "a", "routes": [{"handler": "h", "binding": "missing"}],
                        "bindings": [{"name": "b"}]},
                       {"id": "a"}]}"#,
    )
    .unwrap();
    let (status, out, _) = run(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(status, 1);
    assert!(out.contains("/connections/0/secret_refs/s"), "{out}");
    assert!(out.contains("/scopes/1/id"), "{out}");
    assert!(out.contains("/scopes/0/routes/0/binding"), "{out}");
    assert!(out.contains("/scopes/0/bindings/0/executor"), "{out}");
    let notjson = dir.join("x.json");
    std::fs::write(&notjson, "{").unwrap();
    let (status, _, err) = run(&["config", "check", notjson.to_str().unwrap()]);
    assert_eq!(status, 1);
    assert!(err.contains("not JSON"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The extensions check their own objects: the embedded demo passes, a bad cron
/// expression is found by the schedule package at its pointer, an unknown type is named,
/// and a package that cannot start refuses its objects.
#[test]
fn config_check_starts_the_extensions_the_document_uses() {
    let dir = std::env::temp_dir().join(format!("oc-check-ext-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (status, demo, _) = run(&["config", "demo"]);
    assert_eq!(status, 0);
    let demo_file = dir.join("demo.json");
    std::fs::write(&demo_file, &demo).unwrap();
    let etc = dir.join("etc");
    let etc_s = etc.to_str().unwrap();
    let (status, out, err) = run(&[
        "config",
        "check",
        demo_file.to_str().unwrap(),
        "--config-dir",
        etc_s,
    ]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("ok (0 connections, 1 scopes)"), "{out}");
    assert!(
        !out.contains("warning"),
        "the demo uses only known fields: {out}"
    );

    // A misspelt field is named (a warning: it is ignored, the document stays valid).
    let mut misspelt: serde_json::Value = serde_json::from_str(&demo).unwrap();
    misspelt["scopes"][0]["bindngs"] = serde_json::json!([]);
    misspelt["setings"] = serde_json::json!({});
    let misspelt_file = dir.join("misspelt.json");
    std::fs::write(&misspelt_file, misspelt.to_string()).unwrap();
    let (status, out, _) = run(&[
        "config",
        "check",
        misspelt_file.to_str().unwrap(),
        "--no-extensions",
    ]);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.contains(
            "/scopes/0/bindngs: warning: unknown field \"bindngs\" (ignored) (unknown_field)"
        ),
        "{out}"
    );
    assert!(out.contains("/setings: warning"), "{out}");

    let broken: serde_json::Value =
        serde_json::from_str(&demo.replace("* * * * *", "61 * * * *")).unwrap();
    let mut broken = broken;
    broken["scopes"][0]["entries"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "nosuch", "name": "n"}));
    broken["scopes"][0]["entries"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "broken", "name": "b"}));
    let broken_file = dir.join("broken.json");
    std::fs::write(&broken_file, broken.to_string()).unwrap();
    // An installed package that exits at once.
    let pkg = etc.join("extensions/broken");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    std::fs::write(
        pkg.join("open-conduit-extension.json"),
        r#"{"protocol": [1], "name": "broken", "version": "1.0.0", "command": ["bin/broken"],
            "provides": {"extensions": [{"type": "broken"}]}}"#,
    )
    .unwrap();
    let script = pkg.join("bin/broken");
    std::fs::write(
        &script,
        "#!/bin/sh\necho 'cannot read my settings' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (status, out, _) = run(&[
        "config",
        "check",
        broken_file.to_str().unwrap(),
        "--config-dir",
        etc_s,
    ]);
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/scopes/0/entries/1/config/jobs/0/cron") && out.contains("61"),
        "{out}"
    );
    assert!(
        out.contains("/scopes/0/entries/2/type") && out.contains("unknown_type"),
        "{out}"
    );
    assert!(
        out.contains("/scopes/0/entries/3/type")
            && out.contains("extension_unavailable")
            && out.contains("cannot read my settings"),
        "{out}"
    );
    // Structure only: nothing is started, so only the document's own rules apply.
    let (status, out, _) = run(&[
        "config",
        "check",
        broken_file.to_str().unwrap(),
        "--no-extensions",
    ]);
    assert_eq!(status, 0, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_suite_the_commands_say_so() {
    let (status, _, err) = run(&["--bus", "/nonexistent/bus.sock", "status"]);
    assert_eq!(status, 1);
    assert!(err.contains("is the suite running"), "{err}");
    assert!(
        err.contains("/nonexistent/bus.sock") && err.contains("run/bus.sock"),
        "names the socket tried and up's: {err}"
    );
    let (status, _, err) = run(&["logs", "nosuch"]);
    assert_eq!(status, 1, "{err}");
    assert!(err.contains("no component"), "{err}");
}

#[test]
fn extensions_install_after_an_offline_check_and_remove() {
    let base = std::env::temp_dir().join(format!("oc-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let pkg = base.join("pkg");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    std::fs::write(
        pkg.join("open-conduit-extension.json"),
        include_str!("../../extensions/notes/release-3.json"),
    )
    .unwrap();
    std::fs::write(pkg.join("bin/helper"), "#!/bin/sh\n").unwrap();
    let etc = base.join("etc");
    let etc_s = etc.to_str().unwrap();
    let (status, out, err) = run(&[
        "extension",
        "install",
        pkg.to_str().unwrap(),
        "--config-dir",
        etc_s,
    ]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("installed notes 3.0.0"), "{out}");
    assert!(etc
        .join("extensions/notes/open-conduit-extension.json")
        .exists());
    assert!(etc.join("extensions/notes/bin/helper").exists());
    // Nothing staged is left beside it.
    let names: Vec<String> = std::fs::read_dir(etc.join("extensions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["notes".to_owned()]);

    // A manifest that breaks a rule is refused, naming it, and nothing is copied.
    let bad = base.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(
        bad.join("open-conduit-extension.json"),
        r#"{"protocol": [1], "name": "Bad Name", "version": "1", "command": ["x"]}"#,
    )
    .unwrap();
    let (status, _, err) = run(&[
        "extension",
        "install",
        bad.to_str().unwrap(),
        "--config-dir",
        etc_s,
    ]);
    assert_eq!(status, 1, "{err}");
    assert!(err.contains("name"), "{err}");

    let (status, out, _) = run(&["extension", "remove", "notes", "--config-dir", etc_s]);
    assert_eq!(status, 0);
    assert!(out.contains("removed notes"), "{out}");
    assert!(!etc.join("extensions/notes").exists());
    let (status, _, err) = run(&["extension", "remove", "notes", "--config-dir", etc_s]);
    assert_eq!(status, 1);
    assert!(err.contains("no installed package notes"), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A reader that goes away (`open-conduit … | head`) ends the command quietly: no
/// panic on the broken pipe.
#[test]
fn a_closed_pipe_ends_a_listing_quietly() {
    let mut child = Command::new(BIN)
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before anything is written
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{:?}", out.status);
}

#[test]
fn up_offers_only_the_flags_that_mean_something_to_it() {
    let (status, out, _) = run(&["up", "--help"]);
    assert_eq!(status, 0);
    for flag in [
        "--state",
        "--config",
        "--listen",
        "--web-listen",
        "--verbose",
    ] {
        assert!(out.contains(flag), "{flag}: {out}");
    }
    for flag in ["--bus", "--json"] {
        assert!(!out.contains(flag), "{flag} is offered: {out}");
    }
    // Everywhere else they are.
    let (_, out, _) = run(&["status", "--help"]);
    assert!(out.contains("--bus") && out.contains("--json"), "{out}");
}

/// The workspace checks: a binding's git resource config is checked by the git
/// package, and a mode the claude-code executor's request overrides is a warning.
#[test]
fn config_check_checks_workspaces_and_warns_of_an_overridden_mode() {
    let dir = std::env::temp_dir().join(format!("oc-check-ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let etc = dir.join("etc");
    let doc = |resource: serde_json::Value, exec: serde_json::Value| {
        serde_json::json!({"scopes": [{"id": "a",
            "bindings": [{"name": "cc", "executor": "claude-code", "config": exec,
                          "resource": {"type": "git", "config": resource}}]}]})
    };
    let check = |name: &str, v: serde_json::Value| {
        let f = dir.join(name);
        std::fs::write(&f, v.to_string()).unwrap();
        run(&[
            "config",
            "check",
            f.to_str().unwrap(),
            "--config-dir",
            etc.to_str().unwrap(),
        ])
    };
    let (status, out, err) = check(
        "same.json",
        doc(
            serde_json::json!({"repository": "https://example.invalid/r.git", "mode": "work"}),
            serde_json::json!({}),
        ),
    );
    assert_eq!(status, 0, "{out}{err}");
    assert!(!out.contains("never applies"), "{out}");
    let (status, out, err) = check(
        "overridden.json",
        doc(
            serde_json::json!({"repository": "https://example.invalid/r.git", "mode": "shared"}),
            serde_json::json!({"workspace_mode": "work"}),
        ),
    );
    assert_eq!(status, 0, "a warning only: {out}{err}");
    assert!(
        out.contains("/scopes/0/bindings/0/resource/config/mode: warning")
            && out.contains("\"shared\" never applies"),
        "{out}"
    );
    let (status, out, _) = check(
        "bad.json",
        doc(
            serde_json::json!({"mode": "sometimes"}),
            serde_json::json!({}),
        ),
    );
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/scopes/0/bindings/0/resource/config"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A binding names its GitHub connection and, in `connections`, the model's key's:
/// claude-code's `secret_env` takes each secret from its own connection, and config
/// check refuses a secret name the connection's type does not declare, or a
/// connection the binding does not name, each at its pointer.
#[test]
fn config_check_refuses_a_secret_the_connection_type_does_not_declare() {
    let dir = std::env::temp_dir().join(format!("oc-check-secrets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let etc = dir.join("etc");
    let doc = |secret_env: serde_json::Value| {
        serde_json::json!({
            "connections": [
                {"name": "gh", "type": "github", "secret_refs": {"token": "env:GH_TOKEN"}},
                {"name": "anthropic", "type": "claude-code",
                 "secret_refs": {"api_key": "env:ANTHROPIC_KEY"}}],
            "scopes": [{"id": "a", "bindings": [
                {"name": "plain", "executor": "claude-code",
                 "config": {"permission_mode": "acceptEdits"}},
                {"name": "agent", "executor": "claude-code", "connection": "gh",
                 "connections": ["anthropic"],
                 "config": {"permission_mode": "acceptEdits", "secret_env": secret_env}}]}]})
    };
    let check = |name: &str, v: serde_json::Value| {
        let f = dir.join(name);
        std::fs::write(&f, v.to_string()).unwrap();
        run(&[
            "config",
            "check",
            f.to_str().unwrap(),
            "--config-dir",
            etc.to_str().unwrap(),
        ])
    };
    let (status, out, err) = check(
        "good.json",
        doc(serde_json::json!({
            "ANTHROPIC_API_KEY": {"connection": "anthropic", "secret": "api_key"},
            "GH_TOKEN": "token"})),
    );
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("ok (2 connections, 1 scopes)"), "{out}");
    let (status, out, _) = check(
        "misspelt.json",
        doc(serde_json::json!({
            "ANTHROPIC_API_KEY": {"connection": "anthropic", "secret": "api_kye"}})),
    );
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains(
            "/scopes/0/bindings/1/config/secret_env/ANTHROPIC_API_KEY: connection \"anthropic\" (type claude-code) has no secret \"api_kye\"; its secrets are api_key (undeclared_secret)"
        ),
        "{out}"
    );
    // The binding's own connection's type is judged by its own package's manifest.
    let (status, out, _) = check("github.json", doc(serde_json::json!({"GH_TOKEN": "tokn"})));
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/scopes/0/bindings/1/config/secret_env/GH_TOKEN: connection \"gh\" (type github) has no secret \"tokn\"; its secrets are ")
            && out.contains("token"),
        "{out}"
    );
    let (status, out, _) = check(
        "unbound.json",
        doc(serde_json::json!({
            "ANTHROPIC_API_KEY": {"connection": "elsewhere", "secret": "api_key"}})),
    );
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/scopes/0/bindings/1/config/secret_env/ANTHROPIC_API_KEY: connection \"elsewhere\" is not one the binding names")
            && out.contains("(unbound_connection)"),
        "{out}"
    );
    // The binding's `connections` themselves are the document's: each must exist.
    let mut gone = doc(serde_json::json!({}));
    gone["scopes"][0]["bindings"][1]["connections"] = serde_json::json!(["anthropic", "nope"]);
    let (status, out, _) = check("gone.json", gone);
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/scopes/0/bindings/1/connections/1: no connection is named \"nope\""),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tunnel's config is checked by the package providing its type (`validate` kind
/// `tunnel`), each problem with a pointer inside `settings.webhooks.tunnel.config`.
#[test]
fn config_check_checks_the_tunnel_through_its_provider() {
    let dir = std::env::temp_dir().join(format!("oc-check-tunnel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let etc = dir.join("etc");
    let check = |name: &str, tunnel: serde_json::Value| {
        let f = dir.join(name);
        let doc = serde_json::json!({"settings": {"webhooks": {"tunnel": tunnel}},
                                     "scopes": [{"id": "a"}]});
        std::fs::write(&f, doc.to_string()).unwrap();
        run(&[
            "config",
            "check",
            f.to_str().unwrap(),
            "--config-dir",
            etc.to_str().unwrap(),
        ])
    };
    let (status, out, err) = check(
        "good.json",
        serde_json::json!({"provider": "ssh", "config": {"host": "tunnel.example.com",
            "user": "hooks", "remote_port": 9000, "url": "https://hooks.example.com"}}),
    );
    assert_eq!(status, 0, "{out}{err}");
    // The key as a connection's secret: the connection's type is the ssh package's.
    let f = dir.join("keyed.json");
    let doc = serde_json::json!({
        "connections": [{"name": "tunnel-key", "type": "ssh-key",
                         "secret_refs": {"private_key": "file:/etc/open-conduit/secrets/k"}}],
        "settings": {"webhooks": {"tunnel": {"provider": "ssh", "config": {
            "host": "tunnel.example.com", "user": "hooks", "remote_port": 9000,
            "url": "https://hooks.example.com", "connection": "tunnel-key"}}}},
        "scopes": [{"id": "a"}]});
    std::fs::write(&f, doc.to_string()).unwrap();
    let (status, out, err) = run(&[
        "config",
        "check",
        f.to_str().unwrap(),
        "--config-dir",
        etc.to_str().unwrap(),
    ]);
    assert_eq!(status, 0, "{out}{err}");
    let (status, out, _) = check(
        "bad.json",
        serde_json::json!({"provider": "ssh", "config": {"host": "tunnel.example.com",
            "user": "hooks", "remote_port": 70000, "url": "https://u:p@hooks.example.com"}}),
    );
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/settings/webhooks/tunnel/config/remote_port"),
        "{out}"
    );
    assert!(
        out.contains("/settings/webhooks/tunnel/config/url"),
        "{out}"
    );
    let (status, out, _) = check(
        "unknown.json",
        serde_json::json!({"provider": "carrier-pigeon", "config": {}}),
    );
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("/settings/webhooks/tunnel/provider") && out.contains("unknown_type"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn store_export_and_import_move_a_store_to_postgres_checked() {
    let Some(cluster) = oc_pgtest::shared_or_skip("store export/import") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("oc-store-move-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let from = dir.join("from");
    // A SQLite store with events and KV, written through the store itself.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = storaged::Store::open(&from, storaged::Limits::default()).unwrap();
        let events: Vec<serde_json::Value> = (0..30)
            .map(|i| {
                serde_json::json!({"scope_id": "s", "type": "notes.note", "source": "notes",
                    "delivery_id": format!("d{i}"), "payload": {"n": i}, "keys": [format!("k{}", i % 7)]})
            })
            .collect();
        store
            .events_accept(serde_json::from_value(serde_json::json!({ "events": events })).unwrap())
            .await
            .unwrap();
        store
            .kv_commit(
                serde_json::from_value(serde_json::json!({"owner": "notes",
                    "puts": [{"key": "a", "value": {"n": 1}}]}))
                .unwrap(),
            )
            .await
            .unwrap();
        let closing = store.clone();
        tokio::task::spawn_blocking(move || closing.close()).await.unwrap();
    });
    let file = dir.join("conduit.export");
    let (status, out, err) = run(&[
        "store",
        "export",
        "--state",
        from.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(err.contains("exported events: 30 rows"), "{err}");
    let digest = |line: &str| {
        line.rsplit(' ')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    // 30 events, their 30 keys and 30 unrouted rows, and the KV entry.
    assert!(
        out.starts_with(&format!(
            "exported 91 rows in {} tables, digest sha256:",
            storaged::schema::TABLES.len()
        )),
        "{out}"
    );

    // The target: settings.storage in a configuration directory, as storaged
    // reads it.
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    let url = cluster.create_database("cli_move").unwrap();
    std::fs::write(dir.join("pg.url"), url).unwrap();
    let config = serde_json::json!({"settings": {"storage": {"backend": "postgres",
        "url_ref": format!("file:{}", dir.join("pg.url").display())}}});
    std::fs::write(etc.join("config.json"), config.to_string()).unwrap();
    let to = dir.join("to");
    let import = || {
        run(&[
            "store",
            "import",
            "--state",
            to.to_str().unwrap(),
            "--config-dir",
            etc.to_str().unwrap(),
            file.to_str().unwrap(),
        ])
    };
    let (status, out2, err2) = import();
    assert_eq!(status, 0, "{out2}{err2}");
    assert!(err2.contains("store: postgres 127.0.0.1:"), "{err2}");
    assert!(
        out2.starts_with(&format!(
            "imported and checked: 91 rows in {} tables",
            storaged::schema::TABLES.len()
        )),
        "{out2}"
    );
    assert_eq!(digest(&out2), digest(&out));
    // Again into the now full database: refused, naming what is there.
    let (status, out3, err3) = import();
    assert_eq!(status, 1, "{out3}{err3}");
    assert!(
        err3.contains("not empty") && err3.contains("events: 30"),
        "{err3}"
    );
    // The setting itself is checked offline, with its pointer.
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"settings": {"storage": {"backend": "postgres", "url_ref": "postgres://x"}}}"#,
    )
    .unwrap();
    let (status, out4, err4) = run(&["config", "check", "--no-extensions", bad.to_str().unwrap()]);
    assert_ne!(status, 0, "{out4}{err4}");
    assert!(
        format!("{out4}{err4}").contains("/settings/storage/url_ref"),
        "{out4}{err4}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
