//! `SessionState`: the incremental fold over one session (docs/EVENTS.md, "Rules").
//!
//! The state absorbs one record at a time in O(1) amortised work (hash
//! tables of call and request ids), so the writer can check every append
//! against the state it already holds, and `fold` of the first k records is
//! the projection "as of" seq k. Rules about turns, steps, call ownership,
//! settles and approvals look at own events only (seq > seedLength); shapes,
//! vocabularies and the uniqueness of `callId` and `requestId` hold on the
//! whole log, seeded prefix included.
//!
//! The state also keeps the session's hash chain: one SHA-256 per record
//! folded, over its body, whatever the fold made of the event. An own
//! `seal` is checked against the chain value through the seq before it.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;

use sessionlog_schema::{
    event_type_error, ApprovalPolicy, ChainValue, Event, EventRecord, EventType, EventView, Preset,
    SandboxMode, SessionHeader, ShapeError,
};

use crate::authority::may_be_shown;
use crate::chain::Chain;
use crate::seal::{check_inherited_seal, check_own_seal};
use crate::{SealInfo, Violation, ViolationKind};

/// The violation of an event at `seq` whose type is spelled in characters
/// no type may hold (empty, a control or bidirectional formatting
/// character); `None` for a type the fold takes. A writer asks it before
/// anything else of an event, so that such a type is a rule violation
/// however else the event would be refused.
pub fn type_violation(seq: u64, event_type: &str) -> Option<Violation> {
    event_type_error(event_type).map(|message| Violation {
        seq,
        event_type: event_type.to_owned(),
        kind: ViolationKind::Shape,
        message: format!("type: {message}"),
    })
}

/// The configured defaults a session falls back on when neither its own
/// switches nor its header set a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Defaults {
    /// The configured approval policy (`ask` unless configured).
    pub approval: ApprovalPolicy,
    /// The configured sandbox mode (`workspace-write` unless configured).
    pub sandbox: SandboxMode,
}

/// A started call, as the fold knows it ([`SessionState::call`] copies it
/// out of the state).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallState {
    /// The seq of its `tool/start`.
    pub seq: u64,
    /// The step it was started in.
    pub step_id: String,
    /// The tool's name.
    pub name: String,
    /// Whether it was started by this session (not in the seeded prefix).
    pub own: bool,
    /// Whether a `tool/settle` closed it.
    pub settled: bool,
}

/// Incremental fold over one session. O(1) amortised per event.
///
/// Two states are equal when they project the same: the same header, seq,
/// switches, open turn and step, calls and requests (with their seqs and
/// flags), pending approvals and review index, whatever order their ids
/// were kept in.
#[derive(Debug, Clone)]
pub struct SessionState {
    pub(crate) header: SessionHeader,
    pub(crate) seq: u64,
    /// Seq and value of the last own `approval/policy`.
    pub(crate) approval_switch: Option<(u64, ApprovalPolicy)>,
    /// Value of the last own `sandbox/mode`.
    pub(crate) sandbox_switch: Option<SandboxMode>,
    /// Value of the last own `permission/preset`.
    pub(crate) preset_switch: Option<Preset>,
    /// Every id the state keeps.
    pub(crate) ids: Ids,
    pub(crate) open_turn: Option<IdSpan>,
    pub(crate) open_step: Option<IdSpan>,
    /// Every `tool/start` of the whole log, by `callId`.
    pub(crate) calls: IdTable<CallEntry>,
    /// Every `approval/asked` of the whole log, by `requestId`.
    pub(crate) requests: IdTable<RequestEntry>,
    /// Own undecided asks (their `requestId`), by the seq they were asked at.
    pub(crate) pending_approvals: BTreeMap<u64, IdSpan>,
    /// Seq and approval policy of the last own `request/header`.
    pub(crate) last_own_request_header: Option<(u64, ApprovalPolicy)>,
    pub(crate) latest_request_header_seq: Option<u64>,
    pub(crate) last_checkpoint_seq: Option<u64>,
    /// Seqs of every `tool/start` and of every message whose source kind
    /// the reviewer may be shown, in log order.
    pub(crate) reviewed_seqs: Seqs,
    pub(crate) violation_count: u64,
    /// The chain through `seq`.
    pub(crate) chain: Chain,
    /// The last seal folded (own or inherited).
    pub(crate) last_seal: Option<SealInfo>,
    /// The seq of the last own seal folded.
    pub(crate) last_own_seal_seq: Option<u64>,
    /// While a [`Mark`] is open: the entries changed in place since, so
    /// that [`SessionState::rollback`] can undo them.
    journal: Option<Journal>,
}

/// Where a batch began: what [`SessionState::rollback`] restores, in O(what
/// changed since) rather than a copy of the whole state. Everything the fold
/// only appends to is kept as a length; the few fields it overwrites are
/// kept by value; entries changed in place are journaled while the mark is
/// open.
#[derive(Debug)]
#[must_use = "a mark is either rolled back or released"]
pub struct Mark {
    seq: u64,
    approval_switch: Option<(u64, ApprovalPolicy)>,
    sandbox_switch: Option<SandboxMode>,
    preset_switch: Option<Preset>,
    ids_len: usize,
    open_turn: Option<IdSpan>,
    open_step: Option<IdSpan>,
    calls_len: usize,
    requests_len: usize,
    last_own_request_header: Option<(u64, ApprovalPolicy)>,
    latest_request_header_seq: Option<u64>,
    last_checkpoint_seq: Option<u64>,
    reviewed_len: usize,
    violation_count: u64,
    chain: ChainValue,
    last_seal: Option<SealInfo>,
    last_own_seal_seq: Option<u64>,
}

/// Entries that existed at a [`Mark`] and were changed in place since.
#[derive(Debug, Clone, Default)]
struct Journal {
    /// Indexes of calls settled since the mark.
    settled: Vec<usize>,
    /// Indexes of requests decided since the mark.
    decided: Vec<usize>,
}

pub(crate) use crate::frozen::Frozen;

/// The ids a state keeps (of calls, requests, the open turn and step), one
/// after the other in one text: keeping an id costs its bytes, not an
/// allocation of its own. A resumed state's text starts with the
/// snapshot's ids, read in place; the ids kept since follow them.
#[derive(Clone, Default)]
pub(crate) struct Ids {
    /// A decoded snapshot's ids: its bytes and where the text is in them
    /// (UTF-8, as the decode checked).
    frozen: Option<(Frozen, Range<usize>)>,
    /// The ids kept since (every id, without a snapshot).
    added: String,
}

/// Where one id is in [`Ids`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdSpan {
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// A started call, its ids in [`Ids`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallEntry {
    pub(crate) call_id: IdSpan,
    pub(crate) seq: u64,
    pub(crate) step_id: IdSpan,
    pub(crate) name: IdSpan,
    pub(crate) own: bool,
    pub(crate) settled: bool,
}

/// An asked approval, its id in [`Ids`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestEntry {
    pub(crate) request_id: IdSpan,
    pub(crate) seq: u64,
    pub(crate) own: bool,
    pub(crate) decided: bool,
}

/// Entries found by an id of theirs, kept in [`Ids`], each at an index:
/// first a decoded snapshot's rows, read in place from its bytes (in the
/// order of their ids, found by binary search, never decoded as a whole),
/// then the entries added since, in the order added, found by a hash table
/// of their indexes with the hash of their id (small slots, so that probing
/// touches little memory, and growing the table never reads an id again).
/// A lookup tries both parts; an insert goes to the hash table; a row of
/// the snapshot that changes (a call settled, a request decided) is kept
/// changed beside the rows. Opening a long session so allocates nothing
/// per row, and reads a row only when a lookup lands on it (the decode
/// checks each row first unless the snapshot's CRC matched:
/// [`SnapshotTrust`](crate::SnapshotTrust)).
///
/// The hasher is foldhash's, seeded at random for each table: a log is
/// input, and a crafted one with ids that collide under a known hash could
/// make a fold quadratic, so the hash is keyed (as std's SipHash is) but
/// costs a fraction of SipHash on ids of a few bytes. Binary search needs
/// no key: the snapshot's rows are never hashed, and the key never stored.
#[derive(Clone)]
pub(crate) struct IdTable<T> {
    /// A decoded snapshot's rows, indexes `0..count`.
    frozen: Option<FrozenRows>,
    /// The snapshot's rows changed since the decode, by index.
    changed: BTreeMap<usize, T>,
    /// The entries added since, from index `count` on (every entry,
    /// without a snapshot).
    added: Vec<T>,
    table: HashTable<IndexSlot>,
    hasher: foldhash::fast::RandomState,
}

/// The rows of a table of a decoded snapshot, of fixed size, in the order
/// of their ids (as the decode checked, or as the snapshot's CRC vouches).
#[derive(Clone)]
pub(crate) struct FrozenRows {
    pub(crate) bytes: Frozen,
    /// Where the first row starts in `bytes`.
    pub(crate) start: usize,
    pub(crate) count: usize,
    /// The bytes of a row.
    pub(crate) row: usize,
    /// The bytes of an id offset in a row, 4 or 8.
    pub(crate) width: usize,
}

/// A slot of an [`IdTable`]'s hash table: an entry's index and its id's hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexSlot {
    hash: u64,
    index: usize,
}

