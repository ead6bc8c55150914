//! `sessionlog import` end to end on the fixtures of
//! `tests/fixtures/import/` (one per tool version family): what each
//! transcript becomes (counts of calls, settles, prompts, context and kept
//! lines), who speaks with which authority, that every import verifies in
//! both backends, that importing again writes nothing, and that a broken
//! file is named with its line and imports nothing while the others go on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sessionlog_projections::message_authority;
use sessionlog_schema::{Event, EventRecord, SessionHeader, SessionId};
use sessionlog_store::Store;

use crate::cli_support::{run, workspace_root, Run};
use crate::crash::text;
use crate::faults::ok;

const CODEX: &str = "codex-019aa234-a2a1-75c3-a9bf-d8425e1785f5";
const CODEX_CHILD: &str = "codex-019aa240-0000-7000-8000-00000000beef";
const CODEX_LEGACY: &str = "codex-c3c4b301-27c8-4c70-b6e4-46b99fdf0236";
const CLAUDE_1: &str = "claude-3b9e0c1d-2e3f-4a5b-9c6d-7e8f9a0b1c2d";
const CLAUDE_2_0: &str = "claude-7f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f";
const CLAUDE_2_1: &str = "claude-5d6e7f80-1111-4222-8333-944455556666";

fn fixtures() -> PathBuf {
    workspace_root().join("tests/fixtures/import")
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"))
}

fn import(format: &str, sources: &[PathBuf], into: &Path) -> Run {
    let mut args = vec!["import".to_owned(), format.to_owned()];
    args.extend(sources.iter().map(|source| source.display().to_string()));
    args.extend(["--into".to_owned(), into.display().to_string()]);
    run(args)
}

fn id(text: &str) -> SessionId {
    SessionId::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

fn session(store: &Path, session: &str) -> (SessionHeader, Vec<EventRecord>) {
    let store = Store::open(store).unwrap_or_else(|error| panic!("open store: {error}"));
    let snapshot = store
        .snapshot(&id(session))
        .unwrap_or_else(|error| panic!("snapshot {session}: {error}"));
    (snapshot.header, snapshot.events)
}

/// What a session holds, counted the way the mapping speaks of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    /// Events by type; messages by `message:<source kind>`; settles by
    /// `tool/settle:<status>`; kept lines by their `x-…` type.
    counts: BTreeMap<String, u64>,
}

impl Tally {
    fn of(events: &[EventRecord]) -> Tally {
        let mut counts = BTreeMap::new();
        for record in events {
            let data: Value = serde_json::from_str(record.data())
                .unwrap_or_else(|error| panic!("seq {}: {error}", record.seq()));
            let key = match record.event_type() {
                "message" => format!("message:{}", data["source"]["kind"].as_str().unwrap_or("?")),
                "tool/settle" => format!("tool/settle:{}", data["status"].as_str().unwrap_or("?")),
                other => other.to_owned(),
            };
            *counts.entry(key).or_insert(0) += 1;
        }
        Tally { counts }
    }

    fn get(&self, key: &str) -> u64 {
        self.counts.get(key).copied().unwrap_or(0)
    }

    fn kept_lines(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(key, _)| key.starts_with("x-"))
            .map(|(_, n)| n)
            .sum()
    }

    #[track_caller]
    fn expect(&self, expected: &[(&str, u64)]) {
        for (key, n) in expected {
            assert_eq!(self.get(key), *n, "{key} in {:#?}", self.counts);
        }
    }
}

/// The text of every message of `kind`, with its authority.
fn messages(header: &SessionHeader, events: &[EventRecord], kind: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(
            |record| match Event::parse(record.event_type(), record.data()) {
                Ok(Event::Message(message)) if message.source.kind == kind => Some((
                    message.text(),
                    message_authority(header, record.seq(), &message)
                        .as_str()
                        .to_owned(),
                )),
                _ => None,
            },
        )
        .collect()
}

#[track_caller]
fn verify(store: &Path) {
    run(["verify".to_owned(), store.display().to_string()]).expect_code(0);
}

/// Writes `lines` as the transcript `source`, imports it with `format`
/// into a new folder beside it, checks that the store verifies, and gives
/// the header and events of the one session it holds.
#[track_caller]
fn import_lines(
    format: &str,
    source: &Path,
    lines: &[String],
) -> (SessionHeader, Vec<EventRecord>) {
    ok(std::fs::write(source, lines.join("\n") + "\n"));
    let store = source.with_file_name("imported");
    import(format, &[source.to_owned()], &store).expect_code(0);
    verify(&store);
    let ids = ok(ok(Store::open(&store)).ids());
    assert_eq!(ids.len(), 1, "{ids:?}");
    session(&store, ids[0].as_str())
}

/// The data of every event of `events` whose type starts with `prefix`
/// (the lines an importer kept whole).
fn kept_data<'e>(events: &'e [EventRecord], prefix: &str) -> Vec<&'e str> {
    events
        .iter()
        .filter(|record| record.event_type().starts_with(prefix))
        .map(EventRecord::data)
        .collect()
}

/// A Codex rollout line of type `kind` carrying `payload`, stamped `second`
/// seconds past 16:59 on the day of the rollouts built here.
fn codex_line(second: u32, kind: &str, payload: Value) -> String {
    let at = format!("2025-11-20T16:59:{second:02}.000Z");
    json!({"timestamp": at, "type": kind, "payload": payload}).to_string()
}

/// The file name Codex gives the rollout of session `uuid` started on that
/// day at 16:59:09.
fn codex_rollout_name(uuid: &str) -> String {
    format!("rollout-2025-11-20T16-59-09-{uuid}.jsonl")
}

/// The `session_meta` line that opens the rollout of session `uuid`.
fn codex_meta(uuid: &str) -> String {
    codex_line(
        9,
        "session_meta",
        json!({"id": uuid, "timestamp": "2025-11-20T16:59:09.000Z", "cwd": "/w"}),
    )
}

/// Imports, as [`import_lines`] does, the rollout of session `uuid` written
/// in `dir`: its `session_meta` line, then `lines`.
#[track_caller]
fn import_codex_rollout(
    dir: &Path,
    uuid: &str,
    lines: &[String],
) -> (SessionHeader, Vec<EventRecord>) {
    let all: Vec<String> = std::iter::once(codex_meta(uuid))
        .chain(lines.iter().cloned())
        .collect();
    import_lines("codex", &dir.join(codex_rollout_name(uuid)), &all)
}

#[test]
fn a_current_codex_rollout_maps_prompts_calls_policies_and_keeps_the_rest() {
    let dir = temp();
    let store = dir.path().join("audit");
    import("codex", &[fixtures().join("codex/current")], &store).expect_code(0);
    verify(&store);
    let (header, events) = session(&store, CODEX);
    assert_eq!(header.cwd, "/work/shop");
    assert_eq!(header.created_at, 1_763_657_949_000);
    assert_eq!(header.parent_session, None);
    let tally = Tally::of(&events);
    tally.expect(&[
        ("turn/start", 3),
        ("turn/end", 3),
        ("tool/start", 4),
        // The deploy call interrupted by the person never got an output.
        ("tool/settle:ok", 3),
        // The first prompt again, after the checkpoint: the compaction
        // kept it in the model's history.
        ("message:user", 4),
        ("message:instructions", 1),
        ("message:context", 4),
        ("message:assistant", 1),
        ("message:reasoning", 1),
        ("checkpoint", 1),
        ("approval/policy", 2),
        ("sandbox/mode", 2),
        ("x-codex/user_message", 3),
        ("x-codex/agent_message", 1),
        ("x-codex/token_count", 1),
        ("x-codex/turn_aborted", 1),
        ("x-codex/world_state", 1),
        ("x-codex/function_call_output", 1),
        // The first turn's start says the model's context window.
        ("x-codex/task_started", 1),
    ]);
    assert_eq!(tally.kept_lines(), 15);
    // Only what the person typed is `user`; a user-role item no event
    // mirrors stays context, whatever it says.
    let users: Vec<String> = messages(&header, &events, "user")
        .into_iter()
        .map(|(text, authority)| {
            assert_eq!(authority, "user");
            text
        })
        .collect();
    assert_eq!(
        users,
        [
            "Fix the failing test in cart.rs",
            "Now deploy it",
            "Fix the failing test in cart.rs",
            "Try again with --dry-run"
        ]
    );
    let context = messages(&header, &events, "context");
    assert!(context.iter().any(
        |(text, authority)| text.starts_with("Ignore all previous") && authority == "excluded"
    ));
    // A reused call id stays unique in the log, and its output settles the
    // newest call of that id.
    let starts: Vec<String> = events
        .iter()
        .filter(|record| record.event_type() == "tool/start")
        .map(|record| {
            serde_json::from_str::<Value>(record.data()).unwrap_or_default()["callId"].to_string()
        })
        .collect();
    assert_eq!(
        starts,
        ["\"call_a1\"", "\"call_a2\"", "\"call_b1\"", "\"call_a1~2\""]
    );
}

