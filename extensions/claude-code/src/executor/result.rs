//! A segment's end: `executor.wait` resolves once the end is recorded, then reads
//! the stream into the result, applies the turn to continuity (once) and uploads
//! the output as artifacts.

use super::*;

impl ClaudeCode {
    /// `executor.wait`: resolves once the segment's end is recorded, then
    /// applies the turn to continuity (once), uploads out.jsonl and err.log as
    /// artifacts and answers the result. Every wait, and a wait after a
    /// recover, gets the same result. An unknown execution is `not_found`.
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
        run.stdin.lock().await.take();
        // Only an adopted segment may have been answered before (by an earlier
        // process); a `result.json` older than its status is none of the extension's.
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
        let status = rundir::read_status(&dir, WORDS.unit);
        let info: SegmentInfo = rundir::read_json(&dir, rundir::SEGMENT)
            .ok()
            .flatten()
            .ok_or_else(|| internal(format!("execution {id}: segment.json is missing")))?;
        let cfg = config::parse(&info.config).ok();
        let schema = cfg
            .as_ref()
            .map_or(RESULT_SCHEMA.to_string(), |c| c.status_schema.clone());
        let structured = cfg.as_ref().is_none_or(|c| c.structured);
        // An output that is not a regular file of the segment directory (a symlink
        // put there) is never read: the turn reads as having no output, and fails
        // saying so.
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
        let turn = stream::parse(
            &String::from_utf8_lossy(&out),
            &String::from_utf8_lossy(&err),
            now,
        );
        let injected = read_injected(&dir);
        let consumed: Vec<String> = turn
            .echoed
            .iter()
            .filter(|e| injected.contains(e))
            .cloned()
            .collect();

