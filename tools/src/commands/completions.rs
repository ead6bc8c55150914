//! `sessionlog completions SHELL`: shell completions generated from the
//! clap grammar, so they never drift from the commands.

use std::io::Write;

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;
use crate::terminal::{self, Mode};

/// Runs `completions`.
pub fn run(shell: clap_complete::Shell) -> Result<u8> {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    // Generated into memory first: clap_complete panics when its writer
    // fails, and a closed pipe must stop us quietly instead.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    let mut out = terminal::stdout(Mode::Raw);
    out.write_all(&script)?;
    out.flush()?;
    Ok(exit::OK)
}
