//! Doris column types, the stored cell [`Value`], text parsing and the Arrow mapping.

use std::cmp::Ordering;
use std::fmt::Write as _;

use arrow::datatypes::{DataType, TimeUnit};
use serde::{Deserialize, Serialize};

/// A Doris column type (§7 of the protocol notes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DorisType {
    /// BOOLEAN
    Boolean,
    /// TINYINT
    TinyInt,
    /// SMALLINT
    SmallInt,
    /// INT
    Int,
    /// BIGINT
    BigInt,
    /// LARGEINT (128-bit)
    LargeInt,
    /// FLOAT
    Float,
    /// DOUBLE
    Double,
    /// DECIMAL(p, s) (DECIMALV3); `v2` marks the legacy DECIMALV2 spelling.
    Decimal {
        /// Precision.
        precision: u8,
        /// Scale.
        scale: u8,
        /// Written as DECIMALV2.
        v2: bool,
    },
    /// DATE
    Date,
    /// DATETIME(p)
    DateTime(u8),
    /// CHAR(n)
    Char(u32),
    /// VARCHAR(n), n in bytes
    Varchar(u32),
    /// STRING
    String,
    /// JSON / JSONB
    Json,
    /// VARIANT
    Variant,
    /// IPV4
    Ipv4,
    /// IPV6
    Ipv6,
    /// ARRAY<T>, MAP<K,V>, STRUCT<..>, BITMAP, HLL, QUANTILE_STATE, AGG_STATE: kept as text.
    Other(String),
}

/// Field metadata key naming the Doris type of a column.
pub const DORIS_TYPE_KEY: &str = "doris_type";

