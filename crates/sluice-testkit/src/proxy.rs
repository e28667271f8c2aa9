//! A TCP proxy for fault tests: forwards every connection to a target address, and cuts every
//! live connection on demand ([`Proxy::cut`]), so a client sees its connections reset mid-run
//! and must reconnect (the proxy keeps accepting new ones).
//!
//! Invariants:
//! - bytes are forwarded unchanged and in order, each direction by its own thread;
//! - [`Proxy::cut`] shuts down both sockets of every connection open at that moment;
//! - dropping the proxy stops accepting and cuts what is open.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Proxy {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Both sockets of each live connection.
    live: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
    accepted: Arc<AtomicU64>,
}

impl Proxy {
    /// Binds a free port of 127.0.0.1 and forwards what arrives to `target`.
    pub fn start(target: SocketAddr) -> io::Result<Proxy> {
        Self::serve(TcpListener::bind("127.0.0.1:0")?, target)
    }

    /// Forwards what `listener` accepts to `target`.
    pub fn serve(listener: TcpListener, target: SocketAddr) -> io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<(TcpStream, TcpStream)>>> = Arc::default();
        let accepted = Arc::new(AtomicU64::new(0));
        let (st, lv, acc) = (stop.clone(), live.clone(), accepted.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        acc.fetch_add(1, Ordering::SeqCst);
                        let _ = forward(client, target, &lv);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Proxy {
            port,
            stop,
            live,
            accepted,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections accepted so far (a reconnect after [`Proxy::cut`] counts anew).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Resets every live connection; returns how many there were.
    pub fn cut(&self) -> usize {
        let Ok(mut live) = self.live.lock() else {
            return 0;
        };
        let n = live.len();
        for (a, b) in live.drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
        n
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn forward(
    client: TcpStream,
    target: SocketAddr,
    live: &Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    if let Ok(mut l) = live.lock() {
        l.retain(|(a, _)| a.peer_addr().is_ok());
        l.push((client.try_clone()?, server.try_clone()?));
    }
    for (mut from, mut to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
        std::thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    }
    Ok(())
}
