//! `EventView`: what a fold reads of an event, validated as completely as
//! [`Event::parse`] validates it, without owning anything.
//!
//! A fold over a long log checks the shape of every event but reads only a
//! few ids and values of each. Parsing into the owned [`Event`] copies every
//! text, argument and result; the view walks the same JSON with structs that
//! mirror the owned ones member for member (same names, same optional and
//! `null` rules, same vocabularies) but keep only the ids the rules compare,
//! borrowed from the record where the text has no escapes. A mirror may
//! refuse more than its owned struct (content parts are read only in the
//! form writers use, `type` first), never less: whenever it refuses, the
//! owned parse runs and decides, so the view accepts exactly what
//! [`Event::parse`] accepts and fails with its error.
//!
//! Keep each mirror below in step with its owned struct in `event.rs`; the
//! test at the bottom and the projections' fold property check it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, IgnoredAny};
use serde::Deserialize;

use crate::event::present;
use crate::forms::check_forms;
use crate::view_scanner::scan_view;
use crate::{
    ApprovalOutcome, ApprovalPolicy, ChildMode, Event, EventType, MessageRole, Preset, SandboxMode,
    Seal, SettleStatus, ShapeError,
};

/// The ids and values a fold reads of one event. Built by
/// [`EventView::parse`] (which validates the whole event) or from an owned
/// [`Event`] with [`EventView::of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventView<'a> {
    /// `request/header`: the approval policy the runtime sent.
    RequestHeader {
        /// `approvalPolicy`.
        approval_policy: ApprovalPolicy,
    },
    /// `turn/start`.
    TurnStart {
        /// `turnId`.
        turn_id: Cow<'a, str>,
    },
    /// `turn/end`.
    TurnEnd {
        /// `turnId`.
        turn_id: Cow<'a, str>,
    },
    /// `step/start`.
    StepStart {
        /// `stepId`.
        step_id: Cow<'a, str>,
        /// `turnId`.
        turn_id: Cow<'a, str>,
    },
    /// `step/end`.
    StepEnd {
        /// `stepId`.
        step_id: Cow<'a, str>,
    },
    /// `message` (its content is validated, not kept).
    Message {
        /// `source.kind`.
        source_kind: Cow<'a, str>,
    },
    /// `tool/start` (its arguments and parent call are validated, not
    /// kept).
    ToolStart {
        /// `callId`.
        call_id: Cow<'a, str>,
        /// `stepId`.
        step_id: Cow<'a, str>,
        /// `name`.
        name: Cow<'a, str>,
    },
    /// `tool/settle` (status, result and error validated, not kept).
    ToolSettle {
        /// `callId`.
        call_id: Cow<'a, str>,
    },
    /// `approval/policy`.
    ApprovalPolicy {
        /// `policy`.
        policy: ApprovalPolicy,
    },
    /// `sandbox/mode`.
    SandboxMode {
        /// `mode`.
        mode: SandboxMode,
    },
    /// `permission/preset`.
    PermissionPreset {
        /// `preset`.
        preset: Preset,
    },
    /// `approval/asked`.
    ApprovalAsked {
        /// `requestId`.
        request_id: Cow<'a, str>,
        /// `turnId`.
        turn_id: Cow<'a, str>,
    },
    /// `approval/decided` (its outcome is validated, not kept).
    ApprovalDecided {
        /// `requestId`.
        request_id: Cow<'a, str>,
    },
    /// `checkpoint`.
    Checkpoint,
    /// `child/created`.
    ChildCreated,
    /// `seal`: all of its data (a few dozen bytes), boxed so that the
    /// views of other events stay small.
    Seal(Box<Seal>),
    /// A type this version does not know.
    Unknown,
}

