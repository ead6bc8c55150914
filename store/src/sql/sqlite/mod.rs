//! The SQLite backend: one database file holding many sessions, with the
//! same API and the same records as the JSONL backend.
//!
//! # Schema (version 3, `PRAGMA user_version = 3`)
//!
//! ```sql
//! CREATE TABLE sessions (
//!     id               TEXT PRIMARY KEY NOT NULL,
//!     created_at       INTEGER NOT NULL,
//!     cwd              TEXT NOT NULL,
//!     parent_session   TEXT,
//!     seed_length      INTEGER NOT NULL,
//!     delegation_depth INTEGER NOT NULL,
//!     sandbox_mode     TEXT,
//!     approval_policy  TEXT,
//!     header_body      TEXT NOT NULL,   -- the header record up to ,"crc":
//!     header_crc       INTEGER NOT NULL,-- CRC-32 of id + header_body
//!     last_seq         INTEGER NOT NULL DEFAULT 0, -- the last event's seq
//!     seed_source      TEXT REFERENCES sessions(id) -- a fork by reference's parent
//! ) STRICT;
//! CREATE TABLE events (
//!     session_id TEXT NOT NULL REFERENCES sessions(id),
//!     seq        INTEGER NOT NULL,
//!     ts         INTEGER NOT NULL,
//!     type       TEXT NOT NULL,
//!     batch      INTEGER,              -- only on a batch's first record
//!     body       TEXT NOT NULL,        -- EventRecord::body(), byte for byte
//!     crc        INTEGER NOT NULL,     -- CRC-32 of session_id + body
//!     PRIMARY KEY (session_id, seq)
//! ) STRICT, WITHOUT ROWID;
//! ```
//!
//! A fork by reference (`seed_source` set) has no rows for its seeded
//! events: they are the first `seed_length` rows of `seed_source`, read
//! through `sql::events` (docs/FORMAT.md, "Forks by reference").
//!
//! `body` is the exact text that precedes `,"crc":` in the JSONL line, so
//! the JSONL record is given back by appending the CRC suffix: export from
//! either backend is byte-identical. The other columns are copies of what
//! the bodies hold, for queries; the bodies are the truth, and a reader
//! checks that the columns agree with them. A stored CRC that does not match
//! its body, a body that does not decode, columns that disagree with it, a
//! seq gap, an unfinished batch or a `seedLength` above the number of events
//! is corruption, reported with the session and seq; so are rows that end
//! before, or run past, the `last_seq` of their session row, which every
//! append moves in its own transaction (the checks live in `sql::checks`).
//! A session row whose id is invalid, events without a session row, and
//! whatever SQLite reports of a damaged file are corruption of the database
//! as a whole ([`SqliteStore::audit`]). Integers are SQLite's signed 64
//! bits: a time or count above 2^63 - 1 is refused on write.
//!
//! [`SqliteStore::open_read_only`] is how reading commands open a database:
//! no WAL switch, no schema step, no write, so a store on a read-only
//! medium or readable only can be verified; another application's database
//! is never adopted.
//!
//! The database runs in WAL mode; a newer `user_version` is refused, an
//! older one is brought forward by the steps of `MIGRATION_STEPS`, all in
//! one transaction. The file is created 0600 (SQLite gives its `-wal` and
//! `-shm` files the same mode).
//!
//! # Writes: one committer per database (`committer`)
//!
//! Every write (session creation and appends) goes through one committer
//! thread that owns the only write connection of this `SqliteStore`. A
//! writer's sync sends its pending records and waits; the committer takes
//! every request waiting at that moment, applies them all in one
//! transaction and commits once — one fsync for all under
//! `synchronous=FULL` (`Durability::Fsync`; `synchronous=NORMAL` when every
//! request of the group is `Durability::Buffered`: no sync at the commit,
//! but one at each checkpoint, so that a checkpoint never leaves earlier
//! durable commits unsynced in the database file once the log they were
//! in is gone or overwritten). Every caller is answered
//! only after the commit, by a second thread (`sessionlog-ack`), so that
//! waking the callers overlaps the next group. Commits go through the `Io`
//! seam (`FaultPoint::Commit`).
//!
//! A request that fails never affects the others of its group. Requests are
//! applied straight into the transaction: one refused before it changed
//! anything (a seq conflict, an existing id) is simply left out. One that
//! fails after changing something makes the committer roll the transaction
//! back and apply the group again with a savepoint per request, so that it
//! is rolled back alone. Savepoints cost a parse and two statements per
//! request, which the common case does without.
//!
//! After each commit, before anyone is answered, the committer checks that
//! the `-wal` file is still in place (`WalGuard`); when it was removed, it
//! checkpoints what the removed file holds into the database and stops. A
//! database file removed or replaced under it refuses that commit and
//! every later write.
//!
//! The WAL is checkpointed every 8192 pages (32 MiB) rather than SQLite's
//! default 1000: with many sessions appending, each group dirties one page
//! per session, and a page rewritten by many commits is copied into the
//! database once per checkpoint.
//!
//! A migration's bulk creation is the one exception to grouping: it runs
//! alone on the committer, as one transaction that stays open while the
//! migration streams sessions into it (the committer inserts one session
//! while the next is read), and is committed only once every source
//! session verified, or rolled back. Meanwhile the database's write lock
//! is held, so other writes wait for it.
//!
//! # Locking
//!
//! One writer per session across processes: a writer holds an exclusive
//! `flock` on `<database file name>.locks/<id>.lock` beside the database
//! (folder 0700, files 0600, never removed: removing a lock file races with
//! its next taker). A second writer, in this process or another, gets
//! `StoreError::Locked`. Readers take no lock; they read through their own
//! connection, which WAL never blocks.

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use sessionlog_projections::SessionState;
use sessionlog_schema::{
    record_crc, ChainValue, DecodedHeader, EventRecord, HeaderVocabularyError, SessionHeader,
    SessionId,
};

use crate::io::Io;
use crate::jsonl::{check_new_session, ListEntry};
use crate::reader::Snapshot;
pub(crate) use crate::sql::checks::session_locator;
use crate::sql::checks::{
    audit_catalogue, corrupt_session, damaged, invalid_session_row, unowned_events_damage, RowPage,
    StoreAudit,
};
use crate::sql::events::{RowBounds, RowPages, SqlEvents};
use crate::sql::{
    decode_header_row, fold_session, fold_within_vocabulary, stage, FoldedSession, HeaderRow,
    SnapshotBytes, SnapshotRow,
};
use crate::state_snapshot;
use crate::writer::{check_storable, Durability, LogSink, SessionWriter, WriterOptions};
use crate::StoreError;

mod committer;
mod schema;
mod sweep;

#[cfg(test)]
mod tests;

use committer::sqlite_error;
use schema::{
    create_database_file, identify, needs_write_access, newer_schema, not_a_store, not_the_owners,
    open_and_identify_read_only, open_connection, refuse_a_file_not_sqlite, upgrade_schema,
    write_ahead_log_has_frames, Access, Identity,
};

/// The schema version this build reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 4;

/// A SQLite database of sessions. Cheap to clone: clones share one
/// committer and one read connection.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

/// The events of one session read page by page (bounded memory), checked
/// as they come: contiguous seqs, intact bodies, finished batches.
pub type SqliteEvents = SqlEvents;

/// How [`SqliteEvents`] fetches rows: through the store's read connection.
struct SqliteRows {
    shared: Arc<Shared>,
    /// The held read its session row was read in (`Shared::held_reads`),
    /// if any.
    held: Option<u64>,
}

/// One read transaction on a store's reader connection, ended when
/// dropped ([`SqliteStore::hold_read`]).
#[derive(Debug)]
#[must_use = "the read is held only while the guard lives"]
pub(crate) struct HeldRead {
    /// `None` when a read was held already: the outer guard ends it.
    shared: Option<Arc<Shared>>,
}

impl Drop for HeldRead {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            // A read transaction changed nothing: ending it cannot lose
            // anything, and a failure leaves the next statement to report.
            let reader = shared.reader();
            let _ = reader.execute_batch("COMMIT");
            shared.held_reads.fetch_add(1, Ordering::Relaxed);
            // What was read ahead is of the read ended.
            *shared.sweep() = sweep::Sweep::default();
        }
    }
}

