//! `sessionlog completions SHELL`: shell completions generated from the
//! clap grammar, so they never drift from the commands.

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;

/// Runs `completions`.
pub fn run(shell: clap_complete::Shell) -> Result<u8> {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    clap_complete::generate(
        shell,
        &mut command,
        name,
        &mut crate::terminal::stdout(crate::terminal::Mode::Raw),
    );
    Ok(exit::OK)
}
