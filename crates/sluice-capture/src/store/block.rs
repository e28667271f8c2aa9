//! The store's unit on disk: a **block**, consecutive rows of one table in `(commit ts, seq)`
//! order, one redb value keyed by its first row's `(table id, commit ts, seq)`.
//!
//! One value per row made a catch-up read every 4 KiB page of a half-full B-tree through redb's
//! page cache, a `pread`, an allocation and an eviction per page (docs/figures/
//! catchup-profile-6dc5e78.md); a block is read with one `pread` and holds a table's rows packed.
//!
//! Layout: a header (`rows` u32, last row's commit ts u64 and seq u32, all big-endian), then the
//! entries, each `commit ts` u64, `seq` u32, `len` u32 and `len` bytes of [`crate::codec`]
//! record (its row key is read in place, [`crate::codec::key_of`]).
//!
//! Invariants:
//! - entries are strictly increasing in `(commit ts, seq)`; the header names the last one and
//!   counts them (checked where a block is sealed);
//! - a block's commit ts is the entry's, whatever its record says (a record is encoded once,
//!   before a large transaction's commit ts is known);
//! - a block stays under [`BLOCK_BYTES`] unless one row alone is larger, so it fits one redb
//!   page of 32 KiB with the leaf's own bytes;
//! - decoding malformed bytes is [`StoreError::Corrupt`], never a panic.

use super::{Cursor, StoreError};
use sluice_types::{RowEvent, TableId, Ts};

/// Bytes of the header before the entries.
const HEADER: usize = 16;
/// Bytes of an entry before its record.
const ENTRY_HEADER: usize = 16;
/// A block is sealed before an entry would take it past this size (a 32 KiB redb page less
/// the leaf's header, offsets and key).
pub(super) const BLOCK_BYTES: usize = 32 * 1024 - 128;

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// The redb key of a block (or of a staged row's table ordering): table id, commit ts, seq.
pub(super) fn block_key(table: TableId, at: Cursor) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..8].copy_from_slice(&table.0.to_be_bytes());
    k[8..16].copy_from_slice(&at.ts.to_be_bytes());
    k[16..].copy_from_slice(&at.seq.to_be_bytes());
    k
}

pub(super) fn parse_block_key(k: &[u8]) -> Option<(TableId, Cursor)> {
    if k.len() != 20 {
        return None;
    }
    let t = u64::from_be_bytes(k[..8].try_into().ok()?);
    let ts = u64::from_be_bytes(k[8..16].try_into().ok()?);
    let seq = u32::from_be_bytes(k[16..].try_into().ok()?);
    Some((TableId(t), Cursor { ts, seq }))
}

/// What a block's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub rows: u32,
    pub last: Cursor,
}

pub(super) fn header(b: &[u8]) -> Result<Header, StoreError> {
    let h = b.get(..HEADER).ok_or_else(|| corrupt("short block"))?;
    Ok(Header {
        rows: u32::from_be_bytes(h[..4].try_into().map_err(|_| corrupt("block header"))?),
        last: Cursor {
            ts: u64::from_be_bytes(h[4..12].try_into().map_err(|_| corrupt("block header"))?),
            seq: u32::from_be_bytes(h[12..16].try_into().map_err(|_| corrupt("block header"))?),
        },
    })
}

/// The entries of a block (after its header).
pub(super) fn body(b: &[u8]) -> Result<&[u8], StoreError> {
    b.get(HEADER..).ok_or_else(|| corrupt("short block"))
}

/// One row of a block, read in place.
pub(super) struct Entry<'a> {
    pub at: Cursor,
    /// The whole entry, header included (copied as is when a block is rebuilt).
    pub raw: &'a [u8],
}

