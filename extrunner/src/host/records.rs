//! The extension's records: its KV (`kv.get`, `kv.list`, `kv.commit`), the Events it
//! accepts (`event.accept`) and the log it reads (`state.event`, `state.events`,
//! `state.work_events`, `state.sequence`), each bound to its namespaces, families
//! and scopes before it reaches storaged.

use super::*;
use busapi::store::{
    EventAcceptDerivedRequest, EventGetRequest, EventInput, EventsListRequest, KvCheckItem,
    KvCommitRequest, KvDeleteItem, KvGetRequest, KvListRequest, KvPutItem, SequenceRequest,
    WorkEventsRequest,
};
use protocol::wire::{KvEntry, StateWorkEventsParams};

fn limit(limit: u32) -> Option<u32> {
    (limit > 0).then_some(limit)
}

fn after(after: u64) -> i64 {
    i64::try_from(after).unwrap_or(i64::MAX)
}

impl Scoped<'_> {
    fn checks(&self, checks: Vec<KvCheck>) -> Result<Vec<KvCheckItem>, RpcError> {
        checks
            .into_iter()
            .map(|c| {
                let (version, absent) = match c.expect {
                    KvExpect::Version(v) => (Some(v), false),
                    KvExpect::Absent => (None, true),
                };
                Ok(KvCheckItem {
                    namespace: own_namespace(self.name(), &c.namespace)?,
                    key: c.key,
                    version,
                    absent,
                })
            })
            .collect()
    }

    fn puts(&self, puts: Vec<KvPut>) -> Result<Vec<KvPutItem>, RpcError> {
        puts.into_iter()
            .map(|p| {
                Ok(KvPutItem {
                    namespace: own_namespace(self.name(), &p.namespace)?,
                    key: p.key,
                    value: p.value,
                })
            })
            .collect()
    }

    fn deletes(&self, deletes: Vec<KvDelete>) -> Result<Vec<KvDeleteItem>, RpcError> {
        deletes
            .into_iter()
            .map(|d| {
                Ok(KvDeleteItem {
                    namespace: own_namespace(self.name(), &d.namespace)?,
                    key: d.key,
                })
            })
            .collect()
    }

    fn emission(&self, e: Emission) -> Result<EventInput, RpcError> {
        check_emission(self.identity, &e)?;
        let some = |s: String| (!s.is_empty()).then_some(s);
        Ok(EventInput {
            scope_id: e.scope_id,
            event_type: e.event_type,
            source: e.source,
            delivery_id: some(e.delivery_id),
            schema: some(e.payload.schema),
            payload: e.payload.data,
            keys: e.keys,
            occurred_at: some(e.occurred_at),
            parent_id: some(e.parent_id),
            ..EventInput::default()
        })
    }

    /// The whole Event just accepted, read back in the extension's scopes.
    async fn accepted(&self, id: String, seq: i64) -> wire::Event {
        let read = self
            .store(&EventGetRequest {
                id: id.clone(),
                scopes: Some(self.identity.scopes.clone()),
            })
            .await;
        match read {
            Ok(a) => wire_event(a.event),
            Err(_) => wire::Event {
                id,
                sequence: u64::try_from(seq).unwrap_or(0),
                ..wire::Event::default()
            },
        }
    }

    pub(super) async fn kv_get(&self, p: KvGetParams) -> Result<KvGetResult, RpcError> {
        let namespace = own_namespace(self.name(), &p.namespace)?;
        let got = self
            .store(&KvGetRequest {
                owner: self.name().to_owned(),
                namespace,
                key: p.key,
            })
            .await?;
        Ok(KvGetResult {
            // A stored JSON `null` comes as `"value": null` with its version: present.
            value: got
                .value
                .or_else(|| got.version.as_ref().map(|_| Value::Null)),
            version: got.version,
        })
    }

    pub(super) async fn kv_list(&self, p: KvListParams) -> Result<KvListResult, RpcError> {
        p.validate().map_err(invalid)?;
        let namespace = own_namespace(self.name(), &p.namespace)?;
        let page = self
            .store(&KvListRequest {
                owner: self.name().to_owned(),
                namespace,
                prefix: p.prefix,
                after: p.after,
                limit: limit(p.limit),
            })
            .await?;
        Ok(KvListResult {
            entries: page
                .entries
                .into_iter()
                .map(|e| KvEntry {
                    key: e.key,
                    value: e.value,
                    version: e.version,
                })
                .collect(),
            next: page.next,
        })
    }

    pub(super) async fn kv_commit(&self, p: KvCommitParams) -> Result<KvCommitResult, RpcError> {
        // Every check first: a batch with anything refused applies nothing.
        let checks = self.checks(p.checks)?;
        let puts = self.puts(p.puts)?;
        let deletes = self.deletes(p.deletes)?;
        let emissions = p
            .emissions
            .into_iter()
            .map(|e| self.emission(e))
            .collect::<Result<Vec<_>, _>>()?;
        let answer = self
            .store(&KvCommitRequest {
                owner: self.name().to_owned(),
                families: Some(self.identity.families()),
                scopes: Some(self.identity.scopes.clone()),
                checks,
                puts,
                deletes,
                emissions,
            })
            .await?;
        let mut out = Vec::with_capacity(answer.emissions.len());
        for e in answer.emissions {
            let event = match e.event {
                Some(r) => Some(self.accepted(r.id, r.seq).await),
                None => None,
            };
            out.push(EmissionResult {
                event,
                added: e.added,
                refused: e.refused.unwrap_or_default(),
            });
        }
        Ok(KvCommitResult { emissions: out })
    }

    pub(super) async fn event_accept(
        &self,
        p: EventAcceptParams,
    ) -> Result<EmissionResult, RpcError> {
        p.validate().map_err(invalid)?;
        let checks = self.checks(p.checks)?;
        let puts = self.puts(p.puts)?;
        let deletes = self.deletes(p.deletes)?;
        let event = self.emission(p.event)?;
        let accepted = self
            .store(&EventAcceptDerivedRequest {
                owner: Some(self.name().to_owned()),
                families: Some(self.identity.families()),
                scopes: Some(self.identity.scopes.clone()),
                event,
                checks,
                puts,
                deletes,
            })
            .await?;
        Ok(EmissionResult {
            event: Some(self.accepted(accepted.id, accepted.seq).await),
            added: accepted.added,
            refused: String::new(),
        })
    }

    pub(super) async fn state_event(
        &self,
        p: StateEventParams,
    ) -> Result<StateEventResult, RpcError> {
        let answer = self
            .store(&EventGetRequest {
                id: p.id,
                scopes: Some(self.identity.scopes.clone()),
            })
            .await?;
        Ok(StateEventResult {
            event: wire_event(answer.event),
        })
    }

    pub(super) async fn state_events(
        &self,
        p: StateEventsParams,
    ) -> Result<StateEventsResult, RpcError> {
        p.validate().map_err(invalid)?;
        let page = self
            .store(&EventsListRequest {
                after: after(p.after),
                limit: limit(p.limit),
                scopes: Some(self.identity.scopes.clone()),
            })
            .await?;
        Ok(StateEventsResult {
            events: page.events.into_iter().map(wire_event).collect(),
        })
    }

    pub(super) async fn state_work_events(
        &self,
        p: StateWorkEventsParams,
    ) -> Result<StateEventsResult, RpcError> {
        wire::check_page_limit(p.limit).map_err(invalid)?;
        let page = self
            .store(&WorkEventsRequest {
                work_id: p.id,
                after: after(p.after),
                limit: limit(p.limit),
                scopes: Some(self.identity.scopes.clone()),
            })
            .await;
        match page {
            Ok(page) => Ok(StateEventsResult {
                events: page.events.into_iter().map(wire_event).collect(),
            }),
            // A Work out of reach, or none, reads as an empty page.
            Err(e) if e.is(Code::NotFound) => Ok(StateEventsResult::default()),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn state_sequence(&self) -> Result<StateSequenceResult, RpcError> {
        let s = self.store(&SequenceRequest {}).await?;
        Ok(StateSequenceResult {
            sequence: u64::try_from(s.sequence).unwrap_or(0),
        })
    }
}
