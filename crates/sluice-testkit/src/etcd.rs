//! Starts a throwaway single-member etcd server for tests: its own temp directory, free client
//! and peer ports on 127.0.0.1, revision-based auto-compaction (so long tests do not grow the
//! history), stopped (SIGKILL) and removed on drop. Needs Debian's `etcd-server` (`/usr/bin/etcd`).
//!
//! Invariants: every instance owns its directory and ports; [`Etcd::start`] returns only once
//! the member answers `GET /health` with `"health":"true"`, or fails with the tail of its log.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Path of the server binary (Debian's `etcd-server`).
pub const ETCD: &str = "/usr/bin/etcd";
/// How long a start may take before it is an error.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Revisions kept by auto-compaction.
pub const COMPACTION_RETENTION: &str = "1000";
/// Port races retried.
pub const PORT_RETRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd is not installed at {ETCD}: apt-get install etcd-server etcd-client")]
    NotInstalled,
    #[error("io error while {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("etcd did not start: {0}")]
    Start(String),
}

pub type Result<T> = std::result::Result<T, EtcdError>;

pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
}

fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| EtcdError::Io {
            what: "finding a free port".into(),
            source,
        })
}

fn healthy(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.contains("\"health\":\"true\"")
}

impl Etcd {
    pub fn start() -> Result<Etcd> {
        if !Path::new(ETCD).exists() {
            return Err(EtcdError::NotInstalled);
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let mut last = String::new();
        for _ in 0..PORT_RETRIES {
            let dir = std::env::temp_dir().join(format!(
                "sluice-etcd-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).map_err(|source| EtcdError::Io {
                what: format!("creating {}", dir.display()),
                source,
            })?;
            let (cp, pp) = (free_port()?, free_port()?);
            let log = fs::File::create(dir.join("etcd.log")).map_err(|source| EtcdError::Io {
                what: "creating the log".into(),
                source,
            })?;
            let log2 = log.try_clone().map_err(|source| EtcdError::Io {
                what: "cloning the log".into(),
                source,
            })?;
            let client = format!("http://127.0.0.1:{cp}");
            let peer = format!("http://127.0.0.1:{pp}");
            let child = Command::new(ETCD)
                .arg("--name=sluice-test")
                .arg(format!("--data-dir={}", dir.join("data").display()))
                .arg(format!("--listen-client-urls={client}"))
                .arg(format!("--advertise-client-urls={client}"))
                .arg(format!("--listen-peer-urls={peer}"))
                .arg(format!("--initial-advertise-peer-urls={peer}"))
                .arg(format!("--initial-cluster=sluice-test={peer}"))
                .arg("--auto-compaction-mode=revision")
                .arg(format!(
                    "--auto-compaction-retention={COMPACTION_RETENTION}"
                ))
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log2))
                .spawn()
                .map_err(|source| EtcdError::Io {
                    what: "spawning etcd".into(),
                    source,
                })?;
            let mut e = Etcd {
                child: Some(child),
                dir,
                client_port: cp,
            };
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if healthy(cp) {
                    return Ok(e);
                }
                let exited = e
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                    .is_some();
                if exited || Instant::now() > deadline {
                    last = e.log_tail();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(e);
        }
        Err(EtcdError::Start(last))
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn port(&self) -> u16 {
        self.client_port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_tail(&self) -> String {
        let s = fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
