//! The derived views of a session's state: its preset, the integrations it
//! requires, the approval-policy notice, and `Projection`, the JSON object
//! `sessionlog project` prints (docs/EVENTS.md, "Rules" and README.md, "Exit codes").

use serde::Serialize;
use sessionlog_schema::{ApprovalPolicy, Preset, SandboxMode, SessionId};

use crate::{Defaults, SessionState};

/// The preset a session projects as: a named preset, or `custom` when the
/// effective pair fits none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PresetView {
    /// A named preset.
    Named(Preset),
    /// No preset's definition matches the effective pair.
    Custom,
}

/// The integration a session in the `auto` preset cannot run without.
pub const AUTO_REVIEW_INTEGRATION: &str = "auto-review";

/// A setting's override and the value in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Setting<T> {
    /// The session's own switch, else its header's baseline; `null` when
    /// neither sets it.
    #[serde(rename = "override")]
    pub override_value: Option<T>,
    /// The override, else the configured default.
    pub effective: T,
}

/// Everything `sessionlog project` prints, serialised in docs/EVENTS.md's member
/// order with `null` where a value is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Projection {
    /// The session's id.
    pub session: SessionId,
    /// The seq the projection is taken at.
    pub seq: u64,
    /// The session it was forked from.
    pub parent_session: Option<SessionId>,
    /// How many events are the parent's.
    pub seed_length: u64,
    /// 0 for a root session.
    pub delegation_depth: u64,
    /// Approval override and effective policy.
    pub approval_policy: Setting<ApprovalPolicy>,
    /// Sandbox override and effective mode.
    pub sandbox_mode: Setting<SandboxMode>,
    /// The preset, or `custom`.
    pub preset: PresetView,
    /// `["auto-review"]` under `auto`, else empty.
    pub requires_integration: Vec<&'static str>,
    /// The open own turn.
    pub open_turn: Option<String>,
    /// The open own step.
    pub open_step: Option<String>,
    /// Own undecided asks, in the order asked.
    pub pending_approvals: Vec<String>,
    /// The approval-policy notice, if one is due.
    pub notice: Option<String>,
}

impl PresetView {
    /// The spelling: a preset's name or `custom`.
    pub fn as_str(self) -> &'static str {
        match self {
            PresetView::Named(preset) => preset.as_str(),
            PresetView::Custom => "custom",
        }
    }
}

impl std::fmt::Display for PresetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for PresetView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl SessionState {
    /// The last own `permission/preset` if the effective pair fits it; else
    /// the named preset whose definition the pair matches (never `auto`,
    /// whose only durable identity is its event); else `custom`.
    pub fn preset(&self, defaults: &Defaults) -> PresetView {
        let sandbox = self.effective_sandbox(defaults);
        let approval = self.effective_approval(defaults);
        if let Some(chosen) = self.chosen_preset() {
            if chosen.fits(sandbox, approval) {
                return PresetView::Named(chosen);
            }
        }
        Preset::ALL
            .iter()
            .copied()
            .filter(|preset| *preset != Preset::Auto)
            .find(|preset| preset.definition() == (sandbox, approval))
            .map_or(PresetView::Custom, PresetView::Named)
    }