/// The rows one page read gives at most: the literal `LIMIT` of its
/// statement, and [`PAGE_ROWS`].
macro_rules! page_rows {
    () => {
        512
    };
}
const PAGE_ROWS: usize = page_rows!();

/// How many times [`SqliteStore::hold_read_for`] tries to catch one moment
/// between two commits before it holds one reader only.
const CATCH_MOMENT_ATTEMPTS: usize = 8;

/// How long a connection waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// WAL pages between automatic checkpoints.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 8192;
/// The size a WAL file is cut back to after a checkpoint (bytes).
const WAL_SIZE_LIMIT: i64 = 64 << 20;

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    locks: PathBuf,
    reader: Mutex<Connection>,
    /// Counts the read transactions held on `reader`
    /// ([`SqliteStore::hold_read`]): odd while one is held, and changed
    /// only with `reader` locked. A stream made in a held read reads its
    /// rows to their end while the count is still the one it was made at:
    /// then it reads the snapshot its session row was read in.
    held_reads: AtomicU64,
    /// The rows read ahead in the held read, if any (locked after
    /// `reader`, and only with it).
    sweep: Mutex<sweep::Sweep>,
    /// `None` for a store opened read-only: it writes nothing.
    committer: Option<Committer>,
    /// The schema version of the file: older than [`SCHEMA_VERSION`] only
    /// when opened read-only (a reader never upgrades).
    schema_version: i64,
}

/// The thread that owns the write connection, and the way to reach it.
#[derive(Debug)]
struct Committer {
    requests: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// Sessions streamed into one open transaction of the committer, committed
/// by [`SqliteBulkCreate::commit`] and rolled back when dropped without it.
/// Only `migrate` makes one: it has folded every session it adds.
#[derive(Debug)]
pub(crate) struct SqliteBulkCreate {
    shared: Arc<Shared>,
    sessions: Option<mpsc::SyncSender<BulkItem>>,
    outcome: mpsc::Receiver<Result<(), StoreError>>,
    answered: bool,
}

/// Items (a session's header, or a chunk of its events) a bulk creation
/// holds in flight between the caller and the committer (besides the one
/// being inserted and the one being read).
const BULK_SESSIONS_IN_FLIGHT: usize = 2;

/// What the committer runs: a group of writes, or a bulk creation.
#[derive(Debug)]
enum Job {
    Write(Request),
    Bulk(BulkRequest),
}

#[derive(Debug)]
struct BulkRequest {
    sessions: mpsc::Receiver<BulkItem>,
    durability: Durability,
    reply: mpsc::SyncSender<Result<(), StoreError>>,
}

#[derive(Debug)]
enum BulkItem {
    /// A session's row, its events to follow.
    Session(NewSession),
    /// The next events of the session last added.
    Events {
        id: SessionId,
        events: Vec<EventRecord>,
    },
    /// The state snapshot of the session last added, once all its events
    /// were: a [`Work::Snapshot`].
    Snapshot(Work),
    Commit,
}

/// A session to create: its header and its first events.
#[derive(Debug)]
struct NewSession {
    header: SessionHeader,
    /// The header record's body: `header.to_body()` for a new session, the
    /// source's bytes for a migrated one.
    header_body: String,
    /// For a fork by reference: the session whose first
    /// `header.seed_length` event rows are the seeded events, which
    /// `events` then leaves out.
    seed_source: Option<SessionId>,
    events: Vec<EventRecord>,
}

#[derive(Debug)]
enum Work {
    Create(Vec<NewSession>),
    Append {
        id: SessionId,
        records: Vec<EventRecord>,
    },
    /// A state snapshot of session `id` at `seq`, replacing its last.
    Snapshot {
        id: SessionId,
        seq: u64,
        anchor_crc: u32,
        bytes: Vec<u8>,
    },
}

impl Work {
    /// The snapshot `bytes` of session `id`, taken at `anchor`.
    fn snapshot(id: &SessionId, anchor: state_snapshot::SnapshotAnchor, bytes: Vec<u8>) -> Work {
        Work::Snapshot {
            id: id.clone(),
            seq: anchor.seq,
            anchor_crc: anchor.record_crc,
            bytes,
        }
    }
}

#[derive(Debug)]
struct Request {
    work: Work,
    durability: Durability,
    reply: mpsc::SyncSender<Result<(), StoreError>>,
}

/// The writer side of one session: records wait here until the writer's
/// sync hands them to the committer.
#[derive(Debug)]
struct SqliteSink {
    shared: Arc<Shared>,
    id: SessionId,
    pending: Vec<EventRecord>,
    /// The CRC of the last record synced (a snapshot's anchor), and of the
    /// stored header body.
    last_crc: u32,
    header_crc: u32,
    /// Held for the writer's life: the session's exclusive lock.
    _lock: File,
}

/// Whether an open makes a database with no table a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adopt {
    /// A new or empty database becomes a store (`create`, `migrate`).
    Empty,
    /// Only a sessionlog store is opened.
    Nothing,
}

/// Makes the database file at `path`, about to become a store, private to
/// its owner (0600), as a database the store creates is: an empty file
/// made by hand may have been readable by others.
fn make_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let metadata =
        std::fs::metadata(path).map_err(|source| StoreError::io("stat", path, source))?;
    if metadata.permissions().mode() & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| StoreError::io("make private (chmod 600)", path, source))
}

/// Switches the database to WAL (a no-op once it is), waiting while
/// another connection holds the lock the switch needs: SQLite answers a
/// switch that cannot take it at once with `SQLITE_BUSY` without calling
/// the busy handler, so it is tried again, for as long as a busy wait
/// lasts.
fn set_wal_mode(connection: &Connection, path: &Path) -> Result<String, StoreError> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let switched =
            connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0));
        match switched {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if error.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other.map_err(sqlite_error("set WAL mode", path)),
        }
    }
}

