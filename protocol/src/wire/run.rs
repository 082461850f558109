//! A run's environment and credential: `run.environment` (H→E, an environment layer
//! for each run of Work in a scope that uses the extension), `run.credential` (H→E, a
//! credential a run's own helper asks for over its toolbelt when git needs one; a
//! departure, see docs/decisions.md) and `segment.ended` (H→E, told after a segment
//! ends so the package revokes what it issued for it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Authority, ResourceBinding};

/// `run.environment` (H→E): the environment layer for one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnvironmentParams {
    /// Who the run is: its scope, Work, execution, epoch, binding and the binding's
    /// connection (as an operation's authority carries it).
    pub authority: Authority,
    /// Every connection the binding names (`connection` first, then `connections`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<String>,
    /// The binding's executor.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub executor: String,
    /// The binding's resource, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceBinding>,
    /// The directory of the host's `open-conduit` program (the toolbelt's `dir`), for
    /// a layer that names it (a git credential helper).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub toolbelt_dir: String,
}

/// Result of `run.environment`: variables to add; `GIT_CONFIG_*` entries are
/// appended to the run's own (renumbered), later layers win otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnvironmentResult {
    /// The variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Network hosts (names or addresses, no port) what the layer sets up needs: a
    /// sandboxed run's executor adds them to its sandbox's network needs (the git
    /// host the credential helper is for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// `run.credential` (H→E): a credential for a run's own git, asked by the helper the
/// package's environment layer named, over the run's toolbelt (git's credential
/// helper protocol fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCredentialParams {
    /// The asking run (checked by the toolbelt against a running execution).
    pub authority: Authority,
    /// Every connection the run's binding names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<String>,
    /// The binding's resource, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceBinding>,
    /// `https` or `http`.
    pub protocol: String,
    /// The host (and `:port`).
    pub host: String,
    /// The repository path (`owner/name.git`), as git sends it with `useHttpPath`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

/// Result of `run.credential`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCredentialResult {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
    /// When it stops working (RFC 3339), if it does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expires_at: String,
}

/// `segment.ended` (H→E, best effort, not awaited): a run's segment has ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SegmentEndedParams {
    /// Its scope, Work, execution and epoch.
    pub authority: Authority,
    /// How the segment ended (`completed`, `failed`, `waiting`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub outcome: String,
}

/// Result of `segment.ended`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEndedResult {}

/// Apply an environment layer to `env` as the spec's `ApplyEnv` does: the layer's
/// variables win, except git's `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/
/// `GIT_CONFIG_VALUE_<n>` pairs, which are appended after those `env` has
/// (renumbered), so one layer's git config never erases another's. A layer's pair
/// numbered at or past its own count, or a malformed count, is dropped.
pub fn apply_env(env: &mut BTreeMap<String, String>, layer: &BTreeMap<String, String>) {
    let count = |m: &BTreeMap<String, String>| -> usize {
        m.get(GIT_CONFIG_COUNT)
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let have = count(env);
    let adding = count(layer);
    for (k, v) in layer {
        if k == GIT_CONFIG_COUNT || k.starts_with(GIT_CONFIG_KEY) || k.starts_with(GIT_CONFIG_VALUE)
        {
            continue;
        }
        env.insert(k.clone(), v.clone());
    }
    let mut added = 0;
    for i in 0..adding {
        let (Some(key), Some(value)) = (
            layer.get(&format!("{GIT_CONFIG_KEY}{i}")),
            layer.get(&format!("{GIT_CONFIG_VALUE}{i}")),
        ) else {
            continue;
        };
        let n = have + added;
        env.insert(format!("{GIT_CONFIG_KEY}{n}"), key.clone());
        env.insert(format!("{GIT_CONFIG_VALUE}{n}"), value.clone());
        added += 1;
    }
    if have + added > 0 {
        env.insert(GIT_CONFIG_COUNT.to_owned(), (have + added).to_string());
    }
}

/// git's count of config pairs given through the environment.
pub const GIT_CONFIG_COUNT: &str = "GIT_CONFIG_COUNT";
/// The prefix of a pair's key variable.
pub const GIT_CONFIG_KEY: &str = "GIT_CONFIG_KEY_";
/// The prefix of a pair's value variable.
pub const GIT_CONFIG_VALUE: &str = "GIT_CONFIG_VALUE_";

/// `pairs` as git's environment config (`GIT_CONFIG_COUNT` and numbered pairs).
pub fn git_config_env(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        env.insert(format!("{GIT_CONFIG_KEY}{i}"), k.clone());
        env.insert(format!("{GIT_CONFIG_VALUE}{i}"), v.clone());
    }
    if !pairs.is_empty() {
        env.insert(GIT_CONFIG_COUNT.to_owned(), pairs.len().to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn git_config_pairs_are_appended_and_the_rest_replaced() {
        let mut env = map(&[
            ("A", "1"),
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "user.name"),
            ("GIT_CONFIG_VALUE_0", "bot"),
        ]);
        let mut layer = git_config_env(&[
            ("credential.helper".into(), "".into()),
            ("credential.helper".into(), "!x".into()),
        ]);
        layer.insert("A".into(), "2".into());
        apply_env(&mut env, &layer);
        assert_eq!(env["A"], "2");
        assert_eq!(env["GIT_CONFIG_COUNT"], "3");
        assert_eq!(env["GIT_CONFIG_KEY_0"], "user.name");
        assert_eq!(env["GIT_CONFIG_KEY_1"], "credential.helper");
        assert_eq!(env["GIT_CONFIG_VALUE_1"], "");
        assert_eq!(env["GIT_CONFIG_VALUE_2"], "!x");
    }

    #[test]
    fn a_pair_past_the_count_is_dropped() {
        let mut env = BTreeMap::new();
        let layer = map(&[
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "a.b"),
            ("GIT_CONFIG_VALUE_0", "1"),
            ("GIT_CONFIG_KEY_1", "c.d"),
            ("GIT_CONFIG_VALUE_1", "2"),
        ]);
        apply_env(&mut env, &layer);
        assert_eq!(env.len(), 3);
        assert_eq!(env["GIT_CONFIG_COUNT"], "1");
        assert!(!env.contains_key("GIT_CONFIG_KEY_1"));
    }
}
