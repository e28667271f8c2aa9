//! The DDL matrix (issue 12, item 2): a blocking DDL of a table split across the two nodes of a
//! two-server cluster on etcd, held at one of the four DDL hold points on both nodes, then a
//! `kill -9` and restart of both nodes, of the DDL writer's node or of the other node, then the
//! holds released. Twelve cells:
//!
//! | # | hold | restart | DDL |
//! |---|---|---|---|
//! | 1 | `ddl_after_write` | both nodes | DROP DATABASE |
//! | 2 | `ddl_after_write` | the writer's node | DROP TABLE |
//! | 3 | `ddl_after_write` | the other node | RENAME TABLE |
//! | 4 | `ddl_before_write` | both nodes | TRUNCATE TABLE |
//! | 5 | `ddl_before_write` | the writer's node | ADD COLUMN |
//! | 6 | `ddl_before_write` | the other node | DROP TABLE |
//! | 7 | `ddl_before_pass` | both nodes | ADD COLUMN |
//! | 8 | `ddl_before_pass` | the writer's node | DROP DATABASE |
//! | 9 | `ddl_before_pass` | the other node | TRUNCATE TABLE |
//! | 10 | `ddl_after_pass` | both nodes | RENAME TABLE |
//! | 11 | `ddl_after_pass` | the writer's node | ADD COLUMN |
//! | 12 | `ddl_after_pass` | the other node | DROP TABLE |
//!
//! The writer of a DDL the table trigger takes part in (all but ADD COLUMN) is the trigger, on
//! the maintainer's node; of ADD COLUMN it is the dispatcher of the table's first span (the
//! maintainer's `try_select_writer`). The test predicts it from the API and checks the
//! prediction against the work the nodes report held (`GET /api/v2/debug/holds`, `held`).
//! A DDL that drops the table (DROP DATABASE, DROP TABLE, TRUNCATE) has no dispatcher that
//! passes it: the maintainer never tells a dropped table's dispatchers to pass, they wait at the
//! DDL until removed. So in a pass-hold cell of such a DDL `close_dispatcher` is held too, and
//! the restart comes with the DDL applied downstream and both of the dropped table's dispatchers
//! held closing (in place of the passers).
//!
//! Each cell: rows written before the DDL, the DDL, the hold reached (read from the API), the
//! restart, the release, rows written after; then, read from the API and the downstream only:
//! the checkpoint passes the upstream's position, `restarts` is 0, `sluice check` passes, the
//! DDL is recorded finished in `sluice_sink.ddl_ts` and ran exactly once downstream (its
//! statement appears once in the downstream's binlog), and its effect is there.
//!
//! Which cells run: `SLUICE_DDL_MATRIX=all` or a list (`1,5,9`); by default three cells chosen
//! by the commit (`GIT_COMMIT`, as `scripts/test.sh` sets it): cells i, i+4 and i+8 (mod 12),
//! which cover the three restarts and three of the four holds; without `GIT_COMMIT`, 1, 5 and 9.
//! A cell not chosen says so and returns. `scripts/ddl-matrix.sh` runs all twelve.

mod common;
use common::cluster::{of_table, Cluster};
use common::*;
use serde_json::{json, Value};
use sluice_testkit::etcd::Etcd;
use sluice_testkit::mariadb::MariaDb;
use std::collections::BTreeSet;
use std::time::Instant;

const CF: &str = "dm";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Hold {
    AfterWrite,
    BeforeWrite,
    BeforePass,
    AfterPass,
}

