//! `sluice mysql-sync-database` and `sluice postgres-sync-database` (also `sluice sync-database
//! mysql|postgres`): the Flink connector's CdcTools commands, whose flags a Flink user's command
//! keeps as written (everything before the job name deleted). Each writes the equivalent pipeline
//! — a `mysql` or `postgres` source and a Doris sink in `database` mode — and runs it, or prints
//! it (`--print-pipeline`) for `sluice run`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;

/// The flags of CdcTools' `mysql-sync-database`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The Doris database the tables go to; without it, each table goes to a database of its
    /// source database's name (or schema's).
    #[arg(long)]
    database: Option<String>,
    /// The pipeline's name (Flink's job name); default `mysql-sync-<database>` or
    /// `postgres-sync-<database>`.
    #[arg(long)]
    job_name: Option<String>,
    /// Put in front of every Doris table name.
    #[arg(long, default_value = "")]
    table_prefix: String,
    /// Put after every Doris table name.
    #[arg(long, default_value = "")]
    table_suffix: String,
    /// The source tables to sync: names or regexes, `|` separated (default all).
    #[arg(long)]
    including_tables: Option<String>,
    /// The source tables to leave out.
    #[arg(long)]
    excluding_tables: Option<String>,
    /// mysql-sync-database: a MySQL CDC source option `key=value` (hostname, port, username,
    /// password, database-name, server-id, scan.startup.mode, …).
    #[arg(long = "mysql-conf", value_name = "KEY=VALUE")]
    mysql_conf: Vec<String>,
    /// postgres-sync-database: a Postgres CDC source option `key=value` (hostname, port,
    /// username, password, database-name, schema-name, slot.name, scan.startup.mode, …).
    #[arg(long = "postgres-conf", value_name = "KEY=VALUE")]
    postgres_conf: Vec<String>,
    /// A Doris sink option `key=value` (fenodes, username, password, jdbc-url, sink.label-prefix,
    /// sink.enable-2pc, sink.properties.*).
    #[arg(long = "sink-conf", value_name = "KEY=VALUE")]
    sink_conf: Vec<String>,
    /// A property of the tables created in Doris `key=value` (e.g. replication_num=1).
    #[arg(long = "table-conf", value_name = "KEY=VALUE")]
    table_conf: Vec<String>,
    /// A Flink option as `flink run` takes it: `-Dexecution.checkpointing.interval=10s`,
    /// `-Dparallelism.default=1`.
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    flink: Vec<String>,
    /// Source tables routed to one Doris table: regexes, `|` separated, matched against the
    /// whole table name, with `--multi-to-one-target`.
    #[arg(long)]
    multi_to_one_origin: Option<String>,
    /// The Doris tables of `--multi-to-one-origin`, `|` separated, one per pattern.
    #[arg(long)]
    multi_to_one_target: Option<String>,
    /// How DDL becomes Doris DDL: `debezium_structure` (default) or `sql_parser`.
    #[arg(long, value_parser = ["debezium_structure", "sql_parser"])]
    schema_change_mode: Option<String>,
    /// Create the Doris tables and stop.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "IGNORED")]
    create_table_only: Option<String>,
    /// Accepted for the connector's sake: Sluice always writes every table through one sink.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "IGNORED")]
    single_sink: Option<String>,
    /// Accepted for the connector's sake: Sluice never puts a column's default in for a NULL.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "IGNORED")]
    ignore_default_value: Option<String>,
    /// Removed from the connector (its new schema change is the only one); ignored.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "IGNORED", hide = true)]
    use_new_schema_change: Option<String>,
    /// Print the equivalent pipeline file (secrets as `password_env`) instead of running it.
    #[arg(long)]
    print_pipeline: bool,
    /// Compare the Doris copy with the source instead of syncing (`sluice verify` of the
    /// equivalent pipeline); exits 0 only when every table agrees.
    #[arg(long)]
    verify: bool,
}

fn pairs(flag: &str, values: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    values
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => bail!("{flag} {p:?}: expected KEY=VALUE, e.g. {flag} hostname=127.0.0.1"),
        })
        .collect()
}

/// A key the command does not take: the flag, the key and the accepted keys.
fn unknown(flag: &str, key: &str, accepted: &[&str]) -> anyhow::Error {
    anyhow::anyhow!("{flag} {key}: not an option Sluice takes; accepted: {}", accepted.join(", "))
}

