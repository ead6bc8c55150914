//! `ReviewFragments`: the bytes each event contributes to the reviewer's
//! request, rendered once per event.
//!
//! A `tool/start` always contributes its history entry
//! `{"seq","kind":"call","name","arguments","inherited"}`; a message of a
//! kind that may be shown contributes its history entry (user, direct-parent,
//! fact) or its PROJECT_INSTRUCTIONS entry (instructions); the checkpoint
//! that opens the compaction surface contributes its history entry. Each
//! fragment is a pure function of its one event and the session header
//! (`seedLength`, `parentSession`), so it is a memo, not a cached
//! projection: the request is still assembled from the whole snapshot each
//! time, by the builder, which validates the pending action against the
//! fold and concatenates the fragments of the surface in seq order.
//!
//! Messages before the last checkpoint are never shown again (checkpoints
//! only move the surface forward), so their fragments are dropped when a
//! checkpoint is absorbed; the calls of the whole log are kept.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use sessionlog_schema::{
    compact_json, Checkpoint, ContentPart, Event, EventRecord, EventType, Message, SessionHeader,
};

use super::error::{ReviewError, ReviewErrorCode};
use super::strict::{object_members, Members};
use crate::{message_authority, Authority, SessionState};

/// The request fragments of a session's events (see the module docs). A
/// writer that builds review requests keeps one beside its fold and
/// absorbs every event it writes.
///
/// Memory: about the bytes of every call's name and arguments and of the
/// shown messages since the last checkpoint (text and attachment metadata),
/// on top of the events themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewFragments {
    /// The last seq absorbed.
    seq: u64,
    /// Every `tool/start` of the whole log.
    calls: Fragments,
    /// User, direct-parent and fact messages since the last checkpoint.
    messages: Fragments,
    /// Instructions messages since the last checkpoint.
    instructions: Fragments,
    /// The last checkpoint: its seq and its entry, with a leading comma.
    checkpoint: Option<(u64, Result<String, String>)>,
    /// Calls that could not be rendered: seq and why.
    call_failures: Vec<(u64, String)>,
    /// Events since the last checkpoint that could not be rendered.
    surface_failures: Vec<(u64, String)>,
}

/// Rendered entries, each written with a leading comma so that a run of
/// consecutive entries is one slice of `text`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fragments {
    text: String,
    seqs: Vec<u64>,
    /// Where each entry ends in `text` (it starts where the previous ends).
    ends: Vec<usize>,
}

impl ReviewFragments {
    /// No fragments: a session holding only its header.
    pub fn new() -> ReviewFragments {
        ReviewFragments::default()
    }

    /// The fragments of `events` as `state` (their clean fold) indexed them:
    /// the events of [`SessionState::reviewed_seqs`] and the last checkpoint.
    /// Messages before that checkpoint are skipped, as they are never shown.
    pub fn of(state: &SessionState, events: &[EventRecord]) -> ReviewFragments {
        let header = state.header();
        let surface_start = state.last_checkpoint_seq();
        let mut fragments = ReviewFragments::new();
        let mut checkpoint_pending = surface_start;
        for seq in state.reviewed_seqs() {
            if let Some(checkpoint) = checkpoint_pending.filter(|&c| seq > c) {
                checkpoint_pending = None;
                fragments.absorb_checkpoint_at(events, checkpoint);
            }
            if surface_start.is_some_and(|c| seq < c) {
                if let Ok(record) = record_at(events, seq) {
                    if record.event_type() == EventType::ToolStart.as_str() {
                        fragments.absorb_call(header, record);
                    }
                } else {
                    fragments.call_failures.push((seq, no_event_at(seq)));
                }
                continue;
            }
            match record_at(events, seq) {
                Ok(record) => fragments.absorb_reviewed(header, record),
                Err(message) => fragments.surface_failures.push((seq, message)),
            }
        }
        if let Some(checkpoint) = checkpoint_pending {
            fragments.absorb_checkpoint_at(events, checkpoint);
        }
        fragments.seq = state.seq();
        fragments
    }

    /// The last seq absorbed.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Absorbs `records`, the next events of the session, once `state` has
    /// folded them: the events it indexed get their fragments.
    pub fn absorb(&mut self, state: &SessionState, records: &[EventRecord]) {
        let header = state.header();
        for record in records {
            let seq = record.seq();
            debug_assert_eq!(seq, self.seq + 1, "fragments are absorbed in seq order");
            self.seq = seq;
            if state.last_checkpoint_seq() == Some(seq) {
                self.absorb_checkpoint(record);
            } else if state.is_reviewed(seq) {
                self.absorb_reviewed(header, record);
            }
        }
    }

