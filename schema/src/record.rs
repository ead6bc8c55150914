//! The record codec: the only code that knows the byte layout of a JSONL line.
//!
//! A line is `<body>,"crc":"xxxxxxxx"}` where `<body>` is a compact JSON object
//! missing its closing brace, and the CRC-32 covers the session id's bytes
//! followed by `<body>`. Records keep `<body>` verbatim, so a log can be
//! exported, migrated or re-bound to a child's id without touching the bytes
//! that the CRC, the export and the SQLite backend all share.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::compact::is_json;
use crate::{ApprovalPolicy, EventView, SandboxMode, SessionId, ShapeError};

/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u64 = 1;

/// The largest record (one line, without its `\n`) a writer emits or a reader
/// accepts: 16 MiB. Longer lines are damage.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// Length of the `,"crc":"xxxxxxxx"}` suffix every line ends with.
pub const CRC_SUFFIX_LEN: usize = 18;

const CRC_PREFIX: &[u8] = b",\"crc\":\"";

/// The immutable first record of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// The session's id.
    pub id: SessionId,
    /// Creation time, unix milliseconds.
    pub created_at: u64,
    /// The working directory the session runs in.
    pub cwd: String,
    /// The session this one was forked from.
    pub parent_session: Option<SessionId>,
    /// How many of the first events are the parent's, copied at fork.
    pub seed_length: u64,
    /// 0 for a root session, parent's + 1 for a child.
    pub delegation_depth: u64,
    /// Sandbox baseline (the parent's override at fork).
    pub sandbox_mode: Option<SandboxMode>,
    /// Approval baseline (the parent's override at fork).
    pub approval_policy: Option<ApprovalPolicy>,
}

/// One numbered event as it is stored: its fields and its body bytes.
#[derive(Clone)]
pub struct EventRecord {
    seq: u64,
    ts: u64,
    batch: Option<u64>,
    event_type: TypeText,
    body: BodyText,
    data: Range<usize>,
    /// The CRC its line stored, checked for the session it was read from,
    /// when it was decoded from a line: what [`Resign`] re-signs it from.
    line_crc: Option<u32>,
}

/// Where a record keeps its event type.
#[derive(Clone)]
enum TypeText {
    /// These bytes of the body, which spell the type with no escape (a
    /// body in the writers' layout): no text of its own.
    InBody(Range<usize>),
    /// Its own text (a type the body spells with escapes, or read by the
    /// general parse).
    Own(Box<str>),
}

/// Where a record keeps its body.
#[derive(Clone)]
enum BodyText {
    /// Its own text.
    Own(String),
    /// These bytes of a text other records share: the read buffer its line
    /// was lent from ([`BodyRoom::Shared`]). Offsets of 32 bits keep a record
    /// as small as one with a body of its own, which a long read moves
    /// through its queues a million times.
    Shared(Arc<String>, Range<u32>),
}

impl BodyText {
    #[inline]
    fn as_str(&self) -> &str {
        match self {
            BodyText::Own(text) => text,
            BodyText::Shared(text, body) => &text[body.start as usize..body.end as usize],
        }
    }

    /// These bytes of the body, cut from the text that holds them at once:
    /// a record's type and `data` are read many times a fold.
    #[inline]
    fn part(&self, range: &Range<usize>) -> &str {
        match self {
            BodyText::Own(text) => &text[range.clone()],
            BodyText::Shared(text, body) => {
                let start = body.start as usize;
                &text[start + range.start..start + range.end]
            }
        }
    }
}

/// Where [`decode_event_unproven_into`] keeps the body of a record in the
/// writers' layout.
#[derive(Debug)]
pub enum BodyRoom<'a> {
    /// Written into this buffer (its text dropped, its room kept).
    Buffer(String),
    /// Lent from the text the line lies in, which the record then shares,
    /// with no copy: the line is the bytes of the text from this index on.
    /// A reader that reads its log into shared blocks of text decodes its
    /// records so; they keep the block alive while they live. A line that
    /// does not lie there is read as bytes, its body copied.
    Shared(&'a Arc<String>, usize),
}

/// Records are equal when their fields and bodies are, wherever each
/// keeps its type and its body.
impl PartialEq for EventRecord {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.ts == other.ts
            && self.batch == other.batch
            && self.event_type() == other.event_type()
            && self.body() == other.body()
            && self.data == other.data
    }
}

impl Eq for EventRecord {}

/// A header field whose value is outside its vocabulary (a rule violation at
/// seq 0, not corruption: the record itself is intact).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seq 0 (header) field {field}: {value:?} is not a valid {what} (expected {expected})")]
pub struct HeaderVocabularyError {
    /// The header member.
    pub field: &'static str,
    /// The value found.
    pub value: String,
    /// The vocabulary's name.
    pub what: &'static str,
    /// Its allowed spellings.
    pub expected: String,
}

/// A decoded header: the header (an out-of-vocabulary field left as `None`)
/// and the vocabulary errors found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedHeader {
    /// The header.
    pub header: SessionHeader,
    /// Out-of-vocabulary fields; empty for a valid header.
    pub vocabulary_errors: Vec<HeaderVocabularyError>,
    /// The header record's body as it was read (its bytes before `,"crc":`),
    /// so a header is exported as it is, whatever its member order or its
    /// out-of-vocabulary values.
    pub body: String,
}

/// An event record decoded together with the view a fold reads of its data
/// ([`decode_event_viewed`]).
#[derive(Debug)]
pub struct ViewedEvent<'a> {
    /// The record, as [`decode_event`] returns it.
    pub record: EventRecord,
    /// `EventView::parse` of its type and data: a known type whose data has
    /// the wrong shape is not a damaged or malformed record, only an event
    /// the fold refuses.
    pub view: Result<EventView<'a>, ShapeError>,
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The line is not intact: no CRC suffix, a CRC mismatch, not UTF-8, not
    /// JSON, too long. A crash during an append leaves such lines.
    #[error("{0}")]
    Damaged(String),
    /// The line is intact (its CRC matches and it is JSON) but its members or
    /// their types break the format. No crash produces this.
    #[error("{0}")]
    Malformed(String),
}

impl SessionHeader {
    /// A root session header: no parent, no seed, depth 0, no baselines.
    pub fn root(id: SessionId, created_at: u64, cwd: String) -> Self {
        SessionHeader {
            id,
            created_at,
            cwd,
            parent_session: None,
            seed_length: 0,
            delegation_depth: 0,
            sandbox_mode: None,
            approval_policy: None,
        }
    }

    /// The header's body: compact JSON in docs/FORMAT.md's member order, without
    /// the CRC member and the closing brace.
    pub fn to_body(&self) -> String {
        let text = |s: &str| serde_json::Value::from(s).to_string();
        let nullable = |s: Option<&str>| s.map_or_else(|| "null".to_owned(), text);
        format!(
            "{{\"kind\":\"header\",\"formatVersion\":{FORMAT_VERSION},\"id\":{},\"createdAt\":{},\"cwd\":{},\"parentSession\":{},\"seedLength\":{},\"delegationDepth\":{},\"sandboxMode\":{},\"approvalPolicy\":{}",
            text(self.id.as_str()),
            self.created_at,
            text(&self.cwd),
            nullable(self.parent_session.as_ref().map(SessionId::as_str)),
            self.seed_length,
            self.delegation_depth,
            nullable(self.sandbox_mode.map(SandboxMode::as_str)),
            nullable(self.approval_policy.map(ApprovalPolicy::as_str)),
        )
    }

    /// The full line for this header, with its CRC and `\n`.
    pub fn encode(&self) -> String {
        encode_line(&self.id, &self.to_body())
    }
}

