//! Writing typed event data: every `data` struct of the v1 vocabulary
//! serialises to exactly the JSON [`Event::parse`](crate::Event::parse)
//! reads back (optional members left out, never `null`), and
//! [`EventData`] ties each one to its event type, so a runtime builds
//! events from values, never by formatting JSON text.
//!
//! ```
//! use sessionlog_schema::{Event, EventData, Message, ToolStart};
//!
//! let message = Message::user("Run the tests");
//! let json = message.to_json();
//! assert_eq!(
//!     json,
//!     r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"Run the tests"}]}"#
//! );
//! assert_eq!(Event::parse(Message::EVENT_TYPE.as_str(), &json), Ok(Event::Message(message)));
//!
//! let call = ToolStart::new("c1", "s1", "shell", &serde_json::json!({"command": "cargo test"}));
//! assert_eq!(call.arguments.get(), r#"{"command":"cargo test"}"#);
//! ```

use serde::Serialize;
use serde_json::value::RawValue;

use crate::{
    ApprovalAsked, ApprovalDecided, ApprovalOutcome, ApprovalPolicy, ApprovalPolicyChange,
    Checkpoint, ChildCreated, ChildMode, ContentPart, EventType, Message, MessageRole,
    MessageSource, Preset, PresetChange, RequestHeader, SandboxMode, SandboxModeChange,
    SettleStatus, StepEnd, StepStart, TextPart, ToolDefinition, ToolError, ToolSettle, ToolStart,
    TurnEnd, TurnStart,
};

/// The `data` of one known event type: serialisable to the JSON the log
/// holds, and tied to its type.
pub trait EventData: Serialize {
    /// The event type this is the `data` of.
    const EVENT_TYPE: EventType;

    /// The `data` as compact JSON text.
    fn to_json(&self) -> String {
        // The data structs hold strings, numbers, vocabulary values and
        // already-valid raw JSON: no map with non-string keys and no
        // serialiser that can refuse, which are serde_json's only errors.
        match serde_json::to_string(self) {
            Ok(json) => json,
            Err(error) => unreachable!("event data always serialises: {error}"),
        }
    }
}

macro_rules! event_data {
    ($($data:ty => $event_type:ident,)+) => {
        $(impl EventData for $data {
            const EVENT_TYPE: EventType = EventType::$event_type;
        })+
    };
}

event_data! {
    RequestHeader => RequestHeader,
    TurnStart => TurnStart,
    TurnEnd => TurnEnd,
    StepStart => StepStart,
    StepEnd => StepEnd,
    Message => Message,
    ToolStart => ToolStart,
    ToolSettle => ToolSettle,
    ApprovalPolicyChange => ApprovalPolicy,
    SandboxModeChange => SandboxMode,
    PresetChange => PermissionPreset,
    ApprovalAsked => ApprovalAsked,
    ApprovalDecided => ApprovalDecided,
    Checkpoint => Checkpoint,
    ChildCreated => ChildCreated,
}

/// `value` as raw JSON text.
fn raw(value: &serde_json::Value) -> Box<RawValue> {
    // A `Value` has only string keys: serialising it cannot fail.
    match serde_json::value::to_raw_value(value) {
        Ok(raw) => raw,
        Err(error) => unreachable!("a JSON value always serialises: {error}"),
    }
}

impl RequestHeader {
    /// What a runtime sent with one model request.
    pub fn new(
        provider: impl Into<String>,
        model: impl Into<String>,
        approval_policy: ApprovalPolicy,
        sandbox_mode: SandboxMode,
        tools: Vec<ToolDefinition>,
    ) -> RequestHeader {
        RequestHeader {
            provider: provider.into(),
            model: model.into(),
            approval_policy,
            sandbox_mode,
            tools,
        }
    }
}

impl ToolDefinition {
    /// A tool offered to the model, with its parameter schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: &serde_json::Value,
    ) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: raw(parameters),
        }
    }
}

impl TurnStart {
    /// Opens turn `turn_id`.
    pub fn new(turn_id: impl Into<String>) -> TurnStart {
        TurnStart {
            turn_id: turn_id.into(),
        }
    }
}

impl TurnEnd {
    /// Closes turn `turn_id`.
    pub fn new(turn_id: impl Into<String>) -> TurnEnd {
        TurnEnd {
            turn_id: turn_id.into(),
        }
    }
}

impl StepStart {
    /// Opens step `step_id` in turn `turn_id`.
    pub fn new(step_id: impl Into<String>, turn_id: impl Into<String>) -> StepStart {
        StepStart {
            step_id: step_id.into(),
            turn_id: turn_id.into(),
        }
    }
}

impl StepEnd {
    /// Closes step `step_id`.
    pub fn new(step_id: impl Into<String>) -> StepEnd {
        StepEnd {
            step_id: step_id.into(),
        }
    }
}

impl MessageSource {
    /// A source of kind `kind` (`user`, `assistant`, ...) with no name.
    pub fn of_kind(kind: impl Into<String>) -> MessageSource {
        MessageSource {
            kind: kind.into(),
            sender_session_id: None,
            name: None,
        }
    }