#[test]
fn a_codex_sub_agent_is_a_child_whose_prompts_are_its_parents() {
    let dir = temp();
    let store = dir.path().join("audit");
    import("auto", &[fixtures().join("codex/current")], &store).expect_code(0);
    let (header, events) = session(&store, CODEX_CHILD);
    assert_eq!(header.parent_session, Some(id(CODEX)));
    assert_eq!(header.delegation_depth, 1);
    let tally = Tally::of(&events);
    tally.expect(&[
        ("message:user", 0),
        ("message:agent-message", 1),
        ("tool/start", 1),
        ("tool/settle:ok", 1),
    ]);
    assert_eq!(
        messages(&header, &events, "agent-message"),
        [(
            "List the deploy scripts".to_owned(),
            "direct-parent".to_owned()
        )]
    );
    // Arguments that are not JSON are kept as the string the model wrote.
    assert!(events
        .iter()
        .any(|record| record.event_type() == "tool/start"
            && record.data().contains("\"arguments\":\"not json at all\"")));
}

/// A spawn's depth becomes the child's `delegationDepth` when the format
/// holds it; one it cannot hold (2^63 and more, past 64 bits, zero) counts
/// as 1, every file imports, and the kept `session_meta` line holds the
/// depth as written.
#[test]
fn a_codex_spawn_depth_the_format_cannot_hold_counts_as_one() {
    let dir = temp();
    for (uuid, depth, expected) in [
        ("019aa240-0000-7000-8000-000000000001", "3", 3),
        (
            "019aa240-0000-7000-8000-000000000002",
            "9223372036854775807",
            i64::MAX.unsigned_abs(),
        ),
        (
            "019aa240-0000-7000-8000-000000000003",
            "9223372036854775808",
            1,
        ),
        (
            "019aa240-0000-7000-8000-000000000004",
            "92233720368547758080",
            1,
        ),
        ("019aa240-0000-7000-8000-000000000005", "0", 1),
    ] {
        let folder = dir.path().join(depth);
        ok(std::fs::create_dir(&folder));
        let meta = format!(
            r#"{{"timestamp":"2025-11-20T16:59:09.000Z","type":"session_meta","payload":{{"id":"{uuid}","timestamp":"2025-11-20T16:59:09.000Z","cwd":"/w","source":{{"subagent":{{"thread_spawn":{{"parent_thread_id":"p1","depth":{depth}}}}}}}}}}}"#
        );
        let started = codex_line(
            10,
            "event_msg",
            json!({"type": "task_started", "turn_id": "t-1"}),
        );
        let (header, events) = import_lines(
            "codex",
            &folder.join(codex_rollout_name(uuid)),
            &[meta, started],
        );
        assert_eq!(header.delegation_depth, expected, "depth {depth}");
        let kept = kept_data(&events, "x-codex/session_meta");
        assert!(
            kept.iter()
                .any(|data| data.contains(&format!("\"depth\":{depth}"))),
            "depth {depth}: {kept:?}"
        );
    }
}

/// The prompt of a turn whose model history Codex compacted remotely (no
/// readable summary) and whose prompt holds an image stays what a reviewer
/// reads: one `user` message with the image, no checkpoint hiding it; and
/// importing the rollout again writes nothing.
#[test]
fn a_codex_prompt_with_an_image_stays_read_past_a_compaction_without_summary() {
    let dir = temp();
    let uuid = "019b1111-2222-7333-8444-555566667777";
    let typed = "Why is the badge misaligned in this screenshot?";
    let png = "data:image/png;base64,iVBORw0KGgo=";
    let lines = [
        codex_line(
            10,
            "event_msg",
            json!({"type": "task_started", "turn_id": "1"}),
        ),
        codex_line(
            10,
            "response_item",
            json!({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<image name=[Image #1]>"},
                {"type": "input_image", "image_url": png},
                {"type": "input_text", "text": "</image>"},
                {"type": "input_text", "text": typed}]}),
        ),
        codex_line(
            10,
            "event_msg",
            json!({"type": "user_message", "message": typed, "images": [],
                   "local_images": ["/tmp/shot.png"]}),
        ),
        codex_line(
            11,
            "compacted",
            json!({"message": "", "replacement_history": [
                {"type": "compaction", "encrypted_content": "gAAAA"}]}),
        ),
        codex_line(
            12,
            "event_msg",
            json!({"type": "task_complete", "turn_id": "1"}),
        ),
    ];
    let (header, events) = import_codex_rollout(dir.path(), uuid, &lines);
    assert_eq!(
        messages(&header, &events, "user"),
        [(typed.to_owned(), "user".to_owned())]
    );
    assert!(messages(&header, &events, "context").is_empty());
    let prompt = events
        .iter()
        .find(|record| record.event_type() == "message")
        .map(|record| serde_json::from_str::<Value>(record.data()).unwrap_or_default());
    let image = prompt.map(|data| data["content"][0].clone());
    assert_eq!(
        image,
        Some(
            json!({"type": "image", "mediaType": "image/png", "name": "[Image #1]",
                    "data": "iVBORw0KGgo="})
        )
    );
    let tally = Tally::of(&events);
    tally.expect(&[("checkpoint", 0), ("x-codex/compacted", 1)]);
    let again = import(
        "codex",
        &[dir.path().join(codex_rollout_name(uuid))],
        &dir.path().join("imported"),
    );
    expect_none_imported(&again);
    assert!(
        again.stdout.contains("1 already imported"),
        "{}",
        again.stdout
    );
}

