//! `open-conduit man DIR`: a man page per command, from the same definitions as
//! `--help` (clap_mangen), with what `--help` does not say written here: a longer
//! DESCRIPTION, FILES, ENVIRONMENT, EXIT STATUS, EXAMPLES and SEE ALSO for the main
//! commands, the synopsis as it is typed (`open-conduit work show`, not
//! `open-conduit-work-show`) and the version in the footer.

use std::fmt::Write as _;
use std::path::Path;

/// The footer's source: the command and its version.
pub const SOURCE: &str = concat!("open-conduit ", env!("CARGO_PKG_VERSION"));
/// The footer's manual.
pub const MANUAL: &str = "Open Conduit";

const GUIDE: &str = "/usr/share/doc/open-conduit/operator-guide.md";

/// What a page says beyond `--help`.
#[derive(Default)]
struct Extra {
    /// Paragraphs after the one-line summary.
    description: &'static [&'static str],
    files: &'static [(&'static str, &'static str)],
    environment: &'static [(&'static str, &'static str)],
    exit: &'static [(&'static str, &'static str)],
    /// (what it does, the command line)
    examples: &'static [(&'static str, &'static str)],
}

const ENV_BUS: (&str, &str) = (
    "OPEN_CONDUIT_BUS",
    "The bus socket the admin commands talk to when --bus is not given \
     (default: /run/open-conduit/bus.sock, the packaged suite's).",
);
const ENV_NO_COLOR: (&str, &str) = (
    "NO_COLOR",
    "When set and not empty, no colour in the output.",
);
const FILE_BUS: (&str, &str) = (
    "/run/open-conduit/bus.sock",
    "The packaged suite's bus socket, held by open-conduit-broker.socket. Root and \
     the members of the group open-conduit may use it.",
);
const FILE_GUIDE: (&str, &str) = (
    GUIDE,
    "The operator guide: install, configure, run, upgrade, remove.",
);

const EXIT_ADMIN: &[(&str, &str)] = &[
    ("0", "Done."),
    ("1", "Refused or failed: one line on standard error says why (no suite on the bus socket, no such Work, a daemon's refusal)."),
    ("2", "A usage error: an unknown command, flag or value."),
];

