//! The daemons' bus API: every method a daemon serves on the bus is a type here
//! that names its method, its params and its result, as `lsp-types` does for LSP.
//!
//! A method's params type implements [`protocol::wire::Call`] (the shape the
//! extension protocol already uses): `Call::METHOD` is the method's name and
//! `Call::Result` its answer. Callers send it with `daemon::bus::Bus::call_typed`
//! and get the result type back; the serving daemon's dispatch is driven by the
//! same types, so a caller and a server that disagree on a field's type do not
//! build. No other crate spells a daemon method's name.
//!
//! Families: [`store`] (storaged), [`ext`] (extrunner), [`sched`] (schedulerd),
//! [`ingress`] (ingressd), [`tunnel`] (tunneld), [`web`] (webd), [`bus`] (the broker);
//! [`metrics`] is what every daemon's `<family>.metrics` answers.

pub use protocol::wire::Call;

pub mod bus;
pub mod ext;
pub mod ingress;
pub mod metrics;
pub mod people;
pub mod sched;
pub mod store;
pub mod topic;
pub mod tunnel;
pub mod view;
pub mod web;

/// Implement [`Call`] for each params type, naming its method and result, and
/// list the family's method names in `METHODS`.
#[macro_export]
macro_rules! methods {
    ($($method:literal : $params:ty => $result:ty),* $(,)?) => {
        $(
            impl $crate::Call for $params {
                const METHOD: &'static str = $method;
                type Result = $result;
            }
        )*
        /// Every method of this family, by name.
        pub const METHODS: &[&str] = &[$($method),*];
    };
}

/// Every daemon method's name, of every family (`ext.call` included).
pub fn all_methods() -> Vec<&'static str> {
    let mut all = vec![ext::EXT_CALL];
    for family in [
        bus::METHODS,
        ext::METHODS,
        ingress::METHODS,
        sched::METHODS,
        store::METHODS,
        tunnel::METHODS,
        view::METHODS,
        web::METHODS,
    ] {
        all.extend_from_slice(family);
    }
    all.sort_unstable();
    all.dedup();
    all
}
