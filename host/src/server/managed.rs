//! One tenant pipeline under `sluice serve`: its file, its wanted state (kept on disk, so a
//! restarted server resumes it), and the task that runs it and restarts it from its last
//! checkpoint after a failure, with the tenant's backoff.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use crate::metrics::Stats;
use crate::pipeline::{ClusterArgs, Confinement, Placement, cluster_settings, load_str_with, prepare_in};
use crate::runtime::{self, RunOptions};
use crate::state::cluster::Clustered;

use super::config::RestartPolicy;

/// What the server is asked to keep a pipeline doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    Running,
    Paused,
    Stopped,
}

/// What a pipeline is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Starting,
    Running,
    /// Waiting to restart after a failure.
    Restarting,
    Paused,
    Stopped,
    /// Every source was exhausted.
    Finished,
    /// Failed more often in a row than its tenant's `restart.max_restarts`, or failed to start.
    Failed,
}

/// What is kept beside the pipeline's file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub tenant: String,
    pub desired: Desired,
    /// The watched file it came from, relative to `pipelines_dir` (none: the API).
    #[serde(default)]
    pub watched: Option<PathBuf>,
}

/// The shape of a pipeline, for the live view.
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Graph {
    pub source: Stage,
    pub transforms: Vec<Stage>,
    pub sinks: Vec<Stage>,
}

/// What the server knows of a pipeline it holds.
pub struct Managed {
    pub id: String,
    pub tenant: String,
    pub name: String,
    /// The file as submitted.
    pub text: String,
    /// How messages name the file (never a server path).
    pub shown_as: PathBuf,
    pub dir: PathBuf,
    pub parallelism: usize,
    pub graph: Graph,
    pub stats: Arc<Stats>,
    pub status: Mutex<Status>,
    control: Mutex<Option<Control>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub state: State,
    pub desired: Desired,
    pub last_error: Option<String>,
    /// Failures in a row.
    pub failures: u32,
    #[serde(skip)]
    pub watched: Option<PathBuf>,
}

/// The running task's handles.
struct Control {
    stop: watch::Sender<bool>,
    checkpoint_now: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// What a run needs from the server.
#[derive(Clone)]
pub struct RunContext {
    pub connections: Arc<std::collections::BTreeMap<String, crate::pipeline::Connection>>,
    pub confinement: Confinement,
    pub restart: RestartPolicy,
    /// The tenant's dead-letter table, for pipelines without a `[dead_letter]`.
    pub dead_letter: Option<super::config::TenantDeadLetter>,
}

impl Managed {
    pub fn new(
        id: String,
        tenant: &str,
        text: String,
        shown_as: PathBuf,
        dir: PathBuf,
        file: &crate::pipeline::PipelineFile,
        meta: &Meta,
    ) -> Managed {
        let stage = |name: &str, kind: &str| Stage { name: name.to_string(), kind: kind.to_string() };
        let graph = Graph {
            source: stage(&file.source[0].name, file.source[0].kind),
            transforms: file.transform.iter().map(|t| stage(&t.name, t.kind)).collect(),
            sinks: file.sink.iter().map(|s| stage(&s.name, s.kind)).collect(),
        };
        Managed {
            id,
            tenant: tenant.to_string(),
            name: file.pipeline.name.clone(),
            text,
            shown_as,
            dir,
            parallelism: file.pipeline.parallelism as usize,
            graph,
            stats: Arc::new(Stats::default()),
            status: Mutex::new(Status {
                state: State::Stopped,
                desired: meta.desired,
                last_error: None,
                failures: 0,
                watched: meta.watched.clone(),
            }),
            control: Mutex::new(None),
        }
    }

    pub fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Keep the wanted state on disk.
    pub fn save_meta(&self) -> anyhow::Result<()> {
        let s = self.status();
        let meta = Meta { tenant: self.tenant.clone(), desired: s.desired, watched: s.watched };
        write_atomic(&self.dir.join("meta.json"), &serde_json::to_vec_pretty(&meta)?)
    }

    pub fn is_running(&self) -> bool {
        self.control.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|c| !c.task.is_finished())
    }

    /// Start its task (if it is not running).
    pub fn start(self: &Arc<Self>, ctx: RunContext) {
        let mut control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        if control.as_ref().is_some_and(|c| !c.task.is_finished()) {
            return;
        }
        let (stop, stop_rx) = watch::channel(false);
        let checkpoint_now = Arc::new(Notify::new());
        self.set(|s| {
            s.desired = Desired::Running;
            s.state = State::Starting;
            s.failures = 0;
        });
        let me = self.clone();
        let now = checkpoint_now.clone();
        let task = tokio::spawn(async move { me.supervise(ctx, stop_rx, now).await });
        *control = Some(Control { stop, checkpoint_now, task });
    }

