//! `SessionBuilder`: turns what an importer understood of a transcript into
//! events that keep every rule of the format. Importers say what happened
//! (a prompt, a model output, a call, its output, a compaction, a line with
//! no counterpart); the builder opens and closes turns and steps around
//! them, keeps call ids unique, settles only calls the source settled, and
//! writes a permission switch only when it changes something.
//!
//! Nothing here invents a result: a call whose output the source never
//! wrote stays started and unsettled; its step and turn are closed where
//! the source moved on (the turn's end, the next prompt, the end of the
//! file).

use std::collections::{HashMap, HashSet};

use super::source::{Json, Place, SourceLine};
use serde_json::{json, Value};
use sessionlog_schema::{compact_json, ApprovalPolicy, Preset, SandboxMode};

/// One event of an imported session, before it gets its seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// The event type.
    pub event_type: String,
    /// Its `data`, compact JSON.
    pub data: String,
    /// Unix milliseconds.
    pub ts: u64,
    /// The line of the source it was made from (its first, for a message
    /// gathered from several); line 0 before the first line.
    pub at: Place,
}

/// Who a message came from, as the importer judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Text the person typed.
    User,
    /// Text the parent session's agent sent to this sub-agent.
    Parent(String),
    /// A project instructions file (its name).
    Instructions(String),
    /// Context the harness injected (which part of it).
    Context(String),
    /// The model's answer.
    Assistant,
    /// The model's reasoning: kept, never shown to the reviewer.
    Reasoning,
}

/// How a settled call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool returned.
    Ok,
    /// The tool reported an error.
    Error,
}

/// Builds the events of one session. See the module docs.
#[derive(Debug)]
pub struct SessionBuilder {
    tool: &'static str,
    events: Vec<Draft>,
    ts: u64,
    at: Place,
    /// The number of the source line kept whole last.
    kept: Option<usize>,
    open_turn: Option<String>,
    turn_has_content: bool,
    open_step: Option<String>,
    step_key: Option<String>,
    turns: u64,
    steps: u64,
    turn_ids: HashSet<String>,
    call_ids: HashSet<String>,
    /// Calls by the id the source gave them, oldest first: (our id, settled).
    calls: HashMap<String, Vec<(String, bool)>>,
    children: HashSet<String>,
    approval: Option<ApprovalPolicy>,
    sandbox: Option<SandboxMode>,
    preset: Option<Preset>,
}

impl SessionBuilder {
    /// A builder whose unknown lines are `x-<tool>/<type>` events.
    pub fn new(tool: &'static str, created_at: u64) -> SessionBuilder {
        SessionBuilder {
            tool,
            events: Vec::new(),
            ts: created_at,
            at: Place::default(),
            kept: None,
            open_turn: None,
            turn_has_content: false,
            open_step: None,
            step_key: None,
            turns: 0,
            steps: 0,
            turn_ids: HashSet::new(),
            call_ids: HashSet::new(),
            calls: HashMap::new(),
            children: HashSet::new(),
            approval: None,
            sandbox: None,
            preset: None,
        }
    }

    /// The time of what follows: the line's own, when it has one.
    pub fn set_time(&mut self, ts: Option<u64>) {
        if let Some(ts) = ts {
            self.ts = ts;
        }
    }

    /// The source line what follows is made from, named by an error about
    /// one of its events.
    pub fn set_line(&mut self, at: Place) {
        self.at = at;
    }

    /// The source line set last.
    pub fn line(&self) -> Place {
        self.at
    }

    /// The source started a turn (Codex `task_started`), named `source_id`.
    pub fn start_turn(&mut self, source_id: Option<&str>) {
        self.end_turn();
        self.turns += 1;
        let id = match source_id {
            Some(id) if !id.is_empty() && !self.turn_ids.contains(id) => id.to_owned(),
            _ => self.fresh_id("turn", self.turns, |builder, id| {
                builder.turn_ids.contains(id)
            }),
        };
        self.turn_ids.insert(id.clone());
        self.push("turn/start", json!({ "turnId": id }));
        self.open_turn = Some(id);
        self.turn_has_content = false;
    }

    /// The source ended the open turn (completed or aborted): its step and
    /// the turn are closed. Nothing happens when no turn is open.
    pub fn end_turn(&mut self) {
        self.end_step();
        if let Some(turn) = self.open_turn.take() {
            self.push("turn/end", json!({ "turnId": turn }));
        }
    }

    /// A prompt (the person's, or the parent agent's to a sub-agent): it
    /// belongs to a turn the source just started, and otherwise opens a new
    /// one.
    pub fn prompt(&mut self, origin: Origin, parts: Vec<Value>) {
        self.begin_prompt();
        self.message(origin, parts);
    }

