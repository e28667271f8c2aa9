//! The report of a replay of MariaDB's regression suite (through capture, or through a server
//! and the MySQL sink): the failures by class, largest first with one example each, and the
//! whole list; a first line naming the next part's `FROM`, so a corpus too long for one run goes
//! in parts (`scripts/mariadb-suite-sum.py` adds them up and relies on this layout).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One statement a replay found wrong, and why.
#[derive(Debug)]
pub struct Failure {
    pub class: String,
    /// `file:line`.
    pub at: String,
    pub sql: String,
    pub detail: String,
}

impl Failure {
    /// A failure at `file:line`, its statement and detail cut to a readable length.
    pub fn new(class: String, file: &str, line: usize, sql: &str, detail: &str) -> Failure {
        Failure {
            class,
            at: format!("{file}:{line}"),
            sql: sql.chars().take(400).collect(),
            detail: detail.chars().take(600).collect(),
        }
    }
}

/// `files replayed n of total (from i; next part FROM=j[, none left])`.
pub fn head(files: usize, from: usize, total: usize) -> String {
    let next = from + files;
    let left = if next == total { ", none left" } else { "" };
    format!("files replayed {files} of {total} (from {from}; next part FROM={next}{left})\n")
}

/// `n failures in m classes:` and each class, largest first, with its first example.
pub fn classes(failures: &[Failure]) -> String {
    let mut by_class: BTreeMap<&str, Vec<&Failure>> = BTreeMap::new();
    for f in failures {
        by_class.entry(&f.class).or_default().push(f);
    }
    let mut by_size: Vec<_> = by_class.into_iter().collect();
    by_size.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    let mut out = format!(
        "{} failures in {} classes:\n",
        failures.len(),
        by_size.len()
    );
    for (class, list) in &by_size {
        let f = list[0];
        let _ = writeln!(
            out,
            "{:5} {class}\n      e.g. {}: {}\n      {}",
            list.len(),
            f.at,
            f.sql.replace('\n', " "),
            f.detail
        );
    }
    out
}

/// Writes `summary` and every failure to the path in `SLUICE_MARIADB_SUITE_REPORT`, if set.
pub fn write(summary: &str, failures: &[Failure]) {
    let Ok(path) = std::env::var("SLUICE_MARIADB_SUITE_REPORT") else {
        return;
    };
    let mut full = summary.to_string();
    for f in failures {
        let _ = writeln!(
            full,
            "\n[{}] {}\n  {}\n  {}",
            f.class, f.at, f.sql, f.detail
        );
    }
    std::fs::write(&path, full).expect("write the report");
}

/// A numeric setting from the environment (`SLUICE_MARIADB_SUITE_FROM`, `…_MINUTES`).
pub fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
