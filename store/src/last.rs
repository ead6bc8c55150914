//! The last records of a JSONL log, read from its end (`tail -n N`).
//!
//! The header (line 1) is read, then lines are taken backwards from the end
//! of the file (`memrchr` over chunks read with `pread`) until the window
//! holds N intact records, and the window is scanned forwards by the same
//! `LogScanner` every reader uses, resumed at the window's first record
//! ([`LogScanner::resume`]). So what it reports (a torn tail, corruption
//! inside the window, a seq gap, a `seedLength` above the last seq) is
//! what a read from the start would report of those bytes, at the same
//! offset, and at the same line (counted from the start of the file when
//! damage is reported); damage before the window is not read and left for
//! `verify`. The window starts at a unit: when its first record is inside a
//! batch (found by a batch member within the `MAX_BATCH_RECORDS` lines
//! before it: whole chunks are searched for `"batch"` and their lines
//! counted in bulk, and only a line holding it is decoded), it starts at
//! that batch's first record instead, so that a
//! batch whose last record never arrived is a torn tail here too. When the
//! scan finds fewer than N records of the good prefix (a torn tail took some
//! of the lines), the window grows and is scanned again. Memory is the
//! window's lines; the time does not depend on the log's length, except
//! that a report of damage counts the lines before it.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use sessionlog_schema::{
    decode_event, DecodedHeader, EventRecord, EventType, LogScanner, ScanSummary, SessionId,
    TornTail, MAX_BATCH_RECORDS, MAX_RECORD_BYTES,
};

use crate::reader::{open_log_for_reading, Line, LineReader};
use crate::StoreError;

/// Bytes read at a time, backwards.
const CHUNK_BYTES: usize = 64 * 1024;

/// What a batch's first record holds (its `batch` field), spelled plainly.
const BATCH_KEY: &[u8] = b"\"batch\"";

/// The start of a `\uXXXX` escape: the only other way a member's key can
/// spell `batch` (docs/FORMAT.md, "Members").
const ESCAPE: &[u8] = b"\\u";

/// Finds the lines that may be a batch's first record: those holding
/// `"batch"` or an escape that could spell it. Any other line cannot
/// start a batch, and the look-back passes over it without decoding it.
struct BatchStartFinder {
    key: memchr::memmem::Finder<'static>,
    escape: memchr::memmem::Finder<'static>,
}

impl BatchStartFinder {
    fn new() -> BatchStartFinder {
        BatchStartFinder {
            key: memchr::memmem::Finder::new(BATCH_KEY),
            escape: memchr::memmem::Finder::new(ESCAPE),
        }
    }

    /// Where the last line of `bytes` that may start a batch holds what
    /// makes it one (a forward, vectorised search for each needle).
    fn last_in(&self, bytes: &[u8]) -> Option<usize> {
        let key = self.key.find_iter(bytes).last();
        let escape = self.escape.find_iter(bytes).last();
        key.max(escape)
    }

    /// Whether `line` may be a batch's first record.
    fn may_start_batch(line: &[u8]) -> bool {
        memchr::memmem::find(line, BATCH_KEY).is_some()
            || memchr::memmem::find(line, ESCAPE).is_some()
    }
}

/// The last events of a log's good prefix.
#[derive(Debug)]
pub struct LastEvents {
    /// The header record.
    pub header: DecodedHeader,
    /// At most the N last events of the good prefix, in order.
    pub events: Vec<EventRecord>,
    /// The seq of the last event of the good prefix (0: none).
    pub last_seq: u64,
    /// The torn tail after the good prefix, if any.
    pub torn_tail: Option<TornTail>,
    /// Where the good prefix ends, for a follower to go on from there
    /// ([`LogFollower::after`](crate::LogFollower::after)); `None` when
    /// the prefix holds no event or its last line is above the record
    /// limit.
    pub(crate) end: Option<PrefixEnd>,
}

/// Whether the log at `path` ends in a seal, its last event read from the
/// end of the file: the `ends_sealed` hint of
/// [`fold_through`](crate::fold_through). A log whose end cannot be read
/// says no; the fold that follows reports what is wrong with it.
pub fn log_ends_in_seal(path: &Path) -> bool {
    is_seal(read_last_events(path, None, 1).map(|mut last| last.events.pop()))
}

/// Whether `last`, a session's last event as read from its end, is a
/// seal; no when it could not be read.
pub(crate) fn is_seal(last: Result<Option<EventRecord>, StoreError>) -> bool {
    last.ok()
        .flatten()
        .is_some_and(|record| record.event_type() == EventType::Seal.as_str())
}

/// The end of a log's good prefix as a read from the end found it.
#[derive(Debug)]
pub(crate) struct PrefixEnd {
    /// Device and inode of the file read.
    pub(crate) file: (u64, u64),
    /// The scanner at the end of the good prefix.
    pub(crate) scanner: LogScanner,
    /// The line that ends the good prefix, with its `\n`.
    pub(crate) anchor: Vec<u8>,
}

