//! The `open-conduit` command.
//!
//! One binary holds the whole suite: `open-conduit up` runs it in the foreground
//! ([`up`]), and the same binary is each daemon (`open-conduit __daemon <name> …`) and
//! each bundled extension (`open-conduit extension-run <name>`, the spec's name; the
//! older hidden `__extension <name>` is an alias) that `up` starts. The
//! admin commands ([`admin`]: status, config, extension, work, events, route) talk to
//! the broker; doctor, logs, completions and man pages come next.

pub mod admin;
pub mod asks;
pub mod bundled;
pub mod client;
pub mod config;
pub mod doctor;
pub mod events;
pub mod extension;
pub mod gitcred;
pub mod logs;
pub mod lookup;
pub mod man;
pub mod mcp;
pub mod output;
pub mod reach;
pub mod resources;
pub mod slack;
pub mod status;
pub mod store;
pub mod up;
pub mod uplog;
pub mod web;
pub mod work;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Open Conduit: webhooks and schedules in, Work run by agents and scripts out.
#[derive(Parser, Debug)]
#[command(name = "open-conduit", version)]
pub struct Cli {
    /// The bus socket (default: $OPEN_CONDUIT_BUS, else /run/open-conduit/bus.sock).
    #[arg(long, global = true)]
    pub bus: Option<PathBuf>,
    /// Print the daemons' JSON answers instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `config …`.
#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Check a configuration file offline: every problem with its JSON pointer. The
    /// extensions whose types it uses are started to check their own objects.
    Check {
        /// The file (default: `config.json` in the configuration directory).
        file: Option<PathBuf>,
        /// The configuration directory, for its installed extensions (default: `up`'s,
        /// else /etc/open-conduit).
        #[arg(long)]
        config_dir: Option<PathBuf>,
        /// Check only the document's structure; start no extension.
        #[arg(long)]
        no_extensions: bool,
    },
    /// Print the embedded demo configuration (what `up` runs without `--config`).
    Demo,
    /// Check a file and store it as the new configuration generation.
    Apply {
        /// The file.
        file: PathBuf,
    },
    /// Show the stored configuration (secret references by name only).
    Show,
}

/// `extension …`.
#[derive(Subcommand, Debug)]
pub enum ExtensionCommand {
    /// Every package, with its state.
    List,
    /// One package in detail.
    Inspect {
        /// The package.
        name: String,
    },
    /// Stop a package and start it again.
    Restart {
        /// The package.
        name: String,
    },
    /// Install a package directory (its manifest checked offline first).
    Install {
        /// The package directory (with `open-conduit-extension.json`).
        dir: PathBuf,
        /// The configuration directory (default: `up`'s, else /etc/open-conduit).
        #[arg(long)]
        config_dir: Option<PathBuf>,
    },
    /// Remove an installed package.
    Remove {
        /// The package.
        name: String,
        /// The configuration directory (default: `up`'s, else /etc/open-conduit).
        #[arg(long)]
        config_dir: Option<PathBuf>,
    },
}

/// `slack …`.
#[derive(Subcommand, Debug)]
pub enum SlackCommand {
    /// Print the Slack app manifest generated from the configuration (JSON, to paste
    /// into the app's settings at api.slack.com/apps), for a connection that entries
    /// of type slack name.
    Manifest {
        /// The connection (needed when entries name more than one).
        #[arg(long)]
        connection: Option<String>,
        /// Only a connection an entry of this scope names.
        #[arg(long)]
        scope: Option<String>,
    },
}

/// `resource …`.
#[derive(Subcommand, Debug)]
pub enum ResourceCommand {
    /// Every workspace lease: its Work (and the Work's state), directory, branch, HEAD.
    List,
    /// Remove now the workspaces of Work closed longer than the grace; a workspace
    /// with uncommitted changes is kept and listed.
    Sweep {
        /// Only this resource type (git).
        #[arg(long = "type")]
        resource_type: Option<String>,
        /// How long a Work must have been closed (0, 90s, 30m, 2h, 7d; default 1d).
        #[arg(long)]
        grace: Option<String>,
        /// Remove a closed Work's workspace even with uncommitted changes.
        #[arg(long)]
        remove_dirty: bool,
    },
}

