//! Starting a segment: `executor.run` and `executor.resume`, the checks that need no
//! process (each a structured failure), the session decision, the files, the
//! wrapper, and the prompt on codex's stdin.

use super::*;
use protocol::wire::{
    ExecutionPersistRecoveryParams, ExecutorResumeParams, ExecutorResumeResult, ExecutorRunParams,
    ExecutorRunResult, Outcome, Payload, ProvidedResource,
};
use sdk::agent::prompt::{self, Shape};
use std::os::unix::fs::DirBuilderExt;
use tokio::io::AsyncWriteExt;

/// The toolbelt's MCP server name in codex's config.
pub const TOOLBELT: &str = "open-conduit";

struct Prepared {
    cfg: CodexConfig,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    binary: PathBuf,
    home: PathBuf,
    workspace: Option<ProvidedResource>,
}

fn has_toolbelt(req: &RunRequest) -> bool {
    !req.toolbelt.endpoint.is_empty() && !req.toolbelt.token.is_empty()
}

/// `-c key=value`.
fn set(argv: &mut Vec<String>, key: &str, value: String) {
    argv.push("-c".into());
    argv.push(format!("{key}={value}"));
}

/// The toolbelt's `open-conduit` program.
fn toolbelt_command(req: &RunRequest) -> String {
    if req.toolbelt.dir.is_empty() {
        std::env::var("OPEN_CONDUIT_BIN")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "open-conduit".to_string())
    } else {
        Path::new(&req.toolbelt.dir)
            .join("open-conduit")
            .display()
            .to_string()
    }
}

/// codex's command line for a segment of `req` in `dir` (everything but the
/// prompt, which goes on stdin as `-`).
pub fn argv(
    cfg: &CodexConfig,
    req: &RunRequest,
    binary: &Path,
    dir: &Path,
    kind: Kind,
    session: &str,
) -> Vec<String> {
    use crate::config::toml_string as s;
    let mut argv = vec![binary.display().to_string(), "exec".into()];
    if kind == Kind::Resume {
        argv.push("resume".into());
    }
    argv.extend(["--json".into(), "--skip-git-repo-check".into()]);
    let p = format!("model_providers.{}", cfg.provider);
    set(&mut argv, "model_provider", s(&cfg.provider));
    set(&mut argv, &format!("{p}.name"), s(&cfg.provider_name));
    set(&mut argv, &format!("{p}.base_url"), s(&cfg.base_url));
    set(&mut argv, &format!("{p}.wire_api"), s("responses"));
    set(&mut argv, &format!("{p}.env_key"), s(&cfg.env_key));
    set(&mut argv, "features.plugins", "false".into());
    set(&mut argv, "analytics.enabled", "false".into());
    set(&mut argv, "shell_environment_policy.inherit", s("core"));
    if has_toolbelt(req) {
        let m = format!("mcp_servers.{TOOLBELT}");
        set(
            &mut argv,
            &format!("{m}.command"),
            s(&toolbelt_command(req)),
        );
        set(&mut argv, &format!("{m}.args"), "[\"mcp\"]".into());
        let vars: Vec<String> = crate::env::TOOLBELT_VARS.iter().map(|v| s(v)).collect();
        set(
            &mut argv,
            &format!("{m}.env_vars"),
            format!("[{}]", vars.join(", ")),
        );
        set(
            &mut argv,
            &format!("{m}.default_tools_approval_mode"),
            s("approve"),
        );
        set(&mut argv, &format!("{m}.required"), "true".into());
    }
    if cfg.sandbox_mode == "bypass" {
        argv.push("--dangerously-bypass-approvals-and-sandbox".into());
    } else {
        set(&mut argv, "sandbox_mode", s(&cfg.sandbox_mode));
    }
    for (k, v) in &cfg.config {
        set(&mut argv, k, v.clone());
    }
    argv.extend(["-m".into(), cfg.model_for(&req.work.context)]);
    if cfg.structured {
        argv.extend([
            "--output-schema".into(),
            dir.join(rundir::SCHEMA).display().to_string(),
        ]);
    }
    argv.extend(["-o".into(), dir.join(rundir::LAST).display().to_string()]);
    if kind == Kind::Resume {
        argv.push(session.to_string());
    }
    argv.push("-".into());
    argv
}

fn mkdir_private(d: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(d)
}

impl Codex {
    /// `executor.run`: checks what needs no process (config, dry run, the usage-limit
    /// hold, the working directory, secrets, the binary), then starts segment 1.
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