    /// Stop its task after a final checkpoint, leaving it `to` (paused or stopped).
    pub async fn halt(&self, to: Desired) {
        self.set(|s| s.desired = to);
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(c) = control {
            let _ = c.stop.send(true);
            let _ = c.task.await;
        }
        self.set(|s| {
            if s.state != State::Finished && s.state != State::Failed {
                s.state = if to == Desired::Paused { State::Paused } else { State::Stopped };
            }
        });
    }

    /// Take a checkpoint now; the id of the checkpoint completed after the call.
    pub async fn savepoint(&self, within: Duration) -> anyhow::Result<u64> {
        let before = self.stats.checkpoints.load(Ordering::Relaxed);
        let Some(now) =
            self.control.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|c| c.checkpoint_now.clone())
        else {
            anyhow::bail!("pipeline `{}` is not running; resume it first", self.id);
        };
        now.notify_one();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.stats.checkpoints.load(Ordering::Relaxed) > before {
                return Ok(self.stats.history().last().map_or(0, |c| c.id));
            }
            if tokio::time::Instant::now() > deadline || !self.is_running() {
                anyhow::bail!("pipeline `{}` took no checkpoint within {within:?}; see its last_error", self.id);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Run until stopped or finished; a failure restarts it from its last checkpoint after the
    /// tenant's backoff, up to `max_restarts` failures in a row.
    async fn supervise(self: Arc<Self>, ctx: RunContext, mut stop: watch::Receiver<bool>, now: Arc<Notify>) {
        let mut wait = ctx.restart.backoff.0;
        loop {
            let checkpoints = self.stats.checkpoints.load(Ordering::Relaxed);
            let result = self.run_once(&ctx, stop.clone(), now.clone()).await;
            if *stop.borrow() {
                return;
            }
            match result {
                Ok(finished) => {
                    self.set(|s| s.state = if finished { State::Finished } else { State::Stopped });
                    return;
                }
                Err(e) => {
                    let text = format!("{e:#}");
                    tracing::warn!(tenant = %self.tenant, pipeline = %self.id, "{text}");
                    if self.stats.checkpoints.load(Ordering::Relaxed) > checkpoints {
                        self.set(|s| s.failures = 0);
                        wait = ctx.restart.backoff.0;
                    }
                    let failures = {
                        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                        s.failures += 1;
                        s.last_error = Some(text);
                        s.failures
                    };
                    if failures > ctx.restart.max_restarts {
                        self.set(|s| s.state = State::Failed);
                        return;
                    }
                    self.set(|s| s.state = State::Restarting);
                    self.stats.restarts.fetch_add(1, Ordering::Relaxed);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.changed() => return,
                    }
                    wait = (wait * 2).min(ctx.restart.max_backoff.0);
                }
            }
        }
    }

    async fn run_once(&self, ctx: &RunContext, stop: watch::Receiver<bool>, now: Arc<Notify>) -> anyhow::Result<bool> {
        let mut file = load_str_with(&self.shown_as, &self.text, Some(&ctx.connections))?;
        if let Some(d) = &ctx.dead_letter {
            d.apply(&mut file)?;
        }
        // A clustered pipeline: this server is a member of its cluster, its keys apart from other
        // tenants' (the store was granted at the door).
        let cluster = match cluster_settings(&self.shown_as, &file, ClusterArgs::default())? {
            Some(mut settings) => {
                settings.namespace = format!("/sluice/{}/{}", self.tenant, file.pipeline.name);
                Some(Arc::new(Clustered::join(&settings).await?))
            }
            None => None,
        };
        let placement = Placement {
            cluster: cluster.clone(),
            state_dir: self.dir.join("state"),
            base_dir: self.dir.clone(),
            confinement: Some(ctx.confinement.clone()),
        };
        let run = async {
            let prepared = prepare_in(&self.shown_as, file, placement, self.stats.clone()).await?;
            self.set(|s| s.state = State::Running);
            let opts = RunOptions { quiet: true, status_interval: None, checkpoint_now: Some(now) };
            runtime::run(&prepared, &opts, stop).await
        };
        let report = run.await;
        if let Some(c) = cluster {
            // Leave at once: another member leads without waiting for the lease to run out.
            c.leave().await;
        }
        let report = report?;
        Ok(report.finished)
    }
}

/// Write `bytes` to `path` so that a crash leaves the old or the new file, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