const MYSQL_KEYS: &[&str] = &[
    "hostname",
    "port",
    "username",
    "password",
    "database-name",
    "server-id",
    "server-time-zone",
    "scan.startup.mode",
    "scan.startup.specific-offset.file",
    "scan.startup.specific-offset.pos",
    "scan.startup.specific-offset.gtid-set",
    "scan.startup.timestamp-millis",
    "scan.incremental.snapshot.chunk.size",
    "scan.incremental.snapshot.chunk.key-column",
    "debezium.binary.handling.mode",
];
const SINK_KEYS: &[&str] =
    &["fenodes", "username", "password", "jdbc-url", "sink.label-prefix", "sink.enable-2pc", "sink.properties.*"];

/// The database a command mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Mysql,
    Postgres,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Mysql => "mysql",
            Origin::Postgres => "postgres",
        }
    }
}

fn number(flag: &str, k: &str, v: &str) -> anyhow::Result<toml::Value> {
    Ok(toml::Value::Integer(v.parse().with_context(|| format!("{flag} {k}={v}: expected a number"))?))
}

/// Debezium's `binary.handling.mode` as the source's `binary_handling`.
fn binary(flag: &str, mode: &str) -> anyhow::Result<toml::Value> {
    Ok(match mode {
        "base64" => "base64",
        "hex" => "hex",
        // Debezium's raw bytes: as text, where they are UTF-8.
        "bytes" => "text",
        _ => bail!("{flag} debezium.binary.handling.mode={mode}: expected base64 (the default), hex or bytes"),
    }
    .into())
}

/// The connection and source of `--mysql-conf`.
fn mysql_source(args: &SyncArgs, secrets: bool) -> anyhow::Result<(toml::Table, toml::Table)> {
    use toml::Value;
    let mut mysql = toml::Table::new();
    mysql.insert("type".into(), "mysql".into());
    mysql.insert("user".into(), "root".into());
    let mut source = toml::Table::new();
    source.insert("type".into(), "mysql".into());
    source.insert("connection".into(), "source".into());
    let mut start = toml::Table::new();
    start.insert("mode".into(), "initial".into());
    let mut offset = toml::Table::new();
    let flag = "--mysql-conf";
    for (k, v) in pairs(flag, &args.mysql_conf)? {
        match k.as_str() {
            "hostname" => drop(mysql.insert("host".into(), v.into())),
            "port" => drop(mysql.insert("port".into(), number(flag, &k, &v)?)),
            "username" => drop(mysql.insert("user".into(), v.into())),
            "password" if secrets => drop(mysql.insert("password".into(), v.into())),
            "password" => drop(mysql.insert("password_env".into(), "MYSQL_PASSWORD".into())),
            "database-name" => drop(source.insert("database".into(), v.into())),
            "server-id" => {
                let id: i64 = v
                    .split('-')
                    .next()
                    .unwrap_or_default()
                    .parse()
                    .with_context(|| format!("--mysql-conf server-id={v}: expected a number"))?;
                mysql.insert("server_id".into(), Value::Integer(id));
            }
            "server-time-zone" => drop(mysql.insert("server_time_zone".into(), v.into())),
            "scan.startup.mode" => drop(start.insert("mode".into(), v.into())),
            "scan.startup.specific-offset.file" => drop(offset.insert("file".into(), v.into())),
            "scan.startup.specific-offset.pos" => drop(offset.insert("pos".into(), number(flag, &k, &v)?)),
            "scan.startup.specific-offset.gtid-set" => drop(offset.insert("gtid_set".into(), v.into())),
            "scan.startup.timestamp-millis" => drop(start.insert(
                "timestamp_millis".into(),
                Value::Integer(v.parse().with_context(|| format!("--mysql-conf {k}={v}: expected milliseconds"))?),
            )),
            "scan.incremental.snapshot.chunk.size" => drop(source.insert("chunk_size".into(), number(flag, &k, &v)?)),
            "scan.incremental.snapshot.chunk.key-column" => drop(source.insert("chunk_key_column".into(), v.into())),
            "debezium.binary.handling.mode" => drop(source.insert("binary_handling".into(), binary(flag, &v)?)),
            _ => return Err(unknown(flag, &k, MYSQL_KEYS)),
        }
    }
    if !mysql.contains_key("host") {
        bail!("--mysql-conf hostname=…: required");
    }
    if !source.contains_key("database") {
        bail!("--mysql-conf database-name=…: required (the MySQL database to sync)");
    }
    if !offset.is_empty() {
        start.insert("specific_offset".into(), Value::Table(offset));
    }
    let mut scan = toml::Table::new();
    scan.insert("startup".into(), Value::Table(start));
    source.insert("scan".into(), Value::Table(scan));
    Ok((mysql, source))
}

