//! The JSONL backend: a folder of `<id>.jsonl` files, one session each.
//!
//! Creation writes the header and seeded events to a temporary file in the
//! same folder, fsyncs it, publishes it under its final name with a hard link
//! (which, unlike rename, never replaces an existing session), removes the
//! temporary name and fsyncs the folder. Logs are 0600, folders 0700. Writers
//! hold an exclusive `flock` on the log; readers take no lock.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sessionlog_projections::fold;
use sessionlog_schema::{
    decode_header, ChainValue, DecodedHeader, EventRecord, SessionHeader, SessionId,
    MAX_RECORD_BYTES,
};

use crate::error::Refusal;
use crate::follow::LogFollower;
use crate::io::{Io, Named};
use crate::leftovers::{self, Leftover};
use crate::reader::{
    ensure_regular_file, file_kind, log_open_error, open_log_for_reading, FoldedEvent, LogReader,
    Snapshot,
};
use crate::state_snapshot;
use crate::writer::{Durability, LogSink, SessionWriter, WriterOptions};
use crate::StoreError;

/// A folder of JSONL session logs.
#[derive(Debug, Clone)]
pub struct JsonlStore {
    folder: PathBuf,
    io: Io,
    /// Opened with [`JsonlStore::open_read_only`]: every write is refused.
    read_only: bool,
}

/// One session of a listing, read from its header line only.
#[derive(Debug)]
pub struct ListEntry {
    /// The session id (from the file name, or the database key).
    pub id: SessionId,
    /// Its header as it is (a value out of its vocabulary is read as
    /// absent, not refused: `verify` reports it), or why it could not be
    /// read.
    pub header: Result<SessionHeader, StoreError>,
}

/// An entry of a folder named like a log that holds none, and what it is.
pub type PassedOver = (PathBuf, String);

impl JsonlStore {
    /// Opens an existing folder of logs.
    pub fn open(folder: &Path) -> Result<JsonlStore, StoreError> {
        let metadata = std::fs::metadata(folder)
            .map_err(|source| StoreError::io("open folder", folder, source))?;
        if !metadata.is_dir() {
            // Name what the path is: "not a folder" about a file reads as
            // if the file were missing.
            let what = if metadata.is_file() {
                "it is a file, not a store: a store is a folder of <id>.jsonl logs or a .db/.sqlite database, and a lone log is a file whose name ends in .jsonl"
            } else {
                "it is neither a folder of logs nor a .db/.sqlite database"
            };
            return Err(StoreError::io(
                "open the store",
                folder,
                std::io::Error::new(std::io::ErrorKind::NotADirectory, what),
            ));
        }
        Ok(JsonlStore {
            folder: folder.to_owned(),
            io: Io::default(),
            read_only: false,
        })
    }

    /// Opens an existing folder of logs for reading only: creating a
    /// session, opening a writer, forking into it and removing leftovers
    /// are refused, as they are by a database opened read-only.
    pub fn open_read_only(folder: &Path) -> Result<JsonlStore, StoreError> {
        let mut store = JsonlStore::open(folder)?;
        store.read_only = true;
        Ok(store)
    }

    /// Whether this store was opened with [`JsonlStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// A refusal for a store opened read-only, else nothing.
    pub(crate) fn writable(&self) -> Result<(), StoreError> {
        match self.read_only {
            true => Err(StoreError::read_only(&self.folder)),
            false => Ok(()),
        }
    }

    /// Opens `folder`, creating it (0700) when missing, with every missing
    /// folder above it: each new folder is made durable in its parent (an
    /// fsync of the parent after the `mkdir`), so that a session published
    /// in the new store survives a power loss together with the folders
    /// that lead to it.
    pub fn create_folder(folder: &Path) -> Result<JsonlStore, StoreError> {
        let mut missing = Vec::new();
        let mut at = folder;
        while !at.exists() {
            missing.push(at);
            match at.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => at = parent,
                _ => break,
            }
        }
        let io = Io::default();
        for new in missing.into_iter().rev() {
            match std::fs::DirBuilder::new().mode(0o700).create(new) {
                Ok(()) => {}
                // Made meanwhile by another process, which syncs it.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && new.is_dir() => {
                    continue
                }
                Err(source) => return Err(StoreError::io("create folder", new, source)),
            }
            let parent = match new.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            io.sync_folder(parent)
                .map_err(|source| StoreError::io("fsync folder", parent, source))?;
        }
        JsonlStore::open(folder)
    }

    /// The same store with its file operations going through `io`.
    pub fn with_io(mut self, io: Io) -> JsonlStore {
        self.io = io;
        self
    }

    /// The seam this store's durable changes go through.
    pub(crate) fn io(&self) -> &Io {
        &self.io
    }

    /// The store's folder.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The log file of session `id` (the id is valid, so the path cannot
    /// leave the folder).
    pub fn log_path(&self, id: &SessionId) -> PathBuf {
        self.folder.join(format!("{id}.jsonl"))
    }

    /// Whether session `id` exists: whether anything is at its log's path.
    /// A path that cannot be looked at (its folder not searchable, the path
    /// too long) is an error, not a session that is not there.
    pub fn contains(&self, id: &SessionId) -> Result<bool, StoreError> {
        let path = self.log_path(id);
        match path.symlink_metadata() {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(StoreError::io("stat", &path, source)),
        }
    }

    /// Creates a session atomically with its header and `events` (a child's
    /// seeded prefix and first own events). The events are checked against
    /// every rule first; an existing id is refused.
    pub fn create(
        &self,
        header: &SessionHeader,
        events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.writable()?;
        let path = self.log_path(&header.id);
        create_log_file(&path, header, events, durability, &self.io)
    }

    /// A streaming reader over session `id`.
    pub fn reader(&self, id: &SessionId) -> Result<LogReader<BufReader<File>>, StoreError> {
        let path = self.existing_log(id)?;
        LogReader::open(&path, Some(id.clone()))
    }

    /// The temporary files in the folder: sessions being created or staged
    /// by a migration, migrations' lock files, and state snapshots being
    /// written, each with whether a running creation, migration or writer
    /// holds it (see [`Leftover`]).
    pub fn leftovers(&self) -> Result<Vec<Leftover>, StoreError> {
        leftovers::find(&self.folder)
    }

    /// Removes those of `found` (what [`leftovers`](Self::leftovers) gave)
    /// that no running creation, migration or writer held and that were
    /// last written at least `min_age` ago (what a killed creation, fork,
    /// migration or writer left); returns them.
    pub fn remove_leftovers(
        &self,
        found: &[Leftover],
        min_age: Duration,
    ) -> Result<Vec<Leftover>, StoreError> {
        self.writable()?;
        leftovers::remove(&self.folder, &self.io, found, min_age)
    }

    /// A follower of session `id` that delivers its events from
    /// `from_seq` on, reading only what is appended (see [`LogFollower`]);
    /// from a seq near the log's end, it reads the log from there
    /// ([`LogFollower::from_seq_near_the_end`]).
    pub fn follower(&self, id: &SessionId, from_seq: u64) -> Result<LogFollower, StoreError> {
        let path = self.existing_log(id)?;
        LogFollower::from_seq_near_the_end(&path, Some(id.clone()), from_seq)
    }

    /// The good prefix of session `id`, in memory.
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        let path = self.existing_log(id)?;
        Snapshot::read(&path, Some(id.clone()))
    }

    /// The state of session `id` as of its last good seq: what a writer
    /// opened now would start from, folded from the session's state
    /// snapshot and the events after it when the snapshot still holds
    /// (docs/FORMAT.md, "State snapshots"), else from the start. Reads
    /// only; a torn tail is left to the next writer. A rule broken or
    /// corruption in what it reads is refused as a writer refuses it.
    pub fn current_state(
        &self,
        id: &SessionId,
    ) -> Result<sessionlog_projections::SessionState, StoreError> {
        current_log_state(&self.existing_log(id)?, Some(id.clone()))
    }

    /// Opens the single writer of session `id`. See [`open_log_writer`].
    pub fn open_writer(
        &self,
        id: &SessionId,
        options: WriterOptions,
    ) -> Result<SessionWriter, StoreError> {
        self.writable()?;
        let path = self.existing_log(id)?;
        open_log_writer(&path, Some(id.clone()), options, self.io.clone())
    }

    /// The ids of every session, sorted. Files that are not `<valid id>.jsonl`
    /// (temporary files start with a dot) are skipped, and so, with a
    /// warning, is a `<valid id>.jsonl` that is no regular file (a folder,
    /// a FIFO, a symbolic link, which no log is opened through): one such
    /// name must not keep every other session from being read.
    pub fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        let (ids, passed_over) = self.scan_folder()?;
        // Once a process: a command may list a folder more than once.
        static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
        for (path, what) in passed_over {
            let first = WARNED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(path.clone());
            if first {
                tracing::warn!(path = %crate::error::shown_path(&path), "passed over: {what}");
            }
        }
        Ok(ids)
    }

    /// The entries of the folder named like a log that hold none: a
    /// `<id>.jsonl` that is a folder, a symbolic link, a FIFO, a socket or
    /// a device, and a `.jsonl` file whose name is no valid session id,
    /// each with what it is. [`ids`](Self::ids) passes over them with a
    /// warning; `migrate` and `diff`, which copy or compare every session,
    /// refuse a folder that holds one.
    pub fn passed_over(&self) -> Result<Vec<PassedOver>, StoreError> {
        Ok(self.scan_folder()?.1)
    }

    fn scan_folder(&self) -> Result<(Vec<SessionId>, Vec<PassedOver>), StoreError> {
        let entries = std::fs::read_dir(&self.folder)
            .map_err(|source| StoreError::io("read folder", &self.folder, source))?;
        let mut ids = Vec::new();
        let mut passed_over = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|source| StoreError::io("read folder", &self.folder, source))?;
            let name = entry.file_name();
            let Some(stem) = name.as_bytes().strip_suffix(b".jsonl") else {
                continue;
            };
            // Dot-named files are the store's own (state snapshots,
            // temporary files), never logs.
            if stem.starts_with(b".") {
                continue;
            }
            // A name that is not UTF-8 is no id either, and is named as the
            // others are: passed over unsaid, it would be a session a copy
            // leaves out and then proves "identical".
            let stem = String::from_utf8_lossy(stem);
            let Ok(id) = SessionId::parse(&stem) else {
                passed_over.push((
                    entry.path(),
                    format!("{stem:?} is no valid session id, so no log of a session"),
                ));
                continue;
            };
            let file_type = entry
                .file_type()
                .map_err(|source| StoreError::io("read folder", entry.path(), source))?;
            if let Some(what) = file_kind(file_type) {
                passed_over.push((
                    entry.path(),
                    format!("{what}, not a regular file, so no log of session {id}"),
                ));
                continue;
            }
            ids.push(id);
        }
        ids.sort();
        passed_over.sort();
        Ok((ids, passed_over))
    }

    /// Every session with its header, reading only the first line of each log.
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
        let ids = self.ids()?;
        Ok(ids
            .into_iter()
            .map(|id| {
                let header =
                    read_header_as_is(&self.log_path(&id), Some(&id)).map(|read| read.header);
                ListEntry { id, header }
            })
            .collect())
    }

    /// The log of session `id`, which must exist: a missing name is
    /// `NotFound`, and a name that cannot be looked up (a path too long, a
    /// folder that cannot be searched) is the I/O error it is, never taken
    /// for a missing session.
    pub(crate) fn existing_log(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        let path = self.log_path(id);
        match path.symlink_metadata() {
            Ok(_) => Ok(path),
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
                Err(StoreError::NotFound {
                    id: id.to_string(),
                    path: self.folder.clone(),
                })
            }
            Err(source) => Err(StoreError::io("open", path, source)),
        }
    }
}

/// Creates the log file `path` atomically (see the module docs) holding
/// `header` and `events`, after checking the events against every rule. An
/// existing file is never replaced: `AlreadyExists`.
pub fn create_log_file(
    path: &Path,
    header: &SessionHeader,
    events: &[EventRecord],
    durability: Durability,
    io: &Io,
) -> Result<(), StoreError> {
    create_log_file_as_stored(path, header, &header.to_body(), events, durability, io)
}