impl DorisType {
    /// Parses a type name and its parenthesised arguments (already split by the DDL parser).
    pub fn from_parts(name: &str, args: &[u32], raw: &str) -> Result<DorisType, String> {
        let upper = name.to_ascii_uppercase();
        let arg = |i: usize, d: u32| args.get(i).copied().unwrap_or(d);
        Ok(match upper.as_str() {
            "BOOLEAN" | "BOOL" => DorisType::Boolean,
            "TINYINT" => DorisType::TinyInt,
            "SMALLINT" => DorisType::SmallInt,
            "INT" | "INTEGER" => DorisType::Int,
            "BIGINT" => DorisType::BigInt,
            "LARGEINT" => DorisType::LargeInt,
            "FLOAT" => DorisType::Float,
            "DOUBLE" => DorisType::Double,
            "DECIMAL" | "DECIMALV3" | "NUMERIC" => {
                let precision = arg(0, 9);
                let scale = arg(1, 0);
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(format!("Invalid decimal type with precision = {precision}, scale = {scale}"));
                }
                DorisType::Decimal { precision: precision as u8, scale: scale as u8, v2: false }
            }
            "DECIMALV2" => {
                DorisType::Decimal { precision: arg(0, 27).min(27) as u8, scale: arg(1, 9).min(9) as u8, v2: true }
            }
            "DATE" | "DATEV2" => DorisType::Date,
            "DATETIME" | "DATETIMEV2" | "TIMESTAMP" => {
                let p = arg(0, 0);
                if p > 6 {
                    return Err(format!("Scale of Datetime/Time must between 0 and 6. Scale was set to: {p}"));
                }
                DorisType::DateTime(p as u8)
            }
            "CHAR" => DorisType::Char(arg(0, 1)),
            "VARCHAR" => {
                let n = arg(0, 65533);
                if n == 0 || n > 65533 {
                    return Err(format!("Varchar size must between 1 and 65533, but got {n}"));
                }
                DorisType::Varchar(n)
            }
            "STRING" | "TEXT" => DorisType::String,
            "JSON" | "JSONB" => DorisType::Json,
            "VARIANT" => DorisType::Variant,
            "IPV4" => DorisType::Ipv4,
            "IPV6" => DorisType::Ipv6,
            "ARRAY" | "MAP" | "STRUCT" | "BITMAP" | "HLL" | "QUANTILE_STATE" | "AGG_STATE" => {
                DorisType::Other(raw.to_ascii_uppercase())
            }
            _ => return Err(format!("Unknown data type: {name}")),
        })
    }

    /// The primitive type name used by `_schema` (§3.2).
    pub fn primitive_name(&self) -> String {
        match self {
            DorisType::Boolean => "BOOLEAN".into(),
            DorisType::TinyInt => "TINYINT".into(),
            DorisType::SmallInt => "SMALLINT".into(),
            DorisType::Int => "INT".into(),
            DorisType::BigInt => "BIGINT".into(),
            DorisType::LargeInt => "LARGEINT".into(),
            DorisType::Float => "FLOAT".into(),
            DorisType::Double => "DOUBLE".into(),
            DorisType::Decimal { v2: true, .. } => "DECIMALV2".into(),
            DorisType::Decimal { precision, .. } => {
                if *precision <= 9 {
                    "DECIMAL32".into()
                } else if *precision <= 18 {
                    "DECIMAL64".into()
                } else {
                    "DECIMAL128".into()
                }
            }
            DorisType::Date => "DATEV2".into(),
            DorisType::DateTime(_) => "DATETIMEV2".into(),
            DorisType::Char(_) => "CHAR".into(),
            DorisType::Varchar(_) => "VARCHAR".into(),
            DorisType::String => "STRING".into(),
            DorisType::Json => "JSONB".into(),
            DorisType::Variant => "VARIANT".into(),
            DorisType::Ipv4 => "IPV4".into(),
            DorisType::Ipv6 => "IPV6".into(),
            DorisType::Other(raw) => raw.split('<').next().unwrap_or(raw).to_string(),
        }
    }

    /// The SQL spelling used by `SHOW CREATE TABLE` and `DESC` (lowercase like Doris).
    pub fn sql_name(&self) -> String {
        match self {
            DorisType::Boolean => "boolean".into(),
            DorisType::TinyInt => "tinyint".into(),
            DorisType::SmallInt => "smallint".into(),
            DorisType::Int => "int".into(),
            DorisType::BigInt => "bigint".into(),
            DorisType::LargeInt => "largeint".into(),
            DorisType::Float => "float".into(),
            DorisType::Double => "double".into(),
            DorisType::Decimal { precision, scale, .. } => format!("decimal({precision},{scale})"),
            DorisType::Date => "date".into(),
            DorisType::DateTime(0) => "datetime".into(),
            DorisType::DateTime(p) => format!("datetime({p})"),
            DorisType::Char(n) => format!("char({n})"),
            DorisType::Varchar(n) => format!("varchar({n})"),
            DorisType::String => "text".into(),
            DorisType::Json => "json".into(),
            DorisType::Variant => "variant".into(),
            DorisType::Ipv4 => "ipv4".into(),
            DorisType::Ipv6 => "ipv6".into(),
            DorisType::Other(raw) => raw.to_ascii_lowercase(),
        }
    }

    /// `information_schema.columns.DATA_TYPE`.
    pub fn data_type_name(&self) -> String {
        let s = self.sql_name();
        s.split('(').next().unwrap_or(&s).to_string()
    }

    /// Doris' non-standard `COLUMN_SIZE` and `DECIMAL_DIGITS` columns.
    pub fn column_size_digits(&self) -> (Option<i64>, Option<i64>) {
        match self {
            DorisType::Boolean => (Some(1), None),
            DorisType::TinyInt => (Some(3), Some(0)),
            DorisType::SmallInt => (Some(5), Some(0)),
            DorisType::Int => (Some(10), Some(0)),
            DorisType::BigInt => (Some(19), Some(0)),
            DorisType::LargeInt => (Some(39), Some(0)),
            DorisType::Float => (Some(7), Some(7)),
            DorisType::Double => (Some(15), Some(15)),
            DorisType::Decimal { precision, scale, .. } => (Some(*precision as i64), Some(*scale as i64)),
            DorisType::Date => (Some(10), None),
            DorisType::DateTime(p) => (Some(19 + if *p > 0 { 1 + *p as i64 } else { 0 }), Some(*p as i64)),
            DorisType::Char(n) | DorisType::Varchar(n) => (Some(*n as i64), None),
            DorisType::String => (Some(2147483643), None),
            _ => (None, None),
        }
    }

    /// Whether the type may be a key column.
    pub fn can_be_key(&self) -> bool {
        !matches!(
            self,
            DorisType::Float
                | DorisType::Double
                | DorisType::String
                | DorisType::Json
                | DorisType::Variant
                | DorisType::Other(_)
        )
    }

    /// The Arrow type of this column in query snapshots.
    pub fn arrow_type(&self) -> DataType {
        match self {
            DorisType::Boolean => DataType::Boolean,
            DorisType::TinyInt => DataType::Int8,
            DorisType::SmallInt => DataType::Int16,
            DorisType::Int => DataType::Int32,
            DorisType::BigInt => DataType::Int64,
            DorisType::LargeInt => DataType::Decimal128(38, 0),
            DorisType::Float => DataType::Float32,
            DorisType::Double => DataType::Float64,
            DorisType::Decimal { precision, scale, .. } => DataType::Decimal128(*precision, *scale as i8),
            DorisType::Date => DataType::Date32,
            DorisType::DateTime(_) => DataType::Timestamp(TimeUnit::Microsecond, None),
            _ => DataType::Utf8,
        }
    }

    /// The Arrow field of a column of this type: [`DorisType::arrow_type`], with a `doris_type`
    /// metadata entry where the Flight SQL mapping (§4.5) differs from the query one.
    pub fn arrow_field(&self, name: &str) -> arrow::datatypes::Field {
        let f = arrow::datatypes::Field::new(name, self.arrow_type(), true);
        let tag = match self {
            DorisType::LargeInt => "LARGEINT".to_string(),
            DorisType::Json => "JSON".to_string(),
            DorisType::DateTime(p) => format!("DATETIMEV2({p})"),
            _ => return f,
        };
        f.with_metadata([(DORIS_TYPE_KEY.to_string(), tag)].into_iter().collect())
    }

    /// Parses the text form of a value (CSV field, JSON scalar, SQL literal) into this type.
    /// The error is the reason shown in the error log.
    pub fn parse_text(&self, s: &str) -> Result<Value, String> {
        let bad = || format!("'{s}' is not a valid {}", self.primitive_name());
        match self {
            DorisType::Boolean => match s.trim().to_ascii_lowercase().as_str() {
                "1" | "true" => Ok(Value::Bool(true)),
                "0" | "false" => Ok(Value::Bool(false)),
                _ => Err(bad()),
            },
            DorisType::TinyInt | DorisType::SmallInt | DorisType::Int | DorisType::BigInt => {
                let t = s.trim();
                let v: i64 = match t.parse() {
                    Ok(v) => v,
                    Err(_) => {
                        // Doris accepts integral decimals such as "3.0".
                        let f: f64 = t.parse().map_err(|_| bad())?;
                        if f.fract() != 0.0 || !f.is_finite() {
                            return Err(bad());
                        }
                        f as i64
                    }
                };
                let (lo, hi) = match self {
                    DorisType::TinyInt => (i8::MIN as i64, i8::MAX as i64),
                    DorisType::SmallInt => (i16::MIN as i64, i16::MAX as i64),
                    DorisType::Int => (i32::MIN as i64, i32::MAX as i64),
                    _ => (i64::MIN, i64::MAX),
                };
                if v < lo || v > hi {
                    return Err(format!("'{s}' is out of range for {}", self.primitive_name()));
                }
                Ok(Value::Int(v))
            }
            DorisType::LargeInt => s.trim().parse::<i128>().map(|v| Value::Large(v.into())).map_err(|_| bad()),
            DorisType::Float | DorisType::Double => s.trim().parse::<f64>().map(Value::Float).map_err(|_| bad()),
            DorisType::Decimal { precision, scale, .. } => {
                parse_decimal(s.trim(), *precision, *scale).map(|v| Value::Decimal(v.into())).ok_or_else(bad)
            }
            DorisType::Date => parse_date(s.trim()).map(Value::Date).ok_or_else(bad),
            DorisType::DateTime(p) => parse_datetime(s.trim(), *p).map(Value::DateTime).ok_or_else(bad),
            DorisType::Char(n) | DorisType::Varchar(n) => {
                if s.len() > *n as usize {
                    Err(format!("the length of input is too long than schema. input: {s}, schema length: {n}"))
                } else {
                    Ok(Value::Str(s.into()))
                }
            }
            DorisType::Json => {
                if serde_json::from_str::<serde_json::Value>(s).is_ok() {
                    Ok(Value::Str(s.into()))
                } else {
                    Err(format!("Invalid json value: {s}"))
                }
            }
            _ => Ok(Value::Str(s.into())),
        }
    }

    /// Renders a stored value as Doris prints it (MySQL text protocol, CSV).
    pub fn render(&self, v: &Value) -> Option<String> {
        Some(match v {
            Value::Null => return None,
            Value::Bool(b) => if *b { "1" } else { "0" }.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Large(i) => i.get().to_string(),
            Value::Float(f) => format_float(*f),
            Value::Decimal(d) => {
                let scale = match self {
                    DorisType::Decimal { scale, .. } => *scale,
                    _ => 0,
                };
                format_decimal(d.get(), scale)
            }
            Value::Date(d) => format_date(*d),
            Value::DateTime(us) => {
                let p = match self {
                    DorisType::DateTime(p) => *p,
                    _ => 0,
                };
                format_datetime(*us, p)
            }
            Value::Str(s) => s.to_string(),
        })
    }
}

