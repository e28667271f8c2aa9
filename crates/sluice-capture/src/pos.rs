//! Binlog positions and the commit ts.
//!
//! **Commit ts definition.** The commit ts of a transaction is
//! `(file_index << 32) | end_pos`, where `file_index` is the numeric suffix of the binlog file
//! the transaction was written to (`mysql-bin.000042` → 42) and `end_pos` is the position just
//! after the transaction's last event (its XID or COMMIT event, or the DDL's QUERY event): the
//! `log_pos` field of that event's header. It is a pure function of the binlog, so every node
//! reading the same upstream computes the same ts for the same transaction, whatever position
//! it started from. It is strictly increasing in binlog order: within a file positions grow,
//! and a new file has a larger index (MariaDB never reuses a file index). Binlog positions are
//! 32-bit in the event header, so `end_pos` always fits.
//!
//! A position `(file, pos)` with `pos` at a transaction boundary resumes the stream right after
//! the transaction whose commit ts is `ts_of(file, pos)`: [`BinlogPos::from_ts`] inverts it,
//! given the file's base name.

use serde::{Deserialize, Serialize};
use sluice_types::Ts;
use std::fmt;

/// A position in the upstream binlog.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BinlogPos {
    pub file: String,
    pub pos: u64,
}

impl fmt::Debug for BinlogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}
impl fmt::Display for BinlogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

/// The numeric suffix of a binlog file name (`mysql-bin.000042` → 42).
pub fn file_index(file: &str) -> Option<u64> {
    let (_, suffix) = file.rsplit_once('.')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix.parse().ok()
}

/// The commit ts of a transaction ending at `end_pos` in the file with index `index`.
pub fn commit_ts(index: u64, end_pos: u64) -> Ts {
    (index << 32) | (end_pos & 0xffff_ffff)
}

impl BinlogPos {
    pub fn new(file: impl Into<String>, pos: u64) -> Self {
        BinlogPos {
            file: file.into(),
            pos,
        }
    }

    /// The ts of "everything up to this position" (the commit ts of a transaction ending here).
    pub fn ts(&self) -> Option<Ts> {
        file_index(&self.file).map(|i| commit_ts(i, self.pos))
    }

    /// The position right after the transaction with commit ts `ts`, in the binlog whose files are
    /// named `base.NNNNNN` (six digits, MariaDB's format).
    pub fn from_ts(base: &str, ts: Ts) -> BinlogPos {
        BinlogPos {
            file: format!("{base}.{:06}", ts >> 32),
            pos: ts & 0xffff_ffff,
        }
    }

    /// The file's base name (`mysql-bin.000042` → `mysql-bin`).
    pub fn base(&self) -> &str {
        self.file
            .rsplit_once('.')
            .map(|(b, _)| b)
            .unwrap_or(&self.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_orders_across_files_and_inverts() {
        let a = BinlogPos::new("mysql-bin.000001", 4_000_000);
        let b = BinlogPos::new("mysql-bin.000002", 256);
        assert!(a.ts().expect("a") < b.ts().expect("b"));
        assert_eq!(BinlogPos::from_ts("mysql-bin", b.ts().expect("b")), b);
        assert_eq!(file_index("x.bin"), None);
        assert_eq!(file_index("mysql-bin.1000000"), Some(1_000_000));
        assert_eq!(b.base(), "mysql-bin");
    }
}
