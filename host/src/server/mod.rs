//! `sluice serve`: many tenants' pipelines in one process. Tenants, their tokens, grants and
//! quotas come from `server.toml` ([`config`]); a pipeline is checked against its tenant's grants
//! before it runs ([`grant`]) and runs confined to them ([`crate::pipeline::Confinement`]);
//! each is supervised on its own ([`managed`]); the REST API, `/metrics` and the live view are in
//! [`api`].

pub mod api;
pub mod config;
pub mod grant;
pub mod managed;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::Digest;

use crate::metrics::Pipelines;
use crate::pipeline::{Confinement, Connection, PipelineFile, load_str_with};
use config::{ServerConfig, TenantConfig};
use managed::{Desired, Managed, Meta, RunContext, State};

/// An API error: the HTTP status and what to tell the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub message: String,
    /// Each thing a grant refuses, when that is the reason.
    pub refused: Vec<String>,
    /// Seconds to wait before asking again (a quota of calls).
    pub retry_after: Option<u64>,
}

impl Refused {
    pub fn new(status: u16, message: impl Into<String>) -> Refused {
        Refused { status, message: message.into(), refused: Vec::new(), retry_after: None }
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Admin,
    Tenant(String),
}

/// A tenant, ready to run pipelines.
pub struct Tenant {
    pub name: String,
    pub cfg: TenantConfig,
    /// The connections it is granted (by name).
    pub granted: Arc<BTreeMap<String, Connection>>,
    pub confinement: Confinement,
    /// Its `api_writes_per_minute`, when it has one.
    pub api_writes: Option<crate::wasm::PerMinute>,
}

/// The server.
pub struct Server {
    pub cfg: ServerConfig,
    pub data_dir: PathBuf,
    /// Every connection the server holds (secrets resolved by the components that open them).
    pub connections: BTreeMap<String, Connection>,
    pub tenants: BTreeMap<String, Tenant>,
    pipelines: Mutex<BTreeMap<String, Arc<Managed>>>,
    pub metrics: Pipelines,
}

fn sha256_hex(s: &str) -> String {
    sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl Server {
    /// The server of `cfg`, whose connections are `connections` (an embedded Doris resolved to
    /// its address).
    pub fn new(cfg: ServerConfig, connections: BTreeMap<String, Connection>) -> anyhow::Result<Arc<Server>> {
        let data_dir = cfg.path(&cfg.server.data_dir);
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| anyhow::anyhow!("server.data_dir {}: cannot create it: {e}", data_dir.display()))?;
        let threads =
            cfg.server.plugin_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        // An even share of the plugin threads each, so one tenant's busy plugins leave the others
        // theirs.
        let share = (threads / cfg.tenants.len().max(1)).max(1);
        let mut tenants = BTreeMap::new();
        for (name, t) in &cfg.tenants {
            let granted: BTreeMap<String, Connection> =
                t.connections.iter().filter_map(|c| connections.get(c).map(|v| (c.clone(), v.clone()))).collect();
            let tables = grant::Tables::of(t);
            let mut plugin_dirs = vec![data_dir.join("tenants").join(name).join("plugins")];
            plugin_dirs.extend(cfg.server.plugin_dir.as_ref().map(|d| cfg.path(d)));
            let confinement = Confinement {
                tenant: name.clone(),
                may_write: Arc::new(move |table: &str| tables.may_write(table)),
                plugin_dirs,
                plugin_limits: t.plugin_limits(),
                loads: t.max_stream_loads.map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
                plugin_calls: Some(Arc::new(tokio::sync::Semaphore::new(share))),
                plugin_budget: t.plugin_cpu_per_minute.map(|c| Arc::new(crate::wasm::CpuBudget::new(c.0))),
            };
            tenants.insert(
                name.clone(),
                Tenant {
                    name: name.clone(),
                    cfg: t.clone(),
                    granted: Arc::new(granted),
                    confinement,
                    api_writes: t.api_writes_per_minute.map(|n| crate::wasm::PerMinute::new(n as f64)),
                },
            );
        }
        let metrics = Pipelines::default();
        for t in tenants.values() {
            if let Some(b) = &t.confinement.plugin_budget {
                metrics.add_budget(&t.name, b.clone());
            }
        }
        Ok(Arc::new(Server { cfg, data_dir, connections, tenants, pipelines: Mutex::new(BTreeMap::new()), metrics }))
    }

    /// Count one call of `caller` that changes something against its tenant's
    /// `api_writes_per_minute` (429 beyond it).
    pub fn write_call(&self, caller: &Caller) -> Result<(), Refused> {
        let Caller::Tenant(name) = caller else { return Ok(()) };
        let Some(t) = self.tenants.get(name) else { return Ok(()) };
        let (Some(quota), Some(bucket)) = (t.cfg.api_writes_per_minute, &t.api_writes) else { return Ok(()) };
        bucket.try_spend(1.0).map_err(|wait| {
            let secs = wait.as_secs() + 1;
            let mut r = Refused::new(
                429,
                format!("tenant `{name}` has made its {quota} API calls that change something this minute (api_writes_per_minute); try again in {secs} s"),
            );
            r.retry_after = Some(secs);
            r
        })
    }

    /// The caller a bearer token belongs to.
    pub fn caller(&self, token: Option<&str>) -> Result<Caller, Refused> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(Refused::new(401, "no token: send `Authorization: Bearer <token>`"));
        };
        let hash = sha256_hex(token);
        if self.cfg.server.admin_token_sha256.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&hash)) {
            return Ok(Caller::Admin);
        }
        match self.tenants.values().find(|t| t.cfg.token_sha256.eq_ignore_ascii_case(&hash)) {
            Some(t) => Ok(Caller::Tenant(t.name.clone())),
            None => Err(Refused::new(401, "the token is not one of this server's")),
        }
    }

    /// The pipelines `caller` may see.
    pub fn visible(&self, caller: &Caller) -> Vec<Arc<Managed>> {
        let all = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        all.values()
            .filter(|m| matches!(caller, Caller::Admin) || *caller == Caller::Tenant(m.tenant.clone()))
            .cloned()
            .collect()
    }

    /// Pipeline `id`, if `caller` may see it (else 404, as if it did not exist).
    pub fn get(&self, caller: &Caller, id: &str) -> Result<Arc<Managed>, Refused> {
        let all = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        match all.get(id) {
            Some(m) if matches!(caller, Caller::Admin) || *caller == Caller::Tenant(m.tenant.clone()) => Ok(m.clone()),
            _ => Err(Refused::new(404, format!("there is no pipeline `{id}`"))),
        }
    }

    fn tenant(&self, name: &str) -> Result<&Tenant, Refused> {
        self.tenants.get(name).ok_or_else(|| Refused::new(403, format!("there is no tenant `{name}`")))
    }

    fn pipeline_dir(&self, tenant: &str, name: &str) -> PathBuf {
        self.data_dir.join("tenants").join(tenant).join("pipelines").join(name)
    }

    /// Where tenant `name`'s uploaded plugins are kept.
    pub fn plugin_upload_dir(&self, tenant: &str) -> PathBuf {
        self.data_dir.join("tenants").join(tenant).join("plugins")
    }

    /// Read `text` as tenant `tenant`'s pipeline and check it against its grants and quotas.
    fn check(
        &self,
        tenant: &Tenant,
        text: &str,
        shown_as: &Path,
        replacing: Option<&str>,
    ) -> Result<PipelineFile, Refused> {
        let mut file = load_str_with(shown_as, text, Some(&tenant.granted)).map_err(|e| {
            // A connection of the server's that this tenant is not granted.
            let named = e.message.strip_prefix("there is no connection `").and_then(|r| r.split('`').next());
            match named {
                Some(c) if self.connections.contains_key(c) => {
                    let mut e = e.clone();
                    e.message = format!("connection `{c}` is not granted to tenant `{}`", tenant.name);
                    Refused::new(403, e.to_string())
                }
                _ => Refused::new(400, e.to_string()),
            }
        })?;
        grant::check(&tenant.name, &tenant.cfg, &file, shown_as, &tenant.confinement.plugin_dirs).map_err(|r| {
            Refused {
                status: 403,
                message: format!("tenant `{}` is not granted what this pipeline reaches", tenant.name),
                refused: r.into_iter().map(|r| r.0).collect(),
                retry_after: None,
            }
        })?;
        if let Some(d) = &tenant.cfg.dead_letter {
            d.apply(&mut file).map_err(|e| Refused::new(500, format!("{e:#}")))?;
        }
        let id = format!("{}.{}", tenant.name, file.pipeline.name);
        let all = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if all.contains_key(&id) && replacing != Some(id.as_str()) {
            return Err(Refused::new(
                409,
                format!("pipeline `{id}` exists; delete it first, or give this one another `pipeline.name`"),
            ));
        }
        let mine: Vec<&Arc<Managed>> =
            all.values().filter(|m| m.tenant == tenant.name && Some(m.id.as_str()) != replacing).collect();
        if mine.len() >= tenant.cfg.max_pipelines {
            return Err(Refused::new(
                403,
                format!(
                    "tenant `{}` has {} pipelines, its limit (`max_pipelines`); delete one first",
                    tenant.name,
                    mine.len()
                ),
            ));
        }
        let workers: usize =
            mine.iter().filter(|m| m.status().desired == Desired::Running).map(|m| m.parallelism).sum();
        let asked = file.pipeline.parallelism as usize;
        if workers + asked > tenant.cfg.max_workers {
            return Err(Refused::new(
                403,
                format!(
                    "pipeline.parallelism: {asked} more workers would make {} for tenant `{}`, above its `max_workers` ({}); lower the parallelism or pause a pipeline",
                    workers + asked,
                    tenant.name,
                    tenant.cfg.max_workers
                ),
            ));
        }
        Ok(file)
    }

    fn run_context(&self, tenant: &Tenant) -> RunContext {
        RunContext {
            connections: tenant.granted.clone(),
            confinement: tenant.confinement.clone(),
            restart: tenant.cfg.restart.clone(),
            dead_letter: tenant.cfg.dead_letter.clone(),
        }
    }

    /// Take tenant `tenant`'s pipeline `text` and start it. `shown_as` names it in messages;
    /// `watched` is the file of `pipelines_dir` it came from.
    pub fn submit(
        &self,
        tenant: &str,
        text: &str,
        shown_as: &Path,
        watched: Option<PathBuf>,
    ) -> Result<Arc<Managed>, Refused> {
        let t = self.tenant(tenant)?;
        let replacing = watched.as_ref().and_then(|w| self.watched(w)).map(|m| m.id.clone());
        let file = self.check(t, text, shown_as, replacing.as_deref())?;
        let id = format!("{tenant}.{}", file.pipeline.name);
        let dir = self.pipeline_dir(tenant, &file.pipeline.name);
        let meta = Meta { tenant: tenant.to_string(), desired: Desired::Running, watched };
        let internal = |e: anyhow::Error| Refused::new(500, format!("cannot keep pipeline `{id}`: {e:#}"));
        std::fs::create_dir_all(&dir).map_err(|e| internal(e.into()))?;
        managed::write_atomic(&dir.join("pipeline.toml"), text.as_bytes()).map_err(internal)?;
        let m = Arc::new(Managed::new(id.clone(), tenant, text.to_string(), shown_as.to_path_buf(), dir, &file, &meta));
        m.save_meta().map_err(internal)?;
        self.add(m.clone());
        m.start(self.run_context(t));
        tracing::info!(tenant, pipeline = %id, "submitted");
        Ok(m)
    }

    fn add(&self, m: Arc<Managed>) {
        let labels = vec![("tenant".to_string(), m.tenant.clone()), ("pipeline".to_string(), m.name.clone())];
        self.metrics.add(&m.id, labels, m.stats.clone());
        self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).insert(m.id.clone(), m);
    }

    fn watched(&self, rel: &Path) -> Option<Arc<Managed>> {
        let all = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        all.values().find(|m| m.status().watched.as_deref() == Some(rel)).cloned()
    }

    /// Pause, resume, stop or delete pipeline `m`.
    pub async fn control(&self, m: &Arc<Managed>, action: &str) -> Result<(), Refused> {
        match action {
            "pause" => m.halt(Desired::Paused).await,
            "stop" => m.halt(Desired::Stopped).await,
            "resume" => {
                let t = self.tenant(&m.tenant)?;
                if !m.is_running() {
                    let others: usize = self
                        .visible(&Caller::Tenant(m.tenant.clone()))
                        .iter()
                        .filter(|o| o.id != m.id && o.status().desired == Desired::Running)
                        .map(|o| o.parallelism)
                        .sum();
                    if others + m.parallelism > t.cfg.max_workers {
                        return Err(Refused::new(
                            403,
                            format!(
                                "resuming `{}` would give tenant `{}` more workers than its `max_workers` ({})",
                                m.id, m.tenant, t.cfg.max_workers
                            ),
                        ));
                    }
                    m.start(self.run_context(t));
                }
            }
            "delete" => {
                m.halt(Desired::Stopped).await;
                self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).remove(&m.id);
                self.metrics.remove(&m.id);
                let _ = std::fs::remove_dir_all(&m.dir);
                return Ok(());
            }
            other => return Err(Refused::new(404, format!("no action `{other}`: pause, resume, stop or savepoint"))),
        }
        m.save_meta().map_err(|e| Refused::new(500, format!("{e:#}")))
    }

    /// Take up again the pipelines kept in the data dir: those left running start from their
    /// last checkpoints.
    pub fn restore(&self) {
        let root = self.data_dir.join("tenants");
        let Ok(tenants) = std::fs::read_dir(&root) else { return };
        for dir in tenants
            .flatten()
            .flat_map(|t| std::fs::read_dir(t.path().join("pipelines")).into_iter().flatten().flatten())
        {
            let dir = dir.path();
            let read = || -> anyhow::Result<(Meta, String)> {
                let meta: Meta = serde_json::from_slice(&std::fs::read(dir.join("meta.json"))?)?;
                Ok((meta, std::fs::read_to_string(dir.join("pipeline.toml"))?))
            };
            let Ok((meta, text)) = read() else { continue };
            let Some(t) = self.tenants.get(&meta.tenant) else {
                tracing::warn!(
                    "{}: tenant `{}` is no longer in the server file; left alone",
                    dir.display(),
                    meta.tenant
                );
                continue;
            };
            if let Some(w) = &meta.watched
                && !self.watch_root().is_some_and(|r| r.join(w).is_file())
            {
                continue;
            }
            let shown_as = meta.watched.clone().unwrap_or_else(|| PathBuf::from("pipeline.toml"));
            let file = match self.check(t, &text, &shown_as, None) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(tenant = %meta.tenant, "{}: no longer allowed: {} {}", dir.display(), e.message, e.refused.join("; "));
                    continue;
                }
            };
            let id = format!("{}.{}", meta.tenant, file.pipeline.name);
            let m = Arc::new(Managed::new(id, &meta.tenant, text, shown_as, dir.clone(), &file, &meta));
            self.add(m.clone());
            match meta.desired {
                Desired::Running => m.start(self.run_context(t)),
                Desired::Paused => m.status.lock().unwrap_or_else(|p| p.into_inner()).state = State::Paused,
                Desired::Stopped => {}
            }
        }
    }

    fn watch_root(&self) -> Option<PathBuf> {
        self.cfg.server.pipelines_dir.as_ref().map(|d| self.cfg.path(d))
    }

    /// One look at `pipelines_dir`: new files start, changed ones restart, removed ones stop.
    /// `failed` remembers files already refused (by their text), so each is reported once.
    pub async fn rescan(&self, failed: &mut BTreeMap<PathBuf, String>) {
        let Some(root) = self.watch_root() else { return };
        let mut seen = Vec::new();
        for tenant in self.tenants.keys() {
            let Ok(files) = std::fs::read_dir(root.join(tenant)) else { continue };
            for f in files.flatten() {
                let path = f.path();
                if path.extension().is_none_or(|e| e != "toml") {
                    continue;
                }
                let rel = PathBuf::from(tenant).join(f.file_name());
                seen.push(rel.clone());
                let Ok(text) = std::fs::read_to_string(&path) else { continue };
                let current = self.watched(&rel);
                if current.as_ref().is_some_and(|m| m.text == text) || failed.get(&rel) == Some(&text) {
                    continue;
                }
                if let Some(old) = &current {
                    old.halt(Desired::Stopped).await;
                }
                match self.submit(tenant, &text, &rel, Some(rel.clone())) {
                    Ok(_) => {
                        failed.remove(&rel);
                    }
                    Err(e) => {
                        tracing::error!(tenant, "{}: {} {}", rel.display(), e.message, e.refused.join("; "));
                        failed.insert(rel, text);
                    }
                }
            }
        }
        let gone: Vec<Arc<Managed>> = {
            let all = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
            all.values().filter(|m| m.status().watched.is_some_and(|w| !seen.contains(&w))).cloned().collect()
        };
        for m in gone {
            tracing::info!(pipeline = %m.id, "its file was removed: stopping it");
            m.halt(Desired::Stopped).await;
            let _ = m.save_meta();
            self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).remove(&m.id);
            self.metrics.remove(&m.id);
        }
    }

    /// Stop every pipeline after a final checkpoint, keeping what each was asked to do (so the
    /// next start resumes them).
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Managed>> =
            self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let halts = all.iter().map(|m| async move {
            let desired = m.status().desired;
            m.halt(desired).await;
            let _ = m.save_meta();
        });
        futures::future::join_all(halts).await;
    }
}