/// An `i128` stored with 8-byte alignment, so that a [`Value`] is 24 bytes, not 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "i128", into = "i128")]
pub struct I128 {
    lo: u64,
    hi: i64,
}

impl I128 {
    /// The value.
    pub fn get(self) -> i128 {
        ((self.hi as i128) << 64) | self.lo as i128
    }
}

impl From<i128> for I128 {
    fn from(v: i128) -> Self {
        I128 { lo: v as u64, hi: (v >> 64) as i64 }
    }
}

impl From<I128> for i128 {
    fn from(v: I128) -> Self {
        v.get()
    }
}

/// One stored cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// BOOLEAN.
    Bool(bool),
    /// Any integer type up to BIGINT.
    Int(i64),
    /// LARGEINT.
    Large(I128),
    /// FLOAT / DOUBLE.
    Float(f64),
    /// DECIMAL, unscaled.
    Decimal(I128),
    /// DATE, days since 1970-01-01.
    Date(i32),
    /// DATETIME, microseconds since 1970-01-01 00:00:00.
    DateTime(i64),
    /// Strings and everything kept as text.
    Str(Box<str>),
}

impl Value {
    /// Is this NULL?
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Large(_) => 3,
            Value::Float(_) => 4,
            Value::Decimal(_) => 5,
            Value::Date(_) => 6,
            Value::DateTime(_) => 7,
            Value::Str(_) => 8,
        }
    }

    /// Feeds a stable encoding into an FNV-1a hash (bucket placement must not change across runs).
    pub fn hash_into(&self, h: &mut u64) {
        let mut feed = |bytes: &[u8]| {
            for b in bytes {
                *h ^= *b as u64;
                *h = h.wrapping_mul(0x100000001b3);
            }
        };
        feed(&[self.rank()]);
        match self {
            Value::Null => {}
            Value::Bool(b) => feed(&[*b as u8]),
            Value::Int(i) => feed(&i.to_le_bytes()),
            Value::Large(i) | Value::Decimal(i) => feed(&i.get().to_le_bytes()),
            Value::Float(f) => feed(&f.to_bits().to_le_bytes()),
            Value::Date(d) => feed(&d.to_le_bytes()),
            Value::DateTime(d) => feed(&d.to_le_bytes()),
            Value::Str(s) => feed(s.as_bytes()),
        }
    }

    /// Numeric addition for SUM aggregation; `None` when the kinds do not add.
    pub fn add(&self, other: &Value) -> Option<Value> {
        Some(match (self, other) {
            (Value::Null, x) | (x, Value::Null) => x.clone(),
            (Value::Int(a), Value::Int(b)) => Value::Int(a.wrapping_add(*b)),
            (Value::Large(a), Value::Large(b)) => Value::Large(a.get().wrapping_add(b.get()).into()),
            (Value::Decimal(a), Value::Decimal(b)) => Value::Decimal(a.get().wrapping_add(b.get()).into()),
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            _ => return None,
        })
    }

    /// Negates a numeric value (stream load `negative: true`).
    pub fn negate(&self) -> Value {
        match self {
            Value::Int(a) => Value::Int(-a),
            Value::Large(a) => Value::Large((-a.get()).into()),
            Value::Decimal(a) => Value::Decimal((-a.get()).into()),
            Value::Float(a) => Value::Float(-a),
            other => other.clone(),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Value {}
impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Large(a), Value::Large(b)) | (Value::Decimal(a), Value::Decimal(b)) => a.get().cmp(&b.get()),
            (Value::Float(a), Value::Float(b)) => a.total_cmp(b),
            (Value::Date(a), Value::Date(b)) => a.cmp(b),
            (Value::DateTime(a), Value::DateTime(b)) => a.cmp(b),
            (Value::Str(a), Value::Str(b)) => a.cmp(b),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

fn format_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e16 { format!("{}", f as i64) } else { format!("{f}") }
}

