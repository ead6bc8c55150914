//! `LogReader`: a streaming reader of one JSONL log in constant memory, and
//! `Snapshot`, the whole good prefix in memory.
//!
//! Lines are split with memchr over a fixed buffer; a line longer than the
//! record limit is skipped, not buffered, so memory stays bounded whatever
//! the file holds. Classification (good prefix, torn tail, corruption) is the
//! schema's `LogScanner`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sessionlog_projections::{Anchor, Defaults, Projection, SessionState, Violation};
use sessionlog_schema::{
    BodyRoom, ChainValue, Corruption, EventRecord, EventView, HeaderVocabularyError, LogScanner,
    Position, ScanSummary, SessionHeader, SessionId, ShapeError, TornTail, MAX_RECORD_BYTES,
};

use crate::fold::Folded;
use crate::{Refusal, StoreError};

/// The buffer of a whole read of a log.
pub(crate) const READ_BUFFER_BYTES: usize = 256 * 1024;

/// The buffer of a reader that reads a log's header to resume it from a
/// state snapshot: enough for the header, not the 256 KiB of events a
/// whole read would take in at once (a resume reads only the tail).
pub(crate) const HEADER_BUFFER_BYTES: usize = 16 * 1024;

/// Streams the events of one log, in order, stopping at the end of its good
/// prefix. Corruption is an error when it is met (or, for damage, when the
/// intact record after it is met).
#[derive(Debug)]
pub struct LogReader<R> {
    lines: LineReader<R>,
    path: PathBuf,
    scanner: LogScanner,
    ready: Vec<EventRecord>,
    queue: VecDeque<EventRecord>,
    exhausted: bool,
    /// Bodies of records given back ([`SessionStream::give_back`]), room
    /// for the bodies of records to come.
    spare_bodies: Vec<String>,
    /// The end of the good prefix where corruption was met and the log
    /// read again from there ([`LogReader::read_again_once`]).
    read_again_at: Option<u64>,
}

/// How many bodies given back a reader keeps: a batch of a fold on its
/// own thread (`fold.rs`).
const SPARE_BODIES: usize = 1024;

/// The largest body given back that a reader keeps as room for others. A
/// body kept keeps its room, so every record in flight between the two
/// threads of a fold (some five batches) could come to hold this much:
/// at 4 KiB a `project` of a log of 430-byte records peaked at 31.6 MiB,
/// at 1 KiB at 16.8 MiB (`tests/integration/memory.rs`), most records of a
/// session being well under it.
const SPARE_BODY_BYTES: usize = 1024;

/// The good prefix of a log, all in memory.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The header.
    pub header: SessionHeader,
    /// The header record's body as stored (its bytes before `,"crc":`),
    /// whatever its member order or spacing.
    pub header_body: String,
    /// Out-of-vocabulary header fields (rule violations at seq 0).
    pub header_vocabulary_errors: Vec<HeaderVocabularyError>,
    /// Every event of the good prefix.
    pub events: Vec<EventRecord>,
    /// The torn tail after it, if any.
    pub torn_tail: Option<TornTail>,
}

/// An event of a folding read and what folding it returned.
#[derive(Debug)]
pub struct FoldedEvent {
    /// The event.
    pub record: EventRecord,
    /// What [`SessionState::apply`] returned for it (on a violation the
    /// state only advanced its seq).
    pub folded: Result<(), Violation>,
}

/// The error of `corruption` found in the log at `path`.
fn corrupt_in(path: &Path) -> impl Fn(Corruption) -> StoreError + '_ {
    |corruption| StoreError::Corrupt {
        path: path.to_owned(),
        corruption,
    }
}

/// What [`LogReader::next_step`] found.
enum Step {
    /// A record already queued.
    Queued(EventRecord),
    /// A line within the record limit, in the line buffer.
    Line { offset: u64, terminated: bool },
    /// The end of the file.
    End,
}

/// A record a stream gave before proving that its `data` is JSON
/// ([`SessionStream::next_event_unproven`]): where its line is, and its
/// seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unproven {
    /// Its line.
    pub position: Position,
    /// Its seq.
    pub seq: u64,
}

/// A source that a [`LogReader`] can read again from a point it has read
/// past (a file, a buffer in memory): what lets it leave the proof of each
/// record's `data` to a fold on another thread, and read the log again
/// from a record that proof refuses.
pub trait Rewind {
    /// Whether [`rewind_by`](Self::rewind_by) can move back.
    fn can_rewind(&self) -> bool;
    /// Moves back by `bytes`, which were read from it.
    fn rewind_by(&mut self, bytes: u64) -> std::io::Result<()>;
}

impl<R: Read + Seek> Rewind for BufReader<R> {
    fn can_rewind(&self) -> bool {
        true
    }

    fn rewind_by(&mut self, bytes: u64) -> std::io::Result<()> {
        let back = i64::try_from(bytes).map_err(std::io::Error::other)?;
        // Within the buffer, the buffer is kept.
        self.seek_relative(-back)
    }
}

impl<T: AsRef<[u8]>> Rewind for Cursor<T> {
    fn can_rewind(&self) -> bool {
        true
    }

    fn rewind_by(&mut self, bytes: u64) -> std::io::Result<()> {
        let position = self.position().checked_sub(bytes).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "before the start")
        })?;
        self.set_position(position);
        Ok(())
    }
}

/// A buffered source that can show what it holds buffered without
/// reading: what lets a [`LineReader`] lend a line that lies whole in that
/// buffer instead of copying it out.
pub trait Lend: BufRead {
    /// The bytes buffered and not yet consumed; empty when none are.
    fn buffered(&self) -> &[u8];

    /// The text that [`buffered`](Self::buffered) lies in, which records
    /// may share, and where in it those bytes start; `None` when the
    /// buffer is bytes only, as a `BufReader`'s is.
    fn shared(&self) -> Option<(&Arc<String>, usize)> {
        None
    }
}

impl<R: Read> Lend for BufReader<R> {
    fn buffered(&self) -> &[u8] {
        self.buffer()
    }
}

impl<T: AsRef<[u8]>> Lend for Cursor<T> {
    fn buffered(&self) -> &[u8] {
        let bytes = self.get_ref().as_ref();
        let at = usize::try_from(self.position()).map_or(bytes.len(), |at| at.min(bytes.len()));
        &bytes[at..]
    }
}

