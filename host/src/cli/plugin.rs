//! `sluice plugin new|build|inspect|test`: tools for plugin authors.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use sluice_guest::batch::{BatchBuilder, RowKind, Value};
use sluice_guest::types::{arrow_schema, columns_of, format_columns, parse_columns};

use crate::Batch;
use crate::wasm::{ComponentCache, Plugin, PluginKind, PluginLimits, PluginRuntime};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Create a plugin directory `<name>` (a transform, with sample rows) that builds and passes
    /// `sluice plugin test <name> --input <name>/rows.jsonl` as generated.
    New {
        /// The plugin's name, also its directory (e.g. `my-transform`).
        name: String,
        /// The language to write it in.
        #[arg(long, default_value = "rust", value_parser = ["rust", "python", "js"])]
        lang: String,
    },
    /// Build a plugin directory (a Rust crate, or a `plugin.toml` directory) and print the path
    /// of its `.wasm` component.
    Build {
        /// The plugin directory.
        path: PathBuf,
    },
    /// Show a plugin's world, exports, imports, configuration keys and output schema.
    Inspect {
        /// A `.wasm` component or a plugin crate directory (built when needed).
        path: PathBuf,
        /// Input columns (Doris syntax, e.g. "id BIGINT, name VARCHAR(64)") used to derive the
        /// output schema; defaults to the plugin's own example.
        #[arg(long)]
        schema: Option<String>,
        /// A configuration value `key=value` (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
    },
    /// Run a plugin on rows (transforms: one JSON object per line) or messages (decoders: one
    /// raw message per line) from a file and print what it returns.
    Test {
        /// A `.wasm` component or a plugin crate directory (built when needed).
        path: PathBuf,
        /// A configuration value `key=value` (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// The input file: JSON lines for transforms, raw messages one per line for decoders.
        #[arg(long)]
        input: PathBuf,
        /// Input columns (transforms) or target columns (decoders) in Doris syntax; defaults to
        /// the plugin's own example.
        #[arg(long)]
        schema: Option<String>,
        /// Output format: `text` (values separated by spaces) or `jsonl`.
        #[arg(long, default_value = "text", value_parser = ["text", "jsonl"])]
        format: String,
    },
}

pub fn run(cmd: PluginCommand) -> anyhow::Result<()> {
    let runtime = || PluginRuntime::new(ComponentCache::default_location());
    match cmd {
        PluginCommand::New { name, lang } => {
            let dir = super::scaffold::new_plugin(&name, &lang)?;
            let rows = dir.join("rows.jsonl");
            println!(
                "created {lang} plugin {0}; try it: sluice plugin test {0} --input {1}",
                dir.display(),
                rows.display()
            );
            Ok(())
        }
        PluginCommand::Build { path } => {
            if !path.is_dir() {
                bail!("{}: not a plugin directory (a Rust crate, or a directory with a `plugin.toml`)", path.display());
            }
            println!("{}", crate::wasm::build::resolve(&path)?.display());
            Ok(())
        }
        PluginCommand::Inspect { path, schema, config } => inspect(&runtime()?, &path, schema, &parse_config(&config)?),
        PluginCommand::Test { path, config, input, schema, format } => {
            test(&runtime()?, &path, &parse_config(&config)?, &input, schema, &format)
        }
    }
}

fn parse_config(pairs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => bail!("--config {p:?}: expected KEY=VALUE, e.g. --config prefix=p_"),
        })
        .collect()
}

fn schema_text(plugin: &Plugin, given: Option<String>, example: Option<String>) -> anyhow::Result<String> {
    given.or(example).with_context(|| {
        format!("plugin `{}` declares no example input; pass --schema \"id BIGINT, name VARCHAR(64)\"", plugin.name())
    })
}

