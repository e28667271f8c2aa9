//! Partition placement against a live MariaDB: for every row of a set of partitioned tables
//! (RANGE, LIST, COLUMNS, HASH, LINEAR HASH, KEY, LINEAR KEY, with edge values), the partition
//! `Partitioning::partition_of` computes from the values capture decodes must be the partition
//! the server stores the row in (`SELECT … PARTITION (p)`). Layouts are parsed from
//! `SHOW CREATE TABLE` (and compared with the parse of the DDL as written); ALTER partition
//! operations are applied with `apply_alter` and compared with the server's new layout; the
//! expression evaluator is compared with the server's value of each supported function.

use sluice_capture::binlog::{BinlogReader, ReaderConfig};
use sluice_capture::capture::{Capture, Captured};
use sluice_capture::schema::SchemaHistory;
use sluice_partition::{split_partition_options, Layout, PartitionDef, Partitioning};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::{TableSchema, Value};
use std::collections::BTreeMap;

/// A deterministic pseudo-random sequence (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

/// One test table: its DDL (columns `id` first) and the SQL literals of its other columns, one
/// tuple per row.
struct Table {
    name: &'static str,
    ddl: String,
    rows: Vec<String>,
}

fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

fn ints_with_edges(rng: &mut Rng, n: usize, lo: i64, hi: i64, edges: &[i64]) -> Vec<String> {
    let mut v: Vec<String> = edges.iter().map(|e| e.to_string()).collect();
    v.push("NULL".into());
    while v.len() < n {
        v.push(rng.range(lo, hi).to_string());
    }
    v
}

/// `edges` (SQL literals) first, then values of `more` until there are `n`.
fn edges_then(edges: &[&str], n: usize, mut more: impl FnMut() -> String) -> Vec<String> {
    let mut v: Vec<String> = edges.iter().map(|e| e.to_string()).collect();
    while v.len() < n {
        v.push(more());
    }
    v
}

fn random_date(rng: &mut Rng) -> String {
    format!(
        "'{:04}-{:02}-{:02}'",
        rng.range(1000, 9999),
        rng.range(1, 12),
        rng.range(1, 28)
    )
}

fn random_datetime(rng: &mut Rng, frac: bool) -> String {
    let f = if frac {
        format!(".{:06}", rng.range(0, 999_999))
    } else {
        String::new()
    };
    format!(
        "'{:04}-{:02}-{:02} {:02}:{:02}:{:02}{f}'",
        rng.range(1000, 9999),
        rng.range(1, 12),
        rng.range(1, 28),
        rng.range(0, 23),
        rng.range(0, 59),
        rng.range(0, 59)
    )
}

const WORDS: &[&str] = &[
    "", " ", "a", "A", "a ", "b", "B", "k", "K", "kz", "m", "M", "M ", "m  ", "ma", "Ma", "mZ",
    "z", "Z", "zz", "abc", "ABC", "Abc ", "hello", "HELLO", "x", "X", "y", "0", "9", "10", "_",
    "[", "`", "~",
];
const LATIN_WORDS: &[&str] = &[
    "é", "É", "e", "E", "è", "ä", "Ä", "ö", "Ö", "å", "ß", "ss", "ü", "Ü", "ñ", "Ñ", "æ",
];

