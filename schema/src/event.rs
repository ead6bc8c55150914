//! The typed view of the v1 event vocabulary.
//!
//! [`Event::parse`] turns a record's type and raw `data` into one variant per
//! known type, checking required fields, their types and every closed
//! vocabulary, and naming the offending field (`data.content[0].type`).
//! Unknown types are [`Event::Unknown`]: kept, counted, never interpreted.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::forms::check_forms;
use crate::{
    ApprovalOutcome, ApprovalPolicy, ChildMode, MessageRole, Preset, SandboxMode, Seal,
    SettleStatus,
};

/// A known event type, by its log spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// `request/header`
    RequestHeader,
    /// `turn/start`
    TurnStart,
    /// `turn/end`
    TurnEnd,
    /// `step/start`
    StepStart,
    /// `step/end`
    StepEnd,
    /// `message`
    Message,
    /// `tool/start`
    ToolStart,
    /// `tool/settle`
    ToolSettle,
    /// `approval/policy`
    ApprovalPolicy,
    /// `sandbox/mode`
    SandboxMode,
    /// `permission/preset`
    PermissionPreset,
    /// `approval/asked`
    ApprovalAsked,
    /// `approval/decided`
    ApprovalDecided,
    /// `checkpoint`
    Checkpoint,
    /// `child/created`
    ChildCreated,
    /// `seal` (vocabulary 1.1)
    Seal,
}

impl EventType {
    /// Every known type.
    pub const ALL: &'static [EventType] = &[
        EventType::RequestHeader,
        EventType::TurnStart,
        EventType::TurnEnd,
        EventType::StepStart,
        EventType::StepEnd,
        EventType::Message,
        EventType::ToolStart,
        EventType::ToolSettle,
        EventType::ApprovalPolicy,
        EventType::SandboxMode,
        EventType::PermissionPreset,
        EventType::ApprovalAsked,
        EventType::ApprovalDecided,
        EventType::Checkpoint,
        EventType::ChildCreated,
        EventType::Seal,
    ];

    /// The type as spelled in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::RequestHeader => "request/header",
            EventType::TurnStart => "turn/start",
            EventType::TurnEnd => "turn/end",
            EventType::StepStart => "step/start",
            EventType::StepEnd => "step/end",
            EventType::Message => "message",
            EventType::ToolStart => "tool/start",
            EventType::ToolSettle => "tool/settle",
            EventType::ApprovalPolicy => "approval/policy",
            EventType::SandboxMode => "sandbox/mode",
            EventType::PermissionPreset => "permission/preset",
            EventType::ApprovalAsked => "approval/asked",
            EventType::ApprovalDecided => "approval/decided",
            EventType::Checkpoint => "checkpoint",
            EventType::ChildCreated => "child/created",
            EventType::Seal => "seal",
        }
    }

    /// The known type spelled `text`, if any.
    pub fn parse(text: &str) -> Option<EventType> {
        // A match on the spellings, not a search of `ALL`: every event of a
        // fold passes here. The test below keeps it in step with `as_str`.
        Some(match text {
            "request/header" => EventType::RequestHeader,
            "turn/start" => EventType::TurnStart,
            "turn/end" => EventType::TurnEnd,
            "step/start" => EventType::StepStart,
            "step/end" => EventType::StepEnd,
            "message" => EventType::Message,
            "tool/start" => EventType::ToolStart,
            "tool/settle" => EventType::ToolSettle,
            "approval/policy" => EventType::ApprovalPolicy,
            "sandbox/mode" => EventType::SandboxMode,
            "permission/preset" => EventType::PermissionPreset,
            "approval/asked" => EventType::ApprovalAsked,
            "approval/decided" => EventType::ApprovalDecided,
            "checkpoint" => EventType::Checkpoint,
            "child/created" => EventType::ChildCreated,
            "seal" => EventType::Seal,
            _ => return None,
        })
    }
}

/// Why `text` cannot be an event type, if it cannot: a type is at least one
/// character and holds no control character (`\n`, ESC, DEL, C1) and no
/// bidirectional formatting character (U+202E and its kin), so that every
/// type can be shown on one line as it is. Unknown types are open, but
/// spelled within these characters.
pub fn event_type_error(text: &str) -> Option<String> {
    if text.is_empty() {
        return Some("the event type is empty".to_owned());
    }
    // Printable ASCII, every type of the vocabulary: nothing to decode.
    if text.bytes().all(|byte| (b' '..=b'~').contains(&byte)) {
        return None;
    }
    let bad = text.chars().find(|c| is_unprintable(*c))?;
    Some(format!(
        "the event type {:?} holds the character U+{:04X}, which no type may hold (control and bidirectional formatting characters)",
        text,
        u32::from(bad)
    ))
}

