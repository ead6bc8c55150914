//! `LogScanner`: the pure state machine that reads a log line by line and
//! tells its good prefix, a torn tail and corruption apart (docs/FORMAT.md).
//!
//! It does no I/O: the store feeds it lines with their byte offsets, so the
//! same rules serve the streaming reader, the writer's recovery on open,
//! `verify`, `salvage` and `tail`. Memory stays constant: only the records of
//! a batch still waiting for its last record are held.

use crate::record::{
    check_crc, decode_event, decode_event_unproven_into, decode_event_viewed, decode_header,
    prove_json, BodyRoom, DecodeError, MAX_RECORD_BYTES,
};
use crate::{EventRecord, EventView, HeaderVocabularyError, SessionHeader, SessionId, ShapeError};

/// The largest batch a writer emits or a reader accepts, in records.
pub const MAX_BATCH_RECORDS: u64 = 65_536;

/// A place in a log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of the line's first byte.
    pub offset: u64,
}

/// Damage that an intact record follows, or a record that breaks the format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt at line {} (byte offset {}): {reason}", position.line, position.offset)]
pub struct Corruption {
    /// Where the first bad line starts.
    pub position: Position,
    /// What is wrong.
    pub reason: String,
}

/// The damage at the end of a log that no intact record follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the torn bytes start (the end of the good prefix).
    pub position: Position,
    /// How many bytes from there to the end of the file.
    pub bytes: u64,
    /// How many well-formed records of an unfinished batch it drops.
    pub dropped_records: u64,
    /// What the damage is.
    pub reason: String,
}

/// What a finished scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanSummary {
    /// The header.
    pub header: SessionHeader,
    /// Vocabulary errors in the header (rule violations at seq 0).
    pub header_vocabulary_errors: Vec<HeaderVocabularyError>,
    /// The seq of the last event of the good prefix (0: none).
    pub last_seq: u64,
    /// Length in bytes of the good prefix (header included).
    pub good_bytes: u64,
    /// Lines in the good prefix (header included).
    pub good_lines: u64,
    /// The torn tail, if any.
    pub torn_tail: Option<TornTail>,
}

/// Reads a log one line at a time. See the module docs.
#[derive(Debug, Clone)]
pub struct LogScanner {
    expected_id: Option<SessionId>,
    header: Option<SessionHeader>,
    header_vocabulary_errors: Vec<HeaderVocabularyError>,
    header_body: String,
    line: u64,
    next_seq: u64,
    batch: Vec<EventRecord>,
    batch_remaining: u64,
    good_bytes: u64,
    good_lines: u64,
    end: u64,
    damage: Option<(Position, String)>,
}

impl LogScanner {
    /// A scanner for any log; with `expected_id`, the header must name that
    /// session (a store file `<id>.jsonl` must hold session `<id>`).
    pub fn new(expected_id: Option<SessionId>) -> Self {
        LogScanner {
            expected_id,
            header: None,
            header_vocabulary_errors: Vec::new(),
            header_body: String::new(),
            line: 0,
            next_seq: 1,
            batch: Vec::new(),
            batch_remaining: 0,
            good_bytes: 0,
            good_lines: 0,
            end: 0,
            damage: None,
        }
    }

    /// A scanner that starts reading in the middle of a log whose header
    /// `header` (with its vocabulary errors and body) was read apart: the
    /// next line fed must start at byte `offset` and be the first record of
    /// a unit (an event on its own, or a batch's first record) with seq
    /// `next_seq`. It is then line `next_seq + 1` of the log (the header is
    /// line 1 and each event of a good prefix one line), so positions in
    /// what it reports are those of a scan from the start. A reader of a
    /// log's last records starts here (`tail -n`).
    pub fn resume(header: crate::DecodedHeader, offset: u64, next_seq: u64) -> LogScanner {
        let lines_before = next_seq;
        LogScanner {
            expected_id: None,
            header: Some(header.header),
            header_vocabulary_errors: header.vocabulary_errors,
            header_body: header.body,
            line: lines_before,
            next_seq,
            batch: Vec::new(),
            batch_remaining: 0,
            good_bytes: offset,
            good_lines: lines_before,
            end: offset,
            damage: None,
        }
    }

    /// The header, once line 1 has been read.
    pub fn header(&self) -> Option<&SessionHeader> {
        self.header.as_ref()
    }

    /// Vocabulary errors of the header, once line 1 has been read.
    pub fn header_vocabulary_errors(&self) -> &[HeaderVocabularyError] {
        &self.header_vocabulary_errors
    }

