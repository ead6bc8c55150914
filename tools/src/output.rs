//! Standard output for every command, and what happens when its reader goes
//! away (`sessionlog verify STORE | head -1`).
//!
//! A command that finds its standard output closed stops at once, prints
//! nothing more (no error, no panic) and exits with [`READER_GONE`], the
//! status a shell reports for a program that a broken pipe stopped
//! (128 + SIGPIPE), so `set -o pipefail` still sees that the command did not
//! finish. Every line a command prints goes through [`line()`] (the `outln!`
//! macro), and `main` maps a broken pipe that a buffered writer returned to
//! the same status.

use std::io::Write;

/// The exit status of a command whose reader went away: 128 + SIGPIPE.
pub const READER_GONE: u8 = 141;

/// Prints one line on standard output; stops the command quietly with
/// [`READER_GONE`] when nobody reads it any more.
pub fn line(arguments: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(arguments)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(error) = written {
        stop(&error);
    }
}

/// Writes `bytes` to standard output as they are, under the same rule as
/// [`line()`].
pub fn bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_all(bytes).and_then(|()| out.flush()) {
        stop(&error);
    }
}

/// Prints one line on standard error (a warning, an error); a closed
/// standard error stops the command like a closed standard output, and any
/// other failure to write there is ignored, since there is nowhere left to
/// say it.
pub fn error_line(arguments: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let written = err.write_fmt(arguments).and_then(|()| err.write_all(b"\n"));
    if let Err(error) = written {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(READER_GONE));
        }
    }
}

/// Whether `error` (anywhere in its chain) is a write to a closed pipe.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|json| json.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

fn stop(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(READER_GONE));
    }
    error_line(format_args!("sessionlog: write standard output: {error}"));
    std::process::exit(i32::from(crate::exit::USAGE));
}

/// `println!` for commands: one line on standard output through
/// [`line()`], so a closed pipe stops the command quietly.
macro_rules! outln {
    ($($argument:tt)*) => {
        $crate::output::line(format_args!($($argument)*))
    };
}
pub(crate) use outln;
