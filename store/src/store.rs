//! `Store`: one API over every backend, chosen by path or URL, and `fork`,
//! written once for all.
//!
//! `Store` is an enum, not a trait object. There are exactly three backends
//! and both live in this crate, so an enum keeps every call a plain match
//! the compiler checks for exhaustiveness, lets each backend keep its own
//! concrete types (`LogReader`, `SqliteEvents`, `Snapshot`) without
//! boxing every return, and keeps `SessionWriter`'s `LogSink` seam private.
//! A third backend would add a variant and the compiler would list every
//! method to extend; a trait would only pay off if backends were written
//! outside this crate, which the format's byte-identity promise rules out.

use std::path::{Path, PathBuf};

use sessionlog_projections::{delegate_from_state, Defaults, DelegationError, SessionState};
use sessionlog_schema::{
    DecodedHeader, EventRecord, HeaderVocabularyError, SessionHeader, SessionId, TornTail,
};

use crate::jsonl::{JsonlStore, ListEntry};
use crate::reader::{EventBody, SessionStream, Snapshot};
use crate::sql::checks::StoreAudit;
use crate::sql::events::SqlEvents;
#[cfg(feature = "postgres")]
use crate::sql::postgres::PostgresStore;
#[cfg(feature = "sqlite")]
use crate::sql::sqlite::SqliteStore;
use crate::writer::{now_ms, Durability, SessionWriter, WriterOptions};
use crate::StoreError;

/// The events of one session, in order: the good prefix of a JSONL log, or
/// the rows of a database session, read in bounded memory.
pub type EventStream = Box<dyn Iterator<Item = Result<EventRecord, StoreError>> + Send>;

/// A store of sessions: a folder of JSONL logs, a SQLite database or a
/// PostgreSQL database.
#[derive(Debug, Clone)]
pub enum Store {
    /// A folder of `<id>.jsonl` logs.
    Jsonl(JsonlStore),
    /// A SQLite database.
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteStore),
    /// A schema of a PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(PostgresStore),
}

/// A read of a whole store as of one moment ([`Store::hold_read`]), held
/// until dropped.
#[derive(Debug)]
#[must_use = "the read is held only while the guard lives"]
pub struct HeldRead {
    #[cfg(feature = "sqlite")]
    _sqlite: Option<crate::sql::sqlite::HeldRead>,
}

/// Which backend a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A folder of JSONL logs.
    Jsonl,
    /// A SQLite database file.
    Sqlite,
    /// A PostgreSQL database (`postgres://` or `postgresql://`).
    Postgres,
}

impl Backend {
    /// The backend `path` names: a `postgres://` or `postgresql://` URL is
    /// PostgreSQL; `.db` and `.sqlite` files, and existing files that start
    /// with SQLite's magic bytes, are SQLite; anything else is a JSONL
    /// folder.
    pub fn of_path(path: &Path) -> Backend {
        if path.to_str().is_some_and(is_postgres_url) {
            return Backend::Postgres;
        }
        let extension = path.extension().and_then(|e| e.to_str());
        if matches!(extension, Some("db" | "sqlite")) {
            return Backend::Sqlite;
        }
        if path.is_file() && starts_with_sqlite_magic(path) {
            return Backend::Sqlite;
        }
        Backend::Jsonl
    }
}

/// The rows of a database session as a `SessionStream` (no torn tail: a
/// transaction is whole or absent).
struct RowStream {
    decoded: DecodedHeader,
    events: SqlEvents,
}

impl std::fmt::Debug for RowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowStream")
            .field("session", &self.decoded.header.id)
            .finish()
    }
}

impl SessionStream for RowStream {
    fn header(&self) -> &SessionHeader {
        &self.decoded.header
    }

    fn header_vocabulary_errors(&self) -> &[HeaderVocabularyError] {
        &self.decoded.vocabulary_errors
    }

    fn header_body(&self) -> &str {
        &self.decoded.body
    }

    fn next_event(&mut self) -> Result<Option<EventRecord>, StoreError> {
        self.events.next().transpose()
    }

    fn seed_parent(&self) -> Option<&SessionHeader> {
        self.events.seed_parent()
    }

    fn next_body(&mut self) -> Result<Option<EventBody<'_>>, StoreError> {
        self.events.next_body()
    }

    fn finish(mut self: Box<Self>) -> Result<Option<TornTail>, StoreError> {
        // Every row checked, no record made.
        while self.events.next_body()?.is_some() {}
        Ok(None)
    }
}

