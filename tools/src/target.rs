//! What a STORE argument names: a lone `.jsonl` log, or a store (a folder of
//! logs, a SQLite database or a PostgreSQL URL) in which `--session` picks
//! one session.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sessionlog_schema::{SessionId, TornTail};
use sessionlog_store::testing::Io;
use sessionlog_store::{
    open_log_writer, Backend, ErrorClass, HeldRead, LogReader, SessionStream, SessionWriter,
    Snapshot, Store, StoreError, WriterOptions,
};

use crate::UsageError;

/// An opened STORE argument.
#[derive(Debug)]
pub enum Target {
    /// A lone `.jsonl` log; its file may have any name.
    File(PathBuf),
    /// A folder of logs or a database.
    Store(Store),
}

/// What a command that reads sessions does with one whose log cannot be
/// opened or read: an I/O error, what the file system says of the log
/// (permission denied, a failed read), not what the log holds
/// (docs/FORMAT.md, "The command line").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreadableLog {
    /// Reported as that session's verdict, and the other sessions read:
    /// one log that cannot be opened hides no other session's verdict.
    Reported,
    /// The error ends the command: the one session it was asked for, a
    /// lone log, or a database, whose I/O errors are the store's and would
    /// be the same for every session.
    Refused,
}

/// The I/O error that left one log unread, if `error` is one (a store's
/// error of the I/O class, exit 1): corruption and every other finding
/// are not.
pub fn unreadable_log(error: &anyhow::Error) -> Option<&StoreError> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<StoreError>())
        .filter(|store| store.class() == ErrorClass::Io)
}

/// Why a session was not read, in a command that names such a session and
/// reads the others (`stats`, `report`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRead {
    /// Its log or rows are corrupt.
    Corrupt,
    /// Its log could not be opened or read ([`unreadable_log`]), in a
    /// folder read whole.
    Unreadable,
}

/// What the read of one session that failed with `error` found, with the
/// store's error that says it: corruption, or a log that could not be
/// read when `unreadable` reports one; `None` when the error ends the
/// command.
pub fn not_read(
    error: &anyhow::Error,
    unreadable: UnreadableLog,
) -> Option<(NotRead, &StoreError)> {
    let corrupt = error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<StoreError>())
        .find(|store| store.class() == ErrorClass::Corrupt);
    if let Some(corrupt) = corrupt {
        return Some((NotRead::Corrupt, corrupt));
    }
    match unreadable {
        UnreadableLog::Reported => unreadable_log(error).map(|io| (NotRead::Unreadable, io)),
        UnreadableLog::Refused => None,
    }
}

/// Refuses an empty list of sessions unless `allow_empty`: a folder that is
/// not a store (`$HOME`, `/etc`, a mistyped path that happens to exist) holds
/// no session either, and saying nothing would pass it as a clean store.
pub fn require_sessions<T>(sessions: &[T], store: &Path, allow_empty: bool) -> Result<()> {
    if sessions.is_empty() && !allow_empty {
        bail!(UsageError(format!(
            "{}; pass --allow-empty to accept an empty store",
            no_sessions(store)
        )));
    }
    Ok(())
}

/// Warns that `store` holds no session, for the commands that count or
/// list what a store holds: they report an empty store as it is (exit 0),
/// but zero counts alone would not tell a mistyped path from a new store.
pub fn warn_if_no_sessions(sessions: usize, store: &Path) {
    if sessions == 0 {
        crate::terminal::warn(no_sessions(store));
    }
}

pub fn no_sessions(store: &Path) -> String {
    let shown = sessionlog_store::store_display(store);
    match Backend::of_path(store) {
        Backend::Postgres => format!("no sessions found in {shown} (its schema holds none)"),
        _ => format!(
            "no sessions found in {shown} (a store holds <id>.jsonl logs or is a .db/.sqlite database)"
        ),
    }
}

/// What `verify` reads of a target before its sessions ([`Target::audit`]).
#[derive(Debug)]
pub struct Audit {
    /// Every session (or just `--session`).
    pub sessions: Vec<SessionRef>,
    /// The damage of the store as a whole that listing the sessions finds
    /// (events without a session row are left to
    /// [`Target::events_accounted_for`] and [`Target::unowned_events`]).
    pub damage: Vec<StoreError>,
}

/// One session of a target.
#[derive(Debug, Clone)]
pub struct SessionRef {
    /// Its id (for a lone file: from its header).
    pub id: SessionId,
    /// For messages: the file, or `store#id`.
    pub label: String,
}

impl Target {
    /// Opens an existing target for reading only: a database is neither
    /// created, upgraded nor written (see `Store::open_read_only`).
    pub fn open(path: &Path) -> Result<Target> {
        Target::open_with(path, Store::open_read_only)
    }