/// [`create_log_file`] with the header record's body given as another log
/// stored it (`header_body`, its members in any order, as `header`
/// reads): the copy keeps it byte for byte, and with it the hash chain
/// and every own seal of the events after it.
pub fn create_log_file_as_stored(
    path: &Path,
    header: &SessionHeader,
    header_body: &str,
    events: &[EventRecord],
    durability: Durability,
    io: &Io,
) -> Result<(), StoreError> {
    crate::writer::check_storable(header, events)?;
    let bytes = crate::writer::log_text(&header.id, header_body, events);
    crate::writer::check_log_text(&header.id, &bytes, events.len())?;
    let (state, violations) =
        sessionlog_projections::fold_stored(header.clone(), header_body, events);
    if let Some(violation) = violations.into_iter().next() {
        return Err(StoreError::Rule {
            path: path.to_owned(),
            violation,
        });
    }
    let folder = crate::store::folder_of(path).to_owned();
    let already_exists = || StoreError::AlreadyExists {
        id: header.id.clone(),
        path: path.to_owned(),
    };
    if path.symlink_metadata().is_ok() {
        return Err(already_exists());
    }
    let file_name = path.file_name().map_or_else(
        || header.id.to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let (temp, file) = create_temporary(io, &folder, &file_name)?;
    let result = write_and_publish(io, &folder, &temp, file, path, bytes.as_bytes(), durability);
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result.map_err(|error| match error {
        StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
            already_exists()
        }
        other => other,
    })?;
    if let Some(last) = events.last() {
        if state_snapshot::kept_at_creation(events.len()) {
            let anchor = state_snapshot::SnapshotAnchor {
                seq: last.seq(),
                record_crc: sessionlog_schema::record_crc(&header.id, last.body().as_bytes()),
                offset: bytes.len() as u64,
                lines: events.len() as u64 + 1,
            };
            let header_crc = state_snapshot::header_crc(header_body);
            let snapshot = state_snapshot_path(path);
            if let Err(error) = write_snapshot(io, &snapshot, &state, header_crc, anchor) {
                state_snapshot::not_kept(&header.id, anchor.seq, &error);
            }
        }
    }
    Ok(())
}

/// Creates the temporary file that a new log named `file_name` is written
/// into, under a name no other file has. A name another process took (the
/// same pid and millisecond as ours, which processes in containers sharing
/// the folder can have) is that process's file: it is left alone, never
/// removed, and the next token is tried. Only the file created here is
/// removed when the creation fails.
fn create_temporary(
    io: &Io,
    folder: &Path,
    file_name: &str,
) -> Result<(PathBuf, File), StoreError> {
    let mut tries = 0;
    loop {
        let temp = folder.join(format!(".{file_name}.tmp-{}", leftovers::new_token()));
        match io.create_temp(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(source) if source.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => {
                tries += 1;
            }
            Err(source) => return Err(StoreError::io("create", &temp, source)),
        }
    }
}

/// Writes `bytes` into `file`, the temporary file `temp` just created,
/// and publishes it as `path`.
fn write_and_publish(
    io: &Io,
    folder: &Path,
    temp: &Path,
    mut file: File,
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> Result<(), StoreError> {
    // Held until the temporary name is gone: `sessionlog clean` leaves it.
    leftovers::hold(&file);
    io.write_all(&mut file, temp, bytes)
        .map_err(|source| StoreError::io("write", temp, source))?;
    if durability == Durability::Fsync {
        io.sync_data(&file, temp)
            .map_err(|source| StoreError::io("fdatasync", temp, source))?;
    }
    io.publish(temp, path)
        .map_err(|source| StoreError::io("publish", path, source))?;
    drop(file);
    if durability == Durability::Fsync {
        io.sync_folder(folder)
            .map_err(|source| StoreError::io("fsync folder", folder, source))?;
    }
    Ok(())
}

/// Reads and decodes only the header line of the log at `path`, refusing a
/// header with a value out of its vocabulary.
pub fn read_header(
    path: &Path,
    expected_id: Option<&SessionId>,
) -> Result<SessionHeader, StoreError> {
    let decoded = read_header_as_is(path, expected_id)?;
    if let Some(error) = decoded.vocabulary_errors.into_iter().next() {
        return Err(StoreError::HeaderVocabulary {
            path: path.to_owned(),
            error,
        });
    }
    Ok(decoded.header)
}

/// Reads and decodes only the header line of the log at `path`, as it is:
/// a value out of its vocabulary is returned beside the header (what
/// `list` shows, where `verify` reports it).
pub fn read_header_as_is(
    path: &Path,
    expected_id: Option<&SessionId>,
) -> Result<DecodedHeader, StoreError> {
    let file = open_log_for_reading(path)?;
    let mut reader = BufReader::with_capacity(4096, file.take(MAX_RECORD_BYTES as u64 + 1));
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|source| StoreError::io("read", path, source))?;
    let mut scanner = sessionlog_schema::LogScanner::new(expected_id.cloned());
    let terminated = line.last() == Some(&b'\n');
    if terminated {
        line.pop();
    }
    let mut ready = Vec::new();
    let corrupt = |corruption| StoreError::Corrupt {
        path: path.to_owned(),
        corruption,
    };
    if line.is_empty() && !terminated {
        return Err(corrupt(sessionlog_schema::Corruption {
            position: sessionlog_schema::Position { line: 1, offset: 0 },
            reason: "the file is empty: line 1 must be the session header".into(),
        }));
    }
    scanner
        .push_line(&line, terminated, 0, &mut ready)
        .map_err(corrupt)?;
    let decoded = decode_header(&line).map_err(|error| {
        corrupt(sessionlog_schema::Corruption {
            position: sessionlog_schema::Position { line: 1, offset: 0 },
            reason: error.to_string(),
        })
    })?;
    Ok(decoded)
}

/// Opens the single writer of the log at `path`: takes the exclusive lock
/// (`Locked` if another writer, in this process or another, holds it), reads
/// and verifies the log while folding its projections, truncates a torn
/// tail (with a `tracing` warning naming the bytes dropped), and refuses a
/// corrupt or rule-breaking log. With a state snapshot whose anchor still
/// matches, only the records after it are read and checked: damage before
/// it is left for `verify` (docs/FORMAT.md, "State snapshots"). Symlinks are
/// not followed.
pub fn open_log_writer(
    path: &Path,
    expected_id: Option<SessionId>,
    options: WriterOptions,
    io: Io,
) -> Result<SessionWriter, StoreError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| log_open_error(path, source))?;
    ensure_regular_file(&file, path)?;
    match lock_exclusive(&file) {
        Ok(true) => {}
        Ok(false) => {
            let id = match expected_id {
                Some(id) => id,
                None => read_header(path, None)?.id,
            };
            return Err(StoreError::Locked {
                id,
                path: path.to_owned(),
            });
        }
        Err(source) => return Err(StoreError::io("lock", path, source)),
    }
    // The log's name is made durable before anything is acknowledged in
    // it: a command that published the log (create, fork, import,
    // salvage) and was killed before it synced the folder left a name a
    // power loss could still drop, with every append made to it since.
    // Once a writer: a folder with nothing to write back syncs at once.
    let folder = crate::store::folder_of(path);
    io.sync_folder(folder)
        .map_err(|source| StoreError::io("fsync", folder, source))?;
    let reading = file
        .try_clone()
        .map_err(|source| StoreError::io("open", path, source))?;
    let fold = match options.keep_snapshot {
        true => Fold::KeepEvents,
        false => Fold::Resume,
    };
    let Some(folded) = fold_log(path, reading, expected_id, fold)? else {
        unreachable!("only Fold::FromSnapshotOnly folds nothing");
    };
    if let Some(torn) = &folded.summary.torn_tail {
        tracing::warn!(
            path = %path.display(),
            bytes = torn.bytes,
            line = torn.position.line,
            offset = torn.position.offset,
            "truncating a torn tail of {} bytes at line {} (byte offset {}): {}",
            torn.bytes,
            torn.position.line,
            torn.position.offset,
            torn.reason
        );
        io.set_len(&file, path, folded.summary.good_bytes)
            .map_err(|source| StoreError::io("truncate", path, source))?;
        io.sync_data(&file, path)
            .map_err(|source| StoreError::io("fdatasync", path, source))?;
    }
    let absolute_path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let sink = JsonlSink {
        path: path.to_owned(),
        snapshot_path: state_snapshot_path(&absolute_path),
        absolute_path,
        file,
        io,
        pending: Vec::new(),
        pending_lines: 0,
        pending_last_crc: 0,
        good_bytes: folded.summary.good_bytes,
        good_lines: folded.summary.good_lines,
        last_crc: folded.last_crc,
        header_crc: state_snapshot::header_crc(&folded.header_body),
    };
    let writer = SessionWriter::new(
        path.to_owned(),
        Box::new(sink),
        options,
        folded.state,
        folded.events,
    );
    Ok(writer.resumed_from(folded.resumed))
}

/// A log folded through its good prefix.
struct FoldedLog {
    header_body: String,
    state: sessionlog_projections::SessionState,
    /// Every event, when asked for.
    events: Option<Vec<EventRecord>>,
    /// The CRC of the last record of the good prefix (0: none).
    last_crc: u32,
    summary: sessionlog_schema::ScanSummary,
    /// The snapshot it resumed from: its anchor and size in bytes.
    resumed: Option<(state_snapshot::SnapshotAnchor, usize)>,
}

/// What [`fold_log`] folds from and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    /// Every event from the start, kept.
    KeepEvents,
    /// The state, from the state snapshot when one holds (every page of
    /// it read and checked now), else from the start.
    State,
    /// As [`Fold::State`], the snapshot read page by page as the state's
    /// reads land on them: a writer's, which folds again should a page
    /// fail.
    Resume,
    /// The state from the state snapshot only, read page by page as
    /// [`Fold::Resume`] reads it: nothing when none holds, or when a page
    /// that the fold of the records after its anchor reads fails (known
    /// once they are folded, so an error of theirs comes first).
    FromSnapshotOnly,
}

