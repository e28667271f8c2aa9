//! MariaDB's two kinds of zlib compression in the binlog, turned back into plain data:
//!
//! - **compressed columns** (`VARCHAR(n) COMPRESSED`, `TEXT COMPRESSED`, `BLOB COMPRESSED`):
//!   the TABLE_MAP types 140 (`BLOB_COMPRESSED`) and 141 (`VARCHAR_COMPRESSED`), whose row
//!   values are the stored, compressed form: one header byte, then either the value as is
//!   (header 0) or zlib data ([`column_value`]). [`plain_table_map`] rewrites such a TABLE_MAP
//!   to the plain VARCHAR/BLOB types (same metadata layout) and says which columns were
//!   compressed, so every decoder reads the length-prefixed bytes and inflates them after;
//! - **compressed events** (`log_bin_compress=ON`): QUERY_COMPRESSED (165) and the compressed
//!   ROWS events (166..=171) carry their query text or their rows compressed, after a plain
//!   head ([`plain_event`] returns the event in its uncompressed type, head untouched).
//!
//! Invariants: an inflated value is exactly as long as its header says (a shorter or longer
//! stream, a wrong length or a value longer than the column allows is an error, never a
//! truncated or padded value); nothing here panics on malformed input; the rewritten events
//! keep every byte of the head, so positions, table ids and bitmaps are the upstream's.

use flate2::{Decompress, FlushDecompress, Status};
use mysql_async::binlog::events::Event;

/// MariaDB's `MYSQL_TYPE_BLOB_COMPRESSED`.
pub const BLOB_COMPRESSED: u8 = 140;
/// MariaDB's `MYSQL_TYPE_VARCHAR_COMPRESSED`.
pub const VARCHAR_COMPRESSED: u8 = 141;
const VARCHAR: u8 = 15;
const BLOB: u8 = 252;

/// Bound on one inflated value or event body (MariaDB's own limit on a row is 4 GiB; a header
/// claiming more than this is malformed rather than a value to allocate).
const MAX_INFLATED: usize = 1 << 30;

/// The value of a compressed column from its stored form. `max_len` is the column's byte
/// length bound (`None`: unbounded, as for LONGBLOB).
pub fn column_value(stored: &[u8], max_len: Option<usize>) -> Result<Vec<u8>, String> {
    let Some((&header, rest)) = stored.split_first() else {
        return Ok(Vec::new());
    };
    if header == 0 {
        return Ok(rest.to_vec());
    }
    let method = header >> 4;
    if method != 8 {
        return Err(format!(
            "compressed column: unknown method {method} (header {header:#04x})"
        ));
    }
    let lenlen = (header & 0x07) as usize;
    let raw_deflate = header & 0x08 != 0;
    if lenlen == 0 || lenlen > 4 || rest.len() < lenlen {
        return Err(format!("compressed column: bad header {header:#04x}"));
    }
    let len = rest[..lenlen]
        .iter()
        .fold(0usize, |a, b| (a << 8) | *b as usize);
    if max_len.is_some_and(|m| len > m) {
        return Err(format!(
            "compressed column: value of {len} bytes exceeds the column's {} bytes",
            max_len.unwrap_or(0)
        ));
    }
    inflate(&rest[lenlen..], len, !raw_deflate)
}

/// Inflates `data` (a zlib stream when `zlib_header`, raw deflate otherwise) into exactly
/// `len` bytes.
fn inflate(data: &[u8], len: usize, zlib_header: bool) -> Result<Vec<u8>, String> {
    if len > MAX_INFLATED {
        return Err(format!("compressed data claims {len} bytes"));
    }
    // One byte of room past `len`, so a stream longer than its header says is caught.
    let mut out = Vec::with_capacity(len + 1);
    let mut z = Decompress::new(zlib_header);
    let status = z
        .decompress_vec(data, &mut out, FlushDecompress::Finish)
        .map_err(|e| format!("compressed data: {e}"))?;
    if status != Status::StreamEnd || out.len() != len {
        return Err(format!(
            "compressed data: inflated to {} bytes, header says {len}",
            out.len()
        ));
    }
    Ok(out)
}

