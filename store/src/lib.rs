//! Durable storage of sessionlog: the JSONL backend (a folder of logs) and
//! the SQLite backend (one database for many sessions), their shared
//! validated writer, streaming reads, creation and fork.
//!
//! This crate is the only one that opens files. Every change of durable state
//! goes through the `Io` seam, so tests can fail any single operation.
#![deny(missing_docs)]

mod error;
mod io;
mod jsonl;
mod reader;
mod writer;

pub use error::{ErrorClass, StoreError};
pub use io::{FaultInjector, FaultPoint, Io};
pub use jsonl::{create_log_file, open_log_writer, read_header, JsonlStore, ListEntry};
pub use reader::{read_snapshot_from, LogReader, SessionStream, Snapshot};
pub use writer::{now_ms, AcknowledgedSeq, Durability, NewEvent, SessionWriter, WriterOptions};
