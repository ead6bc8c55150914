//! The reviewer's request: one compact JSON object built from the session's
//! full snapshot and the pending action (SPEC §8).
//!
//! The request is the only thing the reviewer sees, so what it leaves out is
//! as important as what it holds: assistant text, reasoning, injected context,
//! tool results and every message of an excluded source never enter it, and
//! messages keep the authority their `source.kind` gives them, never more.
//! It is deterministic to the byte (fixed member order, raw JSON emitted as
//! logged) and never truncated: when it does not fit, it fails closed.
//!
//! A writer that already holds the validated fold of the snapshot calls
//! [`build_review_request_for_state`], which parses only the events the
//! request needs: every `tool/start`, the messages and the checkpoint of the
//! compaction surface, and the latest `request/header`. Everything else is
//! skipped by comparing the event type string.

use std::borrow::Cow;
use std::io;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use sessionlog_schema::{
    compact_json, ContentPart, Event, EventRecord, EventType, Message, SessionHeader,
};

use super::action::PendingAction;
use super::error::{ReviewError, ReviewErrorCode};
use super::policy::REVIEW_POLICY;
use super::strict::{object_members, Members};
use crate::{fold, message_authority, Authority, SessionState};

/// Builds the reviewer's request for `pending` from the snapshot `header` +
/// `events` (its good prefix), after folding and validating all of it.
///
/// Fails closed with the first applicable [`ReviewErrorCode`]; the request
/// is never longer than `max_bytes` (see [`DEFAULT_MAX_REQUEST_BYTES`]).
///
/// [`DEFAULT_MAX_REQUEST_BYTES`]: super::DEFAULT_MAX_REQUEST_BYTES
pub fn build_review_request(
    header: &SessionHeader,
    events: &[EventRecord],
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    let (state, violations) = fold(header.clone(), events);
    if let Some(first) = violations.first() {
        return Err(ReviewError::new(
            ReviewErrorCode::InvalidLog,
            format!(
                "the snapshot breaks the rules ({} violation{}), first at {first}; run `sessionlog verify` on it",
                violations.len(),
                if violations.len() == 1 { "" } else { "s" },
            ),
        ));
    }
    build_review_request_for_state(&state, events, pending, max_bytes)
}

/// Builds the reviewer's request for `pending` when `state` is already the
/// validated fold of exactly `events` (an open session's writer holds it).
///
/// Skips re-validation and parses only the events the request needs; a
/// `state` that is not the clean fold of `events` is `INVALID_LOG`.
pub fn build_review_request_for_state(
    state: &SessionState,
    events: &[EventRecord],
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    check_state_matches(state, events)?;
    check_action_shape(pending)?;
    let request_header = latest_request_header(state, events)?;
    let open_step = check_step(state, pending)?;
    check_call_is_new(state, pending)?;
    let (description, parameters) = match &pending.parent_call_id {
        Some(parent_call_id) => {
            check_parent_call(state, parent_call_id, open_step)?;
            match &pending.schema {
                Some(schema) => (schema.description.as_str(), schema.parameters.as_ref()),
                // check_action_shape refused an inner call without a schema.
                None => return Err(missing_schema()),
            }
        }
        None => {
            let tool = native_tool(&request_header, &pending.name)?;
            (tool.description.as_str(), tool.parameters.as_ref())
        }
    };

    let surface = surface(state, events)?;
    // The history holds about the bytes of the data it shows: write the
    // request into one buffer of that size instead of growing it.
    let estimated_size = REVIEW_POLICY.len() + surface.data_bytes + 4096;
    let request = Request {
        model: Model {
            provider: &request_header.provider,
            model: &request_header.model,
        },
        partitions: Partitions {
            review_policy: REVIEW_POLICY,
            environment: Environment {
                cwd: &state.header().cwd,
            },
            project_instructions: surface.instructions,
            filtered_history: surface.history,
            pending_action: PendingView {
                call_id: &pending.call_id,
                name: &pending.name,
                description,
                parameters: compact(parameters)?,
                arguments: compact(&pending.arguments)?,
            },
        },
    };
    serialize_within(&request, estimated_size, max_bytes)
}

