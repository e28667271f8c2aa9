//! Unit tests of parsing, evaluation, collations, KEY hashing and placement (no server).

use crate::collation::*;
use crate::eval::*;
use crate::key_hash::*;
use crate::lex::*;
use crate::parse::*;
use crate::*;
use sluice_types::{ColumnDef, ColumnType, TableId, TableSchema, Value};
use std::cmp::Ordering;

fn col(name: &str, ty: ColumnType, sql_type: &str) -> ColumnDef {
    ColumnDef {
        name: name.to_string(),
        ty,
        sql_type: sql_type.to_string(),
        unsigned: sql_type.contains("unsigned"),
        nullable: true,
        charset: None,
        collation: None,
        elements: Vec::new(),
        decimals: 0,
        length: 0,
        generated: None,
    }
}

fn schema(columns: Vec<ColumnDef>) -> TableSchema {
    TableSchema {
        table_id: TableId(1),
        database: "d".into(),
        name: "t".into(),
        columns,
        key_columns: vec![0],
        unique_keys: Vec::new(),
        version: 0,
        partitioning: None,
    }
}

fn p(clause: &str) -> Partitioning {
    match Partitioning::parse(clause) {
        Ok(p) => p,
        Err(e) => panic!("parse {clause:?}: {e}"),
    }
}

fn names(p: &Partitioning) -> Vec<&str> {
    p.partitions.iter().map(|d| d.name.as_str()).collect()
}

fn split(sql: &str) -> (String, Option<String>) {
    split_partition_options(sql)
}

// --- splitting -----------------------------------------------------------------------

#[test]
fn split_create_and_alter() {
    let (s, t) =
        split("CREATE TABLE t (id INT) ENGINE=InnoDB\n PARTITION BY HASH (id)\nPARTITIONS 4");
    assert_eq!(s, "CREATE TABLE t (id INT) ENGINE=InnoDB");
    assert_eq!(t.as_deref(), Some("PARTITION BY HASH (id)\nPARTITIONS 4"));
    let (s, t) = split(
        "create table t (a int) partition\n\tby range(a) (partition p0 values less than (1))",
    );
    assert_eq!(s, "create table t (a int)");
    assert!(t.is_some_and(|t| t.starts_with("partition\n\tby range")));
    let (s, t) = split("ALTER TABLE t ENGINE=InnoDB, PARTITION BY KEY() PARTITIONS 2;");
    assert_eq!(s, "ALTER TABLE t ENGINE=InnoDB");
    assert_eq!(t.as_deref(), Some("PARTITION BY KEY() PARTITIONS 2"));
    for op in [
        "ADD PARTITION (PARTITION p3 VALUES LESS THAN (30))",
        "DROP PARTITION p0, p1",
        "COALESCE PARTITION 2",
        "REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))",
        "TRUNCATE PARTITION ALL",
        "EXCHANGE PARTITION p0 WITH TABLE t2",
        "ANALYZE PARTITION p0",
        "CHECK PARTITION p0",
        "OPTIMIZE PARTITION p0",
        "REBUILD PARTITION p0",
        "REPAIR PARTITION p0",
        "REMOVE PARTITIONING",
        "DISCARD PARTITION p0 TABLESPACE",
        "IMPORT PARTITION p0 TABLESPACE",
        "CONVERT PARTITION p0 TO TABLE t0",
        "CONVERT TABLE t0 TO PARTITION p0 VALUES LESS THAN (10)",
    ] {
        let (s, t) = split(&format!("ALTER TABLE `db`.`t` {op}"));
        assert_eq!(s, "ALTER TABLE `db`.`t`", "{op}");
        assert_eq!(t.as_deref(), Some(op));
    }
    // CREATE … SELECT keeps the query.
    let (s, t) = split("CREATE TABLE t (a INT) PARTITION BY HASH(a) PARTITIONS 2 SELECT 1 AS a");
    assert_eq!(s, "CREATE TABLE t (a INT) SELECT 1 AS a");
    assert_eq!(t.as_deref(), Some("PARTITION BY HASH(a) PARTITIONS 2"));
}