/// Splits a log into lines with their byte offsets, in bounded memory: a
/// line longer than the record limit is skipped, not buffered, and reported
/// by its length only. Every reader of a log file splits it with this.
///
/// A line that lies whole in the source's buffer, as most do, is lent
/// from there (the source consumes it at the next read); only one that
/// spans two fills of the buffer is copied into a line of its own.
#[derive(Debug)]
pub struct LineReader<R> {
    source: R,
    offset: u64,
    line: Vec<u8>,
    /// The length of the last line read when it is lent from the source's
    /// buffer, where it and its `\n` are not yet consumed.
    lent: Option<usize>,
    /// The bytes of a line taken from the source before a read failed
    /// part-way through it: no line can be read after them, and a move
    /// back counts them.
    unfinished: u64,
}

/// One line as [`LineReader`] read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line within the record limit; its bytes are
    /// [`LineReader::line`].
    Complete {
        /// Whether a `\n` ended it.
        terminated: bool,
    },
    /// A line longer than the record limit, skipped.
    Oversized {
        /// Its length in bytes, without the `\n`.
        len: u64,
        /// Whether a `\n` ended it.
        terminated: bool,
    },
}

impl LogReader<BufReader<File>> {
    /// Opens `path` and reads its header. With `expected_id`, the header must
    /// name that session. Symlinks are not followed.
    pub fn open(path: &Path, expected_id: Option<SessionId>) -> Result<Self, StoreError> {
        let file = open_log_for_reading(path)?;
        LogReader::new(
            BufReader::with_capacity(READ_BUFFER_BYTES, file),
            path,
            expected_id,
        )
    }
}

impl LogReader<BufReader<File>> {
    /// The file it reads.
    pub(crate) fn file(&self) -> &File {
        self.lines.source.get_ref()
    }

    /// This reader, which has read only the header, read again from the
    /// start of its file with the buffer of a whole read: what a resume
    /// that found no state snapshot to resume from folds the log with.
    pub(crate) fn restarted(self, expected_id: Option<SessionId>) -> Result<Self, StoreError> {
        use std::io::{Seek, SeekFrom};
        let mut file = self.lines.source.into_inner();
        file.seek(SeekFrom::Start(0))
            .map_err(|source| StoreError::io("seek", &self.path, source))?;
        LogReader::new(
            BufReader::with_capacity(READ_BUFFER_BYTES, file),
            &self.path,
            expected_id,
        )
    }

    /// This reader, which has read only the header, moved on to byte
    /// `offset` of its file, as if it had read a good prefix of `lines`
    /// lines ending there whose next seq is `next_seq` (a state snapshot's
    /// anchor, checked by the caller): it reads and checks every line
    /// after, as it would have. Its buffer holds the `tail` bytes the file
    /// has after `offset` (a few pages for a short tail), up to the 256
    /// KiB of a whole read.
    pub(crate) fn resume_at(
        self,
        offset: u64,
        next_seq: u64,
        lines: u64,
        tail: u64,
        path: &Path,
    ) -> Result<Self, StoreError> {
        use std::io::{Seek, SeekFrom};
        let mut file = self.lines.source.into_inner();
        file.seek(SeekFrom::Start(offset))
            .map_err(|source| StoreError::io("seek", path, source))?;
        let capacity = usize::try_from(tail)
            .unwrap_or(READ_BUFFER_BYTES)
            .clamp(HEADER_BUFFER_BYTES, READ_BUFFER_BYTES);
        Ok(LogReader {
            lines: LineReader::starting_at(BufReader::with_capacity(capacity, file), offset),
            path: self.path,
            scanner: self.scanner.resumed_at(next_seq, offset, lines),
            ready: Vec::new(),
            queue: VecDeque::new(),
            exhausted: false,
            spare_bodies: Vec::new(),
            read_again_at: None,
        })
    }
}

impl<R: Lend> LogReader<R> {
    /// Reads the header from `source`; `path` is only used in messages.
    pub fn new(source: R, path: &Path, expected_id: Option<SessionId>) -> Result<Self, StoreError> {
        let mut reader = LogReader {
            lines: LineReader::new(source),
            path: path.to_owned(),
            scanner: LogScanner::new(expected_id),
            ready: Vec::new(),
            queue: VecDeque::new(),
            exhausted: false,
            spare_bodies: Vec::new(),
            read_again_at: None,
        };
        if !reader.push_next_line()? {
            return Err(StoreError::Corrupt {
                path: reader.path,
                corruption: Corruption {
                    position: Position { line: 1, offset: 0 },
                    reason: "the file is empty: line 1 must be the session header".into(),
                },
            });
        }
        Ok(reader)
    }

    /// The session header.
    pub fn header(&self) -> &SessionHeader {
        self.scanner
            .header()
            .unwrap_or_else(|| unreachable!("LogReader::new read the header"))
    }

    /// The header record's body as stored (its bytes before `,"crc":`).
    pub fn header_body(&self) -> &str {
        self.scanner.header_body()
    }

    /// The next event of the good prefix, `None` at its end.
    pub fn next_event(&mut self) -> Result<Option<EventRecord>, StoreError> {
        loop {
            if let Some(record) = self.queue.pop_front() {
                return Ok(Some(record));
            }
            if self.exhausted {
                return Ok(None);
            }
            self.push_next_line()?;
        }
    }

    /// The next event of the good prefix, folded into `state` as
    /// [`SessionState::apply`] folds it, with what `apply` returned; `None`
    /// at the end of the good prefix.
    ///
    /// A line is scanned once: the record is decoded together with the view
    /// the fold reads of its data ([`LogScanner::push_line_viewed`]), where
    /// `next_event` followed by `apply` scans the data twice. `state` must
    /// be the fold of every event this reader returned before.
    pub fn next_event_folded(
        &mut self,
        state: &mut SessionState,
    ) -> Result<Option<FoldedEvent>, StoreError> {
        self.next_event_folded_by(|record, view| match view {
            Some(view) => state.apply_viewed(record, view),
            None => state.apply(record),
        })
    }

    /// [`next_event_folded`](Self::next_event_folded), the chain left to
    /// the caller ([`SessionState::apply_viewed_unchained`]): `chain_before`
    /// is called before an own seal is checked, and must return the chain
    /// through every event this reader returned before.
    pub fn next_event_folded_unchained(
        &mut self,
        state: &mut SessionState,
        chain_before: impl FnOnce() -> ChainValue,
    ) -> Result<Option<FoldedEvent>, StoreError> {
        self.next_event_folded_by(|record, view| match view {
            Some(view) => state.apply_viewed_unchained(record, view, chain_before),
            None => {
                let view = EventView::parse(record.event_type(), record.data());
                state.apply_viewed_unchained(record, view, chain_before)
            }
        })
    }

