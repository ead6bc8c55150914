//! `migrate` copies every session from one store to another (any backend
//! to any backend) and proves the copy identical.
//!
//! Each source session is read once, as a stream. **Verify**: the session
//! is folded as it is read and staged in the destination in chunks (at
//! most `STAGE_CHUNK_EVENTS` events or about `STAGE_CHUNK_BYTES` bytes
//! of records each), so that what a run holds does not grow with a
//! session's length: to SQLite, in one transaction that the committer
//! keeps open while it inserts one chunk as the next is read; to
//! PostgreSQL, in one transaction on a connection of the run's own; to
//! JSONL, as a temporary file (a dot name, never listed) per session. A
//! corrupt session or one that breaks the rules (found once it is read to
//! its end) refuses the whole run, naming it, and what was staged is never
//! published: the sessions after it are still read and checked (not
//! staged), and the refusal named is the highest ranked of them all
//! (corruption over a seal that fails over a broken rule); a torn tail is
//! dropped and reported as a warning. An id that
//! already exists in the destination refuses the run before anything is
//! read. **Copy**: once every source
//! session verified, the staged sessions are made durable and visible — the
//! SQLite transaction committed with a full sync, each JSONL file fsynced
//! and published under its name, then the folder fsynced. A refused run
//! rolls the transaction back or deletes the temporary files: nothing is
//! written. **Compare**: the destination is read back, each session through
//! the destination's own reader, and compared with a digest of the source
//! taken during the single read (the header, the number of events, the last
//! seq and a CRC-32 over every record body); a mismatch is named by a full
//! comparison of that session, and fails the run. A run interrupted while
//! publishing is finished by [`migrate_with`] under `resume`, which checks
//! each session already in the destination as it checks any (its rules and
//! seals), proves the copy identical (as `diff` does, and without a torn
//! tail of its own) and skips it.
//!
//! A lone log file is a source of one session (`migrate_log`), read as a
//! store's log is.
//!
//! `diff` compares two stores session by session in bounded memory:
//! missing sessions, header fields, then the events in lockstep (seq, ts,
//! batch, type, data, and the record bytes), naming the first difference.
//! Both sides are read as their good prefixes.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sessionlog_projections::SessionState;
use sessionlog_schema::{
    encode_line, record_crc, DecodedHeader, EventRecord, SessionHeader, SessionId, TornTail,
};

use crate::jsonl::{read_header_as_is, JsonlStore};
use crate::leftovers;
use crate::reader::{Lend, LogReader, SessionStream};
#[cfg(feature = "postgres")]
use crate::sql::postgres::PostgresBulkCreate;
#[cfg(feature = "sqlite")]
use crate::sql::sqlite::SqliteBulkCreate;
use crate::state_snapshot;
use crate::store::Store;
use crate::writer::Durability;
use crate::{EventStream, Refusal, StoreError};

/// Where a migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigratePhase {
    /// Reading and checking each source session, and staging it in the
    /// destination (not yet visible there).
    Verify,
    /// Making the staged sessions durable and visible in the destination.
    Copy,
    /// Reading the destination back and comparing it with the source.
    Compare,
}

/// A progress report: `done` of `total` sessions of `phase`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateProgress {
    /// The phase.
    pub phase: MigratePhase,
    /// Sessions finished in this phase.
    pub done: usize,
    /// Sessions in the run.
    pub total: usize,
    /// The session just finished.
    pub session: Option<SessionId>,
}

/// Something the migration dropped, and why the run still succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateWarning {
    /// The session.
    pub session: SessionId,
    /// The torn tail left behind (the good prefix was copied).
    pub torn_tail: TornTail,
}

/// What a finished migration copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// Sessions copied.
    pub sessions: usize,
    /// Events copied, over all sessions.
    pub events: u64,
    /// Torn tails dropped.
    pub warnings: Vec<MigrateWarning>,
    /// Sessions a resumed run found already copied, proved identical and
    /// skipped (not counted in `sessions`).
    pub skipped: usize,
}

/// The first place where two stores differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The session, when the difference is inside one.
    pub session: Option<SessionId>,
    /// The seq, when the difference is in an event.
    pub seq: Option<u64>,
    /// What differs: `session`, a header member (`cwd`, `seedLength`, ...),
    /// `event count`, or an event member (`ts`, `batch`, `type`, `data`,
    /// `record`).
    pub field: String,
    /// The left store's value.
    pub left: DiffValue,
    /// The right store's value.
    pub right: DiffValue,
}

/// One store's side of a [`Difference`], typed, so that each reader of it
/// gets it as its kind: a person quoted and escaped text, JSON its own
/// types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffValue {
    /// A number: a seq, a ts, a batch, a count, a header's integer.
    Number(u64),
    /// Text: an id, a cwd, a type, a header's vocabulary word. Shown to a
    /// person quoted, its control characters escaped.
    Text(String),
    /// JSON as the record holds it: an event's `data`, a record's body.
    Json(String),
    /// A header member that is null.
    Null,
    /// A member the record does not hold (a `batch`).
    Absent,
    /// What a side holds of a whole session or of its events: `missing`,
    /// `present`, a digest of its events.
    Said(String),
}

impl DiffValue {
    /// [`DiffValue::Text`] of `value`, [`DiffValue::Null`] without one.
    fn text_or_null(value: Option<&str>) -> DiffValue {
        value.map_or(DiffValue::Null, |value| DiffValue::Text(value.to_owned()))
    }
}

impl fmt::Display for DiffValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiffValue::Number(number) => write!(f, "{number}"),
            DiffValue::Text(text) => write!(f, "{text:?}"),
            DiffValue::Json(text) | DiffValue::Said(text) => f.write_str(text),
            DiffValue::Null => f.write_str("null"),
            DiffValue::Absent => f.write_str("absent"),
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(session) = &self.session {
            write!(f, "session {session}")?;
            if let Some(seq) = self.seq {
                write!(f, ", seq {seq}")?;
            }
            write!(f, ": ")?;
        }
        write!(
            f,
            "{} differs: left {}, right {}",
            self.field, self.left, self.right
        )
    }
}

impl fmt::Display for MigrateWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "session {}: dropped a torn tail of {} bytes at line {} ({})",
            self.session, self.torn_tail.bytes, self.torn_tail.position.line, self.torn_tail.reason
        )
    }
}

/// How a migration treats sessions the destination already holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrateOptions {
    /// Resume an interrupted run: a session the destination already holds is
    /// checked as a first run checks it (its rules and seals), compared with
    /// the source (as `diff` does) and skipped when identical; one that
    /// differs, or whose copy ends in a torn tail, still refuses the run.
    /// Without it any such session refuses the run before anything is read.
    pub resume: bool,
}

/// Copies every session of `from` into `to`, then proves the copy identical.
/// See the module docs for the phases and what refuses a run.
///
/// ```
/// use sessionlog_store::{diff, migrate, Store};
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
/// let database = Store::create(&folder.path().join("copy.db"))?;
/// let report = migrate(&store, &database, &mut |_progress| {})?;
/// assert_eq!(report.sessions, 1);
/// assert_eq!(diff(&store, &database)?, None, "the copy is identical");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn migrate(
    from: &Store,
    to: &Store,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<MigrateReport, StoreError> {
    migrate_with(from, to, MigrateOptions::default(), progress)
}

