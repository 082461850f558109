//! The create_work confinement rule (the toolbelt's "create_work and confinement"):
//! which bindings a run may name in `create_work`, given how its own binding and
//! the named one are confined.

use serde_json::Value;

/// The type of a binding's `field` (`sandbox` or `container`): `None` when the binding
/// has none, `Some(None)` when it has one that names no type.
fn confinement<'a>(binding: &'a Value, field: &str) -> Option<Option<&'a str>> {
    binding
        .get(field)
        .map(|c| c.get("type").and_then(Value::as_str))
}

/// Why a run of binding `mine_name` (configured as `mine`; `None` when it is no longer
/// configured) may not create Work on binding `named_name` (`named`): a run with a
/// sandbox (or a container) may name only a binding with a sandbox (container) of
/// the same type, unless its binding lists the named one in
/// `allow_unconfined_create_work`. `None` when it may. The binding itself may always
/// be named; a binding whose confinement cannot be read is refused (fail closed).
pub(super) fn create_work_refusal(
    mine_name: &str,
    mine: Option<&Value>,
    named_name: &str,
    named: &Value,
) -> Option<String> {
    if mine_name == named_name {
        return None;
    }
    let Some(mine) = mine else {
        return Some(format!(
            "binding {mine_name:?} of this run is no longer configured, so how confined it \
             is is unknown: create_work may name no other binding"
        ));
    };
    let allowed = match protocol::config::allowed_unconfined(mine) {
        Ok(a) => a,
        Err(e) => {
            return Some(format!(
                "binding {mine_name:?}'s {} is not {e}: create_work may name no other binding",
                protocol::config::ALLOW_UNCONFINED_CREATE_WORK
            ))
        }
    };
    if allowed.iter().any(|a| a == named_name) {
        return None;
    }
    for field in ["sandbox", "container"] {
        let Some(want) = confinement(mine, field) else {
            continue;
        };
        let have = confinement(named, field);
        if want.is_some() && have == Some(want) {
            continue;
        }
        let theirs = match have {
            None => format!("has no {field}"),
            Some(None) => format!("has a {field} that names no type"),
            Some(Some(t)) => format!("has a {field} of type {t:?}"),
        };
        let ours = match want {
            Some(t) => format!("a {field} of type {t:?}"),
            None => format!("a {field} that names no type"),
        };
        return Some(format!(
            "binding {mine_name:?} of this run has {ours}, and binding {named_name:?} {theirs}: \
             Work created from a confined run must run at least as confined (a {field} of \
             the same type), unless binding {mine_name:?} lists {named_name:?} in its {}",
            protocol::config::ALLOW_UNCONFINED_CREATE_WORK
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_confined_run_creates_work_only_on_bindings_as_confined() {
        let srt = json!({"name": "run", "executor": "shell", "sandbox": {"type": "srt"}});
        let open = json!({"name": "open", "executor": "shell"});
        let other = json!({"name": "other", "executor": "shell", "sandbox": {"type": "box"}});
        let same = json!({"name": "same", "executor": "claude-code",
                          "sandbox": {"type": "srt", "config": {"allowed_domains": ["x"]}}});
        // Its own binding, and one with a sandbox of the same type.
        assert_eq!(create_work_refusal("run", Some(&srt), "run", &srt), None);
        assert_eq!(create_work_refusal("run", Some(&srt), "same", &same), None);
        // None, or another type: refused, naming both bindings and the rule.
        let why = create_work_refusal("run", Some(&srt), "open", &open).unwrap();
        assert!(
            why.contains("binding \"run\" of this run has a sandbox of type \"srt\"")
                && why.contains("binding \"open\" has no sandbox")
                && why.contains("allow_unconfined_create_work"),
            "{why}"
        );
        let why = create_work_refusal("run", Some(&srt), "other", &other).unwrap();
        assert!(why.contains("has a sandbox of type \"box\""), "{why}");
        // An unconfined run may name any binding.
        assert_eq!(create_work_refusal("open", Some(&open), "run", &srt), None);
        // A container is held to the same rule; a sandbox that names no type, or a
        // caller no longer configured, fails closed.
        let boxed = json!({"name": "c", "executor": "shell", "container": {"type": "docker"}});
        assert!(create_work_refusal("c", Some(&boxed), "open", &open).is_some());
        let untyped = json!({"name": "u", "executor": "shell", "sandbox": null});
        assert!(create_work_refusal("u", Some(&untyped), "open", &open).is_some());
        assert!(create_work_refusal("u", Some(&untyped), "run", &srt).is_some());
        assert!(create_work_refusal("gone", None, "open", &open).is_some());
        // The operator's opt-in, for exactly the bindings it names.
        let mut opted = srt.clone();
        opted["allow_unconfined_create_work"] = json!(["open"]);
        assert_eq!(
            create_work_refusal("run", Some(&opted), "open", &open),
            None
        );
        assert!(create_work_refusal("run", Some(&opted), "other", &other).is_some());
        opted["allow_unconfined_create_work"] = json!("open");
        assert!(create_work_refusal("run", Some(&opted), "open", &open).is_some());
    }
}