#[test]
fn split_is_not_fooled() {
    for sql in [
        "CREATE TABLE t (`partition` INT, `by` INT)",
        "CREATE TABLE t (a INT COMMENT 'partition by x') COMMENT='PARTITION BY HASH(a)'",
        "CREATE TABLE t (a INT) COMMENT=\"partition by hash(a)\"",
        "CREATE TABLE t (a INT) /* PARTITION BY HASH(a) */",
        "CREATE TABLE t (a INT) -- PARTITION BY HASH(a)\n ENGINE=InnoDB",
        "CREATE TABLE t (a INT) # PARTITION BY HASH(a)\n",
        "CREATE TABLE t (a INT CHECK (a > 0), CONSTRAINT c CHECK (a < 9))",
        "CREATE TABLE t AS SELECT ROW_NUMBER() OVER (PARTITION BY a) AS n FROM s",
        "ALTER TABLE t ADD COLUMN `partition` INT, DROP COLUMN b",
        "ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0)",
        "ALTER TABLE t COMMENT 'drop partition p0', CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE `partition` ADD COLUMN x INT",
        "ALTER TABLE t ADD COLUMN c INT DEFAULT 'it''s -- partition by'",
        "INSERT INTO t VALUES (1) PARTITION BY",
        "CREATE TABLE t (a INT) COMMENT 'unterminated PARTITION BY HASH(a)",
        "",
    ] {
        let (s, t) = split(sql);
        assert_eq!(t, None, "{sql}");
        assert_eq!(s, sql);
    }
    // A comment before the partition options and inside them.
    let (s, t) = split("CREATE TABLE t (a INT) /* c */ PARTITION /* x */ BY HASH(a)");
    assert_eq!(s, "CREATE TABLE t (a INT) /* c */");
    assert_eq!(t.as_deref(), Some("PARTITION /* x */ BY HASH(a)"));
    assert_eq!(
        p("PARTITION /* x */ BY HASH(a) -- c\n PARTITIONS 3")
            .partitions
            .len(),
        3
    );
}

// --- parsing -------------------------------------------------------------------------

#[test]
fn parse_show_create_output() {
    let r = p(" PARTITION BY RANGE (`id`)\n(PARTITION `p0` VALUES LESS THAN (10) ENGINE = InnoDB,\n PARTITION `p1` VALUES LESS THAN (20) COMMENT = 'a, (b)' ENGINE = InnoDB,\n PARTITION `p2` VALUES LESS THAN MAXVALUE ENGINE = InnoDB)");
    assert_eq!(r.method, PartitionMethod::Range);
    assert_eq!(r.expr, "`id`");
    assert_eq!(names(&r), ["p0", "p1", "p2"]);
    assert_eq!(r.partitions[1].less_than, [BoundValue::Int(20)]);
    assert_eq!(r.partitions[2].less_than, [BoundValue::MaxValue]);
    let r = p("PARTITION BY RANGE (`a`) (PARTITION p0 VALUES LESS THAN (-5), PARTITION p1 VALUES LESS THAN (MAXVALUE))");
    assert_eq!(r.partitions[0].less_than, [BoundValue::Int(-5)]);
    assert_eq!(r.partitions[1].less_than, [BoundValue::MaxValue]);

    let rc = p(" PARTITION BY RANGE  COLUMNS(`a`,`b`)\n(PARTITION `p0` VALUES LESS THAN (10,'m') ENGINE = InnoDB,\n PARTITION `p1` VALUES LESS THAN (20,MAXVALUE) ENGINE = InnoDB,\n PARTITION `p2` VALUES LESS THAN (MAXVALUE,MAXVALUE) ENGINE = InnoDB)");
    assert_eq!(rc.method, PartitionMethod::RangeColumns);
    assert_eq!(rc.columns, ["a", "b"]);
    assert_eq!(
        rc.partitions[0].less_than,
        [BoundValue::Int(10), BoundValue::Text("m".into())]
    );

    let l = p(" PARTITION BY LIST (`a`)\n(PARTITION `p0` VALUES IN (NULL,1,2) ENGINE = InnoDB,\n PARTITION `p1` VALUES IN (3) ENGINE = InnoDB,\n PARTITION `pd` DEFAULT ENGINE = InnoDB)");
    assert_eq!(
        l.partitions[0].values_in,
        [
            vec![BoundValue::Null],
            vec![BoundValue::Int(1)],
            vec![BoundValue::Int(2)]
        ]
    );
    assert!(l.partitions[2].default_list);

    let lc = p(" PARTITION BY LIST  COLUMNS(`a`,`b`)\n(PARTITION `p0` VALUES IN ((1,'a'),(2,'b')) ENGINE = InnoDB,\n PARTITION `p1` VALUES IN ((NULL,'c')) ENGINE = InnoDB)");
    assert_eq!(
        lc.partitions[1].values_in,
        [vec![BoundValue::Null, BoundValue::Text("c".into())]]
    );
    let lc1 = p("PARTITION BY LIST COLUMNS(s) (PARTITION a VALUES IN ('x', _utf8mb4'y'), PARTITION b VALUES IN (('z')))");
    assert_eq!(
        lc1.partitions[0].values_in,
        [
            vec![BoundValue::Text("x".into())],
            vec![BoundValue::Text("y".into())]
        ]
    );
    assert_eq!(
        lc1.partitions[1].values_in,
        [vec![BoundValue::Text("z".into())]]
    );

    let h = p(" PARTITION BY HASH (`a`)\nPARTITIONS 3");
    assert_eq!(
        (h.method, h.linear, names(&h)),
        (PartitionMethod::Hash, false, vec!["p0", "p1", "p2"])
    );
    let k = p(" PARTITION BY LINEAR KEY ALGORITHM = 1 (`a`)\nPARTITIONS 5");
    assert_eq!(
        (k.method, k.linear, k.key_algorithm, k.columns.clone()),
        (PartitionMethod::Key, true, 1, vec!["a".to_string()])
    );
    assert_eq!(k.partitions.len(), 5);
    let k0 = p(" PARTITION BY KEY ()\nPARTITIONS 4");
    assert!(k0.columns.is_empty());
    assert_eq!(k0.key_algorithm, 2);
    assert_eq!(names(&p("PARTITION BY HASH(a)")), ["p0"]);
    assert_eq!(
        names(&p("PARTITION BY KEY(a) (PARTITION x, PARTITION y)")),
        ["x", "y"]
    );

    // Subpartitions are skipped.
    let s = p(" PARTITION BY RANGE (`a`)\nSUBPARTITION BY KEY (`b`)\n(PARTITION `p0` VALUES LESS THAN (10)\n (SUBPARTITION `s0` ENGINE = InnoDB,\n  SUBPARTITION `s1` ENGINE = InnoDB),\n PARTITION `p1` VALUES LESS THAN MAXVALUE\n (SUBPARTITION `s2` ENGINE = InnoDB,\n  SUBPARTITION `s3` ENGINE = InnoDB))");
    assert_eq!(names(&s), ["p0", "p1"]);
    let s = p("PARTITION BY RANGE (`a`)\nSUBPARTITION BY LINEAR HASH (`b`)\nSUBPARTITIONS 2\n(PARTITION `p0` VALUES LESS THAN (10) ENGINE = InnoDB,\n PARTITION `p1` VALUES LESS THAN MAXVALUE ENGINE = InnoDB)");
    assert_eq!(names(&s), ["p0", "p1"]);
}