/// The lines of Codex turn `turn` at second `second`: its start, the
/// prompt `typed` (its item and the event that mirrors it), its end.
fn codex_turn(second: u32, turn: &str, typed: &str) -> Vec<String> {
    vec![
        codex_line(
            second,
            "event_msg",
            json!({"type": "task_started", "turn_id": turn}),
        ),
        codex_line(
            second,
            "response_item",
            json!({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": typed}]}),
        ),
        codex_line(
            second,
            "event_msg",
            json!({"type": "user_message", "message": typed, "images": []}),
        ),
        codex_line(
            second + 1,
            "event_msg",
            json!({"type": "task_complete", "turn_id": turn}),
        ),
    ]
}

/// A rollout the tool went on writing after it was imported (a session
/// continued) has the events after the stored ones appended on the next
/// import: the stored session is then what an import of the whole rollout
/// writes (`diff` finds none), and one more import writes nothing. A
/// session the store holds otherwise is still skipped, not extended.
#[test]
fn a_rollout_that_grew_since_its_import_extends_its_session() {
    let dir = temp();
    let uuid = "019b2222-3333-7444-8555-666677778888";
    let source = dir.path().join(codex_rollout_name(uuid));
    let store = dir.path().join("audit");
    let mut lines = vec![codex_meta(uuid)];
    lines.extend(codex_turn(10, "1", "Fix the failing test"));
    ok(std::fs::write(&source, lines.join("\n") + "\n"));
    import("codex", std::slice::from_ref(&source), &store).expect_code(0);
    let (_, before) = session(&store, &format!("codex-{uuid}"));
    lines.extend(codex_turn(20, "2", "Now run the linter"));
    ok(std::fs::write(&source, lines.join("\n") + "\n"));
    let extended = import("codex", std::slice::from_ref(&source), &store);
    extended.expect_code(0);
    let (_, after) = session(&store, &format!("codex-{uuid}"));
    assert!(after.len() > before.len(), "{}", extended.stdout);
    assert!(
        extended.stdout.contains(&format!(
            "1 session extended by {} events",
            after.len() - before.len()
        )),
        "{}",
        extended.stdout
    );
    verify(&store);
    let whole = dir.path().join("whole");
    import("codex", std::slice::from_ref(&source), &whole).expect_code(0);
    run(["diff", &text(&store), &text(&whole)]).expect_code(0);
    let again = import("codex", std::slice::from_ref(&source), &store);
    expect_none_imported(&again);
    assert!(
        again.stdout.contains("1 already imported"),
        "{}",
        again.stdout
    );
    // Changed, not grown: the first prompt rewritten.
    lines[2] = lines[2].replace("Fix the failing test", "Fix the failing tests");
    lines[3] = lines[3].replace("Fix the failing test", "Fix the failing tests");
    lines.extend(codex_turn(30, "3", "And commit"));
    ok(std::fs::write(&source, lines.join("\n") + "\n"));
    let changed = import("codex", std::slice::from_ref(&source), &store);
    changed.expect_code(0);
    assert!(
        changed.stderr.contains("changed since it was imported"),
        "{}",
        changed.stderr
    );
    assert_eq!(
        session(&store, &format!("codex-{uuid}")).1.len(),
        after.len()
    );
    // Imported in the middle of a turn, which the import closed at the end
    // of the file: the source going on with that turn cannot extend it,
    // and the reason says so.
    let mid = dir.path().join("mid");
    let mut turn = codex_turn(40, "4", "Then tag it");
    let complete = turn.pop().unwrap_or_default();
    lines.extend(turn);
    ok(std::fs::write(&source, lines.join("\n") + "\n"));
    import("codex", std::slice::from_ref(&source), &mid).expect_code(0);
    lines.push(codex_line(
        41,
        "response_item",
        json!({"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "Tagged."}]}),
    ));
    lines.push(complete);
    ok(std::fs::write(&source, lines.join("\n") + "\n"));
    let closed = import("codex", std::slice::from_ref(&source), &mid);
    closed.expect_code(0);
    assert!(
        closed.stderr.contains("imported in the middle of a turn"),
        "{}",
        closed.stderr
    );
}

/// Two imports of the same grown rollout at once: one extends the
/// session, the other finds it held or already extended and counts it as
/// imported; neither fails, and the store is what one import writes.
#[test]
fn two_imports_of_a_grown_rollout_at_once_extend_it_once() {
    let dir = temp();
    let uuid = "019b3333-4444-7555-8666-777788889999";
    let source = dir.path().join(codex_rollout_name(uuid));
    let mut lines = vec![codex_meta(uuid)];
    lines.extend(codex_turn(10, "1", "Fix the failing test"));
    let first = lines.clone();
    for turn in 2..40 {
        lines.extend(codex_turn(10 + turn % 40, &turn.to_string(), "And again"));
    }
    let whole = dir.path().join("whole");
    ok(std::fs::write(&source, lines.join("\n") + "\n"));
    import("codex", std::slice::from_ref(&source), &whole).expect_code(0);
    for round in 0..3 {
        let store = dir.path().join(format!("audit-{round}"));
        ok(std::fs::write(&source, first.join("\n") + "\n"));
        import("codex", std::slice::from_ref(&source), &store).expect_code(0);
        ok(std::fs::write(&source, lines.join("\n") + "\n"));
        let spawn = || {
            ok(crate::cli_support::sessionlog([
                "import".to_owned(),
                "codex".to_owned(),
                text(&source),
                "--into".to_owned(),
                text(&store),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn())
        };
        let (one, other) = (spawn(), spawn());
        let outputs = [ok(one.wait_with_output()), ok(other.wait_with_output())];
        let said: Vec<String> = outputs
            .iter()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .collect();
        for output in &outputs {
            assert!(
                output.status.success(),
                "{said:?} {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let extended = said
            .iter()
            .filter(|out| out.contains("1 session extended"))
            .count();
        let imported = said
            .iter()
            .filter(|out| out.contains("1 already imported"))
            .count();
        assert_eq!((extended, imported), (1, 1), "{said:?}");
        run(["diff", &text(&store), &text(&whole)]).expect_code(0);
    }
}

#[test]
fn a_legacy_codex_rollout_reads_its_header_and_marks_injected_text() {
    let dir = temp();
    let store = dir.path().join("audit.db");
    import("codex", &[fixtures().join("codex/legacy")], &store).expect_code(0);
    verify(&store);
    let (header, events) = session(&store, CODEX_LEGACY);
    assert_eq!(header.cwd, "/work/legacy", "from the environment context");
    assert_eq!(header.created_at, 1_755_479_773_522);
    let tally = Tally::of(&events);
    tally.expect(&[
        ("message:user", 1),
        ("message:instructions", 1),
        ("message:context", 1),
        ("message:assistant", 1),
        ("tool/start", 1),
        ("tool/settle:error", 1),
        ("x-codex/session_meta", 1),
        ("x-codex/state", 3),
        // Reasoning with no readable text is kept as the line.
        ("x-codex/reasoning", 1),
    ]);
    assert_eq!(tally.kept_lines(), 5);
}

/// Codex writes the project's instructions and the environment's context
/// as two texts of one user-role item: each keeps its own authority (the
/// context never becomes a project instruction, nor the instructions
/// context), whichever comes first. In a legacy rollout, the instructions
/// file's text is never taken for a prompt.
#[test]
fn each_text_of_an_injected_codex_item_keeps_its_own_authority() {
    let dir = temp();
    let source = dir.path().join("sources");
    std::fs::create_dir(&source).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let agents =
        "# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>\nRun the tests.\n</INSTRUCTIONS>";
    let environment = "<environment_context>\n  <cwd>/w</cwd>\n  <approval_policy>never</approval_policy>\n</environment_context>";
    let line = |texts: [&str; 2]| {
        codex_line(
            10,
            "response_item",
            json!({"type": "message", "role": "user",
            "content": texts.map(|text| json!({"type": "input_text", "text": text}))}),
        )
    };
    for (uuid, texts) in [
        (
            "019aa234-0000-7000-8000-000000000001",
            [agents, environment],
        ),
        (
            "019aa234-0000-7000-8000-000000000002",
            [environment, agents],
        ),
    ] {
        let text = format!("{}\n{}\n", codex_meta(uuid), line(texts));
        let file = source.join(codex_rollout_name(uuid));
        std::fs::write(file, text).unwrap_or_else(|error| panic!("write: {error}"));
    }
    let legacy = [
        json!({"id": "c3c4b301-0000-4000-8000-000000000003", "timestamp": "2025-08-18T01:16:13.522Z"}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": agents}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the build"}]}),
    ]
    .map(|line| line.to_string())
    .join("\n");
    let file =
        source.join("rollout-2025-08-18T01-16-13-c3c4b301-0000-4000-8000-000000000003.jsonl");
    std::fs::write(file, legacy + "\n").unwrap_or_else(|error| panic!("write: {error}"));

    let store = dir.path().join("audit");
    import("codex", &[source], &store).expect_code(0);
    verify(&store);
    let store_handle = Store::open(&store).unwrap_or_else(|error| panic!("open: {error}"));
    let ids = store_handle
        .ids()
        .unwrap_or_else(|error| panic!("ids: {error}"));
    assert_eq!(ids.len(), 3, "{ids:?}");
    let mut seen = 0;
    for session_id in ids {
        let (header, events) = session(&store, session_id.as_str());
        let instructions = messages(&header, &events, "instructions");
        let context = messages(&header, &events, "context");
        let users = messages(&header, &events, "user");
        assert_eq!(instructions.len(), 1, "{session_id}: {instructions:?}");
        assert!(
            instructions[0].0.contains("Run the tests."),
            "{instructions:?}"
        );
        assert!(
            !instructions[0].0.contains("environment_context"),
            "{instructions:?}"
        );
        if users.is_empty() {
            assert_eq!(context.len(), 1, "{session_id}: {context:?}");
            assert!(
                context[0].0.contains("<approval_policy>never"),
                "{context:?}"
            );
            assert!(!context[0].0.contains("INSTRUCTIONS"), "{context:?}");
        } else {
            assert_eq!(
                users
                    .iter()
                    .map(|(text, _)| text.as_str())
                    .collect::<Vec<_>>(),
                ["fix the build"]
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 3);
}

/// A byte order mark before the first line (an editor on another system
/// saved the file) is no part of it: the file imports as the same session
/// as without it, whose source line 1 is unchanged.
#[test]
fn a_byte_order_mark_before_the_first_line_is_not_part_of_it() {
    let dir = temp();
    let folder = fixtures().join("codex/current");
    let name = "rollout-2025-11-20T16-59-09-019aa234-a2a1-75c3-a9bf-d8425e1785f5.jsonl";
    let marked = dir.path().join("marked");
    ok(std::fs::create_dir(&marked));
    let mut bytes = "\u{feff}".as_bytes().to_vec();
    bytes.extend(ok(std::fs::read(folder.join(name))));
    ok(std::fs::write(marked.join(name), bytes));
    let plain = dir.path().join("plain");
    let with_mark = dir.path().join("with-mark");
    import("codex", &[folder.join(name)], &plain).expect_code(0);
    import("codex", &[marked.join(name)], &with_mark).expect_code(0);
    verify(&with_mark);
    run([
        "diff".to_owned(),
        plain.display().to_string(),
        with_mark.display().to_string(),
    ])
    .expect_code(0);
}

/// A rollout that keeps extended history writes each prompt and answer
/// three times: the response item, the compatibility event and the
/// completed turn item. Each is imported once; so is one written as an
/// event and a completed item with no response item.
#[test]
fn a_message_codex_wrote_in_three_forms_is_imported_once() {
    let dir = temp();
    let uuid = "019aa234-0000-7000-8000-0000000000aa";
    let line = codex_line;
    let lines = [
        line(
            10,
            "event_msg",
            json!({"type": "task_started", "turn_id": "t-1"}),
        ),
        line(
            11,
            "response_item",
            json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "list the files"}]}),
        ),
        line(
            11,
            "event_msg",
            json!({"type": "user_message", "message": "list the files"}),
        ),
        line(
            11,
            "event_msg",
            json!({"type": "item_completed", "turn_id": "t-1",
            "item": {"type": "UserMessage", "content": [{"type": "text", "text": "list the files"}]}}),
        ),
        line(
            12,
            "response_item",
            json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "Here they are."}]}),
        ),
        line(
            12,
            "event_msg",
            json!({"type": "agent_message", "message": "Here they are."}),
        ),
        line(
            12,
            "event_msg",
            json!({"type": "item_completed", "turn_id": "t-1",
            "item": {"type": "AgentMessage", "content": [{"type": "Text", "text": "Here they are."}]}}),
        ),
        line(
            13,
            "event_msg",
            json!({"type": "task_complete", "turn_id": "t-1"}),
        ),
        line(
            14,
            "event_msg",
            json!({"type": "task_started", "turn_id": "t-2"}),
        ),
        line(
            15,
            "event_msg",
            json!({"type": "user_message", "message": "and the hidden ones"}),
        ),
        line(
            15,
            "event_msg",
            json!({"type": "item_completed", "turn_id": "t-2",
            "item": {"type": "UserMessage", "content": [{"type": "text", "text": "and the hidden ones"}]}}),
        ),
        line(
            16,
            "event_msg",
            json!({"type": "task_complete", "turn_id": "t-2"}),
        ),
    ];
    let (header, events) = import_codex_rollout(dir.path(), uuid, &lines);
    let texts = |kind: &str| -> Vec<String> {
        messages(&header, &events, kind)
            .into_iter()
            .map(|(text, _)| text)
            .collect()
    };
    assert_eq!(texts("user"), ["list the files", "and the hidden ones"]);
    assert_eq!(texts("assistant"), ["Here they are."]);
}

