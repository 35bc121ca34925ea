//! `sluice verify pipeline.toml` (and the sync commands' `--verify`): compare every table the
//! pipeline mirrors with its Doris copy and say where they differ; exit 0 only when all agree.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::pipeline::{PipelineFile, load_file};
use crate::verify::{Options, TableReport, verify_file};

/// The flags of `sluice verify` (and of `--verify` on the sync commands).
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Differences listed per table (every one is counted).
    #[arg(long, default_value_t = 10)]
    pub samples: usize,
    /// How long to wait before reading differing rows again, which may still be on their way
    /// (default: the pipeline's checkpoint interval; `0s`: never).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub recheck_after: Option<std::time::Duration>,
    /// Source rows read per second at most.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Compare every row, without asking the source's server for fingerprints of its ranges.
    #[arg(long)]
    pub every_row: bool,
    /// One JSON object per table instead of the text report.
    #[arg(long)]
    pub json: bool,
}

/// `sluice verify pipeline.toml`.
pub fn run(file: PathBuf, args: VerifyArgs) -> anyhow::Result<()> {
    let pipeline = load_file(&file)?;
    verify_pipeline(&file, pipeline, &args)
}

/// Verify `pipeline` (read from `file`): its source's tables against its Doris sink's.
pub fn verify_pipeline(file: &Path, mut pipeline: PipelineFile, args: &VerifyArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let reports = rt.block_on(async {
        let embedded = super::run::connect(file, &mut pipeline).await?;
        let opts = Options {
            samples: args.samples,
            recheck_after: args.recheck_after,
            rate: args.rate,
            fingerprints: !args.every_row,
            ..Options::default()
        };
        let reports = verify_file(file, pipeline, &opts).await;
        if let Some(h) = embedded {
            h.stop().await;
        }
        reports
    })?;
    let differ = reports.iter().filter(|r| !r.agrees()).count();
    for r in &reports {
        if args.json {
            println!("{}", serde_json::to_string(r)?);
        } else {
            print!("{}", text(r));
        }
    }
    match differ {
        0 => {
            if !args.json {
                let rows: u64 = reports.iter().map(|r| r.compared).sum();
                println!("verify: {} tables, {rows} rows: the copy equals the source", reports.len());
            }
            Ok(())
        }
        n => anyhow::bail!("{n} of {} tables differ from their source", reports.len()),
    }
}

/// A table's report as text: its counts, then its first differences.
fn text(r: &TableReport) -> String {
    let versions = match r.versions {
        0 => String::new(),
        n => format!(
            ", {n} earlier versions kept (no primary key: Doris' DUPLICATE KEY table keeps updated and deleted rows)"
        ),
    };
    let mut out = format!(
        "{} → {}: {} rows compared, {} equal, {} differing, {} missing, {} extra{versions}{}\n",
        r.source,
        r.target,
        r.compared,
        r.equal,
        r.differing,
        r.missing,
        r.extra,
        if r.agrees() { "" } else { " — DIFFERS" }
    );
    if let Some(e) = &r.error {
        out.push_str(&format!("  not compared: {e}\n"));
    }
    for column in &r.unmirrored {
        out.push_str(&format!("  not mirrored: {column}\n"));
    }
    let value = |v: &Option<String>| v.as_ref().map_or("NULL".to_string(), |v| format!("{v:?}"));
    for d in &r.samples {
        match d.kind {
            "differing" => {
                let columns: Vec<String> = d
                    .columns
                    .iter()
                    .map(|c| format!("{}: source {}, doris {}", c.column, value(&c.source), value(&c.doris)))
                    .collect();
                out.push_str(&format!("  differing {}: {}\n", d.key, columns.join("; ")));
            }
            kind => out.push_str(&format!("  {kind} {}\n", d.key)),
        }
    }
    let listed = r.samples.len() as u64;
    let found = r.differing + r.missing + r.extra;
    if found > listed {
        out.push_str(&format!("  … and {} more\n", found - listed));
    }
    out
}