/// An entry of an [`IdTable`]: the id it is found by, and how it is read
/// from a snapshot's row.
pub(crate) trait Keyed: Copy {
    fn key(&self) -> IdSpan;

    /// The entry a snapshot's `row` holds, its id offsets of `width` bytes.
    fn from_row(row: &[u8], width: usize) -> Self;
}

/// Seqs in increasing order: a decoded snapshot's, read in place from its
/// bytes (4 or 8 bytes each, little-endian, as the decode checked or the
/// snapshot's CRC vouches), then the ones added since.
#[derive(Clone, Default)]
pub(crate) struct Seqs {
    frozen: Option<FrozenSeqs>,
    added: Vec<u64>,
}

/// A decoded snapshot's seqs: its bytes, where the first starts, how many,
/// and the bytes of each.
#[derive(Clone)]
struct FrozenSeqs {
    bytes: Frozen,
    start: usize,
    count: usize,
    width: usize,
}

/// Folds `records` in order over `header`, collecting every violation.
///
/// Pass the first k records (`records.iter().take(k)`) for the projection
/// as of seq k. A record that breaks a rule is reported and skipped, and the
/// fold goes on, so one pass reports every violation.
///
/// The chain starts from the header record writers emit
/// ([`SessionHeader::to_body`]); a stored session is folded with
/// [`fold_stored`], from the header body it holds.
pub fn fold<'a>(
    header: SessionHeader,
    records: impl IntoIterator<Item = &'a EventRecord>,
) -> (SessionState, Vec<Violation>) {
    let body = header.to_body();
    fold_stored(header, &body, records)
}

/// [`fold`] over a stored session, whose chain (and so every own seal)
/// starts from `header_body`: its header record's body as stored, whatever
/// its member order.
pub fn fold_stored<'a>(
    header: SessionHeader,
    header_body: &str,
    records: impl IntoIterator<Item = &'a EventRecord>,
) -> (SessionState, Vec<Violation>) {
    let mut state = SessionState::with_header_body(header, header_body);
    let mut violations = Vec::new();
    for record in records {
        if let Err(violation) = state.apply(record) {
            violations.push(violation);
        }
    }
    (state, violations)
}

impl Default for Defaults {
    /// `ask` and `workspace-write`, the format's defaults.
    fn default() -> Self {
        Defaults {
            approval: ApprovalPolicy::Ask,
            sandbox: SandboxMode::WorkspaceWrite,
        }
    }
}

impl SessionState {
    /// The state of a session holding only its header (seq 0), whose
    /// header record is the one writers emit ([`SessionHeader::to_body`]).
    /// A stored session's header may have been written with its members
    /// in another order: fold it from
    /// [`with_header_body`](Self::with_header_body), so that its chain
    /// starts from the bytes stored.
    pub fn new(header: SessionHeader) -> SessionState {
        let body = header.to_body();
        SessionState::with_header_body(header, &body)
    }

    /// The state of a stored session holding only its header (seq 0):
    /// `header_body` is its header record's body as stored (the bytes
    /// before `,"crc":`), where the chain starts.
    pub fn with_header_body(header: SessionHeader, header_body: &str) -> SessionState {
        SessionState {
            header,
            seq: 0,
            approval_switch: None,
            sandbox_switch: None,
            preset_switch: None,
            ids: Ids::default(),
            open_turn: None,
            open_step: None,
            calls: IdTable::default(),
            requests: IdTable::default(),
            pending_approvals: BTreeMap::new(),
            last_own_request_header: None,
            latest_request_header_seq: None,
            last_checkpoint_seq: None,
            reviewed_seqs: Seqs::default(),
            violation_count: 0,
            chain: Chain::genesis(header_body),
            last_seal: None,
            last_own_seal_seq: None,
            journal: None,
        }
    }

