//! Importing the transcripts other agent tools write (Codex CLI rollouts,
//! Claude Code projects) as sessions of this format.
//!
//! Reading is pure: `source` splits a file into numbered JSON lines,
//! `codex` and `claude` translate them into sessions through the
//! `SessionBuilder`, which opens and closes turns and steps so that every
//! event keeps the rules. Writing goes through `Store::create_session`,
//! which folds every event against the rules again before anything is
//! written and publishes the session atomically, so an import can never
//! produce a log that breaks a rule, and a file that cannot be read imports
//! nothing. Session ids derive from the tools' own ids: importing the same
//! transcript again finds its sessions already there and writes nothing.
//! The mapping is documented in docs/IMPORT.md.

mod builder;
mod claude;
mod codex;
mod source;

use serde_json::Value;
use std::path::{Path, PathBuf};

use sessionlog_schema::{EventRecord, SessionHeader, SessionId, CRC_SUFFIX_LEN, MAX_RECORD_BYTES};
use sessionlog_store::{Durability, NewEvent, Store, StoreError, WriterOptions};

pub use builder::Draft;
pub use source::ImportError;
use source::Place;

/// Which tool wrote a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Codex CLI rollouts.
    Codex,
    /// Claude Code project transcripts.
    Claude,
    /// Recognised from each file's content.
    Auto,
}

impl From<crate::cli::ImportFormat> for Format {
    fn from(format: crate::cli::ImportFormat) -> Format {
        match format {
            crate::cli::ImportFormat::Codex => Format::Codex,
            crate::cli::ImportFormat::Claude => Format::Claude,
            crate::cli::ImportFormat::Auto => Format::Auto,
        }
    }
}

/// One session translated from a transcript, not yet written.
#[derive(Debug, Clone)]
pub struct ImportedSession {
    /// Its header (the id derived from the source's own id).
    pub header: SessionHeader,
    /// Its events, in order.
    pub events: Vec<Draft>,
}

/// What one transcript file translates to: its session, and the child
/// sessions of the sub-agents it holds inline (none for an empty file).
#[derive(Debug, Clone)]
pub struct Translation {
    /// Parents before their children.
    pub sessions: Vec<ImportedSession>,
}

/// What became of one session of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOutcome {
    /// Written to the store.
    Created {
        /// Its events.
        events: u64,
        /// Source lines kept whole as `x-…` events.
        unknown_lines: u64,
    },
    /// Already in the store, identical: nothing written.
    Unchanged,
    /// Already in the store with the first events the source gives now:
    /// the source grew since it was imported (a session that went on, in
    /// a file the tool appends to), and the events after the stored ones
    /// were appended to the stored session, as a new import of the whole
    /// source would have written them.
    Extended {
        /// Events in the store before.
        stored: u64,
        /// Events appended.
        added: u64,
        /// Source lines kept whole as `x-…` events, of those appended.
        unknown_lines: u64,
    },
    /// Already in the store, but the source now gives another session:
    /// nothing written. A source that grew (a resumed session) gives the
    /// stored events and more; one that differs before the stored events
    /// end was rewritten, or is another source whose id maps to the same
    /// session id.
    Changed {
        /// Events in the store.
        stored: u64,
        /// Events the source gives now.
        now: u64,
        /// The first seq at which the two differ; 0 when the headers do.
        /// Past the stored events when the source only grew.
        differs_at: u64,
        /// Whether the stored log ends in a torn tail (its good prefix was
        /// compared): a source that then gives more lost nothing, the
        /// store's log did.
        stored_torn: bool,
        /// Whether the stored events after those the two share are only
        /// the ends of a step and a turn, which an import writes at the end
        /// of its source: the source was imported in the middle of a turn
        /// and went on with it.
        closed_at_end: bool,
    },
    /// Not written: another session of the same file, named, is in the
    /// store with other events. The sessions of one file refer to each
    /// other (a parent announces its sidechains), so they are written
    /// together or not at all.
    Withheld {
        /// The session of the source that the store holds otherwise.
        because: SessionId,
    },
}

