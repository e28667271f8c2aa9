//! TLS for tests that must show a client speaks it: a throwaway certificate authority with a
//! server certificate for 127.0.0.1 and a client certificate (made by the `openssl` command),
//! and a TLS front for a plaintext server (`socat`, which terminates TLS with OpenSSL and
//! forwards the bytes), so a real TLS handshake happens in front of servers that have none.
//!
//! Invariants:
//! - every file lives in the directory given to [`Certificates::create`];
//! - a [`TlsFront`] requires and checks a client certificate signed by the same authority
//!   (mutual TLS), so a client without one, or trusting another authority, fails;
//! - dropping a [`TlsFront`] kills its socat.

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The PEM files of one throwaway authority.
#[derive(Clone, Debug)]
pub struct Certificates {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// One key and certificate signed by the authority in `dir` (`name.key`, `name.pem`).
fn signed(dir: &Path, name: &str, subject: &str, ext: &str) -> io::Result<()> {
    let (key, csr, pem, cnf) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.cnf"),
    );
    std::fs::write(dir.join(&cnf), ext)?;
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &cnf,
        ],
    )
}

impl Certificates {
    /// A new authority, a server certificate for 127.0.0.1 and localhost, and a client
    /// certificate, in `dir`.
    pub fn create(dir: &Path) -> io::Result<Certificates> {
        std::fs::create_dir_all(dir)?;
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=sluice test CA",
            ],
        )?;
        signed(
            dir,
            "server",
            "/CN=127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )?;
        signed(
            dir,
            "client",
            "/CN=sluice test client",
            "extendedKeyUsage=clientAuth\n",
        )?;
        Ok(Certificates {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        })
    }
}

/// socat terminating TLS on a port of 127.0.0.1 and forwarding to a plaintext port.
pub struct TlsFront {
    child: Option<Child>,
}

impl TlsFront {
    /// Listens on `port` (TLS, client certificate required) and forwards to `target_port`;
    /// returns once the port accepts connections. The log goes to `log`.
    pub fn start(
        port: u16,
        target_port: u16,
        certs: &Certificates,
        log: &Path,
    ) -> io::Result<TlsFront> {
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},cafile={},verify=1",
            certs.server_cert.display(),
            certs.server_key.display(),
            certs.ca.display()
        );
        let logf = std::fs::File::create(log)?;
        let child = Command::new("socat")
            .args([listen, format!("TCP:127.0.0.1:{target_port}")])
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()
            .map_err(|e| io::Error::other(format!("spawning socat (Debian package socat): {e}")))?;
        let mut front = TlsFront { child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(Ok(Some(status))) = front.child.as_mut().map(Child::try_wait) {
                return Err(io::Error::other(format!(
                    "socat exited with {status}: {}",
                    crate::process::tail(log)
                )));
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(front);
            }
            if Instant::now() > deadline {
                return Err(io::Error::other("socat is not listening after 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        crate::process::kill(&mut self.child);
    }
}
