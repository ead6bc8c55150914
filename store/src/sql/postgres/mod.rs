//! The PostgreSQL backend: many sessions in one database, for runtimes
//! that serve sessions from many machines. The same API and the same
//! records as the other backends; the rows and the checks on them are the
//! shared ones of `sql`.
//!
//! # Schema
//!
//! The tables live in a schema of their own (`sessionlog` unless the URL
//! says `?schema=NAME`); the statements, and each version's step, are in
//! `statements`. `schema_version` records the version: a newer one is
//! refused naming both versions, an older one is brought forward in one
//! transaction by the first writing open (creation or a writer); reading
//! never creates or changes anything, and a database without our tables is
//! "not a sessionlog store".
//!
//! # Writes
//!
//! A session's header row and its first events are inserted in one
//! transaction. An append is one statement (so one transaction): it moves
//! the session row's `last_seq` from the writer's last seq to the new one
//! and inserts the events only if it moved, so a writer that lost its lock
//! (or its connection) and another that took over can never both write at
//! one seq — the loser gets `Conflict` and is poisoned, and the
//! `(session_id, seq)` primary key fences anything else. Under
//! `Durability::Fsync` every connection runs with `synchronous_commit` at
//! `on` or stronger, so the commit returns only once its WAL is flushed.
//! The durable appends of one store's writers (and its clones') are
//! committed in groups (`group`): one statement, one transaction and one
//! flush for every append waiting, the fence applied to each; a lone
//! writer's append runs on its own connection as before, and appenders in
//! other processes share flushes through the server's own group commit.
//! An append is acknowledged only after the commit that carried it
//! returned: a connection lost before that leaves the append whole or
//! absent, never acknowledged.
//!
//! # One writer per session
//!
//! A writer opens its own connection and holds a session-level advisory
//! lock on a 64-bit key derived from the schema and session id for its
//! whole life; the server releases it when the connection ends, however it
//! ends. A second writer, anywhere, gets `Locked`.
//!
//! # Following
//!
//! After an append commits, a notification `{"session":…,"seq":…}` on the
//! channel named after the schema is sent by a separate thread on its own
//! connection, outside the append's transaction: a `NOTIFY` inside it would
//! take the server's global notification lock at commit and serialise every
//! appender's commit. A [`PostgresListener`] wakes on it, and followers
//! always read the events themselves by seq, so one that missed a
//! notification (or sits behind a pooler that never delivers them) catches
//! up at its next poll.

mod group;
mod location;
mod statements;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};
use sessionlog_projections::SessionState;
use sessionlog_schema::{
    record_crc, ChainValue, DecodedHeader, EventRecord, HeaderVocabularyError, SessionHeader,
    SessionId,
};

use self::group::{Append, GroupCommit, Outcome};
use self::location::Location;
use self::statements as sql;
use super::{
    audit_catalogue, corrupt, decode_header_row, fold_session, fold_within_vocabulary,
    session_locator, sql_integer, stage, FoldedSession, HeaderColumns, HeaderRow,
};
use crate::jsonl::{check_new_session, ListEntry};
use crate::reader::Snapshot;
use crate::sql::checks::unowned_events_damage;
use crate::sql::checks::{check_seed_source_rows, RowPage, StoreAudit};
use crate::sql::events::{RowBounds, RowPages, SqlEvents};
use crate::state_snapshot;
use crate::writer::{
    check_storable, check_storable_record, Durability, LogSink, SessionWriter, WriterOptions,
};
use crate::StoreError;

pub use location::DEFAULT_SCHEMA;

/// How messages name the PostgreSQL store `text`: without its password.
pub(crate) fn display_of(text: &str) -> String {
    Location::display_of(text)
}

/// The schema version this build reads and writes (`schema_version`).
pub const POSTGRES_SCHEMA_VERSION: i64 = statements::SCHEMA_STEPS.len() as i64;

/// Rows read per page by [`PostgresEvents`], at most.
const PAGE_ROWS: i64 = 4096;

/// Rows asked for by a session's first page: the server sends all the rows
/// a page asks for, and a page ends at [`crate::sql::PAGE_BYTES`] of
/// bodies, the rows after that discarded; each next page asks for as many
/// rows as fit in that at the size of the rows just read, at most four
/// times as many as the page before.
const FIRST_PAGE_ROWS: i64 = 256;

/// Rows inserted per statement when a session is created.
const INSERT_CHUNK_ROWS: usize = 8192;

/// A PostgreSQL store of sessions. Cheap to clone: clones share one
/// connection for reads and creations, and one notifier.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    shared: Arc<Shared>,
}

/// The events of one session read page by page (bounded memory), checked
/// as they come, through the last seq its row recorded when the read
/// began.
pub type PostgresEvents = SqlEvents;

/// How [`PostgresEvents`] fetches rows: through the store's shared
/// connection.
struct PostgresRows {
    shared: Arc<Shared>,
    /// The rows the next page asks for.
    limit: i64,
}

/// A connection subscribed to a store's notifications: [`wait`](Self::wait)
/// returns when session `id` may have new events.
pub struct PostgresListener {
    client: Client,
    location: Location,
    id: SessionId,
}

#[derive(Debug)]
struct Shared {
    location: Location,
    /// The connection for reads and creations, made on first use and made
    /// again after it was lost.
    connection: Mutex<Option<Connection>>,
    /// Whether the schema is known to be at [`POSTGRES_SCHEMA_VERSION`].
    current: AtomicBool,
    /// Whether the schema as opened has the column of forks by reference
    /// (`seed_source`, version 3 on): a reader of an older one, which it
    /// never upgrades, reads every session as holding all its rows.
    seed_sources: bool,
    /// Opened with [`PostgresStore::open_read_only`]: every connection's
    /// transactions are read-only, and every write is refused before it
    /// reaches the server.
    read_only: bool,
    notifier: Mutex<Option<Notifier>>,
    /// The durable appends of this store's writers, committed in groups.
    group: GroupCommit,
}

/// A client with its prepared statements and its `synchronous_commit`.
struct Connection {
    client: Client,
    statements: HashMap<&'static str, Statement>,
    durability: Durability,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.client.is_closed())
            .finish()
    }
}

/// The thread that sends notifications after appends commit.
#[derive(Debug)]
struct Notifier {
    appended: Option<mpsc::Sender<(SessionId, u64)>>,
    thread: Option<JoinHandle<()>>,
}

/// The writer side of one session: its own connection, which holds the
/// session's lock (under `lock_key`) until the sink is dropped.
#[derive(Debug)]
struct PostgresSink {
    shared: Arc<Shared>,
    id: SessionId,
    connection: Connection,
    lock_key: i64,
    pending: Vec<EventRecord>,
    last_seq: u64,
    /// The CRC of the last record appended (a snapshot's anchor), and of
    /// the stored header body.
    last_crc: u32,
    header_crc: u32,
}

/// Sessions inserted into one open transaction on a connection of their
/// own, committed by [`PostgresBulkCreate::commit`]; dropped without it,
/// the connection closes and the server rolls everything back.
#[derive(Debug)]
pub(crate) struct PostgresBulkCreate {
    shared: Arc<Shared>,
    connection: Connection,
}

impl PostgresStore {
    /// Opens an existing store without changing anything: a database
    /// without a sessionlog schema is refused as not a store, a newer
    /// schema with `NewerSchema`. An older schema is brought forward by the
    /// first write.
    pub fn open(url: &Path) -> Result<PostgresStore, StoreError> {
        PostgresStore::open_existing(url, false)
    }

    /// Opens an existing store for reading only: every transaction on its
    /// connections is read-only (`default_transaction_read_only`), nothing
    /// is created or upgraded, and every write through it is refused.
    pub fn open_read_only(url: &Path) -> Result<PostgresStore, StoreError> {
        PostgresStore::open_existing(url, true)
    }

    fn open_existing(url: &Path, read_only: bool) -> Result<PostgresStore, StoreError> {
        let location = Location::parse(url)?;
        let mut connection = Connection::open(&location, read_only)?;
        let version = read_version(&mut connection, &location)?;
        let Some(version) = version else {
            // Said as `create` would say it: another application's tables,
            // a schema that is missing, or one that is empty.
            refuse_foreign_tables(&mut connection, &location)?;
            let access = schema_access(&mut connection, &location)?;
            let reason = match access.exists {
                false => format!(
                    "schema {} does not exist in database {}; `sessionlog create` makes it",
                    location.schema, access.database
                ),
                true => format!(
                    "schema {} holds no sessionlog tables; `sessionlog create` makes them",
                    location.schema
                ),
            };
            return Err(StoreError::NotAStore {
                path: location.display.clone(),
                reason,
            });
        };
        if version > POSTGRES_SCHEMA_VERSION {
            return Err(newer_schema(&location, version));
        }
        Ok(PostgresStore::with(
            location, connection, version, read_only,
        ))
    }

