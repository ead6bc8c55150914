//! The checks a SQL store makes of its own rows, written without any
//! database engine: rows come in as plain values, findings go out as
//! `StoreError`s naming the database, the session and the seq.
//!
//! Rows in a store's own tables can only come from its writer, so every
//! row that does not fit is damage (or tampering): a session row whose id
//! does not parse, events whose session row is missing, a gap in a
//! session's seqs, a body that does not match its CRC or its columns, an
//! unfinished or oversized batch, and a session whose rows end anywhere but
//! at the last seq its session row records (updated in the same transaction
//! as every append).

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

use sessionlog_schema::{
    checked_body_fields, decode_checked_body, record_crc, EventRecord, SessionId, MAX_BATCH_RECORDS,
};

use crate::StoreError;

/// What a whole-store check found: the sessions whose rows can be read
/// (each still to be checked on its own), and the damage outside any one
/// of them.
#[derive(Debug, Default)]
pub struct StoreAudit {
    /// The valid ids of the session rows, sorted.
    pub ids: Vec<SessionId>,
    /// Damage of the store as a whole: the engine's own check of the file,
    /// session rows with an invalid id, events without a session row. Each
    /// is a corruption (`ErrorClass::Corrupt`).
    pub damage: Vec<StoreError>,
    /// Events without a session row were ruled out by counting, not by
    /// listing the owners of events: every row of `events` is one that
    /// the session rows account for (their last seqs, less the seeded
    /// events of each fork by reference). That holds unless a session
    /// is short of rows by as many as there are events without a row;
    /// a reader that finds a session short of rows then asks
    /// `unowned_events` of the store, which names them.
    pub unowned_events_counted: bool,
}

/// One row of `events`, as stored, its type and body in its [`RowPage`].
#[derive(Debug)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) ts: i64,
    event_type: Range<usize>,
    pub(crate) batch: Option<i64>,
    body: Range<usize>,
    pub(crate) crc: i64,
}

/// A page of rows: their columns, their bodies one after the other in one
/// text and their types in one buffer, both kept from page to page, so a
/// page read allocates nothing per row and a reader that only writes
/// bodies out can lend them. A type column is only compared, byte for
/// byte, with the type its body spells (one that is not UTF-8 never
/// equals it).
#[derive(Debug, Default)]
pub(crate) struct RowPage {
    pub(crate) rows: Vec<EventRow>,
    bodies: Vec<u8>,
    types: Vec<u8>,
}

impl RowPage {
    /// Empties the page, keeping its memory.
    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        self.bodies.clear();
        self.types.clear();
    }

    /// Whether its bodies reach [`crate::sql::PAGE_BYTES`]: a page read
    /// ends there, whatever rows it may still take.
    pub(crate) fn is_full_of_bytes(&self) -> bool {
        self.bodies.len() >= crate::sql::PAGE_BYTES
    }

    /// The bytes of its bodies.
    #[cfg(feature = "postgres")]
    pub(crate) fn body_bytes(&self) -> usize {
        self.bodies.len()
    }

    /// The bytes the page holds room for.
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<EventRow>()
            + self.bodies.capacity()
            + self.types.capacity()
    }

    /// Adds a row at the end of the page.
    pub(crate) fn push(
        &mut self,
        seq: i64,
        ts: i64,
        event_type: &[u8],
        batch: Option<i64>,
        body: &[u8],
        crc: i64,
    ) {
        let (body_start, type_start) = (self.bodies.len(), self.types.len());
        self.bodies.extend_from_slice(body);
        self.types.extend_from_slice(event_type);
        self.rows.push(EventRow {
            seq,
            ts,
            event_type: type_start..self.types.len(),
            batch,
            body: body_start..self.bodies.len(),
            crc,
        });
    }

    /// Adds `row`, a row of `other`, at the end of this page.
    pub(crate) fn push_from(&mut self, other: &RowPage, row: &EventRow) {
        self.push(
            row.seq,
            row.ts,
            other.event_type(row),
            row.batch,
            other.body(row),
            row.crc,
        );
    }

    /// The body of `row`, a row of this page, as the row holds it: its
    /// check ([`SeqCheck::accept_from`]) finds one that is not UTF-8.
    pub(crate) fn body(&self, row: &EventRow) -> &[u8] {
        self.bodies.get(row.body.clone()).unwrap_or_default()
    }

    /// The type column of `row`, a row of this page.
    pub(crate) fn event_type(&self, row: &EventRow) -> &[u8] {
        self.types.get(row.event_type.clone()).unwrap_or_default()
    }
}