    /// The next event of the good prefix, folded by `fold`, given the view
    /// of its data when the scan that decoded it read one.
    pub(crate) fn next_event_folded_by(
        &mut self,
        fold: impl FnOnce(
            &EventRecord,
            Option<Result<EventView<'_>, ShapeError>>,
        ) -> Result<(), Violation>,
    ) -> Result<Option<FoldedEvent>, StoreError> {
        loop {
            let (offset, terminated) = match self.next_step()? {
                Step::Queued(record) => {
                    let folded = fold(&record, None);
                    return Ok(Some(FoldedEvent { record, folded }));
                }
                Step::End => return Ok(None),
                Step::Line { offset, terminated } => (offset, terminated),
            };
            let view = self
                .scanner
                .push_line_viewed(self.lines.line(), terminated, offset, &mut self.ready)
                .map_err(corrupt_in(&self.path))?;
            match (view, self.ready.pop()) {
                (Some(view), Some(record)) => {
                    let folded = fold(&record, Some(view));
                    return Ok(Some(FoldedEvent { record, folded }));
                }
                (_, last) => self.queue.extend(self.ready.drain(..).chain(last)),
            }
        }
    }

    /// The next event of the good prefix, leaving the proof that its
    /// `data` is JSON to the caller ([`LogScanner::push_line_unproven`]):
    /// see [`SessionStream::next_event_unproven`]. A source that cannot be
    /// read again proves every record itself, as `next_event` does.
    pub fn next_event_unproven(
        &mut self,
    ) -> Result<Option<(EventRecord, Option<Unproven>)>, StoreError>
    where
        R: Rewind,
    {
        if !self.lines.source.can_rewind() {
            return Ok(self.next_event()?.map(|record| (record, None)));
        }
        loop {
            let (offset, terminated) = match self.next_step()? {
                Step::Queued(record) => return Ok(Some((record, None))),
                Step::End => return Ok(None),
                Step::Line { offset, terminated } => (offset, terminated),
            };
            let room = match self.lines.shared_line() {
                Some((text, start)) => BodyRoom::Shared(text, start),
                None => BodyRoom::Buffer(self.spare_bodies.pop().unwrap_or_default()),
            };
            let unproven = self
                .scanner
                .push_line_unproven(self.lines.line(), terminated, offset, &mut self.ready, room)
                .map_err(corrupt_in(&self.path))?;
            match (unproven, self.ready.pop()) {
                (Some(position), Some(record)) => {
                    let seq = record.seq();
                    return Ok(Some((record, Some(Unproven { position, seq }))));
                }
                (_, last) => self.queue.extend(self.ready.drain(..).chain(last)),
            }
        }
    }

    /// Reads the log again from the record `unproven` marks, as if the
    /// lines before it were the whole of what was read: its line is then
    /// read, checked and proved as `next_event` reads it.
    pub fn read_again(&mut self, unproven: Unproven) -> Result<(), StoreError>
    where
        R: Rewind,
    {
        let Unproven { position, seq } = unproven;
        self.lines
            .rewind_to(position.offset)
            .map_err(|source| StoreError::io("seek", &self.path, source))?;
        // The record joined the good prefix on its own: before it, no batch
        // was open and no damage seen, and the prefix ended at its line.
        self.scanner = self
            .scanner
            .resumed_at(seq, position.offset, position.line - 1);
        self.ready.clear();
        self.queue.clear();
        self.exhausted = false;
        Ok(())
    }

    /// Takes a record already queued, or reads lines up to the next one
    /// within the record limit (feeding an oversized one to the scanner):
    /// what every way of reading the next event starts with.
    fn next_step(&mut self) -> Result<Step, StoreError> {
        loop {
            if let Some(record) = self.queue.pop_front() {
                return Ok(Step::Queued(record));
            }
            if self.exhausted {
                return Ok(Step::End);
            }
            match self.read_next_line()? {
                Some((offset, Line::Complete { terminated })) => {
                    return Ok(Step::Line { offset, terminated })
                }
                Some((offset, line)) => self.push_line(line, offset)?,
                None => {}
            }
        }
    }

    /// Reads to the end and returns what the scan found (torn tail, header
    /// vocabulary errors, last seq). Events not yet taken are discarded.
    pub fn finish(mut self) -> Result<ScanSummary, StoreError> {
        while self.next_event()?.is_some() {}
        let path = self.path;
        self.scanner
            .finish()
            .map_err(|corruption| StoreError::Corrupt { path, corruption })
    }

    /// Reads one line and feeds it to the scanner; false at end of file.
    fn push_next_line(&mut self) -> Result<bool, StoreError> {
        match self.read_next_line()? {
            Some((offset, line)) => self.push_line(line, offset).map(|()| true),
            None => Ok(false),
        }
    }

    /// Reads the next line (its bytes in `self.lines.line()`) and its
    /// offset; `None` (and exhausted) at end of file.
    fn read_next_line(&mut self) -> Result<Option<(u64, Line)>, StoreError> {
        match self.lines.next_line() {
            Ok(Some(line)) => Ok(Some(line)),
            Ok(None) => {
                self.exhausted = true;
                Ok(None)
            }
            Err(source) => Err(StoreError::io("read", &self.path, source)),
        }
    }

    /// Feeds the line just read, which started at `offset`, to the scanner
    /// and queues the records that joined the good prefix.
    fn push_line(&mut self, line: Line, offset: u64) -> Result<(), StoreError> {
        let pushed = match line {
            Line::Complete { terminated } => {
                self.scanner
                    .push_line(self.lines.line(), terminated, offset, &mut self.ready)
            }
            Line::Oversized { len, terminated } => {
                self.scanner.push_oversized_line(len, terminated, offset)
            }
        };
        pushed.map_err(corrupt_in(&self.path))?;
        self.queue.extend(self.ready.drain(..));
        Ok(())
    }
}

impl LineReader<BufReader<File>> {
    /// Opens the log at `path` for reading, refusing to follow a symlink
    /// in its place.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let file = open_log_for_reading(path)?;
        Ok(LineReader::new(BufReader::with_capacity(
            READ_BUFFER_BYTES,
            file,
        )))
    }
}

impl<R: Lend> LineReader<R> {
    /// Lines of `source`, from its current position (offset 0).
    pub fn new(source: R) -> Self {
        LineReader::starting_at(source, 0)
    }

    /// Lines of `source`, which is positioned at byte `offset` of its file:
    /// offsets are given from there.
    pub fn starting_at(source: R, offset: u64) -> Self {
        LineReader {
            source,
            offset,
            line: Vec::new(),
            lent: None,
            unfinished: 0,
        }
    }