    /// `executor.resume`: wakes a parked execution as a new segment resuming the
    /// Work's session, with the inputs that woke it.
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
        run.tracked.check_epoch(p.epoch)?;
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
        let next = latest_segment(&self.runs_dir().join(id)).map_or(1, |(n, _)| n + 1);
        self.start(host, req, &next.to_string(), true).await?;
        Ok(ExecutorResumeResult {})
    }

    async fn workspace_for(
        &self,
        host: &Host,
        req: &RunRequest,
        cfg: &CodexConfig,
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
                    Some(b) => json!({"branch": prompt::template(b, &req.work)}),
                    None => Value::Null,
                };
                sdk::workspace::acquire(host, req, &cfg.workspace_mode, params).await
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
                format!("invalid codex executor config: {e}"),
            )
        })?;
        let schema = cfg.status_schema.clone();
        let workspace = self.workspace_for(host, req, &cfg, resumed_from).await?;
        let cwd = match &workspace {
            Some(w) => PathBuf::from(&w.dir),
            None => self.workspace(&cfg, &req.work.id),
        };
        let unavailable = |why: String| {
            failure(
                &schema,
                "workspace_unavailable",
                format!("workspace_unavailable: {why}"),
            )
        };
        if workspace.is_some() || cfg.dir.is_some() {
            if !cwd.is_dir() {
                return Err(unavailable(format!("{} is not a directory", cwd.display())));
            }
        } else if let Err(e) = mkdir_private(&cwd) {
            return Err(unavailable(format!("cannot create {}: {e}", cwd.display())));
        }
        let home = self.home(&req.work.id);
        if let Err(e) = mkdir_private(&home) {
            return Err(failure(
                &schema,
                "home_unavailable",
                format!(
                    "home_unavailable: cannot create CODEX_HOME {}: {e}",
                    home.display()
                ),
            ));
        }
        let secrets = sdk::agent::secret_env::resolve(host, req, &cfg.secret_env)
            .await
            .map_err(|u| failure(&schema, u.reason, u.error))?;
        let own: BTreeMap<String, String> = std::env::vars().collect();
        let client = has_toolbelt(req).then(|| crate::env::ToolbeltClient {
            endpoint: req.toolbelt.endpoint.clone(),
            token_file: token_file.display().to_string(),
        });
        let provider = workspace
            .as_ref()
            .map(sdk::workspace::provider_layer)
            .unwrap_or_default();
        let env = crate::env::build(&crate::env::Layers {
            own: &own,
            req,
            cfg: &cfg,
            provider: &provider,
            secrets: &secrets,
            toolbelt: client.as_ref(),
            home: &home,
        });
        let binary = crate::env::find_program(&cfg.binary, &env).ok_or_else(|| {
            failure(
                &schema,
                "binary_missing",
                format!(
                    "binary_missing: the Codex CLI `{}` was not found (set the binding's binary, or put it on PATH)",
                    cfg.binary
                ),
            )
        })?;
        Ok(Prepared {
            cfg,
            cwd,
            env,
            binary,
            home,
            workspace,
        })
    }

    /// Starts segment `segment` of `req`: the checks, the recovery intent (persisted
    /// first), the session decision, the files, the wrapper, the prompt.
    async fn start(
        &self,
        host: &Host,
        req: RunRequest,
        segment: &str,
        resumed: bool,
    ) -> Result<(), RpcError> {
        let id = req.execution_id.clone();
        let exec_dir = self.runs_dir().join(&id);
        let dir = exec_dir.join(segment);
        let token_file = dir.join(rundir::TOKEN);
        let resumed_from = resumed
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
            env,
            binary,
            home,
            workspace,
        } = prepared;
        if req.dry_run {
            let result = ExecutorWaitResult {
                summary: clip_line(
                    &format!("dry run: {}", cfg.describe()),
                    sdk::agent::status::MAX_SUMMARY_BYTES,
                ),
                ..ExecutorWaitResult::new(Outcome::Completed)
            };
            self.known(&req, result);
            return Ok(());
        }
        let now = protocol::time::now_ms();
        if let Some(reset_at) = self.inner.hold.current(host, now).await {
            self.known(
                &req,
                sdk::agent::status::limited_failure(&cfg.status_schema, "codex", &reset_at),
            );
            return Ok(());
        }
        let exe = self.inner.exe.clone().map_err(|e| {
            internal(format!(
                "cannot find this executable to start the wrapper: {e}"
            ))
        })?;
        let nonce = rundir::nonce().map_err(|e| internal(format!("making a nonce: {e}")))?;
        persist(host, &req, &dir, &nonce, (0, 0), "").await?;
        mkdir_private(&exec_dir)
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
        let c: Continuity =
            sdk::agent::continuity::read(host, &continuity::key(&req.work.id)).await?;
        let (kind, session, baseline) =
            continuity::decide(&c, |s| stream::find_rollout(&home, s).is_some());
        let io = |what: &str, e: std::io::Error| internal(format!("{what}: {e}"));
        if has_toolbelt(&req) {
            write_token(&dir, &req.toolbelt.token)
                .map_err(|e| io("writing the toolbelt token", e))?;
        }
        if cfg.structured {
            rundir::write_json(&dir, rundir::SCHEMA, &sdk::agent::status::strict_schema())
                .map_err(|e| io("writing the status schema", e))?;
        }
        let argv = argv(&cfg, &req, &binary, &dir, kind, &session);
        let cwd_text = cwd.display().to_string();
        // A sandboxed or contained binding's launch is the plan the host pinned: a
        // refusal is a structured failure, and nothing starts.
        let (argv, launch_cwd, env, sandbox_digest) = if sdk::sandbox::confined(&req) {
            let tmp = sdk::sandbox::own_tmp(exec_dir.join(format!("{segment}.tmp")))
                .map_err(|e| io("making the segment's tmp", e))?;
            let mut env = env;
            let seg = sdk::agent::confine::Segment {
                dir: &dir,
                tmp: &tmp,
                cwd: &cwd_text,
                config_dir: &home,
                plugin_dir: None,
                toolbelt: has_toolbelt(&req),
                api_host: sdk::agent::confine::url_host(&cfg.base_url)
                    .unwrap_or_else(|| "api.openai.com".to_owned()),
            };
            match sdk::agent::confine::confine(host, &req, &seg, argv, &mut env).await {
                Ok(Some(c)) => (c.argv, c.cwd, c.env, c.digest),
                Ok(None) => return Err(internal("the binding's sandbox planned nothing")),
                Err(r) => {
                    self.known(&req, failure(&cfg.status_schema, &r.reason, r.line()));
                    return Ok(());
                }
            }
        } else {
            (argv, cwd_text.clone(), env, String::new())
        };
        let info = SegmentInfo {
            execution_id: id.clone(),
            work_id: req.work.id.clone(),
            segment: segment.to_string(),
            kind,
            session: session.clone(),
            baseline,
            home: home.display().to_string(),
            cwd: cwd_text.clone(),
            config: crate::env::redacted_config(&req.config),
            binary: binary.display().to_string(),
            model: cfg.model_for(&req.work.context),
            started_ms: now,
            workspace_ref: workspace
                .as_ref()
                .map(|w| w.reference.clone())
                .unwrap_or_default(),
        };
        rundir::write_json(&dir, rundir::SEGMENT, &info)
            .map_err(|e| io("writing segment.json", e))?;
        let spec = Spec {
            execution_id: id.clone(),
            work_id: req.work.id.clone(),
            argv,
            cwd: launch_cwd,
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
            "codex",
            |pid, start| persist(host, &req, &dir, &nonce, (pid, start), &sandbox_digest),
        )
        .await?;
        let (pid, start, stdin, mut child) =
            (started.pid, started.start, started.stdin, started.child);
        let args = prompt::template(&cfg.args, &req.work);
        let rendered = prompt::owned_renderings(host, &req).await;
        let shape = match kind {
            Kind::Fresh => Shape::First,
            Kind::Resume => Shape::Events,
        };
        let text = prompt::prompt(None, &args, shape, "", &req.inputs, &rendered);
        if let Some(mut pipe) = stdin {
            // `go`, then the prompt; closing the pipe ends codex's stdin.
            let first = format!("go\n{text}");
            if pipe.write_all(first.as_bytes()).await.is_ok() {
                let _ = pipe.shutdown().await;
            }
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let launch = Launch {
            dir,
            pid,
            start,
            nonce,
            wrap_arg: rundir::WRAP_ARG,
        };
        tracing::info!(pid, "the agent's turn started");
        self.insert(&req, Some(launch), None, false);
        Ok(())
    }
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
                start,
                sandbox_digest: sandbox_digest.to_owned(),
            }),
        },
    })
    .await
    .map(|_| ())
    .map_err(|e| host_error("cannot persist the recovery metadata", e))
}
