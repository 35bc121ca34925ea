//! `sluice mysql-sync-database` (also `sluice sync-database mysql`): the Flink connector's
//! CdcTools command, whose flags a Flink user's command keeps as written (everything before the
//! job name deleted). It writes the equivalent pipeline — a `mysql` source and a Doris sink in
//! `database` mode — and runs it, or prints it (`--print-pipeline`) for `sluice run`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;

/// The flags of CdcTools' `mysql-sync-database`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The Doris database the tables go to.
    #[arg(long)]
    database: String,
    /// The pipeline's name (Flink's job name); default `mysql-sync-<database>`.
    #[arg(long)]
    job_name: Option<String>,
    /// Put in front of every Doris table name.
    #[arg(long, default_value = "")]
    table_prefix: String,
    /// Put after every Doris table name.
    #[arg(long, default_value = "")]
    table_suffix: String,
    /// The MySQL tables to sync: names or regexes, `|` separated (default all).
    #[arg(long)]
    including_tables: Option<String>,
    /// The MySQL tables to leave out.
    #[arg(long)]
    excluding_tables: Option<String>,
    /// A MySQL CDC source option `key=value` (hostname, port, username, password, database-name,
    /// server-id, scan.startup.mode, scan.incremental.snapshot.chunk.size).
    #[arg(long = "mysql-conf", value_name = "KEY=VALUE")]
    mysql_conf: Vec<String>,
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
    /// Print the equivalent pipeline file (secrets as `password_env`) instead of running it.
    #[arg(long)]
    print_pipeline: bool,
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
    "scan.incremental.snapshot.chunk.size",
];
const SINK_KEYS: &[&str] =
    &["fenodes", "username", "password", "jdbc-url", "sink.label-prefix", "sink.enable-2pc", "sink.properties.*"];

