//! How every command behaves at its edges, as a user meets it: a reader that
//! goes away (`| head -1`), a folder that holds no sessions, warnings, and
//! the exit codes of what is not the command's main answer.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::cli_support::{run, run_command, sessionlog, workspace_root};

fn examples() -> PathBuf {
    workspace_root().join("examples").join("sessions")
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}

// ---------------------------------------------------------------------------
// A reader that goes away
// ---------------------------------------------------------------------------

/// Runs the binary with a standard output whose reader is already gone, so
/// its first write meets a broken pipe whatever the timing, and returns its
/// exit code and standard error.
fn run_into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap_or_else(|error| panic!("pipe: {error}"));
    drop(reader);
    let output = sessionlog(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|error| panic!("run sessionlog {args:?}: {error}"));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_command_stops_quietly_with_141_when_its_reader_goes_away() {
    let store = arg(&examples());
    let log = arg(&examples().join("auto-review.jsonl"));
    let commands: Vec<Vec<&str>> = vec![
        vec!["verify", &store],
        vec!["verify", &store, "--json"],
        vec!["stats", &store],
        vec!["stats", &store, "--json"],
        vec!["list", &store],
        vec!["list", &store, "--tree"],
        vec!["completions", "bash"],
        vec!["export", &store],
        vec!["replay", &log],
        vec!["replay", &log, "--json"],
        vec!["tail", &log],
        vec!["project", &log],
        vec!["diff", &store, &store],
        vec!["--help"],
    ];
    for command in commands {
        let (code, stderr) = run_into_closed_pipe(&command);
        assert_eq!(
            code,
            Some(141),
            "sessionlog {command:?} into a closed pipe exits 128 + SIGPIPE; stderr: {stderr}"
        );
        assert!(
            stderr.is_empty(),
            "sessionlog {command:?} into a closed pipe prints nothing on stderr, got: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------
// A folder that holds no sessions
// ---------------------------------------------------------------------------

#[test]
fn verify_and_migrate_of_a_folder_without_sessions_say_so_and_exit_1() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let empty = dir.path().join("not-a-store");
    std::fs::create_dir(&empty).unwrap_or_else(|error| panic!("mkdir: {error}"));
    std::fs::write(empty.join("notes.txt"), "not a log\n")
        .unwrap_or_else(|error| panic!("write: {error}"));
    let expected = format!("no sessions found in {}", empty.display());

    let verified = run(["verify", &arg(&empty)]);
    verified.expect_code(1);
    assert!(verified.stderr.contains(&expected), "{}", verified.stderr);
    assert!(
        verified.stderr.contains("--allow-empty"),
        "{}",
        verified.stderr
    );
    run(["verify", &arg(&empty), "--allow-empty"]).expect_code(0);

    let destination = dir.path().join("copy.db");
    let migrated = run(["migrate", &arg(&empty), &arg(&destination)]);
    migrated.expect_code(1);
    assert!(migrated.stderr.contains(&expected), "{}", migrated.stderr);
    assert!(!destination.exists(), "a refused migration creates nothing");
    run(["migrate", &arg(&empty), &arg(&destination), "--allow-empty"]).expect_code(0);

    // Commands of every session warn, as list and stats do, and exit 0;
    // those of one session say which store held none.
    let page = dir.path().join("page.html");
    for args in [
        vec!["export".to_owned(), arg(&empty)],
        vec![
            "report".to_owned(),
            arg(&empty),
            "--html".to_owned(),
            arg(&page),
        ],
    ] {
        let warned = run(&args);
        warned.expect_code(0);
        assert!(
            warned.stderr.contains(&format!("warning: {expected}")),
            "{args:?}: {}",
            warned.stderr
        );
    }
    for command in ["replay", "tail", "project"] {
        let refused = run([command, &arg(&empty)]);
        refused.expect_code(1);
        assert!(
            refused.stderr.contains(&expected),
            "{command}: {}",
            refused.stderr
        );
    }
}

// ---------------------------------------------------------------------------
// Warnings: one style, on stderr
// ---------------------------------------------------------------------------

/// A store with session `s1` created by the binary.
fn store_with_session(dir: &Path) -> String {
    let store = arg(&dir.join("store"));
    run(["create", &store, "--session", "s1", "--cwd", "/w"]).expect_code(0);
    store
}

/// Every line of `stderr` is one `sessionlog: warning: ` line without a
/// terminal escape, and at least one says `expected`.
#[track_caller]
fn assert_warned(stderr: &str, expected: &str) {
    assert!(!stderr.is_empty(), "a warning on stderr");
    for line in stderr.lines() {
        assert!(
            line.starts_with("sessionlog: warning: ") && !line.contains('\u{1b}'),
            "one warning style, no colour codes: {line:?}"
        );
    }
    assert!(stderr.contains(expected), "{expected:?} in {stderr}");
}

#[test]
fn a_torn_tail_is_warned_of_in_one_style_by_append_fork_diff_and_stats() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let turn = r#"{"type":"turn/start","data":{"turnId":"t1"}}"#;
    crate::cli_support::run_with_stdin(["append", &store, "--session", "s1"], &format!("{turn}\n"))
        .expect_code(0);
    let log = dir.path().join("store").join("s1.jsonl");
    let tear = || {
        let mut bytes = std::fs::read(&log).unwrap_or_else(|error| panic!("read: {error}"));
        bytes.extend_from_slice(br#"{"seq":9,"ts":1,"ty"#);
        std::fs::write(&log, bytes).unwrap_or_else(|error| panic!("write: {error}"));
    };

    tear();
    let stats = run(["stats", &store]);
    stats.expect_code(0);
    assert_warned(&stats.stderr, "a torn tail of 19 bytes after seq 1");

    let forked = run(["fork", &store, "--session", "s1", "--child", "c1"]);
    forked.expect_code(0);
    assert_warned(&forked.stderr, "ignoring a torn tail of 19 bytes at line 3");

    let compared = run(["diff", &store, &store]);
    compared.expect_code(0);
    assert_warned(
        &compared.stderr,
        "s1.jsonl: comparing the good prefix; ignoring a torn tail of 19 bytes at line 3",
    );

    let appended = crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        "{\"type\":\"turn/end\",\"data\":{\"turnId\":\"t1\"}}\n",
    );
    appended.expect_code(0);
    assert_warned(
        &appended.stderr,
        "s1.jsonl: truncating a torn tail of 19 bytes at line 3",
    );
}

#[test]
fn stats_counts_and_report_names_rule_violations_on_stderr() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    // Appended as written by hand: a turn/end that no turn/start opened.
    let log = dir.path().join("store").join("s1.jsonl");
    let header = std::fs::read_to_string(&log).unwrap_or_else(|error| panic!("read: {error}"));
    let id = sessionlog_schema::SessionId::parse("s1").unwrap_or_else(|error| panic!("{error}"));
    let body = r#"{"seq":1,"ts":1,"type":"turn/end","data":{"turnId":"t1"}"#;
    let crc = sessionlog_schema::record_crc(&id, body.as_bytes());
    std::fs::write(&log, format!("{header}{body},\"crc\":\"{crc:08x}\"}}\n"))
        .unwrap_or_else(|error| panic!("write: {error}"));
    run(["verify", &store]).expect_code(4);

    let stats = run(["stats", &store, "--json"]);
    stats.expect_code(0);
    assert_warned(&stats.stderr, "1 event breaks the rules");
    let report: serde_json::Value =
        serde_json::from_str(&stats.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["totals"]["violations"], 1);

    let html = dir.path().join("report.html");
    let reported = run(["report", &store, "--html", &arg(&html)]);
    reported.expect_code(4);
    assert_warned(
        &reported.stderr,
        "1 event breaks the rules; each is marked in",
    );
}

