//! Logs and inputs crafted against the reader, through the real binary.
//!
//! - Terminal escapes (OSC window titles, clear-screen, U+202E) in a cwd,
//!   an unknown type, a value serde quotes in its error: no byte of them
//!   reaches standard output or standard error raw, in replay, list,
//!   verify, project or fork.
//! - A FIFO or a device named `<id>.jsonl` hangs no reader.
//! - A log that cannot be opened is that session's verdict in `verify`,
//!   `stats`, `list` and `head`, which read the others (exit 1, below 2, 7
//!   and 4, above 3).
//! - 2 wins over 4: a violation before a corruption still exits 2.
//! - `list` reads a header out of vocabulary as it is.
//! - An empty type, or one with a control character, is a violation.
//! - `tail -f` reports a log replaced by another session's.
//! - A damaged batch's torn tail is named by its first line and its
//!   damaged line alike by verify, tail and salvage.
//! - Messages: no ANSI code on a pipe, the salvage advice once, `create`
//!   names the session a file holds, `migrate` takes a lone log, a
//!   non-UTF-8 cwd needs `--cwd`, a pending action is read up to a bound.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli_support::{make_fifo, run, run_with_stdin, run_within, sessionlog};
use crate::faults::ok;
use crate::support::LogBuilder;

/// Escapes a terminal would act on: an OSC window title (ended by BEL),
/// a clear-screen, a C1 CSI, a right-to-left override.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{202e}desrever";

/// The JSON string of `text`.
fn json(text: &str) -> String {
    ok(serde_json::to_string(text))
}

/// Panics if `output` holds a byte or character a terminal would act on
/// (other than line breaks and tabs).
#[track_caller]
fn assert_inert(what: &str, output: &str) {
    for c in output.chars() {
        let unprintable = sessionlog_schema::is_unprintable(c) && c != '\n' && c != '\t';
        assert!(
            !unprintable,
            "{what} printed U+{:04X} raw:\n{output}",
            u32::from(c)
        );
    }
}

fn write_log(folder: &Path, name: &str, log: &LogBuilder) -> PathBuf {
    let path = folder.join(name);
    ok(std::fs::write(&path, log.build()));
    path
}

/// A folder `store` in `folder` holding the log of session `good`, one turn
/// started; returns the folder and the log.
fn store_with_a_good_log(folder: &Path) -> (PathBuf, PathBuf) {
    let store = folder.join("store");
    ok(std::fs::create_dir(&store));
    let log = LogBuilder::new("good").event("turn/start", r#"{"turnId":"t1"}"#);
    let good = write_log(&store, "good.jsonl", &log);
    (store, good)
}

#[test]
fn log_text_never_reaches_the_terminal_raw() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("store");
    ok(std::fs::create_dir(&store));
    let policy = format!(r#"{{"policy":{}}}"#, json(HOSTILE));
    let log = LogBuilder::new("s1")
        .cwd(&format!("/work/{HOSTILE}"))
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .event(&format!("x/{HOSTILE}"), "{}")
        .event("approval/policy", &policy);
    write_log(&store, "s1.jsonl", &log);
    let store = store.display().to_string();
    let runs = [
        ("replay", run(["replay", &store])),
        ("list", run(["list", &store])),
        ("list --tree", run(["list", &store, "--tree"])),
        ("verify", run(["verify", &store])),
        ("verify --json", run(["verify", &store, "--json"])),
        ("project", run(["project", &store])),
        (
            "fork",
            run(["fork", &store, "--session", "s1", "--child", "k"]),
        ),
        ("stats", run(["stats", &store])),
    ];
    for (what, result) in &runs {
        assert_inert(what, &result.stdout);
        assert_inert(what, &result.stderr);
    }
    // The hostile text is shown, escaped, not dropped.
    let (_, replay) = &runs[0];
    assert!(
        replay.stdout.contains("\\u{202e}desrever"),
        "{}",
        replay.stdout
    );
    let (_, project) = &runs[5];
    assert_eq!(project.code, 4, "{}", project.stderr);
    assert!(
        project.stderr.contains("\\u{1b}]0;owned"),
        "{}",
        project.stderr
    );
}

#[test]
fn a_fifo_or_a_device_in_place_of_a_log_hangs_no_reader() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("store");
    ok(std::fs::create_dir(&store));
    let fifo = store.join("f.jsonl");
    make_fifo(&fifo);
    let store = store.display().to_string();
    let fifo = fifo.display().to_string();
    for args in [
        vec!["verify", store.as_str()],
        vec!["list", store.as_str()],
        vec!["stats", store.as_str()],
        vec!["export", store.as_str()],
        vec!["verify", fifo.as_str()],
        vec!["tail", fifo.as_str()],
    ] {
        let Some((code, stderr)) = run_within(&args, Duration::from_secs(20)) else {
            panic!("{args:?} still ran after 20 s on a FIFO");
        };
        // A store's readers pass over the name with a warning that says
        // what it is; a reader given it as the log refuses it by name.
        assert!(stderr.contains("FIFO"), "{args:?}: {stderr}");
        if args[1] == fifo {
            assert_ne!(code, 0, "{args:?}: {stderr}");
        }
    }
    // A character device (no `.jsonl` can be one: a link would be refused)
    // as a pending action is read up to a bound, not to the end of time.
    let log = LogBuilder::new("p").event("turn/start", r#"{"turnId":"t1"}"#);
    let path = write_log(folder.path(), "p.jsonl", &log);
    let path = path.display().to_string();
    let Some((code, stderr)) = run_within(
        &["review-request", &path, "--pending", "/dev/zero"],
        Duration::from_secs(60),
    ) else {
        panic!("review-request --pending /dev/zero still ran after 60 s");
    };
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("more than"), "{stderr}");
}

