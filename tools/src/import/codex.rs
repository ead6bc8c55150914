//! Codex CLI rollouts (`rollout-<time>-<uuid>.jsonl`) as sessions.
//!
//! Two eras are read: the current one, where every line is
//! `{timestamp, type, payload}` and line 1 is `session_meta`, and the legacy
//! one, where line 1 is `{id, timestamp, instructions, git}` and the other
//! lines are bare response items and `{"record_type":"state"}` markers.
//!
//! Authority: the person's prompts are exactly the user-role items that an
//! `event_msg` `user_message` (or a paginated `item_completed` user message)
//! mirrors; every other user-role item is context or instructions. Legacy
//! files hold no such mirror, so there a user-role item is a prompt unless
//! it opens with a tag (`<environment_context>`, `<user_instructions>`, …),
//! the only way that era marked injected text.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::Value;
use sessionlog_schema::{compact_json, ApprovalPolicy, SandboxMode, SessionHeader};

use super::builder::{image_part, text_part, Origin, Outcome, SessionBuilder};
use super::source::{
    carries_all, derive_session_id, names_a_member_twice, numbers_read_exactly, parse_time, str_of,
    strings_or_absent, ImportError, Json, SourceLine,
};
use super::{ImportedSession, Translation};

/// Whether `lines` look like a Codex rollout (current or legacy).
pub fn recognise(lines: &[SourceLine]) -> bool {
    let Some(first) = lines.first() else {
        return false;
    };
    era(&first.value).is_some()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    Current,
    Legacy,
}

fn era(first: &Value) -> Option<Era> {
    let kind = str_of(first, "type");
    if first.get("payload").is_some()
        && matches!(
            kind,
            Some("session_meta" | "response_item" | "event_msg" | "turn_context" | "compacted")
        )
    {
        return Some(Era::Current);
    }
    if kind.is_none() && str_of(first, "id").is_some() && first.get("timestamp").is_some() {
        return Some(Era::Legacy);
    }
    None
}

/// Translates a rollout into one session.
pub fn translate(file: &Path, lines: &[SourceLine]) -> Result<Translation, ImportError> {
    let first = lines
        .first()
        .ok_or_else(|| ImportError::file(file, "empty file"))?;
    let era = era(&first.value).ok_or_else(|| {
        ImportError::at_place(
            file,
            first.place(),
            "not a Codex rollout: line 1 is neither a session_meta line nor a legacy session header",
        )
    })?;
    let items: Vec<Item<'_>> = lines.iter().map(|line| Item::of(era, line)).collect();
    let meta = match era {
        Era::Current => items.iter().find_map(|item| match item.kind {
            Kind::SessionMeta => Some(item.payload),
            _ => None,
        }),
        Era::Legacy => Some(&first.value),
    };
    let header = header(file, era, meta, &items);
    let mirrors = pair_mirrors(&items);
    let mut builder = SessionBuilder::new("codex", header.created_at);
    let mut state = State {
        era,
        mirrors,
        input_epoch: 0,
        prompter: prompter(meta, &header),
        prompts: HashSet::new(),
    };
    for (index, item) in items.iter().enumerate() {
        builder.set_time(item.ts);
        builder.set_line(item.line.place());
        state.apply(&mut builder, index, item);
        builder.keep_lossy(!carried(era, item), &item.kept_kind(), item.line);
        builder.keep_inexact(&item.kept_kind(), item.line);
    }
    Ok(Translation {
        sessions: vec![ImportedSession {
            header,
            events: builder.finish(),
        }],
    })
}

/// One line, classified.
struct Item<'a> {
    line: &'a SourceLine,
    kind: Kind,
    /// The payload (`payload` of a current line, the line itself in legacy).
    payload: &'a Value,
    ts: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SessionMeta,
    TurnContext,
    Compacted,
    Response,
    Event,
    Other,
}

impl<'a> Item<'a> {
    fn of(era: Era, line: &'a SourceLine) -> Item<'a> {
        let value = &line.value;
        let ts = str_of(value, "timestamp").and_then(parse_time);
        if era == Era::Legacy {
            let kind = if str_of(value, "type").is_some() {
                Kind::Response
            } else if line.number == 1 {
                Kind::SessionMeta
            } else {
                Kind::Other
            };
            return Item {
                line,
                kind,
                payload: value,
                ts,
            };
        }
        let payload = value.get("payload").unwrap_or(value);
        let kind = match str_of(value, "type") {
            Some("session_meta") => Kind::SessionMeta,
            Some("turn_context") => Kind::TurnContext,
            Some("compacted") => Kind::Compacted,
            Some("response_item") if payload.is_object() => Kind::Response,
            Some("event_msg") if payload.is_object() => Kind::Event,
            _ => Kind::Other,
        };
        Item {
            line,
            kind,
            payload,
            ts,
        }
    }

    fn payload_type(&self) -> Option<&'a str> {
        str_of(self.payload, "type")
    }

