//! Open Conduit's protocol: the JSON-RPC 2.0 connection every extension and every
//! daemon speaks (newline-delimited, symmetric, bounded), its errors and codes,
//! protocol versions, the extension manifest, the method catalogue and the wire
//! types.

pub mod b64;
pub mod catalogue;
pub mod config;
pub mod conn;
pub mod container;
pub mod error;
pub mod hex;
pub mod manifest;
pub mod random;
pub mod sandbox;
pub mod time;
pub mod toolbelt;
pub mod version;
pub mod wire;

pub use conn::{
    agreed_message_bytes, connect, connect_arc, reply, BoxFuture, CallOptions, CancelToken,
    FnHandler, Handler, NoHandler, Options, Peer, Prepared, Reply, Request, ServeTimer, ServeTimes,
    CANCEL_METHOD, IN_TRANSACTION_DEADLINE, LARGE_MESSAGE_BYTES, LSP_CANCEL_METHOD, MAX_INFLIGHT,
    MAX_MESSAGE_BYTES,
};
pub use error::{CallError, CloseReason, Code, RpcError};