impl<'a> EventView<'a> {
    /// Validates `data` of an event of type `event_type` exactly as
    /// [`Event::parse`] does (same acceptance, same error) and returns what
    /// a fold reads of it.
    pub fn parse(event_type: &str, data: &'a str) -> Result<EventView<'a>, ShapeError> {
        match Self::parse_mirror(event_type, data) {
            Some(view) => Ok(view),
            // The owned parse names the field; should it accept what the
            // mirror refused, its event is used as is.
            None => Event::parse(event_type, data).map(|event| EventView::of(&event).into_owned()),
        }
    }

    /// Validates `data` as [`parse`](Self::parse) does and proves, in the
    /// same scan, that it is one JSON value. `None` when it is not JSON (the
    /// record holding it is damage, not an event whose shape is wrong).
    ///
    /// For a known type the mirror parse reads every byte of `data`, so
    /// when it accepts (the common case) nothing else runs; when it refuses,
    /// `data` is checked for JSON on its own and then parsed as `parse`
    /// parses it. An unknown type is only checked for JSON.
    pub(crate) fn parse_json(
        event_type: &str,
        data: &'a str,
    ) -> Option<Result<EventView<'a>, ShapeError>> {
        if let Some(known) = EventType::parse(event_type) {
            if let Some(view) = Self::parse_known_mirror(known, data) {
                return Some(Ok(view));
            }
        }
        serde_json::from_str::<IgnoredAny>(data).ok()?;
        Some(Self::parse(event_type, data))
    }

    /// The view of an owned event, borrowing its ids.
    pub fn of(event: &'a Event) -> EventView<'a> {
        let text = |value: &'a String| Cow::Borrowed(value.as_str());
        match event {
            Event::RequestHeader(header) => EventView::RequestHeader {
                approval_policy: header.approval_policy,
            },
            Event::TurnStart(start) => EventView::TurnStart {
                turn_id: text(&start.turn_id),
            },
            Event::TurnEnd(end) => EventView::TurnEnd {
                turn_id: text(&end.turn_id),
            },
            Event::StepStart(start) => EventView::StepStart {
                step_id: text(&start.step_id),
                turn_id: text(&start.turn_id),
            },
            Event::StepEnd(end) => EventView::StepEnd {
                step_id: text(&end.step_id),
            },
            Event::Message(message) => EventView::Message {
                source_kind: text(&message.source.kind),
            },
            Event::ToolStart(start) => EventView::ToolStart {
                call_id: text(&start.call_id),
                step_id: text(&start.step_id),
                name: text(&start.name),
            },
            Event::ToolSettle(settle) => EventView::ToolSettle {
                call_id: text(&settle.call_id),
            },
            Event::ApprovalPolicy(change) => EventView::ApprovalPolicy {
                policy: change.policy,
            },
            Event::SandboxMode(change) => EventView::SandboxMode { mode: change.mode },
            Event::PermissionPreset(change) => EventView::PermissionPreset {
                preset: change.preset,
            },
            Event::ApprovalAsked(asked) => EventView::ApprovalAsked {
                request_id: text(&asked.request_id),
                turn_id: text(&asked.turn_id),
            },
            Event::ApprovalDecided(decided) => EventView::ApprovalDecided {
                request_id: text(&decided.request_id),
            },
            Event::Checkpoint(_) => EventView::Checkpoint,
            Event::ChildCreated(_) => EventView::ChildCreated,
            Event::Seal(seal) => EventView::Seal(Box::new(seal.clone())),
            Event::Unknown => EventView::Unknown,
        }
    }

    /// The same view owning its texts.
    pub fn into_owned(self) -> EventView<'static> {
        let own = |text: Cow<'a, str>| Cow::Owned(text.into_owned());
        match self {
            EventView::RequestHeader { approval_policy } => {
                EventView::RequestHeader { approval_policy }
            }
            EventView::TurnStart { turn_id } => EventView::TurnStart {
                turn_id: own(turn_id),
            },
            EventView::TurnEnd { turn_id } => EventView::TurnEnd {
                turn_id: own(turn_id),
            },
            EventView::StepStart { step_id, turn_id } => EventView::StepStart {
                step_id: own(step_id),
                turn_id: own(turn_id),
            },
            EventView::StepEnd { step_id } => EventView::StepEnd {
                step_id: own(step_id),
            },
            EventView::Message { source_kind } => EventView::Message {
                source_kind: own(source_kind),
            },
            EventView::ToolStart {
                call_id,
                step_id,
                name,
            } => EventView::ToolStart {
                call_id: own(call_id),
                step_id: own(step_id),
                name: own(name),
            },
            EventView::ToolSettle { call_id } => EventView::ToolSettle {
                call_id: own(call_id),
            },
            EventView::ApprovalPolicy { policy } => EventView::ApprovalPolicy { policy },
            EventView::SandboxMode { mode } => EventView::SandboxMode { mode },
            EventView::PermissionPreset { preset } => EventView::PermissionPreset { preset },
            EventView::ApprovalAsked {
                request_id,
                turn_id,
            } => EventView::ApprovalAsked {
                request_id: own(request_id),
                turn_id: own(turn_id),
            },
            EventView::ApprovalDecided { request_id } => EventView::ApprovalDecided {
                request_id: own(request_id),
            },
            EventView::Checkpoint => EventView::Checkpoint,
            EventView::ChildCreated => EventView::ChildCreated,
            EventView::Seal(seal) => EventView::Seal(seal),
            EventView::Unknown => EventView::Unknown,
        }
    }