#[test]
fn a_name_in_a_folder_that_is_no_regular_file_hides_no_other_session() {
    let folder = ok(tempfile::tempdir());
    let (store, _) = store_with_a_good_log(folder.path());
    make_fifo(&store.join("f.jsonl"));
    ok(std::fs::create_dir(store.join("d.jsonl")));
    ok(std::os::unix::fs::symlink(
        "good.jsonl",
        store.join("l.jsonl"),
    ));
    let store = store.display().to_string();
    let verified = run(["verify", &store]);
    verified.expect_code(0);
    assert!(verified.stdout.contains("#good: ok"), "{}", verified.stdout);
    for (name, what) in [("f", "a FIFO"), ("d", "a folder"), ("l", "a symbolic link")] {
        assert!(
            verified
                .stderr
                .contains(&format!("{name}.jsonl: passed over: {what}")),
            "{}",
            verified.stderr
        );
        assert!(
            !verified.stdout.contains(&format!("#{name}")),
            "{}",
            verified.stdout
        );
    }
    let listed = run(["list", &store]);
    listed.expect_code(0);
    assert!(listed.stdout.starts_with("good\t"), "{}", listed.stdout);
    assert_eq!(listed.stdout.lines().count(), 1, "{}", listed.stdout);
    // `migrate` and `diff` copy or compare every session: a folder that
    // holds a name they would leave out is refused, even under --quiet,
    // never copied short and called identical.
    let copy = folder.path().join("copy.db").display().to_string();
    let migrated = run(["-q", "migrate", &store, &copy]);
    migrated.expect_code(1);
    assert!(
        migrated.stderr.contains("d.jsonl: a folder"),
        "{}",
        migrated.stderr
    );
    let compared = run(["-q", "diff", &store, &store]);
    compared.expect_code(9);
    assert!(
        compared.stderr.contains("d.jsonl: a folder"),
        "{}",
        compared.stderr
    );
}

/// A `.jsonl` whose name is not UTF-8, or holds a line break, is passed
/// over as any name that is no id is: named in a warning of one line, and
/// refused by `migrate` and `diff`, never left out of a copy unsaid.
#[test]
fn a_log_name_that_is_not_utf8_or_breaks_a_line_is_named_on_one_line() {
    use std::os::unix::ffi::OsStrExt;
    let folder = ok(tempfile::tempdir());
    let (store, good) = store_with_a_good_log(folder.path());
    let bytes = ok(std::fs::read(&good));
    let odd = std::ffi::OsStr::from_bytes(b"zz\xff.jsonl");
    ok(std::fs::write(store.join(odd), &bytes));
    ok(std::fs::write(
        store.join("x\ngood: forged\tline.jsonl"),
        &bytes,
    ));
    let store = store.display().to_string();
    let verified = run(["verify", &store]);
    verified.expect_code(0);
    let warnings: Vec<&str> = verified
        .stderr
        .lines()
        .filter(|line| line.contains("passed over"))
        .collect();
    assert_eq!(warnings.len(), 2, "{}", verified.stderr);
    assert!(
        warnings
            .iter()
            .any(|line| line.contains("zz\u{fffd}.jsonl")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|line| line.contains(r"x\ngood: forged\tline.jsonl: passed over")),
        "{warnings:?}"
    );
    assert!(
        !verified.stderr.contains("\ngood: forged"),
        "{}",
        verified.stderr
    );
    let copy = folder.path().join("copy.db").display().to_string();
    run(["-q", "migrate", &store, &copy]).expect_code(1);
    run(["-q", "diff", &store, &store]).expect_code(9);
}

/// The longest path the system opens, its terminating NUL included
/// (Linux's `PATH_MAX`).
const PATH_MAX: usize = 4096;

/// A folder of logs holding `a`, ending in a torn tail, and a log of
/// session `unreadable` that every command fails to open with the system's
/// words `cause`; `corrupt` (session `c`, damage at line 2 and an intact
/// line 3) is added to it halfway. `run` runs the binary as the user who
/// cannot open that log.
struct UnreadableStore<'a> {
    store: &'a Path,
    unreadable: &'a str,
    cause: &'a str,
    run: &'a dyn Fn(&[&str]) -> crate::cli_support::Run,
}

