//! The Kafka path end to end on real processes: upstream MariaDB → `sluice server` → a
//! Kafka-protocol broker (tansu) → `sluice consume --kafka` → a downstream MariaDB, compared
//! with `sluice check`, for canal-json (TiDB extension), Debezium, the Open Protocol and the
//! Simple protocol over
//! several partitions, and canal-json with its large messages through a claim-check store, with
//! DDLs of every kind between the rows, a table of many column types, updates that move a
//! row to another key (so to another partition), and a `kill -9` of the node mid-run
//! (at-least-once: the replay adds copies, never a gap), connections to the broker cut again and
//! again mid-run, Avro through a schema registry with a topic per table, and TLS with client
//! certificates (a TLS front that checks them before the broker). And the URI mistakes a user
//! makes are refused at `changefeed create`, with nothing created.

mod common;
use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sluice_testkit::kafka::Broker;
use sluice_testkit::mariadb::MariaDb;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Tables that exist before the server starts, with the same rows on both sides.
const SEED: &str = "CREATE DATABASE app;
    CREATE TABLE app.a (id INT PRIMARY KEY, v VARCHAR(32), n INT);
    CREATE TABLE app.types (id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, bu BIGINT UNSIGNED,
        de DECIMAL(12,3), fl FLOAT, dbl DOUBLE, ch CHAR(8), tx TEXT, bi BINARY(4), vb VARBINARY(16),
        bl BLOB, d DATE, t TIME(3), dt DATETIME(6), ts TIMESTAMP(6) NULL, y YEAR, e ENUM('a','b','c'),
        s SET('x','y','z'), b1 BIT(1), b10 BIT(10), j JSON);
    INSERT INTO app.a VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3);";

fn types_rows(up: &MariaDb, from: u32, to: u32) {
    for i in from..to {
        up.exec(&format!(
            "INSERT INTO app.types VALUES ({i}, -{m}, 65535, 18446744073709551615, -123456.125, 1.5, -2.25e-10,
                 'c{i}', 'text é \\\\N {i}', 0x000102ff, 0x00222c0aff, 0xdeadbeef, '2024-02-29', '-838:59:58.999',
                 '1999-12-31 23:59:59.123456', '2023-11-14 22:13:20.654321', 2155, 'b', 'x,z', b'1', b'1000000001',
                 '{{\"k\": [1, \"two\", null]}}')",
            m = i % 128
        ))
        .expect("types row");
    }
    up.exec(&format!("UPDATE app.types SET tx = NULL, d = '1970-01-01', t = '00:00:00', b10 = b'11' WHERE id = {from}"))
        .expect("types update");
}

/// One transaction of round `r` on app.a: an upsert, updates, a key move and a delete.
fn dml_round(up: &MariaDb, r: u32) {
    up.exec(&format!(
        "BEGIN;
         INSERT INTO app.a (id, v, n) VALUES ({a}, 'r{r}', {r}) ON DUPLICATE KEY UPDATE n = n + 100;
         UPDATE app.a SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 3 = {m};
         UPDATE app.a SET id = id + 1000 WHERE id = {mv};
         DELETE FROM app.a WHERE id = {d};
         COMMIT;",
        a = 10 + r,
        m = r % 3,
        mv = 10 + r.saturating_sub(2),
        d = 10 + r.saturating_sub(4),
    ))
    .expect("traffic round");
}

/// DML across tables in one transaction, key moves, and DDL between them.
fn traffic(up: &MariaDb, from: u32, to: u32) {
    for r in from..to {
        dml_round(up, r);
        match r {
            2 => up.exec("ALTER TABLE app.a ADD COLUMN note VARCHAR(16) DEFAULT 'x'; UPDATE app.a SET note = CONCAT('n', id) WHERE id < 5;"),
            3 => up.exec("CREATE TABLE app.c (k VARCHAR(8) PRIMARY KEY, v INT); INSERT INTO app.c VALUES ('a', 1), ('b', 2); UPDATE app.c SET v = 20 WHERE k = 'b';"),
            4 => up.exec("CREATE TABLE app.tr (id INT PRIMARY KEY); INSERT INTO app.tr VALUES (1), (2); TRUNCATE TABLE app.tr; INSERT INTO app.tr VALUES (3);"),
            5 => up.exec("RENAME TABLE app.c TO app.c2; INSERT INTO app.c2 VALUES ('c', 3); DELETE FROM app.c2 WHERE k = 'a';"),
            6 => up.exec("CREATE TABLE app.gone (id INT PRIMARY KEY); INSERT INTO app.gone VALUES (1); DROP TABLE app.gone; ALTER TABLE app.a DROP COLUMN note;"),
            _ => Ok(()),
        }
        .expect("ddl round");
    }
}