    /// The mirror parse; `None` when it refuses (the owned parse then says
    /// why).
    fn parse_mirror(event_type: &str, data: &'a str) -> Option<EventView<'a>> {
        match EventType::parse(event_type) {
            Some(known) => Self::parse_known_mirror(known, data),
            None => Some(EventView::Unknown),
        }
    }

    /// The mirror parse of a known type: the hand-written scanner when it
    /// is sure, else the serde mirrors.
    fn parse_known_mirror(known: EventType, data: &'a str) -> Option<EventView<'a>> {
        scan_view(known, data).or_else(|| Self::parse_known_serde_mirror(known, data))
    }

    /// The serde mirror parse of a known type.
    fn parse_known_serde_mirror(known: EventType, data: &'a str) -> Option<EventView<'a>> {
        if !data.trim_start().starts_with('{') {
            return None;
        }
        let view = match known {
            EventType::RequestHeader => {
                let header: RequestHeaderShape = mirror(known, data)?;
                EventView::RequestHeader {
                    approval_policy: header.approval_policy,
                }
            }
            EventType::TurnStart => EventView::TurnStart {
                turn_id: mirror::<TurnShape>(known, data)?.turn_id,
            },
            EventType::TurnEnd => EventView::TurnEnd {
                turn_id: mirror::<TurnShape>(known, data)?.turn_id,
            },
            EventType::StepStart => {
                let start: StepStartShape = mirror(known, data)?;
                EventView::StepStart {
                    step_id: start.step_id,
                    turn_id: start.turn_id,
                }
            }
            EventType::StepEnd => EventView::StepEnd {
                step_id: mirror::<StepEndShape>(known, data)?.step_id,
            },
            EventType::Message => EventView::Message {
                source_kind: mirror::<MessageShape>(known, data)?.source.kind,
            },
            EventType::ToolStart => {
                let start: ToolStartShape = mirror(known, data)?;
                EventView::ToolStart {
                    call_id: start.call_id,
                    step_id: start.step_id,
                    name: start.name,
                }
            }
            EventType::ToolSettle => EventView::ToolSettle {
                call_id: mirror::<ToolSettleShape>(known, data)?.call_id,
            },
            EventType::ApprovalPolicy => EventView::ApprovalPolicy {
                policy: mirror::<ApprovalPolicyShape>(known, data)?.policy,
            },
            EventType::SandboxMode => EventView::SandboxMode {
                mode: mirror::<SandboxModeShape>(known, data)?.mode,
            },
            EventType::PermissionPreset => EventView::PermissionPreset {
                preset: mirror::<PresetShape>(known, data)?.preset,
            },
            EventType::ApprovalAsked => {
                let asked: ApprovalAskedShape = mirror(known, data)?;
                EventView::ApprovalAsked {
                    request_id: asked.request_id,
                    turn_id: asked.turn_id,
                }
            }
            EventType::ApprovalDecided => EventView::ApprovalDecided {
                request_id: mirror::<ApprovalDecidedShape>(known, data)?.request_id,
            },
            EventType::Checkpoint => {
                let _: CheckpointShape = mirror(known, data)?;
                EventView::Checkpoint
            }
            EventType::ChildCreated => {
                let _: ChildCreatedShape = mirror(known, data)?;
                EventView::ChildCreated
            }
            // The owned type is its own mirror: it keeps everything it reads.
            EventType::Seal => EventView::Seal(Box::new(mirror::<Seal>(known, data)?)),
        };
        Some(view)
    }
}

/// Parses a mirror the way `typed` parses its owned struct (its forms
/// checked first, as there), and refuses
/// text after the value (which `typed` never meets: the data it is given is
/// one JSON value), so that an accepted `data` is proven to be JSON.
fn mirror<'a, T: Deserialize<'a>>(known: EventType, data: &'a str) -> Option<T> {
    check_forms(known, data).ok()?;
    let mut deserializer = serde_json::Deserializer::from_str(data);
    let value = T::deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    Some(value)
}

/// Any JSON string, accepted as `String` accepts it, kept nowhere.
struct AnyString;

impl<'de> Deserialize<'de> for AnyString {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_string(AnyStringVisitor)
    }
}

struct AnyStringVisitor;

impl<'de> de::Visitor<'de> for AnyStringVisitor {
    type Value = AnyString;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyString, E> {
        Ok(AnyString)
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<AnyString, E> {
        match std::str::from_utf8(bytes) {
            Ok(_) => Ok(AnyString),
            Err(_) => Err(E::invalid_value(de::Unexpected::Bytes(bytes), &self)),
        }
    }
}

// Mirrors of the owned structs of `event.rs`, member for member. A field
// the fold reads is a `Cow`, one it only validates is `AnyString` (for a
// `String`), `IgnoredAny` (for raw JSON) or the owned type itself.

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestHeaderShape {
    #[serde(rename = "provider")]
    _provider: AnyString,
    #[serde(rename = "model")]
    _model: AnyString,
    approval_policy: ApprovalPolicy,
    #[serde(rename = "sandboxMode")]
    _sandbox_mode: SandboxMode,
    #[serde(rename = "tools")]
    _tools: Vec<ToolDefinitionShape>,
}

#[derive(Deserialize)]
struct ToolDefinitionShape {
    #[serde(rename = "name")]
    _name: AnyString,
    #[serde(rename = "description")]
    _description: AnyString,
    #[serde(rename = "parameters")]
    _parameters: IgnoredAny,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnShape<'a> {
    #[serde(borrow)]
    turn_id: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StepStartShape<'a> {
    #[serde(borrow)]
    step_id: Cow<'a, str>,
    #[serde(borrow)]
    turn_id: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StepEndShape<'a> {
    #[serde(borrow)]
    step_id: Cow<'a, str>,
}

#[derive(Deserialize)]
struct MessageShape<'a> {
    #[serde(rename = "role")]
    _role: MessageRole,
    #[serde(borrow)]
    source: MessageSourceShape<'a>,
    #[serde(rename = "content")]
    _content: Vec<ContentPartShape>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageSourceShape<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(rename = "senderSessionId", default, deserialize_with = "present")]
    _sender_session_id: Option<AnyString>,
    #[serde(rename = "name", default, deserialize_with = "present")]
    _name: Option<AnyString>,
}

/// A content part, read without the buffering serde's internally tagged
/// enums need: only a map whose first member is `type` followed by members
/// of that kind of part (as our writer and every known runtime write parts)
/// is read here; anything else is refused so that the owned parse, which
/// accepts every form, decides.
struct ContentPartShape;

impl<'de> Deserialize<'de> for ContentPartShape {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ContentPartVisitor)
    }
}

