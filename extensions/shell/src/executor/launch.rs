//! Starting a run: `executor.run`, the run directory and its inputs, the command's
//! environment, a sandboxed binding's launch planned through `sdk::sandbox` (its own
//! tmp folder as `TMPDIR`, the one place of its run directory it may write; it reads
//! `inputs.json`), the wrapper, the recovery metadata, then `go`.

use super::*;

impl Shell {
    /// `executor.run`: checks the config (a bad one fails the run at once, with
    /// the field named), creates the run directory, starts the wrapper, persists
    /// the recovery metadata, and only then lets the wrapper start the command.
    /// A persistence the host refuses fails the run with the host's own error,
    /// and the command never starts.
    pub async fn run(
        &self,
        host: &Host,
        p: ExecutorRunParams,
    ) -> Result<ExecutorRunResult, RpcError> {
        let req = p.run;
        check_executor(&req.executor)?;
        check_id(&req.execution_id)?;
        let id = req.execution_id.as_str();
        if self.get(id).is_some() {
            // Started here already: never twice.
            return Ok(ExecutorRunResult {});
        }
        let cfg = match config::parse(&req.config) {
            Ok(cfg) => cfg,
            Err(e) => {
                let result = failed(format!("invalid shell executor config: {e}"));
                self.insert(id, &req.work.id, req.epoch, None, Some(result), false);
                return Ok(ExecutorRunResult {});
            }
        };
        if req.dry_run {
            let result = ExecutorWaitResult {
                summary: clip_line(&format!("dry run: {}", cfg.describe()), MAX_SUMMARY_BYTES),
                ..ExecutorWaitResult::new(Outcome::Completed)
            };
            self.insert(id, &req.work.id, req.epoch, None, Some(result), false);
            return Ok(ExecutorRunResult {});
        }
        let exe = self.inner.exe.clone().map_err(|e| {
            internal(format!(
                "cannot find this executable to start the wrapper: {e}"
            ))
        })?;
        // The binding's workspace, made (or found again) before anything starts: a
        // refusal fails the run with the provider's reason and no process.
        let workspace = match sdk::workspace::acquire(host, &req, "", serde_json::Value::Null).await
        {
            Ok(w) => w,
            Err(f) => {
                let result = failed(f.line());
                self.insert(id, &req.work.id, req.epoch, None, Some(result), false);
                return Ok(ExecutorRunResult {});
            }
        };
        let runs = self.runs_dir();
        let dir = runs.join(id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&runs)
            .map_err(|e| internal(format!("cannot create {}: {e}", runs.display())))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(refuse(
                    Code::Conflict,
                    format!("execution {id} was launched before (its run directory exists): recover it instead"),
                ))
            }
            Err(e) => return Err(internal(format!("cannot create {}: {e}", dir.display()))),
        }
        match self
            .launch(host, &req, &cfg, &exe, &dir, workspace.as_ref())
            .await
        {
            Ok(launch) => {
                tracing::info!(pid = launch.pid, "the run's command started");
                self.insert(id, &req.work.id, req.epoch, Some(launch), None, false);
                Ok(ExecutorRunResult {})
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    async fn launch(
        &self,
        host: &Host,
        req: &RunRequest,
        cfg: &ShellConfig,
        exe: &Path,
        dir: &Path,
        workspace: Option<&ProvidedResource>,
    ) -> Result<Launch, RpcError> {
        let io = |what: &str, e: std::io::Error| internal(format!("{what}: {e}"));
        let inputs = json!({
            "execution_id": req.execution_id,
            "attempt": req.attempt,
            "work": req.work,
            "inputs": req.inputs,
        });
        rundir::write_json_for_boot(dir, rundir::INPUTS, &inputs)
            .map_err(|e| io("writing inputs.json", e))?;
        let nonce = rundir::nonce().map_err(|e| io("making a nonce", e))?;
        // With a workspace, the command runs in it (a relative cwd inside it);
        // without, in the run directory (a relative cwd against the config's).
        let base = match workspace {
            Some(w) => PathBuf::from(&w.dir),
            None => self.config_dir().unwrap_or_else(|| dir.to_path_buf()),
        };
        let cwd = match &cfg.cwd {
            None => workspace.map_or_else(|| dir.to_path_buf(), |w| PathBuf::from(&w.dir)),
            Some(c) if Path::new(c).is_absolute() => PathBuf::from(c),
            Some(c) => base.join(c),
        };
        // A sandboxed or contained binding's launch is the plan the host pinned: a refusal
        // starts nothing.
        let mut env = environment(req, cfg, dir, workspace);
        let mut argv = cfg.argv.clone();
        let mut cwd = cwd.display().to_string();
        let mut sandbox_digest = String::new();
        if sdk::sandbox::confined(req) {
            // /tmp is read-only inside: temporary files go to the run's own tmp.
            let tmp = sdk::sandbox::own_tmp(dir.join(sdk::sandbox::TMP_DIR))
                .map_err(|e| io("making the run's tmp", e))?;
            for var in sdk::sandbox::TMP_VARS {
                env.insert(var.into(), tmp.clone().into());
            }
            let launch = SandboxLaunch {
                argv,
                cwd: cwd.clone(),
                env: env
                    .iter()
                    .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v.to_str()?.to_owned())))
                    .collect(),
            };
            // The run directory itself is not writable inside: the wrapper and this
            // process read and write its files outside the sandbox, so the command
            // gets its own tmp to write and its inputs to read, nothing else of it.
            let mut needs = SandboxNeeds {
                write: vec![tmp.display().to_string()],
                read: vec![dir.join(rundir::INPUTS).display().to_string()],
                ..SandboxNeeds::default()
            };
            match workspace {
                Some(w) => needs.write.push(w.dir.clone()),
                None if !Path::new(&cwd).starts_with(dir) => needs.read.push(cwd.clone()),
                None => {}
            }
            let planned = sdk::sandbox::confine(host, req, launch, needs)
                .await
                .map_err(|r| r.error())?
                .ok_or_else(|| internal("the binding's sandbox planned nothing"))?;
            argv = planned.argv;
            cwd = planned.cwd;
            env = planned
                .env
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
            sandbox_digest = planned.digest;
        }
        let spec = Spec {
            execution_id: req.execution_id.clone(),
            work_id: req.work.id.clone(),
            argv,
            cwd,
            deadline_s: cfg.deadline_s,
            grace_s: cfg.grace_s,
            nonce: nonce.clone(),
        };
        rundir::write_json_for_boot(dir, rundir::SPEC, &spec)
            .map_err(|e| io("writing spec.json", e))?;
        let named = &nonce;
        let started = rundir::start_wrapper(
            exe,
            rundir::WRAP_ARG,
            dir,
            &nonce,
            env,
            "shell",
            |pid, start| async move {
                host.call_typed(&ExecutionPersistRecoveryParams {
                    execution_id: req.execution_id.clone(),
                    epoch: req.epoch,
                    recovery: Payload {
                        schema: RECOVERY_SCHEMA.to_string(),
                        data: json!(RecoveryData {
                            pid,
                            nonce: named.clone(),
                            run_dir: dir.display().to_string(),
                            epoch: req.epoch,
                            sandbox_digest,
                            start,
                        }),
                    },
                })
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    CallError::Rpc(e) => e,
                    other => refuse(
                        Code::Unavailable,
                        format!("cannot persist the recovery metadata: {other}"),
                    ),
                })
            },
        )
        .await?;
        let (pid, start, mut go, mut child) =
            (started.pid, started.start, started.stdin, started.child);
        if let Some(mut stdin) = go.take() {
            // A wrapper that died already is found lost by the first wait.
            let _ = stdin.write_all(b"go\n").await;
            let _ = stdin.shutdown().await;
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(Launch {
            dir: dir.to_path_buf(),
            pid,
            start,
            nonce,
            wrap_arg: rundir::WRAP_ARG,
        })
    }
}

