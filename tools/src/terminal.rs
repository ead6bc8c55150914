//! The one way out: everything the command line prints, on standard output
//! or standard error, goes through [`Escaping`], which escapes every
//! character that could act on a terminal instead of being shown.
//!
//! Log text is hostile. A cwd, an unknown event type, a message, or a
//! serde error quoting a logged value can hold ESC sequences (a window
//! title, a cleared screen), other control characters or bidirectional
//! overrides (U+202E) that reorder what is shown. Escaping each string
//! where it is formatted leaves the next printer to forget it; escaping
//! the stream catches every string, error messages included. Text output
//! shows such a character as `\u{1b}`; JSON output as `\u001b`, which
//! keeps the JSON valid and its value unchanged. Only `\n` and `\t` pass
//! as they are (our own line and column separators); colour is written
//! beside the text ([`Escaping::paint`]), never inside it.
//!
//! `clippy.toml` forbids `println!`, `eprintln!`, `print!`, `eprint!` and
//! `std::io::stdout`/`stderr` in this crate; this module alone holds them.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use sessionlog_schema::is_unprintable;

/// How an unprintable character is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `\u{1b}`, for people.
    Text,
    /// `\u001b`, inside the JSON strings (the only place such a character
    /// can be in JSON that serde wrote).
    Json,
    /// As it is: the records of `export`, byte for byte, when standard
    /// output is not a terminal.
    Raw,
}

/// A writer that escapes what it is given (see the module docs).
pub struct Escaping<W: Write> {
    inner: W,
    mode: Mode,
    /// The start of a UTF-8 sequence cut at the end of the last write.
    pending: Vec<u8>,
}

impl<W: Write> Escaping<W> {
    /// Escapes what is written to `inner` as `mode` says.
    pub fn new(inner: W, mode: Mode) -> Self {
        Escaping {
            inner,
            mode,
            pending: Vec::new(),
        }
    }

    /// Writes `text` in `style` (an SGR colour when `colour` is on), the
    /// text escaped and the colour codes not.
    pub fn paint(&mut self, colour: bool, sgr: &str, text: &str) -> io::Result<()> {
        if !colour || sgr.is_empty() || text.is_empty() {
            return self.write_all(text.as_bytes());
        }
        write!(self.inner, "\x1b[{sgr}m")?;
        self.write_all(text.as_bytes())?;
        self.inner.write_all(b"\x1b[0m")
    }

    fn write_escaped(&mut self, text: &str) -> io::Result<()> {
        let mut plain = 0;
        for (at, c) in text.char_indices() {
            if c == '\n' || c == '\t' || !is_unprintable(c) {
                continue;
            }
            self.inner.write_all(&text.as_bytes()[plain..at])?;
            match self.mode {
                Mode::Text => write!(self.inner, "\\u{{{:x}}}", u32::from(c))?,
                Mode::Json => write!(self.inner, "\\u{:04x}", u32::from(c))?,
                Mode::Raw => write!(self.inner, "{c}")?,
            }
            plain = at + c.len_utf8();
        }
        self.inner.write_all(&text.as_bytes()[plain..])
    }
}

