//! `SessionWriter`: the one writer of a session. It validates every event
//! against the rules of the format (through the projections' `SessionState`)
//! before anything is written, hands records to its backend's `LogSink`, and
//! acknowledges them only once the sink has made them durable.
//!
//! A failed write or sync poisons the writer: every later append is refused
//! until the session is reopened, and so re-verified.
//!
//! The writer's state keeps the session's running chain value, so a seal
//! ([`SessionWriter::seal`], or one after every `turn/end` with
//! [`WriterOptions::seal_turns`]) costs one hash per record and one
//! signature per seal. A writer that resumed from a state snapshot reads
//! the log's bodies once, before its first seal, to check the chain it took
//! from the snapshot ([`SessionWriter::prove_chain`]).

use std::fmt;
use std::path::{Path, PathBuf};

use sessionlog_projections::{
    build_review_request_from_fragments, preset_switch, Defaults, PendingAction, ReviewError,
    ReviewErrorCode, ReviewFragments, SessionState,
};
use sessionlog_schema::{
    compact_json, ApprovalPolicy, ChainValue, EventData, EventRecord, EventType, Preset, Seal,
    SealPublicKey, SealSecretKey, SessionHeader, SessionId, MAX_BATCH_RECORDS, MAX_RECORD_BYTES,
};

use crate::{state_snapshot, StoreError};

/// When an append counts as acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// An append returns only after its bytes are on stable storage
    /// (fdatasync; SQLite `synchronous=FULL`). Survives `kill -9` and power loss.
    #[default]
    Fsync,
    /// No fsync: an append returns once the bytes are handed to the OS. A
    /// process crash keeps them, a power loss may not. For tests and bulk
    /// import only.
    Buffered,
}

/// Whether a writer seals every turn by itself.
// One value per open writer: its size does not matter, and boxing the key
// would only make every caller write `Box::new`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SealTurns {
    /// No seal but the ones asked for with [`SessionWriter::seal`].
    #[default]
    Off,
    /// An unsigned seal after every `turn/end`.
    Unsigned,
    /// A seal signed by this key after every `turn/end`.
    Signed(SealSecretKey),
}

/// How to open a writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// See [`Durability`].
    pub durability: Durability,
    /// Keep every event in memory, with the request fragments each shown
    /// event contributes (for the Auto-review request of an open session:
    /// about twice the bytes of the calls and shown messages on top of the
    /// events). Off for plain appenders that never build requests: such a
    /// writer opens from the session's state snapshot and reads only the
    /// events after it (docs/FORMAT.md, "State snapshots").
    pub keep_snapshot: bool,
    /// Append a seal (signed when given a key) right after every
    /// `turn/end`, written and synced together with it.
    pub seal_turns: SealTurns,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            durability: Durability::Fsync,
            keep_snapshot: true,
            seal_turns: SealTurns::Off,
        }
    }
}

/// An event to append: its type, its `data` as JSON text, and optionally its
/// time (now when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The event type, e.g. `turn/start`.
    pub event_type: String,
    /// `data` as JSON text (compacted before it is written).
    pub data: String,
    /// Unix milliseconds; the current time when `None`.
    pub ts: Option<u64>,
}

/// A seq whose event is durable. Only a writer's sync makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AcknowledgedSeq(pub(crate) u64);

impl AcknowledgedSeq {
    /// The seq.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// Where a writer's records go: a JSONL file or SQLite rows.
pub(crate) trait LogSink: Send + fmt::Debug {
    /// Writes `records` (all of them or, on error, possibly a torn part).
    /// They need not be durable yet.
    fn write(&mut self, id: &SessionId, records: &[EventRecord]) -> Result<(), StoreError>;
    /// Makes everything written so far durable.
    fn sync(&mut self, durability: Durability) -> Result<(), StoreError>;
    /// Keeps `state`, the fold of everything synced so far, as the
    /// session's state snapshot (replacing the one before); returns its
    /// size in bytes. Called off the append's acknowledgement, rarely; a
    /// failure is the snapshot's alone (see `state_snapshot`).
    fn save_snapshot(&mut self, state: &SessionState) -> Result<usize, StoreError>;
    /// The fold, from the log's start and without a snapshot page by page,
    /// of every record written so far (synced or not): for a writer whose
    /// state reads a snapshot page by page and met a page that failed. Only
    /// the JSONL and SQLite sinks' writers read one so; PostgreSQL's keeps
    /// this refusal, which no writer of its reaches.
    fn refold(&mut self) -> Result<SessionState, StoreError> {
        Err(StoreError::InvalidEvent(
            "this store's writers read no snapshot page by page".to_owned(),
        ))
    }
    /// The hash chain through every record written so far (synced or
    /// not), run over the bodies the log holds from its header on, never
    /// taken from a state snapshot.
    fn chain_of_log(&mut self) -> Result<ChainValue, StoreError>;
    /// The hash chain through every record written so far, the last at
    /// seq `through`, run over the bodies the log holds from the record at
    /// `seq` on, from the chain `before` gives for that record (the chain
    /// through the record before it, which a seal signed by the writer's
    /// own key vouches for: [`chain_since`]); `None` when `before` gives
    /// none or the log cannot be read from there alone, and the caller
    /// reads it whole ([`LogSink::chain_of_log`]).
    fn chain_of_log_since(
        &mut self,
        _seq: u64,
        _through: u64,
        _before: &dyn Fn(&EventRecord) -> Option<ChainValue>,
    ) -> Result<Option<ChainValue>, StoreError> {
        Ok(None)
    }
}

/// The single writer of one session. See the module docs.
#[derive(Debug)]
pub struct SessionWriter {
    path: PathBuf,
    sink: Box<dyn LogSink>,
    options: WriterOptions,
    state: SessionState,
    events: Option<Vec<EventRecord>>,
    /// What each event of `events` contributes to a review request, kept in
    /// step with `state`.
    review_fragments: Option<ReviewFragments>,
    written_seq: u64,
    acknowledged_seq: u64,
    poisoned: Option<String>,
    /// The seq of the last state snapshot taken or resumed from (0: none).
    snapshot_seq: u64,
    /// How many events after `snapshot_seq` the next one is due.
    snapshot_interval: u64,
    /// Whether the state's hash chain is known to be the log's own: run
    /// over the log's bodies when the writer opened (a fold from the
    /// header), or checked against them since ([`Self::prove_chain`]).
    /// A chain resumed from a state snapshot is not, until checked.
    chain_proven: bool,
}

impl NewEvent {
    /// An event with `data` given as JSON text and the current time.
    pub fn new(event_type: impl Into<String>, data: impl Into<String>) -> NewEvent {
        NewEvent {
            event_type: event_type.into(),
            data: data.into(),
            ts: None,
        }
    }

