//! `sessionlog create`: a root session, created atomically.

use std::path::Path;

use anyhow::Result;
use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{create_log_file, now_ms, Durability, Io, Store};

use crate::output::outln;
use crate::target::is_lone_log;
use crate::{exit, UsageError};

/// Runs `create`.
pub fn run(store: &Path, session: &str, cwd: Option<String>, json: bool) -> Result<u8> {
    let id = SessionId::parse(session).map_err(|e| UsageError(e.to_string()))?;
    let cwd = match cwd {
        Some(cwd) => cwd,
        None => std::env::current_dir()?.display().to_string(),
    };
    let header = SessionHeader::root(id, now_ms(), cwd);
    if is_lone_log(store) {
        create_log_file(store, &header, &[], Durability::Fsync, &Io::default())?;
    } else {
        Store::create(store)?.create_session(&header, &[], Durability::Fsync)?;
    }
    if json {
        outln!("{}", header_json(&header));
    } else {
        outln!("created session {} in {}", header.id, store.display());
    }
    Ok(exit::OK)
}

/// The header as `export` prints it.
pub fn header_json(header: &SessionHeader) -> String {
    let mut line = header.to_body();
    line.push('}');
    line
}
