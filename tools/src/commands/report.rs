//! `sessionlog report --html OUT`: a self-contained HTML report for
//! auditors. Every session of the store (or `--session`) gets its timeline
//! (the entries `replay` prints, each summary whole: one longer than a
//! line opens from a collapsed cell), the projections whenever they change,
//! approvals, denials and violations highlighted, links between parents and
//! children, and a legend of the authority labels and colours. Given
//! `--audit FILE` (what `review-audit --json` printed), the audited
//! session's calls carry what the log recorded and what the reviewer
//! answers now, disagreements highlighted. Each session says whether it is
//! sealed, through which seq, by which key, and whether its seals were
//! checked against a trust file; a seal that fails is marked in red.
//!
//! A report of at most `--page-events` events (2,000 by default) is one
//! page. A bigger one is paged, so that a browser never lays out more than
//! one page of rows: OUT is an index (the legend, and each session with its
//! counts and the links to its pages), and the folder beside it named
//! after OUT (`report.html` → `report-pages/`) holds a page per
//! `--page-events` events of each session, `<id>-<n>.html`, linked to the
//! previous and next and to the index.
//!
//! The report holds one page of rows at a time, never a whole session: a
//! first read of each session (as `replay` reads it) refuses a corrupt
//! log and counts what the index, the session's header and the pager
//! need; a second read, through the last seq the first one found, writes
//! each page as its events are read.
//!
//! No page loads anything: its CSS and its small script are inline, and a
//! Content-Security-Policy forbids every network fetch and allows no style
//! or script but those two, by their SHA-256 (were some log text ever to
//! reach a page unescaped, a script of its own would not run); links are
//! relative, so the report works offline and moved as a whole. A log is hostile
//! input, so every piece of log text goes through [`escape`] before it
//! reaches a page; only session ids, which `SessionId` restricts to
//! `[A-Za-z0-9_-]`, are used in anchors and file names.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use sessionlog_projections::{check_trusted, Defaults};
use sessionlog_schema::{SealPublicKey, SessionHeader, SessionId, TornTail};
use sessionlog_store::SessionStream;

use crate::cli::{DefaultArgs, SessionArgs};
use crate::commands::audit::{describe_now, Audit, Row};
use crate::commands::replay::{
    self, Entry, EntryKind, TimelineBuilder, TimelineSummary, View, Window,
};
use crate::target::{not_read, NotRead, SessionRef, Target};
use crate::{exit, progress, warn};

/// One session as the report shows it.
enum Section {
    /// Its timeline, read again page by page as it is written.
    Shown {
        session: SessionRef,
        summary: Box<Summary>,
        torn: Option<String>,
        /// What the page says of its seals, and whether a check failed.
        seals: SealStatus,
    },
    /// A session named, not shown: corrupt, or a log of a folder read
    /// whole that could not be read.
    NotShown {
        id: SessionId,
        message: String,
        finding: NotRead,
    },
}

/// A session not read, as the report names it.
impl NotRead {
    /// The word the index gives it.
    fn word(self) -> &'static str {
        match self {
            NotRead::Corrupt => "corrupt",
            NotRead::Unreadable => "unreadable",
        }
    }

    /// What its section says.
    fn sentence(self) -> &'static str {
        match self {
            NotRead::Corrupt => "This log is corrupt and is not shown",
            NotRead::Unreadable => "This log could not be read and is not shown",
        }
    }

    fn exit_code(self) -> u8 {
        match self {
            NotRead::Corrupt => exit::CORRUPT,
            NotRead::Unreadable => exit::USAGE,
        }
    }
}

impl Section {
    /// The events it shows (its header not counted).
    fn events(&self) -> usize {
        match self {
            Section::Shown { summary, .. } => summary.entries.saturating_sub(1),
            Section::NotShown { .. } => 0,
        }
    }
}

/// What the first read of a session found: all that the index, the
/// session's header and its pager say, none of its rows.
struct Summary {
    /// What the whole timeline marks.
    timeline: TimelineSummary,
    /// The entries of its timeline, the header's included.
    entries: usize,
    /// Entries of its seeded prefix (a child's inherited events).
    inherited: usize,
    /// Own entries of kind `Denial`: a child's inherited ones are its
    /// parent's, counted there.
    denials: usize,
    /// Own entries of kind `ApprovalAsked`.
    approvals_asked: usize,
}

impl Summary {
    /// Reads `session` to its end, keeping only counts: its summary and
    /// its torn tail; a corrupt log fails here, before anything is written.
    fn read(
        target: &Target,
        session: &SessionRef,
        defaults: Defaults,
    ) -> Result<(Summary, Option<TornTail>)> {
        let mut stream = target.stream(session)?;
        let mut builder = timeline_builder(stream.as_ref(), defaults);
        let mut counts = (0, 0, 0, 0);
        let mut count = |entry: &Entry| {
            let own = !entry.inherited;
            counts.0 += 1;
            counts.1 += usize::from(entry.inherited);
            counts.2 += usize::from(own && entry.kind == EntryKind::Denial);
            counts.3 += usize::from(own && entry.kind == EntryKind::ApprovalAsked);
        };
        count(&builder.header_entry());
        while let Some(record) = stream.next_event()? {
            if let Some(entry) = builder.entry(&record) {
                count(&entry);
            }
        }
        let torn = stream.finish()?;
        let (entries, inherited, denials, approvals_asked) = counts;
        let summary = Summary {
            timeline: builder.finish(),
            entries,
            inherited,
            denials,
            approvals_asked,
        };
        Ok((summary, torn))
    }
}

/// A builder of the whole timeline of the session `stream` reads.
fn timeline_builder(stream: &dyn SessionStream, defaults: Defaults) -> TimelineBuilder {
    TimelineBuilder::new(
        stream.header().clone(),
        stream.header_body(),
        stream.header_vocabulary_errors(),
        Window::default(),
        defaults,
    )
}

