//! Doris column types and their Arrow representation.
//!
//! The mapping follows Doris' own Arrow Flight SQL results, so a batch read from Doris, handed to
//! a plugin and loaded back into Doris keeps its types on every hop.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::Error;

/// Field-metadata key that records the Doris type where Arrow alone is ambiguous.
pub const DORIS_TYPE_KEY: &str = "doris_type";

/// A Doris column type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DorisType {
    Boolean,
    TinyInt,
    SmallInt,
    Int,
    BigInt,
    /// 128-bit integer, carried as decimal text (`utf8`, metadata `doris_type=LARGEINT`).
    LargeInt,
    Float,
    Double,
    /// DECIMAL(p,s), p ≤ 38.
    Decimal {
        precision: u8,
        scale: i8,
    },
    Date,
    /// DATETIME(p), p 0–6, no time zone.
    DateTime {
        precision: u8,
    },
    Char(Option<u32>),
    Varchar(Option<u32>),
    String,
    /// JSON text (`utf8`, metadata `doris_type=JSON`).
    Json,
    /// ARRAY / MAP / STRUCT, carried as JSON text; holds the full Doris type text.
    Complex(std::string::String),
}

impl DorisType {
    /// Parse Doris column-type syntax such as `BIGINT`, `varchar(64)`, `DECIMAL(10, 2)`,
    /// `DATETIME(3)`, `ARRAY<INT>`. Legacy spellings (`DECIMALV3`, `DATEV2`, `DATETIMEV2`) are accepted.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let t = text.trim();
        let upper = t.to_ascii_uppercase();
        let (base, args) = match upper.find('(') {
            Some(open) if !upper.starts_with("ARRAY") && !upper.starts_with("MAP") && !upper.starts_with("STRUCT") => {
                let close = upper
                    .rfind(')')
                    .filter(|c| *c > open && upper[c + 1..].trim().is_empty())
                    .ok_or_else(|| Error::new(format!("type `{t}`: unbalanced parentheses")))?;
                let args: Vec<&str> = upper[open + 1..close].split(',').map(str::trim).collect();
                (upper[..open].trim(), args)
            }
            _ => (upper.as_str(), Vec::new()),
        };
        let num = |i: usize, what: &str| -> Result<u32, Error> {
            args.get(i)
                .ok_or_else(|| Error::new(format!("type `{t}`: missing {what}")))?
                .parse::<u32>()
                .map_err(|_| Error::new(format!("type `{t}`: {what} must be a non-negative integer")))
        };
        let no_args = |ty: DorisType| -> Result<DorisType, Error> {
            if args.is_empty() { Ok(ty) } else { Err(Error::new(format!("type `{t}` takes no arguments"))) }
        };
        match base {
            "BOOLEAN" | "BOOL" => no_args(Self::Boolean),
            "TINYINT" => Ok(Self::TinyInt),
            "SMALLINT" => Ok(Self::SmallInt),
            "INT" | "INTEGER" => Ok(Self::Int),
            "BIGINT" => Ok(Self::BigInt),
            "LARGEINT" => no_args(Self::LargeInt),
            "FLOAT" => no_args(Self::Float),
            "DOUBLE" => no_args(Self::Double),
            "DECIMAL" | "DECIMALV3" | "DECIMALV2" | "NUMERIC" => {
                let (precision, scale) = match args.len() {
                    0 => (if base == "DECIMALV2" { 27 } else { 9 }, if base == "DECIMALV2" { 9 } else { 0 }),
                    1 => (num(0, "precision")?, 0),
                    _ => (num(0, "precision")?, num(1, "scale")?),
                };
                if !(1..=38).contains(&precision) || scale > precision {
                    return Err(Error::new(format!(
                        "type `{t}`: DECIMAL needs 1 <= precision <= 38 and scale <= precision"
                    )));
                }
                Ok(Self::Decimal { precision: precision as u8, scale: scale as i8 })
            }
            "DATE" | "DATEV2" => no_args(Self::Date),
            "DATETIME" | "DATETIMEV2" | "TIMESTAMP" => {
                let precision = if args.is_empty() { 0 } else { num(0, "precision")? };
                if precision > 6 {
                    return Err(Error::new(format!("type `{t}`: DATETIME precision must be 0-6")));
                }
                Ok(Self::DateTime { precision: precision as u8 })
            }
            "CHAR" => Ok(Self::Char(if args.is_empty() { None } else { Some(num(0, "length")?) })),
            "VARCHAR" => Ok(Self::Varchar(if args.is_empty() { None } else { Some(num(0, "length")?) })),
            "STRING" | "TEXT" => no_args(Self::String),
            "JSON" | "JSONB" => no_args(Self::Json),
            _ if base.starts_with("ARRAY<") || base.starts_with("MAP<") || base.starts_with("STRUCT<") => {
                if !base.ends_with('>') {
                    return Err(Error::new(format!("type `{t}`: unbalanced `<` `>`")));
                }
                Ok(Self::Complex(t.to_string()))
            }
            _ => Err(Error::new(format!(
                "unknown Doris type `{t}` (expected BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, LARGEINT, FLOAT, \
                 DOUBLE, DECIMAL(p,s), DATE, DATETIME(p), CHAR(n), VARCHAR(n), STRING, JSON, ARRAY<..>, MAP<..> or STRUCT<..>)"
            ))),
        }
    }

    /// The Arrow type this Doris type travels as.
    pub fn arrow_type(&self) -> DataType {
        match self {
            Self::Boolean => DataType::Boolean,
            Self::TinyInt => DataType::Int8,
            Self::SmallInt => DataType::Int16,
            Self::Int => DataType::Int32,
            Self::BigInt => DataType::Int64,
            Self::Float => DataType::Float32,
            Self::Double => DataType::Float64,
            Self::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale),
            Self::Date => DataType::Date32,
            Self::DateTime { precision } => DataType::Timestamp(datetime_unit(*precision), None),
            Self::LargeInt | Self::Char(_) | Self::Varchar(_) | Self::String | Self::Json | Self::Complex(_) => {
                DataType::Utf8
            }
        }
    }

    /// An Arrow field for a column of this type, with `doris_type` metadata where Arrow is ambiguous.
    pub fn arrow_field(&self, name: &str, nullable: bool) -> Field {
        let field = Field::new(name, self.arrow_type(), nullable);
        match self {
            Self::LargeInt | Self::Json | Self::Complex(_) | Self::Char(_) | Self::Varchar(Some(_)) => {
                field.with_metadata(HashMap::from([(DORIS_TYPE_KEY.to_string(), self.to_string())]))
            }
            _ => field,
        }
    }

    /// The Doris type of an Arrow field: its `doris_type` metadata when present, else the
    /// natural Doris type of the Arrow type.
    pub fn from_arrow_field(field: &Field) -> Result<Self, Error> {
        if let Some(t) = field.metadata().get(DORIS_TYPE_KEY) {
            return Self::parse(t);
        }
        Ok(match field.data_type() {
            DataType::Boolean => Self::Boolean,
            DataType::Int8 => Self::TinyInt,
            DataType::Int16 | DataType::UInt8 => Self::SmallInt,
            DataType::Int32 | DataType::UInt16 => Self::Int,
            DataType::Int64 | DataType::UInt32 => Self::BigInt,
            DataType::UInt64 => Self::LargeInt,
            DataType::Float16 | DataType::Float32 => Self::Float,
            DataType::Float64 => Self::Double,
            DataType::Decimal128(p, s) => Self::Decimal { precision: *p, scale: *s },
            DataType::Date32 | DataType::Date64 => Self::Date,
            DataType::Timestamp(unit, _) => Self::DateTime {
                precision: match unit {
                    TimeUnit::Second => 0,
                    TimeUnit::Millisecond => 3,
                    TimeUnit::Microsecond | TimeUnit::Nanosecond => 6,
                },
            },
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Self::String,
            other => {
                return Err(Error::new(format!(
                    "column `{}`: Arrow type {other} has no Doris equivalent",
                    field.name()
                )));
            }
        })
    }
}