    /// Opens a mark: every change from here on can be undone by
    /// [`rollback`](Self::rollback) (a batch that fails midway) or kept by
    /// [`release`](Self::release). Costs O(1), whatever the session's
    /// length; one mark at a time.
    ///
    /// ```
    /// use sessionlog_projections::SessionState;
    /// use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
    ///
    /// let mut state = SessionState::new(SessionHeader::root(SessionId::parse("a")?, 0, "/w".into()));
    /// let before = state.clone();
    /// let mark = state.mark();
    /// state.apply(&EventRecord::new(1, 1, None, "turn/start", r#"{"turnId":"t1"}"#))?;
    /// assert!(state.apply(&EventRecord::new(2, 2, None, "turn/start", r#"{"turnId":"t2"}"#)).is_err());
    /// state.rollback(mark);
    /// assert_eq!(state, before);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn mark(&mut self) -> Mark {
        debug_assert!(self.journal.is_none(), "one mark at a time");
        self.journal = Some(Journal::default());
        self.chain.settle();
        Mark {
            seq: self.seq,
            approval_switch: self.approval_switch,
            sandbox_switch: self.sandbox_switch,
            preset_switch: self.preset_switch,
            ids_len: self.ids.len(),
            open_turn: self.open_turn,
            open_step: self.open_step,
            calls_len: self.calls.len(),
            requests_len: self.requests.len(),
            last_own_request_header: self.last_own_request_header,
            latest_request_header_seq: self.latest_request_header_seq,
            last_checkpoint_seq: self.last_checkpoint_seq,
            reviewed_len: self.reviewed_seqs.len(),
            violation_count: self.violation_count,
            chain: self.chain.value(),
            last_seal: self.last_seal.clone(),
            last_own_seal_seq: self.last_own_seal_seq,
        }
    }

    /// Keeps every change since `mark`.
    pub fn release(&mut self, mark: Mark) {
        let _ = mark;
        self.journal = None;
    }

    /// Undoes every change since `mark`: the state is again what it was
    /// when the mark was taken (equal, and folding the same from there).
    pub fn rollback(&mut self, mark: Mark) {
        let journal = self.journal.take().unwrap_or_default();
        for &index in journal.settled.iter().rev() {
            let call = self.calls.get(index);
            self.calls.set(
                index,
                CallEntry {
                    settled: false,
                    ..call
                },
            );
        }
        for &index in journal.decided.iter().rev() {
            let request = RequestEntry {
                decided: false,
                ..self.requests.get(index)
            };
            self.requests.set(index, request);
            if request.own {
                self.pending_approvals
                    .insert(request.seq, request.request_id);
            }
        }
        // Asks made since the mark are the pending approvals after its seq.
        drop(self.pending_approvals.split_off(&(mark.seq + 1)));
        self.calls.truncate(&self.ids, mark.calls_len);
        self.requests.truncate(&self.ids, mark.requests_len);
        self.ids.truncate(mark.ids_len);
        self.reviewed_seqs.truncate(mark.reviewed_len);
        self.seq = mark.seq;
        self.approval_switch = mark.approval_switch;
        self.sandbox_switch = mark.sandbox_switch;
        self.preset_switch = mark.preset_switch;
        self.open_turn = mark.open_turn;
        self.open_step = mark.open_step;
        self.last_own_request_header = mark.last_own_request_header;
        self.latest_request_header_seq = mark.latest_request_header_seq;
        self.last_checkpoint_seq = mark.last_checkpoint_seq;
        self.violation_count = mark.violation_count;
        self.chain = Chain::settled(mark.chain);
        self.last_seal = mark.last_seal;
        self.last_own_seal_seq = mark.last_own_seal_seq;
    }

    /// The chain value through [`seq`](Self::seq): what an own seal
    /// appended next must carry, and what `sessionlog head` prints.
    pub fn chain(&self) -> ChainValue {
        self.chain.value()
    }

    /// Hashes the records whose chain links were put off (see
    /// [`chain`](Self::chain)), so that reading the value next costs
    /// nothing: what a writer does before it makes a seal, whose record
    /// it then folds.
    pub fn settle_chain(&mut self) {
        self.chain.settle();
    }

    /// The last seal folded, own or inherited.
    pub fn last_seal(&self) -> Option<&SealInfo> {
        self.last_seal.as_ref()
    }

    /// The seq of the last own seal folded.
    pub fn last_own_seal_seq(&self) -> Option<u64> {
        self.last_own_seal_seq
    }

    /// Whether the state was resumed from a snapshot read page by page
    /// ([`decode_snapshot_paged`](Self::decode_snapshot_paged)) and a page
    /// of it could not be read or did not match its CRC: a lookup that
    /// landed there missed, so what the state answered since may be wrong.
    /// Fold the log again before trusting it.
    pub fn snapshot_unreadable(&self) -> bool {
        self.ids
            .snapshot_bytes()
            .is_some_and(|bytes| bytes.failed())
    }

    /// Reads every page of the snapshot the state reads page by page that
    /// it has not read yet (before the state is encoded, say): whether
    /// none failed (true for a state not read page by page).
    pub fn read_every_snapshot_page(&self) -> bool {
        self.ids
            .snapshot_bytes()
            .is_none_or(|bytes| bytes.read_every_page())
    }

    /// Whether the state reads a snapshot's pages as lookups land on them
    /// (so that [`snapshot_unreadable`](Self::snapshot_unreadable) may
    /// become true).
    pub fn reads_snapshot_pages(&self) -> bool {
        self.ids
            .snapshot_bytes()
            .is_some_and(|bytes| bytes.is_paged())
    }

    /// The session's header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The last seq applied (0 = header only).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// How many applied records were refused. A session fit to fork or to
    /// review has none.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// Whether the event at `seq` is the session's own (not seeded).
    pub fn is_own(&self, seq: u64) -> bool {
        seq > self.header.seed_length
    }

    /// Validates `record` against the shapes, vocabularies and every rule,
    /// without changing the state, and returns the parsed event. The record
    /// must carry the next seq (`self.seq() + 1`).
    ///
    /// ```
    /// use sessionlog_projections::SessionState;
    /// use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
    ///
    /// let mut state = SessionState::new(SessionHeader::root(SessionId::parse("a")?, 0, "/w".into()));
    /// let turn = EventRecord::new(1, 1, None, "turn/start", r#"{"turnId":"t1"}"#);
    /// state.check(&turn)?;
    /// state.apply(&turn)?;
    /// assert_eq!(state.open_turn(), Some("t1"));
    /// // A step in a turn that is not open breaks a rule.
    /// let step = EventRecord::new(2, 2, None, "step/start", r#"{"stepId":"s1","turnId":"t9"}"#);
    /// assert!(state.check(&step).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self, record: &EventRecord) -> Result<Event, Violation> {
        let seq = record.seq();
        let event_type = record.event_type();
        self.check_next_seq(record)?;
        let event = Event::parse(event_type, record.data())
            .map_err(|error| Violation::from_shape(seq, event_type, &error))?;
        self.check_rules(seq, event_type, &EventView::of(&event))?;
        Ok(event)
    }

    /// [`check`](Self::check), then the event's effects. On `Err` the effects
    /// are skipped but the seq still advances by one, so a caller can go on
    /// and report every violation.
    ///
    /// It validates exactly what `check` validates, but through the borrowed
    /// [`EventView`]: a fold over a long log copies only the ids it keeps.
    pub fn apply(&mut self, record: &EventRecord) -> Result<(), Violation> {
        self.fold_parsed(
            record,
            || EventView::parse(record.event_type(), record.data()),
            true,
        )
    }

    /// [`apply`](Self::apply), given `view`: what `EventView::parse` returns
    /// for the record's type and data, already parsed (a reader that folds
    /// gets it from `decode_event_viewed`, in the scan that decoded the
    /// line). Same acceptance, same violations, same effects.
    pub fn apply_viewed(
        &mut self,
        record: &EventRecord,
        view: Result<EventView<'_>, ShapeError>,
    ) -> Result<(), Violation> {
        self.fold_parsed(record, || view, true)
    }

    /// [`apply_viewed`](Self::apply_viewed), with the hash chain left to
    /// the caller, who computes it elsewhere (on another thread, beside a
    /// long read): the chain value is not advanced, save that before an own
    /// seal is checked it is set to `chain_before()`, which must be the
    /// chain through every record folded before this one (what the seal
    /// must hold). Same acceptance, same violations, same effects. When
    /// done, the caller sets the chain through the last record folded with
    /// [`set_chain`](Self::set_chain).
    pub fn apply_viewed_unchained(
        &mut self,
        record: &EventRecord,
        view: Result<EventView<'_>, ShapeError>,
        chain_before: impl FnOnce() -> ChainValue,
    ) -> Result<(), Violation> {
        // An own seal is checked against the chain before it, even one
        // whose shape is broken (its chain, if readable, still is).
        if record.event_type() == EventType::Seal.as_str() && self.is_own(record.seq()) {
            self.chain = Chain::settled(chain_before());
        }
        self.fold_parsed(record, || view, false)
    }

    /// [`apply_viewed`](Self::apply_viewed), for a fold that only projects
    /// and so has no use for the hash chain: the chain is not advanced, and
    /// from the first such record on [`chain`](Self::chain) is not the
    /// session's (this state is not to be sealed from, saved as a snapshot
    /// or resumed). An own seal cannot be checked without the chain: given
    /// one, nothing is applied and `None` is returned, for the caller to
    /// fold the log again with its chain. Any other record: same
    /// acceptance, same violations, same effects.
    pub fn apply_viewed_unhashed(
        &mut self,
        record: &EventRecord,
        view: Result<EventView<'_>, ShapeError>,
    ) -> Option<Result<(), Violation>> {
        if record.event_type() == EventType::Seal.as_str() && self.is_own(record.seq()) {
            return None;
        }
        Some(self.fold_parsed(record, || view, false))
    }

    /// Sets the chain value through [`seq`](Self::seq), which a fold by
    /// [`apply_viewed_unchained`](Self::apply_viewed_unchained) left to its
    /// caller.
    pub fn set_chain(&mut self, chain: ChainValue) {
        self.chain = Chain::settled(chain);
    }

    /// [`apply`](Self::apply) with the parse of the record's data, called
    /// only once the seq is right, advancing the chain only when `chained`.
    fn fold_parsed<'v>(
        &mut self,
        record: &EventRecord,
        parse: impl FnOnce() -> Result<EventView<'v>, ShapeError>,
        chained: bool,
    ) -> Result<(), Violation> {
        if record.event_type() == EventType::Seal.as_str() {
            // Hashed once here, not again for each check of the value.
            self.chain.settle();
        }
        let checked = self.check_parsed(record, parse);
        self.seq = self.seq.saturating_add(1);
        if chained {
            self.chain.push(record.body());
        }
        match checked {
            Checked::Accepted(view) => {
                self.absorb(self.seq, view);
                Ok(())
            }
            Checked::FailedSeal(view, violation) => {
                self.absorb(self.seq, view);
                self.violation_count += 1;
                Err(violation)
            }
            Checked::Refused(violation) => {
                self.violation_count += 1;
                Err(violation)
            }
        }
    }

    /// Folds the event that [`check`](Self::check) returned for `record`,
    /// without checking it again (the writer checks before it writes and
    /// folds after the write succeeded).
    pub fn apply_checked(&mut self, record: &EventRecord, event: Event) {
        debug_assert_eq!(record.seq(), self.seq.saturating_add(1));
        self.seq = self.seq.saturating_add(1);
        if matches!(event, Event::Seal(_)) {
            // As in a read: the links before a seal are hashed once.
            self.chain.settle();
        }
        self.chain.push(record.body());
        self.absorb(self.seq, EventView::of(&event));
    }

    /// The approval override: the last own `approval/policy`, else the
    /// header's baseline, else none. Never the configured default.
    pub fn approval_override(&self) -> Option<ApprovalPolicy> {
        self.approval_switch
            .map(|(_, policy)| policy)
            .or(self.header.approval_policy)
    }

    /// The sandbox override: the last own `sandbox/mode`, else the header's
    /// baseline, else none. Never the configured default.
    pub fn sandbox_override(&self) -> Option<SandboxMode> {
        self.sandbox_switch.or(self.header.sandbox_mode)
    }

    /// The approval policy in force: the override, else the default.
    pub fn effective_approval(&self, defaults: &Defaults) -> ApprovalPolicy {
        self.approval_override().unwrap_or(defaults.approval)
    }

    /// The sandbox mode in force: the override, else the default.
    pub fn effective_sandbox(&self, defaults: &Defaults) -> SandboxMode {
        self.sandbox_override().unwrap_or(defaults.sandbox)
    }

    /// The last own `permission/preset`, whether or not it still fits.
    pub fn chosen_preset(&self) -> Option<Preset> {
        self.preset_switch
    }

    /// The open own turn.
    pub fn open_turn(&self) -> Option<&str> {
        self.open_turn.map(|turn| self.ids.get(turn))
    }

    /// The open own step (always inside the open turn).
    pub fn open_step(&self) -> Option<&str> {
        self.open_step.map(|step| self.ids.get(step))
    }

    /// The `requestId`s of own asks not yet decided, in the order asked.
    pub fn pending_approvals(&self) -> Vec<&str> {
        self.pending_approvals
            .values()
            .map(|request| self.ids.get(*request))
            .collect()
    }

    /// The seq of the last `checkpoint` of the whole log: the compaction
    /// surface starts there (inclusive). `None`: the surface is the whole log.
    pub fn last_checkpoint_seq(&self) -> Option<u64> {
        self.last_checkpoint_seq
    }

    /// The seqs of every `tool/start` of the whole log and of every message
    /// whose source kind the reviewer may be shown (user, agent-message,
    /// instructions), in log order: the only events the reviewer's request
    /// reads besides the latest `request/header` and the last checkpoint.
    pub fn reviewed_seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.reviewed_seqs.iter()
    }

    /// Whether `seq` is among the [`reviewed_seqs`](Self::reviewed_seqs)
    /// (a binary search).
    pub fn is_reviewed(&self, seq: u64) -> bool {
        self.reviewed_seqs.contains(seq)
    }

    /// The call started with `call_id` anywhere in the log.
    pub fn call(&self, call_id: &str) -> Option<CallState> {
        let call = self.calls.find(&self.ids, call_id)?;
        Some(CallState {
            seq: call.seq,
            step_id: self.ids.get(call.step_id).to_owned(),
            name: self.ids.get(call.name).to_owned(),
            own: call.own,
            settled: call.settled,
        })
    }

    /// The seq of the latest `request/header` of the whole log, seeded
    /// prefix included (the reviewer's model and tool definitions).
    pub fn latest_request_header_seq(&self) -> Option<u64> {
        self.latest_request_header_seq
    }

    /// Seq and approval policy of the last own `request/header` (the R of
    /// the policy notice).
    pub fn last_own_request_header(&self) -> Option<(u64, ApprovalPolicy)> {
        self.last_own_request_header
    }

    /// Seq of the last own `approval/policy`.
    pub fn last_own_approval_switch_seq(&self) -> Option<u64> {
        self.approval_switch.map(|(seq, _)| seq)
    }

    /// The record must carry the next seq (`self.seq() + 1`) and a type
    /// spelled in the allowed characters.
    fn check_next_seq(&self, record: &EventRecord) -> Result<(), Violation> {
        let expected = self.seq.saturating_add(1);
        if record.seq() == expected {
            return match type_violation(record.seq(), record.event_type()) {
                None => Ok(()),
                Some(violation) => Err(violation),
            };
        }
        Err(Violation::rule(
            record.seq(),
            record.event_type(),
            format!("expected seq {expected}, found seq {}", record.seq()),
        ))
    }

    /// [`check`](Self::check) through the borrowed view that `parse`
    /// returns for the record's data. A seal that fails its check against
    /// the chain comes back with its view: it still counts as the last
    /// seal (docs/FORMAT.md, "Verification options"), so that
    /// `--require-sealed` and a verdict name the seal that failed, not a
    /// log that seems unsealed.
    fn check_parsed<'v>(
        &self,
        record: &EventRecord,
        parse: impl FnOnce() -> Result<EventView<'v>, ShapeError>,
    ) -> Checked<'v> {
        let seq = record.seq();
        let event_type = record.event_type();
        if let Err(violation) = self.check_next_seq(record) {
            return Checked::Refused(violation);
        }
        let view = match parse() {
            Ok(view) => view,
            Err(error) => {
                let shape = Violation::from_shape(seq, event_type, &error);
                let own_seal = event_type == EventType::Seal.as_str() && self.is_own(seq);
                let failure = own_seal
                    .then(|| crate::seal::broken_seal_chain_failure(record, &self.chain.value()))
                    .flatten();
                return Checked::Refused(match failure {
                    Some(failure) => Violation::seal(
                        seq,
                        event_type,
                        format!("{failure} (and its shape is broken: {})", shape.message),
                    ),
                    None => shape,
                });
            }
        };
        match self.check_rules(seq, event_type, &view) {
            Ok(()) => Checked::Accepted(view),
            Err(violation) if violation.kind == ViolationKind::Seal => {
                Checked::FailedSeal(view, violation)
            }
            Err(violation) => Checked::Refused(violation),
        }
    }

    /// The whole-log rules, then, for an own event, the own rules.
    fn check_rules(
        &self,
        seq: u64,
        event_type: &str,
        view: &EventView<'_>,
    ) -> Result<(), Violation> {
        self.check_whole_log_rules(view)
            .map_err(|message| Violation::rule(seq, event_type, message))?;
        if self.is_own(seq) {
            self.check_own_rules(view)
                .map_err(|message| Violation::rule(seq, event_type, message))?;
            if let EventView::Seal(seal) = view {
                check_own_seal(&self.header.id, seq, seal, &self.chain.value())
                    .map_err(|message| Violation::seal(seq, event_type, message))?;
            }
        } else if let EventView::Seal(seal) = view {
            check_inherited_seal(&self.header, seq, seal)
                .map_err(|message| Violation::seal(seq, event_type, message))?;
        }
        Ok(())
    }

    /// Rules that hold on the whole log: ids that must be unique.
    fn check_whole_log_rules(&self, view: &EventView<'_>) -> Result<(), String> {
        match view {
            EventView::ToolStart { call_id, .. } => match self.calls.find(&self.ids, call_id) {
                Some(earlier) => Err(format!(
                    "callId {:?} is already used by the tool/start at seq {}",
                    call_id, earlier.seq
                )),
                None => Ok(()),
            },
            EventView::ApprovalAsked { request_id, .. } => {
                match self.requests.find(&self.ids, request_id) {
                    Some(earlier) => Err(format!(
                        "requestId {:?} is already used by the approval/asked at seq {}",
                        request_id, earlier.seq
                    )),
                    None => Ok(()),
                }
            }
            EventView::RequestHeader { .. }
            | EventView::TurnStart { .. }
            | EventView::TurnEnd { .. }
            | EventView::StepStart { .. }
            | EventView::StepEnd { .. }
            | EventView::Message { .. }
            | EventView::ToolSettle { .. }
            | EventView::ApprovalPolicy { .. }
            | EventView::SandboxMode { .. }
            | EventView::PermissionPreset { .. }
            | EventView::ApprovalDecided { .. }
            | EventView::Checkpoint
            | EventView::ChildCreated
            | EventView::Seal(_)
            | EventView::Unknown => Ok(()),
        }
    }

    /// Rules that hold on own events: turns, steps, calls, approvals.
    fn check_own_rules(&self, view: &EventView<'_>) -> Result<(), String> {
        match view {
            EventView::TurnStart { turn_id } => match self.open_turn() {
                Some(open) => Err(format!(
                    "turn {turn_id:?} cannot start while turn {open:?} is open; end it first"
                )),
                None => Ok(()),
            },
            EventView::TurnEnd { turn_id } => {
                self.names_open_turn(|| "turn/end".to_owned(), turn_id)?;
                match self.open_step() {
                    Some(step) => Err(format!(
                        "turn {turn_id:?} cannot end while step {step:?} is open; end the step first"
                    )),
                    None => Ok(()),
                }
            }
            EventView::StepStart { step_id, turn_id } => {
                self.names_open_turn(|| format!("step {step_id:?}"), turn_id)?;
                match self.open_step() {
                    Some(open) => Err(format!(
                        "step {step_id:?} cannot start while step {open:?} is open; end it first"
                    )),
                    None => Ok(()),
                }
            }
            EventView::StepEnd { step_id } => {
                self.names_open_step(|| "step/end".to_owned(), step_id)
            }
            EventView::ToolStart {
                call_id, step_id, ..
            } => self.names_open_step(|| format!("call {call_id:?}"), step_id),
            EventView::ToolSettle { call_id } => self.check_tool_settle(call_id),
            EventView::ApprovalAsked {
                request_id,
                turn_id,
            } => self.names_open_turn(|| format!("approval request {request_id:?}"), turn_id),
            EventView::ApprovalDecided { request_id } => self.check_approval_decided(request_id),
            EventView::RequestHeader { .. }
            | EventView::Message { .. }
            | EventView::ApprovalPolicy { .. }
            | EventView::SandboxMode { .. }
            | EventView::PermissionPreset { .. }
            | EventView::Checkpoint
            | EventView::ChildCreated
            // An own seal is checked against the chain, apart (exit 7).
            | EventView::Seal(_)
            | EventView::Unknown => Ok(()),
        }
    }

    /// `what` (named only when it is an error) must name the open turn.
    fn names_open_turn(&self, what: impl Fn() -> String, turn_id: &str) -> Result<(), String> {
        names_open("turn", self.open_turn(), what, turn_id)
    }

    /// `what` (named only when it is an error) must name the open step.
    fn names_open_step(&self, what: impl Fn() -> String, step_id: &str) -> Result<(), String> {
        names_open("step", self.open_step(), what, step_id)
    }

    fn check_tool_settle(&self, call_id: &str) -> Result<(), String> {
        let Some(call) = self.calls.find(&self.ids, call_id) else {
            return Err(format!(
                "call {call_id:?} was never started; a settle needs an own started call"
            ));
        };
        if !call.own {
            return Err(format!(
                "call {call_id:?} was started in the seeded prefix (seq {}) and is not this session's to settle",
                call.seq
            ));
        }
        if call.settled {
            return Err(format!("call {call_id:?} is already settled"));
        }
        Ok(())
    }

    fn check_approval_decided(&self, request_id: &str) -> Result<(), String> {
        let Some(request) = self.requests.find(&self.ids, request_id) else {
            return Err(format!("approval request {request_id:?} was never asked"));
        };
        if !request.own {
            return Err(format!(
                "approval request {request_id:?} was asked in the seeded prefix (seq {}) and is not this session's to decide",
                request.seq
            ));
        }
        if request.decided {
            return Err(format!(
                "approval request {request_id:?} is already decided"
            ));
        }
        Ok(())
    }

    /// The effects of a checked event at `seq`.
    fn absorb(&mut self, seq: u64, view: EventView<'_>) {
        let own = self.is_own(seq);
        match view {
            EventView::RequestHeader { approval_policy } => {
                self.latest_request_header_seq = Some(seq);
                if own {
                    self.last_own_request_header = Some((seq, approval_policy));
                }
            }
            EventView::TurnStart { turn_id } if own => {
                self.open_turn = Some(self.ids.push(&turn_id));
            }
            EventView::TurnEnd { .. } if own => self.open_turn = None,
            EventView::StepStart { step_id, .. } if own => {
                self.open_step = Some(self.ids.push(&step_id));
            }
            EventView::StepEnd { .. } if own => self.open_step = None,
            EventView::TurnStart { .. }
            | EventView::TurnEnd { .. }
            | EventView::StepStart { .. }
            | EventView::StepEnd { .. } => {}
            EventView::ToolStart {
                call_id,
                step_id,
                name,
            } => {
                // A call names the open step (a seeded one may not): its id
                // is kept once for the step and its calls.
                let step_id = match self.open_step {
                    Some(open) if self.ids.get(open) == step_id => open,
                    _ => self.ids.push(&step_id),
                };
                let call = CallEntry {
                    call_id: self.ids.push(&call_id),
                    seq,
                    step_id,
                    name: self.ids.push(&name),
                    own,
                    settled: false,
                };
                self.calls.insert(&self.ids, call);
                self.reviewed_seqs.push(seq);
            }
            EventView::ToolSettle { call_id } => {
                // A settle of a call already settled (a seeded prefix is
                // folded unchecked) changes nothing, so nothing is journaled:
                // a rollback must not unsettle what was settled before the mark.
                let index = self.calls.position(&self.ids, &call_id);
                if let Some(index) = index.filter(|&index| !self.calls.get(index).settled) {
                    let call = self.calls.get(index);
                    self.calls.set(
                        index,
                        CallEntry {
                            settled: true,
                            ..call
                        },
                    );
                    if let Some(journal) = &mut self.journal {
                        journal.settled.push(index);
                    }
                }
            }
            EventView::ApprovalPolicy { policy } if own => {
                self.approval_switch = Some((seq, policy));
            }
            EventView::SandboxMode { mode } if own => self.sandbox_switch = Some(mode),
            EventView::PermissionPreset { preset } if own => self.preset_switch = Some(preset),
            EventView::ApprovalPolicy { .. }
            | EventView::SandboxMode { .. }
            | EventView::PermissionPreset { .. } => {}
            EventView::ApprovalAsked { request_id, .. } => {
                let request_id = self.ids.push(&request_id);
                if own {
                    self.pending_approvals.insert(seq, request_id);
                }
                let request = RequestEntry {
                    request_id,
                    seq,
                    own,
                    decided: false,
                };
                self.requests.insert(&self.ids, request);
            }
            EventView::ApprovalDecided { request_id } => {
                // As for a settle: deciding again changes nothing and is not
                // journaled, or a rollback would reopen the request.
                let index = self.requests.position(&self.ids, &request_id);
                if let Some(index) = index.filter(|&index| !self.requests.get(index).decided) {
                    let request = RequestEntry {
                        decided: true,
                        ..self.requests.get(index)
                    };
                    self.requests.set(index, request);
                    self.pending_approvals.remove(&request.seq);
                    if let Some(journal) = &mut self.journal {
                        journal.decided.push(index);
                    }
                }
            }
            EventView::Checkpoint => self.last_checkpoint_seq = Some(seq),
            EventView::Message { source_kind } => {
                if may_be_shown(&source_kind) {
                    self.reviewed_seqs.push(seq);
                }
            }
            EventView::Seal(seal) => {
                if own {
                    self.last_own_seal_seq = Some(seq);
                }
                self.last_seal = Some(SealInfo {
                    seq,
                    through_seq: seal.through_seq,
                    chain: seal.chain,
                    key: seal.signature.as_ref().map(|signature| signature.key),
                    own,
                });
            }
            EventView::ChildCreated | EventView::Unknown => {}
        }
    }
}