fn torn_log() -> LogBuilder {
    LogBuilder::new("a")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .raw(b"{\"seq\":2,\"ts")
}

fn corrupt_log() -> LogBuilder {
    LogBuilder::new("c")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .raw(b"garbage\n")
        .next_seq(2)
        .event("turn/end", r#"{"turnId":"t1"}"#)
}

/// `verify`, `stats`, `list` and `head` of an [`UnreadableStore`]: the log
/// that cannot be opened is reported as that session's (exit 1), and
/// every other session is still read and judged; with the torn tail alone
/// besides, 1 wins over 3, and a corrupt session besides wins over it
/// (2). Its message is said once, never with the system's words twice.
fn check_unreadable_log_hides_no_other_session(case: &UnreadableStore<'_>) {
    let UnreadableStore {
        store,
        unreadable,
        cause,
        run,
    } = *case;
    let named = format!("{}.jsonl: {cause}", unreadable);
    let folder = store.display().to_string();
    let once = |output: &str| {
        assert_eq!(output.matches(cause).count(), 1, "{output}");
        assert!(output.contains(&named), "{named}\n{output}");
    };

    let verified = run(&["verify", &folder]);
    verified.expect_code(1);
    assert!(
        verified.stdout.contains("#a: torn tail at line 3"),
        "{}",
        verified.stdout
    );
    assert!(
        verified
            .stdout
            .contains(&format!("#{unreadable}: unreadable: open ")),
        "{}",
        verified.stdout
    );
    once(&verified.stdout);
    let verified = run(&["verify", &folder, "--json"]);
    verified.expect_code(1);
    let verdicts: Vec<serde_json::Value> = verified
        .stdout
        .lines()
        .map(|line| ok(serde_json::from_str(line)))
        .collect();
    assert_eq!(verdicts.len(), 2, "{}", verified.stdout);
    assert_eq!(verdicts[0]["status"], "torn-tail", "{}", verified.stdout);
    assert_eq!(verdicts[1]["session"], unreadable, "{}", verified.stdout);
    assert_eq!(verdicts[1]["status"], "unreadable", "{}", verified.stdout);
    assert!(
        verdicts[1]["error"]
            .as_str()
            .is_some_and(|error| error.contains(&named)),
        "{}",
        verified.stdout
    );
    assert!(verdicts[0].get("error").is_none(), "{}", verified.stdout);

    let counted = run(&["stats", &folder]);
    counted.expect_code(1);
    assert!(
        counted
            .stdout
            .contains("sessions  2 (1 with a torn tail, 0 corrupt, 1 unreadable)"),
        "{}",
        counted.stdout
    );
    assert!(
        counted.stdout.contains("UNREADABLE: open "),
        "{}",
        counted.stdout
    );
    once(&counted.stdout);
    let counted = run(&["stats", &folder, "--json"]);
    counted.expect_code(1);
    let report: serde_json::Value = ok(serde_json::from_str(&counted.stdout));
    assert_eq!(report["totals"]["unreadable"], 1, "{report}");
    assert_eq!(report["totals"]["events"], 1, "{report}");
    assert!(
        report["sessions"][1]["unreadable"]
            .as_str()
            .is_some_and(|error| error.contains(&named)),
        "{report}"
    );

    let listed = run(&["list", &folder]);
    listed.expect_code(1);
    assert!(listed.stdout.starts_with("a\t"), "{}", listed.stdout);
    assert!(
        listed
            .stdout
            .contains(&format!("{unreadable}\tunreadable: open ")),
        "{}",
        listed.stdout
    );

    let anchored = run(&["head", &folder]);
    anchored.expect_code(1);
    assert_eq!(anchored.stdout.lines().count(), 1, "{}", anchored.stdout);
    assert!(
        anchored.stdout.starts_with(r#"{"session":"a","seq":1,"#),
        "{}",
        anchored.stdout
    );
    assert!(
        anchored
            .stderr
            .contains(&format!("#{unreadable}: unreadable: open ")),
        "{}",
        anchored.stderr
    );
    once(&anchored.stderr);

    // The report names the session it could not read, and shows the
    // others. It is written where the user running it may write.
    let pages = ok(tempfile::tempdir());
    ok(std::fs::set_permissions(
        pages.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    ));
    let page = pages.path().join("report.html");
    let page_text = page.display().to_string();
    let reported = run(&["report", &folder, "--html", &page_text]);
    reported.expect_code(1);
    let html = ok(std::fs::read_to_string(&page));
    assert!(html.contains("id=\"session-a\""), "session a is shown");
    assert!(
        html.contains("This log could not be read and is not shown: ") && html.contains(&named),
        "the unreadable log is named"
    );
    assert!(
        reported
            .stderr
            .contains("1 session whose log could not be read named but not shown"),
        "{}",
        reported.stderr
    );

    // A corrupt session besides: 2 wins, and neither hides the other.
    let corrupt = write_log(store, "c.jsonl", &corrupt_log());
    ok(std::fs::set_permissions(
        &corrupt,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    ));
    let verified = run(&["verify", &folder]);
    verified.expect_code(2);
    for (session, verdict) in [
        ("a", "torn tail"),
        (unreadable, "unreadable"),
        ("c", "corrupt at line 3"),
    ] {
        assert!(
            verified.stdout.contains(&format!("#{session}: {verdict}")),
            "{session}: {}",
            verified.stdout
        );
    }
    let counted = run(&["stats", &folder]);
    counted.expect_code(2);
    assert!(
        counted
            .stdout
            .contains("sessions  3 (1 with a torn tail, 1 corrupt, 1 unreadable)"),
        "{}",
        counted.stdout
    );
    // `list` reads headers only: c's is whole.
    run(&["list", &folder]).expect_code(1);
    run(&["report", &folder, "--html", &page_text]).expect_code(2);
    let anchored = run(&["head", &folder]);
    anchored.expect_code(2);
    assert_eq!(anchored.stdout.lines().count(), 1, "{}", anchored.stdout);
    // The corrupt log is named by its file, which names its session: once.
    let said = anchored
        .stderr
        .lines()
        .find(|line| line.contains("corrupt"))
        .unwrap_or_default();
    assert_eq!(
        said.strip_prefix("sessionlog: ")
            .map(|rest| rest.starts_with(&corrupt.display().to_string())),
        Some(true),
        "{}",
        anchored.stderr
    );
    // Named with `--session`, the log ends the command, with its cause:
    // a session that cannot be looked at is not one that is not there.
    let picked = run(&["verify", &folder, "--session", unreadable]);
    picked.expect_code(1);
    assert!(picked.stdout.is_empty(), "{}", picked.stdout);
    assert!(picked.stderr.contains(unreadable), "{}", picked.stderr);
    assert!(picked.stderr.contains(cause), "{}", picked.stderr);
    assert!(!picked.stderr.contains("no session"), "{}", picked.stderr);
}

/// A log of a folder that cannot be opened is that session's verdict: the
/// others are still read. Root, who runs the tests in CI, opens a file of
/// any mode, so the log here is one whose path is longer than the system
/// opens while its folder's is not: its open fails (`ENAMETOOLONG`), an
/// I/O error as permission denied is, for every user.
#[test]
fn a_log_that_cannot_be_opened_hides_no_other_session() {
    let folder = ok(tempfile::tempdir());
    let unreadable = format!("b{}", "x".repeat(127));
    let name = format!("{unreadable}.jsonl");
    // The logs are written where their paths are short, then the folder
    // is moved under one whose path leaves room for `a.jsonl`, not for
    // the long name.
    let short = folder.path().join("s");
    ok(std::fs::create_dir(&short));
    write_log(&short, "a.jsonl", &torn_log());
    write_log(&short, &name, &LogBuilder::new(&unreadable));
    // `<store>/<name>` is then PATH_MAX + 1 bytes long.
    let store_length = PATH_MAX - name.len();
    let mut deep = folder.path().to_path_buf();
    while store_length - deep.as_os_str().len() > 250 {
        deep.push("d".repeat(200));
    }
    // The last folder's name, then `/s`.
    let last = store_length - deep.as_os_str().len() - 1 - 2;
    deep.push("e".repeat(last));
    ok(std::fs::create_dir_all(&deep));
    let store = deep.join("s");
    ok(std::fs::rename(&short, &store));
    assert_eq!(store.as_os_str().len(), store_length);
    assert!(store.join("a.jsonl").as_os_str().len() < PATH_MAX);
    assert!(store.join(&name).as_os_str().len() >= PATH_MAX);
    check_unreadable_log_hides_no_other_session(&UnreadableStore {
        store: &store,
        unreadable: &unreadable,
        cause: "File name too long (os error 36)",
        run: &|args: &[&str]| run(args),
    });
}

/// The same of a log this user may not read (mode 0600, another user's),
/// the case as people meet it: run as `nobody` through `setpriv` when the
/// tests run as root; otherwise there is no second user to be, and the
/// test says so.
#[test]
fn a_log_this_user_may_not_read_hides_no_other_session() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::fs::metadata("/proc/self")
        .map(|metadata| std::os::unix::fs::MetadataExt::uid(&metadata) == 0)
        .unwrap_or(false);
    let as_nobody = |args: &[&str]| {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(crate::cli_support::sessionlog_binary())
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("COLUMNS")
            .env_remove("SESSIONLOG_LOG");
        crate::cli_support::run_command(command, None)
    };
    if !root || as_nobody(&["--version"]).code != 0 {
        eprintln!("note: not root, or nobody cannot run the binary through setpriv: not tested");
        return;
    }
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("s");
    ok(std::fs::create_dir(&store));
    for path in [folder.path(), store.as_path()] {
        ok(std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode(0o755),
        ));
    }
    for (name, log) in [("a.jsonl", torn_log()), ("b.jsonl", LogBuilder::new("b"))] {
        let path = write_log(&store, name, &log);
        let mode = if name == "b.jsonl" { 0o600 } else { 0o644 };
        ok(std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode(mode),
        ));
    }
    check_unreadable_log_hides_no_other_session(&UnreadableStore {
        store: &store,
        unreadable: "b",
        cause: "Permission denied (os error 13)",
        run: &as_nobody,
    });
}

