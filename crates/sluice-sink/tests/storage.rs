//! Storage sink tests on local files and on a real S3 server (moto): the exact layout (golden
//! path lists per date separator and with dispatcher ids), golden encodings of every column type,
//! size-triggered flushes, resuming after existing files, a store that refuses a taken name, and a
//! dispatcher closed in the middle of writes.
//!
//! Golden files live in tests/golden/; `UPDATE_GOLDEN=1 cargo test -p sluice-sink` rewrites them
//! (then review the diff).

mod common;

use common::list;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_partition::Layout;
use sluice_sink::codec::{canal, csv, value_text};
use sluice_sink::storage::StorageSink;
use sluice_sink::testing::*;
use sluice_sink::uri::{SinkConfig, SinkUri, StorageConfig};
use sluice_sink::{RowBatch, Sink};
use sluice_types::*;
use std::path::PathBuf;
use std::sync::Arc;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-storage-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn storage_cfg(uri: &str) -> StorageConfig {
    match SinkUri::parse(uri).expect("uri").config {
        SinkConfig::Storage(c) => c,
        other => panic!("not storage: {other:?}"),
    }
}

async fn read(store: &Arc<dyn ObjectStore>, p: &str) -> String {
    let b = store
        .get(&object_store::path::Path::from(p))
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    String::from_utf8(b.to_vec()).expect("utf8")
}

const DEC31_2359: u64 = 1_735_689_540_000; // 2024-12-31 23:59:00 UTC
const JAN01_0001: u64 = 1_735_689_660_000; // 2025-01-01 00:01:00 UTC
const FEB01: u64 = 1_738_368_000_000; // 2025-02-01 00:00:00 UTC

fn ddl(ts: Ts, kind: DdlKind, db: &str, query: &str) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: ts,
        commit_time_ms: ts,
        kind,
        database: db.into(),
        query: query.into(),
        influence: DdlInfluence {
            scope: InfluenceScope::All,
            trigger: true,
            dropped: vec![],
            added: vec![],
            renamed: vec![],
            sources: vec![],
        },
    }
}

/// A fixed workload: a whole-table dispatcher crossing a day, a month and a DDL; a table split over
/// two dispatchers; a database-level DDL; a checkpoint.
async fn workload(sink: &dyn Sink) {
    let orders = Arc::new(simple_schema("shop", "orders", 1, 100));
    let da = DispatcherId { epoch: 1, seq: 1 };
    sink.open(da, Span::whole_table(TableId(1)), 99)
        .await
        .expect("open");
    let w = |rows| RowBatch {
        schema: orders.clone(),
        rows,
    };
    sink.write_rows(
        da,
        w(vec![
            simple_insert(&orders, 1, "a", 101, DEC31_2359),
            simple_insert(&orders, 2, "b", 102, DEC31_2359),
        ]),
    )
    .await
    .expect("w");
    sink.flush(da).await.expect("f");
    sink.write_rows(da, w(vec![simple_insert(&orders, 3, "c", 103, JAN01_0001)]))
        .await
        .expect("w");
    sink.flush(da).await.expect("f");
    sink.write_rows(
        da,
        w(vec![
            simple_insert(&orders, 4, "d", 104, JAN01_0001),
            simple_insert(&orders, 5, "e", 105, FEB01),
        ]),
    )
    .await
    .expect("w");
    sink.flush(da).await.expect("f");
    let v200 = Arc::new(simple_schema("shop", "orders", 1, 200));
    let mut v200_cols = (*v200).clone();
    v200_cols.columns.push(v200_cols.columns[1].clone());
    v200_cols.columns[2].name = "note".into();
    let v200 = Arc::new(v200_cols);
    sink.write_ddl(
        da,
        ddl(
            200,
            DdlKind::AlterTable,
            "shop",
            "ALTER TABLE orders ADD COLUMN note varchar(64)",
        ),
        vec![v200.clone()],
    )
    .await
    .expect("ddl");
    let mut r = simple_insert(&v200, 6, "f", 201, FEB01);
    r.after = Some(vec![Value::Int(6), Value::Text("f".into()), Value::Null]);
    sink.write_rows(
        da,
        RowBatch {
            schema: v200.clone(),
            rows: vec![r],
        },
    )
    .await
    .expect("w");
    assert_eq!(sink.close(da).await.durable_ts, 201);

    let items = Arc::new(simple_schema("shop", "items", 2, 100));
    let whole = Span::whole_table(TableId(2));
    let mid = Key::row_u64(TableId(2), 100);
    for (seq, span, id) in [
        (
            7,
            Span::new(TableId(2), whole.start.clone(), mid.clone()),
            1,
        ),
        (
            8,
            Span::new(TableId(2), mid.clone(), whole.end.clone()),
            500,
        ),
    ] {
        let d = DispatcherId { epoch: 2, seq };
        sink.open(d, span, 99).await.expect("open");
        sink.write_rows(
            d,
            RowBatch {
                schema: items.clone(),
                rows: vec![simple_insert(&items, id, "i", 150, JAN01_0001)],
            },
        )
        .await
        .expect("w");
        assert_eq!(sink.close(d).await.durable_ts, 150);
    }

    let trigger = DispatcherId { epoch: 2, seq: 1 };
    sink.open(trigger, Span::whole_table(TableId(0)), 99)
        .await
        .expect("open trigger");
    sink.write_ddl(
        trigger,
        ddl(
            300,
            DdlKind::CreateDatabase,
            "archive",
            "CREATE DATABASE archive",
        ),
        vec![],
    )
    .await
    .expect("db ddl");
    sink.close(trigger).await;
    sink.write_checkpoint(250).await.expect("cp");
    sink.write_checkpoint(240).await.expect("cp");
}