/// The last `count` events of the good prefix of the log at `path` (whose
/// header must name `expected_id`, when given), read from the end of the
/// file: see the module docs. Corruption in what is read is an error, as
/// for every reader.
///
/// ```
/// use sessionlog_schema::{SessionHeader, SessionId, TurnStart, TurnEnd};
/// use sessionlog_store::{read_last_events, Durability, Store, WriterOptions};
///
/// let folder = tempfile::tempdir()?;
/// let store = Store::create(folder.path())?;
/// let id = SessionId::parse("a")?;
/// store.create_session(&SessionHeader::root(id.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
/// let mut writer = store.open_writer(&id, WriterOptions::default())?;
/// writer.append(TurnStart::new("t1").into(), None)?;
/// writer.append(TurnEnd::new("t1").into(), None)?;
/// let last = read_last_events(&store.session_path(&id), Some(id), 1)?;
/// assert_eq!(last.events.iter().map(|record| record.seq()).collect::<Vec<_>>(), [2]);
/// assert!(last.torn_tail.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_last_events(
    path: &Path,
    expected_id: Option<SessionId>,
    count: usize,
) -> Result<LastEvents, StoreError> {
    let file = open_log_for_reading(path)?;
    let corrupt = |corruption| StoreError::Corrupt {
        path: path.to_owned(),
        corruption,
    };
    let (header, header_end) = read_header_line(&file, path, expected_id)?;
    let metadata = file
        .metadata()
        .map_err(|source| StoreError::io("stat", path, source))?;
    let len = metadata.len();
    let mut lines = BackwardLines::new(&file, path, header_end, len);
    // The window's lines, earliest first, and how many are intact records.
    let mut window: VecDeque<BackLine> = VecDeque::new();
    let mut wanted = count.max(1);
    loop {
        let mut intact = window.iter().filter(|line| line.record.is_some()).count();
        while intact < wanted {
            let Some(line) = lines.next_line(&header.header.id)? else {
                break;
            };
            intact += usize::from(line.record.is_some());
            window.push_front(line);
        }
        // The window starts at its first intact record (what comes before
        // it in the window is damage a scan from there cannot place).
        while window.front().is_some_and(|line| line.record.is_none()) && !lines.at_start() {
            match lines.next_line(&header.header.id)? {
                Some(line) => window.push_front(line),
                None => break,
            }
        }
        extend_to_batch_start(&mut window, &mut lines, &header.header.id)?;
        // The scan decodes the window's lines again, taking their bytes:
        // neither they nor the read buffers are held beside the records.
        lines.release();
        let (events, mut summary, end) = match scan(&header, header_end, &mut window, count) {
            Ok(scanned) => scanned,
            Err(mut corruption) => {
                corruption.position.line = line_at(&file, path, corruption.position.offset)?;
                return Err(corrupt(corruption));
            }
        };
        if events.len() >= count || lines.at_start() {
            if let Some(torn) = summary.torn_tail.as_mut() {
                torn.position.line = line_at(&file, path, torn.position.offset)?;
            }
            let end = end.map(|(scanner, anchor)| PrefixEnd {
                file: (metadata.dev(), metadata.ino()),
                scanner,
                anchor,
            });
            return Ok(LastEvents {
                header,
                events,
                last_seq: summary.last_seq,
                torn_tail: summary.torn_tail,
                end,
            });
        }
        // Damage or an unfinished batch took records away: the window is
        // read again from the end, twice as long.
        wanted = wanted.saturating_mul(2);
        window.clear();
        lines.rewind_to(len.max(header_end));
    }
}

/// What [`scan`] found: the last events, the summary, and the scanner at
/// the end of the good prefix with the line that ends it (when a line of
/// the window, not above the record limit, does).
type Scanned = (Vec<EventRecord>, ScanSummary, Option<(LogScanner, Vec<u8>)>);