    /// The name its `x-codex/…` event gets.
    fn kept_kind(&self) -> String {
        let envelope = match self.kind {
            Kind::SessionMeta => return "session_meta".to_owned(),
            Kind::Response | Kind::Event => self.payload_type(),
            _ => None,
        };
        envelope
            .or_else(|| str_of(&self.line.value, "type"))
            .or_else(|| str_of(&self.line.value, "record_type"))
            .unwrap_or("untyped")
            .to_owned()
    }
}

fn header(file: &Path, era: Era, meta: Option<&Value>, items: &[Item<'_>]) -> SessionHeader {
    let source_id = meta
        .and_then(|meta| str_of(meta, "id"))
        .filter(|id| !id.trim().is_empty())
        .map(str::to_owned)
        .or_else(|| uuid_in_file_name(file))
        .unwrap_or_else(|| file_stem(file));
    let created_at = meta
        .and_then(|meta| str_of(meta, "timestamp"))
        .and_then(parse_time)
        .or_else(|| items.iter().find_map(|item| item.ts))
        .unwrap_or(0);
    let cwd = meta
        .and_then(|meta| str_of(meta, "cwd"))
        .map(str::to_owned)
        .or_else(|| items.iter().find_map(|item| environment_cwd(item.payload)))
        .unwrap_or_default();
    let mut header =
        SessionHeader::root(derive_session_id("codex", &[&source_id]), created_at, cwd);
    if era == Era::Current {
        if let Some(meta) = meta {
            let (parent, depth) = parent_of(meta);
            if let Some(parent) = parent {
                header.parent_session = Some(derive_session_id("codex", &[parent]));
                header.delegation_depth = depth;
            }
        }
    }
    header
}

/// Who the prompts of a rollout come from: a spawned sub-agent's
/// (`thread_spawn`, or a top-level `parent_thread_id`) come from its parent
/// session's agent, never the person; any other sub-agent's (review,
/// compaction) are the harness's, so context, even when the rollout was
/// forked from another; a fork's and a root session's come from the
/// person.
fn prompter(meta: Option<&Value>, header: &SessionHeader) -> Origin {
    let subagent = meta
        .and_then(|meta| meta.get("source"))
        .and_then(|source| source.get("subagent"));
    let spawned = subagent.is_some_and(|subagent| subagent.get("thread_spawn").is_some())
        || meta.is_some_and(|meta| meta.get("parent_thread_id").is_some());
    match (&header.parent_session, spawned, subagent.is_some()) {
        (Some(parent), true, _) => Origin::Parent(parent.to_string()),
        (_, _, true) | (None, true, false) => Origin::Context("subagent".to_owned()),
        (_, false, false) => Origin::User,
    }
}

/// The session a rollout descends from: the spawning thread of a sub-agent
/// (`source.subagent.thread_spawn.parent_thread_id`, or a top-level
/// `parent_thread_id`), else the thread it was forked from.
fn parent_of(meta: &Value) -> (Option<&str>, u64) {
    let spawn = meta
        .get("source")
        .and_then(|source| source.get("subagent"))
        .and_then(|subagent| subagent.get("thread_spawn"));
    if let Some(parent) = spawn.and_then(|spawn| str_of(spawn, "parent_thread_id")) {
        // A depth the format cannot hold (not a positive integer, or above
        // 2^63-1, as `delegationDepth` is stored) counts as 1, as a missing
        // one does: the `session_meta` line, kept whole, holds it as
        // written.
        let depth = spawn
            .and_then(|spawn| spawn.get("depth"))
            .and_then(Value::as_u64)
            .filter(|depth| (1..=i64::MAX.unsigned_abs()).contains(depth))
            .unwrap_or(1);
        return (Some(parent), depth);
    }
    if let Some(parent) = str_of(meta, "parent_thread_id") {
        return (Some(parent), 1);
    }
    (str_of(meta, "forked_from_id"), 1)
}

fn uuid_in_file_name(file: &Path) -> Option<String> {
    let stem = file_stem(file);
    let tail = stem.get(stem.len().checked_sub(36)?..)?;
    super::is_uuid(tail).then(|| tail.to_owned())
}

/// The file name without `.jsonl` (and `.zst`).
pub fn file_stem(file: &Path) -> String {
    let name = file
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = name.strip_suffix(".zst").unwrap_or(&name);
    name.strip_suffix(".jsonl").unwrap_or(name).to_owned()
}

/// The `<cwd>` of an `<environment_context>` message (legacy files name the
/// working folder only there).
fn environment_cwd(payload: &Value) -> Option<String> {
    // Only the harness's own block: a message from the person's side (user
    // or developer) that opens with `<environment_context>`. A `<cwd>`
    // anywhere else (the model's answer, a pasted file) says nothing about
    // where the session ran.
    if str_of(payload, "type") != Some("message")
        || !matches!(str_of(payload, "role"), Some("user" | "developer"))
    {
        return None;
    }
    let text = content_text(payload);
    let context = text.trim_start().strip_prefix("<environment_context>")?;
    let end_of_context = context
        .find("</environment_context>")
        .unwrap_or(context.len());
    let context = &context[..end_of_context];
    let start = context.find("<cwd>")? + "<cwd>".len();
    let end = context[start..].find("</cwd>")? + start;
    Some(context[start..end].trim().to_owned())
}

/// The text parts of a message item, joined.
fn content_text(payload: &Value) -> String {
    match payload.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| str_of(part, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The message parts of a message item (texts and images), and whether
/// it holds a part the mapping does not know (a file, a refusal, a type of
/// a later Codex): the caller then keeps the line too, so that nothing of
/// it is lost. The text of an unknown part that has one is still a text.
/// An image Codex framed with texts of its own is one image part (see
/// [`framed_image`]).
fn content_parts(payload: &Value) -> (Vec<Value>, bool) {
    match payload.get("content") {
        Some(Value::String(text)) => (vec![text_part(text)], false),
        Some(Value::Array(parts)) => {
            let mut unmapped = false;
            let mut mapped = Vec::with_capacity(parts.len());
            let mut rest = parts.as_slice();
            while let Some((part, after)) = rest.split_first() {
                if let Some((image, after)) = framed_image(rest) {
                    mapped.push(image);
                    rest = after;
                    continue;
                }
                rest = after;
                match str_of(part, "type") {
                    Some("input_image") => mapped.push(data_url_image(str_of(part, "image_url"))),
                    Some("input_text" | "output_text" | "text") => {
                        let text = str_of(part, "text");
                        unmapped |= text.is_none();
                        mapped.extend(text.map(text_part));
                    }
                    _ => {
                        unmapped = true;
                        mapped.extend(str_of(part, "text").map(text_part));
                    }
                }
            }
            (mapped, unmapped)
        }
        None | Some(Value::Null) => (Vec::new(), false),
        Some(_) => (Vec::new(), true),
    }
}

/// The image at the start of `parts` when Codex framed it, and the parts
/// after it. Codex sends an image of a prompt between two texts of its own:
/// `<image name=[Image #1]>` (a file of the person's, by its label) or
/// `<image>` (one given by URL) before the `input_image`, `</image>` after
/// it. The frame is the image's, not text anyone typed: read as text, it
/// would make the prompt's words differ from the event that mirrors them,
/// and the image context. The label becomes the image's `name`, so the
/// frame can be written back as it was. `None` when the parts do not open
/// so, or when a labelled image is only referred to (its part is then an
/// attachment, whose name is the URL).
fn framed_image(parts: &[Value]) -> Option<(Value, &[Value])> {
    let [open, image, close, after @ ..] = parts else {
        return None;
    };
    fn text(part: &Value) -> Option<&str> {
        match str_of(part, "type") {
            Some("input_text") => str_of(part, "text"),
            _ => None,
        }
    }
    if str_of(image, "type") != Some("input_image") || text(close) != Some("</image>") {
        return None;
    }
    let label = match text(open)? {
        "<image>" => None,
        open => Some(open.strip_prefix("<image name=")?.strip_suffix('>')?),
    };
    let mut part = data_url_image(str_of(image, "image_url"));
    if let Some(label) = label {
        match part.as_object_mut() {
            Some(members) if members.get("type") == Some(&Value::from("image")) => {
                members.insert("name".to_owned(), Value::from(label));
            }
            _ => return None,
        }
    }
    Some((part, after))
}

/// The text of message parts, joined with `separator`.
fn parts_text(parts: &[Value], separator: &str) -> String {
    parts
        .iter()
        .filter(|part| str_of(part, "type") == Some("text"))
        .filter_map(|part| str_of(part, "text"))
        .collect::<Vec<_>>()
        .join(separator)
}

/// An image given as a `data:` URL (or a reference the source kept).
fn data_url_image(url: Option<&str>) -> Value {
    let Some(url) = url else {
        return image_part("application/octet-stream", None);
    };
    match url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((media_type, data)) => image_part(media_type, Some(data)),
        None => serde_json::json!({ "type": "attachment", "name": url }),
    }
}

/// Whose words a mirrored line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    User,
    Assistant,
}

/// Which of the forms Codex writes one message in a line is: the response
/// item (what the model saw), the compatibility event (`user_message`,
/// `agent_message`), and the completed turn item (`item_completed`) that
/// rollouts with extended history keep as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Item,
    Event,
    Completed,
}

