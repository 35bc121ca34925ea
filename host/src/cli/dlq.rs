//! `sluice dlq show|replay <pipeline>`: the rows a pipeline set aside in its `[dead_letter]`
//! target, with where and why each was refused; and sending chosen ones back through the
//! pipeline after a fix.
//!
//! A replay runs the pipeline from the entry that refused the letters on (the transform, or
//! the sinks), with the letters as its source, in a state dir of its own under the pipeline's
//! (`replay/<component>/<round>`): the letters delivered are that source's position, so a
//! replay is exactly-once like any run, and a letter in a completed replay checkpoint is marked
//! replayed and never sent again. Rows refused again become new dead letters, of the pipeline
//! `<name>.replay`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::pipeline::{
    Entry, LetterStore, PipelineFile, Placement, Replay, SinkConfig, load_file, prepare_replay, state_dir_of,
};
use crate::runtime::{Named, RunOptions};
use crate::sources::letters::{Letter, LetterSource, Replayed, field_text, key_of};
use crate::state::{StateDir, StateError, read_checkpoint};

/// The name of a replay's source, in its checkpoints.
const LETTERS: &str = "dead_letters";

/// The columns `show` reads, in the order it prints them.
const COLUMNS: [&str; 13] = [
    "time",
    "pipeline",
    "checkpoint",
    "worker",
    "seq",
    "stage",
    "component",
    "refused_by",
    "source_table",
    "reason",
    "row_kind",
    "record",
    "columns",
];

/// `sluice dlq show`: every dead letter of the pipeline in `file` (the first `limit`), oldest
/// first; as stored (one JSON object per line) with `json`.
pub fn show(file: PathBuf, limit: Option<usize>, json: bool) -> anyhow::Result<()> {
    let mut pipeline = load_file(&file)?;
    let replayed = History::of(&state_dir_of(&file, &pipeline))?.replayed;
    let letters = tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
        let store = pipeline.dead_letter.as_ref().and_then(|d| d.config.letter_store());
        let in_doris = matches!(store, Some(LetterStore::Doris { .. }));
        let embedded = if in_doris { super::run::connect(&file, &mut pipeline).await? } else { None };
        let letters = read_letters(&file, &pipeline, limit).await;
        if let Some(h) = embedded {
            h.stop().await;
        }
        letters
    })?;
    let mut stages = std::collections::BTreeMap::<String, usize>::new();
    let count = letters.len();
    for mut l in letters {
        *stages.entry(field_text(&l["stage"])).or_default() += 1;
        let again = replayed.contains(&key_of(&l));
        if json {
            l["replayed"] = again.into();
            println!("{l}");
        } else {
            println!(
                "{}  {} checkpoint {} worker {} #{}  {} {} ({})  {}: {}  {} {}{}",
                field_text(&l["time"]),
                field_text(&l["pipeline"]),
                field_text(&l["checkpoint"]),
                field_text(&l["worker"]),
                field_text(&l["seq"]),
                field_text(&l["stage"]),
                field_text(&l["component"]),
                field_text(&l["refused_by"]),
                field_text(&l["source_table"]),
                field_text(&l["reason"]),
                field_text(&l["row_kind"]),
                l["record"],
                if again { "  (replayed)" } else { "" },
            );
        }
    }
    let by: Vec<String> = stages.iter().map(|(s, n)| format!("{n} {s}")).collect();
    eprintln!("{count} dead letters{}", if by.is_empty() { String::new() } else { format!(" ({})", by.join(", ")) });
    Ok(())
}