/// [`migrate`] under `options`. With `resume`, the report counts the
/// sessions found already copied in `skipped`.
pub fn migrate_with(
    from: &Store,
    to: &Store,
    options: MigrateOptions,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<MigrateReport, StoreError> {
    migrate_from(&SessionSource::Store(from), to, options, progress)
}

/// Copies the lone log at `path` (a `.jsonl` file of any name) into `to`
/// as [`migrate`] copies a store of one session: verified whole, staged,
/// published, read back and compared.
pub fn migrate_log(
    path: &Path,
    to: &Store,
    options: MigrateOptions,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<MigrateReport, StoreError> {
    migrate_from(&SessionSource::Log(path), to, options, progress)
}

/// Where the sessions of a migration or a diff come from: a store, or a
/// lone log file, which is a store of one session.
#[derive(Debug, Clone, Copy)]
pub enum SessionSource<'a> {
    /// Every session of a store.
    Store(&'a Store),
    /// The one session of a lone log file.
    Log(&'a Path),
}

impl SessionSource<'_> {
    fn ids(&self) -> Result<Vec<SessionId>, StoreError> {
        match self {
            SessionSource::Store(store) => whole_store_ids(store),
            SessionSource::Log(path) => Ok(vec![read_header_as_is(path, None)?.header.id]),
        }
    }

    /// A streaming reader of session `id`.
    fn stream(&self, id: &SessionId) -> Result<Box<dyn SessionStream>, StoreError> {
        match self {
            SessionSource::Store(store) => store.stream(id),
            SessionSource::Log(path) => Ok(Box::new(LogReader::open(path, Some(id.clone()))?)),
        }
    }

    /// Holds one moment of a store's source (see [`Store::hold_read`]).
    fn hold_read(&self) -> Result<Option<crate::HeldRead>, StoreError> {
        match self {
            SessionSource::Store(store) => store.hold_read().map(Some),
            SessionSource::Log(_) => Ok(None),
        }
    }

    /// The source as a run that resumes the migration names it: a path
    /// made absolute (the resuming run may start elsewhere), a database
    /// URL without its password, on one line.
    fn resume_name(&self) -> String {
        let path = match self {
            SessionSource::Store(store) if store.backend() == crate::Backend::Postgres => {
                return crate::store_display(store.path());
            }
            SessionSource::Store(store) => store.path(),
            SessionSource::Log(path) => path,
        };
        crate::store_display(&std::path::absolute(path).unwrap_or_else(|_| path.to_owned()))
    }

    fn session_path(&self, id: &SessionId) -> PathBuf {
        match self {
            SessionSource::Store(store) => store.session_path(id),
            SessionSource::Log(path) => path.to_path_buf(),
        }
    }

    /// The header and events of session `id`; a log's torn tail, once
    /// its good prefix is read, is warned of through `tracing` (what is
    /// compared is that prefix).
    fn records(&self, id: &SessionId) -> Result<(DecodedHeader, EventStream), StoreError> {
        let reader = match self {
            SessionSource::Store(Store::Jsonl(store)) => store.reader(id)?,
            // A database's rows (only a log has a torn tail to warn of).
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            SessionSource::Store(store) => return store.records(id),
            SessionSource::Log(path) => LogReader::open(path, Some(id.clone()))?,
        };
        let header = DecodedHeader {
            header: reader.header().clone(),
            vocabulary_errors: reader.header_vocabulary_errors().to_vec(),
            body: reader.header_body().to_owned(),
        };
        let events = WarnOfTornTail {
            reader: Some(reader),
            path: self.session_path(id),
        };
        Ok((header, Box::new(events)))
    }
}

/// A log's events, then a `tracing` warning if it ends in a torn tail.
struct WarnOfTornTail<R: Lend> {
    reader: Option<LogReader<R>>,
    path: PathBuf,
}

impl<R: Lend> Iterator for WarnOfTornTail<R> {
    type Item = Result<EventRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let reader = self.reader.as_mut()?;
        match reader.next_event() {
            Ok(Some(record)) => return Some(Ok(record)),
            Ok(None) => {}
            Err(error) => {
                self.reader = None;
                return Some(Err(error));
            }
        }
        let summary = match self.reader.take()?.finish() {
            Ok(summary) => summary,
            Err(error) => return Some(Err(error)),
        };
        if let Some(torn) = summary.torn_tail {
            tracing::warn!(
                path = %self.path.display(),
                "comparing the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                torn.bytes,
                torn.position.line,
                torn.position.offset,
                torn.reason
            );
        }
        None
    }
}

fn migrate_from(
    from: &SessionSource<'_>,
    to: &Store,
    options: MigrateOptions,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<MigrateReport, StoreError> {
    let mut ids = from.ids()?;
    // A destination database damaged as a whole (events without a session
    // row, a row with an invalid id) is refused before anything is staged:
    // the proof by read-back would find it only after publishing.
    if !matches!(to, Store::Jsonl(_)) {
        to.ids()?;
    }
    let mut skipped = 0usize;
    let mut present = Vec::new();
    for id in &ids {
        if to.contains(id)? {
            if !options.resume {
                return Err(StoreError::AlreadyExists {
                    id: id.clone(),
                    path: to.path().to_owned(),
                });
            }
            present.push(id.clone());
        }
    }
    let mut warnings = Vec::new();
    // A refused source session ends the run, but only once every session
    // is checked: the refusal reported is then the source's highest ranked
    // (corruption over a seal that fails over a broken rule), as `verify`
    // ranks it, whatever the order of the ids.
    let mut refused = Refusal::default();
    for id in &present {
        // Checked as a first run checks it (a session that breaks the
        // rules or whose seal fails is refused, whatever the destination
        // holds), then proved to be its copy.
        let checked = stage_source_session(from, id, None).map_err(session_named(id));
        let Some((_, torn_tail)) = refusal_or_staged(&mut refused, checked)? else {
            continue;
        };
        if refused.is_some() {
            continue;
        }
        let not_the_copy = |difference: String| {
            StoreError::io(
                "resume the migration",
                to.path(),
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "session {id} is already in the destination but is not the source's copy ({difference}); nothing was written"
                    ),
                ),
            )
        };
        if let Some(difference) = diff_session(from, &SessionSource::Store(to), id)? {
            return Err(not_the_copy(difference.to_string()));
        }
        // What a copy is made of is its source's good prefix: a torn tail
        // after it was written there since.
        if let Some(torn) = torn_tail_of(to, id)? {
            return Err(not_the_copy(format!(
                "the destination's log ends in a torn tail of {} bytes at line {} (byte offset {})",
                torn.bytes, torn.position.line, torn.position.offset
            )));
        }
        if let Some(torn_tail) = torn_tail {
            warnings.push(MigrateWarning {
                session: id.clone(),
                torn_tail,
            });
        }
        skipped += 1;
    }
    ids.retain(|id| !present.contains(id));
    let total = ids.len();
    let mut staging = Staging::begin(to, &from.resume_name())?;
    let mut digests = Vec::with_capacity(total);
    let mut events = 0u64;
    let held = from.hold_read()?;
    for (index, id) in ids.iter().enumerate() {
        // Past a refusal, the rest is checked and no longer staged.
        let staged = match refused.is_some() {
            true => None,
            false => Some(&mut staging),
        };
        let checked = stage_source_session(from, id, staged).map_err(session_named(id));
        if let Some((digest, torn_tail)) = refusal_or_staged(&mut refused, checked)? {
            if let Some(torn_tail) = torn_tail {
                warnings.push(MigrateWarning {
                    session: id.clone(),
                    torn_tail,
                });
            }
            events += digest.summary.count;
            digests.push(digest);
        }
        progress(MigrateProgress {
            phase: MigratePhase::Verify,
            done: index + 1,
            total,
            session: Some(id.clone()),
        });
    }
    refused.into_result()?;
    // Ends the source's read before publishing. Without the SQLite backend
    // the guard holds nothing, which clippy then points out.
    #[allow(clippy::drop_non_drop)]
    drop(held);
    staging.publish(&ids, progress)?;
    if let Some(difference) = compare_copies(from, to, &ids, &digests, progress)? {
        return Err(StoreError::io(
            "compare the copy",
            to.path(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the copy differs from the source: {difference}"),
            ),
        ));
    }
    // The migration an interrupted run from this source began is
    // finished: the locks such runs left, the marks that the folder may
    // lack sessions, go (those of runs from other sources stay).
    if let (true, Store::Jsonl(store)) = (options.resume, to) {
        crate::leftovers::remove_finished(store.folder(), &from.resume_name(), store.io())?;
    }
    Ok(MigrateReport {
        sessions: total,
        events,
        warnings,
        skipped,
    })
}