/// A header with two values out of the vocabulary is one record that
/// breaks the rules: `stats`, `replay` and `report` count it once and name
/// it as the header, where `stats` counted each value and all three called
/// it an event.
#[test]
fn a_header_that_breaks_the_rules_is_named_and_counted_once_by_every_command() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let log = dir.path().join("store").join("s1.jsonl");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|error| panic!("read: {error}"));
    let body = text
        .trim_end()
        .rsplit_once(",\"crc\":")
        .map_or("", |(body, _)| body)
        .replace(r#""sandboxMode":null"#, r#""sandboxMode":"bogus""#)
        .replace(r#""approvalPolicy":null"#, r#""approvalPolicy":"Never""#);
    let id = sessionlog_schema::SessionId::parse("s1").unwrap_or_else(|error| panic!("{error}"));
    let crc = sessionlog_schema::record_crc(&id, body.as_bytes());
    let event = r#"{"seq":1,"ts":1,"type":"turn/start","data":{"turnId":"t1"}"#;
    let event_crc = sessionlog_schema::record_crc(&id, event.as_bytes());
    std::fs::write(
        &log,
        format!("{body},\"crc\":\"{crc:08x}\"}}\n{event},\"crc\":\"{event_crc:08x}\"}}\n"),
    )
    .unwrap_or_else(|error| panic!("write: {error}"));
    let verified = run(["verify", &store]);
    verified.expect_code(4);
    assert!(verified.stdout.contains("bogus"), "{}", verified.stdout);

    let stats = run(["stats", &store, "--json"]);
    stats.expect_code(0);
    assert_warned(&stats.stderr, "1 header breaks the rules");
    let counted: serde_json::Value =
        serde_json::from_str(&stats.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counted["totals"]["violations"], 1);
    let replayed = run(["replay", &store]);
    replayed.expect_code(4);
    assert!(
        replayed
            .stdout
            .contains("1 header breaks the rules (marked ✗ above)"),
        "{}",
        replayed.stdout
    );
    let html = dir.path().join("report.html");
    let reported = run(["report", &store, "--html", &arg(&html)]);
    reported.expect_code(4);
    assert_warned(
        &reported.stderr,
        "1 header breaks the rules; each is marked in",
    );
}

/// `replay --from` still folds from the start, and what the log breaks
/// before the window decides the exit code and is said under the timeline,
/// though it is not shown.
#[test]
fn replay_from_counts_what_breaks_the_rules_before_its_window() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let log = dir.path().join("store").join("s1.jsonl");
    let header = std::fs::read_to_string(&log).unwrap_or_else(|error| panic!("read: {error}"));
    let id = sessionlog_schema::SessionId::parse("s1").unwrap_or_else(|error| panic!("{error}"));
    // Seq 1 breaks a rule (a turn/end no turn/start opened); 2 and 3 do not.
    let bodies = [
        r#"{"seq":1,"ts":1,"type":"turn/end","data":{"turnId":"t0"}"#,
        r#"{"seq":2,"ts":2,"type":"turn/start","data":{"turnId":"t1"}"#,
        r#"{"seq":3,"ts":3,"type":"turn/end","data":{"turnId":"t1"}"#,
    ];
    let lines: String = bodies
        .iter()
        .map(|body| {
            let crc = sessionlog_schema::record_crc(&id, body.as_bytes());
            format!("{body},\"crc\":\"{crc:08x}\"}}\n")
        })
        .collect();
    std::fs::write(&log, format!("{header}{lines}"))
        .unwrap_or_else(|error| panic!("write: {error}"));
    run(["replay", &store]).expect_code(4);
    let windowed = run(["replay", &store, "--from", "2"]);
    windowed.expect_code(4);
    assert!(!windowed.stdout.contains("✗"), "{}", windowed.stdout);
    assert!(
        windowed
            .stdout
            .contains("1 event breaks the rules (before the first seq shown: replay without --from marks them)"),
        "{}",
        windowed.stdout
    );
    let json = run(["replay", &store, "--from", "2", "--json"]);
    json.expect_code(4);
    assert_warned(
        &json.stderr,
        "1 event breaks the rules before the first seq shown",
    );
}

// ---------------------------------------------------------------------------
// append: unknown types, batches, and the preset writer
// ---------------------------------------------------------------------------

/// A type no type may be spelled with is a rule violation when appended
/// (exit 4), as `verify` finds it in a log: a NUL in it was exit 1, refused
/// as what PostgreSQL's text cannot store, while a BEL was exit 4.
#[test]
fn append_refuses_a_type_with_a_nul_as_the_rule_violation_verify_finds() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    for (spelled, character) in [(r"x-\u0000", "U+0000"), (r"x-\u0007", "U+0007")] {
        let line = format!(r#"{{"type":"{spelled}","data":1}}"#);
        let refused = crate::cli_support::run_with_stdin(
            ["append", &store, "--session", "s1"],
            &format!("{line}\n"),
        );
        refused.expect_code(4);
        assert!(refused.stderr.contains(character), "{}", refused.stderr);
    }
    // Refused, so not said to be kept as an unknown type.
    let empty = crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        "{\"type\":\"\",\"data\":{}}\n",
    );
    empty.expect_code(4);
    assert!(
        empty.stderr.contains("the event type is empty") && !empty.stderr.contains("it is kept"),
        "{}",
        empty.stderr
    );
    run(["verify", &store]).expect_code(0);
}

/// Half a surrogate pair escaped in a text is named as what it is, not as
/// the escape cut short that the parser's words suggest.
#[test]
fn a_lone_surrogate_in_a_text_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    for text in [r"a\ud800b", r"a\udc00", r"a\ud800\u0041"] {
        let line = format!(
            r#"{{"type":"message","data":{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}}}"#
        );
        let refused = crate::cli_support::run_with_stdin(
            ["append", &store, "--session", "s1"],
            &format!("{line}\n"),
        );
        refused.expect_code(4);
        assert!(
            refused.stderr.contains("data.content[0].text: a string that is not Unicode text (an escaped lone surrogate"),
            "{text}: {}",
            refused.stderr
        );
    }
}

#[test]
fn append_warns_of_an_unknown_type_with_the_closest_known_and_strict_refuses_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let append = |extra: &[&str], input: &str| {
        let mut args = vec!["append", store.as_str(), "--session", "s1"];
        args.extend_from_slice(extra);
        crate::cli_support::run_with_stdin(args, input)
    };

    let typo = append(&[], "{\"type\":\"Message\",\"data\":{}}\n");
    typo.expect_code(0);
    assert_eq!(
        typo.stdout, "{\"seq\": 1}\n",
        "an unknown type is still kept"
    );
    assert_warned(
        &typo.stderr,
        "unknown event type \"Message\" (did you mean \"message\"?)",
    );

    let namespace = append(&[], "{\"type\":\"turn/begin\",\"data\":{}}\n");
    assert_warned(
        &namespace.stderr,
        "(did you mean one of \"turn/start\", \"turn/end\"?)",
    );

    let own = append(
        &["--strict"],
        "{\"type\":\"x-runtime/usage\",\"data\":{}}\n",
    );
    own.expect_code(0);
    assert!(
        own.stderr.is_empty(),
        "an x- type is no typo: {}",
        own.stderr
    );

    let refused = append(&["--strict"], "{\"type\":\"tool/begin\",\"data\":{}}\n");
    refused.expect_code(4);
    assert!(refused.stdout.is_empty());
    assert!(
        refused.stderr.contains("--strict refuses it"),
        "{}",
        refused.stderr
    );
    append(&["--expect-seq", "4"], "{\"type\":\"x-a/b\",\"data\":{}}\n").expect_code(0);
}