/// Reads `session` again, through the last seq its first read found, and
/// hands its entries to `page` `page_entries` at a time (the last page
/// may hold fewer), so that one page of entries is held at a time.
fn for_each_page(
    target: &Target,
    session: &SessionRef,
    defaults: Defaults,
    summary: &Summary,
    page_entries: usize,
    mut page: impl FnMut(&[Entry]) -> Result<()>,
) -> Result<()> {
    let mut stream = target.stream(session)?;
    let mut builder = timeline_builder(stream.as_ref(), defaults);
    let mut chunk = vec![builder.header_entry()];
    let mut entries = 1;
    loop {
        if chunk.len() >= page_entries {
            page(&chunk)?;
            chunk.clear();
        }
        let Some(record) = stream.next_event()? else {
            break;
        };
        if record.seq() > summary.timeline.last_seq {
            break;
        }
        if let Some(entry) = builder.entry(&record) {
            chunk.push(entry);
            entries += 1;
        }
    }
    if entries != summary.entries {
        anyhow::bail!(
            "{}: the session changed while the report was written ({} entries through seq {} on the first read, {entries} on the second); run the report again",
            session.label,
            summary.entries,
            summary.timeline.last_seq
        );
    }
    if !chunk.is_empty() {
        page(&chunk)?;
    }
    Ok(())
}

/// Where links to a session lead: inside the one page, or to the first of
/// its pages (from the index, inside the pages' folder).
#[derive(Debug, Clone, Copy)]
enum Links<'a> {
    /// Every session is a section of this page.
    OnePage,
    /// Each session has pages of its own in the folder `folder`; `from_index`
    /// when the link is written on the index.
    Paged { folder: &'a str, from_index: bool },
}

impl Links<'_> {
    /// The address of session `id`'s first page (or section).
    fn session(self, id: &str) -> String {
        match self {
            Links::OnePage => format!("#session-{id}"),
            Links::Paged {
                folder,
                from_index: true,
            } => format!("{folder}/{}", page_name(id, 1)),
            Links::Paged {
                from_index: false, ..
            } => page_name(id, 1),
        }
    }
}

/// The file name of page `number` (from 1) of session `id`.
fn page_name(id: &str, number: usize) -> String {
    format!("{id}-{number}.html")
}

/// A session's seals as the report states them.
struct SealStatus {
    text: String,
    failed: bool,
}

impl SealStatus {
    /// Whether and how `timeline`'s session is sealed, checked against
    /// `trusted` when given.
    fn of(timeline: &TimelineSummary, trusted: Option<&[SealPublicKey]>) -> SealStatus {
        let own: Vec<_> = timeline.seals.iter().filter(|seal| seal.own).collect();
        let mut failed = timeline.seal_failures > 0;
        let mut text = match own.last() {
            None => "not sealed".to_owned(),
            Some(last) => {
                let key = last
                    .key
                    .map_or("unsigned".to_owned(), |key| format!("signed by {key}"));
                let after = timeline.last_seq - last.seq;
                format!(
                    "sealed through seq {} ({} seal{} of its own), the last {key}{}",
                    last.through_seq,
                    own.len(),
                    plural(own.len()),
                    if after > 0 {
                        format!("; {after} event{} after it", plural(after as usize))
                    } else {
                        String::new()
                    }
                )
            }
        };
        if let Some(inherited) = timeline.seals.iter().rfind(|seal| !seal.own) {
            text.push_str(&format!(
                "; inherits the parent's seal through seq {} (checked for shape only)",
                inherited.through_seq
            ));
        }
        if timeline.seal_failures > 0 {
            text.push_str(&format!(
                "; {} SEAL FAILURE{}: the log was changed after it was sealed",
                timeline.seal_failures,
                if timeline.seal_failures == 1 { "" } else { "S" }
            ));
        }
        match trusted {
            None if !own.is_empty() => text.push_str("; not checked against a trust file"),
            None => {}
            Some(trusted) => {
                // An own seal record that is no valid seal is signed by no
                // listed key: it fails the trust file, as under `verify`.
                let invalid = (0..timeline.invalid_own_seals).map(|_| {
                    "an own seal record is no valid seal (marked in the timeline)".to_owned()
                });
                let untrusted: Vec<String> = invalid
                    .chain(
                        own.iter()
                            .filter_map(|seal| check_trusted(seal, trusted).err()),
                    )
                    .collect();
                if untrusted.is_empty() && !own.is_empty() {
                    text.push_str("; every seal is signed by a key of the trust file");
                } else if let Some(first) = untrusted.first() {
                    failed = true;
                    text.push_str(&format!(
                        "; FAILS THE TRUST FILE ({} seal{}): {first}",
                        untrusted.len(),
                        plural(untrusted.len())
                    ));
                }
            }
        }
        SealStatus { text, failed }
    }
}

