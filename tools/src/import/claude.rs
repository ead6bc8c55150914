//! Claude Code transcripts (`~/.claude/projects/<cwd>/<sessionId>.jsonl`)
//! as sessions.
//!
//! Each line has a `type`: `user` (a prompt, tool results, or injected
//! text), `assistant` (one content block per line; the lines of one API
//! response share `message.id` and make one step), and lines with no
//! counterpart (`system`, `summary`, `file-history-snapshot`, `progress`,
//! `queue-operation`, …), kept whole. Lines are taken in file order:
//! `parentUuid` chains are often broken in real files and are used only to
//! group inline sidechains.
//!
//! Sub-agents become child sessions whose `parentSession` is the session
//! that ran them: inline sidechains (`isSidechain: true` lines of a session
//! file, older versions) are split into one child per chain, and an agent
//! file (`agent-<id>.jsonl` beside the session, or under
//! `<sessionId>/subagents/`) is one child by itself. The parent agent's
//! prompts to a child are `agent-message`s from the parent, never `user`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value;
use sessionlog_schema::{ApprovalPolicy, Preset, SandboxMode, SessionHeader, SessionId};

use super::builder::{image_part, text_part, Origin, Outcome, SessionBuilder};
use super::codex::{file_stem, opening_tag};
use super::source::Place;
use super::source::{
    carries_all, derive_session_id, parse_time, str_of, strings_or_absent, ImportError, Json,
    SourceLine,
};
use super::{ImportedSession, Translation};

/// How Claude Code opens the summary it writes when it continues a session
/// whose context ran out. A transcript that does not flag the line
/// (`isCompactSummary`) still holds the model's summary, never what the
/// person typed, so it gets no user authority.
const CONTINUATION_SUMMARY: &str = "This session is being continued from a previous conversation";

/// The line types Claude Code writes (any of them on a line marks a file as
/// a transcript, with a `sessionId` or a `message`).
const KNOWN_TYPES: &[&str] = &[
    "user",
    "assistant",
    "system",
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "progress",
    "attachment",
    "custom-title",
    "ai-title",
];

/// Whether `lines` look like a Claude Code transcript: one of its first
/// lines (a file may open with a title or a snapshot) is a typed line
/// without a Codex envelope that carries a `sessionId`, a `message`, or a
/// Claude Code line type.
pub fn recognise(lines: &[SourceLine]) -> bool {
    lines.iter().take(RECOGNISE_WITHIN).any(|line| {
        let value = &line.value;
        value.get("payload").is_none()
            && str_of(value, "type").is_some()
            && (value.get("sessionId").is_some()
                || value.get("message").is_some()
                || str_of(value, "type").is_some_and(|kind| KNOWN_TYPES.contains(&kind)))
    })
}

/// How many lines `recognise` looks at.
const RECOGNISE_WITHIN: usize = 20;