#[derive(Serialize)]
struct Request<'a> {
    model: Model<'a>,
    partitions: Partitions<'a>,
}

#[derive(Serialize)]
struct Model<'a> {
    provider: &'a str,
    model: &'a str,
}

#[derive(Serialize)]
struct Partitions<'a> {
    #[serde(rename = "REVIEW_POLICY")]
    review_policy: &'static str,
    #[serde(rename = "ENVIRONMENT")]
    environment: Environment<'a>,
    #[serde(rename = "PROJECT_INSTRUCTIONS")]
    project_instructions: Vec<Instruction>,
    #[serde(rename = "FILTERED_HISTORY")]
    filtered_history: Vec<HistoryEntry<'a>>,
    #[serde(rename = "PENDING_ACTION")]
    pending_action: PendingView<'a>,
}

#[derive(Serialize)]
struct Environment<'a> {
    cwd: &'a str,
}

#[derive(Serialize)]
struct Instruction {
    source: Option<String>,
    text: String,
    role: Authority,
}

#[derive(Serialize)]
#[serde(untagged)]
enum HistoryEntry<'a> {
    Message(MessageEntry<'a>),
    Checkpoint(CheckpointEntry),
    Call(CallEntry<'a>),
}

#[derive(Serialize)]
struct MessageEntry<'a> {
    seq: u64,
    kind: &'static str,
    authority: Authority,
    text: String,
    attachments: Vec<LoggedPart<'a>>,
}

#[derive(Serialize)]
struct CheckpointEntry {
    seq: u64,
    kind: &'static str,
    authority: Authority,
    text: String,
}

#[derive(Serialize)]
struct CallEntry<'a> {
    seq: u64,
    kind: &'static str,
    name: Cow<'a, str>,
    arguments: Cow<'a, RawValue>,
    inherited: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PendingView<'a> {
    call_id: &'a str,
    name: &'a str,
    description: &'a str,
    parameters: Cow<'a, RawValue>,
    arguments: Cow<'a, RawValue>,
}

/// An image or attachment part as logged, its members in their order,
/// without the inline `data`.
struct LoggedPart<'a>(Members<'a>);

impl Serialize for LoggedPart<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, &compact_or_as_is(value))?;
        }
        map.end()
    }
}

/// The fields of a `tool/start` the history shows.
#[derive(Deserialize)]
struct CallFacts<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    arguments: &'a RawValue,
}

/// The content of a `message`, each part raw.
#[derive(Deserialize)]
struct RawContent<'a> {
    #[serde(borrow)]
    content: Vec<&'a RawValue>,
}

/// What the compaction surface and the whole log's calls contribute.
struct Surface<'a> {
    instructions: Vec<Instruction>,
    history: Vec<HistoryEntry<'a>>,
    /// The bytes of `data` of the events read, to size the output.
    data_bytes: usize,
}

fn invalid_log(message: String) -> ReviewError {
    ReviewError::new(ReviewErrorCode::InvalidLog, message)
}

fn missing_schema() -> ReviewError {
    ReviewError::new(
        ReviewErrorCode::MissingSchema,
        "an inner call (with parentCallId) must bring the frozen schema {description, parameters} of its tool",
    )
}

/// `state` must be the clean fold of exactly `events`, numbered 1..=n.
fn check_state_matches(state: &SessionState, events: &[EventRecord]) -> Result<(), ReviewError> {
    if state.violation_count() > 0 {
        return Err(invalid_log(format!(
            "the session's fold refused {} event(s); run `sessionlog verify` on it",
            state.violation_count()
        )));
    }
    let last_seq = events.last().map_or(0, EventRecord::seq);
    if state.seq() != last_seq || events.len() as u64 != last_seq {
        return Err(invalid_log(format!(
            "the fold is at seq {} but the snapshot holds {} events ending at seq {last_seq}",
            state.seq(),
            events.len()
        )));
    }
    Ok(())
}

