//! The hand-written validator behind [`EventView`]: one pass over the bytes
//! of an event's `data`, type by type, without serde's generic visitors.
//!
//! A fold reads every event of a log, so the view's cost is paid once per
//! line: serde's derived visitors copy every escaped string into a scratch
//! buffer and go through a visitor call per key and value. This scanner
//! walks the members of each known type directly, skips what the fold does
//! not read (`arguments`, `result`, `parameters`, unknown members) as
//! serde's `IgnoredAny` skips it, and validates the strings the owned types
//! keep as `String` without copying them.
//!
//! It answers only when it is sure: [`scan_view`] returns `Some` only for
//! data that [`Event::parse`](crate::Event::parse) accepts, with the view
//! that parse gives, and that is one JSON value (whitespace around it
//! allowed). Anything unusual — a member key with an escape, an id with an
//! escape, a repeated or missing member, `null` where a member must be
//! present, a number a `u64` field does not take as it is spelled, a
//! content part whose first member is not `type` or that has a member of
//! no kind of part, deep nesting, any error — is `None`, and the serde
//! mirror and then the owned parse decide, with their messages.

use std::borrow::Cow;

use crate::{
    ApprovalOutcome, ApprovalPolicy, ChildMode, EventType, EventView, MessageRole, Preset,
    SandboxMode, SettleStatus,
};

/// How deep values may nest under `data` before the scanner defers to
/// serde (whose own limit is 128).
const MAX_DEPTH: usize = 64;

/// The view of `data` of a known type, when the scanner is sure of it.
pub(crate) fn scan_view(known: EventType, data: &str) -> Option<EventView<'_>> {
    let mut scanner = Scanner::new(data);
    scanner.skip_whitespace();
    let view = match known {
        EventType::RequestHeader => scanner.request_header()?,
        EventType::TurnStart => EventView::TurnStart {
            turn_id: scanner.single_id(b"turnId")?,
        },
        EventType::TurnEnd => EventView::TurnEnd {
            turn_id: scanner.single_id(b"turnId")?,
        },
        EventType::StepStart => scanner.step_start()?,
        EventType::StepEnd => EventView::StepEnd {
            step_id: scanner.single_id(b"stepId")?,
        },
        EventType::Message => scanner.message()?,
        EventType::ToolStart => scanner.tool_start()?,
        EventType::ToolSettle => scanner.tool_settle()?,
        EventType::ApprovalPolicy => EventView::ApprovalPolicy {
            policy: scanner.single_word(b"policy", ApprovalPolicy::parse)?,
        },
        EventType::SandboxMode => EventView::SandboxMode {
            mode: scanner.single_word(b"mode", SandboxMode::parse)?,
        },
        EventType::PermissionPreset => EventView::PermissionPreset {
            preset: scanner.single_word(b"preset", Preset::parse)?,
        },
        EventType::ApprovalAsked => scanner.approval_asked()?,
        EventType::ApprovalDecided => scanner.approval_decided()?,
        EventType::Checkpoint => scanner.checkpoint()?,
        EventType::ChildCreated => scanner.child_created()?,
        // Seals are rare and small: the serde mirror reads them.
        EventType::Seal => return None,
    };
    scanner.skip_whitespace();
    scanner.at_end().then_some(view)
}

/// How a string's `\u` escapes are held: as serde's `IgnoredAny` holds
/// them (any four hex digits), or as a `String` does (surrogates paired).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unicode {
    Skipped,
    Kept,
}

/// A cursor over `data`.
struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

/// A string value: its text between the quotes, and whether it holds an
/// escape (its text is then not its value).
struct JsonString<'a> {
    raw: &'a str,
    escaped: bool,
}

impl<'a> JsonString<'a> {
    /// The value, when it is the raw text.
    fn plain(&self) -> Option<&'a str> {
        (!self.escaped).then_some(self.raw)
    }
}