fn extra(page: &str) -> Option<Extra> {
    Some(match page {
        "open-conduit" => Extra {
            description: &[
                "Open Conduit turns the events of the services a team uses (GitHub, schedules, \
                 any signed webhook) into units of Work, and runs each Work through an \
                 executor: a shell command, or a coding agent with a toolbelt. Everything that \
                 knows a service is an extension, a process speaking JSON-RPC over its \
                 standard input and output.",
                "The suite is five daemons: open-conduit-broker (the bus, socket-activated), \
                 open-conduit-storaged (the store, on SQLite), open-conduit-extrunner (the \
                 extensions), open-conduit-schedulerd (Work, attempts, schedules and the \
                 agents' toolbelt) and open-conduit-ingressd (webhooks). The Debian package \
                 runs them under systemd (open-conduit.target); open-conduit up runs them in \
                 the foreground without it. The daemons are links to this same binary, which \
                 runs the daemon its name says.",
                "The other commands administer a running suite through the broker's bus \
                 socket (--bus, else $OPEN_CONDUIT_BUS, else /run/open-conduit/bus.sock), \
                 except config check, config demo, completions and man, which need none.",
            ],
            files: &[
                ("/etc/open-conduit/config.json", "The configuration (a conffile). The daemons do not read it on their own: check it with open-conduit config check, store it with open-conduit config apply."),
                ("/etc/open-conduit/extensions/", "Extensions installed with open-conduit extension install."),
                ("/etc/open-conduit/extrunner.env", "Variables for extrunner's environment (secrets named env:NAME), read by its unit when it exists."),
                ("/usr/lib/open-conduit/extensions/", "The bundled extensions (webhook, github, schedule, shell, claude-code)."),
                ("/usr/lib/open-conduit/open-conduit-*", "The daemons, links to /usr/bin/open-conduit; the units' ExecStart."),
                ("/var/lib/open-conduit/", "The state: the SQLite store db/conduit.db, artifacts, extension state, executor runs and their logs. Removed on purge."),
                FILE_BUS,
                ("/run/open-conduit/toolbelt.sock", "The agents' toolbelt, served by open-conduit-schedulerd."),
                ("/usr/lib/systemd/system/open-conduit*", "The units: open-conduit.target, a service per daemon, and the broker's, ingressd's and the toolbelt's sockets."),
                FILE_GUIDE,
            ],
            environment: &[ENV_BUS, ENV_NO_COLOR],
            exit: &[
                ("0", "Done."),
                ("1", "Refused or failed: one line on standard error says why."),
                ("2", "A usage error: an unknown command, flag or value."),
                ("3", "status only: a daemon or an extension is down."),
                ("141", "The reader of standard output went away (open-conduit work list | head)."),
            ],
            examples: &[
                ("Run the suite in the foreground with the demo configuration:", "open-conduit up"),
                ("See how the packaged suite is doing:", "open-conduit status"),
                ("Check, then apply, an edited configuration:", "open-conduit config check /etc/open-conduit/config.json\nopen-conduit config apply /etc/open-conduit/config.json"),
                ("The failed Work and the output of one:", "open-conduit work list --state failed\nopen-conduit work log 3f9c"),
            ],
        },
        "open-conduit-up" => Extra {
            description: &[
                "Runs the whole suite in the foreground, as systemd would: binds the bus socket \
                 and the webhook socket and passes them to the broker and ingressd, starts \
                 each daemon once the one before it said it was ready, applies the \
                 configuration (--config, else an embedded demo) and prints ready once every \
                 extension has taken it and ingressd serves its webhook paths.",
                "By default it prints each daemon as it is ready, where webhooks are accepted \
                 (with a curl line for the demo), warnings, errors, and one line per delivery \
                 and per attempt settled; --verbose prints every log line. Every daemon's log \
                 is also written to STATE/logs/. A daemon that dies is restarted (1 s, \
                 doubling up to 30 s).",
                "Ctrl-C, SIGTERM or SIGHUP (the terminal closed), at any moment, stops the \
                 daemons in reverse order (SIGTERM, then SIGKILL after 15 s); a second Ctrl-C \
                 kills what is left at once. A daemon whose up is gone stops too. A \
                 configuration an extension refuses is printed with its JSON pointer and up \
                 exits 1.",
                "The admin commands reach this suite with --bus STATE/run/bus.sock (up prints \
                 it).",
            ],
            files: &[
                ("$XDG_STATE_HOME/open-conduit/", "The default state directory (else ~/.local/state/open-conduit): the store, extension state, executor runs."),
                ("STATE/run/bus.sock", "The bus socket, for the admin commands' --bus."),
                ("STATE/logs/DAEMON.log", "Every daemon's log lines (open-conduit logs reads them)."),
                ("STATE/etc/extensions/", "Extensions installed into this suite (open-conduit extension install)."),
            ],
            environment: &[
                ("OC_LOG", "A log filter (as RUST_LOG: info, extrunner=debug, ...) for the daemons; set and not empty, it implies --verbose."),
                ("XDG_STATE_HOME, HOME", "Where the default state directory is."),
            ],
            exit: &[
                ("0", "Stopped on request (Ctrl-C, SIGTERM, SIGHUP)."),
                ("1", "The suite could not start: a configuration with problems or refused by an extension, a socket in use, a daemon that never became ready."),
                ("2", "A usage error."),
            ],
            examples: &[
                ("The demo: a webhook on /hooks/demo that a shell command echoes:", "open-conduit up\ncurl -d '{\"hello\": 1}' http://127.0.0.1:8420/hooks/demo"),
                ("Your own configuration, state and port:", "open-conduit up --config conduit.json --state ./state --listen 127.0.0.1:9000"),
                ("From another terminal, the Work it ran:", "open-conduit --bus ~/.local/state/open-conduit/run/bus.sock work list"),
            ],
        },
        "open-conduit-status" => Extra {
            description: &[
                "Asks the broker for each daemon (pid, uptime, its last status line), each \
                 extension (version, state, restarts, a configuration it refused), the Work \
                 by state and the paths where webhooks arrive, and prints them. With --json, \
                 the daemons' answers as they are.",
            ],
            files: &[FILE_BUS],
            environment: &[ENV_BUS, ENV_NO_COLOR],
            exit: &[
                ("0", "Every daemon and every extension is up."),
                ("1", "No suite answered on the bus socket (the line names the socket tried)."),
                ("3", "A daemon or an extension is down, or an extension refused the configuration."),
            ],
            examples: &[
                ("The packaged suite:", "open-conduit status"),
                ("A suite run by open-conduit up:", "open-conduit --bus ~/.local/state/open-conduit/run/bus.sock status"),
            ],
        },
        "open-conduit-doctor" => Extra {
            description: &[
                "Runs every health check and prints each with ok, warn or fail, and for a \
                 failure what to do about it: the bus, each daemon, the store's integrity \
                 (SQLite quick_check), the free disk space, the stored configuration, each \
                 extension and its own checks, and whether the webhook address accepts \
                 connections.",
            ],
            files: &[FILE_BUS, ("/var/lib/open-conduit/", "The state directory, whose disk space is checked.")],
            environment: &[ENV_BUS, ENV_NO_COLOR],
            exit: &[
                ("0", "No check failed (warnings allowed)."),
                ("1", "A check failed, or no suite answered."),
            ],
            examples: &[
                ("Every check:", "open-conduit doctor"),
                ("Only the failures, as JSON:", "open-conduit doctor --json | jq '.[] | select(.status == \"fail\")'"),
            ],
        },
        "open-conduit-config" => Extra {
            description: &[
                "The configuration is one JSON document: settings, connections (with secret \
                 references, never secrets), and scopes with their entries, routes and \
                 bindings. config check reads a file offline and names every problem with its \
                 JSON pointer, starting the extensions whose types the file uses to check \
                 their own objects; config apply checks a file and stores it as a new \
                 generation, which every daemon takes at once; config show prints the stored \
                 one; config demo prints the embedded demo, a starting point.",
                "The daemons never read /etc/open-conduit/config.json on their own: edit it, \
                 check it, apply it.",
            ],
            files: &[
                ("/etc/open-conduit/config.json", "The packaged configuration file, config check's default."),
                ("/etc/open-conduit/extensions/", "Installed extensions, which config check starts too."),
                FILE_BUS,
            ],
            environment: &[ENV_BUS],
            exit: &[
                ("0", "The file is valid (check), or stored (apply)."),
                ("1", "Problems, each printed with its JSON pointer; or no suite answered (apply, show)."),
                ("2", "A usage error."),
            ],
            examples: &[
                ("Check, then apply, the packaged configuration:", "open-conduit config check /etc/open-conduit/config.json\nsudo open-conduit config apply /etc/open-conduit/config.json"),
                ("Start your own from the demo:", "open-conduit config demo > conduit.json"),
            ],
        },
        "open-conduit-work" => Extra {
            description: &[
                "A Work is what an event became: a unit of work on a binding (a shell \
                 command, an agent), run in attempts. work list shows it newest first, by \
                 scope and state; work show its display, attempts, waits and why each event \
                 went to it; work log the output of its last attempt; work cancel and work \
                 interrupt stop it, for the reason given; work retry runs a failed, \
                 cancelled, idle or completed one again.",
                "An ID may be shortened to its start (at least 4 characters, with or without \
                 work_) when that names one Work, as git takes a commit's.",
            ],
            files: &[FILE_BUS],
            environment: &[ENV_BUS, ENV_NO_COLOR],
            exit: EXIT_ADMIN,
            examples: &[
                ("The failed Work of a scope:", "open-conduit work list --scope demo --state failed"),
                ("One Work and its output, by a prefix of its ID:", "open-conduit work show 3f9c\nopen-conduit work log 3f9c"),
                ("Stop one:", "open-conduit work cancel 3f9c --reason 'wrong branch'"),
            ],
        },
        _ => return None,
    })
}

