//! A segment of a binding with a sandbox (spec 003, Workspace and environment): the
//! launch is planned through the binding's sandbox (`sandbox.plan`), needing the
//! workspace, claude's own config directory (`CLAUDE_CONFIG_DIR`) and the segment's
//! own tmp folder writable, the segment directory (its MCP config and token file),
//! the playbooks, the toolbelt directory and the run's toolbelt socket readable, and
//! the API host (`ANTHROPIC_BASE_URL`'s, else `api.anthropic.com`) and the hosts the
//! run layer names (`RunRequest.hosts`: the git host of the run's credential) on the
//! network.
//! `TMPDIR` and `CLAUDE_CODE_TMPDIR` are the segment's tmp folder,
//! `<execution>/<segment>.tmp` beside the segment directory (srt keeps `/tmp` for its
//! own sockets, read-only inside; and it mounts read needs over write needs, so the
//! folder cannot be inside the segment directory).

use protocol::sandbox::{SandboxLaunch, SandboxNeeds, SandboxPlanned};
use protocol::wire::RunRequest;
use sdk::sandbox::Refusal;
use sdk::Host;
use std::collections::BTreeMap;
use std::path::Path;

/// The API host claude reaches when `ANTHROPIC_BASE_URL` names none.
pub const API_HOST: &str = "api.anthropic.com";

/// The host of `ANTHROPIC_BASE_URL` in `env` (no scheme, user, port or path), else
/// [`API_HOST`].
pub fn api_host(env: &BTreeMap<String, String>) -> String {
    let Some(url) = env.get("ANTHROPIC_BASE_URL").map(|u| u.trim()) else {
        return API_HOST.to_owned();
    };
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        hostport.split(':').next().unwrap_or_default()
    };
    if host.is_empty() || host.len() > 253 || host.contains([' ', '\0']) {
        API_HOST.to_owned()
    } else {
        host.to_ascii_lowercase()
    }
}

/// What one segment's launch needs inside its sandbox.
pub struct Segment<'a> {
    /// The segment directory (its MCP config and token file).
    pub dir: &'a Path,
    /// The segment's own tmp folder.
    pub tmp: &'a Path,
    /// The working directory (the workspace).
    pub cwd: &'a str,
    /// claude's config directory.
    pub config_dir: &'a Path,
    /// The `--plugin-dir` it is given, if any.
    pub plugin_dir: Option<&'a str>,
    /// Whether it gets the toolbelt (its MCP server connects to the run's socket).
    pub toolbelt: bool,
}

/// The needs of `seg` for `req`, claude's environment `env`.
pub fn needs(req: &RunRequest, seg: &Segment<'_>, env: &BTreeMap<String, String>) -> SandboxNeeds {
    let mut n = SandboxNeeds::default();
    let add = |list: &mut Vec<String>, p: String| {
        if !p.is_empty() && !list.contains(&p) {
            list.push(p);
        }
    };
    add(&mut n.write, seg.cwd.to_owned());
    add(&mut n.write, seg.config_dir.display().to_string());
    add(&mut n.write, seg.tmp.display().to_string());
    add(&mut n.read, seg.dir.display().to_string());
    if let Some(d) = seg.plugin_dir {
        add(&mut n.read, d.to_owned());
    }
    add(&mut n.read, req.playbook_dir.clone());
    if seg.toolbelt {
        add(&mut n.read, req.toolbelt.dir.clone());
        // srt lets every unix socket through (see docs/decisions.md): the run's
        // toolbelt socket is reachable because its path is a read need, while the
        // host's other sockets are denied paths.
        add(&mut n.read, req.toolbelt.endpoint.clone());
    }
    n.read.retain(|p| Path::new(p).is_absolute());
    n.hosts.push(api_host(env));
    // What the run layer set up reaches (the git host of the run's credential).
    for h in &req.hosts {
        if !h.is_empty() && !n.hosts.contains(h) {
            n.hosts.push(h.clone());
        }
    }
    n
}

/// Plans the launch of `argv` in `seg` through the binding's sandbox: sets the tmp
/// variables in `env` and answers the pinned plan. `None`: the binding has none.
pub async fn plan(
    host: &Host,
    req: &RunRequest,
    seg: &Segment<'_>,
    argv: Vec<String>,
    env: &mut BTreeMap<String, String>,
) -> Result<Option<SandboxPlanned>, Refusal> {
    if !sdk::sandbox::sandboxed(req) {
        return Ok(None);
    }
    for var in sdk::sandbox::TMP_VARS {
        env.insert(var.to_owned(), seg.tmp.display().to_string());
    }
    let launch = SandboxLaunch {
        argv,
        cwd: seg.cwd.to_owned(),
        env: env.clone(),
    };
    sdk::sandbox::plan(host, req, launch, needs(req, seg, env)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(url: &str) -> BTreeMap<String, String> {
        [("ANTHROPIC_BASE_URL".to_owned(), url.to_owned())].into()
    }

    #[test]
    fn the_api_host_is_the_base_urls_or_anthropics() {
        assert_eq!(api_host(&BTreeMap::new()), API_HOST);
        assert_eq!(
            api_host(&env("https://llm.example.com:8443/v1")),
            "llm.example.com"
        );
        assert_eq!(api_host(&env("http://u:p@Proxy.local")), "proxy.local");
        assert_eq!(api_host(&env("http://[::1]:9000/")), "::1");
        assert_eq!(api_host(&env("")), API_HOST);
    }

    #[test]
    fn a_segment_needs_its_workspace_config_and_tmp_writable_and_its_toolbelt_readable() {
        let mut req = RunRequest::default();
        req.toolbelt.endpoint = "/run/oc/toolbelt.sock".into();
        req.toolbelt.dir = "/var/lib/oc/toolbelt".into();
        req.playbook_dir = "/var/lib/oc/playbooks".into();
        let seg = Segment {
            dir: Path::new("/s/runs/e/1"),
            tmp: Path::new("/s/runs/e/1.tmp"),
            cwd: "/w",
            config_dir: Path::new("/c"),
            plugin_dir: None,
            toolbelt: true,
        };
        let n = needs(&req, &seg, &BTreeMap::new());
        assert_eq!(n.write, ["/w", "/c", "/s/runs/e/1.tmp"]);
        assert_eq!(
            n.read,
            [
                "/s/runs/e/1",
                "/var/lib/oc/playbooks",
                "/var/lib/oc/toolbelt",
                "/run/oc/toolbelt.sock"
            ]
        );
        assert_eq!(n.hosts, [API_HOST]);
    }
}
