//! `sessionlog list`: the sessions of a store, read from their headers only;
//! `--tree` shows children under their parents. A session whose header
//! cannot be read is listed with why: corruption (exit 2), or a log that
//! cannot be opened or read (exit 1, unless one is corrupt).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use sessionlog_schema::SessionHeader;

use crate::exit;
use crate::target::Target;
use crate::terminal::shown;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListedSession<'a> {
    session: &'a str,
    created_at: Option<u64>,
    cwd: Option<&'a str>,
    parent_session: Option<&'a str>,
    seed_length: Option<u64>,
    delegation_depth: Option<u64>,
    error: Option<String>,
}

/// Runs `list`.
pub fn run(store: &Path, tree: bool, json: bool) -> Result<u8> {
    let target = Target::open(store)?;
    let mut code = exit::OK;
    let entries: Vec<(String, Result<SessionHeader, String>)> = match &target {
        Target::File(path) => match sessionlog_store::read_header_as_is(path, None) {
            Ok(read) => vec![(read.header.id.to_string(), Ok(read.header))],
            // A header too damaged to read: listed as a folder lists such
            // a log, under the file's name, with the error.
            Err(error @ sessionlog_store::StoreError::Corrupt { .. }) => {
                code = exit::worst(code, crate::store_exit_code(&error));
                let name = path
                    .file_stem()
                    .map_or_else(String::new, |stem| stem.to_string_lossy().into_owned());
                vec![(name, Err(error.to_string()))]
            }
            Err(error) => return Err(error.into()),
        },
        Target::Store(opened) => {
            let entries = opened.list()?;
            crate::target::warn_if_no_sessions(entries.len(), store);
            entries
                .into_iter()
                .map(|entry| {
                    let header = entry.header.map_err(|error| {
                        code = exit::worst(code, crate::store_exit_code(&error));
                        error.to_string()
                    });
                    (entry.id.to_string(), header)
                })
                .collect()
        }
    };
    if json {
        for (id, header) in &entries {
            let listed = match header {
                Ok(h) => ListedSession {
                    session: id,
                    created_at: Some(h.created_at),
                    cwd: Some(&h.cwd),
                    parent_session: h.parent_session.as_ref().map(|p| p.as_str()),
                    seed_length: Some(h.seed_length),
                    delegation_depth: Some(h.delegation_depth),
                    error: None,
                },
                Err(error) => ListedSession {
                    session: id,
                    created_at: None,
                    cwd: None,
                    parent_session: None,
                    seed_length: None,
                    delegation_depth: None,
                    error: Some(error.clone()),
                },
            };
            crate::terminal::print_json_line(&serde_json::to_string(&listed)?)?;
        }
        return Ok(code);
    }
    if tree {
        print_tree(&entries)?;
    } else {
        for (id, header) in &entries {
            match header {
                Ok(h) => crate::outln!(
                    "{id}\tdepth {}\tparent {}\tseed {}\t{}",
                    h.delegation_depth,
                    h.parent_session.as_ref().map_or("-", |p| p.as_str()),
                    h.seed_length,
                    shown(&h.cwd)
                )?,
                Err(error) => crate::outln!("{id}\tunreadable: {error}")?,
            }
        }
    }
    Ok(code)
}

