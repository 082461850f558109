//! The package's playbooks: Claude Code plugin skills, one directory each under
//! `playbooks/` (the manifest's `playbooks`), embedded so the host's bundled layout
//! (`open-conduit up`, the Debian package's `open-conduit __bundle`) writes them
//! beside the manifest. extrunner copies every package's playbooks into the agents'
//! plugin (`open-conduit`), so a binding's `"playbook": "github-issue"` starts its
//! turns on `/open-conduit:github-issue <number>`.

/// Each playbook file: its path relative to the playbooks directory, and its text.
pub const PLAYBOOKS: &[(&str, &str)] = &[
    (
        "github-issue/SKILL.md",
        include_str!("../playbooks/github-issue/SKILL.md"),
    ),
    (
        "github-review/SKILL.md",
        include_str!("../playbooks/github-review/SKILL.md"),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Each skill's front matter names its directory and describes it, and what it
    /// tells the agent to call is an operation the manifest declares.
    #[test]
    fn every_playbook_is_a_skill_naming_its_directory_and_declared_operations() {
        let manifest: serde_json::Value = serde_json::from_str(crate::MANIFEST).unwrap_or_default();
        assert_eq!(manifest["playbooks"], "playbooks");
        let declared: Vec<&str> = manifest["provides"]["operations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["name"].as_str())
            .collect();
        for (path, text) in PLAYBOOKS {
            let skill = path.strip_suffix("/SKILL.md").unwrap_or_default();
            assert!(!skill.is_empty(), "{path}");
            let front = text
                .strip_prefix("---\n")
                .and_then(|t| t.split_once("\n---\n"))
                .map(|(f, _)| f)
                .unwrap_or_default();
            assert!(
                front.lines().any(|l| l == format!("name: {skill}")),
                "{path}: {front}"
            );
            assert!(
                front.lines().any(|l| l.starts_with("description: ")),
                "{path}"
            );
            let mut rest = *text;
            while let Some(i) = rest.find("`github.") {
                rest = &rest[i + 1..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                    .collect();
                let name = name.trim_end_matches('.');
                assert!(declared.contains(&name), "{path} names {name}");
            }
        }
    }
}
