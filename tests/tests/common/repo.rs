//! Real git repositories for the workspace tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether git is here; says why a test skips when it is not.
pub fn have_git() -> bool {
    let ok = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("OC_REQUIRE_PEERS").is_none(),
            "git is not installed, and OC_REQUIRE_PEERS is set (.ci/run installs Debian's git)"
        );
        eprintln!("SKIPPED: git is not installed (Debian's git package; .ci/run installs it)");
    }
    ok
}

/// Run git in `dir` (with a committer identity); its trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=seed",
            "-c",
            "user.email=seed@example.invalid",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A bare repository `<root>/origin.git` with a `main` branch of two files.
pub fn make_repo(root: &Path) -> PathBuf {
    let bare = root.join("origin.git");
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    git(root, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README.md"), "# the project\n").unwrap();
    std::fs::create_dir_all(seed.join("src")).unwrap();
    std::fs::write(seed.join("src/app.txt"), "app\n").unwrap();
    git(&seed, &["add", "."]);
    git(&seed, &["commit", "-q", "-m", "seed"]);
    git(
        &seed,
        &["push", "-q", bare.to_str().unwrap(), "main:refs/heads/main"],
    );
    bare
}
