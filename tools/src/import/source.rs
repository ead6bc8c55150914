//! What every importer reads: a transcript file split into numbered JSON
//! lines, RFC 3339 times as unix milliseconds, and session ids derived from
//! the ids the tools themselves wrote.
//!
//! A transcript is read whole or refused: a line that is not a JSON object,
//! or a last line cut short, fails the file with its line number, so a
//! broken file imports nothing.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use sessionlog_schema::{compact_json, SessionId, MAX_RECORD_BYTES, MAX_SESSION_ID_LEN};

/// The longest transcript line an import reads: the record limit and 1 MiB
/// for what a mapping leaves out of a line (its metadata). No longer line
/// could give a record.
pub const MAX_LINE_BYTES: usize = MAX_RECORD_BYTES + (1 << 20);

/// One non-blank line of a transcript.
#[derive(Debug, Clone)]
pub struct SourceLine {
    /// 1-based line number in the file.
    pub number: usize,
    /// The byte offset of its first byte in the file (in the text a `.zst`
    /// file decompresses to).
    pub offset: u64,
    /// The line's text, without its line ending.
    pub raw: String,
    /// The line, parsed.
    pub value: Value,
    /// Whether `value` holds the line exactly: every number reads as it
    /// holds it ([`numbers_read_exactly`]), no object names a member twice
    /// (the parser keeps the last), and no string has a lone surrogate
    /// escape (read as U+FFFD). A line that does not is kept whole beside
    /// what it maps to, so that nothing of it is lost.
    pub exact: bool,
}

/// Where in a transcript: a line and the byte offset it starts at. Line 0
/// is before the first line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    /// 1-based line number.
    pub line: usize,
    /// The byte offset of the line's first byte.
    pub offset: u64,
}

impl SourceLine {
    /// Where this line is.
    pub fn place(&self) -> Place {
        Place {
            line: self.number,
            offset: self.offset,
        }
    }

    /// `value`, a value of this line's parse, as the line spells it: its
    /// members in the line's order, its numbers and escapes as written,
    /// compacted. A line that does not read exactly ([`SourceLine::exact`],
    /// kept whole beside what it maps to) and a value that is not part of
    /// the parse give the value as parsed.
    pub fn as_written(&self, value: &Value) -> Json {
        let written = || {
            let path = self.exact.then(|| path_to(&self.value, value))??;
            let mut parser = serde_json::Deserializer::from_str(&self.raw);
            let raw = At(&path).deserialize(&mut parser).ok()??;
            compact_json(raw.get()).ok()
        };
        written().map_or_else(|| Json::Built(value.clone()), Json::Written)
    }
}

/// JSON that an importer writes into an event's data.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// A value the mapping built or read.
    Built(Value),
    /// A value of the source as the source wrote it: compact JSON text,
    /// with its members in their order.
    Written(String),
}

impl Json {
    /// Whether this is JSON `null`.
    pub fn is_null(&self) -> bool {
        match self {
            Json::Built(value) => value.is_null(),
            Json::Written(text) => text == "null",
        }
    }

    /// The JSON text.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Json::Built(value) => value.to_string().into(),
            Json::Written(text) => text.into(),
        }
    }
}

impl From<Value> for Json {
    fn from(value: Value) -> Json {
        Json::Built(value)
    }
}

/// A step from a JSON value into one it holds.
#[derive(Debug)]
enum Step<'a> {
    Member(&'a str),
    Element(usize),
}

/// The steps from `root` to `target`, a value inside it (the very value,
/// not one equal to it); `None` when `target` is not in `root`.
fn path_to<'a>(root: &'a Value, target: &Value) -> Option<Vec<Step<'a>>> {
    if std::ptr::eq(root, target) {
        return Some(Vec::new());
    }
    let (step, mut rest) = match root {
        Value::Object(members) => members
            .iter()
            .find_map(|(name, member)| Some((Step::Member(name), path_to(member, target)?)))?,
        Value::Array(elements) => elements
            .iter()
            .enumerate()
            .find_map(|(index, element)| Some((Step::Element(index), path_to(element, target)?)))?,
        _ => return None,
    };
    rest.insert(0, step);
    Some(rest)
}

/// Reads the JSON text at the end of a path through a document, as the
/// document spells it; `None` when the path leads nowhere. A member named
/// twice is taken last, as the parser takes it.
struct At<'p, 'a>(&'p [Step<'a>]);