impl SqliteStore {
    /// Opens the database at `path` for writing, creating it (0600) when
    /// missing, and brings its schema to [`SCHEMA_VERSION`]. A newer schema
    /// is refused with `StoreError::NewerSchema`, and a database that is
    /// not a sessionlog store (another application's tables) with
    /// `StoreError::NotAStore`, before anything is changed; only a new or
    /// empty database is made a store.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with_io(path, Io::default())
    }

    /// [`SqliteStore::open`] with every commit going through `io`.
    pub fn open_with_io(path: &Path, io: Io) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_as(path, io, Adopt::Empty)
    }

    /// Opens the sessionlog store at `path` for writing, as
    /// [`SqliteStore::open`] does, but makes nothing a store: a database
    /// with no table (an empty file among them) is refused as not a
    /// sessionlog store, unchanged. For the commands that write to a
    /// session a store already holds, which must not turn a mistyped
    /// file into a store before finding no session there.
    pub fn open_existing(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_as(path, Io::default(), Adopt::Nothing)
    }

    fn open_as(path: &Path, io: Io, adopt: Adopt) -> Result<SqliteStore, StoreError> {
        let created = create_database_file(path)?;
        refuse_a_file_not_sqlite(path)?;
        let mut writer = match open_connection(path, Access::ReadWrite) {
            Ok(writer) => writer,
            Err(error) => {
                // A refused open leaves no file it made (through a
                // symbolic link in the path, which SQLite refuses).
                if created {
                    let _ = std::fs::remove_file(path);
                }
                return Err(error);
            }
        };
        match identify(&writer, path)? {
            Identity::Sessionlog(_) => {}
            Identity::Empty => match adopt {
                Adopt::Empty => make_private(path)?,
                Adopt::Nothing => {
                    return Err(not_a_store(
                        path,
                        "a database with no table; `sessionlog create` makes it a store".to_owned(),
                    ))
                }
            },
            Identity::Foreign(reason) => return Err(not_a_store(path, reason)),
            Identity::Newer(found) => return Err(newer_schema(path, found)),
        }
        let mode = set_wal_mode(&writer, path)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Sqlite {
                operation: "set WAL mode",
                path: path.to_owned(),
                source: rusqlite::Error::InvalidParameterName(format!(
                    "journal_mode stayed {mode}"
                )),
            });
        }
        writer
            .pragma_update(None, "foreign_keys", true)
            .map_err(sqlite_error("enable foreign keys", path))?;
        upgrade_schema(&mut writer, path)?;
        // Checkpoint every 8192 WAL pages (32 MiB) rather than SQLite's
        // 1000: a page rewritten by many commits is copied into the
        // database once per checkpoint, and checkpoints run on the
        // committer, between groups.
        writer
            .pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
            .map_err(sqlite_error("set the checkpoint interval", path))?;
        writer
            .pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(sqlite_error("set the WAL size limit", path))?;
        let reader = open_connection(path, Access::ReadWrite)?;
        let committer = Committer::start(writer, path.to_owned(), io)?;
        Ok(SqliteStore::with_shared(
            path,
            reader,
            Some(committer),
            SCHEMA_VERSION,
        ))
    }

    /// Opens the database at `path` for reading only: nothing is created,
    /// upgraded or written (no WAL switch, no schema step), so a store on a
    /// read-only medium, readable only, or on a full disk can still be
    /// verified and exported. A missing file, one that is not a sessionlog
    /// store (`NotAStore`) and a newer schema (`NewerSchema`) are refused.
    /// Every write through the returned store is refused.
    ///
    /// SQLite reads a WAL database through its `-shm` index, which it
    /// creates beside the database when it can. When it cannot (a
    /// read-only folder or medium, a full disk) and no write-ahead log
    /// holds frames, the file is read as `immutable`: no writer can be
    /// changing it. A log with frames that cannot be indexed is refused
    /// rather than skipped.
    pub fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        let (reader, version) = match open_and_identify_read_only(path, Access::ReadOnly) {
            Err(error) if needs_write_access(&error) => {
                if write_ahead_log_has_frames(path)? {
                    return Err(error);
                }
                open_and_identify_read_only(path, Access::Immutable)?
            }
            other => other?,
        };
        Ok(SqliteStore::with_shared(path, reader, None, version))
    }

    fn with_shared(
        path: &Path,
        reader: Connection,
        committer: Option<Committer>,
        schema_version: i64,
    ) -> SqliteStore {
        let file_name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sessions.db".to_owned());
        let locks = path.with_file_name(format!("{file_name}.locks"));
        SqliteStore {
            shared: Arc::new(Shared {
                path: path.to_owned(),
                locks,
                reader: Mutex::new(reader),
                held_reads: AtomicU64::new(0),
                sweep: Mutex::new(sweep::Sweep::default()),
                committer,
                schema_version,
            }),
        }
    }

    /// Whether this store was opened with [`SqliteStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.committer.is_none()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The lock file a writer of session `id` holds.
    pub fn lock_path(&self, id: &SessionId) -> PathBuf {
        self.shared.locks.join(format!("{id}.lock"))
    }

    /// Whether session `id` exists.
    pub fn contains(&self, id: &SessionId) -> Result<bool, StoreError> {
        let reader = self.shared.reader();
        reader
            .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
            .and_then(|mut statement| statement.exists([id.as_str()]))
            .map_err(sqlite_error("look up a session", &self.shared.path))
    }

    /// Creates a session atomically: its header row and `events` (a child's
    /// seeded prefix and first own events) in one transaction. The events
    /// are checked against every rule first; an existing id is refused.
    pub fn create(
        &self,
        header: &SessionHeader,
        events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        // Every rule, values both backends store, the framing.
        let state = check_new_session(&self.shared.session_path(&header.id), header, events)?;
        if self.contains(&header.id)? {
            return Err(self.shared.already_exists(&header.id));
        }
        let header_body = header.to_body();
        let kept = state_snapshot::of_created(&state, &header_body, events);
        let session = NewSession {
            header: header.clone(),
            header_body,
            seed_source: None,
            events: events.to_vec(),
        };
        let committer = self.shared.committer()?;
        committer.submit(&self.shared.path, Work::Create(vec![session]), durability)?;
        if let Some((anchor, bytes)) = kept {
            // Not synced, as a writer's: a cache.
            let work = Work::snapshot(&header.id, anchor, bytes);
            if let Err(error) = committer.submit(&self.shared.path, work, Durability::Buffered) {
                state_snapshot::not_kept(&header.id, anchor.seq, &error);
            }
        }
        Ok(())
    }

    /// Creates a fork by reference, durably: the child's header row with
    /// `source` as the session whose first `header.seed_length` event rows
    /// are its seeded events, and only its own first events
    /// (`own_events`, from seq `seed_length + 1`), in one transaction that
    /// first checks that `source` records at least that many events. The
    /// caller (`Store::fork`) has checked the child's events against the
    /// parent's state; an existing id is refused.
    pub(crate) fn create_by_reference(
        &self,
        header: &SessionHeader,
        source: &SessionId,
        own_events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        check_storable(header, own_events)?;
        if self.contains(&header.id)? {
            return Err(self.shared.already_exists(&header.id));
        }
        let session = NewSession {
            header: header.clone(),
            header_body: header.to_body(),
            seed_source: Some(source.clone()),
            events: own_events.to_vec(),
        };
        self.shared
            .committer()?
            .submit(&self.shared.path, Work::Create(vec![session]), durability)
    }

    /// Creates several sessions in one transaction (all or none): the bulk
    /// path of a migration. Each is checked as by [`SqliteStore::create`].
    pub fn create_many(
        &self,
        sessions: Vec<(SessionHeader, Vec<EventRecord>)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let mut batch = Vec::with_capacity(sessions.len());
        for (header, events) in sessions {
            check_new_session(&self.shared.session_path(&header.id), &header, &events)?;
            if self.contains(&header.id)? {
                return Err(self.shared.already_exists(&header.id));
            }
            batch.push(NewSession {
                header_body: header.to_body(),
                header,
                seed_source: None,
                events,
            });
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.shared
            .committer()?
            .submit(&self.shared.path, Work::Create(batch), durability)
    }

    /// Starts a bulk creation: sessions added to it are inserted in one
    /// transaction that [`SqliteBulkCreate::commit`] commits (a full sync
    /// under `Durability::Fsync`); dropped without a commit, nothing is
    /// written. The caller has folded every session it adds (unlike
    /// [`SqliteStore::create_many`], nothing is checked against the rules
    /// again); an existing id fails the whole creation.
    pub(crate) fn bulk_create(
        &self,
        durability: Durability,
    ) -> Result<SqliteBulkCreate, StoreError> {
        let (sessions, receiver) = mpsc::sync_channel(BULK_SESSIONS_IN_FLIGHT);
        let (reply, outcome) = mpsc::sync_channel(1);
        let job = Job::Bulk(BulkRequest {
            sessions: receiver,
            durability,
            reply,
        });
        self.shared.committer()?.send(&self.shared.path, job)?;
        Ok(SqliteBulkCreate {
            shared: Arc::clone(&self.shared),
            sessions: Some(sessions),
            outcome,
            answered: false,
        })
    }

    /// The header of session `id` and its vocabulary errors.
    pub fn header(
        &self,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<HeaderVocabularyError>), StoreError> {
        let reader = self.shared.reader();
        self.shared.read_header(&reader, id)
    }

    /// The header of session `id` as stored: its fields, its vocabulary
    /// errors and its record body (what `export` prints).
    pub fn decoded_header(&self, id: &SessionId) -> Result<DecodedHeader, StoreError> {
        let reader = self.shared.reader();
        self.shared.read_decoded_header(&reader, id)
    }

    /// Every event of session `id`, streamed page by page.
    pub fn events(&self, id: &SessionId) -> Result<SqliteEvents, StoreError> {
        self.events_from(id, 1)
    }

    /// The events of session `id` from `from_seq` on, streamed page by page:
    /// the session as its row records it when the stream starts (events
    /// appended meanwhile are left to the next read).
    pub fn events_from(&self, id: &SessionId, from_seq: u64) -> Result<SqliteEvents, StoreError> {
        Ok(self.header_and_events_from(id, from_seq)?.1)
    }

    /// The header of session `id` and its events from `from_seq` on, from
    /// one read of its session row.
    pub(crate) fn header_and_events_from(
        &self,
        id: &SessionId,
        from_seq: u64,
    ) -> Result<(DecodedHeader, SqliteEvents), StoreError> {
        let (row, held) = {
            let reader = self.shared.reader();
            let row = self.shared.read_session_row(&reader, id)?;
            (row, self.shared.held_read())
        };
        let events = self.shared.events_of(id, &row, from_seq, held);
        Ok((row.decoded, events))
    }

    /// Makes every read of this store, until the returned guard is
    /// dropped, see one snapshot of the database: one read transaction
    /// instead of one per statement. A store-wide `verify` or `stats` reads
    /// through it, so that the whole store is judged as of one moment and
    /// no statement pays for taking and releasing SQLite's locks. Writers
    /// of other connections go on meanwhile, but the WAL cannot be
    /// checkpointed past the snapshot until the guard is dropped.
    ///
    /// Meanwhile sessions streamed one after the other in id order are
    /// read ahead, in chunks of session rows and of event rows in key
    /// order (`sweep`), rather than by statements of their own.
    pub(crate) fn hold_read(&self) -> Result<HeldRead, StoreError> {
        self.hold(true)
    }

    /// [`SqliteStore::hold_read`], reading ahead only when `read_ahead`
    /// (not for the one session of a snapshot). A read held already stays
    /// as it is.
    fn hold(&self, read_ahead: bool) -> Result<HeldRead, StoreError> {
        let reader = self.shared.reader();
        if !reader.is_autocommit() {
            return Ok(HeldRead { shared: None });
        }
        reader
            .execute_batch("BEGIN DEFERRED")
            .map_err(sqlite_error("begin a read", &self.shared.path))?;
        let held = self.shared.held_reads.fetch_add(1, Ordering::Relaxed) + 1;
        if read_ahead {
            self.shared.sweep().start(held);
        }
        drop(reader);
        Ok(HeldRead {
            shared: Some(Arc::clone(&self.shared)),
        })
    }

    /// [`SqliteStore::hold_read`] on this store and on `readers - 1` more
    /// handles of its file, each with a reader connection of its own, all
    /// holding one snapshot: the reads of a store-wide command can then go
    /// on side by side, one thread per handle, and still judge the store
    /// as of one moment. Fewer handles come back when no more can be
    /// opened (a file only SQLite's `immutable` mode reads, a limit on open
    /// files), when writers commit so often that no moment between two of
    /// their commits can be caught, or when a read is held already (its
    /// snapshot cannot be shared): then only this store, its read held.
    ///
    /// SQLite has no way to hand a snapshot from one connection to another
    /// in this build, so the moment is caught instead: this store's read
    /// begins, then each other one's, then this store's read ends and
    /// begins again. `PRAGMA data_version` tells whether any connection
    /// committed between this store's two reads; when none did, the
    /// database did not change from the first to the second, and every
    /// read begun between them sees that same state.
    pub(crate) fn hold_read_for(
        &self,
        readers: usize,
    ) -> Result<Vec<(SqliteStore, HeldRead)>, StoreError> {
        let own = |held: HeldRead| vec![(self.clone(), held)];
        if readers < 2 || !self.shared.reader().is_autocommit() {
            return Ok(own(self.hold_read()?));
        }
        let others: Vec<SqliteStore> = (1..readers)
            .map_while(|_| SqliteStore::open_read_only(&self.shared.path).ok())
            .collect();
        if others.is_empty() {
            return Ok(own(self.hold_read()?));
        }
        for _ in 0..CATCH_MOMENT_ATTEMPTS {
            let first = self.hold_read()?;
            let before = self.shared.data_version()?;
            let mut held = Vec::with_capacity(others.len());
            for other in &others {
                let read = other.hold_read()?;
                other.shared.data_version()?;
                held.push(read);
            }
            drop(first);
            let first = self.hold_read()?;
            if self.shared.data_version()? == before {
                let mut all = own(first);
                all.extend(others.into_iter().zip(held));
                return Ok(all);
            }
        }
        Ok(own(self.hold_read()?))
    }

    /// The last seq session `id`'s row records (0: no events): where a read
    /// of its last events starts, without reading the others.
    pub fn last_seq(&self, id: &SessionId) -> Result<u64, StoreError> {
        let reader = self.shared.reader();
        Ok(self.shared.read_session_row(&reader, id)?.last_seq)
    }

    /// The whole session `id`: its events through the last seq its row
    /// records when the read starts (rows are never changed once written,
    /// so that is one state of the session). A SQLite session never has a
    /// torn tail: its transactions are atomic.
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        // One read transaction for the whole session (nested in a held
        // read when there is one).
        let _held = self.hold(false)?;
        let (row, held) = {
            let reader = self.shared.reader();
            let row = self.shared.read_session_row(&reader, id)?;
            (row, self.shared.held_read())
        };
        let events = self
            .shared
            .events_of(id, &row, 1, held)
            .collect::<Result<Vec<_>, _>>()?;
        let decoded = row.decoded;
        Ok(Snapshot {
            header: decoded.header,
            header_body: decoded.body,
            header_vocabulary_errors: decoded.vocabulary_errors,
            events,
            torn_tail: None,
        })
    }

    /// The ids of every session, sorted. A row whose id is not a valid
    /// session id, or events without a session row, can only come from
    /// damage: corruption, as [`SqliteStore::audit`] reports it.
    pub fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut audit = self.audit(false)?;
        match audit.damage.is_empty() {
            true => Ok(audit.ids),
            false => Err(audit.damage.remove(0)),
        }
    }

    /// Checks the database as a whole and lists its sessions: the valid
    /// ids of the session rows, and every piece of damage outside any one
    /// session — session rows with an invalid id, events without a session
    /// row and, when `engine_check` is set, what SQLite's own
    /// `PRAGMA quick_check` reports of the file (it reads every page). Each
    /// session's own rows are checked when it is read.
    pub fn audit(&self, engine_check: bool) -> Result<StoreAudit, StoreError> {
        let mut engine_damage = match engine_check {
            true => self.engine_check()?,
            false => Vec::new(),
        };
        let path = &self.shared.path;
        let reader = self.shared.reader();
        let transaction = self.shared.begin_read(&reader)?;
        let connection: &Connection = transaction.as_deref().unwrap_or(&reader);
        let session_rows = session_row_ids(connection, path)?;
        // Counting the rows is a walk of the table's pages; listing the
        // owners of events is a seek per session (docs/PERFORMANCE.md).
        let accounted = self.counts_agree(connection)?;
        let mut audit = audit_catalogue(path, &session_rows, &[]);
        // A session row with an invalid id is damage the counts cannot
        // vouch for: the owners are listed then too.
        audit.unowned_events_counted = accounted && audit.damage.is_empty();
        if !audit.unowned_events_counted {
            let event_owners = event_owners(connection, path)?;
            audit.damage.append(&mut unowned_events_damage(
                path,
                &session_rows,
                &event_owners,
            ));
        }
        drop(transaction);
        engine_damage.append(&mut audit.damage);
        audit.damage = engine_damage;
        Ok(audit)
    }

    /// The part of [`audit`](Self::audit) that lists the sessions: their
    /// valid ids, and the session rows with an invalid id as damage.
    /// Events without a session row are left to
    /// [`events_accounted_for`](Self::events_accounted_for), which may run
    /// meanwhile on another handle of the same moment, and to
    /// [`unowned_events`](Self::unowned_events).
    pub fn list_sessions(&self) -> Result<StoreAudit, StoreError> {
        // Each id is checked as its row is read: a store of many small
        // sessions lists them before any is read, on one core.
        let path = &self.shared.path;
        let reader = self.shared.reader();
        let mut audit = StoreAudit::default();
        let listed = (|| -> rusqlite::Result<()> {
            let mut statement = reader.prepare_cached("SELECT id FROM sessions ORDER BY id")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let text = row.get_ref(0)?.as_str()?;
                match SessionId::parse(text) {
                    Ok(id) => audit.ids.push(id),
                    Err(error) => audit.damage.push(invalid_session_row(path, text, &error)),
                }
            }
            Ok(())
        })();
        listed.map_err(sqlite_error("list sessions", path))?;
        // In id order already; the sort checks it and costs one pass.
        audit.ids.sort();
        Ok(audit)
    }

    /// Whether counting the rows rules out events without a session row:
    /// the rows of `events` are exactly as many as the session rows
    /// account for (see [`StoreAudit::unowned_events_counted`]). When it
    /// does not, or a session read is short of rows, or a session row has
    /// an invalid id, [`unowned_events`](Self::unowned_events) names them.
    /// Inside a held read it counts that moment.
    pub fn events_accounted_for(&self) -> Result<bool, StoreError> {
        let reader = self.shared.reader();
        let transaction = self.shared.begin_read(&reader)?;
        let connection: &Connection = transaction.as_deref().unwrap_or(&reader);
        self.counts_agree(connection)
    }

    /// [`events_accounted_for`](Self::events_accounted_for) on
    /// `connection`: never for a database of a schema before the column
    /// of last seqs.
    fn counts_agree(&self, connection: &Connection) -> Result<bool, StoreError> {
        Ok(self.shared.schema_version >= 3
            && every_event_accounted_for(connection, &self.shared.path)?)
    }

    /// Events without a session row, each as damage of the database as a
    /// whole, found by listing the owners of events (a seek per session):
    /// what [`audit`](Self::audit) leaves out when its count of the rows
    /// rules them out ([`StoreAudit::unowned_events_counted`]), for a
    /// reader that has found a session short of rows. Inside a held read
    /// it lists that moment.
    pub fn unowned_events(&self) -> Result<Vec<StoreError>, StoreError> {
        let path = &self.shared.path;
        let reader = self.shared.reader();
        let transaction = self.shared.begin_read(&reader)?;
        let connection: &Connection = transaction.as_deref().unwrap_or(&reader);
        let session_rows = session_row_ids(connection, path)?;
        let event_owners = event_owners(connection, path)?;
        drop(transaction);
        Ok(unowned_events_damage(path, &session_rows, &event_owners))
    }

    /// What SQLite's own `PRAGMA quick_check` reports of the file (it
    /// reads every page), as damage of the database as a whole: nothing
    /// when the file is sound. A check that SQLite itself stops, as it
    /// does at some damage (a page of a table that is no b-tree page), is
    /// that damage too: the sessions are still read one by one. Inside a
    /// held read it checks that moment, so that one of the handles that
    /// [`Store::hold_read_for`](crate::Store::hold_read_for) gives can
    /// check the file while another lists its sessions.
    pub fn engine_check(&self) -> Result<Vec<StoreError>, StoreError> {
        let path = &self.shared.path;
        let reader = self.shared.reader();
        let checked = reader
            .prepare("PRAGMA quick_check(20)")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| row.get(0))
                    .and_then(|rows| rows.collect())
            })
            .map_err(sqlite_error(
                "check the database with SQLite's quick_check",
                path,
            ));
        let lines: Vec<String> = match checked {
            Ok(lines) => lines,
            Err(error) if error.class() == crate::ErrorClass::Corrupt => return Ok(vec![error]),
            Err(error) => return Err(error),
        };
        Ok(match lines.iter().all(|line| line == "ok") {
            true => Vec::new(),
            // A row may hold several findings a line each: one line in all,
            // as every finding of the database is reported.
            false => {
                let findings: Vec<&str> = lines
                    .iter()
                    .flat_map(|line| line.lines())
                    .map(str::trim)
                    .filter(|finding| !finding.is_empty())
                    .collect();
                vec![damaged(
                    path,
                    format!("SQLite's quick_check reports: {}", findings.join("; ")),
                )]
            }
        })
    }

    /// Every session with its header. Damage of the database as a whole
    /// is refused, as by [`audit`](Self::audit) with its engine check:
    /// SQLite's `PRAGMA quick_check` of every page runs on a handle of its
    /// own, of the same moment, beside the listing (after it, on this
    /// handle, when no other can be had).
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
        let held = self.hold_read_for(2)?;
        let (listed, engine_damage) = std::thread::scope(|scope| {
            let checking = held
                .get(1)
                .map(|(checker, _)| scope.spawn(|| checker.engine_check()));
            let listed = self.list_headers();
            let engine_damage = match checking {
                Some(checking) => checking
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => self.engine_check(),
            };
            (listed, engine_damage)
        });
        drop(held);
        if let Some(first) = engine_damage?.into_iter().next() {
            return Err(first);
        }
        listed
    }

    /// Every session with its header, after the checks of
    /// [`ids`](Self::ids).
    fn list_headers(&self) -> Result<Vec<ListEntry>, StoreError> {
        let ids = self.ids()?;
        let reader = self.shared.reader();
        Ok(ids
            .into_iter()
            .map(|id| {
                let header = self
                    .shared
                    .read_header(&reader, &id)
                    .map(|(header, _)| header);
                ListEntry { id, header }
            })
            .collect())
    }

    /// Opens the single writer of session `id`: takes its lock (`Locked` if
    /// another writer, in this process or another, holds it), reads and
    /// verifies the events while folding its projections (those after its
    /// state snapshot, when one matches), and refuses a corrupt or
    /// rule-breaking session.
    pub fn open_writer(
        &self,
        id: &SessionId,
        options: WriterOptions,
    ) -> Result<SessionWriter, StoreError> {
        self.shared.committer()?;
        if !self.contains(id)? {
            return Err(StoreError::NotFound {
                id: id.to_string(),
                path: self.shared.path.clone(),
            });
        }
        let lock = self.lock_session(id)?;
        let decoded = self.decoded_header(id)?;
        let read = match options.keep_snapshot {
            true => SnapshotRead::Unread,
            false => SnapshotRead::Paged,
        };
        let mut folded =
            fold_within_vocabulary(&self.shared.session_path(id), decoded.clone(), |decoded| {
                self.fold_session(id, decoded, read)
            })?;
        if folded.state.snapshot_unreadable() {
            // A page of the snapshot failed as the rows after it were
            // folded: again, the snapshot read whole, every page checked
            // first (so one that fails is passed over).
            folded = fold_within_vocabulary(&self.shared.session_path(id), decoded, |decoded| {
                self.fold_session(id, decoded, SnapshotRead::Whole)
            })?;
        }
        let sink = SqliteSink {
            shared: Arc::clone(&self.shared),
            id: id.clone(),
            pending: Vec::new(),
            last_crc: folded.last_crc,
            header_crc: folded.header_crc,
            _lock: lock,
        };
        let writer = SessionWriter::new(
            self.shared.session_path(id),
            Box::new(sink),
            options,
            folded.state,
            folded.events,
        );
        Ok(writer.resumed_from(folded.resumed))
    }

    /// The state of session `id` as of its last seq: what a writer opened
    /// now would start from, folded from the session's state snapshot and
    /// the rows after it when the snapshot still holds (docs/FORMAT.md,
    /// "State snapshots"), else from the first row. Reads only.
    pub fn current_state(&self, id: &SessionId) -> Result<SessionState, StoreError> {
        let decoded = self.decoded_header(id)?;
        let folded = fold_within_vocabulary(&self.shared.session_path(id), decoded, |decoded| {
            self.fold_session(id, decoded, SnapshotRead::Whole)
        })?;
        Ok(folded.state)
    }

    /// Folds session `id` (see [`fold_session`]), with its snapshot read as
    /// `read` says, when the database keeps snapshots of this format
    /// (schema 4: a read-only reader of an older file folds every row).
    fn fold_session(
        &self,
        id: &SessionId,
        decoded: DecodedHeader,
        read: SnapshotRead,
    ) -> Result<FoldedSession, StoreError> {
        let keep_events = read == SnapshotRead::Unread;
        let snapshot = match keep_events || self.shared.schema_version < 4 {
            true => None,
            false => self
                .snapshot_row(id, &decoded, read == SnapshotRead::Paged)
                .map_err(|why| state_snapshot::ignored(id, &self.shared.path, &why))
                .ok()
                .flatten(),
        };
        let place = self.shared.session_path(id);
        fold_session(id, &place, decoded, snapshot, keep_events, |from_seq| {
            self.events_from(id, from_seq)
        })
    }

    /// Session `id`'s snapshot, if it has one of this format: its head and
    /// pages read whole, or (`paged`) its head read and checked, its pages
    /// left for the state to read as it needs them.
    fn snapshot_row(
        &self,
        id: &SessionId,
        decoded: &DecodedHeader,
        paged: bool,
    ) -> Result<Option<SnapshotRow>, String> {
        let reader = self.shared.reader();
        let found: Option<(i64, i64, Vec<u8>)> = reader
            .query_row(
                "SELECT seq, anchor_crc, state FROM snapshots
                  WHERE session_id = ?1 AND format = ?2",
                params![id.as_str(), state_snapshot::STATE_SNAPSHOT_FORMAT],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(|error| error.to_string())?;
        let Some((seq, anchor_crc, head)) = found else {
            return Ok(None);
        };
        if !paged {
            let bytes = snapshot_bytes(&reader, id, head).map_err(|error| error.to_string())?;
            return Ok(Some((seq, anchor_crc, SnapshotBytes::Whole(bytes))));
        }
        drop(reader);
        let head = match state_snapshot::decode_head(&head, &decoded.header, &decoded.body)? {
            Ok(read) if read.len == head.len() => read,
            _ => return Err("its head is not whole".to_owned()),
        };
        let source = SnapshotPages::new(Arc::clone(&self.shared), id.clone(), &head);
        let bytes = SnapshotBytes::Paged {
            head,
            source: Box::new(source),
        };
        Ok(Some((seq, anchor_crc, bytes)))
    }

    /// Takes session `id`'s lock file in the lock folder. The folder is
    /// opened without following a symlink, and the file is opened relative
    /// to it: a folder replaced by a symlink is refused, never followed.
    fn lock_session(&self, id: &SessionId) -> Result<File, StoreError> {
        let folder = &self.shared.locks;
        match std::fs::DirBuilder::new().mode(0o700).create(folder) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(StoreError::io("create lock folder", folder, source)),
        }
        let directory = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(folder)
            .map_err(|source| {
                let refused = matches!(source.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR));
                match refused {
                    true => StoreError::io(
                        "open lock folder",
                        folder,
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "it is a symlink or not a folder; remove it, and sessionlog \
                             creates a private folder there",
                        ),
                    ),
                    false => StoreError::io("open lock folder", folder, source),
                }
            })?;
        // The folder and the lock file are the database owner's: another
        // user's would let that user hold every session locked.
        let database = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&self.shared.path)
                .map_err(|source| StoreError::io("stat", &self.shared.path, source))?
                .uid()
        };
        let owner = |what: &'static str, place: &Path, file: &File| -> Result<(), StoreError> {
            use std::os::unix::fs::MetadataExt;
            let found = file
                .metadata()
                .map_err(|source| StoreError::io(what, place, source))?;
            if found.uid() != database {
                return Err(not_the_owners(
                    what,
                    place,
                    (found.uid(), database),
                    "could hold every session locked; remove it",
                ));
            }
            if found.mode() & 0o022 != 0 {
                use std::os::unix::fs::PermissionsExt;
                let private = std::fs::Permissions::from_mode(found.mode() & 0o700);
                file.set_permissions(private)
                    .map_err(|source| StoreError::io(what, place, source))?;
            }
            Ok(())
        };
        owner("open lock folder", folder, &directory)?;
        let path = self.lock_path(id);
        let file = open_lock_file(&directory, &format!("{id}.lock"))
            .map_err(|source| StoreError::io("open lock file", &path, source))?;
        owner("open lock file", &path, &file)?;
        match crate::jsonl::lock_exclusive(&file) {
            Ok(true) => Ok(file),
            Ok(false) => Err(StoreError::Locked {
                id: id.clone(),
                path,
            }),
            Err(source) => Err(StoreError::io("lock", &path, source)),
        }
    }
}