    /// Opens the turn a prompt belongs to, before any message of it: the
    /// turn the source just started, and otherwise a new one. What a line
    /// holds beside its prompt (injected context before or after it) is
    /// then written with [`message`](Self::message), in the same turn.
    pub fn begin_prompt(&mut self) {
        if self.open_turn.is_none() || self.turn_has_content {
            self.start_turn(None);
        }
        self.turn_has_content = true;
    }

    /// The model produced something for the response `response_key` (a
    /// Claude message id, or a Codex count of inputs seen): a step is open
    /// for that response afterwards, inside a turn.
    pub fn model_output(&mut self, response_key: &str) {
        if self.open_turn.is_none() {
            self.start_turn(None);
        }
        self.turn_has_content = true;
        if self.open_step.is_some() && self.step_key.as_deref() != Some(response_key) {
            self.end_step();
        }
        if self.open_step.is_none() {
            self.steps += 1;
            let step = self.fresh_id("step", self.steps, |_, _| false);
            let turn = self.open_turn.clone().unwrap_or_default();
            self.push("step/start", json!({ "stepId": step, "turnId": turn }));
            self.open_step = Some(step);
            self.step_key = Some(response_key.to_owned());
        }
    }

    /// A message with `parts` (`{type: text|image|attachment, …}`).
    pub fn message(&mut self, origin: Origin, parts: Vec<Value>) {
        let (role, source) = match origin {
            Origin::User => ("user", json!({ "kind": "user" })),
            Origin::Parent(sender) => (
                "user",
                json!({ "kind": "agent-message", "senderSessionId": sender }),
            ),
            Origin::Instructions(name) => {
                ("system", json!({ "kind": "instructions", "name": name }))
            }
            Origin::Context(name) => ("system", json!({ "kind": "context", "name": name })),
            Origin::Assistant => ("assistant", json!({ "kind": "assistant" })),
            Origin::Reasoning => ("assistant", json!({ "kind": "reasoning" })),
        };
        self.push(
            "message",
            json!({ "role": role, "source": source, "content": parts }),
        );
    }

    /// Starts a call in the open step (the caller made one with
    /// [`model_output`](Self::model_output)). A source id already used gets
    /// a suffix, so every `callId` of the log stays unique; the source's
    /// later output settles the newest call of that id.
    pub fn tool_start(&mut self, source_id: &str, name: &str, arguments: Json) {
        let step = self.open_step.clone().unwrap_or_default();
        // The names this source id can have: itself, then `~2`, `~3`, …;
        // a call gets the first that is free. The calls it named before
        // took the first ones free at their time, so every name up to
        // their count is taken: the search starts after them (a source
        // that repeats one id does not pay for all the earlier ones).
        let candidate = |n: usize| match n {
            1 => source_id.to_owned(),
            n => format!("{source_id}~{n}"),
        };
        let mut n = self.calls.get(source_id).map_or(0, Vec::len) + 1;
        let mut call_id = candidate(n);
        while call_id.is_empty() || self.call_ids.contains(&call_id) {
            n += 1;
            call_id = candidate(n);
        }
        self.call_ids.insert(call_id.clone());
        self.calls
            .entry(source_id.to_owned())
            .or_default()
            .push((call_id.clone(), false));
        let name = if name.is_empty() { "unknown" } else { name };
        let data = object(vec![
            ("callId", Json::from(Value::from(call_id))),
            ("stepId", Value::from(step).into()),
            ("name", Value::from(name).into()),
            ("arguments", arguments),
        ]);
        self.push_text("tool/start", data);
    }

    /// Settles the newest unsettled call the source named `source_id`;
    /// `false` (and nothing written) when there is none to settle.
    pub fn tool_settle(&mut self, source_id: &str, outcome: Outcome, result: Option<Json>) -> bool {
        let Some(call) = self
            .calls
            .get_mut(source_id)
            .and_then(|calls| calls.iter_mut().rev().find(|(_, settled)| !settled))
        else {
            return false;
        };
        call.1 = true;
        let call_id = call.0.clone();
        let status = match outcome {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
        };
        let mut members = vec![
            ("callId", Json::from(Value::from(call_id))),
            ("status", Value::from(status).into()),
        ];
        // A source's result that is null, or missing, is no result: the
        // member is left out, never null (docs/EVENTS.md).
        if let Some(result) = result.filter(|result| !result.is_null()) {
            members.push(("result", result));
        }
        self.push_text("tool/settle", object(members));
        true
    }

    /// A compaction: a checkpoint through the last event so far.
    pub fn checkpoint(&mut self, summary: &str) {
        let through = self.events.len() as u64;
        self.push(
            "checkpoint",
            json!({ "summary": summary, "throughSeq": through }),
        );
    }

