//! Hostile input through the real binary and the store.
//!
//! - Arbitrary `append` input lines: no panic; a line that is not one
//!   `{type, data, ts?}` object exits 1 naming the input line, and nothing
//!   is written for it.
//! - Arbitrary JSON as `review-request --pending`: no panic, exit 5 with
//!   `INVALID_ACTION`.
//! - Records above the 16 MiB limit are refused on append, on both backends
//!   and through the binary, and nothing is written.
//! - Ids with `/`, `..`, NUL, look-alike letters are refused before the file
//!   system is touched.
//! - A symlink planted in place of a log or a lock is not followed, and one
//!   given as a log is refused as a symbolic link.

use std::path::Path;

use proptest::prelude::*;
use sessionlog_schema::{SessionHeader, SessionId, MAX_RECORD_BYTES};
use sessionlog_store::{Durability, NewEvent, Store, StoreError, WriterOptions};

use crate::cli_support::{run, run_with_stdin};
use crate::crash::text;
use crate::faults::{id, ok};
use crate::support::LogBuilder;

/// Whether `line` is an input `append` accepts as events: one JSON object
/// with a string `type`, a `data`, an optional unsigned `ts`, nothing else;
/// or a batch, a non-empty array of such objects.
fn is_event_line(line: &str) -> bool {
    let is_event = |value: &serde_json::Value| {
        let serde_json::Value::Object(members) = value else {
            return false;
        };
        members
            .keys()
            .all(|key| ["type", "data", "ts"].contains(&key.as_str()))
            && members
                .get("type")
                .is_some_and(serde_json::Value::is_string)
            && members.contains_key("data")
            && members.get("ts").is_none_or(|ts| ts.as_u64().is_some())
    };
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Array(items)) => !items.is_empty() && items.iter().all(is_event),
        Ok(value) => is_event(&value),
        Err(_) => false,
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        any::<f64>().prop_map(|n| serde_json::json!(n)),
        "[ -~é☃\u{2028}\"\\\\]{0,12}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("type".to_owned()),
                    Just("data".to_owned()),
                    Just("ts".to_owned()),
                    Just("callId".to_owned()),
                    "[a-zA-Z]{0,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|members| serde_json::Value::Object(members.into_iter().collect())),
        ]
    })
}

fn input_line() -> impl Strategy<Value = String> {
    prop_oneof![
        json_value().prop_map(|value| value.to_string()),
        (json_value(), json_value(), any::<i64>()).prop_map(|(kind, data, ts)| {
            serde_json::json!({ "type": kind, "data": data, "ts": ts }).to_string()
        }),
        "[^\n]{0,40}",
        prop::collection::vec(any::<u8>(), 0..40)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).replace('\n', " ")),
    ]
}