#[test]
fn append_takes_a_json_array_line_as_one_atomic_batch() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let batch = r#"[{"type":"turn/start","data":{"turnId":"t1"}},{"type":"turn/end","data":{"turnId":"t1"}}]"#;
    let appended = crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        &format!("{batch}\n"),
    );
    appended.expect_code(0);
    assert_eq!(appended.stdout, "{\"seq\": 1}\n{\"seq\": 2}\n");
    let exported = run(["export", &store]);
    assert!(exported.stdout.contains(r#"{"seq":1,"ts":"#));
    assert!(
        exported
            .stdout
            .contains(r#","batch":2,"type":"turn/start""#),
        "the first record carries the batch size: {}",
        exported.stdout
    );

    // A batch whose second event breaks a rule writes none of it.
    let broken = r#"[{"type":"turn/start","data":{"turnId":"t2"}},{"type":"turn/end","data":{"turnId":"t9"}}]"#;
    crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        &format!("{broken}\n"),
    )
    .expect_code(4);
    let tail = run(["tail", &store, "-n", "1", "--json"]);
    assert!(tail.stdout.contains("\"seq\":2"), "{}", tail.stdout);
    let empty = crate::cli_support::run_with_stdin(["append", &store, "--session", "s1"], "[]\n");
    empty.expect_code(1);
    assert!(
        empty.stderr.contains("the array holds no event"),
        "{}",
        empty.stderr
    );
}

#[test]
fn preset_switches_a_session_in_one_batch_that_the_projection_follows() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    run(["preset", &store, "--session", "s1", "auto"]).expect_code(1);
    run([
        "preset",
        &store,
        "--session",
        "s1",
        "read-only",
        "--approval",
        "ask",
    ])
    .expect_code(1);

    let switched = run([
        "preset",
        &store,
        "--session",
        "s1",
        "auto",
        "--approval",
        "never",
        "--json",
    ]);
    switched.expect_code(0);
    crate::cli_support::expect_members_in_order(
        &switched.stdout,
        &["session", "preset", "seqs", "sandboxMode", "approvalPolicy"],
    );
    let report: serde_json::Value =
        serde_json::from_str(&switched.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["seqs"], serde_json::json!([1, 2, 3]));
    let projected = run(["project", &store, "--session", "s1"]);
    let projection: serde_json::Value =
        serde_json::from_str(&projected.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(projection["preset"], "auto");
    assert_eq!(projection["approvalPolicy"]["effective"], "never");
    assert_eq!(projection["sandboxMode"]["effective"], "danger-full-access");
    assert!(run(["export", &store]).stdout.contains("\"batch\":3"));

    run([
        "preset",
        &store,
        "--session",
        "s1",
        "full-access",
        "--expect-seq",
        "9",
    ])
    .expect_code(6);
    let full = run(["preset", &store, "--session", "s1", "full-access", "--json"]);
    full.expect_code(0);
    let report: serde_json::Value =
        serde_json::from_str(&full.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        report["seqs"],
        serde_json::json!([4]),
        "only the preset event: sandbox and approval already fit"
    );
}

#[test]
fn append_help_says_what_an_interruption_leaves_and_how_to_resume() {
    let help = run(["append", "--help"]);
    help.expect_code(0);
    for needed in [
        "more events",
        "than were acknowledged",
        "--expect-seq",
        "-n 1",
    ] {
        assert!(
            help.stdout.contains(needed),
            "{needed:?} in {}",
            help.stdout
        );
    }
}

// ---------------------------------------------------------------------------
// migrate: resuming an interrupted run, and a store onto itself
// ---------------------------------------------------------------------------

#[test]
fn an_interrupted_migration_is_finished_by_resume_which_proves_what_is_there() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let source = arg(&examples());
    let destination = dir.path().join("copy");
    run(["migrate", &source, &arg(&destination)]).expect_code(0);
    // As a Ctrl-C during publishing leaves it: some sessions published,
    // the others not.
    std::fs::remove_file(destination.join("lead.jsonl"))
        .unwrap_or_else(|error| panic!("remove: {error}"));

    let again = run(["migrate", &source, &arg(&destination)]);
    again.expect_code(1);
    assert!(again.stderr.contains("--resume"), "{}", again.stderr);

    let resumed = run(["migrate", &source, &arg(&destination), "--resume", "--json"]);
    resumed.expect_code(0);
    crate::cli_support::expect_members_in_order(
        &resumed.stdout,
        &[
            "sessions",
            "skipped",
            "events",
            "otherSessions",
            "warnings",
            "identical",
        ],
    );
    let report: serde_json::Value =
        serde_json::from_str(&resumed.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["sessions"], 1);
    assert_eq!(report["skipped"], 4, "the other example sessions");
    run(["diff", &source, &arg(&destination)]).expect_code(0);

    // A session already there that is not the source's copy refuses the run.
    let other = dir.path().join("other");
    run([
        "create",
        &arg(&other),
        "--session",
        "lead",
        "--cwd",
        "/elsewhere",
    ])
    .expect_code(0);
    let refused = run(["migrate", &source, &arg(&other), "--resume"]);
    refused.expect_code(1);
    assert!(
        refused
            .stderr
            .contains("session lead is already in the destination but is not the source's copy"),
        "{}",
        refused.stderr
    );
    assert!(
        !other.join("auto-review.jsonl").exists(),
        "nothing was written"
    );
}

