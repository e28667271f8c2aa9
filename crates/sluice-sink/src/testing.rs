//! Shared test material: a table with every column type, row builders, golden files
//! ([`golden`]), and the sink contract suite ([`run_contract_suite`]) that every sink (and the
//! simulator's model sinks, through the same trait) must pass.
//!
//! Invariant: the suite only uses the [`Sink`] trait, so a pass means the contract holds for that
//! implementation, whatever it writes to.

use crate::{RowBatch, Sink, SinkError};
use sluice_types::*;
use std::sync::Arc;

fn col(name: &str, ty: ColumnType, sql: &str, nullable: bool) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        sql_type: sql.into(),
        unsigned: sql.contains("unsigned"),
        nullable,
        charset: None,
        collation: None,
        elements: Vec::new(),
        decimals: 0,
        length: 0,
        generated: None,
    }
}

/// `db.t (id bigint primary key, v varchar(64))`, table id `id`, version `version`.
/// Compares `actual` with the golden file `crates/sluice-sink/tests/golden/<name>`;
/// `UPDATE_GOLDEN=1` writes it instead.
pub fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(actual, expected, "golden {name} differs");
}

pub fn simple_schema(db: &str, table: &str, id: u64, version: Ts) -> TableSchema {
    TableSchema {
        table_id: TableId(id),
        database: db.into(),
        name: table.into(),
        columns: vec![
            col("id", ColumnType::BigInt, "bigint", false),
            col("v", ColumnType::VarChar, "varchar(64)", true),
        ],
        key_columns: vec![0],
        unique_keys: Vec::new(),
        version,
        partitioning: None,
    }
}

/// An insert into [`simple_schema`].
pub fn simple_insert(
    schema: &TableSchema,
    id: u64,
    v: &str,
    commit_ts: Ts,
    commit_time_ms: u64,
) -> RowEvent {
    RowEvent {
        table_id: schema.table_id,
        schema_version: schema.version,
        commit_ts,
        commit_time_ms,
        kind: RowKind::Insert,
        key: Key::row_u64(schema.table_id, id),
        before: None,
        after: Some(vec![Value::Int(id as i64), Value::Text(v.into())]),
        snapshot: false,
        gtid: None,
    }
}

/// A table with one column of every [`ColumnType`] (MariaDB DDL in [`all_types_ddl`]).
pub fn all_types_schema(db: &str, version: Ts) -> TableSchema {
    let mut cols = vec![
        col("id", ColumnType::Int, "int", false),
        col("c_tinyint", ColumnType::TinyInt, "tinyint", true),
        col(
            "c_smallint",
            ColumnType::SmallInt,
            "smallint unsigned",
            true,
        ),
        col("c_mediumint", ColumnType::MediumInt, "mediumint", true),
        col("c_bigint", ColumnType::BigInt, "bigint unsigned", true),
        col("c_decimal", ColumnType::Decimal, "decimal(12,3)", true),
        col("c_float", ColumnType::Float, "float", true),
        col("c_double", ColumnType::Double, "double", true),
        col("c_char", ColumnType::Char, "char(8)", true),
        col("c_varchar", ColumnType::VarChar, "varchar(64)", true),
        col("c_text", ColumnType::Text, "text", true),
        col("c_binary", ColumnType::Binary, "binary(4)", true),
        col("c_varbinary", ColumnType::VarBinary, "varbinary(16)", true),
        col("c_blob", ColumnType::Blob, "blob", true),
        col("c_date", ColumnType::Date, "date", true),
        col("c_time", ColumnType::Time, "time(3)", true),
        col("c_datetime", ColumnType::DateTime, "datetime(6)", true),
        col("c_timestamp", ColumnType::Timestamp, "timestamp(6)", true),
        col("c_year", ColumnType::Year, "year", true),
        col("c_enum", ColumnType::Enum, "enum('a','b','c')", true),
        col("c_set", ColumnType::Set, "set('x','y','z')", true),
        col("c_bit", ColumnType::Bit, "bit(10)", true),
        col("c_json", ColumnType::Json, "longtext", true),
        col("c_geometry", ColumnType::Geometry, "geometry", true),
    ];
    cols[5].decimals = 3;
    cols[15].decimals = 3;
    cols[16].decimals = 6;
    cols[17].decimals = 6;
    cols[19].elements = vec!["a".into(), "b".into(), "c".into()];
    cols[20].elements = vec!["x".into(), "y".into(), "z".into()];
    TableSchema {
        table_id: TableId(77),
        database: db.into(),
        name: "all_types".into(),
        columns: cols,
        key_columns: vec![0],
        unique_keys: Vec::new(),
        version,
        partitioning: None,
    }
}

