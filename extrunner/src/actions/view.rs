//! Panels and pages for the web view (`view.panels`, `view.pages`, `view.page` on the
//! bus; see [`busapi::view`]): the host asks the packages that declare
//! `provides.panels` for their panels (`view.render`), as it asks the action providers
//! for their actions (the parent module), and bounds what they answer.
//!
//! - `view.panels {work_id}`: every package with panels configured in the Work's
//!   scope renders the Work (surface `work`), all at once, each within
//!   [`PROVIDER_TIMEOUT`];
//! - `view.pages {}`: the manifest `pages` of every package with panels that some
//!   scope's configuration uses;
//! - `view.page {package, page}`: that package's panels of the page (surface `page`).
//!
//! A package that fails, times out or answers something else is left out and named in
//! `errors`, so one package never hides the others' panels. So is each panel past a
//! bound ([`protocol::wire::Panel::validate`]), a panel whose ID repeats an earlier
//! one, panels past [`MAX_PANELS`], a panel of a Work's page that names another Work,
//! and a panel with buttons or a text box from a package that offers no actions (a
//! button is one of the package's own actions, taken with `ext.act`).

use std::collections::BTreeSet;
use std::sync::Arc;

use busapi::view::{
    PageInfo, PageList, PageRequest, PanelList, PanelsRequest, ProvidedPanel, ProviderError,
};
use daemon::bus::Bus;
use protocol::wire::{
    Call, ViewRenderParams, ViewRenderResult, ViewSurface, MAX_ACTION_KEY_BYTES,
    MAX_ACTION_NAME_BYTES, MAX_PANELS,
};
use protocol::{Code, RpcError};

use super::provider::PROVIDER_TIMEOUT;
use super::{one_line, refuse, work_in};
use crate::render::Packages;

/// The packages that render panels on `scope` (running or not), by name.
pub fn panel_providers<'a>(packages: &'a dyn Packages, scope: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = packages
        .names()
        .into_iter()
        .filter(|n| packages.manifest(n).is_some_and(|m| m.provides.panels))
        .filter(|n| packages.scopes_of(n).iter().any(|s| s == scope))
        .collect();
    out.sort_unstable();
    out
}

/// One package's `view.render`, its panels bounded: what is kept, and what was left
/// out and why.
async fn render(
    packages: &dyn Packages,
    name: &str,
    params: &ViewRenderParams,
) -> (Vec<ProvidedPanel>, Vec<ProviderError>) {
    let error = |e: String| ProviderError {
        provider: name.to_owned(),
        error: e,
    };
    let raw = match serde_json::value::to_raw_value(params) {
        Ok(raw) => raw,
        Err(e) => return (Vec::new(), vec![error(format!("view.render: {e}"))]),
    };
    let answer = match packages
        .call(name, ViewRenderParams::METHOD, raw, PROVIDER_TIMEOUT)
        .await
    {
        Ok(reply) => reply,
        Err(e) => {
            tracing::warn!(OC_EXTENSION = %name, error = %e, "view.render failed; its panels are left out");
            return (
                Vec::new(),
                vec![error(format!("view.render failed: {}", e.message))],
            );
        }
    };
    let result: ViewRenderResult = match serde_json::from_str(answer.get()) {
        Ok(r) => r,
        Err(e) => {
            return (
                Vec::new(),
                vec![error(format!("view.render answered something else: {e}"))],
            )
        }
    };
    let acts = packages.manifest(name).is_some_and(|m| m.provides.actions);
    bound(name, params, acts, result)
}

