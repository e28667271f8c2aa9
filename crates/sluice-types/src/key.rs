//! Keys and key spans. A row key is `t` + table id (8 bytes big endian) + the memcomparable
//! encoding of the row's primary key, so keys of one table are contiguous and bytewise ordered.

use crate::ids::TableId;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// An encoded key (table prefix plus memcomparable primary key). Ordered and compared bytewise
/// (as its bytes are), eight bytes at a time ([`cmp_bytes`]).
#[derive(Clone, Eq, Default, Serialize, Deserialize)]
pub struct Key(pub Vec<u8>);

/// The bytes' hash: equal keys are equal bytes.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.0.len() == other.0.len() && cmp_bytes(&self.0, &other.0).is_eq()
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        cmp_bytes(&self.0, &other.0)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The bytewise (lexicographic) order of `a` and `b`, what `a.cmp(b)` is. Keys are short (a
/// 17-byte row key of one integer) and looked up in ordered maps all the time (the maintainer's
/// span map, per dispatcher report): a call into the C library's `memcmp` per comparison was
/// about a tenth of a million-span scheduling run, so short keys are compared here a big-endian
/// word at a time, long ones by the slice comparison.
#[inline]
pub fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    if n > 64 {
        return a.cmp(b);
    }
    let mut i = 0;
    while let (Some(x), Some(y)) = (a[i..n].first_chunk::<8>(), b[i..n].first_chunk::<8>()) {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        i += 8;
    }
    // The last 0-7 bytes of each, as many in both: zero-padded words order as the bytes do.
    tail_word(&a[i..n])
        .cmp(&tail_word(&b[i..n]))
        .then(a.len().cmp(&b.len()))
}

/// Up to 8 bytes as the high bytes of a big-endian word (byte by byte: a copy of a variable
/// length is a call to `memcpy`, which this comparison is here to avoid).
#[inline]
fn tail_word(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .take(8)
        .enumerate()
        .fold(0, |w, (i, b)| w | u64::from(*b) << (56 - 8 * i))
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// Writes `bytes` as lowercase hex, two digits each (what `{b:02x}` per byte writes), a
/// buffer at a time: keys are in every trace line of a create, and one formatted write per
/// byte was a tenth of a `sluice-sim scale` run.
fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 64];
    for chunk in bytes.chunks(buf.len() / 2) {
        for (i, b) in chunk.iter().enumerate() {
            buf[2 * i] = DIGITS[usize::from(b >> 4)];
            buf[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        let hex = std::str::from_utf8(&buf[..2 * chunk.len()]).map_err(|_| fmt::Error)?;
        f.write_str(hex)?;
    }
    Ok(())
}

/// The first byte of every table key.
pub const TABLE_PREFIX: u8 = b't';

impl Key {
    /// The smallest key of a table (the table's prefix).
    pub fn table_start(table: TableId) -> Key {
        let mut v = Vec::with_capacity(9);
        v.push(TABLE_PREFIX);
        v.extend_from_slice(&table.0.to_be_bytes());
        Key(v)
    }

    /// The exclusive end of a table's keys (the prefix of the next table id).
    pub fn table_end(table: TableId) -> Key {
        match table.0.checked_add(1) {
            Some(next) => Key::table_start(TableId(next)),
            None => Key(vec![TABLE_PREFIX + 1]),
        }
    }

    /// A row key: the table prefix followed by an already memcomparable-encoded primary key.
    pub fn row(table: TableId, encoded_pk: &[u8]) -> Key {
        let mut k = Key::table_start(table);
        k.0.extend_from_slice(encoded_pk);
        k
    }

    /// A row key whose primary key is one unsigned integer (used by the simulator and tests).
    pub fn row_u64(table: TableId, pk: u64) -> Key {
        Key::row(table, &pk.to_be_bytes())
    }

    /// The table id encoded in this key, if it is a table key.
    pub fn table_id(&self) -> Option<TableId> {
        if self.0.len() < 9 || self.0[0] != TABLE_PREFIX {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[1..9]);
        Some(TableId(u64::from_be_bytes(b)))
    }
}

/// A half-open key range `[start, end)` inside one table. The unit of scheduling: one span is
/// served by exactly one working dispatcher.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Span {
    pub table: TableId,
    pub start: Key,
    pub end: Key,
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_whole_table() {
            write!(f, "{:?}[*]", self.table)
        } else {
            let s = &self.start.0[self.start.0.len().min(9)..];
            let e = &self.end.0[self.end.0.len().min(9)..];
            write!(f, "{:?}[", self.table)?;
            write_hex(f, s)?;
            f.write_str("..")?;
            if self.end == Key::table_end(self.table) {
                f.write_str("end")?;
            } else {
                write_hex(f, e)?;
            }
            f.write_str(")")
        }
    }
}

impl Span {
    pub fn whole_table(table: TableId) -> Span {
        Span {
            table,
            start: Key::table_start(table),
            end: Key::table_end(table),
        }
    }

