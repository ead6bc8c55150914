//! Progress bars (indicatif) on long work, drawn only when stderr is a
//! terminal and `--quiet` is not given. A bar that is never drawn costs
//! nothing, so commands create one unconditionally.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting items for `what`, hidden when quiet or when stderr is not
/// a terminal.
pub fn bar(quiet: bool, what: &str) -> ProgressBar {
    styled(quiet, what, "{prefix} [{bar:40}] {pos}/{len} ({eta})")
}

/// A bar counting `total` bytes for `what`, hidden like [`bar`].
pub fn bytes_bar(quiet: bool, what: &str, total: u64) -> ProgressBar {
    let bar = styled(
        quiet,
        what,
        "{prefix} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    );
    bar.set_length(total);
    bar
}

/// Moves `bar` to `done` of `total`.
pub fn update(bar: &ProgressBar, done: u64, total: u64) {
    bar.set_length(total);
    bar.set_position(done);
}

fn styled(quiet: bool, what: &str, template: &str) -> ProgressBar {
    let bar = ProgressBar::hidden();
    if quiet || !crate::terminal::stderr_is_terminal() {
        return bar;
    }
    bar.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_owned());
    bar
}