/// The page's date (`.TH`'s third field, which must not be empty): the day of
/// `SOURCE_DATE_EPOCH` when it is set (a package build, reproducible), else today.
fn date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    protocol::time::format_date(secs)
}

/// Escape text for roff: backslashes, hyphens (as \-), a leading dot or quote.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The sections after the options and subcommands.
fn render_extra(page: &str, e: &Extra) -> String {
    let mut s = String::new();
    let tp = |s: &mut String, head: &str, text: &str| {
        let _ = write!(s, ".TP\n\\fB{}\\fR\n{}\n", roff(head), roff(text));
    };
    if !e.files.is_empty() {
        s.push_str(".SH FILES\n");
        for (f, what) in e.files {
            tp(&mut s, f, what);
        }
    }
    if !e.environment.is_empty() {
        s.push_str(".SH ENVIRONMENT\n");
        for (v, what) in e.environment {
            tp(&mut s, v, what);
        }
    }
    if !e.exit.is_empty() {
        s.push_str(".SH \"EXIT STATUS\"\n");
        for (code, what) in e.exit {
            tp(&mut s, code, what);
        }
    }
    if !e.examples.is_empty() {
        s.push_str(".SH EXAMPLES\n");
        for (what, lines) in e.examples {
            let _ = write!(s, ".PP\n{}\n.PP\n.RS 4\n.nf\n", roff(what));
            for line in lines.lines() {
                let _ = writeln!(s, "{}", roff(line));
            }
            s.push_str(".fi\n.RE\n");
        }
    }
    s.push_str(".SH \"SEE ALSO\"\n");
    let mut see: Vec<String> = Vec::new();
    if page != "open-conduit" {
        see.push("\\fBopen\\-conduit\\fR(1)".into());
    }
    see.push("\\fBsystemctl\\fR(1)".into());
    see.push("\\fBjournalctl\\fR(1)".into());
    let _ = writeln!(s, "{},", see.join(", "));
    let _ = writeln!(s, "and the operator guide, {}.", roff(GUIDE));
    s
}