/// The lines of one message written in more than one form, by index.
#[derive(Debug, Default)]
struct Mirrored {
    item: Option<usize>,
    event: Option<usize>,
    completed: Option<usize>,
}

impl Mirrored {
    fn slot(&mut self, form: Form) -> &mut Option<usize> {
        match form {
            Form::Item => &mut self.item,
            Form::Event => &mut self.event,
            Form::Completed => &mut self.completed,
        }
    }

    fn members(&self) -> Vec<usize> {
        let mut members: Vec<usize> = [self.item, self.event, self.completed]
            .into_iter()
            .flatten()
            .collect();
        members.sort_unstable();
        members
    }
}

/// The lines that mirror another: each message Codex wrote in more than
/// one form (equal text, the forms of one message gathered first come
/// first served in file order, at most one line of each form). A mirrored
/// item is the person's prompt (or the model's answer) and its other forms
/// are not imported again; of a message written as an event and a
/// completed item but no item, the first line stands for it and the
/// others are in the set.
fn pair_mirrors(items: &[Item<'_>]) -> HashSet<usize> {
    let mut groups: Vec<Mirrored> = Vec::new();
    let mut open: HashMap<(Role, String), Vec<usize>> = HashMap::new();
    for (index, item) in items.iter().enumerate() {
        let Some((role, form, text)) = mirror_side(item) else {
            continue;
        };
        let waiting = open.entry((role, text.trim().to_owned())).or_default();
        let joins = waiting
            .iter()
            .copied()
            .find(|&group| groups[group].slot(form).is_none());
        match joins {
            Some(group) => *groups[group].slot(form) = Some(index),
            None => {
                let mut group = Mirrored::default();
                *group.slot(form) = Some(index);
                groups.push(group);
                waiting.push(groups.len() - 1);
            }
        }
        waiting.retain(|&group| groups[group].members().len() < 3);
    }
    let mut mirrors = HashSet::new();
    for group in &groups {
        let members = group.members();
        match (members.len(), group.item) {
            (0 | 1, _) => {}
            (_, Some(_)) => mirrors.extend(members),
            (_, None) => mirrors.extend(members.into_iter().skip(1)),
        }
    }
    mirrors
}

fn mirror_side(item: &Item<'_>) -> Option<(Role, Form, String)> {
    match (item.kind, item.payload_type()) {
        // The text of its parts, an image's frame not text (as the event
        // has none).
        (Kind::Response, Some("message")) => {
            let role = match str_of(item.payload, "role") {
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                _ => return None,
            };
            let (parts, _) = content_parts(item.payload);
            Some((role, Form::Item, parts_text(&parts, "")))
        }
        // An event whose `kind` says Codex wrote it (environment context,
        // user instructions) mirrors no prompt.
        (Kind::Event, Some("user_message")) if typed_by_the_person(item.payload) => Some((
            Role::User,
            Form::Event,
            str_of(item.payload, "message")?.to_owned(),
        )),
        (Kind::Event, Some("agent_message")) => Some((
            Role::Assistant,
            Form::Event,
            str_of(item.payload, "message")?.to_owned(),
        )),
        (Kind::Event, Some("item_completed")) => {
            let turn_item = item.payload.get("item")?;
            let role = match str_of(turn_item, "type") {
                Some("UserMessage") => Role::User,
                Some("AgentMessage") => Role::Assistant,
                _ => return None,
            };
            Some((role, Form::Completed, content_text_joined(turn_item)))
        }
        _ => None,
    }
}

/// The text parts joined without separator, as Codex joins them into the
/// mirroring event's `message`.
fn content_text_joined(payload: &Value) -> String {
    match payload.get("content") {
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| str_of(p, "text")).collect(),
        Some(Value::String(text)) => text.clone(),
        _ => String::new(),
    }
}