/// The sessions of one imported file.
#[derive(Debug, Clone)]
pub struct FileImport {
    /// Each session with what became of it.
    pub sessions: Vec<(SessionHeader, SessionOutcome)>,
}

/// The files a SOURCE names: itself, or the transcripts under a folder
/// (walked recursively, in name order, symbolic links not followed, the
/// folder `skip` left out) whose names are the tools' own: `rollout-*.jsonl`
/// for Codex, `<uuid>.jsonl` and `agent-*.jsonl` for Claude Code, either for
/// `auto`; each also compressed as `.jsonl.zst`.
pub fn discover(source: &Path, format: Format, skip: &Path) -> Result<Discovered, ImportError> {
    let metadata = std::fs::metadata(source)
        .map_err(|error| ImportError::file(source, format!("cannot read: {error}")))?;
    let mut discovered = Discovered::default();
    if !metadata.is_dir() {
        discovered.files.push(source.to_owned());
        return Ok(discovered);
    }
    walk(source, format, skip, &mut discovered);
    Ok(discovered)
}

/// What a walk of a SOURCE found: the transcripts to read, and what it
/// could not look into (a folder it may not list, an entry it cannot
/// stat), each a failure of its own: the rest of the folder is still read.
#[derive(Debug, Default)]
pub struct Discovered {
    /// The transcripts, in the order they are read.
    pub files: Vec<PathBuf>,
    /// What could not be looked into.
    pub failures: Vec<ImportError>,
}

fn walk(folder: &Path, format: Format, skip: &Path, found: &mut Discovered) {
    let cannot_list =
        |error: std::io::Error| ImportError::file(folder, format!("cannot list: {error}"));
    let entries = match std::fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(error) => return found.failures.push(cannot_list(error)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => paths.push(entry.path()),
            Err(error) => found.failures.push(cannot_list(error)),
        }
    }
    paths.sort();
    for path in paths {
        let metadata = match path.symlink_metadata() {
            Ok(metadata) => metadata,
            Err(error) => {
                found
                    .failures
                    .push(ImportError::file(&path, format!("cannot read: {error}")));
                continue;
            }
        };
        if metadata.is_dir() && !same_folder(&path, skip) {
            walk(&path, format, skip, found);
        } else if metadata.is_file() && is_transcript_name(&path, format) {
            found.files.push(path);
        }
    }
}

fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn is_transcript_name(path: &Path, format: Format) -> bool {
    // A name that is not UTF-8 is matched as the session id is derived
    // from it (`file_stem`), its other bytes as U+FFFD: skipped silently,
    // it would be a transcript of the folder never read nor reported.
    let Some(name) = path.file_name().map(|name| name.to_string_lossy()) else {
        return false;
    };
    let Some(stem) = name
        .strip_suffix(".jsonl")
        .or_else(|| name.strip_suffix(".jsonl.zst"))
    else {
        return false;
    };
    let codex = stem.starts_with("rollout-");
    let claude = stem.starts_with("agent-") || is_uuid(stem);
    match format {
        Format::Codex => codex,
        Format::Claude => claude,
        Format::Auto => codex || claude,
    }
}

/// Whether `text` is a UUID (`8-4-4-4-12` hex digits).
pub fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.chars().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// Reads and translates one transcript file, without writing anything.
pub fn translate_file(path: &Path, format: Format) -> Result<Translation, ImportError> {
    let bytes = read_bytes(path)?;
    translate_bytes(path, &bytes, format)
}

