//! The CLI's bus client: one JSON-RPC call through the broker on a connection of
//! its own, blocking (the admin commands) or off the runtime (`up`, which must go
//! on hearing signals while it waits). A daemon's method is called by its type in
//! the bus API ([`busapi`]): the method's name and params come from the type, and
//! the answer decodes into its result.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use busapi::Call;
use serde_json::{json, Value};

/// How long one call waits for its answer.
pub const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// One JSON-RPC call of `method` through the broker on a connection of its own: the
/// answer as the daemon wrote it. An error answer is `<method>: <message>`.
pub fn bus_call(bus: &Path, method: &str, params: Value) -> Result<Value, String> {
    bus_call_within(bus, method, params, ANSWER_WAIT)
}

/// [`bus_call`], waiting at most `limit` for the answer (a late one is the error
/// `<method>: no answer within <limit>`).
pub fn bus_call_within(
    bus: &Path,
    method: &str,
    params: Value,
    limit: Duration,
) -> Result<Value, String> {
    let mut s = UnixStream::connect(bus).map_err(|e| format!("{}: {e}", bus.display()))?;
    s.set_read_timeout(Some(limit.max(Duration::from_millis(1))))
        .map_err(|e| e.to_string())?;
    let mut line =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .map_err(|e| e.to_string())?;
    line.push(b'\n');
    s.write_all(&line).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).map_err(|e| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            format!("{method}: no answer within {limit:?}")
        } else {
            e.to_string()
        }
    })?;
    let v: Value = serde_json::from_str(&answer).map_err(|e| e.to_string())?;
    match v.get("error") {
        Some(e) => Err(format!(
            "{method}: {}",
            e["message"].as_str().unwrap_or("error")
        )),
        None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
    }
}

/// A daemon's method, by its params type: the answer as the daemon wrote it (for a
/// command that prints it as it is).
pub fn call_json<C: Call>(bus: &Path, params: &C) -> Result<Value, String> {
    let params = serde_json::to_value(params)
        .map_err(|e| format!("{}: the params do not encode: {e}", C::METHOD))?;
    bus_call(bus, C::METHOD, params)
}

/// `answer`, as the daemon wrote it, decoded into `C`'s result.
pub fn decode<C: Call>(answer: Value) -> Result<C::Result, String> {
    serde_json::from_value(answer)
        .map_err(|e| format!("{}: the answer does not decode: {e}", C::METHOD))
}

/// A daemon's method, by its params type: the answer decoded into its result.
pub fn call_typed<C: Call>(bus: &Path, params: &C) -> Result<C::Result, String> {
    call_json(bus, params).and_then(decode::<C>)
}

/// [`call_typed`] without blocking the runtime, within `limit`.
pub async fn call_typed_within<C>(
    bus: &Path,
    params: C,
    limit: Duration,
) -> Result<C::Result, String>
where
    C: Call + Send + 'static,
    C::Result: Send + 'static,
{
    let bus = bus.to_path_buf();
    let call = tokio::task::spawn_blocking(move || call_typed(&bus, &params));
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("{}: {e}", C::METHOD)),
        Err(_) => Err(format!("{}: no answer within {limit:?}", C::METHOD)),
    }
}