/// A control character (C0, DEL, C1) or a bidirectional formatting
/// character: what can move a terminal's cursor or reorder what it shows.
pub fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// A parsed event. `Unknown` keeps the door open for later vocabularies.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// What the runtime sent with one model request.
    RequestHeader(RequestHeader),
    /// A turn opened.
    TurnStart(TurnStart),
    /// A turn closed.
    TurnEnd(TurnEnd),
    /// A step opened inside a turn.
    StepStart(StepStart),
    /// A step closed.
    StepEnd(StepEnd),
    /// A message from some source.
    Message(Message),
    /// A tool call started.
    ToolStart(ToolStart),
    /// A tool call settled.
    ToolSettle(ToolSettle),
    /// The approval policy was switched.
    ApprovalPolicy(ApprovalPolicyChange),
    /// The sandbox mode was switched.
    SandboxMode(SandboxModeChange),
    /// A permission preset was chosen.
    PermissionPreset(PresetChange),
    /// An approval was asked.
    ApprovalAsked(ApprovalAsked),
    /// An approval was decided.
    ApprovalDecided(ApprovalDecided),
    /// A compaction checkpoint.
    Checkpoint(Checkpoint),
    /// A child session was created.
    ChildCreated(ChildCreated),
    /// A seal: the chain value through the previous seq, maybe signed.
    Seal(Seal),
    /// A type this version does not know; kept and ignored by projections.
    Unknown,
}

/// A known event whose `data` breaks the vocabulary or the shapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{event_type} {path}: {message}")]
pub struct ShapeError {
    /// The event type.
    pub event_type: &'static str,
    /// Where in the event: `data`, `data.turnId`, `data.content[0].type`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// `request/header` data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestHeader {
    /// Model provider.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// The approval policy the runtime sent.
    pub approval_policy: ApprovalPolicy,
    /// The sandbox mode the runtime sent.
    pub sandbox_mode: SandboxMode,
    /// The tools offered to the model.
    pub tools: Vec<ToolDefinition>,
}

/// One tool of a `request/header`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Tool name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// Its parameter schema, raw JSON.
    pub parameters: Box<RawValue>,
}

impl PartialEq for ToolDefinition {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.parameters.get() == other.parameters.get()
    }
}

/// `turn/start` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStart {
    /// The turn opened.
    pub turn_id: String,
}

/// `turn/end` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnEnd {
    /// The turn closed.
    pub turn_id: String,
}

/// `step/start` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepStart {
    /// The step opened.
    pub step_id: String,
    /// The turn it belongs to.
    pub turn_id: String,
}

/// `step/end` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepEnd {
    /// The step closed.
    pub step_id: String,
}

/// `message` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Informational role; authority comes from `source`.
    pub role: MessageRole,
    /// Where the message came from.
    pub source: MessageSource,
    /// Its parts.
    pub content: Vec<ContentPart>,
}

/// Where a message came from. `kind` is an open vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSource {
    /// `user`, `agent-message`, `instructions`, `context`, `assistant`, or another.
    pub kind: String,
    /// For `agent-message`: the sending session.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub sender_session_id: Option<String>,
    /// For `instructions` and `context`: which file or plugin.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<String>,
}

/// One part of a message's content: `{"type": "text" | "image" |
/// "attachment", ...}`, the members of its kind's struct beside `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    /// Plain text.
    Text(TextPart),
    /// An image.
    Image(ImagePart),
    /// A file attachment.
    Attachment(AttachmentPart),
}

/// A text part of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextPart {
    /// The text.
    pub text: String,
}

/// An image part of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// Its media type.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Its name.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<String>,
    /// Its size in bytes.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub size: Option<u64>,
    /// Inline base64 bytes.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<String>,
}

/// A file attachment part of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentPart {
    /// Its name.
    pub name: String,
    /// Its media type.
    #[serde(
        default,
        rename = "mediaType",
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub media_type: Option<String>,
    /// Its size in bytes.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub size: Option<u64>,
    /// Inline base64 bytes.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<String>,
}