    /// An event from typed `data` (see [`EventData`]): its type and its
    /// JSON come from the value, so no caller formats JSON by hand.
    ///
    /// ```
    /// use sessionlog_schema::{StepStart, TurnStart};
    /// use sessionlog_store::NewEvent;
    ///
    /// let event = NewEvent::of(&StepStart::new("s1", "t1"));
    /// assert_eq!(event.event_type, "step/start");
    /// assert_eq!(event.data, r#"{"stepId":"s1","turnId":"t1"}"#);
    /// let event: NewEvent = TurnStart::new("t1").into();
    /// assert_eq!(event, NewEvent::new("turn/start", r#"{"turnId":"t1"}"#));
    /// ```
    pub fn of<D: EventData>(data: &D) -> NewEvent {
        NewEvent::new(D::EVENT_TYPE.as_str(), data.to_json())
    }

    /// The same event at time `ts` (unix milliseconds).
    pub fn at(self, ts: u64) -> NewEvent {
        NewEvent {
            ts: Some(ts),
            ..self
        }
    }
}

impl<D: EventData> From<D> for NewEvent {
    fn from(data: D) -> NewEvent {
        NewEvent::of(&data)
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        self.snapshot_at_close();
    }
}

impl SessionWriter {
    pub(crate) fn new(
        path: PathBuf,
        sink: Box<dyn LogSink>,
        options: WriterOptions,
        state: SessionState,
        events: Option<Vec<EventRecord>>,
    ) -> SessionWriter {
        let seq = state.seq();
        let review_fragments = events
            .as_deref()
            .map(|events| ReviewFragments::of(&state, events));
        SessionWriter {
            path,
            sink,
            options,
            state,
            events,
            review_fragments,
            written_seq: seq,
            acknowledged_seq: seq,
            poisoned: None,
            snapshot_seq: 0,
            snapshot_interval: state_snapshot::SNAPSHOT_EVERY_EVENTS,
            chain_proven: true,
        }
    }

    /// The same writer, whose state was resumed from `resumed` (the
    /// snapshot's anchor and size in bytes), if from one: the next is due
    /// an interval after it.
    pub(crate) fn resumed_from(
        mut self,
        resumed: Option<(state_snapshot::SnapshotAnchor, usize)>,
    ) -> Self {
        if let Some((anchor, bytes)) = resumed {
            self.snapshot_seq = anchor.seq;
            self.snapshot_interval = state_snapshot::snapshot_interval(bytes);
            self.chain_proven = false;
        }
        self
    }

    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.state.header().id
    }

    /// The session's header.
    pub fn header(&self) -> &SessionHeader {
        self.state.header()
    }

    /// Where the session lives (its log file or database).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The projections, current through the last written event.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// Every event, when the writer was opened with `keep_snapshot`.
    pub fn events(&self) -> Option<&[EventRecord]> {
        self.events.as_deref()
    }

    /// The Auto reviewer's request for `pending` (docs/EVENTS.md, "The Auto reviewer"), built from the
    /// snapshot and the validated state this writer holds: the log is not
    /// read again, and each shown event's fragment was rendered once, when
    /// the writer folded it. Fails closed like the request builder; a writer opened
    /// without `keep_snapshot` holds no snapshot and refuses with
    /// `INVALID_LOG`, as does a poisoned one (a failed write may have left
    /// its state past the log).
    pub fn review_request(
        &self,
        pending: &PendingAction,
        max_bytes: usize,
    ) -> Result<String, ReviewError> {
        // A failed write left the state past what the log holds: the
        // request would show the reviewer an event that is not history.
        if let Some(cause) = &self.poisoned {
            return Err(ReviewError::new(
                ReviewErrorCode::InvalidLog,
                format!(
                    "the writer of {} failed a write ({cause}) and may hold events the log does not; \
                     reopen the session to build a review request from what the log holds",
                    crate::store_display(&self.path)
                ),
            ));
        }
        let (Some(events), Some(fragments)) = (&self.events, &self.review_fragments) else {
            return Err(ReviewError::new(
                ReviewErrorCode::InvalidLog,
                "this writer holds no snapshot (it was opened without keep_snapshot); \
                 reopen it with WriterOptions::keep_snapshot to build review requests",
            ));
        };
        build_review_request_from_fragments(&self.state, fragments, events, pending, max_bytes)
    }

