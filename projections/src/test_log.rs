//! A tiny log builder for the tests of this crate: a header and records
//! numbered as they are pushed, with one short method per event type.

use serde_json::{json, Value};
use sessionlog_schema::{compact_json, EventRecord, SessionHeader, SessionId};

use crate::{fold, ChildSeed, Defaults, SessionState, Violation};

/// A session under construction.
#[derive(Debug, Clone)]
pub(crate) struct Log {
    pub(crate) header: SessionHeader,
    pub(crate) events: Vec<EventRecord>,
}

/// A valid session id for tests.
pub(crate) fn id(text: &str) -> SessionId {
    match SessionId::parse(text) {
        Ok(id) => id,
        Err(error) => panic!("test id {text:?}: {error}"),
    }
}

impl Log {
    /// A root session `id` with no events.
    pub(crate) fn root(session: &str) -> Log {
        Log {
            header: SessionHeader::root(id(session), 1_000, "/work".to_owned()),
            events: Vec::new(),
        }
    }

    /// A child created by `delegate`.
    pub(crate) fn from_seed(seed: ChildSeed) -> Log {
        Log {
            header: seed.header,
            events: seed.events,
        }
    }

    /// Appends an event whose data is the raw JSON `data`.
    pub(crate) fn raw(mut self, event_type: &str, data: &str) -> Log {
        let data = match compact_json(data) {
            Ok(data) => data,
            Err(error) => panic!("test data {data:?} is not JSON: {error}"),
        };
        let seq = self.events.len() as u64 + 1;
        self.events
            .push(EventRecord::new(seq, 2_000 + seq, None, event_type, &data));
        self
    }

    /// Appends an event.
    pub(crate) fn event(self, event_type: &str, data: Value) -> Log {
        self.raw(event_type, &data.to_string())
    }

    pub(crate) fn turn_start(self, turn: &str) -> Log {
        self.event("turn/start", json!({ "turnId": turn }))
    }
    pub(crate) fn turn_end(self, turn: &str) -> Log {
        self.event("turn/end", json!({ "turnId": turn }))
    }
    pub(crate) fn step_start(self, step: &str, turn: &str) -> Log {
        self.event("step/start", json!({ "stepId": step, "turnId": turn }))
    }
    pub(crate) fn step_end(self, step: &str) -> Log {
        self.event("step/end", json!({ "stepId": step }))
    }
    pub(crate) fn tool_start(self, call: &str, step: &str) -> Log {
        self.event(
            "tool/start",
            json!({ "callId": call, "stepId": step, "name": "shell", "arguments": {"cmd": "ls"} }),
        )
    }
    pub(crate) fn tool_settle(self, call: &str) -> Log {
        self.event("tool/settle", json!({ "callId": call, "status": "ok" }))
    }
    pub(crate) fn ask(self, request: &str, turn: &str) -> Log {
        self.event(
            "approval/asked",
            json!({ "requestId": request, "turnId": turn, "tool": "shell" }),
        )
    }
    pub(crate) fn decide(self, request: &str) -> Log {
        self.event(
            "approval/decided",
            json!({ "requestId": request, "outcome": "allowed-once" }),
        )
    }
    pub(crate) fn policy(self, policy: &str) -> Log {
        self.event("approval/policy", json!({ "policy": policy }))
    }
    pub(crate) fn sandbox(self, mode: &str) -> Log {
        self.event("sandbox/mode", json!({ "mode": mode }))
    }
    pub(crate) fn preset(self, preset: &str) -> Log {
        self.event("permission/preset", json!({ "preset": preset }))
    }
    pub(crate) fn request_header(self, policy: &str) -> Log {
        self.event(
            "request/header",
            json!({
                "provider": "p", "model": "m", "approvalPolicy": policy,
                "sandboxMode": "workspace-write", "tools": []
            }),
        )
    }
    pub(crate) fn checkpoint(self, through: u64) -> Log {
        self.event(
            "checkpoint",
            json!({ "summary": "so far", "throughSeq": through }),
        )
    }

    /// The fold of every event.
    pub(crate) fn fold(&self) -> (SessionState, Vec<Violation>) {
        fold(self.header.clone(), &self.events)
    }

    /// The fold of every event, which must break no rule.
    pub(crate) fn state(&self) -> SessionState {
        let (state, violations) = self.fold();
        assert!(
            violations.is_empty(),
            "unexpected violations: {violations:?}"
        );
        state
    }

    /// The projection with the format's defaults, pretty JSON.
    pub(crate) fn projection_json(&self) -> String {
        projection_json(&self.state(), &Defaults::default())
    }
}

/// A projection as pretty JSON.
pub(crate) fn projection_json(state: &SessionState, defaults: &Defaults) -> String {
    match serde_json::to_string_pretty(&state.projection(defaults)) {
        Ok(text) => text,
        Err(error) => panic!("projection does not serialise: {error}"),
    }
}

impl Log {
    /// A child of this session, seeded with every event, with the format's
    /// defaults.
    pub(crate) fn child(&self, child: &str, prompt: Option<&str>) -> Log {
        let parent = self.state();
        let seed = crate::delegate(
            &parent,
            &self.events,
            id(child),
            prompt,
            &Defaults::default(),
            9_000,
        );
        match seed {
            Ok(seed) => Log::from_seed(seed),
            Err(error) => panic!("delegation refused: {error}"),
        }
    }
}
