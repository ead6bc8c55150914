//! The command-line grammar (clap derive). Every command documents itself
//! with an example in its long help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use sessionlog_schema::{ApprovalPolicy, SandboxMode};

/// An event-sourced session store for AI coding-agent runtimes: verify,
/// replay, project, fork, migrate and review session logs.
///
/// A STORE is a `.jsonl` file (one session), a folder of `<id>.jsonl` logs,
/// or a `.db`/`.sqlite` database; `--session ID` picks one session in a store.
///
/// Exit codes: 0 ok, 1 usage or I/O error, 2 corruption, 3 only a torn tail
/// (verify), 4 rule violations, 5 fail-closed review error, 6 Locked or Conflict.
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
    /// A `.jsonl` file, a folder of logs, or a `.db`/`.sqlite` database.
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

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check CRCs, seqs, the header, vocabularies, shapes and every rule.
    ///
    /// Exit 0 when clean, 2 on corruption, 4 on rule violations, 3 when the
    /// only damage is a torn tail.
    ///
    /// Example: sessionlog verify examples/sessions/
    #[command(
        after_help = "Example:\n  sessionlog verify examples/sessions/auto-review.jsonl --json"
    )]
    Verify {
        #[command(flatten)]
        target: SessionArgs,
        /// One JSON object per session on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Create a root session.
    #[command(
        after_help = "Example:\n  sessionlog create ./sessions --session s1 --cwd /work/project"
    )]
    Create {
        /// A folder (created if missing), a `.db`/`.sqlite` database or a new `.jsonl` file.
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
    #[command(
        after_help = "Example:\n  echo '{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}' | sessionlog append ./sessions --session s1"
    )]
    Append {
        #[command(flatten)]
        target: SessionArgs,
        /// The seq the first event must get (else Conflict, exit 6).
        #[arg(long)]
        expect_seq: Option<u64>,
    },
    /// Print the projections (policy, sandbox, preset, turn, step, approvals).
    #[command(
        after_help = "Example:\n  sessionlog project examples/sessions/auto-review.jsonl --at 12"
    )]
    Project {
        #[command(flatten)]
        target: SessionArgs,
        /// Fold only the first SEQ events.
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
    #[command(
        after_help = "Example:\n  sessionlog review-request examples/sessions/auto-review.jsonl --pending pending.json"
    )]
    ReviewRequest {
        #[command(flatten)]
        target: SessionArgs,
        /// The pending action: `{callId, stepId, name, arguments, parentCallId?, schema?}`.
        #[arg(long)]
        pending: PathBuf,
        /// The request size limit in bytes.
        #[arg(long, default_value_t = sessionlog_projections::DEFAULT_MAX_REQUEST_BYTES)]
        max_bytes: usize,
    },
    /// Parse a reviewer's reply `{blocks, stop}` strictly into its decision.
    #[command(after_help = "Example:\n  sessionlog review-result reply.json")]
    ReviewResult {
        /// The reply file (stdin when absent).
        file: Option<PathBuf>,
    },
    /// Copy every session between backends, then prove the copy identical.
    #[command(after_help = "Example:\n  sessionlog migrate ./sessions ./sessions.db")]
    Migrate {
        /// The source store.
        from: PathBuf,
        /// The destination store (created when missing).
        to: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Exit 0 when two stores hold identical sessions, 1 otherwise.
    #[command(after_help = "Example:\n  sessionlog diff ./sessions ./sessions.db")]
    Diff {
        /// One store.
        a: PathBuf,
        /// The other.
        b: PathBuf,
        /// Print the first difference as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the records as JSON lines (header, then events) without CRCs.
    #[command(after_help = "Example:\n  sessionlog export ./sessions.db --session s1 | jq .type")]
    Export {
        #[command(flatten)]
        target: SessionArgs,
    },
    /// List the sessions of a store from their headers.
    #[command(after_help = "Example:\n  sessionlog list examples/sessions --tree")]
    List {
        /// The store.
        store: PathBuf,
        /// Show children under their parents.
        #[arg(long)]
        tree: bool,
        /// One JSON object per session.
        #[arg(long)]
        json: bool,
    },
}

/// Parses an approval policy for clap.
pub fn parse_approval(text: &str) -> Result<ApprovalPolicy, String> {
    text.parse()
}

/// Parses a sandbox mode for clap.
pub fn parse_sandbox(text: &str) -> Result<SandboxMode, String> {
    text.parse()
}
