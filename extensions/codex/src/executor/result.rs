//! A segment's end: `executor.wait` resolves once the end is recorded, then reads the
//! events, the last message (the structured status) and the rollout into the result,
//! records the session in continuity (once), and uploads the output as artifacts.

use super::*;
use protocol::wire::{
    ArtifactCreateParams, ExecutorWaitParams, Outcome, Payload, RetryHint, Usage,
};
use sdk::agent::status::{self, MAX_SUMMARY_BYTES};

/// A turn's usage as the protocol counts it: input not cached, cached input,
/// cache writes, output (reasoning included); codex reports no cost.
pub fn usage_of(t: &Tokens) -> Usage {
    Usage {
        input_tokens: t.input.saturating_sub(t.cached_input),
        output_tokens: t.output,
        cached_tokens: t.cached_input,
        cache_creation_tokens: t.cache_write,
        cost_usd: None,
    }
}

impl Codex {
    /// `executor.wait`: resolves once the segment's end is recorded; every wait, and
    /// a wait after a recover, gets the same result.
    pub async fn wait(
        &self,
        host: &Host,
        p: ExecutorWaitParams,
    ) -> Result<ExecutorWaitResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let run = self.get(id).ok_or_else(|| {
            refuse(
                Code::NotFound,
                format!("execution {id} is not known to this process: recover it"),
            )
        })?;
        if let Some(r) = run.result.lock().await.clone() {
            return Ok(r);
        }
        let Some(launch) = run.launch.clone() else {
            return Err(internal(format!(
                "execution {id} has neither a process nor a result"
            )));
        };
        launch.await_end(WORDS).await;
        let mut cached = run.result.lock().await;
        if let Some(r) = cached.clone() {
            return Ok(r);
        }
        let result = launch
            .answer_once(run.adopted, WORDS, id, self.build_result(host, id, &launch))
            .await?;
        *cached = Some(result.clone());
        drop(cached);
        run.tracked.set_ended();
        evict(&mut self.table().runs, MAX_RETAINED, |r: &Run| &r.tracked);
        Ok(result)
    }

    async fn build_result(
        &self,
        host: &Host,
        id: &str,
        launch: &Launch,
    ) -> Result<ExecutorWaitResult, RpcError> {
        let dir = launch.dir.clone();
        let st = rundir::read_status(&dir, WORDS.unit);
        let info: SegmentInfo = rundir::read_json(&dir, rundir::SEGMENT)
            .ok()
            .flatten()
            .ok_or_else(|| internal(format!("execution {id}: segment.json is missing")))?;
        let cfg = config::parse(&info.config).ok();
        let schema = cfg
            .as_ref()
            .map_or(RESULT_SCHEMA.to_string(), |c| c.status_schema.clone());
        let structured = cfg.as_ref().is_none_or(|c| c.structured);
        let rundir::Outputs {
            stdout: out,
            stderr: err,
            refusals,
        } = rundir::read_outputs(
            &dir,
            WORDS.unit,
            rundir::STDOUT,
            rundir::STDERR,
            MAX_OUTPUT_BYTES,
        )
        .await
        .map_err(internal)?;
        let now = protocol::time::now_ms();
        let turn = stream::parse(&String::from_utf8_lossy(&out));
        let err_text = String::from_utf8_lossy(&err);
        let session = if turn.thread_id.is_empty() {
            info.session.clone()
        } else {
            turn.thread_id.clone()
        };
        let home = PathBuf::from(&info.home);
        let rollout = stream::find_rollout(&home, &session)
            .and_then(|p| stream::read_tail(&p).ok())
            .map(|t| stream::read_rollout(&t))
            .unwrap_or_default();
        let lost_session = info.kind == Kind::Resume && err_text.contains("no rollout found");
        // The last agent message: `-o`'s file, else the last agent_message event.
        let last = sdk::nofollow::Dir::open(&dir)
            .and_then(|d| d.read(rundir::LAST, sdk::nofollow::MAX_RECORD_BYTES))
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .filter(|t| !t.trim().is_empty())
            .or_else(|| turn.last_message.clone());

        let mut state: Option<String> = None;
        let mut summary = String::new();
        let mut report: Option<String> = None;
        let mut reason = String::new();
        let mut retry_hint = None;
        let mut resets_at = String::new();
        let failed_message = turn.failed.clone().or_else(|| turn.error.clone());
        let limited =
            rollout.limited || failed_message.as_deref().is_some_and(stream::limit_message);
        let (outcome, error) = if let Some(cause) = st.cause {
            reason = match cause {
                Cause::Stop => "stopped".into(),
                _ => "interrupted".into(),
            };
            (
                Outcome::Failed,
                st.failure().unwrap_or_else(|| "interrupted".into()),
            )
        } else if limited {
            let until = sdk::agent::hold::lifts_at(rollout.reset_ms, now);
            resets_at = match self.inner.hold.record(host, until).await {
                Ok(r) => r,
                Err((r, e)) => {
                    eprintln!("codex: cannot record the usage-limit hold: {e}");
                    r
                }
            };
            retry_hint = Some(RetryHint {
                reset_at: resets_at.clone(),
            });
            reason = "usage_limit".into();
            (
                Outcome::Failed,
                format!("codex hit a usage limit; retry at {resets_at}"),
            )
        } else if let Some(m) = &failed_message.filter(|_| !turn.completed) {
            reason = "error".into();
            (
                Outcome::Failed,
                format!("codex reported an error: {}", clip_line(m, 300)),
            )
        } else if !turn.completed {
            reason = if lost_session {
                "session_missing".into()
            } else {
                "no_result".into()
            };
            let mut e = format!("codex ended without completing the turn: {}", st.how());
            if let Some(line) = err_text.lines().rev().find(|l| !l.trim().is_empty()) {
                e.push_str(&format!(": {}", clip_line(line, 300)));
            }
            (Outcome::Failed, e)
        } else if !structured {
            summary = clip_line(last.as_deref().unwrap_or(""), MAX_SUMMARY_BYTES);
            (Outcome::Handoff, String::new())
        } else {
            let parsed = last
                .as_deref()
                .and_then(|t| serde_json::from_str::<Value>(t.trim()).ok())
                .and_then(|v| v.as_object().cloned());
            match parsed {
                None => {
                    reason = "no_status".into();
                    (
                        Outcome::Failed,
                        "the turn ended without a status".to_string(),
                    )
                }
                Some(s) => {
                    let d = status::read(&s);
                    summary = d.summary;
                    report = d.report;
                    match d.outcome {
                        Ok(o) => {
                            state = Some(d.state);
                            (o, String::new())
                        }
                        Err(e) => {
                            reason = "no_status".into();
                            (Outcome::Failed, e)
                        }
                    }
                }
            }
        };
        let (outcome, error) = if refusals.is_empty() {
            (outcome, error)
        } else {
            reason = "output_refused".into();
            state = None;
            summary = String::new();
            report = None;
            let refused = refusals.join("; ");
            match st.failure() {
                Some(f) => (Outcome::Failed, format!("{f}; {refused}")),
                None => (Outcome::Failed, refused),
            }
        };

        // The session's totals after the turn: the rollout's last count, else what
        // turn.completed said; the turn's usage is the rise over the baseline.
        let totals = rollout.totals.or(turn.totals);
        let base = if session == info.session {
            info.baseline
        } else {
            Tokens::default()
        };
        let delta = totals.map(|t| t.since(&base)).unwrap_or_default();
        let end = continuity::TurnEnd {
            segment: format!("{id}/{}", info.segment),
            session: if lost_session {
                String::new()
            } else {
                session.clone()
            },
            totals,
            ended_ms: now,
        };
        apply_turn(host, &info.work_id, &end).await?;
        let usage = totals.is_some().then(|| usage_of(&delta));

        let mut artifacts = Vec::new();
        let mut named = serde_json::Map::new();
        for (name, media, bytes, label) in [
            (rundir::STDOUT, "application/x-ndjson", &out, "transcript"),
            (rundir::STDERR, "text/plain", &err, "log"),
        ] {
            if bytes.is_empty() {
                continue;
            }
            let create = ArtifactCreateParams {
                execution_id: id.to_string(),
                name: name.to_string(),
                media_type: media.to_string(),
                max_bytes: 0,
            };
            match host.upload_artifact(&create, bytes).await {
                Ok(committed) => {
                    named.insert(label.into(), json!(committed.artifact_id));
                    artifacts.push(committed.artifact_id);
                }
                Err(CallError::Rpc(e)) => {
                    eprintln!("codex: execution {id}: the host refused the {name} artifact: {e}");
                }
                Err(e) => {
                    return Err(refuse(
                        Code::Unavailable,
                        format!("uploading the {name} artifact: {e}"),
                    ))
                }
            }
        }
        let mut data = json!({
            "state": state.unwrap_or_default(),
            "summary": summary,
            "kind": match info.kind { Kind::Resume => "resume", Kind::Fresh => "fresh" },
            "session": session,
            "models": [info.model],
            "tool_calls": turn.tool_calls,
            "commands": turn.commands,
            "tokens": {
                "input": delta.input,
                "cached_input": delta.cached_input,
                "cache_write": delta.cache_write,
                "output": delta.output,
                "reasoning_output": delta.reasoning_output,
            },
            "limited": retry_hint.is_some(),
            "artifacts": Value::Object(named),
        });
        if !reason.is_empty() {
            data["reason"] = json!(reason);
        }
        if let Some(r) = report {
            data["report"] = json!(r);
        }
        if !resets_at.is_empty() {
            data["resets_at"] = json!(resets_at);
        }
        if !turn.toolbelt_failed.is_empty() {
            data["toolbelt_failed"] = json!(turn.toolbelt_failed);
        }
        if let Some(code) = st.exit_code {
            data["exit_code"] = json!(code);
        }
        if data["summary"].as_str().is_none_or(str::is_empty) && !error.is_empty() {
            data["summary"] = json!(clip_line(&error, MAX_SUMMARY_BYTES));
        }
        let summary = data["summary"].as_str().unwrap_or("").to_string();
        Ok(ExecutorWaitResult {
            outcome,
            data: Some(Payload { schema, data }),
            summary,
            error,
            wait: None,
            consumed_inputs: Vec::new(),
            retry_hint,
            usage,
            artifacts,
        })
    }
}

/// Applies a finished segment to the Work's continuity, once.
async fn apply_turn(host: &Host, work_id: &str, end: &continuity::TurnEnd) -> Result<(), RpcError> {
    sdk::agent::continuity::update(
        host,
        &continuity::key(work_id),
        "applying the turn",
        |c: &mut Continuity| ((), continuity::apply(c, end)),
    )
    .await
}