struct ContentPartVisitor;

/// The members of one kind of part: each required or optional, by name.
struct PartMembers {
    required: &'static [&'static str],
    optional_strings: &'static [&'static str],
    has_size: bool,
}

const TEXT_PART: PartMembers = PartMembers {
    required: &["text"],
    optional_strings: &[],
    has_size: false,
};
const IMAGE_PART: PartMembers = PartMembers {
    required: &["mediaType"],
    optional_strings: &["name", "data"],
    has_size: true,
};
const ATTACHMENT_PART: PartMembers = PartMembers {
    required: &["name"],
    optional_strings: &["mediaType", "data"],
    has_size: true,
};

impl<'de> de::Visitor<'de> for ContentPartVisitor {
    type Value = ContentPartShape;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a content part whose first member is type")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ContentPartShape, A::Error> {
        let refuse = || de::Error::custom("not read by the view");
        match map.next_key::<Cow<'de, str>>()? {
            Some(key) if key == "type" => {}
            _ => return Err(refuse()),
        }
        let kind = map.next_value::<Cow<'de, str>>()?;
        let members = match kind.as_ref() {
            "text" => &TEXT_PART,
            "image" => &IMAGE_PART,
            "attachment" => &ATTACHMENT_PART,
            _ => return Err(refuse()),
        };
        // Seen members, by index in required ++ optional_strings ++ [size].
        let mut seen = [false; 4];
        let size_index = members.required.len() + members.optional_strings.len();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let index = members
                .required
                .iter()
                .chain(members.optional_strings)
                .position(|name| *name == key)
                .or_else(|| (members.has_size && key == "size").then_some(size_index));
            match index {
                Some(index) if seen[index] => return Err(refuse()),
                Some(index) if index == size_index => {
                    seen[index] = true;
                    map.next_value::<u64>()?;
                }
                Some(index) => {
                    seen[index] = true;
                    map.next_value::<AnyString>()?;
                }
                // A repeated `type`, or a member of no kind of part: the
                // owned parse buffers such a value as serde's `Content`,
                // which refuses numbers and strings a skip accepts
                // (`1e999`, a lone surrogate), so it decides.
                None => return Err(refuse()),
            }
        }
        if seen[..members.required.len()].iter().all(|seen| *seen) {
            Ok(ContentPartShape)
        } else {
            Err(refuse())
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolStartShape<'a> {
    #[serde(borrow)]
    call_id: Cow<'a, str>,
    #[serde(borrow)]
    step_id: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(rename = "arguments")]
    _arguments: IgnoredAny,
    #[serde(rename = "parentCallId", default, deserialize_with = "present")]
    _parent_call_id: Option<AnyString>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolSettleShape<'a> {
    #[serde(borrow)]
    call_id: Cow<'a, str>,
    #[serde(rename = "status")]
    _status: SettleStatus,
    #[serde(rename = "result", default)]
    _result: Option<IgnoredAny>,
    #[serde(rename = "error", default, deserialize_with = "present")]
    _error: Option<ToolErrorShape>,
}