impl Hold {
    fn name(self) -> &'static str {
        match self {
            Hold::AfterWrite => "ddl_after_write",
            Hold::BeforeWrite => "ddl_before_write",
            Hold::BeforePass => "ddl_before_pass",
            Hold::AfterPass => "ddl_after_pass",
        }
    }
    fn at_writer(self) -> bool {
        matches!(self, Hold::AfterWrite | Hold::BeforeWrite)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Restart {
    Both,
    Writer,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ddl {
    DropDatabase,
    DropTable,
    RenameTable,
    Truncate,
    AddColumn,
}

impl Ddl {
    fn sql(self) -> &'static str {
        match self {
            Ddl::DropDatabase => "DROP DATABASE m",
            Ddl::DropTable => "DROP TABLE m.t",
            Ddl::RenameTable => "RENAME TABLE m.t TO m.t2",
            Ddl::Truncate => "TRUNCATE TABLE m.t",
            Ddl::AddColumn => "ALTER TABLE m.t ADD COLUMN c INT DEFAULT 7",
        }
    }
    /// What the statement's downstream form contains, whatever the sink adds (`IF EXISTS`).
    fn word(self) -> &'static str {
        match self {
            Ddl::DropDatabase => "DROP DATABASE",
            Ddl::DropTable => "DROP TABLE",
            Ddl::RenameTable => "RENAME TABLE",
            Ddl::Truncate => "TRUNCATE",
            Ddl::AddColumn => "ADD COLUMN",
        }
    }
    /// The DDL ends the table `m.t` replicates as (TRUNCATE gives it a new id).
    fn drops(self) -> bool {
        matches!(self, Ddl::DropDatabase | Ddl::DropTable | Ddl::Truncate)
    }
    /// The table trigger takes part (it writes the DDL); ADD COLUMN is the table's own.
    fn trigger(self) -> bool {
        self != Ddl::AddColumn
    }
    /// The rows written after the DDL.
    fn after(self) -> &'static str {
        match self {
            Ddl::DropDatabase | Ddl::DropTable => {
                "INSERT INTO o.k VALUES (10, 10), (11, 11); UPDATE o.k SET v = v + 1 WHERE id = 1"
            }
            Ddl::RenameTable => {
                "INSERT INTO m.t2 VALUES (1000, 1), (1001, 2); UPDATE m.t2 SET v = v + 1 WHERE id % 50 = 1; \
                 INSERT INTO o.k VALUES (10, 10)"
            }
            Ddl::Truncate => {
                "INSERT INTO m.t VALUES (2000, 1), (2001, 2); UPDATE m.t SET v = 5 WHERE id = 2000; \
                 INSERT INTO o.k VALUES (10, 10)"
            }
            Ddl::AddColumn => {
                "INSERT INTO m.t VALUES (1000, 1, 1), (1001, 2, 2); UPDATE m.t SET c = c + 1 WHERE id % 50 = 1; \
                 INSERT INTO o.k VALUES (10, 10)"
            }
        }
    }
    /// The tables `sluice check` compares at the end.
    fn tables(self) -> &'static str {
        match self {
            Ddl::DropDatabase | Ddl::DropTable => "o.*",
            _ => "m.*,o.*",
        }
    }
}

const CELLS: [(Hold, Restart, Ddl); 12] = [
    (Hold::AfterWrite, Restart::Both, Ddl::DropDatabase),
    (Hold::AfterWrite, Restart::Writer, Ddl::DropTable),
    (Hold::AfterWrite, Restart::Other, Ddl::RenameTable),
    (Hold::BeforeWrite, Restart::Both, Ddl::Truncate),
    (Hold::BeforeWrite, Restart::Writer, Ddl::AddColumn),
    (Hold::BeforeWrite, Restart::Other, Ddl::DropTable),
    (Hold::BeforePass, Restart::Both, Ddl::AddColumn),
    (Hold::BeforePass, Restart::Writer, Ddl::DropDatabase),
    (Hold::BeforePass, Restart::Other, Ddl::Truncate),
    (Hold::AfterPass, Restart::Both, Ddl::RenameTable),
    (Hold::AfterPass, Restart::Writer, Ddl::AddColumn),
    (Hold::AfterPass, Restart::Other, Ddl::DropTable),
];

/// The cells (1-based) to run: `SLUICE_DDL_MATRIX`, else three chosen by `GIT_COMMIT`.
fn chosen() -> BTreeSet<usize> {
    match std::env::var("SLUICE_DDL_MATRIX").ok().as_deref() {
        Some("all") => (1..=12).collect(),
        Some(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|c| {
                c.trim()
                    .parse()
                    .expect("SLUICE_DDL_MATRIX: all or 1..12, comma-separated")
            })
            .collect(),
        _ => {
            let commit = std::env::var("GIT_COMMIT").unwrap_or_default();
            let i = u64::from_str_radix(commit.get(..8).unwrap_or(""), 16).unwrap_or(0) % 12;
            (0..3).map(|k| ((i + 4 * k) % 12) as usize + 1).collect()
        }
    }
}

