//! Embedding sessionlog in an async runtime (tokio): create a session from
//! typed events, append through the session's writer handle, follow it as
//! a `Stream`, switch it to Auto, and build the Auto reviewer's request
//! from the snapshot the writer holds before a tool call runs. No JSON is
//! written by hand: every event's `data` is a typed value.
//!
//! ```text
//! cargo run -p sessionlog --example embed_async
//! ```
// An example program of its own, not the command line: it prints its
// own text, and `tools/clippy.toml`'s printing rule is for `sessionlog`.
#![allow(clippy::disallowed_macros)]

use std::error::Error;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use sessionlog_projections::{Defaults, PendingAction, DEFAULT_MAX_REQUEST_BYTES};
use sessionlog_schema::{
    ApprovalPolicy, Message, Preset, RequestHeader, SandboxMode, SessionHeader, SessionId,
    StepStart, ToolDefinition, ToolSettle, ToolStart, TurnStart,
};
use sessionlog_store::{now_ms, AsyncStore, Durability, NewEvent, Store};

#[tokio::main]
pub async fn main() -> Result<(), Box<dyn Error>> {
    let folder =
        std::env::temp_dir().join(format!("sessionlog-embed-async-{}", std::process::id()));
    let result = run(&folder).await;
    std::fs::remove_dir_all(&folder)?;
    result
}

async fn run(folder: &std::path::Path) -> Result<(), Box<dyn Error>> {
    // A folder of <id>.jsonl logs; a path ending in .db or .sqlite is a SQLite store.
    let store = AsyncStore::new(Store::create(folder)?);
    let id = SessionId::parse("session-1")?;
    let header = SessionHeader::root(id.clone(), now_ms(), "/work/project".into());
    let shell = ToolDefinition::new(
        "shell",
        "Run a command",
        &json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    );
    // Created atomically with its first events, checked against every rule.
    store
        .create(
            header,
            vec![
                NewEvent::of(&TurnStart::new("t1")),
                NewEvent::of(&Message::user("Run the tests")),
                NewEvent::of(&StepStart::new("s1", "t1")),
                NewEvent::of(&RequestHeader::new(
                    "anthropic",
                    "claude-sonnet-4-5",
                    ApprovalPolicy::Ask,
                    SandboxMode::WorkspaceWrite,
                    vec![shell],
                )),
            ],
            Durability::Fsync,
        )
        .await?;

    // The session's one writer (it holds the session's lock until closed).
    // Every clone of the handle shares it, and appends that wait together
    // share one fsync.
    let writer = store.writer(id.clone()).await?;

    // Another task watches the session: the events already stored, then
    // each new one once it is durable.
    let mut followed = writer.follow(1);
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(record) = followed.next().await {
            let record = record?;
            seen.push(format!("{} {}", record.seq(), record.event_type()));
            if record.event_type() == "tool/settle" {
                break;
            }
        }
        Ok::<_, sessionlog_store::StoreError>(seen)
    });

    // The user picks Auto: the sandbox, approval and preset events as one batch.
    writer
        .switch_preset(
            Preset::Auto,
            Some(ApprovalPolicy::Ask),
            Defaults::default(),
            None,
        )
        .await?;

    // Before the call runs: the reviewer's request, from the snapshot the
    // writer holds (the log is not read again), and the seq it is about.
    let call = ToolStart::new("c1", "s1", "shell", &json!({"command": "cargo test"}));
    let (request, at) = writer
        .review_request(
            PendingAction::from_tool_start(&call),
            DEFAULT_MAX_REQUEST_BYTES,
        )
        .await?;
    println!(
        "the reviewer's request ({} bytes) is about the session through seq {}",
        request.len(),
        at - 1
    );

    // Allowed: the call starts (refused if anything landed since the
    // request was built), runs, and settles.
    writer.append(call.into(), Some(at)).await?;
    let settled = writer
        .append(ToolSettle::ok("c1", &json!({"exitCode": 0})).into(), None)
        .await?;
    println!("tool/settle acknowledged at seq {}", settled.get());

    let seen = tokio::time::timeout(Duration::from_secs(10), watcher).await???;
    for line in &seen {
        println!("followed: {line}");
    }
    assert_eq!(
        seen.len() as u64,
        settled.get(),
        "the follower saw every event"
    );
    writer.close().await;
    Ok(())
}
