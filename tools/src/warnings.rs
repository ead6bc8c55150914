//! The one way a command warns: `sessionlog: warning: …` on standard error,
//! nothing on standard output, silenced by `--quiet`.
//!
//! Warnings of the command itself call [`warn`]; warnings the libraries
//! emit through `tracing` (a writer truncating a torn tail) reach [`warn`]
//! through [`WarningLayer`], so they read the same and carry no colour
//! codes. `SESSIONLOG_LOG` (a `tracing` filter such as `debug`) switches to
//! tracing's own output instead, for debugging.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Prints a warning on standard error unless `--quiet`.
pub fn warn(message: impl std::fmt::Display) {
    if !crate::quiet() {
        crate::output::error_line(format_args!("sessionlog: warning: {message}"));
    }
}

/// Routes the libraries' `tracing` warnings to [`warn`] (or, with
/// `SESSIONLOG_LOG` set, prints tracing's own lines under that filter).
pub fn init_tracing() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("SESSIONLOG_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_target(false)
            .without_time()
            .init();
        return;
    }
    tracing_subscriber::registry().with(WarningLayer).init();
}

/// A `tracing` layer that turns every event at `WARN` or above into one
/// [`warn`] line: `path: message` when the event names a path.
#[derive(Debug)]
pub struct WarningLayer;

impl<S: tracing::Subscriber> Layer<S> for WarningLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        if *event.metadata().level() > tracing::Level::WARN {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        match fields.path {
            Some(path) => warn(format_args!("{path}: {}", fields.message)),
            None => warn(fields.message),
        }
    }
}

/// The message and path of an event; its other fields repeat what the
/// message says.
#[derive(Debug, Default)]
struct Fields {
    message: String,
    path: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            "path" => self.path = Some(format!("{value:?}")),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "path" => self.path = Some(value.to_owned()),
            _ => {}
        }
    }
}
