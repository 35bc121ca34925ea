//! A tenant's grants, checked against a pipeline before it runs: the connections, Doris tables,
//! files and plugins each entry reaches (see [`crate::pipeline::Reach`]), and the quotas.

use std::path::{Path, PathBuf};

use crate::pipeline::{PipelineFile, Reach};
use crate::wasm::PluginLimits;

use super::config::TenantConfig;

/// A table pattern of a grant: `db.table`, `db.*`, `db.prefix_*`, `*`.
#[derive(Debug, Clone)]
pub struct Pattern {
    db: regex::Regex,
    table: regex::Regex,
}

impl Pattern {
    pub fn parse(p: &str) -> Option<Pattern> {
        let (db, table) = if p == "*" { ("*", "*") } else { p.split_once('.')? };
        let part = |s: &str| -> Option<regex::Regex> {
            if s.is_empty() || s.contains('.') {
                return None;
            }
            let re = regex::escape(s).replace(r"\*", ".*");
            regex::Regex::new(&format!("^{re}$")).ok()
        };
        Some(Pattern { db: part(db)?, table: part(table)? })
    }

    /// Whether `db.table` is granted; a `db.*` reach (a sink naming its tables as rows come)
    /// needs a pattern of the database, and each of its tables is checked as it is written.
    fn allows(&self, target: &str) -> bool {
        let Some((db, table)) = target.split_once('.') else { return false };
        self.db.is_match(db) && (table == "*" || self.table.is_match(table))
    }
}

/// The tables a tenant may read and write.
#[derive(Debug, Clone)]
pub struct Tables {
    read: Vec<Pattern>,
    write: Vec<Pattern>,
}

impl Tables {
    pub fn of(t: &TenantConfig) -> Tables {
        let all = |ps: &[String]| ps.iter().filter_map(|p| Pattern::parse(p)).collect();
        Tables { read: all(&t.read), write: all(&t.write) }
    }

    pub fn may_read(&self, table: &str) -> bool {
        self.read.iter().any(|p| p.allows(table))
    }

    pub fn may_write(&self, table: &str) -> bool {
        self.write.iter().any(|p| p.allows(table))
    }
}

/// What a grant refuses: the entry (`file:line: section`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial(pub String);

/// Check every entry of `p` against tenant `name`'s grants; `file` names the pipeline in the
/// messages, `plugin_dirs` are where its plugins may come from.
pub fn check(
    name: &str,
    tenant: &TenantConfig,
    p: &PipelineFile,
    file: &Path,
    plugin_dirs: &[PathBuf],
) -> Result<(), Vec<Denial>> {
    let tables = Tables::of(tenant);
    let cap = tenant.plugin_limits();
    let mut refused = Vec::new();
    let at = |section: &str, kind: &str, line: usize| format!("{}:{line}: {section} (type \"{kind}\")", file.display());
    let mut entries: Vec<(&str, &str, usize, Result<Reach, String>)> = Vec::new();
    for e in &p.source {
        entries.push(("source", e.kind, e.line, e.config.reach(p)));
    }
    for e in &p.transform {
        entries.push(("transform", e.kind, e.line, e.config.reach(p)));
        if let Some(limits) = e.config.plugin_limits()
            && let Some(why) = over_cap(limits, &cap, name)
        {
            refused.push(Denial(format!("{}: {why}", at("transform", e.kind, e.line))));
        }
    }
    for e in &p.sink {
        entries.push(("sink", e.kind, e.line, e.config.reach(p)));
    }
    if let Some(e) = &p.dead_letter {
        entries.push(("dead_letter", e.kind, e.line, e.config.reach(p)));
    }
    for (section, kind, line, reach) in entries {
        let at = at(section, kind, line);
        let reach = match reach {
            Ok(r) => r,
            Err(why) => {
                refused.push(Denial(format!("{at}: {why}")));
                continue;
            }
        };
        for c in &reach.connections {
            if !tenant.connections.contains(c) {
                refused.push(Denial(format!("{at}: connection `{c}` is not granted to tenant `{name}`")));
            }
        }
        for t in &reach.reads {
            if !tables.may_read(t) {
                refused.push(Denial(format!("{at}: tenant `{name}` may not read `{t}`")));
            }
        }
        for t in &reach.writes {
            if !tables.may_write(t) {
                refused.push(Denial(format!("{at}: tenant `{name}` may not write `{t}`")));
            }
        }
        for f in &reach.files {
            let verb = if section == "source" { "reads" } else { "writes" };
            refused.push(Denial(format!(
                "{at}: {verb} the server's file {f:?}; tenants read and write only through the connections they are granted"
            )));
        }
        for plugin in &reach.plugins {
            let bare = plugin.components().count() == 1 && plugin.extension().is_some_and(|e| e == "wasm");
            if !bare {
                refused.push(Denial(format!(
                    "{at}: plugin {plugin:?}: name a prebuilt `.wasm` component by its file name (upload it with `PUT /api/v1/plugins/<name>.wasm`)"
                )));
            } else if !plugin_dirs.iter().any(|d| d.join(plugin).is_file()) {
                refused.push(Denial(format!(
                    "{at}: there is no plugin `{}`; upload it with `PUT /api/v1/plugins/{}`",
                    plugin.display(),
                    plugin.display()
                )));
            }
        }
    }
    if let Some(c) = &p.cluster
        && !tenant.clusters.iter().any(|granted| store_under(&c.store, granted))
    {
        let granted = if tenant.clusters.is_empty() { "none".to_string() } else { tenant.clusters.join(", ") };
        refused.push(Denial(format!(
            "{}: [cluster] keeps its checkpoints in `{}`, which is not under a store granted to tenant `{name}` (its `clusters`: {granted})",
            file.display(),
            c.store
        )));
    }
    if refused.is_empty() { Ok(()) } else { Err(refused) }
}