/// A `.jsonl` file whose name is no session id is named, not skipped in
/// silence, and `migrate` refuses the folder that holds it.
#[test]
fn a_log_named_with_no_valid_id_is_warned_of_and_stops_a_migration() {
    let folder = ok(tempfile::tempdir());
    let (store, good) = store_with_a_good_log(folder.path());
    ok(std::fs::copy(&good, store.join("good copy.jsonl")));
    let store = store.display().to_string();
    let verified = run(["verify", &store]);
    verified.expect_code(0);
    assert!(
        verified
            .stderr
            .contains("\"good copy\" is no valid session id"),
        "{}",
        verified.stderr
    );
    let copy = folder.path().join("copy").display().to_string();
    run(["migrate", &store, &copy]).expect_code(1);
}

/// A log whose seq 1 breaks a rule and whose line 3 is damage that an
/// intact record follows.
fn violation_then_corruption() -> LogBuilder {
    LogBuilder::new("v")
        .event("step/end", r#"{"stepId":"nowhere"}"#)
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .raw(b"{\"seq\":3,\"ts\":1,\"type\":\"x\",\"data\":{},\"crc\":\"00000000\"}\n")
        .next_seq(3)
        .event("turn/end", r#"{"turnId":"t1"}"#)
}

#[test]
fn corruption_after_a_violation_wins_in_project_fork_and_append() {
    let folder = ok(tempfile::tempdir());
    let path = write_log(folder.path(), "v.jsonl", &violation_then_corruption());
    let path = path.display().to_string();
    run(["verify", &path]).expect_code(2);
    for (what, result) in [
        ("project", run(["project", &path])),
        ("fork", run(["fork", &path, "--child", "k"])),
        (
            "append",
            run_with_stdin(["append", &path], "{\"type\":\"x/y\",\"data\":{}}\n"),
        ),
    ] {
        assert_eq!(result.code, 2, "{what}: {}", result.stderr);
        assert!(
            result.stderr.contains("corrupt"),
            "{what}: {}",
            result.stderr
        );
        // The advice to salvage is given once.
        assert_eq!(
            result.stderr.matches("sessionlog salvage").count(),
            1,
            "{what}: {}",
            result.stderr
        );
    }
}

#[test]
fn list_reads_a_header_out_of_vocabulary_as_it_is() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("store");
    ok(std::fs::create_dir(&store));
    write_log(
        &store,
        "r.jsonl",
        &LogBuilder::new("r").sandbox_mode("root"),
    );
    let store = store.display().to_string();
    let listed = run(["list", &store]);
    listed.expect_code(0);
    assert!(listed.stdout.starts_with("r\t"), "{}", listed.stdout);
    run(["list", &store, "--json"]).expect_code(0);
    run(["verify", &store]).expect_code(4);
}

#[test]
fn an_empty_type_or_one_with_a_control_character_is_a_violation() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("t.jsonl");
    let path = path.display().to_string();
    run(["create", &path, "--session", "t", "--cwd", "/w"]).expect_code(0);
    for event_type in ["", "a\nb", "x\u{1b}[2J", "x\u{202e}"] {
        let line = format!("{{\"type\":{},\"data\":{{}}}}\n", json(event_type));
        let refused = run_with_stdin(["append", &path], &line);
        refused.expect_code(4);
        assert_inert("append", &refused.stderr);
    }
    run(["verify", &path]).expect_code(0);
    let log = LogBuilder::new("u").event("", "{}");
    let written = write_log(folder.path(), "u.jsonl", &log);
    run(["verify", &written.display().to_string()]).expect_code(4);
}