/// `--resume` checks a session the destination already holds as a first
/// run checks it: one that breaks a rule (4) or whose seal fails (7) is
/// refused, not skipped as proved; and a copy that ends in a torn tail is
/// not the source's copy.
#[test]
fn a_resumed_migration_checks_what_is_there_as_a_first_run_does() {
    use crate::support::LogBuilder;
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let zeros = "0".repeat(64);
    let seal = format!(r#"{{"throughSeq":1,"chain":"sha256:{zeros}"}}"#);
    let cases = [
        (
            "rule",
            LogBuilder::new("s").event("turn/end", r#"{"turnId":"nowhere"}"#),
            4,
        ),
        (
            "seal",
            LogBuilder::new("s")
                .event("turn/start", r#"{"turnId":"t1"}"#)
                .event("seal", &seal),
            7,
        ),
    ];
    for (name, log, code) in cases {
        let source = dir.path().join(format!("{name}-source"));
        let destination = dir.path().join(format!("{name}-destination"));
        for folder in [&source, &destination] {
            std::fs::create_dir(folder).unwrap_or_else(|error| panic!("mkdir: {error}"));
            std::fs::write(folder.join("s.jsonl"), log.build())
                .unwrap_or_else(|error| panic!("write: {error}"));
        }
        run([
            "migrate",
            &arg(&source),
            &arg(&dir.path().join(format!("{name}.db"))),
        ])
        .expect_code(code);
        let resumed = run(["migrate", &arg(&source), &arg(&destination), "--resume"]);
        resumed.expect_code(code);
        assert!(
            !resumed.stdout.contains("identical"),
            "{name}: {}",
            resumed.stdout
        );
    }

    // A copy with a record more, torn: not what the source's copy holds.
    let source = arg(&examples());
    let destination = dir.path().join("copy");
    run(["migrate", &source, &arg(&destination)]).expect_code(0);
    let lead = destination.join("lead.jsonl");
    let mut text = std::fs::read_to_string(&lead).unwrap_or_else(|error| panic!("read: {error}"));
    text.push_str("{\"seq\":99,\"ts\":1,\"type\":\"x/n\",\"data\":{},\"crc\":\"00000000\"}\n");
    std::fs::write(&lead, text).unwrap_or_else(|error| panic!("write: {error}"));
    std::fs::remove_file(destination.join("auto-review.jsonl"))
        .unwrap_or_else(|error| panic!("remove: {error}"));
    let refused = run(["migrate", &source, &arg(&destination), "--resume"]);
    refused.expect_code(1);
    assert!(
        refused
            .stderr
            .contains("session lead is already in the destination but is not the source's copy")
            && refused.stderr.contains("torn tail"),
        "{}",
        refused.stderr
    );
    assert!(
        !destination.join("auto-review.jsonl").exists(),
        "nothing was written"
    );
}

/// A refused `migrate` (here: a record edited in the middle of the
/// source) leaves no empty folder it made behind, the parents it made
/// included; a folder that was there before stays, and so does a
/// database file (README, "For migration checks", says why).
#[test]
fn a_refused_migrate_leaves_no_folder_it_made() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let log = source.join("auto-review.jsonl");
    std::fs::copy(examples().join("auto-review.jsonl"), &log)
        .unwrap_or_else(|error| panic!("copy: {error}"));
    let text = std::fs::read_to_string(&log).unwrap_or_else(|error| panic!("read: {error}"));
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // A record in the middle, intact ones after it: corruption.
    let middle = lines.len() / 2;
    lines[middle] = lines[middle].replacen("\"ts\":1", "\"ts\":2", 1);
    std::fs::write(&log, lines.join("\n") + "\n").unwrap_or_else(|error| panic!("write: {error}"));
    let destination = dir.path().join("copies/2026/december");
    let refused = run(["migrate", &arg(&source), &arg(&destination)]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("corrupt"), "{}", refused.stderr);
    assert!(
        !dir.path().join("copies").exists(),
        "copies/ was left behind"
    );
    let database = dir.path().join("copy.db");
    run(["migrate", &arg(&source), &arg(&database)]).expect_code(2);
    assert!(database.is_file(), "a database file is kept");
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).unwrap_or_else(|error| panic!("mkdir: {error}"));
    run(["migrate", &arg(&source), &arg(&existing)]).expect_code(2);
    assert!(existing.is_dir(), "a folder that was there before is kept");
}

#[test]
fn migrate_of_a_store_onto_itself_is_refused() {
    let source = arg(&examples());
    let same = format!("{source}/");
    let refused = run(["migrate", &source, &same]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("are the same store"),
        "{}",
        refused.stderr
    );
}

// ---------------------------------------------------------------------------
// diff's exit codes, and messages that name what a path is
// ---------------------------------------------------------------------------

#[test]
fn diff_keeps_1_for_different_and_9_for_what_it_cannot_compare() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let source = arg(&examples());
    run(["diff", &source, &source]).expect_code(0);
    let other = dir.path().join("other");
    run([
        "create",
        &arg(&other),
        "--session",
        "lead",
        "--cwd",
        "/elsewhere",
    ])
    .expect_code(0);
    let different = run(["diff", &source, &arg(&other), "--json"]);
    different.expect_code(1);
    crate::cli_support::expect_members_in_order(
        &different.stdout,
        &[
            "identical",
            "session",
            "seq",
            "field",
            "left",
            "right",
            "message",
        ],
    );
    let missing = run(["diff", &source, &arg(&dir.path().join("missing"))]);
    missing.expect_code(9);
    assert!(
        missing.stderr.contains("cannot compare the stores"),
        "{}",
        missing.stderr
    );
    run(["diff", &source]).expect_code(9);

    // Numbers stay numbers in --json.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let lead = examples().join("lead.jsonl");
    let text = std::fs::read_to_string(&lead).unwrap_or_else(|error| panic!("read: {error}"));
    let kept: Vec<&str> = text.lines().take(3).collect();
    std::fs::write(copy.join("lead.jsonl"), format!("{}\n", kept.join("\n")))
        .unwrap_or_else(|error| panic!("write: {error}"));
    let only_lead = dir.path().join("only-lead");
    std::fs::create_dir(&only_lead).unwrap_or_else(|error| panic!("mkdir: {error}"));
    std::fs::copy(&lead, only_lead.join("lead.jsonl"))
        .unwrap_or_else(|error| panic!("copy: {error}"));
    let shorter = run(["diff", &arg(&only_lead), &arg(&copy), "--json"]);
    shorter.expect_code(1);
    let report: serde_json::Value =
        serde_json::from_str(&shorter.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert!(
        report["left"].is_u64() && report["right"].is_u64(),
        "{report}"
    );
    // A header's number too (`header createdAt`).
    let later = dir.path().join("later");
    std::fs::create_dir(&later).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let created = text
        .lines()
        .next()
        .and_then(|header| serde_json::from_str::<serde_json::Value>(header).ok())
        .and_then(|header| header["createdAt"].as_u64())
        .unwrap_or_else(|| panic!("lead's header has no createdAt"));
    let header_body = text.lines().next().unwrap_or_default();
    let body = &header_body[..header_body.rfind(",\"crc\":").unwrap_or(header_body.len())];
    let body = body.replace(
        &format!("\"createdAt\":{created}"),
        &format!("\"createdAt\":{}", created + 1),
    );
    let id = sessionlog_schema::SessionId::parse("lead").unwrap_or_else(|error| panic!("{error}"));
    let crc = sessionlog_schema::record_crc(&id, body.as_bytes());
    let rest: Vec<&str> = text.lines().skip(1).collect();
    std::fs::write(
        later.join("lead.jsonl"),
        format!("{body},\"crc\":\"{crc:08x}\"}}\n{}\n", rest.join("\n")),
    )
    .unwrap_or_else(|error| panic!("write: {error}"));
    let moved = run(["diff", &arg(&only_lead), &arg(&later), "--json"]);
    moved.expect_code(1);
    let report: serde_json::Value =
        serde_json::from_str(&moved.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["field"], "header createdAt", "{report}");
    assert_eq!(report["left"], created, "{report}");
    assert_eq!(report["right"], created + 1, "{report}");
}

/// Two folders that hold no session are identical stores, and `diff`
/// says so, but warns that neither holds a session: two mistyped paths
/// compare the same way.
#[test]
fn diff_of_two_stores_without_sessions_warns_of_each() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for folder in [&one, &two] {
        std::fs::create_dir(folder).unwrap_or_else(|error| panic!("mkdir: {error}"));
        std::fs::write(folder.join("notes.txt"), "not a log\n")
            .unwrap_or_else(|error| panic!("write: {error}"));
    }
    let compared = run(["diff", &arg(&one), &arg(&two)]);
    compared.expect_code(0);
    assert_eq!(compared.stdout.trim(), "identical");
    for folder in [&one, &two] {
        assert!(
            compared
                .stderr
                .contains(&format!("no sessions found in {}", folder.display())),
            "{}",
            compared.stderr
        );
    }
    let quiet = run(["-q", "diff", &arg(&one), &arg(&two)]);
    quiet.expect_code(0);
    assert_eq!(quiet.stderr, "");
    // A store that holds sessions is compared without a word.
    let source = arg(&examples());
    let same = run(["diff", &source, &source]);
    same.expect_code(0);
    assert!(!same.stderr.contains("no sessions"), "{}", same.stderr);
}

/// `diff --json` gives a text member as its own characters and a null
/// member as null; the text form quotes and escapes it.
#[test]
fn diff_gives_text_as_text_and_null_as_null() {
    use crate::support::LogBuilder;
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let write = |name: &str, log: LogBuilder| {
        let path = dir.path().join(name);
        std::fs::write(&path, log.build()).unwrap_or_else(|error| panic!("write: {error}"));
        arg(&path)
    };
    let bell = write("bell.jsonl", LogBuilder::new("s").cwd("/w\u{7}"));
    let plain = write("plain.jsonl", LogBuilder::new("s").cwd("/w"));
    let different = run(["diff", &bell, &plain, "--json"]);
    different.expect_code(1);
    let report: serde_json::Value =
        serde_json::from_str(&different.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["field"], "header cwd", "{report}");
    assert_eq!(report["left"], "/w\u{7}", "{report}");
    assert_eq!(report["right"], "/w", "{report}");
    let said = run(["diff", &bell, &plain]);
    said.expect_code(1);
    assert!(
        said.stdout.contains(r#"left "/w\u{7}", right "/w""#) && !said.stdout.contains('\u{7}'),
        "{}",
        said.stdout
    );

    let child = write(
        "child.jsonl",
        LogBuilder::new("s").cwd("/w").parent("p", 0, 1),
    );
    let orphan = run(["diff", &plain, &child, "--json"]);
    orphan.expect_code(1);
    let report: serde_json::Value =
        serde_json::from_str(&orphan.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["field"], "header parentSession", "{report}");
    assert!(report["left"].is_null(), "{report}");
    assert_eq!(report["right"], "p", "{report}");
}

#[test]
fn diff_and_migrate_take_a_lone_log_as_a_store_of_one_session() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let lead = examples().join("lead.jsonl");
    let copy = dir.path().join("copy-of-lead.jsonl");
    std::fs::copy(&lead, &copy).unwrap_or_else(|error| panic!("copy: {error}"));
    run(["diff", &arg(&lead), &arg(&copy)]).expect_code(0);
    let other = examples().join("approval.jsonl");
    let different = run(["diff", &arg(&lead), &arg(&other), "--json"]);
    different.expect_code(1);
    let report: serde_json::Value =
        serde_json::from_str(&different.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["identical"], false, "{report}");

    // A lone log against the store it came from: one session is missing
    // on the log's side, which diff names.
    let against_store = run(["diff", &arg(&lead), &arg(&examples())]);
    against_store.expect_code(1);

    let database = dir.path().join("lead.db");
    run(["migrate", &arg(&copy), &arg(&database)]).expect_code(0);
    run(["diff", &arg(&lead), &arg(&database)]).expect_code(0);
    run(["diff", &arg(&dir.path().join("missing.jsonl")), &arg(&lead)]).expect_code(9);
}

#[test]
fn stats_and_list_of_a_folder_without_sessions_say_so_on_stderr() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    std::fs::write(dir.path().join("notes.txt"), "not a log\n")
        .unwrap_or_else(|error| panic!("write: {error}"));
    let folder = arg(dir.path());
    for command in [vec!["stats", &folder], vec!["list", &folder]] {
        // Zero counts and an empty list are what the folder holds (exit
        // 0, as for a new store), but not alone: a mistyped path says the
        // same.
        let counted = run(command.clone());
        counted.expect_code(0);
        assert!(
            counted.stderr.contains("warning: no sessions found in")
                && counted.stderr.contains(&folder),
            "sessionlog {command:?}: {}",
            counted.stderr
        );
        let quiet = run([&["--quiet"][..], &command].concat());
        quiet.expect_code(0);
        assert!(
            quiet.stderr.is_empty(),
            "sessionlog --quiet {command:?}: {}",
            quiet.stderr
        );
        assert_eq!(quiet.stdout, counted.stdout);
    }
}

