//! Evaluating partition expressions over a row, as the server does (integers, dates and
//! times, the partition functions).

use crate::compare::value_dt;
use crate::parse::*;
use crate::{cannot_place, err};
use sluice_types::partition::PartitionError;
use sluice_types::{TableSchema, Value};

/// A date and time of day (a DATE has a zero time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Dt {
    pub(crate) y: i64,
    pub(crate) m: i64,
    pub(crate) d: i64,
    pub(crate) h: i64,
    pub(crate) mi: i64,
    pub(crate) s: i64,
    pub(crate) us: i64,
}

/// A TIME value (hours may exceed 24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimeV {
    pub(crate) neg: bool,
    pub(crate) h: i64,
    pub(crate) mi: i64,
    pub(crate) s: i64,
    pub(crate) us: i64,
}

/// An evaluated value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EV {
    Null,
    Int(i128),
    Str(String),
    Date(Dt),
    /// A TIMESTAMP column: microseconds since the epoch, UTC.
    Ts(i64),
    Time(TimeV),
}

impl EV {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            EV::Null => "NULL",
            EV::Int(_) => "an integer",
            EV::Str(_) => "a string",
            EV::Date(_) => "a date",
            EV::Ts(_) => "a timestamp",
            EV::Time(_) => "a time",
        }
    }
}

/// The row an expression is evaluated against.
pub(crate) type Row<'a> = Option<(&'a TableSchema, &'a [Value])>;

pub(crate) fn column_index(schema: &TableSchema, name: &str) -> Result<usize, PartitionError> {
    schema
        .columns
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            PartitionError(format!(
                "partitioning column `{name}` is not a column of {}",
                schema.qualified_name()
            ))
        })
}

pub(crate) fn row_value<'a>(
    schema: &TableSchema,
    row: &'a [Value],
    idx: usize,
) -> Result<&'a Value, PartitionError> {
    if row.len() != schema.columns.len() {
        return err(format!(
            "row of {} has {} values for {} columns",
            schema.qualified_name(),
            row.len(),
            schema.columns.len()
        ));
    }
    row.get(idx).ok_or_else(|| {
        PartitionError(format!(
            "row of {} has no column {idx}",
            schema.qualified_name()
        ))
    })
}

pub(crate) fn column_ev(
    schema: &TableSchema,
    row: &[Value],
    name: &str,
) -> Result<EV, PartitionError> {
    let idx = column_index(schema, name)?;
    let col = &schema.columns[idx];
    Ok(match row_value(schema, row, idx)? {
        Value::Null => EV::Null,
        Value::Int(v) => EV::Int(*v as i128),
        Value::UInt(v) => EV::Int(*v as i128),
        Value::Year(y) => EV::Int(*y as i128),
        Value::Bit { bits, .. } => EV::Int(*bits as i128),
        v @ (Value::Date { .. } | Value::DateTime { .. }) => match value_dt(v) {
            Some(d) => EV::Date(d),
            None => return cannot_place(format!("column `{}`: not a date", col.name)),
        },
        Value::Timestamp { micros } => EV::Ts(*micros),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => EV::Time(TimeV {
            neg: *negative,
            h: *hours as i64,
            mi: *minutes as i64,
            s: *seconds as i64,
            us: *micros as i64,
        }),
        _ => {
            return cannot_place(format!(
                "column `{}` ({}) in a partition expression is not supported",
                col.name, col.sql_type
            ))
        }
    })
}

/// Evaluates `e` (a partition expression over `row`, or a constant bound when `row` is None).
pub(crate) fn eval(e: &Expr, row: Row<'_>) -> Result<EV, PartitionError> {
    Ok(match e {
        Expr::Int(v) => EV::Int(*v),
        Expr::Str(s) => EV::Str(s.clone()),
        Expr::Null => EV::Null,
        Expr::MaxValue => return err("MAXVALUE inside an expression"),
        Expr::Col(name) => match row {
            Some((schema, values)) => column_ev(schema, values, name)?,
            None => return err(format!("partition bound refers to column `{name}`")),
        },
        Expr::Neg(x) => match int_arg(&eval(x, row)?, "-")? {
            None => EV::Null,
            Some(v) => EV::Int(-v),
        },
        Expr::Bin(op, a, b) => {
            let (a, b) = (
                int_arg(&eval(a, row)?, op_name(*op))?,
                int_arg(&eval(b, row)?, op_name(*op))?,
            );
            let (Some(a), Some(b)) = (a, b) else {
                return Ok(EV::Null);
            };
            let r = match op {
                BinOp::Add => a.checked_add(b),
                BinOp::Sub => a.checked_sub(b),
                BinOp::Mul => a.checked_mul(b),
                // Division by zero is NULL; DIV truncates toward zero, MOD takes the dividend's
                // sign (C semantics, as the server).
                BinOp::Div if b == 0 => return Ok(EV::Null),
                BinOp::Mod if b == 0 => return Ok(EV::Null),
                BinOp::Div => a.checked_div(b),
                BinOp::Mod => a.checked_rem(b),
            };
            match r {
                Some(v) if (-(1i128 << 64)..(1i128 << 64)).contains(&v) => EV::Int(v),
                _ => return cannot_place(
                    "partition expression overflows BIGINT (the server would have refused the row)",
                ),
            }
        }
        Expr::Extract(unit, x) => {
            let v = eval(x, row)?;
            extract(unit, &v)?
        }
        Expr::Call(name, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, row))
                .collect::<Result<Vec<_>, _>>()?;
            call(name, &vals)?
        }
    })
}

