//! The copying fork of a JSONL log: the parent read once, in bounded
//! memory, its records written into the child as they are checked.
//!
//! A child's first line is its header, and the header needs the parent's
//! whole fold (its `seedLength`, its overrides). When the parent's state
//! snapshot holds (docs/FORMAT.md, "State snapshots"), that fold is known
//! before the parent is read: the child's temporary file gets the header
//! first, then each record of the parent's good prefix as it is read and
//! checked, its body unchanged and its CRC computed for the child's id. The
//! fold of every record read must give the same header (the snapshot is a
//! cache, never the truth); when it does not, or when the parent grew in
//! the meantime, the fork is done again the other way.
//!
//! Without a snapshot, the header is predicted from the end of the log (its
//! last seq, its last own sandbox and approval switches:
//! [`crate::fork_header`]) and the fork goes the same direct way, held to
//! the same check. When neither gives a header the fold confirms, it is
//! known only at the end of the parent, so the records go through a buffer
//! into a *spool* beside the child (a temporary dot file), and at the end
//! the child's temporary file gets the header, the spool copied after it in
//! the kernel (`copy_file_range`).
//!
//! Either way the child's own first events follow; the child is fdatasynced
//! and published like every new log (a hard link, then the folder
//! fsynced). Memory is the fold and a buffer, whatever the parent's length;
//! the parent's bytes are read once and checked once (but for what follows
//! a record whose damage only the fold's scan of its data finds: that is
//! read again, as a read alone reads it).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::ScopedJoinHandle;

use sessionlog_projections::{
    check_claimed_chain, claimed_chain, delegate_from_state, ChildSeed, Defaults, DelegationError,
    SessionState, Violation, ViolationKind,
};
use sessionlog_schema::{
    encode_line_into, encode_signed_line_into, prove_data, prove_json, split_crc, ChainValue,
    EventRecord, EventType, EventView, Resign, ScanSummary, SessionHeader, SessionId, ShapeError,
};

use crate::fold::{hand_over, Batch, BATCHES_QUEUED};
use crate::io::Io;
use crate::jsonl::snapshot_log_state;
use crate::leftovers;
use crate::reader::{
    FoldedEvent, Line, LineReader, LogReader, SessionStream, Unproven, READ_BUFFER_BYTES,
};
use crate::shared_text::SharedTextReader;
use crate::writer::{check_storable, check_storable_values, now_ms};
use crate::{Refusal, StoreError};

/// Records are written to the spool in chunks of about this many bytes.
const SPOOL_CHUNK_BYTES: usize = 1 << 20;

/// Checks a child's own first events (the preset event and the prompt
/// message) against the rules, folding them into `parent`, the clean fold
/// of the events the child is seeded with. They are judged on their shape
/// and seq alone (no rule about turns, steps, calls or approvals reads
/// them) and start at the parent's seq + 1, so the parent's state checks
/// them exactly as the child's state after its seed would, without folding
/// the seed a second time.
pub(crate) fn check_own_events(
    parent: &mut SessionState,
    events: &[EventRecord],
    child_path: &Path,
) -> Result<(), StoreError> {
    for record in events {
        parent.apply(record).map_err(|violation| StoreError::Rule {
            path: child_path.to_owned(),
            violation,
        })?;
    }
    Ok(())
}

/// Forks the lone log at `parent` into a new log `<child>.jsonl` beside it
/// (as `Store::fork` forks a session of a JSONL store): the parent is made
/// durable, read once and checked as its records are copied, in bounded
/// memory. Returns the child's header.
///
/// ```
/// use sessionlog_projections::Defaults;
/// use sessionlog_schema::{SessionHeader, SessionId, TurnStart};
/// use sessionlog_store::{fork_log_file, Durability, Store, WriterOptions};
///
/// let folder = tempfile::tempdir()?;
/// let store = Store::create(folder.path())?;
/// let parent = SessionId::parse("parent")?;
/// store.create_session(&SessionHeader::root(parent.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
/// store.open_writer(&parent, WriterOptions::default())?.append(TurnStart::new("t1").into(), None)?;
/// let child = SessionId::parse("child")?;
/// let header = fork_log_file(&store.session_path(&parent), &child, None, &Defaults::default())?;
/// assert_eq!(header.seed_length, 1);
/// assert_eq!(store.snapshot(&child)?.events.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fork_log_file(
    parent: &Path,
    child: &SessionId,
    prompt: Option<&str>,
    defaults: &Defaults,
) -> Result<SessionHeader, StoreError> {
    let io = Io::default();
    let folder = crate::store::folder_of(parent);
    let child_path = folder.join(format!("{child}.jsonl"));
    let request = ForkRequest { prompt, defaults };
    fork_log(parent, None, child, &child_path, request, &io)
}

/// What a copying fork needs to know besides the two logs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForkRequest<'a> {
    /// The text of the prompt message, if any.
    pub prompt: Option<&'a str>,
    /// The defaults the parent's preset is projected with.
    pub defaults: &'a Defaults,
}

/// Forks the log at `parent_path` (whose header must name `parent_id`,
/// when given) into a new log `child` at `child_path`, durably, and
/// returns the child's header. What the parent holds when the copy starts
/// is made durable first, and only that is copied ([`copy_parent`]). A
/// corrupt parent, one that breaks the rules, or
/// an existing `child_path` is refused and nothing is left behind.
pub(crate) fn fork_log(
    parent_path: &Path,
    parent_id: Option<SessionId>,
    child: &SessionId,
    child_path: &Path,
    request: ForkRequest<'_>,
    io: &Io,
) -> Result<SessionHeader, StoreError> {
    let already_exists = || StoreError::AlreadyExists {
        id: child.clone(),
        path: child_path.to_owned(),
    };
    if child_path.symlink_metadata().is_ok() {
        return Err(already_exists());
    }
    let folder = crate::store::folder_of(child_path).to_owned();
    // Only the child's name taken when it is published is the child
    // existing; a temporary name taken (another process's, of the same pid
    // and millisecond) is said as it is, naming that file.
    let mapped = |error| match error {
        StoreError::Io {
            operation: "publish",
            source,
            ..
        } if source.kind() == std::io::ErrorKind::AlreadyExists => already_exists(),
        other => other,
    };
    let fork = Fork {
        parent_path,
        parent_id,
        child,
        child_path,
        folder: &folder,
        token: leftovers::new_token(),
        ts: now_ms(),
    };
    // A corrupt tail after the snapshot is found again, and reported, by
    // the copy that reads every record; so is whatever made a scan's
    // prediction fail. The snapshot only predicts: a delegation it refuses
    // (a snapshot that is stale in a way its anchor cannot tell, or forged)
    // is decided again by the copy, which folds every record, and a header
    // it predicts wrongly is written again through the spool.
    // A parent whose snapshot has an own seal will have the copy's hash
    // chain asked for: it is run from the first record.
    let from_snapshot = match snapshot_log_state(parent_path, fork.parent_id.clone()) {
        Ok(Some(state)) => delegate_from_state(
            &state,
            child.clone(),
            request.prompt,
            request.defaults,
            fork.ts,
        )
        .ok()
        .map(|delegated| (delegated.header, state.last_own_seal_seq().is_some())),
        _ => None,
    };
    let predicted = match from_snapshot {
        Some(predicted) => Some(predicted),
        None => crate::fork_header::scan_child_header(
            parent_path,
            fork.parent_id.clone(),
            child,
            fork.ts,
        )
        .map(|header| (header, false)),
    };
    if let Some((predicted, sealed)) = predicted {
        if let Some(header) = fork
            .direct(predicted, sealed, request, io)
            .map_err(mapped)?
        {
            return Ok(header);
        }
    }
    fork.spooled(request, io).map_err(mapped)
}

/// One fork of a JSONL log, done one of two ways: directly, with a header
/// known before the parent is read (from the parent's state snapshot, or
/// predicted by a scan of the parent: [`crate::fork_header`]), or through a
/// spool.
struct Fork<'a> {
    parent_path: &'a Path,
    parent_id: Option<SessionId>,
    child: &'a SessionId,
    child_path: &'a Path,
    folder: &'a Path,
    /// What names this fork's temporary files.
    token: String,
    /// The child's creation time.
    ts: u64,
}

