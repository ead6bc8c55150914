//! The store and the command line end to end.
//!
//! - A valid log cut at every byte offset: a writer reopens it (truncating
//!   the torn tail), appends, and the result verifies with exactly the
//!   completed units before the cut plus the new event. The same for a
//!   SQLite database whose write-ahead log is cut after a crash.
//! - Two writers: the second gets `Locked`, in one process and across
//!   processes (`sessionlog append` held open by a pipe: exit 6).
//! - `--expect-seq` mismatch: exit 6, nothing written.
//! - Every exit code of README.md, "Exit codes" from a crafted input, and the precedence
//!   "2 wins over 4, 4 over 3".

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sessionlog_projections::fold;
use sessionlog_schema::SessionHeader;
use sessionlog_store::testing::Io;
use sessionlog_store::{
    open_log_writer, Durability, JsonlStore, SqliteStore, Store, StoreError, WriterOptions,
};

use crate::cli_support::{run, run_with_stdin, sessionlog, Run};
use crate::crash::text;
use crate::faults::{expected, id, ok, probe, read_back, realistic_units, Expected};
use crate::realistic::realistic_log;
use crate::support::{sign, LogBuilder};

fn buffered() -> WriterOptions {
    WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: true,
        ..WriterOptions::default()
    }
}

#[test]
fn a_log_cut_at_every_byte_offset_reopens_appends_and_verifies() {
    let log = realistic_log("cut", 7, 3).log();
    let events = log.events();
    let header_end = log.lines[0].range.end;
    let unit_ends = log.unit_ends();
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("cut.jsonl");
    let (mut reopened, mut refused) = (0, 0);
    for cut in 0..=log.bytes.len() {
        ok(std::fs::write(&path, &log.bytes[..cut]));
        let writer = open_log_writer(&path, None, buffered(), Io::default());
        if cut < header_end {
            assert!(
                matches!(writer, Err(StoreError::Corrupt { .. })),
                "cut {cut} inside the header: {writer:?}"
            );
            refused += 1;
            continue;
        }
        let mut writer = writer.unwrap_or_else(|error| panic!("cut {cut}: {error}"));
        let good_end = unit_ends.iter().rev().find(|end| **end <= cut).copied();
        let kept = log
            .lines
            .iter()
            .filter(|line| line.event.is_some() && Some(line.range.end) <= good_end)
            .count();
        let found: Vec<Expected> = writer
            .events()
            .unwrap_or_default()
            .iter()
            .map(read_back)
            .collect();
        let wanted: Vec<Expected> = events[..kept]
            .iter()
            .map(|e| Expected {
                event_type: e.event_type.clone(),
                data: e.data.clone(),
                ts: e.ts,
            })
            .collect();
        assert_eq!(found, wanted, "cut {cut}: the completed units before it");
        assert_eq!(
            std::fs::metadata(&path).map(|m| m.len()).ok(),
            good_end.map(|end| end as u64),
            "cut {cut}: the torn tail is truncated"
        );
        let seq = ok(writer.append(probe(1), None)).get();
        assert_eq!(seq, kept as u64 + 1);
        drop(writer);
        let snapshot = ok(sessionlog_store::Snapshot::read(&path, None));
        assert!(snapshot.torn_tail.is_none(), "cut {cut}");
        assert_eq!(snapshot.events.len(), kept + 1, "cut {cut}");
        let (_, violations) = fold(snapshot.header.clone(), &snapshot.events);
        assert!(violations.is_empty(), "cut {cut}: {violations:?}");
        reopened += 1;
    }
    eprintln!(
        "cut at every offset (store): {} offsets, {reopened} reopened and appended, {refused} refused (the cut fell inside the header)",
        log.bytes.len() + 1
    );
}

#[test]
fn the_binary_reopens_a_log_cut_anywhere_and_verify_agrees() {
    let log = realistic_log("cut", 8, 2).log();
    let header_end = log.lines[0].range.end;
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("cut.jsonl");
    let line = "{\"type\":\"x-test/probe\",\"data\":{\"n\":1}}\n";
    let mut offsets = 0;
    for cut in (header_end..=log.bytes.len()).step_by(53) {
        ok(std::fs::write(&path, &log.bytes[..cut]));
        let torn = !log.unit_ends().contains(&cut);
        let before = run(["verify", &text(&path)]);
        before.expect_code(if torn { 3 } else { 0 });
        run_with_stdin(["append", &text(&path)], line).expect_code(0);
        run(["verify", &text(&path)]).expect_code(0);
        offsets += 1;
    }
    assert!(offsets > 10);
}

/// Copies a database and its write-ahead log while the store is open (as
/// a crash would leave them), then cuts the log at frame boundaries and
/// inside frames: SQLite must open every copy with a prefix of the commits.
#[test]
fn a_sqlite_database_whose_wal_is_cut_anywhere_opens_with_a_prefix_of_its_commits() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("sessions.db");
    let store = Store::Sqlite(ok(SqliteStore::open(&path)));
    let header = SessionHeader::root(id("s"), 1_700_000_000_000, "/work".into());
    ok(store.create_session(&header, &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("s"), WriterOptions::default()));
    let units = realistic_units(3, 6);
    let mut commits = vec![0usize];
    for unit in &units {
        if unit.len() > 1 {
            ok(writer.append_batch(unit.clone(), None));
        } else {
            ok(writer.append(unit[0].clone(), None));
        }
        commits.push(commits.last().copied().unwrap_or(0) + unit.len());
    }
    let all: Vec<Expected> = units.iter().flatten().map(expected).collect();
    let crash = folder.path().join("crash");
    ok(std::fs::create_dir(&crash));
    ok(std::fs::copy(&path, crash.join("image.db")));
    let wal = ok(std::fs::read(folder.path().join("sessions.db-wal")));
    drop(writer);
    drop(store);
    assert!(
        wal.len() > 32,
        "the commits are still in the write-ahead log"
    );
    let page = u32::from_be_bytes([wal[8], wal[9], wal[10], wal[11]]) as usize;
    let frame = 24 + page;
    let mut cuts: Vec<usize> = (0..=(wal.len() - 32) / frame)
        .flat_map(|n| {
            let boundary = 32 + n * frame;
            [
                boundary.saturating_sub(1),
                boundary,
                boundary + 1,
                boundary + 24 + page / 2,
            ]
        })
        .chain([0, 16, 31])
        .filter(|cut| *cut <= wal.len())
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut seen_lengths = std::collections::BTreeSet::new();
    for cut in &cuts {
        let image = crash.join("image.db");
        let copy = crash.join(format!("cut-{cut}.db"));
        ok(std::fs::copy(&image, &copy));
        ok(std::fs::write(
            crash.join(format!("cut-{cut}.db-wal")),
            &wal[..*cut],
        ));
        let opened = Store::Sqlite(ok(SqliteStore::open(&copy)));
        if !ok(opened.contains(&id("s"))) {
            seen_lengths.insert(usize::MAX);
            continue;
        }
        let snapshot = ok(opened.snapshot(&id("s")));
        let found: Vec<Expected> = snapshot.events.iter().map(read_back).collect();
        assert!(
            commits.contains(&found.len()),
            "cut {cut}: a whole number of commits ({} events)",
            found.len()
        );
        assert_eq!(found[..], all[..found.len()], "cut {cut}");
        let mut writer = ok(opened.open_writer(&id("s"), WriterOptions::default()));
        ok(writer.append(probe(1), None));
        seen_lengths.insert(found.len());
    }
    eprintln!(
        "SQLite write-ahead log cut: {} cuts of a {}-byte log, {} distinct commit prefixes seen, each opened, verified and appended to",
        cuts.len(),
        wal.len(),
        seen_lengths.len()
    );
    assert!(seen_lengths.len() > 3, "{seen_lengths:?}");
}

