//! docs/FORMAT.md's logs as written by hand: logs from the independent writer decode and
//! scan clean, whatever their member order, text or event types, and our
//! codec writes the very same bytes.

use proptest::prelude::*;
use sessionlog_schema::{
    decode_event, decode_header, ApprovalPolicy, Event, EventRecord, SandboxMode, SessionHeader,
    SessionId,
};

use crate::realistic::realistic_log;
use crate::support::{
    assert_same_events, scan, sign, LogBuilder, MemberOrder, SpecLog, WRITER_HEADER_ORDER,
};

/// Scans `log` and asserts it is clean and gives back every event, with each
/// record's body being its line up to `,"crc":`.
fn assert_scans_clean(log: &SpecLog) {
    let scanned = scan(&log.bytes, Some(&log.id));
    let summary = scanned.outcome.expect("the log is not corrupt");
    assert_eq!(summary.torn_tail, None);
    assert_eq!(summary.good_bytes, log.bytes.len() as u64);
    assert_eq!(summary.good_lines, log.lines.len() as u64);
    let events = log.events();
    assert_eq!(summary.last_seq, events.len() as u64);
    assert_same_events(&scanned.records, &events);
    let event_lines = log.lines.iter().filter(|l| l.event.is_some());
    for (record, line) in scanned.records.iter().zip(event_lines) {
        let bytes = &log.bytes[line.range.clone()];
        assert_eq!(record.body().as_bytes(), &bytes[..bytes.len() - 19]);
    }
}

fn arb_order() -> impl Strategy<Value = MemberOrder> {
    prop_oneof![
        Just(MemberOrder::Spec),
        Just(MemberOrder::Reversed),
        any::<u64>().prop_map(MemberOrder::Shuffled),
    ]
}

proptest! {
    #[test]
    fn realistic_logs_in_any_member_order_scan_clean(
        seed in any::<u64>(),
        turns in 0usize..5,
        order in arb_order(),
    ) {
        let log = realistic_log("sess-1", seed, turns).member_order(order).log();
        assert_scans_clean(&log);
    }

    #[test]
    fn our_encoder_writes_the_spec_writers_bytes(seed in any::<u64>(), turns in 0usize..4) {
        let log = realistic_log("sess_2", seed, turns).log();
        let id = SessionId::parse("sess_2").expect("valid id");
        let header = SessionHeader {
            cwd: "/home/zoë/projekt ✓".into(),
            ..SessionHeader::root(id.clone(), 1_700_000_000_000, String::new())
        };
        let mut ours = header.encode();
        for event in log.events() {
            ours += &EventRecord::new(event.seq, event.ts, event.batch, &event.event_type, &event.data)
                .encode(&id);
        }
        prop_assert_eq!(ours.as_bytes(), &log.bytes[..]);
    }
}

#[test]
fn child_headers_with_baselines_are_written_and_read_as_the_spec_says() {
    for (sandbox, policy) in [
        (SandboxMode::ReadOnly, ApprovalPolicy::Ask),
        (SandboxMode::WorkspaceWrite, ApprovalPolicy::Never),
        (SandboxMode::DangerFullAccess, ApprovalPolicy::Ask),
    ] {
        let spec = LogBuilder::new("child-1")
            .cwd("C:\\Users\\\"quoted\"\\dir")
            .parent("parent-0", 0, 3)
            .sandbox_mode(sandbox.as_str())
            .approval_policy(policy.as_str());
        let header = SessionHeader {
            id: SessionId::parse("child-1").expect("valid id"),
            created_at: 1_700_000_000_000,
            cwd: "C:\\Users\\\"quoted\"\\dir".into(),
            parent_session: Some(SessionId::parse("parent-0").expect("valid id")),
            seed_length: 0,
            delegation_depth: 3,
            sandbox_mode: Some(sandbox),
            approval_policy: Some(policy),
        };
        assert_eq!(header.encode().as_bytes(), &spec.build()[..]);
        let line = sign("child-1", &spec.header_line_body());
        let decoded = decode_header(line.trim_end_matches('\n').as_bytes()).expect("decodes");
        assert_eq!(decoded.header, header);
        assert!(decoded.vocabulary_errors.is_empty());
    }
}

