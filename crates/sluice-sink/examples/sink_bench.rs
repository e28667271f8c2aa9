//! Sink benchmark (not a test): rows/s and MiB/s of encoding plus writing for csv and canal-json
//! to local files and to S3 (moto), of the Kafka sink (canal-json, debezium) to a local tansu
//! broker side by side with the blackhole sink, and of the MySQL sink on an insert-only workload
//! against a local MariaDB, side by side with MariaDB's `LOAD DATA` of the same rows (the
//! downstream's limit). Run: `cargo run --release -p sluice-sink --example sink_bench [ROWS]`;
//! `SINK_BENCH_CASES=storage,kafka,mysql` picks cases (default: all; `encode` alone: only the
//! encoding rows of the Kafka case, no broker). Prints a markdown table
//! (docs/sinks.md keeps the last measured one).

use futures::TryStreamExt;
use object_store::ObjectStore;
use sluice_sink::mysql::MysqlSink;
use sluice_sink::storage::StorageSink;
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{RowBatch, Sink};
use sluice_testkit::mariadb::MariaDb;
use sluice_testkit::moto::Moto;
use sluice_types::*;
use std::sync::Arc;
use std::time::Instant;

fn schema() -> TableSchema {
    let mut s = sluice_sink::testing::simple_schema("bench", "t", 1, 1);
    let mut c = s.columns[0].clone();
    c.name = "n".into();
    c.ty = ColumnType::Int;
    c.sql_type = "int".into();
    s.columns.push(c.clone());
    c.name = "x".into();
    c.ty = ColumnType::Double;
    c.sql_type = "double".into();
    s.columns.push(c.clone());
    c.name = "at".into();
    c.ty = ColumnType::DateTime;
    c.sql_type = "datetime(6)".into();
    c.decimals = 6;
    s.columns.push(c);
    s
}

const DDL: &str = "CREATE DATABASE bench; CREATE TABLE bench.t (id BIGINT PRIMARY KEY, v VARCHAR(64), n INT, x DOUBLE, at DATETIME(6))";

fn rows(s: &TableSchema, n: usize) -> Vec<RowEvent> {
    (0..n)
        .map(|i| RowEvent {
            table_id: s.table_id,
            schema_version: s.version,
            commit_ts: i as u64 / 10 + 1,
            commit_time_ms: 1_735_689_600_000,
            kind: RowKind::Insert,
            key: Key::row_u64(s.table_id, i as u64),
            before: None,
            after: Some(vec![
                Value::Int(i as i64),
                Value::Text(format!("value-{i:08}-some-text")),
                Value::Int((i % 1000) as i64),
                Value::Double(i as f64 / 7.0),
                Value::DateTime {
                    year: 2025,
                    month: 1,
                    day: 1,
                    hour: 12,
                    minute: (i % 60) as u8,
                    second: 7,
                    micros: (i % 1_000_000) as u32,
                },
            ]),
            snapshot: false,
            gtid: None,
        })
        .collect()
}

/// The rows as the batches a dispatcher hands over (1000 rows, ending on transaction boundaries:
/// 10 rows per commit ts). Built before a clock starts: what is timed is the sink's work, not
/// the benchmark's copying of its input.
fn batches(s: &Arc<TableSchema>, rows: &[RowEvent]) -> Vec<RowBatch> {
    rows.chunks(1000)
        .map(|chunk| RowBatch {
            schema: s.clone(),
            rows: chunk.to_vec(),
        })
        .collect()
}

async fn drive(sink: &dyn Sink, s: &Arc<TableSchema>, rows: &[RowEvent]) -> f64 {
    let d = DispatcherId { epoch: 1, seq: 1 };
    sink.open(d, Span::whole_table(s.table_id), 0)
        .await
        .expect("open");
    let batches = batches(s, rows);
    let t = Instant::now();
    for batch in batches {
        sink.write_rows(d, batch).await.expect("write");
    }
    sink.flush(d).await.expect("flush");
    let secs = t.elapsed().as_secs_f64();
    sink.close(d).await;
    secs
}

async fn bytes_written(store: &Arc<dyn ObjectStore>) -> u64 {
    let metas: Vec<object_store::ObjectMeta> = store.list(None).try_collect().await.expect("list");
    metas
        .iter()
        .filter(|m| m.location.as_ref().contains("CDC"))
        .map(|m| m.size)
        .sum()
}

