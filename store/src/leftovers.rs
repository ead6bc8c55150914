//! Temporary files that an interrupted creation, fork or migration left in a
//! JSONL store folder, and their removal.
//!
//! Every temporary file of the store is dot-named, so no reader ever takes
//! it for a session: `.<log>.tmp-<pid>-<ms>` for a log being created (or
//! staged by a migration; `<log>` is `<name>.jsonl`), and
//! `.<log>.spool.tmp-…` and `.<log>.state.tmp-…` for a fork's spool and a
//! migration's staged snapshot; `.migrate-<pid>-<ms>.lock` for a running
//! migration into the folder, and `.<id>.jsonl.state.new` for a state
//! snapshot being written. A creation holds an exclusive `flock` on its
//! temporary file from just after creating it until its name is removed; a
//! migration holds one on its lock file for its whole run, and its staged
//! files carry the same `<pid>-<ms>`; a snapshot is written by the writer
//! that holds its log's lock. A leftover is such a file that nobody holds:
//! its creator is gone (killed, or crashed with the machine).
//!
//! Removal takes only leftovers older than a minimum age, since a creation
//! takes its lock a moment after it created its file, and removes only
//! dot-named files of these shapes (another program's `.<name>.tmp-…` is
//! left alone): a session log (`<id>.jsonl`, whose
//! id cannot start with a dot) is never touched. A temporary name left
//! beside the session it published (a crash between `link` and `unlink`) is
//! a second name of that file: removing it leaves the session whole.

use std::fs::{File, TryLockError};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::io::Io;
use crate::reader::open_log_for_reading;
use crate::StoreError;

/// A temporary file in a JSONL store folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// How long since it was last written.
    pub age: Duration,
    /// Whether a running creation or migration holds it, or may: a file
    /// whose lock cannot be tested (`untestable`) counts as held, and is
    /// never removed.
    pub in_use: bool,
    /// Whether its lock could not be tested: another user's file, which
    /// this user may not open, in a shared folder.
    pub untestable: bool,
}

impl Leftover {
    /// Whether removal takes it: nobody holds it, it was last written at
    /// least `min_age` ago, and it is no migration's lock. Left unheld, a
    /// lock is the one mark of an unfinished migration into the folder, so
    /// it stays until a run finishes that migration (`migrate --resume`).
    pub fn removable(&self, min_age: Duration) -> bool {
        !self.in_use && self.age >= min_age && !self.is_migration_lock()
    }

    /// The source a migration's lock names, as its run wrote it (what
    /// `migrate --resume` takes again: a path made absolute, or a database
    /// URL without its password); `None` for another leftover, and for a
    /// lock that names none (cut short by a crash, or another user's, which
    /// this user may not read).
    pub fn migration_source(&self) -> Option<String> {
        if !self.is_migration_lock() {
            return None;
        }
        let file = open_log_for_reading(&self.path).ok()?;
        let mut text = String::new();
        file.take(MAX_LOCK_TEXT_BYTES + 1)
            .read_to_string(&mut text)
            .ok()?;
        let source = text.strip_suffix('\n')?;
        let one_line = !source.is_empty() && !source.chars().any(char::is_control);
        (text.len() as u64 <= MAX_LOCK_TEXT_BYTES && one_line).then(|| source.to_owned())
    }

    /// Whether it is a migration's lock file: left unheld, it is the mark
    /// of a migration into the folder that was interrupted, and the folder
    /// may lack sessions that run had not published yet.
    pub fn is_migration_lock(&self) -> bool {
        self.path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(temporary)
            .is_some_and(|kind| matches!(kind, Temporary::MigrationLock))
    }
}

