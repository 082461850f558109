//! A small W3C WebDriver client, for tests that drive a real browser: it starts
//! Debian's `chromedriver` on a free loopback port and a headless Chromium session
//! in a fresh profile, and speaks WebDriver's JSON over HTTP (ureq).
//!
//! Without `chromium` or `chromedriver` (Debian's `chromium` and `chromium-driver`,
//! which `.ci/run` installs), [`Browser::start`] prints why and answers `None`, so the
//! test skips; under `OC_REQUIRE_PEERS=1` that is an error instead.
//!
//! Every element is named by a CSS selector; a call that fails is an error carrying
//! WebDriver's own error and message. Dropping the [`Browser`] ends the session and
//! kills chromedriver's process group (and so its Chromium).

use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

/// How long chromedriver may take to say it is ready, and Chromium to start.
pub const START_WAIT: Duration = Duration::from_secs(60);
/// How long one WebDriver call may take (a page load included).
pub const CALL_WAIT: Duration = Duration::from_secs(90);
/// How long a page may take to load.
pub const PAGE_LOAD: Duration = Duration::from_secs(60);
/// How long chromedriver may take to exit after SIGTERM before SIGKILL.
pub const STOP_WAIT: Duration = Duration::from_secs(5);
/// The largest answer read from chromedriver (a screenshot in base64).
pub const MAX_ANSWER_BYTES: u64 = 64 * 1024 * 1024;
/// How often [`Browser::wait_for`] looks again.
pub const POLL: Duration = Duration::from_millis(50);

/// The key of a web element's reference in WebDriver's JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A cookie as WebDriver reports it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cookie {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Its path.
    #[serde(default)]
    pub path: Option<String>,
    /// Its domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// The `Secure` attribute.
    #[serde(default)]
    pub secure: bool,
    /// The `HttpOnly` attribute.
    #[serde(default)]
    pub http_only: bool,
    /// The `SameSite` attribute (`Strict`, `Lax`, `None`).
    #[serde(default)]
    pub same_site: Option<String>,
    /// When it expires (seconds since the epoch); `None` for a session cookie.
    #[serde(default)]
    pub expiry: Option<u64>,
}

/// A headless Chromium driven through chromedriver.
pub struct Browser {
    agent: ureq::Agent,
    /// `<driver_url>/session/<id>`.
    session: String,
    driver: Child,
    /// The scratch directory: the profile and chromedriver's log.
    scratch: PathBuf,
}

/// `name` on `PATH`, else in `/usr/bin`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(std::iter::once(PathBuf::from("/usr/bin")))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The last `n` lines of `path`, for an error.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A loopback port free a moment ago.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free loopback port: {e}"))
}

impl Browser {
    /// Start chromedriver and a headless Chromium session. `Ok(None)` (after saying
    /// why on stderr) when chromium or chromedriver is not installed, unless
    /// `OC_REQUIRE_PEERS=1`, under which that is an error.
    pub fn start() -> Result<Option<Browser>, String> {
        let driver = which("chromedriver");
        let chromium = which("chromium").or_else(|| which("chromium-browser"));
        let (Some(driver), Some(chromium)) = (driver, chromium) else {
            let why = "chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver; .ci/run installs them)";
            if crate::github::required() {
                return Err(format!("OC_REQUIRE_PEERS=1: {why}"));
            }
            eprintln!("skipping the browser: {why}");
            return Ok(None);
        };
        Browser::launch(&driver, &chromium).map(Some)
    }