/// Parses a decimal literal into an unscaled integer with `scale` digits.
pub fn parse_decimal(s: &str, precision: u8, scale: u8) -> Option<i128> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int_part, frac_part) = match body.split_once('.') {
        Some((i, f)) => (i, f),
        None => (body, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac_part.bytes().all(|b| b.is_ascii_digit()) {
        // Scientific notation and friends: go through f64.
        let f: f64 = s.parse().ok()?;
        let v = (f * 10f64.powi(scale as i32)).round();
        return if v.is_finite() { Some(v as i128) } else { None };
    }
    let int_digits = int_part.trim_start_matches('0');
    if int_digits.len() > (precision - scale) as usize {
        return None;
    }
    let mut v: i128 = 0;
    for b in int_digits.bytes() {
        v = v.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    let fb = frac_part.as_bytes();
    for i in 0..scale as usize {
        let d = fb.get(i).map(|b| (b - b'0') as i128).unwrap_or(0);
        v = v.checked_mul(10)?.checked_add(d)?;
    }
    // Round half up on the first dropped digit.
    if fb.len() > scale as usize && fb[scale as usize] >= b'5' {
        v += 1;
    }
    Some(if neg { -v } else { v })
}

/// Formats an unscaled decimal.
pub fn format_decimal(v: i128, scale: u8) -> String {
    if scale == 0 {
        return v.to_string();
    }
    let neg = v < 0;
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded =
        if digits.len() <= scale { format!("{}{}", "0".repeat(scale + 1 - digits.len()), digits) } else { digits };
    let (i, f) = padded.split_at(padded.len() - scale);
    format!("{}{i}.{f}", if neg { "-" } else { "" })
}

/// Days since the epoch for a civil date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Civil date for days since the epoch.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
                29
            } else {
                28
            }
        }
    }
}