/// Whether `bytes` may hold an unprintable character: a C0 byte other
/// than a newline or a tab (which are printed as they are), DEL, or the
/// lead byte of a C1 control (`C2`), of U+061C (`D8`) or of the
/// bidirectional formatting characters around U+2000 (`E2`).
fn may_hold_unprintable(bytes: &[u8]) -> bool {
    bytes.iter().any(|&byte| {
        (byte < 0x20 && byte != b'\n' && byte != b'\t') || matches!(byte, 0x7f | 0xc2 | 0xd8 | 0xe2)
    })
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Raw bytes go through unscanned.
        let plain = self.mode == Mode::Raw
            || (self.pending.is_empty()
                && !may_hold_unprintable(buf)
                && std::str::from_utf8(buf).is_ok());
        if plain {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(buf);
        let mut rest = &bytes[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.write_escaped(text)?;
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    // Checked valid by from_utf8 just above.
                    self.write_escaped(std::str::from_utf8(valid).unwrap_or_default())?;
                    match error.error_len() {
                        // A sequence cut by the end of this write.
                        None => {
                            self.pending = after.to_vec();
                            break;
                        }
                        Some(len) => {
                            for byte in &after[..len] {
                                write!(self.inner, "\\x{{{byte:02x}}}")?;
                            }
                            rest = &after[len..];
                        }
                    }
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            for byte in pending {
                write!(self.inner, "\\x{{{byte:02x}}}")?;
            }
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for Escaping<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// The exit status of a command whose reader went away (`sessionlog verify
/// STORE | head -1`): 128 + SIGPIPE, the status a shell reports for a
/// program a broken pipe stopped, so `set -o pipefail` still sees that the
/// command did not finish. Every write here returns its error, and `main`
/// turns a broken pipe of standard output or error ([`is_reader_gone`])
/// into this status and prints nothing more.
pub const READER_GONE: u8 = 141;

/// `word` as one word of a shell command that a hint suggests: as it is
/// when a shell reads it so, else in single quotes (a path with a space,
/// a URL with `?` or `&`), so that the command can be pasted as printed.
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c);
    match !word.is_empty() && word.chars().all(plain) {
        true => word.to_owned(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

/// `count` and `noun`, the noun in the plural unless the count is one:
/// `1 session`, `3 sessions`.
pub fn counted(count: impl Into<u64>, noun: &str) -> String {
    match count.into() {
        1 => format!("1 {noun}"),
        count => format!("{count} {noun}s"),
    }
}

/// What `violations` records break, `seal_failures` of them seals that do
/// not hold and `headers` of them headers: a seal is marked like a broken
/// rule and named as what it is, and a header is named as a header, not
/// counted as an event (`1 header and 2 events break the rules, 1 seal does
/// not hold`).
pub fn what_breaks(violations: u64, seal_failures: u64, headers: u64) -> String {
    let rules = violations.saturating_sub(seal_failures);
    let events = rules.saturating_sub(headers);
    let mut found = Vec::new();
    match (headers, events) {
        (0, 0) => {}
        (0, events) => found.push(events_breaking(events)),
        (1, 0) => found.push("1 header breaks the rules".to_owned()),
        (headers, 0) => found.push(format!("{headers} headers break the rules")),
        (headers, events) => found.push(format!(
            "{} and {} break the rules",
            counted(headers, "header"),
            counted(events, "event")
        )),
    }
    if seal_failures > 0 {
        found.push(match seal_failures {
            1 => "1 seal does not hold".to_owned(),
            seals => format!("{seals} seals do not hold"),
        });
    }
    found.join(", ")
}

/// How many events break the rules, the verb agreeing: `1 event breaks
/// the rules`, `3 events break the rules`.
pub fn events_breaking(count: impl Into<u64>) -> String {
    match count.into() {
        1 => "1 event breaks the rules".to_owned(),
        count => format!("{count} events break the rules"),
    }
}

/// Set when a write to standard output or error finds its reader gone.
static READER_WENT: AtomicBool = AtomicBool::new(false);

/// The first failure of a write to standard output (a full disk under
/// `>`), for `main` to say that output was lost and why.
static STDOUT_FAILED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Standard output or error, noting a write that finds its reader gone:
/// a broken pipe elsewhere (a server's socket, a FIFO given as a file) is
/// an error like any other, not the reader going away.
#[derive(Debug)]
pub struct Watched<W> {
    inner: W,
    /// Whether this is standard output.
    stdout: bool,
}

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf);
        self.note(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        let flushed = self.inner.flush();
        self.note(flushed)
    }
}

impl<W> Watched<W> {
    fn note<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if let Err(error) = &result {
            if error.kind() == io::ErrorKind::BrokenPipe {
                READER_WENT.store(true, Ordering::Relaxed);
            } else if self.stdout {
                let mut failed = STDOUT_FAILED
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                failed.get_or_insert_with(|| error.to_string());
            }
        }
        result
    }
}

/// How the first write to standard output failed, with something other
/// than a closed pipe (none: every write went out).
pub fn stdout_failure() -> Option<String> {
    STDOUT_FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Whether `error` is the reader of standard output or error going away: a
/// write to one of them found a closed pipe, and a broken pipe is in the
/// error's chain.
pub fn is_reader_gone(error: &anyhow::Error) -> bool {
    READER_WENT.load(Ordering::Relaxed) && is_broken_pipe(error)
}

/// Whether `error` (anywhere in its chain) is a write to a closed pipe.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|json| json.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
    })
}

/// Standard output, buffered and escaped as `mode` says.
#[allow(clippy::disallowed_methods)]
pub fn stdout(mode: Mode) -> Escaping<io::BufWriter<Watched<io::StdoutLock<'static>>>> {
    let watched = Watched {
        inner: io::stdout().lock(),
        stdout: true,
    };
    Escaping::new(io::BufWriter::new(watched), mode)
}

/// Standard error, escaped as text.
#[allow(clippy::disallowed_methods)]
pub fn stderr() -> Escaping<Watched<io::StderrLock<'static>>> {
    let watched = Watched {
        inner: io::stderr().lock(),
        stdout: false,
    };
    Escaping::new(watched, Mode::Text)
}

/// A writer of standard error for `tracing`, escaped as text.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for TracingStderr {
    type Writer = Escaping<Watched<io::StderrLock<'static>>>;

    fn make_writer(&'a self) -> Self::Writer {
        stderr()
    }
}

/// The one way a command warns: `sessionlog: warning: …`, one line on
/// standard error (escaped like every line), nothing on standard output,
/// silenced by `--quiet`.
pub fn warn(message: impl fmt::Display) {
    if !crate::quiet() {
        eprint_line(format_args!("sessionlog: warning: {message}"));
    }
}

/// Routes the libraries' `tracing` warnings (a writer truncating a torn
/// tail) to [`warn`], so they read like every other warning and carry no
/// colour code. `SESSIONLOG_LOG` (a `tracing` filter such as `debug`)
/// switches to tracing's own lines under that filter instead, for
/// debugging, still through the escaping writer and without colour.
pub fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("SESSIONLOG_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(TracingStderr)
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
struct WarningLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarningLayer {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _context: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() > tracing::Level::WARN {
            return;
        }
        let mut fields = WarningFields::default();
        event.record(&mut fields);
        match fields.path {
            Some(path) => warn(format_args!("{path}: {}", fields.message)),
            None => warn(fields.message),
        }
    }
}

