//! Doris' rows of a range as the [`Fingerprint`] the source's server computes of its own.

use std::io::Write;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{self as types, DataType, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::runtime::mirror::{Fingerprint, RowHash};

/// The rows and hash sum of `batches` (Doris' columns, cast to `schema`'s types) written and
/// hashed as `like` says; none when a column's type has no such text (then rows are compared).
pub(super) fn of(batches: &[RecordBatch], schema: &SchemaRef, like: &Fingerprint) -> Option<(u64, i128)> {
    if like.text.len() != schema.fields().len() {
        return None;
    }
    let (mut rows, mut sum) = (0u64, 0i128);
    let mut line = Vec::with_capacity(256);
    for batch in batches {
        if batch.num_columns() != schema.fields().len() {
            return None;
        }
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(c, f)| match c.data_type() == f.data_type() {
                true => Some(c.clone()),
                false => arrow::compute::cast(c, f.data_type()).ok(),
            })
            .collect::<Option<_>>()?;
        let writers: Vec<Writer> = columns.iter().map(|c| Writer::of(c.as_ref())).collect::<Option<_>>()?;
        for row in 0..batch.num_rows() {
            line.clear();
            for (i, (column, writer)) in columns.iter().zip(&writers).enumerate() {
                if i > 0 {
                    line.push(b'|');
                }
                if column.is_null(row) {
                    line.push(b'N');
                } else {
                    writer.write(column.as_ref(), row, like.text[i], &mut line);
                }
            }
            sum += hash(like.hash, &line);
            rows += 1;
        }
    }
    Some((rows, sum))
}

fn hash(kind: RowHash, line: &[u8]) -> i128 {
    match kind {
        RowHash::Crc32 => crc32fast::hash(line) as i128,
        RowHash::PgHashText => pg_hashtext(line) as i128,
    }
}

/// PostgreSQL's `hashtext()` of text in a deterministic collation (its `hash_bytes`): Bob
/// Jenkins' lookup3 over little-endian words, the last bytes of `c` shifted past its low byte,
/// and the final mix always applied.
fn pg_hashtext(bytes: &[u8]) -> i32 {
    let mut a = 0x9e37_79b9u32.wrapping_add(bytes.len() as u32).wrapping_add(3_923_095);
    let (mut b, mut c) = (a, a);
    let word = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let mut rest = bytes;
    while rest.len() >= 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        for (r1, r2, r3) in [(4, 6, 8), (16, 19, 4)] {
            a = a.wrapping_sub(c) ^ c.rotate_left(r1);
            c = c.wrapping_add(b);
            b = b.wrapping_sub(a) ^ a.rotate_left(r2);
            a = a.wrapping_add(c);
            c = c.wrapping_sub(b) ^ b.rotate_left(r3);
            b = b.wrapping_add(a);
        }
        rest = &rest[12..];
    }
    for (i, &byte) in rest.iter().enumerate() {
        let v = u32::from(byte);
        match i {
            0..=3 => a = a.wrapping_add(v << (8 * i)),
            4..=7 => b = b.wrapping_add(v << (8 * (i - 4))),
            _ => c = c.wrapping_add(v << (8 * (i - 7))),
        }
    }
    for (x, y, r) in [(2, 1, 14), (0, 2, 11), (1, 0, 25), (2, 1, 16), (0, 2, 4), (1, 0, 14), (2, 1, 24)] {
        let mut abc = [a, b, c];
        abc[x] = (abc[x] ^ abc[y]).wrapping_sub(abc[y].rotate_left(r));
        [a, b, c] = abc;
    }
    c as i32
}

/// How a column's values are written: as the servers print them.
#[derive(Clone, Copy)]
enum Writer {
    Int,
    Decimal(u32),
    Text,
    Date,
    /// Wall time to the microsecond.
    Timestamp,
}

impl Writer {
    fn of(column: &dyn Array) -> Option<Writer> {
        Some(match column.data_type() {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Writer::Int,
            DataType::Decimal128(_, s) if *s >= 0 => Writer::Decimal(*s as u32),
            DataType::Utf8 | DataType::LargeUtf8 => Writer::Text,
            DataType::Date32 => Writer::Date,
            DataType::Timestamp(_, None) => Writer::Timestamp,
            _ => return None,
        })
    }

