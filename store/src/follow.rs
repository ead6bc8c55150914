//! `LogFollower`: follows one JSONL log as it grows, reading only the bytes
//! appended since the last look.
//!
//! A follower keeps the scanner as it stood at the end of the good prefix
//! it read (the last complete event or batch), that offset, and the bytes
//! of the line that ends there (its *anchor*). Each poll opens the log
//! afresh (no symlink followed) and compares what it finds with what it
//! read:
//!
//! - the same file (device and inode), the same length and modification
//!   time as when it last read to the end: nothing new, and nothing is read;
//! - the same file, at least as long as the good prefix read, and the
//!   anchor's bytes still in place: reading resumes at the end of the good
//!   prefix. A writer only ever appends there, or cuts a torn tail that
//!   starts there or later, so what was read still stands;
//! - anything else (another file under the name, a file shorter than what
//!   was read, an anchor rewritten): the log is read again from its start,
//!   and events below the next seq to deliver are skipped, so no event is
//!   delivered twice or skipped. What is read again must be what was read
//!   before: the same header and the same records (a digest of their
//!   bodies, kept as they are read). A log of another session put in its
//!   place, or one whose earlier records were rewritten or removed, is
//!   `HistoryChanged`, never spliced onto what was delivered.
//!
//! What follows the good prefix (a line still being written, an unfinished
//! batch, damage no intact record follows yet) is not delivered and is read
//! again at the next poll, so an append in flight is never taken for a torn
//! tail, and a batch is delivered whole. Corruption (damage that an intact
//! record follows, a seq gap, a malformed record) is an error, as for every
//! reader.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use std::hash::Hasher;

use sessionlog_schema::{EventRecord, LogScanner, SessionHeader, SessionId};

use crate::last::LastEvents;
use crate::reader::{open_log_for_reading, Line, LineReader};
use crate::StoreError;

/// The read buffer of a poll: appends are small, a first read is not.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// How far back from a log's last event a follower starting at a seq reads
/// from the end ([`LogFollower::from_seq_near_the_end`]); further back it
/// reads from the start, which costs about as much.
const FROM_THE_END_EVENTS: u64 = 4096;

/// How many reads from the end a follower starting at a seq makes, each
/// from the end the one before found, before it reads the log from its
/// start instead: a writer appending as it reads moves the end on.
const FROM_THE_END_READS: u32 = 4;

/// Follows one JSONL log. See the module docs.
#[derive(Debug)]
pub struct LogFollower {
    path: PathBuf,
    expected_id: Option<SessionId>,
    /// The seq of the next event to deliver.
    next_seq: u64,
    /// Events read and not yet delivered.
    queue: VecDeque<EventRecord>,
    /// What was read of the log; `None` before the first read.
    read: Option<ReadState>,
    /// Bytes read from the log so far, anchors included.
    bytes_read: u64,
    /// The header and the records of the good prefix last read, which a
    /// read from the start must find again.
    known: Option<(SessionHeader, Chain)>,
}

/// A digest of the bodies of records `from`..=`seq`, chained in seq order
/// (from 1 for a follower that read the log from its start; from the
/// first event it was handed for one that went on from a read of the
/// log's end, [`LogFollower::after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Chain {
    from: u64,
    seq: u64,
    digest: u64,
}

impl Chain {
    /// The digest of no record yet, which counts records from seq `from`.
    fn counting_from(from: u64) -> Chain {
        Chain {
            from,
            ..Chain::default()
        }
    }

    fn add(&mut self, record: &EventRecord) {
        if record.seq() >= self.from {
            let mut hasher = std::hash::DefaultHasher::new();
            hasher.write_u64(self.digest);
            hasher.write(record.body().as_bytes());
            self.digest = hasher.finish();
        }
        self.seq = record.seq();
    }
}

/// What a read of a log from its start has read, for a follower to go on
/// from ([`LogFollower::after_read`]): its header, and a digest of the
/// bodies of its records, given in seq order as they are read.
#[derive(Debug, Clone)]
pub struct ReadSoFar {
    header: SessionHeader,
    chain: Chain,
}

impl ReadSoFar {
    /// A read that has read the header `header` and no record yet.
    pub fn new(header: SessionHeader) -> ReadSoFar {
        ReadSoFar {
            header,
            chain: Chain::counting_from(1),
        }
    }

    /// Notes the next record read (seqs from 1, in order).
    pub fn add(&mut self, record: &EventRecord) {
        self.chain.add(record);
    }
}

/// How far a follower read, and what it needs to check before going on.
#[derive(Debug)]
struct ReadState {
    /// Device and inode of the file read.
    file: (u64, u64),
    /// The scanner at the end of the good prefix read.
    scanner: LogScanner,
    /// The line that ends the good prefix read, with its `\n`.
    anchor: Vec<u8>,
    /// The records of the good prefix read.
    chain: Chain,
    /// For a read from the start that replaces an earlier one: what that
    /// one had read, which this one must find again.
    must_match: Option<(SessionHeader, Chain)>,
    /// The file's length and modification time when a read last reached
    /// its end; `None` while more is left to read.
    caught_up: Option<(u64, Option<SystemTime>)>,
}

