//! `sessionlog verify`: CRCs, seqs, header, vocabularies, shapes and every
//! rule of SPEC §6, streamed in constant memory.

use anyhow::Result;
use serde::Serialize;
use sessionlog_projections::{SessionState, Violation};
use sessionlog_store::{FoldedEvent, StoreError};

use crate::cli::SessionArgs;
use crate::exit;
use crate::target::{require_sessions, SessionRef, Target};

/// What verify found in one session.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The session, or none for damage of the store as a whole.
    session: Option<String>,
    source: String,
    status: &'static str,
    events: u64,
    last_seq: u64,
    torn_tail: Option<TornTailReport>,
    corruption: Option<CorruptionReport>,
    violations: Vec<ViolationReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TornTailReport {
    line: u64,
    offset: u64,
    bytes: u64,
    dropped_records: u64,
    reason: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CorruptionReport {
    line: Option<u64>,
    offset: Option<u64>,
    message: String,
}

/// One rule violation as reported.
#[derive(Debug, Serialize)]
pub struct ViolationReport {
    seq: u64,
    #[serde(rename = "type")]
    event_type: String,
    kind: &'static str,
    message: String,
}

impl From<&Violation> for ViolationReport {
    fn from(violation: &Violation) -> Self {
        ViolationReport {
            seq: violation.seq,
            event_type: violation.event_type.clone(),
            kind: violation.kind.as_str(),
            message: violation.to_string(),
        }
    }
}

/// Runs `verify`.
pub fn run(args: &SessionArgs, json: bool, allow_empty: bool, quiet: bool) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let (sessions, damage) = target.audit(args.session.as_deref())?;
    if damage.is_empty() {
        require_sessions(&sessions, &args.store, allow_empty)?;
    }
    let bar = crate::progress::bar(quiet, "verify");
    bar.set_length(sessions.len() as u64);
    let mut code = exit::OK;
    for error in &damage {
        let verdict = store_damage_verdict(&args.store, error);
        code = exit::worst(code, verdict_code(&verdict));
        if json {
            crate::terminal::print_json_line(&serde_json::to_string(&verdict)?)?;
        } else {
            print_human(&verdict)?;
        }
    }
    for session in &sessions {
        let verdict = verify_session(&target, session)?;
        code = exit::worst(code, verdict_code(&verdict));
        bar.suspend(|| -> Result<()> {
            if json {
                crate::terminal::print_json_line(&serde_json::to_string(&verdict)?)?;
            } else {
                print_human(&verdict)?;
            }
            Ok(())
        })?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Target::Store(sessionlog_store::Store::Jsonl(store)) = &target {
        warn_of_leftovers(store)?;
    }
    Ok(code)
}

/// Names the temporary files nobody holds (what a killed creation, fork or
/// migration left): they are no session and change no verdict.
fn warn_of_leftovers(store: &sessionlog_store::JsonlStore) -> Result<()> {
    let left: Vec<_> = store
        .leftovers()?
        .into_iter()
        .filter(|leftover| !leftover.in_use)
        .collect();
    if let Some(first) = left.first() {
        let bytes: u64 = left.iter().map(|leftover| leftover.bytes).sum();
        crate::warn(format!(
            "{} temporary file(s) ({bytes} bytes) left by an interrupted create, fork or migrate, \
             such as {}; no reader takes them for a session, and `sessionlog clean {}` removes them",
            left.len(),
            first.path.display(),
            store.folder().display()
        ));
    }
    Ok(())
}

/// The verdict on damage of a store as a whole (no session named).
fn store_damage_verdict(store: &std::path::Path, error: &StoreError) -> Verdict {
    Verdict {
        session: None,
        source: store.display().to_string(),
        status: "corrupt",
        events: 0,
        last_seq: 0,
        torn_tail: None,
        corruption: Some(CorruptionReport {
            line: None,
            offset: None,
            message: error.to_string(),
        }),
        violations: Vec::new(),
    }
}

/// Verifies one session.
pub fn verify_session(target: &Target, session: &SessionRef) -> Result<Verdict> {
    let mut verdict = Verdict {
        session: Some(session.id.to_string()),
        source: session.label.clone(),
        status: "ok",
        events: 0,
        last_seq: 0,
        torn_tail: None,
        corruption: None,
        violations: Vec::new(),
    };
    match scan(target, session, &mut verdict) {
        Ok(()) => {}
        Err(StoreError::Corrupt { corruption, .. }) => {
            verdict.corruption = Some(CorruptionReport {
                line: Some(corruption.position.line),
                offset: Some(corruption.position.offset),
                message: corruption.to_string(),
            });
        }
        Err(error) if error.class() == sessionlog_store::ErrorClass::Corrupt => {
            verdict.corruption = Some(CorruptionReport {
                line: None,
                offset: None,
                message: error.to_string(),
            });
        }
        Err(error) => return Err(error.into()),
    }
    verdict.status = if verdict.corruption.is_some() {
        "corrupt"
    } else if !verdict.violations.is_empty() {
        "violations"
    } else if verdict.torn_tail.is_some() {
        "torn-tail"
    } else {
        "ok"
    };
    Ok(verdict)
}

fn scan(target: &Target, session: &SessionRef, verdict: &mut Verdict) -> Result<(), StoreError> {
    let mut stream = match target.stream(session) {
        Ok(stream) => stream,
        Err(error) => match error.downcast::<StoreError>() {
            Ok(store_error) => return Err(store_error),
            Err(other) => {
                return Err(StoreError::InvalidEvent(other.to_string()));
            }
        },
    };
    for error in stream.header_vocabulary_errors() {
        verdict.violations.push(ViolationReport {
            seq: 0,
            event_type: "header".into(),
            kind: "vocabulary",
            message: error.to_string(),
        });
    }
    let mut state = SessionState::new(stream.header().clone());
    while let Some(FoldedEvent { record, folded }) = stream.next_event_folded(&mut state)? {
        verdict.events += 1;
        verdict.last_seq = record.seq();
        if let Err(violation) = folded {
            verdict.violations.push(ViolationReport::from(&violation));
        }
    }
    if let Some(torn) = stream.finish()? {
        verdict.torn_tail = Some(TornTailReport {
            line: torn.position.line,
            offset: torn.position.offset,
            bytes: torn.bytes,
            dropped_records: torn.dropped_records,
            reason: torn.reason,
        });
    }
    Ok(())
}

/// The exit code of one verdict.
pub fn verdict_code(verdict: &Verdict) -> u8 {
    if verdict.corruption.is_some() {
        exit::CORRUPT
    } else if !verdict.violations.is_empty() {
        exit::RULE
    } else if verdict.torn_tail.is_some() {
        exit::TORN
    } else {
        exit::OK
    }
}

fn print_human(verdict: &Verdict) -> std::io::Result<()> {
    let name = &verdict.source;
    match verdict.status {
        "ok" => crate::outln!(
            "{name}: ok ({} events, last seq {})",
            verdict.events,
            verdict.last_seq
        )?,
        _ => {
            if let Some(corruption) = &verdict.corruption {
                crate::outln!("{name}: {}", corruption.message)?;
            }
            for violation in &verdict.violations {
                crate::outln!("{name}: rule violation: {}", violation.message)?;
            }
            if let Some(torn) = &verdict.torn_tail {
                crate::outln!(
                    "{name}: torn tail at line {} (byte offset {}): {} bytes, {}; the good prefix holds {} events (last seq {}); a writer truncates it on open",
                    torn.line, torn.offset, torn.bytes, torn.reason, verdict.events, verdict.last_seq
                )?;
            }
        }
    }
    Ok(())
}