fn tables() -> Vec<Table> {
    let mut rng = Rng(0x5eed);
    let n = 300;
    let mut t = Vec::new();
    let one = |name: &'static str, ddl: &str, vals: Vec<String>| Table {
        name,
        ddl: ddl.replace("{t}", &format!("d.{name}")),
        rows: vals,
    };

    // RANGE on an int, negatives and NULL.
    let int_edges = [
        -1001,
        -1000,
        -999,
        -1,
        0,
        1,
        99,
        100,
        101,
        999,
        1000,
        2147483647,
        -2147483648,
    ];
    t.push(one(
        "r_int",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (-1000), \
         PARTITION p1 VALUES LESS THAN (0), PARTITION p2 VALUES LESS THAN (100), PARTITION p3 VALUES LESS THAN (1000), \
         PARTITION p4 VALUES LESS THAN MAXVALUE)",
        ints_with_edges(&mut rng, n, -3000, 3000, &int_edges),
    ));
    // RANGE on BIGINT UNSIGNED across 2^63.
    let big = edges_then(
        &[
            "0",
            "1",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551614",
            "NULL",
        ],
        n,
        || (rng.next() << 33 ^ rng.next() << 2 ^ rng.next()).to_string(),
    );
    t.push(one(
        "r_bigu",
        "CREATE TABLE {t} (id INT NOT NULL, u BIGINT UNSIGNED) PARTITION BY RANGE (u) (PARTITION p0 VALUES LESS THAN (1000), \
         PARTITION p1 VALUES LESS THAN (9223372036854775808), PARTITION p2 VALUES LESS THAN (18446744073709551615), \
         PARTITION p3 VALUES LESS THAN MAXVALUE)",
        big.clone(),
    ));
    // RANGE with YEAR(date).
    let dates = edges_then(
        &[
            "'1999-12-31'",
            "'2000-01-01'",
            "'2009-12-31'",
            "'2010-01-01'",
            "'1000-01-01'",
            "'9999-12-31'",
            "NULL",
        ],
        n,
        || random_date(&mut rng),
    );
    t.push(one(
        "r_year",
        "CREATE TABLE {t} (id INT NOT NULL, d DATE) PARTITION BY RANGE (YEAR(d)) (PARTITION p0 VALUES LESS THAN (2000), \
         PARTITION p1 VALUES LESS THAN (2010), PARTITION p2 VALUES LESS THAN (5000), PARTITION p3 VALUES LESS THAN MAXVALUE)",
        dates.clone(),
    ));
    // RANGE with TO_DAYS(datetime), bounds written as TO_DAYS('…') in the DDL.
    let dts = edges_then(
        &[
            "'2019-12-31 23:59:59.999'",
            "'2020-01-01 00:00:00'",
            "'2020-06-30 12:00:00.5'",
            "'1000-01-01 00:00:00'",
            "NULL",
        ],
        n,
        || random_datetime(&mut rng, true),
    );
    t.push(one(
        "r_todays",
        "CREATE TABLE {t} (id INT NOT NULL, dt DATETIME(3)) PARTITION BY RANGE (TO_DAYS(dt)) (\
         PARTITION p0 VALUES LESS THAN (TO_DAYS('2020-01-01')), PARTITION p1 VALUES LESS THAN (to_days('2020-07-01')), \
         PARTITION p2 VALUES LESS THAN (TO_DAYS('5000-01-01 00:00:00')), PARTITION p3 VALUES LESS THAN MAXVALUE)",
        dts.clone(),
    ));
    // RANGE with UNIX_TIMESTAMP(timestamp(2)), fractions at the bounds.
    let ts = edges_then(
        &[
            "'1970-01-01 00:00:01'",
            "'2000-01-01 00:00:00'",
            "'1999-12-31 23:59:59.99'",
            "'2000-01-01 00:00:00.01'",
            "'2038-01-19 03:14:07.99'",
            "NULL",
        ],
        n,
        || {
            format!(
                "FROM_UNIXTIME({}.{:02})",
                rng.range(1, 2_147_483_647),
                rng.range(0, 99)
            )
        },
    );
    t.push(one(
        "r_unix",
        "CREATE TABLE {t} (id INT NOT NULL, ts TIMESTAMP(2) NULL DEFAULT NULL) PARTITION BY RANGE (UNIX_TIMESTAMP(ts)) (\
         PARTITION p0 VALUES LESS THAN (946684800), PARTITION p1 VALUES LESS THAN (1500000000), PARTITION p2 VALUES LESS THAN MAXVALUE)",
        ts.clone(),
    ));
    // RANGE of TIME_TO_SEC of a fractional TIME (the server floors: -10:00:01.4 → -36002).
    let times = edges_then(
        &[
            "'-10:00:01.4'",
            "'-10:00:01.6'",
            "'-10:00:01'",
            "'-10:00:02'",
            "'10:00:01.6'",
            "'10:00:00.99'",
            "'00:00:00'",
            "'-00:00:00.5'",
            "NULL",
        ],
        n,
        || {
            format!(
                "'{}{:02}:{:02}:{:02}.{:02}'",
                if rng.range(0, 1) == 0 { "-" } else { "" },
                rng.range(0, 12),
                rng.range(0, 59),
                rng.range(0, 59),
                rng.range(0, 99)
            )
        },
    );
    t.push(one(
        "r_timesec",
        "CREATE TABLE {t} (id INT NOT NULL, tm TIME(2)) PARTITION BY RANGE (TIME_TO_SEC(tm)) (PARTITION p0 VALUES LESS THAN (-36002), \
         PARTITION p1 VALUES LESS THAN (-36001), PARTITION p2 VALUES LESS THAN (0), PARTITION p3 VALUES LESS THAN (36001), \
         PARTITION p4 VALUES LESS THAN MAXVALUE)",
        times,
    ));
    // RANGE with arithmetic.
    t.push(one(
        "r_expr",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY RANGE (a DIV 3 - a MOD 7 * 2) (PARTITION p0 VALUES LESS THAN (-100), \
         PARTITION p1 VALUES LESS THAN (0), PARTITION p2 VALUES LESS THAN (7), PARTITION p3 VALUES LESS THAN MAXVALUE)",
        ints_with_edges(&mut rng, n, -1000, 1000, &[-300, -299, -1, 0, 1, 20, 21, 22]),
    ));

    // RANGE COLUMNS on (int, varchar) with latin1_swedish_ci (the server's default here),
    // utf8mb4_general_ci and utf8mb4_bin.
    let words = edges_then(&[], n, || {
        let a = rng.range(-15, 15);
        let w = rng.pick(WORDS);
        if rng.range(0, 9) == 0 {
            format!("{a}, NULL")
        } else if rng.range(0, 14) == 0 {
            format!("NULL, {}", sql_str(w))
        } else {
            format!("{a}, {}", sql_str(w))
        }
    });
    let rc = "PARTITION BY RANGE COLUMNS(a, s) (PARTITION p0 VALUES LESS THAN (-10, 'k'), PARTITION p1 VALUES LESS THAN (0, 'M'), \
              PARTITION p2 VALUES LESS THAN (0, MAXVALUE), PARTITION p3 VALUES LESS THAN (10, 'b'), PARTITION p4 VALUES LESS THAN (MAXVALUE, MAXVALUE))";
    t.push(one(
        "rc_latin1",
        &format!(
            "CREATE TABLE {{t}} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET latin1) {rc}"
        ),
        words.clone(),
    ));
    t.push(one(
        "rc_bin",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin) {rc}"),
        words.clone(),
    ));
    // The same rows with Latin-1 letters (accents) in the first 120.
    let mut lwords = words.clone();
    for (i, w) in lwords.iter_mut().enumerate().take(120) {
        *w = format!(
            "{}, {}",
            (i % 30) as i64 - 15,
            sql_str(LATIN_WORDS[i % LATIN_WORDS.len()])
        );
    }
    t.push(one(
        "rc_general",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci) {rc}"),
        lwords.clone(),
    ));
    t.push(one(
        "rc_latin1_accents",
        &format!(
            "CREATE TABLE {{t}} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET latin1) {rc}"
        ),
        lwords.clone(),
    ));
    // UCA: letters, digits and spaces only (what Sluice knows of UCA weights).
    let alnum: Vec<String> = words
        .iter()
        .filter(|w| !w.contains(['_', '[', '`', '~']))
        .cloned()
        .collect();
    t.push(one(
        "rc_unicode",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci) {rc}"),
        alnum,
    ));
    // RANGE/LIST COLUMNS on binary strings (bytes, no padding; BINARY zero-padded).
    let bin_rows: Vec<String> = WORDS
        .iter()
        .map(|w| sql_str(w))
        .chain(["NULL".to_string()])
        .collect();
    t.push(one(
        "rc_varbinary",
        "CREATE TABLE {t} (id INT NOT NULL, s VARBINARY(10)) PARTITION BY RANGE COLUMNS(s) (PARTITION p0 VALUES LESS THAN ('M'), \
         PARTITION p1 VALUES LESS THAN ('k'), PARTITION p2 VALUES LESS THAN ('m '), PARTITION p3 VALUES LESS THAN (MAXVALUE))",
        bin_rows.clone(),
    ));
    t.push(one(
        "lc_binary",
        "CREATE TABLE {t} (id INT NOT NULL, s BINARY(3)) PARTITION BY LIST COLUMNS(s) (PARTITION p0 VALUES IN ('a', 'B'), \
         PARTITION p1 VALUES IN ('a ', 'm'), PARTITION pd DEFAULT)",
        bin_rows.iter().filter(|r| r.len() <= 5).cloned().collect(),
    ));
    // RANGE COLUMNS on a date and on a datetime.
    let dates_nn: Vec<String> = dates.iter().filter(|d| *d != "NULL").cloned().collect();
    t.push(one(
        "rc_date",
        "CREATE TABLE {t} (id INT NOT NULL, d DATE NOT NULL) PARTITION BY RANGE COLUMNS(d) (PARTITION p0 VALUES LESS THAN ('2000-01-01'), \
         PARTITION p1 VALUES LESS THAN ('2010-01-01'), PARTITION p2 VALUES LESS THAN ('5000-06-15'), PARTITION p3 VALUES LESS THAN (MAXVALUE))",
        dates_nn,
    ));
    t.push(one(
        "rc_datetime",
        "CREATE TABLE {t} (id INT NOT NULL, dt DATETIME(3)) PARTITION BY RANGE COLUMNS(dt) (PARTITION p0 VALUES LESS THAN ('2020-01-01 00:00:00'), \
         PARTITION p1 VALUES LESS THAN ('2020-06-30 12:00:00'), PARTITION p2 VALUES LESS THAN ('5000-01-01'), PARTITION p3 VALUES LESS THAN (MAXVALUE))",
        dts.clone(),
    ));

    // LIST with NULL and DEFAULT; LIST without a NULL partition (NULL goes to DEFAULT); LIST of
    // an expression covering every value.
    t.push(one(
        "l_int",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1, 3, 5, NULL), \
         PARTITION p1 VALUES IN (-1, -2, 0), PARTITION pd DEFAULT, PARTITION p3 VALUES IN (7, 8))",
        ints_with_edges(&mut rng, n, -10, 10, &[]),
    ));
    t.push(one(
        "l_nonull",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1, 2), PARTITION pd DEFAULT)",
        ints_with_edges(&mut rng, n, -5, 5, &[]),
    ));
    t.push(one(
        "l_mod",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY LIST (a MOD 4) (PARTITION p0 VALUES IN (0, NULL), \
         PARTITION p1 VALUES IN (1, -1), PARTITION p2 VALUES IN (2, -2), PARTITION p3 VALUES IN (3, -3))",
        ints_with_edges(&mut rng, n, -100000, 100000, &[-4, -3, 3, 4]),
    ));
    // LIST COLUMNS on strings with case and trailing-space differences, and on (int, string)
    // with NULLs.
    let mut lw = edges_then(&[], n, || {
        sql_str(rng.pick(&[
            "a", "A", "a ", "b", "B", "c", "C  ", "d", "D", "e", "E", "x", "é", "É", "ä",
        ]))
    });
    lw.push("NULL".into());
    let lc = "PARTITION BY LIST COLUMNS(s) (PARTITION p0 VALUES IN ('a', 'B'), PARTITION p1 VALUES IN ('c', 'D '), \
              PARTITION p2 VALUES IN ('e'), PARTITION pd DEFAULT)";
    t.push(one(
        "lc_latin1",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, s VARCHAR(5) CHARACTER SET latin1) {lc}"),
        lw.clone(),
    ));
    t.push(one(
        "lc_general",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, s VARCHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci) {lc}"),
        lw.clone(),
    ));
    t.push(one(
        "lc_bin",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, s VARCHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin) {lc}"),
        lw.clone(),
    ));
    let pairs = edges_then(&[], n, || {
        let a = ["NULL", "1", "2", "3"][(rng.next() % 4) as usize];
        let s = ["NULL", "'x'", "'X'", "'y'", "'z'"][(rng.next() % 5) as usize];
        format!("{a}, {s}")
    });
    t.push(one(
        "lc_pair",
        "CREATE TABLE {t} (id INT NOT NULL, a INT, s VARCHAR(3)) PARTITION BY LIST COLUMNS(a, s) (\
         PARTITION p0 VALUES IN ((NULL, 'x'), (1, NULL)), PARTITION p1 VALUES IN ((1, 'y'), (2, 'x'), (NULL, NULL)), PARTITION pd DEFAULT)",
        pairs,
    ));

    // HASH with negative values and NULL; on BIGINT UNSIGNED; of a function; LINEAR HASH with a
    // count that is not a power of two.
    let hash_edges = [-1, -2, -3, -4, -5, -6, -7, 0, 1, 2147483647, -2147483648];
    t.push(one(
        "h_neg",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY HASH (a) PARTITIONS 5",
        ints_with_edges(&mut rng, n, -2147483648, 2147483647, &hash_edges),
    ));
    t.push(one(
        "h_small",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY HASH (a) PARTITIONS 3",
        ints_with_edges(&mut rng, n, -20, 20, &[]),
    ));
    t.push(one(
        "h_bigu",
        "CREATE TABLE {t} (id INT NOT NULL, u BIGINT UNSIGNED) PARTITION BY HASH (u) PARTITIONS 7",
        big.clone(),
    ));
    let sbig = edges_then(
        &["-9223372036854775808", "9223372036854775807", "-1", "NULL"],
        n,
        || ((rng.next() << 33 ^ rng.next() << 2 ^ rng.next()) as i64).to_string(),
    );
    t.push(one(
        "h_big",
        "CREATE TABLE {t} (id INT NOT NULL, b BIGINT) PARTITION BY HASH (b) PARTITIONS 6",
        sbig.clone(),
    ));
    t.push(one(
        "h_todays",
        "CREATE TABLE {t} (id INT NOT NULL, d DATE) PARTITION BY HASH (TO_DAYS(d)) PARTITIONS 7",
        dates.clone(),
    ));
    t.push(one(
        "lh_6",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY LINEAR HASH (a) PARTITIONS 6",
        ints_with_edges(&mut rng, n, -100000, 100000, &hash_edges),
    ));
    t.push(one("lh_bigu", "CREATE TABLE {t} (id INT NOT NULL, u BIGINT UNSIGNED) PARTITION BY LINEAR HASH (u) PARTITIONS 11", big.clone()));

    // KEY on integers of every width, both algorithms, LINEAR KEY, two columns, KEY ().
    let key_edges = [
        0,
        1,
        -1,
        32,
        97,
        65,
        0x2000,
        0x20_0000,
        0x2000_0000,
        0x2020_2020,
        0x6161,
        0x4141,
        2147483647,
        -2147483648,
    ];
    let key_ints = ints_with_edges(&mut rng, n, -2147483648, 2147483647, &key_edges);
    t.push(one(
        "k_int",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY KEY (a) PARTITIONS 7",
        key_ints.clone(),
    ));
    t.push(one(
        "k_int_alg1",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY KEY ALGORITHM = 1 (a) PARTITIONS 7",
        key_ints.clone(),
    ));
    t.push(one(
        "lk_int",
        "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY LINEAR KEY (a) PARTITIONS 5",
        key_ints.clone(),
    ));
    t.push(one("lk_int_alg1", "CREATE TABLE {t} (id INT NOT NULL, a INT) PARTITION BY LINEAR KEY ALGORITHM=1 (a) PARTITIONS 13", key_ints.clone()));
    t.push(one(
        "k_bigu",
        "CREATE TABLE {t} (id INT NOT NULL, u BIGINT UNSIGNED) PARTITION BY KEY (u) PARTITIONS 5",
        big.clone(),
    ));
    t.push(one(
        "k_big",
        "CREATE TABLE {t} (id INT NOT NULL, b BIGINT) PARTITION BY KEY (b) PARTITIONS 9",
        sbig.clone(),
    ));
    t.push(one(
        "k_tiny",
        "CREATE TABLE {t} (id INT NOT NULL, a TINYINT, b TINYINT UNSIGNED) PARTITION BY KEY (a) PARTITIONS 3",
        (0..n).map(|i| format!("{}, {}", (i as i64 % 256) - 128, i % 256)).chain(["NULL, NULL".to_string()]).collect(),
    ));
    t.push(one(
        "k_tinyu",
        "CREATE TABLE {t} (id INT NOT NULL, b TINYINT UNSIGNED) PARTITION BY KEY (b) PARTITIONS 4",
        (0..n).map(|i| (i % 256).to_string()).collect(),
    ));
    t.push(one(
        "k_small_medium",
        "CREATE TABLE {t} (id INT NOT NULL, s SMALLINT, m MEDIUMINT UNSIGNED) PARTITION BY KEY (s, m) PARTITIONS 6",
        (0..n)
            .map(|_| format!("{}, {}", rng.range(-32768, 32767), rng.range(0, 16777215)))
            .chain(["NULL, 8224".into(), "8224, NULL".into(), "NULL, NULL".into(), "32, 2105376".into()])
            .collect(),
    ));
    t.push(one(
        "k_two",
        "CREATE TABLE {t} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET latin1) PARTITION BY KEY (a, s) PARTITIONS 4",
        words.clone(),
    ));
    t.push(one(
        "k_two_general",
        "CREATE TABLE {t} (id INT NOT NULL, a INT, s VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci) PARTITION BY LINEAR KEY (s, a) PARTITIONS 5",
        lwords.clone(),
    ));
    t.push(one(
        "k_pk",
        "CREATE TABLE {t} (id INT NOT NULL, m MEDIUMINT NOT NULL, s SMALLINT UNSIGNED NOT NULL, PRIMARY KEY (m, s)) PARTITION BY KEY () PARTITIONS 4",
        (0..n).map(|i| format!("{}, {}", rng.range(-8388608, 8388607), i)).collect(),
    ));
    // KEY () with the primary key in another order than the table's.
    t.push(one(
        "k_pk_order",
        "CREATE TABLE {t} (id INT NOT NULL, a INT NOT NULL, s VARCHAR(8) CHARACTER SET latin1 NOT NULL, PRIMARY KEY (s, a)) PARTITION BY KEY () PARTITIONS 5",
        (0..n).map(|i| format!("{}, {}", rng.range(-100000, 100000), sql_str(&format!("{}{i}", rng.pick(WORDS))))).collect(),
    ));
    // KEY on other types: dates and times, YEAR, ENUM, SET, binary and latin1/bin strings.
    t.push(one(
        "k_date",
        "CREATE TABLE {t} (id INT NOT NULL, d DATE) PARTITION BY KEY (d) PARTITIONS 5",
        dates.clone(),
    ));
    let mut dt6 = edges_then(&[], n, || random_datetime(&mut rng, true));
    dt6.push("NULL".into());
    t.push(one(
        "k_datetime6",
        "CREATE TABLE {t} (id INT NOT NULL, dt DATETIME(6)) PARTITION BY KEY (dt) PARTITIONS 5",
        dt6.clone(),
    ));
    t.push(one(
        "k_datetime",
        "CREATE TABLE {t} (id INT NOT NULL, dt DATETIME) PARTITION BY KEY (dt) PARTITIONS 6",
        dt6.clone(),
    ));
    t.push(one("k_datetime3", "CREATE TABLE {t} (id INT NOT NULL, dt DATETIME(3)) PARTITION BY LINEAR KEY (dt) PARTITIONS 6", dt6.clone()));
    t.push(one("k_timestamp", "CREATE TABLE {t} (id INT NOT NULL, ts TIMESTAMP(2) NULL DEFAULT NULL) PARTITION BY KEY (ts) PARTITIONS 5", ts.clone()));
    t.push(one("k_timestamp0", "CREATE TABLE {t} (id INT NOT NULL, ts TIMESTAMP NULL DEFAULT NULL) PARTITION BY KEY (ts) PARTITIONS 7", ts.clone()));
    let years: Vec<String> = (0..n)
        .map(|i| {
            if i == 0 {
                "NULL".into()
            } else if i == 1 {
                "0".into()
            } else {
                (1901 + (i as i64 * 7) % 255).to_string()
            }
        })
        .collect();
    t.push(one(
        "k_year",
        "CREATE TABLE {t} (id INT NOT NULL, y YEAR) PARTITION BY KEY (y) PARTITIONS 5",
        years.clone(),
    ));
    t.push(one(
        "k_year_alg1",
        "CREATE TABLE {t} (id INT NOT NULL, y YEAR) PARTITION BY KEY ALGORITHM=1 (y) PARTITIONS 5",
        years,
    ));
    let members: Vec<String> = (1..=300).map(|i| format!("'e{i}'")).collect();
    let enums: Vec<String> = (0..n)
        .map(|i| {
            if i == 0 {
                "NULL".into()
            } else {
                format!("'e{}'", 1 + (i * 37) % 300)
            }
        })
        .collect();
    t.push(one(
        "k_enum",
        &format!(
            "CREATE TABLE {{t}} (id INT NOT NULL, e ENUM({})) PARTITION BY KEY (e) PARTITIONS 7",
            members.join(",")
        ),
        enums.clone(),
    ));
    t.push(one(
        "k_enum_alg1",
        &format!("CREATE TABLE {{t}} (id INT NOT NULL, e ENUM({})) PARTITION BY KEY ALGORITHM=1 (e) PARTITIONS 7", members.join(",")),
        enums,
    ));
    let smembers: Vec<String> = (1..=20).map(|i| format!("'s{i}'")).collect();
    t.push(one(
        "k_set",
        &format!(
            "CREATE TABLE {{t}} (id INT NOT NULL, s SET({})) PARTITION BY KEY (s) PARTITIONS 5",
            smembers.join(",")
        ),
        (0..n)
            .map(|i| {
                if i == 0 {
                    "NULL".into()
                } else {
                    ((i as u64 * 2654435761) % (1 << 20)).to_string()
                }
            })
            .collect(),
    ));
    let mut strs: Vec<String> = WORDS
        .iter()
        .chain(LATIN_WORDS)
        .map(|w| sql_str(w))
        .collect();
    strs.extend([
        "'x                    '".into(),
        "'  lead'".into(),
        "NULL".into(),
        format!("'{}'", "w".repeat(30)),
    ]);
    while strs.len() < n {
        let len = rng.range(0, 20) as usize;
        let s: String = (0..len)
            .map(|_| (b'a' + (rng.next() % 26) as u8) as char)
            .collect();
        strs.push(sql_str(&s));
    }
    for (name, ty) in [
        ("k_varchar_latin1", "VARCHAR(40) CHARACTER SET latin1"),
        ("k_char_latin1", "CHAR(40) CHARACTER SET latin1"),
        (
            "k_varchar_general",
            "VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
        ),
        (
            "k_char_general",
            "CHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
        ),
        (
            "k_varchar_utf8mb3_general",
            "VARCHAR(40) CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci",
        ),
        ("k_varchar_latin1_bin", "VARCHAR(40) COLLATE latin1_bin"),
        (
            "k_varchar_utf8mb4_bin",
            "VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        ),
        ("k_varchar_ascii", "VARCHAR(40) CHARACTER SET ascii"),
        ("k_varbinary", "VARBINARY(40)"),
        ("k_binary", "BINARY(40)"),
    ] {
        let rows = if ty.contains("ascii") {
            strs.iter().filter(|s| s.is_ascii()).cloned().collect()
        } else {
            strs.clone()
        };
        t.push(one(
            name,
            &format!(
                "CREATE TABLE {{t}} (id INT NOT NULL, s {ty}) PARTITION BY KEY (s) PARTITIONS 5"
            ),
            rows,
        ));
    }
    t
}

