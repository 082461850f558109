//! The package's playbook: a Claude Code plugin skill under `playbooks/` (the
//! manifest's `playbooks`), embedded so the host's bundled layout writes it beside
//! the manifest; extrunner copies it into the agents' plugin (`open-conduit`), so a
//! binding's `"playbook": "linear-issue"` starts its turns on
//! `/open-conduit:linear-issue linear:<issue key>` (with `"args": "{key}"`).

/// Each playbook file: its path relative to the playbooks directory, and its text.
pub const PLAYBOOKS: &[(&str, &str)] = &[(
    "linear-issue/SKILL.md",
    include_str!("../playbooks/linear-issue/SKILL.md"),
)];

#[cfg(test)]
mod tests {
    /// The skill's front matter names its directory and describes it, and each
    /// `linear.` operation it tells the agent to call is one the manifest declares.
    #[test]
    fn the_playbook_is_a_skill_naming_its_directory_and_declared_operations() {
        let problems = sdk::playbooks::problems(crate::MANIFEST, super::PLAYBOOKS, "linear.");
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