#[test]
fn header_members_may_come_in_any_order() {
    let spec_order = LogBuilder::new("s")
        .parent("p", 1, 1)
        .event("turn/start", "{}");
    let expected = scan(&spec_order.build(), Some("s"))
        .outcome
        .expect("clean")
        .header;
    for seed in 0..50 {
        let shuffled = spec_order.clone().member_order(MemberOrder::Shuffled(seed));
        let header = scan(&shuffled.build(), Some("s"))
            .outcome
            .expect("clean")
            .header;
        assert_eq!(header, expected, "seed {seed}");
    }
    let reversed = spec_order.member_order(MemberOrder::Reversed);
    assert!(reversed
        .header_line_body()
        .starts_with("{\"approvalPolicy\":null,\"sandboxMode\":null"));
    assert_eq!(WRITER_HEADER_ORDER.len(), 10);
}

#[test]
fn data_is_kept_byte_for_byte_not_reserialised() {
    let data = [
        r#"{"b":1.50,"a":1e2,"c":-0,"d":"\u00e9\ud83e\udd80\/","e":[]}"#,
        r#"{"z":{"y":{"x":[true,false,null,"\"\\\b\f\n\r\t"]}}}"#,
        r#""a bare string""#,
        r#"12345678901234567890123"#,
        r#"[{},[],""]"#,
        r#"{"same":1,"same":2}"#,
    ];
    let mut builder = LogBuilder::new("bytes");
    for text in data {
        builder = builder.event("vendor/opaque", text);
    }
    let log = builder.log();
    assert_scans_clean(&log);
    let scanned = scan(&log.bytes, None);
    let kept: Vec<&str> = scanned.records.iter().map(EventRecord::data).collect();
    assert_eq!(kept, data);
}

#[test]
fn unknown_event_types_are_kept_and_parse_as_unknown() {
    let types = [
        "vendor/ünknown",
        "turn/START",
        "",
        "a\"quote",
        "tab\tand\u{2028}",
    ];
    let mut builder = LogBuilder::new("u");
    for event_type in types {
        builder = builder.event(event_type, "[1,\"two\",null]");
    }
    let log = builder.log();
    assert_scans_clean(&log);
    for record in scan(&log.bytes, None).records {
        assert!(matches!(
            Event::parse(record.event_type(), record.data()),
            Ok(Event::Unknown)
        ));
    }
}

#[test]
fn ids_at_the_edges_of_the_pattern_sign_and_scan() {
    let longest = format!("Z{}", "_-9".repeat(42) + "x");
    assert_eq!(longest.len(), 128);
    for id in ["a", "0", "A-_", longest.as_str()] {
        let log = LogBuilder::new(id)
            .event("turn/start", r#"{"turnId":"t"}"#)
            .batch(vec![
                ("step/start", r#"{"stepId":"s","turnId":"t"}"#),
                ("step/end", r#"{"stepId":"s"}"#),
            ])
            .log();
        assert_scans_clean(&log);
    }
}

#[test]
fn a_line_signed_for_one_session_does_not_validate_in_another() {
    let body = r#"{"seq":1,"ts":5,"type":"turn/start","data":{"turnId":"t"}"#;
    let line = sign("alpha", body);
    let line = line.trim_end_matches('\n').as_bytes();
    let alpha = SessionId::parse("alpha").expect("valid id");
    let beta = SessionId::parse("beta").expect("valid id");
    assert!(decode_event(&alpha, line).is_ok());
    let error = decode_event(&beta, line).expect_err("another session's CRC");
    assert!(error.to_string().contains("CRC mismatch"), "{error}");
}
