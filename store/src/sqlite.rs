//! The SQLite backend: one database file holding many sessions, with the
//! same API and the same records as the JSONL backend.
//!
//! # Schema (version 2, `PRAGMA user_version = 2`)
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
//!     last_seq         INTEGER NOT NULL DEFAULT 0 -- the last event's seq
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
//! `body` is the exact text that precedes `,"crc":` in the JSONL line, so
//! the JSONL record is given back by appending the CRC suffix: export from
//! either backend is byte-identical. The other columns are copies of what
//! the bodies hold, for queries; the bodies are the truth, and a reader
//! checks that the columns agree with them. A stored CRC that does not match
//! its body, a body that does not decode, columns that disagree with it, a
//! seq gap, an unfinished batch or a `seedLength` above the number of events
//! is corruption, reported with the session and seq; so are rows that end
//! before, or run past, the `last_seq` of their session row, which every
//! append moves in its own transaction (the checks live in `sql_checks`).
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
//! # Writes: one committer per database
//!
//! Every write (session creation and appends) goes through one committer
//! thread that owns the only write connection of this `SqliteStore`. A
//! writer's sync sends its pending records and waits; the committer takes
//! every request waiting at that moment, applies them all in one
//! transaction and commits once — one fsync for all under
//! `synchronous=FULL` (`Durability::Fsync`; `synchronous=OFF` when every
//! request of the group is `Durability::Buffered`). Every caller is answered
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
//! checkpoints what the removed file holds into the database and stops.
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

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use sessionlog_projections::SessionState;
use sessionlog_schema::{
    decode_header, encode_line, record_crc, DecodedHeader, EventRecord, HeaderVocabularyError,
    SessionHeader, SessionId,
};

use crate::io::Io;
use crate::jsonl::{check_new_session, ListEntry};
use crate::reader::Snapshot;
use crate::sql::sql_integer;
pub(crate) use crate::sql_checks::session_locator;
use crate::sql_checks::{
    audit_catalogue, check_no_rows_past, corrupt_session, damaged, EventRow, SeqCheck, StoreAudit,
};
use crate::writer::{
    check_storable, check_storable_record, Durability, LogSink, SessionWriter, WriterOptions,
};
use crate::StoreError;

/// The schema version this build reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 2;

/// A SQLite database of sessions. Cheap to clone: clones share one
/// committer and one read connection.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

/// The events of one session read page by page (bounded memory), checked
/// as they come: contiguous seqs, intact bodies, finished batches.
#[derive(Debug)]
pub struct SqliteEvents {
    shared: Arc<Shared>,
    id: SessionId,
    seed_length: u64,
    /// The last seq the session row recorded when the stream started: the
    /// stream ends there, and the rows must reach it.
    recorded_last_seq: u64,
    next_seq: u64,
    batch_remaining: u64,
    page: VecDeque<EventRecord>,
    finished: bool,
}

/// Rows read per page by [`SqliteEvents`].
const PAGE_ROWS: i64 = 512;

/// How long a connection waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// WAL pages between automatic checkpoints.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 8192;
/// The size a WAL file is cut back to after a checkpoint (bytes).
const WAL_SIZE_LIMIT: i64 = 64 << 20;

/// One step of the schema: brings a database at `to_version - 1` to
/// `to_version`.
struct MigrationStep {
    to_version: i64,
    sql: &'static str,
}

/// Every step, in order. Version 0 is an empty database; version 1 is the
/// first released schema. A later version appends a step here (and a test
/// that opens a fixture of the version before it).
const MIGRATION_STEPS: &[MigrationStep] = &[
    MigrationStep {
        to_version: 1,
        sql: "CREATE TABLE sessions (
            id               TEXT PRIMARY KEY NOT NULL,
            created_at       INTEGER NOT NULL,
            cwd              TEXT NOT NULL,
            parent_session   TEXT,
            seed_length      INTEGER NOT NULL,
            delegation_depth INTEGER NOT NULL,
            sandbox_mode     TEXT,
            approval_policy  TEXT,
            header_body      TEXT NOT NULL,
            header_crc       INTEGER NOT NULL
          ) STRICT;
          CREATE TABLE events (
            session_id TEXT NOT NULL REFERENCES sessions(id),
            seq        INTEGER NOT NULL,
            ts         INTEGER NOT NULL,
            type       TEXT NOT NULL,
            batch      INTEGER,
            body       TEXT NOT NULL,
            crc        INTEGER NOT NULL,
            PRIMARY KEY (session_id, seq)
          ) STRICT, WITHOUT ROWID;",
    },
    // Version 2: each session row records its last seq, kept up to date in
    // the same transaction as every append, so that rows lost to damage
    // can be told from rows never written.
    MigrationStep {
        to_version: 2,
        sql: "ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
          UPDATE sessions SET last_seq =
            ifnull((SELECT max(seq) FROM events WHERE session_id = sessions.id), 0);",
    },
];

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    locks: PathBuf,
    reader: Mutex<Connection>,
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

/// Sessions a bulk creation holds in flight between the caller and the
/// committer (besides the one being inserted and the one being read).
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
    Session(NewSession),
    Commit,
}

/// A session to create: its header and its first events.
#[derive(Debug)]
struct NewSession {
    header: SessionHeader,
    /// The header record's body: `header.to_body()` for a new session, the
    /// source's bytes for a migrated one.
    header_body: String,
    events: Vec<EventRecord>,
}

#[derive(Debug)]
enum Work {
    Create(Vec<NewSession>),
    Append {
        id: SessionId,
        records: Vec<EventRecord>,
    },
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
    /// Held for the writer's life: the session's exclusive lock.
    _lock: File,
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
        create_database_file(path)?;
        let mut writer = open_connection(path, Access::ReadWrite)?;
        match identify(&writer, path)? {
            Identity::Empty | Identity::Sessionlog(_) => {}
            Identity::Foreign(reason) => return Err(not_a_store(path, reason)),
            Identity::Newer(found) => return Err(newer_schema(path, found)),
        }
        let mode: String = writer
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(sqlite_error("set WAL mode", path))?;
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
        check_new_session(&self.shared.session_path(&header.id), header, events)?;
        check_storable(header, events)?;
        if self.contains(&header.id)? {
            return Err(self.shared.already_exists(&header.id));
        }
        let session = NewSession {
            header: header.clone(),
            header_body: header.to_body(),
            events: events.to_vec(),
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
            check_storable(&header, &events)?;
            if self.contains(&header.id)? {
                return Err(self.shared.already_exists(&header.id));
            }
            batch.push(NewSession {
                header_body: header.to_body(),
                header,
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
        let (decoded, recorded_last_seq) = {
            let reader = self.shared.reader();
            self.shared.read_session_row(&reader, id)?
        };
        let from_seq = from_seq.max(1);
        Ok(SqliteEvents {
            shared: Arc::clone(&self.shared),
            id: id.clone(),
            seed_length: decoded.header.seed_length,
            recorded_last_seq,
            next_seq: from_seq,
            batch_remaining: 0,
            page: VecDeque::new(),
            finished: false,
        })
    }

    /// The last seq session `id`'s row records (0: no events): where a read
    /// of its last events starts, without reading the others.
    pub fn last_seq(&self, id: &SessionId) -> Result<u64, StoreError> {
        let reader = self.shared.reader();
        Ok(self.shared.read_session_row(&reader, id)?.1)
    }

    /// The whole session `id`, read in one read transaction. A SQLite
    /// session never has a torn tail: its transactions are atomic.
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        let path = &self.shared.path;
        let mut reader = self.shared.reader();
        let transaction = reader
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(sqlite_error("begin a read", path))?;
        let (decoded, recorded_last_seq) = self.shared.read_session_row(&transaction, id)?;
        let header = decoded.header;
        let rows = self
            .shared
            .read_rows(&transaction, id, 1, i64::MAX, recorded_last_seq)?;
        let (recorded_again, max_row_seq) = self.shared.row_bounds(&transaction, id)?;
        drop(transaction);
        drop(reader);
        check_no_rows_past(path, id, recorded_again, max_row_seq)?;
        let mut check = SeqCheck::new(path, id, 1);
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            events.push(check.accept(row)?);
        }
        check.finish(header.seed_length, recorded_last_seq)?;
        Ok(Snapshot {
            header,
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
        let path = &self.shared.path;
        let mut reader = self.shared.reader();
        let mut engine_damage = Vec::new();
        if engine_check {
            let lines: Vec<String> = reader
                .prepare("PRAGMA quick_check(20)")
                .and_then(|mut statement| {
                    statement
                        .query_map([], |row| row.get(0))
                        .and_then(|rows| rows.collect())
                })
                .map_err(sqlite_error("check the database", path))?;
            if lines.iter().any(|line| line != "ok") {
                engine_damage.push(damaged(
                    path,
                    format!("SQLite's quick_check reports: {}", lines.join("; ")),
                ));
            }
        }
        let transaction = reader
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(sqlite_error("begin a read", path))?;
        let session_rows: Vec<String> = transaction
            .prepare_cached("SELECT id FROM sessions ORDER BY id")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| row.get(0))
                    .and_then(|rows| rows.collect())
            })
            .map_err(sqlite_error("list sessions", path))?;
        let event_owners = event_owners(&transaction, path)?;
        drop(transaction);
        let mut audit = audit_catalogue(path, session_rows, event_owners);
        engine_damage.append(&mut audit.damage);
        audit.damage = engine_damage;
        Ok(audit)
    }

    /// Every session with its header.
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
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
    /// verifies every event while folding its projections, and refuses a
    /// corrupt or rule-breaking session.
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
        if let Some(error) = decoded.vocabulary_errors.into_iter().next() {
            return Err(StoreError::HeaderVocabulary {
                path: self.shared.session_path(id),
                error,
            });
        }
        let mut state = SessionState::with_header_body(decoded.header, &decoded.body);
        let mut events = options.keep_snapshot.then(Vec::new);
        // A violation refuses the session, but reading goes on: damage
        // later in it wins (the `?` returns it at once).
        let mut refusal = crate::error::Refusal::default();
        for record in self.events(id)? {
            let record = record?;
            if let Err(violation) = state.apply(&record) {
                refusal.note(StoreError::Rule {
                    path: self.shared.session_path(id),
                    violation,
                });
            }
            if let Some(events) = &mut events {
                events.push(record);
            }
        }
        refusal.into_result()?;
        let sink = SqliteSink {
            shared: Arc::clone(&self.shared),
            id: id.clone(),
            pending: Vec::new(),
            _lock: lock,
        };
        Ok(SessionWriter::new(
            self.shared.path.clone(),
            Box::new(sink),
            options,
            state,
            events,
        ))
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
        let path = self.lock_path(id);
        let file = open_lock_file(&directory, &format!("{id}.lock"))
            .map_err(|source| StoreError::io("open lock file", &path, source))?;
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

