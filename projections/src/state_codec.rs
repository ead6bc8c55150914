//! The bytes of a [`SessionState`], so that a store can keep the fold of a
//! long session and resume from it (docs/FORMAT.md, "State snapshots").
//!
//! The encoding holds everything the fold keeps but the header (which the
//! log holds, and which the caller passes back) and the pending approvals
//! (the own asks not yet decided, rebuilt from the requests). Integers are
//! little-endian and of fixed width, and the calls and requests are rows of
//! fixed size, so that a resume reads them at memory speed. The calls and
//! the requests are stored in the order of their ids, so that the decoded
//! rows are the id tables' sorted parts, found by binary search: nothing is
//! hashed at a resume, and no hasher key (keyed at random per table) is
//! ever stored; checking the order is one pass comparing each id with the
//! one before, which also refuses an id kept twice. Decoding checks every length,
//! index and id it reads, so that bytes from anywhere give a state or an
//! error, never a panic and never a state whose tables disagree with
//! themselves. It says nothing of whether the state is the fold of the
//! log: the store checks where the snapshot was taken (its anchor) before
//! it trusts one, and `verify` never reads one.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use sessionlog_schema::{
    ApprovalPolicy, ChainValue, Preset, SandboxMode, SealPublicKey, SessionHeader,
};

use crate::frozen::{FrozenBytes, PageSource, SnapshotPage};
use crate::state::{CallEntry, FrozenRows, IdSpan, IdTable, Ids, RequestEntry, Seqs};
use crate::{SealInfo, SessionState};

/// How much of a snapshot's state [`SessionState::decode_snapshot_in`]
/// checks, and so what bytes it may be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotTrust {
    /// Every field, row, span and seq, and the order of the ids: bytes from
    /// anywhere decode to a state consistent with itself or to an error.
    Nothing,
    /// Every field and count, every text but the ids', and the pending
    /// approvals; the calls' and the requests' rows, the reviewed seqs and
    /// the ids' text, the bulk of a long session's state, are left as they
    /// are and read in place when a lookup lands on them (an id that is
    /// not UTF-8 reads as empty), so that opening a writer costs no pass
    /// over them. For bytes whose CRC matched the one
    /// their writer computed over what `encode_snapshot` gave: torn or
    /// damaged bytes never get here. Bytes written to match their CRC on
    /// purpose could hold rows out of order or spans off the ids: a lookup
    /// then misses or reads an empty id, but never panics, and the log the
    /// state is checked against is still checked record by record.
    CrcMatched,
}

impl SnapshotTrust {
    /// How many of a table's rows a decode checks one by one: all, or
    /// none.
    fn rows_checked(self) -> usize {
        match self {
            SnapshotTrust::Nothing => usize::MAX,
            SnapshotTrust::CrcMatched => 0,
        }
    }

    /// Whether a decode proves the ids' text UTF-8 as a whole (else each
    /// id is, as it is looked up).
    fn text_checked(self) -> bool {
        self == SnapshotTrust::Nothing
    }
}