    /// The first event on the request's view that could not be rendered, as
    /// the `INVALID_LOG` error it is.
    pub(super) fn first_failure(&self) -> Option<ReviewError> {
        let checkpoint = match &self.checkpoint {
            Some((seq, Err(message))) => Some((*seq, message)),
            Some((_, Ok(_))) | None => None,
        };
        [
            self.call_failures
                .first()
                .map(|(seq, message)| (*seq, message)),
            self.surface_failures
                .first()
                .map(|(seq, message)| (*seq, message)),
            checkpoint,
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(seq, _)| *seq)
        .map(|(_, message)| invalid_log(message.clone()))
    }

    /// The bytes of the FILTERED_HISTORY array's content (between its
    /// brackets).
    pub(super) fn history_len(&self) -> usize {
        let checkpoint = self.checkpoint_text().map_or(0, str::len);
        let total = self.calls.text.len() + self.messages.text.len() + checkpoint;
        total.saturating_sub(1)
    }

    /// The bytes of the PROJECT_INSTRUCTIONS array's content.
    pub(super) fn instructions_len(&self) -> usize {
        self.instructions.text.len().saturating_sub(1)
    }

    /// Appends the PROJECT_INSTRUCTIONS array's content to `out`.
    pub(super) fn write_instructions(&self, out: &mut String) {
        out.push_str(self.instructions.text.get(1..).unwrap_or(""));
    }

    /// Appends the FILTERED_HISTORY array's content to `out`: the calls and
    /// the messages in seq order, the checkpoint where its seq puts it.
    pub(super) fn write_history(&self, out: &mut String) {
        let mut first = true;
        let mut calls = 0;
        if let Some((seq, Ok(text))) = &self.checkpoint {
            calls = self.calls.seqs.partition_point(|call| call < seq);
            self.calls.write_run(0, calls, out, &mut first);
            write_entry(text, out, &mut first);
        }
        let mut messages = 0;
        while calls < self.calls.seqs.len() && messages < self.messages.seqs.len() {
            let next_message = self.messages.seqs[messages];
            let next_call = self.calls.seqs[calls];
            if next_call < next_message {
                let end = calls + self.calls.seqs[calls..].partition_point(|s| *s < next_message);
                self.calls.write_run(calls, end, out, &mut first);
                calls = end;
            } else {
                let end =
                    messages + self.messages.seqs[messages..].partition_point(|s| *s < next_call);
                self.messages.write_run(messages, end, out, &mut first);
                messages = end;
            }
        }
        self.calls
            .write_run(calls, self.calls.seqs.len(), out, &mut first);
        self.messages
            .write_run(messages, self.messages.seqs.len(), out, &mut first);
    }

    fn checkpoint_text(&self) -> Option<&str> {
        match &self.checkpoint {
            Some((_, Ok(text))) => Some(text),
            Some((_, Err(_))) | None => None,
        }
    }

    /// A call or a message the fold indexed.
    fn absorb_reviewed(&mut self, header: &SessionHeader, record: &EventRecord) {
        let event_type = record.event_type();
        if event_type == EventType::ToolStart.as_str() {
            self.absorb_call(header, record);
        } else if event_type == EventType::Message.as_str() {
            self.absorb_message(header, record);
        } else {
            self.surface_failures.push((
                record.seq(),
                format!(
                    "seq {} is a {event_type}, not a call or message the fold indexed",
                    record.seq()
                ),
            ));
        }
    }

    fn absorb_call(&mut self, header: &SessionHeader, record: &EventRecord) {
        if let Err(message) = self.calls.render(record.seq(), |text| {
            let facts: CallFacts<'_> = serde_json::from_str(record.data())
                .map_err(|error| format!("seq {} (tool/start): {error}", record.seq()))?;
            let entry = CallEntry {
                seq: record.seq(),
                kind: "call",
                name: facts.name,
                arguments: compact(facts.arguments).map_err(|error| error.message)?,
                inherited: record.seq() <= header.seed_length,
            };
            write_json(text, &entry)
        }) {
            self.call_failures.push((record.seq(), message));
        }
    }

