//! `sessionlog fork`: a child created from its parent's snapshot (docs/EVENTS.md, "Presets and children"),
//! beside the parent, in one atomic act.

use anyhow::Result;
use sessionlog_projections::{delegate, Defaults};
use sessionlog_schema::SessionId;
use sessionlog_store::testing::Io;
use sessionlog_store::{create_log_file, now_ms, sync_log_file, Durability, StoreError};

use crate::cli::{DefaultArgs, SessionArgs};
use crate::commands::create::header_json;
use crate::commands::project::fold_checked;
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
    let defaults = Defaults {
        approval: defaults.default_approval,
        sandbox: defaults.default_sandbox,
    };
    let header = match &target {
        Target::Store(store) => store.fork(&parent.id, &child, prompt, &defaults)?,
        Target::File(path) => {
            // The child's seed must be a durable prefix of its parent.
            sync_log_file(path, &Io::default())?;
            let state = fold_checked(&target, &parent, None)?;
            let snapshot = target.snapshot(&parent)?;
            if let Some(torn) = &snapshot.torn_tail {
                crate::warn(format!(
                    "{}: forking from the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                    path.display(),
                    torn.bytes,
                    torn.position.line,
                    torn.position.offset,
                    torn.reason
                ));
            }
            let seed = delegate(
                &state,
                &snapshot.events,
                child.clone(),
                prompt,
                &defaults,
                now_ms(),
            )
            .map_err(|error| UsageError(error.to_string()))?;
            let folder = path.parent().unwrap_or_else(|| std::path::Path::new("."));
            let child_path = folder.join(format!("{child}.jsonl"));
            if child_path.symlink_metadata().is_ok() {
                return Err(StoreError::AlreadyExists {
                    id: child,
                    path: child_path,
                }
                .into());
            }
            create_log_file(
                &child_path,
                &seed.header,
                &seed.events,
                Durability::Fsync,
                &Io::default(),
            )?;
            seed.header
        }
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
