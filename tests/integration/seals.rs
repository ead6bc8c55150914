//! Seals end to end: the attacks a seal, a trust file or an anchor must
//! catch, each through the real binary and its exit code; forks; both
//! backends giving the same `head`; an edited SQLite row; the precedence
//! 2 > 7 > 4 > 3; and the property that the writer's running chain is the
//! chain recomputed from the file, and that any byte changed under a seal
//! is caught.
//!
//! Chain values here are recomputed with `sha2` from the format's
//! definition, never through the schema's own chain code.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sessionlog_schema::{SealSecretKey, SessionHeader};
use sessionlog_store::{Durability, JsonlStore, SealTurns, Store, WriterOptions};
use sha2::{Digest, Sha256};

use crate::cli_support::{
    expect_members_in_order, run, run_command, run_with_stdin, sessionlog, Run,
};
use crate::faults::{id, ok};
use crate::support::sign;

/// One turn of a session, as `append` reads it.
fn turn(turn_id: &str) -> String {
    [
        format!(r#"{{"type":"turn/start","data":{{"turnId":"{turn_id}"}}}}"#),
        format!(
            r#"{{"type":"message","data":{{"role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"do {turn_id}"}}]}}}}"#
        ),
        format!(r#"{{"type":"turn/end","data":{{"turnId":"{turn_id}"}}}}"#),
    ]
    .join("\n")
        + "\n"
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("{path:?} is not UTF-8"))
}

/// A folder store with session `s`: three turns appended with
/// `--seal-key` (a signed seal after each `turn/end`), and the key file.
fn signed_store(dir: &Path) -> (PathBuf, PathBuf) {
    let store = dir.join("store");
    let key = dir.join("runtime.key");
    run(["keygen", path_str(&key)]).expect_code(0);
    run(["create", path_str(&store), "--session", "s", "--cwd", "/w"]).expect_code(0);
    let input = turn("t1") + &turn("t2") + &turn("t3");
    let appended = run_with_stdin(
        [
            "append",
            path_str(&store),
            "--session",
            "s",
            "--seal-key",
            path_str(&key),
        ],
        &input,
    );
    appended.expect_code(0);
    assert!(
        appended.stdout.contains(r#"{"seq": 3, "seal": 4}"#),
        "{}",
        appended.stdout
    );
    (store, key)
}

/// A folder store with session `s`: three turns, each followed by an
/// unsigned `sessionlog seal`.
fn unsigned_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    run(["create", path_str(&store), "--session", "s", "--cwd", "/w"]).expect_code(0);
    for turn_id in ["t1", "t2", "t3"] {
        run_with_stdin(
            ["append", path_str(&store), "--session", "s"],
            &turn(turn_id),
        )
        .expect_code(0);
        run(["seal", path_str(&store), "--session", "s"]).expect_code(0);
    }
    store
}

fn log_path(store: &Path) -> PathBuf {
    store.join("s.jsonl")
}

/// The bodies of a log's lines (header first).
fn bodies(log: &Path) -> Vec<String> {
    let text = ok(std::fs::read_to_string(log));
    text.lines()
        .map(|line| {
            let cut = line
                .rfind(",\"crc\":")
                .unwrap_or_else(|| panic!("no CRC member in {line}"));
            line[..cut].to_owned()
        })
        .collect()
}

/// Writes `bodies` back as session `session`'s log, every CRC recomputed.
fn write_bodies(log: &Path, session: &str, bodies: &[String]) {
    let text: String = bodies.iter().map(|body| sign(session, body)).collect();
    ok(std::fs::write(log, text));
}

/// The chain values c0..cn of a log's bodies, by the format's definition.
fn chain(bodies: &[String]) -> Vec<[u8; 32]> {
    let mut values: Vec<[u8; 32]> = Vec::with_capacity(bodies.len());
    for (index, body) in bodies.iter().enumerate() {
        let mut hasher = Sha256::new();
        match values.last() {
            None => {
                hasher.update(b"sessionlog-chain-v1\x00");
            }
            Some(previous) => {
                hasher.update([1u8]);
                hasher.update(previous);
            }
        }
        hasher.update(body.as_bytes());
        values.push(hasher.finalize().into());
        debug_assert_eq!(values.len(), index + 1);
    }
    values
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Rewrites every seal's `chain` to the chain recomputed over the bodies
/// before it, leaving its key and signature as they were (what someone
/// who edits the log and wants the seals to match would do).
fn rechain_seals(bodies: &mut [String]) {
    for index in 1..bodies.len() {
        if !bodies[index].contains(r#""type":"seal""#) {
            continue;
        }
        let value = chain(&bodies[..index]);
        let fresh = format!("sha256:{}", hex(&value[index - 1]));
        let start = bodies[index]
            .find("\"chain\":\"")
            .unwrap_or_else(|| panic!("a seal has a chain"))
            + "\"chain\":\"".len();
        let end = start + "sha256:".len() + 64;
        bodies[index].replace_range(start..end, &fresh);
    }
}

fn verify(store: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["verify", path_str(store)];
    args.extend_from_slice(extra);
    run(args)
}

/// The anchor lines `head` prints for `store`, which it must print.
fn anchors_of(store: &Path) -> String {
    let head = run(["head", path_str(store)]);
    head.expect_code(0);
    head.stdout
}

#[test]
fn a_sealed_log_verifies_against_its_trust_file_and_as_sealed() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let public = format!("{}.pub", path_str(&key));
    verify(&store, &["--trust", &public]).expect_code(0);
    // The writer sealed right after the last turn/end: nothing unsealed.
    verify(&store, &["--require-sealed"]).expect_code(0);
    let mode = std::os::unix::fs::PermissionsExt::mode(&ok(std::fs::metadata(&key)).permissions());
    assert_eq!(mode & 0o777, 0o600);
    // The secret is never printed: keygen's output names the public key only.
    let secret = ok(std::fs::read_to_string(&key));
    let secret = secret.trim().trim_start_matches("ed25519-secret:");
    let again = run(["keygen", path_str(&dir.path().join("other.key"))]);
    assert!(!again.stdout.contains(secret) && !again.stderr.contains(secret));
    // A key file is never replaced.
    run(["keygen", path_str(&key)]).expect_code(1);
    // The secret key given where a trust file goes is refused unquoted.
    for command in [
        vec!["verify", path_str(&store), "--trust", path_str(&key)],
        vec![
            "report",
            path_str(&store),
            "--trust",
            path_str(&key),
            "--html",
            "-",
        ],
    ] {
        let refused = run(&command);
        refused.expect_code(1);
        assert!(
            !refused.stdout.contains(secret) && !refused.stderr.contains(secret),
            "{command:?}: {}",
            refused.stderr
        );
        assert!(refused.stderr.contains("secret key"), "{}", refused.stderr);
    }
    // A public key file that cannot be written leaves no secret key
    // behind (which would refuse the next keygen).
    let long = dir.path().join("k".repeat(252));
    let failed = run(["keygen", path_str(&long)]);
    failed.expect_code(1);
    assert!(
        !long.exists(),
        "the secret key stayed without its public key"
    );
}

/// An edit to the sealed part that also breaks a rule (a `turn/end` that
/// names another turn) is a seal that does not hold first: every command
/// that refuses such a log exits 7, as `verify` does, not 4.
#[test]
fn an_edit_that_also_breaks_a_rule_exits_7_from_every_command() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    let end = bodies
        .iter()
        .position(|body| body.contains("turn/end") && body.contains("\"t1\""))
        .unwrap_or_else(|| panic!("no turn/end of t1"));
    bodies[end] = bodies[end].replace("\"t1\"", "\"tx\"");
    write_bodies(&log, "s", &bodies);
    verify(&store, &[]).expect_code(7);
    let out = dir.path().join("out");
    let commands: Vec<Vec<String>> = vec![
        vec![
            "fork".into(),
            path_str(&store).into(),
            "--session".into(),
            "s".into(),
            "--child".into(),
            "c".into(),
        ],
        vec![
            "migrate".into(),
            path_str(&store).into(),
            format!("{}.db", path_str(&out)),
        ],
        vec![
            "migrate".into(),
            path_str(&store).into(),
            path_str(&out).into(),
        ],
        vec![
            "review-audit".into(),
            path_str(&store).into(),
            "--endpoint".into(),
            "http://127.0.0.1:9/v1".into(),
        ],
    ];
    for command in commands {
        let refused = run(&command);
        assert_eq!(refused.code, 7, "{command:?}: {}", refused.stderr);
    }
}

/// An own seal whose signature was taken out is no valid seal: under a
/// trust file it fails as a seal, on `report`'s page as under `verify`.
#[test]
fn report_fails_the_trust_file_on_an_own_seal_that_is_no_valid_seal() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let public = format!("{}.pub", path_str(&key));
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    let last = bodies.len() - 1;
    assert!(bodies[last].contains("\"sig\""), "{}", bodies[last]);
    let start = bodies[last]
        .find(",\"sig\":\"")
        .unwrap_or_else(|| panic!("no sig"));
    let value = start + ",\"sig\":\"".len();
    let end = value
        + bodies[last][value..]
            .find('"')
            .unwrap_or_else(|| panic!("sig not closed"))
        + 1;
    bodies[last] = format!("{}{}", &bodies[last][..start], &bodies[last][end..]);
    write_bodies(&log, "s", &bodies);
    verify(&store, &["--trust", &public]).expect_code(7);
    let html = dir.path().join("report.html");
    let reported = run([
        "report",
        path_str(&store),
        "--trust",
        &public,
        "--html",
        path_str(&html),
    ]);
    assert_eq!(reported.code, 7, "{}", reported.stderr);
    let page = ok(std::fs::read_to_string(&html));
    assert!(
        page.contains("FAILS THE TRUST FILE"),
        "no trust failure on the page"
    );
    assert!(!page.contains("every seal is signed by a key of the trust file"));
}

/// Seals that hold, signed by a key the trust file does not list: the
/// report exits 7 and says so on stderr, as a seal that does not hold is
/// said (it once exited 7 without a word).
#[test]
fn report_says_which_sessions_the_trust_file_does_not_trust() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let other = dir.path().join("other.key");
    run(["keygen", path_str(&other)]).expect_code(0);
    let public = format!("{}.pub", path_str(&other));
    let html = dir.path().join("report.html");
    let reported = run([
        "report",
        path_str(&store),
        "--trust",
        &public,
        "--html",
        path_str(&html),
    ]);
    assert_eq!(reported.code, 7, "{}", reported.stderr);
    assert!(
        reported
            .stderr
            .contains("1 session whose seals the trust file does not trust"),
        "{}",
        reported.stderr
    );
}

#[test]
fn a_record_edited_before_a_seal_with_its_crc_recomputed_fails_the_seal() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    bodies[2] = bodies[2].replace("do t1", "do t9");
    write_bodies(&log, "s", &bodies);
    let verdict = verify(&store, &[]);
    verdict.expect_code(7);
    assert!(
        verdict.stdout.contains("seq 4") && verdict.stdout.contains("recompute"),
        "{}",
        verdict.stdout
    );
}

#[test]
fn a_record_deleted_and_later_seqs_renumbered_fails_the_seal() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    // Delete the first turn's message (seq 2) and renumber what follows.
    bodies.remove(2);
    for (index, body) in bodies.iter_mut().enumerate().skip(2) {
        let old = format!("{{\"seq\":{},", index + 1);
        assert!(body.starts_with(&old), "{body}");
        *body = body.replacen(&old, &format!("{{\"seq\":{index},"), 1);
    }
    write_bodies(&log, "s", &bodies);
    verify(&store, &[]).expect_code(7);
}

