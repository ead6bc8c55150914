//! `sessionlog review-audit`: ask the reviewer again about every call a
//! session made under Auto, and show where today's answer differs from the
//! decision the log recorded.
//!
//! The log is read once and folded once to find the calls (own
//! `tool/start`s made while the preset, as projected just before them with
//! the configuration given, was `auto`) and what was recorded of each (a settle with
//! `AUTO_REVIEW_DENIED`, one with `AUTO_REVIEW_FAILED`, or anything else:
//! allowed). A second fold over the same events in memory rebuilds each
//! request from the snapshot through the event before its call, with the
//! call's own data as the pending action, and asks. Nothing is written.

use std::collections::{HashMap, HashSet};

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::value::RawValue;
use sessionlog_projections::{
    build_review_request_from_fragments, Decision, Defaults, PendingAction, PresetView,
    ReviewError, ReviewFragments, SessionState, Violation, ViolationKind, AUTO_REVIEW_DENIED,
    AUTO_REVIEW_FAILED,
};
use sessionlog_schema::{Event, Preset};
use sessionlog_store::{ask_reviewer, Reviewer, Snapshot, Verdict};

use crate::cli::{ReviewerArgs, SessionArgs};
use crate::commands::replay::display;
use crate::commands::review::reviewer;
use crate::target::Target;
use crate::{exit, progress, Exit};

/// What `review-audit --json` prints, and `report --audit` reads.
#[derive(Debug, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    /// The session audited.
    pub session: String,
    /// The `--model` asked, or null for each request's own model.
    pub model: Option<String>,
    /// One row per call, in log order.
    pub rows: Vec<Row>,
    /// The counts.
    pub summary: Summary,
}

/// One call asked again.
#[derive(Debug, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The seq of its `tool/start`.
    pub seq: u64,
    /// Its callId.
    pub call_id: String,
    /// Its tool's name.
    pub name: String,
    /// What the log recorded.
    pub recorded: Recorded,
    /// Today's answer: the decision object, or `{error, message}`.
    pub now: Box<RawValue>,
    /// Whether today's answer is what the log recorded.
    pub agree: bool,
}

/// What the log recorded of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recorded {
    /// Settled with `AUTO_REVIEW_DENIED`.
    Denied,
    /// Settled with `AUTO_REVIEW_FAILED`.
    Failed,
    /// Anything else: it ran (or is still running).
    Allowed,
}

/// The counts of an audit.
#[derive(Debug, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Calls asked.
    pub calls: usize,
    /// Rows that agree.
    pub agreements: usize,
    /// Recorded allowed, denied now.
    pub allowed_then_denied_now: usize,
    /// Recorded denied, allowed now.
    pub denied_then_allowed_now: usize,
    /// Rows whose answer now is an error (no decision).
    pub failures: usize,
    /// Rows that do not agree.
    pub disagreements: usize,
}

/// A call to ask about, found by the first fold.
struct Planned {
    seq: u64,
    call_id: String,
    recorded: Recorded,
}