impl Fork<'_> {
    /// The child's temporary file, published when complete.
    fn temp(&self) -> PathBuf {
        self.folder
            .join(format!(".{}.jsonl.tmp-{}", self.child, self.token))
    }

    /// The parent's records copied into `out` ([`copy_parent`]).
    fn copy(
        &self,
        out: &mut Temporary,
        target: Target,
        io: &Io,
    ) -> Result<SessionState, StoreError> {
        let parent_id = self.parent_id.clone();
        copy_parent(self.parent_path, parent_id, self.child, out, target, io)
    }

    /// The child's seed from `state`, the fold of the parent's records.
    fn seed(
        &self,
        state: &SessionState,
        request: ForkRequest<'_>,
    ) -> Result<ChildSeed, StoreError> {
        delegate_from_state(
            state,
            self.child.clone(),
            request.prompt,
            request.defaults,
            self.ts,
        )
        .map_err(|error| delegation_error(error, self.child_path))
    }

    /// `error`, when it refuses the child's header, naming the parent's log
    /// the value comes from (a child takes its `cwd` and counts from it).
    fn inherited(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::InvalidHeader(reason) => StoreError::InvalidHeader(format!(
                "{reason}; the child would take it from its parent's log {}",
                self.parent_path.display()
            )),
            other => other,
        }
    }

    /// Copies the parent's records into a spool as they are read and
    /// checked, then writes the child: the header from their fold, the
    /// spool, the child's own events; and publishes it.
    fn spooled(&self, request: ForkRequest<'_>, io: &Io) -> Result<SessionHeader, StoreError> {
        let spool_path = self
            .folder
            .join(format!(".{}.jsonl.spool.tmp-{}", self.child, self.token));
        let mut spool = Temporary::create(io, spool_path)?;
        let mut state = self.copy(&mut spool, Target::Spool, io)?;
        let seed = self.seed(&state, request)?;
        check_own_events(&mut state, &seed.events, self.child_path)?;
        check_storable(&seed.header, &seed.events).map_err(|error| self.inherited(error))?;
        let temp = self.temp();
        // Only a file this fork created is removed: a name another process
        // took (the same pid and millisecond) is its own.
        let file = io
            .create_temp(&temp)
            .map_err(|source| StoreError::io("create", &temp, source))?;
        let result = write_child(file, &temp, &spool, &seed.header, &seed.events, io)
            .and_then(|()| publish(io, self.folder, &temp, self.child_path));
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result.map(|()| seed.header)
    }

    /// Writes the child's header `predicted`, then the parent's records as
    /// they are read and checked, then the child's own events (from the
    /// fold of those records), and publishes the child. `None`, leaving
    /// nothing behind, when the fold of every record read does not give
    /// the same header (the parent grew since, or the prediction was
    /// wrong). `sealed`: the parent is known to have an own seal.
    fn direct(
        &self,
        predicted: SessionHeader,
        sealed: bool,
        request: ForkRequest<'_>,
        io: &Io,
    ) -> Result<Option<SessionHeader>, StoreError> {
        // A header no backend stores is refused once the parent was read,
        // so that damage there outranks it: by the spool.
        if check_storable(&predicted, &[]).is_err() {
            return Ok(None);
        }
        let mut child = Temporary::create(io, self.temp())?;
        io.write_all(&mut child.file, &child.path, predicted.encode().as_bytes())
            .map_err(|source| StoreError::io("write", &child.path, source))?;
        let mut state = self.copy(&mut child, Target::Child { sealed }, io)?;
        let seed = self.seed(&state, request)?;
        if seed.header != predicted {
            return Ok(None);
        }
        check_storable(&seed.header, &seed.events).map_err(|error| self.inherited(error))?;
        check_own_events(&mut state, &seed.events, self.child_path)?;
        end_child(&mut child.file, &child.path, self.child, &seed.events, io)?;
        publish(io, self.folder, &child.path, self.child_path)?;
        Ok(Some(seed.header))
    }
}

/// A temporary file of this process, removed when dropped.
struct Temporary {
    path: PathBuf,
    file: File,
}

impl Temporary {
    fn create(io: &Io, path: PathBuf) -> Result<Temporary, StoreError> {
        let file = io
            .create_temp(&path)
            .map_err(|source| StoreError::io("create", &path, source))?;
        // Held until it is removed: `sessionlog clean` leaves it.
        leftovers::hold(&file);
        Ok(Temporary { path, file })
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads the parent's good prefix, folding it, and writes each record into
/// `out` (the spool, or the child's own temporary file) signed for `child`.
/// The prefix is what the parent's file holds when the copy starts, made
/// durable (an fdatasync) before it is read: the child is published
/// durable, so its seed must be a prefix of its parent after a power loss,
/// even when the parent's writer appends meanwhile. Bytes that writer adds
/// after that length are not copied (nor a record they complete: a torn
/// tail to this read), as the sync is not known to cover them.
/// Returns the parent's fold. A rule violation stops the copy but not the
/// read: a seal that does not hold further on outranks it, and corruption
/// outranks both. The fold's hash chain is the
/// parent's only when the parent has an own seal (which had it checked);
/// else it is left at the header's: the child's chain starts from its own
/// header, and nothing reads the parent's.
///
/// The work is spread over the two cores a machine commonly has: a
/// reading thread reads the parent, splits it into records and checks and
/// decodes each (CRC, seq, batches) as every read does, handing them over
/// in batches ([`ParentRecords`]); this one proves each record's `data` as
/// it scans it for the fold's view, folds it (the rules) and hands each
/// batch on, with the range of its records that passed, to a writer
/// thread, which writes them signed for the child, runs the hash chain
/// over them from the first time the fold asks for it ([`write_records`]),
/// and gives the batch back to the reading thread, which frees it. A body
/// is copied once, from the line into its record: the writer reads the
/// records the fold read. Each hand-over is a bounded channel. The fold asks the writer for the chain only at an own seal,
/// which must hold it. Memory is the fold and a few batches.
///
/// When `out` is the child itself ([`Target::Child`]), a third thread
/// fdatasyncs it after every [`WRITE_BACK_BYTES`] written, so that its
/// pages go to the disk while the parent is still being read, and the
/// child's final fdatasync has only the last of them to wait for.
fn copy_parent(
    parent_path: &Path,
    parent_id: Option<SessionId>,
    child: &SessionId,
    out: &mut Temporary,
    target: Target,
    io: &Io,
) -> Result<SessionState, StoreError> {
    let parent = crate::reader::open_log_for_reading(parent_path)?;
    let durable = parent
        .metadata()
        .map_err(|source| StoreError::io("stat", parent_path, source))?
        .len();
    io.sync_data(&parent, parent_path)
        .map_err(|source| StoreError::io("fdatasync", parent_path, source))?;
    // A bounded file can still be moved back in: the reader can leave the
    // proof of each record's `data` to the fold ([`ParentRecords`]).
    // Its records share the blocks it reads: no copy of each body.
    let source = SharedTextReader::with_capacity(READ_BUFFER_BYTES, parent.take(durable));
    let reader = LogReader::new(source, parent_path, parent_id)?;
    let syncer_file = if let Target::Child { .. } = target {
        let clone = out.file.try_clone();
        Some(clone.map_err(|source| StoreError::io("open", &out.path, source))?)
    } else {
        None
    };
    let Temporary { path, file } = out;
    let path: &Path = path;
    let (copy_sender, copy_receiver) = mpsc::sync_channel(COPIES_IN_FLIGHT);
    let (chain_sender, chain_receiver) = mpsc::sync_channel(1);
    std::thread::scope(|scope| {
        let mut refusal = Refusal::default();
        if let Some(error) = SessionStream::header_vocabulary_errors(&reader).first() {
            refusal.note(StoreError::HeaderVocabulary {
                path: parent_path.to_owned(),
                error: error.clone(),
            });
        }
        let mut state =
            SessionState::with_header_body(reader.header().clone(), reader.header_body());
        let parent_id = state.header().id.clone();
        let genesis = state.chain();
        let (sync_sender, syncer) = match syncer_file {
            Some(syncer_file) => {
                let (sender, receiver) = mpsc::sync_channel::<()>(1);
                let syncer = scope.spawn(move || {
                    for () in receiver {
                        io.sync_data(&syncer_file, path)
                            .map_err(|source| StoreError::io("fdatasync", path, source))?;
                    }
                    Ok::<(), StoreError>(())
                });
                (Some(sender), Some(syncer))
            }
            None => (None, None),
        };
        let feed = Feed {
            copies: Some(copy_sender),
            chains: chain_receiver,
            stopped: false,
        };
        let resign = Resign::new(&parent_id, child);
        let (mut records, spares) = ParentRecords::read(scope, reader, parent_id, feed);
        let chain_from_start = matches!(target, Target::Child { sealed: true });
        let writer = scope.spawn(move || {
            let pipe = WriterPipe {
                copies: copy_receiver,
                chains: chain_sender,
                spares,
                write_back: sync_sender,
            };
            write_records(resign, genesis, pipe, file, path, io, chain_from_start)
        });
        let read = (|| {
            // Once the parent is refused, nothing more is copied: the fold
            // reads on, chaining the records itself, only to find a seal
            // that does not hold later in the log, which outranks a broken
            // rule (exit 7 over 4), or damage, which outranks both.
            let mut refused = false;
            // Whether the writing thread runs the chain: the fold then
            // leaves each own seal's chain to it ([`fold_own_seal`]).
            let mut deferring = chain_from_start;
            loop {
                let next = records.next_folded(&mut |record, view, copied| {
                    let view = view
                        .unwrap_or_else(|| EventView::parse(record.event_type(), record.data()));
                    if refused {
                        return state.apply_viewed(record, view);
                    }
                    if deferring {
                        return fold_own_seal(&mut state, record, view, copied, genesis);
                    }
                    // A writer that stopped has an error, which is returned
                    // before the fold's verdict on this seal is looked at.
                    let mut asked = false;
                    let folded = state.apply_viewed_unchained(record, view, || {
                        let chain = copied.chain();
                        asked = chain.is_some();
                        chain.unwrap_or(genesis)
                    });
                    // From the first time it is asked for, the writing
                    // thread runs the chain over every record.
                    deferring = asked;
                    folded
                })?;
                let Some((record, folded)) = next else { break };
                if let Err(violation) = folded {
                    let seal = violation.kind == ViolationKind::Seal;
                    refusal.note(StoreError::Rule {
                        path: parent_path.to_owned(),
                        violation,
                    });
                    if seal {
                        break;
                    }
                }
                if refused {
                    continue;
                }
                // What neither backend writes is not copied either: a
                // child is a log both could hold.
                // A line of the parent holds no line break to look for.
                if let Err(error) = check_storable_values(record) {
                    refusal.note(match error {
                        StoreError::InvalidEvent(reason) => {
                            StoreError::InvalidEvent(format!("{}: {reason}", parent_path.display()))
                        }
                        error => error,
                    });
                }
                if !records.copy() {
                    break;
                }
                if refusal.is_some() {
                    // The chain through this record, from the copy, then
                    // the fold's own from here on.
                    let Some(chain) = records.chain() else { break };
                    state.set_chain(chain);
                    refused = true;
                }
            }
            Ok::<(), StoreError>(())
        })();
        records.close_copy();
        let written = join(writer);
        let synced = syncer.map_or(Ok(()), join);
        read?;
        synced?;
        let written = written?;
        if let Some(chain) = written.chain {
            state.set_chain(chain);
        }
        let summary = records.finish()?;
        // A seal whose chain the writing thread found failing comes before
        // any record the fold went on to refuse: it is the first refusal.
        let mut verdict = Refusal::default();
        if let Some(violation) = written.failed_seal {
            verdict.note(StoreError::Rule {
                path: parent_path.to_owned(),
                violation,
            });
        }
        if let Err(error) = refusal.into_result() {
            verdict.note(error);
        }
        verdict.into_result()?;
        if let Some(torn) = &summary.torn_tail {
            warn_torn_parent(parent_path, torn);
        }
        Ok(state)
    })
}

/// Folds `record` (whose view is `view`) into `state`, the fold of a
/// parent whose hash chain the writing thread runs: an own seal is checked
/// here against the chain it claims (its span, its signature), and its
/// chain is left to the writing thread, which checks it when it reaches the
/// seal ([`ToWriter::CheckSeal`]), so the fold does not wait for the copy
/// at every seal. A seal that fails its own checks is checked here against
/// the real chain first, as [`SessionState::apply`] checks it, so that the
/// violation is the one a whole read gives.
fn fold_own_seal(
    state: &mut SessionState,
    record: &EventRecord,
    view: Result<EventView<'_>, ShapeError>,
    copied: &mut Copied<'_>,
    genesis: ChainValue,
) -> Result<(), Violation> {
    let own_seal = record.event_type() == EventType::Seal.as_str() && state.is_own(record.seq());
    let claimed = match view {
        Ok(EventView::Seal(_)) if own_seal => claimed_chain(record),
        _ => None,
    };
    let Some(claimed) = claimed else {
        // An own seal whose shape is broken: its chain, when it holds a
        // readable one, is checked against the real chain, which the copy
        // gives (a wait, for such a seal only; `None`: the writing thread
        // stopped, on a failure that comes first). Any other record does
        // not ask for the chain.
        let chain = match own_seal {
            true => copied.chain().unwrap_or(genesis),
            false => genesis,
        };
        return state.apply_viewed_unchained(record, view, || chain);
    };
    match state.apply_viewed_unchained(record, view, || claimed) {
        Ok(()) => {
            copied.check_seal(record.seq());
            Ok(())
        }
        Err(violation) if violation.kind == ViolationKind::Seal => {
            // `None`: the writing thread stopped, on an error or a seal
            // failing before this one, either of which comes first.
            let Some(chain) = copied.chain() else {
                return Err(violation);
            };
            Err(check_claimed_chain(record, &chain)
                .err()
                .unwrap_or(violation))
        }
        Err(violation) => Err(violation),
    }
}

/// Where [`copy_parent`] writes the parent's records.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// A spool, which the kernel copies into the child once its header is
    /// known.
    Spool,
    /// The child itself, after its header. `sealed`: the parent is known
    /// (from its state snapshot) to have an own seal, so the fold will ask
    /// for the hash chain of the copy.
    Child { sealed: bool },
}

/// The parent's reader, as [`copy_parent`] reads it.
type ParentReader = LogReader<SharedTextReader<std::io::Take<File>>>;

/// The records of the parent's good prefix, for [`copy_parent`] to fold
/// in order: split into lines, CRC-checked and decoded on a reading thread
/// of their own, which hands them over in batches as a long fold's reader
/// does ([`crate::fold::hand_over`]), each left for the fold to prove its
/// `data` JSON as it scans the data for its view. Should that proof fail
/// (damage, which an intact record after it makes corruption), the reader
/// comes back to this thread and reads the log again from that record, as
/// a read alone reads it, so that what is found there (damage, a torn
/// tail, corruption) is what a read alone finds.
///
/// The records the fold passes ([`ParentRecords::copy`]) go on to the
/// writer thread in the batch that holds them, which the writer then gives
/// back to the reading thread.
struct ParentRecords<'scope> {
    /// The parent's id, which the proofs are given.
    id: SessionId,
    /// While the reading thread reads.
    reading: Option<Reading<'scope>>,
    /// The reader, once back on this thread.
    reader: Option<ParentReader>,
    /// The record read last on this thread.
    last: Option<EventRecord>,
    /// To the writer thread.
    feed: Feed,
}

