//! The events of one database session, read page by page (bounded memory)
//! and checked as they come, the same way for every engine: an engine only
//! says how to fetch a page of rows ([`RowPages`]).
//!
//! A fork by reference keeps no rows for its seeded events: events
//! 1..=seedLength are the first rows of the session its row names as
//! `seed_source` (which may itself be a fork by reference). The reader
//! resolves that chain once, into segments of seqs and the session whose
//! rows hold them, and reads each segment in turn through one `SeqCheck`:
//! a referenced row is checked against the CRC of its owner's id and
//! given back as the same record (a record carries no session id; the CRC
//! of the session read is computed when it is written out), so every
//! reader sees exactly the records a copied child holds. A referenced row
//! that is missing, damaged, or an owner whose row is gone or records too
//! few events, is corruption of the session read, named with its id and
//! seq.

use std::collections::{HashSet, VecDeque};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::thread;

use sessionlog_schema::{decode_checked_body, record_crc, EventRecord, SessionHeader, SessionId};

use super::checks::{check_no_rows_past, corrupt_session, EventRow, RowPage, SeqCheck};
use super::{decode_header_row, HeaderRow};
use crate::{EventBody, StoreError};

/// How many sessions a chain of forks by reference may run through before
/// the reader refuses it as damage. A loop, which only damage can make (a
/// fork refers to a session that existed before it), is refused where it
/// closes.
const MAX_REFERENCE_DEPTH: usize = 100_000;

/// How an engine fetches a session's rows.
pub(crate) trait RowPages: Send {
    /// Up to one page of session `id`'s rows from seq `from` through seq
    /// `through`, in seq order, into `page` (emptied first). A read that
    /// fails partway leaves in `page` the rows it read before the failure,
    /// which the caller gives out (whole units) before the error.
    fn rows(
        &mut self,
        id: &SessionId,
        from: u64,
        through: u64,
        page: &mut RowPage,
    ) -> Result<(), StoreError>;

    /// The last seq session `id`'s row records (`None`: the row is gone)
    /// and the lowest and highest seqs of its rows, read in one statement
    /// (so one snapshot of the database).
    fn bounds(&mut self, id: &SessionId) -> Result<RowBounds, StoreError>;

    /// Session `id`'s row (`None`: there is none).
    fn session_row(&mut self, id: &SessionId) -> Result<Option<HeaderRow>, StoreError>;

    /// Up to one page of session `id`'s rows from seq `from` on, with no
    /// upper bound, into `page` (emptied first), when they are read in the
    /// same snapshot of the database as the session row this reader was
    /// made from (one read transaction held for both), and then whether
    /// they are every row from `from` on (the page was not full); `None`
    /// otherwise, and then the caller reads bounded pages and
    /// [`bounds`](Self::bounds). In one snapshot, the rows read to their
    /// end say all that `bounds` would: the last seq is the one already
    /// read, and a row past it is in the page. A read that fails partway
    /// leaves in `page` the rows it read before the failure, as
    /// [`rows`](Self::rows) does.
    fn rows_to_end(
        &mut self,
        _id: &SessionId,
        _from: u64,
        _page: &mut RowPage,
    ) -> Result<Option<bool>, StoreError> {
        Ok(None)
    }
}

/// How far the rows of the session read are known, from a read to their
/// end in the snapshot of its session row ([`RowPages::rows_to_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowsEnd {
    /// Not read to the end yet (or not in that snapshot).
    Unknown,
    /// Every row was read, and none is past the last seq the session row
    /// records: the end needs no more statements.
    Read,
    /// A row past the last seq the session row records: the end is
    /// checked with [`RowPages::bounds`], which names the highest.
    PastLastSeq,
}

/// What [`RowPages::bounds`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowBounds {
    /// The last seq the session row records (`None`: the row is gone).
    pub(crate) recorded: Option<i64>,
    /// The lowest seq of the session's rows.
    pub(crate) min: Option<i64>,
    /// The highest seq of the session's rows.
    pub(crate) max: Option<i64>,
}

/// Seqs through `through` (from the end of the segment before) are rows
/// of `owner`.
#[derive(Debug)]
struct Segment {
    owner: SessionId,
    through: u64,
}

