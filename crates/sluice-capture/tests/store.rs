//! The event store: order, spans, cursors, GC, crash safety (including a real `kill -9`).

use sluice_capture::store::{Cursor, EventStore, StoreConfig, StoreError};
use sluice_testkit::scratch::ScratchDir;
use sluice_types::{
    DdlEvent, DdlInfluence, DdlKind, InfluenceScope, Key, RowEvent, RowKind, Span, TableId, Value,
};

/// The test's own directory (kept with its path printed when the test fails).
fn scratch(tag: &str) -> ScratchDir {
    ScratchDir::new("sluice-store", tag).expect("scratch dir")
}

fn row(table: u64, pk: u64, ts: u64) -> RowEvent {
    RowEvent {
        table_id: TableId(table),
        schema_version: 0,
        commit_ts: ts,
        commit_time_ms: 0,
        kind: RowKind::Insert,
        key: Key::row_u64(TableId(table), pk),
        before: None,
        after: Some(vec![Value::UInt(pk), Value::Text(format!("v{pk}"))]),
        snapshot: false,
        gtid: None,
    }
}

#[test]
fn ordered_by_table_ts_seq_with_spans_cursors_and_gc() {
    let dir = scratch("order");
    let s = EventStore::open(&dir.path().join("db"), StoreConfig::default()).expect("open");
    // Three transactions touching two tables.
    s.append_txn(10, &[row(1, 5, 10), row(2, 1, 10), row(1, 3, 10)])
        .expect("t10");
    s.append_txn(20, &[row(1, 7, 20)]).expect("t20");
    s.append_txn(30, &[row(1, 1, 30), row(1, 9, 30)])
        .expect("t30");
    let ddl = ddl_at(40);
    s.append_ddl(&ddl).expect("ddl");
    assert_eq!(s.resolved(), 40);
    let whole = Span::whole_table(TableId(1));
    let all = s.scan(&whole, 0, u64::MAX, 100).expect("scan");
    let got: Vec<(u64, Value)> = all
        .rows
        .iter()
        .map(|r| (r.commit_ts, r.after.as_ref().expect("after")[0].clone()))
        .collect();
    // Commit-ts order, then position in the transaction (not key order).
    assert_eq!(
        got,
        vec![
            (10, Value::UInt(5)),
            (10, Value::UInt(3)),
            (20, Value::UInt(7)),
            (30, Value::UInt(1)),
            (30, Value::UInt(9))
        ]
    );
    assert_eq!(all.next, None);
    // A sub-span only sees its keys.
    let sub = Span::new(
        TableId(1),
        Key::row_u64(TableId(1), 4),
        Key::row_u64(TableId(1), 8),
    );
    let part = s.scan(&sub, 0, 40, 100).expect("scan sub");
    assert_eq!(
        part.rows.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        vec![Key::row_u64(TableId(1), 5), Key::row_u64(TableId(1), 7)]
    );
    // From a start ts and up to an end ts.
    assert_eq!(s.scan(&whole, 10, 20, 100).expect("scan").rows.len(), 1);
    // Limits and cursors page through without loss or repeat.
    let mut cursor = Cursor {
        ts: 0,
        seq: u32::MAX,
    };
    let mut paged = Vec::new();
    loop {
        let b = s.scan_from(&whole, cursor, 40, 2).expect("page");
        paged.extend(b.rows);
        match b.next {
            Some(c) => cursor = c,
            None => break,
        }
    }
    assert_eq!(paged, all.rows);
    assert_eq!(s.ddls(0, 40).expect("ddls"), vec![ddl]);
    // GC below 20: rows at 10 and 20 go; starting below is an error, not a gap.
    let removed = s.gc(20).expect("gc");
    assert_eq!(removed, 3 + 1);
    assert!(matches!(
        s.scan(&whole, 10, 40, 100),
        Err(StoreError::Collected { .. })
    ));
    assert_eq!(s.scan(&whole, 20, 40, 100).expect("scan").rows.len(), 2);
    assert_eq!(
        s.scan(&Span::whole_table(TableId(2)), 20, 40, 100)
            .expect("t2")
            .rows
            .len(),
        0
    );
    // Re-delivered transactions (reader restart) are ignored.
    s.append_txn(30, &[row(1, 100, 30)]).expect("dup");
    assert_eq!(s.scan(&whole, 20, 40, 100).expect("scan").rows.len(), 2);
}