/// `store …`: the database itself, with storaged stopped.
#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Write every row of the store to FILE (`-`: standard output), with each
    /// table's count and a digest.
    Export {
        /// The file.
        file: PathBuf,
        /// The state directory (default: /var/lib/open-conduit).
        #[arg(long, default_value = "/var/lib/open-conduit")]
        state: PathBuf,
        /// Where `config.json` says which database (`settings.storage`; SQLite
        /// without it).
        #[arg(long)]
        config_dir: Option<PathBuf>,
    },
    /// Read an export into an empty store, then check its counts and digest.
    Import {
        /// The file.
        file: PathBuf,
        /// The state directory (default: /var/lib/open-conduit).
        #[arg(long, default_value = "/var/lib/open-conduit")]
        state: PathBuf,
        /// Where `config.json` says which database (`settings.storage`; SQLite
        /// without it).
        #[arg(long)]
        config_dir: Option<PathBuf>,
    },
}

/// `work` subcommands.
#[derive(Subcommand, Debug)]
pub enum WorkCommand {
    /// Work, newest first, by scope and state.
    List {
        /// Only this scope.
        #[arg(long)]
        scope: Option<String>,
        /// Only this state (pending, running, waiting, idle, completed, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
    },
    /// One Work: its display, attempts, waits and why each event went to it.
    Show {
        /// The Work.
        id: String,
    },
    /// The output of the Work's last attempt.
    Log {
        /// The Work.
        id: String,
    },
    /// Cancel a Work, stopping its running attempt first (or saying where it may
    /// still run).
    Cancel {
        /// The Work.
        id: String,
        /// Why, for the record.
        #[arg(long, default_value = "cancelled by the operator")]
        reason: String,
    },
    /// Run a failed, cancelled, idle or completed Work again (a failed or cancelled
    /// one is reopened with the inputs it ended with).
    Retry {
        /// The Work.
        id: String,
        /// Why, for the record.
        #[arg(long, default_value = "retried by the operator")]
        reason: String,
    },
    /// Interrupt the Work's running attempt.
    Interrupt {
        /// The Work.
        id: String,
        /// Why, for the record.
        #[arg(long, default_value = "interrupted by the operator")]
        reason: String,
    },
    /// Let a Work held for admission start (recorded as your decision).
    Admit {
        /// The Work.
        id: String,
    },
    /// Refuse a Work held for admission: it is cancelled (recorded as your decision).
    Reject {
        /// The Work.
        id: String,
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
    },
    /// The actions every provider offers on the Work now.
    Actions {
        /// The Work.
        id: String,
    },
    /// Take one action on the Work, as yourself (`cli:<user>`).
    Act {
        /// The Work.
        id: String,
        /// The action (`work actions` lists them).
        action: String,
        /// The provider offering it (default: the host's `core`).
        #[arg(long)]
        provider: Option<String>,
        /// What you give with it, as JSON.
        #[arg(long)]
        input: Option<String>,
        /// The action's identity: the same key again does nothing again (default: a
        /// new one).
        #[arg(long)]
        key: Option<String>,
    },
}

/// `web` subcommands.
#[derive(Subcommand, Debug)]
pub enum WebCommand {
    /// Mint a login token for the web API (printed once; only its SHA-256 is kept,
    /// in `<state>/webd/tokens`).
    Login {
        /// Who signs in with it (default: the user who runs this); actions are
        /// recorded as `web:<name>`.
        #[arg(long)]
        name: Option<String>,
        /// The state directory webd reads the tokens from (default: /var/lib/open-conduit).
        #[arg(long, default_value = "/var/lib/open-conduit")]
        state: PathBuf,
    },
}