impl SessionState {
    /// The state's bytes, for [`decode_snapshot`](Self::decode_snapshot)
    /// (the header is not among them): the bytes of the ids its rows and
    /// its open turn and step name (a tool's name or a step's id once for
    /// a run of calls that share it), plus 29 bytes per call, 13 per
    /// request and 4 per reviewed event (8, 24 and 8 more once the ids pass
    /// 4 GiB or the seqs 2³²−1).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        self.encode_snapshot_with_numbers_of(4)
    }

    /// [`encode_snapshot`](Self::encode_snapshot)'s bytes, and where they
    /// may be cut into pages of about `page_bytes` each for
    /// [`decode_snapshot_paged`](Self::decode_snapshot_paged): the offset
    /// each page after the first starts at. A page is cut only between
    /// ids, rows and seqs, once it holds at least `page_bytes`: every read
    /// a decode or a lookup makes is within one page (an id longer than
    /// `page_bytes` makes its page as long).
    pub fn encode_snapshot_paged(&self, page_bytes: usize) -> (Vec<u8>, Vec<usize>) {
        self.encode_pages(4, page_bytes.max(1))
    }

    /// [`encode_snapshot`](Self::encode_snapshot) with rows' numbers (id
    /// offsets and seqs) of at least `width` bytes (4, or 8; 8 whatever
    /// `width` once the ids pass 4 GiB or the seq 2³²−1).
    fn encode_snapshot_with_numbers_of(&self, width: usize) -> Vec<u8> {
        self.encode_pages(width, usize::MAX).0
    }

    /// The bytes, with numbers of at least `width` bytes, and the page
    /// cuts for pages of `page_bytes`.
    fn encode_pages(&self, width: usize, page_bytes: usize) -> (Vec<u8>, Vec<usize>) {
        let parts = self;
        // The ids the rows name, each kept once (tool names and step ids
        // once for all their calls), in the order the rows name them: the
        // bytes depend on what the state projects, not on the order its
        // ids were kept in nor on the ids it no longer names (the turns
        // that ended, say).
        let mut ids = SnapshotIds::of(&parts.ids);
        let open_turn = parts.open_turn.map(|turn| ids.keep(turn));
        let open_step = parts.open_step.map(|step| ids.share(step));
        let calls: Vec<CallEntry> = parts
            .calls
            .in_id_order(&parts.ids)
            .map(|call| CallEntry {
                call_id: ids.keep(call.call_id),
                step_id: ids.share(call.step_id),
                name: ids.share(call.name),
                ..call
            })
            .collect();
        let requests: Vec<RequestEntry> = parts
            .requests
            .in_id_order(&parts.ids)
            .map(|request| RequestEntry {
                request_id: ids.keep(request.request_id),
                ..request
            })
            .collect();
        // The pending approvals, the own requests not decided, by seq: kept
        // beside the requests so that a resume need not read those.
        let pending: BTreeMap<u64, IdSpan> = requests
            .iter()
            .filter(|request| request.own && !request.decided)
            .map(|request| (request.seq, request.request_id))
            .collect();
        let SnapshotIds {
            text,
            ends: id_ends,
            ..
        } = ids;
        // Every seq a row holds is at most the state's.
        let width = match (u32::try_from(text.len()), u32::try_from(parts.seq)) {
            (Ok(_), Ok(_)) => width,
            _ => 8,
        };
        let capacity = 256
            + text.len()
            + calls.len() * call_row(width)
            + requests.len() * request_row(width)
            + parts.pending_approvals.len() * (8 + 2 * width)
            + parts.reviewed_seqs.len() * width;
        let mut out = Writer {
            bytes: Vec::with_capacity(capacity),
            width,
            page_bytes,
            cuts: Vec::new(),
        };
        out.u64(parts.seq);
        out.option(parts.approval_switch, |out, (seq, policy)| {
            out.u64(seq);
            out.text(policy.as_str());
        });
        out.option(parts.sandbox_switch, |out, mode| out.text(mode.as_str()));
        out.option(parts.preset_switch, |out, preset| out.text(preset.as_str()));
        out.byte(width as u8);
        out.u64(text.len() as u64);
        let text_at = out.bytes.len();
        out.bytes.extend_from_slice(&text);
        for &end in &id_ends {
            out.may_cut_at(text_at + end);
        }
        out.option(open_turn, Writer::span);
        out.option(open_step, Writer::span);
        out.u64(calls.len() as u64);
        for call in calls {
            out.span(call.call_id);
            out.number(call.seq);
            out.span(call.step_id);
            out.span(call.name);
            out.byte(u8::from(call.own) | u8::from(call.settled) << 1);
            out.may_cut();
        }
        out.u64(requests.len() as u64);
        for request in requests {
            out.span(request.request_id);
            out.number(request.seq);
            out.byte(u8::from(request.own) | u8::from(request.decided) << 1);
            out.may_cut();
        }
        out.u64(pending.len() as u64);
        for (seq, request_id) in pending {
            out.u64(seq);
            out.span(request_id);
            out.may_cut();
        }
        out.option(parts.last_own_request_header, |out, (seq, policy)| {
            out.u64(seq);
            out.text(policy.as_str());
        });
        out.option(parts.latest_request_header_seq, Writer::u64);
        out.option(parts.last_checkpoint_seq, Writer::u64);
        out.u64(parts.reviewed_seqs.len() as u64);
        for seq in parts.reviewed_seqs.iter() {
            out.number(seq);
            out.may_cut();
        }
        out.u64(parts.violation_count);
        out.bytes.extend_from_slice(parts.chain.value().as_bytes());
        out.option(parts.last_seal.as_ref(), |out, seal| {
            out.u64(seal.seq);
            out.u64(seal.through_seq);
            out.bytes.extend_from_slice(seal.chain.as_bytes());
            out.option(seal.key.as_ref(), |out, key| out.text(&key.to_string()));
            out.byte(u8::from(seal.own));
        });
        out.option(parts.last_own_seal_seq, Writer::u64);
        (out.bytes, out.cuts)
    }

    /// The state [`encode_snapshot`](Self::encode_snapshot) wrote, over
    /// `header` (whose stored header record body is `header_body`, as for
    /// [`with_header_body`](Self::with_header_body)). Refuses bytes that do
    /// not decode to a state consistent with itself, saying where.
    pub fn decode_snapshot(
        header: SessionHeader,
        header_body: &str,
        bytes: &[u8],
    ) -> Result<SessionState, String> {
        SessionState::decode_snapshot_in(
            header,
            header_body,
            bytes.to_vec(),
            0..bytes.len(),
            SnapshotTrust::Nothing,
        )
    }

    /// [`decode_snapshot`](Self::decode_snapshot) of the bytes at `range` of
    /// `buffer` (a whole snapshot as read, say), which the state keeps: its
    /// ids, its calls' and requests' rows and its reviewed seqs are read in
    /// place from there, never copied nor decoded as a whole, so that
    /// opening a writer on a long session allocates nothing per call. What
    /// is checked here is as `trust` says. Byte offsets in an error count
    /// from the start of `range`.
    pub fn decode_snapshot_in(
        header: SessionHeader,
        header_body: &str,
        buffer: Vec<u8>,
        range: Range<usize>,
        trust: SnapshotTrust,
    ) -> Result<SessionState, String> {
        let frozen = Arc::new(FrozenBytes::whole(buffer));
        if frozen.get(range.clone()).is_none() {
            return Err(format!(
                "the state is not within the {} bytes read",
                frozen.len()
            ));
        }
        SessionState::decode_frozen(header, header_body, frozen, range, trust)
    }

    /// The state [`encode_snapshot_paged`](Self::encode_snapshot_paged)
    /// wrote, as `pages` one after the other from byte `offset` of
    /// `source`, read page by page: the decode reads the pages holding the
    /// state's fields and its pending approvals, and the state reads any
    /// other page the first time a
    /// lookup lands on it, checking it against its CRC then. A page that
    /// cannot be read or does not match its CRC refuses the decode, or,
    /// met by a lookup later, reads as rows and ids that are not there and
    /// makes [`snapshot_unreadable`](Self::snapshot_unreadable) true.
    /// What a page holds is trusted as its CRC vouches
    /// ([`SnapshotTrust::CrcMatched`]).
    pub fn decode_snapshot_paged(
        header: SessionHeader,
        header_body: &str,
        source: Box<dyn PageSource>,
        offset: u64,
        pages: Vec<SnapshotPage>,
    ) -> Result<SessionState, String> {
        let frozen = Arc::new(FrozenBytes::paged(source, offset, pages)?);
        let len = frozen.len();
        let decoded = SessionState::decode_frozen(
            header,
            header_body,
            Arc::clone(&frozen),
            0..len,
            SnapshotTrust::CrcMatched,
        );
        if frozen.failed() {
            return Err("a page of it could not be read or does not match its CRC".to_owned());
        }
        decoded
    }

    /// The state at `range` of `frozen`, checked as `trust` says.
    fn decode_frozen(
        header: SessionHeader,
        header_body: &str,
        frozen: Arc<FrozenBytes>,
        range: Range<usize>,
        trust: SnapshotTrust,
    ) -> Result<SessionState, String> {
        let from = range.start;
        let mut state = SessionState::with_header_body(header, header_body);
        let mut input = Reader {
            bytes: &frozen,
            from,
            len: range.len(),
            at: 0,
            width: 4,
        };
        let seq = input.u64("seq")?;
        let approval_switch = input.option("approval switch", |input| {
            let seq = input.seq_at_most(seq, "approval switch")?;
            Ok((
                seq,
                input.vocabulary("approval policy", ApprovalPolicy::parse)?,
            ))
        })?;
        let sandbox_switch = input.option("sandbox switch", |input| {
            input.vocabulary("sandbox mode", SandboxMode::parse)
        })?;
        let preset_switch = input.option("preset switch", |input| {
            input.vocabulary("preset", Preset::parse)
        })?;
        let width_at = input.at;
        input.width = match input.byte("id offset width")? {
            width @ (4 | 8) => usize::from(width),
            width => {
                return Err(format!(
                    "id offset width: {width} at byte {width_at} is neither 4 nor 8"
                ))
            }
        };
        // Each id read from the snapshot is proved UTF-8 when it is looked
        // up (`Ids::get`); bytes whose CRC matched are not proved UTF-8 as
        // a whole, which would be a pass over every id at every open.
        let ids_at = input.at;
        let text_len = input.count("ids", 1)?;
        let text_at = from + input.at;
        input.skip(text_len, "ids")?;
        let ids = Ids::frozen(Arc::clone(&frozen), text_at..text_at + text_len);
        let text = Text(&ids);
        if trust.text_checked()
            && text
                .get(0, text_len)
                .and_then(|text| std::str::from_utf8(text).ok())
                .is_none()
        {
            return Err(format!("ids: the text at byte {ids_at} is not UTF-8"));
        }
        let open_turn = input.option("open turn", |input| input.span(&text, "open turn"))?;
        let open_step = input.option("open step", |input| input.span(&text, "open step"))?;
        let width = input.width;
        let (rows_at, count) = input.table("calls", call_row(width))?;
        let calls = IdTable::frozen(FrozenRows {
            bytes: Arc::clone(&frozen),
            start: from + rows_at,
            count,
            row: call_row(width),
            width,
        });
        let mut previous: Option<&[u8]> = None;
        for index in 0..count.min(trust.rows_checked()) {
            let row = input.row(rows_at, index, call_row(width), "call")?;
            let call_id = row.span(0, &text, "call id")?;
            row.seq_at_most(2 * width, seq, "call")?;
            row.span(3 * width, &text, "call step")?;
            row.span(5 * width, &text, "call name")?;
            row.flags(7 * width, "call")?;
            in_id_order(&mut previous, text.id(call_id, row.at)?, "call", row.at)?;
        }
        let (rows_at, count) = input.table("requests", request_row(width))?;
        let requests = IdTable::frozen(FrozenRows {
            bytes: Arc::clone(&frozen),
            start: from + rows_at,
            count,
            row: request_row(width),
            width,
        });
        let pending_count = input.count("pending approvals", 8 + 2 * width)?;
        let mut pending_approvals = BTreeMap::new();
        for _ in 0..pending_count {
            let at = input.at;
            let request_seq = input.seq_at_most(seq, "pending approval")?;
            let request_id = input.span(&text, "pending approval")?;
            if pending_approvals.insert(request_seq, request_id).is_some() {
                return Err(format!(
                    "pending approval: seq {request_seq} at byte {at} is kept twice"
                ));
            }
        }
        let mut previous: Option<&[u8]> = None;
        let mut own_undecided = BTreeMap::new();
        let checked = count.min(trust.rows_checked());
        for index in 0..checked {
            let row = input.row(rows_at, index, request_row(width), "request")?;
            let request_id = row.span(0, &text, "request id")?;
            let request_seq = row.seq_at_most(2 * width, seq, "request")?;
            let flags = row.flags(3 * width, "request")?;
            if flags & 1 != 0 && flags & 2 == 0 {
                own_undecided.insert(request_seq, request_id);
            }
            in_id_order(
                &mut previous,
                text.id(request_id, row.at)?,
                "request",
                row.at,
            )?;
        }
        if checked == count && own_undecided != pending_approvals {
            return Err("the pending approvals are not the own requests not decided".to_owned());
        }
        let last_own_request_header = input.option("own request header", |input| {
            let seq = input.seq_at_most(seq, "own request header")?;
            Ok((
                seq,
                input.vocabulary("approval policy", ApprovalPolicy::parse)?,
            ))
        })?;
        let latest_request_header_seq = input.option("request header", |input| {
            input.seq_at_most(seq, "request header")
        })?;
        let last_checkpoint_seq =
            input.option("checkpoint", |input| input.seq_at_most(seq, "checkpoint"))?;
        let (rows_at, count) = input.table("reviewed seqs", width)?;
        let reviewed_seqs = Seqs::frozen(Arc::clone(&frozen), from + rows_at, count, width);
        let mut previous = 0u64;
        for index in 0..count.min(trust.rows_checked()) {
            let row = input.row(rows_at, index, width, "reviewed seq")?;
            let reviewed = le_number(row.bytes, 0, width);
            if reviewed <= previous || reviewed > seq {
                return Err(format!(
                    "reviewed seq {reviewed} at byte {} is not above the one before \
                     ({previous}) and at most {seq}",
                    rows_at + index * width
                ));
            }
            previous = reviewed;
        }
        let violation_count = input.u64("violation count")?;
        let chain = input.chain("chain")?;
        let last_seal = input.option("last seal", |input| {
            let seal_seq = input.seq_at_most(seq, "last seal")?;
            let through_seq = input.seq_at_most(seq, "sealed seq")?;
            let chain = input.chain("sealed chain")?;
            let key = input.option("seal key", |input| {
                SealPublicKey::parse(input.text("seal key")?)
                    .map_err(|error| format!("seal key: {error}"))
            })?;
            let own = input.flags("last seal")? & 1 != 0;
            Ok(SealInfo {
                seq: seal_seq,
                through_seq,
                chain,
                key,
                own,
            })
        })?;
        let last_own_seal_seq =
            input.option("own seal", |input| input.seq_at_most(seq, "own seal"))?;
        if input.at != input.len {
            return Err(format!(
                "{} bytes follow the state at byte {}",
                input.len - input.at,
                input.at
            ));
        }
        state.seq = seq;
        state.approval_switch = approval_switch;
        state.sandbox_switch = sandbox_switch;
        state.preset_switch = preset_switch;
        state.ids = ids;
        state.open_turn = open_turn;
        state.open_step = open_step;
        state.calls = calls;
        state.requests = requests;
        state.pending_approvals = pending_approvals;
        state.last_own_request_header = last_own_request_header;
        state.latest_request_header_seq = latest_request_header_seq;
        state.last_checkpoint_seq = last_checkpoint_seq;
        state.reviewed_seqs = reviewed_seqs;
        state.violation_count = violation_count;
        state.chain = crate::chain::Chain::settled(chain);
        state.last_seal = last_seal;
        state.last_own_seal_seq = last_own_seal_seq;
        Ok(state)
    }
}

