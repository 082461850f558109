//! The hours of admission: days of the week and a window of the day, in a time zone
//! read from the system's zoneinfo (`$TZDIR`, else `/usr/share/zoneinfo`).

use jiff::tz::TimeZone;
use sdk::config::ConfigError;
use serde::Deserialize;
use std::io::Read;
use std::path::PathBuf;

/// The days, in the order of the week (Monday first), as a config writes them.
pub const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
/// The largest zoneinfo file read, in bytes.
const MAX_TZIF_BYTES: u64 = 1 << 20;
/// The longest zone name, in bytes.
const MAX_ZONE_BYTES: usize = 128;

/// A day of the week, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// `admission.hours` as written (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHours {
    days: Vec<Day>,
    from: String,
    to: String,
    #[serde(default)]
    zone: Option<String>,
}

/// The hours Work is admitted in: on `days`, from `from` (included) to `to`
/// (excluded), local time of `zone`.
#[derive(Debug, Clone)]
pub struct Hours {
    /// Which days (Monday first) are open.
    pub days: [bool; 7],
    /// The first open minute of the day (0-1439).
    pub from: u32,
    /// The first closed minute after it (1-1440).
    pub to: u32,
    /// The zone's name, as written (`UTC` by default).
    pub zone: String,
    tz: TimeZone,
}

/// Minutes since midnight of `HH:MM` (`24:00` only when `end`).
fn minutes(text: &str, end: bool) -> Option<u32> {
    let b = text.as_bytes();
    if b.len() != 5 || b[2] != b':' || ![0, 1, 3, 4].iter().all(|&i| b[i].is_ascii_digit()) {
        return None;
    }
    let h = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
    let m = u32::from(b[3] - b'0') * 10 + u32::from(b[4] - b'0');
    match (h, m) {
        (24, 0) if end => Some(1440),
        (0..=23, 0..=59) => Some(h * 60 + m),
        _ => None,
    }
}

fn hhmm(minutes: u32) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// Where zone files are read from.
fn zoneinfo_dir() -> PathBuf {
    std::env::var_os("TZDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/usr/share/zoneinfo"), PathBuf::from)
}

/// The time zone named `name`: `UTC`, or a zone of the system's zoneinfo
/// (`Europe/Paris`).
pub fn load_zone(name: &str) -> Result<TimeZone, String> {
    if matches!(name, "UTC" | "Etc/UTC" | "Z") {
        return Ok(TimeZone::UTC);
    }
    let well_formed = !name.is_empty()
        && name.len() <= MAX_ZONE_BYTES
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.'))
        });
    if !well_formed {
        return Err(format!(
            "{name:?} is not a time zone name (Area/City, as Europe/Paris, or UTC)"
        ));
    }
    let dir = zoneinfo_dir();
    let path = dir.join(name);
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_TZIF_BYTES).read_to_end(&mut bytes))
        .map_err(|e| format!("no time zone named {name:?} in {} ({e})", dir.display()))?;
    TimeZone::tzif(name, &bytes)
        .map_err(|e| format!("{} is not a time zone file: {e}", path.display()))
}

impl Hours {
    /// Checks what was written; errors point inside `admission.hours` (`/from`).
    pub(crate) fn parse(raw: RawHours) -> Result<Hours, ConfigError> {
        if raw.days.is_empty() {
            return Err(ConfigError::new(
                "/days",
                "names no day; give at least one of mon, tue, wed, thu, fri, sat, sun",
            ));
        }
        let mut days = [false; 7];
        for (i, d) in raw.days.iter().enumerate() {
            let index = *d as usize;
            if days[index] {
                return Err(ConfigError::new(
                    format!("/days/{i}"),
                    format!("{} is named twice", DAYS[index]),
                ));
            }
            days[index] = true;
        }
        let from = minutes(&raw.from, false).ok_or_else(|| {
            ConfigError::new(
                "/from",
                format!("{:?} is not a time of day HH:MM (00:00 to 23:59)", raw.from),
            )
        })?;
        let to = minutes(&raw.to, true).ok_or_else(|| {
            ConfigError::new(
                "/to",
                format!("{:?} is not a time of day HH:MM (00:01 to 24:00)", raw.to),
            )
        })?;
        if to <= from {
            return Err(ConfigError::new(
                "/to",
                format!(
                    "{} is not after from ({}): the hours lie within one day",
                    hhmm(to),
                    hhmm(from)
                ),
            ));
        }
        let zone = raw.zone.unwrap_or_else(|| "UTC".to_string());
        let tz = load_zone(&zone).map_err(|e| ConfigError::new("/zone", e))?;
        Ok(Hours {
            days,
            from,
            to,
            zone,
            tz,
        })
    }