/// `SHOW CREATE TABLE` text (the test client prints raw newlines: rejoin its lines).
fn show_create(db: &MariaDb, table: &str) -> String {
    let rows = db
        .query(&format!("SHOW CREATE TABLE d.{table}"))
        .expect("show create");
    let text = rows
        .iter()
        .map(|r| r.join("\t"))
        .collect::<Vec<_>>()
        .join("\n");
    text.split_once('\t')
        .map(|(_, c)| c.to_string())
        .unwrap_or_default()
}

fn layout_from_server(db: &MariaDb, table: &str) -> Option<Partitioning> {
    let create = show_create(db, table);
    let (_, text) = split_partition_options(&create);
    let text = text?;
    Some(
        Partitioning::parse(&text)
            .unwrap_or_else(|e| panic!("{table}: cannot parse {text:?}: {e}")),
    )
}

/// Compares two layouts as the server sees them (names case-insensitively, LIST values as
/// sets; the expression text may be written differently).
fn same_layout(a: &Partitioning, b: &Partitioning) -> Result<(), String> {
    let norm_def = |d: &PartitionDef| {
        let mut v = d.values_in.clone();
        v.sort_by_key(|t| format!("{t:?}"));
        (
            d.name.to_ascii_lowercase(),
            d.less_than.clone(),
            v,
            d.default_list,
        )
    };
    let norm = |p: &Partitioning| {
        (
            p.method,
            p.linear,
            p.key_algorithm,
            p.columns
                .iter()
                .map(|c| c.to_ascii_lowercase())
                .collect::<Vec<_>>(),
            p.partitions.iter().map(norm_def).collect::<Vec<_>>(),
        )
    };
    if norm(a) == norm(b) {
        Ok(())
    } else {
        Err(format!("layouts differ:\n  {:?}\n  {:?}", norm(a), norm(b)))
    }
}

