//! Starting a segment: `executor.run` and `executor.resume`, the checks that need
//! no process, the decision recorded in continuity before the launch, the files,
//! the wrapper and the prompt on stdin, and the follower that closes claude's
//! stdin once its result arrives.

use super::*;

struct Prepared {
    cfg: ClaudeConfig,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    binary: PathBuf,
    /// The binding's workspace, when it has a resource.
    workspace: Option<ProvidedResource>,
}

/// The `secret_env` variables' values ([`sdk::agent::secret_env::resolve`]).
async fn resolve_secrets(
    host: &Host,
    req: &RunRequest,
    cfg: &ClaudeConfig,
) -> Result<BTreeMap<String, String>, ExecutorWaitResult> {
    sdk::agent::secret_env::resolve(host, req, &cfg.secret_env)
        .await
        .map_err(|u| failure(&cfg.status_schema, u.reason, u.error))
}

impl ClaudeCode {
    /// `executor.run`: checks what needs no process (config, dry run, the
    /// usage-limit hold, the working directory, secrets, the binary; each a
    /// structured failure with no process), then starts the first segment.
    pub async fn run(
        &self,
        host: &Host,
        p: ExecutorRunParams,
    ) -> Result<ExecutorRunResult, RpcError> {
        let req = p.run;
        check_executor(&req.executor)?;
        check_id(&req.execution_id)?;
        if self.get(&req.execution_id).is_some() {
            return Ok(ExecutorRunResult {});
        }
        self.start(host, req, "1", false).await?;
        Ok(ExecutorRunResult {})
    }