fn datetime_unit(precision: u8) -> TimeUnit {
    match precision {
        0 => TimeUnit::Second,
        1..=3 => TimeUnit::Millisecond,
        _ => TimeUnit::Microsecond,
    }
}

impl fmt::Display for DorisType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Boolean => f.write_str("BOOLEAN"),
            Self::TinyInt => f.write_str("TINYINT"),
            Self::SmallInt => f.write_str("SMALLINT"),
            Self::Int => f.write_str("INT"),
            Self::BigInt => f.write_str("BIGINT"),
            Self::LargeInt => f.write_str("LARGEINT"),
            Self::Float => f.write_str("FLOAT"),
            Self::Double => f.write_str("DOUBLE"),
            Self::Decimal { precision, scale } => write!(f, "DECIMAL({precision},{scale})"),
            Self::Date => f.write_str("DATE"),
            Self::DateTime { precision: 0 } => f.write_str("DATETIME"),
            Self::DateTime { precision } => write!(f, "DATETIME({precision})"),
            Self::Char(Some(n)) => write!(f, "CHAR({n})"),
            Self::Char(None) => f.write_str("CHAR"),
            Self::Varchar(Some(n)) => write!(f, "VARCHAR({n})"),
            Self::Varchar(None) => f.write_str("VARCHAR"),
            Self::String => f.write_str("STRING"),
            Self::Json => f.write_str("JSON"),
            Self::Complex(t) => f.write_str(t),
        }
    }
}