#[test]
fn an_unsigned_seal_rewritten_to_match_passes_alone_and_fails_an_older_anchor() {
    let dir = ok(tempfile::tempdir());
    let store = unsigned_store(dir.path());
    let anchor = dir.path().join("anchor.jsonl");
    ok(std::fs::write(&anchor, anchors_of(&store)));
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    bodies[2] = bodies[2].replace("do t1", "do t9");
    rechain_seals(&mut bodies);
    write_bodies(&log, "s", &bodies);
    // Nothing inside the log can tell: an unsigned seal vouches for nothing
    // but the log's own consistency.
    verify(&store, &[]).expect_code(0);
    let anchored = verify(&store, &["--anchor", path_str(&anchor)]);
    anchored.expect_code(7);
    assert!(anchored.stdout.contains("anchor"), "{}", anchored.stdout);
}

#[test]
fn a_signed_seal_rewritten_without_resigning_fails_its_signature() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    bodies[2] = bodies[2].replace("do t1", "do t9");
    rechain_seals(&mut bodies);
    write_bodies(&log, "s", &bodies);
    let verdict = verify(&store, &[]);
    verdict.expect_code(7);
    assert!(verdict.stdout.contains("signature"), "{}", verdict.stdout);
}

#[test]
fn a_log_resigned_with_another_key_passes_alone_and_fails_the_trust_file() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    bodies[2] = bodies[2].replace("do t1", "do t9");
    // The forger rebuilds every seal from scratch and signs with a key of
    // its own.
    let forger = SealSecretKey::from_seed([42; 32]);
    let session = id("s");
    for index in 1..bodies.len() {
        if !bodies[index].contains(r#""type":"seal""#) {
            continue;
        }
        let value = chain(&bodies[..index]);
        let chain_value = ok(sessionlog_schema::ChainValue::parse(&format!(
            "sha256:{}",
            hex(&value[index - 1])
        )));
        let seal =
            sessionlog_schema::Seal::new(&session, index as u64 - 1, chain_value, Some(&forger));
        let data_at = bodies[index]
            .find(",\"data\":")
            .unwrap_or_else(|| panic!("a record has data"));
        bodies[index] = format!(
            "{},\"data\":{}",
            &bodies[index][..data_at],
            seal.to_data_json()
        );
    }
    write_bodies(&log, "s", &bodies);
    verify(&store, &[]).expect_code(0);
    let public = format!("{}.pub", path_str(&key));
    let trusted = verify(&store, &["--trust", &public]);
    trusted.expect_code(7);
    assert!(
        trusted.stdout.contains(&forger.public_key().to_string())
            && trusted.stdout.contains("not in the trust file"),
        "{}",
        trusted.stdout
    );
}

#[test]
fn the_last_seal_and_later_records_cut_off_fail_the_anchor_and_require_sealed() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let anchor = dir.path().join("anchor.jsonl");
    ok(std::fs::write(&anchor, anchors_of(&store)));
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    // Keep through the second seal (seq 8) and two events of the third
    // turn: the third turn's end and its seal are gone.
    bodies.truncate(1 + 10);
    write_bodies(&log, "s", &bodies);
    verify(&store, &[]).expect_code(0);
    let anchored = verify(&store, &["--anchor", path_str(&anchor)]);
    anchored.expect_code(7);
    assert!(anchored.stdout.contains("shorter"), "{}", anchored.stdout);
    let sealed = verify(&store, &["--require-sealed"]);
    sealed.expect_code(7);
    assert!(
        sealed.stdout.contains("after its last seal"),
        "{}",
        sealed.stdout
    );
    // A whole session deleted is caught by the anchor too.
    ok(std::fs::remove_file(&log));
    run(["create", path_str(&store), "--session", "other"]).expect_code(0);
    let missing = verify(&store, &["--anchor", path_str(&anchor)]);
    missing.expect_code(7);
    assert!(missing.stdout.contains("missing"), "{}", missing.stdout);
    // Every log deleted: still a seal failure naming the anchored session,
    // with the empty store warned of (not refused as a mistyped path).
    ok(std::fs::remove_file(store.join("other.jsonl")));
    let emptied = verify(&store, &["--anchor", path_str(&anchor)]);
    emptied.expect_code(7);
    assert!(
        emptied
            .stdout
            .contains("session s, named in the anchor file"),
        "{}",
        emptied.stdout
    );
    assert!(
        emptied.stderr.contains("no sessions found"),
        "{}",
        emptied.stderr
    );
    // Without the anchor file an empty store is refused as before.
    verify(&store, &[]).expect_code(1);
}

#[test]
fn seal_failures_rank_below_corruption_and_above_rule_violations() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    // A seal failure (an edited message) and a rule violation (a turn/end
    // naming no open turn, appended after the last seal): 7 wins over 4.
    bodies[2] = bodies[2].replace("do t1", "do t9");
    let next = bodies.len();
    bodies.push(format!(
        r#"{{"seq":{next},"ts":1,"type":"turn/end","data":{{"turnId":"none"}}"#
    ));
    write_bodies(&log, "s", &bodies);
    let both = verify(&store, &["--json"]);
    both.expect_code(7);
    assert!(
        both.stdout.contains("\"sealFailures\":[{"),
        "{}",
        both.stdout
    );
    assert!(both.stdout.contains("\"violations\":[{"), "{}", both.stdout);
    // Damage followed by an intact record is corruption: 2 wins over 7.
    let mut text = ok(std::fs::read_to_string(&log));
    let second_line = text.find('\n').unwrap_or(0) + 1;
    text.insert_str(second_line, "garbage\n");
    ok(std::fs::write(&log, text));
    verify(&store, &[]).expect_code(2);
}

#[test]
fn a_child_inherits_seals_for_shape_and_seals_its_own_chain_from_its_header() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let public = format!("{}.pub", path_str(&key));
    run([
        "fork",
        path_str(&store),
        "--session",
        "s",
        "--child",
        "kid",
        "--prompt",
        "go",
    ])
    .expect_code(0);
    // The inherited seals vouched for the parent's chain; the child's own
    // chain starts from its own header, so they are checked for shape only,
    // and verify never says their key signed what the child holds.
    let trusted = verify(&store, &["--session", "kid", "--trust", &public]);
    trusted.expect_code(0);
    assert!(
        trusted.stdout.contains("inherits a seal through seq")
            && trusted.stdout.contains("checked here for its shape")
            && !trusted.stdout.contains("signed by"),
        "{}",
        trusted.stdout
    );
    // Nor does replay: it names the key of an inherited seal, unchecked.
    let mut wide = sessionlog(["replay", path_str(&store), "--session", "kid"]);
    wide.env("COLUMNS", "400");
    let replayed = run_command(wide, None);
    replayed.expect_code(0);
    assert!(
        replayed
            .stdout
            .contains("(not checked here) (inherited: it vouched for the parent)")
            && !replayed.stdout.contains("signed by"),
        "{}",
        replayed.stdout
    );
    let unsealed = verify(&store, &["--session", "kid", "--require-sealed"]);
    unsealed.expect_code(7);
    assert!(
        unsealed.stdout.contains("no seal of its own"),
        "{}",
        unsealed.stdout
    );
    // An inherited seal whose shape breaks the rules is still a violation
    // (before the child seals: its own seal would cover the edit).
    let kid_log = store.join("kid.jsonl");
    let original = bodies(&kid_log);
    let mut kid = original.clone();
    let inherited = kid
        .iter()
        .position(|body| body.contains(r#""type":"seal""#))
        .unwrap_or_else(|| panic!("the child inherits seals"));
    kid[inherited] = kid[inherited].replace("\"chain\":\"sha256:", "\"chain\":\"sha512:");
    write_bodies(&kid_log, "kid", &kid);
    verify(&store, &["--session", "kid"]).expect_code(4);
    write_bodies(&kid_log, "kid", &original);
    run([
        "seal",
        path_str(&store),
        "--session",
        "kid",
        "--key",
        path_str(&key),
    ])
    .expect_code(0);
    verify(
        &store,
        &["--session", "kid", "--require-sealed", "--trust", &public],
    )
    .expect_code(0);
    // The child's seal carries the chain of its own header and every event
    // before it, seeded ones included.
    let bodies = bodies(&store.join("kid.jsonl"));
    let values = chain(&bodies[..bodies.len() - 1]);
    let last = bodies.last().map_or("", String::as_str);
    assert!(
        last.contains(&format!(
            "\"chain\":\"sha256:{}\"",
            hex(&values[values.len() - 1])
        )),
        "{last}"
    );
}

#[test]
fn both_backends_give_the_same_head_and_catch_an_edited_sqlite_row() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let public = format!("{}.pub", path_str(&key));
    let database = dir.path().join("copy.db");
    run(["migrate", path_str(&store), path_str(&database)]).expect_code(0);
    let jsonl_head = anchors_of(&store);
    assert_eq!(jsonl_head, anchors_of(&database));
    let anchor = dir.path().join("anchor.jsonl");
    ok(std::fs::write(&anchor, &jsonl_head));
    verify(
        &database,
        &["--trust", &public, "--anchor", path_str(&anchor)],
    )
    .expect_code(0);
    // Someone with write access to the database edits a message and
    // recomputes the row's CRC.
    edit_row_message(&database, "s", 2, "do t1", "do t9");
    let verdict = verify(&database, &[]);
    verdict.expect_code(7);
    assert!(verdict.stdout.contains("seq 4"), "{}", verdict.stdout);
}

/// `replay` of session `s` laid out for a terminal wide enough that no
/// summary wraps.
fn wide_replay(store: &Path) -> Run {
    let mut command = sessionlog(["replay", path_str(store), "--session", "s"]);
    command.env("COLUMNS", "400");
    run_command(command, None)
}

