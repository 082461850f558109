//! One run of an extension: its start, handshake, stop, and its bounded log.

use super::*;

// ---------------------------------------------------------------------------
// One process

/// One run of an extension process. Dropping it without [`ExtensionProcess::stop`]
/// SIGKILLs its process group.
pub struct ExtensionProcess {
    name: String,
    pid: i32,
    peer: Peer,
    exit: watch::Receiver<Option<ProcessExit>>,
    /// True once everything the process wrote to stderr is in the log.
    logged: watch::Receiver<bool>,
    stopped: AtomicBool,
}

impl fmt::Debug for ExtensionProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionProcess")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("exit", &*self.exit.borrow())
            .finish()
    }
}

fn resolve_program(dir: &Path, program: &str) -> PathBuf {
    let path = Path::new(program);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let inside = dir.join(path);
    if program.contains('/') || inside.exists() {
        return inside;
    }
    // A bare name not in the package: looked up on the sanitized PATH.
    path.to_path_buf()
}

impl ExtensionProcess {
    /// Start the process (no handshake yet): the command in the package
    /// directory, its own process group, the sanitized environment, the protocol
    /// on stdin and stdout, stderr to the log. Creates the state directory and
    /// the log's directory.
    pub async fn spawn(
        spec: &ProcessSpec,
        opts: &SupervisorOptions,
    ) -> Result<ExtensionProcess, StartError> {
        let spawn_err = |what: &str, e: std::io::Error| StartError::Spawn(format!("{what}: {e}"));
        let Some(program) = spec.command.first() else {
            return Err(StartError::Spawn("the command is empty".into()));
        };
        tokio::fs::create_dir_all(&spec.state_dir)
            .await
            .map_err(|e| spawn_err(&format!("state dir {}", spec.state_dir.display()), e))?;
        if let Some(parent) = spec.log_path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| spawn_err(&format!("log dir {}", parent.display()), e))?;
        }
        let log = LogFile::open(&spec.log_path, opts.log_cap)
            .await
            .map_err(|e| spawn_err(&format!("log {}", spec.log_path.display()), e))?;

        let program_path = resolve_program(&spec.dir, program);
        let mut cmd = Command::new(&program_path);
        cmd.args(&spec.command[1..])
            .current_dir(&spec.dir)
            .env_clear()
            .envs(sanitized_env(&spec.base_env, &spec.grants))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        let mut child = cmd
            .spawn()
            .map_err(|e| spawn_err(&program_path.display().to_string(), e))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| StartError::Spawn("the process has no id".into()))?;
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    let _ = child.wait().await;
                    return Err(StartError::Spawn("a stdio pipe is missing".into()));
                }
            };
        // Wider pipes: a large message crosses in fewer wake-ups. Best effort.
        let _ = nix::fcntl::fcntl(
            stdin.as_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES),
        );
        let _ = nix::fcntl::fcntl(
            stdout.as_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES),
        );

        let (logged_tx, logged) = watch::channel(false);
        let copy = copy_stderr(spec.name.clone(), stderr, log);
        tokio::spawn(async move {
            copy.await;
            logged_tx.send_replace(true);
        });

        let (exit_tx, exit_rx) = watch::channel(None);
        let name = spec.name.clone();
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(status) => ProcessExit::from(status),
                Err(e) => {
                    tracing::warn!(OC_EXTENSION = %name, pid, error = %e, "cannot wait for the extension process");
                    ProcessExit::Unknown
                }
            };
            tracing::info!(OC_EXTENSION = %name, pid, %exit, "extension process ended");
            exit_tx.send_replace(Some(exit));
        });

        let peer = connect_arc(
            stdout,
            stdin,
            opts.handler.clone(),
            // Reads up to 64 MiB from the start; sends more than 16 MiB only once
            // the extension's initialize answer says it reads more.
            Options::negotiated(format!("extension {}", spec.name)),
        );
        tracing::info!(OC_EXTENSION = %spec.name, pid, program = %program_path.display(), "extension process started");
        Ok(ExtensionProcess {
            name: spec.name.clone(),
            pid,
            peer,
            exit: exit_rx,
            logged,
            stopped: AtomicBool::new(false),
        })
    }

    /// `initialize`: answers the version chosen, or why the extension is refused
    /// (no common version, a manifest that differs from the file) or failed.
    pub async fn handshake(
        &self,
        spec: &ProcessSpec,
        opts: &SupervisorOptions,
    ) -> Result<u32, StartError> {
        let params = InitializeParams {
            protocol_versions: opts.host_versions.clone(),
            host: HostInfo {
                name: opts.host_name.clone(),
                version: opts.host_version.clone(),
            },
            state_dir: spec.state_dir.display().to_string(),
            resource_dirs: spec.resource_dirs.clone(),
            max_message_bytes: u64::try_from(LARGE_MESSAGE_BYTES).ok(),
            ..InitializeParams::default()
        };
        let mut params = serde_json::to_value(&params)
            .map_err(|e| StartError::Handshake(format!("cannot encode initialize: {e}")))?;
        if let Some(obj) = params.as_object_mut() {
            obj.entry("executor_dirs")
                .or_insert_with(|| Value::Object(Default::default()));
        }
        let call = CallOptions {
            timeout: Some(opts.start_timeout),
            ..CallOptions::default()
        };
        let answer = match self
            .peer
            .call_with(InitializeParams::METHOD, &params, call)
            .await
        {
            Ok(v) => v,
            Err(CallError::Rpc(e)) if e.is(Code::UnsupportedProtocolVersion) => {
                return Err(StartError::Refused(Refusal::Version {
                    ours: opts.host_versions.clone(),
                    detail: e.message,
                }))
            }
            Err(CallError::Timeout(t)) => return Err(StartError::Timeout(t)),
            Err(e) => return Err(StartError::Handshake(e.to_string())),
        };
        let result: InitializeResult = serde_json::from_value(answer)
            .map_err(|e| StartError::Handshake(format!("the answer does not decode: {e}")))?;
        if !opts.host_versions.contains(&result.protocol_version) {
            return Err(StartError::Refused(Refusal::Version {
                ours: opts.host_versions.clone(),
                detail: format!(
                    "the extension chose version {}, which the host does not speak",
                    result.protocol_version
                ),
            }));
        }
        if let Some(detail) = manifest_difference(&spec.manifest_json, &result.manifest) {
            return Err(StartError::Refused(Refusal::ManifestMismatch { detail }));
        }
        let max_send = agreed_message_bytes(result.max_message_bytes);
        self.peer.set_max_send_bytes(max_send);
        tracing::debug!(OC_EXTENSION = %spec.name, max_send, "message bound agreed");
        Ok(result.protocol_version)
    }

    /// `configure` with the package's current configuration and `kv`; the answer,
    /// checked against the manifest, becomes its registration. An error answer, a
    /// crash, a timeout or an answer that breaks the registration rules is
    /// [`StartError::Configure`].
    pub async fn configure(
        &self,
        opts: &SupervisorOptions,
        kv: KvLayout,
    ) -> Result<ConfigureResult, StartError> {
        send_configure(&self.peer, opts, kv, opts.start_timeout).await
    }

    /// The whole start after the spawn: `initialize`, `configure` with `kv`,
    /// then (only once configure succeeded) the declared layout recorded.
    /// Answers the protocol version.
    pub async fn start_up(
        &self,
        spec: &ProcessSpec,
        opts: &SupervisorOptions,
        kv: KvLayout,
    ) -> Result<u32, StartError> {
        let version = self.handshake(spec, opts).await?;
        self.configure(opts, kv).await?;
        if let Some(layouts) = &opts.kv_layouts {
            if kv.stored != kv.declared {
                layouts
                    .set(&spec.name, kv.declared)
                    .await
                    .map_err(StartError::KvLayout)?;
                tracing::info!(OC_EXTENSION = %spec.name, from = kv.stored, to = kv.declared, "KV layout recorded");
            }
        }
        Ok(version)
    }

    /// The connection to the process.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The process id, also its process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How the process ended, once it has (from its wait status).
    pub fn exit_status(&self) -> Option<ProcessExit> {
        *self.exit.borrow()
    }

    /// Resolves once the process has ended, with how.
    pub async fn exited(&self) -> ProcessExit {
        let mut rx = self.exit.clone();
        let result = match rx.wait_for(Option::is_some).await {
            Ok(exit) => exit.unwrap_or(ProcessExit::Unknown),
            Err(_) => ProcessExit::Unknown,
        };
        result
    }

    async fn wait_exit(&self, limit: Duration) -> Option<ProcessExit> {
        tokio::time::timeout(limit, self.exited()).await.ok()
    }

    fn signal_group(&self, sig: Signal) {
        match killpg(Pid::from_raw(self.pid), sig) {
            Ok(()) => {
                tracing::info!(OC_EXTENSION = %self.name, pgid = self.pid, signal = %sig, "signalled the extension's process group")
            }
            Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(OC_EXTENSION = %self.name, pgid = self.pid, signal = %sig, error = %e, "cannot signal the extension's process group")
            }
        }
    }

    /// Stop: `shutdown` (bounded), close stdin, wait a grace period for the
    /// process to exit, then SIGTERM to the whole group, wait again, then SIGKILL
    /// to the whole group. The group is signalled even when the leader has
    /// already exited, so that no process of it is left when this returns.
    /// Answers how the leader ended.
    pub async fn stop(&self, opts: &SupervisorOptions) -> ProcessExit {
        self.stop_with(opts, true).await
    }

    /// [`ExtensionProcess::stop`], without asking for `shutdown` when
    /// `ask_shutdown` is false (a process that never answered `initialize`).
    pub(super) async fn stop_with(
        &self,
        opts: &SupervisorOptions,
        ask_shutdown: bool,
    ) -> ProcessExit {
        if ask_shutdown && self.exit_status().is_none() && !self.peer.is_closed() {
            let call = CallOptions {
                timeout: Some(opts.shutdown_timeout),
                ..CallOptions::default()
            };
            let params = serde_json::json!({});
            let shutdown = self.peer.call_with(ShutdownParams::METHOD, &params, call);
            tokio::select! {
                r = shutdown => if let Err(e) = r {
                    tracing::debug!(OC_EXTENSION = %self.name, error = %e, "shutdown not answered");
                },
                _ = self.exited() => {}
            }
        }
        self.peer.close("the host is stopping the extension");

        let mut sent_term = false;
        let exit = match self.wait_exit(opts.grace).await {
            Some(exit) => exit,
            None => {
                tracing::info!(OC_EXTENSION = %self.name, pid = self.pid, grace = ?opts.grace, "the extension did not exit after stdin closed");
                self.signal_group(Signal::SIGTERM);
                sent_term = true;
                match self.wait_exit(opts.grace).await {
                    Some(exit) => exit,
                    None => {
                        self.signal_group(Signal::SIGKILL);
                        self.exited().await
                    }
                }
            }
        };
        self.end_group(opts.grace, sent_term).await;
        // The group is gone, so its stderr is closed: wait (briefly: a process
        // that left the group may still hold it) until its last lines are in the
        // log, so whoever reads the log next sees why it ended.
        let mut logged = self.logged.clone();
        let _ = tokio::time::timeout(LOG_DRAIN, logged.wait_for(|done| *done)).await;
        self.stopped.store(true, Ordering::SeqCst);
        exit
    }

    /// End whatever is left of the group once the leader has exited.
    async fn end_group(&self, grace: Duration, sent_term: bool) {
        let pgid = self.pid;
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        tracing::info!(OC_EXTENSION = %self.name, pgid, pids = ?left, "processes of the extension's group outlived it");
        if !sent_term {
            self.signal_group(Signal::SIGTERM);
            if wait_group_gone(pgid, grace).await {
                tracing::info!(OC_EXTENSION = %self.name, pgid, pids = ?left, "the group's remaining processes ended after SIGTERM");
                return;
            }
        }
        let left = group_members(pgid);
        self.signal_group(Signal::SIGKILL);
        if wait_group_gone(pgid, grace.max(Duration::from_secs(1))).await {
            tracing::info!(OC_EXTENSION = %self.name, pgid, pids = ?left, "the group's remaining processes were killed by SIGKILL");
        } else {
            tracing::error!(OC_EXTENSION = %self.name, pgid, pids = ?group_members(pgid), "processes of the extension's group survive SIGKILL");
        }
    }
}

