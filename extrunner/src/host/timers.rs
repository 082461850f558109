//! The extension's timers (`timer.arm`, `timer.cancel`, `state.timers`: of its
//! declared recurrences, in its scopes, under keys prefixed with its name) and the
//! progress line of a Wait it planned (`wait.progress`).

use super::*;
use busapi::store::{TimerArmRequest, TimerCancelRequest, TimersRequest, WaitProgressRequest};
use protocol::time::parse_rfc3339_ms;

/// The prefix of the extension's timer keys.
fn timer_key(name: &str, key: &str) -> String {
    format!("{name}:{key}")
}

impl Scoped<'_> {
    /// `wait.progress`: the progress line of a Work's active Wait, which only the
    /// extension whose wait operation planned it may set (storaged checks the owner).
    pub(super) async fn wait_progress(
        &self,
        p: WaitProgressParams,
    ) -> Result<WaitProgressResult, RpcError> {
        self.store(&WaitProgressRequest {
            owner: self.name().to_owned(),
            work_id: p.work_id,
            progress: p.progress,
        })
        .await?;
        Ok(WaitProgressResult {})
    }

    pub(super) async fn state_timers(
        &self,
        p: StateTimersParams,
    ) -> Result<StateTimersResult, RpcError> {
        if !p.scope_id.is_empty() && !self.identity.in_scope(&p.scope_id) {
            return Ok(StateTimersResult::default());
        }
        let prefix = timer_key(self.name(), "");
        let mut timers = Vec::new();
        let mut cursor = String::new();
        // Bounded: an extension's timers are few; a runaway cursor stops here.
        for _ in 0..64 {
            let page = self
                .store(&TimersRequest {
                    owner: Some(self.name().to_owned()),
                    scope_id: (!p.scope_id.is_empty()).then(|| p.scope_id.clone()),
                    after: cursor.clone(),
                    limit: 0,
                })
                .await?;
            for t in page.timers {
                let Some(key) = t.key.strip_prefix(&prefix) else {
                    continue;
                };
                if !self.identity.in_scope(&t.scope_id)
                    || (!p.recurrence.is_empty() && t.kind != p.recurrence)
                {
                    continue;
                }
                timers.push(wire::Timer {
                    key: key.to_string(),
                    id: t.id,
                    scope_id: t.scope_id,
                    recurrence: t.kind,
                    due_at: t.due_at,
                    spec: t.spec,
                });
            }
            if page.next.is_empty() || page.next == cursor {
                break;
            }
            cursor = page.next;
        }
        Ok(StateTimersResult { timers })
    }

    fn check_timer(&self, recurrence: &str, scope_id: &str) -> Result<(), RpcError> {
        let declared = self
            .identity
            .manifest
            .provides
            .recurrences
            .iter()
            .any(|r| r.name == recurrence);
        if !declared {
            return Err(RpcError::new(
                Code::Undeclared,
                format!("recurrence {recurrence:?} is not declared in provides.recurrences"),
            ));
        }
        if !self.identity.in_scope(scope_id) {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "scope {scope_id:?} is not one whose configuration uses {:?}",
                    self.name()
                ),
            ));
        }
        Ok(())
    }

    pub(super) async fn timer_arm(&self, p: TimerArmParams) -> Result<TimerArmResult, RpcError> {
        self.check_timer(&p.recurrence, &p.scope_id)?;
        if p.key.is_empty() {
            return Err(RpcError::new(Code::Invalid, "timer.arm needs a key"));
        }
        if p.at.is_empty() {
            return Err(RpcError::new(
                Code::Unsupported,
                "timer.arm without `at` asks recurrence.next for the first fire time, which this host does not serve yet: give `at`",
            ));
        }
        let Some(due_ms) = parse_rfc3339_ms(&p.at) else {
            return Err(RpcError::new(
                Code::Invalid,
                format!("at {:?} is not an RFC 3339 time", p.at),
            ));
        };
        let spec = (!p.spec.is_null()).then_some(p.spec);
        let armed = self
            .store(&TimerArmRequest {
                owner: self.name().to_owned(),
                kind: p.recurrence,
                scope_id: p.scope_id,
                key: timer_key(self.name(), &p.key),
                due_ms,
                spec,
                payload: None,
            })
            .await?;
        Ok(TimerArmResult {
            timer_id: armed.timer.id,
            due_at: armed.timer.due_at,
        })
    }

    pub(super) async fn timer_cancel(
        &self,
        p: TimerCancelParams,
    ) -> Result<TimerCancelResult, RpcError> {
        self.check_timer(&p.recurrence, &p.scope_id)?;
        let answer = self
            .store(&TimerCancelRequest {
                owner: self.name().to_owned(),
                kind: p.recurrence,
                scope_id: p.scope_id,
                key: timer_key(self.name(), &p.key),
            })
            .await?;
        Ok(TimerCancelResult {
            cancelled: answer.cancelled,
        })
    }
}
