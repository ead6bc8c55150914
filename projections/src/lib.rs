//! Pure folds over a session: policy, presets, turns, steps, calls,
//! approvals, message authority, children, and the Auto-review request.
//!
//! Nothing here performs I/O: every function takes a header and records and
//! returns values. [`SessionState`] is the incremental fold of docs/EVENTS.md, "Rules" (the
//! store's writer checks each append against it, `fold` of the first k
//! records is the projection as of seq k); [`delegate`] and [`preset_switch`]
//! compute what a fork and the preset writer write (docs/EVENTS.md); [`message_authority`] is the source-authority rule
//! the reviewer's request is built on.
//!
//! # From records to a projection and a review
//!
//! ```
//! use serde_json::json;
//! use sessionlog_projections::{
//!     build_review_request, fold, parse_review_result, Decision, Defaults,
//!     PendingAction, PresetView, DEFAULT_MAX_REQUEST_BYTES,
//! };
//! use sessionlog_schema::{
//!     ApprovalPolicy, EventData, EventRecord, Message, Preset, PresetChange, RequestHeader,
//!     SandboxMode, SandboxModeChange, SessionHeader, SessionId, StepStart, ToolDefinition,
//!     ToolStart, TurnStart,
//! };
//!
//! /// The record typed `data` becomes at `seq`.
//! fn record<D: EventData>(seq: u64, data: &D) -> EventRecord {
//!     EventRecord::new(seq, 1_700_000_000_000 + seq, None, D::EVENT_TYPE.as_str(), &data.to_json())
//! }
//!
//! let header = SessionHeader::root(SessionId::parse("a")?, 1_700_000_000_000, "/work".into());
//! let shell = ToolDefinition::new("shell", "Run a command", &json!({"type": "object"}));
//! let events = vec![
//!     record(1, &SandboxModeChange::new(SandboxMode::DangerFullAccess)),
//!     record(2, &PresetChange::new(Preset::Auto)),
//!     record(3, &TurnStart::new("t1")),
//!     record(4, &Message::user("Run the tests")),
//!     record(5, &StepStart::new("s1", "t1")),
//!     record(6, &RequestHeader::new("p", "m", ApprovalPolicy::Ask, SandboxMode::DangerFullAccess, vec![shell])),
//! ];
//!
//! // The fold: the state as of the last event, and every rule violation.
//! let (state, violations) = fold(header.clone(), &events);
//! assert!(violations.is_empty());
//! let projection = state.projection(&Defaults::default());
//! assert_eq!(projection.preset, PresetView::Named(Preset::Auto));
//! assert_eq!(projection.open_step.as_deref(), Some("s1"));
//!
//! // The Auto reviewer's request for the call about to run, from the whole log.
//! let call = ToolStart::new("c1", "s1", "shell", &json!({"command": "cargo test"}));
//! let request = build_review_request(
//!     &header,
//!     &events,
//!     &PendingAction::from_tool_start(&call),
//!     DEFAULT_MAX_REQUEST_BYTES,
//! )?;
//! assert!(request.contains(r#""authority":"user","text":"Run the tests""#));
//!
//! // The reviewer's reply, read strictly.
//! let reply = br#"{"blocks":[{"type":"text","text":"{\"risk\":\"low\",\"decision\":\"allow\"}"}],"stop":"stop"}"#;
//! let decision = parse_review_result(reply).map_err(|failure| failure.message)?;
//! assert_eq!(decision.decision, Decision::Allow);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod authority;
mod chain;
mod delegation;
mod frozen;
mod projection;
mod review;
mod seal;
mod state;
mod state_codec;
mod violation;

#[cfg(test)]
mod test_log;

pub use authority::{message_authority, Authority};
pub use delegation::{
    child_header, delegate, delegate_from_state, preset_switch, ChildSeed, DelegationError,
    PresetSwitchError,
};
pub use frozen::{PageSource, SnapshotPage};
pub use projection::{PresetView, Projection, Setting, AUTO_REVIEW_INTEGRATION};
pub use review::*;
pub use seal::{
    check_claimed_chain, check_sealed, check_trusted, claimed_chain, parse_anchor_file, Anchor,
    AnchorError, SealInfo,
};
pub use state::{fold, fold_stored, type_violation, CallState, Defaults, Mark, SessionState};
pub use state_codec::SnapshotTrust;
pub use violation::{Violation, ViolationKind};
