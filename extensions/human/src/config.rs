//! The `human` entry's config, read by `Deserialize` types ([`sdk::config::parse`],
//! strict) and checked, so every error names its field as a JSON pointer into the
//! config (`/gates/1/operation`).

use crate::hours::Hours;
use protocol::manifest::{is_identifier, is_name};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;

pub use sdk::config::ConfigError;

/// The longest timeout of an ask or a gate, in seconds (30 days).
pub const MAX_TIMEOUT_S: u64 = 30 * 86_400;
/// How long an ask waits when neither the ask nor the entry says (7 days).
pub const DEFAULT_ASK_TIMEOUT_S: u64 = 7 * 86_400;
/// How long a gated call waits for a decision when its gate does not say (1 day).
pub const DEFAULT_GATE_TIMEOUT_S: u64 = 86_400;
/// The most approvers an entry names.
pub const MAX_APPROVERS: usize = 100;
/// The most gates an entry has.
pub const MAX_GATES: usize = 100;
/// The longest approver (`surface:name`), in bytes: the longest caller an action
/// carries.
pub const MAX_APPROVER_BYTES: usize = protocol::wire::MAX_ACTION_CALLER_BYTES;

/// What new Work of the scope waits for before its first attempt.
#[derive(Debug, Clone, Default)]
pub enum Admission {
    /// Nothing: Work starts as it comes.
    #[default]
    None,
    /// A person admits each Work.
    Person,
    /// Work is held outside these hours and let through when they open.
    Hours(Hours),
}

/// An operation that needs a person's approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// `pkg.op`, or `pkg.*` for every operation of the package.
    pub operation: String,
    /// How long a gated call waits for a decision, in seconds.
    pub timeout_s: u64,
}

impl Gate {
    /// Whether a call of `operation` passes through this gate.
    pub fn matches(&self, operation: &str) -> bool {
        match self.operation.strip_suffix(".*") {
            Some(package) => operation
                .split_once('.')
                .is_some_and(|(owner, op)| owner == package && !op.is_empty()),
            None => self.operation == operation,
        }
    }
}

/// A `human` entry's config.
#[derive(Debug, Clone, Default)]
pub struct HumanConfig {
    /// The people whose word counts (`cli:alice`); empty: any identified person.
    pub approvers: Vec<String>,
    /// The gated operations.
    pub gates: Vec<Gate>,
    /// What new Work waits for.
    pub admission: Admission,
    /// How long an ask waits by default, in seconds (0: no limit).
    pub ask_timeout_s: u64,
}

impl HumanConfig {
    /// The first gate a call of `operation` passes through.
    pub fn gate_for(&self, operation: &str) -> Option<&Gate> {
        self.gates.iter().find(|g| g.matches(operation))
    }

    /// Whether `caller` may decide: one of the approvers, or, with none named, any
    /// identified person (a non-empty caller).
    pub fn may_decide(&self, caller: &str) -> bool {
        if caller.trim().is_empty() {
            return false;
        }
        self.approvers.is_empty() || self.approvers.iter().any(|a| a == caller)
    }

    /// Who must decide, in words: `cli:alice or github:octocat`, or `a person`.
    pub fn who(&self) -> String {
        if self.approvers.is_empty() {
            "a person".to_string()
        } else {
            self.approvers.join(" or ")
        }
    }

    /// One line per thing the entry sets up, for `validate`'s describe.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "asks and approvals answered by {}; asks wait {}",
            self.who(),
            match self.ask_timeout_s {
                0 => "with no limit".to_string(),
                s => format!("at most {s}s"),
            }
        )];
        for g in &self.gates {
            lines.push(format!(
                "{} needs approval within {}s",
                g.operation, g.timeout_s
            ));
        }
        match &self.admission {
            Admission::None => {}
            Admission::Person => lines.push("new Work waits for a person to admit it".into()),
            Admission::Hours(h) => lines.push(format!("new Work starts only {}", h.describe())),
        }
        lines
    }
}

