//! `StoreError`: everything the store refuses, with the path, line, byte
//! offset or seq a user needs, and what to do next.

use std::io;
use std::path::PathBuf;

use sessionlog_projections::{Violation, ViolationKind};
use sessionlog_schema::{Corruption, HeaderVocabularyError, InvalidSessionId, SessionId};

/// Errors of every store operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file-system or database operation failed.
    #[error("{operation} {shown_path}: {source}", shown_path = shown_path(.path))]
    Io {
        /// What was being done (`open`, `write`, `fdatasync`, ...).
        operation: &'static str,
        /// On which file or folder.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A SQLite operation failed.
    #[cfg(feature = "sqlite")]
    #[error("SQLite {operation} on {shown_path}: {source}", shown_path = shown_path(.path))]
    Sqlite {
        /// What was being done.
        operation: &'static str,
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    #[cfg(feature = "postgres")]
    /// A PostgreSQL operation failed: the connection, authentication, a
    /// statement (a timeout included) or the server going away.
    #[error("{store}: PostgreSQL {operation} failed: {detail}")]
    Postgres {
        /// What was being done.
        operation: &'static str,
        /// The store's URL, without its password.
        store: PathBuf,
        /// The server's message, or what failed on the way to it.
        detail: String,
        /// The SQLSTATE, when the server sent one.
        code: Option<String>,
        /// The client's error.
        #[source]
        source: postgres::Error,
    },
    /// A STORE argument that names no usable store, or a store that
    /// answered in a way it never should.
    #[error("{store}: {reason}")]
    InvalidStore {
        /// The store as given (without any password).
        store: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The database was written by a newer sessionlog.
    #[error("{shown_path}: database schema version {found} is newer than this build's {supported}; upgrade sessionlog to open it", shown_path = shown_path(.path))]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// Its `PRAGMA user_version`.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// The file or PostgreSQL schema is not a sessionlog database (another
    /// application's, or an empty one): it is neither read nor changed.
    #[error("{shown_path} is not a sessionlog store ({reason}); sessionlog neither reads nor changes it", shown_path = shown_path(.path))]
    NotAStore {
        /// The file, or the PostgreSQL URL without its password.
        path: PathBuf,
        /// What it holds instead.
        reason: String,
    },
    /// The database file is damaged outside any one session's rows, or so
    /// that SQLite itself reports it (`SQLITE_CORRUPT`, `SQLITE_NOTADB`).
    #[error("{shown_path}: the database is damaged: {reason}; `sessionlog verify` names the sessions that are still whole, and `sessionlog migrate` refuses to copy it", shown_path = shown_path(.path))]
    DamagedDatabase {
        /// The database file.
        path: PathBuf,
        /// What is damaged, in SQLite's words or ours.
        reason: String,
    },
    /// A session id failed validation before touching the file system.
    #[error(transparent)]
    InvalidId(#[from] InvalidSessionId),
    /// No such session.
    #[error("no session {id} in {shown_path}", shown_path = shown_path(.path))]
    NotFound {
        /// The session asked for.
        id: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A session with this id exists already.
    #[error("session {id} already exists in {shown_path}; pick another id", shown_path = shown_path(.path))]
    AlreadyExists {
        /// The id.
        id: SessionId,
        /// The store.
        path: PathBuf,
    },
    /// The log is corrupt: damage that an intact record follows, or a record
    /// that breaks the format.
    #[error("{shown_path}: the log is {corruption}{}", corruption_remedy(.corruption), shown_path = shown_path(.path))]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// Where and what.
        corruption: Corruption,
    },
    /// A session's rows in a database are damaged: a row changed, lost or
    /// added outside sessionlog, while the database file itself may be
    /// whole (its damage is [`StoreError::DamagedDatabase`]).
    #[error("{shown_path}: session {id} is corrupt at seq {seq}: {reason}; `sessionlog verify` names every damaged session", shown_path = shown_path(.path))]
    CorruptRow {
        /// The database, or the PostgreSQL store (without its password).
        path: PathBuf,
        /// The session.
        id: SessionId,
        /// The seq of the damaged row (0: the session's own row).
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// The header holds a value outside a closed vocabulary.
    #[error("{shown_path}: {error}", shown_path = shown_path(.path))]
    HeaderVocabulary {
        /// The log.
        path: PathBuf,
        /// The field and value.
        error: HeaderVocabularyError,
    },
    /// An event breaks a rule of the format (vocabulary, shape, turns, steps,
    /// calls, approvals); nothing was written.
    #[error("{shown_path}: {violation}", shown_path = shown_path(.path))]
    Rule {
        /// The log.
        path: PathBuf,
        /// The first violation.
        violation: Violation,
    },
    /// Another writer holds the session.
    #[error("session {id} is locked by another writer ({shown_path}); wait for it to close the session", shown_path = shown_path(.path))]
    Locked {
        /// The session.
        id: SessionId,
        /// The locked file.
        path: PathBuf,
    },
    /// The expected next seq differs from the log's.
    #[error("session {id}: expected the next seq to be {expected} but it is {actual}; nothing was written")]
    Conflict {
        /// The session.
        id: SessionId,
        /// What the caller expected.
        expected: u64,
        /// What the log's next seq is.
        actual: u64,
    },
    /// A previous write or fsync failed; the writer refuses every append
    /// until the log is reopened (and so re-verified).
    #[error(
        "session {id}: the writer is poisoned by an earlier failure ({cause}); reopen the session"
    )]
    Poisoned {
        /// The session.
        id: SessionId,
        /// The failure that poisoned it.
        cause: String,
    },
    /// A log being followed no longer holds what was read from it: another
    /// session's log was put in its place, or its earlier records were
    /// rewritten or removed. Nothing read after the change is delivered.
    #[error("{shown_path}: the log changed under the reader: {reason}; what was read from it no longer stands", shown_path = shown_path(.path))]
    HistoryChanged {
        /// The log.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// An event's `data` is not JSON, or a record would exceed the size limit.
    #[error("invalid event: {0}")]
    InvalidEvent(String),
    /// A session header holds a value no backend stores (an integer above
    /// 2^63 - 1, a NUL in its `cwd`): the format allows it, no writer
    /// writes it.
    #[error("invalid header: {0}")]
    InvalidHeader(String),
}

/// How a command line should report an error: the exit classes of README.md, "Exit codes".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Usage or I/O (exit 1).
    Io,
    /// Corruption (exit 2).
    Corrupt,
    /// Rule violations (exit 4).
    Rule,
    /// A seal that does not hold (exit 7): the log was changed after it
    /// was sealed.
    Seal,
    /// `Locked` or `Conflict` (exit 6).
    Contention,
}

impl ErrorClass {
    /// How strongly this class claims a command's exit when several
    /// apply: corruption over a seal that does not hold over rule
    /// violations (exit 2 over 7 over 4). Usage, I/O and contention end a
    /// command where they happen and rank lowest.
    pub fn precedence(self) -> u8 {
        match self {
            ErrorClass::Corrupt => 3,
            ErrorClass::Seal => 2,
            ErrorClass::Rule => 1,
            ErrorClass::Io | ErrorClass::Contention => 0,
        }
    }
}

/// `first`, the refusal found first (a header out of the vocabulary, which
/// refuses a writer before anything), unless what reading on gave,
/// `later`, ranks above it (a seal that fails, corruption: 7 and 2 over 4).
pub(crate) fn first_unless_outranked<T>(
    first: StoreError,
    later: Result<T, StoreError>,
) -> StoreError {
    match later {
        Err(later) if later.class().precedence() > first.class().precedence() => later,
        _ => first,
    }
}

/// The refusal a reader reports after reading on past the first one: a
/// rule violation does not stop a command that must still find corruption
/// later in the log, which wins over it ([`ErrorClass::precedence`]; the
/// first of equals is kept).
#[derive(Debug, Default)]
pub struct Refusal(Option<StoreError>);

impl Refusal {
    /// Notes `error`, keeping whichever of it and the one held ranks higher.
    pub fn note(&mut self, error: StoreError) {
        let outranks = self
            .0
            .as_ref()
            .is_none_or(|held| error.class().precedence() > held.class().precedence());
        if outranks {
            self.0 = Some(error);
        }
    }

    /// Whether a refusal is held.
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// `Err` with the refusal held, if any.
    pub fn into_result(self) -> Result<(), StoreError> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

impl StoreError {
    /// Whether this is a PostgreSQL server out of reach: the connection
    /// closed or refused, or the server ending it (a restart, a failover,
    /// an administrator: SQLSTATE class 08, 57P01–57P03). The next call
    /// connects again; a follower may go on trying.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            StoreError::Postgres { code, source, .. } => {
                source.is_closed()
                    || code.as_deref().is_some_and(|code| {
                        code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
                    })
                    || std::error::Error::source(source)
                        .is_some_and(|inner| inner.is::<io::Error>())
            }
            // A server that did not complete a connection in time.
            StoreError::Io { path, source, .. } => {
                source.kind() == io::ErrorKind::TimedOut
                    && path.to_str().is_some_and(crate::store::is_postgres_url)
            }
            _ => false,
        }
    }

    /// The exit class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Corrupt { .. }
            | StoreError::CorruptRow { .. }
            | StoreError::DamagedDatabase { .. }
            | StoreError::HistoryChanged { .. } => ErrorClass::Corrupt,
            StoreError::Rule { violation, .. } if violation.kind == ViolationKind::Seal => {
                ErrorClass::Seal
            }
            StoreError::HeaderVocabulary { .. } | StoreError::Rule { .. } => ErrorClass::Rule,
            StoreError::Locked { .. } | StoreError::Conflict { .. } => ErrorClass::Contention,
            #[cfg(feature = "sqlite")]
            StoreError::Sqlite { .. } => ErrorClass::Io,
            #[cfg(feature = "postgres")]
            StoreError::Postgres { .. } => ErrorClass::Io,
            StoreError::Io { .. }
            | StoreError::InvalidStore { .. }
            | StoreError::NewerSchema { .. }
            | StoreError::NotAStore { .. }
            | StoreError::InvalidId(_)
            | StoreError::NotFound { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::Poisoned { .. }
            | StoreError::InvalidEvent(_)
            | StoreError::InvalidHeader(_) => ErrorClass::Io,
        }
    }

    pub(crate) fn io(operation: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            operation,
            path: path.into(),
            source,
        }
    }

    /// The refusal of a write to the store at `path`, opened read-only
    /// (the same on every backend).
    pub(crate) fn read_only(path: impl Into<PathBuf>) -> Self {
        StoreError::io(
            "write",
            path,
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the store was opened read-only; open it for writing",
            ),
        )
    }
}

/// What a person can do about a corrupt log: `salvage` copies the good
/// prefix after a whole header; a header that is whole but names another
/// session needs the file renamed; a line 1 that is no header leaves
/// nothing to salvage (its reason says what it looks like).
/// What helps with a corrupt log, as `; …` to follow its message: the
/// good prefix copied by `salvage`, or the file named for the session its
/// whole header holds; empty when neither applies.
pub fn corruption_remedy(corruption: &Corruption) -> &'static str {
    if corruption.position.line > 1 {
        "; run `sessionlog salvage` to copy the good prefix to a new file"
    } else if corruption
        .reason
        .starts_with("the file is named for session")
    {
        "; the header is whole: name the file for the session it holds"
    } else {
        ""
    }
}

/// A path as a message shows it: line breaks and tabs written as `\n`, `\r`
/// and `\t`, so that a file named with one (in a folder of logs, which
/// anyone who may write there names) cannot print a line of its own.
pub(crate) fn shown_path(path: &std::path::Path) -> String {
    sessionlog_schema::one_line(&path.display().to_string())
}