#[test]
fn a_file_named_as_a_store_is_called_a_file_not_a_missing_folder() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a log\n").unwrap_or_else(|error| panic!("write: {error}"));
    for command in [
        vec!["verify", notes.to_str().unwrap_or_default()],
        vec!["stats", notes.to_str().unwrap_or_default()],
        vec!["list", notes.to_str().unwrap_or_default()],
    ] {
        let refused = run(command.clone());
        refused.expect_code(1);
        assert!(
            refused.stderr.contains("it is a file, not a store")
                && refused.stderr.contains(".jsonl")
                && !refused.stderr.contains("not a folder"),
            "sessionlog {command:?}: {}",
            refused.stderr
        );
    }
}

#[test]
fn create_of_an_existing_lone_log_names_the_session_it_holds() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let one = dir.path().join("one.jsonl");
    run(["create", &arg(&one), "--session", "first"]).expect_code(0);
    let refused = run(["create", &arg(&one), "--session", "other"]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("it holds session first") && !refused.stderr.contains("other"),
        "{}",
        refused.stderr
    );
}

#[test]
fn salvage_of_a_folder_says_it_takes_one_log_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let refused = run([
        "salvage",
        &arg(&examples()),
        &arg(&dir.path().join("out.jsonl")),
    ]);
    refused.expect_code(1);
    assert!(
        refused
            .stderr
            .contains("is a folder: salvage copies the good prefix of one log file"),
        "{}",
        refused.stderr
    );
}

// ---------------------------------------------------------------------------
// review-request: the pending action on standard input, and what helps
// ---------------------------------------------------------------------------

/// The examples of `append --help` run, one after the other, on the session
/// `create`'s example makes, with the binary under test.
#[test]
fn append_help_examples_run_in_order() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let help = run(["append", "--help"]);
    help.expect_code(0);
    let examples: Vec<&str> = help
        .stdout
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("echo "))
        .collect();
    assert!(examples.len() >= 2, "{}", help.stdout);
    let mut create = crate::cli_support::sessionlog(["create", "./sessions", "--session", "s1"]);
    create.current_dir(dir.path());
    crate::cli_support::run_command(create, None).expect_code(0);
    let binary = crate::cli_support::sessionlog_binary()
        .display()
        .to_string();
    for example in examples {
        let line = example.replace("| sessionlog ", &format!("| '{binary}' "));
        let ran = std::process::Command::new("sh")
            .args(["-c", &line])
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|error| panic!("sh: {error}"));
        assert!(
            ran.status.success(),
            "{example}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
    }
}

/// `review-result -` reads standard input, as `--pending -` does; a report
/// of pages of no event is refused as a usage error.
#[test]
fn review_result_reads_a_dash_as_standard_input_and_pages_hold_an_event() {
    let reply = r#"{"blocks":[],"stop":"stop"}"#;
    let dashed = crate::cli_support::run_with_stdin(["review-result", "-"], reply);
    let absent = crate::cli_support::run_with_stdin(["review-result"], reply);
    dashed.expect_code(5);
    assert_eq!(dashed.stdout, absent.stdout);
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let out = dir.path().join("r.html");
    let refused = run([
        "report",
        &arg(&workspace_root().join("examples/sessions")),
        "--html",
        &arg(&out),
        "--page-events",
        "0",
    ]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("--page-events"),
        "{}",
        refused.stderr
    );
    assert!(!out.exists());
}

#[test]
fn review_request_help_example_runs_on_the_shipped_example() {
    let help = run(["review-request", "--help"]);
    help.expect_code(0);
    let example = help
        .stdout
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("sessionlog review-request examples/"))
        .unwrap_or_else(|| panic!("no example on a shipped session in:\n{}", help.stdout));
    let args: Vec<String> = example
        .split_whitespace()
        .skip(1)
        .map(|word| match word.starts_with("examples/") {
            true => arg(&workspace_root().join(word)),
            false => word.to_owned(),
        })
        .collect();
    let built = run(args.iter().map(String::as_str).collect::<Vec<_>>());
    built.expect_code(0);
    let request: serde_json::Value =
        serde_json::from_str(&built.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(request["partitions"]["PENDING_ACTION"]["callId"], "call-2");
    assert_eq!(request["partitions"]["PENDING_ACTION"]["name"], "shell");
}

#[test]
fn review_request_reads_the_pending_action_from_stdin_and_says_what_helps_when_too_large() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let events = [
        r#"{"type":"turn/start","data":{"turnId":"t1"}}"#,
        r#"{"type":"step/start","data":{"stepId":"s1","turnId":"t1"}}"#,
        r#"{"type":"request/header","data":{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"workspace-write","tools":[{"name":"shell","description":"Run a command","parameters":{"type":"object"}}]}}"#,
    ];
    crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        &format!("{}\n", events.join("\n")),
    )
    .expect_code(0);
    let pending = r#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#;
    let request = crate::cli_support::run_with_stdin(
        [
            "review-request",
            &store,
            "--session",
            "s1",
            "--pending",
            "-",
        ],
        pending,
    );
    request.expect_code(0);
    let built: serde_json::Value =
        serde_json::from_str(&request.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(built["partitions"]["PENDING_ACTION"]["callId"], "c1");

    let too_large = crate::cli_support::run_with_stdin(
        [
            "review-request",
            &store,
            "--session",
            "s1",
            "--pending",
            "-",
            "--max-bytes",
            "100",
        ],
        pending,
    );
    too_large.expect_code(5);
    let reply: serde_json::Value =
        serde_json::from_str(&too_large.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reply["error"], "REQUEST_TOO_LARGE");
    let message = reply["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("checkpoint") && message.contains("--max-bytes"),
        "{message}"
    );
    // A checkpoint shortens the messages shown, never the calls.
    assert!(message.contains("not the calls"), "{message}");
}

/// clap quotes an argument it refuses; a URL among the arguments is shown
/// without its password there too, as in every other message.
#[test]
fn a_refused_argument_never_shows_a_password() {
    let database = "postgres://app:s3cretPW@/postgres?host=/nowhere&port=1";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["verify", database, database],
            "'postgres://app@/postgres?host=/nowhere&port=1'",
        ),
        (
            vec!["migrate", "a", "b", "postgres://app:s3cretPW@db/logs"],
            "'postgres://app@db/logs'",
        ),
        // clap quotes it with its control characters taken out.
        (
            vec!["list", "a", "postgresql://app:s3cretPW@db/lo\u{7}gs"],
            "'postgresql://app@db/logs'",
        ),
        (
            vec![
                "list",
                "a",
                "postgres://app:s3c\u{1b}[31mretPW@db/logs?password=s3cretPW",
            ],
            "'postgres://app@db/logs'",
        ),
        // A value given as `--flag=VALUE` that clap quotes back.
        (
            vec![
                "review",
                "logs",
                "--pending",
                "p.json",
                "--endpoint",
                "http://127.0.0.1:9/v1",
                "--timeout=http://app:s3cretPW@127.0.0.1:9/v1",
            ],
            "'http://app@127.0.0.1:9/v1'",
        ),
    ];
    for (args, named) in cases {
        let refused = run(&args);
        refused.expect_code(1);
        assert!(
            refused.stderr.contains(named) && !refused.stderr.contains("s3cretPW"),
            "{args:?}: {}",
            refused.stderr
        );
    }
}

/// A store named by a mistyped URL (upper-case scheme, one slash, a space
/// before it, a `/` in the password) or by a URL whose database name ends
/// in `.jsonl` is refused without its password, by every command that
/// opens one.
#[test]
fn a_mistyped_store_url_never_shows_its_password() {
    let urls = [
        "POSTGRES://app:s3cretPW@127.0.0.1:1/logs",
        "postgres:/app:s3cretPW@127.0.0.1:1/logs",
        " postgres://app:s3cretPW@127.0.0.1:1/logs",
        "postgres://app:s3/cretPW@127.0.0.1:1/logs?schema=Bad",
        "postgres://app:s3cretPW@127.0.0.1:1/logs.jsonl",
    ];
    for url in urls {
        let cases: Vec<Vec<&str>> = vec![
            vec!["verify", url],
            vec!["list", url],
            vec!["export", url, "--session", "s"],
            vec!["salvage", url, "out.jsonl"],
            vec!["diff", url, "elsewhere"],
            vec!["create", url, "--session", "s"],
        ];
        for args in cases {
            let refused = run(&args);
            assert_ne!(refused.code, 0, "{args:?}");
            assert!(
                !refused.stderr.contains("cretPW") && !refused.stdout.contains("cretPW"),
                "{args:?}: {}",
                refused.stderr
            );
            assert!(
                refused.stderr.contains("app@"),
                "{args:?}: {}",
                refused.stderr
            );
        }
    }
}

