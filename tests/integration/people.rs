//! The command line as its users meet it, through the real `sessionlog`
//! binary: the example sessions, replay, tail -f, salvage, stats, the HTML
//! report (opened in headless Chromium), help, completions and the README.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sessionlog_schema::{EventRecord, SessionHeader, SessionId};

use crate::cli_support::{run, run_with_stdin, sessionlog, workspace_root, Follower, Run};
use crate::faults::ok;

#[allow(dead_code)]
#[path = "../../examples/write_sessions.rs"]
mod write_sessions;

const EXAMPLES: [&str; 5] = [
    "approval",
    "auto-review",
    "lead",
    "lead-tests",
    "pending-review",
];

fn examples() -> PathBuf {
    workspace_root().join("examples/sessions")
}

fn example(name: &str) -> PathBuf {
    examples().join(format!("{name}.jsonl"))
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|error| panic!("write {}: {error}", path.display()))
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{line:?}: {error}")))
        .collect()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|error| panic!("{text:?}: {error}"))
}

/// A log written by hand with our codec, rules unchecked: `(type, data)`
/// events after a root header.
fn hand_written_log(path: &Path, id: &str, events: &[(&str, &str)]) {
    let id = SessionId::parse(id).unwrap_or_else(|error| panic!("{error}"));
    let header = SessionHeader::root(id.clone(), 1_714_554_000_000, "/work".to_owned());
    let mut text = header.encode();
    for (index, (event_type, data)) in events.iter().enumerate() {
        let seq = index as u64 + 1;
        text.push_str(
            &EventRecord::new(seq, 1_714_554_000_000 + seq, None, event_type, data).encode(&id),
        );
    }
    write(path, text.as_bytes());
}

/// The byte offset where 1-based `line` starts.
fn line_offset(bytes: &[u8], line: usize) -> usize {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .nth(line - 2)
        .map_or_else(|| panic!("no line {line}"), |(index, _)| index + 1)
}

/// A copy of `name` whose `line` has one byte changed (its CRC no longer
/// matches), so intact records after it make the log corrupt.
fn corrupt_copy(dir: &Path, name: &str, line: usize) -> PathBuf {
    let mut bytes = read(&example(name));
    let at = line_offset(&bytes, line) + 10;
    bytes[at] ^= 0x01;
    let path = dir.join(format!("{name}.jsonl"));
    write(&path, &bytes);
    path
}

/// A copy of `name` with half a record appended, as a crash leaves it.
fn torn_copy(dir: &Path, name: &str) -> PathBuf {
    let mut bytes = read(&example(name));
    bytes.extend_from_slice(br#"{"seq":99,"ts":1714554000000,"type":"turn/st"#);
    let path = dir.join(format!("{name}.jsonl"));
    write(&path, &bytes);
    path
}

// ---------------------------------------------------------------------------
// The example sessions
// ---------------------------------------------------------------------------

#[test]
fn example_sessions_verify_clean() {
    run(["verify", &examples().display().to_string()]).expect_code(0);
    for name in EXAMPLES {
        run(["verify", &example(name).display().to_string()]).expect_code(0);
    }
}

#[test]
fn example_sessions_are_what_the_writer_program_writes() {
    let dir = temp();
    let folder = dir.path().join("sessions");
    write_sessions::write_example_sessions(&folder)
        .unwrap_or_else(|error| panic!("write the examples: {error}"));
    for name in EXAMPLES {
        let file = format!("{name}.jsonl");
        assert!(
            read(&folder.join(&file)) == read(&example(name)),
            "examples/sessions/{file} differs from what examples/write_sessions.rs writes; regenerate it"
        );
    }
    let written = std::fs::read_dir(&folder).map_or(0, |entries| entries.count());
    assert_eq!(written, EXAMPLES.len());
}

#[test]
fn list_tree_shows_the_child_under_its_parent() {
    let listed = run(["list", &examples().display().to_string(), "--tree"]);
    listed.expect_code(0);
    assert!(
        listed.stdout.contains("lead\n└── lead-tests\n"),
        "{}",
        listed.stdout
    );
}

// ---------------------------------------------------------------------------
// replay
// ---------------------------------------------------------------------------

/// Replays `name` whole on a terminal wide enough for no line to wrap.
fn check_replay(name: &str, expect: &[&str]) {
    let mut command = sessionlog(["replay", &example(name).display().to_string(), "--full"]);
    command.env("COLUMNS", "1000");
    let replayed = crate::cli_support::run_command(command, None);
    replayed.expect_code(0);
    assert!(
        !replayed.stdout.contains('\x1b'),
        "NO_COLOR is set: {}",
        replayed.stdout
    );
    for line in expect {
        assert!(
            replayed.stdout.contains(line),
            "replay of {name} lacks {line:?}:\n{}",
            replayed.stdout
        );
    }
}

#[test]
fn replay_tells_the_story_of_each_example() {
    check_replay(
        "auto-review",
        &[
            "── 2024-05-01 (UTC)\n09:00:00.000     0 header            session auto-review — root session",
            "⇒ preset auto",
            "[constraint] system via instructions (AGENTS.md)",
            "[user] user via user: \"The ledger test fails",
            "[excluded] system via context (git-status)",
            "call call-1 shell({\"command\":\"cargo test -p ledger 2>&1 | tail -n 20\"}) in step step-1",
            "DENIED by Auto review: call call-2 (shell): \"Uploads the user's private SSH key",
            "the model saw: Auto review rejected tool \"shell\"; its body was not executed",
            "--data-binary @$HOME/.ssh/id_ed25519\"}) in step step-1",
            "not needed for the task.\"; the model saw: Auto review rejected tool \"shell\"; its body was not executed",
        ],
    );
    check_replay(
        "approval",
        &[
            "approval approval-1 asked for shell (call call-1): \"needs network access outside the sandbox\"",
            "⇒ pending approval-1",
            "approval approval-2 decided: rejected",
            "settled error: ApprovalRejectedError APPROVAL_REJECTED",
            "notice The approval policy changed from \"ask\" to \"never\" (changed by the user).",
            // A checkpoint is a fact, as the reviewer is shown it.
            "[fact] checkpoint through seq 15",
            "x-runtime/usage   unknown type, kept as is",
        ],
    );
    check_replay("lead", &["child session lead-tests created (one-shot)"]);
    check_replay(
        "lead-tests",
        &[
            "child of lead (seed 7 events, depth 1)",
            "[direct-parent] user via agent-message from lead",
            "checkpoint through seq 17",
        ],
    );
}

#[test]
fn replay_colours_only_when_asked_or_on_a_terminal() {
    let path = example("auto-review").display().to_string();
    let always = run(["replay", &path, "--color", "always"]);
    always.expect_code(0);
    assert!(always.stdout.contains("\x1b[1;31mDENIED by Auto review"));
    let piped = run_command_without_no_color(&["replay", &path]);
    assert!(
        !piped.stdout.contains('\x1b'),
        "stdout is a pipe: no colour"
    );
}

fn run_command_without_no_color(args: &[&str]) -> Run {
    let mut command = sessionlog(args);
    command.env_remove("NO_COLOR");
    crate::cli_support::run_command(command, None)
}

#[test]
fn replay_json_is_one_object_per_event_with_projection_changes() {
    let replayed = run([
        "replay",
        &example("approval").display().to_string(),
        "--json",
    ]);
    replayed.expect_code(0);
    let entries = json_lines(&replayed.stdout);
    let seqs: Vec<u64> = entries.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (0..=17).collect::<Vec<_>>());
    assert_eq!(entries[0]["type"], "header");
    assert_eq!(entries[0]["projection"]["preset"], "workspace-write");
    assert_eq!(entries[1]["projection"]["openTurn"], "turn-1");
    assert_eq!(entries[2]["authority"], "user");
    assert!(
        entries[2].get("projection").is_none(),
        "a message changes no projection"
    );
    assert_eq!(
        entries[6]["projection"]["pendingApprovals"],
        serde_json::json!(["approval-1"])
    );
    assert_eq!(
        entries[15]["projection"]["notice"],
        "The approval policy changed from \"ask\" to \"never\" (changed by the user)."
    );
    assert_eq!(entries[2]["time"], "2024-05-01T10:00:01.010Z");
    assert!(entries.iter().all(|e| e.get("violation").is_none()));
    let checkpoints: Vec<&serde_json::Value> = entries
        .iter()
        .filter(|entry| entry["type"] == "checkpoint")
        .collect();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0]["authority"], "fact");
}

