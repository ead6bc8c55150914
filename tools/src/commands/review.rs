//! `sessionlog review-request`, `review` and `review-result`: the Auto
//! reviewer's request from a full snapshot, the call to the reviewer model
//! (with its decision optionally recorded), and the strict reading of a
//! reply. All fail closed, printing `{"error": CODE, "message": ...}`.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use sessionlog_projections::{
    build_review_request_streamed, parse_pending_action, parse_review_result, PendingAction,
    ReviewError, ReviewErrorCode, ReviewFragments, SessionState, Violation, ViolationKind,
    AUTO_REVIEW_FAILED,
};
use sessionlog_reviewer::{HttpReviewer, HttpReviewerOptions};
use sessionlog_schema::{EventRecord, HeaderVocabularyError, TornTail};
use sessionlog_store::{
    ask_reviewer, fold_stream, Durability, ErrorClass, ReviewCallError, ReviewOptions, StoreError,
    Verdict, WriterOptions,
};

use crate::cli::{ReviewerArgs, SessionArgs};
use crate::exit;
use crate::target::{read_input, SessionRef, Target};
use crate::UsageError;

/// The key's environment variable when `--api-key-env` names none.
pub const DEFAULT_KEY_VARIABLE: &str = "SESSIONLOG_REVIEWER_KEY";

#[derive(Serialize)]
struct ErrorReply<'a> {
    error: &'a str,
    message: String,
}

fn print_error(code: &str, message: String) -> Result<()> {
    crate::terminal::print_json_line(&serde_json::to_string(&ErrorReply {
        error: code,
        message,
    })?)?;
    Ok(())
}

/// The pending action's bytes, and where they came from.
struct Pending {
    bytes: Vec<u8>,
    /// The file as messages name it, or `standard input` for `-`.
    source: String,
}

impl Pending {
    /// Reads `path`; `-` is standard input, so a runtime can pipe the
    /// action in.
    fn read(path: &Path) -> Result<Pending> {
        let stdin = path == Path::new("-");
        Ok(Pending {
            bytes: read_input((!stdin).then_some(path))?,
            source: match stdin {
                true => "standard input".to_owned(),
                false => path.display().to_string(),
            },
        })
    }

    /// The action, read strictly; a refusal names the file it came from.
    fn parse(&self) -> Result<PendingAction, ReviewError> {
        parse_pending_action(&self.bytes).map_err(|mut error| {
            error.message = format!("--pending {}: {}", self.source, error.message);
            error
        })
    }
}

/// Runs `review-request`.
pub fn request(args: &SessionArgs, pending: &Path, max_bytes: usize) -> Result<u8> {
    let pending = Pending::read(pending)?;
    match request_from_snapshot(args, &pending, max_bytes)? {
        Ok((request, _)) => {
            crate::terminal::print_json_line(&request)?;
            Ok(exit::OK)
        }
        Err(code) => Ok(code),
    }
}

/// Runs `review`: the request as `review-request` builds it, sent to the
/// reviewer; with `record`, the verdict appended through the writer.
pub fn call(
    args: &SessionArgs,
    pending: &Path,
    reviewer_args: &ReviewerArgs,
    max_bytes: usize,
    record: bool,
) -> Result<u8> {
    let reviewer = reviewer(reviewer_args)?;
    let pending = Pending::read(pending)?;
    let model = reviewer_args.model.as_deref();
    if !record {
        return match request_from_snapshot(args, &pending, max_bytes)? {
            Ok((request, call_id)) => {
                print_verdict(&ask_reviewer(&reviewer, &request, model, &call_id))
            }
            Err(code) => Ok(code),
        };
    }
    let target = Target::open_for_writing(&args.store)?;
    // A lone log's header is read here: its damage is the log's, said as
    // INVALID_LOG on stdout as damage met later is.
    let session = match target.session(args.session.as_deref()) {
        Ok(session) => session,
        Err(error) => return invalid_log(error),
    };
    let options = WriterOptions {
        durability: Durability::Fsync,
        keep_snapshot: true,
        ..WriterOptions::default()
    };
    let mut writer = match target.writer(&session, options) {
        Ok(writer) => writer,
        Err(error) => return invalid_log(error),
    };
    let action = match pending.parse() {
        Ok(action) => action,
        Err(error) => return refused(&error),
    };
    let options = ReviewOptions {
        model: model.map(str::to_owned),
        max_request_bytes: max_bytes,
        record: true,
    };
    match writer.review(&action, &options, &reviewer) {
        Ok(reviewed) => print_verdict(&reviewed.verdict),
        Err(ReviewCallError::Refused(error)) => refused(&error),
        Err(ReviewCallError::Store(error)) => Err(error.into()),
        Err(other) => Err(other.into()),
    }
}

