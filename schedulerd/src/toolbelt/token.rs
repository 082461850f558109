//! The toolbelt's tokens: `oct1.<work>.<execution>.<epoch>.<mac>`, an HMAC-SHA256
//! under the key kept in the store (KV `core.toolbelt`, key `key`, created once).

use busapi::store::{KvCheckItem, KvCommitRequest, KvGetRequest, KvPutItem};
use busapi::Call;
use hmac::{Hmac, Mac};
use protocol::Code;
use serde_json::Value;
use sha2::Sha256;

use super::{Toolbelt, NAMESPACE, OWNER};
use crate::ports::Store;

/// The token format's prefix.
const TOKEN_PREFIX: &str = "oct1";

type HmacSha256 = Hmac<Sha256>;

/// The key, from the store; created (32 random bytes) the first time.
pub async fn load_key(store: &Store) -> Result<Vec<u8>, String> {
    for _ in 0..3 {
        let got = store
            .call(&KvGetRequest {
                owner: OWNER.into(),
                namespace: NAMESPACE.into(),
                key: "key".into(),
            })
            .await
            .map_err(|e| format!("{}: {e}", KvGetRequest::METHOD))?;
        if let Some(k) = got
            .value
            .as_ref()
            .and_then(Value::as_str)
            .and_then(protocol::hex::decode)
        {
            return Ok(k);
        }
        let fresh: [u8; 32] = protocol::random::bytes().map_err(|e| e.to_string())?;
        let put = store
            .call(&KvCommitRequest {
                owner: OWNER.into(),
                families: None,
                scopes: None,
                checks: vec![KvCheckItem {
                    namespace: NAMESPACE.into(),
                    key: "key".into(),
                    version: None,
                    absent: true,
                }],
                puts: vec![KvPutItem {
                    namespace: NAMESPACE.into(),
                    key: "key".into(),
                    value: Value::String(protocol::hex::encode(&fresh)),
                }],
                deletes: Vec::new(),
                emissions: Vec::new(),
            })
            .await;
        match put {
            Ok(_) => return Ok(fresh.to_vec()),
            // Another schedulerd wrote it first: read it again.
            Err(e) if e.code() == Some(Code::Conflict.as_str()) => continue,
            Err(e) => return Err(format!("{}: {e}", KvCommitRequest::METHOD)),
        }
    }
    Err("the toolbelt key could not be read or written".into())
}

impl Toolbelt {
    fn mac(&self, body: &str) -> Option<HmacSha256> {
        let mut m = HmacSha256::new_from_slice(&self.inner.key).ok()?;
        m.update(body.as_bytes());
        Some(m)
    }

    /// The token of `execution_id` at `epoch`.
    pub fn token(&self, work_id: &str, execution_id: &str, epoch: i64) -> String {
        let body = format!("{TOKEN_PREFIX}.{work_id}.{execution_id}.{epoch}");
        let mac = self
            .mac(&body)
            .map(|m| protocol::hex::encode(&m.finalize().into_bytes()))
            .unwrap_or_default();
        format!("{body}.{mac}")
    }

    /// The token's (work, execution, epoch), if its MAC is right.
    pub(super) fn verify(&self, token: &str) -> Option<(String, String, i64)> {
        let (body, mac) = token.rsplit_once('.')?;
        let mut parts = body.split('.');
        let (prefix, work, exec, epoch) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if prefix != TOKEN_PREFIX || parts.next().is_some() {
            return None;
        }
        self.mac(body)?
            .verify_slice(&protocol::hex::decode(mac)?)
            .ok()?;
        Some((work.to_owned(), exec.to_owned(), epoch.parse().ok()?))
    }
}
