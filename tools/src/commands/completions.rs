//! `sessionlog completions SHELL`: shell completions generated from the
//! clap grammar, so they never drift from the commands.

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::{exit, output};

/// Runs `completions`.
pub fn run(shell: clap_complete::Shell) -> Result<u8> {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    // Generated into memory first: clap_complete panics when its writer
    // fails, and a closed pipe must stop us quietly instead.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    output::bytes(&script);
    Ok(exit::OK)
}