/// Translates the content of `path` (already read).
pub fn translate_bytes(
    path: &Path,
    bytes: &[u8],
    format: Format,
) -> Result<Translation, ImportError> {
    let lines = source::read_lines(path, bytes)?;
    if lines.is_empty() {
        // Nothing to import, and nothing wrong: the tools leave such files.
        return Ok(Translation {
            sessions: Vec::new(),
        });
    }
    let format = match format {
        Format::Auto if codex::recognise(&lines) => Format::Codex,
        Format::Auto if claude::recognise(&lines) => Format::Claude,
        Format::Auto => {
            return Err(ImportError::at_place(
                path,
                lines[0].place(),
                "not a Codex rollout nor a Claude Code transcript",
            ))
        }
        known => known,
    };
    match format {
        Format::Codex => codex::translate(path, &lines),
        Format::Claude | Format::Auto => claude::translate(path, &lines),
    }
}

/// The most an import reads of one source file, and the most a compressed
/// one may expand to: a bound on what a device, an endless pipe or a zstd
/// bomb named as a SOURCE can make it hold. A file above it fails alone.
pub const MAX_SOURCE_BYTES: u64 = 1 << 30;

fn read_bytes(path: &Path) -> Result<Vec<u8>, ImportError> {
    use std::io::Read;
    let cannot_read =
        |error: std::io::Error| ImportError::file(path, format!("cannot read: {error}"));
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(ImportError::file(
            path,
            format!("more than {MAX_SOURCE_BYTES} bytes, above what an import reads of one file"),
        ));
    }
    if path.extension().is_some_and(|extension| extension == "zst") {
        return decompress_zstd(path, &bytes);
    }
    Ok(bytes)
}

/// The content of every frame of the zstd file `bytes`, in order, as
/// `zstd -d` gives it: skippable frames are skipped, each frame's checksum
/// (when it has one) is checked, and bytes after the last frame that are
/// not a frame fail the file, as does content above [`MAX_SOURCE_BYTES`].
fn decompress_zstd(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, ImportError> {
    decompress_zstd_within(path, bytes, MAX_SOURCE_BYTES)
}

/// [`decompress_zstd`], the content held to `limit` bytes.
fn decompress_zstd_within(path: &Path, bytes: &[u8], limit: u64) -> Result<Vec<u8>, ImportError> {
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
    use std::io::Read;
    if bytes.is_empty() {
        return Err(ImportError::file(
            path,
            "not a zstd stream: the file is empty",
        ));
    }
    let mut rest = bytes;
    let mut out = Vec::new();
    let mut frames = 0u64;
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        let damaged = |error: &dyn std::fmt::Display| {
            ImportError::file(
                path,
                format!(
                    "damaged zstd stream: frame {} at byte offset {offset}: {error}",
                    frames + 1
                ),
            )
        };
        let mut decoder = match ruzstd::decoding::StreamingDecoder::new(&mut rest) {
            Ok(decoder) => decoder,
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                let Some(after) = rest.get(length as usize..) else {
                    return Err(damaged(&"a skippable frame cut short"));
                };
                rest = after;
                continue;
            }
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::BadMagicNumber(
                magic,
            ))) => {
                // The magic number is read little-endian: its bytes as the
                // file holds them.
                let bytes = magic
                    .to_le_bytes()
                    .map(|byte| format!("{byte:02x}"))
                    .join(" ");
                let what = format!(
                    "it begins with the bytes {bytes}, not a frame's magic number (28 b5 2f fd)"
                );
                return Err(match frames {
                    0 => ImportError::file(path, format!("not a zstd stream: {what}")),
                    _ => damaged(&format!("bytes that are no zstd frame: {what}")),
                });
            }
            Err(error) if frames == 0 => {
                return Err(ImportError::file(
                    path,
                    format!(
                        "not a zstd stream, or its first frame's header is damaged (the decoder \
                         says: {error})"
                    ),
                ));
            }
            Err(error) => {
                return Err(damaged(&format!(
                    "its header does not decode (the decoder says: {error})"
                )))
            }
        };
        let room = limit + 1 - out.len() as u64;
        (&mut decoder)
            .take(room)
            .read_to_end(&mut out)
            .map_err(|error| {
                damaged(&format!(
                    "its content does not decode, cut short or changed (the decoder says: {error})"
                ))
            })?;
        if out.len() as u64 > limit {
            return Err(ImportError::file(
                path,
                format!("decompresses to more than {limit} bytes, above what an import reads of one file"),
            ));
        }
        let frame = &decoder.decoder;
        if let (Some(stored), Some(computed)) = (
            frame.get_checksum_from_data(),
            frame.get_calculated_checksum(),
        ) {
            if stored != computed {
                return Err(damaged(&format!(
                    "its checksum is {stored:08x}, its content's {computed:08x}"
                )));
            }
        }
        frames += 1;
    }
    Ok(out)
}