#[test]
fn parse_ddl_forms() {
    let r = p("partition by range (to_days(d)) (partition p0 values less than (to_days('2020-01-01')) engine innodb data directory = '/x' comment 'c', partition p1 values less than maxvalue)");
    assert_eq!(r.expr, "to_days(d)");
    assert_eq!(r.partitions[0].less_than, [BoundValue::Int(737790)]);
    let r = p("PARTITION BY RANGE (YEAR(d)) (PARTITION p0 VALUES LESS THAN (1990 + 10), PARTITION p1 VALUES LESS THAN (-(-3000)))");
    assert_eq!(r.partitions[0].less_than, [BoundValue::Int(2000)]);
    assert_eq!(r.partitions[1].less_than, [BoundValue::Int(3000)]);
    let r = p("PARTITION BY RANGE COLUMNS(d) (PARTITION p0 VALUES LESS THAN ('2020-01-01'), PARTITION p1 VALUES LESS THAN (MAXVALUE))");
    assert_eq!(
        r.partitions[0].less_than,
        [BoundValue::Text("2020-01-01".into())]
    );
    let st = p(
        "PARTITION BY SYSTEM_TIME INTERVAL 1 MONTH STARTS '2020-01-01 00:00:00' AUTO PARTITIONS 3",
    );
    assert_eq!(
        (st.method, names(&st)),
        (PartitionMethod::SystemTime, vec!["p0", "p1", "pn"])
    );
    let st = p("PARTITION BY SYSTEM_TIME (PARTITION p0 HISTORY, PARTITION pn CURRENT)");
    assert_eq!(names(&st), ["p0", "pn"]);
    assert_eq!(
        p("PARTITION BY KEY ALGORITHM=2 (a, `b c`) PARTITIONS 2;").columns,
        ["a", "b c"]
    );
}

#[test]
fn parse_errors() {
    for bad in [
        "",
        "PARTITION BY",
        "PARTITION BY FOO(a)",
        "PARTITION BY HASH a",
        "PARTITION BY HASH (a",
        "PARTITION BY HASH (a) PARTITIONS 0",
        "PARTITION BY HASH (a) PARTITIONS x",
        "PARTITION BY RANGE (a)",
        "PARTITION BY LINEAR RANGE (a) (PARTITION p VALUES LESS THAN (1))",
        "PARTITION BY RANGE (a) (PARTITION p VALUES IN (1))",
        "PARTITION BY LIST (a) (PARTITION p VALUES LESS THAN (1))",
        "PARTITION BY RANGE (a) (PARTITION p)",
        "PARTITION BY RANGE COLUMNS(a, b) (PARTITION p VALUES LESS THAN (1))",
        "PARTITION BY LIST COLUMNS(a, b) (PARTITION p VALUES IN ((1)))",
        "PARTITION BY KEY ALGORITHM=3 (a)",
        "PARTITION BY HASH (a / 2)",
        "PARTITION BY HASH (a) PARTITIONS 2 garbage",
        "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN ('x",
        "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (1.5))",
        "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (99999999999999999999999999))",
        "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (b))",
        "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (1)",
    ] {
        match Partitioning::parse(bad) {
            Err(e) => assert!(!e.0.is_empty()),
            Ok(p) => panic!("{bad:?} parsed: {p:?}"),
        }
    }
    // Hostile nesting is an error, not a stack overflow.
    let deep = format!(
        "PARTITION BY HASH ({}a{})",
        "(".repeat(10_000),
        ")".repeat(10_000)
    );
    assert!(Partitioning::parse(&deep).is_err());
    let neg = format!("PARTITION BY HASH ({}a)", "-".repeat(10_000));
    assert!(Partitioning::parse(&neg).is_err());
    let plus = format!("PARTITION BY HASH ({}a)", "+".repeat(100_000));
    // Unary plus is a no-op: parsed without recursion.
    assert!(Partitioning::parse(&plus).is_ok());
    let long = format!("PARTITION BY HASH (a{})", "+1".repeat(100_000));
    assert!(Partitioning::parse(&long).is_err());
    let bound = format!(
        "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (1{}))",
        "*1".repeat(100_000)
    );
    assert!(Partitioning::parse(&bound).is_err());
}

