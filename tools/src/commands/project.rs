//! `sessionlog project`: the projections of SPEC §9, as of any seq.

use anyhow::{bail, Result};
use sessionlog_projections::{Defaults, SessionState};
use sessionlog_store::StoreError;

use crate::cli::{DefaultArgs, SessionArgs};
use crate::output::outln;
use crate::target::Target;
use crate::{exit, warn, UsageError};

/// Runs `project`.
pub fn run(args: &SessionArgs, at: Option<u64>, defaults: &DefaultArgs) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let state = fold_checked(&target, &session, at)?;
    let defaults = Defaults {
        approval: defaults.default_approval,
        sandbox: defaults.default_sandbox,
    };
    outln!(
        "{}",
        serde_json::to_string_pretty(&state.projection(&defaults))?
    );
    Ok(exit::OK)
}

/// Folds a session through `at` (all when `None`), refusing corruption (2)
/// and rule violations (4), warning about a torn tail.
pub fn fold_checked(
    target: &Target,
    session: &crate::target::SessionRef,
    at: Option<u64>,
) -> Result<SessionState> {
    let mut stream = target.stream(session)?;
    if let Some(error) = stream.header_vocabulary_errors().first() {
        return Err(StoreError::HeaderVocabulary {
            path: session.label.clone().into(),
            error: error.clone(),
        }
        .into());
    }
    let mut state = SessionState::new(stream.header().clone());
    // Seqs rise by one from 1, so the events through `at` are the first
    // `at`: fold those while reading, then only read on to the end.
    while at.is_none_or(|at| state.seq() < at) {
        let Some(event) = stream.next_event_folded(&mut state)? else {
            break;
        };
        event.folded.map_err(|violation| StoreError::Rule {
            path: session.label.clone().into(),
            violation,
        })?;
    }
    while stream.next_event()?.is_some() {}
    if let Some(torn) = stream.finish()? {
        warn(format!(
            "{}: ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
            session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
        ));
    }
    if let Some(at) = at {
        if at > state.seq() {
            bail!(UsageError(format!(
                "--at {at} is past the last seq {} of {}",
                state.seq(),
                session.label
            )));
        }
    }
    Ok(state)
}