/// What the checks of one record found, for the fold.
enum Checked<'v> {
    /// Every check held: the event is folded.
    Accepted(EventView<'v>),
    /// An own seal whose chain value does not hold: reported, and still
    /// folded as the last seal.
    FailedSeal(EventView<'v>, Violation),
    /// Anything else: reported, not folded.
    Refused(Violation),
}

impl PartialEq for SessionState {
    fn eq(&self, other: &Self) -> bool {
        let SessionState {
            header,
            seq,
            approval_switch,
            sandbox_switch,
            preset_switch,
            ids: _,
            open_turn: _,
            open_step: _,
            calls,
            requests,
            pending_approvals: _,
            last_own_request_header,
            latest_request_header_seq,
            last_checkpoint_seq,
            reviewed_seqs,
            violation_count,
            chain,
            last_seal,
            last_own_seal_seq,
            journal: _,
        } = self;
        let same_calls = calls.len() == other.calls.len()
            && calls.iter().all(|call| {
                let call_id = self.ids.get(call.call_id);
                self.call(call_id) == other.call(call_id)
            });
        let same_requests = requests.len() == other.requests.len()
            && requests.iter().all(|request| {
                let found = other
                    .requests
                    .find(&other.ids, self.ids.get(request.request_id));
                found.is_some_and(|found| {
                    (found.seq, found.own, found.decided)
                        == (request.seq, request.own, request.decided)
                })
            });
        let pending_seqs = self
            .pending_approvals
            .keys()
            .eq(other.pending_approvals.keys());
        *header == other.header
            && *seq == other.seq
            && *approval_switch == other.approval_switch
            && *sandbox_switch == other.sandbox_switch
            && *preset_switch == other.preset_switch
            && self.open_turn() == other.open_turn()
            && self.open_step() == other.open_step()
            && same_calls
            && same_requests
            && pending_seqs
            && self.pending_approvals() == other.pending_approvals()
            && *last_own_request_header == other.last_own_request_header
            && *latest_request_header_seq == other.latest_request_header_seq
            && *last_checkpoint_seq == other.last_checkpoint_seq
            && reviewed_seqs.iter().eq(other.reviewed_seqs.iter())
            && *violation_count == other.violation_count
            && *chain == other.chain
            && *last_seal == other.last_seal
            && *last_own_seal_seq == other.last_own_seal_seq
    }
}

impl Eq for SessionState {}

impl Ids {
    /// The ids a decoded snapshot holds: the text at `range` of `bytes`,
    /// each id proved UTF-8 as it is read ([`get`](Self::get)).
    pub(crate) fn frozen(bytes: Frozen, range: Range<usize>) -> Ids {
        Ids {
            frozen: Some((bytes, range)),
            added: String::new(),
        }
    }

    /// The bytes of the snapshot the ids were decoded from, if they were.
    fn snapshot_bytes(&self) -> Option<&crate::frozen::FrozenBytes> {
        self.frozen.as_ref().map(|(bytes, _)| &**bytes)
    }

    /// The bytes of the snapshot's ids.
    fn frozen_len(&self) -> usize {
        self.frozen.as_ref().map_or(0, |(_, range)| range.len())
    }

    /// The bytes at `start..end` of the snapshot's ids (`None` off them,
    /// or on a page of a snapshot read page by page that could not be
    /// read).
    pub(crate) fn frozen_get(&self, start: usize, end: usize) -> Option<&[u8]> {
        let (bytes, range) = self.frozen.as_ref()?;
        if start > end || end > range.len() {
            return None;
        }
        bytes.get(range.start + start..range.start + end)
    }

    /// The bytes of every id kept.
    pub(crate) fn len(&self) -> usize {
        self.frozen_len() + self.added.len()
    }

    /// Keeps `id`; where it is.
    fn push(&mut self, id: &str) -> IdSpan {
        let start = self.len();
        self.added.push_str(id);
        IdSpan {
            start,
            end: self.len(),
        }
    }

    /// The bytes of the id at `span`. A span of a snapshot's row that is
    /// not within the ids (which only a snapshot written to match its CRC
    /// can hold, read as [`SnapshotTrust::CrcMatched`]), or on a page that
    /// could not be read, reads as empty: a lookup never panics on one.
    ///
    /// [`SnapshotTrust::CrcMatched`]: crate::SnapshotTrust::CrcMatched
    pub(crate) fn bytes(&self, span: IdSpan) -> &[u8] {
        let frozen = self.frozen_len();
        let bytes = match span.start.checked_sub(frozen) {
            Some(start) => span
                .end
                .checked_sub(frozen)
                .and_then(|end| self.added.as_bytes().get(start..end)),
            None => self.frozen_get(span.start, span.end),
        };
        bytes.unwrap_or_default()
    }

    /// The id at `span` (empty for a span [`bytes`](Self::bytes) reads as
    /// empty, or one off a character boundary).
    pub(crate) fn get(&self, span: IdSpan) -> &str {
        let frozen = self.frozen_len();
        let id = match span.start.checked_sub(frozen) {
            Some(start) => span
                .end
                .checked_sub(frozen)
                .and_then(|end| self.added.get(start..end)),
            None => self
                .frozen_get(span.start, span.end)
                .and_then(|id| std::str::from_utf8(id).ok()),
        };
        id.unwrap_or_default()
    }

    /// Drops the ids kept after the first `len` bytes (never the
    /// snapshot's).
    fn truncate(&mut self, len: usize) {
        let frozen = self.frozen_len();
        self.added.truncate(len.saturating_sub(frozen));
    }
}

impl fmt::Debug for Ids {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Ids")
            .field("frozen", &self.frozen.as_ref().map(|(bytes, _)| bytes))
            .field("added", &self.added)
            .finish()
    }
}

