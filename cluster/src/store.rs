//! Checkpoint state in object storage (S3 or a local directory), through `object_store`.
//!
//! Layout under the store's root:
//! - `state/<N>/<unit>`: a unit's state at checkpoint N, written once, never overwritten;
//! - `manifests/<N>.json`: the leader's manifest of checkpoint N, create-only — of two leaders
//!   writing manifest N, one wins;
//! - `journal/<name>/<key>`: a component's journal (a sink's labels, so that a new leader can
//!   abort by label what was never published), one object an entry.
//!
//! N is zero-padded to 20 digits, so listings come in checkpoint order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::{ClusterError, Result};

/// Version of the manifest format written by this build.
pub const MANIFEST_VERSION: u32 = 1;

/// What checkpoint N is: written by its leader, create-only, before N is published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub checkpoint: u64,
    /// The epoch of the leader that wrote it.
    pub epoch: i64,
    /// That leader's member id.
    pub leader: String,
    /// Each unit's state: unit → object path (under the store's root).
    pub units: BTreeMap<String, String>,
    /// What the sinks commit once N is published (the transactions it won), opaque here.
    pub committables: serde_json::Value,
}

/// The pipeline's object storage.
#[derive(Debug, Clone)]
pub struct StateStore {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// Where it is, for messages (no credentials).
    location: String,
}

fn digits(n: u64) -> String {
    format!("{n:020}")
}

impl StateStore {
    /// The store at `url`: `s3://bucket[/prefix]` (credentials, region and endpoint from the
    /// `AWS_*` environment, as the AWS tools read them; conditional puts as S3 has them) or
    /// `file:///absolute/dir`.
    pub fn open(url: &str) -> Result<StateStore> {
        Self::open_with(url, &[])
    }

