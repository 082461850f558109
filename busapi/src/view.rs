//! The web view's extension surfaces on the bus (extrunner): the panels packages
//! render on a Work or a page (`view.render`), and the pages they declare
//! (manifest `pages`).
//!
//! - `view.panels` ([`PanelsRequest`] → [`PanelList`]): every package configured in
//!   the Work's scope that provides panels renders its panels of the Work, each
//!   within the provider timeout; a package that fails (or answers a panel past a
//!   bound) is left out and named in `errors`.
//! - `view.pages` ([`PagesRequest`] → [`PageList`]): every page of every package
//!   that provides panels and is configured in some scope.
//! - `view.page` ([`PageRequest`] → [`PanelList`]): one page's panels (`view.render`
//!   with surface `page`).
//!
//! A panel's button is pressed with `ext.act` ([`crate::ext::ActRequest`]) on the
//! panel's Work with the panel's `provider`, the button's `action` and `input`.

use protocol::wire::Panel;
use serde::{Deserialize, Serialize};

/// `view.panels`: the panels of a Work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelsRequest {
    /// The Work.
    pub work_id: String,
}

/// `view.pages`: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagesRequest {}

/// `view.page`: one page of a package.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageRequest {
    /// The package.
    pub package: String,
    /// The page's ID (one of the package's manifest `pages`).
    pub page: String,
}

/// A panel with the package that rendered it (the provider its buttons' actions are
/// taken through).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvidedPanel {
    /// The package.
    pub provider: String,
    /// The panel, within its bounds ([`Panel::validate`]); on a Work's page its
    /// `work_id` is that Work.
    pub panel: Panel,
}

/// A package left out, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderError {
    /// The package.
    pub provider: String,
    /// What went wrong, in one line (a failed call, a panel past a bound).
    pub error: String,
}

/// The answer of `view.panels` and `view.page`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PanelList {
    /// The panels, by provider name, each provider's in the order it gave them.
    #[serde(default)]
    pub panels: Vec<ProvidedPanel>,
    /// The providers (or panels) left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ProviderError>,
}

/// One page a package declares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageInfo {
    /// The package.
    pub package: String,
    /// The page's ID.
    pub id: String,
    /// Its title.
    pub title: String,
    /// What it shows, in one line (empty when the manifest says nothing).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

/// The answer of `view.pages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageList {
    /// The pages, by package name then in manifest order.
    #[serde(default)]
    pub pages: Vec<PageInfo>,
}

crate::methods! {
    "view.panels": PanelsRequest => PanelList,
    "view.pages": PagesRequest => PageList,
    "view.page": PageRequest => PanelList,
}
