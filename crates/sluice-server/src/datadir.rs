//! The data dir's owner: one server process at a time. A server takes an exclusive lock on
//! `<data-dir>/server.lock` before it opens anything in the dir (event store, schema history,
//! meta store) and writes its pid and API address into the file; a second server on the same
//! dir is refused with those, instead of failing later inside the event store.
//!
//! Invariants: the lock is the operating system's (`flock`), so it is released when the process
//! ends, however it ends (a `kill -9` leaves the file but no lock, and the next start takes it
//! over); the file's text is only information for the refusal, never trusted for the decision.

use crate::error::ServerError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Name of the lock file inside the data dir.
pub const LOCK_FILE: &str = "server.lock";

/// Holds the data dir for as long as it lives (the process's lifetime in `run`).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Takes the data dir for this process, recording its pid and `addr`. Refused when another
/// live process holds it, naming that process as its lock file describes it.
pub fn lock(dir: &Path, addr: &str) -> Result<DataDirLock, ServerError> {
    let path = dir.join(LOCK_FILE);
    let io = |what: &str, e: std::io::Error| {
        ServerError::Config(format!("cannot {what} {}: {e}", path.display()))
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io("open", e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(ServerError::Config(in_use(dir, &holder)));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", e)),
    }
    let text = format!("pid={}\naddr={addr}\n", std::process::id());
    file.set_len(0).map_err(|e| io("write", e))?;
    file.rewind().map_err(|e| io("write", e))?;
    file.write_all(text.as_bytes())
        .and_then(|_| file.sync_data())
        .map_err(|e| io("write", e))?;
    Ok(DataDirLock { _file: file })
}

/// The refusal: which process holds `dir`, as far as its lock file says.
fn in_use(dir: &Path, holder: &str) -> String {
    let field = |k: &str| {
        holder
            .lines()
            .find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .map(str::trim)
    };
    let who = match (field("pid"), field("addr")) {
        (Some(pid), Some(addr)) => format!("pid {pid}, API address {addr}"),
        (Some(pid), None) => format!("pid {pid}"),
        _ => "a process that has not written its pid yet".to_string(),
    };
    format!(
        "data dir {} is in use by another sluice server ({who}); stop that server first, or give this one another --data-dir",
        dir.display()
    )
}