/// The reviewer `args` describe, its key read from the environment.
pub fn reviewer(args: &ReviewerArgs) -> Result<HttpReviewer> {
    let key = match &args.api_key_env {
        Some(variable) => Some(std::env::var(variable).map_err(|_| {
            UsageError(format!(
                "--api-key-env {variable}: that environment variable is not set (or not UTF-8)"
            ))
        })?),
        None => std::env::var(DEFAULT_KEY_VARIABLE).ok(),
    };
    HttpReviewer::new(HttpReviewerOptions {
        endpoint: args.endpoint.clone(),
        key,
        timeout: Duration::from_secs_f64(args.timeout),
    })
    .map_err(|error| UsageError(error.to_string()).into())
}

/// Prints a verdict: the decision (exit 0) or the failure (exit 5).
fn print_verdict(verdict: &Verdict) -> Result<u8> {
    match verdict {
        Verdict::Decided(decision) => {
            crate::terminal::print_json_line(&serde_json::to_string(decision)?)?;
            Ok(exit::OK)
        }
        Verdict::Failed(failure) => {
            print_error(AUTO_REVIEW_FAILED, failure.message.clone())?;
            Ok(exit::REVIEW)
        }
    }
}

/// Prints a request that failed closed; exit 4 for INVALID_LOG, else 5.
fn refused(error: &ReviewError) -> Result<u8> {
    let message = if error.code == ReviewErrorCode::RequestTooLarge {
        format!(
            "{}; what helps: a larger limit with --max-bytes; a checkpoint event shortens the history the reviewer sees (the messages from it on), not the calls, which the request lists from the whole log",
            error.message
        )
    } else {
        error.message.clone()
    };
    print_error(error.code.as_str(), message)?;
    Ok(if error.code == ReviewErrorCode::InvalidLog {
        exit::RULE
    } else {
        exit::REVIEW
    })
}

/// The request for the pending action `pending` (with the action's call
/// id) from the session read as a stream and folded as it is read, or the
/// exit code of its refusal
/// (already printed). What is held is the fold and the request's fragments
/// (the calls, and the messages since the last checkpoint), never the log.
fn request_from_snapshot(
    args: &SessionArgs,
    pending: &Pending,
    max_bytes: usize,
) -> Result<Result<(String, String), u8>> {
    let target = Target::open(&args.store)?;
    let session = match target.session(args.session.as_deref()) {
        Ok(session) => session,
        Err(error) => return invalid_log(error).map(Err),
    };
    let read = match read_for_review(&target, &session) {
        Ok(read) => read,
        Err(error) => return invalid_log(error).map(Err),
    };
    if let Some(torn) = &read.torn_tail {
        crate::warn(format!(
            "{}: building from the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {})",
            session.label, torn.bytes, torn.position.line, torn.position.offset
        ));
    }
    // INVALID_LOG is checked before the pending action (the order of the
    // fail-closed codes). A failed seal is named before a header out of
    // the vocabulary or a rule violation, as it ranks above them (exit 7
    // over 4).
    let shown = match (
        &read.first_seal_failure,
        &read.header_vocabulary_error,
        &read.first_violation,
    ) {
        (Some(seal), _, _) => Some((seal.to_string(), exit::SEAL)),
        (None, Some(error), _) => Some((error.to_string(), exit::RULE)),
        (None, None, Some(violation)) => Some((violation.to_string(), exit::RULE)),
        (None, None, None) => None,
    };
    if let Some((problem, code)) = shown {
        print_error(
            ReviewErrorCode::InvalidLog.as_str(),
            format!("{}: {problem}", session.label),
        )?;
        return Ok(Err(code));
    }
    let action = match pending.parse() {
        Ok(action) => action,
        Err(error) => return refused(&error).map(Err),
    };
    let built = build_review_request_streamed(
        &read.state,
        &read.fragments,
        read.request_header.as_ref(),
        &action,
        max_bytes,
    );
    match built {
        Ok(request) => Ok(Ok((request, action.call_id))),
        Err(error) => refused(&error).map(Err),
    }
}

