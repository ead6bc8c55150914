//! `sessionlog replay`: a session as a readable timeline.
//!
//! Each event becomes an [`Entry`]: its time, seq, type, one line of essence
//! (who said what with which authority, which tool with which arguments,
//! approvals, denials, checkpoints, children, unknown types), the rule it
//! breaks if any, and the projections whenever they changed. `report` draws
//! the same entries as HTML and `tail --json` prints them without
//! projections, so the three never disagree about what an event means.
//!
//! Log text is hostile input: every summary has its control characters
//! (terminal escapes included) and bidirectional overrides escaped. A
//! summary carries the whole text it quotes (a message, a call's
//! arguments, a reviewer's reason): `--json`, `tail --json` and the report
//! hold the evidence whole. Only the terminal fits it to its width
//! ([`Layout`]): wrapped under the text column, and clipped to a few lines
//! unless `--full`.

use std::io::Write;

use anyhow::{bail, Result};
use serde::Serialize;
use sessionlog_projections::{
    message_authority, Authority, Defaults, PresetView, SealInfo, SessionState, Setting,
    ViolationKind, AUTO_REVIEW_DENIED, AUTO_REVIEW_FAILED,
};
use sessionlog_schema::{
    ApprovalOutcome, ApprovalPolicy, ContentPart, Event, EventRecord, EventType,
    HeaderVocabularyError, SandboxMode, SessionHeader, SettleStatus,
};

use crate::cli::{ColorChoice, DefaultArgs, SessionArgs};
use crate::target::Target;
use crate::terminal::{Escaping, Mode};
use crate::{exit, warn, UsageError};

/// How many lines a summary may take on the terminal without `--full`.
const SUMMARY_LINES: usize = 4;
/// The narrowest text column the layout accepts: on a narrower terminal
/// lines run past its edge rather than break after every word.
const MIN_TEXT_COLUMNS: usize = 24;
/// The width of the type column (the longest v1 type, `approval/decided`,
/// and a space).
const TYPE_COLUMNS: usize = 17;
/// The width of the time column: `HH:MM:SS.mmm` (the date is printed on a
/// line of its own when it changes).
const TIME_COLUMNS: usize = 12;

/// How the terminal timeline is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The columns to fit: `COLUMNS`, else the terminal's width, else 80.
    pub width: usize,
    /// Show every summary whole instead of at most [`SUMMARY_LINES`] lines.
    pub full: bool,
}

/// What each authority label of a message means: the one table behind
/// `replay --help` and the report's legend.
pub const AUTHORITY_LEGEND: [(Authority, &str); 5] = [
    (
        Authority::User,
        "the user's own input (source user), whatever transport carried it: it directs the agent",
    ),
    (
        Authority::DirectParent,
        "a message this session's parent agent sent it (source agent-message from the header's parent): it directs a delegated session",
    ),
    (
        Authority::Fact,
        "information, not instructions: any other agent message (inherited or unverified), a checkpoint summary, an image or attachment",
    ),
    (
        Authority::Constraint,
        "project instructions (source instructions, such as AGENTS.md): they constrain what may be done, never ask for anything",
    ),
    (
        Authority::Excluded,
        "kept whole in the log, but never shown to the Auto reviewer: assistant text, injected context and every other source. Nothing is removed from the log",
    ),
];

/// What each colour of the terminal timeline means (`--color`), and the
/// marks beside it.
pub const COLOUR_LEGEND: [(&str, &str); 9] = [
    ("cyan", "a message (its authority label in bold cyan)"),
    ("blue", "a tool call starting"),
    ("green", "a call that settled ok, an approval allowed"),
    (
        "yellow",
        "an approval asked, a policy, sandbox or preset switch",
    ),
    (
        "bold red",
        "a denial by Auto review, an approval refused, a call that failed",
    ),
    ("magenta", "a checkpoint, a child session created"),
    (
        "dim",
        "the session's structure (turns, steps, model requests), unknown types",
    ),
    ("red ✗", "the rule an event breaks (exit 4)"),
    (
        "dim green ⇒",
        "the projections that changed with this event",
    ),
];

/// The text after `replay --help`: its examples, then the legends.
pub fn help_after() -> String {
    let mut text = String::from(
        "Examples:\n  sessionlog replay examples/sessions/auto-review.jsonl\n  sessionlog replay examples/sessions/auto-review.jsonl --full\n  COLUMNS=120 sessionlog replay examples/sessions --session lead --from 5 --at 12\n  sessionlog replay examples/sessions/approval.jsonl --json | jq 'select(.projection)'\n\nAuthority labels ([label] before a message: how the Auto reviewer weighs it):\n",
    );
    for (authority, meaning) in AUTHORITY_LEGEND {
        text.push_str(&format!("  {:<15} {meaning}\n", authority.to_string()));
    }
    text.push_str("\nColours (on a terminal, or with --color always):\n");
    for (colour, meaning) in COLOUR_LEGEND {
        text.push_str(&format!("  {colour:<15} {meaning}\n"));
    }
    text
}

/// What kind of thing an entry records: picks its colour and CSS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// The session header (seq 0).
    Header,
    /// `request/header`.
    Request,
    /// `turn/start`, `turn/end`, `step/start`, `step/end`.
    Structure,
    /// A message.
    Message,
    /// `tool/start`.
    Call,
    /// A call that settled `ok`.
    Settled,
    /// A call that settled with an error or was cancelled.
    Failed,
    /// A call denied by Auto review (`AUTO_REVIEW_DENIED`).
    Denial,
    /// A switch of approval policy, sandbox mode or preset.
    Switch,
    /// `approval/asked`.
    ApprovalAsked,
    /// `approval/decided` with `allowed-once`.
    ApprovalAllowed,
    /// `approval/decided` with any other outcome.
    ApprovalRefused,
    /// `checkpoint`.
    Checkpoint,
    /// `child/created`.
    Child,
    /// A `seal` that holds (or an inherited one, checked for shape only).
    Seal,
    /// An own `seal` that does not hold: the log was changed after it.
    SealFailed,
    /// A type this version does not know.
    Unknown,
    /// A known type whose `data` does not parse.
    Malformed,
}