        // The outcome.
        let mut state: Option<String> = None;
        let mut note: Option<String> = None;
        let mut summary = String::new();
        let mut report: Option<String> = None;
        let mut reason = String::new();
        let mut retry_hint = None;
        let mut resets_at = String::new();
        let (outcome, error) = if let Some(cause) = status.cause {
            reason = match cause {
                Cause::Stop => "stopped".into(),
                _ => "interrupted".into(),
            };
            (
                Outcome::Failed,
                status.failure().unwrap_or_else(|| "interrupted".into()),
            )
        } else if let Some(limit) = turn.limit {
            let reset_ms = sdk::agent::hold::lifts_at(limit.reset_ms, now);
            resets_at = match self.inner.hold.record(host, reset_ms).await {
                Ok(r) => r,
                Err((r, e)) => {
                    eprintln!("claude-code: cannot record the usage-limit hold: {e}");
                    r
                }
            };
            retry_hint = Some(RetryHint {
                reset_at: resets_at.clone(),
            });
            reason = "usage_limit".into();
            (
                Outcome::Failed,
                format!("claude hit a usage limit; retry at {resets_at}"),
            )
        } else {
            match &turn.result {
                None => {
                    reason = if turn.lost_session {
                        "session_missing".into()
                    } else {
                        "no_result".into()
                    };
                    let mut e = format!("claude ended without a result: {}", status.how());
                    if turn.lost_session {
                        e.push_str(&format!(
                            " (no conversation found with session {})",
                            info.decision.session
                        ));
                    } else if let Some(line) = String::from_utf8_lossy(&err)
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                    {
                        e.push_str(&format!(": {}", clip_line(line, 300)));
                    }
                    (Outcome::Failed, e)
                }
                Some(r) if r.is_error => {
                    reason = if turn.lost_session {
                        "session_missing".into()
                    } else {
                        "error".into()
                    };
                    (
                        Outcome::Failed,
                        format!("claude reported an error: {}", clip_line(&r.text, 300)),
                    )
                }
                Some(r) if !structured => {
                    summary = clip_line(&r.text, MAX_SUMMARY_BYTES);
                    (Outcome::Handoff, String::new())
                }
                Some(r) => match r.structured.as_ref().and_then(|s| s.as_object()) {
                    None => {
                        reason = "no_status".into();
                        (
                            Outcome::Failed,
                            "the turn ended without a status".to_string(),
                        )
                    }
                    Some(s) => {
                        let d = sdk::agent::status::read(s);
                        summary = d.summary;
                        report = d.report;
                        note = d.handoff;
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
                },
            }
        };

        // A turn whose toolbelt call claude refused is no success: what it declared
        // (or could not) is not what the agent meant.
        let (outcome, error) = if !turn.toolbelt_denied.is_empty() && outcome != Outcome::Failed {
            reason = "toolbelt_denied".into();
            state = None;
            (
                Outcome::Failed,
                format!(
                    "claude refused the toolbelt ({}) under permission_mode {:?}",
                    turn.toolbelt_denied.join(", "),
                    cfg.as_ref().map_or("", |c| c.permission_mode.as_str())
                ),
            )
        } else {
            (outcome, error)
        };
        let (outcome, error) = if refusals.is_empty() {
            (outcome, error)
        } else {
            reason = "output_refused".into();
            state = None;
            note = None;
            summary = String::new();
            report = None;
            let refused = refusals.join("; ");
            match status.failure() {
                Some(f) => (Outcome::Failed, format!("{f}; {refused}")),
                None => (Outcome::Failed, refused),
            }
        };

        // Continuity, once per segment, before the result is recorded.
        let segment_key = format!("{id}/{}", info.segment);
        let session = if turn.session_id.is_empty() {
            info.decision.session.clone()
        } else {
            turn.session_id.clone()
        };
        let reported = turn.result.as_ref().map(stream::ResultLine::reported);
        let mut attach = vec![info.binary.clone(), "--resume".into(), session.clone()];
        if let Some(c) = &cfg {
            attach.extend(attach_limits(c));
        }
        let end = TurnEnd {
            segment: segment_key,
            session,
            reported,
            fresh: info.launched == Kind::Fresh,
            state: state.clone(),
            note,
            context_tokens: turn.context_tokens(),
            ended_ms: now,
            lost_session: turn.lost_session,
            attach,
        };
        let delta = apply_turn(host, &info.work_id, &end).await?;
        let usage = turn.result.is_some().then_some(Usage {
            input_tokens: delta.tokens.input,
            output_tokens: delta.tokens.output,
            cached_tokens: delta.tokens.cache_read,
            cache_creation_tokens: delta.tokens.cache_creation,
            cost_usd: delta.cost_usd,
        });

        // Artifacts.
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
                    eprintln!(
                        "claude-code: execution {id}: the host refused the {name} artifact: {e}"
                    );
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
            "state": state.clone().unwrap_or_default(),
            "summary": summary,
            "kind": match info.launched { Kind::Resume => "resume", Kind::Fresh => "fresh" },
            "models": turn.models.iter().collect::<Vec<_>>(),
            "model_calls": turn.model_calls,
            "tool_calls": turn.tool_calls,
            "tokens": {
                "input": delta.tokens.input,
                "output": delta.tokens.output,
                "cache_read": delta.tokens.cache_read,
                "cache_creation": delta.tokens.cache_creation,
            },
            "cost_usd": delta.cost_usd,
            "limited": retry_hint.is_some(),
            "injected": {"accepted": injected.len(), "consumed": consumed.len()},
            "artifacts": Value::Object(named),
        });
        if !reason.is_empty() {
            data["reason"] = json!(reason);
        }
        if !info.decision.handoff_reason.is_empty() {
            data["handoff_reason"] = json!(info.decision.handoff_reason);
        }
        if let Some(r) = report {
            data["report"] = json!(r);
        }
        if !resets_at.is_empty() {
            data["resets_at"] = json!(resets_at);
        }
        if let Some(code) = status.exit_code {
            data["exit_code"] = json!(code);
        }
        if summary_is_empty(&data) && !error.is_empty() {
            data["summary"] = json!(clip_line(&error, MAX_SUMMARY_BYTES));
        }
        let summary = data["summary"].as_str().unwrap_or("").to_string();
        Ok(ExecutorWaitResult {
            outcome,
            data: Some(Payload { schema, data }),
            summary,
            error,
            wait: None,
            consumed_inputs: consumed,
            retry_hint,
            usage,
            artifacts,
        })
    }
}

fn summary_is_empty(data: &Value) -> bool {
    data["summary"].as_str().is_none_or(str::is_empty)
}

/// Applies a finished segment to the Work's continuity, once; answers the
/// per-turn delta (the same every time).
async fn apply_turn(host: &Host, work_id: &str, end: &TurnEnd) -> Result<TurnUsage, RpcError> {
    sdk::agent::continuity::update(
        host,
        &continuity::key(work_id),
        "applying the turn",
        |c: &mut Continuity| continuity::apply(c, end),
    )
    .await
}

fn read_injected(dir: &Path) -> Vec<String> {
    let read = sdk::nofollow::Dir::open(dir)
        .and_then(|d| d.read(rundir::INJECTED, sdk::nofollow::MAX_RECORD_BYTES));
    let Ok(Some(bytes)) = read else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
}
