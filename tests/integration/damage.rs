//! Damage and recovery (docs/FORMAT.md): truncation at every byte offset, bit flips
//! anywhere, and every class of corruption and torn tail, one row each.
//!
//! Expectations are computed from the independent writer's layout (where
//! each line and batch ends), never from the scanner itself.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sessionlog_schema::{MAX_BATCH_RECORDS, MAX_RECORD_BYTES};

use crate::realistic::realistic_log;
use crate::support::{assert_same_events, line_offset, scan, sign, LogBuilder, SpecLog};

/// What a scan must report.
#[derive(Debug, Clone, Copy)]
enum Expect<'a> {
    /// A good log whose last seq is `last_seq`.
    Clean { last_seq: u64 },
    /// A good prefix ending at seq `last_seq`, then a torn tail from `line`
    /// that drops `dropped` well-formed records of an unfinished batch.
    Torn {
        line: u64,
        last_seq: u64,
        dropped: u64,
        reason: &'a str,
    },
    /// Corruption at `line`, its reason containing `reason`.
    Corrupt { line: u64, reason: &'a str },
}

/// Scans `log` as the file of session `expected_id` and checks the outcome,
/// offsets included.
fn check(log: &[u8], expected_id: Option<&str>, expect: Expect<'_>) {
    let scanned = scan(log, expected_id);
    match (expect, scanned.outcome) {
        (Expect::Clean { last_seq }, Ok(summary)) => {
            assert_eq!(summary.torn_tail, None, "expected a clean log");
            assert_eq!(summary.last_seq, last_seq);
            assert_eq!(summary.good_bytes, log.len() as u64);
            assert_eq!(scanned.records.len() as u64, last_seq);
        }
        (
            Expect::Torn {
                line,
                last_seq,
                dropped,
                reason,
            },
            Ok(summary),
        ) => {
            let tail = summary.torn_tail.expect("expected a torn tail");
            let offset = line_offset(log, line);
            assert_eq!(tail.position.line, line, "{tail:?}");
            assert_eq!(tail.position.offset, offset, "{tail:?}");
            assert_eq!(tail.bytes, log.len() as u64 - offset, "{tail:?}");
            assert_eq!(tail.dropped_records, dropped, "{tail:?}");
            assert!(tail.reason.contains(reason), "{tail:?}");
            assert_eq!(summary.last_seq, last_seq);
            assert_eq!(summary.good_bytes, offset);
            assert_eq!(summary.good_lines, line - 1);
            assert_eq!(scanned.records.len() as u64, last_seq);
        }
        (Expect::Corrupt { line, reason }, Err(corruption)) => {
            assert_eq!(corruption.position.line, line, "{corruption}");
            assert_eq!(
                corruption.position.offset,
                line_offset(log, line),
                "{corruption}"
            );
            assert!(corruption.reason.contains(reason), "{corruption}");
        }
        (expect, outcome) => panic!("expected {expect:?}, got {outcome:?}"),
    }
}