/// The bytes of a call's row, with numbers of `width` bytes: its id, seq,
/// step id, name and flags.
fn call_row(width: usize) -> usize {
    7 * width + 1
}

/// The bytes of a request's row, with numbers of `width` bytes: its id,
/// seq and flags.
fn request_row(width: usize) -> usize {
    3 * width + 1
}

/// The ids text of a snapshot being written: each id a row names, copied
/// from the state's [`Ids`]; an id many rows share (a tool's name, a step's
/// id) copied once for a run of them.
struct SnapshotIds<'s> {
    from: &'s Ids,
    text: Vec<u8>,
    /// Ends of ids in `text`, one at least every [`ID_END_GRAIN`] bytes:
    /// where a page may be cut in the text.
    ends: Vec<usize>,
    /// The last few shared ids, most recent first.
    shared: Vec<IdSpan>,
}

/// How many shared ids [`SnapshotIds::share`] looks among: a session calls
/// a handful of tools, and the calls of one step follow one another.
const SHARED_IDS: usize = 8;

/// How often [`SnapshotIds`] notes where an id ends, in bytes of text: a
/// page of the text is at most this much longer than asked for (or as
/// long as an id longer than a page).
const ID_END_GRAIN: usize = 256;

impl<'s> SnapshotIds<'s> {
    fn of(from: &'s Ids) -> SnapshotIds<'s> {
        SnapshotIds {
            from,
            text: Vec::with_capacity(from.len()),
            ends: Vec::new(),
            shared: Vec::with_capacity(SHARED_IDS),
        }
    }

    /// Copies the id at `span` of the state's ids; where it now is.
    fn keep(&mut self, span: IdSpan) -> IdSpan {
        let start = self.text.len();
        self.text.extend_from_slice(self.from.bytes(span));
        let noted = self.ends.last().copied().unwrap_or(0);
        if self.text.len() - noted >= ID_END_GRAIN {
            self.ends.push(self.text.len());
        }
        IdSpan {
            start,
            end: self.text.len(),
        }
    }

    /// [`keep`](Self::keep), or where an equal id shared lately already is.
    fn share(&mut self, span: IdSpan) -> IdSpan {
        let id = self.from.bytes(span);
        let text = &self.text;
        let found = self
            .shared
            .iter()
            .position(|kept| &text[kept.start..kept.end] == id);
        let kept = match found {
            Some(at) => self.shared.remove(at),
            None => {
                self.shared.truncate(SHARED_IDS - 1);
                self.keep(span)
            }
        };
        self.shared.insert(0, kept);
        kept
    }
}

struct Writer {
    bytes: Vec<u8>,
    /// The bytes of an id offset: 4, or 8 once the ids pass 4 GiB.
    width: usize,
    /// How many bytes a page holds at least before it is cut.
    page_bytes: usize,
    /// Where each page after the first starts.
    cuts: Vec<usize>,
}

impl Writer {
    /// Cuts a page here, between two reads, if the page holds enough.
    fn may_cut(&mut self) {
        self.may_cut_at(self.bytes.len());
    }