/// `tool/start` data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStart {
    /// Unique over the whole log.
    pub call_id: String,
    /// The step the call runs in.
    pub step_id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, raw JSON.
    pub arguments: Box<RawValue>,
    /// Set for a call made from inside a program tool.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub parent_call_id: Option<String>,
}

impl PartialEq for ToolStart {
    fn eq(&self, other: &Self) -> bool {
        self.call_id == other.call_id
            && self.step_id == other.step_id
            && self.name == other.name
            && self.arguments.get() == other.arguments.get()
            && self.parent_call_id == other.parent_call_id
    }
}

/// `tool/settle` data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSettle {
    /// The call settled.
    pub call_id: String,
    /// How it ended.
    pub status: SettleStatus,
    /// Its result, raw JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
    /// Its error.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub error: Option<ToolError>,
}

impl PartialEq for ToolSettle {
    fn eq(&self, other: &Self) -> bool {
        self.call_id == other.call_id
            && self.status == other.status
            && self.result.as_ref().map(|r| r.get()) == other.result.as_ref().map(|r| r.get())
            && self.error == other.error
    }
}

/// The error of a settled call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// Error class name.
    pub name: String,
    /// Stable code.
    pub code: String,
    /// Human message.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub message: Option<String>,
    /// Reason given (a reviewer's denial reason, kept whole).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<String>,
}

/// `approval/policy` data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicyChange {
    /// The new policy.
    pub policy: ApprovalPolicy,
}

/// `sandbox/mode` data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxModeChange {
    /// The new mode.
    pub mode: SandboxMode,
}

/// `permission/preset` data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetChange {
    /// The preset chosen.
    pub preset: Preset,
}

/// `approval/asked` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalAsked {
    /// Unique over the whole log.
    pub request_id: String,
    /// The open turn.
    pub turn_id: String,
    /// The tool awaiting approval.
    pub tool: String,
    /// Why approval is asked.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<String>,
    /// The call awaiting approval.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub call_id: Option<String>,
}

/// `approval/decided` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecided {
    /// The request decided.
    pub request_id: String,
    /// The decision.
    pub outcome: ApprovalOutcome,
}

/// `checkpoint` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The compaction summary.
    pub summary: String,
    /// The last seq the summary covers.
    pub through_seq: u64,
}

/// `child/created` data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildCreated {
    /// The child's id.
    pub child_session_id: String,
    /// How the child is meant to be used.
    pub mode: ChildMode,
}

impl Event {
    /// Parses `data` (raw JSON text) of an event of type `event_type`.
    pub fn parse(event_type: &str, data: &str) -> Result<Event, ShapeError> {
        let Some(known) = EventType::parse(event_type) else {
            return Ok(Event::Unknown);
        };
        if !data.trim_start().starts_with('{') {
            return Err(ShapeError {
                event_type: known.as_str(),
                path: "data".to_owned(),
                message: "must be a JSON object".to_owned(),
            });
        }
        let event = match known {
            EventType::RequestHeader => Event::RequestHeader(typed(known, data)?),
            EventType::TurnStart => Event::TurnStart(typed(known, data)?),
            EventType::TurnEnd => Event::TurnEnd(typed(known, data)?),
            EventType::StepStart => Event::StepStart(typed(known, data)?),
            EventType::StepEnd => Event::StepEnd(typed(known, data)?),
            EventType::Message => Event::Message(typed(known, data)?),
            EventType::ToolStart => Event::ToolStart(typed(known, data)?),
            EventType::ToolSettle => Event::ToolSettle(typed(known, data)?),
            EventType::ApprovalPolicy => Event::ApprovalPolicy(typed(known, data)?),
            EventType::SandboxMode => Event::SandboxMode(typed(known, data)?),
            EventType::PermissionPreset => Event::PermissionPreset(typed(known, data)?),
            EventType::ApprovalAsked => Event::ApprovalAsked(typed(known, data)?),
            EventType::ApprovalDecided => Event::ApprovalDecided(typed(known, data)?),
            EventType::Checkpoint => Event::Checkpoint(typed(known, data)?),
            EventType::ChildCreated => Event::ChildCreated(typed(known, data)?),
            EventType::Seal => Event::Seal(typed(known, data)?),
        };
        Ok(event)
    }