impl Store {
    /// Opens an existing store: a PostgreSQL URL, a SQLite database (`.db`,
    /// `.sqlite`) or a folder of JSONL logs. A missing path, or a database
    /// without a sessionlog schema, is an error (use [`Store::create`]), so
    /// a mistyped path never becomes an empty store.
    ///
    /// ```
    /// use sessionlog_store::{Backend, Store};
    ///
    /// # let folder = tempfile::tempdir()?;
    /// # let path = folder.path().join("sessions");
    /// # let store = sessionlog_store::Store::create(&path)?;
    /// # let id = sessionlog_schema::SessionId::parse("a")?;
    /// # let header = sessionlog_schema::SessionHeader::root(id.clone(), 0, "/work".into());
    /// # store.create_session(&header, &[], sessionlog_store::Durability::Fsync)?;
    /// # let mut writer = store.open_writer(&id, sessionlog_store::WriterOptions::default())?;
    /// # writer.append(sessionlog_schema::TurnStart::new("t1").into(), None)?;
    /// # drop(writer);
    /// let store = Store::open(&path)?;
    /// assert_eq!(store.backend(), Backend::Jsonl);
    /// assert_eq!(store.ids()?, [id]);
    /// assert!(Store::open(&folder.path().join("mistyped")).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        match Backend::of_path(path) {
            #[cfg(feature = "postgres")]
            Backend::Postgres => PostgresStore::open(path).map(Store::Postgres),
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => Err(postgres_unsupported(path)),
            Backend::Sqlite => {
                require_existing(path, "no such store; create it first")?;
                refuse_non_regular_database(path)?;
                sqlite_store(path, SqliteStore::open_existing)
            }
            Backend::Jsonl => {
                require_existing(path, "no such store; create it first")?;
                JsonlStore::open(path).map(Store::Jsonl)
            }
        }
    }

    /// Opens an existing store for reading only: nothing in it is created,
    /// upgraded or written, so a store on a read-only medium or readable
    /// only can be read (see [`SqliteStore::open_read_only`] and
    /// `PostgresStore::open_read_only`). A database opened so refuses every
    /// write, and so does a folder of logs ([`JsonlStore::open_read_only`]).
    ///
    /// ```
    /// use sessionlog_schema::{SessionHeader, SessionId, TurnStart};
    /// use sessionlog_store::{Durability, Store, WriterOptions};
    ///
    /// let folder = tempfile::tempdir()?;
    /// let path = folder.path().join("sessions.db");
    /// let store = Store::create(&path)?;
    /// let id = SessionId::parse("a")?;
    /// store.create_session(&SessionHeader::root(id.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
    /// store.open_writer(&id, WriterOptions::default())?.append(TurnStart::new("t1").into(), None)?;
    ///
    /// let reading = Store::open_read_only(&path)?;
    /// assert_eq!(reading.snapshot(&id)?.events.len(), 1);
    /// assert!(reading.open_writer(&id, WriterOptions::default()).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        match Backend::of_path(path) {
            #[cfg(feature = "postgres")]
            Backend::Postgres => PostgresStore::open_read_only(path).map(Store::Postgres),
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => Err(postgres_unsupported(path)),
            Backend::Sqlite => {
                require_existing(path, "no such store")?;
                refuse_non_regular_database(path)?;
                sqlite_store(path, SqliteStore::open_read_only)
            }
            Backend::Jsonl => {
                require_existing(path, "no such store")?;
                JsonlStore::open_read_only(path).map(Store::Jsonl)
            }
        }
    }

    /// Opens the store at `path`, creating it when missing: the schema of a
    /// PostgreSQL URL, a database for `.db` and `.sqlite`, otherwise a
    /// folder (0700).
    pub fn create(path: &Path) -> Result<Store, StoreError> {
        refuse_url_lookalike(path)?;
        refuse_store_name_lookalike(path)?;
        match Backend::of_path(path) {
            #[cfg(feature = "postgres")]
            Backend::Postgres => PostgresStore::create(path).map(Store::Postgres),
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => Err(postgres_unsupported(path)),
            Backend::Sqlite => {
                if path.symlink_metadata().is_ok() {
                    refuse_non_regular_database(path)?;
                }
                sqlite_store(path, SqliteStore::open)
            }
            Backend::Jsonl => JsonlStore::create_folder(path).map(Store::Jsonl),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            Store::Jsonl(_) => Backend::Jsonl,
            #[cfg(feature = "sqlite")]
            Store::Sqlite(_) => Backend::Sqlite,
            #[cfg(feature = "postgres")]
            Store::Postgres(_) => Backend::Postgres,
        }
    }

    /// The folder, the database file, or the database URL (without its
    /// password).
    pub fn path(&self) -> &Path {
        match self {
            Store::Jsonl(store) => store.folder(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.path(),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.path(),
        }
    }

    /// Where session `id` lives, as errors name it: its log file, or
    /// `<database>#<id>`.
    pub fn session_path(&self, id: &SessionId) -> PathBuf {
        match self {
            Store::Jsonl(store) => store.log_path(id),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => crate::sql::sqlite::session_locator(store.path(), id),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => crate::sql::session_locator(store.path(), id),
        }
    }

    /// Whether session `id` exists.
    pub fn contains(&self, id: &SessionId) -> Result<bool, StoreError> {
        match self {
            Store::Jsonl(store) => store.contains(id),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.contains(id),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.contains(id),
        }
    }

    /// Makes the name of session `id`, found in the store, durable: a
    /// folder of logs is fsynced (the command that published the log may
    /// have been killed before it synced it, and a power loss could still
    /// drop the name); a database's committed session already is. For a
    /// caller that reports a session it found as written (`import`'s
    /// "already imported").
    pub fn make_name_durable(&self, id: &SessionId) -> Result<(), StoreError> {
        match self {
            Store::Jsonl(store) => {
                let log = store.log_path(id);
                let folder = folder_of(&log);
                store
                    .io()
                    .sync_folder(folder)
                    .map_err(|source| StoreError::io("fsync folder", folder, source))
            }
            #[cfg(feature = "sqlite")]
            Store::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Store::Postgres(_) => Ok(()),
        }
    }

    /// The checks [`create_session`](Self::create_session) makes of a new
    /// session before it writes anything (every rule, values both backends
    /// store), made alone: for a caller that writes several sessions and
    /// must refuse all of them before it writes the first (`import`).
    pub fn check_new_session(
        &self,
        header: &SessionHeader,
        events: &[EventRecord],
    ) -> Result<(), StoreError> {
        crate::jsonl::check_new_session(&self.session_path(&header.id), header, events).map(drop)
    }

    /// Creates a session atomically with its header and first `events`,
    /// after checking them against every rule and that a reader would take
    /// them whole (seqs from 1 in order, batches complete, `data` JSON);
    /// an existing id is refused.
    pub fn create_session(
        &self,
        header: &SessionHeader,
        events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        match self {
            Store::Jsonl(store) => store.create(header, events, durability),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.create(header, events, durability),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.create_session(header, events, durability),
        }
    }

    /// The good prefix of session `id`, in memory.
    ///
    /// ```
    /// # let folder = tempfile::tempdir()?;
    /// # let path = folder.path().join("sessions");
    /// # let store = sessionlog_store::Store::create(&path)?;
    /// # let id = sessionlog_schema::SessionId::parse("a")?;
    /// # let header = sessionlog_schema::SessionHeader::root(id.clone(), 0, "/work".into());
    /// # store.create_session(&header, &[], sessionlog_store::Durability::Fsync)?;
    /// # let mut writer = store.open_writer(&id, sessionlog_store::WriterOptions::default())?;
    /// # writer.append(sessionlog_schema::TurnStart::new("t1").into(), None)?;
    /// # drop(writer);
    /// let snapshot = store.snapshot(&id)?;
    /// assert_eq!(snapshot.header.id, id);
    /// assert_eq!(snapshot.events[0].event_type(), "turn/start");
    /// assert!(snapshot.torn_tail.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        match self {
            Store::Jsonl(store) => store.snapshot(id),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.snapshot(id),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.snapshot(id),
        }
    }

    /// The header record of session `id` as stored (decoded, with its body
    /// bytes) and a stream of its events.
    pub fn records(&self, id: &SessionId) -> Result<(DecodedHeader, EventStream), StoreError> {
        match self {
            Store::Jsonl(store) => {
                let reader = store.reader(id)?;
                let header = DecodedHeader {
                    header: reader.header().clone(),
                    vocabulary_errors: reader.header_vocabulary_errors().to_vec(),
                    body: reader.header_body().to_owned(),
                };
                Ok((header, Box::new(reader)))
            }
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => Ok((store.decoded_header(id)?, Box::new(store.events(id)?))),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => Ok((store.decoded_header(id)?, Box::new(store.events(id)?))),
        }
    }

    /// A streaming reader of session `id`: its header, its good prefix
    /// event by event, then what was found at its end.
    pub fn stream(&self, id: &SessionId) -> Result<Box<dyn SessionStream>, StoreError> {
        Ok(match self {
            Store::Jsonl(store) => Box::new(store.reader(id)?),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => {
                let (decoded, events) = store.header_and_events_from(id, 1)?;
                Box::new(RowStream { events, decoded })
            }
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => Box::new(RowStream {
                decoded: store.decoded_header(id)?,
                events: store.events(id)?,
            }),
        })
    }

    /// Makes every read of this store see one moment of it until the
    /// returned guard is dropped: what a store-wide `verify` or `stats`
    /// reads through. On SQLite it is one read transaction on the store's
    /// reader connection (one snapshot of the database, and no lock taken
    /// per statement; the WAL cannot be checkpointed past it meanwhile). A
    /// JSONL folder has no such moment (each log is read as it is when
    /// opened), and on PostgreSQL each read is its own transaction, so
    /// there the guard holds nothing. Hold it only to read: a writer
    /// opened meanwhile would fold its session as of the held moment (and
    /// its first append meet a `Conflict` if the session moved on since).
    pub fn hold_read(&self) -> Result<HeldRead, StoreError> {
        Ok(HeldRead {
            #[cfg(feature = "sqlite")]
            _sqlite: match self {
                Store::Sqlite(store) => Some(store.hold_read()?),
                _ => None,
            },
        })
    }

    /// [`Store::hold_read`] for reads on `readers` threads side by side:
    /// this store and more handles of it, each with a read held, that
    /// every one of them sees as of the same moment. On SQLite each handle
    /// has a reader connection of its own, and fewer come back when no
    /// moment can be caught or no more connections opened (see
    /// `SqliteStore::hold_read_for`); a JSONL folder's handles are clones
    /// (each log is read as it is when opened). On PostgreSQL, whose reads
    /// share one connection, only this store comes back.
    pub fn hold_read_for(&self, readers: usize) -> Result<Vec<(Store, HeldRead)>, StoreError> {
        let held = || HeldRead {
            #[cfg(feature = "sqlite")]
            _sqlite: None,
        };
        Ok(match self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store
                .hold_read_for(readers)?
                .into_iter()
                .map(|(store, read)| {
                    (
                        Store::Sqlite(store),
                        HeldRead {
                            _sqlite: Some(read),
                        },
                    )
                })
                .collect(),
            Store::Jsonl(_) => (0..readers.max(1))
                .map(|_| (self.clone(), held()))
                .collect(),
            #[allow(unreachable_patterns)]
            _ => vec![(self.clone(), self.hold_read()?)],
        })
    }

    /// The header of session `id` and a stream of its events.
    pub fn events(&self, id: &SessionId) -> Result<(SessionHeader, EventStream), StoreError> {
        let (decoded, events) = self.records(id)?;
        Ok((decoded.header, events))
    }

    /// The events of session `id` from `from_seq` on. A database starts there;
    /// JSONL reads from the top and skips the earlier ones.
    pub fn events_from(&self, id: &SessionId, from_seq: u64) -> Result<EventStream, StoreError> {
        match self {
            Store::Jsonl(store) => {
                let reader = store.reader(id)?;
                Ok(Box::new(reader.filter(move |record| {
                    record
                        .as_ref()
                        .map_or(true, |record| record.seq() >= from_seq)
                })))
            }
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => Ok(Box::new(store.events_from(id, from_seq)?)),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => Ok(Box::new(store.events_from(id, from_seq)?)),
        }
    }

    /// The last seq of session `id` as its database records it, so that a
    /// read of its last events can start there ([`Store::events_from`]);
    /// `None` for a log file, whose end is known only by reading it.
    pub fn recorded_last_seq(&self, id: &SessionId) -> Result<Option<u64>, StoreError> {
        match self {
            Store::Jsonl(_) => Ok(None),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.last_seq(id).map(Some),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.last_seq(id).map(Some),
        }
    }

    /// The last event of session `id`'s good prefix, read from its end (a
    /// log from the end of its file, a database from the seq its session
    /// row records); `None` when it holds only its header. What it reads
    /// is checked as any read checks it.
    pub fn last_event(&self, id: &SessionId) -> Result<Option<EventRecord>, StoreError> {
        match self.recorded_last_seq(id)? {
            Some(0) => Ok(None),
            Some(last) => self.events_from(id, last)?.next().transpose(),
            None => Ok(
                crate::read_last_events(&self.session_path(id), Some(id.clone()), 1)?
                    .events
                    .pop(),
            ),
        }
    }

    /// Whether session `id` ends in a seal ([`last_event`](Self::last_event)):
    /// the `ends_sealed` hint of [`fold_through`](crate::fold_through). A
    /// session whose end cannot be read says no; the fold that follows
    /// reports what is wrong with it.
    pub fn ends_in_seal(&self, id: &SessionId) -> bool {
        crate::last::is_seal(self.last_event(id))
    }

    /// The state of session `id` as of its last seq, the one a writer
    /// opened now would start from: folded from the session's state
    /// snapshot and only the events after it when the snapshot still
    /// matches the log, from the start otherwise (docs/FORMAT.md, "State
    /// snapshots"); every event read is checked as any read checks it.
    /// Reads only (a JSONL torn tail is left to the next writer).
    ///
    /// ```
    /// use sessionlog_schema::{SessionHeader, SessionId, TurnStart};
    /// use sessionlog_store::{Durability, Store, WriterOptions};
    ///
    /// let folder = tempfile::tempdir()?;
    /// let store = Store::create(&folder.path().join("sessions"))?;
    /// let id = SessionId::parse("a")?;
    /// store.create_session(&SessionHeader::root(id.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
    /// store.open_writer(&id, WriterOptions::default())?.append(TurnStart::new("t1").into(), None)?;
    /// let state = store.current_state(&id)?;
    /// assert_eq!((state.seq(), state.open_turn()), (1, Some("t1")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current_state(&self, id: &SessionId) -> Result<SessionState, StoreError> {
        match self {
            Store::Jsonl(store) => store.current_state(id),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.current_state(id),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.current_state(id),
        }
    }

    /// The ids of every session, sorted.
    pub fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        match self {
            Store::Jsonl(store) => store.ids(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.ids(),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.ids(),
        }
    }

    /// Checks the store as a whole and lists its sessions (see
    /// [`StoreAudit`]): for a database, session rows with an invalid id,
    /// events without a session row and, with `engine_check`, SQLite's own
    /// check of every page. A folder of logs has no such damage: a file
    /// whose name is not a session's is not one.
    #[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
    pub fn audit(&self, engine_check: bool) -> Result<StoreAudit, StoreError> {
        match self {
            Store::Jsonl(store) => Ok(StoreAudit {
                ids: store.ids()?,
                ..StoreAudit::default()
            }),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.audit(engine_check),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.audit(),
        }
    }

    /// The part of [`audit`](Self::audit) that lists the sessions (see
    /// [`SqliteStore::list_sessions`]): in a database, events without a
    /// session row are left to
    /// [`events_accounted_for`](Self::events_accounted_for) and
    /// [`unowned_events`](Self::unowned_events), in SQLite and
    /// PostgreSQL alike.
    pub fn list_sessions(&self) -> Result<StoreAudit, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.list_sessions(),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.list_sessions(),
            Store::Jsonl(_) => self.audit(false),
        }
    }

    /// Whether counting rules out events without a session row that
    /// [`list_sessions`](Self::list_sessions) left out (see
    /// [`SqliteStore::events_accounted_for`]); in PostgreSQL, whether the
    /// owners of events listed have their session rows; always for a
    /// folder of logs.
    pub fn events_accounted_for(&self) -> Result<bool, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.events_accounted_for(),
            #[cfg(feature = "postgres")]
            // Listing the owners of events is the one scan: a store that
            // has none without a session row is vouched for by it, and
            // `unowned_events` lists them again only when there are.
            Store::Postgres(store) => Ok(store.unowned_events()?.is_empty()),
            Store::Jsonl(_) => Ok(true),
        }
    }

    /// SQLite's own check of every page of a database (see
    /// [`SqliteStore::engine_check`]), what [`audit`](Self::audit) runs
    /// with `engine_check`; nothing for the other backends, whose files or
    /// server have no such check to run.
    pub fn engine_check(&self) -> Result<Vec<StoreError>, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.engine_check(),
            #[allow(unreachable_patterns)]
            _ => Ok(Vec::new()),
        }
    }

    /// Events without a session row, listed one owner of events at a
    /// time (see [`SqliteStore::unowned_events`]): what an
    /// [`audit`](Self::audit) that counted them away
    /// ([`StoreAudit::unowned_events_counted`]) leaves to a reader that
    /// has found a session short of rows; in PostgreSQL, the owners of
    /// events without a session row, listed in one statement; nothing for
    /// a folder of logs.
    pub fn unowned_events(&self) -> Result<Vec<StoreError>, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.unowned_events(),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.unowned_events(),
            Store::Jsonl(_) => Ok(Vec::new()),
        }
    }

    /// Whether `other` is this very store where the two paths or URLs do
    /// not tell: two PostgreSQL stores are one when they are the same
    /// schema of one database, however their URLs spell it (see
    /// [`PostgresStore::same_store_as`]). Files are told apart by their
    /// paths, not here.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub fn is_same_store(&self, other: &Store) -> Result<bool, StoreError> {
        match (self, other) {
            #[cfg(feature = "postgres")]
            (Store::Postgres(one), Store::Postgres(two)) => one.same_store_as(two),
            _ => Ok(false),
        }
    }

    /// Every session with its header.
    ///
    /// ```
    /// # let folder = tempfile::tempdir()?;
    /// # let path = folder.path().join("sessions");
    /// # let store = sessionlog_store::Store::create(&path)?;
    /// # let id = sessionlog_schema::SessionId::parse("a")?;
    /// # let header = sessionlog_schema::SessionHeader::root(id.clone(), 0, "/work".into());
    /// # store.create_session(&header, &[], sessionlog_store::Durability::Fsync)?;
    /// # let mut writer = store.open_writer(&id, sessionlog_store::WriterOptions::default())?;
    /// # writer.append(sessionlog_schema::TurnStart::new("t1").into(), None)?;
    /// # drop(writer);
    /// let listed = store.list()?;
    /// assert_eq!(listed.len(), 1);
    /// assert_eq!(listed[0].id, id);
    /// assert_eq!(listed[0].header.as_ref().map(|header| header.cwd.as_str()).ok(), Some("/work"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
        match self {
            Store::Jsonl(store) => store.list(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.list(),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.list(),
        }
    }

    /// Opens the single writer of session `id` (`Locked` when another
    /// writer holds it; corrupt or rule-breaking sessions are refused, as
    /// far as the read reaches: from a state snapshot whose anchor matches,
    /// only the events after it are read).
    pub fn open_writer(
        &self,
        id: &SessionId,
        options: WriterOptions,
    ) -> Result<SessionWriter, StoreError> {
        match self {
            Store::Jsonl(store) => store.open_writer(id, options),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.open_writer(id, options),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.open_writer(id, options),
        }
    }

    /// Creates session `child` from the good prefix of `parent` (docs/EVENTS.md, "Presets and children"),
    /// durably, and returns the child's header. A corrupt parent, one that
    /// breaks the rules, an invalid or existing child id are refused;
    /// nothing is written to the parent.
    #[cfg_attr(not(feature = "sqlite"), allow(irrefutable_let_patterns))]
    pub fn fork(
        &self,
        parent: &SessionId,
        child: &SessionId,
        prompt: Option<&str>,
        defaults: &Defaults,
    ) -> Result<SessionHeader, StoreError> {
        // The child is made durable with the parent's prefix as its seed:
        // that prefix must be durable first (a SQLite row is durable once
        // it is visible; a log's bytes once fdatasynced, which the copy
        // does before it reads them). A JSONL child is copied as the
        // parent is read, in bounded memory; a database child refers to
        // its parent's rows.
        match self {
            Store::Jsonl(store) => {
                store.writable()?;
                store.existing_log(parent)?;
                let request = crate::fork::ForkRequest { prompt, defaults };
                crate::fork::fork_log(
                    &store.log_path(parent),
                    Some(parent.clone()),
                    child,
                    &store.log_path(child),
                    request,
                    store.io(),
                )
            }
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => self.fork_by_reference(parent, child, prompt, defaults),
        }
    }

    /// [`Store::fork`] in a database: the child's seeded events are a
    /// reference to the parent's first event rows (docs/FORMAT.md, "Forks
    /// by reference"), so only its header row and its own first events
    /// are written.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn fork_by_reference(
        &self,
        parent: &SessionId,
        child: &SessionId,
        prompt: Option<&str>,
        defaults: &Defaults,
    ) -> Result<SessionHeader, StoreError> {
        let mut state = self.parent_state_for_fork(parent)?;
        if self.contains(child)? {
            return Err(StoreError::AlreadyExists {
                id: child.clone(),
                path: self.path().to_owned(),
            });
        }
        let seed = delegate_from_state(&state, child.clone(), prompt, defaults, now_ms())
            .map_err(|error| self.delegation_error(parent, error))?;
        crate::fork::check_own_events(&mut state, &seed.events, &self.session_path(child))?;
        match self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => {
                store.create_by_reference(&seed.header, parent, &seed.events, Durability::Fsync)?;
            }
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => {
                store.create_by_reference(&seed.header, parent, &seed.events, Durability::Fsync)?;
            }
            Store::Jsonl(_) => {
                return Err(StoreError::InvalidEvent(
                    "a folder of logs keeps every child as a copy".to_owned(),
                ))
            }
        }
        Ok(seed.header)
    }

    /// The parent's state for a fork by reference: the fold of its whole
    /// good prefix, from the parent's state snapshot when its anchor still
    /// matches (then only the rows after it are read and checked, as a
    /// resuming writer does), refused when what is read is corrupt. A
    /// parent that breaks the rules is refused by the delegation.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn parent_state_for_fork(&self, parent: &SessionId) -> Result<SessionState, StoreError> {
        self.current_state(parent)
    }

    /// How a refused delegation is reported.
    fn delegation_error(&self, parent: &SessionId, error: DelegationError) -> StoreError {
        match error {
            DelegationError::ChildIsParent { child } => StoreError::AlreadyExists {
                id: child,
                path: self.path().to_owned(),
            },
            other => StoreError::InvalidEvent(format!("fork of {parent}: {other}")),
        }
    }
}