// --- ALTER ---------------------------------------------------------------------------

fn alter(cur: &Partitioning, op: &str) -> Partitioning {
    match Partitioning::apply_alter(Some(cur), op) {
        Ok(Some(p)) => p,
        other => panic!("{op}: {other:?}"),
    }
}

#[test]
fn alter_operations() {
    let r = p("PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))");
    let added = alter(&r, "ADD PARTITION (PARTITION p2 VALUES LESS THAN (30), PARTITION p3 VALUES LESS THAN MAXVALUE)");
    assert_eq!(names(&added), ["p0", "p1", "p2", "p3"]);
    assert_eq!(added.partitions[2].less_than, [BoundValue::Int(30)]);
    assert_eq!(names(&alter(&added, "DROP PARTITION p0, P2")), ["p1", "p3"]);
    assert!(Partitioning::apply_alter(Some(&added), "DROP PARTITION nope").is_err());
    assert_eq!(
        names(&alter(&added, "DROP PARTITION IF EXISTS nope, p1")),
        ["p0", "p2", "p3"]
    );
    assert!(Partitioning::apply_alter(
        Some(&added),
        "ADD PARTITION (PARTITION p1 VALUES LESS THAN (40))"
    )
    .is_err());
    assert_eq!(
        alter(
            &added,
            "ADD PARTITION IF NOT EXISTS (PARTITION p1 VALUES LESS THAN (40))"
        ),
        added
    );
    let re = alter(
        &added,
        "REORGANIZE PARTITION p1, p2 INTO (PARTITION a VALUES LESS THAN (15), PARTITION b VALUES LESS THAN (25), PARTITION c VALUES LESS THAN (30))",
    );
    assert_eq!(names(&re), ["p0", "a", "b", "c", "p3"]);
    assert_eq!(re.partitions[2].less_than, [BoundValue::Int(25)]);
    for same in [
        "TRUNCATE PARTITION p0",
        "TRUNCATE PARTITION ALL",
        "EXCHANGE PARTITION p0 WITH TABLE t2 WITHOUT VALIDATION",
        "ANALYZE PARTITION p0, p1",
        "CHECK PARTITION ALL",
        "OPTIMIZE PARTITION p0",
        "REBUILD PARTITION p0",
        "REPAIR PARTITION p0",
        "DISCARD PARTITION p0 TABLESPACE",
        "IMPORT PARTITION p0 TABLESPACE",
    ] {
        assert_eq!(alter(&added, same), added, "{same}");
    }
    assert_eq!(
        names(&alter(&added, "CONVERT PARTITION p0 TO TABLE t0")),
        ["p1", "p2", "p3"]
    );
    let conv = alter(
        &r,
        "CONVERT TABLE db.t9 TO PARTITION p9 VALUES LESS THAN (90)",
    );
    assert_eq!(names(&conv), ["p0", "p1", "p9"]);
    assert_eq!(conv.partitions[2].less_than, [BoundValue::Int(90)]);
    assert_eq!(
        Partitioning::apply_alter(Some(&r), "REMOVE PARTITIONING"),
        Ok(None)
    );
    let h = alter(&r, "PARTITION BY HASH(a) PARTITIONS 3");
    assert_eq!((h.method, h.partitions.len()), (PartitionMethod::Hash, 3));

    // HASH/KEY.
    let k = p("PARTITION BY KEY(a) PARTITIONS 4");
    assert_eq!(
        names(&alter(&k, "ADD PARTITION PARTITIONS 2")),
        ["p0", "p1", "p2", "p3", "p4", "p5"]
    );
    assert_eq!(
        names(&alter(&k, "ADD PARTITION (PARTITION x)")),
        ["p0", "p1", "p2", "p3", "x"]
    );
    assert_eq!(names(&alter(&k, "COALESCE PARTITION 3")), ["p0"]);
    assert!(Partitioning::apply_alter(Some(&k), "COALESCE PARTITION 4").is_err());
    assert!(Partitioning::apply_alter(Some(&r), "COALESCE PARTITION 1").is_err());
    // The server rebuilds HASH/KEY with one partition (MariaDB 10.11).
    assert_eq!(names(&alter(&k, "REORGANIZE PARTITION")), ["p0"]);
    assert!(Partitioning::apply_alter(Some(&r), "REORGANIZE PARTITION").is_err());
    assert!(Partitioning::apply_alter(Some(&r), "ADD PARTITION PARTITIONS 2").is_err());

    // LIST.
    let l = p("PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1, 2))");
    let l2 = alter(
        &l,
        "ADD PARTITION (PARTITION p1 VALUES IN (NULL, 3), PARTITION pd DEFAULT)",
    );
    assert_eq!(
        l2.partitions[1].values_in,
        [vec![BoundValue::Null], vec![BoundValue::Int(3)]]
    );
    assert!(l2.partitions[2].default_list);

    // Not partitioned / unknown operations / unsupported layouts.
    assert!(Partitioning::apply_alter(None, "DROP PARTITION p0").is_err());
    assert!(Partitioning::apply_alter(None, "TRUNCATE PARTITION p0").is_err());
    assert_eq!(
        Partitioning::apply_alter(None, "REMOVE PARTITIONING"),
        Ok(None)
    );
    assert!(Partitioning::apply_alter(None, "PARTITION BY HASH(a)").is_ok_and(|p| p.is_some()));
    assert!(Partitioning::apply_alter(Some(&r), "FROB PARTITION p0").is_err());
    assert!(Partitioning::apply_alter(Some(&r), "").is_err());
    let u = Partitioning::unsupported("PARTITION BY HASH(weird())", "why");
    assert_eq!(alter(&u, "ADD PARTITION PARTITIONS 2"), u);
    assert_eq!(
        alter(&u, "PARTITION BY HASH(a)").method,
        PartitionMethod::Hash
    );
}