fn inspect(
    runtime: &PluginRuntime,
    path: &Path,
    schema: Option<String>,
    config: &[(String, String)],
) -> anyhow::Result<()> {
    let plugin = runtime.load(path, PluginLimits::default())?;
    let info = plugin.describe()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "plugin:      {}", info.name)?;
    if !info.description.is_empty() {
        writeln!(out, "description: {}", info.description)?;
    }
    writeln!(out, "file:        {}", plugin.file().display())?;
    writeln!(out, "world:       sluice:plugin/{}@0.1.0", plugin.kind().world())?;
    writeln!(out, "exports:     {}", plugin.exports().join(", "))?;
    writeln!(out, "imports:     {}", plugin.imports().join(", "))?;
    writeln!(out, "config keys:")?;
    if info.config_keys.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for (name, default, description) in &info.config_keys {
        let default = default.as_deref().map(|d| format!(" (default {d:?})")).unwrap_or_default();
        writeln!(out, "  {name}{default}: {description}")?;
    }
    match schema.or(info.example_input.clone()) {
        Some(text) => {
            let input = arrow_schema(&parse_columns(&text).with_context(|| format!("--schema {text:?}"))?);
            let output = match plugin.kind() {
                PluginKind::Transform => plugin.transform(config, &input)?.output_schema().clone(),
                PluginKind::Decoder => plugin.decoder(config, &input)?.output_schema().clone(),
            };
            writeln!(out, "input schema:  {text}")?;
            writeln!(out, "output schema: {}", format_columns(&columns_of(&output)?))?;
        }
        None => writeln!(out, "output schema: depends on the input; pass --schema to see it")?,
    }
    Ok(())
}

fn test(
    runtime: &PluginRuntime,
    path: &Path,
    config: &[(String, String)],
    input: &Path,
    schema: Option<String>,
    format: &str,
) -> anyhow::Result<()> {
    let plugin = runtime.load(path, PluginLimits::default())?;
    let info = plugin.describe()?;
    let text = schema_text(&plugin, schema, info.example_input)?;
    let schema = arrow_schema(&parse_columns(&text).with_context(|| format!("--schema {text:?}"))?);
    let file = std::fs::File::open(input).with_context(|| format!("--input {}: cannot open it", input.display()))?;
    let lines: Vec<String> = std::io::BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("--input {}: cannot read it", input.display()))?;
    let output = match plugin.kind() {
        PluginKind::Transform => {
            let mut builder = BatchBuilder::new(schema.clone())?;
            for (n, line) in lines.iter().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let object = sluice_guest::json::parse_object(line.as_bytes(), n)
                    .map_err(|e| anyhow::anyhow!("{}:{}: {}", input.display(), n + 1, e.message))?;
                sluice_guest::json::push_object(&mut builder, &schema, RowKind::Insert, &object)
                    .map_err(|e| anyhow::anyhow!("{}:{}: {}", input.display(), n + 1, e.message))?;
            }
            let batch = builder.finish()?;
            plugin.transform(config, &schema)?.process(&batch)?
        }
        PluginKind::Decoder => {
            let messages: Vec<&[u8]> = lines.iter().filter(|l| !l.trim().is_empty()).map(|l| l.as_bytes()).collect();
            plugin.decoder(config, &schema)?.decode(&messages)?
        }
    };
    let show_kinds = plugin.kind() == PluginKind::Decoder || output.iter().any(|b| !b.row_kinds.is_empty());
    print_batches(&output, format, show_kinds)
}

fn print_batches(batches: &[Batch], format: &str, show_kinds: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for batch in batches {
        if format == "text" {
            if let Some(table) = &batch.table {
                writeln!(out, "# table {table}")?;
            }
            for row in batch.rows() {
                let values: Vec<String> = row.values().iter().map(Value::to_string).collect();
                if show_kinds {
                    writeln!(out, "{} {}", row.kind().short(), values.join(" "))?;
                } else {
                    writeln!(out, "{}", values.join(" "))?;
                }
            }
        } else {
            let schema = batch.schema();
            for row in batch.rows() {
                let mut object = serde_json::Map::new();
                if let Some(table) = &batch.table {
                    object.insert("__table".into(), table.clone().into());
                }
                if show_kinds {
                    object.insert("__row_kind".into(), row.kind().short().into());
                }
                for (field, value) in schema.fields().iter().zip(row.values()) {
                    object.insert(field.name().clone(), json_of(&value));
                }
                writeln!(out, "{}", serde_json::Value::Object(object))?;
            }
        }
    }
    Ok(())
}

fn json_of(v: &Value<'_>) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(f) => serde_json::Number::from_f64(*f).map(Into::into).unwrap_or(serde_json::Value::Null),
        other => other.to_string().into(),
    }
}
