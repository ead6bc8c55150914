//! What every SQL backend shares: the rows a session is stored as, and
//! the checks that turn them back into records.
//!
//! A database keeps a session as one header row (its fields as columns, the
//! header record's body, its CRC and the session's last seq) and one row per
//! event (seq, ts, type, batch, body, CRC). The bodies are the truth: a
//! reader recomputes each CRC, decodes each body and checks that the
//! columns agree with it, that seqs are contiguous, that batches finish,
//! and that the rows reach the last seq the header row records — so a lost
//! row is corruption, never a shorter session. The checks that need no
//! engine at all (`SeqCheck`, the whole-store catalogue) are in `checks`;
//! each engine folder (`sqlite`, `postgres`) keeps only what differs:
//! connection, SQL dialect, locking and notification.

pub(crate) mod checks;
pub(crate) mod events;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

use std::path::Path;

use sessionlog_projections::SessionState;
use sessionlog_schema::{decode_header_body, record_crc, DecodedHeader, EventRecord, SessionId};

use crate::state_snapshot::{self, SnapshotAnchor};
use crate::writer::check_storable_record;
use crate::StoreError;
pub(crate) use checks::corrupt_session as corrupt;
// What the PostgreSQL module takes from here (SQLite's reads `checks` itself).
#[cfg(feature = "postgres")]
pub(crate) use checks::{audit_catalogue, session_locator};

/// A session's header row, as stored.
#[derive(Debug)]
pub(crate) struct HeaderRow {
    pub(crate) body: String,
    pub(crate) crc: i64,
    /// The seq of the session's last event (0: none), kept up to date in the
    /// transaction of every append.
    pub(crate) last_seq: i64,
    /// For a fork by reference: the session whose first `seedLength`
    /// event rows are this session's seeded events.
    pub(crate) seed_source: Option<String>,
    /// The header's fields the row copies into columns for queries.
    pub(crate) columns: HeaderColumns,
}

/// The columns of a session row that copy its header's fields, for
/// queries; a reader checks them against the header body, the truth.
#[derive(Debug)]
pub(crate) struct HeaderColumns {
    pub(crate) created_at: i64,
    pub(crate) cwd: String,
    pub(crate) parent_session: Option<String>,
    pub(crate) seed_length: i64,
    pub(crate) delegation_depth: i64,
    pub(crate) sandbox_mode: Option<String>,
    pub(crate) approval_policy: Option<String>,
}

impl HeaderColumns {
    /// The first column that disagrees with the header: its name, its
    /// value and the header's. Compared as values; text is made only for a
    /// disagreement (a store-wide `verify` checks every session row).
    fn disagreement(&self, decoded: &DecodedHeader) -> Option<(&'static str, String, String)> {
        let header = &decoded.header;
        let text =
            |value: Option<&str>| value.map_or_else(|| "null".to_owned(), |v| format!("{v:?}"));
        let number = |stored: i64, header: u64| {
            (stored != sql_integer(header)).then(|| (stored.to_string(), header.to_string()))
        };
        // A value out of vocabulary is the header's rule violation (exit
        // 4), reported as such: its column may hold it as written, or
        // nothing, as a store that decoded the header writes it.
        let optional =
            |column: &'static str, member: &str, stored: Option<&str>, header: Option<&str>| {
                if stored == header {
                    return None;
                }
                let out_of_vocabulary = decoded.vocabulary_errors.iter().any(|error| {
                    error.field == member && stored.is_none_or(|stored| stored == error.value)
                });
                (!out_of_vocabulary).then(|| (column, text(stored), text(header)))
            };
        if let Some((stored, header)) = number(self.created_at, header.created_at) {
            return Some(("created_at", stored, header));
        }
        if self.cwd != header.cwd {
            return Some((
                "cwd",
                format!("{:?}", self.cwd),
                format!("{:?}", header.cwd),
            ));
        }
        let parent = header.parent_session.as_ref().map(SessionId::as_str);
        if self.parent_session.as_deref() != parent {
            return Some((
                "parent_session",
                text(self.parent_session.as_deref()),
                text(parent),
            ));
        }
        if let Some((stored, header)) = number(self.seed_length, header.seed_length) {
            return Some(("seed_length", stored, header));
        }
        if let Some((stored, header)) = number(self.delegation_depth, header.delegation_depth) {
            return Some(("delegation_depth", stored, header));
        }
        optional(
            "sandbox_mode",
            "sandboxMode",
            self.sandbox_mode.as_deref(),
            header.sandbox_mode.map(|mode| mode.as_str()),
        )
        .or_else(|| {
            optional(
                "approval_policy",
                "approvalPolicy",
                self.approval_policy.as_deref(),
                header.approval_policy.map(|policy| policy.as_str()),
            )
        })
    }
}