#[derive(Deserialize)]
struct ToolErrorShape {
    #[serde(rename = "name")]
    _name: AnyString,
    #[serde(rename = "code")]
    _code: AnyString,
    #[serde(rename = "message", default, deserialize_with = "present")]
    _message: Option<AnyString>,
    #[serde(rename = "reason", default, deserialize_with = "present")]
    _reason: Option<AnyString>,
}

#[derive(Deserialize)]
struct ApprovalPolicyShape {
    policy: ApprovalPolicy,
}

#[derive(Deserialize)]
struct SandboxModeShape {
    mode: SandboxMode,
}

#[derive(Deserialize)]
struct PresetShape {
    preset: Preset,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApprovalAskedShape<'a> {
    #[serde(borrow)]
    request_id: Cow<'a, str>,
    #[serde(borrow)]
    turn_id: Cow<'a, str>,
    #[serde(rename = "tool")]
    _tool: AnyString,
    #[serde(rename = "reason", default, deserialize_with = "present")]
    _reason: Option<AnyString>,
    #[serde(rename = "callId", default, deserialize_with = "present")]
    _call_id: Option<AnyString>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApprovalDecidedShape<'a> {
    #[serde(borrow)]
    request_id: Cow<'a, str>,
    #[serde(rename = "outcome")]
    _outcome: ApprovalOutcome,
}

#[derive(Deserialize)]
struct CheckpointShape {
    #[serde(rename = "summary")]
    _summary: AnyString,
    #[serde(rename = "throughSeq")]
    _through_seq: u64,
}

