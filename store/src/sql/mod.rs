//! What every SQL backend shares: the rows a session is stored as, and
//! the checks that turn them back into records.
//!
//! A database keeps a session as one header row (its fields as columns, the
//! header record's body, its CRC and the session's last seq) and one row per
//! event (seq, ts, type, batch, body, CRC). The bodies are the truth: a
//! reader recomputes each CRC, decodes each body and checks that the
//! columns agree with it, that seqs are contiguous, that batches finish,
//! and that the rows reach the last seq the header row records — so a lost
//! row is corruption, never a shorter session. Each engine module
//! (`postgres`) keeps only what differs: connection, SQL dialect, locking
//! and notification.

pub(crate) mod postgres;

use std::path::{Path, PathBuf};

use sessionlog_schema::{
    decode_event, decode_header, encode_line, record_crc, Corruption, DecodedHeader, EventRecord,
    Position, SessionHeader, SessionId,
};

use crate::StoreError;

/// One row of `events`, as stored.
#[derive(Debug)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) ts: i64,
    pub(crate) event_type: String,
    pub(crate) batch: Option<i64>,
    pub(crate) body: String,
    pub(crate) crc: i64,
}

/// A session's header row, as stored.
#[derive(Debug)]
pub(crate) struct HeaderRow {
    pub(crate) body: String,
    pub(crate) crc: i64,
    /// The seq of the session's last event (0: none), kept up to date in the
    /// transaction of every append.
    pub(crate) last_seq: i64,
}

/// How errors about one session of a database name it: `<database>#<id>`.
pub(crate) fn session_locator(database: &Path, id: &SessionId) -> PathBuf {
    let mut text = database.as_os_str().to_owned();
    text.push(format!("#{id}"));
    PathBuf::from(text)
}

/// Corruption of session `id` at `seq` in the database `store`.
pub(crate) fn corrupt(store: &Path, id: &SessionId, seq: u64, reason: String) -> StoreError {
    StoreError::Corrupt {
        path: store.to_owned(),
        corruption: Corruption {
            position: Position {
                line: seq.saturating_add(1),
                offset: 0,
            },
            reason: format!("session {id}, seq {seq}: {reason}"),
        },
    }
}

/// Checks a header row (its CRC, that it decodes, that it names `id`) and
/// decodes it.
pub(crate) fn decode_header_row(
    store: &Path,
    id: &SessionId,
    row: &HeaderRow,
) -> Result<DecodedHeader, StoreError> {
    let computed = record_crc(id, row.body.as_bytes());
    if i64::from(computed) != row.crc {
        return Err(corrupt(
            store,
            id,
            0,
            format!(
                "header CRC mismatch (stored {:08x}, computed {computed:08x})",
                row.crc
            ),
        ));
    }
    let line = encode_line(id, &row.body);
    let decoded = decode_header(line.trim_end_matches('\n').as_bytes())
        .map_err(|error| corrupt(store, id, 0, format!("header: {error}")))?;
    if &decoded.header.id != id {
        return Err(corrupt(
            store,
            id,
            0,
            format!("the header names session {}", decoded.header.id),
        ));
    }
    if row.last_seq < 0 {
        return Err(corrupt(
            store,
            id,
            0,
            format!("the session row records last seq {}", row.last_seq),
        ));
    }
    Ok(decoded)
}

/// Checks rows in order: each must be the next seq, intact, agree with its
/// columns, and batches must finish.
#[derive(Debug, Clone)]
pub(crate) struct SeqCheck {
    pub(crate) next_seq: u64,
    pub(crate) batch_remaining: u64,
}

impl SeqCheck {
    /// A check that expects `next_seq` first.
    pub(crate) fn new(next_seq: u64) -> Self {
        SeqCheck {
            next_seq,
            batch_remaining: 0,
        }
    }