pub(crate) fn op_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "DIV",
        BinOp::Mod => "MOD",
    }
}

pub(crate) fn int_arg(v: &EV, what: &str) -> Result<Option<i128>, PartitionError> {
    match v {
        EV::Null => Ok(None),
        EV::Int(i) => Ok(Some(*i)),
        other => cannot_place(format!(
            "`{what}` of {} in a partition expression is not supported",
            other.kind()
        )),
    }
}

/// A date/time argument: DATE/DATETIME values and date strings (in bounds such as
/// `TO_DAYS('2020-01-01')`).
pub(crate) fn date_arg(v: &EV, f: &str) -> Result<Option<Dt>, PartitionError> {
    match v {
        EV::Null => Ok(None),
        EV::Date(d) => Ok(Some(*d)),
        EV::Str(s) => parse_datetime(s).map(Some).ok_or_else(|| {
            PartitionError(format!("{f}('{s}'): not a date/datetime literal Sluice can read"))
        }),
        EV::Ts(_) => cannot_place(format!(
            "{f}() of a TIMESTAMP depends on the session time zone (the server refuses it in partition functions)"
        )),
        other => cannot_place(format!("{f}() of {} is not supported", other.kind())),
    }
}

/// `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` (any punctuation between the parts, as the server accepts).
pub(crate) fn parse_datetime(s: &str) -> Option<Dt> {
    let s = s.trim();
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    let dp: Vec<&str> = date.split(|c: char| !c.is_ascii_digit()).collect();
    if dp.len() != 3 || dp.iter().any(|p| p.is_empty() || p.len() > 4) {
        return None;
    }
    let num = |p: &str| p.parse::<i64>().ok();
    let mut dt = Dt {
        y: num(dp[0])?,
        m: num(dp[1])?,
        d: num(dp[2])?,
        h: 0,
        mi: 0,
        s: 0,
        us: 0,
    };
    if dp[0].len() <= 2 {
        // Two-digit years: 70-99 are 19xx, 00-69 20xx.
        dt.y += if dt.y < 70 { 2000 } else { 1900 };
    }
    if !time.is_empty() {
        let (hms, frac) = match time.find('.') {
            Some(i) => (&time[..i], &time[i + 1..]),
            None => (time, ""),
        };
        let tp: Vec<&str> = hms.split(|c: char| !c.is_ascii_digit()).collect();
        if tp.len() != 3 || tp.iter().any(|p| p.is_empty() || p.len() > 2) {
            return None;
        }
        dt.h = num(tp[0])?;
        dt.mi = num(tp[1])?;
        dt.s = num(tp[2])?;
        if !frac.is_empty() {
            if !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let digits: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
            dt.us = num(&digits)?;
        }
    }
    let valid = (0..=9999).contains(&dt.y)
        && (0..=12).contains(&dt.m)
        && (0..=31).contains(&dt.d)
        && (0..=23).contains(&dt.h)
        && (0..=59).contains(&dt.mi)
        && (0..=59).contains(&dt.s);
    valid.then_some(dt)
}

/// MySQL's `calc_daynr`: days since year 0 (TO_DAYS).
pub(crate) fn daynr(y: i64, m: i64, d: i64) -> i64 {
    if y == 0 && m == 0 {
        return 0;
    }
    let mut y = y;
    let mut delsum = 365 * y + 31 * (m - 1) + d;
    if m <= 2 {
        y -= 1;
    } else {
        delsum -= (m * 4 + 23) / 10;
    }
    let temp = ((y / 100 + 1) * 3) / 4;
    delsum + y / 4 - temp
}

pub(crate) fn days_in_year(y: i64) -> i64 {
    if (y & 3) == 0 && (y % 100 != 0 || (y % 400 == 0 && y != 0)) {
        366
    } else {
        365
    }
}

