//! JSON text written straight into the message being built, byte for byte as `serde_json`
//! writes the same values (the golden files pin the output), without building a
//! `serde_json::Value` per field or a `String` per string.
//!
//! Invariants:
//! - [`push_str`] escapes exactly what `serde_json` escapes (`"`, `\`, and the control
//!   characters, `\b \t \n \f \r` by their short forms and the rest as `\u00xx`), nothing else;
//! - [`push_value`] writes a `serde_json::Value` as `serde_json::to_string` would (object keys
//!   in the map's order).

use serde_json::Value as Json;
use std::fmt::Write;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The escape of one byte, if it needs one.
fn escape(b: u8) -> Option<&'static str> {
    Some(match b {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        0x08 => "\\b",
        0x09 => "\\t",
        0x0a => "\\n",
        0x0c => "\\f",
        0x0d => "\\r",
        _ => return None,
    })
}

/// Appends `s` as a JSON string, quotes included.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    push_escaped(out, s);
    out.push('"');
}

/// Appends `s` escaped as inside a JSON string, without the quotes (a string built of parts).
/// The runs between escapes are copied whole; `next_escape` finds them eight bytes at a time.
pub fn push_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        let i = next_escape(bytes, start);
        // Every byte that needs escaping is ASCII, so `start..i` ends on a char boundary.
        out.push_str(&s[start..i]);
        let Some(&b) = bytes.get(i) else {
            return;
        };
        match escape(b) {
            Some(e) => out.push_str(e),
            None => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        start = i + 1;
    }
}

/// Whether JSON needs `b` escaped inside a string: `"`, `\` and the control characters.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The index of the first byte at or after `from` that needs escaping, or `bytes.len()`.
/// Whole eight-byte words without one are skipped at once: a byte of the word is below 0x20,
/// or equal to `"` or `\`, exactly when the word's test below has its high bit set (bytes of
/// 0x80 and above, the parts of multi-byte characters, never set it); a word that may hold one
/// is looked at byte by byte.
fn next_escape(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x;
    let mut i = from;
    while let Some(word) = bytes.get(i..i + 8) {
        let x = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let below_space = x.wrapping_sub(ONES * 0x20) & !x;
        let quote = zero_byte(x ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(x ^ (ONES * u64::from(b'\\')));
        if (below_space | quote | backslash) & HIGH != 0 {
            break;
        }
        i += 8;
    }
    bytes[i..]
        .iter()
        .position(|&b| needs_escape(b))
        .map_or(bytes.len(), |p| i + p)
}

/// Appends an integer in decimal, as `Display` writes it (without the formatting machinery:
/// a few integers go in every row).
pub fn push_int(out: &mut String, n: impl Into<i128>) {
    let n: i128 = n.into();
    // Every caller's integer has at most 64 bits; a wider one goes the general way.
    let Ok(mut m) = u64::try_from(n.unsigned_abs()) else {
        let _ = write!(out, "{n}");
        return;
    };
    let mut buf = [0u8; 21];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    out.push_str(std::str::from_utf8(&buf[i..]).expect("ASCII digits"));
}

/// Appends `v` as `serde_json::to_string(v)` would.
pub fn push_value(out: &mut String, v: &Json) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Json::String(s) => push_str(out, s),
        Json::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_value(out, x);
            }
            out.push(']');
        }
        Json::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_str(out, k);
                out.push(':');
                push_value(out, x);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_what_serde_json_writes() {
        let mut all = String::new();
        for b in 0u8..=0x7f {
            all.push(char::from(b));
        }
        all.push_str("é ☃ \u{1F600} \u{7f} \u{80}");
        let values = [
            json!(null),
            json!(true),
            json!(-9_223_372_036_854_775_808_i64),
            json!(18_446_744_073_709_551_615_u64),
            json!(-2.25e-10),
            json!(1.5_f32),
            json!(f64::MAX),
            json!(0.1),
            json!(all),
            json!({"b": [1, "x\"y", null], "a": {"k\n": -0.0}}),
        ];
        for v in values {
            let mut out = String::new();
            push_value(&mut out, &v);
            assert_eq!(out, serde_json::to_string(&v).expect("serializes"), "{v:?}");
        }
    }

    /// Integers at the edges of every width are written as `Display` writes them.
    #[test]
    fn integers_as_display_writes_them() {
        let mut cases: Vec<i128> = vec![0, 1, -1, 9, 10, -10, 99, 100, 12_345];
        for v in [
            i64::MIN as i128,
            i64::MAX as i128,
            u64::MAX as i128,
            i32::MIN as i128,
            i128::MIN + 1,
            i128::MAX - 1,
        ] {
            cases.extend([v, v - 1, v + 1]);
        }
        for p in 0..20 {
            let t = 10_i128.pow(p);
            cases.extend([t, t - 1, -t, 1 - t]);
        }
        for v in cases {
            let mut out = String::from("x");
            if let Ok(u) = u64::try_from(v) {
                push_int(&mut out, u);
            } else if let Ok(i) = i64::try_from(v) {
                push_int(&mut out, i);
            } else {
                push_int(&mut out, v); // wider than any caller's: the general way
            }
            assert_eq!(out, format!("x{v}"));
        }
    }

    /// Strings of every length up to 40 with the bytes that need escaping (and multi-byte
    /// characters) at random places, alone and after a prefix of each length up to 8 (every
    /// alignment of the eight-byte scan): escaped exactly as serde_json escapes them.
    #[test]
    fn escapes_what_serde_json_escapes_at_every_place() {
        let parts = [
            "a",
            "Z",
            " ",
            "~",
            "\"",
            "\\",
            "\n",
            "\u{0}",
            "\u{1f}",
            "\u{7f}",
            "é",
            "☃",
            "\u{1F600}",
        ];
        let mut rng = sluice_testkit::rng::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
        for len in 0..40 {
            for _ in 0..50 {
                let s: String = (0..len)
                    .map(|_| {
                        // Mostly plain bytes, like real text, so the eight-byte skip is used.
                        let r = next() as usize;
                        if r.is_multiple_of(4) {
                            parts[r / 4 % parts.len()]
                        } else {
                            "x"
                        }
                    })
                    .collect();
                for prefix in 0..8 {
                    let text = format!("{}{s}", "p".repeat(prefix));
                    let mut out = String::new();
                    push_str(&mut out, &text);
                    let want = serde_json::to_string(&text).expect("serializes");
                    assert_eq!(out, want, "{text:?}");
                }
            }
        }
    }
}
