//! The rules on what a package declares for the bus: event families and types, routes
//! and Work kinds, operations and toolsets.

use super::*;

impl Manifest {
    pub(super) fn validate_families_and_types(&self) -> Result<(), ManifestError> {
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

    pub(super) fn validate_routes_and_kinds(&self) -> Result<(), ManifestError> {
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

    pub(super) fn validate_operations(&self) -> Result<(), ManifestError> {
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

    pub(super) fn validate_toolsets(&self) -> Result<(), ManifestError> {
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
}