/// The SQLite store `open` gives for `path`.
#[cfg(feature = "sqlite")]
fn sqlite_store(
    path: &Path,
    open: fn(&Path) -> Result<SqliteStore, StoreError>,
) -> Result<Store, StoreError> {
    open(path).map(Store::Sqlite)
}

/// Without the `sqlite` feature a database path is refused, never taken
/// for a folder of logs.
#[cfg(not(feature = "sqlite"))]
fn sqlite_store(path: &Path, _: fn(&Path) -> Result<(), StoreError>) -> Result<Store, StoreError> {
    Err(StoreError::io(
        "open store",
        path,
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a SQLite database, and this build has no SQLite backend (sessionlog-store's `sqlite` feature is off)",
        ),
    ))
}

/// What `sqlite_store` is given in a build without SQLite.
#[cfg(not(feature = "sqlite"))]
struct SqliteStore;

#[cfg(not(feature = "sqlite"))]
impl SqliteStore {
    fn open(_: &Path) -> Result<(), StoreError> {
        Ok(())
    }

    fn open_read_only(_: &Path) -> Result<(), StoreError> {
        Ok(())
    }

    fn open_existing(_: &Path) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Refuses a database path that is no regular file: a FIFO or a device
/// named `.db`, on which SQLite would block or spin, and a symbolic link,
/// which the store never follows (SQLite's own refusal says only "unable
/// to open database file").
fn refuse_non_regular_database(path: &Path) -> Result<(), StoreError> {
    let metadata = std::fs::symlink_metadata(path)
        .map_err(|source| StoreError::io("open store", path, source))?;
    let Some(what) = crate::reader::file_kind(metadata.file_type()) else {
        return Ok(());
    };
    Err(StoreError::io(
        "open store",
        path,
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file; a database is only ever a regular file"),
        ),
    ))
}

