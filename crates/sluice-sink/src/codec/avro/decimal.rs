//! Avro's `decimal` logical type: a decimal's text to the big-endian two's complement of its
//! unscaled value and back, for any precision MySQL allows (65 digits: past `i128`).
//!
//! Invariant: `text_of(unscaled_bytes(t, s), s)` gives `t` back in canonical form (no leading
//! zeros, exactly `s` fraction digits).

/// Magnitude in base 256, least significant byte first.
type Mag = Vec<u8>;

fn mul_add(m: &mut Mag, mul: u32, add: u32) {
    let mut carry = add;
    for b in m.iter_mut() {
        let v = u32::from(*b) * mul + carry;
        *b = v as u8;
        carry = v >> 8;
    }
    while carry > 0 {
        m.push(carry as u8);
        carry >>= 8;
    }
}

/// Divides by `d` in place; returns the remainder.
fn div_rem(m: &mut Mag, d: u32) -> u32 {
    let mut rem = 0u32;
    for b in m.iter_mut().rev() {
        let v = (rem << 8) | u32::from(*b);
        *b = (v / d) as u8;
        rem = v % d;
    }
    while m.last() == Some(&0) {
        m.pop();
    }
    rem
}

/// Two's complement of a magnitude, big-endian, in the fewest bytes that keep the sign.
fn twos_complement(mut m: Mag, negative: bool) -> Vec<u8> {
    while m.last() == Some(&0) {
        m.pop();
    }
    if negative && !m.is_empty() {
        // -m = !(m - 1) over enough bytes.
        let mut borrow = true;
        for b in m.iter_mut() {
            if borrow {
                borrow = *b == 0;
                *b = b.wrapping_sub(1);
            }
        }
        for b in m.iter_mut() {
            *b = !*b;
        }
        if m.last().is_none_or(|b| b & 0x80 == 0) {
            m.push(0xff);
        }
        while m.len() > 1 && m[m.len() - 1] == 0xff && m[m.len() - 2] & 0x80 != 0 {
            m.pop();
        }
    } else if m.last().is_none_or(|b| b & 0x80 != 0) {
        m.push(0);
    }
    m.reverse();
    m
}

/// The unscaled value of decimal text at `scale` (`-12.5` at scale 3 → -12500), as Avro writes
/// it; `None` for text that is not a decimal, or has more nonzero fraction digits than `scale`.
pub fn unscaled_bytes(text: &str, scale: u32) -> Option<Vec<u8>> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let all_digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if !all_digits(int) || !all_digits(frac) {
        return None;
    }
    let scale = scale as usize;
    let (kept, dropped) = frac.split_at(frac.len().min(scale));
    if dropped.bytes().any(|c| c != b'0') {
        return None;
    }
    let mut m = Mag::new();
    let pad = std::iter::repeat_n(b'0', scale - kept.len());
    for c in int.bytes().chain(kept.bytes()).chain(pad) {
        mul_add(&mut m, 10, u32::from(c - b'0'));
    }
    Some(twos_complement(m, negative))
}

/// Decimal text of Avro's unscaled bytes at `scale`.
pub fn text_of(bytes: &[u8], scale: u32) -> String {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut m: Mag = bytes.iter().rev().copied().collect();
    if negative {
        // m = !x + 1
        for b in m.iter_mut() {
            *b = !*b;
        }
        mul_add(&mut m, 1, 1);
        m.truncate(bytes.len());
    }
    while m.last() == Some(&0) {
        m.pop();
    }
    let mut digits = Vec::new();
    while !m.is_empty() {
        digits.push(b'0' + div_rem(&mut m, 10) as u8);
    }
    let scale = scale as usize;
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    let (int, frac) = digits.split_at(digits.len() - scale);
    let mut s = String::new();
    if negative && digits.iter().any(|d| *d != b'0') {
        s.push('-');
    }
    s.push_str(std::str::from_utf8(int).unwrap_or("0"));
    if scale > 0 {
        s.push('.');
        s.push_str(std::str::from_utf8(frac).unwrap_or_default());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encodings() {
        // Java's BigInteger.toByteArray of the unscaled values.
        assert_eq!(unscaled_bytes("0", 0), Some(vec![0]));
        assert_eq!(unscaled_bytes("1.00", 2), Some(vec![0x64]));
        assert_eq!(unscaled_bytes("-1", 0), Some(vec![0xff]));
        assert_eq!(unscaled_bytes("127", 0), Some(vec![0x7f]));
        assert_eq!(unscaled_bytes("128", 0), Some(vec![0x00, 0x80]));
        assert_eq!(unscaled_bytes("-128", 0), Some(vec![0x80]));
        assert_eq!(unscaled_bytes("-129", 0), Some(vec![0xff, 0x7f]));
        assert_eq!(unscaled_bytes("-256", 0), Some(vec![0xff, 0x00]));
        assert_eq!(
            unscaled_bytes("-123456.125", 3),
            Some(vec![0xf8, 0xa4, 0x35, 0x83])
        );
        assert_eq!(unscaled_bytes("1.5", 1), unscaled_bytes("1.50", 1));
        assert_eq!(unscaled_bytes("1.55", 1), None);
        assert_eq!(unscaled_bytes("1e5", 0), None);
        assert_eq!(unscaled_bytes("", 0), None);
    }

    #[test]
    fn text_round_trips_up_to_65_digits() {
        let nines = "9".repeat(35);
        for (t, s) in [
            ("0.000", 3),
            ("-0.001", 3),
            ("12.50", 2),
            ("-123456.125", 3),
            (
                "99999999999999999999999999999999999999999999999999999999999999999",
                0,
            ),
            (
                "-99999999999999999999999999999999999999999999999999999999999.999999",
                6,
            ),
            (format!("{nines}.{nines}").as_str(), 35),
            ("128", 0),
            ("-128", 0),
            ("-32768.0", 1),
        ] {
            let b = unscaled_bytes(t, s).expect("a decimal");
            assert_eq!(text_of(&b, s), t, "{t} at scale {s}: {b:02x?}");
        }
        assert_eq!(
            text_of(&unscaled_bytes(".5", 1).expect("decimal"), 1),
            "0.5"
        );
        assert_eq!(text_of(&unscaled_bytes("-0", 0).expect("decimal"), 0), "0");
    }
}
