//! The schema and the file: its migration steps, how a connection opens
//! the database, and how a file is recognised as a sessionlog store.

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::committer::sqlite_error;
use super::{BUSY_TIMEOUT, SCHEMA_VERSION};
use crate::StoreError;

/// One step of the schema: brings a database at `to_version - 1` to
/// `to_version`.
pub(super) struct MigrationStep {
    pub(super) to_version: i64,
    sql: &'static str,
}

/// Every step, in order. Version 0 is an empty database; version 1 is the
/// first released schema. A later version appends a step here (and a test
/// that opens a fixture of the version before it).
pub(super) const MIGRATION_STEPS: &[MigrationStep] = &[
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
    // Version 3, two additions:
    // - Forks by reference: a child's seeded events 1..=seed_length are the
    //   first rows of the session `seed_source` names, not rows of its own
    //   (NULL: a session that holds all its rows, as every session written
    //   before this version). Rows are never changed or removed, so the
    //   reference always resolves to the same bytes.
    // - State snapshots (docs/FORMAT.md, "State snapshots"): per session,
    //   the writer's fold through `seq`, trusted only while the event row at
    //   `seq` still has CRC `anchor_crc`. A cache: a reader that finds none,
    //   or one that does not match, folds every row.
    MigrationStep {
        to_version: 3,
        sql: "ALTER TABLE sessions ADD COLUMN seed_source TEXT REFERENCES sessions(id);
          CREATE TABLE snapshots (
            session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id),
            seq        INTEGER NOT NULL,
            anchor_crc INTEGER NOT NULL,
            format     INTEGER NOT NULL,
            state      BLOB NOT NULL
          ) STRICT;",
    },
    // Version 4: a snapshot's pages as rows of their own (docs/FORMAT.md,
    // "State snapshots"), so that a writer reads the pages its lookups land
    // on, each a short read: a page at an offset of one long blob is found
    // by walking the blob's chain of overflow pages from its start. The
    // `snapshots` row keeps the head. The snapshots of the format before,
    // which no build of this version reads, are dropped.
    MigrationStep {
        to_version: 4,
        sql: "DELETE FROM snapshots;
          CREATE TABLE snapshot_pages (
            session_id TEXT NOT NULL REFERENCES sessions(id),
            page       INTEGER NOT NULL,
            bytes      BLOB NOT NULL,
            PRIMARY KEY (session_id, page)
          ) STRICT;",
    },
];

/// Creates the database file 0600 when missing, so SQLite never creates it
/// with the process umask; whether it did.
pub(super) fn create_database_file(path: &Path) -> Result<bool, StoreError> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match created {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            one_name(path).map(|()| false)
        }
        Err(source) => Err(StoreError::io("create database", path, source)),
    }
}

/// Refuses a database file that has more than one name (hard links) to a
/// writing store: SQLite keeps the write-ahead log and its index beside
/// the name it was given, and this store its writers' locks, so writers
/// through two names would each commit to a log the other never reads.
fn one_name(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let metadata =
        std::fs::symlink_metadata(path).map_err(|source| StoreError::io("open", path, source))?;
    match metadata.is_file() && metadata.nlink() > 1 {
        false => Ok(()),
        true => Err(StoreError::io(
            "open",
            path,
            io::Error::other(format!(
                "the database file has {} names (hard links); SQLite keeps its write-ahead \
                 log beside each name, so writers through two names would not see each \
                 other's commits: remove the other names (`find / -samefile {}`), or copy \
                 the file, and write through one name",
                metadata.nlink(),
                path.display()
            )),
        )),
    }
}

/// How a connection opens the database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// The committer's and a writing store's connections.
    ReadWrite,
    /// `SQLITE_OPEN_READ_ONLY`: reads through the WAL index, writes nothing.
    ReadOnly,
    /// Read-only and `immutable`: no WAL index, no locks. Only for a file
    /// nobody can be writing (see [`SqliteStore::open_read_only`]).
    Immutable,
}

