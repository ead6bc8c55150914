//! `sessionlog migrate` and `diff`: copy every session between backends and
//! prove the copy identical; compare two stores.

use std::path::Path;

use anyhow::Result;
use sessionlog_store::{
    diff as diff_stores, migrate as migrate_stores, MigratePhase, MigrateProgress, Store,
};

use crate::output::outln;
use crate::target::require_sessions;
use crate::{exit, warn};

/// Runs `migrate`.
pub fn migrate(from: &Path, to: &Path, json: bool, allow_empty: bool, quiet: bool) -> Result<u8> {
    let source = Store::open(from)?;
    require_sessions(&source.ids()?, from, allow_empty)?;
    let destination = Store::create(to)?;
    let bar = crate::progress::bar(quiet, "migrate");
    let mut progress = |update: MigrateProgress| {
        bar.set_prefix(match update.phase {
            MigratePhase::Verify => "migrate: read and verify",
            MigratePhase::Copy => "migrate: publish",
            MigratePhase::Compare => "migrate: compare",
        });
        crate::progress::update(&bar, update.done as u64, update.total as u64)
    };
    let report = migrate_stores(&source, &destination, &mut progress)?;
    bar.finish_and_clear();
    for warning in &report.warnings {
        warn(warning);
    }
    if json {
        let warnings: Vec<String> = report.warnings.iter().map(ToString::to_string).collect();
        let json = serde_json::json!({
            "sessions": report.sessions,
            "events": report.events,
            "warnings": warnings,
            "identical": true,
        });
        outln!("{json}");
    } else {
        outln!(
            "migrated {} sessions ({} events) from {} to {}; the copy is identical",
            report.sessions,
            report.events,
            from.display(),
            to.display()
        );
    }
    Ok(exit::OK)
}

/// Runs `diff`.
pub fn diff(a: &Path, b: &Path, json: bool) -> Result<u8> {
    let left = Store::open(a)?;
    let right = Store::open(b)?;
    match diff_stores(&left, &right)? {
        None => {
            if json {
                outln!("{{\"identical\":true}}");
            } else {
                outln!("identical");
            }
            Ok(exit::OK)
        }
        Some(difference) => {
            if json {
                let json = serde_json::json!({
                    "identical": false,
                    "session": difference.session.as_ref().map(|s| s.as_str()),
                    "seq": difference.seq,
                    "field": difference.field,
                    "left": difference.left,
                    "right": difference.right,
                    "message": difference.to_string(),
                });
                outln!("{json}");
            } else {
                outln!("{difference}");
            }
            Ok(exit::USAGE)
        }
    }
}