/// The events of one session read page by page, checked as they come
/// (contiguous seqs, intact bodies, finished batches), through the last
/// seq its row recorded when the read began: events appended meanwhile are
/// left to the next read, and the rows must reach that seq.
pub struct SqlEvents {
    /// How the engine fetches rows, shared with the thread of `ahead`.
    pages: Arc<Mutex<dyn RowPages>>,
    /// The pages after the one being checked, read on a thread of their
    /// own, when a segment's rows fill more than one page.
    ahead: Option<ReadAhead>,
    /// The database, as messages name it.
    store: PathBuf,
    id: SessionId,
    seed_length: u64,
    /// The session whose rows hold events 1..=seed_length, for a fork by
    /// reference.
    seed_source: Option<SessionId>,
    /// Resolved on the first read.
    segments: Option<Vec<Segment>>,
    /// The header of `seed_source`, read as the segments were resolved.
    seed_parent: Option<SessionHeader>,
    recorded_last_seq: u64,
    next_seq: u64,
    batch_remaining: u64,
    /// The rows read last, kept from page to page.
    rows: RowPage,
    /// The session whose rows `rows` are, when not the session read (a
    /// fork by reference).
    rows_owner: Option<SessionId>,
    /// The rows of `rows` checked and not given out yet, for
    /// [`next_body`](Self::next_body).
    lent: Range<usize>,
    /// The records checked and not given out yet, for `next_event`.
    page: VecDeque<EventRecord>,
    rows_end: RowsEnd,
    finished: bool,
    /// Damage found in the page read last, given out once the whole units
    /// of rows before it are: a read stops where a read of a log file
    /// stops, after the events before the damage.
    damage: Option<StoreError>,
    /// The checked records of a batch that a page ended inside, held until
    /// the batch's last record is checked.
    carry: VecDeque<EventRecord>,
}

/// The buffers of a read of one session's rows, kept for the next read
/// on the same thread once it is done: a store-wide `verify` or `stats`
/// reads many small sessions one after the other, and each would
/// otherwise grow its buffers from nothing.
#[derive(Default)]
struct Buffers {
    rows: RowPage,
    records: VecDeque<EventRecord>,
}

/// Reads' buffers kept on a thread, at most.
const SPARE_BUFFERS: usize = 4;

/// A read's buffers larger than this (a page of large bodies) are freed,
/// not kept.
const SPARE_BYTES: usize = 256 * 1024;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Buffers>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Buffers {
    /// Buffers a read on this thread left, or new ones.
    fn take_spare() -> Buffers {
        SPARE
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Keeps `self`, emptied, for the next read on this thread, unless
    /// enough are kept or it is large.
    fn keep(mut self) {
        if self.rows.capacity_bytes() > SPARE_BYTES
            || self.records.capacity() * std::mem::size_of::<EventRecord>() > SPARE_BYTES
        {
            return;
        }
        self.rows.clear();
        self.records.clear();
        // A thread that is ending has no buffers to keep.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARE_BUFFERS {
                spare.push(self);
            }
        });
    }
}

impl Drop for SqlEvents {
    fn drop(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            // Its thread ends with the page it is reading; a panic there
            // has nothing left to spoil.
            let _ = ahead.stop();
        }
        Buffers {
            rows: std::mem::take(&mut self.rows),
            records: std::mem::take(&mut self.page),
        }
        .keep();
    }
}

impl std::fmt::Debug for SqlEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEvents")
            .field("store", &self.store)
            .field("session", &self.id)
            .field("next_seq", &self.next_seq)
            .finish()
    }
}

impl SqlEvents {
    /// The events of session `id` (whose header records `seed_length`,
    /// whose row records `recorded_last_seq` and, for a fork by reference,
    /// `seed_source`) from `from_seq` on.
    pub(crate) fn new(
        pages: Arc<Mutex<dyn RowPages>>,
        store: PathBuf,
        id: SessionId,
        seed_length: u64,
        seed_source: Option<SessionId>,
        recorded_last_seq: u64,
        from_seq: u64,
    ) -> SqlEvents {
        let spare = Buffers::take_spare();
        SqlEvents {
            pages,
            ahead: None,
            store,
            id,
            seed_length,
            seed_source,
            segments: None,
            seed_parent: None,
            recorded_last_seq,
            next_seq: from_seq.max(1),
            batch_remaining: 0,
            rows: spare.rows,
            rows_owner: None,
            lent: 0..0,
            page: spare.records,
            rows_end: RowsEnd::Unknown,
            finished: false,
            damage: None,
            carry: VecDeque::new(),
        }
    }

    /// The session being read.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// For a fork by reference whose seed the read reached: the header of
    /// the session whose rows its seed is (see
    /// [`SessionStream::seed_parent`](crate::SessionStream::seed_parent)).
    pub fn seed_parent(&self) -> Option<&SessionHeader> {
        self.seed_parent.as_ref()
    }

