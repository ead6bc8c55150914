//! State snapshots: the writer's fold of a session, kept beside it so that
//! reopening a long session folds only what was appended since
//! (docs/FORMAT.md, "State snapshots").
//!
//! A snapshot is a cache, never a source of truth. It names where it was
//! taken (its anchor: the seq, the CRC of the record at that seq, and for a
//! JSONL log the byte offset and line count of the good prefix there), and
//! a writer resumes from it only when the log still holds that record
//! there; the tail after it is read and checked as a whole log is. A
//! snapshot that is torn, damaged, of another session or header, of a
//! format this build does not know, or whose anchor no longer matches is
//! ignored (and replaced by the next one written), never an error.
//! `verify`, export and migration never read one; a copying fork reads one
//! only to predict the child's header, which its full read then checks.
//! What it proves, and what it does not (a snapshot written by someone who
//! can write the store): docs/FORMAT.md, "What a snapshot proves".

use sessionlog_projections::{PageSource, SessionState, SnapshotPage, SnapshotTrust};
use sessionlog_schema::{SessionHeader, SessionId};

/// The snapshot format this build writes and reads.
pub(crate) const STATE_SNAPSHOT_FORMAT: u32 = 5;

/// How many bytes of state a page of a snapshot holds at least (the last
/// excepted): a writer resuming from a snapshot reads the pages its
/// lookups land on, each checked against its own CRC.
pub(crate) const SNAPSHOT_PAGE_BYTES: usize = 16 * 1024;

/// The first bytes of every snapshot.
const MAGIC: &[u8; 16] = b"sessionlog-state";

/// A writer takes a snapshot once this many events were acknowledged since
/// the last one (or since the log was folded from its start), and never
/// more often than one byte of snapshot per [`SNAPSHOT_BYTES_PER_EVENT`]
/// events' worth: see [`snapshot_interval`].
pub(crate) const SNAPSHOT_EVERY_EVENTS: u64 = 8192;

/// A writer that closes with at least this many events folded since its
/// last snapshot takes one more, at its last seq: a runtime that closes a
/// long session and opens it again, or forks it, then folds nothing.
/// Below it, folding the tail costs less than a snapshot's write.
pub(crate) const CLOSE_SNAPSHOT_EVENTS: u64 = 1024;

/// Whether a session created or copied whole with `events` events gets a
/// snapshot from what made it (`import`, `migrate`, any creation with its
/// events): as a writer closing with as many folded takes one, so that the
/// first open of a long session so made folds nothing.
pub(crate) fn kept_at_creation(events: usize) -> bool {
    events as u64 >= CLOSE_SNAPSHOT_EVENTS
}

/// The snapshot a database keeps of a session created or copied whole with
/// `events` events, the last of CRC `last_crc`, whose fold is `state` and
/// stored header body `header_body`: its anchor and bytes; `None` for a
/// session too short to get one ([`kept_at_creation`]).
pub(crate) fn of_new_rows(
    state: &SessionState,
    header_body: &str,
    events: usize,
    last_crc: u32,
) -> Option<(SnapshotAnchor, Vec<u8>)> {
    if !kept_at_creation(events) {
        return None;
    }
    let anchor = SnapshotAnchor::of_row(state.seq(), last_crc);
    Some((anchor, encode(state, header_crc(header_body), anchor)))
}

/// [`of_new_rows`] of a session created with `events`.
pub(crate) fn of_created(
    state: &SessionState,
    header_body: &str,
    events: &[sessionlog_schema::EventRecord],
) -> Option<(SnapshotAnchor, Vec<u8>)> {
    let last = events.last()?;
    let last_crc = sessionlog_schema::record_crc(&state.header().id, last.body().as_bytes());
    of_new_rows(state, header_body, events.len(), last_crc)
}

/// The most snapshot bytes a writer writes per event appended, on average.
pub(crate) const SNAPSHOT_BYTES_PER_EVENT: u64 = 256;

