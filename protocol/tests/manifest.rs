//! The manifest's examples and validation rules: one test per rule, each
//! starting from a valid example and breaking exactly that rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use protocol::manifest::{
    load_manifest, parse_manifest, Manifest, ManifestError, PayloadStatus, MANIFEST_FILE,
};
use serde_json::{json, Value};

fn example(file: &str) -> Value {
    let path = format!("{}/testdata/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn support() -> Value {
    example("ingress-support.json")
}

fn runner() -> Value {
    example("executor-workspace.json")
}

fn reports() -> Value {
    example("scheduled-reporting.json")
}

fn parse(v: &Value) -> Result<Manifest, ManifestError> {
    parse_manifest(&serde_json::to_vec(v).unwrap())
}

fn valid(v: &Value) -> Manifest {
    match parse(v) {
        Ok(m) => m,
        Err(e) => panic!("expected a valid manifest, got {e}"),
    }
}

/// Asserts the manifest breaks `rule`, with a message naming `needle`.
fn assert_invalid(v: &Value, rule: &str, needle: &str) {
    match parse(v) {
        Err(ManifestError::Invalid { rule: r, message }) => {
            assert_eq!(r, rule, "wrong rule; message: {message}");
            assert!(
                message.contains(needle),
                "message {message:?} does not name {needle:?}"
            );
            let shown = parse(v).unwrap_err().to_string();
            assert!(shown.contains(rule), "{shown:?} does not show the rule");
        }
        other => panic!("expected rule {rule}, got {other:?}"),
    }
}

/// Asserts the manifest needs a newer Open Conduit because of `field`.
fn assert_newer(v: &Value, kind: &str, field: &str, location: &str) {
    match parse(v) {
        Err(e @ ManifestError::NewerManifest { .. }) => {
            let shown = e.to_string();
            let ManifestError::NewerManifest {
                kind: k,
                field: f,
                location: l,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(k, kind);
            assert_eq!(f, field);
            assert!(l.contains(location), "location {l:?} lacks {location:?}");
            assert!(
                shown.starts_with("the package needs a newer Open Conduit: unknown"),
                "{shown}"
            );
            assert!(shown.contains(&format!("`{field}`")), "{shown}");
        }
        other => panic!("expected NewerManifest for {field}, got {other:?}"),
    }
}

fn push(v: &mut Value, path: &[&str], item: Value) {
    let mut cur = v;
    for key in path {
        cur = &mut cur[*key];
    }
    if cur.is_null() {
        *cur = json!([]);
    }
    cur.as_array_mut().unwrap().push(item);
}

// ---------------------------------------------------------------------------
// Examples

#[test]
fn the_examples_validate() {
    let s = valid(&support());
    assert_eq!(s.name, "support");
    assert!(s.provides.executors.is_empty() && s.provides.resources.is_empty());
    let r = valid(&runner());
    assert_eq!(
        r.provides.executors[0].controls,
        ["stop", "forget", "attach"]
    );
    let p = valid(&reports());
    assert!(p.provides.operations.iter().any(|o| o.commit));
}

#[test]
fn a_manifest_round_trips_through_json() {
    for v in [support(), runner(), reports()] {
        let m = valid(&v);
        let again = parse_manifest(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(m, again);
    }
}

#[test]
fn defaults_apply() {
    let m = valid(&json!({"protocol": [1], "name": "tiny", "version": "1", "command": ["tiny"]}));
    assert_eq!(m.kv_version, 0);
    assert!(m.permissions.is_empty() && m.provides.operations.is_empty());
    assert_eq!(m.common_protocol(), Some(1));
}

// ---------------------------------------------------------------------------
// Malformed and newer manifests

#[test]
fn malformed_json_is_malformed() {
    assert!(matches!(
        parse_manifest(b"{\"protocol\": [1], "),
        Err(ManifestError::Malformed(_))
    ));
    let mut v = support();
    v.as_object_mut().unwrap().remove("name");
    let err = parse(&v).unwrap_err();
    assert!(matches!(err, ManifestError::Malformed(_)), "{err:?}");
    assert!(err.to_string().contains("name"), "{err}");
}

#[test]
fn an_unknown_field_needs_a_newer_open_conduit() {
    let mut v = support();
    v["provides"]["operations"][0]["idempotent"] = json!(true);
    assert_newer(
        &v,
        "field",
        "idempotent",
        "provides.operations[0].idempotent",
    );
}

#[test]
fn a_storage_field_is_rejected_as_unknown() {
    let mut v = support();
    v["storage"] = json!({"kind": "sqlite"});
    assert_newer(&v, "field", "storage", "storage");
}

#[test]
fn a_semantic_executor_label_is_rejected_as_unknown() {
    let mut v = runner();
    v["provides"]["executors"][0]["labels"]["coding"] = json!(true);
    assert_newer(&v, "field", "coding", "provides.executors[0].labels.coding");
}

#[test]
fn an_unknown_permission_needs_a_newer_open_conduit() {
    let mut v = support();
    push(&mut v, &["permissions"], json!("telemetry.export"));
    assert_newer(&v, "permission", "telemetry.export", "permissions[1]");
}

#[test]
fn an_unknown_executor_control_needs_a_newer_open_conduit() {
    let mut v = runner();
    v["provides"]["executors"][0]["controls"]
        .as_array_mut()
        .unwrap()
        .push(json!("pause"));
    assert_newer(
        &v,
        "executor control",
        "pause",
        "provides.executors[0].controls[3]",
    );
}

// ---------------------------------------------------------------------------
// Package-level rules

#[test]
fn protocol_must_include_a_supported_version() {
    let mut v = support();
    v["protocol"] = json!([2, 3]);
    assert_invalid(&v, "protocol_unsupported", "protocol");
}

#[test]
fn name_must_be_an_identifier() {
    let mut v = support();
    v["name"] = json!("Support Desk");
    assert_invalid(&v, "name_invalid", "name: `Support Desk`");
}

#[test]
fn name_must_not_be_reserved() {
    for reserved in ["core", "execution", "manual", "os", "open-conduit"] {
        let v = json!({"protocol": [1], "name": reserved, "version": "1", "command": ["x"]});
        assert_invalid(&v, "name_reserved", &format!("`{reserved}` is reserved"));
    }
}

#[test]
fn version_must_be_one_line() {
    let mut v = support();
    v["version"] = json!("");
    assert_invalid(&v, "version_invalid", "version");
}

#[test]
fn title_is_at_most_64_characters() {
    let mut v = support();
    v["title"] = json!("é".repeat(64));
    valid(&v);
    v["title"] = json!("x".repeat(65));
    assert_invalid(&v, "title_invalid", "title: longer than 64 characters");
}

#[test]
fn title_is_one_line() {
    let mut v = support();
    v["title"] = json!("Support\nchat");
    assert_invalid(&v, "title_invalid", "title");
}

#[test]
fn command_must_not_be_empty() {
    let mut v = support();
    v["command"] = json!([]);
    assert_invalid(&v, "command_empty", "command");
}

#[test]
fn command_stays_inside_the_directory() {
    for bad in ["../support", "/usr/bin/support", "bin/../../support"] {
        let mut v = support();
        v["command"] = json!([bad]);
        assert_invalid(&v, "command_outside", "command[0]");
    }
}

#[test]
fn the_host_run_command_is_allowed() {
    let mut v = support();
    v["command"] = json!(["open-conduit", "extension-run", "support"]);
    assert!(valid(&v).is_host_run());
}

#[test]
fn playbooks_stay_inside_the_directory() {
    let mut v = support();
    v["playbooks"] = json!("../shared/playbooks");
    assert_invalid(&v, "playbooks_outside", "playbooks");
}

#[test]
fn kv_version_is_not_negative() {
    let mut v = support();
    v["kv_version"] = json!(-1);
    assert_invalid(&v, "kv_version_negative", "kv_version");
}

#[test]
fn external_stores_name_a_declared_connection_type() {
    let mut v = reports();
    v["external_stores"][0]["connection_type"] = json!("warehouse");
    assert_invalid(
        &v,
        "external_store_connection",
        "external_stores[0].connection_type",
    );
}

#[test]
fn permissions_are_distinct() {
    let mut v = support();
    push(&mut v, &["permissions"], json!("telemetry.capture"));
    assert_invalid(&v, "permission_duplicate", "permissions[1]");
}

// ---------------------------------------------------------------------------
// Names

#[test]
fn dotted_names_are_under_the_extension_name() {
    let mut v = support();
    v["provides"]["operations"][0]["name"] = json!("chat.reply");
    assert_invalid(&v, "name_namespace", "provides.operations[0].name");
}

#[test]
fn identifier_names_are_the_name_or_name_dash() {
    let mut v = support();
    v["provides"]["work_kinds"][0]["name"] = json!("supporter");
    assert_invalid(&v, "name_namespace", "provides.work_kinds[0].name");
    v["provides"]["work_kinds"][0]["name"] = json!("support");
    valid(&v);
}

#[test]
fn names_have_name_syntax() {
    let mut v = support();
    v["provides"]["tasks"][0]["name"] = json!("support..converge");
    assert_invalid(&v, "name_syntax", "provides.tasks[0].name");
}

#[test]
fn names_are_not_declared_twice() {
    let mut v = support();
    push(
        &mut v,
        &["provides", "families"],
        json!({"name": "support.reaction", "re_derivable": true}),
    );
    assert_invalid(&v, "name_duplicate", "provides.families[2].name");
}

// ---------------------------------------------------------------------------
// Families and types

#[test]
fn a_non_re_derivable_family_states_its_loss() {
    let mut v = support();
    v["provides"]["families"][0]
        .as_object_mut()
        .unwrap()
        .remove("loss");
    assert_invalid(&v, "family_loss_missing", "provides.families[0].loss");
}

#[test]
fn a_re_derivable_family_states_no_loss() {
    let mut v = support();
    v["provides"]["families"][1]["loss"] = json!("nothing");
    assert_invalid(&v, "family_loss_forbidden", "provides.families[1].loss");
}

#[test]
fn an_ingress_type_declares_families() {
    let mut v = support();
    v["provides"]["extensions"][0]["families"] = json!([]);
    assert_invalid(&v, "ingress_families", "provides.extensions[0].families");
}

#[test]
fn a_type_names_declared_families() {
    let mut v = support();
    v["provides"]["extensions"][0]["families"] = json!(["support.message", "support.edit"]);
    assert_invalid(
        &v,
        "family_undeclared",
        "provides.extensions[0].families[1]",
    );
}

#[test]
fn webhooks_need_an_ingress_type() {
    let mut v = support();
    v["provides"]["extensions"][0]["ingress"] = json!(false);
    assert_invalid(
        &v,
        "webhooks_need_ingress",
        "provides.extensions[0].webhooks",
    );
}

#[test]
fn work_kinds_need_a_route_handler() {
    let mut v = support();
    v["provides"]["work_kinds"][0]["handler"] = json!("support-other");
    assert_invalid(&v, "work_kind_handler", "provides.work_kinds[0].handler");
}

// ---------------------------------------------------------------------------
// Operations

#[test]
fn operation_kinds_are_handler_wait_or_emit() {
    let mut v = support();
    v["provides"]["operations"][1]["kind"] = json!("query");
    assert_invalid(&v, "operation_kind", "provides.operations[1].kind");
}

#[test]
fn only_emit_may_commit() {
    let mut v = support();
    v["provides"]["operations"][0]["commit"] = json!(true);
    assert_invalid(&v, "operation_commit", "provides.operations[0].commit");
}

#[test]
fn only_a_handler_serves_a_capability() {
    let mut v = reports();
    v["provides"]["operations"][1]["serves"] = json!("jobs.await");
    assert_invalid(&v, "operation_serves", "provides.operations[1].serves");
}

#[test]
fn a_capability_is_named_like_an_operation() {
    let mut v = support();
    v["provides"]["operations"][2]["serves"] = json!("history");
    assert_invalid(&v, "operation_serves", "provides.operations[2].serves");
}

#[test]
fn an_operation_summary_is_at_most_200_bytes() {
    let mut v = support();
    v["provides"]["operations"][2]["summary"] = json!("x".repeat(200));
    valid(&v);
    v["provides"]["operations"][2]["summary"] = json!("x".repeat(201));
    assert_invalid(
        &v,
        "operation_summary",
        "provides.operations[2].summary: longer than 200 bytes",
    );
}

#[test]
fn an_operation_summary_is_one_line() {
    let mut v = support();
    v["provides"]["operations"][0]["summary"] = json!("Reply\nin the thread");
    assert_invalid(&v, "operation_summary", "provides.operations[0].summary");
}

#[test]
fn operation_guidance_is_at_most_4096_bytes() {
    let mut v = support();
    v["provides"]["operations"][0]["guidance"] = json!("g".repeat(4097));
    assert_invalid(
        &v,
        "operation_guidance",
        "provides.operations[0].guidance: longer than 4096 bytes",
    );
}

#[test]
fn operation_input_is_a_json_object() {
    let mut v = support();
    v["provides"]["operations"][0]["input"] = json!(["text"]);
    assert_invalid(&v, "operation_input", "provides.operations[0].input");
}

#[test]
fn targets_are_wait_target_kinds() {
    let mut v = reports();
    v["provides"]["targets"] = json!(["Job:"]);
    assert_invalid(&v, "target_kind", "provides.targets[0]");
}

#[test]
fn targets_are_declared_once() {
    let mut v = reports();
    v["provides"]["targets"] = json!(["job", "job"]);
    assert_invalid(&v, "target_duplicate", "provides.targets[1]");
}

#[test]
fn a_dependency_filter_needs_a_wait_operation() {
    let mut v = reports();
    v["provides"]["operations"][1]["kind"] = json!("handler");
    assert_invalid(
        &v,
        "dependency_filter_needs_wait",
        "provides.dependency_filter",
    );
}

#[test]
fn entry_gated_needs_operations() {
    let mut v = support();
    v["provides"]["operations"] = json!([]);
    v["provides"]["toolsets"] = json!([]);
    valid(&v);
    v["provides"]["entry_gated"] = json!(true);
    assert_invalid(&v, "entry_gated_needs_operations", "provides.entry_gated");
}

#[test]
fn entry_gated_needs_an_extension_type() {
    let mut v = reports();
    v["provides"]["extensions"] = json!([]);
    assert_invalid(&v, "entry_gated_needs_type", "provides.entry_gated");
}

// ---------------------------------------------------------------------------
// Toolsets

#[test]
fn a_toolset_is_named_under_the_extension() {
    for bad in ["responder", "support", "chat.responder"] {
        let mut v = support();
        v["provides"]["toolsets"][0]["name"] = json!(bad);
        assert_invalid(&v, "toolset_name", "provides.toolsets[0].name");
    }
}

#[test]
fn a_toolset_is_declared_once() {
    let mut v = support();
    let copy = v["provides"]["toolsets"][0].clone();
    push(&mut v, &["provides", "toolsets"], copy);
    assert_invalid(&v, "toolset_duplicate", "provides.toolsets[1].name");
}

#[test]
fn a_toolset_grants_an_operation() {
    let mut v = support();
    v["provides"]["toolsets"][0]["operations"] = json!([]);
    assert_invalid(&v, "toolset_empty", "provides.toolsets[0].operations");
}

#[test]
fn a_toolset_grants_declared_or_builtin_operations() {
    let mut v = support();
    v["provides"]["toolsets"][0]["operations"][0]["name"] = json!("support.delete");
    assert_invalid(
        &v,
        "toolset_operation_unknown",
        "provides.toolsets[0].operations[0].name",
    );
}

#[test]
fn a_toolset_grants_each_operation_once() {
    let mut v = support();
    v["provides"]["toolsets"][0]["operations"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "read_context"}));
    assert_invalid(
        &v,
        "toolset_operation_duplicate",
        "provides.toolsets[0].operations[5].name",
    );
}

// ---------------------------------------------------------------------------
// Executors and providers

#[test]
fn toolbelt_labels_are_none_cli_mcp_or_sdk() {
    let mut v = runner();
    v["provides"]["executors"][0]["labels"]["toolbelt"] = json!("grpc");
    assert_invalid(
        &v,
        "toolbelt_label",
        "provides.executors[0].labels.toolbelt",
    );
}

#[test]
fn executor_controls_are_distinct() {
    let mut v = runner();
    v["provides"]["executors"][0]["controls"] = json!(["stop", "stop"]);
    assert_invalid(
        &v,
        "executor_control_duplicate",
        "provides.executors[0].controls[1]",
    );
}

#[test]
fn executor_pool_is_empty_or_jobs() {
    let mut v = runner();
    v["provides"]["executors"][0]["pool"] = json!("agents");
    assert_invalid(&v, "executor_pool", "provides.executors[0].pool");
}

#[test]
fn launch_names_need_the_interactive_launch_control() {
    let mut v = runner();
    v["provides"]["executors"][0]["launch_names"] = json!(["run"]);
    assert_invalid(
        &v,
        "launch_names_control",
        "provides.executors[0].launch_names",
    );
}

#[test]
fn launch_names_are_names() {
    let mut v = runner();
    v["provides"]["executors"][0]["controls"] = json!(["stop", "interactive_launch"]);
    v["provides"]["executors"][0]["launch_names"] = json!(["run"]);
    valid(&v);
    v["provides"]["executors"][0]["launch_names"] = json!(["Run It"]);
    assert_invalid(
        &v,
        "launch_name_invalid",
        "provides.executors[0].launch_names[0]",
    );
}

#[test]
fn launch_names_are_not_repeated() {
    let mut v = runner();
    v["provides"]["executors"][0]["controls"] = json!(["interactive_launch"]);
    v["provides"]["executors"][0]["launch_names"] = json!(["run", "run"]);
    assert_invalid(
        &v,
        "launch_name_duplicate",
        "provides.executors[0].launch_names[1]",
    );
    v["provides"]["executors"][0]["launch_names"] = json!(["runner"]);
    assert_invalid(
        &v,
        "launch_name_duplicate",
        "provides.executors[0].launch_names[0]",
    );
}

#[test]
fn resource_modes_are_shared_work_or_fresh() {
    let mut v = runner();
    v["provides"]["resources"][0]["modes"] = json!(["shared", "private"]);
    assert_invalid(&v, "resource_modes", "provides.resources[0].modes[1]");
}

#[test]
fn resource_modes_are_distinct() {
    let mut v = runner();
    v["provides"]["resources"][0]["modes"] = json!(["work", "work"]);
    assert_invalid(&v, "resource_modes", "provides.resources[0].modes[1]");
}

#[test]
fn task_intervals_are_at_least_one_second() {
    let mut v = support();
    v["provides"]["tasks"][0]["interval_s"] = json!(0);
    assert_invalid(&v, "task_interval", "provides.tasks[0].interval_s");
}

// ---------------------------------------------------------------------------
// Settings and fields

#[test]
fn settings_are_distinct_fields() {
    let mut v = support();
    v["provides"]["extensions"][0]["settings"]
        .as_array_mut()
        .unwrap()
        .push(json!({"field": "team", "type": "string"}));
    assert_invalid(
        &v,
        "setting_duplicate",
        "provides.extensions[0].settings[2].field",
    );
}

#[test]
fn settings_are_top_level_fields() {
    let mut v = support();
    v["provides"]["extensions"][0]["settings"][0]["field"] = json!("team.id");
    assert_invalid(
        &v,
        "setting_field",
        "provides.extensions[0].settings[0].field",
    );
}

#[test]
fn setting_types_are_known() {
    let mut v = support();
    v["provides"]["extensions"][0]["settings"][0]["type"] = json!("object");
    assert_invalid(
        &v,
        "setting_type",
        "provides.extensions[0].settings[0].type",
    );
}

#[test]
fn a_setting_default_has_its_type() {
    let mut v = support();
    v["provides"]["extensions"][0]["settings"][1]["default"] = json!("yes");
    assert_invalid(
        &v,
        "setting_default",
        "provides.extensions[0].settings[1].default",
    );
}

#[test]
fn resource_settings_follow_the_same_rules() {
    let mut v = runner();
    v["provides"]["resources"][0]["settings"][1]["default"] = json!("fifty");
    assert_invalid(
        &v,
        "setting_default",
        "provides.resources[0].settings[1].default",
    );
}

#[test]
fn describe_names_its_fields() {
    let mut v = support();
    v["provides"]["extensions"][0]["describe"]["detail"] = json!("");
    assert_invalid(
        &v,
        "describe_fields",
        "provides.extensions[0].describe.detail",
    );
}

#[test]
fn fields_are_distinct() {
    let mut v = support();
    v["provides"]["extensions"][0]["fields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "team"}));
    assert_invalid(
        &v,
        "field_duplicate",
        "provides.extensions[0].fields[3].name",
    );
}

#[test]
fn a_connection_secret_key_may_share_a_config_field_name() {
    let mut v = support();
    v["provides"]["connections"][0]["fields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "api_url", "secret": true}));
    valid(&v);
}

#[test]
fn field_help_is_one_line_of_at_most_400_bytes() {
    let mut v = support();
    v["provides"]["connections"][0]["fields"][0]["help"] = json!("h".repeat(401));
    assert_invalid(
        &v,
        "field_help",
        "provides.connections[0].fields[0].help: longer than 400 bytes",
    );
    v["provides"]["connections"][0]["fields"][0]["help"] = json!("two\nlines");
    assert_invalid(&v, "field_help", "provides.connections[0].fields[0].help");
}

#[test]
fn a_required_field_has_no_default() {
    let mut v = support();
    v["provides"]["extensions"][0]["fields"][0]["default"] = json!("T123");
    assert_invalid(
        &v,
        "field_required_default",
        "provides.extensions[0].fields[0].default",
    );
}

#[test]
fn field_options_include_the_default() {
    let mut v = support();
    v["provides"]["connections"][0]["fields"][1]["default"] = json!("polling");
    assert_invalid(
        &v,
        "field_options",
        "provides.connections[0].fields[1].options",
    );
}

#[test]
fn field_options_are_distinct_and_non_empty() {
    let mut v = support();
    v["provides"]["connections"][0]["fields"][1]["options"] = json!(["webhook", "webhook"]);
    assert_invalid(
        &v,
        "field_options",
        "provides.connections[0].fields[1].options[1]",
    );
    v["provides"]["connections"][0]["fields"][1]["options"] = json!(["webhook", ""]);
    assert_invalid(
        &v,
        "field_options",
        "provides.connections[0].fields[1].options[1]",
    );
}

#[test]
fn only_a_connection_type_has_secret_fields() {
    let mut v = runner();
    v["provides"]["executors"][0]["fields"][0]["secret"] = json!(true);
    assert_invalid(&v, "field_secret", "provides.executors[0].fields[0].secret");
}

#[test]
fn a_field_default_matches_its_settings_default() {
    let mut v = support();
    v["provides"]["extensions"][0]["fields"][1]["default"] = json!("false");
    assert_invalid(
        &v,
        "field_default_mismatch",
        "provides.extensions[0].fields[1].default",
    );
}

// ---------------------------------------------------------------------------
// Schemas, checks, probes, pages

#[test]
fn schema_bases_are_dotted_names_under_the_extension() {
    for bad in ["chat.message", "support", "supportx.message"] {
        let mut v = support();
        v["provides"]["schemas"][0]["base"] = json!(bad);
        assert_invalid(&v, "schema_base", "provides.schemas[0].base");
    }
}

#[test]
fn schema_bases_have_no_version_suffix() {
    let mut v = support();
    v["provides"]["schemas"][0]["base"] = json!("support.message.v2");
    assert_invalid(&v, "schema_base", "version suffix");
}

#[test]
fn schema_versions_are_positive() {
    let mut v = support();
    v["provides"]["schemas"][0]["versions"] = json!([0, 1]);
    assert_invalid(&v, "schema_versions", "provides.schemas[0].versions[0]");
}

#[test]
fn schema_versions_strictly_increase() {
    for bad in [json!([2, 1]), json!([1, 1])] {
        let mut v = support();
        v["provides"]["schemas"][0]["versions"] = bad;
        assert_invalid(&v, "schema_versions", "provides.schemas[0].versions[1]");
    }
    let mut v = support();
    v["provides"]["schemas"][0]["versions"] = json!([]);
    assert_invalid(&v, "schema_versions", "provides.schemas[0].versions");
}

#[test]
fn check_names_are_identifiers() {
    let mut v = support();
    v["provides"]["checks"][1]["name"] = json!("Token Check");
    assert_invalid(&v, "name_syntax", "provides.checks[1].name");
}

#[test]
fn probe_summaries_are_one_line() {
    let mut v = runner();
    v["provides"]["probes"][0]["summary"] = json!("a\nb");
    assert_invalid(&v, "probe_summary", "provides.probes[0].summary");
}

fn with_page(mut v: Value) -> Value {
    v["provides"]["actions"] = json!(true);
    v["provides"]["panels"] = json!(true);
    v["provides"]["pages"] = json!([{
        "id": "desk", "title": "Support desk", "entry": "support",
        "work_kind": "support-thread", "start": "open", "compose": ["say"], "route": "support"
    }]);
    v
}

#[test]
fn a_page_needs_actions_and_panels() {
    let mut v = with_page(support());
    valid(&v);
    v["provides"]["actions"] = json!(false);
    assert_invalid(&v, "page_actions", "provides.pages[0]");
    let mut v = with_page(support());
    v["provides"]["panels"] = json!(false);
    assert_invalid(
        &v,
        "page_panels",
        "provides.pages[0]: a page is drawn from the package's panels",
    );
}

#[test]
fn a_page_names_its_own_entry_kind_and_route() {
    let mut v = with_page(support());
    v["provides"]["pages"][0]["work_kind"] = json!("support-other");
    assert_invalid(&v, "page_reference", "provides.pages[0].work_kind");
    let mut v = with_page(support());
    v["provides"]["pages"][0]["entry"] = json!("other");
    assert_invalid(&v, "page_reference", "provides.pages[0].entry");
    let mut v = with_page(support());
    v["provides"]["pages"][0]["route"] = json!("other");
    assert_invalid(&v, "page_reference", "provides.pages[0].route");
}

#[test]
fn a_page_of_panels_needs_no_session() {
    // Only id, title and entry: a page drawn from the package's page panels.
    let mut v = with_page(support());
    v["provides"]["pages"] = json!([{"id": "asks", "title": "What waits for a person",
                                     "entry": "support"}]);
    let m = valid(&v);
    assert_eq!(m.provides.pages[0].work_kind, None);
    assert_eq!(m.provides.pages[0].start, None);
    v["provides"]["pages"][0]["start"] = json!("");
    assert_invalid(
        &v,
        "page_actions",
        "provides.pages[0].start: must name an action",
    );
    v["provides"]["pages"][0]["start"] = json!("open");
    v["provides"]["pages"][0]["compose"] = json!(["say\nmore"]);
    assert_invalid(&v, "page_actions", "provides.pages[0].compose[0]");
}

#[test]
fn page_ids_are_distinct_identifiers() {
    for bad in ["Desk", "desk.one", "", "1desk"] {
        let mut v = with_page(support());
        v["provides"]["pages"][0]["id"] = json!(bad);
        assert_invalid(&v, "name_syntax", "provides.pages[0].id");
    }
    let mut v = with_page(support());
    let page = v["provides"]["pages"][0].clone();
    v["provides"]["pages"].as_array_mut().unwrap().push(page);
    assert_invalid(&v, "name_duplicate", "provides.pages[1].id");
}

#[test]
fn page_titles_and_summaries_are_one_line() {
    let mut v = with_page(support());
    v["provides"]["pages"][0]["title"] = json!("x".repeat(65));
    assert_invalid(&v, "page_title", "provides.pages[0].title");
    let mut v = with_page(support());
    v["provides"]["pages"][0]["summary"] = json!("a\nb");
    assert_invalid(&v, "page_summary", "provides.pages[0].summary");
}

#[test]
fn an_unknown_page_field_needs_a_newer_open_conduit() {
    let mut v = with_page(support());
    v["provides"]["pages"][0]["layout"] = json!("wide");
    assert!(parse(&v).unwrap_err().needs_newer());
}

#[test]
fn there_are_at_most_four_pages() {
    let mut v = with_page(support());
    let page = v["provides"]["pages"][0].clone();
    for i in 0..4 {
        let mut p = page.clone();
        p["id"] = json!(format!("desk-{i}"));
        v["provides"]["pages"].as_array_mut().unwrap().push(p);
    }
    assert_invalid(&v, "pages_count", "provides.pages");
}

// ---------------------------------------------------------------------------
// Payload schema evolution

#[test]
fn payload_status_classifies_schemas() {
    let m = valid(&reports());
    let cases = [
        (None, PayloadStatus::Foreign),
        (Some(""), PayloadStatus::Foreign),
        (Some("github.delivery.v1"), PayloadStatus::Foreign),
        (Some("reportsx.report.v1"), PayloadStatus::Foreign),
        (Some("reports.report.v3"), PayloadStatus::Current),
        (Some("reports.report.v2"), PayloadStatus::Upcast),
        (Some("reports.report.v1"), PayloadStatus::Upcast),
        (Some("reports.report.v0"), PayloadStatus::Retired),
        (Some("reports.report.v4"), PayloadStatus::Newer),
        (Some("reports.report"), PayloadStatus::Undeclared),
        (Some("reports.other.v1"), PayloadStatus::Undeclared),
        (Some("reports"), PayloadStatus::Undeclared),
        (Some("reports.tick.v1"), PayloadStatus::Current),
    ];
    for (schema, want) in cases {
        assert_eq!(m.payload_status(schema), want, "{schema:?}");
    }
    let mut v = reports();
    v["provides"]["schemas"][1]["versions"] = json!([2, 4]);
    let m = valid(&v);
    assert_eq!(
        m.payload_status(Some("reports.report.v1")),
        PayloadStatus::Retired
    );
    assert_eq!(
        m.payload_status(Some("reports.report.v3")),
        PayloadStatus::Retired
    );
}

#[test]
fn writes_must_be_unversioned_or_current() {
    let m = valid(&reports());
    assert!(m.check_write(None).is_ok());
    assert!(m.check_write(Some("reports.report.v3")).is_ok());
    for bad in [
        "reports.report.v2",
        "reports.report.v4",
        "github.delivery.v1",
        "reports.x.v1",
    ] {
        let err = m.check_write(Some(bad)).unwrap_err();
        assert_eq!(err.schema, bad);
        assert!(err.to_string().starts_with("unreadable_schema"), "{err}");
    }
}

// ---------------------------------------------------------------------------
// Loading from a directory

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("oc-manifest-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn install(root: &std::path::Path, dir_name: &str, manifest: &Value) -> std::path::PathBuf {
    let dir = root.join(dir_name);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(
        dir.join(MANIFEST_FILE),
        serde_json::to_vec(manifest).unwrap(),
    )
    .unwrap();
    dir
}

#[test]
fn load_reads_validates_and_checks_the_directory_name() {
    let tmp = TempDir::new("load");
    let dir = install(&tmp.0, "support", &support());
    std::fs::write(dir.join("bin/support"), b"#!/bin/sh\n").unwrap();
    let m = load_manifest(&dir).unwrap();
    assert_eq!(m.name, "support");

    let misnamed = install(&tmp.0, "helpdesk", &support());
    let err = load_manifest(&misnamed).unwrap_err();
    assert_eq!(err.rule(), Some("directory_name"), "{err}");
    assert!(err.to_string().contains("helpdesk"), "{err}");

    let missing = tmp.0.join("nothing");
    assert!(matches!(
        load_manifest(&missing),
        Err(ManifestError::Io { .. })
    ));
}

#[cfg(unix)]
#[test]
fn load_refuses_a_command_linked_outside_the_directory() {
    let tmp = TempDir::new("link");
    let outside = tmp.0.join("outside");
    std::fs::write(&outside, b"#!/bin/sh\n").unwrap();
    let dir = install(&tmp.0, "support", &support());
    std::os::unix::fs::symlink(&outside, dir.join("bin/support")).unwrap();
    let err = load_manifest(&dir).unwrap_err();
    assert_eq!(err.rule(), Some("command_outside"), "{err}");
    assert!(err.to_string().contains("command[0]"), "{err}");
}

#[cfg(unix)]
#[test]
fn load_refuses_playbooks_linked_outside_the_directory() {
    let tmp = TempDir::new("playbooks");
    let outside = tmp.0.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let dir = install(&tmp.0, "support", &support());
    std::os::unix::fs::symlink(&outside, dir.join("playbooks")).unwrap();
    let err = load_manifest(&dir).unwrap_err();
    assert_eq!(err.rule(), Some("playbooks_outside"), "{err}");
}
