//! The state dir of a pipeline: its identity, its run counter, the journal of every Stream Load
//! label it opens, and its last completed checkpoint. Every write is atomic (write, fsync, rename,
//! fsync the directory), so a crash at any moment leaves either the old or the new file.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of the checkpoint format written by this build.
pub const CHECKPOINT_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state dir {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error(
        "state dir {path} is in use by another `sluice run` of this pipeline; stop it first, or give this run its own `pipeline.state_dir`"
    )]
    Locked { path: PathBuf },
    #[error("{path}: {detail}; the state dir was written by another version of Sluice or is damaged")]
    Corrupt { path: PathBuf, detail: String },
}

fn io(path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::Io { path: path.to_path_buf(), detail: e.to_string() }
}

/// A transaction pre-committed by a checkpoint, committed once the checkpoint is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub db: String,
    pub table: String,
    pub label: String,
    pub txn_id: i64,
}

/// A completed checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    pub pipeline: String,
    pub id: u64,
    /// The run that took it.
    pub run: u64,
    /// Each worker's source position, opaque to everything but the source.
    pub sources: Vec<serde_json::Value>,
    /// Whether every source was exhausted (a bounded pipeline that finished).
    pub finished: bool,
    /// The transactions to commit.
    pub transactions: Vec<Txn>,
    /// Whether those transactions are known to be committed.
    pub committed: bool,
}

/// A label written before its load starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelEntry {
    pub db: String,
    pub table: String,
    pub label: String,
    pub checkpoint: u64,
    pub run: u64,
}

/// An open state dir, locked against a second process.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    _lock: File,
    journal: File,
}

impl StateDir {
    /// Open (creating) the state dir and take its lock.
    pub fn open(path: &Path) -> Result<StateDir, StateError> {
        std::fs::create_dir_all(path).map_err(|e| io(path, e))?;
        let lock_path = path.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(StateError::Locked { path: path.to_path_buf() }),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path, e)),
        }
        let journal_path = path.join("labels.jsonl");
        let journal =
            OpenOptions::new().create(true).append(true).open(&journal_path).map_err(|e| io(&journal_path, e))?;
        Ok(StateDir { path: path.to_path_buf(), _lock: lock, journal })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pipeline's stable identity: made at its first run, kept for ever after.
    pub fn pipeline_id(&self) -> Result<String, StateError> {
        let p = self.path.join("pipeline_id");
        match std::fs::read_to_string(&p) {
            Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Ok(_) | Err(_) => {
                let id = format!("{:08x}", fastrand::u32(..));
                write_atomic(&p, id.as_bytes())?;
                Ok(id)
            }
        }
    }

    /// Count this start and return its number (1 for the first run). Labels carry it, so no two
    /// runs can ever produce the same label.
    pub fn next_run(&self) -> Result<u64, StateError> {
        let p = self.path.join("runs");
        let last = match std::fs::read_to_string(&p) {
            Ok(s) => {
                s.trim().parse::<u64>().map_err(|e| StateError::Corrupt { path: p.clone(), detail: e.to_string() })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io(&p, e)),
        };
        let run = last + 1;
        write_atomic(&p, run.to_string().as_bytes())?;
        Ok(run)
    }

    /// The last completed checkpoint, if any.
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>, StateError> {
        let p = self.path.join("checkpoint.json");
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&p, e)),
        };
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| StateError::Corrupt { path: p.clone(), detail: e.to_string() })?;
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != u64::from(CHECKPOINT_VERSION) {
            return Err(StateError::Corrupt {
                path: p,
                detail: format!("checkpoint format version {version}, this Sluice reads version {CHECKPOINT_VERSION}"),
            });
        }
        serde_json::from_value(value).map(Some).map_err(|e| StateError::Corrupt { path: p, detail: e.to_string() })
    }

    /// Make `checkpoint` the last completed one, durably.
    pub fn write_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StateError> {
        let p = self.path.join("checkpoint.json");
        let bytes = serde_json::to_vec_pretty(checkpoint).map_err(|e| io(&p, e))?;
        write_atomic(&p, &bytes)
    }

    /// Record a label, durably, before its load starts.
    pub fn journal_label(&mut self, entry: &LabelEntry) -> Result<(), StateError> {
        let p = self.path.join("labels.jsonl");
        let mut line = serde_json::to_vec(entry).map_err(|e| io(&p, e))?;
        line.push(b'\n');
        self.journal.write_all(&line).map_err(|e| io(&p, e))?;
        self.journal.sync_data().map_err(|e| io(&p, e))
    }

    /// Every label journaled and not yet forgotten.
    pub fn journaled_labels(&self) -> Result<Vec<LabelEntry>, StateError> {
        let p = self.path.join("labels.jsonl");
        let file = File::open(&p).map_err(|e| io(&p, e))?;
        let mut out = Vec::new();
        for line in BufReader::new(file).lines() {
            let line = line.map_err(|e| io(&p, e))?;
            if line.trim().is_empty() {
                continue;
            }
            // A crash can cut the last line short; that label never reached Doris.
            match serde_json::from_str(&line) {
                Ok(entry) => out.push(entry),
                Err(_) => continue,
            }
        }
        Ok(out)
    }

    /// Keep only the journal entries for which `keep` is true.
    pub fn retain_labels(&mut self, keep: impl Fn(&LabelEntry) -> bool) -> Result<(), StateError> {
        let p = self.path.join("labels.jsonl");
        let kept: Vec<LabelEntry> = self.journaled_labels()?.into_iter().filter(|e| keep(e)).collect();
        let mut text = Vec::new();
        for e in &kept {
            text.extend(serde_json::to_vec(e).map_err(|e| io(&p, e))?);
            text.push(b'\n');
        }
        write_atomic(&p, &text)?;
        self.journal = OpenOptions::new().append(true).open(&p).map_err(|e| io(&p, e))?;
        Ok(())
    }
}