/// The first difference between the sessions of `left` and `right`, or
/// `None` when they hold the same sessions with the same records.
pub fn diff(left: &Store, right: &Store) -> Result<Option<Difference>, StoreError> {
    diff_sources(&SessionSource::Store(left), &SessionSource::Store(right))
}

/// [`diff`] of two sources, either of which may be a lone log.
pub fn diff_sources(
    left: &SessionSource<'_>,
    right: &SessionSource<'_>,
) -> Result<Option<Difference>, StoreError> {
    let left_ids = left.ids()?;
    let right_ids = right.ids()?;
    // Every session of both sides is read to its end, in id order, after
    // a difference too: every command refuses a corrupt log, so a corrupt
    // session anywhere refuses the comparison (exit 2) rather than being
    // passed over for a difference found before it.
    let (mut lefts, mut rights) = (left_ids.iter().peekable(), right_ids.iter().peekable());
    let mut first = None;
    loop {
        let difference = match (lefts.peek(), rights.peek()) {
            (None, None) => return Ok(first),
            (Some(on_left), Some(on_right)) if on_left == on_right => {
                rights.next();
                lefts
                    .next()
                    .map_or(Ok(None), |id| diff_session(left, right, id))?
            }
            (Some(on_left), on_right) if on_right.is_none_or(|on_right| on_left < on_right) => {
                lefts
                    .next()
                    .map_or(Ok(None), |id| one_sided(left, id, "present", "missing"))?
            }
            _ => rights
                .next()
                .map_or(Ok(None), |id| one_sided(right, id, "missing", "present"))?,
        };
        first = first.or(difference);
    }
}

/// The difference of session `id`, which only `present` holds (`left` and
/// `right` say where it is), once it is read through: a corrupt one is
/// refused as corrupt rather than called missing on the other side.
fn one_sided(
    present: &SessionSource<'_>,
    id: &SessionId,
    left: &str,
    right: &str,
) -> Result<Option<Difference>, StoreError> {
    let (_, events) = present.records(id)?;
    for event in events {
        event?;
    }
    Ok(Some(missing_session(id, left, right)))
}

/// The sessions of `store` once it passed its whole-store check (SQLite's
/// own check of every page included): damage anywhere refuses the run, so
/// a damaged store is never copied, nor called identical to another.
fn whole_store_ids(store: &Store) -> Result<Vec<SessionId>, StoreError> {
    // Every session or none: an entry named like a log that holds none (a
    // symbolic link, a folder, a name that is no id) would be left out of
    // a copy that then proves itself "identical".
    #[allow(irrefutable_let_patterns)] // only JSONL without the database features
    if let Store::Jsonl(folder) = store {
        if let Some((path, what)) = folder.passed_over()?.into_iter().next() {
            return Err(StoreError::io(
                "read the session",
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{what}; every session of a store is copied or compared, so move it out \
                         of the folder or put the log itself in its place"
                    ),
                ),
            ));
        }
    }
    let mut audit = store.audit(true)?;
    match audit.damage.is_empty() {
        true => Ok(audit.ids),
        false => Err(audit.damage.remove(0)),
    }
}

/// Events a staged chunk holds at most.
const STAGE_CHUNK_EVENTS: usize = 4096;
/// Record bytes past which a staged chunk is handed on.
const STAGE_CHUNK_BYTES: usize = 4 << 20;

/// Names session `id` in an error about one of its events (once: an
/// error about its header names it already).
/// What checking a source session gave: `Ok(None)` when it was refused
/// (noted in `refused`, to be reported once every session is checked), an
/// error that ends the run at once (I/O, contention), or the session.
fn refusal_or_staged<T>(
    refused: &mut Refusal,
    checked: Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    match checked {
        Ok(staged) => Ok(Some(staged)),
        Err(error) if error.class().precedence() > 0 => {
            refused.note(error);
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

fn session_named(id: &SessionId) -> impl Fn(StoreError) -> StoreError + '_ {
    move |error| match error {
        StoreError::InvalidEvent(reason) if !reason.starts_with(&format!("session {id}: ")) => {
            StoreError::InvalidEvent(format!("session {id}: {reason}"))
        }
        error => error,
    }
}

/// The torn tail after the good prefix of session `id` of `store`, read to
/// its end (only a log has one).
fn torn_tail_of(store: &Store, id: &SessionId) -> Result<Option<TornTail>, StoreError> {
    let mut stream = store.stream(id)?;
    while stream.next_event()?.is_some() {}
    stream.finish()
}

/// Reads session `id` once, folding it and staging it in `staging` chunk
/// by chunk as it is read, and returns its digest and torn tail.
/// Corruption and rule violations refuse it with the session named; what
/// was staged of it is then never published.
fn stage_source_session(
    from: &SessionSource<'_>,
    id: &SessionId,
    mut staging: Option<&mut Staging<'_>>,
) -> Result<(SessionDigest, Option<TornTail>), StoreError> {
    let mut stream = from.stream(id)?;
    let header = stream.header().clone();
    let header_body = stream.header_body().to_owned();
    if let Some(staging) = staging.as_deref_mut() {
        staging.add_session(&header, &header_body)?;
    }
    let mut state = SessionState::with_header_body(header.clone(), &header_body);
    let path = from.session_path(id);
    // What the session breaks, ranked: a seal that does not hold anywhere
    // in it outranks a broken rule, or a header out of vocabulary, before
    // it (exit 7 over 4); of equals the first is kept.
    let mut refusal = Refusal::default();
    if let Some(error) = stream.header_vocabulary_errors().first() {
        refusal.note(StoreError::HeaderVocabulary {
            path: path.clone(),
            error: error.clone(),
        });
    }
    let mut digest = EventsDigest::default();
    let mut chunk: Vec<EventRecord> = Vec::new();
    let mut chunk_bytes = 0;
    // The CRC of the last record staged: the anchor of its snapshot.
    let mut last_crc = 0;
    let mut staged = |staging: &mut Staging<'_>, chunk: Vec<EventRecord>| {
        if let Some(last) = chunk.last() {
            last_crc = record_crc(&header.id, last.body().as_bytes());
        }
        staging.add_events(&header, chunk)
    };
    while let Some(event) = stream.next_event_folded(&mut state)? {
        if let Err(violation) = event.folded {
            refusal.note(StoreError::Rule {
                path: path.clone(),
                violation,
            });
        }
        digest.add(&event.record);
        let Some(staging) = staging.as_deref_mut() else {
            continue;
        };
        chunk_bytes += event.record.body().len();
        chunk.push(event.record);
        if chunk.len() >= STAGE_CHUNK_EVENTS || chunk_bytes >= STAGE_CHUNK_BYTES {
            staged(staging, std::mem::take(&mut chunk))?;
            chunk_bytes = 0;
        }
    }
    let torn_tail = stream.finish()?;
    refusal.into_result()?;
    if let Some(staging) = staging {
        if !chunk.is_empty() {
            staged(staging, chunk)?;
        }
        staging.end_session(&state, &header_body, digest.count, last_crc)?;
    }
    let digest = SessionDigest {
        header,
        header_body,
        summary: digest.finish(),
    };
    Ok((digest, torn_tail))
}

/// What the source held of one session, to compare the copy against
/// without reading the source again.
#[derive(Debug)]
struct SessionDigest {
    header: SessionHeader,
    /// The header record's body as the source stored it.
    header_body: String,
    summary: EventsSummary,
}

/// The number of events, the last seq and a CRC-32 over every record body
/// (each preceded by its length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventsSummary {
    count: u64,
    last_seq: u64,
    crc: u32,
}