    /// Opens the store, creating its schema when missing and bringing an
    /// older one to [`POSTGRES_SCHEMA_VERSION`].
    pub fn create(url: &Path) -> Result<PostgresStore, StoreError> {
        let location = Location::parse(url)?;
        let mut connection = Connection::open(&location, false)?;
        upgrade_schema(&mut connection, &location)?;
        Ok(PostgresStore::with(
            location,
            connection,
            POSTGRES_SCHEMA_VERSION,
            false,
        ))
    }

    /// The store over `connection`, whose schema is at `version`.
    fn with(
        location: Location,
        connection: Connection,
        version: i64,
        read_only: bool,
    ) -> PostgresStore {
        PostgresStore {
            shared: Arc::new(Shared {
                location,
                connection: Mutex::new(Some(connection)),
                current: AtomicBool::new(version == POSTGRES_SCHEMA_VERSION),
                seed_sources: version >= 3,
                read_only,
                notifier: Mutex::new(None),
                group: GroupCommit::default(),
            }),
        }
    }

    /// Whether this store was opened with [`PostgresStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// The store's URL as messages show it (never with a password).
    pub fn path(&self) -> &Path {
        &self.shared.location.display
    }

    /// The schema the store's tables live in.
    pub fn schema(&self) -> &str {
        &self.shared.location.schema
    }

    /// A new connection to the store's database, with `search_path` set to
    /// its schema: for tools and tests that run their own SQL.
    pub fn connect(&self) -> Result<Client, StoreError> {
        connect(&self.shared.location, "connect")
    }

    /// Whether session `id` exists.
    pub fn contains(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.shared
            .with_connection("look up a session", |connection| {
                let statement = connection.prepared(sql::SESSION_EXISTS)?;
                let row = connection.client.query_one(&statement, &[&id.as_str()])?;
                row.try_get(0)
            })
    }

    /// Creates a session atomically: its header row and `events` in one
    /// transaction, after checking them against every rule; an existing
    /// id is refused.
    pub fn create_session(
        &self,
        header: &SessionHeader,
        events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        let state = check_new_session(&self.shared.session_path(&header.id), header, events)?;
        self.insert_new(header, None, events, durability)?;
        if let Some((anchor, bytes)) = state_snapshot::of_created(&state, &header.to_body(), events)
        {
            // Not synced, as a writer's: a cache.
            let kept = self.in_transaction(Durability::Buffered, |connection, location| {
                connection.write_snapshot(location, &header.id, anchor, &bytes)
            });
            if let Err(error) = kept {
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
        self.insert_new(header, Some(source), own_events, durability)
    }

    /// Inserts a new session's header row and `events` in one transaction.
    fn insert_new(
        &self,
        header: &SessionHeader,
        seed_source: Option<&SessionId>,
        events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        check_storable(header, events)?;
        self.shared.ensure_current()?;
        self.in_transaction(durability, |connection, location| {
            insert_session(
                connection,
                location,
                header,
                &header.to_body(),
                seed_source,
                events,
            )
        })
    }

    /// Runs `work` in one transaction on the shared connection, committed
    /// with `durability` (a buffered commit waits for no flush) and rolled
    /// back when it fails.
    fn in_transaction(
        &self,
        durability: Durability,
        work: impl FnOnce(&mut Connection, &Location) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let location = &self.shared.location;
        let mut guard = self.shared.connection()?;
        let connection = guard.as_mut().ok_or_else(|| lost(location))?;
        let outcome = (|| {
            connection.run(location, "begin a write", sql::BEGIN)?;
            if durability == Durability::Buffered {
                connection.run(
                    location,
                    "set synchronous_commit",
                    sql::SYNCHRONOUS_COMMIT_OFF_HERE,
                )?;
            }
            work(connection, location)?;
            connection.run(location, "commit a write", sql::COMMIT)
        })();
        if outcome.is_err() {
            let _ = connection.client.batch_execute(sql::ROLLBACK);
        }
        drop_if_lost(&mut guard, &outcome);
        outcome
    }

    /// Starts a bulk creation: sessions added to it are inserted in one
    /// transaction that [`PostgresBulkCreate::commit`] commits. The caller
    /// has folded every session it adds; an existing id fails the whole
    /// creation.
    pub(crate) fn bulk_create(&self) -> Result<PostgresBulkCreate, StoreError> {
        self.shared.ensure_current()?;
        let location = &self.shared.location;
        let mut connection = Connection::open(location, false)?;
        connection.run(location, "begin a migration", sql::BEGIN)?;
        // The tables grow within this one transaction, unseen by the
        // planner's statistics: a plan of a prepared statement cached
        // while they were small (a scan of the whole table for a session's
        // first event, say) would stay in use as they grow, every session
        // then costing more than the one before. Each is planned anew.
        connection.run(location, "begin a migration", sql::PLAN_EACH_STATEMENT)?;
        Ok(PostgresBulkCreate {
            shared: Arc::clone(&self.shared),
            connection,
        })
    }

    /// The header of session `id` and its vocabulary errors.
    pub fn header(
        &self,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<HeaderVocabularyError>), StoreError> {
        let decoded = self.decoded_header(id)?;
        Ok((decoded.header, decoded.vocabulary_errors))
    }

    /// The header of session `id` as stored: its fields, its vocabulary
    /// errors and its record body.
    pub fn decoded_header(&self, id: &SessionId) -> Result<DecodedHeader, StoreError> {
        let mut row = self.shared.read_header_row(id)?;
        decode_header_row(self.path(), id, &mut row)
    }

    /// The last seq session `id`'s row records (0: no events), its header
    /// row checked first: where a read of its last events starts.
    pub fn last_seq(&self, id: &SessionId) -> Result<u64, StoreError> {
        let mut row = self.shared.read_header_row(id)?;
        decode_header_row(self.path(), id, &mut row)?;
        Ok(row.last_seq.unsigned_abs())
    }

    /// Every event of session `id`, streamed page by page.
    pub fn events(&self, id: &SessionId) -> Result<PostgresEvents, StoreError> {
        self.events_from(id, 1)
    }

    /// The events of session `id` from `from_seq` on, streamed page by
    /// page, through the last seq its row records now.
    pub fn events_from(&self, id: &SessionId, from_seq: u64) -> Result<PostgresEvents, StoreError> {
        let mut row = self.shared.read_header_row(id)?;
        let decoded = decode_header_row(self.path(), id, &mut row)?;
        Ok(SqlEvents::new(
            Arc::new(Mutex::new(PostgresRows {
                shared: Arc::clone(&self.shared),
                limit: FIRST_PAGE_ROWS,
            })),
            self.path().to_owned(),
            id.clone(),
            decoded.header.seed_length,
            seed_source(self.path(), id, &row)?,
            row.last_seq.unsigned_abs(),
            from_seq,
        ))
    }

    /// The whole session `id`: its events through the last seq its row
    /// records when the read starts (rows are never changed once written,
    /// so that is one state of the session). A PostgreSQL session never
    /// has a torn tail: its transactions are atomic.
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        let decoded = self.decoded_header(id)?;
        let events = self.events(id)?.collect::<Result<Vec<_>, _>>()?;
        Ok(Snapshot {
            header: decoded.header,
            header_body: decoded.body,
            header_vocabulary_errors: decoded.vocabulary_errors,
            events,
            torn_tail: None,
        })
    }

    /// The ids of every session, sorted. A session row whose id is not
    /// valid, or events without a session row, are damage (refused, as
    /// SQLite's are): no row is skipped.
    pub fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut audit = self.audit()?;
        match audit.damage.is_empty() {
            true => Ok(audit.ids),
            false => Err(audit.damage.remove(0)),
        }
    }

    /// Checks the store as a whole and lists its sessions: the valid ids
    /// of the session rows, and every piece of damage outside any one
    /// session (session rows with an invalid id, events without a session
    /// row), read in one consistent snapshot. Each session's own rows are
    /// checked when it is read.
    pub fn audit(&self) -> Result<StoreAudit, StoreError> {
        let (session_rows, event_owners) = self.rows_and_owners(true)?;
        Ok(audit_catalogue(self.path(), &session_rows, &event_owners))
    }

    /// The part of [`audit`](Self::audit) that lists the sessions: their
    /// valid ids, and the session rows with an invalid id as damage.
    /// Events without a session row are left to
    /// [`unowned_events`](Self::unowned_events), which `verify` reports
    /// after the sessions, as it does for SQLite.
    pub fn list_sessions(&self) -> Result<StoreAudit, StoreError> {
        let (session_rows, _) = self.rows_and_owners(false)?;
        Ok(audit_catalogue(self.path(), &session_rows, &[]))
    }