impl ReadState {
    fn fresh(file: (u64, u64), expected_id: Option<SessionId>, chain: Chain) -> ReadState {
        ReadState {
            file,
            scanner: LogScanner::new(expected_id),
            anchor: Vec::new(),
            chain,
            must_match: None,
            caught_up: None,
        }
    }

    /// Whether the bytes read up to the end of the good prefix can still be
    /// trusted in `file` of length `len`.
    fn still_holds(&self, file: &File, len: u64) -> Result<bool, std::io::Error> {
        let end = self.scanner.good_bytes();
        if len < end {
            return Ok(false);
        }
        let mut found = vec![0; self.anchor.len()];
        file.read_exact_at(&mut found, end - self.anchor.len() as u64)?;
        Ok(found == self.anchor)
    }
}

impl LogFollower {
    /// A follower of the log at `path` that delivers its events from
    /// `from_seq` on. With `expected_id`, the header must name that session.
    /// Nothing is read before the first [`poll`](Self::poll).
    pub fn new(path: &Path, expected_id: Option<SessionId>, from_seq: u64) -> LogFollower {
        LogFollower {
            path: path.to_owned(),
            expected_id,
            next_seq: from_seq.max(1),
            queue: VecDeque::new(),
            read: None,
            bytes_read: 0,
            known: None,
        }
    }

    /// A follower that goes on where `last` ended, `last` being what
    /// [`read_last_events`] read of the log at `path` (with the same
    /// `expected_id`): it delivers the events after `last.last_seq`, and
    /// its first poll reads only what was appended since, once the line
    /// that ended `last`'s good prefix is found still in place. So following
    /// a long log from its end costs what was read of its end, not the log.
    ///
    /// Should the file have been replaced or cut in the meantime, the log
    /// is read again from its start, as any follower reads it then, and
    /// must hold the header and the events `last` holds. A `last` whose
    /// good prefix held no event is followed from the log's start.
    ///
    /// ```
    /// use sessionlog_schema::{SessionHeader, SessionId, TurnEnd, TurnStart};
    /// use sessionlog_store::{read_last_events, Durability, JsonlStore, LogFollower, WriterOptions};
    ///
    /// let folder = tempfile::tempdir()?;
    /// let store = JsonlStore::create_folder(folder.path())?;
    /// let id = SessionId::parse("a")?;
    /// store.create(&SessionHeader::root(id.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
    /// let mut writer = store.open_writer(&id, WriterOptions::default())?;
    /// writer.append(TurnStart::new("t1").into(), None)?;
    /// let path = store.log_path(&id);
    /// let last = read_last_events(&path, Some(id.clone()), 1)?;
    /// let mut follower = LogFollower::after(&path, Some(id), &last);
    /// assert!(follower.poll(100)?.is_empty(), "seq 1 was read already");
    /// writer.append(TurnEnd::new("t1").into(), None)?;
    /// let new = follower.poll(100)?;
    /// assert_eq!(new.iter().map(|record| record.seq()).collect::<Vec<_>>(), [2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`read_last_events`]: crate::read_last_events
    pub fn after(path: &Path, expected_id: Option<SessionId>, last: &LastEvents) -> LogFollower {
        let mut follower = LogFollower::new(path, expected_id, last.last_seq + 1);
        let Some(end) = &last.end else {
            return follower;
        };
        let mut chain = Chain::counting_from(
            last.events
                .first()
                .map_or(last.last_seq + 1, EventRecord::seq),
        );
        for record in &last.events {
            chain.add(record);
        }
        chain.seq = last.last_seq;
        follower.known = Some((last.header.header.clone(), chain));
        follower.read = Some(ReadState {
            file: end.file,
            scanner: end.scanner.clone(),
            anchor: end.anchor.clone(),
            chain,
            must_match: None,
            caught_up: None,
        });
        follower
    }

    /// A follower that goes on after `read`, a read of the log at `path`
    /// from its start (with the same `expected_id`) through its good
    /// prefix: it delivers the events from `from_seq` on that `read` did
    /// not read. Its first poll reads the log from its start again and must
    /// find there the header and the records `read` read: a log of another
    /// history put in its place meanwhile is `HistoryChanged`, never
    /// spliced onto what was read.
    pub fn after_read(
        path: &Path,
        expected_id: Option<SessionId>,
        read: &ReadSoFar,
        from_seq: u64,
    ) -> LogFollower {
        let next_seq = from_seq.max(read.chain.seq + 1);
        let mut follower = LogFollower::new(path, expected_id, next_seq);
        follower.known = Some((read.header.clone(), read.chain));
        follower
    }

