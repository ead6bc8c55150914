//! `sessionlog`: the command line over the store, the projections and the
//! Auto-review request. This is the only crate that prints.
//!
//! Every command returns its exit code; errors are mapped to the codes of
//! README.md, "Exit codes" by what they are (a `StoreError`'s class, a usage error, a review
//! failure), never by their text.

mod cli;
mod commands;
mod import;
mod progress;
mod side_by_side;
mod target;
mod terminal;

use std::process::ExitCode;

use clap::Parser;
use sessionlog_store::{ErrorClass, StoreError};

use crate::cli::{Cli, Command};

/// The exit codes (README.md, "Exit codes").
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Usage or I/O error.
    pub const USAGE: u8 = 1;
    /// Corruption.
    pub const CORRUPT: u8 = 2;
    /// Only a torn tail (verify).
    pub const TORN: u8 = 3;
    /// Rule violations.
    pub const RULE: u8 = 4;
    /// A fail-closed review error or reviewer failure.
    pub const REVIEW: u8 = 5;
    /// `Locked` or `Conflict`.
    pub const CONTENTION: u8 = 6;
    /// A seal check failed: the log was changed after it was sealed or
    /// anchored.
    pub const SEAL: u8 = 7;
    /// `review-audit` found a decision that differs from the recorded one.
    pub const AUDIT_DIFFERS: u8 = 8;
    /// `diff` only: the stores could not be compared (a usage or I/O
    /// error), kept apart from 1, which `diff` answers for "different".
    pub const DIFF_TROUBLE: u8 = 9;

    /// The codes that outrank one another when several apply, strongest
    /// first (README.md, "Exit codes": 2 wins over 7, 7 over 4, 4 over 3).
    /// The store ranks its refusals the same way (`ErrorClass::precedence`).
    /// A log of a folder that could not be read while the other sessions
    /// were (1) wins over 3 alone: a torn tail is "only a torn tail" when
    /// every session was read, and what was found in the others (2, 7, 4)
    /// is not hidden by it (docs/FORMAT.md, "The command line").
    pub const PRECEDENCE: [u8; 5] = [CORRUPT, SEAL, RULE, USAGE, TORN];

    /// Combines two exit codes by [`PRECEDENCE`]; `a` when neither ranks.
    pub fn worst(a: u8, b: u8) -> u8 {
        let rank = |code: u8| {
            PRECEDENCE
                .iter()
                .position(|ranked| *ranked == code)
                .map_or(0, |index| PRECEDENCE.len() - index)
        };
        if rank(b) > rank(a) {
            b
        } else {
            a
        }
    }

    /// Standard output was closed before the command finished (its reader,
    /// such as `head`, went away): 128 + SIGPIPE, printed nothing more.
    pub const READER_GONE: u8 = crate::terminal::READER_GONE;
    /// The exit code of what a check found: the worst of the findings that
    /// apply, by [`worst`].
    pub fn of_findings(corrupt: bool, seal: bool, rule: bool, torn: bool) -> u8 {
        [(corrupt, CORRUPT), (seal, SEAL), (rule, RULE), (torn, TORN)]
            .into_iter()
            .filter(|(found, _)| *found)
            .fold(OK, |code, (_, found)| worst(code, found))
    }
}

/// A usage error: bad arguments or input that is not what a command reads.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// An error that carries its own exit code (its message is already printed
/// when `printed` is set).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// The exit code.
    pub code: u8,
    /// What to print on stderr.
    pub message: String,
}

/// `text` with every URL in it shown without its password
/// (`postgres://app:secret@db/x` as `postgres://app@db/x`, and without a
/// `password=` parameter); `None` when it holds none. The text is read
/// itself, not matched against the arguments: clap quotes an argument
/// with its control characters taken out.
fn without_passwords(text: &str) -> Option<String> {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let end = rest[at + 3..]
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | '>'))
            .map_or(rest.len(), |end| at + 3 + end);
        let start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |start| start + 1);
        shown.push_str(&rest[..start]);
        shown.push_str(&sessionlog_store::redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    shown.push_str(rest);
    (shown != text).then_some(shown)
}