/// A record [`ParentRecords`] lends until its next read, and what folding
/// it returned.
type Folded<'a> = (&'a EventRecord, Result<(), Violation>);

/// This thread's ends of the reading thread's channels.
struct Reading<'scope> {
    batches: Receiver<Batch>,
    /// Batches with no record to write, for the reading thread to fill
    /// again.
    spares: Sender<Batch>,
    /// The batch being folded, and how many of its records were.
    batch: Arc<Batch>,
    at: usize,
    /// Its records copied and not yet sent to the writer: one run, as a
    /// record is copied only once every record before it was.
    pending: Range<usize>,
    /// Gives the reader back, and how its read ended.
    thread: ScopedJoinHandle<'scope, (ParentReader, Result<(), StoreError>)>,
}

impl Reading<'_> {
    /// The copy as the fold sees it while it folds a record of the batch.
    fn copied<'a>(&'a mut self, feed: &'a mut Feed) -> Copied<'a> {
        Copied {
            batch: Some(&self.batch),
            pending: &mut self.pending,
            feed,
        }
    }
}

/// The copy of the records before the one being folded, for the fold to
/// ask the chain through them of ([`Copied::chain`]).
struct Copied<'a> {
    /// The batch of the record folded; `None` for a record read on this
    /// thread, which has nothing pending.
    batch: Option<&'a Arc<Batch>>,
    pending: &'a mut Range<usize>,
    feed: &'a mut Feed,
}

impl Copied<'_> {
    /// Sends the records copied and not yet sent to the writer.
    fn send_pending(&mut self) {
        let pending = std::mem::take(self.pending);
        if let Some(batch) = self.batch.filter(|_| !pending.is_empty()) {
            self.feed
                .send(ToWriter::Records(Arc::clone(batch), pending));
        }
    }

    /// The chain value through every record copied; `None` when the
    /// writer thread has stopped.
    fn chain(&mut self) -> Option<ChainValue> {
        self.send_pending();
        self.feed.chain()
    }

    /// Has the writing thread check the chain of the own seal at `seq`,
    /// the record being folded, when it reaches it.
    fn check_seal(&mut self, seq: u64) {
        self.feed.send(ToWriter::CheckSeal(seq));
    }
}