    fn next_event(&mut self) -> Result<Option<EventRecord>, StoreError> {
        loop {
            if let Some(record) = self.page.pop_front() {
                return Ok(Some(record));
            }
            if let Some(index) = self.lent.next() {
                return self.checked_record(index).map(Some);
            }
            if let Some(damage) = self.damage.take() {
                return Err(damage);
            }
            if self.finished {
                return Ok(None);
            }
            self.read_page(false)?;
        }
    }

    /// The body of the next event, checked as `next_event` checks it, lent
    /// from the page read until the next read (no record is made); `None`
    /// at the end.
    pub fn next_body(&mut self) -> Result<Option<EventBody<'_>>, StoreError> {
        loop {
            if let Some(record) = self.page.pop_front() {
                return Ok(Some(EventBody::Record(record)));
            }
            if !self.lent.is_empty() {
                break;
            }
            if let Some(damage) = self.damage.take() {
                return Err(damage);
            }
            if self.finished {
                break;
            }
            if let Err(error) = self.read_page(true) {
                self.finished = true;
                self.lent = 0..0;
                return Err(error);
            }
        }
        let Some(index) = self.lent.next() else {
            return Ok(None);
        };
        // Checked already: a body that is not UTF-8 did not pass.
        let row = &self.rows.rows[index];
        std::str::from_utf8(self.rows.body(row))
            .map(|body| Some(EventBody::Lent(body)))
            .map_err(|error| self.not_utf8(row, &error))
    }

    /// The finding on `row` of the page read last, whose body is not UTF-8.
    fn not_utf8(&self, row: &EventRow, error: &std::str::Utf8Error) -> StoreError {
        corrupt_session(
            &self.store,
            &self.id,
            row.seq.unsigned_abs(),
            format!("the body is not UTF-8: {error}"),
        )
    }

    /// The record of row `index` of the page read last, whose body was
    /// checked for [`next_body`](Self::next_body) and is taken as a record
    /// after all: it decodes as it did when it was checked.
    fn checked_record(&self, index: usize) -> Result<EventRecord, StoreError> {
        let owner = self.rows_owner.as_ref().unwrap_or(&self.id);
        let row = &self.rows.rows[index];
        let body = self.rows.body(row);
        let crc = record_crc(owner, body);
        let body = std::str::from_utf8(body).map_err(|error| self.not_utf8(row, &error))?;
        decode_checked_body(owner, body.to_owned(), crc).map_err(|error| {
            corrupt_session(
                &self.store,
                &self.id,
                row.seq.unsigned_abs(),
                format!("the body does not decode: {error}"),
            )
        })
    }

    /// Reads and checks the next page of rows: into records in `page`, or
    /// when `lend`, into bodies lent from `rows`. Sets `finished` at the
    /// end. A read that fails partway still gives out the whole units of
    /// the rows it read before failing, then the failure, as damage met in
    /// a row is.
    fn read_page(&mut self, lend: bool) -> Result<(), StoreError> {
        if self.segments.is_none() {
            self.segments = Some(self.resolve()?);
        }
        let segment = self.segments.as_ref().and_then(|segments| {
            segments
                .iter()
                .find(|segment| self.next_seq <= segment.through)
        });
        self.rows.clear();
        self.rows_owner = None;
        // A failure of the engine's read, met after the rows it left in
        // `rows`: given out after their whole units.
        let mut failure = None;
        match segment {
            None => {}
            Some(_) if self.rows_end == RowsEnd::Read => {}
            Some(segment) => {
                let through = segment.through;
                let owner = (segment.owner != self.id).then(|| segment.owner.clone());
                // A session of its own rows only, in a held read: its rows
                // to their end, and no statement for the end. (A read ahead
                // runs only where the engine said no to this.)
                let to_end = match (&owner, &self.seed_source, self.rows_end, &self.ahead) {
                    (None, None, RowsEnd::Unknown, None) => {
                        lock(&self.pages).rows_to_end(&self.id, self.next_seq, &mut self.rows)
                    }
                    _ => Ok(None),
                };
                let read = match to_end {
                    // Its own: `read_rows` takes all of `self`.
                    Ok(None) => {
                        let reading = segment.owner.clone();
                        self.read_rows(&reading, through).map(|()| None)
                    }
                    other => other,
                };
                let whole = read.unwrap_or_else(|error| {
                    failure = Some(error);
                    None
                });
                // Rows read to their end may run past the last seq.
                let through = i64::try_from(through).unwrap_or(i64::MAX);
                if let Some(first_past) = self.rows.rows.iter().position(|row| row.seq > through) {
                    self.rows.rows.truncate(first_past);
                    self.rows_end = RowsEnd::PastLastSeq;
                } else if whole == Some(true) {
                    self.rows_end = RowsEnd::Read;
                }
                if self.rows.rows.is_empty() && failure.is_none() {
                    if let Some(owner) = &owner {
                        return Err(corrupt_session(
                            &self.store,
                            &self.id,
                            self.next_seq,
                            format!(
                                "the row of event {} is missing from session {owner}, whose \
                                 rows this fork refers to",
                                self.next_seq
                            ),
                        ));
                    }
                }
                self.rows_owner = owner;
            }
        }
        let bounds = match (self.rows.rows.is_empty(), self.rows_end) {
            (false, _) => None,
            // The read failed: its failure is what ends the session.
            _ if failure.is_some() => None,
            // Read in the snapshot of the session row: its last seq, and
            // no row past it.
            (true, RowsEnd::Read) => Some(RowBounds {
                recorded: Some(i64::try_from(self.recorded_last_seq).unwrap_or(i64::MAX)),
                min: None,
                max: None,
            }),
            (true, _) => Some(lock(&self.pages).bounds(&self.id)?),
        };
        let store = &self.store;
        let mut check = SeqCheck::resume(store, &self.id, self.next_seq, self.batch_remaining);
        let owner = self.rows_owner.as_ref();
        // The rows that end whole units (a lone event, a batch with all its
        // records): what is given out before damage met in the page.
        let mut whole = 0;
        let mut damage = None;
        for (index, row) in self.rows.rows.iter().enumerate() {
            let checked = match lend {
                true => check.check_from(&self.rows, row, owner),
                false => check
                    .accept_from(&self.rows, row, owner)
                    .map(|record| self.page.push_back(record)),
            };
            if let Err(found) = checked {
                damage = Some(found);
                break;
            }
            if check.batch_remaining == 0 {
                whole = index + 1;
            }
        }
        // Damage in a row read comes before the failure to read the next.
        if let Some(damage) = damage.or(failure) {
            self.page.truncate(whole);
            self.lent = 0..if lend { whole } else { 0 };
            // A batch carried from the pages before is given out only if
            // it ended before the damage.
            match whole {
                0 => self.carry.clear(),
                _ => release(&mut self.carry, &mut self.page),
            }
            self.damage = Some(damage);
            self.finished = true;
            return Ok(());
        }
        // A batch still open at the page's end is held back, checked, until
        // its last record is: a read gives out whole units only, as a read
        // of a log file does, wherever the page boundary falls.
        if whole > 0 {
            release(&mut self.carry, &mut self.page);
        }
        if lend {
            self.lent = 0..whole;
            for index in whole..self.rows.rows.len() {
                let record = self.checked_record(index)?;
                self.carry.push_back(record);
            }
        } else {
            let held = self.page.len() - (self.rows.rows.len() - whole);
            self.carry.extend(self.page.drain(held..));
        }
        if let Some(RowBounds {
            recorded,
            min: min_row_seq,
            max: max_row_seq,
        }) = bounds
        {
            // At the end: the row's last seq, read again with the highest
            // row in one statement, must cover every row.
            let Some(recorded) = recorded else {
                return Err(corrupt_session(
                    store,
                    &self.id,
                    0,
                    "the session row is gone".to_owned(),
                ));
            };
            let recorded = u64::try_from(recorded).map_err(|_| {
                corrupt_session(
                    store,
                    &self.id,
                    0,
                    format!("the session row records last seq {recorded}"),
                )
            })?;
            check_no_rows_past(store, &self.id, recorded, max_row_seq)?;
            if let Some(min) = min_row_seq.filter(|min| *min < 1) {
                // Nothing writes one: a read from the start sees such a row
                // first, and this finds it in a session with no rows to read.
                return Err(corrupt_session(
                    store,
                    &self.id,
                    0,
                    format!("a row at seq {min}: seqs start at 1"),
                ));
            }
            if let (Some(source), Some(min)) = (&self.seed_source, min_row_seq) {
                if min <= i64::try_from(self.seed_length).unwrap_or(i64::MAX) {
                    return Err(corrupt_session(
                        store,
                        &self.id,
                        min.unsigned_abs(),
                        format!(
                            "a row at seq {min}, among the events 1..={} that are the rows of \
                             session {source}",
                            self.seed_length
                        ),
                    ));
                }
            }
            check.finish(self.seed_length, self.recorded_last_seq)?;
        }
        self.next_seq = check.next_seq;
        self.batch_remaining = check.batch_remaining;
        if self.rows.rows.is_empty() {
            self.finished = true;
        }
        Ok(())
    }
}