struct State {
    era: Era,
    /// Who a prompt comes from: the person, or for a spawned sub-agent the
    /// agent of its parent session.
    prompter: Origin,
    mirrors: HashSet<usize>,
    /// Counts the inputs the model received (tool outputs, prompts): a
    /// model output after a new input belongs to a new response, so a new
    /// step.
    input_epoch: u64,
    /// The text of every prompt so far (trimmed, its texts joined as
    /// mirrors are matched), to know a prompt that a compaction kept.
    prompts: HashSet<String>,
}

impl State {
    fn apply(&mut self, builder: &mut SessionBuilder, index: usize, item: &Item<'_>) {
        let raw = &item.line.raw;
        match item.kind {
            Kind::SessionMeta | Kind::Other => builder.keep_line(&item.kept_kind(), raw),
            Kind::TurnContext => {
                builder.keep_line("turn_context", raw);
                builder.permissions(sandbox_of(item.payload), approval_of(item.payload), None);
            }
            Kind::Compacted => self.compacted(builder, item),
            Kind::Response => self.response(builder, index, item),
            Kind::Event => self.event(builder, index, item),
        }
    }

    /// A prompt of the session's prompter, remembered by its text.
    fn prompt(&mut self, builder: &mut SessionBuilder, parts: Vec<Value>) {
        self.prompts
            .insert(parts_text(&parts, "").trim().to_owned());
        builder.prompt(self.prompter.clone(), parts);
    }

