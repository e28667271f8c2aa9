//! MariaDB's binary-stored types whose values users and downstreams know as text: `UUID`,
//! `INET4`, `INET6`. The binlog carries their 16 or 4 stored bytes; a downstream refuses those
//! bytes as a value (ERROR 1292) and a storage consumer cannot read them, so capture turns them
//! into the server's text form before keying and storing rows.
//!
//! Invariant: the text parses back, on MariaDB, to the very bytes the binlog carried (so a
//! downstream stores the same value and keys are stable).

use sluice_types::Value;
use std::net::{Ipv4Addr, Ipv6Addr};

/// How a column's stored bytes read as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextForm {
    Uuid,
    Inet4,
    Inet6,
}

impl TextForm {
    /// The form of a column of SQL type `sql_type` (`uuid`, `inet4`, `inet6`), if any.
    pub fn of(sql_type: &str) -> Option<TextForm> {
        let word: String = sql_type
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        match word.as_str() {
            "uuid" => Some(TextForm::Uuid),
            "inet4" => Some(TextForm::Inet4),
            "inet6" => Some(TextForm::Inet6),
            _ => None,
        }
    }

    /// The text of `bytes`, or `None` when they are not of this type's length.
    pub fn text(self, bytes: &[u8]) -> Option<String> {
        match self {
            TextForm::Inet4 => {
                let b: [u8; 4] = bytes.try_into().ok()?;
                Some(Ipv4Addr::from(b).to_string())
            }
            TextForm::Inet6 => {
                let b: [u8; 16] = bytes.try_into().ok()?;
                Some(Ipv6Addr::from(b).to_string())
            }
            TextForm::Uuid => {
                let b: [u8; 16] = bytes.try_into().ok()?;
                let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
                Some(format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                ))
            }
        }
    }

    /// Replaces a stored-bytes value by its text (other values stay).
    pub fn apply(self, v: &mut Value) {
        if let Value::Bytes(b) = v {
            if let Some(t) = self.text(b) {
                *v = Value::Text(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_bytes_read_as_the_servers_text() {
        let u = [
            0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17,
            0x40, 0x00,
        ];
        assert_eq!(
            TextForm::Uuid.text(&u).as_deref(),
            Some("123e4567-e89b-12d3-a456-426614174000")
        );
        assert_eq!(
            TextForm::Inet4.text(&[10, 1, 2, 3]).as_deref(),
            Some("10.1.2.3")
        );
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6[15] = 1;
        assert_eq!(TextForm::Inet6.text(&v6).as_deref(), Some("2001:db8::1"));
        let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 1, 2, 3, 4];
        assert_eq!(
            TextForm::Inet6.text(&mapped).as_deref(),
            Some("::ffff:1.2.3.4")
        );
        assert_eq!(
            TextForm::Inet4.text(&[1, 2]),
            None,
            "a wrong length stays bytes"
        );
        assert_eq!(TextForm::of("UUID"), Some(TextForm::Uuid));
        assert_eq!(TextForm::of("inet6"), Some(TextForm::Inet6));
        assert_eq!(TextForm::of("int(11)"), None);
    }
}