/// Opens (creating it 0600) the lock file `name` inside the open folder
/// `directory`, not following a symlink.
fn open_lock_file(directory: &File, name: &str) -> io::Result<File> {
    use rustix::fs::{openat, Mode, OFlags};
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let descriptor = openat(directory, name, flags, Mode::from_raw_mode(0o600))?;
    Ok(File::from(descriptor))
}

impl RowPages for SqliteRows {
    fn rows(
        &mut self,
        id: &SessionId,
        from: u64,
        through: u64,
        page: &mut RowPage,
    ) -> Result<(), StoreError> {
        let reader = self.shared.reader();
        self.shared.read_rows(&reader, id, from, through, page)
    }

    fn bounds(&mut self, id: &SessionId) -> Result<RowBounds, StoreError> {
        let reader = self.shared.reader();
        self.shared.row_bounds(&reader, id)
    }

    fn session_row(&mut self, id: &SessionId) -> Result<Option<HeaderRow>, StoreError> {
        let reader = self.shared.reader();
        self.shared.read_header_row(&reader, id)
    }

    fn rows_to_end(
        &mut self,
        id: &SessionId,
        from: u64,
        page: &mut RowPage,
    ) -> Result<Option<bool>, StoreError> {
        let reader = self.shared.reader();
        let Some(held) = self
            .held
            .filter(|held| self.shared.held_read() == Some(*held))
        else {
            return Ok(None);
        };
        let mut sweep = self.shared.sweep();
        if sweep.reads(held) {
            match sweep.rows_to_end(&reader, &self.shared.path, id, from, PAGE_ROWS, page) {
                Ok(whole) => return Ok(Some(whole)),
                // Rows read ahead are other sessions' rows too: as for a
                // session row (`Shared::read_session_row`), this session's
                // rows are read alone, and reading ahead stops.
                Err(_) => sweep.stop(),
            }
        }
        drop(sweep);
        self.shared.read_rows(&reader, id, from, u64::MAX, page)?;
        // A page cut by its bytes may have rows after it.
        Ok(Some(
            page.rows.len() < PAGE_ROWS && !page.is_full_of_bytes(),
        ))
    }
}