/// The projections worth watching, as they stand after an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// The preset, or `custom`.
    pub preset: PresetView,
    /// Approval override and effective policy.
    pub approval_policy: Setting<ApprovalPolicy>,
    /// Sandbox override and effective mode.
    pub sandbox_mode: Setting<SandboxMode>,
    /// The open own turn.
    pub open_turn: Option<String>,
    /// The open own step.
    pub open_step: Option<String>,
    /// Own undecided asks, in the order asked.
    pub pending_approvals: Vec<String>,
    /// The approval-policy notice, if one is due.
    pub notice: Option<String>,
}

/// One line of the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The event's seq (0 for the header).
    pub seq: u64,
    /// Unix milliseconds (the header's `createdAt` for seq 0).
    pub ts: u64,
    /// `ts` as ISO-8601 UTC.
    pub time: String,
    /// The type as logged (`header` for seq 0).
    #[serde(rename = "type")]
    pub event_type: String,
    /// An event of the parent's that a child inherited (its seq within
    /// the header's `seedLength`): the parent did it, not the child.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inherited: bool,
    /// One line of essence, escaped for display and whole: the text it
    /// quotes is never clipped.
    pub summary: String,
    /// A message's authority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority: Option<Authority>,
    /// The rule this event breaks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
    /// The projections after this event, when they changed (always on the
    /// first entry shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection: Option<View>,
    /// What kind of event this is.
    #[serde(skip)]
    pub kind: EntryKind,
    /// For `child/created`: the child's id as logged.
    #[serde(skip)]
    pub child: Option<String>,
}

/// 7 when a seal does not hold, else 4 when an event breaks a rule, else 0.
fn findings_exit_code(violations: usize, seal_failures: usize) -> u8 {
    exit::of_findings(false, seal_failures > 0, violations > seal_failures, false)
}

/// Which events a timeline shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    /// Show events from this seq on.
    pub from: Option<u64>,
    /// Fold and show events up to this seq only.
    pub at: Option<u64>,
}

/// Runs `replay`: the session is read as a stream and each entry printed
/// as its event is folded, so what is held is the fold and one entry,
/// whatever the log's length. A first read to the end (nothing kept)
/// refuses a corrupt log before anything is printed, names a torn tail,
/// and gives the last seq (for `--at` and the width of the seq column).
pub fn run(
    args: &SessionArgs,
    window: Window,
    json: bool,
    color: ColorChoice,
    layout: Layout,
    defaults: &DefaultArgs,
) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let (last_seq, torn_tail) = target.read_through(&session)?;
    if let Some(torn) = &torn_tail {
        warn(format!(
            "{}: replaying the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
            session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
        ));
    }
    let past_the_end = match (window.at, window.from) {
        (Some(at), _) if at > last_seq => Some(format!(
            "--at {at} is past the last seq {last_seq} of {}",
            session.label
        )),
        // A window that shows no event is a slip, not an empty answer.
        (_, Some(from)) if from > last_seq.max(1) => Some(format!(
            "--from {from} is past the last seq {last_seq} of {}",
            session.label
        )),
        _ => None,
    };
    if let Some(slip) = past_the_end {
        // What the log breaks outranks the slip (7 and 4 over 1), as in
        // `project --at`: the whole log is folded first, quietly.
        sessionlog_store::fold_through(
            || target.stream(&session),
            std::path::Path::new(&session.label),
            None,
            target.ends_in_seal(&session),
        )?;
        bail!(UsageError(slip));
    }
    if let (Some(from), Some(at)) = (window.from, window.at) {
        if from > at {
            bail!(UsageError(format!(
                "--from {from} is after --at {at}: the window shows no event"
            )));
        }
    }
    let defaults = defaults.defaults();
    let mut stream = target.stream(&session)?;
    let mut builder = TimelineBuilder::new(
        stream.header().clone(),
        stream.header_body(),
        stream.header_vocabulary_errors(),
        window,
        defaults,
    );
    let shown_last = window.at.map_or(last_seq, |at| at.min(last_seq));
    let mut printer = match json {
        true => Printer::Json(crate::terminal::stdout(Mode::Json)),
        false => Printer::Text(Box::new(TextPrinter::new(
            Painter::new(color),
            layout,
            shown_last,
            stream.header(),
        ))),
    };
    printer.entry(&builder.header_entry())?;
    // Only as many events as the first read found: the log may have grown
    // since, and what was checked is what is shown.
    while let Some(record) = stream.next_event()? {
        if builder.is_past(&record) || record.seq() > last_seq {
            break;
        }
        if let Some(entry) = builder.entry(&record) {
            printer.entry(&entry)?;
        }
    }
    let summary = builder.finish();
    printer.finish(&summary)?;
    Ok(summary.exit_code())
}

/// Builds a timeline one event at a time: the header's entry, then an
/// entry for each event shown, folding every event through the window's
/// end; what the whole timeline marks is counted as it goes.
pub struct TimelineBuilder {
    header: SessionHeader,
    header_violation: Option<String>,
    state: SessionState,
    view: View,
    window: Window,
    defaults: Defaults,
    /// Whether the next entry shown carries the projections whole.
    first_shown: bool,
    violations: usize,
    /// Whether the header carries one of them.
    header_breaks: bool,
    seal_failures: usize,
    /// How many of the violations are before the window (`--from`).
    hidden: usize,
    /// How many of those are seals that do not hold.
    hidden_seal_failures: usize,
    /// Own seal records that break a rule: no valid seal at all.
    invalid_own_seals: usize,
    seals: Vec<SealInfo>,
}

