//! Five-field cron expressions, as Vixie cron reads them, evaluated in UTC.
//!
//! `minute hour day-of-month month day-of-week`, separated by blanks. Each field is
//! a comma-separated list of `*`, a number `a`, a range `a-b`, or a step over `*`
//! or a range (`*/n`, `a-b/n`). Months may be written `jan`–`dec` and weekdays
//! `sun`–`sat` (any case); a weekday is 0–7, with both 0 and 7 Sunday. The macros
//! `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and
//! `@hourly` stand for their five fields.
//!
//! Day of month and day of week combine as in Vixie cron: when either field starts
//! with `*` (so `*/2` counts), a day must match both; when both are restricted, a
//! day matching either one fires (`0 0 1,15 * mon` is the 1st, the 15th and every
//! Monday).
//!
//! An expression that can never fire (`0 0 30 2 *`, `0 0 31 4,6 *`) is refused when
//! parsed, so [`Cron::next_after`] always finds a time before the year 9999 ends
//! unless `after` is that close to it.

use crate::time::{civil, days_in_month, field, secs_of, weekday, Secs, MIN_SECS};
use std::fmt;

/// The fields' names, in order, as errors name them.
pub const FIELD_NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The longest cron expression accepted, in bytes.
pub const MAX_CRON_BYTES: usize = 256;

/// Why an expression is not a cron expression: the field (when one is at fault)
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronError {
    /// The field at fault (`day-of-month`), or `None` for the expression as a whole.
    pub field: Option<&'static str>,
    /// What is wrong.
    pub why: String,
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "the {field} field: {}", self.why),
            None => f.write_str(&self.why),
        }
    }
}

impl std::error::Error for CronError {}

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64, // bits 0..=59
    hours: u32,   // bits 0..=23
    doms: u32,    // bits 1..=31
    months: u16,  // bits 1..=12
    dows: u8,     // bits 0..=6, Sunday 0
    dom_star: bool,
    dow_star: bool,
}

struct Spec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The value of the first name (1 for months, 0 for weekdays).
    names_from: u32,
}

const SPECS: [Spec; 5] = [
    Spec {
        name: FIELD_NAMES[0],
        min: 0,
        max: 59,
        names: &[],
        names_from: 0,
    },
    Spec {
        name: FIELD_NAMES[1],
        min: 0,
        max: 23,
        names: &[],
        names_from: 0,
    },
    Spec {
        name: FIELD_NAMES[2],
        min: 1,
        max: 31,
        names: &[],
        names_from: 0,
    },
    Spec {
        name: FIELD_NAMES[3],
        min: 1,
        max: 12,
        names: &MONTHS,
        names_from: 1,
    },
    Spec {
        name: FIELD_NAMES[4],
        min: 0,
        max: 7,
        names: &WEEKDAYS,
        names_from: 0,
    },
];

impl Spec {
    fn err(&self, why: impl Into<String>) -> CronError {
        CronError {
            field: Some(self.name),
            why: why.into(),
        }
    }

    fn value(&self, text: &str) -> Result<u32, CronError> {
        let v = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            text.parse::<u32>()
                .map_err(|_| self.err(format!("{text} is outside {}-{}", self.min, self.max)))?
        } else if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
            // i < 12, so it fits.
            i as u32 + self.names_from
        } else if text.is_empty() {
            return Err(self.err("a value is missing"));
        } else if self.names.is_empty() {
            return Err(self.err(format!("`{text}` is not a number")));
        } else {
            return Err(self.err(format!(
                "`{text}` is not a number or a name ({}-{})",
                self.names[0],
                self.names[self.names.len() - 1]
            )));
        };
        if v < self.min || v > self.max {
            return Err(self.err(format!("{v} is outside {}-{}", self.min, self.max)));
        }
        Ok(v)
    }

    /// The set of values a field's text selects, as bits, and whether it starts with
    /// `*`.
    fn parse(&self, text: &str) -> Result<(u64, bool), CronError> {
        let mut bits = 0u64;
        for element in text.split(',') {
            if element.is_empty() {
                return Err(self.err(format!("`{text}` has an empty list element")));
            }
            let (base, step) = match element.split_once('/') {
                Some((base, step)) => {
                    let n = if !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()) {
                        step.parse::<u32>().ok()
                    } else {
                        None
                    };
                    match n {
                        Some(n) if n >= 1 && n <= self.max => (base, n),
                        _ => {
                            return Err(self.err(format!(
                                "the step in `{element}` is not a number 1-{}",
                                self.max
                            )))
                        }
                    }
                }
                None => (element, 1),
            };
            let (lo, hi) = if base == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = base.split_once('-') {
                let (a, b) = (self.value(a)?, self.value(b)?);
                if a > b {
                    return Err(self.err(format!("the range `{base}` runs backwards")));
                }
                (a, b)
            } else {
                let v = self.value(base)?;
                if element.contains('/') {
                    return Err(self.err(format!(
                        "a step goes after `*` or a range (`*/{step}`, `{v}-{}/{step}`), not `{element}`",
                        self.max
                    )));
                }
                (v, v)
            };
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step;
            }
        }
        Ok((bits, text.starts_with('*')))
    }
}