/// Writes the sessions of `translation` (read from `path`) into `store`,
/// each atomically and checked against every rule first. A session whose
/// id the store already holds is compared, never written again.
pub fn write(
    store: &Store,
    path: &Path,
    translation: Translation,
) -> Result<FileImport, ImportError> {
    // Every record of the file is checked (its size, every rule, values
    // both backends store) before the first session is written, so that a
    // file never imports in part for a record the store would refuse.
    let mut prepared = Vec::with_capacity(translation.sessions.len());
    for session in translation.sessions {
        let records = records_of(path, &session)?;
        if let Err(error) = store.check_new_session(&session.header, &records) {
            let line = match &error {
                StoreError::Rule { violation, .. } => violation
                    .seq
                    .checked_sub(1)
                    .and_then(|index| session.events.get(index as usize))
                    .map_or(Place::default(), |draft| draft.at),
                _ => Place::default(),
            };
            // A header's refusal names its session already.
            let reason = match &error {
                StoreError::InvalidHeader(_) => error.to_string(),
                _ => format!("session {}: {error}", session.header.id),
            };
            return Err(ImportError::at_place(path, line, reason));
        }
        prepared.push((session.header, records));
    }
    // Then every session the store holds already is compared, before the
    // first is written: one that cannot be read (damaged, no regular
    // file) fails the file with nothing of it written.
    let mut decided = Vec::with_capacity(prepared.len());
    for (header, records) in prepared {
        let store_error = |error: StoreError| session_error(path, &header.id, error);
        let outcome = match store.contains(&header.id).map_err(store_error)? {
            true => Some(compare(store, &header.id, &header, &records).map_err(store_error)?),
            false => None,
        };
        decided.push((header, records, outcome));
    }
    // A session the store holds otherwise withholds the file's others
    // (one that only grew is written on, unless another withholds it).
    let changed = decided
        .iter()
        .find_map(|(header, _, outcome)| match outcome {
            Some(changed @ SessionOutcome::Changed { .. }) if grown(changed).is_none() => {
                Some(header.id.clone())
            }
            _ => None,
        });
    let mut sessions: Vec<(SessionHeader, SessionOutcome)> = Vec::with_capacity(decided.len());
    for (header, records, outcome) in decided {
        let write = |written: &[(SessionHeader, SessionOutcome)], result| {
            written_before(path, written, result)
        };
        let outcome = match (outcome, &changed) {
            (Some(outcome), None) => match grown(&outcome) {
                Some(stored) => write(&sessions, extend(store, path, &header, stored, &records))?,
                None => outcome,
            },
            (Some(outcome), Some(_)) => outcome,
            (None, Some(because)) => SessionOutcome::Withheld {
                because: because.clone(),
            },
            (None, None) => write(&sessions, write_session(store, path, &header, &records))?,
        };
        sessions.push((header, outcome));
    }
    Ok(FileImport { sessions })
}

/// The stored events of a session that only grew since it was imported:
/// the good prefix of its stored log holds the first of the events the
/// source gives now, and the source gives more. A torn tail after that
/// prefix is what an interrupted append leaves (an import killed while it
/// extended the session, among them): the writer that extends it cuts the
/// tail first, as every writer does.
fn grown(outcome: &SessionOutcome) -> Option<u64> {
    match *outcome {
        SessionOutcome::Changed {
            stored,
            now,
            differs_at,
            ..
        } if differs_at > stored && now > stored => Some(stored),
        _ => None,
    }
}