/// Folds the log at `path`, read through `reading`, through its good
/// prefix: from its state snapshot when one holds (and `fold` does not ask
/// for every event), else from its start (or not at all for
/// [`Fold::FromSnapshotOnly`]: `None`). Every line read is checked as a
/// whole-log read checks it; a rule broken refuses the log, unless
/// corruption later in it wins. The caller deals with a torn tail.
fn fold_log(
    path: &Path,
    reading: File,
    expected_id: Option<SessionId>,
    fold: Fold,
) -> Result<Option<FoldedLog>, StoreError> {
    let keep_events = fold == Fold::KeepEvents;
    let again_id = expected_id.clone();
    // A fold that may resume reads the header through a small buffer: a
    // whole read's buffer would take in 256 KiB of events a resume skips.
    let buffer = match keep_events {
        true => crate::reader::READ_BUFFER_BYTES,
        false => crate::reader::HEADER_BUFFER_BYTES,
    };
    let reader = LogReader::new(
        BufReader::with_capacity(buffer, reading),
        path,
        expected_id.clone(),
    )?;
    let header = reader.header().clone();
    let header_body = reader.header_body().to_owned();
    // A fold that keeps every event reads them all anyway; any other
    // resumes from the state snapshot when its anchor still holds.
    let resumed = match keep_events {
        true => None,
        false => resume_point(
            &state_snapshot_path(path),
            reader.file(),
            &header,
            &header_body,
            matches!(fold, Fold::Resume | Fold::FromSnapshotOnly),
        ),
    };
    let mut events = keep_events.then(Vec::new);
    let (mut state, mut reader, resumed) = match resumed {
        Some((state, anchor, bytes, tail)) => {
            let reader =
                reader.resume_at(anchor.offset, anchor.seq + 1, anchor.lines, tail, path)?;
            (state, reader, Some((anchor, bytes)))
        }
        None if fold == Fold::FromSnapshotOnly => return Ok(None),
        None => {
            let state = sessionlog_projections::SessionState::with_header_body(
                header.clone(),
                &header_body,
            );
            let reader = match keep_events {
                true => reader,
                false => reader.restarted(expected_id)?,
            };
            (state, reader, None)
        }
    };
    // A violation refuses the log, but reading goes on: corruption later
    // in it wins (and the `?`s below return it at once).
    let mut refusal = Refusal::default();
    let mut note = |folded: Result<(), sessionlog_projections::Violation>| {
        if let Err(violation) = folded {
            refusal.note(StoreError::Rule {
                path: path.to_owned(),
                violation,
            });
        }
    };
    // The CRC of the last record folded: its line's, over the same body.
    let mut last_line_crc = None;
    match &mut events {
        Some(events) => {
            while let Some(FoldedEvent { record, folded }) = reader.next_event_folded(&mut state)? {
                note(folded);
                events.push(record);
            }
        }
        // A long fold reads on one thread and folds on another.
        None => crate::fold::fold_stream(&mut reader, &mut state, |record, folded, _| {
            note(folded);
            last_line_crc = Some(record.line_crc().unwrap_or_else(|| {
                sessionlog_schema::record_crc(&header.id, record.body().as_bytes())
            }));
        })?,
    }
    if state.snapshot_unreadable() && fold == Fold::FromSnapshotOnly {
        return Ok(None);
    }
    if state.snapshot_unreadable() {
        // A page of the snapshot failed as the tail was folded: a lookup
        // that landed there missed, so what the fold said (a violation, or
        // none) may be wrong. Again from the log's start, the snapshot read
        // whole, every page checked first (so this one is passed over).
        let mut again = reader
            .file()
            .try_clone()
            .map_err(|source| StoreError::io("open", path, source))?;
        // The handles share their offset, which this read left at the end.
        std::io::Seek::seek(&mut again, std::io::SeekFrom::Start(0))
            .map_err(|source| StoreError::io("seek", path, source))?;
        return fold_log(path, again, again_id, Fold::State);
    }
    // The anchor of the next snapshot: the CRC of the last record, hashed
    // once (its own line's CRC, over the same body).
    let last_crc = match events.as_deref().and_then(<[EventRecord]>::last) {
        Some(last) => sessionlog_schema::record_crc(&header.id, last.body().as_bytes()),
        None => last_line_crc.unwrap_or_else(|| resumed.map_or(0, |(anchor, _)| anchor.record_crc)),
    };
    let summary = reader.finish()?;
    if let Some(error) = summary.header_vocabulary_errors.first() {
        let header = StoreError::HeaderVocabulary {
            path: path.to_owned(),
            error: error.clone(),
        };
        return Err(crate::error::first_unless_outranked(
            header,
            refusal.into_result(),
        ));
    }
    refusal.into_result()?;
    Ok(Some(FoldedLog {
        header_body,
        state,
        events,
        last_crc,
        summary,
        resumed,
    }))
}

/// The state of the log at `path` as of its last good seq, folded from its
/// state snapshot when one holds (see [`JsonlStore::current_state`]).
pub(crate) fn current_log_state(
    path: &Path,
    expected_id: Option<SessionId>,
) -> Result<sessionlog_projections::SessionState, StoreError> {
    let file = open_log_for_reading(path)?;
    let Some(folded) = fold_log(path, file, expected_id, Fold::State)? else {
        unreachable!("only Fold::FromSnapshotOnly folds nothing");
    };
    Ok(folded.state)
}

/// The state of the log at `path` as [`current_log_state`] gives it, when
/// its state snapshot holds, read page by page (only the pages its reads
/// land on); `None` when it does not (having read only the header and the
/// snapshot), or when a page that the fold of the records after its anchor
/// reads fails. Their own damage or broken rule is still an error.
pub(crate) fn snapshot_log_state(
    path: &Path,
    expected_id: Option<SessionId>,
) -> Result<Option<sessionlog_projections::SessionState>, StoreError> {
    let file = open_log_for_reading(path)?;
    let folded = fold_log(path, file, expected_id, Fold::FromSnapshotOnly)?;
    Ok(folded.map(|folded| folded.state))
}

/// The state snapshot beside the log at `path`: `.<file name>.state` in
/// the same folder. Dot-named, so no listing takes it for a session, and
/// not of a temporary file's shape, so no leftover cleanup removes it.
pub fn state_snapshot_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.state"))
}

/// Writes `state`, taken at `anchor` of the log whose header body's CRC
/// is `header_crc`, as the state snapshot at `snapshot`, replacing the
/// last one whole; returns its size in bytes.
fn write_snapshot(
    io: &Io,
    snapshot: &Path,
    state: &sessionlog_projections::SessionState,
    header_crc: u32,
    anchor: state_snapshot::SnapshotAnchor,
) -> Result<usize, StoreError> {
    let bytes = state_snapshot::encode(state, header_crc, anchor);
    io.replace_file(&state_snapshot_temporary(snapshot), snapshot, &bytes)
        .map_err(|source| StoreError::io("write the state snapshot", snapshot, source))?;
    Ok(bytes.len())
}

/// Where a snapshot is written before it is renamed over the last one.
fn state_snapshot_temporary(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// The state of the snapshot at `snapshot` and its anchor, when it is whole,
/// of this session and header, and the log `file` still holds at its
/// anchor's offset the record it was taken after; with its size in bytes
/// and the bytes the log has after the anchor. Read page by page when
/// `paged` (only the head now, each other page when the state's reads
/// land on it), else whole, every page checked now.
fn resume_point(
    snapshot: &Path,
    file: &File,
    header: &SessionHeader,
    header_body: &str,
    paged: bool,
) -> Option<(
    sessionlog_projections::SessionState,
    state_snapshot::SnapshotAnchor,
    usize,
    u64,
)> {
    // A snapshot holds less than the log it was folded from (its rows
    // and ids come from the log's records); one far larger is no snapshot
    // of it, and is not read into memory.
    use std::os::unix::fs::MetadataExt;
    let log = file.metadata().ok()?;
    let limit = log.len().saturating_mul(2).saturating_add(1 << 20);
    let decoded = match open_snapshot_file(snapshot, limit, log.uid()) {
        Ok(Some(opened)) => decode_snapshot_file(opened, snapshot, header, header_body, paged),
        Ok(None) => return None,
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            // Said, not only logged: in a shared folder, another user's
            // hand may be on it; and until a writer of the log's owner
            // replaces it, every open folds the whole log.
            tracing::warn!(
                path = %snapshot.display(),
                "ignoring the state snapshot {}: {error}; folding the whole log",
                snapshot.display()
            );
            return None;
        }
        Err(error) => Err(error.to_string()),
    };
    let checked = decoded.and_then(|(state, anchor, size)| {
        let length = record_ends_at(file, &header.id, anchor)?;
        Ok((state, anchor, size, length - anchor.offset))
    });
    match checked {
        Ok(resumed) => Some(resumed),
        Err(why) => {
            state_snapshot::ignored(&header.id, snapshot, &why);
            None
        }
    }
}

/// How much of a snapshot file is read first: its head, unless it has
/// more pages than a snapshot of some 100 MB.
const SNAPSHOT_HEAD_READ: usize = 64 * 1024;

/// The snapshot file `opened` (of `length` bytes), decoded: its state,
/// anchor and size in bytes.
fn decode_snapshot_file(
    (file, length): (File, u64),
    path: &Path,
    header: &SessionHeader,
    header_body: &str,
    paged: bool,
) -> Result<
    (
        sessionlog_projections::SessionState,
        state_snapshot::SnapshotAnchor,
        usize,
    ),
    String,
> {
    use std::os::unix::fs::FileExt;
    let length = usize::try_from(length).map_err(|_| "too long".to_owned())?;
    if !paged {
        let mut bytes = vec![0u8; length];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|error| error.to_string())?;
        let (state, anchor) = state_snapshot::decode(bytes, header, header_body)?;
        return Ok((state, anchor, length));
    }
    let mut bytes = vec![0u8; length.min(SNAPSHOT_HEAD_READ)];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|error| error.to_string())?;
    let head = match state_snapshot::decode_head(&bytes, header, header_body)? {
        Ok(head) => head,
        Err(head_len) if head_len <= length => {
            bytes.resize(head_len, 0);
            file.read_exact_at(&mut bytes, 0)
                .map_err(|error| error.to_string())?;
            match state_snapshot::decode_head(&bytes, header, header_body)? {
                Ok(head) => head,
                Err(_) => return Err("it ends before its fields".to_owned()),
            }
        }
        Err(_) => return Err("it ends before its fields".to_owned()),
    };
    if head.snapshot_len() != length {
        return Err(format!(
            "it is {length} bytes long, its head says {}: torn or changed",
            head.snapshot_len()
        ));
    }
    let pages = SnapshotPages {
        file,
        path: path.to_owned(),
    };
    let (state, anchor) = state_snapshot::decode_paged(head, Box::new(pages), header, header_body)?;
    Ok((state, anchor, length))
}

/// A snapshot file a writer's state reads its pages from, kept open: the
/// writer's next snapshot replaces the file by a rename, so the pages
/// read later are still this file's.
#[derive(Debug)]
struct SnapshotPages {
    file: File,
    path: PathBuf,
}

impl sessionlog_projections::PageSource for SnapshotPages {
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buffer, offset).map_err(|error| {
            tracing::warn!(
                path = %self.path.display(),
                "could not read the state snapshot {} at byte {offset}: {error}",
                self.path.display()
            );
            error
        })
    }
}

/// The snapshot file at `path` and its length, `None` when there is none.
/// Opened without following a symlink, and only a regular file of at
/// most `limit` bytes, owned by `owner` (the log's owner) and writable by
/// no one else: in a folder shared with other users, a snapshot another
/// user wrote, or could have, is no cache of the log's owner's to trust.
fn open_snapshot_file(path: &Path, limit: u64, owner: u32) -> std::io::Result<Option<(File, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    // Refused as not to be trusted (`PermissionDenied`), which the caller
    // warns of, unlike a snapshot merely stale.
    if metadata.uid() != owner {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "owned by user {}, not by the log's owner (user {owner})",
                metadata.uid()
            ),
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "writable by others than its owner (mode {:o})",
                metadata.mode() & 0o777
            ),
        ));
    }
    if metadata.len() > limit {
        return Err(std::io::Error::other(format!(
            "larger than a snapshot of its log can be (at most {limit} bytes)"
        )));
    }
    Ok(Some((file, metadata.len())))
}

/// Whether the log `file` holds, ending at byte `anchor.offset`, an intact
/// record of seq `anchor.seq` whose CRC is `anchor.record_crc`: the log's
/// length in bytes when it does, why not otherwise.
fn record_ends_at(
    file: &File,
    id: &SessionId,
    anchor: state_snapshot::SnapshotAnchor,
) -> Result<u64, String> {
    use std::os::unix::fs::FileExt;
    let length = file.metadata().map_err(|error| error.to_string())?.len();
    if anchor.offset > length || anchor.offset < 2 {
        return Err(format!(
            "its anchor is at byte {} of a log of {length} bytes",
            anchor.offset
        ));
    }
    // Read back from the anchor, in growing windows, to the newline that
    // ends the line before the anchored record.
    let mut window = 4096u64;
    loop {
        let take = window.min(anchor.offset);
        let mut bytes = vec![0u8; take as usize];
        file.read_exact_at(&mut bytes, anchor.offset - take)
            .map_err(|error| error.to_string())?;
        if bytes.last() != Some(&b'\n') {
            return Err(format!("no line ends at byte {}", anchor.offset));
        }
        let line_end = bytes.len() - 1;
        match memchr::memrchr(b'\n', &bytes[..line_end]) {
            Some(newline) => {
                let line = &bytes[newline + 1..line_end];
                let (_, crc) = sessionlog_schema::split_crc(line)
                    .ok_or_else(|| format!("the line before byte {} has no CRC", anchor.offset))?;
                let record = sessionlog_schema::decode_event(id, line).map_err(|error| {
                    format!("the record before byte {}: {error}", anchor.offset)
                })?;
                return match (record.seq() == anchor.seq, crc == anchor.record_crc) {
                    (true, true) => Ok(length),
                    _ => Err(format!(
                        "the log holds seq {} (CRC {crc}) before byte {}, not the anchored seq {}",
                        record.seq(),
                        anchor.offset,
                        anchor.seq
                    )),
                };
            }
            None if take == anchor.offset || take > MAX_RECORD_BYTES as u64 => {
                return Err(format!("no record ends at byte {}", anchor.offset));
            }
            None => window *= 8,
        }
    }
}

