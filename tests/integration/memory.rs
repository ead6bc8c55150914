//! Peak memory of the commands that read a whole session (`tail`,
//! `replay`, `review-request`, `fork`, `report`, `migrate` both ways), on a
//! log far bigger than the limit: each runs as a child process and its peak
//! resident set (`ru_maxrss` from `wait4`) must stay within 64 MiB, so
//! that a command holds what it prints, never the log.
//!
//! The log (300,000 events of a few hundred bytes, about 120 MB) is written
//! line by line with the codec, as a writer would have written it: turns of
//! a request header, a step, a call and its result, a user message, with a
//! checkpoint every 200 turns, ending inside an open step so that a review
//! request can be built for it.
//!
//! The reads that fold on two threads (`verify`, `project`, `stats`,
//! `fork`) are held to the same limit on a log of large records too (600
//! of 200 KB after 5,000 small ones): what is in flight between their
//! threads is bounded in bytes, not only in records.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use sessionlog_schema::{EventRecord, SessionHeader, SessionId};

use crate::cli_support::sessionlog;

/// The limit every command is held to.
const LIMIT_BYTES: u64 = 64 << 20;
/// Events in the generated log.
const EVENTS: u64 = 300_000;

/// Lines written through a buffer, numbered as they go.
struct LogWriter<'a> {
    id: &'a SessionId,
    out: BufWriter<std::fs::File>,
    seq: u64,
}

impl LogWriter<'_> {
    fn write(&mut self, event_type: &str, data: &str) {
        self.seq += 1;
        let record = EventRecord::new(
            self.seq,
            1_700_000_000_000 + self.seq,
            None,
            event_type,
            data,
        );
        self.out
            .write_all(record.encode(self.id).as_bytes())
            .unwrap_or_else(|e| panic!("write: {e}"));
    }
}

