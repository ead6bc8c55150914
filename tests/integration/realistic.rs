//! Realistic session logs, generated from a seed.
//!
//! A generated log reads like a coding agent's session and keeps every rule of
//! docs/EVENTS.md, "Rules": turns hold steps, calls start in the open step and settle later,
//! approvals are asked inside the open turn and decided, preset switches are
//! three-event batches. Text mixes ASCII, accents, CJK, emoji, quotes,
//! backslashes, control characters and U+2028, so escaping is exercised on
//! every path. It also carries an event type this version does not know.

use serde_json::json;

use crate::support::{LogBuilder, Rng};

/// Phrases users and assistants say, chosen to need escaping.
const TEXTS: &[&str] = &[
    "please run the tests",
    "fix the \"flaky\" one in src\\lib.rs",
    "Grüße aus Zürich — naïve café",
    "日本語のテキストと emoji 🦀🔥",
    "tab\there, newline\nthere, bell \u{7}",
    "line separator \u{2028} and paragraph \u{2029}",
    "</script><b>not html</b>",
    "",
];

/// Commands a tool call might run.
const COMMANDS: &[&str] = &[
    "cargo test",
    "rg -n \"fn main\" src/",
    "cat ~/ünïcödé/😀.txt",
    "echo '{\"nested\": [1, 2.5e3, null]}'",
];

/// A valid session: `turns` turns of steps, calls, messages and approvals.
pub fn realistic_log(id: &str, seed: u64, turns: usize) -> LogBuilder {
    let mut rng = Rng::new(seed);
    let mut log = LogBuilder::new(id).cwd("/home/zoë/projekt ✓");
    log = log.event("request/header", &request_header(&mut rng));
    for turn in 0..turns {
        let turn_id = format!("turn-{turn}");
        log = log
            .event("turn/start", &json!({ "turnId": turn_id }).to_string())
            .event("message", &message(&mut rng, "user", "user"));
        for step in 0..1 + rng.below(3) {
            log = step_events(log, &mut rng, &turn_id, &format!("{turn_id}-step-{step}"));
        }
        if rng.chance(30) {
            log = preset_switch(log, &mut rng);
        }
        if rng.chance(30) {
            log = log.event(
                "x-vendor/telemetry",
                &json!({ "latencyMs": rng.below(900), "note": rng.pick(TEXTS) }).to_string(),
            );
        }
        log = log.event("turn/end", &json!({ "turnId": turn_id }).to_string());
    }
    if rng.chance(50) {
        log = log.event(
            "checkpoint",
            &json!({ "summary": rng.pick(TEXTS), "throughSeq": 2 }).to_string(),
        );
    }
    log
}

fn step_events(mut log: LogBuilder, rng: &mut Rng, turn_id: &str, step_id: &str) -> LogBuilder {
    log = log.event(
        "step/start",
        &json!({ "stepId": step_id, "turnId": turn_id }).to_string(),
    );
    for call in 0..rng.below(3) {
        let call_id = format!("{step_id}-call-{call}");
        let start = json!({
            "callId": call_id,
            "stepId": step_id,
            "name": "shell",
            "arguments": { "command": rng.pick(COMMANDS), "timeoutMs": 30_000 },
        })
        .to_string();
        if rng.chance(40) {
            let request_id = format!("{call_id}-approval");
            let asked = json!({
                "requestId": request_id,
                "turnId": turn_id,
                "tool": "shell",
                "reason": rng.pick(TEXTS),
                "callId": call_id,
            })
            .to_string();
            let outcome = rng.pick(&["allowed-once", "rejected", "cancelled", "unavailable"]);
            let decided = json!({ "requestId": request_id, "outcome": outcome }).to_string();
            log = log
                .batch(vec![("tool/start", &start), ("approval/asked", &asked)])
                .event("approval/decided", &decided);
        } else {
            log = log.event("tool/start", &start);
        }
        let status = rng.pick(&["ok", "error", "cancelled"]);
        let settle = match *status {
            "ok" => json!({ "callId": call_id, "status": "ok", "result": { "stdout": rng.pick(TEXTS), "exitCode": 0 } }),
            _ => json!({ "callId": call_id, "status": status, "error": { "name": "ToolError", "code": "E_TOOL", "message": rng.pick(TEXTS) } }),
        }
        .to_string();
        log = log.event("tool/settle", &settle);
    }
    if rng.chance(60) {
        log = log.event("message", &message(rng, "assistant", "assistant"));
    }
    log.event("step/end", &json!({ "stepId": step_id }).to_string())
}

fn preset_switch(log: LogBuilder, rng: &mut Rng) -> LogBuilder {
    let (preset, sandbox, policy) = *rng.pick(&[
        ("read-only", "read-only", "ask"),
        ("workspace-write", "workspace-write", "ask"),
        ("full-access", "danger-full-access", "never"),
        ("auto", "danger-full-access", "ask"),
    ]);
    let sandbox = json!({ "mode": sandbox }).to_string();
    let policy = json!({ "policy": policy }).to_string();
    let preset = json!({ "preset": preset }).to_string();
    log.batch(vec![
        ("sandbox/mode", &sandbox),
        ("approval/policy", &policy),
        ("permission/preset", &preset),
    ])
}

fn request_header(rng: &mut Rng) -> String {
    json!({
        "provider": "anthropic",
        "model": rng.pick(&["claude-sonnet", "claude-opus"]),
        "approvalPolicy": rng.pick(&["ask", "never"]),
        "sandboxMode": rng.pick(&["read-only", "workspace-write", "danger-full-access"]),
        "tools": [{
            "name": "shell",
            "description": "Runs a shell command — quoting \"matters\".",
            "parameters": { "type": "object", "properties": { "command": { "type": "string" } } },
        }],
    })
    .to_string()
}

fn message(rng: &mut Rng, role: &str, kind: &str) -> String {
    let mut content = vec![json!({ "type": "text", "text": rng.pick(TEXTS) })];
    if rng.chance(20) {
        content.push(json!({ "type": "image", "mediaType": "image/png", "name": "screen shot.png", "size": 5, "data": "iVBORw==" }));
    }
    json!({ "role": role, "source": { "kind": kind }, "content": content }).to_string()
}
