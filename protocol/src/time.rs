//! Time as the wire writes it (RFC 3339), and the clock in milliseconds.

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Milliseconds since the epoch of an RFC 3339 time
/// (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; `t`, `z` and a space for `T` are
/// accepted, the fraction is cut to milliseconds, a leap second `:60` is the next
/// minute's first second).
///
/// The shape is checked here (exactly those fields, no more: not the wider ISO 8601
/// forms `jiff` also reads); the calendar, the offset and the arithmetic are
/// `jiff`'s, so a day the month does not have is refused.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|part| part.iter().all(u8::is_ascii_digit))
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":"))
        || !(digits(0..4) && digits(5..7) && digits(8..10))
        || !(digits(11..13) && digits(14..16) && digits(17..19))
    {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let fraction_end = i;
    match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => {}
        Some(b'+' | b'-') if i + 6 == b.len() && sep(i + 3, b":") => {
            if !(digits(i + 1..i + 3) && digits(i + 4..i + 6)) {
                return None;
            }
        }
        _ => return None,
    }
    // jiff reads a leap second as :59; RFC 3339's :60 is the second after it.
    let leap = if s.get(17..19)? == "60" { 1000 } else { 0 };
    // Milliseconds are all that is kept: the fraction's first three digits (jiff
    // reads at most nine).
    let cut = fraction_end.min(23);
    let text = format!("{}{}", s.get(..cut)?, s.get(fraction_end..)?);
    let ts: jiff::Timestamp = text.parse().ok()?;
    // Whole milliseconds (the fraction was cut to them), exact before the epoch too.
    ts.as_millisecond().checked_add(leap)
}

/// The RFC 3339 UTC text (`YYYY-MM-DDTHH:MM:SS.mmmZ`) of `ms` milliseconds since the
/// epoch (cut to the range `jiff` keeps, years -9999 to 9999).
pub fn format_rfc3339_ms(ms: i64) -> String {
    format!("{:.3}", timestamp_ms(ms))
}

/// The RFC 3339 UTC text to the second (`YYYY-MM-DDTHH:MM:SSZ`) of `secs` seconds
/// since the epoch (cut to the range `jiff` keeps, years -9999 to 9999).
pub fn format_rfc3339_secs(secs: i64) -> String {
    format!("{:.0}", timestamp_ms(secs.saturating_mul(1000)))
}

/// The UTC calendar date (`YYYY-MM-DD`) of `secs` seconds since the epoch (cut to
/// the range `jiff` keeps, years -9999 to 9999).
pub fn format_date(secs: i64) -> String {
    let ts = timestamp_ms(secs.saturating_mul(1000));
    jiff::tz::Offset::UTC.to_datetime(ts).date().to_string()
}

/// The instant `ms` milliseconds after the epoch, or the end of `jiff`'s range
/// nearest it.
fn timestamp_ms(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn formats_and_parses_back() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339_ms(1_709_164_800_000),
            "2024-02-29T00:00:00.000Z"
        );
        for ms in [0, 951_782_400_000, 1_709_164_800_123, 4_102_444_799_999] {
            assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T01:00:00+01:00"),
            Some(1_709_164_800_000)
        );
        assert_eq!(parse_rfc3339_ms("2024-02-29"), None);
    }

    #[test]
    fn reads_exactly_rfc_3339() {
        let p = parse_rfc3339_ms;
        // The accepted variants: lowercase t/z, a space, any fraction cut to ms.
        assert_eq!(p("2024-02-29t01:00:00z"), Some(1_709_168_400_000));
        assert_eq!(p("2024-02-29 01:00:00Z"), Some(1_709_168_400_000));
        assert_eq!(
            p("2024-02-29T01:00:00.123456789123Z"),
            Some(1_709_168_400_123)
        );
        assert_eq!(p("2024-02-29T01:00:00.5-05:30"), Some(1_709_188_200_500));
        assert_eq!(p("1969-12-31T23:59:59.5004Z"), Some(-500));
        // A leap second is the next minute's first.
        assert_eq!(p("2016-12-31T23:59:60.250Z"), Some(1_483_228_800_250));
        // What ISO 8601 or jiff would also read, RFC 3339 does not.
        for refused in [
            "2024-02-29T01:00:00",
            "2024-02-29T01:00:00.Z",
            "2024-02-29T01:00:00+0100",
            "2024-02-29T01:00:00+01",
            "20240229T010000Z",
            "+002024-02-29T01:00:00Z",
            "2024-02-29T01:00:00Z[UTC]",
            "2024-02-29T01:00Z",
            " 2024-02-29T01:00:00Z",
            "2024-02-29T01:00:00,5Z",
        ] {
            assert_eq!(p(refused), None, "{refused}");
        }
        // Fields out of range, and days the month does not have.
        for refused in [
            "2024-13-01T00:00:00Z",
            "2024-01-00T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T23:60:00Z",
            "2024-01-01T23:59:61Z",
            "2023-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-01-01T00:00:00+23:60",
        ] {
            assert_eq!(p(refused), None, "{refused}");
        }
    }

    #[test]
    fn formats_seconds_and_dates() {
        assert_eq!(format_rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339_secs(1_709_164_799), "2024-02-28T23:59:59Z");
        assert_eq!(format_rfc3339_secs(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_date(1_709_164_800), "2024-02-29");
        assert_eq!(format_date(951_868_799), "2000-02-29");
        assert_eq!(format_date(-86_400), "1969-12-31");
    }

    #[test]
    fn formats_outside_the_calendar_at_its_ends() {
        assert_eq!(format_rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_ms(i64::MAX), "9999-12-30T22:00:00.999Z");
        let min = format_rfc3339_ms(i64::MIN);
        assert_eq!(min, "-009999-01-02T01:59:59.000Z");
    }
}
