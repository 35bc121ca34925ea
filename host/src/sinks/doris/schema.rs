//! Tables the Doris sink creates or alters when a schema change reaches it: `CREATE TABLE` from
//! the change's columns (UNIQUE KEY on its primary key, else DUPLICATE KEY on its first column),
//! a check of a table that exists, and `ADD` / `DROP` / `RENAME` / `MODIFY COLUMN` and
//! `TRUNCATE TABLE` as a change says, by [`Mode`] and [`Behavior`].

use std::collections::BTreeMap;

use sluice_guest::types::{ColumnDef, DorisType, columns_of};

use crate::doris::scan::quote;
use crate::runtime::{Alter, SchemaChange};

/// A column as DDL: `` `name` TYPE [NOT] NULL ``, nullable as the source says (a DUPLICATE key
/// column may hold NULLs). A key column cannot be a STRING in Doris.
fn column_ddl(c: &ColumnDef, key: bool) -> String {
    let t = match (&c.doris_type, key) {
        (DorisType::String, true) => "VARCHAR(65533)".to_string(),
        (t, _) => t.to_string(),
    };
    format!("{} {t}{}", quote(&c.name), if c.nullable { " NULL" } else { " NOT NULL" })
}

/// How the sink creates and changes tables: the connector's `--table-conf` (properties,
/// `table-buckets`, `table-partitions`) and `--schema-change-mode`, and Flink CDC's
/// `schema.change.behavior`.
#[derive(Debug, Clone, Default)]
pub struct TableRules {
    pub properties: BTreeMap<String, String>,
    /// Buckets by table: exact names first, then patterns in order; else `BUCKETS AUTO`.
    pub buckets: Vec<(String, regex::Regex, u32)>,
    /// Auto range partitions by table: the column and the interval of `date_trunc`.
    pub partitions: Vec<(String, String, String)>,
    pub mode: Mode,
    pub behavior: Behavior,
    /// Apply `TRUNCATE TABLE` (default false, as the connector).
    pub truncate: bool,
}

impl TableRules {
    /// `"tbl1:10,tbl2:20,a.*:30"`.
    pub fn parse_buckets(text: &str) -> Result<Vec<(String, regex::Regex, u32)>, String> {
        let mut out = Vec::new();
        for rule in text.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let (pattern, n) = rule
                .rsplit_once(':')
                .ok_or_else(|| format!("{rule:?}: expected `table:buckets`, e.g. \"orders:10\""))?;
            let n: u32 = n
                .trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{rule:?}: the number of buckets must be a whole number above 0"))?;
            let re =
                regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("{pattern:?}: not a regex: {e}"))?;
            out.push((pattern.trim().to_string(), re, n));
        }
        Ok(out)
    }

    /// `"tbl:column:interval,…"`, the interval one of `date_trunc`'s (year, quarter, month, week,
    /// day, hour).
    pub fn parse_partitions(text: &str) -> Result<Vec<(String, String, String)>, String> {
        let mut out = Vec::new();
        for rule in text.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let parts: Vec<&str> = rule.split(':').map(str::trim).collect();
            let [table, column, interval] = parts.as_slice() else {
                return Err(format!("{rule:?}: expected `table:column:interval`, e.g. \"orders:created_at:day\""));
            };
            let units = ["year", "quarter", "month", "week", "day", "hour"];
            if !units.contains(&interval.to_ascii_lowercase().as_str()) {
                return Err(format!("{rule:?}: the interval must be one of {}", units.join(", ")));
            }
            out.push((table.to_string(), column.to_string(), interval.to_ascii_lowercase()));
        }
        Ok(out)
    }

    fn buckets_of(&self, table: &str) -> String {
        let exact = self.buckets.iter().find(|(p, _, _)| p == table);
        match exact.or_else(|| self.buckets.iter().find(|(_, re, _)| re.is_match(table))) {
            Some((_, _, n)) => n.to_string(),
            None => "AUTO".into(),
        }
    }
}