impl Keyed for CallEntry {
    fn key(&self) -> IdSpan {
        self.call_id
    }

    fn from_row(row: &[u8], width: usize) -> Self {
        crate::state_codec::call_from_row(row, width)
    }
}

impl Keyed for RequestEntry {
    fn key(&self) -> IdSpan {
        self.request_id
    }

    fn from_row(row: &[u8], width: usize) -> Self {
        crate::state_codec::request_from_row(row, width)
    }
}

/// The bytes a row of a page that could not be read reads as: every id
/// empty, every seq 0 (a lookup misses it; the state tells the failure).
const UNREADABLE_ROW: [u8; 64] = [0; 64];

impl FrozenRows {
    /// The bytes of row `index`, one of the rows (zeros on a page that
    /// could not be read).
    fn row(&self, index: usize) -> &[u8] {
        let at = self.start + index * self.row;
        self.bytes
            .get(at..at + self.row)
            .unwrap_or(&UNREADABLE_ROW[..self.row])
    }
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable {
            frozen: None,
            changed: BTreeMap::new(),
            added: Vec::new(),
            table: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl<T> fmt::Debug for IdTable<T>
where
    T: Keyed + fmt::Debug,
{
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Keyed> IdTable<T> {
    fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// A table of a decoded snapshot's `rows`, whose ids are in strictly
    /// increasing order (the caller checked), and no other entry.
    pub(crate) fn frozen(rows: FrozenRows) -> Self {
        IdTable {
            frozen: Some(rows),
            ..IdTable::default()
        }
    }

    /// How many of the entries are the snapshot's rows.
    fn frozen_count(&self) -> usize {
        self.frozen.as_ref().map_or(0, |rows| rows.count)
    }

    /// How many entries the table holds.
    pub(crate) fn len(&self) -> usize {
        self.frozen_count() + self.added.len()
    }

    /// The entry at `index` (below [`len`](Self::len)).
    pub(crate) fn get(&self, index: usize) -> T {
        match &self.frozen {
            Some(rows) if index < rows.count => match self.changed.get(&index) {
                Some(changed) => *changed,
                None => T::from_row(rows.row(index), rows.width),
            },
            _ => self.added[index - self.frozen_count()],
        }
    }

    /// Changes the entry at `index` (below [`len`](Self::len)) to `entry`,
    /// of the same id.
    fn set(&mut self, index: usize, entry: T) {
        match index.checked_sub(self.frozen_count()) {
            Some(added) => self.added[added] = entry,
            None => {
                self.changed.insert(index, entry);
            }
        }
    }

    /// Every entry, in the order of their indexes.
    pub(crate) fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.len()).map(|index| self.get(index))
    }

    /// The index of the entry whose id is `id`.
    pub(crate) fn position(&self, ids: &Ids, id: &str) -> Option<usize> {
        if let Some(rows) = &self.frozen {
            let (mut low, mut high) = (0, rows.count);
            while low < high {
                let middle = low + (high - low) / 2;
                let key = T::from_row(rows.row(middle), rows.width).key();
                match ids.bytes(key).cmp(id.as_bytes()) {
                    std::cmp::Ordering::Less => low = middle + 1,
                    std::cmp::Ordering::Greater => high = middle,
                    std::cmp::Ordering::Equal => return Some(middle),
                }
            }
        }
        if self.table.is_empty() {
            return None;
        }
        let hash = self.hash(id);
        let frozen = self.frozen_count();
        let added = &self.added;
        let slot = self.table.find(hash, |slot| {
            slot.hash == hash && ids.bytes(added[slot.index - frozen].key()) == id.as_bytes()
        })?;
        Some(slot.index)
    }

    /// The entry whose id is `id`.
    fn find(&self, ids: &Ids, id: &str) -> Option<T> {
        self.position(ids, id).map(|index| self.get(index))
    }

    /// Every entry, in the order of their ids: the snapshot's rows merged
    /// with the others sorted (what a snapshot stores).
    pub(crate) fn in_id_order<'a>(&'a self, ids: &'a Ids) -> impl Iterator<Item = T> + 'a {
        let frozen = self.frozen_count();
        let mut added: Vec<usize> = (frozen..self.len()).collect();
        added.sort_unstable_by(|&a, &b| {
            ids.bytes(self.added[a - frozen].key())
                .cmp(ids.bytes(self.added[b - frozen].key()))
        });
        let mut rows = 0..frozen;
        let mut added = added.into_iter();
        let mut next_row = rows.next().map(|index| self.get(index));
        let mut next_added = added.next().map(|index| self.added[index - frozen]);
        std::iter::from_fn(move || match (next_row, next_added) {
            (Some(row), Some(entry)) => {
                if ids.bytes(row.key()) < ids.bytes(entry.key()) {
                    next_row = rows.next().map(|index| self.get(index));
                    Some(row)
                } else {
                    next_added = added.next().map(|index| self.added[index - frozen]);
                    Some(entry)
                }
            }
            (Some(row), None) => {
                next_row = rows.next().map(|index| self.get(index));
                Some(row)
            }
            (None, Some(entry)) => {
                next_added = added.next().map(|index| self.added[index - frozen]);
                Some(entry)
            }
            (None, None) => None,
        })
    }

    /// Drops every entry from index `len` on (never one of the snapshot's
    /// rows), and its slot.
    fn truncate(&mut self, ids: &Ids, len: usize) {
        let frozen = self.frozen_count();
        while self.len() > len.max(frozen) {
            let index = self.len() - 1;
            let hash = self.hash(ids.get(self.added[index - frozen].key()));
            if let Ok(slot) = self.table.find_entry(hash, |slot| slot.index == index) {
                slot.remove();
            }
            self.added.pop();
        }
    }

    /// Adds `entry`, whose id no entry has (the rules refused a repeat).
    pub(crate) fn insert(&mut self, ids: &Ids, entry: T) {
        let hash = self.hash(ids.get(entry.key()));
        let slot = IndexSlot {
            hash,
            index: self.len(),
        };
        self.table.insert_unique(hash, slot, |slot| slot.hash);
        self.added.push(entry);
    }
}

impl Seqs {
    /// The `count` seqs of a decoded snapshot, of `width` bytes each (4
    /// or 8) from byte `start` of `bytes`, which increase (checked, or
    /// vouched for by a CRC).
    pub(crate) fn frozen(bytes: Frozen, start: usize, count: usize, width: usize) -> Seqs {
        Seqs {
            frozen: Some(FrozenSeqs {
                bytes,
                start,
                count,
                width,
            }),
            added: Vec::new(),
        }
    }