async fn paths_for(uri: &str) -> (Vec<String>, Arc<dyn ObjectStore>) {
    let sink = StorageSink::open_storage(storage_cfg(uri)).expect("sink");
    workload(&sink).await;
    let store = sink.store();
    (list(&store).await, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_paths_for_every_date_separator_local_and_s3() {
    let moto = sluice_testkit::moto::Moto::start("sluice-golden").expect("moto");
    for sep in ["none", "year", "month", "day"] {
        let dir = tempdir(&format!("paths-{sep}"));
        let params = format!("date-separator={sep}&file-index-width=6");
        let (local, store) = paths_for(&format!("file://{}?{params}", dir.display())).await;
        golden(&format!("paths_{sep}.txt"), &(local.join("\n") + "\n"));
        assert_eq!(read(&store, "metadata").await, "{\"checkpoint-ts\":250}");
        let (s3, _) = paths_for(&format!("{}&{params}", moto.sink_uri(&format!("cf-{sep}")))).await;
        assert_eq!(
            s3, local,
            "S3 and local layouts differ for date-separator={sep}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_across_nodes_puts_dispatcher_ids_in_every_name() {
    let dir = tempdir("across");
    let (paths, store) = paths_for(&format!(
        "file://{}?date-separator=none&enable-table-across-nodes=true&protocol=canal-json",
        dir.display()
    ))
    .await;
    golden("paths_across_nodes.txt", &(paths.join("\n") + "\n"));
    let idx = read(
        &store,
        "shop/orders/100/meta/CDC_00000000000000010000000000000001.index",
    )
    .await;
    assert_eq!(
        idx,
        "CDC_00000000000000010000000000000001_00000000000000000003.json\n"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_file_names_the_last_data_file() {
    let dir = tempdir("index");
    let (_, store) = paths_for(&format!(
        "file://{}?date-separator=day&file-index-width=6",
        dir.display()
    ))
    .await;
    assert_eq!(
        read(&store, "shop/orders/100/2025-01-01/meta/CDC.index").await,
        "CDC000002.csv\n"
    );
    assert_eq!(
        read(&store, "shop/orders/100/2024-12-31/meta/CDC.index").await,
        "CDC000001.csv\n"
    );
    let data = read(&store, "shop/orders/100/2025-01-01/CDC000002.csv").await;
    assert_eq!(data, "\"I\",\"orders\",\"shop\",4,\"d\"\r\n");
    let _ = std::fs::remove_dir_all(dir);
}

fn encode_all(cfg: &StorageConfig) -> String {
    let schema = all_types_schema("db", 10);
    let mut rows = all_types_rows(&schema, 11, 1_700_000_000_000);
    let mut update = rows[0].clone();
    update.kind = RowKind::Update;
    update.before = rows[0].after.clone();
    update.commit_ts = 12;
    let mut after = rows[0].after.clone().expect("after");
    after[9] = Value::Text("changed".into());
    update.after = Some(after);
    let mut delete = rows[1].clone();
    delete.kind = RowKind::Delete;
    delete.before = delete.after.take();
    delete.commit_ts = 13;
    rows.push(update);
    rows.push(delete);
    let mut out = String::new();
    for r in &rows {
        match cfg.protocol {
            sluice_sink::uri::Protocol::Csv => {
                csv::encode_row(&mut out, &cfg.csv, &schema, r).expect("encode")
            }
            sluice_sink::uri::Protocol::CanalJson => {
                canal::encode_row(&mut out, None, cfg.tidb_extension, &schema, r).expect("encode")
            }
        }
    }
    out
}

/// The decoded text of every value equals the text of the value encoded (binary compared as bytes).
fn assert_roundtrip(cfg: &StorageConfig, data: &str) {
    let schema = all_types_schema("db", 10);
    let rows = all_types_rows(&schema, 11, 0);
    let decoded = match cfg.protocol {
        sluice_sink::uri::Protocol::Csv => {
            csv::decode_file(data, &cfg.csv, &schema).expect("decode")
        }
        sluice_sink::uri::Protocol::CanalJson => canal::decode_file(data, &schema).expect("decode"),
    };
    assert!(decoded.len() >= 4);
    for (orig, dec) in rows.iter().zip(&decoded) {
        let (o, d) = (
            orig.after.as_ref().expect("after"),
            dec.after.as_ref().expect("after"),
        );
        for ((ov, dv), col) in o.iter().zip(d).zip(&schema.columns) {
            match (ov, dv) {
                (Value::Null, Value::Null) => {}
                (Value::Bytes(a) | Value::Geometry(a), Value::Bytes(b)) => {
                    assert_eq!(a, b, "{}", col.name)
                }
                (Value::Bit { bits, .. }, Value::UInt(b)) => assert_eq!(bits, b, "{}", col.name),
                (ov, Value::Text(t)) => assert_eq!(
                    value_text(ov, col).as_deref(),
                    Some(t.as_str()),
                    "{}",
                    col.name
                ),
                (ov, dv) => panic!("{}: {ov:?} decoded as {dv:?}", col.name),
            }
        }
    }
}

#[test]
fn golden_encodings_of_every_column_type() {
    for (name, uri) in [
        ("all_types_default.csv", "file:///x"),
        ("all_types_options.csv", "file:///x?delimiter=%7C&quote=%27&null=NULL&include-commit-ts=true&output-old-value=true&binary-encoding-method=hex"),
        ("all_types_noquote.csv", "file:///x?quote=&delimiter=%09"),
        ("all_types.json", "file:///x?protocol=canal-json"),
        ("all_types_tidb.json", "file:///x?protocol=canal-json&enable-tidb-extension=true"),
    ] {
        let cfg = storage_cfg(uri);
        let out = encode_all(&cfg);
        golden(name, &out);
        assert_roundtrip(&cfg, &out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_size_splits_files_and_a_restart_continues_after_them() {
    let dir = tempdir("size");
    let uri = format!(
        "file://{}?date-separator=none&file-size=1024&file-index-width=6",
        dir.display()
    );
    let schema = Arc::new(simple_schema("db", "t", 1, 1));
    let d = DispatcherId { epoch: 1, seq: 1 };
    let long = "x".repeat(60);
    {
        let sink = StorageSink::open_storage(storage_cfg(&uri)).expect("sink");
        sink.open(d, Span::whole_table(TableId(1)), 0)
            .await
            .expect("open");
        for i in 0..50u64 {
            sink.write_rows(
                d,
                RowBatch {
                    schema: schema.clone(),
                    rows: vec![simple_insert(&schema, i, &long, i + 1, 0)],
                },
            )
            .await
            .expect("w");
        }
        sink.close(d).await;
    }
    let sink = StorageSink::open_storage(storage_cfg(&uri)).expect("sink");
    let store = sink.store();
    let before = list(&store).await;
    let data: Vec<&String> = before.iter().filter(|p| p.ends_with(".csv")).collect();
    assert!(
        data.len() >= 3,
        "file-size=1024 must split 50 rows of ~80 bytes: {before:?}"
    );
    // A crash between a data file and its index leaves the index behind: simulate it by writing
    // the index back to the first file. The restarted writer must not overwrite any file.
    let first = data[0].rsplit('/').next().expect("name").to_string();
    store
        .put(
            &object_store::path::Path::from("db/t/1/meta/CDC.index"),
            format!("{first}\n").into(),
        )
        .await
        .expect("put");
    let mut contents = Vec::new();
    for p in &data {
        contents.push(read(&store, p).await);
    }
    // A successor dispatcher (new epoch) of the same whole-table span resumes from ts 50.
    let d2 = DispatcherId { epoch: 2, seq: 1 };
    sink.open(d2, Span::whole_table(TableId(1)), 50)
        .await
        .expect("open");
    sink.write_rows(
        d2,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 999, "after", 51, 0)],
        },
    )
    .await
    .expect("w");
    assert_eq!(sink.close(d2).await.durable_ts, 51);
    let after = list(&store).await;
    for (p, c) in data.iter().zip(&contents) {
        assert_eq!(&read(&store, p).await, c, "{p} was overwritten");
    }
    let new: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "{new:?}");
    let expected = format!("db/t/1/CDC{:06}.csv", data.len() + 1);
    assert_eq!(new[0], &expected);
    assert!(read(&store, &expected).await.contains("\"after\""));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_refuses_a_taken_name_and_the_writer_moves_on() {
    let moto = sluice_testkit::moto::Moto::start("sluice-create").expect("moto");
    let uri = format!(
        "{}&date-separator=none&file-index-width=6",
        moto.sink_uri("p")
    );
    let sink = StorageSink::open_storage(storage_cfg(&uri)).expect("sink");
    let store = sink.store();
    // Another writer (an orphan of a failover) already took CDC000001 and CDC000002.
    for n in 1..=2 {
        store
            .put(
                &object_store::path::Path::from(format!("db/t/1/CDC{n:06}.csv")),
                "orphan".into(),
            )
            .await
            .expect("put");
    }
    let schema = Arc::new(simple_schema("db", "t", 1, 1));
    let d = DispatcherId { epoch: 3, seq: 1 };
    sink.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 1, "mine", 1, 0)],
        },
    )
    .await
    .expect("w");
    assert_eq!(sink.flush(d).await.expect("flush"), 1);
    assert_eq!(read(&store, "db/t/1/CDC000001.csv").await, "orphan");
    assert_eq!(read(&store, "db/t/1/CDC000002.csv").await, "orphan");
    assert!(read(&store, "db/t/1/CDC000003.csv").await.contains("mine"));
    assert_eq!(
        read(&store, "db/t/1/meta/CDC.index").await,
        "CDC000003.csv\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_dispatcher_mid_write_loses_nothing_acked_and_spares_the_others() {
    let dir = tempdir("midwrite");
    let uri = format!(
        "file://{}?date-separator=none&file-size=1024&flush-interval=100ms",
        dir.display()
    );
    let sink = Arc::new(StorageSink::open_storage(storage_cfg(&uri)).expect("sink"));
    let schema = Arc::new(simple_schema("db", "t", 1, 1));
    let t = TableId(1);
    let mid = Key::row_u64(t, 1_000_000);
    let (a, b) = (
        DispatcherId { epoch: 1, seq: 1 },
        DispatcherId { epoch: 1, seq: 2 },
    );
    let ack_a = sink
        .open(a, Span::new(t, Span::whole_table(t).start, mid.clone()), 0)
        .await
        .expect("open");
    sink.open(b, Span::new(t, mid, Span::whole_table(t).end), 0)
        .await
        .expect("open");
    let writer = {
        let sink = sink.clone();
        let schema = schema.clone();
        tokio::spawn(async move {
            let mut accepted = 0u64;
            for i in 1..=2000u64 {
                let r = sink
                    .write_rows(
                        a,
                        RowBatch {
                            schema: schema.clone(),
                            rows: vec![simple_insert(&schema, i, "payload-of-some-length", i, 0)],
                        },
                    )
                    .await;
                if r.is_err() {
                    break;
                }
                accepted = i;
            }
            accepted
        })
    };
    // Close once the writer has made some progress (whatever the interleaving, the checks below hold).
    let mut ack = ack_a.clone();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        ack.wait_for(|t| *t >= 10),
    )
    .await;
    let report = sink.close(a).await;
    let accepted = writer.await.expect("writer task");
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        report.durable_ts <= accepted,
        "ack {} above what was accepted {accepted}",
        report.durable_ts
    );
    // Nothing of `a` lands after close: the listing is stable, and holds every acked row.
    let store = sink.store();
    let snapshot = list(&store).await;
    let mut ids = std::collections::BTreeSet::new();
    for p in snapshot.iter().filter(|p| p.ends_with(".csv")) {
        for line in read(&store, p).await.lines() {
            let id: u64 = line
                .split(',')
                .nth(3)
                .and_then(|s| s.parse().ok())
                .expect("id");
            ids.insert(id);
        }
    }
    for i in 1..=report.durable_ts {
        assert!(ids.contains(&i), "acked row {i} missing");
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        list(&store).await,
        snapshot,
        "files appeared after close returned"
    );
    // The other dispatcher goes on.
    sink.write_rows(
        b,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 2_000_000, "b", 5000, 0)],
        },
    )
    .await
    .expect("b writes");
    assert_eq!(sink.flush(b).await.expect("b flush"), 5000);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_interval_acks_without_being_asked() {
    let dir = tempdir("interval");
    let sink = StorageSink::open_storage(storage_cfg(&format!(
        "file://{}?flush-interval=100ms",
        dir.display()
    )))
    .expect("sink");
    let schema = Arc::new(simple_schema("db", "t", 1, 1));
    let d = DispatcherId { epoch: 1, seq: 1 };
    let mut ack = sink
        .open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 1, "a", 7, 0)],
        },
    )
    .await
    .expect("w");
    let got = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        ack.wait_for(|t| *t == 7),
    )
    .await;
    assert!(got.is_ok(), "no ack from the interval flush");
    let paths = list(&sink.store()).await;
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("CDC00000000000000000001.csv")),
        "{paths:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `RANGE (id)`: `lo` below 10, `hi` the rest; parsed as capture parses a DDL's clause.
