//! docs/FORMAT.md against the code: its worked example is what the
//! independent writer produces and what the scanner accepts, its stated CRC is
//! the CRC, and the limits it names are the limits the code enforces.

use sessionlog_schema::{CRC_SUFFIX_LEN, FORMAT_VERSION, MAX_BATCH_RECORDS, MAX_RECORD_BYTES};

use crate::support::{assert_same_events, scan, spec_crc, LogBuilder};

const FORMAT_MD: &str = include_str!("../../docs/FORMAT.md");

/// The text of the first fenced block opened by `fence` (e.g. "```jsonl").
fn fenced_block(fence: &str) -> &'static str {
    let start = FORMAT_MD
        .find(&format!("{fence}\n"))
        .expect("the block is in FORMAT.md")
        + fence.len()
        + 1;
    let length = FORMAT_MD[start..].find("```").expect("the block is closed");
    &FORMAT_MD[start..start + length]
}

fn worked_example() -> LogBuilder {
    LogBuilder::new("demo")
        .event("turn/start", r#"{"turnId":"t1"}"#)
        .batch(vec![
            ("step/start", r#"{"stepId":"s1","turnId":"t1"}"#),
            ("step/end", r#"{"stepId":"s1"}"#),
        ])
}

#[test]
fn the_worked_example_is_what_the_spec_writer_writes_and_scans_clean() {
    let example = fenced_block("```jsonl");
    let log = worked_example().log();
    assert_eq!(example.as_bytes(), &log.bytes[..]);
    let scanned = scan(example.as_bytes(), Some("demo"));
    let summary = scanned.outcome.expect("the example is a good log");
    assert_eq!(summary.torn_tail, None);
    assert_same_events(&scanned.records, &log.events());
}

#[test]
fn the_worked_crc_stated_in_prose_is_the_crc_of_id_and_body() {
    let body = r#"{"seq":1,"ts":1700000000001,"type":"turn/start","data":{"turnId":"t1"}"#;
    let crc = spec_crc("demo", body.as_bytes());
    assert_eq!(format!("{crc:08x}"), "1a46d6a6");
    let input = format!("demo{body}");
    assert!(FORMAT_MD.contains(&format!("the {} bytes\n`{input}`", input.len())));
    assert!(FORMAT_MD.contains(&format!("its CRC-32 is `{crc:08x}`")));
}

#[test]
fn the_limits_named_in_the_format_doc_are_the_codes_limits() {
    assert_eq!(MAX_RECORD_BYTES, 16 * 1024 * 1024);
    assert!(FORMAT_MD.contains(&format!("16 MiB, {MAX_RECORD_BYTES} bytes")));
    assert!(FORMAT_MD.contains(&format!("`MAX_BATCH_RECORDS` ({MAX_BATCH_RECORDS})")));
    assert!(FORMAT_MD.contains(&format!("The last {CRC_SUFFIX_LEN} bytes of the line")));
    assert!(FORMAT_MD.contains(&format!("format version {FORMAT_VERSION}:")));
}
