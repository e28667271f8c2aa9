//! `check` against two real MariaDB servers: a million-row table with one differing column, a
//! missing row, an extra row, NULL against '' and a trailing-space difference, each reported by
//! key; an equal table reported equal; exit code 0 only when nothing differs.

use sluice_sink::check::{run, CheckArgs, DiffKind, RowDiff};
use sluice_testkit::mariadb::MariaDb;

const SETUP: &str = "CREATE DATABASE d; USE d; \
    CREATE TABLE d.big (id INT PRIMARY KEY, a VARCHAR(32) NULL, b INT NOT NULL); \
    INSERT INTO d.big SELECT seq, CONCAT('v', seq), seq % 1000 FROM seq_1_to_1000000; \
    CREATE TABLE d.small (k1 VARCHAR(8) NOT NULL, k2 INT NOT NULL, c TEXT, PRIMARY KEY (k1, k2)); \
    INSERT INTO d.small SELECT CONCAT('k', seq % 7), seq, REPEAT('x', seq % 5) FROM seq_1_to_500;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finds_every_planted_difference_by_key_in_a_million_rows() {
    let (up, down) = (
        MariaDb::start().expect("up"),
        MariaDb::start().expect("down"),
    );
    up.exec(SETUP).expect("setup up");
    down.exec(SETUP).expect("setup down");

    let all_equal = run(&CheckArgs::new(&up.url(), &down.url(), "d.*"))
        .await
        .expect("check");
    assert!(all_equal.equal(), "{all_equal}");
    assert_eq!(all_equal.exit_code(), 0);
    assert_eq!(all_equal.tables.len(), 2);
    assert_eq!(all_equal.tables[0].upstream_rows, 1_000_000);

    up.exec("UPDATE d.big SET a = NULL WHERE id = 777; UPDATE d.big SET a = 'x' WHERE id = 999999")
        .expect("plant up");
    down.exec(
        "UPDATE d.big SET b = b + 1 WHERE id = 123456; DELETE FROM d.big WHERE id = 500000; \
         INSERT INTO d.big VALUES (1000001, 'extra', 1); UPDATE d.big SET a = '' WHERE id = 777; \
         UPDATE d.big SET a = 'x ' WHERE id = 999999",
    )
    .expect("plant down");
    let report = run(&CheckArgs::new(&up.url(), &down.url(), "d.*"))
        .await
        .expect("check");
    let text = report.to_string();
    assert!(!report.equal(), "{text}");
    assert_eq!(report.exit_code(), 1);
    let big = report
        .tables
        .iter()
        .find(|t| t.table == "d.big")
        .expect("d.big");
    let d = |k: &str, kind| RowDiff {
        key: vec![k.to_string()],
        kind,
    };
    assert_eq!(
        big.diffs,
        vec![
            d("1000001", DiffKind::Extra),
            d("123456", DiffKind::Differs),
            d("500000", DiffKind::Missing),
            d("777", DiffKind::Differs),
            d("999999", DiffKind::Differs),
        ],
        "{text}"
    );
    assert_eq!(big.diff_count, 5);
    assert!(big.chunks >= 100, "{} chunks", big.chunks);
    let small = report
        .tables
        .iter()
        .find(|t| t.table == "d.small")
        .expect("d.small");
    assert!(small.equal(), "{text}");
    assert!(text.contains("Missing (id) = (500000)"), "{text}");

    // Only the equal table selected: exit code 0.
    let only_small = run(&CheckArgs::new(&up.url(), &down.url(), "d.sm*"))
        .await
        .expect("check");
    assert_eq!(only_small.tables.len(), 1);
    assert_eq!(only_small.exit_code(), 0, "{only_small}");

    // A composite-key difference and a table missing downstream.
    down.exec("UPDATE d.small SET c = 'changed' WHERE k1 = 'k3' AND k2 = 10")
        .expect("plant small");
    up.exec("CREATE TABLE d.only_up (id INT PRIMARY KEY)")
        .expect("only up");
    let r = run(&CheckArgs::new(&up.url(), &down.url(), "d.small,d.only_up"))
        .await
        .expect("check");
    let small = r
        .tables
        .iter()
        .find(|t| t.table == "d.small")
        .expect("small");
    assert_eq!(
        small.diffs,
        vec![RowDiff {
            key: vec!["k3".into(), "10".into()],
            kind: DiffKind::Differs
        }],
        "{r}"
    );
    let only = r
        .tables
        .iter()
        .find(|t| t.table == "d.only_up")
        .expect("only_up");
    assert_eq!(
        only.schema_difference.as_deref(),
        Some("missing downstream")
    );
    assert_eq!(r.exit_code(), 1);

    // A table without a usable key is compared as a multiset of rows: a duplicated row (what
    // force-replicate can leave behind) and a missing row with a NULL are reported.
    let nk = "CREATE TABLE d.nk (a INT NULL, b VARCHAR(8) NULL); INSERT INTO d.nk VALUES (1, 'x'), (NULL, 'y'), (2, NULL);";
    up.exec(nk).expect("nk up");
    down.exec(nk).expect("nk down");
    let r = run(&CheckArgs::new(&up.url(), &down.url(), "d.nk"))
        .await
        .expect("check");
    assert!(r.equal(), "{r}");
    down.exec("INSERT INTO d.nk VALUES (1, 'x'); DELETE FROM d.nk WHERE a IS NULL")
        .expect("plant nk");
    let r = run(&CheckArgs::new(&up.url(), &down.url(), "d.nk"))
        .await
        .expect("check");
    let t = &r.tables[0];
    assert_eq!(
        t.diffs,
        vec![
            RowDiff {
                key: vec!["1".into(), "x".into()],
                kind: DiffKind::Extra
            },
            RowDiff {
                key: vec!["NULL".into(), "y".into()],
                kind: DiffKind::Missing
            },
        ],
        "{r}"
    );
}
