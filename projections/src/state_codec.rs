//! The bytes of a [`SessionState`], so that a store can keep the fold of a
//! long session and resume from it (docs/FORMAT.md, "State snapshots").
//!
//! The encoding holds everything the fold keeps but the header (which the
//! log holds, and which the caller passes back) and the pending approvals
//! (the own asks not yet decided, rebuilt from the requests). Decoding
//! checks every length, index and id it reads, so that bytes from anywhere
//! give a state or an error, never a panic and never a state whose tables
//! disagree with themselves. It says nothing of whether the state is the
//! fold of the log: the store checks where the snapshot was taken (its
//! anchor) before it trusts one, and `verify` never reads one.

use std::collections::BTreeMap;

use sessionlog_schema::{
    ApprovalPolicy, ChainValue, Preset, SandboxMode, SealPublicKey, SessionHeader,
};

use crate::state::{CallEntry, IdSpan, IdTable, Ids, RequestEntry};
use crate::{SealInfo, SessionState};

impl SessionState {
    /// The state's bytes, for [`decode_snapshot`](Self::decode_snapshot)
    /// (the header is not among them). About the bytes of the ids the state
    /// keeps plus a few bytes per call, request and reviewed event.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut out = Writer::default();
        let parts = self;
        out.varint(parts.seq);
        out.option(parts.approval_switch, |out, (seq, policy)| {
            out.varint(seq);
            out.text(policy.as_str());
        });
        out.option(parts.sandbox_switch, |out, mode| out.text(mode.as_str()));
        out.option(parts.preset_switch, |out, preset| out.text(preset.as_str()));
        out.text(&parts.ids.text);
        out.option(parts.open_turn, Writer::span);
        out.option(parts.open_step, Writer::span);
        out.varint(parts.calls.entries.len() as u64);
        for call in &parts.calls.entries {
            out.span(call.call_id);
            out.varint(call.seq);
            out.span(call.step_id);
            out.span(call.name);
            out.byte(u8::from(call.own) | u8::from(call.settled) << 1);
        }
        out.varint(parts.requests.entries.len() as u64);
        for request in &parts.requests.entries {
            out.span(request.request_id);
            out.varint(request.seq);
            out.byte(u8::from(request.own) | u8::from(request.decided) << 1);
        }
        out.option(parts.last_own_request_header, |out, (seq, policy)| {
            out.varint(seq);
            out.text(policy.as_str());
        });
        out.option(parts.latest_request_header_seq, Writer::varint);
        out.option(parts.last_checkpoint_seq, Writer::varint);
        out.varint(parts.reviewed_seqs.len() as u64);
        let mut previous = 0;
        for &seq in &parts.reviewed_seqs {
            out.varint(seq - previous);
            previous = seq;
        }
        out.varint(parts.violation_count);
        out.bytes.extend_from_slice(parts.chain.as_bytes());
        out.option(parts.last_seal.as_ref(), |out, seal| {
            out.varint(seal.seq);
            out.varint(seal.through_seq);
            out.bytes.extend_from_slice(seal.chain.as_bytes());
            out.option(seal.key.as_ref(), |out, key| out.text(&key.to_string()));
            out.byte(u8::from(seal.own));
        });
        out.option(parts.last_own_seal_seq, Writer::varint);
        out.bytes
    }

    /// The state [`encode_snapshot`](Self::encode_snapshot) wrote, over
    /// `header` (whose stored header record body is `header_body`, as for
    /// [`with_header_body`](Self::with_header_body)). Refuses bytes that do
    /// not decode to a state consistent with itself, saying where.
    pub fn decode_snapshot(
        header: SessionHeader,
        header_body: &str,
        bytes: &[u8],
    ) -> Result<SessionState, String> {
        let mut state = SessionState::with_header_body(header, header_body);
        let mut input = Reader { bytes, at: 0 };
        let seq = input.varint("seq")?;
        let approval_switch = input.option("approval switch", |input| {
            let seq = input.seq_at_most(seq, "approval switch")?;
            Ok((
                seq,
                input.vocabulary("approval policy", ApprovalPolicy::parse)?,
            ))
        })?;
        let sandbox_switch = input.option("sandbox switch", |input| {
            input.vocabulary("sandbox mode", SandboxMode::parse)
        })?;
        let preset_switch = input.option("preset switch", |input| {
            input.vocabulary("preset", Preset::parse)
        })?;
        let text = input.text("ids")?.to_owned();
        let ids = Ids { text };
        let open_turn = input.option("open turn", |input| input.span(&ids, "open turn"))?;
        let open_step = input.option("open step", |input| input.span(&ids, "open step"))?;
        let mut calls: IdTable<CallEntry> = IdTable::default();
        for _ in 0..input.count("calls")? {
            let call_id = input.span(&ids, "call id")?;
            let call = CallEntry {
                call_id,
                seq: input.seq_at_most(seq, "call")?,
                step_id: input.span(&ids, "call step")?,
                name: input.span(&ids, "call name")?,
                own: false,
                settled: false,
            };
            let flags = input.flags("call")?;
            let call = CallEntry {
                own: flags & 1 != 0,
                settled: flags & 2 != 0,
                ..call
            };
            if calls.position(&ids, ids.get(call_id)).is_some() {
                return Err(format!("call id {:?} is kept twice", ids.get(call_id)));
            }
            calls.insert(&ids, call);
        }
        let mut requests: IdTable<RequestEntry> = IdTable::default();
        let mut pending_approvals = BTreeMap::new();
        for _ in 0..input.count("requests")? {
            let request_id = input.span(&ids, "request id")?;
            let request_seq = input.seq_at_most(seq, "request")?;
            let flags = input.flags("request")?;
            let request = RequestEntry {
                request_id,
                seq: request_seq,
                own: flags & 1 != 0,
                decided: flags & 2 != 0,
            };
            if requests.position(&ids, ids.get(request_id)).is_some() {
                return Err(format!(
                    "request id {:?} is kept twice",
                    ids.get(request_id)
                ));
            }
            if request.own && !request.decided {
                pending_approvals.insert(request.seq, request.request_id);
            }
            requests.insert(&ids, request);
        }
        let last_own_request_header = input.option("own request header", |input| {
            let seq = input.seq_at_most(seq, "own request header")?;
            Ok((
                seq,
                input.vocabulary("approval policy", ApprovalPolicy::parse)?,
            ))
        })?;
        let latest_request_header_seq = input.option("request header", |input| {
            input.seq_at_most(seq, "request header")
        })?;
        let last_checkpoint_seq =
            input.option("checkpoint", |input| input.seq_at_most(seq, "checkpoint"))?;
        let mut reviewed_seqs = Vec::new();
        let mut previous = 0u64;
        for _ in 0..input.count("reviewed seqs")? {
            let delta = input.varint("reviewed seq")?;
            previous = previous
                .checked_add(delta)
                .filter(|&reviewed| reviewed <= seq && (delta > 0 || reviewed_seqs.is_empty()))
                .ok_or("reviewed seqs are not increasing seqs of the state")?;
            reviewed_seqs.push(previous);
        }
        let violation_count = input.varint("violation count")?;
        let chain = input.chain("chain")?;
        let last_seal = input.option("last seal", |input| {
            let seal_seq = input.seq_at_most(seq, "last seal")?;
            let through_seq = input.seq_at_most(seq, "sealed seq")?;
            let chain = input.chain("sealed chain")?;
            let key = input.option("seal key", |input| {
                SealPublicKey::parse(input.text("seal key")?)
                    .map_err(|error| format!("seal key: {error}"))
            })?;
            let own = input.flags("last seal")? & 1 != 0;
            Ok(SealInfo {
                seq: seal_seq,
                through_seq,
                chain,
                key,
                own,
            })
        })?;
        let last_own_seal_seq =
            input.option("own seal", |input| input.seq_at_most(seq, "own seal"))?;
        if input.at != bytes.len() {
            return Err(format!(
                "{} bytes follow the state at byte {}",
                bytes.len() - input.at,
                input.at
            ));
        }
        state.seq = seq;
        state.approval_switch = approval_switch;
        state.sandbox_switch = sandbox_switch;
        state.preset_switch = preset_switch;
        state.ids = ids;
        state.open_turn = open_turn;
        state.open_step = open_step;
        state.calls = calls;
        state.requests = requests;
        state.pending_approvals = pending_approvals;
        state.last_own_request_header = last_own_request_header;
        state.latest_request_header_seq = latest_request_header_seq;
        state.last_checkpoint_seq = last_checkpoint_seq;
        state.reviewed_seqs = reviewed_seqs;
        state.violation_count = violation_count;
        state.chain = chain;
        state.last_seal = last_seal;
        state.last_own_seal_seq = last_own_seal_seq;
        Ok(state)
    }
}