fn range_partitioned(keyless: bool) -> Arc<TableSchema> {
    let mut s = simple_schema("shop", "parts", 7, 300);
    if keyless {
        s.key_columns.clear();
    }
    s.partitioning = Some(
        Partitioning::parse(
            "PARTITION BY RANGE (id) (PARTITION lo VALUES LESS THAN (10), PARTITION hi VALUES LESS THAN MAXVALUE)",
        )
        .expect("parse"),
    );
    Arc::new(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_rows_go_to_their_partition_directory() {
    for (sep, expect_dirs) in [("true", true), ("false", false)] {
        let dir = tempdir(&format!("parts-{sep}"));
        let sink = StorageSink::open_storage(storage_cfg(&format!(
            "file://{}?date-separator=none&file-index-width=6&enable-partition-separator={sep}",
            dir.display()
        )))
        .expect("sink");
        let s = range_partitioned(true);
        let d = DispatcherId { epoch: 1, seq: 1 };
        sink.open(d, Span::whole_table(s.table_id), 299)
            .await
            .expect("open");
        // An update moving a keyless row from `lo` to `hi` is a delete in `lo` and an insert in `hi`.
        let mut moved = simple_insert(&s, 12, "moved", 302, FEB01);
        moved.kind = RowKind::Update;
        moved.before = Some(vec![Value::Int(3), Value::Text("c".into())]);
        let rows = vec![
            simple_insert(&s, 3, "c", 301, FEB01),
            simple_insert(&s, 42, "x", 301, FEB01),
            moved,
        ];
        sink.write_rows(
            d,
            RowBatch {
                schema: s.clone(),
                rows,
            },
        )
        .await
        .expect("write");
        sink.flush(d).await.expect("flush");
        let store = sink.store();
        let paths: Vec<String> = list(&store)
            .await
            .into_iter()
            .filter(|p| p.ends_with(".csv"))
            .collect();
        if expect_dirs {
            assert_eq!(
                paths,
                vec![
                    "shop/parts/300/0/CDC000001.csv",
                    "shop/parts/300/1/CDC000001.csv"
                ]
            );
            let lo = read(&store, "shop/parts/300/0/CDC000001.csv").await;
            let hi = read(&store, "shop/parts/300/1/CDC000001.csv").await;
            assert_eq!(
                lo,
                "\"I\",\"parts\",\"shop\",3,\"c\"\r\n\"D\",\"parts\",\"shop\",3,\"c\"\r\n"
            );
            assert_eq!(
                hi,
                "\"I\",\"parts\",\"shop\",42,\"x\"\r\n\"I\",\"parts\",\"shop\",12,\"moved\"\r\n"
            );
        } else {
            assert_eq!(paths, vec!["shop/parts/300/CDC000001.csv"]);
            let all = read(&store, "shop/parts/300/CDC000001.csv").await;
            assert_eq!(all.lines().count(), 3, "{all}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_placed_is_a_fatal_error_naming_the_table() {
    let dir = tempdir("parts-unsupported");
    let sink = StorageSink::open_storage(storage_cfg(&format!(
        "file://{}?date-separator=none",
        dir.display()
    )))
    .expect("sink");
    let mut s = simple_schema("shop", "odd", 8, 300);
    s.partitioning = Some(Partitioning::unsupported(
        "PARTITION BY SYSTEM_TIME",
        "SYSTEM_TIME partitioning is not modelled",
    ));
    let s = Arc::new(s);
    let d = DispatcherId { epoch: 1, seq: 2 };
    sink.open(d, Span::whole_table(s.table_id), 299)
        .await
        .expect("open");
    let r = sink
        .write_rows(
            d,
            RowBatch {
                schema: s.clone(),
                rows: vec![simple_insert(&s, 1, "a", 301, FEB01)],
            },
        )
        .await;
    let e = match r {
        Err(e) => e,
        Ok(()) => sink.flush(d).await.expect_err("the row cannot be placed"),
    };
    assert!(!e.is_retryable(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("shop.odd")
            && msg.contains("SYSTEM_TIME")
            && msg.contains("enable-partition-separator=false"),
        "{msg}"
    );
    assert!(
        list(&sink.store())
            .await
            .iter()
            .all(|p| !p.ends_with(".csv")),
        "nothing written"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `max-buffered-bytes` bounds what all the dispatchers of one storage sink hold together: the
/// dispatcher whose write takes the sink past it flushes its own buffers (and only its own), and
/// a written buffer leaves the total, so the others go on buffering under the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_s_dispatchers_together_hold_at_most_max_buffered_bytes() {
    let dir = tempdir("buffered");
    let uri = format!(
        "file://{}?date-separator=none&flush-interval=10m&max-buffered-bytes=4096",
        dir.display()
    );
    let sink = StorageSink::open_storage(storage_cfg(&uri)).expect("sink");
    let store = sink.store();
    let schemas = [
        Arc::new(simple_schema("db", "t1", 1, 1)),
        Arc::new(simple_schema("db", "t2", 2, 1)),
    ];
    let ids = [
        DispatcherId { epoch: 1, seq: 1 },
        DispatcherId { epoch: 1, seq: 2 },
    ];
    for (i, d) in ids.iter().enumerate() {
        sink.open(*d, Span::whole_table(TableId(i as u64 + 1)), 0)
            .await
            .expect("open");
    }
    let long = "x".repeat(60);
    let write = |which: usize, pk: u64| {
        let (sink, schema, d) = (&sink, schemas[which].clone(), ids[which]);
        let row = simple_insert(&schema, pk, &long, pk + 1, 0);
        async move {
            sink.write_rows(
                d,
                RowBatch {
                    schema,
                    rows: vec![row],
                },
            )
            .await
            .expect("write")
        }
    };
    let files = |table: &'static str| {
        let store = store.clone();
        async move {
            list(&store)
                .await
                .into_iter()
                .filter(|p| p.starts_with(&format!("db/{table}/")) && p.ends_with(".csv"))
                .count()
        }
    };
    // About 2.8 KiB in t1's buffer: under the bound, nothing is written.
    for pk in 0..35 {
        write(0, pk).await;
    }
    assert_eq!(files("t1").await, 0);
    // t2's rows take the sink past 4 KiB: t2's dispatcher writes its buffer, t1's keeps its own.
    let mut pk = 0;
    while files("t2").await == 0 {
        assert!(pk < 40, "t2 never flushed though the sink held over 4 KiB");
        write(1, pk).await;
        pk += 1;
    }
    assert!(pk > 1, "one row of t2 alone does not pass the bound");
    assert_eq!(files("t1").await, 0, "t1 flushed for t2's bytes");
    // The written bytes left the total: t1 goes on under the bound.
    for pk in 35..40 {
        write(0, pk).await;
    }
    assert_eq!(files("t1").await, 0, "t2's written buffer is still counted");
    for d in ids {
        sink.close(d).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
