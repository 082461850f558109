//! The agents' plugin: every package's playbooks as one Claude Code plugin.
//!
//! A package ships playbooks in the directory its manifest's `playbooks` names, one
//! skill per subdirectory (`<skill>/SKILL.md`, and any files beside it). At start,
//! extrunner writes them all into one plugin named [`PLUGIN_NAME`] at
//! `<state>/playbooks/plugin` ([`plugin_dir`]): `.claude-plugin/plugin.json` and
//! `skills/<skill>/…`, copied. Runs are given that directory as their
//! `RunRequest.playbook_dir` (through `ext.registrations`), which the claude-code
//! executor passes as `--plugin-dir`, so a binding's `playbook` starts its turns on
//! `/open-conduit:<playbook>`.
//!
//! Bounded, and only what is meant to be there: at most [`MAX_SKILLS`] skills, each
//! named `[a-z0-9-]` (at most 64 bytes) with a regular `SKILL.md`, at most
//! [`MAX_SKILL_FILES`] files of at most [`MAX_FILE_BYTES`] each, [`MAX_DEPTH`] folders
//! deep, [`MAX_PLUGIN_BYTES`] in all; only regular files and folders are copied (a
//! link is skipped). A skill that breaks a bound, or that two packages ship, is left
//! out with a log line saying why; the rest are written. The directory is replaced
//! atomically (written beside it, then exchanged). Its folders and files are made
//! with extrunner's umask (0755 and 0644 under 0022; the unit's 0027 keeps them to
//! its group, `up`'s 0077 to its user): the agents run as extrunner's user, a
//! sandboxed one too, so they read it whatever the umask; no file is executable.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::discovery::Package;

/// The plugin's name: skills are `/open-conduit:<skill>`.
pub const PLUGIN_NAME: &str = "open-conduit";
/// The most skills the plugin holds.
pub const MAX_SKILLS: usize = 64;
/// The largest file a skill may ship.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// The most files one skill may ship.
pub const MAX_SKILL_FILES: usize = 64;
/// How many folders deep a skill's files may be (`SKILL.md` is at depth 0).
pub const MAX_DEPTH: usize = 4;
/// The most bytes the whole plugin's files may take.
pub const MAX_PLUGIN_BYTES: u64 = 16 * 1024 * 1024;
/// The longest skill name.
pub const MAX_NAME_BYTES: usize = 64;

/// Where the plugin is written under the state directory.
pub fn plugin_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("playbooks").join("plugin")
}

/// A skill left out of the plugin, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The package (or packages, joined with `, `) shipping it.
    pub package: String,
    /// The skill (its directory's name, lossily).
    pub skill: String,
    /// Why, for the operator.
    pub why: String,
}

/// What [`write_plugin`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// The plugin directory.
    pub dir: PathBuf,
    /// The skills in it, by name, with the package shipping each.
    pub skills: Vec<(String, String)>,
    /// The skills left out.
    pub left_out: Vec<LeftOut>,
}

/// One skill read from a package, ready to write.
struct Skill {
    name: String,
    package: String,
    /// (path relative to the skill's directory, content).
    files: Vec<(PathBuf, Vec<u8>)>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The regular files under `dir` (recursively), relative to `root`, within the bounds.
fn read_files(
    root: &Path,
    dir: &Path,
    depth: usize,
    out: &mut Vec<(PathBuf, Vec<u8>)>,
    skipped: &mut Vec<String>,
) -> Result<(), String> {
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let meta = fs::symlink_metadata(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        if meta.is_dir() {
            if depth + 1 > MAX_DEPTH {
                return Err(format!(
                    "{} is more than {MAX_DEPTH} folders deep",
                    rel.display()
                ));
            }
            read_files(root, &path, depth + 1, out, skipped)?;
        } else if meta.is_file() {
            if meta.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "{} is {} bytes, over the limit of {MAX_FILE_BYTES} bytes a file",
                    rel.display(),
                    meta.len()
                ));
            }
            if out.len() >= MAX_SKILL_FILES {
                return Err(format!(
                    "it has more than {MAX_SKILL_FILES} files, the limit a skill"
                ));
            }
            let bytes =
                fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if bytes.len() as u64 > MAX_FILE_BYTES {
                return Err(format!(
                    "{} grew over the limit of {MAX_FILE_BYTES} bytes a file",
                    rel.display()
                ));
            }
            out.push((rel, bytes));
        } else {
            // A link (or a socket, a device): never followed, never copied.
            skipped.push(rel.display().to_string());
        }
    }
    Ok(())
}