/// Checks a header row (its CRC, that it decodes, that it names `id`) and
/// decodes it; its body moves into the header decoded (the row keeps its
/// other columns).
pub(crate) fn decode_header_row(
    store: &Path,
    id: &SessionId,
    row: &mut HeaderRow,
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
    let decoded = decode_header_body(std::mem::take(&mut row.body))
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
    if let Some((column, stored, header)) = row.columns.disagreement(&decoded) {
        return Err(corrupt(
            store,
            id,
            0,
            format!("the session row's column {column} is {stored}, but its header says {header}"),
        ));
    }
    // A fork by reference reads its seeded events from the rows of the
    // session its row names: only its parent's are the records a copied
    // child would have.
    if let Some(source) = &row.seed_source {
        let parent = decoded.header.parent_session.as_ref();
        if parent.map(SessionId::as_str) != Some(source.as_str()) {
            let parent = parent.map_or_else(|| "none".to_owned(), |parent| parent.to_string());
            return Err(corrupt(
                store,
                id,
                0,
                format!(
                    "the session row takes its seeded events from session {source:?}, but \
                     its header's parent is {parent}"
                ),
            ));
        }
    }
    Ok(decoded)
}

/// Stages `records` in a sink's `pending` until its sync, each checked
/// first to be storable (integers within the engine's signed 64 bits).
pub(crate) fn stage(
    pending: &mut Vec<EventRecord>,
    records: &[EventRecord],
) -> Result<(), StoreError> {
    for record in records {
        check_storable_record(record)?;
    }
    pending.extend_from_slice(records);
    Ok(())
}

/// The lowest seq a read of a session's rows from `from` asks the
/// database for. Seqs start at 1, so a row below 1 is damage (nothing
/// writes one); a read from the start of a session asks from the lowest
/// integer, so that such a row comes first and is refused as out of
/// sequence, instead of lying below every read where no check sees it.
/// The bodies' bytes past which a page of a session's rows ends before it
/// holds as many rows as it may: a session of large records (tool outputs
/// of hundreds of kilobytes) would otherwise be held a page of hundreds of
/// them at a time, and read ahead a page more, its reader's memory
/// following the records' size. A page holds at least one row.
pub(crate) const PAGE_BYTES: usize = 4 << 20;

pub(crate) fn lowest_row_seq(from: u64) -> i64 {
    match from {
        0 | 1 => i64::MIN,
        _ => sql_integer(from),
    }
}