/// Write `open-conduit.1` and one page per subcommand (`open-conduit-work-show.1`,
/// …) into `dir`; returns how many.
pub fn write_pages(dir: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut root = <crate::Cli as clap::CommandFactory>::command();
    // Built, each subcommand has its bin name ("open-conduit work show", for the
    // synopsis), its display name ("open-conduit-work-show", for the title) and the
    // global flags.
    root.build();
    let mut written = 0;
    let mut stack = vec![(String::from("open-conduit"), root)];
    while let Some((name, mut cmd)) = stack.pop() {
        if cmd.find_subcommand("help").is_some() {
            cmd = cmd.mut_subcommand("help", |h| h.hide(true));
        }
        let page = render(&name, cmd.clone()).map_err(|e| format!("{name}: {e}"))?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, page).map_err(|e| format!("{}: {e}", path.display()))?;
        written += 1;
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" || sub.is_hide_set() {
                continue;
            }
            stack.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
    }
    Ok(written)
}

fn render(name: &str, cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let cmd = cmd.display_name(name.to_owned());
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let man = clap_mangen::Man::new(cmd)
        .title(name.to_owned())
        .date(date())
        .source(SOURCE)
        .manual(MANUAL);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    let extra = extra(name);
    if let Some(e) = &extra {
        for p in e.description {
            out.extend_from_slice(format!(".PP\n{}\n", roff(p)).as_bytes());
        }
    }
    if has_args {
        man.render_options_section(&mut out)?;
    }
    if has_subs {
        man.render_subcommands_section(&mut out)?;
    }
    let e = extra.unwrap_or_else(|| Extra {
        environment: &[ENV_BUS],
        exit: EXIT_ADMIN,
        ..Extra::default()
    });
    out.extend_from_slice(render_extra(name, &e).as_bytes());
    Ok(out)
}