#[test]
fn replay_window_folds_from_the_start_but_shows_from_and_stops_at() {
    let replayed = run([
        "replay",
        &example("approval").display().to_string(),
        "--json",
        "--from",
        "7",
        "--at",
        "9",
    ]);
    replayed.expect_code(0);
    let entries = json_lines(&replayed.stdout);
    let seqs: Vec<u64> = entries.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, vec![0, 7, 8, 9]);
    assert_eq!(
        entries[1]["projection"]["openStep"], "step-1",
        "the first shown carries it all"
    );
    run([
        "replay",
        &example("approval").display().to_string(),
        "--at",
        "18",
    ])
    .expect_code(1);
}

#[test]
fn replay_marks_each_violation_inline_and_exits_4() {
    let dir = temp();
    let path = dir.path().join("broken.jsonl");
    hand_written_log(
        &path,
        "broken",
        &[
            ("step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            ("turn/start", r#"{"turnId":"t1"}"#),
            ("approval/policy", r#"{"policy":"sometimes"}"#),
            ("turn/end", r#"{"turnId":"t1"}"#),
        ],
    );
    let replayed = run(["replay", &path.display().to_string()]);
    replayed.expect_code(4);
    assert_eq!(
        replayed
            .stdout
            .lines()
            .filter(|line| line.trim_start().starts_with("✗ "))
            .count(),
        2,
        "{}",
        replayed.stdout
    );
    assert!(replayed.stdout.contains("✗ rule violation:"));
    assert!(replayed
        .stdout
        .contains("✗ vocabulary violation: data.policy"));
    assert!(
        replayed.stdout.contains("turn t1 closes"),
        "the whole log is shown"
    );
    let json_run = run(["replay", &path.display().to_string(), "--json"]);
    json_run.expect_code(4);
    let marked: Vec<u64> = json_lines(&json_run.stdout)
        .iter()
        .filter(|e| e.get("violation").is_some())
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(marked, vec![1, 3]);
}

#[test]
fn replay_refuses_corruption_and_uses_the_good_prefix_of_a_torn_log() {
    let dir = temp();
    let corrupt = corrupt_copy(dir.path(), "auto-review", 5);
    let refused = run(["replay", &corrupt.display().to_string()]);
    refused.expect_code(2);
    assert!(
        refused.stdout.is_empty(),
        "nothing is shown of a corrupt log"
    );
    assert!(refused.stderr.contains("line 5"), "{}", refused.stderr);

    let other = temp();
    let torn = torn_copy(other.path(), "auto-review");
    let replayed = run(["replay", &torn.display().to_string()]);
    replayed.expect_code(0);
    assert!(replayed.stderr.contains("torn tail"), "{}", replayed.stderr);
    assert!(replayed.stdout.contains("turn turn-1 closes"));
}

#[test]
fn replay_escapes_terminal_controls_in_log_text() {
    let dir = temp();
    let path = dir.path().join("escape.jsonl");
    hand_written_log(
        &path,
        "escape",
        &[(
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a\u001b[2Jb\u202ec"}]}"#,
        )],
    );
    let replayed = run(["replay", &path.display().to_string()]);
    replayed.expect_code(0);
    assert!(!replayed.stdout.contains('\x1b'));
    assert!(
        replayed.stdout.contains(r"a\u{1b}[2Jb\u{202e}c"),
        "{}",
        replayed.stdout
    );
}

// ---------------------------------------------------------------------------
// salvage
// ---------------------------------------------------------------------------

fn salvage(file: &Path, out: &Path) -> serde_json::Value {
    let salvaged = run([
        "salvage",
        &file.display().to_string(),
        &out.display().to_string(),
        "--json",
    ]);
    salvaged.expect_code(0);
    run(["verify", &out.display().to_string()]).expect_code(0);
    json(&salvaged.stdout)
}

/// Salvage names OUT's missing folder, not a temporary file of its own;
/// into a folder that is a store, under another name than its session's,
/// it warns that `verify` of the store will call the log corrupt; beside
/// lone logs of any names it says nothing.
#[test]
fn salvage_names_a_missing_folder_and_warns_of_a_misnamed_log_in_a_store() {
    let dir = temp();
    let store = dir.path().join("store");
    let store_text = store.display().to_string();
    run(["create", &store_text, "--session", "s"]).expect_code(0);
    let log = store.join("s.jsonl").display().to_string();
    let missing = dir.path().join("nowhere/x.jsonl").display().to_string();
    let refused = run(["salvage", &log, &missing]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("its folder") && !refused.stderr.contains(".tmp-"),
        "{}",
        refused.stderr
    );
    let misnamed = store.join("s2.jsonl").display().to_string();
    let warned = run(["salvage", &log, &misnamed]);
    warned.expect_code(0);
    assert!(
        warned.stderr.contains("will report it as corrupt")
            && warned.stderr.contains("name it s.jsonl"),
        "{}",
        warned.stderr
    );
    let lone = dir.path().join("lone");
    ok(std::fs::create_dir(&lone));
    ok(std::fs::copy(store.join("s.jsonl"), lone.join("bad.jsonl")));
    let beside = run([
        "salvage",
        &lone.join("bad.jsonl").display().to_string(),
        &lone.join("out.jsonl").display().to_string(),
    ]);
    beside.expect_code(0);
    assert!(beside.stderr.is_empty(), "{}", beside.stderr);
}

#[test]
fn salvage_of_a_corrupt_log_keeps_the_records_before_the_damage() {
    let dir = temp();
    let file = corrupt_copy(dir.path(), "auto-review", 6);
    let before = read(&file);
    run(["verify", &file.display().to_string()]).expect_code(2);
    let out = dir.path().join("salvaged.jsonl");
    let report = salvage(&file, &out);
    assert_eq!(read(&file), before, "FILE is never modified");
    assert_eq!(report["events"], 4);
    assert_eq!(report["lastSeq"], 4);
    let left = &report["leftBehind"];
    assert_eq!(left["cause"], "corrupt");
    assert_eq!(left["line"], 6);
    let offset = line_offset(&before, 6);
    assert_eq!(left["offset"], offset as u64);
    assert_eq!(left["bytes"], (before.len() - offset) as u64);
    assert_eq!(read(&out), before[..offset], "OUT is FILE's good prefix");
}

#[test]
fn salvage_of_a_torn_log_drops_only_the_tail() {
    let dir = temp();
    let file = torn_copy(dir.path(), "approval");
    let before = read(&file);
    let out = dir.path().join("salvaged.jsonl");
    let report = salvage(&file, &out);
    assert_eq!(read(&file), before);
    assert_eq!(report["events"], 17);
    assert_eq!(report["leftBehind"]["cause"], "torn-tail");
    assert_eq!(report["leftBehind"]["line"], 19);
    assert_eq!(read(&out), read(&example("approval")));
}

#[test]
fn salvage_cuts_a_prefix_that_breaks_the_rules_before_the_first_violation() {
    let dir = temp();
    let file = dir.path().join("rules.jsonl");
    hand_written_log(
        &file,
        "rules",
        &[
            ("turn/start", r#"{"turnId":"t1"}"#),
            ("step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            ("step/end", r#"{"stepId":"s9"}"#),
            ("step/end", r#"{"stepId":"s1"}"#),
        ],
    );
    let out = dir.path().join("salvaged.jsonl");
    let report = salvage(&file, &out);
    assert_eq!(report["events"], 2);
    assert_eq!(report["leftBehind"]["cause"], "rule-violation");
    assert_eq!(report["leftBehind"]["line"], 4);
    let human = run([
        "salvage",
        &file.display().to_string(),
        &dir.path().join("again.jsonl").display().to_string(),
    ]);
    human.expect_code(0);
    assert!(human.stdout.contains("left behind:"), "{}", human.stdout);
}

#[test]
fn salvage_refuses_an_existing_out() {
    let dir = temp();
    let file = torn_copy(dir.path(), "lead");
    let out = dir.path().join("taken.jsonl");
    write(&out, b"keep me");
    run([
        "salvage",
        &file.display().to_string(),
        &out.display().to_string(),
    ])
    .expect_code(1);
    assert_eq!(read(&out), b"keep me");
}

// ---------------------------------------------------------------------------
// tail
// ---------------------------------------------------------------------------

#[test]
fn tail_prints_the_last_events_or_from_a_seq() {
    let path = example("approval").display().to_string();
    let last = run(["tail", &path, "-n", "3"]);
    last.expect_code(0);
    let seqs: Vec<u64> = json_lines(&last.stdout)
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(seqs, vec![15, 16, 17]);
    let exported = run(["export", &path]);
    let export_lines: Vec<&str> = exported.stdout.lines().collect();
    assert_eq!(last.stdout.lines().collect::<Vec<_>>(), export_lines[15..]);
    let from = run(["tail", &path, "--from", "16", "--json"]);
    from.expect_code(0);
    let entries = json_lines(&from.stdout);
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[1]["summary"],
        "unknown type, kept as is: {\"inputTokens\":18342,\"outputTokens\":1207}"
    );
}

fn append(store: &str, lines: &str) {
    run_with_stdin(["append", store, "--session", "s1"], lines).expect_code(0);
}

#[test]
fn tail_follows_appends_by_other_processes_across_torn_tail_truncation() {
    for poll_only in [false, true] {
        tail_follows_across_torn_tail_truncation(poll_only);
    }
}

fn tail_follows_across_torn_tail_truncation(poll_only: bool) {
    let dir = temp();
    let store = dir.path().join("store");
    let store_arg = store.display().to_string();
    run(["create", &store_arg, "--session", "s1", "--cwd", "/w"]).expect_code(0);
    append(
        &store_arg,
        "{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n",
    );
    let follower = Follower::start(&["tail", &store_arg, "--session", "s1", "-f"], poll_only);
    assert_eq!(follower.next_seqs(1), vec![1]);

    append(
        &store_arg,
        "{\"type\":\"step/start\",\"data\":{\"stepId\":\"s1\",\"turnId\":\"t1\"}}\n{\"type\":\"x/note\",\"data\":{\"n\":1}}\n",
    );
    assert_eq!(follower.next_seqs(2), vec![2, 3]);

    // A crash mid-append leaves half a record; tail must not print it.
    // (Appended, as a writer leaves it: a rewrite of the whole file would
    // show a watching follower an empty file for a moment.)
    let log = store.join("s1.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap_or_else(|error| panic!("open {}: {error}", log.display()));
    file.write_all(b"{\"seq\":4,\"ts\":1,\"type\":\"x/no")
        .unwrap_or_else(|error| panic!("append to {}: {error}", log.display()));
    drop(file);
    follower.assert_quiet();

    // The next writer truncates the torn tail and appends seq 4 for real.
    append(&store_arg, "{\"type\":\"x/note\",\"data\":{\"n\":2}}\n");
    assert_eq!(follower.next_seqs(1), vec![4]);
    append(
        &store_arg,
        "{\"type\":\"step/end\",\"data\":{\"stepId\":\"s1\"}}\n",
    );
    assert_eq!(follower.next_seqs(1), vec![5]);
    follower.assert_quiet();
}

#[test]
fn tail_follows_a_sqlite_session() {
    for poll_only in [false, true] {
        tail_follows_a_database_session(poll_only);
    }
}

fn tail_follows_a_database_session(poll_only: bool) {
    let dir = temp();
    let store_arg = dir.path().join("sessions.db").display().to_string();
    run(["create", &store_arg, "--session", "s1", "--cwd", "/w"]).expect_code(0);
    append(
        &store_arg,
        "{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n",
    );
    let follower = Follower::start(
        &["tail", &store_arg, "--session", "s1", "-f", "--from", "1"],
        poll_only,
    );
    assert_eq!(follower.next_seqs(1), vec![1]);
    append(
        &store_arg,
        "{\"type\":\"x/note\",\"data\":{}}\n{\"type\":\"turn/end\",\"data\":{\"turnId\":\"t1\"}}\n",
    );
    assert_eq!(follower.next_seqs(2), vec![2, 3]);
    follower.assert_quiet();
}

#[test]
fn tail_follows_from_the_last_n_events_none_printed_with_n_0() {
    // `-n N -f` prints the last N events, then only what is appended after
    // them: with `-n 0`, nothing of what was there, in a folder of logs
    // and in a database (whose first read and follow are its own).
    for (name, file) in [("JSONL", "store"), ("SQLite", "sessions.db")] {
        let dir = temp();
        let store_arg = dir.path().join(file).display().to_string();
        run(["create", &store_arg, "--session", "s1", "--cwd", "/w"]).expect_code(0);
        append(
            &store_arg,
            "{\"type\":\"x/note\",\"data\":{}}\n{\"type\":\"x/note\",\"data\":{}}\n{\"type\":\"x/note\",\"data\":{}}\n",
        );
        let none = Follower::start(
            &["tail", &store_arg, "--session", "s1", "-f", "-n", "0"],
            false,
        );
        let two = Follower::start(
            &["tail", &store_arg, "--session", "s1", "-f", "-n", "2"],
            false,
        );
        assert_eq!(two.next_seqs(2), vec![2, 3], "{name}");
        none.assert_quiet();
        none.wait_until_waiting();
        two.wait_until_waiting();
        append(&store_arg, "{\"type\":\"x/note\",\"data\":{}}\n");
        assert_eq!(none.next_seqs(1), vec![4], "{name}");
        assert_eq!(two.next_seqs(1), vec![4], "{name}");
        none.assert_quiet();
        two.assert_quiet();
    }
}

#[test]
fn list_tree_names_orphans_and_unreadable_sessions() {
    let dir = temp();
    write(
        &dir.path().join("lead-tests.jsonl"),
        &read(&example("lead-tests")),
    );
    write(&dir.path().join("bad.jsonl"), b"garbage\n");
    let listed = run(["list", &dir.path().display().to_string(), "--tree"]);
    listed.expect_code(2);
    assert!(listed
        .stdout
        .contains("lead-tests  (child of lead, not in this store)"));
    assert!(listed.stdout.contains("bad  (unreadable: "));
}

// ---------------------------------------------------------------------------
// stats
// ---------------------------------------------------------------------------

#[test]
fn stats_counts_sessions_events_types_bytes_and_torn_tails() {
    let counted = run(["stats", &examples().display().to_string(), "--json"]);
    counted.expect_code(0);
    let report = json(&counted.stdout);
    let totals = &report["totals"];
    assert_eq!(totals["sessions"], 5);
    assert_eq!(totals["events"], 73);
    assert_eq!(totals["tornTails"], 0);
    assert_eq!(
        totals["unknownTypes"],
        serde_json::json!({"x-runtime/usage": 1})
    );
    assert_eq!(totals["eventsByType"]["tool/start"], 8);
    assert_eq!(totals["eventsByType"]["child/created"], 1);
    let bytes: u64 = EXAMPLES
        .iter()
        .map(|name| read(&example(name)).len() as u64)
        .sum();
    assert_eq!(totals["bytes"], bytes);

    let dir = temp();
    let torn = torn_copy(dir.path(), "lead");
    let one = json(
        &run(["stats", &torn.display().to_string(), "--json"])
            .expect_code(0)
            .stdout,
    );
    assert_eq!(one["totals"]["tornTails"], 1);
    assert_eq!(one["sessions"][0]["tornTailBytes"], 44);
    let human = run(["stats", &examples().display().to_string()]);
    assert!(human.stdout.contains("x-runtime/usage") && human.stdout.contains("(unknown type)"));
}

// ---------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------

/// A store holding the examples plus a session whose messages try to inject
/// markup into the report.
fn hostile_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    std::fs::create_dir(&store).unwrap_or_else(|error| panic!("mkdir: {error}"));
    for name in EXAMPLES {
        write(&store.join(format!("{name}.jsonl")), &read(&example(name)));
    }
    let store_arg = store.display().to_string();
    run(["create", &store_arg, "--session", "s1", "--cwd", "/w"]).expect_code(0);
    let hostile = serde_json::json!({
        "type": "message",
        "data": {"role": "user", "source": {"kind": "user"}, "content": [{"type": "text",
            "text": "<script>document.body.setAttribute('data-pwned','1')</script><img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"}]}
    });
    let child = serde_json::json!({
        "type": "child/created",
        "data": {"childSessionId": "\"><script>document.body.setAttribute('data-pwned','3')</script>", "mode": "one-shot"}
    });
    append(&store_arg, &format!("{hostile}\n{child}\n"));
    store
}

/// Every element id of a report is its own, whatever the session ids:
/// a session's section and another session's row never share one, so an
/// index link lands on the session it names.
#[test]
fn a_reports_element_ids_are_unique_whatever_the_session_ids() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    let store_arg = store.display().to_string();
    for session in ["session-x", "x-seq-1", "seq-1-x"] {
        run(["create", &store_arg, "--session", session, "--cwd", "/w"]).expect_code(0);
        run_with_stdin(
            ["append", &store_arg, "--session", session],
            "{\"type\":\"x-a/n\",\"data\":{}}\n",
        )
        .expect_code(0);
    }
    let html = report(&store, &folder.path().join("r.html"));
    let ids: Vec<&str> = html
        .split(" id=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(ids.len() >= 6, "{ids:?}");
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    for session in ["session-x", "x-seq-1", "seq-1-x"] {
        assert!(
            ids.contains(&format!("session-{session}").as_str()),
            "{ids:?}"
        );
    }
}

fn report(store: &Path, out: &Path) -> String {
    run([
        "report",
        &store.display().to_string(),
        "--html",
        &out.display().to_string(),
    ])
    .expect_code(0);
    String::from_utf8(read(out)).unwrap_or_else(|error| panic!("the report is UTF-8: {error}"))
}

/// What sits at the report's name is replaced, never written through: a
/// hard link to another file keeps that file as it was, and a FIFO (which
/// an open for writing waits on for ever) is replaced too.
#[test]
fn report_replaces_what_sits_at_its_name_and_never_writes_through_it() {
    use std::os::unix::fs::MetadataExt;
    let dir = temp();
    let store = hostile_store(dir.path());
    let victim = dir.path().join("victim.txt");
    write(&victim, b"not a report\n");
    let linked = dir.path().join("linked.html");
    std::fs::hard_link(&victim, &linked).unwrap_or_else(|error| panic!("link: {error}"));
    let html = report(&store, &linked);
    assert!(html.contains("data-report"), "the report is at its name");
    assert_eq!(
        String::from_utf8_lossy(&read(&victim)),
        "not a report\n",
        "the other name keeps its file"
    );
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
            .mode()
            & 0o7777
    };
    assert_eq!(mode(&linked), 0o600);
    assert_ne!(mode(&victim), 0o600, "the other file's mode is its own");

    let fifo = dir.path().join("fifo.html");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap_or_else(|error| panic!("mkfifo: {error}"));
    assert!(made.success());
    let args = [
        "report",
        &store.display().to_string(),
        "--html",
        &fifo.display().to_string(),
    ]
    .map(str::to_owned);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let finished = crate::cli_support::run_within(&args, std::time::Duration::from_secs(60));
    assert_eq!(
        finished.map(|(code, _)| code),
        Some(0),
        "the report over a FIFO"
    );
    assert!(std::fs::metadata(&fifo).is_ok_and(|metadata| metadata.is_file()));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap_or_else(|error| panic!("list: {error}"))
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The longest name a file system allows is a name for the report.
    let longest = dir.path().join(format!("{}.html", "z".repeat(250)));
    let html = report(&store, &longest);
    assert!(html.contains("data-report"));
}

#[test]
fn report_is_self_contained_and_escapes_log_text() {
    let dir = temp();
    let store = hostile_store(dir.path());
    let html = report(&store, &dir.path().join("report.html"));
    for attribute in [
        "src=\"http",
        "href=\"http",
        "src='http",
        "href='http",
        "src=http",
        "href=http",
        "url(http",
        "@import",
    ] {
        assert!(!html.contains(attribute), "the report loads {attribute}…");
    }
    assert!(html.contains("default-src 'none'"));
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the report's own script"
    );
    assert!(html.contains(
        "&lt;script&gt;document.body.setAttribute(&#39;data-pwned&#39;,&#39;1&#39;)&lt;/script&gt;"
    ));
    assert!(html.contains("&lt;img src=x onerror="));
    for session in ["auto-review", "approval", "lead", "lead-tests", "s1"] {
        assert!(html.contains(&format!(
            "<section class=\"session\" id=\"session-{session}\">"
        )));
    }
    assert!(html.contains("<a class=\"child-link\" href=\"#session-lead-tests\">"));
    assert!(html.contains("<dd class=\"parent\"><a href=\"#session-lead\">lead</a></dd>"));
}

/// The index counts a session's own approvals and denials: a child's
/// inherited ones are its parent's, counted there (they were counted in
/// both, so an auditor adding the index up counted each twice).
#[test]
fn the_report_index_counts_a_childs_own_approvals_not_its_parents() {
    let dir = temp();
    let store = dir.path().join("logs");
    ok(std::fs::create_dir(&store));
    ok(std::fs::copy(
        example("approval"),
        store.join("approval.jsonl"),
    ));
    let store_arg = store.display().to_string();
    run([
        "fork",
        &store_arg,
        "--session",
        "approval",
        "--child",
        "c",
        "--prompt",
        "hi",
    ])
    .expect_code(0);
    let html = report(&store, &dir.path().join("report.html"));
    let counts = |session: &str| {
        let link =
            format!("<li><a href=\"#session-{session}\">{session}</a> <span class=\"counts\">");
        let at = html.find(&link).map_or(0, |at| at + link.len());
        html[at..].split('<').next().unwrap_or_default().to_owned()
    };
    assert_eq!(
        counts("approval"),
        "17 events, 0 denials, 2 approvals asked, 0 violations"
    );
    assert_eq!(
        counts("c"),
        "18 events (17 inherited), 0 denials, 0 approvals asked, 0 violations"
    );
}

#[test]
fn report_of_a_rule_breaking_log_marks_it_and_of_a_corrupt_one_refuses() {
    let dir = temp();
    let path = dir.path().join("broken.jsonl");
    hand_written_log(&path, "broken", &[("turn/end", r#"{"turnId":"t1"}"#)]);
    let out = dir.path().join("broken.html");
    run([
        "report",
        &path.display().to_string(),
        "--html",
        &out.display().to_string(),
    ])
    .expect_code(4);
    let html = String::from_utf8(read(&out)).unwrap_or_default();
    assert!(html.contains("class=\"entry kind-structure highlight violation\""));
    let corrupt = corrupt_copy(dir.path(), "auto-review", 5);
    let refused_out = dir.path().join("corrupt.html");
    run([
        "report",
        &corrupt.display().to_string(),
        "--html",
        &refused_out.display().to_string(),
    ])
    .expect_code(2);
    assert!(!refused_out.exists());
}

/// Debian's Chromium: the test that needs it is run on purpose (`.ci/run`
/// installs it and runs that test with `--ignored`), so its absence is a
/// failure that says what to install.
fn chromium() -> PathBuf {
    let path = PathBuf::from("/usr/bin/chromium");
    assert!(
        path.is_file(),
        "/usr/bin/chromium is missing: the HTML report test needs it (apt-get install chromium, or run .ci/run)"
    );
    path
}

#[test]
#[ignore = "opens the HTML report in headless Chromium (/usr/bin/chromium); .ci/run runs it with --ignored"]
fn report_renders_in_a_headless_browser() {
    let browser = chromium();
    let dir = temp();
    let store = hostile_store(dir.path());
    let out = dir.path().join("report.html");
    report(&store, &out);
    let profile = dir.path().join("chromium-profile");
    let output = std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            // The page's console on stderr: where a refused style or
            // script says so.
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", out.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("run chromium: {error}"));
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        dom.contains("data-report=\"ready\""),
        "the report's script ran (status {}):\n{}\n{}",
        output.status,
        dom,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!dom.contains("data-pwned=\""), "log text ran as markup");
    // The page allows its own style and script by their hashes only: both
    // apply, and nothing else was asked for.
    let console = String::from_utf8_lossy(&output.stderr);
    assert!(
        !console.contains("Content Security Policy"),
        "the page broke its own policy:\n{console}"
    );
    assert!(dom.contains("<table class=\"timeline\">"));
    assert!(dom.contains("<tr class=\"entry kind-denial highlight\" id=\"seq-14-auto-review\""));
    assert!(dom.contains("DENIED by Auto review"));
    assert!(dom.contains("<tr class=\"entry kind-approval-asked highlight\" id=\"seq-6-approval\""));
    assert!(dom.contains("&lt;script&gt;document.body.setAttribute"));
}

// ---------------------------------------------------------------------------
// Full evidence, and a timeline that fits the terminal
// ---------------------------------------------------------------------------

/// Replays `name` laid out for `columns`, with `extra` arguments.
fn replay_at(columns: usize, name: &str, extra: &[&str]) -> Run {
    let path = example(name).display().to_string();
    let mut args = vec!["replay", path.as_str()];
    args.extend_from_slice(extra);
    let mut command = sessionlog(args);
    command.env("COLUMNS", columns.to_string());
    crate::cli_support::run_command(command, None)
}

/// A `COLUMNS` as wide as a number can be is laid out as the widest line
/// allowed, never an overflow (a debug build panicked multiplying it).
#[test]
fn replay_takes_any_columns_a_script_sets() {
    let widest = replay_at(usize::MAX, "auto-review", &[]);
    widest.expect_code(0);
    assert_eq!(
        widest.stdout,
        replay_at(100_000, "auto-review", &[]).stdout,
        "laid out as the widest allowed"
    );
}

/// Whether `line` opens an entry: it starts with a time of day.
fn opens_entry(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.len() > 13
        && bytes[2] == b':'
        && bytes[5] == b':'
        && bytes[8] == b'.'
        && bytes[..12].iter().filter(|b| b.is_ascii_digit()).count() == 9
}

/// The text of each entry of a terminal timeline (its first line after the
/// type column and its continuation lines), by the order of the entries.
fn entry_texts(stdout: &str, indent: usize) -> Vec<Vec<String>> {
    let mut entries: Vec<Vec<String>> = Vec::new();
    for line in stdout.lines() {
        if opens_entry(line) {
            let text: String = line.chars().skip(indent).collect();
            entries.push(vec![text]);
            continue;
        }
        let Some(entry) = entries.last_mut() else {
            continue;
        };
        let rest = line.trim_start();
        let note = rest.starts_with('+') && rest.ends_with(" characters (--full)");
        let mark = rest.starts_with('⇒') || rest.starts_with('✗');
        let continuation = line.len() - rest.len() == indent && !mark && !note;
        if continuation {
            entry.push(rest.to_owned());
        }
    }
    entries
}

fn without_spaces(text: &str) -> String {
    text.chars().filter(|c| *c != ' ').collect()
}

#[test]
fn replay_fits_80_and_120_columns_wrapping_under_the_text_column() {
    let json = run([
        "replay",
        &example("auto-review").display().to_string(),
        "--json",
    ]);
    let summaries: Vec<String> = json_lines(&json.stdout)
        .iter()
        .map(|entry| match entry["authority"].as_str() {
            Some(authority) => format!("[{authority}] {}", entry["summary"].as_str().unwrap_or("")),
            None => entry["summary"].as_str().unwrap_or("").to_owned(),
        })
        .collect();
    // time (12) + seq (5) + type (17) and a space after each.
    let indent = 37;
    for columns in [80, 120] {
        for full in [true, false] {
            let extra: &[&str] = if full { &["--full"] } else { &[] };
            let replayed = replay_at(columns, "auto-review", extra);
            replayed.expect_code(0);
            for line in replayed.stdout.lines() {
                assert!(
                    line.chars().count() <= columns,
                    "a line wider than {columns} columns: {line:?}"
                );
                assert!(
                    opens_entry(line)
                        || line.starts_with("── 2024-05-01 (UTC)")
                        || line.starts_with(&" ".repeat(indent)),
                    "a line that is neither an entry, a date nor indented under the text column: {line:?}"
                );
            }
            let texts = entry_texts(&replayed.stdout, indent);
            assert_eq!(texts.len(), summaries.len(), "{}", replayed.stdout);
            for (lines, summary) in texts.iter().zip(&summaries) {
                let shown = without_spaces(&lines.join(""));
                if full || !shown.ends_with('…') {
                    assert_eq!(
                        shown,
                        without_spaces(summary),
                        "wrapping lost or changed text"
                    );
                } else {
                    assert_eq!(lines.len(), 4, "clipped to four lines: {lines:?}");
                    let kept = shown.trim_end_matches('…');
                    assert!(without_spaces(summary).starts_with(kept), "{lines:?}");
                }
            }
            let evidence = "@$HOME/.ssh/id_ed25519\"})";
            let whole = without_spaces(&replayed.stdout).contains(&without_spaces(evidence));
            assert!(
                whole || !full,
                "--full shows the whole call at {columns} columns"
            );
        }
    }
    // At 80 columns the denial takes more than four lines.
    let clipped = replay_at(80, "auto-review", &[]);
    assert!(
        clipped.stdout.contains(" characters (--full)"),
        "a clipped summary says what --full adds:\n{}",
        clipped.stdout
    );
}

#[test]
fn json_outputs_carry_the_whole_evidence() {
    let path = example("auto-review").display().to_string();
    let reason = "\"Uploads the user's private SSH key to an external paste site: data exfiltration, not needed for the task.\"";
    let replayed = json_lines(&run(["replay", &path, "--json"]).expect_code(0).stdout);
    let tailed = json_lines(
        &run(["tail", &path, "--json", "-n", "100"])
            .expect_code(0)
            .stdout,
    );
    for entries in [&replayed, &tailed] {
        let by_seq = |seq: u64| {
            entries
                .iter()
                .find(|entry| entry["seq"] == seq)
                .and_then(|entry| entry["summary"].as_str())
                .unwrap_or_else(|| panic!("no entry {seq}"))
                .to_owned()
        };
        assert!(by_seq(13).contains("--data-binary @$HOME/.ssh/id_ed25519\"}) in step step-1"));
        assert!(by_seq(14).contains(reason), "{}", by_seq(14));
        assert!(!entries.iter().any(|entry| entry["summary"]
            .as_str()
            .is_some_and(|summary| summary.contains('…'))));
    }
    // replay knows the call's tool, so it adds what the model was told.
    let denial = replayed[14]["summary"].as_str().unwrap_or_default();
    assert!(denial.ends_with("its body was not executed"), "{denial}");
}

#[test]
fn replay_help_and_the_report_explain_the_authority_labels_and_colours() {
    let help = run(["replay", "--help"]).expect_code(0).stdout.clone();
    let dir = temp();
    let html = report(&examples(), &dir.path().join("report.html"));
    for label in ["user", "direct-parent", "fact", "constraint", "excluded"] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(label)),
            "replay --help explains {label}:\n{help}"
        );
        assert!(
            html.contains(&format!(
                "<dt><span class=\"authority authority-{label}\">{label}</span></dt><dd>"
            )),
            "the report's legend explains {label}"
        );
    }
    assert!(help.contains("Nothing is removed from the log"));
    for colour in ["cyan", "bold red", "yellow", "magenta"] {
        assert!(help.contains(colour), "replay --help names {colour}");
    }
    assert!(html.contains("<details class=\"legend\" open><summary>Legend</summary>"));
    assert!(html.contains(
        "<tr class=\"entry kind-denial\"><td class=\"summary\">a call denied by Auto review"
    ));
}

#[test]
fn report_keeps_a_long_summary_whole_in_a_cell_that_opens() {
    let dir = temp();
    let store = dir.path().join("long");
    run(["create", &store.display().to_string(), "--session", "s1"]).expect_code(0);
    let long = format!("{} the end of the evidence", "word ".repeat(200));
    let message = serde_json::json!({
        "type": "message",
        "data": {"role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": long}]}
    });
    append(&store.display().to_string(), &format!("{message}\n"));
    let html = report(&store, &dir.path().join("report.html"));
    let cell = html
        .split("<details class=\"whole\"><summary>")
        .nth(1)
        .unwrap_or_else(|| panic!("no opening cell in the report"));
    let (clipped, whole) = cell
        .split_once("</summary><div class=\"whole-text\">")
        .unwrap_or_else(|| panic!("the cell holds a clipped line and the whole text"));
    assert!(clipped.ends_with('…') && !clipped.contains("the end of the evidence"));
    assert!(
        whole.contains(&format!("{long}&quot;")),
        "the whole text is in the cell"
    );
}

/// A report written again over an earlier one of the same name leaves none
/// of its pages: fewer pages replace more, and a single page replaces them
/// all (their folder goes too).
#[test]
fn a_report_written_again_leaves_no_page_of_the_one_before() {
    let dir = temp();
    let out = dir.path().join("audit.html");
    let pages = dir.path().join("audit-pages");
    let report = |extra: &[&str]| {
        let mut args = vec![
            "report".to_owned(),
            examples().display().to_string(),
            "--html".to_owned(),
            out.display().to_string(),
        ];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        run(args).expect_code(0);
    };
    let names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&pages)
            .unwrap_or_else(|error| panic!("{}: {error}", pages.display()))
            .map(|entry| {
                entry
                    .unwrap_or_else(|error| panic!("{error}"))
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    };
    report(&["--page-events", "2"]);
    let many = names();
    report(&["--page-events", "10"]);
    let fewer = names();
    assert!(
        fewer.len() < many.len(),
        "{} then {}",
        many.len(),
        fewer.len()
    );
    let index = String::from_utf8(read(&out)).unwrap_or_else(|error| panic!("{error}"));
    for name in &fewer {
        assert!(
            index.contains(&format!(
                "audit-pages/{}",
                name.split('-').next().unwrap_or("")
            )),
            "{name} is a page of the index"
        );
    }
    assert!(
        fewer.iter().all(|name| many.contains(name)),
        "pages named as before"
    );
    report(&[]);
    assert!(!pages.exists(), "a single page leaves no pages folder");
}

#[test]
fn a_big_report_is_an_index_and_pages_that_link_each_other() {
    let dir = temp();
    let out = dir.path().join("audit.html");
    run([
        "report",
        &examples().display().to_string(),
        "--html",
        &out.display().to_string(),
        "--page-events",
        "10",
    ])
    .expect_code(0);
    let index = String::from_utf8(read(&out)).unwrap_or_else(|error| panic!("{error}"));
    assert!(
        !index.contains("data-seq="),
        "the index holds no timeline rows"
    );
    let pages = dir.path().join("audit-pages");
    for name in EXAMPLES {
        let events = run(["verify", &example(name).display().to_string(), "--json"])
            .expect_code(0)
            .stdout
            .clone();
        let last_seq = json(&events)["lastSeq"].as_u64().unwrap_or(0);
        let page_count = (last_seq as usize + 1).div_ceil(10);
        assert!(index.contains(&format!("<a href=\"audit-pages/{name}-1.html\">{name}</a>")));
        let mut seqs = Vec::new();
        for number in 1..=page_count {
            let path = pages.join(format!("{name}-{number}.html"));
            let page = String::from_utf8(read(&path)).unwrap_or_else(|error| panic!("{error}"));
            let mode = std::fs::metadata(&path)
                .map(|m| m.permissions())
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
                0o600
            );
            assert!(page.contains("<a href=\"../audit.html\">index</a>"));
            assert!(page.contains("default-src 'none'"));
            assert!(!page.contains("href=\"http") && !page.contains("src=\"http"));
            assert_eq!(
                number > 1,
                page.contains(&format!(
                    "href=\"{name}-{}.html\">previous",
                    number.max(2) - 1
                ))
            );
            assert_eq!(
                number < page_count,
                page.contains(&format!("href=\"{name}-{}.html\">next", number + 1))
            );
            let rows: Vec<u64> = page
                .split("data-seq=\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next()?.parse().ok())
                .collect();
            assert!(
                rows.len() <= 10,
                "page {number} of {name} holds {} rows",
                rows.len()
            );
            seqs.extend(rows);
        }
        assert_eq!(
            seqs,
            (0..=last_seq).collect::<Vec<_>>(),
            "{name}: every event once, in order"
        );
        assert!(!pages
            .join(format!("{name}-{}.html", page_count + 1))
            .exists());
    }
    let lead = String::from_utf8(read(&pages.join("lead-1.html"))).unwrap_or_default()
        + &String::from_utf8(read(&pages.join("lead-2.html"))).unwrap_or_default();
    assert!(lead.contains("<a class=\"child-link\" href=\"lead-tests-1.html\">"));
}

// ---------------------------------------------------------------------------
// help, completions, README
// ---------------------------------------------------------------------------

/// The commands `sessionlog --help` lists, `help` left out.
fn listed_commands(help: &Run) -> Vec<&str> {
    help.stdout
        .split("Commands:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no command list in {}", help.stdout))
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect()
}