impl SqlEvents {
    /// One page of `owner`'s rows from `next_seq` through `through`, into
    /// `rows`: the page read ahead for that place when there is one, else
    /// read here. After a failure, `rows` holds the rows read before it. When the segment goes on past a page read here, the
    /// pages after it are read ahead, on a thread of their own, while this
    /// one is checked.
    fn read_rows(&mut self, owner: &SessionId, through: u64) -> Result<(), StoreError> {
        let from = self.next_seq;
        if let Some(mut ahead) = self.ahead.take() {
            if ahead.reads(owner, from, through) {
                if let Some(read) = ahead.next_page(&mut self.rows) {
                    self.ahead = Some(ahead);
                    return read;
                }
            }
            // Another place, or its thread ended before this page.
            if let Err(panic) = ahead.stop() {
                std::panic::resume_unwind(panic);
            }
        }
        lock(&self.pages).rows(owner, from, through, &mut self.rows)?;
        if let Some(next) = next_page_from(&self.rows, from).filter(|next| *next <= through) {
            self.ahead = ReadAhead::start(Arc::clone(&self.pages), owner.clone(), next, through);
        }
        Ok(())
    }
}

/// Pages read ahead on a thread with a page being checked: at most this
/// many wait to be taken (and one more is being read).
const PAGES_AHEAD: usize = 1;

