//! Children and presets (SPEC §7): the seed of a child session forked from a
//! parent snapshot, and the batch of events that switches a live session to
//! a preset.
//!
//! Both are pure: they return what to write, and the store writes it
//! atomically (a child's header with its seed, a preset switch as one batch).

use sessionlog_schema::{
    ApprovalPolicy, EventRecord, EventType, Preset, SandboxMode, SessionHeader, SessionId,
};

use crate::{Defaults, PresetView, SessionState};

/// A child session as it is created: its header and its events (the
/// parent's copied events, then its own first events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSeed {
    /// The child's header.
    pub header: SessionHeader,
    /// Events 1..=seedLength are the parent's records unchanged; after them,
    /// the preset event and the prompt message when due.
    pub events: Vec<EventRecord>,
}

/// Why a child cannot be created from a parent snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DelegationError {
    /// The parent's log breaks the rules of §6.
    #[error("parent session {parent} breaks the rules ({count} violations); run `sessionlog verify` on it and repair it before forking")]
    ParentBreaksRules {
        /// The parent's id.
        parent: SessionId,
        /// How many of its events were refused.
        count: u64,
    },
    /// The state given is not the fold of the events given.
    #[error("parent snapshot of {parent} does not match its fold: the state is at seq {state_seq} but event {position} of {events} has seq {event_seq}")]
    SnapshotMismatch {
        /// The parent's id.
        parent: SessionId,
        /// The seq the state was folded to.
        state_seq: u64,
        /// How many events were given.
        events: u64,
        /// The 1-based position of the first event out of place (or the
        /// count, when only the length differs).
        position: u64,
        /// That event's seq (0 when there is none).
        event_seq: u64,
    },
    /// A child cannot share its parent's id.
    #[error("the child id {child} is the parent's own id; choose another")]
    ChildIsParent {
        /// The id given for both.
        child: SessionId,
    },
}

/// Why a preset switch cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PresetSwitchError {
    /// `auto` runs under either approval policy, so the caller must name one.
    #[error("switching to auto needs an approval policy (ask | never)")]
    AutoNeedsApprovalPolicy,
    /// Only `auto` lets the caller choose the approval policy.
    #[error("preset {preset} defines its own approval policy; an approval policy is only chosen for auto")]
    ApprovalPolicyOnlyForAuto {
        /// The preset asked for.
        preset: Preset,
    },
}

/// The seed of a child of `parent` named `child`, created at `now_ms`.
///
/// `parent` must be the fold of exactly `parent_events` (its good prefix)
/// with no violations; anything else is refused. The child's header takes
/// the parent's overrides as its baselines, so later parent switches never
/// reach it. When the parent projects (with `defaults`) as `auto` or
/// `full-access`, the child's first own event names that preset; when a
/// `prompt` is given, a `user`-role `agent-message` from the parent follows.
/// The new events carry `ts = now_ms` and no `batch` member: the store
/// creates a session with all its events atomically.
pub fn delegate(
    parent: &SessionState,
    parent_events: &[EventRecord],
    child: SessionId,
    prompt: Option<&str>,
    defaults: &Defaults,
    now_ms: u64,
) -> Result<ChildSeed, DelegationError> {
    let parent_header = parent.header();
    check_snapshot(parent, parent_events)?;
    if child == parent_header.id {
        return Err(DelegationError::ChildIsParent { child });
    }
    let seed_length = parent_events.len() as u64;
    let header = SessionHeader {
        id: child,
        created_at: now_ms,
        cwd: parent_header.cwd.clone(),
        parent_session: Some(parent_header.id.clone()),
        seed_length,
        delegation_depth: parent_header.delegation_depth.saturating_add(1),
        sandbox_mode: parent.sandbox_override(),
        approval_policy: parent.approval_override(),
    };
    let mut events = parent_events.to_vec();
    let mut next_seq = seed_length + 1;
    if let PresetView::Named(preset @ (Preset::Auto | Preset::FullAccess)) = parent.preset(defaults)
    {
        events.push(EventRecord::new(
            next_seq,
            now_ms,
            None,
            EventType::PermissionPreset.as_str(),
            &preset_data(preset),
        ));
        next_seq += 1;
    }
    if let Some(prompt) = prompt {
        events.push(EventRecord::new(
            next_seq,
            now_ms,
            None,
            EventType::Message.as_str(),
            &prompt_data(&parent_header.id, prompt),
        ));
    }
    Ok(ChildSeed { header, events })
}