/// The message and path of a warning event; its other fields repeat what
/// the message says.
#[derive(Debug, Default)]
struct WarningFields {
    message: String,
    path: Option<String>,
}

impl tracing::field::Visit for WarningFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                use std::fmt::Write as _;
                let _ = write!(self.message, "{value:?}");
            }
            "path" => self.path = Some(format!("{value:?}")),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "path" => self.path = Some(value.to_owned()),
            _ => {}
        }
    }
}

/// Whether standard output is a terminal.
#[allow(clippy::disallowed_methods)]
pub fn stdout_is_terminal() -> bool {
    io::IsTerminal::is_terminal(&io::stdout())
}

/// The widest line a timeline is laid out for: far wider than any screen,
/// and small enough that the layout's arithmetic never overflows.
pub const MAX_OUTPUT_COLUMNS: usize = 100_000;

/// The columns a timeline printed on standard output should fit: `COLUMNS`
/// when it holds a number (as shells export it, and as a script may set
/// it; at most [`MAX_OUTPUT_COLUMNS`]), else the width of the terminal
/// standard output is, else 80.
pub fn output_columns() -> usize {
    let from_environment = std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.trim().parse::<usize>().ok())
        .filter(|columns| *columns > 0);
    if let Some(columns) = from_environment {
        return columns.min(MAX_OUTPUT_COLUMNS);
    }
    if stdout_is_terminal() {
        if let Some((_, columns)) = console::Term::stdout().size_checked() {
            return usize::from(columns);
        }
    }
    80
}

/// Whether standard error is a terminal.
#[allow(clippy::disallowed_methods)]
pub fn stderr_is_terminal() -> bool {
    io::IsTerminal::is_terminal(&io::stderr())
}

/// Prints one line of text on standard output.
pub fn print_line(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = stdout(Mode::Text);
    out.write_fmt(args)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Prints one line of JSON on standard output.
pub fn print_json_line(json: &str) -> io::Result<()> {
    let mut out = stdout(Mode::Json);
    out.write_all(json.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Prints one line on standard error (a failure to print there has
/// nowhere left to be reported).
pub fn eprint_line(args: fmt::Arguments<'_>) {
    let mut err = stderr();
    let _ = err.write_fmt(args);
    let _ = err.write_all(b"\n");
    let _ = err.flush();
}

/// `text` with every unprintable character escaped, `\n` and `\t`
/// included: for a value shown inside one line or one column.
pub fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unprintable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unprintable(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `println!` through [`Escaping`]: an `io::Result`.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::terminal::print_line(format_args!($($arg)*))
    };
}

/// `eprintln!` through [`Escaping`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::terminal::eprint_line(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_word_is_quoted_only_when_a_shell_would_split_or_expand_it() {
        assert_eq!(shell_word("/srv/logs-2.db"), "/srv/logs-2.db");
        assert_eq!(shell_word("postgres://u@h:5/db"), "postgres://u@h:5/db");
        assert_eq!(shell_word("my logs"), "'my logs'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(
            shell_word("postgres://h/db?schema=a&x=$HOME"),
            "'postgres://h/db?schema=a&x=$HOME'"
        );
        assert_eq!(shell_word(""), "''");
    }

    fn escaped(mode: Mode, pieces: &[&[u8]]) -> String {
        let mut out = Vec::new();
        {
            let mut writer = Escaping::new(&mut out, mode);
            for piece in pieces {
                writer.write_all(piece).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        String::from_utf8(out).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn terminal_controls_are_escaped_and_lines_and_columns_kept() {
        let hostile = "a\tb\x1b]0;owned\x07\x1b[2J\u{202e}cba\u{9b}31m\x7f\r\nnext";
        assert_eq!(
            escaped(Mode::Text, &[hostile.as_bytes()]),
            "a\tb\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{202e}cba\\u{9b}31m\\u{7f}\\u{d}\nnext"
        );
        assert_eq!(
            escaped(Mode::Json, &["{\"t\":\"\u{202e}x\"}".as_bytes()]),
            r#"{"t":"\u202ex"}"#
        );
        assert_eq!(escaped(Mode::Raw, &[b"\x1b[2J"]), "\x1b[2J");
    }

    #[test]
    fn a_character_cut_between_writes_is_escaped_whole() {
        let bidi = "\u{202e}".as_bytes();
        assert_eq!(
            escaped(Mode::Text, &[b"x", &bidi[..1], &bidi[1..], b"y"]),
            "x\\u{202e}y"
        );
        assert_eq!(
            escaped(Mode::Text, &[b"caf\xc3", b"\xa9 \xff"]),
            "café \\x{ff}"
        );
    }

    #[test]
    fn shown_escapes_line_breaks_too() {
        assert_eq!(shown("plain"), "plain");
        assert_eq!(shown("a\nb\u{202e}"), "a\\nb\\u{202e}");
    }
}