/// What kind of temporary file a name is.
enum Temporary<'n> {
    /// A session being created or staged, with its `<pid>-<ms>` token.
    Session { token: &'n str },
    /// A running migration's lock file.
    MigrationLock,
    /// A state snapshot being written beside the log `log` (its file name),
    /// before it is renamed over the last one.
    SnapshotDraft { log: &'n str },
}

/// The kind of temporary file `name` is, if it is one.
fn temporary(name: &str) -> Option<Temporary<'_>> {
    let rest = name.strip_prefix('.')?;
    if let Some(token) = rest
        .strip_prefix("migrate-")
        .and_then(|rest| rest.strip_suffix(".lock"))
    {
        return is_token(token).then_some(Temporary::MigrationLock);
    }
    if let Some(log) = rest.strip_suffix(".state.new") {
        let id = log.strip_suffix(".jsonl")?;
        return (!id.is_empty() && !id.starts_with('.'))
            .then_some(Temporary::SnapshotDraft { log });
    }
    let (file, token) = rest.rsplit_once(".tmp-")?;
    // Only the files of a log: a log's own, its fork's spool, its staged
    // snapshot. Another program's `.<name>.tmp-<n>-<n>` in the folder is
    // not sessionlog's to remove.
    let log = ["", ".spool", ".state"]
        .iter()
        .find_map(|suffix| file.strip_suffix(suffix)?.strip_suffix(".jsonl"))?;
    (!log.is_empty() && !log.starts_with('.') && is_token(token))
        .then_some(Temporary::Session { token })
}

/// `<pid>-<ms>`: two runs of digits.
fn is_token(token: &str) -> bool {
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    token
        .split_once('-')
        .is_some_and(|(pid, ms)| digits(pid) && digits(ms))
}

/// The most a migration's lock holds: the line naming its source.
const MAX_LOCK_TEXT_BYTES: u64 = 64 << 10;

/// What a migration from `source` writes in its lock: the source on a line
/// of its own ([`Leftover::migration_source`]).
pub(crate) fn lock_text(source: &str) -> String {
    format!("{}\n", sessionlog_schema::one_line(source))
}

/// The name of the lock file of the migration whose token is `token`.
pub(crate) fn migration_lock_name(token: &str) -> String {
    format!(".migrate-{token}.lock")
}

/// The millisecond of the last token this process gave.
static LAST_MS: AtomicU64 = AtomicU64::new(0);

/// Moves the tokens this process gives to after `ms`, which a test sets
/// far ahead of the clock: the tokens given next are then `ms + 1`,
/// `ms + 2`, … whatever time the test takes.
#[cfg(test)]
pub(crate) fn give_tokens_after(ms: u64) {
    LAST_MS.fetch_max(ms, Ordering::Relaxed);
}

/// The millisecond of the last token this process gave: a token given
/// since one of `ms` is at most `ms` when this is.
#[cfg(test)]
pub(crate) fn last_token_ms() -> u64 {
    LAST_MS.load(Ordering::Relaxed)
}

/// A `<pid>-<ms>` token for temporary names made now by this process,
/// never one it gave before: two creations of one session in the same
/// millisecond (two threads, or two handles of the store) must not share a
/// temporary file, or the one refused would remove the other's. A token
/// asked for within a millisecond of the last takes the next millisecond.
/// Another process may give the same token (the same pid in another
/// container sharing the folder): every temporary file is created with
/// `O_EXCL`, so that the name being taken is told, and never removed.
pub(crate) fn new_token() -> String {
    let now = crate::writer::now_ms();
    let previous = LAST_MS
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        .unwrap_or_else(|last| last);
    let ms = now.max(previous.saturating_add(1));
    format!("{}-{ms}", std::process::id())
}

/// Takes the exclusive `flock` a creation holds on its temporary file (or a
/// migration on its lock file). It waits rather than tries: the only other
/// taker is a cleaner testing the lock, for a moment. Best effort: a file
/// system without `flock` leaves the file unheld, and then only its age
/// protects it.
pub(crate) fn hold(file: &File) {
    let _ = file.lock();
}

/// Whether somebody holds the `flock` of the file at `path`. A file gone
/// meanwhile is not held, and neither is a name that is no regular file (a
/// symbolic link, a folder: no run of ours made it, nor holds it). A file
/// this user may not open (another user's, in a shared folder) is
/// untestable: it is left alone as if held, the others still cleaned.
fn held(path: &Path) -> Result<Holding, StoreError> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => return Ok(Holding::Free),
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => return Ok(Holding::Free),
        Err(source) => return Err(StoreError::io("stat", path, source)),
    }
    let file = match open_log_for_reading(path) {
        Ok(file) => file,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Holding::Free)
        }
        Err(StoreError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            return Ok(Holding::Untestable)
        }
        Err(error) => return Err(error),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Holding::Free),
        Err(TryLockError::WouldBlock) => Ok(Holding::Held),
        Err(TryLockError::Error(source)) => Err(StoreError::io("test the lock of", path, source)),
    }
}

