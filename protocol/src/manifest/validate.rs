//! The validation rules of the specification's "Validation rules" list.

use super::*;

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
            ("pages", p.pages.iter().map(|x| x.id.as_str()).collect()),
        ];
        for (list, names) in &lists {
            let field = match *list {
                "connections" | "extensions" | "resources" | "sandboxes" | "containers"
                | "tunnels" => "type",
                "routes" => "handler",
                "pages" => "id",
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

    fn validate_families_and_types(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, fam) in p.families.iter().enumerate() {
            let path = format!("provides.families[{i}]");
            let loss = fam.loss.as_deref().map(str::trim).unwrap_or("");
            if !fam.re_derivable && loss.is_empty() {
                return Err(invalid(
                    "family_loss_missing",
                    format!("{path}.loss"),
                    format!(
                        "family `{}` is not re-derivable, so it must state what its loss loses",
                        fam.name
                    ),
                ));
            }
            if fam.re_derivable && fam.loss.is_some() {
                return Err(invalid(
                    "family_loss_forbidden",
                    format!("{path}.loss"),
                    format!(
                        "family `{}` is re-derivable, so it loses nothing and states no loss",
                        fam.name
                    ),
                ));
            }
        }
        for (i, ext) in p.extensions.iter().enumerate() {
            let path = format!("provides.extensions[{i}]");
            if ext.ingress && ext.families.is_empty() {
                return Err(invalid(
                    "ingress_families",
                    format!("{path}.families"),
                    format!("ingress type `{}` declares no families", ext.type_name),
                ));
            }
            let mut seen = Seen::new();
            for (j, fam) in ext.families.iter().enumerate() {
                let fpath = format!("{path}.families[{j}]");
                if !p.families.iter().any(|f| &f.name == fam) {
                    return Err(invalid(
                        "family_undeclared",
                        &fpath,
                        format!("`{fam}` is not a family this manifest declares"),
                    ));
                }
                seen.claim("name_duplicate", fam, &fpath)?;
            }
            if ext.webhooks && !ext.ingress {
                return Err(invalid(
                    "webhooks_need_ingress",
                    format!("{path}.webhooks"),
                    format!(
                        "type `{}` has webhooks but is not an ingress type",
                        ext.type_name
                    ),
                ));
            }
            validate_settings(&format!("{path}.settings"), &ext.settings)?;
            if let Some(d) = &ext.describe {
                for (key, v) in [("list", &d.list), ("name", &d.name), ("detail", &d.detail)] {
                    if !is_config_field(v) {
                        return Err(invalid(
                            "describe_fields",
                            format!("{path}.describe.{key}"),
                            format!("`{v}` is not a config field name"),
                        ));
                    }
                }
            }
        }
        if p.entry_gated {
            if p.operations.is_empty() {
                return Err(invalid(
                    "entry_gated_needs_operations",
                    "provides.entry_gated",
                    "the manifest declares no operations to gate",
                ));
            }
            if p.extensions.is_empty() {
                return Err(invalid(
                    "entry_gated_needs_type",
                    "provides.entry_gated",
                    "the manifest declares no extension type whose entries gate its operations",
                ));
            }
        }
        Ok(())
    }

    fn validate_routes_and_kinds(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, kind) in p.work_kinds.iter().enumerate() {
            if !p.routes.iter().any(|r| r.handler == kind.handler) {
                return Err(invalid(
                    "work_kind_handler",
                    format!("provides.work_kinds[{i}].handler"),
                    format!(
                        "work kind `{}` names `{}`, which is not a route handler this manifest declares",
                        kind.name, kind.handler
                    ),
                ));
            }
        }
        let mut seen = Seen::new();
        for (i, target) in p.targets.iter().enumerate() {
            let path = format!("provides.targets[{i}]");
            if !is_target_kind(target) {
                return Err(invalid(
                    "target_kind",
                    &path,
                    format!(
                        "`{target}` is not a wait target kind (lower-case letters, digits, - or _)"
                    ),
                ));
            }
            seen.claim("target_duplicate", target, &path)?;
        }
        Ok(())
    }

    fn validate_operations(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, op) in p.operations.iter().enumerate() {
            let path = format!("provides.operations[{i}]");
            let Some(kind) = op.kind() else {
                return Err(invalid(
                    "operation_kind",
                    format!("{path}.kind"),
                    format!("`{}` is not handler, wait or emit", op.kind),
                ));
            };
            if op.commit && kind != OperationKind::Emit {
                return Err(invalid(
                    "operation_commit",
                    format!("{path}.commit"),
                    format!(
                        "only an emit operation may commit; `{}` is {}",
                        op.name, op.kind
                    ),
                ));
            }
            if let Some(serves) = &op.serves {
                if kind != OperationKind::Handler {
                    return Err(invalid(
                        "operation_serves",
                        format!("{path}.serves"),
                        format!(
                            "only a handler serves a capability; `{}` is {}",
                            op.name, op.kind
                        ),
                    ));
                }
                if !is_name(serves) || !serves.contains('.') {
                    return Err(invalid(
                        "operation_serves",
                        format!("{path}.serves"),
                        format!("`{serves}` is not named like an operation (a dotted name)"),
                    ));
                }
            }
            if !is_one_line(&op.summary) {
                return Err(invalid(
                    "operation_summary",
                    format!("{path}.summary"),
                    "is not one line",
                ));
            }
            if op.summary.len() > MAX_SUMMARY_BYTES {
                return Err(invalid(
                    "operation_summary",
                    format!("{path}.summary"),
                    format!("longer than {MAX_SUMMARY_BYTES} bytes"),
                ));
            }
            if op.guidance.len() > MAX_GUIDANCE_BYTES {
                return Err(invalid(
                    "operation_guidance",
                    format!("{path}.guidance"),
                    format!("longer than {MAX_GUIDANCE_BYTES} bytes"),
                ));
            }
            if let Some(input) = &op.input {
                if !input.is_object() {
                    return Err(invalid(
                        "operation_input",
                        format!("{path}.input"),
                        "is not a JSON object (a JSON Schema)",
                    ));
                }
            }
        }
        if p.dependency_filter
            && !p
                .operations
                .iter()
                .any(|o| o.kind() == Some(OperationKind::Wait))
        {
            return Err(invalid(
                "dependency_filter_needs_wait",
                "provides.dependency_filter",
                "the manifest declares no wait operation",
            ));
        }
        Ok(())
    }

    fn validate_toolsets(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        let mut toolsets = Seen::new();
        for (i, ts) in p.toolsets.iter().enumerate() {
            let path = format!("provides.toolsets[{i}]");
            if !is_name(&ts.name) || !ts.name.contains('.') || !is_under(&self.name, &ts.name) {
                return Err(invalid(
                    "toolset_name",
                    format!("{path}.name"),
                    format!("`{}` is not named `{}.…`", ts.name, self.name),
                ));
            }
            toolsets.claim("toolset_duplicate", &ts.name, &format!("{path}.name"))?;
            if ts.operations.is_empty() {
                return Err(invalid(
                    "toolset_empty",
                    format!("{path}.operations"),
                    format!("toolset `{}` grants no operation", ts.name),
                ));
            }
            let mut ops = Seen::new();
            for (j, op) in ts.operations.iter().enumerate() {
                let opath = format!("{path}.operations[{j}].name");
                let known = p.operations.iter().any(|o| o.name == op.name)
                    || BUILTIN_OPERATIONS.contains(&op.name.as_str());
                if !known {
                    return Err(invalid(
                        "toolset_operation_unknown",
                        &opath,
                        format!(
                            "`{}` is neither an operation this manifest declares nor a builtin",
                            op.name
                        ),
                    ));
                }
                ops.claim("toolset_operation_duplicate", &op.name, &opath)?;
            }
        }
        Ok(())
    }

    fn validate_executors(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        let mut launch = Seen::new();
        for (i, ex) in p.executors.iter().enumerate() {
            let path = format!("provides.executors[{i}]");
            if !TOOLBELT_LABELS.contains(&ex.labels.toolbelt.as_str()) {
                return Err(invalid(
                    "toolbelt_label",
                    format!("{path}.labels.toolbelt"),
                    format!("`{}` is not none, cli, mcp or sdk", ex.labels.toolbelt),
                ));
            }
            let mut controls = Seen::new();
            for (j, c) in ex.controls.iter().enumerate() {
                if !EXECUTOR_CONTROLS.contains(&c.as_str()) {
                    return Err(ManifestError::NewerManifest {
                        kind: "executor control",
                        field: c.clone(),
                        location: format!(" at {path}.controls[{j}]"),
                    });
                }
                controls.claim(
                    "executor_control_duplicate",
                    c,
                    &format!("{path}.controls[{j}]"),
                )?;
            }
            if !EXECUTOR_POOLS.contains(&ex.pool.as_str()) {
                return Err(invalid(
                    "executor_pool",
                    format!("{path}.pool"),
                    format!("`{}` is not \"\" (agent turns) or \"jobs\"", ex.pool),
                ));
            }
            if !ex.launch_names.is_empty() && !ex.has_control("interactive_launch") {
                return Err(invalid(
                    "launch_names_control",
                    format!("{path}.launch_names"),
                    format!(
                        "executor `{}` has launch names but not the interactive_launch control",
                        ex.name
                    ),
                ));
            }
            for (j, ln) in ex.launch_names.iter().enumerate() {
                let lpath = format!("{path}.launch_names[{j}]");
                if !is_identifier(ln) {
                    return Err(invalid(
                        "launch_name_invalid",
                        &lpath,
                        format!("`{ln}` is not a name"),
                    ));
                }
                if p.executors.iter().any(|e| &e.name == ln) {
                    return Err(invalid(
                        "launch_name_duplicate",
                        &lpath,
                        format!("`{ln}` is the name of an executor of this manifest"),
                    ));
                }
                launch.claim("launch_name_duplicate", ln, &lpath)?;
            }
        }
        Ok(())
    }

    fn validate_resources(&self) -> Result<(), ManifestError> {
        for (i, res) in self.provides.resources.iter().enumerate() {
            let path = format!("provides.resources[{i}]");
            if res.modes.is_empty() {
                return Err(invalid(
                    "resource_modes",
                    format!("{path}.modes"),
                    format!("resource type `{}` offers no mode", res.type_name),
                ));
            }
            let mut seen = Seen::new();
            for (j, mode) in res.modes.iter().enumerate() {
                let mpath = format!("{path}.modes[{j}]");
                if !RESOURCE_MODES.contains(&mode.as_str()) {
                    return Err(invalid(
                        "resource_modes",
                        &mpath,
                        format!("`{mode}` is not shared, work or fresh"),
                    ));
                }
                seen.claim("resource_modes", mode, &mpath)?;
            }
            validate_settings(&format!("{path}.settings"), &res.settings)?;
        }
        Ok(())
    }

    fn validate_tasks_checks_probes(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, task) in p.tasks.iter().enumerate() {
            if task.interval_s < 1 {
                return Err(invalid(
                    "task_interval",
                    format!("provides.tasks[{i}].interval_s"),
                    format!("{} is less than one second", task.interval_s),
                ));
            }
        }
        let mut checks = Seen::new();
        for (i, check) in p.checks.iter().enumerate() {
            let path = format!("provides.checks[{i}].name");
            if !is_identifier(&check.name) {
                return Err(invalid(
                    "name_syntax",
                    &path,
                    format!("`{}` is not an identifier", check.name),
                ));
            }
            checks.claim("name_duplicate", &check.name, &path)?;
        }
        let mut probes = Seen::new();
        for (i, probe) in p.probes.iter().enumerate() {
            let path = format!("provides.probes[{i}]");
            if !is_identifier(&probe.name) {
                return Err(invalid(
                    "name_syntax",
                    format!("{path}.name"),
                    format!("`{}` is not an identifier", probe.name),
                ));
            }
            probes.claim("name_duplicate", &probe.name, &format!("{path}.name"))?;
            if !is_one_line(&probe.summary) || probe.summary.len() > MAX_SUMMARY_BYTES {
                return Err(invalid(
                    "probe_summary",
                    format!("{path}.summary"),
                    format!("must be one line of at most {MAX_SUMMARY_BYTES} bytes"),
                ));
            }
            let mut args = Seen::new();
            for (j, arg) in probe.args.iter().enumerate() {
                let apath = format!("{path}.args[{j}]");
                if !is_config_field(&arg.name) {
                    return Err(invalid(
                        "name_syntax",
                        format!("{apath}.name"),
                        format!("`{}` is not an argument name", arg.name),
                    ));
                }
                args.claim("name_duplicate", &arg.name, &format!("{apath}.name"))?;
                check_help(&format!("{apath}.help"), &arg.help)?;
            }
        }
        Ok(())
    }

    fn validate_schemas(&self) -> Result<(), ManifestError> {
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

    fn validate_pages(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        if p.pages.len() > MAX_PAGES {
            return Err(invalid(
                "pages_count",
                "provides.pages",
                format!("{} pages, more than {MAX_PAGES}", p.pages.len()),
            ));
        }
        for (i, page) in p.pages.iter().enumerate() {
            let path = format!("provides.pages[{i}]");
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
            if !p.work_kinds.iter().any(|k| k.name == page.work_kind) {
                return Err(invalid(
                    "page_reference",
                    format!("{path}.work_kind"),
                    format!("`{}` is not a work kind of this manifest", page.work_kind),
                ));
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
            if page.start.is_empty() {
                return Err(invalid(
                    "page_actions",
                    format!("{path}.start"),
                    "names no action",
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

    fn validate_fields_everywhere(&self) -> Result<(), ManifestError> {
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