impl EventRecord {
    /// Builds a record from its parts. `data` must be compact JSON (see
    /// [`compact_json`]); `batch` is `Some(n)` only on the first record of an
    /// `n`-record batch.
    pub fn new(seq: u64, ts: u64, batch: Option<u64>, event_type: &str, data: &str) -> Self {
        let batch_member = batch.map_or_else(String::new, |n| format!(",\"batch\":{n}"));
        let prefix = format!(
            "{{\"seq\":{seq},\"ts\":{ts}{batch_member},\"type\":{},\"data\":",
            serde_json::Value::from(event_type)
        );
        let start = prefix.len();
        let mut body = String::with_capacity(start + data.len());
        body.push_str(&prefix);
        body.push_str(data);
        EventRecord {
            seq,
            ts,
            batch,
            event_type: TypeText::Own(event_type.into()),
            data: start..body.len(),
            body: BodyText::Own(body),
            line_crc: None,
        }
    }

    /// The event's sequence number (1-based).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The event's time, unix milliseconds.
    pub fn ts(&self) -> u64 {
        self.ts
    }

    /// `Some(n)` on the first record of an `n`-record batch.
    pub fn batch(&self) -> Option<u64> {
        self.batch
    }

    /// The event type, e.g. `turn/start`.
    #[inline]
    pub fn event_type(&self) -> &str {
        match &self.event_type {
            TypeText::InBody(range) => self.body.part(range),
            TypeText::Own(text) => text,
        }
    }

    /// The raw JSON text of `data`, exactly as logged.
    #[inline]
    pub fn data(&self) -> &str {
        self.body.part(&self.data)
    }

    /// The record's body, given up: room for the body of another record
    /// ([`decode_event_unproven_into`]). A body shared with other records
    /// ([`BodyRoom::Shared`]) leaves no room of its own: an empty string.
    pub fn into_body(self) -> String {
        match self.body {
            BodyText::Own(text) => text,
            BodyText::Shared(..) => String::new(),
        }
    }

    /// The record's body: its line up to, not including, `,"crc":`.
    #[inline]
    pub fn body(&self) -> &str {
        self.body.as_str()
    }

    /// The CRC its line stored, when it was decoded from a line of a log
    /// ([`decode_event`], [`decode_event_viewed`],
    /// [`decode_event_unproven_into`]): checked, so the CRC of the session
    /// id it was read for and [`body`](Self::body). `None` for a record
    /// built or read otherwise.
    pub fn line_crc(&self) -> Option<u32> {
        self.line_crc
    }

    /// The record, naming `crc` as the CRC its line stored.
    fn read_under(mut self, crc: u32) -> EventRecord {
        self.line_crc = Some(crc);
        self
    }

    /// The record as `export` prints it: the body closed by `}`.
    pub fn export_line(&self) -> String {
        let body = self.body();
        let mut line = String::with_capacity(body.len() + 1);
        line.push_str(body);
        line.push('}');
        line
    }

    /// The full line for session `id`, with its CRC and `\n`.
    pub fn encode(&self, id: &SessionId) -> String {
        encode_line(id, self.body())
    }

    /// The same record with a new seq (used when an event's place is only
    /// known at append time). Keeps `ts`, type and data bytes.
    pub fn with_seq(&self, seq: u64, batch: Option<u64>) -> EventRecord {
        EventRecord::new(seq, self.ts, batch, self.event_type(), self.data())
    }
}

impl std::fmt::Debug for EventRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecord")
            .field("seq", &self.seq)
            .field("type", &self.event_type())
            .field("body", &self.body())
            .finish()
    }
}

/// CRC-32 of the id's bytes followed by `body`.
pub fn record_crc(id: &SessionId, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(id.as_str().as_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// `body` + `,"crc":"xxxxxxxx"}` + `\n`.
pub fn encode_line(id: &SessionId, body: &str) -> String {
    let crc = record_crc(id, body.as_bytes());
    let mut line = String::with_capacity(body.len() + CRC_SUFFIX_LEN + 1);
    line.push_str(body);
    line.push_str(&format!(",\"crc\":\"{crc:08x}\"}}\n"));
    line
}

/// Appends `body` + `,"crc":"xxxxxxxx"}` + `\n` to `out` (the line
/// [`encode_line`] makes, without an allocation of its own): how a copy of
/// many records, such as a fork's, writes them into one buffer.
pub fn encode_line_into(id: &SessionId, body: &str, out: &mut Vec<u8>) {
    encode_signed_line_into(body, record_crc(id, body.as_bytes()), out);
}

/// [`encode_line_into`] of a body whose CRC for the session is `crc`,
/// known already ([`Resign`]).
pub fn encode_signed_line_into(body: &str, crc: u32, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(body.len() + CRC_SUFFIX_LEN + 1);
    out.extend_from_slice(body.as_bytes());
    out.extend_from_slice(b",\"crc\":\"");
    for shift in (0..8).rev() {
        out.push(HEX[((crc >> (shift * 4)) & 0xf) as usize]);
    }
    out.extend_from_slice(b"\"}\n");
}

/// Re-signs the records of one session's log for another: the CRC of
/// `to`'s id followed by a record's body, from the CRC its line stored in
/// `from`'s log ([`EventRecord::line_crc`]), without a pass over the body.
///
/// CRC-32 is linear. For ids `a` and `b` and a body of `n` bytes,
/// `crc(a ‖ body) ^ crc(b ‖ body) = (crc(a) ^ crc(b)) · x^(8n) mod P`
/// (the identity zlib's `crc32_combine` rests on): the two CRCs differ by a
/// value that depends on the body's length alone. That value is kept for
/// each length met, up to [`Resign::REMEMBERED_LENGTHS`]; a longer body,
/// or a record with no line CRC, is hashed as [`record_crc`] hashes it.
#[derive(Debug, Clone)]
pub struct Resign {
    from: SessionId,
    to: SessionId,
    /// `(crc(from) ^ crc(to)) · x^(8n) mod P` at index `n`.
    shifts: Vec<u32>,
}

impl Resign {
    /// The body lengths below which the difference is kept: 64 KiB, so
    /// 256 KiB of it at most.
    pub const REMEMBERED_LENGTHS: usize = 64 << 10;

    /// Re-signs records read from session `from`'s log for session `to`.
    pub fn new(from: &SessionId, to: &SessionId) -> Resign {
        let ids =
            crc32fast::hash(from.as_str().as_bytes()) ^ crc32fast::hash(to.as_str().as_bytes());
        Resign {
            from: from.clone(),
            to: to.clone(),
            shifts: vec![ids],
        }
    }

    /// `record_crc(to, record.body())`, for a record read from `from`'s
    /// log.
    pub fn crc(&mut self, record: &EventRecord) -> u32 {
        let body = record.body().as_bytes();
        let crc = match record.line_crc() {
            Some(crc) if body.len() < Self::REMEMBERED_LENGTHS => crc ^ self.shift(body.len()),
            _ => record_crc(&self.to, body),
        };
        if cfg!(debug_assertions) {
            let read = record.line_crc().map(|_| record_crc(&self.from, body));
            assert_eq!(
                record.line_crc(),
                read,
                "a record not read from {}",
                self.from
            );
            assert_eq!(crc, record_crc(&self.to, body));
        }
        crc
    }

    /// The difference of the two ids' CRCs carried past `n` bytes.
    fn shift(&mut self, n: usize) -> u32 {
        while self.shifts.len() <= n {
            let last = self.shifts[self.shifts.len() - 1];
            // One zero byte through the reflected register: `· x^8 mod P`.
            self.shifts
                .push(CRC_TABLE[(last & 0xff) as usize] ^ (last >> 8));
        }
        self.shifts[n]
    }
}

/// The byte-at-a-time table of CRC-32 (reflected, polynomial `0xEDB88320`).
const CRC_TABLE: [u32; 256] = {
    let mut table = [0_u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut value = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            value = match value & 1 {
                1 => (value >> 1) ^ 0xEDB8_8320,
                _ => value >> 1,
            };
            bit += 1;
        }
        table[byte] = value;
        byte += 1;
    }
    table
};

/// Splits a line (without `\n`) into its body and stored CRC, if it ends with
/// a well-formed `,"crc":"xxxxxxxx"}` suffix.
pub fn split_crc(line: &[u8]) -> Option<(&[u8], u32)> {
    if line.len() < CRC_SUFFIX_LEN + 1 || !line.ends_with(b"\"}") {
        return None;
    }
    let body_end = line.len() - CRC_SUFFIX_LEN;
    let suffix = &line[body_end..];
    if !suffix.starts_with(CRC_PREFIX) {
        return None;
    }
    // Eight lower-case hex digits, read in the one pass that checks them:
    // a byte that is not one has a high bit set in its table entry.
    let mut crc = 0_u32;
    let mut flags = 0_u8;
    for &digit in &suffix[CRC_PREFIX.len()..CRC_PREFIX.len() + 8] {
        let value = HEX_VALUES[usize::from(digit)];
        flags |= value;
        crc = (crc << 4) | u32::from(value & 0x0f);
    }
    (flags & 0xf0 == 0).then_some((&line[..body_end], crc))
}

/// The value of each lower-case hex digit, at its byte; `0xff` at every
/// other byte.
const HEX_VALUES: [u8; 256] = {
    let mut values = [0xff; 256];
    let mut digit = 0;
    while digit < 16 {
        let byte = match digit < 10 {
            true => b'0' + digit,
            false => b'a' + digit - 10,
        };
        values[byte as usize] = digit;
        digit += 1;
    }
    values
};

/// Checks a line's suffix and CRC for session `id`, returning its body.
pub fn check_crc<'a>(id: &SessionId, line: &'a [u8]) -> Result<&'a [u8], DecodeError> {
    checked_line(id, line).map(|(body, _)| body)
}