    /// The seq the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.written_seq + 1
    }

    /// The last acknowledged (durable) seq.
    pub fn acknowledged_seq(&self) -> u64 {
        self.acknowledged_seq
    }

    /// Whether a failed write or sync poisoned this writer: it refuses
    /// every later append until the log is reopened.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Appends one event durably: validated, written, synced. Returns the
    /// event's seq (a seal the writer appends after a `turn/end` by
    /// [`WriterOptions::seal_turns`] takes the next one, and is synced
    /// with it).
    pub fn append(
        &mut self,
        event: NewEvent,
        expected_seq: Option<u64>,
    ) -> Result<AcknowledgedSeq, StoreError> {
        let seq = self.stage(event, expected_seq)?;
        self.sync()?;
        Ok(AcknowledgedSeq(seq))
    }

    /// Appends a seal durably: `{throughSeq, chain}` of every record written
    /// so far, signed by `key` when one is given. Returns the seal's seq.
    pub fn seal(
        &mut self,
        key: Option<&SealSecretKey>,
        expected_seq: Option<u64>,
    ) -> Result<AcknowledgedSeq, StoreError> {
        self.check_usable(expected_seq)?;
        let seq = self.stage_seal(key)?;
        self.sync()?;
        Ok(AcknowledgedSeq(seq))
    }

    /// Appends events as one atomic batch: all are validated first (nothing
    /// is written if one breaks a rule), then written together, then synced.
    /// After a crash either all of them are in the log or none.
    pub fn append_batch(
        &mut self,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        let seqs = self.stage_batch(events, expected_seq)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        self.sync()?;
        Ok(seqs.into_iter().map(AcknowledgedSeq).collect())
    }

    /// Validates and writes events as one atomic batch without syncing (see
    /// [`append_batch`](Self::append_batch)); returns their seqs. They are
    /// acknowledged by the next [`sync`](Self::sync): batches staged
    /// together share one fsync.
    pub fn stage_batch(
        &mut self,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<u64>, StoreError> {
        self.run_trusted(events, |writer, events| {
            writer.stage_batch_once(events, expected_seq)
        })
    }

    /// [`stage_batch`](Self::stage_batch), once.
    fn stage_batch_once(
        &mut self,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<u64>, StoreError> {
        if events.len() == 1 {
            // No batch member and nothing to roll back: checked, then
            // folded once written.
            let event = events
                .into_iter()
                .next()
                .map(|event| self.stage_once(event, expected_seq));
            return event.into_iter().collect();
        }
        self.check_usable(expected_seq)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let count = events.len() as u64;
        if count > MAX_BATCH_RECORDS {
            return Err(self.naming_the_log(StoreError::InvalidEvent(format!(
                "a batch of {count} events is above the limit of {MAX_BATCH_RECORDS} records; \
                 nothing was written: append it as several batches"
            ))));
        }
        let batch = (count >= 2).then_some(count);
        // Before the batch is folded: the chain checked is the log's.
        self.prove_chain_before(&events)?;
        // The batch is folded into the state itself, under a mark: a
        // refusal or a failed write rolls back what it changed, at the cost
        // of what it changed, never of a copy of the whole state.
        let mark = self.state.mark();
        match self.fold_and_write_batch(events, batch) {
            Ok(records) => {
                self.state.release(mark);
                let seqs = records
                    .iter()
                    .take(count as usize)
                    .map(EventRecord::seq)
                    .collect();
                self.absorb_fragments(&records);
                Ok(seqs)
            }
            Err(error) => {
                self.state.rollback(mark);
                Err(error)
            }
        }
    }

    /// Checks `events` as [`append_batch`](Self::append_batch) would check
    /// them at the next seq (each record's size and values, every rule)
    /// without writing anything: the state is left as it was. For a caller
    /// that must know a batch can be recorded before it acts (the reviewer
    /// is asked, at a cost, only for a call whose verdict can be written).
    /// The writer's own state (poisoned, the expected seq) is
    /// [`append_batch`](Self::append_batch)'s to tell.
    pub(crate) fn check_batch(&mut self, events: &[NewEvent]) -> Result<(), StoreError> {
        self.prove_chain_before(events)?;
        let checked = self.check_batch_once(events);
        if !self.state.snapshot_unreadable() {
            return checked;
        }
        // A verdict a failed snapshot page may have swayed, either way.
        self.refold()?;
        self.check_batch_once(events)
    }

    /// [`check_batch`](Self::check_batch), once.
    fn check_batch_once(&mut self, events: &[NewEvent]) -> Result<(), StoreError> {
        let batch = (events.len() >= 2).then_some(events.len() as u64);
        let mark = self.state.mark();
        let checked = self.fold_batch(events.to_vec(), batch).map(drop);
        self.state.rollback(mark);
        checked
    }

    /// `op` run on `input`; run again on a copy of it when
    /// [`trusted`](Self::trusted) says to (only a state that reads a
    /// snapshot page by page may, so only such a state pays for the copy).
    fn run_trusted<I: Clone, T>(
        &mut self,
        input: I,
        mut op: impl FnMut(&mut Self, I) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let Some(again) = self.state.reads_snapshot_pages().then(|| input.clone()) else {
            return op(self, input);
        };
        let before = self.written_seq;
        let result = op(self, input);
        match self.trusted(result, before) {
            Some(result) => result,
            None => op(self, again),
        }
    }

    /// `result`, of an operation begun when `written_before` was the last
    /// seq written, once the state is one to trust again. When a page of
    /// the snapshot the state reads failed meanwhile, a lookup landing
    /// there missed, so the operation's verdict may be wrong (and
    /// [`write`](Self::write) refused to write on it): the log is folded
    /// again, and `None` says to run the operation once more, when it
    /// failed having written nothing. A fold that fails poisons the
    /// writer.
    fn trusted<T>(
        &mut self,
        result: Result<T, StoreError>,
        written_before: u64,
    ) -> Option<Result<T, StoreError>> {
        if !self.state.snapshot_unreadable() {
            return Some(result);
        }
        if let Err(error) = self.refold() {
            // The first failure stays the writer's cause.
            self.poisoned.get_or_insert_with(|| error.to_string());
            return Some(result.and(Err(error)));
        }
        match result {
            Err(_) if self.written_seq == written_before => None,
            result => Some(result),
        }
    }

    /// Replaces the state, which read a snapshot page that failed, by
    /// the fold of the log from its start.
    fn refold(&mut self) -> Result<(), StoreError> {
        tracing::warn!(
            path = %self.path.display(),
            "a page of the state snapshot of {} could not be read or does not match its CRC; \
             folding the whole log again",
            crate::store_display(&self.path)
        );
        let state = self.sink.refold()?;
        if state.seq() != self.written_seq {
            return Err(StoreError::io(
                "fold",
                &self.path,
                std::io::Error::other(format!(
                    "folded again, the log ends at seq {}, not at the {} written",
                    state.seq(),
                    self.written_seq
                )),
            ));
        }
        self.state = state;
        // A sink may fold again from the snapshot read whole.
        self.chain_proven = false;
        // The snapshot it read is damaged: the next acknowledgement
        // replaces it (as a writer that folded the whole log would), so
        // that the next open does not meet the same page.
        self.snapshot_seq = 0;
        Ok(())
    }

    /// The records of `events` at the next seqs (the first carrying
    /// `batch`), each built and folded into the state in turn; the first
    /// refused ends it, what it folded left for the caller's mark to roll
    /// back. Room is kept for the turn's seal.
    fn fold_batch(
        &mut self,
        events: Vec<NewEvent>,
        batch: Option<u64>,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut records = Vec::with_capacity(events.len() + 1);
        for (index, event) in events.into_iter().enumerate() {
            let seq = self.written_seq + 1 + index as u64;
            let record = self.build(seq, if index == 0 { batch } else { None }, event)?;
            self.state
                .apply(&record)
                .map_err(|violation| StoreError::Rule {
                    path: self.path.clone(),
                    violation: appended_seal_violation(violation),
                })?;
            records.push(record);
        }
        Ok(records)
    }

    /// Folds `events` into the state (under the caller's mark) and writes
    /// them, with the turn's seal when the batch ends a turn; returns the
    /// records written, the batch first.
    fn fold_and_write_batch(
        &mut self,
        events: Vec<NewEvent>,
        batch: Option<u64>,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut records = self.fold_batch(events, batch)?;
        // A batch that ends a turn is followed by the turn's seal, outside
        // the batch (its member counts the events) but in the same write.
        let turn_end = records.iter().rev().find(|record| closes_turn(record));
        let seal = match turn_end {
            Some(turn_end) => {
                turn_seal_record(&mut self.state, &self.options.seal_turns, turn_end.ts())?
            }
            None => None,
        };
        if let Some((seal, sealed)) = seal {
            records.push(seal);
            self.write(&records)?;
            if let Some(seal) = records.last() {
                self.state.apply_checked(seal, sealed);
            }
        } else {
            self.write(&records)?;
        }
        Ok(records)
    }

    /// Appends several batches that share one sync (group commit): each is
    /// validated and written as its own atomic batch, with its own expected
    /// seq, in the order given, then one sync acknowledges them all. One
    /// that is refused (a conflict, a rule) leaves the others alone. Returns
    /// each batch's outcome, in the order given. A failed sync poisons the
    /// writer: the batch it hit gets the failure itself, and every other
    /// batch it was to acknowledge an I/O error of its own: each was handed
    /// to the log before the sync, so each is in doubt as that failure is (a
    /// log file's bytes, a commit whose answer was lost: a reopened writer
    /// may find it whole). `Poisoned` is for a batch refused before it was
    /// handed to the log.
    ///
    /// ```
    /// use sessionlog_schema::{SessionHeader, SessionId, StepEnd, TurnStart};
    /// use sessionlog_store::{Durability, Store, StoreError, WriterOptions};
    ///
    /// let folder = tempfile::tempdir()?;
    /// let store = Store::create(&folder.path().join("sessions"))?;
    /// let id = SessionId::parse("a")?;
    /// store.create_session(&SessionHeader::root(id.clone(), 0, "/work".into()), &[], Durability::Fsync)?;
    /// let mut writer = store.open_writer(&id, WriterOptions::default())?;
    /// let outcomes = writer.append_group(vec![
    ///     (vec![TurnStart::new("t1").into()], Some(1)),
    ///     (vec![StepEnd::new("s9").into()], None), // breaks a rule: refused alone
    ///     (vec![TurnStart::new("t2").into()], Some(1)), // seq 1 is taken: a conflict
    /// ]);
    /// assert_eq!(outcomes[0].as_ref().map(|seqs| seqs[0].get()).ok(), Some(1));
    /// assert!(matches!(outcomes[1], Err(StoreError::Rule { .. })));
    /// assert!(matches!(outcomes[2], Err(StoreError::Conflict { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append_group(
        &mut self,
        batches: Vec<(Vec<NewEvent>, Option<u64>)>,
    ) -> Vec<Result<Vec<AcknowledgedSeq>, StoreError>> {
        let staged: Vec<_> = batches
            .into_iter()
            .map(|(events, expected_seq)| self.stage_batch(events, expected_seq))
            .collect();
        staged
            .into_iter()
            .map(|seqs| {
                let seqs = seqs?;
                match self.sync() {
                    Ok(_) => Ok(seqs.into_iter().map(AcknowledgedSeq).collect()),
                    // Handed to the log, then the writer was poisoned (by the
                    // sync of an earlier batch of the group, or the write of a
                    // later one) before this batch was acknowledged: in doubt,
                    // as the batch the failure hit is (bytes a log file holds,
                    // a commit whose answer was lost).
                    Err(StoreError::Poisoned { cause, .. }) => Err(self.in_doubt(&cause, &seqs)),
                    Err(error) => Err(error),
                }
            })
            .collect()
    }

    /// The failure of a batch (`seqs`) written, then left unacknowledged
    /// by the failure `cause` of its group: in doubt as the batch that
    /// failure hit is.
    fn in_doubt(&self, cause: &str, seqs: &[u64]) -> StoreError {
        let first = seqs.first().copied().unwrap_or_default();
        StoreError::io(
            "sync",
            &self.path,
            std::io::Error::other(format!(
                "the batch from seq {first} was handed to the log, but its group failed before \
                 it was acknowledged ({cause}): it may be in the log whole; reopen the session \
                 and read its next seq before appending it again"
            )),
        )
    }

    /// Switches the session's preset (the preset writer of docs/EVENTS.md, "Presets and children"): appends,
    /// as one atomic batch, the `sandbox/mode` and `approval/policy` events
    /// the preset needs and the `permission/preset` event. `auto` needs the
    /// approval policy it runs under (`auto_approval`); the other presets
    /// refuse one.
    pub fn switch_preset(
        &mut self,
        preset: Preset,
        auto_approval: Option<ApprovalPolicy>,
        defaults: &Defaults,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        // Which events the switch needs is read off the state: a writer
        // that resumed from a state snapshot proves it is this log's fold
        // first (its chain against the log's), as before a seal. A
        // snapshot folded from another copy of the log would otherwise
        // have the switch leave out an event the log needs, a permission
        // the session keeps that no rule can find missing. A writer that
        // would refuse the batch anyway (poisoned, or a seq conflict)
        // refuses before that read.
        self.check_usable(expected_seq)?;
        self.prove_chain(None, Proving::Preset)?;
        let events = preset_switch(&self.state, preset, auto_approval, defaults)
            .map_err(|error| self.naming_the_log(StoreError::InvalidEvent(error.to_string())))?;
        let ts = now_ms();
        let events = events
            .into_iter()
            .map(|(event_type, data)| NewEvent {
                event_type: event_type.as_str().to_owned(),
                data,
                ts: Some(ts),
            })
            .collect();
        self.append_batch(events, expected_seq)
    }

    /// What [`switch_preset`](Self::switch_preset) to `preset` wrote
    /// (`seqs`), with the effective values after it under `defaults`.
    pub fn preset_switched(
        &self,
        preset: Preset,
        seqs: &[AcknowledgedSeq],
        defaults: &Defaults,
    ) -> PresetSwitched {
        PresetSwitched {
            session: self.id().as_str().to_owned(),
            preset: preset.as_str(),
            seqs: seqs.iter().map(|seq| seq.get()).collect(),
            sandbox_mode: self.state.effective_sandbox(defaults).as_str(),
            approval_policy: self.state.effective_approval(defaults).as_str(),
        }
    }

    /// Validates and writes one event without syncing; returns its seq. The
    /// event is acknowledged by the next [`SessionWriter::sync`]. Events
    /// staged together share one fsync.
    pub fn stage(&mut self, event: NewEvent, expected_seq: Option<u64>) -> Result<u64, StoreError> {
        self.run_trusted(event, |writer, event| {
            writer.stage_once(event, expected_seq)
        })
    }

    /// [`stage`](Self::stage), once.
    fn stage_once(
        &mut self,
        event: NewEvent,
        expected_seq: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.check_usable(expected_seq)?;
        let record = self.build(self.written_seq + 1, None, event)?;
        if self.brings_a_seal(record.event_type()) {
            let signer = self.signer_of(record.event_type() == EventType::Seal.as_str());
            self.prove_chain(signer.as_ref(), Proving::Seal)?;
        }
        let event = self
            .state
            .check(&record)
            .map_err(|violation| StoreError::Rule {
                path: self.path.clone(),
                violation: appended_seal_violation(violation),
            })?;
        if closes_turn(&record) && self.options.seal_turns != SealTurns::Off {
            // The turn's seal goes out in the same write as its turn/end.
            let ts = record.ts();
            self.state.apply_checked(&record, event);
            let mut records = vec![record];
            let seal = turn_seal_record(&mut self.state, &self.options.seal_turns, ts)?;
            if let Some((seal, _)) = &seal {
                records.push(seal.clone());
            }
            self.write(&records)?;
            if let Some((seal, sealed)) = seal {
                self.state.apply_checked(&seal, sealed);
            }
            self.absorb_fragments(&records);
            return Ok(records[0].seq());
        }
        self.write(std::slice::from_ref(&record))?;
        self.state.apply_checked(&record, event);
        self.absorb_fragments(std::slice::from_ref(&record));
        Ok(record.seq())
    }

    /// The record of `event` at `seq`, refused as [`build_record`] refuses
    /// it, but a type no type may be spelled with first, as the rule
    /// violation `verify` finds it to be (a NUL in it was refused as what
    /// PostgreSQL cannot store: exit 1 where `verify` says 4).
    fn build(
        &self,
        seq: u64,
        batch: Option<u64>,
        event: NewEvent,
    ) -> Result<EventRecord, StoreError> {
        if let Some(violation) = sessionlog_projections::type_violation(seq, &event.event_type) {
            return Err(StoreError::Rule {
                path: self.path.clone(),
                violation,
            });
        }
        build_record(seq, batch, event).map_err(|error| self.naming_the_log(error))
    }

    /// `error`, when it refuses an event as invalid, naming the log it was
    /// meant for (the file, or the store and session), as a rule
    /// violation names it.
    fn naming_the_log(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::InvalidEvent(reason) => {
                StoreError::InvalidEvent(format!("{}: {reason}", crate::store_display(&self.path)))
            }
            other => other,
        }
    }

    /// Stages a seal of every record written so far, now.
    fn stage_seal(&mut self, key: Option<&SealSecretKey>) -> Result<u64, StoreError> {
        self.run_trusted(key, Self::stage_seal_once)
    }

    /// [`stage_seal`](Self::stage_seal), once.
    fn stage_seal_once(&mut self, key: Option<&SealSecretKey>) -> Result<u64, StoreError> {
        self.prove_chain(key.map(SealSecretKey::public_key).as_ref(), Proving::Seal)?;
        let (record, event) = seal_record(&mut self.state, now_ms(), key)?;
        self.write(std::slice::from_ref(&record))?;
        self.state.apply_checked(&record, event);
        self.absorb_fragments(std::slice::from_ref(&record));
        Ok(record.seq())
    }

    /// Makes every staged event durable and acknowledges them: returns the
    /// last acknowledged seq.
    pub fn sync(&mut self) -> Result<AcknowledgedSeq, StoreError> {
        if let Some(cause) = &self.poisoned {
            return Err(self.poisoned_error(cause.clone()));
        }
        if self.written_seq > self.acknowledged_seq {
            if let Err(error) = self.sink.sync(self.options.durability) {
                self.poisoned = Some(error.to_string());
                return Err(error);
            }
            self.acknowledged_seq = self.written_seq;
            self.snapshot_if_due();
        }
        Ok(AcknowledgedSeq(self.acknowledged_seq))
    }

    /// Takes a state snapshot when the writer closes with at least
    /// [`state_snapshot::CLOSE_SNAPSHOT_EVENTS`] acknowledged events past
    /// the last one, so that the next open, or a fork by reference, folds
    /// nothing after it. A poisoned writer, or one with writes not yet
    /// acknowledged, takes none.
    fn snapshot_at_close(&mut self) {
        let worth =
            self.acknowledged_seq >= self.snapshot_seq + state_snapshot::CLOSE_SNAPSHOT_EVENTS;
        if self.poisoned.is_none() && worth && self.written_seq == self.acknowledged_seq {
            self.take_snapshot();
        }
    }

    /// Takes a state snapshot once an interval of events was acknowledged
    /// since the last: after the acknowledgement, so that no append waits
    /// for it, and never more than one for an interval, failed or not (a
    /// failure is only logged: the session and its appends are untouched).
    fn snapshot_if_due(&mut self) {
        let due = self.acknowledged_seq >= self.snapshot_seq + self.snapshot_interval;
        if due && self.written_seq == self.acknowledged_seq {
            self.take_snapshot();
        }
    }

    /// Hands the state at the acknowledged seq to the sink as a snapshot.
    /// A state read page by page reads every page first: one that fails
    /// would be encoded as rows that are not there, under CRCs of their
    /// own, so the log is folded again first (and a fold that fails keeps
    /// no snapshot).
    fn take_snapshot(&mut self) {
        if !self.state.read_every_snapshot_page() {
            if let Err(error) = self.refold() {
                state_snapshot::not_kept(self.id(), self.acknowledged_seq, &error);
                return;
            }
        }
        self.snapshot_seq = self.acknowledged_seq;
        match self.sink.save_snapshot(&self.state) {
            Ok(bytes) => self.snapshot_interval = state_snapshot::snapshot_interval(bytes),
            Err(error) => {
                state_snapshot::not_kept(self.id(), self.acknowledged_seq, &error);
            }
        }
    }

    fn check_usable(&self, expected_seq: Option<u64>) -> Result<(), StoreError> {
        if let Some(cause) = &self.poisoned {
            return Err(self.poisoned_error(cause.clone()));
        }
        match expected_seq {
            Some(expected) if expected != self.next_seq() => Err(StoreError::Conflict {
                id: self.id().clone(),
                expected,
                actual: self.next_seq(),
            }),
            _ => Ok(()),
        }
    }

    fn write(&mut self, records: &[EventRecord]) -> Result<(), StoreError> {
        if self.state.snapshot_unreadable() {
            // What the state said of `records` may be wrong: the caller
            // folds the log again and checks them anew (`trusted`).
            return Err(StoreError::io(
                "write",
                &self.path,
                std::io::Error::other(
                    "a page of the state snapshot the writer resumed from could not be read",
                ),
            ));
        }
        let id = self.state.header().id.clone();
        if let Err(error) = self.sink.write(&id, records) {
            self.poisoned = Some(error.to_string());
            return Err(error);
        }
        if let Some(last) = records.last() {
            self.written_seq = last.seq();
        }
        if let Some(events) = &mut self.events {
            events.extend_from_slice(records);
        }
        Ok(())
    }

    /// Renders the review fragments of `records`, once the state folded them.
    fn absorb_fragments(&mut self, records: &[EventRecord]) {
        if let Some(fragments) = &mut self.review_fragments {
            fragments.absorb(&self.state, records);
        }
    }

    /// [`prove_chain`](Self::prove_chain), when one of `events` is or
    /// brings a seal ([`brings_a_seal`](Self::brings_a_seal)).
    fn prove_chain_before(&mut self, events: &[NewEvent]) -> Result<(), StoreError> {
        let sealing = !self.chain_proven
            && events
                .iter()
                .any(|event| self.brings_a_seal(&event.event_type));
        if !sealing {
            return Ok(());
        }
        let handed_in = events
            .iter()
            .any(|event| event.event_type == EventType::Seal.as_str());
        let signer = self.signer_of(handed_in);
        self.prove_chain(signer.as_ref(), Proving::Seal)
    }

    /// The key whose last seal may vouch for the chain before it when the
    /// writer seals what it is staging ([`prove_chain`](Self::prove_chain)):
    /// the one it signs its turns' seals with, if it does; none when a
    /// seal is `handed_in`, which is someone else's, so the log is read
    /// whole.
    fn signer_of(&self, handed_in: bool) -> Option<SealPublicKey> {
        match &self.options.seal_turns {
            SealTurns::Signed(key) if !handed_in => Some(key.public_key()),
            _ => None,
        }
    }

    /// Whether a record of type `event_type`, appended now, is or brings a
    /// seal: a seal handed in (checked against the chain), or a `turn/end`
    /// the writer seals by itself ([`WriterOptions::seal_turns`]).
    fn brings_a_seal(&self, event_type: &str) -> bool {
        event_type == EventType::Seal.as_str()
            || (event_type == EventType::TurnEnd.as_str()
                && self.options.seal_turns != SealTurns::Off)
    }

    /// Checks, once in the writer's life, that the hash chain its state
    /// carries is the one the log's bodies give, before a seal is made or
    /// one handed in is checked against it: a
    /// writer that resumed from a state snapshot took its chain from
    /// there, and a seal vouches for the log, not for a cache beside it.
    /// Left unchecked, a snapshot forged beside a log (one folded from a
    /// changed copy of it) would have the key's holder sign the chain of
    /// the changed copy, a seal that then holds on the copy. The check
    /// reads the bodies once, from the header on; the chain is then the
    /// writer's own for every later seal. A chain that differs refuses the
    /// seal (a seal failure): nothing is written.
    ///
    /// A writer about to sign with a key (`signer`, its public half) reads
    /// the log only from its last own seal signed by that key, when there
    /// is one: that seal, read from the log and its signature checked,
    /// vouches for the chain through the record before it as the key's
    /// holder ran it then ([`anchored_chain`]); the records from it on are
    /// hashed from the log. A writer that seals every turn so pays for the
    /// records since its last seal, not for the whole log.
    fn prove_chain(
        &mut self,
        signer: Option<&SealPublicKey>,
        proving: Proving,
    ) -> Result<(), StoreError> {
        if self.chain_proven {
            return Ok(());
        }
        self.state.settle_chain();
        let resumed = self.state.chain();
        let id = self.state.header().id.clone();
        let through = self.state.seq();
        let anchor = signer.and_then(|signer| {
            let last = self.state.last_seal()?;
            (last.own && last.key.as_ref() == Some(signer)).then_some((last.seq, *signer))
        });
        let anchored = match anchor {
            Some((seq, signer)) => self.sink.chain_of_log_since(seq, through, &|record| {
                anchored_chain(record, &id, seq, &signer)
            })?,
            None => None,
        };
        let log = match anchored {
            Some(chain) => chain,
            None => self.sink.chain_of_log()?,
        };
        if resumed != log {
            let (event_type, refused) = match proving {
                Proving::Seal => (EventType::Seal, "no seal was written"),
                Proving::Preset => (EventType::PermissionPreset, "the preset was not switched"),
            };
            return Err(StoreError::Rule {
                path: self.path.clone(),
                violation: sessionlog_projections::Violation::seal(
                    through + 1,
                    event_type.as_str(),
                    format!(
                        "{refused}: the state snapshot this writer resumed from gives \
                         the chain {resumed} through seq {through}, but the log's records give \
                         {log}; the snapshot was not folded from this log, or the log was \
                         changed after it was taken (`sessionlog verify` checks the log; a \
                         writer opened once the snapshot is removed folds the whole log)"
                    ),
                ),
            });
        }
        self.chain_proven = true;
        Ok(())
    }

    fn poisoned_error(&self, cause: String) -> StoreError {
        StoreError::Poisoned {
            id: self.id().clone(),
            cause,
        }
    }
}

