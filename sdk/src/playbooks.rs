//! A package's playbooks (Claude Code plugin skills, one directory each under the
//! manifest's `playbooks` directory): the checks every package runs on its own, so
//! that a skill extrunner copies into the agents' plugin is well formed and names
//! only operations its package declares.

/// What is wrong with `files` (each skill's path under the playbooks directory, and
/// its text) for the package whose manifest is `manifest`: a skill whose front
/// matter does not name its directory or has no description, a manifest without
/// `"playbooks": "playbooks"`, and each `` `PREFIX.op` `` a skill names that the
/// manifest does not declare (`prefix` is the package's, `linear.`). Empty when all
/// is well.
pub fn problems(manifest: &str, files: &[(&str, &str)], prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let manifest: serde_json::Value = match serde_json::from_str(manifest) {
        Ok(m) => m,
        Err(e) => return vec![format!("the manifest does not parse: {e}")],
    };
    if manifest["playbooks"] != "playbooks" {
        out.push("the manifest does not say \"playbooks\": \"playbooks\"".into());
    }
    let declared: Vec<&str> = manifest["provides"]["operations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["name"].as_str())
        .collect();
    let quoted = format!("`{prefix}");
    for (path, text) in files {
        let Some(skill) = path.strip_suffix("/SKILL.md").filter(|s| !s.is_empty()) else {
            out.push(format!("{path}: not <skill>/SKILL.md"));
            continue;
        };
        let front = text
            .strip_prefix("---\n")
            .and_then(|t| t.split_once("\n---\n"))
            .map(|(f, _)| f)
            .unwrap_or_default();
        if !front.lines().any(|l| l == format!("name: {skill}")) {
            out.push(format!(
                "{path}: the front matter does not say `name: {skill}`"
            ));
        }
        if !front.lines().any(|l| l.starts_with("description: ")) {
            out.push(format!("{path}: the front matter has no description"));
        }
        let mut rest = *text;
        while let Some(i) = rest.find(&quoted) {
            rest = &rest[i + 1..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                .collect();
            let name = name.trim_end_matches('.');
            if !declared.contains(&name) {
                out.push(format!(
                    "{path} names `{name}`, which the manifest does not declare"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"{"playbooks": "playbooks",
        "provides": {"operations": [{"name": "x.comment"}]}}"#;

    #[test]
    fn a_skill_naming_an_undeclared_operation_or_another_directory_is_a_problem() {
        let good = "---\nname: x-issue\ndescription: d\n---\nCall `x.comment`.";
        assert!(problems(MANIFEST, &[("x-issue/SKILL.md", good)], "x.").is_empty());
        let bad = "---\nname: other\n---\nCall `x.move` and `x.comment`.";
        let p = problems(MANIFEST, &[("x-issue/SKILL.md", bad)], "x.");
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p.iter().any(|m| m.contains("`x.move`")));
        assert!(!problems("{}", &[], "x.").is_empty());
    }
}