/// The panels of `result` that keep every bound, and an error for each left out.
fn bound(
    name: &str,
    params: &ViewRenderParams,
    acts: bool,
    result: ViewRenderResult,
) -> (Vec<ProvidedPanel>, Vec<ProviderError>) {
    let mut kept = Vec::new();
    let mut errors = Vec::new();
    let mut error = |e: String| {
        tracing::warn!(OC_EXTENSION = %name, error = %e, "a panel is left out");
        errors.push(ProviderError {
            provider: name.to_owned(),
            error: e,
        });
    };
    let total = result.panels.len();
    if total > MAX_PANELS {
        error(format!(
            "view.render answered {total} panels, over the limit of {MAX_PANELS}: the first {MAX_PANELS} are shown"
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, mut panel) in result.panels.into_iter().take(MAX_PANELS).enumerate() {
        let named = format!("panels[{i}] ({:?})", panel.id);
        if let Err(e) = panel.validate() {
            error(format!("{named} is left out: {e}"));
            continue;
        }
        if !seen.insert(panel.id.clone()) {
            error(format!(
                "{named} is left out: its ID is the ID of an earlier panel"
            ));
            continue;
        }
        if params.surface == ViewSurface::Work {
            if panel.work_id.is_empty() {
                panel.work_id = params.work_id.clone();
            } else if panel.work_id != params.work_id {
                error(format!(
                    "{named} is left out: it names Work {}, on Work {}'s page",
                    panel.work_id, params.work_id
                ));
                continue;
            }
        }
        if panel.acts() && !acts {
            error(format!(
                "{named} is left out: it has buttons, and {name} offers no actions (provides.actions)"
            ));
            continue;
        }
        kept.push(ProvidedPanel {
            provider: name.to_owned(),
            panel,
        });
    }
    (kept, errors)
}

/// Every provider's panels of the Work `work_id` in `scope`, the providers asked all at
/// once; the list is by provider name.
pub async fn work_panels(packages: Arc<dyn Packages>, scope: &str, work_id: &str) -> PanelList {
    let names: Vec<String> = panel_providers(packages.as_ref(), scope)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for (index, name) in names.into_iter().enumerate() {
        let params = ViewRenderParams {
            surface: ViewSurface::Work,
            work_id: work_id.to_owned(),
            page: String::new(),
            scope_id: scope.to_owned(),
        };
        let packages = packages.clone();
        set.spawn(async move {
            let answer = render(packages.as_ref(), &name, &params).await;
            (index, answer)
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(answer) => answers.push(answer),
            Err(e) => tracing::warn!(error = %e, "a view.render task ended without an answer"),
        }
    }
    answers.sort_by_key(|(index, _)| *index);
    let mut out = PanelList::default();
    for (_, (panels, errors)) in answers {
        out.panels.extend(panels);
        out.errors.extend(errors);
    }
    out
}

/// Serves `view.panels`: the Work's panels (see the module doc); `not_found` for a
/// Work that does not exist.
pub async fn panels(
    bus: &Bus,
    packages: Arc<dyn Packages>,
    p: PanelsRequest,
) -> Result<PanelList, RpcError> {
    one_line("work_id", &p.work_id, MAX_ACTION_KEY_BYTES)?;
    let work = work_in(bus, "", &p.work_id).await?;
    Ok(work_panels(packages, &work.scope_id, &work.id).await)
}

/// Serves `view.pages`: every page of every package that renders panels and is
/// configured in some scope, by package name.
pub fn pages(packages: &dyn Packages) -> PageList {
    let mut names = packages.names();
    names.sort_unstable();
    let mut out = PageList::default();
    for name in names {
        let Some(m) = packages.manifest(name) else {
            continue;
        };
        if !m.provides.panels || packages.scopes_of(name).is_empty() {
            continue;
        }
        out.pages
            .extend(m.provides.pages.iter().map(|page| PageInfo {
                package: name.to_owned(),
                id: page.id.clone(),
                title: page.title.clone(),
                summary: page.summary.clone().unwrap_or_default(),
            }));
    }
    out
}

/// Serves `view.page`: the package's panels of its page (surface `page`); `not_found`
/// for a package or page that is not listed by `view.pages`.
pub async fn page(packages: &dyn Packages, p: PageRequest) -> Result<PanelList, RpcError> {
    one_line("package", &p.package, MAX_ACTION_NAME_BYTES)?;
    one_line("page", &p.page, MAX_ACTION_NAME_BYTES)?;
    let listed = pages(packages);
    if !listed
        .pages
        .iter()
        .any(|x| x.package == p.package && x.id == p.page)
    {
        let known: Vec<String> = listed
            .pages
            .iter()
            .map(|x| format!("{}/{}", x.package, x.id))
            .collect();
        return Err(refuse(
            Code::NotFound,
            format!(
                "no page {:?} of package {:?}: the pages are {}",
                p.page,
                p.package,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        ));
    }
    let params = ViewRenderParams {
        surface: ViewSurface::Page,
        work_id: String::new(),
        page: p.page.clone(),
        scope_id: String::new(),
    };
    let (panels, errors) = render(packages, &p.package, &params).await;
    Ok(PanelList { panels, errors })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::render::CallFuture;
    use protocol::config::Config;
    use protocol::manifest::{parse_manifest, Manifest};
    use serde_json::value::RawValue;
    use serde_json::{json, Value};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Packages with manifests, scopes and a scripted `view.render` answer each (an
    /// error when the script is a string), recording the params they were asked with.
    struct Fake {
        manifests: BTreeMap<String, Manifest>,
        scopes: BTreeMap<String, Vec<String>>,
        answers: BTreeMap<String, Value>,
        asked: Mutex<Vec<(String, Value)>>,
    }

    fn manifest(name: &str, actions: bool, pages: Value) -> Manifest {
        parse_manifest(
            json!({
                "protocol": [1], "name": name, "version": "1", "command": ["x"],
                "provides": {"extensions": [{"type": name}], "panels": true,
                             "actions": actions, "pages": pages}
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                manifests: BTreeMap::new(),
                scopes: BTreeMap::new(),
                answers: BTreeMap::new(),
                asked: Mutex::new(Vec::new()),
            }
        }

        fn with(mut self, m: Manifest, scopes: &[&str], answer: Value) -> Fake {
            let name = m.name.clone();
            self.manifests.insert(name.clone(), m);
            self.scopes
                .insert(name.clone(), scopes.iter().map(|s| s.to_string()).collect());
            self.answers.insert(name, answer);
            self
        }
    }

    impl Packages for Fake {
        fn names(&self) -> Vec<&str> {
            self.manifests.keys().map(String::as_str).collect()
        }
        fn manifest(&self, name: &str) -> Option<&Manifest> {
            self.manifests.get(name)
        }
        fn scopes_of(&self, name: &str) -> Vec<String> {
            self.scopes.get(name).cloned().unwrap_or_default()
        }
        fn applied(&self) -> Option<Arc<Config>> {
            None
        }
        fn call<'a>(
            &'a self,
            name: &'a str,
            method: &'a str,
            params: Box<RawValue>,
            _timeout: std::time::Duration,
        ) -> CallFuture<'a> {
            Box::pin(async move {
                assert_eq!(method, "view.render");
                let params: Value = serde_json::from_str(params.get()).unwrap();
                self.asked.lock().unwrap().push((name.to_owned(), params));
                match self.answers.get(name) {
                    Some(Value::String(e)) => Err(RpcError::new(Code::Unavailable, e.clone())),
                    Some(v) => Ok(serde_json::value::to_raw_value(v).unwrap()),
                    None => Err(RpcError::new(Code::NotFound, "no such package")),
                }
            })
        }
    }

    fn panel(id: &str, buttons: usize) -> Value {
        let buttons: Vec<Value> = (0..buttons)
            .map(|i| json!({"label": format!("b{i}"), "action": "answer", "input": {"ask_id": "a-1"}}))
            .collect();
        json!({"id": id, "title": "Which branch?", "sections": [{"text": "q", "buttons": buttons}]})
    }

    #[tokio::test]
    async fn a_works_panels_come_from_its_scopes_providers_and_a_failing_one_is_named() {
        let fake = Fake::new()
            .with(
                manifest("human", true, json!([])),
                &["acme"],
                json!({"panels": [panel("ask-1", 2), panel("ask-2", 9)]}),
            )
            .with(
                manifest("broken", true, json!([])),
                &["acme"],
                json!("it fell over"),
            )
            .with(
                manifest("elsewhere", true, json!([])),
                &["other"],
                json!({"panels": [panel("x", 0)]}),
            )
            .with(
                manifest("mute", false, json!([])),
                &["acme"],
                json!({"panels": [panel("talk", 0), panel("press", 1),
                                  {"id": "other-work", "title": "t", "work_id": "w-9"}]}),
            );
        let fake = Arc::new(fake);
        let list = work_panels(fake.clone(), "acme", "w-1").await;
        let shown: Vec<(&str, &str, &str)> = list
            .panels
            .iter()
            .map(|p| {
                (
                    p.provider.as_str(),
                    p.panel.id.as_str(),
                    p.panel.work_id.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [("human", "ask-1", "w-1"), ("mute", "talk", "w-1")],
            "{list:#?}"
        );
        let errors: Vec<String> = list
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.provider, e.error))
            .collect();
        assert_eq!(
            errors,
            [
                "broken: view.render failed: it fell over",
                "human: panels[1] (\"ask-2\") is left out: sections[0].buttons: 9 buttons, over the limit of 8",
                "mute: panels[1] (\"press\") is left out: it has buttons, and mute offers no actions (provides.actions)",
                "mute: panels[2] (\"other-work\") is left out: it names Work w-9, on Work w-1's page",
            ]
        );
        let asked = fake.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 3, "elsewhere is not asked: {asked:?}");
        let human = asked.iter().find(|(n, _)| n == "human").unwrap();
        assert_eq!(
            human.1,
            json!({"surface": "work", "work_id": "w-1", "scope_id": "acme"})
        );
    }

    #[tokio::test]
    async fn too_many_panels_are_cut_and_repeated_ids_left_out() {
        let many: Vec<Value> = (0..10).map(|i| panel(&format!("p{}", i % 9), 0)).collect();
        let fake = Fake::new().with(
            manifest("human", true, json!([])),
            &["acme"],
            json!({ "panels": many }),
        );
        let list = work_panels(Arc::new(fake), "acme", "w-1").await;
        assert_eq!(list.panels.len(), MAX_PANELS);
        assert_eq!(list.errors.len(), 1, "{:?}", list.errors);
        assert!(list.errors[0]
            .error
            .starts_with("view.render answered 10 panels, over the limit of 8"));

        let fake = Fake::new().with(
            manifest("human", true, json!([])),
            &["acme"],
            json!({"panels": [panel("p", 0), panel("p", 0)]}),
        );
        let list = work_panels(Arc::new(fake), "acme", "w-1").await;
        assert_eq!(list.panels.len(), 1);
        assert!(list.errors[0].error.contains("ID of an earlier panel"));
    }

    #[tokio::test]
    async fn pages_are_listed_and_drawn_from_their_packages_panels() {
        let page = |entry: &str| json!([{"id": "asks", "title": "What waits for a person", "entry": entry}]);
        let fake = Fake::new()
            .with(
                manifest("human", true, page("human")),
                &["acme"],
                json!({"panels": [{"id": "ask-1", "title": "Which?", "work_id": "w-1"}]}),
            )
            .with(manifest("idle", true, page("idle")), &[], json!({}));
        let listed = pages(&fake);
        assert_eq!(
            listed.pages,
            [PageInfo {
                package: "human".into(),
                id: "asks".into(),
                title: "What waits for a person".into(),
                summary: String::new(),
            }],
            "a package no scope uses lists no page"
        );
        let drawn = page_of(&fake, "human", "asks").await.unwrap();
        assert_eq!(drawn.panels.len(), 1);
        assert_eq!(drawn.panels[0].panel.work_id, "w-1");
        let asked = fake.asked.lock().unwrap().clone();
        assert_eq!(asked[0].1, json!({"surface": "page", "page": "asks"}));

        let e = page_of(&fake, "human", "nope").await.unwrap_err();
        assert_eq!(e.app_code(), Some("not_found"));
        assert_eq!(
            e.message,
            "no page \"nope\" of package \"human\": the pages are human/asks"
        );
        let e = page_of(&fake, "idle", "asks").await.unwrap_err();
        assert_eq!(e.app_code(), Some("not_found"));
    }

    async fn page_of(fake: &Fake, package: &str, page_id: &str) -> Result<PanelList, RpcError> {
        page(
            fake,
            PageRequest {
                package: package.into(),
                page: page_id.into(),
            },
        )
        .await
    }
}