/// Translates a transcript into its session and, for inline sidechains,
/// one child session per chain.
pub fn translate(file: &Path, lines: &[SourceLine]) -> Result<Translation, ImportError> {
    let first = lines
        .first()
        .ok_or_else(|| ImportError::file(file, "empty file"))?;
    if !recognise(lines) {
        return Err(ImportError::at_place(
            file,
            first.place(),
            "not a Claude Code transcript: none of its first lines has a type with a sessionId, a message or a Claude Code line type",
        ));
    }
    let first_session_id = lines
        .iter()
        .find_map(|line| str_of(&line.value, "sessionId").filter(|id| !id.trim().is_empty()));
    let created_at = lines
        .iter()
        .find_map(|line| str_of(&line.value, "timestamp").and_then(parse_time))
        .unwrap_or(0);
    let cwd = lines
        .iter()
        .find_map(|line| str_of(&line.value, "cwd"))
        .unwrap_or_default()
        .to_owned();
    if let Some(agent) = agent_id(file, lines) {
        // An agent file is one sub-agent, whatever its lines say, of the
        // session its lines name: its own name (`agent-<id>`) names no
        // session.
        let session_id = first_session_id.map_or_else(|| file_stem(file), str::to_owned);
        let root_id = derive_session_id("claude", &[&session_id]);
        let mut header = SessionHeader::root(
            derive_session_id("claude", &[&session_id, "agent", &agent]),
            created_at,
            cwd,
        );
        header.parent_session = Some(root_id.clone());
        header.delegation_depth = 1;
        let line_refs: Vec<&SourceLine> = lines.iter().collect();
        let events = Conversation::new(&header, Some(&root_id), &session_id)
            .run(&line_refs, &HashMap::new());
        return Ok(Translation {
            sessions: vec![ImportedSession { header, events }],
        });
    }
    let session_id = session_name(file, lines, first_session_id);
    let root_id = derive_session_id("claude", &[&session_id]);
    let chains = sidechains(lines);
    let main_lines: Vec<&SourceLine> = lines
        .iter()
        .enumerate()
        .filter(|(index, _)| !chains.member.contains_key(index))
        .map(|(_, line)| line)
        .collect();
    // A child is announced in the parent where its first line stood (each
    // of several that start there, in order).
    let mut announced: HashMap<usize, Vec<SessionId>> = HashMap::new();
    let mut children = Vec::new();
    // How many chains took each name: a name taken again (two sidechains
    // whose first lines share a uuid) gets its count, so that no child
    // takes another's id; and a name that is itself such a count
    // (`<uuid>~2`) counts on until its id is free.
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut taken_ids: HashSet<SessionId> = HashSet::new();
    for chain in &chains.chains {
        let first_line = lines[chain[0]].clone();
        let name = chain_name(&first_line, chain[0]);
        let child_id = loop {
            let taken = names.entry(name.clone()).or_insert(0);
            *taken += 1;
            let candidate = match *taken {
                1 => derive_session_id("claude", &[&session_id, "sidechain", &name]),
                // `~` is no id character: the id gets the hash of what it
                // replaced, so it meets no sidechain named `<name>-<n>`.
                n => derive_session_id(
                    "claude",
                    &[&session_id, "sidechain", &format!("{name}~{n}")],
                ),
            };
            if taken_ids.insert(candidate.clone()) {
                break candidate;
            }
        };
        let anchor = main_lines
            .iter()
            .position(|line| line.number > first_line.number)
            .unwrap_or(main_lines.len());
        announced.entry(anchor).or_default().push(child_id.clone());
        let chain_created = str_of(&first_line.value, "timestamp")
            .and_then(parse_time)
            .unwrap_or(created_at);
        let mut header = SessionHeader::root(child_id, chain_created, cwd.clone());
        header.parent_session = Some(root_id.clone());
        header.delegation_depth = 1;
        let chain_lines: Vec<&SourceLine> = chain.iter().map(|&index| &lines[index]).collect();
        let events = Conversation::new(&header, Some(&root_id), &session_id)
            .run(&chain_lines, &HashMap::new());
        children.push(ImportedSession { header, events });
    }
    let header = SessionHeader::root(root_id, created_at, cwd);
    let events = Conversation::new(&header, None, &session_id).run(&main_lines, &announced);
    let mut sessions = vec![ImportedSession { header, events }];
    sessions.extend(children);
    Ok(Translation { sessions })
}

/// The id the session of a transcript file (not an agent file) is named
/// after. Claude Code writes each session to a file named after it
/// (`<sessionId>.jsonl`), and writes a resumed conversation to a new file
/// that repeats the records before it, those still carrying the earlier
/// session's `sessionId`: the first `sessionId` of such a file names the
/// session it resumed, which has a file of its own, and only its later
/// lines carry its own. So a file named by a UUID that one of its lines
/// carries as its `sessionId` is that session; any other file (renamed,
/// or holding only another session's lines) is named after the first
/// `sessionId` of its lines, else its name. Where the first `sessionId`
/// and the name agree, as in every file that was not resumed, the id is
/// the one every version gave, so a store imported before still holds it.
fn session_name(file: &Path, lines: &[SourceLine], first_session_id: Option<&str>) -> String {
    let stem = file_stem(file);
    let written_to_its_file = || {
        super::is_uuid(&stem)
            && lines
                .iter()
                .any(|line| str_of(&line.value, "sessionId") == Some(stem.as_str()))
    };
    match first_session_id {
        Some(id) if id.eq_ignore_ascii_case(&stem) => id.to_owned(),
        _ if written_to_its_file() => stem,
        Some(id) => id.to_owned(),
        None => stem,
    }
}

