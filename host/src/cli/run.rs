//! `sluice run` and `sluice check`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use tokio::sync::watch;

use super::embedded;
use crate::metrics::{Stats, metrics_text};
use crate::pipeline::{ClusterArgs, PipelineFile, cluster_settings, load_file, prepare, state_dir_of};
use crate::runtime::{self, Prepared, RunOptions};

/// Start the embedded doris-lite when a Doris connection asks for it (`fenodes = "embedded"`):
/// that connection then points at it, and a missing `jdbc_url` is its MySQL port (for lookups
/// and `changelog.offset_table`).
pub(super) async fn connect(
    file: &Path,
    pipeline: &mut PipelineFile,
) -> anyhow::Result<Option<embedded::EmbeddedDoris>> {
    let data_dir = state_dir_of(file, pipeline).join("doris-lite");
    let Some(doris) = pipeline.embedded_doris_mut() else { return Ok(None) };
    let handle = embedded::EmbeddedDoris::start(data_dir).await?;
    if let Some(init) = &doris.init_sql {
        embedded::run_init_sql(file, init, &handle.client()?).await?;
    }
    doris.fenodes = crate::pipeline::FeNodes::List(vec![handle.fe_http_addr().to_string()]);
    doris.jdbc_url.get_or_insert_with(|| handle.jdbc_url());
    Ok(Some(handle))
}

/// `sluice run`: run until the sources are exhausted, or until SIGINT/SIGTERM (a final checkpoint
/// is taken and committed; a second signal exits at once, which is still safe).
pub fn run(file: PathBuf, quiet: bool, metrics_addr: Option<SocketAddr>, cluster: ClusterArgs) -> anyhow::Result<()> {
    let pipeline = load_file(&file)?;
    run_pipeline(file, pipeline, quiet, metrics_addr, cluster)
}

/// Run `pipeline`, read from `file` (paths and the state dir are relative to it).
pub fn run_pipeline(
    file: PathBuf,
    mut pipeline: PipelineFile,
    quiet: bool,
    metrics_addr: Option<SocketAddr>,
    cluster: ClusterArgs,
) -> anyhow::Result<()> {
    let cluster = cluster_settings(&file, &pipeline, cluster)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stop_tx.send(true);
            wait_for_signal().await;
            eprintln!("second signal: exiting now; the next run recovers from the last checkpoint");
            std::process::exit(130);
        });
        let clustered = match &cluster {
            Some(settings) => Some(Arc::new(crate::state::cluster::Clustered::join(settings).await?)),
            None => None,
        };
        let embedded = connect(&file, &mut pipeline).await?;
        let started = std::time::Instant::now();
        let prepared = crate::pipeline::prepare_clustered(&file, pipeline, clustered.clone()).await?;
        if let Some(addr) = metrics_addr {
            serve_metrics(addr, prepared.stats.clone(), &prepared.name).await?;
        }
        let opts = RunOptions { quiet, status_interval: None, ..Default::default() };
        let report = runtime::run(&prepared, &opts, stop_rx).await?;
        if !report.led {
            // A member that only ran units: the leader reports the pipeline.
            return Ok(());
        }
        let s = &prepared.stats;
        if !quiet {
            eprintln!(
                "{} at checkpoint {}: {} rows read, {} rows written, {} loads committed, {} bytes loaded in {:.3} s",
                if report.finished { "finished" } else { "stopped" },
                report.checkpoint,
                s.rows_read.load(Ordering::Relaxed),
                s.rows_written.load(Ordering::Relaxed),
                s.txns_committed.load(Ordering::Relaxed),
                s.loads().bytes,
                started.elapsed().as_secs_f64(),
            );
        }
        if let Some(h) = embedded {
            // A local run ends by showing what it wrote, as `mysql` would.
            if report.finished {
                let client = h.client()?;
                for table in prepared.sinks.iter().flat_map(|s| s.component.written_tables()) {
                    embedded::print_table(&client, &table).await?;
                }
            }
            h.stop().await;
        }
        if let Some(c) = clustered {
            // Leave at once: a standby takes over without waiting for the lease to run out.
            c.leave().await;
        }
        Ok(())
    })
}

pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Prometheus text exposition of the run's counters on `addr`/metrics.
async fn serve_metrics(addr: SocketAddr, stats: Arc<Stats>, pipeline: &str) -> anyhow::Result<()> {
    let pipeline = pipeline.to_string();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let stats = stats.clone();
            let pipeline = pipeline.clone();
            async move { metrics_text(&stats, &pipeline) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("--metrics-addr {addr}"))?;
    eprintln!("metrics: http://{}/metrics", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(())
}

/// `sluice check`: validate the file, load the plugins, connect to Doris, check the target tables
/// and that the transforms' output fits them, and print the plan. Moves no data.
pub fn check(file: PathBuf) -> anyhow::Result<()> {
    let mut pipeline = load_file(&file)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let embedded = connect(&file, &mut pipeline).await?;
        let prepared = prepare(&file, pipeline).await?;
        let result = check_prepared(&prepared).await;
        if let Some(h) = embedded {
            h.stop().await;
        }
        result
    })
}

async fn check_prepared(p: &Prepared) -> anyhow::Result<()> {
    let file = p.file.display();
    println!(
        "pipeline {} (parallelism {}, checkpoint every {})",
        p.name,
        p.parallelism,
        humantime::format_duration(p.checkpoint_interval)
    );
    let mut schema = p.source.component.schema();
    match &schema {
        Some(s) => println!("  source: {}", describe_schema(s)),
        None => println!("  source: {} (tables and schemas as they arrive)", p.source.component.describe()),
    }
    let table = runtime::TableId::new(p.source.name.as_str());
    for t in &p.transforms {
        let Some(input) = schema.clone() else {
            println!("  transform {}", t.component.describe());
            continue;
        };
        let inst = tokio::task::block_in_place(|| t.component.instance(0, &table, &input, None))
            .with_context(|| format!("{file}: transform"))?;
        schema = Some(inst.output_schema().clone());
        println!("  transform {} → {}", t.component.describe(), describe_schema(inst.output_schema()));
    }
    for (i, s) in p.sinks.iter().enumerate() {
        let line = s.component.check(schema.as_ref()).await.with_context(|| format!("{file}: sink {}", i + 1))?;
        println!("  sink {line}");
    }
    println!("ok");
    Ok(())
}

fn describe_schema(schema: &arrow::datatypes::Schema) -> String {
    sluice_guest::types::columns_of(schema)
        .map(|c| sluice_guest::types::format_columns(&c))
        .unwrap_or_else(|e| e.message)
}