/// What a review request needs of a session, read once.
struct ReadForReview {
    state: SessionState,
    fragments: ReviewFragments,
    /// The record of the latest `request/header`.
    request_header: Option<EventRecord>,
    header_vocabulary_error: Option<HeaderVocabularyError>,
    first_violation: Option<Violation>,
    /// The first seal that does not hold, if any.
    first_seal_failure: Option<Violation>,
    torn_tail: Option<TornTail>,
}

/// Reads the session to its end, folding every event (corruption anywhere
/// is an error) and absorbing each into the request's fragments until the
/// first violation.
fn read_for_review(target: &Target, session: &SessionRef) -> Result<ReadForReview> {
    let mut stream = target.stream(session)?;
    let mut read = ReadForReview {
        state: SessionState::with_header_body(stream.header().clone(), stream.header_body()),
        fragments: ReviewFragments::new(),
        request_header: None,
        header_vocabulary_error: stream.header_vocabulary_errors().first().cloned(),
        first_violation: None,
        first_seal_failure: None,
        torn_tail: None,
    };
    let ReadForReview {
        state,
        fragments,
        request_header,
        first_violation,
        first_seal_failure,
        ..
    } = &mut read;
    fold_stream(&mut *stream, state, |record, folded, state| {
        if let Err(violation) = folded {
            if violation.kind == ViolationKind::Seal {
                first_seal_failure.get_or_insert_with(|| violation.clone());
            }
            first_violation.get_or_insert(violation);
        }
        if first_violation.is_some() {
            return;
        }
        fragments.absorb(state, std::slice::from_ref(record));
        if state.latest_request_header_seq() == Some(record.seq()) {
            *request_header = Some(record.clone());
        }
    })?;
    read.torn_tail = stream.finish()?;
    Ok(read)
}

/// A snapshot or writer that cannot be had: corruption fails closed as
/// INVALID_LOG with exit 2, a rule violation with exit 4; anything else
/// (I/O, `Locked`) is an error of its own class.
fn invalid_log(error: anyhow::Error) -> Result<u8> {
    let store_error = error.downcast::<StoreError>()?;
    let code = match store_error.class() {
        ErrorClass::Corrupt => exit::CORRUPT,
        ErrorClass::Seal => exit::SEAL,
        ErrorClass::Rule => exit::RULE,
        _ => return Err(store_error.into()),
    };
    print_error(
        ReviewErrorCode::InvalidLog.as_str(),
        store_error.to_string(),
    )?;
    Ok(code)
}

/// Runs `review-result`.
pub fn result(file: Option<&Path>) -> Result<u8> {
    // `-` is standard input, as for --pending.
    let reply = read_input(file.filter(|path| *path != Path::new("-")))?;
    match parse_review_result(&reply) {
        Ok(decision) => {
            crate::terminal::print_json_line(&serde_json::to_string(&decision)?)?;
            Ok(exit::OK)
        }
        Err(failure) => {
            print_error(AUTO_REVIEW_FAILED, failure.message)?;
            Ok(exit::REVIEW)
        }
    }
}