// --- placing rows --------------------------------------------------------------------

fn ints() -> TableSchema {
    schema(vec![
        col("a", ColumnType::Int, "int(11)"),
        col("u", ColumnType::BigInt, "bigint(20) unsigned"),
    ])
}

fn place(p: &Partitioning, s: &TableSchema, row: Vec<Value>) -> Result<usize, PartitionError> {
    p.partition_of(s, &row)
}

#[test]
fn range_and_list() {
    let s = ints();
    let r = p("PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (-5), PARTITION p1 VALUES LESS THAN (10), PARTITION p2 VALUES LESS THAN (20))");
    let at = |a: Value| place(&r, &s, vec![a, Value::Null]);
    assert_eq!(at(Value::Int(-6)), Ok(0));
    assert_eq!(at(Value::Int(-5)), Ok(1));
    assert_eq!(at(Value::Int(9)), Ok(1));
    assert_eq!(at(Value::Int(10)), Ok(2));
    assert_eq!(at(Value::Null), Ok(0));
    let e = at(Value::Int(20)).expect_err("an error");
    assert!(
        e.0.contains("refused") && e.0.contains("enable-partition-separator=false"),
        "{e}"
    );

    let ru = p("PARTITION BY RANGE (u) (PARTITION p0 VALUES LESS THAN (9223372036854775808), PARTITION p1 VALUES LESS THAN MAXVALUE)");
    assert_eq!(
        place(&ru, &s, vec![Value::Null, Value::UInt(u64::MAX)]),
        Ok(1)
    );
    assert_eq!(
        place(&ru, &s, vec![Value::Null, Value::UInt(1 << 63)]),
        Ok(1)
    );
    assert_eq!(
        place(&ru, &s, vec![Value::Null, Value::UInt((1 << 63) - 1)]),
        Ok(0)
    );

    let l = p(
        "PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1, 2), PARTITION p1 VALUES IN (NULL, -3))",
    );
    let at = |a: Value| place(&l, &s, vec![a, Value::Null]);
    assert_eq!(at(Value::Int(2)), Ok(0));
    assert_eq!(at(Value::Int(-3)), Ok(1));
    assert_eq!(at(Value::Null), Ok(1));
    assert!(at(Value::Int(7)).is_err());
    let ld = p("PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1), PARTITION pd DEFAULT)");
    assert_eq!(place(&ld, &s, vec![Value::Int(7), Value::Null]), Ok(1));
    // NULL without a NULL partition goes to DEFAULT (checked against the server).
    assert_eq!(place(&ld, &s, vec![Value::Null, Value::Null]), Ok(1));
    // Malformed rows are errors, not panics.
    assert!(place(&ld, &s, vec![Value::Int(1)]).is_err());
    assert!(place(&ld, &s, vec![]).is_err());
}

#[test]
fn hash_sign_null_and_linear() {
    let s = ints();
    let h = p("PARTITION BY HASH (a) PARTITIONS 3");
    let at = |a: Value| place(&h, &s, vec![a, Value::Null]);
    assert_eq!(at(Value::Int(-1)), Ok(1));
    assert_eq!(at(Value::Int(-5)), Ok(2));
    assert_eq!(at(Value::Int(7)), Ok(1));
    // NULL is LONGLONG_MIN to the server: -9223372036854775808 % 3 = -2.
    assert_eq!(at(Value::Null), Ok(2));
    let hu = p("PARTITION BY HASH (u) PARTITIONS 3");
    // u64::MAX is -1 as a signed 64-bit value.
    assert_eq!(
        place(&hu, &s, vec![Value::Null, Value::UInt(u64::MAX)]),
        Ok(1)
    );
    let lh = p("PARTITION BY LINEAR HASH (a) PARTITIONS 6");
    let at = |a: i64| place(&lh, &s, vec![Value::Int(a), Value::Null]);
    // V = 8: 5 & 7 = 5; 6 & 7 = 6 ≥ 6 → 6 & 3 = 2; 7 → 3; -1 & 7 = 7 → 3.
    assert_eq!((at(5), at(6), at(7), at(-1)), (Ok(5), Ok(2), Ok(3), Ok(3)));
    assert_eq!(place(&lh, &s, vec![Value::Null, Value::Null]), Ok(0));
    let one = p("PARTITION BY LINEAR HASH (a)");
    assert_eq!(place(&one, &s, vec![Value::Int(12345), Value::Null]), Ok(0));
}