/// What a writer proves its chain for ([`SessionWriter::prove_chain`]),
/// which its refusal names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proving {
    /// A seal it makes, or one handed in.
    Seal,
    /// A preset switch, whose events depend on the state.
    Preset,
}

/// The seal record of every record `state` folded, from the chain value it
/// keeps (the running chain: no record is read again, and the links it
/// put off are hashed here, once, before the seal is folded). It is
/// made, not parsed: its data is written compact by [`Seal::to_data_json`]
/// and its signature is the writer's own, so it is neither compacted nor
/// verified again (a verification costs twice the signature). Readers
/// check it like any other seal.
fn seal_record(
    state: &mut SessionState,
    ts: u64,
    key: Option<&SealSecretKey>,
) -> Result<(EventRecord, sessionlog_schema::Event), StoreError> {
    state.settle_chain();
    let through_seq = state.seq();
    let seal = Seal::new(&state.header().id, through_seq, state.chain(), key);
    let record = EventRecord::new(
        through_seq + 1,
        ts,
        None,
        EventType::Seal.as_str(),
        &seal.to_data_json(),
    );
    check_storable_record(&record)?;
    Ok((record, sessionlog_schema::Event::Seal(seal)))
}

/// The seal `seal_turns` asks for after a `turn/end` stamped `ts` that
/// `state` folded last; none when sealing turns is off.
fn turn_seal_record(
    state: &mut SessionState,
    seal_turns: &SealTurns,
    ts: u64,
) -> Result<Option<(EventRecord, sessionlog_schema::Event)>, StoreError> {
    let key = match seal_turns {
        SealTurns::Off => return Ok(None),
        SealTurns::Unsigned => None,
        SealTurns::Signed(key) => Some(key),
    };
    seal_record(state, ts, key).map(Some)
}

