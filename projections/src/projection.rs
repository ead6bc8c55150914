//! The derived views of a session's state: its preset, the integrations it
//! requires, the approval-policy notice, and `Projection`, the JSON object
//! `sessionlog project` prints (SPEC §6 and §9).

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

/// Everything `sessionlog project` prints, serialised in the spec's member
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
        if let Some(chosen) = self.preset_switch() {
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
