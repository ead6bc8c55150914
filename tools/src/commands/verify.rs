//! `sessionlog verify`: CRCs, seqs, header, vocabularies, shapes, every
//! rule of docs/EVENTS.md, "Rules", and every own seal against the
//! recomputed hash chain, streamed in constant memory; then the auditor's
//! seal policy (`--trust`, `--require-sealed`, `--anchor`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;
use sessionlog_projections::{
    check_sealed, check_trusted, child_header, parse_anchor_file, Anchor, SessionState, Violation,
    ViolationKind,
};
use sessionlog_schema::{
    parse_trust_file, ApprovalPolicy, Event, EventType, SandboxMode, SealPublicKey, SessionHeader,
};
use sessionlog_store::{fold_stream, StoreError};

use crate::cli::SessionArgs;
use crate::side_by_side::Readers;
use crate::target::{
    read_bounded, require_sessions, Audit, SessionRef, Target, UnreadableLog,
    MAX_ANCHOR_FILE_BYTES, MAX_INPUT_BYTES,
};
use crate::terminal::Mode;
use crate::{exit, UsageError};

/// What an auditor asks of seals beyond their own checks.
#[derive(Debug, Default)]
pub struct SealPolicy {
    /// `--trust`: the keys every own seal must be signed by (`None`: any
    /// key, or none).
    trusted: Option<Vec<SealPublicKey>>,
    /// `--require-sealed`.
    require_sealed: bool,
    /// `--anchor`: the anchors, by session.
    anchors: Option<BTreeMap<String, Vec<Anchor>>>,
    /// The anchor file, for messages.
    anchor_file: Option<PathBuf>,
}

/// Reads `--trust` files: `None` when none is given, else every key they
/// list; a line that is not a key is a usage error naming file and line.
pub fn read_trust_files(files: &[PathBuf]) -> Result<Option<Vec<SealPublicKey>>> {
    if files.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::new();
    for file in files {
        let bytes = read_bounded(Some(file), MAX_INPUT_BYTES, "trust file")?;
        let text = String::from_utf8(bytes)
            .map_err(|_| UsageError(format!("{}: a trust file is UTF-8 text", file.display())))?;
        let read = parse_trust_file(&text)
            .map_err(|error| UsageError(format!("{}: {error}", file.display())))?;
        keys.extend(read);
    }
    Ok(Some(keys))
}

impl SealPolicy {
    /// Reads the trust and anchor files; a line that is not a key or an
    /// anchor is a usage error naming the file and line.
    pub fn read(
        trust_files: &[PathBuf],
        require_sealed: bool,
        anchor_file: Option<&Path>,
    ) -> Result<SealPolicy> {
        let trusted = read_trust_files(trust_files)?;
        let anchors = match anchor_file {
            None => None,
            Some(file) => {
                let bytes = read_bounded(Some(file), MAX_ANCHOR_FILE_BYTES, "anchor file")?;
                let text = String::from_utf8(bytes).map_err(|_| {
                    UsageError(format!("{}: an anchor file is UTF-8 text", file.display()))
                })?;
                let mut by_session: BTreeMap<String, Vec<Anchor>> = BTreeMap::new();
                for anchor in parse_anchor_file(&text)
                    .map_err(|error| UsageError(format!("{}: {error}", file.display())))?
                {
                    by_session
                        .entry(anchor.session.to_string())
                        .or_default()
                        .push(anchor);
                }
                // An anchor file that names no session (empty, cut short,
                // filtered to nothing) would let any store pass.
                if by_session.is_empty() {
                    return Err(UsageError(format!(
                        "{}: the anchor file names no session (it holds the lines \
                         `sessionlog head` prints, one per session)",
                        file.display()
                    ))
                    .into());
                }
                Some(by_session)
            }
        };
        Ok(SealPolicy {
            trusted,
            require_sealed,
            anchors,
            anchor_file: anchor_file.map(Path::to_owned),
        })
    }
}

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
    /// Seals that do not hold, and the seal policy's failures.
    seal_failures: Vec<SealFailureReport>,
    /// How many seals of its own the session holds.
    own_seals: u64,
    /// The last seal, own or inherited.
    last_seal: Option<SealReport>,
    /// Why its log could not be opened or read (an I/O error), when it
    /// could not: the other sessions are still verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// A failed seal check: a seal (its seq) or a policy about the session