/// The pipeline's dead letters as JSON objects of [`COLUMNS`], oldest first.
/// A Doris target must be reachable (`connect` run).
async fn read_letters(
    file: &Path,
    pipeline: &PipelineFile,
    limit: Option<usize>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let entry = pipeline.dead_letter.clone().with_context(|| {
        format!("{}: the pipeline has no [dead_letter] section, so it sets no rows aside", file.display())
    })?;
    let limit = limit.unwrap_or(usize::MAX);
    let store = entry.config.letter_store();
    if let Some(LetterStore::File(letters)) = store {
        let path = file.parent().map(Path::to_path_buf).unwrap_or_default().join(letters);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        return text
            .lines()
            .take(limit)
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).with_context(|| format!("{}:{}: not a dead letter", path.display(), i + 1))
            })
            .collect();
    }
    let Some(LetterStore::Doris { table, connection }) = store else {
        anyhow::bail!("a [dead_letter] is a file or a Doris table");
    };
    let target = table.context("dead_letter.table: set the `db.table` of the dead letters")?;
    let (db, table) = target.split_once('.').context("dead_letter.table: expected `db.table`")?;
    let (name, section) = pipeline.doris(connection).map_err(|e| anyhow::anyhow!(e))?;
    let conn = crate::doris::DorisConnection::open(name, section).await?;
    let quote = crate::doris::scan::quote;
    let limit = if limit == usize::MAX { String::new() } else { format!(" LIMIT {limit}") };
    let sql = format!(
        "SELECT {} FROM {}.{} WHERE pipeline IN ('{name}', '{name}.replay') ORDER BY pipeline, checkpoint, worker, seq{limit}",
        COLUMNS.map(quote).join(", "),
        quote(db),
        quote(table),
        name = pipeline.pipeline.name
    );
    let (_, rows) = match conn.client.query(db, &sql).await {
        Ok(r) => r,
        Err(crate::doris::DorisError::Table { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading the dead letters in `{target}`")),
    };
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut obj = serde_json::Map::new();
            for (c, v) in COLUMNS.iter().zip(row) {
                let v = match *c {
                    "record" => serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v)),
                    "checkpoint" | "worker" | "seq" => {
                        v.parse::<i64>().map(Into::into).unwrap_or(serde_json::Value::String(v))
                    }
                    _ => serde_json::Value::String(v),
                };
                obj.insert(c.to_string(), v);
            }
            serde_json::Value::Object(obj)
        })
        .collect())
}

/// Which dead letters `sluice dlq replay` sends back.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    /// Every letter not replayed yet.
    pub all: bool,
    /// Those refused by this transform or sink (`component`).
    pub component: Option<String>,
    /// Those of this stage: `plugin`, `route` or `doris`.
    pub stage: Option<String>,
    /// Those of this source table.
    pub table: Option<String>,
    /// These letters, each as `pipeline/checkpoint/worker/seq`.
    pub letters: Vec<String>,
}

impl Selection {
    fn is_empty(&self) -> bool {
        !self.all && self.component.is_none() && self.stage.is_none() && self.table.is_none() && self.letters.is_empty()
    }

    fn takes(&self, l: &serde_json::Value) -> bool {
        let is = |k: &str, want: &Option<String>| want.as_ref().is_none_or(|w| field_text(&l[k]) == *w);
        is("component", &self.component)
            && is("stage", &self.stage)
            && is("source_table", &self.table)
            && (self.letters.is_empty() || self.letters.contains(&key_of(l)))
    }
}

/// `sluice dlq replay`: send the chosen dead letters back through the pipeline in `file`, from
/// the entry that refused each on. The pipeline must not be running.
pub fn replay(file: PathBuf, selection: Selection, quiet: bool) -> anyhow::Result<()> {
    if selection.is_empty() {
        anyhow::bail!(
            "say which dead letters to replay: --all, or --component, --stage, --table, --letter (see `sluice dlq show`)"
        );
    }
    let mut pipeline = load_file(&file)?;
    let state_dir = state_dir_of(&file, &pipeline);
    // The pipeline's own lock, held throughout: a replay shares its targets and dead letters.
    let _lock = StateDir::open(&state_dir).map_err(|e| match e {
        StateError::Locked { .. } => anyhow::anyhow!(
            "{}: the pipeline is running (its state dir {} is in use); stop it, then replay its dead letters",
            file.display(),
            state_dir.display()
        ),
        e => e.into(),
    })?;
    let history = History::of(&state_dir)?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
        let embedded = super::run::connect(&file, &mut pipeline).await?;
        let result = replay_chosen(&file, &pipeline, &state_dir, &selection, &history, quiet).await;
        if let Some(h) = embedded {
            h.stop().await;
        }
        result
    })
}

