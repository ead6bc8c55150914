//! A quick proof that a record's `data` is JSON, for the layout writers
//! emit: compact JSON, with no whitespace between tokens and no byte below
//! 0x20 anywhere. It is one pass over the text, strings skipped with
//! `memchr`, and it answers "JSON" or "not known": a text it does not prove
//! (whitespace, a nesting deeper than [`MAX_DEPTH`], or not JSON at all) is
//! left to serde_json, whose judgement stands. It proves nothing serde_json
//! refuses (a property test holds the two together), so a record is
//! accepted or refused exactly as before, and errors still come from
//! serde_json.

/// The deepest nesting proved here; deeper texts are left to serde_json.
const MAX_DEPTH: usize = 64;

/// Whether `text` is `data` serde_json reads as one JSON value: proved
/// here for compact JSON, asked of serde_json otherwise.
pub(crate) fn is_json(text: &str) -> bool {
    is_compact_json(text.as_bytes()) || serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// Whether `text` is one compact JSON value (no whitespace between tokens,
/// no byte below 0x20, at most [`MAX_DEPTH`] deep). `false` says only that
/// this was not proved.
pub(crate) fn is_compact_json(text: &[u8]) -> bool {
    // No byte below 0x20: no whitespace but spaces, which no token starts
    // with, and no control character in a string (JSON escapes those).
    if text
        .iter()
        .fold(false, |found, &byte| found | (byte < 0x20))
    {
        return false;
    }
    // The brackets open around the value at `at`.
    let mut open = [0_u8; MAX_DEPTH];
    let mut depth = 0_usize;
    let mut at = 0_usize;
    'value: loop {
        let Some(&first) = text.get(at) else {
            return false;
        };
        let end = match first {
            b'"' => string_end(text, at + 1),
            b'{' | b'[' => {
                let close = if first == b'{' { b'}' } else { b']' };
                if text.get(at + 1) == Some(&close) {
                    Some(at + 2)
                } else if depth == MAX_DEPTH {
                    return false;
                } else {
                    open[depth] = first;
                    depth += 1;
                    at += 1;
                    if first == b'{' {
                        let Some(after_key) = key_end(text, at) else {
                            return false;
                        };
                        at = after_key;
                    }
                    continue 'value;
                }
            }
            b't' => literal_end(text, at, b"true"),
            b'f' => literal_end(text, at, b"false"),
            b'n' => literal_end(text, at, b"null"),
            b'-' | b'0'..=b'9' => number_end(text, at),
            _ => None,
        };
        let Some(end) = end else {
            return false;
        };
        at = end;
        // After a value: the brackets it closes, then a comma and the next
        // value, or the end of the text.
        loop {
            let Some(frame) = depth.checked_sub(1).map(|top| open[top]) else {
                return at == text.len();
            };
            match text.get(at) {
                Some(b',') => {
                    at += 1;
                    if frame == b'{' {
                        let Some(after_key) = key_end(text, at) else {
                            return false;
                        };
                        at = after_key;
                    }
                    continue 'value;
                }
                Some(b'}') if frame == b'{' => {}
                Some(b']') if frame == b'[' => {}
                _ => return false,
            }
            depth -= 1;
            at += 1;
        }
    }
}

/// After a member's name and colon starting at `at`: the index after the
/// colon.
fn key_end(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let end = string_end(text, at + 1)?;
    (text.get(end) == Some(&b':')).then_some(end + 1)
}

/// The index after the closing quote of a string whose characters start at
/// `at` (no byte below 0x20 is left in the text).
fn string_end(text: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += memchr::memchr2(b'"', b'\\', text.get(at..)?)?;
        if text[at] == b'"' {
            return Some(at + 1);
        }
        match text.get(at + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
            b'u' => {
                let hex = text.get(at + 2..at + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                at += 6;
            }
            _ => return None,
        }
    }
}

/// The index after `word` at `at`.
fn literal_end(text: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    let end = at + word.len();
    (text.get(at..end) == Some(word)).then_some(end)
}