    /// `["auto-review"]` when the preset is `auto`, else empty.
    pub fn requires_integration(&self, defaults: &Defaults) -> Vec<&'static str> {
        match self.preset(defaults) {
            PresetView::Named(Preset::Auto) => vec![AUTO_REVIEW_INTEGRATION],
            PresetView::Named(_) | PresetView::Custom => Vec::new(),
        }
    }

    /// The approval-policy notice: due when the last own `request/header`
    /// sent a policy other than the effective one; attributed to the user
    /// when an own `approval/policy` follows that header, else to the
    /// operator or configuration.
    pub fn notice(&self, defaults: &Defaults) -> Option<String> {
        let (request_seq, sent) = self.last_own_request_header()?;
        let effective = self.effective_approval(defaults);
        if sent == effective {
            return None;
        }
        let switched_since = self
            .last_own_approval_switch_seq()
            .is_some_and(|switch_seq| switch_seq > request_seq);
        let by = if switched_since {
            "the user"
        } else {
            "the operator/config"
        };
        Some(format!(
            "The approval policy changed from \"{sent}\" to \"{effective}\" (changed by {by})."
        ))
    }

    /// Everything `sessionlog project` prints.
    pub fn projection(&self, defaults: &Defaults) -> Projection {
        let header = self.header();
        Projection {
            session: header.id.clone(),
            seq: self.seq(),
            parent_session: header.parent_session.clone(),
            seed_length: header.seed_length,
            delegation_depth: header.delegation_depth,
            approval_policy: Setting {
                override_value: self.approval_override(),
                effective: self.effective_approval(defaults),
            },
            sandbox_mode: Setting {
                override_value: self.sandbox_override(),
                effective: self.effective_sandbox(defaults),
            },
            preset: self.preset(defaults),
            requires_integration: self.requires_integration(defaults),
            open_turn: self.open_turn().map(str::to_owned),
            open_step: self.open_step().map(str::to_owned),
            pending_approvals: self
                .pending_approvals()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            notice: self.notice(defaults),
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};
    use sessionlog_schema::{ApprovalPolicy, Preset, SandboxMode};

    use super::*;
    use crate::test_log::{id, projection_json, Log};

    fn check(log: Log, expect: Expect) {
        expect.assert_eq(&log.projection_json());
    }

    fn preset_of(log: Log) -> String {
        log.state().preset(&Defaults::default()).to_string()
    }

    #[test]
    fn a_new_root_session_projects_the_defaults_with_null_overrides() {
        check(
            Log::root("s"),
            expect![[r#"
                {
                  "session": "s",
                  "seq": 0,
                  "parentSession": null,
                  "seedLength": 0,
                  "delegationDepth": 0,
                  "approvalPolicy": {
                    "override": null,
                    "effective": "ask"
                  },
                  "sandboxMode": {
                    "override": null,
                    "effective": "workspace-write"
                  },
                  "preset": "workspace-write",
                  "requiresIntegration": [],
                  "openTurn": null,
                  "openStep": null,
                  "pendingApprovals": [],
                  "notice": null
                }"#]],
        );
    }

    #[test]
    fn an_auto_session_mid_step_with_pending_approvals_and_a_notice() {
        check(
            Log::root("s")
                .request_header("ask")
                .sandbox("danger-full-access")
                .policy("never")
                .preset("auto")
                .turn_start("t1")
                .ask("r1", "t1")
                .ask("r2", "t1")
                .ask("r3", "t1")
                .decide("r2")
                .step_start("s1", "t1"),
            expect![[r#"
                {
                  "session": "s",
                  "seq": 10,
                  "parentSession": null,
                  "seedLength": 0,
                  "delegationDepth": 0,
                  "approvalPolicy": {
                    "override": "never",
                    "effective": "never"
                  },
                  "sandboxMode": {
                    "override": "danger-full-access",
                    "effective": "danger-full-access"
                  },
                  "preset": "auto",
                  "requiresIntegration": [
                    "auto-review"
                  ],
                  "openTurn": "t1",
                  "openStep": "s1",
                  "pendingApprovals": [
                    "r1",
                    "r3"
                  ],
                  "notice": "The approval policy changed from \"ask\" to \"never\" (changed by the user)."
                }"#]],
        );
    }

    #[test]
    fn the_projection_prints_compact_in_the_spec_member_order() {
        let state = Log::root("s").policy("never").state();
        let text = serde_json::to_string(&state.projection(&Defaults::default()));
        assert_eq!(
            text.ok().as_deref(),
            Some(concat!(
                r#"{"session":"s","seq":1,"parentSession":null,"seedLength":0,"delegationDepth":0,"#,
                r#""approvalPolicy":{"override":"never","effective":"never"},"#,
                r#""sandboxMode":{"override":null,"effective":"workspace-write"},"preset":"custom","#,
                r#""requiresIntegration":[],"openTurn":null,"openStep":null,"pendingApprovals":[],"notice":null}"#
            ))
        );
    }

    #[test]
    fn own_switch_wins_over_header_baseline() {
        let mut log = Log::root("kid").policy("ask").sandbox("read-only");
        log.header.parent_session = Some(id("parent"));
        log.header.approval_policy = Some(ApprovalPolicy::Never);
        log.header.sandbox_mode = Some(SandboxMode::DangerFullAccess);
        let baseline_only = crate::fold(log.header.clone(), &log.events[..0]).0;
        assert_eq!(
            baseline_only.approval_override(),
            Some(ApprovalPolicy::Never)
        );
        assert_eq!(
            baseline_only.sandbox_override(),
            Some(SandboxMode::DangerFullAccess)
        );
        let state = log.state();
        assert_eq!(state.approval_override(), Some(ApprovalPolicy::Ask));
        assert_eq!(state.sandbox_override(), Some(SandboxMode::ReadOnly));
    }

    #[test]
    fn switches_in_the_seeded_prefix_are_not_the_childs_own() {
        let mut log = Log::root("kid")
            .policy("never")
            .sandbox("danger-full-access")
            .preset("full-access");
        log.header.parent_session = Some(id("parent"));
        log.header.seed_length = 3;
        let state = log.state();
        assert_eq!(state.approval_override(), None);
        assert_eq!(state.sandbox_override(), None);
        assert_eq!(state.chosen_preset(), None);
        assert_eq!(
            state.preset(&Defaults::default()).as_str(),
            "workspace-write"
        );
    }

    #[test]
    fn the_configured_default_never_enters_the_override() {
        let state = Log::root("s").state();
        let defaults = Defaults {
            approval: ApprovalPolicy::Never,
            sandbox: SandboxMode::ReadOnly,
        };
        let projection = state.projection(&defaults);
        assert_eq!(projection.approval_policy.override_value, None);
        assert_eq!(projection.approval_policy.effective, ApprovalPolicy::Never);
        assert_eq!(projection.sandbox_mode.override_value, None);
        assert_eq!(projection.sandbox_mode.effective, SandboxMode::ReadOnly);
    }

    #[test]
    fn the_preset_is_the_last_own_choice_while_it_fits_else_the_matching_pair() {
        let full = || Log::root("s").sandbox("danger-full-access");
        assert_eq!(preset_of(Log::root("s")), "workspace-write");
        assert_eq!(preset_of(Log::root("s").sandbox("read-only")), "read-only");
        assert_eq!(preset_of(full()), "custom");
        assert_eq!(preset_of(full().policy("never")), "full-access");
        assert_eq!(preset_of(full().preset("auto")), "auto");
        assert_eq!(preset_of(full().policy("never").preset("auto")), "auto");
        assert_eq!(
            preset_of(full().policy("never").preset("auto").sandbox("read-only")),
            "custom"
        );
        assert_eq!(
            preset_of(full().preset("auto").sandbox("workspace-write")),
            "workspace-write"
        );
        assert_eq!(
            preset_of(
                full()
                    .policy("never")
                    .preset("auto")
                    .policy("ask")
                    .policy("never")
            ),
            "auto"
        );
        assert_eq!(
            preset_of(Log::root("s").preset("full-access")),
            "workspace-write"
        );
        assert_eq!(
            preset_of(Log::root("s").sandbox("read-only").policy("never")),
            "custom"
        );
    }

    #[test]
    fn auto_has_no_pair_of_its_own() {
        let state = Log::root("s")
            .sandbox("danger-full-access")
            .policy("never")
            .state();
        assert_eq!(
            state.preset(&Defaults::default()),
            PresetView::Named(Preset::FullAccess)
        );
        assert_eq!(
            state.requires_integration(&Defaults::default()),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn notice_is_attributed_to_the_user_when_a_switch_follows_the_request() {
        let state = Log::root("s").request_header("ask").policy("never").state();
        assert_eq!(
            state.notice(&Defaults::default()).as_deref(),
            Some(r#"The approval policy changed from "ask" to "never" (changed by the user)."#)
        );
    }

    #[test]
    fn notice_is_attributed_to_the_operator_when_no_switch_follows_the_request() {
        let state = Log::root("s").request_header("never").state();
        assert_eq!(
            state.notice(&Defaults::default()).as_deref(),
            Some(
                r#"The approval policy changed from "never" to "ask" (changed by the operator/config)."#
            )
        );
        let switched_before = Log::root("s").policy("never").request_header("ask").state();
        assert_eq!(
            switched_before.notice(&Defaults::default()).as_deref(),
            Some(
                r#"The approval policy changed from "ask" to "never" (changed by the operator/config)."#
            )
        );
    }

    #[test]
    fn no_notice_without_an_own_request_or_when_the_policy_is_unchanged() {
        assert_eq!(
            Log::root("s")
                .policy("never")
                .state()
                .notice(&Defaults::default()),
            None
        );
        assert_eq!(
            Log::root("s")
                .request_header("ask")
                .policy("never")
                .policy("ask")
                .state()
                .notice(&Defaults::default()),
            None
        );
        let mut seeded_request = Log::root("kid").request_header("never");
        seeded_request.header.seed_length = 1;
        seeded_request.header.parent_session = Some(id("parent"));
        assert_eq!(seeded_request.state().notice(&Defaults::default()), None);
    }

    #[test]
    fn a_projection_as_of_an_earlier_seq_ignores_later_events() {
        let log = Log::root("s")
            .turn_start("t1")
            .policy("never")
            .turn_end("t1");
        let as_of_two = crate::fold(log.header.clone(), log.events.iter().take(2)).0;
        let json = projection_json(&as_of_two, &Defaults::default());
        assert!(json.contains(r#""seq": 2"#), "{json}");
        assert!(json.contains(r#""openTurn": "t1""#), "{json}");
        assert!(json.contains(r#""effective": "never""#), "{json}");
    }
}