/// The agent id of an agent file: from its name (`agent-<id>.jsonl`), or
/// from an `agentId` that every conversation line carries.
fn agent_id(file: &Path, lines: &[SourceLine]) -> Option<String> {
    if let Some(id) = file_stem(file).strip_prefix("agent-") {
        let from_lines = lines.iter().find_map(|line| str_of(&line.value, "agentId"));
        return Some(from_lines.unwrap_or(id).to_owned());
    }
    let conversation: Vec<&SourceLine> = lines
        .iter()
        .filter(|line| matches!(str_of(&line.value, "type"), Some("user" | "assistant")))
        .collect();
    let all_sidechain = !conversation.is_empty()
        && conversation.iter().all(|line| {
            line.value.get("isSidechain").and_then(Value::as_bool) == Some(true)
                && str_of(&line.value, "agentId").is_some()
        });
    if all_sidechain {
        return conversation
            .first()
            .and_then(|line| str_of(&line.value, "agentId"))
            .map(str::to_owned);
    }
    None
}

/// Inline sidechains: the indices of each chain in file order.
struct Sidechains {
    chains: Vec<Vec<usize>>,
    member: HashMap<usize, usize>,
}

/// Groups the `isSidechain` lines of a session file into chains: a line
/// joins the chain of its `parentUuid`; a line whose parent is null starts
/// a new chain; a line whose parent is unknown (a broken chain) joins the
/// latest chain, keeping file order.
fn sidechains(lines: &[SourceLine]) -> Sidechains {
    let mut chains: Vec<Vec<usize>> = Vec::new();
    let mut member = HashMap::new();
    let mut chain_of_uuid: HashMap<&str, usize> = HashMap::new();
    for (index, line) in lines.iter().enumerate() {
        if line.value.get("isSidechain").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let parent = str_of(&line.value, "parentUuid");
        let chain = match parent.and_then(|parent| chain_of_uuid.get(parent)) {
            Some(&chain) => chain,
            None if parent.is_none() || chains.is_empty() => {
                chains.push(Vec::new());
                chains.len() - 1
            }
            None => chains.len() - 1,
        };
        chains[chain].push(index);
        member.insert(index, chain);
        if let Some(uuid) = str_of(&line.value, "uuid") {
            chain_of_uuid.insert(uuid, chain);
        }
    }
    Sidechains { chains, member }
}

fn chain_name(first: &SourceLine, index: usize) -> String {
    str_of(&first.value, "uuid").map_or_else(|| format!("line{}", index + 1), str::to_owned)
}

/// One conversation (a session or a sidechain) being translated.
struct Conversation<'a> {
    builder: SessionBuilder,
    /// The parent session, for a sub-agent: its user text is the parent's.
    parent: Option<&'a SessionId>,
    session_id: &'a str,
    /// Blocks already imported, by API message id: a repeat is skipped.
    seen_blocks: HashSet<(String, String)>,
    /// Lines kept whole for saying more than their mapping reads: a line
    /// written twice is kept once.
    kept_lossy: HashSet<String>,
    /// The text blocks of the current API response, not yet written.
    pending_text: Vec<Value>,
    pending_key: Option<String>,
    /// The line the pending text starts at.
    pending_line: Place,
}

impl<'a> Conversation<'a> {
    fn new(header: &SessionHeader, parent: Option<&'a SessionId>, session_id: &'a str) -> Self {
        Conversation {
            builder: SessionBuilder::new("claude", header.created_at),
            parent,
            session_id,
            seen_blocks: HashSet::new(),
            kept_lossy: HashSet::new(),
            pending_text: Vec::new(),
            pending_key: None,
            pending_line: Place::default(),
        }
    }

