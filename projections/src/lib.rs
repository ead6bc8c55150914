//! Pure folds over a session: policy, presets, turns, steps, calls,
//! approvals, message authority, children, and the Auto-review request.
//!
//! Nothing here performs I/O: every function takes a header and records and
//! returns values. [`SessionState`] is the incremental fold of SPEC §6 (the
//! store's writer checks each append against it, `fold` of the first k
//! records is the projection as of seq k); [`delegate`] and [`preset_switch`]
//! compute what §7 writes; [`message_authority`] is the source-authority rule
//! the reviewer's request is built on.
#![deny(missing_docs)]

mod authority;
mod delegation;
mod projection;
mod review;
mod seal;
mod state;
mod violation;

#[cfg(test)]
mod test_log;

pub use authority::{message_authority, Authority};
pub use delegation::{delegate, preset_switch, ChildSeed, DelegationError, PresetSwitchError};
pub use projection::{PresetView, Projection, Setting, AUTO_REVIEW_INTEGRATION};
pub use review::*;
pub use seal::{check_sealed, check_trusted, parse_anchor_file, Anchor, AnchorError, SealInfo};
pub use state::{fold, fold_stored, CallState, Defaults, SessionState};
pub use violation::{Violation, ViolationKind};