impl SqliteEvents {
    /// The session being read.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    fn next_event(&mut self) -> Result<Option<EventRecord>, StoreError> {
        if let Some(record) = self.page.pop_front() {
            return Ok(Some(record));
        }
        if self.finished {
            return Ok(None);
        }
        let path = &self.shared.path;
        let (rows, max_row_seq) = {
            let reader = self.shared.reader();
            let rows = self.shared.read_rows(
                &reader,
                &self.id,
                self.next_seq,
                PAGE_ROWS,
                self.recorded_last_seq,
            )?;
            let max_row_seq = match rows.is_empty() {
                true => Some(self.shared.row_bounds(&reader, &self.id)?),
                false => None,
            };
            (rows, max_row_seq)
        };
        let mut check = SeqCheck::resume(path, &self.id, self.next_seq, self.batch_remaining);
        for row in rows {
            let record = check.accept(row)?;
            self.page.push_back(record);
        }
        let at_end = self.page.is_empty();
        if let Some(max_row_seq) = max_row_seq {
            // At the end: the row's last seq, read again with the highest
            // row in one statement, must cover every row.
            let (recorded, max) = max_row_seq;
            check_no_rows_past(path, &self.id, recorded, max)?;
            check.finish(self.seed_length, self.recorded_last_seq)?;
        }
        self.next_seq = check.next_seq;
        self.batch_remaining = check.batch_remaining;
        if at_end {
            self.finished = true;
            return Ok(None);
        }
        Ok(self.page.pop_front())
    }
}

impl Iterator for SqliteEvents {
    type Item = Result<EventRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event() {
            Ok(record) => record.map(Ok),
            Err(error) => {
                self.finished = true;
                self.page.clear();
                Some(Err(error))
            }
        }
    }
}

impl LogSink for SqliteSink {
    fn write(&mut self, id: &SessionId, records: &[EventRecord]) -> Result<(), StoreError> {
        debug_assert_eq!(id, &self.id, "a sink serves one session");
        for record in records {
            check_storable_record(record)?;
        }
        self.pending.extend_from_slice(records);
        Ok(())
    }

    fn sync(&mut self, durability: Durability) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let records = std::mem::take(&mut self.pending);
        let work = Work::Append {
            id: self.id.clone(),
            records,
        };
        self.shared
            .committer()?
            .submit(&self.shared.path, work, durability)
    }
}

