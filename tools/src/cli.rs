//! The command-line grammar (clap derive). Every command documents itself
//! with an example in its long help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sessionlog_schema::{ApprovalPolicy, Preset, SandboxMode};

/// An event-sourced session store for AI coding-agent runtimes: verify,
/// replay, project, fork, migrate and review session logs.
///
/// A STORE is a `.jsonl` file (one session), a folder of `<id>.jsonl` logs,
/// a `.db`/`.sqlite` database, or a PostgreSQL URL
/// (`postgres://user@host:5432/dbname`, `?schema=NAME` for a schema other
/// than `sessionlog`; the `PG*` variables fill what the URL leaves out);
/// `--session ID` picks one session in a store.
///
/// Exit codes: 0 ok, 1 usage or I/O error, 2 corruption, 3 only a torn tail
/// (verify), 4 rule violations, 5 fail-closed review error or reviewer
/// failure, 6 Locked or Conflict, 7 a seal check failed, 8 review-audit found
/// a decision that differs, 9 diff could not compare the stores, 141 standard
/// output closed before the command finished (`| head`). When
/// several apply, 2 wins over 7, 7 over 4, 4 over 3.
#[derive(Debug, Parser)]
#[command(name = "sessionlog", version, propagate_version = true)]
pub struct Cli {
    /// Print no warnings or progress on stderr (errors are still printed).
    #[arg(long, short, global = true)]
    pub quiet: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Picks one session of a store.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// A `.jsonl` file, a folder of logs, a `.db`/`.sqlite` database or a
    /// `postgres://` URL.
    pub store: PathBuf,
    /// The session, when the store holds more than one.
    #[arg(long)]
    pub session: Option<String>,
}

/// The configured defaults that an effective value falls back to.
#[derive(Debug, Clone, Args)]
pub struct DefaultArgs {
    /// The configured default approval policy (ask | never).
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub default_approval: ApprovalPolicy,
    /// The configured default sandbox mode (read-only | workspace-write | danger-full-access).
    #[arg(long, default_value = "workspace-write", value_parser = parse_sandbox)]
    pub default_sandbox: SandboxMode,
}

impl DefaultArgs {
    /// The defaults the projections fall back to.
    pub fn defaults(&self) -> sessionlog_projections::Defaults {
        sessionlog_projections::Defaults {
            approval: self.default_approval,
            sandbox: self.default_sandbox,
        }
    }
}

