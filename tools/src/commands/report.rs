//! `sessionlog report --html OUT`: one self-contained HTML file for
//! auditors. Every session of the store (or `--session`) gets its timeline
//! (the entries `replay` prints), the projections whenever they change,
//! approvals, denials and violations highlighted, and links between parents
//! and children inside the page. Given `--audit FILE` (what `review-audit
//! --json` printed), the audited session's calls carry what the log
//! recorded and what the reviewer answers now, disagreements highlighted.
//!
//! The page loads nothing: its CSS and its small script are inline, and a
//! Content-Security-Policy forbids every network fetch. A log is hostile
//! input, so every piece of log text goes through [`escape`] before it
//! reaches the page; only session ids, which `SessionId` restricts to
//! `[A-Za-z0-9_-]`, are used in anchors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use sessionlog_projections::Defaults;
use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{ErrorClass, StoreError};

use crate::cli::{DefaultArgs, SessionArgs};
use crate::commands::audit::{describe_now, Audit, Row};
use crate::commands::replay::{self, Entry, EntryKind, Timeline, View, Window};
use crate::target::Target;
use crate::{exit, progress, warn};

/// One session as the report shows it.
enum Section {
    /// Its timeline.
    Shown {
        timeline: Box<Timeline>,
        torn: Option<String>,
    },
    /// A corrupt session: refused, named, not shown.
    Corrupt { id: SessionId, message: String },
}