/// `CREATE TABLE` for [`all_types_schema`] (MariaDB).
pub fn all_types_ddl(db: &str) -> String {
    let s = all_types_schema(db, 0);
    let cols: Vec<String> = s
        .columns
        .iter()
        .map(|c| {
            format!(
                "`{}` {}{}",
                c.name,
                c.sql_type,
                if c.nullable { " NULL" } else { " NOT NULL" }
            )
        })
        .collect();
    format!(
        "CREATE TABLE `{db}`.`all_types` ({}, PRIMARY KEY (`id`))",
        cols.join(", ")
    )
}

/// Two rows of [`all_types_schema`]: one with a value of every type (including awkward text:
/// quotes, delimiter, newline, non-ASCII, a trailing space), one with every nullable column NULL.
pub fn all_types_rows(schema: &TableSchema, commit_ts: Ts, commit_time_ms: u64) -> Vec<RowEvent> {
    // A POINT(1 2) in MariaDB's internal format: SRID (4 bytes LE) + WKB.
    let mut point = vec![0, 0, 0, 0, 1, 1, 0, 0, 0];
    point.extend_from_slice(&1.0f64.to_le_bytes());
    point.extend_from_slice(&2.0f64.to_le_bytes());
    let full = vec![
        Value::Int(1),
        Value::Int(-128),
        Value::UInt(65535),
        Value::Int(-8_388_608),
        Value::UInt(u64::MAX),
        Value::Decimal("-123456789.125".into()),
        Value::Float(1.5),
        Value::Double(-2.25e-10),
        Value::Text("ab\"c".into()),
        Value::Text("x,y\ndé \\N ".into()),
        Value::Text("\\N".into()),
        Value::Bytes(vec![0, 1, 2, 255]),
        Value::Bytes(b"\x00\"',\n\xff".to_vec()),
        Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]),
        Value::Date {
            year: 2024,
            month: 2,
            day: 29,
        },
        Value::Time {
            negative: true,
            hours: 838,
            minutes: 59,
            seconds: 58,
            micros: 999_000,
        },
        Value::DateTime {
            year: 1999,
            month: 12,
            day: 31,
            hour: 23,
            minute: 59,
            second: 59,
            micros: 123_456,
        },
        Value::Timestamp {
            micros: 1_700_000_000_654_321,
        },
        Value::Year(2155),
        Value::Enum {
            index: 2,
            name: "b".into(),
        },
        Value::Set {
            bits: 0b101,
            names: vec!["x".into(), "z".into()],
        },
        Value::Bit {
            bits: 0b10_0000_0001,
            width: 10,
        },
        Value::Json("{\"k\": [1, \"two\", null]}".into()),
        Value::Geometry(point),
    ];
    let mut nulls = vec![Value::Null; full.len()];
    nulls[0] = Value::Int(2);
    [full, nulls]
        .into_iter()
        .enumerate()
        .map(|(i, after)| RowEvent {
            table_id: schema.table_id,
            schema_version: schema.version,
            commit_ts,
            commit_time_ms,
            kind: RowKind::Insert,
            key: Key::row_u64(schema.table_id, i as u64 + 1),
            before: None,
            after: Some(after),
            snapshot: false,
            gtid: None,
        })
        .collect()
}