    /// Checks `row` and gives back its record.
    pub(crate) fn accept(
        &mut self,
        store: &Path,
        id: &SessionId,
        row: EventRow,
    ) -> Result<EventRecord, StoreError> {
        let expected = self.next_seq;
        let corrupt = |reason: String| corrupt(store, id, expected, reason);
        if u64::try_from(row.seq).ok() != Some(expected) {
            return Err(corrupt(format!(
                "seqs are not contiguous: the next row has seq {}",
                row.seq
            )));
        }
        let computed = record_crc(id, row.body.as_bytes());
        if i64::from(computed) != row.crc {
            return Err(corrupt(format!(
                "CRC mismatch (stored {:08x}, computed {computed:08x})",
                row.crc
            )));
        }
        let line = encode_line(id, &row.body);
        let record = decode_event(id, line.trim_end_matches('\n').as_bytes())
            .map_err(|error| corrupt(format!("the body does not decode: {error}")))?;
        let columns_agree = record.seq() == expected
            && i64::try_from(record.ts()).ok() == Some(row.ts)
            && record.event_type() == row.event_type
            && record.batch().map(i64::try_from).transpose().ok() == Some(row.batch);
        if !columns_agree {
            return Err(corrupt(
                "the columns seq, ts, type or batch disagree with the body".to_owned(),
            ));
        }
        match (record.batch(), self.batch_remaining) {
            (Some(_), remaining) if remaining > 0 => {
                return Err(corrupt(format!(
                    "a new batch starts while {remaining} records of the previous one are missing"
                )));
            }
            (Some(count), _) => self.batch_remaining = count - 1,
            (None, remaining) => self.batch_remaining = remaining.saturating_sub(1),
        }
        self.next_seq += 1;
        Ok(record)
    }

    /// Checks the end of the rows: the last batch finished, the rows reach
    /// the last seq the header row records, and the seeded prefix is there.
    pub(crate) fn finish(
        &self,
        store: &Path,
        id: &SessionId,
        seed_length: u64,
        recorded_last_seq: u64,
    ) -> Result<(), StoreError> {
        if self.batch_remaining > 0 {
            return Err(corrupt(
                store,
                id,
                self.next_seq,
                format!(
                    "the last batch is missing its last {} records",
                    self.batch_remaining
                ),
            ));
        }
        let last_seq = self.next_seq - 1;
        if last_seq < recorded_last_seq {
            return Err(corrupt(
                store,
                id,
                self.next_seq,
                format!(
                    "the events end at seq {last_seq} but the session row records {recorded_last_seq}: rows are missing"
                ),
            ));
        }
        if seed_length > last_seq {
            return Err(corrupt(
                store,
                id,
                0,
                format!("seedLength {seed_length} is above the {last_seq} events stored"),
            ));
        }
        Ok(())
    }
}

/// Refuses values a signed 64-bit integer column cannot hold, before
/// anything is written.
pub(crate) fn check_representable(
    header: &SessionHeader,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    for (what, value) in [
        ("createdAt", header.created_at),
        ("seedLength", header.seed_length),
        ("delegationDepth", header.delegation_depth),
    ] {
        if i64::try_from(value).is_err() {
            return Err(StoreError::InvalidEvent(format!(
                "session {}: header {what} {value} is above 2^63-1, the largest integer a database column stores",
                header.id
            )));
        }
    }
    events.iter().try_for_each(check_representable_record)
}

/// [`check_representable`] for one event record.
pub(crate) fn check_representable_record(record: &EventRecord) -> Result<(), StoreError> {
    if i64::try_from(record.seq()).is_err() || i64::try_from(record.ts()).is_err() {
        return Err(StoreError::InvalidEvent(format!(
            "seq {}: seq or ts {} is above 2^63-1, the largest integer a database column stores",
            record.seq(),
            record.ts()
        )));
    }
    Ok(())
}

/// A value checked by [`check_representable`] (saturates otherwise).
pub(crate) fn sql_integer(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