/// (`seq` null).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SealFailureReport {
    seq: Option<u64>,
    message: String,
}

/// The last seal of a session.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SealReport {
    seq: u64,
    through_seq: u64,
    key: Option<String>,
    own: bool,
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
    /// The damaged row's seq, in a database (whose rows have no line).
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
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
pub fn run(
    args: &SessionArgs,
    json: bool,
    allow_empty: bool,
    quiet: bool,
    policy: &SealPolicy,
) -> Result<u8> {
    if let (Some(wanted), Some(anchors)) = (args.session.as_deref(), &policy.anchors) {
        // `--session` checks that session's anchors alone: with none, the
        // anchor file would check nothing, and let any store pass.
        if !anchors.contains_key(wanted) {
            let file = policy
                .anchor_file
                .as_deref()
                .map_or(String::new(), |file| file.display().to_string());
            return Err(UsageError(format!(
                "{file}: the anchor file holds no anchor of session {wanted}, the one \
                 --session picks, so nothing would be checked against it"
            ))
            .into());
        }
    }
    let target = Target::open(&args.store)?;
    // The whole store as of one moment, read on each core side by side,
    // and SQLite's check of every page and its count of the rows on a
    // handle of their own beside them.
    let readers = Readers::hold_with_checker(&target, readers_for(args))?;
    let code = readers.beside(WholeStore::check, |whole_store| {
        verify_all(
            args,
            json,
            allow_empty,
            quiet,
            policy,
            &readers,
            whole_store,
        )
    })?;
    if let Target::Store(sessionlog_store::Store::Jsonl(store)) = &target {
        warn_of_leftovers(store)?;
    }
    Ok(code)
}

/// What the checks of a store as a whole find beside the sessions' reads
/// (`verify`, and `stats` of the whole store).
#[derive(Debug)]
pub struct WholeStore {
    /// What SQLite's check of every page finds.
    pub engine_damage: Vec<StoreError>,
    /// Whether counting the rows rules out events without a session row.
    pub events_accounted_for: bool,
}

impl WholeStore {
    /// Runs SQLite's check of every page, then the count of the rows, on
    /// `checker` (a handle of the moment the sessions are read in).
    pub fn check(checker: &Target) -> Result<WholeStore> {
        Ok(WholeStore {
            engine_damage: checker.engine_check()?,
            events_accounted_for: checker.events_accounted_for()?,
        })
    }
}

