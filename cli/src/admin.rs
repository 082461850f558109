//! The admin commands: each one a few calls through the broker, printed for a person
//! (or, with `--json`, as the JSON the daemons answered). Each concern has its module
//! ([`crate::status`], [`crate::config`], [`crate::extension`], [`crate::work`],
//! [`crate::events`], [`crate::logs`], [`crate::doctor`]); this one names them all,
//! as the commands are dispatched.
//!
//! The bus socket is found at `--bus PATH`, else `$OPEN_CONDUIT_BUS`, else the packaged
//! path (`/run/open-conduit/bus.sock`); `open-conduit up` prints the one it uses.

pub use crate::config::{config_apply, config_check, config_dir, config_show};
pub use crate::doctor::{diagnose, doctor};
pub use crate::events::{events, route_trace};
pub use crate::extension::{
    extension_inspect, extension_install, extension_list, extension_remove, extension_restart,
};
pub use crate::logs::{logs, COMPONENTS};
pub use crate::output::{
    bus_path, call, count, paint, print_json, text, verdict, Failure, Out, Verdict, DEFAULT_BUS,
};
pub use crate::status::status;
pub use crate::work::{
    resolve_work, work_cancel, work_interrupt, work_list, work_log, work_retry, work_show,
    WORK_STATES,
};
