//! MySQL/MariaDB column types as Doris types (the connector's `MysqlType.toDorisType`,
//! `reference/flink-connector.md` §9.4), and how a column is selected so that its text reads back
//! as that type.

use sluice_guest::types::DorisType;

/// A column of a source table, from `information_schema.columns` or a DDL statement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MysqlColumn {
    pub name: String,
    /// `COLUMN_TYPE`, e.g. `int(10) unsigned`, `varchar(32)`, `decimal(38,10)`, `datetime(6)`.
    pub column_type: String,
    pub nullable: bool,
}

impl MysqlColumn {
    /// The Doris type of the column, or why there is none.
    pub fn doris_type(&self) -> Result<DorisType, String> {
        let t = self.column_type.to_ascii_lowercase();
        let unsigned = t.contains("unsigned");
        let base = t.split(['(', ' ']).next().unwrap_or_default();
        let args: Vec<u32> = t
            .split_once('(')
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(inside, _)| inside.split(',').filter_map(|a| a.trim().parse().ok()).collect())
            .unwrap_or_default();
        let text =
            |n: u32| if n.saturating_mul(3) <= 65533 { DorisType::Varchar(Some(n * 3)) } else { DorisType::String };
        Ok(match base {
            "bit" | "bool" | "boolean" => DorisType::Boolean,
            "tinyint" if unsigned => DorisType::SmallInt,
            "tinyint" => DorisType::TinyInt,
            "smallint" if unsigned => DorisType::Int,
            "smallint" => DorisType::SmallInt,
            "mediumint" | "int" | "integer" if unsigned => DorisType::BigInt,
            "mediumint" | "int" | "integer" | "year" => DorisType::Int,
            "bigint" if unsigned => DorisType::LargeInt,
            "bigint" => DorisType::BigInt,
            "float" => DorisType::Float,
            "double" | "real" => DorisType::Double,
            "decimal" | "numeric" | "fixed" => {
                let (p, s) = (args.first().copied().unwrap_or(10), args.get(1).copied().unwrap_or(0));
                if p <= 38 { DorisType::Decimal { precision: p as u8, scale: s as i8 } } else { DorisType::String }
            }
            "date" => DorisType::Date,
            "datetime" | "timestamp" => {
                DorisType::DateTime { precision: args.first().copied().unwrap_or(0).min(6) as u8 }
            }
            "char" | "varchar" => text(args.first().copied().unwrap_or(1)),
            "json" => DorisType::Json,
            "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set" | "time" | "tinyblob" | "blob"
            | "mediumblob" | "longblob" | "binary" | "varbinary" => DorisType::String,
            other => return Err(format!("column `{}`: unsupported MySQL type `{other}`", self.name)),
        })
    }

    /// The expression that selects the column as text of its Doris type: BIT as a number (its
    /// text protocol form is raw bytes), TIMESTAMP in UTC-free wall time as stored.
    pub fn select(&self) -> String {
        let quoted = format!("`{}`", self.name.replace('`', "``"));
        let base = self.column_type.to_ascii_lowercase();
        if base.starts_with("bit") { format!("{quoted} + 0 AS {quoted}") } else { quoted }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(column_type: &str) -> String {
        let c = MysqlColumn { name: "c".into(), column_type: column_type.into(), nullable: true };
        c.doris_type().map(|t| t.to_string()).unwrap_or_else(|e| e)
    }

    #[test]
    fn mysql_types_map_as_the_connector_maps_them() {
        let cases = [
            ("bit(1)", "BOOLEAN"),
            // `BOOL` columns read back as tinyint(1), which can hold 0..=127: kept as numbers.
            ("tinyint(1)", "TINYINT"),
            ("tinyint(4)", "TINYINT"),
            ("tinyint(3) unsigned", "SMALLINT"),
            ("smallint(5) unsigned", "INT"),
            ("int(11)", "INT"),
            ("int(10) unsigned", "BIGINT"),
            ("bigint(20)", "BIGINT"),
            ("bigint(20) unsigned", "LARGEINT"),
            ("float", "FLOAT"),
            ("double", "DOUBLE"),
            ("decimal(38,10)", "DECIMAL(38,10)"),
            ("decimal(65,2)", "STRING"),
            ("date", "DATE"),
            ("datetime(6)", "DATETIME(6)"),
            ("timestamp", "DATETIME"),
            ("varchar(32)", "VARCHAR(96)"),
            ("char(1)", "VARCHAR(3)"),
            ("varchar(30000)", "STRING"),
            ("enum('a','b')", "STRING"),
            ("longblob", "STRING"),
            ("json", "JSON"),
            ("geometry", "column `c`: unsupported MySQL type `geometry`"),
        ];
        for (mysql, doris) in cases {
            assert_eq!(t(mysql), doris, "{mysql}");
        }
    }
}
