//! What a statement returns: result sets of text cells as Doris prints them, or an OK packet.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Schema, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::SqlError;
use crate::types::{format_date, format_datetime, format_decimal};

/// Column kinds of a result set (MySQL and HTTP type names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColKind {
    /// TINYINT / BOOLEAN
    Tiny,
    /// SMALLINT
    Small,
    /// INT
    Int,
    /// BIGINT
    BigInt,
    /// FLOAT
    Float,
    /// DOUBLE
    Double,
    /// DECIMAL
    Decimal,
    /// DATE
    Date,
    /// DATETIME
    DateTime,
    /// VARCHAR / STRING
    Str,
}

impl ColKind {
    /// Type name for the HTTP query API.
    pub fn doris_name(&self) -> &'static str {
        match self {
            ColKind::Tiny => "TINYINT",
            ColKind::Small => "SMALLINT",
            ColKind::Int => "INT",
            ColKind::BigInt => "BIGINT",
            ColKind::Float => "FLOAT",
            ColKind::Double => "DOUBLE",
            ColKind::Decimal => "DECIMAL",
            ColKind::Date => "DATE",
            ColKind::DateTime => "DATETIME",
            ColKind::Str => "VARCHAR",
        }
    }

    pub(super) fn of(dt: &DataType) -> ColKind {
        match dt {
            DataType::Boolean | DataType::Int8 | DataType::UInt8 => ColKind::Tiny,
            DataType::Int16 | DataType::UInt16 => ColKind::Small,
            DataType::Int32 | DataType::UInt32 => ColKind::Int,
            DataType::Int64 | DataType::UInt64 => ColKind::BigInt,
            DataType::Float16 | DataType::Float32 => ColKind::Float,
            DataType::Float64 => ColKind::Double,
            DataType::Decimal128(..) | DataType::Decimal256(..) => ColKind::Decimal,
            DataType::Date32 | DataType::Date64 => ColKind::Date,
            DataType::Timestamp(..) => ColKind::DateTime,
            _ => ColKind::Str,
        }
    }
}

/// A result set as text cells.
#[derive(Debug, Clone, Default)]
pub struct ResultSet {
    /// Column names and kinds.
    pub columns: Vec<(String, ColKind)>,
    /// Rows; None = NULL.
    pub rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    pub(super) fn strings(names: &[&str], rows: Vec<Vec<Option<String>>>) -> ResultSet {
        ResultSet { columns: names.iter().map(|n| (n.to_string(), ColKind::Str)).collect(), rows }
    }
}

/// What a statement produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A result set.
    Rows(ResultSet),
    /// OK packet.
    Done {
        /// Affected rows.
        affected: u64,
        /// Info string.
        info: String,
    },
}

pub(super) fn done() -> Outcome {
    Outcome::Done { affected: 0, info: String::new() }
}

/// Formats one Arrow cell the way Doris prints it.
pub fn cell_text(col: &dyn Array, fmt: &ArrayFormatter, row: usize) -> Option<String> {
    if col.logical_nulls().is_some_and(|n| n.is_null(row)) {
        return None;
    }
    Some(match col.data_type() {
        DataType::Boolean => if col.as_boolean().value(row) { "1" } else { "0" }.to_string(),
        DataType::Date32 => format_date(col.as_primitive::<Date32Type>().value(row)),
        DataType::Timestamp(unit, _) => {
            let us = match unit {
                TimeUnit::Second => col.as_primitive::<TimestampSecondType>().value(row) * 1_000_000,
                TimeUnit::Millisecond => col.as_primitive::<TimestampMillisecondType>().value(row) * 1000,
                TimeUnit::Microsecond => col.as_primitive::<TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => col.as_primitive::<TimestampNanosecondType>().value(row) / 1000,
            };
            format_datetime(us, if us % 1_000_000 == 0 { 0 } else { 6 })
        }
        DataType::Decimal128(_, s) => {
            format_decimal(col.as_primitive::<Decimal128Type>().value(row), (*s).max(0) as u8)
        }
        _ => fmt.value(row).to_string(),
    })
}

/// Converts record batches to a text result set.
pub fn batches_to_result(schema: &Schema, batches: &[RecordBatch]) -> Result<ResultSet, SqlError> {
    let columns = schema.fields().iter().map(|f| (f.name().clone(), ColKind::of(f.data_type()))).collect();
    let mut rows = Vec::new();
    let opts = FormatOptions::default();
    for b in batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<_, _>>()
            .map_err(|e| SqlError::other(e.to_string()))?;
        for r in 0..b.num_rows() {
            rows.push(b.columns().iter().zip(&fmts).map(|(c, f)| cell_text(c.as_ref(), f, r)).collect());
        }
    }
    Ok(ResultSet { columns, rows })
}