#[derive(Default)]
struct EventsDigest {
    count: u64,
    last_seq: u64,
    hasher: crc32fast::Hasher,
}

impl EventsDigest {
    fn add(&mut self, record: &EventRecord) {
        let body = record.body().as_bytes();
        self.hasher.update(&(body.len() as u64).to_le_bytes());
        self.hasher.update(body);
        self.count += 1;
        self.last_seq = record.seq();
    }

    fn finish(self) -> EventsSummary {
        EventsSummary {
            count: self.count,
            last_seq: self.last_seq,
            crc: self.hasher.finalize(),
        }
    }
}

impl fmt::Display for EventsSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events through seq {}, body CRC-32 {:08x}",
            self.count, self.last_seq, self.crc
        )
    }
}

/// Compares every copied session with its digest, the second half on
/// another thread (reading back is decoding, and the two halves do not
/// share it), reporting each session compared in order.
fn compare_copies(
    from: &SessionSource<'_>,
    to: &Store,
    ids: &[SessionId],
    digests: &[SessionDigest],
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<Option<Difference>, StoreError> {
    let total = ids.len();
    let half = total / 2;
    let stop = AtomicBool::new(false);
    let compare = |ids: &[SessionId], digests: &[SessionDigest], done: &mut dyn FnMut(usize)| {
        for (index, (id, digest)) in ids.iter().zip(digests).enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let found = compare_copy(from, to, id, digest);
            if !matches!(found, Ok(None)) {
                stop.store(true, Ordering::Relaxed);
                return found;
            }
            done(index);
        }
        Ok(None)
    };
    let report = |index: usize, progress: &mut dyn FnMut(MigrateProgress)| {
        progress(MigrateProgress {
            phase: MigratePhase::Compare,
            done: index + 1,
            total,
            session: ids.get(index).cloned(),
        });
    };
    std::thread::scope(|scope| {
        let second = scope.spawn(|| compare(&ids[half..], &digests[half..], &mut |_| {}));
        let first = compare(&ids[..half], &digests[..half], &mut |index| {
            report(index, progress)
        });
        let second = second
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match (first, second) {
            (Ok(None), Ok(None)) => {
                (half..total).for_each(|index| report(index, progress));
                Ok(None)
            }
            (Ok(None), second) => second,
            (first, _) => first,
        }
    })
}

/// Reads session `id` of the destination back through its reader and
/// compares it with the source's digest. A mismatch is named by comparing
/// the session with the source record by record.
fn compare_copy(
    from: &SessionSource<'_>,
    to: &Store,
    id: &SessionId,
    digest: &SessionDigest,
) -> Result<Option<Difference>, StoreError> {
    let (header, events) = to.records(id)?;
    let source = (&digest.header, digest.header_body.as_str());
    let copy = (&header.header, header.body.as_str());
    if let Some(difference) = diff_headers(id, source, copy) {
        return Ok(Some(difference));
    }
    let mut copied = EventsDigest::default();
    for record in events {
        copied.add(&record?);
    }
    let copied = copied.finish();
    if copied == digest.summary {
        return Ok(None);
    }
    if let Some(difference) = diff_session(from, &SessionSource::Store(to), id)? {
        return Ok(Some(difference));
    }
    Ok(Some(Difference {
        session: Some(id.clone()),
        seq: None,
        field: "events".to_owned(),
        left: DiffValue::Said(digest.summary.to_string()),
        right: DiffValue::Said(copied.to_string()),
    }))
}

/// Where verified sessions wait, invisible, until every source session
/// verified.
enum Staging<'s> {
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteBulkCreate),
    /// Boxed: a connection with its statement cache is large.
    #[cfg(feature = "postgres")]
    Postgres(Box<PostgresBulkCreate>),
    Jsonl(JsonlStaging<'s>),
}

/// Temporary files of a JSONL destination, deleted unless published.
struct JsonlStaging<'s> {
    store: &'s JsonlStore,
    /// The `<pid>-<ms>` of this run, in every temporary name it makes.
    token: String,
    /// The run's lock file, held for its whole life, so that `sessionlog
    /// clean` leaves its staged files; removed at the end.
    lock: (File, PathBuf),
    /// Each staged session's temporary file and final name, in order.
    staged: Vec<(PathBuf, PathBuf)>,
    /// The temporary file of the session being staged, open for writing.
    writing: Option<File>,
    /// What it holds so far: its bytes and its lines, header included.
    written: (u64, u64),
    /// The staged state snapshots: renamed beside their logs once those
    /// are published.
    snapshots: Vec<StagedSnapshot>,
}

impl<'s> Staging<'s> {
    /// Begins the staging of a migration from the source `source` (as
    /// [`SessionSource::resume_name`] gives it) into `to`.
    fn begin(to: &'s Store, source: &str) -> Result<Staging<'s>, StoreError> {
        Ok(match to {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => Staging::Sqlite(store.bulk_create(Durability::Fsync)?),
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => Staging::Postgres(Box::new(store.bulk_create()?)),
            Store::Jsonl(store) => Staging::Jsonl(JsonlStaging::begin(store, source)?),
        })
    }

    /// Starts staging a session; its header record is copied as the
    /// source stored it (`header_body`), not re-encoded. Its events follow
    /// ([`Staging::add_events`]), then [`Staging::end_session`].
    fn add_session(&mut self, header: &SessionHeader, header_body: &str) -> Result<(), StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Staging::Sqlite(bulk) => bulk.add_session(header.clone(), header_body.to_owned()),
            #[cfg(feature = "postgres")]
            Staging::Postgres(bulk) => bulk.add_session(header, header_body),
            Staging::Jsonl(staging) => staging.add_session(header, header_body),
        }
    }

    /// Stages the next events of the session of `header`, the last one
    /// started.
    fn add_events(
        &mut self,
        header: &SessionHeader,
        events: Vec<EventRecord>,
    ) -> Result<(), StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Staging::Sqlite(bulk) => bulk.add_events(&header.id, events),
            #[cfg(feature = "postgres")]
            Staging::Postgres(bulk) => bulk.add_events(&header.id, &events),
            Staging::Jsonl(staging) => staging.add_events(&header.id, &events),
        }
    }

    /// Ends the session last started: every event of it is staged, the
    /// `events` of them the fold `state` holds, the last one of CRC
    /// `last_crc`, after the header stored as `header_body`. A session
    /// long enough gets the state snapshot a closing writer would leave
    /// (docs/FORMAT.md, "State snapshots"), published with it: its first
    /// open then folds nothing. In a database it is written in the
    /// migration's transaction, so what fails it fails the migration; a
    /// JSONL sidecar that cannot be written is only warned of.
    fn end_session(
        &mut self,
        state: &SessionState,
        header_body: &str,
        events: u64,
        last_crc: u32,
    ) -> Result<(), StoreError> {
        let events = usize::try_from(events).unwrap_or(usize::MAX);
        let id = &state.header().id;
        match self {
            #[cfg(feature = "sqlite")]
            Staging::Sqlite(bulk) => {
                match state_snapshot::of_new_rows(state, header_body, events, last_crc) {
                    Some((anchor, bytes)) => bulk.add_snapshot(id, anchor, bytes),
                    None => Ok(()),
                }
            }
            #[cfg(feature = "postgres")]
            Staging::Postgres(bulk) => {
                match state_snapshot::of_new_rows(state, header_body, events, last_crc) {
                    Some((anchor, bytes)) => bulk.add_snapshot(id, anchor, &bytes),
                    None => Ok(()),
                }
            }
            Staging::Jsonl(staging) => {
                staging.writing = None;
                if state_snapshot::kept_at_creation(events) {
                    staging.stage_snapshot(state, header_body, last_crc);
                }
                Ok(())
            }
        }
    }

    /// Makes every staged session durable and visible, reporting each.
    fn publish(
        self,
        ids: &[SessionId],
        progress: &mut dyn FnMut(MigrateProgress),
    ) -> Result<(), StoreError> {
        let total = ids.len();
        let mut published = |index: usize| {
            progress(MigrateProgress {
                phase: MigratePhase::Copy,
                done: index + 1,
                total,
                session: ids.get(index).cloned(),
            });
        };
        match self {
            #[cfg(feature = "sqlite")]
            Staging::Sqlite(bulk) => {
                bulk.commit()?;
                (0..total).for_each(published);
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Staging::Postgres(bulk) => {
                bulk.commit()?;
                (0..total).for_each(published);
                Ok(())
            }
            Staging::Jsonl(staging) => staging.publish(&mut published),
        }
    }
}