#[test]
fn tail_follow_reports_a_log_replaced_by_another_sessions() {
    let folder = ok(tempfile::tempdir());
    let log = LogBuilder::new("a").event("turn/start", r#"{"turnId":"t1"}"#);
    let path = write_log(folder.path(), "a.jsonl", &log);
    let child = following(&path.display().to_string(), &[], 1);
    let other = LogBuilder::new("b")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .event("turn/end", r#"{"turnId":"t1"}"#);
    let replacement = folder.path().join(".a.new");
    ok(std::fs::write(&replacement, other.build()));
    ok(std::fs::rename(&replacement, &path));
    let (code, stderr) = exit_of(child);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("another header"), "{stderr}");
}

/// `tail --from 1 -f` of a log replaced by another history of the same
/// session while its first read still prints: the follower that goes on
/// after that read finds it no longer in the log and stops with exit 2,
/// instead of printing the other history's later events after it.
#[test]
fn tail_from_a_seq_then_follow_reports_a_log_replaced_during_its_first_read() {
    let folder = ok(tempfile::tempdir());
    let pad = "x".repeat(8 << 10);
    let history = |cwd: &str, kind: &str, count: usize| {
        let data = format!(r#"{{"pad":"{pad}"}}"#);
        (0..count).fold(LogBuilder::new("a").cwd(cwd), |log, _| {
            log.event(kind, &data)
        })
    };
    let path = write_log(
        folder.path(),
        "a.jsonl",
        &history("/old", "x-demo/old", 100),
    );
    let mut child = ok(sessionlog([
        "tail",
        &path.display().to_string(),
        "--from",
        "1",
        "-f",
        "--json",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn());
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut stdout = std::io::BufReader::new(stdout);
    // Its first line printed, the command is inside its first read: the
    // 800 KB it prints fill the pipe, which is not read meanwhile.
    let mut first = String::new();
    ok(std::io::BufRead::read_line(&mut stdout, &mut first));
    assert!(first.contains("x-demo/old"), "{first}");
    let replacement = folder.path().join(".a.new");
    ok(std::fs::write(
        &replacement,
        history("/new", "x-demo/new", 103).build(),
    ));
    ok(std::fs::rename(&replacement, &path));
    let drained = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
        rest
    });
    let (code, stderr) = exit_of(child);
    let printed = drained.join().unwrap_or_default();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("changed under the reader"), "{stderr}");
    assert!(
        !printed.contains("x-demo/new"),
        "spliced on: {printed:.200}"
    );
    assert_eq!(printed.matches("x-demo/old").count(), 99);
}

/// `tail -f` of `store` (with `options`), once it has printed the event
/// at seq `last`, the last there is: what a test then does to the store
/// comes after that read, whatever the machine's load. Its stdout is read
/// on until it ends.
fn following(store: &str, options: &[&str], last: u64) -> Child {
    let mut child = ok(sessionlog(["tail", store, "-f"])
        .args(options)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn());
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (printed, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let wanted = format!("\"seq\":{last},");
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            match line {
                Ok(line) if line.contains(&wanted) => {
                    let _ = printed.send(());
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    if seen.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("tail -f of {store} did not print seq {last}");
    }
    child
}

/// The exit code and standard error of a `tail -f` that must stop by
/// itself within 20 s.
fn exit_of(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = ok(child.try_wait()) {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tail -f went on following a session whose history changed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        ok(std::io::Read::read_to_string(&mut pipe, &mut stderr));
    }
    (status.code(), stderr)
}

/// A database session replaced by another history from outside (in one
/// SQLite transaction), or whose last row read is removed: `tail -f`
/// stops with exit 2, as for a log file, and never prints the other
/// history's events after what it printed.
#[test]
fn tail_follow_reports_a_database_session_replaced_or_cut() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("a.db");
    let other = folder.path().join("b.db");
    let store = database.display().to_string();
    for (path, cwd, kind, count) in [(&database, "/a", "x-old", 3), (&other, "/b", "x-new", 6)] {
        let path = path.display().to_string();
        run(["create", &path, "--session", "s1", "--cwd", cwd]).expect_code(0);
        let events = format!("{{\"type\":\"{kind}\",\"data\":{{}}}}\n").repeat(count);
        run_with_stdin(["append", &path, "--session", "s1"], &events).expect_code(0);
    }
    let follow = |last: u64| following(&store, &["--session", "s1"], last);
    let by_hand = |sql: &str| {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch(sql));
    };
    let child = follow(3);
    by_hand(&format!(
        "ATTACH '{}' AS b; BEGIN;
         DELETE FROM events WHERE session_id = 's1';
         DELETE FROM snapshots WHERE session_id = 's1';
         DELETE FROM sessions WHERE id = 's1';
         INSERT INTO sessions SELECT * FROM b.sessions;
         INSERT INTO events SELECT * FROM b.events; COMMIT;",
        other.display()
    ));
    let (code, stderr) = exit_of(child);
    assert_eq!(code, Some(2), "{stderr}");
    // Which it notices first (the header, or the last row it printed)
    // depends on when the swap falls between its two reads.
    assert!(
        stderr.contains("changed under the reader")
            && (stderr.contains("another header") || stderr.contains("another record")),
        "{stderr}"
    );

    // Now its own history cut: the last row read deleted, with the seq its
    // session row records.
    let child = follow(6);
    by_hand(
        "BEGIN; DELETE FROM events WHERE session_id = 's1' AND seq = 6;
         UPDATE sessions SET last_seq = 5 WHERE id = 's1'; COMMIT;",
    );
    let (code, stderr) = exit_of(child);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("seq 6, delivered before, was removed"),
        "{stderr}"
    );
}