#[test]
fn key_hash_known_values() {
    // Values checked against MariaDB 10.11 (PARTITION BY KEY (a) PARTITIONS 7 / 5).
    let s = ints();
    let k = p("PARTITION BY KEY (a) PARTITIONS 7");
    let alg1 = p("PARTITION BY KEY ALGORITHM=1 (a) PARTITIONS 7");
    let h = |v: i64, alg: u8| {
        let mut h = KeyHasher { nr1: 1, nr2: 4 };
        let c = col("a", ColumnType::Int, "int");
        key_hash_column(&mut h, &c, &Value::Int(v), alg).map(|_| h.nr1 & 0xFFFF_FFFF)
    };
    // 0x20 in the last byte is dropped by latin1 hashing (trailing space), not by binary.
    let (a, b) = (h(0x2000_0000, 2), h(0, 2));
    assert!(a.is_ok() && b.is_ok());
    assert_ne!(h(0x2000_0000, 2), h(0x2000_0000, 1));
    // 'a' and 'A' weigh the same in latin1_swedish_ci: 0x61 and 0x41 hash alike.
    assert_eq!(h(0x61, 2), h(0x41, 2));
    assert_ne!(h(0x61, 1), h(0x41, 1));
    for v in [0i64, 1, -1, 97, 65] {
        assert!(place(&k, &s, vec![Value::Int(v), Value::Null]).is_ok_and(|i| i < 7));
        assert!(place(&alg1, &s, vec![Value::Int(v), Value::Null]).is_ok_and(|i| i < 7));
    }
    // KEY () uses the schema's key; unsupported types are errors.
    let k0 = p("PARTITION BY KEY () PARTITIONS 4");
    assert_eq!(
        place(&k0, &s, vec![Value::Int(5), Value::Null]),
        place(
            &p("PARTITION BY KEY (a) PARTITIONS 4"),
            &s,
            vec![Value::Int(5), Value::Null]
        )
    );
    let f = schema(vec![col("f", ColumnType::Double, "double")]);
    let e = place(
        &p("PARTITION BY KEY (f) PARTITIONS 2"),
        &f,
        vec![Value::Double(1.5)],
    )
    .expect_err("an error");
    assert!(e.0.contains("not supported") && e.0.contains("`f`"), "{e}");
    let mut nokey = ints();
    nokey.key_columns.clear();
    assert!(place(&k0, &nokey, vec![Value::Int(5), Value::Null]).is_err());
}

fn date(y: u16, m: u8, d: u8) -> Value {
    Value::Date {
        year: y,
        month: m,
        day: d,
    }
}

fn dtv(y: u16, mo: u8, d: u8, h: u8, mi: u8, s: u8, us: u32) -> Value {
    Value::DateTime {
        year: y,
        month: mo,
        day: d,
        hour: h,
        minute: mi,
        second: s,
        micros: us,
    }
}

/// Evaluates a partition expression over one row of (d DATE, dt DATETIME(6), ts TIMESTAMP, a INT).
fn ev(expr: &str, row: Vec<Value>) -> Result<EV, PartitionError> {
    let s = schema(vec![
        col("d", ColumnType::Date, "date"),
        col("dt", ColumnType::DateTime, "datetime(6)"),
        col("ts", ColumnType::Timestamp, "timestamp"),
        col("a", ColumnType::Int, "int"),
    ]);
    let e = Parser::new(expr)?.whole_expr()?;
    eval(&e, Some((&s, &row)))
}

fn ev_int(expr: &str, row: Vec<Value>) -> Option<i128> {
    match ev(expr, row) {
        Ok(EV::Int(v)) => Some(v),
        Ok(EV::Null) => None,
        other => panic!("{expr}: {other:?}"),
    }
}