/// How many events after a snapshot of `snapshot_bytes` bytes the next one
/// is due: [`SNAPSHOT_EVERY_EVENTS`], or more for a large state, so that
/// rewriting it costs at most [`SNAPSHOT_BYTES_PER_EVENT`] bytes per event.
pub(crate) fn snapshot_interval(snapshot_bytes: usize) -> u64 {
    SNAPSHOT_EVERY_EVENTS.max(snapshot_bytes as u64 / SNAPSHOT_BYTES_PER_EVENT)
}

/// Where a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SnapshotAnchor {
    /// The last seq folded.
    pub(crate) seq: u64,
    /// The CRC of the record at `seq`.
    pub(crate) record_crc: u32,
    /// JSONL: the length in bytes of the good prefix through `seq`, header
    /// included (0 in a database).
    pub(crate) offset: u64,
    /// JSONL: its lines, header included (0 in a database).
    pub(crate) lines: u64,
}

impl SnapshotAnchor {
    /// The anchor of a database snapshot: the event row at `seq`, whose
    /// CRC is `record_crc`.
    pub(crate) fn of_row(seq: u64, record_crc: u32) -> SnapshotAnchor {
        SnapshotAnchor {
            seq,
            record_crc,
            offset: 0,
            lines: 0,
        }
    }
}

/// The bytes of a snapshot of `state`, taken at `anchor`, of the session
/// whose stored header body's CRC is `header_crc`: its head (what it is
/// of, where it was taken, and its pages' lengths and CRCs, then the
/// CRC of all that), then the state's bytes, page after page.
pub(crate) fn encode(state: &SessionState, header_crc: u32, anchor: SnapshotAnchor) -> Vec<u8> {
    let (state_bytes, cuts) = state.encode_snapshot_paged(SNAPSHOT_PAGE_BYTES);
    let id = state.header().id.as_str().as_bytes();
    let mut out = Vec::with_capacity(state_bytes.len() + 96 + 8 * (cuts.len() + 1));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&STATE_SNAPSHOT_FORMAT.to_le_bytes());
    out.extend_from_slice(&(id.len() as u32).to_le_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(&anchor.seq.to_le_bytes());
    out.extend_from_slice(&anchor.record_crc.to_le_bytes());
    out.extend_from_slice(&anchor.offset.to_le_bytes());
    out.extend_from_slice(&anchor.lines.to_le_bytes());
    out.extend_from_slice(&(state_bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&(cuts.len() as u32 + 1).to_le_bytes());
    let mut start = 0;
    for end in cuts.iter().copied().chain([state_bytes.len()]) {
        let page = &state_bytes[start..end];
        out.extend_from_slice(&(page.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(page).to_le_bytes());
        start = end;
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&state_bytes);
    out
}

/// The CRC of a stored header body, as a snapshot names its header.
pub(crate) fn header_crc(header_body: &str) -> u32 {
    crc32fast::hash(header_body.as_bytes())
}

/// What a snapshot's head says: where it was taken, and where its state
/// and pages are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotHead {
    pub(crate) anchor: SnapshotAnchor,
    /// The head's length: where the state starts.
    pub(crate) len: usize,
    pub(crate) state_len: usize,
    pub(crate) pages: Vec<SnapshotPage>,
}

impl SnapshotHead {
    /// The whole snapshot's length.
    pub(crate) fn snapshot_len(&self) -> usize {
        self.len.saturating_add(self.state_len)
    }
}

/// A snapshot head's fields as they are: what [`decode_head`] checks, and
/// what [`split`] cuts a snapshot by.
struct Head<'b> {
    id: &'b [u8],
    header_crc: u32,
    anchor: SnapshotAnchor,
    state_len: u64,
    pages: Vec<SnapshotPage>,
    crc: u32,
    /// The head's length: where the state starts.
    len: usize,
}

