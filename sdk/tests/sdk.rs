//! What the SDK lets an extension serve, judged against its manifest and the
//! method catalogue.

#![allow(clippy::unwrap_used)]

use sdk::{Ctx, Extension};
use serde_json::Value;

const INGRESS: &str = include_str!("../../protocol/testdata/ingress-support.json");
const EXECUTOR: &str = include_str!("../../protocol/testdata/executor-workspace.json");

fn ok(_ctx: Ctx, v: Value) -> std::future::Ready<Result<Value, protocol::RpcError>> {
    std::future::ready(Ok(v))
}

fn refusal(ext: &Extension) -> String {
    ext.errors()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[test]
fn an_enabled_host_to_extension_method_is_served() {
    let ext = Extension::new(INGRESS).unwrap().method("route.match", ok);
    assert!(ext.errors().is_empty(), "{}", refusal(&ext));
}

#[test]
fn a_method_the_manifest_does_not_enable_is_refused() {
    // The ingress manifest declares no executor.
    let ext = Extension::new(INGRESS).unwrap().method("executor.run", ok);
    assert!(
        refusal(&ext).contains("does not declare"),
        "{}",
        refusal(&ext)
    );
    let ext = Extension::new(EXECUTOR).unwrap().method("executor.run", ok);
    assert!(ext.errors().is_empty(), "{}", refusal(&ext));
}

#[test]
fn extension_to_host_and_reserved_methods_are_refused() {
    let ext = Extension::new(INGRESS).unwrap().method("kv.get", ok);
    assert!(
        refusal(&ext).contains("the host serves it"),
        "{}",
        refusal(&ext)
    );
    let ext = Extension::new(INGRESS).unwrap().method("initialize", ok);
    assert!(
        refusal(&ext).contains("the SDK serves it"),
        "{}",
        refusal(&ext)
    );
}

#[test]
fn own_methods_must_be_named_under_the_extension() {
    let name = Extension::new(INGRESS).unwrap().name().to_string();
    let ext = Extension::new(INGRESS)
        .unwrap()
        .method(&format!("{name}.debug"), ok);
    assert!(ext.errors().is_empty(), "{}", refusal(&ext));
    let ext = Extension::new(INGRESS).unwrap().method("other.debug", ok);
    assert!(
        refusal(&ext).contains("not in the method catalogue"),
        "{}",
        refusal(&ext)
    );
}

#[test]
fn an_invalid_manifest_is_refused_with_its_reason() {
    let err = Extension::new(r#"{"protocol":[1],"name":"core","version":"1","command":["x"]}"#)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("reserved"), "{err}");
    let err =
        Extension::new(r#"{"protocol":[1],"name":"a","version":"1","command":["x"],"storage":{}}"#)
            .err()
            .expect("refused");
    assert!(err.to_string().contains("newer Open Conduit"), "{err}");
}
