//! `type = "file"`: rows appended to one JSON-lines file, exactly once — the plain target of a
//! pipeline's `[dead_letter]`, and a sink for looking at what a pipeline produces.
//!
//! A writer keeps its rows of a checkpoint interval in memory and, at the barrier, writes them to
//! a staged file `<file>.staged/<run id>-<checkpoint>-<worker>.jsonl` (synced; the run id is
//! the state dir's pipeline id, so the runs of `sluice dlq replay` stage apart from the
//! pipeline's). Once the checkpoint is durable the committer appends each staged file to the
//! file and removes it. The append is made repeatable by a redo note, `<file>.commit`, written
//! first with the file's length: whoever finds a note (a commit after a crash, the next append
//! of any run) cuts the file back to that length and appends that staged file again, so no row
//! is written twice or lost. A run's staged files of checkpoints that never completed are
//! removed at its next start.
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

pub use crate::runtime::json::{EXTENSION_NAME, JSON_EXTENSION, json_objects};

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

    fn letter_store(&self) -> Option<crate::pipeline::LetterStore<'_>> {
        Some(crate::pipeline::LetterStore::File(&self.path))
    }

    async fn build(&self, _name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Sink>> {
        let path = ctx.base_dir.join(&self.path);
        Ok(Arc::new(JsonLines::open(path, &ctx.pipeline_id)?))
    }
}

/// The sink: its file, and the directory of its staged files beside it.
#[derive(Clone)]
pub struct JsonLines {
    path: PathBuf,
    staged: PathBuf,
    /// The run's id, which its staged files' names start with.
    owner: String,
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
    pub fn open(path: PathBuf, owner: &str) -> anyhow::Result<JsonLines> {
        let mut staged = path.clone().into_os_string();
        staged.push(".staged");
        let staged = PathBuf::from(staged);
        std::fs::create_dir_all(&staged)
            .with_context(|| format!("cannot create {} for the staged rows of {}", staged.display(), path.display()))?;
        Ok(JsonLines { path, staged, owner: owner.to_string() })
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

    fn read_note(&self) -> Option<Note> {
        serde_json::from_slice(&std::fs::read(self.note_path()).ok()?).ok()
    }

    /// Append `staged` to the file, once however often it is called.
    fn append(&self, staged: &Path) -> anyhow::Result<bool> {
        if let Some(note) = self.read_note() {
            // An append under way when a run crashed: finish it first.
            let again = self.redo(&note)?;
            if note.staged == staged {
                return Ok(again);
            }
        }
        if !staged.exists() {
            // Appended and removed by an earlier commit of the same checkpoint.
            return Ok(false);
        }
        let length = self.open_file()?.metadata()?.len();
        write_synced(&self.note_path(), &serde_json::to_vec(&Note { staged: staged.to_path_buf(), length })?)?;
        self.redo(&Note { staged: staged.to_path_buf(), length })
    }

    /// The append of `note`: the file cut back to its length, its staged file appended and
    /// removed, the note removed. Whether there was anything to append.
    fn redo(&self, note: &Note) -> anyhow::Result<bool> {
        let appended = note.staged.exists();
        if appended {
            let rows = std::fs::read(&note.staged).with_context(|| format!("cannot read {}", note.staged.display()))?;
            let mut file = self.open_file()?;
            file.set_len(note.length)?;
            file.write_all(&rows)?;
            file.sync_all()?;
            std::fs::remove_file(&note.staged)?;
        }
        std::fs::remove_file(self.note_path())?;
        Ok(appended)
    }

    fn open_file(&self) -> anyhow::Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot open {}", self.path.display()))
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
        let prefix = format!("{}-", self.owner);
        Ok(Box::new(Writer { staged: self.staged.clone(), prefix, worker: ctx.worker, lines: Vec::new() }))
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
    /// The run's id and a dash.
    prefix: String,
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
        let staged = self.staged.join(format!("{}{checkpoint}-{}.jsonl", self.prefix, self.worker));
        let lines = std::mem::take(&mut self.lines);
        let path = staged.clone();
        tokio::task::spawn_blocking(move || write_synced(&path, &lines)).await??;
        Ok(serde_json::to_value(Staged { staged })?)
    }
}