    fn run(
        mut self,
        lines: &[&SourceLine],
        announced: &HashMap<usize, Vec<SessionId>>,
    ) -> Vec<super::builder::Draft> {
        for (position, line) in lines.iter().enumerate() {
            for child in announced.get(&position).into_iter().flatten() {
                self.flush_text();
                self.builder.child_created(child.as_str());
            }
            self.builder
                .set_time(str_of(&line.value, "timestamp").and_then(parse_time));
            self.builder.set_line(line.place());
            self.line(line);
            // Kept beside what it maps to, without ending the text of the
            // response it is part of (gathered from several lines), and
            // once: a line Claude Code wrote twice is kept the first time.
            let lossy = !message_carried(&line.value) && !self.builder.was_kept(line.number);
            if lossy && self.kept_lossy.insert(line.raw.clone()) {
                let kind = str_of(&line.value, "type").unwrap_or("untyped");
                self.builder.keep_line(kind, &line.raw);
            }
            if !line.exact {
                self.flush_text();
                let kind = str_of(&line.value, "type").unwrap_or("untyped");
                self.builder.keep_inexact(kind, line);
            }
        }
        for child in announced.get(&lines.len()).into_iter().flatten() {
            self.flush_text();
            self.builder.child_created(child.as_str());
        }
        self.flush_text();
        self.builder.finish()
    }

    fn line(&mut self, line: &SourceLine) {
        let value = &line.value;
        let kind = str_of(value, "type").unwrap_or("untyped");
        match kind {
            "assistant" => self.assistant(line),
            "user" => {
                self.flush_text();
                self.user(line);
            }
            _ => {
                self.flush_text();
                if kind == "progress" {
                    let agent = value.get("data").and_then(|d| str_of(d, "agentId"));
                    self.announce_agent(value, agent);
                }
                self.builder.keep_line(kind, &line.raw);
            }
        }
    }