/// A state snapshot a JSONL staging wrote, waiting for its log.
struct StagedSnapshot {
    /// Its temporary file, of the run's token.
    temp: PathBuf,
    /// The final name of the log it is of.
    log: PathBuf,
    id: SessionId,
    /// The seq it was taken at.
    seq: u64,
}

impl<'s> JsonlStaging<'s> {
    /// Takes the run's lock, which names `source`: should the run be
    /// interrupted, `verify` and `clean` say what to resume it from.
    fn begin(store: &'s JsonlStore, source: &str) -> Result<JsonlStaging<'s>, StoreError> {
        let token = leftovers::new_token();
        let path = store.folder().join(leftovers::migration_lock_name(&token));
        let mut file = store
            .io()
            .create_temp(&path)
            .map_err(|source| StoreError::io("create", &path, source))?;
        leftovers::hold(&file);
        store
            .io()
            .write_all(&mut file, &path, leftovers::lock_text(source).as_bytes())
            .map_err(|source| StoreError::io("write", &path, source))?;
        // Durable before anything is staged: a lock that names no source
        // after a crash is one whose run published nothing.
        store
            .io()
            .sync_data(&file, &path)
            .map_err(|source| StoreError::io("fsync", &path, source))?;
        Ok(JsonlStaging {
            store,
            token,
            lock: (file, path),
            staged: Vec::new(),
            writing: None,
            written: (0, 0),
            snapshots: Vec::new(),
        })
    }

    /// Starts the session's temporary file beside its final name with its
    /// header record; no fsync yet.
    fn add_session(&mut self, header: &SessionHeader, header_body: &str) -> Result<(), StoreError> {
        let io = self.store.io();
        let path = self.store.log_path(&header.id);
        if path.symlink_metadata().is_ok() {
            return Err(StoreError::AlreadyExists {
                id: header.id.clone(),
                path,
            });
        }
        let temp = self
            .store
            .folder()
            .join(format!(".{}.jsonl.tmp-{}", header.id, self.token));
        let mut file = io
            .create_temp(&temp)
            .map_err(|source| StoreError::io("create", &temp, source))?;
        self.staged.push((temp.clone(), path));
        let line = encode_line(&header.id, header_body);
        io.write_all(&mut file, &temp, line.as_bytes())
            .map_err(|source| StoreError::io("write", &temp, source))?;
        self.writing = Some(file);
        self.written = (line.len() as u64, 1);
        Ok(())
    }

    /// Appends the next events of session `id` to its temporary file.
    fn add_events(&mut self, id: &SessionId, events: &[EventRecord]) -> Result<(), StoreError> {
        let (Some(file), Some((temp, _))) = (self.writing.as_mut(), self.staged.last()) else {
            unreachable!("events are staged only after their session's header");
        };
        let mut bytes = String::new();
        for record in events {
            bytes.push_str(&record.encode(id));
        }
        self.store
            .io()
            .write_all(file, temp, bytes.as_bytes())
            .map_err(|source| StoreError::io("write", temp, source))?;
        self.written.0 += bytes.len() as u64;
        self.written.1 += events.len() as u64;
        Ok(())
    }

    /// Writes the state snapshot of the session staged last, whose fold is
    /// `state` and last record's CRC `last_crc`, to a temporary file of
    /// this run (which `sessionlog clean` removes should the run be
    /// killed), for [`JsonlStaging::publish`] to rename beside its log. A
    /// snapshot is a cache: one that cannot be written is warned of, and
    /// the session's first open folds it.
    fn stage_snapshot(&mut self, state: &SessionState, header_body: &str, last_crc: u32) {
        let Some((_, path)) = self.staged.last() else {
            return;
        };
        let id = &state.header().id;
        let anchor = state_snapshot::SnapshotAnchor {
            seq: state.seq(),
            record_crc: last_crc,
            offset: self.written.0,
            lines: self.written.1,
        };
        let bytes = state_snapshot::encode(state, state_snapshot::header_crc(header_body), anchor);
        let temp = self
            .store
            .folder()
            .join(format!(".{id}.jsonl.state.tmp-{}", self.token));
        let io = self.store.io();
        let mut file = match io.create_temp(&temp) {
            Ok(file) => file,
            Err(source) => {
                let error = StoreError::io("create", &temp, source);
                return state_snapshot::not_kept(id, anchor.seq, &error);
            }
        };
        match io.write_all(&mut file, &temp, &bytes) {
            Ok(()) => self.snapshots.push(StagedSnapshot {
                temp,
                log: path.clone(),
                id: id.clone(),
                seq: anchor.seq,
            }),
            Err(source) => {
                // Never published: a sidecar cut short is no snapshot.
                let _ = std::fs::remove_file(&temp);
                let error = StoreError::io("write", &temp, source);
                state_snapshot::not_kept(id, anchor.seq, &error);
            }
        }
    }

    /// fsyncs and publishes each staged file (a hard link: an existing name
    /// is never replaced), then fsyncs the folder.
    fn publish(mut self, published: &mut dyn FnMut(usize)) -> Result<(), StoreError> {
        let io = self.store.io().clone();
        let staged = std::mem::take(&mut self.staged);
        for (index, (temp, path)) in staged.iter().enumerate() {
            let result = std::fs::File::open(temp)
                .and_then(|file| io.sync_data(&file, temp))
                .map_err(|source| StoreError::io("fdatasync", temp, source))
                .and_then(|()| {
                    io.publish(temp, path)
                        .map_err(|source| StoreError::io("publish", path, source))
                });
            if let Err(error) = result {
                self.staged = staged[index..].to_vec();
                return Err(error);
            }
            published(index);
        }
        // Each snapshot once its log is published: a snapshot is never
        // beside a log it is not of, and one not renamed is removed with
        // the run's other temporary files.
        for staged in std::mem::take(&mut self.snapshots) {
            let snapshot = crate::jsonl::state_snapshot_path(&staged.log);
            if let Err(source) = io.rename_snapshot(&staged.temp, &snapshot) {
                let _ = std::fs::remove_file(&staged.temp);
                let error = StoreError::io("write the state snapshot", &snapshot, source);
                state_snapshot::not_kept(&staged.id, staged.seq, &error);
            }
        }
        let folder = self.store.folder();
        io.sync_folder(folder)
            .map_err(|source| StoreError::io("fsync folder", folder, source))
    }
}

impl Drop for JsonlStaging<'_> {
    /// Deletes the temporary files of sessions never published, and of
    /// snapshots never renamed, then the run's lock file.
    fn drop(&mut self) {
        let snapshots = self.snapshots.iter().map(|staged| &staged.temp);
        for temp in self.staged.iter().map(|(temp, _)| temp).chain(snapshots) {
            let _ = std::fs::remove_file(temp);
        }
        let _ = std::fs::remove_file(&self.lock.1);
    }
}

