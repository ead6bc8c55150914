//! The Auto-review side: the reviewer's request built from a full snapshot,
//! and the strict parser of the reviewer's reply (docs/EVENTS.md, "The Auto reviewer").
//!
//! Before every tool call of an Auto session runs, a reviewer model classifies
//! it. This module owns what that model is shown (`build_review_request`: the
//! fixed [`REVIEW_POLICY`], the working directory, project instructions, the
//! filtered history and the pending action) and what its answer may be
//! (`parse_review_result`), plus the records a denial or failure leaves,
//! and how both travel as one Chat Completions call
//! (`chat_completions_body`, `chat_completions_reply`).
//! Everything fails closed with a stable code; nothing is truncated, guessed
//! or read leniently.

mod action;
#[cfg(test)]
mod arbitrary;
mod chat;
mod error;
mod fragments;
mod policy;
mod request;
#[cfg(test)]
mod request_tests;
mod result;
mod strict;

pub use action::{parse_pending_action, PendingAction, ToolSchema};
pub use chat::{chat_completions_body, chat_completions_reply, ChatRequestError};
pub use error::{ReviewError, ReviewErrorCode, DEFAULT_MAX_REQUEST_BYTES};
pub use fragments::ReviewFragments;
pub use policy::REVIEW_POLICY;
pub use request::{
    build_review_request, build_review_request_for_state, build_review_request_from_fragments,
    build_review_request_stored, build_review_request_streamed,
};
pub use result::{
    denial_notice, denial_settle_data, failure_settle_data, parse_review_result, Decision,
    ReviewDecision, ReviewFailure, Risk, AUTO_REVIEW_DENIED, AUTO_REVIEW_FAILED,
};
