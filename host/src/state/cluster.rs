//! The state of a clustered pipeline (`[cluster]`): checkpoints in object storage, published in
//! etcd under the leader's epoch, and journals as objects (see `sluice_cluster`).
//!
//! Checkpoint N is the [`Checkpoint`] of the whole pipeline, written to `state/N/pipeline`, and
//! manifest N names it and lists the sinks' transactions. The runtime takes N from the guarded
//! counter, writes the state and the manifest, publishes N (the commit point), and only then
//! commits the transactions; a takeover commits the latest published checkpoint's again unless
//! etcd records them as committed.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sluice_cluster::{ClusterError, Coordinator, Leadership, Manifest, Member, StateStore};

use super::{Checkpoint, StateError};
use crate::error::Restartable;

/// The unit under which the whole pipeline's checkpoint is kept.
const PIPELINE_UNIT: &str = "pipeline";

/// Where and as whom a process joins its pipeline's cluster.
#[derive(Debug, Clone)]
pub struct Settings {
    /// etcd's members, `http://host:port`.
    pub etcd: Vec<String>,
    /// `s3://bucket/prefix` or `file:///dir`.
    pub store: String,
    pub member: String,
    pub lease_ttl: Duration,
    /// Units this process takes relative to the others (at least 1).
    pub capacity: u32,
    /// The etcd prefix of the pipeline's keys, `/sluice/<pipeline>`.
    pub namespace: String,
}

/// This process in its pipeline's cluster.
pub struct Clustered {
    member: Member,
    store: StateStore,
    namespace: String,
    coordinator: OnceLock<Coordinator>,
}

impl std::fmt::Debug for Clustered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clustered").field("member", &self.member.id()).field("namespace", &self.namespace).finish()
    }
}

/// A cluster failure as the runtime sees it: etcd or the store not answering may pass after a
/// restart; a lost leadership or damaged state stops the run.
pub(crate) fn classify(e: ClusterError) -> anyhow::Error {
    match e {
        ClusterError::Etcd { .. } | ClusterError::Store { .. } => Restartable::caused_by(e),
        other => anyhow::Error::new(other),
    }
}

impl Clustered {
    /// Join the cluster (a lease, a member key) and open the store.
    pub async fn join(s: &Settings) -> anyhow::Result<Clustered> {
        let store = StateStore::open(&s.store)?;
        let member = Member::join_with(&s.etcd, &s.namespace, &s.member, s.lease_ttl, s.capacity).await?;
        Ok(Clustered { member, store, namespace: s.namespace.clone(), coordinator: OnceLock::new() })
    }

    /// Leave the cluster (the lease revoked: a standby leads at once).
    pub async fn leave(&self) {
        self.member.leave().await
    }

    pub fn store(&self) -> &StateStore {
        &self.store
    }

    pub fn member(&self) -> &Member {
        &self.member
    }

    /// The pipeline's identity, the same in every process: derived from its etcd namespace.
    pub fn pipeline_id(&self) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(self.namespace.as_bytes())[..4].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Wait until this process leads the pipeline; returns its epoch.
    pub async fn lead(&self) -> anyhow::Result<i64> {
        let leadership = self.member.campaign().await?;
        let epoch = leadership.epoch();
        let _ = self.coordinator.set(Coordinator { leadership, store: self.store.clone() });
        Ok(epoch)
    }

    fn coordinator(&self) -> anyhow::Result<&Coordinator> {
        self.coordinator.get().ok_or_else(|| anyhow::anyhow!("this process does not lead the pipeline"))
    }

    /// This start's run number (labels carry it; no two starts share one, in any process).
    pub async fn next_run(&self) -> anyhow::Result<u64> {
        self.coordinator()?.leadership.next_run().await.map_err(classify)
    }

    /// The latest published checkpoint, and whether its transactions are known to be committed.
    pub async fn latest(&self) -> anyhow::Result<Option<(Checkpoint, bool)>> {
        let c = self.coordinator()?;
        let Some(manifest) = c.latest().await.map_err(classify)? else { return Ok(None) };
        let checkpoint = self.read(&manifest).await?;
        let committed = c.leadership.committed().await.map_err(classify)? == Some(manifest.checkpoint);
        Ok(Some((checkpoint, committed)))
    }

    /// Published checkpoint `id`, as any member reads it.
    pub async fn checkpoint(&self, id: u64) -> anyhow::Result<Checkpoint> {
        let manifest = self.store.manifest(id).await.map_err(classify)?.ok_or_else(|| {
            classify(ClusterError::Corrupt {
                location: self.store.manifest_location(id),
                detail: format!("checkpoint {id} is named by the leader, but its manifest is missing"),
            })
        })?;
        self.read(&manifest).await
    }

    /// The pipeline's checkpoint that `manifest` names.
    async fn read(&self, manifest: &Manifest) -> anyhow::Result<Checkpoint> {
        let path = manifest.units.get(PIPELINE_UNIT).ok_or_else(|| {
            classify(ClusterError::Corrupt {
                location: self.store.manifest_location(manifest.checkpoint),
                detail: format!("the manifest names no `{PIPELINE_UNIT}` state"),
            })
        })?;
        let bytes = self.store.state(path).await.map_err(classify)?;
        super::parse_checkpoint(&bytes).map_err(|detail| {
            classify(ClusterError::Corrupt { location: format!("{}/{path}", self.store.location()), detail })
        })
    }