/// The skills one package ships, and the ones it ships that are left out.
fn package_skills(package: &Package, left_out: &mut Vec<LeftOut>) -> Vec<Skill> {
    let Some(sub) = package.manifest.playbooks.as_deref() else {
        return Vec::new();
    };
    let root = package.dir.join(sub);
    let entries = match fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(OC_EXTENSION = %package.name, dir = %root.display(), error = %e,
                "the package declares playbooks in {sub:?}, which cannot be read: it adds no playbook to the agents' plugin");
            return Vec::new();
        }
    };
    let mut dirs: Vec<fs::DirEntry> = entries.filter_map(Result::ok).collect();
    dirs.sort_by_key(fs::DirEntry::file_name);
    let mut out = Vec::new();
    for entry in dirs {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let mut leave = |why: String| {
            left_out.push(LeftOut {
                package: package.name.clone(),
                skill: name.clone(),
                why,
            })
        };
        if !meta.is_dir() {
            leave(format!(
                "{} is not a folder (a skill is a folder with a SKILL.md; links are not followed)",
                path.display()
            ));
            continue;
        }
        if !valid_name(&name) {
            leave(format!(
                "its name is not 1 to {MAX_NAME_BYTES} of a-z, 0-9 and -"
            ));
            continue;
        }
        let skill_md = fs::symlink_metadata(path.join("SKILL.md"));
        if !skill_md.is_ok_and(|m| m.is_file()) {
            leave("it has no SKILL.md (a regular file)".into());
            continue;
        }
        let mut files = Vec::new();
        let mut skipped = Vec::new();
        match read_files(&path, &path, 0, &mut files, &mut skipped) {
            Ok(()) => {
                if !skipped.is_empty() {
                    tracing::warn!(OC_EXTENSION = %package.name, skill = %name, skipped = %skipped.join(", "),
                        "playbook files that are not regular files are not copied into the agents' plugin");
                }
                out.push(Skill {
                    name,
                    package: package.name.clone(),
                    files,
                });
            }
            Err(why) => leave(why),
        }
    }
    out
}

/// The skills every package ships, with those left out: a name two packages ship
/// (neither is kept), past [`MAX_SKILLS`] or [`MAX_PLUGIN_BYTES`].
fn gather(packages: &[Package]) -> (Vec<Skill>, Vec<LeftOut>) {
    let mut left_out = Vec::new();
    let mut all: Vec<Skill> = Vec::new();
    for p in packages {
        all.extend(package_skills(p, &mut left_out));
    }
    let mut kept: Vec<Skill> = Vec::new();
    let mut names: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for s in &all {
        names
            .entry(s.name.clone())
            .or_default()
            .push(s.package.clone());
    }
    let mut total: u64 = 0;
    for s in all {
        let shippers = names.get(&s.name).cloned().unwrap_or_default();
        if shippers.len() > 1 {
            if shippers.first() == Some(&s.package) {
                left_out.push(LeftOut {
                    package: shippers.join(", "),
                    skill: s.name.clone(),
                    why: format!(
                        "the packages {} each ship a playbook named {:?}: neither is in the agents' plugin (remove or rename one)",
                        shippers.join(" and "),
                        s.name
                    ),
                });
            }
            continue;
        }
        if kept.len() >= MAX_SKILLS {
            left_out.push(LeftOut {
                package: s.package.clone(),
                skill: s.name.clone(),
                why: format!("the agents' plugin already holds {MAX_SKILLS} skills, the limit"),
            });
            continue;
        }
        let size: u64 = s.files.iter().map(|(_, b)| b.len() as u64).sum();
        if total + size > MAX_PLUGIN_BYTES {
            left_out.push(LeftOut {
                package: s.package.clone(),
                skill: s.name.clone(),
                why: format!(
                    "its {size} bytes would take the agents' plugin over its limit of {MAX_PLUGIN_BYTES} bytes"
                ),
            });
            continue;
        }
        total += size;
        kept.push(s);
    }
    (kept, left_out)
}