/// A new store named as a SQLite database is named elsewhere (`.DB`,
/// `.sqlite3`, `.db3`) but not as this store names one, or as a lone log
/// nearly is (`.json`, `.JSONL`), is refused, by every command that makes
/// a store: taken for a folder, it would be a folder of logs where a
/// database or a log was asked for. An existing store of
/// such a name opens as what it is.
#[test]
fn a_new_store_named_like_a_database_but_not_as_one_is_refused() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let source = store_with_session(dir.path());
    for name in [
        "Sessions.DB",
        "x.SQLite",
        "x.sqlite3",
        "x.db3",
        "x.json",
        "y.JSONL",
    ] {
        let store = arg(&dir.path().join(name));
        for args in [
            vec!["create", &store, "--session", "s"],
            vec!["migrate", &source, &store],
        ] {
            let refused = run(&args);
            refused.expect_code(1);
            assert!(
                refused.stderr.contains("no store of that name is made")
                    && refused.stderr.contains(name),
                "{args:?}: {}",
                refused.stderr
            );
            assert!(!dir.path().join(name).exists(), "{args:?}");
        }
    }
    std::fs::create_dir(dir.path().join("kept.DB")).unwrap_or_else(|error| panic!("{error}"));
    let kept = arg(&dir.path().join("kept.DB"));
    run(["create", &kept, "--session", "s"]).expect_code(0);
    assert!(dir.path().join("kept.DB").join("s.jsonl").is_file());
    run(["create", &arg(&dir.path().join("x.db")), "--session", "s"]).expect_code(0);
}

/// `verify` of a corrupt log says what helps, as every other command
/// reading it does; so does `report` into a folder that does not exist.
#[test]
fn verify_and_report_say_what_helps() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        "{\"type\":\"x-n\",\"data\":1}\n{\"type\":\"x-n\",\"data\":2}\n",
    )
    .expect_code(0);
    let log = dir.path().join("store").join("s1.jsonl");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|error| panic!("{error}"));
    std::fs::write(&log, text.replacen("\"data\":1", "\"data\":7", 1))
        .unwrap_or_else(|error| panic!("{error}"));
    let verified = run(["verify", &store]);
    verified.expect_code(2);
    assert!(
        verified
            .stdout
            .contains("run `sessionlog salvage` to copy the good prefix to a new file"),
        "{}",
        verified.stdout
    );
    let out = arg(&dir.path().join("nodir").join("r.html"));
    let refused = run(["report", &store, "--html", &out]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("nodir does not exist") && refused.stderr.contains("mkdir -p"),
        "{}",
        refused.stderr
    );
}

/// An argument clap refuses is quoted back: a control character in it (a
/// hostile file name reaching the command line through a glob) never
/// reaches the terminal as it is.
#[test]
fn a_refused_argument_never_sends_a_control_character() {
    for args in [
        vec!["verify", "logs", "--bogus\u{1b}]0;PWN\u{7}\u{1b}[31mRED"],
        vec!["preset", "x.jsonl", "\u{1b}[31mx\u{1b}]0;T\u{7}"],
        vec!["migrate", "a", "b", "c\u{1b}[2J"],
    ] {
        // As on a terminal: clap would style its message, and pass what it
        // quotes through as it is.
        let mut command = sessionlog(&args);
        command.env("CLICOLOR_FORCE", "1");
        let refused = run_command(command, None);
        refused.expect_code(1);
        assert!(
            !refused.stderr.contains('\u{1b}') && !refused.stderr.contains('\u{7}'),
            "{args:?}: {:?}",
            refused.stderr
        );
        assert!(
            refused.stderr.starts_with("error: "),
            "{:?}",
            refused.stderr
        );
    }
}

/// A destination named like a lone log is refused, whether it exists or
/// not: `migrate` writes stores, and made a folder of that name before.
#[test]
fn migrate_refuses_a_destination_named_like_a_lone_log() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let source = arg(&examples());
    let new = dir.path().join("copy.jsonl");
    let refused = run(["migrate", &source, &arg(&new)]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("not a .jsonl file"),
        "{}",
        refused.stderr
    );
    assert!(!new.exists(), "migrate made {}", new.display());
    let lone = dir.path().join("lone.jsonl");
    run(["create", &arg(&lone), "--session", "other"]).expect_code(0);
    let before = std::fs::read(&lone).unwrap_or_default();
    run(["migrate", &source, &arg(&lone)]).expect_code(1);
    assert_eq!(std::fs::read(&lone).unwrap_or_default(), before);
}

/// A session asked for that the store does not hold is answered with the
/// ids one slip away; a store of several, asked for none, lists them.
#[test]
fn a_mistyped_or_missing_session_is_answered_with_the_ids_there_are() {
    let store = arg(&examples());
    for (asked, near) in [
        ("lead-test", "did you mean lead-tests?"),
        ("Lead", "did you mean lead?"),
        ("aproval", "did you mean approval?"),
    ] {
        let missing = run(["replay", &store, "--session", asked]);
        missing.expect_code(1);
        assert!(missing.stderr.contains(near), "{asked}: {}", missing.stderr);
    }
    let far = run(["replay", &store, "--session", "zzz"]);
    far.expect_code(1);
    assert!(!far.stderr.contains("did you mean"), "{}", far.stderr);
    let unnamed = run(["replay", &store]);
    unnamed.expect_code(1);
    assert!(
        unnamed.stderr.contains(
            "holds 5 sessions (approval, auto-review, lead, lead-tests, pending-review): pick one with --session ID"
        ),
        "{}",
        unnamed.stderr
    );
}

/// `replay --from` past the last seq, or after `--at`, shows no event: a
/// usage error, as `--at` past the end is, not an empty timeline.
#[test]
fn a_replay_window_that_shows_no_event_is_refused() {
    let log = arg(&examples().join("lead.jsonl"));
    let last = run(["replay", &log, "--from", "12"]);
    last.expect_code(0);
    for (args, said) in [
        (vec!["--from", "13"], "--from 13 is past the last seq 12"),
        (
            vec!["--from", "10", "--at", "5"],
            "--from 10 is after --at 5",
        ),
        (vec!["--at", "13"], "--at 13 is past the last seq 12"),
    ] {
        let mut all = vec!["replay", log.as_str()];
        all.extend(args);
        let refused = run(&all);
        refused.expect_code(1);
        assert!(refused.stderr.contains(said), "{all:?}: {}", refused.stderr);
        assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    }
}

/// Into a pipe `project` prints one line, as every other JSON output does,
/// so a line-oriented consumer reads one value per line.
#[test]
fn project_into_a_pipe_is_one_line() {
    let projected = run(["project", &arg(&examples().join("lead.jsonl"))]);
    projected.expect_code(0);
    assert_eq!(projected.stdout.lines().count(), 1, "{}", projected.stdout);
    let value: serde_json::Value = serde_json::from_str(projected.stdout.trim())
        .unwrap_or_else(|error| panic!("{error}: {}", projected.stdout));
    assert!(value.get("preset").is_some(), "{value}");
}

