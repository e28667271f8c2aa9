//! A test's scratch directory: created empty under the system temp dir, removed when the test
//! is done with it, kept (and its path printed) when the test panicked, so a failure's server
//! logs and data dirs stay for reading. Keeps the machine's disk from filling across suite runs:
//! an end-to-end test's data dir holds an event store of up to gigabytes.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A directory removed on drop unless the thread is panicking.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `<temp>/<prefix>-<name>-<pid>-<n>`, emptied and created.
    pub fn new(prefix: &str, name: &str) -> std::io::Result<ScratchDir> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{prefix}-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(ScratchDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Deref for ScratchDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "test failed: its scratch directory is kept at {}",
                self.0.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop_kept_on_panic() {
        let d = ScratchDir::new("sluice-scratch-test", "ok").expect("scratch dir");
        let p = d.path().to_path_buf();
        std::fs::write(p.join("f"), b"x").expect("write");
        drop(d);
        assert!(!p.exists(), "a finished test's directory is removed");

        let kept = std::thread::spawn(|| {
            let d = ScratchDir::new("sluice-scratch-test", "panics").expect("scratch dir");
            let p = d.path().to_path_buf();
            let _hold = d;
            std::panic::panic_any(p);
        })
        .join()
        .expect_err("the thread panics");
        let p = kept.downcast::<PathBuf>().expect("the path as the payload");
        assert!(p.exists(), "a failed test's directory is kept for reading");
        std::fs::remove_dir_all(*p).expect("remove");
    }
}