/// [`check_crc`], with the CRC the line stores.
fn checked_line<'a>(id: &SessionId, line: &'a [u8]) -> Result<(&'a [u8], u32), DecodeError> {
    if line.len() > MAX_RECORD_BYTES {
        return Err(DecodeError::Damaged(format!(
            "record is {} bytes, above the {MAX_RECORD_BYTES}-byte limit",
            line.len()
        )));
    }
    let Some((body, stored)) = split_crc(line) else {
        return Err(DecodeError::Damaged(
            "line does not end with a ,\"crc\":\"xxxxxxxx\"} member".to_owned(),
        ));
    };
    let computed = record_crc(id, body);
    if computed != stored {
        return Err(DecodeError::Damaged(format!(
            "CRC mismatch (stored {stored:08x}, computed {computed:08x} for session {id})"
        )));
    }
    Ok((body, stored))
}

/// Decodes and checks the header line (without `\n`). The CRC is checked
/// against the id the header itself names.
pub fn decode_header(line: &[u8]) -> Result<DecodedHeader, DecodeError> {
    if split_crc(line).is_none() {
        return Err(DecodeError::Damaged(
            "line does not end with a ,\"crc\":\"xxxxxxxx\"} member".to_owned(),
        ));
    }
    let text = utf8(line)?;
    let wire: HeaderWire<'_> = parse_record(text)?;
    let id = wire_id(&wire)?;
    let body = check_crc(&id, line)?;
    let body = text[..body.len()].to_owned();
    header_from_wire(wire, id, body)
}

/// Decodes a header from its body as a database row stores it (the bytes
/// of the record before `,"crc":`), whose CRC the caller has checked
/// against the session of the row: the header [`decode_header`] gives for
/// the line of that body and CRC, with no line made and the CRC not
/// computed again. A body that is not such a record's (one that closes
/// its object, or holds a `crc` member of its own) is refused, as its
/// line would be.
pub fn decode_header_body(body: String) -> Result<DecodedHeader, DecodeError> {
    refuse_line_break(&body)?;
    if let Some(wire) = canonical_header(&body) {
        let id = wire_id(&wire)?;
        let decoded = header_from_wire(wire, id, String::new())?;
        return Ok(DecodedHeader { body, ..decoded });
    }
    decode_header_body_parsed(body)
}

/// [`decode_header_body`] by the general parse.
fn decode_header_body_parsed(mut body: String) -> Result<DecodedHeader, DecodeError> {
    // The record's object, closed where its CRC member would begin, for
    // the time of the parse.
    body.push('}');
    let decoded = (|| {
        let wire: HeaderWire<'_> = parse_record(&body)?;
        if wire.crc.is_some() {
            return Err(DecodeError::Malformed(
                "the header's body holds a crc member of its own".to_owned(),
            ));
        }
        let id = wire_id(&wire)?;
        header_from_wire(wire, id, String::new())
    })();
    body.pop();
    decoded.map(|decoded| DecodedHeader { body, ..decoded })
}

/// The members of a header body in the layout its writers give it
/// ([`SessionHeader::to_body`]: its members in order, no whitespace,
/// strings without escapes, integers as JSON spells a `u64`), read without
/// the general parse; `None` for any other body, which the general parse
/// then reads (and refuses, with its messages, when it is not a header's).
/// On such a body both give the same members.
fn canonical_header(body: &str) -> Option<HeaderWire<'_>> {
    let mut members = Members { text: body, at: 0 };
    let wire = HeaderWire {
        kind: Cow::Borrowed(members.text(b"{\"kind\":")?),
        format_version: members.number(b",\"formatVersion\":")?,
        id: Cow::Borrowed(members.text(b",\"id\":")?),
        created_at: members.number(b",\"createdAt\":")?,
        cwd: Cow::Borrowed(members.text(b",\"cwd\":")?),
        parent_session: members.nullable(b",\"parentSession\":")?.map(Cow::Borrowed),
        seed_length: members.number(b",\"seedLength\":")?,
        delegation_depth: members.number(b",\"delegationDepth\":")?,
        sandbox_mode: members.nullable(b",\"sandboxMode\":")?.map(Cow::Borrowed),
        approval_policy: members
            .nullable(b",\"approvalPolicy\":")?
            .map(Cow::Borrowed),
        crc: None,
    };
    (members.at == body.len()).then_some(wire)
}

/// The members of a body in the writers' layout, read one after the
/// other from `at`: each is the bytes before its value (`,"name":`) and a
/// value of one canonical spelling, or `None`.
struct Members<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Members<'a> {
    /// The member that `before` begins, its value an integer as JSON
    /// spells a `u64` (followed by the next member's comma).
    fn number(&mut self, before: &[u8]) -> Option<u64> {
        let at = expect(self.text.as_bytes(), self.at, before)?;
        let (value, after) = canonical_u64(self.text.as_bytes(), at)?;
        self.at = after;
        Some(value)
    }

    /// The member that `before` begins, its value a string without
    /// escapes or control characters (what it holds is then its bytes).
    fn text(&mut self, before: &[u8]) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let start = expect(bytes, self.at, before)?;
        let start = expect(bytes, start, b"\"")?;
        let len = bytes[start..]
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        let end = start + len;
        if bytes[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // Both ends are at an ASCII byte: the slice is on character bounds.
        Some(&self.text[start..end])
    }

    /// The member that `before` begins, its value `null` (`Some(None)`)
    /// or a string as [`text`](Self::text) reads one.
    fn nullable(&mut self, before: &[u8]) -> Option<Option<&'a str>> {
        let bytes = self.text.as_bytes();
        let at = expect(bytes, self.at, before)?;
        match expect(bytes, at, b"null") {
            Some(after) => {
                self.at = after;
                Some(None)
            }
            None => self.text(before).map(Some),
        }
    }
}

/// The session id the header `wire` names.
fn wire_id(wire: &HeaderWire<'_>) -> Result<SessionId, DecodeError> {
    SessionId::parse(&wire.id).map_err(|e| DecodeError::Malformed(format!("header member id: {e}")))
}

