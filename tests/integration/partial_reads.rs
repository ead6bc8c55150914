//! Reads that need not cost the whole log: `project --at K` reads through
//! seq K and no further, and `tail -n N` of a database reads only its last
//! N rows. Each reports damage only in what it read; `verify` still finds
//! the rest.

use std::path::Path;

use crate::cli_support::{run, run_with_stdin, Follower, Run};

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

/// `count` notes `{"n": 1..=count}` appended to a new session `s` of `store`.
fn notes(store: &Path, count: u64) {
    run(["create", &text(store), "--session", "s"]).expect_code(0);
    let lines: String = (1..=count)
        .map(|n| format!("{{\"type\":\"x-test/note\",\"data\":{{\"n\":{n}}}}}\n"))
        .collect();
    run_with_stdin(["append", &text(store), "--session", "s"], &lines).expect_code(0);
}

/// The `n` of every event `tail` printed, in order.
fn printed_notes(tail: &Run) -> Vec<u64> {
    tail.stdout
        .lines()
        .map(|line| {
            let record: serde_json::Value = ok(serde_json::from_str(line));
            record["data"]["n"]
                .as_u64()
                .unwrap_or_else(|| panic!("no data.n in {line}"))
        })
        .collect()
}

#[test]
fn project_at_reads_through_its_seq_and_leaves_later_damage_to_verify() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    notes(&store, 6);
    let log = store.join("s.jsonl");
    // One byte of seq 4's data changed: its CRC no longer matches, and
    // intact records follow, so the log is corrupt from line 5 on.
    let bytes = ok(std::fs::read_to_string(&log));
    let damaged = bytes.replacen("{\"n\":4}", "{\"n\":7}", 1);
    assert_ne!(damaged, bytes, "seq 4 carries n 4");
    ok(std::fs::write(&log, damaged));

    let through_3 = run(["project", &text(&store), "--session", "s", "--at", "3"]);
    through_3.expect_code(0);
    let projection: serde_json::Value = ok(serde_json::from_str(&through_3.stdout));
    assert_eq!(projection["seq"], 3, "{}", through_3.stdout);
    assert!(through_3.stderr.is_empty(), "{}", through_3.stderr);

    for whole in [
        run(["project", &text(&store), "--session", "s", "--at", "4"]),
        run(["project", &text(&store), "--session", "s"]),
        run(["verify", &text(&store)]),
    ] {
        whole.expect_code(2);
        let said = format!("{}{}", whole.stdout, whole.stderr);
        assert!(said.contains("corrupt at line 5"), "{said}");
    }
}

#[test]
fn tail_of_a_database_reads_only_its_last_rows() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    notes(&database, 10);
    {
        // Seq 2's body no longer matches its CRC.
        let connection = ok(rusqlite::Connection::open(&database));
        let changed = ok(connection.execute(
            "UPDATE events SET body = replace(body, '\"n\":2', '\"n\":9') WHERE seq = 2",
            [],
        ));
        assert_eq!(changed, 1);
    }
    let last_3 = run(["tail", &text(&database), "--session", "s", "-n", "3"]);
    last_3.expect_code(0);
    assert_eq!(printed_notes(&last_3), [8, 9, 10]);
    let last_8 = run(["tail", &text(&database), "--session", "s", "-n", "8"]);
    last_8.expect_code(0);
    assert_eq!(printed_notes(&last_8), (3..=10).collect::<Vec<_>>());
    for reaching_seq_2 in [
        run(["tail", &text(&database), "--session", "s", "-n", "9"]),
        run(["tail", &text(&database), "--session", "s", "-n", "100"]),
        run(["verify", &text(&database)]),
    ] {
        reaching_seq_2.expect_code(2);
        let said = format!("{}{}", reaching_seq_2.stdout, reaching_seq_2.stderr);
        assert!(said.contains("seq 2: CRC mismatch"), "{said}");
    }
    let none = run(["tail", &text(&database), "--session", "s", "-n", "0"]);
    none.expect_code(0);
    assert!(none.stdout.is_empty(), "{}", none.stdout);
}

/// `tail -f` of a log goes on from the last events it printed: what it
/// follows is read from there, so damage earlier in the log (left for
/// `verify`) is never reached, where a follower reading the log from its
/// start would stop at it.
#[test]
fn tail_follow_of_a_log_goes_on_from_its_end() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    notes(&store, 10);
    let log = store.join("s.jsonl");
    let bytes = ok(std::fs::read_to_string(&log));
    let damaged = bytes.replacen("{\"n\":2}", "{\"n\":9}", 1);
    assert_ne!(damaged, bytes, "seq 2 carries n 2");
    ok(std::fs::write(&log, damaged));

    // Notes n 1..=10 are seqs 1..=10.
    let mut tail = Follower::start(
        &["tail", &text(&store), "--session", "s", "-f", "-n", "2"],
        false,
    );
    assert_eq!(tail.next_seqs(2), [9, 10]);
    // A writer refuses the damaged log, so seq 11 is appended as one would
    // have written it.
    let body = "{\"seq\":11,\"ts\":1,\"type\":\"x-test/note\",\"data\":{\"n\":11}";
    let mut file = ok(std::fs::OpenOptions::new().append(true).open(&log));
    ok(std::io::Write::write_all(
        &mut file,
        crate::support::sign("s", body).as_bytes(),
    ));
    drop(file);
    assert_eq!(tail.next_seqs(1), [11]);
    assert!(
        tail.is_running(),
        "tail -f still follows: it never read seq 2"
    );
    drop(tail);
    run(["verify", &text(&store)]).expect_code(2);
}