    /// The known type of this event, `None` for unknown types.
    pub fn event_type(&self) -> Option<EventType> {
        Some(match self {
            Event::RequestHeader(_) => EventType::RequestHeader,
            Event::TurnStart(_) => EventType::TurnStart,
            Event::TurnEnd(_) => EventType::TurnEnd,
            Event::StepStart(_) => EventType::StepStart,
            Event::StepEnd(_) => EventType::StepEnd,
            Event::Message(_) => EventType::Message,
            Event::ToolStart(_) => EventType::ToolStart,
            Event::ToolSettle(_) => EventType::ToolSettle,
            Event::ApprovalPolicy(_) => EventType::ApprovalPolicy,
            Event::SandboxMode(_) => EventType::SandboxMode,
            Event::PermissionPreset(_) => EventType::PermissionPreset,
            Event::ApprovalAsked(_) => EventType::ApprovalAsked,
            Event::ApprovalDecided(_) => EventType::ApprovalDecided,
            Event::Checkpoint(_) => EventType::Checkpoint,
            Event::ChildCreated(_) => EventType::ChildCreated,
            Event::Seal(_) => EventType::Seal,
            Event::Unknown => return None,
        })
    }
}

impl Message {
    /// The message's text parts joined with `\n`.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text(part) => Some(part.text.as_str()),
                ContentPart::Image(_) | ContentPart::Attachment(_) => None,
            })
            .collect();
        texts.join("\n")
    }
}

fn typed<'de, T: Deserialize<'de>>(known: EventType, data: &'de str) -> Result<T, ShapeError> {
    // serde would read an object from an array of its fields, and take
    // `null` for an absent optional member: the forms refuse both first.
    check_forms(known, data)?;
    // Almost every event is well formed: parse it directly, and only when
    // that fails parse it again tracking the path, to name the field.
    if let Ok(value) = T::deserialize(&mut serde_json::Deserializer::from_str(data)) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_str(data);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let mut path = error.path().to_string();
        let mut message = error.inner().to_string();
        if let Some((member, refined)) = content_part_error(data, &path) {
            path.push_str(&member);
            message = refined;
        }
        let path = if path == "." || path.is_empty() {
            "data".to_owned()
        } else {
            format!("data.{path}")
        };
        ShapeError {
            event_type: known.as_str(),
            path,
            message: serde_message(&message),
        }
    })
}

/// The member of a message's content part that its kind refuses, when
/// `path` (of an error in `data`) ends at the part, `content[N]`: serde
/// reads a part whole before it knows its kind, so the path it tracks
/// stops there. The part is read again as its kind's struct, tracking the
/// path: the member (`.size`) and serde's message for it; `None` when that
/// names nothing more (an unknown kind, an error of the part as a whole).
fn content_part_error(data: &str, path: &str) -> Option<(String, String)> {
    let index: usize = path
        .strip_prefix("content[")?
        .strip_suffix(']')?
        .parse()
        .ok()?;
    let value: serde_json::Value = serde_json::from_str(data).ok()?;
    let mut fields = value.get("content")?.get(index)?.as_object()?.clone();
    let kind = fields.remove("type")?;
    let fields = serde_json::Value::Object(fields);
    let error = match kind.as_str()? {
        "text" => serde_path_to_error::deserialize::<_, TextPart>(&fields).err(),
        "image" => serde_path_to_error::deserialize::<_, ImagePart>(&fields).err(),
        "attachment" => serde_path_to_error::deserialize::<_, AttachmentPart>(&fields).err(),
        _ => None,
    }?;
    let member = error.path().to_string();
    match member.as_str() {
        "." | "" => None,
        _ => Some((format!(".{member}"), error.inner().to_string())),
    }
}

/// A serde message about JSON read (a log's, a transcript's), fit to be
/// shown on one line: without the " at line 1 column 17" serde_json
/// appends (the caller says where), and with the line breaks and tabs of the names it quotes
/// (`` unknown field `…` ``, unquoted log text) written as `\n`, `\r` and
/// `\t`, so that a name cannot print a line of its own.
pub fn serde_message(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(index) => &message[..index],
        None => message,
    };
    // serde_json's words for the escape of half a surrogate pair, leading
    // or trailing, read as if the escape were cut short or misplaced.
    if matches!(
        message,
        "unexpected end of hex escape" | "lone leading surrogate in hex escape"
    ) {
        return "a string that is not Unicode text (an escaped lone surrogate, half of a pair \
                such as \\ud800 or \\udc00)"
            .to_owned();
    }
    one_line(message)
}

