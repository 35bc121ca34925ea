//! Tables the Doris sink creates or alters when a schema change reaches it: `CREATE TABLE` from
//! the change's columns (UNIQUE KEY on its primary key, else DUPLICATE KEY on its first column),
//! and `ADD COLUMN` / `DROP COLUMN` for a table that exists.

use sluice_guest::types::{ColumnDef, DorisType, columns_of};

use crate::doris::scan::quote;
use crate::runtime::SchemaChange;

/// A column as DDL: `` `name` TYPE [NOT] NULL ``, nullable as the source says (a DUPLICATE key
/// column may hold NULLs). A key column cannot be a STRING in Doris.
fn column_ddl(c: &ColumnDef, key: bool) -> String {
    let t = match (&c.doris_type, key) {
        (DorisType::String, true) => "VARCHAR(65533)".to_string(),
        (t, _) => t.to_string(),
    };
    format!("{} {t}{}", quote(&c.name), if c.nullable { " NULL" } else { " NOT NULL" })
}

/// `CREATE TABLE IF NOT EXISTS` for `db.table` with the change's columns, key columns first, and
/// `properties` (the sink's `table_properties`) after the ones Sluice sets.
pub fn create_table(
    db: &str,
    table: &str,
    change: &SchemaChange,
    properties: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<String> {
    let columns = columns_of(&change.schema).map_err(|e| anyhow::anyhow!("{}: {}", change.table, e.message))?;
    let (keys, model): (Vec<&str>, &str) = if change.primary_key.is_empty() {
        (columns.first().map(|c| c.name.as_str()).into_iter().collect(), "DUPLICATE")
    } else {
        (change.primary_key.iter().map(String::as_str).collect(), "UNIQUE")
    };
    for k in &keys {
        anyhow::ensure!(columns.iter().any(|c| &c.name == k), "{}: the key column `{k}` is not a column", change.table);
    }
    let ordered = keys
        .iter()
        .filter_map(|k| columns.iter().find(|c| &c.name == k).map(|c| column_ddl(c, true)))
        .chain(columns.iter().filter(|c| !keys.contains(&c.name.as_str())).map(|c| column_ddl(c, false)));
    let key_list = keys.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
    let mut ddl = format!(
        "CREATE TABLE IF NOT EXISTS {}.{} ({}) {model} KEY({key_list}) DISTRIBUTED BY HASH({key_list}) BUCKETS AUTO",
        quote(db),
        quote(table),
        ordered.collect::<Vec<_>>().join(", ")
    );
    let mut props: Vec<(String, String)> = Vec::new();
    if model == "UNIQUE" {
        props.push(("enable_unique_key_merge_on_write".into(), "true".into()));
    }
    for (k, v) in properties {
        props.retain(|(p, _)| p != k);
        props.push((k.clone(), v.clone()));
    }
    if !props.is_empty() {
        let text: Vec<String> = props
            .iter()
            .map(|(k, v)| format!("\"{}\" = \"{}\"", k.replace('"', "\\\""), v.replace('"', "\\\"")))
            .collect();
        ddl.push_str(&format!(" PROPERTIES ({})", text.join(", ")));
    }
    Ok(ddl)
}

/// The `ALTER TABLE` statements that take a table with `existing` columns to the change's.
pub fn alter_table(db: &str, table: &str, existing: &[String], change: &SchemaChange) -> anyhow::Result<Vec<String>> {
    let columns = columns_of(&change.schema).map_err(|e| anyhow::anyhow!("{}: {}", change.table, e.message))?;
    let target = format!("{}.{}", quote(db), quote(table));
    let is_hidden = |c: &str| c.starts_with("__DORIS_");
    let mut out = Vec::new();
    for c in columns.iter().filter(|c| !existing.iter().any(|e| e.eq_ignore_ascii_case(&c.name))) {
        out.push(format!("ALTER TABLE {target} ADD COLUMN {}", column_ddl(c, false)));
    }
    for e in existing.iter().filter(|e| !is_hidden(e) && !columns.iter().any(|c| c.name.eq_ignore_ascii_case(e))) {
        out.push(format!("ALTER TABLE {target} DROP COLUMN {}", quote(e)));
    }
    Ok(out)
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
        }
    }

    #[test]
    fn a_table_with_a_primary_key_is_created_unique_with_its_key_first() {
        let none = std::collections::BTreeMap::new();
        let users = change("name STRING, id BIGINT NOT NULL, score DECIMAL(10,2)", &["id"]);
        let ddl = create_table("ods", "users", &users, &none);
        assert_eq!(
            ddl.unwrap(),
            "CREATE TABLE IF NOT EXISTS `ods`.`users` (`id` BIGINT NOT NULL, `name` STRING NULL, `score` DECIMAL(10,2) NULL) \
             UNIQUE KEY(`id`) DISTRIBUTED BY HASH(`id`) BUCKETS AUTO PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\")"
        );
        let replicas = [("replication_num".to_string(), "1".to_string())].into();
        let dup = create_table("ods", "logs", &change("msg STRING, at DATETIME", &[]), &replicas).unwrap();
        assert!(dup.ends_with(" BUCKETS AUTO PROPERTIES (\"replication_num\" = \"1\")"), "{dup}");
        assert!(dup.contains("(`msg` VARCHAR(65533) NULL, `at` DATETIME NULL) DUPLICATE KEY(`msg`)"), "{dup}");
        let bad = create_table("ods", "t", &change("a INT", &["b"]), &none).unwrap_err().to_string();
        assert_eq!(bad, "app.users: the key column `b` is not a column");
    }

    #[test]
    fn added_and_dropped_columns_become_alter_statements() {
        let existing = ["id".to_string(), "old".to_string(), "__DORIS_DELETE_SIGN__".to_string()];
        let out = alter_table("ods", "users", &existing, &change("id BIGINT, fresh INT", &["id"])).unwrap();
        assert_eq!(
            out,
            ["ALTER TABLE `ods`.`users` ADD COLUMN `fresh` INT NULL", "ALTER TABLE `ods`.`users` DROP COLUMN `old`"]
        );
    }
}
