//! PostgreSQL column types as Doris types (the connector's `PostgresType.toDorisType`,
//! `reference/flink-connector.md` §9.4), and a value's text (as the server prints it, in both the
//! snapshot and pgoutput) as the text of that Doris type.

use sluice_guest::types::{ColumnDef, DorisType};

use crate::sources::cdc::{BinaryHandling, varchar_of_chars};

/// A column of a source table, from the catalog or a pgoutput relation message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PgColumn {
    pub name: String,
    /// `pg_type.typname`: `int4`, `numeric`, `timestamptz`, `_text` (an array), `mood` (an enum).
    pub type_name: String,
    /// `atttypmod` (-1: none).
    pub typmod: i32,
    pub nullable: bool,
    /// `typcategory = 'A'`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub array: bool,
    /// `typtype = 'e'`: a user's enum.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enumerated: bool,
    /// `attnum`, where the catalog was asked: a renamed column keeps it, which is how a rename
    /// is told from a drop and an add (pgoutput's relation message names columns only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attnum: Option<i16>,
}

impl crate::sources::cdc::Column for PgColumn {
    fn doris_column(&self) -> Result<ColumnDef, String> {
        Ok(ColumnDef::new(&self.name, self.doris_type()?, self.nullable))
    }
}

impl PgColumn {
    /// The Doris type of the column, or why there is none.
    pub fn doris_type(&self) -> Result<DorisType, String> {
        if self.array || self.enumerated {
            return Ok(DorisType::String);
        }
        let m = self.typmod;
        Ok(match self.type_name.as_str() {
            "int2" => DorisType::SmallInt,
            "int4" => DorisType::Int,
            "int8" => DorisType::BigInt,
            "numeric" if m >= 4 => {
                let (p, s) = (((m - 4) >> 16) & 0xffff, ((m - 4) & 0x7ff ^ 1024) - 1024);
                if (1..=38).contains(&p) {
                    DorisType::Decimal { precision: p as u8, scale: s.max(0) as i8 }
                } else {
                    DorisType::String
                }
            }
            "numeric" => DorisType::String,
            "float4" => DorisType::Float,
            "float8" => DorisType::Double,
            "timestamp" | "timestamptz" => DorisType::DateTime { precision: if m < 0 { 6 } else { m.min(6) as u8 } },
            "date" => DorisType::Date,
            "bool" => DorisType::Boolean,
            "bit" if m <= 1 => DorisType::Boolean,
            "bit" => DorisType::String,
            "bpchar" | "varchar" => u32::try_from(m - 4).map_or(DorisType::String, varchar_of_chars),
            "json" | "jsonb" => DorisType::Json,
            "point" | "line" | "lseg" | "box" | "path" | "polygon" | "circle" | "text" | "time" | "timetz"
            | "interval" | "cidr" | "inet" | "macaddr" | "varbit" | "uuid" | "bytea" | "regclass" => DorisType::String,
            other => return Err(format!("column `{}`: unsupported PostgreSQL type `{other}`", self.name)),
        })
    }

    /// The column as written in a row's [`Fingerprint`](crate::runtime::mirror::Fingerprint)
    /// (inside `concat_ws`), and whether it is text; none where PostgreSQL's text is not how Sluice
    /// writes the Doris value (floats, times, booleans, JSON, arrays, bytes, padded `char`).
    /// `zone`: the source's `server_time_zone`, into whose wall time TIMESTAMPTZs are converted.
    pub fn fingerprinted(&self, zone: Option<chrono_tz::Tz>) -> Option<(String, bool)> {
        let quoted = format!("\"{}\"", self.name.replace('"', "\"\""));
        if self.array || self.enumerated {
            return None;
        }
        let (value, text) = match self.type_name.as_str() {
            "int2" | "int4" | "int8" => (format!("{quoted}::text"), false),
            "numeric" if matches!(self.doris_type(), Ok(DorisType::Decimal { .. })) => {
                (format!("{quoted}::text"), false)
            }
            "date" => (format!("to_char({quoted}, 'YYYY-MM-DD')"), false),
            "timestamp" => (format!("to_char({quoted}, 'YYYY-MM-DD HH24:MI:SS.US')"), false),
            "timestamptz" => {
                let zone = zone.map_or("UTC", |z| z.name()).replace('\'', "''");
                (format!("to_char({quoted} AT TIME ZONE '{zone}', 'YYYY-MM-DD HH24:MI:SS.US')"), false)
            }
            "varchar" | "text" => (format!("octet_length({quoted}) || ':' || {quoted}"), true),
            "uuid" => (format!("'36:' || {quoted}"), true),
            _ => return None,
        };
        Some((if self.nullable { format!("coalesce({value}, 'N')") } else { value }, text))
    }

