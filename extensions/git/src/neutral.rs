//! Neutralising the git commands the provider runs: the repository named, never
//! discovered, its command-running config overridden, nothing outside it read.
//! [`crate::git`] builds every command from what this module gives it.
//!
//! ## Nothing a run planted runs here
//!
//! A sandboxed run writes its workspace: a worktree's `.git` file, a fresh clone's
//! whole `.git/` (its `config`, `info/attributes`, hooks), `.gitattributes`,
//! `.gitmodules`, nested repositories. The provider runs git there as the service
//! user outside the sandbox (the sweep's `status`, `rev-parse`), so every command
//! goes through [`Git::run`](crate::git::Git::run), which alone builds the command
//! line and environment:
//!
//! - **The repository is named, never discovered** ([`Repo`]): a cache by its path,
//!   a `work`/`shared` worktree by the cache's own entry `worktrees/<name>` whose
//!   `gitdir` points back at `<dir>/.git` (the workspace's `.git` file is never
//!   read), a `fresh` clone by `<dir>/.git` only when that is a real directory
//!   (not a symlink, not a file); always `--git-dir=… --work-tree=…`.
//! - **Command-running config is overridden** by the command scope ([`NEUTRAL`]),
//!   and in a workspace every filter, diff, merge, credential and pager driver its
//!   config names (listed first by `git config --list --name-only --includes
//!   --show-scope -z`, which reads the same files, includes too, and runs nothing)
//!   is blanked. A cache's config is the provider's own, which no sandboxed run can
//!   write: it gets the fixed overrides without the listing (a process fewer).
//! - **Nothing outside the repository is read**: `GIT_CONFIG_NOSYSTEM=1`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_ATTR_NOSYSTEM=1`,
//!   `core.attributesFile=/dev/null`, and the variables that would point git
//!   elsewhere or name a program ([`SCRUBBED`]) removed.
//!
//! What this relies on in git (checked with git 2.39 and 2.47, each override
//! against a planted command that touches a marker file; `--show-scope` needs git
//! 2.26 and the `GIT_CONFIG_COUNT` pairs 2.31):
//!
//! - Config is read system, global, local, worktree, then the command scope:
//!   `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>` in index order,
//!   then `-c`. For a single-valued key the last value read wins, so a
//!   command-scope value beats the repository's config and its includes. The
//!   overrides go in `GIT_CONFIG_KEY_<n>`/`_VALUE_<n>` pairs, not `-c key=value`:
//!   `-c` splits at the first `=`, so a driver named `x.clean=cmd` would turn
//!   `-c filter.<name>.clean=` into a definition; a key variable is never split.
//! - `core.fsmonitor=false`: no fsmonitor hook. `core.hooksPath=/dev/null`: no
//!   hook is found (`post-index-change`, `post-checkout`, `reference-transaction`).
//! - An empty `filter.<d>.clean`, `.smudge` or `.process` is no filter (convert.c
//!   runs a driver only `if (cmd && *cmd)`; a set `process`, even empty, also
//!   turns the driver's `clean` and `smudge` off), and `required=false` makes its
//!   absence no error.
//! - An empty `diff.external`, `diff.<d>.command`, `diff.<d>.textconv` or
//!   `merge.<d>.driver` makes git try the empty command line, which cannot start
//!   ("cannot run : No such file or directory"): nothing runs (2.47's merge falls
//!   back to its own). Only diff and merge porcelain reads them; the provider runs
//!   none.
//! - `credential.helper` is a list an empty value clears; helpers under a URL
//!   subsection are applied in the order read (no "most specific wins"), so the
//!   one empty value after the repository's config clears those too. A credential
//!   the provider adds
//!   ([`Git::with_credential`](crate::git::Git::with_credential)) is the last
//!   pair.
//! - `core.askPass=` (empty) is no askpass (`askpass && *askpass`);
//!   `GIT_ASKPASS`/`SSH_ASKPASS` are removed and `GIT_TERMINAL_PROMPT=0`.
//! - `core.pager=cat`, `pager.<cmd>=false` and `--no-pager`: no pager (and stdout
//!   is a pipe). `core.editor=:` and `sequence.editor=:` with `GIT_EDITOR`,
//!   `GIT_SEQUENCE_EDITOR` removed.
//! - `core.sshCommand` is read only when `GIT_SSH_COMMAND` is unset, and
//!   `core.gitProxy` only when `GIT_PROXY_COMMAND` is unset (an empty one is no
//!   proxy): both variables are always set.
//! - `protocol.allow=never` with `protocol.<p>.allow=always` for
//!   [`ALLOWED_PROTOCOLS`] (and `GIT_ALLOW_PROTOCOL`, which git prefers).
//! - `submodule.recurse=false`, `fetch.recurseSubmodules=false`,
//!   `status.submoduleSummary=false`, and the sweep's `status
//!   --ignore-submodules=all`: git is never started in a submodule (whose config
//!   is not listed); an untracked nested repository is listed as a directory
//!   without git entering it.
//! - With `--git-dir` and `--work-tree` git discovers nothing: no `.git` file is
//!   followed and `core.worktree` is overridden.
//!
//! The listing and the command are two processes: a run still going could change
//! its config between them. Only a fresh clone's config is the run's (a worktree's
//! is the cache's, which no sandboxed run can write), and the provider runs git in
//! a workspace when no run of its owner is going (the sweep: closed Works; acquire
//! and lookup: before a run starts).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// The protocols git may use (`GIT_ALLOW_PROTOCOL` and `protocol.<name>.allow`):
/// never `ext::` or `fd::`.
pub const ALLOWED_PROTOCOLS: &str = "file:git:http:https:ssh";

