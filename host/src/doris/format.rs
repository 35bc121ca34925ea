//! Stream Load bodies: CSV, JSON lines or Arrow, written batch by batch into a byte buffer. The
//! delete sign, when the load carries one, is the last CSV field or the `__DORIS_DELETE_SIGN__`
//! key of a JSON object.

use std::io::Write;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::text::ColumnText;

/// The hidden column that marks a row as deleted.
pub const DELETE_SIGN: &str = "__DORIS_DELETE_SIGN__";

/// A body format, from the sink's `properties.format` and separators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFormat {
    Csv { column_separator: Vec<u8>, line_delimiter: Vec<u8> },
    Json,
    Arrow,
}

impl BodyFormat {
    /// From Stream Load properties (`format`, `column_separator`, `line_delimiter`), with the
    /// connector's defaults: CSV, tab, newline.
    pub fn from_properties(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        match get("format").map(|f| f.to_ascii_lowercase()).as_deref() {
            None | Some("csv") => Ok(BodyFormat::Csv {
                column_separator: decode_separator(&get("column_separator").unwrap_or_else(|| "\t".into())),
                line_delimiter: decode_separator(&get("line_delimiter").unwrap_or_else(|| "\n".into())),
            }),
            Some("json") => Ok(BodyFormat::Json),
            Some("arrow") => Ok(BodyFormat::Arrow),
            Some(other) => Err(format!("expected \"csv\", \"json\" or \"arrow\", got {other:?}")),
        }
    }
}

impl std::fmt::Display for BodyFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BodyFormat::Csv { .. } => "csv",
            BodyFormat::Json => "json lines",
            BodyFormat::Arrow => "arrow",
        })
    }
}

/// Whether `hay` holds `needle`.
fn holds(hay: &[u8], needle: &[u8]) -> bool {
    match needle {
        [] => false,
        [b] => hay.contains(b),
        _ => hay.windows(needle.len()).any(|w| w == needle),
    }
}

/// `\x01`-style escapes in separators, as Doris and the connector read them.
pub fn decode_separator(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && (b[i + 1] == b'x' || b[i + 1] == b'X')
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 2..i + 4]).unwrap_or("zz"), 16)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Writes the batches of one load.
pub struct BodyEncoder {
    format: BodyFormat,
    arrow: Option<StreamWriter<Vec<u8>>>,
}

/// How values are written as text: NULL as `\\N`, DATETIME as `yyyy-MM-dd HH:mm:ss[.f]`.
pub(super) fn options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_null("\\N")
        .with_display_error(true)
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
        .with_datetime_format(Some("%Y-%m-%d %H:%M:%S%.f"))
}

/// Written as a JSON number or boolean: not a DECIMAL, which Doris reads from a JSON number as a
/// double (38 digits become 17), but from a string exactly.
fn is_json_bare(t: &DataType) -> bool {
    (t.is_numeric() && !matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)))
        || matches!(t, DataType::Boolean)
}

impl BodyEncoder {
    pub fn new(format: BodyFormat) -> Self {
        Self { format, arrow: None }
    }

    /// Append `batch` to `out`; `signs` (0 or 1 per row) when the load carries the delete sign.
    pub fn write(&mut self, batch: &RecordBatch, signs: Option<&[u8]>, out: &mut Vec<u8>) -> Result<(), String> {
        match &self.format {
            BodyFormat::Csv { column_separator, line_delimiter } => {
                let opts = options();
                let columns =
                    batch.columns().iter().map(|c| ColumnText::new(c, &opts)).collect::<Result<Vec<_>, _>>()?;
                let fmts = &columns;
                // Columns whose text may hold a separator (not numbers, dates, booleans).
                let textual: Vec<bool> = batch
                    .columns()
                    .iter()
                    .map(|c| {
                        !(c.data_type().is_numeric()
                            || c.data_type().is_temporal()
                            || c.data_type() == &DataType::Boolean)
                    })
                    .collect();
                for row in 0..batch.num_rows() {
                    for (i, c) in columns.iter().enumerate() {
                        if i > 0 {
                            out.extend_from_slice(column_separator);
                        }
                        if c.is_null(row) {
                            out.extend_from_slice(b"\\N");
                        } else {
                            let start = out.len();
                            c.write(row, out)?;
                            if textual[i]
                                && (holds(&out[start..], column_separator) || holds(&out[start..], line_delimiter))
                            {
                                return Err(format!(
                                    "column `{}` holds a value with the column separator {:?} or the line delimiter {:?}, which a CSV load cannot carry: set `properties.format = \"json\"` (or separators its values never hold, e.g. `properties.column_separator = \"\\\\x01\"`)",
                                    batch.schema().field(i).name(),
                                    String::from_utf8_lossy(column_separator),
                                    String::from_utf8_lossy(line_delimiter),
                                ));
                            }
                        }
                    }
                    if let Some(s) = signs {
                        if !fmts.is_empty() {
                            out.extend_from_slice(column_separator);
                        }
                        out.push(b'0' + s[row]);
                    }
                    out.extend_from_slice(line_delimiter);
                }
                Ok(())
            }
            BodyFormat::Json => {
                let opts = options().with_null("null");
                let fmts = formatters(batch.columns(), &opts)?;
                let schema = batch.schema();
                let names: Vec<String> =
                    schema.fields().iter().map(|f| serde_json::to_string(f.name()).unwrap_or_default()).collect();
                let bare: Vec<bool> = schema.fields().iter().map(|f| is_json_bare(f.data_type())).collect();
                let mut text = String::new();
                for row in 0..batch.num_rows() {
                    out.push(b'{');
                    for (i, f) in fmts.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(names[i].as_bytes());
                        out.push(b':');
                        if bare[i] || batch.column(i).is_null(row) {
                            write!(out, "{}", f.value(row)).map_err(|e| e.to_string())?;
                        } else {
                            text.clear();
                            use std::fmt::Write as _;
                            write!(text, "{}", f.value(row)).map_err(|e| e.to_string())?;
                            serde_json::to_writer(&mut *out, &text).map_err(|e| e.to_string())?;
                        }
                    }
                    if let Some(s) = signs {
                        if !fmts.is_empty() {
                            out.push(b',');
                        }
                        write!(out, "\"{DELETE_SIGN}\":{}", s[row]).map_err(|e| e.to_string())?;
                    }
                    out.extend_from_slice(b"}\n");
                }
                Ok(())
            }
            BodyFormat::Arrow => {
                if signs.is_some() {
                    return Err("the arrow format cannot carry deletes; use csv or json".into());
                }
                if self.arrow.is_none() {
                    self.arrow = Some(StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(|e| e.to_string())?);
                }
                let w = self.arrow.as_mut().expect("set above");
                w.write(batch).map_err(|e| e.to_string())?;
                out.append(w.get_mut());
                Ok(())
            }
        }
    }

    /// Append what ends the body (the Arrow end-of-stream marker).
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        if let Some(mut w) = self.arrow.take() {
            w.finish().map_err(|e| e.to_string())?;
            out.append(w.get_mut());
        }
        Ok(())
    }
}

