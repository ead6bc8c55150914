//! The committer: the one thread that owns the write connection, groups
//! the waiting writes into one transaction and commits them once.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use sessionlog_schema::{record_crc, EventRecord, SessionHeader, SessionId};

use super::schema::wal_path;
use super::{BulkItem, BulkRequest, Committer, Job, NewSession, Request, SqliteBulkCreate, Work};
use crate::io::{Io, Named};
use crate::sql::checks::{check_seed_source_rows, damaged};
use crate::sql::sql_integer;
use crate::writer::{check_storable, check_storable_record, Durability};
use crate::StoreError;

impl SqliteBulkCreate {
    /// Hands the header of a session being read to the committer, which
    /// inserts its row, without events, into the open transaction; its
    /// events follow in chunks ([`SqliteBulkCreate::add_events`]). Fails
    /// with the committer's error once an insert failed (the transaction
    /// is then rolled back). `header_body` is the header record's body as
    /// the source stored it, copied as it is; it must decode to `header`.
    pub(crate) fn add_session(
        &mut self,
        header: SessionHeader,
        header_body: String,
    ) -> Result<(), StoreError> {
        check_storable(&header, &[])?;
        let session = NewSession {
            header,
            header_body,
            seed_source: None,
            events: Vec::new(),
        };
        self.send(BulkItem::Session(session))
    }

    /// Hands the next events of session `id`, the last one added, to the
    /// committer, which appends them in the open transaction.
    pub(crate) fn add_events(
        &mut self,
        id: &SessionId,
        events: Vec<EventRecord>,
    ) -> Result<(), StoreError> {
        events.iter().try_for_each(check_storable_record)?;
        self.send(BulkItem::Events {
            id: id.clone(),
            events,
        })
    }

    /// Hands the state snapshot of session `id`, the last one added and
    /// all its events, taken at `anchor`, to the committer, which keeps it
    /// in the open transaction.
    pub(crate) fn add_snapshot(
        &mut self,
        id: &SessionId,
        anchor: crate::state_snapshot::SnapshotAnchor,
        bytes: Vec<u8>,
    ) -> Result<(), StoreError> {
        self.send(BulkItem::Snapshot(Work::snapshot(id, anchor, bytes)))
    }