#[test]
fn evaluator() {
    let row = || {
        vec![
            date(2020, 2, 29),
            dtv(2021, 1, 1, 13, 4, 5, 600_000),
            Value::Timestamp { micros: 8_600_000 },
            Value::Int(-7),
        ]
    };
    let cases: &[(&str, Option<i128>)] = &[
        ("YEAR(d)", Some(2020)),
        ("month(`D`)", Some(2)),
        ("DAY(d) + DAYOFMONTH(d)", Some(58)),
        ("TO_DAYS(d)", Some(737849)),
        ("TO_DAYS('2020-01-01')", Some(737790)),
        ("TO_SECONDS(dt)", Some(63_776_725_445)),
        ("UNIX_TIMESTAMP(ts)", Some(8)),
        ("DAYOFYEAR(d)", Some(60)),
        ("DAYOFWEEK(d)", Some(7)),
        ("WEEKDAY(d)", Some(5)),
        ("QUARTER(dt)", Some(1)),
        ("HOUR(dt) * 100 + MINUTE(dt)", Some(1304)),
        ("SECOND(dt)", Some(5)),
        ("MICROSECOND(dt)", Some(600_000)),
        ("EXTRACT(YEAR_MONTH FROM d)", Some(202002)),
        ("EXTRACT(DAY_SECOND FROM dt)", Some(1_130_405)),
        ("YEARWEEK(dt)", Some(202052)),
        ("YEARWEEK('0000-01-01')", Some(1)),
        ("DATEDIFF('2020-01-01', '2019-01-01')", Some(365)),
        ("a DIV 2", Some(-3)),
        ("a MOD 4", Some(-3)),
        ("a % 4", Some(-3)),
        ("MOD(a, 4)", Some(-3)),
        ("ABS(a)", Some(7)),
        ("CEILING(a) + FLOOR(a)", Some(-14)),
        ("-a * 2 - 1", Some(13)),
        ("2 + 3 * 4", Some(14)),
        ("(2 + 3) * 4", Some(20)),
        ("10 - 2 - 3", Some(5)),
        ("a DIV 0", None),
        ("a MOD 0", None),
        ("NULL + 1", None),
        ("TO_DAYS('0000-00-00')", None),
        ("TO_DAYS('2020-00-10')", None),
        ("YEAR('0000-00-00')", Some(0)),
    ];
    for (expr, want) in cases {
        assert_eq!(ev_int(expr, row()), *want, "{expr}");
    }
    let nulls = vec![Value::Null, Value::Null, Value::Null, Value::Null];
    assert_eq!(ev_int("TO_DAYS(d)", nulls.clone()), None);
    assert_eq!(ev_int("UNIX_TIMESTAMP(ts)", nulls), None);
    for bad in [
        "SOUNDEX(d)",
        "YEAR(ts)",
        "UNIX_TIMESTAMP(d)",
        "YEAR(a)",
        "EXTRACT(WEEK FROM d)",
        "nosuch",
        "YEAR('junk')",
        "a + d",
    ] {
        let e = ev(bad, row()).expect_err("an error");
        assert!(!e.0.is_empty(), "{bad}");
    }
    let e = ev("SOUNDEX(d)", row()).expect_err("an error");
    assert!(e.0.contains("SOUNDEX"), "{e}");
    // Big unsigned values keep their value.
    let s = ints();
    let big = [Value::Null, Value::UInt(u64::MAX)];
    let e = Parser::new("u - 1 + a")
        .and_then(|mut p| p.whole_expr())
        .unwrap_or(Expr::Null);
    assert_eq!(
        eval(&e, Some((&s, &[Value::Int(-1), Value::UInt(u64::MAX)]))),
        Ok(EV::Int(u64::MAX as i128 - 2))
    );
    // Beyond BIGINT UNSIGNED the server refuses the row.
    let e = Parser::new("u + 1")
        .and_then(|mut p| p.whole_expr())
        .unwrap_or(Expr::Null);
    assert!(eval(&e, Some((&s, &big))).is_err());
}

#[test]
fn daynr_and_weeks() {
    assert_eq!(daynr(0, 1, 1), 1);
    assert_eq!(daynr(1970, 1, 1), 719528);
    assert_eq!(daynr(9999, 12, 31), 3652424);
    // YEARWEEK around the turn of the year (mode 0).
    let yw = |y, m, d| {
        let (w, yr) = calc_week(
            &Dt {
                y,
                m,
                d,
                h: 0,
                mi: 0,
                s: 0,
                us: 0,
            },
            false,
            true,
            true,
        );
        yr * 100 + w
    };
    assert_eq!(yw(2021, 1, 1), 202052);
    assert_eq!(yw(2021, 1, 3), 202101);
    assert_eq!(yw(2017, 1, 1), 201701);
    assert_eq!(yw(2019, 12, 31), 201952);
}

