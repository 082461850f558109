//! What a turn declares through the toolbelt (`wait`, `declare_outcome`, a
//! `wait`-kind operation): KV `core.toolbelt`, key `exec/<execution>`, merged by
//! [`Toolbelt::declare`], read by the starter when it settles the attempt
//! ([`declared`]) and cleared once it is settled ([`clear`]).

use busapi::store::{KvCheckItem, KvCommitRequest, KvDeleteItem, KvGetRequest, KvPutItem};
use busapi::Call;
use protocol::wire::{self, WaitRequest};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use super::{refuse, store_failed, Caller, Toolbelt, NAMESPACE, OWNER};
use crate::ports::Store;

/// What a turn declared through the toolbelt, read when its attempt settles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// The Wait the turn ends parked on.
    pub wait: Option<WaitRequest>,
    /// Who owns that Wait: the extension whose wait operation planned it, or
    /// nobody (empty) for the toolbelt's own `wait`.
    pub wait_owner: String,
    /// The outcome the agent declared, and its summary.
    pub outcome: Option<(wire::Outcome, String)>,
}

fn exec_key(execution_id: &str) -> String {
    format!("exec/{execution_id}")
}

/// `store.kv_get` of the toolbelt's `key`: its value when it is present (a stored
/// `null` is present), and its version.
pub(super) async fn record(
    store: &Store,
    key: &str,
) -> Result<Option<(Value, String)>, protocol::CallError> {
    let got = store
        .call(&KvGetRequest {
            owner: OWNER.into(),
            namespace: NAMESPACE.into(),
            key: key.to_owned(),
        })
        .await?;
    Ok(got
        .version
        .map(|version| (got.value.unwrap_or(Value::Null), version)))
}

/// What `exec/<execution>` says, if anything.
pub async fn declared(store: &Store, execution_id: &str) -> Option<Declared> {
    let (v, _) = record(store, &exec_key(execution_id)).await.ok()??;
    let wait = serde_json::from_value(v["wait"].clone()).ok();
    let outcome = v["outcome"]["outcome"]
        .as_str()
        .and_then(|o| serde_json::from_value(json!(o)).ok())
        .map(|o| {
            (
                o,
                v["outcome"]["summary"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        });
    let wait_owner = v["wait_owner"].as_str().unwrap_or_default().to_owned();
    Some(Declared {
        wait,
        wait_owner,
        outcome,
    })
}

/// Forget what the turn of `execution_id` declared (after its attempt settled).
pub async fn clear(store: &Store, execution_id: &str) {
    let _ = store
        .call(&KvCommitRequest {
            owner: OWNER.into(),
            families: None,
            scopes: None,
            checks: Vec::new(),
            puts: Vec::new(),
            deletes: vec![KvDeleteItem {
                namespace: NAMESPACE.into(),
                key: exec_key(execution_id),
            }],
            emissions: Vec::new(),
        })
        .await;
}

impl Toolbelt {
    /// Merge `what` into the turn's declaration.
    pub(super) async fn declare(&self, caller: &Caller, what: Value) -> Result<(), RpcError> {
        let key = exec_key(&caller.authority.execution_id);
        let store = &self.inner.store;
        for _ in 0..5 {
            let got = record(store, &key)
                .await
                .map_err(|e| store_failed(KvGetRequest::METHOD, e))?;
            let (mut value, version) = match got {
                Some((value, version)) => (value, Some(version)),
                None => (json!({}), None),
            };
            if let (Some(v), Some(w)) = (value.as_object_mut(), what.as_object()) {
                for (k, x) in w {
                    v.insert(k.clone(), x.clone());
                }
            }
            let check = KvCheckItem {
                namespace: NAMESPACE.into(),
                key: key.clone(),
                absent: version.is_none(),
                version,
            };
            let put = store
                .call(&KvCommitRequest {
                    owner: OWNER.into(),
                    families: None,
                    scopes: None,
                    checks: vec![check],
                    puts: vec![KvPutItem {
                        namespace: NAMESPACE.into(),
                        key: key.clone(),
                        value,
                    }],
                    deletes: Vec::new(),
                    emissions: Vec::new(),
                })
                .await;
            match put {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == Some(Code::Conflict.as_str()) => continue,
                Err(e) => return Err(store_failed(KvCommitRequest::METHOD, e)),
            }
        }
        Err(refuse(
            Code::Conflict,
            "the declaration changed meanwhile; try again",
        ))
    }
}
