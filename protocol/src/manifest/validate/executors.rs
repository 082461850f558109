//! The rules on what a package runs: executors, resources, tasks, checks and probes.

use super::*;

impl Manifest {
    pub(super) fn validate_executors(&self) -> Result<(), ManifestError> {
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

    pub(super) fn validate_resources(&self) -> Result<(), ManifestError> {
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

    pub(super) fn validate_tasks_checks_probes(&self) -> Result<(), ManifestError> {
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
}
