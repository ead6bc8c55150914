//! The reviewer's request: one compact JSON object built from the session's
//! full snapshot and the pending action (docs/EVENTS.md, "The Auto reviewer").
//!
//! The request is the only thing the reviewer sees, so what it leaves out is
//! as important as what it holds: assistant text, reasoning, injected context,
//! tool results and every message of an excluded source never enter it, and
//! messages keep the authority their `source.kind` gives them, never more.
//! It is deterministic to the byte (fixed member order, raw JSON emitted as
//! logged) and never truncated: when it does not fit, it fails closed.
//!
//! A writer that already holds the validated fold of the snapshot keeps
//! the [`ReviewFragments`] of its events beside it and calls
//! [`build_review_request_from_fragments`]: the request is then the
//! validation of the pending action against the fold and one copy of the
//! fragments of the compaction surface into a buffer of the exact size.
//! [`build_review_request_for_state`] renders the fragments it needs first.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;
use sessionlog_schema::{Event, EventRecord, SessionHeader};

use super::action::PendingAction;
use super::error::{ReviewError, ReviewErrorCode};
use super::fragments::{compact, invalid_log, record_at, write_json, ReviewFragments};
use super::policy::REVIEW_POLICY;
use crate::{fold_stored, SessionState};

/// Builds the reviewer's request for `pending` from the snapshot `header` +
/// `events` (its good prefix), after folding and validating all of it.
///
/// The hash chain, which every own seal is checked against, starts from
/// the header as this library writes it. A header read from a store may
/// be another writer's, in another member order: then give its body as
/// stored to [`build_review_request_stored`] (a store's `Snapshot` holds
/// it as `header_body`), or a sealed session is refused as `INVALID_LOG`.
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
    build_review_request_stored(header, &header.to_body(), events, pending, max_bytes)
}

/// [`build_review_request`] for a session read from a store, whose header
/// record's body as stored is `header_body` (its bytes before `,"crc":`,
/// whatever their member order): the hash chain starts from it, as
/// `sessionlog verify` starts it.
pub fn build_review_request_stored(
    header: &SessionHeader,
    header_body: &str,
    events: &[EventRecord],
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    let (state, violations) = fold_stored(header.clone(), header_body, events);
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
/// Skips re-validation and renders only the events the request shows; a
/// `state` that is not the clean fold of `events` is `INVALID_LOG`.
pub fn build_review_request_for_state(
    state: &SessionState,
    events: &[EventRecord],
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    check_state_matches(state, events)?;
    let fragments = ReviewFragments::of(state, events);
    build_review_request_from_fragments(state, &fragments, events, pending, max_bytes)
}

/// Builds the reviewer's request for `pending` when `state` is the validated
/// fold of exactly `events` and `fragments` absorbed every one of them.
///
/// The fragments are only a memo of each event's rendering: the pending
/// action is validated against `state`, and the request holds the fragments
/// of the whole snapshot's compaction surface. A `state` or `fragments` that
/// does not match `events` is `INVALID_LOG`.
pub fn build_review_request_from_fragments(
    state: &SessionState,
    fragments: &ReviewFragments,
    events: &[EventRecord],
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    check_state_matches(state, events)?;
    let request_header = match state.latest_request_header_seq() {
        Some(seq) => Some(record_at(events, seq).map_err(invalid_log)?),
        None => None,
    };
    build_request(state, fragments, request_header, pending, max_bytes)
}

/// Builds the reviewer's request for `pending` from a session read as a
/// stream, in memory that does not grow with the log: `state` is the fold
/// of every event read, `fragments` absorbed each of them as it was folded,
/// and `request_header` is the record at the state's latest
/// `request/header` seq, kept aside as it went by. The request is the one
/// [`build_review_request`] gives for the same events; a `state` that
/// refused an event, `fragments` at another seq or another record as the
/// request header are `INVALID_LOG`.
///
/// ```
/// use sessionlog_projections::{build_review_request, build_review_request_streamed, parse_pending_action, ReviewFragments, SessionState};
/// use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
///
/// let header = SessionHeader::root(SessionId::parse("a")?, 0, "/w".into());
/// let events = [
///     EventRecord::new(1, 1, None, "request/header", r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"read-only","tools":[{"name":"shell","description":"d","parameters":{}}]}"#),
///     EventRecord::new(2, 1, None, "turn/start", r#"{"turnId":"t"}"#),
///     EventRecord::new(3, 1, None, "step/start", r#"{"stepId":"s","turnId":"t"}"#),
/// ];
/// let pending = parse_pending_action(br#"{"callId":"c","stepId":"s","name":"shell","arguments":{}}"#)?;
/// let (mut state, mut fragments, mut request_header) = (SessionState::new(header.clone()), ReviewFragments::new(), None);
/// for record in &events {
///     state.apply(record).map_err(|v| v.to_string())?;
///     fragments.absorb(&state, std::slice::from_ref(record));
///     if state.latest_request_header_seq() == Some(record.seq()) {
///         request_header = Some(record.clone());
///     }
/// }
/// let streamed = build_review_request_streamed(&state, &fragments, request_header.as_ref(), &pending, 1 << 20)?;
/// assert_eq!(streamed, build_review_request(&header, &events, &pending, 1 << 20)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn build_review_request_streamed(
    state: &SessionState,
    fragments: &ReviewFragments,
    request_header: Option<&EventRecord>,
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    if state.violation_count() > 0 {
        return Err(invalid_log(format!(
            "the session's fold refused {}; run `sessionlog verify` on it",
            match state.violation_count() {
                1 => "1 event".to_owned(),
                events => format!("{events} events"),
            }
        )));
    }
    let expected = state.latest_request_header_seq();
    let found = request_header.map(EventRecord::seq);
    if expected.is_some() && found != expected {
        return Err(invalid_log(format!(
            "the request header given is at seq {found:?} but the fold's latest is at seq {expected:?}"
        )));
    }
    build_request(state, fragments, request_header, pending, max_bytes)
}