    /// Cuts a page at `at`, between two reads, if the page holds enough.
    fn may_cut_at(&mut self, at: usize) {
        let page_start = self.cuts.last().copied().unwrap_or(0);
        if at - page_start >= self.page_bytes {
            self.cuts.push(at);
        }
    }

    fn byte(&mut self, byte: u8) {
        self.bytes.push(byte);
    }

    fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    fn text(&mut self, text: &str) {
        self.u64(text.len() as u64);
        self.bytes.extend_from_slice(text.as_bytes());
    }

    /// A number of a row (an id offset or a seq), of
    /// [`width`](Self::width) bytes.
    fn number(&mut self, value: u64) {
        self.bytes
            .extend_from_slice(&value.to_le_bytes()[..self.width]);
    }

    /// Its start and end offsets in the ids.
    fn span(&mut self, span: IdSpan) {
        self.number(span.start as u64);
        self.number(span.end as u64);
    }

    fn option<T>(&mut self, value: Option<T>, write: impl FnOnce(&mut Writer, T)) {
        match value {
            None => self.byte(0),
            Some(value) => {
                self.byte(1);
                write(self, value);
            }
        }
    }
}

struct Reader<'b> {
    bytes: &'b FrozenBytes,
    /// Where the state starts in `bytes`, and its length.
    from: usize,
    len: usize,
    /// Where the next read starts, from `from`.
    at: usize,
    /// The bytes of an id offset, 4 or 8.
    width: usize,
}

