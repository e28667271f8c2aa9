//! Starts a throwaway MariaDB server for tests: its own temp directory (data dir, unix socket,
//! error log), a free TCP port on 127.0.0.1, and the binlog settings Sluice needs upstream
//! (`log_bin`, `binlog_format=ROW`, `binlog_row_image=FULL`, `binlog_row_metadata=FULL`,
//! CRC32 checksums) unless [`Options`] asks for a deliberately wrong setting.
//!
//! Invariants:
//! - `mariadb-install-db` runs at most once per process: the first [`MariaDb::start`] installs
//!   a template data dir, every instance copies it (a copy takes milliseconds, an install seconds);
//! - every instance owns its directory and port; instances never share state, so tests may run
//!   in parallel (threads or processes);
//! - the port is found by binding port 0 and is retried when the server loses the race for it;
//! - dropping a [`MariaDb`] kills the server (SIGKILL, then wait) and removes its directory;
//! - [`MariaDb::restart`] and [`MariaDb::crash_restart`] keep the data dir, the socket path and
//!   the port, so clients holding [`MariaDb::url`] can reconnect.
//!
//! Users: `root@localhost` (socket) and `root@127.0.0.1` (TCP), both without a password.
//! SQL helpers ([`MariaDb::exec`], [`MariaDb::query`]) run the `mariadb` command-line client over
//! the unix socket, so they need no async runtime; async tests connect to [`MariaDb::url`] with
//! their own client.

use std::fs;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Path of the server binary.
pub const MARIADBD: &str = "/usr/sbin/mariadbd";
/// How long a start may take before it is an error (generous: 2 cores shared by parallel tests).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How many times a start is retried on a fresh port after losing a port race.
pub const PORT_RETRIES: usize = 8;

/// Errors starting or talking to a test server. Messages say what failed and include the tail
/// of the server's error log when the server itself failed.
#[derive(Debug, thiserror::Error)]
pub enum MariaDbError {
    #[error("io error while {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("mariadb-install-db failed: {0}")]
    Install(String),
    #[error("mariadbd did not start: {0}")]
    Start(String),
    #[error("SQL failed: {sql}: {stderr}")]
    Sql { sql: String, stderr: String },
}

pub type Result<T> = std::result::Result<T, MariaDbError>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> MariaDbError {
    let what = what.into();
    move |source| MariaDbError::Io { what, source }
}

/// The binlog mode of a test server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinlogMode {
    /// `log_bin` off.
    Off,
    /// `binlog_format=ROW` (what Sluice needs).
    Row,
    /// `binlog_format=STATEMENT` (to test the upstream check).
    Statement,
    /// `binlog_format=MIXED` (to test the upstream check).
    Mixed,
}

/// How to start a test server. `Options::default()` gives what Sluice needs upstream.
#[derive(Clone, Debug)]
pub struct Options {
    pub binlog: BinlogMode,
    pub server_id: u32,
    /// `binlog_row_image` (default `FULL`).
    pub row_image: String,
    /// `binlog_row_metadata` (default `FULL`).
    pub row_metadata: String,
    /// `binlog_checksum` (default `CRC32`).
    pub checksum: String,
    /// `log_bin_compress` (default off).
    pub compress: bool,
    /// `max_binlog_size` in bytes (default 1 GiB; tests of rotation set it low, min 4096).
    pub max_binlog_size: u64,
    /// Further `--name=value` arguments for `mariadbd`.
    pub extra_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            binlog: BinlogMode::Row,
            server_id: 1,
            row_image: "FULL".into(),
            row_metadata: "FULL".into(),
            checksum: "CRC32".into(),
            compress: false,
            max_binlog_size: 1 << 30,
            extra_args: Vec::new(),
        }
    }
}

/// A running throwaway MariaDB server. See the module docs.
pub struct MariaDb {
    dir: PathBuf,
    port: u16,
    opts: Options,
    child: Option<Child>,
}

static TEMPLATE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
static TEMPLATE_LOCK: Mutex<()> = Mutex::new(());
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn tmp_root() -> PathBuf {
    // Unix socket paths are limited to 107 bytes: keep the base short.
    let t = std::env::temp_dir();
    if t.as_os_str().len() > 40 {
        PathBuf::from("/tmp")
    } else {
        t
    }
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| {
                l.split_whitespace().nth(2) == Some("0") || l.split_whitespace().nth(1) == Some("0")
            })
        })
        .unwrap_or(false)
}