/// Damage of the database as a whole (no one session to name).
pub(crate) fn damaged(database: &Path, reason: String) -> StoreError {
    StoreError::DamagedDatabase {
        path: database.to_owned(),
        reason,
    }
}

/// Damage of one session at `seq` (0: its session row).
pub(crate) fn corrupt_session(
    database: &Path,
    id: &SessionId,
    seq: u64,
    reason: String,
) -> StoreError {
    StoreError::CorruptRow {
        path: database.to_owned(),
        id: id.clone(),
        seq,
        reason,
    }
}

/// Sorts the id texts of the session rows (`session_rows`) and of the
/// sessions that own events (`event_owners`) into valid ids and damage.
pub(crate) fn audit_catalogue(
    database: &Path,
    session_rows: &[String],
    event_owners: &[String],
) -> StoreAudit {
    let mut audit = StoreAudit {
        damage: unowned_events_damage(database, session_rows, event_owners),
        ..StoreAudit::default()
    };
    let mut invalid = Vec::new();
    for text in session_rows {
        match SessionId::parse(text) {
            Ok(id) => audit.ids.push(id),
            Err(error) => invalid.push(invalid_session_row(database, text, &error)),
        }
    }
    invalid.append(&mut audit.damage);
    audit.damage = invalid;
    audit.ids.sort();
    audit
}

/// A session row whose id `text` is not a valid id, as damage of the
/// database as a whole.
pub(crate) fn invalid_session_row(
    database: &Path,
    text: &str,
    error: &sessionlog_schema::InvalidSessionId,
) -> StoreError {
    damaged(
        database,
        format!("a session row holds the invalid id {text:?} ({error})"),
    )
}

/// The owners of events (`event_owners`) that no session row
/// (`session_rows`) has, each as damage of the database as a whole.
pub(crate) fn unowned_events_damage(
    database: &Path,
    session_rows: &[String],
    event_owners: &[String],
) -> Vec<StoreError> {
    // Both lists come sorted from the database (`ORDER BY`): then one walk
    // through them both finds the owners without a row, with no set of
    // every id.
    let orphans: Vec<&String> = match session_rows.is_sorted() && event_owners.is_sorted() {
        true => {
            let mut rows = session_rows.iter().peekable();
            event_owners
                .iter()
                .filter(|owner| {
                    while rows.next_if(|row| row < owner).is_some() {}
                    rows.peek() != Some(owner)
                })
                .collect()
        }
        false => {
            let rows: BTreeSet<&String> = session_rows.iter().collect();
            event_owners
                .iter()
                .filter(|owner| !rows.contains(owner))
                .collect()
        }
    };
    orphans
        .into_iter()
        .map(|owner| {
            damaged(
                database,
                format!("events of session {owner:?} have no session row"),
            )
        })
        .collect()
}

/// Checks the rows of one session in order: each must be the next seq,
/// intact, agree with its columns; batches must finish and stay within
/// the batch limit; and the rows must end at the session's recorded last
/// seq.
pub(crate) struct SeqCheck<'a> {
    database: &'a Path,
    id: &'a SessionId,
    pub(crate) next_seq: u64,
    pub(crate) batch_remaining: u64,
}

impl<'a> SeqCheck<'a> {
    #[cfg(test)]
    pub(crate) fn new(database: &'a Path, id: &'a SessionId, next_seq: u64) -> Self {
        SeqCheck {
            database,
            id,
            next_seq,
            batch_remaining: 0,
        }
    }

    /// Resumes a check stopped after `next_seq - 1` inside a batch with
    /// `batch_remaining` records to come.
    pub(crate) fn resume(
        database: &'a Path,
        id: &'a SessionId,
        next_seq: u64,
        batch_remaining: u64,
    ) -> Self {
        SeqCheck {
            database,
            id,
            next_seq,
            batch_remaining,
        }
    }

    fn corrupt(&self, seq: u64, reason: String) -> StoreError {
        corrupt_session(self.database, self.id, seq, reason)
    }

