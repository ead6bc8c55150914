//! `sessionlog fork`: a child created from its parent's snapshot (docs/EVENTS.md, "Presets and children"),
//! beside the parent, in one atomic act.

use anyhow::Result;
use sessionlog_schema::SessionId;
use sessionlog_store::fork_log_file;

use crate::cli::{DefaultArgs, SessionArgs};
use crate::commands::create::header_json;
use crate::target::Target;
use crate::{exit, UsageError};

/// Runs `fork`.
pub fn run(
    args: &SessionArgs,
    child: &str,
    prompt: Option<&str>,
    defaults: &DefaultArgs,
    json: bool,
) -> Result<u8> {
    let child = SessionId::parse(child).map_err(|e| UsageError(e.to_string()))?;
    let target = Target::open_for_writing(&args.store)?;
    let parent = target.session(args.session.as_deref())?;
    let defaults = defaults.defaults();
    let header = match &target {
        Target::Store(store) => store.fork(&parent.id, &child, prompt, &defaults)?,
        Target::File(path) => fork_log_file(path, &child, prompt, &defaults)?,
    };
    if json {
        crate::terminal::print_json_line(&header_json(&header))?;
    } else {
        crate::outln!(
            "created child {} of {} (seedLength {}, delegationDepth {}, sandboxMode {}, approvalPolicy {})",
            header.id,
            parent.id,
            header.seed_length,
            header.delegation_depth,
            header.sandbox_mode.map_or("null", |m| m.as_str()),
            header.approval_policy.map_or("null", |p| p.as_str()),
        )?;
    }
    Ok(exit::OK)
}