#[derive(Deserialize)]
struct ChildCreatedShape {
    #[serde(rename = "childSessionId")]
    _child_session_id: AnyString,
    #[serde(rename = "mode")]
    _mode: ChildMode,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events around every shape rule: each must be accepted by the view
    /// exactly when the owned parse accepts it, with the same error.
    const CASES: &[(&str, &str)] = &[
        ("turn/start", r#"{"turnId":"t1"}"#),
        ("turn/start", r#"{"turnId":"t\u00e91"}"#),
        ("turn/start", r#"{"turnId":7}"#),
        ("turn/start", r#"{}"#),
        ("turn/start", r#"[]"#),
        ("turn/start", r#"{"turnId":"a","turnId":"b"}"#),
        ("turn/start", r#"{"turnId":"a","extra":[1,{"x":null}]}"#),
        ("turn/end", r#"{"turnId":null}"#),
        ("step/start", r#"{"stepId":"s","turnId":"t"}"#),
        ("step/start", r#"{"stepId":"s"}"#),
        ("step/end", r#"{"stepId":"s"}"#),
        (
            "request/header",
            r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"read-only","tools":[{"name":"n","description":"d","parameters":{}}]}"#,
        ),
        (
            "request/header",
            r#"{"provider":"p","model":"m","approvalPolicy":"sometimes","sandboxMode":"read-only","tools":[]}"#,
        ),
        (
            "request/header",
            r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"read-only","tools":[{"name":"n","description":"d"}]}"#,
        ),
        (
            "request/header",
            r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"read-only","tools":[["n","d",{}]]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a\nb"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"agent-message","senderSessionId":"p"},"content":[{"type":"image","mediaType":"image/png","size":3,"data":"AAA"},{"type":"attachment","name":"f"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user","name":null},"content":[]}"#,
        ),
        (
            "message",
            r#"{"role":"robot","source":{"kind":"user"},"content":[]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"video"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a","type":"text"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[["text","a"]]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"text":"a","type":"text"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a","text":"b"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a","size":-1}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"image","mediaType":"x","size":1.5}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"image","name":"x"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"attachment","name":"f","size":null}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"t\u0065xt","t\u0065xt":"a"}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":["text"]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a","extra":1e999}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"image","mediaType":"x","size":-1}]}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"attachment","name":"f","mediaType":null}]}"#,
        ),
        (
            "tool/start",
            r#"{"callId":"c","stepId":"s","name":"n","arguments":{"a":[1,2.5,"x"]}}"#,
        ),
        (
            "tool/start",
            r#"{"callId":"c","stepId":"s","name":"n","arguments":null,"parentCallId":"p"}"#,
        ),
        (
            "tool/start",
            r#"{"callId":"c","stepId":"s","name":"n","arguments":1,"parentCallId":null}"#,
        ),
        ("tool/start", r#"{"callId":"c","stepId":"s","name":"n"}"#),
        (
            "tool/settle",
            r#"{"callId":"c","status":"ok","result":null}"#,
        ),
        (
            "tool/settle",
            r#"{"callId":"c","status":"error","error":{"name":"E","code":"C","reason":"r"}}"#,
        ),
        ("tool/settle", r#"{"callId":"c","status":"done"}"#),
        (
            "tool/settle",
            r#"{"callId":"c","status":"ok","error":null}"#,
        ),
        (
            "tool/settle",
            r#"{"callId":"c","status":"ok","error":{"name":"E"}}"#,
        ),
        ("approval/policy", r#"{"policy":"never"}"#),
        ("approval/policy", r#"{"policy":null}"#),
        ("sandbox/mode", r#"{"mode":"root"}"#),
        ("permission/preset", r#"{"preset":"auto"}"#),
        (
            "approval/asked",
            r#"{"requestId":"r","turnId":"t","tool":"n","reason":"w","callId":"c"}"#,
        ),
        (
            "approval/asked",
            r#"{"requestId":"r","turnId":"t","tool":"n","callId":null}"#,
        ),
        (
            "approval/decided",
            r#"{"requestId":"r","outcome":"allowed-once"}"#,
        ),
        ("approval/decided", r#"{"requestId":"r","outcome":"maybe"}"#),
        ("checkpoint", r#"{"summary":"s","throughSeq":3}"#),
        ("checkpoint", r#"{"summary":"s","throughSeq":3.0}"#),
        ("checkpoint", r#"{"summary":"s","throughSeq":"3"}"#),
        (
            "child/created",
            r#"{"childSessionId":"k","mode":"continuable"}"#,
        ),
        (
            "child/created",
            r#"{"childSessionId":"k","mode":"forever"}"#,
        ),
        (
            "message",
            r#"{"role":"user","source":["user"],"content":[]}"#,
        ),
        (
            "tool/settle",
            r#"{"callId":"c","status":"error","error":["E","C"]}"#,
        ),
        (
            "tool/settle",
            r#"{"callId":"c","status":"ok","result":[null]}"#,
        ),
        ("future/thing", "[1,2]"),
    ];

    #[test]
    fn the_view_accepts_exactly_what_the_owned_parse_accepts() {
        // The mirror may refuse more (the owned parse then decides), never
        // less; the view as a whole agrees with the owned parse.
        for (event_type, data) in CASES {
            let owned = Event::parse(event_type, data);
            let mirrored = EventView::parse_mirror(event_type, data);
            assert!(
                mirrored.is_none() || owned.is_ok(),
                "{event_type} {data}: the mirror accepts what the owned parse refuses: {owned:?}"
            );
            let view = EventView::parse(event_type, data);
            match (&owned, &view) {
                (Ok(event), Ok(view)) => assert_eq!(&EventView::of(event), view),
                (Err(owned), Err(viewed)) => assert_eq!(owned, viewed),
                _ => panic!("{event_type} {data}: owned {owned:?}, view {view:?}"),
            }
        }
    }
}