fn main() -> ExitCode {
    // clap exits 2 on a usage error, which README.md, "Exit codes" gives to corruption.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let printed = match error.use_stderr() {
                // clap quotes the arguments it refuses as they were typed:
                // they go out through the escaping writer (a control
                // character in a file name cannot reach the terminal), URLs
                // without their passwords, and without colour.
                true => {
                    let text = error.to_string();
                    let text = without_passwords(&text).unwrap_or(text);
                    std::io::Write::write_all(&mut crate::terminal::stderr(), text.as_bytes())
                }
                false => error.print(),
            };
            if let Err(printing) = printed {
                if printing.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::from(exit::READER_GONE);
                }
                // Help or the version lost (a full disk under `>`): said,
                // never passed off as printed.
                if !error.use_stderr() {
                    crate::errln!("sessionlog: write standard output: {printing}");
                    return ExitCode::from(exit::USAGE);
                }
            }
            return ExitCode::from(if error.use_stderr() {
                usage_code_of_command()
            } else {
                exit::OK
            });
        }
    };
    init_tracing();
    QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    let result = run(cli);
    // The output is written by the time `run` returns, its last flush
    // included: a write that failed (a full disk under `>`) is said, and
    // never passes for success.
    let lost = terminal::stdout_failure();
    match result {
        Err(error) if terminal::is_reader_gone(&error) => ExitCode::from(exit::READER_GONE),
        Ok(code) => match lost {
            None => ExitCode::from(code),
            Some(lost) => {
                crate::errln!("sessionlog: write standard output: {lost}");
                ExitCode::from(exit::USAGE)
            }
        },
        Err(error) => {
            let code = exit_code(&error);
            let is_io = error
                .chain()
                .any(|cause| cause.downcast_ref::<std::io::Error>().is_some());
            match lost {
                // The error is the failed write itself.
                Some(_) if is_io => {
                    crate::errln!("sessionlog: write standard output: {}", render(&error))
                }
                Some(lost) => {
                    crate::errln!("sessionlog: {}", render(&error));
                    crate::errln!("sessionlog: write standard output: {lost}")
                }
                None => crate::errln!("sessionlog: {}", render(&error)),
            };
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let quiet = cli.quiet;
    match cli.command {
        Command::Verify {
            target,
            json,
            allow_empty,
            trust,
            require_sealed,
            anchor,
        } => commands::verify::run(
            &target,
            json,
            allow_empty,
            quiet,
            &commands::verify::SealPolicy::read(&trust, require_sealed, anchor.as_deref())?,
        ),
        Command::Keygen { file, json } => commands::seal::keygen(&file, json),
        Command::Seal { target, key, json } => commands::seal::seal(&target, key.as_deref(), json),
        Command::Head { target } => commands::seal::head(&target),
        Command::Create {
            store,
            session,
            cwd,
            json,
        } => commands::create::run(&store, &session, cwd, json),
        Command::Append {
            target,
            expect_seq,
            strict,
            seal_key,
        } => {
            let unknown = if strict {
                commands::append::UnknownTypes::Refuse
            } else {
                commands::append::UnknownTypes::Warn
            };
            commands::append::run(&target, expect_seq, unknown, seal_key.as_deref())
        }
        Command::Preset {
            target,
            preset,
            approval,
            expect_seq,
            defaults,
            json,
        } => commands::preset::run(
            &target,
            &commands::preset::PresetSwitch {
                preset,
                approval,
                expect_seq,
            },
            &defaults,
            json,
        ),
        Command::Project {
            target,
            at,
            defaults,
        } => commands::project::run(&target, at, &defaults),
        Command::Fork {
            target,
            child,
            prompt,
            defaults,
            json,
        } => commands::fork::run(&target, &child, prompt.as_deref(), &defaults, json),
        Command::ReviewRequest {
            target,
            pending,
            max_bytes,
        } => commands::review::request(&target, &pending, max_bytes),
        Command::Review {
            target,
            pending,
            reviewer,
            max_bytes,
            record,
        } => commands::review::call(&target, &pending, &reviewer, max_bytes, record),
        Command::ReviewAudit {
            target,
            reviewer,
            max_bytes,
            json,
            defaults,
        } => commands::audit::run(
            &target,
            &reviewer,
            (max_bytes, &defaults.defaults()),
            json,
            quiet,
        ),
        Command::ReviewResult { file } => commands::review::result(file.as_deref()),
        Command::Migrate {
            from,
            to,
            json,
            allow_empty,
            resume,
        } => commands::migrate::migrate(
            &from,
            &to,
            &commands::migrate::MigrateArgs {
                allow_empty,
                resume,
            },
            json,
            quiet,
        ),
        Command::Diff { a, b, json } => commands::migrate::diff(&a, &b, json).map_err(|error| {
            if exit_code(&error) == exit::USAGE {
                error.context(Exit {
                    code: exit::DIFF_TROUBLE,
                    message: "cannot compare the stores".into(),
                })
            } else {
                error
            }
        }),
        Command::Export { target } => commands::export::run(&target),
        Command::List { store, tree, json } => commands::list::run(&store, tree, json),
        Command::Replay {
            target,
            from,
            at,
            json,
            full,
            color,
            defaults,
        } => commands::replay::run(
            &target,
            commands::replay::Window { from, at },
            json,
            color,
            commands::replay::Layout {
                width: terminal::output_columns(),
                full,
            },
            &defaults,
        ),
        Command::Tail {
            target,
            follow,
            from,
            lines,
            json,
        } => {
            let start = match from {
                Some(seq) => commands::tail::Start::From(seq),
                None => commands::tail::Start::Last(lines),
            };
            commands::tail::run(&target, start, follow, json)
        }
        Command::Salvage { file, out, json } => commands::salvage::run(&file, &out, json, quiet),
        Command::Stats { target, json } => commands::stats::run(&target, json, quiet),
        Command::Report {
            target,
            html,
            audit,
            page_events,
            defaults,
            trust,
        } => commands::report::run(
            &target,
            &html,
            audit.as_deref(),
            page_events,
            &defaults,
            commands::verify::read_trust_files(&trust)?.as_deref(),
            quiet,
        ),
        Command::Clean {
            store,
            older_than,
            dry_run,
            json,
        } => commands::clean::run(&store, older_than, dry_run, json),
        Command::Import {
            format,
            sources,
            into,
            json,
        } => commands::import::run(format.into(), &sources, &into, json, quiet),
        Command::Completions { shell } => commands::completions::run(shell),
    }
}

/// The exit code of a usage error clap found: 1, but for `diff`, whose 1
/// means "different".
fn usage_code_of_command() -> u8 {
    let command = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    if command.as_deref() == Some("diff") {
        exit::DIFF_TROUBLE
    } else {
        exit::USAGE
    }
}

/// The exit code an error stands for.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    // An `Exit` given as context is found by anyhow's own downcast; the
    // chain shows only its message.
    if let Some(exit) = error.downcast_ref::<Exit>() {
        return exit.code;
    }
    for cause in error.chain() {
        if let Some(exit) = cause.downcast_ref::<Exit>() {
            return exit.code;
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return store_exit_code(store);
        }
    }
    exit::USAGE
}