/// The header `wire` spells, whose id is `id` and whose body as stored is
/// `body`.
fn header_from_wire(
    wire: HeaderWire<'_>,
    id: SessionId,
    body: String,
) -> Result<DecodedHeader, DecodeError> {
    if wire.kind != "header" {
        return Err(DecodeError::Malformed(format!(
            "line 1 has kind {:?}, expected \"header\"",
            wire.kind
        )));
    }
    if wire.format_version != FORMAT_VERSION {
        return Err(DecodeError::Malformed(format!(
            "formatVersion {} is not supported: this build reads version {FORMAT_VERSION}",
            wire.format_version
        )));
    }
    // A root session seeds nothing: its events are all its own. A seed
    // length there would make the events it covers read as inherited, their
    // rules unchecked and their seals checked for shape only.
    if wire.parent_session.is_none() && wire.seed_length != 0 {
        return Err(DecodeError::Malformed(format!(
            "header member seedLength is {} with parentSession null: a session without a \
             parent seeds no events",
            wire.seed_length
        )));
    }
    let parent_session = match wire.parent_session {
        None => None,
        Some(parent) => Some(
            SessionId::parse(&parent)
                .map_err(|e| DecodeError::Malformed(format!("header member parentSession: {e}")))?,
        ),
    };
    let mut vocabulary_errors = Vec::new();
    let sandbox_mode = header_vocab(
        "sandboxMode",
        wire.sandbox_mode.as_deref(),
        &mut vocabulary_errors,
    );
    let approval_policy = header_vocab(
        "approvalPolicy",
        wire.approval_policy.as_deref(),
        &mut vocabulary_errors,
    );
    Ok(DecodedHeader {
        header: SessionHeader {
            id,
            created_at: wire.created_at,
            cwd: wire.cwd.into_owned(),
            parent_session,
            seed_length: wire.seed_length,
            delegation_depth: wire.delegation_depth,
            sandbox_mode,
            approval_policy,
        },
        vocabulary_errors,
        body,
    })
}

/// Decodes and checks an event line (without `\n`) of session `id`.
///
/// A line in the layout writers emit (docs/FORMAT.md: compact, members in order)
/// is read by hand up to `data`, whose bytes are then scanned once to prove
/// them JSON; any other line goes through the general JSON parse. Both
/// accept the same lines with the same errors.
pub fn decode_event(id: &SessionId, line: &[u8]) -> Result<EventRecord, DecodeError> {
    let (body, crc) = checked_line(id, line)?;
    let text = utf8(line)?;
    if let Some(prefix) = CanonicalPrefix::read(text, body.len()) {
        let data = &text[prefix.data.clone()];
        if is_json(data) {
            return Ok(prefix.into_record(text).read_under(crc));
        }
    }
    decode_event_members(text, body.len()).map(|record| record.read_under(crc))
}

/// [`decode_event`] of session `id`'s line `body` + `,"crc":"<crc>"}`,
/// for a body whose CRC the caller has just computed (`crc` is
/// `record_crc(id, body)`): the same record or the same error. A database
/// keeps a body and its CRC apart: its reader computes the CRC once, and
/// a body in the writers' layout becomes the record's own text, with no
/// copy and no line; any other body is decoded as its line.
pub fn decode_checked_body(
    id: &SessionId,
    body: String,
    crc: u32,
) -> Result<EventRecord, DecodeError> {
    let line_len = body.len() + CRC_SUFFIX_LEN;
    if line_len > MAX_RECORD_BYTES {
        return Err(DecodeError::Damaged(format!(
            "record is {line_len} bytes, above the {MAX_RECORD_BYTES}-byte limit"
        )));
    }
    refuse_line_break(&body)?;
    if let Some(prefix) = CanonicalPrefix::read(&body, body.len()) {
        if is_json(&body[prefix.data.clone()]) {
            return Ok(prefix.into_record_with(BodyText::Own(body)));
        }
    }
    let mut line = body;
    line.push_str(&format!(",\"crc\":\"{crc:08x}\"}}"));
    decode_event(id, line.as_bytes())
}

/// Where `body` holds a line break, if it does: JSON allows one between
/// tokens, but a JSONL record is one line, so a body with one can be
/// neither written by any backend nor read from a database's column.
pub fn line_break_at(body: &str) -> Option<usize> {
    memchr::memchr(b'\n', body.as_bytes())
}

/// Refuses a body kept apart from its line (a database's column) that
/// holds a line break ([`line_break_at`]): such a row could be neither
/// exported nor migrated as it is, and no writer stores one (each
/// compacts `data`).
fn refuse_line_break(body: &str) -> Result<(), DecodeError> {
    match line_break_at(body) {
        None => Ok(()),
        Some(at) => Err(DecodeError::Malformed(format!(
            "the body holds a line break at byte {at}, which no JSONL record can hold"
        ))),
    }
}

/// The members of an event body checked by [`checked_body_fields`], which
/// borrow from the body where it spells them without escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyFields<'a> {
    /// `seq`.
    pub seq: u64,
    /// `ts`.
    pub ts: u64,
    /// `batch`, on the first record of a batch.
    pub batch: Option<u64>,
    /// `type`.
    pub event_type: Cow<'a, str>,
}

/// [`decode_checked_body`] of a body the caller keeps: the same checks and
/// the same error, and the fields of the record it would give, with no
/// record made (a body in the writers' layout is neither copied nor
/// allocated for). For a reader that only writes bodies out.
pub fn checked_body_fields<'a>(
    id: &SessionId,
    body: &'a str,
    crc: u32,
) -> Result<BodyFields<'a>, DecodeError> {
    let line_len = body.len() + CRC_SUFFIX_LEN;
    if line_len <= MAX_RECORD_BYTES && refuse_line_break(body).is_ok() {
        if let Some(prefix) = CanonicalPrefix::read(body, body.len()) {
            if is_json(&body[prefix.data.clone()]) {
                return Ok(BodyFields {
                    seq: prefix.seq,
                    ts: prefix.ts,
                    batch: prefix.batch,
                    event_type: Cow::Borrowed(&body[prefix.event_type]),
                });
            }
        }
    }
    let record = decode_checked_body(id, body.to_owned(), crc)?;
    Ok(BodyFields {
        seq: record.seq(),
        ts: record.ts(),
        batch: record.batch(),
        event_type: Cow::Owned(record.event_type().to_owned()),
    })
}

/// [`decode_event`], and the view a fold reads of the event's `data`,
/// validated in the same scan that proves `data` JSON (see
/// [`EventView::parse`]): a reader that folds what it reads scans each
/// line's data once, not twice. The view borrows from `line`.
///
/// The record and the error are exactly those of [`decode_event`]; the
/// view is exactly `EventView::parse(record.event_type(), record.data())`.
pub fn decode_event_viewed<'a>(
    id: &SessionId,
    line: &'a [u8],
) -> Result<ViewedEvent<'a>, DecodeError> {
    let (body, crc) = checked_line(id, line)?;
    let text = utf8(line)?;
    if let Some(prefix) = CanonicalPrefix::read(text, body.len()) {
        let event_type = &text[prefix.event_type.clone()];
        if let Some(view) = EventView::parse_json(event_type, &text[prefix.data.clone()]) {
            return Ok(ViewedEvent {
                record: prefix.into_record(text).read_under(crc),
                view,
            });
        }
    }
    let record = decode_event_members(text, body.len())?.read_under(crc);
    let view = EventView::parse(record.event_type(), &text[record.data.clone()]);
    Ok(ViewedEvent { record, view })
}

/// [`decode_event`] short of the proof that `data` is JSON, for a reader
/// that hands its records to a fold on another thread: the fold scans each
/// `data` whole for its view anyway, and proves it there
/// ([`prove_data`]), so the data is scanned once, not once on each thread.
/// Returns the record and whether its `data` is still to be proved: a line
/// in the layout writers emit is read by hand up to `data` and its `data`
/// left unproved; any other line is decoded as `decode_event` decodes it,
/// its general parse proving `data` too. Every other check and error is
/// `decode_event`'s.
pub fn decode_event_unproven(
    id: &SessionId,
    line: &[u8],
) -> Result<(EventRecord, bool), DecodeError> {
    decode_event_unproven_into(id, line, BodyRoom::Buffer(String::new()))
}

