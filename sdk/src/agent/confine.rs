//! What an agent's segment needs inside its sandbox or container, shared by the
//! agent executors (claude-code, codex): the workspace, the agent's own config or
//! home directory and the segment's own tmp folder writable; the segment directory
//! (its MCP config, token file, schema), the plugin directory, the playbooks, the
//! toolbelt directory and the run's toolbelt socket readable; in a container, whose
//! only files of the host are its needs, the agent's program too; the model API's
//! host and the hosts the run layer names (`RunRequest.hosts`: the git host of the
//! run's credential) on the network.

use protocol::sandbox::{SandboxLaunch, SandboxNeeds};
use protocol::wire::RunRequest;
use std::collections::BTreeMap;
use std::path::Path;

/// The host of `url` (no scheme, user, port or path), lower-cased; `None` when it
/// names none.
pub fn url_host(url: &str) -> Option<String> {
    let url = url.trim();
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        hostport.split(':').next().unwrap_or_default()
    };
    if host.is_empty() || host.len() > 253 || host.contains([' ', '\0']) {
        None
    } else {
        Some(host.to_ascii_lowercase())
    }
}

/// One segment's launch, as its needs are drawn from it.
pub struct Segment<'a> {
    /// The segment directory (its MCP config and token file).
    pub dir: &'a Path,
    /// The segment's own tmp folder (beside the segment directory, not in it: srt
    /// mounts read needs over write needs).
    pub tmp: &'a Path,
    /// The working directory (the workspace).
    pub cwd: &'a str,
    /// The agent's config or home directory (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`).
    pub config_dir: &'a Path,
    /// The plugin directory it is given, if any.
    pub plugin_dir: Option<&'a str>,
    /// Whether it gets the toolbelt (its MCP server connects to the run's socket).
    pub toolbelt: bool,
    /// The model API's host.
    pub api_host: String,
}

/// The needs of `seg` for `req`.
pub fn needs(req: &RunRequest, seg: &Segment<'_>) -> SandboxNeeds {
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
    n.hosts.push(seg.api_host.clone());
    for h in &req.hosts {
        if !h.is_empty() && !n.hosts.contains(h) {
            n.hosts.push(h.clone());
        }
    }
    n
}

/// Confines the launch of `argv` in `seg` through the binding's sandbox or
/// container: sets the tmp variables in `env` to the segment's tmp folder and answers
/// what to run. `None`: the binding has neither.
pub async fn confine(
    host: &crate::Host,
    req: &RunRequest,
    seg: &Segment<'_>,
    argv: Vec<String>,
    env: &mut BTreeMap<String, String>,
) -> Result<Option<crate::sandbox::Confined>, crate::sandbox::Refusal> {
    if !crate::sandbox::confined(req) {
        return Ok(None);
    }
    for var in crate::sandbox::TMP_VARS {
        env.insert(var.to_owned(), seg.tmp.display().to_string());
    }
    let mut needs = needs(req, seg);
    // A container has nothing of the host but its needs: the program itself is one.
    if crate::sandbox::contained(req) {
        if let Some(program) = argv.first().filter(|b| Path::new(b.as_str()).is_absolute()) {
            if !needs.read.contains(program) {
                needs.read.push(program.clone());
            }
        }
    }
    let launch = SandboxLaunch {
        argv,
        cwd: seg.cwd.to_owned(),
        env: env.clone(),
    };
    crate::sandbox::confine(host, req, launch, needs).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_host() {
        assert_eq!(
            url_host("https://llm.example.com:8443/v1").as_deref(),
            Some("llm.example.com")
        );
        assert_eq!(
            url_host("http://u:p@Proxy.local").as_deref(),
            Some("proxy.local")
        );
        assert_eq!(url_host("http://[::1]:9000/").as_deref(), Some("::1"));
        assert_eq!(url_host(""), None);
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
            api_host: "api.example.com".into(),
        };
        let n = needs(&req, &seg);
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
        assert_eq!(n.hosts, ["api.example.com"]);
    }
}
