//! How many Doris transactions a sink holds per database: each load is one from its start until it
//! commits — with two-phase commit, until the checkpoint it belongs to is complete. Doris refuses a
//! load past `max_running_txn_num_per_db` (`current running txns on db … is 100, larger than limit
//! 100`), so the sink keeps its own count under `max_running_txns_per_db`, over all its writers:
//! at half of it (or earlier, by the batches on their way to the writers) a checkpoint is asked for
//! and the writers take no more rows until it is under way (its commit frees the room); a load that
//! would pass it waits while loads of earlier checkpoints are still to commit — or, when only loads
//! of its own checkpoint hold the room (their commit needs this writer's barrier), stops the
//! pipeline saying so, before Doris refuses it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Per database: the loads held, by the checkpoint they belong to.
type Held = HashMap<String, BTreeMap<u64, usize>>;

#[derive(Debug)]
pub(crate) struct TxnBudget {
    limit: usize,
    /// Held loads at which a checkpoint is asked for.
    ask_at: usize,
    state: Mutex<(u64, Held)>,
    freed: tokio::sync::Notify,
}

impl TxnBudget {
    /// `limit` per database, for a pipeline of `workers` workers: a checkpoint is asked for at
    /// half of it, or earlier where the batches already on their way to the writers (until the
    /// barrier reaches them, each may open a load) could pass it.
    pub fn new(limit: usize, workers: usize) -> TxnBudget {
        let limit = limit.max(1);
        let on_the_way = workers * (crate::runtime::CHANNEL_BATCHES + 2);
        let ask_at = limit.div_ceil(2).min(limit.saturating_sub(on_the_way)).max(1);
        TxnBudget { limit, ask_at, state: Mutex::default(), freed: tokio::sync::Notify::new() }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, (u64, Held)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `run` begins: what earlier runs held was rolled back or committed by recovery.
    pub fn begin_run(&self, run: u64) {
        let mut held = self.held();
        if run > held.0 {
            *held = (run, HashMap::new());
        }
    }

    /// Room for one more load of checkpoint `checkpoint` in `db`: at once, or once loads of
    /// earlier checkpoints commit; an error naming the database and what to do when only loads
    /// of this checkpoint hold it.
    pub async fn take(&self, db: &str, checkpoint: u64) -> anyhow::Result<()> {
        loop {
            let freed = self.freed.notified();
            {
                let mut state = self.held();
                let loads = state.1.entry(db.to_string()).or_default();
                let total: usize = loads.values().sum();
                if total < self.limit {
                    *loads.entry(checkpoint).or_default() += 1;
                    return Ok(());
                }
                if !loads.range(..checkpoint).any(|(_, n)| *n > 0) {
                    anyhow::bail!(
                        "checkpoint {checkpoint} needs more than {} loads open at once in Doris database `{db}` (a load per table written since the last checkpoint, each a running transaction until the checkpoint commits; Doris refuses more than its `max_running_txn_num_per_db`): lower `checkpoint_interval`, or raise Doris' `max_running_txn_num_per_db` and the sink's `max_running_txns_per_db` with it",
                        self.limit
                    );
                }
            }
            freed.await;
        }
    }

    /// `n` loads of checkpoint `checkpoint` in `db` committed or ended.
    pub fn release(&self, db: &str, checkpoint: u64, n: usize) {
        let mut state = self.held();
        if let Some(loads) = state.1.get_mut(db)
            && let Some(held) = loads.get_mut(&checkpoint)
        {
            *held = held.saturating_sub(n);
            if *held == 0 {
                loads.remove(&checkpoint);
            }
        }
        drop(state);
        self.freed.notify_waiters();
    }

    /// The loads held for checkpoint `from` commit with checkpoint `to` (numbers a cluster
    /// skips).
    pub fn rekey(&self, from: u64, to: u64) {
        if from == to {
            return;
        }
        let mut state = self.held();
        for loads in state.1.values_mut() {
            if let Some(n) = loads.remove(&from) {
                *loads.entry(to).or_default() += n;
            }
        }
    }

    /// Whether a database holds enough that a checkpoint should come now, and rows wait until it
    /// is under way (the batches before its barrier then fit in the room left).
    pub fn crowded(&self) -> bool {
        self.held().1.values().any(|loads| loads.values().sum::<usize>() >= self.ask_at)
    }

    /// Loads held in `db`.
    #[cfg(test)]
    pub fn held_in(&self, db: &str) -> usize {
        self.held().1.get(db).map_or(0, |l| l.values().sum())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn loads_wait_for_earlier_checkpoints_and_a_checkpoint_that_needs_more_is_named() {
        let budget = Arc::new(TxnBudget::new(4, 0));
        budget.begin_run(1);
        budget.take("ods", 1).await.unwrap();
        assert!(!budget.crowded());
        budget.take("ods", 1).await.unwrap();
        assert!(budget.crowded(), "half the room held: a checkpoint is asked for");
        budget.take("ods", 2).await.unwrap();
        budget.take("other", 2).await.unwrap();
        budget.take("ods", 2).await.unwrap();
        assert_eq!(budget.held_in("ods"), 4);
        // Full: a load of checkpoint 2 waits for checkpoint 1's commit.
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.take("ods", 2).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        budget.release("ods", 1, 2);
        waiting.await.unwrap().unwrap();
        assert_eq!(budget.held_in("ods"), 3);
        budget.take("ods", 2).await.unwrap();
        // Only loads of checkpoint 2 hold the room: a fifth cannot wait for them.
        let e = budget.take("ods", 2).await.unwrap_err().to_string();
        assert!(e.starts_with("checkpoint 2 needs more than 4 loads open at once in Doris database `ods`"), "{e}");
        // A new run starts from nothing held.
        budget.begin_run(2);
        assert_eq!(budget.held_in("ods"), 0);
    }
}