/// The exit code a store's error stands for, by its class.
pub fn store_exit_code(error: &StoreError) -> u8 {
    match error.class() {
        ErrorClass::Io => exit::USAGE,
        ErrorClass::Corrupt => exit::CORRUPT,
        ErrorClass::Rule => exit::RULE,
        ErrorClass::Seal => exit::SEAL,
        ErrorClass::Contention => exit::CONTENTION,
    }
}

fn render(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        // A wrapper whose own words say less than the cause it wraps, which
        // is shown already (PostgreSQL's `db error` around the server's
        // message): left out.
        let wraps_what_is_shown = cause
            .source()
            .is_some_and(|inner| text.contains(&inner.to_string()));
        let cause = cause.to_string();
        if !text.contains(&cause) && !wraps_what_is_shown {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn init_tracing() {
    terminal::init_tracing();
    // ureq logs the wire at trace level without redacting headers (the
    // reviewer's key among them): no `log` record above debug is emitted.
    log::set_max_level(log::max_level().min(log::LevelFilter::Debug));
}

static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

pub use terminal::warn;

#[cfg(test)]
mod tests {
    use super::render;

    /// An error saying `text`, caused by `source`.
    #[derive(Debug)]
    struct Said(&'static str, Option<Box<Said>>);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Said {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|said| said as _)
        }
    }

    #[test]
    fn a_cause_is_shown_once_and_a_wrapper_of_what_is_shown_not_at_all() {
        // As PostgreSQL's client wraps the server's message: the store's
        // error quotes the message, the wrapper says only `db error`.
        let server = Said("FATAL: terminating connection", None);
        let wrapper = Said("db error", Some(Box::new(server)));
        let store = Said(
            "pg#s: PostgreSQL append failed: FATAL: terminating connection",
            Some(Box::new(wrapper)),
        );
        assert_eq!(
            render(&anyhow::Error::new(store)),
            "pg#s: PostgreSQL append failed: FATAL: terminating connection"
        );
        // A cause with words of its own is still shown.
        let io = Said("No space left on device", None);
        let context = anyhow::Error::new(io).context("write a.jsonl");
        assert_eq!(render(&context), "write a.jsonl: No space left on device");
    }
}
