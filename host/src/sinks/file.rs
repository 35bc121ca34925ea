//! `type = "file"`: rows appended to one JSON-lines file, exactly once — the plain target of a
//! pipeline's `[dead_letter]`, and a sink for looking at what a pipeline produces.
//!
//! A writer keeps its rows of a checkpoint interval in memory and, at the barrier, writes them to
//! a staged file `<file>.staged/<checkpoint>-<worker>.jsonl` (synced). Once the checkpoint is
//! durable the committer appends each staged file to the file and removes it. The append is
//! made repeatable by a redo note, `<file>.commit`, written first with the file's length: a
//! commit that finds its note after a crash cuts the file back to that length and appends
//! again, so no row is written twice or lost. Staged files of checkpoints that never completed
//! are removed at the next start.
//!
//! Columns whose field carries the canonical Arrow extension `arrow.json` hold JSON text; they
//! are written as JSON values, not as strings.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use serde::Deserialize;

use crate::Batch;
use crate::pipeline::{BuildContext, SinkConfig};
use crate::runtime::{Committer, Sink, SinkWriter, TableId, WriterContext};

/// The Arrow field metadata key and value that mark a column of JSON text.
pub const EXTENSION_NAME: &str = "ARROW:extension:name";
pub const JSON_EXTENSION: &str = "arrow.json";

/// The options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSink {
    pub name: Option<String>,
    /// The file, relative to the pipeline file; created when missing, appended to.
    pub path: PathBuf,
}

#[async_trait]
impl SinkConfig for FileSink {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn reach(&self, _file: &crate::pipeline::PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach { files: vec![self.path.clone()], ..Default::default() })
    }

    async fn build(&self, _name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Sink>> {
        let path = ctx.base_dir.join(&self.path);
        Ok(Arc::new(JsonLines::open(path)?))
    }
}

/// The sink: its file, and the directory of its staged files beside it.
pub struct JsonLines {
    path: PathBuf,
    staged: PathBuf,
}

/// What a writer hands its committer: the staged file of one worker's checkpoint, if it wrote
/// anything.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Staged {
    staged: PathBuf,
}

/// The redo note of an append in progress.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Note {
    staged: PathBuf,
    length: u64,
}

impl JsonLines {
    pub fn open(path: PathBuf) -> anyhow::Result<JsonLines> {
        let mut staged = path.clone().into_os_string();
        staged.push(".staged");
        let staged = PathBuf::from(staged);
        std::fs::create_dir_all(&staged)
            .with_context(|| format!("cannot create {} for the staged rows of {}", staged.display(), path.display()))?;
        Ok(JsonLines { path, staged })
    }

    /// The file rows are appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn note_path(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".commit");
        PathBuf::from(p)
    }

    /// Append `staged` to the file, once however often it is called.
    fn append(&self, staged: &Path) -> anyhow::Result<bool> {
        let note_path = self.note_path();
        let note: Option<Note> = match std::fs::read(&note_path) {
            Ok(b) => serde_json::from_slice(&b).ok(),
            Err(_) => None,
        };
        if !staged.exists() {
            // Appended and removed by an earlier commit of the same checkpoint.
            return Ok(false);
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot open {}", self.path.display()))?;
        let length = match note {
            // A crash interrupted this append: cut what it wrote and write it again.
            Some(n) if n.staged == staged => {
                file.set_len(n.length)?;
                n.length
            }
            _ => {
                let length = file.metadata()?.len();
                write_synced(&note_path, &serde_json::to_vec(&Note { staged: staged.to_path_buf(), length })?)?;
                length
            }
        };
        let rows = std::fs::read(staged).with_context(|| format!("cannot read {}", staged.display()))?;
        debug_assert_eq!(file.metadata()?.len(), length);
        file.write_all(&rows)?;
        file.sync_all()?;
        std::fs::remove_file(staged)?;
        std::fs::remove_file(&note_path)?;
        Ok(true)
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

#[async_trait]
impl Sink for JsonLines {
    fn claims(&self) -> Option<&str> {
        None
    }

    async fn writer(&self, ctx: WriterContext) -> anyhow::Result<Box<dyn SinkWriter>> {
        Ok(Box::new(Writer { staged: self.staged.clone(), worker: ctx.worker, lines: Vec::new() }))
    }

    fn committer(&self) -> &dyn Committer {
        self
    }

    fn written_tables(&self) -> Vec<String> {
        vec![self.path.display().to_string()]
    }

    async fn check(&self, _schema: Option<&arrow::datatypes::SchemaRef>) -> anyhow::Result<String> {
        Ok(format!("JSON lines appended to {}", self.path.display()))
    }
}

struct Writer {
    staged: PathBuf,
    worker: usize,
    /// The interval's rows, one JSON object per line.
    lines: Vec<u8>,
}

#[async_trait]
impl SinkWriter for Writer {
    async fn write(&mut self, _table: &TableId, batch: &Batch) -> anyhow::Result<()> {
        json_lines(batch, &mut self.lines)
    }

    async fn prepare_commit(&mut self, checkpoint: u64) -> anyhow::Result<serde_json::Value> {
        if self.lines.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        let staged = self.staged.join(format!("{checkpoint}-{}.jsonl", self.worker));
        let lines = std::mem::take(&mut self.lines);
        let path = staged.clone();
        tokio::task::spawn_blocking(move || write_synced(&path, &lines)).await??;
        Ok(serde_json::to_value(Staged { staged })?)
    }
}

#[async_trait]
impl Committer for JsonLines {
    async fn commit(&self, _id: u64, committables: &[serde_json::Value]) -> anyhow::Result<u64> {
        let mut appended = 0;
        for c in committables.iter().filter(|c| !c.is_null()) {
            let s: Staged = serde_json::from_value(c.clone()).context("a file sink's committable")?;
            let this = JsonLines { path: self.path.clone(), staged: self.staged.clone() };
            if tokio::task::spawn_blocking(move || this.append(&s.staged)).await?? {
                appended += 1;
            }
        }
        Ok(appended)
    }

    async fn recover(&self, _committed: &[serde_json::Value]) -> anyhow::Result<()> {
        // The last checkpoint is committed by now: whatever is still staged never completed.
        let staged = self.staged.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            for entry in std::fs::read_dir(&staged)? {
                let p = entry?.path();
                if p.extension().is_some_and(|e| e == "jsonl") {
                    std::fs::remove_file(&p)?;
                }
            }
            Ok(())
        })
        .await?
    }
}