/// An `ALTER TABLE` of `table` at `ts` (its commit time in ms is `ts` too).
pub fn ddl_event(ts: Ts, db: &str, query: &str, table: TableId) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: ts,
        commit_time_ms: ts,
        kind: DdlKind::AlterTable,
        database: db.into(),
        query: query.into(),
        influence: DdlInfluence {
            scope: InfluenceScope::Tables(vec![table]),
            trigger: false,
            dropped: Vec::new(),
            added: Vec::new(),
            renamed: Vec::new(),
            sources: vec![],
        },
    }
}

fn is_contract(e: &SinkError) -> bool {
    matches!(e, SinkError::Contract { .. }) && !e.is_retryable()
}

/// The sink contract suite. `db`/`table` name a table the sink may write (for a database sink it
/// must exist downstream as `simple_schema`: `id bigint primary key, v varchar(64)`), `table_id`
/// its id; `alter` is a DDL statement on it that the sink can apply (it must leave `id` and `v`).
pub async fn run_contract_suite(
    sink: &dyn Sink,
    db: &str,
    table: &str,
    table_id: u64,
    alter: &str,
) {
    let schema = Arc::new(simple_schema(db, table, table_id, 1));
    let t = schema.table_id;
    let d1 = DispatcherId { epoch: 1, seq: 1 };
    let d2 = DispatcherId { epoch: 1, seq: 2 };
    let whole = Span::whole_table(t);
    let mid = Key::row_u64(t, 1000);
    let lower = Span::new(t, whole.start.clone(), mid.clone());
    let upper = Span::new(t, mid, whole.end.clone());

    refuses_unknown_dispatcher(sink, &schema, d1).await;
    let mut ack = opens_at_start_ts(sink, d1, &lower).await;
    refuses_out_of_order_rows(sink, &schema, d1).await;
    acks_what_was_written(sink, &schema, d1, &mut ack).await;
    resolve_moves_the_ack(sink, d1).await;
    acks_a_transaction_in_parts_only_at_its_end(sink, &schema, d1, &mut ack).await;
    let _ack2 = writes_concurrently(sink, &schema, d1, d2, &upper).await;
    let v2 = ddl_is_a_barrier(sink, &schema, d1, (db, table, table_id), alter).await;
    close_flushes_and_ends(sink, &v2, d1).await;
    other_dispatcher_unaffected(sink, d2, upper).await;

    // The checkpoint is accepted (and ignored where the sink keeps none).
    sink.write_checkpoint(40).await.expect("checkpoint");
    sink.write_checkpoint(30)
        .await
        .expect("checkpoint backwards is ignored");
}

/// Unknown dispatchers are refused, fatally.
async fn refuses_unknown_dispatcher(sink: &dyn Sink, schema: &Arc<TableSchema>, d1: DispatcherId) {
    let e = sink
        .write_rows(
            d1,
            RowBatch {
                schema: schema.clone(),
                rows: vec![],
            },
        )
        .await
        .expect_err("not open");
    assert!(is_contract(&e), "{e}");
}

/// Open at start ts 5: the ack starts there; opening again is refused.
async fn opens_at_start_ts(sink: &dyn Sink, d1: DispatcherId, lower: &Span) -> crate::AckReceiver {
    let ack = sink.open(d1, lower.clone(), 5).await.expect("open d1");
    assert_eq!(*ack.borrow(), 5);
    assert_eq!(sink.durable_ts(d1), Some(5));
    let e = sink
        .open(d1, lower.clone(), 5)
        .await
        .expect_err("double open");
    assert!(is_contract(&e), "{e}");
    ack
}

/// Rows at or below the start ts, out of order, or outside the span are refused.
async fn refuses_out_of_order_rows(sink: &dyn Sink, schema: &Arc<TableSchema>, d1: DispatcherId) {
    for (rows, why) in [
        (vec![simple_insert(schema, 1, "a", 5, 5)], "at start ts"),
        (
            vec![
                simple_insert(schema, 1, "a", 9, 9),
                simple_insert(schema, 2, "b", 8, 8),
            ],
            "decreasing",
        ),
        (vec![simple_insert(schema, 5000, "a", 9, 9)], "outside span"),
    ] {
        match sink
            .write_rows(
                d1,
                RowBatch {
                    schema: schema.clone(),
                    rows,
                },
            )
            .await
        {
            Err(e) => assert!(is_contract(&e), "{why}: {e}"),
            Ok(()) => panic!("{why}: accepted"),
        }
    }
}