impl<'b> Reader<'b> {
    /// The bytes at `at..at + len` of the state, which hold `what`.
    fn read(&self, at: usize, len: usize, what: &str) -> Result<&'b [u8], String> {
        let end = self.end_of(at, len, what)?;
        self.bytes
            .get(self.from + at..self.from + end)
            .ok_or_else(|| format!("{what}: the bytes at byte {at} could not be read"))
    }

    fn take(&mut self, len: usize, what: &str) -> Result<&'b [u8], String> {
        let taken = self.read(self.at, len, what)?;
        self.at += len;
        Ok(taken)
    }

    /// Passes over `len` bytes without reading them.
    fn skip(&mut self, len: usize, what: &str) -> Result<(), String> {
        self.at = self.end_of(self.at, len, what)?;
        Ok(())
    }

    /// Where `len` bytes from `at` end, when the state holds them.
    fn end_of(&self, at: usize, len: usize, what: &str) -> Result<usize, String> {
        at.checked_add(len)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| format!("{what}: the state ends at byte {}", self.len))
    }

    /// Row `index` of `row_len` bytes of the table whose rows start at
    /// `rows_at`.
    fn row(
        &self,
        rows_at: usize,
        index: usize,
        row_len: usize,
        what: &str,
    ) -> Result<Row<'b>, String> {
        let at = rows_at + index * row_len;
        Ok(Row {
            bytes: self.read(at, row_len, what)?,
            at,
            width: self.width,
        })
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N, what)?);
        Ok(array)
    }

    fn byte(&mut self, what: &str) -> Result<u8, String> {
        let [byte] = self.array(what)?;
        Ok(byte)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// An id offset, of [`width`](Self::width) bytes.
    fn offset(&mut self, what: &str) -> Result<u64, String> {
        match self.width {
            4 => Ok(u64::from(u32::from_le_bytes(self.array(what)?))),
            _ => self.u64(what),
        }
    }

    /// A count of items of `row` bytes each: never more than the bytes left
    /// hold.
    fn count(&mut self, what: &str, row: usize) -> Result<usize, String> {
        let at = self.at;
        let count = self.u64(what)?;
        let left = self.len - self.at;
        usize::try_from(count)
            .ok()
            .filter(|&count| count.checked_mul(row).is_some_and(|bytes| bytes <= left))
            .ok_or_else(|| format!("{what}: {count} items at byte {at}, more than the bytes left"))
    }

    /// A count of rows of `row_len` bytes each, then the rows, passed
    /// over: where they start, and how many.
    fn table(&mut self, what: &str, row_len: usize) -> Result<(usize, usize), String> {
        let count = self.count(what, row_len)?;
        let at = self.at;
        self.skip(count * row_len, what)?;
        Ok((at, count))
    }

    fn text(&mut self, what: &str) -> Result<&'b str, String> {
        let at = self.at;
        std::str::from_utf8(self.bytes(what)?)
            .map_err(|_| format!("{what}: the text at byte {at} is not UTF-8"))
    }

    /// The bytes of a text, as [`text`](Self::text) reads them, not proved
    /// UTF-8.
    fn bytes(&mut self, what: &str) -> Result<&'b [u8], String> {
        let len = self.count(what, 1)?;
        self.take(len, what)
    }

    fn flags(&mut self, what: &str) -> Result<u8, String> {
        let at = self.at;
        let flags = self.byte(what)?;
        if flags > 3 {
            return Err(format!("{what}: flags {flags} at byte {at} are not 0 to 3"));
        }
        Ok(flags)
    }

    fn seq_at_most(&mut self, seq: u64, what: &str) -> Result<u64, String> {
        let at = self.at;
        let found = self.u64(what)?;
        if found == 0 || found > seq {
            return Err(format!(
                "{what}: seq {found} at byte {at} is not a seq of 1 to {seq}"
            ));
        }
        Ok(found)
    }

    fn span(&mut self, ids: &Text<'_>, what: &str) -> Result<IdSpan, String> {
        let at = self.at;
        let start = self.offset(what)?;
        let end = self.offset(what)?;
        ids.span(start, end)
            .ok_or_else(|| format!("{what}: the id at byte {at} is not within the ids kept"))
    }

    fn chain(&mut self, what: &str) -> Result<ChainValue, String> {
        Ok(ChainValue::from_bytes(self.array(what)?))
    }

    fn vocabulary<T>(
        &mut self,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, String> {
        let text = self.text(what)?;
        parse(text).ok_or_else(|| format!("{what}: {text:?} is not in the vocabulary"))
    }

    fn option<T>(
        &mut self,
        what: &str,
        read: impl FnOnce(&mut Reader<'b>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        let at = self.at;
        match self.byte(what)? {
            0 => Ok(None),
            1 => read(self).map(Some),
            tag => Err(format!("{what}: tag {tag} at byte {at} is neither 0 nor 1")),
        }
    }
}

/// One row of a table of calls or requests, whose length the table
/// checked: its fields are read at fixed places.
struct Row<'b> {
    bytes: &'b [u8],
    /// Where the row starts in the state's bytes.
    at: usize,
    /// The bytes of a number (an id offset or a seq), 4 or 8.
    width: usize,
}

impl Row<'_> {
    /// The number (an id offset or a seq) at `place`.
    fn number(&self, place: usize) -> u64 {
        le_number(self.bytes, place, self.width)
    }

    fn span(&self, place: usize, ids: &Text<'_>, what: &str) -> Result<IdSpan, String> {
        let start = self.number(place);
        let end = self.number(place + self.width);
        ids.span(start, end).ok_or_else(|| {
            format!(
                "{what}: the id at byte {} is not within the ids kept",
                self.at + place
            )
        })
    }

    /// The id at `place`, its offsets as they are (one that does not fit a
    /// `usize` reads as `usize::MAX`, off the ids).
    fn checked_span(&self, place: usize) -> IdSpan {
        let start = usize::try_from(self.number(place)).unwrap_or(usize::MAX);
        let end = usize::try_from(self.number(place + self.width)).unwrap_or(usize::MAX);
        IdSpan { start, end }
    }

    fn seq_at_most(&self, place: usize, seq: u64, what: &str) -> Result<u64, String> {
        let found = self.number(place);
        if found == 0 || found > seq {
            return Err(format!(
                "{what}: seq {found} at byte {} is not a seq of 1 to {seq}",
                self.at + place
            ));
        }
        Ok(found)
    }

    fn flags(&self, place: usize, what: &str) -> Result<u8, String> {
        let flags = self.bytes[place];
        if flags > 3 {
            return Err(format!(
                "{what}: flags {flags} at byte {} are not 0 to 3",
                self.at + place
            ));
        }
        Ok(flags)
    }
}

/// The little-endian number of `width` bytes (4 or 8) at `place` of
/// `bytes`, which hold it.
pub(crate) fn le_number(bytes: &[u8], place: usize, width: usize) -> u64 {
    match width {
        4 => {
            let mut value = [0u8; 4];
            value.copy_from_slice(&bytes[place..place + 4]);
            u64::from(u32::from_le_bytes(value))
        }
        _ => {
            let mut value = [0u8; 8];
            value.copy_from_slice(&bytes[place..place + 8]);
            u64::from_le_bytes(value)
        }
    }
}

