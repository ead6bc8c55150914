//! Pure folds over a session: policy, presets, turns, steps, calls,
//! approvals, message authority, children, and the Auto-review request.
//!
//! Nothing here performs I/O: every function takes a header and records and
//! returns values.
#![deny(missing_docs)]

mod review;

pub use review::*;