/// The request, once `request_header` is known to be the record at the
/// state's latest `request/header` seq (`None`: there is none).
fn build_request(
    state: &SessionState,
    fragments: &ReviewFragments,
    request_header: Option<&EventRecord>,
    pending: &PendingAction,
    max_bytes: usize,
) -> Result<String, ReviewError> {
    if fragments.seq() != state.seq() {
        return Err(invalid_log(format!(
            "the review fragments are at seq {} but the fold is at seq {}",
            fragments.seq(),
            state.seq()
        )));
    }
    check_action_shape(pending)?;
    let request_header = latest_request_header(state, request_header)?;
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
    if let Some(failure) = fragments.first_failure() {
        return Err(failure);
    }
    let model = json(&Model {
        provider: &request_header.provider,
        model: &request_header.model,
    })?;
    let environment = json(&Environment {
        cwd: &state.header().cwd,
    })?;
    let pending_action = json(&PendingView {
        call_id: &pending.call_id,
        name: &pending.name,
        description,
        parameters: compact(parameters)?,
        arguments: compact(&pending.arguments)?,
    })?;
    let policy = json(&REVIEW_POLICY)?;
    let parts = [
        r#"{"model":"#,
        &model,
        r#","partitions":{"REVIEW_POLICY":"#,
        &policy,
        r#","ENVIRONMENT":"#,
        &environment,
        r#","PROJECT_INSTRUCTIONS":["#,
        r#"],"FILTERED_HISTORY":["#,
        r#"],"PENDING_ACTION":"#,
        &pending_action,
        "}}",
    ];
    let total = parts.iter().map(|part| part.len()).sum::<usize>()
        + fragments.instructions_len()
        + fragments.history_len();
    if total > max_bytes {
        return Err(ReviewError::new(
            ReviewErrorCode::RequestTooLarge,
            format!(
                "the request is {total} bytes, above the limit of {max_bytes} bytes; it is never truncated or summarised"
            ),
        ));
    }
    let mut request = String::with_capacity(total);
    for part in &parts[..7] {
        request.push_str(part);
    }
    fragments.write_instructions(&mut request);
    request.push_str(parts[7]);
    fragments.write_history(&mut request);
    for part in &parts[8..] {
        request.push_str(part);
    }
    debug_assert_eq!(request.len(), total);
    Ok(request)
}

#[derive(Serialize)]
struct Model<'a> {
    provider: &'a str,
    model: &'a str,
}

#[derive(Serialize)]
struct Environment<'a> {
    cwd: &'a str,
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

/// `value` as compact JSON.
fn json(value: &(impl Serialize + ?Sized)) -> Result<String, ReviewError> {
    let mut out = String::new();
    write_json(&mut out, value).map_err(invalid_log)?;
    Ok(out)
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
            "the session's fold refused {}; run `sessionlog verify` on it",
            match state.violation_count() {
                1 => "1 event".to_owned(),
                events => format!("{events} events"),
            }
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

fn latest_request_header(
    state: &SessionState,
    record: Option<&EventRecord>,
) -> Result<sessionlog_schema::RequestHeader, ReviewError> {
    let (Some(seq), Some(record)) = (state.latest_request_header_seq(), record) else {
        return Err(ReviewError::new(
            ReviewErrorCode::NoRequestHeader,
            "the log has no request/header: the reviewer's model and the tool definitions come from the latest one",
        ));
    };
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