const POSTGRES_KEYS: &[&str] = &[
    "hostname",
    "port",
    "username",
    "password",
    "database-name",
    "schema-name",
    "slot.name",
    "decoding.plugin.name",
    "debezium.publication.name",
    "server-time-zone",
    "scan.startup.mode",
    "scan.incremental.snapshot.chunk.size",
    "scan.incremental.snapshot.chunk.key-column",
    "debezium.binary.handling.mode",
];

/// The connection and source of `--postgres-conf`.
fn postgres_source(args: &SyncArgs, secrets: bool) -> anyhow::Result<(toml::Table, toml::Table)> {
    use toml::Value;
    let mut pg = toml::Table::new();
    pg.insert("type".into(), "postgres".into());
    pg.insert("user".into(), "postgres".into());
    let mut source = toml::Table::new();
    source.insert("type".into(), "postgres".into());
    source.insert("connection".into(), "source".into());
    let mut start = toml::Table::new();
    start.insert("mode".into(), "initial".into());
    let flag = "--postgres-conf";
    for (k, v) in pairs(flag, &args.postgres_conf)? {
        match k.as_str() {
            "hostname" => drop(pg.insert("host".into(), v.into())),
            "port" => drop(pg.insert("port".into(), number(flag, &k, &v)?)),
            "username" => drop(pg.insert("user".into(), v.into())),
            "password" if secrets => drop(pg.insert("password".into(), v.into())),
            "password" => drop(pg.insert("password_env".into(), "POSTGRES_PASSWORD".into())),
            "database-name" => drop(source.insert("database".into(), v.into())),
            "schema-name" => drop(source.insert("schema".into(), v.into())),
            "slot.name" => drop(source.insert("slot_name".into(), v.into())),
            "decoding.plugin.name" => drop(source.insert("decoding_plugin".into(), v.into())),
            "debezium.publication.name" => drop(source.insert("publication_name".into(), v.into())),
            "server-time-zone" => drop(pg.insert("server_time_zone".into(), v.into())),
            "scan.startup.mode" => drop(start.insert("mode".into(), v.into())),
            "scan.incremental.snapshot.chunk.size" => drop(source.insert("chunk_size".into(), number(flag, &k, &v)?)),
            "scan.incremental.snapshot.chunk.key-column" => drop(source.insert("chunk_key_column".into(), v.into())),
            "debezium.binary.handling.mode" => drop(source.insert("binary_handling".into(), binary(flag, &v)?)),
            _ => return Err(unknown(flag, &k, POSTGRES_KEYS)),
        }
    }
    for (key, option) in
        [("host", "hostname"), ("database", "database-name"), ("schema", "schema-name"), ("slot_name", "slot.name")]
    {
        if !pg.contains_key(key) && !source.contains_key(key) {
            bail!("--postgres-conf {option}=…: required");
        }
    }
    let mut scan = toml::Table::new();
    scan.insert("startup".into(), Value::Table(start));
    source.insert("scan".into(), Value::Table(scan));
    Ok((pg, source))
}