/// A TABLE_MAP body with compressed column types rewritten to the plain ones, and for each
/// column whether it was compressed; `None` when it has no compressed column (or cannot be
/// read: the normal parser then reports it).
pub fn plain_table_map(body: &[u8], post_header_len: usize) -> Option<(Vec<u8>, Vec<bool>)> {
    let mut at = post_header_len;
    for _ in 0..2 {
        // database, then table: a length byte, the name, a NUL.
        let n = *body.get(at)? as usize;
        at += 1 + n + 1;
    }
    let (count, used) = lenenc(body.get(at..)?)?;
    at += used;
    let types = body.get(at..at.checked_add(count)?)?;
    if !types
        .iter()
        .any(|t| *t == VARCHAR_COMPRESSED || *t == BLOB_COMPRESSED)
    {
        return None;
    }
    let compressed: Vec<bool> = types
        .iter()
        .map(|t| *t == VARCHAR_COMPRESSED || *t == BLOB_COMPRESSED)
        .collect();
    let mut out = body.to_vec();
    for t in &mut out[at..at + count] {
        *t = match *t {
            VARCHAR_COMPRESSED => VARCHAR,
            BLOB_COMPRESSED => BLOB,
            other => other,
        };
    }
    Some((out, compressed))
}

/// A length-encoded integer and how many bytes it took.
fn lenenc(b: &[u8]) -> Option<(usize, usize)> {
    let (first, rest) = b.split_first()?;
    let (n, used) = match *first {
        x @ 0..=250 => return Some((x as usize, 1)),
        0xfc => (2, 3),
        0xfd => (3, 4),
        0xfe => (8, 9),
        _ => return None,
    };
    let v = rest
        .get(..n)?
        .iter()
        .rev()
        .fold(0u64, |a, b| (a << 8) | *b as u64);
    Some((usize::try_from(v).ok()?, used))
}

/// The plain event type of a compressed one (`None`: not a compressed event type).
pub fn plain_type(ty: u8) -> Option<u8> {
    match ty {
        165 => Some(2),                   // QUERY_COMPRESSED -> QUERY
        166..=168 => Some(ty - 166 + 23), // WRITE/UPDATE/DELETE_ROWS_COMPRESSED_V1 -> v1 rows
        169..=171 => Some(ty - 169 + 30), // WRITE/UPDATE/DELETE_ROWS_COMPRESSED -> v2 rows
        _ => None,
    }
}

/// Where the compressed part of a compressed event's body starts.
fn compressed_from(ty: u8, body: &[u8], post_header_len: usize) -> Option<usize> {
    if ty == 165 {
        // QUERY: post-header (thread id 4, exec time 4, db length 1, error 2, status vars
        // length 2), status vars, database, NUL, then the query.
        let db_len = *body.get(8)? as usize;
        let vars = u16::from_le_bytes([*body.get(11)?, *body.get(12)?]) as usize;
        return Some(post_header_len + vars + db_len + 1);
    }
    // ROWS: table id and flags (8 bytes), the v2 extra header (its length counts itself),
    // the column count, the column bitmap (two for an UPDATE), then the rows.
    let mut at = 8;
    if post_header_len == 10 {
        let extra = u16::from_le_bytes([*body.get(8)?, *body.get(9)?]) as usize;
        at += extra;
    }
    let (width, used) = lenenc(body.get(at..)?)?;
    at += used;
    let bitmaps = if matches!(ty, 167 | 170) { 2 } else { 1 };
    Some(at + bitmaps * width.div_ceil(8))
}

/// The post-header length of event type `ty` from the format description (MariaDB's own
/// types included, which mysql_common's `EventType` does not name).
pub fn post_header_len(ev: &Event, ty: u8) -> usize {
    let lengths = ev.fde().event_type_header_lengths();
    match (ty as usize).checked_sub(1).and_then(|i| lengths.get(i)) {
        Some(n) => *n as usize,
        // The v1 ROWS layout, or QUERY's, when the description is short.
        None if ty == 165 => 13,
        None => 8,
    }
}

/// A compressed binlog event (`log_bin_compress=ON`) as the plain event it stands for.
pub fn plain_event(ev: &Event) -> Result<Event, String> {
    let header = ev.header();
    let ty = header.event_type_raw();
    let plain = plain_type(ty).ok_or_else(|| format!("event type {ty} is not compressed"))?;
    let post = post_header_len(ev, ty);
    let body = ev.data();
    let from = compressed_from(ty, body, post)
        .filter(|f| *f < body.len())
        .ok_or_else(|| format!("compressed event of type {ty}: truncated head"))?;
    let rest = &body[from..];
    let header_byte = rest[0];
    let lenlen = (header_byte & 0x07) as usize;
    if header_byte & 0xe0 != 0x80 || lenlen == 0 || lenlen > 4 || rest.len() < 1 + lenlen {
        return Err(format!(
            "compressed event of type {ty}: bad header {header_byte:#04x}"
        ));
    }
    let len = rest[1..=lenlen]
        .iter()
        .fold(0usize, |a, b| (a << 8) | *b as usize);
    let inflated = inflate(&rest[1 + lenlen..], len, true)
        .map_err(|e| format!("compressed event of type {ty}: {e}"))?;
    let mut data = body[..from].to_vec();
    data.extend_from_slice(&inflated);
    rebuild(ev, plain, data)
}