/// The config as written (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    approvers: Vec<String>,
    #[serde(default)]
    gates: Vec<RawGate>,
    #[serde(default)]
    admission: Option<RawAdmission>,
    #[serde(default)]
    ask_timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    operation: String,
    #[serde(default)]
    timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmission {
    #[serde(default)]
    by: Option<By>,
    #[serde(default)]
    hours: Option<crate::hours::RawHours>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum By {
    Person,
}

/// Checks a caller's shape: `surface:name`, the surface an identifier (`cli`,
/// `github`), the name non-empty, no blanks or control characters, at most
/// [`MAX_APPROVER_BYTES`].
pub fn check_person(person: &str) -> Result<(), String> {
    if person.len() > MAX_APPROVER_BYTES {
        return Err(format!(
            "{} bytes, over the limit of {MAX_APPROVER_BYTES}",
            person.len()
        ));
    }
    let Some((surface, name)) = person.split_once(':') else {
        return Err(format!(
            "{person:?} is not surface:name (cli:alice, github:octocat)"
        ));
    };
    if !is_identifier(surface) {
        return Err(format!(
            "{surface:?} is not a surface name (a package's name, or cli)"
        ));
    }
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{person:?}: the name after {surface}: must be non-empty, without blanks or control characters"
        ));
    }
    Ok(())
}

fn check_timeout(
    value: Option<u64>,
    default: u64,
    min: u64,
    pointer: &str,
) -> Result<u64, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > MAX_TIMEOUT_S {
        return Err(ConfigError::new(
            pointer,
            format!("{v} is outside {min}-{MAX_TIMEOUT_S} (seconds; at most 30 days)"),
        ));
    }
    Ok(v)
}

/// Checks a gate's operation: `pkg.op` (a dotted operation name) or `pkg.*`, not one
/// of `human`'s own.
fn check_gate_operation(op: &str) -> Result<(), String> {
    let package = match op.strip_suffix(".*") {
        Some(package) => {
            if !is_identifier(package) {
                return Err(format!("{op:?}: {package:?} is not a package name"));
            }
            package
        }
        None => {
            if !is_name(op) || !op.contains('.') {
                return Err(format!(
                    "{op:?} is not an operation of a package (github.open_pull_request) or all of a package's (github.*)"
                ));
            }
            op.split('.').next().unwrap_or_default()
        }
    };
    if package == crate::NAME {
        return Err(format!(
            "{op:?}: {}'s own operations are never gated",
            crate::NAME
        ));
    }
    Ok(())
}