/// The pipeline of the command, as TOML; `secrets` = write the passwords given (for running),
/// else name environment variables for them (for printing).
fn pipeline(origin: Origin, args: &SyncArgs, secrets: bool) -> anyhow::Result<String> {
    use toml::Value;
    let other = match origin {
        Origin::Mysql => (!args.postgres_conf.is_empty()).then_some("--postgres-conf"),
        Origin::Postgres => (!args.mysql_conf.is_empty()).then_some("--mysql-conf"),
    };
    if let Some(flag) = other {
        bail!("{flag} is not an option of {}-sync-database", origin.name());
    }
    let (connection, mut source) = match origin {
        Origin::Mysql => mysql_source(args, secrets)?,
        Origin::Postgres => postgres_source(args, secrets)?,
    };
    if args.create_table_only.is_some() {
        source.insert("schema_only".into(), Value::Boolean(true));
    }
    if let Some(t) = &args.including_tables {
        source.insert("include".into(), t.clone().into());
    }
    if let Some(t) = &args.excluding_tables {
        source.insert("exclude".into(), t.clone().into());
    }

    let mut doris = toml::Table::new();
    let mut sink = toml::Table::new();
    sink.insert("type".into(), "doris".into());
    sink.insert("database".into(), args.database.clone().unwrap_or_else(|| "{db}".into()).into());
    if !args.table_prefix.is_empty() {
        sink.insert("table_prefix".into(), args.table_prefix.clone().into());
    }
    if !args.table_suffix.is_empty() {
        sink.insert("table_suffix".into(), args.table_suffix.clone().into());
    }
    let mut properties = toml::Table::new();
    for (k, v) in pairs("--sink-conf", &args.sink_conf)? {
        match k.as_str() {
            "fenodes" => {
                drop(doris.insert("fenodes".into(), Value::Array(v.split(',').map(|f| f.trim().into()).collect())))
            }
            "username" => drop(doris.insert("username".into(), v.into())),
            "password" if secrets => drop(doris.insert("password".into(), v.into())),
            "password" => drop(doris.insert("password_env".into(), "DORIS_PASSWORD".into())),
            "jdbc-url" => drop(doris.insert("jdbc_url".into(), v.into())),
            "sink.label-prefix" => drop(sink.insert("label_prefix".into(), v.into())),
            "sink.enable-2pc" => drop(sink.insert("enable_2pc".into(), Value::Boolean(v == "true"))),
            _ => match k.strip_prefix("sink.properties.") {
                Some(p) => drop(properties.insert(p.to_string(), v.into())),
                None => return Err(unknown("--sink-conf", &k, SINK_KEYS)),
            },
        }
    }
    if !doris.contains_key("fenodes") {
        bail!("--sink-conf fenodes=…: required (the Doris FEs, host:http_port)");
    }
    if !properties.is_empty() {
        sink.insert("properties".into(), Value::Table(properties));
    }
    let mut table_conf = toml::Table::new();
    for (k, v) in pairs("--table-conf", &args.table_conf)? {
        match k.as_str() {
            "table-buckets" => drop(sink.insert("table_buckets".into(), v.into())),
            "table-partitions" => drop(sink.insert("table_partitions".into(), v.into())),
            "convert-uniq-to-pk" => bail!(
                "--table-conf convert-uniq-to-pk: not supported; tables without a primary key are created DUPLICATE"
            ),
            _ => drop(table_conf.insert(k, v.into())),
        }
    }
    match (&args.multi_to_one_origin, &args.multi_to_one_target) {
        (Some(origin), Some(target)) => {
            let (o, t): (Vec<&str>, Vec<&str>) = (origin.split('|').collect(), target.split('|').collect());
            if o.len() != t.len() {
                bail!(
                    "--multi-to-one-origin has {} patterns and --multi-to-one-target {} tables: give one target per pattern",
                    o.len(),
                    t.len()
                );
            }
            let routes = o.iter().zip(&t).map(|(o, t)| {
                let mut r = toml::Table::new();
                r.insert("origin".into(), o.trim().into());
                r.insert("target".into(), t.trim().into());
                Value::Table(r)
            });
            sink.insert("route".into(), Value::Array(routes.collect()));
        }
        (None, None) => {}
        _ => bail!("--multi-to-one-origin and --multi-to-one-target go together"),
    }
    if let Some(mode) = &args.schema_change_mode {
        let mut sc = toml::Table::new();
        sc.insert("mode".into(), mode.clone().into());
        sink.insert("schema_change".into(), Value::Table(sc));
    }
    if !table_conf.is_empty() {
        sink.insert("table_properties".into(), Value::Table(table_conf));
    }

    let mut section = toml::Table::new();
    let named = args.database.clone().or_else(|| source.get("database").and_then(|d| d.as_str()).map(str::to_string));
    let name = args.job_name.clone().unwrap_or_else(|| format!("{}-sync-{}", origin.name(), named.unwrap_or_default()));
    let name: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    section.insert("name".into(), name.into());
    for (k, v) in pairs("-D", &args.flink)? {
        match k.as_str() {
            "execution.checkpointing.interval" => drop(section.insert("checkpoint_interval".into(), v.into())),
            "execution.checkpointing.timeout" => drop(section.insert("checkpoint_timeout".into(), v.into())),
            "parallelism.default" => drop(section.insert(
                "parallelism".into(),
                Value::Integer(v.parse().with_context(|| format!("-D{k}={v}: expected a number"))?),
            )),
            // Flink's own settings (memory, restart strategy, …) have no meaning here.
            _ => tracing::warn!("-D{k}: a Flink setting Sluice does not use; ignored"),
        }
    }
    let mut file = toml::Table::new();
    file.insert("pipeline".into(), Value::Table(section));
    let mut connections = toml::Table::new();
    connections.insert("source".into(), Value::Table(connection));
    file.insert("connections".into(), Value::Table(connections));
    file.insert("doris".into(), Value::Table(doris));
    file.insert("source".into(), Value::Array(vec![Value::Table(source)]));
    file.insert("sink".into(), Value::Array(vec![Value::Table(sink)]));
    Ok(toml::to_string(&file)?)
}