/// Scans `window` forwards from its first line, resuming the scanner there,
/// and keeps the last `count` events of the good prefix. Takes each line's
/// bytes as it scans it: a line is held beside the records only while it
/// is scanned, or when it ends the good prefix (the anchor).
fn scan(
    header: &DecodedHeader,
    header_end: u64,
    window: &mut VecDeque<BackLine>,
    count: usize,
) -> Result<Scanned, sessionlog_schema::Corruption> {
    let (offset, next_seq) = match window.front() {
        Some(BackLine {
            offset,
            record: Some(record),
            ..
        }) => (*offset, record.seq),
        // Only damage after the header, or nothing: the scan starts at the
        // first event.
        Some(line) => (line.offset, 1),
        None => (header_end, 1),
    };
    let mut scanner = LogScanner::resume(header.clone(), offset, next_seq);
    let mut ready = Vec::new();
    // Room for what is kept, not for what was asked: `count` is the
    // caller's (`tail -n 1000000000`), the records are the log's.
    let mut last: VecDeque<EventRecord> = VecDeque::with_capacity(count.min(1024));
    // The last line the good prefix ended at as it was scanned, and where.
    let mut anchor: Option<(Vec<u8>, u64)> = None;
    for line in window.iter_mut() {
        match line.bytes.take() {
            Some(bytes) => {
                scanner.push_line(&bytes, line.terminated, line.offset, &mut ready)?;
                let line_end = line.offset + line.len + 1;
                if line.terminated && line_end == scanner.good_bytes() {
                    anchor = Some((bytes, line_end));
                }
            }
            None => scanner.push_oversized_line(line.len, line.terminated, line.offset)?,
        }
        for record in ready.drain(..) {
            if last.len() == count {
                last.pop_front();
            }
            if count > 0 {
                last.push_back(record);
            }
        }
    }
    let at_end = scanner.at_good_prefix_end();
    // The good prefix ends at or near the window's end: at the anchor,
    // unless a line after it (one above the record limit) moved it on.
    let end = anchor
        .filter(|&(_, line_end)| line_end == at_end.good_bytes())
        .map(|(mut bytes, _)| {
            bytes.push(b'\n');
            bytes
        });
    let summary = scanner.finish()?;
    Ok((last.into(), summary, end.map(|anchor| (at_end, anchor))))
}

/// When the window's first record is inside a batch, takes the lines back
/// to that batch's first record. A batch holds at most
/// `MAX_BATCH_RECORDS` records, so only as many lines before the window
/// can start one that reaches into it.
fn extend_to_batch_start(
    window: &mut VecDeque<BackLine>,
    lines: &mut BackwardLines<'_>,
    id: &SessionId,
) -> Result<(), StoreError> {
    let Some(first) = window.front().and_then(|line| line.record) else {
        return Ok(());
    };
    if first.batch.is_some() {
        return Ok(());
    }
    let first_seq = first.seq;
    let window_start = window.front().map_or(0, |line| line.offset);
    // Lines before the window are looked at, not kept: only a batch's
    // first record is decoded, and the window is extended only when one
    // reaches into it.
    // Whole chunks are searched for `"batch"` and their lines counted in
    // bulk; only a line holding it is taken and decoded.
    let finder = BatchStartFinder::new();
    let mut looked = 0u64;
    let mut batch_start = None;
    while looked < MAX_BATCH_RECORDS {
        looked += lines.skip_lines_without(&finder, MAX_BATCH_RECORDS - looked)?;
        if looked == MAX_BATCH_RECORDS {
            break;
        }
        let Some(line) = lines.next_line_if_batch_start(id)? else {
            break;
        };
        looked += 1;
        // A damaged line that may start a batch is taken into the window,
        // whose read reports it as a read from the start does: passing
        // over it would show members of a batch whose start is lost.
        let Some(record) = line.record else {
            batch_start = Some(line.offset);
            break;
        };
        let Some(size) = record.batch else {
            continue;
        };
        if record.seq + size > first_seq {
            batch_start = Some(line.offset);
        }
        // The nearest batch before the window decides: one that ended
        // before it leaves the window starting a unit.
        break;
    }
    lines.rewind_to(window_start);
    if let Some(batch_start) = batch_start {
        while let Some(line) = lines.next_line(id)? {
            let reached = line.offset <= batch_start;
            window.push_front(line);
            if reached {
                break;
            }
        }
        // A damaged batch start is placed (its line numbered) from the
        // intact record before it, as the window's start always is.
        while window.front().is_some_and(|line| line.record.is_none()) {
            match lines.next_line(id)? {
                Some(line) => window.push_front(line),
                None => break,
            }
        }
    }
    Ok(())
}

/// The 1-based number of the line that starts at `offset`, its newlines
/// counted from the start of the file. The scan of the window numbers its
/// lines from their seqs (the line of seq K is K + 1 in a sound log); a
/// report of damage names the line counted, which stays right when lines
/// before the window are missing or doubled. Only damage pays for it.
fn line_at(file: &File, path: &Path, offset: u64) -> Result<u64, StoreError> {
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut newlines = 0u64;
    let mut at = 0u64;
    while at < offset {
        let want = (offset - at).min(CHUNK_BYTES as u64) as usize;
        let read = file
            .read_at(&mut buffer[..want], at)
            .map_err(|source| StoreError::io("read", path, source))?;
        if read == 0 {
            break;
        }
        newlines += memchr::memchr_iter(b'\n', &buffer[..read]).count() as u64;
        at += read as u64;
    }
    Ok(newlines + 1)
}

