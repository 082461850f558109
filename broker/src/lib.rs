//! The broker: routes JSON-RPC between daemons over the bus socket. Built in issue 3.