#[test]
fn columns_and_collations() {
    let mut name = col("s", ColumnType::VarChar, "varchar(10)");
    name.collation = Some("utf8mb4_general_ci".into());
    let s = schema(vec![col("a", ColumnType::Int, "int"), name]);
    let rc = p("PARTITION BY RANGE COLUMNS(a, s) (PARTITION p0 VALUES LESS THAN (0, 'b'), PARTITION p1 VALUES LESS THAN (10, MAXVALUE), PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE))");
    let at = |a: Value, t: &str| place(&rc, &s, vec![a, Value::Text(t.into())]);
    assert_eq!(at(Value::Int(0), "a"), Ok(0));
    assert_eq!(at(Value::Int(0), "B"), Ok(1));
    assert_eq!(at(Value::Int(0), "b   "), Ok(1));
    assert_eq!(at(Value::Int(0), "Á"), Ok(0));
    assert_eq!(at(Value::Int(-1), "zzz"), Ok(0));
    assert_eq!(at(Value::Null, "zzz"), Ok(0));
    assert_eq!(at(Value::Int(10), ""), Ok(1));
    assert_eq!(at(Value::Int(11), ""), Ok(2));
    assert_eq!(place(&rc, &s, vec![Value::Int(0), Value::Null]), Ok(0));
    // A character whose weight Sluice does not know is an error when it decides.
    assert!(at(Value::Int(0), "€").is_err());

    let weights = |c: Coll, a: &str, b: &str| cmp_weights(a, b, c);
    let ci = Coll::GeneralCi { pad: true };
    assert_eq!(weights(ci, "abc", "ABC "), Ok(Ordering::Equal));
    assert_eq!(weights(ci, "a\t", "a"), Ok(Ordering::Less));
    assert_eq!(weights(ci, "_", "a"), Ok(Ordering::Greater));
    assert_eq!(weights(ci, "straße", "STRASSE"), Ok(Ordering::Less));
    let nopad = Coll::GeneralCi { pad: false };
    assert_eq!(weights(nopad, "a", "a "), Ok(Ordering::Less));
    let bin = Coll::Bin {
        latin1: false,
        pad: true,
    };
    assert_eq!(weights(bin, "B", "a"), Ok(Ordering::Less));
    assert_eq!(weights(bin, "a ", "a"), Ok(Ordering::Equal));
    let uca = Coll::UcaCi { pad: true };
    assert_eq!(weights(uca, "9", "a"), Ok(Ordering::Less));
    assert_eq!(weights(uca, "b", "A"), Ok(Ordering::Greater));
    assert_eq!(weights(uca, "_", "a"), Err('_'));
    let sw = Coll::Latin1SwedishCi { pad: true };
    assert_eq!(weights(sw, "Ä", "\\"), Ok(Ordering::Equal));
    assert_eq!(weights(sw, "é", "E"), Ok(Ordering::Equal));
    // Unknown collation: only comparisons every candidate agrees on.
    let mut unknown = col("s", ColumnType::VarChar, "varchar(10)");
    unknown.charset = Some("utf8mb4".into());
    assert_eq!(cmp_text(&unknown, "abc", "abd"), Ok(Ordering::Less));
    assert!(cmp_text(&unknown, "abc", "ABD").is_err());
    let mut tailored = col("s", ColumnType::VarChar, "varchar(10)");
    tailored.collation = Some("utf8mb4_czech_ci".into());
    assert!(cmp_text(&tailored, "a", "b").is_err());

    let mut dcol = col("d", ColumnType::Date, "date");
    dcol.nullable = false;
    let ds = schema(vec![dcol]);
    let rd = p("PARTITION BY RANGE COLUMNS(d) (PARTITION p0 VALUES LESS THAN ('2020-01-01'), PARTITION p1 VALUES LESS THAN (MAXVALUE))");
    assert_eq!(place(&rd, &ds, vec![date(2019, 12, 31)]), Ok(0));
    assert_eq!(place(&rd, &ds, vec![date(2020, 1, 1)]), Ok(1));

    let lc = p("PARTITION BY LIST COLUMNS(a, s) (PARTITION p0 VALUES IN ((NULL, 'a'), (1, NULL)), PARTITION p1 VALUES IN ((2, 'x')))");
    let at = |a: Value, t: Value| place(&lc, &s, vec![a, t]);
    assert_eq!(at(Value::Null, Value::Text("A".into())), Ok(0));
    assert_eq!(at(Value::Int(1), Value::Null), Ok(0));
    assert_eq!(at(Value::Int(2), Value::Text("X ".into())), Ok(1));
    assert!(at(Value::Int(2), Value::Text("y".into())).is_err());
}

#[test]
fn unsupported_layouts() {
    let s = ints();
    let st = p("PARTITION BY SYSTEM_TIME (PARTITION p0 HISTORY, PARTITION pn CURRENT)");
    let e = place(&st, &s, vec![Value::Int(1), Value::Null]).expect_err("an error");
    assert!(
        e.0.contains("SYSTEM_TIME") && e.0.contains("enable-partition-separator=false"),
        "{e}"
    );
    let u = Partitioning::unsupported("PARTITION BY X", "no idea");
    assert!(place(&u, &s, vec![Value::Int(1), Value::Null])
        .expect_err("an error")
        .0
        .contains("no idea"));
    let f = p("PARTITION BY HASH (SOUNDEX(a)) PARTITIONS 2");
    assert!(place(&f, &s, vec![Value::Int(1), Value::Null])
        .expect_err("an error")
        .0
        .contains("SOUNDEX"));
    let missing = p("PARTITION BY HASH (nosuch) PARTITIONS 2");
    assert!(place(&missing, &s, vec![Value::Int(1), Value::Null]).is_err());
}

#[test]
fn serde_round_trip() {
    let r = p("PARTITION BY RANGE COLUMNS(a, s) (PARTITION p0 VALUES LESS THAN (0, 'b'), PARTITION p1 VALUES LESS THAN (MAXVALUE, MAXVALUE))");
    let _ = format!("{r:?}");
    assert_eq!(r.clone(), r);
}