/// `ask` subcommands.
#[derive(Subcommand, Debug)]
pub enum AskCommand {
    /// Answer an agent's question (`open-conduit asks` lists them).
    Answer {
        /// The ask's ID.
        id: String,
        /// The answer, in words.
        text: Option<String>,
        /// The answer, as the number of one of the ask's choices (from 1).
        #[arg(long)]
        choice: Option<usize>,
    },
    /// Approve an operation waiting for approval: it runs when the agent calls it again.
    Approve {
        /// The approval's ID.
        id: String,
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject an operation waiting for approval: the agent's call fails with your reason.
    Reject {
        /// The approval's ID.
        id: String,
        /// Why (the agent reads it).
        #[arg(long)]
        reason: String,
    },
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
        /// Where the web view (webd) is served (`127.0.0.1:0` picks a port, printed).
        #[arg(long, value_name = "ADDR", default_value = busapi::web::DEFAULT_LISTEN)]
        web_listen: SocketAddr,
        /// Print every daemon's log lines (by default: warnings, errors, a line per
        /// delivery (at most 20 a second) and per attempt settled; every line is in
        /// `<state>/logs/<daemon>.log`, rotated at 16 MiB to `.log.1`). `OC_LOG` set
        /// in the environment implies it, with its own filter.
        #[arg(long, short)]
        verbose: bool,
        /// `up` makes its own bus (`<state>/run/bus.sock`): the global `--bus` and
        /// `--json` mean nothing to it, and its help does not offer them.
        #[arg(long, hide = true)]
        bus: Option<PathBuf>,
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Each daemon, the extensions, Work by state, where webhooks arrive; exits 3 when
    /// something is down.
    Status,
    /// The configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Extension packages.
    #[command(subcommand)]
    Extension(ExtensionCommand),
    /// Work.
    #[command(subcommand)]
    Work(WorkCommand),
    /// What waits for a person: agents' questions, operations waiting for approval,
    /// Work waiting for admission.
    Asks,
    /// Answer, approve or reject what waits for a person.
    #[command(subcommand)]
    Ask(AskCommand),
    /// The web view: sign-in tokens for its API.
    #[command(subcommand)]
    Web(WebCommand),
    /// Workspaces: the leases resource providers hold for Work.
    #[command(subcommand)]
    Resource(ResourceCommand),
    /// The database: export and import (between SQLite and PostgreSQL).
    #[command(subcommand)]
    Store(StoreCommand),
    /// The bundled Slack package.
    #[command(subcommand)]
    Slack(SlackCommand),
    /// The event log.
    Events {
        /// Only events after this sequence.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Keep printing new events as they are accepted.
        #[arg(long)]
        follow: bool,
    },
    /// Every health check with ok, warn or fail, and what to do about a failure.
    Doctor,
    /// The agents' toolbelt as an MCP server on stdio (for an agent executor: it reads
    /// OS_ENDPOINT and the token file OS_TOKEN_FILE names).
    Mcp,
    /// git's credential helper for a run's own git (named by an extension's run
    /// environment; reads git's request on stdin and asks the run's toolbelt).
    GitCredential {
        /// The extension whose run environment named the helper.
        extension: String,
        /// git's operation: get, store or erase.
        operation: String,
    },
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write a man page per command into DIR (from the same definitions as --help).
    Man {
        /// The directory.
        dir: PathBuf,
    },
    /// The daemons' logs: the files `up` writes, or the journal under systemd.
    Logs {
        /// One daemon (broker, storaged, extrunner, schedulerd, ingressd); all when
        /// omitted.
        component: Option<String>,
        /// How many of the last lines.
        #[arg(long, short = 'n', default_value_t = 100)]
        lines: usize,
        /// One Work's story instead: the lines naming it (`OC_WORK_ID`) or the
        /// Events that brought it (`OC_EVENT_ID`: the intake's lines), across every
        /// daemon and package, oldest first.
        #[arg(long, value_name = "ID", conflicts_with = "component")]
        work: Option<String>,
    },
    /// Serve the bundled extension NAME over stdin and stdout (the extension
    /// protocol): what a package whose command is `open-conduit extension-run NAME`
    /// runs. Bundled: webhook, github, slack, linear, jira, bitbucket, schedule, shell,
    /// claude-code, codex, git, human, ssh, cloudflared, ngrok, srt, docker.
    ExtensionRun {
        /// The bundled extension.
        name: String,
    },
    /// How a scope's routes would decide an event, writing nothing.
    Route {
        /// The scope.
        #[arg(long)]
        trace: String,
        /// The event, as a JSON file ({type, source?, keys?, payload: {schema?, data}}).
        #[arg(long)]
        event: Option<PathBuf>,
        /// Or its type.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// And its correlation keys.
        #[arg(long = "key")]
        keys: Vec<String>,
    },
}

/// Write `open-conduit.1` and one page per subcommand (`open-conduit-work-show.1`, …):
/// see [`man`].
pub fn man_pages(dir: &std::path::Path) -> Result<(), String> {
    let written = man::write_pages(dir)?;
    println!("{written} man pages in {}", dir.display());
    Ok(())
}

/// The public name of the command that serves a bundled extension
/// (`open-conduit extension-run NAME`, as a manifest's command names it).
pub const EXTENSION_RUN: &str = "extension-run";

/// `extension-run NAME` (or its alias `__extension NAME`): serve the bundled
/// extension over stdio; an unknown or missing NAME is a usage error (2).
fn run_extension(name: Option<&str>) -> i32 {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        eprintln!(
            "usage: open-conduit {EXTENSION_RUN} NAME (bundled: {})",
            bundled_names()
        );
        return 2;
    };
    let ext = match name {
        "webhook" => oc_webhook::extension().map_err(|e| e.to_string()),
        "github" => oc_github::extension().map_err(|e| e.to_string()),
        "slack" => oc_slack::extension().map_err(|e| e.to_string()),
        "linear" => oc_linear::extension().map_err(|e| e.to_string()),
        "jira" => oc_jira::extension().map_err(|e| e.to_string()),
        "bitbucket" => oc_bitbucket::extension().map_err(|e| e.to_string()),
        "schedule" => oc_schedule::extension(),
        "human" => oc_human::extension(),
        "shell" => return oc_shell::main(),
        "claude-code" => return oc_claude_code::main(),
        "codex" => return oc_codex::main(),
        "git" => return oc_git::main(),
        "ssh" => return oc_ssh::main(),
        "cloudflared" => return oc_cloudflared::main(),
        "ngrok" => return oc_ngrok::main(),
        "srt" => return oc_srt::main(),
        "docker" => return oc_docker::main(),
        other => {
            eprintln!(
                "open-conduit {EXTENSION_RUN}: no bundled extension named {other:?} (bundled: {})",
                bundled_names()
            );
            return 2;
        }
    };
    match ext {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("open-conduit {EXTENSION_RUN} {name}: {e}");
            2
        }
    }
}