/// A log ending in a batch, with batches and single events before it.
fn batched_log() -> LogBuilder {
    LogBuilder::new("torn-1")
        .cwd("/tmp/ä")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .batch(vec![
            ("step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            ("message", r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"héllo 🦀"}]}"#),
            ("step/end", r#"{"stepId":"s1"}"#),
        ])
        .event("vendor/x", "[]")
        .batch(vec![
            ("sandbox/mode", r#"{"mode":"read-only"}"#),
            ("permission/preset", r#"{"preset":"read-only"}"#),
        ])
}

/// The expected outcome of scanning the first `cut` bytes of `log`.
fn expect_after_cut(log: &SpecLog, cut: usize) -> (Expect<'static>, usize) {
    let header_end = log.lines[0].range.end;
    if cut < header_end {
        let reason = if cut == 0 { "empty" } else { "header" };
        return (Expect::Corrupt { line: 1, reason }, 0);
    }
    let good = log
        .unit_ends()
        .into_iter()
        .filter(|end| *end <= cut)
        .max()
        .expect("the header ends before the cut");
    let good_lines = log.lines.iter().filter(|l| l.range.end <= good).count();
    let last_seq = good_lines as u64 - 1;
    if cut == good {
        return (Expect::Clean { last_seq }, good_lines - 1);
    }
    let complete = log
        .lines
        .iter()
        .filter(|l| l.range.start >= good && l.range.end <= cut)
        .count();
    let mid_line = log
        .lines
        .iter()
        .any(|l| l.range.end > cut && l.range.start < cut);
    let reason = if mid_line { "no \\n" } else { "only" };
    let torn = Expect::Torn {
        line: good_lines as u64 + 1,
        last_seq,
        dropped: complete as u64,
        reason,
    };
    (torn, good_lines - 1)
}

fn assert_every_cut(log: &SpecLog) -> usize {
    let events = log.events();
    for cut in 0..=log.bytes.len() {
        let (expect, kept) = expect_after_cut(log, cut);
        let prefix = &log.bytes[..cut];
        check(prefix, Some(&log.id), expect);
        if !matches!(expect, Expect::Corrupt { .. }) {
            assert_same_events(&scan(prefix, None).records, &events[..kept]);
        }
    }
    log.bytes.len() + 1
}

#[test]
fn truncation_at_every_offset_keeps_exactly_the_completed_prefix() {
    let cuts = assert_every_cut(&batched_log().log());
    assert!(cuts > 700, "{cuts} offsets tried");
}

#[test]
fn truncation_of_realistic_logs_at_every_offset_keeps_the_completed_prefix() {
    for seed in [1, 7, 42] {
        let log = realistic_log("real-1", seed, 3).log();
        assert!(log.lines.len() > 10);
        assert_every_cut(&log);
    }
}

/// The expected outcome once the bytes at `flipped` are damaged: corruption
/// at the first damaged line unless every line after it is damaged too, in
/// which case the tail from that line's unit on is torn.
fn expect_after_flips(log: &SpecLog, flipped: &[usize]) -> Expect<'static> {
    let mut damaged = std::collections::BTreeSet::new();
    for &at in flipped {
        let line = log.line_at(at);
        damaged.insert(line);
        if at + 1 == log.lines[line].range.end && line + 1 < log.lines.len() {
            damaged.insert(line + 1);
        }
    }
    let first = *damaged.first().expect("something was flipped");
    if first == 0 {
        return Expect::Corrupt {
            line: 1,
            reason: "",
        };
    }
    let all_after_damaged = (first..log.lines.len()).all(|line| damaged.contains(&line));
    if !all_after_damaged {
        return Expect::Corrupt {
            line: first as u64 + 1,
            reason: "an intact record follows",
        };
    }
    let unit_start = log.first_line_of_unit(log.lines[first].unit);
    Expect::Torn {
        line: unit_start as u64 + 1,
        last_seq: unit_start as u64 - 1,
        dropped: (first - unit_start) as u64,
        reason: "",
    }
}

#[test]
fn every_single_bit_flip_is_detected_and_placed() {
    let log = batched_log().log();
    let mut flips = 0;
    for at in 0..log.bytes.len() {
        for bit in 0..8 {
            let mut bytes = log.bytes.clone();
            bytes[at] ^= 1 << bit;
            check(&bytes, Some(&log.id), expect_after_flips(&log, &[at]));
            flips += 1;
        }
    }
    assert!(flips > 5_000, "{flips} flips tried");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_bit_flips_in_realistic_logs_are_detected_and_placed(
        seed in any::<u64>(),
        flips in proptest::collection::vec((any::<usize>(), 0u8..8), 1..4),
    ) {
        let log = realistic_log("flip-me", seed, 2).log();
        let mut masks: BTreeMap<usize, u8> = BTreeMap::new();
        for (at, bit) in flips {
            *masks.entry(at % log.bytes.len()).or_default() ^= 1 << bit;
        }
        masks.retain(|_, mask| *mask != 0);
        prop_assume!(!masks.is_empty());
        let mut bytes = log.bytes.clone();
        for (&at, &mask) in &masks {
            bytes[at] ^= mask;
        }
        let flipped: Vec<usize> = masks.keys().copied().collect();
        check(&bytes, Some(&log.id), expect_after_flips(&log, &flipped));
    }
}

/// The header of session `c` as docs/FORMAT.md writes it, to be edited by a row.
const HEADER: &str = r#"{"kind":"header","formatVersion":1,"id":"c","createdAt":1,"cwd":"/","parentSession":null,"seedLength":0,"delegationDepth":0,"sandboxMode":null,"approvalPolicy":null"#;

/// An intact event with seq 2 for session `c`.
const SEQ_2: &str = r#"{"seq":2,"ts":9,"type":"turn/end","data":{"turnId":"t"}"#;

/// An intact event with seq 3 for session `c`.
const SEQ_3: &str = r#"{"seq":3,"ts":9,"type":"a","data":{}"#;

/// Session `c` with one event, seq 1.
fn base() -> LogBuilder {
    LogBuilder::new("c").event("turn/start", r#"{"turnId":"t"}"#)
}

/// Session `c` with its header body edited: `from` replaced by `to`.
fn header_with(from: &str, to: &str) -> Vec<u8> {
    assert!(HEADER.contains(from), "{from} is not in the header");
    base().header_body(&HEADER.replace(from, to)).build()
}

/// A record with seq 2 carrying `"batch":n`.
fn batch_of(n: u64) -> String {
    format!(r#"{{"seq":2,"ts":9,"batch":{n},"type":"a","data":{{}}"#)
}

fn signed_bytes(body: &str) -> Vec<u8> {
    sign("c", body).into_bytes()
}

fn corrupt(line: u64, reason: &str) -> Expect<'_> {
    Expect::Corrupt { line, reason }
}

/// A torn tail from line 3 of a log whose good prefix is `base()`.
fn torn_after_base(dropped: u64, reason: &str) -> Expect<'_> {
    Expect::Torn {
        line: 3,
        last_seq: 1,
        dropped,
        reason,
    }
}

/// Checks every row as the file of session `c`, naming the rows that fail.
fn check_table(rows: Vec<(&str, Vec<u8>, Expect<'_>)>) {
    let count = rows.len();
    let failed: Vec<&str> = rows
        .into_iter()
        .filter(|(_, bytes, expect)| {
            std::panic::catch_unwind(|| check(bytes, Some("c"), *expect)).is_err()
        })
        .map(|(name, _, _)| name)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {count} rows failed: {failed:?}",
        failed.len()
    );
}

#[test]
#[rustfmt::skip]
fn every_corruption_class_is_reported_with_its_line_and_offset() {
    let mut header_unterminated = signed_bytes(HEADER);
    header_unterminated.pop();
    let batch_member_on = |seq: u64| format!(r#"{{"seq":{seq},"ts":9,"batch":2,"type":"a","data":{{}}"#);
    check_table(vec![
        // Line 1.
        ("empty file", Vec::new(), corrupt(1, "empty")),
        ("header without \\n", header_unterminated, corrupt(1, "no \\n")),
        ("header truncated", signed_bytes(HEADER)[..40].to_vec(), corrupt(1, "no \\n")),
        ("header of NUL bytes", vec![0; 100], corrupt(1, "header")),
        ("header of another session", LogBuilder::new("d").build(), corrupt(1, "named for session c but its header holds session d")),
        ("header signed for another id", header_with(r#""id":"c""#, r#""id":"d""#), corrupt(1, "CRC mismatch")),
        ("formatVersion 2", base().format_version(2).build(), corrupt(1, "formatVersion 2 is not supported")),
        ("formatVersion 0", base().format_version(0).build(), corrupt(1, "formatVersion 0")),
        ("formatVersion as text", header_with(r#""formatVersion":1"#, r#""formatVersion":"1""#), corrupt(1, "invalid type")),
        ("header missing cwd", header_with(r#","cwd":"/""#, ""), corrupt(1, "missing field `cwd`")),
        ("header extra member", base().header_body(&format!(r#"{HEADER},"extra":true"#)).build(), corrupt(1, "unknown field `extra`")),
        ("header repeated member", base().header_body(&format!(r#"{HEADER},"cwd":"/x""#)).build(), corrupt(1, "duplicate field `cwd`")),
        ("header createdAt as text", header_with(r#""createdAt":1"#, r#""createdAt":"1""#), corrupt(1, "invalid type")),
        ("header seedLength negative", header_with(r#""seedLength":0"#, r#""seedLength":-1"#), corrupt(1, "invalid value")),
        ("header kind event", header_with(r#""kind":"header""#, r#""kind":"event""#), corrupt(1, "kind \"event\"")),
        ("header parent not an id", header_with(r#""parentSession":null"#, r#""parentSession":"../etc""#), corrupt(1, "parentSession")),
        ("header sandboxMode a number", header_with(r#""sandboxMode":null"#, r#""sandboxMode":1"#), corrupt(1, "invalid type")),
        ("seedLength above the events", base().parent("p", 2, 1).build(), corrupt(1, "seedLength 2 is above the 1 intact events")),
        ("seedLength without a parent", base().seed_length(1).build(), corrupt(1, "seedLength is 1 with parentSession null")),
        ("seedLength counting an unfinished batch", base().parent("p", 2, 1).signed(&batch_of(2)).build(), corrupt(1, "seedLength 2 is above the 1 intact events")),
        ("seedLength counting a torn record", base().parent("p", 2, 1).raw(b"{\"seq\":2,").build(), corrupt(1, "seedLength 2")),
        // Seqs.
        ("seq gap", base().next_seq(3).event("a", "{}").build(), corrupt(3, "seq 3 where seq 2 was expected")),
        ("seq repeat", base().next_seq(1).event("a", "{}").build(), corrupt(3, "seq 1 where seq 2 was expected")),
        ("seq decrease", base().event("a", "{}").next_seq(1).event("a", "{}").build(), corrupt(4, "seq 1 where seq 3 was expected")),
        ("first seq 2", LogBuilder::new("c").next_seq(2).event("a", "{}").build(), corrupt(2, "seq 2 where seq 1 was expected")),
        ("seq 0", LogBuilder::new("c").next_seq(0).event("a", "{}").build(), corrupt(2, "seq 0")),
        ("seq gap inside a batch", base().signed(&batch_of(2)).next_seq(4).event("a", "{}").build(), corrupt(4, "seq 4 where seq 3")),
        // Intact event records that break the format.
        ("missing data", base().signed(r#"{"seq":2,"ts":9,"type":"a""#).build(), corrupt(3, "missing field `data`")),
        ("missing seq", base().signed(r#"{"ts":9,"type":"a","data":{}"#).build(), corrupt(3, "missing field `seq`")),
        ("extra member", base().signed(r#"{"seq":2,"ts":9,"type":"a","data":{},"note":1"#).build(), corrupt(3, "unknown field `note`")),
        ("repeated member", base().signed(r#"{"seq":2,"ts":9,"type":"a","type":"b","data":{}"#).build(), corrupt(3, "duplicate field `type`")),
        ("repeated crc", base().signed(r#"{"seq":2,"crc":"00000000","ts":9,"type":"a","data":{}"#).build(), corrupt(3, "duplicate field `crc`")),
        ("seq as text", base().signed(r#"{"seq":"2","ts":9,"type":"a","data":{}"#).build(), corrupt(3, "invalid type")),
        ("seq fractional", base().signed(r#"{"seq":2.0,"ts":9,"type":"a","data":{}"#).build(), corrupt(3, "invalid type")),
        ("negative ts", base().signed(r#"{"seq":2,"ts":-9,"type":"a","data":{}"#).build(), corrupt(3, "invalid value")),
        ("type not a string", base().signed(r#"{"seq":2,"ts":9,"type":7,"data":{}"#).build(), corrupt(3, "invalid type")),
        ("batch null", base().signed(r#"{"seq":2,"ts":9,"batch":null,"type":"a","data":{}"#).build(), corrupt(3, "invalid type")),
        ("batch 1", base().signed(&batch_of(1)).build(), corrupt(3, "batch 1 is not a batch")),
        ("batch 0", base().signed(&batch_of(0)).build(), corrupt(3, "batch 0 is not a batch")),
        ("batch above the limit", base().signed(&batch_of(MAX_BATCH_RECORDS + 1)).build(), corrupt(3, "above the limit of 65536")),
        ("batch on the second record of a batch", base().signed(&batch_of(3)).signed(&batch_member_on(3)).build(), corrupt(4, "inside an unfinished batch")),
        ("batch on the last record of a batch", base().signed(&batch_of(2)).signed(&batch_member_on(3)).build(), corrupt(4, "inside an unfinished batch")),
        // Damage followed by an intact record.
        ("line moved from another session", base().raw(sign("other", SEQ_2).as_bytes()).signed(SEQ_3).build(), corrupt(3, "CRC mismatch")),
        ("NUL bytes then an intact record", base().raw(&[0; 64]).raw(b"\n").signed(SEQ_2).build(), corrupt(3, "an intact record follows at line 4")),
        ("NUL bytes glued to an intact record", base().raw(&[0; 8]).signed(SEQ_2).signed(SEQ_3).build(), corrupt(3, "an intact record follows at line 4")),
        ("torn line then an intact record", base().raw(b"{\"seq\":2,\"ts\":9,\"ty\n").signed(SEQ_2).build(), corrupt(3, "an intact record follows at line 4")),
        ("two damaged lines then an intact record", base().raw(b"garbage\n\xff\xfe\n").event("a", "{}").build(), corrupt(3, "an intact record follows at line 5")),
        ("signed non-JSON then an intact record", base().signed("not json").signed(SEQ_2).build(), corrupt(3, "not a JSON object")),
        ("damage inside a batch, its last record intact", base().signed(&batch_of(2)).raw(b"{\"seq\":3\n").signed(SEQ_3).build(), corrupt(4, "an intact record follows at line 5")),
        ("a malformed record after damage", base().raw(b"x\n").signed(r#"{"seq":2,"ts":9,"type":"a""#).build(), corrupt(3, "an intact record follows")),
    ]);
}

#[test]
#[rustfmt::skip]
fn every_torn_tail_class_keeps_the_good_prefix() {
    let mut flipped = signed_bytes(SEQ_2);
    flipped[20] ^= 0x01;
    let torn = torn_after_base;
    check_table(vec![
        ("header alone", LogBuilder::new("c").build(), Expect::Clean { last_seq: 0 }),
        ("no torn tail", base().signed(SEQ_2).build(), Expect::Clean { last_seq: 2 }),
        ("last line without \\n", base().raw(b"{\"seq\":2,\"ts\"").build(), torn(0, "no \\n")),
        ("last record complete but for its \\n", base().raw(SEQ_2.as_bytes()).raw(b",\"crc\":\"00000000\"}").build(), torn(0, "no \\n")),
        ("a lone \\r", base().raw(b"\r").build(), torn(0, "no \\n")),
        ("an empty last line", base().raw(b"\n").build(), torn(0, "crc")),
        ("last line with a flipped bit", base().raw(&flipped).build(), torn(0, "CRC mismatch")),
        ("last line moved from another session", base().raw(sign("other", SEQ_2).as_bytes()).build(), torn(0, "CRC mismatch")),
        ("last line unparseable", base().raw(b"not json at all\n").build(), torn(0, "crc")),
        ("last line signed but not JSON", base().signed("{\"seq\":2,").build(), torn(0, "not a JSON object")),
        ("last line not UTF-8", base().raw(b"\xff").raw(sign("c", SEQ_2).as_bytes()).build(), torn(0, "")),
        ("NUL bytes without \\n", base().raw(&[0; 4096]).build(), torn(0, "no \\n")),
        ("NUL bytes with \\n", base().raw(&[0; 4096]).raw(b"\n").build(), torn(0, "crc")),
        ("several damaged lines", base().raw(b"x\n\0\0\n{\"seq\":").build(), torn(0, "crc")),
        ("an unfinished batch, its lines complete", base().signed(&batch_of(3)).signed(SEQ_3).build(), torn(2, "announced 3 records but only 2 arrived")),
        ("an unfinished batch, its next line torn", base().signed(&batch_of(2)).raw(b"{\"seq\":3,").build(), torn(1, "no \\n")),
        ("an unfinished batch, its next line damaged", base().signed(&batch_of(2)).raw(b"garbage\n").build(), torn(1, "crc")),
        ("a batch cut right after its first line", base().signed(&batch_of(65_536)).build(), torn(1, "announced 65536")),
        ("a torn tail after a finished batch", base().signed(&batch_of(2)).signed(SEQ_3).raw(b"{").build(), Expect::Torn { line: 5, last_seq: 3, dropped: 0, reason: "no \\n" }),
    ]);
}

/// Damage inside an unfinished batch: the torn tail starts at the batch's
/// first line, which is intact, so its reason names the batch and then the
/// damaged line, where it is and what is wrong there. A reason that gave
/// only the damage (a CRC mismatch) read as if the batch's first line held
/// it.
#[test]
fn damage_inside_an_unfinished_batch_names_the_batch_and_the_damaged_line() {
    let last = r#"{"seq":3,"ts":9,"type":"a","data":{"i":1}"#;
    let mut flipped = signed_bytes(last);
    flipped[30] ^= 0x01;
    let cut = &signed_bytes(last)[..20];
    for (damaged, what) in [
        (flipped.as_slice(), "CRC mismatch (stored "),
        (cut, "the last line has no \\n"),
        (b"garbage\n".as_slice(), "line does not end with a ,\"crc\""),
    ] {
        let log = base().signed(&batch_of(2)).raw(damaged).build();
        let scanned = scan(&log, Some("c"));
        let summary = scanned.outcome.expect("only a torn tail");
        let tail = summary.torn_tail.expect("a torn tail");
        assert_eq!(
            (
                tail.position.line,
                tail.position.offset,
                tail.dropped_records
            ),
            (3, line_offset(&log, 3), 1),
            "{tail:?}"
        );
        let expected = format!(
            "the batch starting at seq 2 announced 2 records but only 1 arrived intact; \
             line 4 (byte offset {}): ",
            line_offset(&log, 4)
        );
        assert!(tail.reason.starts_with(&expected), "{expected}\n{tail:?}");
        assert!(
            tail.reason[expected.len()..].contains(what),
            "{what}: {tail:?}"
        );
    }
}

#[test]
fn header_vocabulary_errors_are_rule_violations_at_seq_0_not_corruption() {
    let log = base()
        .sandbox_mode("sandbox-of-sand")
        .approval_policy("always")
        .build();
    let summary = scan(&log, Some("c"))
        .outcome
        .expect("an intact header is not corruption");
    assert_eq!(summary.torn_tail, None);
    assert_eq!(summary.header.sandbox_mode, None);
    assert_eq!(summary.header.approval_policy, None);
    let fields: Vec<(&str, &str)> = summary
        .header_vocabulary_errors
        .iter()
        .map(|e| (e.field, e.value.as_str()))
        .collect();
    assert_eq!(
        fields,
        [
            ("sandboxMode", "sandbox-of-sand"),
            ("approvalPolicy", "always")
        ]
    );
    assert!(summary.header_vocabulary_errors[0]
        .to_string()
        .starts_with("seq 0 (header) field sandboxMode"));
}

#[test]
fn the_record_size_limit_is_16_mib_per_line() {
    let prefix = r#"{"seq":2,"ts":9,"type":"big","data":""#;
    let filler = MAX_RECORD_BYTES - prefix.len() - 1 - 18;
    let largest = format!("{prefix}{}\"", "x".repeat(filler));
    let line = sign("c", &largest);
    assert_eq!(line.len(), MAX_RECORD_BYTES + 1);
    check(
        &base().raw(line.as_bytes()).build(),
        Some("c"),
        Expect::Clean { last_seq: 2 },
    );
    let too_large = format!("{prefix}{}\"", "x".repeat(filler + 1));
    let torn = base().raw(sign("c", &too_large).as_bytes()).build();
    check(
        &torn,
        Some("c"),
        Expect::Torn {
            line: 3,
            last_seq: 1,
            dropped: 0,
            reason: "above the 16777216-byte limit",
        },
    );
    let followed = base()
        .raw(sign("c", &too_large).as_bytes())
        .signed(SEQ_3)
        .build();
    check(
        &followed,
        Some("c"),
        Expect::Corrupt {
            line: 3,
            reason: "above the 16777216-byte limit",
        },
    );
}
