//! Progress bars (indicatif) on long work, drawn only when stderr is a
//! terminal and `--quiet` is not given.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar for `what`, hidden when quiet or when stderr is not a terminal.
pub fn bar(quiet: bool, what: &str) -> ProgressBar {
    let bar = ProgressBar::hidden();
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return bar;
    }
    bar.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_owned());
    bar
}

/// Moves `bar` to `done` of `total`.
pub fn update(bar: &ProgressBar, done: u64, total: u64) {
    bar.set_length(total);
    bar.set_position(done);
}