    /// Consumes the line lent last, if any: the source is then past every
    /// line read.
    fn settle(&mut self) {
        if let Some(len) = self.lent.take() {
            self.source.consume(len + 1);
        }
    }

    /// Moves back to `offset` (at most [`offset`](Self::offset)) of a
    /// source that can be read again: the next line is the one starting
    /// there. The source has given exactly the bytes of the lines read (a
    /// line is taken up to its `\n`), so moving back is relative to where
    /// it is, whatever offset it started at.
    pub fn rewind_to(&mut self, offset: u64) -> std::io::Result<()>
    where
        R: Rewind,
    {
        let back = self
            .offset
            .checked_sub(offset)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not read yet"))?;
        self.settle();
        self.source.rewind_by(back + self.unfinished)?;
        self.unfinished = 0;
        self.offset = offset;
        self.line.clear();
        Ok(())
    }

    /// The byte offset just after the last line read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes of the last [`Line::Complete`] read, without its `\n`.
    pub fn line(&self) -> &[u8] {
        match self.lent {
            Some(len) => &self.source.buffered()[..len],
            None => &self.line,
        }
    }

    /// The shared text that the last [`Line::Complete`] read lies in, and
    /// where it starts in it, when it was lent from such a text
    /// ([`Lend::shared`]).
    pub fn shared_line(&self) -> Option<(&Arc<String>, usize)> {
        self.lent.and(self.source.shared())
    }

    /// The next line and the byte offset it starts at; `None` at end of file.
    pub fn next_line(&mut self) -> std::io::Result<Option<(u64, Line)>> {
        let offset = self.offset;
        let Some(line) = self.read_line()? else {
            return Ok(None);
        };
        self.offset += match line {
            Line::Complete { terminated } => self.line().len() as u64 + u64::from(terminated),
            Line::Oversized { len, terminated } => len + u64::from(terminated),
        };
        Ok(Some((offset, line)))
    }

    fn read_line(&mut self) -> std::io::Result<Option<Line>> {
        self.settle();
        if self.unfinished > 0 {
            return Err(std::io::Error::other(format!(
                "a read failed {} bytes into the line at byte offset {}",
                self.unfinished, self.offset
            )));
        }
        self.line.clear();
        let mut skipped: Option<u64> = None;
        let mut first = true;
        // The bytes of this line taken from the source so far.
        let mut taken_so_far = 0u64;
        loop {
            // A read a signal interrupted before it read anything is read
            // again, as `read_exact` and `read_to_end` do.
            let buffer = match self.source.fill_buf() {
                Ok(buffer) => buffer,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    self.unfinished = taken_so_far;
                    return Err(error);
                }
            };
            if buffer.is_empty() {
                return Ok(match skipped {
                    Some(len) => Some(Line::Oversized {
                        len,
                        terminated: false,
                    }),
                    None if self.line.is_empty() => None,
                    None => Some(Line::Complete { terminated: false }),
                });
            }
            let (chunk, found) = match memchr::memchr(b'\n', buffer) {
                Some(index) => (&buffer[..index], true),
                None => (buffer, false),
            };
            let taken = chunk.len();
            if std::mem::take(&mut first) && found && taken <= MAX_RECORD_BYTES {
                self.lent = Some(taken);
                return Ok(Some(Line::Complete { terminated: true }));
            }
            match &mut skipped {
                Some(len) => *len += taken as u64,
                None if self.line.len() + taken > MAX_RECORD_BYTES => {
                    skipped = Some((self.line.len() + taken) as u64);
                    self.line.clear();
                }
                None => self.line.extend_from_slice(chunk),
            }
            self.source.consume(taken + usize::from(found));
            taken_so_far += taken as u64;
            if found {
                return Ok(Some(match skipped {
                    Some(len) => Line::Oversized {
                        len,
                        terminated: true,
                    },
                    None => Line::Complete { terminated: true },
                }));
            }
        }
    }
}

/// The body of an event (its bytes before `,"crc":`), as
/// [`SessionStream::next_body`] gives it.
#[derive(Debug)]
pub enum EventBody<'a> {
    /// Lent by the stream until its next read: the body of an event
    /// checked as [`SessionStream::next_event`] checks it, with no record
    /// made.
    Lent(&'a str),
    /// The event's record.
    Record(EventRecord),
}

impl EventBody<'_> {
    /// The body's text.
    pub fn as_str(&self) -> &str {
        match self {
            EventBody::Lent(body) => body,
            EventBody::Record(record) => record.body(),
        }
    }
}

/// The events of one session read in order, whatever the backend: the
/// header first, then the good prefix, then what was found at its end.
pub trait SessionStream: std::fmt::Debug {
    /// The session header.
    fn header(&self) -> &SessionHeader;
    /// Out-of-vocabulary header fields (rule violations at seq 0).
    fn header_vocabulary_errors(&self) -> &[HeaderVocabularyError];
    /// The header record's body as stored (its bytes before `,"crc":`),
    /// which `export` prints as it is.
    fn header_body(&self) -> &str;
    /// The next event of the good prefix, `None` at its end.
    fn next_event(&mut self) -> Result<Option<EventRecord>, StoreError>;
    /// For a fork by reference in a database, once the read has reached
    /// its seed: the header of the session whose first `seedLength` rows
    /// its seed is, against whose log the child's header can be checked
    /// (`verify` does). `None` for any other session.
    fn seed_parent(&self) -> Option<&SessionHeader> {
        None
    }
    /// The next event of the good prefix folded into `state` (which must
    /// be the fold of every event taken before), with what
    /// [`SessionState::apply`] returned for it; `None` at the end.
    fn next_event_folded(
        &mut self,
        state: &mut SessionState,
    ) -> Result<Option<FoldedEvent>, StoreError> {
        let Some(record) = self.next_event()? else {
            return Ok(None);
        };
        let folded = state.apply(&record);
        Ok(Some(FoldedEvent { record, folded }))
    }
    /// [`next_event`](Self::next_event), leaving the proof that the
    /// record's `data` is JSON to the caller where the stream can: with an
    /// [`Unproven`] mark the caller must prove it
    /// ([`prove_data`](sessionlog_schema::prove_data)) before taking the
    /// record, and should the proof fail, give the mark back to
    /// [`read_again`](Self::read_again) and read on with `next_event`, which
    /// then gives what it would have given from that record on (damage, a
    /// torn tail, corruption, as the log has it). For a fold on another
    /// thread, which scans every `data` for its view anyway: the data is
    /// scanned once. A stream that proves every record itself gives no mark
    /// (the default).
    fn next_event_unproven(
        &mut self,
    ) -> Result<Option<(EventRecord, Option<Unproven>)>, StoreError> {
        Ok(self.next_event()?.map(|record| (record, None)))
    }
    /// Reads the log again from the record `unproven` marks (see
    /// [`next_event_unproven`](Self::next_event_unproven)). A stream that
    /// gives no mark has nothing to read again.
    fn read_again(&mut self, unproven: Unproven) -> Result<(), StoreError> {
        let _ = unproven;
        Ok(())
    }
    /// Takes back a record this stream gave, whose body may hold the body
    /// of one to come (a JSONL reader then makes no new one): what a long
    /// fold that is done with its records does.
    fn give_back(&mut self, record: EventRecord) {
        drop(record);
    }
    /// The body of the next event of the good prefix, checked as
    /// [`next_event`](Self::next_event) checks it; `None` at its end. For
    /// a reader that only writes bodies out (`export`): a database stream
    /// lends the bodies of the page it has read, and makes no record.
    fn next_body(&mut self) -> Result<Option<EventBody<'_>>, StoreError> {
        Ok(self.next_event()?.map(EventBody::Record))
    }
    /// Reads to the end: the torn tail after the good prefix, if any.
    fn finish(self: Box<Self>) -> Result<Option<TornTail>, StoreError>;
}

