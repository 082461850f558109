#![allow(clippy::unwrap_used)]
//! A `git` resource on a GitHub App connection, with the real daemons and only the
//! documented configuration (issue 38): the connection (type `github`, `app_id`,
//! `installation_id`, `api_url`, `git_url`, secret `private_key`, no `token`) is the
//! resource's `connection`, and nothing else. The workspace provider signs the App's
//! JWT with a key `openssl genrsa` made and mints a read-only installation token for
//! the one repository at a stand-in GitHub (Prism over GitHub's OpenAPI description
//! validates the request; the stand-in checks the JWT's RS256 signature with
//! `openssl dgst -verify`). The origin is the real `git http-backend` behind
//! `x-access-token:<token>` basic auth ([`GitHttp`]), which takes the minted token for
//! that repository only.
//!
//! A Work's workspace is fetched with it (the shell run prints `git log -1` of the
//! origin's commit), doctor's `git_repositories` is ok, and neither the token nor the
//! key is in any file under the state directory or in any log.
//!
//! Without node, Prism's packages or openssl it prints SKIPPED (a failure under
//! OC_REQUIRE_PEERS=1).

mod common;
use common::*;

use oc_systest::githttp::GitHttp;
use oc_systest::github::{
    prism_or_skip, required, Reply as GhReply, Request as GhRequest, StandIn,
};
use oc_systest::{Suite, HANG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const REPO: &str = "octo/hello";
const APP_ID: &str = "424242";
const INSTALLATION: u64 = 678;
const TOKEN_PREFIX: &str = "ghs_gitAppMintedForOneRepo";
/// The shell run's command: what the workspace holds.
const SCRIPT: &str = "git log -1 --format='head=%H subject=%s'\n";

fn openssl(args: &[&str]) -> std::process::Output {
    Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// An RSA key made by `openssl genrsa` (PEM) at `<dir>/app-key.pem`, and its public
/// half at `<dir>/app-pub.pem`; `None` without openssl.
fn generated_key(dir: &Path) -> Option<String> {
    let out = Command::new("openssl")
        .args(["genrsa", "2048"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    std::fs::create_dir_all(dir).unwrap();
    let key = String::from_utf8(out.stdout).unwrap();
    let private = dir.join("app-key.pem");
    std::fs::write(&private, &key).unwrap();
    let public = dir.join("app-pub.pem");
    let out = openssl(&[
        "pkey",
        "-in",
        private.to_str().unwrap(),
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    Some(key)
}

fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    let mut t: String = s
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !t.len().is_multiple_of(4) {
        t.push('=');
    }
    protocol::b64::decode(&t).ok()
}

/// Whether the `Authorization: Bearer <JWT>` of `r` is the App's, signed with the key
/// whose public half is `public`: why not, when it is not.
fn jwt_checked(r: &GhRequest, public: &Path, scratch: &Path) -> Result<(), String> {
    let auth = r
        .headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let jwt = auth
        .strip_prefix("Bearer ")
        .ok_or_else(|| format!("no bearer JWT: {auth:?}"))?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(format!("not three parts: {jwt}"));
    };
    let part = |p: &str| -> Result<Value, String> {
        let bytes = b64url_decode(p).ok_or_else(|| format!("not base64url: {p}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))
    };
    let (header, claims) = (part(header)?, part(claims)?);
    if header["alg"] != "RS256" || claims["iss"] != APP_ID {
        return Err(format!("header {header}, claims {claims}"));
    }
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap_or_default(),
        claims["exp"].as_i64().unwrap_or_default(),
    );
    if !(exp > iat && exp - iat <= 600) {
        return Err(format!(
            "iat {iat}, exp {exp}: GitHub takes at most ten minutes"
        ));
    }
    let signature = b64url_decode(signature).ok_or("the signature is not base64url")?;
    std::fs::create_dir_all(scratch).unwrap();
    let input = scratch.join("signed");
    let sig = scratch.join("signature");
    std::fs::write(&input, format!("{}.{}", parts[0], parts[1])).unwrap();
    std::fs::write(&sig, signature).unwrap();
    let out = openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        public.to_str().unwrap(),
        "-signature",
        sig.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the RS256 signature does not verify: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The stand-in's own answers: an installation token for the App's installation, good
/// at the origin for the repositories it names; a JWT that does not verify is 401.
fn mint(
    r: &GhRequest,
    origin: &GitHttp,
    public: &Path,
    scratch: &Path,
    minted: &Mutex<Vec<(Value, String)>>,
    refused: &Mutex<Vec<String>>,
) -> Option<GhReply> {
    let path = format!("/app/installations/{INSTALLATION}/access_tokens");
    if r.method != "POST" || r.path() != path {
        return None;
    }
    if let Err(why) = jwt_checked(r, public, scratch) {
        refused.lock().unwrap().push(why);
        return Some(GhReply::error(401, "A JSON web token could not be decoded"));
    }
    let mut minted = minted.lock().unwrap();
    let token = format!("{TOKEN_PREFIX}{}", minted.len() + 1);
    minted.push((r.json(), token.clone()));
    let owner = REPO.split('/').next().unwrap_or_default();
    let repos: Vec<String> = r.json()["repositories"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|n| format!("{owner}/{n}"))
                .collect()
        })
        .unwrap_or_default();
    let repos: Vec<&str> = repos.iter().map(String::as_str).collect();
    origin.allow(&token, &repos);
    Some(GhReply::json(
        201,
        &json!({"token": token, "expires_at": "2099-01-01T00:00:00Z",
                "permissions": r.json()["permissions"],
                "repository_selection": "selected"}),
    ))
}

fn works(suite: &Suite) -> Vec<Value> {
    suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap()["works"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn executions(suite: &Suite, work_id: &str) -> Vec<Value> {
    suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap()["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The files under `dirs` holding `needle` (`grep -rlF`).
fn files_holding(dirs: &[PathBuf], needle: &str) -> String {
    let out = Command::new("grep")
        .args(["-rlF", "-e", needle])
        .args(dirs)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_github_app_connection_alone_fetches_the_workspace_and_is_green_in_doctor() {
    let Some(prism) = prism_or_skip() else {
        return;
    };
    let suite = started("git-app");
    let scratch = suite.dir.join("jwt-check");
    let Some(key) = generated_key(&scratch) else {
        assert!(!required(), "openssl is needed under OC_REQUIRE_PEERS=1");
        eprintln!("SKIPPED: openssl genrsa failed");
        return;
    };
    let public = scratch.join("app-pub.pem");
    let origin = Arc::new(GitHttp::start().unwrap());
    origin.create_repo(REPO, true);
    let minted: Arc<Mutex<Vec<(Value, String)>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let github = {
        let (origin, minted, refused) = (
            Arc::clone(&origin),
            Arc::clone(&minted),
            Arc::clone(&refused),
        );
        let (public, scratch) = (public.clone(), scratch.clone());
        StandIn::start(&prism, move |r| {
            mint(r, &origin, &public, &scratch, &minted, &refused)
        })
        .unwrap()
    };

    // The documented configuration: the App connection is the resource's connection.
    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let key_file = secrets.join("app-private-key.pem");
    std::fs::write(&key_file, &key).unwrap();
    let hook_secret = secrets.join("app-webhook-secret");
    std::fs::write(&hook_secret, GH_SECRET).unwrap();
    let mut config = common::config(&suite);
    config["connections"].as_array_mut().unwrap().push(json!({
        "name": "app", "type": "github",
        "config": {"app_id": APP_ID, "installation_id": INSTALLATION,
                   "api_url": github.url, "git_url": origin.url()},
        "secret_refs": {"webhook_secret": format!("file:{}", hook_secret.display()),
                        "private_key": format!("file:{}", key_file.display())}}));
    config["scopes"][0]["entries"] = json!([config["scopes"][0]["entries"][0].clone()]);
    config["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    config["scopes"][0]["bindings"] = json!([{"name": "run", "executor": "shell",
        "resource": {"type": "git", "config": {
            "repository": origin.repo_url(REPO), "connection": "app", "min_free_mb": 1}},
        "config": {"script": SCRIPT}}]);
    suite.apply_config(&config, HOOK).unwrap();
    wait_within("the route", HANG, || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });

    // A Work's run: its workspace holds the origin's commit, fetched with the token.
    let body = br#"{"number": 1}"#;
    let r = deliver(&suite, "app-1", body).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_within("the Work", HANG, || works(&suite).into_iter().next());
    let work_id = work["id"].as_str().unwrap().to_owned();
    let execution = wait_within("the run's end", HANG, || {
        executions(&suite, &work_id)
            .into_iter()
            .find(|e| e["state"] == "completed" || e["state"] == "failed")
    });
    assert_eq!(
        execution["state"],
        "completed",
        "{execution}\n{}",
        suite.log(oc_systest::Daemon::Extrunner)
    );
    let output: String = execution["result"]["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|id| artifact_text(&suite, id))
        .find(|t| t.contains("head="))
        .unwrap_or_default();
    let head = origin.branch_head(REPO, "main").unwrap();
    assert!(
        output.contains(&format!("head={head} subject=Initial commit")),
        "the origin's commit: {output:?}"
    );

    // The token was minted once, for the one repository, read-only, with a JWT the
    // App's key signed; the origin served the fetch with it.
    assert!(
        refused.lock().unwrap().is_empty(),
        "{:?}",
        refused.lock().unwrap()
    );
    assert!(github.violations().is_empty(), "{:?}", github.violations());
    let mints = minted.lock().unwrap().clone();
    assert_eq!(mints.len(), 1, "{mints:?}");
    assert_eq!(mints[0].0["repositories"], json!(["hello"]));
    assert_eq!(mints[0].0["permissions"], json!({"contents": "read"}));
    let token = mints[0].1.clone();
    let fetched = origin.requests();
    assert!(
        fetched.iter().any(|q| q.status == 200
            && q.service.as_deref() == Some("git-upload-pack")
            && q.user.as_deref() == Some("x-access-token")
            && q.token.as_deref() == Some(token.as_str())),
        "{fetched:?}"
    );
    assert!(
        fetched
            .iter()
            .filter(|q| q.token.is_some())
            .all(|q| q.token.as_deref() == Some(token.as_str())),
        "only the minted token: {fetched:?}"
    );

    // doctor asks the origin with the same token (kept, not minted again): ok.
    let doctor = cli(&suite, &["doctor"]);
    let line = doctor
        .1
        .lines()
        .find(|l| l.contains("git_repositories"))
        .unwrap_or_else(|| panic!("no git_repositories check: {}", doctor.1));
    assert!(
        line.contains("ok") && line.contains("1 of 1 repositories reachable"),
        "{}",
        doctor.1
    );
    assert_eq!(minted.lock().unwrap().len(), 1, "the token is reused");

    // Neither the token nor the key is in any file under the state directory or in
    // any log.
    let dirs = [suite.dir.join("state"), suite.dir.join("logs")];
    let key_line = key
        .lines()
        .find(|l| !l.starts_with("-----") && l.len() > 40)
        .unwrap()
        .to_owned();
    for needle in [token.as_str(), TOKEN_PREFIX, key_line.as_str()] {
        let found = files_holding(&dirs, needle);
        assert!(found.is_empty(), "{needle} leaked into {found}");
    }
}
