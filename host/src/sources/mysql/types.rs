//! MySQL/MariaDB column types as Doris types (the connector's `MysqlType.toDorisType`,
//! `reference/flink-connector.md` §9.4), and how a column is selected so that its text reads back
//! as that type.

use sluice_guest::types::{ColumnDef, DorisType};

use crate::sources::cdc::{BinaryHandling, varchar_of_chars};

/// A column of a source table, from `information_schema.columns` or a DDL statement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MysqlColumn {
    pub name: String,
    /// `COLUMN_TYPE`, e.g. `int(10) unsigned`, `varchar(32)`, `decimal(38,10)`, `datetime(6)`.
    pub column_type: String,
    pub nullable: bool,
    /// `CHARACTER_SET_NAME` of a text column (the binlog carries its bytes in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charset: Option<String>,
}

impl crate::sources::cdc::Column for MysqlColumn {
    fn doris_column(&self) -> Result<ColumnDef, String> {
        Ok(ColumnDef::new(&self.name, self.doris_type()?, self.nullable))
    }
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
            "char" | "varchar" => varchar_of_chars(args.first().copied().unwrap_or(1)),
            "json" => DorisType::Json,
            "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set" | "time" | "tinyblob" | "blob"
            | "mediumblob" | "longblob" | "binary" | "varbinary" => DorisType::String,
            other => return Err(format!("column `{}`: unsupported MySQL type `{other}`", self.name)),
        })
    }

    /// The type's name without its arguments and attributes (`int`, `varchar`, `enum` …), as
    /// written: compare it ignoring case ([`MysqlColumn::is`]).
    pub fn base(&self) -> &str {
        self.column_type.split(['(', ' ']).next().unwrap_or_default()
    }

    /// Whether the column's type is one of `bases` (lower case), read per value without
    /// allocating.
    pub fn is(&self, bases: &[&str]) -> bool {
        let base = self.base();
        bases.iter().any(|b| base.eq_ignore_ascii_case(b))
    }

    /// Whether the column is a TIMESTAMP (an instant, where DATETIME is a wall time).
    pub fn is_timestamp(&self) -> bool {
        self.is(&["timestamp"])
    }

    /// Whether the column holds bytes rather than text.
    pub fn is_binary(&self) -> bool {
        self.is(&["tinyblob", "blob", "mediumblob", "longblob", "binary", "varbinary"])
    }

    /// A value's bytes as the text Doris gets: a binary column's by `binary`; text as UTF-8
    /// (what the snapshot reads, the server converting), or with `raw` in the column's charset
    /// (what the binlog carries).
    pub fn text(&self, bytes: &[u8], binary: BinaryHandling, raw: bool) -> Result<String, String> {
        if self.is_binary() {
            return binary.encode(bytes, &format!("column `{}` ({})", self.name, self.column_type));
        }
        let charset = if raw { self.charset.as_deref().unwrap_or("utf8mb4") } else { "utf8mb4" };
        let is = |names: &[&str]| names.iter().any(|n| charset.eq_ignore_ascii_case(n));
        if is(&["utf8mb4", "utf8mb3", "utf8", "ascii"]) {
            String::from_utf8(bytes.to_vec())
                .map_err(|_| format!("column `{}`: a value is not valid {charset}", self.name))
        } else if is(&["latin1"]) {
            // ISO-8859-1 (MySQL's latin1 differs only in 0x80..0x9F, rare in text).
            Ok(bytes.iter().map(|&b| char::from(b)).collect())
        } else {
            Err(format!(
                "column `{}`: text in charset {charset} is not decoded from the binlog; convert the column to utf8mb4",
                self.name
            ))
        }
    }

    /// The column as written in a row's [`Fingerprint`](crate::runtime::mirror::Fingerprint)
    /// (inside `CONCAT_WS`), and whether it is text; none where the server's text is not how
    /// Sluice writes the Doris value (floats, times, JSON, bits, bytes, text in other charsets).
    /// `zone`: the source's `server_time_zone`, into whose wall time TIMESTAMPs are converted.
    pub fn fingerprinted(&self, zone: Option<chrono_tz::Tz>) -> Option<(String, bool)> {
        let quoted = format!("`{}`", self.name.replace('`', "``"));
        let t = self.column_type.to_ascii_lowercase();
        let utf8 = matches!(
            self.charset.as_deref().map(str::to_ascii_lowercase).as_deref(),
            Some("utf8mb4" | "utf8mb3" | "utf8" | "ascii")
        );
        let text = match t.split(['(', ' ']).next().unwrap_or_default() {
            "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "year" | "date" => false,
            "decimal" | "numeric" | "fixed" if matches!(self.doris_type(), Ok(DorisType::Decimal { .. })) => false,
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" if utf8 => true,
            // As UTC wall time (the session's), unless the pipeline converts it to another zone.
            "datetime" => false,
            "timestamp" if zone.is_none() => false,
            _ => return None,
        };
        let value = match (text, self.is_timestamp() || t.starts_with("datetime")) {
            (true, _) => format!("CONCAT(LENGTH({quoted}), ':', {quoted})"),
            (_, true) => format!("DATE_FORMAT({quoted}, '%Y-%m-%d %H:%i:%s.%f')"),
            _ => quoted,
        };
        Some((if self.nullable { format!("IFNULL({value}, 'N')") } else { value }, text))
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
        let c = MysqlColumn { name: "c".into(), column_type: column_type.into(), nullable: true, charset: None };
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
            ("varchar(32)", "VARCHAR(128)"),
            ("char(1)", "VARCHAR(4)"),
            ("varchar(16383)", "VARCHAR(65532)"),
            ("varchar(16384)", "STRING"),
            ("enum('a','b')", "STRING"),
            ("longblob", "STRING"),
            ("json", "JSON"),
            ("geometry", "column `c`: unsupported MySQL type `geometry`"),
        ];
        for (mysql, doris) in cases {
            assert_eq!(t(mysql), doris, "{mysql}");
        }
    }

    #[test]
    fn bytes_become_text_by_charset_and_binary_handling() {
        let blob = MysqlColumn { name: "b".into(), column_type: "blob".into(), nullable: true, charset: None };
        let raw = [0xff, 0x00, b'a'];
        assert_eq!(blob.text(&raw, BinaryHandling::Base64, true).unwrap(), "/wBh");
        assert_eq!(blob.text(&raw, BinaryHandling::Hex, false).unwrap(), "ff0061");
        assert_eq!(blob.text("ok😀".as_bytes(), BinaryHandling::Text, true).unwrap(), "ok😀");
        let e = blob.text(&raw, BinaryHandling::Text, true).unwrap_err();
        assert!(e.starts_with("column `b` (blob) holds bytes that are not UTF-8 text; set `binary_handling"), "{e}");
        let latin = MysqlColumn { charset: Some("latin1".into()), column_type: "varchar(5)".into(), ..blob.clone() };
        assert_eq!(latin.text(&[b'c', b'a', b'f', 0xe9], BinaryHandling::Text, true).unwrap(), "café");
        assert_eq!(latin.text("café".as_bytes(), BinaryHandling::Text, false).unwrap(), "café");
    }
}