impl<'de> DeserializeSeed<'de> for At<'_, '_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, parser: D) -> Result<Self::Value, D::Error> {
        match self.0.split_first() {
            None => <&RawValue>::deserialize(parser).map(Some),
            Some((step, rest)) => parser.deserialize_any(Through { step, rest }),
        }
    }
}

/// Visits the value a step leads through.
struct Through<'p, 'a> {
    step: &'p Step<'a>,
    rest: &'p [Step<'a>],
}

impl<'de> Visitor<'de> for Through<'_, '_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an object or an array")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut members: M) -> Result<Self::Value, M::Error> {
        let mut found = None;
        while let Some(name) = members.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.step {
                Step::Member(wanted) if *wanted == name => {
                    found = members.next_value_seed(At(self.rest))?;
                }
                _ => {
                    members.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut elements: S) -> Result<Self::Value, S::Error> {
        let mut found = None;
        let mut index = 0;
        loop {
            let more = match self.step {
                Step::Element(wanted) if *wanted == index => elements
                    .next_element_seed(At(self.rest))?
                    .map(|raw| found = raw),
                _ => elements.next_element::<IgnoredAny>()?.map(drop),
            };
            if more.is_none() {
                return Ok(found);
            }
            index += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Why a transcript could not be imported, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    /// The file.
    pub file: PathBuf,
    /// The line, when one line is at fault.
    pub line: Option<usize>,
    /// The byte offset that line starts at, when known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub reason: String,
    /// Whether what is wrong is a session the store holds already whose log
    /// is corrupt: the command then exits 2, as every command that meets a
    /// corrupt log does, not 1.
    pub corrupt_store: bool,
}

impl std::error::Error for ImportError {}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match (self.line, self.offset) {
            (Some(line), Some(offset)) => {
                write!(
                    f,
                    "{file} line {line} (byte offset {offset}): {}",
                    self.reason
                )
            }
            (Some(line), None) => write!(f, "{file} line {line}: {}", self.reason),
            (None, _) => write!(f, "{file}: {}", self.reason),
        }
    }
}

impl ImportError {
    /// An error at `place` of `file`; about the file as a whole when the
    /// place is before its first line.
    pub fn at_place(file: &Path, place: Place, reason: impl Into<String>) -> ImportError {
        if place.line == 0 {
            return ImportError::file(file, reason);
        }
        ImportError {
            file: file.to_owned(),
            line: Some(place.line),
            offset: Some(place.offset),
            reason: reason.into(),
            corrupt_store: false,
        }
    }

    /// An error about `file` as a whole.
    pub fn file(file: &Path, reason: impl Into<String>) -> ImportError {
        ImportError {
            file: file.to_owned(),
            line: None,
            offset: None,
            reason: reason.into(),
            corrupt_store: false,
        }
    }
}