/// One column: name, Doris type and nullability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    pub name: String,
    pub doris_type: DorisType,
    pub nullable: bool,
}

impl ColumnDef {
    pub fn new(name: impl Into<String>, doris_type: DorisType, nullable: bool) -> Self {
        Self { name: name.into(), doris_type, nullable }
    }

    pub fn arrow_field(&self) -> Field {
        self.doris_type.arrow_field(&self.name, self.nullable)
    }
}

/// Parse a column list in Doris syntax: ``"id BIGINT NOT NULL, `name` VARCHAR(64), tags ARRAY<INT>"``.
/// Columns are nullable unless marked `NOT NULL`.
pub fn parse_columns(text: &str) -> Result<Vec<ColumnDef>, Error> {
    let mut columns = Vec::new();
    for part in split_top_level(text) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, rest) = if let Some(stripped) = part.strip_prefix('`') {
            let end = stripped.find('`').ok_or_else(|| Error::new(format!("column `{part}`: unclosed backtick")))?;
            (&stripped[..end], stripped[end + 1..].trim())
        } else {
            let end = part
                .find(char::is_whitespace)
                .ok_or_else(|| Error::new(format!("column `{part}`: expected `<name> <TYPE>`, e.g. `id BIGINT`")))?;
            (&part[..end], part[end..].trim())
        };
        let upper = rest.to_ascii_uppercase();
        let (type_text, nullable) = if let Some(i) = upper.rfind("NOT NULL") {
            (&rest[..i], false)
        } else if upper.ends_with(" NULL") {
            (&rest[..rest.len() - 5], true)
        } else {
            (rest, true)
        };
        let doris_type =
            DorisType::parse(type_text).map_err(|e| Error::new(format!("column `{name}`: {}", e.message)))?;
        if columns.iter().any(|c: &ColumnDef| c.name == name) {
            return Err(Error::new(format!("column `{name}` is declared twice")));
        }
        columns.push(ColumnDef::new(name, doris_type, nullable));
    }
    if columns.is_empty() {
        return Err(Error::new("empty column list: expected e.g. `id BIGINT, name VARCHAR(64)`"));
    }
    Ok(columns)
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut in_tick) = (0i32, 0usize, false);
    for (i, c) in text.char_indices() {
        match c {
            '`' => in_tick = !in_tick,
            '(' | '<' if !in_tick => depth += 1,
            ')' | '>' if !in_tick => depth -= 1,
            ',' if depth == 0 && !in_tick => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The Arrow schema of a column list.
pub fn arrow_schema(columns: &[ColumnDef]) -> SchemaRef {
    Arc::new(Schema::new(columns.iter().map(ColumnDef::arrow_field).collect::<Vec<_>>()))
}

/// The column list of an Arrow schema.
pub fn columns_of(schema: &Schema) -> Result<Vec<ColumnDef>, Error> {
    schema
        .fields()
        .iter()
        .map(|f| Ok(ColumnDef::new(f.name(), DorisType::from_arrow_field(f)?, f.is_nullable())))
        .collect()
}

/// Render a column list back into Doris syntax (the inverse of [`parse_columns`]).
pub fn format_columns(columns: &[ColumnDef]) -> String {
    columns
        .iter()
        .map(|c| format!("{} {}{}", c.name, c.doris_type, if c.nullable { "" } else { " NOT NULL" }))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_doris_type_has_an_arrow_representation() {
        let cases = [
            ("BOOLEAN", DataType::Boolean),
            ("TINYINT", DataType::Int8),
            ("SMALLINT", DataType::Int16),
            ("INT", DataType::Int32),
            ("BIGINT", DataType::Int64),
            ("LARGEINT", DataType::Utf8),
            ("FLOAT", DataType::Float32),
            ("DOUBLE", DataType::Float64),
            ("DECIMAL(10,2)", DataType::Decimal128(10, 2)),
            ("DATE", DataType::Date32),
            ("DATETIME", DataType::Timestamp(TimeUnit::Second, None)),
            ("DATETIME(3)", DataType::Timestamp(TimeUnit::Millisecond, None)),
            ("DATETIME(6)", DataType::Timestamp(TimeUnit::Microsecond, None)),
            ("CHAR(10)", DataType::Utf8),
            ("VARCHAR(64)", DataType::Utf8),
            ("STRING", DataType::Utf8),
            ("JSON", DataType::Utf8),
            ("ARRAY<INT>", DataType::Utf8),
            ("MAP<STRING,INT>", DataType::Utf8),
            ("STRUCT<a:INT,b:STRING>", DataType::Utf8),
        ];
        for (text, arrow) in cases {
            let t = DorisType::parse(text).unwrap();
            assert_eq!(t.arrow_type(), arrow, "{text}");
            // The round trip through an Arrow field keeps the Doris type.
            let back = DorisType::from_arrow_field(&t.arrow_field("c", true)).unwrap();
            let expected = if text == "STRING" { DorisType::String } else { t.clone() };
            assert_eq!(back, expected, "{text}");
            assert_eq!(DorisType::parse(&t.to_string()).unwrap(), t, "{text} display round trip");
        }
    }

    #[test]
    fn column_lists_parse_with_nesting_backticks_and_not_null() {
        let cols =
            parse_columns("id BIGINT NOT NULL, `full name` VARCHAR(64), m MAP<STRING, INT>, d DECIMAL(10, 2)").unwrap();
        assert_eq!(cols.len(), 4);
        assert_eq!(cols[0], ColumnDef::new("id", DorisType::BigInt, false));
        assert_eq!(cols[1].name, "full name");
        assert_eq!(cols[2].doris_type, DorisType::Complex("MAP<STRING, INT>".into()));
        assert_eq!(cols[3].doris_type, DorisType::Decimal { precision: 10, scale: 2 });
    }

    #[test]
    fn bad_types_are_named() {
        let err = parse_columns("id BIGINT, x FOO").unwrap_err();
        assert!(err.message.contains("column `x`") && err.message.contains("unknown Doris type `FOO`"), "{err}");
        assert!(DorisType::parse("DECIMAL(40,2)").is_err());
        assert!(DorisType::parse("DATETIME(7)").is_err());
        assert!(parse_columns("id").unwrap_err().message.contains("expected `<name> <TYPE>`"));
    }
}