/// Where and how to call the reviewer model.
#[derive(Debug, Clone, Args)]
pub struct ReviewerArgs {
    /// The base URL of an OpenAI-compatible Chat Completions API, e.g.
    /// `https://api.deepseek.com/v1` or `http://127.0.0.1:8080/v1`.
    #[arg(long, value_name = "URL")]
    pub endpoint: String,
    /// The model to ask (default: the model of the session's latest
    /// request/header).
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// The environment variable that holds the API key (default
    /// SESSIONLOG_REVIEWER_KEY; without it, no key is sent).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Give up on an answer not complete after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 90.0, value_parser = parse_timeout)]
    pub timeout: f64,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check CRCs, seqs, the header, vocabularies, shapes, every rule, and
    /// every own seal against the recomputed hash chain.
    ///
    /// Exit 0 when clean, 2 on corruption, 7 when a seal check fails (a
    /// seal, `--trust`, `--require-sealed` or `--anchor`), 4 on rule
    /// violations, 3 when the only damage is a torn tail; the first of these
    /// that applies wins. Exit 1 when the store holds no session at all
    /// (unless --allow-empty).
    #[command(
        after_help = "Examples:\n  sessionlog verify examples/sessions/\n  sessionlog verify examples/sessions/auto-review.jsonl --json\n  sessionlog verify ./sessions --trust auditors.pub --require-sealed --anchor anchors.jsonl"
    )]
    Verify {
        #[command(flatten)]
        target: SessionArgs,
        /// One JSON object per session on stdout.
        #[arg(long)]
        json: bool,
        /// Accept a store that holds no session (exit 0); without it, "no
        /// sessions found" is exit 1, since an existing folder that is not a
        /// store (`$HOME`) holds none (a path that does not exist is exit 1,
        /// "no such store").
        #[arg(long)]
        allow_empty: bool,
        /// A trust file of public keys (`ed25519:...` a line); every own
        /// seal must be signed by a key listed in one of them. Repeatable.
        /// Alone it proves nothing of a session with no seal: add
        /// `--require-sealed`.
        #[arg(long, value_name = "FILE")]
        trust: Vec<PathBuf>,
        /// Every session must have a seal of its own with no own event after
        /// its last one. A log whose seals were removed and that a key's
        /// holder sealed again passes: only `--anchor` tells that history
        /// from the one anchored earlier.
        #[arg(long)]
        require_sealed: bool,
        /// An anchor file (lines printed by `sessionlog head`): every session
        /// it names must still exist and hold that chain value at that seq.
        #[arg(long, value_name = "FILE")]
        anchor: Option<PathBuf>,
    },
    /// Write a new Ed25519 seal key: FILE (mode 0600) holds the secret,
    /// FILE.pub the public key (a line of a trust file).
    #[command(
        after_help = "Examples:\n  sessionlog keygen runtime.key\n  sessionlog seal ./sessions --session s1 --key runtime.key\n  sessionlog verify ./sessions --trust runtime.key.pub"
    )]
    Keygen {
        /// The secret key file to create (refused when it exists).
        file: PathBuf,
        /// Print `{"secretKeyFile", "publicKeyFile", "publicKey"}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Append a seal: the hash chain value of every record so far, signed
    /// when given a key. Exit 6 while another writer holds the session.
    #[command(
        after_help = "Example:\n  sessionlog seal ./sessions --session s1 --key runtime.key"
    )]
    Seal {
        #[command(flatten)]
        target: SessionArgs,
        /// The secret key file (from `sessionlog keygen`) that signs the seal.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// Print the seal as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print `{"session", "seq", "chain"}` for the last record of each
    /// session's good prefix: kept elsewhere, these lines are an anchor for
    /// `verify --anchor`.
    ///
    /// It checks CRCs and seqs, not the rules nor the seals: run `verify`
    /// first, as an anchor of a log already changed vouches for the change.
    #[command(
        after_help = "Examples:\n  sessionlog verify ./sessions && sessionlog head ./sessions > /safe/place/anchors.jsonl\n  sessionlog verify ./sessions --anchor /safe/place/anchors.jsonl"
    )]
    Head {
        #[command(flatten)]
        target: SessionArgs,
    },
    /// Create a root session.
    #[command(
        after_help = "Example:\n  sessionlog create ./sessions --session s1 --cwd /work/project"
    )]
    Create {
        /// A folder (created if missing), a `.db`/`.sqlite` database, a
        /// `postgres://` URL (its schema created if missing) or a new `.jsonl` file.
        store: PathBuf,
        /// The new session's id.
        #[arg(long)]
        session: String,
        /// The session's working directory (default: the current one).
        #[arg(long)]
        cwd: Option<String>,
        /// Print the header as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Append events read from stdin, one `{"type", "data", "ts"?}` object a
    /// line; prints `{"seq": N}` for each once it is durable.
    ///
    /// A line holding a JSON array of such objects is one atomic batch (all
    /// of it or none of it survives a crash). An unknown type outside an
    /// `x-` namespace is kept with a warning naming the closest known type
    /// (refused with --strict).
    ///
    /// Interrupted (Ctrl-C, a killed process), the log may hold more events
    /// than were acknowledged: events written but not yet synced can still
    /// reach the disk. Only a printed `{"seq": N}` is a promise. To resume,
    /// ask the log where it stands (`sessionlog tail STORE --session ID -n 1
    /// --json`) and send what follows, with `--expect-seq` set to the next
    /// seq so a second writer or a stale view is refused (exit 6) instead of
    /// appending twice.
    #[command(
        after_help = "Examples:\n  echo '{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}' | sessionlog append ./sessions --session s1\n  echo '[{\"type\":\"turn/end\",\"data\":{\"turnId\":\"t1\"}},{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t2\"}}]' | sessionlog append ./sessions --session s1 --expect-seq 2"
    )]
    Append {
        #[command(flatten)]
        target: SessionArgs,
        /// The seq the first event must get (else Conflict, exit 6).
        #[arg(long)]
        expect_seq: Option<u64>,
        /// Seal each turn: after every `turn/end`, append a seal signed by
        /// this secret key file, synced with it; that line prints
        /// `{"seq": N, "seal": N+1}`.
        #[arg(long, value_name = "FILE")]
        seal_key: Option<PathBuf>,
        /// Refuse (exit 4) an event type the format does not know, unless it
        /// is in an `x-` namespace (`x-myruntime/usage`); without it such a
        /// type is kept with a warning naming the closest known type.
        #[arg(long)]
        strict: bool,
    },
    /// Switch a session's permission preset (the preset writer).
    ///
    /// Appends, as one atomic batch, the `sandbox/mode` and
    /// `approval/policy` events whose effective value differs from the
    /// preset's, then the `permission/preset` event. `auto` runs under the
    /// approval policy given with --approval (required for it, refused for
    /// the others) with the danger-full-access sandbox.
    #[command(
        after_help = "Examples:\n  sessionlog preset ./sessions --session s1 read-only\n  sessionlog preset ./sessions --session s1 auto --approval never --json"
    )]
    Preset {
        #[command(flatten)]
        target: SessionArgs,
        /// The preset (read-only | workspace-write | full-access | auto).
        #[arg(value_parser = parse_preset)]
        preset: Preset,
        /// The approval policy an `auto` session runs under (ask | never).
        #[arg(long, value_parser = parse_approval)]
        approval: Option<ApprovalPolicy>,
        /// The seq the first event must get (else Conflict, exit 6).
        #[arg(long)]
        expect_seq: Option<u64>,
        #[command(flatten)]
        defaults: DefaultArgs,
        /// Print what was appended as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the projections (policy, sandbox, preset, turn, step, approvals).
    #[command(
        after_help = "Example:\n  sessionlog project examples/sessions/auto-review.jsonl --at 12"
    )]
    Project {
        #[command(flatten)]
        target: SessionArgs,
        /// Fold only the first SEQ events. The log is read through SEQ and
        /// no further: damage after it is left for `verify`.
        #[arg(long)]
        at: Option<u64>,
        #[command(flatten)]
        defaults: DefaultArgs,
    },
    /// Create a child session from a parent's snapshot, beside the parent.
    #[command(
        after_help = "Example:\n  sessionlog fork ./sessions --session parent --child child-1 --prompt 'Run the tests'"
    )]
    Fork {
        #[command(flatten)]
        target: SessionArgs,
        /// The child's id.
        #[arg(long)]
        child: String,
        /// The child's creation prompt, sent as the parent's agent message.
        #[arg(long)]
        prompt: Option<String>,
        #[command(flatten)]
        defaults: DefaultArgs,
        /// Print the child header as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Build the Auto reviewer's request for a pending tool call.
    ///
    /// A request that fails closed prints `{"error": CODE, ...}`:
    /// `INVALID_LOG` exits 2 for a corrupt log, 7 for a seal that does not
    /// hold, 4 for a rule violation (as `verify` ranks them); every other
    /// code exits 5.
    #[command(
        after_help = "Examples:\n  sessionlog review-request examples/sessions/pending-review.jsonl --pending examples/pending-action.json\n  echo \"$PENDING_ACTION\" | sessionlog review-request ./sessions --session s1 --pending -"
    )]
    ReviewRequest {
        #[command(flatten)]
        target: SessionArgs,
        /// The pending action: `{callId, stepId, name, arguments, parentCallId?, schema?}`,
        /// in a file, or on standard input with `-`.
        #[arg(long)]
        pending: PathBuf,
        /// The request size limit in bytes.
        #[arg(long, default_value_t = sessionlog_projections::DEFAULT_MAX_REQUEST_BYTES)]
        max_bytes: usize,
    },
    /// Ask the reviewer model about a pending tool call, and optionally
    /// record its decision.
    ///
    /// Builds the request exactly as review-request (failing closed before
    /// anything is sent), POSTs it to ENDPOINT/chat/completions, reads the
    /// answer strictly and prints `{risk, decision, reason?}` (exit 0 for
    /// allow and deny) or `{"error": "AUTO_REVIEW_FAILED", "message"}` (exit
    /// 5). With --record, appends the call's tool/start and, for a denial or
    /// a failure, its settle, as one atomic batch. The key is read from the
    /// environment and never printed. Proxies come from HTTPS_PROXY,
    /// HTTP_PROXY, ALL_PROXY and NO_PROXY; SSL_CERT_FILE replaces the
    /// built-in certificate roots.
    #[command(after_help = "Examples:
  SESSIONLOG_REVIEWER_KEY=sk-... sessionlog review examples/sessions/pending-review.jsonl \\
      --pending examples/pending-action.json --endpoint https://api.deepseek.com/v1 --model deepseek-chat
  SESSIONLOG_REVIEWER_KEY=sk-... sessionlog review ./sessions --session s1 \\
      --pending pending.json --endpoint https://api.deepseek.com/v1 --model deepseek-chat --record")]
    Review {
        #[command(flatten)]
        target: SessionArgs,
        /// The pending action `{callId, stepId, name, arguments,
        /// parentCallId?, schema?}`; `-` reads standard input.
        #[arg(long, value_name = "FILE")]
        pending: PathBuf,
        #[command(flatten)]
        reviewer: ReviewerArgs,
        /// The request size limit in bytes.
        #[arg(long, default_value_t = sessionlog_projections::DEFAULT_MAX_REQUEST_BYTES)]
        max_bytes: usize,
        /// Append the call's tool/start and, when it must not run, its settle.
        #[arg(long)]
        record: bool,
    },
    /// Ask the reviewer again about every call a session made under Auto,
    /// and show where today's answer differs from the recorded one.
    ///
    /// Each own tool/start made while the preset was auto is rebuilt as a
    /// pending action against the snapshot just before it, sent, and
    /// compared with what the log recorded (denied, failed, or allowed).
    /// Nothing is written. Exit 0 when every decision agrees, 8 when one
    /// differs, 5 when the reviewer gave no decision at all.
    #[command(after_help = "Examples:
  sessionlog review-audit examples/sessions/auto-review.jsonl --endpoint http://127.0.0.1:8080/v1 --model new-reviewer --json > audit.json
  sessionlog report examples/sessions/auto-review.jsonl --html report.html --audit audit.json")]
    ReviewAudit {
        #[command(flatten)]
        target: SessionArgs,
        #[command(flatten)]
        reviewer: ReviewerArgs,
        /// The request size limit in bytes, as the calls were reviewed
        /// with (`review --max-bytes`).
        #[arg(long, default_value_t = sessionlog_projections::DEFAULT_MAX_REQUEST_BYTES)]
        max_bytes: usize,
        /// Print one JSON object `{session, model, rows, summary}`.
        #[arg(long)]
        json: bool,
        /// The configuration the session ran with: which calls were made
        /// under `auto` is read from the preset these give.
        #[command(flatten)]
        defaults: DefaultArgs,
    },
    /// Parse a reviewer's reply `{blocks, stop}` strictly into its decision.
    ///
    /// A reply that is not a valid decision is `AUTO_REVIEW_FAILED`, exit 5.
    #[command(after_help = "Example:\n  sessionlog review-result reply.json")]
    ReviewResult {
        /// The reply file (standard input when absent, or `-`).
        file: Option<PathBuf>,
    },
    /// Copy every session between backends, then prove the copy identical.
    ///
    /// Every source session is read and checked, and staged in the
    /// destination unseen, before any is published; an interrupted run
    /// (Ctrl-C during publishing) is finished by running it again with
    /// --resume, which proves and skips what is already there. A source and
    /// destination that are the same store are refused.
    #[command(
        after_help = "Examples:\n  sessionlog migrate ./sessions ./sessions.db\n  sessionlog migrate ./sessions ./sessions.db --resume\n  sessionlog migrate one.jsonl ./sessions.db"
    )]
    Migrate {
        /// The source store, or a lone `.jsonl` log (one session).
        from: PathBuf,
        /// The destination store (created when missing; a folder so created
        /// is removed again when the migration is refused).
        to: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Accept a source that holds no session (nothing is copied, exit
        /// 0); without it, "no sessions found" is exit 1.
        #[arg(long)]
        allow_empty: bool,
        /// Resume an interrupted migration: a session the destination
        /// already holds is checked as a first run checks it, compared with
        /// its source and skipped when identical (one that differs still
        /// refuses the run).
        #[arg(long)]
        resume: bool,
    },
    /// Exit 0 when two stores hold identical sessions, 1 when they differ, 9 when they cannot be compared.
    ///
    /// Errors have codes of their own, never 1: 9 when the stores cannot be
    /// compared (a usage or I/O error, a missing store), 2 when one is
    /// corrupt. --json prints numbers (seq, ts, seedLength, ...) as numbers,
    /// null members as null and text as its own characters.
    #[command(
        after_help = "Examples:\n  sessionlog diff ./sessions ./sessions.db\n  sessionlog diff one.jsonl copy.jsonl"
    )]
    Diff {
        /// One store, or a lone `.jsonl` log (one session).
        a: PathBuf,
        /// The other, likewise.
        b: PathBuf,
        /// Print the first difference as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the records as JSON lines (header, then events) without CRCs.
    #[command(
        after_help = "Example:\n  sessionlog export ./sessions.db --session s1 | jq -c 'select(.seq) | {seq, type}'"
    )]
    Export {
        #[command(flatten)]
        target: SessionArgs,
    },
    /// List the sessions of a store from their headers.
    ///
    /// Only the headers are read, so a listing costs the same however long
    /// the sessions are: a damaged header is refused (exit 2), damage after
    /// it is left to `verify`.
    ///
    /// A store with no sessions lists nothing, exit 0, with a warning on
    /// stderr ("no sessions found in X"): an existing folder that is not a
    /// store (`$HOME`) holds none either. A path that does not exist is
    /// exit 1, "no such store".
    #[command(after_help = "Example:\n  sessionlog list examples/sessions --tree")]
    List {
        /// A `.jsonl` file, a folder of logs, a `.db`/`.sqlite` database or a
        /// `postgres://` URL.
        store: PathBuf,
        /// Show children under their parents.
        #[arg(long)]
        tree: bool,
        /// One JSON object per session.
        #[arg(long)]
        json: bool,
    },
    /// Show a session as a readable timeline, with the projections as they change.
    ///
    /// Who said what with which authority, tool calls and their arguments,
    /// approvals, denials, checkpoints, children, unknown types. Rule
    /// violations are marked inline (exit 4 after the timeline); a corrupt
    /// log is refused (exit 2); a torn tail is ignored with a warning.
    ///
    /// The timeline fits the terminal: each summary is wrapped under the
    /// text column (the width comes from COLUMNS, else the terminal, else
    /// 80) and clipped to four lines with a note of what is left out;
    /// --full shows every summary whole, and --json always carries it whole.
    #[command(after_help = crate::commands::replay::help_after())]
    Replay {
        #[command(flatten)]
        target: SessionArgs,
        /// Show events from this seq on (the projections are still folded
        /// from the start).
        #[arg(long, value_name = "SEQ")]
        from: Option<u64>,
        /// Stop after this seq (the rules are checked on E[1..SEQ] only).
        #[arg(long, value_name = "SEQ")]
        at: Option<u64>,
        /// One JSON object per event: {seq, ts, time, type, summary,
        /// authority?, violation?, projection? (when it changed)}; the
        /// summary is always whole.
        #[arg(long)]
        json: bool,
        /// Show every summary whole on the terminal, wrapped, instead of
        /// at most four lines of it.
        #[arg(long)]
        full: bool,
        /// When to colour the output.
        #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
        color: ColorChoice,
        #[command(flatten)]
        defaults: DefaultArgs,
    },
    /// Print the last events of a session; with -f, follow new ones.
    ///
    /// Following survives writer restarts, torn-tail truncations and a log
    /// replaced by a new file: no event is printed twice or skipped. A log
    /// replaced by another history (another header, earlier records
    /// changed) ends it with exit 2.
    #[command(
        after_help = "Examples:\n  sessionlog tail examples/sessions/auto-review.jsonl\n  sessionlog tail ./sessions --session s1 -f | jq -c '{seq, type}'\n  sessionlog tail ./sessions.db --session s1 --from 1 -f --json"
    )]
    Tail {
        #[command(flatten)]
        target: SessionArgs,
        /// Keep following the log until interrupted: it is read again as soon as
        /// its folder changes, and at least every 100 ms.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Start at this seq instead of the last events.
        #[arg(long, value_name = "SEQ", conflicts_with = "lines")]
        from: Option<u64>,
        /// How many of the last events to print first.
        #[arg(long, short = 'n', value_name = "N", default_value_t = 10)]
        lines: u64,
        /// One summary object per event ({seq, ts, time, type, summary,
        /// authority?}) instead of export lines.
        #[arg(long)]
        json: bool,
    },
    /// Copy the good prefix of a damaged log to a new, valid log.
    ///
    /// FILE (corrupt or torn) is never modified. The prefix is cut before
    /// the first rule violation if it has one. The report says what was left
    /// behind: from which line and byte offset, how many bytes, and why.
    #[command(
        after_help = "Example:\n  sessionlog salvage sessions/s1.jsonl /tmp/s1-salvaged.jsonl && sessionlog verify /tmp/s1-salvaged.jsonl"
    )]
    Salvage {
        /// The damaged `.jsonl` log (read only).
        file: PathBuf,
        /// The new log to write; an existing file is refused.
        out: PathBuf,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Count sessions, events by type (unknown types too), bytes and torn tails.
    ///
    /// A store with no sessions counts zero, exit 0, with a warning on
    /// stderr ("no sessions found in X"): an existing folder that is not a
    /// store (`$HOME`) holds none either. A path that does not exist is
    /// exit 1, "no such store".
    #[command(
        after_help = "Examples:\n  sessionlog stats examples/sessions\n  sessionlog stats ./sessions.db --json | jq .totals.eventsByType"
    )]
    Stats {
        #[command(flatten)]
        target: SessionArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write a self-contained HTML report of a store for auditors.
    ///
    /// Every session's timeline (or --session's), each summary whole (a long
    /// one in a cell that opens), projections over time, approvals and
    /// denials highlighted, children linked, and a legend of the authority
    /// labels and colours. A report of more than --page-events events is
    /// paged: OUT is an index, and the folder beside it holds a page per
    /// --page-events events of each session. Nothing loads from the
    /// network; links are relative, so it works offline.
    #[command(
        after_help = "Examples:\n  sessionlog report examples/sessions --html report.html && xdg-open report.html\n  sessionlog report ./big.db --html audit.html --page-events 5000   # audit.html + audit-pages/"
    )]
    Report {
        #[command(flatten)]
        target: SessionArgs,
        /// The HTML file to write (replaced if it exists).
        #[arg(long, value_name = "OUT")]
        html: PathBuf,
        /// Show a review-audit (the JSON `review-audit --json` printed)
        /// next to the calls it asked about.
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// Events a page holds: a bigger report is an index at OUT and
        /// pages of this many events in the folder beside it
        /// (report.html → report-pages/).
        #[arg(long, value_name = "N", default_value_t = 2000,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        page_events: usize,
        #[command(flatten)]
        defaults: DefaultArgs,
        /// A trust file of public keys; each session's own seals are
        /// checked against it and the page says so. Repeatable.
        #[arg(long, value_name = "FILE")]
        trust: Vec<PathBuf>,
    },
    /// Remove the temporary files a killed create, fork, migrate or writer
    /// left in a folder of logs.
    ///
    /// Only dot-named temporary files that no running creation, migration or
    /// writer holds (a lock they keep) and that were last written at least
    /// --older-than seconds ago are removed: those of a creation or fork, of
    /// a migration, and a state snapshot a writer was writing
    /// (`.<id>.jsonl.state.new`). A session log and its state snapshot are
    /// never touched.
    /// A database keeps no such files.
    #[command(
        after_help = "Examples:\n  sessionlog clean ./sessions --dry-run\n  sessionlog clean ./sessions --older-than 0 --json"
    )]
    Clean {
        /// A folder of logs (a database is accepted and has nothing to clean).
        store: PathBuf,
        /// Keep what was written less than this many seconds ago. A creation
        /// locks its file a moment after creating it: use 0 only on a folder
        /// no process is writing.
        #[arg(long, value_name = "SECONDS", default_value_t = crate::commands::verify::CLEAN_MIN_AGE.as_secs())]
        older_than: u64,
        /// List what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// One JSON object a file on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Import Codex CLI rollouts or Claude Code transcripts as sessions.
    ///
    /// Each SOURCE is a file or a folder, walked for the tools' own file
    /// names (`rollout-*.jsonl` for codex, `<uuid>.jsonl` and
    /// `agent-*.jsonl` for claude, either for auto; also `.jsonl.zst`). Session ids derive from the tools' own ids, so
    /// importing again writes nothing new. A file that cannot be read is
    /// named with its line and imports nothing; the others go on, and the
    /// exit code is 1. Every imported session passes `verify`. The mapping:
    /// docs/IMPORT.md.
    #[command(
        after_help = "Examples:\n  sessionlog import auto ~/.codex/sessions ~/.claude/projects --into ./audit\n  sessionlog import codex rollout-2025-11-20T16-59-09-019aa234.jsonl --into audit.db --json\n  sessionlog import claude ~/.claude/projects --into postgres://me@db.example/sessions"
    )]
    Import {
        /// The tool that wrote the sources (auto: recognised per file).
        #[arg(value_enum)]
        format: ImportFormat,
        /// Transcript files or folders.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        /// The store to import into (a folder, a .db/.sqlite database or a
        /// `postgres://` URL, created when missing; a folder created for an
        /// import that imports nothing is removed again).
        #[arg(long, value_name = "STORE")]
        into: PathBuf,
        /// One JSON object per SOURCE on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print shell completions for SHELL on standard output.
    #[command(
        after_help = "Examples:\n  sessionlog completions bash > ~/.local/share/bash-completion/completions/sessionlog\n  sessionlog completions zsh > ~/.zfunc/_sessionlog"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Which tool wrote the transcripts to import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFormat {
    /// Codex CLI rollouts.
    Codex,
    /// Claude Code project transcripts.
    Claude,
    /// Recognised from each file's content.
    Auto,
}

/// When to colour terminal output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// When standard output is a terminal and `NO_COLOR` is not set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Parses an approval policy for clap.
pub fn parse_approval(text: &str) -> Result<ApprovalPolicy, String> {
    text.parse()
}

/// Parses a timeout in seconds (fractions allowed) for clap.
pub fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() && seconds <= 86_400.0 => Ok(seconds),
        _ => Err(format!(
            "{text:?} is not a number of seconds above 0 and at most 86400"
        )),
    }
}

/// Parses a preset for clap.
pub fn parse_preset(text: &str) -> Result<Preset, String> {
    text.parse()
}

/// Parses a sandbox mode for clap.
pub fn parse_sandbox(text: &str) -> Result<SandboxMode, String> {
    text.parse()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_has_an_example_in_its_help() {
        let cli = Cli::command();
        for command in cli.get_subcommands() {
            let after_help = command
                .get_after_help()
                .map(|text| text.to_string())
                .unwrap_or_default();
            assert!(
                after_help.starts_with("Example") && after_help.contains("sessionlog "),
                "`sessionlog {}` has no example in its help",
                command.get_name()
            );
        }
    }
}