/// Runs `review-audit`.
pub fn run(
    args: &SessionArgs,
    reviewer_args: &ReviewerArgs,
    (max_bytes, defaults): (usize, &Defaults),
    json: bool,
    quiet: bool,
) -> Result<u8> {
    let reviewer = reviewer(reviewer_args)?;
    let target = Target::open(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let snapshot = target.snapshot(&session)?;
    if let Some(torn) = &snapshot.torn_tail {
        crate::warn(format!(
            "{}: auditing the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {})",
            session.label, torn.bytes, torn.position.line, torn.position.offset
        ));
    }
    // A seal that does not hold anywhere in the log outranks a header out
    // of vocabulary or a broken rule (exit 7 over 4).
    let planned = plan(&snapshot, defaults);
    let refused = |code, message: String| Exit {
        code,
        message: format!(
            "{}: {message}; run `sessionlog verify` on it",
            session.label
        ),
    };
    if let Err(violation) = &planned {
        if violation.kind == ViolationKind::Seal {
            bail!(refused(exit::SEAL, violation.to_string()));
        }
    }
    if let Some(error) = snapshot.header_vocabulary_errors.first() {
        bail!(refused(exit::RULE, error.to_string()));
    }
    let Plan {
        calls: planned,
        settled_by_reviewer_unaudited,
    } = planned.map_err(|violation| refused(exit::RULE, violation.to_string()))?;
    if let Some((seq, call_id)) = settled_by_reviewer_unaudited.first() {
        crate::warn(format!(
            "{}: {} settled by the reviewer ({AUTO_REVIEW_DENIED} or {AUTO_REVIEW_FAILED}), \
             such as seq {seq} (callId {}), not made under `auto` as the preset projects \
             with --default-approval {} --default-sandbox {}: not audited; give the \
             configuration the session ran with",
            session.label,
            crate::terminal::counted(settled_by_reviewer_unaudited.len() as u64, "own call"),
            display(call_id),
            defaults.approval.as_str(),
            defaults.sandbox.as_str(),
        ));
    }
    let bar = progress::bar(quiet, "review-audit");
    bar.set_length(planned.len() as u64);
    let rows = ask_each(
        &snapshot,
        &planned,
        &reviewer,
        (reviewer_args.model.as_deref(), max_bytes),
        || bar.inc(1),
    );
    bar.finish_and_clear();
    let audit = Audit {
        session: snapshot.header.id.to_string(),
        model: reviewer_args.model.clone(),
        summary: summary(&rows),
        rows,
    };
    if json {
        crate::terminal::print_json_line(&serde_json::to_string(&audit)?)?;
    } else {
        print_text(&audit)?;
    }
    Ok(exit_code(&audit))
}

/// 5 when no call got a decision, else 8 when one differs, else 0.
fn exit_code(audit: &Audit) -> u8 {
    if !audit.rows.is_empty() && audit.summary.failures == audit.rows.len() {
        exit::REVIEW
    } else if audit.summary.disagreements > 0 {
        exit::AUDIT_DIFFERS
    } else {
        exit::OK
    }
}

/// What the first fold found.
struct Plan {
    /// The calls to ask about.
    calls: Vec<Planned>,
    /// Own calls not made under `auto` (as projected with the defaults
    /// given) that a reviewer's settle closed: the seq and callId of each.
    settled_by_reviewer_unaudited: Vec<(u64, String)>,
}

/// The calls to ask about and what was recorded of each; a rule violation
/// refuses the audit: the first seal that does not hold, else the first
/// violation (the fold reads on past a broken rule to find such a seal).
fn plan(snapshot: &Snapshot, defaults: &Defaults) -> Result<Plan, Violation> {
    let mut state = SessionState::with_header_body(snapshot.header.clone(), &snapshot.header_body);
    let mut calls = Vec::new();
    let mut unaudited = HashMap::new();
    let mut denied = HashSet::new();
    let mut failed = HashSet::new();
    let mut first_violation = None;
    for record in &snapshot.events {
        let event = match state.check(record) {
            Ok(event) => event,
            Err(violation) if violation.kind == ViolationKind::Seal => return Err(violation),
            Err(violation) => {
                first_violation.get_or_insert(violation);
                // Effects skipped, the seq and the chain carried on, as
                // `verify` reads on.
                let _ = state.apply(record);
                continue;
            }
        };
        match &event {
            Event::ToolStart(start) if is_audited(&state, record.seq(), defaults) => {
                calls.push((record.seq(), start.call_id.clone()));
            }
            Event::ToolStart(start) if state.is_own(record.seq()) => {
                unaudited.insert(start.call_id.clone(), record.seq());
            }
            Event::ToolSettle(settle) => match settle.error.as_ref().map(|e| e.code.as_str()) {
                Some(AUTO_REVIEW_DENIED) => {
                    denied.insert(settle.call_id.clone());
                }
                Some(AUTO_REVIEW_FAILED) => {
                    failed.insert(settle.call_id.clone());
                }
                _ => {}
            },
            _ => {}
        }
        state.apply_checked(record, event);
    }
    if let Some(violation) = first_violation {
        return Err(violation);
    }
    let mut settled_by_reviewer_unaudited: Vec<(u64, String)> = unaudited
        .into_iter()
        .filter(|(call_id, _)| denied.contains(call_id) || failed.contains(call_id))
        .map(|(call_id, seq)| (seq, call_id))
        .collect();
    settled_by_reviewer_unaudited.sort_unstable();
    let calls = calls
        .into_iter()
        .map(|(seq, call_id)| Planned {
            seq,
            recorded: if denied.contains(&call_id) {
                Recorded::Denied
            } else if failed.contains(&call_id) {
                Recorded::Failed
            } else {
                Recorded::Allowed
            },
            call_id,
        })
        .collect();
    Ok(Plan {
        calls,
        settled_by_reviewer_unaudited,
    })
}

/// Whether the event at `seq` (not folded yet into `state`) is own and
/// made while the preset was `auto`, as projected with the configured
/// `defaults`.
fn is_audited(state: &SessionState, seq: u64, defaults: &Defaults) -> bool {
    state.is_own(seq) && state.preset(defaults) == PresetView::Named(Preset::Auto)
}

/// Folds `events` again, asking `reviewer` at each planned call (`model`
/// and a request limit of `max_bytes`).
fn ask_each(
    snapshot: &Snapshot,
    planned: &[Planned],
    reviewer: &dyn Reviewer,
    (model, max_bytes): (Option<&str>, usize),
    mut asked: impl FnMut(),
) -> Vec<Row> {
    let at: HashMap<u64, &Planned> = planned.iter().map(|call| (call.seq, call)).collect();
    let events = &snapshot.events;
    let mut state = SessionState::with_header_body(snapshot.header.clone(), &snapshot.header_body);
    let mut fragments = ReviewFragments::new();
    let mut rows = Vec::with_capacity(planned.len());
    for (index, record) in events.iter().enumerate() {
        // `plan` checked every event; a refusal here is a broken invariant.
        let event = match state.check(record) {
            Ok(event) => event,
            Err(violation) => unreachable!("checked before: {violation}"),
        };
        if let (Some(call), Event::ToolStart(start)) = (at.get(&record.seq()), &event) {
            let pending = PendingAction::from_tool_start(start);
            let now = build_review_request_from_fragments(
                &state,
                &fragments,
                &events[..index],
                &pending,
                max_bytes,
            )
            .map(|request| ask_reviewer(reviewer, &request, model, &start.call_id));
            rows.push(row(call, start.name.clone(), now));
            asked();
        }
        state.apply_checked(record, event);
        fragments.absorb(&state, std::slice::from_ref(record));
    }
    rows
}

/// A row: `now` is the decision, or the error (a reviewer failure, or a
/// request that failed closed); an error agrees only with a recorded
/// failure.
fn row(call: &Planned, name: String, now: Result<Verdict, ReviewError>) -> Row {
    let (now, agree) = match &now {
        Ok(Verdict::Decided(decision)) => (
            serde_json::value::to_raw_value(decision),
            matches!(
                (call.recorded, decision.decision),
                (Recorded::Allowed, Decision::Allow) | (Recorded::Denied, Decision::Deny)
            ),
        ),
        Ok(Verdict::Failed(failure)) => (
            serde_json::value::to_raw_value(&ErrorNow {
                error: AUTO_REVIEW_FAILED,
                message: &failure.message,
            }),
            call.recorded == Recorded::Failed,
        ),
        Err(error) => (
            serde_json::value::to_raw_value(&ErrorNow {
                error: error.code.as_str(),
                message: &error.message,
            }),
            call.recorded == Recorded::Failed,
        ),
    };
    // A decision and an error object of strings always serialize.
    let now = now.unwrap_or_else(|error| unreachable!("{error}"));
    Row {
        seq: call.seq,
        call_id: call.call_id.clone(),
        name,
        recorded: call.recorded,
        now,
        agree,
    }
}

fn summary(rows: &[Row]) -> Summary {
    let mut summary = Summary {
        calls: rows.len(),
        ..Summary::default()
    };
    for row in rows {
        let now = now_decision(&row.now);
        if row.agree {
            summary.agreements += 1;
        } else {
            summary.disagreements += 1;
        }
        match (row.recorded, now) {
            (Recorded::Allowed, Some(Decision::Deny)) => summary.allowed_then_denied_now += 1,
            (Recorded::Denied, Some(Decision::Allow)) => summary.denied_then_allowed_now += 1,
            (_, None) => summary.failures += 1,
            _ => {}
        }
    }
    summary
}

/// What `now` holds when the reviewer gave no decision.
#[derive(Serialize)]
struct ErrorNow<'a> {
    error: &'a str,
    message: &'a str,
}

