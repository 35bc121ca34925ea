//! The work of one pipeline spread over its members.
//!
//! Keys, under the pipeline's namespace `<ns>`:
//! - `<ns>/work/plan`: the leader's [`Plan`] — which member runs which unit, from which
//!   checkpoint. Its generation grows with every plan, by any leader (`<ns>/plans` counts them).
//! - `<ns>/work/barrier`: the leader's latest [`Barrier`]: checkpoint N of a generation.
//! - `<ns>/work/acks/<generation>/<N>/<unit>`: a member's [`Report`] that its unit's state of
//!   checkpoint N is written (`state/N/<unit>` in the store) and its loads pre-committed.
//! - `<ns>/work/done`: the last checkpoint whose transactions are committed ([`Done`]).
//! - `<ns>/work/failures/<generation>/<member>`: a member's unit failed ([`Failure`]).
//! - `<ns>/work/asks/<member>`: a member's unit asks for a checkpoint now (before a schema
//!   change, which waits for one).
//!
//! The leader's keys are written in transactions guarded by its epoch; a member's acks and
//! failures are attached to its lease, so they go with it.
//!
//! Every process follows the keys it cares about through a [`View`]: a live copy of a key or a
//! prefix, kept up to date by an etcd watch that starts again wherever it broke off.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::etcd::Client;
use crate::etcd::client::{prefix_end, range};
use crate::etcd::pb::etcdserverpb::{DeleteRangeRequest, PutRequest, WatchCreateRequest};
use crate::etcd::pb::mvccpb::event::EventType;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::etcd::{Leadership, Member};
use crate::{ClusterError, Result};

/// Which member runs which unit, and the checkpoint every unit resumes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub epoch: i64,
    pub generation: u64,
    /// The published checkpoint the units start from (none: from the beginning).
    pub from: Option<u64>,
    /// unit → member.
    pub units: BTreeMap<String, String>,
}

impl Plan {
    /// The units `member` runs.
    pub fn units_of(&self, member: &str) -> Vec<String> {
        self.units.iter().filter(|(_, m)| m.as_str() == member).map(|(u, _)| u.clone()).collect()
    }
}

/// Checkpoint `checkpoint` of a generation; `last`: the units stop after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    pub epoch: i64,
    pub generation: u64,
    pub checkpoint: u64,
    pub last: bool,
}

/// A unit's state of a checkpoint is written, at `path` in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub member: String,
    pub path: String,
}

/// Checkpoint `checkpoint` is committed; `finished`: every unit was exhausted in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    pub epoch: i64,
    pub checkpoint: u64,
    pub finished: bool,
}

/// A unit of `member` failed in `generation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub member: String,
    pub generation: u64,
    /// Whether a restart from the last checkpoint may pass it.
    pub restartable: bool,
    pub message: String,
}

const PLAN: &str = "work/plan";
const BARRIER: &str = "work/barrier";
const DONE: &str = "work/done";

fn acks_prefix(generation: u64) -> String {
    format!("work/acks/{generation:020}/")
}

fn failures_prefix(generation: u64) -> String {
    format!("work/failures/{generation:020}/")
}