fn log_file(folder: &Path) -> std::path::PathBuf {
    let path = folder.join("s.jsonl");
    let log = LogBuilder::new("s")
        .event("request/header", r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"read-only","tools":[{"name":"shell","description":"d","parameters":{}}]}"#)
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .event("step/start", r#"{"stepId":"s1","turnId":"t1"}"#);
    ok(std::fs::write(&path, log.build()));
    path
}

#[track_caller]
fn assert_no_panic(stderr: &str, code: i32) {
    assert!(
        !stderr.contains("panicked") && code != 101,
        "exit {code}: {stderr}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn hostile_append_lines_exit_1_naming_the_line_or_are_judged_as_events(
        good in 0..3usize,
        line in input_line(),
    ) {
        let folder = ok(tempfile::tempdir());
        let path = log_file(folder.path());
        let before = ok(std::fs::read(&path));
        let mut input: String = (0..good)
            .map(|n| format!("{{\"type\":\"x-note\",\"data\":{{\"n\":{n}}}}}\n"))
            .collect();
        input.push_str(&line);
        input.push('\n');
        let outcome = run_with_stdin(["append", &text(&path)], &input);
        assert_no_panic(&outcome.stderr, outcome.code);
        prop_assert_eq!(outcome.stdout.lines().count() >= good, true, "the good lines before it are acknowledged");
        if is_event_line(&line) {
            prop_assert!(matches!(outcome.code, 0 | 1 | 4), "exit {}: {}", outcome.code, outcome.stderr);
            prop_assert!(!outcome.stderr.contains("expected one JSON object"), "{}", outcome.stderr);
        } else {
            prop_assert_eq!(outcome.code, 1, "{}", outcome.stderr);
            let named = format!("input line {}", good + 1);
            prop_assert!(outcome.stderr.contains(&named), "{}", outcome.stderr);
            let after = ok(std::fs::read(&path));
            prop_assert_eq!(after.len() > before.len(), good > 0, "only the good lines are written");
            let snapshot = ok(sessionlog_store::Snapshot::read(&path, None));
            prop_assert_eq!(snapshot.events.len(), 3 + good);
        }
    }

    #[test]
    fn arbitrary_pending_actions_fail_closed_with_invalid_action(value in json_value()) {
        let folder = ok(tempfile::tempdir());
        let path = log_file(folder.path());
        let pending = folder.path().join("pending.json");
        ok(std::fs::write(&pending, value.to_string()));
        let outcome = run(["review-request", &text(&path), "--pending", &text(&pending)]);
        assert_no_panic(&outcome.stderr, outcome.code);
        prop_assert_eq!(outcome.code, 5, "{} {}", outcome.stdout, outcome.stderr);
        let reply: serde_json::Value = ok(serde_json::from_str(&outcome.stdout));
        prop_assert_eq!(&reply["error"], "INVALID_ACTION", "{}", outcome.stdout);
    }
}

#[test]
fn pending_actions_that_are_not_json_fail_closed() {
    let folder = ok(tempfile::tempdir());
    let path = log_file(folder.path());
    let pending = folder.path().join("pending.json");
    for bytes in [
        &b""[..],
        b"{",
        b"\xff\xfe",
        b"{\"callId\":\"c\"} trailing",
        b"\0",
    ] {
        ok(std::fs::write(&pending, bytes));
        let outcome = run(["review-request", &text(&path), "--pending", &text(&pending)]);
        outcome.expect_code(5);
        assert!(
            outcome.stdout.contains("INVALID_ACTION"),
            "{}",
            outcome.stdout
        );
    }
}

#[test]
fn records_above_16_mib_are_refused_and_nothing_is_written() {
    let folder = ok(tempfile::tempdir());
    let huge = format!("{{\"blob\":\"{}\"}}", "a".repeat(MAX_RECORD_BYTES));
    for store in [
        Store::create(&folder.path().join("logs")),
        Store::create(&folder.path().join("sessions.db")),
    ] {
        let store = ok(store);
        let header = SessionHeader::root(id("s"), 1, "/".into());
        ok(store.create_session(&header, &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("s"), WriterOptions::default()));
        let refused = writer.append(NewEvent::new("x-blob", huge.clone()), None);
        assert!(
            matches!(refused, Err(StoreError::InvalidEvent(_))),
            "{refused:?}"
        );
        let batch = writer.append_batch(
            vec![
                NewEvent::new("x-note", "{}"),
                NewEvent::new("x-blob", huge.clone()),
            ],
            None,
        );
        assert!(
            matches!(batch, Err(StoreError::InvalidEvent(_))),
            "{batch:?}"
        );
        assert_eq!(
            ok(writer.append(NewEvent::new("x-note", "{}"), None)).get(),
            1,
            "not poisoned: nothing was written"
        );
        drop(writer);
        assert_eq!(ok(store.snapshot(&id("s"))).events.len(), 1);
    }
    let path = log_file(folder.path());
    let before = ok(std::fs::read(&path));
    let line = format!("{{\"type\":\"x-blob\",\"data\":{huge}}}\n");
    let refused = run_with_stdin(["append", &text(&path)], &line);
    refused.expect_code(1);
    assert!(refused.stderr.contains("limit"), "{}", refused.stderr);
    assert_eq!(ok(std::fs::read(&path)), before);
}

/// Ids a user or an attacker might pass: separators, parent folders, NUL,
/// whitespace, letters that look like ASCII but are not.
const HOSTILE_IDS: &[&str] = &[
    "a/b",
    "../escape",
    "..",
    ".",
    "/etc/passwd",
    "a\\b",
    "a\0b",
    "ｓｅｓｓｉｏｎ",
    "sеssion",
    "а",
    "s\u{200b}",
    "s\n",
    " s",
    "-s",
    "_s",
    "s.jsonl",
    "",
];

#[test]
fn hostile_ids_are_refused_before_the_file_system_is_touched() {
    let long = "a".repeat(129);
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    run([
        "create",
        &text(&store),
        "--session",
        "parent",
        "--cwd",
        "/w",
    ])
    .expect_code(0);
    let listing = |path: &Path| -> Vec<String> {
        let mut names: Vec<String> = ok(std::fs::read_dir(path))
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = (listing(folder.path()), listing(&store));
    for hostile in HOSTILE_IDS.iter().copied().chain([long.as_str()]) {
        assert!(SessionId::parse(hostile).is_err(), "{hostile:?} parses");
        if hostile.contains('\0') {
            continue;
        }
        let create = run([
            "create",
            &text(&store),
            &format!("--session={hostile}"),
            "--cwd",
            "/w",
        ]);
        create.expect_code(1);
        let fork = run([
            "fork",
            &text(&store),
            "--session",
            "parent",
            "--child",
            hostile,
        ]);
        fork.expect_code(1);
        let append = run_with_stdin(
            ["append", &text(&store), &format!("--session={hostile}")],
            "{\"type\":\"x\",\"data\":{}}\n",
        );
        append.expect_code(1);
        assert_eq!(
            (listing(folder.path()), listing(&store)),
            before,
            "{hostile:?} created nothing"
        );
    }
}

#[test]
fn a_symlink_planted_in_place_of_a_log_is_not_followed() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    run(["create", &text(&store), "--session", "real", "--cwd", "/w"]).expect_code(0);
    let outside = folder.path().join("outside.jsonl");
    ok(std::fs::copy(store.join("real.jsonl"), &outside));
    let original = ok(std::fs::read(&outside));
    ok(std::os::unix::fs::symlink(
        &outside,
        store.join("victim.jsonl"),
    ));
    let line = "{\"type\":\"x-note\",\"data\":{}}\n";
    run(["verify", &text(&store), "--session", "victim"]).expect_code(1);
    run(["export", &text(&store), "--session", "victim"]).expect_code(1);
    run_with_stdin(["append", &text(&store), "--session", "victim"], line).expect_code(1);
    let lone_link = folder.path().join("link.jsonl");
    ok(std::os::unix::fs::symlink(&outside, &lone_link));
    run_with_stdin(["append", &text(&lone_link)], line).expect_code(1);
    assert_eq!(
        ok(std::fs::read(&outside)),
        original,
        "the target is untouched"
    );
    let dangling = store.join("new.jsonl");
    let target = folder.path().join("created-through-a-link.jsonl");
    ok(std::os::unix::fs::symlink(&target, &dangling));
    run(["create", &text(&store), "--session", "new", "--cwd", "/w"]).expect_code(1);
    assert!(
        !target.exists(),
        "create does not write through a planted link"
    );
}

/// A symbolic link in a database's place is refused by what it is, by
/// every command that opens a store, creating one included: SQLite's own
/// refusal ("unable to open database file") said nothing of why.
#[test]
fn a_symlink_given_as_a_database_is_refused_as_a_symbolic_link() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("x.db");
    let store = ok(Store::create(&database));
    ok(store.create_session(
        &SessionHeader::root(id("a"), 1, "/w".into()),
        &[],
        Durability::Fsync,
    ));
    drop(store);
    let link = folder.path().join("link.db");
    ok(std::os::unix::fs::symlink("x.db", &link));
    let link = text(&link);
    for args in [
        vec!["verify", link.as_str()],
        vec!["list", link.as_str()],
        vec!["export", link.as_str(), "--session", "a"],
        vec!["create", link.as_str(), "--session", "b", "--cwd", "/w"],
    ] {
        let refused = run(args.clone());
        refused.expect_code(1);
        assert!(
            refused
                .stderr
                .contains("link.db: a symbolic link, not a regular file; a database is only ever a regular file"),
            "{args:?}: {}",
            refused.stderr
        );
    }
    // The database itself is untouched, and reads as ever.
    run(["verify", text(&database).as_str()]).expect_code(0);
    // A link to the folder above it, which SQLite refuses too: said so,
    // and a database `create` would make there is not left behind.
    let folder_link = folder.path().join("linked");
    ok(std::os::unix::fs::symlink(".", &folder_link));
    for args in [
        vec!["verify".to_owned(), text(&folder_link.join("x.db"))],
        vec![
            "create".to_owned(),
            text(&folder_link.join("new.db")),
            "--session".to_owned(),
            "b".to_owned(),
        ],
    ] {
        let refused = run(args.clone());
        refused.expect_code(1);
        assert!(
            refused.stderr.contains("a symbolic link is in the path"),
            "{args:?}: {}",
            refused.stderr
        );
    }
    assert!(
        !folder.path().join("new.db").exists(),
        "nothing is left behind"
    );
}