/// `result`, the writing of a session of the file `path`, whose failure
/// names the sessions of the file `written` before it, if any: only a
/// failure of the store itself (the disk full, the server gone) gets
/// there, and what was written is said.
fn written_before(
    path: &Path,
    written: &[(SessionHeader, SessionOutcome)],
    result: Result<SessionOutcome, ImportError>,
) -> Result<SessionOutcome, ImportError> {
    result.map_err(|error| {
        let written: Vec<&str> = written
            .iter()
            .filter(|(_, outcome)| {
                matches!(
                    outcome,
                    SessionOutcome::Created { .. } | SessionOutcome::Extended { .. }
                )
            })
            .map(|(header, _)| header.id.as_str())
            .collect();
        match written.is_empty() {
            true => error,
            false => ImportError::file(
                path,
                format!(
                    "{}; written before it, each whole: {}",
                    error.reason,
                    written.join(", ")
                ),
            ),
        }
    })
}

/// How many times an import that finds the session it extends held, or
/// written to, by another (an import of the same source at the same time)
/// compares it again, a moment apart, before it gives up.
const EXTEND_TRIES: u32 = 100;

/// [`extend_session`], the session compared again when another writer
/// holds it or wrote it meanwhile (another import of the same source, at
/// the same time): it is then already imported, or grown still, as that
/// writer left it.
fn extend(
    store: &Store,
    path: &Path,
    header: &SessionHeader,
    stored: u64,
    records: &[EventRecord],
) -> Result<SessionOutcome, ImportError> {
    let store_error = |error: StoreError| session_error(path, &header.id, error);
    let mut stored = stored;
    let mut tries = 0;
    loop {
        match extend_session(store, header, stored, records) {
            Err(StoreError::Locked { .. } | StoreError::Conflict { .. })
                if tries < EXTEND_TRIES =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
                let outcome = compare(store, &header.id, header, records).map_err(store_error)?;
                match grown(&outcome) {
                    Some(now) => stored = now,
                    None => return Ok(outcome),
                }
            }
            result => return result.map_err(store_error),
        }
    }
}

/// Appends to the stored session of `header`, which holds the first
/// `stored` of `records`, the records after them, as they are: the same
/// seqs, times, types and data a new import of the whole source writes.
/// They are staged one by one (an import writes no batch) and made durable
/// by one sync; the first is expected at seq `stored + 1`, so that a
/// session appended to since it was compared is a conflict, and nothing is
/// written. A failed write is cut back; an import killed while it writes
/// leaves whole records and a torn tail after them, and the next import
/// goes on from the last whole one.
fn extend_session(
    store: &Store,
    header: &SessionHeader,
    stored: u64,
    records: &[EventRecord],
) -> Result<SessionOutcome, StoreError> {
    let options = WriterOptions {
        keep_snapshot: false,
        ..WriterOptions::default()
    };
    let mut writer = store.open_writer(&header.id, options)?;
    let added = records.get(stored as usize..).unwrap_or_default();
    let mut expected = Some(stored + 1);
    for record in added {
        let event = NewEvent {
            event_type: record.event_type().to_owned(),
            data: record.data().to_owned(),
            ts: Some(record.ts()),
        };
        writer.stage(event, expected.take())?;
    }
    writer.sync()?;
    Ok(SessionOutcome::Extended {
        stored,
        added: added.len() as u64,
        unknown_lines: added
            .iter()
            .filter(|record| record.event_type().starts_with("x-"))
            .count() as u64,
    })
}

