//! `sessionlog keygen`, `seal` and `head`: seal keys, seals, and the chain
//! values an auditor keeps elsewhere as anchors.
//!
//! A secret key file is created with mode 0600 and its secret is never
//! printed; only its public key is.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sessionlog_projections::Anchor;
use sessionlog_schema::SealSecretKey;
use sessionlog_store::{chain_head, WriterOptions};

use crate::cli::SessionArgs;
use crate::target::{Target, UnreadableLog};
use crate::{exit, UsageError};

/// Runs `keygen FILE`.
pub fn keygen(file: &Path, json: bool) -> Result<u8> {
    let public_file = public_key_path(file);
    for path in [file, public_file.as_path()] {
        if path.symlink_metadata().is_ok() {
            return Err(UsageError(format!(
                "{} exists; keygen never replaces a key file",
                path.display()
            ))
            .into());
        }
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|error| anyhow::anyhow!("no randomness for a new key: {error}"))?;
    let key = SealSecretKey::from_seed(seed);
    write_new_file(file, 0o600, key.to_file_text().as_bytes())?;
    let public_key = key.public_key();
    if let Err(error) = write_new_file(&public_file, 0o644, format!("{public_key}\n").as_bytes()) {
        // No secret key without its public key: a run again would find
        // the secret and refuse to replace it.
        let _ = std::fs::remove_file(file);
        return Err(error);
    }
    if json {
        /// What `keygen --json` prints, its members in this order.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct NewKey {
            secret_key_file: String,
            public_key_file: String,
            public_key: String,
        }
        crate::terminal::print_json_line(&serde_json::to_string(&NewKey {
            secret_key_file: file.display().to_string(),
            public_key_file: public_file.display().to_string(),
            public_key: public_key.to_string(),
        })?)?;
    } else {
        crate::outln!(
            "wrote the secret key to {} (mode 0600) and the public key {public_key} to {}",
            file.display(),
            public_file.display()
        )?;
    }
    Ok(exit::OK)
}

/// Runs `seal STORE --session ID [--key FILE]`.
pub fn seal(args: &SessionArgs, key_file: Option<&Path>, json: bool) -> Result<u8> {
    let key = key_file.map(read_secret_key).transpose()?;
    let target = Target::open_for_writing(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let options = WriterOptions {
        keep_snapshot: false,
        ..WriterOptions::default()
    };
    let mut writer = target.writer(&session, options)?;
    let through_seq = writer.next_seq() - 1;
    let chain = writer.state().chain();
    let seq = writer.seal(key.as_ref(), None)?.get();
    let public_key = key.as_ref().map(|key| key.public_key().to_string());
    if json {
        /// What `seal --json` prints, its members in this order.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Sealed<'a> {
            session: &'a str,
            seq: u64,
            through_seq: u64,
            chain: String,
            key: Option<String>,
        }
        crate::terminal::print_json_line(&serde_json::to_string(&Sealed {
            session: session.id.as_str(),
            seq,
            through_seq,
            chain: chain.to_string(),
            key: public_key,
        })?)?;
    } else {
        crate::outln!(
            "{}: sealed through seq {through_seq} at seq {seq} ({chain}), {}",
            session.label,
            public_key.map_or("unsigned".to_owned(), |key| format!("signed by {key}"))
        )?;
    }
    Ok(exit::OK)
}