/// Runs `report`.
pub fn run(
    args: &SessionArgs,
    out: &Path,
    audit: Option<&Path>,
    page_events: usize,
    defaults: &DefaultArgs,
    trusted: Option<&[SealPublicKey]>,
    quiet: bool,
) -> Result<u8> {
    let audit = audit.map(read_audit).transpose()?;
    let target = Target::open(&args.store)?;
    refuse_store_files(out, &args.store)?;
    // Said before anything is read, and of the folder that is missing
    // rather than of the pages' folder that could not be made in it.
    let folder = sessionlog_store::folder_of(out);
    if !folder.is_dir() {
        anyhow::bail!(crate::UsageError(format!(
            "{}: its folder {} does not exist; report writes into a folder that does (mkdir -p {})",
            out.display(),
            folder.display(),
            folder.display()
        )));
    }
    let sessions = target.sessions(args.session.as_deref())?;
    crate::target::warn_if_no_sessions(sessions.len(), &args.store);
    let defaults = defaults.defaults();
    // Both reads of a database see one moment of it.
    let _held = target.hold_read()?;
    let bar = progress::bar(quiet, "report");
    bar.set_length(sessions.len() as u64);
    let lone = sessions.len() == 1;
    let unreadable = target.unreadable_log(args.session.as_deref());
    let mut sections = Vec::new();
    for session in sessions {
        let (summary, torn) = match Summary::read(&target, &session, defaults) {
            Ok(read) => read,
            // A lone session that is corrupt is refused outright.
            Err(error) if lone => return Err(error),
            Err(error) => {
                let Some((finding, found)) = not_read(&error, unreadable) else {
                    return Err(error);
                };
                sections.push(Section::NotShown {
                    id: session.id.clone(),
                    // The message may quote the log (a member's name): its
                    // control and bidirectional characters are shown
                    // escaped, as everywhere else.
                    message: replay::display(&found.to_string()),
                    finding,
                });
                bar.inc(1);
                continue;
            }
        };
        let torn = torn.as_ref().map(|torn| {
            warn(format!(
                "{}: reporting the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
            ));
            format!(
                "torn tail of {} bytes at line {} (byte offset {}) ignored: {}",
                torn.bytes, torn.position.line, torn.position.offset, torn.reason
            )
        });
        let seals = SealStatus::of(&summary.timeline, trusted);
        sections.push(Section::Shown {
            session,
            summary: Box::new(summary),
            torn,
            seals,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(audit) = &audit {
        let shown = sections.iter().any(|section| {
            matches!(section, Section::Shown { summary, .. } if summary.timeline.header.id.as_str() == audit.session)
        });
        if !shown {
            warn(format!(
                "the audit is of session {}, which this report does not show",
                replay::display(&audit.session)
            ));
        }
    }
    // The store's name is the auditor's, but a folder may be named with
    // control or bidirectional characters: shown as log text is.
    let store = replay::display(&sessionlog_store::store_display(&args.store));
    let events: usize = sections.iter().map(Section::events).sum();
    let written = Written {
        target: &target,
        defaults,
        store: &store,
        sections: &sections,
        audit: audit.as_ref(),
    };
    if events <= page_events {
        let html = render(&written)?;
        write_private(out, html.as_bytes()).with_context(|| format!("write {}", out.display()))?;
        // The pages of an earlier paged report of that name are replaced
        // too: by none.
        let folder = out.with_file_name(pages_folder_name(out)?);
        remove_stale_pages(&folder, &std::collections::HashSet::new())?;
    } else {
        write_paged(out, &written, page_events.max(1))?;
    }
    let not_shown = |wanted: NotRead| {
        sections
            .iter()
            .filter(|s| matches!(s, Section::NotShown { finding, .. } if *finding == wanted))
            .count()
    };
    let (corrupt, unreadable) = (not_shown(NotRead::Corrupt), not_shown(NotRead::Unreadable));
    let code = sections
        .iter()
        .map(|section| match section {
            Section::Shown { summary, seals, .. } => exit::worst(
                summary.timeline.exit_code(),
                if seals.failed { exit::SEAL } else { exit::OK },
            ),
            Section::NotShown { finding, .. } => finding.exit_code(),
        })
        .fold(exit::OK, exit::worst);
    if unreadable > 0 {
        warn(format!(
            "{unreadable} session{} whose log could not be read named but not shown in {}",
            if unreadable == 1 { "" } else { "s" },
            out.display()
        ));
    }
    if corrupt > 0 {
        warn(format!(
            "{corrupt} corrupt session{} named but not shown in {}",
            if corrupt == 1 { "" } else { "s" },
            out.display()
        ));
        return Ok(exit::CORRUPT);
    }
    let (violations, seal_failures, headers) = sections
        .iter()
        .filter_map(|section| match section {
            Section::Shown { summary, .. } => Some(&summary.timeline),
            Section::NotShown { .. } => None,
        })
        .fold((0, 0, 0), |(violations, seals, headers), timeline| {
            (
                violations + timeline.violations,
                seals + timeline.seal_failures,
                headers + u64::from(timeline.header_breaks),
            )
        });
    if violations > 0 {
        warn(format!(
            "{}; each is marked in {}",
            crate::terminal::what_breaks(violations as u64, seal_failures as u64, headers),
            out.display()
        ));
    }
    // Seals that hold but that the trust file does not trust (signed by no
    // listed key) are no violation of the log: said apart, as they exit 7.
    let untrusted = sections
        .iter()
        .filter(|section| {
            matches!(section, Section::Shown { summary, seals, .. }
                if seals.failed && summary.timeline.seal_failures == 0)
        })
        .count();
    if untrusted > 0 {
        warn(format!(
            "{untrusted} session{} whose seals the trust file does not trust; each is marked in {}",
            if untrusted == 1 { "" } else { "s" },
            out.display()
        ));
    }
    Ok(code)
}

/// Reads what `review-audit --json` printed.
fn read_audit(path: &Path) -> Result<Audit> {
    let bytes = crate::target::read_bounded(
        Some(path),
        crate::target::MAX_AUDIT_FILE_BYTES,
        "review-audit output",
    )?;
    serde_json::from_slice(&bytes).map_err(|error| {
        crate::UsageError(format!(
            "{}: not the JSON that `sessionlog review-audit --json` prints: {error}",
            path.display()
        ))
        .into()
    })
}

/// `text` safe to place in HTML text and in double-quoted attributes.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// What a report is written from: the sessions as their first read found
/// them, and what their second read needs.
struct Written<'a> {
    target: &'a Target,
    defaults: Defaults,
    store: &'a str,
    sections: &'a [Section],
    audit: Option<&'a Audit>,
}

/// The report on one page: every session's rows, which are at most
/// `--page-events` over all sessions.
fn render(written: &Written<'_>) -> Result<String> {
    let Written {
        target,
        defaults,
        store,
        sections,
        audit,
    } = *written;
    let family = Family::of(sections);
    let mut html = page_start(&format!("sessionlog report: {}", escape(store)));
    render_index_header(&mut html, store, sections, Links::OnePage);
    html.push_str(CONTROLS);
    html.push_str("</header>\n<main>\n");
    for section in sections {
        match section {
            Section::Shown {
                session,
                summary,
                torn,
                seals,
            } => {
                let id = summary.timeline.header.id.as_str();
                let audit = audit.filter(|audit| audit.session == id);
                for_each_page(target, session, defaults, summary, usize::MAX, |entries| {
                    let shown = Shown {
                        summary,
                        entries,
                        previous: None,
                    };
                    render_session(
                        &mut html,
                        &shown,
                        torn.as_deref(),
                        seals,
                        audit,
                        &family,
                        Links::OnePage,
                    );
                    Ok(())
                })?;
                html.push_str("</section>\n");
            }
            Section::NotShown {
                id,
                message,
                finding,
            } => {
                let _ = writeln!(
                    html,
                    "<section class=\"session {}\" id=\"session-{id}\">\n<h2>Session {id}</h2>\n<p class=\"refused\">{}: {}</p>\n</section>",
                    finding.word(),
                    finding.sentence(),
                    escape(message)
                );
            }
        }
    }
    html.push_str("</main>\n");
    page_end(&mut html);
    Ok(html)
}

/// The parents and children among the sessions a report shows.
struct Family<'a> {
    known: BTreeSet<&'a str>,
    children: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> Family<'a> {
    fn of(sections: &'a [Section]) -> Family<'a> {
        let headers: Vec<&SessionHeader> = sections
            .iter()
            .filter_map(|section| match section {
                Section::Shown { summary, .. } => Some(&summary.timeline.header),
                Section::NotShown { .. } => None,
            })
            .collect();
        let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for header in &headers {
            if let Some(parent) = &header.parent_session {
                children
                    .entry(parent.as_str())
                    .or_default()
                    .push(header.id.as_str());
            }
        }
        Family {
            known: headers.iter().map(|header| header.id.as_str()).collect(),
            children,
        }
    }
}

/// The part of a session's timeline one page shows.
struct Shown<'a> {
    summary: &'a Summary,
    entries: &'a [Entry],
    /// The projections as they stood before the first entry shown.
    previous: Option<&'a View>,
}

/// The title, the store, the legend and the list of sessions.
fn render_index_header(html: &mut String, store: &str, sections: &[Section], links: Links<'_>) {
    let _ = writeln!(
        html,
        "<header>\n<h1>sessionlog report</h1>\n<p class=\"store\">Store <code>{}</code>: {} session{}.</p>",
        escape(store),
        sections.len(),
        plural(sections.len())
    );
    html.push_str(&legend());
    html.push_str("<nav id=\"sessions\"><ul>\n");
    for section in sections {
        render_nav_item(html, section, links);
    }
    html.push_str("</ul></nav>\n");
}

/// The legend of the authority labels and the row colours.
fn legend() -> String {
    let mut html = String::from(
        "<details class=\"legend\" open><summary>Legend</summary>\n<dl class=\"legend-authority\">\n",
    );
    for (authority, meaning) in replay::AUTHORITY_LEGEND {
        let _ = writeln!(
            html,
            "<dt><span class=\"authority authority-{authority}\">{authority}</span></dt><dd>{}</dd>",
            escape(meaning)
        );
    }
    html.push_str("</dl>\n<table class=\"legend-rows\"><tbody>\n");
    for (class, meaning) in ROW_LEGEND {
        let _ = writeln!(
            html,
            "<tr class=\"entry {class}\"><td class=\"summary\">{}</td></tr>",
            escape(meaning)
        );
    }
    html.push_str("</tbody></table>\n</details>\n");
    html
}

/// What each highlighted row means, by its CSS classes.
const ROW_LEGEND: [(&str, &str); 9] = [
    (
        "kind-denial",
        "a call denied by Auto review, with the reviewer's reason",
    ),
    (
        "kind-failed",
        "a call that failed or was cancelled, a review that failed closed",
    ),
    ("kind-approval-asked", "an approval asked of the user"),
    ("kind-approval-allowed", "an approval allowed"),
    ("kind-approval-refused", "an approval refused"),
    ("kind-checkpoint", "a checkpoint, a child session created"),
    (
        "kind-structure",
        "the session's structure (turns, steps, model requests), unknown types",
    ),
    (
        "violation",
        "an event that breaks a rule (the rule is named under it)",
    ),
    (
        "inherited",
        "a child's inherited event: its parent's, as the fork copied it",
    ),
];

fn page_start(title: &str) -> String {
    let mut html = String::from(PAGE_START);
    let _ = writeln!(
        html,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src '{}'; script-src '{}'\">",
        csp_hash(STYLE),
        csp_hash(SCRIPT)
    );
    html.push_str(VIEWPORT);
    let _ = writeln!(
        html,
        "<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>"
    );
    html
}

fn page_end(html: &mut String) {
    html.push_str("<script>");
    html.push_str(SCRIPT);
    html.push_str("</script>\n</body>\n</html>\n");
}

/// Writes the index at `out` and the pages of every session in the folder
/// beside it.
fn write_paged(out: &Path, written: &Written<'_>, page_events: usize) -> Result<()> {
    let Written {
        target,
        defaults,
        store,
        sections,
        audit,
    } = *written;
    let folder_name = pages_folder_name(out)?;
    let index_name = out
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default()
        .to_owned();
    let folder = out.with_file_name(&folder_name);
    let mut pages_written = std::collections::HashSet::new();
    create_private_folder(&folder)
        .with_context(|| format!("create the pages' folder {}", folder.display()))?;
    let family = Family::of(sections);
    let index_links = Links::Paged {
        folder: &folder_name,
        from_index: true,
    };
    let page_links = Links::Paged {
        folder: &folder_name,
        from_index: false,
    };
    let mut index = page_start(&format!("sessionlog report: {}", escape(store)));
    render_index_header(&mut index, store, sections, index_links);
    let _ = writeln!(
        index,
        "<p class=\"paged\">The report is paged: each session's pages (at most {page_events} events each) are in <code>{folder_name}/</code>, beside this file.</p>\n</header>\n<main>"
    );
    for section in sections {
        let Section::Shown {
            session,
            summary,
            torn,
            seals,
        } = section
        else {
            continue;
        };
        let id = summary.timeline.header.id.as_str();
        let audit = audit.filter(|audit| audit.session == id);
        let pages = summary.entries.div_ceil(page_events).max(1);
        let mut previous: Option<View> = None;
        let mut number = 0;
        for_each_page(target, session, defaults, summary, page_events, |chunk| {
            number += 1;
            let mut html = page_start(&format!(
                "sessionlog report: session {id}, page {number} of {pages}"
            ));
            let seqs = (
                chunk.first().map_or(0, |entry| entry.seq),
                chunk.last().map_or(0, |entry| entry.seq),
            );
            let pager = pager(&index_name, id, (number, pages), seqs);
            html.push_str(&pager);
            html.push_str(CONTROLS);
            html.push_str("<main>\n");
            let shown = Shown {
                summary,
                entries: chunk,
                previous: previous.as_ref(),
            };
            render_session(
                &mut html,
                &shown,
                torn.as_deref(),
                seals,
                audit,
                &family,
                page_links,
            );
            html.push_str("</section>\n</main>\n");
            html.push_str(&pager);
            page_end(&mut html);
            let name = page_name(id, number);
            let path = folder.join(&name);
            write_private(&path, html.as_bytes())
                .with_context(|| format!("write {}", path.display()))?;
            pages_written.insert(name);
            if let Some(last) = chunk
                .iter()
                .rev()
                .find_map(|entry| entry.projection.as_ref())
            {
                previous = Some(last.clone());
            }
            Ok(())
        })?;
        let _ = writeln!(
            index,
            "<p class=\"pages\" id=\"session-{id}\">Session <a href=\"{}\">{id}</a>: {pages} page{}.</p>",
            index_links.session(id),
            plural(pages)
        );
    }
    index.push_str("</main>\n");
    page_end(&mut index);
    write_private(out, index.as_bytes()).with_context(|| format!("write {}", out.display()))?;
    remove_stale_pages(&folder, &pages_written)
}

/// Removes the pages in `folder` (its `.html` files) that this report did
/// not write, `written`: those of an earlier report of the same name would
/// still link to each other and show what the store held then. A folder
/// left empty is removed; a missing one (or a symlink) is nothing to do.
fn remove_stale_pages(folder: &Path, written: &std::collections::HashSet<String>) -> Result<()> {
    // No folder there (a name too long for one included): no page.
    if !std::fs::symlink_metadata(folder).is_ok_and(|metadata| metadata.is_dir()) {
        return Ok(());
    }
    let entries =
        std::fs::read_dir(folder).with_context(|| format!("read {}", folder.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("read {}", folder.display()))?;
        let name = entry.file_name();
        let stale = name
            .to_str()
            .is_some_and(|name| name.ends_with(".html") && !written.contains(name));
        if stale && entry.file_type().is_ok_and(|kind| kind.is_file()) {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("remove the stale page {}", entry.path().display()))?;
        }
    }
    if written.is_empty() {
        // Only when nothing else is left in it.
        let _ = std::fs::remove_dir(folder);
    }
    Ok(())
}

