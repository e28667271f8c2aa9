//! Starts a throwaway S3 server for tests: `moto_server` (PyPI `moto[server]`) on a free port of
//! 127.0.0.1, with its log in its own temp directory.
//!
//! Invariants:
//! - `moto_server` is installed with pip (pinned [`MOTO_PIP_SPEC`]) at most once per process when
//!   it is missing from `PATH`;
//! - [`Moto::start`] returns only once the server answers HTTP and the bucket exists;
//! - every instance owns its port and directory; dropping a [`Moto`] kills the server (SIGKILL,
//!   then wait) and removes its directory;
//! - the port is found by binding port 0 and the start is retried on a fresh port when the
//!   server loses the race for it.
//!
//! Talking to the server uses plain HTTP/1.1 over `std::net` (moto accepts any credentials and
//! unsigned bucket creation, unless started by [`Moto::start_checking_credentials`]), so this
//! module needs no async runtime and no HTTP client crate.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What `pip install` gets when `moto_server` is missing.
pub const MOTO_PIP_SPEC: &str = "moto[server]==5.2.5";
/// How long a start may take before it is an error (moto needs ~2 s; 2 cores are shared).
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How many times a start is retried on a fresh port.
pub const PORT_RETRIES: usize = 5;
/// The region the test server is addressed with (moto accepts any).
pub const REGION: &str = "us-east-1";
/// Access key and secret handed to clients (moto accepts any).
pub const ACCESS_KEY: &str = "testing";
pub const SECRET_KEY: &str = "testing";

/// Errors starting or talking to the moto server.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    #[error("io error while {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("installing moto failed: {0}")]
    Install(String),
    #[error("moto_server did not start: {0}")]
    Start(String),
    #[error("HTTP request {request} failed: {status_line}")]
    Http {
        request: String,
        status_line: String,
    },
}

pub type Result<T> = std::result::Result<T, MotoError>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> MotoError {
    let what = what.into();
    move |source| MotoError::Io { what, source }
}

static INSTALLED: OnceLock<std::result::Result<String, String>> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The `moto_server` command, installing moto with pip when it is missing.
fn moto_binary() -> Result<String> {
    INSTALLED
        .get_or_init(|| {
            let found = |name: &str| {
                Command::new(name)
                    .arg("--help")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false)
            };
            if found("moto_server") {
                return Ok("moto_server".to_string());
            }
            let out = Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", MOTO_PIP_SPEC])
                .output()
                .map_err(|e| format!("running pip: {e}"))?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            if found("moto_server") {
                Ok("moto_server".to_string())
            } else {
                Err("pip installed moto but moto_server is not on PATH".to_string())
            }
        })
        .clone()
        .map_err(MotoError::Install)
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("binding port 0"))?;
    let port = l
        .local_addr()
        .map_err(io_err("reading local address"))?
        .port();
    Ok(port)
}

/// A running moto S3 server with one bucket. See the module docs.
pub struct Moto {
    dir: PathBuf,
    port: u16,
    bucket: String,
    child: Option<Child>,
}

impl Moto {
    /// Starts a server and creates the bucket `bucket`.
    pub fn start(bucket: &str) -> Result<Moto> {
        Self::start_opts(bucket, false)
    }

    /// Starts a server that checks credentials: after the readiness probe and the bucket's
    /// creation (moto's `INITIAL_NO_AUTH_ACTION_COUNT=2`) every request needs an access key its
    /// IAM knows, and it knows none, so every key is a wrong one (`InvalidAccessKeyId`).
    pub fn start_checking_credentials(bucket: &str) -> Result<Moto> {
        Self::start_opts(bucket, true)
    }

    fn start_opts(bucket: &str, check_credentials: bool) -> Result<Moto> {
        let bin = moto_binary()?;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-moto-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let mut last_err = String::new();
        for _ in 0..PORT_RETRIES {
            let port = free_port()?;
            let log = dir.join("moto.log");
            let logf = fs::File::create(&log).map_err(io_err("creating moto.log"))?;
            let logf2 = logf.try_clone().map_err(io_err("cloning log handle"))?;
            let mut command = Command::new(&bin);
            if check_credentials {
                command.env("INITIAL_NO_AUTH_ACTION_COUNT", "2");
            }
            let child = command
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(logf)
                .stderr(logf2)
                .spawn()
                .map_err(io_err("spawning moto_server"))?;
            let mut moto = Moto {
                dir: dir.clone(),
                port,
                bucket: bucket.to_string(),
                child: Some(child),
            };
            match moto.wait_ready() {
                Ok(()) => {
                    moto.create_bucket(bucket)?;
                    return Ok(moto);
                }
                Err(e) => {
                    last_err = format!("{e}; log: {}", tail(&log));
                    moto.kill();
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        Err(MotoError::Start(last_err))
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(MotoError::Start(format!("exited early with {status}")));
                }
            }
            if let Ok((status, _)) = self.http("GET", "/") {
                if status.contains(" 200") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(MotoError::Start(format!(
                    "not ready after {START_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends one HTTP/1.1 request with an empty body; returns the status line and the body.
    fn http(&self, method: &str, path: &str) -> Result<(String, String)> {
        let mut s =
            TcpStream::connect(("127.0.0.1", self.port)).map_err(io_err("connecting to moto"))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io_err("setting timeout"))?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        );
        s.write_all(req.as_bytes())
            .map_err(io_err("writing request"))?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)
            .map_err(io_err("reading response"))?;
        let status = resp.lines().next().unwrap_or_default().to_string();
        let body = resp
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    /// Creates another bucket.
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        let (status, _) = self.http("PUT", &format!("/{bucket}"))?;
        if status.contains(" 200") {
            Ok(())
        } else {
            Err(MotoError::Http {
                request: format!("PUT /{bucket}"),
                status_line: status,
            })
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A Sluice storage sink URI for `prefix` inside the bucket, with every parameter the S3
    /// client needs (endpoint, region, keys, path-style addressing).
    pub fn sink_uri(&self, prefix: &str) -> String {
        format!(
            "s3://{}/{}?endpoint={}&region={REGION}&access-key={ACCESS_KEY}&secret-access-key={SECRET_KEY}&force-path-style=true",
            self.bucket,
            prefix.trim_matches('/'),
            self.endpoint()
        )
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn kill(&mut self) {
        crate::process::kill(&mut self.child);
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

use crate::process::tail;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_creates_bucket_and_stops() {
        let m = Moto::start("sluice-b1").expect("moto starts");
        let (status, body) = m.http("GET", "/sluice-b1").expect("list bucket");
        assert!(status.contains(" 200"), "{status}");
        assert!(body.contains("<Name>sluice-b1</Name>"), "{body}");
        let port = m.port();
        drop(m);
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "server still up after drop"
        );
    }
}