fn mkdir(d: &Path) -> io::Result<()> {
    match fs::create_dir(d) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    fs::write(path, bytes)
}

/// Write the plugin's tree under `tmp` (which must not exist).
fn write_tree(tmp: &Path, skills: &[Skill], description: &str) -> io::Result<()> {
    mkdir(tmp)?;
    mkdir(&tmp.join(".claude-plugin"))?;
    let manifest = serde_json::json!({
        "name": PLUGIN_NAME,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let text = serde_json::to_vec_pretty(&manifest).map_err(io::Error::other)?;
    write_file(&tmp.join(".claude-plugin").join("plugin.json"), &text)?;
    let skills_dir = tmp.join("skills");
    mkdir(&skills_dir)?;
    for s in skills {
        let dir = skills_dir.join(&s.name);
        mkdir(&dir)?;
        for (rel, bytes) in &s.files {
            let path = dir.join(rel);
            // The folders between, each made with its mode.
            let mut made = Vec::new();
            let mut parent = path.parent();
            while let Some(p) = parent.filter(|p| *p != dir) {
                made.push(p.to_path_buf());
                parent = p.parent();
            }
            for d in made.iter().rev() {
                mkdir(d)?;
            }
            write_file(&path, bytes)?;
        }
    }
    Ok(())
}

/// Put `new` in place of `dir`, atomically when `dir` exists (the two are exchanged,
/// then the old tree removed), and remove what remains beside it.
fn replace(new: &Path, dir: &Path) -> io::Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        return fs::rename(new, dir);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        if renameat2(AT_FDCWD, new, AT_FDCWD, dir, RenameFlags::RENAME_EXCHANGE).is_ok() {
            // `new` now holds the old tree.
            return fs::remove_dir_all(new);
        }
    }
    // No exchange here: move the old one aside, then the new one in.
    let aside = new.with_extension("old");
    fs::rename(dir, &aside)?;
    fs::rename(new, dir)?;
    fs::remove_dir_all(&aside)
}