/// A member's slot: absent, or seen once (a second sighting is refused).
fn fill<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Scanner {
            text,
            bytes: text.as_bytes(),
            at: 0,
        }
    }

    fn at_end(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// The byte `expected` after optional whitespace.
    fn token(&mut self, expected: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == expected).then(|| self.at += 1)
    }

    /// The members of an object, each handed to `member` with its key (a
    /// key with an escape is refused); `member` reads the value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.token(b'{')?;
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            let key = self.string(Unicode::Skipped)?.plain()?;
            self.token(b':')?;
            self.skip_whitespace();
            member(self, key.as_bytes())?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The elements of an array, each read by `element`.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.token(b'[')?;
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            element(self)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string at the cursor, its escapes checked as `unicode` says.
    fn string(&mut self, unicode: Unicode) -> Option<JsonString<'a>> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            at = string_stop(self.bytes, at)?;
            if self.bytes[at] < 0x20 {
                return None;
            }
            if self.bytes[at] == b'"' {
                self.at = at + 1;
                return Some(JsonString {
                    raw: &self.text[start..at],
                    escaped,
                });
            }
            escaped = true;
            at = self.escape(at + 1, unicode)?;
        }
    }

    /// The escape whose letter is at `at`; the index after it.
    fn escape(&self, at: usize, unicode: Unicode) -> Option<usize> {
        match self.bytes.get(at)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 1),
            b'u' => {
                let unit = self.hex4(at + 1)?;
                let after = at + 5;
                match unicode {
                    Unicode::Skipped => Some(after),
                    Unicode::Kept => match unit {
                        0xD800..=0xDBFF => {
                            // A leading surrogate: a `String` needs its
                            // trailing half right after it.
                            if self.bytes.get(after..after + 2)? != b"\\u" {
                                return None;
                            }
                            let low = self.hex4(after + 2)?;
                            (0xDC00..=0xDFFF).contains(&low).then_some(after + 6)
                        }
                        0xDC00..=0xDFFF => None,
                        _ => Some(after),
                    },
                }
            }
            _ => None,
        }
    }

    /// Four hex digits at `at`, as a code unit.
    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.bytes.get(at..at + 4)?;
        let mut unit = 0;
        for &digit in digits {
            unit = unit * 16 + char::from(digit).to_digit(16)?;
        }
        Some(unit)
    }

    /// A string kept as a `String` by the owned parse (validated, not kept).
    fn any_string(&mut self) -> Option<()> {
        self.string(Unicode::Kept).map(drop)
    }

    /// A string the fold keeps: borrowed, and only without escapes.
    fn id(&mut self) -> Option<Cow<'a, str>> {
        self.string(Unicode::Kept)?.plain().map(Cow::Borrowed)
    }

    /// A vocabulary word, spelled without escapes.
    fn word<T>(&mut self, parse: fn(&str) -> Option<T>) -> Option<T> {
        parse(self.string(Unicode::Kept)?.plain()?)
    }

    /// An unsigned integer spelled as a `u64` takes it exactly: digits
    /// without a leading zero, no fraction or exponent, no overflow.
    fn unsigned(&mut self) -> Option<u64> {
        let rest = &self.bytes[self.at..];
        let digits = rest
            .iter()
            .position(|byte| !byte.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut value: u64 = 0;
        for &digit in &rest[..digits] {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        self.at += digits;
        Some(value)
    }

    /// Any JSON value, skipped as serde's `IgnoredAny` skips it.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(|scanner, _| scanner.skip_value(depth + 1)),
            b'[' => self.array(|scanner| scanner.skip_value(depth + 1)),
            b'"' => self.string(Unicode::Skipped).map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.at..]
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    /// A number by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)?
    /// ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => {
                self.at += 1;
                if self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
                    return None;
                }
            }
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    // The known types, member for member as in `event.rs`.

    /// An object whose only known member is the id `name`.
    fn single_id(&mut self, name: &[u8]) -> Option<Cow<'a, str>> {
        let mut id = None;
        self.object(|scanner, key| {
            if key == name {
                fill(&mut id, scanner.id()?)
            } else {
                scanner.skip_value(1)
            }
        })?;
        id
    }

    /// An object whose only known member is the vocabulary word `name`.
    fn single_word<T>(&mut self, name: &[u8], parse: fn(&str) -> Option<T>) -> Option<T> {
        let mut value = None;
        self.object(|scanner, key| {
            if key == name {
                fill(&mut value, scanner.word(parse)?)
            } else {
                scanner.skip_value(1)
            }
        })?;
        value
    }

    fn request_header(&mut self) -> Option<EventView<'a>> {
        let (mut provider, mut model, mut policy, mut sandbox, mut tools) =
            (None, None, None, None, None);
        self.object(|scanner, key| match key {
            b"provider" => fill(&mut provider, scanner.any_string()?),
            b"model" => fill(&mut model, scanner.any_string()?),
            b"approvalPolicy" => fill(&mut policy, scanner.word(ApprovalPolicy::parse)?),
            b"sandboxMode" => fill(&mut sandbox, scanner.word(SandboxMode::parse)?),
            b"tools" => fill(&mut tools, scanner.array(Self::tool_definition)?),
            _ => scanner.skip_value(1),
        })?;
        provider.and(model).and(sandbox).and(tools)?;
        Some(EventView::RequestHeader {
            approval_policy: policy?,
        })
    }

    fn tool_definition(&mut self) -> Option<()> {
        let (mut name, mut description, mut parameters) = (None, None, None);
        self.object(|scanner, key| match key {
            b"name" => fill(&mut name, scanner.any_string()?),
            b"description" => fill(&mut description, scanner.any_string()?),
            b"parameters" => fill(&mut parameters, scanner.skip_value(3)?),
            _ => scanner.skip_value(3),
        })?;
        name.and(description).and(parameters)
    }

    fn step_start(&mut self) -> Option<EventView<'a>> {
        let (mut step_id, mut turn_id) = (None, None);
        self.object(|scanner, key| match key {
            b"stepId" => fill(&mut step_id, scanner.id()?),
            b"turnId" => fill(&mut turn_id, scanner.id()?),
            _ => scanner.skip_value(1),
        })?;
        Some(EventView::StepStart {
            step_id: step_id?,
            turn_id: turn_id?,
        })
    }

    fn message(&mut self) -> Option<EventView<'a>> {
        let (mut role, mut source_kind, mut content) = (None, None, None);
        self.object(|scanner, key| match key {
            b"role" => fill(&mut role, scanner.word(MessageRole::parse)?),
            b"source" => fill(&mut source_kind, scanner.message_source()?),
            b"content" => fill(&mut content, scanner.array(Self::content_part)?),
            _ => scanner.skip_value(1),
        })?;
        role.and(content)?;
        Some(EventView::Message {
            source_kind: source_kind?,
        })
    }

    /// A message's source; its kind.
    fn message_source(&mut self) -> Option<Cow<'a, str>> {
        let (mut kind, mut sender, mut name) = (None, None, None);
        self.object(|scanner, key| match key {
            b"kind" => fill(&mut kind, scanner.id()?),
            b"senderSessionId" => fill(&mut sender, scanner.any_string()?),
            b"name" => fill(&mut name, scanner.any_string()?),
            _ => scanner.skip_value(2),
        })?;
        kind
    }

    /// A content part in the form writers use: `type` first, then only the
    /// members of that kind of part (the owned parse buffers a part's
    /// members before it reads them, which holds numbers and strings to
    /// more than a skip does, so any other member is left to it).
    fn content_part(&mut self) -> Option<()> {
        let mut kind = None;
        let (mut text, mut media_type, mut name, mut size, mut data) =
            (None, None, None, None, None);
        self.object(|scanner, key| {
            let Some(kind) = kind else {
                if key != b"type" {
                    return None;
                }
                kind = Some(part_kind(scanner.string(Unicode::Kept)?.plain()?)?);
                return Some(());
            };
            match (kind, key) {
                (PartKind::Text, b"text") => fill(&mut text, scanner.any_string()?),
                (PartKind::Image | PartKind::Attachment, b"mediaType") => {
                    fill(&mut media_type, scanner.any_string()?)
                }
                (PartKind::Image | PartKind::Attachment, b"name") => {
                    fill(&mut name, scanner.any_string()?)
                }
                (PartKind::Image | PartKind::Attachment, b"size") => {
                    fill(&mut size, scanner.unsigned()?)
                }
                (PartKind::Image | PartKind::Attachment, b"data") => {
                    fill(&mut data, scanner.any_string()?)
                }
                _ => None,
            }
        })?;
        match kind? {
            PartKind::Text => text,
            PartKind::Image => media_type,
            PartKind::Attachment => name,
        }
    }

    fn tool_start(&mut self) -> Option<EventView<'a>> {
        let (mut call_id, mut step_id, mut name, mut arguments, mut parent_call_id) =
            (None, None, None, None, None);
        self.object(|scanner, key| match key {
            b"callId" => fill(&mut call_id, scanner.id()?),
            b"stepId" => fill(&mut step_id, scanner.id()?),
            b"name" => fill(&mut name, scanner.id()?),
            b"arguments" => fill(&mut arguments, scanner.skip_value(1)?),
            b"parentCallId" => fill(&mut parent_call_id, scanner.any_string()?),
            _ => scanner.skip_value(1),
        })?;
        arguments?;
        Some(EventView::ToolStart {
            call_id: call_id?,
            step_id: step_id?,
            name: name?,
        })
    }

    fn tool_settle(&mut self) -> Option<EventView<'a>> {
        let (mut call_id, mut status, mut result, mut error) = (None, None, None, None);
        self.object(|scanner, key| match key {
            b"callId" => fill(&mut call_id, scanner.id()?),
            b"status" => fill(&mut status, scanner.word(SettleStatus::parse)?),
            // Any value but null (an optional member is never null; the
            // forms refuse it, with their message).
            b"result" if scanner.peek()? == b'n' => None,
            b"result" => fill(&mut result, scanner.skip_value(1)?),
            b"error" => fill(&mut error, scanner.tool_error()?),
            _ => scanner.skip_value(1),
        })?;
        status?;
        Some(EventView::ToolSettle { call_id: call_id? })
    }

    fn tool_error(&mut self) -> Option<()> {
        let (mut name, mut code, mut message, mut reason) = (None, None, None, None);
        self.object(|scanner, key| match key {
            b"name" => fill(&mut name, scanner.any_string()?),
            b"code" => fill(&mut code, scanner.any_string()?),
            b"message" => fill(&mut message, scanner.any_string()?),
            b"reason" => fill(&mut reason, scanner.any_string()?),
            _ => scanner.skip_value(2),
        })?;
        name.and(code)
    }

    fn approval_asked(&mut self) -> Option<EventView<'a>> {
        let (mut request_id, mut turn_id, mut tool, mut reason, mut call_id) =
            (None, None, None, None, None);
        self.object(|scanner, key| match key {
            b"requestId" => fill(&mut request_id, scanner.id()?),
            b"turnId" => fill(&mut turn_id, scanner.id()?),
            b"tool" => fill(&mut tool, scanner.any_string()?),
            b"reason" => fill(&mut reason, scanner.any_string()?),
            b"callId" => fill(&mut call_id, scanner.any_string()?),
            _ => scanner.skip_value(1),
        })?;
        tool?;
        Some(EventView::ApprovalAsked {
            request_id: request_id?,
            turn_id: turn_id?,
        })
    }

    fn approval_decided(&mut self) -> Option<EventView<'a>> {
        let (mut request_id, mut outcome) = (None, None);
        self.object(|scanner, key| match key {
            b"requestId" => fill(&mut request_id, scanner.id()?),
            b"outcome" => fill(&mut outcome, scanner.word(ApprovalOutcome::parse)?),
            _ => scanner.skip_value(1),
        })?;
        outcome?;
        Some(EventView::ApprovalDecided {
            request_id: request_id?,
        })
    }

    fn checkpoint(&mut self) -> Option<EventView<'a>> {
        let (mut summary, mut through_seq) = (None, None);
        self.object(|scanner, key| match key {
            b"summary" => fill(&mut summary, scanner.any_string()?),
            b"throughSeq" => fill(&mut through_seq, scanner.unsigned()?),
            _ => scanner.skip_value(1),
        })?;
        summary.and(through_seq)?;
        Some(EventView::Checkpoint)
    }

    fn child_created(&mut self) -> Option<EventView<'a>> {
        let (mut child, mut mode) = (None, None);
        self.object(|scanner, key| match key {
            b"childSessionId" => fill(&mut child, scanner.any_string()?),
            b"mode" => fill(&mut mode, scanner.word(ChildMode::parse)?),
            _ => scanner.skip_value(1),
        })?;
        child.and(mode)?;
        Some(EventView::ChildCreated)
    }
}