/// [`decode_event_unproven`], the body of a record in the writers' layout
/// kept in `room`: written into a buffer given (its text dropped, its room
/// kept), so that a reader given back the records it returned makes no new
/// bodies ([`EventRecord::into_body`]), or shared with the text the line
/// lies in, which `line` must then be.
pub fn decode_event_unproven_into(
    id: &SessionId,
    line: &[u8],
    room: BodyRoom<'_>,
) -> Result<(EventRecord, bool), DecodeError> {
    let (body, crc) = checked_line(id, line)?;
    // The shared text, where `line` lies in it as the room says: UTF-8
    // already, being a `String`. A line elsewhere is read as bytes.
    let shared = match &room {
        BodyRoom::Shared(shared, start) => start
            .checked_add(line.len())
            .and_then(|end| shared.get(*start..end))
            .filter(|text| std::ptr::eq(text.as_ptr(), line.as_ptr()))
            .map(|text| (*shared, *start, text)),
        BodyRoom::Buffer(_) => None,
    };
    let text = match shared {
        Some((_, _, text)) => text,
        None => utf8(line)?,
    };
    if let Some(prefix) = CanonicalPrefix::read(text, body.len()) {
        let body = &text[..prefix.data.end];
        let body = match (shared, room) {
            (Some((shared, start, _)), _) => {
                match (u32::try_from(start), u32::try_from(start + body.len())) {
                    (Ok(start), Ok(end)) => BodyText::Shared(Arc::clone(shared), start..end),
                    // Beyond 4 GiB into the text: the body is copied.
                    _ => BodyText::Own(body.to_owned()),
                }
            }
            (None, BodyRoom::Buffer(buffer)) => BodyText::Own(copied_into(buffer, body)),
            (None, BodyRoom::Shared(..)) => BodyText::Own(body.to_owned()),
        };
        return Ok((prefix.into_record_with(body).read_under(crc), true));
    }
    decode_event_members(text, body.len()).map(|record| (record.read_under(crc), false))
}

/// `body` written into `buffer`, its text dropped. A buffer too small is
/// replaced, not grown: growing it would copy what it held, which is
/// nothing now.
fn copied_into(mut buffer: String, body: &str) -> String {
    buffer.clear();
    if buffer.capacity() < body.len() {
        buffer = String::with_capacity(body.len());
    }
    buffer.push_str(body);
    buffer
}

/// Proves that the `data` of a record of session `id` that
/// [`decode_event_unproven`] left unproved is JSON: `Err` with the error
/// [`decode_event`] gives the record's line where it is not.
pub fn prove_json(id: &SessionId, record: &EventRecord) -> Result<(), DecodeError> {
    if is_json(record.data()) {
        return Ok(());
    }
    refused_data(id, record)
}

/// [`prove_json`], and the view a fold reads of the record's `data`, read
/// in the same scan: what [`decode_event_viewed`] gives the record's line.
pub fn prove_data<'r>(
    id: &SessionId,
    record: &'r EventRecord,
) -> Result<Result<EventView<'r>, ShapeError>, DecodeError> {
    match EventView::parse_json(record.event_type(), record.data()) {
        Some(view) => Ok(view),
        None => {
            refused_data(id, record).map(|()| EventView::parse(record.event_type(), record.data()))
        }
    }
}

/// The error [`decode_event`] gives the line of `record`, whose `data` a
/// proof found not to be JSON: the line is rebuilt (its body and the one
/// spelling of its CRC a reader accepts) and decoded whole, so the error is
/// the one a reader proving `data` itself reports, word for word.
fn refused_data(id: &SessionId, record: &EventRecord) -> Result<(), DecodeError> {
    let mut line = encode_line(id, record.body());
    line.pop();
    // The general parse agrees with the proof (a property test holds them
    // together); should it ever accept the line, so does this.
    decode_event(id, line.as_bytes()).map(drop)
}

/// Decodes an event line whose CRC matched, member by member through the
/// general JSON parse: any member order, whitespace and escapes.
fn decode_event_members(text: &str, body_len: usize) -> Result<EventRecord, DecodeError> {
    let wire: EventWire<'_> = parse_record(text)?;
    if wire.seq == 0 {
        return Err(DecodeError::Malformed("seq 0: seqs start at 1".to_owned()));
    }
    if let Some(n) = wire.batch {
        if n < 2 {
            return Err(DecodeError::Malformed(format!(
                "seq {}: batch {n} is not a batch (a batch has at least 2 records)",
                wire.seq
            )));
        }
    }
    let data_start = wire.data.get().as_ptr() as usize - text.as_ptr() as usize;
    let data = data_start..data_start + wire.data.get().len();
    if data.end > body_len {
        return Err(DecodeError::Malformed(format!(
            "seq {}: data runs into the crc member",
            wire.seq
        )));
    }
    Ok(EventRecord {
        seq: wire.seq,
        ts: wire.ts,
        batch: wire.batch,
        event_type: TypeText::Own(wire.event_type.into()),
        body: BodyText::Own(text[..body_len].into()),
        data,
        line_crc: None,
    })
}

/// The members before `data` of a body in the exact layout writers emit:
/// `{"seq":N,"ts":N[,"batch":N],"type":"T","data":` followed by `data` up to
/// the end of the body, with no whitespace around it.
///
/// [`read`](Self::read) accepts a body only where the general parse would
/// read the same members with the same values and no error: integers
/// spelled as `u64` accepts them (no sign, fraction, exponent or leading
/// zero, no overflow), a seq of at least 1, a batch of at least 2, a type
/// without escapes or control characters. Whether `data` is JSON is left to
/// the caller; everything else falls back to the general parse, so errors
/// and their messages come from one place.
struct CanonicalPrefix {
    seq: u64,
    ts: u64,
    batch: Option<u64>,
    event_type: Range<usize>,
    data: Range<usize>,
}

impl CanonicalPrefix {
    fn read(text: &str, body_len: usize) -> Option<CanonicalPrefix> {
        let body = &text.as_bytes()[..body_len];
        let mut at = expect(body, 0, b"{\"seq\":")?;
        let seq;
        (seq, at) = canonical_u64(body, at)?;
        at = expect(body, at, b",\"ts\":")?;
        let ts;
        (ts, at) = canonical_u64(body, at)?;
        let mut batch = None;
        if let Some(after) = expect(body, at, b",\"batch\":") {
            let n;
            (n, at) = canonical_u64(body, after)?;
            batch = Some(n);
        }
        at = expect(body, at, b",\"type\":\"")?;
        let type_start = at;
        let type_len = body[at..]
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        at += type_len;
        let event_type = type_start..at;
        at = expect(body, at, b"\",\"data\":")?;
        let data = at..body_len;
        let is_whitespace = |byte: &u8| matches!(byte, b' ' | b'\t' | b'\n' | b'\r');
        let (first, last) = (body.get(data.start)?, body.last()?);
        if seq == 0 || batch.is_some_and(|n| n < 2) || is_whitespace(first) || is_whitespace(last) {
            return None;
        }
        Some(CanonicalPrefix {
            seq,
            ts,
            batch,
            event_type,
            data,
        })
    }

    fn into_record(self, text: &str) -> EventRecord {
        EventRecord {
            seq: self.seq,
            ts: self.ts,
            batch: self.batch,
            event_type: TypeText::InBody(self.event_type),
            body: BodyText::Own(text[..self.data.end].into()),
            data: self.data,
            line_crc: None,
        }
    }

    /// [`into_record`](Self::into_record) of a text that is the body
    /// alone, kept as the record's body.
    fn into_record_with(self, body: BodyText) -> EventRecord {
        EventRecord {
            seq: self.seq,
            ts: self.ts,
            batch: self.batch,
            event_type: TypeText::InBody(self.event_type),
            body,
            data: self.data,
            line_crc: None,
        }
    }
}

/// The index after `expected` if `bytes` holds it at `at`.
fn expect(bytes: &[u8], at: usize, expected: &[u8]) -> Option<usize> {
    bytes[at..]
        .starts_with(expected)
        .then_some(at + expected.len())
}