impl<'scope> ParentRecords<'scope> {
    /// Starts reading the records after the header `reader` has read, on
    /// a thread of `scope`, the records copied to go through `feed`.
    /// Returns the way back to the reading thread for the batches the
    /// writer has written.
    fn read<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        mut reader: ParentReader,
        id: SessionId,
        feed: Feed,
    ) -> (Self, Sender<Batch>) {
        let (batch_sender, batches) = mpsc::sync_channel::<Batch>(BATCHES_QUEUED);
        let (spares, spare_receiver) = mpsc::channel::<Batch>();
        let thread = scope.spawn(move || {
            // Ends at the end of the good prefix, on an error, or when
            // this thread stops taking batches.
            let read = hand_over(&mut reader, &batch_sender, &spare_receiver, false);
            (reader, read)
        });
        let records = ParentRecords {
            id,
            reading: Some(Reading {
                batches,
                spares: spares.clone(),
                batch: Arc::new(Batch::new()),
                at: 0,
                pending: 0..0,
                thread,
            }),
            reader: None,
            last: None,
            feed,
        };
        (records, spares)
    }

    /// The next record of the good prefix, folded by `fold` (given the view
    /// of its data when the read has it, and the copy so far), with what
    /// `fold` returned; `None` at the end of the good prefix. An error of
    /// the read is returned once every record before it was.
    fn next_folded<F>(&mut self, fold: &mut F) -> Result<Option<Folded<'_>>, StoreError>
    where
        F: FnMut(
            &EventRecord,
            Option<Result<EventView<'_>, ShapeError>>,
            &mut Copied<'_>,
        ) -> Result<(), Violation>,
    {
        while let Some(reading) = &mut self.reading {
            if reading.at == reading.batch.len() {
                self.next_batch()?;
                continue;
            }
            let index = reading.at;
            reading.at += 1;
            let (record, unproven) = &reading.batch[index];
            let mut copied = Copied {
                batch: Some(&reading.batch),
                pending: &mut reading.pending,
                feed: &mut self.feed,
            };
            // The view's scan proves `data` JSON.
            let folded = match unproven.map(|mark| (mark, prove_data(&self.id, record))) {
                None => Ok(fold(record, None, &mut copied)),
                Some((_, Ok(view))) => Ok(fold(record, Some(view), &mut copied)),
                Some((mark, Err(_))) => Err(mark),
            };
            match folded {
                Ok(folded) => {
                    let record = self.reading.as_ref().map(|reading| &reading.batch[index].0);
                    return Ok(record.map(|record| (record, folded)));
                }
                Err(mark) => self.read_again(mark)?,
            }
        }
        let Some(reader) = &mut self.reader else {
            return Ok(None);
        };
        let mut copied = Copied {
            batch: None,
            pending: &mut (0..0),
            feed: &mut self.feed,
        };
        let Some(FoldedEvent { record, folded }) =
            reader.next_event_folded_by(|record, view| fold(record, view, &mut copied))?
        else {
            return Ok(None);
        };
        Ok(Some((self.last.insert(record), folded)))
    }

    /// Copies the record [`ParentRecords::next_folded`] returned last into
    /// the child, after those copied before it; false when the writer
    /// thread has stopped (on an error, which joining it returns).
    fn copy(&mut self) -> bool {
        match (&mut self.reading, &self.last) {
            (Some(reading), _) => {
                let index = reading.at - 1;
                match reading.pending.is_empty() {
                    true => reading.pending = index..index + 1,
                    false => reading.pending.end = index + 1,
                }
            }
            (None, Some(record)) => {
                let batch = Arc::new(vec![(record.clone(), None)]);
                self.feed.send(ToWriter::Records(batch, 0..1));
            }
            (None, None) => {}
        }
        !self.feed.stopped
    }

    /// The chain value through every record copied; `None` when the
    /// writer thread has stopped.
    fn chain(&mut self) -> Option<ChainValue> {
        match &mut self.reading {
            Some(reading) => reading.copied(&mut self.feed).chain(),
            None => self.feed.chain(),
        }
    }

    /// Sends the records copied and not yet sent to the writer, and ends
    /// the copy: the writer thread ends when it has written them.
    fn close_copy(&mut self) {
        if let Some(reading) = &mut self.reading {
            reading.copied(&mut self.feed).send_pending();
        }
        self.feed.copies = None;
    }

    /// Hands the batch folded on (to the writer, with the records it
    /// copied, else back to the reading thread) and takes the next one;
    /// when there is none, the read has ended, and the reader comes back
    /// to this thread.
    fn next_batch(&mut self) -> Result<(), StoreError> {
        let Some(reading) = &mut self.reading else {
            return Ok(());
        };
        match reading.batches.recv() {
            Ok(batch) => {
                let folded = std::mem::replace(&mut reading.batch, Arc::new(batch));
                reading.at = 0;
                let pending = std::mem::take(&mut reading.pending);
                if !pending.is_empty() {
                    self.feed.send(ToWriter::Records(folded, pending));
                } else if let Ok(folded) = Arc::try_unwrap(folded) {
                    // A reading thread that has ended frees nothing more:
                    // the batch is freed here.
                    let _ = reading.spares.send(folded);
                }
                Ok(())
            }
            Err(_) => self.take_reader_back(),
        }
    }

    /// Stops the reading thread, which may have read on, and takes the
    /// reader back onto this thread; returns how the thread's read ended.
    /// The records of the batch being folded that were copied go to the
    /// writer first.
    fn take_reader_back(&mut self) -> Result<(), StoreError> {
        if let Some(reading) = &mut self.reading {
            reading.copied(&mut self.feed).send_pending();
        }
        let Some(Reading {
            batches, thread, ..
        }) = self.reading.take()
        else {
            return Ok(());
        };
        // A thread waiting to hand a batch over is let go.
        drop(batches);
        let (reader, read) = thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        self.reader = Some(reader);
        read
    }

    /// Reads the log again on this thread from the record `mark` names,
    /// whose proof failed. What the reading thread read past it, and how
    /// that read ended, is put aside: the read again finds it, if it is
    /// there.
    fn read_again(&mut self, mark: Unproven) -> Result<(), StoreError> {
        let _past_the_record = self.take_reader_back();
        match &mut self.reader {
            Some(reader) => reader.read_again(mark),
            None => unreachable!("the reader is back once the reading thread is gone"),
        }
    }

    /// Reads to the end of the log, the records not folded still proved:
    /// what [`LogReader::finish`] finds after them.
    fn finish(mut self) -> Result<ScanSummary, StoreError> {
        while let Some(reading) = &mut self.reading {
            let rest = &reading.batch[reading.at..];
            let refused = rest.iter().find_map(|(record, unproven)| {
                unproven.filter(|_| prove_json(&self.id, record).is_err())
            });
            reading.at = reading.batch.len();
            match refused {
                Some(mark) => self.read_again(mark)?,
                None => self.next_batch()?,
            }
        }
        match self.reader {
            Some(reader) => reader.finish(),
            None => unreachable!("the reader is back once the reading thread is gone"),
        }
    }
}

/// Batches of records to write that may wait in the channel to the writer
/// thread.
const COPIES_IN_FLIGHT: usize = 2;

/// Bytes written to a child between two fdatasyncs that start its
/// write-back early.
const WRITE_BACK_BYTES: u64 = 16 << 20;

/// What the folding thread sends the writer thread.
#[derive(Debug)]
enum ToWriter {
    /// These records of a batch, to sign and write. The writer gives the
    /// batch back to the reading thread when it holds the last reference
    /// to it.
    Records(Arc<Batch>, Range<usize>),
    /// A request for the chain value through every record sent.
    Chain,
    /// The own seal at this seq, among the records still to come, is to
    /// have its chain checked against the chain before it
    /// ([`check_claimed_chain`]).
    CheckSeal(u64),
}

/// The folding thread's end of the channels to the writer thread.
#[derive(Debug)]
struct Feed {
    /// `None` once closed.
    copies: Option<SyncSender<ToWriter>>,
    chains: Receiver<ChainValue>,
    /// Whether a send found the writer thread stopped.
    stopped: bool,
}

impl Feed {
    fn send(&mut self, message: ToWriter) {
        let sent = self
            .copies
            .as_ref()
            .is_some_and(|copies| copies.send(message).is_ok());
        self.stopped |= !sent;
    }

    /// The chain value through every record sent; `None` when the writer
    /// thread has stopped.
    fn chain(&mut self) -> Option<ChainValue> {
        self.send(ToWriter::Chain);
        match self.stopped {
            true => None,
            false => self.chains.recv().ok(),
        }
    }
}

/// The writer thread's ends of the channels.
#[derive(Debug)]
struct WriterPipe {
    copies: Receiver<ToWriter>,
    chains: SyncSender<ChainValue>,
    /// To the reading thread, the batches written, for it to free and
    /// fill again.
    spares: Sender<Batch>,
    /// To the thread that fdatasyncs the child early, if any.
    write_back: Option<SyncSender<()>>,
}

/// The writer thread: writes each record received signed for the child
/// into `file` (at `path`) in chunks of about [`SPOOL_CHUNK_BYTES`], its
/// CRC derived from the one its line had in the parent (`resign`), until the
/// channel is closed, and runs the parent's hash chain from `genesis` over
/// their bodies for the fold, which asks for it at an own seal of the
/// parent, or leaves the seal's chain to it ([`ToWriter::CheckSeal`]): a
/// seal whose chain fails stops the copy. Returns the chain through the
/// last record (`None` when it was never run), and the seal that failed.
///
/// The chain is run from the first record with `chain_from_start` (the
/// parent is known to have an own seal), else only from the first time it
/// is asked for, so a parent without one never pays for the hash of every
/// record. Asked the first time, it is run over the records written so
/// far, read back from `file` (just written, so read from the page cache,
/// and checked to be what was written), then over each body as it comes.
/// Run from the start, it hashes the bodies the fold checked, as they are
/// written: the same values, with no reading back.
fn write_records(
    mut resign: Resign,
    genesis: ChainValue,
    pipe: WriterPipe,
    file: &mut File,
    path: &Path,
    io: &Io,
    chain_from_start: bool,
) -> Result<Written, StoreError> {
    let mut out = Output {
        records_start: file
            .stream_position()
            .map_err(|source| StoreError::io("seek", path, source))?,
        file,
        path,
        io,
        buffer: Vec::with_capacity(SPOOL_CHUNK_BYTES + (64 << 10)),
        unsynced: 0,
        write_back: pipe.write_back,
    };
    let mut chain = chain_from_start.then_some(genesis);
    // The seqs of the own seals to check, in the order of the log.
    let mut seals = VecDeque::new();
    for message in pipe.copies {
        match message {
            ToWriter::Records(batch, range) => {
                for (record, _) in &batch[range] {
                    let body = record.body();
                    // A seal to check that this record has passed would be
                    // a seal left unchecked: refused, never skipped.
                    if seals.front().is_some_and(|&seq| seq < record.seq()) {
                        return Err(StoreError::InvalidEvent(format!(
                            "{}: the seal at seq {} was not checked before seq {}",
                            path.display(),
                            seals[0],
                            record.seq()
                        )));
                    }
                    if seals.front() == Some(&record.seq()) {
                        seals.pop_front();
                        let before = out.run_chain(&mut chain, genesis)?;
                        if let Err(violation) = check_claimed_chain(record, &before) {
                            // The child is not published: nothing more is
                            // written.
                            return Ok(Written {
                                chain,
                                failed_seal: Some(violation),
                            });
                        }
                    }
                    if let Some(chain) = &mut chain {
                        *chain = ChainValue::next(chain, body);
                    }
                    let crc = resign.crc(record);
                    if body.len() >= SPOOL_CHUNK_BYTES {
                        // A large body is written from the record, not
                        // copied into the buffer, which would grow to
                        // hold it (and keep that size to the end).
                        if !out.buffer.is_empty() {
                            out.flush()?;
                        }
                        out.write_unbuffered(body.as_bytes())?;
                        encode_signed_line_into("", crc, &mut out.buffer);
                        continue;
                    }
                    encode_signed_line_into(body, crc, &mut out.buffer);
                    if out.buffer.len() >= SPOOL_CHUNK_BYTES {
                        out.flush()?;
                    }
                }
                // The records are freed by the reading thread, which
                // allocated them: its allocator then needs no lock.
                if let Ok(batch) = Arc::try_unwrap(batch) {
                    let _ = pipe.spares.send(batch);
                }
            }
            ToWriter::Chain => {
                let value = out.run_chain(&mut chain, genesis)?;
                if pipe.chains.send(value).is_err() {
                    break;
                }
            }
            ToWriter::CheckSeal(seq) => seals.push_back(seq),
        }
    }
    out.flush()?;
    Ok(Written {
        chain,
        failed_seal: None,
    })
}