/// A log file or store path for each backend, holding session `s`.
fn store_with_session(folder: &Path, backend: &str) -> std::path::PathBuf {
    let path = folder.join(backend);
    run(["create", &text(&path), "--session", "s", "--cwd", "/work"]).expect_code(0);
    path
}

#[test]
fn a_second_append_while_one_holds_the_session_exits_6() {
    for backend in ["logs", "sessions.db", "one.jsonl"] {
        let folder = ok(tempfile::tempdir());
        let store = store_with_session(folder.path(), backend);
        let mut first = ok(sessionlog(["append", &text(&store), "--session", "s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn());
        let mut stdin = first.stdin.take().unwrap_or_else(|| panic!("piped"));
        let mut acks = BufReader::new(first.stdout.take().unwrap_or_else(|| panic!("piped")));
        ok(stdin.write_all(b"{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n"));
        ok(stdin.flush());
        let mut ack = String::new();
        ok(acks.read_line(&mut ack));
        assert_eq!(ack.trim(), "{\"seq\": 1}", "{backend}");
        let second = run_with_stdin(
            ["append", &text(&store), "--session", "s"],
            "{\"type\":\"turn/end\",\"data\":{\"turnId\":\"t1\"}}\n",
        );
        second.expect_code(6);
        assert!(
            second.stderr.contains("locked"),
            "{backend}: {}",
            second.stderr
        );
        drop(stdin);
        let status = ok(first.wait());
        assert_eq!(status.code(), Some(0), "{backend}");
        let export = run(["export", &text(&store), "--session", "s"])
            .expect_code(0)
            .stdout
            .clone();
        assert_eq!(
            export.lines().count(),
            2,
            "{backend}: header and the first writer's event"
        );
    }
}

#[test]
fn an_expect_seq_mismatch_exits_6_and_writes_nothing() {
    for backend in ["logs", "sessions.db", "one.jsonl"] {
        let folder = ok(tempfile::tempdir());
        let store = store_with_session(folder.path(), backend);
        let events = "{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n{\"type\":\"turn/end\",\"data\":{\"turnId\":\"t1\"}}\n";
        let append_expecting = |seq: &str| {
            run_with_stdin(
                [
                    "append",
                    &text(&store),
                    "--session",
                    "s",
                    "--expect-seq",
                    seq,
                ],
                events,
            )
        };
        append_expecting("1").expect_code(0);
        let before = run(["export", &text(&store), "--session", "s"]).stdout;
        for wrong in ["1", "2", "4"] {
            let conflict = append_expecting(wrong);
            conflict.expect_code(6);
            assert!(
                conflict.stdout.is_empty(),
                "{backend}: nothing acknowledged"
            );
            assert!(
                conflict.stderr.contains("expected the next seq"),
                "{}",
                conflict.stderr
            );
        }
        assert_eq!(
            run(["export", &text(&store), "--session", "s"]).stdout,
            before,
            "{backend}"
        );
        append_expecting("3").expect_code(0);
    }
}

#[test]
fn in_process_a_second_writer_is_locked_on_both_backends() {
    let folder = ok(tempfile::tempdir());
    for store in [
        Store::Jsonl(ok(JsonlStore::create_folder(&folder.path().join("logs")))),
        Store::Sqlite(ok(SqliteStore::open(&folder.path().join("sessions.db")))),
    ] {
        let header = SessionHeader::root(id("s"), 1, "/".into());
        ok(store.create_session(&header, &[], Durability::Fsync));
        let _first = ok(store.open_writer(&id("s"), WriterOptions::default()));
        let second = store.open_writer(&id("s"), WriterOptions::default());
        assert!(
            matches!(second, Err(StoreError::Locked { .. })),
            "{second:?}"
        );
    }
}

/// A valid log of session `s` with an open turn.
fn base() -> LogBuilder {
    base_of("s")
}

/// A valid log of session `session` with an open turn.
fn base_of(session: &str) -> LogBuilder {
    LogBuilder::new(session)
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .event("x-note", r#"{"n":1}"#)
}

fn with_torn_tail(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.extend_from_slice(b"{\"seq\":9,\"ts\":1,\"type\":\"tur");
    bytes
}

fn with_rule_violation(log: LogBuilder) -> LogBuilder {
    log.event("step/end", r#"{"stepId":"nope"}"#)
}

/// Damage followed by an intact line (signed for the log's own id).
fn with_corruption(log: LogBuilder) -> Vec<u8> {
    let session = log.log().id;
    let mut bytes = log.raw(b"{\"seq\":99,\"garbage\n").build();
    let next = sign(&session, r#"{"seq":4,"ts":5,"type":"x-note","data":{}"#);
    bytes.extend_from_slice(next.as_bytes());
    bytes
}

fn verify_file(folder: &Path, name: &str, bytes: &[u8]) -> Run {
    let path = folder.join(name);
    ok(std::fs::write(&path, bytes));
    run(["verify", &text(&path)])
}

#[test]
fn every_exit_code_comes_from_a_crafted_input() {
    let folder = ok(tempfile::tempdir());
    let dir = folder.path();
    let clean = verify_file(dir, "clean.jsonl", &base().build());
    clean.expect_code(0);
    run(["verify", &text(&dir.join("none.jsonl"))]).expect_code(1);
    let bad_line = run_with_stdin(["append", &text(&dir.join("clean.jsonl"))], "not json\n");
    bad_line.expect_code(1);
    assert!(
        bad_line.stderr.contains("input line 1"),
        "{}",
        bad_line.stderr
    );
    // A line the rules refuse is named by its place as well as its seq;
    // the good line before it is acknowledged.
    let refused = run_with_stdin(
        ["append", &text(&dir.join("clean.jsonl"))],
        "{\"type\":\"x-note\",\"data\":{}}\n{\"type\":\"step/end\",\"data\":{\"stepId\":\"nowhere\"}}\n",
    );
    refused.expect_code(4);
    assert!(
        refused.stderr.contains("input line 2") && refused.stderr.contains("(step/end)"),
        "{}",
        refused.stderr
    );
    assert_eq!(refused.stdout.lines().count(), 1, "{}", refused.stdout);
    verify_file(dir, "corrupt.jsonl", &with_corruption(base())).expect_code(2);
    verify_file(dir, "torn.jsonl", &with_torn_tail(base().build())).expect_code(3);
    let rule = verify_file(dir, "rule.jsonl", &with_rule_violation(base()).build());
    rule.expect_code(4);
    assert!(rule.stdout.contains("seq 3"), "{}", rule.stdout);
    let pending = dir.join("pending.json");
    ok(std::fs::write(&pending, "[1,2,3]"));
    let review = run([
        "review-request",
        &text(&dir.join("clean.jsonl")),
        "--pending",
        &text(&pending),
    ]);
    review.expect_code(5);
    assert!(
        review.stdout.contains("INVALID_ACTION"),
        "{}",
        review.stdout
    );
    // A lone log whose header is damaged, or an empty file: INVALID_LOG on
    // stdout, as for damage met after the header, from both commands.
    ok(std::fs::write(dir.join("empty.jsonl"), ""));
    let damaged = ok(std::fs::read_to_string(dir.join("clean.jsonl"))).replacen("/", "|", 1);
    ok(std::fs::write(dir.join("header.jsonl"), damaged));
    for log in ["empty.jsonl", "header.jsonl"] {
        for record in [
            &[][..],
            &["--record", "--endpoint", "http://127.0.0.1:9/v1"],
        ] {
            let command = if record.is_empty() {
                "review-request"
            } else {
                "review"
            };
            let mut args = vec![
                command.to_owned(),
                text(&dir.join(log)),
                "--pending".to_owned(),
                text(&pending),
            ];
            args.extend(record.iter().map(|arg| (*arg).to_owned()));
            let refused = run(args);
            refused.expect_code(2);
            assert!(
                refused.stdout.starts_with("{\"error\":\"INVALID_LOG\""),
                "{command} {log}: {}",
                refused.stdout
            );
        }
    }
    let result = run_with_stdin(["review-result"], r#"{"blocks":[],"stop":"stop"}"#);
    result.expect_code(5);
    assert!(
        result.stdout.contains("AUTO_REVIEW_FAILED"),
        "{}",
        result.stdout
    );
    let store = store_with_session(dir, "locked-logs");
    let _writer = ok(ok(Store::open(&store)).open_writer(&id("s"), WriterOptions::default()));
    run_with_stdin(
        ["append", &text(&store), "--session", "s"],
        "{\"type\":\"x\",\"data\":{}}\n",
    )
    .expect_code(6);
}

#[test]
fn a_database_of_a_newer_schema_exits_1_naming_both_versions() {
    let folder = ok(tempfile::tempdir());
    let path = store_with_session(folder.path(), "sessions.db");
    let connection = ok(rusqlite::Connection::open(&path));
    ok(connection.pragma_update(None, "user_version", 99));
    drop(connection);
    let refused = run(["verify", &text(&path)]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("99")
            && refused
                .stderr
                .contains(&sessionlog_store::SCHEMA_VERSION.to_string()),
        "{}",
        refused.stderr
    );
}

#[test]
fn corruption_wins_over_rule_violations_which_win_over_a_torn_tail() {
    let folder = ok(tempfile::tempdir());
    let dir = folder.path();
    let rule_and_torn = with_torn_tail(with_rule_violation(base()).build());
    verify_file(dir, "rule-torn.jsonl", &rule_and_torn).expect_code(4);
    let corrupt_after_rule = with_corruption(with_rule_violation(base()));
    verify_file(dir, "corrupt-rule.jsonl", &corrupt_after_rule).expect_code(2);
    let store = dir.join("store");
    ok(std::fs::create_dir(&store));
    ok(std::fs::write(
        store.join("s.jsonl"),
        with_torn_tail(base().build()),
    ));
    let write = |name: &str, bytes: Vec<u8>| {
        ok(std::fs::write(store.join(format!("{name}.jsonl")), bytes));
    };
    run(["verify", &text(&store)]).expect_code(3);
    write("v", with_rule_violation(base_of("v")).build());
    run(["verify", &text(&store)]).expect_code(4);
    write("c", with_corruption(base_of("c")));
    run(["verify", &text(&store)]).expect_code(2);
    ok(std::fs::remove_file(store.join("v.jsonl")));
    run(["verify", &text(&store)]).expect_code(2);
    ok(std::fs::remove_file(store.join("c.jsonl")));
    run(["verify", &text(&store)]).expect_code(3);
}

#[test]
fn only_verify_exits_3_other_commands_use_the_good_prefix_and_warn() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("torn.jsonl");
    ok(std::fs::write(&path, with_torn_tail(base().build())));
    let project = run(["project", &text(&path)]);
    project.expect_code(0);
    let projection: serde_json::Value = ok(serde_json::from_str(&project.stdout));
    assert_eq!(projection["seq"], 2, "{}", project.stdout);
    assert!(
        project.stderr.contains("torn"),
        "a warning on stderr: {}",
        project.stderr
    );
    let export = run(["export", &text(&path)]);
    export.expect_code(0);
    // The warning says what the torn bytes are, as every command's does.
    assert!(
        export.stderr.contains("(byte offset ") && export.stderr.contains("): the last line"),
        "{}",
        export.stderr
    );
}

/// An append whose write fails partway (the file size limit, as a full
/// disk does) is refused and leaves none of its events: the lines it wrote
/// whole are cut back, so the next writer neither keeps them nor gives
/// their seqs again, and both backends hold the same log after it.
#[test]
fn an_append_whose_write_fails_partway_leaves_none_of_its_events() {
    let folder = ok(tempfile::tempdir());
    let events: String = (0..400)
        .map(|i| {
            format!(
                "{{\"type\":\"x-t/e\",\"data\":{{\"i\":{i},\"p\":\"{}\"}}}}\n",
                "x".repeat(3000)
            )
        })
        .collect();
    let input = folder.path().join("in.txt");
    ok(std::fs::write(&input, events));
    for store in ["s", "s.db"] {
        let store = text(&folder.path().join(store));
        run(["create", &store, "--session", "a"]).expect_code(0);
        // 512 blocks of 512 bytes: the 1.2 MB group is cut at 256 KiB,
        // after some hundred whole lines (SIGXFSZ ignored, so the write
        // fails with EFBIG instead of killing the process).
        let limited = ok(std::process::Command::new("bash")
            .arg("-c")
            .arg(r#"trap '' XFSZ; ulimit -f 512; exec "$0" append "$1" --session a < "$2""#)
            .arg(crate::cli_support::sessionlog_binary())
            .arg(&store)
            .arg(&input)
            .output());
        let stdout = String::from_utf8_lossy(&limited.stdout);
        let stderr = String::from_utf8_lossy(&limited.stderr);
        assert_eq!(limited.status.code(), Some(1), "{store}: {stdout} {stderr}");
        assert!(
            !stdout.contains("seq"),
            "{store}: nothing acknowledged: {stdout}"
        );
        let retried = run_with_stdin(
            ["append", &store, "--session", "a"],
            "{\"type\":\"x-t/e\",\"data\":{}}\n",
        );
        retried.expect_code(0);
        assert_eq!(
            retried.stdout.trim(),
            r#"{"seq": 1}"#,
            "{store}: {}",
            retried.stderr
        );
        run(["verify", &store]).expect_code(0);
    }
}

/// A window past the log's end is a usage error (1) only on a log that
/// breaks nothing: on one that breaks a rule, `replay` says so with 4, as
/// `project --at` does, since 4 outranks 1.
#[test]
fn a_window_past_the_end_of_a_log_that_breaks_a_rule_is_4_in_replay_and_project() {
    let folder = ok(tempfile::tempdir());
    let clean = folder.path().join("clean.jsonl");
    let broken = folder.path().join("broken.jsonl");
    ok(std::fs::write(&clean, base().build()));
    ok(std::fs::write(&broken, with_rule_violation(base()).build()));
    for (path, code) in [(&clean, 1), (&broken, 4)] {
        for args in [
            &["project", "--at", "99"][..],
            &["replay", "--at", "99"],
            &["replay", "--from", "99"],
        ] {
            let mut args = args.to_vec();
            let path = text(path);
            args.insert(1, &path);
            let ran = run(&args);
            assert_eq!(ran.code, code, "{args:?}: {}", ran.stderr);
            if code == 4 {
                assert!(ran.stderr.contains("seq 3"), "{args:?}: {}", ran.stderr);
            }
        }
    }
}

#[test]
fn a_usage_error_exits_1_never_2_which_means_corruption() {
    for args in [
        &["verify", "--no-such-flag"][..],
        &["no-such-command"],
        &["append"],
        &["fork", "store", "--child", "-s"],
        &["project", "x.jsonl", "--default-approval", "sometimes"],
    ] {
        let outcome = run(args);
        outcome.expect_code(1);
        assert!(!outcome.stderr.is_empty(), "{args:?} says why");
    }
    run(["--help"]).expect_code(0);
    run(["--version"]).expect_code(0);
}

#[test]
fn an_append_of_many_lines_at_once_acknowledges_them_all() {
    // More acknowledgements than a pipe holds: the input must be written
    // while the output is read.
    let folder = ok(tempfile::tempdir());
    let store = store_with_session(folder.path(), "logs");
    let input: String = (0..20_000)
        .map(|n| format!("{{\"type\":\"x-note\",\"data\":{{\"n\":{n}}}}}\n"))
        .collect();
    let appended = run_with_stdin(["append", &text(&store), "--session", "s"], &input);
    appended.expect_code(0);
    assert_eq!(appended.stdout.lines().count(), 20_000);
}

#[test]
fn export_prints_a_header_as_it_was_written_even_out_of_vocabulary() {
    use crate::support::MemberOrder;
    let builder = LogBuilder::new("foreign")
        .member_order(MemberOrder::Reversed)
        .sandbox_mode("bogus")
        .event("turn/start", r#"{"turnId":"t1"}"#);
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("foreign.jsonl");
    ok(std::fs::write(&path, builder.build()));
    let path = text(&path);
    let exported = run(["export", path.as_str()]);
    exported.expect_code(0);
    let first = exported.stdout.lines().next().unwrap_or_default();
    assert_eq!(first, format!("{}}}", builder.header_line_body()));
    assert!(first.contains(r#""sandboxMode":"bogus""#), "{first}");
    run(["verify", path.as_str()]).expect_code(4);
}

#[test]
fn a_database_header_out_of_vocabulary_is_a_rule_violation_for_every_folding_command() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("store.db");
    let store = ok(SqliteStore::open(&database));
    let header = SessionHeader::root(id("db-header"), 1, "/w".into());
    ok(store.create(&header, &[], Durability::Fsync));
    drop(store);
    let connection = ok(rusqlite::Connection::open(&database));
    let body = header
        .to_body()
        .replace(r#""sandboxMode":null"#, r#""sandboxMode":"bogus""#);
    let crc = crate::support::spec_crc("db-header", body.as_bytes());
    ok(connection.execute(
        "UPDATE sessions SET header_body = ?1, header_crc = ?2, sandbox_mode = 'bogus' WHERE id = 'db-header'",
        rusqlite::params![body, i64::from(crc)],
    ));
    drop(connection);
    let database = text(&database);
    let verified = run(["verify", database.as_str()]);
    verified.expect_code(4);
    assert!(
        verified.stdout.contains("sandboxMode"),
        "{}",
        verified.stdout
    );
    run(["project", database.as_str(), "--session", "db-header"]).expect_code(4);
    let exported = run(["export", database.as_str()]);
    exported.expect_code(0);
    assert!(
        exported.stdout.starts_with(&format!("{body}}}")),
        "{}",
        exported.stdout
    );
}

/// `migrate --resume` from one source removes the marks of interrupted
/// migrations from that source only: the folder may still lack what a
/// migration from another source had not published, and `verify` names
/// each unfinished one (it once named the first alone, and a resume from
/// any source removed them all).
#[test]
fn a_resume_removes_only_the_marks_of_migrations_from_its_source() {
    let folder = ok(tempfile::tempdir());
    let source = folder.path().join("from-a");
    run(["create", &text(&source), "--session", "a1"]).expect_code(0);
    let destination = folder.path().join("dst");
    run(["migrate", &text(&source), &text(&destination)]).expect_code(0);
    let absolute = ok(std::path::absolute(&source));
    let other = folder.path().join("from-b");
    for (token, named) in [("4242-1", text(&absolute)), ("4243-2", text(&other))] {
        ok(std::fs::write(
            destination.join(format!(".migrate-{token}.lock")),
            format!("{named}\n"),
        ));
    }
    let verified = run(["verify", &text(&destination)]);
    verified.expect_code(0);
    for named in [text(&absolute), text(&other)] {
        assert!(
            verified
                .stderr
                .contains(&format!("sessionlog migrate {named} ")),
            "{named}: {}",
            verified.stderr
        );
    }
    run(["migrate", &text(&source), &text(&destination), "--resume"]).expect_code(0);
    assert!(!destination.join(".migrate-4242-1.lock").exists());
    assert!(
        destination.join(".migrate-4243-2.lock").exists(),
        "the migration from another source is not finished"
    );
    let verified = run(["verify", &text(&destination)]);
    assert!(
        verified
            .stderr
            .contains(&format!("sessionlog migrate {} ", text(&other)))
            && !verified.stderr.contains(&text(&absolute)),
        "{}",
        verified.stderr
    );
}

/// The lock of an interrupted migration is not among the files `verify`
/// says `clean` removes: `clean` keeps it until a run finishes that
/// migration, which `verify` says instead.
#[test]
fn verify_does_not_say_clean_removes_an_interrupted_migrations_lock() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    run(["create", &text(&store), "--session", "s1"]).expect_code(0);
    let lock = store.join(".migrate-4242-1700000000000.lock");
    ok(std::fs::write(&lock, b"/src\n"));
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    ok(ok(std::fs::OpenOptions::new().write(true).open(&lock)).set_modified(hour_ago));
    let verified = run(["verify", &text(&store)]);
    verified.expect_code(0);
    assert!(
        !verified.stderr.contains("temporary file"),
        "{}",
        verified.stderr
    );
    assert!(
        verified.stderr.contains("migrate /src"),
        "the migration to resume is named: {}",
        verified.stderr
    );
    run(["clean", &text(&store)]).expect_code(0);
    assert!(lock.exists(), "clean keeps the lock");
}

#[test]
fn clean_removes_only_old_temporary_files_nobody_holds() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    run(["create", &text(&store), "--session", "s1"]).expect_code(0);
    let stale = store.join(".s2.jsonl.tmp-4242-1700000000000");
    let recent = store.join(".s3.jsonl.tmp-4242-1700000000001");
    let held = store.join(".s4.jsonl.tmp-4242-1700000000002");
    for path in [&stale, &recent, &held] {
        ok(std::fs::write(path, b"{\"kind\":\"header\""));
    }
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for path in [&stale, &held] {
        let file = ok(std::fs::OpenOptions::new().write(true).open(path));
        ok(file.set_modified(hour_ago));
    }
    // A creation in progress holds its temporary file's lock.
    let holder = ok(std::fs::File::open(&held));
    ok(holder.try_lock());

    let verified = run(["verify", &text(&store)]);
    verified.expect_code(0);
    assert!(
        verified.stderr.contains("2 temporary files"),
        "verify names the two nobody holds: {}",
        verified.stderr
    );
    assert!(
        verified.stderr.contains("sessionlog clean"),
        "{}",
        verified.stderr
    );
    // One of them is recent, which `clean` keeps unless told otherwise:
    // the advice says so.
    assert!(
        verified
            .stderr
            .contains("once written 10 minutes ago (1 of them written since; `--older-than 0`"),
        "{}",
        verified.stderr
    );

    let dry = run(["clean", &text(&store), "--dry-run"]);
    dry.expect_code(0);
    assert!(
        dry.stdout
            .contains(&format!("would remove: {}", stale.display())),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("1 temporary file would be removed (16 bytes), 2 kept"),
        "{}",
        dry.stdout
    );
    assert!(stale.exists(), "a dry run removes nothing");

    let cleaned = run(["clean", &text(&store), "--json"]);
    cleaned.expect_code(0);
    let actions: Vec<(String, String)> = cleaned
        .stdout
        .lines()
        .map(|line| {
            let entry: serde_json::Value = ok(serde_json::from_str(line));
            (
                entry["path"].as_str().unwrap_or_default().to_owned(),
                entry["action"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            (text(&stale), "removed".to_owned()),
            (text(&recent), "recent".to_owned()),
            (text(&held), "in use".to_owned()),
        ]
    );
    assert!(!stale.exists() && recent.exists() && held.exists());
    assert!(store.join("s1.jsonl").exists(), "a log is never touched");

    drop(holder);
    run(["clean", &text(&store), "--older-than", "0"]).expect_code(0);
    assert!(!recent.exists() && !held.exists());
    run(["verify", &text(&store)]).expect_code(0);

    let database = folder.path().join("sessions.db");
    run(["create", &text(&database), "--session", "s1"]).expect_code(0);
    let on_database = run(["clean", &text(&database)]);
    on_database.expect_code(0);
    assert!(on_database.stdout.contains("keeps no temporary files"));
    run(["clean", &text(&store.join("s1.jsonl"))]).expect_code(1);
}

/// A writer killed while it wrote its state snapshot leaves the snapshot's
/// `.new` beside the log: `verify` names it and `clean` removes it, unless
/// a writer holds the log (it may be writing it); the snapshot itself and
/// the log stay.
#[test]
fn clean_removes_a_killed_writers_snapshot_draft_once_no_writer_holds_the_log() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    run(["create", &text(&store), "--session", "s1"]).expect_code(0);
    let log = store.join("s1.jsonl");
    let sidecar = store.join(".s1.jsonl.state");
    let draft = store.join(".s1.jsonl.state.new");
    for path in [&sidecar, &draft] {
        ok(std::fs::write(path, b"sessionlog-state"));
        let file = ok(std::fs::OpenOptions::new().write(true).open(path));
        ok(file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600)));
    }
    // A writer holds its log's lock for as long as it is open.
    let writer = ok(std::fs::File::open(&log));
    ok(writer.try_lock());
    let held = run(["clean", &text(&store), "--json"]);
    held.expect_code(0);
    assert!(
        held.stdout.contains("\"action\":\"in use\""),
        "{}",
        held.stdout
    );
    assert_eq!(
        held.stdout.lines().count(),
        1,
        "only the draft is listed: {}",
        held.stdout
    );
    assert!(draft.exists());

    drop(writer);
    let verified = run(["verify", &text(&store)]);
    verified.expect_code(0);
    assert!(
        verified.stderr.contains("1 temporary file")
            && verified.stderr.contains(".s1.jsonl.state.new"),
        "{}",
        verified.stderr
    );
    run(["clean", &text(&store)]).expect_code(0);
    assert!(!draft.exists(), "the killed writer's draft is removed");
    assert!(
        sidecar.exists() && log.exists(),
        "the snapshot and the log stay"
    );
}

/// The lock of a migration into a folder, left by a run that was killed,
/// is the one mark that the folder may lack sessions that run had not
/// published: `verify` and `clean` say so, `clean` keeps it, and it stays
/// until `migrate --resume` finishes the migration, which the warning
/// spells out from the source the lock names, quoted for a shell.
#[test]
fn an_interrupted_migration_is_named_until_a_run_finishes_it() {
    let folder = ok(tempfile::tempdir());
    let source = folder.path().join("my source");
    let store = folder.path().join("logs");
    for session in ["s1", "s2", "s3"] {
        run(["create", &text(&source), "--session", session]).expect_code(0);
    }
    run(["migrate", &text(&source), &text(&store)]).expect_code(0);
    // What a run killed while publishing leaves: a session not yet there,
    // and its lock, held by no run.
    ok(std::fs::remove_file(store.join("s3.jsonl")));
    // Its lock names the source as docs/FORMAT.md says: one line.
    let lock = store.join(".migrate-4242-1700000000000.lock");
    ok(std::fs::write(&lock, format!("{}\n", text(&source))));
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    ok(ok(std::fs::OpenOptions::new().write(true).open(&lock)).set_modified(hour_ago));
    let command = format!(
        "`sessionlog migrate '{}' {} --resume`",
        text(&source),
        text(&store)
    );
    let interrupted =
        |output: &str| output.contains("was interrupted") && output.contains(&command);
    let verified = run(["verify", &text(&store)]);
    verified.expect_code(0);
    assert!(interrupted(&verified.stderr), "{}", verified.stderr);
    // A lock that names no source (cut short by a crash) leaves it to be
    // filled in.
    ok(std::fs::write(&lock, b""));
    ok(ok(std::fs::OpenOptions::new().write(true).open(&lock)).set_modified(hour_ago));
    let unnamed = run(["verify", &text(&store)]);
    let from = format!("`sessionlog migrate FROM {} --resume`", text(&store));
    assert!(unnamed.stderr.contains(&from), "{}", unnamed.stderr);
    ok(std::fs::write(&lock, format!("{}\n", text(&source))));
    ok(ok(std::fs::OpenOptions::new().write(true).open(&lock)).set_modified(hour_ago));
    let cleaned = run(["clean", &text(&store)]);
    cleaned.expect_code(0);
    assert!(lock.exists(), "clean kept the mark");
    assert!(
        cleaned.stdout.contains("unfinished migration: "),
        "{}",
        cleaned.stdout
    );
    assert!(interrupted(&cleaned.stderr), "{}", cleaned.stderr);
    // Still said after the clean: the folder is still short of s3.
    let again = run(["verify", &text(&store)]);
    assert!(interrupted(&again.stderr), "{}", again.stderr);
    // A run that finishes the migration takes the mark away.
    run(["migrate", &text(&source), &text(&store), "--resume"]).expect_code(0);
    assert!(store.join("s3.jsonl").exists());
    assert!(!lock.exists(), "the finished migration's lock is gone");
    let finished = run(["verify", &text(&store)]);
    finished.expect_code(0);
    assert!(
        !finished.stderr.contains("interrupted"),
        "{}",
        finished.stderr
    );
}

/// In a folder shared between users, a leftover this user may not open
/// (another user's, 0600) is kept, and the others are still cleaned: one
/// unreadable file once ended `clean` with nothing removed. Run as another
/// user through `setpriv` when the tests run as root; otherwise there is
/// no second user to be, and the test says so.
#[test]
fn clean_keeps_a_leftover_it_may_not_open_and_cleans_the_rest() {
    use std::os::unix::fs::PermissionsExt;
    let Some(as_other) = crate::cli_support::as_another_user() else {
        return;
    };
    let dir = ok(tempfile::tempdir());
    ok(std::fs::set_permissions(
        dir.path(),
        std::fs::Permissions::from_mode(0o777),
    ));
    let theirs = dir.path().join(".x.jsonl.tmp-1-2");
    let ours = dir.path().join(".y.jsonl.tmp-1-3");
    ok(std::fs::write(&theirs, "x"));
    ok(std::fs::set_permissions(
        &theirs,
        std::fs::Permissions::from_mode(0o000),
    ));
    ok(std::fs::write(&ours, "y"));
    // Another user's migration lock: this user cannot tell a running
    // migration from an interrupted one, and says so.
    let lock = dir.path().join(".migrate-99998-1.lock");
    ok(std::fs::write(&lock, ""));
    ok(std::fs::set_permissions(
        &lock,
        std::fs::Permissions::from_mode(0o600),
    ));
    let output = ok(as_other()
        .args(["clean", text(dir.path()).as_str(), "--older-than", "0"])
        .output());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stderr}");
    assert!(theirs.exists(), "a file it may not open was removed");
    assert!(lock.exists(), "another user's lock was removed");
    assert!(!ours.exists(), "the other leftover was kept: {stderr}");
    assert!(
        stdout.contains(&format!("unreadable: {}", theirs.display())) && !stdout.contains("in use"),
        "{stdout}"
    );
    assert!(
        stderr.contains("by another user, which this user cannot test"),
        "{stderr}"
    );
    let verified = ok(as_other()
        .args(["verify", text(dir.path()).as_str(), "--allow-empty"])
        .output());
    let stderr = String::from_utf8_lossy(&verified.stderr);
    assert!(
        stderr.contains("by another user, which this user cannot test"),
        "{stderr}"
    );
}

/// `salvage` takes one log file and writes one: a database on either side
/// is a usage error naming what it is, and nothing is written.
#[test]
fn salvage_refuses_a_database_on_either_side() {
    let dir = ok(tempfile::tempdir());
    let database = dir.path().join("store.db");
    run(["create", text(&database).as_str(), "--session", "s"]).expect_code(0);
    let log = dir.path().join("s.jsonl");
    run(["create", text(&log).as_str(), "--session", "s"]).expect_code(0);
    let out = dir.path().join("out.jsonl");
    let read = run(["salvage", text(&database).as_str(), text(&out).as_str()]);
    read.expect_code(1);
    assert!(read.stderr.contains("is a database"), "{}", read.stderr);
    assert!(!out.exists());
    let into = dir.path().join("out.db");
    let written = run(["salvage", text(&log).as_str(), text(&into).as_str()]);
    written.expect_code(1);
    assert!(
        written.stderr.contains("not a database"),
        "{}",
        written.stderr
    );
    assert!(!into.exists());
    // A name no command takes a lone log by (`OUT.DB`, `out.log`) is
    // refused too: the salvaged log could not be read back.
    for name in ["OUT.DB", "out.log"] {
        let into = dir.path().join(name);
        let written = run(["salvage", text(&log).as_str(), text(&into).as_str()]);
        written.expect_code(1);
        assert!(
            written.stderr.contains("ends in .jsonl"),
            "{name}: {}",
            written.stderr
        );
        assert!(!into.exists(), "{name}");
    }
}

/// Writes `h.jsonl` in `folder`: the log of session `h` whose header's
/// `createdAt` is above 2^63 - 1, which the format allows and no backend
/// stores; returns its path.
fn unstorable_header_log(folder: &Path) -> PathBuf {
    let log = folder.join("h.jsonl");
    let body = r#"{"kind":"header","formatVersion":1,"id":"h","createdAt":18446744073709551615,"cwd":"/w","parentSession":null,"seedLength":0,"delegationDepth":0,"sandboxMode":null,"approvalPolicy":null"#;
    let crc = sessionlog_schema::record_crc(&id("h"), body.as_bytes());
    ok(std::fs::write(
        &log,
        format!("{body},\"crc\":\"{crc:08x}\"}}\n"),
    ));
    log
}

/// A header with a value no backend stores (a `createdAt` above 2^63 - 1,
/// which the format allows) leaves nothing to salvage: said so, naming the
/// file, and nothing written.
#[test]
fn salvage_names_a_header_no_backend_stores() {
    let dir = ok(tempfile::tempdir());
    let log = unstorable_header_log(dir.path());
    let out = dir.path().join("out.jsonl");
    let refused = run(["salvage", text(&log).as_str(), text(&out).as_str()]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains(
            "h.jsonl: nothing valid can be salvaged: the header holds a value no backend stores"
        ) && refused.stderr.contains("createdAt"),
        "{}",
        refused.stderr
    );
    assert!(!out.exists());
}

/// `migrate` of a log whose header holds a value no backend stores refuses
/// it, naming the session once.
#[test]
fn migrate_names_a_header_no_backend_stores_once() {
    let dir = ok(tempfile::tempdir());
    let log = unstorable_header_log(dir.path());
    let database = dir.path().join("copy.db");
    let refused = run(["migrate", text(&log).as_str(), text(&database).as_str()]);
    refused.expect_code(1);
    assert!(
        refused
            .stderr
            .contains("invalid header: session h: createdAt 18446744073709551615")
            && refused.stderr.matches("session h:").count() == 1,
        "{}",
        refused.stderr
    );
}

/// A parent whose header holds a value no backend stores (a NUL in its
/// `cwd`, which its log may hold) is not forked: the child would take it.
/// The refusal names the parent's log, not only the child that was not
/// made; and it comes once the parent was read, so that damage there
/// outranks it (exit 2 over 1).
#[test]
fn a_fork_that_would_inherit_a_header_value_no_backend_stores_names_its_parent() {
    let dir = ok(tempfile::tempdir());
    let header = r#"{"kind":"header","formatVersion":1,"id":"h","createdAt":1,"cwd":"/a\u0000b","parentSession":null,"seedLength":0,"delegationDepth":0,"sandboxMode":null,"approvalPolicy":null"#;
    let line = |body: &str| {
        let crc = sessionlog_schema::record_crc(&id("h"), body.as_bytes());
        format!("{body},\"crc\":\"{crc:08x}\"}}\n")
    };
    let events = [
        r#"{"seq":1,"ts":2,"type":"turn/start","data":{"turnId":"t1"}"#,
        r#"{"seq":2,"ts":3,"type":"turn/end","data":{"turnId":"t1"}"#,
    ];
    let log = dir.path().join("h.jsonl");
    let good: String = [line(header), line(events[0]), line(events[1])].concat();
    ok(std::fs::write(&log, &good));
    run(["verify", text(&log).as_str()]).expect_code(0);
    let folder = text(dir.path());
    let refused = run(["fork", folder.as_str(), "--session", "h", "--child", "c"]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("invalid header: session c: cwd")
            && refused.stderr.contains("NUL")
            && refused
                .stderr
                .contains(&format!("its parent's log {}", log.display())),
        "{}",
        refused.stderr
    );
    assert!(!dir.path().join("c.jsonl").exists());
    // The first event damaged, an intact one after it: corruption.
    ok(std::fs::write(
        &log,
        good.replacen("turn/start", "turn/stArt", 1),
    ));
    let refused = run(["fork", folder.as_str(), "--session", "h", "--child", "c"]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("corrupt"), "{}", refused.stderr);
    assert!(!dir.path().join("c.jsonl").exists());
}

/// A record with a value no backend stores (a `ts` above 2^63 - 1, which
/// the format itself allows) ends what `salvage` copies, as a rule
/// violation does: the records before it are kept, and it is named.
#[test]
fn salvage_keeps_what_comes_before_a_record_no_backend_stores() {
    let dir = ok(tempfile::tempdir());
    let log = dir.path().join("big.jsonl");
    run(["create", text(&log).as_str(), "--session", "big"]).expect_code(0);
    let header = ok(std::fs::read_to_string(&log));
    let id = id("big");
    let line = |body: &str| {
        let crc = sessionlog_schema::record_crc(&id, body.as_bytes());
        format!("{body},\"crc\":\"{crc:08x}\"}}\n")
    };
    let text_of_log = format!(
        "{header}{}{}{}",
        line(r#"{"seq":1,"ts":1,"type":"turn/start","data":{"turnId":"t1"}"#),
        line(r#"{"seq":2,"ts":9223372036854775808,"type":"turn/end","data":{"turnId":"t1"}"#),
        r#"{"seq":3,"ts"#
    );
    ok(std::fs::write(&log, text_of_log));
    let out = dir.path().join("out.jsonl");
    let salvaged = run([
        "salvage",
        text(&log).as_str(),
        text(&out).as_str(),
        "--json",
    ]);
    salvaged.expect_code(0);
    let report: serde_json::Value = ok(serde_json::from_str(&salvaged.stdout));
    assert_eq!(report["events"], 1, "{report}");
    assert_eq!(report["leftBehind"]["cause"], "unstorable", "{report}");
    assert_eq!(report["leftBehind"]["line"], 3, "{report}");
    run(["verify", text(&out).as_str()]).expect_code(0);
}

/// `list --tree` of a chain of delegations tens of thousands deep prints
/// it (it once overflowed its stack), each line at most 64 levels
/// indented, the deeper ones saying their depth.
#[test]
fn list_tree_prints_a_chain_of_forty_thousand_delegations() {
    let dir = ok(tempfile::tempdir());
    const DEPTH: usize = 40_000;
    for n in 0..DEPTH {
        let mut header = SessionHeader::root(id(&format!("n{n:05}")), 1, "/w".to_owned());
        if n > 0 {
            header.parent_session = Some(id(&format!("n{:05}", n - 1)));
            header.delegation_depth = n as u64;
        }
        ok(std::fs::write(
            dir.path().join(format!("n{n:05}.jsonl")),
            header.encode(),
        ));
    }
    let listed = run(["list", text(dir.path()).as_str(), "--tree"]);
    listed.expect_code(0);
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), DEPTH, "{}", listed.stderr);
    assert_eq!(lines[0], "n00000");
    let last = lines[DEPTH - 1];
    assert!(
        last.ends_with(&format!("n{:05}  (depth {})", DEPTH - 1, DEPTH - 1)),
        "{last}"
    );
    assert!(last.chars().count() < 64 * 4 + 40, "{last}");
}

/// A store whose path holds a line break is named on one line, as a path
/// in a message is: in `create`'s, `migrate`'s and `verify`'s own output
/// too, where a tool reading line by line would take its second half for
/// a line of its own.
#[test]
fn a_store_named_with_a_line_break_is_named_on_one_line() {
    let folder = ok(tempfile::tempdir());
    let odd = folder.path().join("odd\nname");
    let copy = folder.path().join("copy\nname");
    let created = run(["create", &text(&odd), "--session", "s1"]);
    created.expect_code(0);
    let migrated = run(["migrate", &text(&odd), &text(&copy)]);
    migrated.expect_code(0);
    let verified = run(["verify", &text(&odd)]);
    verified.expect_code(0);
    for (what, output, lines) in [
        ("create", &created.stdout, 1),
        ("migrate", &migrated.stdout, 1),
        ("verify", &verified.stdout, 1),
    ] {
        assert_eq!(output.lines().count(), lines, "{what}: {output}");
        assert!(output.contains("name"), "{what}: {output}");
        assert!(output.contains(r"\nname"), "{what}: {output}");
    }
}

/// A lone log whose header is too damaged to read is reported as a folder
/// of logs reports it, under the file's name: `verify --json`, `stats
/// --json` and `list --json` each print the damage as JSON (exit 2), where
/// they printed nothing on standard output.
#[test]
fn a_lone_log_with_a_damaged_header_is_reported_as_json() {
    let dir = ok(tempfile::tempdir());
    let store = dir.path().join("store");
    run(["create", &text(&store), "--session", "a"]).expect_code(0);
    let lone = dir.path().join("lone.jsonl");
    let header = ok(std::fs::read_to_string(store.join("a.jsonl")));
    ok(std::fs::write(
        &lone,
        header.replace(r#""formatVersion":1"#, r#""formatVersion":2"#),
    ));
    for (command, member) in [
        ("verify", "corruption"),
        ("stats", "corrupt"),
        ("list", "error"),
    ] {
        let reported = run([command, "--json", &text(&lone)]);
        reported.expect_code(2);
        let line = reported.stdout.lines().next().unwrap_or_default();
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("{command}: {error}: {line:?}"));
        let shown = value.to_string();
        assert!(
            shown.contains("line 1 (byte offset 0)") && shown.contains(member),
            "{command}: {shown}"
        );
    }
}