fn check_action_shape(pending: &PendingAction) -> Result<(), ReviewError> {
    pending.check_raw_values()?;
    match (&pending.parent_call_id, &pending.schema) {
        (None, Some(_)) => Err(ReviewError::new(
            ReviewErrorCode::InvalidAction,
            format!(
                "native call {:?} (no parentCallId) must not bring a schema: its description and parameters come from the latest request/header",
                pending.call_id
            ),
        )),
        (Some(_), None) => Err(missing_schema()),
        (None, None) | (Some(_), Some(_)) => Ok(()),
    }
}

/// The event at `seq`, found by index in a snapshot numbered 1..=n.
fn record_at(events: &[EventRecord], seq: u64) -> Result<&EventRecord, ReviewError> {
    usize::try_from(seq)
        .ok()
        .and_then(|seq| seq.checked_sub(1))
        .and_then(|index| events.get(index))
        .filter(|record| record.seq() == seq)
        .ok_or_else(|| invalid_log(format!("the snapshot has no event at seq {seq}")))
}

fn latest_request_header(
    state: &SessionState,
    events: &[EventRecord],
) -> Result<sessionlog_schema::RequestHeader, ReviewError> {
    let Some(seq) = state.latest_request_header_seq() else {
        return Err(ReviewError::new(
            ReviewErrorCode::NoRequestHeader,
            "the log has no request/header: the reviewer's model and the tool definitions come from the latest one",
        ));
    };
    let record = record_at(events, seq)?;
    match Event::parse(record.event_type(), record.data()) {
        Ok(Event::RequestHeader(header)) => Ok(header),
        Ok(_) => Err(invalid_log(format!(
            "seq {seq} is a {}, not the request/header the fold recorded",
            record.event_type()
        ))),
        Err(error) => Err(invalid_log(format!("seq {seq}: {error}"))),
    }
}

fn check_step<'s>(
    state: &'s SessionState,
    pending: &PendingAction,
) -> Result<&'s str, ReviewError> {
    let Some(open_step) = state.open_step() else {
        return Err(ReviewError::new(
            ReviewErrorCode::NoOpenStep,
            format!(
                "call {:?} names step {:?} but no step is open",
                pending.call_id, pending.step_id
            ),
        ));
    };
    if pending.step_id != open_step {
        return Err(ReviewError::new(
            ReviewErrorCode::StepMismatch,
            format!(
                "call {:?} names step {:?} but the open step is {open_step:?}",
                pending.call_id, pending.step_id
            ),
        ));
    }
    Ok(open_step)
}

fn check_call_is_new(state: &SessionState, pending: &PendingAction) -> Result<(), ReviewError> {
    match state.call(&pending.call_id) {
        Some(earlier) => Err(ReviewError::new(
            ReviewErrorCode::DuplicateCallId,
            format!(
                "callId {:?} is already used by the tool/start at seq {}",
                pending.call_id, earlier.seq
            ),
        )),
        None => Ok(()),
    }
}

fn check_parent_call(
    state: &SessionState,
    parent_call_id: &str,
    open_step: &str,
) -> Result<(), ReviewError> {
    let unknown = |why: String| {
        ReviewError::new(
            ReviewErrorCode::UnknownParentCall,
            format!("parentCallId {parent_call_id:?} {why}"),
        )
    };
    let Some(parent) = state.call(parent_call_id) else {
        return Err(unknown("names no started call".to_owned()));
    };
    if !parent.own {
        return Err(unknown(format!(
            "names a call of the seeded prefix (seq {}), not one of this session's",
            parent.seq
        )));
    }
    if parent.settled {
        return Err(unknown(format!(
            "names the call started at seq {}, which is already settled",
            parent.seq
        )));
    }
    if parent.step_id != open_step {
        return Err(unknown(format!(
            "names a call of step {:?}, not of the open step {open_step:?}",
            parent.step_id
        )));
    }
    Ok(())
}

fn native_tool<'h>(
    header: &'h sessionlog_schema::RequestHeader,
    name: &str,
) -> Result<&'h sessionlog_schema::ToolDefinition, ReviewError> {
    let mut matching = header.tools.iter().filter(|tool| tool.name == name);
    let Some(tool) = matching.next() else {
        return Err(ReviewError::new(
            ReviewErrorCode::UnknownTool,
            format!("tool {name:?} is not defined in the latest request/header"),
        ));
    };
    let others = matching.count();
    if others > 0 {
        return Err(ReviewError::new(
            ReviewErrorCode::AmbiguousTool,
            format!(
                "tool {name:?} is defined {} times in the latest request/header",
                others + 1
            ),
        ));
    }
    Ok(tool)
}