/// Write, fsync, rename over, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| io(&tmp, e))?;
    f.sync_all().map_err(|e| io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_runs_and_labels_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = StateDir::open(dir.path()).unwrap();
            assert!(matches!(StateDir::open(dir.path()), Err(StateError::Locked { .. })));
            assert_eq!(s.next_run().unwrap(), 1);
            let id = s.pipeline_id().unwrap();
            assert_eq!(s.pipeline_id().unwrap(), id);
            let e =
                |l: &str, c| LabelEntry { db: "d".into(), table: "t".into(), label: l.into(), checkpoint: c, run: 1 };
            s.journal_label(&e("a", 1)).unwrap();
            s.journal_label(&e("b", 2)).unwrap();
            s.retain_labels(|l| l.checkpoint > 1).unwrap();
            s.journal_label(&e("c", 3)).unwrap();
            let cp = Checkpoint {
                version: CHECKPOINT_VERSION,
                pipeline: "p".into(),
                id: 2,
                run: 1,
                sources: vec![serde_json::json!({"rows": 10})],
                finished: false,
                transactions: vec![Txn { db: "d".into(), table: "t".into(), label: "b".into(), txn_id: 7 }],
                committed: false,
            };
            s.write_checkpoint(&cp).unwrap();
        }
        let s = StateDir::open(dir.path()).unwrap();
        assert_eq!(s.next_run().unwrap(), 2);
        let labels: Vec<String> = s.journaled_labels().unwrap().into_iter().map(|e| e.label).collect();
        assert_eq!(labels, ["b", "c"]);
        let cp = s.checkpoint().unwrap().unwrap();
        assert_eq!((cp.id, cp.transactions[0].txn_id), (2, 7));
    }

    #[test]
    fn a_checkpoint_of_another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("checkpoint.json"), r#"{"version": 99}"#).unwrap();
        let s = StateDir::open(dir.path()).unwrap();
        let e = s.checkpoint().unwrap_err().to_string();
        assert!(e.contains("checkpoint format version 99, this Sluice reads version 1"), "{e}");
    }
}
