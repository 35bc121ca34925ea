//! The state dir of a pipeline: its identity, its run counter, its last completed checkpoint,
//! and the journals components keep of what they open (a sink's labels). Every write of a file
//! is atomic (write, fsync, rename, fsync the directory), so a crash at any moment leaves either
//! the old or the new file; a journal is appended to and made durable by [`Journal::sync`].
//!
//! A clustered pipeline keeps the same things in etcd and object storage instead ([`cluster`]).

pub mod cluster;

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Version of the checkpoint format written by this build.
pub const CHECKPOINT_VERSION: u32 = 2;

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
    #[error("{0}")]
    Cluster(String),
}

fn io(path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::Io { path: path.to_path_buf(), detail: e.to_string() }
}

/// A completed checkpoint. What each component keeps in it is its own (opaque JSON), under the
/// component's name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    pub pipeline: String,
    pub id: u64,
    /// The run that took it.
    pub run: u64,
    /// Whether every source was exhausted (a bounded pipeline that finished).
    pub finished: bool,
    /// Each source's reader positions, one per worker.
    pub sources: BTreeMap<String, Vec<serde_json::Value>>,
    /// Each stateful transform's state, one per worker.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub transforms: BTreeMap<String, Vec<serde_json::Value>>,
    /// Each sink's committables, one per worker.
    pub sinks: BTreeMap<String, Vec<serde_json::Value>>,
    /// Whether every sink has committed them.
    pub committed: bool,
}

/// Where a pipeline keeps its checkpoints and journals, and how its runs and checkpoints are
/// numbered: a state dir of this process's ([`StateDir`], `pipeline.state_dir`), or etcd and
/// object storage shared by the processes of a `[cluster]` ([`cluster::Clustered`]). The runtime
/// knows the two only through this.
#[async_trait::async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Where the state is, for messages.
    fn describe(&self) -> String;

    /// The pipeline's stable identity.
    fn pipeline_id(&self) -> Result<String, StateError>;

    /// The journal named `name`.
    fn journal(&self, name: &str) -> Result<Journal, StateError>;

    /// Count this start and return its number: labels carry it, so no two starts share one.
    async fn next_run(&self) -> anyhow::Result<u64>;

    /// The last completed checkpoint, if any, with `committed` set when its transactions are
    /// known to be committed.
    async fn latest(&self) -> anyhow::Result<Option<Checkpoint>>;

    /// The number of the checkpoint that follows checkpoint `completed` (increasing, not always
    /// consecutive).
    async fn next_checkpoint(&self, completed: u64) -> anyhow::Result<u64>;

    /// Make `cp` the last completed checkpoint, durably: the commit point. Its transactions may
    /// be committed once this returns, never if it fails.
    async fn publish(&self, cp: &Checkpoint) -> anyhow::Result<()>;

    /// Record that `cp`'s transactions are all committed, so that recovery does not commit them
    /// again.
    async fn mark_committed(&self, cp: &Checkpoint) -> anyhow::Result<()>;

    /// The state dir, when the state is kept in one.
    fn dir(&self) -> Option<&StateDir> {
        None
    }

    /// The cluster, when the pipeline is spread over one.
    fn cluster(&self) -> Option<&cluster::Clustered> {
        None
    }
}

/// Blocking state-dir work, off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, StateError> + Send + 'static) -> anyhow::Result<T> {
    use anyhow::Context;
    Ok(tokio::task::spawn_blocking(f).await.context("a state dir task failed")??)
}

#[async_trait::async_trait]
impl CheckpointStore for StateDir {
    fn describe(&self) -> String {
        format!("state dir {}", self.path.display())
    }

    fn pipeline_id(&self) -> Result<String, StateError> {
        StateDir::pipeline_id(self)
    }

    fn journal(&self, name: &str) -> Result<Journal, StateError> {
        StateDir::journal(self, name)
    }

    async fn next_run(&self) -> anyhow::Result<u64> {
        let dir = self.clone();
        blocking(move || StateDir::next_run(&dir)).await
    }

    async fn latest(&self) -> anyhow::Result<Option<Checkpoint>> {
        let dir = self.clone();
        blocking(move || dir.checkpoint()).await
    }

    async fn next_checkpoint(&self, completed: u64) -> anyhow::Result<u64> {
        Ok(completed + 1)
    }

    async fn publish(&self, cp: &Checkpoint) -> anyhow::Result<()> {
        let (dir, cp) = (self.clone(), cp.clone());
        blocking(move || dir.write_checkpoint(&cp)).await
    }

    async fn mark_committed(&self, cp: &Checkpoint) -> anyhow::Result<()> {
        let (dir, mut done) = (self.clone(), cp.clone());
        done.committed = true;
        blocking(move || dir.write_checkpoint(&done)).await
    }

