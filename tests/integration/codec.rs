//! The record codec under arbitrary input: round trips keep every byte, and
//! hostile lines (arbitrary bytes, mutations of valid lines, signed or not)
//! are refused with an error, never a panic.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::Value;
use sessionlog_schema::{
    check_crc, compact_json, decode_event, decode_header, record_crc, split_crc, ApprovalPolicy,
    EventRecord, SandboxMode, SessionHeader, SessionId,
};

use crate::support::{
    event_body, json_string, scan, sign, spec_crc, SpecEvent, WRITER_EVENT_ORDER,
};

fn arb_id() -> impl Strategy<Value = SessionId> {
    "[A-Za-z0-9][A-Za-z0-9_-]{0,127}"
        .prop_map(|text| SessionId::parse(&text).expect("the strategy draws valid ids"))
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(any::<String>(), inner, 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn arb_batch() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![Just(None), (2u64..=65_536).prop_map(Some)]
}

fn arb_header() -> impl Strategy<Value = SessionHeader> {
    (
        arb_id(),
        any::<u64>(),
        any::<String>(),
        proptest::option::of(arb_id()),
        any::<u64>(),
        any::<u64>(),
        proptest::option::of(proptest::sample::select(SandboxMode::ALL)),
        proptest::option::of(proptest::sample::select(ApprovalPolicy::ALL)),
    )
        .prop_map(
            |(id, created_at, cwd, parent, seed, depth, sandbox, policy)| SessionHeader {
                id,
                created_at,
                cwd,
                // A session without a parent seeds nothing.
                seed_length: if parent.is_some() { seed } else { 0 },
                parent_session: parent,
                delegation_depth: depth,
                sandbox_mode: sandbox,
                approval_policy: policy,
            },
        )
}

/// A valid event line (without `\n`) to mutate.
fn valid_line() -> (SessionId, Vec<u8>) {
    let id = SessionId::parse("mutant").expect("valid id");
    let record = EventRecord::new(
        3,
        1_700_000_000_123,
        Some(2),
        "tool/start",
        r#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"echo \"é\""}}"#,
    );
    let mut line = record.encode(&id).into_bytes();
    line.pop();
    (id, line)
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Insert(usize, Vec<u8>),
    Duplicate(usize, usize),
    Truncate(usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        (any::<usize>(), 1usize..20).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<usize>(), vec(any::<u8>(), 1..8)).prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<usize>(), 1usize..30).prop_map(|(at, n)| Mutation::Duplicate(at, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(line: &mut Vec<u8>, mutation: &Mutation) {
    let len = line.len().max(1);
    match mutation {
        Mutation::Flip(at, mask) => {
            if let Some(byte) = line.get_mut(at % len) {
                *byte ^= mask;
            }
        }
        Mutation::Delete(at, n) => {
            let start = (at % len).min(line.len());
            let end = (start + n).min(line.len());
            line.drain(start..end);
        }
        Mutation::Insert(at, bytes) => {
            let at = (at % len).min(line.len());
            line.splice(at..at, bytes.iter().copied());
        }
        Mutation::Duplicate(at, n) => {
            let start = (at % len).min(line.len());
            let end = (start + n).min(line.len());
            let copy = line[start..end].to_vec();
            line.splice(end..end, copy);
        }
        Mutation::Truncate(at) => line.truncate(at % len),
    }
}

/// Runs every decoder over `line`; they may refuse it but must not panic.
fn decode_everything(id: &SessionId, line: &[u8]) {
    let _ = split_crc(line);
    let _ = check_crc(id, line);
    let _ = decode_header(line);
    let _ = decode_event(id, line);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn event_records_round_trip_through_the_codec(
        id in arb_id(),
        seq in 1u64..,
        ts in any::<u64>(),
        batch in arb_batch(),
        event_type in any::<String>(),
        data in arb_json(),
    ) {
        let data = data.to_string();
        let record = EventRecord::new(seq, ts, batch, &event_type, &data);
        let line = record.encode(&id);
        let spec = SpecEvent { seq, ts, batch, event_type: event_type.clone(), data: data.clone() };
        prop_assert_eq!(&line, &sign(id.as_str(), &event_body(&spec, &WRITER_EVENT_ORDER)));
        let decoded = decode_event(&id, line.trim_end_matches('\n').as_bytes())
            .expect("an encoded record decodes");
        prop_assert_eq!(&decoded, &record);
        prop_assert_eq!(decoded.seq(), seq);
        prop_assert_eq!(decoded.ts(), ts);
        prop_assert_eq!(decoded.batch(), batch);
        prop_assert_eq!(decoded.event_type(), event_type.as_str());
        prop_assert_eq!(decoded.data(), data.as_str());
        prop_assert_eq!(decoded.body(), &line[..line.len() - 19]);
        prop_assert_eq!(decoded.export_line(), format!("{}}}", decoded.body()));
        let exported: Value = serde_json::from_str(&decoded.export_line()).expect("export is JSON");
        prop_assert_eq!(exported["type"].as_str(), Some(event_type.as_str()));
        prop_assert_eq!(
            record_crc(&id, decoded.body().as_bytes()),
            spec_crc(id.as_str(), decoded.body().as_bytes())
        );
    }

    #[test]
    fn headers_round_trip_through_the_codec(header in arb_header()) {
        let line = header.encode();
        let cwd_member = format!(",\"cwd\":{},", json_string(&header.cwd));
        prop_assert!(line.ends_with("\"}\n"), "{}", line);
        prop_assert!(line.contains(&cwd_member), "{}", line);
        let decoded = decode_header(line.trim_end_matches('\n').as_bytes()).expect("decodes");
        prop_assert_eq!(decoded.header, header);
        prop_assert!(decoded.vocabulary_errors.is_empty());
    }

    #[test]
    fn compact_json_removes_whitespace_between_tokens_only(value in arb_json()) {
        let compact = value.to_string();
        let pretty = serde_json::to_string_pretty(&value).expect("serialises");
        prop_assert_eq!(compact_json(&pretty).expect("valid JSON"), compact.clone());
        prop_assert_eq!(compact_json(&compact).expect("valid JSON"), compact);
    }

    #[test]
    fn arbitrary_bytes_are_refused_without_panic(
        id in arb_id(),
        bytes in vec(any::<u8>(), 0..400),
    ) {
        decode_everything(&id, &bytes);
        let mut signed = bytes.clone();
        signed.extend_from_slice(
            format!(",\"crc\":\"{:08x}\"}}", spec_crc(id.as_str(), &bytes)).as_bytes(),
        );
        decode_everything(&id, &signed);
        let _ = scan(&bytes, Some(id.as_str()));
    }

    #[test]
    fn mutated_lines_never_pass_unless_unchanged(mutations in vec(arb_mutation(), 1..4)) {
        let (id, original) = valid_line();
        let mut line = original.clone();
        for mutation in &mutations {
            mutate(&mut line, mutation);
        }
        decode_everything(&id, &line);
        if line != original {
            prop_assert!(decode_event(&id, &line).is_err());
        }
    }

    #[test]
    fn mutated_lines_signed_again_decode_or_fail_cleanly(mutations in vec(arb_mutation(), 1..4)) {
        let (id, original) = valid_line();
        let mut body = original[..original.len() - 18].to_vec();
        for mutation in &mutations {
            mutate(&mut body, mutation);
        }
        let mut line = body.clone();
        line.extend_from_slice(
            format!(",\"crc\":\"{:08x}\"}}", spec_crc(id.as_str(), &body)).as_bytes(),
        );
        decode_everything(&id, &line);
        if let Ok(record) = decode_event(&id, &line) {
            prop_assert_eq!(record.body().as_bytes(), &body[..]);
        }
        let mut log = sign(id.as_str(), &format!(
            "{{\"kind\":\"header\",\"formatVersion\":1,\"id\":\"{id}\",\"createdAt\":1,\"cwd\":\"/\",\"parentSession\":null,\"seedLength\":0,\"delegationDepth\":0,\"sandboxMode\":null,\"approvalPolicy\":null"
        )).into_bytes();
        log.extend_from_slice(&line);
        log.push(b'\n');
        let _ = scan(&log, Some(id.as_str()));
    }
}

#[test]
fn compact_json_keeps_string_contents_and_escapes() {
    let cases = [
        (r#"{ "a" : "x y\t" }"#, r#"{"a":"x y\t"}"#),
        ("[ 1 ,\n\t2.50 , \"\\\" ]\" ]", r#"[1,2.50,"\" ]"]"#),
        (
            r#"{"k":"\u00e9", "n" : 1e+2}"#,
            r#"{"k":"\u00e9","n":1e+2}"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            compact_json(input).expect("valid JSON"),
            expected,
            "{input}"
        );
    }
    assert!(compact_json("{\"a\":").is_err());
}