/// Runs `head STORE [--session ID]`: one anchor line per session, for the
/// last record of its good prefix. A corrupt session, and in a folder read
/// whole a log that cannot be opened or read, is named on stderr with no
/// line, and the others are read (exit 2, else 1): an anchor file missing
/// a session would never check it.
pub fn head(args: &SessionArgs) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let sessions = target.sessions(args.session.as_deref())?;
    if sessions.is_empty() {
        // An empty anchor file would let `verify --anchor` pass anything.
        return Err(UsageError(format!(
            "{}; head gives no anchor of an empty store",
            crate::target::no_sessions(&args.store)
        ))
        .into());
    }
    let mut stdout = crate::terminal::stdout(crate::terminal::Mode::Json);
    let mut code = exit::OK;
    let unreadable = target.unreadable_log(args.session.as_deref());
    for session in &sessions {
        let error = match head_of(&target, session) {
            Ok(anchor) => {
                writeln!(stdout, "{}", anchor.to_json_line())?;
                stdout.flush()?;
                continue;
            }
            Err(error) => error,
        };
        let error_code = crate::exit_code(&error);
        let message = match crate::target::unreadable_log(&error) {
            Some(io) if unreadable == UnreadableLog::Reported => format!("unreadable: {io}"),
            _ if error_code == exit::CORRUPT => crate::render(&error),
            // Anything else ends the command, and is said once, by it.
            _ => return Err(error),
        };
        // A log's corruption names its file already, which names its
        // session; only a session of a database is named here.
        let names_its_log = matches!(
            error.downcast_ref::<sessionlog_store::StoreError>(),
            Some(sessionlog_store::StoreError::Corrupt { .. })
        );
        match names_its_log || message.starts_with(&format!("{}: ", session.label)) {
            true => crate::errln!("sessionlog: {message}"),
            false => crate::errln!("sessionlog: {}: {message}", session.label),
        }
        code = exit::worst(code, error_code);
    }
    Ok(code)
}

/// The chain value of a session's good prefix, read once.
fn head_of(target: &Target, session: &crate::target::SessionRef) -> Result<Anchor> {
    let (anchor, torn_tail) = chain_head(target.stream(session)?)?;
    if let Some(torn) = torn_tail {
        crate::warn(format!(
            "{}: the head is the good prefix's; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
            session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
        ));
    }
    Ok(anchor)
}

/// The most a secret key file may hold: `keygen` writes one line of a
/// hundred bytes or so.
const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

/// Reads a secret key file written by `keygen`. One that others may read
/// (`keygen` makes it 0600) is used, with a warning: whoever can read it
/// can sign seals as its owner.
pub fn read_secret_key(path: &Path) -> Result<SealSecretKey> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    // Not blocking: a FIFO in the key's place would wait for a writer for
    // ever; it is refused below as what it is.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("read {}", path.display()))?;
    // The mode of the file read, not of what the path names a moment later.
    let mut mode = None;
    if let Ok(metadata) = file.metadata() {
        if let Some(kind) = sessionlog_store::file_kind(metadata.file_type()) {
            bail!(UsageError(format!(
                "{}: {kind}, not a secret key file",
                path.display()
            )));
        }
        mode = Some(metadata.permissions().mode() & 0o777);
    }
    let mut bytes = Vec::new();
    // A key file is a line of text: what is past a few kilobytes is no key.
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("read {}", path.display()))?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        bail!(UsageError(format!(
            "{}: more than {MAX_KEY_FILE_BYTES} bytes, too long for a secret key file",
            path.display()
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        UsageError(format!(
            "{}: a secret key file is UTF-8 text",
            path.display()
        ))
    })?;
    let key = SealSecretKey::parse_file(&text)
        .map_err(|error| UsageError(format!("{}: {error}", path.display())))?;
    // Only a key that is one: a public key or another file given by
    // mistake is refused above, not called a secret others may read.
    if let Some(mode) = mode.filter(|mode| mode & 0o077 != 0) {
        // A warning is written escaped, as every line is.
        crate::warn(format_args!(
            "{path}: a secret key that others may read (mode {mode:04o}): whoever reads it \
             can sign seals as you; `chmod 600 {path}`",
            path = path.display()
        ));
    }
    Ok(key)
}

/// `FILE.pub` beside `FILE`.
fn public_key_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Creates `path` (never replacing a file or following a link) with `mode`
/// and `contents`, synced.
fn write_new_file(path: &Path, mode: u32, contents: &[u8]) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    // The mode given, whatever the umask took from it: a public key is
    // for others to read.
    let written = file
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .and_then(|()| file.write_all(contents))
        .and_then(|()| file.sync_all());
    if let Err(error) = written {
        // No empty or partial key file is left behind for the next keygen
        // to refuse to replace.
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(error).with_context(|| format!("write {}", path.display()));
    }
    Ok(())
}
