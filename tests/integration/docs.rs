//! docs/FORMAT.md and docs/EVENTS.md against the code: FORMAT.md's worked
//! example is what the independent writer produces and what the scanner
//! accepts, its stated CRC is the CRC, and the limits it names are the
//! limits the code enforces; EVENTS.md's example lines are one log that
//! keeps every rule, shows every type and projects as the page says, and its
//! pending action and reply parse. FORMAT.md's schemas are the tables a new
//! SQLite database and a new PostgreSQL store have, column for column, and
//! each versions table has a row for every version the code knows.

use sessionlog_schema::{CRC_SUFFIX_LEN, FORMAT_VERSION, MAX_BATCH_RECORDS, MAX_RECORD_BYTES};

use std::collections::BTreeSet;
use std::path::Path;

use sessionlog_store::{Store, POSTGRES_SCHEMA_VERSION, SCHEMA_VERSION};

use crate::faults::ok;
use crate::postgres::{test_server, Schema};
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

const EVENTS_MD: &str = include_str!("../../docs/EVENTS.md");

/// Every fenced block of `doc` opened by `fence`, in order.
fn fenced_blocks(doc: &'static str, fence: &str) -> Vec<&'static str> {
    let opening = format!("{fence}\n");
    doc.split(opening.as_str())
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("the block is closed")])
        .collect()
}

#[test]
fn the_event_examples_are_one_log_that_keeps_every_rule_and_shows_every_type() {
    use sessionlog_projections::{fold, Defaults};
    use sessionlog_schema::{decode_header, Event, EventType};

    let log: String = fenced_blocks(EVENTS_MD, "```jsonl").concat();
    let scanned = scan(log.as_bytes(), Some("demo"));
    let summary = scanned.outcome.expect("the examples are a good log");
    assert_eq!(summary.torn_tail, None);
    let header_line = log.lines().next().expect("the header comes first");
    let header = decode_header(header_line.as_bytes())
        .expect("the header decodes")
        .header;
    let mut seen = Vec::new();
    for record in &scanned.records {
        let event = Event::parse(record.event_type(), record.data())
            .unwrap_or_else(|error| panic!("seq {}: {error}", record.seq()));
        seen.extend(event.event_type());
    }
    for known in EventType::ALL {
        assert!(
            seen.contains(known),
            "EVENTS.md has no example of {}",
            known.as_str()
        );
    }
    let (state, violations) = fold(header, &scanned.records);
    assert_eq!(violations, Vec::new(), "the examples keep every rule");
    let projection = serde_json::to_string(&state.projection(&Defaults::default()))
        .expect("a projection serialises");
    assert_eq!(
        fenced_blocks(EVENTS_MD, "```json")[0].trim_end(),
        projection,
        "EVENTS.md's projection is the examples' projection"
    );
}

#[test]
fn the_pending_action_and_reply_examples_parse() {
    use sessionlog_projections::{parse_pending_action, parse_review_result, Decision, Risk};

    let json = fenced_blocks(EVENTS_MD, "```json");
    let action = parse_pending_action(json[1].trim_end().as_bytes())
        .unwrap_or_else(|error| panic!("the pending action example: {error}"));
    assert_eq!(action.call_id, "c4");
    let decision = parse_review_result(json[2].trim_end().as_bytes())
        .unwrap_or_else(|error| panic!("the reply example: {error:?}"));
    assert_eq!(
        (decision.risk, decision.decision, decision.reason.as_deref()),
        (Risk::High, Decision::Deny, Some("reads a private key"))
    );
}

#[test]
fn the_format_page_points_to_the_events_page() {
    assert!(FORMAT_MD.contains("[EVENTS.md](EVENTS.md)"));
}