/// Writes then flush: the ack is the greatest commit ts written, never above it; a later call
/// must carry greater commit ts than everything before.
async fn acks_what_was_written(
    sink: &dyn Sink,
    schema: &Arc<TableSchema>,
    d1: DispatcherId,
    ack: &mut crate::AckReceiver,
) {
    let rows = vec![
        simple_insert(schema, 1, "a", 10, 10),
        simple_insert(schema, 2, "b", 10, 10),
        simple_insert(schema, 3, "c", 20, 20),
    ];
    sink.write_rows(
        d1,
        RowBatch {
            schema: schema.clone(),
            rows,
        },
    )
    .await
    .expect("write");
    assert!(*ack.borrow() <= 20);
    let acked = sink.flush(d1).await.expect("flush");
    assert_eq!(acked, 20);
    assert_eq!(*ack.borrow_and_update(), 20);

    let e = sink
        .write_rows(
            d1,
            RowBatch {
                schema: schema.clone(),
                rows: vec![simple_insert(schema, 4, "d", 20, 20)],
            },
        )
        .await
        .expect_err("same ts again");
    assert!(is_contract(&e), "{e}");
}

/// Resolve moves the ack over idle time, never backwards.
async fn resolve_moves_the_ack(sink: &dyn Sink, d1: DispatcherId) {
    sink.resolve(d1, 25).await.expect("resolve");
    assert_eq!(sink.flush(d1).await.expect("flush"), 25);
    sink.resolve(d1, 22).await.expect("resolve lower");
    assert_eq!(sink.flush(d1).await.expect("flush"), 25);
}

/// A transaction written in parts (ts 27; the one before it, 26, comes with its first part):
/// flushes acknowledge everything before it and nothing of it, a DDL cannot come inside it, and
/// the write that ends it lets the ack reach it. Rows: ids 101-104.
async fn acks_a_transaction_in_parts_only_at_its_end(
    sink: &dyn Sink,
    schema: &Arc<TableSchema>,
    d1: DispatcherId,
    ack: &mut crate::AckReceiver,
) {
    let batch = |rows| RowBatch {
        schema: schema.clone(),
        rows,
    };
    let first = vec![
        simple_insert(schema, 101, "p", 26, 26),
        simple_insert(schema, 102, "q", 27, 27),
    ];
    sink.write_part(d1, batch(first)).await.expect("first part");
    assert_eq!(*ack.borrow_and_update(), 26, "what came before is durable");
    assert_eq!(sink.flush(d1).await.expect("flush"), 26, "nothing of it");
    let more = vec![simple_insert(schema, 103, "r", 27, 27)];
    sink.write_part(d1, batch(more)).await.expect("next part");
    assert_eq!(
        sink.flush(d1).await.expect("flush"),
        26,
        "still nothing of it"
    );
    let ddl = ddl_event(
        28,
        &schema.database,
        "CREATE TABLE other (a INT)",
        TableId(99),
    );
    let e = sink
        .write_ddl(d1, ddl, vec![])
        .await
        .expect_err("a DDL inside an open transaction");
    assert!(is_contract(&e), "{e}");
    let last = vec![simple_insert(schema, 104, "s", 27, 27)];
    sink.write_rows(d1, batch(last)).await.expect("last part");
    assert_eq!(sink.flush(d1).await.expect("flush"), 27, "all of it");
    assert_eq!(*ack.borrow_and_update(), 27);
}

/// A second dispatcher on the other half of the table, concurrently. Returns its ack (kept
/// open for the rest of the suite).
async fn writes_concurrently(
    sink: &dyn Sink,
    schema: &Arc<TableSchema>,
    d1: DispatcherId,
    d2: DispatcherId,
    upper: &Span,
) -> crate::AckReceiver {
    let ack2 = sink.open(d2, upper.clone(), 5).await.expect("open d2");
    let w1 = sink.write_rows(
        d1,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(schema, 5, "e", 30, 30)],
        },
    );
    let w2 = sink.write_rows(
        d2,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(schema, 2000, "x", 30, 30)],
        },
    );
    let (r1, r2) = tokio::join!(w1, w2);
    r1.expect("w1");
    r2.expect("w2");
    ack2
}