impl<'a> Entry<'a> {
    fn record(&self) -> &'a [u8] {
        &self.raw[ENTRY_HEADER..]
    }

    pub fn key(&self) -> Result<&'a [u8], StoreError> {
        crate::codec::key_of(self.record()).map_err(StoreError::Corrupt)
    }

    pub fn decode(&self) -> Result<RowEvent, StoreError> {
        let mut ev = crate::codec::decode(self.record()).map_err(StoreError::Corrupt)?;
        ev.commit_ts = self.at.ts;
        Ok(ev)
    }
}

/// The entries of a block body, in order.
pub(super) fn entries(body: &[u8]) -> Entries<'_> {
    Entries { rest: body }
}

pub(super) struct Entries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.rest;
        let Some(h) = r.first_chunk::<ENTRY_HEADER>() else {
            self.rest = &[];
            return Some(Err(corrupt("short block entry")));
        };
        let ts = u64::from_be_bytes(h[..8].try_into().unwrap_or_default());
        let seq = u32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(h[12..16].try_into().unwrap_or_default()) as usize;
        let Some(raw) = r.get(..ENTRY_HEADER + len) else {
            self.rest = &[];
            return Some(Err(corrupt("short block record")));
        };
        self.rest = &r[ENTRY_HEADER + len..];
        Some(Ok(Entry {
            at: Cursor { ts, seq },
            raw,
        }))
    }
}

/// A block being filled: rows are appended in order, then it is sealed into its value.
#[derive(Debug)]
pub(super) struct Builder {
    pub first: Cursor,
    pub last: Cursor,
    pub rows: u32,
    /// Header space, then the entries.
    buf: Vec<u8>,
}

impl Builder {
    pub fn new(at: Cursor) -> Builder {
        Builder {
            first: at,
            last: at,
            rows: 0,
            buf: vec![0; HEADER],
        }
    }

    /// Bytes the sealed block will have.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn entries(&self) -> &[u8] {
        &self.buf[HEADER..]
    }

    fn note(&mut self, at: Cursor) {
        assert!(
            self.rows == 0 || at > self.last,
            "block entries go forward: {at:?} after {:?}",
            self.last
        );
        if self.rows == 0 {
            self.first = at;
        }
        self.last = at;
        self.rows += 1;
    }

    /// Appends a row at `at` (its record's own commit ts is not read back).
    pub fn push(&mut self, at: Cursor, ev: &RowEvent) {
        self.note(at);
        let start = self.buf.len();
        self.buf.extend_from_slice(&at.ts.to_be_bytes());
        self.buf.extend_from_slice(&at.seq.to_be_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        crate::codec::encode(ev, &mut self.buf);
        let len = (self.buf.len() - start - ENTRY_HEADER) as u32;
        self.buf[start + 12..start + 16].copy_from_slice(&len.to_be_bytes());
    }

    /// Appends an entry read from another block.
    pub fn push_raw(&mut self, e: &Entry<'_>) {
        self.note(e.at);
        self.buf.extend_from_slice(e.raw);
    }

    /// Removes the last entry, which starts at `from` (the length before it was pushed);
    /// `last` and `rows` go back to `before`.
    pub fn truncate(&mut self, from: usize, before: (Cursor, u32)) {
        assert!(from >= HEADER && from < self.buf.len() && before.1 + 1 == self.rows);
        self.buf.truncate(from);
        (self.last, self.rows) = before;
    }

    /// The block's value (header filled in).
    pub fn seal(mut self) -> Vec<u8> {
        assert!(self.rows > 0, "an empty block is never written");
        self.buf[..4].copy_from_slice(&self.rows.to_be_bytes());
        self.buf[4..12].copy_from_slice(&self.last.ts.to_be_bytes());
        self.buf[12..16].copy_from_slice(&self.last.seq.to_be_bytes());
        self.buf
    }
}

