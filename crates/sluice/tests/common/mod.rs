//! Harness for the binary's end-to-end tests: real `sluice server` processes against real
//! MariaDB instances from `sluice-testkit`, driven through the `sluice` binary and the HTTP API.
//! Every output the tests see (server logs, API bodies, CLI stdout/stderr) is kept so that
//! [`Outputs::assert_no_secret`] can search it for the test passwords.
#![allow(dead_code)]

pub mod cluster;

use serde_json::Value;
use sluice_testkit::mariadb::MariaDb;
pub use sluice_testkit::scratch::ScratchDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// Password of the `sluice` user created on every test MariaDB.
pub const UP_PASS: &str = "Up-s3cret-7731";
pub const DOWN_PASS: &str = "Down-s3cret-4410";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// The test's scratch directory: removed when it is dropped after the test passed, kept when the
/// test panicked (its server logs and data dir are then there to read).
pub fn tmpdir(name: &str) -> ScratchDir {
    ScratchDir::new("sluice-e2e", name).expect("tmpdir")
}

/// A MariaDB with a password user `sluice` (replication privileges), returning its URL.
pub fn mariadb_with_user(pass: &str) -> (MariaDb, String) {
    let db = MariaDb::start().expect("mariadb");
    db.exec(&format!(
        "CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY '{pass}'; GRANT ALL PRIVILEGES ON *.* TO 'sluice'@'127.0.0.1' WITH GRANT OPTION;"
    ))
    .expect("create user");
    let url = format!("mysql://sluice:{pass}@127.0.0.1:{}", db.port());
    (db, url)
}

pub fn master_ts(db: &MariaDb) -> u64 {
    let (file, pos) = db.master_status().expect("master status");
    let idx: u64 = file
        .rsplit('.')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("binlog index");
    (idx << 32) | pos
}

#[derive(Default)]
pub struct Outputs(Mutex<Vec<String>>);

impl Outputs {
    pub fn add(&self, s: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(s.to_string());
    }
    pub fn assert_no_secret(&self, logs: &[&Path]) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
        for l in logs {
            all.push_str(&std::fs::read_to_string(l).unwrap_or_default());
        }
        assert!(!all.is_empty(), "no output was collected");
        for p in [UP_PASS, DOWN_PASS] {
            assert!(
                !all.contains(p),
                "a test password appears in the output: ...{}...",
                {
                    let i = all.find(p).unwrap_or(0);
                    &all[i.saturating_sub(200)..(i + 50).min(all.len())]
                }
            );
        }
    }
}

pub struct Server {
    pub child: Option<Child>,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub upstream: String,
    pub extra: Vec<String>,
    runs: u32,
}

impl Server {
    pub fn start(dir: &Path, upstream: &str) -> Server {
        Self::start_with(dir, upstream, &[])
    }