    /// The message at `record`, where its authority puts it: project
    /// instructions, the history, or nowhere.
    fn absorb_message(&mut self, header: &SessionHeader, record: &EventRecord) {
        let seq = record.seq();
        // The fold indexed only messages of a kind that may be shown, so the
        // whole message is read at once; its authority still decides below.
        let message: Message = match serde_json::from_str(record.data()) {
            Ok(message) => message,
            Err(error) => {
                let message = format!("seq {seq} (message): {error}");
                self.surface_failures.push((seq, message));
                return;
            }
        };
        let rendered = match message_authority(header, seq, &message) {
            Authority::Excluded => Ok(()),
            Authority::Constraint => self.instructions.render(seq, |text| {
                let entry = Instruction {
                    source: message.source.name.as_deref(),
                    text: message.text(),
                    role: Authority::Constraint,
                };
                write_json(text, &entry)
            }),
            authority @ (Authority::User | Authority::DirectParent | Authority::Fact) => {
                self.messages.render(seq, |text| {
                    let entry = MessageEntry {
                        seq,
                        kind: "message",
                        authority,
                        text: message.text(),
                        attachments: attachments(record, &message)
                            .map_err(|error| error.message)?,
                    };
                    write_json(text, &entry)
                })
            }
        };
        if let Err(message) = rendered {
            self.surface_failures.push((seq, message));
        }
    }

    /// The checkpoint at `seq` opens the surface from now on.
    fn absorb_checkpoint_at(&mut self, events: &[EventRecord], seq: u64) {
        match record_at(events, seq) {
            Ok(record) => self.absorb_checkpoint(record),
            Err(message) => self.surface_failures.push((seq, message)),
        }
    }

    fn absorb_checkpoint(&mut self, record: &EventRecord) {
        self.messages.clear();
        self.instructions.clear();
        self.surface_failures.clear();
        self.checkpoint = None;
        if record.event_type() != EventType::Checkpoint.as_str() {
            return;
        }
        let seq = record.seq();
        let rendered = match Event::parse(record.event_type(), record.data()) {
            Ok(Event::Checkpoint(Checkpoint { summary, .. })) => {
                let entry = CheckpointEntry {
                    seq,
                    kind: "checkpoint",
                    authority: Authority::Fact,
                    text: summary,
                };
                let mut text = String::from(",");
                write_json(&mut text, &entry).map(|()| text)
            }
            Ok(_) => Err(format!("seq {seq} is not a checkpoint")),
            Err(error) => Err(format!("seq {seq}: {error}")),
        };
        self.checkpoint = Some((seq, rendered));
    }
}

impl Fragments {
    /// Appends the entry `render` writes for `seq`, or nothing when it fails.
    fn render(
        &mut self,
        seq: u64,
        render: impl FnOnce(&mut String) -> Result<(), String>,
    ) -> Result<(), String> {
        let start = self.text.len();
        self.text.push(',');
        match render(&mut self.text) {
            Ok(()) => {
                self.seqs.push(seq);
                self.ends.push(self.text.len());
                Ok(())
            }
            Err(message) => {
                self.text.truncate(start);
                Err(message)
            }
        }
    }

    fn clear(&mut self) {
        self.text.clear();
        self.seqs.clear();
        self.ends.clear();
    }

    /// Appends entries `from..to`, dropping the leading comma of the first
    /// entry of the array.
    fn write_run(&self, from: usize, to: usize, out: &mut String, first: &mut bool) {
        if from >= to {
            return;
        }
        let start = if from == 0 { 0 } else { self.ends[from - 1] };
        write_entry(&self.text[start..self.ends[to - 1]], out, first);
    }
}

/// Appends `text` (entries with leading commas) to `out`, dropping the
/// comma when it opens the array.
fn write_entry(text: &str, out: &mut String, first: &mut bool) {
    if *first {
        out.push_str(text.get(1..).unwrap_or(""));
        *first = false;
    } else {
        out.push_str(text);
    }
}

#[derive(Serialize)]
struct Instruction<'a> {
    source: Option<&'a str>,
    text: String,
    role: Authority,
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

/// An image or attachment part as logged, its members in their order,
/// only those the vocabulary names besides the inline `data`
/// ([`SHOWN_PART_MEMBERS`]).
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

pub(super) fn invalid_log(message: String) -> ReviewError {
    ReviewError::new(ReviewErrorCode::InvalidLog, message)
}

fn no_event_at(seq: u64) -> String {
    format!("the snapshot has no event at seq {seq}")
}

/// The event at `seq`, found by index in a snapshot numbered 1..=n.
pub(super) fn record_at(events: &[EventRecord], seq: u64) -> Result<&EventRecord, String> {
    usize::try_from(seq)
        .ok()
        .and_then(|seq| seq.checked_sub(1))
        .and_then(|index| events.get(index))
        .filter(|record| record.seq() == seq)
        .ok_or_else(|| no_event_at(seq))
}

/// Appends `value` as compact JSON to `out`.
pub(super) fn write_json(
    out: &mut String,
    value: &(impl Serialize + ?Sized),
) -> Result<(), String> {
    let json = serde_json::to_string(value)
        .map_err(|error| format!("the request does not serialize: {error}"))?;
    out.push_str(&json);
    Ok(())
}