/// Splits `bytes` into numbered JSON object lines. Blank lines are skipped;
/// anything else that is not one JSON object fails the file at its line,
/// and a last line without its newline that does not parse is named as cut
/// short (what a crash during a write leaves).
pub fn read_lines(file: &Path, bytes: &[u8]) -> Result<Vec<SourceLine>, ImportError> {
    let mut lines = Vec::new();
    let mut rest = bytes;
    let mut number = 0;
    while !rest.is_empty() {
        number += 1;
        let place = Place {
            line: number,
            offset: (bytes.len() - rest.len()) as u64,
        };
        let (line, ended) = match memchr_newline(rest) {
            Some(at) => {
                let line = &rest[..at];
                rest = &rest[at + 1..];
                (line, true)
            }
            None => {
                let line = rest;
                rest = &[];
                (line, false)
            }
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A byte order mark that an editor on another system put before
        // the first line is no part of it.
        let line = match number {
            1 => line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line),
            _ => line,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Parsed, a line takes many times its size (an array of small
        // numbers, twenty): one too long to give a record is refused
        // before it is parsed, so that a compressed file of one huge line
        // cannot make the import hold gigabytes.
        if line.len() > MAX_LINE_BYTES {
            return Err(ImportError::at_place(
                file,
                place,
                format!(
                    "{} bytes, above the {MAX_LINE_BYTES} a line may hold (a record holds at \
                     most {MAX_RECORD_BYTES} bytes, and what a mapping leaves out of a line is \
                     far less than the rest)",
                    line.len()
                ),
            ));
        }
        let text = std::str::from_utf8(line).map_err(|error| {
            // A last line without its newline that ends inside a
            // character was cut there, as a crash during a write cuts.
            let reason = match (ended, error.error_len()) {
                (false, None) => format!(
                    "the last line is cut short (no newline, and it ends inside a character \
                     at byte {} of the line)",
                    error.valid_up_to()
                ),
                _ => format!("not UTF-8 (byte {} of the line)", error.valid_up_to()),
            };
            ImportError::at_place(file, place, reason)
        })?;
        // A string with a lone surrogate escape (`"\ud83d"`: a tool that
        // cut a string inside a character) is JSON the parser refuses: it
        // is read with U+FFFD in its place, and the line is kept whole.
        let mended = lone_surrogates_replaced(text);
        let parsed = serde_json::from_str(text).or_else(|error| match &mended {
            Some(mended) => serde_json::from_str(mended).map_err(|_| error),
            None => Err(error),
        });
        let value: Value = match parsed {
            Ok(value) => value,
            Err(error) if !ended => {
                return Err(ImportError::at_place(
                    file,
                    place,
                    format!(
                        "the last line is cut short (no newline, and {})",
                        json_error(&error)
                    ),
                ))
            }
            Err(error) => {
                return Err(ImportError::at_place(
                    file,
                    place,
                    format!("not JSON: {}", json_error(&error)),
                ))
            }
        };
        if !value.is_object() {
            return Err(ImportError::at_place(file, place, "not a JSON object"));
        }
        lines.push(SourceLine {
            number,
            offset: place.offset,
            raw: text.trim().to_owned(),
            exact: mended.is_none() && numbers_read_exactly(text) && !names_a_member_twice(text),
            value,
        });
    }
    Ok(lines)
}

/// The JSON text `json` with each escape of a lone surrogate (`\ud83d` not
/// followed by the escape of a low one, or a low one alone) written as
/// `\ufffd`; `None` when it has none.
fn lone_surrogates_replaced(json: &str) -> Option<String> {
    let bytes = json.as_bytes();
    let escape_at = |at: usize| -> Option<u32> {
        let hex = bytes.get(at..at + 6)?;
        if &hex[..2] != b"\\u" {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    let mut in_string = false;
    while let Some(&byte) = bytes.get(at) {
        match (in_string, byte) {
            (false, b'"') | (true, b'"') => {
                in_string = !in_string;
                at += 1;
            }
            (true, b'\\') => match escape_at(at) {
                Some(0xD800..=0xDBFF)
                    if escape_at(at + 6).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low)) =>
                {
                    at += 12;
                }
                Some(0xD800..=0xDFFF) => {
                    let mended = out.get_or_insert_with(String::new);
                    mended.push_str(&json[copied..at]);
                    mended.push_str("\\ufffd");
                    at += 6;
                    copied = at;
                }
                Some(_) => at += 6,
                None => at += 2,
            },
            _ => at += 1,
        }
    }
    out.map(|mut mended| {
        mended.push_str(&json[copied..]);
        mended
    })
}

/// Whether some object of the JSON text `json` (which parses) names a
/// member twice, its names compared as the parser reads them.
pub fn names_a_member_twice(json: &str) -> bool {
    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

    /// Any JSON value, refused when an object in it names a member twice.
    struct Once;

    impl<'de> Deserialize<'de> for Once {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Once, D::Error> {
            deserializer.deserialize_any(OnceVisitor)
        }
    }

    struct OnceVisitor;

    impl<'de> Visitor<'de> for OnceVisitor {
        type Value = Once;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("any JSON value")
        }

        fn visit_bool<E>(self, _: bool) -> Result<Once, E> {
            Ok(Once)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Once, E> {
            Ok(Once)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Once, E> {
            Ok(Once)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Once, E> {
            Ok(Once)
        }
        fn visit_str<E>(self, _: &str) -> Result<Once, E> {
            Ok(Once)
        }
        fn visit_unit<E>(self) -> Result<Once, E> {
            Ok(Once)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Once, A::Error> {
            while seq.next_element::<Once>()?.is_some() {}
            Ok(Once)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Once, A::Error> {
            let mut names = std::collections::HashSet::new();
            while let Some(name) = map.next_key::<String>()? {
                if !names.insert(name) {
                    return Err(de::Error::custom("a member named twice"));
                }
                map.next_value::<Once>()?;
            }
            Ok(Once)
        }
    }

    serde_json::from_str::<Once>(json).is_err()
}

/// A JSON parse error of one line, placed by its column in the line: the
/// parser, given the line alone, calls it line 1 whichever line it is.
fn json_error(error: &serde_json::Error) -> String {
    let message = sessionlog_schema::serde_message(&error.to_string());
    format!("{message} at column {}", error.column())
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Whether a mapping that reads only the members `carried` of `value`
/// (an object) loses nothing of it: every other member is null or an
/// empty array. A value that is not an object holds nothing more.
pub fn carries_all(value: &Value, carried: &[&str]) -> bool {
    value.as_object().is_none_or(|members| {
        members.iter().all(|(name, value)| {
            carried.contains(&name.as_str())
                || value.is_null()
                || value.as_array().is_some_and(Vec::is_empty)
        })
    })
}

/// Whether the members `names` of `value` are each a string, or absent
/// (or null): what a mapping that reads them as strings reads whole. One
/// of another type (a number where a name was) is read as missing, so its
/// line must be kept.
pub fn strings_or_absent(value: &Value, names: &[&str]) -> bool {
    names
        .iter()
        .all(|name| matches!(value.get(name), None | Some(Value::Null | Value::String(_))))
}

/// The string member `key` of `value`, if it is one.
pub fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// An RFC 3339 time (`2025-11-20T16:59:09.857Z`, `…+02:00`) as unix
/// milliseconds; `None` when it is not one or lies before 1970.
pub fn parse_time(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = bytes.get(range)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    if bytes.len() < 19 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    // A date the calendar has not, or a second past a leap second, is no
    // time: the line takes the time of the line before it.
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if bytes.get(at) == Some(&b'.') {
        let start = at + 1;
        let mut end = start;
        while bytes.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == start {
            return None;
        }
        let fraction = &text[start..end.min(start + 3)];
        millis = format!("{fraction:0<3}").parse().ok()?;
        at = end;
    }
    let offset_minutes = match bytes.get(at) {
        Some(b'Z' | b'z') if at + 1 == bytes.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == bytes.len() && bytes[at + 3] == b':' => {
            let (hours, minutes) = (number(at + 1..at + 3)?, number(at + 4..at + 6)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let minutes = hours * 60 + minutes;
            if *sign == b'+' {
                minutes
            } else {
                -minutes
            }
        }
        None => 0,
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second.min(59) - offset_minutes * 60;
    u64::try_from(seconds * 1_000 + millis).ok()
}

/// The days of `month` (1 to 12) in `year`, of the proleptic Gregorian
/// calendar.
fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Whether every number in the JSON text `json` reads exactly as a
/// `serde_json::Value` holds it: an integer within 64 bits, or a number
/// whose value the double it is read as writes again (`1.5`, `1e5`, `0.1`;
/// not `123456789012345678901234567890`, nor `0.10000000000000000001`).
/// The importers map lines through such values, and what they write of a
/// number that does not read exactly would be another number.
pub fn numbers_read_exactly(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => {
                at += 1;
                while let Some(&inside) = bytes.get(at) {
                    match inside {
                        b'\\' => at += 2,
                        b'"' => break,
                        _ => at += 1,
                    }
                }
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                at += 1;
                while bytes.get(at).is_some_and(|byte| {
                    matches!(byte, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                }) {
                    at += 1;
                }
                if !number_reads_exactly(&json[start..at]) {
                    return false;
                }
            }
            _ => at += 1,
        }
    }
    true
}

/// Whether the JSON number `token`, read as serde_json reads it into a
/// value and written again, is the same number.
fn number_reads_exactly(token: &str) -> bool {
    // Most are integers of a few digits, which every 64-bit integer holds.
    let digits = token.strip_prefix('-').unwrap_or(token);
    if digits.len() <= 18 && digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return true;
    }
    let Ok(value) = serde_json::from_str::<Value>(token) else {
        return false;
    };
    let Ok(written) = serde_json::to_string(&value) else {
        return false;
    };
    decimal(token) == decimal(&written)
}

/// A decimal number's value as its sign, its significant digits (no
/// leading or trailing zeros) and the exponent of its last digit; zero has
/// no digits and no sign.
fn decimal(text: &str) -> (bool, String, i64) {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (
            &text[..at],
            text[at + 1..].parse::<i64>().unwrap_or(i64::MAX),
        ),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits = format!("{whole}{fraction}")
        .trim_start_matches('0')
        .to_owned();
    let mut exponent = exponent.saturating_sub(fraction.len() as i64);
    while digits.ends_with('0') {
        digits.pop();
        exponent = exponent.saturating_add(1);
    }
    match digits.is_empty() {
        true => (false, String::new(), 0),
        false => (negative, digits, exponent),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A session id from `prefix` and the parts of a source's own id: each
/// character outside `[A-Za-z0-9_-]` becomes `_`, and when that changed
/// anything or the id would be too long, the id is cut and ends in a hash
/// of the original. Two sources can still meet (a CRC-32 is not unique,
/// and the parts are joined with `-`, which a part may hold): the import
/// then finds the id taken and says so (docs/IMPORT.md, "Session ids").
pub fn derive_session_id(prefix: &str, parts: &[&str]) -> SessionId {
    let original = parts.join("-");
    let mut id = String::with_capacity(prefix.len() + original.len() + 1);
    id.push_str(prefix);
    let mut changed = false;
    for part in parts {
        id.push('-');
        for c in part.chars() {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                id.push(c);
            } else {
                id.push('_');
                changed = true;
            }
        }
    }
    if changed || id.len() > MAX_SESSION_ID_LEN {
        let hash = crc32fast::hash(original.as_bytes());
        id.truncate(MAX_SESSION_ID_LEN - 9);
        id.push_str(&format!("-{hash:08x}"));
    }
    match SessionId::parse(&id) {
        Ok(id) => id,
        // Unreachable: the prefix is ours and every character is allowed.
        Err(_) => panic!("derived session id {id:?} is invalid"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line the parser reads as something else than it is (a lone
    /// surrogate escape read as U+FFFD, a member named twice of which the
    /// parser keeps the last) is read, and marked as not read exactly, so
    /// that it is kept whole beside what it maps to.
    #[test]
    fn a_line_not_read_exactly_is_read_and_marked_so() {
        let text = concat!(
            "{\"t\":\"cut \\ud83d\"}\n",
            "{\"t\":\"pair \\ud83d\\ude00 and \\\\ud83d as text\"}\n",
            "{\"input\":{\"command\":\"cat x\",\"command\":\"rm -rf /\"}}\n",
            "{\"a\":{\"b\":1},\"c\":{\"b\":2}}\n",
            "{\"low\":\"\\udc00 alone\"}\n",
        );
        let lines = read_lines(Path::new("t.jsonl"), text.as_bytes())
            .unwrap_or_else(|error| panic!("{error}"));
        let read: Vec<(bool, String)> = lines
            .iter()
            .map(|line| (line.exact, line.value.to_string()))
            .collect();
        assert_eq!(
            read,
            [
                (false, "{\"t\":\"cut \u{fffd}\"}".to_owned()),
                (
                    true,
                    "{\"t\":\"pair \u{1f600} and \\\\ud83d as text\"}".to_owned()
                ),
                (false, "{\"input\":{\"command\":\"rm -rf /\"}}".to_owned()),
                (true, "{\"a\":{\"b\":1},\"c\":{\"b\":2}}".to_owned()),
                (false, "{\"low\":\"\u{fffd} alone\"}".to_owned()),
            ]
        );
        // The raw text, which is what is kept, is the line as it was.
        assert_eq!(lines[0].raw, "{\"t\":\"cut \\ud83d\"}");
        // A line that is not JSON for another reason still fails.
        let broken = read_lines(Path::new("t.jsonl"), b"{\"t\":\"\\ud83d\" x}\n");
        assert!(broken.is_err());
    }

    #[test]
    fn times_are_read_with_their_fraction_and_offset() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_time("2025-11-20T16:59:09.857Z"),
            Some(1_763_657_949_857)
        );
        assert_eq!(
            parse_time("2025-11-20T18:59:09.8+02:00"),
            Some(1_763_657_949_800)
        );
        assert_eq!(
            parse_time("2025-11-20T16:59:09.857123456Z"),
            Some(1_763_657_949_857)
        );
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2025-13-20T16:59:09Z"), None);
    }

    /// A time the calendar or the clock has not is no time (the line takes
    /// the time of the line before it), never another time: February 31st
    /// once read as March 3rd.
    #[test]
    fn a_date_or_time_that_does_not_exist_is_no_time() {
        for text in [
            "2025-02-31T10:00:00Z",
            "2025-02-29T10:00:00Z",
            "2025-04-31T10:00:00Z",
            "1900-02-29T10:00:00Z",
            "2025-03-03T10:00:99Z",
            "2025-03-03T10:00:61Z",
            "2025-03-03T10:00:00+23:99",
            "2025-03-03T10:00:00+24:00",
            "2025-00-10T10:00:00Z",
            "2025-03-00T10:00:00Z",
        ] {
            assert_eq!(parse_time(text), None, "{text}");
        }
        assert_eq!(parse_time("2024-02-29T00:00:00Z"), Some(1_709_164_800_000));
        assert_eq!(parse_time("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        // A leap second reads as the second before it.
        assert_eq!(
            parse_time("2016-12-31T23:59:60Z"),
            parse_time("2016-12-31T23:59:59Z")
        );
        assert_eq!(
            parse_time("2025-03-03T10:00:00-23:59"),
            Some(1_741_082_340_000)
        );
    }

    #[test]
    fn numbers_that_a_value_changes_are_told_from_those_it_keeps() {
        for exact in [
            r#"{"a":1,"b":-2,"c":1.5,"d":1e5,"e":0.1,"f":18446744073709551615}"#,
            r#"{"g":-9223372036854775808,"h":1.50,"i":100000.0,"j":2.5E-3,"k":-0}"#,
            r#"{"text":"123456789012345678901234567890 \" 1e999"}"#,
            "[]",
        ] {
            assert!(numbers_read_exactly(exact), "{exact}");
        }
        for inexact in [
            r#"{"n":123456789012345678901234567890}"#,
            r#"{"m":18446744073709551616}"#,
            r#"{"x":0.10000000000000000001}"#,
            r#"[1,{"deep":[-99999999999999999999]}]"#,
            r#"{"s":"\\","t":12345678901234567890123}"#,
        ] {
            assert!(!numbers_read_exactly(inexact), "{inexact}");
        }
    }

    #[test]
    fn derived_ids_keep_clean_ids_and_hash_the_others() {
        let clean = derive_session_id("codex", &["019aa234-a2a1-75c3-a9bf-d8425e1785f5"]);
        assert_eq!(clean.as_str(), "codex-019aa234-a2a1-75c3-a9bf-d8425e1785f5");
        let dotted = derive_session_id("claude", &["s1", "agent", "a.b"]);
        let underscored = derive_session_id("claude", &["s1", "agent", "a_b"]);
        assert_ne!(dotted, underscored);
        assert!(dotted.as_str().starts_with("claude-s1-agent-a_b-"));
        let long = "x".repeat(300);
        assert_eq!(
            derive_session_id("codex", &[&long]).as_str().len(),
            MAX_SESSION_ID_LEN
        );
    }

    #[test]
    fn a_cut_last_line_and_a_bad_line_are_named() {
        let file = Path::new("t.jsonl");
        let cut = read_lines(file, b"{\"a\":1}\n\n{\"b\":").expect_err("a cut line fails");
        assert_eq!(cut.line, Some(3));
        assert!(cut.reason.contains("cut short"), "{cut}");
        // Cut inside a character: cut short too, where the same bytes
        // before a newline are not UTF-8.
        let inside =
            read_lines(file, b"{\"a\":1}\n{\"b\":\"caf\xc3").expect_err("a cut line fails");
        assert_eq!(inside.line, Some(2));
        assert!(inside.reason.contains("cut short"), "{inside}");
        let broken = read_lines(file, b"{\"a\":1}\n{\"b\":\"caf\xc3\n").expect_err("not UTF-8");
        assert!(broken.reason.starts_with("not UTF-8"), "{broken}");
        let bad = read_lines(file, b"{\"a\":1}\nnope\n{\"b\":2}\n").expect_err("a bad line fails");
        assert_eq!(bad.line, Some(2));
        assert!(bad.reason.starts_with("not JSON"), "{bad}");
        let lines = read_lines(file, b"{\"a\":1}\r\n\n  \n{\"b\":2}").expect("good lines read");
        assert_eq!(
            lines.iter().map(|l| l.number).collect::<Vec<_>>(),
            vec![1, 4]
        );
    }
}