/// Reads and checks a `human` entry's config.
pub fn parse_config(config: &Value) -> Result<HumanConfig, ConfigError> {
    // An entry written without a config is an entry with every default.
    let empty = Value::Object(serde_json::Map::new());
    let config = if config.is_null() { &empty } else { config };
    if !config.is_object() {
        return Err(ConfigError::whole("must be an object"));
    }
    let raw: RawConfig = sdk::config::parse(config)?;
    if raw.approvers.len() > MAX_APPROVERS {
        return Err(ConfigError::new(
            "/approvers",
            format!(
                "{} approvers, over the limit of {MAX_APPROVERS}",
                raw.approvers.len()
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, a) in raw.approvers.iter().enumerate() {
        let at = format!("/approvers/{i}");
        check_person(a).map_err(|e| ConfigError::new(&at, e))?;
        if !seen.insert(a.as_str()) {
            return Err(ConfigError::new(at, format!("{a:?} is named twice")));
        }
    }
    if raw.gates.len() > MAX_GATES {
        return Err(ConfigError::new(
            "/gates",
            format!("{} gates, over the limit of {MAX_GATES}", raw.gates.len()),
        ));
    }
    let mut gates = Vec::with_capacity(raw.gates.len());
    let mut ops = BTreeSet::new();
    for (i, g) in raw.gates.into_iter().enumerate() {
        let at = format!("/gates/{i}/operation");
        check_gate_operation(&g.operation).map_err(|e| ConfigError::new(&at, e))?;
        if !ops.insert(g.operation.clone()) {
            return Err(ConfigError::new(
                at,
                format!("{:?} is gated twice", g.operation),
            ));
        }
        let timeout_s = check_timeout(
            g.timeout_s,
            DEFAULT_GATE_TIMEOUT_S,
            1,
            &format!("/gates/{i}/timeout_s"),
        )?;
        gates.push(Gate {
            operation: g.operation,
            timeout_s,
        });
    }
    let admission = match raw.admission {
        None => Admission::None,
        Some(RawAdmission {
            by: Some(_),
            hours: Some(_),
        }) => {
            return Err(ConfigError::new(
                "/admission",
                "has both by and hours; give exactly one",
            ))
        }
        Some(RawAdmission {
            by: Some(By::Person),
            hours: None,
        }) => Admission::Person,
        Some(RawAdmission {
            by: None,
            hours: Some(h),
        }) => Admission::Hours(Hours::parse(h).map_err(|e| e.within("/admission/hours"))?),
        Some(RawAdmission {
            by: None,
            hours: None,
        }) => {
            return Err(ConfigError::new(
                "/admission",
                "gives neither by nor hours; give {\"by\": \"person\"} or {\"hours\": {...}}",
            ))
        }
    };
    let ask_timeout_s = check_timeout(
        raw.ask_timeout_s,
        DEFAULT_ASK_TIMEOUT_S,
        0,
        "/ask_timeout_s",
    )?;
    Ok(HumanConfig {
        approvers: raw.approvers,
        gates,
        admission,
        ask_timeout_s,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> (String, String) {
        let e = parse_config(&v).unwrap_err();
        (e.pointer, e.reason)
    }

    #[test]
    fn a_full_config_reads() {
        let c = parse_config(&json!({
            "approvers": ["cli:alice", "github:octocat"],
            "gates": [{"operation": "github.open_pull_request", "timeout_s": 600},
                      {"operation": "shell.*"}],
            "admission": {"by": "person"},
            "ask_timeout_s": 0
        }))
        .unwrap();
        assert_eq!(c.approvers, ["cli:alice", "github:octocat"]);
        assert_eq!(c.gates[0].timeout_s, 600);
        assert_eq!(c.gates[1].timeout_s, DEFAULT_GATE_TIMEOUT_S);
        assert!(matches!(c.admission, Admission::Person));
        assert_eq!(c.ask_timeout_s, 0);
        assert_eq!(c.who(), "cli:alice or github:octocat");
        assert_eq!(
            c.describe(),
            [
                "asks and approvals answered by cli:alice or github:octocat; asks wait with no limit",
                "github.open_pull_request needs approval within 600s",
                "shell.* needs approval within 86400s",
                "new Work waits for a person to admit it"
            ]
        );
        let d = parse_config(&Value::Null).unwrap();
        assert!(d.approvers.is_empty() && d.gates.is_empty());
        assert_eq!(d.ask_timeout_s, DEFAULT_ASK_TIMEOUT_S);
        assert!(matches!(d.admission, Admission::None));
        assert_eq!(d.who(), "a person");
    }

    #[test]
    fn gates_match_one_operation_or_a_whole_package() {
        let c = parse_config(&json!({"gates": [
            {"operation": "github.merge"}, {"operation": "shell.*"}]}))
        .unwrap();
        assert_eq!(
            c.gate_for("github.merge").unwrap().operation,
            "github.merge"
        );
        assert!(c.gate_for("github.comment").is_none());
        assert_eq!(c.gate_for("shell.run").unwrap().operation, "shell.*");
        assert!(c.gate_for("shellx.run").is_none());
        assert!(c.gate_for("shell").is_none());
    }

    #[test]
    fn approvers_decide_and_others_do_not() {
        let open = parse_config(&json!({})).unwrap();
        assert!(open.may_decide("cli:bob"));
        assert!(!open.may_decide(""));
        let closed = parse_config(&json!({"approvers": ["cli:alice"]})).unwrap();
        assert!(closed.may_decide("cli:alice"));
        assert!(!closed.may_decide("cli:bob"));
        assert!(!closed.may_decide("github:alice"));
    }

    #[test]
    fn each_error_names_its_pointer() {
        for (config, pointer, reason) in [
            (json!([]), "", "must be an object"),
            (
                json!({"approver": []}),
                "/approver",
                "unknown field (known: approvers, gates, admission, ask_timeout_s)",
            ),
            (
                json!({"approvers": ["alice"]}),
                "/approvers/0",
                "\"alice\" is not surface:name (cli:alice, github:octocat)",
            ),
            (
                json!({"approvers": ["cli:alice", "cli:alice"]}),
                "/approvers/1",
                "\"cli:alice\" is named twice",
            ),
            (
                json!({"approvers": ["cli:al ice"]}),
                "/approvers/0",
                "\"cli:al ice\": the name after cli: must be non-empty, without blanks or control characters",
            ),
            (
                json!({"gates": [{"operation": "github.merge"}, {"operation": "merge"}]}),
                "/gates/1/operation",
                "\"merge\" is not an operation of a package (github.open_pull_request) or all of a package's (github.*)",
            ),
            (
                json!({"gates": [{"operation": "human.ask"}]}),
                "/gates/0/operation",
                "\"human.ask\": human's own operations are never gated",
            ),
            (
                json!({"gates": [{"operation": "a.b"}, {"operation": "a.b"}]}),
                "/gates/1/operation",
                "\"a.b\" is gated twice",
            ),
            (
                json!({"gates": [{"operation": "a.b", "timeout_s": 0}]}),
                "/gates/0/timeout_s",
                "0 is outside 1-2592000 (seconds; at most 30 days)",
            ),
            (
                json!({"gates": [{"operation": "a.b", "timeout_s": "1h"}]}),
                "/gates/0/timeout_s",
                "must be a whole, non-negative number",
            ),
            (json!({"gates": [{}]}), "/gates/0/operation", "is required"),
            (
                json!({"ask_timeout_s": 2_592_001}),
                "/ask_timeout_s",
                "2592001 is outside 0-2592000 (seconds; at most 30 days)",
            ),
            (
                json!({"admission": {"by": "robot"}}),
                "/admission/by",
                "must be person",
            ),
            (
                json!({"admission": {}}),
                "/admission",
                "gives neither by nor hours; give {\"by\": \"person\"} or {\"hours\": {...}}",
            ),
            (
                json!({"admission": {"by": "person", "hours": {"days": ["mon"], "from": "09:00", "to": "17:00"}}}),
                "/admission",
                "has both by and hours; give exactly one",
            ),
            (
                json!({"admission": {"hours": {"days": ["mon"], "from": "9h", "to": "17:00"}}}),
                "/admission/hours/from",
                "\"9h\" is not a time of day HH:MM (00:00 to 23:59)",
            ),
        ] {
            let (p, r) = err(config.clone());
            assert_eq!((p.as_str(), r.as_str()), (pointer, reason), "{config}");
        }
        let many: Vec<String> = (0..=MAX_APPROVERS).map(|i| format!("cli:p{i}")).collect();
        assert_eq!(
            err(json!({"approvers": many})),
            (
                "/approvers".to_string(),
                "101 approvers, over the limit of 100".to_string()
            )
        );
        let long = format!("cli:{}", "a".repeat(MAX_APPROVER_BYTES));
        assert_eq!(
            err(json!({"approvers": [long]})).1,
            "204 bytes, over the limit of 200"
        );
    }
}
