//! UTC time for the schedule: whole seconds since 1970-01-01T00:00:00Z ([`Secs`]),
//! their civil date and time, and RFC 3339 text, with the calendar (day numbers,
//! month lengths, leap years, weekdays) and the parsing of the fields from `jiff`.
//! The years handled are 0001 to 9999, the range RFC 3339 writes; only UTC and the
//! numeric offsets of RFC 3339 text are read (no time zone database).

use jiff::civil::{DateTime, Time};
use jiff::fmt::temporal::{Pieces, PiecesOffset};
use jiff::SignedDuration;
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

/// 1970-01-01T00:00:00, the civil time of [`Secs`] 0.
const EPOCH: DateTime = jiff::civil::datetime(1970, 1, 1, 0, 0, 0, 0);

/// True for a Gregorian leap year (false outside the years -9999 to 9999).
pub fn is_leap(year: i64) -> bool {
    i16::try_from(year)
        .ok()
        .and_then(|y| jiff::civil::Date::new(y, 1, 1).ok())
        .is_some_and(|d| d.in_leap_year())
}

/// The number of days of `month` (1–12) in `year`; 0 for a month (or a year) out of
/// range.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    let (Ok(y), Ok(m)) = (i16::try_from(year), i8::try_from(month)) else {
        return 0;
    };
    jiff::civil::Date::new(y, m, 1).map_or(0, |d| u32::from(d.days_in_month().unsigned_abs()))
}

/// The civil UTC date and time of `secs`; `None` outside the years -9999 to 9999.
pub fn civil(secs: Secs) -> Option<DateTime> {
    EPOCH.checked_add(SignedDuration::from_secs(secs)).ok()
}

/// The seconds of a civil UTC date and time (its fraction of a second dropped).
pub fn secs_of(dt: DateTime) -> Secs {
    dt.duration_since(EPOCH).as_secs()
}

/// The weekday of `date`: 0 is Sunday, 6 Saturday.
pub fn weekday(date: jiff::civil::Date) -> u32 {
    u32::from(date.weekday().to_sunday_zero_offset().unsigned_abs())
}

/// A civil field (month, day, hour, minute: never negative) as a `u32`.
pub fn field(v: i8) -> u32 {
    u32::from(v.unsigned_abs())
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

/// Checks the shape RFC 3339 gives a date-time, which jiff's (wider, ISO 8601)
/// grammar does not hold a text to: `YYYY-MM-DD`, `T`, `t` or a space,
/// `HH:MM:SS`, an optional fraction, then `Z`, `z` or `±HH:MM` (hours 00–23). Answers
/// the text without its fraction (dropped: a time is floored to its second).
fn rfc3339_shape(text: &str) -> Result<String, &'static str> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return Err("too short (2026-10-25T09:00:00Z)");
    }
    let digits = |at: usize, len: usize| b[at..at + len].iter().all(u8::is_ascii_digit);
    for (at, len, what) in [
        (0, 4, "no 4-digit year"),
        (5, 2, "no 2-digit month"),
        (8, 2, "no 2-digit day"),
        (11, 2, "no 2-digit hour"),
        (14, 2, "no 2-digit minute"),
        (17, 2, "no 2-digit second"),
    ] {
        if !digits(at, len) {
            return Err(what);
        }
    }
    if b[4] != b'-' || b[7] != b'-' {
        return Err("the date is not YYYY-MM-DD");
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return Err("no T between the date and the time");
    }
    if b[13] != b':' || b[16] != b':' {
        return Err("the time is not HH:MM:SS");
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err("a fraction needs digits");
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => {}
        [b'+' | b'-', h1, h2, b':', m1, m2]
            if [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()) =>
        {
            if (*h1, *h2) > (b'2', b'3') || *m1 > b'5' {
                return Err("the offset is out of range");
            }
        }
        [b'+' | b'-', ..] => return Err("the offset is not ±HH:MM"),
        _ => return Err("no Z or ±HH:MM offset"),
    }
    Ok(format!("{}{rest}", &text[..19]))
}