impl Shared {
    fn reader(&self) -> MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The committer, or a refusal for a store opened read-only.
    fn committer(&self) -> Result<&Committer, StoreError> {
        self.committer.as_ref().ok_or_else(|| {
            StoreError::io(
                "write",
                &self.path,
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the store was opened read-only; open it for writing",
                ),
            )
        })
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
        let (decoded, _) = self.read_session_row(connection, id)?;
        Ok((decoded.header, decoded.vocabulary_errors))
    }

    fn read_decoded_header(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<DecodedHeader, StoreError> {
        Ok(self.read_session_row(connection, id)?.0)
    }

    /// The session row of `id`: its header, checked against its CRC and
    /// its id, and the last seq it records.
    fn read_session_row(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<(DecodedHeader, u64), StoreError> {
        // A version 1 database (read, never upgraded, by a reader) records
        // no last seq: its rows are taken as they are.
        let sql = match self.schema_version {
            1 => {
                "SELECT header_body, header_crc,
                   ifnull((SELECT max(seq) FROM events WHERE session_id = sessions.id), 0)
                 FROM sessions WHERE id = ?1"
            }
            _ => "SELECT header_body, header_crc, last_seq FROM sessions WHERE id = ?1",
        };
        let row: Option<(String, i64, i64)> = connection
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement
                    .query_row([id.as_str()], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .optional()
            })
            .map_err(sqlite_error("read a header", &self.path))?;
        let Some((body, stored_crc, last_seq)) = row else {
            return Err(StoreError::NotFound {
                id: id.to_string(),
                path: self.path.clone(),
            });
        };
        let computed = record_crc(id, body.as_bytes());
        if i64::from(computed) != stored_crc {
            return Err(self.corrupt(
                id,
                0,
                format!("header CRC mismatch (stored {stored_crc:08x}, computed {computed:08x})"),
            ));
        }
        let Ok(last_seq) = u64::try_from(last_seq) else {
            return Err(self.corrupt(
                id,
                0,
                format!("the session row records last seq {last_seq}"),
            ));
        };
        let line = encode_line(id, &body);
        let decoded = decode_header(line.trim_end_matches('\n').as_bytes())
            .map_err(|error| self.corrupt(id, 0, format!("header: {error}")))?;
        if &decoded.header.id != id {
            return Err(self.corrupt(
                id,
                0,
                format!("the header names session {}", decoded.header.id),
            ));
        }
        Ok((decoded, last_seq))
    }

    /// The rows of session `id` from `from_seq` through `to_seq`, at most
    /// `limit` of them.
    fn read_rows(
        &self,
        connection: &Connection,
        id: &SessionId,
        from_seq: u64,
        limit: i64,
        to_seq: u64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let from_seq = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let to_seq = i64::try_from(to_seq).unwrap_or(i64::MAX);
        let mut statement = connection
            .prepare_cached(
                "SELECT seq, ts, type, batch, body, crc FROM events
                 WHERE session_id = ?1 AND seq >= ?2 AND seq <= ?4 ORDER BY seq LIMIT ?3",
            )
            .map_err(sqlite_error("read events", &self.path))?;
        statement
            .query_map(params![id.as_str(), from_seq, limit, to_seq], |row| {
                Ok(EventRow {
                    seq: row.get(0)?,
                    ts: row.get(1)?,
                    event_type: row.get(2)?,
                    batch: row.get(3)?,
                    body: row.get(4)?,
                    crc: row.get(5)?,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(sqlite_error("read events", &self.path))
    }

    /// The last seq the session row of `id` records and the highest seq of
    /// its rows, read in one statement (so one snapshot of the database).
    fn row_bounds(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<(u64, Option<i64>), StoreError> {
        let sql = match self.schema_version {
            1 => {
                "SELECT (SELECT max(seq) FROM events WHERE session_id = ?1),
                        (SELECT max(seq) FROM events WHERE session_id = ?1)"
            }
            _ => {
                "SELECT (SELECT last_seq FROM sessions WHERE id = ?1),
                        (SELECT max(seq) FROM events WHERE session_id = ?1)"
            }
        };
        let (recorded, max): (Option<i64>, Option<i64>) = connection
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement.query_row([id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
            })
            .map_err(sqlite_error("read the last seq", &self.path))?;
        let Some(recorded) = recorded else {
            return Err(self.corrupt(id, 0, "the session row is gone".to_owned()));
        };
        let recorded = u64::try_from(recorded).map_err(|_| {
            self.corrupt(
                id,
                0,
                format!("the session row records last seq {recorded}"),
            )
        })?;
        Ok((recorded, max))
    }
}

/// The distinct session ids of `events`, found by seeking from one to the
/// next through the primary key (a lookup per session, not a scan of every
/// event).
fn event_owners(connection: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    let mut statement = connection
        .prepare_cached(
            "SELECT session_id FROM events WHERE session_id > ?1 ORDER BY session_id LIMIT 1",
        )
        .map_err(sqlite_error("list the sessions of events", path))?;
    let first: Option<String> = connection
        .query_row("SELECT min(session_id) FROM events", [], |row| row.get(0))
        .map_err(sqlite_error("list the sessions of events", path))?;
    let mut owners = Vec::new();
    let mut next = first;
    while let Some(owner) = next {
        next = statement
            .query_row([owner.as_str()], |row| row.get(0))
            .optional()
            .map_err(sqlite_error("list the sessions of events", path))?;
        owners.push(owner);
    }
    Ok(owners)
}

impl SqliteBulkCreate {
    /// Hands a verified session to the committer, which inserts it into the
    /// open transaction. Fails with the committer's error once an insert
    /// failed (the transaction is then rolled back).
    /// `header_body` is the header record's body as the source stored it,
    /// copied as it is; it must decode to `header`.
    pub(crate) fn add(
        &mut self,
        header: SessionHeader,
        header_body: String,
        events: Vec<EventRecord>,
    ) -> Result<(), StoreError> {
        check_storable(&header, &events)?;
        let session = NewSession {
            header,
            header_body,
            events,
        };
        let sent = match &self.sessions {
            Some(sessions) => sessions.send(BulkItem::Session(session)).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(self.finish())
        }
    }

    /// Commits every session added, durably under `Durability::Fsync`.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        if let Some(sessions) = &self.sessions {
            // A failed send means the committer already gave up: its error
            // is the outcome.
            let _ = sessions.send(BulkItem::Commit);
        }
        self.sessions = None;
        self.answered = true;
        self.outcome.recv().unwrap_or_else(|_| Err(self.stopped()))
    }

    /// The committer's error, once it stopped taking sessions.
    fn finish(&mut self) -> StoreError {
        self.sessions = None;
        self.answered = true;
        match self.outcome.recv() {
            Ok(Err(error)) => error,
            Ok(Ok(())) | Err(_) => self.stopped(),
        }
    }

    fn stopped(&self) -> StoreError {
        StoreError::io(
            "commit",
            &self.shared.path,
            io::Error::other("the commit thread of this database has stopped"),
        )
    }
}

impl Drop for SqliteBulkCreate {
    /// Rolls back what was not committed, and waits until the committer is
    /// done with it, so that the write lock is free again on return.
    fn drop(&mut self) {
        self.sessions = None;
        if !self.answered {
            let _ = self.outcome.recv();
        }
    }
}

impl Committer {
    fn start(connection: Connection, path: PathBuf, io: Io) -> Result<Committer, StoreError> {
        let (sender, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sessionlog-commit".to_owned())
            .spawn(move || run_committer(connection, &path, &io, &receiver))
            .map_err(|source| StoreError::io("start the commit thread", PathBuf::new(), source))?;
        Ok(Committer {
            requests: Some(sender),
            thread: Some(thread),
        })
    }

    /// Sends `work` and waits until it is committed (or refused).
    fn submit(&self, path: &Path, work: Work, durability: Durability) -> Result<(), StoreError> {
        let stopped = || {
            StoreError::io(
                "commit",
                path,
                io::Error::other("the commit thread of this database has stopped"),
            )
        };
        let (reply, answer) = mpsc::sync_channel(1);
        let request = Request {
            work,
            durability,
            reply,
        };
        self.send(path, Job::Write(request))?;
        answer.recv().map_err(|_| stopped())?
    }

    /// Hands `job` to the committer thread.
    fn send(&self, path: &Path, job: Job) -> Result<(), StoreError> {
        let stopped = || {
            StoreError::io(
                "commit",
                path,
                io::Error::other("the commit thread of this database has stopped"),
            )
        };
        let Some(requests) = &self.requests else {
            return Err(stopped());
        };
        requests.send(job).map_err(|_| stopped())
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The committer's loop: take every waiting request, commit them together;
/// run a bulk creation alone.
fn run_committer(connection: Connection, path: &Path, io: &Io, jobs: &mpsc::Receiver<Job>) {
    // The replies of a committed group go to a second thread, so that
    // waking its callers overlaps the next group's inserts and commit.
    let (acks, committed) = mpsc::channel::<Answered>();
    std::thread::scope(|scope| {
        let acknowledger = std::thread::Builder::new()
            .name("sessionlog-ack".to_owned())
            .spawn_scoped(scope, move || committed.into_iter().for_each(reply_all));
        let acknowledge = |group: Answered| match &acknowledger {
            Ok(_) => {
                if let Err(mpsc::SendError(group)) = acks.send(group) {
                    reply_all(group);
                }
            }
            Err(_) => reply_all(group),
        };
        commit_loop(connection, path, io, jobs, acknowledge);
        drop(acks);
    });
}

/// The requests of a committed group, each with its outcome.
type Answered = Vec<(Request, Result<(), StoreError>)>;

fn reply_all(group: Answered) {
    for (request, outcome) in group {
        let _ = request.reply.send(outcome);
    }
}

fn commit_loop(
    mut connection: Connection,
    path: &Path,
    io: &Io,
    jobs: &mpsc::Receiver<Job>,
    acknowledge: impl Fn(Answered),
) {
    let mut synchronous: Option<Durability> = None;
    let mut next = None;
    let mut log = WalGuard::new(path);
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        if let Some(refusal) = log.refusal(path) {
            refuse(job, &refusal);
            continue;
        }
        let first = match job {
            Job::Write(request) => request,
            Job::Bulk(bulk) => {
                let outcome = run_bulk(&mut connection, path, io, &mut synchronous, &bulk)
                    .and_then(|()| log.after_commit(&connection, path));
                let _ = bulk.reply.send(outcome);
                continue;
            }
        };
        let mut group = vec![first];
        while let Ok(job) = jobs.try_recv() {
            match job {
                Job::Write(request) => group.push(request),
                Job::Bulk(bulk) => {
                    next = Some(Job::Bulk(bulk));
                    break;
                }
            }
        }
        let mut outcomes = commit_group(&mut connection, path, io, &mut synchronous, &group);
        if outcomes.iter().any(Result::is_ok) {
            if let Err(error) = log.after_commit(&connection, path) {
                outcomes = outcomes
                    .into_iter()
                    .map(|outcome| outcome.and(Err(share_error(&error))))
                    .collect();
            }
        }
        acknowledge(group.into_iter().zip(outcomes).collect());
    }
}

/// Answers a job the committer no longer runs with `refusal`.
fn refuse(job: Job, refusal: &StoreError) {
    match job {
        Job::Write(request) => {
            let _ = request.reply.send(Err(share_error(refusal)));
        }
        Job::Bulk(bulk) => {
            let _ = bulk.reply.send(Err(share_error(refusal)));
        }
    }
}

/// Watches the write-ahead log the committer appends to. A log removed (or
/// renamed away) under a live connection goes on taking commits, but its
/// file is freed when the process ends, and with it every transaction
/// since the last checkpoint: so after each commit, before anyone is
/// acknowledged, the guard checks that the name still leads to the file it
/// holds open (two `stat` calls). When it does not, it copies what the log
/// holds into the database file (a checkpoint through the open
/// connection, which still reads the removed file) and stops the
/// committer: every later write is refused until the store is reopened.
#[derive(Debug)]
struct WalGuard {
    path: PathBuf,
    /// The log as first seen after a commit.
    held: Option<File>,
    /// Why writing stopped, once the log was found gone.
    lost: Option<String>,
}

impl WalGuard {
    fn new(database: &Path) -> WalGuard {
        WalGuard {
            path: wal_path(database),
            held: None,
            lost: None,
        }
    }

    /// The error every write gets once the log was found gone.
    fn refusal(&self, database: &Path) -> Option<StoreError> {
        let reason = self.lost.as_ref()?;
        Some(StoreError::io(
            "commit",
            database,
            io::Error::other(reason.clone()),
        ))
    }

    /// Checks the log after a commit: `Ok` when the commit is durable in
    /// the log or, the log being gone, was copied into the database file.
    fn after_commit(&mut self, connection: &Connection, database: &Path) -> Result<(), StoreError> {
        let cause = match self.in_place() {
            Ok(true) => return Ok(()),
            Ok(false) => "was removed or replaced".to_owned(),
            Err(error) => format!("cannot be checked ({error})"),
        };
        let wal = self.path.display();
        let saved = connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        });
        tracing::error!(wal = %wal, ?saved, "the write-ahead log {cause} under a live writer");
        let outcome = match saved {
            Ok((0, log, checkpointed)) if log == checkpointed => Ok(()),
            Ok((busy, log, checkpointed)) => Err(format!(
                "the checkpoint was incomplete (busy {busy}, {checkpointed} of {log} frames)"
            )),
            Err(error) => Err(error.to_string()),
        };
        let (lost, result) = match outcome {
            Ok(()) => (
                format!(
                    "the write-ahead log {wal} {cause} while this store was writing; every \
                     acknowledged transaction was copied into the database file, and this store \
                     writes nothing more: reopen it"
                ),
                Ok(()),
            ),
            Err(failure) => {
                let reason = format!(
                    "the write-ahead log {wal} {cause} while this store was writing, and copying \
                     what it held into the database file failed: {failure}; the transactions \
                     since the last checkpoint are not durable"
                );
                (
                    reason.clone(),
                    Err(StoreError::io("commit", database, io::Error::other(reason))),
                )
            }
        };
        self.lost = Some(lost);
        result
    }

    /// Whether the log's name still leads to the file first seen there,
    /// and that file is still linked.
    fn in_place(&mut self) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let named = match std::fs::symlink_metadata(&self.path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        };
        let Some(held) = &self.held else {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.path)?;
            let opened = file.metadata()?;
            self.held = Some(file);
            return Ok(opened.dev() == named.dev() && opened.ino() == named.ino());
        };
        let held = held.metadata()?;
        Ok(held.nlink() > 0 && held.dev() == named.dev() && held.ino() == named.ino())
    }
}

/// Inserts the sessions of `bulk` as they arrive, in one transaction,
/// committed when asked; any failure, or a caller gone without asking,
/// rolls everything back.
fn run_bulk(
    connection: &mut Connection,
    path: &Path,
    io: &Io,
    synchronous: &mut Option<Durability>,
    bulk: &BulkRequest,
) -> Result<(), StoreError> {
    set_synchronous(connection, path, synchronous, bulk.durability)?;
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite_error("begin a write", path))?;
    loop {
        match bulk.sessions.recv() {
            Ok(BulkItem::Session(session)) => insert_session(&transaction, path, &session)?,
            Ok(BulkItem::Commit) => break,
            Err(_) => {
                return Err(StoreError::io(
                    "commit",
                    path,
                    io::Error::other("the bulk creation was abandoned; nothing was written"),
                ))
            }
        }
    }
    let mut sqlite_failure = None;
    let committed = io.commit(path, || {
        transaction.commit().map_err(|error| {
            let text = error.to_string();
            sqlite_failure = Some(error);
            io::Error::other(text)
        })
    });
    match (committed, sqlite_failure) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(error)) => Err(sqlite_error("commit", path)(error)),
        (Err(error), None) => Err(StoreError::io("commit", path, error)),
    }
}