/// A symbolic link given as a log, in a store by `--session` or on its
/// own, is refused by what it is, as a FIFO is: the system's words for the
/// refused open ("Too many levels of symbolic links") said nothing of why.
#[test]
fn a_symlink_given_as_a_log_is_refused_as_a_symbolic_link() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    run(["create", &text(&store), "--session", "real", "--cwd", "/w"]).expect_code(0);
    ok(std::os::unix::fs::symlink(
        "real.jsonl",
        store.join("link.jsonl"),
    ));
    let lone = folder.path().join("lone.jsonl");
    ok(std::os::unix::fs::symlink(store.join("real.jsonl"), &lone));
    let (store, lone) = (text(&store), text(&lone));
    let out = text(&folder.path().join("out.jsonl"));
    let line = "{\"type\":\"x-note\",\"data\":{}}\n";
    let in_store = |command: &[&str]| {
        let mut args = vec![command[0], store.as_str(), "--session", "link"];
        args.extend(&command[1..]);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let on_its_own = |command: &[&str]| {
        let mut args = vec![command[0], lone.as_str()];
        args.extend(&command[1..]);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let mut runs = Vec::new();
    for command in [
        &["verify"][..],
        &["export"],
        &["stats"],
        &["tail"],
        &["project"],
        &["replay"],
        &["head"],
        &["fork", "--child", "kid"],
    ] {
        runs.push((in_store(command), None));
    }
    runs.push((in_store(&["append"]), Some(line)));
    for command in [&["verify"][..], &["list"], &["export"], &["tail"]] {
        runs.push((on_its_own(command), None));
    }
    runs.push((on_its_own(&["append"]), Some(line)));
    runs.push((vec!["salvage".into(), lone.clone(), out.clone()], None));
    for (args, input) in runs {
        let refused = match input {
            Some(input) => run_with_stdin(&args, input),
            None => run(&args),
        };
        assert_eq!(refused.code, 1, "{args:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains(
                "link.jsonl: a symbolic link, not a regular file; a log is only ever a regular file"
            ) || refused.stderr.contains(
                "lone.jsonl: a symbolic link, not a regular file; a log is only ever a regular file"
            ),
            "{args:?}: {}",
            refused.stderr
        );
        assert!(
            !refused.stderr.contains("os error 40"),
            "{args:?}: {}",
            refused.stderr
        );
    }
}