/// The navigation of page `number` of `pages`: the index, the neighbours,
/// and every page by the seqs it holds.
fn pager(index: &str, id: &str, (number, pages): (usize, usize), seqs: (u64, u64)) -> String {
    let mut html = format!(
        "<nav class=\"pager\"><a href=\"../{}\">index</a> · session {id}, page {number} of {pages} (seq {} to {})",
        escape(index),
        seqs.0,
        seqs.1
    );
    if number > 1 {
        let _ = write!(
            html,
            " · <a rel=\"prev\" href=\"{}\">previous</a>",
            page_name(id, number - 1)
        );
    }
    if number < pages {
        let _ = write!(
            html,
            " · <a rel=\"next\" href=\"{}\">next</a>",
            page_name(id, number + 1)
        );
    }
    html.push_str(" · pages:");
    for other in 1..=pages {
        if other == number {
            let _ = write!(html, " <b>{other}</b>");
        } else {
            let _ = write!(html, " <a href=\"{}\">{other}</a>", page_name(id, other));
        }
    }
    html.push_str("</nav>\n");
    html
}

/// The name of the folder of pages beside `out`: its name with the
/// extension replaced by `-pages`.
fn pages_folder_name(out: &Path) -> Result<String> {
    let stem = out
        .file_stem()
        .and_then(|stem| stem.to_str())
        .filter(|stem| !stem.is_empty())
        .ok_or_else(|| {
            crate::UsageError(format!(
                "{}: the report's name must be UTF-8 text, such as report.html",
                out.display()
            ))
        })?;
    Ok(format!("{stem}-pages"))
}