#[async_trait]
impl Committer for JsonLines {
    async fn commit(&self, _id: u64, committables: &[serde_json::Value]) -> anyhow::Result<u64> {
        let staged = committables
            .iter()
            .filter(|c| !c.is_null())
            .map(|c| Ok(serde_json::from_value::<Staged>(c.clone()).context("a file sink's committable")?.staged))
            .collect::<anyhow::Result<Vec<PathBuf>>>()?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            staged.iter().try_fold(0, |appended, s| Ok(appended + u64::from(this.append(s)?)))
        })
        .await?
    }

    async fn recover(&self, _committed: &[serde_json::Value]) -> anyhow::Result<()> {
        // The last checkpoint is committed by now: whatever this run still has staged never
        // completed. An append another run left unfinished is finished.
        let this = self.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            if let Some(note) = this.read_note() {
                this.redo(&note)?;
            }
            let prefix = format!("{}-", this.owner);
            for entry in std::fs::read_dir(&this.staged)? {
                let p = entry?.path();
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if name.starts_with(&prefix) && name.ends_with(".jsonl") {
                    std::fs::remove_file(&p)?;
                }
            }
            Ok(())
        })
        .await?
    }
}

/// Each row of `batch` as a JSON object on its own line (see [`json_objects`]).
pub fn json_lines(batch: &Batch, out: &mut Vec<u8>) -> anyhow::Result<()> {
    for row in json_objects(&batch.data)? {
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

    /// The `id` of each row in the sink's file.
    fn ids(sink: &JsonLines) -> Vec<i64> {
        let text = std::fs::read_to_string(sink.path()).unwrap();
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_i64().unwrap()).collect()
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
        let sink = JsonLines::open(dir.path().join("dead.jsonl"), "run1").unwrap();
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
        let sink = JsonLines::open(dir.path().join("dead.jsonl"), "run1").unwrap();
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
        assert_eq!(ids(&sink), vec![1, 2, 3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_runs_unfinished_append_is_finished_before_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let pipeline = JsonLines::open(dir.path().join("dead.jsonl"), "run1").unwrap();
        let replay = JsonLines::open(dir.path().join("dead.jsonl"), "run2").unwrap();
        let t = TableId::new("t");
        let mut w = pipeline.writer(ctx(0)).await.unwrap();
        w.write(&t, &batch(&[1, 2])).await.unwrap();
        let interrupted = vec![w.prepare_commit(1).await.unwrap()];
        // The pipeline's crash mid-append: its note written, a part of its rows appended.
        let staged: Staged = serde_json::from_value(interrupted[0].clone()).unwrap();
        write_synced(
            &pipeline.note_path(),
            &serde_json::to_vec(&Note { staged: staged.staged.clone(), length: 0 }).unwrap(),
        )
        .unwrap();
        std::fs::write(pipeline.path(), &std::fs::read(&staged.staged).unwrap()[..5]).unwrap();
        // A replay's run starts (and leaves the pipeline's staged rows alone), then appends.
        replay.recover(&[]).await.unwrap();
        let mut r = replay.writer(ctx(0)).await.unwrap();
        r.write(&t, &batch(&[3])).await.unwrap();
        let own = vec![r.prepare_commit(1).await.unwrap()];
        assert_eq!(replay.commit(1, &own).await.unwrap(), 1);
        // The pipeline's restart commits its checkpoint again: nothing twice.
        assert_eq!(pipeline.commit(1, &interrupted).await.unwrap(), 0);
        assert_eq!(ids(&pipeline), vec![1, 2, 3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_of_a_checkpoint_that_never_completed_are_dropped_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let sink = JsonLines::open(dir.path().join("dead.jsonl"), "run1").unwrap();
        let mut w = sink.writer(ctx(0)).await.unwrap();
        w.write(&TableId::new("t"), &batch(&[1])).await.unwrap();
        let c = w.prepare_commit(1).await.unwrap();
        sink.recover(&[]).await.unwrap();
        assert_eq!(sink.commit(1, &[c]).await.unwrap(), 0);
        assert!(!sink.path().exists() || std::fs::read_to_string(sink.path()).unwrap().is_empty());
    }
}