    fn dir(&self) -> Option<&StateDir> {
        Some(self)
    }
}

/// How long [`StateDir::open`] waits for a lock that is held.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// An open state dir, locked against a second process (until its last clone is dropped).
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    _lock: Arc<File>,
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
        // A child process forked by this one (a plugin tool, a test server) shares the lock until
        // it execs, so a lock just released can look held for a moment: wait up to a second.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(StateDir { path: path.to_path_buf(), _lock: Arc::new(lock) }),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                Err(std::fs::TryLockError::WouldBlock) => return Err(StateError::Locked { path: path.to_path_buf() }),
                Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path, e)),
            }
        }
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
        read_checkpoint(&self.path)
    }

    /// Make `checkpoint` the last completed one, durably.
    pub fn write_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StateError> {
        let p = self.path.join("checkpoint.json");
        let bytes = serde_json::to_vec_pretty(checkpoint).map_err(|e| io(&p, e))?;
        write_atomic(&p, &bytes)
    }

    /// The journal named `name` (a file `journal-<name>.jsonl` in the state dir), created empty
    /// the first time.
    pub fn journal(&self, name: &str) -> Result<Journal, StateError> {
        let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        Journal::open(self.path.join(format!("journal-{safe}.jsonl")))
    }
}

/// The last completed checkpoint of the state dir at `path`, if any, read without its lock (a
/// look at a stopped pipeline's state, or at one whose lock this process already holds).
pub fn read_checkpoint(path: &Path) -> Result<Option<Checkpoint>, StateError> {
    let p = path.join("checkpoint.json");
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&p, e)),
    };
    parse_checkpoint(&bytes).map(Some).map_err(|detail| StateError::Corrupt { path: p, detail })
}

/// A checkpoint from its bytes, checking its format version; the error says what is wrong, for
/// the caller to name where the bytes came from.
pub(crate) fn parse_checkpoint(bytes: &[u8]) -> Result<Checkpoint, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    if version != u64::from(CHECKPOINT_VERSION) {
        return Err(format!("checkpoint format version {version}, this Sluice reads version {CHECKPOINT_VERSION}"));
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// An append-only log of JSON entries that a component keeps with the pipeline's state, e.g. the
/// labels a sink opened, so that it can recover what a crash left open: lines of a file in the
/// state dir, or (clustered) one object an entry in the cluster's store.
///
/// Its methods block; async code calls them through `spawn_blocking` ([`Journal::append`] only
/// buffers, and may be called anywhere).
#[derive(Debug)]
pub struct Journal {
    kind: JournalKind,
}

#[derive(Debug)]
enum JournalKind {
    File { path: PathBuf, file: Mutex<File> },
    Remote(cluster::RemoteJournal),
}

impl Journal {
    fn open(path: PathBuf) -> Result<Journal, StateError> {
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| io(&path, e))?;
        Ok(Journal { kind: JournalKind::File { path, file: Mutex::new(file) } })
    }

    fn remote(store: sluice_cluster::StateStore, name: &str) -> Result<Journal, StateError> {
        Ok(Journal { kind: JournalKind::Remote(cluster::RemoteJournal::new(store, name)?) })
    }

    /// Append `entry`; it is durable after the next [`Journal::sync`].
    pub fn append<T: Serialize>(&self, entry: &T) -> Result<(), StateError> {
        match &self.kind {
            JournalKind::File { path, file } => {
                let mut line = serde_json::to_vec(entry).map_err(|e| io(path, e))?;
                line.push(b'\n');
                let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
                file.write_all(&line).map_err(|e| io(path, e))
            }
            JournalKind::Remote(r) => r.append(serde_json::to_vec(entry).expect("journal entries serialise")),
        }
    }

    /// Make every entry appended so far durable.
    pub fn sync(&self) -> Result<(), StateError> {
        match &self.kind {
            JournalKind::File { path, file } => {
                let file = file.lock().unwrap_or_else(|p| p.into_inner());
                file.sync_data().map_err(|e| io(path, e))
            }
            JournalKind::Remote(r) => r.sync(),
        }
    }

    /// Every entry in the journal. A crash can cut the last line of a file short; such a line
    /// was never synced, so what it describes was never started, and it is skipped.
    pub fn entries<T: DeserializeOwned>(&self) -> Result<Vec<T>, StateError> {
        Ok(self.keyed_entries()?.into_iter().map(|k| k.entry).collect())
    }

    /// Every entry with the key that [`Journal::remove`] takes.
    pub fn keyed_entries<T: DeserializeOwned>(&self) -> Result<Vec<Keyed<T>>, StateError> {
        let raw: Vec<(Vec<u8>, String)> = match &self.kind {
            JournalKind::File { path, .. } => {
                file_entries(path)?.into_iter().map(|line| (line.as_bytes().to_vec(), line)).collect()
            }
            JournalKind::Remote(r) => r.entries()?.into_iter().map(|(key, bytes)| (bytes.to_vec(), key)).collect(),
        };
        let parsed = raw
            .into_iter()
            .filter_map(|(bytes, key)| serde_json::from_slice(&bytes).ok().map(|entry| Keyed { key, entry }));
        Ok(parsed.collect())
    }

    /// Remove the entries with these keys (from [`Journal::keyed_entries`]); entries appended
    /// since stay.
    pub fn remove(&self, keys: &HashSet<String>) -> Result<(), StateError> {
        match &self.kind {
            JournalKind::File { path, file } => {
                let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
                let mut text = Vec::new();
                for line in file_entries(path)?.into_iter().filter(|l| !keys.contains(l)) {
                    text.extend(line.as_bytes());
                    text.push(b'\n');
                }
                write_atomic(path, &text)?;
                *file = OpenOptions::new().append(true).open(path).map_err(|e| io(path, e))?;
                Ok(())
            }
            JournalKind::Remote(r) => r.remove(keys),
        }
    }

    /// Keep only the entries for which `keep` is true.
    pub fn retain<T: Serialize + DeserializeOwned>(&self, keep: impl Fn(&T) -> bool) -> Result<(), StateError> {
        if let JournalKind::Remote(r) = &self.kind {
            r.retain_pending(|bytes| serde_json::from_slice::<T>(bytes).is_ok_and(|e| keep(&e)));
        }
        let gone = self.keyed_entries::<T>()?.into_iter().filter(|k| !keep(&k.entry)).map(|k| k.key).collect();
        self.remove(&gone)
    }
}