/// Sets `PRAGMA synchronous` for `durability` when it is not set already.
fn set_synchronous(
    connection: &Connection,
    path: &Path,
    synchronous: &mut Option<Durability>,
    durability: Durability,
) -> Result<(), StoreError> {
    if *synchronous == Some(durability) {
        return Ok(());
    }
    let level = match durability {
        Durability::Fsync => "FULL",
        Durability::Buffered => "OFF",
    };
    connection
        .pragma_update(None, "synchronous", level)
        .map_err(sqlite_error("set synchronous", path))?;
    *synchronous = Some(durability);
    Ok(())
}

/// Applies every request of `group` in one transaction and commits once.
/// Returns one outcome per request: a request that fails leaves no trace
/// and does not affect the others.
fn commit_group(
    connection: &mut Connection,
    path: &Path,
    io: &Io,
    synchronous: &mut Option<Durability>,
    group: &[Request],
) -> Vec<Result<(), StoreError>> {
    let all_fail = |error: StoreError| -> Vec<Result<(), StoreError>> {
        group.iter().map(|_| Err(share_error(&error))).collect()
    };
    let durability = if group.iter().any(|r| r.durability == Durability::Fsync) {
        Durability::Fsync
    } else {
        Durability::Buffered
    };
    if let Err(error) = set_synchronous(connection, path, synchronous, durability) {
        return all_fail(error);
    }
    let mut transaction = match begin_write(connection, path) {
        Ok(transaction) => transaction,
        Err(error) => return all_fail(error),
    };
    let outcomes = match apply_directly(&transaction, path, group) {
        Some(outcomes) => outcomes,
        None => {
            let _ = transaction.rollback();
            transaction = match begin_write(connection, path) {
                Ok(transaction) => transaction,
                Err(error) => return all_fail(error),
            };
            apply_in_savepoints(&mut transaction, path, group)
        }
    };
    if outcomes.iter().all(Result::is_err) {
        let _ = transaction.rollback();
        return outcomes;
    }
    let mut sqlite_failure = None;
    let committed = io.commit(path, || {
        transaction.commit().map_err(|error| {
            let text = error.to_string();
            sqlite_failure = Some(error);
            io::Error::other(text)
        })
    });
    let failure = match (committed, sqlite_failure) {
        (Ok(()), _) => return outcomes,
        (Err(_), Some(error)) => sqlite_error("commit", path)(error),
        (Err(error), None) => StoreError::io("commit", path, error),
    };
    outcomes
        .into_iter()
        .map(|outcome| outcome.and(Err(share_error(&failure))))
        .collect()
}

fn begin_write<'c>(
    connection: &'c mut Connection,
    path: &Path,
) -> Result<Transaction<'c>, StoreError> {
    connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite_error("begin a write", path))
}

/// The common case: every request applied straight into the transaction,
/// with no savepoint to open and release. A request that fails before
/// changing anything is simply left out. `None` when a request failed
/// after changing something, or took the transaction down with it: the
/// caller then starts over with [`apply_in_savepoints`].
fn apply_directly(
    transaction: &Transaction<'_>,
    path: &Path,
    group: &[Request],
) -> Option<Vec<Result<(), StoreError>>> {
    let mut outcomes = Vec::with_capacity(group.len());
    for request in group {
        let changes = transaction.total_changes();
        let outcome = apply_work(transaction, path, &request.work);
        let untouched = transaction.total_changes() == changes && !transaction.is_autocommit();
        if outcome.is_err() && !untouched {
            return None;
        }
        outcomes.push(outcome);
    }
    Some(outcomes)
}

/// Applies every request in its own savepoint, so that one failing
/// part-way through is rolled back alone.
fn apply_in_savepoints(
    transaction: &mut Transaction<'_>,
    path: &Path,
    group: &[Request],
) -> Vec<Result<(), StoreError>> {
    let mut outcomes = Vec::with_capacity(group.len());
    for request in group {
        let outcome = match transaction.savepoint() {
            Ok(mut savepoint) => match apply_work(&savepoint, path, &request.work) {
                Ok(()) => savepoint
                    .commit()
                    .map_err(sqlite_error("release a savepoint", path)),
                Err(error) => {
                    let _ = savepoint.rollback();
                    Err(error)
                }
            },
            Err(error) => Err(sqlite_error("open a savepoint", path)(error)),
        };
        outcomes.push(outcome);
    }
    outcomes
}

fn apply_work(connection: &Connection, path: &Path, work: &Work) -> Result<(), StoreError> {
    match work {
        Work::Create(sessions) => {
            for session in sessions {
                insert_session(connection, path, session)?;
            }
            Ok(())
        }
        Work::Append { id, records } => append_records(connection, path, id, records),
    }
}

fn insert_session(
    connection: &Connection,
    path: &Path,
    session: &NewSession,
) -> Result<(), StoreError> {
    let header = &session.header;
    let body = &session.header_body;
    let inserted = connection
        .prepare_cached(
            "INSERT INTO sessions (id, created_at, cwd, parent_session, seed_length,
               delegation_depth, sandbox_mode, approval_policy, header_body, header_crc,
               last_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                header.id.as_str(),
                sql_integer(header.created_at),
                header.cwd,
                header.parent_session.as_ref().map(SessionId::as_str),
                sql_integer(header.seed_length),
                sql_integer(header.delegation_depth),
                header.sandbox_mode.map(|mode| mode.as_str()),
                header.approval_policy.map(|policy| policy.as_str()),
                body,
                i64::from(record_crc(&header.id, body.as_bytes())),
                sql_integer(session.events.last().map_or(0, EventRecord::seq)),
            ])
        });
    match inserted {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(error, _))
            if error.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            return Err(StoreError::AlreadyExists {
                id: header.id.clone(),
                path: path.to_owned(),
            });
        }
        Err(error) => return Err(sqlite_error("insert a session", path)(error)),
    }
    insert_events(connection, path, &header.id, &session.events)
}