#[test]
fn every_command_shows_an_example_in_its_help() {
    let help = run(["--help"]);
    help.expect_code(0);
    let commands = listed_commands(&help);
    for expected in [
        "replay",
        "tail",
        "salvage",
        "stats",
        "report",
        "completions",
        "verify",
    ] {
        assert!(
            commands.contains(&expected),
            "{expected} missing from {commands:?}"
        );
    }
    for command in commands {
        let shown = run([command, "--help"]);
        shown.expect_code(0);
        assert!(
            shown
                .stdout
                .split("Example")
                .nth(1)
                .is_some_and(|example| example.contains("sessionlog ")),
            "`sessionlog {command} --help` shows no example"
        );
    }
}

#[test]
fn completions_cover_every_command() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let printed = run(["completions", shell]);
        printed.expect_code(0);
        for command in ["replay", "tail", "salvage", "stats", "report"] {
            assert!(
                printed.stdout.contains(command),
                "{shell} completions lack {command}"
            );
        }
    }
    run(["completions", "tcsh"]).expect_code(1); // a usage error (README.md, "Exit codes")
}

/// README.md's text.
fn readme() -> String {
    String::from_utf8(read(&workspace_root().join("README.md")))
        .unwrap_or_else(|error| panic!("README.md is UTF-8: {error}"))
}

