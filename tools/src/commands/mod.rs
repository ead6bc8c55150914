//! One module per command; each returns its exit code.

pub mod append;
pub mod audit;
pub mod clean;
pub mod completions;
pub mod create;
pub mod export;
pub mod fork;
pub mod import;
pub mod list;
pub mod migrate;
pub mod preset;
pub mod project;
pub mod replay;
pub mod report;
pub mod review;
pub mod salvage;
pub mod seal;
pub mod stats;
pub mod tail;
pub mod verify;
