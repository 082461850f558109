//! System calls and context switches of a set of processes over one phase of a bench.
//!
//! From `/proc`, always:
//! - context switches, voluntary (the thread blocked: a wait for a read, a lock, a
//!   wake-up) and involuntary (it was preempted), from `/proc/PID/task/*/status`, summed
//!   over the threads alive at the end of the phase (a thread that ends during the phase
//!   takes its switches since the first reading with it: the kernel keeps them only for
//!   the process's own `getrusage`; how many ended is reported);
//! - read and write calls, `syscr` and `syscw` of `/proc/PID/io` (the kernel's sum over
//!   every thread, ended ones included). These count `read`, `readv`, `pread64`,
//!   `write`, `writev`, `pwrite64` and the like on files, pipes, eventfds and sockets,
//!   but not `recv*`/`send*` (Rust's std and tokio read and write sockets with `recv`
//!   and `send`), `epoll_wait`, `futex` or any other call: a floor, not the total.
//!
//! From `perf stat -e raw_syscalls:sys_enter -p PID` where `perf` is installed and
//! allowed to count tracepoints: every system call of every thread of the process,
//! and of the threads and children it starts during the phase (perf's counters are
//! inherited; the peer's `/bin/true` per delivery is counted with it). Set
//! `OC_BENCH_PERF=0` to leave perf out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One process's counters at one moment.
pub struct Reading {
    pid: u32,
    syscr: u64,
    syscw: u64,
    /// tid → (voluntary, involuntary) context switches.
    threads: BTreeMap<u32, (u64, u64)>,
    /// tid → the thread's name (`comm`).
    names: BTreeMap<u32, String>,
}

/// What one process did between two readings.
#[derive(Clone, Copy, Default)]
pub struct Counts {
    pub syscr: u64,
    pub syscw: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub threads_ended: u64,
    /// Every system call, where perf counted them.
    pub syscalls: Option<u64>,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.syscr += o.syscr;
        self.syscw += o.syscw;
        self.voluntary += o.voluntary;
        self.involuntary += o.involuntary;
        self.threads_ended += o.threads_ended;
        self.syscalls = match (self.syscalls, o.syscalls) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }

    pub fn io_syscalls(&self) -> u64 {
        self.syscr + self.syscw
    }

    pub fn ctxsw(&self) -> u64 {
        self.voluntary + self.involuntary
    }
}

/// The value of `key:` in a `/proc` key-value file.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

pub fn read(pid: u32) -> Reading {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let mut threads = BTreeMap::new();
    let mut names = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
                continue;
            };
            let v = field(&status, "voluntary_ctxt_switches").unwrap_or(0);
            let n = field(&status, "nonvoluntary_ctxt_switches").unwrap_or(0);
            threads.insert(tid, (v, n));
            if let Ok(name) = std::fs::read_to_string(e.path().join("comm")) {
                names.insert(tid, name.trim().to_string());
            }
        }
    }
    Reading {
        pid,
        syscr: field(&io, "syscr").unwrap_or(0),
        syscw: field(&io, "syscw").unwrap_or(0),
        threads,
        names,
    }
}

/// The context switches (voluntary, involuntary) between `before` and `after` of
/// each thread name of one process, threads of one name summed (the blocking pool's
/// threads share theirs): where in a process its switches are.
pub fn by_thread_name(before: &Reading, after: &Reading) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::<String, (u64, u64)>::new();
    for (tid, (v, n)) in &after.threads {
        let (v0, n0) = before.threads.get(tid).copied().unwrap_or((0, 0));
        let name = after.names.get(tid).cloned().unwrap_or_else(|| "?".into());
        let e = out.entry(name).or_default();
        e.0 += v.saturating_sub(v0);
        e.1 += n.saturating_sub(n0);
    }
    out
}

/// What happened between `before` and `after` (readings of one process).
pub fn between(before: &Reading, after: &Reading) -> Counts {
    let mut c = Counts {
        syscr: after.syscr.saturating_sub(before.syscr),
        syscw: after.syscw.saturating_sub(before.syscw),
        ..Counts::default()
    };
    for (tid, (v, n)) in &after.threads {
        let (v0, n0) = before.threads.get(tid).copied().unwrap_or((0, 0));
        c.voluntary += v.saturating_sub(v0);
        c.involuntary += n.saturating_sub(n0);
    }
    c.threads_ended = before
        .threads
        .keys()
        .filter(|t| !after.threads.contains_key(t))
        .count() as u64;
    c
}