#[test]
fn the_readme_shows_every_command() {
    let readme = readme();
    let help = run(["--help"]);
    help.expect_code(0);
    let unshown: Vec<&str> = listed_commands(&help)
        .into_iter()
        .filter(|command| !readme.contains(&format!("sessionlog {command} ")))
        .collect();
    assert!(unshown.is_empty(), "README.md never shows {unshown:?}");
}

#[test]
fn readme_shows_the_embedding_example_verbatim_and_the_ci_commands() {
    let readme = readme();
    let embed = String::from_utf8(read(&workspace_root().join("examples/embed.rs")))
        .unwrap_or_else(|error| panic!("embed.rs is UTF-8: {error}"));
    let shown = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("README.md has no rust block"));
    let section: String = embed
        .split("// readme: start\n")
        .nth(1)
        .and_then(|rest| rest.split("    // readme: end").next())
        .unwrap_or_else(|| panic!("examples/embed.rs has no readme section"))
        .lines()
        .map(|line| format!("{}\n", line.strip_prefix("    ").unwrap_or(line)))
        .collect();
    assert_eq!(
        shown, section,
        "README.md's rust block must be examples/embed.rs's readme section"
    );
    assert!(readme.contains("cargo run --release -- replay examples/sessions/"));
    assert!(readme.contains("cargo test --workspace --release"));
    let first_commands: Vec<&str> = readme
        .lines()
        .filter(|line| line.starts_with("cargo "))
        .take(2)
        .collect();
    assert!(first_commands[0].starts_with("cargo run --release -- replay examples/sessions/"));
    assert_eq!(first_commands[1], "cargo test --workspace --release");
}