/// FORMAT.md from the line `heading` to the next `## ` heading (or its end).
fn section(heading: &str) -> &'static str {
    let start = FORMAT_MD
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("FORMAT.md has the heading {heading:?}"))
        + 1;
    let length = FORMAT_MD[start..]
        .find("\n## ")
        .unwrap_or(FORMAT_MD.len() - start);
    &FORMAT_MD[start..start + length]
}

/// The version numbers of the rows of the versions table under `heading`.
fn versions_table(heading: &str) -> Vec<i64> {
    section(heading)
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1)?.trim().parse().ok())
        .collect()
}

#[test]
fn each_versions_table_has_a_row_for_every_version_of_its_schema() {
    for (heading, version) in [
        ("### Schema versions", SCHEMA_VERSION),
        ("### PostgreSQL schema versions", POSTGRES_SCHEMA_VERSION),
    ] {
        assert_eq!(
            versions_table(heading),
            (1..=version).collect::<Vec<_>>(),
            "the table under {heading:?}"
        );
    }
}

/// `(table, column)` of every column the `CREATE TABLE` statements in the
/// ```` ```sql ```` blocks of FORMAT.md's section `heading` declare, and of
/// the `snapshots` table of "State snapshots", which serves both
/// databases. A statement runs from `CREATE TABLE name (` to a line that
/// starts with `)` (or to the end of its own line); its columns are the
/// first words of its items, constraints left out.
fn documented_columns(heading: &str) -> BTreeSet<(String, String)> {
    let mut blocks = fenced_blocks(section(heading), "```sql");
    blocks.push(
        fenced_blocks(FORMAT_MD, "```sql")
            .into_iter()
            .find(|block| block.starts_with("CREATE TABLE snapshots ("))
            .expect("FORMAT.md shows the snapshots table"),
    );
    let mut columns = BTreeSet::new();
    for block in blocks {
        let mut lines = block.lines();
        while let Some(line) = lines.next() {
            let Some(rest) = line.strip_prefix("CREATE TABLE ") else {
                continue;
            };
            let (table, first) = rest.split_once(" (").expect("CREATE TABLE name (");
            let mut text = String::from(first);
            let one_line = first.split("--").next().unwrap_or("").trim_end();
            if !one_line.ends_with(");") {
                for line in lines.by_ref() {
                    if line.starts_with(')') {
                        break;
                    }
                    text.push('\n');
                    text.push_str(line);
                }
            }
            let without_comments: String = text
                .lines()
                .map(|line| line.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join(" ");
            let mut depth = 0;
            let mut item = String::new();
            let mut items = Vec::new();
            for character in without_comments.chars() {
                match character {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(character);
            }
            items.push(item);
            for item in items {
                let Some(word) = item.split_whitespace().next() else {
                    continue;
                };
                if !["PRIMARY", "FOREIGN", "UNIQUE", "CHECK", ");"].contains(&word) {
                    columns.insert((table.to_owned(), word.to_owned()));
                }
            }
        }
    }
    columns
}

#[test]
fn the_sqlite_schema_shown_is_every_column_a_new_database_has() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("store.db");
    ok(Store::create(&path));
    let database = ok(rusqlite::Connection::open(&path));
    let mut tables = ok(database
        .prepare("SELECT m.name, c.name FROM sqlite_schema m, pragma_table_info(m.name) c WHERE m.type = 'table'"));
    let columns: BTreeSet<(String, String)> = ok(ok(
        tables.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
    )
    .collect::<Result<_, _>>());
    assert_eq!(documented_columns("## SQLite schema"), columns);
}

#[test]
fn the_postgres_schema_shown_is_every_column_a_new_store_has() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "docs");
    let Ok(Store::Postgres(store)) = Store::create(Path::new(&schema.url)) else {
        panic!("{} is not a PostgreSQL store", schema.url);
    };
    let rows = ok(ok(store.connect()).query(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
         WHERE table_schema = current_schema()",
        &[],
    ));
    let columns: BTreeSet<(String, String)> =
        rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    assert_eq!(documented_columns("## PostgreSQL schema"), columns);
}