/// Refuses a report written over what it reads: `out` (or the folder of
/// its pages) must not be a file of the store at `store` (a log, its state
/// snapshot, a database and its write-ahead log and index), nor have a
/// log's name (`.jsonl`). A report is a reading command: it never changes
/// the store it shows, and writes over a report of its own freely.
fn refuse_store_files(out: &Path, store: &Path) -> Result<()> {
    // Beside a log (a folder of logs, or the folder of a lone log and the
    // children forked beside it), such a name is a session's.
    if out
        .extension()
        .is_some_and(|extension| extension == "jsonl")
    {
        return Err(crate::UsageError(format!(
            "{}: a report named like a session log would be taken for one (or written over one); name it report.html",
            out.display()
        ))
        .into());
    }
    use std::os::unix::fs::MetadataExt;
    let identity = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .map(|metadata| (metadata.dev(), metadata.ino()))
    };
    let mut store_files = Vec::new();
    match std::fs::metadata(store) {
        Ok(metadata) if metadata.is_dir() => {
            // Its logs, their state snapshots and temporary files (each
            // named after a log); not a report written there before.
            if let Ok(entries) = std::fs::read_dir(store) {
                store_files.extend(
                    entries
                        .filter_map(Result::ok)
                        .map(|entry| entry.path())
                        .filter(|path| {
                            let name = path
                                .file_name()
                                .map(|name| name.to_string_lossy())
                                .unwrap_or_default();
                            name.contains(".jsonl")
                        }),
                );
            }
            store_files.push(store.to_owned());
        }
        Ok(_) => {
            store_files.push(store.to_owned());
            for suffix in ["-wal", "-shm", "-journal", ".locks"] {
                let mut name = store.as_os_str().to_owned();
                name.push(suffix);
                store_files.push(name.into());
            }
            // A lone log's state snapshot (docs/FORMAT.md, "State snapshots").
            store_files.push(sessionlog_store::state_snapshot_path(store));
        }
        // A `postgres://` URL: no file of its own.
        Err(_) => return Ok(()),
    }
    // A name: its folder's identity and its file name (a file the store
    // makes only while in use, such as a write-ahead log, may be missing).
    let named = |path: &Path| {
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        (identity(folder), path.file_name().map(ToOwned::to_owned))
    };
    let written = [
        Some(out.to_owned()),
        pages_folder_name(out)
            .ok()
            .map(|name| out.with_file_name(name)),
    ];
    for path in written.iter().flatten() {
        let own = identity(path);
        let name = named(path);
        if store_files.iter().any(|file| {
            own.is_some() && identity(file) == own || name.0.is_some() && named(file) == name
        }) {
            return Err(crate::UsageError(format!(
                "{}: the report would be written over {}, which it reads; name another file",
                path.display(),
                sessionlog_store::store_display(store)
            ))
            .into());
        }
    }
    Ok(())
}

