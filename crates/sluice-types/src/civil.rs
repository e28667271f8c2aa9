//! Civil-calendar arithmetic on UTC times: days since the Unix epoch to a proleptic Gregorian
//! date, and a time in microseconds to its date and time of day. The one implementation every
//! crate uses (the storage sink's date directories and value text, the MySQL sink's literals, the
//! API's RFC 3339 times).
//!
//! Invariants: pure integer arithmetic, total over `i64` days in the range a date can reach from
//! an `i64` of microseconds; times before the epoch fall on the days before 1970-01-01 (floor
//! division), never on a negative time of day.

/// Days since 1970-01-01 to (year, month 1–12, day 1–31), proleptic Gregorian. The shift to a
/// calendar whose years start on March 1 puts the leap day last, so each 400-year era of 146,097
/// days splits into years by plain division (H. Hinnant's method).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    const DAYS_FROM_0000_03_01_TO_EPOCH: i64 = 719_468;
    const DAYS_PER_ERA: i64 = 146_097;
    let z = days + DAYS_FROM_0000_03_01_TO_EPOCH;
    let era = z.div_euclid(DAYS_PER_ERA);
    let day_of_era = z.rem_euclid(DAYS_PER_ERA);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month 1–12, day 1–31), proleptic Gregorian, to days since 1970-01-01: the inverse of
/// [`civil_from_days`].
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    const DAYS_FROM_0000_03_01_TO_EPOCH: i64 = 719_468;
    let y = year - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - DAYS_FROM_0000_03_01_TO_EPOCH
}

/// A UTC time in microseconds since the epoch as (year, month, day, hour, minute, second,
/// microsecond).
pub fn utc_parts(micros: i64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let secs = micros.div_euclid(1_000_000);
    let us = micros.rem_euclid(1_000_000) as u32;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400) as u32;
    let (y, m, d) = civil_from_days(days);
    (y, m, d, sod / 3600, sod / 60 % 60, sod % 60, us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_from_civil_inverts_civil_from_days() {
        for days in (-800_000..800_000).step_by(7) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    /// Days since the epoch counted one day at a time, the slow and obvious way.
    fn days_by_counting(y: i64, m: u32, d: u32) -> i64 {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut days = 0i64;
        let (mut cy, mut cm) = (1970i64, 1u32);
        while (cy, cm) < (y, m) {
            days += month_len(cy, cm);
            (cy, cm) = if cm == 12 { (cy + 1, 1) } else { (cy, cm + 1) };
        }
        while (cy, cm) > (y, m) {
            (cy, cm) = if cm == 1 { (cy - 1, 12) } else { (cy, cm - 1) };
            days -= month_len(cy, cm);
        }
        days + i64::from(d) - 1
    }

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-719_528), (0, 1, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    }

    #[test]
    fn every_first_last_and_leap_day_from_1600_to_2500_matches_counting() {
        for y in 1600..2500i64 {
            for (m, d) in [(1, 1), (2, 28), (3, 1), (12, 31)] {
                assert_eq!(civil_from_days(days_by_counting(y, m, d)), (y, m, d));
            }
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let after_feb_28 = civil_from_days(days_by_counting(y, 2, 28) + 1);
            assert_eq!(after_feb_28, if leap { (y, 2, 29) } else { (y, 3, 1) });
        }
    }

    #[test]
    fn utc_parts_split_time_of_day_and_floor_before_the_epoch() {
        assert_eq!(
            utc_parts(1_700_000_000_123_456),
            (2023, 11, 14, 22, 13, 20, 123_456)
        );
        assert_eq!(utc_parts(-1), (1969, 12, 31, 23, 59, 59, 999_999));
        assert_eq!(utc_parts(0), (1970, 1, 1, 0, 0, 0, 0));
    }
}