/// Every `tool/start`, and on the compaction surface the checkpoint that
/// opens it and the messages the reviewer may see. Only the events the
/// state indexed while folding are visited ([`SessionState::reviewed_seqs`]):
/// the calls and the messages of a kind that may be shown.
fn surface<'a>(
    state: &SessionState,
    events: &'a [EventRecord],
) -> Result<Surface<'a>, ReviewError> {
    let header = state.header();
    let surface_start = state.last_checkpoint_seq().unwrap_or(0);
    let mut surface = Surface {
        instructions: Vec::new(),
        history: Vec::with_capacity(state.reviewed_seqs().len() + 1),
        data_bytes: 0,
    };
    let mut checkpoint_pending = surface_start > 0;
    for &seq in state.reviewed_seqs() {
        if checkpoint_pending && seq > surface_start {
            checkpoint_pending = false;
            push_checkpoint(record_at(events, surface_start)?, &mut surface)?;
        }
        let record = record_at(events, seq)?;
        surface.data_bytes += record.data().len();
        let event_type = record.event_type();
        if event_type == EventType::ToolStart.as_str() {
            surface
                .history
                .push(HistoryEntry::Call(call_entry(record, header)?));
        } else if seq < surface_start {
            continue;
        } else if event_type == EventType::Message.as_str() {
            message_entry(record, header, &mut surface)?;
        } else {
            return Err(invalid_log(format!(
                "seq {seq} is a {event_type}, not a call or message the fold indexed"
            )));
        }
    }
    if checkpoint_pending {
        push_checkpoint(record_at(events, surface_start)?, &mut surface)?;
    }
    Ok(surface)
}

/// The checkpoint that opens the surface, when `record` is one.
fn push_checkpoint<'a>(
    record: &'a EventRecord,
    surface: &mut Surface<'a>,
) -> Result<(), ReviewError> {
    if record.event_type() == EventType::Checkpoint.as_str() {
        surface
            .history
            .push(HistoryEntry::Checkpoint(checkpoint_entry(record)?));
    }
    Ok(())
}

fn call_entry<'a>(
    record: &'a EventRecord,
    header: &SessionHeader,
) -> Result<CallEntry<'a>, ReviewError> {
    let facts: CallFacts<'a> = serde_json::from_str(record.data())
        .map_err(|error| invalid_log(format!("seq {} (tool/start): {error}", record.seq())))?;
    Ok(CallEntry {
        seq: record.seq(),
        kind: "call",
        name: facts.name,
        arguments: compact(facts.arguments)?,
        inherited: record.seq() <= header.seed_length,
    })
}

fn checkpoint_entry(record: &EventRecord) -> Result<CheckpointEntry, ReviewError> {
    match Event::parse(record.event_type(), record.data()) {
        Ok(Event::Checkpoint(checkpoint)) => Ok(CheckpointEntry {
            seq: record.seq(),
            kind: "checkpoint",
            authority: Authority::Fact,
            text: checkpoint.summary,
        }),
        Ok(_) => Err(invalid_log(format!(
            "seq {} is not a checkpoint",
            record.seq()
        ))),
        Err(error) => Err(invalid_log(format!("seq {}: {error}", record.seq()))),
    }
}

/// Adds the message at `record` where its authority puts it: project
/// instructions, the history, or nowhere.
fn message_entry<'a>(
    record: &'a EventRecord,
    header: &SessionHeader,
    surface: &mut Surface<'a>,
) -> Result<(), ReviewError> {
    let seq = record.seq();
    let unreadable =
        |error: serde_json::Error| invalid_log(format!("seq {seq} (message): {error}"));
    // The fold indexed only messages of a kind that may be shown, so the
    // whole message is read at once; its authority still decides below.
    let message: Message = serde_json::from_str(record.data()).map_err(unreadable)?;
    match message_authority(header, seq, &message) {
        Authority::Excluded => {}
        Authority::Constraint => surface.instructions.push(Instruction {
            source: message.source.name.clone(),
            text: message.text(),
            role: Authority::Constraint,
        }),
        authority @ (Authority::User | Authority::DirectParent | Authority::Fact) => {
            surface.history.push(HistoryEntry::Message(MessageEntry {
                seq,
                kind: "message",
                authority,
                text: message.text(),
                attachments: attachments(record, &message)?,
            }));
        }
    }
    Ok(())
}