/// Whether `record` is a `turn/end`, after which a sealing writer seals.
fn closes_turn(record: &EventRecord) -> bool {
    record.event_type() == EventType::TurnEnd.as_str()
}

/// What a preset switch wrote, and the effective values after it, as
/// `sessionlog preset --json` prints it (members in this order).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PresetSwitched {
    /// The session switched.
    pub session: String,
    /// The preset switched to.
    pub preset: &'static str,
    /// The seqs of the events written, the `permission/preset` event last.
    pub seqs: Vec<u64>,
    /// The effective sandbox mode after the switch.
    pub sandbox_mode: &'static str,
    /// The effective approval policy after the switch.
    pub approval_policy: &'static str,
}

/// The chain through the record before `record`, the record at `seq`, as
/// `record` vouches for it: a seal of session `id` through `seq - 1`
/// signed by `signer` (the key the writer is about to sign with, so its
/// own signature from before), whose signature holds. `None` for any other
/// record: the log is then read whole.
fn anchored_chain(
    record: &EventRecord,
    id: &SessionId,
    seq: u64,
    signer: &SealPublicKey,
) -> Option<ChainValue> {
    if record.seq() != seq || record.event_type() != EventType::Seal.as_str() {
        return None;
    }
    let Ok(sessionlog_schema::Event::Seal(seal)) =
        sessionlog_schema::Event::parse(record.event_type(), record.data())
    else {
        return None;
    };
    let signature = seal.signature.as_ref()?;
    let message = sessionlog_schema::seal_message(id, seal.through_seq, &seal.chain);
    let holds = seal.through_seq.checked_add(1) == Some(seq)
        && signature.key == *signer
        && signature.verify(message.as_bytes()).is_ok();
    holds.then_some(seal.chain)
}