impl SqliteSink {
    /// The store the sink writes, as its readers read it: what a sink
    /// reads of its own session again (a refold, a chain) reads as they do.
    fn store(&self) -> SqliteStore {
        SqliteStore {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl LogSink for SqliteSink {
    fn write(&mut self, id: &SessionId, records: &[EventRecord]) -> Result<(), StoreError> {
        debug_assert_eq!(id, &self.id, "a sink serves one session");
        stage(&mut self.pending, records)
    }

    fn sync(&mut self, durability: Durability) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let records = std::mem::take(&mut self.pending);
        let last_crc = records
            .last()
            .map(|last| record_crc(&self.id, last.body().as_bytes()));
        let work = Work::Append {
            id: self.id.clone(),
            records,
        };
        self.shared
            .committer()?
            .submit(&self.shared.path, work, durability)?;
        if let Some(last_crc) = last_crc {
            self.last_crc = last_crc;
        }
        Ok(())
    }

    fn save_snapshot(&mut self, state: &SessionState) -> Result<usize, StoreError> {
        let anchor = state_snapshot::SnapshotAnchor::of_row(state.seq(), self.last_crc);
        let bytes = state_snapshot::encode(state, self.header_crc, anchor);
        let size = bytes.len();
        let work = Work::snapshot(&self.id, anchor, bytes);
        // Not synced: a snapshot is a cache, and one lost costs only a
        // longer fold.
        self.shared
            .committer()?
            .submit(&self.shared.path, work, Durability::Buffered)?;
        Ok(size)
    }

    fn refold(&mut self) -> Result<SessionState, StoreError> {
        // What the database holds (its snapshot read whole, every page
        // checked: one that fails is passed over), then what was handed to
        // the sink since the last sync.
        let store = self.store();
        let decoded = store.decoded_header(&self.id)?;
        let place = self.shared.session_path(&self.id);
        let folded = fold_within_vocabulary(&place, decoded, |decoded| {
            store.fold_session(&self.id, decoded, SnapshotRead::Whole)
        })?;
        let mut state = folded.state;
        for record in &self.pending {
            state.apply(record).map_err(|violation| StoreError::Rule {
                path: place.clone(),
                violation,
            })?;
        }
        Ok(state)
    }

    fn chain_of_log(&mut self) -> Result<ChainValue, StoreError> {
        let store = self.store();
        let (decoded, events) = store.header_and_events_from(&self.id, 1)?;
        crate::writer::chain_of(&decoded.body, events, &self.pending)
    }

    fn chain_of_log_since(
        &mut self,
        seq: u64,
        through: u64,
        before: &dyn Fn(&EventRecord) -> Option<ChainValue>,
    ) -> Result<Option<ChainValue>, StoreError> {
        let store = self.store();
        let (_, events) = store.header_and_events_from(&self.id, seq)?;
        crate::writer::chain_since(events, &self.pending, seq, through, before)
    }
}

/// A session row as read: its decoded header, the last seq it records and,
/// for a fork by reference, the session whose rows hold its seed.
struct SessionRow {
    decoded: DecodedHeader,
    last_seq: u64,
    seed_source: Option<SessionId>,
}

impl Shared {
    /// The events of session `id`, whose row is `row` (read in the held
    /// read `held`, if any), from `from_seq` on.
    fn events_of(
        self: &Arc<Self>,
        id: &SessionId,
        row: &SessionRow,
        from_seq: u64,
        held: Option<u64>,
    ) -> SqlEvents {
        SqlEvents::new(
            Arc::new(Mutex::new(SqliteRows {
                shared: Arc::clone(self),
                held,
            })),
            self.path.clone(),
            id.clone(),
            row.decoded.header.seed_length,
            row.seed_source.clone(),
            row.last_seq,
            from_seq,
        )
    }

    fn reader(&self) -> MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `PRAGMA data_version` of the reader: within one read transaction
    /// the same, and changed at the next when any other connection
    /// committed in between. It begins the snapshot of a read held but
    /// not yet begun.
    fn data_version(&self) -> Result<i64, StoreError> {
        self.reader()
            .query_row("PRAGMA data_version", [], |row| row.get(0))
            .map_err(sqlite_error("read the data version", &self.path))
    }

    /// The rows read ahead (call with the reader locked).
    fn sweep(&self) -> MutexGuard<'_, sweep::Sweep> {
        self.sweep.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The read held on the reader now, if one is (call with the reader
    /// locked).
    fn held_read(&self) -> Option<u64> {
        let count = self.held_reads.load(Ordering::Relaxed);
        (count % 2 == 1).then_some(count)
    }

    /// The committer, or a refusal for a store opened read-only.
    fn committer(&self) -> Result<&Committer, StoreError> {
        self.committer
            .as_ref()
            .ok_or_else(|| StoreError::read_only(&self.path))
    }

    /// A read transaction on `reader`, for statements that must see one
    /// snapshot of the database; `None` inside a held read
    /// ([`SqliteStore::hold_read`]), whose transaction they share.
    fn begin_read<'c>(
        &self,
        reader: &'c Connection,
    ) -> Result<Option<Transaction<'c>>, StoreError> {
        if !reader.is_autocommit() {
            return Ok(None);
        }
        reader
            .unchecked_transaction()
            .map(Some)
            .map_err(sqlite_error("begin a read", &self.path))
    }

    /// How errors about one session of the database name it.
    fn session_path(&self, id: &SessionId) -> PathBuf {
        session_locator(&self.path, id)
    }

    fn already_exists(&self, id: &SessionId) -> StoreError {
        StoreError::AlreadyExists {
            id: id.clone(),
            path: self.path.clone(),
        }
    }

    fn corrupt(&self, id: &SessionId, seq: u64, reason: String) -> StoreError {
        corrupt_session(&self.path, id, seq, reason)
    }

    fn read_header(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<HeaderVocabularyError>), StoreError> {
        let decoded = self.read_session_row(connection, id)?.decoded;
        Ok((decoded.header, decoded.vocabulary_errors))
    }

    fn read_decoded_header(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<DecodedHeader, StoreError> {
        Ok(self.read_session_row(connection, id)?.decoded)
    }

    /// The session row of `id`: its header, checked against its CRC and
    /// its id, the last seq it records and, for a fork by reference, the
    /// session whose rows hold its seeded events.
    fn read_session_row(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<SessionRow, StoreError> {
        // In a held read, sessions read one after the other in id order
        // (a store-wide verify or stats) are read ahead in chunks.
        let row = match self.held_read() {
            Some(held) if self.schema_version == SCHEMA_VERSION && self.sweep().reads(held) => {
                let ahead = self.sweep().session_row(connection, &self.path, id);
                match ahead {
                    Ok(row) => row,
                    // What is read ahead holds other sessions' rows too:
                    // damage in one of them must not fail this one. The
                    // held read reads no more ahead, and this row is read
                    // alone, failing only if it is the damaged one.
                    Err(_) => {
                        self.sweep().stop();
                        self.read_header_row(connection, id)?
                    }
                }
            }
            _ => self.read_header_row(connection, id)?,
        };
        let Some(mut row) = row else {
            return Err(StoreError::NotFound {
                id: id.to_string(),
                path: self.path.clone(),
            });
        };
        let decoded = decode_header_row(&self.path, id, &mut row)?;
        let seed_source = row
            .seed_source
            .as_deref()
            .map(SessionId::parse)
            .transpose()
            .map_err(|error| {
                self.corrupt(
                    id,
                    0,
                    format!("the session row names an invalid seed source ({error})"),
                )
            })?;
        Ok(SessionRow {
            decoded,
            last_seq: row.last_seq.unsigned_abs(),
            seed_source,
        })
    }

    /// The session row of `id` as stored (`None`: there is none).
    fn read_header_row(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<Option<HeaderRow>, StoreError> {
        // A version 1 database (read, never upgraded, by a reader) records
        // no last seq: its rows are taken as they are. Before version 3 no
        // session is a fork by reference.
        let sql = match self.schema_version {
            1 => {
                "SELECT header_body, header_crc,
                   ifnull((SELECT max(seq) FROM events WHERE session_id = sessions.id), 0), NULL,
                   created_at, cwd, parent_session, seed_length, delegation_depth, sandbox_mode,
                   approval_policy
                 FROM sessions WHERE id = ?1"
            }
            2 => {
                "SELECT header_body, header_crc, last_seq, NULL, created_at, cwd, parent_session,
                   seed_length, delegation_depth, sandbox_mode, approval_policy
                 FROM sessions WHERE id = ?1"
            }
            _ => {
                "SELECT header_body, header_crc, last_seq, seed_source, created_at, cwd,
                   parent_session, seed_length, delegation_depth, sandbox_mode, approval_policy
                 FROM sessions WHERE id = ?1"
            }
        };
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement
                    .query_row([id.as_str()], |row| {
                        Ok(HeaderRow {
                            body: row.get(0)?,
                            crc: row.get(1)?,
                            last_seq: row.get(2)?,
                            seed_source: row.get(3)?,
                            columns: header_columns(row, 4)?,
                        })
                    })
                    .optional()
            })
            .map_err(|error| {
                // Damage of this session's row names the session (seq 0:
                // its session row), as a row that reads but does not
                // decode does.
                self.unreadable(id, 0, sqlite_error("read a header", &self.path)(error))
            })
    }

    /// One page ([`PAGE_ROWS`]) of the rows of session `id` from
    /// `from_seq` through `to_seq`, into `page` (emptied first). When a
    /// row cannot be read (a damaged page of the file), `page` keeps the
    /// rows read before it, to be given out before the error.
    fn read_rows(
        &self,
        connection: &Connection,
        id: &SessionId,
        from_seq: u64,
        to_seq: u64,
        page: &mut RowPage,
    ) -> Result<(), StoreError> {
        let from = from_seq;
        let from_seq = crate::sql::lowest_row_seq(from_seq);
        let to_seq = i64::try_from(to_seq).unwrap_or(i64::MAX);
        // A page's LIMIT is a literal: bound as a parameter, SQLite plans
        // with its value and prepares the statement again at every read,
        // which cost a store-wide verify a third of its time.
        let sql = concat!(
            "SELECT seq, ts, type, batch, body, crc FROM events
             WHERE session_id = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq LIMIT ",
            page_rows!()
        );
        let mut statement = connection
            .prepare_cached(sql)
            .map_err(sqlite_error("read events", &self.path))?;
        page.clear();
        let mut rows = statement
            .query(params![id.as_str(), from_seq, to_seq])
            .map_err(sqlite_error("read events", &self.path))?;
        // The seq a failure is named by: the row's own when it reads, else
        // the next one expected (at least the first asked for, never the
        // lowest value a damaged row's seq is looked for from).
        let mut next_seq = i64::try_from(from).unwrap_or(i64::MAX).max(1);
        while let Some(row) = rows
            .next()
            .map_err(|error| self.unreadable_row(id, next_seq, error))?
        {
            let seq = row.get::<_, i64>(0).unwrap_or(next_seq).max(next_seq);
            push_event_row(page, row, 0).map_err(|error| self.unreadable_row(id, seq, error))?;
            next_seq = seq.saturating_add(1);
            if page.is_full_of_bytes() {
                break;
            }
        }
        Ok(())
    }

    /// A failure to read session `id`'s row at `seq` (or the next one
    /// after it): damage of that row names the session and seq, as the
    /// check of a row that reads does; any other failure is what it is.
    fn unreadable_row(&self, id: &SessionId, seq: i64, error: rusqlite::Error) -> StoreError {
        let error = sqlite_error("read events", &self.path)(error);
        self.unreadable(id, seq.unsigned_abs(), error)
    }

    /// `error`, met reading session `id`'s row at `seq` (0: its session
    /// row), as a finding of that session when it is damage.
    fn unreadable(&self, id: &SessionId, seq: u64, error: StoreError) -> StoreError {
        match error {
            StoreError::DamagedDatabase { reason, .. } => {
                let what = match seq {
                    0 => "its session row",
                    _ => "the row",
                };
                self.corrupt(id, seq, format!("{what} cannot be read: {reason}"))
            }
            other => other,
        }
    }

    /// The last seq the session row of `id` records (`None`: the row is
    /// gone) and the lowest and highest seqs of its rows, read in one
    /// statement (so one snapshot of the database).
    fn row_bounds(&self, connection: &Connection, id: &SessionId) -> Result<RowBounds, StoreError> {
        // A version 1 database records no last seq: its rows are taken as
        // they are.
        let sql = match self.schema_version {
            1 => {
                "SELECT (SELECT ifnull((SELECT max(seq) FROM events WHERE session_id = ?1), 0)
                           FROM sessions WHERE id = ?1),
                        (SELECT min(seq) FROM events WHERE session_id = ?1),
                        (SELECT max(seq) FROM events WHERE session_id = ?1)"
            }
            _ => {
                "SELECT (SELECT last_seq FROM sessions WHERE id = ?1),
                        (SELECT min(seq) FROM events WHERE session_id = ?1),
                        (SELECT max(seq) FROM events WHERE session_id = ?1)"
            }
        };
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement.query_row([id.as_str()], |row| {
                    Ok(RowBounds {
                        recorded: row.get(0)?,
                        min: row.get(1)?,
                        max: row.get(2)?,
                    })
                })
            })
            .map_err(sqlite_error("read the last seq", &self.path))
    }
}

