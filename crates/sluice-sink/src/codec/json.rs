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
pub fn push_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        // Every byte that needs escaping is ASCII, so `start..i` ends on a char boundary.
        out.push_str(&s[start..i]);
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
    out.push_str(&s[start..]);
}

/// Appends an integer.
pub fn push_int(out: &mut String, n: impl std::fmt::Display) {
    let _ = write!(out, "{n}");
}

/// Appends `v` as `serde_json::to_string(v)` would.
pub fn push_value(out: &mut String, v: &Json) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => push_int(out, n),
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
}