/// The decision of a row's `now`, `None` for an error.
pub fn now_decision(now: &RawValue) -> Option<Decision> {
    match serde_json::from_str::<NowDecision>(now.get()) {
        Ok(decision) if decision.decision == "allow" => Some(Decision::Allow),
        Ok(decision) if decision.decision == "deny" => Some(Decision::Deny),
        _ => None,
    }
}

/// A row's answer now, in words.
pub fn describe_now(now: &RawValue) -> String {
    match serde_json::from_str::<NowDecision>(now.get()) {
        Ok(decision) => {
            let mut text = format!("{} ({} risk)", decision.decision, decision.risk);
            if let Some(reason) = decision.reason {
                text.push_str(": ");
                text.push_str(&reason);
            }
            text
        }
        Err(_) => {
            let error: serde_json::Value = serde_json::from_str(now.get()).unwrap_or_default();
            format!(
                "no decision ({}): {}",
                error["error"].as_str().unwrap_or("?"),
                error["message"].as_str().unwrap_or("")
            )
        }
    }
}

/// A decision object read back from JSON (for display only).
#[derive(serde::Deserialize)]
struct NowDecision {
    risk: String,
    decision: String,
    reason: Option<String>,
}

impl Recorded {
    /// The spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Recorded::Denied => "denied",
            Recorded::Failed => "failed",
            Recorded::Allowed => "allowed",
        }
    }
}

fn print_text(audit: &Audit) -> std::io::Result<()> {
    for row in &audit.rows {
        crate::outln!(
            "seq {:>5}  {}  {}  recorded {}, now {}{}",
            row.seq,
            display(&row.call_id),
            display(&row.name),
            row.recorded.as_str(),
            display(&describe_now(&row.now)),
            if row.agree { "" } else { "  DIFFERS" }
        )?;
    }
    let summary = &audit.summary;
    crate::outln!(
        "{}: {} call{} asked, {} agree, {} allowed then denied now, {} denied then allowed now, {} without a decision now",
        display(&audit.session),
        summary.calls,
        if summary.calls == 1 { "" } else { "s" },
        summary.agreements,
        summary.allowed_then_denied_now,
        summary.denied_then_allowed_now,
        summary.failures
    )
}