/// A new event with `ev`'s header (type and size changed) and `data` as its body. Its
/// checksum is not the upstream's (the compressed event's was verified before).
pub fn rebuild(ev: &Event, ty: u8, data: Vec<u8>) -> Result<Event, String> {
    let h = ev.header();
    let footer = ev.fde().footer();
    let checksum = footer
        .get_checksum_alg()
        .ok()
        .flatten()
        .is_some_and(|a| a as u8 != 0)
        && footer.get_checksum_enabled();
    let size = 19 + data.len() + if checksum { 4 } else { 0 };
    let size32 = u32::try_from(size).map_err(|_| format!("inflated event of {size} bytes"))?;
    let mut raw = Vec::with_capacity(size);
    raw.extend_from_slice(&h.timestamp().to_le_bytes());
    raw.push(ty);
    raw.extend_from_slice(&h.server_id().to_le_bytes());
    raw.extend_from_slice(&size32.to_le_bytes());
    raw.extend_from_slice(&h.log_pos().to_le_bytes());
    raw.extend_from_slice(&h.flags_raw().to_le_bytes());
    raw.extend_from_slice(&data);
    if checksum {
        raw.extend_from_slice(&[0; 4]);
    }
    Event::read(ev.fde(), &raw[..]).map_err(|e| format!("rebuilt event of type {ty}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};

    fn deflate(data: &[u8], zlib_header: bool) -> Vec<u8> {
        let mut c = Compress::new(Compression::default(), zlib_header);
        let mut out = Vec::with_capacity(data.len() + 64);
        c.compress_vec(data, &mut out, FlushCompress::Finish)
            .expect("compress");
        out
    }

    fn stored(value: &[u8], zlib_header: bool) -> Vec<u8> {
        let lenlen = if value.len() < 256 { 1 } else { 2 };
        let mut s = vec![0x80 | lenlen as u8 | if zlib_header { 0 } else { 8 }];
        s.extend_from_slice(&(value.len() as u32).to_be_bytes()[4 - lenlen..]);
        s.extend(deflate(value, zlib_header));
        s
    }

    #[test]
    fn empty_stored_and_both_zlib_forms_round_trip() {
        assert_eq!(column_value(&[], Some(10)).expect("empty"), b"");
        assert_eq!(column_value(b"\0abc", Some(10)).expect("stored"), b"abc");
        let v = b"abcabcabcabcabcabcabcabcabcabc".repeat(20);
        assert_eq!(column_value(&stored(&v, true), None).expect("zlib"), v);
        assert_eq!(column_value(&stored(&v, false), None).expect("raw"), v);
    }

    #[test]
    fn lengths_that_disagree_are_errors() {
        let v = b"x".repeat(300);
        let mut s = stored(&v, true);
        assert!(
            column_value(&s, Some(299)).is_err(),
            "longer than the column"
        );
        s[2] = s[2].wrapping_add(1); // header claims 301 bytes
        assert!(column_value(&s, None).is_err());
        let s = stored(&v, true);
        assert!(
            column_value(&s[..s.len() - 3], None).is_err(),
            "truncated stream"
        );
        assert!(column_value(&[0x90, 1, 2], None).is_err(), "unknown method");
        assert!(column_value(&[0x80], None).is_err(), "no length bytes");
    }

    #[test]
    fn table_map_types_are_rewritten_and_marked() {
        // post-header 8, db "d", table "t", 3 columns: INT, VARCHAR_COMPRESSED, BLOB_COMPRESSED.
        let mut body = vec![1, 0, 0, 0, 0, 0, 1, 0];
        body.extend_from_slice(&[1, b'd', 0, 1, b't', 0, 3, 3, 141, 140, 3, 10, 0, 2, 0]);
        let (plain, marks) = plain_table_map(&body, 8).expect("has compressed columns");
        assert_eq!(&plain[15..18], &[3, 15, 252]);
        assert_eq!(marks, vec![false, true, true]);
        assert_eq!(&plain[..15], &body[..15]);
        assert_eq!(&plain[18..], &body[18..]);
        body[16] = 15;
        body[17] = 252;
        assert!(plain_table_map(&body, 8).is_none());
    }

    #[test]
    fn compressed_types_map_to_their_plain_types() {
        assert_eq!(plain_type(165), Some(2));
        assert_eq!(plain_type(166), Some(23));
        assert_eq!(plain_type(168), Some(25));
        assert_eq!(plain_type(169), Some(30));
        assert_eq!(plain_type(171), Some(32));
        assert_eq!(plain_type(172), None);
        assert_eq!(plain_type(2), None);
    }
}