/// `perf stat` counting one process's system calls, one per process.
pub struct Perf {
    running: Vec<(u32, Child, PathBuf)>,
}

/// Whether perf can count system calls here: `Err` says why not.
pub fn perf_usable() -> Result<(), String> {
    if std::env::var("OC_BENCH_PERF").as_deref() == Ok("0") {
        return Err("left out (OC_BENCH_PERF=0)".into());
    }
    let out = Command::new("perf")
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            "raw_syscalls:sys_enter",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("perf not runnable ({e})"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    let counted = err
        .lines()
        .find(|l| l.contains("raw_syscalls:sys_enter"))
        .and_then(|l| l.split(',').next())
        .is_some_and(|n| n.trim().parse::<u64>().is_ok());
    if out.status.success() && counted {
        return Ok(());
    }
    let why = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    Err(format!(
        "perf cannot count raw_syscalls:sys_enter here ({})",
        why.trim()
    ))
}

impl Perf {
    /// Starts counting each of `pids`; returns once each perf has a counter open for
    /// every thread of its process (at most 10 s of waiting).
    pub fn start(pids: &[u32], dir: &Path) -> Result<Perf, String> {
        let mut running = Vec::new();
        for pid in pids {
            let out = dir.join(format!("perf-{pid}.csv"));
            let child = Command::new("perf")
                .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-o"])
                .arg(&out)
                .args(["-p", &pid.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("perf: {e}"))?;
            running.push((*pid, child, out));
        }
        let until = Instant::now() + Duration::from_secs(10);
        for (pid, child, _) in &running {
            let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
            while counters_open(child.id()) < threads && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // perf enables its counters right after opening the last one.
        std::thread::sleep(Duration::from_millis(50));
        Ok(Perf { running })
    }

    /// Stops every count (SIGINT, as at a terminal); pid → system calls. Waits at most
    /// 10 s for perf to write its count.
    pub fn stop(self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for (_, child, _) in &self.running {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        let until = Instant::now() + Duration::from_secs(10);
        for (pid, mut child, file) in self.running {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            // A counter whose threads never ran in the phase is "<not counted>": none.
            let n = text
                .lines()
                .find(|l| l.contains("raw_syscalls:sys_enter"))
                .and_then(|l| l.split(',').next())
                .and_then(|n| match n.trim() {
                    "<not counted>" => Some(0),
                    n => n.parse::<u64>().ok(),
                });
            if let Some(n) = n {
                out.insert(pid, n);
            }
            let _ = std::fs::remove_file(&file);
        }
        out
    }
}

/// How many perf event descriptors process `pid` holds.
fn counters_open(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
        })
        .count()
}

/// Counters of a set of processes over one phase: readings at the start, perf counting
/// where it can.
pub struct Phase {
    before: Vec<Reading>,
    perf: Option<Perf>,
}

impl Phase {
    pub fn start(pids: &[u32], perf: bool, dir: &Path) -> Phase {
        let perf = if perf {
            Perf::start(pids, dir).ok()
        } else {
            None
        };
        Phase {
            before: pids.iter().map(|p| read(*p)).collect(),
            perf,
        }
    }

    /// Each process's counts, in the order of the pids given to `start`.
    pub fn end(self) -> Vec<Counts> {
        let after: Vec<Reading> = self.before.iter().map(|r| read(r.pid)).collect();
        let perf = self.perf.map(Perf::stop);
        if std::env::var("OC_BENCH_THREADS").as_deref() == Ok("1") {
            for (b, a) in self.before.iter().zip(&after) {
                for (name, (v, n)) in by_thread_name(b, a) {
                    eprintln!(
                        "threads: pid {} {name}: {v} voluntary, {n} involuntary",
                        b.pid
                    );
                }
            }
        }
        self.before
            .iter()
            .zip(&after)
            .map(|(b, a)| {
                let mut c = between(b, a);
                c.syscalls = perf.as_ref().and_then(|p| p.get(&b.pid).copied());
                c
            })
            .collect()
    }
}

/// `n / deliveries`, to one decimal.
pub fn per(n: u64, deliveries: u64) -> f64 {
    if deliveries == 0 {
        return 0.0;
    }
    (n as f64 / deliveries as f64 * 10.0).round() / 10.0
}
