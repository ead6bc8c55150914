//! `sessionlog preset`: the preset writer. Switches a live session's
//! permission preset by appending, as one atomic batch, the `sandbox/mode`
//! and `approval/policy` events the preset needs and the
//! `permission/preset` event; a lone `permission/preset` line appended by
//! hand changes no effective value.

use anyhow::Result;
use sessionlog_schema::{ApprovalPolicy, Preset};

use crate::cli::{DefaultArgs, SessionArgs};
use crate::target::Target;
use crate::{exit, UsageError};

/// What `preset` is asked to do.
#[derive(Debug)]
pub struct PresetSwitch {
    /// The preset to switch to.
    pub preset: Preset,
    /// The approval policy an `auto` session runs under.
    pub approval: Option<ApprovalPolicy>,
    /// The seq the first event must get.
    pub expect_seq: Option<u64>,
}

/// Runs `preset`.
pub fn run(
    args: &SessionArgs,
    switch: &PresetSwitch,
    defaults: &DefaultArgs,
    json: bool,
) -> Result<u8> {
    match (switch.preset, switch.approval) {
        (Preset::Auto, None) => {
            return Err(UsageError(
                "preset auto runs under an approval policy the caller names: add --approval ask or --approval never".into(),
            )
            .into())
        }
        (preset, Some(_)) if preset != Preset::Auto => {
            return Err(UsageError(format!(
                "--approval is only for preset auto; preset {} brings its own approval policy",
                preset.as_str()
            ))
            .into())
        }
        _ => {}
    }
    let target = Target::open_for_writing(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let mut writer = target.appender(&session)?;
    let defaults = defaults.defaults();
    let seqs =
        writer.switch_preset(switch.preset, switch.approval, &defaults, switch.expect_seq)?;
    let switched = writer.preset_switched(switch.preset, &seqs, &defaults);
    if json {
        crate::terminal::print_json_line(&serde_json::to_string(&switched)?)?;
    } else {
        crate::outln!(
            "session {} now runs under preset {} (sandbox {}, approval {}): seq {}",
            session.id,
            switched.preset,
            switched.sandbox_mode,
            switched.approval_policy,
            switched
                .seqs
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(exit::OK)
}