/// The chain [`LogSink::chain_of_log_since`] gives: from the chain
/// `before` gives for the first of `events` (which must be the record at
/// `seq`) over the bodies of `events` and then `pending`, which must run
/// on from seq to seq through `through`; `None` when they do not, or
/// `before` gives nothing.
pub(crate) fn chain_since(
    events: impl IntoIterator<Item = Result<EventRecord, StoreError>>,
    pending: &[EventRecord],
    seq: u64,
    through: u64,
    before: &dyn Fn(&EventRecord) -> Option<ChainValue>,
) -> Result<Option<ChainValue>, StoreError> {
    let mut events = events.into_iter();
    let Some(first) = events.next().transpose()? else {
        return Ok(None);
    };
    let Some(mut chain) = (first.seq() == seq).then(|| before(&first)).flatten() else {
        return Ok(None);
    };
    chain = chain.next(first.body());
    let mut last = seq;
    let rest = events.chain(pending.iter().cloned().map(Ok));
    for record in rest {
        let record = record?;
        if Some(record.seq()) != last.checked_add(1) {
            return Ok(None);
        }
        last = record.seq();
        chain = chain.next(record.body());
    }
    Ok((last == through).then_some(chain))
}

/// The hash chain of a session whose stored header body is `header_body`,
/// through its `events` (read from the log, each checked as it comes) and
/// then the records a sink holds until its sync: what every backend's
/// [`LogSink::chain_of_log`] gives.
pub(crate) fn chain_of(
    header_body: &str,
    events: impl IntoIterator<Item = Result<EventRecord, StoreError>>,
    pending: &[EventRecord],
) -> Result<ChainValue, StoreError> {
    let mut chain = ChainValue::genesis(header_body);
    for record in events {
        chain = chain.next(record?.body());
    }
    for record in pending {
        chain = chain.next(record.body());
    }
    Ok(chain)
}