/// The config every git command gets in its command scope, in this order (then
/// `protocol.<p>.allow=always` for each of [`ALLOWED_PROTOCOLS`], then the blanked
/// drivers of the repository, then a credential's helper).
pub const NEUTRAL: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.attributesFile", "/dev/null"),
    ("diff.external", ""),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("status.submoduleSummary", "false"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
];

/// Variables removed from every git's environment: they would point git at another
/// repository, config or attributes, or name a program for it to run.
pub const SCRUBBED: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_SYSTEM",
    "GIT_ATTR_SOURCE",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_TEST_FSMONITOR",
];

/// The bound on listing a workspace's config (shorter than a command's: it reads a
/// few files, unless an include names a FIFO the run made, which must not hold the
/// sweep for a command's whole bound).
pub const LISTING_BOUND: Duration = Duration::from_secs(30);

/// The most drivers (filter, diff, merge, credential and pager subsections) the
/// config of one repository may name: each is blanked on every command.
pub const MAX_DRIVERS: usize = 256;
/// The most bytes those drivers' names may take together.
pub const MAX_DRIVER_BYTES: usize = 64 * 1024;

/// The command listing a workspace's config before each command there: it reads
/// the files git would, includes too, and runs nothing (`blank_drivers` reads
/// its answer).
pub const LISTING: &[&str] = &[
    "config",
    "--list",
    "--name-only",
    "--includes",
    "--show-scope",
    "-z",
];

/// Which repository a git command is for. It is always named (`--git-dir`, and
/// `--work-tree` for a checkout), never discovered from a directory a run can
/// write: the constructors are the only ways to make one.
#[derive(Debug, Clone)]
pub struct Repo(Place);

#[derive(Debug, Clone)]
enum Place {
    None,
    Bare(PathBuf),
    Checkout {
        git_dir: PathBuf,
        work_tree: PathBuf,
    },
}

impl Repo {
    /// No repository (`init`, `ls-remote`): git runs in the provider's directory.
    pub fn none() -> Repo {
        Repo(Place::None)
    }

    /// A bare repository the provider made, at `dir` (a cache).
    pub fn bare(dir: &Path) -> Repo {
        Repo(Place::Bare(dir.to_path_buf()))
    }