/// Refuses a store path that does not exist, so a mistyped path never
/// becomes an empty store.
fn require_existing(path: &Path, reason: &str) -> Result<(), StoreError> {
    if path.exists() {
        return Ok(());
    }
    Err(StoreError::io(
        "open store",
        Path::new(&store_display(path)),
        std::io::Error::new(std::io::ErrorKind::NotFound, reason.to_owned()),
    ))
}

/// Refuses to make a new store of a path named as a SQLite database is
/// named, but not as this store names one (`.db` and `.sqlite`,
/// lowercase): `Sessions.DB`, `x.sqlite3`, `x.db3`; or as a lone log is
/// named, but not `.jsonl` (`x.JSONL`, `x.json`). Taken for a folder, it
/// would become a folder of logs where the person asked for a database or
/// a log.
fn refuse_store_name_lookalike(path: &Path) -> Result<(), StoreError> {
    let Some(extension) = path.extension().and_then(|e| e.to_str()) else {
        return Ok(());
    };
    let lower = extension.to_ascii_lowercase();
    if path.symlink_metadata().is_ok() {
        return Ok(());
    }
    // Named as a log is: `x.JSONL`, or `x.json` for `x.jsonl`.
    if matches!(lower.as_str(), "jsonl" | "json") && extension != "jsonl" {
        return Err(StoreError::InvalidStore {
            store: path.to_owned(),
            reason: format!(
                "is named as a log file is, but only the extension .jsonl (lowercase) makes \
                 one, and .{extension} would make a folder of logs; no store of that name is \
                 made (name it .jsonl for a lone log, or otherwise for a folder)"
            ),
        });
    }
    let database = matches!(lower.as_str(), "db" | "sqlite" | "sqlite3" | "db3");
    if !database || matches!(extension, "db" | "sqlite") {
        return Ok(());
    }
    Err(StoreError::InvalidStore {
        store: path.to_owned(),
        reason: format!(
            "is named as a SQLite database is, but only the extensions .db and .sqlite \
             (lowercase) make one here, and .{extension} would make a folder of logs; no \
             store of that name is made (name it .db or .sqlite for a database, or \
             otherwise for a folder)"
        ),
    })
}

/// Refuses to make a new store of a path that reads as a URL but is no
/// PostgreSQL URL (`POSTGRES://…`, `postgres:/…`, `pg://…`, a space before
/// it): taken for a folder, it would become a local store that the person
/// meant to be a server's, an existing folder of that name aside.
fn refuse_url_lookalike(path: &Path) -> Result<(), StoreError> {
    let Some(text) = path.to_str() else {
        return Ok(());
    };
    if is_postgres_url(text) || path.exists() {
        return Ok(());
    }
    if !reads_as_url(text) {
        return Ok(());
    }
    let space = match text.starts_with(char::is_whitespace) {
        true => " (it starts with a space)",
        false => "",
    };
    Err(StoreError::InvalidStore {
        store: PathBuf::from(redact_url(text.trim_start())),
        reason: format!(
            "reads as a URL but is not a PostgreSQL URL, which starts with postgres:// or \
             postgresql:// (lowercase){space}; no folder of that name is made"
        ),
    })
}

/// The folder a file at `path` is in: its parent, `.` for a bare name
/// (whose parent is empty).
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    }
}

/// Whether `text` is a PostgreSQL URL (`postgres://` or `postgresql://`),
/// which a STORE argument may be.
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// How messages, reports and listings name the store at `path`: a
/// PostgreSQL URL never with its password (docs/FORMAT.md, "PostgreSQL
/// schema"); any other path as given.
pub fn store_display(path: &Path) -> String {
    match path.to_str() {
        Some(text) if is_postgres_url(text) => postgres_display(text),
        // A mistyped URL (`POSTGRES://`, `postgres:/`, a space before it)
        // may carry a password as well.
        Some(text) if reads_as_url(text) => redact_url(text),
        // One line, as a path in a message is (a folder named with a
        // line break would print a line of its own).
        _ => sessionlog_schema::one_line(&path.display().to_string()),
    }
}

/// Whether `text` reads as a URL: it holds `://`, or starts (after any
/// spaces, in any case) with `postgres:` or `postgresql:`.
fn reads_as_url(text: &str) -> bool {
    let lower = text.trim_start().to_ascii_lowercase();
    text.contains("://") || lower.starts_with("postgres:") || lower.starts_with("postgresql:")
}

#[cfg(feature = "postgres")]
fn postgres_display(text: &str) -> String {
    crate::sql::postgres::display_of(text)
}

#[cfg(not(feature = "postgres"))]
fn postgres_display(text: &str) -> String {
    redact_url(text)
}

