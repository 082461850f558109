//! The rules on what a package shows: payload schemas, pages, and the fields of its
//! settings and inputs wherever they are declared.

use super::*;

impl Manifest {
    pub(super) fn validate_schemas(&self) -> Result<(), ManifestError> {
        let mut seen = Seen::new();
        for (i, schema) in self.provides.schemas.iter().enumerate() {
            let path = format!("provides.schemas[{i}]");
            let base = schema.base.as_str();
            if !is_name(base) || !base.contains('.') || !is_under(&self.name, base) {
                return Err(invalid(
                    "schema_base",
                    format!("{path}.base"),
                    format!("`{base}` is not a dotted name under `{}.`", self.name),
                ));
            }
            if version_suffix(base).is_some() {
                return Err(invalid(
                    "schema_base",
                    format!("{path}.base"),
                    format!("`{base}` ends in a version suffix; declare the base alone"),
                ));
            }
            seen.claim("name_duplicate", base, &format!("{path}.base"))?;
            if schema.versions.is_empty() {
                return Err(invalid(
                    "schema_versions",
                    format!("{path}.versions"),
                    format!("schema `{base}` lists no version"),
                ));
            }
            let mut previous = 0i64;
            for (j, v) in schema.versions.iter().enumerate() {
                if *v <= 0 {
                    return Err(invalid(
                        "schema_versions",
                        format!("{path}.versions[{j}]"),
                        format!("{v} is not positive"),
                    ));
                }
                if *v <= previous {
                    return Err(invalid(
                        "schema_versions",
                        format!("{path}.versions[{j}]"),
                        format!("{v} does not follow {previous}: versions strictly increase"),
                    ));
                }
                previous = *v;
            }
        }
        Ok(())
    }

    pub(super) fn validate_pages(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        if p.pages.len() > MAX_PAGES {
            return Err(invalid(
                "pages_count",
                "provides.pages",
                format!("{} pages, more than {MAX_PAGES}", p.pages.len()),
            ));
        }
        let mut seen = Seen::new();
        for (i, page) in p.pages.iter().enumerate() {
            let path = format!("provides.pages[{i}]");
            // A page is addressed by its package and its ID, so the ID is the
            // package's own: an identifier, not namespaced (docs/decisions.md).
            if !is_identifier(&page.id) {
                return Err(invalid(
                    "name_syntax",
                    format!("{path}.id"),
                    format!(
                        "`{}` is not an identifier (a lower-case letter, then letters, digits, - and _; at most {MAX_IDENTIFIER_BYTES} bytes)",
                        page.id
                    ),
                ));
            }
            seen.claim("name_duplicate", &page.id, &format!("{path}.id"))?;
            if page.title.trim().is_empty()
                || !is_one_line(&page.title)
                || page.title.chars().count() > MAX_TITLE_CHARS
            {
                return Err(invalid(
                    "page_title",
                    format!("{path}.title"),
                    format!("must be one non-empty line of at most {MAX_TITLE_CHARS} characters"),
                ));
            }
            if let Some(summary) = &page.summary {
                if !is_one_line(summary) || summary.len() > MAX_SUMMARY_BYTES {
                    return Err(invalid(
                        "page_summary",
                        format!("{path}.summary"),
                        format!("must be one line of at most {MAX_SUMMARY_BYTES} bytes"),
                    ));
                }
            }
            if !p.extensions.iter().any(|e| e.type_name == page.entry) {
                return Err(invalid(
                    "page_reference",
                    format!("{path}.entry"),
                    format!("`{}` is not an extension type of this manifest", page.entry),
                ));
            }
            if let Some(kind) = &page.work_kind {
                if !p.work_kinds.iter().any(|k| &k.name == kind) {
                    return Err(invalid(
                        "page_reference",
                        format!("{path}.work_kind"),
                        format!("`{kind}` is not a work kind of this manifest"),
                    ));
                }
            }
            if let Some(route) = &page.route {
                if !p.routes.iter().any(|r| &r.handler == route) {
                    return Err(invalid(
                        "page_reference",
                        format!("{path}.route"),
                        format!("`{route}` is not a route handler of this manifest"),
                    ));
                }
            }
            let mut actions: Vec<(String, &str)> = page
                .compose
                .iter()
                .enumerate()
                .map(|(j, a)| (format!("{path}.compose[{j}]"), a.as_str()))
                .collect();
            if let Some(start) = &page.start {
                actions.push((format!("{path}.start"), start.as_str()));
            }
            for (at, action) in actions {
                if action.is_empty() || action.len() > MAX_IDENTIFIER_BYTES || !is_one_line(action)
                {
                    return Err(invalid(
                        "page_actions",
                        at,
                        format!(
                            "must name an action: one line of 1 to {MAX_IDENTIFIER_BYTES} bytes"
                        ),
                    ));
                }
            }
            if !p.panels {
                return Err(invalid(
                    "page_panels",
                    &path,
                    "a page is drawn from the package's panels, and the manifest does not declare provides.panels",
                ));
            }
            if !p.actions {
                return Err(invalid(
                    "page_actions",
                    &path,
                    "a page needs actions, and the manifest does not declare provides.actions",
                ));
            }
        }
        Ok(())
    }

    pub(super) fn validate_fields_everywhere(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, c) in p.connections.iter().enumerate() {
            validate_fields(&format!("provides.connections[{i}]"), &c.fields, true, &[])?;
        }
        for (i, e) in p.extensions.iter().enumerate() {
            validate_fields(
                &format!("provides.extensions[{i}]"),
                &e.fields,
                false,
                &e.settings,
            )?;
        }
        for (i, r) in p.routes.iter().enumerate() {
            validate_fields(&format!("provides.routes[{i}]"), &r.fields, false, &[])?;
        }
        for (i, e) in p.executors.iter().enumerate() {
            validate_fields(&format!("provides.executors[{i}]"), &e.fields, false, &[])?;
        }
        for (i, r) in p.resources.iter().enumerate() {
            validate_fields(
                &format!("provides.resources[{i}]"),
                &r.fields,
                false,
                &r.settings,
            )?;
        }
        for (i, s) in p.sandboxes.iter().enumerate() {
            validate_fields(&format!("provides.sandboxes[{i}]"), &s.fields, false, &[])?;
        }
        for (i, c) in p.containers.iter().enumerate() {
            validate_fields(&format!("provides.containers[{i}]"), &c.fields, false, &[])?;
        }
        for (i, t) in p.tunnels.iter().enumerate() {
            validate_fields(&format!("provides.tunnels[{i}]"), &t.fields, false, &[])?;
        }
        Ok(())
    }
}