/// An unsigned integer at `at` spelled as JSON spells one (`0` or digits
/// without a leading zero) that fits in a `u64` and is followed by `,`, and
/// the index of that comma.
fn canonical_u64(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let rest = bytes.get(at..)?;
    // Read in the one pass that finds the digits' end: nineteen digits
    // cannot overflow a `u64`, so only a twentieth and on are checked.
    let mut value: u64 = 0;
    let mut digits = 0;
    loop {
        let digit = rest.get(digits)?.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        value = match digits < 19 {
            true => value * 10 + u64::from(digit),
            false => value.checked_mul(10)?.checked_add(u64::from(digit))?,
        };
        digits += 1;
    }
    if digits == 0 || (digits > 1 && rest[0] == b'0') || rest[digits] != b',' {
        return None;
    }
    Some((value, at + digits))
}

/// Rewrites valid JSON text without whitespace between tokens, keeping every
/// token's bytes (numbers, escapes, member order) as they are.
pub fn compact_json(raw: &str) -> Result<String, serde_json::Error> {
    let _: &RawValue = serde_json::from_str(raw)?;
    let mut out = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderWire<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(rename = "formatVersion")]
    format_version: u64,
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "createdAt")]
    created_at: u64,
    #[serde(borrow)]
    cwd: Cow<'a, str>,
    #[serde(rename = "parentSession", borrow, deserialize_with = "nullable")]
    parent_session: Option<Cow<'a, str>>,
    #[serde(rename = "seedLength")]
    seed_length: u64,
    #[serde(rename = "delegationDepth")]
    delegation_depth: u64,
    #[serde(rename = "sandboxMode", borrow, deserialize_with = "nullable")]
    sandbox_mode: Option<Cow<'a, str>>,
    #[serde(rename = "approvalPolicy", borrow, deserialize_with = "nullable")]
    approval_policy: Option<Cow<'a, str>>,
    /// Present in a line, where [`split_crc`] has found it last; absent
    /// from a body as a database row stores it.
    #[serde(default, borrow)]
    crc: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventWire<'a> {
    seq: u64,
    ts: u64,
    #[serde(default, deserialize_with = "present_number")]
    batch: Option<u64>,
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
    #[allow(dead_code)]
    crc: &'a str,
}

/// A member that must be present but may be null.
fn nullable<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

/// A member that may be absent but, when present, is a number (not null).
fn present_number<'de, D>(deserializer: D) -> Result<Option<u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    u64::deserialize(deserializer).map(Some)
}

fn utf8(line: &[u8]) -> Result<&str, DecodeError> {
    // The vector check says only whether the line is UTF-8; where it is
    // not, std's finds the offset the error names.
    if let Ok(text) = simdutf8::basic::from_utf8(line) {
        return Ok(text);
    }
    std::str::from_utf8(line).map_err(|e| {
        DecodeError::Damaged(format!(
            "not UTF-8 (invalid byte at offset {} in the line)",
            e.valid_up_to()
        ))
    })
}

/// Parses a record's JSON, telling text that is not JSON (damage) from JSON
/// whose members break the format (malformed).
fn parse_record<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, DecodeError> {
    serde_json::from_str(text).map_err(|error| {
        let is_json =
            error.is_data() && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
        let error = crate::event::one_line(&error.to_string());
        if is_json {
            DecodeError::Malformed(format!("record breaks the format: {error}"))
        } else {
            DecodeError::Damaged(format!("not a JSON object: {error}"))
        }
    })
}

fn header_vocab<T: std::str::FromStr + VocabularyInfo>(
    field: &'static str,
    value: Option<&str>,
    errors: &mut Vec<HeaderVocabularyError>,
) -> Option<T> {
    let value = value?;
    let parsed = value.parse().ok();
    if parsed.is_none() {
        errors.push(HeaderVocabularyError {
            field,
            value: value.to_owned(),
            what: T::what(),
            expected: T::expected_list(),
        });
    }
    parsed
}

trait VocabularyInfo {
    fn what() -> &'static str;
    fn expected_list() -> String;
}

impl VocabularyInfo for SandboxMode {
    fn what() -> &'static str {
        SandboxMode::WHAT
    }
    fn expected_list() -> String {
        SandboxMode::expected()
    }
}