/// Run the command: print the pipeline, or run it (state under `.sluice/<name>` here).
pub fn run(origin: Origin, args: SyncArgs, quiet: bool) -> anyhow::Result<()> {
    if args.print_pipeline {
        print!("{}", pipeline(origin, &args, false)?);
        return Ok(());
    }
    let text = pipeline(origin, &args, true)?;
    let name = toml::from_str::<toml::Table>(&text)?["pipeline"]["name"].as_str().unwrap_or("sync").to_string();
    let file = PathBuf::from(format!("{name}.toml"));
    let pipeline = crate::pipeline::load_str(&file, &text).map_err(|e| match refused_flag(origin, &text, &e) {
        Some(flag) => anyhow::anyhow!("{flag}: {}", e.message),
        None => anyhow::anyhow!("{}-sync-database: {}", origin.name(), e.message),
    })?;
    let result = if args.verify {
        let verify =
            super::verify::VerifyArgs { samples: 10, recheck_after: None, rate: None, every_row: false, json: false };
        super::verify::verify_pipeline(&file, pipeline, &verify)
    } else {
        super::run::run_pipeline(file.clone(), pipeline, quiet, None, crate::pipeline::ClusterArgs::default())
    };
    result.map_err(|e| anyhow::anyhow!("{}", in_flags(origin, &file, &text, &format!("{e:#}"))))
}

/// `message` with each place in the pipeline the command wrote (`<file>:<line>: `) given as the
/// flag that set it, else as the command.
fn in_flags(origin: Origin, file: &std::path::Path, text: &str, message: &str) -> String {
    let at =
        regex::Regex::new(&format!(r"{}:(\d+): ", regex::escape(&file.display().to_string()))).expect("a valid regex");
    at.replace_all(message, |c: &regex::Captures<'_>| {
        let flag = c[1].parse().ok().and_then(|line| flag_at(origin, text, line));
        format!("{}: ", flag.unwrap_or_else(|| format!("{}-sync-database", origin.name())))
    })
    .into_owned()
}

/// The flag that gave the value the pipeline of the command (`text`) refused with `e`.
fn refused_flag(origin: Origin, text: &str, e: &crate::pipeline::ConfigError) -> Option<String> {
    let by_key =
        e.key.as_deref().and_then(|k| k.rsplit_once('.')).and_then(|(section, key)| flag_of(origin, section, key));
    by_key.or_else(|| flag_at(origin, text, e.line?))
}

/// The flag that wrote line `line` (1-based) of the command's pipeline `text`, if one did.
fn flag_at(origin: Origin, text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (key, _) = lines.get(line.checked_sub(1)?)?.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let section = lines[..line].iter().rev().find_map(|l| {
        let l = l.trim();
        l.starts_with('[').then(|| l.trim_matches(|c| c == '[' || c == ']').to_string())
    })?;
    flag_of(origin, &section, key)
}