    /// A compaction: a checkpoint whose summary is the `message` the model
    /// continues from, through the events before it. A checkpoint stands
    /// in for everything before it, so one is written only with a summary
    /// to read: Codex leaves `message` empty when it compacted remotely
    /// (the summary is then encrypted, in the history), and an empty
    /// checkpoint would hide every prompt before it from a reviewer, the
    /// prompt of the turn in progress included, for nothing. The line is
    /// then kept alone, and the history before it stays what is read.
    ///
    /// The `replacement_history` (what the model keeps past the
    /// compaction) is kept with the line. Its user messages that are
    /// prompts of the session, word for word, follow the checkpoint as
    /// the prompts they were: the model goes on reading them, so the
    /// reviewer should too. Any other text of it (a summary, injected
    /// context, a prompt Codex cut short) stays in the kept line: nothing
    /// takes the person's authority because a compaction carried it.
    fn compacted(&mut self, builder: &mut SessionBuilder, item: &Item<'_>) {
        let raw = &item.line.raw;
        let summary = str_of(item.payload, "message").unwrap_or_default();
        if summary.trim().is_empty() {
            builder.keep_line("compacted", raw);
            return;
        }
        builder.checkpoint(summary);
        let history = match item.payload.get("replacement_history") {
            Some(Value::Array(history)) if !history.is_empty() => history,
            _ => return,
        };
        builder.keep_line("compacted", raw);
        for entry in history {
            if str_of(entry, "type") != Some("message") || str_of(entry, "role") != Some("user") {
                continue;
            }
            let (parts, _) = content_parts(entry);
            let text = parts_text(&parts, "");
            let text = text.trim();
            if !text.is_empty() && self.prompts.contains(text) {
                builder.message(self.prompter.clone(), parts);
            }
        }
    }

    fn response_key(&self) -> String {
        format!("response-{}", self.input_epoch)
    }

