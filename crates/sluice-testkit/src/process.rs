//! What every server helper of this crate shares about the child process it runs: a free port
//! to start it on, the tail of its log for an error message, and killing it for good.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::Path;
use std::process::Child;

/// A port of 127.0.0.1 that was free a moment ago (bind port 0); a start that loses the race
/// for it is retried by the caller on another.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The last 2,000 bytes of a log file ("" when it cannot be read).
pub fn tail(p: &Path) -> String {
    let s = fs::read_to_string(p).unwrap_or_default();
    let mut start = s.len().saturating_sub(2000);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

/// Kills a child (SIGKILL) and waits for it, once.
pub fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
