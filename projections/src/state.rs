//! `SessionState`: the incremental fold over one session (SPEC §6).
//!
//! The state absorbs one record at a time in O(1) amortised work (hash maps
//! keyed by call and request id), so the writer can check every append
//! against the state it already holds, and `fold` of the first k records is
//! the projection "as of" seq k. Rules about turns, steps, call ownership,
//! settles and approvals look at own events only (seq > seedLength); shapes,
//! vocabularies and the uniqueness of `callId` and `requestId` hold on the
//! whole log, seeded prefix included.

use std::collections::{BTreeMap, HashMap};

use sessionlog_schema::{
    ApprovalAsked, ApprovalDecided, ApprovalPolicy, Event, EventRecord, Preset, SandboxMode,
    SessionHeader, StepStart, ToolSettle, ToolStart,
};

use crate::Violation;

/// The configured defaults a session falls back on when neither its own
/// switches nor its header set a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Defaults {
    /// The configured approval policy (`ask` unless configured).
    pub approval: ApprovalPolicy,
    /// The configured sandbox mode (`workspace-write` unless configured).
    pub sandbox: SandboxMode,
}

/// A started call, as the fold knows it.
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
    /// The program call it was made from, if any.
    pub parent_call_id: Option<String>,
}

/// Incremental fold over one session. O(1) amortised per event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    header: SessionHeader,
    seq: u64,
    /// Seq and value of the last own `approval/policy`.
    approval_switch: Option<(u64, ApprovalPolicy)>,
    /// Value of the last own `sandbox/mode`.
    sandbox_switch: Option<SandboxMode>,
    /// Value of the last own `permission/preset`.
    preset_switch: Option<Preset>,
    open_turn: Option<String>,
    open_step: Option<String>,
    /// Every `tool/start` of the whole log, by `callId`.
    calls: HashMap<String, CallState>,
    /// Every `approval/asked` of the whole log, by `requestId`.
    requests: HashMap<String, RequestState>,
    /// Own undecided asks, by the seq they were asked at.
    pending_approvals: BTreeMap<u64, String>,
    /// Seq and approval policy of the last own `request/header`.
    last_own_request_header: Option<(u64, ApprovalPolicy)>,
    latest_request_header_seq: Option<u64>,
    last_checkpoint_seq: Option<u64>,
    violation_count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct RequestState {
    seq: u64,
    own: bool,
    decided: bool,
}

/// Folds `records` in order over `header`, collecting every violation.
///
/// Pass the first k records (`records.iter().take(k)`) for the projection
/// as of seq k. A record that breaks a rule is reported and skipped, and the
/// fold goes on, so one pass reports every violation.
pub fn fold<'a>(
    header: SessionHeader,
    records: impl IntoIterator<Item = &'a EventRecord>,
) -> (SessionState, Vec<Violation>) {
    let mut state = SessionState::new(header);
    let mut violations = Vec::new();
    for record in records {
        if let Err(violation) = state.apply(record) {
            violations.push(violation);
        }
    }
    (state, violations)
}

impl Default for Defaults {
    /// `ask` and `workspace-write`, the spec's defaults.
    fn default() -> Self {
        Defaults {
            approval: ApprovalPolicy::Ask,
            sandbox: SandboxMode::WorkspaceWrite,
        }
    }
}