/// `m.t`, 300 rows with fresh statistics (many regions), on both sides before the servers
/// start (they compute regions at start). It is the only table then, so its two pieces after
/// the split land on the two nodes (each piece goes to the least loaded node).
fn schema(up: &MariaDb, down: &MariaDb) {
    let rows: Vec<String> = (0..300).map(|i| format!("({i}, {i})")).collect();
    let sql = format!(
        "CREATE DATABASE m; CREATE TABLE m.t (id INT PRIMARY KEY, v INT); INSERT INTO m.t VALUES {};",
        rows.join(", ")
    );
    up.exec(&sql).expect("upstream schema");
    down.exec(&sql).expect("downstream schema");
    up.exec("ANALYZE TABLE m.t").expect("analyze");
}

/// `m.t` in two spans, one on each node; returns its table id.
fn split_across(c: &Cluster, out: &Outputs) -> u64 {
    let t = c.table_id(out, "m.t");
    c.request(out, "split_table", json!({"table_id": t, "spans": 2}));
    wait_for("m.t in two spans on two nodes", 90, || {
        let v = c.spans(out)?;
        let items = of_table(&v, t);
        let nodes: BTreeSet<&str> = items.iter().filter_map(|i| i["node_id"].as_str()).collect();
        let settled = items.len() == 2
            && nodes.len() == 2
            && items
                .iter()
                .all(|i| i["state"] == "replicating" && i["operator"].is_null());
        settled.then_some(t).ok_or(v.to_string())
    })
}

/// The index of the server that writes `ddl`: the maintainer's for a trigger DDL, else the node
/// of the table's first span.
fn predicted_writer(c: &Cluster, out: &Outputs, ddl: Ddl, t: u64) -> usize {
    if ddl.trigger() {
        let m = c.maintainer(out).expect("a maintainer");
        return c.index_of(&m);
    }
    let v = c.spans(out).expect("spans");
    let mut items = of_table(&v, t);
    items.sort_by(|a, b| a["start_key"].as_str().cmp(&b["start_key"].as_str()));
    let node = items[0]["node_id"]
        .as_str()
        .expect("node of the first span");
    c.index_of(node)
}

/// The work each server reports held at `point` (by server index).
fn held(c: &Cluster, out: &Outputs, point: &str) -> Result<Vec<Vec<Value>>, String> {
    c.servers
        .iter()
        .map(|s| {
            let (st, v) = api_raw(&s.url(), "GET", "/api/v2/debug/holds", None)?;
            out.add(&v.to_string());
            if st != 200 {
                return Err(format!("{st} {v}"));
            }
            Ok(v["held"]
                .as_array()
                .map(|a| a.iter().filter(|h| h["point"] == point).cloned().collect())
                .unwrap_or_default())
        })
        .collect()
}

/// Where the hold must be reached (the point, and how much work each server holds there): at
/// the writer for a write hold; for a pass hold at every dispatcher that passes (both spans for
/// a trigger DDL, the other span's for ADD COLUMN). A DDL that drops the table has no dispatcher
/// that passes it (the maintainer never tells a dropped table's dispatchers to pass: they wait
/// at the DDL until removed), so for it `close_dispatcher` is held too and the place is the
/// dropped table's two dispatchers, closing.
fn held_where(hold: Hold, ddl: Ddl, writer: usize) -> (&'static str, Vec<usize>) {
    match (hold.at_writer(), ddl.trigger()) {
        (true, _) => (
            hold.name(),
            (0..2).map(|i| usize::from(i == writer)).collect(),
        ),
        (false, _) if ddl.drops() => ("close_dispatcher", vec![1, 1]),
        (false, true) => (hold.name(), vec![1, 1]),
        (false, false) => (
            hold.name(),
            (0..2).map(|i| usize::from(i != writer)).collect(),
        ),
    }
}

