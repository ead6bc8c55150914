//! `sessionlog project`: the projections of a session (docs/EVENTS.md), as of any seq.

use anyhow::{bail, Result};
use sessionlog_store::{fold_through, Projections};

use crate::cli::{DefaultArgs, SessionArgs};
use crate::target::Target;
use crate::{exit, warn, UsageError};

/// Runs `project`.
pub fn run(args: &SessionArgs, at: Option<u64>, defaults: &DefaultArgs) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let folded = fold_checked(&target, &session, at)?;
    let defaults = defaults.defaults();
    // Indented for a person at a terminal; one line into a pipe or a file,
    // as every other JSON a command prints.
    let projection = folded.projection(&defaults);
    let text = match crate::terminal::stdout_is_terminal() {
        true => serde_json::to_string_pretty(&projection)?,
        false => serde_json::to_string(&projection)?,
    };
    crate::terminal::print_json_line(&text)?;
    Ok(exit::OK)
}

/// Folds a session through `at` (all when `None`), refusing corruption (2),
/// a seal that does not hold (7) and rule violations (4), warning about a
/// torn tail. A violation does not stop the read: corruption after it still
/// wins.
pub fn fold_checked(
    target: &Target,
    session: &crate::target::SessionRef,
    at: Option<u64>,
) -> Result<Projections> {
    let (folded, torn_tail) = fold_through(
        || target.stream(session),
        std::path::Path::new(&session.label),
        at,
        at.is_none() && target.ends_in_seal(session),
    )?;
    if let Some(torn) = torn_tail {
        warn(format!(
            "{}: ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
            session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
        ));
    }
    if let Some(at) = at {
        if at > folded.seq() {
            bail!(UsageError(format!(
                "--at {at} is past the last seq {} of {}",
                folded.seq(),
                session.label
            )));
        }
    }
    Ok(folded)
}
