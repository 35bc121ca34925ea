//! From a pipeline file to a [`Prepared`] pipeline: the state dir opened, the connections the
//! components name opened once each, every component built through its entry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::Context;

use super::model::PipelineFile;
use crate::doris::DorisConnection;
use crate::metrics::Stats;
use crate::runtime::{Named, Prepared};
use crate::state::{CheckpointStore, StateDir};
use crate::wasm::{ComponentCache, PluginRuntime};

/// What a component may use while it is built.
pub struct BuildContext<'a> {
    /// The pipeline file (for messages).
    pub file: &'a Path,
    pub pipeline: &'a PipelineFile,
    /// The directory paths in the file are relative to.
    pub base_dir: PathBuf,
    /// Whether anything after the source uses the rows before updates (see
    /// [`uses_update_before`]); a source that reads them only on request leaves them out if not.
    pub update_before: bool,
    /// The pipeline's stable identity (made at its first run).
    pub pipeline_id: String,
    pub state: Arc<dyn CheckpointStore>,
    pub stats: Arc<Stats>,
    /// Set when `sluice serve` runs the pipeline for a tenant.
    pub confinement: Option<Confinement>,
    doris: tokio::sync::Mutex<HashMap<String, Arc<DorisConnection>>>,
    plugins: OnceLock<PluginRuntime>,
}

/// What `sluice serve` holds a tenant's pipeline to while it is built and runs.
#[derive(Clone)]
pub struct Confinement {
    pub tenant: String,
    /// Whether the tenant may write the Doris table `db.table` (sinks that name their tables as
    /// the rows come ask before each new one).
    pub may_write: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Where plugins are found: a pipeline names one by its file name there.
    pub plugin_dirs: Vec<PathBuf>,
    /// The largest limits a plugin instance may have.
    pub plugin_limits: crate::wasm::PluginLimits,
    /// Stream Loads of the tenant open at once.
    pub loads: Option<Arc<tokio::sync::Semaphore>>,
    /// Plugin calls of the tenant running at once (its share of the server's plugin threads).
    pub plugin_calls: Option<Arc<tokio::sync::Semaphore>>,
    /// The CPU time per minute all the tenant's plugin calls spend from.
    pub plugin_budget: Option<Arc<crate::wasm::CpuBudget>>,
}

impl std::fmt::Debug for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confinement").field("tenant", &self.tenant).finish_non_exhaustive()
    }
}

/// Whether anything after the source uses the rows before updates: a transform (a plugin may
/// read them), or a sink that writes them (Flink's changelog-mode negotiation: the Doris sink
/// drops `UPDATE_BEFORE` unless `ignore.update_before = false`).
pub fn uses_update_before(pipeline: &PipelineFile) -> bool {
    !pipeline.transform.is_empty() || pipeline.sink.iter().any(|s| s.config.writes_update_before())
}

/// Where a pipeline keeps its state and finds its relative paths.
#[derive(Debug, Clone)]
pub struct Placement {
    pub state_dir: PathBuf,
    /// The cluster this process runs the pipeline in (its state is kept there, not in `state_dir`).
    pub cluster: Option<Arc<crate::state::cluster::Clustered>>,
    pub base_dir: PathBuf,
    pub confinement: Option<Confinement>,
}

impl BuildContext<'_> {
    /// Workers of the pipeline.
    pub fn parallelism(&self) -> usize {
        self.pipeline.pipeline.parallelism as usize
    }

    /// The Doris connection named `name` (or the default one), opened once for all components.
    pub async fn doris(&self, name: Option<&str>) -> anyhow::Result<Arc<DorisConnection>> {
        let (name, section) = self.pipeline.doris(name).map_err(|e| anyhow::anyhow!("{}: {e}", self.file.display()))?;
        let mut open = self.doris.lock().await;
        if let Some(c) = open.get(name) {
            return Ok(c.clone());
        }
        let c = Arc::new(DorisConnection::open(name, section).await.with_context(|| self.file.display().to_string())?);
        open.insert(name.to_string(), c.clone());
        Ok(c)
    }

    /// The plugin runtime (one engine and component cache for every plugin).
    pub fn plugins(&self) -> anyhow::Result<&PluginRuntime> {
        if let Some(r) = self.plugins.get() {
            return Ok(r);
        }
        let runtime = PluginRuntime::new(ComponentCache::default_location())?;
        Ok(self.plugins.get_or_init(|| runtime))
    }

    /// The default Stream Load label prefix: the pipeline's name and stable id.
    pub fn default_label_prefix(&self) -> String {
        format!("sluice_{}_{}", self.pipeline.pipeline.name, self.pipeline_id).chars().take(64).collect()
    }
}