/// The members of an image or attachment part the reviewer is shown: what
/// the vocabulary names, but the inline `data`. A member it does not name
/// could hold anything (a tool's output a runtime put there), so none is.
const SHOWN_PART_MEMBERS: [&str; 4] = ["type", "mediaType", "name", "size"];

/// The message's image and attachment parts as logged, minus `data` and
/// any member the vocabulary does not name.
fn attachments<'a>(
    record: &'a EventRecord,
    message: &Message,
) -> Result<Vec<LoggedPart<'a>>, ReviewError> {
    let is_fact_part = |part: &ContentPart| match part {
        ContentPart::Text(_) => false,
        ContentPart::Image(_) | ContentPart::Attachment(_) => true,
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
                .filter(|(name, _)| SHOWN_PART_MEMBERS.contains(&&name[..]))
                .collect(),
        ));
    }
    Ok(parts)
}

/// `raw` without whitespace between tokens; borrowed when it has none.
pub(super) fn compact(raw: &RawValue) -> Result<Cow<'_, RawValue>, ReviewError> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_log::Log;

    fn user(text: &str) -> serde_json::Value {
        json!({"role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": text}]})
    }

    /// A session with instructions, user and agent messages, calls, an
    /// attachment and two checkpoints, so that the surface moves twice.
    fn session() -> Log {
        Log::root("root")
            .raw(
                "message",
                r#"{"role":"user","source":{"kind":"instructions","name":"AGENTS.md"},"content":[{"type":"text","text":"old rule"}]}"#,
            )
            .event("message", user("first"))
            .turn_start("t1")
            .step_start("s1", "t1")
            .tool_start("c1", "s1")
            .raw(
                "message",
                r#"{"role":"user","source":{"kind":"agent-message","senderSessionId":"x"},"content":[{"type":"text","text":"note"}]}"#,
            )
            .checkpoint(5)
            .raw(
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"see"},{"type":"image","mediaType":"image/png","data":"iVBOR"}]}"#,
            )
            .tool_start("c2", "s1")
            .raw(
                "message",
                r#"{"role":"user","source":{"kind":"instructions"},"content":[{"type":"text","text":"new rule"}]}"#,
            )
            .raw(
                "message",
                r#"{"role":"assistant","source":{"kind":"assistant"},"content":[{"type":"text","text":"hidden"}]}"#,
            )
            .checkpoint(10)
            .tool_start("c3", "s1")
            .event("message", user("last"))
    }

    #[test]
    fn absorbing_one_event_or_one_batch_at_a_time_equals_rendering_the_snapshot() {
        let log = session();
        for batch in [1, 2, 3, 5] {
            let mut state = SessionState::new(log.header.clone());
            let mut fragments = ReviewFragments::new();
            for (chunk_index, chunk) in log.events.chunks(batch).enumerate() {
                for record in chunk {
                    assert_eq!(state.apply(record), Ok(()));
                }
                fragments.absorb(&state, chunk);
                let through = (chunk_index * batch + chunk.len()).min(log.events.len());
                let snapshot = ReviewFragments::of(&state, &log.events[..through]);
                assert_eq!(
                    fragments, snapshot,
                    "batches of {batch}, through seq {through}"
                );
            }
        }
    }

    #[test]
    fn the_surface_keeps_every_call_and_the_messages_since_the_last_checkpoint() {
        let log = session();
        let (state, violations) = crate::fold(log.header.clone(), &log.events);
        assert_eq!(violations, []);
        let fragments = ReviewFragments::of(&state, &log.events);
        let mut history = String::new();
        fragments.write_history(&mut history);
        assert_eq!(history.len(), fragments.history_len());
        assert_eq!(
            history,
            concat!(
                r#"{"seq":5,"kind":"call","name":"shell","arguments":{"cmd":"ls"},"inherited":false},"#,
                r#"{"seq":9,"kind":"call","name":"shell","arguments":{"cmd":"ls"},"inherited":false},"#,
                r#"{"seq":12,"kind":"checkpoint","authority":"fact","text":"so far"},"#,
                r#"{"seq":13,"kind":"call","name":"shell","arguments":{"cmd":"ls"},"inherited":false},"#,
                r#"{"seq":14,"kind":"message","authority":"user","text":"last","attachments":[]}"#,
            )
        );
        let mut instructions = String::new();
        fragments.write_instructions(&mut instructions);
        assert_eq!(instructions, "");
        assert_eq!(fragments.instructions_len(), 0);
    }
}
