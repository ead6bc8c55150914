//! Seal checks: an own seal against the chain the fold recomputed, and the
//! policies an auditor adds on top (trusted keys, a session sealed to its
//! end, anchors kept elsewhere).
//!
//! The fold ([`SessionState`]) keeps the running chain value and checks
//! every own seal as it meets it; a seal that does not hold is a
//! [`ViolationKind::Seal`](crate::ViolationKind::Seal) violation. The
//! policies below are pure functions of what the fold kept, called by
//! whoever knows the trust file or the anchor.

use serde::Deserialize;
use sessionlog_schema::{
    seal_message, ChainValue, EventRecord, EventView, Seal, SealPublicKey, SessionHeader, SessionId,
};

use crate::{SessionState, Violation};

/// A seal the fold met (the last one is [`SessionState::last_seal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealInfo {
    /// The seal's seq.
    pub seq: u64,
    /// The last seq it covers.
    pub through_seq: u64,
    /// The chain value it carries.
    pub chain: ChainValue,
    /// The key that signed it, if signed.
    pub key: Option<SealPublicKey>,
    /// Whether it is the session's own (not in the seeded prefix). An own
    /// seal was checked against the chain; an inherited one only for shape.
    pub own: bool,
}

/// A session's chain value at one seq, as `sessionlog head` prints it and
/// `verify --anchor` reads it back: `{"session","seq","chain"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// The session.
    pub session: SessionId,
    /// The seq (0 = the header alone).
    pub seq: u64,
    /// The chain value at that seq.
    pub chain: ChainValue,
}

/// An anchor file line that is not an anchor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct AnchorError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl Anchor {
    /// The compact JSON line `head` prints (without its newline).
    pub fn to_json_line(&self) -> String {
        format!(
            "{{\"session\":{},\"seq\":{},\"chain\":\"{}\"}}",
            serde_json::Value::from(self.session.as_str()),
            self.seq,
            self.chain
        )
    }

    /// Whether a session whose good prefix ends at `last_seq`, and whose
    /// chain value at this anchor's seq is `chain_there` (`None` when the
    /// prefix is shorter), still holds this anchor; the reason when not.
    pub fn check(&self, last_seq: u64, chain_there: Option<ChainValue>) -> Result<(), String> {
        match chain_there {
            None => Err(format!(
                "session {} is shorter than its anchor: it ends at seq {last_seq}, the anchor holds seq {}",
                self.session, self.seq
            )),
            Some(found) if found != self.chain => Err(format!(
                "session {} was changed at or before seq {}: the anchor holds chain {}, the log gives {found}",
                self.session, self.seq, self.chain
            )),
            Some(_) => Ok(()),
        }
    }
}

/// Reads an anchor file: one `{"session","seq","chain"}` object a line,
/// as `head` prints them; blank lines are skipped.
pub fn parse_anchor_file(text: &str) -> Result<Vec<Anchor>, AnchorError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        session: String,
        seq: u64,
        chain: ChainValue,
    }
    let mut anchors = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let refuse = |message: String| AnchorError {
            line: index + 1,
            message,
        };
        let read: Line = serde_json::from_str(line).map_err(|error| {
            refuse(format!(
                "expected {{\"session\", \"seq\", \"chain\"}} as `sessionlog head` prints it: {error}"
            ))
        })?;
        let session =
            SessionId::parse(&read.session).map_err(|error| refuse(format!("session: {error}")))?;
        anchors.push(Anchor {
            session,
            seq: read.seq,
            chain: read.chain,
        });
    }
    Ok(anchors)
}

/// Whether an own seal at `seq` holds: it covers every record before it,
/// its chain is `chain_before` (the chain recomputed through `seq - 1`),
/// and its signature, if any, verifies.
pub(crate) fn check_own_seal(
    id: &SessionId,
    seq: u64,
    seal: &Seal,
    chain_before: &ChainValue,
) -> Result<(), String> {
    check_seal_span(seq, seal)?;
    check_seal_chain(seq, seal, chain_before)?;
    check_seal_signature(id, seal)
}

/// The first of an own seal's checks: it covers every record before it.
fn check_seal_span(seq: u64, seal: &Seal) -> Result<(), String> {
    let expected_through = seq.saturating_sub(1);
    if seal.through_seq != expected_through {
        return Err(format!(
            "seal failure: throughSeq is {} but a seal at seq {seq} covers through seq {expected_through}",
            seal.through_seq
        ));
    }
    Ok(())
}

/// The second: its chain is `chain_before`.
fn check_seal_chain(seq: u64, seal: &Seal, chain_before: &ChainValue) -> Result<(), String> {
    match chain_failure(seq, &seal.chain, chain_before) {
        Some(failure) => Err(failure),
        None => Ok(()),
    }
}

/// What an own seal at `seq` that holds chain `claimed` fails with, when
/// `chain_before`, the chain through every record before it, differs.
fn chain_failure(seq: u64, claimed: &ChainValue, chain_before: &ChainValue) -> Option<String> {
    (claimed != chain_before).then(|| {
        format!(
            "seal failure: the log was changed at or before seq {}: the seal holds chain \
             {claimed}, the records recompute to {chain_before}",
            seq.saturating_sub(1)
        )
    })
}