    /// Checks the next row, a row of `page`, and gives back its
    /// record. The row is stored among the rows of session `owner` when
    /// it is not the session read (an event a fork by reference refers
    /// to): its CRC is the one computed for the owner's id, and findings
    /// name the session read, its seq and the owner.
    pub(crate) fn accept_from(
        &mut self,
        page: &RowPage,
        row: &EventRow,
        owner: Option<&SessionId>,
    ) -> Result<EventRecord, StoreError> {
        let body = page.body(row);
        let computed = self.check_crc(row, body, owner)?;
        let body = self.text(body, owner)?;
        // The record is decoded from the row's body, its CRC checked above
        // once, and keeps its type in it.
        let record = decode_checked_body(owner.unwrap_or(self.id), body.to_owned(), computed)
            .map_err(|error| {
                self.row_corrupt(owner, format!("the body does not decode: {error}"))
            })?;
        self.check_columns(
            row,
            page.event_type(row),
            owner,
            (
                record.seq(),
                record.ts(),
                record.event_type(),
                record.batch(),
            ),
        )?;
        Ok(record)
    }

    /// [`accept_from`](Self::accept_from) with no record made: the same
    /// checks and findings, for a reader that only writes the body out.
    pub(crate) fn check_from(
        &mut self,
        page: &RowPage,
        row: &EventRow,
        owner: Option<&SessionId>,
    ) -> Result<(), StoreError> {
        let body = page.body(row);
        let computed = self.check_crc(row, body, owner)?;
        let body = self.text(body, owner)?;
        let fields =
            checked_body_fields(owner.unwrap_or(self.id), body, computed).map_err(|error| {
                self.row_corrupt(owner, format!("the body does not decode: {error}"))
            })?;
        self.check_columns(
            row,
            page.event_type(row),
            owner,
            (fields.seq, fields.ts, &fields.event_type, fields.batch),
        )
    }