fn macro_fields(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => return None,
    })
}

impl Cron {
    /// Parses an expression (see the module's documentation). The error names the
    /// field at fault.
    pub fn parse(text: &str) -> Result<Cron, CronError> {
        let whole = |why: String| CronError { field: None, why };
        if text.len() > MAX_CRON_BYTES {
            return Err(whole(format!(
                "{} bytes, over the limit of {MAX_CRON_BYTES}",
                text.len()
            )));
        }
        let trimmed = text.trim();
        let expanded = if trimmed.starts_with('@') {
            macro_fields(trimmed).ok_or_else(|| {
                whole(format!(
                    "`{trimmed}` is not one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
                ))
            })?
        } else {
            trimmed
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(whole(format!(
                "has {} field{}, needs 5 (minute hour day-of-month month day-of-week)",
                fields.len(),
                if fields.len() == 1 { "" } else { "s" }
            )));
        }
        let mut parsed = [(0u64, false); 5];
        for (i, (spec, field)) in SPECS.iter().zip(&fields).enumerate() {
            parsed[i] = spec.parse(field)?;
        }
        let [minutes, hours, doms, months, dows] = parsed;
        // Sunday is 0 and 7.
        let dow_bits = (dows.0 | (dows.0 >> 7)) & 0x7f;
        let cron = Cron {
            minutes: minutes.0,
            hours: hours.0 as u32,
            doms: doms.0 as u32,
            months: months.0 as u16,
            dows: dow_bits as u8,
            dom_star: doms.1,
            dow_star: dows.1,
        };
        if !cron.can_fire() {
            return Err(CronError {
                field: Some(FIELD_NAMES[2]),
                why: format!(
                    "`{}` never falls in month `{}`, so the expression never fires",
                    fields[2], fields[3]
                ),
            });
        }
        Ok(cron)
    }

    /// Whether some day ever fires. When both day fields are restricted any
    /// matching weekday fires, and every month has every weekday; otherwise a day
    /// must match both, and every date falls on every weekday within the 400-year
    /// Gregorian cycle, so some selected day must exist in some selected month (Feb
    /// 29 counts).
    fn can_fire(&self) -> bool {
        if !(self.dom_star || self.dow_star) {
            return true;
        }
        (1..=12u32).any(|m| {
            self.months & (1 << m) != 0
                && (1..=days_in_month(2000, m)).any(|d| self.doms & (1 << d) != 0)
        })
    }

    fn day_matches(&self, dom: u32, dow: u32) -> bool {
        let dom_ok = self.doms & (1 << dom) != 0;
        let dow_ok = self.dows & (1 << dow) != 0;
        if self.dom_star || self.dow_star {
            dom_ok && dow_ok
        } else {
            dom_ok || dow_ok
        }
    }

    /// The first selected minute of the day at or after `from` (minutes since
    /// midnight).
    fn first_time_from(&self, from: u32) -> Option<u32> {
        let (h0, m0) = (from / 60, from % 60);
        (h0..24)
            .filter(|h| self.hours & (1 << h) != 0)
            .find_map(|h| {
                let start = if h == h0 { m0 } else { 0 };
                (start..60)
                    .find(|m| self.minutes & (1 << m) != 0)
                    .map(|m| h * 60 + m)
            })
    }

