//! UTC calendar arithmetic, without a date crate: days from a civil date and back
//! (Howard Hinnant's `days_from_civil` / `civil_from_days`), weekdays, and RFC 3339
//! text. A time is whole seconds since 1970-01-01T00:00:00Z ([`Secs`]); the years
//! handled are 0001 to 9999, the range RFC 3339 writes.

use std::fmt;

/// Seconds since 1970-01-01T00:00:00Z, in UTC (no leap seconds, as Unix time).
pub type Secs = i64;

/// Seconds in a day.
pub const DAY: Secs = 86_400;
/// The earliest year handled.
pub const MIN_YEAR: i64 = 1;
/// The latest year handled.
pub const MAX_YEAR: i64 = 9999;

/// The earliest time handled: 0001-01-01T00:00:00Z.
pub const MIN_SECS: Secs = -62_135_596_800;
/// The latest time handled: 9999-12-31T23:59:59Z.
pub const MAX_SECS: Secs = 253_402_300_799;

/// True for a Gregorian leap year.
pub fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// The number of days of `month` (1–12) in `year`; 0 for a month out of range.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// The day number (days since 1970-01-01) of a civil date; `month` is 1–12 and
/// `day` 1–31 (not checked against the month: day 0 or 32 roll over).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let m = i64::from(month);
    let d = i64::from(day);
    let y = if m <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400; // [0, 399]
    let mp = if m > 2 { m - 3 } else { m + 9 }; // March is 0
    let doy = (153 * mp + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// The civil date `(year, month, day)` of a day number (days since 1970-01-01).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = if m <= 2 { y + 1 } else { y };
    // m is in 1..=12 and d in 1..=31, so both fit.
    (year, m as u32, d as u32)
}

/// The weekday of a day number: 0 is Sunday, 6 Saturday (1970-01-01 was a Thursday).
pub fn weekday(days: i64) -> u32 {
    // rem_euclid(7) is in 0..7.
    (days + 4).rem_euclid(7) as u32
}

/// A broken-down UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year, 1–9999.
    pub year: i64,
    /// The month, 1–12.
    pub month: u32,
    /// The day of the month, 1–31.
    pub day: u32,
    /// The hour, 0–23.
    pub hour: u32,
    /// The minute, 0–59.
    pub minute: u32,
    /// The second, 0–59.
    pub second: u32,
}

impl Civil {
    /// The broken-down form of `secs`.
    pub fn from_secs(secs: Secs) -> Civil {
        let days = secs.div_euclid(DAY);
        let tod = secs.rem_euclid(DAY); // [0, 86399]
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: (tod / 3600) as u32,
            minute: (tod % 3600 / 60) as u32,
            second: (tod % 60) as u32,
        }
    }

    /// The seconds of this time (its fields are taken as valid).
    pub fn to_secs(&self) -> Secs {
        days_from_civil(self.year, self.month, self.day) * DAY
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }
}

/// Why a text is not an RFC 3339 time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeError(pub String);

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TimeError {}

fn digits(text: &str, at: usize, len: usize) -> Option<u32> {
    let s = text.get(at..at + len)?;
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses an RFC 3339 date-time (`2026-10-25T09:00:00Z`, `2026-10-25t09:00:00.5+02:00`)
/// into UTC seconds. A fraction of a second is dropped (the time is floored to its
/// second); a leap second (`:60`) reads as `:59`. Years 0001–9999 only.
pub fn parse_rfc3339(text: &str) -> Result<Secs, TimeError> {
    let bad = |why: &str| TimeError(format!("{text:?} is not an RFC 3339 time: {why}"));
    let b = text.as_bytes();
    if b.len() < 20 {
        return Err(bad("too short (2026-10-25T09:00:00Z)"));
    }
    let field = |at: usize, len: usize, what: &str| digits(text, at, len).ok_or_else(|| bad(what));
    let year = i64::from(field(0, 4, "no 4-digit year")?);
    let month = field(5, 2, "no 2-digit month")?;
    let day = field(8, 2, "no 2-digit day")?;
    let hour = field(11, 2, "no 2-digit hour")?;
    let minute = field(14, 2, "no 2-digit minute")?;
    let second = field(17, 2, "no 2-digit second")?;
    if b[4] != b'-' || b[7] != b'-' {
        return Err(bad("the date is not YYYY-MM-DD"));
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad("no T between the date and the time"));
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad("the time is not HH:MM:SS"));
    }
    if year < MIN_YEAR {
        return Err(bad("the year is 0000"));
    }
    if !(1..=12).contains(&month) {
        return Err(bad("the month is not 01-12"));
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err(bad("the day is not in the month"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(bad("the time of day is out of range"));
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(bad("a fraction needs digits"));
        }
        rest = &frac[n..];
    }
    let offset: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return Err(bad("no Z or ±HH:MM offset")),
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return Err(bad("the offset is not ±HH:MM"));
            }
            let oh = digits(rest, 1, 2).ok_or_else(|| bad("the offset is not ±HH:MM"))?;
            let om = digits(rest, 4, 2).ok_or_else(|| bad("the offset is not ±HH:MM"))?;
            if oh > 23 || om > 59 {
                return Err(bad("the offset is out of range"));
            }
            sign * (i64::from(oh) * 3600 + i64::from(om) * 60)
        }
    };
    let civil = Civil {
        year,
        month,
        day,
        hour,
        minute,
        second: second.min(59),
    };
    let secs = civil.to_secs() - offset;
    if !(MIN_SECS..=MAX_SECS).contains(&secs) {
        return Err(bad("outside the years 0001-9999 in UTC"));
    }
    Ok(secs)
}