/// The id texts of every session row, sorted (as stored: one that is not
/// a valid id is damage, which the caller reports).
fn session_row_ids(connection: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    connection
        .prepare_cached("SELECT id FROM sessions ORDER BY id")
        .and_then(|mut statement| {
            statement
                .query_map([], |row| row.get(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(sqlite_error("list sessions", path))
}

/// Whether the rows of `events` are exactly as many as the session rows
/// account for: the sum of their last seqs, less the seeded events of
/// each fork by reference (which has no rows of its own for them). Each
/// session's read checks that its own rows are those seqs and no other,
/// so when every session reads whole, equal counts leave no row to any
/// session id without a session row.
fn every_event_accounted_for(connection: &Connection, path: &Path) -> Result<bool, StoreError> {
    // `total` (a float) does not overflow on a damaged last seq; such a
    // session does not read whole, and its reader then lists the owners.
    connection
        .prepare_cached(
            "SELECT (SELECT count(*) FROM events) =
                    (SELECT total(last_seq - CASE WHEN seed_source IS NULL THEN 0
                                                  ELSE seed_length END)
                       FROM sessions)",
        )
        .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
        .map_err(sqlite_error("count the rows of events", path))
}

/// The session ids of `events` that no session row has, found by seeking
/// from one owner of events to the next through the primary key (a lookup
/// per session, not a scan of every event), in one statement that gives
/// back only the owners without a row: a store whose rows are whole has
/// none to give.
fn event_owners(connection: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    connection
        .prepare_cached(
            "WITH RECURSIVE owners(id) AS (
                 SELECT (SELECT min(session_id) FROM events)
                 UNION ALL
                 SELECT (SELECT session_id FROM events WHERE session_id > owners.id
                          ORDER BY session_id LIMIT 1)
                   FROM owners WHERE owners.id IS NOT NULL
             )
             SELECT id FROM owners
              WHERE id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM sessions WHERE sessions.id = owners.id)",
        )
        .and_then(|mut statement| {
            statement
                .query_map([], |row| row.get(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(sqlite_error("list the sessions of events", path))
}

/// How a fold reads a session's snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SnapshotRead {
    /// Not at all: every event is folded, and kept.
    Unread,
    /// Whole, every page checked before the state is decoded.
    Whole,
    /// Its head, then its pages as the state's reads land on them: a
    /// writer's, which folds again should a page fail.
    Paged,
}

/// The whole snapshot of session `id` whose head is `head`: the head, then
/// its pages in order.
fn snapshot_bytes(reader: &Connection, id: &SessionId, head: Vec<u8>) -> rusqlite::Result<Vec<u8>> {
    let mut bytes = head;
    let mut pages = reader
        .prepare_cached("SELECT bytes FROM snapshot_pages WHERE session_id = ?1 ORDER BY page")?;
    let mut rows = pages.query([id.as_str()])?;
    while let Some(row) = rows.next()? {
        bytes.extend_from_slice(row.get_ref(0)?.as_blob()?);
    }
    Ok(bytes)
}

/// The pages of session `id`'s snapshot, read by a writer's state through
/// the store's read connection, each a row of `snapshot_pages`. The
/// writer's next snapshot replaces them, but only once its state was
/// encoded whole, which read every page; a page read from rows that
/// changed anyhow fails its CRC.
struct SnapshotPages {
    shared: Arc<Shared>,
    id: SessionId,
    /// Where each page starts in the snapshot (the head first).
    starts: Vec<u64>,
}

impl SnapshotPages {
    fn new(shared: Arc<Shared>, id: SessionId, head: &state_snapshot::SnapshotHead) -> Self {
        let mut at = head.len as u64;
        let starts = head
            .pages
            .iter()
            .map(|page| {
                let start = at;
                at += u64::from(page.len);
                start
            })
            .collect();
        SnapshotPages { shared, id, starts }
    }
}

impl std::fmt::Debug for SnapshotPages {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "the snapshot pages of session {} in {}",
            self.id,
            self.shared.path.display()
        )
    }
}

impl sessionlog_projections::PageSource for SnapshotPages {
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> io::Result<()> {
        let page = self
            .starts
            .binary_search(&offset)
            .map_err(|_| io::Error::other(format!("no page starts at byte {offset}")))?;
        let reader = self.shared.reader();
        let read = reader
            .prepare_cached("SELECT bytes FROM snapshot_pages WHERE session_id = ?1 AND page = ?2")
            .and_then(|mut statement| {
                statement.query_row(params![self.id.as_str(), page as i64], |row| {
                    let bytes = row.get_ref(0)?.as_blob()?;
                    match bytes.len() == buffer.len() {
                        true => {
                            buffer.copy_from_slice(bytes);
                            Ok(true)
                        }
                        false => Ok(false),
                    }
                })
            });
        match read {
            Ok(true) => Ok(()),
            Ok(false) => Err(io::Error::other(format!(
                "page {page} is not of the length its head says"
            ))),
            Err(error) => {
                tracing::warn!(
                    path = %self.shared.path.display(),
                    "could not read page {page} of the state snapshot of session {}: {error}",
                    self.id
                );
                Err(io::Error::other(error))
            }
        }
    }
}

/// Adds to `page` the event row whose columns `seq, ts, type, batch, body,
/// crc` start at column `first` of `row`; each body is read in place and
/// copied once, into the page, as bytes: one that is not UTF-8 is found by
/// the check of its own session's rows, which names the session and seq.
fn push_event_row(
    page: &mut RowPage,
    row: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<()> {
    page.push(
        row.get(first)?,
        row.get(first + 1)?,
        row.get_ref(first + 2)?.as_bytes()?,
        row.get(first + 3)?,
        row.get_ref(first + 4)?.as_bytes()?,
        row.get(first + 5)?,
    );
    Ok(())
}

/// The [`HeaderColumns`](crate::sql::HeaderColumns) of a session row,
/// from its column `first` on.
pub(crate) fn header_columns(
    row: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<crate::sql::HeaderColumns> {
    Ok(crate::sql::HeaderColumns {
        created_at: row.get(first)?,
        cwd: row.get(first + 1)?,
        parent_session: row.get(first + 2)?,
        seed_length: row.get(first + 3)?,
        delegation_depth: row.get(first + 4)?,
        sandbox_mode: row.get(first + 5)?,
        approval_policy: row.get(first + 6)?,
    })
}