/// MySQL's `calc_weekday`: 0 = Monday (or Sunday when `sunday_first`).
pub(crate) fn weekday(daynr: i64, sunday_first: bool) -> i64 {
    (daynr + 5 + i64::from(sunday_first)).rem_euclid(7)
}

/// MySQL's `calc_week` (the flags of `WEEK()`/`YEARWEEK()` modes): (week, year).
pub(crate) fn calc_week(
    dt: &Dt,
    monday_first: bool,
    mut week_year: bool,
    first_weekday: bool,
) -> (i64, i64) {
    let day = daynr(dt.y, dt.m, dt.d);
    let mut first = daynr(dt.y, 1, 1);
    let mut wd = weekday(first, !monday_first);
    let mut year = dt.y;
    if dt.m == 1 && dt.d <= 7 - wd {
        if !week_year && ((first_weekday && wd != 0) || (!first_weekday && wd >= 4)) {
            return (0, year);
        }
        week_year = true;
        year -= 1;
        let days = days_in_year(year);
        first -= days;
        wd = (wd + 53 * 7 - days) % 7;
    }
    let days = if (first_weekday && wd != 0) || (!first_weekday && wd >= 4) {
        day - (first + (7 - wd))
    } else {
        day - (first - wd)
    };
    if week_year && days >= 52 * 7 {
        let wd2 = (wd + days_in_year(year)) % 7;
        if (!first_weekday && wd2 < 4) || (first_weekday && wd2 == 0) {
            return (1, year + 1);
        }
    }
    (days / 7 + 1, year)
}

/// True for a date with a zero month or day (the server's day-number functions return NULL).
pub(crate) fn zero_in_date(d: &Dt) -> bool {
    d.m == 0 || d.d == 0
}

pub(crate) fn one_arg<'v>(name: &str, args: &'v [EV]) -> Result<&'v EV, PartitionError> {
    match args {
        [a] => Ok(a),
        _ => err(format!(
            "{name}() takes one argument here, got {}",
            args.len()
        )),
    }
}

pub(crate) fn call(name: &str, args: &[EV]) -> Result<EV, PartitionError> {
    match name {
        "YEAR" | "MONTH" | "DAY" | "DAYOFMONTH" | "QUARTER" | "TO_DAYS" | "TO_SECONDS"
        | "DAYOFYEAR" | "DAYOFWEEK" | "WEEKDAY" => date_part(name, args),
        "YEARWEEK" => yearweek(args),
        "DATEDIFF" => datediff(args),
        "HOUR" | "MINUTE" | "SECOND" | "MICROSECOND" | "TIME_TO_SEC" => time_part(name, args),
        "UNIX_TIMESTAMP" => unix_timestamp(args),
        "ABS" | "CEILING" | "CEIL" | "FLOOR" | "MOD" => numeric(name, args),
        _ => cannot_place(format!(
            "function {name}() in a partition expression is not supported by Sluice"
        )),
    }
}

fn int(v: i64) -> EV {
    EV::Int(v as i128)
}

/// The date functions of one argument (NULL for NULL, and for a zero date where the server
/// returns NULL).
fn date_part(name: &str, args: &[EV]) -> Result<EV, PartitionError> {
    let Some(d) = date_arg(one_arg(name, args)?, name)? else {
        return Ok(EV::Null);
    };
    let days = || daynr(d.y, d.m, d.d);
    Ok(match name {
        "YEAR" => int(d.y),
        "MONTH" => int(d.m),
        "DAY" | "DAYOFMONTH" => int(d.d),
        "QUARTER" => int((d.m + 2) / 3),
        _ if zero_in_date(&d) => EV::Null,
        "TO_DAYS" => int(days()),
        "TO_SECONDS" => int(days() * 86400 + d.h * 3600 + d.mi * 60 + d.s),
        "DAYOFYEAR" => int(days() - daynr(d.y, 1, 1) + 1),
        "DAYOFWEEK" => int(weekday(days(), true) + 1),
        _ => int(weekday(days(), false)),
    })
}

/// `YEARWEEK(d)`, mode 0: Sunday first, weeks 1-53 of the week's own year.
fn yearweek(args: &[EV]) -> Result<EV, PartitionError> {
    if args.len() != 1 {
        return cannot_place("YEARWEEK() with a mode argument is not supported");
    }
    Ok(match date_arg(one_arg("YEARWEEK", args)?, "YEARWEEK")? {
        Some(d) if !zero_in_date(&d) => {
            let (week, year) = calc_week(&d, false, true, true);
            int(year * 100 + week)
        }
        _ => EV::Null,
    })
}