    fn assistant(&mut self, line: &SourceLine) {
        let value = &line.value;
        let message = value.get("message").unwrap_or(&Value::Null);
        let synthetic = value.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true)
            || str_of(message, "model") == Some("<synthetic>");
        // Borrowed from the line, so that a call's input is written as
        // the line spells it.
        let blocks: Cow<'_, [Value]> = match message.get("content") {
            Some(Value::Array(blocks)) => Cow::Borrowed(blocks),
            Some(Value::String(text)) => Cow::Owned(vec![text_part(text)]),
            _ => Cow::Owned(Vec::new()),
        };
        if synthetic || blocks.is_empty() {
            self.flush_text();
            self.builder.keep_line("assistant", &line.raw);
            return;
        }
        let key = str_of(message, "id")
            .or_else(|| str_of(value, "uuid"))
            .map_or_else(|| format!("line-{}", line.number), str::to_owned);
        let mut unmapped = false;
        for block in blocks.iter() {
            if !self.seen_blocks.insert((key.clone(), block.to_string())) {
                continue;
            }
            match str_of(block, "type") {
                Some("text") => {
                    if self.pending_key.as_deref() != Some(&key) {
                        self.flush_text();
                    }
                    self.builder.model_output(&key);
                    self.pending_key = Some(key.clone());
                    if self.pending_text.is_empty() {
                        self.pending_line = line.place();
                    }
                    self.pending_text
                        .push(text_part(str_of(block, "text").unwrap_or_default()));
                }
                Some("thinking") => {
                    self.flush_text();
                    self.builder.model_output(&key);
                    let thinking = str_of(block, "thinking").unwrap_or_default();
                    self.builder
                        .message(Origin::Reasoning, vec![text_part(thinking)]);
                }
                Some("tool_use" | "server_tool_use") => {
                    self.flush_text();
                    self.builder.model_output(&key);
                    let id = str_of(block, "id")
                        .map_or_else(|| format!("line-{}", line.number), str::to_owned);
                    let name = str_of(block, "name").unwrap_or("unknown");
                    let input = block.get("input");
                    let input = input.map_or(Json::Built(Value::Null), |v| line.as_written(v));
                    self.builder.tool_start(&id, name, input);
                }
                Some("web_search_tool_result") => {
                    self.flush_text();
                    let id = str_of(block, "tool_use_id").unwrap_or_default();
                    let content = block.get("content").map(|v| line.as_written(v));
                    if !self.builder.tool_settle(id, Outcome::Ok, content) {
                        unmapped = true;
                    }
                }
                _ => unmapped = true,
            }
        }
        if unmapped {
            self.flush_text();
            self.builder.keep_line("assistant", &line.raw);
        }
    }

    fn user(&mut self, line: &SourceLine) {
        let value = &line.value;
        if let Some(mode) = str_of(value, "permissionMode") {
            let (sandbox, approval, preset) = permission_mode(mode);
            self.builder.permissions(sandbox, approval, preset);
        }
        let content = value
            .get("message")
            .and_then(|message| message.get("content"))
            .unwrap_or(&Value::Null);
        let blocks: Cow<'_, [Value]> = match content {
            Value::String(text) => Cow::Owned(vec![text_part(text)]),
            Value::Array(blocks) => Cow::Borrowed(blocks),
            _ => {
                self.builder.keep_line("user", &line.raw);
                return;
            }
        };
        let flag = |name: &str| value.get(name).and_then(Value::as_bool) == Some(true);
        let mut parts = Vec::new();
        // For each part: whether it continues an injected piece of its
        // text past a reminder (see `continued_pieces`).
        let mut continues = Vec::new();
        let mut has_results = false;
        let mut unmapped = false;
        for block in blocks.iter() {
            match str_of(block, "type") {
                Some("tool_result") => {
                    has_results = true;
                    let id = str_of(block, "tool_use_id").unwrap_or_default();
                    let outcome = if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                        Outcome::Error
                    } else {
                        Outcome::Ok
                    };
                    let content = block.get("content");
                    let content = content.map_or(Json::Built(Value::Null), |v| line.as_written(v));
                    if self.builder.tool_settle(id, outcome, Some(content)) {
                        let agent = value
                            .get("toolUseResult")
                            .and_then(|result| str_of(result, "agentId"));
                        self.announce_agent(value, agent);
                    } else {
                        unmapped = true;
                    }
                }
                Some("text") => {
                    let text = str_of(block, "text").unwrap_or_default();
                    for (piece, continued) in continued_pieces(split_reminders(text)) {
                        parts.push(text_part(piece));
                        continues.push(continued);
                    }
                }
                Some("image") => {
                    let part = image_block(block);
                    // Only referred to (a URL, a file id): the line keeps it.
                    unmapped |= part.get("data").is_none();
                    parts.push(part);
                    continues.push(false);
                }
                Some("document") => {
                    let part = document_block(block);
                    // Only referred to (a URL, a file id): the line keeps it.
                    unmapped |= part.get("data").is_none();
                    parts.push(part);
                    continues.push(false);
                }
                _ => unmapped = true,
            }
        }
        if !parts.is_empty() {
            if flag("isCompactSummary") {
                let text = blocks
                    .iter()
                    .filter_map(|block| str_of(block, "text"))
                    .collect::<Vec<_>>()
                    .join("\n");
                self.builder.checkpoint(&text);
            } else {
                // Each text block is judged on its own: Claude Code puts
                // injected blocks (`<system-reminder>`) beside what the
                // person typed, before or after it, and neither may take
                // the other's authority. Runs of blocks alike are one
                // message each, in their order.
                // A line is one prompt at most: the turn its prompt opens
                // holds every run of the line, the injected ones before it
                // included, and a second run the person typed (after a
                // reminder) continues the same turn.
                let injected = !typed_line(value) || has_results;
                let runs: Vec<(Origin, Vec<Value>)> = runs_of_origin(parts, &continues)
                    .into_iter()
                    .map(|(text, parts, continued)| {
                        (self.origin(&text, injected || continued), parts)
                    })
                    .collect();
                let prompts = |origin: &Origin| matches!(origin, Origin::User | Origin::Parent(_));
                if runs.iter().any(|(origin, _)| prompts(origin)) {
                    self.builder.begin_prompt();
                }
                for (origin, parts) in runs {
                    self.builder.message(origin, parts);
                }
            }
        }
        if unmapped {
            self.builder.keep_line("user", &line.raw);
        }
    }

    /// Who wrote the text of a user line: injected text (a meta line, text
    /// beside tool results, text that opens with a tag or is an
    /// interruption marker) is context; in a sub-agent the rest is the
    /// parent agent's; otherwise it is the person's prompt.
    fn origin(&self, text: &str, injected: bool) -> Origin {
        let trimmed = text.trim_start();
        if let Some(tag) = opening_tag(trimmed) {
            return Origin::Context(tag.to_owned());
        }
        if trimmed.starts_with("[Request interrupted") {
            return Origin::Context("interruption".to_owned());
        }
        if trimmed.starts_with(CONTINUATION_SUMMARY) {
            return Origin::Context("compact-summary".to_owned());
        }
        if injected {
            return Origin::Context("claude-code".to_owned());
        }
        match self.parent {
            Some(parent) => Origin::Parent(parent.to_string()),
            None => Origin::User,
        }
    }

    /// The sub-agent named `agent` that the line `value` says ran: its
    /// child session. An agent file is named after the session whose lines
    /// it holds, the one the announcing line was written in: a resumed
    /// transcript repeats the lines of the session it resumed, announcing
    /// that session's agents under their own ids.
    fn announce_agent(&mut self, value: &Value, agent: Option<&str>) {
        if let Some(agent) = agent.filter(|agent| !agent.is_empty()) {
            if self.parent.is_none() {
                let session = str_of(value, "sessionId")
                    .filter(|id| !id.trim().is_empty())
                    .unwrap_or(self.session_id);
                let child = derive_session_id("claude", &[session, "agent", agent]);
                self.builder.child_created(child.as_str());
            }
        }
    }

    fn flush_text(&mut self) {
        if !self.pending_text.is_empty() {
            let parts = std::mem::take(&mut self.pending_text);
            // Named by the line the text starts at. Its time stays the one
            // set last (the line that ends the text), as every earlier
            // version imported it: a re-import must give the same events.
            let line = self.builder.line();
            self.builder.set_line(self.pending_line);
            self.builder.message(Origin::Assistant, parts);
            self.builder.set_line(line);
        }
        self.pending_key = None;
    }
}

