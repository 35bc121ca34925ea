//! The Doris sink's committer: commits the pre-committed transactions of a durable checkpoint,
//! and after a crash rolls back every other load the sink journaled. Once a checkpoint is
//! complete, a load journaled for it (or before) that it did not commit is aborted too: a
//! deposed cluster leader's, which woke after the new leader had recovered.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::doris::{FeClient, Label, TxnId, TxnOutcome};
use crate::runtime::{Committer, Restartable};
use crate::state::{Journal, Keyed};

/// A transaction pre-committed by a checkpoint, committed once the checkpoint is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub db: String,
    pub table: String,
    pub label: Label,
    pub txn_id: TxnId,
}

/// A label, journaled when its load starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelEntry {
    pub db: String,
    pub table: String,
    pub label: Label,
    pub checkpoint: u64,
    pub run: u64,
}

/// Commits of one Doris sink.
pub struct DorisCommitter {
    /// What the sink's loads hold in Doris: a commit frees it.
    pub(crate) txns: Arc<super::budget::TxnBudget>,
    pub client: FeClient,
    pub journal: Arc<Journal>,
    /// Commits tried again after a failure.
    pub commit_retries: Arc<AtomicU64>,
    /// The labels the last [`Committer::commit`] committed, by checkpoint.
    pub committed: std::sync::Mutex<Option<(u64, HashSet<Label>)>>,
}

/// Commit attempts after the first, before the failure restarts the pipeline.
const COMMIT_RETRIES: usize = 5;

impl DorisCommitter {
    /// Commit one transaction, retrying what may pass on a second try.
    async fn commit_one(&self, t: &Txn) -> anyhow::Result<()> {
        use backon::Retryable;
        let commit = || self.client.commit(&t.db, t.txn_id);
        let committed = commit
            .retry(crate::retry::backoff(Duration::from_millis(400), COMMIT_RETRIES))
            .when(|e| !e.is_txn_gone())
            .notify(|e, wait| {
                self.commit_retries.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(label = %t.label, "commit failed, retrying in {wait:?}: {e}");
            })
            .await;
        match committed {
            Ok(_) => Ok(()),
            Err(e) if e.is_txn_gone() => anyhow::bail!(
                "cannot commit `{}.{}` label `{}`: {e}; the rows of that load are not in Doris",
                t.db,
                t.table,
                t.label
            ),
            Err(e) => Err(Restartable::caused_by(e)),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Journal) -> Result<T, crate::state::StateError> + Send + 'static,
    ) -> anyhow::Result<T> {
        let journal = self.journal.clone();
        Ok(tokio::task::spawn_blocking(move || f(&journal)).await??)
    }

    /// Abort the loads of `entries` by label; returns how many were still open.
    async fn abort<'e>(&self, entries: impl Iterator<Item = &'e LabelEntry>) -> anyhow::Result<usize> {
        let mut aborted = 0;
        for entry in entries {
            match self.client.abort_label(&entry.db, &entry.label).await {
                Ok(TxnOutcome::Done) => aborted += 1,
                Ok(TxnOutcome::AlreadyDone) => {}
                Err(e) => return Err(Restartable::caused_by(e)),
            }
        }
        Ok(aborted)
    }
}

/// The transactions of every worker's committables.
fn txns(committables: &[serde_json::Value]) -> anyhow::Result<Vec<Txn>> {
    let mut out = Vec::new();
    for c in committables.iter().filter(|c| !c.is_null()) {
        let list: Vec<Txn> = serde_json::from_value(c.clone())
            .map_err(|e| anyhow::anyhow!("the checkpoint's Doris transactions are not readable ({e}): {c}"))?;
        out.extend(list);
    }
    Ok(out)
}

#[async_trait]
impl Committer for DorisCommitter {
    /// The loads of one table one after another in the order they were written (a later load of
    /// a checkpoint may change rows an earlier one wrote), different tables at once.
    async fn commit(&self, id: u64, committables: &[serde_json::Value]) -> anyhow::Result<u64> {
        let all = txns(committables)?;
        let mut tables: Vec<Vec<&Txn>> = Vec::new();
        for t in &all {
            match tables.iter_mut().find(|g| g[0].db == t.db && g[0].table == t.table) {
                Some(group) => group.push(t),
                None => tables.push(vec![t]),
            }
        }
        let groups = tables.into_iter().map(|group| async move {
            for t in group {
                self.commit_one(t).await?;
                self.txns.release(&t.db, id, 1);
            }
            Ok::<(), anyhow::Error>(())
        });
        for r in futures::future::join_all(groups).await {
            r?;
        }
        let labels = all.iter().map(|t| t.label.clone()).collect();
        *self.committed.lock().unwrap_or_else(|p| p.into_inner()) = Some((id, labels));
        Ok(all.len() as u64)
    }

    async fn recover(&self, committed: &[serde_json::Value]) -> anyhow::Result<()> {
        let committed = txns(committed)?;
        let entries: Vec<LabelEntry> = self.blocking(|j| j.entries()).await?;
        let aborted = self.abort(entries.iter().filter(|e| !committed.iter().any(|t| t.label == e.label))).await?;
        if aborted > 0 {
            tracing::info!("aborted {aborted} load(s) left open by an earlier run");
        }
        self.blocking(|j| j.retain(|_: &LabelEntry| false)).await
    }

    async fn on_checkpoint_complete(&self, id: u64) -> anyhow::Result<()> {
        let committed = match self.committed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some((c, labels)) if c == id => labels,
            _ => Default::default(),
        };
        let entries: Vec<Keyed<LabelEntry>> = self.blocking(|j| j.keyed_entries()).await?;
        // Best effort: a stray that cannot be aborted now is aborted by Doris' own timeout.
        let done = entries.iter().filter(|k| k.entry.checkpoint <= id);
        for e in done.clone().map(|k| &k.entry).filter(|e| !committed.contains(&e.label)) {
            match self.client.abort_label(&e.db, &e.label).await {
                Ok(TxnOutcome::Done) => {
                    tracing::warn!(label = %e.label, "aborted a load journaled for checkpoint {id} that it does not commit")
                }
                Ok(TxnOutcome::AlreadyDone) => {}
                Err(err) => {
                    tracing::warn!(label = %e.label, "a load journaled for checkpoint {id} that it does not commit: {err}")
                }
            }
        }
        // Only what was looked at above goes: an entry journaled meanwhile is looked at next time.
        let gone: HashSet<String> = done.map(|k| k.key.clone()).collect();
        self.blocking(move |j| j.remove(&gone)).await
    }
}
