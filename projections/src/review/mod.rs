//! The Auto-review side: the reviewer's request built from a full snapshot,
//! and the strict parser of the reviewer's reply (SPEC §8).
