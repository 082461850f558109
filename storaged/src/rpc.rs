//! How a module's `store.*` methods meet the bus: decode the params into the
//! request type, run the method, encode the response. [`store_methods!`] writes a
//! module's `METHODS` and `dispatch` from its list of methods.

use crate::StoreError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

/// Decode a method's params; absent params (`null`) read as `{}`.
pub fn decode<T: DeserializeOwned>(method: &str, params: &RawValue) -> Result<T, StoreError> {
    let text = match params.get().trim() {
        "null" => "{}",
        other => other,
    };
    serde_json::from_str(text)
        .map_err(|e| StoreError::Invalid(format!("invalid params for {method}: {e}")))
}

/// Encode a method's response, straight to its wire text (no JSON tree between:
/// a page of events is written once, from the rows).
pub fn encode<T: Serialize>(method: &str, response: T) -> Result<Box<RawValue>, StoreError> {
    serde_json::value::to_raw_value(&response)
        .map_err(|e| StoreError::Internal(format!("encode the answer of {method}: {e}")))
}

/// A module's `pub const METHODS` and `pub async fn dispatch_raw` from
/// `ParamsType => method_on_store` pairs. The method's name and result type are the
/// params type's [`busapi::Call`]: a store method whose answer is not the
/// declared result does not build.
#[macro_export]
macro_rules! store_methods {
    ($($params:ty => $method:ident),* $(,)?) => {
        /// The bus methods this module serves.
        pub const METHODS: &[&str] = &[$(<$params as busapi::Call>::METHOD),*];

        /// Serve one of [`METHODS`], answering its wire text; `None` for any
        /// other method.
        pub async fn dispatch_raw(
            store: &$crate::Store,
            method: &str,
            params: &serde_json::value::RawValue,
        ) -> Option<Result<Box<serde_json::value::RawValue>, $crate::StoreError>> {
            $(
                if method == <$params as busapi::Call>::METHOD {
                    return Some(match $crate::rpc::decode::<$params>(method, params) {
                        Ok(req) => match store.$method(req).await {
                            Ok(resp) => $crate::rpc::encode::<<$params as busapi::Call>::Result>(method, resp),
                            Err(e) => Err(e),
                        },
                        Err(e) => Err(e),
                    });
                }
            )*
            None
        }

        /// Serve one of [`METHODS`], answering JSON; `None` for any other
        /// method.
        pub async fn dispatch(
            store: &$crate::Store,
            method: &str,
            params: &serde_json::value::RawValue,
        ) -> Option<Result<serde_json::Value, $crate::StoreError>> {
            Some(dispatch_raw(store, method, params).await?.and_then(|raw| {
                serde_json::from_str(raw.get()).map_err(|e| {
                    $crate::StoreError::Internal(format!("the answer of {method}: {e}"))
                })
            }))
        }
    };
}

/// A `Store` method `name(req) -> resp` that runs `name(conn, limits, req)` as one
/// atomic write.
macro_rules! write_method {
    ($name:ident, $req:ty, $resp:ty) => {
        #[doc = concat!("`store.", stringify!($name), "` as one atomic write.")]
        pub async fn $name(&self, req: $req) -> Result<$resp, StoreError> {
            let limits = self.limits().clone();
            self.write(move |c| $name(c, &limits, &req)).await
        }
    };
}

macro_rules! read_method {
    ($name:ident, $req:ty, $resp:ty) => {
        #[doc = concat!("`store.", stringify!($name), "` on a read connection.")]
        pub async fn $name(&self, req: $req) -> Result<$resp, StoreError> {
            let limits = self.limits().clone();
            self.read(move |c| $name(c, &limits, &req)).await
        }
    };
}
pub(crate) use {read_method, write_method};