fn append_records(
    connection: &Connection,
    path: &Path,
    id: &SessionId,
    records: &[EventRecord],
) -> Result<(), StoreError> {
    let Some(first) = records.first() else {
        return Ok(());
    };
    // The session row's last seq moves in the same statement that checks
    // it: an append that does not follow it changes nothing.
    let Some(last) = records.last() else {
        return Ok(());
    };
    let moved = connection
        .prepare_cached("UPDATE sessions SET last_seq = ?1 WHERE id = ?2 AND last_seq = ?3")
        .and_then(|mut statement| {
            statement.execute(params![
                sql_integer(last.seq()),
                id.as_str(),
                sql_integer(first.seq() - 1),
            ])
        })
        .map_err(sqlite_error("record the last seq", path))?;
    if moved == 0 {
        let recorded: Option<i64> = connection
            .prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")
            .and_then(|mut statement| {
                statement
                    .query_row([id.as_str()], |row| row.get(0))
                    .optional()
            })
            .map_err(sqlite_error("read the last seq", path))?;
        let Some(recorded) = recorded else {
            return Err(StoreError::NotFound {
                id: id.to_string(),
                path: path.to_owned(),
            });
        };
        return Err(StoreError::Conflict {
            id: id.clone(),
            expected: first.seq(),
            actual: recorded.saturating_add(1).unsigned_abs(),
        });
    }
    insert_events(connection, path, id, records)
}

fn insert_events(
    connection: &Connection,
    path: &Path,
    id: &SessionId,
    records: &[EventRecord],
) -> Result<(), StoreError> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(sqlite_error("insert events", path))?;
    for record in records {
        statement
            .execute(params![
                id.as_str(),
                sql_integer(record.seq()),
                sql_integer(record.ts()),
                record.event_type(),
                record.batch().map(sql_integer),
                record.body(),
                i64::from(record_crc(id, record.body().as_bytes())),
            ])
            .map_err(sqlite_error("insert events", path))?;
    }
    Ok(())
}

fn sqlite_error<'a>(
    operation: &'static str,
    path: &'a Path,
) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| match is_damage(&source) {
        true => damaged(path, format!("{operation}: {source}")),
        false => StoreError::Sqlite {
            operation,
            path: path.to_owned(),
            source,
        },
    }
}

/// Whether a SQLite error can only come from a damaged file: SQLite found a
/// page or header it cannot read as a database, or a value of our own
/// tables is not what the schema stores there (text that is not UTF-8, a
/// number where text belongs): corruption, never an I/O error.
fn is_damage(error: &rusqlite::Error) -> bool {
    match error {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::Utf8Error(..) => true,
        _ => matches!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
        ),
    }
}

/// A copy of an error for each caller of a group that failed as a whole.
fn share_error(error: &StoreError) -> StoreError {
    match error {
        StoreError::Sqlite {
            operation,
            path,
            source: rusqlite::Error::SqliteFailure(code, message),
        } => StoreError::Sqlite {
            operation,
            path: path.clone(),
            source: rusqlite::Error::SqliteFailure(*code, message.clone()),
        },
        StoreError::Sqlite {
            operation, path, ..
        }
        | StoreError::Io {
            operation, path, ..
        } => StoreError::io(operation, path.clone(), io::Error::other(error.to_string())),
        other => StoreError::io(
            "commit",
            PathBuf::new(),
            io::Error::other(other.to_string()),
        ),
    }
}

/// Creates the database file 0600 when missing, so SQLite never creates it
/// with the process umask.
fn create_database_file(path: &Path) -> Result<(), StoreError> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match created {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(StoreError::io("create database", path, source)),
    }
}

/// How a connection opens the database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The committer's and a writing store's connections.
    ReadWrite,
    /// `SQLITE_OPEN_READ_ONLY`: reads through the WAL index, writes nothing.
    ReadOnly,
    /// Read-only and `immutable`: no WAL index, no locks. Only for a file
    /// nobody can be writing (see [`SqliteStore::open_read_only`]).
    Immutable,
}

fn open_connection(path: &Path, access: Access) -> Result<Connection, StoreError> {
    let base = OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let connection = match access {
        Access::ReadWrite => {
            Connection::open_with_flags(path, base | OpenFlags::SQLITE_OPEN_READ_WRITE)
        }
        Access::ReadOnly => {
            Connection::open_with_flags(path, base | OpenFlags::SQLITE_OPEN_READ_ONLY)
        }
        Access::Immutable => Connection::open_with_flags(
            immutable_uri(path),
            base | OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        ),
    }
    .map_err(sqlite_error("open", path))?;
    connection
        .busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite_error("set the busy timeout", path))?;
    Ok(connection)
}

/// `file:<path>?immutable=1`, the path percent-encoded.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/._-~".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Opens a read-only connection and checks that the file is a sessionlog
/// store this build reads: its connection and schema version.
fn open_and_identify_read_only(
    path: &Path,
    access: Access,
) -> Result<(Connection, i64), StoreError> {
    let connection = open_connection(path, access)?;
    match identify(&connection, path)? {
        Identity::Sessionlog(version) => Ok((connection, version)),
        Identity::Empty => Err(not_a_store(
            path,
            "an empty database, without the sessions and events tables".to_owned(),
        )),
        Identity::Foreign(reason) => Err(not_a_store(path, reason)),
        Identity::Newer(found) => Err(newer_schema(path, found)),
    }
}

/// What a database file holds, as read without changing it.
#[derive(Debug)]
enum Identity {
    /// No table and `user_version` 0: a new database.
    Empty,
    /// Our tables, at this schema version (at most [`SCHEMA_VERSION`]).
    Sessionlog(i64),
    /// A schema version above this build's.
    Newer(i64),
    /// Something else, described.
    Foreign(String),
}

