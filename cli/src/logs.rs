//! `logs [COMPONENT]`: the daemons' logs, from the files `up` writes or from the
//! journal; `logs --work ID`: one Work's story across them.

use std::path::Path;

use crate::output::{Failure, Out};

/// The daemons `logs` knows: those `up` starts.
pub const COMPONENTS: [&str; 6] = crate::up::DAEMONS;

/// `logs [COMPONENT]`: under `up` (the bus is `<state>/run/bus.sock` and
/// `<state>/logs/` exists), the log files `up` writes; otherwise the journal
/// (`journalctl -u open-conduit-<component>`, or every unit of the suite).
pub fn logs(bus: &Path, component: Option<&str>, lines: usize) -> Out {
    if let Some(c) = component {
        if !COMPONENTS.contains(&c) {
            return Err(Failure {
                message: format!("no component {c:?} (one of {})", COMPONENTS.join(", ")),
                status: 1,
            });
        }
    }
    let state = bus.parent().and_then(Path::parent);
    let dir = state.map(|s| s.join("logs")).filter(|d| d.is_dir());
    if let Some(dir) = dir {
        let wanted: Vec<&str> = component.map_or(COMPONENTS.to_vec(), |c| vec![c]);
        for c in wanted {
            let text = up_log(&dir, c);
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            for l in &all[from..] {
                println!("{c:>10} | {l}");
            }
        }
        return Ok(());
    }
    let mut cmd = std::process::Command::new("journalctl");
    cmd.args(["--no-pager", "-n", &lines.to_string()]);
    match component {
        Some(c) => {
            cmd.arg("-u").arg(format!("open-conduit-{c}.service"));
        }
        None => {
            for c in COMPONENTS {
                cmd.arg("-u").arg(format!("open-conduit-{c}.service"));
            }
        }
    }
    let status = cmd.status().map_err(|e| {
        format!(
            "journalctl: {e} (is this a systemd machine? under `up`, point --bus at its socket)"
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("journalctl: {status}").into())
    }
}

/// A daemon's log under `up`: the file rotated away (`<name>.log.1`, see
/// `uplog`) then the current one, oldest first; empty when neither is there.
fn up_log(dir: &Path, component: &str) -> String {
    let mut text = String::new();
    for name in [format!("{component}.log.1"), format!("{component}.log")] {
        if let Ok(t) = std::fs::read_to_string(dir.join(name)) {
            text.push_str(&t);
        }
    }
    text
}

/// At most this many of a Work's Events join its story (each is one more match for
/// journalctl; the first, which made the Work, is the one that matters).
pub const MAX_STORY_EVENTS: usize = 64;

/// The first Events of Work `work_id` (at most [`MAX_STORY_EVENTS`]).
fn story_events(bus: &Path, work_id: &str) -> Result<Vec<busapi::store::StoredEvent>, Failure> {
    let page = crate::output::call(
        bus,
        &busapi::store::WorkEventsRequest {
            work_id: work_id.to_owned(),
            after: 0,
            limit: Some(MAX_STORY_EVENTS as u32),
            scopes: None,
        },
    )?;
    Ok(page.events.into_iter().take(MAX_STORY_EVENTS).collect())
}

/// The story's first line, from the store: the Work's first Event and when it was
/// accepted (ingressd logs at most a few deliveries a second, so its own line may
/// be missing under load).
pub fn first_event_line(work_id: &str, first: Option<&busapi::store::StoredEvent>) -> String {
    match first {
        Some(e) => format!(
            "{work_id}: first event {} ({}, from {}{}) accepted at {}",
            e.id,
            e.event_type,
            e.source,
            e.delivery_id
                .as_deref()
                .map(|d| format!(", delivery {d}"))
                .unwrap_or_default(),
            e.accepted_at
        ),
        None => format!("{work_id}: no events"),
    }
}

/// The journal matches of a Work's story: its own lines (`OC_WORK_ID`), or the
/// intake's lines of its Events (`OC_EVENT_ID`), joined by journalctl's `+` (or).
pub fn story_matches(work_id: &str, events: &[String]) -> Vec<String> {
    let mut args = vec![format!("OC_WORK_ID={work_id}")];
    for e in events {
        args.push("+".into());
        args.push(format!("OC_EVENT_ID={e}"));
    }
    args
}

/// Whether a line of a log file `up` writes belongs to the story: it names the Work
/// or one of its Events as a field (`OC_WORK_ID=…`, `OC_EVENT_ID=…`).
pub fn in_story(line: &str, work_id: &str, events: &[String]) -> bool {
    let named = |field: &str, id: &str| {
        line.match_indices(field).any(|(i, f)| {
            let rest = &line[i + f.len()..];
            rest.strip_prefix(id).is_some_and(|after| {
                !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        })
    };
    named("OC_WORK_ID=", work_id) || events.iter().any(|e| named("OC_EVENT_ID=", e))
}

/// `logs --work ID`: the lines of every daemon (and of the packages, through
/// extrunner) that name Work ID or the Events that brought it, oldest first.
pub fn work_story(bus: &Path, id: &str, lines: usize) -> Out {
    let work_id = crate::lookup::resolve_work(bus, id)?;
    let stored = story_events(bus, &work_id)?;
    println!("{}", first_event_line(&work_id, stored.first()));
    let events: Vec<String> = stored.into_iter().map(|e| e.id).collect();
    let state = bus.parent().and_then(Path::parent);
    let dir = state.map(|s| s.join("logs")).filter(|d| d.is_dir());
    if let Some(dir) = dir {
        // Each line starts with its RFC 3339 time: sorting by it interleaves the
        // daemons' files in order (a stable sort keeps each file's own order).
        let mut story: Vec<(String, &str, String)> = Vec::new();
        for c in COMPONENTS {
            let text = up_log(&dir, c);
            for l in text.lines().filter(|l| in_story(l, &work_id, &events)) {
                let time = l.split_whitespace().next().unwrap_or_default().to_owned();
                story.push((time, c, l.to_owned()));
            }
        }
        story.sort_by(|a, b| a.0.cmp(&b.0));
        let from = story.len().saturating_sub(lines);
        for (_, c, l) in &story[from..] {
            println!("{c:>10} | {l}");
        }
        return Ok(());
    }
    let status = std::process::Command::new("journalctl")
        .args([
            "--no-pager",
            "-o",
            "short-iso-precise",
            "-n",
            &lines.to_string(),
        ])
        .args(story_matches(&work_id, &events))
        .status()
        .map_err(|e| {
            format!(
                "journalctl: {e} (is this a systemd machine? under `up`, point --bus at its socket)"
            )
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("journalctl: {status}").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_story_line_names_the_work_or_one_of_its_events_exactly() {
        let events = vec!["evt_ab12".to_string()];
        let w = "work_77aa";
        assert!(in_story("t INFO call{OC_WORK_ID=work_77aa}: x", w, &events));
        assert!(in_story(
            "t INFO x: delivery accepted OC_EVENT_ID=evt_ab12 path=/h",
            w,
            &events
        ));
        assert!(!in_story(
            "t INFO call{OC_WORK_ID=work_77aab}: x",
            w,
            &events
        ));
        assert!(!in_story("t INFO OC_EVENT_ID=evt_ab1 x", w, &events));
        assert!(!in_story("t INFO work_77aa mentioned in text", w, &events));
        assert_eq!(
            story_matches(w, &events),
            ["OC_WORK_ID=work_77aa", "+", "OC_EVENT_ID=evt_ab12"]
        );
    }
}