    /// The worktree of `cache` at `dir` (a `work` or `shared` workspace, a spare):
    /// its gitdir is the cache's entry `worktrees/<name>` whose `gitdir` file names
    /// `<dir>/.git`. The workspace's own `.git` file is never read; without such an
    /// entry this refuses, saying why.
    pub fn worktree(cache: &Path, dir: &Path) -> Result<Repo, String> {
        let mut wanted = vec![normal(&dir.join(".git"))];
        if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) {
            if let Ok(real) = std::fs::canonicalize(parent) {
                wanted.push(real.join(name).join(".git"));
            }
        }
        let mut admins: Vec<PathBuf> = std::fs::read_dir(cache.join("worktrees"))
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        admins.sort();
        for admin in admins {
            let Ok(text) = std::fs::read(admin.join("gitdir")) else {
                continue;
            };
            let named = OsStr::from_bytes(text.strip_suffix(b"\n").unwrap_or(&text));
            let named = normal(&admin.join(named));
            if wanted.contains(&named) && admin.join("HEAD").is_file() {
                return Ok(Repo(Place::Checkout {
                    git_dir: admin,
                    work_tree: dir.to_path_buf(),
                }));
            }
        }
        Err(format!(
            "the cache {} has no worktree entry for {} (pruned, or never made); its `.git` file is not followed",
            cache.display(),
            dir.display()
        ))
    }

    /// The clone at `dir` (a `fresh` workspace): its gitdir is `<dir>/.git` when that
    /// is a directory, never a symlink or a `gitdir:` file, which this refuses.
    pub fn fresh(dir: &Path) -> Result<Repo, String> {
        let git_dir = dir.join(".git");
        match std::fs::symlink_metadata(&git_dir) {
            Ok(m) if m.file_type().is_dir() => Ok(Repo(Place::Checkout {
                git_dir,
                work_tree: dir.to_path_buf(),
            })),
            Ok(_) => Err(format!(
                "{} is not a directory (a symlink or a file): it is not followed",
                git_dir.display()
            )),
            Err(e) => Err(format!("{}: {e}", git_dir.display())),
        }
    }

    /// The options naming the repository, and where git runs.
    pub(crate) fn options(&self) -> (Vec<OsString>, Option<&Path>) {
        let opt = |name: &str, p: &Path| {
            let mut o = OsString::from(name);
            o.push(p.as_os_str());
            o
        };
        match &self.0 {
            Place::None => (Vec::new(), None),
            Place::Bare(dir) => (vec![opt("--git-dir=", dir)], Some(dir)),
            Place::Checkout { git_dir, work_tree } => (
                vec![opt("--git-dir=", git_dir), opt("--work-tree=", work_tree)],
                Some(work_tree),
            ),
        }
    }

    /// Whether it is a workspace (a checkout a run writes), whose config is listed
    /// before each command. A cache's is the provider's own: no sandboxed run can
    /// write it (a run's write set is its workspace and its run folder).
    pub(crate) fn is_workspace(&self) -> bool {
        matches!(self.0, Place::Checkout { .. })
    }

    pub(crate) fn describe(&self) -> String {
        match &self.0 {
            Place::None => "no repository".into(),
            Place::Bare(d) => d.display().to_string(),
            Place::Checkout { git_dir, .. } => git_dir.display().to_string(),
        }
    }
}

/// `p` with `.` and `..` resolved lexically (a `gitdir` file may hold a relative path).
fn normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The command-scope config of every git command before its repository's drivers.
pub(crate) fn neutral() -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = NEUTRAL
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    for p in ALLOWED_PROTOCOLS.split(':') {
        out.push((format!("protocol.{p}.allow").into(), "always".into()));
    }
    out
}