    /// `executor.resume`: wakes a parked execution as a new `--resume` segment
    /// of the same session, with the inputs that woke it.
    pub async fn resume(
        &self,
        host: &Host,
        p: ExecutorResumeParams,
    ) -> Result<ExecutorResumeResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let run = self.get(id).ok_or_else(|| {
            refuse(
                Code::NotFound,
                format!("execution {id} is not known to this process"),
            )
        })?;
        check_epoch(&run, p.epoch)?;
        if !run.tracked.ended() && run.result.lock().await.is_none() {
            return Err(refuse(
                Code::Conflict,
                format!("execution {id} is still running a segment"),
            ));
        }
        let mut req = run.req.lock().unwrap_or_else(|e| e.into_inner()).clone();
        req.epoch = p.epoch;
        req.inputs = p.inputs;
        if let Some(t) = p.toolbelt {
            req.toolbelt = t;
        }
        let exec_dir = self.runs_dir().join(id);
        let next = latest_segment(&exec_dir).map_or(1, |(n, _)| n + 1);
        self.start(host, req, &next.to_string(), true).await?;
        Ok(ExecutorResumeResult {})
    }

    /// The binding's workspace (spec 003, Workspace and environment): a new segment
    /// acquires it (mode `workspace_mode`, `branch`), a resumed one looks up the
    /// lease its last segment ran in. A binding with both a resource and `dir` is
    /// invalid_config; a refusal is a structured failure with no process.
    async fn workspace_for(
        &self,
        host: &Host,
        req: &RunRequest,
        cfg: &ClaudeConfig,
        resumed_from: Option<&str>,
    ) -> Result<Option<ProvidedResource>, ExecutorWaitResult> {
        let schema = &cfg.status_schema;
        if req.binding.resource.is_none() || req.dry_run {
            return Ok(None);
        }
        if cfg.dir.is_some() {
            return Err(failure(
                schema,
                "invalid_config",
                "invalid_config: the binding has both a resource and the executor's dir; drop one"
                    .into(),
            ));
        }
        let got = match resumed_from.filter(|r| !r.is_empty()) {
            Some(reference) => sdk::workspace::lookup(host, req, reference).await.map(Some),
            None => {
                let params = match &cfg.branch {
                    Some(b) => json!({"branch": b}),
                    None => Value::Null,
                };
                let mode = cfg.mode_for(sdk::sandbox::sandboxed(req));
                sdk::workspace::acquire(host, req, mode, params).await
            }
        };
        got.map_err(|f| failure(schema, &f.reason, f.line()))
    }

    async fn prepare(
        &self,
        host: &Host,
        req: &RunRequest,
        token_file: &Path,
        resumed_from: Option<&str>,
    ) -> Result<Prepared, ExecutorWaitResult> {
        let cfg = config::parse(&req.config).map_err(|e| {
            failure(
                RESULT_SCHEMA,
                "invalid_config",
                format!("invalid claude-code executor config: {e}"),
            )
        })?;
        let schema = cfg.status_schema.clone();
        let workspace = self.workspace_for(host, req, &cfg, resumed_from).await?;
        let cwd = match &workspace {
            Some(w) => PathBuf::from(&w.dir),
            None => self.workspace(&cfg, &req.work.id),
        };
        if workspace.is_some() {
            if !cwd.is_dir() {
                return Err(failure(
                    &schema,
                    "workspace_unavailable",
                    format!(
                        "workspace_unavailable: the workspace {} is not a directory",
                        cwd.display()
                    ),
                ));
            }
        } else if cfg.dir.is_some() {
            if !cwd.is_dir() {
                return Err(failure(
                    &schema,
                    "workspace_unavailable",
                    format!(
                        "workspace_unavailable: the binding's dir {} is not a directory",
                        cwd.display()
                    ),
                ));
            }
        } else if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cwd)
        {
            return Err(failure(
                &schema,
                "workspace_unavailable",
                format!(
                    "workspace_unavailable: cannot create {}: {e}",
                    cwd.display()
                ),
            ));
        }
        let secrets = resolve_secrets(host, req, &cfg).await?;
        let own: BTreeMap<String, String> = std::env::vars().collect();
        let client = has_toolbelt(req).then(|| ToolbeltClient {
            endpoint: req.toolbelt.endpoint.clone(),
            token_file: token_file.display().to_string(),
            dir: req.toolbelt.dir.clone(),
        });
        let provider = workspace
            .as_ref()
            .map(sdk::workspace::provider_layer)
            .unwrap_or_default();
        let env = envs::build(&own, req, &cfg, &provider, &secrets, client.as_ref());
        let binary = envs::find_program(&cfg.binary, &env).ok_or_else(|| {
            failure(
                &schema,
                "binary_missing",
                format!(
                    "binary_missing: the Claude Code CLI `{}` was not found (set the binding's binary, or put it on PATH)",
                    cfg.binary
                ),
            )
        })?;
        Ok(Prepared {
            cfg,
            cwd,
            env,
            binary,
            workspace,
        })
    }

    /// Starts segment `segment` of `req`: the checks that need no process, the
    /// recovery intent (persisted first), the decision (recorded in the KV
    /// before the launch), the files, the wrapper, and the prompt on stdin.
    async fn start(
        &self,
        host: &Host,
        req: RunRequest,
        segment: &str,
        force_resume: bool,
    ) -> Result<(), RpcError> {
        let id = req.execution_id.clone();
        let exec_dir = self.runs_dir().join(&id);
        let dir = exec_dir.join(segment);
        let token_file = dir.join(rundir::TOKEN);
        // A resumed segment runs in the lease its last segment ran in.
        let resumed_from = force_resume
            .then(|| latest_segment(&exec_dir))
            .flatten()
            .and_then(|(_, last)| {
                rundir::read_json::<SegmentInfo>(&last, rundir::SEGMENT)
                    .ok()
                    .flatten()
            })
            .map(|info| info.workspace_ref);
        let prepared = match self
            .prepare(host, &req, &token_file, resumed_from.as_deref())
            .await
        {
            Ok(p) => p,
            Err(result) => {
                self.known(&req, result);
                return Ok(());
            }
        };
        let Prepared {
            cfg,
            cwd,
            mut env,
            binary,
            workspace,
        } = prepared;
        if req.dry_run {
            let result = ExecutorWaitResult {
                summary: clip_line(&format!("dry run: {}", cfg.describe()), MAX_SUMMARY_BYTES),
                ..ExecutorWaitResult::new(Outcome::Completed)
            };
            self.known(&req, result);
            return Ok(());
        }
        let now = protocol::time::now_ms();
        if let Some(reset_at) = self.hold(host, now).await {
            self.known(
                &req,
                sdk::agent::status::limited_failure(&cfg.status_schema, "claude", &reset_at),
            );
            return Ok(());
        }
        let exe = self.inner.exe.clone().map_err(|e| {
            internal(format!(
                "cannot find this executable to start the wrapper: {e}"
            ))
        })?;
        let nonce = rundir::nonce().map_err(|e| internal(format!("making a nonce: {e}")))?;
        // Recovery intent first, before anything is touched.
        persist(host, &req, &dir, &nonce, (0, 0), "").await?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&exec_dir)
            .map_err(|e| internal(format!("cannot create {}: {e}", exec_dir.display())))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(refuse(
                    Code::Conflict,
                    format!(
                        "execution {id} segment {segment} was launched before: recover it instead"
                    ),
                ))
            }
            Err(e) => return Err(internal(format!("cannot create {}: {e}", dir.display()))),
        }
        let config_dir = envs::claude_config_dir(&env);
        let cwd_text = cwd.display().to_string();
        let (decision, note) = self
            .decide(host, &req, &cfg, segment, force_resume, |s| {
                continuity::find_transcript(&config_dir, &cwd_text, s).is_some()
            })
            .await?;
        if std::env::var(FAULT_ENV).as_deref() == Ok("after_decision") {
            eprintln!("claude-code: {FAULT_ENV}=after_decision: exiting before the launch");
            std::process::exit(86);
        }
        let found = continuity::find_transcript(&config_dir, &cwd_text, &decision.session);
        let launched = if decision.kind == Kind::Fresh && found.is_some() {
            Kind::Resume
        } else {
            decision.kind
        };
        let transcript = found.unwrap_or_else(|| {
            continuity::transcript_path(&config_dir, &cwd_text, &decision.session)
        });
        let mcp = if has_toolbelt(&req) {
            let io = |e: std::io::Error| internal(format!("writing the MCP config: {e}"));
            write_token(&token_file, &req.toolbelt.token).map_err(io)?;
            let command = if req.toolbelt.dir.is_empty() {
                std::env::var("OPEN_CONDUIT_BIN")
                    .ok()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "open-conduit".to_string())
            } else {
                Path::new(&req.toolbelt.dir)
                    .join("open-conduit")
                    .display()
                    .to_string()
            };
            let mcp = json!({"mcpServers": {"open-conduit": {
                "command": command,
                "args": ["mcp"],
                "env": {"OS_ENDPOINT": req.toolbelt.endpoint, "OS_TOKEN_FILE": token_file},
            }}});
            rundir::write_json(&dir, rundir::MCP, &mcp).map_err(io)?;
            Some(dir.join(rundir::MCP))
        } else {
            None
        };
        let model = cfg.model_for(&req.work.context);
        let mut argv: Vec<String> = vec![
            binary.display().to_string(),
            "-p".into(),
            "--model".into(),
            model.clone(),
            "--permission-mode".into(),
            cfg.permission_mode.clone(),
            "--input-format".into(),
            "stream-json".into(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--replay-user-messages".into(),
        ];
        let plugin_dir = cfg.plugin_dir.clone().or_else(|| {
            (cfg.playbook.is_some() && !req.playbook_dir.is_empty())
                .then(|| req.playbook_dir.clone())
        });
        if let Some(d) = &plugin_dir {
            argv.extend(["--plugin-dir".into(), d.clone()]);
        }
        if cfg.structured {
            argv.extend([
                "--json-schema".into(),
                sdk::agent::status::schema().to_string(),
            ]);
        }
        match launched {
            Kind::Resume => argv.extend(["--resume".into(), decision.session.clone()]),
            Kind::Fresh => argv.extend(["--session-id".into(), decision.session.clone()]),
        }
        if let Some(m) = &mcp {
            // The toolbelt's tools are always allowed, whatever the permission mode.
            argv.extend([
                "--mcp-config".into(),
                m.display().to_string(),
                "--allowedTools".into(),
                TOOLBELT_RULE.into(),
            ]);
        }
        if cfg.strict_mcp {
            argv.push("--strict-mcp-config".into());
        }
        if let Some(tools) = &cfg.builtin_tools {
            argv.extend(["--tools".into(), tools.join(",")]);
        }
        argv.extend(cfg.extra_args.iter().cloned());
        let info = SegmentInfo {
            execution_id: id.clone(),
            work_id: req.work.id.clone(),
            segment: segment.to_string(),
            decision: decision.clone(),
            launched,
            cwd: cwd_text.clone(),
            // Never a credential the binding's env holds in plain text.
            config: envs::redacted_config(&req.config),
            binary: binary.display().to_string(),
            model,
            transcript: transcript.display().to_string(),
            workspace_ref: workspace
                .as_ref()
                .map(|w| w.reference.clone())
                .unwrap_or_default(),
            started_ms: now,
        };
        let io = |what: &str, e: std::io::Error| internal(format!("{what}: {e}"));
        rundir::write_json(&dir, rundir::SEGMENT, &info)
            .map_err(|e| io("writing segment.json", e))?;
        // A sandboxed or contained binding's launch is the plan the host pinned: a
        // refusal is a structured failure, and nothing starts.
        let mut cwd_text = cwd_text;
        let mut sandbox_digest = String::new();
        if sdk::sandbox::confined(&req) {
            // Beside the segment directory, not in it: that is a read need, and srt
            // mounts read needs over write needs.
            let tmp = sdk::sandbox::own_tmp(exec_dir.join(format!("{segment}.tmp")))
                .map_err(|e| io("making the segment's tmp", e))?;
            let seg = sdk::agent::confine::Segment {
                dir: &dir,
                tmp: &tmp,
                cwd: &cwd_text,
                config_dir: &config_dir,
                plugin_dir: plugin_dir.as_deref(),
                toolbelt: mcp.is_some(),
                api_host: sandbox::api_host(&env),
            };
            match sdk::agent::confine::confine(host, &req, &seg, argv, &mut env).await {
                Ok(Some(planned)) => {
                    argv = planned.argv;
                    cwd_text = planned.cwd;
                    env = planned.env;
                    sandbox_digest = planned.digest;
                }
                Ok(None) => return Err(internal("the binding's sandbox planned nothing")),
                Err(r) => {
                    self.known(&req, failure(&cfg.status_schema, &r.reason, r.line()));
                    return Ok(());
                }
            }
        }
        let spec = Spec {
            execution_id: id.clone(),
            work_id: req.work.id.clone(),
            argv,
            cwd: cwd_text,
            deadline_s: None,
            grace_s: GRACE_S,
            nonce: nonce.clone(),
        };
        rundir::write_json_for_boot(&dir, rundir::SPEC, &spec)
            .map_err(|e| io("writing spec.json", e))?;
        let started = rundir::start_wrapper(
            &exe,
            rundir::WRAP_ARG,
            &dir,
            &nonce,
            &env,
            "claude-code",
            |pid, start| persist(host, &req, &dir, &nonce, (pid, start), &sandbox_digest),
        )
        .await?;
        let (pid, start, mut stdin, mut child) =
            (started.pid, started.start, started.stdin, started.child);
        let args = prompt::template(&cfg.args, &req.work);
        // The inputs as their families' owners render them (the rest generically).
        let rendered = prompt::owned_renderings(host, &req).await;
        let text = prompt::prompt(
            cfg.playbook.as_deref(),
            &args,
            decision.shape,
            &note,
            &req.inputs,
            &rendered,
        );
        if let Some(pipe) = stdin.as_mut() {
            let first = format!("go\n{}", prompt::user_message(&text));
            if pipe.write_all(first.as_bytes()).await.is_err() {
                // The wrapper died already: the first wait finds it lost.
                stdin = None;
            } else {
                let _ = pipe.flush().await;
            }
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let launch = Launch {
            dir: dir.clone(),
            pid,
            start,
            nonce,
            wrap_arg: rundir::WRAP_ARG,
        };
        tracing::info!(pid, "the agent's turn started");
        let run = self.insert(&req, Some(launch), stdin, None, false);
        tokio::spawn(follow(run, dir));
        Ok(())
    }

    /// Reads continuity and decides (or takes over the decision in flight),
    /// recording it in the KV before the launch. Answers the decision and the
    /// note a handoff starts from.
    async fn decide(
        &self,
        host: &Host,
        req: &RunRequest,
        cfg: &ClaudeConfig,
        segment: &str,
        force_resume: bool,
        transcript_exists: impl Fn(&str) -> bool,
    ) -> Result<(Decision, String), RpcError> {
        let key = continuity::key(&req.work.id);
        for _ in 0..KV_RETRIES {
            let got = host
                .kv_get(&key)
                .await
                .map_err(|e| host_error("reading continuity", e))?;
            let mut c: Continuity = match &got.value {
                Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                    eprintln!(
                        "claude-code: work {}: continuity does not read ({e}); starting afresh",
                        req.work.id
                    );
                    Continuity::default()
                }),
                None => Continuity::default(),
            };
            let decision = match c.in_flight.clone() {
                // A decision recorded but never settled: take it over.
                Some(d) => Decision {
                    execution_id: req.execution_id.clone(),
                    epoch: req.epoch,
                    segment: segment.to_string(),
                    ..d
                },
                None if force_resume && !c.session.is_empty() => Decision {
                    execution_id: req.execution_id.clone(),
                    epoch: req.epoch,
                    segment: segment.to_string(),
                    kind: Kind::Resume,
                    session: c.session.clone(),
                    shape: Shape::Events,
                    handoff_reason: String::new(),
                },
                None => continuity::decide(
                    &c,
                    cfg,
                    !c.session.is_empty() && transcript_exists(&c.session),
                    protocol::time::now_ms(),
                    &req.execution_id,
                    req.epoch,
                    segment,
                    new_session_id,
                ),
            };
            if let Some(old) = &c.in_flight {
                if old.execution_id == req.execution_id && old.epoch > req.epoch {
                    return Err(refuse(
                        Code::Conflict,
                        format!("epoch {} is superseded by {}", req.epoch, old.epoch),
                    ));
                }
            }
            let note = c.note.clone().unwrap_or_default();
            continuity::record_decision(&mut c, &decision);
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
                Ok(_) => return Ok((decision, note)),
                Err(CallError::Rpc(e)) if e.is(Code::Conflict) => continue,
                Err(e) => return Err(host_error("recording the decision", e)),
            }
        }
        Err(refuse(
            Code::Conflict,
            "continuity kept changing while the decision was recorded",
        ))
    }
}

