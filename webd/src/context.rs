//! What every route shares: the bus, the sign-in rules, the live streams.

use std::sync::Arc;

use daemon::bus::Bus;

use crate::auth::Auth;
use crate::live::Hub;

/// What the routes share.
pub struct App {
    /// The bus.
    pub bus: Bus,
    /// The sign-in rules.
    pub auth: Auth,
    /// The live streams.
    pub hub: Arc<Hub>,
    /// Where webd listens.
    pub listen: String,
}
