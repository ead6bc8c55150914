//! Arbitrary JSON for the property tests of the review readers: values
//! built from words close to the vocabulary being read, so that a strict
//! reader meets its near misses as often as noise.

use proptest::prelude::*;

/// Any JSON value up to four levels deep, whose strings and member names
/// come from `word` and whose other strings come from `text`.
pub(super) fn json_value(
    word: BoxedStrategy<String>,
    text: BoxedStrategy<String>,
) -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        word.clone().prop_map(serde_json::Value::from),
        text.prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::from),
            prop::collection::vec((word.clone(), inner), 0..5)
                .prop_map(|members| serde_json::Value::Object(members.into_iter().collect())),
        ]
    })
}