/// Whether a user line is one the person's text can be on: its message's
/// role is `user` and its `isMeta` is absent or `false`. A line that says
/// otherwise, or says it in a way this mapping does not read (an `isMeta`
/// of `"true"`, a role missing), is injected: when unsure, context.
fn typed_line(value: &Value) -> bool {
    let role = value
        .get("message")
        .and_then(|message| str_of(message, "role"));
    let meta = value.get("isMeta");
    role == Some("user") && matches!(meta, None | Some(Value::Bool(false)))
}

/// `text` cut so that each `<system-reminder>` block in it (through its
/// closing tag, or the end) is a piece of its own: Claude Code may append
/// one to the text the person typed, and the reminder must not take the
/// person's authority (nor the person's text the reminder's). Whitespace
/// between pieces stays with the piece before it; the pieces joined give
/// `text` back.
pub(super) fn split_reminders(text: &str) -> Vec<&str> {
    const OPEN: &str = "<system-reminder>";
    const CLOSE: &str = "</system-reminder>";
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while let Some(found) = text[at..].find(OPEN) {
        let open = at + found;
        let end = text[open..]
            .find(CLOSE)
            .map_or(text.len(), |close| open + close + CLOSE.len());
        if !text[start..open].trim().is_empty() {
            pieces.push(&text[start..open]);
            start = open;
        }
        // The block, with the whitespace after it.
        let after = end + (text[end..].len() - text[end..].trim_start().len());
        pieces.push(&text[start..after]);
        start = after;
        at = after;
    }
    if start < text.len() || pieces.is_empty() {
        match pieces.last_mut() {
            Some(last) if text[start..].trim().is_empty() => {
                // The pieces are contiguous: the last one ends at `start`.
                *last = &text[start - last.len()..];
            }
            _ => pieces.push(&text[start..]),
        }
    }
    pieces
}