/// What the writer thread returns.
#[derive(Debug)]
struct Written {
    /// The chain through the last record written; `None` when it was never
    /// run.
    chain: Option<ChainValue>,
    /// The own seal whose chain did not hold, at which the copy stopped.
    failed_seal: Option<Violation>,
}

/// What the writer thread writes into, and how far.
struct Output<'a> {
    file: &'a mut File,
    path: &'a Path,
    io: &'a Io,
    /// Where the first record written starts in `file`.
    records_start: u64,
    /// Lines not yet written.
    buffer: Vec<u8>,
    /// Bytes written since the syncer was last woken.
    unsynced: u64,
    /// To the thread that fdatasyncs the child early, if any.
    write_back: Option<SyncSender<()>>,
}

impl Output<'_> {
    fn flush(&mut self) -> Result<(), StoreError> {
        let buffer = std::mem::take(&mut self.buffer);
        let written = self.write_unbuffered(&buffer);
        self.buffer = buffer;
        self.buffer.clear();
        written
    }

    /// Writes `bytes` after what was written (the buffer flushed first, if
    /// they are to follow it), and starts the early write-back every
    /// [`WRITE_BACK_BYTES`].
    fn write_unbuffered(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.io
            .write_all(self.file, self.path, bytes)
            .map_err(|source| StoreError::io("write", self.path, source))?;
        self.unsynced += bytes.len() as u64;
        if let Some(write_back) = &self.write_back {
            // The syncer takes every byte written so far: while it is
            // busy, one request waits and more are not needed.
            if self.unsynced >= WRITE_BACK_BYTES && write_back.try_send(()).is_ok() {
                self.unsynced = 0;
            }
        }
        Ok(())
    }

    /// `chain`, the chain through every record given to this output, run
    /// from now on: when it was not yet run, it is computed over what was
    /// written ([`Output::chain_of_written`]).
    fn run_chain(
        &mut self,
        chain: &mut Option<ChainValue>,
        genesis: ChainValue,
    ) -> Result<ChainValue, StoreError> {
        match *chain {
            Some(value) => Ok(value),
            None => Ok(*chain.insert(self.chain_of_written(genesis)?)),
        }
    }

    /// The chain from `genesis` through every record given to this output
    /// so far: the buffer is written, and the lines written are read back.
    /// Each is a body the fold passed and `,"crc":"xxxxxxxx"}`, so its body
    /// is what the line holds before that suffix.
    fn chain_of_written(&mut self, genesis: ChainValue) -> Result<ChainValue, StoreError> {
        self.flush()?;
        let end = self
            .file
            .stream_position()
            .map_err(|source| StoreError::io("seek", self.path, source))?;
        // The output was opened to be written only.
        let mut written =
            File::open(self.path).map_err(|source| StoreError::io("open", self.path, source))?;
        written
            .seek(std::io::SeekFrom::Start(self.records_start))
            .map_err(|source| StoreError::io("seek", self.path, source))?;
        let source =
            BufReader::with_capacity(SPOOL_CHUNK_BYTES, written.take(end - self.records_start));
        let mut lines = LineReader::starting_at(source, self.records_start);
        let mut chain = genesis;
        while let Some((_, line)) = lines
            .next_line()
            .map_err(|source| StoreError::io("read", self.path, source))?
        {
            let body = match line {
                Line::Complete { terminated: true } => {
                    split_crc(lines.line()).and_then(|(body, _)| std::str::from_utf8(body).ok())
                }
                _ => None,
            };
            chain = chain.next(body.ok_or_else(|| written_damage(self.path))?);
        }
        Ok(chain)
    }
}

/// What the writer thread reads back is not what it wrote.
fn written_damage(path: &Path) -> StoreError {
    StoreError::io(
        "read",
        path,
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the records just written read back otherwise",
        ),
    )
}