    /// The first time this expression fires strictly after `after` (on a whole
    /// minute), or `None` when that would be after 9999-12-31T23:59:59Z.
    pub fn next_after(&self, after: Secs) -> Option<Secs> {
        let start = after
            .max(MIN_SECS - 1)
            .div_euclid(60)
            .checked_add(1)?
            .checked_mul(60)?;
        // The day and the minute of `start`; past 9999-12-31 there is none.
        let first = civil(start)?;
        let mut day = first.date();
        let mut from = field(first.hour()) * 60 + field(first.minute()); // < 1440
        loop {
            let month = field(day.month());
            if self.months & (1 << month) == 0 {
                // Skip to the first of the next month.
                day = day.last_of_month().tomorrow().ok()?;
                from = 0;
                continue;
            }
            if self.day_matches(field(day.day()), weekday(day)) {
                if let Some(minute) = self.first_time_from(from) {
                    return Some(
                        secs_of(day.to_datetime(jiff::civil::Time::midnight()))
                            + i64::from(minute) * 60,
                    );
                }
            }
            day = day.tomorrow().ok()?;
            from = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{format_rfc3339, parse_rfc3339, DAY};

    fn at(text: &str) -> Secs {
        parse_rfc3339(text).unwrap()
    }

    /// The next `n` fire times after `after`, as text.
    fn fires(expr: &str, after: &str, n: usize) -> Vec<String> {
        let cron = Cron::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let mut t = at(after);
        let mut out = Vec::new();
        for _ in 0..n {
            t = cron.next_after(t).unwrap();
            out.push(format_rfc3339(t).unwrap());
        }
        out
    }

    fn error(expr: &str) -> String {
        match Cron::parse(expr) {
            Ok(c) => panic!("{expr} parsed as {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_minute_is_strictly_after() {
        assert_eq!(
            fires("* * * * *", "2026-10-25T09:00:00Z", 2),
            ["2026-10-25T09:01:00Z", "2026-10-25T09:02:00Z"]
        );
        // Mid-minute: the next whole minute.
        assert_eq!(
            fires("* * * * *", "2026-10-25T09:00:59Z", 1),
            ["2026-10-25T09:01:00Z"]
        );
    }

    #[test]
    fn daily_at_three() {
        assert_eq!(
            fires("0 3 * * *", "2026-10-25T02:59:59Z", 2),
            ["2026-10-25T03:00:00Z", "2026-10-26T03:00:00Z"]
        );
        // Exactly at a fire time: the next one.
        assert_eq!(
            fires("0 3 * * *", "2026-10-25T03:00:00Z", 1),
            ["2026-10-26T03:00:00Z"]
        );
        assert_eq!(
            fires("@daily", "2026-12-31T23:59:00Z", 1),
            ["2027-01-01T00:00:00Z"]
        );
    }

    #[test]
    fn month_ends() {
        // The 31st skips the months without one.
        assert_eq!(
            fires("0 0 31 * *", "2026-01-31T00:00:00Z", 4),
            [
                "2026-03-31T00:00:00Z",
                "2026-05-31T00:00:00Z",
                "2026-07-31T00:00:00Z",
                "2026-08-31T00:00:00Z",
            ]
        );
        // The 30th skips February.
        assert_eq!(
            fires("30 12 30 * *", "2026-01-30T12:30:00Z", 2),
            ["2026-03-30T12:30:00Z", "2026-04-30T12:30:00Z"]
        );
        // The last minute of the year rolls into the next.
        assert_eq!(
            fires("59 23 31 12 *", "2026-06-01T00:00:00Z", 2),
            ["2026-12-31T23:59:00Z", "2027-12-31T23:59:00Z"]
        );
    }

    #[test]
    fn leap_day() {
        assert_eq!(
            fires("0 0 29 2 *", "2024-01-01T00:00:00Z", 3),
            [
                "2024-02-29T00:00:00Z",
                "2028-02-29T00:00:00Z",
                "2032-02-29T00:00:00Z",
            ]
        );
        // 2100 is not a leap year: 2096, then 2104.
        assert_eq!(
            fires("0 0 29 2 *", "2096-03-01T00:00:00Z", 1),
            ["2104-02-29T00:00:00Z"]
        );
        // 2000 is.
        assert_eq!(
            fires("15 6 29 feb *", "1999-01-01T00:00:00Z", 1),
            ["2000-02-29T06:15:00Z"]
        );
    }

    #[test]
    fn a_rare_day_is_found_across_a_non_leap_century() {
        // Feb 29 that is a Sunday (`*/7` over weekdays is Sunday, and starts with
        // `*`, so both day fields must match): 2088, then 40 years to 2128.
        assert_eq!(
            fires("0 0 29 2 */7", "2060-03-01T00:00:00Z", 2),
            ["2088-02-29T00:00:00Z", "2128-02-29T00:00:00Z"]
        );
    }

    #[test]
    fn dom_and_dow_or_rule() {
        // Both restricted: the 13th or any Friday. 2026-11-01 is a Sunday.
        assert_eq!(
            fires("0 0 13 * 5", "2026-11-01T00:00:00Z", 4),
            [
                "2026-11-06T00:00:00Z", // Friday
                "2026-11-13T00:00:00Z", // Friday the 13th: once
                "2026-11-20T00:00:00Z", // Friday
                "2026-11-27T00:00:00Z", // Friday
            ]
        );
        assert_eq!(
            fires("0 0 1,15 * mon", "2026-11-01T00:00:00Z", 4),
            [
                "2026-11-02T00:00:00Z", // Monday
                "2026-11-09T00:00:00Z", // Monday
                "2026-11-15T00:00:00Z", // the 15th, a Sunday
                "2026-11-16T00:00:00Z", // Monday
            ]
        );
        // Day of week `*`: only the day of month counts.
        assert_eq!(
            fires("0 0 13 * *", "2026-11-01T00:00:00Z", 2),
            ["2026-11-13T00:00:00Z", "2026-12-13T00:00:00Z"]
        );
        // Day of month `*`: only the weekday counts.
        assert_eq!(
            fires("0 0 * * fri", "2026-11-01T00:00:00Z", 2),
            ["2026-11-06T00:00:00Z", "2026-11-13T00:00:00Z"]
        );
        // A field starting with `*` (a step) makes it AND, as in Vixie cron: odd days
        // that are Mondays.
        assert_eq!(
            fires("0 0 */2 * 1", "2026-11-01T00:00:00Z", 3),
            [
                "2026-11-09T00:00:00Z",
                "2026-11-23T00:00:00Z",
                "2026-12-07T00:00:00Z",
            ]
        );
    }

    #[test]
    fn sunday_is_zero_and_seven() {
        let zero = fires("0 12 * * 0", "2026-10-20T00:00:00Z", 3);
        assert_eq!(
            zero,
            [
                "2026-10-25T12:00:00Z",
                "2026-11-01T12:00:00Z",
                "2026-11-08T12:00:00Z",
            ]
        );
        assert_eq!(fires("0 12 * * 7", "2026-10-20T00:00:00Z", 3), zero);
        assert_eq!(fires("0 12 * * SUN", "2026-10-20T00:00:00Z", 3), zero);
        assert_eq!(
            Cron::parse("0 12 * * 0").unwrap(),
            Cron::parse("0 12 * * 7").unwrap()
        );
        // fri-sun through 7.
        assert_eq!(
            fires("0 0 * * 5-7", "2026-10-20T00:00:00Z", 4),
            [
                "2026-10-23T00:00:00Z",
                "2026-10-24T00:00:00Z",
                "2026-10-25T00:00:00Z",
                "2026-10-30T00:00:00Z",
            ]
        );
    }

    #[test]
    fn steps_ranges_lists_and_names() {
        assert_eq!(
            fires("*/15 * * * *", "2026-10-25T09:07:00Z", 4),
            [
                "2026-10-25T09:15:00Z",
                "2026-10-25T09:30:00Z",
                "2026-10-25T09:45:00Z",
                "2026-10-25T10:00:00Z",
            ]
        );
        assert_eq!(
            fires("10-30/10 8-9 * * *", "2026-10-25T08:20:00Z", 4),
            [
                "2026-10-25T08:30:00Z",
                "2026-10-25T09:10:00Z",
                "2026-10-25T09:20:00Z",
                "2026-10-25T09:30:00Z",
            ]
        );
        assert_eq!(
            fires("0 9,17 * * mon-fri", "2026-10-23T17:00:00Z", 3),
            [
                "2026-10-26T09:00:00Z",
                "2026-10-26T17:00:00Z",
                "2026-10-27T09:00:00Z",
            ]
        );
        assert_eq!(
            fires("0 0 1 jan,Jul *", "2026-02-01T00:00:00Z", 2),
            ["2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 1 */3 *", "2026-02-01T00:00:00Z", 3),
            [
                "2026-04-01T00:00:00Z",
                "2026-07-01T00:00:00Z",
                "2026-10-01T00:00:00Z",
            ]
        );
        assert_eq!(
            fires("@hourly", "2026-10-25T09:00:00Z", 1),
            ["2026-10-25T10:00:00Z"]
        );
        assert_eq!(
            fires("@weekly", "2026-10-20T00:00:00Z", 1),
            ["2026-10-25T00:00:00Z"]
        );
        assert_eq!(
            fires("@monthly", "2026-10-20T00:00:00Z", 1),
            ["2026-11-01T00:00:00Z"]
        );
        assert_eq!(
            fires("@yearly", "2026-10-20T00:00:00Z", 1),
            ["2027-01-01T00:00:00Z"]
        );
        // Extra blanks between fields are fine.
        assert_eq!(
            fires("  0\t3  * *   * ", "2026-10-25T00:00:00Z", 1),
            ["2026-10-25T03:00:00Z"]
        );
    }

    #[test]
    fn the_end_of_time() {
        let c = Cron::parse("0 0 1 1 *").unwrap();
        assert_eq!(c.next_after(at("9999-01-01T00:00:00Z")), None);
        assert_eq!(c.next_after(Secs::MAX), None);
        assert_eq!(
            c.next_after(Secs::MIN).map(|t| format_rfc3339(t).unwrap()),
            Some("0001-01-01T00:00:00Z".to_string())
        );
        assert_eq!(
            c.next_after(at("9998-06-01T00:00:00Z"))
                .map(|t| format_rfc3339(t).unwrap()),
            Some("9999-01-01T00:00:00Z".to_string())
        );
    }

    #[test]
    fn refusals_name_the_field() {
        assert_eq!(
            error("0 3 * *"),
            "has 4 fields, needs 5 (minute hour day-of-month month day-of-week)"
        );
        assert!(error("0 3 * * * *").starts_with("has 6 fields"));
        assert!(error("").starts_with("has 0 fields"));
        assert_eq!(error("60 * * * *"), "the minute field: 60 is outside 0-59");
        assert_eq!(error("* 24 * * *"), "the hour field: 24 is outside 0-23");
        assert_eq!(
            error("* * 32 * *"),
            "the day-of-month field: 32 is outside 1-31"
        );
        assert_eq!(
            error("* * 0 * *"),
            "the day-of-month field: 0 is outside 1-31"
        );
        assert_eq!(error("* * * 13 *"), "the month field: 13 is outside 1-12");
        assert_eq!(
            error("* * * * 8"),
            "the day-of-week field: 8 is outside 0-7"
        );
        assert_eq!(
            error("* * * foo *"),
            "the month field: `foo` is not a number or a name (jan-dec)"
        );
        assert_eq!(
            error("* * * * funday"),
            "the day-of-week field: `funday` is not a number or a name (sun-sat)"
        );
        assert_eq!(error("x * * * *"), "the minute field: `x` is not a number");
        assert_eq!(
            error("* jan * * *"),
            "the hour field: `jan` is not a number"
        );
        assert_eq!(
            error("5-1 * * * *"),
            "the minute field: the range `5-1` runs backwards"
        );
        assert_eq!(
            error("*/0 * * * *"),
            "the minute field: the step in `*/0` is not a number 1-59"
        );
        assert_eq!(
            error("* */x * * *"),
            "the hour field: the step in `*/x` is not a number 1-23"
        );
        assert!(error("5/15 * * * *").starts_with("the minute field: a step goes after `*`"));
        assert_eq!(
            error("1,,2 * * * *"),
            "the minute field: `1,,2` has an empty list element"
        );
        assert_eq!(error("1- * * * *"), "the minute field: a value is missing");
        assert_eq!(error("-1 * * * *"), "the minute field: a value is missing");
        assert_eq!(
            error("99999999999 * * * *"),
            "the minute field: 99999999999 is outside 0-59"
        );
        assert!(error("@reboot").contains("is not one of @yearly"));
        assert_eq!(
            error("0 0 30 2 *"),
            "the day-of-month field: `30` never falls in month `2`, so the expression never fires"
        );
        assert!(error("0 0 31 apr,jun,sep,nov *").contains("never fires"));
        assert!(error(&"* ".repeat(200)).contains("over the limit"));
        // With both day fields restricted, the weekday still fires.
        assert!(Cron::parse("0 0 30 2 mon").is_ok());
        assert!(Cron::parse("0 0 29 2 *").is_ok());
    }

    #[test]
    fn every_fire_matches_and_none_is_skipped() {
        // Brute force over a year, minute by minute, against next_after.
        for expr in [
            "*/7 */5 * * *",
            "0 0 13 * 5",
            "30 4 1-7 * mon",
            "0 0 */2 * 1",
        ] {
            let cron = Cron::parse(expr).unwrap();
            let start = at("2028-01-01T00:00:00Z");
            let mut expected = Vec::new();
            let mut t = start + 60;
            while t < start + 366 * DAY {
                let c = civil(t).unwrap();
                let (month, dom) = (field(c.month()), field(c.day()));
                let minute = field(c.hour()) * 60 + field(c.minute());
                if cron.months & (1 << month) != 0
                    && cron.day_matches(dom, weekday(c.date()))
                    && cron.hours & (1 << (minute / 60)) != 0
                    && cron.minutes & (1 << (minute % 60)) != 0
                {
                    expected.push(t);
                }
                t += 60;
            }
            let mut got = Vec::new();
            let mut t = start;
            loop {
                t = cron.next_after(t).unwrap();
                if t >= start + 366 * DAY {
                    break;
                }
                got.push(t);
            }
            assert!(!got.is_empty(), "{expr}");
            assert_eq!(got, expected, "{expr}");
        }
    }
}