/// `violation`, of a seal handed to the writer to append, said as what it
/// is: the seal does not hold over the log, which was not changed (a seal
/// read from a log that fails says the log was changed under it).
fn appended_seal_violation(
    mut violation: sessionlog_projections::Violation,
) -> sessionlog_projections::Violation {
    if violation.kind == sessionlog_projections::ViolationKind::Seal {
        violation.message = violation.message.replacen(
            "the log was changed at or before seq",
            "the seal appended does not hold: its chain is not the log's through seq",
            1,
        );
    }
    violation
}

/// Builds the record an event becomes at `seq`, compacting its data.
pub(crate) fn build_record(
    seq: u64,
    batch: Option<u64>,
    event: NewEvent,
) -> Result<EventRecord, StoreError> {
    let data = compact_json(&event.data).map_err(|error| {
        StoreError::InvalidEvent(format!(
            "seq {seq} ({}): data is not JSON: {error}",
            event.event_type
        ))
    })?;
    let ts = event.ts.unwrap_or_else(now_ms);
    let record = EventRecord::new(seq, ts, batch, &event.event_type, &data);
    check_storable_record(&record)?;
    if record.body().len() + sessionlog_schema::CRC_SUFFIX_LEN > MAX_RECORD_BYTES {
        return Err(StoreError::InvalidEvent(format!(
            "seq {seq} ({}): the record would be {} bytes, above the {MAX_RECORD_BYTES}-byte limit",
            event.event_type,
            record.body().len() + sessionlog_schema::CRC_SUFFIX_LEN
        )));
    }
    Ok(record)
}

/// Refuses a header or events holding a value one of the backends cannot
/// store: an integer above 2^63 - 1, SQLite's largest, or a NUL character
/// in a value kept in a text column of its own (the header's `cwd`, an
/// event's `type`), which PostgreSQL's text cannot hold. Every backend
/// runs it before anything is written, so they accept exactly the same
/// sessions and events, and a store can always be migrated to another.
pub(crate) fn check_storable(
    header: &SessionHeader,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    check_storable_header(header)?;
    events.iter().try_for_each(check_storable_record)
}

/// Refuses events that a reader would not take whole as the log they make
/// after the header stored as `header_body`: each record's line is scanned
/// as a reader scans it (seqs from 1 in order, batches whole, `data` JSON),
/// and none may be left past damage or in an unfinished batch. A creation
/// that took them would write a log its own readers call corrupt or torn,
/// and keep a state snapshot over records that no read gives.
pub(crate) fn check_framing(
    header: &SessionHeader,
    header_body: &str,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    let text = log_text(&header.id, header_body, events);
    check_log_text(&header.id, &text, events.len())
}

/// The text of the log of session `id` whose header is stored as
/// `header_body` and whose records are `events`: one line each, with its
/// `\n`.
pub(crate) fn log_text(id: &SessionId, header_body: &str, events: &[EventRecord]) -> String {
    let mut text = sessionlog_schema::encode_line(id, header_body);
    for record in events {
        text.push_str(&record.encode(id));
    }
    text
}