    /// The header record's body as read (empty until line 1 was read).
    pub fn header_body(&self) -> &str {
        &self.header_body
    }

    /// The seq the next good record must have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The length in bytes of the good prefix read so far (header
    /// included): where its last complete unit (an event, or a batch with
    /// all its records) ends.
    pub fn good_bytes(&self) -> u64 {
        self.good_bytes
    }

    /// The scanner as it stood at the end of the good prefix: what was read
    /// after it (an unfinished batch, a line still being written, damage)
    /// forgotten, so that reading can go on from [`good_bytes`] once the
    /// file has grown, as if the lines after it had never been seen.
    ///
    /// [`good_bytes`]: Self::good_bytes
    pub fn at_good_prefix_end(&self) -> LogScanner {
        LogScanner {
            expected_id: self.expected_id.clone(),
            header: self.header.clone(),
            header_vocabulary_errors: self.header_vocabulary_errors.clone(),
            header_body: self.header_body.clone(),
            line: self.good_lines,
            next_seq: self.next_seq - self.batch.len() as u64,
            batch: Vec::new(),
            batch_remaining: 0,
            good_bytes: self.good_bytes,
            good_lines: self.good_lines,
            end: self.good_bytes,
            damage: None,
        }
    }

    /// This scanner, which has read only the header, as if it had gone on
    /// through a good prefix of `good_lines` lines and `good_bytes` bytes
    /// whose next seq is `next_seq`: what a reader resuming from a state
    /// snapshot's anchor feeds it next is checked as the lines after that
    /// prefix would be.
    pub fn resumed_at(&self, next_seq: u64, good_bytes: u64, good_lines: u64) -> LogScanner {
        LogScanner {
            expected_id: self.expected_id.clone(),
            header: self.header.clone(),
            header_vocabulary_errors: self.header_vocabulary_errors.clone(),
            header_body: self.header_body.clone(),
            line: good_lines,
            next_seq,
            batch: Vec::new(),
            batch_remaining: 0,
            good_bytes,
            good_lines,
            end: good_bytes,
            damage: None,
        }
    }

    /// Feeds the next line: its bytes without `\n`, whether a `\n` ended it,
    /// and its byte offset. Records that joined the good prefix are pushed to
    /// `ready` (a batch's records only once all of them arrived).
    pub fn push_line(
        &mut self,
        line: &[u8],
        terminated: bool,
        offset: u64,
        ready: &mut Vec<EventRecord>,
    ) -> Result<(), Corruption> {
        self.push_event_line(line, terminated, offset, ready, |id, line| {
            decode_event(id, line).map(|record| (record, ()))
        })
        .map(drop)
    }