    fn response(&mut self, builder: &mut SessionBuilder, index: usize, item: &Item<'_>) {
        let payload = item.payload;
        let raw = &item.line.raw;
        let call_id = || {
            str_of(payload, "call_id")
                .or_else(|| str_of(payload, "id"))
                .map_or_else(|| format!("line-{}", item.line.number), str::to_owned)
        };
        // A member of the payload as the line spells it; null when missing.
        let written = |name: &str| {
            payload.get(name).map_or(Json::Built(Value::Null), |value| {
                item.line.as_written(value)
            })
        };
        match item.payload_type() {
            Some("message") => {
                let Some(role) = str_of(payload, "role") else {
                    builder.keep_line("message", raw);
                    return;
                };
                let (parts, unmapped) = content_parts(payload);
                match role {
                    "assistant" => {
                        builder.model_output(&self.response_key());
                        builder.message(Origin::Assistant, parts);
                    }
                    "user" => {
                        self.input_epoch += 1;
                        let mirrored = self.mirrors.contains(&index)
                            && opening_tag(&parts_text(&parts, "\n")).is_none();
                        if mirrored || self.legacy_prompt(payload) {
                            self.prompt(builder, parts);
                        } else {
                            for (origin, parts) in injected_runs(parts) {
                                builder.message(origin, parts);
                            }
                        }
                    }
                    role => builder.message(Origin::Context(role.to_owned()), parts),
                }
                if unmapped {
                    builder.keep_line("message", raw);
                }
            }
            Some("reasoning") => {
                let texts = reasoning_texts(payload);
                if texts.is_empty() {
                    builder.keep_line("reasoning", raw);
                } else {
                    builder.model_output(&self.response_key());
                    builder.message(
                        Origin::Reasoning,
                        texts.iter().map(|t| text_part(t)).collect(),
                    );
                }
            }
            Some("function_call") => {
                builder.model_output(&self.response_key());
                // Arguments are JSON in a string: numbers in it that do not
                // read exactly, or a member named twice, keep the line whole,
                // as the line's own do.
                let mut inexact = false;
                let arguments = match payload.get("arguments") {
                    Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                        Ok(arguments) => {
                            inexact = !numbers_read_exactly(text) || names_a_member_twice(text);
                            // As the model wrote them, when they read
                            // exactly: their members in its order.
                            match compact_json(text) {
                                Ok(written) if !inexact => Json::Written(written),
                                _ => Json::Built(arguments),
                            }
                        }
                        Err(_) => Value::from(text.as_str()).into(),
                    },
                    Some(other) => item.line.as_written(other),
                    None => Value::Null.into(),
                };
                builder.tool_start(&call_id(), &tool_name(payload), arguments);
                if inexact {
                    builder.keep_line(&item.kept_kind(), raw);
                }
            }
            Some("custom_tool_call") => {
                builder.model_output(&self.response_key());
                builder.tool_start(&call_id(), &tool_name(payload), written("input"));
                // A call that did not complete (`failed`) says so only here.
                if str_of(payload, "status").is_some_and(|status| status != "completed") {
                    builder.keep_line(&item.kept_kind(), raw);
                }
            }
            Some("local_shell_call") => {
                builder.model_output(&self.response_key());
                builder.tool_start(&call_id(), "local_shell", written("action"));
            }
            Some("web_search_call") => {
                builder.model_output(&self.response_key());
                let id = call_id();
                builder.tool_start(&id, "web_search", written("action"));
                if str_of(payload, "status") == Some("completed") {
                    // The line itself says the search completed; it holds no
                    // result, so none is written.
                    builder.tool_settle(&id, Outcome::Ok, None);
                }
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                self.input_epoch += 1;
                let outcome = match payload
                    .get("output")
                    .and_then(|output| output.get("success"))
                    .and_then(Value::as_bool)
                {
                    Some(false) => Outcome::Error,
                    _ => Outcome::Ok,
                };
                if !builder.tool_settle(&call_id(), outcome, Some(written("output"))) {
                    builder.keep_line(&item.kept_kind(), raw);
                }
            }
            _ => builder.keep_line(&item.kept_kind(), raw),
        }
    }

    fn event(&mut self, builder: &mut SessionBuilder, index: usize, item: &Item<'_>) {
        let payload = item.payload;
        let raw = &item.line.raw;
        match item.payload_type() {
            Some("task_started" | "turn_started") => {
                builder.start_turn(str_of(payload, "turn_id"));
                // The model's context window, a collaboration mode: kept.
                if !carries_all(payload, &["type", "turn_id"]) {
                    builder.keep_line(&item.kept_kind(), raw);
                }
            }
            Some("task_complete" | "turn_complete") => builder.end_turn(),
            Some("turn_aborted") => {
                builder.keep_line("turn_aborted", raw);
                builder.end_turn();
            }
            Some("user_message") if !self.mirrors.contains(&index) => {
                self.input_epoch += 1;
                let text = str_of(payload, "message").unwrap_or_default();
                let mut parts = vec![text_part(text)];
                if let Some(images) = payload.get("images").and_then(Value::as_array) {
                    parts.extend(images.iter().map(|url| data_url_image(url.as_str())));
                }
                if typed_by_the_person(payload) && opening_tag(text).is_none() {
                    self.prompt(builder, parts);
                } else {
                    builder.message(injected_origin(text), parts);
                }
                // Images given by their path on the person's machine
                // (`local_images`), which no part holds: the line is kept.
                if !carries_all(payload, &["type", "message", "images", "kind"]) {
                    builder.keep_line(&item.kept_kind(), raw);
                }
            }
            Some("agent_message") if !self.mirrors.contains(&index) => {
                builder.model_output(&self.response_key());
                let text = str_of(payload, "message").unwrap_or_default();
                builder.message(Origin::Assistant, vec![text_part(text)]);
            }
            Some("item_completed") if !self.mirrors.contains(&index) => {
                let turn_item = payload.get("item").unwrap_or(&Value::Null);
                match str_of(turn_item, "type") {
                    Some("UserMessage") => {
                        self.input_epoch += 1;
                        let text = content_text_joined(turn_item);
                        match opening_tag(&text) {
                            None => self.prompt(builder, vec![text_part(&text)]),
                            // Injected texts, each judged on its own.
                            Some(_) => {
                                let texts = match turn_item.get("content") {
                                    Some(Value::Array(parts)) => parts
                                        .iter()
                                        .filter_map(|part| str_of(part, "text"))
                                        .map(text_part)
                                        .collect(),
                                    _ => vec![text_part(&text)],
                                };
                                for (origin, parts) in injected_runs(texts) {
                                    builder.message(origin, parts);
                                }
                            }
                        }
                        if holds_parts_beyond_text(turn_item) {
                            builder.keep_line(&item.kept_kind(), raw);
                        }
                    }
                    Some("AgentMessage") => {
                        builder.model_output(&self.response_key());
                        let text = content_text_joined(turn_item);
                        builder.message(Origin::Assistant, vec![text_part(&text)]);
                        if holds_parts_beyond_text(turn_item) {
                            builder.keep_line(&item.kept_kind(), raw);
                        }
                    }
                    _ => builder.keep_line(&item.kept_kind(), raw),
                }
            }
            _ => builder.keep_line(&item.kept_kind(), raw),
        }
    }

    /// A legacy user item is a prompt unless it opens with a tag.
    fn legacy_prompt(&self, payload: &Value) -> bool {
        let text = content_text(payload);
        self.era == Era::Legacy
            && opening_tag(&text).is_none()
            && !matches!(injected_origin(&text), Origin::Instructions(_))
    }
}

