//! Supervision: one extension kept running, restarted with backoff, stopped with
//! its group.

use super::*;

// ---------------------------------------------------------------------------
// Supervision

/// Where a supervised extension is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Starting: spawned, `initialize` not yet answered.
    Starting,
    /// Serving: [`Supervisor::peer`] is its connection.
    Running,
    /// Crashed; restarting at `until`.
    Backoff {
        /// When the next start begins.
        until: Instant,
    },
    /// Refused for good (never restarted).
    Refused {
        /// Why.
        reason: Refusal,
    },
    /// Stopped.
    Stopped,
}

struct Shared {
    name: String,
    state: watch::Sender<State>,
    peer: Mutex<Option<Peer>>,
    pid: Mutex<Option<i32>>,
    restarts: AtomicU64,
    last_exit: Mutex<Option<ProcessExit>>,
    protocol_version: Mutex<Option<u32>>,
}

impl Shared {
    fn set_state(&self, state: State) {
        tracing::debug!(OC_EXTENSION = %self.name, ?state, "extension state");
        self.state.send_replace(state);
    }
}

/// One extension, supervised by a task of its own.
pub struct Supervisor {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("name", &self.shared.name)
            .field("state", &self.state())
            .field("restarts", &self.restarts())
            .finish()
    }
}

impl Supervisor {
    /// Start supervising `spec` (must be called within a tokio runtime).
    pub fn start(spec: ProcessSpec, opts: SupervisorOptions) -> Supervisor {
        let (state, _) = watch::channel(State::Starting);
        let shared = Arc::new(Shared {
            name: spec.name.clone(),
            state,
            peer: Mutex::new(None),
            pid: Mutex::new(None),
            restarts: AtomicU64::new(0),
            last_exit: Mutex::new(None),
            protocol_version: Mutex::new(None),
        });
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(supervise(spec, opts, shared.clone(), stop_rx));
        Supervisor {
            shared,
            stop,
            task: tokio::sync::Mutex::new(Some(task)),
        }
    }

    /// The extension's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.shared.state.borrow().clone()
    }

    /// Follow the state as it changes.
    pub fn subscribe(&self) -> watch::Receiver<State> {
        self.shared.state.subscribe()
    }

    /// How many times the process was restarted after a crash.
    pub fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::SeqCst)
    }

    /// How the last process ended (from its wait status).
    pub fn last_exit(&self) -> Option<ProcessExit> {
        *lock(&self.shared.last_exit)
    }

    /// The connection to the running process, if one is running.
    pub fn peer(&self) -> Option<Peer> {
        lock(&self.shared.peer)
            .as_ref()
            .filter(|p| !p.is_closed())
            .cloned()
    }

    /// The protocol version the last successful `initialize` chose.
    pub fn protocol_version(&self) -> Option<u32> {
        *lock(&self.shared.protocol_version)
    }

    /// The current (or last) process id, also its process group id.
    pub fn pid(&self) -> Option<i32> {
        *lock(&self.shared.pid)
    }

    /// Wait until the extension runs, and answer its connection; or the state
    /// that means it never will (refused, stopped).
    pub async fn wait_running(&self) -> Result<Peer, State> {
        let mut rx = self.subscribe();
        loop {
            let state = rx.borrow_and_update().clone();
            match state {
                State::Running => {
                    if let Some(peer) = self.peer().filter(|p| !p.is_closed()) {
                        return Ok(peer);
                    }
                }
                State::Refused { .. } | State::Stopped => return Err(state),
                State::Starting | State::Backoff { .. } => {}
            }
            if rx.changed().await.is_err() {
                return Err(self.state());
            }
        }
    }

    /// Stop the extension (see [`ExtensionProcess::stop`]) and the supervision,
    /// and wait for both. Idempotent.
    pub async fn stop(&self) {
        self.stop.send_replace(true);
        let task = self.task.lock().await.take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::error!(OC_EXTENSION = %self.shared.name, error = %e, "the supervision task failed");
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The task sees the request and stops the process on its own.
        self.stop.send_replace(true);
    }
}

async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    // A dropped sender is a stop too.
    let _ = rx.wait_for(|stop| *stop).await;
}

/// The layout `configure` carries, read before the process starts: a manifest
/// older than the recorded layout is refused (`kv_downgrade`); without a layout
/// store the layout is current.
async fn kv_layout(spec: &ProcessSpec, opts: &SupervisorOptions) -> Result<KvLayout, StartError> {
    let declared = declared_kv_version(&spec.manifest_json);
    let Some(layouts) = &opts.kv_layouts else {
        return Ok(KvLayout {
            stored: declared,
            declared,
        });
    };
    let stored = layouts
        .get(&spec.name)
        .await
        .map_err(StartError::KvLayout)?;
    if declared < stored {
        return Err(StartError::Refused(Refusal::KvDowngrade {
            stored,
            declared,
        }));
    }
    Ok(KvLayout { stored, declared })
}