/// The command's environment, in the spec's order (later layers win): the
/// executor's own, the daemon's `pass_env` values, the workspace provider's layer,
/// the run layer, the config's `env`, then the run's identity (and `OC_WORKSPACE`).
fn environment(
    req: &RunRequest,
    cfg: &ShellConfig,
    dir: &Path,
    workspace: Option<&ProvidedResource>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let provider = workspace
        .map(sdk::workspace::provider_layer)
        .unwrap_or_default();
    // Later layers win; git's `GIT_CONFIG_*` pairs are appended (`apply_env`).
    let clean = |l: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        l.iter()
            .filter(|(k, v)| !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut layered = BTreeMap::new();
    for l in [&req.host_env, &provider, &req.env, &cfg.env] {
        protocol::wire::apply_env(&mut layered, &clean(l));
    }
    for (k, v) in layered {
        env.insert(k.into(), v.into());
    }
    let own = [
        ("OS_EXECUTION_ID", req.execution_id.clone()),
        ("OS_WORK_ID", req.work.id.clone()),
        ("OS_SCOPE_ID", req.work.scope_id.clone()),
        ("OS_ATTEMPT", req.attempt.to_string()),
        ("OS_INPUTS", dir.join(rundir::INPUTS).display().to_string()),
        ("OS_RUN_DIR", dir.display().to_string()),
    ];
    for (k, v) in own {
        env.insert(k.into(), v.into());
    }
    if let Some(w) = workspace {
        env.insert(sdk::workspace::WORKSPACE_VAR.into(), w.dir.clone().into());
    }
    env
}