/// What testing the lock of a temporary file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// Nobody holds it (or it is gone).
    Free,
    /// A running creation or migration holds it.
    Held,
    /// This user may not open it, so its lock cannot be tested.
    Untestable,
}

/// The temporary files in `folder`, in name order.
pub(crate) fn find(folder: &Path) -> Result<Vec<Leftover>, StoreError> {
    let entries = std::fs::read_dir(folder)
        .map_err(|source| StoreError::io("read folder", folder, source))?;
    let now = SystemTime::now();
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::io("read folder", folder, source))?;
        let name = entry.file_name();
        let Some(kind) = name.to_str().and_then(temporary) else {
            continue;
        };
        let path = entry.path();
        let metadata = match std::fs::symlink_metadata(&path) {
            Ok(metadata) if metadata.is_file() => metadata,
            Ok(_) => continue,
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(StoreError::io("stat", &path, source)),
        };
        let age = metadata
            .modified()
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .unwrap_or_default();
        let holdings = match kind {
            Temporary::MigrationLock => vec![held(&path)?],
            // Its writer holds the log's lock while it writes it.
            Temporary::SnapshotDraft { log } => vec![held(&folder.join(log))?],
            Temporary::Session { token } => {
                vec![
                    held(&folder.join(migration_lock_name(token)))?,
                    held(&path)?,
                ]
            }
        };
        found.push(Leftover {
            path,
            bytes: metadata.len(),
            age,
            in_use: holdings.iter().any(|holding| *holding != Holding::Free),
            untestable: !holdings.contains(&Holding::Held)
                && holdings.contains(&Holding::Untestable),
        });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// Removes the locks that interrupted migrations from `source` into
/// `folder` left (none holds them) once a run has finished what they had
/// begun (`migrate --resume` from that source); returns how many. The locks
/// of migrations from other sources stay: the folder may still lack what
/// those had not published. A lock that names no source is removed too: a
/// run writes (and syncs) its source into its lock before it stages
/// anything, so such a run published nothing.
pub(crate) fn remove_finished(folder: &Path, source: &str, io: &Io) -> Result<usize, StoreError> {
    let found = find(folder)?;
    let finished = found.iter().filter(|leftover| {
        leftover.is_migration_lock()
            && !leftover.in_use
            && leftover
                .migration_source()
                .is_none_or(|named| named == source)
    });
    Ok(remove_each(folder, io, finished)?.len())
}

/// Removes those of `found` (what [`find`] gave for `folder`) that are
/// [`removable`](Leftover::removable) at `min_age`; returns them. One gone
/// meanwhile is skipped.
pub(crate) fn remove(
    folder: &Path,
    io: &Io,
    found: &[Leftover],
    min_age: Duration,
) -> Result<Vec<Leftover>, StoreError> {
    let removable = found.iter().filter(|leftover| leftover.removable(min_age));
    remove_each(folder, io, removable)
}