/// A live copy of one etcd key, or of every key under a prefix (keyed by what follows the
/// prefix). The watch behind it ends when the view is dropped.
pub struct View {
    rx: watch::Receiver<BTreeMap<String, Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for View {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl View {
    fn start(client: Client, key: String, prefix: bool) -> View {
        let (tx, rx) = watch::channel(BTreeMap::new());
        let task = tokio::spawn(follow(client, key, prefix, tx));
        View { rx, task }
    }

    /// The keys and values now.
    pub fn now(&self) -> BTreeMap<String, Vec<u8>> {
        self.rx.borrow().clone()
    }

    /// The value of the one key watched (a view of a key), parsed.
    pub fn value<T: DeserializeOwned>(&self) -> Option<T> {
        self.rx.borrow().get("").and_then(|v| serde_json::from_slice(v).ok())
    }

    /// Every value under the prefix, parsed (those that do not parse are left out).
    pub fn values<T: DeserializeOwned>(&self) -> BTreeMap<String, T> {
        let now = self.rx.borrow();
        now.iter().filter_map(|(k, v)| serde_json::from_slice(v).ok().map(|t| (k.clone(), t))).collect()
    }

    /// Until the keys change (at once if they changed since last looked at).
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Keep `tx` equal to the key (or prefix) in etcd: read it, then watch from the revision read;
/// a watch that breaks (a member gone, a compaction) starts over with a new read.
async fn follow(client: Client, key: String, prefix: bool, tx: watch::Sender<BTreeMap<String, Vec<u8>>>) {
    let strip = |k: &[u8]| String::from_utf8_lossy(&k[key.len().min(k.len())..]).into_owned();
    loop {
        let read = match tokio::time::timeout(Duration::from_secs(5), client.range(range(&key, prefix))).await {
            Ok(Ok(r)) => r,
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let revision = read.header.map_or(0, |h| h.revision);
        let mut map: BTreeMap<String, Vec<u8>> = read.kvs.into_iter().map(|kv| (strip(&kv.key), kv.value)).collect();
        tx.send_if_modified(|old| {
            let changed = *old != map;
            if changed {
                *old = map.clone();
            }
            changed
        });
        let request = WatchCreateRequest {
            key: key.as_bytes().to_vec(),
            range_end: if prefix { prefix_end(key.as_bytes()) } else { Vec::new() },
            start_revision: revision + 1,
            progress_notify: true,
            ..Default::default()
        };
        let mut stream = match client.watch(request).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while let Ok(Some(resp)) = stream.message().await {
            if resp.canceled {
                break;
            }
            if resp.events.is_empty() {
                continue;
            }
            for event in resp.events {
                let kind = event.r#type();
                let Some(kv) = event.kv else { continue };
                match kind {
                    EventType::Put => map.insert(strip(&kv.key), kv.value),
                    EventType::Delete => map.remove(&strip(&kv.key)),
                };
            }
            tx.send_replace(map.clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("cluster records serialise")
}

impl Member {
    /// A live view of `name` under the pipeline's namespace; `prefix`: every key under it.
    pub fn view(&self, name: &str, prefix: bool) -> View {
        View::start(self.client.clone(), format!("{}/{name}", self.namespace), prefix)
    }

    /// The live members, keyed by id.
    pub fn members_view(&self) -> View {
        self.view("members/", true)
    }

    /// The leader's plan.
    pub fn plan_view(&self) -> View {
        self.view(PLAN, false)
    }

    /// The leader's latest barrier.
    pub fn barrier_view(&self) -> View {
        self.view(BARRIER, false)
    }

    /// The last committed checkpoint.
    pub fn done_view(&self) -> View {
        self.view(DONE, false)
    }

    /// The acks of `generation`, keyed `<checkpoint:020>/<unit>`.
    pub fn acks_view(&self, generation: u64) -> View {
        self.view(&acks_prefix(generation), true)
    }

    /// The failures reported in `generation`, keyed by member.
    pub fn failures_view(&self, generation: u64) -> View {
        self.view(&failures_prefix(generation), true)
    }

    /// Requests of a checkpoint now, keyed by member.
    pub fn asks_view(&self) -> View {
        self.view("work/asks/", true)
    }

    /// Ask the leader for a checkpoint now.
    pub async fn ask_checkpoint(&self) -> Result<()> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.put_leased(&format!("work/asks/{}", self.id), now.as_nanos().to_string()).await
    }

    /// Put `value` at `name`, attached to this member's lease: it goes when the member does. A
    /// member whose lease is gone cannot put it.
    async fn put_leased(&self, name: &str, value: String) -> Result<()> {
        let key = format!("{}/{name}", self.namespace);
        crate::etcd::call(&self.endpoints, || {
            let put = PutRequest {
                key: key.clone().into_bytes(),
                value: value.clone().into_bytes(),
                lease: self.lease,
                ..Default::default()
            };
            self.client.put(put)
        })
        .await
        .map(|_| ())
    }

    /// Report that `unit`'s state of the barrier's checkpoint is written at `path`.
    pub async fn ack(&self, barrier: &Barrier, unit: &str, path: &str) -> Result<()> {
        let name = format!("{}{:020}/{unit}", acks_prefix(barrier.generation), barrier.checkpoint);
        self.put_leased(&name, to_json(&Report { member: self.id.clone(), path: path.to_string() })).await
    }

    /// Report that a unit of this member failed in `generation`.
    pub async fn fail(&self, generation: u64, restartable: bool, message: &str) -> Result<()> {
        let failure = Failure { member: self.id.clone(), generation, restartable, message: message.to_string() };
        self.put_leased(&format!("{}{}", failures_prefix(generation), self.id), to_json(&failure)).await
    }
}

/// The ack key of `unit` in checkpoint `checkpoint`, as an acks view keys it.
pub fn ack_key(checkpoint: u64, unit: &str) -> String {
    format!("{checkpoint:020}/{unit}")
}

impl Leadership {
    /// Publish a plan: `units` (unit → member) resume from checkpoint `from`. Its generation is
    /// new (no two plans share one, by any leader).
    pub async fn publish_plan(&self, from: Option<u64>, units: BTreeMap<String, String>) -> Result<Plan> {
        let generation = self.count("plans", "took a plan generation").await?;
        let plan = Plan { epoch: self.epoch(), generation, from, units };
        self.put_json_guarded(PLAN, to_json(&plan), &format!("published plan {generation}")).await?;
        // The acks and failures of earlier generations are of no more use.
        self.delete_prefix_before("work/acks/", generation).await;
        self.delete_prefix_before("work/failures/", generation).await;
        Ok(plan)
    }

    /// Ask every unit of `generation` for checkpoint `checkpoint`.
    pub async fn barrier(&self, generation: u64, checkpoint: u64, last: bool) -> Result<Barrier> {
        let barrier = Barrier { epoch: self.epoch(), generation, checkpoint, last };
        self.put_json_guarded(BARRIER, to_json(&barrier), &format!("asked for checkpoint {checkpoint}")).await?;
        Ok(barrier)
    }

    /// Tell every member that checkpoint `checkpoint` is committed.
    pub async fn done(&self, checkpoint: u64, finished: bool) -> Result<()> {
        let done = Done { epoch: self.epoch(), checkpoint, finished };
        self.put_json_guarded(DONE, to_json(&done), &format!("marked checkpoint {checkpoint} done")).await
    }

    /// Forget the acks of checkpoint `checkpoint` of `generation` (it is complete).
    pub async fn forget_acks(&self, generation: u64, checkpoint: u64) {
        let key = format!("{}/{}{checkpoint:020}/", self.namespace, acks_prefix(generation));
        let range_end = prefix_end(key.as_bytes());
        let _ = self.client.delete(DeleteRangeRequest { key: key.into_bytes(), range_end, prev_kv: false }).await;
    }

    /// Best effort: delete the keys under `<ns>/<dir>` of generations before `generation`.
    async fn delete_prefix_before(&self, dir: &str, generation: u64) {
        let from = format!("{}/{dir}", self.namespace);
        let to = format!("{}/{dir}{generation:020}", self.namespace);
        let request = DeleteRangeRequest { key: from.into_bytes(), range_end: to.into_bytes(), prev_kv: false };
        let _ = self.client.delete(request).await;
    }
}

/// Parse a record read from etcd, naming the key when it is not one Sluice wrote.
pub fn parse<T: DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| ClusterError::Corrupt { location: format!("etcd key {key}"), detail: e.to_string() })
}