/// `CREATE TABLE IF NOT EXISTS` for `db.table` with the change's columns, key columns first (then
/// the partition column), and the rules' buckets, partition and properties.
pub fn create_table(db: &str, table: &str, change: &SchemaChange, rules: &TableRules) -> anyhow::Result<String> {
    let columns = columns_of(&change.schema).map_err(|e| anyhow::anyhow!("{}: {}", change.table, e.message))?;
    let (mut keys, model): (Vec<&str>, &str) = if change.primary_key.is_empty() {
        (columns.first().map(|c| c.name.as_str()).into_iter().collect(), "DUPLICATE")
    } else {
        (change.primary_key.iter().map(String::as_str).collect(), "UNIQUE")
    };
    for k in &keys {
        anyhow::ensure!(columns.iter().any(|c| &c.name == k), "{}: the key column `{k}` is not a column", change.table);
    }
    let partition = rules.partitions.iter().find(|(t, _, _)| t == table);
    let mut partition_clause = String::new();
    let mut first: Vec<String> =
        keys.iter().filter_map(|k| columns.iter().find(|c| &c.name == k)).map(|c| column_ddl(c, true)).collect();
    if let Some((_, col, interval)) = partition {
        let c = columns
            .iter()
            .find(|c| &c.name == col)
            .ok_or_else(|| anyhow::anyhow!("table-partitions: `{table}` has no column `{col}` to partition by"))?;
        if !keys.contains(&col.as_str()) {
            first.push(column_ddl(&ColumnDef { nullable: false, ..c.clone() }, true));
            keys.push(col);
        }
        partition_clause = format!(" AUTO PARTITION BY RANGE (date_trunc({}, '{interval}'))()", quote(col));
    }
    let placed: Vec<&str> = keys.iter().copied().chain(partition.map(|(_, c, _)| c.as_str())).collect();
    let rest = columns.iter().filter(|c| !placed.contains(&c.name.as_str())).map(|c| column_ddl(c, false));
    let key_list = keys.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
    let hash = change
        .primary_key
        .iter()
        .map(String::as_str)
        .chain(change.primary_key.is_empty().then(|| keys[0]))
        .map(quote)
        .collect::<Vec<_>>()
        .join(", ");
    let mut ddl = format!(
        "CREATE TABLE IF NOT EXISTS {}.{} ({}) {model} KEY({key_list}){partition_clause} DISTRIBUTED BY HASH({hash}) BUCKETS {}",
        quote(db),
        quote(table),
        first.into_iter().chain(rest).collect::<Vec<_>>().join(", "),
        rules.buckets_of(table)
    );
    let mut props: Vec<(String, String)> = Vec::new();
    if model == "UNIQUE" {
        props.push(("enable_unique_key_merge_on_write".into(), "true".into()));
    }
    props.push(("light_schema_change".into(), "true".into()));
    for (k, v) in &rules.properties {
        props.retain(|(p, _)| p != k);
        props.push((k.clone(), v.clone()));
    }
    let text: Vec<String> =
        props.iter().map(|(k, v)| format!("\"{}\" = \"{}\"", k.replace('"', "\\\""), v.replace('"', "\\\""))).collect();
    ddl.push_str(&format!(" PROPERTIES ({})", text.join(", ")));
    Ok(ddl)
}

/// How a schema change becomes Doris DDL (the connector's `--schema-change-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// From the table's new columns: every column Doris lacks is added; drops, renames and type
    /// changes as the statement said.
    #[default]
    DebeziumStructure,
    /// From the statement alone: each clause becomes its Doris statement.
    SqlParser,
}

/// What a sink does with a schema change (Flink CDC's `schema.change.behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behavior {
    /// Any change of an existing table stops the pipeline.
    Exception,
    /// Apply it; a statement Doris refuses stops the pipeline.
    #[default]
    Evolve,
    /// Apply it; a statement Doris refuses is logged and skipped.
    TryEvolve,
    /// Apply it without losing data: dropped columns are kept, a renamed column is added under
    /// its new name.
    Lenient,
    /// Apply nothing (rows keep the columns the table has).
    Ignore,
}