impl<R: Lend + Rewind> LogReader<R> {
    /// Whether `error`, met while reading, is corruption met for the first
    /// time at the present end of the good prefix; if so, the log is read
    /// again from there (what was read after it forgotten), and the caller
    /// reads on. A writer that opens a log cuts its torn tail and appends:
    /// a reader that had read part of the torn bytes, and then reads the
    /// new ones, sees damage followed by an intact record where the log
    /// holds none. Read again, the log holds the writer's records there;
    /// damage that is in the log is met again, and reported.
    fn read_again_once(&mut self, error: &StoreError) -> Result<bool, StoreError> {
        let at = self.scanner.good_bytes();
        let corrupt = matches!(error, StoreError::Corrupt { .. });
        if !corrupt || self.read_again_at == Some(at) || !self.lines.source.can_rewind() {
            return Ok(false);
        }
        self.read_again_at = Some(at);
        self.lines
            .rewind_to(at)
            .map_err(|source| StoreError::io("seek", &self.path, source))?;
        self.scanner = self.scanner.at_good_prefix_end();
        self.ready.clear();
        self.exhausted = false;
        Ok(true)
    }

    /// `read` of this reader, read again once from the end of the good
    /// prefix should it meet corruption there ([`Self::read_again_once`]).
    fn reading_again_once<T>(
        &mut self,
        mut read: impl FnMut(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        loop {
            match read(self) {
                Err(error) if self.read_again_once(&error)? => continue,
                other => return other,
            }
        }
    }
}

impl<R: Lend + Rewind + std::fmt::Debug> SessionStream for LogReader<R> {
    fn header(&self) -> &SessionHeader {
        LogReader::header(self)
    }

    fn header_vocabulary_errors(&self) -> &[HeaderVocabularyError] {
        self.scanner.header_vocabulary_errors()
    }

    fn header_body(&self) -> &str {
        LogReader::header_body(self)
    }

    fn next_event(&mut self) -> Result<Option<EventRecord>, StoreError> {
        self.reading_again_once(LogReader::next_event)
    }

    fn next_event_folded(
        &mut self,
        state: &mut SessionState,
    ) -> Result<Option<FoldedEvent>, StoreError> {
        self.reading_again_once(|reader| LogReader::next_event_folded(reader, state))
    }

    fn next_event_unproven(
        &mut self,
    ) -> Result<Option<(EventRecord, Option<Unproven>)>, StoreError> {
        self.reading_again_once(LogReader::next_event_unproven)
    }

    fn read_again(&mut self, unproven: Unproven) -> Result<(), StoreError> {
        LogReader::read_again(self, unproven)
    }

    fn give_back(&mut self, record: EventRecord) {
        let body = record.into_body();
        if self.spare_bodies.len() < SPARE_BODIES && body.capacity() <= SPARE_BODY_BYTES {
            self.spare_bodies.push(body);
        }
    }

    fn finish(mut self: Box<Self>) -> Result<Option<TornTail>, StoreError> {
        self.reading_again_once(|reader| {
            while LogReader::next_event(reader)?.is_some() {}
            Ok(())
        })?;
        LogReader::finish(*self).map(|summary| summary.torn_tail)
    }
}

impl<R: Lend> Iterator for LogReader<R> {
    type Item = Result<EventRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

impl Snapshot {
    /// Folds the snapshot ([`fold_stored`](sessionlog_projections::fold_stored):
    /// its chain from the header body it holds), collecting every violation.
    pub fn fold(&self) -> (SessionState, Vec<Violation>) {
        sessionlog_projections::fold_stored(self.header.clone(), &self.header_body, &self.events)
    }

    /// Reads the whole good prefix of the log at `path`.
    pub fn read(path: &Path, expected_id: Option<SessionId>) -> Result<Snapshot, StoreError> {
        let reader = LogReader::open(path, expected_id)?;
        Snapshot::from_reader(reader)
    }

    /// Reads the rest of `reader` into memory.
    pub fn from_reader<R: Lend>(mut reader: LogReader<R>) -> Result<Snapshot, StoreError> {
        let header = reader.header().clone();
        let header_body = reader.header_body().to_owned();
        let mut events = Vec::new();
        while let Some(record) = reader.next_event()? {
            events.push(record);
        }
        let summary = reader.finish()?;
        Ok(Snapshot {
            header,
            header_body,
            header_vocabulary_errors: summary.header_vocabulary_errors,
            events,
            torn_tail: summary.torn_tail,
        })
    }
}

/// Opens a log read-only, refusing to follow a symlink in its place and
/// refusing anything but a regular file (see [`ensure_regular_file`]).
pub(crate) fn open_log_for_reading(path: &Path) -> Result<File, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| log_open_error(path, source))?;
    ensure_regular_file(&file, path)?;
    Ok(file)
}