    /// A follower of the log at `path` that delivers its events from
    /// `from_seq` on, reading the log from its end when `from_seq` is past
    /// its last event or within its last 4,096: the events from `from_seq`
    /// on are read from the end
    /// ([`read_last_events`](crate::read_last_events)) and the follower
    /// goes on from there ([`after`](Self::after)), so following a long
    /// session from about where it is costs what is read of its end.
    /// Further back, the log is read from its start at the first poll. A
    /// writer appending meanwhile never makes it skip an event: a read from
    /// the end that no longer reaches back to `from_seq` is made again.
    pub fn from_seq_near_the_end(
        path: &Path,
        expected_id: Option<SessionId>,
        from_seq: u64,
    ) -> Result<LogFollower, StoreError> {
        if from_seq <= 1 {
            return Ok(LogFollower::new(path, expected_id, from_seq));
        }
        let end = crate::read_last_events(path, expected_id.clone(), 0)?;
        // A writer appending between the read of the last seq and the read
        // of the events from `from_seq` moves the end on: that read must
        // still reach back to `from_seq`, or it is made again, asking for
        // twice as many events as the end it found needs (and after a few
        // misses, the log is read from its start).
        let mut wanted = match end.last_seq.checked_sub(from_seq) {
            None => end.last_seq,
            Some(before) if before < FROM_THE_END_EVENTS => before + 1,
            Some(_) => return Ok(LogFollower::new(path, expected_id, from_seq)),
        };
        let mut reads = 0;
        let last = loop {
            if end.last_seq < from_seq {
                break end;
            }
            if reads == FROM_THE_END_READS || wanted > 2 * FROM_THE_END_EVENTS {
                return Ok(LogFollower::new(path, expected_id, from_seq));
            }
            reads += 1;
            let read = crate::read_last_events(path, expected_id.clone(), wanted as usize)?;
            let reaches = read
                .events
                .first()
                .is_some_and(|first| first.seq() <= from_seq);
            if reaches || read.last_seq < from_seq {
                break read;
            }
            wanted = 2 * (read.last_seq - from_seq + 1);
        };
        let mut follower = LogFollower::after(path, expected_id, &last);
        follower.queue = last
            .events
            .into_iter()
            .filter(|record| record.seq() >= from_seq)
            .collect();
        follower.next_seq = follower.next_seq.max(from_seq);
        Ok(follower)
    }

