//! `strftime_now(fmt)`, which HF exposes to templates (Llama 3.x and others
//! print today's date). Python formats local time; servers run in UTC, so we
//! format UTC with std only, covering the directives templates use.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

pub(crate) fn strftime_now(fmt: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    format_unix(secs, fmt)
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

pub(crate) fn format_unix(secs: i64, fmt: &str) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    let (hh, mm, ss) = (sod / 3600, (sod % 3600) / 60, sod % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + u32::from(m > 2 && is_leap(y));
    let month = MONTHS[(m - 1) as usize];
    let day = DAYS[weekday];
    let h12 = if hh % 12 == 0 { 12 } else { hh % 12 };

    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{y}"),
            Some('y') => write!(out, "{:02}", y.rem_euclid(100)),
            Some('m') => write!(out, "{m:02}"),
            Some('d') => write!(out, "{d:02}"),
            Some('e') => write!(out, "{d:>2}"),
            Some('-') => match chars.next() {
                // glibc's "no padding" flag, which Python passes through.
                Some('d') => write!(out, "{d}"),
                Some('m') => write!(out, "{m}"),
                Some('H') => write!(out, "{hh}"),
                Some(other) => write!(out, "%-{other}"),
                None => write!(out, "%-"),
            },
            Some('H') => write!(out, "{hh:02}"),
            Some('I') => write!(out, "{h12:02}"),
            Some('M') => write!(out, "{mm:02}"),
            Some('S') => write!(out, "{ss:02}"),
            Some('p') => write!(out, "{}", if hh < 12 { "AM" } else { "PM" }),
            Some('B') => write!(out, "{month}"),
            Some('b') | Some('h') => write!(out, "{}", &month[..3]),
            Some('A') => write!(out, "{day}"),
            Some('a') => write!(out, "{}", &day[..3]),
            Some('j') => write!(out, "{yday:03}"),
            Some('F') => write!(out, "{y}-{m:02}-{d:02}"),
            Some('T') => write!(out, "{hh:02}:{mm:02}:{ss:02}"),
            Some('Z') => write!(out, "UTC"),
            Some('z') => write!(out, "+0000"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::format_unix;

    #[test]
    fn formats_known_dates() {
        // 2024-02-29T13:05:09Z, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(format_unix(t, "%d %b %Y"), "29 Feb 2024");
        assert_eq!(format_unix(t, "%Y-%m-%d %H:%M:%S"), "2024-02-29 13:05:09");
        assert_eq!(
            format_unix(t, "%A %B %-d, %I%p %j %%"),
            "Thursday February 29, 01PM 060 %"
        );
        assert_eq!(format_unix(0, "%a %F %T"), "Thu 1970-01-01 00:00:00");
    }
}