/// Arguments shared by the install and every start (InnoDB sizes must agree).
fn common_args() -> Vec<String> {
    let mut v = vec!["--no-defaults".to_string()];
    if is_root() {
        v.push("--user=root".into());
    }
    v.extend(
        [
            "--innodb-log-file-size=8M",
            "--innodb-buffer-pool-size=24M",
            "--skip-innodb-doublewrite",
            "--innodb-flush-log-at-trx-commit=2",
        ]
        .map(String::from),
    );
    v
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let dst = to.join(entry.file_name());
        if ty.is_dir() {
            copy_dir(&entry.path(), &dst)?;
        } else if ty.is_file() {
            fs::copy(entry.path(), &dst)?;
        }
    }
    Ok(())
}

/// Removes directories left behind by test processes that no longer run (killed before Drop).
fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(tmp_root()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let rest = name
            .strip_prefix("sluice-mdb-tpl-")
            .or_else(|| name.strip_prefix("sluice-mdb-"));
        let Some(pid) = rest
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

fn install_template() -> std::result::Result<PathBuf, String> {
    remove_stale_dirs();
    let dir = tmp_root().join(format!("sluice-mdb-tpl-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let data = dir.join("data");
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    // A private tmpdir: servers sharing /tmp have failed on each other's temporary files.
    let tmp = dir.join("tmp");
    fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let mut cmd = Command::new("mariadb-install-db");
    cmd.args(common_args())
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--tmpdir={}", tmp.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .stdin(Stdio::null());
    let out = cmd
        .output()
        .map_err(|e| format!("running mariadb-install-db: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "exit {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(data)
}

fn template() -> Result<PathBuf> {
    let _g = TEMPLATE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    TEMPLATE
        .get_or_init(|| {
            // One retry: an install can fail on a transient resource problem.
            install_template().or_else(|first| {
                install_template().map_err(|second| format!("{first}\nretry: {second}"))
            })
        })
        .clone()
        .map_err(MariaDbError::Install)
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("binding a free port"))?;
    Ok(l.local_addr()
        .map_err(io_err("reading the bound port"))?
        .port())
}

fn log_tail(path: &Path) -> String {
    let s = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Outcome of one start attempt.
enum Attempt {
    Ready(Child),
    PortTaken,
}

impl MariaDb {
    /// Starts a server with the settings Sluice needs upstream.
    pub fn start() -> Result<MariaDb> {
        Self::start_with(Options::default())
    }

    /// Starts a server with the given options.
    pub fn start_with(opts: Options) -> Result<MariaDb> {
        let tpl = template()?;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = tmp_root().join(format!("sluice-mdb-{}-{n}-{nanos:x}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        copy_dir(&tpl, &dir.join("data"))
            .map_err(io_err(format!("copying the template to {}", dir.display())))?;
        let mut db = MariaDb {
            dir,
            port: 0,
            opts,
            child: None,
        };
        fs::create_dir_all(db.tmpdir()).map_err(io_err("creating the tmpdir"))?;
        for _ in 0..PORT_RETRIES {
            db.port = free_port()?;
            match db.spawn_and_wait()? {
                Attempt::Ready(child) => {
                    db.child = Some(child);
                    return Ok(db);
                }
                Attempt::PortTaken => continue,
            }
        }
        Err(MariaDbError::Start(format!(
            "no free port after {PORT_RETRIES} attempts"
        )))
    }

    fn args(&self) -> Vec<String> {
        let o = &self.opts;
        let mut v = common_args();
        v.push(format!("--datadir={}", self.datadir().display()));
        v.push(format!("--tmpdir={}", self.tmpdir().display()));
        v.push(format!("--socket={}", self.socket().display()));
        v.push(format!(
            "--pid-file={}",
            self.dir.join("mariadbd.pid").display()
        ));
        v.push(format!("--log-error={}", self.error_log().display()));
        v.push(format!("--port={}", self.port));
        v.push("--bind-address=127.0.0.1".into());
        v.push("--skip-name-resolve".into());
        v.push("--character-set-server=utf8mb4".into());
        v.push("--collation-server=utf8mb4_general_ci".into());
        v.push("--max-connections=500".into());
        v.push(format!("--server-id={}", o.server_id));
        match o.binlog {
            BinlogMode::Off => v.push("--skip-log-bin".into()),
            mode => {
                v.push("--log-bin=mysql-bin".into());
                let fmt = match mode {
                    BinlogMode::Statement => "STATEMENT",
                    BinlogMode::Mixed => "MIXED",
                    _ => "ROW",
                };
                v.push(format!("--binlog-format={fmt}"));
                v.push(format!("--max-binlog-size={}", o.max_binlog_size));
            }
        }
        v.push(format!("--binlog-row-image={}", o.row_image));
        v.push(format!("--binlog-row-metadata={}", o.row_metadata));
        v.push(format!("--binlog-checksum={}", o.checksum));
        v.push(format!(
            "--log-bin-compress={}",
            if o.compress { "ON" } else { "OFF" }
        ));
        v.extend(o.extra_args.iter().cloned());
        v
    }

    fn spawn_and_wait(&self) -> Result<Attempt> {
        let _ = fs::remove_file(self.error_log());
        let mut child = Command::new(MARIADBD)
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err("spawning mariadbd"))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().map_err(io_err("waiting for mariadbd"))? {
                let log = log_tail(&self.error_log());
                if log.contains("Address already in use")
                    || log.contains("Can't start server: Bind")
                {
                    return Ok(Attempt::PortTaken);
                }
                return Err(MariaDbError::Start(format!(
                    "mariadbd exited with {status}; error log:\n{log}"
                )));
            }
            if self.accepts_connections() {
                return Ok(Attempt::Ready(child));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(MariaDbError::Start(format!(
                    "not ready after {START_TIMEOUT:?}; error log:\n{}",
                    log_tail(&self.error_log())
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// True when the TCP port answers with a MySQL protocol greeting and the socket exists.
    fn accepts_connections(&self) -> bool {
        if !self.socket().exists() {
            return false;
        }
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut hdr = [0u8; 5];
        // Packet header (3 bytes length, 1 byte seq) then protocol version 10 (0xff = error).
        s.read_exact(&mut hdr).is_ok() && hdr[4] == 10
    }

    /// `mysql://root@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// `mysql://root@127.0.0.1:PORT/DB`.
    pub fn url_db(&self, db: &str) -> String {
        format!("{}/{db}", self.url())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("mysql.sock")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn datadir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's private `tmpdir`.
    pub fn tmpdir(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    pub fn error_log(&self) -> PathBuf {
        self.dir.join("error.log")
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The server's process id (while running).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn client(&self) -> Command {
        let mut c = Command::new("mariadb");
        c.arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .arg("-uroot")
            .arg("--batch")
            .arg("--skip-column-names")
            .arg("--raw")
            .arg("--default-character-set=utf8mb4");
        c
    }

    /// Starts a client session running `sql` in the background and returns at once: for a
    /// session that must hold a lock while the test goes on. It ends when its statements do, or
    /// when its connection is killed (`KILL <id>`); the caller waits for the child.
    pub fn spawn_session(&self, sql: &str) -> Result<std::process::Child> {
        let mut child = self
            .client()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err("spawning the mariadb client"))?;
        use std::io::Write;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(sql.as_bytes())
                .map_err(io_err("writing SQL to the client"))?;
        }
        Ok(child)
    }

    /// Runs SQL (one or more `;`-separated statements) with the `mariadb` client.
    pub fn exec(&self, sql: &str) -> Result<()> {
        self.query(sql).map(|_| ())
    }

    /// Runs SQL and returns the rows of the last result set as tab-split strings
    /// (`NULL` comes back as the text `NULL`).
    pub fn query(&self, sql: &str) -> Result<Vec<Vec<String>>> {
        let mut child = self
            .client()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err("spawning the mariadb client"))?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().ok_or_else(|| MariaDbError::Sql {
                sql: sql.to_string(),
                stderr: "no stdin".into(),
            })?;
            stdin
                .write_all(sql.as_bytes())
                .map_err(io_err("writing SQL to the client"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err("waiting for the mariadb client"))?;
        if !out.status.success() {
            return Err(MariaDbError::Sql {
                sql: sql.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').map(String::from).collect())
            .collect())
    }

    /// The first column of the first row of a query.
    pub fn query_one(&self, sql: &str) -> Result<String> {
        self.query(sql)?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .ok_or_else(|| MariaDbError::Sql {
                sql: sql.into(),
                stderr: "no rows".into(),
            })
    }

    /// `(file, position)` from `SHOW MASTER STATUS`.
    pub fn master_status(&self) -> Result<(String, u64)> {
        let rows = self.query("SHOW MASTER STATUS")?;
        let row = rows.first().ok_or_else(|| MariaDbError::Sql {
            sql: "SHOW MASTER STATUS".into(),
            stderr: "no rows (is log_bin off?)".into(),
        })?;
        let file = row.first().cloned().unwrap_or_default();
        let pos = row.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        Ok((file, pos))
    }

    /// Stops the server: a clean `SHUTDOWN` when `graceful`, else SIGKILL. Waits for the exit.
    pub fn stop(&mut self, graceful: bool) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            if graceful {
                let _ = self.exec("SHUTDOWN");
                let deadline = Instant::now() + START_TIMEOUT;
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break;
                        }
                    }
                }
            } else {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        Ok(())
    }

    /// Starts a stopped server again on the same data dir, socket and port.
    pub fn start_again(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn_and_wait()? {
                Attempt::Ready(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                // Keep the port (clients hold the url); someone else holds it briefly.
                Attempt::PortTaken if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Attempt::PortTaken => {
                    return Err(MariaDbError::Start(format!(
                        "port {} stayed taken",
                        self.port
                    )));
                }
            }
        }
    }

    /// Clean shutdown, then start on the same data dir and port.
    pub fn restart(&mut self) -> Result<()> {
        self.stop(true)?;
        self.start_again()
    }

    /// SIGKILL, then start on the same data dir and port (crash recovery runs).
    pub fn crash_restart(&mut self) -> Result<()> {
        self.stop(false)?;
        self.start_again()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_with_row_binlog_and_runs_sql() {
        let db = MariaDb::start().expect("start");
        let rows = db
            .query("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@port")
            .expect("query");
        assert_eq!(
            rows,
            vec![vec!["1", "ROW", "FULL", "FULL", &db.port().to_string()]]
        );
        db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY); INSERT INTO d.t VALUES (1),(2)")
            .expect("exec");
        assert_eq!(
            db.query_one("SELECT COUNT(*) FROM d.t").expect("count"),
            "2"
        );
        let (file, pos) = db.master_status().expect("status");
        assert_eq!(file, "mysql-bin.000001");
        assert!(pos > 4);
        // TCP login as root without a password works (what url() promises).
        let out = Command::new("mariadb")
            .args([
                "--no-defaults",
                "-h127.0.0.1",
                &format!("-P{}", db.port()),
                "-uroot",
                "-N",
                "-e",
                "SELECT 7",
            ])
            .output()
            .expect("client");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
    }

    #[test]
    fn parallel_instances_and_wrong_settings() {
        let a = std::thread::spawn(|| {
            MariaDb::start_with(Options {
                binlog: BinlogMode::Off,
                ..Options::default()
            })
            .expect("start off")
        });
        let b = std::thread::spawn(|| {
            MariaDb::start_with(Options {
                binlog: BinlogMode::Statement,
                ..Options::default()
            })
            .expect("start stmt")
        });
        let a = a.join().expect("join");
        let b = b.join().expect("join");
        assert_ne!(a.port(), b.port());
        assert_eq!(a.query_one("SELECT @@log_bin").expect("q"), "0");
        assert_eq!(
            b.query_one("SELECT @@binlog_format").expect("q"),
            "STATEMENT"
        );
        let dir = a.dir().to_path_buf();
        drop(a);
        assert!(!dir.exists(), "drop removes the directory");
    }

    #[test]
    fn restart_keeps_data_and_port() {
        let mut db = MariaDb::start().expect("start");
        let port = db.port();
        db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO d.t VALUES (1)")
            .expect("exec");
        db.restart().expect("restart");
        assert_eq!(db.port(), port);
        assert_eq!(db.query_one("SELECT COUNT(*) FROM d.t").expect("q"), "1");
        db.crash_restart().expect("crash restart");
        db.exec("INSERT INTO d.t VALUES (2)").expect("insert");
        assert_eq!(db.query_one("SELECT COUNT(*) FROM d.t").expect("q"), "2");
        // A restart rotates the binlog.
        let (file, _) = db.master_status().expect("status");
        assert_eq!(file, "mysql-bin.000003");
    }
}
