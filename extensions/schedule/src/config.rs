//! Entry configs, route configs and timer specs: read by `Deserialize` types
//! ([`sdk::config::parse`]; strict but for a timer spec) and checked, so every error
//! names its field as a JSON pointer into the config (`/jobs/1/cron`).

use crate::cron::Cron;
use crate::time::Secs;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The shortest interval an `every_s` job may have, in seconds.
pub const MIN_EVERY_S: u64 = 10;
/// The longest interval an `every_s` job may have, in seconds (366 days).
pub const MAX_EVERY_S: u64 = 366 * 86_400;
/// The longest job name, in bytes.
pub const MAX_JOB_NAME_BYTES: usize = 64;
/// The longest binding name, in bytes.
pub const MAX_BINDING_BYTES: usize = 128;
/// The largest `input` of a job, in bytes of compact JSON.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// The only time zone schedules are read in, for now.
pub const UTC: &str = "UTC";

pub use sdk::config::ConfigError;

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// On a cron expression (its text as written, trimmed, and parsed).
    Cron(String, Cron),
    /// Every so many seconds, counted from the last fire.
    Every(u64),
}

impl When {
    /// The first fire time strictly after `after`; `None` past the year 9999.
    pub fn next_after(&self, after: Secs) -> Option<Secs> {
        match self {
            When::Cron(_, cron) => cron.next_after(after),
            When::Every(s) => {
                let s = Secs::try_from(*s).ok()?;
                after.checked_add(s).filter(|t| *t <= crate::time::MAX_SECS)
            }
        }
    }

    /// The schedule in words: `cron 0 3 * * *` or `every 60s`.
    pub fn describe(&self) -> String {
        match self {
            When::Cron(text, _) => format!("cron {text}"),
            When::Every(s) => format!("every {s}s"),
        }
    }
}

/// One job of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The job's name, unique in its entry.
    pub name: String,
    /// When it runs.
    pub when: When,
    /// What each run carries in its payload's `input`.
    pub input: Option<Value>,
}

/// A `schedule` entry's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryConfig {
    /// The binding every job of the entry runs through.
    pub binding: String,
    /// The jobs.
    pub jobs: Vec<Job>,
}

/// A route's config for handler `schedule`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig {
    /// Only runs of this entry.
    pub entry: Option<String>,
    /// Only runs of this job.
    pub job: Option<String>,
}

/// True for a job name: 1–64 bytes of `[a-z0-9_-]`.
pub fn is_job_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_JOB_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// An entry's config as written (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    binding: Option<String>,
    #[serde(default)]
    jobs: Option<Vec<RawJob>>,
    #[serde(default)]
    timezone: Option<String>,
}

/// A job as written (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: String,
    #[serde(default)]
    cron: Option<String>,
    #[serde(default)]
    every_s: Option<u64>,
    #[serde(default, deserialize_with = "sdk::config::present")]
    input: Option<Value>,
    #[serde(default)]
    timezone: Option<String>,
}

/// A route's config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    entry: Option<String>,
    #[serde(default)]
    job: Option<String>,
}

/// A timer's spec as stored. Unknown fields are ignored: a later release may add
/// some to the specs it arms, and an older one must still read them back.
#[derive(Debug, Deserialize)]
struct RawSpec {
    #[serde(default)]
    entry: Option<String>,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    binding: Option<String>,
    #[serde(default)]
    cron: Option<String>,
    #[serde(default)]
    every_s: Option<u64>,
    #[serde(default, deserialize_with = "sdk::config::present")]
    input: Option<Value>,
}

/// Reads `config`, an object, as `T`.
fn read<T: serde::de::DeserializeOwned>(config: &Value) -> Result<T, ConfigError> {
    if !config.is_object() {
        return Err(ConfigError::whole("must be an object"));
    }
    sdk::config::parse(config)
}

fn timezone(tz: Option<&str>, field: &str) -> Result<(), ConfigError> {
    match tz {
        None | Some(UTC) => Ok(()),
        Some(other) => Err(ConfigError::new(
            field,
            format!("{other:?} is not supported: schedules are read in UTC only (\"UTC\")"),
        )),
    }
}

/// Checks a binding name: 1–128 bytes, no blanks or control characters.
pub fn check_binding(binding: &str) -> Result<(), String> {
    if binding.is_empty() {
        return Err("must name a binding of the scope".into());
    }
    if binding.len() > MAX_BINDING_BYTES {
        return Err(format!(
            "{} bytes, over the limit of {MAX_BINDING_BYTES}",
            binding.len()
        ));
    }
    if binding.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain blanks or control characters".into());
    }
    Ok(())
}