/// Reads and checks line 1; returns it decoded and where it ends.
fn read_header_line(
    file: &File,
    path: &Path,
    expected_id: Option<SessionId>,
) -> Result<(DecodedHeader, u64), StoreError> {
    let reader = BufReader::with_capacity(CHUNK_BYTES, file);
    let mut lines = LineReader::new(reader);
    let mut scanner = LogScanner::new(expected_id);
    let corrupt = |corruption| StoreError::Corrupt {
        path: path.to_owned(),
        corruption,
    };
    let first = lines
        .next_line()
        .map_err(|source| StoreError::io("read", path, source))?;
    match first {
        Some((offset, Line::Complete { terminated })) => scanner
            .push_line(lines.line(), terminated, offset, &mut Vec::new())
            .map_err(corrupt)?,
        Some((offset, Line::Oversized { len, terminated })) => scanner
            .push_oversized_line(len, terminated, offset)
            .map_err(corrupt)?,
        None => {}
    }
    let end = lines.offset();
    let Some(header) = scanner.header().cloned() else {
        // An empty file: the scanner names it.
        return Err(corrupt(scanner.finish().err().unwrap_or_else(|| {
            unreachable!("a scan without a header does not finish")
        })));
    };
    Ok((
        DecodedHeader {
            header,
            vocabulary_errors: scanner.header_vocabulary_errors().to_vec(),
            body: scanner.header_body().to_owned(),
        },
        end,
    ))
}

/// One line read backwards.
#[derive(Debug)]
struct BackLine {
    offset: u64,
    /// Its bytes without `\n`; `None` for a line above the record limit.
    bytes: Option<Vec<u8>>,
    /// Its length without `\n`.
    len: u64,
    terminated: bool,
    /// The seq and batch of its record, when the line is intact (`\n`,
    /// CRC, a well-formed record). The record itself is not kept: the
    /// scan decodes the lines it gives again, and a window of large
    /// records would otherwise be held twice.
    record: Option<Intact>,
}

/// What the look-back needs of an intact line's record.
#[derive(Debug, Clone, Copy)]
struct Intact {
    seq: u64,
    /// Its batch's size, on a batch's first record.
    batch: Option<u64>,
}

/// The lines of a file after its header, from the last to the first.
struct BackwardLines<'f> {
    file: &'f File,
    path: &'f Path,
    /// Where the lines start (the end of the header).
    start: u64,
    /// Bytes before `pos` are not read yet; `buffer` holds `[pos, end)`,
    /// where `end` is the end of the next line to give.
    pos: u64,
    buffer: Vec<u8>,
    /// An allocation for the next chunk.
    spare: Vec<u8>,
}