    /// An `instructions` or `context` source naming its file or plugin.
    pub fn named(kind: impl Into<String>, name: impl Into<String>) -> MessageSource {
        MessageSource {
            name: Some(name.into()),
            ..MessageSource::of_kind(kind)
        }
    }

    /// An `agent-message` from session `sender`.
    pub fn agent(sender: impl Into<String>) -> MessageSource {
        MessageSource {
            sender_session_id: Some(sender.into()),
            ..MessageSource::of_kind("agent-message")
        }
    }
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> ContentPart {
        ContentPart::Text(TextPart { text: text.into() })
    }
}

impl Message {
    /// A message of `role` from `source` with one text part.
    pub fn new(role: MessageRole, source: MessageSource, text: impl Into<String>) -> Message {
        Message {
            role,
            source,
            content: vec![ContentPart::text(text)],
        }
    }

    /// What the user typed (role and source `user`).
    pub fn user(text: impl Into<String>) -> Message {
        Message::new(MessageRole::User, MessageSource::of_kind("user"), text)
    }

    /// What the model answered (role and source `assistant`).
    pub fn assistant(text: impl Into<String>) -> Message {
        Message::new(
            MessageRole::Assistant,
            MessageSource::of_kind("assistant"),
            text,
        )
    }
}

impl ToolStart {
    /// Call `call_id` of tool `name` in step `step_id`, with its arguments.
    pub fn new(
        call_id: impl Into<String>,
        step_id: impl Into<String>,
        name: impl Into<String>,
        arguments: &serde_json::Value,
    ) -> ToolStart {
        ToolStart {
            call_id: call_id.into(),
            step_id: step_id.into(),
            name: name.into(),
            arguments: raw(arguments),
            parent_call_id: None,
        }
    }

    /// The same call, made from inside program tool call `parent`.
    pub fn with_parent(self, parent: impl Into<String>) -> ToolStart {
        ToolStart {
            parent_call_id: Some(parent.into()),
            ..self
        }
    }
}

impl ToolSettle {
    /// Call `call_id` ran and returned `result`.
    pub fn ok(call_id: impl Into<String>, result: &serde_json::Value) -> ToolSettle {
        ToolSettle {
            call_id: call_id.into(),
            status: SettleStatus::Ok,
            result: Some(raw(result)),
            error: None,
        }
    }

    /// Call `call_id` failed or was refused with `error`.
    pub fn error(call_id: impl Into<String>, error: ToolError) -> ToolSettle {
        ToolSettle {
            call_id: call_id.into(),
            status: SettleStatus::Error,
            result: None,
            error: Some(error),
        }
    }

    /// Call `call_id` was cancelled.
    pub fn cancelled(call_id: impl Into<String>) -> ToolSettle {
        ToolSettle {
            call_id: call_id.into(),
            status: SettleStatus::Cancelled,
            result: None,
            error: None,
        }
    }
}

impl ToolError {
    /// An error of class `name` with stable `code`.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> ToolError {
        ToolError {
            name: name.into(),
            code: code.into(),
            message: None,
            reason: None,
        }
    }

    /// With a human message.
    pub fn with_message(self, message: impl Into<String>) -> ToolError {
        ToolError {
            message: Some(message.into()),
            ..self
        }
    }

    /// With the reason given (a reviewer's denial reason, whole).
    pub fn with_reason(self, reason: impl Into<String>) -> ToolError {
        ToolError {
            reason: Some(reason.into()),
            ..self
        }
    }
}

impl ApprovalPolicyChange {
    /// Switches to `policy`.
    pub fn new(policy: ApprovalPolicy) -> ApprovalPolicyChange {
        ApprovalPolicyChange { policy }
    }
}

impl SandboxModeChange {
    /// Switches to `mode`.
    pub fn new(mode: SandboxMode) -> SandboxModeChange {
        SandboxModeChange { mode }
    }
}

impl PresetChange {
    /// Chooses `preset`.
    pub fn new(preset: Preset) -> PresetChange {
        PresetChange { preset }
    }
}

impl ApprovalAsked {
    /// Request `request_id` in turn `turn_id` for tool `tool`.
    pub fn new(
        request_id: impl Into<String>,
        turn_id: impl Into<String>,
        tool: impl Into<String>,
    ) -> ApprovalAsked {
        ApprovalAsked {
            request_id: request_id.into(),
            turn_id: turn_id.into(),
            tool: tool.into(),
            reason: None,
            call_id: None,
        }
    }

    /// For call `call_id`.
    pub fn for_call(self, call_id: impl Into<String>) -> ApprovalAsked {
        ApprovalAsked {
            call_id: Some(call_id.into()),
            ..self
        }
    }

    /// Saying why approval is asked.
    pub fn with_reason(self, reason: impl Into<String>) -> ApprovalAsked {
        ApprovalAsked {
            reason: Some(reason.into()),
            ..self
        }
    }
}