/// The pages of one segment's rows (`owner`'s, through seq `through`)
/// read on a thread of their own, in order, while the caller checks the
/// page before: a long session's read then costs the engine's reads or
/// the checks, whichever is longer, rather than both. Each page is read
/// from the seq after the last row of the page before, as the caller
/// would read it once that page is checked (the checks require every seq
/// in turn); the caller takes a page only for the place it would read,
/// and reads any other itself. The thread ends after an empty page, an
/// error, or a page that reaches `through`, or when the caller stops
/// taking pages.
struct ReadAhead {
    owner: SessionId,
    through: u64,
    /// Where the next page to be taken starts.
    next_from: u64,
    /// Each page with how its read ended: a failed read's page holds the
    /// rows read before the failure.
    pages: mpsc::Receiver<(RowPage, Result<(), StoreError>)>,
    /// Pages taken and done with, to be filled again.
    spare: mpsc::Sender<RowPage>,
    thread: thread::JoinHandle<()>,
}

impl ReadAhead {
    /// Reads `owner`'s rows from `from` through `through` ahead, page by
    /// page; `None` when no thread can be had (a limit on threads, say):
    /// the caller then reads each page itself.
    fn start(
        engine: Arc<Mutex<dyn RowPages>>,
        owner: SessionId,
        from: u64,
        through: u64,
    ) -> Option<ReadAhead> {
        let (sender, pages) = mpsc::sync_channel(PAGES_AHEAD);
        let (spare, spares) = mpsc::channel::<RowPage>();
        let reading = owner.clone();
        let thread = thread::Builder::new()
            .name("sessionlog-rows".to_owned())
            .spawn(move || {
                let mut from = from;
                loop {
                    let mut page = spares.try_recv().unwrap_or_default();
                    let read = lock(&engine).rows(&reading, from, through, &mut page);
                    let next = match &read {
                        Ok(()) => next_page_from(&page, from).filter(|next| *next <= through),
                        Err(_) => None,
                    };
                    // The caller stopped taking pages: nothing more to read.
                    if sender.send((page, read)).is_err() {
                        return;
                    }
                    match next {
                        Some(next) => from = next,
                        None => return,
                    }
                }
            })
            .ok()?;
        Some(ReadAhead {
            owner,
            through,
            next_from: from,
            pages,
            spare,
            thread,
        })
    }

    /// Whether the next page to be taken is the one of `owner`'s rows from
    /// `from` through `through`.
    fn reads(&self, owner: &SessionId, from: u64, through: u64) -> bool {
        (&self.owner, self.next_from, self.through) == (owner, from, through)
    }