fn parse_date_parts(s: &str) -> Option<(i64, u32, u32, &str)> {
    let b = s.as_bytes();
    let (y, m, d, rest) = if b.len() >= 10 && (b[4] == b'-' || b[4] == b'/') && b[7] == b[4] {
        (s.get(0..4)?, s.get(5..7)?, s.get(8..10)?, &s[10..])
    } else if b.len() >= 8 && b[..8].iter().all(|c| c.is_ascii_digit()) {
        (s.get(0..4)?, s.get(4..6)?, s.get(6..8)?, &s[8..])
    } else {
        return None;
    };
    let y: i64 = y.parse().ok()?;
    let m: u32 = m.parse().ok()?;
    let d: u32 = d.parse().ok()?;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some((y, m, d, rest))
}

/// Parses `YYYY-MM-DD` (or `YYYYMMDD`; a time part is ignored).
pub fn parse_date(s: &str) -> Option<i32> {
    let (y, m, d, _) = parse_date_parts(s)?;
    Some(days_from_civil(y, m, d) as i32)
}

/// Parses `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` into microseconds, rounding to `precision` digits.
pub fn parse_datetime(s: &str, precision: u8) -> Option<i64> {
    let (y, m, d, rest) = parse_date_parts(s)?;
    let days = days_from_civil(y, m, d);
    let rest = rest.trim_start_matches(['T', ' ']);
    let mut micros: i64 = 0;
    if !rest.is_empty() {
        let (hms, frac) = match rest.split_once('.') {
            Some((a, b)) => (a, b),
            None => (rest, ""),
        };
        let mut parts = hms.split(':');
        let h: i64 = parts.next()?.parse().ok()?;
        let mi: i64 = parts.next().unwrap_or("0").parse().ok()?;
        let se: i64 = parts.next().unwrap_or("0").parse().ok()?;
        if h > 23 || mi > 59 || se > 59 {
            return None;
        }
        let frac = frac.trim_end_matches('Z');
        if !frac.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let mut f: i64 = 0;
        for i in 0..6 {
            f = f * 10 + frac.as_bytes().get(i).map(|c| (c - b'0') as i64).unwrap_or(0);
        }
        let keep = 10i64.pow(6 - precision as u32);
        f = f / keep * keep;
        micros = ((h * 60 + mi) * 60 + se) * 1_000_000 + f;
    }
    Some(days * 86_400_000_000 + micros)
}

