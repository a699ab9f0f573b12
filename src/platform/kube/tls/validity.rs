//! A certificate's validity period, read from its DER (what rustls does not check for us when a
//! CA:TRUE certificate is accepted as its own anchor), and the dates messages print.

use rustls::pki_types::UnixTime;

/// `2031-05-01T12:00:00Z`.
pub fn utc(t: UnixTime) -> String {
    let secs = t.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// notBefore and notAfter of a DER certificate, in seconds since the epoch; None if it does not
/// parse. Only the path to `tbsCertificate.validity` is read: version, serial, signature
/// algorithm and issuer are stepped over.
pub fn validity(cert: &[u8]) -> Option<(u64, u64)> {
    let (tag, certificate, _) = tlv(cert)?;
    let (tbs_tag, tbs, _) = tlv(certificate)?;
    if (tag, tbs_tag) != (0x30, 0x30) {
        return None;
    }
    let mut rest = tbs;
    if let (0xA0, _, after) = tlv(rest)? {
        rest = after;
    }
    for expected in [0x02, 0x30, 0x30] {
        let (tag, _, after) = tlv(rest)?;
        if tag != expected {
            return None;
        }
        rest = after;
    }
    let (0x30, validity, _) = tlv(rest)? else { return None };
    let (before_tag, before, after) = tlv(validity)?;
    let (after_tag, not_after, _) = tlv(after)?;
    Some((der_time(before_tag, before)?, der_time(after_tag, not_after)?))
}

/// One DER element: tag, contents, what follows.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |len, &b| len << 8 | usize::from(b)), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`, 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), as RFC 5280 has
/// them, in seconds since the epoch.
fn der_time(tag: u8, text: &[u8]) -> Option<u64> {
    let year_digits = match tag {
        0x17 => 2,
        0x18 => 4,
        _ => return None,
    };
    let (digits, zone) = text.split_at_checked(text.len().checked_sub(1)?)?;
    if zone != b"Z" || digits.len() != year_digits + 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number =
        |from: usize, len: usize| digits[from..from + len].iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let year = match number(0, year_digits) {
        yy if year_digits == 2 && yy >= 50 => 1900 + yy,
        yy if year_digits == 2 => 2000 + yy,
        yyyy => yyyy,
    };
    let [month, day, hour, minute, second] = [0, 2, 4, 6, 8].map(|i| number(year_digits + i, 2));
    if year < 1970 || !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a date from 1970 on (H. Hinnant's algorithm).
pub fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of `days_from_civil`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::super::tests::self_signed;
    use super::*;
    use std::time::Duration;

    #[test]
    fn validity_is_read_from_the_certificate() {
        let cert = self_signed(&["a"], false, (1999, 12, 31), (2051, 2, 28));
        let (from, to) = validity(&cert).unwrap();
        assert_eq!(utc(UnixTime::since_unix_epoch(Duration::from_secs(from))), "1999-12-31T00:00:00Z");
        assert_eq!(utc(UnixTime::since_unix_epoch(Duration::from_secs(to))), "2051-02-28T00:00:00Z");
        assert_eq!(validity(b""), None);
        assert_eq!(validity(&cert[..cert.len() / 2]), None);
        assert_eq!(validity(&[0x30, 0x03, 0x02, 0x01, 0x00]), None);
    }

    #[test]
    fn der_times_read_as_seconds_since_the_epoch() {
        assert_eq!(der_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(der_time(0x17, b"491231235959Z"), Some(days_from_civil(2049, 12, 31) * 86_400 + 86_399));
        assert_eq!(der_time(0x18, b"20240229120000Z"), Some(days_from_civil(2024, 2, 29) * 86_400 + 43_200));
        for bad in [&b"7001010000Z"[..], b"700101000000", b"70010100000+Z", b"701301000000Z", b""] {
            assert_eq!(der_time(0x17, bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(der_time(0x04, b"700101000000Z"), None);
    }

    #[test]
    fn civil_dates_round_trip_through_days_since_the_epoch() {
        for days in [0, 59, 365, 11_016, 20_000, 47_541] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn times_print_as_rfc_3339_utc() {
        assert_eq!(utc(UnixTime::since_unix_epoch(Duration::from_secs(1_700_000_000))), "2023-11-14T22:13:20Z");
    }
}