fn parse_job(raw: RawJob, base: &str) -> Result<Job, ConfigError> {
    let name = raw.name;
    if !is_job_name(&name) {
        return Err(ConfigError::new(
            format!("{base}/name"),
            format!("{name:?} is not a job name (1-{MAX_JOB_NAME_BYTES} of a-z, 0-9, _ and -)"),
        ));
    }
    let when = match (raw.cron, raw.every_s) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                base,
                "has both cron and every_s; give exactly one",
            ))
        }
        (None, None) => {
            return Err(ConfigError::new(
                base,
                "has neither cron nor every_s; give exactly one",
            ))
        }
        (Some(cron), None) => {
            let text = cron.trim();
            let parsed = Cron::parse(text)
                .map_err(|e| ConfigError::new(format!("{base}/cron"), e.to_string()))?;
            When::Cron(text.to_string(), parsed)
        }
        (None, Some(s)) => {
            if !(MIN_EVERY_S..=MAX_EVERY_S).contains(&s) {
                return Err(ConfigError::new(
                    format!("{base}/every_s"),
                    format!("{s} is outside {MIN_EVERY_S}-{MAX_EVERY_S} seconds"),
                ));
            }
            When::Every(s)
        }
    };
    if let Some(v) = &raw.input {
        let size = v.to_string().len();
        if size > MAX_INPUT_BYTES {
            return Err(ConfigError::new(
                format!("{base}/input"),
                format!("{size} bytes of JSON, over the limit of {MAX_INPUT_BYTES}"),
            ));
        }
    }
    timezone(raw.timezone.as_deref(), &format!("{base}/timezone"))?;
    Ok(Job {
        name,
        when,
        input: raw.input,
    })
}

/// Parses and checks a `schedule` entry's config:
/// `{"binding": "...", "timezone"?: "UTC", "jobs": [{"name", "cron" | "every_s",
/// "input"?, "timezone"?}]}`. Unknown fields are refused.
pub fn parse_entry_config(config: &Value) -> Result<EntryConfig, ConfigError> {
    let raw: RawEntry = read(config)?;
    let binding = raw
        .binding
        .ok_or_else(|| ConfigError::new("/binding", "is required: the binding the jobs run on"))?;
    check_binding(&binding).map_err(|why| ConfigError::new("/binding", why))?;
    timezone(raw.timezone.as_deref(), "/timezone")?;
    let jobs = raw
        .jobs
        .ok_or_else(|| ConfigError::new("/jobs", "is required (a list of jobs)"))?;
    let mut names = BTreeSet::new();
    let mut parsed = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.into_iter().enumerate() {
        let job = parse_job(job, &format!("/jobs/{i}"))?;
        if !names.insert(job.name.clone()) {
            return Err(ConfigError::new(
                format!("/jobs/{i}/name"),
                format!(
                    "{:?} names an earlier job too; job names are unique",
                    job.name
                ),
            ));
        }
        parsed.push(job);
    }
    Ok(EntryConfig {
        binding,
        jobs: parsed,
    })
}

/// Parses a route config for handler `schedule`: `{"entry"?, "job"?}` (null or
/// absent is `{}`). Unknown fields are refused.
pub fn parse_route_config(config: &Value) -> Result<RouteConfig, ConfigError> {
    if config.is_null() {
        return Ok(RouteConfig::default());
    }
    let RawRoute { entry, job } = read(config)?;
    if entry.as_deref().is_some_and(str::is_empty) {
        return Err(ConfigError::new("/entry", "must not be empty"));
    }
    if let Some(job) = &job {
        if !is_job_name(job) {
            return Err(ConfigError::new(
                "/job",
                format!("{job:?} is not a job name"),
            ));
        }
    }
    Ok(RouteConfig { entry, job })
}

/// A timer's spec, as `configure` arms it and `recurrence.next` reads it back:
/// `{"entry", "job", "binding", "cron" | "every_s", "input"?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerSpec {
    /// The entry.
    pub entry: String,
    /// The job.
    pub job: String,
    /// The binding the job runs on.
    pub binding: String,
    /// When it runs.
    pub when: When,
    /// The job's input.
    pub input: Option<Value>,
}

impl TimerSpec {
    /// The spec of `job` of entry `entry`.
    pub fn new(entry: &str, binding: &str, job: &Job) -> TimerSpec {
        TimerSpec {
            entry: entry.to_string(),
            job: job.name.clone(),
            binding: binding.to_string(),
            when: job.when.clone(),
            input: job.input.clone(),
        }
    }