/// What a whole timeline marks, once built.
#[derive(Debug, Clone)]
pub struct TimelineSummary {
    /// The header.
    pub header: SessionHeader,
    /// How many entries carry a violation (seal failures included).
    pub violations: usize,
    /// Whether the header's is one of them.
    pub header_breaks: bool,
    /// How many of those are seals that do not hold.
    pub seal_failures: usize,
    /// How many of the violations (seal failures included) are before the
    /// window's first seq: folded, counted in the exit code, not shown.
    pub hidden: usize,
    /// How many of the hidden violations are seals that do not hold.
    pub hidden_seal_failures: usize,
    /// Own `seal` records that break a rule (their shape): no valid seal,
    /// so signed by no key a trust file lists.
    pub invalid_own_seals: usize,
    /// Every seal met (own or inherited), in log order.
    pub seals: Vec<SealInfo>,
    /// The last seq folded.
    pub last_seq: u64,
}

impl TimelineSummary {
    /// The exit code of what the timeline marks: 7 for a seal that does
    /// not hold, else 4 for a rule violation, else 0.
    pub fn exit_code(&self) -> u8 {
        findings_exit_code(self.violations, self.seal_failures)
    }
}

impl TimelineBuilder {
    /// A builder for the session of `header`; `defaults` fill in what the
    /// session leaves unset.
    pub fn new(
        header: SessionHeader,
        header_body: &str,
        header_vocabulary_errors: &[HeaderVocabularyError],
        window: Window,
        defaults: Defaults,
    ) -> TimelineBuilder {
        let state = SessionState::with_header_body(header.clone(), header_body);
        let view = View::of(&state, &defaults);
        let header_violation = (!header_vocabulary_errors.is_empty()).then(|| {
            header_vocabulary_errors
                .iter()
                .map(|error| {
                    format!(
                        "vocabulary: {}: {:?} is not a {} (expected {})",
                        error.field, error.value, error.what, error.expected
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        });
        TimelineBuilder {
            header,
            header_violation,
            state,
            view,
            window,
            defaults,
            // The header carries the projections at seq 0 when the timeline
            // starts there; otherwise the first event shown carries them
            // whole.
            first_shown: window.from.unwrap_or(1) > 1,
            violations: 0,
            header_breaks: false,
            seal_failures: 0,
            hidden: 0,
            hidden_seal_failures: 0,
            invalid_own_seals: 0,
            seals: Vec::new(),
        }
    }

    /// The header's entry (seq 0), the first of the timeline.
    pub fn header_entry(&mut self) -> Entry {
        let violation = self.header_violation.take();
        self.violations += usize::from(violation.is_some());
        self.header_breaks |= violation.is_some();
        Entry {
            seq: 0,
            ts: self.header.created_at,
            time: iso8601(self.header.created_at),
            event_type: "header".to_owned(),
            inherited: false,
            summary: header_summary(&self.header),
            authority: None,
            violation,
            projection: (!self.first_shown).then(|| self.view.clone()),
            kind: EntryKind::Header,
            child: None,
        }
    }

    /// Whether `record` is past the window's end (nothing after it is
    /// folded or shown).
    pub fn is_past(&self, record: &EventRecord) -> bool {
        self.window.at.is_some_and(|at| record.seq() > at)
    }

    /// Folds the next event; its entry when the window shows it.
    pub fn entry(&mut self, record: &EventRecord) -> Option<Entry> {
        let state = &self.state;
        let mut entry = describe(&self.header, record, |call_id| {
            state.call(call_id).map(|call| call.name.clone())
        });
        let applied = self.state.apply(record);
        if let Some(seal) = self
            .state
            .last_seal()
            .filter(|seal| seal.seq == record.seq())
        {
            self.seals.push(seal.clone());
        }
        if let Err(violation) = &applied {
            if violation.kind == ViolationKind::Seal {
                entry.kind = EntryKind::SealFailed;
                entry.summary = format!("SEAL FAILED: {}", entry.summary);
            } else if record.event_type() == EventType::Seal.as_str()
                && record.seq() > self.header.seed_length
            {
                self.invalid_own_seals += 1;
            }
        }
        entry.violation = applied
            .err()
            .map(|violation| format!("{} violation: {}", violation.kind, violation.message));
        let now = View::of(&self.state, &self.defaults);
        let changed = now != self.view;
        self.view = now;
        // Counted wherever they are: what the log breaks decides the exit
        // code, whichever part of it is shown.
        self.violations += usize::from(entry.violation.is_some());
        self.seal_failures += usize::from(entry.kind == EntryKind::SealFailed);
        if record.seq() < self.window.from.unwrap_or(1) {
            self.hidden += usize::from(entry.violation.is_some());
            self.hidden_seal_failures += usize::from(entry.kind == EntryKind::SealFailed);
            return None;
        }
        if changed || self.first_shown {
            entry.projection = Some(self.view.clone());
        }
        self.first_shown = false;
        Some(entry)
    }

    /// What the timeline marked.
    pub fn finish(self) -> TimelineSummary {
        TimelineSummary {
            header: self.header,
            violations: self.violations,
            header_breaks: self.header_breaks,
            seal_failures: self.seal_failures,
            hidden: self.hidden,
            hidden_seal_failures: self.hidden_seal_failures,
            invalid_own_seals: self.invalid_own_seals,
            seals: self.seals,
            last_seq: self.state.seq(),
        }
    }
}

/// The entry of one event, without violation or projection. `call_name`
/// gives the tool name of a started call (for denials).
pub fn describe(
    header: &SessionHeader,
    record: &EventRecord,
    call_name: impl Fn(&str) -> Option<String>,
) -> Entry {
    let mut entry = Entry {
        seq: record.seq(),
        ts: record.ts(),
        time: iso8601(record.ts()),
        event_type: record.event_type().to_owned(),
        inherited: record.seq() <= header.seed_length,
        summary: String::new(),
        authority: None,
        violation: None,
        projection: None,
        kind: EntryKind::Unknown,
        child: None,
    };
    let event = match Event::parse(record.event_type(), record.data()) {
        Ok(event) => event,
        Err(error) => {
            entry.kind = EntryKind::Malformed;
            entry.summary = format!(
                "malformed {}: {}",
                display(&error.path),
                display(&error.message)
            );
            return entry;
        }
    };
    let (kind, summary) = match event {
        Event::RequestHeader(request) => {
            let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
            (
                EntryKind::Request,
                format!(
                    "model request to {}/{}: approval {}, sandbox {}, tools [{}]",
                    display(&request.provider),
                    display(&request.model),
                    request.approval_policy,
                    request.sandbox_mode,
                    display(&tools.join(", "))
                ),
            )
        }
        Event::TurnStart(turn) => (
            EntryKind::Structure,
            format!("turn {} opens", display(&turn.turn_id)),
        ),
        Event::TurnEnd(turn) => (
            EntryKind::Structure,
            format!("turn {} closes", display(&turn.turn_id)),
        ),
        Event::StepStart(step) => (
            EntryKind::Structure,
            format!(
                "step {} opens in turn {}",
                display(&step.step_id),
                display(&step.turn_id)
            ),
        ),
        Event::StepEnd(step) => (
            EntryKind::Structure,
            format!("step {} closes", display(&step.step_id)),
        ),
        Event::Message(message) => {
            entry.authority = Some(message_authority(header, record.seq(), &message));
            let mut from = format!("{} via {}", message.role, display(&message.source.kind));
            if let Some(sender) = &message.source.sender_session_id {
                from.push_str(&format!(" from {}", display(sender)));
            }
            if let Some(name) = &message.source.name {
                from.push_str(&format!(" ({})", display(name)));
            }
            let mut summary = format!("{from}: \"{}\"", display(&message.text()));
            for part in &message.content {
                match part {
                    ContentPart::Text(_) => {}
                    ContentPart::Image(image) => summary.push_str(&format!(
                        " + image {} ({})",
                        display(image.name.as_deref().unwrap_or("unnamed")),
                        display(&image.media_type)
                    )),
                    ContentPart::Attachment(attachment) => summary.push_str(&format!(
                        " + attachment {}{}",
                        display(&attachment.name),
                        attachment
                            .size
                            .map_or(String::new(), |size| format!(" ({size} bytes)"))
                    )),
                }
            }
            (EntryKind::Message, summary)
        }
        Event::ToolStart(call) => {
            let mut summary = format!(
                "call {} {}({}) in step {}",
                display(&call.call_id),
                display(&call.name),
                display(call.arguments.get()),
                display(&call.step_id)
            );
            if let Some(parent) = &call.parent_call_id {
                summary.push_str(&format!(" inside call {}", display(parent)));
            }
            (EntryKind::Call, summary)
        }
        Event::ToolSettle(settle) => {
            let call = display(&settle.call_id);
            let name = call_name(&settle.call_id);
            let tool = name
                .as_deref()
                .map_or(String::new(), |name| format!(" ({})", display(name)));
            match (&settle.status, &settle.error) {
                (_, Some(error)) if error.code == AUTO_REVIEW_DENIED => {
                    let reason = error
                        .reason
                        .as_deref()
                        .map_or("no reason given".to_owned(), |r| {
                            format!("\"{}\"", display(r))
                        });
                    let notice = name.as_deref().map_or(String::new(), |name| {
                        format!(
                            "; the model saw: {}",
                            display(&sessionlog_projections::denial_notice(name))
                        )
                    });
                    (
                        EntryKind::Denial,
                        format!("DENIED by Auto review: call {call}{tool}: {reason}{notice}"),
                    )
                }
                (_, Some(error)) if error.code == AUTO_REVIEW_FAILED => (
                    EntryKind::Failed,
                    format!(
                        "Auto review FAILED (fail closed): call {call}{tool}: {}",
                        display(error.message.as_deref().unwrap_or(""))
                    ),
                ),
                (status, Some(error)) => (
                    EntryKind::Failed,
                    format!(
                        "call {call}{tool} settled {status}: {} {}{}",
                        display(&error.name),
                        display(&error.code),
                        error
                            .message
                            .as_deref()
                            .map_or(String::new(), |m| format!(": {}", display(m)))
                    ),
                ),
                (SettleStatus::Ok, None) => (
                    EntryKind::Settled,
                    format!(
                        "call {call}{tool} settled ok{}",
                        settle
                            .result
                            .as_ref()
                            .map_or(String::new(), |result| format!(
                                ": {}",
                                display(result.get())
                            ))
                    ),
                ),
                (status, None) => (
                    EntryKind::Failed,
                    format!("call {call}{tool} settled {status}"),
                ),
            }
        }
        Event::ApprovalPolicy(change) => (
            EntryKind::Switch,
            format!("approval policy set to {}", change.policy),
        ),
        Event::SandboxMode(change) => (
            EntryKind::Switch,
            format!("sandbox mode set to {}", change.mode),
        ),
        Event::PermissionPreset(change) => (
            EntryKind::Switch,
            format!("permission preset set to {}", change.preset),
        ),
        Event::ApprovalAsked(asked) => {
            let mut summary = format!(
                "approval {} asked for {}",
                display(&asked.request_id),
                display(&asked.tool)
            );
            if let Some(call) = &asked.call_id {
                summary.push_str(&format!(" (call {})", display(call)));
            }
            if let Some(reason) = &asked.reason {
                summary.push_str(&format!(": \"{}\"", display(reason)));
            }
            (EntryKind::ApprovalAsked, summary)
        }
        Event::ApprovalDecided(decided) => (
            if decided.outcome == ApprovalOutcome::AllowedOnce {
                EntryKind::ApprovalAllowed
            } else {
                EntryKind::ApprovalRefused
            },
            format!(
                "approval {} decided: {}",
                display(&decided.request_id),
                decided.outcome
            ),
        ),
        Event::Checkpoint(checkpoint) => {
            // A checkpoint is a fact (docs/EVENTS.md, "Authority"), as the
            // reviewer is shown it.
            entry.authority = Some(Authority::Fact);
            (
                EntryKind::Checkpoint,
                format!(
                    "checkpoint through seq {}: \"{}\"",
                    checkpoint.through_seq,
                    display(&checkpoint.summary)
                ),
            )
        }
        Event::ChildCreated(child) => {
            entry.child = Some(child.child_session_id.clone());
            (
                EntryKind::Child,
                format!(
                    "child session {} created ({})",
                    display(&child.child_session_id),
                    child.mode
                ),
            )
        }
        Event::Seal(seal) => {
            let inherited = record.seq() <= header.seed_length;
            // An inherited seal's signature is not checked in this log (it
            // was made over the parent's): its key is only named.
            let signed = seal
                .signature
                .as_ref()
                .map_or("unsigned".to_owned(), |signature| {
                    let key = short_key(&signature.key.to_string());
                    match inherited {
                        true => format!("naming {key} (not checked here)"),
                        false => format!("signed by {key}"),
                    }
                });
            let inherited = match inherited {
                true => " (inherited: it vouched for the parent)",
                false => "",
            };
            (
                EntryKind::Seal,
                format!(
                    "sealed through seq {}, {signed}{inherited}",
                    seal.through_seq
                ),
            )
        }
        Event::Unknown => (
            EntryKind::Unknown,
            format!("unknown type, kept as is: {}", display(record.data())),
        ),
    };
    entry.kind = kind;
    entry.summary = summary;
    entry
}

/// A public key shortened for a timeline line: `ed25519:` and the first
/// eight characters of its base64, then an ellipsis.
pub fn short_key(key: &str) -> String {
    match key.char_indices().nth(16) {
        Some((end, _)) => format!("{}…", &key[..end]),
        None => key.to_owned(),
    }
}

impl View {
    /// The projections of `state` under `defaults`.
    pub fn of(state: &SessionState, defaults: &Defaults) -> View {
        let projection = state.projection(defaults);
        View {
            preset: projection.preset,
            approval_policy: projection.approval_policy,
            sandbox_mode: projection.sandbox_mode,
            open_turn: projection.open_turn,
            open_step: projection.open_step,
            pending_approvals: projection.pending_approvals,
            notice: projection.notice,
        }
    }

    /// The view as (name, value) pairs for text and HTML.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("preset", self.preset.to_string()),
            ("approval", setting(&self.approval_policy)),
            ("sandbox", setting(&self.sandbox_mode)),
            (
                "turn",
                self.open_turn.as_deref().map_or("-".into(), display),
            ),
            (
                "step",
                self.open_step.as_deref().map_or("-".into(), display),
            ),
            (
                "pending",
                if self.pending_approvals.is_empty() {
                    "-".into()
                } else {
                    self.pending_approvals
                        .iter()
                        .map(|id| display(id))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
            ("notice", self.notice.as_deref().map_or("-".into(), display)),
        ]
    }
}

fn setting<T: std::fmt::Display>(setting: &Setting<T>) -> String {
    match &setting.override_value {
        Some(value) => format!("{} (override {value})", setting.effective),
        None => format!("{} (default)", setting.effective),
    }
}

fn header_summary(header: &SessionHeader) -> String {
    let origin = match &header.parent_session {
        Some(parent) => format!(
            "child of {parent} (seed {} events, depth {})",
            header.seed_length, header.delegation_depth
        ),
        None => "root session".to_owned(),
    };
    format!(
        "session {} — {origin}, cwd {}",
        header.id,
        display(&header.cwd)
    )
}

/// Standard output as `terminal` gives it.
type Stdout = Escaping<std::io::BufWriter<crate::terminal::Watched<std::io::StdoutLock<'static>>>>;

/// Where the entries of `replay` go as they are made.
enum Printer {
    /// One JSON object a line.
    Json(Stdout),
    /// The terminal timeline.
    Text(Box<TextPrinter>),
}

impl Printer {
    fn entry(&mut self, entry: &Entry) -> std::io::Result<()> {
        match self {
            Printer::Json(out) => {
                serde_json::to_writer(&mut *out, entry)?;
                out.write_all(b"\n")
            }
            Printer::Text(printer) => printer.entry(entry),
        }
    }

    fn finish(&mut self, summary: &TimelineSummary) -> std::io::Result<()> {
        match self {
            Printer::Json(out) => {
                // The entries carry what they break; what is before the
                // window is said on stderr, as the exit code counts it.
                if summary.hidden > 0 {
                    warn(format!(
                        "{} before the first seq shown (replay without --from marks {})",
                        crate::terminal::what_breaks(
                            summary.hidden as u64,
                            summary.hidden_seal_failures as u64,
                            0
                        ),
                        match summary.hidden {
                            1 => "it",
                            _ => "them",
                        }
                    ));
                }
                out.flush()
            }
            Printer::Text(printer) => printer.finish(summary),
        }
    }
}

/// The terminal timeline, printed an entry at a time.
struct TextPrinter {
    out: Stdout,
    painter: Painter,
    layout: Layout,
    seq_columns: usize,
    columns: usize,
    margin: String,
    /// The projections last printed.
    previous: Option<View>,
    /// The date of the last entry printed.
    day: Option<String>,
    /// For a child: its parent and `seedLength`, the events it inherited.
    seed: Option<(String, u64)>,
    /// Whether the last event printed was inherited (none printed yet).
    inherited: Option<bool>,
}

impl TextPrinter {
    /// A printer whose seq column fits `last_seq`, the last seq shown.
    fn new(painter: Painter, layout: Layout, last_seq: u64, header: &SessionHeader) -> TextPrinter {
        let seq_columns = last_seq.to_string().len().max(5);
        let indent = TIME_COLUMNS + 1 + seq_columns + 1 + TYPE_COLUMNS + 1;
        TextPrinter {
            out: crate::terminal::stdout(Mode::Text),
            painter,
            layout,
            seq_columns,
            columns: layout.width.saturating_sub(indent).max(MIN_TEXT_COLUMNS),
            margin: " ".repeat(indent),
            previous: None,
            day: None,
            seed: header
                .parent_session
                .as_ref()
                .filter(|_| header.seed_length > 0)
                .map(|parent| (parent.to_string(), header.seed_length)),
            inherited: None,
        }
    }

    fn entry(&mut self, entry: &Entry) -> std::io::Result<()> {
        let (out, painter, margin, columns) =
            (&mut self.out, self.painter, &self.margin, self.columns);
        let seq_columns = self.seq_columns;
        let (date, time) = entry.time.split_once('T').unwrap_or(("", &entry.time));
        // A child's inherited events and its own are told apart by a line
        // where one part starts: the parent did the first.
        if let Some((parent, seed_length)) = self.seed.as_ref().filter(|_| entry.seq > 0) {
            if self.inherited != Some(entry.inherited) {
                let part = match entry.inherited {
                    true => format!(
                        "══ inherited: the events 1–{seed_length} of parent session {parent}, \
                         as the fork copied them"
                    ),
                    false => format!("══ the session's own events, from seq {}", seed_length + 1),
                };
                painter.paint(out, Style::Dim, &part)?;
                writeln!(out)?;
                self.inherited = Some(entry.inherited);
                self.day = None;
            }
        }
        if self.day.as_deref() != Some(date) {
            painter.paint(out, Style::Dim, &format!("── {date} (UTC)"))?;
            writeln!(out)?;
            self.day = Some(date.to_owned());
        }
        painter.paint(out, Style::Dim, time.trim_end_matches('Z'))?;
        out.write_all(b" ")?;
        painter.paint(out, Style::Bold, &format!("{:>seq_columns$}", entry.seq))?;
        out.write_all(b" ")?;
        // A type longer than its column pushes the text to a line of its
        // own, so the text column stays straight.
        let event_type = format!("{:<TYPE_COLUMNS$}", entry.event_type);
        painter.paint(out, Style::of(entry.kind), &event_type)?;
        if console::measure_text_width(&event_type) > TYPE_COLUMNS {
            writeln!(out)?;
            out.write_all(margin.as_bytes())?;
        } else {
            out.write_all(b" ")?;
        }
        write_summary(out, entry, painter, self.layout, columns, margin)?;
        if let Some(violation) = &entry.violation {
            let text = format!("✗ {violation}");
            write_block(out, &text, Style::Violation, painter, columns, margin)?;
        }
        if let Some(view) = &entry.projection {
            let text = format!("⇒ {}", changed_fields(self.previous.as_ref(), view));
            write_block(out, &text, Style::Projection, painter, columns, margin)?;
            self.previous = Some(view.clone());
        }
        Ok(())
    }

    fn finish(&mut self, summary: &TimelineSummary) -> std::io::Result<()> {
        let out = &mut self.out;
        if summary.violations > 0 {
            let found = crate::terminal::what_breaks(
                summary.violations as u64,
                summary.seal_failures as u64,
                u64::from(summary.header_breaks),
            );
            let place = match (summary.violations - summary.hidden, summary.hidden) {
                (_, 0) => "marked ✗ above".to_owned(),
                (0, _) => "before the first seq shown: replay without --from marks them".to_owned(),
                (_, hidden) => format!(
                    "marked ✗ above; {hidden} of them before the first seq shown, \
                     which replay without --from marks"
                ),
            };
            self.painter
                .paint(out, Style::Violation, &format!("{found} ({place})"))?;
            writeln!(out)?;
        }
        out.flush()
    }
}

/// An entry's authority and summary, wrapped to `columns` under the text
/// column; without `--full`, clipped to [`SUMMARY_LINES`] lines with a
/// note of how many characters are left out.
fn write_summary<W: Write>(
    out: &mut Escaping<W>,
    entry: &Entry,
    painter: Painter,
    layout: Layout,
    columns: usize,
    margin: &str,
) -> std::io::Result<()> {
    let authority = entry.authority.map_or(String::new(), |a| format!("[{a}]"));
    let text = match authority.is_empty() {
        true => entry.summary.clone(),
        false => format!("{authority} {}", entry.summary),
    };
    // Clipped, one line more than is shown says whether there are more.
    let ranges = match layout.full {
        true => wrap(&text, columns),
        false => wrap_at_most(&text, columns, SUMMARY_LINES + 1),
    };
    let mut lines: Vec<&str> = ranges.iter().map(|range| &text[range.clone()]).collect();
    let mut left_out = 0;
    let clipped;
    if !layout.full && lines.len() > SUMMARY_LINES {
        let last = &ranges[SUMMARY_LINES - 1];
        let (kept, _) = split_at_columns(&text[last.clone()], columns.saturating_sub(1));
        left_out = text[last.start + kept.len()..].chars().count();
        clipped = format!("{kept}…");
        lines.truncate(SUMMARY_LINES);
        lines[SUMMARY_LINES - 1] = &clipped;
    }
    for (index, line) in lines.iter().enumerate() {
        if index > 0 {
            out.write_all(margin.as_bytes())?;
        }
        let rest = match line.strip_prefix(authority.as_str()) {
            Some(rest) if index == 0 && !authority.is_empty() => {
                painter.paint(out, Style::Authority, &authority)?;
                rest
            }
            _ => line,
        };
        painter.paint(out, Style::summary_of(entry.kind), rest)?;
        writeln!(out)?;
    }
    if left_out > 0 {
        out.write_all(margin.as_bytes())?;
        painter.paint(out, Style::Dim, &format!("+{left_out} characters (--full)"))?;
        writeln!(out)?;
    }
    Ok(())
}

/// `text` (a violation, the projections) wrapped under the text column,
/// its continuation lines indented past its mark.
fn write_block<W: Write>(
    out: &mut Escaping<W>,
    text: &str,
    style: Style,
    painter: Painter,
    columns: usize,
    margin: &str,
) -> std::io::Result<()> {
    for (index, range) in wrap(text, columns.saturating_sub(2))
        .into_iter()
        .enumerate()
    {
        out.write_all(margin.as_bytes())?;
        if index > 0 {
            out.write_all(b"  ")?;
        }
        painter.paint(out, style, &text[range])?;
        writeln!(out)?;
    }
    Ok(())
}

/// `text` broken into lines of at most `columns` terminal columns, as
/// byte ranges of `text`: at spaces where it can (the space at a break is
/// dropped), inside a word longer than a line where it must. Widths are
/// measured as a terminal shows them (a CJK character takes two columns).
pub fn wrap(text: &str, columns: usize) -> Vec<std::ops::Range<usize>> {
    wrap_at_most(text, columns, usize::MAX)
}

/// The first `limit` lines of [`wrap`] (all of them when there are fewer):
/// the lines past them are not looked for, so a summary clipped to a few
/// lines costs those lines, however long its text. Each line costs the
/// characters it holds: a word longer than a line is cut a line at a time.
fn wrap_at_most(text: &str, columns: usize, limit: usize) -> Vec<std::ops::Range<usize>> {
    let columns = columns.max(1);
    let mut lines = Vec::new();
    let mut start = 0;
    let mut used = 0;
    let mut started = false;
    let mut word_start = 0;
    for word in text.split(' ') {
        if lines.len() >= limit {
            return lines;
        }
        let at = word_start;
        word_start += word.len() + 1;
        // A word wider than a line is not measured whole: `split_at_columns`
        // takes a line of it at a time below.
        let width = match word.len() > 4 * columns {
            true => columns + 1,
            false => console::measure_text_width(word),
        };
        if started && used + 1 + width <= columns {
            used += 1 + width;
            continue;
        }
        if started {
            lines.push(start..at - 1);
        }
        started = true;
        let mut rest = at..at + word.len();
        loop {
            let (head, tail) = split_at_columns(&text[rest.clone()], columns);
            if tail.is_empty() || lines.len() >= limit {
                break;
            }
            lines.push(rest.start..rest.start + head.len());
            rest.start += head.len();
        }
        start = rest.start;
        used = match rest.len() > 4 * columns {
            true => columns,
            false => console::measure_text_width(&text[rest]),
        };
    }
    if started && lines.len() < limit {
        lines.push(start..text.len());
    }
    lines
}

/// `text` split after as many characters as fit in `columns` (at least
/// one, so that a split always advances).
fn split_at_columns(text: &str, columns: usize) -> (&str, &str) {
    let mut used = 0;
    let mut buffer = [0u8; 4];
    for (at, c) in text.char_indices() {
        let width = console::measure_text_width(c.encode_utf8(&mut buffer));
        if used + width > columns && at > 0 {
            return text.split_at(at);
        }
        used += width;
    }
    (text, "")
}

/// The fields that differ from `previous` (all of them the first time).
fn changed_fields(previous: Option<&View>, view: &View) -> String {
    let now = view.fields();
    let before = previous.map(View::fields);
    now.iter()
        .enumerate()
        .filter(|(index, field)| {
            before
                .as_ref()
                .is_none_or(|before| before[*index] != **field)
        })
        .map(|(_, (name, value))| format!("{name} {value}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// ANSI styles, written by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// No styling.
    Plain,
    /// Faint.
    Dim,
    /// Bold.
    Bold,
    /// Cyan: messages.
    Cyan,
    /// Blue: calls.
    Blue,
    /// Green: success.
    Green,
    /// Yellow: approvals asked, switches.
    Yellow,
    /// Magenta: checkpoints and children.
    Magenta,
    /// Bold red: denials and refusals.
    Alarm,
    /// Red: violations.
    Violation,
    /// Dim green: projections.
    Projection,
    /// Bold cyan: authorities.
    Authority,
}

impl Style {
    fn of(kind: EntryKind) -> Style {
        match kind {
            EntryKind::Header => Style::Bold,
            EntryKind::Request | EntryKind::Structure => Style::Dim,
            EntryKind::Message => Style::Cyan,
            EntryKind::Call => Style::Blue,
            EntryKind::Settled | EntryKind::ApprovalAllowed => Style::Green,
            EntryKind::Switch | EntryKind::ApprovalAsked => Style::Yellow,
            EntryKind::Checkpoint | EntryKind::Child => Style::Magenta,
            EntryKind::Seal => Style::Green,
            EntryKind::Denial
            | EntryKind::ApprovalRefused
            | EntryKind::Failed
            | EntryKind::SealFailed => Style::Alarm,
            EntryKind::Unknown | EntryKind::Malformed => Style::Dim,
        }
    }

    fn summary_of(kind: EntryKind) -> Style {
        match kind {
            EntryKind::Denial | EntryKind::ApprovalRefused | EntryKind::SealFailed => Style::Alarm,
            EntryKind::ApprovalAsked => Style::Yellow,
            EntryKind::Header => Style::Bold,
            EntryKind::Request
            | EntryKind::Structure
            | EntryKind::Message
            | EntryKind::Call
            | EntryKind::Settled
            | EntryKind::Failed
            | EntryKind::Switch
            | EntryKind::ApprovalAllowed
            | EntryKind::Checkpoint
            | EntryKind::Child
            | EntryKind::Seal
            | EntryKind::Unknown
            | EntryKind::Malformed => Style::Plain,
        }
    }

    fn code(self) -> &'static str {
        match self {
            Style::Plain => "",
            Style::Dim => "2",
            Style::Bold => "1",
            Style::Cyan => "36",
            Style::Blue => "34",
            Style::Green => "32",
            Style::Yellow => "33",
            Style::Magenta => "35",
            Style::Alarm => "1;31",
            Style::Violation => "31",
            Style::Projection => "2;32",
            Style::Authority => "1;36",
        }
    }
}

/// Paints text with ANSI codes, or leaves it alone.
#[derive(Debug, Clone, Copy)]
pub struct Painter {
    enabled: bool,
}

impl Painter {
    /// Colour when `choice` says so: `auto` means standard output is a
    /// terminal and `NO_COLOR` is unset or empty.
    pub fn new(choice: ColorChoice) -> Painter {
        let enabled = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
                    && crate::terminal::stdout_is_terminal()
            }
        };
        Painter { enabled }
    }

    /// Writes `text` in `style` to `out`: the text escaped there, the
    /// colour codes beside it.
    pub fn paint<W: Write>(
        self,
        out: &mut Escaping<W>,
        style: Style,
        text: &str,
    ) -> std::io::Result<()> {
        out.paint(self.enabled, style.code(), text)
    }
}

/// `text` with control characters and bidirectional overrides escaped, so
/// that log text can neither move the cursor nor reorder what is shown, nor
/// break a line ([`shown`](crate::terminal::shown)).
pub fn display(text: &str) -> String {
    crate::terminal::shown(text).into_owned()
}

/// [`display`], clipped to `max_chars` with an ellipsis.
pub fn clip(text: &str, max_chars: usize) -> String {
    let shown = display(text);
    if shown.chars().count() <= max_chars {
        return shown;
    }
    let mut clipped: String = shown.chars().take(max_chars.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

/// Unix milliseconds as ISO-8601 UTC (`2024-05-01T12:00:00.000Z`).
pub fn iso8601(ms: u64) -> String {
    let seconds = ms / 1000;
    let millis = ms % 1000;
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapped(text: &str, columns: usize) -> Vec<&str> {
        wrap(text, columns)
            .into_iter()
            .map(|range| &text[range])
            .collect()
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_inside_only_an_overlong_word() {
        assert_eq!(
            wrapped("one two three four", 9),
            ["one two", "three", "four"]
        );
        assert_eq!(wrapped("abcdefghij k", 4), ["abcd", "efgh", "ij k"]);
        assert_eq!(wrapped("", 10), [""]);
        // Two columns a character: four characters fill eight columns.
        assert_eq!(wrapped("日本語のテキスト", 8), ["日本語の", "テキスト"]);
        for columns in 1..12 {
            for line in wrapped("a long line: with words, of sizes; varied", columns) {
                assert!(
                    console::measure_text_width(line) <= columns,
                    "{line:?} > {columns}"
                );
            }
        }
    }

    #[test]
    fn wrapping_at_most_n_lines_gives_the_first_n_lines_of_the_whole() {
        let long_word = "x".repeat(5_000);
        let texts = [
            "one two three four five six seven eight nine ten".to_owned(),
            format!("a {long_word} b c"),
            format!("{long_word} {long_word}"),
            "日本語のテキスト 日本語のテキスト".to_owned(),
            String::new(),
        ];
        for text in &texts {
            for columns in [1, 3, 8, 80] {
                let whole = wrap(text, columns);
                for limit in 0..8 {
                    assert_eq!(
                        wrap_at_most(text, columns, limit),
                        whole[..limit.min(whole.len())],
                        "{columns} columns, {limit} lines"
                    );
                }
            }
        }
        // A text of one word of 20 MB: the first lines only are cut.
        let huge = "y".repeat(20_000_000);
        let lines = wrap_at_most(&huge, 80, 5);
        assert_eq!(lines.len(), 5);
        assert!(lines.iter().all(|line| line.len() == 80));
    }

    #[test]
    fn times_are_iso8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn log_text_cannot_drive_the_terminal() {
        assert_eq!(display("a\x1b[31mb\nc"), "a\\u{1b}[31mb\\nc");
        assert_eq!(display("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abcd", 4), "abcd");
    }

    #[test]
    fn painting_is_off_when_disabled() {
        let painted = |enabled: bool, text: &str| {
            let mut bytes = Vec::new();
            {
                let mut out = Escaping::new(&mut bytes, Mode::Text);
                Painter { enabled }
                    .paint(&mut out, Style::Alarm, text)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            String::from_utf8(bytes).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(painted(false, "x"), "x");
        assert_eq!(painted(true, "x"), "\x1b[1;31mx\x1b[0m");
        // The painted text is escaped, the painter's codes are not.
        assert_eq!(painted(true, "\x1b[8m"), "\x1b[1;31m\\u{1b}[8m\x1b[0m");
    }
}
