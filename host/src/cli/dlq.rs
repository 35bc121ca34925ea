//! `sluice dlq show <pipeline>`: the rows a pipeline set aside in its `[dead_letter]` target, with
//! where and why each was refused.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::pipeline::{PipelineFile, load_file};
use crate::sinks::doris::DorisSink;
use crate::sinks::file::FileSink;

/// The columns `show` reads, in the order it prints them.
const COLUMNS: [&str; 12] = [
    "time",
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
    let letters = tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(read_letters(
        &file,
        &mut pipeline,
        limit,
    ))?;
    let mut stages = std::collections::BTreeMap::<String, usize>::new();
    for l in &letters {
        *stages.entry(text(&l["stage"])).or_default() += 1;
        if json {
            println!("{l}");
        } else {
            println!(
                "{}  checkpoint {} worker {} #{}  {} {} ({})  {}: {}  {} {}",
                text(&l["time"]),
                text(&l["checkpoint"]),
                text(&l["worker"]),
                text(&l["seq"]),
                text(&l["stage"]),
                text(&l["component"]),
                text(&l["refused_by"]),
                text(&l["source_table"]),
                text(&l["reason"]),
                text(&l["row_kind"]),
                l["record"],
            );
        }
    }
    let by: Vec<String> = stages.iter().map(|(s, n)| format!("{n} {s}")).collect();
    eprintln!(
        "{} dead letters{}",
        letters.len(),
        if by.is_empty() { String::new() } else { format!(" ({})", by.join(", ")) }
    );
    Ok(())
}

fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The pipeline's dead letters as JSON objects of [`COLUMNS`], oldest first.
async fn read_letters(
    file: &Path,
    pipeline: &mut PipelineFile,
    limit: Option<usize>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let entry = pipeline.dead_letter.clone().with_context(|| {
        format!("{}: the pipeline has no [dead_letter] section, so it sets no rows aside", file.display())
    })?;
    let limit = limit.unwrap_or(usize::MAX);
    if let Some(f) = entry.config.as_any().downcast_ref::<FileSink>() {
        let path = file.parent().map(Path::to_path_buf).unwrap_or_default().join(&f.path);
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
    let d = entry.config.as_any().downcast_ref::<DorisSink>().context("a [dead_letter] is a file or a Doris table")?;
    let target = d.table.clone().context("dead_letter.table: set the `db.table` of the dead letters")?;
    let (db, table) = target.split_once('.').context("dead_letter.table: expected `db.table`")?;
    let _embedded = super::run::connect(file, pipeline).await?;
    let (name, section) = pipeline.doris(d.connection.as_deref()).map_err(|e| anyhow::anyhow!(e))?;
    let conn = crate::doris::DorisConnection::open(name, section).await?;
    let quote = crate::doris::scan::quote;
    let limit = if limit == usize::MAX { String::new() } else { format!(" LIMIT {limit}") };
    let sql = format!(
        "SELECT {} FROM {}.{} WHERE pipeline = '{}' ORDER BY checkpoint, worker, seq{limit}",
        COLUMNS.map(quote).join(", "),
        quote(db),
        quote(table),
        pipeline.pipeline.name
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