    /// [`push_line`](Self::push_line), decoding the record together with
    /// the view a fold reads of its data ([`decode_event_viewed`]), in one
    /// scan of the line. Returns that view when the line's record joined the
    /// good prefix on its own: it is then the last record pushed to `ready`.
    /// A batch's records join later, all at once, and their views are not
    /// kept: `None`, and the caller parses their data itself.
    pub fn push_line_viewed<'l>(
        &mut self,
        line: &'l [u8],
        terminated: bool,
        offset: u64,
        ready: &mut Vec<EventRecord>,
    ) -> Result<Option<Result<EventView<'l>, ShapeError>>, Corruption> {
        self.push_event_line(line, terminated, offset, ready, |id, line| {
            decode_event_viewed(id, line).map(|viewed| (viewed.record, viewed.view))
        })
    }

    /// [`push_line`](Self::push_line), short of the proof that the
    /// record's `data` is JSON ([`decode_event_unproven`](crate::decode_event_unproven)), for a reader
    /// whose fold proves it ([`prove_data`](crate::prove_data)) as it scans
    /// `data` for its view. Returns the line's position when the line's
    /// record joined the good prefix on its own unproved: it is then the
    /// last record pushed to `ready`, and the caller must prove it before
    /// taking it; should the proof fail, the log is to be read again from
    /// that position ([`resumed_at`](Self::resumed_at) the record's seq,
    /// offset and line before it) by [`push_line`](Self::push_line), which
    /// then tells damage, a torn tail and corruption apart as it always
    /// does.
    ///
    /// Any other record is proved here, before it is taken, as `push_line`
    /// proves it: one that is refused (its error is then the one `push_line`
    /// gives) and one held for its batch (which may never be finished, and
    /// would then leave with the torn tail, unproved).
    ///
    /// The record's body is kept in `room` where it can be
    /// ([`decode_event_unproven_into`]).
    pub fn push_line_unproven(
        &mut self,
        line: &[u8],
        terminated: bool,
        offset: u64,
        ready: &mut Vec<EventRecord>,
        room: BodyRoom<'_>,
    ) -> Result<Option<Position>, Corruption> {
        let (next_seq, batch_remaining) = (self.next_seq, self.batch_remaining);
        let position = Position {
            line: self.line + 1,
            offset,
        };
        self.push_event_line(line, terminated, offset, ready, |id, line| {
            let (record, unproven) = decode_event_unproven_into(id, line, room)?;
            let joins_alone =
                record.seq() == next_seq && batch_remaining == 0 && record.batch().is_none();
            if unproven && !joins_alone {
                prove_json(id, &record)?;
                return Ok((record, None));
            }
            Ok((record, unproven.then_some(position)))
        })
        .map(Option::flatten)
    }

    /// Feeds one line, decoding an event line with `decode`, which returns
    /// the record and what else it read of it; that is returned when the
    /// record joined the good prefix on its own.
    fn push_event_line<'l, T>(
        &mut self,
        line: &'l [u8],
        terminated: bool,
        offset: u64,
        ready: &mut Vec<EventRecord>,
        decode: impl FnOnce(&SessionId, &'l [u8]) -> Result<(EventRecord, T), DecodeError>,
    ) -> Result<Option<T>, Corruption> {
        self.line += 1;
        let position = Position {
            line: self.line,
            offset,
        };
        self.end = offset + line.len() as u64 + u64::from(terminated);
        let Some(header) = &self.header else {
            return self.push_header(line, terminated, position).map(|()| None);
        };
        let id = &header.id;
        if let Some((first, reason)) = &self.damage {
            if terminated && is_intact(id, line) {
                return Err(Corruption {
                    position: *first,
                    reason: format!(
                        "{reason}, and an intact record follows at line {} (byte offset {offset})",
                        position.line
                    ),
                });
            }
            return Ok(None);
        }
        if !terminated {
            self.damage = Some((
                position,
                "the last line has no \\n (an append did not finish)".into(),
            ));
            return Ok(None);
        }
        let (record, read) = match decode(id, line) {
            Ok(decoded) => decoded,
            Err(DecodeError::Damaged(reason)) => {
                self.damage = Some((position, reason));
                return Ok(None);
            }
            Err(DecodeError::Malformed(reason)) => return Err(Corruption { position, reason }),
        };
        let alone = self.accept(record, position, ready)?;
        Ok(alone.then_some(read))
    }

    /// Feeds a line longer than [`MAX_RECORD_BYTES`] whose bytes the caller
    /// skipped instead of buffering: it is damage (never intact).
    pub fn push_oversized_line(
        &mut self,
        len: u64,
        terminated: bool,
        offset: u64,
    ) -> Result<(), Corruption> {
        self.line += 1;
        let position = Position {
            line: self.line,
            offset,
        };
        self.end = offset + len + u64::from(terminated);
        let reason = format!("record is {len} bytes, above the {MAX_RECORD_BYTES}-byte limit");
        if self.header.is_none() {
            return Err(Corruption { position, reason });
        }
        if self.damage.is_none() {
            self.damage = Some((position, reason));
        }
        Ok(())
    }

    /// Ends the scan: the summary of a log that is good or only torn.
    pub fn finish(self) -> Result<ScanSummary, Corruption> {
        let Some(header) = self.header else {
            return Err(Corruption {
                position: Position { line: 1, offset: 0 },
                reason: "the file is empty: line 1 must be the session header".into(),
            });
        };
        let last_seq = self.next_seq - 1 - self.batch.len() as u64;
        let batch_start = Position {
            line: self.good_lines + 1,
            offset: self.good_bytes,
        };
        let unfinished = |first: &EventRecord, intact: &str| {
            format!(
                "the batch starting at seq {} announced {} records but only {} arrived{intact}",
                first.seq(),
                first.batch().unwrap_or(0),
                self.batch.len()
            )
        };
        let torn_tail = match (self.damage, self.batch.first()) {
            // Damage after the good prefix, no batch open.
            (Some((position, reason)), None) => Some(TornTail {
                position,
                bytes: self.end - self.good_bytes,
                dropped_records: 0,
                reason,
            }),
            // Damage inside a batch: the tail starts at the batch's first
            // line, which is intact, so the reason names both the batch
            // and the damaged line (whose position is not the tail's).
            (Some((damaged, reason)), Some(first)) => Some(TornTail {
                position: batch_start,
                bytes: self.end - self.good_bytes,
                dropped_records: self.batch.len() as u64,
                reason: format!(
                    "{}; line {} (byte offset {}): {reason}",
                    unfinished(first, " intact"),
                    damaged.line,
                    damaged.offset
                ),
            }),
            (None, Some(first)) => Some(TornTail {
                position: batch_start,
                bytes: self.end - self.good_bytes,
                dropped_records: self.batch.len() as u64,
                reason: unfinished(first, ""),
            }),
            (None, None) => None,
        };
        if header.seed_length > last_seq {
            return Err(Corruption {
                position: Position { line: 1, offset: 0 },
                reason: format!(
                    "seedLength {} is above the {last_seq} intact events of the log",
                    header.seed_length
                ),
            });
        }
        Ok(ScanSummary {
            header,
            header_vocabulary_errors: self.header_vocabulary_errors,
            last_seq,
            good_bytes: self.good_bytes,
            good_lines: self.good_lines,
            torn_tail,
        })
    }

    fn push_header(
        &mut self,
        line: &[u8],
        terminated: bool,
        position: Position,
    ) -> Result<(), Corruption> {
        let corrupt = |reason: String| Err(Corruption { position, reason });
        if !terminated {
            return corrupt("line 1 (the header) has no \\n".into());
        }
        let decoded = match decode_header(line) {
            Ok(decoded) => decoded,
            Err(error) if is_foreign_json(line) => {
                return corrupt(format!(
                    "line 1 is no session header but a JSON object without a CRC, as a \
                     transcript of another tool is ({error}); `sessionlog import` reads \
                     Codex and Claude Code transcripts"
                ))
            }
            Err(error) => return corrupt(format!("the header is damaged: {error}")),
        };
        if let Some(expected) = &self.expected_id {
            if *expected != decoded.header.id {
                return corrupt(format!(
                    "the file is named for session {expected} but its header holds session {}",
                    decoded.header.id
                ));
            }
        }
        self.header = Some(decoded.header);
        self.header_vocabulary_errors = decoded.vocabulary_errors;
        self.header_body = decoded.body;
        self.good_bytes = self.end;
        self.good_lines = 1;
        Ok(())
    }

    /// Adds a decoded record to the good prefix (or to the unfinished batch
    /// it belongs to); true when it joined the good prefix on its own.
    fn accept(
        &mut self,
        record: EventRecord,
        position: Position,
        ready: &mut Vec<EventRecord>,
    ) -> Result<bool, Corruption> {
        if record.seq() != self.next_seq {
            return Err(Corruption {
                position,
                reason: format!(
                    "seq {} where seq {} was expected (a gap, repeat or decrease)",
                    record.seq(),
                    self.next_seq
                ),
            });
        }
        match (self.batch_remaining, record.batch()) {
            (0, None) => {}
            (0, Some(n)) if n > MAX_BATCH_RECORDS => {
                return Err(Corruption {
                    position,
                    reason: format!(
                        "seq {}: batch of {n} records is above the limit of {MAX_BATCH_RECORDS}",
                        record.seq()
                    ),
                });
            }
            (0, Some(n)) => self.batch_remaining = n,
            (_, Some(n)) => {
                return Err(Corruption {
                    position,
                    reason: format!(
                        "seq {}: a batch member ({n}) inside an unfinished batch",
                        record.seq()
                    ),
                });
            }
            (_, None) => {}
        }
        self.next_seq += 1;
        if self.batch_remaining == 0 {
            ready.push(record);
            self.good_bytes = self.end;
            self.good_lines = self.line;
            return Ok(true);
        }
        self.batch.push(record);
        self.batch_remaining -= 1;
        if self.batch_remaining == 0 {
            ready.append(&mut self.batch);
            self.good_bytes = self.end;
            self.good_lines = self.line;
        }
        Ok(false)
    }
}

/// Whether a line (that ended in `\n`) is intact: its CRC matches and it
/// parses as JSON.
fn is_intact(id: &SessionId, line: &[u8]) -> bool {
    if line.len() > MAX_RECORD_BYTES || check_crc(id, line).is_err() {
        return false;
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

/// Whether line 1 is a JSON object that no writer of this format made: it
/// parses whole and carries no `crc` member (every record, the header
/// included, ends in one), and says nothing of a header kind.
fn is_foreign_json(line: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(line) {
        Ok(object) => !object.contains_key("crc") && !object.contains_key("kind"),
        Err(_) => false,
    }
}