fn has_toolbelt(req: &RunRequest) -> bool {
    !req.toolbelt.endpoint.is_empty() && !req.toolbelt.token.is_empty()
}

async fn persist(
    host: &Host,
    req: &RunRequest,
    dir: &Path,
    nonce: &str,
    (pid, start): (i32, u64),
    sandbox_digest: &str,
) -> Result<(), RpcError> {
    host.call_typed(&ExecutionPersistRecoveryParams {
        execution_id: req.execution_id.clone(),
        epoch: req.epoch,
        recovery: Payload {
            schema: RECOVERY_SCHEMA.to_string(),
            data: json!(RecoveryData {
                segment_dir: dir.display().to_string(),
                nonce: nonce.to_string(),
                pid,
                epoch: req.epoch,
                sandbox_digest: sandbox_digest.to_string(),
                start,
            }),
        },
    })
    .await
    .map(|_| ())
    .map_err(|e| host_error("cannot persist the recovery metadata", e))
}

/// The follower of a segment this process holds: reads `out.jsonl` as it
/// grows (a regular file of the segment directory, never through a symlink) and
/// closes claude's stdin when the result line arrives (so claude exits), or once
/// the segment has ended.
async fn follow(run: Arc<Run>, dir: PathBuf) {
    let mut offset: u64 = 0;
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let ended = rundir::exists(&dir, rundir::STATUS);
        let mut chunk = Vec::new();
        let opened = sdk::nofollow::Dir::open(&dir).and_then(|d| d.open_file(rundir::STDOUT));
        if let Ok(Some(mut f)) = opened {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                let _ = f.read_to_end(&mut chunk);
            }
        }
        offset += chunk.len() as u64;
        partial.extend_from_slice(&chunk);
        let mut result = false;
        while let Some(i) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=i).collect();
            if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                if v.get("type").and_then(Value::as_str) == Some("result") {
                    result = true;
                }
            }
        }
        if result || ended {
            let mut stdin = run.stdin.lock().await;
            if let Some(mut pipe) = stdin.take() {
                let _ = pipe.shutdown().await;
            }
            return;
        }
        if run.tracked.ended() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
