//! Where the database is: `settings.storage` in the configuration file, read
//! once when storaged starts.

use crate::db::StorageTarget;
use crate::sql::PgTarget;
use std::path::Path;

/// The storage `config_dir/config.json` names: SQLite when there is no
/// directory, no file or no `settings.storage`; an error for a file that cannot
/// be read or a setting that is wrong (never a silent fall back to SQLite: a
/// host of a shared suite would then keep its own database).
pub fn storage_target(config_dir: Option<&Path>) -> Result<StorageTarget, String> {
    let Some(dir) = config_dir else {
        return Ok(StorageTarget::Sqlite);
    };
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(path = %path.display(), "no configuration file: the database is SQLite");
            return Ok(StorageTarget::Sqlite);
        }
        Err(e) => return Err(format!("read {}: {e}", path.display())),
    };
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    from_settings(&doc["settings"]["storage"])
        .map_err(|e| format!("{}: /settings/storage: {e}", path.display()))
}

/// The target a `settings.storage` value names (null: SQLite).
pub fn from_settings(v: &serde_json::Value) -> Result<StorageTarget, String> {
    if v.is_null() {
        return Ok(StorageTarget::Sqlite);
    }
    let settings: protocol::config::StorageSettings =
        serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    if let Some((field, why)) = settings.problems().into_iter().next() {
        return Err(format!("{field}: {why}"));
    }
    if settings.backend != "postgres" {
        return Ok(StorageTarget::Sqlite);
    }
    let url = protocol::config::resolve_secret_ref(&settings.url_ref)
        .map_err(|e| format!("url_ref: {e}"))?;
    PgTarget::parse(url.trim()).map(|t| StorageTarget::Postgres(Box::new(t)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn settings_name_the_backend_and_refuse_what_is_wrong() {
        assert!(matches!(
            from_settings(&json!(null)),
            Ok(StorageTarget::Sqlite)
        ));
        assert!(matches!(
            from_settings(&json!({"backend": "sqlite"})),
            Ok(StorageTarget::Sqlite)
        ));
        std::env::set_var("OC_TARGET_TEST_URL", "postgres://u@127.0.0.1:5999/db");
        match from_settings(&json!({"backend": "postgres", "url_ref": "env:OC_TARGET_TEST_URL"})) {
            Ok(StorageTarget::Postgres(pg)) => assert_eq!(pg.describe(), "127.0.0.1:5999/db as u"),
            other => panic!("{other:?}"),
        }
        let e = from_settings(&json!({"backend": "postgres"})).unwrap_err();
        assert!(e.contains("url_ref"), "{e}");
        let e = from_settings(&json!({"backend": "mysql"})).unwrap_err();
        assert!(e.contains("mysql"), "{e}");
        let e =
            from_settings(&json!({"backend": "postgres", "url_ref": "env:OC_TARGET_UNSET_VAR"}))
                .unwrap_err();
        assert!(e.contains("OC_TARGET_UNSET_VAR"), "{e}");
        // A password in the URL is never in an error or a description.
        std::env::set_var(
            "OC_TARGET_TEST_URL2",
            "postgres://u:hunter2@127.0.0.1:5999/db",
        );
        match from_settings(&json!({"backend": "postgres", "url_ref": "env:OC_TARGET_TEST_URL2"})) {
            Ok(StorageTarget::Postgres(pg)) => {
                assert!(!pg.describe().contains("hunter2"));
                assert!(!format!("{pg:?}").contains("hunter2"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unreadable_file_is_an_error_and_a_missing_one_is_sqlite() {
        let dir = std::env::temp_dir().join(format!("oc-target-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            storage_target(Some(&dir)),
            Ok(StorageTarget::Sqlite)
        ));
        std::fs::write(dir.join("config.json"), "{not json").unwrap();
        assert!(storage_target(Some(&dir)).is_err());
        std::fs::write(
            dir.join("config.json"),
            r#"{"settings": {"storage": {"backend": "postgres", "url_ref": "file:/nonexistent/oc-url"}}}"#,
        )
        .unwrap();
        let e = storage_target(Some(&dir)).unwrap_err();
        assert!(e.contains("/nonexistent/oc-url"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