/// Whether the mapping of `item`'s line carries all the line says: every
/// member it holds is one the mapping reads (or one it leaves out by
/// design: an item's `id`, a reasoning item's encrypted form, a completed
/// turn's mirror of its last message), of the type the mapping reads it
/// as. A line that says more (a member of a later Codex, a citation on a
/// text, a number where a name was) is kept whole beside what it maps to,
/// so that nothing of it is lost. Lines whose mapping keeps them whole
/// anyway, or that it keeps for other reasons, need no judging here.
fn carried(era: Era, item: &Item<'_>) -> bool {
    let payload = item.payload;
    let envelope =
        era == Era::Legacy || carries_all(&item.line.value, &["timestamp", "type", "payload"]);
    // A list of `{type, text}` objects, or nothing: a list of anything
    // else, or a value that is no list, is not read whole.
    let texts = |parts: Option<&Value>| match parts {
        None | Some(Value::Null) => true,
        Some(Value::Array(parts)) => parts.iter().all(|part| {
            part.is_object()
                && carries_all(part, &["type", "text"])
                && strings_or_absent(part, &["type", "text"])
        }),
        Some(_) => false,
    };
    let completed = || str_of(payload, "status").is_none_or(|status| status == "completed");
    let kind_carried = match item.kind {
        Kind::SessionMeta | Kind::TurnContext | Kind::Other => true,
        Kind::Compacted => {
            carries_all(payload, &["message", "replacement_history"])
                && strings_or_absent(payload, &["message"])
        }
        Kind::Response => match item.payload_type() {
            Some("message") => {
                let parts = match payload.get("content") {
                    Some(Value::Array(parts)) => {
                        parts.iter().all(|part| match str_of(part, "type") {
                            Some("input_image") => {
                                carries_all(part, &["type", "image_url"])
                                    && strings_or_absent(part, &["image_url"])
                            }
                            // A part the mapping does not know keeps the line
                            // already ([`content_parts`]).
                            Some("input_text" | "output_text" | "text") => {
                                carries_all(part, &["type", "text"])
                                    && strings_or_absent(part, &["text"])
                            }
                            _ => true,
                        })
                    }
                    _ => true,
                };
                carries_all(payload, &["type", "id", "role", "content"])
                    && strings_or_absent(payload, &["role"])
                    && parts
            }
            Some("reasoning") => {
                carries_all(
                    payload,
                    &["type", "id", "summary", "content", "encrypted_content"],
                ) && texts(payload.get("summary"))
                    && texts(payload.get("content"))
            }
            Some("function_call") => {
                carries_all(
                    payload,
                    &["type", "id", "call_id", "name", "namespace", "arguments"],
                ) && strings_or_absent(payload, &["id", "call_id", "name", "namespace"])
            }
            Some("custom_tool_call") => {
                carries_all(
                    payload,
                    &[
                        "type",
                        "id",
                        "call_id",
                        "name",
                        "namespace",
                        "input",
                        "status",
                    ],
                ) && strings_or_absent(payload, &["id", "call_id", "name", "namespace", "status"])
            }
            Some("local_shell_call" | "web_search_call") => {
                carries_all(payload, &["type", "id", "call_id", "action", "status"])
                    && strings_or_absent(payload, &["id", "call_id", "status"])
                    && completed()
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                carries_all(payload, &["type", "call_id", "output"])
                    && strings_or_absent(payload, &["call_id"])
            }
            _ => true,
        },
        Kind::Event => match item.payload_type() {
            // A start's other members keep the line already (its model's
            // context window); a completed turn's last message is a copy
            // of the message the turn ended with.
            Some("task_started" | "turn_started") => strings_or_absent(payload, &["turn_id"]),
            Some("task_complete" | "turn_complete") => {
                carries_all(payload, &["type", "turn_id", "last_agent_message"])
                    && strings_or_absent(payload, &["turn_id", "last_agent_message"])
            }
            // Its other members keep the line already (`local_images`).
            Some("user_message") => {
                let images = match payload.get("images") {
                    None | Some(Value::Null) => true,
                    Some(Value::Array(images)) => images.iter().all(Value::is_string),
                    Some(_) => false,
                };
                strings_or_absent(payload, &["message", "kind"]) && images
            }
            Some("agent_message") => {
                carries_all(payload, &["type", "message"])
                    && strings_or_absent(payload, &["message"])
            }
            Some("item_completed") => {
                let turn_item = payload.get("item").unwrap_or(&Value::Null);
                carries_all(payload, &["type", "item", "thread_id", "turn_id"])
                    && carries_all(turn_item, &["type", "id", "content"])
                    && texts(turn_item.get("content"))
            }
            _ => true,
        },
    };
    envelope && kind_carried
}