    /// The next page, put into `rows` (whose page goes back to be filled
    /// again), and how its read ended (the thread ends after a failure);
    /// `None` when the thread ended before it.
    fn next_page(&mut self, rows: &mut RowPage) -> Option<Result<(), StoreError>> {
        let (mut page, read) = self.pages.recv().ok()?;
        std::mem::swap(rows, &mut page);
        page.clear();
        // The thread may be done: the page is then freed here.
        let _ = self.spare.send(page);
        if let Some(next) = next_page_from(rows, self.next_from) {
            self.next_from = next;
        }
        Some(read)
    }

    /// Stops reading ahead: the thread ends after the page it is reading,
    /// and is waited for (a panic there comes back here).
    fn stop(self) -> thread::Result<()> {
        let ReadAhead {
            pages,
            spare,
            thread,
            ..
        } = self;
        drop((pages, spare));
        thread.join()
    }
}

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead")
            .field("owner", &self.owner)
            .field("next_from", &self.next_from)
            .field("through", &self.through)
            .finish()
    }
}

/// Where the page after `page` (read from seq `from`) starts: the seq
/// after its last row; `None` for an empty page, or one whose last seq
/// does not move the read on (only damage gives one, which the checks of
/// that page then report).
fn next_page_from(page: &RowPage, from: u64) -> Option<u64> {
    let last = page.rows.last()?.seq;
    u64::try_from(last)
        .ok()?
        .checked_add(1)
        .filter(|next| *next > from)
}

/// The engine's rows, locked (a panic that poisoned the lock left nothing
/// half done in them: each call is a statement of its own).
fn lock(pages: &Mutex<dyn RowPages>) -> MutexGuard<'_, dyn RowPages + 'static> {
    pages.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqlEvents {
    /// The segments of the session: for a fork by reference, its own rows
    /// after its seed, the rows of the session it refers to before that,
    /// and so on up the chain, in seq order.
    fn resolve(&mut self) -> Result<Vec<Segment>, StoreError> {
        let mut segments = vec![Segment {
            owner: self.id.clone(),
            through: self.recorded_last_seq,
        }];
        let mut source = self.seed_source.clone();
        let mut through = self.seed_length.min(self.recorded_last_seq);
        let mut read = HashSet::from([self.id.clone()]);
        while let Some(owner) = source {
            let corrupt = |reason: String| {
                corrupt_session(
                    &self.store,
                    &self.id,
                    1,
                    format!(
                        "events 1..={through} are the rows of session {owner}, which this fork \
                         refers to, but {reason}"
                    ),
                )
            };
            if !read.insert(owner.clone()) {
                let referring = segments.last().map_or(&self.id, |segment| &segment.owner);
                return Err(corrupt_session(
                    &self.store,
                    &self.id,
                    1,
                    format!(
                        "its seed is read through forks by reference, and session {referring} \
                         refers back to session {owner}, read before it: a loop, which only \
                         damage makes"
                    ),
                ));
            }
            if segments.len() > MAX_REFERENCE_DEPTH {
                return Err(corrupt(format!(
                    "the chain of forks by reference runs through more than \
                     {MAX_REFERENCE_DEPTH} sessions"
                )));
            }
            let Some(mut row) = lock(&self.pages).session_row(&owner)? else {
                return Err(corrupt("it has no session row".to_owned()));
            };
            let decoded = decode_header_row(&self.store, &owner, &mut row)
                .map_err(|error| corrupt(format!("its row is damaged: {error}")))?;
            if row.last_seq.unsigned_abs() < through {
                return Err(corrupt(format!(
                    "its row records only {} events",
                    row.last_seq
                )));
            }
            source = row
                .seed_source
                .as_deref()
                .map(SessionId::parse)
                .transpose()
                .map_err(|error| {
                    corrupt(format!("its row names an invalid seed source ({error})"))
                })?;
            let next_through = decoded.header.seed_length.min(through);
            if self.seed_parent.is_none() {
                self.seed_parent = Some(decoded.header);
            }
            segments.push(Segment { owner, through });
            through = next_through;
            if through == 0 {
                break;
            }
        }
        segments.reverse();
        Ok(segments)
    }
}

/// Gives out the records `carry` holds from the pages before, ahead of
/// what the page just read put in `page`.
fn release(carry: &mut VecDeque<EventRecord>, page: &mut VecDeque<EventRecord>) {
    while let Some(record) = carry.pop_back() {
        page.push_front(record);
    }
}

impl Iterator for SqlEvents {
    type Item = Result<EventRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event() {
            Ok(record) => record.map(Ok),
            Err(error) => {
                self.finished = true;
                self.page.clear();
                self.lent = 0..0;
                self.damage = None;
                self.carry.clear();
                Some(Err(error))
            }
        }
    }
}