/// How long a writer waits for a lock held by another before it reports
/// `Locked`. A process that starts another (as every agent runtime does for
/// its tools) gives the child a copy of each open file description, `flock`
/// included, from `fork` until the child executes its program: a session
/// closed and reopened meanwhile would be refused for that instant.
pub(crate) const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// Takes the exclusive `flock` on `file`, retrying for [`LOCK_GRACE`];
/// `Ok(false)` when another writer still holds it.
pub(crate) fn lock_exclusive(file: &File) -> std::io::Result<bool> {
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(source)) => return Err(source),
        }
    }
}

/// Whether a writer holds the log at `path` now (its lock is taken): a
/// reader that found an unfinished last line may then have met an append
/// still being written, which a writer that opens a log never leaves
/// (it cuts a torn tail first). Taken only for a moment, shared, so a
/// writer opening the log meanwhile waits that moment and no more.
pub fn writer_holds(path: &Path) -> bool {
    let Ok(file) = open_log_for_reading(path) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(std::fs::TryLockError::Error(_)) => false,
    }
}

/// Checks a new session's header and events before it is created: values
/// both backends store, and every rule. Returns their fold.
pub(crate) fn check_new_session(
    path: &Path,
    header: &SessionHeader,
    events: &[EventRecord],
) -> Result<sessionlog_projections::SessionState, StoreError> {
    crate::writer::check_storable(header, events)?;
    crate::writer::check_framing(header, &header.to_body(), events)?;
    let (state, violations) = fold(header.clone(), events);
    match violations.into_iter().next() {
        Some(violation) => Err(StoreError::Rule {
            path: path.to_owned(),
            violation,
        }),
        None => Ok(state),
    }
}

/// Appends lines to one log file. Staged records wait in memory until the
/// writer's sync, which writes them all at once and then fdatasyncs: the
/// file only ever holds what a sync wrote, so no reader, in this process or
/// another, sees an event before it is being made durable, and a writer
/// dropped without syncing leaves nothing behind — as in SQLite, where
/// staged rows wait for the committer.
#[derive(Debug)]
struct JsonlSink {
    path: PathBuf,
    /// `path` made absolute when the writer opened, by which the sink
    /// finds the log again (the check of its name, a read of its last
    /// records) and its snapshot: a process that changes its working
    /// folder (a runtime running a tool) still names the same files.
    absolute_path: PathBuf,
    file: File,
    io: Io,
    /// The encoded lines staged since the last sync.
    pending: Vec<u8>,
    /// How many lines `pending` holds, and the CRC of its last record.
    pending_lines: u64,
    pending_last_crc: u32,
    /// The log's good prefix as written so far: its bytes, its lines, the
    /// CRC of its last record (the anchor of a snapshot taken now).
    good_bytes: u64,
    good_lines: u64,
    last_crc: u32,
    /// The CRC of the stored header body.
    header_crc: u32,
    snapshot_path: PathBuf,
}

impl JsonlSink {
    /// The error of a write that failed (`source`), once what it may have
    /// written is cut back: a refused append must leave none of its lines
    /// for a reopen to find whole (the writer holds the log's lock, so
    /// nothing else was written after the good prefix). The cut is synced;
    /// should it fail, the lines are in doubt, and the error says so.
    fn cut_back(&self, source: std::io::Error) -> StoreError {
        let cut = self
            .io
            .set_len(&self.file, &self.path, self.good_bytes)
            .and_then(|()| self.io.sync_data(&self.file, &self.path));
        match cut {
            Ok(()) => StoreError::io("write", &self.path, source),
            Err(cut_error) => StoreError::io(
                "write",
                &self.path,
                std::io::Error::new(
                    source.kind(),
                    format!(
                        "{source}; cutting the log back to the {} bytes it held before failed too \
                         ({cut_error}): the events of this append may be in the log whole; reopen \
                         the session and read its next seq before appending them again",
                        self.good_bytes
                    ),
                ),
            ),
        }
    }
}

impl JsonlSink {
    /// Checks, once what was just written is synced, that the log's name
    /// still names the file this sink writes: a log replaced under a live
    /// writer (a copy moved over it, as an editor, a sync tool or a
    /// restore does) or removed would take the writer's appends into a
    /// file no reader finds, and the next writer would give their seqs
    /// again. Then nothing written is acknowledged: the error names the
    /// `bytes` of the last write, which are in the file the writer opened.
    fn check_named(&self, bytes: u64) -> Result<(), StoreError> {
        let named = crate::io::what_is_named(&self.absolute_path, &self.file);
        let what = match &named {
            Ok(Named::TheFile) => return Ok(()),
            Ok(Named::AnotherFile) => "was replaced by another file",
            Ok(Named::Nothing) => "was removed",
            Err(_) => "cannot be checked",
        };
        let detail = format!(
            "the log's name {what} while this writer had it open: its last {bytes} bytes went \
             to the file it opened, which no longer has that name, and are not acknowledged; \
             the log now at that name does not hold them"
        );
        Err(StoreError::io(
            "write",
            &self.path,
            match named {
                Err(source) => std::io::Error::new(source.kind(), format!("{detail} ({source})")),
                Ok(_) => std::io::Error::other(detail),
            },
        ))
    }
}

impl LogSink for JsonlSink {
    fn write(&mut self, id: &SessionId, records: &[EventRecord]) -> Result<(), StoreError> {
        for record in records {
            self.pending.extend_from_slice(record.encode(id).as_bytes());
        }
        if let Some(last) = records.last() {
            self.pending_last_crc = sessionlog_schema::record_crc(id, last.body().as_bytes());
            self.pending_lines += records.len() as u64;
        }
        Ok(())
    }

    fn sync(&mut self, durability: Durability) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let written = self.io.write_all(&mut self.file, &self.path, &self.pending);
        let bytes = self.pending.len() as u64;
        self.pending.clear();
        let lines = std::mem::take(&mut self.pending_lines);
        if let Err(source) = written {
            return Err(self.cut_back(source));
        }
        self.good_bytes += bytes;
        self.good_lines += lines;
        self.last_crc = self.pending_last_crc;
        if durability != Durability::Buffered {
            self.io
                .sync_data(&self.file, &self.path)
                .map_err(|source| StoreError::io("fdatasync", &self.path, source))?;
        }
        self.check_named(bytes)
    }

    fn save_snapshot(
        &mut self,
        state: &sessionlog_projections::SessionState,
    ) -> Result<usize, StoreError> {
        let anchor = state_snapshot::SnapshotAnchor {
            seq: state.seq(),
            record_crc: self.last_crc,
            offset: self.good_bytes,
            lines: self.good_lines,
        };
        write_snapshot(
            &self.io,
            &self.snapshot_path,
            state,
            self.header_crc,
            anchor,
        )
    }

    fn refold(&mut self) -> Result<sessionlog_projections::SessionState, StoreError> {
        let mut reader = self.read_written()?;
        let mut state = sessionlog_projections::SessionState::with_header_body(
            reader.header().clone(),
            reader.header_body(),
        );
        while let Some(FoldedEvent { folded, .. }) = reader.next_event_folded(&mut state)? {
            folded.map_err(|violation| StoreError::Rule {
                path: self.path.clone(),
                violation,
            })?;
        }
        Ok(state)
    }

    fn chain_of_log(&mut self) -> Result<ChainValue, StoreError> {
        // What the sink holds unsynced is read after the file's bytes.
        let mut reader = self.read_written()?;
        let header_body = reader.header_body().to_owned();
        let events = std::iter::from_fn(|| reader.next_event().transpose());
        crate::writer::chain_of(&header_body, events, &[])
    }

    /// Reads the records from `seq` on from the end of the log, as `tail -n`
    /// does (at most [`ANCHORED_RECORDS`] of them, held together), then
    /// the lines staged since the last sync.
    fn chain_of_log_since(
        &mut self,
        seq: u64,
        through: u64,
        before: &dyn Fn(&EventRecord) -> Option<ChainValue>,
    ) -> Result<Option<ChainValue>, StoreError> {
        let written = through.saturating_sub(self.pending_lines);
        let count = written
            .checked_sub(seq)
            .and_then(|count| usize::try_from(count + 1).ok())
            .filter(|&count| count <= ANCHORED_RECORDS);
        let Some(count) = count else {
            return Ok(None);
        };
        let last = crate::last::read_last_events(&self.absolute_path, None, count)?;
        if last.torn_tail.is_some() || last.last_seq != written {
            return Ok(None);
        }
        let id = last.header.header.id;
        let mut pending = Vec::new();
        for line in self.pending.split_inclusive(|&byte| byte == b'\n') {
            match sessionlog_schema::decode_event(&id, line.strip_suffix(b"\n").unwrap_or(line)) {
                Ok(record) => pending.push(record),
                Err(_) => return Ok(None),
            }
        }
        let events = last.events.into_iter().filter(|record| record.seq() >= seq);
        crate::writer::chain_since(events.map(Ok), &pending, seq, through, before)
    }
}

/// The most records a JSONL writer reads back from the end of its log to
/// prove its chain from its last seal ([`LogSink::chain_of_log_since`]):
/// they are held together, so past this many the log is read whole, a
/// record at a time.
const ANCHORED_RECORDS: usize = 16_384;

impl JsonlSink {
    /// A reader of every record written so far: what the log holds (the
    /// writer holds its lock, so nothing else wrote to it), then what was
    /// handed to the sink since the last sync.
    fn read_written(&self) -> Result<LogReader<BufReader<impl std::io::Read>>, StoreError> {
        let file = self
            .file
            .try_clone()
            .map_err(|source| StoreError::io("open", &self.path, source))?;
        let held = Positioned {
            file,
            at: 0,
            end: self.good_bytes,
        };
        let source = std::io::Read::chain(held, std::io::Cursor::new(self.pending.clone()));
        LogReader::new(
            BufReader::with_capacity(crate::reader::READ_BUFFER_BYTES, source),
            &self.path,
            None,
        )
    }
}

/// The bytes of `file` from `at` to `end`, read at their offsets (the
/// file's own offset, shared with its other handles, is left alone).
struct Positioned {
    file: File,
    at: u64,
    end: u64,
}