    /// Sends `item`, waiting while the committer is behind.
    fn send(&mut self, item: BulkItem) -> Result<(), StoreError> {
        let sent = match &self.sessions {
            Some(sessions) => sessions.send(item).is_ok(),
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
    pub(super) fn start(
        connection: Connection,
        path: PathBuf,
        io: Io,
    ) -> Result<Committer, StoreError> {
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
    pub(super) fn submit(
        &self,
        path: &Path,
        work: Work,
        durability: Durability,
    ) -> Result<(), StoreError> {
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
    pub(super) fn send(&self, path: &Path, job: Job) -> Result<(), StoreError> {
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
pub(super) fn run_committer(
    connection: Connection,
    path: &Path,
    io: &Io,
    jobs: &mpsc::Receiver<Job>,
) {
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

pub(super) fn reply_all(group: Answered) {
    for (request, outcome) in group {
        let _ = request.reply.send(outcome);
    }
}

pub(super) fn commit_loop(
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
        let kept_snapshot = group.iter().zip(&outcomes).any(|(request, outcome)| {
            outcome.is_ok() && matches!(request.work, Work::Snapshot { .. })
        });
        acknowledge(group.into_iter().zip(outcomes).collect());
        if kept_snapshot {
            checkpoint_snapshot(&connection, path);
        }
    }
}

/// Copies the write-ahead log into the database file once a state
/// snapshot was committed, after its writer was answered. The next open of
/// the session reads the snapshot's overflow pages straight from the
/// database file, one `pread` each into the caller's buffer; from the log,
/// each of its some 2,500 pages at 1M events would be looked up in the
/// log's index and read through the page cache: 5.4 ms against 2.3 ms for
/// the blob of a 1M-event session. The checkpoint is passive: it copies what no reader
/// still needs and waits for no one. It only moves committed pages, so a
/// failure is logged and changes nothing; SQLite's own checkpoints copy
/// the rest later.
fn checkpoint_snapshot(connection: &Connection, path: &Path) {
    let outcome = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        row.get::<_, i64>(0)
    });
    if let Err(error) = outcome {
        tracing::debug!(
            database = %path.display(),
            "the checkpoint after a state snapshot failed (SQLite's own copies the log later): {error}"
        );
    }
}

/// Answers a job the committer no longer runs with `refusal`.
pub(super) fn refuse(job: Job, refusal: &StoreError) {
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
///
/// The database file is watched the same way: one removed or replaced
/// under the committer takes its commits into a file no later open finds,
/// with nothing to copy them back from, so the commit that found it is
/// refused (never acknowledged) and so is every later write.
#[derive(Debug)]
pub(super) struct WalGuard {
    log: HeldName,
    database: HeldName,
    /// Why writing stopped, once the log or the database was found gone.
    lost: Option<String>,
}

/// A name and the file first seen at it.
#[derive(Debug)]
struct HeldName {
    path: PathBuf,
    /// The file as first seen after a commit.
    held: Option<File>,
}

impl HeldName {
    /// `path`, made absolute now: a process that changes its working
    /// folder (a runtime running a tool) still names the same file.
    fn new(path: PathBuf) -> HeldName {
        HeldName {
            path: std::path::absolute(&path).unwrap_or(path),
            held: None,
        }
    }

    /// Whether the name still leads to the file first seen there, and
    /// that file is still linked.
    fn in_place(&mut self) -> io::Result<bool> {
        let held = match &self.held {
            Some(held) => held,
            None => {
                let opened = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&self.path);
                match opened {
                    Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
                    opened => self.held.insert(opened?),
                }
            }
        };
        Ok(crate::io::what_is_named(&self.path, held)? == Named::TheFile)
    }
}

impl WalGuard {
    fn new(database: &Path) -> WalGuard {
        WalGuard {
            log: HeldName::new(wal_path(database)),
            database: HeldName::new(database.to_owned()),
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
        let cause = |found: io::Result<bool>| match found {
            Ok(_) => "was removed or replaced".to_owned(),
            Err(error) => format!("cannot be checked ({error})"),
        };
        let found = self.database.in_place();
        if !matches!(found, Ok(true)) {
            let cause = cause(found);
            tracing::error!(database = %database.display(), "the database file {cause} under a live writer");
            let reason = format!(
                "the database file {} {cause} while this store was writing: the last commit went \
                 to the file it had opened, which no longer has that name, and is not \
                 acknowledged; this store writes nothing more",
                database.display()
            );
            self.lost = Some(reason.clone());
            return Err(StoreError::io("commit", database, io::Error::other(reason)));
        }
        let found = self.log.in_place();
        if let Ok(true) = found {
            return Ok(());
        }
        let cause = cause(found);
        let wal = self.log.path.display();
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
}

/// Inserts the sessions of `bulk` as they arrive, in one transaction,
/// committed when asked; any failure, or a caller gone without asking,
/// rolls everything back.
pub(super) fn run_bulk(
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
            Ok(BulkItem::Events { id, events }) => {
                append_records(&transaction, path, &id, &events)?;
            }
            Ok(BulkItem::Snapshot(work)) => apply_work(&transaction, path, &work)?,
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

/// Sets `PRAGMA synchronous` for `durability` when it is not set already:
/// `FULL` syncs the log at each commit; `NORMAL` does not, but still syncs
/// at each checkpoint, which copies the log into the database file and may
/// then delete the log (when the last connection closes) or write over it.
/// `OFF` would skip those syncs too, so that a buffered commit, or the
/// checkpoint of a store closed after one, could take appends acknowledged
/// as durable before it with it on a power loss.
pub(super) fn set_synchronous(
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
        Durability::Buffered => "NORMAL",
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
pub(super) fn commit_group(
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

pub(super) fn begin_write<'c>(
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
pub(super) fn apply_directly(
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
pub(super) fn apply_in_savepoints(
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

pub(super) fn apply_work(
    connection: &Connection,
    path: &Path,
    work: &Work,
) -> Result<(), StoreError> {
    match work {
        Work::Create(sessions) => {
            for session in sessions {
                insert_session(connection, path, session)?;
            }
            Ok(())
        }
        Work::Append { id, records } => append_records(connection, path, id, records),
        Work::Snapshot {
            id,
            seq,
            anchor_crc,
            bytes,
        } => keep_snapshot(connection, id, *seq, *anchor_crc, bytes)
            .map_err(sqlite_error("keep the state snapshot", path)),
    }
}

/// Keeps `bytes`, the snapshot of session `id` at `seq`, in place of the
/// one before: its head in `snapshots`, each page a row of
/// `snapshot_pages`.
fn keep_snapshot(
    connection: &Connection,
    id: &SessionId,
    seq: u64,
    anchor_crc: u32,
    bytes: &[u8],
) -> rusqlite::Result<()> {
    let Some((head, pages)) = crate::state_snapshot::split(bytes) else {
        return Err(rusqlite::Error::ToSqlConversionFailure(
            "not a state snapshot".into(),
        ));
    };
    connection.execute(
        "INSERT INTO snapshots (session_id, seq, anchor_crc, format, state)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq,
           anchor_crc = excluded.anchor_crc, format = excluded.format,
           state = excluded.state",
        params![
            id.as_str(),
            sql_integer(seq),
            anchor_crc,
            crate::state_snapshot::STATE_SNAPSHOT_FORMAT,
            head
        ],
    )?;
    connection
        .prepare_cached("DELETE FROM snapshot_pages WHERE session_id = ?1")?
        .execute([id.as_str()])?;
    let mut insert = connection.prepare_cached(
        "INSERT INTO snapshot_pages (session_id, page, bytes) VALUES (?1, ?2, ?3)",
    )?;
    for (page, bytes) in pages.into_iter().enumerate() {
        insert.execute(params![id.as_str(), page as i64, bytes])?;
    }
    Ok(())
}

pub(super) fn insert_session(
    connection: &Connection,
    path: &Path,
    session: &NewSession,
) -> Result<(), StoreError> {
    let header = &session.header;
    let body = &session.header_body;
    if let Some(source) = &session.seed_source {
        check_seed_source(connection, path, source, header.seed_length)?;
    }
    // A fork by reference holds its seeded events as the source's rows.
    let seeded = match session.seed_source {
        Some(_) => header.seed_length,
        None => 0,
    };
    let inserted = connection
        .prepare_cached(
            "INSERT INTO sessions (id, created_at, cwd, parent_session, seed_length,
               delegation_depth, sandbox_mode, approval_policy, header_body, header_crc,
               last_seq, seed_source)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
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
                sql_integer(session.events.last().map_or(seeded, EventRecord::seq)),
                session.seed_source.as_ref().map(SessionId::as_str),
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
    // Rows of this id already there have no session row: damage of the
    // store, which a new session would read as its own (as PostgreSQL
    // refuses it).
    let orphaned: bool = connection
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ?1)")
        .and_then(|mut statement| statement.query_row([header.id.as_str()], |row| row.get(0)))
        .map_err(sqlite_error("look for events of a new session", path))?;
    if orphaned {
        return Err(crate::sql::checks::damaged(
            path,
            format!(
                "events of session {:?} have no session row; no session of that id is created \
                 over them",
                header.id.as_str()
            ),
        ));
    }
    insert_events(connection, path, &header.id, &session.events)
}

/// Checks, in the creating transaction, that session `source` exists and
/// records at least `seed_length` events: the rows a fork by reference
/// refers to (never removed once written).
fn check_seed_source(
    connection: &Connection,
    path: &Path,
    source: &SessionId,
    seed_length: u64,
) -> Result<(), StoreError> {
    let recorded = recorded_last_seq(connection, path, source, "read the parent's last seq")?;
    check_seed_source_rows(path, source, recorded, seed_length)
}

/// The last seq the session row of `id` records, `None` without a row.
fn recorded_last_seq(
    connection: &Connection,
    path: &Path,
    id: &SessionId,
    operation: &'static str,
) -> Result<Option<i64>, StoreError> {
    connection
        .prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([id.as_str()], |row| row.get(0))
                .optional()
        })
        .map_err(sqlite_error(operation, path))
}

pub(super) fn append_records(
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
        let recorded = recorded_last_seq(connection, path, id, "read the last seq")?;
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

pub(super) fn insert_events(
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

pub(super) fn sqlite_error<'a>(
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
pub(super) fn is_damage(error: &rusqlite::Error) -> bool {
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
pub(super) fn share_error(error: &StoreError) -> StoreError {
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
