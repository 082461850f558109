//! The `open-conduit` command.
//!
//! One binary holds the whole suite: `open-conduit up` runs it in the foreground
//! ([`up`]), and the same binary is each daemon (`open-conduit __daemon <name> …`) and
//! each bundled extension (`open-conduit __extension <name>`) that `up` starts. The
//! admin commands (status, config, extension, work, events, route, doctor, logs)
//! come next.

pub mod up;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Open Conduit: webhooks and schedules in, Work run by agents and scripts out.
#[derive(Parser, Debug)]
#[command(name = "open-conduit", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the whole suite in the foreground (Ctrl-C stops it).
    Up {
        /// The state directory (default: `$XDG_STATE_HOME/open-conduit`).
        #[arg(long)]
        state: Option<PathBuf>,
        /// The configuration file (default: an embedded demo).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where webhooks are accepted.
        #[arg(long, default_value = "127.0.0.1:8420")]
        listen: SocketAddr,
    },
}

fn run_extension(name: &str) -> i32 {
    let ext = match name {
        "webhook" => oc_webhook::extension().map_err(|e| e.to_string()),
        "github" => oc_github::extension().map_err(|e| e.to_string()),
        "schedule" => oc_schedule::extension(),
        "shell" => return oc_shell::main(),
        other => Err(format!("no bundled extension named {other:?}")),
    };
    match ext {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("open-conduit __extension {name}: {e}");
            2
        }
    }
}

/// The whole command: returns the exit status. Call it first thing in `main`, before
/// any thread starts (a daemon reads its passed sockets from the environment).
pub fn main(args: Vec<String>) -> i32 {
    up::take_passed_fds();
    let rest = |n: usize| args.iter().skip(n).cloned();
    match args.get(1).map(String::as_str) {
        Some("__daemon") => {
            let name = args.get(2).cloned().unwrap_or_default();
            let named = |bin: &str| std::iter::once(bin.to_owned()).chain(rest(3));
            return match name.as_str() {
                "broker" => broker::cli::main(named("open-conduit-broker")),
                "storaged" => storaged::cli::main(named("open-conduit-storaged")),
                "extrunner" => extrunner::cli::main(named("open-conduit-extrunner")),
                "schedulerd" => schedulerd::cli::main(named("open-conduit-schedulerd")),
                "ingressd" => ingressd::cli::main(named("open-conduit-ingressd")),
                other => {
                    eprintln!("open-conduit __daemon: no daemon named {other:?}");
                    2
                }
            };
        }
        Some("__extension") => {
            // The shell executor re-executes its own binary as `__wrap`; it reads
            // its arguments itself.
            return run_extension(args.get(2).map(String::as_str).unwrap_or_default());
        }
        Some("__wrap") => return oc_shell::main(),
        _ => {}
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match cli.command {
        Command::Up {
            state,
            config,
            listen,
        } => {
            let opts = up::UpOptions {
                state: state.unwrap_or_else(up::default_state),
                config,
                listen,
            };
            match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(up::up(opts)),
                Err(e) => {
                    eprintln!("open-conduit up: {e}");
                    1
                }
            }
        }
    }
}