    /// Opens an existing target for the commands that write to it.
    pub fn open_for_writing(path: &Path) -> Result<Target> {
        Target::open_with(path, Store::open)
    }

    fn open_with(path: &Path, open: fn(&Path) -> Result<Store, StoreError>) -> Result<Target> {
        if Backend::of_path(path) == Backend::Postgres {
            return Ok(Target::Store(open(path)?));
        }
        if is_lone_log(path) {
            if !path.exists() {
                bail!(UsageError(format!(
                    "{}: no such file",
                    sessionlog_store::store_display(path)
                )));
            }
            return Ok(Target::File(path.to_owned()));
        }
        if !path.exists() {
            bail!(UsageError(format!(
                "{}: no such store",
                sessionlog_store::store_display(path)
            )));
        }
        Ok(Target::Store(open(path)?))
    }

    /// What a command reading `session` (or, without it, every session)
    /// does with a log it cannot open or read: a folder of logs read
    /// whole reports it as that session's and reads the others.
    pub fn unreadable_log(&self, session: Option<&str>) -> UnreadableLog {
        match (self, session) {
            (Target::Store(Store::Jsonl(_)), None) => UnreadableLog::Reported,
            _ => UnreadableLog::Refused,
        }
    }

    /// Every session (or just `--session`), in id order.
    pub fn sessions(&self, session: Option<&str>) -> Result<Vec<SessionRef>> {
        match self {
            Target::File(path) => {
                // The id only: a header out of vocabulary is for the
                // command to judge (export shows it, verify reports it).
                let header = match LogReader::open(path, None) {
                    Ok(reader) => reader.header().clone(),
                    // A header too damaged to read names no session: the
                    // file's name does, as a folder of logs names each, so
                    // that the command reports the damage as that
                    // session's (`--json` included) when it reads it.
                    Err(StoreError::Corrupt { .. }) if session.is_none() => {
                        match path
                            .file_stem()
                            .and_then(|stem| stem.to_str())
                            .map(SessionId::parse)
                        {
                            Some(Ok(id)) => {
                                return Ok(vec![SessionRef {
                                    label: sessionlog_store::store_display(path),
                                    id,
                                }])
                            }
                            _ => LogReader::open(path, None)?.header().clone(),
                        }
                    }
                    Err(error) => return Err(error.into()),
                };
                if let Some(wanted) = session {
                    if wanted != header.id.as_str() {
                        bail!(UsageError(format!(
                            "{} holds session {}, not {wanted}",
                            path.display(),
                            header.id
                        )));
                    }
                }
                Ok(vec![SessionRef {
                    label: sessionlog_store::store_display(path),
                    id: header.id,
                }])
            }
            Target::Store(store) => {
                let ids = match session {
                    Some(wanted) => {
                        let id = SessionId::parse(wanted).map_err(|e| UsageError(e.to_string()))?;
                        if !store.contains(&id)? {
                            let all = store.ids()?;
                            let near = nearest_ids(&all, id.as_str());
                            bail!(UsageError(format!(
                                "no session {id} in {}{}",
                                sessionlog_store::store_display(store.path()),
                                match near.as_slice() {
                                    [] => String::new(),
                                    [one] => format!("; did you mean {one}?"),
                                    many => format!("; did you mean one of {}?", many.join(", ")),
                                }
                            )));
                        }
                        vec![id]
                    }
                    None => store.ids()?,
                };
                let store_part = format!("{}#", sessionlog_store::store_display(store.path()));
                Ok(ids
                    .into_iter()
                    .map(|id| SessionRef {
                        label: [store_part.as_str(), id.as_str()].concat(),
                        id,
                    })
                    .collect())
            }
        }
    }

    /// What `verify` reads before the sessions: every session (or just
    /// `--session`), and the damage outside any one session that listing
    /// them finds (for a database: session rows with an invalid id; events
    /// without a session row come after the sessions). SQLite's check of
    /// every page ([`Target::engine_check`]) and its count of the rows
    /// ([`Target::events_accounted_for`]) run beside the sessions' reads.
    pub fn audit(&self, session: Option<&str>) -> Result<Audit> {
        let Target::Store(store) = self else {
            return Ok(Audit {
                sessions: self.sessions(session)?,
                damage: Vec::new(),
            });
        };
        let audit = store.list_sessions()?;
        let ids = match session {
            Some(_) => self.sessions(session)?,
            None => {
                // `store#id`, from the store's part formatted once.
                let store_part = format!("{}#", sessionlog_store::store_display(store.path()));
                audit
                    .ids
                    .into_iter()
                    .map(|id| SessionRef {
                        label: [store_part.as_str(), id.as_str()].concat(),
                        id,
                    })
                    .collect()
            }
        };
        Ok(Audit {
            sessions: ids,
            damage: audit.damage,
        })
    }