/// Runs `report`.
pub fn run(
    args: &SessionArgs,
    out: &Path,
    audit: Option<&Path>,
    defaults: &DefaultArgs,
    quiet: bool,
) -> Result<u8> {
    let audit = audit.map(read_audit).transpose()?;
    let target = Target::open(&args.store)?;
    let sessions = target.sessions(args.session.as_deref())?;
    let defaults = Defaults {
        approval: defaults.default_approval,
        sandbox: defaults.default_sandbox,
    };
    let bar = progress::bar(quiet, "report");
    bar.set_length(sessions.len() as u64);
    let mut sections = Vec::new();
    for session in &sessions {
        let snapshot = match target.snapshot(session) {
            Ok(snapshot) => snapshot,
            // A lone session that is corrupt is refused outright.
            Err(error) if sessions.len() == 1 => return Err(error),
            Err(error) => match corruption(&error) {
                Some(message) => {
                    sections.push(Section::Corrupt {
                        id: session.id.clone(),
                        message,
                    });
                    bar.inc(1);
                    continue;
                }
                None => return Err(error),
            },
        };
        let torn = snapshot.torn_tail.as_ref().map(|torn| {
            warn(format!(
                "{}: reporting the good prefix; ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
            ));
            format!(
                "torn tail of {} bytes at line {} (byte offset {}) ignored: {}",
                torn.bytes, torn.position.line, torn.position.offset, torn.reason
            )
        });
        let timeline = replay::timeline(
            &snapshot.header,
            &snapshot.header_vocabulary_errors,
            &snapshot.events,
            Window::default(),
            &defaults,
        );
        sections.push(Section::Shown {
            timeline: Box::new(timeline),
            torn,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(audit) = &audit {
        let shown = sections.iter().any(|section| {
            matches!(section, Section::Shown { timeline, .. } if timeline.header.id.as_str() == audit.session)
        });
        if !shown {
            warn(format!(
                "the audit is of session {}, which this report does not show",
                replay::display(&audit.session)
            ));
        }
    }
    let html = render(&args.store.display().to_string(), &sections, audit.as_ref());
    write_private(out, html.as_bytes()).with_context(|| format!("write {}", out.display()))?;
    let corrupt = sections
        .iter()
        .filter(|s| matches!(s, Section::Corrupt { .. }))
        .count();
    let violations: usize = sections
        .iter()
        .map(|section| match section {
            Section::Shown { timeline, .. } => timeline.violations,
            Section::Corrupt { .. } => 0,
        })
        .sum();
    if corrupt > 0 {
        warn(format!(
            "{corrupt} corrupt session{} named but not shown in {}",
            if corrupt == 1 { "" } else { "s" },
            out.display()
        ));
        return Ok(exit::CORRUPT);
    }
    if violations > 0 {
        warn(format!(
            "{violations} event{} break the rules; each is marked in {}",
            if violations == 1 { "" } else { "s" },
            out.display()
        ));
        return Ok(exit::RULE);
    }
    Ok(exit::OK)
}

/// Reads what `review-audit --json` printed.
fn read_audit(path: &Path) -> Result<Audit> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|error| {
        crate::UsageError(format!(
            "{}: not the JSON that `sessionlog review-audit --json` prints: {error}",
            path.display()
        ))
        .into()
    })
}

fn corruption(error: &anyhow::Error) -> Option<String> {
    error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<StoreError>())
        .find(|store| store.class() == ErrorClass::Corrupt)
        .map(ToString::to_string)
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

fn render(store: &str, sections: &[Section], audit: Option<&Audit>) -> String {
    let headers: BTreeMap<&str, &SessionHeader> = sections
        .iter()
        .filter_map(|section| match section {
            Section::Shown { timeline, .. } => {
                Some((timeline.header.id.as_str(), &timeline.header))
            }
            Section::Corrupt { .. } => None,
        })
        .collect();
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for header in headers.values() {
        if let Some(parent) = &header.parent_session {
            children
                .entry(parent.as_str())
                .or_default()
                .push(header.id.as_str());
        }
    }
    let known: BTreeSet<&str> = headers.keys().copied().collect();
    let mut html = String::new();
    html.push_str(PAGE_START);
    let _ = writeln!(
        html,
        "<title>sessionlog report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>sessionlog report</h1>\n<p class=\"store\">Store <code>{}</code>: {} session{}.</p>",
        escape(store),
        escape(store),
        sections.len(),
        if sections.len() == 1 { "" } else { "s" }
    );
    html.push_str("<nav id=\"sessions\"><ul>\n");
    for section in sections {
        render_nav_item(&mut html, section);
    }
    html.push_str("</ul></nav>\n");
    html.push_str(CONTROLS);
    html.push_str("</header>\n<main>\n");
    for section in sections {
        match section {
            Section::Shown { timeline, torn } => {
                let audit = audit.filter(|audit| audit.session == timeline.header.id.as_str());
                render_session(
                    &mut html,
                    timeline,
                    torn.as_deref(),
                    audit,
                    &known,
                    &children,
                )
            }
            Section::Corrupt { id, message } => {
                let _ = writeln!(
                    html,
                    "<section class=\"session corrupt\" id=\"session-{id}\">\n<h2>Session {id}</h2>\n<p class=\"refused\">This log is corrupt and is not shown: {}</p>\n</section>",
                    escape(message)
                );
            }
        }
    }
    html.push_str("</main>\n<script>");
    html.push_str(SCRIPT);
    html.push_str("</script>\n</body>\n</html>\n");
    html
}

fn render_nav_item(html: &mut String, section: &Section) {
    match section {
        Section::Shown { timeline, .. } => {
            let id = &timeline.header.id;
            let count =
                |kind: EntryKind| timeline.entries.iter().filter(|e| e.kind == kind).count();
            let events = timeline.entries.len().saturating_sub(1);
            let _ = writeln!(
                html,
                "<li><a href=\"#session-{id}\">{id}</a> <span class=\"counts\">{events} events, {} denial{}, {} approval{} asked, {} violation{}</span></li>",
                count(EntryKind::Denial),
                plural(count(EntryKind::Denial)),
                count(EntryKind::ApprovalAsked),
                plural(count(EntryKind::ApprovalAsked)),
                timeline.violations,
                plural(timeline.violations),
            );
        }
        Section::Corrupt { id, .. } => {
            let _ = writeln!(
                html,
                "<li><a href=\"#session-{id}\">{id}</a> <span class=\"counts refused\">corrupt</span></li>"
            );
        }
    }
}

fn render_session(
    html: &mut String,
    timeline: &Timeline,
    torn: Option<&str>,
    audit: Option<&Audit>,
    known: &BTreeSet<&str>,
    children: &BTreeMap<&str, Vec<&str>>,
) {
    let header = &timeline.header;
    let id = &header.id;
    let _ = writeln!(
        html,
        "<section class=\"session\" id=\"session-{id}\">\n<h2>Session {id}</h2>\n<dl class=\"session-header\">"
    );
    let parent = match &header.parent_session {
        Some(parent) if known.contains(parent.as_str()) => {
            format!("<a href=\"#session-{parent}\">{parent}</a>")
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
    if let Some(kids) = children.get(id.as_str()) {
        let links: Vec<String> = kids
            .iter()
            .map(|kid| format!("<a href=\"#session-{kid}\">{kid}</a>"))
            .collect();
        let _ = writeln!(
            html,
            "<dt>children</dt><dd class=\"children\">{}</dd>",
            links.join(", ")
        );
    }
    html.push_str("</dl>\n");
    if let Some(torn) = torn {
        let _ = writeln!(html, "<p class=\"torn\">{}</p>", escape(torn));
    }
    if timeline.violations > 0 {
        let _ = writeln!(
            html,
            "<p class=\"violations\">{} event{} break the rules; each is marked below.</p>",
            timeline.violations,
            if timeline.violations == 1 { "" } else { "s" }
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
    let mut previous: Option<&View> = None;
    for entry in &timeline.entries {
        render_entry(
            html,
            id,
            entry,
            previous,
            audited.get(&entry.seq).copied(),
            known,
        );
        if let Some(view) = &entry.projection {
            previous = Some(view);
        }
    }
    html.push_str("</tbody>\n</table>\n</section>\n");
}

fn render_entry(
    html: &mut String,
    session: &SessionId,
    entry: &Entry,
    previous: Option<&View>,
    audited: Option<&Row>,
    known: &BTreeSet<&str>,
) {
    let kind = kind_class(entry.kind);
    let mut classes = format!("entry kind-{kind}");
    if is_highlight(entry) || audited.is_some_and(|row| !row.agree) {
        classes.push_str(" highlight");
    }
    if entry.violation.is_some() {
        classes.push_str(" violation");
    }
    let authority = entry.authority.map_or(String::new(), |authority| {
        format!("<span class=\"authority authority-{authority}\">{authority}</span>")
    });
    let mut summary = escape(&entry.summary);
    if let Some(child) = &entry.child {
        if known.contains(child.as_str()) {
            summary.push_str(&format!(
                " <a class=\"child-link\" href=\"#session-{}\">open child session</a>",
                escape(child)
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
        "<tr class=\"{classes}\" id=\"{session}-seq-{seq}\" data-seq=\"{seq}\"><td class=\"time\">{time}</td><td class=\"seq\"><a href=\"#{session}-seq-{seq}\">{seq}</a></td><td class=\"type\">{event_type}</td><td>{authority}</td><td class=\"summary\">{summary}</td><td class=\"projection\">{projection}</td></tr>",
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

const PAGE_START: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";

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
.violation-note, .violations, .refused { color: #d70022; font-weight: 600; }
.audit-note, .audit { color: #1a6e2e; }
.audit-differs { color: #d70022; font-weight: 600; }
.torn { color: #8a5a00; }
.authority { border-radius: 3px; padding: 0 .35em; font-size: 12px; background: #e8eef9; }
.authority-excluded { background: #eee; color: #666; }
.authority-user { background: #dcebff; }
.authority-direct-parent { background: #e2f3ff; }
.authority-constraint { background: #fff0d6; }
";

const SCRIPT: &str = "
(function () {
  var filter = document.getElementById('filter');
  var only = document.getElementById('only-highlights');
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
/// shows), never through a symlink planted at its name.
fn write_private(out: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(out)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
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