/// The seal failure of an own seal whose shape is broken (a member
/// missing, `key` without `sig`, a value of the wrong type) but whose
/// `chain` member still reads as a chain value that differs from
/// `chain_before`, the chain through every record before it: the change
/// it was to catch is reported as such (exit 7), not hidden behind the
/// broken shape (exit 4). `None` when the data holds no readable chain, or
/// the one the records give.
pub(crate) fn broken_seal_chain_failure(
    record: &EventRecord,
    chain_before: &ChainValue,
) -> Option<String> {
    let data: serde_json::Value = serde_json::from_str(record.data()).ok()?;
    let claimed = ChainValue::parse(data.get("chain")?.as_str()?).ok()?;
    chain_failure(record.seq(), &claimed, chain_before)
}

/// For a fold whose hash chain runs elsewhere (another thread), behind the
/// fold: the chain an own seal claims, for the fold to check the seal by
/// (everything but the chain), and the check of that claim, made where the
/// chain through the records before the seal is known. `None` for any
/// other record. Together they refuse what [`SessionState::apply`]
/// refuses, with the same violation, provided that the fold asks for the
/// chain itself whenever the seal fails its other checks (the chain is
/// checked before the signature).
///
/// [`SessionState::apply`]: crate::SessionState::apply
pub fn claimed_chain(record: &EventRecord) -> Option<ChainValue> {
    match EventView::parse(record.event_type(), record.data()) {
        Ok(EventView::Seal(seal)) => Some(seal.chain),
        _ => None,
    }
}

/// The checks of an own seal that come before its signature's: its span,
/// then its claimed chain ([`claimed_chain`]) against `chain_before`, the
/// chain through every record before it. The violation
/// [`SessionState::apply`] gives when either fails.
///
/// [`SessionState::apply`]: crate::SessionState::apply
pub fn check_claimed_chain(
    record: &EventRecord,
    chain_before: &ChainValue,
) -> Result<(), Violation> {
    let seq = record.seq();
    match EventView::parse(record.event_type(), record.data()) {
        Ok(EventView::Seal(seal)) => check_seal_span(seq, &seal)
            .and_then(|()| check_seal_chain(seq, &seal, chain_before))
            .map_err(|message| Violation::seal(seq, record.event_type(), message)),
        _ => Ok(()),
    }
}

/// The last: its signature, if any, verifies.
fn check_seal_signature(id: &SessionId, seal: &Seal) -> Result<(), String> {
    if let Some(signature) = &seal.signature {
        let message = seal_message(id, seal.through_seq, &seal.chain);
        signature
            .verify(message.as_bytes())
            .map_err(|reason| format!("seal failure: {reason}"))?;
    }
    Ok(())
}

/// Whether a seal at `seq` within the seed of the session whose header is
/// `header` may be inherited. A parent's seal is signed for the parent's
/// id: one whose signature verifies for this session's own id was made for
/// this session, an own seal that a header raised over it (its
/// `seedLength`, with a `parentSession` named to allow one) made read as
/// inherited, so that its chain went unchecked. It fails as the own seal
/// it is would: the header changed under it. (An unsigned seal says
/// nothing of whose it is: only an anchor, or `--require-sealed` with
/// `--trust`, guards the seed's bound then.)
pub(crate) fn check_inherited_seal(
    header: &SessionHeader,
    seq: u64,
    seal: &Seal,
) -> Result<(), String> {
    let Some(signature) = &seal.signature else {
        return Ok(());
    };
    let message = seal_message(&header.id, seal.through_seq, &seal.chain);
    match signature.verify(message.as_bytes()) {
        Ok(()) => Err(format!(
            "seal failure: the seal at seq {seq} is signed for session {} itself, yet lies \
             within the {} events its header says it inherits: the header was changed so \
             that the session's own seal would read as inherited",
            header.id, header.seed_length
        )),
        Err(_) => Ok(()),
    }
}

/// `verify --trust`: an own seal must be signed by one of `trusted`.
pub fn check_trusted(seal: &SealInfo, trusted: &[SealPublicKey]) -> Result<(), String> {
    if !seal.own {
        return Ok(());
    }
    match &seal.key {
        None => Err(format!(
            "seal at seq {} is not signed, and the trust file requires every own seal signed by a listed key",
            seal.seq
        )),
        Some(key) if !trusted.contains(key) => Err(format!(
            "seal at seq {} is signed by {key}, which is not in the trust file",
            seal.seq
        )),
        Some(_) => Ok(()),
    }
}

/// `verify --require-sealed`: the session has an own seal and no own event
/// after its last one.
pub fn check_sealed(state: &SessionState) -> Result<(), String> {
    let id = &state.header().id;
    match state.last_own_seal_seq() {
        None => Err(format!(
            "session {id} has no seal of its own{}",
            if state.header().seed_length > 0 {
                " (the seals it inherited vouch for its parent only)"
            } else {
                ""
            }
        )),
        Some(seq) if seq < state.seq() => Err(format!(
            "session {id} has {} after its last seal (seq {seq}, the log ends at seq {})",
            match state.seq() - seq {
                1 => "1 event".to_owned(),
                events => format!("{events} events"),
            },
            state.seq()
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_lines_read_back_as_head_prints_them() {
        let anchor = Anchor {
            session: SessionId::parse("s-1").unwrap_or_else(|e| panic!("{e}")),
            seq: 12,
            chain: ChainValue::genesis("h"),
        };
        let text = format!("{}\n\n{}\n", anchor.to_json_line(), anchor.to_json_line());
        assert_eq!(parse_anchor_file(&text), Ok(vec![anchor.clone(), anchor]));
        let error = parse_anchor_file("{\"session\":\"../x\",\"seq\":1,\"chain\":\"sha256:\"}");
        assert!(matches!(error, Err(AnchorError { line: 1, .. })));
    }
}