/// The result of a thread of [`copy_parent`]; its panic goes on.
fn join<T>(handle: ScopedJoinHandle<'_, Result<T, StoreError>>) -> Result<T, StoreError> {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Says, through `tracing`, that a fork ignores its parent's torn tail.
pub(crate) fn warn_torn_parent(parent_path: &Path, torn: &sessionlog_schema::TornTail) {
    tracing::warn!(
        path = %parent_path.display(),
        "forking from the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
        torn.bytes,
        torn.position.line,
        torn.position.offset,
        torn.reason
    );
}

/// Writes the child's log into `file`, the temporary file `temp` just
/// created: its header, the spooled records, its own events; then
/// fdatasyncs it.
fn write_child(
    mut file: File,
    temp: &Path,
    spool: &Temporary,
    header: &SessionHeader,
    own_events: &[sessionlog_schema::EventRecord],
    io: &Io,
) -> Result<(), StoreError> {
    leftovers::hold(&file);
    let write_error = |source| StoreError::io("write", temp, source);
    io.write_all(&mut file, temp, header.encode().as_bytes())
        .map_err(write_error)?;
    let mut spooled = crate::reader::open_log_for_reading(&spool.path)?;
    io.copy_all(&mut spooled, &mut file, temp)
        .map_err(write_error)?;
    end_child(&mut file, temp, &header.id, own_events, io)
}

/// Ends the child's log at `path`, open as `file`, with its own events
/// (signed for `child`), and fdatasyncs it.
fn end_child(
    file: &mut File,
    path: &Path,
    child: &SessionId,
    own_events: &[EventRecord],
    io: &Io,
) -> Result<(), StoreError> {
    let mut own = Vec::new();
    for record in own_events {
        encode_line_into(child, record.body(), &mut own);
    }
    io.write_all(file, path, &own)
        .map_err(|source| StoreError::io("write", path, source))?;
    io.sync_data(file, path)
        .map_err(|source| StoreError::io("fdatasync", path, source))
}

/// Publishes `temp` as `path` (never replacing an existing log) and fsyncs
/// the folder.
fn publish(io: &Io, folder: &Path, temp: &Path, path: &Path) -> Result<(), StoreError> {
    io.publish(temp, path)
        .map_err(|source| StoreError::io("publish", path, source))?;
    io.sync_folder(folder)
        .map_err(|source| StoreError::io("fsync folder", folder, source))
}

/// The refusal of a fork into `child_path` that delegation refused: a child
/// with its parent's id exists already when the parent's log is at the
/// child's name; a lone log of another name is refused for what it is.
fn delegation_error(error: DelegationError, child_path: &Path) -> StoreError {
    match error {
        DelegationError::ChildIsParent { child } if child_path.symlink_metadata().is_ok() => {
            StoreError::AlreadyExists {
                id: child,
                path: child_path.to_owned(),
            }
        }
        other => StoreError::InvalidEvent(format!("fork: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{event, header, id, note, ok};
    use crate::{Durability, Store, WriterOptions};
    use sessionlog_projections::ViolationKind;
    use sessionlog_schema::{ApprovalPolicy, Corruption, Position};

    /// A store in `folder` with session `p` of 1,500 events (a policy, a
    /// turn, notes), closed by a writer that kept a state snapshot.
    fn long_parent(folder: &Path) -> Store {
        let store = ok(Store::create(folder));
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(
            &id("p"),
            WriterOptions {
                durability: Durability::Buffered,
                ..WriterOptions::default()
            },
        ));
        ok(writer.append(event("approval/policy", r#"{"policy":"never"}"#, 0), None));
        for chunk in 0..15 {
            let notes = (0..100).map(|n| note(&format!("{chunk}-{n}"))).collect();
            ok(writer.append_batch(notes, None));
        }
        drop(writer);
        store
    }

    /// No temporary file of a fork is left in `folder`.
    fn assert_no_temporary_file(folder: &Path) {
        let leftovers = ok(std::fs::read_dir(folder))
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().contains(".tmp-"))
            .count();
        assert_eq!(leftovers, 0, "no temporary file is left");
    }

    fn fork_of(store: &Store, child: &str) -> SessionHeader {
        ok(store.fork(&id("p"), &id(child), Some("go"), &Defaults::default()))
    }

    /// A temporary name another process took (the same pid and
    /// millisecond) fails the fork naming that file, never saying that
    /// the child exists, and the file is left alone.
    #[test]
    fn a_temporary_name_taken_is_not_a_child_that_exists() {
        let folder = ok(tempfile::tempdir());
        let store = ok(Store::create(folder.path()));
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        // The fork's temporary name is this process's id and a millisecond
        // after the token taken here: the names of the next 2,000 are taken
        // first. A fork whose token fell past them voids the attempt
        // (nothing was tested), and it is made again: a machine so loaded
        // that the fork starts 2 s later, or tests beside this one giving
        // tokens (one moves them far ahead of the clock).
        for _attempt in 0..5 {
            let token = crate::leftovers::new_token();
            let (pid, ms) = token
                .split_once('-')
                .unwrap_or_else(|| panic!("token {token}"));
            let ms: u64 = ok(ms.parse());
            let window = 2_000;
            let taken: Vec<PathBuf> = (1..=window)
                .map(|next| {
                    let path = folder
                        .path()
                        .join(format!(".c.jsonl.tmp-{pid}-{}", ms + next));
                    ok(std::fs::write(&path, "theirs"));
                    path
                })
                .collect();
            let refused = store.fork(&id("p"), &id("c"), None, &Defaults::default());
            if refused.is_ok() && crate::leftovers::last_token_ms() > ms + window {
                ok(std::fs::remove_file(store.session_path(&id("c"))));
                taken.iter().for_each(|path| ok(std::fs::remove_file(path)));
                continue;
            }
            match &refused {
                Err(StoreError::Io {
                    operation, path, ..
                }) => assert!(
                    *operation == "create" && taken.contains(path),
                    "{refused:?}"
                ),
                other => panic!("{other:?}"),
            }
            assert!(taken.iter().all(|path| path.exists()));
            assert!(!store.session_path(&id("c")).exists());
            return;
        }
        panic!("no fork took a token within 2,000 ms of the one taken before it");
    }

    #[test]
    fn the_three_ways_of_forking_write_the_same_child() {
        let folder = ok(tempfile::tempdir());
        let store = long_parent(folder.path());
        let parent_log = store.session_path(&id("p"));
        let sidecar = crate::jsonl::state_snapshot_path(&parent_log);
        ok(std::fs::remove_file(&sidecar));
        let defaults = Defaults::default();
        let request = ForkRequest {
            prompt: Some("go"),
            defaults: &defaults,
        };
        let io = Io::default();
        let ts = 1_800_000_000_000;
        let (c, d) = (id("c"), id("d"));
        let (c_path, d_path) = (store.session_path(&c), store.session_path(&d));
        let fork = |child, child_path| Fork {
            parent_path: &parent_log,
            parent_id: Some(id("p")),
            child,
            child_path,
            folder: store.path(),
            token: "test".to_owned(),
            ts,
        };
        let (state, _) = ok(store.snapshot(&id("p"))).fold();
        let from_state = ok(fork(&c, &c_path).seed(&state, request)).header;
        let scanned = crate::fork_header::scan_child_header(&parent_log, None, &c, ts);
        assert_eq!(scanned.as_ref(), Some(&from_state));
        let direct = ok(fork(&c, &c_path).direct(from_state.clone(), false, request, &io));
        assert_eq!(direct.as_ref(), Some(&from_state));
        let spooled = ok(fork(&d, &d_path).spooled(request, &io));
        assert_eq!(
            spooled,
            SessionHeader {
                id: id("d"),
                ..from_state
            }
        );
        let child = ok(store.snapshot(&id("c")));
        let other = ok(store.snapshot(&id("d")));
        let bodies = |snapshot: &crate::Snapshot| -> Vec<String> {
            snapshot
                .events
                .iter()
                .map(|record| record.body().to_owned())
                .collect()
        };
        assert_eq!(bodies(&child), bodies(&other));
        assert_eq!(child.events.len() as u64, from_state.seed_length + 1);
        assert_eq!(child.events[1_501].event_type(), "message", "the prompt");
        assert_no_temporary_file(store.path());
    }

    #[test]
    fn a_header_the_fold_refutes_leaves_the_fork_to_the_spool() {
        let folder = ok(tempfile::tempdir());
        let store = long_parent(folder.path());
        let parent_log = store.session_path(&id("p"));
        ok(std::fs::remove_file(crate::jsonl::state_snapshot_path(
            &parent_log,
        )));
        // A switch laid out otherwise than this store writes it (a space
        // after the type's colon), which the search does not see.
        let body =
            r#"{"seq":1502,"ts":1700000000600,"type": "sandbox/mode","data":{"mode":"read-only"}"#;
        let mut log = ok(std::fs::read(&parent_log));
        log.extend_from_slice(sessionlog_schema::encode_line(&id("p"), body).as_bytes());
        ok(std::fs::write(&parent_log, log));
        let parent = ok(store.snapshot(&id("p")));
        assert_eq!((parent.events.len(), parent.torn_tail), (1_502, None));
        let predicted = crate::fork_header::scan_child_header(&parent_log, None, &id("c"), 0);
        assert_eq!(predicted.map(|header| header.sandbox_mode), Some(None));

        let header = fork_of(&store, "c");
        assert_eq!(header.seed_length, 1_502);
        assert_eq!(
            header.sandbox_mode,
            Some(sessionlog_schema::SandboxMode::ReadOnly)
        );
        assert_eq!(header.approval_policy, Some(ApprovalPolicy::Never));
        let child = ok(store.snapshot(&id("c")));
        assert_eq!(
            child.header, header,
            "the header written is the one returned"
        );
        let (_, violations) = child.fold();
        assert!(violations.is_empty(), "{violations:?}");
        assert_no_temporary_file(store.path());
    }

    #[test]
    fn a_parent_with_a_state_snapshot_forks_to_the_child_a_full_read_gives() {
        let folder = ok(tempfile::tempdir());
        let store = long_parent(&folder.path().join("with"));
        let parent_log = store.session_path(&id("p"));
        let sidecar = crate::jsonl::state_snapshot_path(&parent_log);
        assert!(sidecar.exists(), "the parent's writer kept a snapshot");
        assert!(ok(snapshot_log_state(&parent_log, None)).is_some());
        let bare = ok(Store::create(&folder.path().join("without")));
        ok(std::fs::copy(&parent_log, bare.session_path(&id("p"))));

        let direct = fork_of(&store, "c");
        let spooled = fork_of(&bare, "c");
        assert_eq!(
            SessionHeader {
                created_at: spooled.created_at,
                ..direct.clone()
            },
            spooled
        );
        assert_eq!(direct.seed_length, 1_501);
        assert_eq!(direct.approval_policy, Some(ApprovalPolicy::Never));
        let child = ok(store.snapshot(&id("c")));
        let other = ok(bare.snapshot(&id("c")));
        assert_eq!(child.events.len(), other.events.len());
        for (ours, theirs) in child.events.iter().zip(&other.events) {
            assert_eq!(
                (ours.seq(), ours.event_type()),
                (theirs.seq(), theirs.event_type())
            );
            if ours.seq() <= 1_501 {
                assert_eq!(ours.body(), theirs.body(), "seq {}", ours.seq());
            }
        }
        assert_no_temporary_file(store.path());
    }

    /// A snapshot whose state breaks a rule the log does not (forged with
    /// a CRC of its own, or wrong in a way its anchor cannot tell) only
    /// predicts: the fork reads every record, finds the parent sound, and
    /// forks it as a parent without a snapshot forks.
    #[test]
    fn a_snapshot_state_that_breaks_a_rule_does_not_refuse_the_fork() {
        let folder = ok(tempfile::tempdir());
        let store = long_parent(folder.path());
        let parent_log = store.session_path(&id("p"));
        let sidecar = crate::jsonl::state_snapshot_path(&parent_log);
        let parent = ok(store.snapshot(&id("p")));
        let (_, anchor) = ok(crate::state_snapshot::decode(
            ok(std::fs::read(&sidecar)),
            &parent.header,
            &parent.header_body,
        ));
        let last = usize::try_from(anchor.seq).unwrap_or(usize::MAX) - 1;
        let mut forged = SessionState::with_header_body(parent.header.clone(), &parent.header_body);
        for record in &parent.events[..last] {
            ok(forged.apply(record));
        }
        let ghost = EventRecord::new(
            anchor.seq,
            parent.events[last].ts(),
            None,
            "turn/end",
            r#"{"turnId":"ghost"}"#,
        );
        assert!(
            forged.apply(&ghost).is_err(),
            "the forged state breaks a rule"
        );
        let header_crc = crate::state_snapshot::header_crc(&parent.header_body);
        ok(std::fs::write(
            &sidecar,
            crate::state_snapshot::encode(&forged, header_crc, anchor),
        ));
        assert!(
            ok(snapshot_log_state(&parent_log, None)).is_some(),
            "the forged snapshot is taken as the parent's"
        );
        let child = fork_of(&store, "c");
        assert_eq!(child.seed_length, 1_501);
        assert_eq!(child.approval_policy, Some(ApprovalPolicy::Never));
        assert_no_temporary_file(store.path());
    }

    #[test]
    fn a_snapshot_state_that_the_log_does_not_give_is_not_trusted() {
        let folder = ok(tempfile::tempdir());
        let store = long_parent(folder.path());
        let parent_log = store.session_path(&id("p"));
        // The state of the first ten events stands for a snapshot that is
        // wrong about the log, or a parent that grew since it was read.
        let parent = ok(store.snapshot(&id("p")));
        let mut stale = SessionState::new(parent.header.clone());
        for record in &parent.events[..10] {
            ok(stale.apply(record));
        }
        let child_path = folder.path().join("c.jsonl");
        let fork = Fork {
            parent_path: &parent_log,
            parent_id: Some(id("p")),
            child: &id("c"),
            child_path: &child_path,
            folder: folder.path(),
            token: "test".to_owned(),
            ts: 1_800_000_000_000,
        };
        let defaults = Defaults::default();
        let request = ForkRequest {
            prompt: Some("go"),
            defaults: &defaults,
        };
        let predicted = ok(fork.seed(&stale, request)).header;
        let refused = ok(fork.direct(predicted, false, request, &Io::default()));
        assert_eq!(refused, None, "a child seeded with ten events");
        assert!(!child_path.exists(), "nothing is published");
        assert!(!fork.temp().exists(), "nothing is left behind");
        assert_eq!(fork_of(&store, "c").seed_length, 1_501);
    }

    /// A store in `folder` with session `p`: three runs of 400 notes, each
    /// followed by an unsigned seal (seqs 401, 802, 1,203), closed by a
    /// writer that kept a state snapshot.
    fn sealed_parent(folder: &Path) -> Store {
        let store = ok(Store::create(folder));
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
        for run in 0..3 {
            let notes = (0..400).map(|n| note(&format!("{run}-{n}"))).collect();
            ok(writer.append_batch(notes, None));
            ok(writer.seal(None, None));
        }
        drop(writer);
        store
    }

    /// The parent's log with the body of the record at `seq` made what
    /// `edit` makes of it, its CRC recomputed.
    fn edit_record(log: &Path, seq: u64, edit: impl Fn(&str) -> String) {
        let text = ok(std::fs::read_to_string(log));
        let mut out = Vec::new();
        for line in text.lines() {
            let body = &line[..line.rfind(",\"crc\":").unwrap_or(line.len())];
            if body.starts_with(&format!("{{\"seq\":{seq},")) {
                encode_line_into(&id("p"), &edit(body), &mut out);
            } else {
                out.extend_from_slice(line.as_bytes());
                out.push(b'\n');
            }
        }
        ok(std::fs::write(log, out));
    }

    /// The parent's log with the chain of its seal at `seq` changed (its
    /// CRC recomputed, so that only the seal check can find it).
    fn break_seal(log: &Path, seq: u64) {
        edit_record(log, seq, |body| {
            assert!(body.contains(r#""type":"seal""#), "{body}");
            let at = body.find("sha256:").unwrap_or(0) + "sha256:".len();
            let flipped = if &body[at..=at] == "0" { "1" } else { "0" };
            format!("{}{flipped}{}", &body[..at], &body[at + 1..])
        });
    }

    /// A store in `folder` with session `p`: 6,000 notes of about 300
    /// bytes (2 MB, more than a chunk of the chain's read-back), then an
    /// unsigned seal (seq 6,001) and 10 notes more.
    fn late_sealed_parent(folder: &Path) -> Store {
        let store = ok(Store::create(folder));
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
        let text = "x".repeat(300);
        for run in 0..6 {
            let notes = (0..1_000)
                .map(|n| note(&format!("{run}-{n} {text}")))
                .collect();
            ok(writer.append_batch(notes, None));
        }
        ok(writer.seal(None, None));
        let notes = (0..10).map(|n| note(&format!("after {n}"))).collect();
        ok(writer.append_batch(notes, None));
        drop(writer);
        store
    }

    #[test]
    fn the_parents_own_seals_are_checked_against_the_chain_its_copy_runs() {
        // How the parent is made, its last seq, the seal broken.
        type Case = (fn(&Path) -> Store, u64, u64);
        let cases: [Case; 3] = [
            (sealed_parent, 1_203, 802),
            (sealed_parent, 1_203, 401),
            (late_sealed_parent, 6_011, 6_001),
        ];
        for ((parent, seed_length, broken), with_snapshot) in cases
            .into_iter()
            .flat_map(|case| [(case, true), (case, false)])
        {
            let folder = ok(tempfile::tempdir());
            let store = parent(folder.path());
            let parent_log = store.session_path(&id("p"));
            let sidecar = crate::jsonl::state_snapshot_path(&parent_log);
            if !with_snapshot {
                ok(std::fs::remove_file(&sidecar));
            }
            assert_eq!(fork_of(&store, "good").seed_length, seed_length);
            let good = ok(store.snapshot(&id("good")));
            // Every record before and after each seal the copy met, the
            // seal's batch split by the fold's request for the chain.
            let bodies = |snapshot: &crate::Snapshot, count: u64| -> Vec<String> {
                let records = snapshot.events.iter().take(count as usize);
                records.map(|record| record.body().to_owned()).collect()
            };
            let parent_bodies = bodies(&ok(store.snapshot(&id("p"))), seed_length);
            assert_eq!(bodies(&good, seed_length), parent_bodies);
            let (_, violations) = good.fold();
            assert!(violations.is_empty(), "{violations:?}");

            break_seal(&parent_log, broken);
            let refused = store.fork(&id("p"), &id("c"), Some("go"), &Defaults::default());
            match refused {
                Err(StoreError::Rule { violation, .. }) => {
                    assert_eq!(violation.kind, ViolationKind::Seal, "{violation}");
                    assert_eq!(violation.seq, broken, "{violation}");
                }
                other => panic!("with snapshot {with_snapshot}: a seal failure, not {other:?}"),
            }
            assert!(!store.session_path(&id("c")).exists());
            assert_no_temporary_file(store.path());
        }
    }

    /// A body of a chunk or more is written from its record, after the
    /// lines buffered before it and before those after it; a seal after
    /// it is checked against the chain read back from what was written.
    #[test]
    fn large_bodies_are_copied_whole_between_the_lines_around_them() {
        for with_snapshot in [true, false] {
            let folder = ok(tempfile::tempdir());
            let store = ok(Store::create(folder.path()));
            ok(store.create_session(&header("p"), &[], Durability::Fsync));
            let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
            // Enough events for the writer to keep a state snapshot.
            let notes = (0..1_100).map(|n| note(&format!("before {n}"))).collect();
            ok(writer.append_batch(notes, None));
            let sizes = [
                10,
                SPOOL_CHUNK_BYTES,
                20,
                SPOOL_CHUNK_BYTES * 3,
                SPOOL_CHUNK_BYTES - 30,
            ];
            for (n, size) in sizes.into_iter().enumerate() {
                ok(writer.append(note(&format!("{n} {}", "y".repeat(size))), None));
                ok(writer.append(note(&format!("small {n}")), None));
            }
            ok(writer.seal(None, None));
            ok(writer.append(note("after the seal"), None));
            drop(writer);
            let parent_log = store.session_path(&id("p"));
            if !with_snapshot {
                ok(std::fs::remove_file(crate::jsonl::state_snapshot_path(
                    &parent_log,
                )));
            }
            let seed_length = 1_100 + 2 * sizes.len() as u64 + 2;
            assert_eq!(fork_of(&store, "c").seed_length, seed_length);
            let bodies = |session: &str| -> Vec<String> {
                let snapshot = ok(store.snapshot(&id(session)));
                let records = snapshot.events.iter().take(seed_length as usize);
                records.map(|record| record.body().to_owned()).collect()
            };
            assert_eq!(bodies("c"), bodies("p"), "with snapshot {with_snapshot}");
            let (_, violations) = ok(store.snapshot(&id("c"))).fold();
            assert!(violations.is_empty(), "{violations:?}");

            // The seal after the large bodies holds only over the chain of
            // what the writer wrote: broken, it refuses the fork.
            break_seal(&parent_log, seed_length - 1);
            match store.fork(&id("p"), &id("d"), Some("go"), &Defaults::default()) {
                Err(StoreError::Rule { violation, .. }) => {
                    assert_eq!(violation.kind, ViolationKind::Seal, "{violation}");
                }
                other => panic!("with snapshot {with_snapshot}: a seal failure, not {other:?}"),
            }
            assert_no_temporary_file(store.path());
        }
    }

    /// A store in `folder` with session `p`: `runs` runs of 400 notes, each
    /// appended on its own (a record that joins the log alone is the one
    /// whose `data` the fold proves), each run followed by an unsigned
    /// seal when `sealed`.
    fn unbatched_parent(folder: &Path, runs: u64, sealed: bool) -> Store {
        let store = ok(Store::create(folder));
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        let options = WriterOptions {
            durability: Durability::Buffered,
            ..WriterOptions::default()
        };
        let mut writer = ok(store.open_writer(&id("p"), options));
        for run in 0..runs {
            for n in 0..400 {
                ok(writer.append(note(&format!("{run}-{n}")), None));
            }
            if sealed {
                ok(writer.seal(None, None));
            }
        }
        drop(writer);
        store
    }

    /// The parent's log with the `data` of the record at `seq` made
    /// something other than JSON, its CRC recomputed: damage that only the
    /// proof of the data finds, which the fork leaves to its fold.
    fn damage_data(log: &Path, seq: u64) {
        edit_record(log, seq, |body| {
            let edited = body.replacen(r#""data":{"#, r#""data":{,"#, 1);
            assert_ne!(edited, body);
            edited
        });
    }

    /// What a read alone of the log at `path` finds wrong: its corruption,
    /// or its torn tail's position.
    fn read_alone(path: &Path) -> Result<Option<Position>, Corruption> {
        match crate::reader::Snapshot::read(path, None) {
            Ok(snapshot) => Ok(snapshot.torn_tail.map(|torn| torn.position)),
            Err(StoreError::Corrupt { corruption, .. }) => Err(corruption),
            Err(other) => panic!("a read alone: {other}"),
        }
    }

    /// Forks a parent of 1,600 events damaged by `damage` at the record of
    /// each seq: in the first batch the reading thread hands over, in its
    /// second, and as the last record (a torn tail). The fork finds what a
    /// read alone finds, and the damage found is `reason`'s.
    fn damage_is_found_where_a_read_alone_finds_it(damage: fn(&Path, u64), reason: &str) {
        for (seq, torn) in [(10, false), (1_200, false), (1_600, true)] {
            let folder = ok(tempfile::tempdir());
            let store = unbatched_parent(folder.path(), 4, false);
            let parent_log = store.session_path(&id("p"));
            damage(&parent_log, seq);
            let alone = read_alone(&parent_log);
            let forked = store.fork(&id("p"), &id("c"), None, &Defaults::default());
            match (forked, alone) {
                (Ok(header), Ok(Some(position))) if torn => {
                    assert_eq!(header.seed_length, seq - 1, "the torn tail is not copied");
                    assert_eq!(position.line, seq + 1);
                    let child = ok(store.snapshot(&id("c")));
                    assert_eq!(child.events.len() as u64, seq - 1);
                }
                (Err(StoreError::Corrupt { corruption, .. }), Err(alone)) if !torn => {
                    assert_eq!(corruption, alone);
                    assert_eq!(corruption.position.line, seq + 1, "{corruption}");
                    assert!(corruption.reason.contains(reason), "{corruption}");
                    assert!(!store.session_path(&id("c")).exists());
                }
                (forked, alone) => panic!("seq {seq}: the fork gave {forked:?}, a read {alone:?}"),
            }
            assert_no_temporary_file(store.path());
        }
    }

    #[test]
    fn data_damaged_under_a_good_crc_is_found_where_a_read_alone_finds_it() {
        damage_is_found_where_a_read_alone_finds_it(damage_data, "not a JSON object");
    }

    /// The parent's log with a byte of the record at `seq` made one that
    /// is not UTF-8, its CRC recomputed over the bytes: damage the reader
    /// finds in a block it then reads as bytes, not as shared text.
    fn damage_utf8(log: &Path, seq: u64) {
        let bytes = ok(std::fs::read(log));
        let mut out = Vec::new();
        for line in bytes.split_inclusive(|byte| *byte == b'\n') {
            if !line.starts_with(format!("{{\"seq\":{seq},").as_bytes()) {
                out.extend_from_slice(line);
                continue;
            }
            let suffix = sessionlog_schema::CRC_SUFFIX_LEN + 1;
            let mut body = line[..line.len() - suffix].to_vec();
            let text = body.len() - 3;
            body[text] = 0xff;
            let crc = sessionlog_schema::record_crc(&id("p"), &body);
            out.extend_from_slice(&body);
            out.extend_from_slice(format!(",\"crc\":\"{crc:08x}\"}}\n").as_bytes());
        }
        ok(std::fs::write(log, out));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_found_where_a_read_alone_finds_it() {
        damage_is_found_where_a_read_alone_finds_it(damage_utf8, "not UTF-8");
    }

    #[test]
    fn damage_after_a_seal_that_fails_outranks_it() {
        // The seal at 401 fails and stops the fold; the damage comes in
        // the batch being folded then, or in one the reading thread hands
        // over after.
        for damaged in [600, 1_100] {
            let folder = ok(tempfile::tempdir());
            let store = unbatched_parent(folder.path(), 3, true);
            let parent_log = store.session_path(&id("p"));
            break_seal(&parent_log, 401);
            damage_data(&parent_log, damaged);
            let forked = store.fork(&id("p"), &id("c"), None, &Defaults::default());
            match forked {
                Err(StoreError::Corrupt { corruption, .. }) => {
                    assert_eq!(Err(corruption.clone()), read_alone(&parent_log));
                    assert_eq!(corruption.position.line, damaged + 1, "{corruption}");
                }
                other => panic!("damage at {damaged}: corruption, not {other:?}"),
            }
            assert_no_temporary_file(store.path());
        }
    }

    /// Appends `line` to the parent's log as the fork's fdatasync of it
    /// begins: a writer's append that lands while the sync runs, which the
    /// sync is not known to cover.
    struct AppendDuringSync {
        parent: PathBuf,
        line: Vec<u8>,
        done: std::sync::atomic::AtomicBool,
    }

    impl crate::testing::FaultInjector for AppendDuringSync {
        fn before(&self, point: crate::testing::FaultPoint, path: &Path) -> std::io::Result<()> {
            use std::sync::atomic::Ordering;
            if point == crate::testing::FaultPoint::Fsync
                && path == self.parent
                && !self.done.swap(true, Ordering::SeqCst)
            {
                let mut log = std::fs::OpenOptions::new().append(true).open(path)?;
                std::io::Write::write_all(&mut log, &self.line)?;
            }
            Ok(())
        }
    }

    #[test]
    fn a_fork_copies_only_what_its_sync_of_the_parent_covers() {
        let dir = ok(tempfile::tempdir());
        let store = ok(Store::create(dir.path()));
        ok(store.create_session(&header("p"), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
        ok(writer.append(note("one"), None));
        ok(writer.append(note("two"), None));
        drop(writer);
        // The record of a third event, taken off the log again: what a
        // writer appends while the fork syncs.
        let log = store.session_path(&id("p"));
        let before = ok(std::fs::read(&log));
        let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
        ok(writer.append(note("three"), None));
        drop(writer);
        let after = ok(std::fs::read(&log));
        ok(std::fs::write(&log, &before));
        drop(store);
        let jsonl = ok(crate::JsonlStore::open(dir.path()));
        let injector = std::sync::Arc::new(AppendDuringSync {
            parent: log.clone(),
            line: after[before.len()..].to_vec(),
            done: std::sync::atomic::AtomicBool::new(false),
        });
        let store = Store::Jsonl(jsonl.with_io(Io::with_faults(injector.clone())));
        let header = fork_of(&store, "c");
        assert!(injector.done.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            header.seed_length, 2,
            "the event appended during the sync is not copied"
        );
        let child = ok(store.snapshot(&id("c")));
        assert_eq!(child.events.len(), 2 + 1, "the seed and the child's prompt");
        assert_eq!(
            ok(std::fs::read(&log)),
            after,
            "the parent keeps its third event"
        );
    }

    /// A seal's body without its `sig` member: `key` alone, a broken shape.
    fn without_sig(body: &str) -> String {
        let at = body.find(r#","sig":""#).unwrap_or(body.len());
        let end = body[at + 8..]
            .find('"')
            .map_or(body.len(), |end| at + 8 + end + 1);
        format!("{}{}", &body[..at], &body[end..])
    }

    #[test]
    fn a_sealed_parent_is_refused_as_a_whole_read_of_it_refuses_it() {
        // Each case: the damage, made with the CRC recomputed, so that
        // only the rules and the seals can find it.
        type Damage = fn(&Path);
        let cases: [(&str, Damage); 9] = [
            (
                "a seal's chain changed (its signature no longer verifies)",
                |log| break_seal(log, 802),
            ),
            ("a record before a seal changed", |log| {
                edit_record(log, 500, |body| body.replace("1-9", "1-X"))
            }),
            ("a seal's span changed", |log| {
                edit_record(log, 802, |body| {
                    body.replace(r#""throughSeq":801"#, r#""throughSeq":800"#)
                })
            }),
            ("a seal's signature changed alone", |log| {
                edit_record(log, 1_203, |body| {
                    let at = body.find(r#""sig":""#).unwrap_or(0) + r#""sig":""#.len();
                    let flipped = if &body[at..=at] == "A" { "B" } else { "A" };
                    format!("{}{flipped}{}", &body[..at], &body[at + 1..])
                })
            }),
            ("a broken rule, then the seal after it", |log| {
                edit_record(log, 300, |body| {
                    let at = body.find(r#""type""#).unwrap_or(body.len());
                    format!(
                        r#"{}"type":"turn/end","data":{{"turnId":"none"}}"#,
                        &body[..at]
                    )
                })
            }),
            ("two seals broken", |log| {
                break_seal(log, 802);
                break_seal(log, 401);
            }),
            // The first seal's chain is checked behind the fold, which
            // meets the second, broken, before it hears of the first.
            (
                "a record before a seal changed, and a later seal broken",
                |log| {
                    edit_record(log, 100, |body| body.replace("0-99", "0-9X"));
                    break_seal(log, 802);
                },
            ),
            // A seal whose shape is broken still has its chain checked:
            // the change before it is a seal failure, not hidden behind
            // the shape; the same seal over no change is a broken shape.
            (
                "a record before a seal changed, that seal's sig removed",
                |log| {
                    edit_record(log, 500, |body| body.replace("1-9", "1-X"));
                    edit_record(log, 802, without_sig);
                },
            ),
            ("a seal's sig removed alone", |log| {
                edit_record(log, 802, without_sig)
            }),
        ];
        let key = sessionlog_schema::SealSecretKey::from_seed([7; 32]);
        for (case, damage) in cases {
            for with_snapshot in [true, false] {
                let folder = ok(tempfile::tempdir());
                let store = ok(Store::create(folder.path()));
                ok(store.create_session(&header("p"), &[], Durability::Fsync));
                let mut writer = ok(store.open_writer(&id("p"), WriterOptions::default()));
                for run in 0..3 {
                    let notes = (0..400).map(|n| note(&format!("{run}-{n}"))).collect();
                    ok(writer.append_batch(notes, None));
                    ok(writer.seal(Some(&key), None));
                }
                drop(writer);
                let parent_log = store.session_path(&id("p"));
                if !with_snapshot {
                    ok(std::fs::remove_file(crate::jsonl::state_snapshot_path(
                        &parent_log,
                    )));
                }
                damage(&parent_log);
                // What a whole read finds first: the first seal that
                // fails, else the first broken rule.
                let (_, violations) = ok(store.snapshot(&id("p"))).fold();
                let expected = violations
                    .iter()
                    .find(|violation| violation.kind == ViolationKind::Seal)
                    .or(violations.first())
                    .unwrap_or_else(|| panic!("{case}: the damage breaks nothing"));
                let refused = store.fork(&id("p"), &id("c"), None, &Defaults::default());
                match refused {
                    Err(StoreError::Rule { violation, .. }) => assert_eq!(
                        (violation.seq, violation.kind, &violation.message),
                        (expected.seq, expected.kind, &expected.message),
                        "{case}, with snapshot {with_snapshot}"
                    ),
                    other => panic!("{case}, with snapshot {with_snapshot}: {other:?}"),
                }
                assert!(!store.session_path(&id("c")).exists());
            }
        }
    }
}