/// The URL `text` with any password taken out (from its user information
/// and from a `password` parameter), whether its scheme ends in `://` or,
/// mistyped, in `:/`; a text with neither is read as an authority. The
/// user information is what the PostgreSQL client takes for it: all
/// before the first `@`, the password after its first `:` (a `/` in it
/// included).
///
/// ```
/// use sessionlog_store::redact_url;
///
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db/logs?password=s3cret&schema=a"),
///     "postgres://app@db/logs?schema=a"
/// );
/// assert_eq!(redact_url("postgres://app:s3/cret@db/logs"), "postgres://app@db/logs");
/// // The first `@` after a `?`: a `?` in a password to the client, a
/// // query to a person. Neither reading's password is shown.
/// assert_eq!(
///     redact_url("postgres://db/logs?user=me@corp&password=s3cret"),
///     "postgres://db…"
/// );
/// assert_eq!(redact_url("postgres://alice:pa?ss-s3cret@db/logs"), "postgres://alice…");
/// // An `@` left unescaped in a password.
/// assert_eq!(redact_url("postgres://app:p@ss@db/logs"), "postgres://app…");
/// assert_eq!(redact_url("postgres://app:p@ss/w@db/logs"), "postgres://app…");
/// // An `@` in a query parameter's value is no password's.
/// assert_eq!(
///     redact_url("postgres://app:pw@db/logs?application_name=a@b"),
///     "postgres://app@db/logs?application_name=a@b"
/// );
/// // A password's key escaped, or an `&` left unescaped in its value.
/// assert_eq!(
///     redact_url("postgres://db/logs?pass%77ord=hunter2&schema=a"),
///     "postgres://db/logs?schema=a"
/// );
/// assert_eq!(
///     redact_url("postgres://bob@db/logs?password=pa&ss2secret&schema=a"),
///     "postgres://bob@db/logs?schema=a"
/// );
/// assert_eq!(redact_url("postgres://db/logs?password=pa&ss2"), "postgres://db/logs");
/// assert_eq!(
///     redact_url("postgres://db/logs?password=hunter&2secret=x&schema=a"),
///     "postgres://db/logs?schema=a"
/// );
/// ```
pub fn redact_url(text: &str) -> String {
    let (scheme, rest) = text
        .split_once("://")
        .map(|(scheme, rest)| (format!("{scheme}://"), rest))
        .or_else(|| {
            let (scheme, rest) = text.split_once(":/")?;
            Some((format!("{scheme}:/"), rest))
        })
        .unwrap_or_else(|| (String::new(), text));
    let query_at = rest.find('?').unwrap_or(rest.len());
    if rest.find('@').is_some_and(|at| at > query_at) {
        // The client reads all before the first `@` as user information
        // (`alice:pa?ss@db`: a `?` in the password); a person may have
        // meant a query (`?user=me@corp&password=…`). Only what comes
        // before the first `:`, `/` or `?` is shown.
        let end = rest.find([':', '/', '?']).unwrap_or(rest.len());
        return format!("{scheme}{}…", &rest[..end]);
    }
    // An `@` left unescaped in a password (`user:p@ss@db`, `p@ss/w@db`):
    // the client ends the user information at the first, and takes the
    // rest of the password for the host or the path. Only the user name
    // is shown.
    if let Some(first) = rest.find('@') {
        if stray_at(&rest[first + 1..]) {
            let end = rest.find([':', '@']).unwrap_or(rest.len());
            return format!("{scheme}{}…", &rest[..end]);
        }
    }
    let userinfo_end = rest.find('@');
    let (user, rest) = match userinfo_end.map(|at| (&rest[..at], &rest[at + 1..])) {
        Some((userinfo, rest)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            (format!("{user}@"), rest)
        }
        None => (String::new(), rest),
    };
    let tail: String = match rest.split_once('?') {
        Some((path, query)) => {
            // A password's pair goes, whatever the case or the percent
            // escapes of its key, and so does what follows it up to the
            // next pair of a parameter the client knows: the rest of a
            // password with an unescaped `&` in it (`pa&ss=x`).
            let mut in_password = false;
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| {
                    let key = pair.split_once('=').map(|(key, _)| percent_decoded(key));
                    match key {
                        Some(key) if key.eq_ignore_ascii_case(b"password") => {
                            in_password = true;
                            false
                        }
                        Some(key) if !in_password || URL_PARAMETERS.contains(&key.as_slice()) => {
                            in_password = false;
                            true
                        }
                        _ => false,
                    }
                })
                .collect();
            match kept.is_empty() {
                true => path.to_owned(),
                false => format!("{path}?{}", kept.join("&")),
            }
        }
        None => rest.to_owned(),
    };
    format!("{scheme}{user}{tail}")
}

/// The query parameters a store's URL may hold: the client's, and
/// sessionlog's own `schema`.
const URL_PARAMETERS: &[&[u8]] = &[
    b"user",
    b"dbname",
    b"options",
    b"application_name",
    b"sslmode",
    b"host",
    b"hostaddr",
    b"port",
    b"connect_timeout",
    b"keepalives",
    b"keepalives_idle",
    b"target_session_attrs",
    b"channel_binding",
    b"load_balance_hosts",
    b"schema",
];

/// `text` with each `%XX` escape read as its byte.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                at += 3;
            }
            None => {
                decoded.push(bytes[at]);
                at += 1;
            }
        }
    }
    decoded
}

/// Whether `after`, what follows a URL's first `@`, holds another `@`
/// that no query parameter's value explains: in the host or the path, or
/// in a part of the query with no `=` before it. The client reads such a
/// URL's first `@` as the end of the password, which then ran on.
pub(crate) fn stray_at(after: &str) -> bool {
    let (before_query, query) = after.split_once('?').unwrap_or((after, ""));
    before_query.contains('@')
        || query
            .split('&')
            .any(|pair| pair.find('@').is_some_and(|at| !pair[..at].contains('=')))
}

/// Without the `postgres` feature a PostgreSQL URL is refused.
#[cfg(not(feature = "postgres"))]
fn postgres_unsupported(path: &Path) -> StoreError {
    StoreError::io(
        "open store",
        path,
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a PostgreSQL URL, and this build has no PostgreSQL backend (sessionlog-store's `postgres` feature is off)",
        ),
    )
}

fn starts_with_sqlite_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && &magic == b"SQLite format 3\0"
}

#[cfg(test)]
pub(crate) mod tests {
    //! The conformance suite, written once and run against every backend,
    //! and the helpers the other test modules of this crate share.

    use std::path::Path;

    use proptest::prelude::*;
    use sessionlog_projections::Defaults;
    use sessionlog_schema::{ApprovalPolicy, EventRecord, SessionHeader, SessionId};

    use super::*;
    use crate::writer::{NewEvent, WriterOptions};

    pub(crate) fn id(text: &str) -> SessionId {
        SessionId::parse(text).unwrap_or_else(|error| panic!("test id {text:?}: {error}"))
    }

    pub(crate) fn header(session: &str) -> SessionHeader {
        SessionHeader::root(id(session), 1_700_000_000_000, "/work/project".to_owned())
    }

    pub(crate) fn event(event_type: &str, data: &str, ts: u64) -> NewEvent {
        NewEvent {
            event_type: event_type.to_owned(),
            data: data.to_owned(),
            ts: Some(ts),
        }
    }

    pub(crate) fn note(text: &str) -> NewEvent {
        event(
            "note/test",
            &serde_json::json!({ "text": text }).to_string(),
            1_700_000_000_500,
        )
    }

    /// The start of call `c<n>` (four digits) in step `s`.
    pub(crate) fn tool_start(n: u32) -> NewEvent {
        NewEvent::new(
            "tool/start",
            format!(r#"{{"callId":"c{n:04}","stepId":"s","name":"bash","arguments":{{}}}}"#),
        )
    }

    /// The settle of call `c<n>`.
    pub(crate) fn tool_settle(n: u32) -> NewEvent {
        NewEvent::new(
            "tool/settle",
            format!(r#"{{"callId":"c{n:04}","status":"ok"}}"#),
        )
    }

    /// Turn `t` and step `s` opened, then `calls` calls started (`c0000`,
    /// `c0001`, ...), each settled at once when `settled`.
    pub(crate) fn events_of_calls(calls: u32, settled: bool) -> Vec<NewEvent> {
        let mut events = vec![
            NewEvent::new("turn/start", r#"{"turnId":"t"}"#),
            NewEvent::new("step/start", r#"{"stepId":"s","turnId":"t"}"#),
        ];
        for call in 0..calls {
            events.push(tool_start(call));
            if settled {
                events.push(tool_settle(call));
            }
        }
        events
    }

    pub(crate) fn record(seq: u64, event_type: &str, data: &str) -> EventRecord {
        EventRecord::new(seq, 1_700_000_000_100 + seq, None, event_type, data)
    }

    pub(crate) fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
        result.unwrap_or_else(|error| panic!("unexpected error: {error}"))
    }

    pub(crate) fn jsonl_store(folder: &Path) -> Store {
        ok(Store::create(&folder.join("logs")))
    }

    pub(crate) fn sqlite_store(folder: &Path) -> Store {
        ok(Store::create(&folder.join("sessions.db")))
    }

    /// A store in a schema of its own on the test server named by
    /// `SESSIONLOG_TEST_PG`, dropped with its schema. `None`, with a note,
    /// when the variable is unset; a failure under `CI`, where the server
    /// must be there.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_store() -> Option<PostgresSchema> {
        let Some(url) = std::env::var_os("SESSIONLOG_TEST_PG") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "SESSIONLOG_TEST_PG is unset under CI: .ci/run starts the test server"
            );
            eprintln!("note: SESSIONLOG_TEST_PG is unset; skipping the PostgreSQL case (tools/pg-test-server.sh start)");
            return None;
        };
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let schema = format!(
            "t_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            now_ms() % 1_000_000
        );
        let url = format!("{}?schema={schema}", url.to_string_lossy());
        let store = ok(Store::create(Path::new(&url)));
        Some(PostgresSchema { url, schema, store })
    }

    /// A test's PostgreSQL store; its schema is dropped with it.
    #[cfg(feature = "postgres")]
    #[derive(Debug)]
    pub(crate) struct PostgresSchema {
        /// The store's URL, with its `schema` parameter.
        #[allow(dead_code)]
        pub(crate) url: String,
        pub(crate) schema: String,
        pub(crate) store: Store,
    }

