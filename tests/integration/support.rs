//! Shared helpers: an independent writer of docs/FORMAT.md logs and a scan harness.
//!
//! The writer builds every line by hand (`format!`, `serde_json` only to
//! escape strings, `crc32fast` for the CRC) and never calls the `schema`
//! codec, so a test that feeds its output to `schema` checks our reader and
//! writer against the specification rather than against themselves. It can
//! also write what our writer never does: members in another order, signed
//! lines with any body, raw bytes.
//!
//! The scan harness splits bytes on `\n` the way the store does and feeds the
//! pure `LogScanner`, keeping the records it hands back.

use std::ops::Range;

use sessionlog_schema::{Corruption, EventRecord, LogScanner, ScanSummary, SessionId};

/// The members of an event record other than `crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventMember {
    /// `seq`
    Seq,
    /// `ts`
    Ts,
    /// `batch` (written only on the first record of a multi-event batch)
    Batch,
    /// `type`
    Type,
    /// `data`
    Data,
}

/// The event member order writers emit (docs/FORMAT.md).
pub const WRITER_EVENT_ORDER: [EventMember; 5] = [
    EventMember::Seq,
    EventMember::Ts,
    EventMember::Batch,
    EventMember::Type,
    EventMember::Data,
];

/// The header member order writers emit (docs/FORMAT.md), `crc` left out.
pub const WRITER_HEADER_ORDER: [&str; 10] = [
    "kind",
    "formatVersion",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "seedLength",
    "delegationDepth",
    "sandboxMode",
    "approvalPolicy",
];

/// How the members before `crc` are ordered in every record of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberOrder {
    /// The order of docs/FORMAT.md.
    Spec,
    /// The writers' order backwards.
    Reversed,
    /// A different permutation per record, drawn from this seed.
    Shuffled(u64),
}

/// One event as the writer wrote it: what a reader must give back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecEvent {
    /// Its seq.
    pub seq: u64,
    /// Its time.
    pub ts: u64,
    /// `Some(n)` on the first record of an n-record batch.
    pub batch: Option<u64>,
    /// Its type.
    pub event_type: String,
    /// Its raw `data` text.
    pub data: String,
}

/// One line of a built log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecLine {
    /// Its bytes in the log, `\n` included when it has one.
    pub range: Range<usize>,
    /// The unit it belongs to: 0 for the header, then one per single event,
    /// batch or raw line, in order.
    pub unit: usize,
    /// The event it holds, when it is a built event.
    pub event: Option<SpecEvent>,
}

/// A built log with its layout.
#[derive(Debug, Clone)]
pub struct SpecLog {
    /// The session id every line is signed for.
    pub id: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// Its lines, in order.
    pub lines: Vec<SpecLine>,
}

/// Builds a log line by line, the way docs/FORMAT.md says, without our codec.
#[derive(Debug, Clone)]
pub struct LogBuilder {
    id: String,
    format_version: u64,
    created_at: u64,
    cwd: String,
    parent_session: Option<String>,
    seed_length: u64,
    delegation_depth: u64,
    sandbox_mode: Option<String>,
    approval_policy: Option<String>,
    header_body: Option<String>,
    order: MemberOrder,
    next_seq: u64,
    next_ts: u64,
    units: Vec<Unit>,
}

#[derive(Debug, Clone)]
enum Unit {
    Events(Vec<SpecEvent>),
    Signed(String),
    Raw(Vec<u8>),
}

impl LogBuilder {
    /// A root session `id` with no events, created at a fixed time in `/work`.
    pub fn new(id: &str) -> Self {
        LogBuilder {
            id: id.to_owned(),
            format_version: 1,
            created_at: 1_700_000_000_000,
            cwd: "/work".to_owned(),
            parent_session: None,
            seed_length: 0,
            delegation_depth: 0,
            sandbox_mode: None,
            approval_policy: None,
            header_body: None,
            order: MemberOrder::Spec,
            next_seq: 1,
            next_ts: 1_700_000_000_001,
            units: Vec::new(),
        }
    }

    /// Sets the header's `cwd`.
    pub fn cwd(mut self, cwd: &str) -> Self {
        self.cwd = cwd.to_owned();
        self
    }

    /// Sets the header's `formatVersion`.
    pub fn format_version(mut self, version: u64) -> Self {
        self.format_version = version;
        self
    }

    /// Makes this a child of `parent` with `seed_length` seeded events.
    pub fn parent(mut self, parent: &str, seed_length: u64, delegation_depth: u64) -> Self {
        self.parent_session = Some(parent.to_owned());
        self.seed_length = seed_length;
        self.delegation_depth = delegation_depth;
        self
    }

    /// Sets the header's `seedLength` alone.
    pub fn seed_length(mut self, seed_length: u64) -> Self {
        self.seed_length = seed_length;
        self
    }

