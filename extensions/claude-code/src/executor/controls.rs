//! The controls on a run: `executor.inject`, `interrupt`, `stop`, `live`,
//! `forget` and `attach`.

use super::*;

impl ClaudeCode {
    /// `executor.inject`: writes the Event to the segment's stdin as a
    /// stream-json user message. Only a segment this process started and whose
    /// result has not arrived takes input; anything else is `not_accepting`. An
    /// Event already written is not written again.
    pub async fn inject(
        &self,
        host: &sdk::Host,
        p: ExecutorInjectParams,
    ) -> Result<ExecutorInjectResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let Some(run) = self.get(id) else {
            return Err(not_accepting(id, "this process does not hold it"));
        };
        check_epoch(&run, p.epoch)?;
        if run.tracked.ended() {
            return Err(not_accepting(id, "its turn has ended"));
        }
        // Rendered by the package that owns its family, as the turn's own inputs are
        // (asked before the input is locked: the owner may take a while).
        let rendered = {
            let mut req = run.req.lock().unwrap_or_else(|e| e.into_inner()).clone();
            req.inputs = vec![p.event.clone()];
            prompt::owned_renderings(host, &req).await
        };
        let mut stdin = run.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(not_accepting(
                id,
                "its segment is adopted or already has its result",
            ));
        };
        let dir = run.launch.as_ref().map(|l| l.dir.clone());
        if let Some(d) = &dir {
            if rundir::exists(d, rundir::STATUS) {
                return Err(not_accepting(id, "its turn has ended"));
            }
        }
        {
            let written = run.injected.lock().unwrap_or_else(|e| e.into_inner());
            if written.contains(&p.event.id) {
                return Ok(ExecutorInjectResult {});
            }
        }
        let line = prompt::user_message(&prompt::inject_text(&p.event, &rendered));
        if pipe.write_all(line.as_bytes()).await.is_err() || pipe.flush().await.is_err() {
            *stdin = None;
            return Err(not_accepting(id, "its input closed"));
        }
        run.injected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p.event.id.clone());
        if let Some(d) = dir {
            let record = format!("{}\n", json!({"id": p.event.id}));
            let appended = sdk::nofollow::Dir::open(&d)
                .and_then(|dir| dir.append(rundir::INJECTED, 0o600))
                .and_then(|mut f| f.write_all(record.as_bytes()));
            if let Err(e) = appended {
                eprintln!("claude-code: execution {id}: cannot record an injection: {e}");
            }
        }
        Ok(ExecutorInjectResult {})
    }

    /// `executor.interrupt`: asks the wrapper to end claude's group (SIGTERM,
    /// then SIGKILL after the grace period), cause `interrupt`. Answers at once.
    pub async fn interrupt(
        &self,
        p: ExecutorInterruptParams,
    ) -> Result<ExecutorInterruptResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let run = self.get(id).ok_or_else(|| {
            refuse(
                Code::NotFound,
                format!("execution {id} is not known to this process"),
            )
        })?;
        check_epoch(&run, p.epoch)?;
        let Some(launch) = &run.launch else {
            return Ok(ExecutorInterruptResult {});
        };
        if !rundir::exists(&launch.dir, rundir::STATUS) {
            ask_to_end(launch, Cause::Interrupt, &p.reason)?;
        }
        Ok(ExecutorInterruptResult {})
    }

    /// `executor.stop`: ends the segment's processes (cause `stop`) and answers
    /// once they are gone, with the evidence. Works from the segment directory
    /// alone, for an execution this process never adopted.
    pub async fn stop(&self, p: ExecutorStopParams) -> Result<ExecutorStopResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        check_id(id)?;
        let launch = match self.get(id) {
            Some(run) => {
                check_epoch(&run, p.epoch)?;
                match &run.launch {
                    Some(l) => l.clone(),
                    None => {
                        return Ok(ExecutorStopResult {
                            stopped: true,
                            detail: format!("execution {id} started no process"),
                        })
                    }
                }
            }
            None => {
                let found =
                    latest_segment(&self.runs_dir().join(id)).and_then(|(_, dir)| on_disk(&dir));
                match found {
                    Some(l) => l,
                    None => {
                        return Ok(ExecutorStopResult {
                            stopped: true,
                            detail: format!("execution {id} started no process here"),
                        })
                    }
                }
            }
        };
        launch
            .stop(WORDS)
            .await
            .map_err(|e| internal(format!("asking the wrapper to end claude: {e}")))
    }

    /// `executor.live`: the running segment's stream so far (`out.jsonl`, claude's
    /// stream-json lines, and `err.log`), each one's size and last `tail` bytes
    /// ([`sdk::live::answer`]). The segment is the one this process follows, else
    /// the execution's latest on disk (as stop finds it); one that has ended, or
    /// none, is `not_live`.
    pub async fn live(&self, p: ExecutorLiveParams) -> Result<ExecutorLiveResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        check_id(id)?;
        let launch = match self.get(id) {
            Some(run) => run.launch.clone(),
            None => latest_segment(&self.runs_dir().join(id)).and_then(|(_, dir)| on_disk(&dir)),
        };
        sdk::live::answer(launch.as_ref(), id, rundir::LIVE_OUTPUTS, p.tail).await
    }

    /// `executor.forget`: removes the segment directories of an ended
    /// execution (or of every ended execution of the Work); without an
    /// execution it also releases the Work's continuity. A segment still
    /// running is refused (`conflict`).
    pub async fn forget(
        &self,
        host: &Host,
        p: ExecutorForgetParams,
    ) -> Result<ExecutorForgetResult, RpcError> {
        check_executor(&p.executor)?;
        let runs = self.runs_dir();
        let single = !p.execution_id.is_empty();
        let ids: Vec<String> = if single {
            check_id(&p.execution_id)?;
            vec![p.execution_id.clone()]
        } else if !p.work_id.is_empty() {
            let known: Vec<String> = self
                .table()
                .runs
                .iter()
                .filter(|(_, r)| r.work_id == p.work_id)
                .map(|(id, _)| id.clone())
                .collect();
            sdk::segments::of_work(&runs, &p.work_id, known)
        } else {
            return Err(refuse(
                Code::Invalid,
                "forget needs a work_id or an execution_id",
            ));
        };
        let forgotten = sdk::segments::forget(&runs, ids, single, rundir::WRAP_ARG)?;
        for id in &forgotten.removed {
            self.table().runs.remove(id);
        }
        if !single && !p.work_id.is_empty() {
            let batch = KvCommitParams {
                deletes: vec![KvDelete {
                    namespace: String::new(),
                    key: continuity::key(&p.work_id),
                }],
                ..KvCommitParams::default()
            };
            host.kv_commit(&batch)
                .await
                .map_err(|e| host_error("releasing continuity", e))?;
        }
        Ok(ExecutorForgetResult {})
    }

    /// `executor.attach`: `claude --resume <session>` in the Work's workspace,
    /// and clears the handoff note so the next turn resumes even when cold. A
    /// Work without a session is `nothing_to_attach`.
    pub async fn attach(
        &self,
        host: &Host,
        p: ExecutorAttachParams,
    ) -> Result<ExecutorAttachResult, RpcError> {
        check_executor(&p.executor)?;
        let cfg = config::parse(&p.config).map_err(|e| {
            refuse(
                Code::Invalid,
                format!("invalid claude-code executor config: {e}"),
            )
        })?;
        let key = continuity::key(&p.work_id);
        for _ in 0..KV_RETRIES {
            let got = host
                .kv_get(&key)
                .await
                .map_err(|e| host_error("reading continuity", e))?;
            let mut c: Continuity = got
                .value
                .clone()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            if c.session.is_empty() {
                return Err(refuse(
                    Code::NothingToAttach,
                    format!("work {} has no Claude Code session", p.work_id),
                ));
            }
            let mut argv = vec![cfg.binary.clone(), "--resume".into(), c.session.clone()];
            argv.extend(attach_limits(&cfg));
            c.note = None;
            c.attach = argv.clone();
            let batch = KvCommitParams {
                checks: vec![got.check("", &key)],
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: key.clone(),
                    value: json!(c),
                }],
                ..KvCommitParams::default()
            };
            match host.kv_commit(&batch).await {
                Ok(_) => {
                    return Ok(ExecutorAttachResult {
                        argv,
                        dir: self.workspace(&cfg, &p.work_id).display().to_string(),
                        env: BTreeMap::new(),
                    })
                }
                Err(CallError::Rpc(e)) if e.is(Code::Conflict) => continue,
                Err(e) => return Err(host_error("clearing the note", e)),
            }
        }
        Err(refuse(Code::Conflict, "continuity kept changing"))
    }
}

/// Writes the kill request the wrapper acts on ([`Launch::ask_to_end`]).
fn ask_to_end(launch: &Launch, cause: Cause, reason: &str) -> Result<(), RpcError> {
    let request = KillRequest {
        cause,
        reason: clip_line(reason, MAX_SUMMARY_BYTES),
    };
    launch
        .ask_to_end(&request, WORDS)
        .map_err(|e| internal(format!("asking the wrapper to end claude: {e}")))
}