fn bundled_names() -> String {
    up::bundled()
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A listing piped into `head` ends quietly when the reader goes (status 141, as a
/// shell reports a process ended by SIGPIPE), rather than with a panic on the broken
/// pipe. SIGPIPE itself stays ignored, so a write to a closed socket or to an
/// extension that has exited is an error the command reports, not its silent end.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // `println!` ("failed printing to stdout: Broken pipe") and clap_complete
        // ("… BrokenPipe …") panic when the reader has gone.
        if text.contains("Broken pipe") || text.contains("BrokenPipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// The whole command: returns the exit status. Call it first thing in `main`, before
/// any thread starts (a daemon reads its passed sockets from the environment).
pub fn main(args: Vec<String>) -> i32 {
    up::take_passed_fds();
    // Installed as `/usr/lib/open-conduit/open-conduit-<daemon>` (a link to this binary),
    // it is that daemon.
    let called = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|f| f.to_str())
        .unwrap_or_default()
        .to_owned();
    if let Some(daemon) = called.strip_prefix("open-conduit-") {
        let mut a = vec![
            "open-conduit".to_owned(),
            "__daemon".to_owned(),
            daemon.to_owned(),
        ];
        a.extend(args.iter().skip(1).cloned());
        return main(a);
    }
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
                "tunneld" => tunneld::cli::main(named("open-conduit-tunneld")),
                "webd" => webd::cli::main(named("open-conduit-webd")),
                other => {
                    eprintln!("open-conduit __daemon: no daemon named {other:?}");
                    2
                }
            };
        }
        // Served before the command line is parsed, so an extension's own
        // arguments after NAME are left to it; `__extension` is the older name.
        Some(EXTENSION_RUN | "__extension") => {
            return run_extension(args.get(2).map(String::as_str));
        }
        // The shell executor re-executes its own binary as `__wrap`; it reads its
        // arguments itself.
        Some("__wrap") => return oc_shell::main(),
        // The claude-code executor's segment wrapper.
        Some("__wrap-claude-code") => return oc_claude_code::main(),
        // The codex executor's segment wrapper.
        Some("__wrap-codex") => return oc_codex::main(),
        // The docker container provider's attach client (a run's command in its
        // container).
        Some("__docker-attach") => return oc_docker::main(),
        // The ssh container provider's attach program (a run's command that runs
        // the launch on the remote).
        Some("__ssh-attach") => return oc_ssh::main(),
        Some("__bundle") => {
            // The package's layout: `__bundle DIR EXE` writes each bundled package under
            // DIR, its program a script that runs EXE as the extension.
            let (Some(dir), Some(exe)) = (args.get(2), args.get(3)) else {
                eprintln!("usage: open-conduit __bundle DIR EXE");
                return 2;
            };
            return match up::write_bundled_to(Path::new(dir), Path::new(exe)) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("open-conduit __bundle: {e}");
                    1
                }
            };
        }
        _ => {}
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let bus = admin::bus_path(cli.bus.clone());
    let json_out = cli.json;
    quiet_on_closed_stdout();
    if let Command::Up {
        state,
        config,
        listen,
        web_listen,
        verbose,
        ..
    } = cli.command
    {
        let opts = up::UpOptions {
            state: state.unwrap_or_else(up::default_state),
            config,
            listen,
            web_listen,
            verbose: verbose || std::env::var_os("OC_LOG").is_some_and(|v| !v.is_empty()),
        };
        return match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(up::up(opts)),
            Err(e) => {
                eprintln!("open-conduit up: {e}");
                1
            }
        };
    }
    let done = match cli.command {
        Command::Status => admin::status(&bus, json_out),
        Command::Doctor => admin::doctor(&bus, json_out),
        Command::Config(ConfigCommand::Check {
            file,
            config_dir,
            no_extensions,
        }) => {
            let dir = admin::config_dir(config_dir, &bus);
            let file = file.unwrap_or_else(|| dir.join("config.json"));
            admin::config_check(&file, (!no_extensions).then_some(dir.as_path()))
        }
        Command::Config(ConfigCommand::Demo) => {
            println!("{:#}", up::demo_config());
            Ok(())
        }
        Command::Config(ConfigCommand::Apply { file }) => {
            let dir = admin::config_dir(None, &bus);
            admin::config_apply(&bus, &file, &dir)
        }
        Command::Config(ConfigCommand::Show) => admin::config_show(&bus),
        Command::Extension(ExtensionCommand::List) => admin::extension_list(&bus, json_out),
        Command::Extension(ExtensionCommand::Inspect { name }) => {
            admin::extension_inspect(&bus, &name)
        }
        Command::Extension(ExtensionCommand::Restart { name }) => {
            admin::extension_restart(&bus, &name)
        }
        Command::Extension(ExtensionCommand::Install { dir, config_dir }) => {
            admin::extension_install(&admin::config_dir(config_dir, &bus), &dir)
        }
        Command::Extension(ExtensionCommand::Remove { name, config_dir }) => {
            admin::extension_remove(&admin::config_dir(config_dir, &bus), &name)
        }
        Command::Work(WorkCommand::List { scope, state }) => {
            admin::work_list(&bus, scope, state, json_out)
        }
        Command::Work(WorkCommand::Show { id }) => admin::work_show(&bus, &id, json_out),
        Command::Work(WorkCommand::Admit { id }) => asks::admit(&bus, &id, true, None, json_out),
        Command::Work(WorkCommand::Reject { id, reason }) => {
            asks::admit(&bus, &id, false, reason, json_out)
        }
        Command::Work(WorkCommand::Actions { id }) => asks::actions(&bus, &id, json_out),
        Command::Work(WorkCommand::Act {
            id,
            action,
            provider,
            input,
            key,
        }) => asks::work_act(&bus, &id, &action, provider, input, key, json_out),
        Command::Asks => asks::asks(&bus, json_out),
        Command::Web(WebCommand::Login { name, state }) => web::login(&state, name, json_out),
        Command::Ask(AskCommand::Answer { id, text, choice }) => {
            asks::answer(&bus, &id, text, choice, json_out)
        }
        Command::Ask(AskCommand::Approve { id, reason }) => {
            asks::decide(&bus, &id, true, reason, json_out)
        }
        Command::Ask(AskCommand::Reject { id, reason }) => {
            asks::decide(&bus, &id, false, Some(reason), json_out)
        }
        Command::Slack(SlackCommand::Manifest { connection, scope }) => {
            slack::manifest(&bus, connection.as_deref(), scope.as_deref(), json_out)
        }
        Command::Resource(ResourceCommand::List) => resources::list(&bus, json_out),
        Command::Resource(ResourceCommand::Sweep {
            resource_type,
            grace,
            remove_dirty,
        }) => resources::sweep(
            &bus,
            resource_type.as_deref(),
            grace.as_deref(),
            remove_dirty,
            json_out,
        ),
        Command::Store(StoreCommand::Export {
            file,
            state,
            config_dir,
        }) => store::export(&state, config_dir.as_deref(), &file, json_out),
        Command::Store(StoreCommand::Import {
            file,
            state,
            config_dir,
        }) => store::import(&state, config_dir.as_deref(), &file, json_out),
        Command::Work(WorkCommand::Log { id }) => admin::work_log(&bus, &id),
        Command::Work(WorkCommand::Cancel { id, reason }) => admin::work_cancel(&bus, &id, &reason),
        Command::Work(WorkCommand::Retry { id, reason }) => admin::work_retry(&bus, &id, &reason),
        Command::Work(WorkCommand::Interrupt { id, reason }) => {
            admin::work_interrupt(&bus, &id, &reason)
        }
        Command::Mcp => return mcp::main(),
        Command::GitCredential {
            extension,
            operation,
        } => return gitcred::main(&extension, &operation),
        // Reached only behind a global option (`--json extension-run NAME`).
        Command::ExtensionRun { name } => return run_extension(Some(&name)),
        Command::Events { after, follow } => admin::events(&bus, after, follow, json_out),
        Command::Logs {
            component,
            lines,
            work,
        } => match work {
            Some(id) => crate::logs::work_story(&bus, &id, lines),
            None => admin::logs(&bus, component.as_deref(), lines),
        },
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "open-conduit", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { dir } => man_pages(&dir).map_err(admin::Failure::from),
        Command::Route {
            trace,
            event,
            event_type,
            keys,
        } => {
            let ev = match (event, event_type) {
                (Some(file), _) => match std::fs::read(&file)
                    .map_err(|e| format!("{}: {e}", file.display()))
                    .and_then(|t| {
                        serde_json::from_slice(&t).map_err(|e| format!("{}: {e}", file.display()))
                    }) {
                    Ok(v) => v,
                    Err(e) => {
                        eprintln!("open-conduit route: {e}");
                        return 1;
                    }
                },
                (None, Some(t)) => serde_json::json!({"type": t, "keys": keys}),
                (None, None) => {
                    eprintln!("open-conduit route: give --event FILE or --type TYPE");
                    return 2;
                }
            };
            admin::route_trace(&bus, &trace, ev)
        }
        Command::Up { .. } => Ok(()),
    };
    match done {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("open-conduit: {}", f.message);
            f.status
        }
    }
}