/// The index of the first byte from `at` on that ends a string's plain
/// run: `"`, `\\` or a control character (which a string may not hold).
/// Eight bytes at a time for the first [`SHORT_RUN`] bytes, as the ids and
/// short texts of a log are read, where a call to a vectorised search
/// costs more than it saves; past them (a tool's output, a message) in
/// blocks of [`LONG_RUN_BLOCK`] bytes, each tested whole by a loop the
/// compiler turns into vector compares.
fn string_stop(bytes: &[u8], mut at: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte of `word` below `n` (exact for the lowest
    // such byte, which is the one used).
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    let zero = |word: u64| below(word, 1);
    let word_stop = |chunk: &[u8]| {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let stops = zero(word ^ (ONES * u64::from(b'"')))
            | zero(word ^ (ONES * u64::from(b'\\')))
            | below(word, 0x20);
        (stops != 0).then(|| (stops.trailing_zeros() / 8) as usize)
    };
    let short_end = at.saturating_add(SHORT_RUN);
    while at < short_end {
        let Some(chunk) = bytes.get(at..at + 8) else {
            break;
        };
        if let Some(stop) = word_stop(chunk) {
            return Some(at + stop);
        }
        at += 8;
    }
    while let Some(block) = bytes.get(at..at + LONG_RUN_BLOCK) {
        // Every byte tested, none skipped at the first stop: the loop the
        // compiler vectorises.
        let stops = block
            .iter()
            .fold(false, |stops, &byte| stops | is_string_stop(byte));
        if stops {
            return block
                .iter()
                .position(|&byte| is_string_stop(byte))
                .map(|stop| at + stop);
        }
        at += LONG_RUN_BLOCK;
    }
    while let Some(chunk) = bytes.get(at..at + 8) {
        if let Some(stop) = word_stop(chunk) {
            return Some(at + stop);
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    let stop = rest.iter().position(|&byte| is_string_stop(byte))?;
    Some(at + stop)
}

/// Bytes of a string's plain run read eight at a time before
/// [`string_stop`] reads it in blocks.
const SHORT_RUN: usize = 32;

/// The block [`string_stop`] tests at once past a string's first bytes.
const LONG_RUN_BLOCK: usize = 64;

/// Whether `byte` ends a string's plain run ([`string_stop`]).
fn is_string_stop(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// The kind of a content part, by its `type`.
#[derive(Clone, Copy)]
enum PartKind {
    Text,
    Image,
    Attachment,
}

/// The kind of part `type` names.
fn part_kind(type_name: &str) -> Option<PartKind> {
    match type_name {
        "text" => Some(PartKind::Text),
        "image" => Some(PartKind::Image),
        "attachment" => Some(PartKind::Attachment),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::de::IgnoredAny;

    use super::*;
    use crate::Event;

    /// When the scanner answers, the owned parse accepts `data` with the
    /// same view and `data` is one JSON value; and the view as a whole
    /// (scanner, serde mirror, owned parse) agrees with the owned parse.
    fn check(event_type: &str, data: &str) -> Option<EventView<'static>> {
        let known = EventType::parse(event_type).expect("a known type");
        let owned = Event::parse(event_type, data);
        let scanned = scan_view(known, data).map(EventView::into_owned);
        if let Some(view) = &scanned {
            let event = owned.as_ref().unwrap_or_else(|error| {
                panic!("{event_type} {data}: scanned {view:?}, owned parse refuses: {error}")
            });
            assert_eq!(&EventView::of(event), view, "{event_type} {data}");
            assert!(
                serde_json::from_str::<IgnoredAny>(data).is_ok(),
                "{event_type} {data}: scanned, but not JSON"
            );
        }
        match (&owned, EventView::parse(event_type, data)) {
            (Ok(event), Ok(view)) => assert_eq!(EventView::of(event), view, "{data}"),
            (Err(owned), Err(viewed)) => assert_eq!(owned, &viewed, "{data}"),
            (owned, viewed) => panic!("{event_type} {data}: owned {owned:?}, view {viewed:?}"),
        }
        scanned
    }

    #[test]
    fn the_forms_writers_use_are_scanned() {
        let cases = [
            ("turn/start", r#"{"turnId":"t1"}"#),
            ("step/start", r#"{"stepId":"s","turnId":"t"}"#),
            ("step/end", r#" {"stepId":"s"} "#),
            (
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"caf\u00e9 \"q\" \n \ud83d\ude00 →"}]}"#,
            ),
            (
                "message",
                r#"{"role":"user","source":{"kind":"agent-message","senderSessionId":"p","name":"n"},"content":[{"type":"image","mediaType":"image/png","name":"s.png","size":48213,"data":"AAA"},{"type":"attachment","name":"f","mediaType":"text/plain","size":0}]}"#,
            ),
            (
                "tool/start",
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{"a":[1,-2.5e+3,"x\u0000",true,false,null,{}]},"parentCallId":"p"}"#,
            ),
            (
                "tool/settle",
                r#"{"callId":"c","status":"ok","result":{"stdout":"\ud800"}}"#,
            ),
            (
                "tool/settle",
                r#"{"callId":"c","status":"error","result":[null],"error":{"name":"E","code":"C","message":"m","reason":"r"}}"#,
            ),
            (
                "request/header",
                r#"{"provider":"p","model":"m","approvalPolicy":"never","sandboxMode":"read-only","tools":[{"name":"n","description":"d","parameters":{"type":"object"}}]}"#,
            ),
            ("approval/policy", r#"{"policy":"ask"}"#),
            ("sandbox/mode", r#"{"mode":"danger-full-access"}"#),
            ("permission/preset", r#"{"preset":"auto"}"#),
            (
                "approval/asked",
                r#"{"requestId":"r","turnId":"t","tool":"shell","reason":"w","callId":"c"}"#,
            ),
            (
                "approval/decided",
                r#"{"requestId":"r","outcome":"rejected"}"#,
            ),
            (
                "checkpoint",
                r#"{"summary":"s","throughSeq":18446744073709551615}"#,
            ),
            (
                "child/created",
                r#"{"childSessionId":"k","mode":"one-shot"}"#,
            ),
        ];
        for (event_type, data) in cases {
            assert!(check(event_type, data).is_some(), "{event_type} {data}");
        }
    }

    #[test]
    fn what_the_scanner_is_unsure_of_is_left_to_the_serde_mirror_and_the_owned_parse() {
        let cases = [
            ("turn/start", r#"{"turnId":"t\u00e91"}"#),
            ("turn/start", r#"{"turnId":"\ud800"}"#),
            ("turn/start", r#"{"turn\u0049d":"t"}"#),
            ("turn/start", r#"{"turnId":"a","turnId":"a"}"#),
            ("turn/start", r#"["t"]"#),
            ("turn/start", r#"{"turnId":null}"#),
            ("turn/start", r#"{"turnId":"t"}x"#),
            (
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"text":"a","type":"text"}]}"#,
            ),
            (
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a","extra":1e999}]}"#,
            ),
            (
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"a","extra":"\ud800"}]}"#,
            ),
            (
                "message",
                r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"image","mediaType":"x","size":1.0}]}"#,
            ),
            (
                "tool/start",
                r#"{"callId":"c","stepId":"s","name":"n","arguments":1,"parentCallId":null}"#,
            ),
            (
                "checkpoint",
                r#"{"summary":"s","throughSeq":18446744073709551616}"#,
            ),
            ("checkpoint", r#"{"summary":"s","throughSeq":03}"#),
        ];
        for (event_type, data) in cases {
            assert!(check(event_type, data).is_none(), "{event_type} {data}");
        }
    }

    /// A JSON value's text: often what some member expects, often not.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop::sample::select(vec![
            r#""t1""#,
            r#""c""#,
            r#""""#,
            r#""ask""#,
            r#""never""#,
            r#""read-only""#,
            r#""danger-full-access""#,
            r#""full-access""#,
            r#""auto""#,
            r#""user""#,
            r#""ok""#,
            r#""error""#,
            r#""rejected""#,
            r#""one-shot""#,
            r#""text""#,
            r#""image""#,
            r#""attachment""#,
            r#""a\nb""#,
            r#""\u00e9""#,
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud83d\ude00""#,
            r#""\ud83dx""#,
            r#""\ud83d\u0041""#,
            r#""\x""#,
            "\"tab\there\"",
            r#""\"""#,
            "0",
            "7",
            "-1",
            "1.5",
            "1e999",
            "007",
            "-0",
            "1.",
            "18446744073709551616",
            "null",
            "true",
            "false",
            "[]",
            "{}",
            r#"[1,[2,{"a":null}]]"#,
            r#"{"a":"\ud800"}"#,
            "nul",
            r#""unterminated"#,
        ]);
        leaf.prop_map(str::to_owned)
            .prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3)
                        .prop_map(|items| format!("[{}]", items.join(","))),
                    prop::collection::vec((key(), inner), 0..4).prop_map(|members| {
                        let members: Vec<String> = members
                            .iter()
                            .map(|(key, value)| format!("\"{key}\":{value}"))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }),
                ]
            })
    }

    /// A member key: every member of every known type, and a few others.
    fn key() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "turnId",
            "stepId",
            "callId",
            "name",
            "arguments",
            "parentCallId",
            "status",
            "result",
            "error",
            "code",
            "message",
            "reason",
            "role",
            "source",
            "kind",
            "senderSessionId",
            "content",
            "type",
            "text",
            "mediaType",
            "size",
            "data",
            "provider",
            "model",
            "approvalPolicy",
            "sandboxMode",
            "tools",
            "description",
            "parameters",
            "policy",
            "mode",
            "preset",
            "requestId",
            "tool",
            "outcome",
            "summary",
            "throughSeq",
            "childSessionId",
            "other",
            r"t\u0065xt",
        ])
    }

    /// The members of a valid event of type `known`.
    fn valid_members(known: EventType) -> Vec<(&'static str, String)> {
        let members: &[(&str, &str)] = match known {
            EventType::RequestHeader => &[
                ("provider", r#""p""#),
                ("model", r#""m""#),
                ("approvalPolicy", r#""ask""#),
                ("sandboxMode", r#""read-only""#),
                (
                    "tools",
                    r#"[{"name":"n","description":"d","parameters":{}}]"#,
                ),
            ],
            EventType::TurnStart | EventType::TurnEnd => &[("turnId", r#""t""#)],
            EventType::StepStart => &[("stepId", r#""s""#), ("turnId", r#""t""#)],
            EventType::StepEnd => &[("stepId", r#""s""#)],
            EventType::Message => &[
                ("role", r#""user""#),
                ("source", r#"{"kind":"user"}"#),
                (
                    "content",
                    r#"[{"type":"text","text":"a"},{"type":"image","mediaType":"m","size":1}]"#,
                ),
            ],
            EventType::ToolStart => &[
                ("callId", r#""c""#),
                ("stepId", r#""s""#),
                ("name", r#""n""#),
                ("arguments", "{}"),
            ],
            EventType::ToolSettle => &[("callId", r#""c""#), ("status", r#""ok""#)],
            EventType::ApprovalPolicy => &[("policy", r#""never""#)],
            EventType::SandboxMode => &[("mode", r#""read-only""#)],
            EventType::PermissionPreset => &[("preset", r#""auto""#)],
            EventType::ApprovalAsked => &[
                ("requestId", r#""r""#),
                ("turnId", r#""t""#),
                ("tool", r#""n""#),
            ],
            EventType::ApprovalDecided => &[("requestId", r#""r""#), ("outcome", r#""rejected""#)],
            EventType::Checkpoint => &[("summary", r#""s""#), ("throughSeq", "3")],
            EventType::ChildCreated => {
                &[("childSessionId", r#""k""#), ("mode", r#""continuable""#)]
            }
            EventType::Seal => &[
                ("throughSeq", "3"),
                (
                    "chain",
                    r#""sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff""#,
                ),
            ],
        };
        members
            .iter()
            .map(|(key, value)| (*key, (*value).to_owned()))
            .collect()
    }

    /// An object of `members` in order, `space` between its tokens.
    fn object(members: &[(&str, String)], space: &str) -> String {
        let members: Vec<String> = members
            .iter()
            .map(|(key, value)| format!("\"{key}\"{space}:{space}{value}"))
            .collect();
        format!("{space}{{{}}}{space}", members.join(&format!(",{space}")))
    }

    /// Where a string's plain run from `from` ends, searched byte by byte.
    fn first_stop(bytes: &[u8], from: usize) -> Option<usize> {
        bytes
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, &byte)| byte == b'"' || byte == b'\\' || byte < 0x20)
            .map(|(index, _)| index)
    }

    #[test]
    fn a_string_run_stops_at_its_first_stop_wherever_it_lies() {
        // Every length up to 200 (the words, the blocks from the 32nd byte
        // on, the words and bytes after them), one stop at every place or
        // none, each of the 34 stop bytes in turn among plain bytes that
        // sit next to them in value, searched from every start up to 40
        // and from around the stop.
        let stops: Vec<u8> = (0..0x20).chain([b'"', b'\\']).collect();
        let plain = [b'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xdc, 0xff];
        for len in 0..=200_usize {
            let run: Vec<u8> = (0..len).map(|i| plain[i % plain.len()]).collect();
            for place in 0..=len {
                let mut bytes = run.clone();
                if let Some(byte) = bytes.get_mut(place) {
                    *byte = stops[(place + len) % stops.len()];
                }
                let starts = (0..=len.min(40)).chain(place.saturating_sub(1)..=place + 1);
                for from in starts {
                    assert_eq!(
                        string_stop(&bytes, from),
                        first_stop(&bytes, from),
                        "length {len}, stop at {place}, from {from}"
                    );
                }
            }
        }
    }

    proptest! {
        #[test]
        fn a_string_run_stops_where_a_byte_by_byte_search_stops(
            // Runs short and long (past the eight-byte words, into the
            // blocks and after them), the stops rare or frequent.
            bytes in prop_oneof![
                prop::collection::vec(
                    prop_oneof![Just(b'"'), Just(b'\\'), Just(0x1f_u8), Just(0x20), Just(0x7f), Just(0x80), any::<u8>(), b'a'..=b'z'],
                    0..40,
                ),
                prop::collection::vec(
                    prop_oneof![
                        200 => prop_oneof![b'a'..=b'z', Just(0x20_u8), Just(0x7f_u8), 0x80_u8..=0xff],
                        1 => prop_oneof![Just(b'"'), Just(b'\\'), 0x00_u8..0x20],
                    ],
                    0..400,
                ),
            ],
            from in 0usize..60,
        ) {
            prop_assert_eq!(string_stop(&bytes, from), first_stop(&bytes, from));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn the_scanner_accepts_only_what_the_owned_parse_accepts_with_its_view(
            known in prop::sample::select(EventType::ALL),
            valid in prop::bool::weighted(0.7),
            drop_one in prop::option::weighted(0.2, 0usize..5),
            extra in prop::collection::vec((0usize..8, key(), value()), 0..4),
            space in prop::sample::select(&["", "", " ", "\n"][..]),
        ) {
            // Mostly the members of a valid event, one perhaps dropped, with
            // random members inserted anywhere (adding, repeating or
            // replacing what is expected).
            let mut members = if valid { valid_members(known) } else { Vec::new() };
            if let Some(index) = drop_one {
                if index < members.len() {
                    members.remove(index);
                }
            }
            for (at, key, value) in extra {
                members.insert(at.min(members.len()), (key, value));
            }
            check(known.as_str(), &object(&members, space));
        }
    }
}