/// Each row of `batch` as a JSON object on its own line (Arrow's JSON form of each value; nulls
/// written out; `arrow.json` columns as JSON values).
pub fn json_lines(batch: &Batch, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let schema = batch.data.schema();
    let json_columns: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| f.metadata().get(EXTENSION_NAME).is_some_and(|v| v == JSON_EXTENSION))
        .map(|f| f.name().as_str())
        .collect();
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::JsonArray>(Vec::new());
    writer.write(&batch.data)?;
    writer.finish()?;
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(&writer.into_inner())?;
    for mut row in rows {
        for name in &json_columns {
            if let Some(v) = row.get_mut(*name)
                && let Some(text) = v.as_str()
            {
                *v = serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()));
            }
        }
        serde_json::to_writer(&mut *out, &row)?;
        out.push(b'\n');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(ids: &[i64]) -> Batch {
        let meta = [(EXTENSION_NAME.to_string(), JSON_EXTENSION.to_string())].into();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("row", DataType::Utf8, true).with_metadata(meta),
        ]));
        let rows: Vec<Option<String>> = ids.iter().map(|i| Some(format!("{{\"k\":{i}}}"))).collect();
        Batch::new(
            RecordBatch::try_new(
                schema,
                vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(rows))],
            )
            .unwrap(),
        )
    }

    fn ctx(worker: usize) -> WriterContext {
        WriterContext { worker, run: 1, checkpoint: 1 }
    }

    #[test]
    fn json_columns_are_written_as_json() {
        let mut out = Vec::new();
        json_lines(&batch(&[1, 2]), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "{\"id\":1,\"row\":{\"k\":1}}\n{\"id\":2,\"row\":{\"k\":2}}\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_is_appended_once_however_often_it_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let sink = JsonLines::open(dir.path().join("dead.jsonl")).unwrap();
        let t = TableId::new("t");
        let mut w0 = sink.writer(ctx(0)).await.unwrap();
        let mut w1 = sink.writer(ctx(1)).await.unwrap();
        w0.write(&t, &batch(&[1])).await.unwrap();
        w1.write(&t, &batch(&[2, 3])).await.unwrap();
        let c = vec![w0.prepare_commit(1).await.unwrap(), w1.prepare_commit(1).await.unwrap()];
        assert_eq!(sink.commit(1, &c).await.unwrap(), 2);
        assert_eq!(sink.commit(1, &c).await.unwrap(), 0, "a second commit appends nothing");
        sink.recover(&c).await.unwrap();
        let text = std::fs::read_to_string(sink.path()).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_cut_short_by_a_crash_is_redone_not_doubled() {
        let dir = tempfile::tempdir().unwrap();
        let sink = JsonLines::open(dir.path().join("dead.jsonl")).unwrap();
        let t = TableId::new("t");
        let mut w = sink.writer(ctx(0)).await.unwrap();
        w.write(&t, &batch(&[1])).await.unwrap();
        let first = vec![w.prepare_commit(1).await.unwrap()];
        sink.commit(1, &first).await.unwrap();
        w.write(&t, &batch(&[2, 3])).await.unwrap();
        let second = vec![w.prepare_commit(2).await.unwrap()];
        // The crash: the note is written and half of the rows appended, nothing removed.
        let staged: Staged = serde_json::from_value(second[0].clone()).unwrap();
        let before = std::fs::metadata(sink.path()).unwrap().len();
        write_synced(
            &sink.note_path(),
            &serde_json::to_vec(&Note { staged: staged.staged.clone(), length: before }).unwrap(),
        )
        .unwrap();
        let rows = std::fs::read(&staged.staged).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(sink.path()).unwrap();
        f.write_all(&rows[..rows.len() / 2]).unwrap();
        drop(f);
        // The restart commits the last checkpoint again.
        assert_eq!(sink.commit(2, &second).await.unwrap(), 1);
        let text = std::fs::read_to_string(sink.path()).unwrap();
        let ids: Vec<i64> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, vec![1, 2, 3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_of_a_checkpoint_that_never_completed_are_dropped_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let sink = JsonLines::open(dir.path().join("dead.jsonl")).unwrap();
        let mut w = sink.writer(ctx(0)).await.unwrap();
        w.write(&TableId::new("t"), &batch(&[1])).await.unwrap();
        let c = w.prepare_commit(1).await.unwrap();
        sink.recover(&[]).await.unwrap();
        assert_eq!(sink.commit(1, &[c]).await.unwrap(), 0);
        assert!(!sink.path().exists() || std::fs::read_to_string(sink.path()).unwrap().is_empty());
    }
}