    /// The seq of the next event to deliver.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// How many bytes this follower has read from the log, the checks of
    /// what it read before included.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Up to `max` events not delivered yet, in seq order: those of the
    /// good prefix read so far, then those appended since the last poll.
    /// Empty when there is nothing new. A log missing after it was read once
    /// is looked for again at the next poll (between an unlink and the
    /// rename of a new file into place); missing at the first poll, it is
    /// an error.
    ///
    /// Corruption is reported only when a second read, from the end of the
    /// good prefix checked before, meets it again: a writer cutting a torn
    /// tail and appending while a poll reads can show that poll a new line
    /// after the old damage.
    ///
    /// ```
    /// use sessionlog_schema::{SessionHeader, SessionId, TurnStart};
    /// use sessionlog_store::{Durability, JsonlStore, WriterOptions};
    ///
    /// let folder = tempfile::tempdir()?;
    /// let store = JsonlStore::create_folder(folder.path())?;
    /// let id = SessionId::parse("a")?;
    /// store.create(&SessionHeader::root(id.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
    /// let mut follower = store.follower(&id, 1)?;
    /// assert!(follower.poll(100)?.is_empty(), "nothing yet");
    /// let mut writer = store.open_writer(&id, WriterOptions::default())?;
    /// writer.append(TurnStart::new("t1").into(), None)?;
    /// let new = follower.poll(100)?;
    /// assert_eq!(new.iter().map(|record| record.seq()).collect::<Vec<_>>(), [1]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll(&mut self, max: usize) -> Result<Vec<EventRecord>, StoreError> {
        if self.queue.len() < max {
            match self.read_more(max) {
                Err(StoreError::Corrupt { .. }) => self.read_more(max)?,
                other => other?,
            }
        }
        let count = self.queue.len().min(max);
        Ok(self.queue.drain(..count).collect())
    }

    fn read_more(&mut self, max: usize) -> Result<(), StoreError> {
        let file = match open_log_for_reading(&self.path) {
            Ok(file) => file,
            Err(StoreError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && self.read.is_some() =>
            {
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        let metadata = file
            .metadata()
            .map_err(|source| StoreError::io("stat", &self.path, source))?;
        let identity = (metadata.dev(), metadata.ino());
        let stamp = (metadata.len(), metadata.modified().ok());
        let mut state = match self.read.take() {
            Some(state) if state.file == identity => {
                if state.caught_up == Some(stamp) {
                    self.read = Some(state);
                    return Ok(());
                }
                let holds = state
                    .still_holds(&file, metadata.len())
                    .map_err(|source| StoreError::io("read", &self.path, source))?;
                self.bytes_read += state.anchor.len() as u64;
                if holds {
                    state
                } else {
                    self.fresh_read(identity)
                }
            }
            _ => self.fresh_read(identity),
        };
        let outcome = self.read_from(file, &mut state, max, stamp);
        if outcome.is_ok() {
            if let Some(header) = state.scanner.header() {
                self.known = Some((header.clone(), state.chain));
            }
        }
        self.read = Some(state);
        outcome
    }

    /// A read from the start of the file `identity`, which must find again
    /// what was read before, if anything was.
    fn fresh_read(&self, identity: (u64, u64)) -> ReadState {
        let from = self.known.as_ref().map_or(0, |(_, known)| known.from);
        let mut state = ReadState::fresh(
            identity,
            self.expected_id.clone(),
            Chain::counting_from(from),
        );
        state.must_match = self.known.clone();
        state
    }

    fn history_changed(&self, reason: String) -> StoreError {
        StoreError::HistoryChanged {
            path: self.path.clone(),
            reason,
        }
    }

    /// Checks a read from the start against what was read before: the same
    /// header, and the same records up to the last one read before (`at_end`:
    /// the read reached the end of the file, which must hold them all).
    fn check_history(
        &self,
        must_match: Option<&(SessionHeader, Chain)>,
        found: Option<&SessionHeader>,
        chain: Chain,
        at_end: bool,
    ) -> Result<(), StoreError> {
        let Some((header, known)) = must_match else {
            return Ok(());
        };
        if let Some(found) = found {
            if found != header {
                return Err(self.history_changed(format!(
                    "the file now holds another header (session {}, created at {}) than the one read (session {}, created at {})",
                    found.id, found.created_at, header.id, header.created_at
                )));
            }
        }
        if chain.seq == known.seq && chain.digest != known.digest {
            return Err(self.history_changed(format!(
                "the records up to seq {} differ from those read before: earlier records were rewritten",
                known.seq
            )));
        }
        if at_end && chain.seq < known.seq {
            return Err(self.history_changed(format!(
                "the file now ends at seq {} but seq {} was read from it: records were removed",
                chain.seq, known.seq
            )));
        }
        Ok(())
    }

    /// Reads lines from the end of `state`'s good prefix until the end of
    /// the file, or until `max` events wait, and moves `state` to the end of
    /// the good prefix it then holds.
    fn read_from(
        &mut self,
        mut file: File,
        state: &mut ReadState,
        max: usize,
        stamp: (u64, Option<SystemTime>),
    ) -> Result<(), StoreError> {
        let start = state.scanner.good_bytes();
        file.seek(SeekFrom::Start(start))
            .map_err(|source| StoreError::io("seek", &self.path, source))?;
        let mut lines =
            LineReader::starting_at(BufReader::with_capacity(READ_BUFFER_BYTES, file), start);
        let mut scanner = state.scanner.clone();
        let mut chain = state.chain;
        // The line that now ends the good prefix, once one read does.
        let mut anchor: Option<Vec<u8>> = None;
        let mut ready = Vec::new();
        let mut reached_end = true;
        while let Some((offset, line)) = lines
            .next_line()
            .map_err(|source| StoreError::io("read", &self.path, source))?
        {
            self.bytes_read += lines.offset() - offset;
            let pushed = match line {
                // A line without its `\n` is an append still being written:
                // leave it for the next poll. Not line 1: a log is published
                // whole, and the scanner refuses a header without its `\n`.
                Line::Complete { terminated: false }
                | Line::Oversized {
                    terminated: false, ..
                } if scanner.header().is_some() => break,
                Line::Complete { terminated } => {
                    scanner.push_line(lines.line(), terminated, offset, &mut ready)
                }
                Line::Oversized { len, terminated } => {
                    scanner.push_oversized_line(len, terminated, offset)
                }
            };
            // On corruption, what was delivered stays delivered (it is the
            // good prefix) and the state stays at its last check.
            pushed.map_err(|corruption| StoreError::Corrupt {
                path: self.path.clone(),
                corruption,
            })?;
            if scanner.good_bytes() == lines.offset() {
                let anchor = anchor.get_or_insert_with(Vec::new);
                anchor.clear();
                anchor.extend_from_slice(lines.line());
                anchor.push(b'\n');
            }
            let must_match = state.must_match.as_ref();
            self.check_history(must_match, scanner.header(), chain, false)?;
            for record in ready.drain(..) {
                chain.add(&record);
                self.check_history(must_match, None, chain, false)?;
                if record.seq() >= self.next_seq {
                    self.next_seq = record.seq() + 1;
                    self.queue.push_back(record);
                }
            }
            if self.queue.len() >= max && scanner.good_bytes() == lines.offset() {
                reached_end = false;
                break;
            }
        }
        if scanner.header().is_none() {
            // Only an empty file leaves no header (a line 1 was judged
            // above); the scanner names it.
            return match scanner.finish() {
                Err(corruption) => Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    corruption,
                }),
                Ok(_) => unreachable!("a scan without a header does not finish"),
            };
        }
        state.scanner = scanner.at_good_prefix_end();
        self.check_history(state.must_match.as_ref(), None, chain, reached_end)?;
        state.chain = chain;
        if state
            .must_match
            .as_ref()
            .is_some_and(|(_, known)| chain.seq >= known.seq)
        {
            state.must_match = None;
        }
        if let Some(anchor) = anchor {
            state.anchor = anchor;
        }
        state.caught_up = reached_end.then_some(stamp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use sessionlog_schema::encode_line;

    use super::*;
    use crate::store::tests::{header, id, ok, record};
    use crate::writer::Durability;

    fn line(session: &str, record: &EventRecord) -> String {
        encode_line(&id(session), record.body())
    }

    fn header_line(session: &str) -> String {
        encode_line(&id(session), &header(session).to_body())
    }

    fn note(seq: u64) -> EventRecord {
        record(seq, "note/test", &format!(r#"{{"n":{seq}}}"#))
    }

    fn batch_member(seq: u64, batch: Option<u64>) -> EventRecord {
        EventRecord::new(seq, 1_700_000_000_100, batch, "note/test", r#"{"b":1}"#)
    }

    /// A log of session `a` with events 1..=`events`.
    fn log(events: u64) -> String {
        let mut text = header_line("a");
        for seq in 1..=events {
            text.push_str(&line("a", &note(seq)));
        }
        text
    }

    fn append(path: &Path, text: &str) {
        let mut file = ok(std::fs::OpenOptions::new().append(true).open(path));
        ok(file.write_all(text.as_bytes()));
    }

    fn seqs(records: &[EventRecord]) -> Vec<u64> {
        records.iter().map(EventRecord::seq).collect()
    }

    fn setup(events: u64) -> (tempfile::TempDir, PathBuf) {
        let folder = ok(tempfile::tempdir());
        let path = folder.path().join("a.jsonl");
        ok(std::fs::write(&path, log(events)));
        (folder, path)
    }

    /// A follower going on after a read from the start checks what that
    /// read read: the same log goes on where it ended, another history
    /// put in its place before the first poll is refused, never spliced
    /// onto what was read.
    #[test]
    fn a_follower_after_a_read_from_the_start_finds_that_read_again() {
        let (folder, path) = setup(3);
        let read_through = |path: &Path| {
            let mut reader = ok(crate::LogReader::open(path, Some(id("a"))));
            let mut read = ReadSoFar::new(reader.header().clone());
            while let Some(record) = ok(reader.next_event()) {
                read.add(&record);
            }
            read
        };
        let read = read_through(&path);
        append(&path, &line("a", &note(4)));
        let mut follower = LogFollower::after_read(&path, Some(id("a")), &read, 2);
        assert_eq!(seqs(&ok(follower.poll(100))), [4], "only what was not read");

        // Another history of session `a` (other records, one more of
        // them), renamed into place between the read and the first poll.
        let read = read_through(&path);
        let other = folder.path().join("other.jsonl");
        let mut text = header_line("a");
        for seq in 1..=5 {
            let changed = record(seq, "note/test", &format!(r#"{{"other":{seq}}}"#));
            text.push_str(&line("a", &changed));
        }
        ok(std::fs::write(&other, text));
        ok(std::fs::rename(&other, &path));
        let mut follower = LogFollower::after_read(&path, Some(id("a")), &read, 1);
        let polled = follower.poll(100);
        assert!(
            matches!(&polled, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("seq 4")),
            "{polled:?}"
        );
    }

    #[test]
    fn a_poll_reads_only_what_was_appended() {
        let (_folder, path) = setup(3);
        let mut follower = LogFollower::new(&path, Some(id("a")), 2);
        assert_eq!(seqs(&ok(follower.poll(100))), [2, 3]);
        let after_first = follower.bytes_read();
        assert_eq!(after_first, log(3).len() as u64);
        assert!(ok(follower.poll(100)).is_empty());
        assert_eq!(
            follower.bytes_read(),
            after_first,
            "an unchanged log is not read"
        );

        let appended = format!("{}{}", line("a", &note(4)), line("a", &note(5)));
        append(&path, &appended);
        assert_eq!(seqs(&ok(follower.poll(100))), [4, 5]);
        let anchor = line("a", &note(3)).len() as u64;
        assert_eq!(
            follower.bytes_read(),
            after_first + anchor + appended.len() as u64,
            "the check of the last line read, then the new lines only"
        );
    }

    #[test]
    fn at_most_max_events_a_poll_and_the_rest_at_the_next() {
        let (_folder, path) = setup(5);
        let mut follower = LogFollower::new(&path, None, 1);
        assert_eq!(seqs(&ok(follower.poll(2))), [1, 2]);
        assert_eq!(seqs(&ok(follower.poll(2))), [3, 4]);
        assert_eq!(seqs(&ok(follower.poll(2))), [5]);
        assert!(ok(follower.poll(2)).is_empty());
    }

    #[test]
    fn a_line_being_written_and_an_unfinished_batch_wait_for_the_rest() {
        let (_folder, path) = setup(1);
        let mut follower = LogFollower::new(&path, Some(id("a")), 1);
        assert_eq!(seqs(&ok(follower.poll(100))), [1]);

        let next = line("a", &note(2));
        let (head, rest) = next.split_at(next.len() / 2);
        append(&path, head);
        assert!(
            ok(follower.poll(100)).is_empty(),
            "half a line is not an event"
        );
        append(&path, rest);
        assert_eq!(seqs(&ok(follower.poll(100))), [2]);

        append(&path, &line("a", &batch_member(3, Some(3))));
        append(&path, &line("a", &batch_member(4, None)));
        assert!(
            ok(follower.poll(100)).is_empty(),
            "a batch is delivered whole"
        );
        append(&path, &line("a", &batch_member(5, None)));
        assert_eq!(seqs(&ok(follower.poll(100))), [3, 4, 5]);
    }

    #[test]
    fn a_torn_tail_cut_by_a_writer_then_new_appends_are_followed() {
        let (_folder, path) = setup(2);
        let mut follower = LogFollower::new(&path, Some(id("a")), 1);
        assert_eq!(seqs(&ok(follower.poll(100))), [1, 2]);
        append(&path, "{\"seq\":3,\"ts\":1,\"ty");
        assert!(ok(follower.poll(100)).is_empty());
        // A writer opening the log cuts the torn tail and appends.
        let good = log(2).len() as u64;
        ok(ok(std::fs::OpenOptions::new().write(true).open(&path)).set_len(good));
        append(
            &path,
            &format!("{}{}", line("a", &note(3)), line("a", &note(4))),
        );
        assert_eq!(seqs(&ok(follower.poll(100))), [3, 4]);
    }

    #[test]
    fn a_log_replaced_or_rewritten_is_read_again_without_repeating_an_event() {
        let (folder, path) = setup(3);
        let mut follower = LogFollower::new(&path, Some(id("a")), 1);
        assert_eq!(seqs(&ok(follower.poll(100))), [1, 2, 3]);

        let replacement = folder.path().join(".a.jsonl.new");
        ok(std::fs::write(&replacement, log(5)));
        ok(std::fs::rename(&replacement, &path));
        assert_eq!(
            seqs(&ok(follower.poll(100))),
            [4, 5],
            "another file: read from its start"
        );

        // Rewritten in place, the same length: the line read last differs.
        let mut text = log(5);
        let last = line("a", &note(5));
        let changed = line(
            "a",
            &EventRecord::new(5, 1_700_000_000_999, None, "note/test", r#"{"n":5}"#),
        );
        assert_eq!(last.len(), changed.len());
        text.replace_range(text.len() - last.len().., &changed);
        text.push_str(&line("a", &note(6)));
        ok(std::fs::write(&path, &text));
        let rewritten = follower.poll(100);
        assert!(
            matches!(&rewritten, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("seq 5")),
            "a rewritten record is reported, not spliced: {rewritten:?}"
        );
    }

    #[test]
    fn a_log_of_another_session_or_with_fewer_records_put_in_place_is_reported() {
        let (folder, path) = setup(3);
        let mut follower = LogFollower::new(&path, None, 1);
        assert_eq!(seqs(&ok(follower.poll(100))), [1, 2, 3]);
        let mut other = header_line("b");
        for seq in 1..=5 {
            other.push_str(&line("b", &note(seq)));
        }
        let replacement = folder.path().join(".a.jsonl.new");
        ok(std::fs::write(&replacement, other));
        ok(std::fs::rename(&replacement, &path));
        let replaced = follower.poll(100);
        assert!(
            matches!(&replaced, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("another header")),
            "{replaced:?}"
        );

        let (_folder, path) = setup(3);
        let mut follower = LogFollower::new(&path, None, 1);
        assert_eq!(seqs(&ok(follower.poll(100))), [1, 2, 3]);
        ok(std::fs::write(&path, log(2)));
        let shorter = follower.poll(100);
        assert!(
            matches!(&shorter, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("removed")),
            "{shorter:?}"
        );
    }

    #[test]
    fn corruption_after_what_was_read_is_an_error() {
        let (_folder, path) = setup(1);
        let mut follower = LogFollower::new(&path, Some(id("a")), 1);
        assert_eq!(seqs(&ok(follower.poll(100))), [1]);
        let mut damaged = line("a", &note(2));
        damaged.replace_range(2..5, "XXX");
        append(&path, &damaged);
        assert!(
            ok(follower.poll(100)).is_empty(),
            "damage alone may be a torn tail"
        );
        append(&path, &line("a", &note(3)));
        let error = follower.poll(100);
        match error {
            Err(StoreError::Corrupt { corruption, .. }) => {
                assert_eq!(corruption.position.line, 3, "{corruption}");
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn a_follower_polling_during_appends_sees_every_event_once_in_order() {
        use crate::store::tests::{buffered, jsonl_store, note};
        let folder = ok(tempfile::tempdir());
        let store = jsonl_store(folder.path());
        ok(store.create_session(&header("a"), &[], Durability::Buffered));
        let path = store.session_path(&id("a"));
        let total: u64 = 20_000;
        let done = std::sync::atomic::AtomicBool::new(false);
        let delivered = std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut writer = ok(store.open_writer(&id("a"), buffered()));
                let mut appended = 0;
                let mut size = 1;
                while appended < total {
                    let count = size.min(total - appended);
                    let events = (0..count)
                        .map(|n| note(&format!("{appended}+{n}")))
                        .collect();
                    ok(writer.append_batch(events, None));
                    appended += count;
                    size = size % 7 + 1;
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let mut follower = LogFollower::new(&path, Some(id("a")), 1);
            let mut delivered = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let polled = seqs(&ok(follower.poll(64)));
                if finished && polled.is_empty() {
                    break delivered;
                }
                delivered.extend(polled);
                assert!(
                    std::time::Instant::now() < deadline,
                    "stuck at {delivered:?}"
                );
                std::thread::yield_now();
            }
        });
        assert_eq!(delivered, (1..=total).collect::<Vec<_>>());
    }

    /// One step of a log's life as a follower sees it.
    #[derive(Debug, Clone)]
    enum Step {
        /// The next unit (an event, or a batch of this many), written in
        /// pieces cut at these fractions of its bytes.
        Unit { size: u64, cuts: Vec<u8> },
        /// A torn tail: part of a next line, which a writer then cuts off.
        Torn { keep: u8 },
        /// A poll delivering at most this many events.
        Poll { max: usize },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (1..4u64, proptest::collection::vec(any::<u8>(), 0..3))
                .prop_map(|(size, cuts)| Step::Unit { size, cuts }),
            1 => any::<u8>().prop_map(|keep| Step::Torn { keep }),
            3 => (1..6usize).prop_map(|max| Step::Poll { max }),
        ]
    }

    /// The lines of the unit that starts at `seq`.
    fn unit_text(seq: u64, size: u64) -> String {
        (0..size)
            .map(|n| {
                let batch = (size > 1 && n == 0).then_some(size);
                let record = EventRecord::new(seq + n, 1_700_000_000_100, batch, "note/test", "{}");
                line("a", &record)
            })
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever the order of writes, pieces of lines, torn tails cut by
        /// a writer and polls of any size, a follower delivers every event
        /// exactly once, in order, and nothing of a unit not yet whole.
        #[test]
        fn a_follower_delivers_each_event_once_in_order(
            steps in proptest::collection::vec(step(), 1..40),
            start in 0u64..6,
            from_the_end in proptest::option::of(0usize..4),
        ) {
            // A follower of a log of `start` events, from its start or
            // going on from a read of its last events.
            let (_folder, path) = setup(start);
            let mut follower = match from_the_end {
                None => LogFollower::new(&path, Some(id("a")), start + 1),
                Some(count) => {
                    let last = ok(crate::read_last_events(&path, Some(id("a")), count));
                    LogFollower::after(&path, Some(id("a")), &last)
                }
            };
            let mut next_seq = start + 1;
            let mut whole_units_end = vec![0u64];
            let mut delivered = Vec::new();
            // Nothing is delivered of a unit not yet whole in the file (a
            // whole batch may be delivered over two polls of a small max).
            let check = |records: Vec<EventRecord>, delivered: &mut Vec<u64>, ends: &[u64]| {
                delivered.extend(seqs(&records));
                let last = delivered.last().copied().unwrap_or(0);
                let whole = ends.last().copied().unwrap_or(0);
                assert!(last <= whole, "seq {last} delivered, units whole up to {whole}");
            };
            for step in steps {
                match step {
                    Step::Unit { size, cuts } => {
                        let text = unit_text(next_seq, size);
                        let mut points: Vec<usize> = cuts
                            .iter()
                            .map(|cut| usize::from(*cut) * text.len() / 256)
                            .collect();
                        points.sort_unstable();
                        let mut from = 0;
                        for point in points {
                            append(&path, &text[from..point]);
                            from = point;
                            check(ok(follower.poll(usize::MAX)), &mut delivered, &whole_units_end);
                        }
                        append(&path, &text[from..]);
                        next_seq += size;
                        whole_units_end.push(next_seq - 1);
                    }
                    Step::Torn { keep } => {
                        let good = ok(std::fs::metadata(&path)).len();
                        let next = line("a", &note(next_seq));
                        let cut = 1 + usize::from(keep) * (next.len() - 2) / 256;
                        append(&path, &next[..cut]);
                        check(ok(follower.poll(usize::MAX)), &mut delivered, &whole_units_end);
                        let file = ok(std::fs::OpenOptions::new().write(true).open(&path));
                        ok(file.set_len(good));
                    }
                    Step::Poll { max } => {
                        let polled = ok(follower.poll(max));
                        assert!(polled.len() <= max);
                        check(polled, &mut delivered, &whole_units_end);
                    }
                }
            }
            loop {
                let polled = ok(follower.poll(usize::MAX));
                if polled.is_empty() {
                    break;
                }
                delivered.extend(seqs(&polled));
            }
            assert_eq!(delivered, (start + 1..next_seq).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_follower_after_a_read_of_the_end_reads_only_what_comes_next() {
        let (_folder, path) = setup(200);
        let last = ok(crate::read_last_events(&path, Some(id("a")), 3));
        assert_eq!(seqs(&last.events), [198, 199, 200]);
        let mut follower = LogFollower::after(&path, Some(id("a")), &last);
        assert_eq!(follower.next_seq(), 201);
        assert!(ok(follower.poll(100)).is_empty());
        let anchor = line("a", &note(200)).len() as u64;
        assert_eq!(
            follower.bytes_read(),
            anchor,
            "the check of the last line handed over, nothing before it"
        );
        let appended = format!("{}{}", line("a", &note(201)), line("a", &note(202)));
        append(&path, &appended);
        assert_eq!(seqs(&ok(follower.poll(100))), [201, 202]);
        assert_eq!(follower.bytes_read(), 2 * anchor + appended.len() as u64);
    }

    #[test]
    fn a_follower_after_a_read_of_the_end_checks_a_replaced_log_against_it() {
        let replace = |folder: &tempfile::TempDir, path: &Path, text: &str| {
            let replacement = folder.path().join(".a.jsonl.new");
            ok(std::fs::write(&replacement, text));
            ok(std::fs::rename(&replacement, path));
        };
        let follower_of = |path: &Path| {
            let last = ok(crate::read_last_events(path, Some(id("a")), 3));
            LogFollower::after(path, Some(id("a")), &last)
        };

        // The same records and two more, in another file: only the two.
        let (folder, path) = setup(10);
        let mut follower = follower_of(&path);
        replace(&folder, &path, &log(12));
        assert_eq!(seqs(&ok(follower.poll(100))), [11, 12]);

        // One of the records handed over rewritten: reported.
        let (folder, path) = setup(10);
        let mut follower = follower_of(&path);
        let mut text = header_line("a");
        for seq in 1..=12 {
            let record = match seq {
                9 => EventRecord::new(9, 1_700_000_000_999, None, "note/test", r#"{"n":9}"#),
                seq => note(seq),
            };
            text.push_str(&line("a", &record));
        }
        replace(&folder, &path, &text);
        let rewritten = follower.poll(100);
        assert!(
            matches!(&rewritten, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("seq 10")),
            "{rewritten:?}"
        );

        // Fewer records than were handed over: reported.
        let (folder, path) = setup(10);
        let mut follower = follower_of(&path);
        replace(&folder, &path, &log(9));
        let shorter = follower.poll(100);
        assert!(
            matches!(&shorter, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("removed")),
            "{shorter:?}"
        );
    }

    #[test]
    fn a_follower_from_a_seq_near_the_end_reads_the_log_from_there() {
        let (_folder, path) = setup(200);
        let size = ok(std::fs::metadata(&path)).len();
        let mut follower = ok(LogFollower::from_seq_near_the_end(
            &path,
            Some(id("a")),
            198,
        ));
        assert_eq!(seqs(&ok(follower.poll(100))), [198, 199, 200]);
        assert!(
            follower.bytes_read() < size / 10,
            "{} of {size}",
            follower.bytes_read()
        );
        append(&path, &line("a", &note(201)));
        assert_eq!(seqs(&ok(follower.poll(100))), [201]);

        // A seq not written yet: nothing before it.
        let mut ahead = ok(LogFollower::from_seq_near_the_end(
            &path,
            Some(id("a")),
            203,
        ));
        assert!(ok(ahead.poll(100)).is_empty());
        append(
            &path,
            &format!("{}{}", line("a", &note(202)), line("a", &note(203))),
        );
        assert_eq!(seqs(&ok(ahead.poll(100))), [203]);
    }

    /// A writer appending while followers start near the end: each one's
    /// first event is the seq it asked for, never one after it (its read
    /// of the events from there once ended where the log had moved on).
    #[test]
    fn a_follower_from_near_the_end_skips_nothing_while_a_writer_appends() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let (_folder, path) = setup(50);
        let written = AtomicU64::new(50);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut file = ok(std::fs::OpenOptions::new().append(true).open(&path));
                while !stop.load(Ordering::Relaxed) {
                    let seq = written.load(Ordering::Relaxed) + 1;
                    ok(file.write_all(line("a", &note(seq)).as_bytes()));
                    written.store(seq, Ordering::Relaxed);
                    // About a runtime's pace of appends, not a flood that
                    // outruns every read from the end.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            });
            // The writer stops however this thread ends: a failed read
            // must not leave it appending for ever inside the scope.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = Stop(&stop);
            let mut skipped = Vec::new();
            for _ in 0..100 {
                let from = written.load(Ordering::Relaxed) - 5;
                let mut follower = ok(LogFollower::from_seq_near_the_end(
                    &path,
                    Some(id("a")),
                    from,
                ));
                let first = ok(follower.poll(1)).first().map(EventRecord::seq);
                if first != Some(from) {
                    skipped.push((from, first));
                }
            }
            assert!(
                skipped.is_empty(),
                "first events not asked for: {skipped:?}"
            );
        });
    }

    #[test]
    fn a_follower_from_a_seq_far_from_the_end_reads_the_log_from_its_start() {
        let events = FROM_THE_END_EVENTS + 10;
        let (_folder, path) = setup(events);
        let size = ok(std::fs::metadata(&path)).len();
        let mut follower = ok(LogFollower::from_seq_near_the_end(&path, Some(id("a")), 2));
        let delivered = seqs(&ok(follower.poll(usize::MAX)));
        assert_eq!(delivered, (2..=events).collect::<Vec<_>>());
        assert_eq!(follower.bytes_read(), size);
    }

    #[test]
    fn a_read_of_the_end_that_found_no_event_is_followed_from_the_start() {
        let (_folder, path) = setup(0);
        let last = ok(crate::read_last_events(&path, Some(id("a")), 10));
        assert!(last.end.is_none());
        let mut follower = LogFollower::after(&path, Some(id("a")), &last);
        assert!(ok(follower.poll(100)).is_empty());
        append(&path, &line("a", &note(1)));
        assert_eq!(seqs(&ok(follower.poll(100))), [1]);
    }

    #[test]
    fn an_empty_file_or_a_header_without_its_newline_is_refused() {
        let folder = ok(tempfile::tempdir());
        let path = folder.path().join("a.jsonl");
        for (text, reason) in [
            (String::new(), "the file is empty"),
            (header_line("a").trim_end().to_owned(), "has no \\n"),
        ] {
            ok(std::fs::write(&path, text));
            let mut follower = LogFollower::new(&path, Some(id("a")), 1);
            match follower.poll(10) {
                Err(StoreError::Corrupt { corruption, .. }) => {
                    assert_eq!(corruption.position.line, 1);
                    assert!(corruption.reason.contains(reason), "{corruption}");
                }
                other => panic!("expected corruption, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_log_of_another_session_is_refused() {
        let (_folder, path) = setup(1);
        let mut follower = LogFollower::new(&path, Some(id("b")), 1);
        assert!(matches!(follower.poll(10), Err(StoreError::Corrupt { .. })));
    }
}
