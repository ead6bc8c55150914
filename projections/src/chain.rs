//! The fold's hash chain, its hashing put off until a value is asked for.
//!
//! Each record's chain link is one SHA-256 of the link before and its
//! body. Most reads never ask for the value (a session without seals or
//! anchors, read by `verify` or `stats`), so the fold keeps the bodies
//! since the last value it computed, up to [`PENDING_LIMIT`] bytes of
//! them, and hashes them only when a value is asked for, a seal is
//! checked or the bytes reach the limit. A session whose bodies once
//! reached the limit would reach it again and again, so from then on each
//! body is hashed as it is pushed, while the fold has it in the cache,
//! instead of being copied first. The value is the same as hashing each
//! record as it comes: the same links, in the same order.

use sessionlog_schema::ChainValue;

/// The most bytes of bodies the chain keeps unhashed: a bound on what it
/// holds, small beside a state's other tables, large enough that a short
/// session is never hashed unless asked.
const PENDING_LIMIT: usize = 64 * 1024;

/// Room the chain of a new session starts with, so that a short one (a
/// store of many small sessions read one after the other) fills it
/// without growing it: bytes of bodies, and records.
const START_BYTES: usize = 4 * 1024;
const START_RECORDS: usize = 16;

/// The chain through the last record pushed.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    /// The chain through the records before `pending` (unused while
    /// `from_header` is set).
    through: ChainValue,
    /// The first body of `pending` is the header's, where the chain
    /// starts ([`ChainValue::genesis`]).
    from_header: bool,
    /// Bodies not hashed yet, one after the other.
    pending: String,
    /// Where each body of `pending` ends.
    ends: Vec<usize>,
    /// The bodies once passed [`PENDING_LIMIT`]: each body is hashed as
    /// it is pushed, and `pending` stays empty, its room given back.
    hashing: bool,
}

impl Chain {
    /// The chain of a session holding only its header, whose body as
    /// stored is `header_body`.
    pub(crate) fn genesis(header_body: &str) -> Chain {
        let mut chain = Chain {
            through: ChainValue::from_bytes([0; 32]),
            from_header: true,
            pending: String::with_capacity(header_body.len().max(START_BYTES)),
            ends: Vec::with_capacity(START_RECORDS),
            hashing: false,
        };
        chain.keep(header_body);
        chain
    }

    /// The chain whose value is `value`.
    pub(crate) fn settled(value: ChainValue) -> Chain {
        Chain {
            through: value,
            from_header: false,
            pending: String::new(),
            ends: Vec::new(),
            hashing: false,
        }
    }

    /// The chain value through the last record pushed.
    pub(crate) fn value(&self) -> ChainValue {
        let mut start = 0;
        let mut value = self.through;
        for (index, &end) in self.ends.iter().enumerate() {
            let body = &self.pending[start..end];
            value = match index == 0 && self.from_header {
                true => ChainValue::genesis(body),
                false => value.next(body),
            };
            start = end;
        }
        value
    }

    /// Hashes what is pending: [`value`](Self::value) is then the value
    /// kept.
    pub(crate) fn settle(&mut self) {
        if !self.ends.is_empty() {
            self.through = self.value();
            self.from_header = false;
            self.pending.clear();
            self.ends.clear();
        }
    }

    /// The chain one record on, whose body is `body`.
    pub(crate) fn push(&mut self, body: &str) {
        if self.hashing {
            self.through = self.through.next(body);
            return;
        }
        if self.pending.len() + body.len() > PENDING_LIMIT {
            self.settle();
            // Never used again: its room goes back.
            self.pending = String::new();
            self.ends = Vec::new();
            self.hashing = true;
            self.through = self.through.next(body);
            return;
        }
        self.keep(body);
    }

    fn keep(&mut self, body: &str) {
        self.pending.push_str(body);
        self.ends.push(self.pending.len());
    }
}

impl PartialEq for Chain {
    fn eq(&self, other: &Chain) -> bool {
        self.value() == other.value()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What the chain is by definition: each link hashed as it comes.
    fn hashed_as_they_come(header: &str, bodies: &[String]) -> ChainValue {
        bodies
            .iter()
            .fold(ChainValue::genesis(header), |value, body| value.next(body))
    }

    #[test]
    fn a_chain_past_its_bound_keeps_nothing_pending() {
        let bodies: Vec<String> = (0..40).map(|n| format!("{n:>3000}")).collect();
        let mut chain = Chain::genesis("{}");
        for body in &bodies {
            chain.push(body);
        }
        assert!(chain.hashing, "40 bodies of 3 KB pass 64 KiB");
        assert_eq!(chain.pending.capacity(), 0);
        assert_eq!(chain.value(), hashed_as_they_come("{}", &bodies));
    }

    proptest! {
        #[test]
        fn a_chain_put_off_is_the_chain_hashed_as_it_comes(
            header in "[ -~]{0,40}",
            bodies in prop::collection::vec(
                prop_oneof![
                    4 => "[ -~é]{0,300}",
                    1 => (20_000usize..70_000).prop_map(|len| "x".repeat(len)),
                ],
                0..24,
            ),
            settle_at in prop::collection::vec(any::<bool>(), 24),
        ) {
            let mut chain = Chain::genesis(&header);
            for (index, body) in bodies.iter().enumerate() {
                chain.push(body);
                if settle_at[index] {
                    chain.settle();
                }
                let expected = hashed_as_they_come(&header, &bodies[..=index]);
                prop_assert_eq!(chain.value(), expected);
                prop_assert!(chain.pending.len() <= PENDING_LIMIT);
                prop_assert!(!chain.hashing || chain.pending.capacity() == 0);
            }
            prop_assert_eq!(chain.value(), hashed_as_they_come(&header, &bodies));
            let settled = Chain::settled(chain.value());
            prop_assert!(settled == chain);
        }
    }
}