/// The ids' text of a snapshot being decoded.
struct Text<'b>(&'b Ids);

impl<'b> Text<'b> {
    /// The bytes from offset `start` to `end` of the text.
    fn get(&self, start: usize, end: usize) -> Option<&'b [u8]> {
        self.0.frozen_get(start, end)
    }

    /// The id from offset `start` to `end`, when both are on character
    /// boundaries within the text (as `str::is_char_boundary` has it: at
    /// its end, or at a byte that does not continue a character), in
    /// order.
    fn span(&self, start: u64, end: u64) -> Option<IdSpan> {
        let start = usize::try_from(start).ok()?;
        let end = usize::try_from(end).ok()?;
        let len = self.0.len();
        let boundary = |at: usize| {
            at == len
                || self
                    .get(at, at + 1)
                    .is_some_and(|byte| byte[0] & 0xc0 != 0x80)
        };
        let within = start <= end && end <= len && boundary(start) && boundary(end);
        within.then_some(IdSpan { start, end })
    }

    /// The bytes of `span`, which [`span`](Self::span) found within the
    /// text, named by a row at byte `at`.
    fn id(&self, span: IdSpan, at: usize) -> Result<&'b [u8], String> {
        self.get(span.start, span.end)
            .ok_or_else(|| format!("the id of the row at byte {at} could not be read"))
    }
}

/// The call a row of the snapshot holds, with numbers of `width` bytes,
/// its fields as they are (whether the decode checked them is as its
/// [`SnapshotTrust`] said; an offset that does not fit a `usize` reads as
/// one off the ids).
pub(crate) fn call_from_row(row: &[u8], width: usize) -> CallEntry {
    let row = Row {
        bytes: row,
        at: 0,
        width,
    };
    let flags = row.bytes[7 * width];
    CallEntry {
        call_id: row.checked_span(0),
        seq: row.number(2 * width),
        step_id: row.checked_span(3 * width),
        name: row.checked_span(5 * width),
        own: flags & 1 != 0,
        settled: flags & 2 != 0,
    }
}

/// The request a row of the snapshot holds, with numbers of `width`
/// bytes, as [`call_from_row`] reads a call.
pub(crate) fn request_from_row(row: &[u8], width: usize) -> RequestEntry {
    let row = Row {
        bytes: row,
        at: 0,
        width,
    };
    let flags = row.bytes[3 * width];
    RequestEntry {
        request_id: row.checked_span(0),
        seq: row.number(2 * width),
        own: flags & 1 != 0,
        decided: flags & 2 != 0,
    }
}

