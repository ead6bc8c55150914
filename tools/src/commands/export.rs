//! `sessionlog export`: header and events as JSON lines, as docs/FORMAT.md writes
//! them without their CRC member. The log is checked whole before the first
//! byte is printed, so a corrupt log prints nothing.

use std::io::Write;

use anyhow::Result;

use crate::cli::SessionArgs;
use crate::target::Target;
use crate::terminal::Mode;
use crate::{exit, warn};

/// Runs `export`.
pub fn run(args: &SessionArgs) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let sessions = target.sessions(args.session.as_deref())?;
    crate::target::warn_if_no_sessions(sessions.len(), &args.store);
    for session in &sessions {
        let stream = target.stream(session)?;
        if let Some(torn) = stream.finish()? {
            warn(format!(
                "{}: exporting the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
            ));
        }
    }
    // The records byte for byte; on a terminal, with the characters that
    // could act on it escaped (`\u202e`: the same JSON value).
    let mode = if crate::terminal::stdout_is_terminal() {
        Mode::Json
    } else {
        Mode::Raw
    };
    let mut out = crate::terminal::stdout(mode);
    for session in &sessions {
        let mut stream = target.stream(session)?;
        writeln!(out, "{}}}", stream.header_body())?;
        while let Some(body) = stream.next_body()? {
            out.write_all(body.as_str().as_bytes())?;
            out.write_all(b"}\n")?;
        }
    }
    out.flush()?;
    Ok(exit::OK)
}