/// A write of the output that fails (a full disk under `>`) is named as
/// such, not left as a bare "No space left on device".
#[test]
fn a_failed_write_of_the_output_says_so() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    let Ok(full) = full else {
        return; // no /dev/full on this system
    };
    let output = sessionlog(["export", &arg(&examples()), "--session", "lead"])
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap_or_else(|error| panic!("run: {error}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("sessionlog: write standard output: "),
        "{stderr}"
    );
    // Help and the version too (they exited 0 with nothing written).
    for asked in ["--help", "--version"] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap_or_else(|error| panic!("/dev/full: {error}"));
        let output = sessionlog([asked])
            .stdout(full)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap_or_else(|error| panic!("run: {error}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{asked}: {stderr}");
        assert!(
            stderr.starts_with("sessionlog: write standard output: "),
            "{asked}: {stderr}"
        );
    }
    // A command that fails for its own reason (a corrupt log) with its
    // output lost too says both, each for what it is.
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = dir.path().join("logs");
    run(["create", &arg(&store), "--session", "s"]).expect_code(0);
    let events: String = (1..=10)
        .map(|n| format!("{{\"type\":\"x-test/note\",\"data\":{{\"n\":{n}}}}}\n"))
        .collect();
    crate::cli_support::run_with_stdin(["append", &arg(&store), "--session", "s"], &events)
        .expect_code(0);
    let log = store.join("s.jsonl");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::write(&log, text.replacen("{\"n\":7}", "{\"n\":0}", 1))
        .unwrap_or_else(|error| panic!("write: {error}"));
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap_or_else(|error| panic!("/dev/full: {error}"));
    let output = sessionlog(["tail", &arg(&store), "--session", "s", "--from", "1"])
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap_or_else(|error| panic!("run: {error}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.iter().any(|line| line.starts_with("sessionlog: ")
            && line.contains("corrupt at line 8")
            && !line.contains("write standard output")),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("sessionlog: write standard output: ")),
        "{stderr}"
    );
}

/// `report` reads a store and never changes it: an output named as one of
/// the store's own files (a log, a database, its write-ahead log, through
/// a symlink or not), or as a session log in the folder it reads, is
/// refused before anything is written, and the store verifies as before.
#[test]
fn report_never_writes_over_the_store_it_reads() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let folder = dir.path().join("logs");
    run(["create", &arg(&folder), "--session", "s"]).expect_code(0);
    let database = dir.path().join("x.db");
    run(["create", &arg(&database), "--session", "s"]).expect_code(0);
    let log = folder.join("s.jsonl");
    let link = dir.path().join("link.html");
    std::os::unix::fs::symlink(&log, &link).unwrap_or_else(|error| panic!("symlink: {error}"));
    let before = std::fs::read(&log).unwrap_or_else(|error| panic!("read the log: {error}"));
    let database_before =
        std::fs::read(&database).unwrap_or_else(|error| panic!("read the database: {error}"));
    let wal = dir.path().join("x.db-wal");
    let cases = [
        (arg(&log), arg(&log), "written over"),
        (arg(&folder), arg(&log), "written over"),
        (arg(&folder), arg(&link), "written over"),
        (
            arg(&folder),
            arg(&folder.join("other.jsonl")),
            "taken for one",
        ),
        // A lone log: the logs beside it (children are forked there).
        (arg(&log), arg(&folder.join("child.jsonl")), "taken for one"),
        (arg(&database), arg(&database), "written over"),
        (arg(&database), arg(&wal), "written over"),
    ];
    for (store, out, reason) in cases {
        let refused = run(["report", &store, "--html", &out]);
        assert_ne!(refused.code, 0, "report {store} --html {out}: {refused:?}");
        assert!(
            refused.stderr.contains(reason),
            "{store} → {out}: {}",
            refused.stderr
        );
    }
    assert_eq!(std::fs::read(&log).ok(), Some(before));
    assert_eq!(std::fs::read(&database).ok(), Some(database_before));
    assert!(!folder.join("other.jsonl").exists());
    run(["verify", &arg(&folder)]).expect_code(0);
    run(["verify", &arg(&database)]).expect_code(0);
    // A report of its own, written there before (under a dot name too), is
    // written over freely.
    for _ in 0..2 {
        run([
            "report",
            &arg(&folder),
            "--html",
            &arg(&folder.join(".report.html")),
        ])
        .expect_code(0);
        run([
            "report",
            &arg(&folder),
            "--html",
            &arg(&folder.join("report.html")),
        ])
        .expect_code(0);
    }
}

/// `tail -n N` keeps at most the log's records, whatever N: a count far
/// above them (up to the largest one) prints every event on both
/// backends, as a small one does.
#[test]
fn tail_takes_any_count_and_keeps_only_the_records() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    for store in [dir.path().join("logs"), dir.path().join("s.db")] {
        let store = arg(&store);
        run(["create", &store, "--session", "s"]).expect_code(0);
        crate::cli_support::run_with_stdin(
            ["append", &store, "--session", "s"],
            "{\"type\":\"x-test/n\",\"data\":{}}\n{\"type\":\"x-test/n\",\"data\":{}}\n",
        )
        .expect_code(0);
        let all = run(["tail", &store, "--session", "s", "-n", "2"]);
        all.expect_code(0);
        for count in ["1000000000", &u64::MAX.to_string()] {
            let tailed = run(["tail", &store, "--session", "s", "-n", count]);
            tailed.expect_code(0);
            assert_eq!(tailed.stdout, all.stdout, "{store} -n {count}");
        }
    }
}

/// The note on a corrupt log in the HTML report quotes what the log holds
/// (here a member's name) with its control and bidirectional characters
/// escaped, as the rest of the report shows them.
#[test]
fn a_corrupt_log_s_note_in_the_report_shows_control_characters_escaped() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = dir.path().join("logs");
    run(["create", &arg(&store), "--session", "fine"]).expect_code(0);
    let id = sessionlog_schema::SessionId::parse("bad").unwrap_or_else(|error| panic!("{error}"));
    let bodies = [
        r#"{"kind":"header","formatVersion":1,"id":"bad","createdAt":1,"cwd":"/w","parentSession":null,"seedLength":0,"delegationDepth":0,"sandboxMode":null,"approvalPolicy":null"#,
        r#"{"seq":1,"ts":1,"type":"x-a/b","data":{},"\u202eX\u001b]0;pwned\u0007":1"#,
    ];
    let log: String = bodies
        .iter()
        .map(|body| {
            let crc = sessionlog_schema::record_crc(&id, body.as_bytes());
            format!("{body},\"crc\":\"{crc:08x}\"}}\n")
        })
        .collect();
    std::fs::write(store.join("bad.jsonl"), log).unwrap_or_else(|error| panic!("write: {error}"));
    let html = dir.path().join("report.html");
    let reported = run(["report", &arg(&store), "--html", &arg(&html)]);
    assert_eq!(reported.code, 2, "{reported:?}");
    let page = std::fs::read_to_string(&html).unwrap_or_else(|error| panic!("read: {error}"));
    assert!(page.contains("corrupt"), "the corrupt log is named");
    for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!page.contains(raw), "{raw:?} reached the report");
    }
}

/// The store's own name, in the report's title and heading, is shown as
/// log text is: a folder named with a bidirectional override or an escape
/// reaches the page escaped.
#[test]
fn a_store_named_with_control_characters_is_shown_escaped_in_the_report() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = dir.path().join("logs\u{202e}lmth.exe\u{1b}[2J");
    run(["create", &arg(&store), "--session", "fine"]).expect_code(0);
    let html = dir.path().join("report.html");
    run(["report", &arg(&store), "--html", &arg(&html)]).expect_code(0);
    let page = std::fs::read_to_string(&html).unwrap_or_else(|error| panic!("read: {error}"));
    assert!(page.contains("<title>sessionlog report: "), "a title");
    for raw in ['\u{1b}', '\u{202e}'] {
        assert!(!page.contains(raw), "{raw:?} reached the report");
    }
}

/// `list --tree` shows every session: sessions whose parents form a
/// cycle (a header names itself, or two name each other), which no root
/// leads to, are shown from the cycle, marked, with the sessions under
/// them.
#[test]
fn list_tree_shows_sessions_whose_parents_form_a_cycle() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = dir.path().join("logs");
    run(["create", &arg(&store), "--session", "root"]).expect_code(0);
    run(["fork", &arg(&store), "--session", "root", "--child", "kid"]).expect_code(0);
    // `a-child` hangs under the cycle of `b` and `c`, and comes first.
    for (id, parent) in [
        ("self", "self"),
        ("b", "c"),
        ("c", "b"),
        ("d", "c"),
        ("a-child", "b"),
    ] {
        let session =
            sessionlog_schema::SessionId::parse(id).unwrap_or_else(|error| panic!("{error}"));
        let body = format!(
            r#"{{"kind":"header","formatVersion":1,"id":"{id}","createdAt":1,"cwd":"/w","parentSession":"{parent}","seedLength":0,"delegationDepth":1,"sandboxMode":null,"approvalPolicy":null"#
        );
        let crc = sessionlog_schema::record_crc(&session, body.as_bytes());
        std::fs::write(
            store.join(format!("{id}.jsonl")),
            format!("{body},\"crc\":\"{crc:08x}\"}}\n"),
        )
        .unwrap_or_else(|error| panic!("write: {error}"));
    }
    let listed = run(["list", &arg(&store), "--tree"]);
    listed.expect_code(0);
    for id in ["root", "kid", "self", "b", "c", "d", "a-child"] {
        assert_eq!(
            listed
                .stdout
                .lines()
                .filter(|line| !line.contains("shown above"))
                .filter(|line| line
                    .trim_start_matches(['│', '├', '└', '─', ' '])
                    .split(' ')
                    .next()
                    == Some(id))
                .count(),
            1,
            "{id} once (and marked where a cycle meets it again):\n{}",
            listed.stdout
        );
    }
    assert!(
        listed.stdout.contains("its parents form a cycle"),
        "{}",
        listed.stdout
    );
    let marked: Vec<&str> = listed
        .stdout
        .lines()
        .filter(|line| line.contains("(its parents form a cycle"))
        .filter_map(|line| line.split(' ').next())
        .collect();
    assert!(
        marked.iter().all(|id| ["self", "b", "c"].contains(id)),
        "only a session of a cycle starts one: {}",
        listed.stdout
    );
}

