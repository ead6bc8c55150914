//! One module per command; each returns its exit code.

pub mod append;
pub mod create;
pub mod export;
pub mod fork;
pub mod list;
pub mod migrate;
pub mod project;
pub mod review;
pub mod verify;