    /// Sets the header's `sandboxMode` (any text, to test vocabularies).
    pub fn sandbox_mode(mut self, mode: &str) -> Self {
        self.sandbox_mode = Some(mode.to_owned());
        self
    }

    /// Sets the header's `approvalPolicy` (any text, to test vocabularies).
    pub fn approval_policy(mut self, policy: &str) -> Self {
        self.approval_policy = Some(policy.to_owned());
        self
    }

    /// Replaces line 1 by `body` signed with the id.
    pub fn header_body(mut self, body: &str) -> Self {
        self.header_body = Some(body.to_owned());
        self
    }

    /// Orders every record's members this way.
    pub fn member_order(mut self, order: MemberOrder) -> Self {
        self.order = order;
        self
    }

    /// The seq the next event gets (to write gaps and repeats).
    pub fn next_seq(mut self, seq: u64) -> Self {
        self.next_seq = seq;
        self
    }

    /// Appends one event; `data` is written verbatim.
    pub fn event(self, event_type: &str, data: &str) -> Self {
        self.batch(vec![(event_type, data)])
    }

    /// Appends events as one batch: the first record carries `batch` when
    /// there are two or more.
    pub fn batch(mut self, events: Vec<(&str, &str)>) -> Self {
        let count = events.len() as u64;
        let mut unit = Vec::with_capacity(events.len());
        for (index, (event_type, data)) in events.into_iter().enumerate() {
            unit.push(SpecEvent {
                seq: self.next_seq,
                ts: self.next_ts,
                batch: (index == 0 && count >= 2).then_some(count),
                event_type: event_type.to_owned(),
                data: data.to_owned(),
            });
            self.next_seq += 1;
            self.next_ts += 7;
        }
        self.units.push(Unit::Events(unit));
        self
    }

    /// Appends a line whose body is `body`, signed with the id (a right CRC
    /// over whatever `body` holds). It takes no seq.
    pub fn signed(mut self, body: &str) -> Self {
        self.units.push(Unit::Signed(body.to_owned()));
        self
    }

    /// Appends bytes as they are (a `\n` only if they hold one).
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.units.push(Unit::Raw(bytes.to_vec()));
        self
    }

    /// The header's body (line 1 up to `,"crc":`).
    pub fn header_line_body(&self) -> String {
        if let Some(body) = &self.header_body {
            return body.clone();
        }
        let nullable = |value: &Option<String>| value.as_deref().map_or("null".into(), json_string);
        let value = |name: &str| match name {
            "kind" => json_string("header"),
            "formatVersion" => self.format_version.to_string(),
            "id" => json_string(&self.id),
            "createdAt" => self.created_at.to_string(),
            "cwd" => json_string(&self.cwd),
            "parentSession" => nullable(&self.parent_session),
            "seedLength" => self.seed_length.to_string(),
            "delegationDepth" => self.delegation_depth.to_string(),
            "sandboxMode" => nullable(&self.sandbox_mode),
            "approvalPolicy" => nullable(&self.approval_policy),
            other => unreachable!("{other} is not a header member"),
        };
        let order = permute(&WRITER_HEADER_ORDER, self.order, 0);
        let members: Vec<String> = order
            .iter()
            .map(|name| format!("{}:{}", json_string(name), value(name)))
            .collect();
        format!("{{{}", members.join(","))
    }

    /// Writes the log.
    pub fn log(&self) -> SpecLog {
        let mut bytes = Vec::new();
        let mut lines = Vec::new();
        let mut push = |bytes: &mut Vec<u8>, text: &[u8], unit: usize, event: Option<SpecEvent>| {
            let start = bytes.len();
            bytes.extend_from_slice(text);
            lines.push(SpecLine {
                range: start..bytes.len(),
                unit,
                event,
            });
        };
        push(
            &mut bytes,
            sign(&self.id, &self.header_line_body()).as_bytes(),
            0,
            None,
        );
        for (index, unit) in self.units.iter().enumerate() {
            let unit_number = index + 1;
            match unit {
                Unit::Events(events) => {
                    for event in events {
                        let order = permute(&WRITER_EVENT_ORDER, self.order, event.seq);
                        let body = event_body(event, &order);
                        let line = sign(&self.id, &body);
                        push(
                            &mut bytes,
                            line.as_bytes(),
                            unit_number,
                            Some(event.clone()),
                        );
                    }
                }
                Unit::Signed(body) => push(
                    &mut bytes,
                    sign(&self.id, body).as_bytes(),
                    unit_number,
                    None,
                ),
                Unit::Raw(raw) => push(&mut bytes, raw, unit_number, None),
            }
        }
        SpecLog {
            id: self.id.clone(),
            bytes,
            lines,
        }
    }

    /// The log's bytes.
    pub fn build(&self) -> Vec<u8> {
        self.log().bytes
    }
}