/// The head the first bytes of a snapshot of this format, `bytes`, hold,
/// its fields unchecked: `Ok(Err(n))` when the head is `n` bytes long,
/// more than `bytes` holds.
fn read_head(bytes: &[u8]) -> Result<Result<Head<'_>, usize>, String> {
    let mut input = Fields { bytes };
    if input.take(MAGIC.len())? != MAGIC {
        return Err("not a state snapshot".to_owned());
    }
    let format = input.u32()?;
    if format != STATE_SNAPSHOT_FORMAT {
        return Err(format!(
            "format {format}, this build reads {STATE_SNAPSHOT_FORMAT}"
        ));
    }
    let id_len = input.u32()? as usize;
    let id = input.take(id_len)?;
    let header_crc = input.u32()?;
    let anchor = SnapshotAnchor {
        seq: input.u64()?,
        record_crc: input.u32()?,
        offset: input.u64()?,
        lines: input.u64()?,
    };
    let state_len = input.u64()?;
    let page_count = input.u32()? as usize;
    let len = (bytes.len() - input.bytes.len())
        .checked_add(page_count.saturating_mul(8))
        .and_then(|len| len.checked_add(4))
        .ok_or_else(|| "too long".to_owned())?;
    if len > bytes.len() {
        return Ok(Err(len));
    }
    let mut pages = Vec::with_capacity(page_count);
    for _ in 0..page_count {
        pages.push(SnapshotPage {
            len: input.u32()?,
            crc: input.u32()?,
        });
    }
    Ok(Ok(Head {
        id,
        header_crc,
        anchor,
        state_len,
        pages,
        crc: input.u32()?,
        len,
    }))
}

/// The head the first bytes of a snapshot, `bytes`, hold, when it is of
/// this format, of session `header.id` with this header body, and whole
/// (its CRC matches): `Ok(Err(n))` when the head is `n` bytes long, more
/// than `bytes` holds. Why not otherwise.
pub(crate) fn decode_head(
    bytes: &[u8],
    header: &SessionHeader,
    header_body: &str,
) -> Result<Result<SnapshotHead, usize>, String> {
    let head = match read_head(bytes)? {
        Ok(head) => head,
        Err(len) => return Ok(Err(len)),
    };
    if head.id != header.id.as_str().as_bytes() {
        return Err(format!(
            "it is a snapshot of session {:?}, not {}",
            String::from_utf8_lossy(head.id),
            header.id
        ));
    }
    if head.header_crc != header_crc(header_body) {
        return Err("it was taken of another header".to_owned());
    }
    if crc32fast::hash(&bytes[..head.len - 4]) != head.crc {
        return Err("the CRC of its head does not match: torn or changed".to_owned());
    }
    if head.pages.iter().any(|page| page.len == 0) {
        return Err("it has a page of 0 bytes".to_owned());
    }
    let state_len = usize::try_from(head.state_len).map_err(|_| "too long".to_owned())?;
    let total = head.pages.iter().fold(0usize, |total, page| {
        total.saturating_add(page.len as usize)
    });
    if total != state_len {
        return Err(format!(
            "its pages hold {total} bytes, its state {state_len}"
        ));
    }
    Ok(Ok(SnapshotHead {
        anchor: head.anchor,
        len: head.len,
        state_len,
        pages: head.pages,
    }))
}

/// The head and the pages, in order, of a snapshot `encode` wrote, for a
/// store that keeps them apart (SQLite: the head in `snapshots`, each page
/// a row of `snapshot_pages`); `None` for bytes that are not one.
pub(crate) fn split(bytes: &[u8]) -> Option<(&[u8], Vec<&[u8]>)> {
    let head = read_head(bytes).ok()?.ok()?;
    let (head_bytes, mut state) = bytes.split_at(head.len);
    let mut pages = Vec::with_capacity(head.pages.len());
    for page in &head.pages {
        let (page, rest) = state.split_at_checked(page.len as usize)?;
        pages.push(page);
        state = rest;
    }
    state.is_empty().then_some((head_bytes, pages))
}