/// The flag that writes `key` of `section` in the command's pipeline, if one does.
fn flag_of(origin: Origin, section: &str, key: &str) -> Option<String> {
    let conf = match origin {
        Origin::Mysql => "--mysql-conf",
        Origin::Postgres => "--postgres-conf",
    };
    let option = |o: &str| Some(format!("{conf} {o}"));
    let flag = |f: &str| Some(f.to_string());
    match (section, key) {
        ("connections.source", "host") => option("hostname"),
        ("connections.source", "user") => option("username"),
        ("connections.source", "server_id") => option("server-id"),
        ("connections.source", "server_time_zone") => option("server-time-zone"),
        ("connections.source", k) => option(k),
        ("source", "database") => option("database-name"),
        ("source", "schema") => option("schema-name"),
        ("source", "slot_name") => option("slot.name"),
        ("source", "decoding_plugin") => option("decoding.plugin.name"),
        ("source", "publication_name") => option("debezium.publication.name"),
        ("source", "chunk_size") => option("scan.incremental.snapshot.chunk.size"),
        ("source", "chunk_key_column") => option("scan.incremental.snapshot.chunk.key-column"),
        ("source", "binary_handling") => option("debezium.binary.handling.mode"),
        ("source", "include") => flag("--including-tables"),
        ("source", "exclude") => flag("--excluding-tables"),
        ("source", "schema_only") => flag("--create-table-only"),
        ("source.scan.startup", "timestamp_millis") => option("scan.startup.timestamp-millis"),
        ("source.scan.startup", k) => option(&format!("scan.startup.{k}")),
        ("source.scan.startup.specific_offset", k) => {
            option(&format!("scan.startup.specific-offset.{}", k.replace('_', "-")))
        }
        ("doris", k) => Some(format!("--sink-conf {}", k.replace('_', "-"))),
        ("sink", "database") => flag("--database"),
        ("sink", "table_prefix") => flag("--table-prefix"),
        ("sink", "table_suffix") => flag("--table-suffix"),
        ("sink", "label_prefix") => flag("--sink-conf sink.label-prefix"),
        ("sink", "enable_2pc") => flag("--sink-conf sink.enable-2pc"),
        ("sink", k @ ("table_buckets" | "table_partitions")) => Some(format!("--table-conf {}", k.replace('_', "-"))),
        ("sink.properties", k) => Some(format!("--sink-conf sink.properties.{k}")),
        ("sink.table_properties", k) => Some(format!("--table-conf {k}")),
        ("sink.schema_change", _) => flag("--schema-change-mode"),
        ("sink.route", "origin") => flag("--multi-to-one-origin"),
        ("sink.route", "target") => flag("--multi-to-one-target"),
        ("pipeline", "checkpoint_interval") => flag("-Dexecution.checkpointing.interval"),
        ("pipeline", "checkpoint_timeout") => flag("-Dexecution.checkpointing.timeout"),
        ("pipeline", "parallelism") => flag("-Dparallelism.default"),
        ("pipeline", "name") => flag("--job-name"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SyncArgs,
    }

    fn args(line: &str) -> SyncArgs {
        Cli::try_parse_from(std::iter::once("x").chain(line.split_whitespace())).unwrap().args
    }

    const SEED: &str = "-Dexecution.checkpointing.interval=10s -Dparallelism.default=1 --database test_db \
        --mysql-conf hostname=127.0.0.1 --mysql-conf port=3306 --mysql-conf username=root --mysql-conf password=123456 \
        --mysql-conf database-name=mysql_db --including-tables tbl1|test.* --sink-conf fenodes=127.0.0.1:8030 \
        --sink-conf username=root --sink-conf password=123456 --sink-conf jdbc-url=jdbc:mysql://127.0.0.1:9030 \
        --sink-conf sink.label-prefix=label --table-conf replication_num=1";

    #[test]
    fn the_seeds_command_becomes_a_pipeline_that_loads() {
        let printed = pipeline(Origin::Mysql, &args(SEED), false).unwrap();
        assert!(!printed.contains("123456"), "no secret is printed: {printed}");
        assert!(printed.contains("password_env = \"MYSQL_PASSWORD\""), "{printed}");
        let p = crate::pipeline::load_str(std::path::Path::new("p.toml"), &printed).unwrap();
        assert_eq!((p.pipeline.parallelism, p.pipeline.checkpoint_interval.0.as_secs()), (1, 10));
        assert_eq!(p.pipeline.name, "mysql-sync-test_db");
        let source: &crate::sources::mysql::MysqlSource = p.source[0].config.as_any().downcast_ref().unwrap();
        assert_eq!((source.database.as_str(), source.include.as_str()), ("mysql_db", "tbl1|test.*"));
        assert_eq!(source.scan.startup.mode, crate::sources::StartupMode::Initial);
        let sink: &crate::sinks::doris::DorisSink = p.sink[0].config.as_any().downcast_ref().unwrap();
        assert_eq!((sink.database.as_deref(), sink.label_prefix.as_deref()), (Some("test_db"), Some("label")));
        assert_eq!(sink.table_properties.get("replication_num").map(String::as_str), Some("1"));
        // Running it keeps the passwords given.
        assert!(pipeline(Origin::Mysql, &args(SEED), true).unwrap().contains("password = \"123456\""));
    }

    #[test]
    fn without_database_each_source_database_goes_to_a_doris_database_of_its_name() {
        let line = "--mysql-conf hostname=h --mysql-conf database-name=shop_\\d+|crm --sink-conf fenodes=f:8030";
        let p = crate::pipeline::load_str(
            std::path::Path::new("p.toml"),
            &pipeline(Origin::Mysql, &args(line), false).unwrap(),
        )
        .unwrap();
        assert_eq!(p.pipeline.name, "mysql-sync-shop__d__crm");
        let source: &crate::sources::mysql::MysqlSource = p.source[0].config.as_any().downcast_ref().unwrap();
        assert_eq!(source.database, "shop_\\d+|crm");
        let sink: &crate::sinks::doris::DorisSink = p.sink[0].config.as_any().downcast_ref().unwrap();
        assert_eq!(sink.database.as_deref(), Some("{db}"));
    }

    #[test]
    fn the_seeds_postgres_command_becomes_a_pipeline_that_loads() {
        let seed = "-Dexecution.checkpointing.interval=10s -Dparallelism.default=1 --database db1 \
            --postgres-conf hostname=127.0.0.1 --postgres-conf port=5432 --postgres-conf username=postgres \
            --postgres-conf password=123456 --postgres-conf database-name=postgres --postgres-conf schema-name=public \
            --postgres-conf slot.name=test --postgres-conf decoding.plugin.name=pgoutput --including-tables tbl1|tbl2 \
            --sink-conf fenodes=127.0.0.1:8030 --sink-conf username=root --sink-conf password= \
            --sink-conf jdbc-url=jdbc:mysql://127.0.0.1:9030 --sink-conf sink.label-prefix=label --table-conf replication_num=1";
        let printed = pipeline(Origin::Postgres, &args(seed), false).unwrap();
        assert!(!printed.contains("123456") && printed.contains("password_env = \"POSTGRES_PASSWORD\""), "{printed}");
        let p = crate::pipeline::load_str(std::path::Path::new("p.toml"), &printed).unwrap();
        assert_eq!(p.pipeline.name, "postgres-sync-db1");
        let source: &crate::sources::postgres::PostgresSource = p.source[0].config.as_any().downcast_ref().unwrap();
        assert_eq!(
            (source.database.as_str(), source.schema.as_str(), source.slot_name.as_str(), source.include.as_str()),
            ("postgres", "public", "test", "tbl1|tbl2")
        );
        assert_eq!((source.decoding_plugin.as_str(), source.scan.startup.mode.name()), ("pgoutput", "initial"));
        let e = pipeline(
            Origin::Postgres,
            &args(
                "--database d --postgres-conf hostname=h --postgres-conf database-name=x --postgres-conf schema-name=public --sink-conf fenodes=f",
            ),
            false,
        );
        assert_eq!(e.unwrap_err().to_string(), "--postgres-conf slot.name=…: required");
        let e = pipeline(Origin::Postgres, &args("--database d --mysql-conf hostname=h"), false);
        assert_eq!(e.unwrap_err().to_string(), "--mysql-conf is not an option of postgres-sync-database");
        let e = pipeline(Origin::Postgres, &args("--database d --postgres-conf slot=x"), false).unwrap_err();
        assert!(
            e.to_string().starts_with("--postgres-conf slot: not an option Sluice takes; accepted: hostname"),
            "{e}"
        );
    }

    #[test]
    fn routing_schema_change_startup_and_table_flags_reach_the_pipeline() {
        let line = "--database d --mysql-conf hostname=h --mysql-conf database-name=x --sink-conf fenodes=f:8030 \
            --multi-to-one-origin order_.*|log_\\d+ --multi-to-one-target orders|logs --schema-change-mode sql_parser \
            --single-sink --create-table-only --ignore-default-value --use-new-schema-change true \
            --mysql-conf scan.startup.mode=specific-offset --mysql-conf scan.startup.specific-offset.file=binlog.000003 \
            --mysql-conf scan.startup.specific-offset.pos=154 --table-conf table-buckets=orders:10,.*:4 \
            --table-conf table-partitions=orders:at:day --table-conf replication_num=1";
        let printed = pipeline(Origin::Mysql, &args(line), false).unwrap();
        let p = crate::pipeline::load_str(std::path::Path::new("p.toml"), &printed).unwrap();
        let source: &crate::sources::mysql::MysqlSource = p.source[0].config.as_any().downcast_ref().unwrap();
        assert!(source.schema_only);
        assert_eq!(source.scan.startup.mode, crate::sources::StartupMode::SpecificOffset);
        let offset = source.scan.startup.specific_offset.as_ref().unwrap();
        assert_eq!((offset.file.as_deref(), offset.pos), (Some("binlog.000003"), Some(154)));
        let sink: &crate::sinks::doris::DorisSink = p.sink[0].config.as_any().downcast_ref().unwrap();
        let routes: Vec<(&str, &str)> = sink.route.iter().map(|r| (r.origin.as_str(), r.target.as_str())).collect();
        assert_eq!(routes, [("order_.*", "orders"), ("log_\\d+", "logs")]);
        assert_eq!(sink.schema_change.mode, crate::sinks::doris::schema::Mode::SqlParser);
        assert_eq!(sink.table_buckets.as_deref(), Some("orders:10,.*:4"));
        assert_eq!(sink.table_partitions.as_deref(), Some("orders:at:day"));
        assert_eq!(sink.table_properties.keys().collect::<Vec<_>>(), ["replication_num"]);
        let e = pipeline(
            Origin::Mysql,
            &args(
                "--database d --mysql-conf hostname=h --mysql-conf database-name=x --sink-conf fenodes=f --multi-to-one-origin a|b --multi-to-one-target c",
            ),
            false,
        );
        assert!(
            e.unwrap_err().to_string().starts_with("--multi-to-one-origin has 2 patterns and --multi-to-one-target 1")
        );
        let wrong =
            Cli::try_parse_from(["x", "--database", "d", "--schema-change-mode", "regex"]).err().unwrap().to_string();
        assert!(wrong.contains("invalid value 'regex' for '--schema-change-mode"), "{wrong}");
        assert!(wrong.contains("[possible values: debezium_structure, sql_parser]"), "{wrong}");
    }

    #[test]
    fn a_value_the_pipeline_refuses_names_the_flag_that_gave_it() {
        let refused = |line: &str| {
            let text = pipeline(Origin::Postgres, &args(line), true).unwrap();
            let e = crate::pipeline::load_str(std::path::Path::new("postgres-sync-d.toml"), &text).unwrap_err();
            (refused_flag(Origin::Postgres, &text, &e), e.message)
        };
        let base = "--database d --postgres-conf hostname=h --postgres-conf database-name=x \
            --postgres-conf schema-name=public --postgres-conf slot.name=s --sink-conf fenodes=f:8030";
        let (flag, message) = refused(&format!("{base} --postgres-conf scan.startup.mode=bogus"));
        assert_eq!(flag.as_deref(), Some("--postgres-conf scan.startup.mode"), "{message}");
        assert!(message.contains("bogus"), "{message}");
        let (flag, _) = refused(&format!("{base} -Dexecution.checkpointing.interval=soon"));
        assert_eq!(flag.as_deref(), Some("-Dexecution.checkpointing.interval"));
        let (flag, _) = refused(&format!("{base} --including-tables ("));
        assert_eq!(flag.as_deref(), Some("--including-tables"));
        let text = pipeline(Origin::Postgres, &args(base), true).unwrap();
        let file = std::path::Path::new("postgres-sync-d.toml");
        let line = text.lines().position(|l| l.starts_with("slot_name")).unwrap() + 1;
        assert_eq!(
            in_flags(
                Origin::Postgres,
                file,
                &text,
                &format!("postgres-sync-d.toml:{line}: slot is busy; postgres-sync-d.toml:1: x")
            ),
            "--postgres-conf slot.name: slot is busy; postgres-sync-database: x"
        );
    }

    #[test]
    fn a_wrong_key_names_the_flag_and_the_accepted_keys() {
        let e = pipeline(Origin::Mysql, &args("--database d --mysql-conf hostnme=h --sink-conf fenodes=f"), false)
            .unwrap_err();
        assert!(
            e.to_string().starts_with("--mysql-conf hostnme: not an option Sluice takes; accepted: hostname, port"),
            "{e}"
        );
        let e =
            pipeline(Origin::Mysql, &args("--database d --mysql-conf hostname=h --mysql-conf database-name=x"), false)
                .unwrap_err();
        assert_eq!(e.to_string(), "--sink-conf fenodes=…: required (the Doris FEs, host:http_port)");
        let e = pipeline(Origin::Mysql, &args("--database d --mysql-conf hostname=h --mysql-conf database-name=x --sink-conf fenodes=f --sink-conf sink.bogus=1"), false).unwrap_err();
        assert!(e.to_string().starts_with("--sink-conf sink.bogus: not an option Sluice takes"), "{e}");
    }
}