#[test]
fn replay_and_report_show_seals_and_mark_a_failed_one() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let public = format!("{}.pub", path_str(&key));
    let replay = wide_replay(&store);
    replay.expect_code(0);
    assert!(
        replay
            .stdout
            .contains("sealed through seq 3, signed by ed25519:"),
        "{}",
        replay.stdout
    );
    let html = dir.path().join("report.html");
    run([
        "report",
        path_str(&store),
        "--html",
        path_str(&html),
        "--trust",
        &public,
    ])
    .expect_code(0);
    let page = ok(std::fs::read_to_string(&html));
    assert!(page.contains("sealed through seq 11"), "no seal status");
    assert!(page.contains("every seal is signed by a key of the trust file"));
    let log = log_path(&store);
    let mut bodies = bodies(&log);
    bodies[2] = bodies[2].replace("do t1", "do t9");
    write_bodies(&log, "s", &bodies);
    let replay = wide_replay(&store);
    replay.expect_code(7);
    assert!(replay.stdout.contains("SEAL FAILED"), "{}", replay.stdout);
    // Every seal from seq 4 on fails (the chain runs through the edit); the
    // one before `--from` is named as a seal, in text and JSON.
    let windowed = run(["replay", path_str(&store), "--session", "s", "--from", "5"]);
    windowed.expect_code(7);
    assert!(
        windowed
            .stdout
            .contains("3 seals do not hold (marked ✗ above; 1 of them before"),
        "{}",
        windowed.stdout
    );
    let json = run([
        "replay",
        path_str(&store),
        "--session",
        "s",
        "--from",
        "5",
        "--json",
    ]);
    json.expect_code(7);
    assert!(
        json.stderr
            .contains("1 seal does not hold before the first seq shown"),
        "{}",
        json.stderr
    );
    let reported = run(["report", path_str(&store), "--html", path_str(&html)]);
    reported.expect_code(7);
    // Seals that do not hold are named as seals, not as broken rules.
    assert!(
        reported
            .stderr
            .contains("3 seals do not hold; each is marked"),
        "{}",
        reported.stderr
    );
    let page = ok(std::fs::read_to_string(&html));
    assert!(page.contains("SEAL FAILURE") && page.contains("seal-failed"));
    assert!(page.contains("3 seals do not hold; each is marked below"));
    // The page's list of sessions and the totals of stats count them apart
    // from broken rules too.
    assert!(
        page.contains("0 violations, 3 seals that do not hold"),
        "the page's list counts the seals as violations"
    );
    let stats = run(["stats", path_str(&store)]);
    assert!(
        stats.stderr.contains("3 seals do not hold") && !stats.stderr.contains("break the rules"),
        "{}",
        stats.stderr
    );
    assert!(
        stats.stdout.contains("rule violations 0\n")
            && stats.stdout.contains("seals that do not hold 3\n"),
        "{}",
        stats.stdout
    );
    // A script tells them apart too, in the totals and for the session.
    let json = run(["stats", path_str(&store), "--json"]);
    let counted: serde_json::Value = ok(serde_json::from_str(&json.stdout));
    assert_eq!(counted["totals"]["violations"], 3, "{}", json.stdout);
    assert_eq!(counted["totals"]["sealFailures"], 3, "{}", json.stdout);
    assert_eq!(counted["sessions"][0]["sealFailures"], 3, "{}", json.stdout);
}

/// Builds a log through the writer: `events` turns' worth of events, a
/// seal (signed or not) after each event whose index is in `seal_after`.
fn written_log(
    dir: &Path,
    turns: usize,
    seal_after: &[usize],
    signed: bool,
) -> (PathBuf, sessionlog_schema::ChainValue) {
    let store = ok(JsonlStore::open(dir));
    let header = SessionHeader::root(id("p"), 1, "/w".to_owned());
    ok(store.create(&header, &[], Durability::Buffered));
    let options = WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: false,
        seal_turns: SealTurns::Off,
    };
    let mut writer = ok(Store::Jsonl(store).open_writer(&id("p"), options));
    let key = SealSecretKey::from_seed([5; 32]);
    let mut index = 0;
    for turn_index in 0..turns {
        for line in turn(&format!("t{turn_index}")).lines() {
            let value: serde_json::Value = ok(serde_json::from_str(line));
            let event = sessionlog_store::NewEvent::new(
                value["type"].as_str().unwrap_or_default(),
                value["data"].to_string(),
            );
            ok(writer.append(event, None));
            if seal_after.contains(&index) {
                ok(writer.seal(signed.then_some(&key), None));
            }
            index += 1;
        }
    }
    (dir.join("p.jsonl"), writer.state().chain())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_running_chain_is_the_recomputed_one_and_any_sealed_byte_changed_is_caught(
        turns in 1usize..5,
        seal_after in prop::collection::vec(0usize..15, 1..4),
        signed in any::<bool>(),
        pick in any::<u64>(),
        replacement in 0x20u8..0x7f,
    ) {
        let dir = ok(tempfile::tempdir());
        let (log, running) = written_log(dir.path(), turns, &seal_after, signed);
        let bodies = bodies(&log);
        let values = chain(&bodies);
        prop_assert_eq!(running.as_bytes(), &values[values.len() - 1]);
        // Every seal carries the recomputed chain through the seq before it.
        let mut last_sealed = None;
        for (index, body) in bodies.iter().enumerate().skip(1) {
            if body.contains(r#""type":"seal""#) {
                let expected = format!("\"chain\":\"sha256:{}\"", hex(&values[index - 1]));
                prop_assert!(body.contains(&expected));
                last_sealed = Some(index - 1);
            }
        }
        let Some(last_sealed) = last_sealed else {
            // No seal landed (every position was past the log's end).
            return Ok(());
        };
        // Change one byte of one sealed body (header included), CRC
        // recomputed: verify must not pass.
        let line = (pick % (last_sealed as u64 + 1)) as usize;
        let mut changed = bodies.clone();
        let bytes = changed[line].as_bytes().to_vec();
        let at = ((pick >> 8) % bytes.len() as u64) as usize;
        prop_assume!(bytes[at] != replacement);
        let mut bytes = bytes;
        bytes[at] = replacement;
        changed[line] = ok(String::from_utf8(bytes));
        write_bodies(&log, "p", &changed);
        let code = run(["verify", path_str(&log)]).code;
        prop_assert!(code == 2 || code == 4 || code == 7, "verify exited {} after byte {} of line {} changed", code, at, line);
    }
}

/// A root header's seed length raised over its sealed events (the CRC
/// recomputed) would make them read as inherited, their seal checked for
/// shape only: a header without a parent that seeds events is refused as
/// corruption.
#[test]
fn a_root_header_that_seeds_its_sealed_events_is_corrupt() {
    let dir = ok(tempfile::tempdir());
    let (log, _) = written_log(dir.path(), 1, &[0], false);
    run(["verify", path_str(&log)]).expect_code(0);
    let mut changed = bodies(&log);
    changed[0] = changed[0].replace("\"seedLength\":0", "\"seedLength\":4");
    assert!(changed[0].contains("\"seedLength\":4"), "{}", changed[0]);
    write_bodies(&log, "p", &changed);
    let refused = run(["verify", path_str(&log)]);
    refused.expect_code(2);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(
        said.contains("seedLength is 4 with parentSession null"),
        "{said}"
    );
}