/// The state `bytes` hold and where it was taken, when they are a whole
/// snapshot of this format, of session `header.id` with this header body
/// (every page checked against its CRC); why not otherwise. The anchor is
/// left to the caller to check against the log.
///
/// The state keeps `bytes` and reads its calls, requests, ids and reviewed
/// seqs in place there (`SessionState::decode_snapshot_in`): a resume
/// neither copies nor decodes them row by row. The pages' CRCs are checked
/// first, so the calls' rows and the reviewed seqs are not checked one by
/// one ([`SnapshotTrust::CrcMatched`]): a torn or damaged snapshot is
/// refused by its CRCs.
pub(crate) fn decode(
    bytes: Vec<u8>,
    header: &SessionHeader,
    header_body: &str,
) -> Result<(SessionState, SnapshotAnchor), String> {
    let head = match decode_head(&bytes, header, header_body)? {
        Ok(head) => head,
        Err(_) => return Err("it ends before its fields".to_owned()),
    };
    if bytes.len() != head.snapshot_len() {
        return Err(format!(
            "it is {} bytes long, its head says {}: torn or changed",
            bytes.len(),
            head.snapshot_len()
        ));
    }
    let mut start = head.len;
    for (index, page) in head.pages.iter().enumerate() {
        let end = start + page.len as usize;
        if crc32fast::hash(&bytes[start..end]) != page.crc {
            return Err(format!(
                "its page {index} does not match its CRC: torn or changed"
            ));
        }
        start = end;
    }
    let state = SessionState::decode_snapshot_in(
        header.clone(),
        header_body,
        bytes,
        head.len..head.snapshot_len(),
        SnapshotTrust::CrcMatched,
    )?;
    checked_at_anchor(state, head.anchor)
}

/// The state of the snapshot whose head is `head`, its bytes in `source`,
/// read page by page (`SessionState::decode_snapshot_paged`): only the
/// pages of the state's fields and pending approvals now, any other when
/// a lookup lands on it, each checked against its CRC then.
pub(crate) fn decode_paged(
    head: SnapshotHead,
    source: Box<dyn PageSource>,
    header: &SessionHeader,
    header_body: &str,
) -> Result<(SessionState, SnapshotAnchor), String> {
    let state = SessionState::decode_snapshot_paged(
        header.clone(),
        header_body,
        source,
        head.len as u64,
        head.pages,
    )?;
    checked_at_anchor(state, head.anchor)
}

/// `state` when it is at its anchor's seq.
fn checked_at_anchor(
    state: SessionState,
    anchor: SnapshotAnchor,
) -> Result<(SessionState, SnapshotAnchor), String> {
    if state.seq() != anchor.seq || anchor.seq == 0 {
        return Err(format!(
            "its state is at seq {}, its anchor at seq {}",
            state.seq(),
            anchor.seq
        ));
    }
    Ok((state, anchor))
}

/// Warns that the snapshot of session `id` at `seq` could not be kept, for
/// `error`: the log is untouched, and the next open folds more of it.
pub(crate) fn not_kept(id: &SessionId, seq: u64, error: &dyn std::fmt::Display) {
    tracing::warn!(
        session = %id,
        "could not keep the state snapshot of session {id} at seq {seq} (the log is \
         untouched; the next open folds more of it): {error}"
    );
}

/// Notes that the snapshot of session `id` at `place` was not used, and
/// why: the writer folds from the start instead.
pub(crate) fn ignored(id: &SessionId, place: &std::path::Path, why: &str) {
    tracing::debug!(
        session = %id,
        place = %place.display(),
        "ignoring the state snapshot of session {id} ({}): {why}; folding the whole log",
        place.display()
    );
}

/// Reads fixed fields off the front of a snapshot.
struct Fields<'b> {
    bytes: &'b [u8],
}

