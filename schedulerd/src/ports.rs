//! What schedulerd needs of the other daemons, as two small traits: the store
//! ([`StoreCalls`]: storaged's `store.*` methods) and the extensions
//! ([`ExtCalls`]: extrunner's `ext.*` methods, `ext.call` forwarding the extension
//! protocol's calls to a package).
//!
//! The router, the starter and the toolbelt hold a [`Store`] and an [`Extensions`]
//! and never the bus itself: in production both are the bus client ([`OnBus`]
//! implements both traits), and a test runs them against
//! storaged's own `Store` in its process and an extension of its own, with no broker
//! and no child process. Every call is typed by its params ([`busapi::Call`]: the
//! method's name and its result type); the traits carry it as JSON text, so that they
//! stay object-safe and the answer is decoded once, straight into its type.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use busapi::ext::{ExtCall, RegistrationsRequest, RegistrationsResponse};
use busapi::Call;
use daemon::bus::Bus;
use protocol::CallError;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// An answer as the serving daemon wrote it.
pub type Answer = Result<Box<RawValue>, CallError>;

/// A call under way.
pub type Pending = Pin<Box<dyn Future<Output = Answer> + Send + 'static>>;

/// storaged's side: one `store.*` method, its params and its answer as JSON text.
pub trait StoreCalls: Send + Sync + 'static {
    /// Call `method` with `params`.
    fn call_raw(&self, method: &'static str, params: Box<RawValue>) -> Pending;
}

/// extrunner's side: `ext.registrations` and `ext.call` (see [`busapi::ext`]), their
/// params and answers as JSON text.
pub trait ExtCalls: Send + Sync + 'static {
    /// Call `method` with `params`.
    fn call_raw(&self, method: &'static str, params: Box<RawValue>) -> Pending;
}

/// The bus client, as both sides: the broker routes `store.*` to storaged and
/// `ext.*` to extrunner. A call is [`Bus::call_raw`]: it waits for a connection as
/// [`Bus::call`] does, and its answer is passed on as it arrived, to be decoded once
/// into its type.
#[derive(Debug, Clone)]
pub struct OnBus {
    bus: Bus,
}

impl OnBus {
    /// Calls through `bus`.
    pub fn new(bus: Bus) -> OnBus {
        OnBus { bus }
    }

    /// The bus client.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    fn call(&self, method: &'static str, params: Box<RawValue>) -> Pending {
        let bus = self.bus.clone();
        Box::pin(async move { bus.call_raw(method, params).await })
    }
}

impl StoreCalls for OnBus {
    fn call_raw(&self, method: &'static str, params: Box<RawValue>) -> Pending {
        self.call(method, params)
    }
}

impl ExtCalls for OnBus {
    fn call_raw(&self, method: &'static str, params: Box<RawValue>) -> Pending {
        self.call(method, params)
    }
}

fn encode<C: Call>(params: &C) -> Result<Box<RawValue>, CallError> {
    serde_json::value::to_raw_value(params)
        .map_err(|e| CallError::Codec(format!("the params of {}: {e}", C::METHOD)))
}

/// `answer` decoded into `T`, a failure naming `method`.
pub fn decode<T: DeserializeOwned>(method: &str, answer: &RawValue) -> Result<T, CallError> {
    serde_json::from_str(answer.get())
        .map_err(|e| CallError::Codec(format!("answer to {method} does not decode: {e}")))
}

/// The store, as schedulerd calls it.
#[derive(Clone)]
pub struct Store(Arc<dyn StoreCalls>);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Store {
    /// Calls made through `calls`.
    pub fn new(calls: impl StoreCalls) -> Store {
        Store(Arc::new(calls))
    }

    /// A typed call: `C::METHOD` with `params`, answered `C::Result`.
    pub async fn call<C: Call>(&self, params: &C) -> Result<C::Result, CallError> {
        let answer = self.0.call_raw(C::METHOD, encode(params)?).await?;
        decode(C::METHOD, &answer)
    }
}

/// The extensions, as schedulerd calls them through extrunner.
#[derive(Clone)]
pub struct Extensions(Arc<dyn ExtCalls>);

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extensions")
    }
}

impl Extensions {
    /// Calls made through `calls`.
    pub fn new(calls: impl ExtCalls) -> Extensions {
        Extensions(Arc::new(calls))
    }

    /// Every package's registrations (`ext.registrations`).
    pub async fn registrations(&self) -> Result<RegistrationsResponse, CallError> {
        let request = RegistrationsRequest {};
        let answer = self
            .0
            .call_raw(RegistrationsRequest::METHOD, encode(&request)?)
            .await?;
        decode(RegistrationsRequest::METHOD, &answer)
    }

    /// One extension call, answered its result type.
    pub async fn call<C: Call>(&self, call: &ExtCall<C>) -> Result<C::Result, CallError> {
        let answer = self.answer(call).await?;
        decode(C::METHOD, &answer)
    }

    /// One extension call, its answer as the extension wrote it: for a caller that
    /// reads nothing of it, passes it on, or says itself what a malformed one means.
    pub async fn answer<C: Call>(&self, call: &ExtCall<C>) -> Answer {
        self.0
            .call_raw(<ExtCall<C> as Call>::METHOD, encode(call)?)
            .await
    }
}

/// The timeout field of an extension call: `d` in ms.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