/// A value checked by `check_storable` (saturates otherwise).
pub(crate) fn sql_integer(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Folds the session whose header is `decoded` with `fold` (a backend's
/// [`fold_session`]), as a writer and the current state do: a header with a
/// value out of its vocabulary refuses them, at `place`, unless the fold
/// finds what ranks above it (a seal that fails, corruption: 7 and 2 over
/// 4), as the JSONL writer's fold does.
pub(crate) fn fold_within_vocabulary(
    place: &Path,
    decoded: DecodedHeader,
    fold: impl FnOnce(DecodedHeader) -> Result<FoldedSession, StoreError>,
) -> Result<FoldedSession, StoreError> {
    let vocabulary = decoded
        .vocabulary_errors
        .first()
        .map(|error| StoreError::HeaderVocabulary {
            path: place.to_owned(),
            error: error.clone(),
        });
    let folded = fold(decoded);
    match vocabulary {
        Some(header) => Err(crate::error::first_unless_outranked(header, folded)),
        None => folded,
    }
}

/// A database session folded through its last event, from its state
/// snapshot when one holds.
pub(crate) struct FoldedSession {
    pub(crate) state: SessionState,
    /// Every event, when asked for.
    pub(crate) events: Option<Vec<EventRecord>>,
    /// The CRC of the last event (0: none): the anchor of a snapshot taken now.
    pub(crate) last_crc: u32,
    /// The CRC of the stored header body.
    pub(crate) header_crc: u32,
    /// The snapshot it resumed from: its anchor and size in bytes.
    pub(crate) resumed: Option<(SnapshotAnchor, usize)>,
}

/// A snapshot row: its seq, its anchor CRC, its bytes.
pub(crate) type SnapshotRow = (i64, i64, SnapshotBytes);

/// The bytes of a snapshot row.
pub(crate) enum SnapshotBytes {
    /// Read whole.
    Whole(Vec<u8>),
    /// Its head read and checked, its pages to be read from `source` as
    /// the state's reads land on them (`state_snapshot::decode_paged`).
    Paged {
        head: state_snapshot::SnapshotHead,
        source: Box<dyn sessionlog_projections::PageSource>,
    },
}

impl SnapshotBytes {
    /// The state they hold over `decoded`, where it was taken, and their
    /// size in bytes.
    fn decode(
        self,
        decoded: &DecodedHeader,
    ) -> Result<(SessionState, SnapshotAnchor, usize), String> {
        match self {
            SnapshotBytes::Whole(bytes) => {
                let size = bytes.len();
                let (state, anchor) =
                    state_snapshot::decode(bytes, &decoded.header, &decoded.body)?;
                Ok((state, anchor, size))
            }
            SnapshotBytes::Paged { head, source } => {
                let size = head.snapshot_len();
                let (state, anchor) =
                    state_snapshot::decode_paged(head, source, &decoded.header, &decoded.body)?;
                Ok((state, anchor, size))
            }
        }
    }
}

/// Folds session `id` of the database at `place`: from `snapshot` (its
/// snapshot row, when the database has one) when it decodes to a state of
/// this session and header, names the anchor its row names, and that
/// anchor still holds (below), then every event `events_from(seq)`
/// streams after it, each checked as a whole read checks it. A rule
/// broken refuses the session, unless damage later in it wins. With
/// `keep_events` the snapshot is not used.
///
/// The anchor holds when the event at its seq, read as every row is read
/// (its stored CRC checked against its body, from the rows of the session
/// a fork by reference takes its seed from where the seq is in the seed),
/// has a body whose CRC for this session's id is the anchor's: the bytes
/// the snapshot was folded through, not a column that says so. Else the
/// snapshot is ignored and the whole session folded, which reports the
/// first damage, if any, where a read of every row would.
pub(crate) fn fold_session<I>(
    id: &SessionId,
    place: &Path,
    decoded: DecodedHeader,
    snapshot: Option<SnapshotRow>,
    keep_events: bool,
    mut events_from: impl FnMut(u64) -> Result<I, StoreError>,
) -> Result<FoldedSession, StoreError>
where
    I: Iterator<Item = Result<EventRecord, StoreError>>,
{
    let header_crc = state_snapshot::header_crc(&decoded.body);
    let resumed = match (keep_events, snapshot) {
        (false, Some((seq, anchor_crc, bytes))) => {
            let checked = bytes.decode(&decoded).and_then(|(state, anchor, size)| {
                let matches = i64::try_from(anchor.seq).ok() == Some(seq)
                    && i64::from(anchor.record_crc) == anchor_crc;
                match matches {
                    true => Ok((state, anchor, size)),
                    false => Err("its row and its bytes name different anchors".to_owned()),
                }
            });
            checked
                .map_err(|why| state_snapshot::ignored(id, place, &why))
                .ok()
        }
        _ => None,
    };
    let resumed = resumed.and_then(|(state, anchor, bytes)| {
        match anchored_rows(id, anchor, &mut events_from) {
            Ok(rows) => Some((state, anchor, bytes, rows)),
            Err(why) => {
                state_snapshot::ignored(id, place, &format!("seq {}: {why}", anchor.seq));
                None
            }
        }
    });
    let (mut state, rows, mut last_crc, resumed) = match resumed {
        Some((state, anchor, bytes, rows)) => {
            (state, rows, anchor.record_crc, Some((anchor, bytes)))
        }
        None => {
            let state = SessionState::with_header_body(decoded.header, &decoded.body);
            (state, events_from(1)?, 0, None)
        }
    };
    let mut events = keep_events.then(Vec::new);
    let mut refusal = crate::error::Refusal::default();
    for record in rows {
        let record = record?;
        if let Err(violation) = state.apply(&record) {
            refusal.note(StoreError::Rule {
                path: place.to_owned(),
                violation,
            });
        }
        last_crc = record_crc(id, record.body().as_bytes());
        if let Some(events) = &mut events {
            events.push(record);
        }
    }
    // A lookup that landed on a snapshot page that failed missed: a
    // violation (or none) said on it is the caller's to decide again, by
    // folding with the snapshot read whole.
    if !state.snapshot_unreadable() {
        refusal.into_result()?;
    }
    Ok(FoldedSession {
        state,
        events,
        last_crc,
        header_crc,
        resumed,
    })
}

/// The events of session `id` from `anchor`'s seq on, past the anchor
/// event, when that event still holds (see [`fold_session`]); else why
/// not.
fn anchored_rows<I>(
    id: &SessionId,
    anchor: SnapshotAnchor,
    events_from: &mut impl FnMut(u64) -> Result<I, StoreError>,
) -> Result<I, String>
where
    I: Iterator<Item = Result<EventRecord, StoreError>>,
{
    let mut rows = events_from(anchor.seq.max(1))
        .map_err(|error| format!("its anchor event does not read: {error}"))?;
    match rows.next() {
        Some(Ok(record)) if record.seq() != anchor.seq => Err(format!(
            "its anchor is no event (the rows give seq {})",
            record.seq()
        )),
        Some(Ok(record)) if record_crc(id, record.body().as_bytes()) != anchor.record_crc => Err(
            "the body of its anchor event is no longer the one it was folded through".to_owned(),
        ),
        Some(Ok(_)) => Ok(rows),
        Some(Err(error)) => Err(format!("its anchor event does not read: {error}")),
        None => Err("its anchor event is gone".to_owned()),
    }
}

/// How many bodies `read` lends, and the error it ends with (`None`: its
/// end), for the engines' damage tests.
#[cfg(test)]
pub(crate) fn bodies_lent(mut read: events::SqlEvents) -> (usize, Option<crate::StoreError>) {
    let mut lent = 0;
    loop {
        match read.next_body() {
            Ok(Some(_)) => lent += 1,
            Ok(None) => return (lent, None),
            Err(error) => return (lent, Some(error)),
        }
    }
}

/// Asserts that `result` is the corruption of session `a` at `seq`, for a
/// `reason` its message names (the engines' damage tests).
#[cfg(test)]
pub(crate) fn assert_corrupt_at(
    result: Result<crate::Snapshot, crate::StoreError>,
    seq: u64,
    reason: &str,
) {
    assert_row_corrupt_at(result.as_ref().err(), seq, reason, "snapshot");
}

/// Asserts that `error` is the corruption of session `a`'s row at `seq`,
/// for a `reason` its message names; `how` says what read found it.
#[cfg(test)]
fn assert_row_corrupt_at(error: Option<&crate::StoreError>, seq: u64, reason: &str, how: &str) {
    let Some(crate::StoreError::CorruptRow {
        id: found,
        seq: at,
        reason: why,
        ..
    }) = error
    else {
        panic!("{how}: expected corruption at seq {seq}, got {error:?}");
    };
    assert_eq!((found.as_str(), *at), ("a", seq), "{how}: {why}");
    assert!(why.contains(reason), "{how}: {why}");
    let message = error.map(ToString::to_string).unwrap_or_default();
    assert!(
        message.contains(&format!("session a is corrupt at seq {seq}: ")),
        "{how}: {message}"
    );
}

/// Damage done behind a store's back to session `a` of
/// [`long_session_events`]`(page)` rows, whose reads span several pages
/// of `page` rows: each with the seq it is reported at and words of its
/// reason. Each falls on another page, the first of one, and the end.
#[cfg(test)]
pub(crate) fn long_session_damage(page: u64) -> Vec<(String, u64, &'static str)> {
    let last = 3 * page + 10;
    vec![
        (
            format!(
                "UPDATE events SET body = replace(body, '\"n\":', '\"m\":') WHERE seq = {}",
                2 * page + 5
            ),
            2 * page + 5,
            "CRC mismatch",
        ),
        (
            format!("DELETE FROM events WHERE seq = {}", page + 1),
            page + 1,
            "not contiguous",
        ),
        (
            format!("DELETE FROM events WHERE seq = {last}"),
            last,
            "are missing",
        ),
        (
            format!("UPDATE sessions SET last_seq = {}", last - 1),
            last,
            "but the session row records",
        ),
        (
            format!(
                "UPDATE events SET type = 'turn/start' WHERE seq = {}",
                2 * page
            ),
            2 * page,
            "disagree",
        ),
    ]
}

/// The events of a session whose reads span several pages of `page`
/// rows: three pages and ten rows more, each of an unknown type.
#[cfg(test)]
pub(crate) fn long_session_events(page: u64) -> Vec<EventRecord> {
    (1..=3 * page + 10)
        .map(|seq| {
            EventRecord::new(
                seq,
                1_700_000_000_000 + seq,
                None,
                "note/test",
                &format!("{{\"n\":{seq}}}"),
            )
        })
        .collect()
}

/// Reads a session through `events` both ways an [`events::SqlEvents`]
/// gives it (records, and bodies lent) and asserts that each gives
/// `expected`'s bodies in order and ends as `damage` says: after every
/// record (`None`), or with the corruption of session `a` at that seq,
/// its reason naming the words given, once every page of `page` rows
/// before the damaged one was given and nothing past the damage.
#[cfg(test)]
pub(crate) fn assert_read_in_order(
    mut events: impl FnMut() -> events::SqlEvents,
    expected: &[EventRecord],
    page: u64,
    damage: Option<(u64, &str)>,
) {
    let ended = |given: usize, error: Option<crate::StoreError>, how: &str| {
        let Some((seq, reason)) = damage else {
            assert!(error.is_none(), "{how}: {error:?}");
            assert_eq!(given, expected.len(), "{how}");
            return;
        };
        assert_row_corrupt_at(error.as_ref(), seq, reason, how);
        let before = usize::try_from(seq - 1).unwrap_or(usize::MAX);
        let whole_pages = usize::try_from((seq - 1) / page * page).unwrap_or(usize::MAX);
        assert!(
            (whole_pages..=before).contains(&given),
            "{how}: {given} given before the damage at seq {seq}"
        );
    };
    let mut given = 0;
    let mut error = None;
    for next in events() {
        match next {
            Ok(record) => {
                assert_eq!(record.seq(), expected[given].seq());
                assert_eq!(record.body(), expected[given].body());
                given += 1;
            }
            Err(found) => error = Some(found),
        }
    }
    ended(given, error, "records");
    let mut read = events();
    let (mut given, mut error) = (0, None);
    loop {
        match read.next_body() {
            Ok(Some(body)) => {
                assert_eq!(body.as_str(), expected[given].body());
                given += 1;
            }
            Ok(None) => break,
            Err(found) => {
                error = Some(found);
                break;
            }
        }
    }
    ended(given, error, "bodies lent");
}