/// Whether object store `store` is `granted` or under it (`s3://b/p` is under `s3://b`, not
/// under `s3://b/pi`).
fn store_under(store: &str, granted: &str) -> bool {
    let granted = granted.trim_end_matches('/');
    let store = store.trim_end_matches('/');
    store == granted || store.strip_prefix(granted).is_some_and(|rest| rest.starts_with('/'))
}

/// Limits a pipeline asks for beyond the tenant's (limits left at their defaults are lowered to
/// the tenant's instead).
fn over_cap(asked: &PluginLimits, cap: &PluginLimits, tenant: &str) -> Option<String> {
    if *asked == PluginLimits::default() {
        return None;
    }
    if asked.memory > cap.memory {
        return Some(format!(
            "limits.memory: {} is above tenant `{tenant}`'s plugin_memory ({})",
            bytesize::ByteSize(asked.memory).display().si(),
            bytesize::ByteSize(cap.memory).display().si()
        ));
    }
    if asked.timeout > cap.timeout {
        return Some(format!(
            "limits.timeout: {} is above tenant `{tenant}`'s plugin_timeout ({})",
            humantime::format_duration(asked.timeout),
            humantime::format_duration(cap.timeout)
        ));
    }
    match (asked.fuel, cap.fuel) {
        (Some(a), Some(c)) if a > c => Some(format!("limits.fuel: {a} is above tenant `{tenant}`'s plugin_fuel ({c})")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_store_is_granted_with_the_stores_under_it() {
        assert!(store_under("s3://b/tenants/alpha", "s3://b/tenants/alpha"));
        assert!(store_under("s3://b/tenants/alpha/p1", "s3://b/tenants/alpha/"));
        assert!(!store_under("s3://b/tenants/alphabet", "s3://b/tenants/alpha"));
        assert!(!store_under("s3://b/tenants", "s3://b/tenants/alpha"));
        assert!(!store_under("file:///srv/x", "s3://b"));
    }

    #[test]
    fn patterns_match_whole_names() {
        let p = Pattern::parse("sales.orders_*").unwrap();
        assert!(p.allows("sales.orders_2024"));
        assert!(!p.allows("sales.order"));
        assert!(!p.allows("salesx.orders_1"));
        assert!(p.allows("sales.*"), "a sink naming its tables as rows come is checked table by table");
        let db = Pattern::parse("sales.*").unwrap();
        assert!(db.allows("sales.*") && db.allows("sales.x"));
        assert!(Pattern::parse("*").unwrap().allows("any.thing"));
        assert!(Pattern::parse("sales").is_none());
        assert!(Pattern::parse("a.b.c").is_none());
    }
}