    /// The timer's key: `<entry>/<job>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.entry, self.job)
    }

    /// The spec as JSON.
    pub fn to_value(&self) -> Value {
        let mut v = json!({"entry": self.entry, "job": self.job, "binding": self.binding});
        match &self.when {
            When::Cron(text, _) => v["cron"] = json!(text),
            When::Every(s) => v["every_s"] = json!(s),
        }
        if let Some(input) = &self.input {
            v["input"] = input.clone();
        }
        v
    }

    /// Reads a spec back. Unknown fields are ignored (a later release may add some);
    /// the schedule is checked as a job's is.
    pub fn from_value(spec: &Value) -> Result<TimerSpec, ConfigError> {
        let raw: RawSpec = read(spec)?;
        let text = |key: &str, v: Option<String>| -> Result<String, ConfigError> {
            match v {
                Some(s) if !s.is_empty() => Ok(s),
                _ => Err(ConfigError::new(format!("/{key}"), "is required")),
            }
        };
        let entry = text("entry", raw.entry)?;
        let job = text("job", raw.job)?;
        let binding = text("binding", raw.binding)?;
        let parsed = parse_job(
            RawJob {
                name: job.clone(),
                cron: raw.cron,
                every_s: raw.every_s,
                input: None,
                timezone: None,
            },
            "",
        )?;
        Ok(TimerSpec {
            entry,
            job,
            binding,
            when: parsed.when,
            input: raw.input,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(config: Value) -> String {
        match parse_entry_config(&config) {
            Ok(c) => panic!("{config} parsed as {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_full_entry() {
        let c = parse_entry_config(&json!({
            "binding": "agent",
            "timezone": "UTC",
            "jobs": [
                {"name": "nightly", "cron": " 0 3 * * * ", "input": {"report": "daily"}},
                {"name": "poll", "every_s": 60, "timezone": "UTC"},
            ],
        }))
        .unwrap();
        assert_eq!(c.binding, "agent");
        assert_eq!(c.jobs.len(), 2);
        assert_eq!(c.jobs[0].name, "nightly");
        assert_eq!(c.jobs[0].when.describe(), "cron 0 3 * * *");
        assert_eq!(c.jobs[0].input, Some(json!({"report": "daily"})));
        assert_eq!(c.jobs[1].when, When::Every(60));
        assert_eq!(c.jobs[1].input, None);
        // No jobs at all is a valid, idle entry.
        assert!(parse_entry_config(&json!({"binding": "b", "jobs": []}))
            .unwrap()
            .jobs
            .is_empty());
    }

    #[test]
    fn errors_point_at_the_field() {
        assert_eq!(err(json!([])), "the config: must be an object");
        assert_eq!(
            err(json!({"jobs": []})),
            "/binding: is required: the binding the jobs run on"
        );
        assert_eq!(
            err(json!({"binding": "", "jobs": []})),
            "/binding: must name a binding of the scope"
        );
        assert_eq!(
            err(json!({"binding": "a b", "jobs": []})),
            "/binding: must not contain blanks or control characters"
        );
        assert_eq!(
            err(json!({"binding": 3, "jobs": []})),
            "/binding: must be a string"
        );
        assert_eq!(
            err(json!({"binding": "b"})),
            "/jobs: is required (a list of jobs)"
        );
        assert_eq!(
            err(json!({"binding": "b", "jobs": {}})),
            "/jobs: must be an array"
        );
        assert_eq!(
            err(json!({"binding": "b", "jobs": [], "bindng": "x"})),
            "/bindng: unknown field (known: binding, jobs, timezone)"
        );
        assert_eq!(
            err(json!({"binding": "b", "jobs": [], "a/b": 1})),
            "/a~1b: unknown field (known: binding, jobs, timezone)"
        );
        assert_eq!(
            err(json!({"binding": "b", "jobs": [], "timezone": "Europe/Paris"})),
            "/timezone: \"Europe/Paris\" is not supported: schedules are read in UTC only (\"UTC\")"
        );
        let jobs = |jobs: Value| err(json!({"binding": "b", "jobs": jobs}));
        assert_eq!(jobs(json!([7])), "/jobs/0: must be an object");
        assert_eq!(
            jobs(json!([{"cron": "* * * * *"}])),
            "/jobs/0/name: is required"
        );
        assert_eq!(
            jobs(json!([{"name": "ok", "every_s": 60}, {"name": "Nightly", "cron": "* * * * *"}])),
            "/jobs/1/name: \"Nightly\" is not a job name (1-64 of a-z, 0-9, _ and -)"
        );
        assert_eq!(
            jobs(json!([{"name": "x".repeat(65), "every_s": 60}])),
            format!(
                "/jobs/0/name: \"{}\" is not a job name (1-64 of a-z, 0-9, _ and -)",
                "x".repeat(65)
            )
        );
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 60}, {"name": "a", "every_s": 70}])),
            "/jobs/1/name: \"a\" names an earlier job too; job names are unique"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 60, "cron": "* * * * *"}])),
            "/jobs/0: has both cron and every_s; give exactly one"
        );
        assert_eq!(
            jobs(json!([{"name": "a"}])),
            "/jobs/0: has neither cron nor every_s; give exactly one"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 60}, {"name": "b", "cron": "0 3 32 * *"}])),
            "/jobs/1/cron: the day-of-month field: 32 is outside 1-31"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "cron": "0 3 * *"}])),
            "/jobs/0/cron: has 4 fields, needs 5 (minute hour day-of-month month day-of-week)"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "cron": 5}])),
            "/jobs/0/cron: must be a string"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 9}])),
            "/jobs/0/every_s: 9 is outside 10-31622400 seconds"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 31_622_401}])),
            "/jobs/0/every_s: 31622401 is outside 10-31622400 seconds"
        );
        for bad in [json!(-60), json!(60.5), json!("60")] {
            assert_eq!(
                jobs(json!([{"name": "a", "every_s": bad}])),
                "/jobs/0/every_s: must be a whole, non-negative number"
            );
        }
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 60, "timezone": "CET"}])),
            "/jobs/0/timezone: \"CET\" is not supported: schedules are read in UTC only (\"UTC\")"
        );
        assert_eq!(
            jobs(json!([{"name": "a", "every_s": 60, "inputs": {}}])),
            "/jobs/0/inputs: unknown field (known: name, cron, every_s, input, timezone)"
        );
        assert!(
            jobs(json!([{"name": "a", "every_s": 60, "input": "x".repeat(70_000)}]))
                .starts_with("/jobs/0/input: 70002 bytes of JSON, over the limit of 65536")
        );
    }

    #[test]
    fn route_configs() {
        assert_eq!(
            parse_route_config(&Value::Null).unwrap(),
            RouteConfig::default()
        );
        assert_eq!(
            parse_route_config(&json!({})).unwrap(),
            RouteConfig::default()
        );
        assert_eq!(
            parse_route_config(&json!({"entry": "jobs", "job": "nightly"})).unwrap(),
            RouteConfig {
                entry: Some("jobs".into()),
                job: Some("nightly".into())
            }
        );
        let e = |v: Value| parse_route_config(&v).unwrap_err().to_string();
        assert_eq!(
            e(json!({"entyr": "x"})),
            "/entyr: unknown field (known: entry, job)"
        );
        assert_eq!(e(json!({"entry": ""})), "/entry: must not be empty");
        assert_eq!(e(json!({"entry": 1})), "/entry: must be a string");
        assert_eq!(e(json!({"job": "A"})), "/job: \"A\" is not a job name");
        assert_eq!(e(json!("x")), "the config: must be an object");
    }

    #[test]
    fn specs_round_trip() {
        let c = parse_entry_config(&json!({
            "binding": "agent",
            "jobs": [
                {"name": "nightly", "cron": "0 3 * * *", "input": {"n": 1}},
                {"name": "poll", "every_s": 60},
            ],
        }))
        .unwrap();
        let nightly = TimerSpec::new("jobs", &c.binding, &c.jobs[0]);
        assert_eq!(nightly.key(), "jobs/nightly");
        assert_eq!(
            nightly.to_value(),
            json!({"entry": "jobs", "job": "nightly", "binding": "agent", "cron": "0 3 * * *", "input": {"n": 1}})
        );
        assert_eq!(TimerSpec::from_value(&nightly.to_value()).unwrap(), nightly);
        let poll = TimerSpec::new("jobs", &c.binding, &c.jobs[1]);
        assert_eq!(
            poll.to_value(),
            json!({"entry": "jobs", "job": "poll", "binding": "agent", "every_s": 60})
        );
        assert_eq!(TimerSpec::from_value(&poll.to_value()).unwrap(), poll);
        // Unknown fields of a later release are ignored.
        let mut later = poll.to_value();
        later["jitter_s"] = json!(5);
        assert_eq!(TimerSpec::from_value(&later).unwrap(), poll);
        // Broken specs say why.
        let e = |v: Value| TimerSpec::from_value(&v).unwrap_err().to_string();
        assert_eq!(e(json!(null)), "the config: must be an object");
        assert_eq!(
            e(json!({"job": "a", "binding": "b", "every_s": 60})),
            "/entry: is required"
        );
        assert_eq!(
            e(json!({"entry": "e", "job": "a", "binding": "b"})),
            "the config: has neither cron nor every_s; give exactly one"
        );
        assert_eq!(
            e(json!({"entry": "e", "job": "a", "binding": "b", "cron": "61 * * * *"})),
            "/cron: the minute field: 61 is outside 0-59"
        );
    }

    #[test]
    fn intervals_step_from_after() {
        assert_eq!(When::Every(60).next_after(1000), Some(1060));
        assert_eq!(When::Every(60).next_after(crate::time::MAX_SECS - 10), None);
    }
}