#[test]
fn reopen_drops_what_was_not_persisted() {
    let dir = scratch("reopen");
    let path = dir.path().join("db");
    {
        let s = EventStore::open(&path, StoreConfig::default()).expect("open");
        s.append_txn(10, &[row(1, 1, 10)]).expect("t10");
        assert_eq!(s.persist().expect("persist"), 10);
        s.append_txn(20, &[row(1, 2, 20)]).expect("t20");
    }
    let s = EventStore::open(&path, StoreConfig::default()).expect("reopen");
    assert_eq!(s.resolved(), 10);
    let rows = s
        .scan(&Span::whole_table(TableId(1)), 0, u64::MAX, 100)
        .expect("scan")
        .rows;
    assert_eq!(rows, vec![row(1, 1, 10)]);
    s.append_txn(20, &[row(1, 2, 20)]).expect("t20 again");
    assert_eq!(
        s.scan(&Span::whole_table(TableId(1)), 0, u64::MAX, 100)
            .expect("scan")
            .rows
            .len(),
        2
    );
}

const CHILD_ENV: &str = "SLUICE_STORE_KILL_CHILD";

/// The child half of `kill_9_then_serve_from_an_old_start_ts`: appends transactions forever,
/// persisting every 10 and printing the persisted ts.
#[test]
fn kill_9_child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let s = EventStore::open(std::path::Path::new(&path), StoreConfig::default()).expect("open");
    let mut ts = s.resolved();
    loop {
        ts += 1;
        let rows: Vec<RowEvent> = (0..50).map(|i| row(1 + i % 3, ts * 100 + i, ts)).collect();
        s.append_txn(ts, &rows).expect("append");
        if ts.is_multiple_of(10) {
            println!("persisted {}", s.persist().expect("persist"));
        }
    }
}

#[test]
fn kill_9_then_serve_from_an_old_start_ts() {
    use std::io::BufRead;
    let dir = scratch("kill");
    let path = dir.path().join("db");
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "kill_9_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let out = child.stdout.take().expect("stdout");
    let mut last = 0u64;
    for line in std::io::BufReader::new(out).lines() {
        let line = line.expect("line");
        if let Some(ts) = line
            .strip_prefix("persisted ")
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            last = ts;
            if ts >= 200 {
                break;
            }
        }
    }
    child.kill().expect("kill -9"); // SIGKILL
    let _ = child.wait();
    assert!(last >= 200);
    let s = EventStore::open(&path, StoreConfig::default()).expect("reopen after kill");
    let resolved = s.resolved();
    assert!(
        resolved >= last,
        "everything persisted survives ({resolved} >= {last})"
    );
    // Serve every table from a start ts older than the restart: complete transactions only,
    // each with all of its rows, nothing above resolved.
    let mut total = 0;
    for t in 1..=3u64 {
        let b = s
            .scan(&Span::whole_table(TableId(t)), 5, u64::MAX, usize::MAX)
            .expect("scan");
        assert!(b
            .rows
            .iter()
            .all(|r| r.commit_ts > 5 && r.commit_ts <= resolved));
        total += b.rows.len();
    }
    assert_eq!(total as u64, (resolved - 5) * 50);
}

fn ddl_at(ts: u64) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: ts,
        commit_time_ms: 0,
        kind: DdlKind::AlterTable,
        database: "d".into(),
        query: format!("ALTER TABLE t ADD c{ts} INT"),
        influence: DdlInfluence {
            scope: InfluenceScope::Tables(vec![TableId(1)]),
            trigger: false,
            dropped: vec![],
            added: vec![],
            renamed: vec![],
            sources: vec![],
        },
    }
}

/// Every read of the tables from every start at or above `min` (also inside a transaction),
/// and of the DDLs in every range above it.
fn every_read(s: &EventStore, min: u64) -> Vec<String> {
    let starts: Vec<u64> = [0u64, 10, 14, 15, 16, 17, 19, 20, 25, 30, 39, 40, 45, 50, 60]
        .into_iter()
        .filter(|a| *a >= min)
        .collect();
    let mut out = Vec::new();
    for table in 1..=4 {
        let span = Span::whole_table(TableId(table));
        for &after in &starts {
            for seq in [0u32, 1, u32::MAX] {
                let b = s
                    .scan_from(&span, Cursor { ts: after, seq }, 60, 100)
                    .expect("scan");
                let rows: Vec<(u64, Key)> = b
                    .rows
                    .iter()
                    .map(|r| (r.commit_ts, r.key.clone()))
                    .collect();
                out.push(format!("t{table} after {after}/{seq}: {rows:?}"));
            }
        }
    }
    for &after in &starts {
        for &upto in &starts {
            let d: Vec<u64> = s
                .ddls(after, upto)
                .expect("ddls")
                .iter()
                .map(|d| d.commit_ts)
                .collect();
            out.push(format!("ddls ({after}, {upto}]: {d:?}"));
        }
    }
    out
}