/// The first difference of session `id`, which both sides hold, once
/// both are read to their ends.
fn diff_session(
    left: &SessionSource<'_>,
    right: &SessionSource<'_>,
    id: &SessionId,
) -> Result<Option<Difference>, StoreError> {
    let (left_header, left_events) = left.records(id)?;
    let (right_header, right_events) = right.records(id)?;
    let mut first = diff_headers(
        id,
        (&left_header.header, &left_header.body),
        (&right_header.header, &right_header.body),
    );
    // Both sides are read to their ends whatever is found first: an error
    // further on (corruption) outranks a difference.
    let (mut left_events, mut right_events) = (left_events.fuse(), right_events.fuse());
    let (mut left_count, mut right_count) = (0u64, 0u64);
    loop {
        let (left_record, right_record) = (
            left_events.next().transpose()?,
            right_events.next().transpose()?,
        );
        left_count += u64::from(left_record.is_some());
        right_count += u64::from(right_record.is_some());
        match (left_record, right_record) {
            (None, None) => break,
            (Some(left_record), Some(right_record)) if first.is_none() => {
                first = diff_records(id, &left_record, &right_record);
            }
            _ => {}
        }
    }
    Ok(first.or_else(|| {
        (left_count != right_count).then(|| Difference {
            session: Some(id.clone()),
            seq: None,
            field: "event count".to_owned(),
            left: DiffValue::Number(left_count),
            right: DiffValue::Number(right_count),
        })
    }))
}

/// The first difference between two header records, each a header and its
/// body as stored: a field, or else their bytes (`header record`: the same
/// fields in another member order or spelling), as [`diff_records`] ends
/// with the record's bytes.
fn diff_headers(
    id: &SessionId,
    (left, left_body): (&SessionHeader, &str),
    (right, right_body): (&SessionHeader, &str),
) -> Option<Difference> {
    let text = |value: &str| DiffValue::Text(value.to_owned());
    let fields: [(&str, DiffValue, DiffValue); 9] = [
        ("id", text(left.id.as_str()), text(right.id.as_str())),
        (
            "createdAt",
            DiffValue::Number(left.created_at),
            DiffValue::Number(right.created_at),
        ),
        ("cwd", text(&left.cwd), text(&right.cwd)),
        (
            "parentSession",
            DiffValue::text_or_null(left.parent_session.as_ref().map(SessionId::as_str)),
            DiffValue::text_or_null(right.parent_session.as_ref().map(SessionId::as_str)),
        ),
        (
            "seedLength",
            DiffValue::Number(left.seed_length),
            DiffValue::Number(right.seed_length),
        ),
        (
            "delegationDepth",
            DiffValue::Number(left.delegation_depth),
            DiffValue::Number(right.delegation_depth),
        ),
        (
            "sandboxMode",
            DiffValue::text_or_null(left.sandbox_mode.map(|m| m.as_str())),
            DiffValue::text_or_null(right.sandbox_mode.map(|m| m.as_str())),
        ),
        (
            "approvalPolicy",
            DiffValue::text_or_null(left.approval_policy.map(|p| p.as_str())),
            DiffValue::text_or_null(right.approval_policy.map(|p| p.as_str())),
        ),
        (
            "record",
            DiffValue::Json(left_body.to_owned()),
            DiffValue::Json(right_body.to_owned()),
        ),
    ];
    fields
        .into_iter()
        .find(|(_, l, r)| l != r)
        .map(|(field, left, right)| Difference {
            session: Some(id.clone()),
            seq: Some(0),
            field: format!("header {field}"),
            left,
            right,
        })
}

fn diff_records(id: &SessionId, left: &EventRecord, right: &EventRecord) -> Option<Difference> {
    let optional = |value: Option<u64>| value.map_or(DiffValue::Absent, DiffValue::Number);
    let json = |text: &str| DiffValue::Json(text.to_owned());
    let fields: [(&str, DiffValue, DiffValue); 6] = [
        (
            "seq",
            DiffValue::Number(left.seq()),
            DiffValue::Number(right.seq()),
        ),
        (
            "ts",
            DiffValue::Number(left.ts()),
            DiffValue::Number(right.ts()),
        ),
        ("batch", optional(left.batch()), optional(right.batch())),
        (
            "type",
            DiffValue::Text(left.event_type().to_owned()),
            DiffValue::Text(right.event_type().to_owned()),
        ),
        ("data", json(left.data()), json(right.data())),
        ("record", json(left.body()), json(right.body())),
    ];
    fields
        .into_iter()
        .find(|(_, l, r)| l != r)
        .map(|(field, l, r)| Difference {
            session: Some(id.clone()),
            seq: Some(left.seq()),
            field: field.to_owned(),
            left: l,
            right: r,
        })
}