/// Parses an RFC 3339 date-time (`2026-10-25T09:00:00Z`, `2026-10-25t09:00:00.5+02:00`)
/// into UTC seconds. A fraction of a second is dropped (the time is floored to its
/// second); a leap second (`:60`) reads as `:59`. Years 0001–9999 only.
pub fn parse_rfc3339(text: &str) -> Result<Secs, TimeError> {
    let bad = |why: &str| TimeError(format!("{text:?} is not an RFC 3339 time: {why}"));
    let whole = rfc3339_shape(text).map_err(bad)?;
    // jiff reads the fields: each in its range, the day in its month, `:60` as `:59`.
    let pieces = Pieces::parse(&whole).map_err(|e| bad(&e.to_string()))?;
    let offset = match pieces.offset() {
        Some(PiecesOffset::Zulu) => 0,
        Some(PiecesOffset::Numeric(n)) => i64::from(n.offset().seconds()),
        _ => return Err(bad("no Z or ±HH:MM offset")),
    };
    let local = pieces
        .date()
        .to_datetime(pieces.time().unwrap_or(Time::midnight()));
    let secs = secs_of(local) - offset;
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
    civil(secs).map(|c| c.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// A short form of a time of day for a Work's ref: `03:00Z`, or `03:00:30Z` when
/// the seconds are not zero.
pub fn short_time(secs: Secs) -> String {
    let t = Time::midnight().wrapping_add(SignedDuration::from_secs(secs));
    if t.second() == 0 {
        t.strftime("%H:%MZ").to_string()
    } else {
        t.strftime("%H:%M:%SZ").to_string()
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

    /// The civil date of day number `days` (days since 1970-01-01).
    fn date(days: i64) -> (i16, i8, i8) {
        let d = civil(days * DAY).unwrap().date();
        (d.year(), d.month(), d.day())
    }

    fn days(year: i16, month: i8, day: i8) -> i64 {
        secs_of(jiff::civil::date(year, month, day).at(0, 0, 0, 0)) / DAY
    }

    #[test]
    fn known_day_numbers() {
        assert_eq!(days(1970, 1, 1), 0);
        assert_eq!(days(1969, 12, 31), -1);
        assert_eq!(days(2000, 3, 1), 11_017);
        assert_eq!(days(2024, 2, 29), 19_782);
        assert_eq!(days(1, 1, 1), -719_162);
        assert_eq!(days(9999, 12, 31), 2_932_896);
        assert_eq!(date(19_782), (2024, 2, 29));
        assert_eq!(date(-1), (1969, 12, 31));
        assert_eq!(date(-719_162), (1, 1, 1));
        assert_eq!(date(-719_163), (0, 12, 31));
    }

    #[test]
    fn the_whole_range_converts_and_nothing_past_it() {
        for secs in [MIN_SECS, -1, 0, 1_792_918_800, MAX_SECS] {
            assert_eq!(secs_of(civil(secs).unwrap()), secs);
        }
        assert!(civil(MAX_SECS + 1).is_none(), "the year 10000");
        // A fraction of a second is dropped.
        let dt = civil(5)
            .unwrap()
            .with()
            .subsec_nanosecond(999)
            .build()
            .unwrap();
        assert_eq!(secs_of(dt), 5);
    }

    #[test]
    fn leap_years_and_month_lengths() {
        assert!(is_leap(2024) && is_leap(2000) && is_leap(1600));
        assert!(!is_leap(2023) && !is_leap(1900) && !is_leap(2100));
        assert!(!is_leap(100_000), "out of range");
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2023, 2), 28);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2026, 4), 30);
        assert_eq!(days_in_month(2026, 12), 31);
        assert_eq!(days_in_month(2026, 13), 0);
        assert_eq!(days_in_month(2026, 0), 0);
    }

    #[test]
    fn weekdays() {
        let wd = |y, m, d| weekday(jiff::civil::date(y, m, d));
        assert_eq!(wd(1970, 1, 1), 4); // Thursday
        assert_eq!(wd(2026, 10, 25), 0); // Sunday
        assert_eq!(wd(2024, 2, 29), 4); // Thursday
        assert_eq!(wd(2000, 1, 1), 6); // Saturday
        assert_eq!(wd(1969, 12, 28), 0); // Sunday, before the epoch
        assert_eq!(wd(1, 1, 1), 1); // Monday (proleptic Gregorian)
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