/// Creates `folder` (0700) or accepts it when it is a folder already,
/// never a symlink planted at its name.
fn create_private_folder(folder: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::symlink_metadata(folder) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "it exists and is not a folder",
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(folder)
        }
        Err(error) => Err(error),
    }
}

fn render_nav_item(html: &mut String, section: &Section, links: Links<'_>) {
    match section {
        Section::Shown { summary, .. } => {
            let timeline = &summary.timeline;
            let id = &timeline.header.id;
            let events = summary.entries.saturating_sub(1);
            // A seal that does not hold is said apart from broken rules.
            let rules = timeline.violations.saturating_sub(timeline.seal_failures);
            let seals = match timeline.seal_failures {
                0 => String::new(),
                1 => ", 1 seal that does not hold".to_owned(),
                count => format!(", {count} seals that do not hold"),
            };
            let _ = writeln!(
                html,
                "<li><a href=\"{}\">{id}</a> <span class=\"counts\">{events} events{}, {} denial{}, {} approval{} asked, {} violation{}{}</span></li>",
                links.session(id.as_str()),
                match summary.inherited {
                    0 => String::new(),
                    inherited => format!(" ({inherited} inherited)"),
                },
                summary.denials,
                plural(summary.denials),
                summary.approvals_asked,
                plural(summary.approvals_asked),
                rules,
                plural(rules),
                seals,
            );
        }
        Section::NotShown {
            id,
            message,
            finding,
        } => {
            let _ = writeln!(
                html,
                "<li>{id} <span class=\"counts refused\">{}: {}</span></li>",
                finding.word(),
                escape(message)
            );
        }
    }
}