/// `diff --json` gives a `batch` one side lacks as `null`, as every
/// numeric member, never as text.
#[test]
fn diff_json_gives_an_absent_batch_as_null() {
    use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let id = SessionId::parse("b").unwrap_or_else(|error| panic!("{error}"));
    let header = SessionHeader::root(id.clone(), 1_700_000_000_000, "/w".into());
    let log = |batch: Option<u64>| {
        let mut text = header.encode();
        for seq in 1..=2 {
            let record = EventRecord::new(
                seq,
                1_700_000_000_000 + seq,
                if seq == 1 { batch } else { None },
                "note/test",
                "{}",
            );
            text.push_str(&record.encode(&id));
        }
        text
    };
    let (batched, apart) = (dir.path().join("one"), dir.path().join("two"));
    for (folder, batch) in [(&batched, Some(2)), (&apart, None)] {
        std::fs::create_dir(folder).unwrap_or_else(|error| panic!("{error}"));
        std::fs::write(folder.join("b.jsonl"), log(batch))
            .unwrap_or_else(|error| panic!("{error}"));
    }
    let different = run(["diff", &arg(&batched), &arg(&apart), "--json"]);
    different.expect_code(1);
    let report: serde_json::Value =
        serde_json::from_str(&different.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["field"], "batch", "{report}");
    assert_eq!(report["left"], 2, "{report}");
    assert_eq!(report["right"], serde_json::Value::Null, "{report}");
}

/// A letter of the first event of the log at `log` changed: its CRC fails,
/// and the intact records after it make that corruption.
fn damage_first_event(log: &Path) {
    let good = std::fs::read_to_string(log).unwrap_or_else(|error| panic!("read: {error}"));
    let first_event = good.find('\n').map_or(0, |end| end + 1);
    let at = first_event
        + good[first_event..]
            .find("\"type\":\"")
            .unwrap_or_else(|| panic!("the first event has a type"))
        + 8;
    let mut damaged = good.into_bytes();
    damaged[at] = if damaged[at] == b'x' { b'y' } else { b'x' };
    std::fs::write(log, &damaged).unwrap_or_else(|error| panic!("write: {error}"));
}

/// `diff` reads every session of both stores to its end, after a
/// difference too: a corrupt session anywhere is refused as corrupt (2), as
/// every command refuses a corrupt log, whatever difference comes before
/// it; one with only a torn tail is read as its good prefix, and the first
/// difference is still named (1).
#[test]
fn diff_refuses_a_corrupt_session_wherever_it_is() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    // A store of copies of the examples `sessions`.
    let fresh = |name: &str, sessions: &[&str]| {
        let folder = dir.path().join(name);
        std::fs::create_dir(&folder).unwrap_or_else(|error| panic!("mkdir: {error}"));
        for session in sessions {
            let log = format!("{session}.jsonl");
            std::fs::copy(examples().join(&log), folder.join(&log))
                .unwrap_or_else(|error| panic!("copy {log}: {error}"));
        }
        folder
    };
    let expect_corrupt = |left: &Path, right: &Path, session: &str| {
        for (left, right) in [(left, right), (right, left)] {
            let compared = run(["diff", &arg(left), &arg(right)]);
            compared.expect_code(2);
            let said = format!("{}{}", compared.stdout, compared.stderr);
            assert!(said.contains(&format!("{session}.jsonl")), "{said}");
            assert!(said.contains("corrupt"), "{said}");
        }
    };
    // Only one store holds the corrupt session.
    let one = fresh("one", &["lead", "approval"]);
    let two = fresh("two", &["lead"]);
    run(["diff", &arg(&one), &arg(&two)]).expect_code(1);
    damage_first_event(&one.join("approval.jsonl"));
    expect_corrupt(&one, &two, "approval");
    // Each store holds a session the other does not; the later one is
    // corrupt.
    let three = fresh("three", &["approval"]);
    let four = fresh("four", &["lead"]);
    damage_first_event(&four.join("lead.jsonl"));
    expect_corrupt(&three, &four, "lead");
    // Both hold the corrupt session, and a session only one holds sorts
    // after it: the difference does not hide it.
    let five = fresh("five", &["approval", "lead"]);
    let six = fresh("six", &["approval"]);
    damage_first_event(&six.join("approval.jsonl"));
    expect_corrupt(&five, &six, "approval");
    // A session that differs before one that is corrupt.
    let seven = fresh("seven", &["approval", "lead"]);
    let eight = fresh("eight", &["approval", "lead"]);
    let approval = seven.join("approval.jsonl");
    let shorter = std::fs::read_to_string(&approval).unwrap_or_else(|error| panic!("{error}"));
    let cut = shorter.trim_end().rfind('\n').map_or(0, |at| at + 1);
    std::fs::write(&approval, &shorter[..cut]).unwrap_or_else(|error| panic!("{error}"));
    run(["diff", &arg(&seven), &arg(&eight)]).expect_code(1);
    damage_first_event(&eight.join("lead.jsonl"));
    expect_corrupt(&seven, &eight, "lead");
    // Only a torn tail: the session is read as its good prefix, and is
    // still the first difference.
    let log = one.join("approval.jsonl");
    let good = std::fs::read_to_string(examples().join("approval.jsonl"))
        .unwrap_or_else(|error| panic!("read: {error}"));
    std::fs::write(&log, format!("{good}{{\"seq\":")).unwrap_or_else(|error| panic!("{error}"));
    let compared = run(["diff", &arg(&one), &arg(&two)]);
    compared.expect_code(1);
    assert!(compared.stdout.contains("approval"), "{}", compared.stdout);
}

/// A member's name that serde quotes as it is spelt cannot print a line of
/// its own: the refusal of an input line with a line break in a member's
/// name, and the verdict on a log holding one, are each one line.
#[test]
fn a_line_break_in_a_quoted_name_does_not_forge_a_line() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = store_with_session(dir.path());
    let appended = crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "s1"],
        "{\"type\":\"turn/end\",\"data\":{},\"x\\nsessionlog: FAKE LINE\":1}\n",
    );
    appended.expect_code(1);
    assert_eq!(appended.stderr.lines().count(), 1, "{}", appended.stderr);
    assert!(
        appended.stderr.contains(r"`x\nsessionlog: FAKE LINE`"),
        "{}",
        appended.stderr
    );

    let log = dir.path().join("store").join("s1.jsonl");
    let id = sessionlog_schema::SessionId::parse("s1").unwrap_or_else(|error| panic!("{error}"));
    let body = r#"{"seq":1,"ts":1,"type":"turn/start","data":{"turnId":"t"},"z\ns1: ok (1 event, last seq 1)":1"#;
    let mut text = std::fs::read_to_string(&log).unwrap_or_else(|error| panic!("read: {error}"));
    text.push_str(&sessionlog_schema::encode_line(&id, body));
    std::fs::write(&log, text).unwrap_or_else(|error| panic!("write: {error}"));
    let verified = run(["verify", &store]);
    verified.expect_code(2);
    assert!(!verified.stdout.contains("\ns1: ok"), "{}", verified.stdout);
    assert!(
        verified
            .stdout
            .contains(r"`z\ns1: ok (1 event, last seq 1)`"),
        "{}",
        verified.stdout
    );
}