#[derive(Default)]
struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    fn byte(&mut self, byte: u8) {
        self.bytes.push(byte);
    }

    /// LEB128.
    fn varint(&mut self, mut value: u64) {
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                self.bytes.push(low);
                return;
            }
            self.bytes.push(low | 0x80);
        }
    }

    fn text(&mut self, text: &str) {
        self.varint(text.len() as u64);
        self.bytes.extend_from_slice(text.as_bytes());
    }

    fn span(&mut self, span: IdSpan) {
        self.varint(span.start as u64);
        self.varint((span.end - span.start) as u64);
    }

    fn option<T>(&mut self, value: Option<T>, write: impl FnOnce(&mut Writer, T)) {
        match value {
            None => self.byte(0),
            Some(value) => {
                self.byte(1);
                write(self, value);
            }
        }
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn byte(&mut self, what: &str) -> Result<u8, String> {
        let byte = self
            .bytes
            .get(self.at)
            .copied()
            .ok_or_else(|| format!("{what}: the state ends at byte {}", self.at))?;
        self.at += 1;
        Ok(byte)
    }

    fn varint(&mut self, what: &str) -> Result<u64, String> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte(what)?;
            value |= u64::from(byte & 0x7f)
                .checked_shl(shift)
                .filter(|shifted| shifted >> shift == u64::from(byte & 0x7f))
                .ok_or_else(|| format!("{what}: the number at byte {start} is above 2^64"))?;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("{what}: the number at byte {start} is above 2^64"))
    }

    /// A count of items, each at least one byte: never above what is left.
    fn count(&mut self, what: &str) -> Result<usize, String> {
        let at = self.at;
        let count = self.varint(what)?;
        usize::try_from(count)
            .ok()
            .filter(|&count| count <= self.bytes.len() - self.at)
            .ok_or_else(|| format!("{what}: {count} items at byte {at}, more than the bytes left"))
    }

    fn text(&mut self, what: &str) -> Result<&'b str, String> {
        let at = self.at;
        let len = self.count(what)?;
        let bytes = &self.bytes[self.at..self.at + len];
        self.at += len;
        std::str::from_utf8(bytes)
            .map_err(|_| format!("{what}: the text at byte {at} is not UTF-8"))
    }

    fn flags(&mut self, what: &str) -> Result<u8, String> {
        let at = self.at;
        let flags = self.byte(what)?;
        if flags > 3 {
            return Err(format!("{what}: flags {flags} at byte {at} are not 0 to 3"));
        }
        Ok(flags)
    }

    fn seq_at_most(&mut self, seq: u64, what: &str) -> Result<u64, String> {
        let at = self.at;
        let found = self.varint(what)?;
        if found == 0 || found > seq {
            return Err(format!(
                "{what}: seq {found} at byte {at} is not a seq of 1 to {seq}"
            ));
        }
        Ok(found)
    }

    fn span(&mut self, ids: &Ids, what: &str) -> Result<IdSpan, String> {
        let at = self.at;
        let start = self.varint(what)?;
        let len = self.varint(what)?;
        let span = start
            .checked_add(len)
            .and_then(|end| Some((usize::try_from(start).ok()?, usize::try_from(end).ok()?)))
            .filter(|&(start, end)| {
                end <= ids.text.len()
                    && ids.text.is_char_boundary(start)
                    && ids.text.is_char_boundary(end)
            })
            .map(|(start, end)| IdSpan { start, end });
        span.ok_or_else(|| format!("{what}: the id at byte {at} is not within the ids kept"))
    }

    fn chain(&mut self, what: &str) -> Result<ChainValue, String> {
        let bytes = self
            .bytes
            .get(self.at..self.at + 32)
            .ok_or_else(|| format!("{what}: the state ends at byte {}", self.at))?;
        self.at += 32;
        let mut value = [0u8; 32];
        value.copy_from_slice(bytes);
        Ok(ChainValue::from_bytes(value))
    }

    fn vocabulary<T>(
        &mut self,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, String> {
        let text = self.text(what)?;
        parse(text).ok_or_else(|| format!("{what}: {text:?} is not in the vocabulary"))
    }

    fn option<T>(
        &mut self,
        what: &str,
        read: impl FnOnce(&mut Reader<'b>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        let at = self.at;
        match self.byte(what)? {
            0 => Ok(None),
            1 => read(self).map(Some),
            tag => Err(format!("{what}: tag {tag} at byte {at} is neither 0 nor 1")),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::state::tests::arbitrary_log;
    use crate::test_log::projection_json;
    use crate::{Defaults, SessionState};

    proptest! {
        #[test]
        fn resuming_from_a_snapshot_at_any_seq_and_folding_the_tail_equals_the_full_fold(
            log in arbitrary_log(),
            at in 0usize..40,
        ) {
            let at = at.min(log.events.len());
            let (whole, _) = log.fold();
            let (prefix, _) = crate::fold(log.header.clone(), &log.events[..at]);
            let bytes = prefix.encode_snapshot();
            let body = log.header.to_body();
            let mut resumed = SessionState::decode_snapshot(log.header.clone(), &body, &bytes)
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(&resumed, &prefix);
            for record in &log.events[at..] {
                let _ = resumed.apply(record);
            }
            prop_assert_eq!(&resumed, &whole);
            prop_assert_eq!(
                projection_json(&resumed, &Defaults::default()),
                projection_json(&whole, &Defaults::default())
            );
            prop_assert_eq!(resumed.encode_snapshot().len(), whole.encode_snapshot().len());
        }

        #[test]
        fn damaged_snapshot_bytes_decode_to_an_error_or_a_state_never_a_panic(
            log in arbitrary_log(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let (state, _) = log.fold();
            let body = log.header.to_body();
            let mut bytes = state.encode_snapshot();
            for (index, byte) in flips {
                let index = index.index(bytes.len());
                bytes[index] ^= byte;
            }
            if let Ok(decoded) = SessionState::decode_snapshot(log.header.clone(), &body, &bytes) {
                // Whatever it decoded to can be projected and folded on.
                let _ = projection_json(&decoded, &Defaults::default());
                let _ = decoded.pending_approvals();
            }
            let cut = cut.index(bytes.len());
            let _ = SessionState::decode_snapshot(log.header.clone(), &body, &bytes[..cut]);
        }
    }
}