/// An error of the store about session `id` of the source `path`.
fn session_error(path: &Path, id: &SessionId, error: StoreError) -> ImportError {
    ImportError {
        corrupt_store: error.class() == sessionlog_store::ErrorClass::Corrupt,
        ..ImportError::file(path, format!("session {id}: {error}"))
    }
}

fn records_of(path: &Path, session: &ImportedSession) -> Result<Vec<EventRecord>, ImportError> {
    let mut records = Vec::with_capacity(session.events.len());
    for (index, draft) in session.events.iter().enumerate() {
        let seq = index as u64 + 1;
        let record = EventRecord::new(seq, draft.ts, None, &draft.event_type, &draft.data);
        if record.body().len() + CRC_SUFFIX_LEN >= MAX_RECORD_BYTES {
            let reason = format!(
                "session {} seq {seq} ({}): {} bytes, above the {MAX_RECORD_BYTES}-byte record limit",
                session.header.id,
                draft.event_type,
                record.body().len()
            );
            return Err(ImportError::at_place(path, draft.at, reason));
        }
        records.push(record);
    }
    Ok(records)
}

fn write_session(
    store: &Store,
    path: &Path,
    header: &SessionHeader,
    records: &[EventRecord],
) -> Result<SessionOutcome, ImportError> {
    let store_error = |error: StoreError| session_error(path, &header.id, error);
    match store.create_session(header, records, Durability::Fsync) {
        Ok(()) => {
            let unknown_lines = records
                .iter()
                .filter(|record| record.event_type().starts_with("x-"))
                .count() as u64;
            return Ok(SessionOutcome::Created {
                events: records.len() as u64,
                unknown_lines,
            });
        }
        // Another import created it meanwhile: compare, as `write` does.
        Err(StoreError::AlreadyExists { .. }) => {}
        Err(error) => return Err(store_error(error)),
    }
    compare(store, &header.id, header, records).map_err(store_error)
}

fn compare(
    store: &Store,
    id: &SessionId,
    header: &SessionHeader,
    records: &[EventRecord],
) -> Result<SessionOutcome, StoreError> {
    let stored = store.snapshot(id)?;
    if let Some(torn) = &stored.torn_tail {
        crate::warn(format!(
            "{}: comparing the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
            store.session_path(id).display(),
            torn.bytes,
            torn.position.line,
            torn.position.offset,
            torn.reason
        ));
    }
    let common = stored
        .events
        .iter()
        .zip(records)
        .take_while(|(stored, new)| same_event(stored, new))
        .count();
    let differs_at = match stored.header == *header {
        false => 0,
        true => common as u64 + 1,
    };
    let same = differs_at > 0 && common == stored.events.len() && common == records.len();
    Ok(if same {
        // Found as this import would write it, it counts as written: its
        // name is made as durable as a new session's (the import that
        // published it may have been killed before it synced the folder).
        store.make_name_durable(id)?;
        SessionOutcome::Unchanged
    } else {
        SessionOutcome::Changed {
            stored: stored.events.len() as u64,
            now: records.len() as u64,
            differs_at,
            stored_torn: stored.torn_tail.is_some(),
            closed_at_end: common < records.len()
                && common < stored.events.len()
                && stored.events[common..]
                    .iter()
                    .all(|record| matches!(record.event_type(), "step/end" | "turn/end")),
        }
    })
}

/// Whether a stored event is the one an import would write: the same
/// bytes, or the same JSON. An earlier version wrote a call's arguments and
/// result with their members in the order of their names, where an import
/// now writes them in the source's order; such a session was imported all
/// the same.
fn same_event(stored: &EventRecord, new: &EventRecord) -> bool {
    let data = |record: &EventRecord| serde_json::from_str::<Value>(record.data()).ok();
    let place = |record: &EventRecord| (record.seq(), record.ts(), record.batch());
    stored.body() == new.body()
        || (stored.event_type() == new.event_type()
            && place(stored) == place(new)
            && data(stored).is_some_and(|stored| data(new) == Some(stored)))
}

#[cfg(test)]
mod tests;