/// The state dir of a pipeline file: `pipeline.state_dir`, else `.sluice/<name>` beside the file.
pub fn state_dir_of(file: &Path, pipeline: &PipelineFile) -> PathBuf {
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    match &pipeline.pipeline.state_dir {
        Some(d) => base.join(d),
        None => base.join(".sluice").join(&pipeline.pipeline.name),
    }
}

/// What the command line says of the cluster (`sluice run --cluster/--member/--capacity`), in
/// place of `[cluster]`'s keys.
#[derive(Debug, Clone, Default)]
pub struct ClusterArgs {
    pub etcd: Option<String>,
    pub member: Option<String>,
    pub capacity: Option<u32>,
}

/// How this process joins the pipeline's cluster, if it runs in one: `[cluster]` with the
/// command line's `--cluster`/`--member` in place of its keys. The cluster's etcd keys are under
/// `/sluice/<pipeline name>`.
pub fn cluster_settings(
    file: &Path,
    pipeline: &PipelineFile,
    args: ClusterArgs,
) -> anyhow::Result<Option<crate::state::cluster::Settings>> {
    let section = pipeline.cluster.as_ref();
    let etcd = args.etcd.or_else(|| section.and_then(|c| c.etcd.clone()));
    let (etcd, section) = match (etcd, section) {
        (None, None) => return Ok(None),
        (Some(_), None) => anyhow::bail!(
            "{}: `--cluster` needs a [cluster] section with `store = \"s3://bucket/prefix\"`, where the cluster keeps its checkpoints",
            file.display()
        ),
        (None, Some(_)) => anyhow::bail!(
            "{}: [cluster] needs `etcd = \"etcd://host:2379,…\"` (or `sluice run --cluster etcd://…`)",
            file.display()
        ),
        (Some(etcd), Some(section)) => (etcd, section),
    };
    let etcd = sluice_cluster::parse_etcd_url(&etcd).with_context(|| format!("{}: cluster.etcd", file.display()))?;
    let member = args
        .member
        .or_else(|| section.member.clone())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()))
        .filter(|m| !m.is_empty() && !m.contains('/'))
        .with_context(|| format!("{}: name this process with `[cluster] member` or `--member`", file.display()))?;
    Ok(Some(crate::state::cluster::Settings {
        etcd,
        store: section.store.clone(),
        member,
        lease_ttl: section.lease_ttl.0,
        capacity: args.capacity.unwrap_or(section.capacity).max(1),
        namespace: format!("/sluice/{}", pipeline.pipeline.name),
    }))
}

/// Open the state dir and build every component: everything short of moving data.
pub async fn prepare(file: &Path, pipeline: PipelineFile) -> anyhow::Result<Prepared> {
    prepare_clustered(file, pipeline, None).await
}

/// [`prepare`], with the state kept in `cluster` when the pipeline runs in one.
pub async fn prepare_clustered(
    file: &Path,
    pipeline: PipelineFile,
    cluster: Option<Arc<crate::state::cluster::Clustered>>,
) -> anyhow::Result<Prepared> {
    let placement = Placement {
        state_dir: state_dir_of(file, &pipeline),
        cluster,
        base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        confinement: None,
    };
    prepare_in(file, pipeline, placement, Arc::new(Stats::default())).await
}

/// [`prepare`] with the state dir, the base of relative paths and the counters given.
pub async fn prepare_in(
    file: &Path,
    pipeline: PipelineFile,
    placement: Placement,
    stats: Arc<Stats>,
) -> anyhow::Result<Prepared> {
    prepare_with(file, pipeline, placement, stats, None).await
}

/// A run of part of a pipeline with another source: `sluice dlq replay`.
pub struct Replay {
    /// The run's name (its checkpoints', its dead letters').
    pub name: String,
    pub source: Named<Arc<dyn crate::runtime::Source>>,
    /// The pipeline's transform its rows enter first; none: they go straight to the sinks.
    pub from_transform: Option<String>,
}

/// [`prepare_in`] for a [`Replay`]: its source in place of the pipeline's, and of the
/// pipeline's transforms only `from_transform` and those after it.
pub async fn prepare_replay(
    file: &Path,
    pipeline: PipelineFile,
    placement: Placement,
    replay: Replay,
) -> anyhow::Result<Prepared> {
    prepare_with(file, pipeline, placement, Arc::new(Stats::default()), Some(replay)).await
}