#[test]
fn a_symlink_planted_in_place_of_a_sqlite_lock_or_database_is_not_followed() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("sessions.db");
    run(["create", &text(&database), "--session", "s", "--cwd", "/w"]).expect_code(0);
    let locks = folder.path().join("sessions.db.locks");
    ok(std::fs::create_dir_all(&locks));
    let outside = folder.path().join("outside.txt");
    ok(std::fs::write(&outside, "keep"));
    let lock = locks.join("s.lock");
    let _ = std::fs::remove_file(&lock);
    ok(std::os::unix::fs::symlink(&outside, &lock));
    let line = "{\"type\":\"x-note\",\"data\":{}}\n";
    run_with_stdin(["append", &text(&database), "--session", "s"], line).expect_code(1);
    assert_eq!(ok(std::fs::read_to_string(&outside)), "keep");
    let linked = folder.path().join("linked.db");
    ok(std::os::unix::fs::symlink(&database, &linked));
    run(["verify", &text(&linked)]).expect_code(1);
}

/// Input lines kept under `tests/fixtures/hostile/`: each is refused with
/// exit 1 naming input line 1, and nothing is written. A JSON array
/// (`["", null]`) was once taken for an event: serde reads a struct from an
/// array of its fields in order.
#[test]
fn stored_hostile_append_lines_are_refused() {
    let fixtures = crate::cli_support::workspace_root().join("tests/fixtures/hostile");
    let mut replayed = 0;
    for entry in ok(std::fs::read_dir(&fixtures)) {
        let path = ok(entry).path();
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        if !name.starts_with("append-line-") {
            continue;
        }
        let folder = ok(tempfile::tempdir());
        let log = log_file(folder.path());
        let before = ok(std::fs::read(&log));
        let line = ok(std::fs::read_to_string(&path));
        let refused = run_with_stdin(["append", &text(&log)], &line);
        refused.expect_code(1);
        assert!(
            refused.stderr.contains("input line 1"),
            "{name}: {}",
            refused.stderr
        );
        assert_eq!(ok(std::fs::read(&log)), before, "{name}: nothing written");
        replayed += 1;
    }
    assert!(replayed >= 2, "the fixtures are there");
}