/// Refuses a `what` row (a call or a request) at byte `at` whose id is
/// not after `previous`, the id of the row before it: a table keeps each
/// id once, in the order of the ids. Then `id` is the one before the next.
fn in_id_order<'a>(
    previous: &mut Option<&'a [u8]>,
    id: &'a [u8],
    what: &str,
    at: usize,
) -> Result<(), String> {
    // Bytes compare as the texts they spell do (UTF-8 keeps the order).
    if let Some(before) = previous.filter(|&before| before >= id) {
        let (id, before) = (String::from_utf8_lossy(id), String::from_utf8_lossy(before));
        return Err(format!(
            "{what} id {id:?} at byte {at} is not after the one before ({before:?}): \
             the {what}s are kept once each, in the order of their ids"
        ));
    }
    *previous = Some(id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::state::tests::arbitrary_log;
    use crate::test_log::{projection_json, Log};
    use crate::{Defaults, SessionState, SnapshotTrust};

    /// `bytes` decoded as the state of `log`'s session, read as a store
    /// reads bytes whose CRC matched.
    fn decode_crc_matched(log: &Log, bytes: &[u8]) -> Result<SessionState, String> {
        let body = log.header.to_body();
        // Behind other bytes, as a store's state is behind its header.
        let buffer = [b"header".as_slice(), bytes].concat();
        SessionState::decode_snapshot_in(
            log.header.clone(),
            &body,
            buffer,
            6..6 + bytes.len(),
            SnapshotTrust::CrcMatched,
        )
    }

    /// Bytes a paged decode reads its pages from.
    #[derive(Debug)]
    struct Stored(Vec<u8>);

    impl crate::PageSource for Stored {
        fn read_at(&self, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
            let start = usize::try_from(offset).map_err(std::io::Error::other)?;
            let bytes = self
                .0
                .get(start..start + buffer.len())
                .ok_or_else(|| std::io::Error::other("past the end"))?;
            buffer.copy_from_slice(bytes);
            Ok(())
        }
    }

    /// `state`'s snapshot in pages of about `page_bytes`, stored behind
    /// other bytes, each page's byte `flip` (an index into the bytes,
    /// its bit flipped) changed after its CRC was taken; the state read
    /// page by page from it.
    fn decode_paged(
        log: &Log,
        state: &SessionState,
        page_bytes: usize,
        flip: Option<usize>,
    ) -> Result<SessionState, String> {
        let (bytes, cuts) = state.encode_snapshot_paged(page_bytes);
        let mut pages = Vec::new();
        let mut start = 0;
        for end in cuts.iter().copied().chain([bytes.len()]) {
            pages.push(crate::SnapshotPage {
                len: (end - start) as u32,
                crc: crc32fast::hash(&bytes[start..end]),
            });
            start = end;
        }
        let mut stored = [b"head".as_slice(), &bytes].concat();
        if let Some(flip) = flip {
            stored[4 + flip % bytes.len()] ^= 1;
        }
        SessionState::decode_snapshot_paged(
            log.header.clone(),
            &log.header.to_body(),
            Box::new(Stored(stored)),
            4,
            pages,
        )
    }

    /// Where the first call row starts in `state`'s snapshot, and its
    /// length: found by locating the call ids' offsets, not assumed.
    fn call_rows(state: &SessionState, bytes: &[u8]) -> (usize, usize) {
        let row = super::call_row(4);
        let calls = state.calls.len();
        let count = (calls as u64).to_le_bytes();
        let at = (0..bytes.len() - 8)
            .find(|&at| bytes[at..at + 8] == count && bytes.len() - (at + 8) >= calls * row)
            .map(|at| at + 8);
        match at {
            Some(at) => (at, row),
            None => panic!("no call count {calls} in the snapshot"),
        }
    }

    #[test]
    fn a_snapshot_keeps_each_id_its_rows_name_once_and_no_other() {
        // 50 turns of two calls of one step each, all named "shell"; the
        // last turn and step are still open.
        let mut log = Log::root("s");
        for turn in 0..50 {
            let (t, s) = (format!("turn-{turn}"), format!("step-{turn}"));
            log = log.turn_start(&t).step_start(&s, &t);
            for call in 0..2 {
                let c = format!("call-{turn}-{call}");
                log = log.tool_start(&c, &s).tool_settle(&c);
            }
            if turn < 49 {
                log = log.step_end(&s).turn_end(&t);
            }
        }
        let (state, violations) = log.fold();
        assert_eq!(violations, []);
        let bytes = state.encode_snapshot();
        let count = |needle: &str| {
            bytes
                .windows(needle.len())
                .filter(|window| *window == needle.as_bytes())
                .count()
        };
        assert_eq!(count("shell"), 1, "one name for a hundred calls");
        assert_eq!(count("step-7"), 1, "one step id for its two calls");
        assert_eq!(count("turn-7"), 0, "an ended turn's id is not kept");
        assert_eq!(count("turn-49"), 1, "the open turn's id is kept");
        assert_eq!(count("call-7-1"), 1);
        let body = log.header.to_body();
        let decoded = SessionState::decode_snapshot(log.header.clone(), &body, &bytes)
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(decoded, state);
        assert_eq!(decoded.encode_snapshot(), bytes);
    }

    #[test]
    fn calls_out_of_the_order_of_their_ids_or_kept_twice_are_refused_naming_the_row() {
        let log = Log::root("s")
            .turn_start("t1")
            .step_start("s1", "t1")
            .tool_start("c2", "s1")
            .tool_start("c1", "s1");
        let state = log.state();
        let body = log.header.to_body();
        let bytes = state.encode_snapshot();
        let decoded = SessionState::decode_snapshot(log.header.clone(), &body, &bytes);
        assert_eq!(decoded.as_ref().err(), None);
        let (at, row) = call_rows(&state, &bytes);
        // Stored c1 then c2 (in the order of their ids, not the log's).
        let swapped: Vec<u8> = [
            &bytes[..at],
            &bytes[at + row..at + 2 * row],
            &bytes[at..at + row],
            &bytes[at + 2 * row..],
        ]
        .concat();
        assert_eq!(
            SessionState::decode_snapshot(log.header.clone(), &body, &swapped).err(),
            Some(format!(
                "call id \"c1\" at byte {} is not after the one before (\"c2\"): \
                 the calls are kept once each, in the order of their ids",
                at + row
            ))
        );
        let twice: Vec<u8> = [
            &bytes[..at],
            &bytes[at..at + row],
            &bytes[at..at + row],
            &bytes[at + 2 * row..],
        ]
        .concat();
        assert_eq!(
            SessionState::decode_snapshot(log.header.clone(), &body, &twice).err(),
            Some(format!(
                "call id \"c1\" at byte {} is not after the one before (\"c1\"): \
                 the calls are kept once each, in the order of their ids",
                at + row
            ))
        );
    }

    #[test]
    fn ids_that_are_not_utf8_refuse_a_checked_decode_and_read_as_empty_once_the_crc_matched() {
        let log = Log::root("s")
            .turn_start("t1")
            .step_start("s1", "t1")
            .tool_start("c1", "s1")
            .tool_settle("c1");
        let at = log.events.len() - 1;
        let (state, _) = crate::fold(log.header.clone(), &log.events[..at]);
        let settle = &log.events[at];
        let body = log.header.to_body();
        let mut bytes = state.encode_snapshot();
        // The undamaged bytes settle c1 either way.
        let mut trusted =
            decode_crc_matched(&log, &bytes).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(trusted.apply(settle).err(), None);
        // c1's second byte made a lone continuation byte (its first stays:
        // the ids beside it keep their character boundaries).
        let c1 = bytes.windows(2).position(|pair| pair == b"c1");
        let Some(c1) = c1 else {
            panic!("no c1 in the snapshot")
        };
        // The ids text is the one text that holds it: its length is the
        // eight bytes before it starts.
        let ids_at = (0..c1.saturating_sub(8)).rev().find(|&at| {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
            usize::try_from(len).is_ok_and(|len| at + 8 <= c1 && c1 < at + 8 + len && len < 64)
        });
        let Some(ids_at) = ids_at else {
            panic!("no ids text around c1")
        };
        bytes[c1 + 1] = 0x80;
        assert_eq!(
            SessionState::decode_snapshot(log.header.clone(), &body, &bytes).err(),
            Some(format!("ids: the text at byte {ids_at} is not UTF-8"))
        );
        // Read as bytes whose CRC matched, the damaged id reads as empty:
        // the call is not found, and its settle breaks a rule.
        let mut trusted =
            decode_crc_matched(&log, &bytes).unwrap_or_else(|error| panic!("{error}"));
        assert!(trusted.apply(settle).is_err());
    }

    proptest! {
        #[test]
        fn resuming_from_a_snapshot_at_any_seq_and_folding_the_tail_equals_the_full_fold(
            log in arbitrary_log(),
            at in 0usize..40,
        ) {
            let at = at.min(log.events.len());
            let (whole, _) = log.fold();
            let (prefix, _) = crate::fold(log.header.clone(), &log.events[..at]);
            let bytes = prefix.encode_snapshot();
            let body = log.header.to_body();
            let mut resumed = SessionState::decode_snapshot(log.header.clone(), &body, &bytes)
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(&resumed, &prefix);
            let mut trusted = decode_crc_matched(&log, &bytes).map_err(TestCaseError::fail)?;
            prop_assert_eq!(&trusted, &prefix);
            for record in &log.events[at..] {
                let _ = resumed.apply(record);
                let _ = trusted.apply(record);
            }
            prop_assert_eq!(&resumed, &whole);
            prop_assert_eq!(&trusted, &whole);
            prop_assert_eq!(trusted.encode_snapshot(), whole.encode_snapshot());
            prop_assert_eq!(
                projection_json(&resumed, &Defaults::default()),
                projection_json(&whole, &Defaults::default())
            );
            // The rows are stored in the order of their ids whichever part
            // of a table holds them, so the bytes are the same.
            prop_assert_eq!(resumed.encode_snapshot(), whole.encode_snapshot());
        }

        #[test]
        fn a_batch_folded_on_a_resumed_state_and_rolled_back_leaves_it_as_decoded(
            log in arbitrary_log(),
            at in 0usize..40,
        ) {
            let at = at.min(log.events.len());
            let (prefix, _) = crate::fold(log.header.clone(), &log.events[..at]);
            let body = log.header.to_body();
            let mut resumed =
                SessionState::decode_snapshot(log.header.clone(), &body, &prefix.encode_snapshot())
                    .map_err(TestCaseError::fail)?;
            let mark = resumed.mark();
            for record in &log.events[at..] {
                let _ = resumed.apply(record);
            }
            resumed.rollback(mark);
            prop_assert_eq!(&resumed, &prefix);
            // What the tail folded is found again after the rollback.
            for record in &log.events[at..] {
                let _ = resumed.apply(record);
            }
            let (whole, _) = log.fold();
            prop_assert_eq!(&resumed, &whole);
        }

        #[test]
        fn a_snapshot_with_wide_id_offsets_decodes_to_the_same_state(log in arbitrary_log()) {
            // Offsets of 8 bytes are written only for ids past 4 GiB: the
            // same state with wide offsets decodes the same.
            let (state, _) = log.fold();
            let body = log.header.to_body();
            let bytes = state.encode_snapshot_with_numbers_of(8);
            let decoded = SessionState::decode_snapshot(log.header.clone(), &body, &bytes)
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(&decoded, &state);
            prop_assert_eq!(decoded.encode_snapshot(), state.encode_snapshot());
        }

        #[test]
        fn damaged_snapshot_bytes_decode_to_an_error_or_a_state_never_a_panic(
            log in arbitrary_log(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let (state, _) = log.fold();
            let body = log.header.to_body();
            let mut bytes = state.encode_snapshot();
            for (index, byte) in flips {
                let index = index.index(bytes.len());
                bytes[index] ^= byte;
            }
            if let Ok(decoded) = SessionState::decode_snapshot(log.header.clone(), &body, &bytes) {
                // Whatever it decoded to can be projected and folded on.
                let _ = projection_json(&decoded, &Defaults::default());
                let _ = decoded.pending_approvals();
            }
            let cut = cut.index(bytes.len());
            let _ = SessionState::decode_snapshot(log.header.clone(), &body, &bytes[..cut]);
        }

        #[test]
        fn damaged_bytes_read_as_crc_matched_give_an_error_or_a_state_that_folds_without_a_panic(
            log in arbitrary_log(),
            at in 0usize..40,
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            // Bytes written to match their CRC on purpose reach the decode
            // unchecked row by row: whatever they hold, the state they give
            // folds, rolls back, projects and encodes without a panic.
            let at = at.min(log.events.len());
            let (prefix, _) = crate::fold(log.header.clone(), &log.events[..at]);
            let mut bytes = prefix.encode_snapshot();
            for (index, byte) in flips {
                let index = index.index(bytes.len());
                bytes[index] ^= byte;
            }
            if let Ok(mut decoded) = decode_crc_matched(&log, &bytes) {
                let mark = decoded.mark();
                for record in &log.events[at..] {
                    let _ = decoded.apply(record);
                }
                decoded.rollback(mark);
                for record in &log.events[at..] {
                    let _ = decoded.apply(record);
                }
                let _ = projection_json(&decoded, &Defaults::default());
                let _ = decoded.pending_approvals();
                let _ = decoded.reviewed_seqs().count();
                let _ = decoded.encode_snapshot();
            }
        }

        #[test]
        fn a_state_read_page_by_page_folds_the_tail_to_the_full_fold(
            log in arbitrary_log(),
            at in 0usize..40,
            page_bytes in 1usize..160,
        ) {
            let at = at.min(log.events.len());
            let (whole, whole_violations) = log.fold();
            let (prefix, _) = crate::fold(log.header.clone(), &log.events[..at]);
            let mut paged =
                decode_paged(&log, &prefix, page_bytes, None).map_err(TestCaseError::fail)?;
            prop_assert!(paged.reads_snapshot_pages());
            prop_assert_eq!(&paged, &prefix);
            // Every verdict is the full fold's, and the pages read were
            // all whole.
            let mut violations: Vec<_> = crate::fold(log.header.clone(), &log.events[..at]).1;
            for record in &log.events[at..] {
                if let Err(violation) = paged.apply(record) {
                    violations.push(violation);
                }
            }
            prop_assert_eq!(violations, whole_violations);
            prop_assert!(!paged.snapshot_unreadable());
            prop_assert_eq!(&paged, &whole);
            prop_assert_eq!(paged.encode_snapshot(), whole.encode_snapshot());
            // The cuts change nothing of the bytes.
            prop_assert_eq!(
                prefix.encode_snapshot_paged(page_bytes).0,
                prefix.encode_snapshot()
            );
        }

        #[test]
        fn a_damaged_page_refuses_the_decode_or_is_told_when_a_lookup_lands_on_it(
            log in arbitrary_log(),
            at in 0usize..40,
            page_bytes in 1usize..160,
            flip in any::<usize>(),
        ) {
            let at = at.min(log.events.len());
            let (whole, whole_violations) = log.fold();
            let (prefix, _) = crate::fold(log.header.clone(), &log.events[..at]);
            let Ok(mut paged) = decode_paged(&log, &prefix, page_bytes, Some(flip)) else {
                return Ok(());
            };
            let mut violations: Vec<_> = crate::fold(log.header.clone(), &log.events[..at]).1;
            for record in &log.events[at..] {
                if let Err(violation) = paged.apply(record) {
                    violations.push(violation);
                }
            }
            let _ = projection_json(&paged, &Defaults::default());
            let _ = paged.reviewed_seqs().count();
            let _ = paged.encode_snapshot();
            // A state none of whose reads met the damage is the full
            // fold's, verdict for verdict.
            if !paged.snapshot_unreadable() {
                prop_assert_eq!(violations, whole_violations);
                prop_assert_eq!(&paged, &whole);
            }
        }
    }
}