/// A session's header, notes and the rows of `shown`, in an open
/// `<section>` the caller closes.
fn render_session(
    html: &mut String,
    shown: &Shown<'_>,
    torn: Option<&str>,
    seals: &SealStatus,
    audit: Option<&Audit>,
    family: &Family<'_>,
    links: Links<'_>,
) {
    let timeline = &shown.summary.timeline;
    let known = &family.known;
    let header = &timeline.header;
    let id = &header.id;
    let _ = writeln!(
        html,
        "<section class=\"session\" id=\"session-{id}\">\n<h2>Session {id}</h2>\n<dl class=\"session-header\">"
    );
    let parent = match &header.parent_session {
        Some(parent) if known.contains(parent.as_str()) => {
            format!(
                "<a href=\"{}\">{parent}</a>",
                links.session(parent.as_str())
            )
        }
        Some(parent) => format!("{parent} (not in this report)"),
        None => "none (a root session)".to_owned(),
    };
    let _ = writeln!(
        html,
        "<dt>created</dt><dd>{}</dd>\n<dt>cwd</dt><dd><code>{}</code></dd>\n<dt>parent</dt><dd class=\"parent\">{parent}</dd>\n<dt>seed</dt><dd>{} events copied from the parent, delegation depth {}</dd>",
        replay::iso8601(header.created_at),
        escape(&replay::display(&header.cwd)),
        header.seed_length,
        header.delegation_depth,
    );
    if let Some(kids) = family.children.get(id.as_str()) {
        let kids: Vec<String> = kids
            .iter()
            .map(|kid| format!("<a href=\"{}\">{kid}</a>", links.session(kid)))
            .collect();
        let _ = writeln!(
            html,
            "<dt>children</dt><dd class=\"children\">{}</dd>",
            kids.join(", ")
        );
    }
    let _ = writeln!(
        html,
        "<dt>seals</dt><dd class=\"{}\">{}</dd>",
        if seals.failed {
            "seal-status seal-failed"
        } else {
            "seal-status"
        },
        escape(&seals.text)
    );
    html.push_str("</dl>\n");
    if let Some(torn) = torn {
        let _ = writeln!(html, "<p class=\"torn\">{}</p>", escape(torn));
    }
    if timeline.violations > 0 {
        let _ = writeln!(
            html,
            "<p class=\"violations\">{}; each is marked below.</p>",
            crate::terminal::what_breaks(
                timeline.violations as u64,
                timeline.seal_failures as u64,
                u64::from(timeline.header_breaks)
            )
        );
    }
    let audited: BTreeMap<u64, &Row> = audit
        .map(|audit| audit.rows.iter().map(|row| (row.seq, row)).collect())
        .unwrap_or_default();
    if let Some(audit) = audit {
        let summary = &audit.summary;
        let _ = writeln!(
            html,
            "<p class=\"audit{}\">Review audit{}: {} call{} asked again, {} agree, {} allowed then denied now, {} denied then allowed now, {} without a decision now.</p>",
            if summary.disagreements > 0 { " audit-differs" } else { "" },
            audit.model.as_ref().map_or(String::new(), |model| format!(" against model <code>{}</code>", escape(&replay::display(model)))),
            summary.calls,
            plural(summary.calls),
            summary.agreements,
            summary.allowed_then_denied_now,
            summary.denied_then_allowed_now,
            summary.failures,
        );
    }
    html.push_str("<table class=\"timeline\">\n<thead><tr><th>time (UTC)</th><th>seq</th><th>type</th><th>authority</th><th>what happened</th><th>projections (when they change)</th></tr></thead>\n<tbody>\n");
    let mut previous = shown.previous;
    for entry in shown.entries {
        let row = RowContext {
            previous,
            audited: audited.get(&entry.seq).copied(),
            known,
            links,
        };
        render_entry(html, id, entry, &row);
        if let Some(view) = &entry.projection {
            previous = Some(view);
        }
    }
    html.push_str("</tbody>\n</table>\n");
}

/// What a row needs besides its entry.
struct RowContext<'a> {
    /// The projections before this entry.
    previous: Option<&'a View>,
    /// The audit of this call, if any.
    audited: Option<&'a Row>,
    /// The sessions the report shows.
    known: &'a BTreeSet<&'a str>,
    links: Links<'a>,
}

/// A summary longer than this many characters is shown clipped in a cell
/// that opens on the whole text.
const CELL_CHARS: usize = 240;