    /// Whether counting the rows rules out events without a session row
    /// (see `Store::events_accounted_for`); always for a lone log.
    pub fn events_accounted_for(&self) -> Result<bool> {
        match self {
            Target::File(_) => Ok(true),
            Target::Store(store) => Ok(store.events_accounted_for()?),
        }
    }

    /// What SQLite's own check of every page finds of a database (see
    /// `Store::engine_check`); nothing for a lone log.
    pub fn engine_check(&self) -> Result<Vec<StoreError>> {
        match self {
            Target::File(_) => Ok(Vec::new()),
            Target::Store(store) => Ok(store.engine_check()?),
        }
    }

    /// Events without a session row (see `Store::unowned_events`), for
    /// an [`Audit`] whose counts do not rule them out, or once a session
    /// is found short of rows; nothing for a lone log.
    pub fn unowned_events(&self) -> Result<Vec<StoreError>> {
        match self {
            Target::File(_) => Ok(Vec::new()),
            Target::Store(store) => Ok(store.unowned_events()?),
        }
    }

    /// Holds one moment of a store for a command that reads all of it
    /// (see `Store::hold_read`); nothing for a lone log.
    pub fn hold_read(&self) -> Result<Option<HeldRead>> {
        Ok(match self {
            Target::File(_) => None,
            Target::Store(store) => Some(store.hold_read()?),
        })
    }

    /// The one session a command works on: `--session`, or the only one.
    pub fn session(&self, session: Option<&str>) -> Result<SessionRef> {
        let mut sessions = self.sessions(session)?;
        match sessions.len() {
            1 => Ok(sessions.remove(0)),
            0 => {
                let store = match self {
                    Target::File(path) => path.as_path(),
                    Target::Store(store) => store.path(),
                };
                bail!(UsageError(no_sessions(store)))
            }
            n => {
                const SHOWN: usize = 5;
                let mut ids: Vec<&str> = sessions
                    .iter()
                    .take(SHOWN)
                    .map(|session| session.id.as_str())
                    .collect();
                if n > SHOWN {
                    ids.push("…");
                }
                let store = match self {
                    Target::Store(store) => sessionlog_store::store_display(store.path()),
                    Target::File(path) => path.display().to_string(),
                };
                bail!(UsageError(format!(
                    "{store} holds {n} sessions ({}): pick one with --session ID{}",
                    ids.join(", "),
                    if n > SHOWN {
                        format!(
                            "; `sessionlog list {}` shows them all",
                            crate::terminal::shell_word(&store)
                        )
                    } else {
                        String::new()
                    }
                )))
            }
        }
    }

    /// A streaming reader of one session.
    pub fn stream(&self, session: &SessionRef) -> Result<Box<dyn SessionStream>> {
        Ok(match self {
            Target::File(path) => Box::new(LogReader::open(path, None)?),
            Target::Store(store) => store.stream(&session.id)?,
        })
    }

    /// Whether one session's last event is a seal, read from its end: a
    /// hint for a whole fold, which then hashes the chain from the start
    /// (`fold_through`). What cannot be read says no; the fold that follows
    /// reports it.
    pub fn ends_in_seal(&self, session: &SessionRef) -> bool {
        match self {
            Target::File(path) => sessionlog_store::log_ends_in_seal(path),
            Target::Store(store) => store.ends_in_seal(&session.id),
        }
    }

    /// Reads one session to its end without keeping it: its last seq and
    /// its torn tail, or its corruption. A command that prints as it reads
    /// runs this first, so that nothing is printed of a corrupt log.
    pub fn read_through(&self, session: &SessionRef) -> Result<(u64, Option<TornTail>)> {
        let mut stream = self.stream(session)?;
        let mut last_seq = 0;
        while let Some(record) = stream.next_event()? {
            last_seq = record.seq();
        }
        Ok((last_seq, stream.finish()?))
    }

    /// The good prefix of one session in memory.
    pub fn snapshot(&self, session: &SessionRef) -> Result<Snapshot> {
        Ok(match self {
            Target::File(path) => Snapshot::read(path, None)?,
            Target::Store(store) => store.snapshot(&session.id)?,
        })
    }

    /// The single writer of one session.
    pub fn writer(&self, session: &SessionRef, options: WriterOptions) -> Result<SessionWriter> {
        Ok(match self {
            Target::File(path) => open_log_writer(path, None, options, Io::default())?,
            Target::Store(store) => store.open_writer(&session.id, options)?,
        })
    }

    /// The writer of `session` for the commands that append what they are
    /// given (`append`, `preset`): it keeps no snapshot, since they build
    /// no review request.
    pub fn appender(&self, session: &SessionRef) -> Result<SessionWriter> {
        let options = WriterOptions {
            keep_snapshot: false,
            ..WriterOptions::default()
        };
        self.writer(session, options)
    }
}