    /// The column's value as PostgreSQL prints it (session `TimeZone = UTC`, `bytea_output =
    /// hex`), as the text Doris gets: booleans as `true`/`false`, TIMESTAMPTZ as wall time in
    /// `zone`, BYTEA by `binary`, arrays as JSON arrays.
    pub fn text(&self, value: &str, binary: BinaryHandling, zone: Option<chrono_tz::Tz>) -> Result<String, String> {
        let what = || format!("column `{}` ({})", self.name, self.type_name);
        if self.array {
            return array_json(value, element_kind(self.type_name.trim_start_matches('_')))
                .map_err(|e| format!("{}: {value:?} is not an array literal ({e})", what()));
        }
        Ok(match self.type_name.as_str() {
            "bool" => match value {
                "t" => "true".into(),
                "f" => "false".into(),
                other => other.into(),
            },
            "timestamptz" => {
                // `2026-01-02 03:04:05.123456+00` (with offsets such as `+05:30` in other zones).
                let cut = value.rfind(['+', '-']).filter(|&i| i > 10).unwrap_or(value.len());
                let (wall, offset) = value.split_at(cut);
                let seconds = offset_seconds(offset).ok_or_else(|| format!("{}: {value:?}: no UTC offset", what()))?;
                let micros = sluice_guest::batch::parse_datetime_micros(wall)
                    .map_err(|e| format!("{}: {value:?}: {}", what(), e.message))?;
                crate::sources::wall_time(zone, micros - seconds * 1_000_000)
            }
            "bytea" => {
                let hex = value.strip_prefix("\\x").ok_or_else(|| format!("{}: not hex output", what()))?;
                let bytes = (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| format!("{}: not hex output", what()))?;
                binary.encode(&bytes, &what())?
            }
            _ => value.into(),
        })
    }
}

/// `+00`, `-05:30`, `+05:45:10` → seconds east of UTC.
fn offset_seconds(offset: &str) -> Option<i64> {
    let sign = match offset.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let mut parts = offset[1..].split(':').map(|p| p.parse::<i64>().ok());
    let h = parts.next()??;
    let m = parts.next().unwrap_or(Some(0))?;
    let s = parts.next().unwrap_or(Some(0))?;
    Some(sign * (h * 3600 + m * 60 + s))
}

/// How an array's elements are written in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Number,
    Bool,
    Text,
}

fn element_kind(type_name: &str) -> Element {
    match type_name {
        "int2" | "int4" | "int8" | "float4" | "float8" | "numeric" | "oid" => Element::Number,
        "bool" => Element::Bool,
        _ => Element::Text,
    }
}

/// An array literal (`{1,2,NULL}`, `{"a b","c\"d"}`, `{{1,2},{3,4}}`) as a JSON array.
fn array_json(literal: &str, kind: Element) -> Result<String, String> {
    // A lower bound other than 1 is printed first: `[0:1]={1,2}`.
    let body = match literal.split_once("]={") {
        Some((_, rest)) if literal.starts_with('[') => &literal[literal.len() - rest.len() - 1..],
        _ => literal,
    };
    let mut chars = body.chars().peekable();
    let value = parse_array(&mut chars, kind)?;
    if chars.next().is_some() {
        return Err("text after the closing brace".into());
    }
    Ok(value.to_string())
}

fn parse_array(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    kind: Element,
) -> Result<serde_json::Value, String> {
    if chars.next() != Some('{') {
        return Err("no opening brace".into());
    }
    let mut items = Vec::new();
    if chars.peek() == Some(&'}') {
        chars.next();
        return Ok(serde_json::Value::Array(items));
    }
    loop {
        let item = match chars.peek() {
            Some('{') => parse_array(chars, kind)?,
            Some('"') => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some('\\') => s.push(chars.next().ok_or("a backslash at the end")?),
                        Some('"') => break,
                        Some(c) => s.push(c),
                        None => return Err("an unclosed quote".into()),
                    }
                }
                element(&s, kind, true)?
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' || c == '}' {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                element(s.trim(), kind, false)?
            }
        };
        items.push(item);
        match chars.next() {
            Some(',') => {}
            Some('}') => return Ok(serde_json::Value::Array(items)),
            _ => return Err("no closing brace".into()),
        }
    }
}