/// A journal entry and the key that removes it.
#[derive(Debug)]
pub struct Keyed<T> {
    pub key: String,
    pub entry: T,
}

/// The non-empty lines of a journal file.
fn file_entries(path: &Path) -> Result<Vec<String>, StateError> {
    let file = File::open(path).map_err(|e| io(path, e))?;
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| io(path, e))?;
        if !line.trim().is_empty() {
            out.push(line);
        }
    }
    Ok(out)
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

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Entry {
        label: String,
        checkpoint: u64,
    }

    #[test]
    fn checkpoints_runs_and_journals_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let e = |l: &str, c| Entry { label: l.into(), checkpoint: c };
        {
            let s = StateDir::open(dir.path()).unwrap();
            assert!(matches!(StateDir::open(dir.path()), Err(StateError::Locked { .. })));
            assert_eq!(s.next_run().unwrap(), 1);
            let id = s.pipeline_id().unwrap();
            assert_eq!(s.pipeline_id().unwrap(), id);
            let j = s.journal("doris").unwrap();
            j.append(&e("a", 1)).unwrap();
            j.append(&e("b", 2)).unwrap();
            j.sync().unwrap();
            j.retain(|l: &Entry| l.checkpoint > 1).unwrap();
            j.append(&e("c", 3)).unwrap();
            j.sync().unwrap();
            let cp = Checkpoint {
                version: CHECKPOINT_VERSION,
                pipeline: "p".into(),
                id: 2,
                run: 1,
                sources: [("datagen".to_string(), vec![serde_json::json!({"rows": 10})])].into(),
                sinks: [("doris".to_string(), vec![serde_json::json!([{"label": "b"}])])].into(),
                ..Checkpoint::default()
            };
            s.write_checkpoint(&cp).unwrap();
        }
        let s = StateDir::open(dir.path()).unwrap();
        assert_eq!(s.next_run().unwrap(), 2);
        assert_eq!(s.journal("doris").unwrap().entries::<Entry>().unwrap(), [e("b", 2), e("c", 3)]);
        assert!(s.journal("other").unwrap().entries::<Entry>().unwrap().is_empty());
        let cp = s.checkpoint().unwrap().unwrap();
        assert_eq!((cp.id, &cp.sinks["doris"][0][0]["label"]), (2, &serde_json::json!("b")));
    }

    #[test]
    fn a_journal_line_cut_short_by_a_crash_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("journal-doris.jsonl"),
            "{\"label\":\"a\",\"checkpoint\":1}\n{\"label\":\"b\",\"chec",
        )
        .unwrap();
        let s = StateDir::open(dir.path()).unwrap();
        let entries: Vec<Entry> = s.journal("doris").unwrap().entries().unwrap();
        assert_eq!(entries, [Entry { label: "a".into(), checkpoint: 1 }]);
    }

    #[test]
    fn a_checkpoint_of_another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("checkpoint.json"), r#"{"version": 1}"#).unwrap();
        let s = StateDir::open(dir.path()).unwrap();
        let e = s.checkpoint().unwrap_err().to_string();
        assert!(e.contains("checkpoint format version 1, this Sluice reads version 2"), "{e}");
    }
}