impl VocabularyInfo for ApprovalPolicy {
    fn what() -> &'static str {
        ApprovalPolicy::WHAT
    }
    fn expected_list() -> String {
        ApprovalPolicy::expected()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A member the format does not know is named on one line, however it
    /// is spelt.
    #[test]
    fn an_unknown_member_with_a_line_break_is_named_on_one_line() {
        let id = SessionId::parse("w").unwrap_or_else(|error| panic!("{error}"));
        let body = r#"{"seq":1,"ts":1,"type":"turn/start","data":{"turnId":"t"},"z\nr#r: FAKE":1"#;
        let line = encode_line(&id, body);
        let line = line.trim_end_matches('\n');
        match decode_event(&id, line.as_bytes()) {
            Err(DecodeError::Malformed(reason)) => {
                assert!(!reason.contains('\n'), "{reason}");
                assert!(reason.contains(r"z\nr#r: FAKE"), "{reason}");
            }
            other => panic!("malformed, not {other:?}"),
        }
    }

    #[test]
    fn a_crc_suffix_is_eight_lower_case_hex_digits() {
        // Each digit of each place, as the standard parse reads it where
        // it is lower-case hex, refused otherwise.
        for place in 0..8 {
            for digit in 0..=u8::MAX {
                let mut hex = *b"0a1b2c3d";
                hex[place] = digit;
                let mut line = br#"{"seq":1,"crc":""#.to_vec();
                line.extend_from_slice(&hex);
                line.extend_from_slice(br#""}"#);
                let expected = match digit {
                    b'0'..=b'9' | b'a'..=b'f' => std::str::from_utf8(&hex)
                        .ok()
                        .and_then(|hex| u32::from_str_radix(hex, 16).ok()),
                    _ => None,
                };
                let split = split_crc(&line);
                assert_eq!(split.map(|(_, crc)| crc), expected, "{hex:?}");
                if split.is_some() {
                    assert_eq!(split.map(|(body, _)| body), Some(&br#"{"seq":1"#[..]));
                }
            }
        }
        for crc in [0, 1, 0xdead_beef, u32::MAX] {
            let line = format!(r#"{{"seq":1,"crc":"{crc:08x}"}}"#);
            assert_eq!(
                split_crc(line.as_bytes()).map(|(_, value)| value),
                Some(crc)
            );
        }
    }

    /// The general parse alone, as `decode_event` runs it for a line that
    /// is not in the writers' layout.
    fn decode_by_members(id: &SessionId, line: &[u8]) -> Result<EventRecord, DecodeError> {
        let body = check_crc(id, line)?;
        let text = utf8(line)?;
        decode_event_members(text, body.len())
    }

    proptest! {
        #[test]
        fn encoding_into_a_buffer_appends_the_line_encode_line_makes(
            body in "[ -~é]{0,64}",
            id in "[A-Za-z0-9][A-Za-z0-9_-]{0,16}",
        ) {
            let id = SessionId::parse(&id).expect("a valid id");
            let mut out = b"before".to_vec();
            encode_line_into(&id, &body, &mut out);
            prop_assert_eq!(&out[..6], b"before");
            let line = encode_line(&id, &body);
            prop_assert_eq!(&out[6..], line.as_bytes());
        }
    }

    /// The record each line decoder makes of session `id`'s `line`.
    fn decoded_every_way(id: &SessionId, line: &[u8]) -> Vec<EventRecord> {
        let decoded = [
            decode_event(id, line),
            decode_event_viewed(id, line).map(|viewed| viewed.record),
            decode_event_unproven(id, line).map(|(record, _)| record),
        ];
        decoded
            .into_iter()
            .map(|record| record.expect("a good line"))
            .collect()
    }

    proptest! {
        #[test]
        fn a_record_read_from_one_log_is_re_signed_for_another_as_it_is_signed(
            texts in prop::collection::vec("[ -~é\\n]{0,700}", 1..8),
            from in "[A-Za-z0-9][A-Za-z0-9_-]{0,40}",
            to in "[A-Za-z0-9][A-Za-z0-9_-]{0,40}",
        ) {
            let from = SessionId::parse(&from).expect("a valid id");
            let to = SessionId::parse(&to).expect("a valid id");
            // One re-signer for bodies of lengths in any order.
            let mut resign = Resign::new(&from, &to);
            for text in &texts {
                let data = serde_json::Value::from(text.as_str()).to_string();
                let canonical = EventRecord::new(3, 4, None, "note", &data);
                // A body the general parse reads: members in another order.
                let other = format!(r#"{{"ts":4,"seq":3,"type":"note","data":{data}"#);
                for body in [canonical.body(), &other] {
                    let line = encode_line(&from, body);
                    let line = line.trim_end_matches('\n').as_bytes();
                    for record in decoded_every_way(&from, line) {
                        prop_assert_eq!(record.line_crc(), Some(record_crc(&from, body.as_bytes())));
                        prop_assert_eq!(resign.crc(&record), record_crc(&to, body.as_bytes()));
                    }
                }
            }
        }
    }

    #[test]
    fn a_long_body_or_a_record_not_read_from_a_line_is_hashed_for_its_new_session() {
        let (from, to) = (SessionId::parse("parent").ok(), SessionId::parse("c").ok());
        let (Some(from), Some(to)) = (from, to) else {
            panic!("valid ids");
        };
        let mut resign = Resign::new(&from, &to);
        let built = EventRecord::new(1, 2, None, "note", r#""built""#);
        assert_eq!(built.line_crc(), None);
        assert_eq!(resign.crc(&built), record_crc(&to, built.body().as_bytes()));
        // Around the longest length remembered, and past it.
        let limit = Resign::REMEMBERED_LENGTHS;
        for target in [limit - 2, limit - 1, limit, limit + 1, 3 * limit] {
            let prefix_len = EventRecord::new(1, 2, None, "note", r#""""#).body().len();
            let data = format!(r#""{}""#, "x".repeat(target - prefix_len));
            let record = EventRecord::new(1, 2, None, "note", &data);
            assert_eq!(record.body().len(), target);
            let line = encode_line(&from, record.body());
            let line = line.trim_end_matches('\n').as_bytes();
            for record in decoded_every_way(&from, line) {
                assert_eq!(
                    resign.crc(&record),
                    record_crc(&to, record.body().as_bytes())
                );
            }
        }
    }

    /// Both decoders, and the viewed one, give the same record or the same
    /// error for `body` signed for session `s`; the view is the one
    /// `EventView::parse` gives for the record's data.
    fn check_agreement(body: &str) {
        let id = SessionId::parse("s").expect("a valid id");
        let line = encode_line(&id, body);
        let line = line.trim_end_matches('\n').as_bytes();
        let by_members = decode_by_members(&id, line);
        assert_eq!(decode_event(&id, line), by_members, "{body}");
        let crc = record_crc(&id, body.as_bytes());
        assert_eq!(
            decode_checked_body(&id, body.to_owned(), crc),
            by_members,
            "{body}"
        );
        let fields = checked_body_fields(&id, body, crc).map(|fields| {
            (
                fields.seq,
                fields.ts,
                fields.batch,
                fields.event_type.into_owned(),
            )
        });
        let of_record = by_members.as_ref().map(|record| {
            (
                record.seq(),
                record.ts(),
                record.batch(),
                record.event_type().to_owned(),
            )
        });
        assert_eq!(fields, of_record.map_err(Clone::clone), "{body}");
        let viewed = decode_event_viewed(&id, line);
        match (&by_members, viewed) {
            (Ok(record), Ok(viewed)) => {
                assert_eq!(&viewed.record, record, "{body}");
                let view = EventView::parse(record.event_type(), record.data());
                assert_eq!(viewed.view, view, "{body}");
            }
            (Err(error), Err(viewed)) => assert_eq!(&viewed, error, "{body}"),
            (expected, viewed) => panic!("{body}: {expected:?} but viewed {viewed:?}"),
        }
        // Decoded short of the proof of `data`, then proved (both ways):
        // the same record, view and error.
        let unproven = decode_event_unproven(&id, line).and_then(|(record, unproven)| {
            if unproven {
                prove_json(&id, &record)?;
                let view = prove_data(&id, &record)?;
                assert_eq!(
                    view,
                    EventView::parse(record.event_type(), record.data()),
                    "{body}"
                );
            }
            Ok(record)
        });
        assert_eq!(unproven, by_members, "{body}");
        if let Ok((record, true)) = decode_event_unproven(&id, line) {
            assert_eq!(
                prove_json(&id, &record).err(),
                by_members.clone().err(),
                "{body}"
            );
            assert_eq!(
                prove_data(&id, &record).err(),
                by_members.clone().err(),
                "{body}"
            );
        }
        // Lent from a shared text the line lies in, behind another line:
        // the same record, its body shared. A line that is not where the
        // room says is read as bytes, to the same record.
        let text = std::str::from_utf8(line).expect("an encoded line is text");
        let shared = Arc::new(format!("x\n{text}\n"));
        let lent = &shared.as_bytes()[2..2 + line.len()];
        let from_bytes = decode_event_unproven(&id, line);
        let from_shared = decode_event_unproven_into(&id, lent, BodyRoom::Shared(&shared, 2));
        assert_eq!(from_shared, from_bytes, "{body}");
        if let Ok((record, true)) = from_shared {
            assert!(record.into_body().is_empty(), "not shared: {body}");
        }
        let elsewhere = decode_event_unproven_into(&id, line, BodyRoom::Shared(&shared, 2));
        assert_eq!(elsewhere, from_bytes, "{body}");
        if let Ok((record, _)) = elsewhere {
            assert!(!record.into_body().is_empty(), "shared: {body}");
        }
    }

    const INTEGERS: &[&str] = &[
        "0",
        "1",
        "7",
        "42",
        "1700000000001",
        "007",
        "00",
        "-1",
        "-0",
        "+1",
        "1.0",
        "1.",
        "1e3",
        "1E3",
        "9999999999999999999",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
        "100000000000000000000",
        "\"1\"",
        "null",
        "true",
        "",
        " 1",
        "1 ",
    ];

    const BATCHES: &[Option<&str>] = &[
        None,
        None,
        Some("2"),
        Some("65536"),
        Some("65537"),
        Some("1"),
        Some("0"),
        Some("02"),
        Some("2.0"),
        Some("null"),
    ];

    const TYPES: &[&str] = &[
        "\"turn/start\"",
        "\"message\"",
        "\"tool/start\"",
        "\"future/kind\"",
        "\"t\\u0075rn/start\"",
        "\"turn\\/start\"",
        "\"caf\u{e9}\"",
        "\"tab\there\"",
        "\"\"",
        "\"unterminated",
        "7",
        "null",
    ];

    const DATA: &[&str] = &[
        r#"{"turnId":"t1"}"#,
        r#"{"turnId":"t\u00e91"}"#,
        r#"{"turnId":7}"#,
        r#"{"turnId":"a","turnId":"b"}"#,
        r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a\nb"}]}"#,
        r#"{"role":"user","source":{"kind":"user"},"content":[{"text":"a","type":"text"}]}"#,
        r#"{"callId":"c","stepId":"s","name":"n","arguments":{"a":[1,2.5,"x"]}}"#,
        r#"{"callId":"c","stepId":"s","name":"n","arguments":1e999}"#,
        r#"{"turnId":"\ud800"}"#,
        r#"{"x":"\ud800"}"#,
        r#"{"turnId":"t1"}x"#,
        r#"{"turnId":"t1"},"extra":1"#,
        r#"{"turnId":"t1"} "#,
        r#" {"turnId":"t1"}"#,
        r#"{"turnId":"t1""#,
        r#"{}"#,
        "[1,2]",
        "1",
        "1 2",
        "\"x\"",
        "null",
        "",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    ];

    /// A body from its members' texts: in the writers' layout, or with
    /// members swapped, spaced out or repeated.
    #[allow(clippy::too_many_arguments)]
    fn body(
        seq: &str,
        ts: &str,
        batch: Option<&str>,
        event_type: &str,
        data: &str,
        order: usize,
        space: &str,
        repeat: bool,
    ) -> String {
        let mut members = vec![("seq", seq), ("ts", ts)];
        if let Some(batch) = batch {
            members.push(("batch", batch));
        }
        members.push(("type", event_type));
        members.push(("data", data));
        if order > 0 {
            let len = members.len();
            members.swap(order % len, (order / len) % len);
        }
        if repeat {
            members.insert(1, ("seq", seq));
        }
        let members: Vec<String> = members
            .iter()
            .map(|(name, value)| format!("\"{name}\"{space}:{space}{value}"))
            .collect();
        format!("{{{space}{}", members.join(&format!("{space},{space}")))
    }

    proptest! {
        #[test]
        fn the_writers_layout_decodes_as_the_general_parse_decodes_it(
            seq in prop::sample::select(INTEGERS),
            ts in prop::sample::select(INTEGERS),
            batch in prop::sample::select(BATCHES),
            event_type in prop::sample::select(TYPES),
            data in prop::sample::select(DATA),
            order in prop_oneof![Just(0usize), Just(0), 0usize..36],
            space in prop::sample::select(&["", "", "", " ", "\t"][..]),
            repeat in prop::bool::weighted(0.1),
        ) {
            check_agreement(&body(seq, ts, batch, event_type, data, order, space, repeat));
        }

        #[test]
        fn any_numbers_decode_as_the_general_parse_decodes_them(
            seq in any::<u64>(),
            ts in any::<u64>(),
            batch in proptest::option::of(any::<u64>()),
            data in prop::sample::select(DATA),
        ) {
            let batch = batch.map(|n| n.to_string());
            let text = body(&seq.to_string(), &ts.to_string(), batch.as_deref(), "\"turn/start\"", data, 0, "", false);
            check_agreement(&text);
        }
    }

    #[test]
    fn every_spelling_of_each_member_decodes_as_the_general_parse_decodes_it() {
        let (seq, ts, batch, event_type, data) = ("3", "1700000000001", None, TYPES[0], DATA[0]);
        for space in ["", " "] {
            for order in [0, 1, 7] {
                let body = |seq, ts, batch, event_type, data| {
                    body(seq, ts, batch, event_type, data, order, space, false)
                };
                for spelling in INTEGERS {
                    check_agreement(&body(spelling, ts, batch, event_type, data));
                    check_agreement(&body(seq, spelling, batch, event_type, data));
                }
                for spelling in BATCHES {
                    check_agreement(&body(seq, ts, *spelling, event_type, data));
                }
                for spelling in TYPES {
                    for data in DATA {
                        check_agreement(&body(seq, ts, batch, spelling, data));
                    }
                }
            }
        }
    }

    #[test]
    fn a_body_checked_apart_decodes_as_its_line_at_and_above_the_size_limit() {
        let id = SessionId::parse("s").expect("a valid id");
        let prefix = "{\"seq\":1,\"ts\":2,\"type\":\"x\",\"data\":\"";
        for line_len in [MAX_RECORD_BYTES, MAX_RECORD_BYTES + 1] {
            let filler = line_len - CRC_SUFFIX_LEN - prefix.len() - 1;
            let body = format!("{prefix}{}\"", "a".repeat(filler));
            let line = encode_line(&id, &body);
            let line = line.trim_end_matches('\n').as_bytes();
            assert_eq!(line.len(), line_len);
            let expected = decode_event(&id, line);
            assert_eq!(expected.is_ok(), line_len == MAX_RECORD_BYTES, "{line_len}");
            let crc = record_crc(&id, body.as_bytes());
            let fields = checked_body_fields(&id, &body, crc).map(|fields| fields.seq);
            assert_eq!(
                fields,
                expected
                    .as_ref()
                    .map(EventRecord::seq)
                    .map_err(Clone::clone)
            );
            assert_eq!(decode_checked_body(&id, body, crc), expected);
        }
    }

    #[test]
    fn a_body_cut_anywhere_decodes_as_the_general_parse_decodes_it() {
        let whole = body(
            "12",
            "1700000000001",
            Some("2"),
            "\"tool/start\"",
            DATA[6],
            0,
            "",
            false,
        );
        for end in 0..=whole.len() {
            if whole.is_char_boundary(end) {
                check_agreement(&whole[..end]);
            }
        }
    }

    /// A header body as a database row stores it decodes as its line does;
    /// one its line would not decode from is refused.
    fn check_header_body(id: &SessionId, body: &str) {
        let line = encode_line(id, body);
        let by_line = decode_header(line.trim_end_matches('\n').as_bytes());
        let by_body = decode_header_body(body.to_owned());
        // The writers' layout read apart decodes as the general parse does.
        let by_parse = decode_header_body_parsed(body.to_owned());
        match (&by_body, &by_parse) {
            (Ok(fast), Ok(parsed)) => {
                assert_eq!(fast.header, parsed.header, "{body}");
                assert_eq!(fast.body, parsed.body);
                assert_eq!(fast.vocabulary_errors, parsed.vocabulary_errors);
            }
            (Err(fast), Err(parsed)) => assert_eq!(fast, parsed, "{body}"),
            _ => panic!("{body}: read apart {by_body:?}, parsed {by_parse:?}"),
        }
        match (&by_line, &by_body) {
            (Ok(line), Ok(body)) => {
                assert_eq!(line.header, body.header, "{body:?}");
                assert_eq!(line.body, body.body);
                assert_eq!(line.vocabulary_errors, body.vocabulary_errors);
            }
            (Err(_), Err(_)) => {}
            _ => panic!("{body}: by line {by_line:?}, by body {by_body:?}"),
        }
    }

    proptest! {
        #[test]
        fn a_header_body_decodes_as_its_line_decodes(
            created_at in any::<u64>(),
            cwd in "[ -~é\t\u{7}]{0,24}",
            parent in proptest::option::of("[a-z][a-z0-9]{0,6}"),
            sandbox in prop::sample::select(&[None, Some("read-only"), Some("workspace-write"), Some("nonsense")][..]),
            seed_length in 0u64..5,
            cut in 0usize..400,
            extra in prop::sample::select(&["", ",\"crc\":\"00000000\"", "}", ",\"other\":1", " "][..]),
        ) {
            let id = SessionId::parse("s1").expect("a valid id");
            let mut header = SessionHeader::root(id.clone(), created_at, cwd);
            header.parent_session = parent.map(|parent| SessionId::parse(&parent).expect("a valid id"));
            header.seed_length = seed_length;
            let mut body = header.to_body();
            if let Some(mode) = sandbox {
                body = body.replace("\"sandboxMode\":null", &format!("\"sandboxMode\":\"{mode}\""));
            }
            body.push_str(extra);
            check_header_body(&id, &body);
            // A body cut anywhere (at a character's boundary) as well.
            let cut = (0..=cut.min(body.len())).rev().find(|at| body.is_char_boundary(*at)).unwrap_or(0);
            check_header_body(&id, &body[..cut]);
        }
    }

    #[test]
    fn a_header_body_with_a_crc_of_its_own_or_closed_is_refused() {
        let id = SessionId::parse("s1").expect("a valid id");
        let body = SessionHeader::root(id, 1, "/w".into()).to_body();
        assert!(decode_header_body(body.clone()).is_ok());
        // The writers' layout is read without the general parse.
        assert!(canonical_header(&body).is_some());
        let escaped = SessionHeader::root(SessionId::parse("s2").expect("an id"), 1, "/\"w".into());
        assert!(canonical_header(&escaped.to_body()).is_none());
        for bad in [format!("{body},\"crc\":\"0badc0de\""), format!("{body}}}")] {
            assert!(decode_header_body(bad.clone()).is_err(), "{bad}");
        }
    }
}