pub(super) fn open_connection(path: &Path, access: Access) -> Result<Connection, StoreError> {
    if access != Access::Immutable {
        check_companions(path)?;
    }
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
    .map_err(|error| match error {
        // SQLite refuses a path with a symbolic link anywhere in it
        // (`SQLITE_OPEN_NOFOLLOW`), a folder above the database included,
        // in words that do not say so.
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CANTOPEN_SYMLINK =>
        {
            StoreError::io(
                "open",
                path,
                io::Error::other(
                    "a symbolic link is in the path (the database's name, or a folder above \
                     it); SQLite keeps its write-ahead log and locks beside the name it is \
                     given, so a database is opened by its real path only: give the path \
                     `realpath` prints",
                ),
            )
        }
        error => sqlite_error("open", path)(error),
    })?;
    connection
        .busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite_error("set the busy timeout", path))?;
    // Functions with side effects are never run from the schema's own SQL
    // (defence in depth: the store refuses triggers and views outright).
    connection
        .pragma_update(None, "trusted_schema", "OFF")
        .map_err(sqlite_error("distrust the schema", path))?;
    Ok(connection)
}

/// Refuses a `-wal`, `-shm` or `-journal` beside the database that another
/// user made (its owner is not the database's): SQLite would read and
/// write the database's changes through it, so that user could read every
/// event written, and change what is read. One of the owner's that others
/// may read is made 0600 by the owner, as the database file is.
pub(super) fn check_companions(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let database = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        // Opening names what is wrong with the database itself.
        Err(_) => return Ok(()),
    };
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let companion = PathBuf::from(name);
        let Ok(metadata) = std::fs::symlink_metadata(&companion) else {
            continue;
        };
        if metadata.uid() != database.uid() {
            return Err(not_the_owners(
                "open the database",
                &companion,
                (metadata.uid(), database.uid()),
                "SQLite would read and write the database's changes through it; remove it \
                 while no process has the database open",
            ));
        }
        if metadata.is_file() && metadata.mode() & 0o077 != 0 {
            // Refused (EPERM) to a reader who is not the owner: theirs to
            // read, not to change.
            match std::fs::set_permissions(&companion, std::fs::Permissions::from_mode(0o600)) {
                Err(error) if error.kind() != io::ErrorKind::PermissionDenied => {
                    return Err(StoreError::io("make private (chmod 600)", companion, error));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The refusal of `place`, a file beside the database that another user
/// made: `uids` are its owner's and the database's; `why` says what it
/// would let that user do, and what to do.
pub(super) fn not_the_owners(
    operation: &'static str,
    place: &Path,
    (found, database): (u32, u32),
    why: &str,
) -> StoreError {
    StoreError::io(
        operation,
        place,
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "owned by uid {found}, not by the database's owner (uid {database}): another \
                 user made it, and {why}"
            ),
        ),
    )
}

/// `file:<path>?immutable=1`, the path percent-encoded.
pub(super) fn immutable_uri(path: &Path) -> String {
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

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Refuses, as no sessionlog store, a file whose header is not a SQLite
/// database's (a text file named `.db`): SQLite would call it "not a
/// database", which reads as damage (exit 2), where it never was a store.
/// A file that begins as SQLite's do, an empty one, one that cannot be
/// read here, one whose magic text alone was changed (the fixed bytes
/// further in its 100-byte header still SQLite's) and one whose header was
/// zeroed are left to the open: a database cut short or changed is
/// damage, which SQLite reports.
pub(super) fn refuse_a_file_not_sqlite(path: &Path) -> Result<(), StoreError> {
    use std::io::Read;
    // Bytes 21 to 23 of every database header: the payload fractions,
    // fixed at 64, 32 and 32.
    const FRACTIONS: std::ops::Range<usize> = 21..24;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    else {
        return Ok(());
    };
    let mut head = Vec::with_capacity(100);
    if file.take(100).read_to_end(&mut head).is_err() {
        return Ok(());
    }
    let magic = &head[..head.len().min(SQLITE_MAGIC.len())];
    // A header whose magic text alone was changed keeps SQLite's fixed
    // bytes; one zeroed (a page the disk lost, as storage fails) begins
    // with a NUL, which no text file does. Both are damage.
    let damaged_magic = head.get(FRACTIONS) == Some(&[64, 32, 32][..]);
    let zeroed = head.first() == Some(&0);
    match SQLITE_MAGIC.starts_with(magic) || damaged_magic || zeroed {
        true => Ok(()),
        false => Err(not_a_store(
            path,
            format!(
                "not a SQLite database: it begins {:?}, where a database begins {:?}",
                String::from_utf8_lossy(magic),
                "SQLite format 3"
            ),
        )),
    }
}

/// Opens a read-only connection and checks that the file is a sessionlog
/// store this build reads: its connection and schema version.
pub(super) fn open_and_identify_read_only(
    path: &Path,
    access: Access,
) -> Result<(Connection, i64), StoreError> {
    refuse_a_file_not_sqlite(path)?;
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
pub(super) enum Identity {
    /// No table and `user_version` 0: a new database.
    Empty,
    /// Our tables, at this schema version (at most [`SCHEMA_VERSION`]).
    Sessionlog(i64),
    /// A schema version above this build's.
    Newer(i64),
    /// Something else, described.
    Foreign(String),
}

pub(super) fn identify(connection: &Connection, path: &Path) -> Result<Identity, StoreError> {
    // One read transaction: the version and the tables of one moment,
    // never a version read before another process's creation of the
    // schema committed and its tables after.
    let read = connection
        .unchecked_transaction()
        .map_err(sqlite_error("begin a read", path))?;
    let identity = identify_in(&read, path);
    drop(read);
    identity
}

fn identify_in(connection: &Connection, path: &Path) -> Result<Identity, StoreError> {
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
    // A trigger or a view is SQL of someone else's that would run inside
    // this store's statements (a trigger on every append: it could loop
    // for ever holding the session's lock, or rewrite rows): never made by
    // sessionlog, so never opened.
    let foreign: Vec<String> = connection
        .prepare(
            "SELECT type || ' ' || name FROM sqlite_master WHERE type IN ('trigger', 'view')
             ORDER BY type, name",
        )
        .and_then(|mut statement| {
            statement
                .query_map([], |row| row.get(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(sqlite_error("read the schema", path))?;
    if version >= 1 && ours && !foreign.is_empty() {
        return Ok(Identity::Foreign(format!(
            "the schema holds {}, which sessionlog never makes: SQL of its own that \
             would run inside the store's reads and writes (drop it to open the store)",
            foreign.join(", ")
        )));
    }
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

pub(super) fn not_a_store(path: &Path, reason: String) -> StoreError {
    StoreError::NotAStore {
        path: path.to_owned(),
        reason,
    }
}

/// Whether a read-only open failed only because SQLite could not create or
/// write the WAL index beside the database (no write access, a full disk).
pub(super) fn needs_write_access(error: &StoreError) -> bool {
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
/// that an immutable read would not see. One that is no regular file (a
/// symbolic link, which SQLite does not follow) may hold frames that no
/// read sees: refused, naming it.
pub(super) fn write_ahead_log_has_frames(path: &Path) -> Result<bool, StoreError> {
    /// The WAL header's size; a log no longer than it holds no frame.
    const WAL_HEADER_BYTES: u64 = 32;
    let wal = wal_path(path);
    match std::fs::symlink_metadata(&wal) {
        Ok(metadata) if !metadata.is_file() => Err(StoreError::io(
            "read the write-ahead log",
            wal,
            io::Error::other(
                "not a regular file (a symbolic link?): SQLite does not follow one, so the \
                 changes it may hold cannot be read, and the database is not read without them",
            ),
        )),
        Ok(metadata) => Ok(metadata.len() > WAL_HEADER_BYTES),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StoreError::io("inspect the write-ahead log", wal, source)),
    }
}

/// The write-ahead log SQLite keeps beside the database: `<database>-wal`.
pub(super) fn wal_path(path: &Path) -> PathBuf {
    let mut text = path.as_os_str().to_owned();
    text.push("-wal");
    PathBuf::from(text)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction, or refuses a
/// newer one.
pub(super) fn upgrade_schema(connection: &mut Connection, path: &Path) -> Result<(), StoreError> {
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

pub(super) fn user_version(connection: &Connection, path: &Path) -> Result<i64, StoreError> {
    connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sqlite_error("read the schema version", path))
}

pub(super) fn newer_schema(path: &Path, found: i64) -> StoreError {
    StoreError::NewerSchema {
        path: path.to_owned(),
        found,
        supported: SCHEMA_VERSION,
    }
}