impl ApprovalDecided {
    /// Request `request_id` ended with `outcome`.
    pub fn new(request_id: impl Into<String>, outcome: ApprovalOutcome) -> ApprovalDecided {
        ApprovalDecided {
            request_id: request_id.into(),
            outcome,
        }
    }
}

impl Checkpoint {
    /// A compaction summary covering every event through `through_seq`.
    pub fn new(summary: impl Into<String>, through_seq: u64) -> Checkpoint {
        Checkpoint {
            summary: summary.into(),
            through_seq,
        }
    }
}

impl ChildCreated {
    /// Child session `child_session_id`, used as `mode`.
    pub fn new(child_session_id: impl Into<String>, mode: ChildMode) -> ChildCreated {
        ChildCreated {
            child_session_id: child_session_id.into(),
            mode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;
    use serde_json::json;

    /// `data` serialised, parsed back as its type, and compared.
    fn round_trip<D: EventData>(data: &D) -> Event {
        let json = data.to_json();
        assert!(!json.contains("null"), "no optional member is null: {json}");
        match Event::parse(D::EVENT_TYPE.as_str(), &json) {
            Ok(event) => event,
            Err(error) => panic!("{json} does not parse back: {error}"),
        }
    }

    #[test]
    fn every_builder_serialises_to_what_parses_back_as_itself() {
        let header = RequestHeader::new(
            "anthropic",
            "claude-sonnet-4-5",
            ApprovalPolicy::Ask,
            SandboxMode::WorkspaceWrite,
            vec![ToolDefinition::new(
                "shell",
                "Run a command",
                &json!({"type": "object"}),
            )],
        );
        assert_eq!(round_trip(&header), Event::RequestHeader(header));
        let turn = TurnStart::new("t1");
        assert_eq!(round_trip(&turn), Event::TurnStart(turn));
        let turn = TurnEnd::new("t1");
        assert_eq!(round_trip(&turn), Event::TurnEnd(turn));
        let step = StepStart::new("s1", "t1");
        assert_eq!(round_trip(&step), Event::StepStart(step));
        let step = StepEnd::new("s1");
        assert_eq!(round_trip(&step), Event::StepEnd(step));
        for message in [
            Message::user("hi"),
            Message::assistant("hello"),
            Message::new(
                MessageRole::System,
                MessageSource::named("instructions", "AGENTS.md"),
                "be brief",
            ),
            Message::new(MessageRole::User, MessageSource::agent("parent"), "go"),
        ] {
            assert_eq!(round_trip(&message), Event::Message(message));
        }
        let call = ToolStart::new("c1", "s1", "shell", &json!({"command": "ls"})).with_parent("p");
        assert_eq!(round_trip(&call), Event::ToolStart(call));
        for settle in [
            ToolSettle::ok("c1", &json!({"exit": 0})),
            ToolSettle::error(
                "c1",
                ToolError::new("Denied", "AUTO_REVIEW_DENIED")
                    .with_message("denied")
                    .with_reason("reads a key"),
            ),
            ToolSettle::cancelled("c1"),
        ] {
            assert_eq!(round_trip(&settle), Event::ToolSettle(settle));
        }
        let policy = ApprovalPolicyChange::new(ApprovalPolicy::Never);
        assert_eq!(round_trip(&policy), Event::ApprovalPolicy(policy));
        let mode = SandboxModeChange::new(SandboxMode::ReadOnly);
        assert_eq!(round_trip(&mode), Event::SandboxMode(mode));
        let preset = PresetChange::new(Preset::Auto);
        assert_eq!(round_trip(&preset), Event::PermissionPreset(preset));
        let asked = ApprovalAsked::new("r1", "t1", "shell")
            .for_call("c1")
            .with_reason("writes");
        assert_eq!(round_trip(&asked), Event::ApprovalAsked(asked));
        let decided = ApprovalDecided::new("r1", ApprovalOutcome::AllowedOnce);
        assert_eq!(round_trip(&decided), Event::ApprovalDecided(decided));
        let checkpoint = Checkpoint::new("so far", 7);
        assert_eq!(round_trip(&checkpoint), Event::Checkpoint(checkpoint));
        let child = ChildCreated::new("kid", ChildMode::OneShot);
        assert_eq!(round_trip(&child), Event::ChildCreated(child));
    }

    #[test]
    fn optional_members_are_left_out_and_the_spelling_is_the_log_s() {
        assert_eq!(
            ToolStart::new("c1", "s1", "shell", &json!({})).to_json(),
            r#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{}}"#
        );
        assert_eq!(
            ToolSettle::cancelled("c1").to_json(),
            r#"{"callId":"c1","status":"cancelled"}"#
        );
        let part = ContentPart::Image(crate::ImagePart {
            media_type: "image/png".into(),
            name: None,
            size: Some(3),
            data: None,
        });
        assert_eq!(
            serde_json::to_string(&part).ok().as_deref(),
            Some(r#"{"type":"image","mediaType":"image/png","size":3}"#)
        );
    }
}