    /// [`StateStore::open`], with S3 settings (`object_store`'s names: `aws_endpoint`,
    /// `aws_access_key_id`, …) given here taking the place of the environment's.
    pub fn open_with(url: &str, settings: &[(&str, &str)]) -> Result<StateStore> {
        let bad = |detail: String| ClusterError::Address { url: url.to_string(), detail };
        let parsed = url::Url::parse(url).map_err(|e| bad(format!("{e}; write s3://bucket/prefix or file:///dir")))?;
        match parsed.scheme() {
            "s3" => {
                let bucket =
                    parsed.host_str().filter(|b| !b.is_empty()).ok_or_else(|| bad("no bucket after s3://".into()))?;
                // Sluice's timeouts first, then the environment's `AWS_*` settings, then those given.
                let mut builder = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_timeout(Duration::from_secs(10))
                            .with_connect_timeout(Duration::from_secs(3)),
                    )
                    .with_retry(object_store::RetryConfig {
                        max_retries: 3,
                        retry_timeout: Duration::from_secs(15),
                        ..Default::default()
                    });
                let env: Vec<(String, String)> = std::env::vars()
                    .filter(|(k, _)| k.starts_with("AWS_"))
                    .map(|(k, v)| (k.to_ascii_lowercase(), v))
                    .collect();
                for (key, value) in env.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(settings.iter().copied()) {
                    match key.parse::<object_store::aws::AmazonS3ConfigKey>() {
                        Ok(key) => builder = builder.with_config(key, value),
                        // AWS_* variables object_store does not know (AWS_PROFILE, …) are not its.
                        Err(_) if key.starts_with("aws_") && !settings.iter().any(|(k, _)| *k == key) => {}
                        Err(e) => return Err(bad(e.to_string())),
                    }
                }
                // An endpoint given as http:// (MinIO, a test server) is meant to be spoken to in http.
                let endpoint =
                    builder.get_config_value(&object_store::aws::AmazonS3ConfigKey::Endpoint).unwrap_or_default();
                if endpoint.starts_with("http://") {
                    builder = builder.with_allow_http(true);
                }
                let store = builder.build().map_err(|e| bad(e.to_string()))?;
                let root = Path::from(parsed.path().trim_matches('/'));
                Ok(StateStore { store: Arc::new(store), root, location: format!("s3://{bucket}{}", parsed.path()) })
            }
            "file" => {
                let dir = parsed.to_file_path().map_err(|_| bad("a file:// store needs an absolute path".into()))?;
                std::fs::create_dir_all(&dir).map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
                let store =
                    object_store::local::LocalFileSystem::new_with_prefix(&dir).map_err(|e| bad(e.to_string()))?;
                Ok(StateStore { store: Arc::new(store), root: Path::default(), location: url.to_string() })
            }
            other => Err(bad(format!("unknown store `{other}://`; write s3://bucket/prefix or file:///dir"))),
        }
    }

    /// Where it is, for messages.
    pub fn location(&self) -> &str {
        &self.location
    }

    fn path(&self, rel: &str) -> Path {
        let mut p = self.root.clone();
        for part in rel.split('/') {
            p = p.clone().join(part);
        }
        p
    }

    fn shown(&self, rel: &str) -> String {
        format!("{}/{rel}", self.location.trim_end_matches('/'))
    }

    fn err(&self, rel: &str) -> impl Fn(object_store::Error) -> ClusterError + '_ {
        let location = self.shown(rel);
        move |e| ClusterError::Store { location: location.clone(), detail: e.to_string() }
    }

    /// Create `rel` with `bytes` unless it exists; `Ok(false)` if it did (left as it was).
    async fn create(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.store.put_opts(&self.path(rel), PutPayload::from(bytes), opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.err(rel)(e)),
        }
    }

    async fn read(&self, rel: &str) -> Result<Option<bytes::Bytes>> {
        match self.store.get(&self.path(rel)).await {
            Ok(got) => Ok(Some(got.bytes().await.map_err(self.err(rel))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(rel)(e)),
        }
    }

    /// Write `unit`'s state of checkpoint `checkpoint`; returns its path for the manifest.
    /// Writing the same bytes again succeeds (a retry); other bytes are refused.
    pub async fn put_state(&self, checkpoint: u64, unit: &str, bytes: Vec<u8>) -> Result<String> {
        let rel = format!("state/{}/{unit}", digits(checkpoint));
        if !self.create(&rel, bytes.clone()).await? && self.read(&rel).await?.as_deref() != Some(&bytes[..]) {
            return Err(ClusterError::Store {
                location: self.shown(&rel),
                detail: format!(
                    "unit `{unit}` already has other state at checkpoint {checkpoint} (written by another worker); state is never overwritten"
                ),
            });
        }
        Ok(rel)
    }

    /// A unit's state, by the path its manifest gives.
    pub async fn state(&self, rel: &str) -> Result<bytes::Bytes> {
        self.read(rel).await?.ok_or_else(|| ClusterError::Corrupt {
            location: self.shown(rel),
            detail: "a manifest lists this state, but it is missing".into(),
        })
    }

    /// Every state object, with the checkpoint it belongs to.
    async fn state_objects(&self) -> Result<Vec<(u64, Path)>> {
        let prefix = self.path("state");
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await.map_err(self.err("state"))?;
        let checkpoint =
            |location: &Path| location.prefix_match(&prefix)?.next().and_then(|part| part.as_ref().parse::<u64>().ok());
        Ok(metas.into_iter().filter_map(|m| checkpoint(&m.location).map(|n| (n, m.location))).collect())
    }

    /// The checkpoints that have state in the store.
    pub async fn state_checkpoints(&self) -> Result<std::collections::BTreeSet<u64>> {
        Ok(self.state_objects().await?.into_iter().map(|(n, _)| n).collect())
    }

    /// Delete the state of every checkpoint before `checkpoint` (once `checkpoint` is published,
    /// no one reads them again: a takeover resumes from the latest). Returns how many objects went.
    pub async fn delete_states_before(&self, checkpoint: u64) -> Result<usize> {
        let old: Vec<Path> =
            self.state_objects().await?.into_iter().filter(|(n, _)| *n < checkpoint).map(|(_, p)| p).collect();
        let count = old.len();
        // Owned futures (a store handle and a path each): this runs inside the runtime's tasks.
        let mut deletes: futures::stream::FuturesUnordered<_> = old
            .into_iter()
            .map(|path| {
                let store = self.store.clone();
                async move { (store.delete(&path).await, path) }
            })
            .collect();
        while let Some((deleted, path)) = deletes.next().await {
            match deleted {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.err(path.as_ref())(e)),
            }
        }
        Ok(count)
    }

    pub fn manifest_location(&self, checkpoint: u64) -> String {
        self.shown(&format!("manifests/{}.json", digits(checkpoint)))
    }

    /// Write manifest N, create-only. If manifest N exists already, this succeeds only if it is
    /// this very manifest (a retry); else [`ClusterError::ManifestTaken`].
    pub async fn put_manifest(&self, m: &Manifest) -> Result<()> {
        let rel = format!("manifests/{}.json", digits(m.checkpoint));
        let bytes = serde_json::to_vec_pretty(m).expect("a manifest serialises");
        if self.create(&rel, bytes).await? {
            return Ok(());
        }
        match self.manifest(m.checkpoint).await? {
            Some(existing) if existing == *m => Ok(()),
            Some(existing) => Err(ClusterError::ManifestTaken {
                checkpoint: m.checkpoint,
                location: self.shown(&rel),
                by: existing.epoch,
            }),
            None => Err(ClusterError::Store { location: self.shown(&rel), detail: "exists and does not".into() }),
        }
    }

    /// Manifest N, if written.
    pub async fn manifest(&self, checkpoint: u64) -> Result<Option<Manifest>> {
        let rel = format!("manifests/{}.json", digits(checkpoint));
        let Some(bytes) = self.read(&rel).await? else { return Ok(None) };
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ClusterError::Corrupt { location: self.shown(&rel), detail: e.to_string() })?;
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != u64::from(MANIFEST_VERSION) {
            return Err(ClusterError::Corrupt {
                location: self.shown(&rel),
                detail: format!("manifest format version {version}, this Sluice reads version {MANIFEST_VERSION}"),
            });
        }
        serde_json::from_value(value)
            .map(Some)
            .map_err(|e| ClusterError::Corrupt { location: self.shown(&rel), detail: e.to_string() })
    }

    /// Add `entry` to the journal `journal` (create-only; adding the same entry again is a
    /// no-op). Returns its key. A sink journals each label it opens, before the load starts.
    pub async fn put_entry(&self, journal: &str, entry: &[u8]) -> Result<String> {
        use sha2::Digest;
        let key: String = sha2::Sha256::digest(entry)[..12].iter().map(|b| format!("{b:02x}")).collect();
        self.create(&format!("journal/{}/{key}", safe(journal)), entry.to_vec()).await?;
        Ok(key)
    }

    /// Every entry of the journal `journal`, with its key, in key order.
    pub async fn entries(&self, journal: &str) -> Result<Vec<(String, bytes::Bytes)>> {
        let rel = format!("journal/{}", safe(journal));
        let prefix = self.path(&rel);
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await.map_err(self.err(&rel))?;
        let mut keys: Vec<String> = metas.iter().filter_map(|m| m.location.filename().map(str::to_string)).collect();
        keys.sort();
        let reads = keys.into_iter().map(|key| {
            let item = format!("{rel}/{key}");
            async move {
                // An entry deleted meanwhile (a checkpoint completed) is no longer there to read.
                Ok::<_, ClusterError>(self.read(&item).await?.map(|bytes| (key, bytes)))
            }
        });
        let read: Vec<_> = futures::stream::iter(reads).buffered(8).try_collect().await?;
        Ok(read.into_iter().flatten().collect())
    }

    /// Remove the entries `keys` from the journal `journal`.
    pub async fn delete_entries(&self, journal: &str, keys: &[String]) -> Result<()> {
        let rel = format!("journal/{}", safe(journal));
        let deletes = keys.iter().map(|key| {
            let item = format!("{rel}/{key}");
            async move {
                match self.store.delete(&self.path(&item)).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.err(&item)(e)),
                }
            }
        });
        futures::stream::iter(deletes).buffer_unordered(8).try_collect::<Vec<()>>().await.map(|_| ())
    }
}

/// A journal's name as one path segment.
fn safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}