/// The events to append, as one atomic batch, to switch a live session to
/// `preset`: a `sandbox/mode` and an `approval/policy` event for each value
/// whose effective value differs from the preset's, then the
/// `permission/preset` event.
///
/// `auto` runs under the approval policy the caller names in
/// `auto_approval` (required for `auto`, refused for the others) and keeps
/// the `danger-full-access` sandbox, so moving an Auto session to Full
/// access writes only approval `never` and leaves the sandbox as it is.
pub fn preset_switch(
    state: &SessionState,
    preset: Preset,
    auto_approval: Option<ApprovalPolicy>,
    defaults: &Defaults,
) -> Result<Vec<(EventType, String)>, PresetSwitchError> {
    let (sandbox, approval) = match (preset, auto_approval) {
        (Preset::Auto, Some(approval)) => (SandboxMode::DangerFullAccess, approval),
        (Preset::Auto, None) => return Err(PresetSwitchError::AutoNeedsApprovalPolicy),
        (_, Some(_)) => return Err(PresetSwitchError::ApprovalPolicyOnlyForAuto { preset }),
        (_, None) => preset.definition(),
    };
    let mut events = Vec::with_capacity(3);
    if state.effective_sandbox(defaults) != sandbox {
        events.push((EventType::SandboxMode, sandbox_data(sandbox)));
    }
    if state.effective_approval(defaults) != approval {
        events.push((EventType::ApprovalPolicy, approval_data(approval)));
    }
    events.push((EventType::PermissionPreset, preset_data(preset)));
    Ok(events)
}

fn check_snapshot(
    parent: &SessionState,
    parent_events: &[EventRecord],
) -> Result<(), DelegationError> {
    let parent_id = &parent.header().id;
    if parent.violation_count() > 0 {
        return Err(DelegationError::ParentBreaksRules {
            parent: parent_id.clone(),
            count: parent.violation_count(),
        });
    }
    let mismatch = |position: u64, event_seq: u64| DelegationError::SnapshotMismatch {
        parent: parent_id.clone(),
        state_seq: parent.seq(),
        events: parent_events.len() as u64,
        position,
        event_seq,
    };
    for (index, record) in parent_events.iter().enumerate() {
        let position = index as u64 + 1;
        if record.seq() != position {
            return Err(mismatch(position, record.seq()));
        }
    }
    let events = parent_events.len() as u64;
    if parent.seq() != events {
        let last_seq = parent_events.last().map_or(0, EventRecord::seq);
        return Err(mismatch(events, last_seq));
    }
    Ok(())
}

/// A JSON string literal, escaped by serde_json.
fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

fn preset_data(preset: Preset) -> String {
    format!("{{\"preset\":{}}}", json_string(preset.as_str()))
}

fn sandbox_data(mode: SandboxMode) -> String {
    format!("{{\"mode\":{}}}", json_string(mode.as_str()))
}

fn approval_data(policy: ApprovalPolicy) -> String {
    format!("{{\"policy\":{}}}", json_string(policy.as_str()))
}

fn prompt_data(parent: &SessionId, prompt: &str) -> String {
    format!(
        "{{\"role\":\"user\",\"source\":{{\"kind\":\"agent-message\",\"senderSessionId\":{}}},\"content\":[{{\"type\":\"text\",\"text\":{}}}]}}",
        json_string(parent.as_str()),
        json_string(prompt)
    )
}