/// Prints a verdict on each session of `readers` and on each piece of
/// damage of the store as a whole: first what listing the sessions finds,
/// then the sessions, then what the check of every page and the count of
/// the rows (`whole_store`, which may be running already) find, and last
/// events without a session row, looked for one owner at a time when the
/// count does not rule them out (docs/FORMAT.md, "SQLite").
fn verify_all(
    args: &SessionArgs,
    json: bool,
    allow_empty: bool,
    quiet: bool,
    policy: &SealPolicy,
    readers: &Readers,
    whole_store: impl FnOnce() -> Result<WholeStore>,
) -> Result<u8> {
    // A session the anchor file names and `--session` picks, gone from
    // the store, fails its anchors (7) as when the whole store is read.
    let Audit { sessions, damage } = match anchored_but_absent(args, policy, readers.first())? {
        true => Audit {
            sessions: Vec::new(),
            damage: Vec::new(),
        },
        false => readers.first().audit(args.session.as_deref())?,
    };
    // What the checks beside the reads find, the first time it is asked
    // for (`None` after). The count rules out events without a session
    // row only while every session reads whole (`short_of_rows`: a corrupt
    // session may be short of rows by as many) and every session row has
    // a valid id (an invalid one names no session that is read).
    let mut whole_store = Some(whole_store);
    let mut findings = |short_of_rows: bool| -> Result<Option<(Vec<StoreError>, Vec<StoreError>)>> {
        let Some(check) = whole_store.take() else {
            return Ok(None);
        };
        let whole = check()?;
        let vouched = whole.events_accounted_for && !short_of_rows && damage.is_empty();
        let unowned = match vouched {
            true => Vec::new(),
            false => readers.first().unowned_events()?,
        };
        Ok(Some((whole.engine_damage, unowned)))
    };
    let mut found = None;
    if damage.is_empty() && sessions.is_empty() {
        // Nothing to read beside the checks: the store is empty only when
        // it is whole.
        found = findings(false)?;
        if found
            .as_ref()
            .is_none_or(|(engine, unowned)| engine.is_empty() && unowned.is_empty())
        {
            match missing_anchored_sessions(args, &sessions, policy).is_empty() {
                true => require_sessions(&sessions, &args.store, allow_empty)?,
                // The anchor file names sessions this store should hold:
                // each is reported missing below (a seal failure, exit 7),
                // as when only some of them were deleted.
                false if args.session.is_none() => {
                    crate::target::warn_if_no_sessions(0, &args.store);
                }
                false => {}
            }
        }
    }
    let bar = crate::progress::bar(quiet, "verify");
    bar.set_length(sessions.len() as u64);
    let mut code = exit::OK;
    let mut out = crate::terminal::stdout(if json { Mode::Json } else { Mode::Text });
    // A verdict is shown as soon as it is found to someone watching (a
    // terminal, a progress bar); into a file or a pipe the lines go in
    // blocks, as a store of many small sessions has a line for each.
    let line_by_line = crate::terminal::stdout_is_terminal() || !bar.is_hidden();
    let mut print = |rendered: &[u8]| -> Result<()> {
        out.write_all(rendered)?;
        if line_by_line {
            out.flush()?;
        }
        Ok(())
    };
    let damage_verdict = |error: &StoreError, code: &mut u8| {
        let verdict = store_damage_verdict(&args.store, error);
        *code = exit::worst(*code, verdict_code(&verdict));
        verdict
    };
    for error in &damage {
        print(&render_one(&damage_verdict(error, &mut code), json)?)?;
    }
    let mut short_of_rows = false;
    let unreadable = readers.first().unreadable_log(args.session.as_deref());
    // Each reader renders the verdicts of its chunk; the calling thread
    // prints them in order.
    readers.in_order(
        &sessions,
        |target, chunk| {
            let mut rendered = Vec::new();
            let verdicts = chunk
                .iter()
                .map(|session| {
                    let verdict = verify_session(target, session, policy, unreadable)?;
                    render(&mut rendered, &verdict, json)?;
                    Ok(Judged {
                        status: verdict_code(&verdict),
                        corrupt: verdict.corruption.is_some(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((verdicts, rendered))
        },
        |(verdicts, rendered)| {
            for verdict in &verdicts {
                short_of_rows |= verdict.corrupt;
                code = exit::worst(code, verdict.status);
            }
            match bar.is_hidden() {
                true => print(&rendered)?,
                false => bar.suspend(|| print(&rendered))?,
            }
            bar.inc(verdicts.len() as u64);
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    let (engine_damage, unowned) = match found {
        Some(found) => found,
        None => findings(short_of_rows)?.unwrap_or_default(),
    };
    for error in engine_damage.iter().chain(&unowned) {
        print(&render_one(&damage_verdict(error, &mut code), json)?)?;
    }
    for verdict in missing_anchored_sessions(args, &sessions, policy) {
        code = exit::worst(code, verdict_code(&verdict));
        print(&render_one(&verdict, json)?)?;
    }
    out.flush()?;
    Ok(code)
}

/// What the calling thread keeps of a session's verdict, which its
/// reader has rendered.
struct Judged {
    /// The exit code the verdict calls for.
    status: u8,
    corrupt: bool,
}

/// Appends `verdict` to `out` as `verify` prints it: a JSON line with
/// `json`, else a line for people.
fn render(out: &mut Vec<u8>, verdict: &Verdict, json: bool) -> Result<()> {
    if json {
        serde_json::to_writer(&mut *out, verdict)?;
        out.push(b'\n');
    } else {
        write_human(out, verdict)?;
    }
    Ok(())
}

/// `verdict` as [`render`] writes it, on its own.
fn render_one(verdict: &Verdict, json: bool) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    render(&mut out, verdict, json)?;
    Ok(out)
}

/// How many readers a command of the whole store reads through (see
/// `side_by_side`): one for the one session `--session` picks.
pub fn readers_for(args: &SessionArgs) -> usize {
    match args.session {
        Some(_) => 1,
        None => crate::side_by_side::MAX_READERS,
    }
}

/// Names the temporary files nobody holds (what a killed creation, fork,
/// migration or writer left): they are no session and change no verdict.
/// The locks of interrupted migrations are left to
/// [`warn_of_migration_locks`]: `clean` keeps them until a run finishes
/// the migration.
fn warn_of_leftovers(store: &sessionlog_store::JsonlStore) -> Result<()> {
    let found = store.leftovers()?;
    let left: Vec<_> = found
        .iter()
        .filter(|leftover| !leftover.in_use && !leftover.is_migration_lock())
        .collect();
    if let Some(first) = left.first() {
        let bytes: u64 = left.iter().map(|leftover| leftover.bytes).sum();
        let folder = crate::terminal::shell_word(&sessionlog_store::store_display(store.folder()));
        // What `clean` takes without options: files written at least its
        // default age ago.
        let recent = left
            .iter()
            .filter(|leftover| !leftover.removable(CLEAN_MIN_AGE))
            .count();
        let removes = match recent {
            0 => format!("`sessionlog clean {folder}` removes them"),
            _ => format!(
                "`sessionlog clean {folder}` removes them once written {} minutes ago \
                 ({} of them written since; `--older-than 0` takes them now, on a \
                 folder no process is writing)",
                CLEAN_MIN_AGE.as_secs() / 60,
                recent
            ),
        };
        crate::warn(format!(
            "{} ({bytes} bytes) left by an interrupted create, fork, migrate or \
             snapshot write, such as {}; no reader takes them for a session, and {removes}",
            crate::terminal::counted(left.len() as u64, "temporary file"),
            sessionlog_store::store_display(&first.path),
        ));
    }
    warn_of_migration_locks(store.folder(), &found);
    Ok(())
}

/// The age from which `clean`, given no `--older-than`, removes a
/// leftover.
pub const CLEAN_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Warns, for `verify` and `clean`, of the migrations into `folder` that
/// its leftovers `found` show may have been interrupted: a lock no run
/// holds, and another user's lock, which this user cannot test.
pub fn warn_of_migration_locks(folder: &std::path::Path, found: &[sessionlog_store::Leftover]) {
    // One warning for each: each is a migration of its own to finish.
    for lock in found.iter().filter(|leftover| leftover.is_migration_lock()) {
        if !lock.in_use {
            crate::warn(interrupted_migration(folder, lock));
        }
        if lock.untestable {
            crate::warn(migration_of_another_user(folder, lock));
        }
    }
}

/// The command that finishes the migration into `folder` whose lock is
/// `lock`: from the source the lock names, else from `FROM`, for the
/// reader to fill in (a lock cut short, or one this user may not read).
fn resume_command(folder: &std::path::Path, lock: &sessionlog_store::Leftover) -> String {
    use crate::terminal::shell_word;
    let source = lock.migration_source();
    format!(
        "`sessionlog migrate {} {} --resume`",
        source
            .as_deref()
            .map_or_else(|| "FROM".to_owned(), shell_word),
        shell_word(&sessionlog_store::store_display(folder))
    )
}

/// What a migration lock of another user in `folder` means: this user
/// cannot tell a running migration from an interrupted one.
fn migration_of_another_user(
    folder: &std::path::Path,
    lock: &sessionlog_store::Leftover,
) -> String {
    format!(
        "{path} is the lock of a migration into {folder} by another user, which this user \
         cannot test: if no such run is going on, it was interrupted, and the folder may lack \
         sessions it had not published; its owner finishes it with {command}",
        folder = sessionlog_store::store_display(folder),
        path = sessionlog_store::store_display(&lock.path),
        command = resume_command(folder, lock)
    )
}

/// What an unheld migration lock in `folder` means: the sessions verified
/// may not be all the source held.
fn interrupted_migration(folder: &std::path::Path, lock: &sessionlog_store::Leftover) -> String {
    format!(
        "a migration into {folder} was interrupted ({path} is its lock, held by no run): the \
         folder may lack sessions that run had not published; finish it with {command} before \
         trusting it whole (the lock stays until a run finishes it; remove it by hand to give \
         the migration up)",
        folder = sessionlog_store::store_display(folder),
        path = sessionlog_store::store_display(&lock.path),
        command = resume_command(folder, lock)
    )
}

/// The verdict on damage of a store as a whole (no session named). Its
/// source is the store, so the message does not name it again, nor point
/// to `verify`.
fn store_damage_verdict(store: &Path, error: &StoreError) -> Verdict {
    let mut verdict = Verdict::empty(None, sessionlog_store::store_display(store));
    verdict.status = "corrupt";
    verdict.corruption = Some(CorruptionReport {
        line: None,
        offset: None,
        seq: None,
        message: match error {
            StoreError::DamagedDatabase { reason, .. } => {
                format!("the database is damaged: {reason}")
            }
            other => other.to_string(),
        },
    });
    verdict
}

/// Whether `--session` picks a session the anchor file names and the
/// store does not list (a lone log: whose header names another session).
fn anchored_but_absent(args: &SessionArgs, policy: &SealPolicy, target: &Target) -> Result<bool> {
    let (Some(wanted), Some(anchors)) = (args.session.as_deref(), &policy.anchors) else {
        return Ok(false);
    };
    let Ok(id) = sessionlog_schema::SessionId::parse(wanted) else {
        return Ok(false);
    };
    if !anchors.contains_key(wanted) {
        return Ok(false);
    }
    Ok(match target {
        // The store's listing, as a read of the whole store has it: a name
        // that is no session there (a symlink, a folder) is none here
        // either.
        Target::Store(store) => !store.list_sessions()?.ids.contains(&id),
        // A log whose header cannot be read is left to the read, which
        // says why.
        Target::File(path) => {
            sessionlog_store::LogReader::open(path, None).is_ok_and(|log| log.header().id != id)
        }
    })
}

/// The sessions an anchor file names that the store no longer holds (all
/// of them when no `--session` picks one), each a seal failure.
fn missing_anchored_sessions(
    args: &SessionArgs,
    sessions: &[SessionRef],
    policy: &SealPolicy,
) -> Vec<Verdict> {
    let Some(anchors) = &policy.anchors else {
        return Vec::new();
    };
    let present: BTreeSet<&str> = sessions.iter().map(|session| session.id.as_str()).collect();
    let anchor_file = policy
        .anchor_file
        .as_deref()
        .map_or(String::new(), |file| file.display().to_string());
    anchors
        .keys()
        .filter(|id| !present.contains(id.as_str()))
        .filter(|id| {
            args.session
                .as_deref()
                .is_none_or(|wanted| wanted == id.as_str())
        })
        .map(|id| {
            let mut verdict = Verdict::empty(
                Some(id.clone()),
                sessionlog_store::store_display(&args.store),
            );
            verdict.status = "seal-failure";
            verdict.seal_failures.push(SealFailureReport {
                seq: None,
                message: format!(
                    "session {id}, named in the anchor file {anchor_file}, is missing from {}",
                    sessionlog_store::store_display(&args.store)
                ),
            });
            verdict
        })
        .collect()
}

impl Verdict {
    /// A verdict of nothing found yet.
    fn empty(session: Option<String>, source: String) -> Verdict {
        Verdict {
            session,
            source,
            status: "ok",
            events: 0,
            last_seq: 0,
            torn_tail: None,
            corruption: None,
            violations: Vec::new(),
            seal_failures: Vec::new(),
            own_seals: 0,
            last_seal: None,
            error: None,
        }
    }
}

/// Verifies one session (its records, rules and own seals), then holds it
/// to `policy`. A log that cannot be opened or read is that session's
/// verdict when `unreadable` says so, with what was found before the
/// error.
///
/// A log whose last line is unfinished while a writer holds it is read
/// again, a few times over some 150 ms: a writer that opens a log cuts a
/// torn tail first, so such a line is most likely an append still being
/// written, which is no torn tail. One still unfinished then is reported
/// as a torn tail, saying that a writer holds the log.
fn verify_session(
    target: &Target,
    session: &SessionRef,
    policy: &SealPolicy,
    unreadable: UnreadableLog,
) -> Result<Verdict> {
    let mut verdict = verify_once(target, session, policy, unreadable)?;
    let log = match target {
        Target::File(path) => Some(path.clone()),
        Target::Store(sessionlog_store::Store::Jsonl(store)) => Some(store.log_path(&session.id)),
        Target::Store(_) => None,
    };
    let Some(log) = log.filter(|_| verdict.torn_tail.is_some()) else {
        return Ok(verdict);
    };
    for pause in [20, 40, 80] {
        if !sessionlog_store::writer_holds(&log) {
            return Ok(verdict);
        }
        std::thread::sleep(std::time::Duration::from_millis(pause));
        verdict = verify_once(target, session, policy, unreadable)?;
        if verdict.torn_tail.is_none() {
            return Ok(verdict);
        }
    }
    if let Some(torn) = &mut verdict.torn_tail {
        if sessionlog_store::writer_holds(&log) {
            torn.reason.push_str(
                " (a writer holds the log: this may be an append still being written; \
                 verify again once it is done)",
            );
        }
    }
    Ok(verdict)
}

/// [`verify_session`]'s one read of the session.
fn verify_once(
    target: &Target,
    session: &SessionRef,
    policy: &SealPolicy,
    unreadable: UnreadableLog,
) -> Result<Verdict> {
    let mut verdict = Verdict::empty(Some(session.id.to_string()), session.label.clone());
    match scan(target, session, policy, &mut verdict) {
        Ok(()) => {}
        Err(StoreError::Corrupt { corruption, .. }) => {
            verdict.corruption = Some(CorruptionReport {
                line: Some(corruption.position.line),
                offset: Some(corruption.position.offset),
                seq: None,
                // What helps, as every other command says it.
                message: format!(
                    "{corruption}{}",
                    sessionlog_store::corruption_remedy(&corruption)
                ),
            });
        }
        Err(StoreError::CorruptRow { seq, reason, .. }) => {
            verdict.corruption = Some(CorruptionReport {
                line: None,
                offset: None,
                seq: Some(seq),
                message: format!("corrupt at seq {seq}: {reason}"),
            });
        }
        Err(error) if error.class() == sessionlog_store::ErrorClass::Corrupt => {
            verdict.corruption = Some(CorruptionReport {
                line: None,
                offset: None,
                seq: None,
                message: error.to_string(),
            });
        }
        Err(error)
            if error.class() == sessionlog_store::ErrorClass::Io
                && unreadable == UnreadableLog::Reported =>
        {
            verdict.error = Some(error.to_string());
        }
        Err(error) => return Err(error.into()),
    }
    verdict.status = if verdict.corruption.is_some() {
        "corrupt"
    } else if !verdict.seal_failures.is_empty() {
        "seal-failure"
    } else if !verdict.violations.is_empty() {
        "violations"
    } else if verdict.error.is_some() {
        "unreadable"
    } else if verdict.torn_tail.is_some() {
        "torn-tail"
    } else {
        "ok"
    };
    Ok(verdict)
}

fn scan(
    target: &Target,
    session: &SessionRef,
    policy: &SealPolicy,
    verdict: &mut Verdict,
) -> Result<(), StoreError> {
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
    let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    let anchors: &[Anchor] = policy
        .anchors
        .as_ref()
        .and_then(|anchors| anchors.get(session.id.as_str()))
        .map_or(&[], Vec::as_slice);
    // The chain value at each anchor's seq, met as the fold passes it.
    let mut anchored: Vec<Option<sessionlog_schema::ChainValue>> = anchors
        .iter()
        .map(|anchor| (anchor.seq == 0).then(|| state.chain()))
        .collect();
    let mut seed_switches = SeedSwitches::default();
    let header = stream.header().clone();
    fold_stream(&mut *stream, &mut state, |record, folded, state| {
        verdict.events += 1;
        verdict.last_seq = record.seq();
        if header.parent_session.is_some() && record.seq() <= header.seed_length {
            seed_switches.note(record);
        }
        match folded {
            Err(violation) if violation.kind == ViolationKind::Seal => {
                verdict.seal_failures.push(SealFailureReport {
                    seq: Some(violation.seq),
                    message: violation.to_string(),
                });
            }
            Err(violation) => {
                // An own seal that is no valid seal cannot be signed by a
                // trusted key: under --trust it fails as a seal too, so
                // that breaking a seal's shape never turns a tampered,
                // sealed log's 7 into a 4.
                let own = record.seq() > state.header().seed_length;
                if policy.trusted.is_some()
                    && own
                    && record.event_type() == EventType::Seal.as_str()
                {
                    verdict.seal_failures.push(SealFailureReport {
                        seq: Some(violation.seq),
                        message: format!(
                            "seal at seq {} is no valid seal ({}), and the trust file requires every own seal signed by a listed key",
                            violation.seq, violation.message
                        ),
                    });
                }
                verdict.violations.push(ViolationReport::from(&violation));
            }
            Ok(()) => {}
        }
        for (anchor, chain) in anchors.iter().zip(&mut anchored) {
            if anchor.seq == record.seq() {
                *chain = Some(state.chain());
            }
        }
        if let Some(seal) = state.last_seal().filter(|seal| seal.seq == record.seq()) {
            verdict.own_seals += u64::from(seal.own);
            verdict.last_seal = Some(SealReport {
                seq: seal.seq,
                through_seq: seal.through_seq,
                key: seal.key.map(|key| key.to_string()),
                own: seal.own,
            });
            if let Some(trusted) = &policy.trusted {
                if let Err(message) = check_trusted(seal, trusted) {
                    verdict.seal_failures.push(SealFailureReport {
                        seq: Some(seal.seq),
                        message,
                    });
                }
            }
        }
    })?;
    for (anchor, chain) in anchors.iter().zip(anchored) {
        if let Err(message) = anchor.check(state.seq(), chain) {
            verdict
                .seal_failures
                .push(SealFailureReport { seq: None, message });
        }
    }
    if policy.require_sealed {
        if let Err(message) = check_sealed(&state) {
            verdict
                .seal_failures
                .push(SealFailureReport { seq: None, message });
        }
    }
    if let Some(parent) = stream.seed_parent() {
        // A seeded record has the same seq in the child as in its parent.
        for (seq, message) in inherited_seals_failing(target, parent, header.seed_length)? {
            verdict.seal_failures.push(SealFailureReport {
                seq: Some(seq),
                message,
            });
        }
        if let Some(message) = seed_switches.header_not_given(&header, parent) {
            verdict.corruption = Some(CorruptionReport {
                line: None,
                offset: None,
                seq: Some(0),
                message: format!("corrupt at seq 0: {message}"),
            });
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

/// The seals of the parent `parent` (its own, from the session's header on)
/// among the first `seed_length` events of its log, which a fork by
/// reference refers to, that do not hold over the parent's chain, each
/// said. A child checks the seals it inherits for their shape only, but a
/// fork by reference's seed is its parent's very rows: folded over the
/// parent's header, each parent seal in it is checked as the parent's own,
/// so that rows changed under them (and a fork taken from a snapshot that
/// did not read them) fail the child too. Each with its seq.
fn inherited_seals_failing(
    target: &Target,
    parent: &sessionlog_schema::SessionHeader,
    seed_length: u64,
) -> Result<Vec<(u64, String)>, StoreError> {
    let Target::Store(store) = target else {
        return Ok(Vec::new());
    };
    let mut stream = store.stream(&parent.id)?;
    let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    let mut failing = Vec::new();
    // The read stops at the seed's last event: the parent's rows after it
    // are none of the child's (damage there is the parent's alone).
    let mut read = 0;
    while read < seed_length {
        let Some(record) = stream.next_event()? else {
            break;
        };
        read = record.seq();
        if read > seed_length {
            break;
        }
        if let Err(violation) = state.apply(&record) {
            if violation.kind == ViolationKind::Seal {
                failing.push((
                    violation.seq,
                    format!(
                        "the seal at seq {} that this fork by reference inherits does not hold \
                         over the log of session {}: {}",
                        violation.seq, parent.id, violation.message
                    ),
                ));
            }
        }
    }
    // The parent's own seed, when it is a fork by reference too: its
    // seals are checked over its own parent's log, and so on up (a chain
    // of references is bounded when it is read).
    if let Some(grandparent) = stream.seed_parent() {
        let through = seed_length.min(parent.seed_length);
        failing.extend(inherited_seals_failing(target, grandparent, through)?);
    }
    Ok(failing)
}

/// The sandbox and approval switches among a child's seeded events, with
/// their seqs, to check a fork by reference's header against its parent's
/// log: the header a fork writes takes the parent's last own switches
/// through the seed (else the parent header's own values).
#[derive(Default)]
struct SeedSwitches {
    sandbox: Vec<(u64, SandboxMode)>,
    approval: Vec<(u64, ApprovalPolicy)>,
}

impl SeedSwitches {
    fn note(&mut self, record: &sessionlog_schema::EventRecord) {
        let switch = record.event_type() == EventType::SandboxMode.as_str()
            || record.event_type() == EventType::ApprovalPolicy.as_str();
        if !switch {
            return;
        }
        match Event::parse(record.event_type(), record.data()) {
            Ok(Event::SandboxMode(switch)) => self.sandbox.push((record.seq(), switch.mode)),
            Ok(Event::ApprovalPolicy(switch)) => {
                self.approval.push((record.seq(), switch.policy));
            }
            _ => {}
        }
    }

    /// What is wrong with `child`'s header, a fork by reference of the
    /// session whose header is `parent`: `None` when the parent's log
    /// through the seed gives it (its creation time aside).
    fn header_not_given(&self, child: &SessionHeader, parent: &SessionHeader) -> Option<String> {
        let own = |seq: u64| seq > parent.seed_length;
        let sandbox = self
            .sandbox
            .iter()
            .rev()
            .find(|(seq, _)| own(*seq))
            .map(|(_, mode)| *mode)
            .or(parent.sandbox_mode);
        let approval = self
            .approval
            .iter()
            .rev()
            .find(|(seq, _)| own(*seq))
            .map(|(_, policy)| *policy)
            .or(parent.approval_policy);
        let given = child_header(
            parent,
            child.id.clone(),
            child.seed_length,
            sandbox,
            approval,
            child.created_at,
        );
        if &given == child {
            return None;
        }
        let shown = |header: &SessionHeader| {
            format!(
                "cwd {:?}, delegationDepth {}, sandboxMode {}, approvalPolicy {}",
                header.cwd,
                header.delegation_depth,
                header.sandbox_mode.map_or("null", SandboxMode::as_str),
                header
                    .approval_policy
                    .map_or("null", ApprovalPolicy::as_str),
            )
        };
        Some(format!(
            "its header gives {}, but the log of session {}, whose first {} events it refers to, \
             gives a child {}: a header that no fork of that log writes",
            shown(child),
            parent.id,
            child.seed_length,
            shown(&given),
        ))
    }
}

/// The exit code of one verdict: a log that could not be read is an I/O
/// error (1), which only what was found outranks.
pub fn verdict_code(verdict: &Verdict) -> u8 {
    let found = exit::of_findings(
        verdict.corruption.is_some(),
        !verdict.seal_failures.is_empty(),
        !verdict.violations.is_empty(),
        verdict.torn_tail.is_some(),
    );
    match verdict.error {
        Some(_) => exit::worst(found, exit::USAGE),
        None => found,
    }
}

/// Writes the lines of one verdict, as people read them, into `out`.
fn write_human(out: &mut impl Write, verdict: &Verdict) -> std::io::Result<()> {
    let name = &verdict.source;
    // An inherited seal (seq within the seed) vouched for the parent's
    // log: its key is named, never said to have signed what this log
    // holds. (A fork by reference's is also checked over the parent's
    // rows, which are its seed.)
    let sealed = match &verdict.last_seal {
        None => String::new(),
        Some(seal) if seal.own => format!(
            "; sealed through seq {}{}",
            seal.through_seq,
            seal.key
                .as_deref()
                .map_or(" (unsigned)".to_owned(), |key| format!(", signed by {key}"))
        ),
        Some(seal) => format!(
            "; inherits a seal through seq {}{}, which vouched for the parent's log (checked \
             here for its shape, and over the parent's rows when they are this fork's seed)",
            seal.through_seq,
            seal.key
                .as_deref()
                .map_or(" (unsigned)".to_owned(), |key| format!(" naming {key}"))
        ),
    };
    match verdict.status {
        "ok" => writeln!(
            out,
            "{name}: ok ({}, last seq {}{sealed})",
            crate::terminal::counted(verdict.events, "event"),
            verdict.last_seq
        )?,
        _ => {
            if let Some(corruption) = &verdict.corruption {
                writeln!(out, "{name}: {}", corruption.message)?;
            }
            for failure in &verdict.seal_failures {
                writeln!(out, "{name}: SEAL FAILURE: {}", failure.message)?;
            }
            for violation in &verdict.violations {
                writeln!(out, "{name}: rule violation: {}", violation.message)?;
            }
            if let Some(error) = &verdict.error {
                writeln!(out, "{name}: unreadable: {error}")?;
            }
            if let Some(torn) = &verdict.torn_tail {
                writeln!(
                out,
                    "{name}: torn tail at line {} (byte offset {}): {} bytes, {}; the good prefix holds {} (last seq {}); a writer truncates it on open",
                    torn.line, torn.offset, torn.bytes, torn.reason, crate::terminal::counted(verdict.events, "event"), verdict.last_seq
                )?;
            }
        }
    }
    Ok(())
}