/// Write the agents' plugin from every package's playbooks under `state_dir`
/// ([`plugin_dir`]), replacing the one an earlier start wrote. Every skill left out
/// is logged with why. An error means no plugin could be written (the old one, if
/// any, is left as it was).
pub fn write_plugin(state_dir: &Path, packages: &[Package]) -> Result<Written, String> {
    let dir = plugin_dir(state_dir);
    let parent = dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| state_dir.to_path_buf());
    fs::create_dir_all(&parent).map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
    // What an interrupted earlier write left.
    if let Ok(entries) = fs::read_dir(&parent) {
        for e in entries.filter_map(Result::ok) {
            if e.file_name().to_string_lossy().starts_with(".plugin-") {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let (skills, left_out) = gather(packages);
    for l in &left_out {
        tracing::warn!(OC_EXTENSION = %l.package, skill = %l.skill, why = %l.why,
            "a playbook is left out of the agents' plugin: {}", l.why);
    }
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    let description = if names.is_empty() {
        "Open Conduit's playbooks (no extension ships one)".to_owned()
    } else {
        format!("Open Conduit's playbooks: {}", names.join(", "))
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let tmp = parent.join(format!(".plugin-{}-{nanos}", std::process::id()));
    let result = write_tree(&tmp, &skills, &description).and_then(|()| replace(&tmp, &dir));
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(format!(
            "cannot write the agents' plugin at {}: {e}",
            dir.display()
        ));
    }
    tracing::info!(dir = %dir.display(), skills = %names.join(", "), "the agents' plugin is written from the extensions' playbooks");
    Ok(Written {
        dir,
        skills: skills
            .iter()
            .map(|s| (s.name.clone(), s.package.clone()))
            .collect(),
        left_out,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::discovery::Origin;

    struct Tmp(PathBuf);
    impl Tmp {
        fn new(name: &str) -> Tmp {
            let d = std::env::temp_dir().join(format!(
                "oc-playbooks-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            Tmp(d)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A package `name` under `root` whose manifest declares `playbooks` (when given).
    fn package(root: &Path, name: &str, playbooks: Option<&str>) -> Package {
        let dir = root.join("pkgs").join(name);
        fs::create_dir_all(&dir).unwrap();
        let mut v = serde_json::json!({
            "protocol": [1], "name": name, "version": "0.1.0", "command": ["x"], "provides": {},
        });
        if let Some(p) = playbooks {
            v["playbooks"] = serde_json::json!(p);
        }
        let manifest = protocol::manifest::parse_manifest(v.to_string().as_bytes()).unwrap();
        Package {
            name: name.into(),
            dir,
            origin: Origin::Bundled,
            manifest,
            manifest_json: v,
        }
    }

    /// The package `github` [`package`] made under `root` again (its files kept).
    fn gh_again(root: &Path) -> Package {
        package(root, "github", Some("playbooks"))
    }

    fn skill(p: &Package, sub: &str, name: &str, text: &str) {
        let d = p.dir.join(sub).join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("SKILL.md"), text).unwrap();
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn every_packages_skills_become_one_plugin_readable_by_all() {
        let t = Tmp::new("all");
        let gh = package(&t.0, "github", Some("playbooks"));
        skill(
            &gh,
            "playbooks",
            "github-issue",
            "---\nname: github-issue\n---\nwork it",
        );
        fs::create_dir_all(gh.dir.join("playbooks/github-issue/references")).unwrap();
        fs::write(
            gh.dir.join("playbooks/github-issue/references/api.md"),
            "ref",
        )
        .unwrap();
        let other = package(&t.0, "tracker", Some("share/playbooks"));
        skill(
            &other,
            "share/playbooks",
            "triage",
            "---\nname: triage\n---\n",
        );
        let none = package(&t.0, "plain", None);
        let state = t.0.join("state");
        let w = write_plugin(&state, &[gh, other, none]).unwrap();
        assert_eq!(w.dir, state.join("playbooks/plugin"));
        assert_eq!(
            w.skills,
            vec![
                ("github-issue".into(), "github".into()),
                ("triage".into(), "tracker".into())
            ]
        );
        assert!(w.left_out.is_empty(), "{:?}", w.left_out);
        let manifest: serde_json::Value =
            serde_json::from_slice(&fs::read(w.dir.join(".claude-plugin/plugin.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["name"], "open-conduit");
        assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
        assert!(manifest["description"]
            .as_str()
            .unwrap()
            .contains("github-issue, triage"));
        assert_eq!(
            fs::read_to_string(w.dir.join("skills/github-issue/SKILL.md")).unwrap(),
            "---\nname: github-issue\n---\nwork it"
        );
        assert_eq!(
            fs::read_to_string(w.dir.join("skills/github-issue/references/api.md")).unwrap(),
            "ref"
        );
        assert!(w.dir.join("skills/triage/SKILL.md").is_file());
        // Made as anything this process makes (its umask), whatever the source's mode.
        use std::os::unix::fs::PermissionsExt;
        let source =
            t.0.join("pkgs/github/playbooks/github-issue/references/api.md");
        fs::set_permissions(&source, fs::Permissions::from_mode(0o700)).unwrap();
        write_plugin(&state, &[gh_again(&t.0)]).unwrap();
        let (dir, file) = (t.0.join("made"), t.0.join("made.txt"));
        fs::create_dir(&dir).unwrap();
        fs::write(&file, "x").unwrap();
        for d in [
            w.dir.clone(),
            w.dir.join(".claude-plugin"),
            w.dir.join("skills/github-issue/references"),
        ] {
            assert_eq!(mode(&d), mode(&dir), "{}", d.display());
        }
        for f in [
            w.dir.join(".claude-plugin/plugin.json"),
            w.dir.join("skills/github-issue/references/api.md"),
        ] {
            assert_eq!(mode(&f), mode(&file), "{}", f.display());
        }
    }

    #[test]
    fn a_skill_two_packages_ship_is_left_out_saying_so_and_the_rest_are_kept() {
        let t = Tmp::new("dup");
        let a = package(&t.0, "alpha", Some("playbooks"));
        let b = package(&t.0, "beta", Some("playbooks"));
        skill(&a, "playbooks", "fix", "a");
        skill(&b, "playbooks", "fix", "b");
        skill(&b, "playbooks", "review", "r");
        let w = write_plugin(&t.0.join("state"), &[a, b]).unwrap();
        assert_eq!(w.skills, vec![("review".into(), "beta".into())]);
        assert_eq!(w.left_out.len(), 1, "{:?}", w.left_out);
        assert_eq!(w.left_out[0].skill, "fix");
        assert!(
            w.left_out[0].why.contains("alpha and beta") && w.left_out[0].why.contains("\"fix\""),
            "{}",
            w.left_out[0].why
        );
        assert!(!w.dir.join("skills/fix").exists());
    }

    #[test]
    fn bad_names_links_missing_skill_files_and_big_files_are_refused() {
        let t = Tmp::new("bad");
        let p = package(&t.0, "pkg", Some("playbooks"));
        skill(&p, "playbooks", "Bad_Name", "x");
        skill(&p, "playbooks", "ok", "fine");
        fs::create_dir_all(p.dir.join("playbooks/empty")).unwrap();
        skill(&p, "playbooks", "huge", "x");
        fs::write(
            p.dir.join("playbooks/huge/big.md"),
            vec![b'x'; MAX_FILE_BYTES as usize + 1],
        )
        .unwrap();
        // A link to a secret beside a real skill is not copied; a linked skill is refused.
        let secret = t.0.join("secret");
        fs::write(&secret, "token").unwrap();
        std::os::unix::fs::symlink(&secret, p.dir.join("playbooks/ok/leak.md")).unwrap();
        let linked = t.0.join("linked");
        fs::create_dir_all(&linked).unwrap();
        fs::write(linked.join("SKILL.md"), "x").unwrap();
        std::os::unix::fs::symlink(&linked, p.dir.join("playbooks/via-link")).unwrap();
        let w = write_plugin(&t.0.join("state"), &[p]).unwrap();
        assert_eq!(w.skills, vec![("ok".into(), "pkg".into())]);
        let why = |s: &str| {
            w.left_out
                .iter()
                .find(|l| l.skill == s)
                .map(|l| l.why.clone())
                .unwrap_or_default()
        };
        assert!(
            why("Bad_Name").contains("a-z, 0-9 and -"),
            "{:?}",
            w.left_out
        );
        assert!(why("empty").contains("no SKILL.md"), "{:?}", w.left_out);
        assert!(why("huge").contains("262144"), "{:?}", w.left_out);
        assert!(why("via-link").contains("not a folder"), "{:?}", w.left_out);
        assert!(w.dir.join("skills/ok/SKILL.md").is_file());
        assert!(fs::symlink_metadata(w.dir.join("skills/ok/leak.md")).is_err());
    }

    #[test]
    fn at_most_max_skills_are_written() {
        let t = Tmp::new("many");
        let p = package(&t.0, "pkg", Some("playbooks"));
        for i in 0..MAX_SKILLS + 2 {
            skill(&p, "playbooks", &format!("s{i:03}"), "x");
        }
        let w = write_plugin(&t.0.join("state"), &[p]).unwrap();
        assert_eq!(w.skills.len(), MAX_SKILLS);
        assert_eq!(w.left_out.len(), 2);
        assert!(w.left_out[0].why.contains("64 skills"), "{:?}", w.left_out);
        assert!(!w.dir.join("skills/s065").exists());
    }

    #[test]
    fn a_new_start_replaces_the_plugin_whole() {
        let t = Tmp::new("replace");
        let state = t.0.join("state");
        let p = package(&t.0, "pkg", Some("playbooks"));
        skill(&p, "playbooks", "old", "x");
        write_plugin(&state, std::slice::from_ref(&p)).unwrap();
        fs::remove_dir_all(p.dir.join("playbooks/old")).unwrap();
        skill(&p, "playbooks", "new", "y");
        // What an interrupted write left beside it goes too.
        fs::create_dir_all(state.join("playbooks/.plugin-1-2")).unwrap();
        let w = write_plugin(&state, &[p]).unwrap();
        assert!(w.dir.join("skills/new/SKILL.md").is_file());
        assert!(!w.dir.join("skills/old").exists());
        let left: Vec<String> = fs::read_dir(state.join("playbooks"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["plugin".to_string()]);
    }

    #[test]
    fn a_declared_directory_that_is_missing_adds_nothing() {
        let t = Tmp::new("missing");
        let p = package(&t.0, "pkg", Some("playbooks"));
        let w = write_plugin(&t.0.join("state"), &[p]).unwrap();
        assert!(w.skills.is_empty());
        assert!(w.dir.join(".claude-plugin/plugin.json").is_file());
        assert!(w.dir.join("skills").is_dir());
    }
}