fn wait_held(c: &Cluster, out: &Outputs, down: &MariaDb, point: &str, expected: &[usize]) {
    wait_for(&format!("{point} reached ({expected:?})"), 60, || {
        let h = held(c, out, point)?;
        let counts: Vec<usize> = h.iter().map(|x| x.len()).collect();
        if counts == expected {
            return Ok(());
        }
        let d = c.dispatchers(out)?;
        let ddl_ts = down_ddls(down);
        Err(format!(
            "held at {point}: {h:?}; dispatchers {d}; downstream ddl_ts {ddl_ts:?}"
        ))
    });
}

fn restart(c: &mut Cluster, which: Restart, writer: usize) {
    let nodes: Vec<usize> = match which {
        Restart::Both => vec![0, 1],
        Restart::Writer => vec![writer],
        Restart::Other => vec![1 - writer],
    };
    for &i in &nodes {
        c.servers[i].kill9();
    }
    for &i in &nodes {
        c.servers[i].restart_after_kill();
    }
    c.wait_captures(2);
}

fn exists(down: &MariaDb, db: &str, table: Option<&str>) -> bool {
    let sql = match table {
        Some(t) => format!(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = '{t}'"
        ),
        None => format!(
            "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{db}'"
        ),
    };
    down.query_one(&sql).ok().as_deref() == Some("1")
}

/// The downstream's binlog statements containing `word`.
fn downstream_statements(down: &MariaDb, word: &str) -> Vec<String> {
    let files = down.query("SHOW BINARY LOGS").expect("binary logs");
    let mut found = Vec::new();
    for f in files {
        let events = down
            .query(&format!("SHOW BINLOG EVENTS IN '{}'", f[0]))
            .expect("binlog events");
        for e in events {
            if e.get(2).map(String::as_str) == Some("Query")
                && e.get(5)
                    .is_some_and(|info| info.to_uppercase().contains(word))
            {
                found.push(e[5].clone());
            }
        }
    }
    found
}

/// The downstream's `sluice_sink.ddl_ts` rows (for messages).
fn down_ddls(down: &MariaDb) -> Vec<Vec<String>> {
    down.query("SELECT commit_ts, finished, query FROM sluice_sink.ddl_ts ORDER BY commit_ts")
        .unwrap_or_default()
}

/// The downstream recorded the DDL finished in `sluice_sink.ddl_ts`.
fn finished(down: &MariaDb, ddl: Ddl) -> bool {
    down.query(&format!(
        "SELECT finished FROM sluice_sink.ddl_ts WHERE query LIKE '%{}%'",
        ddl.word()
    ))
    .map(|r| r.iter().any(|row| row[0] == "1"))
    .unwrap_or(false)
}

/// The DDL ran exactly once downstream, is recorded finished, and its effect is there.
fn assert_once(down: &MariaDb, ddl: Ddl) {
    let ran = downstream_statements(down, ddl.word());
    assert_eq!(ran.len(), 1, "{} ran downstream: {ran:?}", ddl.sql());
    let rec = down
        .query(&format!(
            "SELECT commit_ts, finished FROM sluice_sink.ddl_ts WHERE query LIKE '%{}%'",
            ddl.word()
        ))
        .expect("ddl_ts");
    assert!(
        rec.len() == 1 && rec[0][1] == "1",
        "ddl_ts of {}: {rec:?}",
        ddl.sql()
    );
    let cols = down
        .query_one(
            "SELECT IFNULL(GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION), '') FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'm' AND TABLE_NAME = 't'",
        )
        .expect("columns");
    match ddl {
        Ddl::DropDatabase => assert!(!exists(down, "m", None), "database m is back"),
        Ddl::DropTable => assert!(!exists(down, "m", Some("t")), "m.t is back"),
        Ddl::RenameTable => {
            assert!(!exists(down, "m", Some("t")), "m.t is back");
            assert!(exists(down, "m", Some("t2")), "m.t2 is missing");
        }
        Ddl::Truncate => {
            let old = down
                .query_one("SELECT COUNT(*) FROM m.t WHERE id < 1000")
                .expect("m.t");
            assert_eq!(old, "0", "truncated rows are back");
        }
        Ddl::AddColumn => assert_eq!(cols, "id,v,c", "m.t's columns"),
    }
}