/// id → partition index, as the server stores the rows.
fn server_placement(db: &MariaDb, table: &str, layout: &Partitioning) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for (i, p) in layout.partitions.iter().enumerate() {
        for row in db
            .query(&format!(
                "SELECT id FROM d.{table} PARTITION (`{}`)",
                p.name
            ))
            .expect("select partition")
        {
            let id: i64 = row[0].parse().expect("id");
            assert!(
                out.insert(id, i).is_none(),
                "{table}: id {id} in two partitions"
            );
        }
    }
    out
}

fn row_id(row: &[Value]) -> i64 {
    match row.first() {
        Some(Value::Int(i)) => *i,
        other => panic!("row without an int id: {other:?}"),
    }
}

/// Checks every captured row of `table` against the server; returns mismatch descriptions.
fn check_placement(
    db: &MariaDb,
    table: &str,
    schema: &TableSchema,
    layout: &Partitioning,
    rows: &BTreeMap<i64, Vec<Value>>,
    context: &str,
) -> Vec<String> {
    let server = server_placement(db, table, layout);
    let mut bad = Vec::new();
    for (id, want) in &server {
        let Some(row) = rows.get(id) else {
            bad.push(format!(
                "{table}{context}: server row id {id} was not captured"
            ));
            continue;
        };
        match layout.partition_of(schema, row) {
            Ok(got) if got == *want => {}
            Ok(got) => bad.push(format!(
                "{table}{context}: row {row:?} placed in {} ({got}), server has it in {} ({want})",
                layout.partitions[got].name, layout.partitions[*want].name
            )),
            Err(e) => bad.push(format!(
                "{table}{context}: row {row:?}: error {e} (server: {})",
                layout.partitions[*want].name
            )),
        }
    }
    bad
}