    fn write(self, column: &dyn Array, row: usize, counted: bool, line: &mut Vec<u8>) {
        let _ = match self {
            Writer::Int => {
                let mut digits = itoa::Buffer::new();
                let text = match column.data_type() {
                    DataType::Int8 => digits.format(column.as_primitive::<types::Int8Type>().value(row)),
                    DataType::Int16 => digits.format(column.as_primitive::<types::Int16Type>().value(row)),
                    DataType::Int32 => digits.format(column.as_primitive::<types::Int32Type>().value(row)),
                    DataType::Int64 => digits.format(column.as_primitive::<types::Int64Type>().value(row)),
                    DataType::UInt8 => digits.format(column.as_primitive::<types::UInt8Type>().value(row)),
                    DataType::UInt16 => digits.format(column.as_primitive::<types::UInt16Type>().value(row)),
                    DataType::UInt32 => digits.format(column.as_primitive::<types::UInt32Type>().value(row)),
                    _ => digits.format(column.as_primitive::<types::UInt64Type>().value(row)),
                };
                line.extend_from_slice(text.as_bytes());
                Ok(())
            }
            Writer::Decimal(scale) => {
                let v = column.as_primitive::<types::Decimal128Type>().value(row);
                let unit = 10u128.pow(scale);
                let sign = if v < 0 { "-" } else { "" };
                let (whole, fraction) = (v.unsigned_abs() / unit, v.unsigned_abs() % unit);
                match scale {
                    0 => write!(line, "{sign}{whole}"),
                    s => write!(line, "{sign}{whole}.{fraction:0width$}", width = s as usize),
                }
            }
            Writer::Text => {
                let text = match column.data_type() {
                    DataType::LargeUtf8 => column.as_string::<i64>().value(row),
                    _ => column.as_string::<i32>().value(row),
                };
                if counted {
                    let _ = write!(line, "{}:", text.len());
                }
                line.extend_from_slice(text.as_bytes());
                Ok(())
            }
            Writer::Timestamp => {
                let micros = match column.data_type() {
                    DataType::Timestamp(types::TimeUnit::Second, _) => {
                        column.as_primitive::<types::TimestampSecondType>().value(row).checked_mul(1_000_000)
                    }
                    DataType::Timestamp(types::TimeUnit::Millisecond, _) => {
                        column.as_primitive::<types::TimestampMillisecondType>().value(row).checked_mul(1_000)
                    }
                    DataType::Timestamp(types::TimeUnit::Microsecond, _) => {
                        Some(column.as_primitive::<types::TimestampMicrosecondType>().value(row))
                    }
                    _ => Some(column.as_primitive::<types::TimestampNanosecondType>().value(row) / 1_000),
                };
                match micros.and_then(chrono::DateTime::from_timestamp_micros) {
                    Some(t) => write!(line, "{}", t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f")),
                    None => write!(line, "?"),
                }
            }
            Writer::Date => match column.as_primitive::<types::Date32Type>().value_as_date(row) {
                Some(d) => write!(line, "{}", d.format("%Y-%m-%d")),
                None => write!(line, "?"),
            },
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Date32Array, Decimal128Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    /// `SELECT n, hashtext(left('abcdefghijklmnopqrstuvwxyz0123456789', n)) FROM generate_series(0, 36) n`
    /// on PostgreSQL 15: every length of tail, and several whole blocks.
    #[test]
    fn postgres_hashtext_is_computed_as_the_server_does() {
        let server = [
            -1477818771,
            1075015857,
            1718550461,
            -785388649,
            -393934804,
            -445659580,
            -1747460160,
            501636814,
            -1960928205,
            -92131489,
            1948051852,
            -1483803693,
            -1586087212,
            405849808,
            315215413,
            -1389283689,
            -2079749669,
            1648114242,
            -952297252,
            -684650393,
            766334193,
            2124303250,
            -50608962,
            -1149376136,
            1251586959,
            980150893,
            167831483,
            -1923549396,
            -636332337,
            -412030706,
            89653194,
            -908372798,
            1203288424,
            -19649275,
            -189095804,
            -1475196007,
            1318422268,
        ];
        let text = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let ours: Vec<i32> = (0..=36).map(|n| pg_hashtext(&text[..n])).collect();
        assert_eq!(ours, server);
    }

    #[test]
    fn rows_are_written_as_the_servers_print_them() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Field::new("day", DataType::Date32, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![7, -1])),
                Arc::new(StringArray::from(vec![Some("a|b ✓"), None])),
                Arc::new(Decimal128Array::from(vec![Some(-5), None]).with_precision_and_scale(12, 2).unwrap()),
                Arc::new(Date32Array::from(vec![Some(19_723), None])),
            ],
        )
        .unwrap();
        let like = |hash| Fingerprint { hash, text: vec![false, true, false, false], rows: 0, sum: 0 };
        // MariaDB: SELECT CRC32('7|7:a|b ✓|-0.05|2024-01-01'), CRC32('-1|N|N|N')
        assert_eq!(
            of(std::slice::from_ref(&batch), &schema, &like(RowHash::Crc32)),
            Some((2, 2_775_950_336 + 3_680_880_665))
        );
        // PostgreSQL: SELECT hashtext('-1|N|N|N')
        assert_eq!(of(&[batch.slice(1, 1)], &schema, &like(RowHash::PgHashText)), Some((1, -1_364_670_356)));
        assert_eq!(pg_hashtext("7|7:a|b ✓|-0.05|2024-01-01".as_bytes()), 2_017_532_048);
        let floats = Arc::new(Schema::new(vec![Field::new("f", DataType::Float64, false)]));
        let batch =
            RecordBatch::try_new(floats.clone(), vec![Arc::new(arrow::array::Float64Array::from(vec![1.5]))]).unwrap();
        let one = Fingerprint { hash: RowHash::Crc32, text: vec![false], rows: 0, sum: 0 };
        assert_eq!(of(&[batch], &floats, &one), None, "a float has no text both sides write alike");
    }
}