fn formatters<'a>(columns: &'a [ArrayRef], opts: &'a FormatOptions<'a>) -> Result<Vec<ArrayFormatter<'a>>, String> {
    columns.iter().map(|c| ArrayFormatter::try_new(c.as_ref(), opts).map_err(|e| e.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Date32Array, Int64Array, StringArray, TimestampSecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Second, None), true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a\"b"), None])),
                Arc::new(Date32Array::from(vec![Some(19723), None])),
                Arc::new(TimestampSecondArray::from(vec![Some(1_704_103_200), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn csv_uses_separators_null_marker_and_delete_sign() {
        let format = BodyFormat::from_properties(|k| match k {
            "column_separator" => Some("\\x01".into()),
            _ => None,
        })
        .unwrap();
        let mut out = Vec::new();
        BodyEncoder::new(format).write(&batch(), Some(&[0, 1]), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1\x01a\"b\x012024-01-01\x012024-01-01 10:00:00\x010\n2\x01\\N\x01\\N\x01\\N\x011\n"
        );
    }

    #[test]
    fn a_csv_value_holding_a_separator_is_refused_naming_the_column_and_the_way_out() {
        let schema = Arc::new(Schema::new(vec![Field::new("note", DataType::Utf8, true)]));
        let tab = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["tab\there"]))]).unwrap();
        let csv = BodyFormat::from_properties(|_| None).unwrap();
        let e = BodyEncoder::new(csv).write(&tab, None, &mut Vec::new()).unwrap_err();
        assert!(e.starts_with("column `note` holds a value with the column separator \"\\t\""), "{e}");
        assert!(e.contains("set `properties.format = \"json\"`"), "{e}");
        let mut out = Vec::new();
        BodyEncoder::new(BodyFormat::Json).write(&tab, None, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "{\"note\":\"tab\\there\"}\n");
    }

    #[test]
    fn json_decimals_are_strings_so_doris_keeps_every_digit() {
        let schema = Arc::new(Schema::new(vec![Field::new("d", DataType::Decimal128(38, 10), true)]));
        let big = arrow::array::Decimal128Array::from(vec![99_999_999_999_999_999_999_999_999_999_999_999_999i128])
            .with_precision_and_scale(38, 10)
            .unwrap();
        let batch = RecordBatch::try_new(schema, vec![Arc::new(big)]).unwrap();
        let mut out = Vec::new();
        BodyEncoder::new(BodyFormat::Json).write(&batch, None, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "{\"d\":\"9999999999999999999999999999.9999999999\"}\n");
    }

    #[test]
    fn json_lines_quote_text_and_keep_numbers_bare() {
        let mut out = Vec::new();
        BodyEncoder::new(BodyFormat::Json).write(&batch(), None, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":1,\"name\":\"a\\\"b\",\"d\":\"2024-01-01\",\"ts\":\"2024-01-01 10:00:00\"}\n\
             {\"id\":2,\"name\":null,\"d\":null,\"ts\":null}\n"
        );
    }

    #[test]
    fn arrow_bodies_are_one_ipc_stream() {
        let mut enc = BodyEncoder::new(BodyFormat::Arrow);
        let mut out = Vec::new();
        enc.write(&batch(), None, &mut out).unwrap();
        enc.write(&batch(), None, &mut out).unwrap();
        enc.finish(&mut out).unwrap();
        let rows: usize = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(out), None)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(rows, 4);
        assert!(enc.write(&batch(), Some(&[1, 1]), &mut Vec::new()).is_err());
    }
}