/// The writes before the store opens again at 17: rows at that very ts are on disk, not in
/// memory (table 4 has no row after it).
fn writes_before_reopen(s: &EventStore) {
    s.append_txn(10, &[row(1, 1, 10), row(1, 2, 10)])
        .expect("t10");
    s.append_ddl(&ddl_at(15)).expect("ddl 15");
    s.append_txn(17, &[row(1, 4, 17), row(4, 1, 17), row(4, 2, 17)])
        .expect("t17");
}

/// The writes after it: rows of two tables, a large transaction of table 3 with every row
/// staged before its commit, a DDL, a resolved advance.
fn writes_after_reopen(s: &EventStore) {
    s.append_txn(20, &[row(1, 3, 20), row(2, 1, 20)])
        .expect("t20");
    s.append_txn(30, &[row(2, 2, 30)]).expect("t30");
    s.stage(35, 0, &[row(3, 1, 0), row(3, 2, 0), row(3, 3, 0)])
        .expect("stage");
    s.commit_staged((40, 0), 35, 3, &[]).expect("commit staged");
    s.append_ddl(&ddl_at(50)).expect("ddl 50");
    s.advance(60);
}

/// The reads a store answers from what it wrote since it opened (without a read transaction)
/// are the reads the same data gives once reopened (from disk only): rows from before the open,
/// rows appended after it, a large transaction's staged rows, DDLs on both sides, and GC.
#[test]
fn reads_answered_from_memory_agree_with_the_disk() {
    let dir = scratch("recent");
    let path = dir.path().join("db");
    {
        let s = EventStore::open(&path, StoreConfig::default()).expect("open");
        writes_before_reopen(&s);
        s.persist().expect("persist");
    }
    let live = {
        let s = EventStore::open(&path, StoreConfig::default()).expect("reopen");
        writes_after_reopen(&s);
        let before_gc = every_read(&s, 0);
        s.persist().expect("persist");
        assert!(
            before_gc
                .iter()
                .any(|r| r.starts_with("t3 after 39/4294967295: [(40")),
            "the staged rows are read: {before_gc:?}"
        );
        s.gc(15).expect("gc");
        let after_gc = every_read(&s, 15);
        (before_gc, after_gc)
    };
    let s = EventStore::open(&path, StoreConfig::default()).expect("reopen again");
    // Below the GC point the disk no longer has what the first read saw: compare from there.
    assert_eq!(every_read(&s, 15), live.1);
    // The same writes without the GC in a fresh store, reopened: everything read from disk.
    let disk_path = dir.path().join("db-disk");
    {
        let s = EventStore::open(&disk_path, StoreConfig::default()).expect("open");
        writes_before_reopen(&s);
        writes_after_reopen(&s);
        s.persist().expect("persist");
    }
    let disk = EventStore::open(&disk_path, StoreConfig::default()).expect("reopen");
    assert_eq!(every_read(&disk, 0), live.0, "memory and disk disagree");
}