impl Drop for ExtensionProcess {
    fn drop(&mut self) {
        if !self.stopped.load(Ordering::SeqCst) {
            self.peer.close("the extension process was dropped");
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

/// The live (not zombie) processes of the group `pgid`, from `/proc`; without a
/// readable `/proc`, the group itself when a signal can reach it.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return match killpg(Pid::from_raw(pgid), None) {
            Ok(()) => vec![pgid],
            Err(_) => Vec::new(),
        };
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let pgrp = fields.nth(1).and_then(|s| s.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            pids.push(pid);
        }
    }
    pids
}

async fn wait_group_gone(pgid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if group_members(pgid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(GROUP_POLL).await;
    }
}

/// Why two manifests differ, or `None` when they are the same document (compared
/// as JSON values, so key order and spacing do not count, nor fields spelled out
/// at their default).
pub fn manifest_difference(file: &Value, returned: &Value) -> Option<String> {
    if file == returned {
        return None;
    }
    let parse = |v: &Value| serde_json::from_value::<protocol::manifest::Manifest>(v.clone());
    if let (Ok(a), Ok(b)) = (parse(file), parse(returned)) {
        if a == b {
            return None;
        }
    }
    let (Some(a), Some(b)) = (file.as_object(), returned.as_object()) else {
        return Some("the returned manifest is not an object".into());
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&str> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect();
    Some(format!("fields differ: {}", differing.join(", ")))
}

// ---------------------------------------------------------------------------
// stderr: the log file and tracing

/// The line written first into a log truncated at `cap` bytes.
pub fn truncation_marker(cap: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    let size = if cap >= MIB && cap / MIB * MIB == cap {
        format!("{} MiB", cap / MIB)
    } else if cap >= KIB && cap / KIB * KIB == cap {
        format!("{} KiB", cap / KIB)
    } else {
        format!("{cap} bytes")
    };
    format!("--- log truncated at {size} ---")
}

struct LogFile {
    file: tokio::fs::File,
    size: u64,
    cap: u64,
    failed: bool,
}

impl LogFile {
    async fn open(path: &Path, cap: u64) -> std::io::Result<LogFile> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await?;
        let size = file.metadata().await?.len();
        Ok(LogFile {
            file,
            size,
            cap,
            failed: false,
        })
    }

    async fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let need = line.len() as u64 + 1;
        if self.size + need > self.cap {
            self.file.set_len(0).await?;
            self.size = 0;
            let marker = format!("{}\n", truncation_marker(self.cap));
            self.file.write_all(marker.as_bytes()).await?;
            self.size = marker.len() as u64;
        }
        self.file.write_all(line).await?;
        self.file.write_all(b"\n").await?;
        self.file.flush().await?;
        self.size += need;
        Ok(())
    }

    async fn emit(&mut self, name: &str, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        // A line logged while the package served a call for a Work names it (the
        // SDK's span, `sdk::story`): the journal entry carries it as a field too.
        match (
            story_field(&text, "OC_WORK_ID"),
            story_field(&text, "OC_EXECUTION_ID"),
        ) {
            (Some(w), Some(x)) => {
                tracing::info!(OC_EXTENSION = %name, OC_WORK_ID = w, OC_EXECUTION_ID = x, "{text}")
            }
            (Some(w), None) => tracing::info!(OC_EXTENSION = %name, OC_WORK_ID = w, "{text}"),
            _ => tracing::info!(OC_EXTENSION = %name, "{text}"),
        }
        if self.failed {
            return;
        }
        if let Err(e) = self.write_line(line).await {
            self.failed = true;
            tracing::warn!(OC_EXTENSION = %name, error = %e, "cannot write the extension's log; its stderr goes to tracing only");
        }
    }
}

/// The value of `name=` in a package's log line, as the SDK's span prints it
/// (`call{OC_WORK_ID=w-1 OC_EXECUTION_ID=x-1}: ...`): up to a space, `}` or `:`, and
/// only an ID's characters, at most 200.
pub fn story_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("{name}="))?;
    let start = at + name.len() + 1;
    let rest = &line[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(rest.len());
    let v = &rest[..end];
    (!v.is_empty() && v.len() <= 200).then_some(v)
}

async fn copy_stderr(name: String, stderr: ChildStderr, mut log: LogFile) {
    let mut reader = BufReader::with_capacity(16 * 1024, stderr);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                tracing::debug!(OC_EXTENSION = %name, error = %e, "reading stderr failed");
                break;
            }
        };
        if buf.is_empty() {
            break;
        }
        let room = MAX_LOG_LINE - line.len();
        let window = &buf[..buf.len().min(room)];
        match window.iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&window[..i]);
                reader.consume(i + 1);
                log.emit(&name, &line).await;
                line.clear();
            }
            None => {
                let n = window.len();
                line.extend_from_slice(window);
                reader.consume(n);
                if line.len() >= MAX_LOG_LINE {
                    log.emit(&name, &line).await;
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        log.emit(&name, &line).await;
    }
}
