//! The SQLite backend: one database file holding many sessions, with the
//! same API and the same records as the JSONL backend.
//!
//! # Schema (version 1, `PRAGMA user_version = 1`)
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
//!     header_crc       INTEGER NOT NULL -- CRC-32 of id + header_body
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
//! is corruption, reported with the session and seq. Integers are SQLite's
//! signed 64 bits: a time or count above 2^63 - 1 is refused on write.
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
    decode_event, decode_header, encode_line, record_crc, Corruption, DecodedHeader, EventRecord,
    HeaderVocabularyError, Position, SessionHeader, SessionId,
};

use crate::io::Io;
use crate::jsonl::{check_new_session, ListEntry};
use crate::reader::Snapshot;
use crate::writer::{Durability, LogSink, SessionWriter, WriterOptions};
use crate::StoreError;

/// The schema version this build reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

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
const MIGRATION_STEPS: &[MigrationStep] = &[MigrationStep {
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
}];

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    locks: PathBuf,
    reader: Mutex<Connection>,
    committer: Committer,
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
    /// Opens the database at `path`, creating it (0600) when missing, and
    /// brings its schema to [`SCHEMA_VERSION`]. A newer schema is refused
    /// with `StoreError::NewerSchema`.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with_io(path, Io::default())
    }

    /// [`SqliteStore::open`] with every commit going through `io`.
    pub fn open_with_io(path: &Path, io: Io) -> Result<SqliteStore, StoreError> {
        create_database_file(path)?;
        let mut writer = open_connection(path)?;
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
        let reader = open_connection(path)?;
        let committer = Committer::start(writer, path.to_owned(), io)?;
        let file_name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sessions.db".to_owned());
        let locks = path.with_file_name(format!("{file_name}.locks"));
        Ok(SqliteStore {
            shared: Arc::new(Shared {
                path: path.to_owned(),
                locks,
                reader: Mutex::new(reader),
                committer,
            }),
        })
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
        check_representable(header, events)?;
        if self.contains(&header.id)? {
            return Err(self.shared.already_exists(&header.id));
        }
        let session = NewSession {
            header: header.clone(),
            header_body: header.to_body(),
            events: events.to_vec(),
        };
        self.shared
            .committer
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
            check_representable(&header, &events)?;
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
            .committer
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
        self.shared.committer.send(&self.shared.path, job)?;
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

    /// The events of session `id` from `from_seq` on, streamed page by page.
    pub fn events_from(&self, id: &SessionId, from_seq: u64) -> Result<SqliteEvents, StoreError> {
        let (header, _) = self.header(id)?;
        let from_seq = from_seq.max(1);
        Ok(SqliteEvents {
            shared: Arc::clone(&self.shared),
            id: id.clone(),
            seed_length: header.seed_length,
            next_seq: from_seq,
            batch_remaining: 0,
            page: VecDeque::new(),
            finished: false,
        })
    }

    /// The whole session `id`, read in one read transaction. A SQLite
    /// session never has a torn tail: its transactions are atomic.
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        let mut reader = self.shared.reader();
        let transaction = reader
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(sqlite_error("begin a read", &self.shared.path))?;
        let decoded = self.shared.read_decoded_header(&transaction, id)?;
        let header = decoded.header;
        let rows = self.shared.read_rows(&transaction, id, 1, i64::MAX)?;
        drop(transaction);
        drop(reader);
        let mut check = SeqCheck::new(&self.shared, id, 1);
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            events.push(check.accept(row)?);
        }
        check.finish(header.seed_length)?;
        Ok(Snapshot {
            header,
            header_body: decoded.body,
            header_vocabulary_errors: decoded.vocabulary_errors,
            events,
            torn_tail: None,
        })
    }

    /// The ids of every session, sorted. Rows whose id is not a valid
    /// session id are skipped, as the JSONL backend skips such file names.
    pub fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        let reader = self.shared.reader();
        let mut statement = reader
            .prepare_cached("SELECT id FROM sessions ORDER BY id")
            .map_err(sqlite_error("list sessions", &self.shared.path))?;
        let texts = statement
            .query_map([], |row| row.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
            .map_err(sqlite_error("list sessions", &self.shared.path))?;
        let mut ids: Vec<SessionId> = texts
            .iter()
            .filter_map(|text| SessionId::parse(text).ok())
            .collect();
        ids.sort();
        Ok(ids)
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
        for record in self.events(id)? {
            let record = record?;
            state.apply(&record).map_err(|violation| StoreError::Rule {
                path: self.shared.session_path(id),
                violation,
            })?;
            if let Some(events) = &mut events {
                events.push(record);
            }
        }
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

    fn lock_session(&self, id: &SessionId) -> Result<File, StoreError> {
        let folder = &self.shared.locks;
        match std::fs::DirBuilder::new().mode(0o700).create(folder) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(StoreError::io("create lock folder", folder, source)),
        }
        let path = self.lock_path(id);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
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
        let rows = {
            let reader = self.shared.reader();
            self.shared
                .read_rows(&reader, &self.id, self.next_seq, PAGE_ROWS)?
        };
        let mut check = SeqCheck {
            shared: &self.shared,
            id: &self.id,
            next_seq: self.next_seq,
            batch_remaining: self.batch_remaining,
        };
        for row in rows {
            let record = check.accept(row)?;
            self.page.push_back(record);
        }
        let at_end = self.page.is_empty();
        if at_end {
            check.finish(self.seed_length)?;
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
            check_representable_record(record)?;
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
            .committer
            .submit(&self.shared.path, work, durability)
    }
}