    pub fn new(table: TableId, start: Key, end: Key) -> Span {
        Span { table, start, end }
    }

    pub fn is_whole_table(&self) -> bool {
        self.start == Key::table_start(self.table) && self.end == Key::table_end(self.table)
    }

    pub fn contains(&self, key: &Key) -> bool {
        self.contains_bytes(&key.0)
    }

    /// [`Span::contains`] for a key's bytes (no `Key` built to ask).
    pub fn contains_bytes(&self, key: &[u8]) -> bool {
        cmp_bytes(&self.start.0, key) != Ordering::Greater
            && cmp_bytes(key, &self.end.0) == Ordering::Less
    }

    pub fn overlaps(&self, other: &Span) -> bool {
        self.table == other.table && self.start < other.end && other.start < self.end
    }

    /// True when `self` covers every key of `other`.
    pub fn covers(&self, other: &Span) -> bool {
        self.table == other.table && self.start <= other.start && other.end <= self.end
    }

    /// True when `other` starts exactly where `self` ends.
    pub fn is_adjacent_before(&self, other: &Span) -> bool {
        self.table == other.table && self.end == other.start
    }

    /// Split this span at the given interior boundaries (which must be sorted and inside).
    pub fn split_at(&self, boundaries: &[Key]) -> Vec<Span> {
        let mut out = Vec::with_capacity(boundaries.len() + 1);
        let mut start = self.start.clone();
        for b in boundaries {
            if *b > start && *b < self.end {
                out.push(Span::new(self.table, start, b.clone()));
                start = b.clone();
            }
        }
        out.push(Span::new(self.table, start, self.end.clone()));
        out
    }
}

/// True when the sorted, non-overlapping `spans` exactly partition `whole` (no gap, no overlap).
pub fn spans_partition(whole: &Span, spans: &[&Span]) -> bool {
    let mut v: Vec<&Span> = spans.to_vec();
    v.sort_by(|a, b| a.start.cmp(&b.start));
    let mut at = whole.start.clone();
    for s in v {
        if s.table != whole.table || s.start != at {
            return false;
        }
        at = s.end.clone();
    }
    at == whole.end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time order and equality are the bytes' own, for keys of every length up to
    /// past the slice fallback, with long shared prefixes and differences in every position.
    #[test]
    fn keys_compare_as_their_bytes() {
        let mut rng = sluice_testkit::rng::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
        for _ in 0..200_000 {
            let len = (next() % 80) as usize;
            let a: Vec<u8> = (0..len).map(|_| (next() % 4) as u8 * 85).collect();
            let mut b = a.clone();
            match next() % 4 {
                0 => b.truncate((next() as usize) % (len + 1)),
                1 => b.extend((0..next() % 10).map(|_| (next() % 256) as u8)),
                2 if len > 0 => b[(next() as usize) % len] = (next() % 256) as u8,
                _ => b = (0..(next() % 80)).map(|_| (next() % 256) as u8).collect(),
            }
            let (ka, kb) = (Key(a.clone()), Key(b.clone()));
            assert_eq!(ka.cmp(&kb), a.cmp(&b), "{a:?} vs {b:?}");
            assert_eq!(kb.cmp(&ka), b.cmp(&a), "{b:?} vs {a:?}");
            assert_eq!(ka == kb, a == b, "{a:?} == {b:?}");
            assert_eq!(ka.partial_cmp(&kb), Some(a.cmp(&b)));
        }
    }

    #[test]
    fn debug_hex_is_two_digits_a_byte() {
        let bytes: Vec<u8> = (0..=255u8).chain(0..40).collect();
        let want: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(format!("{:?}", Key(bytes)), want);
        assert_eq!(format!("{:?}", Key(Vec::new())), "");
    }

    #[test]
    fn table_keys_stay_inside_table_span() {
        let t = TableId(7);
        let span = Span::whole_table(t);
        assert!(span.contains(&Key::row_u64(t, 0)));
        assert!(span.contains(&Key::row_u64(t, u64::MAX)));
        assert!(!span.contains(&Key::row_u64(TableId(8), 0)));
        assert!(!span.contains(&Key::row_u64(TableId(6), u64::MAX)));
        assert_eq!(Key::row_u64(t, 5).table_id(), Some(t));
    }

    #[test]
    fn split_and_partition() {
        let t = TableId(1);
        let whole = Span::whole_table(t);
        let parts = whole.split_at(&[Key::row_u64(t, 10), Key::row_u64(t, 20)]);
        assert_eq!(parts.len(), 3);
        let refs: Vec<&Span> = parts.iter().collect();
        assert!(spans_partition(&whole, &refs));
        assert!(parts[0].is_adjacent_before(&parts[1]));
        assert!(!parts[0].overlaps(&parts[1]));
        assert!(whole.covers(&parts[2]));
        let gap: Vec<&Span> = vec![&parts[0], &parts[2]];
        assert!(!spans_partition(&whole, &gap));
    }
}