fn line(what: &str, n: usize, secs: f64, bytes: u64) {
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "| {what} | {n} | {secs:.2} | {:.0} | {:.1} |",
        n as f64 / secs,
        mib / secs
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let s = Arc::new(schema());
    let data = rows(&s, n);
    println!("| what | rows | seconds | rows/s | MiB/s |\n|---|---|---|---|---|");
    let cases = std::env::var("SINK_BENCH_CASES").unwrap_or_else(|_| "storage,kafka,mysql".into());
    if cases.contains("storage") {
        storage_cases(&s, &data).await;
    }
    if cases.contains("kafka") {
        kafka_cases(&s, &data).await;
    } else if cases.contains("encode") {
        encode_cases(&s, &data);
    }
    if cases.contains("mysql") {
        mysql_cases(&s, &data).await;
    }
}

/// Encoding alone, per protocol (no broker, no sink): where the Kafka sink's time goes. Returns
/// the bytes each protocol encoded (canal-json, debezium).
fn encode_cases(s: &Arc<TableSchema>, data: &[RowEvent]) -> (u64, u64) {
    let n = data.len();
    let t = Instant::now();
    let mut canal_bytes = 0u64;
    for r in data {
        let mut v = String::new();
        sluice_sink::codec::canal::encode_row_message(&mut v, true, s, r).expect("canal");
        canal_bytes += v.len() as u64;
    }
    line(
        "encode only: canal-json",
        n,
        t.elapsed().as_secs_f64(),
        canal_bytes,
    );
    let t = Instant::now();
    let mut dbz_bytes = 0u64;
    let envelope = sluice_sink::codec::debezium::Envelope::new("bench", s);
    for r in data {
        let v = sluice_sink::codec::debezium::encode_row_value_with(
            &envelope,
            sluice_sink::codec::debezium::Origin {
                name: "bench",
                binlog_base: Some("mysql-bin"),
            },
            s,
            r,
        )
        .expect("dbz");
        let k = sluice_sink::codec::debezium::encode_key_with(&envelope, s, r);
        dbz_bytes += (v.len() + k.map_or(0, |k| k.len())) as u64;
    }
    line(
        "encode only: debezium",
        n,
        t.elapsed().as_secs_f64(),
        dbz_bytes,
    );
    (canal_bytes, dbz_bytes)
}

/// The Kafka sink per protocol against the blackhole sink on the same rows, alternating, best
/// of 3 each; MiB/s counts the encoded message values.
async fn kafka_cases(s: &Arc<TableSchema>, data: &[RowEvent]) {
    const ROUNDS: usize = 3;
    let n = data.len();
    let broker = sluice_testkit::kafka::Broker::start().expect("broker");
    let (canal_bytes, dbz_bytes) = encode_cases(s, data);
    let protos = [
        (
            "canal-json&enable-tidb-extension=true",
            "canal-json",
            canal_bytes,
        ),
        ("debezium", "debezium", dbz_bytes),
    ];
    let mut best = [f64::MAX; 3];
    for round in 0..ROUNDS {
        let hole = sluice_sink::open_sink("blackhole://")
            .await
            .expect("blackhole");
        best[0] = best[0].min(drive(hole.as_ref(), s, data).await);
        for (i, (params, name, _)) in protos.iter().enumerate() {
            let uri = broker.sink_uri(
                &format!("bench-{name}-{round}"),
                &format!("protocol={params}&partition-num=3"),
            );
            let sink = sluice_sink::open_sink(&uri).await.expect("kafka sink");
            best[i + 1] = best[i + 1].min(drive(sink.as_ref(), s, data).await);
        }
    }
    line(
        &format!("blackhole, best of {ROUNDS}"),
        n,
        best[0],
        canal_bytes,
    );
    for (i, (_, name, bytes)) in protos.iter().enumerate() {
        line(
            &format!("kafka {name} → tansu (3 partitions), best of {ROUNDS}"),
            n,
            best[i + 1],
            *bytes,
        );
        println!(
            "|   ratio to blackhole | | | {:.2}x | |",
            best[0] / best[i + 1]
        );
    }
}

