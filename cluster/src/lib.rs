//! One pipeline across several `sluice` processes, without a cluster manager of our own.
//!
//! - **etcd** ([`etcd`]): every process joins under a lease; one wins the leader election, and
//!   the creation revision of its election key is its *epoch*. Every step that decides something
//!   — taking the next checkpoint number, publishing a checkpoint — is an etcd transaction
//!   guarded by "my election key still exists with my epoch", so a leader that lost its lease
//!   (a crash, a pause longer than the lease, a partition) can no longer decide anything.
//! - **object storage** ([`store`]): workers write their state of checkpoint *N* to
//!   `state/N/<unit>`, never overwritten; the leader writes manifest *N* create-only; the sinks
//!   journal every label they open, so that a new leader can abort them by label.
//! - **the commit point** ([`Coordinator::commit_point`]): manifest *N* exists, then `latest = N`
//!   is set in a transaction guarded by the epoch. Only then are the Doris transactions
//!   committed; a takeover commits the latest manifest's transactions again (commits are
//!   idempotent) and aborts every journaled label it does not list.
//! - **placement** ([`assign`]): units of work (splits) go to members by capacity, and stay where
//!   they are while their member lives.
//! - **the work** ([`work`]): the leader publishes a plan (unit → member) and barriers; each
//!   member runs its units, writes their state of checkpoint *N* and acknowledges it; the
//!   leader's commit point follows once every unit has.

pub mod assign;
pub mod etcd;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod work;

use std::collections::BTreeMap;

pub use etcd::{Leadership, Member, parse_etcd_url};
pub use store::{Manifest, StateStore};
pub use work::{Barrier, Done, Failure, Plan, Report, View};

/// Why a cluster step failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("etcd ({endpoints}): {detail}; check that a majority of the etcd members is up and reachable")]
    Etcd { endpoints: String, detail: String },
    #[error(
        "fenced: this process led epoch {epoch} but {detail}; it decides and commits nothing more (a newer leader goes on from the latest checkpoint)"
    )]
    Fenced { epoch: i64, detail: String },
    #[error("object store {location}: {detail}")]
    Store { location: String, detail: String },
    #[error(
        "the manifest of checkpoint {checkpoint} at {location} was written by another leader (epoch {by}); this leader's checkpoint {checkpoint} is dropped"
    )]
    ManifestTaken { checkpoint: u64, location: String, by: i64 },
    #[error("{location}: {detail}; it was written by another version of Sluice or is damaged")]
    Corrupt { location: String, detail: String },
    #[error("cluster address `{url}`: {detail}")]
    Address { url: String, detail: String },
}

impl ClusterError {
    /// Whether this process lost its leadership (as opposed to a server that did not answer).
    pub fn is_fenced(&self) -> bool {
        matches!(self, ClusterError::Fenced { .. } | ClusterError::ManifestTaken { .. })
    }
}

pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// The leader's side of a checkpoint: numbers, the commit point, takeover.
pub struct Coordinator {
    pub leadership: Leadership,
    pub store: StateStore,
}

impl Coordinator {
    /// The manifest of the latest published checkpoint (none before the first): where a new
    /// leader resumes from.
    pub async fn latest(&self) -> Result<Option<Manifest>> {
        let Some(n) = self.leadership.latest().await? else { return Ok(None) };
        let manifest = self.store.manifest(n).await?.ok_or_else(|| ClusterError::Corrupt {
            location: self.store.manifest_location(n),
            detail: format!("checkpoint {n} is published in etcd, but its manifest is missing"),
        })?;
        Ok(Some(manifest))
    }

    /// The number of the next checkpoint (never handed out twice, by any leader).
    pub async fn begin(&self) -> Result<u64> {
        self.leadership.next_checkpoint().await
    }

    /// Make checkpoint `manifest.checkpoint` the latest: write its manifest (create-only), then
    /// publish it under this leader's epoch. Once this returns, its transactions may be
    /// committed; if it fails, they must not be.
    pub async fn commit_point(&self, manifest: &Manifest) -> Result<()> {
        self.store.put_manifest(manifest).await?;
        self.leadership.publish(manifest.checkpoint).await
    }

    /// A manifest of checkpoint `checkpoint` by this leader.
    pub fn manifest(
        &self,
        checkpoint: u64,
        units: BTreeMap<String, String>,
        committables: serde_json::Value,
    ) -> Manifest {
        Manifest {
            version: store::MANIFEST_VERSION,
            checkpoint,
            epoch: self.leadership.epoch(),
            leader: self.leadership.member().to_string(),
            units,
            committables,
        }
    }
}