fn element(text: &str, kind: Element, quoted: bool) -> Result<serde_json::Value, String> {
    if !quoted && text.eq_ignore_ascii_case("NULL") {
        return Ok(serde_json::Value::Null);
    }
    Ok(match kind {
        Element::Number => match serde_json::from_str::<serde_json::Number>(text) {
            Ok(n) => serde_json::Value::Number(n),
            // NaN, Infinity
            Err(_) => serde_json::Value::String(text.into()),
        },
        Element::Bool => serde_json::Value::Bool(text == "t" || text == "true"),
        Element::Text => serde_json::Value::String(text.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(type_name: &str, typmod: i32) -> PgColumn {
        PgColumn {
            name: "c".into(),
            type_name: type_name.trim_start_matches('_').into(),
            typmod,
            nullable: true,
            array: type_name.starts_with('_'),
            enumerated: type_name == "mood",
            attnum: None,
        }
    }

    fn t(type_name: &str, typmod: i32) -> String {
        col(type_name, typmod).doris_type().map(|t| t.to_string()).unwrap_or_else(|e| e)
    }

    #[test]
    fn postgres_types_map_as_the_connector_maps_them() {
        // numeric(p,s) has typmod ((p << 16) | s) + 4; varchar(n) n + 4; timestamp(p) p.
        let cases = [
            ("int2", -1, "SMALLINT"),
            ("int4", -1, "INT"),
            ("int8", -1, "BIGINT"),
            ("numeric", (38 << 16 | 10) + 4, "DECIMAL(38,10)"),
            ("numeric", (10 << 16 | 2) + 4, "DECIMAL(10,2)"),
            ("numeric", (40 << 16) + 4, "STRING"),
            ("numeric", -1, "STRING"),
            ("float4", -1, "FLOAT"),
            ("float8", -1, "DOUBLE"),
            ("timestamp", 3, "DATETIME(3)"),
            ("timestamptz", -1, "DATETIME(6)"),
            ("date", -1, "DATE"),
            ("bool", -1, "BOOLEAN"),
            ("bit", 1, "BOOLEAN"),
            ("bit", 8, "STRING"),
            ("varchar", 32 + 4, "VARCHAR(128)"),
            ("bpchar", 1 + 4, "VARCHAR(4)"),
            ("varchar", -1, "STRING"),
            ("varchar", 30000 + 4, "STRING"),
            ("text", -1, "STRING"),
            ("uuid", -1, "STRING"),
            ("bytea", -1, "STRING"),
            ("jsonb", -1, "JSON"),
            ("_int4", -1, "STRING"),
            ("mood", -1, "STRING"),
            ("money", -1, "column `c`: unsupported PostgreSQL type `money`"),
        ];
        for (pg, m, doris) in cases {
            assert_eq!(t(pg, m), doris, "{pg}({m})");
        }
    }

    #[test]
    fn values_read_as_doris_text() {
        let b = BinaryHandling::Text;
        assert_eq!(col("bool", -1).text("t", b, None).unwrap(), "true");
        assert_eq!(col("timestamptz", -1).text("2026-01-02 03:04:05.5+00", b, None).unwrap(), "2026-01-02 03:04:05.5");
        assert_eq!(col("timestamptz", -1).text("2026-01-02 03:04:05-05:30", b, None).unwrap(), "2026-01-02 08:34:05");
        let shanghai = Some(chrono_tz::Asia::Shanghai);
        assert_eq!(col("timestamptz", -1).text("2026-01-02 03:04:05+00", b, shanghai).unwrap(), "2026-01-02 11:04:05");
        assert_eq!(col("bytea", -1).text("\\x6f6bff", BinaryHandling::Hex, None).unwrap(), "6f6bff");
        assert_eq!(col("bytea", -1).text("\\x6f6b", b, None).unwrap(), "ok");
        assert!(col("bytea", -1).text("\\xff", b, None).unwrap_err().contains("binary_handling"));
        assert_eq!(col("_int4", -1).text("{1,NULL,-3}", b, None).unwrap(), "[1,null,-3]");
        assert_eq!(
            col("_text", -1).text(r#"{a,"b c","d\"e",NULL,"NULL"}"#, b, None).unwrap(),
            r#"["a","b c","d\"e",null,"NULL"]"#
        );
        assert_eq!(col("_int4", -1).text("{{1,2},{3,4}}", b, None).unwrap(), "[[1,2],[3,4]]");
        assert_eq!(col("_bool", -1).text("{t,f}", b, None).unwrap(), "[true,false]");
        assert_eq!(col("_int4", -1).text("{}", b, None).unwrap(), "[]");
        assert_eq!(col("_int4", -1).text("[0:1]={5,6}", b, None).unwrap(), "[5,6]");
        assert!(col("_int4", -1).text("{1,2", b, None).is_err());
    }
}
