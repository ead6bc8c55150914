//! `sessionlog create`: a root session, created atomically.

use std::path::Path;

use anyhow::{bail, Result};
use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::testing::Io;
use sessionlog_store::{create_log_file, now_ms, read_header_as_is, Durability, Store};

use crate::target::is_lone_log;
use crate::{exit, UsageError};

/// Runs `create`.
pub fn run(store: &Path, session: &str, cwd: Option<String>, json: bool) -> Result<u8> {
    let id = SessionId::parse(session).map_err(|e| UsageError(e.to_string()))?;
    let cwd = match cwd {
        Some(cwd) => cwd,
        // The header keeps the cwd as text: a folder whose name is not
        // UTF-8 would be stored changed, so it must be named with --cwd.
        None => std::env::current_dir()?
            .into_os_string()
            .into_string()
            .map_err(|cwd| {
                UsageError(format!(
                    "the working directory {} is not UTF-8 text, which a header cannot hold as it is; name it with --cwd",
                    std::path::Path::new(&cwd).display()
                ))
            })?,
    };
    let header = SessionHeader::root(id, now_ms(), cwd);
    if is_lone_log(store) {
        if store.symlink_metadata().is_ok() {
            // The file may hold another session than the one asked for:
            // name what is there, not what was asked.
            let held = match read_header_as_is(store, None) {
                Ok(decoded) => format!("it holds session {}", decoded.header.id),
                Err(error) => format!("it is no readable log: {error}"),
            };
            bail!(UsageError(format!(
                "{} exists ({held}); create writes a new file and never replaces one",
                store.display()
            )));
        }
        create_log_file(store, &header, &[], Durability::Fsync, &Io::default())?;
    } else {
        Store::create(store)?.create_session(&header, &[], Durability::Fsync)?;
    }
    if json {
        crate::terminal::print_json_line(&header_json(&header))?;
    } else {
        crate::outln!(
            "created session {} in {}",
            header.id,
            sessionlog_store::store_display(store)
        )?;
    }
    Ok(exit::OK)
}

/// The header as `export` prints it.
pub fn header_json(header: &SessionHeader) -> String {
    let mut line = header.to_body();
    line.push('}');
    line
}