impl SpecLog {
    /// Every built event, in order.
    pub fn events(&self) -> Vec<SpecEvent> {
        self.lines.iter().filter_map(|l| l.event.clone()).collect()
    }

    /// Byte offsets at which a unit (the header, an event or a whole batch)
    /// has just ended: the lengths a good prefix can have.
    pub fn unit_ends(&self) -> Vec<usize> {
        let mut ends = Vec::new();
        for (index, line) in self.lines.iter().enumerate() {
            let next_unit = self.lines.get(index + 1).map(|l| l.unit);
            if next_unit != Some(line.unit) {
                ends.push(line.range.end);
            }
        }
        ends
    }

    /// The 0-based index of the first line of `unit`.
    pub fn first_line_of_unit(&self, unit: usize) -> usize {
        self.lines
            .iter()
            .position(|l| l.unit == unit)
            .expect("every unit has a line")
    }

    /// The 0-based index of the line holding byte `offset`.
    pub fn line_at(&self, offset: usize) -> usize {
        self.lines
            .iter()
            .position(|l| l.range.contains(&offset))
            .expect("the offset is inside the log")
    }
}

/// A string as a JSON string literal (escaped as `serde_json` escapes).
pub fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string always serialises")
}

/// CRC-32 (IEEE) over the id's bytes followed by the body's bytes.
pub fn spec_crc(id: &str, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(id.as_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// `body` + `,"crc":"xxxxxxxx"}` + `\n`, the CRC taken for session `id`.
pub fn sign(id: &str, body: &str) -> String {
    format!(
        "{body},\"crc\":\"{:08x}\"}}\n",
        spec_crc(id, body.as_bytes())
    )
}

/// The body of an event record with its members in `order`.
pub fn event_body(event: &SpecEvent, order: &[EventMember]) -> String {
    let members: Vec<String> = order
        .iter()
        .filter_map(|member| match member {
            EventMember::Seq => Some(format!("\"seq\":{}", event.seq)),
            EventMember::Ts => Some(format!("\"ts\":{}", event.ts)),
            EventMember::Batch => event.batch.map(|n| format!("\"batch\":{n}")),
            EventMember::Type => Some(format!("\"type\":{}", json_string(&event.event_type))),
            EventMember::Data => Some(format!("\"data\":{}", event.data)),
        })
        .collect();
    format!("{{{}", members.join(","))
}

fn permute<T: Copy>(spec: &[T], order: MemberOrder, salt: u64) -> Vec<T> {
    let mut members = spec.to_vec();
    match order {
        MemberOrder::Spec => {}
        MemberOrder::Reversed => members.reverse(),
        MemberOrder::Shuffled(seed) => {
            Rng::new(seed ^ salt.wrapping_mul(0x9e37_79b9)).shuffle(&mut members)
        }
    }
    members
}

/// A small deterministic generator (SplitMix64), so logs are reproducible
/// from a seed that proptest can shrink.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// What scanning a whole file gave: the records handed out, and the summary
/// or the corruption that stopped it.
#[derive(Debug)]
pub struct Scanned {
    /// Records that joined the good prefix, in order.
    pub records: Vec<EventRecord>,
    /// The end of the scan.
    pub outcome: Result<ScanSummary, Corruption>,
}

/// Scans `bytes` as the store reads a file: lines split on `\n`, the last one
/// unterminated when the file does not end in `\n`.
pub fn scan(bytes: &[u8], expected_id: Option<&str>) -> Scanned {
    let expected = expected_id.map(|id| SessionId::parse(id).expect("a valid expected id"));
    let mut scanner = LogScanner::new(expected);
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let (line, terminated) = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => (&rest[..end], true),
            None => (rest, false),
        };
        if let Err(corruption) = scanner.push_line(line, terminated, offset as u64, &mut records) {
            return Scanned {
                records,
                outcome: Err(corruption),
            };
        }
        offset += line.len() + usize::from(terminated);
    }
    Scanned {
        records,
        outcome: scanner.finish(),
    }
}

/// The byte offset where 1-based line `line` starts in `bytes`.
pub fn line_offset(bytes: &[u8], line: u64) -> u64 {
    let mut seen = 1;
    if line == 1 {
        return 0;
    }
    for (index, byte) in bytes.iter().enumerate() {
        if *byte == b'\n' {
            seen += 1;
            if seen == line {
                return index as u64 + 1;
            }
        }
    }
    panic!("the log has no line {line}")
}

/// Asserts that `records` are exactly `expected`, byte for byte.
pub fn assert_same_events(records: &[EventRecord], expected: &[SpecEvent]) {
    let got: Vec<SpecEvent> = records
        .iter()
        .map(|r| SpecEvent {
            seq: r.seq(),
            ts: r.ts(),
            batch: r.batch(),
            event_type: r.event_type().to_owned(),
            data: r.data().to_owned(),
        })
        .collect();
    assert_eq!(got, expected);
}