/// The index after the number at `at`: `-`, then `0` or digits without a
/// leading zero, then an optional fraction and exponent, each with at least
/// one digit.
fn number_end(text: &[u8], mut at: usize) -> Option<usize> {
    let digits = |from: usize| {
        text.get(from..).map_or(0, |rest| {
            rest.iter().take_while(|byte| byte.is_ascii_digit()).count()
        })
    };
    if text.get(at) == Some(&b'-') {
        at += 1;
    }
    match text.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at += digits(at),
        _ => return None,
    }
    if text.get(at) == Some(&b'.') {
        let count = digits(at + 1);
        if count == 0 {
            return None;
        }
        at += 1 + count;
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(text.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let count = digits(at);
        if count == 0 {
            return None;
        }
        at += count;
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    fn serde_reads(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    /// Any JSON value, as serde_json writes it compact.
    fn values() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}|[\\x00-\\x1f\"\\\\/]{0,4}".prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map("[a-z\"\\\\é]{0,6}", inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn the_compact_json_writers_emit_is_proved_and_other_texts_are_left_to_serde() {
        for text in [
            "{}",
            "[]",
            "0",
            "-0.5e+10",
            "1E3",
            "\"\"",
            "\"\\u00e9\\ud800\\n\\/\"",
            "{\"a\":[1,{\"b\":null}],\"c\":true,\"d\":false}",
            "[[[[]]],{},\"é\"]",
        ] {
            assert!(is_compact_json(text.as_bytes()), "{text}");
            assert!(serde_reads(text), "{text}");
        }
        // JSON, but not proved here: serde_json reads it.
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 2), "]".repeat(MAX_DEPTH + 2));
        for text in [" {}", "{} ", "{\"a\": 1}", "[1,\n2]", deep.as_str()] {
            assert!(!is_compact_json(text.as_bytes()), "{text}");
            assert!(is_json(text), "{text}");
        }
        // Not JSON.
        for text in [
            "",
            "{",
            "}",
            "[1,]",
            "[,1]",
            "{\"a\":1,}",
            "{\"a\"}",
            "{a:1}",
            "01",
            "-",
            "1.",
            "1e",
            "1e+",
            ".5",
            "tru",
            "truex",
            "nul",
            "\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "\"\t\"",
            "[1]]",
            "{}{}",
            "[}",
            "{]",
            "NaN",
            "'a'",
        ] {
            assert!(!is_compact_json(text.as_bytes()), "{text:?}");
            assert!(!is_json(text), "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn every_compact_value_is_proved(value in values()) {
            let text = value.to_string();
            prop_assert!(is_compact_json(text.as_bytes()), "{}", text);
        }

        #[test]
        fn nothing_serde_refuses_is_proved(
            value in values(),
            at in any::<prop::sample::Index>(),
            cut in 0_usize..3,
            insert in "[\\[\\]{}\":,.\\-+eE0-9a-z\\\\ \\x00\\n]{0,2}",
        ) {
            // The text of a value with a few characters cut out at one
            // place and a few put in: mostly not JSON any more.
            let text = value.to_string();
            let chars: Vec<char> = text.chars().collect();
            let start = at.index(chars.len() + 1);
            let end = (start + cut).min(chars.len());
            let mutated: String = chars[..start]
                .iter()
                .chain(insert.chars().collect::<Vec<_>>().iter())
                .chain(chars[end..].iter())
                .collect();
            if is_compact_json(mutated.as_bytes()) {
                prop_assert!(serde_reads(&mutated), "{}", mutated);
            }
        }

        #[test]
        fn no_short_text_serde_refuses_is_proved(
            text in "[\\[\\]{}\":,.\\-+eE0-9tfrulnasx\\\\/ ]{0,16}",
        ) {
            if is_compact_json(text.as_bytes()) {
                prop_assert!(serde_reads(&text), "{}", text);
            }
        }
    }
}