/// The message's image and attachment parts as logged, minus `data`.
fn attachments<'a>(
    record: &'a EventRecord,
    message: &Message,
) -> Result<Vec<LoggedPart<'a>>, ReviewError> {
    let is_fact_part = |part: &ContentPart| match part {
        ContentPart::Text { .. } => false,
        ContentPart::Image { .. } | ContentPart::Attachment { .. } => true,
    };
    if !message.content.iter().any(is_fact_part) {
        return Ok(Vec::new());
    }
    let seq = record.seq();
    let raw: RawContent<'a> = serde_json::from_str(record.data())
        .map_err(|error| invalid_log(format!("seq {seq} (message): {error}")))?;
    let mut parts = Vec::new();
    for (part, raw_part) in message.content.iter().zip(raw.content) {
        if !is_fact_part(part) {
            continue;
        }
        let members = object_members(raw_part.get()).map_err(|error| {
            invalid_log(format!(
                "seq {seq} (message): a content part is unreadable: {error:?}"
            ))
        })?;
        parts.push(LoggedPart(
            members
                .into_iter()
                .filter(|(name, _)| name != "data")
                .collect(),
        ));
    }
    Ok(parts)
}

/// `raw` without whitespace between tokens; borrowed when it has none.
fn compact(raw: &RawValue) -> Result<Cow<'_, RawValue>, ReviewError> {
    let text = raw.get();
    if is_compact(text) {
        return Ok(Cow::Borrowed(raw));
    }
    compact_json(text)
        .and_then(RawValue::from_string)
        .map(Cow::Owned)
        .map_err(|error| invalid_log(format!("a raw JSON value does not parse: {error}")))
}

/// Whether JSON `text` has no whitespace between its tokens (whitespace
/// inside strings is content). Logged data is compact when our writer wrote
/// it, so this byte scan is all most values cost.
fn is_compact(text: &str) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                (false, _) => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b' ' | b'\t' | b'\n' | b'\r' => return false,
                _ => {}
            }
        }
    }
    true
}

/// [`compact`] for values already known to be JSON (they came out of a
/// parse), inside a serializer that cannot report our error type.
fn compact_or_as_is(raw: &RawValue) -> Cow<'_, RawValue> {
    compact(raw).unwrap_or(Cow::Borrowed(raw))
}

/// Serializes `request` compactly, failing with `REQUEST_TOO_LARGE` past
/// `max_bytes` (the bytes beyond are counted, not kept).
fn serialize_within(
    request: &Request<'_>,
    capacity: usize,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    let mut out = BoundedBuffer {
        bytes: Vec::with_capacity(capacity.min(max_bytes)),
        total: 0,
        limit: max_bytes,
    };
    serde_json::to_writer(&mut out, request)
        .map_err(|error| invalid_log(format!("the request does not serialize: {error}")))?;
    if out.total > max_bytes {
        return Err(ReviewError::new(
            ReviewErrorCode::RequestTooLarge,
            format!(
                "the request is {} bytes, above the limit of {max_bytes} bytes; it is never truncated or summarised",
                out.total
            ),
        ));
    }
    String::from_utf8(out.bytes)
        .map_err(|error| invalid_log(format!("the request is not UTF-8: {error}")))
}

/// Keeps bytes up to `limit` and counts all of them.
struct BoundedBuffer {
    bytes: Vec<u8>,
    total: usize,
    limit: usize,
}

impl io::Write for BoundedBuffer {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.total = self.total.saturating_add(buf.len());
        if self.total <= self.limit {
            self.bytes.extend_from_slice(buf);
        } else if !self.bytes.is_empty() {
            self.bytes = Vec::new();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