/// `text` with its line breaks and tabs written as `\n`, `\r` and `\t`:
/// log text quoted in a message that must stay one line (a name serde
/// quotes in its error, a line of input refused). Other control characters
/// are the printing writer's to escape.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

/// An optional member: may be absent, but when present it is never null.
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde quotes a name it does not know as the log spells it: a line
    /// break in it is written as `\n`, so a message shows on one line.
    #[test]
    fn a_name_serde_quotes_cannot_break_a_message_into_lines() {
        let data = r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text`\nw: ok\t","text":"hi"}]}"#;
        let error = Event::parse("message", data).expect_err("an unknown content type");
        assert!(!error.message.contains(['\n', '\t']), "{error:?}");
        assert!(error.message.contains(r"text`\nw: ok\t"), "{error:?}");
    }

    #[test]
    fn a_type_is_refused_for_a_control_or_bidirectional_character_and_for_nothing_else() {
        for allowed in [
            "tool/start",
            "future/kind v2",
            "~x",
            "café/événement",
            "型/x",
        ] {
            assert_eq!(event_type_error(allowed), None, "{allowed:?}");
        }
        for (refused, code) in [
            ("a\tb", "U+0009"),
            ("del\u{7f}", "U+007F"),
            ("x\u{1b}[2J", "U+001B"),
            ("c1\u{9b}", "U+009B"),
            ("é\u{202e}x", "U+202E"),
        ] {
            let error = event_type_error(refused).unwrap_or_default();
            assert!(error.contains(code), "{refused:?}: {error:?}");
        }
        assert_eq!(
            event_type_error("").as_deref(),
            Some("the event type is empty")
        );
    }

    #[test]
    fn every_type_parses_from_its_spelling_and_nothing_else_does() {
        for known in EventType::ALL {
            assert_eq!(EventType::parse(known.as_str()), Some(*known));
            assert_eq!(EventType::parse(&known.as_str().to_uppercase()), None);
        }
        assert_eq!(EventType::parse("turn/start "), None);
        assert_eq!(EventType::parse(""), None);
    }

    fn error(event_type: &str, data: &str) -> String {
        match Event::parse(event_type, data) {
            Ok(event) => panic!("{data} parsed as {event:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            error("approval/policy", r#"{"policy":"sometimes"}"#),
            "approval/policy data.policy: \"sometimes\" is not a valid approval policy (expected ask | never)"
        );
        assert_eq!(
            error("turn/start", r#"{"turnId":3}"#),
            "turn/start data.turnId: invalid type: integer `3`, expected a string"
        );
        assert_eq!(
            error("turn/start", r#"{}"#),
            "turn/start data: missing field `turnId`"
        );
        assert_eq!(
            error("turn/start", "[]"),
            "turn/start data: must be a JSON object"
        );
        assert!(error(
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"video"}]}"#
        )
        .contains("data.content[0]"));
        // A member of a part is named, not only the part (serde reads a
        // part whole before it knows its kind).
        let message = |part: &str| {
            format!(
                r#"{{"role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"ok"}},{part}]}}"#
            )
        };
        assert_eq!(
            error(
                "message",
                &message(r#"{"type":"image","mediaType":"image/png","size":"2048"}"#)
            ),
            "message data.content[1].size: invalid type: string \"2048\", expected u64"
        );
        assert_eq!(
            error("message", &message(r#"{"type":"attachment","name":7}"#)),
            "message data.content[1].name: invalid type: integer `7`, expected a string"
        );
        assert_eq!(
            error("message", &message(r#"{"type":"text","text":false}"#)),
            "message data.content[1].text: invalid type: boolean `false`, expected a string"
        );
        assert_eq!(
            error("message", &message(r#"{"type":"image"}"#)),
            "message data.content[1]: missing field `mediaType`"
        );
        assert!(error(
            "tool/start",
            r#"{"callId":"c","stepId":"s","name":"n","arguments":1,"parentCallId":null}"#
        )
        .contains("parentCallId"));
    }

    #[test]
    fn unknown_types_are_kept_as_unknown() {
        assert_eq!(Event::parse("x/y", "42"), Ok(Event::Unknown));
    }
}