impl Shared {
    fn reader(&self) -> MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
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
        StoreError::Corrupt {
            path: self.path.clone(),
            corruption: Corruption {
                position: Position {
                    line: seq.saturating_add(1),
                    offset: 0,
                },
                reason: format!("session {id}, seq {seq}: {reason}"),
            },
        }
    }

    fn read_header(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<HeaderVocabularyError>), StoreError> {
        let decoded = self.read_decoded_header(connection, id)?;
        Ok((decoded.header, decoded.vocabulary_errors))
    }

    fn read_decoded_header(
        &self,
        connection: &Connection,
        id: &SessionId,
    ) -> Result<DecodedHeader, StoreError> {
        let row: Option<(String, i64)> = connection
            .prepare_cached("SELECT header_body, header_crc FROM sessions WHERE id = ?1")
            .and_then(|mut statement| {
                statement
                    .query_row([id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(sqlite_error("read a header", &self.path))?;
        let Some((body, stored_crc)) = row else {
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
        Ok(decoded)
    }

    fn read_rows(
        &self,
        connection: &Connection,
        id: &SessionId,
        from_seq: u64,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let from_seq = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let mut statement = connection
            .prepare_cached(
                "SELECT seq, ts, type, batch, body, crc FROM events
                 WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            )
            .map_err(sqlite_error("read events", &self.path))?;
        statement
            .query_map(params![id.as_str(), from_seq, limit], |row| {
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
}

/// One row of `events`, as stored.
#[derive(Debug)]
struct EventRow {
    seq: i64,
    ts: i64,
    event_type: String,
    batch: Option<i64>,
    body: String,
    crc: i64,
}

/// Checks rows in order: each must be the next seq, intact, agree with its
/// columns, and batches must finish.
struct SeqCheck<'a> {
    shared: &'a Shared,
    id: &'a SessionId,
    next_seq: u64,
    batch_remaining: u64,
}

impl<'a> SeqCheck<'a> {
    fn new(shared: &'a Shared, id: &'a SessionId, next_seq: u64) -> Self {
        SeqCheck {
            shared,
            id,
            next_seq,
            batch_remaining: 0,
        }
    }

    fn accept(&mut self, row: EventRow) -> Result<EventRecord, StoreError> {
        let expected = self.next_seq;
        let corrupt = |reason: String| self.shared.corrupt(self.id, expected, reason);
        if u64::try_from(row.seq).ok() != Some(expected) {
            return Err(corrupt(format!(
                "seqs are not contiguous: the next row has seq {}",
                row.seq
            )));
        }
        let computed = record_crc(self.id, row.body.as_bytes());
        if i64::from(computed) != row.crc {
            return Err(corrupt(format!(
                "CRC mismatch (stored {:08x}, computed {computed:08x})",
                row.crc
            )));
        }
        let line = encode_line(self.id, &row.body);
        let record = decode_event(self.id, line.trim_end_matches('\n').as_bytes())
            .map_err(|error| corrupt(format!("the body does not decode: {error}")))?;
        let columns_agree = record.seq() == expected
            && i64::try_from(record.ts()).ok() == Some(row.ts)
            && record.event_type() == row.event_type
            && record.batch().map(i64::try_from).transpose().ok() == Some(row.batch);
        if !columns_agree {
            return Err(corrupt(
                "the columns seq, ts, type or batch disagree with the body".to_owned(),
            ));
        }
        match (record.batch(), self.batch_remaining) {
            (Some(_), remaining) if remaining > 0 => {
                return Err(corrupt(format!(
                    "a new batch starts while {remaining} records of the previous one are missing"
                )));
            }
            (Some(count), _) => self.batch_remaining = count - 1,
            (None, remaining) => self.batch_remaining = remaining.saturating_sub(1),
        }
        self.next_seq += 1;
        Ok(record)
    }

    fn finish(&self, seed_length: u64) -> Result<(), StoreError> {
        if self.batch_remaining > 0 {
            return Err(self.shared.corrupt(
                self.id,
                self.next_seq,
                format!(
                    "the last batch is missing its last {} records",
                    self.batch_remaining
                ),
            ));
        }
        let last_seq = self.next_seq - 1;
        if seed_length > last_seq {
            return Err(self.shared.corrupt(
                self.id,
                0,
                format!("seedLength {seed_length} is above the {last_seq} events stored"),
            ));
        }
        Ok(())
    }
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
        check_representable(&header, &events)?;
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
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let first = match job {
            Job::Write(request) => request,
            Job::Bulk(bulk) => {
                let outcome = run_bulk(&mut connection, path, io, &mut synchronous, &bulk);
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
        let outcomes = commit_group(&mut connection, path, io, &mut synchronous, &group);
        acknowledge(group.into_iter().zip(outcomes).collect());
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
               delegation_depth, sandbox_mode, approval_policy, header_body, header_crc)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
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
    let last_seq: Option<i64> = connection
        .prepare_cached("SELECT max(seq) FROM events WHERE session_id = ?1")
        .and_then(|mut statement| statement.query_row([id.as_str()], |row| row.get(0)))
        .map_err(sqlite_error("read the last seq", path))?;
    let actual = last_seq.map_or(1, |seq| seq.saturating_add(1).unsigned_abs());
    if first.seq() != actual {
        return Err(StoreError::Conflict {
            id: id.clone(),
            expected: first.seq(),
            actual,
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

/// Refuses values SQLite's signed 64-bit integers cannot hold, before
/// anything is sent to the committer.
fn check_representable(header: &SessionHeader, events: &[EventRecord]) -> Result<(), StoreError> {
    for (what, value) in [
        ("createdAt", header.created_at),
        ("seedLength", header.seed_length),
        ("delegationDepth", header.delegation_depth),
    ] {
        if i64::try_from(value).is_err() {
            return Err(StoreError::InvalidEvent(format!(
                "session {}: header {what} {value} is above 2^63-1, the largest integer SQLite stores",
                header.id
            )));
        }
    }
    events.iter().try_for_each(check_representable_record)
}

fn check_representable_record(record: &EventRecord) -> Result<(), StoreError> {
    if i64::try_from(record.seq()).is_err() || i64::try_from(record.ts()).is_err() {
        return Err(StoreError::InvalidEvent(format!(
            "seq {}: seq or ts {} is above 2^63-1, the largest integer SQLite stores",
            record.seq(),
            record.ts()
        )));
    }
    Ok(())
}

/// A value checked by `check_representable` (saturates otherwise).
fn sql_integer(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// How errors about one session of a database name it: `<database>#<id>`.
pub(crate) fn session_locator(database: &Path, id: &SessionId) -> PathBuf {
    let mut text = database.as_os_str().to_owned();
    text.push(format!("#{id}"));
    PathBuf::from(text)
}

fn sqlite_error<'a>(
    operation: &'static str,
    path: &'a Path,
) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| StoreError::Sqlite {
        operation,
        path: path.to_owned(),
        source,
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

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let connection =
        Connection::open_with_flags(path, flags).map_err(sqlite_error("open", path))?;
    connection
        .busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite_error("set the busy timeout", path))?;
    Ok(connection)
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

    fn fixture_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sqlite/v1.db")
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
        let mut connection = ok(open_connection(&path));
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
    fn v1_fixture_is_what_the_generator_writes() {
        let folder = ok(tempfile::tempdir());
        let generated = database(folder.path());
        fill_v1_fixture(&ok(SqliteStore::open(&generated)));
        if std::env::var_os("SESSIONLOG_WRITE_FIXTURES").is_some() {
            let target = fixture_path();
            ok(std::fs::create_dir_all(
                target.parent().unwrap_or(Path::new(".")),
            ));
            let _ = std::fs::remove_file(&target);
            ok(raw(&generated).execute_batch(&format!(
                "VACUUM INTO '{}'",
                target.display().to_string().replace('\'', "''")
            )));
        }
        assert_eq!(dump(&fixture_path()), dump(&generated));
    }

    #[test]
    fn v1_fixture_opens_reads_and_accepts_appends() {
        let folder = ok(tempfile::tempdir());
        let copy = database(folder.path());
        ok(std::fs::copy(fixture_path(), &copy));
        let store = ok(SqliteStore::open(&copy));
        let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
        assert_eq!(ids, ["child", "root"]);
        let root = ok(store.snapshot(&id("root")));
        assert_eq!(root.events.len(), 4);
        assert_eq!(root.events[2].batch(), Some(2));
        assert_eq!(ok(store.snapshot(&id("child"))).header.seed_length, 2);
        let mut writer = ok(store.open_writer(&id("root"), WriterOptions::default()));
        assert_eq!(ok(writer.append(note("new"), Some(5))).get(), 5);
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

    #[test]
    fn newer_schema_is_refused_naming_both_versions() {
        let folder = ok(tempfile::tempdir());
        let path = database(folder.path());
        drop(ok(SqliteStore::open(&path)));
        ok(raw(&path).pragma_update(None, "user_version", 99));
        let refused = SqliteStore::open(&path);
        let Err(error) = refused else {
            panic!("a version 99 database was opened");
        };
        assert!(
            matches!(
                error,
                StoreError::NewerSchema {
                    found: 99,
                    supported: 1,
                    ..
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("99") && message.contains(" 1"),
            "{message}"
        );
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
        let streamed: Vec<Result<EventRecord, StoreError>> = ok(store.events(&id("a"))).collect();
        assert!(matches!(
            streamed.last(),
            Some(Err(StoreError::Corrupt { .. }))
        ));
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