/// The pipeline of the command, as TOML; `secrets` = write the passwords given (for running),
/// else name environment variables for them (for printing).
fn pipeline(args: &SyncArgs, secrets: bool) -> anyhow::Result<String> {
    use toml::Value;
    let mut mysql = toml::Table::new();
    mysql.insert("type".into(), "mysql".into());
    mysql.insert("user".into(), "root".into());
    let mut source = toml::Table::new();
    source.insert("type".into(), "mysql".into());
    source.insert("connection".into(), "source".into());
    let mut startup = "initial".to_string();
    for (k, v) in pairs("--mysql-conf", &args.mysql_conf)? {
        match k.as_str() {
            "hostname" => drop(mysql.insert("host".into(), v.into())),
            "port" => drop(mysql.insert(
                "port".into(),
                Value::Integer(v.parse().with_context(|| format!("--mysql-conf port={v}: expected a port"))?),
            )),
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
            "server-time-zone" if v.eq_ignore_ascii_case("UTC") => {}
            "server-time-zone" => {
                bail!("--mysql-conf server-time-zone={v}: only UTC is supported (TIMESTAMP values are read as UTC)")
            }
            "scan.startup.mode" => startup = v,
            "scan.incremental.snapshot.chunk.size" => drop(source.insert(
                "chunk_size".into(),
                Value::Integer(v.parse().with_context(|| format!("--mysql-conf {k}={v}: expected a number"))?),
            )),
            _ => return Err(unknown("--mysql-conf", &k, MYSQL_KEYS)),
        }
    }
    for required in ["host"] {
        if !mysql.contains_key(required) {
            bail!("--mysql-conf hostname=…: required");
        }
    }
    if !source.contains_key("database") {
        bail!("--mysql-conf database-name=…: required (the MySQL database to sync)");
    }
    let mut scan = toml::Table::new();
    let mut start = toml::Table::new();
    start.insert("mode".into(), startup.into());
    scan.insert("startup".into(), Value::Table(start));
    source.insert("scan".into(), Value::Table(scan));
    if let Some(t) = &args.including_tables {
        source.insert("include".into(), t.clone().into());
    }
    if let Some(t) = &args.excluding_tables {
        source.insert("exclude".into(), t.clone().into());
    }

    let mut doris = toml::Table::new();
    let mut sink = toml::Table::new();
    sink.insert("type".into(), "doris".into());
    sink.insert("database".into(), args.database.clone().into());
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
    let table_conf: toml::Table =
        pairs("--table-conf", &args.table_conf)?.into_iter().map(|(k, v)| (k, v.into())).collect();
    if !table_conf.is_empty() {
        sink.insert("table_properties".into(), Value::Table(table_conf));
    }

    let mut section = toml::Table::new();
    let name = args.job_name.clone().unwrap_or_else(|| format!("mysql-sync-{}", args.database));
    let name: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    section.insert("name".into(), name.into());
    for (k, v) in pairs("-D", &args.flink)? {
        match k.as_str() {
            "execution.checkpointing.interval" => drop(section.insert("checkpoint_interval".into(), v.into())),
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
    connections.insert("source".into(), Value::Table(mysql));
    file.insert("connections".into(), Value::Table(connections));
    file.insert("doris".into(), Value::Table(doris));
    file.insert("source".into(), Value::Array(vec![Value::Table(source)]));
    file.insert("sink".into(), Value::Array(vec![Value::Table(sink)]));
    Ok(toml::to_string(&file)?)
}

/// Run the command: print the pipeline, or run it (state under `.sluice/<name>` here).
pub fn run(args: SyncArgs, quiet: bool) -> anyhow::Result<()> {
    if args.print_pipeline {
        print!("{}", pipeline(&args, false)?);
        return Ok(());
    }
    let text = pipeline(&args, true)?;
    let name = toml::from_str::<toml::Table>(&text)?["pipeline"]["name"].as_str().unwrap_or("mysql-sync").to_string();
    let file = PathBuf::from(format!("{name}.toml"));
    let pipeline = crate::pipeline::load_str(&file, &text)?;
    super::run::run_pipeline(file, pipeline, quiet, None)
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
        let printed = pipeline(&args(SEED), false).unwrap();
        assert!(!printed.contains("123456"), "no secret is printed: {printed}");
        assert!(printed.contains("password_env = \"MYSQL_PASSWORD\""), "{printed}");
        let p = crate::pipeline::load_str(std::path::Path::new("p.toml"), &printed).unwrap();
        assert_eq!((p.pipeline.parallelism, p.pipeline.checkpoint_interval.0.as_secs()), (1, 10));
        assert_eq!(p.pipeline.name, "mysql-sync-test_db");
        let source: &crate::sources::mysql::MysqlSource = p.source[0].config.as_any().downcast_ref().unwrap();
        assert_eq!((source.database.as_str(), source.include.as_str()), ("mysql_db", "tbl1|test.*"));
        assert_eq!(source.scan.startup.mode, "initial");
        let sink: &crate::sinks::doris::DorisSink = p.sink[0].config.as_any().downcast_ref().unwrap();
        assert_eq!((sink.database.as_deref(), sink.label_prefix.as_deref()), (Some("test_db"), Some("label")));
        assert_eq!(sink.table_properties.get("replication_num").map(String::as_str), Some("1"));
        // Running it keeps the passwords given.
        assert!(pipeline(&args(SEED), true).unwrap().contains("password = \"123456\""));
    }

    #[test]
    fn a_wrong_key_names_the_flag_and_the_accepted_keys() {
        let e = pipeline(&args("--database d --mysql-conf hostnme=h --sink-conf fenodes=f"), false).unwrap_err();
        assert!(
            e.to_string().starts_with("--mysql-conf hostnme: not an option Sluice takes; accepted: hostname, port"),
            "{e}"
        );
        let e =
            pipeline(&args("--database d --mysql-conf hostname=h --mysql-conf database-name=x"), false).unwrap_err();
        assert_eq!(e.to_string(), "--sink-conf fenodes=…: required (the Doris FEs, host:http_port)");
        let e = pipeline(&args("--database d --mysql-conf hostname=h --mysql-conf database-name=x --sink-conf fenodes=f --sink-conf sink.bogus=1"), false).unwrap_err();
        assert!(e.to_string().starts_with("--sink-conf sink.bogus: not an option Sluice takes"), "{e}");
    }
}