/// Whether `text` opens as injected text does: with a tag, as an
/// interruption marker, or as a continuation summary.
fn opens_injected(text: &str) -> bool {
    let trimmed = text.trim_start();
    opening_tag(trimmed).is_some()
        || trimmed.starts_with("[Request interrupted")
        || trimmed.starts_with(CONTINUATION_SUMMARY)
}

/// The pieces of one text (from [`split_reminders`]), each with whether
/// it continues an injected piece past a reminder: text that opened with
/// a tag stays injected after a `<system-reminder>` inside it, as it is
/// without one, and so does text that opened with the reminder itself
/// (a tag too), so that a reminder never gives the words after it the
/// person's authority. Only a reminder after what the person typed is
/// cut out of it.
fn continued_pieces(pieces: Vec<&str>) -> Vec<(&str, bool)> {
    let mut before_injected = false;
    pieces
        .into_iter()
        .enumerate()
        .map(|(index, piece)| {
            let reminder = piece.trim_start().starts_with("<system-reminder>");
            let continued = !reminder && before_injected && !opens_injected(piece);
            if !reminder {
                before_injected = continued || opens_injected(piece);
            } else if index == 0 {
                before_injected = true;
            }
            (piece, continued)
        })
        .collect()
}

/// The parts of a user line in runs that share an origin, each with its
/// text (its text parts' joined) and whether it continues an injected
/// piece (`continues`, by part): a text part that opens with a tag or is
/// an interruption marker (injected), or continues one, starts a run of
/// its own kind, and any other part joins the run before it.
fn runs_of_origin(parts: Vec<Value>, continues: &[bool]) -> Vec<(String, Vec<Value>, bool)> {
    // Each run: whether it is injected, whether it continues an injected
    // piece, its text, its parts.
    let mut runs: Vec<(bool, bool, String, Vec<Value>)> = Vec::new();
    for (index, part) in parts.into_iter().enumerate() {
        let text = match str_of(&part, "type") {
            Some("text") => str_of(&part, "text"),
            _ => None,
        };
        let continued = continues.get(index).copied().unwrap_or(false);
        let marked = continued || text.is_some_and(opens_injected);
        let joins = match runs.last() {
            Some((run_marked, _, _, _)) => text.is_none() || !(marked || *run_marked),
            None => false,
        };
        if !joins {
            runs.push((marked, continued, String::new(), Vec::new()));
        }
        let Some((_, _, run_text, run_parts)) = runs.last_mut() else {
            unreachable!("a run was pushed")
        };
        if let Some(text) = text {
            if !run_text.is_empty() {
                run_text.push('\n');
            }
            run_text.push_str(text);
        }
        run_parts.push(part);
    }
    runs.into_iter()
        .map(|(_, continued, text, parts)| (text, parts, continued))
        .collect()
}