    /// Events without a session row, each as damage of the store as a
    /// whole (what [`list_sessions`](Self::list_sessions) leaves out).
    pub fn unowned_events(&self) -> Result<Vec<StoreError>, StoreError> {
        let (session_rows, event_owners) = self.rows_and_owners(true)?;
        Ok(unowned_events_damage(
            self.path(),
            &session_rows,
            &event_owners,
        ))
    }

    /// The session rows' ids and, with `owners`, the owners of events
    /// (a scan of the events), sorted, read in one snapshot.
    fn rows_and_owners(&self, owners: bool) -> Result<(Vec<String>, Vec<String>), StoreError> {
        self.shared
            .with_connection("list sessions", |connection| {
                connection.client.batch_execute(sql::BEGIN_READ)?;
                let read = (|| {
                    let texts = |connection: &mut Connection, text| {
                        let statement = connection.prepared(text)?;
                        connection
                            .client
                            .query(&statement, &[])?
                            .iter()
                            .map(|row| row.try_get::<_, String>(0))
                            .collect::<Result<Vec<String>, _>>()
                    };
                    Ok((
                        texts(connection, sql::SESSION_IDS)?,
                        match owners {
                            true => texts(connection, sql::EVENT_OWNERS)?,
                            false => Vec::new(),
                        },
                    ))
                })();
                let _ = connection.client.batch_execute(sql::ROLLBACK);
                read
            })
            .map_err(|error| damaged_table(error, &self.shared.location))
    }

    /// Whether `other` is this very store, however the two URLs spell it
    /// (another host name for the server, another user): the same schema
    /// in one database. A session-level advisory lock that this store's
    /// connection holds cannot be taken by a connection to the same
    /// database, and always can by one to another.
    pub fn same_store_as(&self, other: &PostgresStore) -> Result<bool, StoreError> {
        if self.shared.location.schema != other.shared.location.schema {
            return Ok(false);
        }
        let key = lock_key(
            "same-store",
            &self.shared.location.schema,
            &format!("{}-{}", std::process::id(), crate::writer::now_ms()),
        );
        self.shared
            .with_connection("compare two stores", |connection| {
                connection
                    .client
                    .execute("SELECT pg_advisory_lock($1)", &[&key])
                    .map(drop)
            })?;
        let taken = other
            .shared
            .with_connection("compare two stores", |connection| {
                let taken: bool = connection
                    .client
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&key])?
                    .try_get(0)?;
                if taken {
                    connection
                        .client
                        .execute("SELECT pg_advisory_unlock($1)", &[&key])?;
                }
                Ok(taken)
            });
        let released = self
            .shared
            .with_connection("compare two stores", |connection| {
                connection
                    .client
                    .execute("SELECT pg_advisory_unlock($1)", &[&key])
                    .map(drop)
            });
        let taken = taken?;
        released?;
        Ok(!taken)
    }

    /// Every session with its header.
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
        Ok(self
            .ids()?
            .into_iter()
            .map(|id| {
                let header = self.header(&id).map(|(header, _)| header);
                ListEntry { id, header }
            })
            .collect())
    }

    /// Opens the single writer of session `id` on a connection of its own:
    /// takes the session's lock (`Locked` if another writer, on any
    /// machine, holds it), reads and verifies the events while folding its
    /// projections (those after its state snapshot, when one matches), and
    /// refuses a corrupt or rule-breaking session.
    pub fn open_writer(
        &self,
        id: &SessionId,
        options: WriterOptions,
    ) -> Result<SessionWriter, StoreError> {
        if !self.contains(id)? {
            return Err(self.shared.not_found(id));
        }
        self.shared.ensure_current()?;
        let location = &self.shared.location;
        let mut connection = Connection::open(location, false)?;
        let key = lock_key("writer", &location.schema, id.as_str());
        // Tried again for the grace a JSONL writer gives: a group commit
        // holds the key, shared, while its statement checks each writer's
        // lock, and a writer opening in that moment is no second writer.
        let deadline = Instant::now() + crate::jsonl::LOCK_GRACE;
        loop {
            let locked: bool = connection
                .query_one(location, "lock a session", sql::TRY_LOCK_SESSION, &[&key])
                .and_then(|row| row.try_get(0).map_err(self.shared.error("lock a session")))?;
            if locked {
                break;
            }
            if Instant::now() >= deadline {
                return Err(StoreError::Locked {
                    id: id.clone(),
                    path: self.shared.session_path(id),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let decoded = self.decoded_header(id)?;
        let folded = fold_within_vocabulary(&self.shared.session_path(id), decoded, |decoded| {
            self.fold_session(id, decoded, options.keep_snapshot)
        })?;
        let sink = PostgresSink {
            shared: Arc::clone(&self.shared),
            id: id.clone(),
            connection,
            lock_key: key,
            pending: Vec::new(),
            last_seq: folded.state.seq(),
            last_crc: folded.last_crc,
            header_crc: folded.header_crc,
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
            self.fold_session(id, decoded, false)
        })?;
        Ok(folded.state)
    }

    /// Folds session `id` (see [`fold_session`]), with its snapshot row
    /// when the schema has the table (a read-only reader of a store older
    /// than version 3 has none, and folds every row).
    fn fold_session(
        &self,
        id: &SessionId,
        decoded: DecodedHeader,
        keep_events: bool,
    ) -> Result<FoldedSession, StoreError> {
        let place = self.shared.session_path(id);
        let snapshot = match keep_events {
            true => None,
            false => self
                .shared
                .with_connection("read the state snapshot", |connection| {
                    let has_table = connection.prepared(sql::HAS_SNAPSHOTS_TABLE)?;
                    let has_table: bool =
                        connection.client.query_one(&has_table, &[])?.try_get(0)?;
                    if !has_table {
                        return Ok(None);
                    }
                    let statement = connection.prepared(sql::READ_SNAPSHOT)?;
                    let format = i64::from(state_snapshot::STATE_SNAPSHOT_FORMAT);
                    connection
                        .client
                        .query_opt(&statement, &[&id.as_str(), &format])?
                        .map(|row| {
                            let bytes = super::SnapshotBytes::Whole(row.try_get(2)?);
                            Ok((row.try_get(0)?, row.try_get(1)?, bytes))
                        })
                        .transpose()
                })
                .map_err(|error| state_snapshot::ignored(id, &place, &error.to_string()))
                .ok()
                .flatten(),
        };
        fold_session(id, &place, decoded, snapshot, keep_events, |from_seq| {
            self.events_from(id, from_seq)
        })
    }

    /// A connection that listens for appends to session `id`.
    pub fn listener(&self, id: &SessionId) -> Result<PostgresListener, StoreError> {
        let location = self.shared.location.clone();
        let mut client = connect(&location, "listen")?;
        let listen = sql::LISTEN.replace("$channel", &location.quoted_schema());
        client
            .batch_execute(&listen)
            .map_err(postgres_error("listen", &location))?;
        Ok(PostgresListener {
            client,
            location,
            id: id.clone(),
        })
    }
}

impl PostgresListener {
    /// Waits up to `timeout` for a notification of an append to the
    /// session; true when one came. Followers read by seq after it either
    /// way: a notification is only a wake-up.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, StoreError> {
        let deadline = Instant::now() + timeout;
        let wanted = format!("{{\"session\":\"{}\",", self.id);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let next = self
                .client
                .notifications()
                .timeout_iter(left)
                .next()
                .map_err(postgres_error("wait for a notification", &self.location))?;
            match next {
                Some(notification) if notification.payload().starts_with(&wanted) => {
                    return Ok(true)
                }
                Some(_) => continue,
                None if self.client.is_closed() => {
                    return Err(StoreError::InvalidStore {
                        store: self.location.display.clone(),
                        reason: "the connection that listens for appends was closed".to_owned(),
                    })
                }
                None => return Ok(false),
            }
        }
    }
}

impl std::fmt::Debug for PostgresListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresListener")
            .field("store", &self.location.display)
            .field("session", &self.id)
            .finish()
    }
}

impl RowPages for PostgresRows {
    fn rows(
        &mut self,
        id: &SessionId,
        from: u64,
        through: u64,
        page: &mut RowPage,
    ) -> Result<(), StoreError> {
        let first = from.max(1);
        let (from, through) = (crate::sql::lowest_row_seq(from), sql_integer(through));
        let limit = self.limit;
        page.clear();
        let read = self.shared.with_connection("read events", |connection| {
            let statement = connection.prepared(sql::READ_EVENTS)?;
            let params: [&(dyn postgres::types::ToSql + Sync); 4] =
                [&id.as_str(), &from, &through, &limit];
            // Rows are taken as they come, and the rest of a page dropped
            // (the client reads and discards them) once its bodies are
            // full.
            let mut rows = connection.client.query_raw(&statement, params)?;
            while let Some(row) = rows.next()? {
                push_event_row(page, &row)?;
                if page.is_full_of_bytes() {
                    break;
                }
            }
            Ok(())
        });
        if let Err(error) = read {
            // The row after those read, named as a row that reads but
            // fails its checks is.
            let seq = page
                .rows
                .last()
                .map_or(first, |row| row.seq.unsigned_abs().saturating_add(1));
            return Err(of_session(
                damaged_row(error, &self.shared.location, id, seq),
                id,
            ));
        }
        let per_row = (page.body_bytes() / page.rows.len().max(1)).max(1);
        let fit = i64::try_from(crate::sql::PAGE_BYTES / per_row).unwrap_or(PAGE_ROWS);
        self.limit = fit.clamp(1, PAGE_ROWS.min(limit.saturating_mul(4)));
        Ok(())
    }