    fn launch(driver_bin: &Path, chromium: &Path) -> Result<Browser, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let scratch = std::env::temp_dir().join(format!(
            "oc-browser-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&scratch);
        let profile = scratch.join("profile");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&profile)
            .map_err(|e| format!("{}: {e}", profile.display()))?;
        let log_path = scratch.join("chromedriver.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let port = free_port()?;
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{}: {e}", driver_bin.display()))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(CALL_WAIT))
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .build()
            .into();
        let driver_url = format!("http://127.0.0.1:{port}");
        // From here, dropping it stops chromedriver.
        let mut b = Browser {
            agent,
            session: String::new(),
            driver,
            scratch,
        };
        let deadline = Instant::now() + START_WAIT;
        loop {
            if let Ok(Some(status)) = b.driver.try_wait() {
                return Err(format!(
                    "chromedriver exited at start ({status}):\n{}",
                    tail(&log_path, 20)
                ));
            }
            let ready = b.request("GET", &format!("{driver_url}/status"), None);
            if ready.is_ok_and(|v| v["ready"] == json!(true)) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "chromedriver was not ready within {START_WAIT:?}:\n{}",
                    tail(&log_path, 20)
                ));
            }
            std::thread::sleep(POLL);
        }
        let mut args = vec![
            "--headless=new".to_owned(),
            "--disable-gpu".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", profile.display()),
        ];
        if nix::unistd::geteuid().is_root() {
            args.push("--no-sandbox".to_owned());
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let created = b
            .request("POST", &format!("{driver_url}/session"), Some(&caps))
            .map_err(|e| format!("{e}\n{}", tail(&log_path, 20)))?;
        let id = created["sessionId"]
            .as_str()
            .ok_or_else(|| format!("chromedriver's new session has no sessionId: {created}"))?;
        b.session = format!("{driver_url}/session/{id}");
        let limits = json!({"pageLoad": PAGE_LOAD.as_millis(), "script": PAGE_LOAD.as_millis(), "implicit": 0});
        b.call("POST", "/timeouts", Some(&limits))?;
        Ok(b)
    }

    /// The browser's profile directory (`--user-data-dir`), removed on drop.
    pub fn profile(&self) -> PathBuf {
        self.scratch.join("profile")
    }

    /// One WebDriver request: the answer's `value`, or WebDriver's error and message.
    fn request(&self, method: &str, url: &str, body: Option<&Value>) -> Result<Value, String> {
        let what = format!("WebDriver {method} {url}");
        let answer = match (method, body) {
            ("GET", _) => self.agent.get(url).call(),
            ("DELETE", _) => self.agent.delete(url).call(),
            (_, b) => self
                .agent
                .post(url)
                .header("Content-Type", "application/json")
                .send(b.unwrap_or(&json!({})).to_string()),
        };
        let mut answer = answer.map_err(|e| format!("{what}: {e}"))?;
        let status = answer.status().as_u16();
        let text = answer
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| format!("{what}: reading the answer: {e}"))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{what}: answered {status}, not JSON: {e}"))?;
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if status >= 400 || value.get("error").is_some_and(Value::is_string) {
            return Err(format!(
                "{what}: {status} {}: {}",
                value["error"].as_str().unwrap_or("error"),
                value["message"].as_str().unwrap_or_default()
            ));
        }
        Ok(value)
    }

    /// A request on the session: `path` is after `/session/<id>`.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        self.request(method, &format!("{}{path}", self.session), body)
    }

    /// Open `url` and wait for it to load.
    pub fn goto(&self, url: &str) -> Result<(), String> {
        self.call("POST", "/url", Some(&json!({ "url": url })))
            .map(drop)
    }

    /// The current page's URL.
    pub fn url(&self) -> Result<String, String> {
        let v = self.call("GET", "/url", None)?;
        Ok(v.as_str().unwrap_or_default().to_owned())
    }

    /// The first element `css` selects: its WebDriver ID. None is an error naming
    /// `css`.
    pub fn find(&self, css: &str) -> Result<String, String> {
        let query = json!({"using": "css selector", "value": css});
        let v = self
            .call("POST", "/element", Some(&query))
            .map_err(|e| format!("find {css:?}: {e}"))?;
        element_id(&v).ok_or_else(|| format!("find {css:?}: no element reference in {v}"))
    }

    /// Every element `css` selects (none is not an error): their WebDriver IDs.
    pub fn find_all(&self, css: &str) -> Result<Vec<String>, String> {
        let query = json!({"using": "css selector", "value": css});
        let v = self
            .call("POST", "/elements", Some(&query))
            .map_err(|e| format!("find all {css:?}: {e}"))?;
        let list = v.as_array().cloned().unwrap_or_default();
        Ok(list.iter().filter_map(element_id).collect())
    }

    /// Click the first element `css` selects.
    pub fn click(&self, css: &str) -> Result<(), String> {
        let id = self.find(css)?;
        self.call("POST", &format!("/element/{id}/click"), Some(&json!({})))
            .map(drop)
            .map_err(|e| format!("click {css:?}: {e}"))
    }

    /// Type `text` into the first element `css` selects.
    pub fn send_keys(&self, css: &str, text: &str) -> Result<(), String> {
        let id = self.find(css)?;
        let body = json!({ "text": text });
        self.call("POST", &format!("/element/{id}/value"), Some(&body))
            .map(drop)
            .map_err(|e| format!("type into {css:?}: {e}"))
    }

    /// The rendered text of the first element `css` selects.
    pub fn text(&self, css: &str) -> Result<String, String> {
        let id = self.find(css)?;
        let v = self
            .call("GET", &format!("/element/{id}/text"), None)
            .map_err(|e| format!("text of {css:?}: {e}"))?;
        Ok(v.as_str().unwrap_or_default().to_owned())
    }

    /// The attribute `name` of the first element `css` selects; `None` when it has
    /// none.
    pub fn attribute(&self, css: &str, name: &str) -> Result<Option<String>, String> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_:".contains(c))
        {
            return Err(format!(
                "attribute name {name:?}: letters, digits, - _ : only"
            ));
        }
        let id = self.find(css)?;
        let v = self
            .call("GET", &format!("/element/{id}/attribute/{name}"), None)
            .map_err(|e| format!("attribute {name} of {css:?}: {e}"))?;
        Ok(v.as_str().map(str::to_owned))
    }

    /// Run `script` (a function body: `return …`) in the page with `args`
    /// (`arguments[0]`…): what it returned.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, String> {
        let body = json!({ "script": script, "args": args });
        self.call("POST", "/execute/sync", Some(&body))
            .map_err(|e| format!("script: {e}"))
    }

    /// Poll `condition` until it answers `Some`, for at most `bound`: what it
    /// answered. An error from it counts as not yet (the last one is in the timeout's
    /// error, which names `what`).
    pub fn wait_for<T>(
        &self,
        what: &str,
        bound: Duration,
        mut condition: impl FnMut(&Browser) -> Result<Option<T>, String>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + bound;
        let mut last = String::new();
        loop {
            match condition(self) {
                Ok(Some(t)) => return Ok(t),
                Ok(None) => last.clear(),
                Err(e) => last = e,
            }
            if Instant::now() > deadline {
                let why = if last.is_empty() {
                    String::new()
                } else {
                    format!(" (last: {last})")
                };
                return Err(format!("waited {bound:?} for {what}{why}"));
            }
            std::thread::sleep(POLL);
        }
    }

    /// A screenshot of the window, as a PNG file at `path`.
    pub fn screenshot(&self, path: &Path) -> Result<(), String> {
        let v = self.call("GET", "/screenshot", None)?;
        let text = v
            .as_str()
            .ok_or_else(|| format!("screenshot: not base64 text: {v}"))?;
        let png = protocol::b64::decode(text).map_err(|e| format!("screenshot: {e}"))?;
        std::fs::write(path, png).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The cookies of the current page.
    pub fn cookies(&self) -> Result<Vec<Cookie>, String> {
        let v = self.call("GET", "/cookie", None)?;
        serde_json::from_value(v).map_err(|e| format!("cookies: {e}"))
    }
}

/// The element ID in a WebDriver element reference.
fn element_id(v: &Value) -> Option<String> {
    v.get(ELEMENT_KEY)?.as_str().map(str::to_owned)
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.request("DELETE", &self.session.clone(), None);
        }
        use nix::sys::signal::{killpg, Signal};
        if let Ok(pid) = i32::try_from(self.driver.id()) {
            let group = nix::unistd::Pid::from_raw(pid);
            let _ = killpg(group, Signal::SIGTERM);
            let deadline = Instant::now() + STOP_WAIT;
            while matches!(self.driver.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(POLL);
            }
            // Whatever is left of the group (a Chromium that outlived it too).
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
