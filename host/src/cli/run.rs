//! `sluice run` and `sluice check`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use tokio::sync::watch;

use super::embedded;
use crate::pipeline::{PipelineFile, load_file};
use crate::runtime::{self, Prepared, RunOptions, Stats};

/// The FE addresses to use, starting the embedded doris-lite when asked for; then a missing
/// `jdbc_url` is the embedded server's MySQL port (for lookups and `changelog.offset_table`).
async fn connect(
    file: &Path,
    pipeline: &mut PipelineFile,
) -> anyhow::Result<(Vec<String>, Option<embedded::EmbeddedDoris>)> {
    let doris = pipeline.doris.as_ref().context("a Doris sink needs a [doris] section with `fenodes`")?;
    if doris.fenodes.is_embedded() {
        let init_sql = doris.init_sql.clone();
        let handle = embedded::EmbeddedDoris::start(runtime::state_dir_of(file, pipeline).join("doris-lite")).await?;
        if let Some(init) = &init_sql {
            embedded::run_init_sql(file, init, &handle.client()?).await?;
        }
        if let Some(doris) = pipeline.doris.as_mut() {
            doris.jdbc_url.get_or_insert_with(|| handle.jdbc_url());
        }
        Ok((vec![handle.fe_http_addr().to_string()], Some(handle)))
    } else {
        Ok((doris.fenodes.addresses(), None))
    }
}

/// `sluice run`: run until the sources are exhausted, or until SIGINT/SIGTERM (a final checkpoint
/// is taken and committed; a second signal exits at once, which is still safe).
pub fn run(file: PathBuf, quiet: bool, metrics_addr: Option<SocketAddr>) -> anyhow::Result<()> {
    let mut pipeline = load_file(&file)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let (fenodes, embedded) = connect(&file, &mut pipeline).await?;
        let started = std::time::Instant::now();
        let prepared = runtime::prepare(&file, pipeline, fenodes).await?;
        if let Some(addr) = metrics_addr {
            serve_metrics(addr, prepared.stats.clone(), &prepared.pipeline.pipeline.name).await?;
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stop_tx.send(true);
            wait_for_signal().await;
            eprintln!("second signal: exiting now; the next run recovers from the last checkpoint");
            std::process::exit(130);
        });
        let opts = RunOptions { quiet, status_interval: None };
        let report = runtime::run(&prepared, &opts, stop_rx).await?;
        let s = &prepared.stats;
        if !quiet {
            eprintln!(
                "{} at checkpoint {}: {} rows read, {} rows written, {} loads committed, {} bytes loaded in {:.3} s",
                if report.finished { "finished" } else { "stopped" },
                report.checkpoint,
                s.rows_read.load(Ordering::Relaxed),
                s.rows_written.load(Ordering::Relaxed),
                s.txns_committed.load(Ordering::Relaxed),
                s.sink.total_flush_load_bytes.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64(),
            );
        }
        if let Some(h) = embedded {
            // A local run ends by showing what it wrote, as `mysql` would.
            if report.finished {
                let client = h.client()?;
                for s in &prepared.sinks {
                    embedded::print_table(&client, &format!("{}.{}", s.default_db, s.default_table)).await?;
                }
            }
            h.stop().await;
        }
        Ok(())
    })
}

async fn wait_for_signal() {
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

/// The counters in Prometheus' text format, named as the Flink connector names them.
pub fn metrics_text(stats: &Stats, pipeline: &str) -> String {
    let mut out = String::new();
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let mut put = |name: &str, help: &str, v: u64| {
        out.push_str(&format!(
            "# HELP sluice_{name} {help}\n# TYPE sluice_{name} counter\nsluice_{name}{{pipeline=\"{pipeline}\"}} {v}\n"
        ));
    };
    put("rows_read", "Rows read by the sources.", g(&stats.rows_read));
    put("rows_transformed", "Rows out of the transforms.", g(&stats.rows_transformed));
    put("rows_written", "Rows handed to the sinks.", g(&stats.rows_written));
    put("checkpoints", "Checkpoints completed.", g(&stats.checkpoints));
    put("txns_committed", "Stream Load transactions committed.", g(&stats.txns_committed));
    put("restarts", "Restarts from the last checkpoint after a failure.", g(&stats.restarts));
    for (name, v) in stats.sink.values() {
        put(name, "Doris sink (Flink connector metric name).", v);
    }
    for (table, metrics) in &stats.lookups {
        for (name, help, v) in metrics.values() {
            out.push_str(&format!(
                "# HELP sluice_{name} {help}\n# TYPE sluice_{name} counter\nsluice_{name}{{pipeline=\"{pipeline}\",table=\"{table}\"}} {v}\n"
            ));
        }
    }
    out
}

/// `sluice check`: validate the file, load the plugins, connect to Doris, check the target tables
/// and that the transforms' output fits them, and print the plan. Moves no data.
pub fn check(file: PathBuf) -> anyhow::Result<()> {
    let mut pipeline = load_file(&file)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let (fenodes, embedded) = connect(&file, &mut pipeline).await?;
        let prepared = runtime::prepare(&file, pipeline, fenodes).await?;
        let result = check_prepared(&prepared).await;
        if let Some(h) = embedded {
            h.stop().await;
        }
        result
    })
}

async fn check_prepared(p: &Prepared) -> anyhow::Result<()> {
    let file = p.file.display();
    let mut schema = p.source_schema.clone();
    println!(
        "pipeline {} (parallelism {}, checkpoint every {})",
        p.pipeline.pipeline.name,
        p.pipeline.pipeline.parallelism,
        humantime::format_duration(p.pipeline.pipeline.checkpoint_interval.0)
    );
    println!("  source: {}", describe_schema(&schema));
    for t in &p.transforms {
        let inst = tokio::task::block_in_place(|| t.instance(&schema)).with_context(|| format!("{file}: transform"))?;
        schema = inst.output_schema().clone();
        println!("  transform {} → {}", t.describe(), describe_schema(&schema));
    }
    for (i, s) in p.sinks.iter().enumerate() {
        let info = p.client.table_info(&s.default_db, &s.default_table).await?;
        let missing: Vec<&str> = schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .filter(|c| !info.columns.iter().any(|t| t.eq_ignore_ascii_case(c)))
            .collect();
        if !missing.is_empty() && !s.user_columns {
            anyhow::bail!(
                "{file}: sink {}: table `{}.{}` has no column {}; its columns are {}",
                i + 1,
                s.default_db,
                s.default_table,
                missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
                info.columns.join(", ")
            );
        }
        let mode = match (&s.batch_mode, s.two_phase) {
            (Some(_), _) => "batch mode, retries keep their label",
            (None, true) => "exactly-once (2PC at checkpoints)",
            (None, false) => "at-least-once (loads committed at checkpoints)",
        };
        println!(
            "  sink {}.{} ({}, {mode}, format {}, label prefix {})",
            s.default_db, s.default_table, info.keys_type, s.format, s.label_prefix
        );
    }
    println!("ok");
    Ok(())
}

fn describe_schema(schema: &arrow::datatypes::Schema) -> String {
    sluice_guest::types::columns_of(schema)
        .map(|c| sluice_guest::types::format_columns(&c))
        .unwrap_or_else(|e| e.message)
}