/// Send `configure` on `peer` with the package's current configuration and register
/// the answer.
pub async fn send_configure(
    peer: &Peer,
    opts: &SupervisorOptions,
    kv: KvLayout,
    timeout: Duration,
) -> Result<ConfigureResult, StartError> {
    let mut params = opts.configuration.params();
    params.kv = kv;
    let generation = params.generation.clone();
    let call = CallOptions {
        timeout: Some(timeout),
        ..CallOptions::default()
    };
    let answer = peer
        .call_with(ConfigureParams::METHOD, &params, call)
        .await
        .map_err(|e| StartError::Configure(e.to_string()))?;
    let result: ConfigureResult = serde_json::from_value(answer)
        .map_err(|e| StartError::Configure(format!("the answer does not decode: {e}")))?;
    opts.configuration
        .register(&generation, &result)
        .map_err(|e| StartError::Configure(format!("the answer breaks a rule: {e}")))?;
    Ok(result)
}

async fn supervise(
    spec: ProcessSpec,
    opts: SupervisorOptions,
    shared: Arc<Shared>,
    mut stop_rx: watch::Receiver<bool>,
) {
    let name = spec.name.clone();
    let mut backoff = opts.backoff_initial;
    loop {
        if *stop_rx.borrow() {
            break;
        }
        shared.set_state(State::Starting);
        let mut uptime = Duration::ZERO;
        let kv = tokio::select! {
            r = kv_layout(&spec, &opts) => r,
            _ = stop_requested(&mut stop_rx) => break,
        };
        let spawned = match kv {
            Err(StartError::Refused(reason)) => {
                tracing::error!(OC_EXTENSION = %name, %reason, "extension refused before its start; it will not be restarted");
                shared.set_state(State::Refused { reason });
                return;
            }
            Err(e) => Err(e),
            Ok(kv) => ExtensionProcess::spawn(&spec, &opts).await.map(|p| (p, kv)),
        };
        match spawned {
            Err(e) => {
                tracing::error!(OC_EXTENSION = %name, error = %e, "extension failed to start");
            }
            Ok((process, kv)) => {
                *lock(&shared.pid) = Some(process.pid());
                let handshake = tokio::select! {
                    r = process.start_up(&spec, &opts, kv) => Some(r),
                    _ = stop_requested(&mut stop_rx) => None,
                };
                match handshake {
                    None => {
                        let exit = process.stop(&opts).await;
                        *lock(&shared.last_exit) = Some(exit);
                        break;
                    }
                    Some(Err(StartError::Refused(reason))) => {
                        tracing::error!(OC_EXTENSION = %name, %reason, "extension refused; it will not be restarted");
                        let exit = process.stop(&opts).await;
                        *lock(&shared.last_exit) = Some(exit);
                        shared.set_state(State::Refused { reason });
                        return;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(OC_EXTENSION = %name, error = %e, "extension failed its start");
                        // Past initialize it may answer shutdown; before it,
                        // there is no point asking.
                        let initialized =
                            matches!(e, StartError::Configure(_) | StartError::KvLayout(_));
                        let exit = process.stop_with(&opts, initialized).await;
                        *lock(&shared.last_exit) = Some(exit);
                    }
                    Some(Ok(version)) => {
                        let started = Instant::now();
                        *lock(&shared.peer) = Some(process.peer().clone());
                        *lock(&shared.protocol_version) = Some(version);
                        tracing::info!(OC_EXTENSION = %name, pid = process.pid(), protocol_version = version, "extension running");
                        shared.set_state(State::Running);
                        let stopping = tokio::select! {
                            _ = process.exited() => false,
                            _ = process.peer().closed() => false,
                            _ = stop_requested(&mut stop_rx) => true,
                        };
                        *lock(&shared.peer) = None;
                        if !stopping {
                            // The process died, or its connection did while it
                            // may still run: either way it is stopped (the
                            // connection is gone) and its end read from its
                            // wait status.
                            if process.exit_status().is_none() {
                                tracing::warn!(OC_EXTENSION = %name, pid = process.pid(), "the extension's connection closed; stopping it");
                            }
                        }
                        let exit = process.stop(&opts).await;
                        *lock(&shared.last_exit) = Some(exit);
                        uptime = started.elapsed();
                        if stopping {
                            break;
                        }
                        tracing::warn!(OC_EXTENSION = %name, %exit, ?uptime, "extension crashed");
                    }
                }
            }
        }
        if uptime >= opts.backoff_reset_after {
            backoff = opts.backoff_initial;
        }
        shared.restarts.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + backoff;
        tracing::info!(OC_EXTENSION = %name, ?backoff, "restarting the extension after a backoff");
        shared.set_state(State::Backoff { until });
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop_requested(&mut stop_rx) => break,
        }
        backoff = backoff.saturating_mul(2).min(opts.backoff_max);
    }
    shared.set_state(State::Stopped);
}