/// The error of a log's `O_NOFOLLOW` open that failed with `source`. A
/// symbolic link in the log's place fails it with `ELOOP`, whose own words
/// ("Too many levels of symbolic links") say nothing of why a link is
/// refused: it is named as what it is, as [`ensure_regular_file`] names a
/// FIFO. An `ELOOP` of a path whose last part is no link (a loop of links
/// among the folders above it) keeps the system's words.
pub(crate) fn log_open_error(path: &Path, source: std::io::Error) -> StoreError {
    let is_link = source.raw_os_error() == Some(libc::ELOOP)
        && path
            .symlink_metadata()
            .is_ok_and(|metadata| metadata.file_type().is_symlink());
    match is_link {
        true => not_a_log(path, "a symbolic link"),
        false => StoreError::io("open", path, source),
    }
}

/// Refuses an opened log that is not a regular file. A FIFO named
/// `<id>.jsonl` would block a reader forever and a character device would
/// feed it without end, so every log is opened with `O_NONBLOCK` (which
/// makes opening a FIFO return at once and changes nothing for a regular
/// file) and its type is checked on the open file, where no rename can
/// swap it after the check.
pub(crate) fn ensure_regular_file(file: &File, path: &Path) -> Result<(), StoreError> {
    let file_type = file
        .metadata()
        .map_err(|source| StoreError::io("stat", path, source))?
        .file_type();
    match file_kind(file_type) {
        None => Ok(()),
        Some(kind) => Err(not_a_log(path, kind)),
    }
}

/// What a file of `file_type` is, in the words a refusal names it by
/// (`a FIFO`, `a symbolic link`); `None` for a regular file, the only
/// kind a log or a database is.
pub fn file_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        return None;
    }
    Some(if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    })
}

/// The refusal of `path`, which is `kind` (`a FIFO`, `a symbolic link`)
/// where a log was looked for.
fn not_a_log(path: &Path, kind: &str) -> StoreError {
    StoreError::io(
        "open",
        path,
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file; a log is only ever a regular file"),
        ),
    )
}

/// Reads `source` from its start through the end (a convenience for
/// in-memory logs in tests and tools).
pub fn read_snapshot_from<R: Read>(source: R, path: &Path) -> Result<Snapshot, StoreError> {
    let reader = LogReader::new(
        BufReader::with_capacity(READ_BUFFER_BYTES, source),
        path,
        None,
    )?;
    Snapshot::from_reader(reader)
}

/// A session's projections as of a seq: what [`fold_through`] folded,
/// without the session's hash chain, which no projection uses.
#[derive(Debug, Clone)]
pub struct Projections {
    state: SessionState,
}

impl Projections {
    /// The last seq folded (0 = header only).
    pub fn seq(&self) -> u64 {
        self.state.seq()
    }

    /// The session's header.
    pub fn header(&self) -> &SessionHeader {
        self.state.header()
    }

    /// The projections, with `defaults` where the log sets none (what
    /// `sessionlog project` prints).
    pub fn projection(&self, defaults: &Defaults) -> Projection {
        self.state.projection(defaults)
    }

    /// The open turn, if any.
    pub fn open_turn(&self) -> Option<&str> {
        self.state.open_turn()
    }
}

/// Folds the session that `open` reads through seq `at`, reading nothing
/// after it (the events of a batch that `at` falls in are read whole, as a
/// batch is taken only with all its records); with `at` `None`, folds every
/// event and reads to the end of the good prefix, so that corruption
/// anywhere in it is refused too. Either way a rule violation does not stop
/// the read: corruption further on, in what is read, outranks it. A header
/// value outside its vocabulary, a seal that does not hold and the first
/// rule violation are refused (`HeaderVocabulary`, `Rule`, naming `path`).
/// Returns the projections (whose seq is below `at` when the log ends
/// first) and the torn tail after the good prefix, when the read got there.
///
/// A whole fold hashes the chain only while some own seal may ask for it
/// (see `fold_unhashed`): should one come after the session's first few
/// thousand events, the session is opened again (`open` is called a second
/// time) and folded from its start with its chain, so that each seal is
/// checked against the bytes the fold judged. `ends_sealed` says that the
/// session is known to end in a seal (its last event is one:
/// [`Store::last_event`](crate::Store::last_event)), which a fold must
/// check: it then hashes the chain from the start instead of reading the
/// session twice. It is only a hint: either way the fold finds the same.
///
/// ```
/// use sessionlog_store::fold_through;
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
/// let open = || store.stream(&id);
/// let (folded, torn_tail) = fold_through(open, &store.session_path(&id), None, false)?;
/// assert_eq!(folded.seq(), 1);
/// assert_eq!(folded.open_turn(), Some("t1"));
/// assert!(torn_tail.is_none());
/// let (before, _) = fold_through(open, &store.session_path(&id), Some(0), false)?;
/// assert_eq!(before.open_turn(), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fold_through<E: From<StoreError>>(
    mut open: impl FnMut() -> Result<Box<dyn SessionStream>, E>,
    path: &Path,
    at: Option<u64>,
    ends_sealed: bool,
) -> Result<(Projections, Option<TornTail>), E> {
    let folded = match at {
        Some(at) => fold_prefix(open()?, path, at)?,
        None if ends_sealed => fold_whole(open()?, path)?,
        None => match fold_whole_unhashed(open()?, path)? {
            Some(folded) => folded,
            None => fold_whole(open()?, path)?,
        },
    };
    let (state, torn_tail) = folded;
    Ok((Projections { state }, torn_tail))
}

/// A fresh state of the session `stream` reads, and the refusal of its
/// header's values outside their vocabularies.
fn fold_start(stream: &dyn SessionStream, path: &Path) -> (SessionState, Refusal) {
    let mut refusal = Refusal::default();
    if let Some(error) = stream.header_vocabulary_errors().first() {
        refusal.note(StoreError::HeaderVocabulary {
            path: path.to_owned(),
            error: error.clone(),
        });
    }
    let state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    (state, refusal)
}

/// Notes a rule violation of the fold in `refusal`.
fn note_rule(refusal: &mut Refusal, path: &Path, folded: Result<(), Violation>) {
    if let Err(violation) = folded {
        refusal.note(StoreError::Rule {
            path: path.to_owned(),
            violation,
        });
    }
}

/// [`fold_through`] of every event, the chain hashed only while an own
/// seal may ask for it: `None` when one did, and the fold stopped there.
fn fold_whole_unhashed(
    mut stream: Box<dyn SessionStream>,
    path: &Path,
) -> Result<Option<(SessionState, Option<TornTail>)>, StoreError> {
    // A rule violation does not stop the read: corruption further on
    // outranks it, and `Refusal` keeps whichever ranks highest.
    let (mut state, mut refusal) = fold_start(&*stream, path);
    let each = |_: &EventRecord, folded, _: &SessionState| note_rule(&mut refusal, path, folded);
    match crate::fold::fold_unhashed(&mut *stream, &mut state, each)? {
        Folded::ChainNeeded => Ok(None),
        Folded::Whole => fold_finish(stream, state, refusal).map(Some),
    }
}