/// A destination store a command creates when missing (`migrate`,
/// `import`). Should the command end with no session in it, a folder of
/// logs it made is removed again, with the parents it made: a refused
/// `migrate` or an `import` that imported nothing leaves no empty folder
/// behind. Only empty folders are removed, so a writer that opened the
/// store meanwhile either keeps it (its files are in it) or fails loudly
/// (its next file has no folder to go to).
///
/// A database file it made is kept. Another process may have opened it
/// meanwhile, and a SQLite writer in WAL mode goes on writing, and
/// acknowledging, into a file removed under it: removing it could lose
/// what that process was told is stored. A PostgreSQL schema is kept too.
#[derive(Debug)]
pub struct NewStore {
    store: Store,
    /// The folders this command made for a folder store that did not
    /// exist before, deepest first.
    made: Vec<PathBuf>,
}

impl NewStore {
    /// Opens the store at `path`, creating it (and a folder store's
    /// missing parents) when missing.
    pub fn create(path: &Path) -> Result<NewStore> {
        let made = match Backend::of_path(path) {
            Backend::Jsonl => path
                .ancestors()
                .take_while(|folder| !folder.as_os_str().is_empty() && !folder.exists())
                .map(Path::to_path_buf)
                .collect(),
            Backend::Sqlite | Backend::Postgres => Vec::new(),
        };
        let store = Store::create(path)?;
        Ok(NewStore { store, made })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Removes the folders this command made, deepest first, as long as
    /// each is empty: a folder store that holds a session (a file) stays.
    pub fn remove_if_empty(self) {
        let NewStore { store, made } = self;
        drop(store);
        for folder in &made {
            if std::fs::remove_dir(folder).is_err() {
                return;
            }
        }
    }
}

/// The ids of `ids` closest to `wanted`, for a "did you mean": those that
/// differ from it only in case, or by at most two edits (one for a short
/// id), at most three, closest first.
fn nearest_ids<'a>(ids: &'a [SessionId], wanted: &str) -> Vec<&'a str> {
    let wanted_lower = wanted.to_lowercase();
    let most = if wanted.chars().count() <= 4 { 1 } else { 2 };
    let mut near: Vec<(usize, &str)> = ids
        .iter()
        .map(SessionId::as_str)
        .filter_map(|id| {
            let distance = match id.to_lowercase() == wanted_lower {
                true => 0,
                false => edit_distance(id, wanted),
            };
            (distance <= most).then_some((distance, id))
        })
        .collect();
    near.sort();
    near.into_iter().take(3).map(|(_, id)| id).collect()
}

/// The Levenshtein distance of two texts, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether `path` names a lone log file rather than a store: a
/// PostgreSQL URL never does, whatever its database's name ends in.
pub fn is_lone_log(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "jsonl")
        && !path.is_dir()
        && Backend::of_path(path) != Backend::Postgres
}

/// The most a command reads of an input of its own (a pending action, a
/// reviewer's reply, a trust file): far above any real one, and a bound on
/// what `/dev/zero` or an endless pipe can make it hold.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The most `verify` reads of an anchor file, which holds a line for each
/// session of a store (some 200 bytes each): 4 GiB, twenty million
/// sessions, still a bound on an endless pipe.
pub const MAX_ANCHOR_FILE_BYTES: u64 = 4 << 30;

/// The most `report --audit` reads of what `review-audit --json` printed,
/// a row of some 300 bytes for each call audited: 256 MiB, most of a
/// million calls, still a bound on `/dev/zero` or an endless pipe.
pub const MAX_AUDIT_FILE_BYTES: u64 = 256 << 20;

/// Reads a whole file or stdin, naming the file on error, refusing more
/// than [`MAX_INPUT_BYTES`].
pub fn read_input(file: Option<&Path>) -> Result<Vec<u8>> {
    read_bounded(file, MAX_INPUT_BYTES, "pending action or reply")
}

/// [`read_input`] of at most `limit` bytes, the refusal naming the input
/// as `what` it is read as.
pub fn read_bounded(file: Option<&Path>, limit: u64, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let name = match file {
        Some(path) => {
            std::fs::File::open(path)
                .and_then(|file| file.take(limit + 1).read_to_end(&mut bytes))
                .with_context(|| format!("read {}", path.display()))?;
            path.display().to_string()
        }
        None => {
            std::io::stdin()
                .take(limit + 1)
                .read_to_end(&mut bytes)
                .context("read standard input")?;
            "standard input".to_owned()
        }
    };
    if bytes.len() as u64 > limit {
        bail!(UsageError(format!(
            "{name} holds more than {limit} bytes; an input this large is no {what}"
        )));
    }
    Ok(bytes)
}