impl<'b> Fields<'b> {
    fn take(&mut self, len: usize) -> Result<&'b [u8], String> {
        if len > self.bytes.len() {
            return Err("it ends before its fields".to_owned());
        }
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut value = [0u8; 8];
        value.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(value))
    }
}

#[cfg(test)]
mod tests {
    use sessionlog_projections::SessionState;
    use sessionlog_schema::{SessionHeader, SessionId};

    use super::*;

    /// A snapshot of a session holding only its header, at seq 0 (which
    /// [`decode`] refuses after the format checks), and that header.
    fn snapshot_bytes() -> (Vec<u8>, SessionHeader) {
        let id = match SessionId::parse("s") {
            Ok(id) => id,
            Err(error) => panic!("test id: {error}"),
        };
        let header = SessionHeader::root(id, 1_000, "/work".to_owned());
        let state = SessionState::new(header.clone());
        let body = header.to_body();
        let bytes = encode(&state, header_crc(&body), SnapshotAnchor::of_row(0, 7));
        (bytes, header)
    }

    /// `bytes` with its format field set to `format` and its head's CRC
    /// made to match again.
    fn with_format(mut bytes: Vec<u8>, format: u32) -> Vec<u8> {
        let (_, header) = snapshot_bytes();
        let head = match decode_head(&bytes, &header, &header.to_body()) {
            Ok(Ok(head)) => head,
            other => panic!("the head of the snapshot as written: {other:?}"),
        };
        bytes[16..20].copy_from_slice(&format.to_le_bytes());
        let end = head.len - 4;
        let crc = crc32fast::hash(&bytes[..end]);
        bytes[end..head.len].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn a_snapshot_of_a_format_before_or_an_unknown_one_is_refused_naming_both() {
        let (bytes, header) = snapshot_bytes();
        let body = header.to_body();
        for format in [1, 2, 3, 4, STATE_SNAPSHOT_FORMAT + 1] {
            let refused = decode(with_format(bytes.clone(), format), &header, &body);
            assert_eq!(
                refused.err(),
                Some(format!(
                    "format {format}, this build reads {STATE_SNAPSHOT_FORMAT}"
                ))
            );
        }
        // The bytes as written get past the format (to the anchor check).
        let decoded = decode(bytes, &header, &body);
        assert_eq!(
            decoded.err(),
            Some("its state is at seq 0, its anchor at seq 0".to_owned())
        );
    }

    #[test]
    fn a_page_of_length_0_is_no_snapshot_for_a_whole_read_either() {
        let (_, header) = snapshot_bytes();
        let body = header.to_body();
        let record =
            sessionlog_schema::EventRecord::new(1, 5, None, "turn/start", r#"{"turnId":"t"}"#);
        let (state, _) = sessionlog_projections::fold(header.clone(), &[record]);
        let bytes = encode(&state, header_crc(&body), SnapshotAnchor::of_row(1, 7));
        assert!(decode(bytes.clone(), &header, &body).is_ok());
        let head = match decode_head(&bytes, &header, &body) {
            Ok(Ok(head)) => head,
            other => panic!("{other:?}"),
        };
        // One more page, of length 0 (CRC 0, the CRC of no bytes), first.
        let count_at = head.len - 4 - 8 * head.pages.len() - 4;
        let mut forged = bytes[..count_at].to_vec();
        forged.extend_from_slice(&(head.pages.len() as u32 + 1).to_le_bytes());
        forged.extend_from_slice(&[0u8; 8]);
        forged.extend_from_slice(&bytes[count_at + 4..head.len - 4]);
        let crc = crc32fast::hash(&forged);
        forged.extend_from_slice(&crc.to_le_bytes());
        forged.extend_from_slice(&bytes[head.len..]);
        // docs/FORMAT.md, "Bytes": "A page of length 0 ... is no snapshot".
        assert!(
            decode(forged, &header, &body).is_err(),
            "a snapshot with a page of length 0, read whole, was taken"
        );
    }
}
