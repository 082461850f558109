//! A segment of a binding with a sandbox or a container (spec 003, Workspace and
//! environment): the launch is confined through the binding's (`sandbox.plan` or
//! `container.launch`) with the needs every agent segment has
//! (`sdk::agent::confine`: the workspace, claude's own config directory
//! (`CLAUDE_CONFIG_DIR`) and the segment's own tmp folder writable, the segment
//! directory (its MCP config and token file), the playbooks, the toolbelt directory
//! and the run's toolbelt socket readable, in a container the CLI itself) and the API
//! host (`ANTHROPIC_BASE_URL`'s, else `api.anthropic.com`) and the hosts the run
//! layer names on the network.
//! `TMPDIR` and `CLAUDE_CODE_TMPDIR` are the segment's tmp folder,
//! `<execution>/<segment>.tmp` beside the segment directory (srt keeps `/tmp` for its
//! own sockets, read-only inside; and it mounts read needs over write needs, so the
//! folder cannot be inside the segment directory).

use std::collections::BTreeMap;

/// The API host claude reaches when `ANTHROPIC_BASE_URL` names none.
pub const API_HOST: &str = "api.anthropic.com";

/// The host of `ANTHROPIC_BASE_URL` in `env`, else [`API_HOST`].
pub fn api_host(env: &BTreeMap<String, String>) -> String {
    env.get("ANTHROPIC_BASE_URL")
        .and_then(|u| sdk::agent::confine::url_host(u))
        .unwrap_or_else(|| API_HOST.to_owned())
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
        assert_eq!(api_host(&env("")), API_HOST);
    }
}