/// Removes each of `leftovers`, then syncs `folder` when any went; returns
/// those removed. One gone meanwhile is skipped.
fn remove_each<'l>(
    folder: &Path,
    io: &Io,
    leftovers: impl Iterator<Item = &'l Leftover>,
) -> Result<Vec<Leftover>, StoreError> {
    let mut removed = Vec::new();
    for leftover in leftovers {
        match std::fs::remove_file(&leftover.path) {
            Ok(()) => removed.push(leftover.clone()),
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(StoreError::io("remove", &leftover.path, source)),
        }
    }
    if !removed.is_empty() {
        io.sync_folder(folder)
            .map_err(|source| StoreError::io("fsync folder", folder, source))?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{header, ok};
    use crate::JsonlStore;

    fn age(path: &Path, by: Duration) {
        let file = ok(std::fs::OpenOptions::new().write(true).open(path));
        ok(file.set_modified(SystemTime::now() - by));
    }

    /// A lock names its source on one line, as [`lock_text`] writes it;
    /// anything else (an empty lock, one cut before its line break, a
    /// control character, more than a line's worth) names none.
    #[test]
    fn a_migration_lock_names_the_source_its_run_wrote_or_none() {
        let folder = ok(tempfile::tempdir());
        let source = |text: &[u8], name: &str| {
            let path = folder.path().join(name);
            ok(std::fs::write(&path, text));
            let found = ok(find(folder.path()));
            let leftover = found.iter().find(|leftover| leftover.path == path);
            leftover.and_then(Leftover::migration_source)
        };
        let written = lock_text("/srv/my logs");
        assert_eq!(
            source(written.as_bytes(), ".migrate-1-1.lock").as_deref(),
            Some("/srv/my logs")
        );
        assert_eq!(source(b"", ".migrate-1-2.lock"), None);
        assert_eq!(source(b"/srv/logs", ".migrate-1-3.lock"), None);
        assert_eq!(source(b"/srv\x1b[2J\n", ".migrate-1-4.lock"), None);
        assert_eq!(source(b"/a\n/b\n", ".migrate-1-5.lock"), None);
        let long = format!("/{}\n", "x".repeat(MAX_LOCK_TEXT_BYTES as usize));
        assert_eq!(source(long.as_bytes(), ".migrate-1-6.lock"), None);
        // A line break in the source is escaped, not a second line.
        let escaped = lock_text("/srv/a\nb");
        assert_eq!(escaped.matches('\n').count(), 1, "{escaped:?}");
        assert_eq!(source(b"/srv/logs\n", ".s.jsonl.tmp-1-7"), None, "no lock");
    }

    #[test]
    fn names_of_temporary_files_are_told_apart_from_logs() {
        assert!(matches!(
            temporary(".s1.jsonl.tmp-12-1700000000000"),
            Some(Temporary::Session {
                token: "12-1700000000000"
            })
        ));
        for name in [".s1.jsonl.spool.tmp-12-17", ".s1.jsonl.state.tmp-12-17"] {
            assert!(
                matches!(temporary(name), Some(Temporary::Session { token: "12-17" })),
                "{name}"
            );
        }
        assert!(matches!(
            temporary(".migrate-12-17.lock"),
            Some(Temporary::MigrationLock)
        ));
        assert!(matches!(
            temporary(".s1.jsonl.state.new"),
            Some(Temporary::SnapshotDraft { log: "s1.jsonl" })
        ));
        for name in [
            "s1.jsonl",
            ".s1.jsonl",
            ".s1.jsonl.state",
            "..jsonl.state.new",
            "..s1.jsonl.state.new",
            ".s1.state.new",
            "s1.jsonl.state.new",
            ".s1.jsonl.tmp-",
            ".s1.jsonl.tmp-12",
            ".s1.jsonl.tmp-12-x",
            ".tmp-12-17",
            ".jsonl.tmp-12-17",
            "..s1.jsonl.tmp-12-17",
            ".s1.txt.tmp-12-17",
            ".s1.jsonl.other.tmp-12-17",
            ".migrate-12.lock",
            "migrate-12-17.lock",
        ] {
            assert!(temporary(name).is_none(), "{name}");
        }
    }

    #[test]
    fn only_old_temporary_files_nobody_holds_are_removed() {
        let folder = ok(tempfile::tempdir());
        let store = ok(JsonlStore::create_folder(folder.path()));
        ok(store.create(&header("s1"), &[], crate::Durability::Fsync));
        let log = store.log_path(&crate::store::tests::id("s1"));
        let stale = folder.path().join(".s2.jsonl.tmp-1-1");
        let young = folder.path().join(".s3.jsonl.tmp-1-2");
        let held_file = folder.path().join(".s4.jsonl.tmp-1-3");
        let staged = folder.path().join(".s5.jsonl.tmp-1-4");
        let run_lock = folder.path().join(migration_lock_name("1-4"));
        let stale_lock = folder.path().join(migration_lock_name("1-5"));
        for path in [&stale, &young, &held_file, &staged, &run_lock, &stale_lock] {
            ok(std::fs::write(path, b"partial"));
        }
        for path in [&stale, &held_file, &staged, &run_lock, &stale_lock, &log] {
            age(path, Duration::from_secs(3600));
        }
        let holder = ok(File::open(&held_file));
        hold(&holder);
        let migration = ok(File::open(&run_lock));
        hold(&migration);

        let found = ok(find(folder.path()));
        let in_use: Vec<&Path> = found
            .iter()
            .filter(|leftover| leftover.in_use)
            .map(|leftover| leftover.path.as_path())
            .collect();
        assert_eq!(
            in_use,
            [run_lock.as_path(), held_file.as_path(), staged.as_path()],
            "in name order"
        );
        assert_eq!(found.len(), 6, "the log is not a temporary file: {found:?}");

        let io = Io::default();
        let removed: Vec<PathBuf> =
            ok(remove(folder.path(), &io, &found, Duration::from_secs(600)))
                .into_iter()
                .map(|leftover| leftover.path)
                .collect();
        // An interrupted migration's lock is its mark: kept.
        assert_eq!(removed, std::slice::from_ref(&stale));
        for path in [&log, &young, &held_file, &staged, &run_lock, &stale_lock] {
            assert!(path.exists(), "{} was kept", path.display());
        }

        drop((holder, migration));
        let removed = ok(remove(
            folder.path(),
            &io,
            &ok(find(folder.path())),
            Duration::ZERO,
        ));
        assert_eq!(removed.len(), 3, "{removed:?}");
        assert!(log.exists());
        assert!(run_lock.exists() && stale_lock.exists(), "the locks stay");
        // Until a run finishes the migrations they mark: one from their
        // source. A lock cut short (naming no source: its run staged
        // nothing) goes with any.
        ok(std::fs::write(&run_lock, lock_text("/src")));
        ok(std::fs::write(&stale_lock, lock_text("/other")));
        let unnamed = folder.path().join(migration_lock_name("1-6"));
        ok(std::fs::write(&unnamed, b""));
        assert_eq!(ok(remove_finished(folder.path(), "/src", &io)), 2);
        assert!(!run_lock.exists() && !unnamed.exists());
        assert!(
            stale_lock.exists(),
            "the migration from /other is not finished"
        );
        assert_eq!(ok(remove_finished(folder.path(), "/other", &io)), 1);
        assert!(!stale_lock.exists());
        assert_eq!(ok(store.ids()).len(), 1);
    }

    /// A snapshot's `.new` that a killed writer left is a leftover; one
    /// beside a log a writer holds is being written, and stays.
    #[test]
    fn a_snapshot_being_written_is_removed_only_when_its_log_is_not_held() {
        let folder = ok(tempfile::tempdir());
        let store = ok(JsonlStore::create_folder(folder.path()));
        for session in ["open", "closed"] {
            ok(store.create(&header(session), &[], crate::Durability::Fsync));
        }
        let writer = ok(store.open_writer(
            &crate::store::tests::id("open"),
            crate::WriterOptions::default(),
        ));
        let drafts = [".open.jsonl.state.new", ".closed.jsonl.state.new"]
            .map(|name| folder.path().join(name));
        for draft in &drafts {
            ok(std::fs::write(draft, b"sessionlog-state"));
            age(draft, Duration::from_secs(3600));
        }
        let found = ok(find(folder.path()));
        let in_use: Vec<(&Path, bool)> = found
            .iter()
            .map(|leftover| (leftover.path.as_path(), leftover.in_use))
            .collect();
        assert_eq!(
            in_use,
            [(drafts[1].as_path(), false), (drafts[0].as_path(), true)]
        );
        let io = Io::default();
        let removed = ok(remove(folder.path(), &io, &found, Duration::from_secs(600)));
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(drafts[0].exists() && !drafts[1].exists());
        drop(writer);
        let removed = ok(remove(
            folder.path(),
            &io,
            &ok(find(folder.path())),
            Duration::ZERO,
        ));
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert_eq!(ok(store.ids()).len(), 2, "the logs stay");
    }
}