    /// Whether Work is admitted at `at`.
    pub fn is_open(&self, at: jiff::Timestamp) -> bool {
        let local = at.to_zoned(self.tz.clone());
        let Ok(day) = usize::try_from(local.weekday().to_monday_zero_offset()) else {
            return false;
        };
        let minute = u32::try_from(i32::from(local.hour()) * 60 + i32::from(local.minute()))
            .unwrap_or(u32::MAX);
        self.days.get(day).copied().unwrap_or(false) && minute >= self.from && minute < self.to
    }

    /// The hours in words: `mon,tue,wed 09:00-17:00 Europe/Paris`.
    pub fn describe(&self) -> String {
        let days: Vec<&str> = DAYS
            .iter()
            .zip(self.days)
            .filter(|(_, open)| *open)
            .map(|(d, _)| *d)
            .collect();
        format!(
            "{} {}-{} {}",
            days.join(","),
            hhmm(self.from),
            hhmm(self.to),
            self.zone
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn hours(v: serde_json::Value) -> Result<Hours, ConfigError> {
        Hours::parse(sdk::config::parse::<RawHours>(&v).unwrap())
    }

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn open_on_the_days_within_the_window_in_utc() {
        let h = hours(
            json!({"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "to": "17:00"}),
        )
        .unwrap();
        assert_eq!(h.describe(), "mon,tue,wed,thu,fri 09:00-17:00 UTC");
        // 2026-10-26 is a Monday.
        assert!(!h.is_open(at("2026-10-26T08:59:59Z")));
        assert!(h.is_open(at("2026-10-26T09:00:00Z")));
        assert!(h.is_open(at("2026-10-26T16:59:59Z")));
        assert!(!h.is_open(at("2026-10-26T17:00:00Z")));
        // Saturday.
        assert!(!h.is_open(at("2026-10-31T10:00:00Z")));
        let all_day = hours(json!({"days": ["sun"], "from": "00:00", "to": "24:00"})).unwrap();
        assert!(all_day.is_open(at("2026-11-01T23:59:59Z")));
        assert!(!all_day.is_open(at("2026-11-02T00:00:00Z")));
    }

    #[test]
    fn a_zone_of_the_system_moves_the_window() {
        // Europe/Paris is UTC+1 in winter and UTC+2 in summer.
        let h =
            hours(json!({"days": ["mon"], "from": "09:00", "to": "17:00", "zone": "Europe/Paris"}))
                .unwrap();
        assert!(!h.is_open(at("2026-11-02T07:59:00Z")));
        assert!(h.is_open(at("2026-11-02T08:00:00Z")));
        assert!(h.is_open(at("2026-06-01T07:00:00Z")));
        assert!(!h.is_open(at("2026-06-01T15:00:00Z")));
        // 23:30 UTC on Sunday is Monday 00:30 in Paris, outside 09-17.
        assert!(!h.is_open(at("2026-11-01T23:30:00Z")));
    }

    #[test]
    fn bad_hours_name_their_field() {
        for (v, pointer, reason) in [
            (
                json!({"days": [], "from": "09:00", "to": "17:00"}),
                "/days",
                "names no day; give at least one of mon, tue, wed, thu, fri, sat, sun",
            ),
            (
                json!({"days": ["mon", "mon"], "from": "09:00", "to": "17:00"}),
                "/days/1",
                "mon is named twice",
            ),
            (
                json!({"days": ["mon"], "from": "24:00", "to": "17:00"}),
                "/from",
                "\"24:00\" is not a time of day HH:MM (00:00 to 23:59)",
            ),
            (
                json!({"days": ["mon"], "from": "09:00", "to": "17:60"}),
                "/to",
                "\"17:60\" is not a time of day HH:MM (00:01 to 24:00)",
            ),
            (
                json!({"days": ["mon"], "from": "17:00", "to": "09:00"}),
                "/to",
                "09:00 is not after from (17:00): the hours lie within one day",
            ),
            (
                json!({"days": ["mon"], "from": "09:00", "to": "17:00", "zone": "../etc/passwd"}),
                "/zone",
                "\"../etc/passwd\" is not a time zone name (Area/City, as Europe/Paris, or UTC)",
            ),
        ] {
            let e = hours(v.clone()).unwrap_err();
            assert_eq!(
                (e.pointer.as_str(), e.reason.as_str()),
                (pointer, reason),
                "{v}"
            );
        }
        let e =
            hours(json!({"days": ["mon"], "from": "09:00", "to": "17:00", "zone": "Mars/Olympus"}))
                .unwrap_err();
        assert_eq!(e.pointer, "/zone");
        assert!(
            e.reason
                .starts_with("no time zone named \"Mars/Olympus\" in "),
            "{}",
            e.reason
        );
        let e = sdk::config::parse::<RawHours>(
            &json!({"days": ["monday"], "from": "09:00", "to": "17:00"}),
        )
        .unwrap_err();
        assert_eq!(e.pointer, "/days/0");
        assert_eq!(e.reason, "must be one of mon, tue, wed, thu, fri, sat, sun");
    }
}
