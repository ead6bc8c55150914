//! `Wake`: lets a follower sleep until the store may have changed, instead
//! of for a whole poll interval.
//!
//! On Linux it watches the folder that holds a log or a database with
//! inotify: any write, creation, rename or removal in that folder ends the
//! wait (a JSONL append, a log put in place under its name, a commit to a
//! database's `-wal`). A wake is only a hint to look now: the follower then
//! reads as it would after a poll, so a spurious wake (another session of
//! the folder was written) costs one cheap look, and a missed one (inotify
//! unavailable, its queue overflowed, a file system it does not see, such
//! as a network mount written from another host) costs at most the poll
//! interval, which stays the longest wait. A wake can also come early: a
//! database's writer writes its `-wal` before its commit is visible, so a
//! look right after the wake may find nothing yet; the follower then looks
//! again after 1, 2, 4, … ms until it finds the commit or the wait reaches
//! the poll interval. `SESSIONLOG_FOLLOW_POLL_ONLY=1`
//! turns the watch off, so that the fallback can be measured and tested.

use std::path::Path;
use std::time::Duration;

/// The variable that turns watching off (see the module docs).
pub const POLL_ONLY_VARIABLE: &str = "SESSIONLOG_FOLLOW_POLL_ONLY";

/// Waits for a change in one folder, or for a timeout. See the module docs.
#[derive(Debug)]
pub struct Wake {
    #[cfg(target_os = "linux")]
    watch: Option<rustix::fd::OwnedFd>,
}

impl Wake {
    /// Watches the folder holding `path` (a log file or a database file).
    /// Where it cannot be watched, every wait lasts its whole timeout.
    pub fn watching(path: &Path) -> Wake {
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let poll_only = std::env::var_os(POLL_ONLY_VARIABLE).is_some_and(|value| value == "1");
        Wake {
            #[cfg(target_os = "linux")]
            watch: (!poll_only).then(|| watch(folder)).flatten(),
        }
    }

    /// Whether changes wake the wait (false: it always lasts its timeout).
    pub fn is_watching(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.watch.is_some();
        #[cfg(not(target_os = "linux"))]
        return false;
    }

    /// Returns when the folder changed since the last wait returned (true),
    /// or after `timeout` (false).
    pub fn wait(&mut self, timeout: Duration) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.watch {
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let timespec = Timespec {
                tv_sec: timeout.as_secs() as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            // An interrupted or failed wait is a wake like any other: the
            // follower looks, and waits again.
            return match poll(&mut fds, Some(&timespec)) {
                Ok(0) => false,
                Ok(_) => {
                    drain(fd);
                    true
                }
                Err(_) => true,
            };
        }
        std::thread::sleep(timeout);
        false
    }
}

/// An inotify descriptor watching `folder`, or `None` where there is none
/// to be had (no inotify, the per-user limit reached, no such folder).
#[cfg(target_os = "linux")]
fn watch(folder: &Path) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::inotify::{add_watch, init, CreateFlags, WatchFlags};
    let fd = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    let flags = WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::CREATE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF;
    add_watch(&fd, folder, flags).ok()?;
    Some(fd)
}

/// Reads every pending event (their content does not matter: any is a
/// reason to look).
#[cfg(target_os = "linux")]
fn drain(fd: &rustix::fd::OwnedFd) {
    let mut buffer = [0u8; 4096];
    while matches!(rustix::io::read(fd, &mut buffer), Ok(read) if read > 0) {}
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_write_in_the_folder_ends_the_wait_and_the_timeout_ends_it_otherwise() {
        let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = folder.path().join("s.jsonl");
        std::fs::write(&log, b"").unwrap_or_else(|e| panic!("{e}"));
        let mut wake = Wake::watching(&log);
        if !wake.is_watching() {
            // Only where inotify exists and the variable is unset.
            assert!(
                !cfg!(target_os = "linux")
                    || std::env::var_os(POLL_ONLY_VARIABLE).is_some_and(|value| value == "1"),
                "a folder of a Linux file system can be watched"
            );
            return;
        }
        // Nothing written: the wait lasts its timeout.
        let started = Instant::now();
        assert!(!wake.wait(Duration::from_millis(50)), "nothing was written");
        assert!(started.elapsed() >= Duration::from_millis(45));

        let writer = std::thread::spawn({
            let log = log.clone();
            move || {
                std::thread::sleep(Duration::from_millis(100));
                std::fs::write(&log, b"x").unwrap_or_else(|e| panic!("{e}"));
            }
        });
        let started = Instant::now();
        assert!(
            wake.wait(Duration::from_secs(60)),
            "the write woke the wait"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the write woke the wait"
        );
        writer
            .join()
            .unwrap_or_else(|_| panic!("the writer thread panicked"));
        // The write's last events (its close) may have come after the wake:
        // a zero wait takes them; then, with nothing written, the next wait
        // lasts its timeout again.
        wake.wait(Duration::ZERO);
        let started = Instant::now();
        assert!(
            !wake.wait(Duration::from_millis(50)),
            "nothing was written since"
        );
        assert!(started.elapsed() >= Duration::from_millis(45));
    }
}