/// Formats days since the epoch as `YYYY-MM-DD`.
pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Formats microseconds since the epoch with `precision` fractional digits.
pub fn format_datetime(us: i64, precision: u8) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    let mut s = format_date(days as i32);
    let secs = rem / 1_000_000;
    let _ = write!(s, " {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    if precision > 0 {
        let frac = format!("{:06}", rem % 1_000_000);
        s.push('.');
        s.push_str(&frac[..precision as usize]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_round_trip() {
        assert_eq!(parse_decimal("12.345", 10, 2), Some(1235));
        assert_eq!(format_decimal(1235, 2), "12.35");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert_eq!(parse_decimal("123456789", 10, 2), None);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date("1970-01-02"), Some(1));
        assert_eq!(format_date(parse_date("2024-02-29").unwrap()), "2024-02-29");
        assert_eq!(parse_date("2023-02-29"), None);
        let us = parse_datetime("2024-01-02 03:04:05.123456", 3).unwrap();
        assert_eq!(format_datetime(us, 3), "2024-01-02 03:04:05.123");
        assert_eq!(format_datetime(parse_datetime("2024-01-02", 0).unwrap(), 0), "2024-01-02 00:00:00");
    }

    #[test]
    fn value_is_compact() {
        assert_eq!(std::mem::size_of::<Value>(), 24);
        let v = Value::Decimal((-123456789012345678901234567i128).into());
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), v);
    }

    #[test]
    fn int_ranges() {
        assert!(DorisType::TinyInt.parse_text("128").is_err());
        assert_eq!(DorisType::Int.parse_text(" 42").unwrap(), Value::Int(42));
        assert!(DorisType::Int.parse_text("abc").is_err());
        assert!(DorisType::Varchar(3).parse_text("abcd").is_err());
    }
}