async fn prepare_with(
    file: &Path,
    pipeline: PipelineFile,
    placement: Placement,
    stats: Arc<Stats>,
    replay: Option<Replay>,
) -> anyhow::Result<Prepared> {
    let state: Arc<dyn CheckpointStore> = match placement.cluster {
        Some(c) => c,
        None => Arc::new(StateDir::open(&placement.state_dir)?),
    };
    let pipeline_id = state.pipeline_id()?;
    let ctx = BuildContext {
        file,
        pipeline: &pipeline,
        base_dir: placement.base_dir,
        update_before: uses_update_before(&pipeline),
        pipeline_id,
        state: state.clone(),
        stats,
        confinement: placement.confinement,
        doris: Default::default(),
        plugins: OnceLock::new(),
    };
    let at = |section: &str, line: usize| format!("{}:{line}: {section}", file.display());
    let replaying = replay.is_some();
    let (name, source, mut transforms, first) = match replay {
        None => {
            let entry = &pipeline.source[0];
            let source = entry.config.build(&entry.name, &ctx).await.with_context(|| at("source", entry.line))?;
            let implied = source.implied_transforms().into_iter().map(|(name, component)| Named { name, component });
            let source = Named { name: entry.name.clone(), component: source };
            (pipeline.pipeline.name.clone(), source, implied.collect(), 0)
        }
        Some(r) => {
            let first = match &r.from_transform {
                None => pipeline.transform.len(),
                Some(t) => pipeline.transform.iter().position(|e| &e.name == t).with_context(|| {
                    format!("{}: the pipeline has no transform `{t}` (the pipeline file changed?)", file.display())
                })?,
            };
            (r.name, r.source, Vec::new(), first)
        }
    };
    for t in &pipeline.transform[first..] {
        let component = t.config.build(&t.name, &ctx).await.with_context(|| at("transform", t.line))?;
        transforms.push(Named { name: t.name.clone(), component });
    }
    let mut sinks = Vec::new();
    for s in &pipeline.sink {
        let component = s.config.build(&s.name, &ctx).await.with_context(|| at("sink", s.line))?;
        sinks.push(Named { name: s.name.clone(), component });
    }
    let dead_letter = match &pipeline.dead_letter {
        Some(d) => {
            let component = d.config.build(&d.name, &ctx).await.with_context(|| at("dead_letter", d.line))?;
            Some(Named { name: d.name.clone(), component })
        }
        None => None,
    };
    let stats = ctx.stats.clone();
    let verify = match &pipeline.verify {
        // A replay's rows are dead letters, not the source's.
        Some(v) if !replaying => {
            let shown = format!("{}: [verify]", file.display());
            let (source, target) = crate::verify::mirrors(&shown, &source, &sinks)?;
            let options = crate::verify::Options {
                samples: v.samples,
                recheck_after: Some(pipeline.pipeline.checkpoint_interval.0),
                rate: v.rate,
                ..Default::default()
            };
            Some(Arc::new(crate::verify::Periodic { every: v.every.0, source, target, options }))
        }
        _ => None,
    };
    Ok(Prepared {
        file: file.to_path_buf(),
        name,
        parallelism: pipeline.pipeline.parallelism as usize,
        checkpoint_interval: pipeline.pipeline.checkpoint_interval.0,
        checkpoint_timeout: pipeline.pipeline.checkpoint_timeout.0,
        state,
        source,
        transforms,
        sinks,
        dead_letter,
        stats,
        verify,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::uses_update_before;

    fn pipeline(transform: &str, sinks: &str) -> crate::pipeline::PipelineFile {
        let text = format!(
            r#"[pipeline]
name = "p"

[doris]
fenodes = ["127.0.0.1:8030"]

[[source]]
type = "datagen"
schema = "id BIGINT, name VARCHAR(64)"
{transform}
{sinks}"#
        );
        crate::pipeline::load_str(Path::new("pipeline.toml"), &text).expect("the pipeline loads")
    }

    const DORIS: &str = "[[sink]]\ntype = \"doris\"\ntable = \"db.t\"\n";

    #[test]
    fn rows_before_updates_are_read_only_where_a_transform_or_a_sink_uses_them() {
        assert!(!uses_update_before(&pipeline("", DORIS)), "the Doris sink drops them by default");
        let keeps = format!("{DORIS}ignore.update_before = false\n");
        assert!(uses_update_before(&pipeline("", &keeps)), "written as deletes");
        let no_deletes = format!("{keeps}enable_delete = false\n");
        assert!(!uses_update_before(&pipeline("", &no_deletes)), "no deletes, so none of them either");
        let wasm = "[[transform]]\ntype = \"wasm\"\nplugin = \"plugins/student-trans\"\n";
        assert!(uses_update_before(&pipeline(wasm, DORIS)), "a plugin may read them");
        let file = format!("{DORIS}\n[[sink]]\ntype = \"file\"\npath = \"out.jsonl\"\n");
        assert!(uses_update_before(&pipeline("", &file)), "the file sink writes every row kind");
    }
}