#[test]
fn messages_name_what_happened() {
    let folder = ok(tempfile::tempdir());
    // A torn tail cut by the writer: its warning, on a pipe, has no colour.
    let log = LogBuilder::new("w")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .raw(b"{\"seq\":2,\"ts");
    let path = write_log(folder.path(), "w.jsonl", &log);
    let path = path.display().to_string();
    let appended = run_with_stdin(["append", &path], "{\"type\":\"x/y\",\"data\":{}}\n");
    appended.expect_code(0);
    assert!(appended.stderr.contains("torn tail"), "{}", appended.stderr);
    assert!(!appended.stderr.contains('\u{1b}'), "{:?}", appended.stderr);

    // `create` on an existing file names the session it holds.
    let created = run(["create", &path, "--session", "other", "--cwd", "/w"]);
    created.expect_code(1);
    assert!(
        created.stderr.contains("holds session w"),
        "{}",
        created.stderr
    );

    // `migrate` takes a lone log as a source of one session.
    for destination in ["copy.db", "copy"] {
        let destination = folder.path().join(destination);
        let destination = destination.display().to_string();
        run(["migrate", &path, &destination]).expect_code(0);
        let copied = run(["export", &destination]);
        copied.expect_code(0);
        assert_eq!(copied.stdout, run(["export", &path]).stdout);
    }

    // A working directory that is not UTF-8 is not stored changed.
    use std::os::unix::ffi::OsStrExt;
    let odd = folder.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    ok(std::fs::create_dir(&odd));
    let target = folder.path().join("n.jsonl");
    let mut command = sessionlog(["create", &target.display().to_string(), "--session", "n"]);
    command.current_dir(&odd);
    let refused = crate::cli_support::run_command(command, None);
    refused.expect_code(1);
    assert!(refused.stderr.contains("--cwd"), "{}", refused.stderr);
    assert!(!target.exists());
}

