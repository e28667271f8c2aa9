//! A compact binary encoding of [`RowEvent`] for the event store (JSON was the store's
//! bottleneck). Little-endian fixed-width numbers, `u32` length prefixes, one tag byte per
//! [`Value`]. The first byte is the format version: [`FORMAT_V1`], or [`FORMAT_V2`] for an event
//! with a GTID (V1's fields, then the GTID's domain, server and sequence). Both are read, so a
//! store written before GTIDs were kept reads as it did.
//!
//! Invariant: `decode(encode(e)) == e` for every event; decoding malformed bytes is an error,
//! never a panic.

use sluice_types::{Gtid, Key, RowEvent, RowKind, TableId, Value};

pub const FORMAT_V1: u8 = 1;
/// V1 followed by the GTID (`u32` domain, `u32` server, `u64` sequence).
pub const FORMAT_V2: u8 = 2;

pub fn encode(e: &RowEvent, out: &mut Vec<u8>) {
    out.push(if e.gtid.is_some() {
        FORMAT_V2
    } else {
        FORMAT_V1
    });
    for n in [
        e.table_id.0,
        e.schema_version,
        e.commit_ts,
        e.commit_time_ms,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.push(match e.kind {
        RowKind::Insert => 0,
        RowKind::Update => 1,
        RowKind::Delete => 2,
    });
    bytes(out, &e.key.0);
    image(out, e.before.as_deref());
    image(out, e.after.as_deref());
    if let Some(g) = e.gtid {
        out.extend_from_slice(&g.domain.to_le_bytes());
        out.extend_from_slice(&g.server.to_le_bytes());
        out.extend_from_slice(&g.seq.to_le_bytes());
    }
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn image(out: &mut Vec<u8>, img: Option<&[Value]>) {
    let Some(vals) = img else {
        out.push(0);
        return;
    };
    out.push(1);
    out.extend_from_slice(&(vals.len() as u32).to_le_bytes());
    for v in vals {
        value(out, v);
    }
}

fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(0),
        Value::Int(i) => {
            out.push(1);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::UInt(u) => {
            out.push(2);
            out.extend_from_slice(&u.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(3);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Double(f) => {
            out.push(4);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Decimal(s) => {
            out.push(5);
            bytes(out, s.as_bytes());
        }
        Value::Text(s) => {
            out.push(6);
            bytes(out, s.as_bytes());
        }
        Value::Bytes(b) => {
            out.push(7);
            bytes(out, b);
        }
        Value::Date { year, month, day } => {
            out.push(8);
            out.extend_from_slice(&year.to_le_bytes());
            out.extend_from_slice(&[*month, *day]);
        }
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => {
            out.push(9);
            out.push(*negative as u8);
            out.extend_from_slice(&hours.to_le_bytes());
            out.extend_from_slice(&[*minutes, *seconds]);
            out.extend_from_slice(&micros.to_le_bytes());
        }
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => {
            out.push(10);
            out.extend_from_slice(&year.to_le_bytes());
            out.extend_from_slice(&[*month, *day, *hour, *minute, *second]);
            out.extend_from_slice(&micros.to_le_bytes());
        }
        Value::Timestamp { micros } => {
            out.push(11);
            out.extend_from_slice(&micros.to_le_bytes());
        }
        Value::Year(y) => {
            out.push(12);
            out.extend_from_slice(&y.to_le_bytes());
        }
        Value::Enum { index, name } => {
            out.push(13);
            out.extend_from_slice(&index.to_le_bytes());
            bytes(out, name.as_bytes());
        }
        Value::Set { bits, names } => {
            out.push(14);
            out.extend_from_slice(&bits.to_le_bytes());
            out.extend_from_slice(&(names.len() as u32).to_le_bytes());
            for n in names {
                bytes(out, n.as_bytes());
            }
        }
        Value::Bit { bits, width } => {
            out.push(15);
            out.extend_from_slice(&bits.to_le_bytes());
            out.extend_from_slice(&width.to_le_bytes());
        }
        Value::Json(s) => {
            out.push(16);
            bytes(out, s.as_bytes());
        }
        Value::Geometry(b) => {
            out.push(17);
            bytes(out, b);
        }
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}

type Res<T> = Result<T, String>;

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or("truncated record")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Res<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Res<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Res<u16> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Res<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Res<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn bytes(&mut self) -> Res<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Res<String> {
        String::from_utf8(self.bytes()?).map_err(|e| e.to_string())
    }
}

/// Where the row key sits in an encoded event: after the version byte, four `u64` and the kind.
const KEY_AT: usize = 1 + 4 * 8 + 1;

/// The row key of an encoded event, read in place (a scan filters rows by span without
/// decoding them).
pub fn key_of(b: &[u8]) -> Res<&[u8]> {
    let v = *b.first().ok_or("empty record")?;
    if v != FORMAT_V1 && v != FORMAT_V2 {
        return Err(format!("unknown record format {v}"));
    }
    let len = b
        .get(KEY_AT..KEY_AT + 4)
        .and_then(|l| l.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("short record")? as usize;
    b.get(KEY_AT + 4..KEY_AT + 4 + len)
        .ok_or_else(|| "short record key".to_string())
}

pub fn decode(b: &[u8]) -> Res<RowEvent> {
    let mut r = R { b, at: 0 };
    let v = r.u8()?;
    if v != FORMAT_V1 && v != FORMAT_V2 {
        return Err(format!("unknown record format {v}"));
    }
    let (table, schema_version, commit_ts, commit_time_ms) =
        (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let kind = match r.u8()? {
        0 => RowKind::Insert,
        1 => RowKind::Update,
        2 => RowKind::Delete,
        k => return Err(format!("bad row kind {k}")),
    };
    let key = Key(r.bytes()?);
    let before = read_image(&mut r)?;
    let after = read_image(&mut r)?;
    let gtid = match v {
        FORMAT_V2 => Some(Gtid {
            domain: r.u32()?,
            server: r.u32()?,
            seq: r.u64()?,
        }),
        _ => None,
    };
    Ok(RowEvent {
        table_id: TableId(table),
        schema_version,
        commit_ts,
        commit_time_ms,
        kind,
        key,
        before,
        after,
        snapshot: false,
        gtid,
    })
}

fn read_image(r: &mut R<'_>) -> Res<Option<Vec<Value>>> {
    if r.u8()? == 0 {
        return Ok(None);
    }
    let n = r.u32()? as usize;
    let mut v = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        v.push(read_value(r)?);
    }
    Ok(Some(v))
}

fn read_value(r: &mut R<'_>) -> Res<Value> {
    Ok(match r.u8()? {
        0 => Value::Null,
        1 => Value::Int(r.u64()? as i64),
        2 => Value::UInt(r.u64()?),
        3 => Value::Float(f32::from_bits(r.u32()?)),
        4 => Value::Double(f64::from_bits(r.u64()?)),
        5 => Value::Decimal(r.string()?),
        6 => Value::Text(r.string()?),
        7 => Value::Bytes(r.bytes()?),
        8 => Value::Date {
            year: r.u16()?,
            month: r.u8()?,
            day: r.u8()?,
        },
        9 => Value::Time {
            negative: r.u8()? != 0,
            hours: r.u32()?,
            minutes: r.u8()?,
            seconds: r.u8()?,
            micros: r.u32()?,
        },
        10 => Value::DateTime {
            year: r.u16()?,
            month: r.u8()?,
            day: r.u8()?,
            hour: r.u8()?,
            minute: r.u8()?,
            second: r.u8()?,
            micros: r.u32()?,
        },
        11 => Value::Timestamp {
            micros: r.u64()? as i64,
        },
        12 => Value::Year(r.u16()?),
        13 => Value::Enum {
            index: r.u16()?,
            name: r.string()?,
        },
        14 => {
            let bits = r.u64()?;
            let n = r.u32()? as usize;
            let mut names = Vec::with_capacity(n.min(64));
            for _ in 0..n {
                names.push(r.string()?);
            }
            Value::Set { bits, names }
        }
        15 => Value::Bit {
            bits: r.u64()?,
            width: r.u16()?,
        },
        16 => Value::Json(r.string()?),
        17 => Value::Geometry(r.bytes()?),
        t => return Err(format!("bad value tag {t}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_every_value_and_reject_garbage() {
        let vals = vec![
            Value::Null,
            Value::Int(i64::MIN),
            Value::UInt(u64::MAX),
            Value::Float(-1.5),
            Value::Double(f64::MAX),
            Value::Decimal("-1.50".into()),
            Value::Text("ü€😀".into()),
            Value::Bytes(vec![0, 255]),
            Value::Date {
                year: 9999,
                month: 12,
                day: 31,
            },
            Value::Time {
                negative: true,
                hours: 838,
                minutes: 59,
                seconds: 59,
                micros: 999_999,
            },
            Value::DateTime {
                year: 1000,
                month: 1,
                day: 2,
                hour: 3,
                minute: 4,
                second: 5,
                micros: 6,
            },
            Value::Timestamp { micros: -5 },
            Value::Year(2155),
            Value::Enum {
                index: 2,
                name: "b".into(),
            },
            Value::Set {
                bits: 5,
                names: vec!["x".into(), "z".into()],
            },
            Value::Bit {
                bits: 1023,
                width: 10,
            },
            Value::Json("{}".into()),
            Value::Geometry(vec![1, 2, 3]),
        ];
        let e = RowEvent {
            table_id: TableId(7),
            schema_version: 3,
            commit_ts: 1 << 40,
            commit_time_ms: 99,
            kind: RowKind::Update,
            key: Key(vec![1, 2, 3]),
            before: Some(vals.clone()),
            after: None,
            snapshot: false,
            gtid: None,
        };
        let with_gtid = RowEvent {
            gtid: Some(Gtid {
                domain: u32::MAX,
                server: 7,
                seq: u64::MAX,
            }),
            ..e.clone()
        };
        for (e, format) in [(e, FORMAT_V1), (with_gtid, FORMAT_V2)] {
            let mut b = Vec::new();
            encode(&e, &mut b);
            // Without a GTID the record is format 1, byte for byte what stores written before
            // GTIDs hold, so they read as they did.
            assert_eq!(b[0], format);
            assert_eq!(decode(&b).expect("decode"), e);
            assert_eq!(key_of(&b).expect("key"), e.key.0.as_slice());
            assert!(
                key_of(&b[..KEY_AT + 4 + 2]).is_err(),
                "a cut key is an error"
            );
            for cut in 0..b.len() {
                assert!(
                    decode(&b[..cut]).is_err(),
                    "a truncated record is an error (cut at {cut})"
                );
            }
        }
    }
}