/// [`fold_through`] of every event, the chain hashed for every record.
fn fold_whole(
    mut stream: Box<dyn SessionStream>,
    path: &Path,
) -> Result<(SessionState, Option<TornTail>), StoreError> {
    let (mut state, mut refusal) = fold_start(&*stream, path);
    crate::fold_stream(&mut *stream, &mut state, |_, folded, _| {
        note_rule(&mut refusal, path, folded)
    })?;
    fold_finish(stream, state, refusal)
}

/// The end of a whole fold: the torn tail after the good prefix, or the
/// refusal of what the fold found.
fn fold_finish(
    stream: Box<dyn SessionStream>,
    state: SessionState,
    refusal: Refusal,
) -> Result<(SessionState, Option<TornTail>), StoreError> {
    let torn_tail = stream.finish()?;
    refusal.into_result()?;
    Ok((state, torn_tail))
}

/// [`fold_through`] through `at`.
fn fold_prefix(
    mut stream: Box<dyn SessionStream>,
    path: &Path,
    at: u64,
) -> Result<(SessionState, Option<TornTail>), StoreError> {
    let (mut state, mut refusal) = fold_start(&*stream, path);
    // Seqs rise by one from 1, so the events through `at` are the first
    // `at`: fold those while reading, then only read on to the end.
    while state.seq() < at {
        let Some(event) = stream.next_event_folded(&mut state)? else {
            break;
        };
        note_rule(&mut refusal, path, event.folded);
    }
    if state.seq() >= at {
        // Through `at` only: what comes after it is not read, so damage
        // there is left for `verify` (and a torn tail is not looked for).
        refusal.into_result()?;
        return Ok((state, None));
    }
    while stream.next_event()?.is_some() {}
    fold_finish(stream, state, refusal)
}