async fn replay_chosen(
    file: &Path,
    pipeline: &PipelineFile,
    state_dir: &Path,
    selection: &Selection,
    history: &History,
    quiet: bool,
) -> anyhow::Result<()> {
    let chosen: Vec<serde_json::Value> = read_letters(file, pipeline, None)
        .await?
        .into_iter()
        .filter(|l| selection.takes(l) && !history.replayed.contains(&key_of(l)))
        .collect();
    // The letters of each refusing entry, in their order.
    let mut by_component: Vec<(String, Vec<Letter>)> = Vec::new();
    let mut skipped = 0;
    for l in &chosen {
        let component = field_text(&l["component"]);
        let known = pipeline.transform.iter().map(|t| &t.name).chain(pipeline.sink.iter().map(|s| &s.name));
        let letter = if known.into_iter().any(|n| *n == component) {
            Letter::read(l)
        } else {
            Err((
                key_of(l),
                format!("it was refused by `{component}`, which is not a transform or sink of the pipeline"),
            ))
        };
        match letter {
            Ok(letter) => match by_component.iter_mut().find(|(c, _)| *c == component) {
                Some((_, letters)) => letters.push(letter),
                None => by_component.push((component, vec![letter])),
            },
            Err((key, why)) => {
                skipped += 1;
                eprintln!("dead letter {key} is not replayed: {why}");
            }
        }
    }
    if by_component.is_empty() {
        eprintln!("no dead letters to replay ({} chosen, {skipped} cannot be replayed)", chosen.len());
        return Ok(());
    }
    for (component, letters) in by_component {
        let n = letters.len();
        let dir = history.next_round(state_dir, &component);
        let id = StateDir::open(&dir)?.pipeline_id()?;
        let mut copy = pipeline.clone();
        copy.pipeline.parallelism = 1;
        for entry in copy.sink.iter_mut().chain(copy.dead_letter.iter_mut()) {
            own_labels(entry, &id);
        }
        let replay = Replay {
            name: format!("{}.replay", pipeline.pipeline.name),
            source: Named { name: LETTERS.into(), component: Arc::new(LetterSource::new(LETTERS, letters)) },
            from_transform: pipeline.transform.iter().any(|t| t.name == component).then(|| component.clone()),
        };
        let placement = Placement {
            cluster: None,
            state_dir: dir.clone(),
            base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
            confinement: None,
        };
        let prepared = prepare_replay(file, copy, placement, replay).await?;
        let (_stop, stop) = tokio::sync::watch::channel(false);
        let opts = RunOptions { quiet, ..Default::default() };
        let report = crate::runtime::run(&prepared, &opts, stop).await?;
        let s = &prepared.stats;
        use std::sync::atomic::Ordering::Relaxed;
        eprintln!(
            "replayed {n} dead letters refused by `{component}` (checkpoint {} of {}): {} rows written, {} dead letters again",
            report.checkpoint,
            dir.display(),
            s.rows_written.load(Relaxed),
            s.dead_letters.load(Relaxed),
        );
    }
    if skipped > 0 {
        eprintln!("{skipped} chosen dead letters cannot be replayed (see above)");
    }
    Ok(())
}

/// What earlier replays of a pipeline did: the letters a completed replay checkpoint delivered
/// (`pipeline/checkpoint/worker/seq`), and where the next replay of each entry's letters runs.
struct History {
    replayed: BTreeSet<String>,
    /// Per refusing entry, the state dir of its next replay: the last round's while it has not
    /// finished (a replay stopped midway goes on), else a new one.
    next: BTreeMap<String, PathBuf>,
}

impl History {
    fn of(state_dir: &Path) -> anyhow::Result<History> {
        let mut history = History { replayed: BTreeSet::new(), next: BTreeMap::new() };
        let replay = state_dir.join("replay");
        let components = match std::fs::read_dir(&replay) {
            Ok(e) => e.filter_map(|e| e.ok()).collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(history),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", replay.display())),
        };
        for component in components {
            let (dir, name) = (component.path(), component.file_name().to_string_lossy().into_owned());
            let mut last = None;
            for round in rounds(&dir)? {
                let cp = read_checkpoint(&dir.join(round.to_string()))?;
                for position in cp.iter().flat_map(|cp| cp.sources.get(LETTERS)).flatten() {
                    let r: Replayed = serde_json::from_value(position.clone()).unwrap_or_default();
                    history.replayed.extend(r.replayed);
                }
                let finished = cp.is_some_and(|c| c.finished);
                if last.is_none_or(|(l, _)| round > l) {
                    last = Some((round, finished));
                }
            }
            let next = match last {
                Some((round, true)) => round + 1,
                Some((round, false)) => round,
                None => 1,
            };
            history.next.insert(name, dir.join(next.to_string()));
        }
        Ok(history)
    }

    fn next_round(&self, state_dir: &Path, component: &str) -> PathBuf {
        self.next.get(component).cloned().unwrap_or_else(|| state_dir.join("replay").join(component).join("1"))
    }
}

fn rounds(dir: &Path) -> anyhow::Result<Vec<u64>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
    }
}

/// A sink with labels of its own gets labels a replay's alone ([`SinkConfig::relabeled`]).
fn own_labels(entry: &mut Entry<dyn SinkConfig>, id: &str) {
    if let Some(config) = entry.config.relabeled(id) {
        entry.config = config;
    }
}
