//! The I/O seam: every operation by which the store changes durable state
//! (write, fdatasync, truncate, publish, folder fsync) goes through `Io`, so
//! tests can make any one of them fail or observe what reached the disk.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

/// What a name leads to, beside a file held open through it
/// ([`what_is_named`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    /// The file held, still linked.
    TheFile,
    /// Another file: the one held was replaced under the name.
    AnotherFile,
    /// Nothing: the file held was removed, or renamed away.
    Nothing,
}

/// What `path` leads to now, beside `open`, a file opened through it: a
/// writer that goes on writing a file no longer at its name writes where
/// no reader finds it (the JSONL sink, the SQLite committer's database and
/// write-ahead log). The name is not followed.
pub(crate) fn what_is_named(path: &Path, open: &File) -> io::Result<Named> {
    use std::os::unix::fs::MetadataExt;
    let named = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Named::Nothing),
        Err(error) => return Err(error),
    };
    let open = open.metadata()?;
    Ok(
        match open.nlink() > 0 && open.dev() == named.dev() && open.ino() == named.ino() {
            true => Named::TheFile,
            false => Named::AnotherFile,
        },
    )
}

/// A place where the store touches durable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// Creating the temporary file of a new session.
    CreateTemp,
    /// Writing bytes to a log.
    Write,
    /// fdatasync of a log (or of a new session's temporary file).
    Fsync,
    /// Truncating a torn tail.
    Truncate,
    /// Publishing a new session's file under its final name.
    Publish,
    /// fsync of the folder after a publish.
    FolderFsync,
    /// A SQLite transaction commit.
    Commit,
    /// Writing a state snapshot (a cache beside a log: its failure never
    /// fails an append).
    Snapshot,
}

/// Decides, before each operation, whether it fails; and hears after each
/// operation that succeeded. Implemented by fault-injection tests.
pub trait FaultInjector: Send + Sync {
    /// Called before `point` on `path`; an error is returned by the store as
    /// if the operation itself had failed.
    fn before(&self, point: FaultPoint, path: &Path) -> io::Result<()>;
    /// Called after `point` on `path` succeeded.
    fn after(&self, _point: FaultPoint, _path: &Path) {}
}

/// The seam itself: plain std calls, each preceded by the injector's say.
#[derive(Clone, Default)]
pub struct Io {
    injector: Option<Arc<dyn FaultInjector>>,
}

impl fmt::Debug for Io {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Io")
            .field("faults", &self.injector.is_some())
            .finish()
    }
}

impl Io {
    /// An `Io` whose operations are first put to `injector`.
    pub fn with_faults(injector: Arc<dyn FaultInjector>) -> Io {
        Io {
            injector: Some(injector),
        }
    }

    pub(crate) fn check(&self, point: FaultPoint, path: &Path) -> io::Result<()> {
        match &self.injector {
            Some(injector) => injector.before(point, path),
            None => Ok(()),
        }
    }

    pub(crate) fn done(&self, point: FaultPoint, path: &Path) {
        if let Some(injector) = &self.injector {
            injector.after(point, path);
        }
    }

    fn run<T>(
        &self,
        point: FaultPoint,
        path: &Path,
        operation: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        self.check(point, path)?;
        let value = operation()?;
        self.done(point, path);
        Ok(value)
    }

    pub(crate) fn write_all(&self, file: &mut File, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.run(FaultPoint::Write, path, || file.write_all(bytes))
    }

    /// Copies the rest of `from` to `to` (in the kernel where it can:
    /// `copy_file_range`), one write as far as faults go.
    pub(crate) fn copy_all(&self, from: &mut File, to: &mut File, path: &Path) -> io::Result<()> {
        self.run(FaultPoint::Write, path, || io::copy(from, to).map(drop))
    }

    pub(crate) fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.run(FaultPoint::Fsync, path, || file.sync_data())
    }

    pub(crate) fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        self.run(FaultPoint::Truncate, path, || file.set_len(len))
    }

    pub(crate) fn create_temp(&self, path: &Path) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        self.run(FaultPoint::CreateTemp, path, || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
        })
    }

    /// Publishes `from` as `to` without ever replacing an existing `to`
    /// (a hard link fails when the name exists), then removes `from`.
    pub(crate) fn publish(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.run(FaultPoint::Publish, to, || {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        })
    }

    /// Replaces the file `path` with `bytes` as a whole: written to
    /// `temporary` (created 0600, never through a symlink), then renamed
    /// over `path`. A kill midway leaves `path` as it was (and `temporary`,
    /// which the next replacement unlinks before it creates its own). Not synced: what it writes is
    /// a cache, and a reader refuses one that a power loss cut short.
    pub(crate) fn replace_file(
        &self,
        temporary: &Path,
        path: &Path,
        bytes: &[u8],
    ) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        self.run(FaultPoint::Snapshot, path, || {
            // Whatever sits at the temporary name (one a killed writer left,
            // a hard link, a FIFO, a file of another mode) is unlinked, not
            // written through: the new file is created here, 0600.
            match std::fs::remove_file(temporary) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(temporary)?;
            file.write_all(bytes)?;
            drop(file);
            std::fs::rename(temporary, path)
        })
    }

    /// Renames the state snapshot written whole at `from` over `to` (a
    /// migration's, once its log is published). Not synced: a cache.
    pub(crate) fn rename_snapshot(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.run(FaultPoint::Snapshot, to, || std::fs::rename(from, to))
    }

    pub(crate) fn sync_folder(&self, folder: &Path) -> io::Result<()> {
        self.run(FaultPoint::FolderFsync, folder, || {
            File::open(folder)?.sync_all()
        })
    }

    pub(crate) fn commit<T>(
        &self,
        path: &Path,
        operation: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        self.run(FaultPoint::Commit, path, operation)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    /// What sits at the temporary name is unlinked, never written through:
    /// a hard link to a file elsewhere keeps that file as it was, a file of
    /// a looser mode gives the replacement none of it, a FIFO does not
    /// block the write.
    #[test]
    fn a_replacement_never_writes_through_what_sits_at_its_temporary_name() {
        let folder = tempfile::tempdir().expect("tempdir");
        let path = folder.path().join(".s.jsonl.state");
        let temporary = folder.path().join(".s.jsonl.state.new");
        let victim = folder.path().join("victim");
        std::fs::write(&victim, "not a snapshot").expect("write");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        std::fs::hard_link(&victim, &temporary).expect("link");
        let io = Io::default();
        io.replace_file(&temporary, &path, b"snapshot one")
            .expect("replaced");
        assert_eq!(std::fs::read(&victim).expect("read"), b"not a snapshot");
        let metadata = std::fs::metadata(&path).expect("stat");
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(metadata.nlink(), 1);

        let made = std::process::Command::new("mkfifo")
            .arg(&temporary)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        io.replace_file(&temporary, &path, b"snapshot two")
            .expect("replaced past a FIFO");
        assert_eq!(std::fs::read(&path).expect("read"), b"snapshot two");
    }
}