fn print_tree(entries: &[(String, Result<SessionHeader, String>)]) -> std::io::Result<()> {
    let known: std::collections::BTreeSet<&str> =
        entries.iter().map(|(id, _)| id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut notes: BTreeMap<&str, String> = BTreeMap::new();
    let mut roots = Vec::new();
    for (id, header) in entries {
        match header {
            Ok(h) => match &h.parent_session {
                Some(parent) if known.contains(parent.as_str()) => {
                    children.entry(parent.as_str()).or_default().push(id)
                }
                Some(parent) => {
                    notes.insert(id, format!("  (child of {parent}, not in this store)"));
                    roots.push(id.as_str());
                }
                None => roots.push(id.as_str()),
            },
            Err(error) => {
                notes.insert(id, format!("  (unreadable: {error})"));
                roots.push(id.as_str());
            }
        }
    }
    let tree = Tree { children, notes };
    let mut shown = std::collections::BTreeSet::new();
    for root in roots {
        tree.print(root, "", true, true, &mut shown)?;
    }
    // A session whose parents lead back to it (each header names the next
    // as its parent) is reached from no root, nor is any session under
    // such a cycle: each cycle is shown from a session of its own, marked,
    // with the sessions under it.
    let parents: BTreeMap<&str, &str> = entries
        .iter()
        .filter_map(|(id, header)| {
            let parent = header.as_ref().ok()?.parent_session.as_ref()?;
            Some((id.as_str(), parent.as_str()))
        })
        .collect();
    for (id, _) in entries {
        if shown.contains(id.as_str()) {
            continue;
        }
        // Up the parents until one repeats: that one is in the cycle.
        let mut seen = std::collections::BTreeSet::new();
        let mut at = id.as_str();
        while seen.insert(at) {
            match parents.get(at) {
                Some(parent) => at = parent,
                None => break,
            }
        }
        if shown.insert(at) {
            crate::outln!("{at}  (its parents form a cycle: each names the next as its parent)")?;
            tree.print_children(at, "", &mut shown)?;
        }
    }
    Ok(())
}

/// Children by parent, and what to say beside a session (an orphan, an
/// unreadable header).
struct Tree<'a> {
    children: BTreeMap<&'a str, Vec<&'a str>>,
    notes: BTreeMap<&'a str, String>,
}

impl<'a> Tree<'a> {
    /// Prints `id` and the sessions under it, each once: one met again
    /// (parents that form a cycle) is named, not followed. Depth first with
    /// a stack of its own: a chain of delegations thousands deep must not
    /// overflow the thread's.
    fn print(
        &self,
        id: &'a str,
        prefix: &str,
        last: bool,
        root: bool,
        shown: &mut std::collections::BTreeSet<&'a str>,
    ) -> std::io::Result<()> {
        // Past this many levels the indent stops growing (each line would
        // be longer than the last: output the square of the depth) and the
        // line says its depth instead.
        const MOST_INDENTED: usize = 64;
        let mut stack: Vec<(&'a str, String, bool, bool, usize)> =
            vec![(id, prefix.to_owned(), last, root, 0)];
        while let Some((id, prefix, last, root, depth)) = stack.pop() {
            let again = !shown.insert(id);
            let note = match again {
                true => "  (shown above: its parents form a cycle)",
                false => self.notes.get(id).map_or("", String::as_str),
            };
            let deep = match depth > MOST_INDENTED {
                true => format!("  (depth {depth})"),
                false => String::new(),
            };
            if root {
                crate::outln!("{id}{note}")?;
            } else {
                crate::outln!(
                    "{prefix}{}{id}{note}{deep}",
                    if last { "└── " } else { "├── " }
                )?;
            }
            if again {
                continue;
            }
            let next_prefix = match (root, depth >= MOST_INDENTED) {
                (true, _) => String::new(),
                (false, true) => prefix.clone(),
                (false, false) => format!("{prefix}{}", if last { "    " } else { "│   " }),
            };
            if let Some(kids) = self.children.get(id) {
                // Pushed last first, so that the first is printed first.
                for (index, kid) in kids.iter().enumerate().rev() {
                    stack.push((
                        *kid,
                        next_prefix.clone(),
                        index + 1 == kids.len(),
                        false,
                        depth + 1,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Prints the sessions under `id`, with `prefix` before each.
    fn print_children(
        &self,
        id: &str,
        prefix: &str,
        shown: &mut std::collections::BTreeSet<&'a str>,
    ) -> std::io::Result<()> {
        if let Some(kids) = self.children.get(id) {
            for (index, kid) in kids.iter().enumerate() {
                self.print(kid, prefix, index + 1 == kids.len(), false, shown)?;
            }
        }
        Ok(())
    }
}