/// A `document` block as an attachment part: its title, and its bytes
/// when the source holds them (base64 inline, or plain text, kept as
/// base64 of its UTF-8), with their media type. A document only referred
/// to (a URL, a file id) keeps its line too: see the caller.
/// Whether the mapping of a user or assistant line carries all its
/// message says: every member of the message and of each of its blocks is
/// one the mapping reads (or leaves out by design: a response's id, model,
/// token usage and stop reason, a thinking block's signature), of the type
/// the mapping reads it as. A line that says more (a member of a later
/// Claude Code, a number where a name was, an `is_error` that is not a
/// boolean, a user message with no content at all) is kept whole beside
/// what it maps to, so that nothing of it is lost. The line's own members
/// around its message (ids, versions, the branch) are left out by design,
/// as are other lines' (kept whole by their mapping).
fn message_carried(value: &Value) -> bool {
    let (assistant, message) = match (str_of(value, "type"), value.get("message")) {
        (Some("assistant"), Some(message)) => (true, message),
        (Some("user"), Some(message)) => (false, message),
        _ => return true,
    };
    let envelope = match assistant {
        true => carries_all(
            message,
            &[
                "id",
                "type",
                "role",
                "model",
                "content",
                "usage",
                "stop_reason",
                "stop_sequence",
            ],
        ),
        // A role the mapping does not write (the line's text is context
        // then) is kept with the line.
        false => {
            carries_all(message, &["role", "content"])
                && message
                    .get("role")
                    .is_none_or(|role| role.as_str() == Some("user"))
        }
    };
    let blocks = match message.get("content") {
        Some(Value::Array(blocks)) if blocks.is_empty() => return false,
        Some(Value::Array(blocks)) => blocks,
        _ => return envelope,
    };
    let source_carried = |block: &Value| {
        let source = block.get("source").unwrap_or(&Value::Null);
        carries_all(source, &["type", "media_type", "data"])
            && strings_or_absent(source, &["type", "media_type", "data"])
    };
    envelope
        && blocks.iter().all(|block| match str_of(block, "type") {
            Some("text") => {
                carries_all(block, &["type", "text"]) && strings_or_absent(block, &["text"])
            }
            Some("thinking") => {
                carries_all(block, &["type", "thinking", "signature"])
                    && strings_or_absent(block, &["thinking"])
            }
            Some("tool_use" | "server_tool_use") => {
                carries_all(block, &["type", "id", "name", "input"])
                    && strings_or_absent(block, &["id", "name"])
            }
            Some("web_search_tool_result") => {
                carries_all(block, &["type", "tool_use_id", "content"])
                    && strings_or_absent(block, &["tool_use_id"])
            }
            Some("tool_result") => {
                carries_all(block, &["type", "tool_use_id", "content", "is_error"])
                    && strings_or_absent(block, &["tool_use_id"])
                    && matches!(
                        block.get("is_error"),
                        None | Some(Value::Null | Value::Bool(_))
                    )
            }
            Some("image") => carries_all(block, &["type", "source"]) && source_carried(block),
            Some("document") => {
                carries_all(block, &["type", "source", "title"])
                    && strings_or_absent(block, &["title"])
                    && source_carried(block)
            }
            // A block the mapping does not know keeps the line already.
            _ => true,
        })
}

fn document_block(block: &Value) -> Value {
    let source = block.get("source").unwrap_or(&Value::Null);
    let mut part = serde_json::json!({
        "type": "attachment",
        "name": str_of(block, "title").unwrap_or("document"),
    });
    let data = match str_of(source, "type") {
        Some("base64") => str_of(source, "data").map(str::to_owned),
        Some("text") => str_of(source, "data").map(|text| BASE64.encode(text)),
        _ => None,
    };
    if let Some(media_type) = str_of(source, "media_type") {
        part["mediaType"] = Value::from(media_type);
    }
    if let Some(data) = data {
        part["data"] = Value::from(data);
    }
    part
}

fn image_block(block: &Value) -> Value {
    let source = block.get("source").unwrap_or(&Value::Null);
    let media_type = str_of(source, "media_type").unwrap_or("application/octet-stream");
    let data = (str_of(source, "type") == Some("base64"))
        .then(|| str_of(source, "data"))
        .flatten();
    image_part(media_type, data)
}

/// What a Claude Code `permissionMode` says in this vocabulary.
/// `bypassPermissions` runs everything unsandboxed without asking (the
/// full-access preset); `plan` only reads (read-only); `default` and
/// `acceptEdits` run unsandboxed and ask before some calls. Other modes have
/// no counterpart.
fn permission_mode(mode: &str) -> (Option<SandboxMode>, Option<ApprovalPolicy>, Option<Preset>) {
    match mode {
        "bypassPermissions" => (
            Some(SandboxMode::DangerFullAccess),
            Some(ApprovalPolicy::Never),
            Some(Preset::FullAccess),
        ),
        "plan" => (
            Some(SandboxMode::ReadOnly),
            Some(ApprovalPolicy::Ask),
            Some(Preset::ReadOnly),
        ),
        "default" | "acceptEdits" => (
            Some(SandboxMode::DangerFullAccess),
            Some(ApprovalPolicy::Ask),
            None,
        ),
        _ => (None, None, None),
    }
}