/// Whether a turn item's content holds a part that is not text (a local
/// image, an image, a skill), which its mapping as one text drops.
fn holds_parts_beyond_text(turn_item: &Value) -> bool {
    turn_item
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|parts| {
            parts
                .iter()
                .any(|part| !matches!(str_of(part, "type"), Some("text" | "Text")))
        })
}

fn tool_name(payload: &Value) -> String {
    let name = str_of(payload, "name").unwrap_or("unknown");
    match str_of(payload, "namespace") {
        Some(namespace) if !namespace.is_empty() => format!("{namespace}.{name}"),
        _ => name.to_owned(),
    }
}

/// The readable text of a reasoning item: its summaries, then its content
/// (the reasoning itself, which some models write beside a summary of it).
fn reasoning_texts(payload: &Value) -> Vec<String> {
    let texts = |key: &str| -> Vec<String> {
        payload
            .get(key)
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|part| str_of(part, "text"))
                    .filter(|text| !text.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut texts_read = texts("summary");
    texts_read.extend(texts("content"));
    texts_read
}

/// Whether a `user_message` event holds what the person typed: its `kind`
/// is absent or `plain` (Codex marks the environment context and the user
/// instructions it sends as user messages with their own kind).
fn typed_by_the_person(payload: &Value) -> bool {
    match payload.get("kind") {
        None | Some(Value::Null) => true,
        Some(kind) => kind.as_str() == Some("plain"),
    }
}

/// The parts of a user-role item nothing mirrors, in runs of one origin:
/// each text judged on its own (Codex writes the project's instructions and
/// the environment's context as two texts of one item), an image or
/// another part taking the origin of the text before it (or, first, of the
/// text after it).
fn injected_runs(parts: Vec<Value>) -> Vec<(Origin, Vec<Value>)> {
    let origin_of = |part: &Value| match str_of(part, "type") {
        Some("text") => str_of(part, "text").map(injected_origin),
        _ => None,
    };
    let first = parts
        .iter()
        .find_map(origin_of)
        .unwrap_or_else(|| Origin::Context("codex".to_owned()));
    let mut runs: Vec<(Origin, Vec<Value>)> = Vec::new();
    for part in parts {
        let origin = origin_of(&part);
        match (runs.last_mut(), origin) {
            (Some((_, run)), None) => run.push(part),
            (Some((last, run)), Some(origin)) if *last == origin => run.push(part),
            (_, origin) => runs.push((origin.unwrap_or_else(|| first.clone()), vec![part])),
        }
    }
    runs
}

/// What injected a user-role item that is not a prompt: an instructions
/// file (AGENTS.md, as `<user_instructions>` or `# AGENTS.md instructions`),
/// else context named by its opening tag.
fn injected_origin(text: &str) -> Origin {
    let trimmed = text.trim_start();
    if trimmed.starts_with("<user_instructions>") || trimmed.starts_with("# AGENTS.md instructions")
    {
        return Origin::Instructions("AGENTS.md".to_owned());
    }
    Origin::Context(opening_tag(trimmed).unwrap_or("codex").to_owned())
}

/// The name of the tag `text` opens with (`<environment_context>` →
/// `environment_context`).
pub fn opening_tag(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('<')?;
    let end = rest.find(|c: char| c == '>' || c.is_whitespace())?;
    let name = &rest[..end];
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.'));
    valid.then_some(name)
}

/// The sandbox a `turn_context` records (`sandbox_policy` as `{type}`,
/// `{mode}` or a bare string); `None` for anything without a counterpart.
fn sandbox_of(context: &Value) -> Option<SandboxMode> {
    let policy = context.get("sandbox_policy")?;
    let name = policy
        .as_str()
        .or_else(|| str_of(policy, "type"))
        .or_else(|| str_of(policy, "mode"))?;
    name.parse().ok()
}

/// The approval policy a `turn_context` records: `never` is never, every
/// other Codex policy asks in some case, so it is `ask`.
fn approval_of(context: &Value) -> Option<ApprovalPolicy> {
    match context.get("approval_policy")? {
        Value::String(policy) if policy == "never" => Some(ApprovalPolicy::Never),
        Value::String(policy)
            if matches!(policy.as_str(), "untrusted" | "on-failure" | "on-request") =>
        {
            Some(ApprovalPolicy::Ask)
        }
        Value::Object(_) => Some(ApprovalPolicy::Ask),
        _ => None,
    }
}