impl Read for Positioned {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = usize::try_from(self.end - self.at).unwrap_or(usize::MAX);
        let take = buffer.len().min(left);
        if take == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buffer[..take], self.at)?;
        self.at += read as u64;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::store::tests::ok;
    use crate::testing::{FaultInjector, FaultPoint};
    use crate::NewEvent;

    fn id(text: &str) -> SessionId {
        SessionId::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn store() -> (tempfile::TempDir, JsonlStore) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        (dir, store)
    }

    fn created(store: &JsonlStore, name: &str) -> SessionId {
        let header = SessionHeader::root(id(name), 1, "/work".into());
        store
            .create(&header, &[], Durability::Fsync)
            .unwrap_or_else(|e| panic!("{e}"));
        header.id
    }

    fn open_writer(store: &JsonlStore, session: &SessionId) -> SessionWriter {
        store
            .open_writer(session, WriterOptions::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn turn(n: u32) -> NewEvent {
        NewEvent {
            event_type: "turn/start".into(),
            data: format!("{{ \"turnId\" : \"t{n}\" }}"),
            ts: Some(5),
        }
    }

    #[test]
    fn appended_events_are_read_back_compacted_and_in_order() {
        let (_dir, store) = store();
        let session = created(&store, "s1");
        let mut writer = open_writer(&store, &session);
        let seq = writer
            .append(turn(1), Some(1))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seq.get(), 1);
        drop(writer);
        let snapshot = store.snapshot(&session).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snapshot.events.len(), 1);
        assert_eq!(snapshot.events[0].data(), r#"{"turnId":"t1"}"#);
        assert!(snapshot.torn_tail.is_none());
    }

    #[test]
    fn logs_are_private_to_their_owner() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, store) = store();
        let session = created(&store, "private");
        let mode = std::fs::metadata(store.log_path(&session))
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_existing_id_is_refused() {
        let (_dir, store) = store();
        created(&store, "dup");
        let header = SessionHeader::root(id("dup"), 2, "/other".into());
        let error = store.create(&header, &[], Durability::Fsync);
        assert!(
            matches!(error, Err(StoreError::AlreadyExists { .. })),
            "{error:?}"
        );
    }

    /// Two creations of one id at the same moment: one wins, the other is
    /// told the session exists, and the session is there (their temporary
    /// files once shared a name, and the refused one removed the other's).
    #[test]
    fn of_two_creations_at_once_one_wins() {
        let (_dir, store) = store();
        let store = Arc::new(store);
        for round in 0..20 {
            let name = format!("race{round}");
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let creators: Vec<_> = (0..2)
                .map(|_| {
                    let (store, barrier, name) = (store.clone(), barrier.clone(), name.clone());
                    std::thread::spawn(move || {
                        let header = SessionHeader::root(id(&name), 1, "/w".into());
                        barrier.wait();
                        store.create(&header, &[], Durability::Fsync)
                    })
                })
                .collect();
            let results: Vec<_> = creators
                .into_iter()
                .map(|creator| {
                    creator
                        .join()
                        .unwrap_or_else(|_| panic!("creator panicked"))
                })
                .collect();
            let won = results.iter().filter(|result| result.is_ok()).count();
            assert_eq!(won, 1, "round {round}: {results:?}");
            assert!(
                results
                    .iter()
                    .any(|result| matches!(result, Err(StoreError::AlreadyExists { .. }))),
                "round {round}: {results:?}"
            );
            store
                .snapshot(&id(&name))
                .unwrap_or_else(|error| panic!("round {round}: {error}"));
        }
    }

    /// A temporary name another process took (the same pid and
    /// millisecond, as processes in containers sharing the folder can
    /// have) is that process's file: a creation takes the next token and
    /// leaves the file in place; when every try is taken, it fails naming
    /// the file and still removes none (it once removed the other's).
    #[test]
    fn a_temporary_name_another_process_took_is_left_alone() {
        let (dir, store) = store();
        // Tokens far ahead of the clock: the next ones are known, however
        // long the test takes and however loaded the machine is.
        leftovers::give_tokens_after(crate::writer::now_ms() + 1_000_000_000);
        let theirs = |name: &str, count: u64| -> Vec<PathBuf> {
            // The next token of this process is past this one.
            let token = leftovers::new_token();
            let (pid, ms) = token
                .split_once('-')
                .unwrap_or_else(|| panic!("token {token}"));
            let ms: u64 = ms.parse().unwrap_or_else(|e| panic!("{token}: {e}"));
            (1..=count)
                .map(|next| {
                    let path = dir
                        .path()
                        .join(format!(".{name}.jsonl.tmp-{pid}-{}", ms + next));
                    std::fs::write(&path, "theirs").unwrap_or_else(|e| panic!("{e}"));
                    path
                })
                .collect()
        };
        let untouched = |paths: &[PathBuf]| {
            for path in paths {
                let kept = std::fs::read_to_string(path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(kept, "theirs", "{}", path.display());
            }
        };
        let taken = theirs("one", 3);
        let header = SessionHeader::root(id("one"), 1, "/w".into());
        store
            .create(&header, &[], Durability::Fsync)
            .unwrap_or_else(|e| panic!("{e}"));
        untouched(&taken);
        assert_eq!(
            store
                .snapshot(&id("one"))
                .unwrap_or_else(|e| panic!("{e}"))
                .header,
            header
        );
        let taken = theirs("two", 2_000);
        let header = SessionHeader::root(id("two"), 1, "/w".into());
        let error = store.create(&header, &[], Durability::Fsync);
        match &error {
            Err(StoreError::Io {
                operation,
                path,
                source,
            }) => {
                assert_eq!(*operation, "create");
                assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists);
                assert!(taken.contains(path), "{}", path.display());
            }
            other => panic!("{other:?}"),
        }
        untouched(&taken);
        assert!(!store.log_path(&id("two")).exists());
    }

    #[test]
    fn a_second_writer_is_locked_out() {
        let (_dir, store) = store();
        let session = created(&store, "locked");
        let _first = open_writer(&store, &session);
        let second = store.open_writer(&session, WriterOptions::default());
        assert!(
            matches!(second, Err(StoreError::Locked { .. })),
            "{second:?}"
        );
    }

    #[test]
    fn an_expected_seq_mismatch_is_a_conflict_and_writes_nothing() {
        let (_dir, store) = store();
        let session = created(&store, "conflict");
        let mut writer = open_writer(&store, &session);
        let error = writer.append(turn(1), Some(3));
        assert!(matches!(
            error,
            Err(StoreError::Conflict {
                expected: 3,
                actual: 1,
                ..
            })
        ));
        drop(writer);
        assert!(store
            .snapshot(&session)
            .map(|s| s.events.is_empty())
            .unwrap_or(false));
    }

    #[test]
    fn a_rule_violation_is_refused_and_writes_nothing() {
        let (_dir, store) = store();
        let session = created(&store, "rules");
        let mut writer = open_writer(&store, &session);
        let asked = NewEvent::new(
            "approval/asked",
            r#"{"requestId":"r1","turnId":"t1","tool":"bash"}"#,
        );
        let error = writer.append(asked, None);
        assert!(matches!(error, Err(StoreError::Rule { .. })), "{error:?}");
        assert_eq!(writer.next_seq(), 1);
    }

    #[test]
    fn a_torn_tail_is_truncated_on_reopen() {
        let (_dir, store) = store();
        let session = created(&store, "torn");
        let mut writer = open_writer(&store, &session);
        writer
            .append(turn(1), None)
            .unwrap_or_else(|e| panic!("{e}"));
        drop(writer);
        let path = store.log_path(&session);
        let good = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut torn = good.clone();
        torn.extend_from_slice(b"{\"seq\":2,\"ts\":1,\"type\":\"turn/e");
        std::fs::write(&path, &torn).unwrap_or_else(|e| panic!("{e}"));
        let mut writer = open_writer(&store, &session);
        assert_eq!(std::fs::read(&path).unwrap_or_default(), good);
        let seq = writer
            .append(NewEvent::new("turn/end", r#"{"turnId":"t1"}"#), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seq.get(), 2);
    }

    #[test]
    fn a_corrupt_log_is_refused_for_writing() {
        let (_dir, store) = store();
        let session = created(&store, "corrupt");
        let mut writer = open_writer(&store, &session);
        writer
            .append(turn(1), None)
            .unwrap_or_else(|e| panic!("{e}"));
        writer
            .append(NewEvent::new("turn/end", r#"{"turnId":"t1"}"#), None)
            .unwrap_or_else(|e| panic!("{e}"));
        drop(writer);
        let path = store.log_path(&session);
        let mut bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        let second_line = bytes.iter().position(|b| *b == b'\n').unwrap_or(0) + 10;
        bytes[second_line] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let error = store.open_writer(&session, WriterOptions::default());
        assert!(
            matches!(error, Err(StoreError::Corrupt { .. })),
            "{error:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap_or_default(), bytes);
    }

    /// A reader that read a torn tail, then meets a writer's new records
    /// where the tail was (the writer cut it when it opened the log, and
    /// appended), reads the log again from the end of its good prefix
    /// instead of reporting the joined bytes as corruption; damage that is
    /// in the log is still reported.
    #[test]
    fn a_reader_meeting_a_cut_tail_and_new_records_reads_them_again() {
        use crate::reader::SessionStream;
        let (_dir, store) = store();
        let session = created(&store, "race");
        let mut writer = open_writer(&store, &session);
        for n in 0..3 {
            ok(writer.append(turn(n), None));
            ok(writer.append(
                NewEvent::new("turn/end", format!(r#"{{"turnId":"t{n}"}}"#)),
                None,
            ));
        }
        drop(writer);
        // A torn tail far longer than a read's buffer: a batch of 100
        // announced, 50 of its records written.
        let path = store.log_path(&session);
        let pad = "x".repeat(4000);
        let mut torn = String::new();
        for n in 0..50u64 {
            let batch = (n == 0).then_some(100);
            let data = format!(r#"{{"n":{n},"pad":"{pad}"}}"#);
            torn.push_str(
                &EventRecord::new(7 + n, 1, batch, "x-test/note", &data).encode(&session),
            );
        }
        let mut file = ok(std::fs::OpenOptions::new().append(true).open(&path));
        ok(std::io::Write::write_all(&mut file, torn.as_bytes()));
        drop(file);
        let mut stream: Box<dyn SessionStream> = Box::new(ok(store.reader(&session)));
        for seq in 1..=6 {
            assert_eq!(
                ok(stream.next_event()).map(|record| record.seq()),
                Some(seq)
            );
        }
        // Meanwhile a writer opens the log (cutting the torn tail) and
        // appends records that reach past where the tail ended.
        let mut writer = open_writer(&store, &session);
        for n in 0..100 {
            let data = format!(r#"{{"n":{n},"pad":"{pad}"}}"#);
            ok(writer.append(NewEvent::new("x-test/note", data), None));
        }
        drop(writer);
        let mut seqs = Vec::new();
        while let Some(record) = ok(stream.next_event()) {
            seqs.push(record.seq());
        }
        assert_eq!(
            seqs,
            (7..=106).collect::<Vec<_>>(),
            "the writer's records, read again"
        );
        let finished = stream.finish();
        assert!(matches!(finished, Ok(None)), "{finished:?}");
        // Damage in the log, followed by an intact record, is corruption
        // whatever the reading again.
        let mut bytes = ok(std::fs::read(&path));
        let third_line = bytes
            .iter()
            .enumerate()
            .filter(|(_, byte)| **byte == b'\n')
            .nth(2)
            .map_or(0, |(at, _)| at + 5);
        bytes[third_line] ^= 0x01;
        ok(std::fs::write(&path, &bytes));
        let mut stream: Box<dyn SessionStream> = Box::new(ok(store.reader(&session)));
        let read = (|| {
            while stream.next_event()?.is_some() {}
            Ok::<(), StoreError>(())
        })();
        assert!(matches!(read, Err(StoreError::Corrupt { .. })), "{read:?}");
    }

    #[derive(Default)]
    struct FailNextFsync(AtomicBool);

    impl FaultInjector for FailNextFsync {
        fn before(&self, point: FaultPoint, _path: &Path) -> std::io::Result<()> {
            if point == FaultPoint::Fsync && self.0.swap(false, Ordering::SeqCst) {
                return Err(std::io::Error::other("injected fsync failure"));
            }
            Ok(())
        }
    }

    /// The batches of a group whose one sync fails were all written: each
    /// is in doubt as the first is (an I/O error saying so), not refused
    /// as never written (`Poisoned`); a reopened writer finds them whole.
    #[test]
    fn every_batch_of_a_group_whose_sync_failed_is_in_doubt() {
        let (_dir, store) = store();
        let faults = Arc::new(FailNextFsync::default());
        let store = store.with_io(Io::with_faults(faults.clone()));
        let session = created(&store, "doubt");
        let mut writer = open_writer(&store, &session);
        faults.0.store(true, Ordering::SeqCst);
        let end = |n: u32| NewEvent::new("turn/end", format!(r#"{{"turnId":"t{n}"}}"#));
        let outcomes = writer.append_group(vec![
            (vec![turn(1)], None),
            (vec![end(1)], None),
            (vec![turn(2), end(2)], None),
        ]);
        assert_eq!(outcomes.len(), 3);
        for (index, outcome) in outcomes.iter().enumerate() {
            match outcome {
                Err(StoreError::Io { source, .. }) if index == 0 => {
                    assert!(source.to_string().contains("injected"), "{source}");
                }
                Err(StoreError::Io { source, .. }) => {
                    let text = source.to_string();
                    assert!(text.contains("may be in the log whole"), "{text}");
                    assert!(text.contains("injected fsync failure"), "{text}");
                }
                other => panic!("batch {index}: {other:?}"),
            }
        }
        let later = writer.append(turn(3), None);
        assert!(
            matches!(later, Err(StoreError::Poisoned { .. })),
            "{later:?}"
        );
        drop(writer);
        let reopened = open_writer(&store, &session);
        assert_eq!(reopened.next_seq(), 5, "the four events written are whole");
    }

    /// A poisoned writer's state may be past its log (the event of the
    /// failed write folded in): it builds no review request, which would
    /// show the reviewer an event the log does not hold.
    #[test]
    fn a_poisoned_writer_builds_no_review_request() {
        let (_dir, store) = store();
        let faults = Arc::new(FailNextFsync::default());
        let store = store.with_io(Io::with_faults(faults.clone()));
        let session = created(&store, "poisoned");
        let mut writer = open_writer(&store, &session);
        faults.0.store(true, Ordering::SeqCst);
        assert!(writer.append(turn(1), None).is_err());
        let pending = sessionlog_projections::parse_pending_action(
            br#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let refused = writer.review_request(&pending, 1 << 20);
        match refused {
            Err(error) => {
                assert_eq!(
                    error.code,
                    sessionlog_projections::ReviewErrorCode::InvalidLog
                );
                assert!(
                    error.message.contains("failed a write"),
                    "{}",
                    error.message
                );
            }
            Ok(request) => panic!("a poisoned writer built {request}"),
        }
    }

    #[test]
    fn a_failed_fsync_poisons_the_writer_until_reopen() {
        let (_dir, store) = store();
        let faults = Arc::new(FailNextFsync::default());
        let store = store.with_io(Io::with_faults(faults.clone()));
        let session = created(&store, "poison");
        let mut writer = open_writer(&store, &session);
        faults.0.store(true, Ordering::SeqCst);
        assert!(matches!(
            writer.append(turn(1), None),
            Err(StoreError::Io { .. })
        ));
        let again = writer.append(turn(2), None);
        assert!(
            matches!(again, Err(StoreError::Poisoned { .. })),
            "{again:?}"
        );
        drop(writer);
        let mut reopened = open_writer(&store, &session);
        assert_eq!(
            reopened.next_seq(),
            2,
            "the written but unacknowledged event stays"
        );
        reopened
            .append(NewEvent::new("turn/end", r#"{"turnId":"t1"}"#), None)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_batch_is_refused_whole_when_one_event_breaks_a_rule() {
        let (_dir, store) = store();
        let session = created(&store, "batch");
        let mut writer = open_writer(&store, &session);
        let bad = NewEvent::new("turn/end", r#"{"turnId":"nope"}"#);
        let error = writer.append_batch(vec![turn(1), bad], None);
        assert!(matches!(error, Err(StoreError::Rule { .. })));
        let seqs = writer
            .append_batch(
                vec![turn(1), NewEvent::new("turn/end", r#"{"turnId":"t1"}"#)],
                None,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seqs.iter().map(|s| s.get()).collect::<Vec<_>>(), [1, 2]);
        drop(writer);
        let snapshot = store.snapshot(&session).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snapshot.events[0].batch(), Some(2));
        assert_eq!(snapshot.events[1].batch(), None);
    }

    /// Records each folder fsync, and fails them while `failing` is set.
    #[derive(Default)]
    struct FolderSyncs {
        synced: Mutex<Vec<PathBuf>>,
        failing: std::sync::atomic::AtomicBool,
    }

    impl FaultInjector for FolderSyncs {
        fn before(&self, point: FaultPoint, path: &Path) -> std::io::Result<()> {
            if point == FaultPoint::FolderFsync {
                if self.failing.load(Ordering::SeqCst) {
                    return Err(std::io::Error::other("injected"));
                }
                self.synced
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(path.to_owned());
            }
            Ok(())
        }
    }

    /// A writer syncs its log's folder before it acknowledges anything: a
    /// command killed between publishing the log and syncing its folder
    /// left a name a power loss could drop, with every append since. A
    /// folder that cannot be synced opens no writer.
    #[test]
    fn a_writer_makes_its_logs_name_durable_before_it_acknowledges() {
        let (dir, store) = store();
        let syncs = Arc::new(FolderSyncs::default());
        let store = store.with_io(Io::with_faults(syncs.clone()));
        let session = created(&store, "named");
        syncs
            .synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        drop(open_writer(&store, &session));
        let synced = syncs
            .synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        assert_eq!(synced, [dir.path().to_owned()]);
        syncs.failing.store(true, Ordering::SeqCst);
        let refused = store.open_writer(&session, WriterOptions::default());
        assert!(
            matches!(
                refused,
                Err(StoreError::Io {
                    operation: "fsync",
                    ..
                })
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn a_writer_acknowledges_nothing_once_its_logs_name_is_another_files() {
        let note = || NewEvent {
            event_type: "x-test/note".into(),
            data: "{}".into(),
            ts: Some(5),
        };
        for removed in [false, true] {
            let (_dir, store) = store();
            let session = created(&store, "moved");
            let path = store.log_path(&session);
            let mut writer = open_writer(&store, &session);
            ok(writer.append(note(), None));
            // What an editor or a restore does: a copy moved over the name.
            let copy = path.with_extension("copy");
            ok(std::fs::copy(&path, &copy));
            match removed {
                true => ok(std::fs::remove_file(&path)),
                false => ok(std::fs::rename(&copy, &path)),
            }
            let refused = writer.append(note(), None);
            let message = match refused {
                Err(error) => error.to_string(),
                Ok(seq) => panic!("seq {} acknowledged in a file no longer named", seq.get()),
            };
            let what = if removed {
                "was removed"
            } else {
                "was replaced"
            };
            assert!(message.contains(what), "{message}");
            assert!(writer.append(note(), None).is_err(), "the writer goes on");
            if !removed {
                // The log at the name holds the acknowledged event only.
                let events = ok(store.snapshot(&session)).events;
                assert_eq!(events.len(), 1);
            }
        }
    }

    #[test]
    fn a_session_found_has_its_name_made_durable() {
        let (dir, store) = store();
        let syncs = Arc::new(FolderSyncs::default());
        let store = store.with_io(Io::with_faults(syncs.clone()));
        let session = created(&store, "found");
        let synced = || {
            syncs
                .synced
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        };
        syncs
            .synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let store = crate::Store::Jsonl(store);
        ok(store.make_name_durable(&session));
        assert_eq!(synced(), [dir.path().to_owned()]);
        syncs.failing.store(true, Ordering::SeqCst);
        assert!(store.make_name_durable(&session).is_err());
    }

    /// Counts fdatasyncs.
    #[derive(Default)]
    struct CountSyncs(std::sync::atomic::AtomicUsize);

    impl FaultInjector for CountSyncs {
        fn before(&self, point: FaultPoint, _path: &Path) -> std::io::Result<()> {
            if point == FaultPoint::Fsync {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }
    }

    #[test]
    fn a_group_shares_one_sync_and_a_refused_batch_leaves_the_others() {
        let (_dir, store) = store();
        let syncs = Arc::new(CountSyncs::default());
        let store = store.with_io(Io::with_faults(syncs.clone()));
        let session = created(&store, "group");
        let mut writer = open_writer(&store, &session);
        let before = syncs.0.load(Ordering::SeqCst);
        let end = |n: u32| NewEvent::new("turn/end", format!(r#"{{"turnId":"t{n}"}}"#));
        let outcomes = writer.append_group(vec![
            (vec![turn(1)], Some(1)),
            (vec![turn(2)], None),            // a second open turn: a rule
            (vec![end(1), turn(3)], Some(2)), // a batch
            (vec![end(3)], Some(2)),          // a conflict
            (vec![end(3)], None),
        ]);
        let seqs: Vec<_> = outcomes
            .iter()
            .map(|outcome| match outcome {
                Ok(seqs) => Ok(seqs.iter().map(|seq| seq.get()).collect::<Vec<_>>()),
                Err(error) => Err(error.class()),
            })
            .collect();
        assert_eq!(
            seqs,
            [
                Ok(vec![1]),
                Err(crate::ErrorClass::Rule),
                Ok(vec![2, 3]),
                Err(crate::ErrorClass::Contention),
                Ok(vec![4]),
            ]
        );
        assert_eq!(
            syncs.0.load(Ordering::SeqCst) - before,
            1,
            "one sync for the group"
        );
        drop(writer);
        let snapshot = store.snapshot(&session).unwrap_or_else(|e| panic!("{e}"));
        let types: Vec<_> = snapshot.events.iter().map(|e| e.event_type()).collect();
        assert_eq!(types, ["turn/start", "turn/end", "turn/start", "turn/end"]);
        assert_eq!(snapshot.events[1].batch(), Some(2));
    }

    #[test]
    fn moving_auto_to_full_access_writes_never_and_leaves_the_sandbox() {
        use sessionlog_projections::{Defaults, PresetView};
        use sessionlog_schema::{ApprovalPolicy, Preset};
        let (_dir, store) = store();
        let session = created(&store, "preset");
        let mut writer = open_writer(&store, &session);
        let defaults = Defaults::default();
        let auto = writer
            .switch_preset(Preset::Auto, Some(ApprovalPolicy::Ask), &defaults, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(auto.len(), 2, "sandbox/mode + permission/preset");
        assert_eq!(
            writer.state().preset(&defaults),
            PresetView::Named(Preset::Auto)
        );
        let full = writer
            .switch_preset(Preset::FullAccess, None, &defaults, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(full.len(), 2, "approval/policy never + permission/preset");
        drop(writer);
        let snapshot = store.snapshot(&session).unwrap_or_else(|e| panic!("{e}"));
        let types: Vec<&str> = snapshot.events.iter().map(|e| e.event_type()).collect();
        assert_eq!(
            types,
            [
                "sandbox/mode",
                "permission/preset",
                "approval/policy",
                "permission/preset"
            ]
        );
        assert_eq!(snapshot.events[2].data(), r#"{"policy":"never"}"#);
        assert_eq!(snapshot.events[0].batch(), Some(2));
        assert_eq!(snapshot.events[2].batch(), Some(2));
        let refused = store
            .open_writer(&session, WriterOptions::default())
            .and_then(|mut w| w.switch_preset(Preset::Auto, None, &defaults, None));
        assert!(
            matches!(refused, Err(StoreError::InvalidEvent(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn an_open_writer_builds_the_same_review_request_as_a_cold_read() {
        use sessionlog_projections::{build_review_request, parse_pending_action};
        let (_dir, store) = store();
        let session = created(&store, "review");
        let mut writer = open_writer(&store, &session);
        let events = [
            ("turn/start", r#"{"turnId":"t1"}"#),
            (
                "request/header",
                r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"danger-full-access","tools":[{"name":"bash","description":"run","parameters":{}}]}"#,
            ),
            ("step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            (
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"go"}]}"#,
            ),
        ];
        for (event_type, data) in events {
            writer
                .append(NewEvent::new(event_type, data), None)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let pending = parse_pending_action(
            br#"{"callId":"c1","stepId":"s1","name":"bash","arguments":{"cmd":"ls"}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let open = writer
            .review_request(&pending, 1 << 20)
            .unwrap_or_else(|e| panic!("{e}"));
        let snapshot = store.snapshot(&session).unwrap_or_else(|e| panic!("{e}"));
        let cold = build_review_request(&snapshot.header, &snapshot.events, &pending, 1 << 20)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open, cold);
        assert!(
            open.contains(r#""PENDING_ACTION":{"callId":"c1""#),
            "{open}"
        );
    }

    /// A session of one open turn and step holding `calls` calls
    /// (`c0000`, `c0001`, ...), settled when `settled`, whose writer
    /// closed leaving a snapshot.
    fn session_of_calls(store: &JsonlStore, name: &str, calls: u32, settled: bool) -> SessionId {
        let session = created(store, name);
        let mut writer = open_writer(store, &session);
        for chunk in crate::store::tests::events_of_calls(calls, settled).chunks(500) {
            ok(writer.append_batch(chunk.to_vec(), None));
        }
        drop(writer);
        session
    }

    /// A writer that keeps no events, so resumes from the snapshot.
    fn resuming_writer(store: &JsonlStore, session: &SessionId) -> SessionWriter {
        let options = WriterOptions {
            keep_snapshot: false,
            ..WriterOptions::default()
        };
        ok(store.open_writer(session, options))
    }

    /// Every byte of the state of the snapshot at `path` flipped, in place
    /// (the file a writer holds open).
    fn damage_snapshot_state(path: &Path, header: &SessionHeader, header_body: &str) {
        let mut bytes = ok(std::fs::read(path));
        let head = match state_snapshot::decode_head(&bytes, header, header_body) {
            Ok(Ok(head)) => head,
            other => panic!("the snapshot's head: {other:?}"),
        };
        for byte in &mut bytes[head.len..] {
            *byte ^= 0x5a;
        }
        let file = ok(std::fs::OpenOptions::new().write(true).open(path));
        ok(std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0));
    }

    #[test]
    fn a_snapshot_others_may_write_is_not_resumed_from() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, store) = store();
        let session = session_of_calls(&store, "shared", 3000, true);
        let snapshot = state_snapshot_path(&store.log_path(&session));
        assert!(resuming_writer(&store, &session)
            .state()
            .reads_snapshot_pages());
        for mode in [0o620, 0o602] {
            ok(std::fs::set_permissions(
                &snapshot,
                std::fs::Permissions::from_mode(mode),
            ));
            let writer = resuming_writer(&store, &session);
            assert!(!writer.state().reads_snapshot_pages(), "mode {mode:o}");
            drop(writer);
        }
        ok(std::fs::set_permissions(
            &snapshot,
            std::fs::Permissions::from_mode(0o600),
        ));
        assert!(resuming_writer(&store, &session)
            .state()
            .reads_snapshot_pages());
    }

    #[test]
    fn a_writer_reads_its_snapshot_page_by_page_and_folds_again_when_a_page_fails() {
        let (_dir, store) = store();
        let session = session_of_calls(&store, "paged", 3000, true);
        let log = store.log_path(&session);
        let snapshot = state_snapshot_path(&log);
        let decoded = ok(read_header_as_is(&log, None));
        let (header, header_body) = (decoded.header, decoded.body);
        let size = ok(std::fs::metadata(&snapshot)).len();
        let head =
            match state_snapshot::decode_head(&ok(std::fs::read(&snapshot)), &header, &header_body)
            {
                Ok(Ok(head)) => head,
                other => panic!("the snapshot's head: {other:?}"),
            };
        assert!(head.pages.len() >= 4, "pages: {}", head.pages.len());
        assert_eq!(head.snapshot_len() as u64, size);

        // Resumed page by page: a duplicate call id is refused and a
        // settled call found, from the pages their lookups land on.
        let mut writer = resuming_writer(&store, &session);
        assert!(writer.state().reads_snapshot_pages());
        let duplicate = NewEvent::new(
            "tool/start",
            r#"{"callId":"c1234","stepId":"s","name":"bash","arguments":{}}"#,
        );
        assert!(matches!(
            writer.append(duplicate.clone(), None),
            Err(StoreError::Rule { .. })
        ));
        assert!(!writer.state().snapshot_unreadable());
        drop(writer);

        // The pages changed under an open writer: the lookups that land
        // on them fail, the writer folds the log again, and its verdicts
        // are the log's.
        let mut writer = resuming_writer(&store, &session);
        assert!(writer.state().reads_snapshot_pages());
        damage_snapshot_state(&snapshot, &header, &header_body);
        assert!(matches!(
            writer.append(duplicate.clone(), None),
            Err(StoreError::Rule { .. })
        ));
        assert!(
            !writer.state().reads_snapshot_pages(),
            "folded again, whole"
        );
        let settle_again = NewEvent::new("tool/settle", r#"{"callId":"c0042","status":"ok"}"#);
        assert!(matches!(
            writer.append(settle_again, None),
            Err(StoreError::Rule { .. })
        ));
        let fresh = NewEvent::new(
            "tool/start",
            r#"{"callId":"c9999","stepId":"s","name":"bash","arguments":{}}"#,
        );
        assert_eq!(ok(writer.append(fresh, None)).get(), 6003);
        assert_eq!(
            writer.state().call("c2999").map(|call| call.settled),
            Some(true)
        );
        drop(writer);
        // The damaged snapshot was replaced when the writer that folded
        // again closed, as a writer that folded the whole log does.
        let replaced = state_snapshot::decode(ok(std::fs::read(&snapshot)), &header, &header_body);
        assert_eq!(replaced.map(|(_, anchor)| anchor.seq).ok(), Some(6003));

        // The damaged snapshot is passed over at the next open (every page
        // of a snapshot is checked before the log's tail is folded on it,
        // or the fold is done again), and the log is whole.
        let mut writer = resuming_writer(&store, &session);
        assert!(matches!(
            writer.append(duplicate, None),
            Err(StoreError::Rule { .. })
        ));
        assert_eq!(writer.next_seq(), 6004);
        drop(writer);
        let read = ok(store.snapshot(&session));
        assert_eq!(read.events.len(), 6003);
    }

    /// A sidecar changed in place under an open writer whose lookups never
    /// met the changed pages: the snapshot the writer takes at its close
    /// is not encoded from what those pages read as (no rows) under CRCs
    /// of its own; the log is folded again first.
    #[test]
    fn a_page_that_fails_as_the_next_snapshot_is_encoded_is_not_kept_in_it() {
        let (_dir, store) = store();
        let session = session_of_calls(&store, "kept", 3000, true);
        let log = store.log_path(&session);
        let snapshot = state_snapshot_path(&log);
        let decoded = ok(read_header_as_is(&log, None));
        let (header, header_body) = (decoded.header, decoded.body);
        let mut writer = resuming_writer(&store, &session);
        assert!(writer.state().reads_snapshot_pages());
        damage_snapshot_state(&snapshot, &header, &header_body);
        for chunk in 0..11 {
            let events = (0..100)
                .map(|n| crate::store::tests::note(&format!("{chunk}.{n}")))
                .collect();
            ok(writer.append_batch(events, None));
        }
        assert!(
            !writer.state().snapshot_unreadable(),
            "no lookup met a page"
        );
        drop(writer);
        let kept = state_snapshot::decode(ok(std::fs::read(&snapshot)), &header, &header_body);
        assert_eq!(kept.map(|(_, anchor)| anchor.seq).ok(), Some(7102));
        // c0100 was started and settled: a second start is refused, and
        // nothing the writer wrote breaks a rule.
        let mut writer = resuming_writer(&store, &session);
        assert!(matches!(
            writer.append(crate::store::tests::tool_start(100), None),
            Err(StoreError::Rule { .. })
        ));
        drop(writer);
        let (_, violations) = ok(store.snapshot(&session)).fold();
        assert_eq!(violations, []);
    }

    /// The pages of the snapshot at `path` that a paged decode does not
    /// read (a lookup reads them later): each page damaged alone, the
    /// ones whose damage the decode does not see.
    fn lazy_pages(path: &Path, header: &SessionHeader, header_body: &str) -> Vec<(usize, usize)> {
        let bytes = ok(std::fs::read(path));
        let head = match state_snapshot::decode_head(&bytes, header, header_body) {
            Ok(Ok(head)) => head,
            other => panic!("the snapshot's head: {other:?}"),
        };
        let dir = ok(tempfile::tempdir());
        let mut lazy = Vec::new();
        let mut start = head.len;
        for page in &head.pages {
            let end = start + page.len as usize;
            let mut damaged = bytes.clone();
            for byte in &mut damaged[start..end] {
                *byte ^= 0x5a;
            }
            let copy = dir.path().join("copy");
            ok(std::fs::write(&copy, &damaged));
            ok(std::fs::set_permissions(
                &copy,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            ));
            let owner = std::os::unix::fs::MetadataExt::uid(&ok(std::fs::metadata(&copy)));
            let opened =
                ok(open_snapshot_file(&copy, u64::MAX, owner)).unwrap_or_else(|| panic!("none"));
            if decode_snapshot_file(opened, &copy, header, header_body, true).is_ok() {
                lazy.push((start, end));
            }
            start = end;
        }
        lazy
    }

    /// Every page of the snapshot at `path` that a paged decode does not
    /// read flipped in place; how many.
    fn damage_lazy_pages(path: &Path, header: &SessionHeader, header_body: &str) -> usize {
        let lazy = lazy_pages(path, header, header_body);
        let mut bytes = ok(std::fs::read(path));
        for &(start, end) in &lazy {
            for byte in &mut bytes[start..end] {
                *byte ^= 0x5a;
            }
        }
        let file = ok(std::fs::OpenOptions::new().write(true).open(path));
        ok(std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0));
        lazy.len()
    }

    /// The writer of `session` opened (folding again) after `tail` was
    /// appended past its snapshot's anchor and every page of the snapshot
    /// the decode does not read was damaged: the tail's fold at the open
    /// lands on them. Its session's log is whole, so the open must not
    /// fail.
    fn opened_past_damaged_pages(
        store: &JsonlStore,
        session: &SessionId,
        tail: NewEvent,
    ) -> SessionWriter {
        let log = store.log_path(session);
        let decoded = ok(read_header_as_is(&log, None));
        let mut writer = resuming_writer(store, session);
        ok(writer.append(tail, None));
        drop(writer);
        let snapshot = state_snapshot_path(&log);
        assert!(damage_lazy_pages(&snapshot, &decoded.header, &decoded.body) >= 2);
        // `verify`'s own read: the log is whole and breaks no rule.
        ok(store.snapshot(session));
        let options = WriterOptions {
            keep_snapshot: false,
            ..WriterOptions::default()
        };
        store
            .open_writer(session, options)
            .unwrap_or_else(|error| panic!("a whole log refused at open: {error:?}"))
    }

    #[test]
    fn a_long_fold_on_two_threads_refuses_and_anchors_as_one_thread_does() {
        let (_dir, store) = store();
        // 10,002 events: most of them folded on a thread of their own.
        let session = session_of_calls(&store, "long", 5000, true);
        let log = store.log_path(&session);
        let snapshot = state_snapshot_path(&log);
        ok(std::fs::remove_file(&snapshot));
        let writer = resuming_writer(&store, &session);
        assert_eq!(writer.next_seq(), 10_003);
        assert!(!writer.state().reads_snapshot_pages(), "folded whole");
        drop(writer);
        // The snapshot it kept is anchored on the last record.
        let writer = resuming_writer(&store, &session);
        assert!(writer.state().reads_snapshot_pages(), "resumed");
        drop(writer);
        // A second start of a call settled thousands of events before,
        // its CRC right, then damage after it, which outranks it.
        let duplicate = crate::store::tests::record(
            10_003,
            "tool/start",
            r#"{"callId":"c0100","stepId":"s","name":"bash","arguments":{}}"#,
        );
        let mut line = Vec::new();
        sessionlog_schema::encode_line_into(&session, duplicate.body(), &mut line);
        let mut file = ok(std::fs::OpenOptions::new().append(true).open(&log));
        ok(std::io::Write::write_all(&mut file, &line));
        ok(std::fs::remove_file(&snapshot));
        match store.open_writer(&session, WriterOptions::default()) {
            Err(StoreError::Rule { violation, .. }) => assert_eq!(violation.seq, 10_003),
            other => panic!("a broken rule: {other:?}"),
        }
        ok(std::io::Write::write_all(
            &mut file,
            b"{\"seq\":10004,\"damaged\n",
        ));
        let more = crate::store::tests::record(10_005, "x-test/note", r#"{"text":"after"}"#);
        line.clear();
        sessionlog_schema::encode_line_into(&session, more.body(), &mut line);
        ok(std::io::Write::write_all(&mut file, &line));
        match store.open_writer(&session, WriterOptions::default()) {
            Err(error) => assert_eq!(error.class(), crate::ErrorClass::Corrupt, "{error}"),
            Ok(_) => panic!("a corrupt log opened"),
        }
    }

    #[test]
    fn the_state_a_fork_predicts_from_reads_only_the_pages_its_fold_needs() {
        let (_dir, store) = store();
        let session = session_of_calls(&store, "unsettled", 3000, false);
        let log = store.log_path(&session);
        let decoded = ok(read_header_as_is(&log, None));
        // (the tail past the snapshot's anchor, whether its fold lands on
        // a page that the decode does not read)
        let cases = [
            (NewEvent::new("x-test/note", r#"{"text":"past"}"#), false),
            (crate::store::tests::tool_settle(1500), true),
        ];
        let snapshot = state_snapshot_path(&log);
        let whole = ok(std::fs::read(&snapshot));
        for (tail, lands) in cases {
            let mut writer = resuming_writer(&store, &session);
            ok(writer.append(tail, None));
            drop(writer);
            // The snapshot the session's writer took, its anchor before
            // the tail.
            ok(std::fs::write(&snapshot, &whole));
            assert!(ok(snapshot_log_state(&log, None)).is_some());
            assert!(damage_lazy_pages(&snapshot, &decoded.header, &decoded.body) >= 2);
            let state = ok(snapshot_log_state(&log, None));
            // A failed page leaves the fork to predict from the log.
            assert_eq!(state.is_none(), lands);
            if let Some(state) = state {
                assert!(state.reads_snapshot_pages(), "read page by page");
                assert_eq!(state.seq(), ok(current_log_state(&log, None)).seq());
            }
        }
        // The fork, whatever its prediction, copies the whole log.
        let child = id("child");
        let header = ok(crate::fork::fork_log_file(
            &log,
            &child,
            None,
            &sessionlog_projections::Defaults::default(),
        ));
        assert_eq!(header.seed_length, 3004);
    }

    #[test]
    fn an_open_whose_tail_fold_meets_a_failed_page_folds_again_and_opens() {
        let (_dir, store) = store();
        let session = session_of_calls(&store, "again", 3000, true);
        // A new call, whose duplicate check lands on the call rows' pages.
        let writer =
            opened_past_damaged_pages(&store, &session, crate::store::tests::tool_start(5000));
        assert_eq!(writer.next_seq(), 6004);
    }

    #[test]
    fn a_tail_event_the_failed_page_makes_look_rule_breaking_does_not_refuse_the_log() {
        let (_dir, store) = store();
        let session = session_of_calls(&store, "unsettled", 3000, false);
        // The settle of a call the snapshot holds, on a damaged page.
        let writer =
            opened_past_damaged_pages(&store, &session, crate::store::tests::tool_settle(1500));
        assert_eq!(writer.next_seq(), 3004);
        assert_eq!(
            writer.state().call("c1500").map(|call| call.settled),
            Some(true)
        );
    }

    #[test]
    fn pages_failing_under_an_open_writer_never_let_a_wrong_verdict_reach_the_log() {
        for durability in [Durability::Fsync, Durability::Buffered] {
            let (_dir, store) = store();
            let session = session_of_calls(&store, "held", 3000, true);
            let log = store.log_path(&session);
            let snapshot = state_snapshot_path(&log);
            let decoded = ok(read_header_as_is(&log, None));
            let options = WriterOptions {
                keep_snapshot: false,
                durability,
                seal_turns: crate::SealTurns::Unsigned,
            };
            let mut writer = ok(store.open_writer(&session, options));
            assert!(writer.state().reads_snapshot_pages());
            damage_snapshot_state(&snapshot, &decoded.header, &decoded.body);
            let start = |id: &str| {
                NewEvent::new(
                    "tool/start",
                    format!(r#"{{"callId":"{id}","stepId":"s","name":"bash","arguments":{{}}}}"#),
                )
            };
            // Staged, not synced: the refold must count it.
            assert_eq!(ok(writer.stage(start("c7000"), None)), 6003);
            // A group: a duplicate of a call on a failed page, a new call,
            // a duplicate of the staged one, a settle of a settled call.
            let outcomes = writer.append_group(vec![
                (vec![start("c0100")], None),
                (vec![start("c7001"), start("c7002")], None),
                (vec![start("c7000")], None),
                (
                    vec![NewEvent::new(
                        "tool/settle",
                        r#"{"callId":"c2000","status":"ok"}"#,
                    )],
                    None,
                ),
            ]);
            assert!(
                matches!(outcomes[0], Err(StoreError::Rule { .. })),
                "{outcomes:?}"
            );
            assert!(outcomes[1].is_ok(), "{outcomes:?}");
            assert!(
                matches!(outcomes[2], Err(StoreError::Rule { .. })),
                "{outcomes:?}"
            );
            assert!(
                matches!(outcomes[3], Err(StoreError::Rule { .. })),
                "{outcomes:?}"
            );
            ok(writer.append(
                NewEvent::new("tool/settle", r#"{"callId":"c7000","status":"ok"}"#),
                None,
            ));
            ok(writer.append(
                NewEvent::new("tool/settle", r#"{"callId":"c7001","status":"ok"}"#),
                None,
            ));
            ok(writer.append(
                NewEvent::new("tool/settle", r#"{"callId":"c7002","status":"ok"}"#),
                None,
            ));
            ok(writer.append(NewEvent::new("step/end", r#"{"stepId":"s"}"#), None));
            ok(writer.append(NewEvent::new("turn/end", r#"{"turnId":"t"}"#), None));
            ok(writer.seal(None, None));
            let next = writer.next_seq();
            drop(writer);
            // The whole log, read and checked from its start (seals too).
            let read = ok(store.snapshot(&session));
            assert_eq!(read.events.len() as u64, next - 1);
            let folded = ok(crate::jsonl::current_log_state(&log, None));
            assert_eq!(folded.seq(), next - 1);
        }
    }

    /// The snapshot at `path` with its state cut into pages at `cuts`
    /// (each page's CRC and the head's made to match).
    fn recut_snapshot(path: &Path, header: &SessionHeader, header_body: &str, cuts: &[usize]) {
        let bytes = ok(std::fs::read(path));
        let head = match state_snapshot::decode_head(&bytes, header, header_body) {
            Ok(Ok(head)) => head,
            other => panic!("the snapshot's head: {other:?}"),
        };
        let state = &bytes[head.len..];
        // The fixed fields before the page count.
        let fixed = head.len - 4 - 8 * head.pages.len() - 4;
        let mut out = bytes[..fixed].to_vec();
        let mut bounds: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < state.len())
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        bounds.push(state.len());
        out.extend_from_slice(&(bounds.len() as u32).to_le_bytes());
        let mut start = 0;
        for &end in &bounds {
            out.extend_from_slice(&((end - start) as u32).to_le_bytes());
            out.extend_from_slice(&crc32fast::hash(&state[start..end]).to_le_bytes());
            start = end;
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(state);
        ok(std::fs::write(path, out));
    }

    #[test]
    fn forged_cuts_never_panic_nor_let_a_duplicate_through() {
        let (_dir, store) = store();
        let session = session_of_calls(&store, "forged", 1500, true);
        let log = store.log_path(&session);
        let snapshot = state_snapshot_path(&log);
        let decoded = ok(read_header_as_is(&log, None));
        let original = ok(std::fs::read(&snapshot));
        let state_len = match state_snapshot::decode_head(&original, &decoded.header, &decoded.body)
        {
            Ok(Ok(head)) => head.state_len,
            other => panic!("{other:?}"),
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..60 {
            ok(std::fs::write(&snapshot, &original));
            let count = 1 + (next() % 40) as usize;
            let cuts: Vec<usize> = (0..count)
                .map(|_| match round % 3 {
                    0 => (next() as usize) % state_len,
                    // Tiny pages at the start.
                    1 => (next() as usize) % 64,
                    _ => state_len - 1 - (next() as usize) % 200,
                })
                .collect();
            recut_snapshot(&snapshot, &decoded.header, &decoded.body, &cuts);
            let mut writer = resuming_writer(&store, &session);
            let duplicate = NewEvent::new(
                "tool/start",
                format!(
                    r#"{{"callId":"c{:04}","stepId":"s","name":"bash","arguments":{{}}}}"#,
                    next() % 1500
                ),
            );
            assert!(
                matches!(writer.append(duplicate, None), Err(StoreError::Rule { .. })),
                "round {round}"
            );
            let settle = NewEvent::new(
                "tool/settle",
                format!(r#"{{"callId":"c{:04}","status":"ok"}}"#, next() % 1500),
            );
            assert!(
                matches!(writer.append(settle, None), Err(StoreError::Rule { .. })),
                "round {round}"
            );
            let _ = writer.state().reviewed_seqs().count();
            drop(writer);
        }
        let read = ok(store.snapshot(&session));
        assert_eq!(read.events.len(), 3002);
    }

    #[test]
    fn list_reads_headers_and_skips_foreign_files() {
        let (dir, store) = store();
        created(&store, "b");
        created(&store, "a");
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join(".a.jsonl.tmp-1-2"), "x").unwrap_or_else(|e| panic!("{e}"));
        let listed = store.list().unwrap_or_else(|e| panic!("{e}"));
        let ids: Vec<&str> = listed.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(listed.iter().all(|e| e.header.is_ok()));
    }

    #[test]
    fn a_symlink_in_place_of_a_log_is_not_followed() {
        let (dir, store) = store();
        let target = dir.path().join("elsewhere.txt");
        std::fs::write(&target, "secret\n").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&target, dir.path().join("link.jsonl"))
            .unwrap_or_else(|e| panic!("{e}"));
        let error = store.snapshot(&id("link"));
        assert!(matches!(error, Err(StoreError::Io { .. })), "{error:?}");
        let error = store.open_writer(&id("link"), WriterOptions::default());
        assert!(matches!(error, Err(StoreError::Io { .. })), "{error:?}");
    }

    fn arbitrary_event() -> impl proptest::strategy::Strategy<Value = NewEvent> {
        use proptest::prelude::*;
        let id = || prop::sample::select(vec!["a", "b", "c"]);
        let policy = prop::sample::select(vec!["ask", "never", "sometimes"]);
        let mode = prop::sample::select(vec![
            "read-only",
            "workspace-write",
            "danger-full-access",
            "rw",
        ]);
        let preset = prop::sample::select(vec![
            "read-only",
            "workspace-write",
            "full-access",
            "auto",
            "yolo",
        ]);
        let outcome = prop::sample::select(vec!["allowed-once", "rejected", "cancelled", "maybe"]);
        prop_oneof![
            id().prop_map(|t| NewEvent::new("turn/start", format!(r#"{{"turnId":"{t}"}}"#))),
            id().prop_map(|t| NewEvent::new("turn/end", format!(r#"{{"turnId":"{t}"}}"#))),
            (id(), id()).prop_map(|(s, t)| NewEvent::new(
                "step/start",
                format!(r#"{{"stepId":"{s}","turnId":"{t}"}}"#)
            )),
            id().prop_map(|s| NewEvent::new("step/end", format!(r#"{{"stepId":"{s}"}}"#))),
            (id(), id()).prop_map(|(c, s)| NewEvent::new(
                "tool/start",
                format!(r#"{{"callId":"{c}","stepId":"{s}","name":"bash","arguments":{{}}}}"#)
            )),
            id().prop_map(|c| NewEvent::new(
                "tool/settle",
                format!(r#"{{"callId":"{c}","status":"ok"}}"#)
            )),
            (id(), id()).prop_map(|(r, t)| NewEvent::new(
                "approval/asked",
                format!(r#"{{"requestId":"{r}","turnId":"{t}","tool":"bash"}}"#)
            )),
            (id(), outcome).prop_map(|(r, o)| NewEvent::new(
                "approval/decided",
                format!(r#"{{"requestId":"{r}","outcome":"{o}"}}"#)
            )),
            policy.prop_map(|p| NewEvent::new("approval/policy", format!(r#"{{"policy":"{p}"}}"#))),
            mode.prop_map(|m| NewEvent::new("sandbox/mode", format!(r#"{{"mode":"{m}"}}"#))),
            preset
                .prop_map(|p| NewEvent::new("permission/preset", format!(r#"{{"preset":"{p}"}}"#))),
            Just(NewEvent::new("custom/thing", "[1,2]")),
            Just(NewEvent::new("turn/start", "[]")),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever the writer accepts, in single appends or batches, folds
        /// with no violation and scans clean: it never writes a log that
        /// `verify` would reject.
        #[test]
        fn the_writer_never_accepts_a_log_that_verify_rejects(
            steps in proptest::collection::vec(
                (proptest::collection::vec(arbitrary_event(), 1..4), proptest::bool::ANY),
                1..40,
            )
        ) {
            let (_dir, store) = store();
            let session = created(&store, "model");
            let mut writer = store
                .open_writer(&session, WriterOptions { durability: Durability::Buffered, keep_snapshot: true, ..WriterOptions::default() })
                .unwrap_or_else(|e| panic!("{e}"));
            let mut accepted = 0usize;
            for (events, as_batch) in steps {
                if as_batch {
                    let count = events.len();
                    if writer.append_batch(events, None).is_ok() {
                        accepted += count;
                    }
                } else {
                    for event in events {
                        if writer.append(event, None).is_ok() {
                            accepted += 1;
                        }
                    }
                }
            }
            drop(writer);
            let snapshot = store.snapshot(&session).unwrap_or_else(|e| panic!("{e}"));
            proptest::prop_assert!(snapshot.torn_tail.is_none());
            proptest::prop_assert_eq!(snapshot.events.len(), accepted);
            let (_, violations) = snapshot.fold();
            proptest::prop_assert!(violations.is_empty(), "{:?}", violations);
        }
    }
}
