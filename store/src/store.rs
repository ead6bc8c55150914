//! `Store`: one API over both backends, chosen by path, and `fork`, written
//! once for both.
//!
//! `Store` is an enum, not a trait object. There are exactly two backends
//! and both live in this crate, so an enum keeps every call a plain match
//! the compiler checks for exhaustiveness, lets each backend keep its own
//! concrete types (`LogReader`, `SqliteEvents`, `Snapshot`) without
//! boxing every return, and keeps `SessionWriter`'s `LogSink` seam private.
//! A third backend would add a variant and the compiler would list every
//! method to extend; a trait would only pay off if backends were written
//! outside this crate, which the format's byte-identity promise rules out.

use std::path::{Path, PathBuf};

use sessionlog_projections::{delegate, fold, Defaults, DelegationError};
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};

use crate::jsonl::{JsonlStore, ListEntry};
use crate::reader::Snapshot;
use crate::sqlite::SqliteStore;
use crate::writer::{now_ms, Durability, SessionWriter, WriterOptions};
use crate::StoreError;

/// The events of one session, in order: the good prefix of a JSONL log, or
/// the rows of a SQLite session, read in bounded memory.
pub type EventStream = Box<dyn Iterator<Item = Result<EventRecord, StoreError>> + Send>;

/// A store of sessions: a folder of JSONL logs or a SQLite database.
#[derive(Debug, Clone)]
pub enum Store {
    /// A folder of `<id>.jsonl` logs.
    Jsonl(JsonlStore),
    /// A SQLite database.
    Sqlite(SqliteStore),
}

/// Which backend a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A folder of JSONL logs.
    Jsonl,
    /// A SQLite database file.
    Sqlite,
}

impl Backend {
    /// The backend `path` names: `.db` and `.sqlite` files, and existing
    /// files that start with SQLite's magic bytes, are SQLite; anything
    /// else is a JSONL folder.
    pub fn of_path(path: &Path) -> Backend {
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

impl Store {
    /// Opens an existing store: a SQLite database (`.db`, `.sqlite`) or a
    /// folder of JSONL logs. A missing path is an error (use
    /// [`Store::create`]), so a mistyped path never becomes an empty store.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if !path.exists() {
            return Err(StoreError::io(
                "open store",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such store; create it first",
                ),
            ));
        }
        match Backend::of_path(path) {
            Backend::Sqlite => SqliteStore::open(path).map(Store::Sqlite),
            Backend::Jsonl => JsonlStore::open(path).map(Store::Jsonl),
        }
    }

    /// Opens the store at `path`, creating it when missing: a database for
    /// `.db` and `.sqlite`, otherwise a folder (0700).
    pub fn create(path: &Path) -> Result<Store, StoreError> {
        match Backend::of_path(path) {
            Backend::Sqlite => SqliteStore::open(path).map(Store::Sqlite),
            Backend::Jsonl => JsonlStore::create_folder(path).map(Store::Jsonl),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            Store::Jsonl(_) => Backend::Jsonl,
            Store::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// The folder or database file.
    pub fn path(&self) -> &Path {
        match self {
            Store::Jsonl(store) => store.folder(),
            Store::Sqlite(store) => store.path(),
        }
    }

    /// Where session `id` lives, as errors name it: its log file, or
    /// `<database>#<id>`.
    pub fn session_path(&self, id: &SessionId) -> PathBuf {
        match self {
            Store::Jsonl(store) => store.log_path(id),
            Store::Sqlite(store) => crate::sqlite::session_locator(store.path(), id),
        }
    }

    /// Whether session `id` exists.
    pub fn contains(&self, id: &SessionId) -> Result<bool, StoreError> {
        match self {
            Store::Jsonl(store) => Ok(store.contains(id)),
            Store::Sqlite(store) => store.contains(id),
        }
    }

    /// Creates a session atomically with its header and first `events`,
    /// after checking them against every rule; an existing id is refused.
    pub fn create_session(
        &self,
        header: &SessionHeader,
        events: &[EventRecord],
        durability: Durability,
    ) -> Result<(), StoreError> {
        match self {
            Store::Jsonl(store) => store.create(header, events, durability),
            Store::Sqlite(store) => store.create(header, events, durability),
        }
    }

    /// The good prefix of session `id`, in memory.
    pub fn snapshot(&self, id: &SessionId) -> Result<Snapshot, StoreError> {
        match self {
            Store::Jsonl(store) => store.snapshot(id),
            Store::Sqlite(store) => store.snapshot(id),
        }
    }

    /// The header of session `id` and a stream of its events.
    pub fn events(&self, id: &SessionId) -> Result<(SessionHeader, EventStream), StoreError> {
        match self {
            Store::Jsonl(store) => {
                let reader = store.reader(id)?;
                Ok((reader.header().clone(), Box::new(reader)))
            }
            Store::Sqlite(store) => {
                let (header, _) = store.header(id)?;
                Ok((header, Box::new(store.events(id)?)))
            }
        }
    }

    /// The events of session `id` from `from_seq` on. SQLite starts there;
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
            Store::Sqlite(store) => Ok(Box::new(store.events_from(id, from_seq)?)),
        }
    }

    /// The ids of every session, sorted.
    pub fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        match self {
            Store::Jsonl(store) => store.ids(),
            Store::Sqlite(store) => store.ids(),
        }
    }

    /// Every session with its header.
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
        match self {
            Store::Jsonl(store) => store.list(),
            Store::Sqlite(store) => store.list(),
        }
    }

    /// Opens the single writer of session `id` (`Locked` when another
    /// writer holds it; corrupt or rule-breaking sessions are refused).
    pub fn open_writer(
        &self,
        id: &SessionId,
        options: WriterOptions,
    ) -> Result<SessionWriter, StoreError> {
        match self {
            Store::Jsonl(store) => store.open_writer(id, options),
            Store::Sqlite(store) => store.open_writer(id, options),
        }
    }

    /// Creates session `child` from the good prefix of `parent` (SPEC §7),
    /// durably, and returns the child's header. A corrupt parent, one that
    /// breaks the rules, an invalid or existing child id are refused;
    /// nothing is written to the parent.
    pub fn fork(
        &self,
        parent: &SessionId,
        child: &SessionId,
        prompt: Option<&str>,
        defaults: &Defaults,
    ) -> Result<SessionHeader, StoreError> {
        let snapshot = self.snapshot(parent)?;
        let parent_path = self.session_path(parent);
        if let Some(error) = snapshot.header_vocabulary_errors.into_iter().next() {
            return Err(StoreError::HeaderVocabulary {
                path: parent_path,
                error,
            });
        }
        let (state, violations) = fold(snapshot.header, &snapshot.events);
        if let Some(violation) = violations.into_iter().next() {
            return Err(StoreError::Rule {
                path: parent_path,
                violation,
            });
        }
        if self.contains(child)? {
            return Err(StoreError::AlreadyExists {
                id: child.clone(),
                path: self.path().to_owned(),
            });
        }
        let seed = delegate(
            &state,
            &snapshot.events,
            child.clone(),
            prompt,
            defaults,
            now_ms(),
        )
        .map_err(|error| match error {
            DelegationError::ChildIsParent { child } => StoreError::AlreadyExists {
                id: child,
                path: self.path().to_owned(),
            },
            other => StoreError::InvalidEvent(format!("fork of {parent}: {other}")),
        })?;
        self.create_session(&seed.header, &seed.events, Durability::Fsync)?;
        Ok(seed.header)
    }
}

fn starts_with_sqlite_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && &magic == b"SQLite format 3\0"
}