impl Behavior {
    /// Whether rows may carry columns the table lacks (they are left out of the load).
    pub fn tolerates_missing_columns(self) -> bool {
        matches!(self, Behavior::TryEvolve | Behavior::Lenient | Behavior::Ignore)
    }
}

/// The statements that apply `change` to a table whose columns are `existing`; a change that
/// cannot be applied under `behavior` is an error naming the statement the source saw.
pub fn alter_table(
    db: &str,
    table: &str,
    existing: &crate::doris::fe::TableInfo,
    change: &SchemaChange,
    mode: Mode,
    behavior: Behavior,
    truncate: bool,
) -> anyhow::Result<Vec<String>> {
    let ddl = change.ddl.as_deref().unwrap_or("(no statement)");
    if behavior == Behavior::Exception {
        anyhow::bail!(
            "`{}` changed (`{ddl}`) and `schema_change.behavior = \"exception\"` stops on any change; set it to \"evolve\" to follow changes",
            change.table
        );
    }
    if behavior == Behavior::Ignore {
        tracing::info!("`{}`: `{ddl}` is not applied (schema_change.behavior = \"ignore\")", change.table);
        return Ok(Vec::new());
    }
    let columns = columns_of(&change.schema).map_err(|e| anyhow::anyhow!("{}: {}", change.table, e.message))?;
    let column = |n: &str| columns.iter().find(|c| c.name.eq_ignore_ascii_case(n));
    let target = format!("{}.{}", quote(db), quote(table));
    let mut have: Vec<String> = existing.columns.clone();
    let has = |have: &[String], n: &str| have.iter().any(|e| e.eq_ignore_ascii_case(n));
    let add = |name: &str, default: Option<&str>, comment: Option<&str>| -> Option<String> {
        let c = column(name)?;
        let mut s = format!("ALTER TABLE {target} ADD COLUMN {}", column_ddl(&nullable(c), false));
        if let Some(d) = default {
            if d.eq_ignore_ascii_case("CURRENT_TIMESTAMP") {
                s.push_str(" DEFAULT CURRENT_TIMESTAMP");
            } else {
                s.push_str(&format!(" DEFAULT '{}'", d.replace('\\', "\\\\").replace('\'', "\\'")));
            }
        }
        if let Some(text) = comment {
            s.push_str(&format!(" COMMENT '{}'", text.replace('\\', "\\\\").replace('\'', "\\'")));
        }
        Some(s)
    };
    let mut out = Vec::new();
    for step in &change.alter {
        match step {
            Alter::AddColumn { name, default, comment } if !has(&have, name) => {
                out.extend(add(name, default.as_deref(), comment.as_deref()));
                have.push(name.clone());
            }
            Alter::AddColumn { .. } => {}
            Alter::DropColumn { name } if has(&have, name) => {
                if behavior == Behavior::Lenient {
                    tracing::info!(
                        "`{}`: column `{name}` is dropped at the source and kept in Doris (lenient)",
                        change.table
                    );
                } else {
                    out.push(format!("ALTER TABLE {target} DROP COLUMN {}", quote(name)));
                    have.retain(|e| !e.eq_ignore_ascii_case(name));
                }
            }
            Alter::DropColumn { .. } => {}
            Alter::RenameColumn { from, to } if has(&have, from) && !has(&have, to) => {
                if behavior == Behavior::Lenient {
                    out.extend(add(to, None, None));
                } else {
                    out.push(format!("ALTER TABLE {target} RENAME COLUMN {} {}", quote(from), quote(to)));
                    have.retain(|e| !e.eq_ignore_ascii_case(from));
                }
                have.push(to.clone());
            }
            Alter::RenameColumn { .. } => {}
            Alter::ModifyColumn { name, .. } => {
                if let (Some(c), true) = (column(name), has(&have, name)) {
                    let c = nullable(c);
                    // Replayed after a crash, the change may be in place (Doris refuses a change
                    // that changes nothing).
                    let done = existing
                        .types
                        .iter()
                        .any(|(n, t)| n.eq_ignore_ascii_case(name) && same_type(t, &c.doris_type.to_string()));
                    if !done {
                        out.push(format!("ALTER TABLE {target} MODIFY COLUMN {}", column_ddl(&c, false)));
                    }
                }
            }
            Alter::Truncate if truncate => out.push(format!("TRUNCATE TABLE {target}")),
            Alter::Truncate => tracing::warn!(
                "`{}` was truncated at the source; its Doris table keeps its rows (set `schema_change.truncate = true` to truncate it too)",
                change.table
            ),
            Alter::CreateTable => {}
            Alter::Unsupported { reason } => {
                if matches!(behavior, Behavior::Evolve) {
                    anyhow::bail!(
                        "`{}`: cannot follow `{ddl}`: {reason}; set `schema_change.behavior = \"lenient\"` (or \"try_evolve\") to go on without it",
                        change.table
                    );
                }
                tracing::warn!("`{}`: `{ddl}` is not followed: {reason}", change.table);
            }
        }
    }
    if mode == Mode::DebeziumStructure {
        // Every column of the new shape the table lacks, whatever the statement said.
        for c in &columns {
            if !has(&have, &c.name) {
                out.extend(add(&c.name, None, None));
                have.push(c.name.clone());
            }
        }
    }
    Ok(out)
}