fn render_entry(html: &mut String, session: &SessionId, entry: &Entry, row: &RowContext<'_>) {
    let RowContext {
        previous,
        audited,
        known,
        links,
    } = *row;
    let kind = kind_class(entry.kind);
    let mut classes = format!("entry kind-{kind}");
    if is_highlight(entry) || audited.is_some_and(|row| !row.agree) {
        classes.push_str(" highlight");
    }
    if entry.violation.is_some() {
        classes.push_str(" violation");
    }
    if entry.inherited {
        classes.push_str(" inherited");
    }
    let authority = entry.authority.map_or(String::new(), |authority| {
        format!("<span class=\"authority authority-{authority}\">{authority}</span>")
    });
    let mut summary = if entry.summary.chars().count() > CELL_CHARS {
        format!(
            "<details class=\"whole\"><summary>{}</summary><div class=\"whole-text\">{}</div></details>",
            escape(&replay::clip(&entry.summary, CELL_CHARS / 2)),
            escape(&entry.summary)
        )
    } else {
        escape(&entry.summary)
    };
    if entry.inherited {
        summary.insert_str(0, "<span class=\"inherited-mark\">inherited</span> ");
    }
    if let Some(child) = &entry.child {
        if known.contains(child.as_str()) {
            summary.push_str(&format!(
                " <a class=\"child-link\" href=\"{}\">open child session</a>",
                escape(&links.session(child))
            ));
        }
    }
    if let Some(violation) = &entry.violation {
        summary.push_str(&format!(
            "<div class=\"violation-note\">✗ {}</div>",
            escape(violation)
        ));
    }
    if let Some(row) = audited {
        summary.push_str(&format!(
            "<div class=\"audit-note{}\">{} review audit: recorded {}, now {}</div>",
            if row.agree { "" } else { " audit-differs" },
            if row.agree {
                "✓ agrees:"
            } else {
                "✗ differs:"
            },
            row.recorded.as_str(),
            escape(&replay::display(&describe_now(&row.now))),
        ));
    }
    let projection = entry.projection.as_ref().map_or(String::new(), |view| {
        let before = previous.map(View::fields);
        view.fields()
            .iter()
            .enumerate()
            .filter(|(index, field)| before.as_ref().is_none_or(|b| b[*index] != **field))
            .map(|(_, (name, value))| {
                format!(
                    "<span class=\"field\"><b>{name}</b> {}</span>",
                    escape(value)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    });
    let _ = writeln!(
        html,
        "<tr class=\"{classes}\" id=\"seq-{seq}-{session}\" data-seq=\"{seq}\"><td class=\"time\">{time}</td><td class=\"seq\"><a href=\"#seq-{seq}-{session}\">{seq}</a></td><td class=\"type\">{event_type}</td><td>{authority}</td><td class=\"summary\">{summary}</td><td class=\"projection\">{projection}</td></tr>",
        seq = entry.seq,
        time = escape(&entry.time),
        event_type = escape(&replay::display(&entry.event_type)),
    );
}

fn is_highlight(entry: &Entry) -> bool {
    entry.violation.is_some()
        || matches!(
            entry.kind,
            EntryKind::Denial
                | EntryKind::ApprovalAsked
                | EntryKind::ApprovalAllowed
                | EntryKind::ApprovalRefused
                | EntryKind::SealFailed
        )
}

fn kind_class(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Header => "header",
        EntryKind::Request => "request",
        EntryKind::Structure => "structure",
        EntryKind::Message => "message",
        EntryKind::Call => "call",
        EntryKind::Settled => "settled",
        EntryKind::Failed => "failed",
        EntryKind::Denial => "denial",
        EntryKind::Switch => "switch",
        EntryKind::ApprovalAsked => "approval-asked",
        EntryKind::ApprovalAllowed => "approval-allowed",
        EntryKind::ApprovalRefused => "approval-refused",
        EntryKind::Checkpoint => "checkpoint",
        EntryKind::Child => "child",
        EntryKind::Seal => "seal",
        EntryKind::SealFailed => "seal-failed",
        EntryKind::Unknown => "unknown",
        EntryKind::Malformed => "malformed",
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

const PAGE_START: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";

const VIEWPORT: &str = "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";

/// The source expression a Content-Security-Policy allows the inline
/// element holding exactly `text` by: `sha256-` and its digest in base64.
fn csp_hash(text: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

const CONTROLS: &str = "<div class=\"controls\"><label>Filter rows <input type=\"search\" id=\"filter\" placeholder=\"text in any row\"></label> <label><input type=\"checkbox\" id=\"only-highlights\"> only approvals, denials and violations</label></div>\n";

const STYLE: &str = "
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 2em 3em; color: #1d1d1f; background: #fff; }
header { border-bottom: 1px solid #ddd; margin-bottom: 1em; }
code { font: 13px ui-monospace, monospace; }
nav ul { padding-left: 1.2em; }
.counts { color: #666; }
.controls { margin: .8em 0; }
section.session { margin: 2em 0; }
dl.session-header { display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em; }
dl.session-header dt { font-weight: 600; }
dl.session-header dd { margin: 0; }
table.timeline { border-collapse: collapse; width: 100%; }
table.timeline th, table.timeline td { border-bottom: 1px solid #eee; padding: .25em .5em; text-align: left; vertical-align: top; }
table.timeline th { position: sticky; top: 0; background: #f7f7f7; }
td.time, td.seq, td.type { white-space: nowrap; font: 12px ui-monospace, monospace; }
td.summary { font: 13px ui-monospace, monospace; word-break: break-word; }
td.projection { font-size: 12px; color: #2d6a3e; }
td.projection .field { display: inline-block; margin-right: .6em; }
tr.kind-denial { background: #fde2e1; }
tr.kind-denial td.summary { color: #a4001c; font-weight: 700; }
tr.kind-approval-asked { background: #fff4cc; }
tr.kind-approval-allowed { background: #e3f6e5; }
tr.kind-approval-refused { background: #fde2e1; }
tr.kind-failed td.summary { color: #a4001c; }
tr.kind-checkpoint, tr.kind-child { background: #f1e8fb; }
tr.kind-unknown, tr.kind-structure, tr.kind-request { color: #666; }
tr.violation { outline: 2px solid #d70022; outline-offset: -2px; }
tr.inherited td { opacity: .62; }
.inherited-mark { font: 11px system-ui, sans-serif; color: #555; border: 1px solid #999; border-radius: 3px; padding: 0 .3em; }
.violation-note, .violations, .refused { color: #d70022; font-weight: 600; }
.audit-note, .audit { color: #1a6e2e; }
.audit-differs { color: #d70022; font-weight: 600; }
.torn { color: #8a5a00; }
.authority { border-radius: 3px; padding: 0 .35em; font-size: 12px; background: #e8eef9; }
.authority-excluded { background: #eee; color: #666; }
.authority-user { background: #dcebff; }
.authority-direct-parent { background: #e2f3ff; }
.authority-constraint { background: #fff0d6; }
.authority-fact { background: #eef3e6; }
details.legend { margin: .6em 0; }
details.legend summary, details.whole summary { cursor: pointer; }
dl.legend-authority { display: grid; grid-template-columns: max-content 1fr; gap: .2em 1em; }
dl.legend-authority dd { margin: 0; }
table.legend-rows td { padding: .15em .5em; }
.whole-text { white-space: pre-wrap; }
nav.pager { margin: .8em 0; }
.seal-failed { color: #fff; background: #b00020; font-weight: bold; }
tr.seal-failed td { background: #b00020; color: #fff; }
.seal-status { font-weight: 600; }
";

const SCRIPT: &str = "
(function () {
  var filter = document.getElementById('filter');
  var only = document.getElementById('only-highlights');
  if (!filter || !only) {
    document.body.setAttribute('data-report', 'ready');
    return;
  }
  function apply() {
    var query = filter.value.toLowerCase();
    var rows = document.querySelectorAll('tr.entry');
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      var wanted = (!only.checked || row.classList.contains('highlight')) &&
        (!query || row.textContent.toLowerCase().indexOf(query) >= 0);
      row.hidden = !wanted;
    }
  }
  filter.addEventListener('input', apply);
  only.addEventListener('change', apply);
  document.body.setAttribute('data-report', 'ready');
})();
";

/// Writes the report readable by its owner only (0600, like the logs it
/// shows): to a new file beside `out` (`O_EXCL`, never through a symlink),
/// then renamed over it. Whatever sat at `out` is replaced, never written
/// through: a hard link to another file, a FIFO, another user's file.
fn write_private(out: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if out.file_name().is_none() {
        return Err(std::io::Error::other("the output names no file"));
    }
    // A short name of its own, so that any name the file system allows for
    // the report leaves room for it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let temporary = out.with_file_name(format!(".report-{}-{nanos}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, out)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escaping_leaves_no_markup() {
        assert_eq!(
            escape("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }
}