async fn storage_cases(s: &Arc<TableSchema>, data: &[RowEvent]) {
    let n = data.len();
    let moto = Moto::start("sluice-bench").expect("moto");
    for proto in ["csv", "canal-json"] {
        for target in ["file", "s3"] {
            let dir =
                std::env::temp_dir().join(format!("sluice-bench-{proto}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let uri = match target {
                "file" => format!(
                    "file://{}?protocol={proto}&date-separator=none",
                    dir.display()
                ),
                _ => format!(
                    "{}&protocol={proto}&date-separator=none",
                    moto.sink_uri(&format!("b-{proto}"))
                ),
            };
            let SinkConfig::Storage(cfg) = SinkUri::parse(&uri).expect("uri").config else {
                panic!()
            };
            let sink = StorageSink::open_storage(cfg).expect("sink");
            let secs = drive(&sink, s, data).await;
            line(
                &format!("storage {proto} → {target}"),
                n,
                secs,
                bytes_written(&sink.store()).await,
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

async fn mysql_cases(s: &Arc<TableSchema>, data: &[RowEvent]) {
    let n = data.len();
    // MySQL sink vs LOAD DATA of the same rows into the same empty table, alternating, best of
    // ROUNDS each (the machine is shared: the best run is the least disturbed one).
    const ROUNDS: usize = 3;
    let db = MariaDb::start().expect("mariadb");
    db.exec(DDL).expect("ddl");
    // The URI's defaults unless SINK_PARAMS says otherwise.
    let params = std::env::var("SINK_PARAMS").unwrap_or_default();
    let SinkConfig::Mysql(cfg) = SinkUri::parse(&format!("{}/?{params}", db.url()))
        .expect("uri")
        .config
    else {
        panic!()
    };
    let sink = MysqlSink::connect(cfg).await.expect("connect");
    let tsv = std::env::temp_dir().join(format!("sluice-bench-{}.tsv", std::process::id()));
    let mut body = String::new();
    for r in data {
        let a = r.after.as_ref().expect("after");
        let cols: Vec<String> = a
            .iter()
            .zip(&s.columns)
            .map(|(v, c)| sluice_sink::codec::value_text(v, c).unwrap_or_else(|| "\\N".into()))
            .collect();
        body.push_str(&cols.join("\t"));
        body.push('\n');
    }
    std::fs::write(&tsv, body).expect("write tsv");
    // The same rows as multi-row REPLACE statements of 256 rows through the mariadb client, in one
    // transaction per statement: what the server needs for the statements the sink sends.
    let mut sql = String::from("SET time_zone='+00:00';\n");
    for chunk in data.chunks(256) {
        sql.push_str("REPLACE INTO bench.t VALUES ");
        let tuples: Vec<String> = chunk
            .iter()
            .map(|r| {
                let a = r.after.as_ref().expect("after");
                let vals: Vec<String> = a
                    .iter()
                    .zip(&s.columns)
                    .map(|(v, c)| {
                        format!(
                            "'{}'",
                            sluice_sink::codec::value_text(v, c).unwrap_or_default()
                        )
                    })
                    .collect();
                format!("({})", vals.join(","))
            })
            .collect();
        sql.push_str(&tuples.join(","));
        sql.push_str(";\n");
    }
    let (mut best_sink, mut best_load, mut best_cli) = (f64::MAX, f64::MAX, f64::MAX);
    for round in 0..ROUNDS {
        db.exec("TRUNCATE bench.t").expect("truncate");
        let d = DispatcherId {
            epoch: 1,
            seq: round as u64 + 1,
        };
        sink.open(d, Span::whole_table(s.table_id), 0)
            .await
            .expect("open");
        let batches = batches(s, data);
        let t = Instant::now();
        for batch in batches {
            sink.write_rows(d, batch).await.expect("write");
        }
        sink.flush(d).await.expect("flush");
        best_sink = best_sink.min(t.elapsed().as_secs_f64());
        sink.close(d).await;
        db.exec("TRUNCATE bench.t").expect("truncate");
        let t = Instant::now();
        db.exec(&format!(
            "LOAD DATA LOCAL INFILE '{}' INTO TABLE bench.t",
            tsv.display()
        ))
        .expect("load data");
        best_load = best_load.min(t.elapsed().as_secs_f64());
        db.exec("TRUNCATE bench.t").expect("truncate");
        let t = Instant::now();
        db.exec(&sql).expect("replace via client");
        best_cli = best_cli.min(t.elapsed().as_secs_f64());
    }
    line(
        &format!(
            "mysql sink ({}), best of {ROUNDS}",
            if params.is_empty() {
                "defaults"
            } else {
                &params
            }
        ),
        n,
        best_sink,
        0,
    );
    line(
        &format!("MariaDB LOAD DATA LOCAL, same rows, best of {ROUNDS}"),
        n,
        best_load,
        0,
    );
    line(
        &format!("mariadb client, REPLACE of 256 rows per statement, best of {ROUNDS}"),
        n,
        best_cli,
        0,
    );
    println!(
        "\nmysql sink at {:.0}% of LOAD DATA (sink applied upsert runs with LOAD DATA LOCAL: {})",
        100.0 * best_load / best_sink,
        sink.uses_load_data()
    );
    let _ = std::fs::remove_file(tsv);
}