    fn frozen_count(&self) -> usize {
        self.frozen.as_ref().map_or(0, |frozen| frozen.count)
    }

    pub(crate) fn len(&self) -> usize {
        self.frozen_count() + self.added.len()
    }

    /// The seq at `index` (below [`len`](Self::len)).
    fn get(&self, index: usize) -> u64 {
        match &self.frozen {
            Some(frozen) if index < frozen.count => {
                let at = frozen.start + index * frozen.width;
                frozen.bytes.get(at..at + frozen.width).map_or(0, |bytes| {
                    crate::state_codec::le_number(bytes, 0, frozen.width)
                })
            }
            _ => self.added[index - self.frozen_count()],
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|index| self.get(index))
    }

    /// Whether `seq` is one of them (a binary search).
    fn contains(&self, seq: u64) -> bool {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            match self.get(middle).cmp(&seq) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    fn push(&mut self, seq: u64) {
        self.added.push(seq);
    }

    /// Drops the seqs after the first `len` (never the snapshot's).
    fn truncate(&mut self, len: usize) {
        self.added.truncate(len.saturating_sub(self.frozen_count()));
    }
}

impl fmt::Debug for Seqs {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_list().entries(self.iter()).finish()
    }
}

/// `what` (named only when it is an error) must name `open`, the open
/// `kind` (turn or step).
fn names_open(
    kind: &str,
    open: Option<&str>,
    what: impl Fn() -> String,
    named: &str,
) -> Result<(), String> {
    match open {
        None => Err(format!(
            "{} names {kind} {named:?} but no {kind} is open",
            what()
        )),
        Some(open) if open != named => Err(format!(
            "{} names {kind} {named:?} but the open {kind} is {open:?}",
            what()
        )),
        Some(_) => Ok(()),
    }
}
#[cfg(test)]
pub(crate) mod tests {
    use expect_test::{expect, Expect};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::test_log::{projection_json, Log};
    use crate::ViolationKind;

    /// Folds `log` and compares its violations, one a line, with `expect`.
    fn check(log: Log, expect: Expect) {
        let (_, violations) = log.fold();
        let lines: Vec<String> = violations
            .iter()
            .map(|violation| format!("{violation} [{}]", violation.kind))
            .collect();
        expect.assert_eq(&lines.join("\n"));
    }

    /// A parent whose log ends inside an open turn, step, call and ask.
    fn parent_mid_step() -> Log {
        Log::root("parent")
            .turn_start("t1")
            .step_start("s1", "t1")
            .tool_start("c1", "s1")
            .ask("r1", "t1")
    }

    #[test]
    fn a_full_turn_with_a_step_a_call_and_an_approval_is_accepted() {
        check(
            Log::root("s")
                .turn_start("t1")
                .step_start("s1", "t1")
                .ask("r1", "t1")
                .decide("r1")
                .tool_start("c1", "s1")
                .tool_settle("c1")
                .step_end("s1")
                .step_start("s2", "t1")
                .step_end("s2")
                .turn_end("t1")
                .turn_start("t2"),
            expect![[""]],
        );
    }