    /// The number of the next checkpoint.
    pub async fn next_checkpoint(&self) -> anyhow::Result<u64> {
        self.coordinator()?.begin().await.map_err(classify)
    }

    /// Write checkpoint `cp` and its manifest (which lists `units`' states besides it), and
    /// publish it: the commit point. Its transactions may be committed once this returns, never
    /// if it fails.
    pub async fn publish(&self, cp: &Checkpoint, mut units: BTreeMap<String, String>) -> anyhow::Result<()> {
        let c = self.coordinator()?;
        let bytes = serde_json::to_vec(cp).expect("a checkpoint serialises");
        let path = c.store.put_state(cp.id, PIPELINE_UNIT, bytes).await.map_err(classify)?;
        units.insert(PIPELINE_UNIT.to_string(), path);
        let sinks = serde_json::to_value(&cp.sinks).expect("committables serialise");
        let manifest = c.manifest(cp.id, units, sinks);
        c.commit_point(&manifest).await.map_err(classify)
    }

    /// The leader's side of the work spread over the members (see `sluice_cluster::work`).
    pub fn leadership(&self) -> anyhow::Result<&Leadership> {
        Ok(&self.coordinator()?.leadership)
    }

    /// Record that checkpoint `id`'s transactions are all committed.
    pub async fn mark_committed(&self, id: u64) -> anyhow::Result<()> {
        self.coordinator()?.leadership.mark_committed(id).await.map_err(classify)
    }
}

#[async_trait::async_trait]
impl super::CheckpointStore for Clustered {
    fn describe(&self) -> String {
        format!("cluster store {}", self.store.location())
    }

    fn pipeline_id(&self) -> Result<String, StateError> {
        Ok(Clustered::pipeline_id(self))
    }

    fn journal(&self, name: &str) -> Result<super::Journal, StateError> {
        super::Journal::remote(self.store.clone(), name)
    }

    async fn next_run(&self) -> anyhow::Result<u64> {
        Clustered::next_run(self).await
    }

    async fn latest(&self) -> anyhow::Result<Option<Checkpoint>> {
        Ok(Clustered::latest(self).await?.map(|(mut cp, committed)| {
            cp.committed = committed;
            cp
        }))
    }

    /// The cluster hands out checkpoint numbers (the guarded counter).
    async fn next_checkpoint(&self, _completed: u64) -> anyhow::Result<u64> {
        Clustered::next_checkpoint(self).await
    }

    async fn publish(&self, cp: &Checkpoint) -> anyhow::Result<()> {
        Clustered::publish(self, cp, BTreeMap::new()).await
    }

    async fn mark_committed(&self, cp: &Checkpoint) -> anyhow::Result<()> {
        Clustered::mark_committed(self, cp.id).await
    }

    fn cluster(&self) -> Option<&Clustered> {
        Some(self)
    }
}

/// A journal kept as one object an entry in the cluster's store. Entries appended are buffered
/// until [`RemoteJournal::sync`] writes them (at once).
#[derive(Debug)]
pub struct RemoteJournal {
    store: StateStore,
    name: String,
    pending: Mutex<Vec<Vec<u8>>>,
    rt: tokio::runtime::Handle,
}

fn store_error(e: ClusterError) -> StateError {
    StateError::Cluster(e.to_string())
}

impl RemoteJournal {
    pub(super) fn new(store: StateStore, name: &str) -> Result<RemoteJournal, StateError> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| StateError::Cluster(format!("journal `{name}`: opened outside the runtime")))?;
        Ok(RemoteJournal { store, name: name.to_string(), pending: Mutex::new(Vec::new()), rt })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn append(&self, entry: Vec<u8>) -> Result<(), StateError> {
        self.pending().push(entry);
        Ok(())
    }

    pub(super) fn sync(&self) -> Result<(), StateError> {
        let batch = std::mem::take(&mut *self.pending());
        let puts = batch.iter().map(|e| self.store.put_entry(&self.name, e));
        let written = self.rt.block_on(futures::future::join_all(puts));
        if let Some(Err(e)) = written.into_iter().find(Result::is_err) {
            // Kept for the next sync: an entry is durable only once it is written.
            self.pending().splice(0..0, batch);
            return Err(store_error(e));
        }
        Ok(())
    }

    pub(super) fn entries(&self) -> Result<Vec<(String, bytes::Bytes)>, StateError> {
        self.rt.block_on(self.store.entries(&self.name)).map_err(store_error)
    }

    pub(super) fn retain_pending(&self, keep: impl Fn(&[u8]) -> bool) {
        self.pending().retain(|e| keep(e));
    }

    pub(super) fn remove(&self, keys: &std::collections::HashSet<String>) -> Result<(), StateError> {
        let keys: Vec<String> = keys.iter().cloned().collect();
        self.rt.block_on(self.store.delete_entries(&self.name, &keys)).map_err(store_error)
    }
}