/// Damage at seq 7 of ten: every backend gives out the six events before
/// it, then the error, as a read of a log file does. `project --at 3`
/// succeeds, `tail --from 1` prints seqs 1–6 and exits 2, `stats` counts
/// six events of a corrupt session.
#[test]
fn a_damaged_session_reads_the_same_up_to_its_damage_in_every_backend() {
    let folder = ok(tempfile::tempdir());
    let logs = folder.path().join("logs");
    let database = folder.path().join("s.db");
    notes(&logs, 10);
    run(["migrate", &text(&logs), &text(&database)]).expect_code(0);
    // Seq 7's data changed, its CRC left as it was.
    let log = logs.join("s.jsonl");
    let bytes = ok(std::fs::read_to_string(&log));
    ok(std::fs::write(
        &log,
        bytes.replacen("{\"n\":7}", "{\"n\":0}", 1),
    ));
    let connection = ok(rusqlite::Connection::open(&database));
    let changed = ok(connection.execute(
        "UPDATE events SET body = replace(body, '\"n\":7', '\"n\":0') WHERE seq = 7",
        [],
    ));
    assert_eq!(changed, 1);
    drop(connection);
    for store in [text(&logs), text(&database)] {
        run(["project", &store, "--session", "s", "--at", "3"]).expect_code(0);
        run(["project", &store, "--session", "s", "--at", "7"]).expect_code(2);
        let tail = run(["tail", &store, "--session", "s", "--from", "1"]);
        tail.expect_code(2);
        assert_eq!(printed_notes(&tail), [1, 2, 3, 4, 5, 6], "{store}");
        let stats = run(["stats", &store, "--json"]);
        stats.expect_code(2);
        let report: serde_json::Value = ok(serde_json::from_str(&stats.stdout));
        assert_eq!(
            report["sessions"][0]["events"], 6,
            "{store}: {}",
            stats.stdout
        );
    }
}

/// A batch that a page of database rows ends inside (pages of 512 rows)
/// is given out only whole: damage in its fifth record stops a read of
/// the database where it stops a read of the log, before the batch.
#[test]
fn a_batch_across_a_page_boundary_is_given_out_only_whole() {
    let folder = ok(tempfile::tempdir());
    let logs = folder.path().join("logs");
    let database = folder.path().join("s.db");
    notes(&logs, 509);
    let batch: Vec<String> = (510..=515)
        .map(|n| format!("{{\"type\":\"x-test/note\",\"data\":{{\"n\":{n}}}}}"))
        .collect();
    run_with_stdin(
        ["append", &text(&logs), "--session", "s"],
        &format!("[{}]\n", batch.join(",")),
    )
    .expect_code(0);
    run(["migrate", &text(&logs), &text(&database)]).expect_code(0);
    // Whole, every record is read, in order.
    let whole = run(["tail", &text(&database), "--session", "s", "--from", "1"]);
    whole.expect_code(0);
    assert_eq!(printed_notes(&whole), (1..=515).collect::<Vec<_>>());
    // Seq 514's data changed in both, its CRC left as it was.
    let log = logs.join("s.jsonl");
    let bytes = ok(std::fs::read_to_string(&log));
    ok(std::fs::write(
        &log,
        bytes.replacen("{\"n\":514}", "{\"n\":0}", 1),
    ));
    let connection = ok(rusqlite::Connection::open(&database));
    let changed = ok(connection.execute(
        "UPDATE events SET body = replace(body, '\"n\":514', '\"n\":0') WHERE seq = 514",
        [],
    ));
    assert_eq!(changed, 1);
    drop(connection);
    for store in [text(&logs), text(&database)] {
        let tail = run(["tail", &store, "--session", "s", "--from", "1"]);
        tail.expect_code(2);
        assert_eq!(
            printed_notes(&tail),
            (1..=509).collect::<Vec<_>>(),
            "{store}"
        );
        let stats = run(["stats", &store, "--json"]);
        let report: serde_json::Value = ok(serde_json::from_str(&stats.stdout));
        assert_eq!(report["sessions"][0]["events"], 509, "{store}");
    }
}