    pub fn start_with(dir: &Path, upstream: &str, extra: &[&str]) -> Server {
        let mut s = Server {
            child: None,
            addr: format!("127.0.0.1:{}", free_port()),
            data_dir: dir.join("data"),
            log: dir.join("server.log"),
            upstream: upstream.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            runs: 0,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        self.runs += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let err = log.try_clone().expect("log");
        let child = Command::new(BIN)
            .args(["server", "--addr", &self.addr, "--data-dir"])
            .arg(&self.data_dir)
            .args(["--upstream", &self.upstream])
            .args(&self.extra)
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn server");
        self.child = Some(child);
        self.wait_ready();
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = api_raw(&self.url(), "GET", "/api/v2/health", None) {
                return;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!(
                        "server exited with {st}: {}",
                        std::fs::read_to_string(&self.log).unwrap_or_default()
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "server not ready: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn sigterm(&mut self) -> Option<std::process::ExitStatus> {
        let c = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let mut c = c;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Start again after a kill or an exit (same address and data dir).
    pub fn restart_after_kill(&mut self) {
        self.child = None;
        self.spawn();
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn api_raw(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    api_within(base, method, path, body, Duration::from_secs(60))
}

/// One API call that gives up after `timeout`.
pub fn api_within(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Value), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let b = body.map(|b| b.to_string().into_bytes());
    let r = rt
        .block_on(sluice_server::client::request(
            base,
            method,
            path,
            b.as_deref(),
            timeout,
        ))
        .map_err(|e| e.to_string())?;
    let v = if r.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&r.body)
            .unwrap_or(Value::String(String::from_utf8_lossy(&r.body).into()))
    };
    Ok((r.status, v))
}

pub fn api(
    out: &Outputs,
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let (s, v) =
        api_raw(base, method, path, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    out.add(&v.to_string());
    (s, v)
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn sluice(out: &Outputs, args: &[&str]) -> Run {
    let o = Command::new(BIN).args(args).output().expect("run sluice");
    let r = Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    out.add(&r.stdout);
    out.add(&r.stderr);
    r
}

/// Polls `f` until it returns `Some`, or panics with what `f` last saw after `secs`.
pub fn wait_for<T>(what: &str, secs: u64, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what} not reached within {secs} s: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

pub fn create_changefeed(out: &Outputs, server: &str, id: &str, sink: &str) {
    create_changefeed_with(out, server, id, sink, None, &[]);
}

/// `changefeed create -c ID --sink-uri SINK` plus `extra` arguments, expecting success; with
/// `toml`, that changefeed TOML is written beside the data and passed as `--config`.
pub fn create_changefeed_with(
    out: &Outputs,
    server: &str,
    id: &str,
    sink: &str,
    toml: Option<(&Path, &str)>,
    extra: &[&str],
) {
    let mut args = create_args(server, id, sink);
    let path;
    if let Some((dir, text)) = toml {
        path = dir.join(format!("{id}.toml"));
        std::fs::write(&path, text).expect("changefeed toml");
        args.extend(["--config", path.to_str().unwrap_or_default()]);
    }
    args.extend_from_slice(extra);
    let r = sluice(out, &args);
    assert_eq!(r.code, 0, "create: {} {}", r.stdout, r.stderr);
}

/// The arguments of `changefeed create -c ID --sink-uri SINK`.
fn create_args<'a>(server: &'a str, id: &'a str, sink: &'a str) -> Vec<&'a str> {
    vec![
        "cli",
        "--server",
        server,
        "changefeed",
        "create",
        "-c",
        id,
        "--sink-uri",
        sink,
    ]
}

/// `changefeed create -c ID --sink-uri SINK` plus `extra` arguments, whatever it answers (for
/// tests of refusals).
pub fn try_create_changefeed(
    out: &Outputs,
    server: &str,
    id: &str,
    sink: &str,
    extra: &[&str],
) -> Run {
    let mut args = create_args(server, id, sink);
    args.extend_from_slice(extra);
    sluice(out, &args)
}

/// Waits until the changefeed's snapshot copy reads `finished`.
pub fn wait_snapshot_finished(out: &Outputs, server: &str, id: &str, secs: u64) {
    wait_for(&format!("the snapshot of {id} to finish"), secs, || {
        let v = feed(out, server, id);
        (v["snapshot"]["state"] == "finished")
            .then_some(())
            .ok_or(v.to_string())
    });
}

/// Runs `sql` with the `mariadb` client on a server's socket (from any thread); true on success.
pub fn exec_on_socket(socket: &Path, sql: &str) -> bool {
    Command::new("mariadb")
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["-uroot", "-e", sql])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Waits until the changefeed's checkpoint reaches `ts`.
pub fn wait_checkpoint(out: &Outputs, server: &str, id: &str, ts: u64, secs: u64) {
    wait_for(&format!("checkpoint {ts} of {id}"), secs, || {
        let (s, v) = api_raw(server, "GET", &format!("/api/v2/changefeeds/{id}"), None)?;
        out.add(&v.to_string());
        let cp = v["checkpoint_ts"].as_u64().unwrap_or(0);
        if s == 200 && cp >= ts {
            Ok(())
        } else {
            Err(format!("status {s}: {v}"))
        }
    })
}

/// A workload with DDL: creates `db`, tables, inserts, updates, deletes, an ALTER, a table
/// created mid-stream, a truncate-free mix. `rounds` controls its size.
pub fn workload(db: &MariaDb, schema: &str, from: u32, rounds: u32) {
    if from == 0 {
        db.exec(&format!(
            "CREATE DATABASE IF NOT EXISTS {schema};
             CREATE TABLE {schema}.accounts (id INT PRIMARY KEY, owner VARCHAR(64), balance DECIMAL(12,2), updated DATETIME(6));
             CREATE TABLE {schema}.events (id BIGINT PRIMARY KEY AUTO_INCREMENT, account INT, kind ENUM('open','pay','close'), payload JSON, at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP(3));"
        ))
        .expect("schema");
    }
    for r in from..from + rounds {
        let mut sql = String::from("BEGIN;");
        for k in 0..20u32 {
            let id = r * 20 + k;
            sql.push_str(&format!(
                "INSERT INTO {schema}.accounts (id, owner, balance, updated) VALUES ({id}, 'owner-{id}', {id}.25, NOW(6)) ON DUPLICATE KEY UPDATE balance = balance + 1;
                 INSERT INTO {schema}.events (account, kind, payload) VALUES ({id}, 'pay', '{{\"n\": {id}, \"s\": \"x\\\\ty\"}}');"
            ));
        }
        sql.push_str(&format!(
            "UPDATE {schema}.accounts SET balance = balance * 2, owner = CONCAT(owner, '-u') WHERE id % 7 = {m};
             DELETE FROM {schema}.accounts WHERE id % 11 = {d} AND id < {lim};
             COMMIT;",
            m = r % 7,
            d = r % 11,
            lim = r * 20
        ));
        db.exec(&sql).expect("workload round");
        if from == 0 && r == rounds / 2 {
            db.exec(&format!(
                "ALTER TABLE {schema}.accounts ADD COLUMN note VARCHAR(32) DEFAULT 'n';
                 CREATE TABLE IF NOT EXISTS {schema}.late_{r} (k VARCHAR(16) PRIMARY KEY, v INT);
                 INSERT INTO {schema}.late_{r} VALUES ('a', 1), ('b', 2);
                 UPDATE {schema}.late_{r} SET v = v + 10 WHERE k = 'a';"
            ))
            .expect("ddl round");
        }
    }
}

pub fn check(out: &Outputs, up: &str, down: &str, tables: &str) -> Run {
    sluice(
        out,
        &[
            "check",
            "--upstream",
            up,
            "--downstream",
            down,
            "--tables",
            tables,
        ],
    )
}

/// The changefeed `id` as `GET /api/v2/changefeeds/{id}` shows it.
pub fn feed(out: &Outputs, server: &str, id: &str) -> Value {
    api(
        out,
        server,
        "GET",
        &format!("/api/v2/changefeeds/{id}"),
        None,
    )
    .1
}

/// Waits until the changefeed reads `state`.
pub fn wait_state(out: &Outputs, server: &str, id: &str, state: &str, secs: u64) {
    wait_for(&format!("{id} {state}"), secs, || {
        let v = feed(out, server, id);
        (v["state"] == state).then_some(()).ok_or(v.to_string())
    });
}

/// `changefeed pause`, `update ARGS`, `resume` of `id`, each succeeding.
pub fn pause_update_resume(out: &Outputs, server: &str, id: &str, update: &[&str]) {
    let with = |verb: &str, extra: &[&str]| {
        let mut args = vec!["cli", "--server", server, "changefeed", verb, "-c", id];
        args.extend_from_slice(extra);
        let r = sluice(out, &args);
        assert_eq!(r.code, 0, "{verb}: {} {}", r.stdout, r.stderr);
    };
    with("pause", &[]);
    with("update", update);
    with("resume", &[]);
}

/// A storage sink's output applied to a MariaDB: waits until the root `metadata` checkpoint
/// reaches `target`, then `sluice consume` into `into`; returns what consume said.
pub fn consume_storage(
    out: &Outputs,
    root: &std::path::Path,
    uri: &str,
    into: &str,
    target: u64,
) -> String {
    wait_for("the storage metadata file", 60, || {
        let m = std::fs::read_to_string(root.join("metadata")).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&m).map_err(|e| e.to_string())?;
        (v["checkpoint-ts"].as_u64().unwrap_or(0) >= target)
            .then_some(())
            .ok_or(m)
    });
    let r = sluice(
        out,
        &[
            "consume",
            "--storage",
            uri,
            "--downstream",
            &format!("{into}/"),
        ],
    );
    assert_eq!(r.code, 0, "consume: {} {}", r.stdout, r.stderr);
    r.stdout.trim().to_string()
}
