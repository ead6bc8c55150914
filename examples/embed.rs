//! Embedding sessionlog in an agent runtime: create a session, append events
//! durably, fork a child, and build the Auto reviewer's request before a
//! tool call runs. README.md shows the part between the `readme` markers;
//! a test keeps the two identical.
//!
//! ```text
//! cargo run -p sessionlog --example embed
//! ```
// An example program of its own, not the command line: it prints its
// own text, and `tools/clippy.toml`'s printing rule is for `sessionlog`.
#![allow(clippy::disallowed_macros)]

use serde_json::json;
use sessionlog_projections::{
    build_review_request_stored, Defaults, PendingAction, DEFAULT_MAX_REQUEST_BYTES,
};
use sessionlog_schema::{
    ApprovalPolicy, RequestHeader, SandboxMode, SessionHeader, SessionId, StepEnd, StepStart,
    ToolDefinition, ToolStart, TurnStart,
};
use sessionlog_store::{now_ms, Durability, Store, WriterOptions};

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let folder = std::env::temp_dir().join(format!("sessionlog-embed-{}", std::process::id()));
    // readme: start
    // A folder of <id>.jsonl logs; a path ending in .db or .sqlite is a SQLite store.
    let store = Store::create(&folder)?;
    let id = SessionId::parse("session-1")?;
    let header = SessionHeader::root(id.clone(), now_ms(), "/work/project".into());
    store.create_session(&header, &[], Durability::Fsync)?;

    // The one writer of the session (a second one gets `Locked`). Every
    // append is checked against the rules first and is durable on return.
    let mut writer = store.open_writer(&id, WriterOptions::default())?;
    writer.append(TurnStart::new("t1").into(), None)?;
    let shell = ToolDefinition::new("shell", "Run a command", &json!({"type": "object"}));
    writer.append_batch(
        vec![
            StepStart::new("s1", "t1").into(),
            RequestHeader::new(
                "anthropic",
                "claude-sonnet-4-5",
                ApprovalPolicy::Ask,
                SandboxMode::WorkspaceWrite,
                vec![shell],
            )
            .into(),
        ],
        None,
    )?;
    // An event that breaks a rule is refused and nothing is written.
    let refused = writer.append(StepEnd::new("s9").into(), None);
    assert!(refused.is_err());

    // Delegate: a child from the parent's snapshot; nothing is written to the parent.
    let child = SessionId::parse("session-1-tests")?;
    store.fork(&id, &child, Some("Run the tests"), &Defaults::default())?;

    // Before a tool call runs under Auto review: the reviewer's request,
    // built from the full snapshot (its chain from the header as stored),
    // deterministic, failing closed.
    let snapshot = store.snapshot(&id)?;
    let call = ToolStart::new("c1", "s1", "shell", &json!({"command": "cargo test"}));
    let pending = PendingAction::from_tool_start(&call);
    let request = build_review_request_stored(
        &snapshot.header,
        &snapshot.header_body,
        &snapshot.events,
        &pending,
        DEFAULT_MAX_REQUEST_BYTES,
    )?;
    // readme: end
    println!("{request}");
    drop(writer);
    std::fs::remove_dir_all(&folder)?;
    Ok(())
}