/// [`check_framing`] of `text`, the log of session `id` made of `events`
/// events ([`log_text`]), whose records hold no line break
/// ([`check_storable`]).
pub(crate) fn check_log_text(id: &SessionId, text: &str, events: usize) -> Result<(), StoreError> {
    let refused = |reason: String| {
        StoreError::InvalidEvent(format!(
            "session {id}: {reason}; every reader would refuse the log these events make"
        ))
    };
    // Line 1 is the header, and each event a line after it: the line a
    // reader names is the event before it in seqs.
    let at = |corruption: sessionlog_schema::Corruption| {
        let seq = corruption.position.line.saturating_sub(1);
        match (seq, corruption.reason.starts_with("seq ")) {
            (0, _) => refused(format!("its header: {}", corruption.reason)),
            (_, true) => refused(corruption.reason),
            (_, false) => refused(format!("seq {seq}: {}", corruption.reason)),
        }
    };
    let mut scanner = sessionlog_schema::LogScanner::new(Some(id.clone()));
    let mut ready = Vec::new();
    let mut taken = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bytes = line.as_bytes();
        let without_newline = &bytes[..bytes.len().saturating_sub(1)];
        scanner
            .push_line(without_newline, true, offset, &mut ready)
            .map_err(at)?;
        offset += bytes.len() as u64;
        taken += ready.len();
        ready.clear();
    }
    let summary = scanner.finish().map_err(at)?;
    if let Some(torn) = summary.torn_tail {
        return Err(refused(torn.reason));
    }
    match taken == events {
        true => Ok(()),
        false => Err(refused(format!(
            "{taken} of its {events} events would be read"
        ))),
    }
}

/// Refuses a header holding a value one of the backends cannot store (see
/// [`check_storable_record`]): a `createdAt`, `seedLength` or
/// `delegationDepth` above 2^63 - 1, a NUL in its `cwd`, or a record above
/// the format's limit (a `cwd` of megabytes), which a folder's reader
/// refuses as line 1 where a database would keep it.
pub fn check_storable_header(header: &SessionHeader) -> Result<(), StoreError> {
    for (what, value) in [
        ("createdAt", header.created_at),
        ("seedLength", header.seed_length),
        ("delegationDepth", header.delegation_depth),
    ] {
        if i64::try_from(value).is_err() {
            return Err(StoreError::InvalidHeader(format!(
                "session {}: {what} {value} is above 2^63-1, the largest integer every backend stores",
                header.id
            )));
        }
    }
    if header.cwd.contains('\0') {
        return Err(StoreError::InvalidHeader(format!(
            "session {}: cwd {:?} holds a NUL character, which PostgreSQL's text cannot store",
            header.id, header.cwd
        )));
    }
    // Its line without the `\n`, as a reader measures it.
    let record_bytes = header.to_body().len() + sessionlog_schema::CRC_SUFFIX_LEN;
    if record_bytes > MAX_RECORD_BYTES {
        return Err(StoreError::InvalidHeader(format!(
            "session {}: the header record would be {record_bytes} bytes (its cwd {} bytes), above the {MAX_RECORD_BYTES}-byte limit",
            header.id,
            header.cwd.len()
        )));
    }
    Ok(())
}

/// Refuses a record holding a value one of the backends cannot store: a
/// seq or ts above 2^63 - 1, SQLite's largest integer, a NUL in its type,
/// which PostgreSQL's text cannot hold, or a line break in its body, which
/// no JSONL line can. Every backend refuses to write a record it refuses
/// (`InvalidEvent`, naming the seq).
pub fn check_storable_record(record: &EventRecord) -> Result<(), StoreError> {
    check_storable_values(record)?;
    // A database refuses such a body on every read.
    if let Some(at) = sessionlog_schema::line_break_at(record.body()) {
        return Err(StoreError::InvalidEvent(format!(
            "seq {} ({}): the record holds a line break at byte {at}, which no JSONL line can \
             hold (write its data compact)",
            record.seq(),
            record.event_type()
        )));
    }
    Ok(())
}

/// [`check_storable_record`] but for line breaks: for a record read from a
/// JSONL line, which cannot hold one.
pub(crate) fn check_storable_values(record: &EventRecord) -> Result<(), StoreError> {
    for (what, value) in [("seq", record.seq()), ("ts", record.ts())] {
        if i64::try_from(value).is_err() {
            return Err(StoreError::InvalidEvent(format!(
                "seq {} ({}): {what} {value} is above 2^63-1, the largest integer every backend stores",
                record.seq(),
                record.event_type()
            )));
        }
    }
    // A type is short: a plain loop over it costs less than `memchr`'s set-up.
    if record.event_type().bytes().any(|byte| byte == 0) {
        return Err(StoreError::InvalidEvent(format!(
            "seq {}: type {:?} holds a NUL character, which PostgreSQL's text cannot store",
            record.seq(),
            record.event_type()
        )));
    }
    Ok(())
}

/// The current time in unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seal record of session `id` at `seq`.
    fn seal_at(seq: u64, seal: &Seal) -> EventRecord {
        EventRecord::new(seq, 0, None, EventType::Seal.as_str(), &seal.to_data_json())
    }

    /// Only a seal at the seq asked for, through the record before it, and
    /// signed by the writer's key with a signature that holds, vouches for
    /// the chain before it; anything else has the log read whole.
    #[test]
    fn only_a_seal_the_writers_key_signed_vouches_for_the_chain_before_it() {
        let id = SessionId::parse("s").unwrap_or_else(|error| panic!("{error}"));
        let other_id = SessionId::parse("t").unwrap_or_else(|error| panic!("{error}"));
        let key = SealSecretKey::from_seed([7; 32]);
        let other = SealSecretKey::from_seed([8; 32]);
        let chain = ChainValue::genesis("{}").next("a");
        let signer = key.public_key();
        let good = Seal::new(&id, 9, chain, Some(&key));
        assert_eq!(
            anchored_chain(&seal_at(10, &good), &id, 10, &signer),
            Some(chain)
        );
        // Another seq than the one asked for, or than its span says.
        assert_eq!(anchored_chain(&seal_at(11, &good), &id, 10, &signer), None);
        assert_eq!(anchored_chain(&seal_at(11, &good), &id, 11, &signer), None);
        // Unsigned, or signed by another key, or for another session.
        let unsigned = Seal::new(&id, 9, chain, None);
        assert_eq!(
            anchored_chain(&seal_at(10, &unsigned), &id, 10, &signer),
            None
        );
        let by_other = Seal::new(&id, 9, chain, Some(&other));
        assert_eq!(
            anchored_chain(&seal_at(10, &by_other), &id, 10, &signer),
            None
        );
        let of_other = Seal::new(&other_id, 9, chain, Some(&key));
        assert_eq!(
            anchored_chain(&seal_at(10, &of_other), &id, 10, &signer),
            None
        );
        // A chain changed under the signature.
        let mut changed = good.clone();
        changed.chain = ChainValue::genesis("{}");
        assert_eq!(
            anchored_chain(&seal_at(10, &changed), &id, 10, &signer),
            None
        );
        // Not a seal.
        let note = EventRecord::new(10, 0, None, "x-note", &good.to_data_json());
        assert_eq!(anchored_chain(&note, &id, 10, &signer), None);
    }
}