/// Consumes `uri` into a fresh downstream seeded like the upstream was, and checks it equal.
fn consume_and_check(out: &Outputs, up_url: &str, uri: &str, name: &str) {
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    down.exec(SEED).expect("seed downstream");
    let r = sluice(
        out,
        &[
            "consume",
            "--kafka",
            uri,
            "--downstream",
            &format!("{down_url}/"),
        ],
    );
    assert_eq!(r.code, 0, "consume {name}: {} {}", r.stdout, r.stderr);
    let r = check(out, up_url, &down_url, "app.*,shop.*");
    assert_eq!(r.code, 0, "check {name}: {} {}", r.stdout, r.stderr);
    for t in [
        "app.a",
        "app.types",
        "app.c2",
        "app.tr",
        "shop.accounts",
        "shop.events",
    ] {
        assert!(
            r.stdout.contains(&format!("{t}: equal")),
            "{name}: {t} not compared equal: {}",
            r.stdout
        );
    }
    let gone = down
        .query("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'app' AND table_name IN ('gone', 'c')")
        .expect("query");
    assert_eq!(
        gone[0][0], "0",
        "{name}: a dropped or renamed table is still downstream"
    );
}

#[test]
fn every_protocol_through_kafka_consumes_into_an_equal_downstream() {
    let out = Outputs::default();
    let dir = tmpdir("kafka");
    let broker = Broker::start().expect("broker");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let server = Server::start(&dir, &up_url);
    let feeds = [
        (
            "canal",
            broker.sink_uri(
                "cdc-canal",
                "protocol=canal-json&enable-tidb-extension=true&partition-num=3",
            ),
        ),
        (
            "dbz",
            broker.sink_uri("cdc-dbz", "protocol=debezium&partition-num=3"),
        ),
        (
            "open",
            broker.sink_uri("cdc-open", "protocol=open-protocol&partition-num=3"),
        ),
        (
            "simple",
            broker.sink_uri("cdc-simple", "protocol=simple&partition-num=3"),
        ),
        // Every app.types row message is over 1 KiB: each goes through the claim-check store.
        (
            "claims",
            broker.sink_uri(
                "cdc-claims",
                &format!(
                    "protocol=canal-json&enable-tidb-extension=true&partition-num=2&max-message-bytes=1024&large-message-handle-option=claim-check&claim-check-storage-uri=file://{}",
                    dir.join("claims").display()
                ),
            ),
        ),
    ];
    for (name, uri) in &feeds {
        create_changefeed(&out, &server.url(), name, uri);
    }
    types_rows(&up, 1, 20);
    traffic(&up, 0, 8);
    workload(&up, "shop", 0, 10);
    let target = master_ts(&up);
    for (name, _) in &feeds {
        wait_checkpoint(&out, &server.url(), name, target, 120);
    }
    for (name, uri) in &feeds {
        consume_and_check(&out, &up_url, uri, name);
    }
    debezium_rows_name_their_gtid_and_file(&broker, &up, "cdc-dbz");
    let claimed = std::fs::read_dir(dir.join("claims")).map_or(0, |d| d.count());
    assert!(
        claimed >= 19,
        "the types rows went through the claim-check store: {claimed} objects"
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kill -9` of the node while rows flow: the restarted node replays from the checkpoint, the
/// topic holds copies of what was sent after it (at-least-once), or none of them
/// (`transactional=true`: the successor skips what the broker committed), and the consumer's
/// result is equal either way.
#[test]
fn a_killed_node_loses_nothing_in_kafka() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-kill");
    let broker = Broker::start().expect("broker");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let mut server = Server::start(&dir, &up_url);
    let feeds = [
        (
            "k",
            broker.sink_uri(
                "cdc-kill",
                "protocol=canal-json&enable-tidb-extension=true&partition-num=2",
            ),
        ),
        (
            "kt",
            broker.sink_uri(
                "cdc-kill-eos",
                "protocol=canal-json&enable-tidb-extension=true&partition-num=2&transactional=true",
            ),
        ),
    ];
    for (name, uri) in &feeds {
        create_changefeed(&out, &server.url(), name, uri);
    }
    types_rows(&up, 1, 5);
    traffic(&up, 0, 4);
    workload(&up, "shop", 0, 5);
    server.kill9();
    traffic(&up, 4, 8);
    workload(&up, "shop", 5, 5);
    server.restart_after_kill();
    let target = master_ts(&up);
    for (name, uri) in &feeds {
        wait_checkpoint(&out, &server.url(), name, target, 120);
        consume_and_check(&out, &up_url, uri, &format!("{name} after kill -9"));
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The broker frozen (SIGSTOP) for several seconds while rows flow: the changefeed waits and
/// retries (its checkpoint holds), and once the broker runs again every row arrives: the
/// consumer's result is equal.
#[test]
fn a_frozen_broker_holds_the_checkpoint_and_loses_nothing() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-frozen");
    let mut broker = Broker::start().expect("broker");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let server = Server::start(&dir, &up_url);
    let uri = broker.sink_uri(
        "cdc-frozen",
        "protocol=canal-json&enable-tidb-extension=true&partition-num=2",
    );
    create_changefeed(&out, &server.url(), "f", &uri);
    traffic(&up, 0, 3);
    wait_checkpoint(&out, &server.url(), "f", master_ts(&up), 60);
    broker.pause();
    traffic(&up, 3, 8);
    workload(&up, "shop", 0, 6);
    types_rows(&up, 1, 4);
    let target = master_ts(&up);
    std::thread::sleep(std::time::Duration::from_secs(6));
    let v = feed(&out, &server.url(), "f");
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(0) < target,
        "the checkpoint passed rows the frozen broker never took: {v}"
    );
    broker.resume();
    wait_checkpoint(&out, &server.url(), "f", target, 180);
    consume_and_check(&out, &up_url, &uri, "after a frozen broker");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every connection to the broker reset again and again while rows flow (a proxy in front of
/// the broker cuts them; the clients reconnect): delivery is retried, the checkpoint waits for
/// acknowledgements, and nothing is lost or reordered per key.
#[test]
fn connections_cut_mid_run_lose_nothing() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-cuts");
    let broker = Broker::start_behind_proxy().expect("broker");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let server = Server::start(&dir, &up_url);
    let uri = broker.sink_uri(
        "cdc-cuts",
        "protocol=canal-json&enable-tidb-extension=true&partition-num=3",
    );
    create_changefeed(&out, &server.url(), "cuts", &uri);
    traffic(&up, 0, 2);
    wait_checkpoint(&out, &server.url(), "cuts", master_ts(&up), 60);
    let done = std::sync::atomic::AtomicBool::new(false);
    let cuts = std::thread::scope(|s| {
        let cutter = s.spawn(|| {
            let mut cut = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(300));
                cut += broker.cut_connections();
            }
            cut
        });
        traffic(&up, 2, 8);
        workload(&up, "shop", 0, 10);
        types_rows(&up, 1, 12);
        std::thread::sleep(Duration::from_secs(2));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        cutter.join().expect("cutter")
    });
    assert!(cuts >= 5, "connections were cut while rows flowed: {cuts}");
    wait_checkpoint(&out, &server.url(), "cuts", master_ts(&up), 180);
    let v = feed(&out, &server.url(), "cuts");
    assert_eq!(v["state"], "normal", "{v}");
    consume_and_check(&out, &up_url, &uri, "after cut connections");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_kafka_uris_are_refused_at_create() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-bad");
    let (_up, up_url) = mariadb_with_user(UP_PASS);
    let server = Server::start(&dir, &up_url);
    let dead = free_port();
    let cases = [
        (format!("kafka://127.0.0.1:{dead}/t"), "protocol"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=avro"), "schema-registry"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=avro&schema-registry=http%3A%2F%2F127.0.0.1%3A{dead}"), "{schema} and {table}"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=simple-avro"), "not supported yet"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=canal-json&sasl-mechanism=GSSAPI&sasl-user=u&sasl-password=hunter2pw"), "not supported yet"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=canal-json&sasl-user=u"), "sasl-password"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=canal-json&ca=/nonexistent/ca.pem"), "cannot be read"),
        (format!("kafka://127.0.0.1:{dead}/t?protocol=canal-json&dial-timeout=1s"), "Kafka"),
    ];
    for (uri, want) in &cases {
        let said = create_refused(&out, &server, uri);
        assert!(said.contains(want), "{uri}: {said}");
        assert!(!said.contains("hunter2pw"), "{said}");
    }
    let r = sluice(
        &out,
        &["cli", "--server", &server.url(), "changefeed", "list"],
    );
    assert!(
        !r.stdout.contains("\"refused\""),
        "a refused changefeed exists: {}",
        r.stdout
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// DML of every kind without DDL (Avro sends no DDL: the user keeps the downstream's tables).
fn avro_traffic(up: &MariaDb, from: u32, to: u32) {
    for r in from..to {
        dml_round(up, r);
    }
}

/// `protocol=avro` end to end: every table in its own topic, schemas in a registry (the
/// testkit's), a nullable column added mid-run (a second, compatible schema version; the
/// test adds it downstream, as an Avro user does), deletes as tombstones, key moves across
/// partitions; `sluice consume` of the topic pattern gives a downstream equal to the upstream.
#[test]
fn avro_through_kafka_consumes_into_an_equal_downstream() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-avro");
    let broker = Broker::start().expect("broker");
    let registry = sluice_testkit::registry::Registry::start().expect("registry");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let shop = "CREATE DATABASE shop;
        CREATE TABLE shop.accounts (id INT PRIMARY KEY, owner VARCHAR(64), balance DECIMAL(12,2), updated DATETIME(6));
        CREATE TABLE shop.events (id BIGINT PRIMARY KEY AUTO_INCREMENT, account INT, kind ENUM('open','pay','close'), payload JSON, at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP(3));";
    up.exec(SEED).expect("seed upstream");
    up.exec(shop).expect("shop upstream");
    let server = Server::start(&dir, &up_url);
    let uri = broker.sink_uri(
        "avro-base",
        "protocol=avro&partition-num=3&enable-tidb-extension=true",
    );
    let rules = "[[sink.dispatchers]]\nmatcher = ['app.*', 'shop.*']\ntopic = 'av_{schema}_{table}'\npartition = 'index-value'\n";
    create_changefeed_with(
        &out,
        &server.url(),
        "avro",
        &uri,
        Some((&dir, rules)),
        &["--schema-registry", &registry.url()],
    );
    types_rows(&up, 1, 20);
    avro_traffic(&up, 0, 4);
    workload(&up, "shop", 1, 8);
    up.exec("ALTER TABLE app.a ADD COLUMN note VARCHAR(16) NULL; UPDATE app.a SET note = CONCAT('n', id) WHERE id % 2 = 0;")
        .expect("alter");
    avro_traffic(&up, 4, 8);
    up.exec("DELETE FROM app.types WHERE id % 5 = 0; UPDATE app.types SET ch = 'moved' WHERE id % 5 = 1;")
        .expect("types changes");
    wait_checkpoint(&out, &server.url(), "avro", master_ts(&up), 120);
    let subjects = registry.subjects();
    assert_eq!(
        subjects.get("av_app_a-value").map(Vec::len),
        Some(2),
        "the added column is a second value version: {subjects:?}"
    );
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    down.exec(SEED).expect("seed downstream");
    down.exec(shop).expect("shop downstream");
    down.exec("ALTER TABLE app.a ADD COLUMN note VARCHAR(16) NULL")
        .expect("alter downstream");
    let pattern = broker.sink_uri("av_*", "protocol=avro&enable-tidb-extension=true");
    let r = sluice(
        &out,
        &[
            "consume",
            "--kafka",
            &pattern,
            "--schema-registry",
            &registry.url(),
            "--downstream",
            &format!("{down_url}/"),
        ],
    );
    assert_eq!(r.code, 0, "consume: {} {}", r.stdout, r.stderr);
    let r = check(&out, &up_url, &down_url, "app.*,shop.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    for t in ["app.a", "app.types", "shop.accounts", "shop.events"] {
        assert!(
            r.stdout.contains(&format!("{t}: equal")),
            "{t} not compared equal: {}",
            r.stdout
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every message of `topic`: (partition, value), read until nothing came for two seconds.
fn read_topic(broker: &Broker, topic: &str) -> Vec<(i32, serde_json::Value)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.address())
        .set("group.id", "routing-reader")
        .create()
        .expect("consumer");
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let mut tpl = TopicPartitionList::new();
    for t in md.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .expect("partition");
        }
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut last = Instant::now();
    // Watermarks keep coming while the changefeed runs (its checkpoint moves every second):
    // only other messages count as activity.
    while last.elapsed() < Duration::from_secs(2) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            let v: serde_json::Value =
                serde_json::from_slice(m.payload().unwrap_or_default()).expect("json");
            if v["type"] != "TIDB_WATERMARK" {
                last = Instant::now();
            }
            out.push((m.partition(), v));
        }
    }
    out
}

/// Every Debezium row message of `topic` names its transaction's GTID and the server that
/// wrote it (`source.gtid` `domain-server-seq`, `source.server_id`), as the upstream has them,
/// and the binlog file it ended in (`source.file`, the upstream's file of `commit_ts`'s index).
fn debezium_rows_name_their_gtid_and_file(broker: &Broker, up: &MariaDb, topic: &str) {
    let server: u64 = up.query("SELECT @@server_id").expect("server id")[0][0]
        .parse()
        .expect("number");
    let head = up.query("SHOW MASTER STATUS").expect("master status")[0][0].clone();
    let (base, _) = head.rsplit_once('.').expect("a binlog file name");
    let rows: Vec<serde_json::Value> = read_topic(broker, topic)
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| v["payload"]["op"].is_string())
        .collect();
    assert!(rows.len() > 50, "{} row messages", rows.len());
    let mut seqs = BTreeSet::new();
    for v in &rows {
        let src = &v["payload"]["source"];
        let gtid = src["gtid"]
            .as_str()
            .unwrap_or_else(|| panic!("no gtid: {src}"));
        let parts: Vec<u64> = gtid.split('-').filter_map(|p| p.parse().ok()).collect();
        assert_eq!(parts.len(), 3, "{gtid}");
        assert_eq!(parts[1], server, "{gtid}");
        assert_eq!(src["server_id"], server, "{src}");
        let ts = src["commit_ts"].as_u64().expect("commit_ts");
        assert_eq!(src["file"], format!("{base}.{:06}", ts >> 32), "{src}");
        assert_eq!(src["pos"], ts & 0xffff_ffff, "{src}");
        seqs.insert(parts[2]);
    }
    assert!(
        seqs.len() > 10,
        "the transactions have their own GTIDs: {seqs:?}"
    );
}

/// `[[sink.dispatchers]]` of the changefeed TOML route messages: a topic expression per
/// table, the index-value dispatcher keeps each key in one partition and spreads the keys;
/// rules a Kafka sink cannot use, or any rule on another sink, are refused at create.
#[test]
fn dispatcher_rules_route_topics_and_partitions() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-routes");
    let broker = Broker::start().expect("broker");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let server = Server::start(&dir, &up_url);
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write toml");
        p.display().to_string()
    };
    let good = write("routes.toml", "[[sink.dispatchers]]\nmatcher = ['shop.*']\ntopic = 'shop-{table}'\npartition = 'index-value'\n\n[[sink.dispatchers]]\nmatcher = ['app.*']\npartition = 'index-value'\n");
    let uri = broker.sink_uri(
        "cdc-base",
        "protocol=canal-json&enable-tidb-extension=true&partition-num=3",
    );
    let create = |id: &str, sink: &str, cfg: &str| {
        try_create_changefeed(&out, &server.url(), id, sink, &["--config", cfg])
    };
    let bad = write(
        "bad.toml",
        "[[sink.dispatchers]]\nmatcher = ['*.*']\npartition = 'rowid'\n",
    );
    let r = create("bad1", &uri, &bad);
    assert!(
        r.code != 0 && (r.stderr.contains("rowid") || r.stdout.contains("rowid")),
        "{} {}",
        r.stdout,
        r.stderr
    );
    let r = create("bad2", "blackhole://", &good);
    assert!(
        r.code != 0 && (r.stderr.contains("kafka") || r.stdout.contains("kafka")),
        "{} {}",
        r.stdout,
        r.stderr
    );
    let r = create("routed", &uri, &good);
    assert_eq!(r.code, 0, "create: {} {}", r.stdout, r.stderr);
    traffic(&up, 0, 8);
    workload(&up, "shop", 0, 6);
    wait_checkpoint(&out, &server.url(), "routed", master_ts(&up), 120);
    let rows =
        |msgs: &[(i32, serde_json::Value)], table: &str| -> BTreeMap<String, BTreeSet<i32>> {
            let mut by_key: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
            for (p, v) in msgs
                .iter()
                .filter(|(_, v)| v["isDdl"] == false && v["table"] == table)
            {
                by_key
                    .entry(v["data"][0]["id"].to_string())
                    .or_default()
                    .insert(*p);
            }
            by_key
        };
    let accounts = read_topic(&broker, "shop-accounts");
    let keys = rows(&accounts, "accounts");
    assert!(
        keys.len() > 20,
        "shop.accounts rows are in their own topic: {} keys",
        keys.len()
    );
    assert!(
        keys.values().all(|ps| ps.len() == 1),
        "a key in two partitions: {keys:?}"
    );
    let used: BTreeSet<i32> = keys.values().flatten().copied().collect();
    assert_eq!(
        used.len(),
        3,
        "index-value spreads the keys over the partitions: {used:?}"
    );
    assert!(accounts.iter().all(|(_, v)| v["table"] == "accounts"
        || v["type"] == "TIDB_WATERMARK"
        || v["isDdl"] == true));
    let base = read_topic(&broker, "cdc-base");
    assert!(
        !rows(&base, "a").is_empty(),
        "app.a stays in the URI's topic"
    );
    assert!(
        rows(&base, "accounts").is_empty(),
        "shop.accounts went to the URI's topic too"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `changefeed create` of `uri`, which must be refused; returns what it printed.
fn create_refused(out: &Outputs, server: &Server, uri: &str) -> String {
    let r = try_create_changefeed(out, &server.url(), "refused", uri, &[]);
    assert_ne!(r.code, 0, "{uri} was accepted: {}", r.stdout);
    format!("{} {}", r.stdout, r.stderr)
}

/// TLS with client certificates: the broker is reachable only through a TLS front that checks
/// the client's certificate against a throwaway authority. With `ca`, `cert` and `key` the
/// changefeed writes over TLS and `sluice consume` reads it back into an equal downstream;
/// trusting only the system's authorities, or without a client certificate, the create is
/// refused (the handshake fails), with nothing created.
#[test]
fn tls_with_client_certificates_replicates_and_a_wrong_trust_is_refused() {
    let out = Outputs::default();
    let dir = tmpdir("kafka-tls");
    let broker = Broker::start_behind_tls().expect("broker behind TLS");
    let c = broker.certificates().expect("certificates").clone();
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let server = Server::start(&dir, &up_url);
    let base = "protocol=canal-json&enable-tidb-extension=true&partition-num=2&dial-timeout=3s";
    let client = format!(
        "cert={}&key={}",
        c.client_cert.display(),
        c.client_key.display()
    );
    for params in [
        format!("{base}&enable-tls=true&{client}"),
        format!("{base}&ca={}", c.ca.display()),
        base.to_string(),
    ] {
        let said = create_refused(&out, &server, &broker.sink_uri("cdc-tls", &params));
        assert!(
            said.contains("Kafka") || said.contains("metadata"),
            "{params}: {said}"
        );
        // With TLS on, the refusal says what to check.
        assert_eq!(
            said.contains("speak TLS"),
            params != base,
            "{params}: {said}"
        );
    }
    let uri = broker.sink_uri("cdc-tls", &format!("{base}&ca={}&{client}", c.ca.display()));
    create_changefeed(&out, &server.url(), "tls", &uri);
    types_rows(&up, 1, 20);
    traffic(&up, 0, 8);
    workload(&up, "shop", 0, 10);
    wait_checkpoint(&out, &server.url(), "tls", master_ts(&up), 120);
    consume_and_check(&out, &up_url, &uri, "tls");
    let v = feed(&out, &server.url(), "tls");
    assert_eq!(v["state"], "normal", "{v}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
