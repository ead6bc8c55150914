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

use sessionlog_projections::{
    build_review_request, parse_pending_action, Defaults, DEFAULT_MAX_REQUEST_BYTES,
};
use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{now_ms, Durability, NewEvent, Store, WriterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    writer.append(NewEvent::new("turn/start", r#"{"turnId":"t1"}"#), None)?;
    writer.append_batch(
        vec![
            NewEvent::new("step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            NewEvent::new(
                "request/header",
                r#"{"provider":"anthropic","model":"claude-sonnet-4-5","approvalPolicy":"ask",
                    "sandboxMode":"workspace-write","tools":[{"name":"shell",
                    "description":"Run a command","parameters":{"type":"object"}}]}"#,
            ),
        ],
        None,
    )?;
    // An event that breaks a rule is refused and nothing is written.
    let refused = writer.append(NewEvent::new("step/end", r#"{"stepId":"s9"}"#), None);
    assert!(refused.is_err());

    // Delegate: a child from the parent's snapshot; nothing is written to the parent.
    let child = SessionId::parse("session-1-tests")?;
    store.fork(&id, &child, Some("Run the tests"), &Defaults::default())?;

    // Before a tool call runs under Auto review: the reviewer's request,
    // built from the full snapshot, deterministic, failing closed.
    let snapshot = store.snapshot(&id)?;
    let pending = parse_pending_action(
        br#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"cargo test"}}"#,
    )?;
    let request = build_review_request(
        &snapshot.header,
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