fn missing_session(id: &SessionId, left: &str, right: &str) -> Difference {
    Difference {
        session: Some(id.clone()),
        seq: None,
        field: "session".to_owned(),
        left: DiffValue::Said(left.to_owned()),
        right: DiffValue::Said(right.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::store::tests::{header, id, jsonl_store, note, ok, record, sqlite_store};
    use crate::writer::WriterOptions;
    use crate::Store;

    /// A folder of logs with a root, a batch, a child and unicode data.
    fn realistic_jsonl(folder: &std::path::Path) -> Store {
        let store = jsonl_store(folder);
        let events = [
            record(1, "approval/policy", r#"{"policy":"never"}"#),
            record(2, "turn/start", r#"{"turnId":"t1"}"#),
            record(3, "unknown/kind", r#"{"keep":"é ☃ \u0041","n":1.50e3}"#),
        ];
        ok(store.create_session(&header("root"), &events, Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("root"), WriterOptions::default()));
        ok(writer.append_batch(vec![note("a"), note("b")], Some(4)));
        drop(writer);
        ok(store.fork(
            &id("root"),
            &id("child"),
            Some("hello"),
            &Default::default(),
        ));
        ok(store.create_session(&header("empty"), &[], Durability::Fsync));
        store
    }

    fn log_bytes(store: &Store, session: &str) -> Vec<u8> {
        ok(std::fs::read(store.session_path(&id(session))))
    }

    fn quiet(_: MigrateProgress) {}

    /// Writes the log of `session` in `store`: a header, `events` events
    /// of an unknown type, then `last` when given.
    fn write_long_log(store: &Store, session: &str, events: u64, last: Option<EventRecord>) {
        let mut text = header(session).encode();
        for seq in 1..=events {
            let data = format!(r#"{{"n":{seq}}}"#);
            text.push_str(&record(seq, "unknown/kind", &data).encode(&id(session)));
        }
        if let Some(last) = last {
            text.push_str(&last.encode(&id(session)));
        }
        ok(std::fs::write(store.session_path(&id(session)), text));
    }

    /// The lock a migration into a folder holds names its source as a run
    /// that resumes it must name it, from wherever it starts: a relative
    /// path made absolute, a lone log as its file. Read while the run holds
    /// it, as `verify` reads the lock of a run that was killed.
    #[test]
    fn a_migration_lock_names_its_source_absolute() {
        let folder = ok(tempfile::tempdir());
        realistic_jsonl(folder.path());
        // The source named relative to the working folder.
        let here = ok(std::env::current_dir());
        let up = "../".repeat(here.components().count() - 1);
        let relative = Path::new(&up).join(ok(folder.path().join("logs").strip_prefix("/")));
        let source = ok(Store::open(&relative));
        let lone = relative.join("root.jsonl");
        for (run, named_as) in [("store", "logs"), ("log", "logs/root.jsonl")] {
            let to = ok(Store::create(&folder.path().join(format!("to-{run}"))));
            let mut named = Vec::new();
            let mut progress = |_: MigrateProgress| {
                let found = ok(crate::leftovers::find(to.path()));
                named.extend(found.iter().filter_map(crate::Leftover::migration_source));
            };
            match run {
                "store" => ok(migrate(&source, &to, &mut progress)),
                _ => ok(migrate_log(
                    &lone,
                    &to,
                    MigrateOptions::default(),
                    &mut progress,
                )),
            };
            let expected = ok(std::fs::canonicalize(folder.path().join(named_as)));
            assert!(!named.is_empty(), "the run's lock was seen");
            for source in &named {
                let source = Path::new(source);
                assert!(source.is_absolute(), "{source:?}");
                assert_eq!(ok(std::fs::canonicalize(source)), expected);
            }
        }
    }

    #[test]
    fn a_session_longer_than_a_staged_chunk_is_copied_whole_both_ways() {
        let folder = ok(tempfile::tempdir());
        let source = jsonl_store(folder.path());
        let events = 2 * STAGE_CHUNK_EVENTS as u64 + 5;
        write_long_log(&source, "long", events, None);
        let sqlite = sqlite_store(folder.path());
        let report = ok(migrate(&source, &sqlite, &mut quiet));
        assert_eq!(report.events, events);
        let back = ok(Store::create(&folder.path().join("back")));
        ok(migrate(&sqlite, &back, &mut quiet));
        assert_eq!(log_bytes(&source, "long"), log_bytes(&back, "long"));
        assert_eq!(ok(diff(&source, &sqlite)), None);
    }

    #[test]
    fn a_rule_broken_after_chunks_were_staged_leaves_nothing_written() {
        let folder = ok(tempfile::tempdir());
        let source = jsonl_store(folder.path());
        let events = 2 * STAGE_CHUNK_EVENTS as u64 + 5;
        let breaking = record(events + 1, "turn/end", r#"{"turnId":"nope"}"#);
        write_long_log(&source, "long", events, Some(breaking));
        // Staged whole before it, with its state snapshot.
        write_long_log(&source, "first", 1_100, None);
        let sqlite = sqlite_store(folder.path());
        let jsonl = ok(Store::create(&folder.path().join("copy")));
        for destination in [&sqlite, &jsonl] {
            let refused = migrate(&source, destination, &mut quiet);
            let Err(error) = refused else {
                panic!("a rule-breaking source was migrated");
            };
            assert!(matches!(error, StoreError::Rule { .. }), "{error:?}");
            assert!(error.to_string().contains("long.jsonl"), "{error}");
            assert!(ok(destination.ids()).is_empty(), "nothing is written");
        }
        let left_over = ok(std::fs::read_dir(jsonl.path())).count();
        assert_eq!(left_over, 0, "no temporary file is left behind");
    }

    /// Fails every write of a staged state snapshot.
    struct NoRoomForSnapshots;

    impl crate::testing::FaultInjector for NoRoomForSnapshots {
        fn before(&self, point: crate::testing::FaultPoint, path: &Path) -> std::io::Result<()> {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            match point == crate::testing::FaultPoint::Write && name.contains(".state.tmp-") {
                true => Err(std::io::Error::other("no space left (injected)")),
                false => Ok(()),
            }
        }
    }

    /// A staged snapshot that could not be written is warned of and never
    /// published: the session is migrated without one, and nothing is
    /// left beside it.
    #[test]
    fn a_snapshot_that_could_not_be_staged_is_not_published() {
        let folder = ok(tempfile::tempdir());
        let source = jsonl_store(folder.path());
        write_long_log(&source, "long", 1_100, None);
        let copy = folder.path().join("copy");
        let faults = crate::testing::Io::with_faults(std::sync::Arc::new(NoRoomForSnapshots));
        let destination = Store::Jsonl(ok(JsonlStore::create_folder(&copy)).with_io(faults));
        ok(migrate(&source, &destination, &mut quiet));
        let left: Vec<String> = ok(std::fs::read_dir(&copy))
            .map(|entry| ok(entry).file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["long.jsonl"]);
        let whole = ok(destination.snapshot(&id("long"))).fold().0;
        assert_eq!(ok(destination.current_state(&id("long"))), whole);
    }

    #[test]
    fn jsonl_to_sqlite_to_jsonl_is_byte_identical() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let sqlite = sqlite_store(folder.path());
        let report = ok(migrate(&source, &sqlite, &mut quiet));
        assert_eq!(report.sessions, 3);
        assert_eq!(report.events, 5 + 6);
        assert!(report.warnings.is_empty());
        let back = ok(Store::create(&folder.path().join("back")));
        ok(migrate(&sqlite, &back, &mut quiet));
        for session in ["root", "child", "empty"] {
            assert_eq!(
                log_bytes(&source, session),
                log_bytes(&back, session),
                "{session}"
            );
        }
        assert_eq!(ok(diff(&source, &back)), None);
    }

    /// A log of session `foreign` whose header a foreign writer wrote:
    /// members in another order, a space after each colon, `cwd` with an
    /// escape; the events are as any writer writes them.
    fn foreign_log(store: &Store) -> Vec<u8> {
        let body = r#"{"id": "foreign","kind": "header","cwd": "/w\u00e9rk","formatVersion": 1,"createdAt": 1700000000000,"approvalPolicy": "never","sandboxMode": null,"parentSession": null,"delegationDepth": 0,"seedLength": 0"#;
        let foreign = id("foreign");
        let mut text = sessionlog_schema::encode_line(&foreign, body);
        text.push_str(&record(1, "turn/start", r#"{"turnId":"t1"}"#).encode(&foreign));
        text.push_str(&record(2, "turn/end", r#"{"turnId":"t1"}"#).encode(&foreign));
        ok(std::fs::write(store.session_path(&foreign), &text));
        text.into_bytes()
    }

    #[test]
    fn a_foreign_header_is_copied_as_it_is_both_ways() {
        let folder = ok(tempfile::tempdir());
        let source = jsonl_store(folder.path());
        let original = foreign_log(&source);
        let sqlite = sqlite_store(folder.path());
        ok(migrate(&source, &sqlite, &mut quiet));
        let back = ok(Store::create(&folder.path().join("back")));
        ok(migrate(&sqlite, &back, &mut quiet));
        assert_eq!(
            String::from_utf8_lossy(&log_bytes(&back, "foreign")),
            String::from_utf8_lossy(&original)
        );
        assert_eq!(ok(diff(&source, &sqlite)), None);
        assert_eq!(ok(diff(&source, &back)), None);
    }

    #[test]
    fn diff_names_a_header_record_that_differs_only_in_its_bytes() {
        let folder = ok(tempfile::tempdir());
        let foreign = jsonl_store(folder.path());
        foreign_log(&foreign);
        let canonical = ok(Store::create(&folder.path().join("canonical")));
        let decoded = ok(sessionlog_schema::decode_header(
            log_bytes(&foreign, "foreign")
                .split(|byte| *byte == b'\n')
                .next()
                .unwrap_or_default(),
        ));
        let events = ok(foreign.snapshot(&id("foreign"))).events;
        ok(canonical.create_session(&decoded.header, &events, Durability::Buffered));
        let difference = ok(diff(&foreign, &canonical)).expect("a difference");
        assert_eq!(difference.field, "header record");
        assert_eq!(difference.seq, Some(0));
        assert_eq!(difference.left, DiffValue::Json(decoded.body));
        assert_eq!(difference.right, DiffValue::Json(decoded.header.to_body()));
    }

    #[test]
    fn progress_reports_every_session_of_every_phase() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let mut seen = Vec::new();
        ok(migrate(&source, &sqlite_store(folder.path()), &mut |p| {
            seen.push((p.phase, p.done, p.total))
        }));
        let phases = [
            MigratePhase::Verify,
            MigratePhase::Copy,
            MigratePhase::Compare,
        ];
        let expected: Vec<_> = phases
            .iter()
            .flat_map(|phase| (1..=3).map(move |done| (*phase, done, 3)))
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn corrupt_source_session_refuses_the_run_and_writes_nothing() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let path = source.session_path(&id("root"));
        let mut bytes = ok(std::fs::read(&path));
        let second_line = bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 5);
        bytes[second_line] ^= 0x01;
        ok(std::fs::write(&path, bytes));
        let destination = sqlite_store(folder.path());
        let refused = migrate(&source, &destination, &mut quiet);
        let Err(error) = refused else {
            panic!("a corrupt source was migrated");
        };
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("root.jsonl"), "{error}");
        assert!(ok(destination.ids()).is_empty(), "nothing is written");
    }

    #[test]
    fn rule_breaking_source_session_refuses_the_run_naming_it() {
        let folder = ok(tempfile::tempdir());
        let source = jsonl_store(folder.path());
        ok(source.create_session(&header("good"), &[], Durability::Fsync));
        let line = record(1, "turn/end", r#"{"turnId":"nope"}"#).encode(&id("bad"));
        let text = format!("{}{line}", header("bad").encode());
        ok(std::fs::write(source.session_path(&id("bad")), text));
        let destination = sqlite_store(folder.path());
        let refused = migrate(&source, &destination, &mut quiet);
        let Err(error) = refused else {
            panic!("a rule-breaking source was migrated");
        };
        assert!(matches!(error, StoreError::Rule { .. }), "{error:?}");
        assert!(error.to_string().contains("bad.jsonl"), "{error}");
        assert!(ok(destination.ids()).is_empty(), "nothing is written");
    }

    #[test]
    fn a_corrupt_session_found_last_leaves_the_destination_without_any_session() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let last = ok(source.ids())
            .pop()
            .unwrap_or_else(|| panic!("no sessions"));
        assert_eq!(last, id("root"), "the corrupt session is read last");
        let path = source.session_path(&last);
        let mut bytes = ok(std::fs::read(&path));
        let second_line = bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 5);
        bytes[second_line] ^= 0x01;
        ok(std::fs::write(&path, bytes));
        let sqlite = sqlite_store(folder.path());
        let jsonl = ok(Store::create(&folder.path().join("copy")));
        for destination in [&sqlite, &jsonl] {
            let mut verified = 0;
            let refused = migrate(&source, destination, &mut |p| {
                verified += usize::from(p.phase == MigratePhase::Verify);
            });
            assert!(
                matches!(&refused, Err(StoreError::Corrupt { .. })),
                "{refused:?}"
            );
            assert_eq!(
                verified, 3,
                "every session was checked, the corrupt one too"
            );
            assert!(ok(destination.ids()).is_empty(), "nothing is written");
        }
        let left_over = ok(std::fs::read_dir(jsonl.path())).count();
        assert_eq!(left_over, 0, "no temporary file is left behind");
        ok(sqlite.create_session(&header("after"), &[], Durability::Fsync));
        assert_eq!(
            ok(sqlite.ids()),
            [id("after")],
            "the database takes writes again"
        );
    }

    #[test]
    fn torn_tail_is_dropped_with_a_warning() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let mut file = ok(std::fs::OpenOptions::new()
            .append(true)
            .open(source.session_path(&id("empty"))));
        ok(file.write_all(b"{\"seq\":1,\"ts\":"));
        let destination = sqlite_store(folder.path());
        let report = ok(migrate(&source, &destination, &mut quiet));
        assert_eq!(report.warnings.len(), 1);
        assert_eq!(report.warnings[0].session, id("empty"));
        assert!(report.warnings[0].to_string().contains("torn tail"));
        assert!(ok(destination.snapshot(&id("empty"))).events.is_empty());
    }

    #[test]
    fn existing_destination_session_refuses_the_run() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let destination = sqlite_store(folder.path());
        ok(destination.create_session(&header("empty"), &[], Durability::Fsync));
        let refused = migrate(&source, &destination, &mut quiet);
        assert!(
            matches!(&refused, Err(StoreError::AlreadyExists { id: taken, .. }) if taken.as_str() == "empty"),
            "{refused:?}"
        );
        assert_eq!(
            ok(destination.ids()),
            [id("empty")],
            "nothing else is written"
        );
    }

    /// `diff` of two stores built by `left` and `right`, as text.
    fn check_diff(left: &[(&str, &[EventRecord])], right: &[(&str, &[EventRecord])], expect: &str) {
        let folder = ok(tempfile::tempdir());
        let a = jsonl_store(folder.path());
        let b = sqlite_store(folder.path());
        for (store, sessions) in [(&a, left), (&b, right)] {
            for (session, events) in sessions {
                ok(store.create_session(&header(session), events, Durability::Buffered));
            }
        }
        let found = ok(diff(&a, &b)).map_or_else(|| "none".to_owned(), |d| d.to_string());
        assert_eq!(found, expect);
    }

    #[test]
    fn diff_names_the_first_difference() {
        let one = [record(1, "note/test", r#"{"n":1}"#)];
        let two = [
            record(1, "note/test", r#"{"n":1}"#),
            record(2, "note/test", r#"{"n":2}"#),
        ];
        let other = [record(1, "note/test", r#"{"n":9}"#)];
        check_diff(&[("a", &one)], &[("a", &one)], "none");
        check_diff(
            &[("a", &one), ("b", &one)],
            &[("a", &one)],
            "session b: session differs: left present, right missing",
        );
        check_diff(
            &[("b", &one)],
            &[("a", &one), ("b", &one)],
            "session a: session differs: left missing, right present",
        );
        check_diff(
            &[("a", &one)],
            &[("a", &two)],
            "session a: event count differs: left 1, right 2",
        );
        check_diff(
            &[("a", &one)],
            &[("a", &other)],
            r#"session a, seq 1: data differs: left {"n":1}, right {"n":9}"#,
        );
    }

    #[test]
    fn diff_names_a_header_field() {
        let folder = ok(tempfile::tempdir());
        let a = jsonl_store(folder.path());
        let b = sqlite_store(folder.path());
        ok(a.create_session(&header("a"), &[], Durability::Buffered));
        let mut moved = header("a");
        moved.cwd = "/elsewhere".to_owned();
        ok(b.create_session(&moved, &[], Durability::Buffered));
        let found = ok(diff(&a, &b)).map(|d| d.to_string());
        assert_eq!(
            found.as_deref(),
            Some(
                r#"session a, seq 0: header cwd differs: left "/work/project", right "/elsewhere""#
            )
        );
    }
}