/// The store against a plain ordered map, over random histories: transactions of several
/// tables with rows small and large (filling, sealing and splitting blocks), large transactions
/// staged and committed, persists, reopens (a crash: what was not persisted goes), GC and idle
/// advances; after each step, random spans read from random cursors (inside transactions too)
/// with random limits, paged to the end, must give the map's rows above the GC point.
#[test]
fn random_histories_read_like_a_map() {
    use sluice_testkit::rng::XorShift;
    use std::collections::BTreeMap;
    for seed in 1..=12u64 {
        let mut rng = XorShift::new(seed);
        let dir = scratch(&format!("model-{seed}"));
        let path = dir.path().join("db");
        let mut s = EventStore::open(&path, StoreConfig::default()).expect("open");
        // (table, ts, seq) -> row; the durable resolved; the gc ts.
        let mut model: BTreeMap<(u64, u64, u32), RowEvent> = BTreeMap::new();
        let (mut durable, mut gc) = (0u64, 0u64);
        let mut ts = 0u64;
        for _ in 0..60 {
            ts += 1 + rng.below(3);
            match rng.below(10) {
                0..=5 => {
                    let rows = random_txn(&mut rng, ts);
                    s.append_txn(ts, &rows).expect("append");
                    add_txn(&mut model, ts, &rows);
                }
                6 => {
                    let rows = random_txn(&mut rng, 0);
                    let cut = rows.len() / 2;
                    s.stage(ts, 0, &rows[..cut]).expect("stage");
                    s.commit_staged((ts, 77), ts, cut, &rows[cut..])
                        .expect("commit staged");
                    let rows: Vec<RowEvent> = rows
                        .into_iter()
                        .enumerate()
                        .map(|(i, r)| RowEvent {
                            commit_time_ms: if i < cut { 77 } else { r.commit_time_ms },
                            ..r
                        })
                        .collect();
                    add_txn(&mut model, ts, &rows);
                }
                7 => durable = s.persist().expect("persist"),
                8 => {
                    drop(s);
                    s = EventStore::open(&path, StoreConfig::default()).expect("reopen");
                    model.retain(|k, _| k.1 <= durable);
                    ts = durable;
                    assert_eq!(s.resolved(), durable);
                }
                _ => {
                    // At most the durable resolved, so a reopen never goes below the GC point
                    // (rows appended again below it would be there for the store, not the map).
                    let to = gc + rng.below(durable.saturating_sub(gc) + 1);
                    s.gc(to).expect("gc");
                    gc = gc.max(to);
                    s.advance(ts);
                }
            }
            check_reads(&s, &model, gc, &mut rng);
        }
    }
}

fn random_txn(rng: &mut sluice_testkit::rng::XorShift, ts: u64) -> Vec<RowEvent> {
    let n = match rng.below(8) {
        0 => 60 + rng.below(200),
        _ => 1 + rng.below(8),
    };
    let mut rows = Vec::new();
    for _ in 0..n {
        let table = 1 + rng.below(3);
        let pk = rng.below(50);
        let mut r = row(table, pk, ts);
        let size = if rng.below(10) == 0 {
            40_000
        } else {
            rng.below(3000)
        };
        r.after = Some(vec![
            Value::UInt(pk),
            Value::Text("x".repeat(size as usize)),
        ]);
        rows.push(r);
    }
    rows
}

fn add_txn(
    model: &mut std::collections::BTreeMap<(u64, u64, u32), RowEvent>,
    ts: u64,
    rows: &[RowEvent],
) {
    for (i, r) in rows.iter().enumerate() {
        let r = RowEvent {
            commit_ts: ts,
            ..r.clone()
        };
        model.insert((r.table_id.0, ts, i as u32), r);
    }
}

fn check_reads(
    s: &EventStore,
    model: &std::collections::BTreeMap<(u64, u64, u32), RowEvent>,
    gc: u64,
    rng: &mut sluice_testkit::rng::XorShift,
) {
    let resolved = s.resolved();
    for _ in 0..6 {
        let table = 1 + rng.below(3);
        let (a, b) = (rng.below(55), rng.below(55));
        let span = match rng.below(3) {
            0 => Span::whole_table(TableId(table)),
            _ => Span::new(
                TableId(table),
                Key::row_u64(TableId(table), a.min(b)),
                Key::row_u64(TableId(table), a.max(b) + 1),
            ),
        };
        let from = Cursor {
            ts: gc + rng.below(resolved.saturating_sub(gc) + 2),
            seq: match rng.below(3) {
                0 => u32::MAX,
                _ => rng.below(10) as u32,
            },
        };
        let upto = gc + rng.below(resolved.saturating_sub(gc) + 3);
        let limit = 1 + rng.below(300) as usize;
        let want: Vec<&RowEvent> = model
            .range((table, 0, 0)..=(table, u64::MAX, u32::MAX))
            .filter(|(k, r)| {
                (k.1, k.2) > (from.ts, from.seq)
                    && k.1 > gc
                    && k.1 <= upto.min(resolved)
                    && span.contains(&r.key)
            })
            .map(|(_, r)| r)
            .collect();
        let mut got = Vec::new();
        let mut cursor = from;
        loop {
            let b = s.scan_from(&span, cursor, upto, limit).expect("scan");
            assert!(b.rows.len() <= limit);
            got.extend(b.rows);
            match b.next {
                Some(c) => cursor = c,
                None => break,
            }
        }
        let got: Vec<&RowEvent> = got.iter().collect();
        assert_eq!(got, want, "{span:?} after {from:?} up to {upto} by {limit}");
    }
}
