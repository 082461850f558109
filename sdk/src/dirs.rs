//! The directories `initialize` names, for an extension that keeps files (an executor
//! that runs commands detached, say). Keep a [`SharedDirs`] and fill it from
//! [`Extension::on_initialize`](crate::Extension::on_initialize): the hook runs before
//! `initialize` is answered, so no other method (which the SDK refuses before
//! `initialize`) runs without them.

use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The directories `initialize` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dirs {
    /// The extension's private state directory (`state_dir`).
    pub state_dir: Option<PathBuf>,
    /// The directory the executor keeps its runs in (`executor_dirs.<executor>`).
    pub executor_dir: Option<PathBuf>,
    /// The config file's directory (`config_dir`).
    pub config_dir: Option<PathBuf>,
}

impl Dirs {
    /// Reads the directories from `initialize` params (absent or empty ones are
    /// `None`), `executor` naming the entry of `executor_dirs`.
    pub fn from_initialize(params: &Value, executor: &str) -> Dirs {
        let path = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        };
        Dirs {
            state_dir: path(params.get("state_dir")),
            executor_dir: path(params.get("executor_dirs").and_then(|d| d.get(executor))),
            config_dir: path(params.get("config_dir")),
        }
    }

    /// Where runs live: `executor_dirs.<executor>` (the spec's
    /// `<state>/executors/<name>`), else `<state_dir>/runs`, else `state/runs` in the
    /// current directory.
    pub fn runs(&self) -> PathBuf {
        if let Some(dir) = &self.executor_dir {
            return dir.clone();
        }
        match &self.state_dir {
            Some(state) => state.join("runs"),
            None => PathBuf::from("state").join("runs"),
        }
    }
}

/// The directories, shared between the `initialize` hook and the handlers.
pub type SharedDirs = Arc<Mutex<Dirs>>;

/// A hook for [`Extension::on_initialize`](crate::Extension::on_initialize) that
/// records the directories in `dirs`.
pub fn record(dirs: SharedDirs, executor: &'static str) -> impl Fn(&Value) + Send + Sync + 'static {
    move |params| {
        let seen = Dirs::from_initialize(params, executor);
        *dirs.lock().unwrap_or_else(|p| p.into_inner()) = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runs_live_where_initialize_says() {
        let p =
            json!({"state_dir": "/s", "executor_dirs": {"shell": "/e/shell"}, "config_dir": "/c"});
        let d = Dirs::from_initialize(&p, "shell");
        assert_eq!(d.runs(), PathBuf::from("/e/shell"));
        assert_eq!(d.config_dir, Some(PathBuf::from("/c")));
        let d = Dirs::from_initialize(&json!({"state_dir": "/s", "executor_dirs": {}}), "shell");
        assert_eq!(d.runs(), PathBuf::from("/s/runs"));
        assert_eq!(Dirs::default().runs(), PathBuf::from("state/runs"));
    }
}