/// A header given a parent and a seed that reaches over the session's own
/// signed seals, with a record under them edited: the seals, signed for
/// this session and not its parent, fail as the own seals they are (the
/// demotion once made them read as inherited, checked for shape only, and
/// `verify --trust` passed the edited log).
#[test]
fn own_signed_seals_a_raised_seed_would_make_inherited_still_fail() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let public = format!("{}.pub", path_str(&key));
    let log = log_path(&store);
    let mut changed = bodies(&log);
    assert!(changed[4].contains(r#""type":"seal""#), "{}", changed[4]);
    changed[2] = changed[2].replace("do t1", "do t9");
    // Every event inherited: no seal is left to read as the session's own.
    let seed = format!("\"seedLength\":{}", changed.len() - 1);
    for parent in ["\"ghost\"", "\"s\""] {
        let mut demoted = changed.clone();
        demoted[0] = demoted[0]
            .replace(
                "\"parentSession\":null",
                &format!("\"parentSession\":{parent}"),
            )
            .replace("\"seedLength\":0", &seed)
            .replace("\"delegationDepth\":0", "\"delegationDepth\":1");
        assert!(demoted[0].contains(&seed), "{}", demoted[0]);
        write_bodies(&log, "s", &demoted);
        for extra in [&[][..], &["--trust", &public]] {
            let verdict = verify(&store, extra);
            verdict.expect_code(7);
            assert!(
                verdict.stdout.contains("is signed for session s itself"),
                "{parent} {extra:?}: {}",
                verdict.stdout
            );
        }
    }
}

/// A fork by reference taken from its parent's state snapshot reads none of
/// the parent's rows; one changed under the parent's signed seal, its CRC
/// recomputed, is the child's seed too. The child's own seal over it, made
/// after, must not make it pass: `verify` of the child checks the parent's
/// seals in its seed over the parent's log (it once exited 0 there, and 7
/// only for the parent).
#[test]
fn a_fork_by_reference_fails_the_parent_seal_its_seed_breaks() {
    let dir = ok(tempfile::tempdir());
    let database = dir.path().join("s.db");
    let key = dir.path().join("rt.key");
    run(["keygen", path_str(&key)]).expect_code(0);
    let public = format!("{}.pub", path_str(&key));
    run([
        "create",
        path_str(&database),
        "--session",
        "p",
        "--cwd",
        "/w",
    ])
    .expect_code(0);
    let mut input = turn("t1");
    for _ in 0..1100 {
        input.push_str("{\"type\":\"x-test/note\",\"data\":{}}\n");
    }
    input.push_str(&turn("t2"));
    run_with_stdin(
        [
            "append",
            path_str(&database),
            "--session",
            "p",
            "--seal-key",
            path_str(&key),
        ],
        &input,
    )
    .expect_code(0);
    edit_row_message(&database, "p", 2, "do t1", "do t9");
    run(["verify", path_str(&database), "--session", "p"]).expect_code(7);
    run([
        "fork",
        path_str(&database),
        "--session",
        "p",
        "--child",
        "c",
    ])
    .expect_code(0);
    run([
        "seal",
        path_str(&database),
        "--session",
        "c",
        "--key",
        path_str(&key),
    ])
    .expect_code(0);
    let verdict = verify(
        &database,
        &["--session", "c", "--trust", &public, "--require-sealed"],
    );
    verdict.expect_code(7);
    assert!(
        verdict.stdout.contains(
            "that this fork by reference inherits does not hold over the log of session p"
        ),
        "{}",
        verdict.stdout
    );
    // `--json` names the inherited seal by its seq, as the text does.
    let json = verify(&database, &["--session", "c", "--json"]);
    json.expect_code(7);
    let report: serde_json::Value = ok(serde_json::from_str(
        json.stdout.lines().next().unwrap_or_default(),
    ));
    let failures = report["sealFailures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let inherited: Vec<&serde_json::Value> = failures
        .iter()
        .filter(|failure| {
            failure["message"]
                .as_str()
                .is_some_and(|message| message.contains("inherits"))
        })
        .collect();
    assert!(!inherited.is_empty(), "{}", json.stdout);
    for failure in inherited {
        let seq = failure["seq"].as_u64();
        let named = seq.is_some_and(|seq| {
            failure["message"]
                .as_str()
                .is_some_and(|message| message.contains(&format!("the seal at seq {seq} ")))
        });
        assert!(named, "{failure}");
    }
}

/// The log of docs/seal-test-vector.md, written by the library's writer
/// from fixed inputs (Ed25519 signatures are deterministic).
fn vector_log(dir: &Path) -> String {
    let store = ok(JsonlStore::open(dir));
    let header = SessionHeader::root(id("vector-1"), 1_767_225_600_000, "/work/demo".to_owned());
    ok(store.create(&header, &[], Durability::Buffered));
    let key = SealSecretKey::from_seed(vector_seed());
    let store = Store::Jsonl(store);
    let options = |seal_turns| WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: false,
        seal_turns,
    };
    let mut writer = ok(store.open_writer(&id("vector-1"), options(SealTurns::Signed(key))));
    let mut ts = 1_767_225_600_000;
    let mut event = |writer: &mut sessionlog_store::SessionWriter, event_type: &str, data: &str| {
        ts += 1_000;
        ok(writer.append(
            sessionlog_store::NewEvent {
                event_type: event_type.to_owned(),
                data: data.to_owned(),
                ts: Some(ts),
            },
            None,
        ));
    };
    event(&mut writer, "turn/start", r#"{"turnId":"t1"}"#);
    event(
        &mut writer,
        "message",
        r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"Hello"}]}"#,
    );
    event(&mut writer, "turn/end", r#"{"turnId":"t1"}"#);
    drop(writer);
    // The second turn is sealed unsigned.
    let mut writer = ok(store.open_writer(&id("vector-1"), options(SealTurns::Unsigned)));
    event(&mut writer, "turn/start", r#"{"turnId":"t2"}"#);
    event(&mut writer, "turn/end", r#"{"turnId":"t2"}"#);
    drop(writer);
    ok(std::fs::read_to_string(dir.join("vector-1.jsonl")))
}

/// The test vector's key seed: the bytes 0, 1, …, 31.
fn vector_seed() -> [u8; 32] {
    std::array::from_fn(|index| index as u8)
}

#[test]
fn the_seal_test_vector_in_docs_is_what_the_writer_writes_and_checks_out() {
    let dir = ok(tempfile::tempdir());
    let log = vector_log(dir.path());
    let bodies: Vec<String> = log
        .lines()
        .map(|line| line[..line.rfind(",\"crc\":").unwrap_or(line.len())].to_owned())
        .collect();
    let values = chain(&bodies);
    let key = SealSecretKey::from_seed(vector_seed());
    let mut text = String::new();
    text.push_str("# Seal test vector\n\n");
    text.push_str(
        "A small sealed log for another implementation of seals to check itself\n\
         against (the rules are in docs/FORMAT.md, \"Seals\"). Everything here is\n\
         recomputed by a test (`tests/integration/seals.rs`), so it stays true.\n\n",
    );
    text.push_str("## Key\n\n");
    text.push_str("- seed: the 32 bytes 0x00, 0x01, …, 0x1f\n");
    text.push_str(&format!(
        "- secret key file (`sessionlog keygen`): `{}`\n",
        key.to_file_text().trim_end()
    ));
    text.push_str(&format!(
        "- public key (a trust file line): `{}`\n\n",
        key.public_key()
    ));
    text.push_str("## The log (`vector-1.jsonl`)\n\n```\n");
    text.push_str(&log);
    text.push_str("```\n\n## Chain values\n\n| seq | record | chain |\n|---:|---|---|\n");
    for (seq, (body, value)) in bodies.iter().zip(&values).enumerate() {
        let kind = if seq == 0 {
            "header".to_owned()
        } else {
            let value: serde_json::Value = ok(serde_json::from_str(&format!("{body}}}")));
            value["type"].as_str().unwrap_or_default().to_owned()
        };
        text.push_str(&format!("| {seq} | {kind} | `sha256:{}` |\n", hex(value)));
    }
    text.push_str("\n## Seals\n\n");
    for (seq, body) in bodies.iter().enumerate().skip(1) {
        if !body.contains(r#""type":"seal""#) {
            continue;
        }
        let through = seq - 1;
        let message = format!(
            "sessionlog-seal-v1\nvector-1\n{through}\nsha256:{}\n",
            hex(&values[through])
        );
        let (signed, what) = if body.contains("\"sig\":") {
            ("signed by the key above", "the signed message")
        } else {
            ("unsigned", "the message a signature would cover")
        };
        text.push_str(&format!(
            "- seq {seq}, {signed}, covers seq 0–{through}; {what} (UTF-8, `\\n` = 0x0a) is `{}`\n",
            message.replace('\n', "\\n")
        ));
        // Each seal carries the chain recomputed here, and a signed one
        // verifies over exactly this message.
        assert!(body.contains(&format!("\"chain\":\"sha256:{}\"", hex(&values[through]))));
        if let Some(at) = body.find("\"sig\":\"") {
            let sig_text = &body[at + 7..body.len() - 2];
            let data: serde_json::Value = ok(serde_json::from_str(&format!("{body}}}")));
            let seal: sessionlog_schema::Seal = ok(serde_json::from_value(data["data"].clone()));
            let signature = seal
                .signature
                .unwrap_or_else(|| panic!("{sig_text} is a signature"));
            assert_eq!(signature.key, key.public_key());
            assert_eq!(signature.verify(message.as_bytes()), Ok(()));
        }
    }
    expect_test::expect_file!["../../docs/seal-test-vector.md"].assert_eq(&text);
    let copy = dir.path().join("copy.jsonl");
    ok(std::fs::write(&copy, &log));
    let public = dir.path().join("vector.pub");
    ok(std::fs::write(&public, format!("{}\n", key.public_key())));
    // The second turn's seal is unsigned: the trust file refuses it.
    run(["verify", path_str(&copy), "--trust", path_str(&public)]).expect_code(7);
    run(["verify", path_str(&copy), "--require-sealed"]).expect_code(0);
}

/// The first ten records of the example auto-review session (its step
/// open, its request header written), in a folder of their own.
fn open_step_log(dir: &Path) -> PathBuf {
    let example = ok(std::fs::read_to_string(
        crate::cli_support::workspace_root().join("examples/sessions/auto-review.jsonl"),
    ));
    let prefix: String = example.split_inclusive('\n').take(10).collect();
    let log = dir.join("auto-review.jsonl");
    ok(std::fs::write(&log, prefix));
    log
}

#[test]
fn a_sealed_log_still_reviews_and_a_tampered_one_is_refused_with_exit_7() {
    const PENDING: &str =
        r#"{"callId":"call-9","stepId":"step-1","name":"shell","arguments":{"command":"ls"}}"#;
    let dir = ok(tempfile::tempdir());
    let log = open_step_log(dir.path());
    let pending = dir.path().join("pending.json");
    ok(std::fs::write(&pending, PENDING));
    let request = |log: &Path| {
        run([
            "review-request",
            path_str(log),
            "--pending",
            path_str(&pending),
        ])
    };
    let unsealed = request(&log);
    unsealed.expect_code(0);
    let key = dir.path().join("runtime.key");
    run(["keygen", path_str(&key)]).expect_code(0);
    run([
        "seal",
        path_str(&log),
        "--session",
        "auto-review",
        "--key",
        path_str(&key),
    ])
    .expect_code(0);
    verify(&log, &["--require-sealed"]).expect_code(0);
    // A seal changes no projection and is no message: the reviewer is
    // asked exactly what it was asked before.
    let sealed = request(&log);
    sealed.expect_code(0);
    assert_eq!(sealed.stdout, unsealed.stdout);

    // The user's words edited under the seal, the CRC recomputed: the
    // request is refused as an invalid log, with the seal's exit code,
    // and so is an audit of past decisions (before any reviewer is asked).
    let mut edited = bodies(&log);
    edited[6] = edited[6].replace("find out why and fix it", "delete the ledger tests");
    write_bodies(&log, "auto-review", &edited);
    let refused = request(&log);
    refused.expect_code(7);
    assert!(refused.stdout.contains("INVALID_LOG"), "{}", refused.stdout);
    // Named with its log, as every other finding is.
    let named = format!("{}: seq 10 (seal)", log.display());
    assert!(refused.stdout.contains(&named), "{}", refused.stdout);
    let mut audit = crate::cli_support::sessionlog(["review-audit"]);
    audit
        .arg(&log)
        .args(["--endpoint", "http://127.0.0.1:9/v1"])
        .env("SESSIONLOG_REVIEWER_KEY", "sk-test");
    let audited = crate::cli_support::run_command(audit, None);
    audited.expect_code(7);
    assert!(
        audited.stderr.contains("seq 10 (seal)"),
        "{}",
        audited.stderr
    );
}

/// A long log (the fold of `verify` moves to a thread of its own after
/// its first 4,096 events) sealed only late, or early and late: the late
/// seal is checked against the chain of the bytes folded, and a body
/// edited under it, its CRC recomputed, is caught, by `verify` and by
/// `project` (whose fold leaves the chain out of a long log sealed in none
/// of its first events, and so folds it again with its chain once the
/// late seal comes).
#[test]
fn a_long_log_sealed_late_catches_an_edit_under_its_seal_far_past_the_first_events() {
    // 2,000 turns of three events: 6,000 events, the seal after the
    // 5,001st (index 5,000) or after the 11th as well.
    for seal_after in [&[5_000][..], &[10, 5_000]] {
        let dir = ok(tempfile::tempdir());
        let (log, _) = written_log(dir.path(), 2_000, seal_after, true);
        // The extra early seal moves the late one a seq on.
        let seal_seq = 5_001 + seal_after.len();
        let whole = verify(dir.path(), &["--json"]);
        whole.expect_code(0);
        let line = whole.stdout.lines().next().unwrap_or_default();
        let verdict: serde_json::Value = ok(serde_json::from_str(line));
        assert_eq!(verdict["events"], 6_000 + seal_after.len(), "{line}");
        assert_eq!(verdict["lastSeal"]["seq"], seal_seq, "{line}");
        assert_eq!(verdict["ownSeals"], seal_after.len(), "{line}");
        let projected = run(["project", path_str(dir.path())]);
        projected.expect_code(0);
        let projection: serde_json::Value = ok(serde_json::from_str(&projected.stdout));
        assert_eq!(
            projection["seq"],
            6_000 + seal_after.len(),
            "{}",
            projected.stdout
        );
        // An edit far past the first seal and before the last.
        edit_message(&log, "do t1500", "do t9999");
        let caught = verify(dir.path(), &[]);
        caught.expect_code(7);
        assert!(
            caught.stdout.contains(&format!("seq {seal_seq}")),
            "{}",
            caught.stdout
        );
        let refused = run(["project", path_str(dir.path())]);
        refused.expect_code(7);
        assert!(
            refused.stderr.contains(&format!("seq {seal_seq}")),
            "{}",
            refused.stderr
        );
        assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    }
}

/// What `project` of a long log, its chain left out of the fold, still
/// refuses: a seal that fails anywhere past its first events (exit 7),
/// and a rule violation before it, which the seal outranks; and what it
/// cannot tell without one: an unsealed log edited with its CRC
/// recomputed projects as the edit says.
#[test]
fn a_long_log_projects_with_its_late_seals_checked() {
    let dir = ok(tempfile::tempdir());
    let (log, _) = written_log(dir.path(), 2_000, &[], true);
    edit_message(&log, "do t1500", "do t9999");
    run(["project", path_str(dir.path())]).expect_code(0);

    // Sealed at its end only (a hint the fold hashes the chain from the
    // start on): the seal is checked all the same.
    let dir = ok(tempfile::tempdir());
    let (log, _) = written_log(dir.path(), 2_000, &[5_999], false);
    let projected = run(["project", path_str(dir.path())]);
    projected.expect_code(0);
    assert!(
        projected.stdout.contains(r#""seq":6001"#),
        "{}",
        projected.stdout
    );
    edit_message(&log, "do t1500", "do t9999");
    let refused = run(["project", path_str(dir.path())]);
    refused.expect_code(7);
    assert!(refused.stderr.contains("seq 6001"), "{}", refused.stderr);

    // Two seals far past the first events, the first of them wrong.
    let dir = ok(tempfile::tempdir());
    let (log, _) = written_log(dir.path(), 2_000, &[4_500, 5_000], false);
    let projected = run(["project", path_str(dir.path())]);
    projected.expect_code(0);
    // The same in a database, whose rows are read as a log's lines are:
    // an edited row under the late seals is caught there too.
    let database = dir.path().join("copy.db");
    run(["migrate", path_str(dir.path()), path_str(&database)]).expect_code(0);
    let from_database = run(["project", path_str(&database)]);
    from_database.expect_code(0);
    assert_eq!(from_database.stdout, projected.stdout);
    // Turn t1300's message: three events a turn, the message second.
    edit_row_message(&database, "p", 1_300 * 3 + 2, "do t1300", "do t7777");
    let refused = run(["project", path_str(&database)]);
    refused.expect_code(7);
    assert!(refused.stderr.contains("seq 4502"), "{}", refused.stderr);
    edit_message(&log, "do t1200", "do t8888");
    let refused = run(["project", path_str(dir.path())]);
    refused.expect_code(7);
    assert!(refused.stderr.contains("seq 4502"), "{}", refused.stderr);

    // A rule broken before the seal: 7 outranks 4.
    let mut edited = bodies(&log);
    let turn_end = (0..edited.len())
        .find(|&index| {
            edited[index].contains("turn/end") && edited[index].contains(r#""turnId":"t1000"}"#)
        })
        .unwrap_or_else(|| panic!("no turn/end of t1000"));
    edited[turn_end] = edited[turn_end].replace("t1000", "t1000x");
    write_bodies(&log, "p", &edited);
    run(["project", path_str(dir.path())]).expect_code(7);
    rechain_seals(&mut edited);
    write_bodies(&log, "p", &edited);
    run(["verify", path_str(dir.path())]).expect_code(4);
    run(["project", path_str(dir.path())]).expect_code(4);
}

#[test]
fn a_long_unsealed_log_named_by_an_anchor_is_checked_against_it() {
    let dir = ok(tempfile::tempdir());
    let store = dir.path().join("store");
    ok(std::fs::create_dir(&store));
    let (log, _) = written_log(&store, 2_000, &[], false);
    let anchor = dir.path().join("anchor.jsonl");
    ok(std::fs::write(&anchor, anchors_of(&store)));
    verify(&store, &["--anchor", path_str(&anchor)]).expect_code(0);
    edit_message(&log, "do t1500", "do t9999");
    // Nothing inside an unsealed log can tell; the anchor can.
    verify(&store, &[]).expect_code(0);
    let anchored = verify(&store, &["--anchor", path_str(&anchor)]);
    anchored.expect_code(7);
    assert!(anchored.stdout.contains("anchor"), "{}", anchored.stdout);
}

/// Replaces `from` with `to` in the body of session `session`'s row `seq`
/// of `database`, which must hold it, its CRC recomputed: what someone
/// with write access to the database would do.
fn edit_row_message(database: &Path, session: &str, seq: i64, from: &str, to: &str) {
    let connection = ok(rusqlite::Connection::open(database));
    let body: String = ok(connection.query_row(
        "SELECT body FROM events WHERE session_id = ?1 AND seq = ?2",
        rusqlite::params![session, seq],
        |row| row.get(0),
    ));
    assert!(
        body.contains(&format!("\"{from}\"")),
        "row {seq} holds {from:?}: {body}"
    );
    let edited = body.replace(from, to);
    let crc = crate::support::spec_crc(session, edited.as_bytes());
    ok(connection.execute(
        "UPDATE events SET body = ?1, crc = ?2 WHERE session_id = ?3 AND seq = ?4",
        rusqlite::params![edited, i64::from(crc), session, seq],
    ));
}

/// Replaces `from` with `to` in the one body of session `p`'s log that
/// holds it, its CRC recomputed.
fn edit_message(log: &Path, from: &str, to: &str) {
    edit_message_of(log, "p", from, to);
}

/// `keygen --json` and `seal --json` print their members in a fixed order
/// that reads as the text line does (the session first), not sorted.
#[test]
fn seal_and_keygen_json_lines_keep_their_member_order() {
    let dir = ok(tempfile::tempdir());
    let key = dir.path().join("k.key");
    let keygen = run(["keygen", path_str(&key), "--json"]);
    keygen.expect_code(0);
    expect_members_in_order(
        &keygen.stdout,
        &["secretKeyFile", "publicKeyFile", "publicKey"],
    );
    let store = dir.path().join("logs");
    run(["create", path_str(&store), "--session", "s"]).expect_code(0);
    let sealed = run([
        "seal",
        path_str(&store),
        "--session",
        "s",
        "--key",
        path_str(&key),
        "--json",
    ]);
    sealed.expect_code(0);
    expect_members_in_order(
        &sealed.stdout,
        &["session", "seq", "throughSeq", "chain", "key"],
    );
}

/// A seal that fails its check still counts as a seal: `--require-sealed`
/// and the verdict name the seal that failed, never "events after its
/// last seal" nor "no seal of its own" for a log that ends in its seals.
#[test]
fn a_failed_seal_still_counts_as_the_last_seal() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let original = bodies(&log);
    // A record under the last seal (seq 12) edited.
    let mut edited = original.clone();
    edited[10] = edited[10].replace("do t3", "do t9");
    write_bodies(&log, "s", &edited);
    let checked = verify(&store, &["--require-sealed", "--json"]);
    checked.expect_code(7);
    let verdict: serde_json::Value = ok(serde_json::from_str(checked.stdout.trim()));
    let failures: Vec<u64> = verdict["sealFailures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|failure| failure["seq"].as_u64())
        .collect();
    assert_eq!(failures, [12], "{}", checked.stdout);
    assert_eq!(verdict["ownSeals"], 3, "{}", checked.stdout);
    assert_eq!(verdict["lastSeal"]["seq"], 12, "{}", checked.stdout);
    assert!(
        !checked.stdout.contains("after its last seal"),
        "{}",
        checked.stdout
    );
    // The header edited: every seal fails, and each is named.
    let mut edited = original;
    edited[0] = edited[0].replace("\"cwd\":\"/w\"", "\"cwd\":\"/x\"");
    write_bodies(&log, "s", &edited);
    let checked = verify(&store, &["--require-sealed"]);
    checked.expect_code(7);
    assert!(
        !checked.stdout.contains("no seal of its own"),
        "{}",
        checked.stdout
    );
    for seq in [4, 8, 12] {
        assert!(
            checked
                .stdout
                .contains(&format!("seq {seq} (seal): seal failure")),
            "{}",
            checked.stdout
        );
    }
}

/// A sealed record edited and the seal over it broken in shape (a member
/// added): its chain, still readable, is checked, so the edit is a seal
/// failure (7) even without a trust file; under `--trust` a seal that is
/// no valid seal fails the trust file as well.
#[test]
fn a_seal_broken_in_shape_fails_the_trust_file() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let trust = dir.path().join("trust.pub");
    ok(std::fs::copy(key.with_extension("key.pub"), &trust));
    let log = log_path(&store);
    let mut edited = bodies(&log);
    edited[10] = edited[10].replace("do t3", "do t9");
    edited[12] = edited[12].replacen("\"data\":{", "\"data\":{\"note\":0,", 1);
    write_bodies(&log, "s", &edited);
    let alone = verify(&store, &[]);
    alone.expect_code(7);
    assert!(
        alone.stdout.contains("seq 12 (seal): seal failure")
            && alone.stdout.contains("its shape is broken"),
        "{}",
        alone.stdout
    );
    let trusted = verify(&store, &["--trust", path_str(&trust)]);
    trusted.expect_code(7);
    assert!(
        trusted.stdout.contains("seq 12 (seal): seal failure"),
        "{}",
        trusted.stdout
    );
}

/// A sealed `turn/end` edited so that it also breaks a rule: the reviewer's
/// request fails closed with exit 7 and names the seal that failed, which
/// ranks above the rule violation the edit made.
#[test]
fn review_request_names_the_failed_seal_before_the_rule_it_broke() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let mut edited = bodies(&log);
    edited[3] = edited[3].replace("\"t1\"", "\"t9\"");
    write_bodies(&log, "s", &edited);
    let pending = dir.path().join("pending.json");
    ok(std::fs::write(
        &pending,
        r#"{"callId":"c1","stepId":"x","name":"x","arguments":{}}"#,
    ));
    let refused_with_the_seal = || {
        let refused = run([
            "review-request",
            path_str(&store),
            "--session",
            "s",
            "--pending",
            path_str(&pending),
        ]);
        refused.expect_code(7);
        assert!(
            refused.stdout.contains("INVALID_LOG")
                && refused.stdout.contains("seq 4 (seal): seal failure"),
            "{}",
            refused.stdout
        );
    };
    refused_with_the_seal();

    // The header's sandbox taken out of the vocabulary too (which the
    // chain covers): the seal still ranks first, as `verify` ranks it.
    edited[0] = edited[0].replace("\"sandboxMode\":null", "\"sandboxMode\":\"bogus\"");
    assert!(edited[0].contains("bogus"), "{}", edited[0]);
    write_bodies(&log, "s", &edited);
    run(["verify", path_str(&store)]).expect_code(7);
    refused_with_the_seal();
    // And so do the commands that open a writer on it.
    for record in [&[][..], &["--record"]] {
        let mut review = crate::cli_support::sessionlog(["review"]);
        review
            .arg(&store)
            .args(["--session", "s", "--pending"])
            .arg(&pending)
            .args(["--endpoint", "http://127.0.0.1:9/v1"])
            .args(record);
        crate::cli_support::run_command(review, None).expect_code(7);
    }
    crate::cli_support::run_with_stdin(
        ["append", path_str(&store), "--session", "s"],
        "{\"type\":\"x-test/note\",\"data\":{}}\n",
    )
    .expect_code(7);
}

/// The same in a database: a row edited under a seal and the header's
/// sandbox taken out of the vocabulary, both with their CRCs recomputed. The
/// seal ranks first for the commands that open a writer and for a fork,
/// which folds the parent, as `verify` ranks it.
#[test]
fn in_a_database_the_failed_seal_ranks_above_the_header_out_of_vocabulary() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let database = dir.path().join("copy.db");
    run(["migrate", path_str(&store), path_str(&database)]).expect_code(0);
    edit_row_message(&database, "s", 2, "do t1", "do t9");
    let connection = ok(rusqlite::Connection::open(&database));
    let header: String = ok(connection.query_row(
        "SELECT header_body FROM sessions WHERE id = 's'",
        [],
        |row| row.get(0),
    ));
    let bogus = header.replace("\"sandboxMode\":null", "\"sandboxMode\":\"bogus\"");
    assert_ne!(
        bogus, header,
        "the header has no sandbox to change: {header}"
    );
    let crc = crate::support::spec_crc("s", bogus.as_bytes());
    ok(connection.execute(
        "UPDATE sessions SET header_body = ?1, header_crc = ?2, sandbox_mode = 'bogus' WHERE id = 's'",
        rusqlite::params![bogus, i64::from(crc)],
    ));
    drop(connection);
    let verdict = verify(&database, &[]);
    verdict.expect_code(7);
    let appended = run_with_stdin(
        ["append", path_str(&database), "--session", "s"],
        "{\"type\":\"x-test/note\",\"data\":{}}\n",
    );
    appended.expect_code(7);
    assert!(appended.stderr.contains("seal"), "{}", appended.stderr);
    let forked = run([
        "fork",
        path_str(&database),
        "--session",
        "s",
        "--child",
        "c",
    ]);
    forked.expect_code(7);
    assert!(forked.stderr.contains("seal"), "{}", forked.stderr);
}

/// `migrate` of a source whose sessions are refused for different reasons
/// reports the highest ranked, as `verify` does, whatever the order of the
/// ids: a broken rule in the first session, a failed seal after it (7),
/// then corruption in the last (2). Nothing is written either way.
#[test]
fn migrate_reports_the_sources_highest_ranked_refusal_whatever_the_order() {
    let dir = ok(tempfile::tempdir());
    let (store, _) = signed_store(dir.path());
    let log = log_path(&store);
    let edited: Vec<String> = bodies(&log)
        .iter()
        .map(|body| body.replace("\"do t1\"", "\"do t9\""))
        .collect();
    write_bodies(&log, "s", &edited);
    let header = |session: &str| {
        SessionHeader::root(id(session), 1_700_000_000_000, "/w".to_owned()).to_body()
    };
    let rule = [
        header("a-rule"),
        r#"{"seq":1,"ts":1,"type":"turn/end","data":{"turnId":"t1"}"#.to_owned(),
    ];
    write_bodies(&store.join("a-rule.jsonl"), "a-rule", &rule);
    let migrated = |name: &str| {
        let destination = dir.path().join(name);
        let refused = run(["migrate", path_str(&store), path_str(&destination)]);
        let listed = run(["list", path_str(&destination)]);
        assert!(
            listed.stdout.trim().is_empty(),
            "nothing written: {}",
            listed.stdout
        );
        refused
    };
    let sealed = migrated("first.db");
    sealed.expect_code(7);
    assert!(sealed.stderr.contains("seal"), "{}", sealed.stderr);
    let corrupt = [
        header("z-corrupt"),
        r#"{"seq":1,"ts":1,"type":"x-test/a","data":{}"#.to_owned(),
        r#"{"seq":2,"ts":2,"type":"x-test/b","data":{}"#.to_owned(),
    ];
    let mut text: String = corrupt.iter().map(|body| sign("z-corrupt", body)).collect();
    text = text.replacen("x-test/a", "x-test/c", 1);
    ok(std::fs::write(store.join("z-corrupt.jsonl"), text));
    run(["verify", path_str(&store)]).expect_code(2);
    let damaged = migrated("second.db");
    damaged.expect_code(2);
    assert!(damaged.stderr.contains("z-corrupt"), "{}", damaged.stderr);
}

/// `salvage` keeps a header whose members stand in another order byte for
/// byte, so the hash chain, and every seal in the good prefix, still holds
/// in the copy (it once re-encoded the header and called the seal failed).
#[test]
fn salvage_keeps_a_header_in_another_order_and_the_seal_after_it() {
    let dir = ok(tempfile::tempdir());
    let mut bodies = vec![
        r#"{"id":"r1","kind":"header","formatVersion":1,"createdAt":1700000000000,"cwd":"/work","parentSession":null,"seedLength":0,"delegationDepth":0,"sandboxMode":null,"approvalPolicy":null"#.to_owned(),
        r#"{"seq":1,"ts":1,"type":"turn/start","data":{"turnId":"t1"}"#.to_owned(),
        r#"{"seq":2,"ts":2,"type":"turn/end","data":{"turnId":"t1"}"#.to_owned(),
    ];
    let through = chain(&bodies);
    bodies.push(format!(
        r#"{{"seq":3,"ts":3,"type":"seal","data":{{"throughSeq":2,"chain":"sha256:{}"}}"#,
        hex(&through[2])
    ));
    bodies.push(r#"{"seq":4,"ts":4,"type":"turn/start","data":{"turnId":"t2"}"#.to_owned());
    let log = dir.path().join("r1.jsonl");
    write_bodies(&log, "r1", &bodies);
    let mut text = ok(std::fs::read_to_string(&log));
    text.push_str(r#"{"seq":5,"ts"#);
    ok(std::fs::write(&log, &text));
    verify(&log, &[]).expect_code(3);
    let out = dir.path().join("out.jsonl");
    run(["salvage", path_str(&log), path_str(&out)]).expect_code(0);
    verify(&out, &[]).expect_code(0);
    assert_eq!(
        super::seals::bodies(&out),
        bodies,
        "every record kept as it was"
    );
}

/// `salvage` of a log whose seal fails keeps only what a seal that holds
/// proves: a record under the failed seal changed, and salvage cannot tell
/// which, so the copy ends at the last own seal that held (or keeps no own
/// event), the cause named `seal-failure`; never a copy that verifies
/// clean while holding the changed record.
#[test]
fn salvage_of_a_log_whose_seal_fails_keeps_what_a_seal_that_holds_proves() {
    let dir = ok(tempfile::tempdir());
    let header = r#"{"kind":"header","formatVersion":1,"id":"r2","createdAt":1700000000000,"cwd":"/work","parentSession":null,"seedLength":0,"delegationDepth":0,"sandboxMode":null,"approvalPolicy":null"#;
    let mut bodies = vec![
        header.to_owned(),
        r#"{"seq":1,"ts":1,"type":"x-test/note","data":{"n":1}"#.to_owned(),
        r#"{"seq":2,"ts":2,"type":"x-test/note","data":{"n":2}"#.to_owned(),
    ];
    let seal = |bodies: &[String], seq: u64| {
        let through = chain(bodies);
        format!(
            r#"{{"seq":{seq},"ts":{seq},"type":"seal","data":{{"throughSeq":{},"chain":"sha256:{}"}}"#,
            seq - 1,
            hex(&through[bodies.len() - 1])
        )
    };
    let first_seal = seal(&bodies, 3);
    bodies.push(first_seal);
    bodies.push(r#"{"seq":4,"ts":4,"type":"x-test/note","data":{"n":4}"#.to_owned());
    bodies.push(r#"{"seq":5,"ts":5,"type":"x-test/note","data":{"n":5}"#.to_owned());
    let second_seal = seal(&bodies, 6);
    bodies.push(second_seal);
    // The record at seq 4 edited after the second seal, its CRC recomputed.
    let mut edited = bodies.clone();
    edited[4] = r#"{"seq":4,"ts":4,"type":"x-test/note","data":{"n":40}"#.to_owned();
    // The session's log written, its seal failing, and salvaged: the
    // report and the copy.
    let salvage = |session: &str, bodies: &[String]| {
        let log = dir.path().join(format!("{session}.jsonl"));
        write_bodies(&log, session, bodies);
        verify(&log, &[]).expect_code(7);
        let out = dir.path().join(format!("{session}-out.jsonl"));
        let salvaged = run(["salvage", path_str(&log), path_str(&out), "--json"]);
        salvaged.expect_code(0);
        let report: serde_json::Value = ok(serde_json::from_str(salvaged.stdout.trim()));
        assert_eq!(report["leftBehind"]["cause"], "seal-failure", "{report}");
        (report, out)
    };
    let (report, out) = salvage("r2", &edited);
    assert_eq!(report["lastSeq"], 3, "{report}");
    assert_eq!(report["leftBehind"]["line"], 5, "{report}");
    verify(&out, &[]).expect_code(0);
    assert_eq!(
        super::seals::bodies(&out),
        bodies[..4],
        "through the seal that holds"
    );

    // No own seal before the failed one: no own event is kept.
    let mut unsealed = vec![
        header.replace(r#""r2""#, r#""r3""#),
        bodies[1].clone(),
        bodies[2].clone(),
    ];
    let only_seal = seal(&unsealed, 3);
    unsealed.push(only_seal);
    unsealed[1] = r#"{"seq":1,"ts":1,"type":"x-test/note","data":{"n":10}"#.to_owned();
    let (report, _) = salvage("r3", &unsealed);
    assert_eq!(report["events"], 0, "{report}");
}

/// `head` of a folder that holds no session is refused: an empty anchor
/// file would make `verify --anchor` pass any store.
#[test]
fn head_of_an_empty_store_gives_no_anchor() {
    let dir = ok(tempfile::tempdir());
    let head = run(["head", path_str(dir.path())]);
    head.expect_code(1);
    assert!(head.stdout.is_empty(), "{}", head.stdout);
    assert!(head.stderr.contains("no sessions found"), "{}", head.stderr);
}

/// An anchor file that names no session (empty, or blank lines only, as a
/// file cut short or filtered to nothing) is refused: it would let any
/// store pass `verify --anchor`.
#[test]
fn an_anchor_file_that_names_no_session_is_refused() {
    let dir = ok(tempfile::tempdir());
    let store = unsigned_store(dir.path());
    for (name, text) in [("empty.anchor", ""), ("blank.anchor", "\n\n")] {
        let anchor = dir.path().join(name);
        ok(std::fs::write(&anchor, text));
        let run = verify(&store, &["--anchor", path_str(&anchor)]);
        run.expect_code(1);
        assert!(
            run.stderr.contains(name) && run.stderr.contains("names no session"),
            "{}",
            run.stderr
        );
    }
}

/// With `--session`, only that session's anchors are checked: an anchor
/// file with none of its is refused (it would check nothing), and an
/// anchored session gone from the store fails its anchors (7), as in a
/// read of the whole store.
#[test]
fn session_picked_with_no_anchor_is_refused_and_one_gone_fails_its_anchor() {
    let dir = ok(tempfile::tempdir());
    let store = unsigned_store(dir.path());
    run([
        "create",
        path_str(&store),
        "--session",
        "other",
        "--cwd",
        "/w",
    ])
    .expect_code(0);
    let head = run(["head", path_str(&store), "--session", "other"]);
    head.expect_code(0);
    let anchor = dir.path().join("other.anchor");
    ok(std::fs::write(&anchor, &head.stdout));
    let refused = verify(&store, &["--session", "s", "--anchor", path_str(&anchor)]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("other.anchor")
            && refused.stderr.contains("no anchor of session s"),
        "{}",
        refused.stderr
    );
    verify(
        &store,
        &["--session", "other", "--anchor", path_str(&anchor)],
    )
    .expect_code(0);
    ok(std::fs::remove_file(store.join("other.jsonl")));
    let gone = verify(
        &store,
        &["--session", "other", "--anchor", path_str(&anchor)],
    );
    gone.expect_code(7);
    assert!(
        gone.stdout
            .contains("session other, named in the anchor file")
            && gone.stdout.contains("is missing"),
        "{}",
        gone.stdout
    );
    // A symlink in its place is no session, as a read of the whole store
    // passes it over.
    ok(std::os::unix::fs::symlink(
        "/nonexistent",
        store.join("other.jsonl"),
    ));
    verify(
        &store,
        &["--session", "other", "--anchor", path_str(&anchor)],
    )
    .expect_code(7);
}

/// The key files' modes are FORMAT.md's whatever the umask: the secret
/// 0600, the public key 0644.
#[test]
fn keygen_gives_its_files_their_modes_under_any_umask() {
    let dir = ok(tempfile::tempdir());
    for (umask, name) in [("077", "strict.key"), ("000", "open.key")] {
        let key = dir.path().join(name);
        let mut command = std::process::Command::new("sh");
        command.args([
            "-c",
            &format!("umask {umask} && exec \"$0\" keygen \"$1\""),
            path_str(crate::cli_support::sessionlog_binary()),
            path_str(&key),
        ]);
        crate::cli_support::run_command(command, None).expect_code(0);
        let public = PathBuf::from(format!("{}.pub", path_str(&key)));
        for (file, expected) in [(&key, 0o600), (&public, 0o644)] {
            let mode =
                std::os::unix::fs::PermissionsExt::mode(&ok(std::fs::metadata(file)).permissions());
            assert_eq!(
                mode & 0o777,
                expected,
                "{} under umask {umask}",
                file.display()
            );
        }
    }
}

/// An anchor file holds a line for each session of a store (or more): one
/// longer than the 16 MiB a pending action may hold is read whole.
#[test]
fn an_anchor_file_longer_than_16_mib_is_read() {
    let dir = ok(tempfile::tempdir());
    let store = unsigned_store(dir.path());
    let head = anchors_of(&store);
    let line = head.lines().next().unwrap_or_default().to_owned();
    assert!(!line.is_empty(), "head printed an anchor");
    let copies = (17 << 20) / (line.len() + 1) + 1;
    let anchors = dir.path().join("anchors.jsonl");
    ok(std::fs::write(&anchors, format!("{line}\n").repeat(copies)));
    assert!(ok(std::fs::metadata(&anchors)).len() > 16 << 20);
    verify(&store, &["--anchor", path_str(&anchors)]).expect_code(0);
}

/// A lone log is a store of one session: `--session` naming another that
/// the anchor file names is a session gone from the store (7), as in a
/// folder.
#[test]
fn a_lone_log_asked_for_an_anchored_session_it_does_not_hold_fails_the_anchor() {
    let dir = ok(tempfile::tempdir());
    let store = unsigned_store(dir.path());
    let log = log_path(&store);
    let anchors = dir.path().join("anchors.jsonl");
    let head = anchors_of(&store);
    let other = head.replacen(r#""session":"s""#, r#""session":"zz""#, 1);
    assert_ne!(other, head);
    ok(std::fs::write(&anchors, format!("{head}{other}")));
    for target in [store.as_path(), log.as_path()] {
        let picked = run([
            "verify",
            path_str(target),
            "--session",
            "zz",
            "--anchor",
            path_str(&anchors),
        ]);
        picked.expect_code(7);
        assert!(picked.stdout.contains("zz"), "{}", picked.stdout);
    }
}

/// A secret key file others may read is used, with a warning that names
/// its mode; one of mode 0600, as keygen makes it, draws none.
#[test]
fn a_secret_key_others_may_read_is_warned_of() {
    let dir = ok(tempfile::tempdir());
    let (store, key) = signed_store(dir.path());
    let seal_with = |key: &Path| {
        run([
            "seal",
            path_str(&store),
            "--session",
            "s",
            "--key",
            path_str(key),
        ])
    };
    let seal = || seal_with(&key);
    let private = seal();
    private.expect_code(0);
    assert!(
        !private.stderr.contains("others may read"),
        "{}",
        private.stderr
    );
    ok(std::fs::set_permissions(
        &key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    ));
    let shared = seal();
    shared.expect_code(0);
    assert!(
        shared.stderr.contains("others may read (mode 0644)"),
        "{}",
        shared.stderr
    );
    // The public key given by mistake (0644, as keygen makes it) is
    // refused as no secret key, not called a secret others may read.
    let public = dir.path().join("public");
    let mut text = ok(std::fs::read_to_string(format!("{}.pub", key.display())));
    ok(std::fs::write(&public, &text));
    let refused = seal_with(&public);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("is this a public key"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("others may read"),
        "{}",
        refused.stderr
    );
    // A line after the key is named as the line it is.
    text = ok(std::fs::read_to_string(&key));
    let extra = dir.path().join("extra");
    ok(std::fs::write(
        &extra,
        format!("{text}# the runtime's key\n"),
    ));
    let refused = seal_with(&extra);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("line 2: more text after the key"),
        "{}",
        refused.stderr
    );
}

/// A FIFO named as the secret key is refused as what it is, at once: the
/// key was opened blocking, so `seal` and `append --seal-key` waited for a
/// writer for ever. So is a file far longer than a key.
#[test]
fn a_key_that_is_a_fifo_or_far_too_long_is_refused_at_once() {
    let dir = ok(tempfile::tempdir());
    let (store, _key) = signed_store(dir.path());
    let fifo = dir.path().join("key.fifo");
    crate::cli_support::make_fifo(&fifo);
    let long = dir.path().join("long.key");
    ok(std::fs::write(&long, "x".repeat(1 << 20)));
    for (key, expected) in [
        (&fifo, "a FIFO, not a secret key file"),
        (&long, "too long"),
    ] {
        let args = [
            "seal",
            path_str(&store),
            "--session",
            "s",
            "--key",
            path_str(key),
        ];
        let Some((code, stderr)) =
            crate::cli_support::run_within(&args, std::time::Duration::from_secs(30))
        else {
            panic!("seal with the key {} never returned", key.display());
        };
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}

/// A temporary folder holding a seal key, `runtime.key`.
fn folder_with_a_key() -> (tempfile::TempDir, PathBuf) {
    let dir = ok(tempfile::tempdir());
    let key = dir.path().join("runtime.key");
    run(["keygen", path_str(&key)]).expect_code(0);
    (dir, key)
}

/// `turns` turns of session `s` appended to `store` (a folder or a `.db`)
/// by one `append`, whose writer keeps a state snapshot when it closes.
fn long_unsealed_session(store: &Path, turns: usize) {
    run(["create", path_str(store), "--session", "s", "--cwd", "/w"]).expect_code(0);
    let input: String = (1..=turns).map(|n| turn(&format!("t{n}"))).collect();
    run_with_stdin(["append", path_str(store), "--session", "s"], &input).expect_code(0);
}

/// A seal and a turn sealed with `key` on session `s` of `store`, each of
/// which must be refused as a seal failure with no seal written (`held`
/// gives how many records the session holds, and how many are seals): the
/// writer resumes from a state snapshot that was not folded from the log.
fn assert_no_seal_over_a_forged_snapshot(
    store: &Path,
    copy: &Path,
    key: &Path,
    held: impl Fn() -> (u64, u64),
) {
    let (records, seals) = held();
    // A seal handed in that carries the copy's chain, which the snapshot
    // gives: checked against the log's own chain, not the snapshot's.
    let head: serde_json::Value = ok(serde_json::from_str(
        run(["head", path_str(copy)]).stdout.trim(),
    ));
    let handed = format!(
        r#"{{"type":"seal","data":{{"throughSeq":{},"chain":{}}}}}"#,
        head["seq"], head["chain"]
    );
    let appended = run_with_stdin(
        ["append", path_str(store), "--session", "s"],
        &(handed + "\n"),
    );
    appended.expect_code(7);
    assert!(
        appended.stderr.contains("state snapshot"),
        "{}",
        appended.stderr
    );
    assert_eq!(held(), (records, seals), "nothing was written");
    let sealed = seal_with_key(store, key);
    sealed.expect_code(7);
    assert!(
        sealed.stderr.contains("state snapshot") && sealed.stderr.contains("no seal was written"),
        "{}",
        sealed.stderr
    );
    assert_eq!(held(), (records, seals), "nothing was written");
    // The turn's first two events are written; its end, which the seal
    // goes out with, is refused.
    let turn_sealed = sealed_append(store, key, &turn("tz"));
    turn_sealed.expect_code(7);
    assert_eq!(held(), (records + 2, seals), "no turn/end, no seal");
}

/// A state snapshot folded from a changed copy of a log, put beside the
/// log, must not get the key's holder to sign the copy's chain: `seal`
/// (and a turn sealed by `append --seal-key`) checks the chain a resumed
/// writer carries against the log's own bodies first, refuses the seal
/// when they differ, and seals once the snapshot is gone. Without the
/// check, the seal written holds on the changed copy, trusted.
#[test]
fn a_snapshot_folded_from_a_changed_copy_gets_no_seal_signed() {
    let (dir, key) = folder_with_a_key();
    let store = dir.path().join("store");
    long_unsealed_session(&store, 400);
    let sidecar = store.join(".s.jsonl.state");
    assert!(sidecar.exists(), "the writer kept a snapshot");
    let copy = forge_a_snapshot_from_a_changed_copy(dir.path(), &store, "do t200", "do X200");
    let log = log_path(&store);
    assert_no_seal_over_a_forged_snapshot(&store, &copy, &key, || records_and_seals(&log));
    // The log itself is whole: it seals once the snapshot is gone, and a
    // writer resuming from the snapshot kept then seals a turn.
    ok(std::fs::remove_file(&sidecar));
    seal_with_key(&store, &key).expect_code(0);
    assert!(sidecar.exists(), "the writer kept a snapshot of its own");
    sealed_turn_after_tz(&store, &key).expect_code(0);
    let trust = format!("{}.pub", path_str(&key));
    verify(&store, &["--trust", &trust, "--require-sealed"]).expect_code(0);
}

/// A preset switch reads which events it needs off the writer's state: a
/// state snapshot folded from a copy whose sandbox was changed (to the
/// preset's own) must not have the switch leave the log's sandbox as it
/// was. The resumed writer proves its chain first and refuses (exit 7,
/// nothing written); without the snapshot, the switch writes the sandbox
/// event the log needs.
#[test]
fn a_snapshot_folded_from_a_changed_copy_switches_no_preset() {
    let dir = ok(tempfile::tempdir());
    let store = dir.path().join("store");
    // Long enough for its writers to keep a state snapshot.
    long_unsealed_session(&store, 400);
    let loose = concat!(
        r#"{"type":"sandbox/mode","data":{"mode":"danger-full-access"}}"#,
        "\n",
        r#"{"type":"approval/policy","data":{"policy":"ask"}}"#,
        "\n"
    );
    run_with_stdin(["append", path_str(&store), "--session", "s"], loose).expect_code(0);
    // The copy's sandbox is read-only, in as many bytes.
    let copy = forge_a_snapshot_from_a_changed_copy(
        dir.path(),
        &store,
        "danger-full-access",
        r#"read-only","p":"12"#,
    );
    let project = |store: &Path| run(["project", path_str(store), "--session", "s"]);
    assert!(
        project(&copy).stdout.contains("read-only"),
        "the copy is read-only"
    );
    let log = log_path(&store);
    let before = records_and_seals(&log);
    let refused = run(["preset", path_str(&store), "--session", "s", "read-only"]);
    refused.expect_code(7);
    assert!(
        refused.stderr.contains("state snapshot")
            && refused.stderr.contains("the preset was not switched"),
        "{}",
        refused.stderr
    );
    assert_eq!(records_and_seals(&log), before, "nothing was written");
    ok(std::fs::remove_file(store.join(".s.jsonl.state")));
    run(["preset", path_str(&store), "--session", "s", "read-only"]).expect_code(0);
    let projected = project(&store);
    assert!(
        projected.stdout.contains("read-only") && !projected.stdout.contains("danger-full-access"),
        "{}",
        projected.stdout
    );
}

/// The same attack on a SQLite store: the copy's rows changed, its
/// snapshot rows and last event row put into the database.
#[test]
fn a_snapshot_folded_from_a_changed_copy_of_a_database_gets_no_seal_signed() {
    let (dir, key) = folder_with_a_key();
    let database = dir.path().join("store.db");
    long_unsealed_session(&database, 400);
    let copy = dir.path().join("copy.db");
    {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute("VACUUM INTO ?1", [path_str(&copy)]));
    }
    edit_row_message(&copy, "s", 599, "do t200", "do X200, and more");
    {
        let connection = ok(rusqlite::Connection::open(&copy));
        ok(connection.execute_batch(
            "DELETE FROM snapshot_pages WHERE session_id = 's';
             DELETE FROM snapshots WHERE session_id = 's';",
        ));
    }
    let note = r#"{"type":"x-note","data":{}}"#.to_owned() + "\n";
    run_with_stdin(["append", path_str(&copy), "--session", "s"], &note).expect_code(0);
    {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute("ATTACH DATABASE ?1 AS copy", [path_str(&copy)]));
        ok(connection.execute_batch(
            "INSERT INTO events SELECT * FROM copy.events
                 WHERE session_id = 's' AND seq = (SELECT last_seq FROM copy.sessions WHERE id = 's');
             UPDATE sessions SET last_seq = (SELECT last_seq FROM copy.sessions WHERE id = 's')
                 WHERE id = 's';
             DELETE FROM snapshot_pages WHERE session_id = 's';
             DELETE FROM snapshots WHERE session_id = 's';
             INSERT INTO snapshots SELECT * FROM copy.snapshots WHERE session_id = 's';
             INSERT INTO snapshot_pages SELECT * FROM copy.snapshot_pages WHERE session_id = 's';",
        ));
    }
    let held = || {
        let connection = ok(rusqlite::Connection::open(&database));
        let count =
            |sql: &str| ok(connection.query_row(sql, [], |row| row.get::<_, i64>(0))) as u64;
        (
            count("SELECT count(*) FROM events"),
            count("SELECT count(*) FROM events WHERE type = 'seal'"),
        )
    };
    assert_no_seal_over_a_forged_snapshot(&database, &copy, &key, held);
    {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch(
            "DELETE FROM snapshot_pages WHERE session_id = 's';
             DELETE FROM snapshots WHERE session_id = 's';",
        ));
    }
    seal_with_key(&database, &key).expect_code(0);
    // A writer resuming from the snapshot that one kept checks it and
    // seals a turn.
    sealed_turn_after_tz(&database, &key).expect_code(0);
    let trust = format!("{}.pub", path_str(&key));
    verify(&database, &["--trust", &trust, "--require-sealed"]).expect_code(0);
}

/// `append --seal-key` on session `s` of `store`: the end of the turn
/// `tz` a refused seal left open, then a whole turn.
pub fn sealed_turn_after_tz(store: &Path, key: &Path) -> Run {
    let input = r#"{"type":"turn/end","data":{"turnId":"tz"}}"#.to_owned() + "\n" + &turn("ty");
    sealed_append(store, key, &input)
}

/// `seal --key key` on session `s` of `store`.
fn seal_with_key(store: &Path, key: &Path) -> Run {
    run([
        "seal",
        path_str(store),
        "--session",
        "s",
        "--key",
        path_str(key),
    ])
}

/// `append --seal-key key` of `input` on session `s` of `store`.
fn sealed_append(store: &Path, key: &Path, input: &str) -> Run {
    let args = [
        "append",
        path_str(store),
        "--session",
        "s",
        "--seal-key",
        path_str(key),
    ];
    run_with_stdin(args, input)
}

/// Replaces `from` with `to` in the one body of session `session`'s log
/// that holds it, its CRC recomputed.
fn edit_message_of(log: &Path, session: &str, from: &str, to: &str) {
    let mut edited = bodies(log);
    let holding: Vec<usize> = (0..edited.len())
        .filter(|&index| edited[index].contains(&format!("\"{from}\"")))
        .collect();
    assert_eq!(holding.len(), 1, "one body holds {from:?}");
    edited[holding[0]] = edited[holding[0]].replace(from, to);
    write_bodies(log, session, &edited);
}

/// A seal handed to `append` with a chain the log does not give is
/// refused (exit 7, nothing written) as a seal that does not hold, not as
/// a log that was changed: the log is as it was.
#[test]
fn an_appended_seal_that_does_not_hold_is_refused_as_such() {
    let dir = ok(tempfile::tempdir());
    let store = dir.path().join("store");
    run(["create", path_str(&store), "--session", "s"]).expect_code(0);
    let zeros = "0".repeat(64);
    let seal = format!(r#"{{"type":"seal","data":{{"throughSeq":0,"chain":"sha256:{zeros}"}}}}"#);
    let refused = run_with_stdin(
        ["append", path_str(&store), "--session", "s"],
        &(seal + "\n"),
    );
    refused.expect_code(7);
    assert!(
        refused.stderr.contains("the seal appended does not hold")
            && !refused.stderr.contains("the log was changed"),
        "{}",
        refused.stderr
    );
    assert_eq!(bodies(&log_path(&store)).len(), 1, "the header alone");
}

/// A record changed under a signed seal, and the seal's `sig` removed
/// (its shape broken: `key` without `sig`): the seal's chain is still
/// checked, so `verify` finds the change (exit 7), not only the shape
/// (4), and `salvage` keeps only what the seal before it proves. The same
/// seal over records that were not changed is a broken shape (4).
#[test]
fn a_change_under_a_seal_whose_shape_is_broken_is_still_a_seal_failure() {
    let dir = ok(tempfile::tempdir());
    let (store, _key) = signed_store(dir.path());
    let log = log_path(&store);
    let without_sig = |body: &str| {
        let at = body.find(r#","sig":""#).unwrap_or(body.len());
        let end = body[at + 8..]
            .find('"')
            .map_or(body.len(), |end| at + 8 + end + 1);
        format!("{}{}", &body[..at], &body[end..])
    };
    // Lines: the header, then t1 (1-3), its seal (4), t2 (5-7), its seal
    // (8); the third turn and its seal are cut off, as the seal at seq 12
    // covers the one at seq 8 and would fail with it.
    let mut unchanged = bodies(&log)[..9].to_vec();
    unchanged[8] = without_sig(&unchanged[8]);
    write_bodies(&log, "s", &unchanged);
    let shape = verify(&store, &[]);
    shape.expect_code(4);
    assert!(shape.stdout.contains("key without sig"), "{}", shape.stdout);
    let mut changed = unchanged.clone();
    changed[6] = changed[6].replace("do t2", "do X2");
    write_bodies(&log, "s", &changed);
    let failed = verify(&store, &[]);
    failed.expect_code(7);
    assert!(
        failed
            .stdout
            .contains("seq 8 (seal): seal failure: the log was changed at or before seq 7")
            && failed.stdout.contains("its shape is broken"),
        "{}",
        failed.stdout
    );
    let out = dir.path().join("out.jsonl");
    run(["salvage", path_str(&log), path_str(&out)]).expect_code(0);
    let kept = bodies(&out);
    assert_eq!(
        kept.len(),
        5,
        "the header and what the seal at seq 4 proves"
    );
    assert!(kept.iter().all(|body| !body.contains("do X2")));
}

/// Session `s` of `store` (a folder or a `.db`): 400 turns, a seal signed
/// by `key` (seq 1201), then 50 turns more, each by a writer resumed from
/// the state snapshot the one before it kept.
fn session_sealed_then_grown(store: &Path, key: &Path) {
    long_unsealed_session(store, 400);
    seal_with_key(store, key).expect_code(0);
    let input: String = (401..=450).map(|n| turn(&format!("t{n}"))).collect();
    run_with_stdin(["append", path_str(store), "--session", "s"], &input).expect_code(0);
}

/// The seqs `verify --trust` finds failing seals at.
fn failing_seals(store: &Path, trust: &str) -> Vec<u64> {
    let verified = verify(store, &["--trust", trust, "--json"]);
    verified.expect_code(7);
    let report: serde_json::Value = ok(serde_json::from_str(
        verified.stdout.lines().next().unwrap_or_default(),
    ));
    report["sealFailures"]
        .as_array()
        .map(|failures| {
            failures
                .iter()
                .filter_map(|failure| failure["seq"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// A resumed writer about to sign proves its chain from its last seal
/// signed by the same key, read from the log and its signature checked,
/// rather than from the header: a log it seals every turn is read from
/// the last turn's seal. A change before that seal is then `verify`'s to
/// find (damage before a snapshot's anchor is), and the seal written does
/// not vouch for it: it fails on the changed log, as the seal before it
/// does. A writer signing with another key reads the log whole, and so
/// refuses to seal over the change. A snapshot folded from a copy changed
/// after the seal gets no seal signed either way.
#[test]
fn a_resumed_writer_proves_its_chain_from_its_last_seal_signed_by_its_key() {
    for database in [false, true] {
        let (dir, key) = folder_with_a_key();
        let other = dir.path().join("other.key");
        run(["keygen", path_str(&other)]).expect_code(0);
        let store = match database {
            false => dir.path().join("store"),
            true => dir.path().join("store.db"),
        };
        session_sealed_then_grown(&store, &key);
        match database {
            false => edit_message_of(&log_path(&store), "s", "do t200", "do X200"),
            true => edit_row_message(&store, "s", 599, "do t200", "do X200"),
        }
        let refused = seal_with_key(&store, &other);
        refused.expect_code(7);
        assert!(
            refused.stderr.contains("no seal was written"),
            "{}",
            refused.stderr
        );
        seal_with_key(&store, &key).expect_code(0);
        // A turn sealed by its own writer, from the seal just written: its
        // first events are staged, unsynced, when its end brings the seal.
        sealed_append(&store, &key, &turn("t451")).expect_code(0);
        let trust = format!("{}.pub", path_str(&key));
        assert_eq!(
            failing_seals(&store, &trust),
            [1201, 1352, 1356],
            "{database}"
        );
    }

    let (dir, key) = folder_with_a_key();
    let store = dir.path().join("store");
    session_sealed_then_grown(&store, &key);
    let copy = forge_a_snapshot_from_a_changed_copy(dir.path(), &store, "do t420", "do X420");
    let log = log_path(&store);
    assert_no_seal_over_a_forged_snapshot(&store, &copy, &key, || records_and_seals(&log));
}

/// What someone with write access to the folder `store`, but not the key,
/// can forge: a copy of session `s` (in `dir`) with a message changed from
/// `from` to `to` (its length kept, so that the two logs' last records
/// stand at the same offset), one more event appended to the copy by a
/// writer that folds it whole and keeps its snapshot, then that event's
/// line and the copy's snapshot put into `store`. Returns the copy.
fn forge_a_snapshot_from_a_changed_copy(dir: &Path, store: &Path, from: &str, to: &str) -> PathBuf {
    let log = log_path(store);
    let copy = dir.join("copy");
    ok(std::fs::create_dir(&copy));
    let copied = log_path(&copy);
    ok(std::fs::copy(&log, &copied));
    edit_message_of(&copied, "s", from, to);
    let note = r#"{"type":"x-note","data":{}}"#.to_owned() + "\n";
    run_with_stdin(["append", path_str(&copy), "--session", "s"], &note).expect_code(0);
    let last_line = ok(std::fs::read_to_string(&copied))
        .lines()
        .last()
        .map(|line| line.to_owned() + "\n")
        .unwrap_or_default();
    let mut text = ok(std::fs::read_to_string(&log));
    text.push_str(&last_line);
    ok(std::fs::write(&log, text));
    ok(std::fs::copy(
        copy.join(".s.jsonl.state"),
        store.join(".s.jsonl.state"),
    ));
    copy
}

/// How many records the log at `log` holds, and how many are seals.
fn records_and_seals(log: &Path) -> (u64, u64) {
    let text = ok(std::fs::read_to_string(log));
    let seals = text
        .lines()
        .filter(|line| line.contains(r#""type":"seal""#));
    (text.lines().count() as u64, seals.count() as u64)
}