/// Barrier: the DDL returns after the earlier rows are durable; its ack is its commit ts, it is
/// on record, and rows of the new version (returned) follow. `(db, table, table_id)`: the table.
async fn ddl_is_a_barrier(
    sink: &dyn Sink,
    schema: &Arc<TableSchema>,
    d1: DispatcherId,
    (db, table, table_id): (&str, &str, u64),
    alter: &str,
) -> Arc<TableSchema> {
    let t = schema.table_id;
    let e = sink
        .write_ddl(d1, ddl_event(30, db, alter, t), vec![schema.clone()])
        .await
        .expect_err("DDL at a written ts");
    assert!(is_contract(&e), "{e}");
    let mut v2 = simple_schema(db, table, table_id, 40);
    v2.version = 40;
    let v2 = Arc::new(v2);
    let at = sink
        .write_ddl(d1, ddl_event(40, db, alter, t), vec![v2.clone()])
        .await
        .expect("ddl");
    assert_eq!(at, 40);
    assert_eq!(sink.durable_ts(d1), Some(40));
    ddl_is_on_record(sink).await;
    rows_follow_the_new_version(sink, schema, &v2, d1).await;
    v2
}

/// The DDL at 40 is on record (where the sink keeps one), only above the asked ts.
async fn ddl_is_on_record(sink: &dyn Sink) {
    let recorded = sink.applied_ddls(30).await.expect("applied ddls");
    let finished_40 = vec![crate::DdlRecord {
        commit_ts: 40,
        finished: true,
    }];
    assert!(
        recorded.is_empty() || recorded == finished_40,
        "{recorded:?}"
    );
    let above = sink.applied_ddls(40).await.expect("applied ddls");
    assert!(above.is_empty(), "{above:?}");
}

/// Rows of the new version follow; rows of the old version at a later ts are a contract error.
async fn rows_follow_the_new_version(
    sink: &dyn Sink,
    schema: &Arc<TableSchema>,
    v2: &Arc<TableSchema>,
    d1: DispatcherId,
) {
    let e = sink
        .write_rows(
            d1,
            RowBatch {
                schema: v2.clone(),
                rows: vec![simple_insert(schema, 6, "f", 50, 50)],
            },
        )
        .await
        .expect_err("old version row");
    assert!(is_contract(&e), "{e}");
    sink.write_rows(
        d1,
        RowBatch {
            schema: v2.clone(),
            rows: vec![simple_insert(v2, 6, "f", 50, 50)],
        },
    )
    .await
    .expect("write v2");
}

/// Close flushes what is buffered and returns the final ack; afterwards nothing is accepted.
async fn close_flushes_and_ends(sink: &dyn Sink, v2: &Arc<TableSchema>, d1: DispatcherId) {
    let report = sink.close(d1).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.durable_ts, 50);
    assert_eq!(sink.durable_ts(d1), None);
    let e = sink
        .write_rows(
            d1,
            RowBatch {
                schema: v2.clone(),
                rows: vec![simple_insert(v2, 7, "g", 60, 60)],
            },
        )
        .await
        .expect_err("closed");
    assert!(is_contract(&e), "{e}");
    let again = sink.close(d1).await;
    assert!(
        again.error.is_some(),
        "closing twice must say the dispatcher is not open"
    );
}

/// The other dispatcher is unaffected by d1's close and can be reopened after its own close.
async fn other_dispatcher_unaffected(sink: &dyn Sink, d2: DispatcherId, upper: Span) {
    assert_eq!(sink.flush(d2).await.expect("flush d2"), 30);
    let r2 = sink.close(d2).await;
    assert_eq!(r2.durable_ts, 30);
    let _ = sink.open(d2, upper, 30).await.expect("reopen d2");
    assert_eq!(sink.close(d2).await.durable_ts, 30);
}