    #[cfg(feature = "postgres")]
    impl Drop for PostgresSchema {
        fn drop(&mut self) {
            if let Store::Postgres(store) = &self.store {
                if let Ok(mut client) = store.connect() {
                    let _ = client.batch_execute(&format!(
                        "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                        self.schema
                    ));
                }
            }
        }
    }

    pub(crate) fn buffered() -> WriterOptions {
        WriterOptions {
            durability: Durability::Buffered,
            keep_snapshot: false,
            ..WriterOptions::default()
        }
    }

    /// A session's records as JSONL lines: the header, then each event.
    pub(crate) fn export(store: &Store, session: &SessionId) -> String {
        let snapshot = ok(store.snapshot(session));
        let mut text = snapshot.header.encode();
        for record in &snapshot.events {
            text.push_str(&record.encode(session));
        }
        text
    }

    macro_rules! conformance {
        ($($case:ident),* $(,)?) => {
            mod jsonl_backend {
                $(#[test]
                fn $case() {
                    let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
                    super::$case(&super::jsonl_store(folder.path()));
                })*
            }
            mod sqlite_backend {
                $(#[test]
                fn $case() {
                    let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
                    super::$case(&super::sqlite_store(folder.path()));
                })*
            }
            #[cfg(feature = "postgres")]
            mod postgres_backend {
                $(#[test]
                fn $case() {
                    if let Some(postgres) = super::postgres_store() {
                        super::$case(&postgres.store);
                    }
                })*
            }
        };
    }

    conformance!(
        created_session_reads_back_with_its_events,
        creating_an_existing_id_is_refused,
        appends_get_contiguous_seqs_and_survive_reopen,
        batch_is_appended_whole_with_its_batch_member,
        expected_seq_mismatch_is_a_conflict_and_writes_nothing,
        second_writer_is_locked_until_the_first_closes,
        rule_violation_is_refused_and_writes_nothing,
        list_names_every_session_with_its_header,
        event_stream_equals_snapshot,
        fork_writes_the_child_header_seed_and_prompt,
        fork_refuses_an_existing_child_and_a_rule_breaking_parent,
        missing_session_is_not_found,
        an_oversized_batch_is_refused_before_anything_is_written,
        a_header_above_the_record_limit_is_refused_by_every_backend,
        a_value_either_backend_cannot_store_is_refused_alone,
        staged_events_are_seen_only_once_synced_and_a_dropped_writer_leaves_none,
        a_store_opened_read_only_reads_and_refuses_every_write,
        the_last_event_is_read_from_the_end,
        a_creation_refuses_events_no_reader_would_take_whole,
    );