/// A batch whose last record is damaged is a torn tail from the batch's
/// first line, which is intact: `verify`, `tail -n`'s warning and
/// `salvage` name that line, and give one reason that says both that the
/// batch is unfinished and which line is damaged, with that line's CRCs.
/// The reason once held the damaged line's CRC mismatch alone, as if the
/// batch's first line were the one whose CRC did not match.
#[test]
fn a_torn_batch_is_named_by_its_first_line_and_its_damaged_line() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("m");
    ok(std::fs::create_dir(&store));
    let whole = LogBuilder::new("a")
        .event("x-a/one", "{}")
        .batch(vec![("x-a/b", r#"{"i":0}"#), ("x-a/b", r#"{"i":1}"#)])
        .build();
    let whole = ok(String::from_utf8(whole));
    let lines: Vec<&str> = whole.split_inclusive('\n').collect();
    assert_eq!(lines.len(), 4, "{whole}");
    let (body, stored) = ok(lines[3]
        .trim_end()
        .rsplit_once(",\"crc\":\"")
        .ok_or("no CRC member"));
    let damaged_body = body.replace(r#""i":1"#, r#""i":9"#);
    let computed = crate::support::spec_crc("a", damaged_body.as_bytes());
    let damaged = format!("{damaged_body},\"crc\":\"{stored}\n");
    let log = [lines[0], lines[1], lines[2], damaged.as_str()].concat();
    ok(std::fs::write(store.join("a.jsonl"), &log));
    let (line_3, line_4) = (lines[..2].concat().len(), lines[..3].concat().len());
    let reason = format!(
        "the batch starting at seq 2 announced 2 records but only 1 arrived intact; \
         line 4 (byte offset {line_4}): CRC mismatch (stored {}, computed {computed:08x} \
         for session a)",
        &stored[..8]
    );
    let store = store.display().to_string();

    let verified = run(["verify", &store]);
    verified.expect_code(3);
    let bytes = log.len() - line_3;
    assert!(
        verified.stdout.contains(&format!(
            "torn tail at line 3 (byte offset {line_3}): {bytes} bytes, {reason}; \
             the good prefix holds 1 event (last seq 1)"
        )),
        "{reason}\n{}",
        verified.stdout
    );
    let verified = run(["verify", &store, "--json"]);
    verified.expect_code(3);
    let verdict: serde_json::Value = ok(serde_json::from_str(&verified.stdout));
    assert_eq!(verdict["tornTail"]["line"], 3, "{verdict}");
    assert_eq!(verdict["tornTail"]["droppedRecords"], 1, "{verdict}");
    assert_eq!(verdict["tornTail"]["reason"], reason.as_str(), "{verdict}");

    let tailed = run(["tail", &store, "-n", "5"]);
    tailed.expect_code(0);
    assert!(
        tailed.stderr.contains(&format!(
            "torn tail of {bytes} bytes at line 3 (byte offset {line_3}): {reason}"
        )),
        "{reason}\n{}",
        tailed.stderr
    );

    let out = folder.path().join("out.jsonl").display().to_string();
    let salvaged = run(["salvage", &format!("{store}/a.jsonl"), &out, "--json"]);
    salvaged.expect_code(0);
    let report: serde_json::Value = ok(serde_json::from_str(&salvaged.stdout));
    assert_eq!(report["leftBehind"]["line"], 3, "{report}");
    assert_eq!(report["leftBehind"]["reason"], reason.as_str(), "{report}");
}

/// What a person is told to do about a log that cannot be read depends on
/// what is wrong: another tool's transcript is named as one (with the
/// command that reads it), a header naming another session asks for the
/// file to be renamed, and `salvage` is offered only when a whole header
/// leaves a good prefix to copy.
#[test]
fn a_corrupt_log_is_told_what_helps_it() {
    let folder = ok(tempfile::tempdir());
    let transcript = folder
        .path()
        .join("3f2c0e1a-1111-2222-3333-444455556666.jsonl");
    ok(std::fs::write(
        &transcript,
        "{\"type\":\"user\",\"sessionId\":\"3f2c0e1a\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
    ));
    let foreign = run(["replay", &transcript.display().to_string()]);
    foreign.expect_code(2);
    assert!(
        foreign.stderr.contains("line 1 is no session header")
            && foreign.stderr.contains("sessionlog import")
            && !foreign.stderr.contains("salvage"),
        "{}",
        foreign.stderr
    );
    let log = LogBuilder::new("a").event("turn/start", r#"{"turnId":"t1"}"#);
    let misnamed = write_log(folder.path(), "b.jsonl", &log);
    let store = folder.path().display().to_string();
    let renamed = run(["replay", &store, "--session", "b"]);
    renamed.expect_code(2);
    assert!(
        renamed
            .stderr
            .contains("name the file for the session it holds")
            && !renamed.stderr.contains("salvage"),
        "{}",
        renamed.stderr
    );
    ok(std::fs::remove_file(&misnamed));
    let damaged = LogBuilder::new("c")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .raw(b"garbage\n")
        .next_seq(2)
        .event("turn/end", r#"{"turnId":"t1"}"#);
    let path = write_log(folder.path(), "c.jsonl", &damaged);
    let salvageable = run(["replay", &path.display().to_string()]);
    salvageable.expect_code(2);
    assert!(
        salvageable.stderr.contains("run `sessionlog salvage`"),
        "{}",
        salvageable.stderr
    );
}

/// `verify` of a log whose writer is still writing its last line (a
/// runtime's writer holds the log for the whole session) reads it again
/// before it calls that line a torn tail: finished meanwhile, the log is
/// ok; still unfinished, the torn tail says a writer holds the log. With
/// no writer, an unfinished line is a torn tail, said as ever.
#[test]
fn verify_reads_a_live_logs_unfinished_line_again_before_calling_it_torn() {
    use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
    use sessionlog_store::{Durability, Store, WriterOptions};
    let folder = ok(tempfile::tempdir());
    let store = ok(Store::create(folder.path()));
    let id = ok(SessionId::parse("live"));
    let header = SessionHeader::root(id.clone(), 1_700_000_000_000, "/w".into());
    ok(store.create_session(&header, &[], Durability::Fsync));
    let log = folder.path().join("live.jsonl");
    let line = EventRecord::new(1, 1, None, "x-test/note", r#"{"n":1}"#).encode(&id);
    let (first, rest) = line.split_at(line.len() / 2);
    let append = |bytes: &str| {
        let mut file = ok(std::fs::OpenOptions::new().append(true).open(&log));
        ok(std::io::Write::write_all(&mut file, bytes.as_bytes()));
    };
    let store_text = folder.path().display().to_string();
    let writer = ok(store.open_writer(&id, WriterOptions::default()));
    append(first);
    // Still unfinished after the reads again: a torn tail, a writer named.
    let verified = run(["verify", &store_text]);
    verified.expect_code(3);
    assert!(
        verified.stdout.contains("a writer holds the log"),
        "{}",
        verified.stdout
    );
    // Finished while verify reads again: ok. Verify reads again for about
    // 140 ms; a round whose line was finished later than that (this thread
    // woke late on a loaded machine) is torn, says so, and runs again with
    // the line cut back to its first half.
    let unfinished = ok(std::fs::metadata(&log)).len();
    let mut finished_in_time = false;
    for _ in 0..5 {
        let child = ok(sessionlog(["verify", &store_text])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn());
        std::thread::sleep(Duration::from_millis(60));
        append(rest);
        let output = ok(child.wait_with_output());
        let stdout = String::from_utf8_lossy(&output.stdout);
        match output.status.code() {
            Some(0) => {
                finished_in_time = true;
                break;
            }
            Some(3) if stdout.contains("a writer holds the log") => {
                let file = ok(std::fs::OpenOptions::new().write(true).open(&log));
                ok(file.set_len(unfinished));
            }
            code => panic!("verify exited {code:?}: {stdout}"),
        }
    }
    assert!(
        finished_in_time,
        "no round finished the line while verify read again"
    );
    drop(writer);
    // No writer: an unfinished line is a torn tail, without a writer named.
    append(first);
    let verified = run(["verify", &store_text]);
    verified.expect_code(3);
    assert!(
        !verified.stdout.contains("a writer holds"),
        "{}",
        verified.stdout
    );
}