fn cell(n: usize) {
    if !chosen().contains(&n) {
        eprintln!("ddl matrix cell {n} not chosen (SLUICE_DDL_MATRIX=all runs every cell)");
        return;
    }
    let (hold, which, ddl) = CELLS[n - 1];
    let started = Instant::now();
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    schema(&up, &down);
    let mut c = Cluster::start(&format!("dm{n}-"), 2, &up_url, &etcd.url(), CF);
    c.create(
        &out,
        &format!("{down_url}/"),
        "enable-table-across-nodes = true\nregion-threshold = 100000\n",
    );
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 60);
    let t = split_across(&c, &out);
    // A second table, placed after the split (the split's pieces stay where they are).
    up.exec("CREATE DATABASE o; CREATE TABLE o.k (id INT PRIMARY KEY, v INT); INSERT INTO o.k VALUES (1, 1), (2, 2)")
        .expect("o.k");
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 60);
    let writer = predicted_writer(&c, &out, ddl, t);

    up.exec("INSERT INTO m.t VALUES (500, 1), (501, 2); UPDATE m.t SET v = v + 1 WHERE id % 10 = 0; DELETE FROM m.t WHERE id % 37 = 3; INSERT INTO o.k VALUES (3, 3)")
        .expect("rows before the DDL");
    let (point, expected) = held_where(hold, ddl, writer);
    for i in 0..2 {
        c.holds(&out, i, json!({"point": hold.name()}));
        c.holds(&out, i, json!({"point": point}));
    }
    up.exec(ddl.sql()).expect("the DDL");
    wait_held(&c, &out, &down, point, &expected);
    // Only `ddl_before_write` restarts before the downstream ran the DDL.
    let applied = finished(&down, ddl);
    assert_eq!(
        applied,
        hold != Hold::BeforeWrite,
        "at {} the DDL is applied downstream: {applied}",
        hold.name()
    );
    restart(&mut c, which, writer);
    for i in 0..2 {
        c.holds(&out, i, json!({"clear": true}));
    }
    up.exec(ddl.after()).expect("rows after the DDL");

    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 120);
    let v = c.changefeed(&out).expect("changefeed");
    assert_eq!(v["state"], "normal", "{v}");
    assert_eq!(v["restarts"], 0, "no whole-changefeed restart: {v}");
    let r = check(&out, &up_url, &down_url, ddl.tables());
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    assert_once(&down, ddl);
    c.finish(&out);
    eprintln!(
        "ddl matrix cell {n} ({}, restart {which:?}, {}): passed in {:?}",
        hold.name(),
        ddl.sql(),
        started.elapsed()
    );
}

#[test]
fn cell_01_after_write_restart_both_drop_database() {
    cell(1)
}
#[test]
fn cell_02_after_write_restart_writer_drop_table() {
    cell(2)
}
#[test]
fn cell_03_after_write_restart_other_rename_table() {
    cell(3)
}
#[test]
fn cell_04_before_write_restart_both_truncate_table() {
    cell(4)
}
#[test]
fn cell_05_before_write_restart_writer_add_column() {
    cell(5)
}
#[test]
fn cell_06_before_write_restart_other_drop_table() {
    cell(6)
}
#[test]
fn cell_07_before_pass_restart_both_add_column() {
    cell(7)
}
#[test]
fn cell_08_before_pass_restart_writer_drop_database() {
    cell(8)
}
#[test]
fn cell_09_before_pass_restart_other_truncate_table() {
    cell(9)
}
#[test]
fn cell_10_after_pass_restart_both_rename_table() {
    cell(10)
}
#[test]
fn cell_11_after_pass_restart_writer_add_column() {
    cell(11)
}
#[test]
fn cell_12_after_pass_restart_other_drop_table() {
    cell(12)
}