    /// Events whose lines a reader would call corrupt or torn (an
    /// unfinished batch at the end, a batch member inside a batch, `data`
    /// that is not JSON, a seq out of order) are refused by a creation,
    /// with the seq named, and nothing is written: not the log, nor the
    /// state snapshot a long creation keeps, which a resuming writer would
    /// otherwise take over them.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(irrefutable_let_patterns)
    )]
    fn a_creation_refuses_events_no_reader_would_take_whole(store: &Store) {
        let notes = |count: u64| -> Vec<EventRecord> {
            (1..=count)
                .map(|seq| record(seq, "note/test", r#"{"t":1}"#))
                .collect()
        };
        let long = 1_100;
        let mut unfinished = notes(long);
        unfinished[long as usize - 1] = EventRecord::new(long, 1, Some(2), "note/test", "{}");
        let mut member_inside = notes(long);
        member_inside[1] = EventRecord::new(2, 1, Some(2), "note/test", "{}");
        member_inside[2] = EventRecord::new(3, 1, Some(2), "note/test", "{}");
        let mut not_json = notes(long);
        not_json[4] = record(5, "note/test", "{\"t\":");
        let mut out_of_order = notes(long);
        out_of_order.swap(6, 7);
        for (case, events, named) in [
            ("an unfinished batch", unfinished, "seq 1100"),
            ("a member inside a batch", member_inside, "seq 3"),
            ("data that is not JSON", not_json, "seq 5"),
            ("a seq out of order", out_of_order, "seq 8"),
        ] {
            let refused = store.create_session(&header("a"), &events, Durability::Fsync);
            assert!(
                matches!(&refused, Err(StoreError::InvalidEvent(message))
                    if message.starts_with("session a: ") && message.contains(named)),
                "{case}: {refused:?}"
            );
            assert!(!ok(store.contains(&id("a"))), "{case}: nothing written");
        }
        // A child header counting more seeded events than it is given.
        let mut child = header("a");
        child.parent_session = Some(id("p"));
        child.seed_length = 3;
        child.delegation_depth = 1;
        let refused = store.create_session(&child, &notes(2), Durability::Fsync);
        assert!(
            matches!(&refused, Err(StoreError::InvalidEvent(message))
                if message.contains("its header: seedLength 3 is above the 2 intact events")),
            "{refused:?}"
        );
        assert!(!ok(store.contains(&id("a"))), "nothing written");
        if let Store::Jsonl(jsonl) = store {
            let left: Vec<_> = ok(std::fs::read_dir(jsonl.folder())).collect();
            assert!(
                left.is_empty(),
                "no log, sidecar or temporary file: {left:?}"
            );
        }
        // The same events, framed as a reader reads them, are created.
        ok(store.create_session(&header("a"), &notes(long), Durability::Fsync));
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), long as usize);
    }

    fn the_last_event_is_read_from_the_end(store: &Store) {
        // As the store tells it, and for a log as its file alone tells it.
        let ends_in_seal = |session: &str| {
            let told = store.ends_in_seal(&id(session));
            if store.backend() == Backend::Jsonl {
                assert_eq!(
                    crate::log_ends_in_seal(&store.session_path(&id(session))),
                    told
                );
            }
            told
        };
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        assert_eq!(ok(store.last_event(&id("a"))), None);
        assert!(!ends_in_seal("a"));
        let mut writer = ok(store.open_writer(&id("a"), buffered()));
        for turn in ["t1", "t2"] {
            let data = format!(r#"{{"turnId":"{turn}"}}"#);
            ok(writer.append(event("turn/start", &data, 5), None));
            ok(writer.append(event("turn/end", &data, 6), None));
        }
        assert!(!ends_in_seal("a"));
        ok(writer.seal(None, None));
        drop(writer);
        let last = ok(store.last_event(&id("a"))).expect("a last event");
        assert_eq!((last.seq(), last.event_type()), (5, "seal"));
        assert_eq!(Some(&last), ok(store.snapshot(&id("a"))).events.last());
        assert!(ends_in_seal("a"));
        assert!(store.last_event(&id("missing")).is_err());
        assert!(!ends_in_seal("missing"));
    }

    fn a_store_opened_read_only_reads_and_refuses_every_write(store: &Store) {
        let events = [record(1, "turn/start", r#"{"turnId":"t1"}"#)];
        ok(store.create_session(&header("a"), &events, Durability::Fsync));
        let before = export(store, &id("a"));
        let reading = ok(Store::open_read_only(store.path()));
        assert_eq!(ok(reading.snapshot(&id("a"))).events.len(), 1);
        let refused = |what: &str, result: Result<(), StoreError>| {
            let Err(error) = result else {
                panic!("{what} was allowed on a store opened read-only");
            };
            assert!(
                error.to_string().contains("opened read-only"),
                "{what}: {error}"
            );
        };
        refused(
            "a writer",
            reading.open_writer(&id("a"), buffered()).map(drop),
        );
        refused(
            "a new session",
            reading.create_session(&header("b"), &[], Durability::Fsync),
        );
        refused(
            "a fork",
            reading
                .fork(&id("a"), &id("c"), Some("go"), &Defaults::default())
                .map(drop),
        );
        assert_eq!(export(store, &id("a")), before, "the session is unchanged");
        let ids = ok(store.ids());
        assert_eq!(ids, vec![id("a")], "nothing was created");
    }

    /// A header is a record: one above the limit (a `cwd` of megabytes)
    /// is refused by every backend, as a folder's reader would refuse it as
    /// line 1, and one at the limit is kept and read back.
    fn a_header_above_the_record_limit_is_refused_by_every_backend(store: &Store) {
        use sessionlog_schema::MAX_RECORD_BYTES;
        let with_cwd_bytes = |session: &str, cwd_bytes: usize| {
            let mut header = header(session);
            header.cwd = "/".repeat(cwd_bytes);
            header
        };
        // The record of a header whose cwd is empty, less that empty cwd.
        let frame = with_cwd_bytes("a", 0).to_body().len() + sessionlog_schema::CRC_SUFFIX_LEN;
        let at_limit = with_cwd_bytes("a", MAX_RECORD_BYTES - frame);
        ok(store.create_session(&at_limit, &[], Durability::Fsync));
        assert_eq!(ok(store.snapshot(&id("a"))).header, at_limit);
        let above = with_cwd_bytes("b", MAX_RECORD_BYTES - frame + 1);
        let refused = store.create_session(&above, &[], Durability::Fsync);
        let expected = format!("{} bytes", MAX_RECORD_BYTES + 1);
        assert!(
            matches!(&refused, Err(StoreError::InvalidHeader(message)) if message.starts_with("session b: the header record") && message.contains(&expected)),
            "{refused:?}"
        );
        assert!(!ok(store.contains(&id("b"))));
    }

    fn an_oversized_batch_is_refused_before_anything_is_written(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), buffered()));
        let limit = sessionlog_schema::MAX_BATCH_RECORDS as usize;
        let events: Vec<NewEvent> = (0..=limit).map(|n| note(&n.to_string())).collect();
        let refused = writer.append_batch(events, None);
        assert!(
            matches!(&refused, Err(StoreError::InvalidEvent(message)) if message.contains("65537")),
            "{refused:?}"
        );
        assert!(!writer.is_poisoned());
        let events: Vec<NewEvent> = (0..limit).map(|n| note(&n.to_string())).collect();
        assert_eq!(ok(writer.append_batch(events, Some(1))).len(), limit);
        drop(writer);
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), limit);
        drop(ok(store.open_writer(&id("a"), buffered())));
    }

    fn a_value_either_backend_cannot_store_is_refused_alone(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let refused = writer.append(event("note/test", "{}", u64::MAX), None);
        assert!(
            matches!(&refused, Err(StoreError::InvalidEvent(message)) if message.contains("ts")),
            "{refused:?}"
        );
        assert!(
            !writer.is_poisoned(),
            "bad input does not poison the writer"
        );
        assert_eq!(ok(writer.append(note("next"), Some(1))).get(), 1);
        let largest = i64::MAX.unsigned_abs();
        assert_eq!(
            ok(writer.append(event("note/test", "{}", largest), Some(2))).get(),
            2
        );
        let mut huge = header("b");
        huge.created_at = u64::MAX;
        let refused = store.create_session(&huge, &[], Durability::Fsync);
        assert!(
            matches!(&refused, Err(StoreError::InvalidHeader(message)) if message.starts_with("session b: createdAt")),
            "{refused:?}"
        );
        assert!(!ok(store.contains(&id("b"))));
        // A NUL in a type: no type may hold one, a rule violation as
        // `verify` finds it (PostgreSQL's text could not store it either).
        let refused = writer.append(event("note/a\0b", "{}", 3), None);
        assert!(
            matches!(&refused, Err(StoreError::Rule { path, violation }) if path == writer.path() && violation.seq == 3 && violation.message.contains("U+0000")),
            "{refused:?}"
        );
        // An event refused as invalid names its log.
        let refused = writer.append(event("note/test", "{", 3), None);
        let place = crate::store_display(writer.path());
        assert!(
            matches!(&refused, Err(StoreError::InvalidEvent(message)) if message.contains("not JSON") && message.starts_with(&format!("{place}: seq 3"))),
            "{refused:?}"
        );
        // The place names the session, not only the store that holds it.
        assert!(
            place.ends_with("a.jsonl") || place.ends_with("#a"),
            "{place}"
        );
        assert!(!writer.is_poisoned());
        let mut nul = header("c");
        nul.cwd = "/work/a\0b".to_owned();
        let refused = store.create_session(&nul, &[], Durability::Fsync);
        assert!(
            matches!(&refused, Err(StoreError::InvalidHeader(message)) if message.contains("session c") && message.contains("NUL")),
            "{refused:?}"
        );
        assert!(!ok(store.contains(&id("c"))));
        // A line break between the data's tokens: JSON, but no JSONL line.
        let broken = EventRecord::new(1, 5, None, "note/test", "{\n\"a\":1}");
        let refused = store.create_session(&header("d"), &[broken], Durability::Fsync);
        assert!(
            matches!(&refused, Err(StoreError::InvalidEvent(message)) if message.contains("line break")),
            "{refused:?}"
        );
        assert!(!ok(store.contains(&id("d"))));
    }

    fn staged_events_are_seen_only_once_synced_and_a_dropped_writer_leaves_none(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        ok(writer.append(note("acknowledged"), None));
        ok(writer.stage(note("staged"), None));
        assert_eq!(
            ok(store.snapshot(&id("a"))).events.len(),
            1,
            "not before its sync"
        );
        let (_, stream) = ok(store.events(&id("a")));
        assert_eq!(stream.count(), 1);
        let child = ok(store.fork(&id("a"), &id("child"), None, &Defaults::default()));
        let seeded = ok(store.snapshot(&child.id)).events.len() as u64;
        assert_eq!(
            child.seed_length, 1,
            "the fork seeds the acknowledged prefix"
        );
        assert!(seeded >= 1);
        assert_eq!(ok(writer.sync()).get(), 2);
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 2);
        ok(writer.stage(note("dropped"), None));
        drop(writer);
        let reopened = ok(store.open_writer(&id("a"), WriterOptions::default()));
        assert_eq!(
            reopened.acknowledged_seq(),
            2,
            "a dropped writer's staged event is gone"
        );
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 2);
    }

    fn created_session_reads_back_with_its_events(store: &Store) {
        let events = [
            record(1, "turn/start", r#"{"turnId":"t1"}"#),
            record(2, "note/test", r#"{"kept":[1,2.50,"x"]}"#),
        ];
        ok(store.create_session(&header("a"), &events, Durability::Fsync));
        let snapshot = ok(store.snapshot(&id("a")));
        assert_eq!(snapshot.header, header("a"));
        assert_eq!(snapshot.events, events);
        assert!(snapshot.torn_tail.is_none());
        assert!(ok(store.contains(&id("a"))));
        assert!(!ok(store.contains(&id("b"))));
    }

    fn creating_an_existing_id_is_refused(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let again = store.create_session(&header("a"), &[], Durability::Fsync);
        assert!(
            matches!(&again, Err(StoreError::AlreadyExists { id: existing, .. }) if existing.as_str() == "a"),
            "{again:?}"
        );
    }

    fn appends_get_contiguous_seqs_and_survive_reopen(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        assert_eq!(ok(writer.append(note("one"), Some(1))).get(), 1);
        assert_eq!(ok(writer.append(note("two"), None)).get(), 2);
        drop(writer);
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        assert_eq!(writer.next_seq(), 3);
        assert_eq!(ok(writer.append(note("three"), Some(3))).get(), 3);
        drop(writer);
        let seqs: Vec<u64> = ok(store.snapshot(&id("a")))
            .events
            .iter()
            .map(EventRecord::seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
    }

    fn batch_is_appended_whole_with_its_batch_member(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let seqs = ok(writer.append_batch(vec![note("x"), note("y"), note("z")], Some(1)));
        assert_eq!(seqs.iter().map(|s| s.get()).collect::<Vec<_>>(), [1, 2, 3]);
        drop(writer);
        let batches: Vec<Option<u64>> = ok(store.snapshot(&id("a")))
            .events
            .iter()
            .map(EventRecord::batch)
            .collect();
        assert_eq!(batches, [Some(3), None, None]);
    }

    fn expected_seq_mismatch_is_a_conflict_and_writes_nothing(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        ok(writer.append(note("one"), Some(1)));
        let conflict = writer.append(note("late"), Some(1));
        assert!(
            matches!(
                conflict,
                Err(StoreError::Conflict {
                    expected: 1,
                    actual: 2,
                    ..
                })
            ),
            "{conflict:?}"
        );
        drop(writer);
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
    }

    fn second_writer_is_locked_until_the_first_closes(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let first = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let second = store.open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(second, Err(StoreError::Locked { .. })),
            "{second:?}"
        );
        assert_eq!(
            ok(store.snapshot(&id("a"))).header,
            header("a"),
            "readers never lock"
        );
        drop(first);
        assert!(store
            .open_writer(&id("a"), WriterOptions::default())
            .is_ok());
    }

    fn rule_violation_is_refused_and_writes_nothing(store: &Store) {
        ok(store.create_session(&header("a"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let refused = writer.append(event("turn/end", r#"{"turnId":"t9"}"#, 5), None);
        assert!(
            matches!(refused, Err(StoreError::Rule { .. })),
            "{refused:?}"
        );
        assert_eq!(ok(writer.append(note("after"), Some(1))).get(), 1);
        drop(writer);
        assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
    }

    fn list_names_every_session_with_its_header(store: &Store) {
        for session in ["b", "a", "c-1"] {
            ok(store.create_session(&header(session), &[], Durability::Buffered));
        }
        let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
        assert_eq!(ids, ["a", "b", "c-1"]);
        let listed = ok(store.list());
        assert_eq!(listed.len(), 3);
        for entry in listed {
            assert_eq!(ok(entry.header), header(entry.id.as_str()));
        }
    }

    fn event_stream_equals_snapshot(store: &Store) {
        let events: Vec<EventRecord> = (1..=1200)
            .map(|seq| record(seq, "note/test", &format!("{{\"n\":{seq}}}")))
            .collect();
        ok(store.create_session(&header("a"), &events, Durability::Buffered));
        let (streamed_header, stream) = ok(store.events(&id("a")));
        let streamed: Vec<EventRecord> = ok(stream.collect::<Result<_, _>>());
        assert_eq!(streamed_header, header("a"));
        assert_eq!(streamed, events);
        let tail: Vec<u64> =
            ok(ok(store.events_from(&id("a"), 1199)).collect::<Result<Vec<_>, _>>())
                .iter()
                .map(EventRecord::seq)
                .collect();
        assert_eq!(tail, [1199, 1200]);
    }

    fn fork_writes_the_child_header_seed_and_prompt(store: &Store) {
        let parent_events = [
            record(1, "approval/policy", r#"{"policy":"never"}"#),
            record(2, "turn/start", r#"{"turnId":"t1"}"#),
        ];
        ok(store.create_session(&header("parent"), &parent_events, Durability::Fsync));
        let child = ok(store.fork(
            &id("parent"),
            &id("child"),
            Some("go"),
            &Defaults::default(),
        ));
        assert_eq!(child.parent_session, Some(id("parent")));
        assert_eq!(child.seed_length, 2);
        assert_eq!(child.delegation_depth, 1);
        assert_eq!(child.cwd, "/work/project");
        assert_eq!(child.approval_policy, Some(ApprovalPolicy::Never));
        assert_eq!(child.sandbox_mode, None);
        let snapshot = ok(store.snapshot(&id("child")));
        assert_eq!(snapshot.header, child);
        let bodies: Vec<&str> = snapshot.events.iter().map(EventRecord::body).collect();
        assert_eq!(
            bodies[..2],
            [parent_events[0].body(), parent_events[1].body()]
        );
        assert_eq!(snapshot.events.len(), 3);
        assert_eq!(snapshot.events[2].event_type(), "message");
        assert!(snapshot.events[2]
            .data()
            .contains(r#""senderSessionId":"parent""#));
        assert_eq!(
            ok(store.snapshot(&id("parent"))).events.len(),
            2,
            "the parent is untouched"
        );
    }

    fn fork_refuses_an_existing_child_and_a_rule_breaking_parent(store: &Store) {
        ok(store.create_session(&header("parent"), &[], Durability::Fsync));
        ok(store.create_session(&header("taken"), &[], Durability::Fsync));
        let existing = store.fork(&id("parent"), &id("taken"), None, &Defaults::default());
        assert!(
            matches!(existing, Err(StoreError::AlreadyExists { .. })),
            "{existing:?}"
        );
        let itself = store.fork(&id("parent"), &id("parent"), None, &Defaults::default());
        assert!(
            matches!(itself, Err(StoreError::AlreadyExists { .. })),
            "{itself:?}"
        );
        let missing = store.fork(&id("nobody"), &id("child"), None, &Defaults::default());
        assert!(
            matches!(missing, Err(StoreError::NotFound { .. })),
            "{missing:?}"
        );
    }

    fn missing_session_is_not_found(store: &Store) {
        let snapshot = store.snapshot(&id("nobody"));
        assert!(
            matches!(snapshot, Err(StoreError::NotFound { .. })),
            "{snapshot:?}"
        );
        let writer = store.open_writer(&id("nobody"), WriterOptions::default());
        assert!(
            matches!(writer, Err(StoreError::NotFound { .. })),
            "{writer:?}"
        );
    }

    #[test]
    fn open_chooses_the_backend_by_path_and_refuses_a_missing_store() {
        let folder = ok(tempfile::tempdir());
        let missing = Store::open(&folder.path().join("nothing"));
        assert!(matches!(missing, Err(StoreError::Io { .. })), "{missing:?}");
        let sqlite = sqlite_store(folder.path());
        let jsonl = jsonl_store(folder.path());
        assert_eq!(ok(Store::open(sqlite.path())).backend(), Backend::Sqlite);
        assert_eq!(ok(Store::open(jsonl.path())).backend(), Backend::Jsonl);
        let renamed = folder.path().join("sessions-copy");
        ok(std::fs::copy(sqlite.path(), &renamed));
        assert_eq!(
            Backend::of_path(&renamed),
            Backend::Sqlite,
            "recognised by its magic bytes"
        );
    }

    /// One operation of the model-based property test.
    #[derive(Debug, Clone)]
    enum Operation {
        Create(usize),
        Append(usize, Vec<String>),
        Batch(usize, Vec<String>),
    }

    fn operation() -> impl Strategy<Value = Operation> {
        let texts = prop::collection::vec("[ -~é☃]{0,12}", 1..4);
        prop_oneof![
            (0..3usize).prop_map(Operation::Create),
            (0..3usize, texts.clone()).prop_map(|(s, t)| Operation::Append(s, t)),
            (0..3usize, texts).prop_map(|(s, t)| Operation::Batch(s, t)),
        ]
    }

    fn apply(store: &Store, operation: &Operation) -> Result<Vec<u64>, String> {
        let session = |index: usize| id(&format!("s{index}"));
        let notes = |texts: &[String]| -> Vec<NewEvent> {
            texts
                .iter()
                .enumerate()
                .map(|(n, text)| {
                    event(
                        "note/test",
                        &serde_json::json!({ "t": text }).to_string(),
                        n as u64,
                    )
                })
                .collect()
        };
        let outcome = match operation {
            Operation::Create(index) => store
                .create_session(&header(session(*index).as_str()), &[], Durability::Buffered)
                .map(|()| Vec::new()),
            Operation::Append(index, texts) => store
                .open_writer(&session(*index), buffered())
                .and_then(|mut writer| {
                    notes(texts)
                        .into_iter()
                        .map(|event| writer.append(event, None).map(|seq| seq.get()))
                        .collect()
                }),
            Operation::Batch(index, texts) => store
                .open_writer(&session(*index), buffered())
                .and_then(|mut writer| writer.append_batch(notes(texts), None))
                .map(|seqs| seqs.iter().map(|seq| seq.get()).collect()),
        };
        outcome.map_err(|error| format!("{:?}", error.class()))
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn forks_by_reference_leave_the_rows_accounted_for_by_the_session_rows() {
        // The audit counts the rows away only when the session rows account
        // for each: a fork by reference has none for its seeded events.
        let folder = ok(tempfile::tempdir());
        let store = sqlite_store(folder.path());
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
        for n in 0..5 {
            ok(writer.append(note(&format!("n{n}")), None));
        }
        drop(writer);
        let defaults = Defaults::default();
        ok(store.fork(&id("p"), &id("c"), Some("go"), &defaults));
        ok(store.fork(&id("c"), &id("g"), None, &defaults));
        let mut writer = ok(store.open_writer(&id("c"), WriterOptions::default()));
        ok(writer.append(note("own"), None));
        drop(writer);
        let audit = ok(store.audit(false));
        assert_eq!(audit.ids, [id("c"), id("g"), id("p")]);
        assert!(audit.damage.is_empty(), "{:?}", audit.damage);
        assert!(audit.unowned_events_counted);
        assert!(ok(store.unowned_events()).is_empty());
        // The listing alone names the same sessions, and the count apart
        // agrees with the audit's.
        let listed = ok(store.list_sessions());
        assert_eq!(listed.ids, audit.ids);
        assert!(listed.damage.is_empty(), "{:?}", listed.damage);
        assert!(ok(store.events_accounted_for()));
        // One row too many (of a session with no row) and the counts differ:
        // the owners are listed.
        let Store::Sqlite(sqlite) = &store else {
            panic!("a database")
        };
        let connection = ok(rusqlite::Connection::open(sqlite.path()));
        ok(connection.execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
               SELECT 'q', seq, ts, type, batch, body, crc FROM events
                WHERE session_id = 'p' AND seq = 1",
        ));
        let audit = ok(store.audit(false));
        assert!(!audit.unowned_events_counted);
        assert_eq!(audit.damage.len(), 1, "{:?}", audit.damage);
        assert_eq!(ok(store.unowned_events()).len(), 1);
        // The listing leaves them to the count, which does not agree.
        assert!(ok(store.list_sessions()).damage.is_empty());
        assert!(!ok(store.events_accounted_for()));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn every_backend_exports_the_same_bytes_for_any_operations(
            operations in prop::collection::vec(operation(), 1..12)
        ) {
            let folder = ok(tempfile::tempdir());
            let jsonl = jsonl_store(folder.path());
            #[cfg(feature = "postgres")]
            let postgres = postgres_store();
            #[allow(unused_mut)]
            let mut others = vec![sqlite_store(folder.path())];
            #[cfg(feature = "postgres")]
            others.extend(postgres.as_ref().map(|postgres| postgres.store.clone()));
            for operation in &operations {
                let expected = apply(&jsonl, operation);
                for other in &others {
                    prop_assert_eq!(&expected, &apply(other, operation), "{:?} on {:?}", operation, other.backend());
                }
            }
            let ids = ok(jsonl.ids());
            for other in &others {
                prop_assert_eq!(&ids, &ok(other.ids()));
                for session in &ids {
                    prop_assert_eq!(export(&jsonl, session), export(other, session));
                }
                prop_assert_eq!(ok(crate::diff(&jsonl, other)), None);
            }
        }
    }
}
