//! The validation rules of the specification's "Validation rules" list.

use super::*;

mod declarations;
mod executors;
mod pages;

// ---------------------------------------------------------------------------
// Validation

/// Names of one kind already declared, for duplicate detection.
struct Seen<'a> {
    first: BTreeMap<&'a str, String>,
}

impl<'a> Seen<'a> {
    fn new() -> Self {
        Seen {
            first: BTreeMap::new(),
        }
    }

    fn claim(
        &mut self,
        rule: &'static str,
        name: &'a str,
        path: &str,
    ) -> Result<(), ManifestError> {
        if let Some(first) = self.first.get(name) {
            return Err(invalid(
                rule,
                path,
                format!("`{name}` is declared twice (first at {first})"),
            ));
        }
        self.first.insert(name, path.to_string());
        Ok(())
    }
}

impl Manifest {
    /// Whether the command is exactly `open-conduit extension-run <name>`,
    /// which runs on the host's own executable.
    pub fn is_host_run(&self) -> bool {
        self.command.len() == 3
            && self.command[0] == HOST_RUN_PROGRAM
            && self.command[1] == "extension-run"
            && self.command[2] == self.name
    }

    /// The highest protocol version both this build and the package speak.
    pub fn common_protocol(&self) -> Option<u32> {
        self.protocol
            .iter()
            .copied()
            .filter(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(v))
            .max()
    }

    /// Whether the manifest declares `permission`.
    pub fn has_permission(&self, permission: &str) -> bool {
        self.permissions.iter().any(|p| p == permission)
    }

    /// Checks every validation rule; the first broken one is the error.
    pub fn validate(&self) -> Result<(), ManifestError> {
        self.validate_package()?;
        self.validate_permissions()?;
        self.validate_names()?;
        self.validate_families_and_types()?;
        self.validate_routes_and_kinds()?;
        self.validate_operations()?;
        self.validate_toolsets()?;
        self.validate_executors()?;
        self.validate_resources()?;
        self.validate_tasks_checks_probes()?;
        self.validate_schemas()?;
        self.validate_pages()?;
        self.validate_fields_everywhere()?;
        Ok(())
    }