/// Whether a type as `DESC` shows it (`VARCHAR(32)`, `DECIMALV3(10, 2)`, `int(11)`) is the type a
/// column definition names (`VARCHAR(32)`, `DECIMAL(10,2)`, `INT`).
fn same_type(shown: &str, named: &str) -> bool {
    static WIDTH: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^(TINYINT|SMALLINT|INT|BIGINT|LARGEINT)\(\d+\)$").expect("a valid pattern")
    });
    let canonical = |t: &str| {
        let t: String = t.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_uppercase();
        let t = t.replace("DECIMALV3", "DECIMAL").replace("DATETIMEV2", "DATETIME").replace("DATEV2", "DATE");
        let t = WIDTH.replace(&t, "$1").into_owned();
        match t.as_str() {
            "DATETIME(0)" => "DATETIME".to_string(),
            _ => t,
        }
    };
    canonical(shown) == canonical(named)
}

/// An added or changed column is nullable in Doris: rows loaded before it have no value.
fn nullable(c: &ColumnDef) -> ColumnDef {
    ColumnDef { nullable: true, ..c.clone() }
}

/// Why the table that exists cannot take the source table's rows, if it cannot: a source column
/// it lacks, or a primary key where the table is not UNIQUE.
pub fn mismatch(target: &str, info: &crate::doris::fe::TableInfo, change: &SchemaChange) -> Option<String> {
    let missing: Vec<String> = change
        .schema
        .fields()
        .iter()
        .map(|f| f.name())
        .filter(|n| !info.columns.iter().any(|c| c.eq_ignore_ascii_case(n)))
        .map(|n| format!("`{n}`"))
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "the Doris table `{target}` exists without column {} of `{}`; its columns are {}: drop it and let Sluice create it, or add the columns",
            missing.join(", "),
            change.table,
            info.columns.join(", ")
        ));
    }
    if !change.primary_key.is_empty() && !info.is_unique() {
        return Some(format!(
            "the Doris table `{target}` is {} but `{}` has a primary key ({}): updates and deletes need a UNIQUE KEY table; drop it and let Sluice create it",
            info.keys_type,
            change.table,
            change.primary_key.join(", ")
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::TableId;

    fn change(columns: &str, key: &[&str]) -> SchemaChange {
        let defs = sluice_guest::types::parse_columns(columns).unwrap();
        SchemaChange {
            table: TableId::new("app.users"),
            schema: sluice_guest::types::arrow_schema(&defs),
            primary_key: key.iter().map(|k| k.to_string()).collect(),
            ddl: None,
            alter: Vec::new(),
            resumed: false,
        }
    }

    fn table_info(columns: &[&str]) -> crate::doris::fe::TableInfo {
        crate::doris::fe::TableInfo { columns: columns.iter().map(|c| c.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn a_type_change_already_in_place_is_not_sent_again() {
        let mut c = change("id BIGINT, name VARCHAR(32), price DECIMAL(10,2), n BIGINT", &["id"]);
        c.alter = ["name", "price", "n"].map(|n| Alter::ModifyColumn { name: n.into(), from: "?".into() }).to_vec();
        let mut info = table_info(&["id", "name", "price", "n"]);
        let plan = |info: &crate::doris::fe::TableInfo| {
            alter_table("ods", "users", info, &c, Mode::SqlParser, Behavior::Evolve, false).unwrap()
        };
        assert_eq!(plan(&info).len(), 3);
        info.types = [("name", "varchar(32)"), ("price", "DECIMALV3(10, 2)"), ("n", "bigint(20)")]
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .to_vec();
        assert!(plan(&info).is_empty(), "{:?}", plan(&info));
        info.types[0].1 = "VARCHAR(8)".into();
        info.types[1].1 = "DECIMAL(9, 2)".into();
        assert_eq!(
            plan(&info),
            [
                "ALTER TABLE `ods`.`users` MODIFY COLUMN `name` VARCHAR(32) NULL",
                "ALTER TABLE `ods`.`users` MODIFY COLUMN `price` DECIMAL(10,2) NULL"
            ]
        );
    }

    #[test]
    fn a_table_with_a_primary_key_is_created_unique_with_its_key_first() {
        let none = TableRules::default();
        let users = change("name STRING, id BIGINT NOT NULL, score DECIMAL(10,2)", &["id"]);
        let ddl = create_table("ods", "users", &users, &none);
        assert_eq!(
            ddl.unwrap(),
            "CREATE TABLE IF NOT EXISTS `ods`.`users` (`id` BIGINT NOT NULL, `name` STRING NULL, `score` DECIMAL(10,2) NULL) \
             UNIQUE KEY(`id`) DISTRIBUTED BY HASH(`id`) BUCKETS AUTO PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\", \"light_schema_change\" = \"true\")"
        );
        let replicas = TableRules {
            properties: [("replication_num".to_string(), "1".to_string())].into(),
            ..TableRules::default()
        };
        let dup = create_table("ods", "logs", &change("msg STRING, at DATETIME", &[]), &replicas).unwrap();
        assert!(
            dup.ends_with(" BUCKETS AUTO PROPERTIES (\"light_schema_change\" = \"true\", \"replication_num\" = \"1\")"),
            "{dup}"
        );
        assert!(dup.contains("(`msg` VARCHAR(65533) NULL, `at` DATETIME NULL) DUPLICATE KEY(`msg`)"), "{dup}");
        let bad = create_table("ods", "t", &change("a INT", &["b"]), &none).unwrap_err().to_string();
        assert_eq!(bad, "app.users: the key column `b` is not a column");
    }

    #[test]
    fn buckets_go_by_exact_name_then_the_first_pattern_and_partitions_by_date() {
        let rules = TableRules {
            buckets: TableRules::parse_buckets("ord.*:30, orders:10,logs_\\d+:4").unwrap(),
            partitions: TableRules::parse_partitions("orders:at:day").unwrap(),
            ..TableRules::default()
        };
        let orders =
            create_table("ods", "orders", &change("id INT NOT NULL, note STRING, at DATETIME", &["id"]), &rules)
                .unwrap();
        assert!(
            orders.contains(
                "(`id` INT NOT NULL, `at` DATETIME NOT NULL, `note` STRING NULL) UNIQUE KEY(`id`, `at`) \
                 AUTO PARTITION BY RANGE (date_trunc(`at`, 'day'))() DISTRIBUTED BY HASH(`id`) BUCKETS 10"
            ),
            "{orders}"
        );
        let ord = create_table("ods", "ordinal", &change("id INT", &["id"]), &rules).unwrap();
        assert!(ord.contains(" BUCKETS 30 "), "{ord}");
        assert!(create_table("ods", "logs_7", &change("id INT", &[]), &rules).unwrap().contains(" BUCKETS 4 "));
        assert!(create_table("ods", "other", &change("id INT", &[]), &rules).unwrap().contains(" BUCKETS AUTO "));
        assert_eq!(
            TableRules::parse_buckets("a:0").unwrap_err(),
            "\"a:0\": the number of buckets must be a whole number above 0"
        );
        assert!(TableRules::parse_partitions("a:b:minute").unwrap_err().contains("one of year, quarter"));
    }

    #[test]
    fn alters_become_statements_by_mode_and_behavior() {
        let existing = table_info(&["id", "old", "name", "__DORIS_DELETE_SIGN__"]);
        let mut c = change("id BIGINT, fresh INT, full_name VARCHAR(60), score BIGINT", &["id"]);
        c.ddl = Some("ALTER TABLE users …".into());
        c.alter = vec![
            Alter::AddColumn { name: "fresh".into(), default: Some("it's".into()), comment: Some("new".into()) },
            Alter::DropColumn { name: "old".into() },
            Alter::RenameColumn { from: "name".into(), to: "full_name".into() },
        ];
        let plan = |mode, behavior| alter_table("ods", "users", &existing, &c, mode, behavior, false).unwrap();
        let t = "ALTER TABLE `ods`.`users`";
        assert_eq!(
            plan(Mode::SqlParser, Behavior::Evolve),
            [
                format!("{t} ADD COLUMN `fresh` INT NULL DEFAULT 'it\\'s' COMMENT 'new'"),
                format!("{t} DROP COLUMN `old`"),
                format!("{t} RENAME COLUMN `name` `full_name`"),
            ]
        );
        // From the structure, `score` (which the table lacks) is added too.
        assert_eq!(
            plan(Mode::DebeziumStructure, Behavior::Evolve).last().unwrap(),
            &format!("{t} ADD COLUMN `score` BIGINT NULL")
        );
        assert_eq!(
            plan(Mode::SqlParser, Behavior::Lenient),
            [
                format!("{t} ADD COLUMN `fresh` INT NULL DEFAULT 'it\\'s' COMMENT 'new'"),
                format!("{t} ADD COLUMN `full_name` VARCHAR(60) NULL"),
            ]
        );
        assert!(plan(Mode::SqlParser, Behavior::Ignore).is_empty());
        let stop = alter_table("ods", "users", &existing, &c, Mode::SqlParser, Behavior::Exception, false).unwrap_err();
        assert!(stop.to_string().contains("`app.users` changed (`ALTER TABLE users …`)"), "{stop}");
        // Replayed after a crash: what is already done is not done again.
        let done = table_info(&["id", "fresh", "full_name", "score"]);
        assert!(
            alter_table("ods", "users", &done, &c, Mode::DebeziumStructure, Behavior::Evolve, false)
                .unwrap()
                .is_empty()
        );
        c.alter = vec![Alter::Unsupported { reason: "the statement could not be read".into() }];
        let stop = alter_table("ods", "users", &done, &c, Mode::SqlParser, Behavior::Evolve, false).unwrap_err();
        assert!(
            stop.to_string()
                .starts_with("`app.users`: cannot follow `ALTER TABLE users …`: the statement could not be read"),
            "{stop}"
        );
        c.alter = vec![Alter::Truncate];
        assert!(alter_table("ods", "users", &done, &c, Mode::SqlParser, Behavior::Evolve, false).unwrap().is_empty());
        let on = alter_table("ods", "users", &done, &c, Mode::SqlParser, Behavior::Evolve, true).unwrap();
        assert_eq!(on, ["TRUNCATE TABLE `ods`.`users`"]);
    }
}