/// The overrides blanking every driver named in `listed`, what `git config --list
/// --name-only --show-scope -z` answers: NUL-terminated scope and name pairs, the name
/// with section and key lower-cased and the subsection as written (it may hold dots
/// and any byte but newline and NUL). Names of the command scope (the provider's own,
/// or an operator's `git -c` wrapper) are left alone; every other (the repository's
/// config, the worktree's, what they include) is the run's to write.
pub(crate) fn blank_drivers(
    listed: &[u8],
    place: &str,
) -> Result<Vec<(OsString, OsString)>, String> {
    let mut named: BTreeSet<(&'static str, Vec<u8>)> = BTreeSet::new();
    let mut fields = listed.split(|b| *b == 0);
    while let (Some(scope), Some(name)) = (fields.next(), fields.next()) {
        if scope == b"command" || name.is_empty() {
            continue;
        }
        let (Some(first), Some(last)) = (
            name.iter().position(|b| *b == b'.'),
            name.iter().rposition(|b| *b == b'.'),
        ) else {
            continue;
        };
        let section = name[..first].to_ascii_lowercase();
        if first == last {
            if section == b"pager" {
                named.insert(("pager", name[first + 1..].to_vec()));
            }
            continue;
        }
        let sub = name[first + 1..last].to_vec();
        let kind = match section.as_slice() {
            b"filter" => "filter",
            b"diff" => "diff",
            b"merge" => "merge",
            b"credential" => "credential",
            _ => continue,
        };
        named.insert((kind, sub));
    }
    let bytes: usize = named.iter().map(|(_, s)| s.len()).sum();
    if named.len() > MAX_DRIVERS || bytes > MAX_DRIVER_BYTES {
        return Err(format!(
            "the config of {place} names {} filter, diff, merge, credential or pager drivers ({bytes} bytes of names), over the most the provider blanks ({MAX_DRIVERS}, {MAX_DRIVER_BYTES} bytes): git was not run there",
            named.len()
        ));
    }
    let key = |section: &str, sub: &[u8], key: &str| {
        let mut k = Vec::with_capacity(sub.len() + 32);
        k.extend_from_slice(section.as_bytes());
        k.push(b'.');
        k.extend_from_slice(sub);
        k.push(b'.');
        k.extend_from_slice(key.as_bytes());
        OsString::from_vec(k)
    };
    let mut out = Vec::new();
    for (kind, sub) in &named {
        let blanks: &[(&str, &str)] = match *kind {
            "filter" => &[
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ],
            "diff" => &[("textconv", ""), ("command", "")],
            "merge" => &[("driver", "")],
            "credential" => &[("helper", "")],
            _ => {
                let mut k = b"pager.".to_vec();
                k.extend_from_slice(sub);
                out.push((OsString::from_vec(k), OsString::from("false")));
                continue;
            }
        };
        for (k, v) in blanks {
            out.push((key(kind, sub, k), OsString::from(v)));
        }
    }
    Ok(out)
}

/// Gives `cmd` the neutral environment: `env` (the acquisition's `host_env`), then
/// [`SCRUBBED`] removed, nothing outside the repository read, no prompt, the
/// [`ALLOWED_PROTOCOLS`], the command-scope `pairs` in index order, and
/// `GIT_SSH_COMMAND`/`GIT_PROXY_COMMAND` always set.
pub(crate) fn environment(
    cmd: &mut Command,
    env: &BTreeMap<String, String>,
    pairs: &[(OsString, OsString)],
) {
    cmd.envs(env);
    for name in SCRUBBED {
        cmd.env_remove(name);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", ALLOWED_PROTOCOLS)
        .env("GCM_INTERACTIVE", "never")
        .env("GIT_CONFIG_COUNT", pairs.len().to_string());
    for (i, (k, v)) in pairs.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    for (name, default) in [
        ("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
        ("GIT_PROXY_COMMAND", ""),
    ] {
        if !env.contains_key(name) && std::env::var_os(name).is_none() {
            cmd.env(name, default);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(OsString, OsString)]) -> Vec<(Vec<u8>, String)> {
        v.iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.to_string_lossy().into_owned()))
            .collect()
    }

    #[test]
    fn every_driver_the_repository_names_is_blanked_and_never_redefined() {
        // A subsection with dots, one holding `=` (which `-c` would split into a
        // definition), one that is not UTF-8, a URL, a pager; the command scope's own
        // names and other sections are left alone.
        let mut listed = Vec::new();
        for (scope, name) in [
            (&b"local"[..], &b"filter.a.b.clean"[..]),
            (b"local", b"filter.x.clean=touch /tmp/p;.smudge"),
            (b"worktree", b"diff.\xff\xfe.textconv"),
            (b"local", b"merge.m.driver"),
            (b"local", b"credential.https://h.example.helper"),
            (b"local", b"pager.status"),
            (b"local", b"core.fsmonitor"),
            (b"local", b"remote.origin.url"),
            (b"command", b"filter.ours.smudge"),
        ] {
            listed.extend_from_slice(scope);
            listed.push(0);
            listed.extend_from_slice(name);
            listed.push(0);
        }
        let got = pairs(&blank_drivers(&listed, "r").unwrap());
        let has = |k: &[u8], v: &str| got.iter().any(|(gk, gv)| gk == k && gv == v);
        for k in ["clean", "smudge", "process"] {
            assert!(has(format!("filter.a.b.{k}").as_bytes(), ""), "{got:?}");
        }
        assert!(has(b"filter.a.b.required", "false"));
        assert!(has(b"filter.x.clean=touch /tmp/p;.clean", ""));
        assert!(has(b"diff.\xff\xfe.textconv", ""));
        assert!(has(b"diff.\xff\xfe.command", ""));
        assert!(has(b"merge.m.driver", ""));
        assert!(has(b"credential.https://h.example.helper", ""));
        assert!(has(b"pager.status", "false"));
        assert!(!got.iter().any(|(k, _)| k.starts_with(b"filter.ours")));
        assert!(!got.iter().any(|(k, _)| k.starts_with(b"remote.")));
        // Every value is a blank (or false): no override defines anything.
        assert!(got.iter().all(|(_, v)| v.is_empty() || v == "false"));
        assert_eq!(got.len(), 4 + 4 + 2 + 1 + 1 + 1);

        let mut many = Vec::new();
        for i in 0..=MAX_DRIVERS {
            many.extend_from_slice(format!("local\0filter.f{i}.clean\0").as_bytes());
        }
        let e = blank_drivers(&many, "/r/.git").unwrap_err();
        assert!(
            e.contains("/r/.git") && e.contains(&MAX_DRIVERS.to_string()),
            "{e}"
        );
    }

    #[test]
    fn the_static_overrides_match_the_allowed_protocols() {
        let all = neutral();
        let get = |k: &str| {
            all.iter()
                .rev()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("protocol.allow").as_deref(), Some("never"));
        for p in ALLOWED_PROTOCOLS.split(':') {
            assert_eq!(
                get(&format!("protocol.{p}.allow")).as_deref(),
                Some("always")
            );
        }
        assert_eq!(get("protocol.ext.allow"), None);
        assert_eq!(get("core.fsmonitor").as_deref(), Some("false"));
        assert_eq!(get("credential.helper").as_deref(), Some(""));
    }
}