impl SessionState {
    /// The state of a session holding only its header (seq 0).
    pub fn new(header: SessionHeader) -> SessionState {
        SessionState {
            header,
            seq: 0,
            approval_switch: None,
            sandbox_switch: None,
            preset_switch: None,
            open_turn: None,
            open_step: None,
            calls: HashMap::new(),
            requests: HashMap::new(),
            pending_approvals: BTreeMap::new(),
            last_own_request_header: None,
            latest_request_header_seq: None,
            last_checkpoint_seq: None,
            violation_count: 0,
        }
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
    pub fn check(&self, record: &EventRecord) -> Result<Event, Violation> {
        let seq = record.seq();
        let event_type = record.event_type();
        let expected = self.seq.saturating_add(1);
        if seq != expected {
            return Err(Violation::rule(
                seq,
                event_type,
                format!("expected seq {expected}, found seq {seq}"),
            ));
        }
        let event = Event::parse(event_type, record.data())
            .map_err(|error| Violation::from_shape(seq, event_type, &error))?;
        self.check_whole_log_rules(&event)
            .map_err(|message| Violation::rule(seq, event_type, message))?;
        if self.is_own(seq) {
            self.check_own_rules(&event)
                .map_err(|message| Violation::rule(seq, event_type, message))?;
        }
        Ok(event)
    }

    /// [`check`](Self::check), then the event's effects. On `Err` the effects
    /// are skipped but the seq still advances by one, so a caller can go on
    /// and report every violation.
    pub fn apply(&mut self, record: &EventRecord) -> Result<(), Violation> {
        let checked = self.check(record);
        self.seq = self.seq.saturating_add(1);
        match checked {
            Ok(event) => {
                self.absorb(self.seq, event);
                Ok(())
            }
            Err(violation) => {
                self.violation_count += 1;
                Err(violation)
            }
        }
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
    pub fn preset_switch(&self) -> Option<Preset> {
        self.preset_switch
    }

    /// The open own turn.
    pub fn open_turn(&self) -> Option<&str> {
        self.open_turn.as_deref()
    }

    /// The open own step (always inside the open turn).
    pub fn open_step(&self) -> Option<&str> {
        self.open_step.as_deref()
    }

    /// The `requestId`s of own asks not yet decided, in the order asked.
    pub fn pending_approvals(&self) -> Vec<&str> {
        self.pending_approvals
            .values()
            .map(String::as_str)
            .collect()
    }

    /// The seq of the last `checkpoint` of the whole log: the compaction
    /// surface starts there (inclusive). `None`: the surface is the whole log.
    pub fn last_checkpoint_seq(&self) -> Option<u64> {
        self.last_checkpoint_seq
    }

    /// The call started with `call_id` anywhere in the log.
    pub fn call(&self, call_id: &str) -> Option<&CallState> {
        self.calls.get(call_id)
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

    /// Rules that hold on the whole log: ids that must be unique.
    fn check_whole_log_rules(&self, event: &Event) -> Result<(), String> {
        match event {
            Event::ToolStart(start) => match self.calls.get(&start.call_id) {
                Some(earlier) => Err(format!(
                    "callId {:?} is already used by the tool/start at seq {}",
                    start.call_id, earlier.seq
                )),
                None => Ok(()),
            },
            Event::ApprovalAsked(asked) => match self.requests.get(&asked.request_id) {
                Some(earlier) => Err(format!(
                    "requestId {:?} is already used by the approval/asked at seq {}",
                    asked.request_id, earlier.seq
                )),
                None => Ok(()),
            },
            Event::RequestHeader(_)
            | Event::TurnStart(_)
            | Event::TurnEnd(_)
            | Event::StepStart(_)
            | Event::StepEnd(_)
            | Event::Message(_)
            | Event::ToolSettle(_)
            | Event::ApprovalPolicy(_)
            | Event::SandboxMode(_)
            | Event::PermissionPreset(_)
            | Event::ApprovalDecided(_)
            | Event::Checkpoint(_)
            | Event::ChildCreated(_)
            | Event::Unknown => Ok(()),
        }
    }

    /// Rules that hold on own events: turns, steps, calls, approvals.
    fn check_own_rules(&self, event: &Event) -> Result<(), String> {
        match event {
            Event::TurnStart(start) => match &self.open_turn {
                Some(open) => Err(format!(
                    "turn {:?} cannot start while turn {open:?} is open; end it first",
                    start.turn_id
                )),
                None => Ok(()),
            },
            Event::TurnEnd(end) => {
                self.names_open_turn("turn/end", &end.turn_id)?;
                match &self.open_step {
                    Some(step) => Err(format!(
                        "turn {:?} cannot end while step {step:?} is open; end the step first",
                        end.turn_id
                    )),
                    None => Ok(()),
                }
            }
            Event::StepStart(start) => self.check_step_start(start),
            Event::StepEnd(end) => self.names_open_step("step/end", &end.step_id),
            Event::ToolStart(start) => self.check_tool_start(start),
            Event::ToolSettle(settle) => self.check_tool_settle(settle),
            Event::ApprovalAsked(asked) => self.check_approval_asked(asked),
            Event::ApprovalDecided(decided) => self.check_approval_decided(decided),
            Event::RequestHeader(_)
            | Event::Message(_)
            | Event::ApprovalPolicy(_)
            | Event::SandboxMode(_)
            | Event::PermissionPreset(_)
            | Event::Checkpoint(_)
            | Event::ChildCreated(_)
            | Event::Unknown => Ok(()),
        }
    }

    fn names_open_turn(&self, what: &str, turn_id: &str) -> Result<(), String> {
        match &self.open_turn {
            None => Err(format!("{what} names turn {turn_id:?} but no turn is open")),
            Some(open) if open != turn_id => Err(format!(
                "{what} names turn {turn_id:?} but the open turn is {open:?}"
            )),
            Some(_) => Ok(()),
        }
    }

    fn names_open_step(&self, what: &str, step_id: &str) -> Result<(), String> {
        match &self.open_step {
            None => Err(format!("{what} names step {step_id:?} but no step is open")),
            Some(open) if open != step_id => Err(format!(
                "{what} names step {step_id:?} but the open step is {open:?}"
            )),
            Some(_) => Ok(()),
        }
    }

    fn check_step_start(&self, start: &StepStart) -> Result<(), String> {
        self.names_open_turn(&format!("step {:?}", start.step_id), &start.turn_id)?;
        match &self.open_step {
            Some(open) => Err(format!(
                "step {:?} cannot start while step {open:?} is open; end it first",
                start.step_id
            )),
            None => Ok(()),
        }
    }

    fn check_tool_start(&self, start: &ToolStart) -> Result<(), String> {
        self.names_open_step(&format!("call {:?}", start.call_id), &start.step_id)
    }

    fn check_tool_settle(&self, settle: &ToolSettle) -> Result<(), String> {
        let Some(call) = self.calls.get(&settle.call_id) else {
            return Err(format!(
                "call {:?} was never started; a settle needs an own started call",
                settle.call_id
            ));
        };
        if !call.own {
            return Err(format!(
                "call {:?} was started in the seeded prefix (seq {}) and is not this session's to settle",
                settle.call_id, call.seq
            ));
        }
        if call.settled {
            return Err(format!("call {:?} is already settled", settle.call_id));
        }
        Ok(())
    }

    fn check_approval_asked(&self, asked: &ApprovalAsked) -> Result<(), String> {
        self.names_open_turn(
            &format!("approval request {:?}", asked.request_id),
            &asked.turn_id,
        )
    }

    fn check_approval_decided(&self, decided: &ApprovalDecided) -> Result<(), String> {
        let Some(request) = self.requests.get(&decided.request_id) else {
            return Err(format!(
                "approval request {:?} was never asked",
                decided.request_id
            ));
        };
        if !request.own {
            return Err(format!(
                "approval request {:?} was asked in the seeded prefix (seq {}) and is not this session's to decide",
                decided.request_id, request.seq
            ));
        }
        if request.decided {
            return Err(format!(
                "approval request {:?} is already decided",
                decided.request_id
            ));
        }
        Ok(())
    }

    /// The effects of a checked event at `seq`.
    fn absorb(&mut self, seq: u64, event: Event) {
        let own = self.is_own(seq);
        match event {
            Event::RequestHeader(header) => {
                self.latest_request_header_seq = Some(seq);
                if own {
                    self.last_own_request_header = Some((seq, header.approval_policy));
                }
            }
            Event::TurnStart(start) if own => self.open_turn = Some(start.turn_id),
            Event::TurnEnd(_) if own => self.open_turn = None,
            Event::StepStart(start) if own => self.open_step = Some(start.step_id),
            Event::StepEnd(_) if own => self.open_step = None,
            Event::TurnStart(_) | Event::TurnEnd(_) | Event::StepStart(_) | Event::StepEnd(_) => {}
            Event::ToolStart(start) => {
                let call = CallState {
                    seq,
                    step_id: start.step_id,
                    name: start.name,
                    own,
                    settled: false,
                    parent_call_id: start.parent_call_id,
                };
                self.calls.insert(start.call_id, call);
            }
            Event::ToolSettle(settle) => {
                if let Some(call) = self.calls.get_mut(&settle.call_id) {
                    call.settled = true;
                }
            }
            Event::ApprovalPolicy(change) if own => {
                self.approval_switch = Some((seq, change.policy));
            }
            Event::SandboxMode(change) if own => self.sandbox_switch = Some(change.mode),
            Event::PermissionPreset(change) if own => self.preset_switch = Some(change.preset),
            Event::ApprovalPolicy(_) | Event::SandboxMode(_) | Event::PermissionPreset(_) => {}
            Event::ApprovalAsked(asked) => {
                if own {
                    self.pending_approvals.insert(seq, asked.request_id.clone());
                }
                let request = RequestState {
                    seq,
                    own,
                    decided: false,
                };
                self.requests.insert(asked.request_id, request);
            }
            Event::ApprovalDecided(decided) => {
                if let Some(request) = self.requests.get_mut(&decided.request_id) {
                    request.decided = true;
                    self.pending_approvals.remove(&request.seq);
                }
            }
            Event::Checkpoint(_) => self.last_checkpoint_seq = Some(seq),
            Event::Message(_) | Event::ChildCreated(_) | Event::Unknown => {}
        }
    }
}