fn identify(connection: &Connection, path: &Path) -> Result<Identity, StoreError> {
    let version = user_version(connection, path)?;
    if version > SCHEMA_VERSION {
        return Ok(Identity::Newer(version));
    }
    let tables: Vec<String> = connection
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
             ORDER BY name",
        )
        .and_then(|mut statement| {
            statement
                .query_map([], |row| row.get(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(sqlite_error("read the schema", path))?;
    let ours = ["events", "sessions"]
        .iter()
        .all(|table| tables.iter().any(|name| name == table));
    Ok(match (version, tables.is_empty()) {
        (0, true) => Identity::Empty,
        (1.., _) if ours => Identity::Sessionlog(version),
        (version, _) => Identity::Foreign(format!(
            "user_version {version}, tables {}",
            if tables.is_empty() {
                "none".to_owned()
            } else {
                tables.join(", ")
            }
        )),
    })
}

fn not_a_store(path: &Path, reason: String) -> StoreError {
    StoreError::NotAStore {
        path: path.to_owned(),
        reason,
    }
}

/// Whether a read-only open failed only because SQLite could not create or
/// write the WAL index beside the database (no write access, a full disk).
fn needs_write_access(error: &StoreError) -> bool {
    let StoreError::Sqlite { source, .. } = error else {
        return false;
    };
    let Some(code) = source.sqlite_error_code() else {
        return false;
    };
    matches!(
        code,
        rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::ReadOnly
            | rusqlite::ErrorCode::DiskFull
            | rusqlite::ErrorCode::SystemIoFailure
            | rusqlite::ErrorCode::PermissionDenied
    )
}

/// Whether `<database>-wal` exists and holds more than its header: frames
/// that an immutable read would not see.
fn write_ahead_log_has_frames(path: &Path) -> Result<bool, StoreError> {
    /// The WAL header's size; a log no longer than it holds no frame.
    const WAL_HEADER_BYTES: u64 = 32;
    let wal = wal_path(path);
    match std::fs::symlink_metadata(&wal) {
        Ok(metadata) => Ok(metadata.len() > WAL_HEADER_BYTES),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StoreError::io("inspect the write-ahead log", wal, source)),
    }
}

/// The write-ahead log SQLite keeps beside the database: `<database>-wal`.
fn wal_path(path: &Path) -> PathBuf {
    let mut text = path.as_os_str().to_owned();
    text.push("-wal");
    PathBuf::from(text)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction, or refuses a
/// newer one.
fn upgrade_schema(connection: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let found = user_version(connection, path)?;
    if found > SCHEMA_VERSION {
        return Err(newer_schema(path, found));
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Exclusive)
        .map_err(sqlite_error("begin the schema upgrade", path))?;
    let found = user_version(&transaction, path)?;
    if found > SCHEMA_VERSION {
        return Err(newer_schema(path, found));
    }
    for step in MIGRATION_STEPS
        .iter()
        .filter(|step| step.to_version > found)
    {
        transaction
            .execute_batch(step.sql)
            .map_err(sqlite_error("upgrade the schema", path))?;
        tracing::info!(path = %path.display(), version = step.to_version, "schema upgraded");
    }
    transaction
        .pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(sqlite_error("set the schema version", path))?;
    transaction
        .commit()
        .map_err(sqlite_error("commit the schema upgrade", path))
}

fn user_version(connection: &Connection, path: &Path) -> Result<i64, StoreError> {
    connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sqlite_error("read the schema version", path))
}

fn newer_schema(path: &Path, found: i64) -> StoreError {
    StoreError::NewerSchema {
        path: path.to_owned(),
        found,
        supported: SCHEMA_VERSION,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;

    use super::*;
    use crate::io::{FaultInjector, FaultPoint};
    use crate::store::tests::{header, id, note, ok, record};
    use crate::writer::WriterOptions;

    fn database(folder: &Path) -> PathBuf {
        folder.join("sessions.db")
    }

    fn raw(path: &Path) -> Connection {
        ok(Connection::open(path))
    }

    /// The sessions the v1 fixture holds: a root with a batch and a child.
    fn fill_v1_fixture(store: &SqliteStore) {
        let events = [
            record(1, "approval/policy", r#"{"policy":"never"}"#),
            record(2, "turn/start", r#"{"turnId":"t1"}"#),
            EventRecord::new(3, 1_700_000_000_103, Some(2), "note/test", r#"{"n":3}"#),
            record(4, "note/test", r#"{"n":4,"text":"é ☃"}"#),
        ];
        ok(store.create(&header("root"), &events, Durability::Fsync));
        let mut child = header("child");
        child.parent_session = Some(id("root"));
        child.seed_length = 2;
        child.delegation_depth = 1;
        child.approval_policy = Some(sessionlog_schema::ApprovalPolicy::Never);
        ok(store.create(&child, &events[..2], Durability::Fsync));
    }

    /// The fixture database of schema `version`, as that version wrote it.
    fn fixture_path(version: i64) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../tests/fixtures/sqlite/v{version}.db"))
    }

    /// Each session's recorded last seq, `id|last_seq`, in id order.
    fn last_seqs(path: &Path) -> Vec<String> {
        let connection = raw(path);
        let mut statement =
            ok(connection.prepare("SELECT id || '|' || last_seq FROM sessions ORDER BY id"));
        ok(ok(statement.query_map([], |row| row.get(0))).collect::<Result<_, _>>())
    }

    /// Every row of both tables, as text, in key order.
    fn dump(path: &Path) -> Vec<String> {
        let connection = raw(path);
        let mut rows = Vec::new();
        for sql in [
            "SELECT id || '|' || created_at || '|' || cwd || '|' || ifnull(parent_session, '-') || '|' || seed_length || '|' || delegation_depth || '|' || ifnull(sandbox_mode, '-') || '|' || ifnull(approval_policy, '-') || '|' || header_body || '|' || header_crc FROM sessions ORDER BY id",
            "SELECT session_id || '|' || seq || '|' || ts || '|' || type || '|' || ifnull(batch, '-') || '|' || body || '|' || crc FROM events ORDER BY session_id, seq",
        ] {
            let mut statement = ok(connection.prepare(sql));
            let texts: Vec<String> =
                ok(ok(statement.query_map([], |row| row.get(0))).collect::<Result<_, _>>());
            rows.extend(texts);
        }
        rows
    }

    /// A request of `work` for `commit_group`, which never answers it.
    fn request(work: Work) -> Request {
        Request {
            work,
            durability: Durability::Fsync,
            reply: mpsc::sync_channel(1).0,
        }
    }

    fn new_session(name: &str) -> NewSession {
        NewSession {
            header: header(name),
            header_body: header(name).to_body(),
            events: vec![record(1, "note/test", r#"{"n":1}"#)],
        }
    }

    fn append(name: &str, seq: u64) -> Work {
        Work::Append {
            id: id(name),
            records: vec![record(seq, "note/test", &format!(r#"{{"n":{seq}}}"#))],
        }
    }

    /// One group, committed directly: `requests` give their outcomes in
    /// order, and the rows the database then holds.
    fn commit_one_group(requests: Vec<Work>) -> (Vec<Result<(), StoreError>>, Vec<String>) {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        {
            let store = ok(SqliteStore::open(&path));
            ok(store.create(&header("a"), &[], Durability::Fsync));
            ok(store.create(&header("b"), &[], Durability::Fsync));
        }
        let mut connection = ok(open_connection(&path, Access::ReadWrite));
        let group: Vec<Request> = requests.into_iter().map(request).collect();
        let outcomes = commit_group(&mut connection, &path, &Io::default(), &mut None, &group);
        drop(connection);
        (outcomes, dump(&path))
    }

    fn events_of(rows: &[String], name: &str) -> usize {
        rows.iter()
            .filter(|row| row.starts_with(&format!("{name}|")) && row.contains("note/test"))
            .count()
    }

    /// Each outcome in a word: `ok`, `conflict N/M` (expected, actual) or
    /// `exists`.
    fn outcome_words(outcomes: &[Result<(), StoreError>]) -> Vec<String> {
        outcomes
            .iter()
            .map(|outcome| match outcome {
                Ok(()) => "ok".to_owned(),
                Err(StoreError::Conflict {
                    expected, actual, ..
                }) => format!("conflict {expected}/{actual}"),
                Err(StoreError::AlreadyExists { .. }) => "exists".to_owned(),
                Err(other) => format!("unexpected: {other}"),
            })
            .collect()
    }

    #[test]
    fn a_request_refused_before_writing_leaves_the_rest_of_its_group() {
        let (outcomes, rows) = commit_one_group(vec![
            append("a", 1),
            append("b", 5),
            append("a", 2),
            Work::Create(vec![new_session("a")]),
            Work::Create(vec![new_session("c")]),
        ]);
        assert_eq!(
            outcome_words(&outcomes),
            ["ok", "conflict 5/1", "ok", "exists", "ok"]
        );
        let counts = ["a", "b", "c"].map(|name| events_of(&rows, name));
        assert_eq!(counts, [2, 0, 1], "{rows:#?}");
    }

    #[test]
    fn a_request_failing_after_writing_is_rolled_back_alone() {
        // The creation of d is inserted before that of a fails: the group
        // is applied again with a savepoint per request.
        let (outcomes, rows) = commit_one_group(vec![
            append("a", 1),
            Work::Create(vec![new_session("d"), new_session("a")]),
            append("b", 1),
            Work::Create(vec![new_session("c")]),
        ]);
        assert_eq!(outcome_words(&outcomes), ["ok", "exists", "ok", "ok"]);
        assert!(
            !rows.iter().any(|row| row.starts_with("d|")),
            "nothing of the failed creation remains: {rows:#?}"
        );
        let counts = ["a", "b", "c"].map(|name| events_of(&rows, name));
        assert_eq!(counts, [1, 1, 1], "{rows:#?}");
    }

    #[test]
    fn current_fixture_is_what_the_generator_writes() {
        let folder = ok(tempfile::tempdir());
        let generated = database(folder.path());
        fill_v1_fixture(&ok(SqliteStore::open(&generated)));
        let fixture = fixture_path(SCHEMA_VERSION);
        if std::env::var_os("SESSIONLOG_WRITE_FIXTURES").is_some() {
            ok(std::fs::create_dir_all(
                fixture.parent().unwrap_or(Path::new(".")),
            ));
            let _ = std::fs::remove_file(&fixture);
            ok(raw(&generated).execute_batch(&format!(
                "VACUUM INTO '{}'",
                fixture.display().to_string().replace('\'', "''")
            )));
        }
        assert_eq!(dump(&fixture), dump(&generated));
        assert_eq!(last_seqs(&fixture), last_seqs(&generated));
        assert_eq!(ok(user_version(&raw(&fixture), &fixture)), SCHEMA_VERSION);
    }

    #[test]
    fn every_fixture_holds_the_same_sessions() {
        let current = dump(&fixture_path(SCHEMA_VERSION));
        for version in 1..SCHEMA_VERSION {
            assert_eq!(dump(&fixture_path(version)), current, "v{version}.db");
        }
    }

    /// Opens a copy of the fixture of `version` for writing (which brings
    /// it to the current schema), checks what it reads, and appends.
    fn check_fixture_upgrade(version: i64) {
        let folder = ok(tempfile::tempdir());
        let copy = database(folder.path());
        ok(std::fs::copy(fixture_path(version), &copy));
        assert_eq!(ok(user_version(&raw(&copy), &copy)), version);
        let store = ok(SqliteStore::open(&copy));
        assert_eq!(ok(user_version(&raw(&copy), &copy)), SCHEMA_VERSION);
        assert_eq!(last_seqs(&copy), ["child|2", "root|4"]);
        let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
        assert_eq!(ids, ["child", "root"]);
        let root = ok(store.snapshot(&id("root")));
        assert_eq!(root.events.len(), 4);
        assert_eq!(root.events[2].batch(), Some(2));
        assert_eq!(ok(store.snapshot(&id("child"))).header.seed_length, 2);
        let mut writer = ok(store.open_writer(&id("root"), WriterOptions::default()));
        assert_eq!(ok(writer.append(note("new"), Some(5))).get(), 5);
        assert_eq!(last_seqs(&copy), ["child|2", "root|5"]);
    }

    #[test]
    fn v1_fixture_is_upgraded_recording_each_sessions_last_seq() {
        check_fixture_upgrade(1);
    }

    #[test]
    fn v2_fixture_opens_reads_and_accepts_appends() {
        check_fixture_upgrade(2);
    }

    #[test]
    fn an_older_fixture_is_read_without_upgrade_when_opened_read_only() {
        let folder = ok(tempfile::tempdir());
        let copy = database(folder.path());
        ok(std::fs::copy(fixture_path(1), &copy));
        let before = ok(std::fs::read(&copy));
        let store = ok(SqliteStore::open_read_only(&copy));
        assert_eq!(ok(store.snapshot(&id("root"))).events.len(), 4);
        let streamed: Vec<EventRecord> = ok(ok(store.events(&id("child"))).collect());
        assert_eq!(streamed.len(), 2);
        drop(store);
        assert_eq!(ok(std::fs::read(&copy)), before, "not a byte changed");
    }

    #[test]
    fn empty_database_is_upgraded_to_the_current_version_in_one_step() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        drop(raw(&path));
        assert_eq!(ok(user_version(&raw(&path), &path)), 0);
        drop(ok(SqliteStore::open(&path)));
        assert_eq!(ok(user_version(&raw(&path), &path)), SCHEMA_VERSION);
        assert_eq!(
            MIGRATION_STEPS.last().map(|step| step.to_version),
            Some(SCHEMA_VERSION)
        );
    }

    /// Every byte of the database and of the files beside it.
    fn folder_bytes(folder: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = ok(std::fs::read_dir(folder))
            .map(|entry| {
                let path = ok(entry).path();
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                (
                    name.unwrap_or_default(),
                    std::fs::read(&path).unwrap_or_default(),
                )
            })
            .collect();
        files.sort();
        files
    }

    fn journal_mode(path: &Path) -> String {
        ok(raw(path).pragma_query_value(None, "journal_mode", |row| row.get(0)))
    }

    #[test]
    fn newer_schema_is_refused_naming_both_versions_before_anything_changes() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        {
            let connection = raw(&path);
            ok(connection.execute_batch("CREATE TABLE future (x INTEGER)"));
            ok(connection.pragma_update(None, "user_version", 99));
        }
        let before = folder_bytes(folder.path());
        for refused in [SqliteStore::open(&path), SqliteStore::open_read_only(&path)] {
            let Err(error) = refused else {
                panic!("a version 99 database was opened");
            };
            assert!(
                matches!(
                    error,
                    StoreError::NewerSchema {
                        found: 99,
                        supported: SCHEMA_VERSION,
                        ..
                    }
                ),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(
                message.contains("99") && message.contains(&format!(" {SCHEMA_VERSION}")),
                "{message}"
            );
        }
        assert_eq!(folder_bytes(folder.path()), before, "nothing changed");
        assert_eq!(journal_mode(&path), "delete", "not switched to WAL");
    }

    #[test]
    fn another_applications_database_is_not_a_store_and_stays_untouched() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        ok(raw(&path)
            .execute_batch("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('x')"));
        let before = folder_bytes(folder.path());
        for refused in [SqliteStore::open(&path), SqliteStore::open_read_only(&path)] {
            assert!(
                matches!(&refused, Err(StoreError::NotAStore { reason, .. }) if reason.contains("notes")),
                "{refused:?}"
            );
        }
        assert_eq!(folder_bytes(folder.path()), before, "nothing changed");
        assert_eq!(journal_mode(&path), "delete");
    }

    #[test]
    fn a_reader_refuses_an_empty_file_and_a_missing_one_and_creates_nothing() {
        let folder = ok(tempfile::tempdir());
        let empty = database(folder.path());
        ok(std::fs::write(&empty, b""));
        let refused = SqliteStore::open_read_only(&empty);
        assert!(
            matches!(refused, Err(StoreError::NotAStore { .. })),
            "{refused:?}"
        );
        let missing = folder.path().join("missing.db");
        let refused = SqliteStore::open_read_only(&missing);
        assert!(
            matches!(refused, Err(StoreError::Sqlite { .. })),
            "{refused:?}"
        );
        assert_eq!(
            folder_bytes(folder.path()),
            [("sessions.db".to_owned(), Vec::new())],
            "the empty file stays empty and nothing is created"
        );
    }

    #[test]
    fn a_read_only_store_reads_without_changing_a_byte_and_refuses_writes() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        {
            let store = store_with_events(folder.path(), 3);
            ok(store.create(&header("b"), &[], Durability::Fsync));
        }
        let before = folder_bytes(folder.path());
        let store = ok(SqliteStore::open_read_only(&path));
        assert!(store.is_read_only());
        let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 3);
        assert!(ok(store.audit(true)).damage.is_empty());
        let refused = store.create(&header("c"), &[], Durability::Fsync);
        assert!(matches!(refused, Err(StoreError::Io { .. })), "{refused:?}");
        let refused = store.open_writer(&id("a"), WriterOptions::default());
        assert!(matches!(refused, Err(StoreError::Io { .. })), "{refused:?}");
        drop(store);
        let after: Vec<(String, Vec<u8>)> = folder_bytes(folder.path())
            .into_iter()
            .filter(|(name, _)| !name.ends_with("-shm") && !name.ends_with("-wal"))
            .collect();
        let before: Vec<(String, Vec<u8>)> = before
            .into_iter()
            .filter(|(name, _)| !name.ends_with("-shm") && !name.ends_with("-wal"))
            .collect();
        assert_eq!(after, before, "the database file is unchanged");
    }

    #[test]
    fn an_immutable_read_sees_the_whole_database() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        drop(store_with_events(folder.path(), 3));
        let (connection, version) = ok(open_and_identify_read_only(&path, Access::Immutable));
        assert_eq!(version, SCHEMA_VERSION);
        let count: i64 =
            ok(connection.query_row("SELECT count(*) FROM events", [], |row| row.get(0)));
        assert_eq!(count, 3);
        assert!(immutable_uri(Path::new("/a b/c%?#.db")).starts_with("file:/a%20b/c%25%3F%23.db?"));
    }

    #[test]
    fn rows_lost_from_the_end_of_a_session_are_corruption() {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 3);
        ok(raw(store.path()).execute("DELETE FROM events WHERE seq = 3", []));
        assert_corrupt_at(store.snapshot(&id("a")), 3, "are missing");
        assert_eq!(streamed_until_corruption(&store), 2);
    }

    #[test]
    fn rows_past_the_recorded_last_seq_are_corruption() {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 3);
        ok(raw(store.path()).execute("UPDATE sessions SET last_seq = 2", []));
        assert_corrupt_at(store.snapshot(&id("a")), 3, "rows run to seq 3");
        streamed_until_corruption(&store);
    }

    #[test]
    fn an_invalid_session_row_or_orphan_events_are_corruption_for_every_reader() {
        for damage in [
            "UPDATE sessions SET id = 'a/b' WHERE id = 'b'",
            "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
               SELECT 'gone', seq, ts, type, batch, body, crc FROM events WHERE session_id = 'a'",
        ] {
            let folder = ok(tempfile::tempdir());
            let store = store_with_events(folder.path(), 2);
            ok(store.create(&header("b"), &[], Durability::Fsync));
            ok(raw(store.path()).execute_batch(&format!("PRAGMA foreign_keys = OFF; {damage}")));
            let ids = store.ids();
            assert!(
                matches!(&ids, Err(error) if error.class() == crate::ErrorClass::Corrupt),
                "{damage}: {ids:?}"
            );
            assert!(store.list().is_err(), "{damage}");
            let audit = ok(store.audit(true));
            assert_eq!(audit.damage.len(), 1, "{damage}: {:?}", audit.damage);
            assert!(
                audit.ids.contains(&id("a")),
                "the valid sessions stay listed"
            );
        }
    }

    #[test]
    fn sqlite_reports_of_a_damaged_file_are_corruption() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        drop(store_with_events(folder.path(), 200));
        let length = ok(std::fs::metadata(&path)).len();
        let file = ok(std::fs::OpenOptions::new().write(true).open(&path));
        ok(file.set_len(length / 2));
        drop(file);
        let store = SqliteStore::open_read_only(&path).and_then(|store| store.snapshot(&id("a")));
        assert!(
            matches!(&store, Err(error) if error.class() == crate::ErrorClass::Corrupt),
            "{store:?}"
        );
    }

    #[test]
    fn a_lock_folder_replaced_by_a_symlink_is_refused() {
        let folder = ok(tempfile::tempdir());
        let elsewhere = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        ok(store.create(&header("a"), &[], Durability::Fsync));
        ok(std::os::unix::fs::symlink(
            elsewhere.path(),
            folder.path().join("sessions.db.locks"),
        ));
        let refused = store.open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(
                &refused,
                Err(StoreError::Io {
                    operation: "open lock folder",
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(
            ok(std::fs::read_dir(elsewhere.path())).count(),
            0,
            "nothing lands there"
        );
    }

    #[test]
    fn a_write_ahead_log_removed_under_a_writer_is_saved_then_the_writer_stops() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        let store = ok(SqliteStore::open(&path));
        ok(store.create(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        ok(writer.append(note("before"), Some(1)));
        ok(std::fs::remove_file(wal_path(&path)));
        // The next commit finds the log gone: what it holds, this commit
        // included, is copied into the database file before the answer.
        let saved = writer.append(note("detected"), Some(2));
        assert_eq!(ok(saved).get(), 2);
        let refused = writer.append(note("after"), Some(3));
        assert!(
            matches!(&refused, Err(StoreError::Io { source, .. }) if source.to_string().contains("was removed")),
            "{refused:?}"
        );
        assert!(writer.is_poisoned());
        // What a kill -9 leaves: the database file alone (the removed log
        // is freed with the process).
        let survivor = folder.path().join("survivor.db");
        ok(std::fs::copy(&path, &survivor));
        let events = ok(ok(SqliteStore::open_read_only(&survivor)).snapshot(&id("a"))).events;
        assert_eq!(events.len(), 2, "every acknowledged event survives");
    }

    #[test]
    fn database_and_lock_files_are_private() {
        let folder = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        ok(store.create(&header("a"), &[], Durability::Fsync));
        let _writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let mode = |path: &Path| ok(std::fs::metadata(path)).permissions().mode() & 0o777;
        assert_eq!(mode(store.path()), 0o600);
        assert_eq!(mode(&store.lock_path(&id("a"))), 0o600);
        assert_eq!(mode(&folder.path().join("sessions.db.locks")), 0o700);
    }

    #[test]
    fn wal_mode_is_on() {
        let folder = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        let mode: String =
            ok(raw(store.path()).pragma_query_value(None, "journal_mode", |row| row.get(0)));
        assert_eq!(mode, "wal");
    }

    fn store_with_events(folder: &Path, count: u64) -> SqliteStore {
        let store = ok(SqliteStore::open(&database(folder)));
        let events: Vec<EventRecord> = (1..=count)
            .map(|seq| record(seq, "note/test", "{}"))
            .collect();
        ok(store.create(&header("a"), &events, Durability::Fsync));
        store
    }

    /// Streams session `a` and checks that the stream ends with
    /// corruption; returns how many events came before it.
    fn streamed_until_corruption(store: &SqliteStore) -> usize {
        let streamed: Vec<Result<EventRecord, StoreError>> = ok(store.events(&id("a"))).collect();
        assert!(
            matches!(streamed.last(), Some(Err(StoreError::Corrupt { .. }))),
            "{streamed:?}"
        );
        streamed.len() - 1
    }

    fn assert_corrupt_at(result: Result<Snapshot, StoreError>, seq: u64, reason: &str) {
        let Err(StoreError::Corrupt { corruption, .. }) = &result else {
            panic!("expected corruption, got {result:?}");
        };
        let expected = format!("session a, seq {seq}:");
        assert!(
            corruption.reason.starts_with(&expected) && corruption.reason.contains(reason),
            "{}",
            corruption.reason
        );
    }

    #[test]
    fn altered_body_is_corruption_naming_session_and_seq() {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 3);
        ok(raw(store.path()).execute(
            "UPDATE events SET body = replace(body, '{}', '{\"x\":1}') WHERE seq = 2",
            [],
        ));
        assert_corrupt_at(store.snapshot(&id("a")), 2, "CRC mismatch");
        streamed_until_corruption(&store);
        let writer = store.open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(writer, Err(StoreError::Corrupt { .. })),
            "{writer:?}"
        );
    }

    #[test]
    fn seq_gap_is_corruption_naming_session_and_seq() {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 3);
        ok(raw(store.path()).execute("DELETE FROM events WHERE seq = 2", []));
        assert_corrupt_at(store.snapshot(&id("a")), 2, "not contiguous");
    }

    #[test]
    fn columns_that_disagree_with_the_body_are_corruption() {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 2);
        ok(raw(store.path()).execute("UPDATE events SET type = 'turn/start' WHERE seq = 1", []));
        assert_corrupt_at(store.snapshot(&id("a")), 1, "disagree");
    }

    #[test]
    fn unfinished_batch_is_corruption() {
        let folder = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        let events = [
            EventRecord::new(1, 5, Some(2), "note/test", "{}"),
            EventRecord::new(2, 5, None, "note/test", "{}"),
        ];
        ok(store.create(&header("a"), &events, Durability::Fsync));
        ok(raw(store.path()).execute("DELETE FROM events WHERE seq = 2", []));
        assert_corrupt_at(store.snapshot(&id("a")), 2, "batch");
    }

    #[test]
    fn values_sqlite_cannot_hold_are_refused_before_writing() {
        let folder = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        let mut huge = header("a");
        huge.created_at = u64::MAX;
        let refused = store.create(&huge, &[], Durability::Fsync);
        assert!(
            matches!(refused, Err(StoreError::InvalidEvent(_))),
            "{refused:?}"
        );
        assert!(!ok(store.contains(&id("a"))));
    }

    /// Fails every commit while armed.
    #[derive(Debug, Default)]
    struct FailCommits {
        armed: AtomicBool,
    }

    impl FaultInjector for FailCommits {
        fn before(&self, point: FaultPoint, _path: &Path) -> io::Result<()> {
            if point == FaultPoint::Commit && self.armed.load(Ordering::SeqCst) {
                return Err(io::Error::other("injected commit failure"));
            }
            Ok(())
        }
    }

    #[test]
    fn failed_commit_poisons_the_writer_and_writes_nothing() {
        let folder = ok(tempfile::tempdir());
        let faults = Arc::new(FailCommits::default());
        let store = ok(SqliteStore::open_with_io(
            &database(folder.path()),
            Io::with_faults(faults.clone()),
        ));
        ok(store.create(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        ok(writer.append(note("kept"), Some(1)));
        faults.armed.store(true, Ordering::SeqCst);
        let failed = writer.append(note("lost"), Some(2));
        assert!(matches!(failed, Err(StoreError::Io { .. })), "{failed:?}");
        faults.armed.store(false, Ordering::SeqCst);
        let refused = writer.append(note("after"), None);
        assert!(
            matches!(refused, Err(StoreError::Poisoned { .. })),
            "{refused:?}"
        );
        drop(writer);
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
        let mut reopened = ok(store.open_writer(&id("a"), WriterOptions::default()));
        assert_eq!(ok(reopened.append(note("again"), Some(2))).get(), 2);
    }

    #[test]
    fn a_writer_in_another_store_handle_is_locked_out() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        let first = ok(SqliteStore::open(&path));
        ok(first.create(&header("a"), &[], Durability::Fsync));
        let _writer = ok(first.open_writer(&id("a"), WriterOptions::default()));
        let second = ok(SqliteStore::open(&path));
        let locked = second.open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(locked, Err(StoreError::Locked { .. })),
            "{locked:?}"
        );
    }

    #[test]
    fn sixty_four_threads_appending_keep_every_acknowledged_event_exactly_once() {
        const THREADS: usize = 64;
        const EVENTS: usize = 40;
        let folder = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        for thread in 0..THREADS {
            ok(store.create(&header(&format!("s{thread}")), &[], Durability::Fsync));
        }
        let start = Barrier::new(THREADS);
        let acknowledged: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let (store, start) = (&store, &start);
                    scope.spawn(move || {
                        let session = id(&format!("s{thread}"));
                        let mut writer = ok(store.open_writer(&session, WriterOptions::default()));
                        start.wait();
                        (0..EVENTS)
                            .map(|n| ok(writer.append(note(&format!("{thread}/{n}")), None)).get())
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| panic!("an appender panicked"))
                })
                .collect()
        });
        for (thread, seqs) in acknowledged.iter().enumerate() {
            assert_eq!(*seqs, (1..=EVENTS as u64).collect::<Vec<_>>());
            let events = ok(store.snapshot(&id(&format!("s{thread}")))).events;
            assert_eq!(events.len(), EVENTS, "session s{thread}");
            for (n, record) in events.iter().enumerate() {
                assert_eq!(record.seq(), n as u64 + 1);
                let expected = format!("{{\"text\":\"{thread}/{n}\"}}");
                assert_eq!(record.data(), expected);
            }
        }
    }
}