fn datediff(args: &[EV]) -> Result<EV, PartitionError> {
    let [a, b] = args else {
        return err(format!(
            "DATEDIFF() takes two arguments, got {}",
            args.len()
        ));
    };
    Ok(match (date_arg(a, "DATEDIFF")?, date_arg(b, "DATEDIFF")?) {
        (Some(a), Some(b)) if !zero_in_date(&a) && !zero_in_date(&b) => {
            int(daynr(a.y, a.m, a.d) - daynr(b.y, b.m, b.d))
        }
        _ => EV::Null,
    })
}

/// HOUR, MINUTE, SECOND, MICROSECOND, TIME_TO_SEC of a TIME or a date.
fn time_part(name: &str, args: &[EV]) -> Result<EV, PartitionError> {
    let (neg, h, mi, s, us) = match one_arg(name, args)? {
        EV::Null => return Ok(EV::Null),
        EV::Time(t) => (t.neg, t.h, t.mi, t.s, t.us),
        other => match date_arg(other, name)? {
            Some(d) => (false, d.h, d.mi, d.s, d.us),
            None => return Ok(EV::Null),
        },
    };
    Ok(match name {
        "HOUR" => int(h),
        "MINUTE" => int(mi),
        "SECOND" => int(s),
        "MICROSECOND" => int(us),
        _ => {
            // The integer value of a fractional TIME_TO_SEC is its floor (checked:
            // '-10:00:01.4' → -36002, '10:00:01.6' → 36001).
            let secs = h * 3600 + mi * 60 + s;
            int(match (neg, us) {
                (false, _) => secs,
                (true, 0) => -secs,
                (true, _) => -secs - 1,
            })
        }
    })
}

fn unix_timestamp(args: &[EV]) -> Result<EV, PartitionError> {
    match one_arg("UNIX_TIMESTAMP", args)? {
        EV::Null => Ok(EV::Null),
        // The integer value of UNIX_TIMESTAMP(ts) drops the fraction (checked: 8.6 s → 8).
        EV::Ts(us) => Ok(int(us.div_euclid(1_000_000))),
        other => cannot_place(format!(
            "UNIX_TIMESTAMP() of {} depends on the session time zone (only a TIMESTAMP column is supported)",
            other.kind()
        )),
    }
}

/// ABS, CEILING/CEIL/FLOOR (of integers: the value), MOD (NULL for a zero divisor).
fn numeric(name: &str, args: &[EV]) -> Result<EV, PartitionError> {
    if name == "MOD" {
        let [a, b] = args else {
            return err(format!("MOD() takes two arguments, got {}", args.len()));
        };
        return Ok(match (int_arg(a, name)?, int_arg(b, name)?) {
            (Some(_), Some(0)) => EV::Null,
            (Some(a), Some(b)) => EV::Int(a % b),
            _ => EV::Null,
        });
    }
    Ok(match int_arg(one_arg(name, args)?, name)? {
        None => EV::Null,
        Some(v) if name == "ABS" => EV::Int(v.abs()),
        Some(v) => EV::Int(v),
    })
}

pub(crate) fn extract(unit: &str, v: &EV) -> Result<EV, PartitionError> {
    let d = match v {
        EV::Null => return Ok(EV::Null),
        EV::Time(_) => {
            return cannot_place(
                "EXTRACT(… FROM a TIME) in a partition expression is not supported by Sluice",
            )
        }
        other => match date_arg(other, "EXTRACT")? {
            Some(d) => d,
            None => return Ok(EV::Null),
        },
    };
    let r = match unit {
        "YEAR" => d.y,
        "QUARTER" => (d.m + 2) / 3,
        "MONTH" => d.m,
        "DAY" => d.d,
        "HOUR" => d.h,
        "MINUTE" => d.mi,
        "SECOND" => d.s,
        "MICROSECOND" => d.us,
        "YEAR_MONTH" => d.y * 100 + d.m,
        "DAY_HOUR" => d.d * 100 + d.h,
        "DAY_MINUTE" => (d.d * 100 + d.h) * 100 + d.mi,
        "DAY_SECOND" => ((d.d * 100 + d.h) * 100 + d.mi) * 100 + d.s,
        "HOUR_MINUTE" => d.h * 100 + d.mi,
        "HOUR_SECOND" => (d.h * 100 + d.mi) * 100 + d.s,
        "MINUTE_SECOND" => d.mi * 100 + d.s,
        _ => {
            return cannot_place(format!(
                "EXTRACT({unit} FROM …) in a partition expression is not supported by Sluice"
            ))
        }
    };
    Ok(EV::Int(r as i128))
}