    /// A sub-agent session this one created (once per child).
    pub fn child_created(&mut self, child: &str) {
        if self.children.insert(child.to_owned()) {
            self.push(
                "child/created",
                json!({ "childSessionId": child, "mode": "one-shot" }),
            );
        }
    }

    /// The permission settings the source recorded: an event for each one
    /// that differs from what is in force, the preset last.
    pub fn permissions(
        &mut self,
        sandbox: Option<SandboxMode>,
        approval: Option<ApprovalPolicy>,
        preset: Option<Preset>,
    ) {
        if let Some(mode) = sandbox.filter(|mode| self.sandbox != Some(*mode)) {
            self.sandbox = Some(mode);
            self.push("sandbox/mode", json!({ "mode": mode.as_str() }));
        }
        if let Some(policy) = approval.filter(|policy| self.approval != Some(*policy)) {
            self.approval = Some(policy);
            self.push("approval/policy", json!({ "policy": policy.as_str() }));
        }
        if let Some(chosen) = preset.filter(|chosen| self.preset != Some(*chosen)) {
            self.preset = Some(chosen);
            self.push("permission/preset", json!({ "preset": chosen.as_str() }));
        }
    }

    /// Keeps `line` whole as an unknown line when its numbers do not read
    /// exactly ([`SourceLine::exact`]) and it was not kept already: what it
    /// mapped to holds those numbers as the nearest the mapping could
    /// write, and the line beside it the numbers as they were.
    pub fn keep_inexact(&mut self, kind: &str, line: &SourceLine) {
        self.keep_lossy(!line.exact, kind, line);
    }

    /// Whether the line numbered `number` was kept whole already.
    pub fn was_kept(&self, number: usize) -> bool {
        self.kept == Some(number)
    }

    /// Keeps `line` whole, unless it was kept already, when its mapping
    /// loses something of it (`lossy`): a member the mapping does not read,
    /// a value of a type it does not read. What it mapped to stays beside.
    pub fn keep_lossy(&mut self, lossy: bool, kind: &str, line: &SourceLine) {
        if lossy && !self.was_kept(line.number) {
            self.keep_line(kind, &line.raw);
        }
    }

    /// A source line with no counterpart in the vocabulary, kept whole as an
    /// `x-<tool>/<kind>` event whose data is the line itself.
    pub fn keep_line(&mut self, kind: &str, raw: &str) {
        self.kept = Some(self.at.line);
        let kind: String = kind
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let kind = if kind.is_empty() {
            "untyped".to_owned()
        } else {
            kind
        };
        // The line parsed as JSON when it was read, so this cannot fail.
        let data = compact_json(raw).unwrap_or_else(|_| Value::from(raw).to_string());
        self.events.push(Draft {
            event_type: format!("x-{}/{kind}", self.tool),
            data,
            ts: self.ts,
            at: self.at,
        });
    }

    /// The events, with the open step and turn closed at the end of the
    /// source.
    pub fn finish(mut self) -> Vec<Draft> {
        self.end_turn();
        self.events
    }

    fn end_step(&mut self) {
        if let Some(step) = self.open_step.take() {
            self.push("step/end", json!({ "stepId": step }));
        }
        self.step_key = None;
    }

    fn fresh_id(
        &self,
        prefix: &str,
        n: u64,
        taken: impl Fn(&SessionBuilder, &str) -> bool,
    ) -> String {
        let mut id = format!("{prefix}-{n}");
        let mut extra = 1;
        while taken(self, &id) {
            extra += 1;
            id = format!("{prefix}-{n}~{extra}");
        }
        id
    }

    fn push(&mut self, event_type: &str, data: Value) {
        self.push_text(event_type, data.to_string());
    }

    fn push_text(&mut self, event_type: &str, data: String) {
        self.events.push(Draft {
            event_type: event_type.to_owned(),
            data,
            ts: self.ts,
            at: self.at,
        });
    }
}

/// The JSON text of an object of `members`, in the order of their names
/// (as a `Value` writes its members, so that only what a source wrote
/// keeps its own order).
fn object(mut members: Vec<(&str, Json)>) -> String {
    members.sort_by_key(|(name, _)| *name);
    let mut text = String::from("{");
    for (index, (name, value)) in members.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str(&Value::from(*name).to_string());
        text.push(':');
        text.push_str(&value.text());
    }
    text.push('}');
    text
}

/// A text part.
pub fn text_part(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

/// An image part (`data`: inline base64 when the source holds the bytes).
pub fn image_part(media_type: &str, data: Option<&str>) -> Value {
    match data {
        Some(data) => json!({ "type": "image", "mediaType": media_type, "data": data }),
        None => json!({ "type": "image", "mediaType": media_type }),
    }
}