    fn validate_package(&self) -> Result<(), ManifestError> {
        if self.common_protocol().is_none() {
            return Err(invalid(
                "protocol_unsupported",
                "protocol",
                format!(
                    "{:?} includes no supported version (supported: {:?})",
                    self.protocol, SUPPORTED_PROTOCOL_VERSIONS
                ),
            ));
        }
        if !is_identifier(&self.name) {
            return Err(invalid(
                "name_invalid",
                "name",
                format!(
                    "`{}` is not an identifier ([a-z][a-z0-9_-]*, at most {MAX_IDENTIFIER_BYTES} bytes)",
                    self.name
                ),
            ));
        }
        if RESERVED_NAMES.contains(&self.name.as_str()) {
            return Err(invalid(
                "name_reserved",
                "name",
                format!("`{}` is reserved", self.name),
            ));
        }
        if self.version.trim().is_empty() || !is_one_line(&self.version) {
            return Err(invalid(
                "version_invalid",
                "version",
                "must be one non-empty line",
            ));
        }
        if let Some(title) = &self.title {
            if title.trim().is_empty() || !is_one_line(title) {
                return Err(invalid(
                    "title_invalid",
                    "title",
                    "must be one non-empty line",
                ));
            }
            if title.chars().count() > MAX_TITLE_CHARS {
                return Err(invalid(
                    "title_invalid",
                    "title",
                    format!("longer than {MAX_TITLE_CHARS} characters"),
                ));
            }
        }
        match self.command.first() {
            None => return Err(invalid("command_empty", "command", "is empty")),
            Some(program) if program.is_empty() => {
                return Err(invalid("command_empty", "command[0]", "is empty"))
            }
            Some(program) => {
                if !self.is_host_run() && !stays_inside(program) {
                    return Err(invalid(
                        "command_outside",
                        "command[0]",
                        format!("`{program}` leaves the package directory (absolute or `..`)"),
                    ));
                }
            }
        }
        if let Some(playbooks) = &self.playbooks {
            if !stays_inside(playbooks) {
                return Err(invalid(
                    "playbooks_outside",
                    "playbooks",
                    format!("`{playbooks}` leaves the package directory (absolute or `..`)"),
                ));
            }
        }
        if self.kv_version < 0 {
            return Err(invalid(
                "kv_version_negative",
                "kv_version",
                format!("{} is negative", self.kv_version),
            ));
        }
        let mut stores = Seen::new();
        for (i, store) in self.external_stores.iter().enumerate() {
            let path = format!("external_stores[{i}]");
            if !is_identifier(&store.name) {
                return Err(invalid(
                    "name_syntax",
                    format!("{path}.name"),
                    format!("`{}` is not an identifier", store.name),
                ));
            }
            stores.claim("name_duplicate", &store.name, &format!("{path}.name"))?;
            if !self
                .provides
                .connections
                .iter()
                .any(|c| c.type_name == store.connection_type)
            {
                return Err(invalid(
                    "external_store_connection",
                    format!("{path}.connection_type"),
                    format!(
                        "`{}` is not a connection type this manifest declares",
                        store.connection_type
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_permissions(&self) -> Result<(), ManifestError> {
        let mut seen = Seen::new();
        for (i, p) in self.permissions.iter().enumerate() {
            if !PERMISSIONS.contains(&p.as_str()) {
                return Err(ManifestError::NewerManifest {
                    kind: "permission",
                    field: p.clone(),
                    location: format!(" at permissions[{i}]"),
                });
            }
            seen.claim("permission_duplicate", p, &format!("permissions[{i}]"))?;
        }
        Ok(())
    }

    /// Every namespaced name: syntax, namespace, duplicates within its kind.
    fn validate_names(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        let lists: Vec<(&str, Vec<&str>)> = vec![
            (
                "families",
                p.families.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "connections",
                p.connections.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "extensions",
                p.extensions.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "routes",
                p.routes.iter().map(|x| x.handler.as_str()).collect(),
            ),
            (
                "work_kinds",
                p.work_kinds.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "recurrences",
                p.recurrences.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "operations",
                p.operations.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "executors",
                p.executors.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "resources",
                p.resources.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "sandboxes",
                p.sandboxes.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "containers",
                p.containers.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "tunnels",
                p.tunnels.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            ("tasks", p.tasks.iter().map(|x| x.name.as_str()).collect()),
        ];
        for (list, names) in &lists {
            let field = match *list {
                "connections" | "extensions" | "resources" | "sandboxes" | "containers"
                | "tunnels" => "type",
                "routes" => "handler",
                _ => "name",
            };
            let mut seen = Seen::new();
            for (i, name) in names.iter().enumerate() {
                let path = format!("provides.{list}[{i}].{field}");
                self.check_namespaced(&path, name)?;
                seen.claim("name_duplicate", name, &path)?;
            }
        }
        Ok(())
    }

    fn check_namespaced(&self, path: &str, name: &str) -> Result<(), ManifestError> {
        if !is_name(name) {
            return Err(invalid(
                "name_syntax",
                path,
                format!(
                    "`{name}` is not a name (lower-case letters, digits, - and _, dot-separated)"
                ),
            ));
        }
        if !is_under(&self.name, name) {
            return Err(invalid(
                "name_namespace",
                path,
                format!(
                    "`{name}` is not under the extension's name (`{0}`, `{0}-…` or `{0}.…`)",
                    self.name
                ),
            ));
        }
        Ok(())
    }
}

fn check_help(path: &str, help: &str) -> Result<(), ManifestError> {
    if !is_one_line(help) {
        return Err(invalid("field_help", path, "is not one line"));
    }
    if help.len() > MAX_FIELD_HELP_BYTES {
        return Err(invalid(
            "field_help",
            path,
            format!("longer than {MAX_FIELD_HELP_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn setting_default_fits(type_name: &str, value: &Value) -> bool {
    match type_name {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "strings" => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        _ => false,
    }
}

/// A setting default as a field default's text: a string as itself, anything
/// else as its JSON.
fn setting_default_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn validate_settings(path: &str, settings: &[Setting]) -> Result<(), ManifestError> {
    let mut seen = Seen::new();
    for (i, s) in settings.iter().enumerate() {
        let spath = format!("{path}[{i}]");
        if !is_config_field(&s.field) {
            return Err(invalid(
                "setting_field",
                format!("{spath}.field"),
                format!("`{}` is not a top-level config field name", s.field),
            ));
        }
        seen.claim("setting_duplicate", &s.field, &format!("{spath}.field"))?;
        if !SETTING_TYPES.contains(&s.type_name.as_str()) {
            return Err(invalid(
                "setting_type",
                format!("{spath}.type"),
                format!(
                    "`{}` is not string, boolean, number or strings",
                    s.type_name
                ),
            ));
        }
        if let Some(default) = &s.default {
            if !setting_default_fits(&s.type_name, default) {
                return Err(invalid(
                    "setting_default",
                    format!("{spath}.default"),
                    format!("{default} is not a {}", s.type_name),
                ));
            }
        }
    }
    Ok(())
}

fn validate_fields(
    path: &str,
    fields: &[Field],
    connection: bool,
    settings: &[Setting],
) -> Result<(), ManifestError> {
    let mut config = Seen::new();
    let mut secrets = Seen::new();
    for (i, f) in fields.iter().enumerate() {
        let fpath = format!("{path}.fields[{i}]");
        if !is_config_field(&f.name) {
            return Err(invalid(
                "field_name",
                format!("{fpath}.name"),
                format!("`{}` is not a field name", f.name),
            ));
        }
        if f.secret && !connection {
            return Err(invalid(
                "field_secret",
                format!("{fpath}.secret"),
                format!(
                    "`{}` is secret, but only a connection type has secret keys",
                    f.name
                ),
            ));
        }
        let seen = if f.secret { &mut secrets } else { &mut config };
        seen.claim("field_duplicate", &f.name, &format!("{fpath}.name"))?;
        check_help(&format!("{fpath}.help"), &f.help)?;
        if f.required && f.default.is_some() {
            return Err(invalid(
                "field_required_default",
                format!("{fpath}.default"),
                format!("`{}` is required, so it takes no default", f.name),
            ));
        }
        let mut options = Seen::new();
        for (j, o) in f.options.iter().enumerate() {
            let opath = format!("{fpath}.options[{j}]");
            if o.is_empty() {
                return Err(invalid("field_options", &opath, "is empty"));
            }
            options.claim("field_options", o, &opath)?;
        }
        if let Some(default) = &f.default {
            if !f.options.is_empty() && !f.options.contains(default) {
                return Err(invalid(
                    "field_options",
                    format!("{fpath}.options"),
                    format!("do not include the default `{default}`"),
                ));
            }
            if !f.secret {
                let setting_default = settings
                    .iter()
                    .find(|s| s.field == f.name)
                    .and_then(|s| s.default.as_ref());
                if let Some(sd) = setting_default {
                    let text = setting_default_text(sd);
                    if &text != default {
                        return Err(invalid(
                            "field_default_mismatch",
                            format!("{fpath}.default"),
                            format!(
                                "`{default}` differs from the settings default `{text}` of `{}`",
                                f.name
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}
