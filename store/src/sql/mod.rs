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
//! engine at all (`SeqCheck`, the whole-store catalogue) are
//! `sql_checks`', which SQLite shares too; each engine module (`postgres`)
//! keeps only what differs: connection, SQL dialect, locking and
//! notification.

#[cfg(feature = "postgres")]
pub(crate) mod postgres;

use std::path::Path;

use sessionlog_schema::{decode_header, encode_line, record_crc, DecodedHeader, SessionId};

pub(crate) use crate::sql_checks::{
    audit_catalogue, check_no_rows_past, corrupt_session as corrupt, session_locator, EventRow,
    SeqCheck,
};
use crate::StoreError;

/// A session's header row, as stored.
#[derive(Debug)]
pub(crate) struct HeaderRow {
    pub(crate) body: String,
    pub(crate) crc: i64,
    /// The seq of the session's last event (0: none), kept up to date in the
    /// transaction of every append.
    pub(crate) last_seq: i64,
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

/// A value checked by `check_storable` (saturates otherwise).
pub(crate) fn sql_integer(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