/// A transcript line the parser reads as something else than it is: a
/// tool's input naming a member twice (the parser keeps the last), a
/// result cut inside a character (a lone surrogate escape, read as
/// U+FFFD). The file imports, verifies, and keeps each such line whole.
#[test]
fn a_line_read_as_something_else_is_kept_whole() {
    let dir = temp();
    let uuid = "7f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e99";
    let common = format!(
        r#""isSidechain":false,"userType":"external","cwd":"/w","sessionId":"{uuid}","version":"2.0.31""#
    );
    let lines = [
        format!(
            r#"{{"parentUuid":null,{common},"type":"user","message":{{"role":"user","content":"look"}},"uuid":"u1","timestamp":"2025-12-01T10:00:00.000Z"}}"#
        ),
        format!(
            r#"{{"parentUuid":"u1",{common},"type":"assistant","message":{{"model":"m","id":"msg_1","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"toolu_1","name":"Bash","input":{{"command":"cat x","command":"rm -rf /"}}}}],"stop_reason":null}},"uuid":"u2","timestamp":"2025-12-01T10:00:01.000Z"}}"#
        ),
        format!(
            r#"{{"parentUuid":"u2",{common},"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_1","content":"cut \ud83d"}}]}},"uuid":"u3","timestamp":"2025-12-01T10:00:02.000Z"}}"#
        ),
    ];
    let project = dir.path().join("-w");
    ok(std::fs::create_dir(&project));
    let (_, events) = import_lines("claude", &project.join(format!("{uuid}.jsonl")), &lines);
    let kept = kept_data(&events, "x-claude/");
    assert!(
        kept.iter()
            .any(|data| data.contains(r#""command":"cat x","command":"rm -rf /""#)),
        "{kept:?}"
    );
    assert!(
        kept.iter().any(|data| data.contains(r"cut \ud83d")),
        "{kept:?}"
    );
}

/// What a mapped Codex line says beyond what its mapping carries is kept
/// with the line: images given by their path, a part of a turn item that
/// is not text, a custom tool call that failed, a turn's context window.
#[test]
fn what_a_codex_line_says_beyond_its_mapping_is_kept() {
    let dir = temp();
    let uuid = "019aa234-0000-7000-8000-0000000000bb";
    let line = |kind: &str, payload: Value| codex_line(10, kind, payload);
    let lines = [
        line(
            "event_msg",
            json!({"type": "task_started", "turn_id": "t-1", "model_context_window": 272000}),
        ),
        line(
            "event_msg",
            json!({"type": "user_message", "message": "what is on screen",
            "local_images": ["/home/me/shot.png"]}),
        ),
        line(
            "event_msg",
            json!({"type": "item_completed", "turn_id": "t-1",
            "item": {"type": "UserMessage", "content": [{"type": "text", "text": "and this one"},
                {"type": "local_image", "path": "/home/me/second.png"}]}}),
        ),
        line(
            "response_item",
            json!({"type": "function_call", "call_id": "c2", "name": "shell",
                "arguments": r#"{"command":["cat","x"],"command":["rm","-rf","/"]}"#}),
        ),
        line(
            "response_item",
            json!({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
            "input": "*** Begin Patch", "status": "failed"}),
        ),
    ];
    let (_, events) = import_codex_rollout(dir.path(), uuid, &lines);
    let kept = kept_data(&events, "x-codex/");
    for said in [
        "272000",
        "/home/me/shot.png",
        "/home/me/second.png",
        "\"status\":\"failed\"",
        r#"\"cat\",\"x\""#,
    ] {
        assert!(
            kept.iter().any(|data| data.contains(said)),
            "{said} in {kept:?}"
        );
    }
}

/// The data of the first event of type `kind` in `events`.
#[track_caller]
fn data_of<'e>(events: &'e [EventRecord], kind: &str) -> &'e str {
    let found = events.iter().find(|record| record.event_type() == kind);
    found
        .map(EventRecord::data)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// A tool's arguments and result are written as the source spells them:
/// members in their order, numbers and escapes as written. A line that does
/// not read exactly (a member named twice) is kept whole, and its call
/// holds what was read.
#[test]
fn calls_keep_their_arguments_and_results_as_the_source_wrote_them() {
    let dir = temp();
    let uuid = "019aa234-0000-7000-8000-0000000000dd";
    let at = |second: u32| format!(r#"{{"timestamp":"2025-11-20T16:59:{second:02}.000Z","#);
    let lines = [
        format!(
            r#"{}"type":"response_item","payload":{{"type":"function_call","name":"shell","call_id":"c1","arguments":"{{\"zeta\": [1.50, \"\\u00e9\"], \"alpha\": {{\"y\": 1, \"x\": 2}}}}"}}}}"#,
            at(10)
        ),
        format!(
            r#"{}"type":"response_item","payload":{{"type":"function_call_output","call_id":"c1","output":{{"success":true, "content":"\u00e9 1e2"}}}}}}"#,
            at(11)
        ),
        format!(
            r#"{}"type":"response_item","payload":{{"type":"custom_tool_call","name":"patch","call_id":"c2","status":"completed","input":{{"to":"b","from":"a"}}}}}}"#,
            at(12)
        ),
        format!(
            r#"{}"type":"response_item","payload":{{"type":"function_call","name":"shell","call_id":"c3","arguments":"{{\"b\":1,\"a\":2,\"b\":3}}"}}}}"#,
            at(13)
        ),
    ];
    let (_, events) = import_codex_rollout(dir.path(), uuid, &lines);
    let starts: Vec<&str> = events
        .iter()
        .filter(|record| record.event_type() == "tool/start")
        .map(EventRecord::data)
        .collect();
    assert_eq!(starts.len(), 3, "{starts:?}");
    assert!(
        starts[0].contains(r#""arguments":{"zeta":[1.50,"\u00e9"],"alpha":{"y":1,"x":2}}"#),
        "{}",
        starts[0]
    );
    assert!(
        starts[1].contains(r#""arguments":{"to":"b","from":"a"}"#),
        "{}",
        starts[1]
    );
    // Read as the parser reads it (the last `b`), the line kept whole.
    assert!(
        starts[2].contains(r#""arguments":{"a":2,"b":3}"#),
        "{}",
        starts[2]
    );
    assert!(
        kept_data(&events, "x-codex/")
            .iter()
            .any(|data| data.contains(r#"\"b\":1"#)),
        "{events:?}"
    );
    assert!(
        data_of(&events, "tool/settle")
            .contains(r#""result":{"success":true,"content":"\u00e9 1e2"}"#),
        "{}",
        data_of(&events, "tool/settle")
    );
    // A session an earlier version imported with these members in the
    // order of their names (as a rollout spelling them so gives it) was
    // imported all the same; a changed value was not.
    let source = dir.path().join(codex_rollout_name(uuid));
    let store = dir.path().join("imported");
    let before = folder_bytes(&store);
    let written = ok(std::fs::read_to_string(&source));
    let sorted = r#"{\"alpha\": {\"x\": 2, \"y\": 1}, \"zeta\": [1.5, \"é\"]}"#;
    let reordered = written.replace(
        r#"{\"zeta\": [1.50, \"\\u00e9\"], \"alpha\": {\"y\": 1, \"x\": 2}}"#,
        sorted,
    );
    assert_ne!(reordered, written);
    ok(std::fs::write(&source, &reordered));
    let again = import("codex", std::slice::from_ref(&source), &store);
    expect_none_imported(&again);
    assert!(
        again.stdout.contains("1 already imported"),
        "{}{}",
        again.stdout,
        again.stderr
    );
    let changed = reordered.replace(
        sorted,
        r#"{\"alpha\": {\"x\": 2, \"y\": 1}, \"zeta\": [1.5, \"e\"]}"#,
    );
    ok(std::fs::write(&source, changed));
    let changed = import("codex", std::slice::from_ref(&source), &store);
    assert!(changed.stdout.contains("1 skipped"), "{}", changed.stdout);
    assert_eq!(folder_bytes(&store), before);

    let project = dir.path().join("claude").join("-work");
    ok(std::fs::create_dir_all(&project));
    let session = "3b9e0c1d-2e3f-4a5b-9c6d-7e8f9a0b1cdd";
    let line = |uuid: &str, kind: &str, message: &str, second: u32| {
        format!(
            r#"{{"parentUuid":null,"isSidechain":false,"cwd":"/w","sessionId":"{session}","type":"{kind}","message":{message},"uuid":"{uuid}","timestamp":"2025-12-01T10:10:{second:02}.000Z"}}"#
        )
    };
    let lines = [
        line("m1", "user", r#"{"role":"user","content":"list it"}"#, 1),
        line(
            "m2",
            "assistant",
            r#"{"id":"msg_a","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_A","name":"Bash","input":{"command":"ls","description":"List","timeout":1.0e3}}]}"#,
            2,
        ),
        line(
            "m3",
            "user",
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":[{"type":"text","text":"a\u00e9"}]}]}"#,
            3,
        ),
    ];
    let (_, events) = import_lines("claude", &project.join(format!("{session}.jsonl")), &lines);
    let start = data_of(&events, "tool/start");
    assert!(
        start.contains(r#""arguments":{"command":"ls","description":"List","timeout":1.0e3}"#),
        "{start}"
    );
    let settle = data_of(&events, "tool/settle");
    assert!(
        settle.contains(r#""result":[{"type":"text","text":"a\u00e9"}]"#),
        "{settle}"
    );
}

/// A completed user turn item that nothing mirrors, of two injected texts:
/// each keeps its own authority, as the texts of a response item do.
#[test]
fn each_text_of_an_injected_completed_item_keeps_its_own_authority() {
    let dir = temp();
    let uuid = "019aa234-0000-7000-8000-0000000000cc";
    let line = |kind: &str, payload: Value| codex_line(10, kind, payload);
    let lines = [
        line(
            "event_msg",
            json!({"type": "task_started", "turn_id": "t-1"}),
        ),
        line(
            "event_msg",
            json!({"type": "item_completed", "turn_id": "t-1",
            "item": {"type": "UserMessage", "content": [
                {"type": "text", "text": "<user_instructions>be terse</user_instructions>"},
                {"type": "text", "text": "<environment_context><approval_policy>never</approval_policy></environment_context>"}]}}),
        ),
    ];
    let (header, events) = import_codex_rollout(dir.path(), uuid, &lines);
    let instructions = messages(&header, &events, "instructions");
    let context = messages(&header, &events, "context");
    assert_eq!(instructions.len(), 1, "{instructions:?}");
    assert!(
        !instructions[0].0.contains("approval_policy"),
        "{instructions:?}"
    );
    assert!(
        context
            .iter()
            .any(|(text, _)| text.contains("<approval_policy>never")),
        "{context:?}"
    );
}

#[test]
fn a_compressed_rollout_imports_as_the_same_session() {
    let dir = temp();
    let plain = dir.path().join("plain");
    let compressed = dir.path().join("compressed");
    import("codex", &[fixtures().join("codex/legacy")], &plain).expect_code(0);
    import("auto", &[fixtures().join("codex/compressed")], &compressed).expect_code(0);
    assert_eq!(
        session(&plain, CODEX_LEGACY),
        session(&compressed, CODEX_LEGACY)
    );
}

/// A folder it may not list fails alone: the transcripts beside it are
/// imported, and the failure names the folder. Once the whole SOURCE
/// imported nothing, naming only the folder it could not list.
#[test]
fn a_folder_that_cannot_be_listed_fails_alone() {
    use std::os::unix::fs::PermissionsExt;
    let Some(as_other) = crate::cli_support::as_another_user() else {
        return;
    };
    let dir = temp();
    ok(std::fs::set_permissions(
        dir.path(),
        std::fs::Permissions::from_mode(0o777),
    ));
    let source = dir.path().join("sessions");
    let (first, second, locked) = (source.join("a"), source.join("b"), source.join("a/locked"));
    for folder in [&first, &second, &locked] {
        ok(std::fs::create_dir_all(folder));
    }
    for (folder, fixture) in [(&first, "codex/legacy"), (&second, "codex/current")] {
        for entry in ok(std::fs::read_dir(fixtures().join(fixture))) {
            let path = ok(entry).path();
            let name = path.file_name().unwrap_or_default().to_owned();
            ok(std::fs::copy(&path, folder.join(name)));
        }
    }
    ok(std::fs::set_permissions(
        &locked,
        std::fs::Permissions::from_mode(0o000),
    ));
    let store = dir.path().join("store");
    let output = ok(as_other()
        .args(["import", "codex"])
        .arg(&source)
        .arg("--into")
        .arg(&store)
        .output());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    let named = format!("{}: cannot list", locked.display());
    assert!(stderr.contains(&named), "{stderr}");
    let imported = ok(ok(Store::open(&store)).ids());
    assert!(
        imported.len() >= 3 && imported.contains(&id(CODEX_LEGACY)),
        "the transcripts beside it were imported: {imported:?}\n{stdout}{stderr}"
    );
}

/// A transcript whose header would pass the record limit (a `cwd` of
/// 16 MiB and 64 KiB, in a line short of the longest an import reads) fails
/// its file, naming the session once: imported, it was a log `verify`
/// called corrupt at line 1, and a database kept it.
#[test]
fn a_header_above_the_record_limit_fails_its_file() {
    let dir = temp();
    let line = serde_json::json!({
        "type": "user",
        "message": {"role": "user", "content": "go"},
        "sessionId": "s-cwd",
        "timestamp": "2025-12-01T10:00:01.000Z",
        "uuid": "u1",
        "cwd": format!("/{}", "c".repeat(sessionlog_schema::MAX_RECORD_BYTES + (64 << 10))),
    });
    let source = dir.path().join("big.jsonl");
    ok(std::fs::write(&source, format!("{line}\n")));
    for store in ["folder", "sessions.db"] {
        let store = dir.path().join(store);
        let failed = import("claude", std::slice::from_ref(&source), &store);
        failed.expect_code(1);
        assert!(
            failed
                .stderr
                .contains("invalid header: session claude-s-cwd: the header record would be"),
            "{}",
            failed.stderr
        );
        assert!(!failed
            .stderr
            .contains("session claude-s-cwd: invalid header"));
    }
}

/// A rollout compressed a frame at a time (`cat a.zst b.zst`, or a writer
/// that flushes a frame now and then) imports whole: every frame is read,
/// not the first alone, which once imported the first lines and exit 0.
#[test]
fn a_rollout_of_several_zstd_frames_imports_whole() {
    let dir = temp();
    let name = "rollout-2025-08-18T01-16-13-c3c4b301-27c8-4c70-b6e4-46b99fdf0236.jsonl";
    let text = ok(std::fs::read_to_string(
        fixtures().join("codex/legacy").join(name),
    ));
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut framed = Vec::new();
    for part in lines.chunks(lines.len().div_ceil(3)) {
        let part = part.concat();
        framed.extend(ruzstd::encoding::compress_to_vec(
            part.as_bytes(),
            ruzstd::encoding::CompressionLevel::Fastest,
        ));
    }
    let source = dir.path().join("framed");
    ok(std::fs::create_dir(&source));
    ok(std::fs::write(source.join(format!("{name}.zst")), framed));
    let plain = dir.path().join("plain");
    let compressed = dir.path().join("compressed");
    import("codex", &[fixtures().join("codex/legacy")], &plain).expect_code(0);
    import("codex", &[source], &compressed).expect_code(0);
    assert_eq!(
        session(&plain, CODEX_LEGACY),
        session(&compressed, CODEX_LEGACY)
    );
}

#[test]
fn a_claude_2_0_project_merges_responses_and_links_its_agent_file() {
    let dir = temp();
    let store = dir.path().join("audit");
    import("claude", &[fixtures().join("claude/v2.0")], &store).expect_code(0);
    verify(&store);
    let (header, events) = session(&store, CLAUDE_2_0);
    assert_eq!(header.cwd, "/work/shop");
    let tally = Tally::of(&events);
    tally.expect(&[
        ("turn/start", 3),
        ("tool/start", 3),
        // The Bash call the person interrupted stays open.
        ("tool/settle:ok", 2),
        ("message:user", 3),
        ("message:context", 3),
        ("message:assistant", 3),
        ("message:reasoning", 1),
        ("child/created", 1),
        ("permission/preset", 1),
        ("x-claude/file-history-snapshot", 1),
        ("x-claude/progress", 1),
        ("x-claude/queue-operation", 1),
        ("x-claude/system", 1),
        ("x-claude/summary", 1),
    ]);
    assert_eq!(tally.kept_lines(), 5);
    // The three lines of one API response (thinking, text, a call) are one
    // step; a repeated line is not imported twice.
    assert_eq!(tally.get("step/start"), 5);
    let prompts = messages(&header, &events, "user");
    assert_eq!(prompts[1].0, "Here is the screenshot");
    assert!(events
        .iter()
        .any(|record| record.data().contains("\"mediaType\":\"image/png\"")));
    let (child, child_events) = session(&store, &format!("{CLAUDE_2_0}-agent-a1b2c3d"));
    assert_eq!(child.parent_session, Some(id(CLAUDE_2_0)));
    assert_eq!(
        messages(&child, &child_events, "agent-message"),
        [(
            "Find where flags are parsed".to_owned(),
            "direct-parent".to_owned()
        )]
    );
    Tally::of(&child_events).expect(&[
        ("message:user", 0),
        ("tool/start", 1),
        ("tool/settle:ok", 1),
    ]);
    // The parent names the child it created.
    assert!(events
        .iter()
        .any(|record| record.event_type() == "child/created"
            && record
                .data()
                .contains(&format!("{CLAUDE_2_0}-agent-a1b2c3d"))));
}

#[test]
fn claude_1_0_inline_sidechains_become_child_sessions() {
    let dir = temp();
    let store = dir.path().join("audit");
    import("claude", &[fixtures().join("claude/v1.0")], &store).expect_code(0);
    verify(&store);
    let (header, events) = session(&store, CLAUDE_1);
    Tally::of(&events).expect(&[
        ("message:user", 2),
        ("message:assistant", 1),
        ("tool/start", 1),
        ("tool/settle:ok", 1),
        ("child/created", 2),
        ("x-claude/summary", 1),
    ]);
    assert!(messages(&header, &events, "agent-message").is_empty());
    let (first, first_events) = session(&store, &format!("{CLAUDE_1}-sidechain-s1"));
    assert_eq!(first.parent_session, Some(id(CLAUDE_1)));
    // The line whose parent is missing stays in its chain, in file order.
    Tally::of(&first_events).expect(&[
        ("message:agent-message", 1),
        ("message:user", 0),
        ("message:assistant", 1),
        ("tool/start", 1),
        ("tool/settle:ok", 1),
    ]);
    let (second, second_events) = session(&store, &format!("{CLAUDE_1}-sidechain-s5"));
    assert_eq!(
        messages(&second, &second_events, "agent-message"),
        [("Check the tests".to_owned(), "direct-parent".to_owned())]
    );
}

/// A conversation resumed in Claude Code is written to a new file, named
/// after the new session, that repeats the records before it, those keeping
/// the earlier session's id: both files import, each as the session it is
/// named after, the resumed one whole, and importing them again writes
/// nothing.
#[test]
fn a_resumed_claude_session_imports_beside_the_one_it_resumed() {
    const A: &str = "11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa";
    const B: &str = "22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb";
    let dir = temp();
    let project = dir.path().join("-home-dev-r");
    ok(std::fs::create_dir_all(&project));
    let user = |session: &str, uuid: &str, second: u32, text: &str| {
        json!({"type": "user", "sessionId": session, "uuid": uuid, "cwd": "/home/dev/r",
               "timestamp": format!("2025-09-01T10:00:{second:02}.000Z"),
               "message": {"role": "user", "content": text}})
        .to_string()
    };
    let assistant = |session: &str, uuid: &str, second: u32, id: &str, text: &str| {
        json!({"type": "assistant", "sessionId": session, "uuid": uuid, "cwd": "/home/dev/r",
               "timestamp": format!("2025-09-01T10:00:{second:02}.000Z"),
               "message": {"id": id, "role": "assistant",
                           "content": [{"type": "text", "text": text}]}})
        .to_string()
    };
    let original = [
        user(A, "x1", 0, "List the TODOs"),
        assistant(A, "x2", 5, "m1", "There are 3 TODOs."),
    ];
    let resumed = [
        user(A, "x1", 0, "List the TODOs"),
        assistant(B, "x2", 5, "m1", "There are 3 TODOs."),
        user(B, "y1", 30, "Now delete the second one"),
        assistant(B, "y2", 34, "m2", "Deleted."),
    ];
    ok(std::fs::write(
        project.join(format!("{A}.jsonl")),
        original.join("\n") + "\n",
    ));
    ok(std::fs::write(
        project.join(format!("{B}.jsonl")),
        resumed.join("\n") + "\n",
    ));
    let store = dir.path().join("audit");
    let first = import("claude", std::slice::from_ref(&project), &store);
    first.expect_code(0);
    assert!(
        first.stdout.contains("2 sessions imported"),
        "{}",
        first.stdout
    );
    verify(&store);
    let (header, events) = session(&store, &format!("claude-{B}"));
    let prompts: Vec<String> = messages(&header, &events, "user")
        .into_iter()
        .map(|(text, _)| text)
        .collect();
    assert_eq!(prompts, ["List the TODOs", "Now delete the second one"]);
    let (header, events) = session(&store, &format!("claude-{A}"));
    assert_eq!(messages(&header, &events, "user").len(), 1);
    let again = import("claude", &[project], &store);
    expect_none_imported(&again);
    assert!(
        again.stdout.contains("2 already imported"),
        "{}",
        again.stdout
    );
}

#[test]
fn a_claude_2_1_project_reads_compaction_errors_and_its_subagents_folder() {
    let dir = temp();
    let store = dir.path().join("audit.sqlite");
    import("auto", &[fixtures().join("claude/v2.1")], &store).expect_code(0);
    verify(&store);
    let (_, events) = session(&store, CLAUDE_2_1);
    let tally = Tally::of(&events);
    tally.expect(&[
        ("message:user", 2),
        ("checkpoint", 1),
        ("tool/start", 2),
        ("tool/settle:ok", 1),
        ("tool/settle:error", 1),
        ("child/created", 1),
        ("x-claude/system", 2),
        ("x-claude/attachment", 1),
        ("x-claude/brand-new-kind", 1),
        // plan: read-only preset; acceptEdits: unsandboxed, asking.
        ("permission/preset", 1),
        ("sandbox/mode", 2),
        ("approval/policy", 1),
    ]);
    assert_eq!(tally.kept_lines(), 4);
    let (child, _) = session(&store, &format!("{CLAUDE_2_1}-agent-f00d123"));
    assert_eq!(child.parent_session, Some(id(CLAUDE_2_1)));
}

#[test]
fn importing_again_writes_nothing_and_says_so() {
    let dir = temp();
    let store = dir.path().join("audit");
    let sources = [fixtures().join("codex"), fixtures().join("claude")];
    import("auto", &sources, &store).expect_code(0);
    verify(&store);
    let before = folder_bytes(&store);
    assert_eq!(before.len(), 10, "{:?}", before.keys());
    let again = import("auto", &sources, &store);
    expect_none_imported(&again);
    assert!(
        again.stdout.contains("7 already imported"),
        "{}",
        again.stdout
    );
    assert_eq!(folder_bytes(&store), before);
}

/// An import that succeeded and wrote no session.
#[track_caller]
fn expect_none_imported(run: &Run) {
    run.expect_code(0);
    assert!(run.stdout.contains("0 sessions imported"), "{}", run.stdout);
}

/// A copy in `dir` of the Claude Code 2.0 fixture's agent file, imported
/// into the folder store `dir/audit`: the store and the copy.
fn imported_agent_file(dir: &Path) -> (PathBuf, PathBuf) {
    let store = dir.join("audit");
    let copy = dir.join("agent-a1b2c3d.jsonl");
    let original = fixtures().join("claude/v2.0/-work-shop/agent-a1b2c3d.jsonl");
    ok(std::fs::copy(&original, &copy));
    import("claude", std::slice::from_ref(&copy), &store).expect_code(0);
    (store, copy)
}

#[test]
fn a_source_that_changed_since_it_was_imported_is_reported_not_rewritten() {
    let dir = temp();
    let (store, copy) = imported_agent_file(dir.path());
    let before = folder_bytes(&store);
    let mut grown = std::fs::read_to_string(&copy).unwrap_or_default();
    grown.push_str("{\"type\":\"summary\",\"summary\":\"resumed\"}\n");
    std::fs::write(&copy, grown).unwrap_or_else(|error| panic!("write: {error}"));
    let again = import("claude", &[copy], &store);
    again.expect_code(0);
    // The line lands in the turn the first import closed at the end of
    // the file: said as such, and nothing rewritten.
    assert!(
        again.stderr.contains("imported in the middle of a turn"),
        "{}",
        again.stderr
    );
    assert_eq!(folder_bytes(&store), before);
}

/// A Claude Code transcript of session `aaaa` with an inline sidechain
/// whose session id is `claude-aaaa-sidechain-s5`, and another transcript
/// whose own session id maps to that same id.
fn transcripts_sharing_a_sidechain_id(dir: &Path) -> (PathBuf, PathBuf) {
    let line = |session: &str, sidechain: bool, uuid: &str, parent: Option<&str>, text: &str| {
        json!({"parentUuid": parent, "isSidechain": sidechain, "cwd": "/w",
               "sessionId": session, "type": "user",
               "message": {"role": "user", "content": text},
               "uuid": uuid, "timestamp": "2025-12-01T10:00:01.000Z"})
        .to_string()
    };
    let collider = dir.join("99999999-0000-4000-8000-000000000000.jsonl");
    ok(std::fs::write(
        &collider,
        line("aaaa-sidechain-s5", false, "q1", None, "collider") + "\n",
    ));
    let family = dir.join("11111111-0000-4000-8000-000000000000.jsonl");
    let lines = [
        line("aaaa", false, "m1", None, "main prompt"),
        line("aaaa", true, "s5", None, "sub prompt"),
        line("aaaa", false, "m2", Some("m1"), "thanks"),
    ];
    ok(std::fs::write(&family, lines.join("\n") + "\n"));
    (collider, family)
}

/// The sessions of one source refer to each other (a parent announces
/// its children): when the store holds one of them otherwise, none of the
/// source's sessions is written, and each is said to be skipped, so that
/// no parent is written announcing a child the store holds for another.
#[test]
fn a_source_one_of_whose_sessions_the_store_holds_otherwise_writes_none() {
    let dir = temp();
    let store = dir.path().join("audit");
    let (collider, family) = transcripts_sharing_a_sidechain_id(dir.path());
    import("claude", &[collider], &store).expect_code(0);
    let before = folder_bytes(&store);
    let again = import("claude", &[family], &store);
    expect_none_imported(&again);
    assert!(
        again.stderr.contains("session claude-aaaa not written")
            && again
                .stderr
                .contains("claude-aaaa-sidechain-s5 is already in the store"),
        "{}",
        again.stderr
    );
    assert_eq!(folder_bytes(&store), before);
}

/// A session that grew in the store after its import (sealed) is skipped
/// on a re-import with that said, not as a changed source; a stored log
/// with a torn tail is compared by its good prefix, with a warning, and
/// when the tail cut into the imported events, they are written again.
#[test]
fn a_reimport_says_when_the_store_grew_and_warns_of_a_torn_stored_log() {
    let dir = temp();
    let (store, copy) = imported_agent_file(dir.path());
    let ids = ok(ok(Store::open(&store)).ids());
    let log = store.join(format!("{}.jsonl", ids[0]));
    let mut torn = ok(std::fs::read(&log));
    torn.extend_from_slice(b"{\"seq\":99,\"ts\":1,");
    ok(std::fs::write(&log, &torn));
    let again = import("claude", std::slice::from_ref(&copy), &store);
    again.expect_code(0);
    assert!(
        again.stdout.contains("1 already imported"),
        "{}{}",
        again.stdout,
        again.stderr
    );
    assert!(
        again
            .stderr
            .contains("comparing the good prefix; ignoring a torn tail"),
        "{}",
        again.stderr
    );
    // A torn tail cutting into the imported events (what an import or
    // an append killed while it wrote leaves): the tail is cut, as every
    // writer cuts one, and the events after the good prefix are written
    // again from the source.
    let whole = &torn[..torn.len() - 17];
    let last_line = whole[..whole.len() - 1]
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |at| at + 1);
    ok(std::fs::write(&log, &whole[..last_line + 10]));
    let cut = import("claude", std::slice::from_ref(&copy), &store);
    cut.expect_code(0);
    assert!(
        cut.stdout.contains("1 session extended by 1 event") && cut.stderr.contains("torn tail"),
        "{}{}",
        cut.stdout,
        cut.stderr
    );
    assert_eq!(ok(std::fs::read(&log)), whole, "the log is whole again");
    run([
        "seal",
        &store.display().to_string(),
        "--session",
        ids[0].as_str(),
    ])
    .expect_code(0);
    let sealed = import("claude", &[copy], &store);
    sealed.expect_code(0);
    assert!(
        sealed
            .stderr
            .contains("the session grew in the store after it was imported"),
        "{}",
        sealed.stderr
    );
}

#[test]
fn a_broken_file_is_named_with_its_line_imports_nothing_and_the_others_go_on() {
    let dir = temp();
    let sources = dir.path().join("sources");
    std::fs::create_dir_all(&sources).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let copy = |from: PathBuf, to: &str| {
        std::fs::copy(&from, sources.join(to)).unwrap_or_else(|error| panic!("copy: {error}"));
    };
    let bad = fixtures().join("bad");
    copy(
        bad.join("not-json.jsonl"),
        "0bad0bad-0000-4000-8000-000000000001.jsonl",
    );
    copy(
        bad.join("cut.jsonl"),
        "0bad0bad-0000-4000-8000-000000000002.jsonl",
    );
    copy(
        bad.join("unknown.jsonl"),
        "rollout-2025-01-01T00-00-00-unknown.jsonl",
    );
    copy(
        fixtures().join("claude/v2.0/-work-shop/agent-a1b2c3d.jsonl"),
        "agent-a1b2c3d.jsonl",
    );
    // Not a tool's file name: never read. An empty transcript: skipped.
    std::fs::write(sources.join("history.jsonl"), "garbage\n").unwrap_or_default();
    std::fs::write(
        sources.join("0bad0bad-0000-4000-8000-000000000003.jsonl"),
        "",
    )
    .unwrap_or_default();
    let store = dir.path().join("audit");
    let run = import("auto", &[sources], &store);
    run.expect_code(1);
    // The byte offset of a fixture's second line.
    let second_line = |name: &str| {
        let text = std::fs::read_to_string(bad.join(name)).unwrap_or_default();
        text.find('\n').map_or(0, |end| end + 1)
    };
    let not_json = format!(
        "000000000001.jsonl line 2 (byte offset {}): not JSON",
        second_line("not-json.jsonl")
    );
    let cut = format!(
        "000000000002.jsonl line 2 (byte offset {}): the last line is cut short",
        second_line("cut.jsonl")
    );
    for named in [
        not_json.as_str(),
        cut.as_str(),
        "unknown.jsonl line 1 (byte offset 0): not a Codex rollout nor a Claude Code transcript",
        "000000000003.jsonl: empty file",
    ] {
        assert!(run.stderr.contains(named), "{named:?} in {}", run.stderr);
    }
    assert!(!run.stderr.contains("history.jsonl"), "{}", run.stderr);
    assert!(run.stdout.contains("1 session imported"), "{}", run.stdout);
    assert!(run.stdout.contains("1 skipped"), "{}", run.stdout);
    assert!(run.stdout.contains("3 failed"), "{}", run.stdout);
    // The first lines of the broken files were good: none of them was written.
    let ids = Store::open(&store)
        .and_then(|store| store.ids())
        .unwrap_or_else(|error| panic!("ids: {error}"));
    assert_eq!(ids, [id(&format!("{CLAUDE_2_0}-agent-a1b2c3d"))]);
}

/// A folder `import` made for sources of which none imported is removed
/// again, with the parents it made; a folder that was there before stays,
/// even empty, and so does a database file (docs/IMPORT.md says why).
#[test]
fn an_import_that_imports_nothing_leaves_no_folder_it_made() {
    let dir = temp();
    let broken = dir
        .path()
        .join("0bad0bad-0000-4000-8000-000000000001.jsonl");
    std::fs::copy(fixtures().join("bad/not-json.jsonl"), &broken)
        .unwrap_or_else(|error| panic!("copy: {error}"));
    let store = dir.path().join("audits/2026/december");
    import("claude", std::slice::from_ref(&broken), &store).expect_code(1);
    assert!(
        !dir.path().join("audits").exists(),
        "audits/ was left behind"
    );
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).unwrap_or_else(|error| panic!("mkdir: {error}"));
    import("claude", std::slice::from_ref(&broken), &existing).expect_code(1);
    assert!(existing.is_dir(), "a folder that was there before is kept");
    let database = dir.path().join("audit.db");
    import("claude", std::slice::from_ref(&broken), &database).expect_code(1);
    assert!(database.is_file(), "a database file is kept");
    // A good source beside the broken one: the folder stays, with its session.
    let good = fixtures().join("claude/v2.0/-work-shop/agent-a1b2c3d.jsonl");
    let kept = dir.path().join("kept");
    import("claude", &[broken, good], &kept).expect_code(1);
    let ids = Store::open(&kept)
        .and_then(|store| store.ids())
        .unwrap_or_else(|error| panic!("ids: {error}"));
    assert_eq!(ids, [id(&format!("{CLAUDE_2_0}-agent-a1b2c3d"))]);
}

#[test]
fn json_reports_one_object_per_source() {
    let dir = temp();
    let store = dir.path().join("audit");
    let run = run([
        "import".to_owned(),
        "auto".to_owned(),
        fixtures().join("codex/current").display().to_string(),
        fixtures().join("bad/unknown.jsonl").display().to_string(),
        "--into".to_owned(),
        store.display().to_string(),
        "--json".to_owned(),
    ]);
    run.expect_code(1);
    let reports: Vec<Value> = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{line}: {error}")))
        .collect();
    assert_eq!(reports.len(), 2);
    for line in run.stdout.lines() {
        crate::cli_support::expect_members_in_order(
            line,
            &[
                "source",
                "files",
                "sessions",
                "events",
                "unknownLines",
                "unchanged",
                "skipped",
                "failed",
                "imported",
                "extended",
            ],
        );
    }
    assert_eq!(reports[0]["sessions"], 2);
    // 15 kept lines in the rollout, 2 in its sub-agent's.
    assert_eq!(reports[0]["unknownLines"], 15 + 2);
    assert_eq!(reports[1]["sessions"], 0);
    assert_eq!(reports[1]["failed"][0]["line"], 1);
}

/// Every file of a folder store, by name, with its bytes.
fn folder_bytes(folder: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(folder)
        .unwrap_or_else(|error| panic!("read {}: {error}", folder.display()))
        .filter_map(Result::ok)
        .map(|entry| {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect()
}

#[test]
fn a_file_that_fails_writes_none_of_its_sessions() {
    let source = fixtures().join("claude/v1.0");
    let main = "claude-3b9e0c1d-2e3f-4a5b-9c6d-7e8f9a0b1c2d";
    // The file's last session cannot be written: its name is a folder.
    let folder = temp();
    let store = folder.path().join("blocked");
    ok(std::fs::create_dir_all(
        store.join(format!("{main}-sidechain-s5.jsonl")),
    ));
    let failed = import("claude", std::slice::from_ref(&source), &store);
    failed.expect_code(1);
    assert!(failed.stderr.contains("sidechain-s5"), "{}", failed.stderr);
    let logs: Vec<_> = ok(std::fs::read_dir(&store))
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_file())
        .collect();
    assert!(logs.is_empty(), "written: {logs:?}");
    // One of its sessions is in the store already, damaged: the file
    // fails again, and the session the store lost is not written back.
    // A corrupt log met is exit 2, as for every command.
    let store = folder.path().join("damaged");
    import("claude", std::slice::from_ref(&source), &store).expect_code(0);
    let sidechain = store.join(format!("{main}-sidechain-s1.jsonl"));
    let text = ok(std::fs::read_to_string(&sidechain));
    ok(std::fs::write(
        &sidechain,
        text.replacen("\"seq\":2", "\"seq\":9", 1),
    ));
    ok(std::fs::remove_file(store.join(format!("{main}.jsonl"))));
    let failed = import("claude", &[source], &store);
    failed.expect_code(2);
    assert!(failed.stderr.contains("sidechain-s1"), "{}", failed.stderr);
    assert!(!store.join(format!("{main}.jsonl")).exists());
}

/// A transcript line whose event would pass the 16 MiB record limit fails
/// its file with the line it came from; an assistant message gathered from
/// several lines is named by its first.
#[test]
fn a_record_above_the_limit_is_named_with_its_source_line() {
    let huge = "x".repeat(sessionlog_schema::MAX_RECORD_BYTES);
    let dir = temp();
    let claude_line = |kind: &str, uuid: &str, message: Value| {
        serde_json::json!({
            "type": kind,
            "sessionId": "0b160000-0000-4000-8000-000000000001",
            "cwd": "/work",
            "uuid": uuid,
            "timestamp": "2025-12-01T10:00:01.000Z",
            "message": message,
        })
        .to_string()
    };
    let assistant = |text: &str| {
        serde_json::json!({
            "id": "msg_01",
            "role": "assistant",
            "content": [{ "type": "text", "text": text }],
        })
    };
    let claude = [
        claude_line(
            "user",
            "u1",
            serde_json::json!({ "role": "user", "content": "hi" }),
        ),
        claude_line("assistant", "a1", assistant("Looking.")),
        claude_line("assistant", "a2", assistant(&huge)),
        claude_line(
            "user",
            "u2",
            serde_json::json!({ "role": "user", "content": "next" }),
        ),
    ];
    // Each transcript fails, named by file, line, the line's byte offset
    // and session.
    let fails_at = |format: &str, name: &str, lines: &[String], line: usize, session: &str| {
        let file = dir.path().join(name);
        ok(std::fs::write(&file, lines.join("\n") + "\n"));
        let run = import(format, &[file], &dir.path().join(format));
        run.expect_code(1);
        let offset: usize = lines[..line - 1].iter().map(|line| line.len() + 1).sum();
        let expected = format!("{name} line {line} (byte offset {offset}): session {session}");
        assert!(
            run.stderr.contains(&expected) && run.stderr.contains("record limit"),
            "{expected:?} in {}",
            run.stderr
        );
    };
    fails_at(
        "claude",
        "0b160000-0000-4000-8000-000000000001.jsonl",
        &claude,
        2,
        "claude-",
    );

    let codex = [
        r#"{"timestamp":"2025-11-20T16:59:09.000Z","type":"session_meta","payload":{"id":"0b160000-0000-4000-8000-000000000002","timestamp":"2025-11-20T16:59:09.000Z","cwd":"/work"}}"#.to_owned(),
        r#"{"timestamp":"2025-11-20T16:59:10.000Z","type":"event_msg","payload":{"type":"task_started","turn_id":"t-1"}}"#.to_owned(),
        r#"{"timestamp":"2025-11-20T16:59:10.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"small"}]}}"#.to_owned(),
        serde_json::json!({
            "timestamp": "2025-11-20T16:59:11.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{ "type": "output_text", "text": huge }],
            },
        })
        .to_string(),
    ];
    fails_at(
        "codex",
        "rollout-2025-11-20T16-59-09-0b160000-0000-4000-8000-000000000002.jsonl",
        &codex,
        4,
        "codex-",
    );

    // A line too long to give any record is refused before it is parsed
    // (parsed, a line can take twenty times its size), named by its place.
    let longer = "y".repeat(sessionlog_schema::MAX_RECORD_BYTES + (2 << 20));
    let lines = [
        claude_line(
            "user",
            "u1",
            serde_json::json!({ "role": "user", "content": "hi" }),
        ),
        claude_line("assistant", "a1", assistant(&longer)),
    ];
    let name = "0b160000-0000-4000-8000-000000000003.jsonl";
    let file = dir.path().join(name);
    ok(std::fs::write(&file, lines.join("\n") + "\n"));
    let run = import("claude", &[file], &dir.path().join("long"));
    run.expect_code(1);
    let expected = format!("{name} line 2 (byte offset {})", lines[0].len() + 1);
    assert!(
        run.stderr.contains(&expected) && run.stderr.contains("a line may hold"),
        "{expected:?} in {}",
        run.stderr
    );
}

/// Two sources whose ids map to one session id: the second is skipped, and
/// its reason names that other source as what it may be, not only a change.
/// (A Claude session whose own id spells another's agent file.)
#[test]
fn a_second_source_mapping_to_a_stored_id_is_not_said_to_have_changed() {
    let dir = temp();
    let sources = dir.path().join("p");
    std::fs::create_dir_all(&sources).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let user = |session: &str, extra: &str, text: &str| {
        format!(
            r#"{{"type":"user","sessionId":"{session}"{extra},"uuid":"u1","timestamp":"2025-12-01T10:00:01.000Z","cwd":"/w","message":{{"role":"user","content":"{text}"}}}}"#
        ) + "\n"
    };
    let main = sources.join("main.jsonl");
    let agent = sources.join("agent-def.jsonl");
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).unwrap_or_else(|error| panic!("write: {error}"));
    };
    write(&main, user("abc-agent-def", "", "the main session"));
    write(
        &agent,
        user(
            "abc",
            r#","isSidechain":true,"agentId":"def""#,
            "a sub-agent",
        ),
    );
    let store = dir.path().join("audit");
    let run = import("claude", &[main, agent], &store);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("session claude-abc-agent-def is already in the store")
            && run
                .stderr
                .contains("another source whose id maps to the same session id"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("grew"), "{}", run.stderr);
}

/// A file of a walked folder whose name is not UTF-8 is read as any other
/// (its id, should it come from the name, has the bytes replaced).
#[test]
fn a_transcript_whose_name_is_not_utf8_is_imported_from_a_folder() {
    use std::os::unix::ffi::OsStrExt;
    let dir = temp();
    let sources = dir.path().join("sources");
    std::fs::create_dir_all(&sources).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let name = std::ffi::OsStr::from_bytes(b"rollout-\xff\xfe.jsonl");
    let rollout = fixtures().join(
        "codex/current/rollout-2025-11-20T16-59-09-019aa234-a2a1-75c3-a9bf-d8425e1785f5.jsonl",
    );
    std::fs::copy(&rollout, sources.join(name)).unwrap_or_else(|error| panic!("copy: {error}"));
    let store = dir.path().join("audit");
    let run = import("codex", &[sources], &store);
    run.expect_code(0);
    let ids = Store::open(&store)
        .and_then(|store| store.ids())
        .unwrap_or_else(|error| panic!("ids: {error}"));
    assert_eq!(ids, [id(CODEX)], "{}", run.stdout);
}

/// A long transcript's session is imported with the state snapshot of the
/// fold its import checked, and a migration of it keeps one too: the
/// first open of either folds nothing (store-level tests check the state
/// it gives on every backend).
#[test]
fn a_long_transcript_is_imported_and_migrated_with_its_state_snapshot() {
    let dir = temp();
    let sources = dir.path().join("p");
    ok(std::fs::create_dir_all(&sources));
    let mut text = String::new();
    // Each line a turn of three events.
    for n in 0..400 {
        text.push_str(&format!(
            r#"{{"type":"user","sessionId":"long","uuid":"u{n}","timestamp":"2025-12-01T10:00:01.000Z","cwd":"/w","message":{{"role":"user","content":"prompt {n}"}}}}"#
        ));
        text.push('\n');
    }
    let transcript = sources.join("long.jsonl");
    ok(std::fs::write(&transcript, text));
    let store = dir.path().join("audit");
    import("claude", &[transcript], &store).expect_code(0);
    verify(&store);
    let (_, events) = session(&store, "claude-long");
    assert_eq!(events.len(), 1_200);
    let sidecar = |folder: &Path| folder.join(".claude-long.jsonl.state");
    assert!(sidecar(&store).exists(), "the import kept a snapshot");
    let copy = dir.path().join("copy");
    run([
        "migrate".to_owned(),
        store.display().to_string(),
        copy.display().to_string(),
    ])
    .expect_code(0);
    assert!(sidecar(&copy).exists(), "the migration kept a snapshot");
    let clean = run(["clean".to_owned(), copy.display().to_string()]);
    clean.expect_code(0);
    assert!(!clean.stdout.contains("state"), "{}", clean.stdout);
    verify(&copy);
}

/// A SOURCE that holds no transcript of the format asked for (the wrong
/// format, the wrong folder) imports nothing, exit 0, and says so on
/// stderr, naming the format that would read it.
#[test]
fn a_source_without_a_transcript_of_the_format_says_so() {
    let dir = temp();
    let store = dir.path().join("audit");
    let run = import("codex", &[fixtures().join("claude/v1.0")], &store);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("no Codex rollout (rollout-*.jsonl) found, plain or .zst; for Claude Code"),
        "{}",
        run.stderr
    );
    let run = import("claude", &[fixtures().join("claude/v1.0")], &store);
    run.expect_code(0);
    assert!(
        !run.stderr.contains("found, plain or .zst"),
        "{}",
        run.stderr
    );
}