/// A child's timeline tells its inherited events (the parent's, seq 1
/// through its `seedLength`) from its own: a line where each part starts
/// in `replay`, `inherited: true` on each in `--json` (and on nothing
/// else), a mark on each row of the report.
#[test]
fn a_childs_timeline_marks_what_it_inherited() {
    let store = examples().display().to_string();
    let text = run(["replay", &store, "--session", "lead-tests"]);
    text.expect_code(0);
    let inherited_at = text
        .stdout
        .find("══ inherited: the events 1–7 of parent session lead")
        .unwrap_or_else(|| panic!("{}", text.stdout));
    let own_at = text
        .stdout
        .find("══ the session's own events, from seq 8")
        .unwrap_or_else(|| panic!("{}", text.stdout));
    assert!(inherited_at < own_at, "{}", text.stdout);
    let json = run(["replay", &store, "--session", "lead-tests", "--json"]);
    json.expect_code(0);
    for line in json.stdout.lines() {
        let entry: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("{line}: {error}"));
        let seq = entry["seq"].as_u64().unwrap_or_else(|| panic!("{line}"));
        let inherited = (1..=7).contains(&seq);
        assert_eq!(entry.get("inherited").is_some(), inherited, "{line}");
    }
    // A root session has no such lines.
    let root = run(["replay", &store, "--session", "lead"]);
    assert!(!root.stdout.contains("══"), "{}", root.stdout);
    let folder = temp();
    let report = folder.path().join("report.html");
    run(["report", &store, "--html", &report.display().to_string()]).expect_code(0);
    let html = std::fs::read_to_string(&report).unwrap_or_default();
    assert_eq!(
        html.matches("<span class=\"inherited-mark\">inherited</span>")
            .count(),
        7,
        "the seven events lead-tests inherited"
    );
}
