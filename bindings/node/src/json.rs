//! The JSON texts the addon hands to JavaScript, built from record bodies
//! as they are stored: a header or an event is its body closed by `}` (what
//! `sessionlog export` prints), so `data` is never re-serialised and
//! JavaScript parses each payload once, with `JSON.parse`.

use serde::Serialize;
use sessionlog_schema::{EventRecord, SessionHeader, TornTail};
use sessionlog_store::{ListEntry, Snapshot};

use crate::failure::Failure;

/// A header as a JSON object, in the format's member order.
pub fn header(header: &SessionHeader) -> String {
    let mut text = header.to_body();
    text.push('}');
    text
}

/// Appends the events as a JSON array of records (`export` lines).
pub fn push_events(text: &mut String, events: &[EventRecord]) {
    text.push('[');
    for (index, event) in events.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str(event.body());
        text.push('}');
    }
    text.push(']');
}

/// `{header, events, tornTail}`: the good prefix of a session, and the torn
/// tail after it (null when there is none).
pub fn snapshot(snapshot: &Snapshot) -> String {
    let bodies: usize = snapshot.events.iter().map(|e| e.body().len() + 2).sum();
    let mut text = String::with_capacity(bodies + snapshot.header_body.len() + 256);
    text.push_str("{\"header\":");
    text.push_str(&snapshot.header_body);
    text.push_str("},\"events\":");
    push_events(&mut text, &snapshot.events);
    text.push_str(",\"tornTail\":");
    match &snapshot.torn_tail {
        Some(torn) => text.push_str(&torn_tail(torn)),
        None => text.push_str("null"),
    }
    text.push('}');
    text
}

/// Every session of a listing: its header, or `{id, error}` for one whose
/// header cannot be read (never left out).
pub fn list(entries: Vec<ListEntry>) -> String {
    let mut text = String::from("[");
    for (index, entry) in entries.into_iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        match entry.header {
            Ok(read) => text.push_str(&header(&read)),
            Err(error) => text.push_str(&to_json(&Unreadable {
                id: entry.id.as_str(),
                error: Failure::from(error),
            })),
        }
    }
    text.push(']');
    text
}

/// Serialises a value whose serialisation cannot fail (strings, integers
/// and derived structs of them).
pub fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| {
        serde_json::Value::from(format!("unserialisable: {error}")).to_string()
    })
}

#[derive(Serialize)]
struct Unreadable<'a> {
    id: &'a str,
    error: Failure,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TornTailJson<'a> {
    line: u64,
    offset: u64,
    bytes: u64,
    dropped_records: u64,
    reason: &'a str,
}

fn torn_tail(torn: &TornTail) -> String {
    to_json(&TornTailJson {
        line: torn.position.line,
        offset: torn.position.offset,
        bytes: torn.bytes,
        dropped_records: torn.dropped_records,
        reason: &torn.reason,
    })
}