/// Writes the long log of session `id` at `path`; returns its size in bytes.
fn write_long_log(path: &Path, id: &SessionId) -> u64 {
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("create {path:?}: {e}"));
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let header = SessionHeader::root(id.clone(), 1_700_000_000_000, "/work/project".into());
    out.write_all(header.encode().as_bytes())
        .unwrap_or_else(|e| panic!("write: {e}"));
    let mut log = LogWriter { id, out, seq: 0 };
    let request_header = r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"workspace-write","tools":[{"name":"shell","description":"runs a command","parameters":{"type":"object"}}]}"#;
    log.write("request/header", request_header);
    let mut turn = 0u64;
    loop {
        turn += 1;
        let (t, s, c) = (format!("t{turn}"), format!("s{turn}"), format!("c{turn}"));
        log.write("turn/start", &format!(r#"{{"turnId":"{t}"}}"#));
        log.write(
            "step/start",
            &format!(r#"{{"stepId":"{s}","turnId":"{t}"}}"#),
        );
        if log.seq + 8 >= EVENTS {
            break;
        }
        log.write(
            "tool/start",
            &format!(
                r#"{{"callId":"{c}","stepId":"{s}","name":"shell","arguments":{{"cmd":"cargo test --release -p sessionlog-store -- {turn}"}}}}"#
            ),
        );
        log.write(
            "tool/settle",
            &format!(
                r#"{{"callId":"{c}","status":"ok","result":{{"stdout":"{}"}}}}"#,
                "test result: ok. 12 passed; 0 failed; ".repeat(50)
            ),
        );
        log.write(
            "message",
            &format!(
                r#"{{"role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"turn {turn}: {}"}}]}}"#,
                "please look at the failing test again ".repeat(6)
            ),
        );
        log.write("step/end", &format!(r#"{{"stepId":"{s}"}}"#));
        log.write("turn/end", &format!(r#"{{"turnId":"{t}"}}"#));
        if turn.is_multiple_of(200) {
            let through = log.seq;
            log.write(
                "checkpoint",
                &format!(r#"{{"summary":"through turn {turn}","throughSeq":{through}}}"#),
            );
        }
    }
    log.out.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Runs `command` to its end, its output thrown away; returns its exit
/// code and its peak resident set in bytes.
///
/// The peak is the kernel's high-water mark (`VmHWM` of
/// `/proc/PID/status`), read every millisecond until the child exits. The
/// mark only rises, so what can be missed is growth in the last
/// millisecond before exit; resident memory grows only by page faults
/// (about a quarter of a millisecond per MiB), so a rise of more than a
/// few MiB cannot hide there.
fn peak_rss(mut command: Command) -> (i32, u64) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("wait: {e}")) {
            return (status.code().unwrap_or(-1), peak);
        }
        if let Some(hwm) = std::fs::read_to_string(&status_path)
            .ok()
            .as_deref()
            .and_then(high_water_mark)
        {
            peak = peak.max(hwm);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The `VmHWM` of a `/proc/PID/status` text, in bytes.
fn high_water_mark(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs each command (its name, its arguments, the exit code it must
/// give) and returns what went wrong: another exit code, or a peak
/// resident set above the limit. `read` says what the commands read, for
/// the figures printed.
fn over_the_limit(commands: Vec<(&str, Vec<&str>, i32)>, read: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, args, expected) in commands {
        let (code, peak) = peak_rss(sessionlog(args));
        eprintln!(
            "{name}: exit {code}, peak RSS {:.1} MiB on {read}",
            peak as f64 / f64::from(1 << 20)
        );
        if code != expected {
            failures.push(format!("{name} exited {code}, not {expected}"));
        }
        if peak > LIMIT_BYTES {
            failures.push(format!(
                "{name} peaked at {} MiB, above the 64 MiB limit",
                peak >> 20
            ));
        }
    }
    failures
}

#[test]
fn commands_that_read_a_whole_session_stay_within_64_mib_whatever_its_length() {
    let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let store = folder.path().join("logs");
    std::fs::create_dir(&store).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let id = SessionId::parse("long").unwrap_or_else(|e| panic!("{e}"));
    let size = write_long_log(&store.join("long.jsonl"), &id);
    assert!(
        size > 3 * LIMIT_BYTES / 2,
        "the log ({size} bytes) must be well above the limit for the check to mean anything"
    );
    let pending = folder.path().join("pending.json");
    let store_text = store.display().to_string();
    let log = store.join("long.jsonl").display().to_string();
    let pending_text = pending.display().to_string();
    let report = folder.path().join("report.html").display().to_string();
    let database = folder.path().join("copy.db").display().to_string();
    let copy_back = folder.path().join("copy-back").display().to_string();
    // The open step is the last one the generator started.
    let last_step = {
        let tail = std::process::Command::new(crate::cli_support::sessionlog_binary())
            .args(["tail", "-n", "1", &log])
            .output()
            .unwrap_or_else(|e| panic!("tail: {e}"));
        let line = String::from_utf8_lossy(&tail.stdout).into_owned();
        let value: serde_json::Value =
            serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{line}: {e}"));
        value["data"]["stepId"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    std::fs::write(
        &pending,
        format!(r#"{{"callId":"pending","stepId":"{last_step}","name":"shell","arguments":{{"cmd":"ls"}}}}"#),
    )
    .unwrap_or_else(|e| panic!("write: {e}"));
    let commands: Vec<(&str, Vec<&str>, i32)> = vec![
        ("tail -n 10", vec!["tail", "-n", "10", &log], 0),
        ("tail --from 1", vec!["tail", "--from", "1", &log], 0),
        ("replay", vec!["replay", &log], 0),
        ("replay --json", vec!["replay", "--json", &log], 0),
        // Folded without the hash chain, its records given back to the
        // reader as it goes.
        ("project", vec!["project", &log], 0),
        (
            "review-request",
            vec![
                "review-request",
                &log,
                "--pending",
                &pending_text,
                "--max-bytes",
                "200000000",
            ],
            0,
        ),
        (
            "fork",
            vec!["fork", &store_text, "--session", "long", "--child", "child"],
            0,
        ),
        // A writer opened and closed on the log keeps its state snapshot,
        // from which the next fork writes the child directly.
        (
            "append (nothing: the writer keeps a state snapshot)",
            vec!["append", &store_text, "--session", "long"],
            0,
        ),
        (
            "fork from the parent's state snapshot",
            vec![
                "fork",
                &store_text,
                "--session",
                "long",
                "--child",
                "child2",
            ],
            0,
        ),
        ("report (paged)", vec!["report", &log, "--html", &report], 0),
        (
            "migrate JSONL to SQLite",
            vec!["migrate", &log, &database],
            0,
        ),
        (
            "migrate SQLite to JSONL",
            vec!["migrate", &database, &copy_back],
            0,
        ),
    ];
    let read = format!("a {:.0} MB log of {EVENTS} events", size as f64 / 1e6);
    let failures = over_the_limit(commands, &read);
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        store.join(".long.jsonl.state").exists(),
        "the append's writer kept a state snapshot, so the second fork read it"
    );
}

/// Writes at `path` a log of session `id`: `small` notes of a few bytes
/// (enough for a long read to fold on a thread of its own), then `large`
/// notes of `large_bytes` bytes of text each; returns its size in bytes.
fn write_log_of_large_records(
    path: &Path,
    id: &SessionId,
    small: u64,
    large: u64,
    large_bytes: usize,
) -> u64 {
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("create {path:?}: {e}"));
    let out = BufWriter::with_capacity(1 << 20, file);
    let mut log = LogWriter { id, out, seq: 0 };
    let header = SessionHeader::root(id.clone(), 1_700_000_000_000, "/work/project".into());
    log.out
        .write_all(header.encode().as_bytes())
        .unwrap_or_else(|e| panic!("write: {e}"));
    for n in 0..small {
        log.write("note/test", &format!(r#"{{"text":"note {n}"}}"#));
    }
    let text = "tool output, line after line; ".repeat(large_bytes / 30);
    for n in 0..large {
        log.write("note/test", &format!(r#"{{"text":"{n} {text}"}}"#));
    }
    log.out.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[test]
fn reads_that_fold_on_two_threads_stay_within_64_mib_whatever_the_records_size() {
    let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let store = folder.path().join("logs");
    std::fs::create_dir(&store).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let id = SessionId::parse("large").unwrap_or_else(|e| panic!("{e}"));
    let path = store.join("large.jsonl");
    // 5,000 small records, so that the fold goes to a thread of its own,
    // then 600 records of 200 KB: a batch of a thousand of them would be
    // the whole log.
    let size = write_log_of_large_records(&path, &id, 5_000, 600, 200_000);
    assert!(
        size > 3 * LIMIT_BYTES / 2,
        "the log ({size} bytes) must be well above the limit for the check to mean anything"
    );
    let store_text = store.display().to_string();
    let log = path.display().to_string();
    let commands = vec![
        ("verify", vec!["verify", &log], 0),
        ("project", vec!["project", &log], 0),
        ("stats", vec!["stats", &log], 0),
        (
            "fork",
            vec!["fork", &store_text, "--session", "large", "--child", "c"],
            0,
        ),
    ];
    let read = format!("a {:.0} MB log of records up to 200 KB", size as f64 / 1e6);
    let mut failures = over_the_limit(commands, &read);
    // The same session in a database, whose reader reads rows a page at a
    // time: a page of 512 such rows would be 100 MB, read while the one
    // before is checked.
    let mut stores = vec![folder.path().join("large.db").display().to_string()];
    let schema = crate::postgres::test_server()
        .map(|server| crate::postgres::Schema::new(&server, "largerows"));
    stores.extend(schema.as_ref().map(|schema| schema.url.clone()));
    for target in &stores {
        let commands = vec![
            ("migrate", vec!["migrate", &log, target.as_str()], 0),
            (
                "verify",
                vec!["verify", target.as_str(), "--session", "large"],
                0,
            ),
            // Every session, through SQLite's sweep of the whole store.
            ("verify of the store", vec!["verify", target.as_str()], 0),
            (
                "export",
                vec!["export", target.as_str(), "--session", "large"],
                0,
            ),
            ("diff", vec!["diff", &log, target.as_str()], 0),
        ];
        let read = format!("{read}, in {target}");
        failures.extend(over_the_limit(commands, &read));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `tail -n N` holds its last N records about once, not three times over:
/// their lines, the records decoded to find where batches start, and the
/// records decoded again by the scan, side by side (147 MiB for four
/// records of 8 MiB before, in the debug build the tests run).
#[test]
fn tail_holds_its_last_records_about_once() {
    let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let id = SessionId::parse("large").unwrap_or_else(|e| panic!("{e}"));
    let path = folder.path().join("large.jsonl");
    let records: u64 = 4;
    let record_bytes: u64 = 8 << 20;
    write_log_of_large_records(&path, &id, 10, records, record_bytes as usize);
    let log = path.display().to_string();
    let last = records.to_string();
    // The records, a line being read or scanned beside them, and what any
    // command takes; `--json` describes the record it prints, as `replay
    // --json` does, which takes a few times that record.
    let text_limit = 2 * records * record_bytes + (16 << 20);
    let json_limit = text_limit + 4 * record_bytes;
    for (args, limit) in [
        (vec!["tail", &log, "-n", &last], text_limit),
        (vec!["tail", &log, "-n", &last, "--json"], json_limit),
    ] {
        let shown = args.join(" ");
        let (code, peak) = peak_rss(sessionlog(args));
        eprintln!(
            "{shown}: exit {code}, peak RSS {:.1} MiB",
            peak as f64 / f64::from(1 << 20)
        );
        assert_eq!(code, 0, "{shown}");
        assert!(
            peak <= limit,
            "{shown} peaked at {} MiB, above {} MiB for {records} records of {} MiB",
            peak >> 20,
            limit >> 20,
            record_bytes >> 20
        );
    }
}