/// The entries of `body` that `keep` keeps, as a new block (`None` when none is kept).
pub(super) fn rebuild(
    body: &[u8],
    mut keep: impl FnMut(Cursor) -> bool,
) -> Result<Option<Builder>, StoreError> {
    let mut out: Option<Builder> = None;
    for e in entries(body) {
        let e = e?;
        if keep(e.at) {
            out.get_or_insert_with(|| Builder::new(e.at)).push_raw(&e);
        }
    }
    Ok(out)
}

/// The greatest position strictly before `at` (a scan resumes after it, so at `at`).
pub(super) fn just_before(at: Cursor) -> Cursor {
    match at.seq.checked_sub(1) {
        Some(seq) => Cursor { ts: at.ts, seq },
        None => Cursor {
            ts: at.ts.saturating_sub(1),
            seq: u32::MAX,
        },
    }
}

/// The least position strictly after `at`; `None` after the very last one.
pub(super) fn just_after(at: Cursor) -> Option<Cursor> {
    match at.seq.checked_add(1) {
        Some(seq) => Some(Cursor { ts: at.ts, seq }),
        None => Some(Cursor {
            ts: at.ts.checked_add(1)?,
            seq: 0,
        }),
    }
}

/// The position of row `seq` of a transaction at `ts`.
pub(super) fn at(ts: Ts, seq: u32) -> Cursor {
    Cursor { ts, seq }
}

#[cfg(test)]
mod tests {
    use super::super::tests::row_of;
    use super::*;
    use sluice_types::Key;

    /// A row whose record names a commit ts no entry has.
    fn ev(pk: u64) -> RowEvent {
        RowEvent {
            commit_ts: 999,
            ..row_of(3, pk)
        }
    }

    #[test]
    fn a_sealed_block_reads_back_with_its_positions_and_keys() {
        let mut b = Builder::new(at(10, 0));
        b.push(at(10, 0), &ev(1));
        b.push(at(10, 1), &ev(2));
        b.push(at(12, 0), &ev(3));
        let v = b.seal();
        assert_eq!(
            header(&v).expect("header"),
            Header {
                rows: 3,
                last: at(12, 0)
            }
        );
        let got: Vec<(Cursor, Vec<u8>, u64)> = entries(body(&v).expect("body"))
            .map(|e| {
                let e = e.expect("entry");
                let row = e.decode().expect("decode");
                (e.at, e.key().expect("key").to_vec(), row.commit_ts)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (at(10, 0), Key::row_u64(TableId(3), 1).0, 10),
                (at(10, 1), Key::row_u64(TableId(3), 2).0, 10),
                (at(12, 0), Key::row_u64(TableId(3), 3).0, 12),
            ],
            "the entry's commit ts wins over the record's"
        );
        let mut ends = vec![HEADER];
        for e in entries(body(&v).expect("body")) {
            ends.push(ends[ends.len() - 1] + e.expect("entry").raw.len());
        }
        for cut in (HEADER + 1..v.len()).filter(|c| !ends.contains(c)) {
            assert!(
                entries(&v[HEADER..cut]).any(|e| e.is_err()),
                "a cut block is an error (cut at {cut})"
            );
        }
        let kept = rebuild(body(&v).expect("body"), |a| a.ts > 10)
            .expect("rebuild")
            .expect("one kept");
        assert_eq!(
            (kept.first, kept.last, kept.rows),
            (at(12, 0), at(12, 0), 1)
        );
    }

    #[test]
    #[should_panic(expected = "block entries go forward")]
    fn entries_out_of_order_are_refused() {
        let mut b = Builder::new(at(10, 1));
        b.push(at(10, 1), &ev(1));
        b.push(at(10, 0), &ev(2));
    }

    #[test]
    fn positions_before_and_after() {
        assert_eq!(just_before(at(5, 0)), at(4, u32::MAX));
        assert_eq!(just_before(at(5, 3)), at(5, 2));
        assert_eq!(just_after(at(5, u32::MAX)), Some(at(6, 0)));
        assert_eq!(just_after(at(u64::MAX, u32::MAX)), None);
    }
}