async fn capture_rows(
    db: &MariaDb,
    history: SchemaHistory,
) -> (SchemaHistory, BTreeMap<String, BTreeMap<i64, Vec<Value>>>) {
    let cfg = ReaderConfig::new(db.url(), 411, history.snapshot_pos.clone());
    let mut c = Capture::new(BinlogReader::new(cfg), history);
    let mut by_table: BTreeMap<u64, Vec<Vec<Value>>> = BTreeMap::new();
    let fut = async {
        loop {
            let rows = match c.next().await.expect("capture") {
                Captured::Rows { rows, .. }
                | Captured::Chunk { rows, .. }
                | Captured::CommitStaged { rows, .. } => rows,
                Captured::Ddl(d) if d.query.contains("marker") => break,
                _ => continue,
            };
            for r in rows {
                if let Some(after) = r.after {
                    by_table.entry(r.table_id.0).or_default().push(after);
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(300), fut)
        .await
        .expect("capture timed out");
    let history = c.history;
    let mut out = BTreeMap::new();
    for (id, rows) in by_table {
        let Some(s) = history.table_by_id_at(sluice_types::TableId(id), history.head) else {
            continue;
        };
        let m: BTreeMap<i64, Vec<Value>> = rows.into_iter().map(|r| (row_id(&r), r)).collect();
        out.insert(s.name.clone(), m);
    }
    (history, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_of_matches_the_server() {
    let db = MariaDb::start().expect("mariadb");
    let tables = tables();
    let mut sql = String::from("CREATE DATABASE d;\n");
    for t in &tables {
        sql.push_str(&t.ddl);
        sql.push_str(";\n");
    }
    db.exec(&sql).expect("create tables");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let mut sql = String::from("SET time_zone = '+00:00';\n");
    for t in &tables {
        let values: Vec<String> = t
            .rows
            .iter()
            .enumerate()
            .map(|(i, v)| format!("({i}, {v})"))
            .collect();
        sql.push_str(&format!(
            "INSERT INTO d.{} VALUES {};\n",
            t.name,
            values.join(", ")
        ));
    }
    sql.push_str("CREATE TABLE d.marker (id INT PRIMARY KEY);\n");
    db.exec(&sql).expect("insert rows");
    let (history, captured) = capture_rows(&db, history).await;

    let mut failures = Vec::new();
    let mut checked = 0usize;
    let mut schemas = BTreeMap::new();
    for t in &tables {
        let layout = layout_from_server(&db, t.name)
            .unwrap_or_else(|| panic!("{}: no partition options in SHOW CREATE", t.name));
        // The server's partition list (names and order) is the parsed one.
        let names: Vec<String> = db
            .query(&format!(
                "SELECT PARTITION_NAME FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = '{}' \
                 AND (SUBPARTITION_ORDINAL_POSITION IS NULL OR SUBPARTITION_ORDINAL_POSITION = 1) ORDER BY PARTITION_ORDINAL_POSITION",
                t.name
            ))
            .expect("partitions")
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let parsed: Vec<String> = layout.partitions.iter().map(|p| p.name.clone()).collect();
        if names != parsed {
            failures.push(format!(
                "{}: server partitions {names:?}, parsed {parsed:?}",
                t.name
            ));
        }
        // The DDL as written parses to the same layout (constant bounds such as TO_DAYS('…')
        // evaluated as the server does).
        match split_partition_options(&t.ddl) {
            (_, Some(text)) => match Partitioning::parse(&text) {
                Ok(ddl_layout) => {
                    if let Err(e) = same_layout(&ddl_layout, &layout) {
                        failures.push(format!("{}: DDL vs SHOW CREATE: {e}", t.name));
                    }
                }
                Err(e) => failures.push(format!("{}: DDL partition text {text:?}: {e}", t.name)),
            },
            (_, None) => {
                failures.push(format!("{}: no partition options found in the DDL", t.name))
            }
        }
        let mut schema = history
            .table_at("d", t.name, history.head)
            .unwrap_or_else(|| panic!("{} in history", t.name))
            .clone();
        schema.partitioning = Some(layout.clone());
        let rows = captured.get(t.name).cloned().unwrap_or_default();
        let count: usize = db
            .query_one(&format!("SELECT COUNT(*) FROM d.{}", t.name))
            .expect("count")
            .parse()
            .expect("n");
        if rows.len() != count || count < t.rows.len() {
            failures.push(format!(
                "{}: captured {} rows, the table has {count}, inserted {}",
                t.name,
                rows.len(),
                t.rows.len()
            ));
        }
        checked += rows.len();
        failures.extend(check_placement(&db, t.name, &schema, &layout, &rows, ""));
        schemas.insert(t.name, (schema, rows));
    }
    eprintln!("checked {checked} rows of {} tables", tables.len());

    // ALTER operations: apply_alter on the previous layout must give the server's new layout,
    // and rows must still be placed where the server moved them.
    let mut ex_sql = String::from("CREATE TABLE d.ex (id INT NOT NULL, a INT);");
    ex_sql.push_str("INSERT INTO d.ex SELECT id, a FROM d.r_int PARTITION (p2) WHERE id < 0;");
    db.exec(&ex_sql).expect("exchange table");
    let alters = [
        ("r_int", "ALTER TABLE d.r_int REORGANIZE PARTITION p4 INTO (PARTITION p4 VALUES LESS THAN (2000), PARTITION p5 VALUES LESS THAN MAXVALUE)"),
        ("r_int", "ALTER TABLE d.r_int ANALYZE PARTITION p1, p2"),
        ("r_int", "ALTER TABLE d.r_int EXCHANGE PARTITION p2 WITH TABLE d.ex"),
        ("r_int", "ALTER TABLE d.r_int DROP PARTITION p1"),
        ("r_int", "ALTER TABLE d.r_int TRUNCATE PARTITION p0"),
        ("r_int", "alter table d.r_int\n  reorganize partition p2, p3 into (partition q2 values less than (50), partition q3 values less than (1000))"),
        ("r_year", "ALTER TABLE d.r_year CONVERT PARTITION p3 TO TABLE d.r_year_p3"),
        ("r_year", "ALTER TABLE d.r_year CONVERT TABLE d.r_year_p3 TO PARTITION p9 VALUES LESS THAN MAXVALUE"),
        ("r_year", "ALTER TABLE d.r_year ADD PARTITION (PARTITION bad VALUES LESS THAN (1))"),
        ("h_neg", "ALTER TABLE d.h_neg ADD PARTITION PARTITIONS 2"),
        ("h_neg", "ALTER TABLE d.h_neg COALESCE PARTITION 3"),
        ("h_neg", "ALTER TABLE d.h_neg OPTIMIZE PARTITION p0"),
        ("h_neg", "ALTER TABLE d.h_neg REPAIR PARTITION p1"),
        ("h_neg", "ALTER TABLE d.h_neg CHECK PARTITION ALL"),
        ("h_neg", "ALTER TABLE d.h_neg REBUILD PARTITION p0"),
        ("h_neg", "ALTER TABLE d.h_neg REORGANIZE PARTITION"),
        ("k_int", "ALTER TABLE d.k_int ADD PARTITION PARTITIONS 3"),
        ("k_int", "ALTER TABLE d.k_int COALESCE PARTITION 1"),
        ("lk_int", "ALTER TABLE d.lk_int ADD PARTITION (PARTITION x, PARTITION y)"),
        // Values no row has: MariaDB does not move rows out of DEFAULT when a LIST partition is
        // added (CHECK TABLE then reports them misplaced).
        ("l_int", "ALTER TABLE d.l_int ADD PARTITION (PARTITION p9 VALUES IN (100, 200))"),
        ("l_int", "ALTER TABLE d.l_int REORGANIZE PARTITION p0, p1 INTO (PARTITION q VALUES IN (1, 3, 5, NULL, -1, -2, 0, 300))"),
        ("lc_latin1", "ALTER TABLE d.lc_latin1 DROP PARTITION p1"),
        ("r_expr", "ALTER TABLE d.r_expr PARTITION BY HASH (a) PARTITIONS 4"),
        ("r_bigu", "ALTER TABLE d.r_bigu PARTITION BY LINEAR KEY (u) PARTITIONS 3"),
        ("h_small", "ALTER TABLE d.h_small REMOVE PARTITIONING"),
    ];
    let mut current: BTreeMap<&str, Option<Partitioning>> = BTreeMap::new();
    for (table, stmt) in alters {
        let before = current
            .entry(table)
            .or_insert_with(|| schemas.get(table).and_then(|(s, _)| s.partitioning.clone()))
            .clone();
        let refused = db.exec(stmt).is_err();
        let (rest, op) = split_partition_options(stmt);
        let Some(op) = op else {
            failures.push(format!("{stmt}: no partition operation found"));
            continue;
        };
        if rest != format!("ALTER TABLE d.{table}") && rest != format!("alter table d.{table}") {
            failures.push(format!("{stmt}: statement left {rest:?}"));
        }
        let ours = Partitioning::apply_alter(before.as_ref(), &op);
        let server = layout_from_server(&db, table);
        if refused {
            // The server refused the operation: the layout must be unchanged.
            if server != before {
                failures.push(format!("{stmt}: refused, yet the layout changed"));
            }
            continue;
        }
        match (&ours, &server) {
            (Ok(None), None) => {}
            (Ok(Some(a)), Some(b)) => {
                if let Err(e) = same_layout(a, b) {
                    failures.push(format!("{stmt}: {e}"));
                }
            }
            (ours, server) => failures.push(format!(
                "{stmt}: apply_alter gives {ours:?}, server has {server:?}"
            )),
        }
        if let (Some(layout), Some((schema, rows))) = (&server, schemas.get(table)) {
            let mut schema = schema.clone();
            schema.partitioning = Some(layout.clone());
            failures.extend(check_placement(
                &db,
                table,
                &schema,
                layout,
                rows,
                &format!(" after `{stmt}`"),
            ));
        }
        current.insert(table, server);
    }

    for f in &failures {
        eprintln!("MISMATCH {f}");
    }
    assert!(
        failures.is_empty(),
        "{} mismatches (first: {})",
        failures.len(),
        failures[0]
    );
}

/// Every function the evaluator supports, against the server's own value of it on each row:
/// `LIST (f) (PARTITION a VALUES IN (<server value>), PARTITION b DEFAULT)` must place the row
/// in `a`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluator_matches_the_server() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.f (id INT NOT NULL, d DATE, dt DATETIME(6), ts TIMESTAMP(3) NULL DEFAULT NULL, \
         tm TIME(2), a INT, u BIGINT UNSIGNED, y YEAR)",
    )
    .expect("create");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let mut rng = Rng(77);
    let mut rows: Vec<String> = Vec::new();
    // Turns of the year (week numbers), leap days, extremes.
    for y in [1000, 1999, 2000, 2004, 2017, 2019, 2020, 2021, 2100, 9999] {
        for (m, d) in [
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
            (1, 5),
            (1, 6),
            (1, 7),
            (2, 28),
            (2, 29),
            (3, 1),
            (12, 25),
            (12, 28),
            (12, 29),
            (12, 30),
            (12, 31),
        ] {
            if m == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) {
                continue;
            }
            rows.push(format!("'{y:04}-{m:02}-{d:02}', '{y:04}-{m:02}-{d:02} 23:59:59.999999', NULL, '-838:59:59', {}, 18446744073709551615, 2155", -y));
        }
    }
    rows.push("NULL, NULL, NULL, NULL, NULL, NULL, NULL".into());
    rows.push(
        "'0000-00-00', '0000-00-00 00:00:00', '1970-01-01 00:00:01', '00:00:00', 0, 0, 0".into(),
    );
    rows.push("'2020-00-10', '2020-05-00 10:00:00', '2038-01-19 03:14:07.999', '838:59:59.99', 2147483647, 9223372036854775808, 1901".into());
    while rows.len() < 400 {
        rows.push(format!(
            "{}, {}, FROM_UNIXTIME({}.{:03}), '{}{:02}:{:02}:{:02}.{:02}', {}, {}, {}",
            random_date(&mut rng),
            random_datetime(&mut rng, true),
            rng.range(1, 2_147_483_647),
            rng.range(0, 999),
            if rng.range(0, 2) == 0 { "-" } else { "" },
            rng.range(0, 838),
            rng.range(0, 59),
            rng.range(0, 59),
            rng.range(0, 99),
            rng.range(-2147483648, 2147483647),
            rng.next() << 33 ^ rng.next(),
            1901 + rng.range(0, 254)
        ));
    }
    let values: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, v)| format!("({i}, {v})"))
        .collect();
    db.exec(&format!(
        "SET time_zone = '+00:00'; SET sql_mode = ''; INSERT INTO d.f VALUES {}; CREATE TABLE d.marker (id INT PRIMARY KEY);",
        values.join(", ")
    ))
    .expect("insert");
    let (history, captured) = capture_rows(&db, history).await;
    let schema = history.table_at("d", "f", history.head).expect("f").clone();
    let rows = captured.get("f").cloned().unwrap_or_default();
    assert_eq!(rows.len(), 400);

    let functions = [
        "YEAR(d)",
        "MONTH(d)",
        "DAY(d)",
        "DAYOFMONTH(dt)",
        "QUARTER(d)",
        "TO_DAYS(d)",
        "TO_DAYS(dt)",
        "TO_SECONDS(dt)",
        "TO_SECONDS(d)",
        "DAYOFYEAR(d)",
        "DAYOFWEEK(d)",
        "WEEKDAY(dt)",
        "YEARWEEK(d)",
        "YEARWEEK(dt)",
        "HOUR(dt)",
        "MINUTE(dt)",
        "SECOND(dt)",
        "MICROSECOND(dt)",
        "HOUR(tm)",
        "MINUTE(tm)",
        "SECOND(tm)",
        "MICROSECOND(tm)",
        "TIME_TO_SEC(tm)",
        "TIME_TO_SEC(dt)",
        "UNIX_TIMESTAMP(ts)",
        "DATEDIFF(d, '2000-01-01')",
        "DATEDIFF(dt, d)",
        "EXTRACT(YEAR FROM d)",
        "EXTRACT(QUARTER FROM d)",
        "EXTRACT(MONTH FROM dt)",
        "EXTRACT(DAY FROM dt)",
        "EXTRACT(YEAR_MONTH FROM dt)",
        "EXTRACT(DAY_HOUR FROM dt)",
        "EXTRACT(DAY_MINUTE FROM dt)",
        "EXTRACT(DAY_SECOND FROM dt)",
        "EXTRACT(HOUR_MINUTE FROM dt)",
        "EXTRACT(HOUR_SECOND FROM dt)",
        "EXTRACT(MINUTE_SECOND FROM dt)",
        "EXTRACT(MICROSECOND FROM dt)",
        "EXTRACT(HOUR FROM dt)",
        "ABS(a)",
        "CEILING(a)",
        "FLOOR(a)",
        "a DIV 7",
        "a MOD 7",
        "a % -7",
        "-a * 3 + 2",
        "u DIV 3",
        "u MOD 1000",
        "MOD(a, 5)",
        "ABS(a) DIV 2",
        "y",
        "y * 2 + 1",
        "(a + 5) * 2 - (a DIV 2)",
        "TO_DAYS(d) - TO_DAYS('2000-01-01')",
    ];
    let mut failures = Vec::new();
    for f in functions {
        let server: BTreeMap<i64, String> = db
            // FLOOR: the integer value the server partitions by (TIME_TO_SEC and UNIX_TIMESTAMP
            // of fractional values are DECIMAL in a SELECT).
            .query(&format!(
                "SET time_zone = '+00:00'; SELECT id, IFNULL(FLOOR({f}), 'NULL') FROM d.f"
            ))
            .expect("query")
            .into_iter()
            .map(|r| (r[0].parse().expect("id"), r[1].clone()))
            .collect();
        for (id, v) in &server {
            let Some(row) = rows.get(id) else {
                failures.push(format!("{f}: row {id} not captured"));
                continue;
            };
            let clause = format!(
                "PARTITION BY LIST ({f}) (PARTITION a VALUES IN ({v}), PARTITION b DEFAULT)"
            );
            let layout = match Partitioning::parse(&clause) {
                Ok(l) => l,
                Err(e) => {
                    failures.push(format!("{clause}: {e}"));
                    continue;
                }
            };
            match layout.partition_of(&schema, row) {
                Ok(0) => {}
                Ok(_) => failures.push(format!(
                    "{f} of {row:?}: Sluice differs from the server's {v}"
                )),
                Err(e) => failures.push(format!("{f} of {row:?}: {e} (server: {v})")),
            }
        }
    }
    // Bounds evaluate like values: RANGE with a NULL expression goes to the first partition.
    let l = Partitioning::parse("PARTITION BY RANGE (TO_DAYS(d)) (PARTITION a VALUES LESS THAN (0), PARTITION b VALUES LESS THAN MAXVALUE)").expect("parse");
    for row in rows.values() {
        if let (Some(Value::Null), Ok(i)) = (row.get(1), l.partition_of(&schema, row)) {
            assert_eq!(i, 0);
        }
    }
    for f in failures.iter().take(50) {
        eprintln!("MISMATCH {f}");
    }
    assert!(
        failures.is_empty(),
        "{} mismatches (first: {})",
        failures.len(),
        failures[0]
    );
}
