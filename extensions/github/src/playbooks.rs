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
    /// Each skill's front matter names its directory and describes it, and what it
    /// tells the agent to call is an operation the manifest declares.
    #[test]
    fn every_playbook_is_a_skill_naming_its_directory_and_declared_operations() {
        let problems = sdk::playbooks::problems(crate::MANIFEST, super::PLAYBOOKS, "github.");
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