    #[test]
    fn at_most_one_turn_is_open() {
        check(
            Log::root("s").turn_start("t1").turn_start("t2"),
            expect![[
                r#"seq 2 (turn/start): turn "t2" cannot start while turn "t1" is open; end it first [rule]"#
            ]],
        );
    }

    #[test]
    fn turn_end_names_the_open_turn_and_waits_for_its_step() {
        check(
            Log::root("s")
                .turn_end("t0")
                .turn_start("t1")
                .turn_end("t9")
                .step_start("s1", "t1")
                .turn_end("t1"),
            expect![[r#"
                seq 1 (turn/end): turn/end names turn "t0" but no turn is open [rule]
                seq 3 (turn/end): turn/end names turn "t9" but the open turn is "t1" [rule]
                seq 5 (turn/end): turn "t1" cannot end while step "s1" is open; end the step first [rule]"#]],
        );
    }

    #[test]
    fn step_start_needs_an_open_turn_with_that_id_and_no_open_step() {
        check(
            Log::root("s")
                .step_start("s0", "t1")
                .turn_start("t1")
                .step_start("s1", "t9")
                .step_start("s1", "t1")
                .step_start("s2", "t1"),
            expect![[r#"
                seq 1 (step/start): step "s0" names turn "t1" but no turn is open [rule]
                seq 3 (step/start): step "s1" names turn "t9" but the open turn is "t1" [rule]
                seq 5 (step/start): step "s2" cannot start while step "s1" is open; end it first [rule]"#]],
        );
    }

    #[test]
    fn step_end_names_the_open_step() {
        check(
            Log::root("s")
                .turn_start("t1")
                .step_end("s1")
                .step_start("s1", "t1")
                .step_end("s9")
                .step_end("s1"),
            expect![[r#"
                seq 2 (step/end): step/end names step "s1" but no step is open [rule]
                seq 4 (step/end): step/end names step "s9" but the open step is "s1" [rule]"#]],
        );
    }

    #[test]
    fn tool_start_needs_the_open_step_and_a_fresh_call_id() {
        check(
            Log::root("s")
                .turn_start("t1")
                .tool_start("c0", "s1")
                .step_start("s1", "t1")
                .tool_start("c1", "s9")
                .tool_start("c1", "s1")
                .tool_start("c1", "s1"),
            expect![[r#"
                seq 2 (tool/start): call "c0" names step "s1" but no step is open [rule]
                seq 4 (tool/start): call "c1" names step "s9" but the open step is "s1" [rule]
                seq 6 (tool/start): callId "c1" is already used by the tool/start at seq 5 [rule]"#]],
        );
    }

    #[test]
    fn tool_settle_needs_a_started_unsettled_call() {
        check(
            Log::root("s")
                .turn_start("t1")
                .step_start("s1", "t1")
                .tool_settle("c1")
                .tool_start("c1", "s1")
                .tool_settle("c1")
                .tool_settle("c1"),
            expect![[r#"
                seq 3 (tool/settle): call "c1" was never started; a settle needs an own started call [rule]
                seq 6 (tool/settle): call "c1" is already settled [rule]"#]],
        );
    }

    #[test]
    fn approvals_need_the_open_turn_a_fresh_id_and_one_decision() {
        check(
            Log::root("s")
                .ask("r0", "t1")
                .turn_start("t1")
                .ask("r1", "t9")
                .ask("r1", "t1")
                .ask("r1", "t1")
                .decide("r9")
                .decide("r1")
                .decide("r1"),
            expect![[r#"
                seq 1 (approval/asked): approval request "r0" names turn "t1" but no turn is open [rule]
                seq 3 (approval/asked): approval request "r1" names turn "t9" but the open turn is "t1" [rule]
                seq 5 (approval/asked): requestId "r1" is already used by the approval/asked at seq 4 [rule]
                seq 6 (approval/decided): approval request "r9" was never asked [rule]
                seq 8 (approval/decided): approval request "r1" is already decided [rule]"#]],
        );
    }

    #[test]
    fn the_seeded_turn_step_call_and_ask_are_not_the_childs() {
        let child = parent_mid_step().child("kid", None);
        let state = child.state();
        assert_eq!(state.open_turn(), None);
        assert_eq!(state.open_step(), None);
        assert_eq!(state.pending_approvals(), Vec::<&str>::new());
        assert_eq!(state.call("c1").map(|call| call.own), Some(false));
        check(
            child
                .tool_start("c2", "s1")
                .step_end("s1")
                .turn_end("t1")
                .tool_settle("c1")
                .decide("r1")
                .turn_start("t2")
                .step_start("s2", "t2")
                .tool_start("c1", "s2")
                .ask("r1", "t2"),
            expect![[r#"
                seq 5 (tool/start): call "c2" names step "s1" but no step is open [rule]
                seq 6 (step/end): step/end names step "s1" but no step is open [rule]
                seq 7 (turn/end): turn/end names turn "t1" but no turn is open [rule]
                seq 8 (tool/settle): call "c1" was started in the seeded prefix (seq 3) and is not this session's to settle [rule]
                seq 9 (approval/decided): approval request "r1" was asked in the seeded prefix (seq 4) and is not this session's to decide [rule]
                seq 12 (tool/start): callId "c1" is already used by the tool/start at seq 3 [rule]
                seq 13 (approval/asked): requestId "r1" is already used by the approval/asked at seq 4 [rule]"#]],
        );
    }

    #[test]
    fn seeded_events_are_held_to_shapes_and_unique_ids_but_not_to_turn_rules() {
        let mut log = Log::root("parent")
            .tool_start("c1", "nowhere")
            .tool_start("c1", "nowhere")
            .policy("sometimes");
        log.header.seed_length = 3;
        log.header.parent_session = Some(crate::test_log::id("grandparent"));
        check(
            log,
            expect![[r#"
                seq 2 (tool/start): callId "c1" is already used by the tool/start at seq 1 [rule]
                seq 3 (approval/policy): data.policy: "sometimes" is not a valid approval policy (expected ask | never) [vocabulary]"#]],
        );
    }

    #[test]
    fn a_rollback_keeps_what_was_settled_or_decided_before_the_mark() {
        // A seeded prefix is folded without the turn rules, so a call may be
        // settled twice and a request decided twice in it; the second time
        // changes nothing, and rolling it back must not undo the first.
        let mut log = Log::root("parent")
            .turn_start("t1")
            .step_start("s1", "t1")
            .tool_start("c1", "s1")
            .tool_settle("c1")
            .ask("r1", "t1")
            .decide("r1")
            .tool_settle("c1")
            .decide("r1");
        log.header.seed_length = 8;
        log.header.parent_session = Some(crate::test_log::id("grandparent"));
        let (before, violations) = crate::fold(log.header.clone(), &log.events[..6]);
        assert_eq!(violations, Vec::new());
        let mut state = before.clone();
        let mark = state.mark();
        for record in &log.events[6..] {
            assert_eq!(state.apply(record), Ok(()));
        }
        state.rollback(mark);
        assert_eq!(state, before);
        assert_eq!(state.pending_approvals(), Vec::<&str>::new());
    }

    #[test]
    fn values_outside_a_vocabulary_name_the_seq_and_field() {
        check(
            Log::root("s")
                .sandbox("root")
                .preset("yolo")
                .raw(
                    "message",
                    r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"video"}]}"#,
                )
                .raw("tool/settle", r#"{"callId":"c1","status":"done"}"#)
                .raw("approval/decided", r#"{"requestId":"r","outcome":"maybe"}"#)
                .raw(
                    "child/created",
                    r#"{"childSessionId":"k","mode":"forever"}"#,
                ),
            expect![[r#"
                seq 1 (sandbox/mode): data.mode: "root" is not a valid sandbox mode (expected read-only | workspace-write | danger-full-access) [vocabulary]
                seq 2 (permission/preset): data.preset: "yolo" is not a valid preset (expected read-only | workspace-write | full-access | auto) [vocabulary]
                seq 3 (message): data.content[0].type: unknown variant `video`, expected one of `text`, `image`, `attachment` [vocabulary]
                seq 4 (tool/settle): data.status: "done" is not a valid settle status (expected ok | error | cancelled) [vocabulary]
                seq 5 (approval/decided): data.outcome: "maybe" is not a valid approval outcome (expected allowed-once | rejected | cancelled | unavailable) [vocabulary]
                seq 6 (child/created): data.mode: "forever" is not a valid child mode (expected one-shot | continuable) [vocabulary]"#]],
        );
    }

    #[test]
    fn broken_shapes_are_shape_violations_and_unknown_types_are_kept() {
        check(
            Log::root("s")
                .raw("turn/start", "[]")
                .raw("turn/start", "{}")
                .raw("turn/start", r#"{"turnId":7}"#)
                .raw("approval/policy", r#"{"policy":null}"#)
                .raw("future/thing", "[1,2]"),
            expect![[r#"
                seq 1 (turn/start): data: must be a JSON object [shape]
                seq 2 (turn/start): data: missing field `turnId` [shape]
                seq 3 (turn/start): data.turnId: invalid type: integer `7`, expected a string [shape]
                seq 4 (approval/policy): data.policy: invalid type: null, expected a string [shape]"#]],
        );
    }

    #[test]
    fn a_record_out_of_seq_order_is_refused() {
        let log = Log::root("s").turn_start("t1");
        let mut state = SessionState::new(log.header.clone());
        let late = log.events[0].with_seq(2, None);
        let refused = state.apply(&late);
        assert_eq!(
            refused.map_err(|violation| violation.to_string()),
            Err("seq 2 (turn/start): expected seq 1, found seq 2".to_owned())
        );
        assert_eq!(state.seq(), 1);
        assert_eq!(state.open_turn(), None);
    }

    #[test]
    fn a_refused_event_has_no_effect_but_the_seq_advances() {
        let (state, violations) = Log::root("s")
            .turn_start("t1")
            .turn_start("t2")
            .policy("sometimes")
            .fold();
        assert_eq!(violations.len(), 2);
        assert_eq!(violations[1].kind, ViolationKind::Vocabulary);
        assert_eq!(state.seq(), 3);
        assert_eq!(state.open_turn(), Some("t1"));
        assert_eq!(state.approval_override(), None);
        assert_eq!(state.violation_count(), 2);
    }

    #[test]
    fn check_never_changes_the_state() {
        let log = parent_mid_step()
            .tool_settle("c1")
            .tool_settle("c1")
            .decide("r1")
            .policy("never")
            .checkpoint(3);
        let mut state = SessionState::new(log.header.clone());
        for record in &log.events {
            let before = state.clone();
            let _ = state.check(record);
            assert_eq!(state, before, "check changed the state at {record:?}");
            let _ = state.apply(record);
        }
    }

    #[test]
    fn header_vocabulary_errors_are_seq_0_violations() {
        let error = sessionlog_schema::HeaderVocabularyError {
            field: "approvalPolicy",
            value: "sometimes".to_owned(),
            what: "approval policy",
            expected: "ask | never".to_owned(),
        };
        assert_eq!(
            Violation::from(&error).to_string(),
            r#"seq 0 (header): approvalPolicy: "sometimes" is not a valid approval policy (expected ask | never)"#
        );
    }

    /// One event of a small alphabet, valid or not, so that random logs hit
    /// every rule both ways.
    fn arbitrary_event() -> impl Strategy<Value = (String, String)> {
        let turn = prop::sample::select(vec!["t1", "t2"]);
        let step = prop::sample::select(vec!["s1", "s2"]);
        let call = prop::sample::select(vec!["c1", "c2", "c3"]);
        let request = prop::sample::select(vec!["r1", "r2", "r3"]);
        let policy = prop::sample::select(vec!["ask", "never", "sometimes"]);
        let mode = prop::sample::select(vec!["read-only", "workspace-write", "danger-full-access"]);
        let preset =
            prop::sample::select(vec!["read-only", "workspace-write", "full-access", "auto"]);
        let kind = prop::sample::select(vec!["user", "agent-message", "context"]);
        let event = |t: &str, data: serde_json::Value| (t.to_owned(), data.to_string());
        prop_oneof![
            turn.clone()
                .prop_map(move |t| event("turn/start", json!({"turnId": t}))),
            turn.clone()
                .prop_map(move |t| event("turn/end", json!({"turnId": t}))),
            (step.clone(), turn.clone())
                .prop_map(move |(s, t)| event("step/start", json!({"stepId": s, "turnId": t}))),
            step.clone()
                .prop_map(move |s| event("step/end", json!({"stepId": s}))),
            (call.clone(), step).prop_map(move |(c, s)| event(
                "tool/start",
                json!({"callId": c, "stepId": s, "name": "n", "arguments": {}})
            )),
            call.prop_map(move |c| event("tool/settle", json!({"callId": c, "status": "ok"}))),
            (request.clone(), turn).prop_map(move |(r, t)| event(
                "approval/asked",
                json!({"requestId": r, "turnId": t, "tool": "n"})
            )),
            request.prop_map(move |r| event(
                "approval/decided",
                json!({"requestId": r, "outcome": "rejected"})
            )),
            policy
                .clone()
                .prop_map(move |p| event("approval/policy", json!({"policy": p}))),
            mode.prop_map(move |m| event("sandbox/mode", json!({"mode": m}))),
            preset.prop_map(move |p| event("permission/preset", json!({"preset": p}))),
            policy.prop_map(move |p| event(
                "request/header",
                json!({"provider": "p", "model": "m", "approvalPolicy": p,
                       "sandboxMode": "read-only", "tools": []})
            )),
            kind.prop_map(move |k| event(
                "message",
                json!({"role": "user", "source": {"kind": k, "senderSessionId": "parent"},
                       "content": []})
            )),
            (0u64..5)
                .prop_map(move |n| event("checkpoint", json!({"summary": "s", "throughSeq": n}))),
            Just(("future/kind".to_owned(), "1".to_owned())),
        ]
    }

    pub(crate) fn arbitrary_log() -> impl Strategy<Value = Log> {
        (prop::collection::vec(arbitrary_event(), 0..40), 0usize..8).prop_map(|(events, seed)| {
            let mut log = Log::root("s");
            for (event_type, data) in events {
                log = log.raw(&event_type, &data);
            }
            if seed > 0 {
                log.header.seed_length = seed.min(log.events.len()) as u64;
                log.header.parent_session = Some(crate::test_log::id("parent"));
                log.header.approval_policy = Some(ApprovalPolicy::Never);
            }
            log
        })
    }

    proptest! {
        #[test]
        fn folding_one_event_at_a_time_equals_folding_all_and_every_prefix(log in arbitrary_log()) {
            let defaults = [
                Defaults::default(),
                Defaults { approval: ApprovalPolicy::Never, sandbox: SandboxMode::DangerFullAccess },
            ];
            let (all_at_once, all_violations) = log.fold();
            let mut incremental = SessionState::new(log.header.clone());
            let mut incremental_violations = Vec::new();
            for (applied, record) in log.events.iter().enumerate() {
                let before = incremental.clone();
                let checked = incremental.check(record);
                prop_assert_eq!(&incremental, &before);
                let result = incremental.apply(record);
                prop_assert_eq!(checked.is_ok(), result.is_ok());
                if let Err(violation) = result {
                    incremental_violations.push(violation);
                }
                let (as_of, as_of_violations) =
                    crate::fold(log.header.clone(), log.events.iter().take(applied + 1));
                prop_assert_eq!(&as_of_violations, &incremental_violations);
                for defaults in &defaults {
                    prop_assert_eq!(
                        projection_json(&as_of, defaults),
                        projection_json(&incremental, defaults)
                    );
                }
            }
            prop_assert_eq!(&all_violations, &incremental_violations);
            prop_assert_eq!(&all_at_once, &incremental);
            prop_assert_eq!(all_at_once.seq(), log.events.len() as u64);
        }

        #[test]
        fn a_batch_rolled_back_at_any_point_leaves_the_state_as_it_was(
            log in arbitrary_log(),
            split in 0usize..40,
            stop in 0usize..40,
        ) {
            // Fold a prefix, then a "batch" of the next events up to `stop`
            // (some break rules, as a refused batch does), and roll it back.
            let split = split.min(log.events.len());
            let (prefix, rest) = log.events.split_at(split);
            let (mut state, _) = crate::fold(log.header.clone(), prefix);
            let before = state.clone();
            let mark = state.mark();
            for record in rest.iter().take(stop) {
                let _ = state.apply(record);
            }
            state.rollback(mark);
            prop_assert_eq!(&state, &before);
            prop_assert_eq!(
                projection_json(&state, &Defaults::default()),
                projection_json(&before, &Defaults::default())
            );
            // And it folds the rest exactly as the untouched copy does.
            let mut untouched = before;
            for record in rest {
                let ours = state.apply(record);
                let theirs = untouched.apply(record);
                prop_assert_eq!(ours, theirs);
                prop_assert_eq!(&state, &untouched);
            }
        }

        #[test]
        fn a_released_mark_keeps_the_batch(log in arbitrary_log(), split in 0usize..40) {
            let split = split.min(log.events.len());
            let (prefix, rest) = log.events.split_at(split);
            let (mut state, _) = crate::fold(log.header.clone(), prefix);
            let mark = state.mark();
            for record in rest {
                let _ = state.apply(record);
            }
            state.release(mark);
            let (whole, _) = log.fold();
            prop_assert_eq!(&state, &whole);
        }

        #[test]
        fn folding_views_decoded_with_each_line_equals_folding_records(log in arbitrary_log()) {
            let (folded, violations) = log.fold();
            let mut viewed = SessionState::new(log.header.clone());
            let mut viewed_violations = Vec::new();
            for record in &log.events {
                let line = record.encode(&log.header.id);
                let line = line.trim_end_matches('\n').as_bytes();
                let decoded = sessionlog_schema::decode_event_viewed(&log.header.id, line);
                let decoded = decoded.map_err(|error| TestCaseError::fail(error.to_string()))?;
                prop_assert_eq!(&decoded.record, record);
                if let Err(violation) = viewed.apply_viewed(&decoded.record, decoded.view) {
                    viewed_violations.push(violation);
                }
            }
            prop_assert_eq!(&viewed_violations, &violations);
            prop_assert_eq!(&viewed, &folded);
            prop_assert_eq!(
                projection_json(&viewed, &Defaults::default()),
                projection_json(&folded, &Defaults::default())
            );
        }
    }
}
