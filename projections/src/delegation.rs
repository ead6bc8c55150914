//! Children and presets (docs/EVENTS.md, "Presets and children"): the seed of a child session forked from a
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
    /// The parent's log breaks the rules of docs/EVENTS.md, "Rules".
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
    check_snapshot(parent, parent_events)?;
    let own = delegate_from_state(parent, child, prompt, defaults, now_ms)?;
    let mut events = parent_events.to_vec();
    events.extend(own.events);
    Ok(ChildSeed {
        header: own.header,
        events,
    })
}

/// The seed of a child of `parent` without the parent's events: the child's
/// header and its own first events only (the preset event and the prompt
/// message when due, numbered from `parent.seq() + 1`). Otherwise as
/// [`delegate`].
///
/// `parent` must be the clean fold of exactly the events the child is
/// seeded with (events 1..=`parent.seq()`, which the header's `seedLength`
/// counts); it is never read event by event, so the seed costs the same
/// whatever the parent's length. For a store that keeps the seeded events
/// as a reference to the parent's rows, and for one that streams them into
/// the child as it folds the parent.
pub fn delegate_from_state(
    parent: &SessionState,
    child: SessionId,
    prompt: Option<&str>,
    defaults: &Defaults,
    now_ms: u64,
) -> Result<ChildSeed, DelegationError> {
    let parent_header = parent.header();
    if parent.violation_count() > 0 {
        return Err(DelegationError::ParentBreaksRules {
            parent: parent_header.id.clone(),
            count: parent.violation_count(),
        });
    }
    if child == parent_header.id {
        return Err(DelegationError::ChildIsParent { child });
    }
    let seed_length = parent.seq();
    let header = child_header(
        parent_header,
        child,
        seed_length,
        parent.sandbox_override(),
        parent.approval_override(),
        now_ms,
    );
    let mut events = Vec::new();
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

/// The header of a child of the session whose header is `parent`, seeded
/// with its first `seed_length` events, under which the parent's sandbox
/// and approval overrides are `sandbox` and `approval` (its last own
/// switches, else its own header's baselines): what [`delegate_from_state`]
/// writes, for a caller that knows these without the parent's fold.
pub fn child_header(
    parent: &SessionHeader,
    child: SessionId,
    seed_length: u64,
    sandbox: Option<SandboxMode>,
    approval: Option<ApprovalPolicy>,
    now_ms: u64,
) -> SessionHeader {
    SessionHeader {
        id: child,
        created_at: now_ms,
        cwd: parent.cwd.clone(),
        parent_session: Some(parent.id.clone()),
        seed_length,
        delegation_depth: parent.delegation_depth.saturating_add(1),
        sandbox_mode: sandbox,
        approval_policy: approval,
    }
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
///
/// ```
/// use sessionlog_projections::{preset_switch, Defaults, SessionState};
/// use sessionlog_schema::{ApprovalPolicy, EventType, Preset, SessionHeader, SessionId};
///
/// let state = SessionState::new(SessionHeader::root(SessionId::parse("a")?, 0, "/w".into()));
/// let batch = preset_switch(&state, Preset::Auto, Some(ApprovalPolicy::Never), &Defaults::default())?;
/// let types: Vec<EventType> = batch.iter().map(|(event_type, _)| *event_type).collect();
/// assert_eq!(types, [EventType::SandboxMode, EventType::ApprovalPolicy, EventType::PermissionPreset]);
/// assert!(preset_switch(&state, Preset::Auto, None, &Defaults::default()).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};
    use sessionlog_schema::{Event, SandboxMode};

    use super::*;
    use crate::test_log::{id, Log};
    use crate::{fold, message_authority, Authority};

    /// The child's header body and its events as exported, one a line.
    fn check_seed(log: &Log, expect: Expect) {
        let mut lines = vec![log.header.to_body()];
        lines.extend(log.events.iter().map(EventRecord::export_line));
        expect.assert_eq(&lines.join("\n"));
    }

    fn switch(log: Log, preset: Preset, auto: Option<ApprovalPolicy>) -> Vec<String> {
        match preset_switch(&log.state(), preset, auto, &Defaults::default()) {
            Ok(events) => events
                .into_iter()
                .map(|(event_type, data)| format!("{} {data}", event_type.as_str()))
                .collect(),
            Err(error) => vec![error.to_string()],
        }
    }

    /// Appends the events of a preset switch as its own events.
    fn switched(log: Log, preset: Preset, auto: Option<ApprovalPolicy>) -> Log {
        let events = preset_switch(&log.state(), preset, auto, &Defaults::default());
        let events = match events {
            Ok(events) => events,
            Err(error) => panic!("switch refused: {error}"),
        };
        events.into_iter().fold(log, |log, (event_type, data)| {
            log.raw(event_type.as_str(), &data)
        })
    }

    fn full_access_parent() -> Log {
        Log::root("parent")
            .turn_start("t1")
            .step_start("s1", "t1")
            .sandbox("danger-full-access")
            .policy("never")
            .preset("full-access")
    }

    #[test]
    fn a_full_access_parent_seeds_its_events_overrides_preset_and_prompt() {
        let child = full_access_parent().child("kid", Some("fix \"it\"\nnow ✓"));
        check_seed(
            &child,
            expect![[r#"
                {"kind":"header","formatVersion":1,"id":"kid","createdAt":9000,"cwd":"/work","parentSession":"parent","seedLength":5,"delegationDepth":1,"sandboxMode":"danger-full-access","approvalPolicy":"never"
                {"seq":1,"ts":2001,"type":"turn/start","data":{"turnId":"t1"}}
                {"seq":2,"ts":2002,"type":"step/start","data":{"stepId":"s1","turnId":"t1"}}
                {"seq":3,"ts":2003,"type":"sandbox/mode","data":{"mode":"danger-full-access"}}
                {"seq":4,"ts":2004,"type":"approval/policy","data":{"policy":"never"}}
                {"seq":5,"ts":2005,"type":"permission/preset","data":{"preset":"full-access"}}
                {"seq":6,"ts":9000,"type":"permission/preset","data":{"preset":"full-access"}}
                {"seq":7,"ts":9000,"type":"message","data":{"role":"user","source":{"kind":"agent-message","senderSessionId":"parent"},"content":[{"type":"text","text":"fix \"it\"\nnow ✓"}]}}"#]],
        );
        let state = child.state();
        assert_eq!(state.preset(&Defaults::default()).as_str(), "full-access");
        assert_eq!(state.open_turn(), None);
        let prompt = Event::parse("message", child.events[6].data());
        let Ok(Event::Message(prompt)) = prompt else {
            panic!("the prompt does not parse: {prompt:?}");
        };
        assert_eq!(prompt.text(), "fix \"it\"\nnow ✓");
        assert_eq!(
            message_authority(&child.header, 7, &prompt),
            Authority::DirectParent
        );
    }

    #[test]
    fn seeded_records_are_the_parents_bodies_unchanged() {
        let parent = full_access_parent();
        let child = parent.child("kid", None);
        for (copied, original) in child.events.iter().zip(&parent.events) {
            assert_eq!(copied.body(), original.body());
        }
        assert_eq!(child.events.len(), parent.events.len() + 1);
    }

    #[test]
    fn a_never_parent_cannot_mint_prompting_children() {
        let child = Log::root("parent").policy("never").child("kid", Some("go"));
        assert_eq!(child.header.approval_policy, Some(ApprovalPolicy::Never));
        assert_eq!(child.header.sandbox_mode, None);
        let state = child.state();
        assert_eq!(
            state.effective_approval(&Defaults::default()),
            ApprovalPolicy::Never
        );
        assert_eq!(state.preset(&Defaults::default()).as_str(), "custom");
        assert_eq!(child.events.len(), 2, "only the seed and the prompt");
    }

    #[test]
    fn a_parent_without_overrides_gives_a_child_without_baselines() {
        let child = Log::root("parent").turn_start("t1").child("kid", None);
        assert_eq!(child.header.approval_policy, None);
        assert_eq!(child.header.sandbox_mode, None);
        assert_eq!(child.header.seed_length, 1);
        assert_eq!(child.events.len(), 1);
    }

    #[test]
    fn an_auto_parent_passes_auto_on_as_an_own_event() {
        let parent = switched(Log::root("parent"), Preset::Auto, Some(ApprovalPolicy::Ask));
        let child = parent.child("kid", None);
        let last = child.events.last().map(EventRecord::export_line);
        assert_eq!(
            last.as_deref(),
            Some(r#"{"seq":3,"ts":9000,"type":"permission/preset","data":{"preset":"auto"}}"#)
        );
        let state = child.state();
        assert_eq!(state.preset(&Defaults::default()).as_str(), "auto");
        assert_eq!(
            state.requires_integration(&Defaults::default()),
            vec!["auto-review"]
        );
    }

    #[test]
    fn later_parent_switches_never_change_the_child_but_a_child_switch_wins() {
        let parent = full_access_parent();
        let child = parent.child("kid", None);
        let before = child.projection_json();
        let parent_later = parent
            .sandbox("read-only")
            .policy("ask")
            .preset("read-only");
        assert_eq!(
            parent_later.state().preset(&Defaults::default()).as_str(),
            "read-only"
        );
        assert_eq!(child.projection_json(), before);
        let child_switched = switched(child, Preset::WorkspaceWrite, None);
        let state = child_switched.state();
        assert_eq!(
            state.preset(&Defaults::default()).as_str(),
            "workspace-write"
        );
        assert_eq!(state.sandbox_override(), Some(SandboxMode::WorkspaceWrite));
    }

    #[test]
    fn a_grandchild_inherits_through_the_child() {
        let child = full_access_parent().child("kid", Some("work"));
        let grandchild = child.turn_start("k1").child("grandkid", Some("help"));
        let header = &grandchild.header;
        assert_eq!(header.parent_session, Some(id("kid")));
        assert_eq!(header.delegation_depth, 2);
        assert_eq!(header.seed_length, 8);
        assert_eq!(header.sandbox_mode, Some(SandboxMode::DangerFullAccess));
        assert_eq!(header.approval_policy, Some(ApprovalPolicy::Never));
        let state = grandchild.state();
        assert_eq!(state.preset(&Defaults::default()).as_str(), "full-access");
        assert_eq!(state.open_turn(), None);
        let prompt = grandchild.events.last().map(EventRecord::data);
        assert_eq!(
            prompt,
            Some(
                r#"{"role":"user","source":{"kind":"agent-message","senderSessionId":"kid"},"content":[{"type":"text","text":"help"}]}"#
            )
        );
    }

    #[test]
    fn delegation_refuses_a_parent_that_breaks_the_rules_or_does_not_match_its_events() {
        let broken = Log::root("parent").turn_end("t1");
        let (state, _) = broken.fold();
        let refused = delegate(
            &state,
            &broken.events,
            id("kid"),
            None,
            &Defaults::default(),
            0,
        );
        assert_eq!(
            refused.map_err(|error| error.to_string()),
            Err("parent session parent breaks the rules (1 violations); run `sessionlog verify` on it and repair it before forking".to_owned())
        );

        let parent = Log::root("parent").turn_start("t1").turn_end("t1");
        let (short_state, _) = fold(parent.header.clone(), &parent.events[..1]);
        let refused = delegate(
            &short_state,
            &parent.events,
            id("kid"),
            None,
            &Defaults::default(),
            0,
        );
        assert!(
            matches!(
                refused,
                Err(DelegationError::SnapshotMismatch {
                    state_seq: 1,
                    events: 2,
                    ..
                })
            ),
            "{refused:?}"
        );
        let refused = delegate(
            &parent.state(),
            &parent.events[1..],
            id("kid"),
            None,
            &Defaults::default(),
            0,
        );
        assert!(
            matches!(
                refused,
                Err(DelegationError::SnapshotMismatch {
                    position: 1,
                    event_seq: 2,
                    ..
                })
            ),
            "{refused:?}"
        );
        let refused = delegate(
            &parent.state(),
            &parent.events,
            id("parent"),
            None,
            &Defaults::default(),
            0,
        );
        assert!(
            matches!(refused, Err(DelegationError::ChildIsParent { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn preset_switch_writes_only_the_values_that_differ() {
        let root = || Log::root("s");
        assert_eq!(
            switch(root(), Preset::Auto, Some(ApprovalPolicy::Never)),
            [
                r#"sandbox/mode {"mode":"danger-full-access"}"#,
                r#"approval/policy {"policy":"never"}"#,
                r#"permission/preset {"preset":"auto"}"#,
            ]
        );
        assert_eq!(
            switch(root(), Preset::ReadOnly, None),
            [
                r#"sandbox/mode {"mode":"read-only"}"#,
                r#"permission/preset {"preset":"read-only"}"#,
            ]
        );
        assert_eq!(
            switch(root(), Preset::WorkspaceWrite, None),
            [r#"permission/preset {"preset":"workspace-write"}"#]
        );
        let full = switched(root(), Preset::FullAccess, None);
        assert_eq!(
            switch(full, Preset::Auto, Some(ApprovalPolicy::Never)),
            [r#"permission/preset {"preset":"auto"}"#]
        );
    }

    #[test]
    fn moving_auto_to_full_access_writes_never_and_leaves_the_sandbox() {
        let auto = switched(Log::root("s"), Preset::Auto, Some(ApprovalPolicy::Ask));
        assert_eq!(
            switch(auto.clone(), Preset::FullAccess, None),
            [
                r#"approval/policy {"policy":"never"}"#,
                r#"permission/preset {"preset":"full-access"}"#,
            ]
        );
        let state = switched(auto, Preset::FullAccess, None).state();
        assert_eq!(state.preset(&Defaults::default()).as_str(), "full-access");
    }

    #[test]
    fn every_switch_lands_on_its_preset() {
        let targets = [
            (Preset::ReadOnly, None),
            (Preset::WorkspaceWrite, None),
            (Preset::FullAccess, None),
            (Preset::Auto, Some(ApprovalPolicy::Ask)),
            (Preset::Auto, Some(ApprovalPolicy::Never)),
        ];
        for (from, from_auto) in targets {
            for (to, to_auto) in targets {
                let log = switched(switched(Log::root("s"), from, from_auto), to, to_auto);
                let state = log.state();
                assert_eq!(
                    state.preset(&Defaults::default()),
                    PresetView::Named(to),
                    "{from} -> {to}"
                );
                if let Some(approval) = to_auto {
                    assert_eq!(state.effective_approval(&Defaults::default()), approval);
                }
            }
        }
    }

    #[test]
    fn the_approval_policy_is_chosen_for_auto_only() {
        assert_eq!(
            switch(Log::root("s"), Preset::Auto, None),
            ["switching to auto needs an approval policy (ask | never)"]
        );
        assert_eq!(
            switch(Log::root("s"), Preset::ReadOnly, Some(ApprovalPolicy::Never)),
            ["preset read-only defines its own approval policy; an approval policy is only chosen for auto"]
        );
    }
}
