//! `sessionlog review-request` and `review-result`: the Auto reviewer's
//! request from a full snapshot, and the strict reading of its reply. Both
//! fail closed, printing `{"error": CODE, "message": ...}`.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use sessionlog_projections::{
    build_review_request, parse_pending_action, parse_review_result, ReviewErrorCode,
    AUTO_REVIEW_FAILED,
};
use sessionlog_store::{ErrorClass, StoreError};

use crate::cli::SessionArgs;
use crate::exit;
use crate::output::outln;
use crate::target::{read_input, Target};

#[derive(Serialize)]
struct ErrorReply<'a> {
    error: &'a str,
    message: String,
}

fn print_error(code: &str, message: String) -> Result<()> {
    outln!(
        "{}",
        serde_json::to_string(&ErrorReply {
            error: code,
            message
        })?
    );
    Ok(())
}

/// Runs `review-request`.
pub fn request(args: &SessionArgs, pending: &Path, max_bytes: usize) -> Result<u8> {
    // `-` is standard input, so a runtime can pipe the action in.
    let pending = if pending == Path::new("-") {
        read_input(None)?
    } else {
        read_input(Some(pending))?
    };
    let target = Target::open(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let snapshot = match target.snapshot(&session) {
        Ok(snapshot) => snapshot,
        Err(error) => return invalid_log(error),
    };
    if let Some(torn) = &snapshot.torn_tail {
        crate::warn(format!(
            "{}: building from the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {})",
            session.label, torn.bytes, torn.position.line, torn.position.offset
        ));
    }
    if let Some(error) = snapshot.header_vocabulary_errors.first() {
        print_error(ReviewErrorCode::InvalidLog.as_str(), error.to_string())?;
        return Ok(exit::RULE);
    }
    // INVALID_LOG is checked before the pending action (SPEC §8 order).
    let (_, violations) = sessionlog_projections::fold(snapshot.header.clone(), &snapshot.events);
    if let Some(violation) = violations.first() {
        print_error(ReviewErrorCode::InvalidLog.as_str(), violation.to_string())?;
        return Ok(exit::RULE);
    }
    let action = match parse_pending_action(&pending) {
        Ok(action) => action,
        Err(error) => {
            print_error(error.code.as_str(), error.message)?;
            return Ok(exit::REVIEW);
        }
    };
    match build_review_request(&snapshot.header, &snapshot.events, &action, max_bytes) {
        Ok(request) => {
            outln!("{request}");
            Ok(exit::OK)
        }
        Err(error) => {
            let message = if error.code == ReviewErrorCode::RequestTooLarge {
                format!(
                    "{}; what helps: a checkpoint event, after which the reviewer sees only the history from it on, or a larger limit with --max-bytes",
                    error.message
                )
            } else {
                error.message
            };
            print_error(error.code.as_str(), message)?;
            Ok(if error.code == ReviewErrorCode::InvalidLog {
                exit::RULE
            } else {
                exit::REVIEW
            })
        }
    }
}

/// A snapshot that cannot be read: corruption fails closed as INVALID_LOG
/// with exit 2; anything else is an I/O error.
fn invalid_log(error: anyhow::Error) -> Result<u8> {
    match error.downcast::<StoreError>() {
        Ok(store_error) if store_error.class() == ErrorClass::Corrupt => {
            print_error(
                ReviewErrorCode::InvalidLog.as_str(),
                store_error.to_string(),
            )?;
            Ok(exit::CORRUPT)
        }
        Ok(store_error) => Err(store_error.into()),
        Err(other) => Err(other),
    }
}

/// Runs `review-result`.
pub fn result(file: Option<&Path>) -> Result<u8> {
    let reply = read_input(file)?;
    match parse_review_result(&reply) {
        Ok(decision) => {
            outln!("{}", serde_json::to_string(&decision)?);
            Ok(exit::OK)
        }
        Err(failure) => {
            print_error(AUTO_REVIEW_FAILED, failure.message)?;
            Ok(exit::REVIEW)
        }
    }
}