impl<'f> BackwardLines<'f> {
    fn new(file: &'f File, path: &'f Path, start: u64, len: u64) -> Self {
        BackwardLines {
            file,
            path,
            start,
            pos: len.max(start),
            buffer: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Whether every line has been given.
    fn at_start(&self) -> bool {
        self.pos == self.start && self.buffer.is_empty()
    }

    /// Frees the read buffers, forgetting nothing: the lines they hold
    /// that were not given yet are read again, should they be wanted.
    fn release(&mut self) {
        self.pos += self.buffer.len() as u64;
        self.buffer = Vec::new();
        self.spare = Vec::new();
    }

    /// Forgets what was given from `end` on: the next line given ends there.
    fn rewind_to(&mut self, end: u64) {
        self.pos = end;
        self.buffer.clear();
    }

    /// The previous line, decoded when intact.
    fn next_line(&mut self, id: &SessionId) -> Result<Option<BackLine>, StoreError> {
        self.take_line(id, true)
    }

    /// The previous line, decoded only when it may be a batch's first record
    /// (it holds `"batch"`): the look-back for a batch reads most lines
    /// without decoding them.
    fn next_line_if_batch_start(&mut self, id: &SessionId) -> Result<Option<BackLine>, StoreError> {
        self.take_line(id, false)
    }

    fn take_line(&mut self, id: &SessionId, always: bool) -> Result<Option<BackLine>, StoreError> {
        if self.at_start() {
            return Ok(None);
        }
        if self.buffer.is_empty() {
            self.fill()?;
        }
        // The buffer ends where the line to give ends.
        let end = self.pos + self.buffer.len() as u64;
        let terminated = self.buffer.last() == Some(&b'\n');
        let newline = usize::from(terminated);
        let line_start = loop {
            let body_end = self.buffer.len() - newline;
            if let Some(index) = memchr::memrchr(b'\n', &self.buffer[..body_end]) {
                break index + 1;
            }
            if self.pos == self.start {
                break 0;
            }
            if body_end > MAX_RECORD_BYTES {
                return self.skip_oversized(terminated, end);
            }
            self.fill()?;
        };
        let body_end = self.buffer.len() - newline;
        let offset = self.pos + line_start as u64;
        let len = (body_end - line_start) as u64;
        if body_end - line_start > MAX_RECORD_BYTES {
            self.buffer.truncate(line_start);
            return Ok(Some(BackLine {
                offset,
                bytes: None,
                len,
                terminated,
                record: None,
            }));
        }
        let line = &self.buffer[line_start..body_end];
        let decode = terminated && (always || BatchStartFinder::may_start_batch(line));
        let record = match decode {
            true => decode_event(id, line).ok().map(|record| Intact {
                seq: record.seq(),
                batch: record.batch(),
            }),
            false => None,
        };
        // A line looked at only for a batch is not kept. Room for the
        // `\n` that the line ending the good prefix gets as its anchor.
        let bytes = (always || record.is_some()).then(|| {
            let mut bytes = Vec::with_capacity(line.len() + 1);
            bytes.extend_from_slice(line);
            bytes
        });
        self.buffer.truncate(line_start);
        Ok(Some(BackLine {
            offset,
            bytes,
            len,
            terminated,
            record,
        }))
    }

    /// Gives back, without decoding or keeping them, the lines before the
    /// next one that holds `finder`'s needle, at most `limit` of them, and
    /// returns how many. The lines are not taken one at a time: each chunk
    /// is searched for the needle's last occurrence (a forward, vectorised
    /// search: a reverse one is not) and the newlines after the line
    /// holding it are counted in bulk. It stops early, the
    /// next line unknown, when the buffer holds no whole line (a line
    /// longer than the buffer, left to `take_line`).
    fn skip_lines_without(
        &mut self,
        finder: &BatchStartFinder,
        limit: u64,
    ) -> Result<u64, StoreError> {
        let mut skipped = 0;
        loop {
            if skipped == limit || self.at_start() {
                return Ok(skipped);
            }
            if self.buffer.is_empty() && !self.fill()? {
                return Ok(skipped);
            }
            // Where the buffer's whole lines start: after its first `\n`,
            // unless the buffer starts at the first line.
            let whole_from = if self.pos == self.start {
                0
            } else {
                match memchr::memchr(b'\n', &self.buffer) {
                    Some(index) => index + 1,
                    None => return Ok(skipped),
                }
            };
            let whole = &self.buffer[whole_from..];
            let (cut, found) = match finder.last_in(whole) {
                Some(index) => {
                    let line_end = memchr::memchr(b'\n', &whole[index..])
                        .map_or(whole.len(), |newline| index + newline + 1);
                    (whole_from + line_end, true)
                }
                None => (whole_from, false),
            };
            // The lines of `buffer[cut..]` are skipped.
            let terminated = self.buffer.last() == Some(&b'\n');
            let body_end = (self.buffer.len() - usize::from(terminated)).max(cut);
            let inner = &self.buffer[cut..body_end];
            let count = if cut == self.buffer.len() {
                0
            } else {
                memchr::memchr_iter(b'\n', inner).count() as u64 + 1
            };
            if skipped + count > limit {
                // Only the last `limit - skipped` of them: the line before
                // them ends at the newline that many from the end.
                let take = (limit - skipped) as usize;
                let newline = memchr::memrchr_iter(b'\n', inner)
                    .nth(take - 1)
                    .unwrap_or_else(|| unreachable!("{count} lines hold {take}"));
                self.buffer.truncate(cut + newline + 1);
                return Ok(limit);
            }
            skipped += count;
            self.buffer.truncate(cut);
            // Not found: what is left is the line the buffer starts inside;
            // the chunk before it is read in front of it.
            if found || !self.fill()? {
                return Ok(skipped);
            }
        }
    }

    /// A line longer than the record limit, ending at `end`: its start is
    /// found without keeping its bytes.
    fn skip_oversized(
        &mut self,
        terminated: bool,
        end: u64,
    ) -> Result<Option<BackLine>, StoreError> {
        loop {
            // Nothing in the buffer is needed: it is all of this line.
            self.buffer.clear();
            if !self.fill()? {
                break;
            }
            if let Some(index) = memchr::memrchr(b'\n', &self.buffer) {
                self.buffer.truncate(index + 1);
                break;
            }
        }
        let offset = self.pos + self.buffer.len() as u64;
        Ok(Some(BackLine {
            offset,
            bytes: None,
            len: end - offset - u64::from(terminated),
            terminated,
            record: None,
        }))
    }

    /// Reads the chunk before `pos` in front of the buffer; false when
    /// there is nothing before it.
    fn fill(&mut self) -> Result<bool, StoreError> {
        if self.pos == self.start {
            return Ok(false);
        }
        // A line longer than a chunk is read in chunks as long as what is
        // already held (up to a quarter of the record limit): each chunk
        // is copied in front of the buffer, so equal chunks would copy a
        // long line's bytes once per chunk.
        let want = self.buffer.len().clamp(CHUNK_BYTES, MAX_RECORD_BYTES / 4);
        let from = self.pos.saturating_sub(want as u64).max(self.start);
        // The buffer before last is reused: no new pages for each chunk.
        let mut chunk = std::mem::take(&mut self.spare);
        chunk.clear();
        // Exactly the room the two need: a long line grown by doubling
        // would hold up to twice its bytes, in the buffer and the spare.
        chunk.reserve_exact((self.pos - from) as usize + self.buffer.len());
        chunk.resize((self.pos - from) as usize, 0);
        self.file
            .read_exact_at(&mut chunk, from)
            .map_err(|source| StoreError::io("read", self.path, source))?;
        chunk.extend_from_slice(&self.buffer);
        self.spare = std::mem::replace(&mut self.buffer, chunk);
        self.pos = from;
        Ok(true)
    }
}

impl std::fmt::Debug for BackwardLines<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardLines")
            .field("pos", &self.pos)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sessionlog_schema::EventRecord;

    use super::*;
    use crate::reader::read_snapshot_from;
    use crate::store::tests::{header, id};
    use sessionlog_schema::encode_line;

    /// A log of `units` (each a lone event, or a batch of that many), then
    /// `tail` appended as it is.
    fn log(units: &[u64], data_len: usize, tail: &[u8]) -> Vec<u8> {
        let session = id("s");
        let mut bytes = header("s").encode().into_bytes();
        let mut seq = 1;
        let data = format!("{{\"text\":\"{}\"}}", "x".repeat(data_len));
        for &size in units {
            for member in 0..size.max(1) {
                let batch = (size > 1 && member == 0).then_some(size);
                let record = EventRecord::new(seq, 10, batch, "note/test", &data);
                bytes.extend(record.encode(&session).as_bytes());
                seq += 1;
            }
        }
        bytes.extend_from_slice(tail);
        bytes
    }

    /// What a read from the start gives for the last `count` events: the
    /// events, the last seq and the torn tail; or its corruption.
    fn forward(
        bytes: &[u8],
        count: usize,
    ) -> Result<(Vec<EventRecord>, u64, Option<TornTail>), String> {
        let snapshot =
            read_snapshot_from(bytes, Path::new("s.jsonl")).map_err(|e| e.to_string())?;
        let last_seq = snapshot.events.last().map_or(0, EventRecord::seq);
        let skip = snapshot.events.len().saturating_sub(count);
        Ok((
            snapshot.events[skip..].to_vec(),
            last_seq,
            snapshot.torn_tail,
        ))
    }

    fn backward(
        bytes: &[u8],
        count: usize,
    ) -> Result<(Vec<EventRecord>, u64, Option<TornTail>), String> {
        let folder = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = folder.path().join("s.jsonl");
        std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
        let last = read_last_events(&path, Some(id("s")), count).map_err(|e| e.to_string())?;
        Ok((last.events, last.last_seq, last.torn_tail))
    }

    /// A torn tail of each kind a crash leaves.
    fn torn_tail() -> impl Strategy<Value = Vec<u8>> {
        let member = |seq: u64, batch: Option<u64>| {
            EventRecord::new(seq, 10, batch, "note/test", "{}").encode(&id("s"))
        };
        prop_oneof![
            Just(Vec::new()),
            Just(b"{\"seq\":".to_vec()),
            Just(b"garbage\n".to_vec()),
            Just(b"\0\0\0\0".to_vec()),
            (0usize..3).prop_map(move |cut| {
                // An unfinished batch, cut after whole lines or inside one;
                // its seq is found and set by `with_seq` below.
                let mut text = member(u64::MAX, Some(4)).into_bytes();
                text.extend(member(u64::MAX, None).as_bytes());
                text.truncate(text.len() - cut * 7);
                text
            }),
        ]
    }

    /// `tail` with the placeholder seqs of an unfinished batch numbered from
    /// `next`.
    fn with_seq(tail: Vec<u8>, next: u64) -> Vec<u8> {
        let text = String::from_utf8_lossy(&tail).into_owned();
        if !text.contains(&u64::MAX.to_string()) {
            return tail;
        }
        let mut bytes = Vec::new();
        for (index, line) in text.split_inclusive('\n').enumerate() {
            let seq = next + index as u64;
            let batch = (index == 0).then_some(4);
            let whole = EventRecord::new(seq, 10, batch, "note/test", "{}").encode(&id("s"));
            bytes.extend_from_slice(&whole.as_bytes()[..line.len().min(whole.len())]);
        }
        bytes
    }

    proptest! {
        #[test]
        fn the_last_records_read_from_the_end_are_those_a_read_from_the_start_gives(
            units in proptest::collection::vec(prop_oneof![4 => Just(1u64), 1 => 2u64..6], 0..40),
            data_len in prop_oneof![Just(8usize), Just(70_000usize)],
            tail in torn_tail(),
            count in 0usize..12,
        ) {
            let next = units.iter().map(|size| size.max(&1)).sum::<u64>() + 1;
            let bytes = log(&units, data_len, &with_seq(tail, next));
            prop_assert_eq!(backward(&bytes, count), forward(&bytes, count));
        }
    }

    #[test]
    fn lines_of_many_chunks_are_read_from_the_end_as_from_the_start() {
        // Chunks grow with the line they hold: a line past one chunk,
        // past the largest chunk, and past the record limit (damage, a
        // line of which nothing is kept), after lines of each.
        let longest = MAX_RECORD_BYTES / 4 + 300_000;
        let cases = [
            (600_000, &[1, 1, 1][..]),
            (600_000, &[1, 3, 1]),
            (longest, &[1, 1]),
        ];
        for (data_len, units) in cases {
            let bytes = log(units, data_len, b"");
            for count in [1, 2, 5] {
                assert_eq!(
                    backward(&bytes, count),
                    forward(&bytes, count),
                    "{data_len} {units:?} {count}"
                );
            }
        }
        let mut oversized = log(&[1], longest, b"");
        oversized.extend(vec![b'x'; MAX_RECORD_BYTES + 70_000]);
        oversized.push(b'\n');
        oversized.extend(
            log(&[1], 8, b"")
                .split_inclusive(|&b| b == b'\n')
                .nth(1)
                .unwrap_or_default(),
        );
        // The same corruption, found at the same line and offset: each
        // names the file as it was given.
        let named = |read: Result<_, String>| {
            read.map_err(|error| {
                error
                    .split_once("s.jsonl: ")
                    .map(|(_, said)| said.to_owned())
            })
        };
        let (from_end, from_start) = (backward(&oversized, 2), forward(&oversized, 2));
        assert!(from_end.is_err(), "{from_end:?}");
        assert_eq!(named(from_end), named(from_start));
    }

    /// `records` as (batch, data) encoded from seq 1 after the header, the
    /// last `cut` lines left out (a batch whose end never arrived).
    fn log_of(records: &[(Option<u64>, String)], cut: usize) -> Vec<u8> {
        let session = id("s");
        let mut bytes = header("s").encode().into_bytes();
        for (index, (batch, data)) in records[..records.len() - cut].iter().enumerate() {
            let record = EventRecord::new(index as u64 + 1, 10, *batch, "note/test", data);
            bytes.extend(record.encode(&session).as_bytes());
        }
        bytes
    }

    fn seqs(events: &[EventRecord]) -> Vec<u64> {
        events.iter().map(EventRecord::seq).collect()
    }

    /// The 1-based line that starts at `offset` of `bytes`.
    fn line_of(bytes: &[u8], offset: u64) -> u64 {
        bytes[..offset as usize]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64
            + 1
    }

    #[test]
    fn damage_read_from_the_end_is_named_by_its_line_in_the_file_whatever_was_lost_before() {
        // Ten lone events whose seq 3 line is lost (damage before the window
        // that a read from the end does not see): from there on the line of
        // seq K is K, not K + 1.
        let whole = log(&[1; 10], 8, b"");
        let text = String::from_utf8_lossy(&whole).into_owned();
        let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
        lines.remove(3);
        let short = lines.concat().into_bytes();

        // A torn tail after seq 10: line 11, not the 12 that seq 10 implies.
        let mut torn_log = short.clone();
        torn_log.extend_from_slice(b"{\"seq\":");
        let (events, last_seq, torn) = backward(&torn_log, 2).expect("read");
        assert_eq!((seqs(&events), last_seq), (vec![9, 10], 10));
        let torn = torn.expect("a torn tail");
        assert_eq!(torn.position.line, 11);
        assert_eq!(torn.position.line, line_of(&torn_log, torn.position.offset));

        // A damaged line between seq 8 and seq 10 (seq 9's, garbled): line 9.
        let text = String::from_utf8_lossy(&short).into_owned();
        let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
        lines[8] = "garbage\n".to_owned();
        let garbled = lines.concat().into_bytes();
        let error = backward(&garbled, 3).expect_err("corruption in the window");
        assert!(error.contains("corrupt at line 9 (byte offset "), "{error}");
    }

    #[test]
    fn a_batch_start_chunks_before_the_records_shown_is_found_and_its_torn_end_reported() {
        // Five lone events, then a batch of 300 records of about 1 KiB
        // (several read chunks) whose last 100 never arrived.
        let data = format!("{{\"text\":\"{}\"}}", "x".repeat(1_000));
        let mut records: Vec<(Option<u64>, String)> = vec![(None, data.clone()); 5];
        records.push((Some(300), data.clone()));
        records.extend(vec![(None, data); 299]);
        let bytes = log_of(&records, 100);
        let (events, last_seq, torn) = backward(&bytes, 3).expect("read");
        assert_eq!(seqs(&events), [3, 4, 5]);
        assert_eq!(last_seq, 5);
        let torn = torn.expect("the unfinished batch is a torn tail");
        assert_eq!((torn.position.line, torn.dropped_records), (7, 200));
        assert!(torn.bytes > 2 * CHUNK_BYTES as u64, "{}", torn.bytes);
        assert_eq!(backward(&bytes, 3), forward(&bytes, 3));
        // Whole, the batch is shown as it is.
        let whole = log_of(&records, 0);
        let (events, last_seq, torn) = backward(&whole, 3).expect("read");
        assert_eq!(
            (seqs(&events), last_seq, torn),
            (vec![303, 304, 305], 305, None)
        );
    }

    #[test]
    fn batch_as_a_key_inside_event_data_neither_starts_a_batch_nor_stops_the_look_back() {
        // A lone event whose data has a "batch" key, then a batch of six
        // whose third member's data has one too, its last two records
        // missing: the last record, read from the end, is inside the batch
        // and the member with the key lies between it and the batch start.
        let plain = r#"{"text":"x"}"#.to_owned();
        let keyed = r#"{"batch":40,"text":"x"}"#.to_owned();
        let mut records = vec![(None, plain.clone()), (None, keyed.clone())];
        records.push((Some(6), plain.clone()));
        records.extend([
            (None, plain.clone()),
            (None, keyed.clone()),
            (None, plain.clone()),
            (None, plain.clone()),
            (None, plain.clone()),
        ]);
        let torn = log_of(&records, 2);
        let (events, last_seq, tail) = backward(&torn, 1).expect("read");
        assert_eq!(seqs(&events), [2]);
        assert_eq!(last_seq, 2);
        let tail = tail.expect("the unfinished batch is a torn tail");
        assert_eq!((tail.position.line, tail.dropped_records), (4, 4));
        assert_eq!(backward(&torn, 1), forward(&torn, 1));
        // Whole, the batch's last record is shown.
        let whole = log_of(&records, 0);
        let (events, last_seq, tail) = backward(&whole, 1).expect("read");
        assert_eq!((seqs(&events), last_seq, tail), (vec![8], 8, None));
    }

    #[test]
    fn a_batch_whose_key_is_spelled_with_an_escape_is_found_from_the_end() {
        // Two lone events, then a batch of four whose first record spells
        // its key `"b\u0061tch"` (a reader accepts any spelling: the CRC
        // pins the bytes), its last record missing.
        let plain = r#"{"text":"x"}"#.to_owned();
        let mut records = vec![(None, plain.clone()), (None, plain.clone())];
        records.push((Some(4), plain.clone()));
        records.extend(vec![(None, plain); 3]);
        let respelled: Vec<u8> = log_of(&records, 1)
            .split_inclusive(|byte| *byte == b'\n')
            .flat_map(|line| {
                let text = String::from_utf8(line.to_vec()).expect("utf-8");
                if !text.contains(r#""batch":"#) {
                    return text.into_bytes();
                }
                let body = text
                    .rsplit_once(r#","crc":"#)
                    .expect("a record line")
                    .0
                    .replace(r#""batch":"#, r#""b\u0061tch":"#);
                encode_line(&id("s"), &body).into_bytes()
            })
            .collect();
        assert!(respelled.windows(7).any(|bytes| bytes == br"b\u0061"));
        let (events, last_seq, tail) = backward(&respelled, 1).expect("read");
        assert_eq!((seqs(&events), last_seq), (vec![2], 2));
        let tail = tail.expect("the unfinished batch is a torn tail");
        assert_eq!((tail.position.line, tail.dropped_records), (4, 3));
        assert_eq!(backward(&respelled, 2), forward(&respelled, 2));
    }

    #[test]
    fn a_batch_whose_first_record_is_damaged_is_reported_not_shown_in_part() {
        // Two lone events, then a batch of four whose first record's CRC
        // fails (its data changed after it was written).
        let plain = r#"{"text":"x"}"#.to_owned();
        let mut records = vec![(None, plain.clone()), (None, plain.clone())];
        records.push((Some(4), plain.clone()));
        records.extend(vec![(None, plain); 3]);
        let whole = log_of(&records, 0);
        let text = String::from_utf8(whole).expect("utf-8");
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert!(lines[3].contains(r#""batch":4"#), "{}", lines[3]);
        let damaged = lines
            .iter()
            .enumerate()
            .map(|(index, line)| match index {
                3 => line.replacen(r#""x""#, r#""y""#, 1),
                _ => (*line).to_owned(),
            })
            .collect::<String>()
            .into_bytes();
        let full = forward(&damaged, 2).expect_err("corrupt");
        assert!(full.contains("corrupt at line 4"), "{full}");
        for count in [1, 2, 3] {
            let from_end = backward(&damaged, count).expect_err("the damaged batch start");
            assert!(from_end.ends_with(&full), "{count}: {from_end}\n{full}");
        }
    }

    #[test]
    fn corruption_inside_what_is_read_is_reported_where_a_full_read_reports_it() {
        let bytes = log(&[1; 6], 8, b"");
        // Damage on line 5 (seq 4), followed by intact records.
        let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
        let mut damaged = Vec::new();
        for (index, line) in lines.iter().enumerate() {
            if index == 4 {
                damaged.extend_from_slice(&line[..line.len() - 3]);
                damaged.extend_from_slice(b"x}\n");
            } else {
                damaged.extend_from_slice(line);
            }
        }
        let full = forward(&damaged, 3).expect_err("corrupt");
        assert!(
            full.starts_with("s.jsonl: the log is corrupt at line 5 (byte offset 450)"),
            "{full}"
        );
        let from_end = backward(&damaged, 3).expect_err("corrupt");
        assert!(from_end.ends_with(&full), "{from_end}\n{full}");
        // The last two records do not reach the damage: not read, not reported.
        let last_two = backward(&damaged, 2).expect("read");
        assert_eq!(
            last_two.0.iter().map(EventRecord::seq).collect::<Vec<_>>(),
            [5, 6]
        );
    }
}