    /// The next row's body as text: one that is not UTF-8 is damage of
    /// that row (a database stores any bytes as text).
    fn text<'b>(&self, body: &'b [u8], owner: Option<&SessionId>) -> Result<&'b str, StoreError> {
        std::str::from_utf8(body)
            .map_err(|error| self.row_corrupt(owner, format!("the body is not UTF-8: {error}")))
    }

    /// A finding about the next row (of `owner`'s rows, for a fork by
    /// reference).
    fn row_corrupt(&self, owner: Option<&SessionId>, reason: String) -> StoreError {
        match owner {
            Some(owner) => self.corrupt(
                self.next_seq,
                format!("{reason} (in the rows of session {owner}, which this fork refers to)"),
            ),
            None => self.corrupt(self.next_seq, reason),
        }
    }

    /// Checks the row's seq and its body's CRC, and gives back the CRC.
    fn check_crc(
        &self,
        row: &EventRow,
        body: &[u8],
        owner: Option<&SessionId>,
    ) -> Result<u32, StoreError> {
        if u64::try_from(row.seq).ok() != Some(self.next_seq) {
            let below = match row.seq < 1 {
                true => " (no row may have a seq below 1)",
                false => "",
            };
            return Err(self.row_corrupt(
                owner,
                format!(
                    "seqs are not contiguous: seq {} was due, and the row read there has seq \
                     {}{below}",
                    self.next_seq, row.seq
                ),
            ));
        }
        let computed = record_crc(owner.unwrap_or(self.id), body);
        if i64::from(computed) != row.crc {
            return Err(self.row_corrupt(
                owner,
                format!(
                    "CRC mismatch (stored {:08x}, computed {computed:08x})",
                    row.crc
                ),
            ));
        }
        Ok(computed)
    }

    /// Checks the row's columns against the seq, ts, type and batch of its
    /// decoded body, and its batch against the batch before, and moves on
    /// to the next seq.
    fn check_columns(
        &mut self,
        row: &EventRow,
        type_column: &[u8],
        owner: Option<&SessionId>,
        (seq, ts, event_type, batch): (u64, u64, &str, Option<u64>),
    ) -> Result<(), StoreError> {
        let mut disagreeing = Vec::new();
        if seq != self.next_seq {
            disagreeing.push(format!("seq {} (the body's {seq})", self.next_seq));
        }
        if i64::try_from(ts).ok() != Some(row.ts) {
            disagreeing.push(format!("ts {} (the body's {ts})", row.ts));
        }
        if event_type.as_bytes() != type_column {
            disagreeing.push(format!(
                "type {:?} (the body's {event_type:?})",
                String::from_utf8_lossy(type_column)
            ));
        }
        if batch.map(i64::try_from).transpose().ok() != Some(row.batch) {
            let shown = |batch: Option<String>| batch.unwrap_or_else(|| "null".to_owned());
            disagreeing.push(format!(
                "batch {} (the body's {})",
                shown(row.batch.map(|batch| batch.to_string())),
                shown(batch.map(|batch| batch.to_string()))
            ));
        }
        if !disagreeing.is_empty() {
            return Err(self.row_corrupt(
                owner,
                format!(
                    "the row's columns disagree with its body: {}",
                    disagreeing.join(", ")
                ),
            ));
        }
        match (batch, self.batch_remaining) {
            (Some(_), remaining) if remaining > 0 => {
                return Err(self.row_corrupt(
                    owner,
                    format!(
                        "a new batch starts while {remaining} records of the previous one are missing"
                    ),
                ));
            }
            (Some(count), _) if count > MAX_BATCH_RECORDS => {
                return Err(self.row_corrupt(
                    owner,
                    format!("batch of {count} records is above the limit of {MAX_BATCH_RECORDS}"),
                ));
            }
            (Some(count), _) => self.batch_remaining = count - 1,
            (None, remaining) => self.batch_remaining = remaining.saturating_sub(1),
        }
        self.next_seq += 1;
        Ok(())
    }

    /// Checks the end of the rows: the last batch finished, the seeded
    /// prefix is there, and the rows reach `recorded_last_seq`, the last seq
    /// the session row records. The rows were read up to that seq only, so
    /// rows past it are [`check_no_rows_past`]'s to find.
    pub(crate) fn finish(
        &self,
        seed_length: u64,
        recorded_last_seq: u64,
    ) -> Result<(), StoreError> {
        if self.batch_remaining > 0 {
            return Err(self.corrupt(
                self.next_seq,
                format!(
                    "the last batch is missing its last {} records",
                    self.batch_remaining
                ),
            ));
        }
        let last_seq = self.next_seq - 1;
        if last_seq < recorded_last_seq {
            return Err(self.corrupt(
                self.next_seq,
                format!(
                    "the rows end at seq {last_seq} but the session row records {recorded_last_seq} \
                     as the last seq: events {}..={recorded_last_seq} are missing",
                    self.next_seq
                ),
            ));
        }
        if seed_length > last_seq {
            return Err(self.corrupt(
                0,
                format!("seedLength {seed_length} is above the {last_seq} events stored"),
            ));
        }
        Ok(())
    }
}

/// Judges, for a fork by reference of `source` with `seed_length` seeded
/// events, the last seq `source`'s session row records (`None`: no row):
/// the rows a child refers to must exist, and are never removed.
pub(crate) fn check_seed_source_rows(
    database: &Path,
    source: &SessionId,
    recorded: Option<i64>,
    seed_length: u64,
) -> Result<(), StoreError> {
    match recorded {
        None => Err(StoreError::NotFound {
            id: source.to_string(),
            path: database.to_owned(),
        }),
        Some(recorded) if recorded < 0 || recorded.unsigned_abs() < seed_length => {
            Err(corrupt_session(
                database,
                source,
                recorded.saturating_add(1).unsigned_abs(),
                format!(
                    "the session row records last seq {recorded}, but a fork of it counted \
                     {seed_length} events"
                ),
            ))
        }
        Some(_) => Ok(()),
    }
}