    fn bounds(&mut self, id: &SessionId) -> Result<RowBounds, StoreError> {
        self.shared
            .with_connection("read events", |connection| row_bounds(connection, id))
            .map_err(|error| of_session(error, id))
    }

    fn session_row(&mut self, id: &SessionId) -> Result<Option<HeaderRow>, StoreError> {
        self.shared
            .read_header_row_if_any(id)
            .map_err(|error| of_session(error, id))
    }
}

impl PostgresSink {
    /// The store the sink writes, as its readers read it: what a sink
    /// reads of its own session again (its chain) reads as they do.
    fn store(&self) -> PostgresStore {
        PostgresStore {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl LogSink for PostgresSink {
    fn write(&mut self, id: &SessionId, records: &[EventRecord]) -> Result<(), StoreError> {
        debug_assert_eq!(id, &self.id, "a sink serves one session");
        stage(&mut self.pending, records)
    }

    fn sync(&mut self, durability: Durability) -> Result<(), StoreError> {
        self.sync_pending(durability)
            .map_err(|error| of_session(error, &self.id))
    }

    fn save_snapshot(&mut self, state: &SessionState) -> Result<usize, StoreError> {
        self.write_snapshot(state)
            .map_err(|error| of_session(error, &self.id))
    }

    fn chain_of_log(&mut self) -> Result<ChainValue, StoreError> {
        let store = self.store();
        let decoded = store.decoded_header(&self.id)?;
        let events = store.events_from(&self.id, 1)?;
        crate::writer::chain_of(&decoded.body, events, &self.pending)
    }

    fn chain_of_log_since(
        &mut self,
        seq: u64,
        through: u64,
        before: &dyn Fn(&EventRecord) -> Option<ChainValue>,
    ) -> Result<Option<ChainValue>, StoreError> {
        let store = self.store();
        let events = store.events_from(&self.id, seq)?;
        crate::writer::chain_since(events, &self.pending, seq, through, before)
    }
}

impl PostgresSink {
    /// Appends the staged events ([`LogSink::sync`]).
    fn sync_pending(&mut self, durability: Durability) -> Result<(), StoreError> {
        let Some(first) = self.pending.first() else {
            return Ok(());
        };
        let location = &self.shared.location;
        self.connection.set_durability(location, durability)?;
        let first_seq = first.seq();
        let append = Append {
            id: self.id.clone(),
            last_seq: self.last_seq,
            events: std::mem::take(&mut self.pending),
            lock_key: Some(self.lock_key),
        };
        // Durable appends share a commit with the store's other writers';
        // a buffered one waits for no flush, so has nothing to share.
        let (append, outcome) = match durability {
            Durability::Fsync => self
                .shared
                .group
                .commit(&mut self.connection, location, append),
            Durability::Buffered => {
                let ran = append.run_alone(&mut self.connection, location);
                (append, Outcome::Ran(ran))
            }
        };
        let inserted = match outcome {
            Outcome::Ran(ran) => ran,
            Outcome::Unresolved => self.connection.append_again(location, &append),
        };
        self.pending = append.events;
        let inserted = match inserted {
            Ok(inserted) => inserted,
            Err(error) if is_unique_violation(&error) => return Err(self.conflict(first_seq)),
            Err(error) => return Err(error),
        };
        if inserted == 0 {
            return Err(self.conflict(first_seq));
        }
        if inserted != self.pending.len() as u64 {
            return Err(StoreError::InvalidStore {
                store: self.shared.session_path(&self.id),
                reason: format!(
                    "an append of {} events inserted {inserted}",
                    self.pending.len()
                ),
            });
        }
        let new_last = self.pending.last().map_or(self.last_seq, EventRecord::seq);
        if let Some(last) = self.pending.last() {
            self.last_crc = record_crc(&self.id, last.body().as_bytes());
        }
        self.pending.clear();
        self.last_seq = new_last;
        self.shared.notify(&self.id, new_last);
        Ok(())
    }

    /// Keeps the state snapshot ([`LogSink::save_snapshot`]).
    fn write_snapshot(&mut self, state: &SessionState) -> Result<usize, StoreError> {
        let anchor = state_snapshot::SnapshotAnchor::of_row(state.seq(), self.last_crc);
        let bytes = state_snapshot::encode(state, self.header_crc, anchor);
        let location = &self.shared.location;
        // Not synced: a snapshot is a cache, and one lost costs only a
        // longer fold. The next append sets its own durability again.
        self.connection
            .set_durability(location, Durability::Buffered)?;
        self.connection
            .write_snapshot(location, &self.id, anchor, &bytes)?;
        Ok(bytes.len())
    }
}

impl Drop for PostgresSink {
    /// Gives the lock back before the connection closes. Should that fail
    /// (the connection is lost), the server releases the lock as it sees
    /// the connection end, which is what it always did.
    fn drop(&mut self) {
        let location = &self.shared.location;
        let _ = self.connection.query_one(
            location,
            "unlock a session",
            sql::UNLOCK_SESSION,
            &[&self.lock_key],
        );
    }
}

impl PostgresSink {
    /// The `Conflict` of an append that another writer got ahead of.
    fn conflict(&mut self, expected: u64) -> StoreError {
        let location = &self.shared.location;
        let read = self.connection.query_one(
            location,
            "read the last seq",
            sql::READ_LAST_SEQ,
            &[&self.id.as_str()],
        );
        // The writer's own connection lost (and the session's lock with
        // it: a group refuses the append of a writer whose connection no
        // longer holds it) is what it reports, not a conflict.
        let recorded = match read {
            Err(error) if error.is_connection_lost() => return error,
            read => read
                .ok()
                .and_then(|row| row.try_get::<_, i64>(0).ok())
                .map_or(self.last_seq, i64::unsigned_abs),
        };
        StoreError::Conflict {
            id: self.id.clone(),
            expected,
            actual: recorded.max(self.last_seq) + 1,
        }
    }
}

impl PostgresBulkCreate {
    /// Inserts the row of a session being read into the open transaction,
    /// without events: they follow in chunks
    /// ([`PostgresBulkCreate::add_events`]). Its header record is copied as
    /// the source stored it (`header_body`).
    pub(crate) fn add_session(
        &mut self,
        header: &SessionHeader,
        header_body: &str,
    ) -> Result<(), StoreError> {
        check_storable(header, &[])?;
        insert_session(
            &mut self.connection,
            &self.shared.location,
            header,
            header_body,
            None,
            &[],
        )
    }

    /// Appends the next events of session `id`, the last one added, in the
    /// open transaction: the session's last seq moves with each chunk.
    pub(crate) fn add_events(
        &mut self,
        id: &SessionId,
        events: &[EventRecord],
    ) -> Result<(), StoreError> {
        events.iter().try_for_each(check_storable_record)?;
        let location = &self.shared.location;
        for chunk in events.chunks(INSERT_CHUNK_ROWS) {
            let Some(first) = chunk.first() else {
                continue;
            };
            let inserted =
                self.connection
                    .append(location, "insert events", id, first.seq() - 1, chunk)?;
            if inserted != chunk.len() as u64 {
                return Err(StoreError::InvalidStore {
                    store: location.display.clone(),
                    reason: format!(
                        "session {id}: inserting {} events from seq {} inserted {inserted}",
                        chunk.len(),
                        first.seq()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Keeps the state snapshot of session `id`, the last one added and
    /// all its events, taken at `anchor`, in the open transaction.
    pub(crate) fn add_snapshot(
        &mut self,
        id: &SessionId,
        anchor: state_snapshot::SnapshotAnchor,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        self.connection
            .write_snapshot(&self.shared.location, id, anchor, bytes)
    }

    /// Commits every session added, durably.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        let location = &self.shared.location;
        self.connection
            .run(location, "commit a migration", sql::COMMIT)?;
        // The planner's statistics are brought up to what was just
        // written, rather than left to autovacuum's next pass: until then
        // a read of a few events of a long session (`project --at`,
        // `tail`) can be planned as a scan of all its rows. Only a help,
        // after the migration is committed: what keeps it from running (a
        // role that does not own the tables, which the server would only
        // skip with a notice; a lock a long VACUUM holds, waited for a few
        // seconds at most) is warned of, never the migration's failure.
        let owner = self
            .connection
            .query_one(location, "analyze", sql::OWNS_THE_TABLES, &[])
            .and_then(|row| {
                row.try_get::<_, bool>(0)
                    .map_err(postgres_error("analyze", location))
            });
        let analyzed = match owner {
            Ok(true) => self.connection.run(location, "analyze", sql::ANALYZE),
            Ok(false) => Err(StoreError::io(
                "analyze",
                &location.display,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "this role does not own the store's tables",
                ),
            )),
            Err(error) => Err(error),
        };
        if let Err(error) = analyzed {
            tracing::warn!(
                store = %location.display.display(),
                "the migration is committed, but the planner's statistics were not brought up to \
                 date ({error}): until autovacuum analyzes the tables, a read of a few events of \
                 a long session may be planned as a scan of all its rows (`ANALYZE` as the \
                 tables' owner brings them up to date)"
            );
        }
        Ok(())
    }
}

impl Shared {
    fn connection(&self) -> Result<MutexGuard<'_, Option<Connection>>, StoreError> {
        let mut guard = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if guard
            .as_ref()
            .is_none_or(|connection| connection.client.is_closed())
        {
            *guard = Some(Connection::open(&self.location, self.read_only)?);
        }
        Ok(guard)
    }

    /// Runs `work` on the shared connection; a lost connection is made
    /// again by the next call.
    fn with_connection<T>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut guard = self.connection()?;
        let connection = guard.as_mut().ok_or_else(|| lost(&self.location))?;
        let outcome = work(connection).map_err(self.error(operation));
        drop_if_lost(&mut guard, &outcome);
        outcome
    }

    fn read_header_row(&self, id: &SessionId) -> Result<HeaderRow, StoreError> {
        self.read_header_row_if_any(id)?
            .ok_or_else(|| self.not_found(id))
    }

    /// Session `id`'s row as stored (`None`: there is none). A row the
    /// server cannot send, its data damaged, is corruption of the session
    /// at seq 0.
    fn read_header_row_if_any(&self, id: &SessionId) -> Result<Option<HeaderRow>, StoreError> {
        let text = self.read_header_statement();
        self.with_connection("read a header", |connection| {
            let statement = connection.prepared(text)?;
            connection
                .client
                .query_opt(&statement, &[&id.as_str()])?
                .map(|row| header_row(&row))
                .transpose()
        })
        .map_err(|error| damaged_row(error, &self.location, id, 0))
    }

    /// How a session row is read: a schema from before version 3 (read,
    /// never upgraded, by a reader) has no `seed_source`.
    fn read_header_statement(&self) -> &'static str {
        match self.seed_sources || self.current.load(Ordering::Acquire) {
            true => sql::READ_HEADER,
            false => sql::READ_HEADER_BEFORE_V3,
        }
    }

    /// Brings the schema to the current version before a write, once; a
    /// store opened read-only refuses every write here.
    fn ensure_current(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::read_only(&self.location.display));
        }
        if self.current.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut guard = self.connection()?;
        let connection = guard.as_mut().ok_or_else(|| lost(&self.location))?;
        let upgraded = upgrade_schema(connection, &self.location);
        drop_if_lost(&mut guard, &upgraded);
        upgraded?;
        self.current.store(true, Ordering::Release);
        Ok(())
    }

    /// Hands a committed append to the notifier thread (started on first
    /// use); followers that miss it catch up by polling.
    fn notify(&self, id: &SessionId, seq: u64) {
        let mut notifier = self.notifier.lock().unwrap_or_else(PoisonError::into_inner);
        let notifier = notifier.get_or_insert_with(|| Notifier::start(self.location.clone()));
        if let Some(appended) = &notifier.appended {
            let _ = appended.send((id.clone(), seq));
        }
    }

    fn session_path(&self, id: &SessionId) -> PathBuf {
        session_locator(&self.location.display, id)
    }

    fn not_found(&self, id: &SessionId) -> StoreError {
        StoreError::NotFound {
            id: id.to_string(),
            path: self.location.display.clone(),
        }
    }

    fn error(&self, operation: &'static str) -> impl Fn(postgres::Error) -> StoreError + '_ {
        postgres_error(operation, &self.location)
    }
}

impl Connection {
    /// Connects; a `read_only` connection runs every transaction read-only
    /// and never sets anything else.
    fn open(location: &Location, read_only: bool) -> Result<Connection, StoreError> {
        let mut connection = Connection {
            client: connect(location, "connect")?,
            statements: HashMap::new(),
            durability: Durability::Buffered,
        };
        match read_only {
            true => connection.run(
                location,
                "make the connection read-only",
                sql::READ_ONLY_SESSION,
            )?,
            false => {
                connection.set_durability(location, Durability::Fsync)?;
                connection.require_utf8(location)?;
            }
        }
        Ok(connection)
    }

    /// Refuses to write to a database whose encoding is not UTF8: a log
    /// holds any Unicode text, and another encoding refuses some of it
    /// at the first append that carries it, with no session named.
    fn require_utf8(&mut self, location: &Location) -> Result<(), StoreError> {
        let encoding: String = self
            .client
            .query_one("SHOW server_encoding", &[])
            .and_then(|row| row.try_get(0))
            .map_err(postgres_error("read the database's encoding", location))?;
        if encoding == "UTF8" {
            return Ok(());
        }
        Err(StoreError::InvalidStore {
            store: location.display.clone(),
            reason: format!(
                "the database's encoding is {encoding}, and a store is written only to a UTF8 \
                 database, which holds every text a log can (CREATE DATABASE … ENCODING 'UTF8' \
                 TEMPLATE template0)"
            ),
        })
    }

    /// The prepared statement of `text`, prepared on first use.
    fn prepared(&mut self, text: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(text) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(text)?;
        self.statements.insert(text, statement.clone());
        Ok(statement)
    }

    fn run(
        &mut self,
        location: &Location,
        operation: &'static str,
        text: &str,
    ) -> Result<(), StoreError> {
        self.client
            .batch_execute(text)
            .map_err(postgres_error(operation, location))
    }

    /// Runs [`sql::WRITE_SNAPSHOT`]: keeps `bytes` as the state snapshot
    /// of session `id` taken at `anchor`.
    fn write_snapshot(
        &mut self,
        location: &Location,
        id: &SessionId,
        anchor: state_snapshot::SnapshotAnchor,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        self.query_one(
            location,
            "keep the state snapshot",
            sql::WRITE_SNAPSHOT,
            &[
                &id.as_str(),
                &sql_integer(anchor.seq),
                &i64::from(anchor.record_crc),
                &i64::from(state_snapshot::STATE_SNAPSHOT_FORMAT),
                &bytes,
            ],
        )
        .map(drop)
    }

    /// Runs [`sql::APPEND`] ([`sql::APPEND_ONE`] for one event): inserts
    /// `events` (not empty) of session `id` when its last seq is still
    /// `last_seq`, moving it to theirs in the same statement; how many
    /// rows it inserted (0: the last seq had moved, another writer got
    /// ahead).
    fn append(
        &mut self,
        location: &Location,
        operation: &'static str,
        id: &SessionId,
        last_seq: u64,
        events: &[EventRecord],
    ) -> Result<u64, StoreError> {
        let new_last = sql_integer(events.last().map_or(last_seq, EventRecord::seq));
        let (session, last_seq) = (id.as_str(), sql_integer(last_seq));
        match events {
            [event] => self.execute(
                location,
                operation,
                sql::APPEND_ONE,
                &[
                    &session,
                    &last_seq,
                    &new_last,
                    &sql_integer(event.seq()),
                    &sql_integer(event.ts()),
                    &event.event_type(),
                    &event.batch().map(sql_integer),
                    &event.body(),
                    &i64::from(record_crc(id, event.body().as_bytes())),
                ],
            ),
            _ => {
                let columns = Columns::of(id, events);
                self.execute(
                    location,
                    operation,
                    sql::APPEND,
                    &columns.after(&[&session, &last_seq, &new_last]),
                )
            }
        }
    }

    /// Runs an append again, alone, after the group it was in did not
    /// answer: the group may have committed it or not. Refused by the
    /// fence (or the primary key), it was committed by the group when the
    /// row at its last seq holds its last event's body; how many rows it
    /// inserted, as [`Connection::append`].
    fn append_again(&mut self, location: &Location, append: &Append) -> Result<u64, StoreError> {
        match append.run_alone(self, location) {
            Ok(0) => {}
            Err(error) if is_unique_violation(&error) => {}
            ran => return ran,
        }
        let Some(last) = append.events.last() else {
            return Ok(0);
        };
        let operation = "read an appended event";
        let stored = self.query_opt(
            location,
            operation,
            sql::READ_EVENT_BODY,
            &[&append.id.as_str(), &sql_integer(last.seq())],
        )?;
        let committed = match stored {
            Some(row) => {
                row.try_get::<_, &str>(0)
                    .map_err(postgres_error(operation, location))?
                    == last.body()
            }
            None => false,
        };
        Ok(if committed {
            append.events.len() as u64
        } else {
            0
        })
    }

    /// Runs [`sql::APPEND_GROUP`]: the appends of several sessions (no
    /// session twice) in one statement, all or none; the ids of the
    /// sessions whose last seq it moved, and so whose events it inserted.
    fn append_group(
        &mut self,
        location: &Location,
        appends: &[&Append],
    ) -> Result<HashSet<String>, StoreError> {
        let ids: Vec<&str> = appends.iter().map(|append| append.id.as_str()).collect();
        let last_seqs: Vec<i64> = appends.iter().map(|a| sql_integer(a.last_seq)).collect();
        let new_lasts: Vec<i64> = appends
            .iter()
            .map(|a| sql_integer(a.events.last().map_or(a.last_seq, EventRecord::seq)))
            .collect();
        let mut sessions = Vec::new();
        let mut columns = Columns::default();
        for append in appends {
            sessions.extend(append.events.iter().map(|_| append.id.as_str()));
            columns.extend(&append.id, &append.events);
        }
        let lock_keys: Vec<Option<i64>> = appends.iter().map(|append| append.lock_key).collect();
        let rows = self.with_prepared(
            location,
            "append",
            sql::APPEND_GROUP,
            |client, statement| {
                let mut parameters = columns.after(&[&ids, &last_seqs, &new_lasts, &sessions]);
                parameters.push(&lock_keys);
                client.query(statement, &parameters)
            },
        )?;
        rows.iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, postgres::Error>>()
            .map_err(postgres_error("append", location))
    }

    /// Runs the prepared statement `text` with `parameters`, as many rows
    /// as it changed.
    fn execute(
        &mut self,
        location: &Location,
        operation: &'static str,
        text: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.with_prepared(location, operation, text, |client, statement| {
            client.execute(statement, parameters)
        })
    }

    /// Runs the prepared statement `text` with `parameters`, its one row.
    fn query_one(
        &mut self,
        location: &Location,
        operation: &'static str,
        text: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, StoreError> {
        self.with_prepared(location, operation, text, |client, statement| {
            client.query_one(statement, parameters)
        })
    }

    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Runs the prepared statement `text` with `parameters`, its row if
    /// any.
    fn query_opt(
        &mut self,
        location: &Location,
        operation: &'static str,
        text: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        self.with_prepared(location, operation, text, |client, statement| {
            client.query_opt(statement, parameters)
        })
    }

    /// `call` with the client and the statement `text`, prepared once per
    /// connection; its errors named as `operation`.
    fn with_prepared<T>(
        &mut self,
        location: &Location,
        operation: &'static str,
        text: &'static str,
        call: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let statement = self
            .prepared(text)
            .map_err(postgres_error(operation, location))?;
        call(&mut self.client, &statement).map_err(postgres_error(operation, location))
    }

    /// Sets `synchronous_commit` for `durability`: at least `on` for
    /// `Fsync` (a stronger server setting is kept), `off` for `Buffered`.
    fn set_durability(
        &mut self,
        location: &Location,
        durability: Durability,
    ) -> Result<(), StoreError> {
        if self.durability == durability {
            return Ok(());
        }
        match durability {
            Durability::Fsync => {
                // Back to the connection's own setting first, so that a
                // stronger one (`remote_apply`) is kept after a buffered
                // write set it off.
                self.run(
                    location,
                    "reset synchronous_commit",
                    sql::SYNCHRONOUS_COMMIT_RESET,
                )?;
                let shown = self
                    .client
                    .query_one(sql::SHOW_SYNCHRONOUS_COMMIT, &[])
                    .and_then(|row| row.try_get::<_, String>(0))
                    .map_err(postgres_error("read synchronous_commit", location))?;
                if matches!(shown.as_str(), "off" | "local") {
                    self.run(
                        location,
                        "set synchronous_commit",
                        sql::SYNCHRONOUS_COMMIT_ON,
                    )?;
                }
            }
            Durability::Buffered => self.run(
                location,
                "set synchronous_commit",
                sql::SYNCHRONOUS_COMMIT_OFF,
            )?,
        }
        self.durability = durability;
        Ok(())
    }
}

impl Notifier {
    fn start(location: Location) -> Notifier {
        let (appended, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sessionlog-notify".to_owned())
            .spawn(move || run_notifier(&location, &receiver))
            .ok();
        Notifier {
            appended: thread.as_ref().map(|_| appended),
            thread,
        }
    }
}

impl Drop for Notifier {
    /// Sends what is queued, then stops.
    fn drop(&mut self) {
        self.appended = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The least time between two notification statements of one store: an
/// append after a quiet spell is announced at once, and the appends of a
/// busy spell together, each at most this late. A statement per append
/// is a transaction of the server's on the cores the appenders use: it
/// cost a lone durable writer a sixth of its rate on a disk that flushes
/// in a sixth of a millisecond (docs/PERFORMANCE.md, "PostgreSQL").
const NOTIFY_INTERVAL: Duration = Duration::from_millis(5);

/// The notifier's loop: takes every append waiting, keeps the last seq of
/// each session, and notifies once per session, all in one statement, at
/// most one statement every [`NOTIFY_INTERVAL`].
fn run_notifier(location: &Location, appended: &mpsc::Receiver<(SessionId, u64)>) {
    // The connection and its NOTIFY, prepared once: a statement given as
    // text would be parsed again, in a round trip of its own, every time.
    let mut client: Option<(Client, Statement)> = None;
    let channel = location.schema.clone();
    let mut last_sent: Option<Instant> = None;
    while let Ok((id, seq)) = appended.recv() {
        // Within NOTIFY_INTERVAL of the last statement: wait out the rest,
        // and take what queued meanwhile along.
        if let Some(wait) = last_sent.and_then(|sent| NOTIFY_INTERVAL.checked_sub(sent.elapsed())) {
            std::thread::sleep(wait);
        }
        let mut latest = BTreeMap::new();
        latest.insert(id, seq);
        while let Ok((id, seq)) = appended.try_recv() {
            let entry = latest.entry(id).or_insert(seq);
            *entry = (*entry).max(seq);
        }
        if client.as_ref().is_none_or(|(client, _)| client.is_closed()) {
            client = connect(location, "connect to notify")
                .ok()
                .and_then(|mut client| {
                    client.batch_execute(sql::SYNCHRONOUS_COMMIT_OFF).ok()?;
                    let notify = client.prepare(sql::NOTIFY).ok()?;
                    Some((client, notify))
                });
        }
        let Some((connected, notify)) = &mut client else {
            tracing::warn!(store = %location.display.display(), "no connection to notify followers; they will poll");
            continue;
        };
        let payloads: Vec<String> = latest
            .iter()
            .map(|(id, seq)| format!("{{\"session\":\"{id}\",\"seq\":{seq}}}"))
            .collect();
        if let Err(error) = connected.execute(&*notify, &[&channel, &payloads]) {
            tracing::warn!(store = %location.display.display(), %error, "notifications not sent; followers will poll");
            // Connect again next time: a connection the server ended may
            // not read as closed yet, and would fail every NOTIFY after.
            client = None;
        }
        last_sent = Some(Instant::now());
    }
}

/// The columns of event records, as the arrays `INSERT_EVENTS`, `APPEND`
/// and `APPEND_GROUP` unnest.
#[derive(Default)]
struct Columns<'a> {
    seq: Vec<i64>,
    ts: Vec<i64>,
    event_type: Vec<&'a str>,
    batch: Vec<Option<i64>>,
    body: Vec<&'a str>,
    crc: Vec<i64>,
}

impl<'a> Columns<'a> {
    fn of(id: &SessionId, records: &'a [EventRecord]) -> Columns<'a> {
        let mut columns = Columns::default();
        columns.extend(id, records);
        columns
    }

    /// The statement's parameters: `first`, then the six columns.
    fn after<'b>(&'b self, first: &[&'b (dyn ToSql + Sync)]) -> Vec<&'b (dyn ToSql + Sync)> {
        let columns: [&(dyn ToSql + Sync); 6] = [
            &self.seq,
            &self.ts,
            &self.event_type,
            &self.batch,
            &self.body,
            &self.crc,
        ];
        first.iter().copied().chain(columns).collect()
    }

    /// Adds `records` of session `id`.
    fn extend(&mut self, id: &SessionId, records: &'a [EventRecord]) {
        for record in records {
            self.seq.push(sql_integer(record.seq()));
            self.ts.push(sql_integer(record.ts()));
            self.event_type.push(record.event_type());
            self.batch.push(record.batch().map(sql_integer));
            self.body.push(record.body());
            self.crc
                .push(i64::from(record_crc(id, record.body().as_bytes())));
        }
    }
}

/// Inserts a session's header row and its events on `connection`, inside
/// the transaction the caller began.
fn insert_session(
    connection: &mut Connection,
    location: &Location,
    header: &SessionHeader,
    header_body: &str,
    seed_source: Option<&SessionId>,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    if let Some(source) = seed_source {
        check_seed_source(connection, location, source, header.seed_length)?;
    }
    // A fork by reference holds its seeded events as the source's rows.
    let seeded = seed_source.map_or(0, |_| header.seed_length);
    let last_seq = events.last().map_or(seeded, EventRecord::seq);
    let statement = connection
        .prepared(sql::INSERT_SESSION)
        .map_err(postgres_error("insert a session", location))?;
    let inserted = connection
        .client
        .execute(
            &statement,
            &[
                &header.id.as_str(),
                &sql_integer(header.created_at),
                &header.cwd,
                &header.parent_session.as_ref().map(SessionId::as_str),
                &sql_integer(header.seed_length),
                &sql_integer(header.delegation_depth),
                &header.sandbox_mode.map(|mode| mode.as_str()),
                &header.approval_policy.map(|policy| policy.as_str()),
                &header_body,
                &i64::from(record_crc(&header.id, header_body.as_bytes())),
                &sql_integer(last_seq),
                &seed_source.map(SessionId::as_str),
            ],
        )
        .map_err(postgres_error("insert a session", location))?;
    if inserted == 0 {
        return Err(StoreError::AlreadyExists {
            id: header.id.clone(),
            path: location.display.clone(),
        });
    }
    // No foreign key keeps event rows from outliving their session row
    // (schema version 4): rows of this id written by something else are
    // damage of the store, and a new session would read them as its own.
    let statement = connection
        .prepared(sql::HAS_EVENTS)
        .map_err(postgres_error("look for events of a new session", location))?;
    let orphaned: bool = connection
        .client
        .query_one(&statement, &[&header.id.as_str()])
        .and_then(|row| row.try_get(0))
        .map_err(postgres_error("look for events of a new session", location))?;
    if orphaned {
        return Err(crate::sql::checks::damaged(
            &location.display,
            format!(
                "events of session {:?} have no session row; no session of that id is created \
                 over them",
                header.id.as_str()
            ),
        ));
    }
    let statement = connection
        .prepared(sql::INSERT_EVENTS)
        .map_err(postgres_error("insert events", location))?;
    for chunk in events.chunks(INSERT_CHUNK_ROWS) {
        let columns = Columns::of(&header.id, chunk);
        connection
            .client
            .execute(&statement, &columns.after(&[&header.id.as_str()]))
            .map_err(postgres_error("insert events", location))?;
    }
    Ok(())
}

/// Checks, in the creating transaction, that session `source` exists and
/// records at least `seed_length` events (the rows a fork by reference
/// refers to, never removed once written), and keeps its row from being
/// removed until the transaction ends.
fn check_seed_source(
    connection: &mut Connection,
    location: &Location,
    source: &SessionId,
    seed_length: u64,
) -> Result<(), StoreError> {
    let statement = connection
        .prepared(sql::READ_SEED_SOURCE)
        .map_err(postgres_error("read the parent's last seq", location))?;
    let recorded: Option<i64> = connection
        .client
        .query_opt(&statement, &[&source.as_str()])
        .and_then(|row| row.map(|row| row.try_get(0)).transpose())
        .map_err(postgres_error("read the parent's last seq", location))?;
    check_seed_source_rows(&location.display, source, recorded, seed_length)
}

/// The recorded schema version, or `None` when the schema holds no
/// sessionlog tables.
fn read_version(
    connection: &mut Connection,
    location: &Location,
) -> Result<Option<i64>, StoreError> {
    let (present, integer, sessions, events, our_columns): (bool, bool, bool, bool, bool) =
        connection
            .query_one(location, "look for the schema", sql::STORE_TABLES, &[])
            .and_then(|row| {
                (|| {
                    Ok((
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                    ))
                })()
                .map_err(postgres_error("look for the schema", location))
            })?;
    if !present {
        // A schema the role may not use is left out of its search path:
        // its tables are not seen, which is not their absence.
        let access = schema_access(connection, location)?;
        if access.exists && !access.usable {
            return Err(StoreError::NotAStore {
                path: location.display.clone(),
                reason: format!(
                    "schema {schema} exists, but role {role} may not use it (no USAGE privilege \
                     on it), so its tables cannot be seen; the store's owner grants it (GRANT \
                     USAGE ON SCHEMA {schema} TO {role}, and SELECT on its tables to read, \
                     INSERT and UPDATE to write)",
                    schema = location.schema,
                    role = access.role
                ),
            });
        }
        return Ok(None);
    }
    // Another application's `schema_version` (a migration tool's) is no
    // store: sessionlog's comes with its session and event tables, of
    // their columns, and holds an integer. Nothing of such a schema is
    // read, upgraded or written.
    if !integer || !(sessions || events) || !our_columns {
        refuse_foreign_tables(connection, location)?;
    }
    let (rows, version): (i64, Option<i32>) = connection
        .query_one(location, "read the schema version", sql::READ_VERSION, &[])
        .and_then(|row| {
            (|| Ok::<_, postgres::Error>((row.try_get(0)?, row.try_get(1)?)))()
                .map_err(postgres_error("read the schema version", location))
        })?;
    // The one row a store's version table holds, gone or doubled, is a
    // store damaged.
    let version = match (rows, version) {
        (1, Some(version)) => version,
        _ => {
            return Err(crate::sql::checks::damaged(
                &location.display,
                format!(
                    "the sessionlog store in schema {} has {rows} rows in schema_version \
                     (a store's has one: its version)",
                    location.schema
                ),
            ))
        }
    };
    // A store's version with one of its tables gone is a store damaged,
    // not another application's.
    if !(sessions && events) {
        return Err(crate::sql::checks::damaged(
            &location.display,
            format!(
                "the sessionlog store in schema {} (version {version}) has no {} table",
                location.schema,
                if sessions { "events" } else { "sessions" }
            ),
        ));
    }
    Ok(Some(i64::from(version)))
}

/// Creates the schema when missing and brings it to
/// [`POSTGRES_SCHEMA_VERSION`] in one transaction, or refuses a newer one.
fn upgrade_schema(connection: &mut Connection, location: &Location) -> Result<(), StoreError> {
    if read_version(connection, location)? == Some(POSTGRES_SCHEMA_VERSION) {
        return Ok(());
    }
    connection.run(location, "begin the schema upgrade", sql::BEGIN)?;
    let outcome = (|| {
        let key = lock_key("upgrade", &location.schema, "");
        connection.query_one(
            location,
            "lock the schema upgrade",
            sql::LOCK_SCHEMA_UPGRADE,
            &[&key],
        )?;
        let create = sql::CREATE_SCHEMA.replace("$schema", &location.quoted_schema());
        connection.run(location, "create the schema", &create)?;
        let found = read_version(connection, location)?;
        if found.is_none() {
            refuse_foreign_tables(connection, location)?;
        }
        let found = found.unwrap_or(0);
        if found > POSTGRES_SCHEMA_VERSION {
            return Err(newer_schema(location, found));
        }
        let steps = sql::SCHEMA_STEPS.iter().enumerate();
        for (from_version, step) in steps.skip(usize::try_from(found).unwrap_or(usize::MAX)) {
            connection.run(location, "upgrade the schema", step)?;
            tracing::info!(store = %location.display.display(), version = from_version + 1, "schema upgraded");
        }
        let version = i32::try_from(POSTGRES_SCHEMA_VERSION).unwrap_or(i32::MAX);
        connection
            .client
            .execute(sql::WRITE_VERSION, &[&version])
            .map_err(postgres_error("set the schema version", location))?;
        connection.run(location, "commit the schema upgrade", sql::COMMIT)
    })();
    if outcome.is_err() {
        let _ = connection.client.batch_execute(sql::ROLLBACK);
    }
    outcome
}

/// What [`sql::SCHEMA_ACCESS`] says of the store's schema.
struct SchemaAccess {
    exists: bool,
    usable: bool,
    role: String,
    database: String,
}

fn schema_access(
    connection: &mut Connection,
    location: &Location,
) -> Result<SchemaAccess, StoreError> {
    const OPERATION: &str = "look at the schema's privileges";
    let row = connection.query_one(location, OPERATION, sql::SCHEMA_ACCESS, &[&location.schema])?;
    (|| {
        Ok(SchemaAccess {
            exists: row.try_get(0)?,
            usable: row.try_get(1)?,
            role: row.try_get(2)?,
            database: row.try_get(3)?,
        })
    })()
    .map_err(postgres_error(OPERATION, location))
}

/// Refuses to make a store in a schema that already holds tables (or
/// views) of another application: a store lives in a schema of its own,
/// as a SQLite store is never made in another application's database.
fn refuse_foreign_tables(
    connection: &mut Connection,
    location: &Location,
) -> Result<(), StoreError> {
    let rows = connection
        .client
        .query(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
              ORDER BY c.relname LIMIT 5",
            &[&location.schema],
        )
        .map_err(postgres_error(
            "look for other tables in the schema",
            location,
        ))?;
    if rows.is_empty() {
        return Ok(());
    }
    let names = rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<Vec<String>, _>>()
        .map_err(postgres_error(
            "look for other tables in the schema",
            location,
        ))?;
    // Four are named; a fifth only says that there are more.
    let more = if names.len() > 4 { ", …" } else { "" };
    let names = &names[..names.len().min(4)];
    Err(StoreError::NotAStore {
        path: location.display.clone(),
        reason: format!(
            "schema {} holds tables of another application ({}{more}) and no sessionlog store: \
             a store lives in a schema of its own (name another with ?schema=NAME)",
            location.schema,
            names.join(", ")
        ),
    })
}

fn newer_schema(location: &Location, found: i64) -> StoreError {
    StoreError::NewerSchema {
        path: location.display.clone(),
        found,
        supported: POSTGRES_SCHEMA_VERSION,
    }
}

/// Connects to the store's database, giving up once the connect timeout
/// (`connect_timeout`, `PGCONNECT_TIMEOUT`, 10 s by default) has passed for
/// each host it may try, the server's answer included, as libpq does. The
/// client bounds only the TCP connect: a server that takes the connection
/// and never answers (stopped, overloaded, a forward with nothing behind
/// it) would hold the command forever. The attempt runs on a thread of its
/// own, left behind when it times out; it ends with the connection.
fn connect(location: &Location, operation: &'static str) -> Result<Client, StoreError> {
    let config = location.config.clone();
    let hosts = u32::try_from(config.get_hosts().len().max(1)).unwrap_or(u32::MAX);
    let limit = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(Duration::from_secs(10))
        .saturating_mul(hosts);
    let (sender, receiver) = mpsc::sync_channel(1);
    let attempt = std::thread::Builder::new()
        .name("sessionlog postgres connect".to_owned())
        .spawn(move || {
            let _ = sender.send(config.connect(NoTls));
        });
    let connected = match attempt {
        Ok(_) => receiver.recv_timeout(limit),
        // No thread to spare: connect here, bounded as the client bounds it.
        Err(_) => Ok(location.config.connect(NoTls)),
    };
    match connected {
        Ok(connected) => connected.map_err(postgres_error(operation, location)),
        Err(_) => Err(StoreError::Io {
            operation,
            path: location.display.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the server did not complete the connection within {} s (its connect \
                     timeout: connect_timeout in the URL or PGCONNECT_TIMEOUT, 10 s when \
                     neither is given)",
                    limit.as_secs_f64()
                ),
            ),
        }),
    }
}

/// The last seq session `id`'s row records (`None`: no row) and the
/// lowest and highest seqs of its event rows, in one statement.
fn row_bounds(connection: &mut Connection, id: &SessionId) -> Result<RowBounds, postgres::Error> {
    let statement = connection.prepared(sql::READ_ROW_BOUNDS)?;
    let row = connection.client.query_one(&statement, &[&id.as_str()])?;
    Ok(RowBounds {
        recorded: row.try_get(0)?,
        min: row.try_get(1)?,
        max: row.try_get(2)?,
    })
}

/// The session whose rows hold the seeded events of session `id` (whose
/// row is `row`), for a fork by reference.
fn seed_source(
    store: &Path,
    id: &SessionId,
    row: &HeaderRow,
) -> Result<Option<SessionId>, StoreError> {
    row.seed_source
        .as_deref()
        .map(SessionId::parse)
        .transpose()
        .map_err(|error| {
            corrupt(
                store,
                id,
                0,
                format!("the session row names an invalid seed source ({error})"),
            )
        })
}

fn header_row(row: &Row) -> Result<HeaderRow, postgres::Error> {
    Ok(HeaderRow {
        body: row.try_get(0)?,
        crc: row.try_get(1)?,
        last_seq: row.try_get(2)?,
        seed_source: row.try_get(3)?,
        columns: HeaderColumns {
            created_at: row.try_get(4)?,
            cwd: row.try_get(5)?,
            parent_session: row.try_get(6)?,
            seed_length: row.try_get(7)?,
            delegation_depth: row.try_get(8)?,
            sandbox_mode: row.try_get(9)?,
            approval_policy: row.try_get(10)?,
        },
    })
}

fn push_event_row(page: &mut RowPage, row: &Row) -> Result<(), postgres::Error> {
    page.push(
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get::<_, &str>(2)?.as_bytes(),
        row.try_get(3)?,
        row.try_get::<_, &str>(4)?.as_bytes(),
        row.try_get(5)?,
    );
    Ok(())
}

/// The advisory-lock key of `name` in `schema`: FNV-1a (64 bits) over
/// `sessionlog`, the kind of lock, the schema and the name, NUL-separated.
/// Fixed by this definition, so every host and build derives the same key.
fn lock_key(kind: &str, schema: &str, name: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for part in ["sessionlog", kind, schema, name] {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

fn is_unique_violation(error: &StoreError) -> bool {
    matches!(error, StoreError::Postgres { code: Some(code), .. } if code == SqlState::UNIQUE_VIOLATION.code())
}

/// `error`, met reading session `id`'s rows at `seq`, as corruption of that
/// session when the server says its data is damaged (SQLSTATE `XX001`
/// data_corrupted, `XX002` index_corrupted: a lost TOAST chunk, a page
/// that fails its checks), as SQLite's damaged page is: damage is exit 2,
/// never an I/O error. Any other error is what it is.
fn damaged_row(error: StoreError, location: &Location, id: &SessionId, seq: u64) -> StoreError {
    match error {
        StoreError::Postgres {
            code: Some(code),
            detail,
            ..
        } if matches!(code.as_str(), "XX001" | "XX002") => crate::sql::checks::corrupt_session(
            &location.display,
            id,
            seq,
            format!("the row cannot be read: {detail}"),
        ),
        other => other,
    }
}

/// `error`, met listing the sessions, as damage of the database when it
/// is a row the server cannot send (its data damaged: XX001, XX002).
fn damaged_table(error: StoreError, location: &Location) -> StoreError {
    match error {
        StoreError::Postgres {
            code: Some(code),
            detail,
            ..
        } if matches!(code.as_str(), "XX001" | "XX002") => crate::sql::checks::damaged(
            &location.display,
            format!("the sessions cannot be listed: {detail}"),
        ),
        other => other,
    }
}

/// Forgets the shared connection when `outcome` shows it lost, so that the
/// next call connects again. A closed client is not the only sign: a server
/// that ends a connection (`pg_terminate_backend`, a restart) sends its
/// FATAL error as the answer to the next query, and the client may take it
/// before it reads the end of the stream; reused, that connection would
/// fail the call after too, with "connection reset by peer".
fn drop_if_lost<T>(connection: &mut Option<Connection>, outcome: &Result<T, StoreError>) {
    let lost = connection
        .as_ref()
        .is_some_and(|connection| connection.client.is_closed())
        || outcome.as_ref().is_err_and(StoreError::is_connection_lost);
    if lost {
        *connection = None;
    }
}

fn lost(location: &Location) -> StoreError {
    StoreError::InvalidStore {
        store: location.display.clone(),
        reason: "the connection to the database was lost".to_owned(),
    }
}

/// `error`, which an operation on session `id` met, naming the session
/// (`URL#id`) as the store's other errors of one session do: in a store that
/// many writers share, the store alone does not say which append failed.
fn of_session(mut error: StoreError, id: &SessionId) -> StoreError {
    if let StoreError::Postgres { store, .. } = &mut error {
        let named = store
            .as_os_str()
            .to_string_lossy()
            .ends_with(&format!("#{id}"));
        if !named {
            *store = session_locator(store, id);
        }
    }
    error
}

/// A `StoreError::Postgres` naming the operation and the store (never its
/// password), with the server's message when it sent one.
fn postgres_error<'a>(
    operation: &'static str,
    location: &'a Location,
) -> impl Fn(postgres::Error) -> StoreError + 'a {
    move |source| {
        let code = source.code().map(|code| code.code().to_owned());
        let detail = match source.as_db_error() {
            Some(db) => format!(
                "{}: {} (SQLSTATE {})",
                db.severity(),
                db.message(),
                db.code().code()
            ),
            None => {
                let mut text = source.to_string();
                let mut cause = std::error::Error::source(&source);
                while let Some(inner) = cause {
                    text.push_str(&format!(": {inner}"));
                    cause = inner.source();
                }
                if source.is_closed() {
                    text.push_str(" (the server closed the connection or went away)");
                }
                text
            }
        };
        StoreError::Postgres {
            operation,
            store: location.display.clone(),
            detail,
            code,
            source,
        }
    }
}

#[cfg(test)]
mod tests;