/// Writes `secs` as RFC 3339 in UTC, to the second: `2026-10-25T09:00:00Z`. `None`
/// outside the years 0001–9999.
pub fn format_rfc3339(secs: Secs) -> Option<String> {
    if !(MIN_SECS..=MAX_SECS).contains(&secs) {
        return None;
    }
    let c = Civil::from_secs(secs);
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    ))
}

/// A short form of a time of day for a Work's ref: `03:00Z`, or `03:00:30Z` when
/// the seconds are not zero.
pub fn short_time(secs: Secs) -> String {
    let c = Civil::from_secs(secs);
    if c.second == 0 {
        format!("{:02}:{:02}Z", c.hour, c.minute)
    } else {
        format!("{:02}:{:02}:{:02}Z", c.hour, c.minute, c.second)
    }
}

/// The system clock, in whole seconds (0 before 1970, which a sane clock never is).
pub fn now() -> Secs {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| Secs::try_from(d.as_secs()).unwrap_or(MAX_SECS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_day_numbers() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        assert_eq!(days_from_civil(1, 1, 1), -719_162);
        assert_eq!(days_from_civil(9999, 12, 31), 2_932_896);
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(-719_162), (1, 1, 1));
    }

    #[test]
    fn days_round_trip_over_the_whole_range() {
        // Every day from 0001-01-01 to 9999-12-31 maps back to itself, and
        // consecutive days are consecutive dates.
        let mut prev = civil_from_days(-719_163);
        assert_eq!(prev, (0, 12, 31));
        for days in -719_162..=2_932_896 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
            assert!(d >= 1 && d <= days_in_month(y, m), "{y}-{m}-{d}");
            let (py, pm, pd) = prev;
            if d == 1 {
                assert_eq!(pd, days_in_month(py, pm));
                if m == 1 {
                    assert_eq!((py + 1, pm), (y, 12));
                } else {
                    assert_eq!((py, pm + 1), (y, m));
                }
            } else {
                assert_eq!((py, pm, pd + 1), (y, m, d));
            }
            prev = (y, m, d);
        }
    }

    #[test]
    fn leap_years_and_month_lengths() {
        assert!(is_leap(2024) && is_leap(2000) && is_leap(1600));
        assert!(!is_leap(2023) && !is_leap(1900) && !is_leap(2100));
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2023, 2), 28);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2026, 4), 30);
        assert_eq!(days_in_month(2026, 12), 31);
        assert_eq!(days_in_month(2026, 13), 0);
    }

    #[test]
    fn weekdays() {
        assert_eq!(weekday(0), 4); // 1970-01-01, Thursday
        assert_eq!(weekday(days_from_civil(2026, 10, 25)), 0); // Sunday
        assert_eq!(weekday(days_from_civil(2024, 2, 29)), 4); // Thursday
        assert_eq!(weekday(days_from_civil(2000, 1, 1)), 6); // Saturday
        assert_eq!(weekday(days_from_civil(1969, 12, 28)), 0); // Sunday, before the epoch
        assert_eq!(weekday(days_from_civil(1, 1, 1)), 1); // Monday (proleptic Gregorian)
    }

    #[test]
    fn rfc3339_round_trips() {
        let t = parse_rfc3339("2026-10-25T09:00:00Z").unwrap();
        assert_eq!(t, 1_792_918_800);
        assert_eq!(format_rfc3339(t).unwrap(), "2026-10-25T09:00:00Z");
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z").unwrap(), -1);
        assert_eq!(format_rfc3339(-1).unwrap(), "1969-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(MIN_SECS).unwrap(), "0001-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(MAX_SECS).unwrap(), "9999-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(MAX_SECS + 1), None);
        assert_eq!(format_rfc3339(MIN_SECS - 1), None);
    }

    #[test]
    fn rfc3339_offsets_fractions_and_case() {
        let t = parse_rfc3339("2026-10-25T09:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2026-10-25T11:00:00+02:00").unwrap(), t);
        assert_eq!(parse_rfc3339("2026-10-25T04:30:00-04:30").unwrap(), t);
        assert_eq!(parse_rfc3339("2026-10-25t09:00:00.999z").unwrap(), t);
        assert_eq!(parse_rfc3339("2026-10-25 09:00:00.1Z").unwrap(), t);
        assert_eq!(parse_rfc3339("2026-10-25T09:00:60Z").unwrap(), t + 59);
        // An offset across midnight and the year.
        assert_eq!(
            format_rfc3339(parse_rfc3339("2027-01-01T01:00:00+02:00").unwrap()).unwrap(),
            "2026-12-31T23:00:00Z"
        );
    }

    #[test]
    fn rfc3339_refusals() {
        for bad in [
            "",
            "2026-10-25",
            "2026-10-25T09:00:00",
            "2026-10-25T09:00Z",
            "2026/10/25T09:00:00Z",
            "2026-10-25X09:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-10-25T24:00:00Z",
            "2026-10-25T09:60:00Z",
            "2026-10-25T09:00:61Z",
            "2026-10-25T09:00:00.Z",
            "2026-10-25T09:00:00+0200",
            "2026-10-25T09:00:00+24:00",
            "2026-10-25T09:00:00 Z",
            "0000-01-01T00:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "+026-10-25T09:00:00Z",
            "2026-1a-25T09:00:00Z",
            "2026-10-25T09:00:00Zjunk",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_ok());
        let e = parse_rfc3339("2026-13-01T00:00:00Z").unwrap_err();
        assert!(e.to_string().contains("month"), "{e}");
    }

    #[test]
    fn short_times() {
        let t = parse_rfc3339("2026-10-25T03:00:00Z").unwrap();
        assert_eq!(short_time(t), "03:00Z");
        assert_eq!(short_time(t + 30), "03:00:30Z");
        assert_eq!(short_time(t + 20 * 3600 + 59 * 60), "23:59Z");
    }
}