/// Refuses rows past the last seq a session row records (`max_row_seq` is
/// the highest seq of the session's rows, read in the same transaction).
pub(crate) fn check_no_rows_past(
    database: &Path,
    id: &SessionId,
    recorded_last_seq: u64,
    max_row_seq: Option<i64>,
) -> Result<(), StoreError> {
    match max_row_seq {
        Some(max) if max > i64::try_from(recorded_last_seq).unwrap_or(i64::MAX) => {
            Err(corrupt_session(
                database,
                id,
                recorded_last_seq.saturating_add(1),
                format!(
                    "rows run to seq {max} but the session row records {recorded_last_seq} as the last seq"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// How errors about one session of a database name it: `<database>#<id>`.
pub(crate) fn session_locator(database: &Path, id: &SessionId) -> PathBuf {
    let mut text = database.as_os_str().to_owned();
    text.push(format!("#{id}"));
    PathBuf::from(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    fn words(audit: &StoreAudit) -> (Vec<String>, Vec<String>) {
        (
            audit.ids.iter().map(ToString::to_string).collect(),
            audit.damage.iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn a_page_gives_back_each_row_s_type_and_body() {
        let mut page = RowPage::default();
        for round in 0..2 {
            page.clear();
            let rows = [
                ("turn/start", "{\"a\""),
                ("", ""),
                ("x-vendor/ünïcode", "{\"é\":1"),
            ];
            for (seq, (event_type, body)) in (1..).zip(rows) {
                page.push(
                    seq,
                    seq + round,
                    event_type.as_bytes(),
                    None,
                    body.as_bytes(),
                    seq,
                );
            }
            assert_eq!(page.rows.len(), rows.len());
            for (row, (event_type, body)) in page.rows.iter().zip(rows) {
                assert_eq!(page.body(row), body.as_bytes());
                assert_eq!(page.event_type(row), event_type.as_bytes());
            }
        }
    }

    #[test]
    fn orphan_events_are_found_in_sorted_and_unsorted_lists_alike() {
        let owned =
            |texts: &[&str]| -> Vec<String> { texts.iter().map(|t| (*t).to_owned()).collect() };
        for (rows, owners) in [
            (owned(&["a", "c", "e"]), owned(&["a", "b", "c", "d", "f"])),
            (owned(&["e", "a", "c"]), owned(&["f", "b", "a", "d", "c"])),
        ] {
            let audit = audit_catalogue(Path::new("s.db"), &rows, &owners);
            let (ids, damage) = words(&audit);
            assert_eq!(ids, ["a", "c", "e"]);
            let named: Vec<&str> = damage
                .iter()
                .map(|message| {
                    ["\"b\"", "\"d\"", "\"f\""]
                        .into_iter()
                        .find(|owner| message.contains(owner))
                        .unwrap_or("?")
                })
                .collect();
            assert_eq!(named.len(), 3, "{damage:#?}");
            let mut sorted = named.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, ["\"b\"", "\"d\"", "\"f\""], "{damage:#?}");
        }
    }

    #[test]
    fn invalid_session_rows_and_orphan_events_are_damage_and_valid_rows_stay() {
        let owned =
            |texts: &[&str]| -> Vec<String> { texts.iter().map(|t| (*t).to_owned()).collect() };
        let audit = audit_catalogue(
            Path::new("s.db"),
            &owned(&["b", "a", "bad/id"]),
            &owned(&["a", "gone"]),
        );
        let (ids, damage) = words(&audit);
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(damage.len(), 2, "{damage:#?}");
        assert!(damage[0].contains("\"bad/id\""), "{}", damage[0]);
        assert!(
            damage[1].contains("\"gone\"") && damage[1].contains("no session row"),
            "{}",
            damage[1]
        );
        assert!(audit
            .damage
            .iter()
            .all(|error| error.class() == ErrorClass::Corrupt));
    }

    #[test]
    fn rows_ending_before_or_after_the_recorded_last_seq_are_corruption() {
        let id = SessionId::parse("a").unwrap_or_else(|error| panic!("{error}"));
        let database = Path::new("s.db");
        let check = SeqCheck::new(database, &id, 4);
        let short = check.finish(0, 5);
        assert!(
            matches!(&short, Err(StoreError::CorruptRow { seq: 4, reason, .. }) if reason.contains("4..=5")),
            "{short:?}"
        );
        assert!(check.finish(0, 3).is_ok());
        let past = check_no_rows_past(database, &id, 3, Some(4));
        assert!(
            matches!(past, Err(StoreError::CorruptRow { seq: 4, .. })),
            "{past:?}"
        );
        assert!(check_no_rows_past(database, &id, 3, Some(3)).is_ok());
        assert!(check_no_rows_past(database, &id, 0, None).is_ok());
    }
}