/// The head of a session (what `sessionlog head` prints, and what an
/// anchor holds): the last seq of its good prefix and the chain value
/// there, from the stored bodies alone (no fold: one hash per record), and
/// the torn tail left out, if any. A corrupt log is refused.
pub fn chain_head(
    mut stream: Box<dyn SessionStream>,
) -> Result<(Anchor, Option<TornTail>), StoreError> {
    let mut chain = ChainValue::genesis(stream.header_body());
    let mut seq = 0;
    while let Some(record) = stream.next_event()? {
        chain = chain.next(record.body());
        seq = record.seq();
    }
    let session = stream.header().id.clone();
    let torn_tail = stream.finish()?;
    Ok((
        Anchor {
            session,
            seq,
            chain,
        },
        torn_tail,
    ))
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use sessionlog_schema::encode_line;

    use super::*;

    /// A log with a batch, a record in another member order, a shape and a
    /// rule violation, an unknown type, and a torn batch at its end.
    fn log() -> Vec<u8> {
        let id = SessionId::parse("s").expect("a valid id");
        let header = SessionHeader::root(id.clone(), 1, "/work".to_owned());
        let events = [
            (None, "turn/start", r#"{"turnId":"t1"}"#),
            (Some(2), "step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            (
                None,
                "tool/start",
                r#"{"callId":"c1","stepId":"s1","name":"n","arguments":{}}"#,
            ),
            (None, "turn/start", r#"{"turnId":7}"#),
            (None, "future/kind", "[1]"),
            (None, "step/end", r#"{"stepId":"s9"}"#),
        ];
        let mut bytes = header.encode().into_bytes();
        for (index, (batch, event_type, data)) in events.iter().enumerate() {
            let record = EventRecord::new(index as u64 + 1, 10, *batch, event_type, data);
            bytes.extend(record.encode(&id).as_bytes());
        }
        let reordered =
            r#"{"type":"tool/settle","data":{"callId":"c1","status":"ok"},"ts":10,"seq":7"#;
        bytes.extend(encode_line(&id, reordered).as_bytes());
        let torn = EventRecord::new(8, 10, Some(2), "step/end", r#"{"stepId":"s1"}"#);
        bytes.extend(torn.encode(&id).as_bytes());
        bytes
    }

    #[test]
    fn a_reader_given_back_its_records_reads_the_next_ones_as_a_fresh_reader_does() {
        let id = SessionId::parse("s").expect("a valid id");
        let mut bytes = SessionHeader::root(id.clone(), 1, "/work".to_owned())
            .encode()
            .into_bytes();
        // Bodies of lengths that rise and fall, so that a body is written
        // into one longer, and into one shorter, than itself; and one too
        // long to be kept.
        for seq in 1..=3_000_u64 {
            let pad = match seq {
                1_500 => "y".repeat(SPARE_BODY_BYTES + 1),
                _ => "x".repeat((seq * 7 % 23) as usize),
            };
            let (event_type, data) = match seq % 2 {
                1 => ("turn/start", format!(r#"{{"turnId":"t{seq}{pad}"}}"#)),
                _ => ("turn/end", format!(r#"{{"turnId":"t{}{pad}"}}"#, seq - 1)),
            };
            bytes.extend(
                EventRecord::new(seq, 1, None, event_type, &data)
                    .encode(&id)
                    .as_bytes(),
            );
        }
        let path = Path::new("given-back.jsonl");
        let open = || LogReader::new(Cursor::new(&bytes[..]), path, None).expect("a readable log");
        let (mut reusing, mut fresh) = (open(), open());
        let mut held = Vec::new();
        let mut kept = 0;
        for _ in 0..3_000 {
            let (record, _) = reusing
                .next_event_unproven()
                .expect("a good record")
                .expect("one more record");
            assert!(
                record
                    == fresh
                        .next_event()
                        .expect("a good record")
                        .expect("one more")
            );
            held.push(record);
            if held.len() == 97 {
                for record in held.drain(..) {
                    SessionStream::give_back(&mut reusing, record);
                }
                kept = kept.max(reusing.spare_bodies.len());
            }
        }
        assert!(reusing.next_event_unproven().expect("the end").is_none());
        assert!(kept > 0 && kept <= SPARE_BODIES, "{kept} bodies kept");
        assert!(reusing
            .spare_bodies
            .iter()
            .all(|body| body.capacity() <= SPARE_BODY_BYTES));
    }

    #[test]
    fn a_folding_read_returns_what_reading_then_applying_returns() {
        let bytes = log();
        let path = Path::new("folded.jsonl");
        let open = || LogReader::new(Cursor::new(&bytes), path, None).expect("a readable log");
        let (mut plain, mut folding) = (open(), open());
        let mut plain_state = SessionState::new(plain.header().clone());
        let mut folded_state = SessionState::new(folding.header().clone());
        loop {
            let expected = plain.next_event().expect("readable").map(|record| {
                let folded = plain_state.apply(&record);
                (record, folded)
            });
            let folded = folding.next_event_folded(&mut folded_state);
            let folded = folded.expect("readable").map(|e| (e.record, e.folded));
            assert_eq!(folded, expected);
            if expected.is_none() {
                break;
            }
        }
        assert_eq!(folded_state, plain_state);
        assert_eq!(plain_state.seq(), 7);
        assert_eq!(plain_state.violation_count(), 2);
        let summary = folding.finish().expect("only torn");
        assert_eq!(summary, plain.finish().expect("only torn"));
        assert!(summary.torn_tail.is_some());
    }

    /// The lines of `bytes` as a plain split gives them: each with its
    /// offset and whether a `\n` ended it.
    fn split_lines(bytes: &[u8]) -> Vec<(u64, Vec<u8>, bool)> {
        let mut lines = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let (line, terminated) = match memchr::memchr(b'\n', &bytes[at..]) {
                Some(end) => (&bytes[at..at + end], true),
                None => (&bytes[at..], false),
            };
            lines.push((at as u64, line.to_vec(), terminated));
            at += line.len() + usize::from(terminated);
        }
        lines
    }

    /// Every line of `lines`, with its offset and ending.
    fn read_lines<R: Lend>(lines: &mut LineReader<R>) -> Vec<(u64, Vec<u8>, bool)> {
        let mut read = Vec::new();
        while let Some((offset, line)) = lines.next_line().expect("read from memory") {
            let Line::Complete { terminated } = line else {
                panic!("no line is above the limit");
            };
            read.push((offset, lines.line().to_vec(), terminated));
        }
        read
    }

    /// A source whose every other read is interrupted by a signal before
    /// it reads anything.
    struct Interrupted<R> {
        inner: R,
        interrupt: bool,
    }

    impl<R: Read> Read for Interrupted<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.interrupt = !self.interrupt;
            match self.interrupt {
                true => Err(std::io::ErrorKind::Interrupted.into()),
                false => self.inner.read(buf),
            }
        }
    }

    /// A source whose read number `fail_at` (from 1) fails.
    struct FailingOnce {
        inner: Cursor<Vec<u8>>,
        reads: usize,
        fail_at: usize,
    }

    impl Read for FailingOnce {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            match self.reads == self.fail_at {
                true => Err(std::io::Error::other("a failed read")),
                false => self.inner.read(buf),
            }
        }
    }

    impl Seek for FailingOnce {
        fn seek(&mut self, position: std::io::SeekFrom) -> std::io::Result<u64> {
            self.inner.seek(position)
        }
    }

    /// A read that fails part-way through a line leaves bytes of it taken
    /// from the source: no line is read after them, and a move back counts
    /// them, so that the line is then read whole from its start.
    #[test]
    fn a_read_that_fails_part_way_through_a_line_is_counted_by_a_move_back() {
        let bytes = b"ab\ncdefghijklmnopq\nrs\n".to_vec();
        let source = FailingOnce {
            inner: Cursor::new(bytes),
            reads: 0,
            fail_at: 3,
        };
        let mut lines = LineReader::new(BufReader::with_capacity(8, source));
        let first = lines.next_line().expect("a read");
        assert_eq!(first, Some((0, Line::Complete { terminated: true })));
        assert_eq!(lines.line(), b"ab");
        assert!(lines.next_line().is_err(), "the third read fails");
        let after = lines
            .next_line()
            .expect_err("no line after the bytes taken");
        assert!(
            after
                .to_string()
                .contains("13 bytes into the line at byte offset 3"),
            "{after}"
        );
        lines.rewind_to(3).expect("a move back");
        let again = lines.next_line().expect("a read");
        assert_eq!(again, Some((3, Line::Complete { terminated: true })));
        assert_eq!(lines.line(), b"cdefghijklmnopq");
        let last = lines.next_line().expect("a read");
        assert_eq!(last, Some((19, Line::Complete { terminated: true })));
        assert_eq!(lines.line(), b"rs");
    }

    #[test]
    fn a_read_a_signal_interrupts_is_read_again() {
        let bytes = log();
        let expected = split_lines(&bytes);
        for capacity in [1, 7, 64, 4096] {
            let source = Interrupted {
                inner: Cursor::new(&bytes),
                interrupt: false,
            };
            let mut lines = LineReader::new(BufReader::with_capacity(capacity, source));
            assert_eq!(
                read_lines(&mut lines),
                expected,
                "a buffer of {capacity} bytes"
            );
        }
    }

    proptest::proptest! {
        /// Lines lent from the buffer and lines copied out of two fills of
        /// it are the same lines at the same offsets, whatever the size of
        /// the buffer; and a move back to a line read reads the same lines
        /// again from there.
        #[test]
        fn lines_lent_or_copied_are_the_lines_of_the_file(
            lengths in proptest::collection::vec(0_usize..40, 0..30),
            unterminated in proptest::bool::ANY,
            capacity in 1_usize..48,
            back in proptest::num::usize::ANY,
        ) {
            let mut bytes = Vec::new();
            for (index, length) in lengths.iter().enumerate() {
                bytes.extend((0..*length).map(|at| b'a' + ((index + at) % 26) as u8));
                bytes.push(b'\n');
            }
            if unterminated {
                bytes.extend_from_slice(b"tail");
            }
            let expected = split_lines(&bytes);
            let mut lines = LineReader::new(BufReader::with_capacity(capacity, Cursor::new(&bytes)));
            proptest::prop_assert_eq!(&read_lines(&mut lines), &expected);
            let mut lines = LineReader::new(Cursor::new(&bytes));
            proptest::prop_assert_eq!(&read_lines(&mut lines), &expected);
            if !expected.is_empty() {
                let from = back % expected.len();
                let mut lines = LineReader::new(BufReader::with_capacity(capacity, Cursor::new(&bytes)));
                for _ in 0..=from {
                    lines.next_line().expect("read from memory");
                }
                lines.rewind_to(expected[from].0).expect("a point read");
                proptest::prop_assert_eq!(&read_lines(&mut lines), &expected[from..].to_vec());
            }
        }
    }
}
