//! Column values as the text of a Stream Load body, fast for the types pipelines carry most
//! (integers, text, DATE, DATETIME, DECIMAL) and through Arrow's formatter for the rest. The text
//! is exactly what [`arrow::util::display::ArrayFormatter`] writes with the body's options: a
//! DATETIME is `yyyy-MM-dd HH:mm:ss` with `.SSS`, `.SSSSSS` or `.SSSSSSSSS` only when its
//! fraction is not zero, a DECIMAL has exactly its scale's digits. Formatting a timestamp through
//! chrono re-reads the format string for every value, which was most of the sink's time.

use std::io::Write;

use arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Decimal128Array, Int8Array, Int16Array, Int32Array, Int64Array, StringArray,
    UInt8Array, UInt16Array, UInt32Array, UInt64Array,
};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// One column of a batch, ready to write row by row.
pub enum ColumnText<'a> {
    I8(&'a Int8Array),
    I16(&'a Int16Array),
    I32(&'a Int32Array),
    I64(&'a Int64Array),
    U8(&'a UInt8Array),
    U16(&'a UInt16Array),
    U32(&'a UInt32Array),
    U64(&'a UInt64Array),
    Utf8(&'a StringArray),
    Date(&'a Date32Array),
    /// Values and how many of them make a second.
    Timestamp(&'a dyn Array, &'a [i64], i64),
    Decimal(&'a Decimal128Array, u32),
    Other(&'a dyn Array, ArrayFormatter<'a>),
}

impl<'a> ColumnText<'a> {
    /// The writer of `column`; `opts` serves the types without a fast path.
    pub fn new(column: &'a ArrayRef, opts: &'a FormatOptions<'a>) -> Result<Self, String> {
        let c = column.as_ref();
        Ok(match c.data_type() {
            DataType::Int8 => ColumnText::I8(c.as_primitive()),
            DataType::Int16 => ColumnText::I16(c.as_primitive()),
            DataType::Int32 => ColumnText::I32(c.as_primitive()),
            DataType::Int64 => ColumnText::I64(c.as_primitive()),
            DataType::UInt8 => ColumnText::U8(c.as_primitive()),
            DataType::UInt16 => ColumnText::U16(c.as_primitive()),
            DataType::UInt32 => ColumnText::U32(c.as_primitive()),
            DataType::UInt64 => ColumnText::U64(c.as_primitive()),
            DataType::Utf8 => ColumnText::Utf8(c.as_string()),
            DataType::Date32 => ColumnText::Date(c.as_primitive()),
            DataType::Timestamp(unit, None) => {
                let (values, per_second): (&[i64], i64) = match unit {
                    TimeUnit::Second => (c.as_primitive::<arrow::datatypes::TimestampSecondType>().values(), 1),
                    TimeUnit::Millisecond => {
                        (c.as_primitive::<arrow::datatypes::TimestampMillisecondType>().values(), 1_000)
                    }
                    TimeUnit::Microsecond => {
                        (c.as_primitive::<arrow::datatypes::TimestampMicrosecondType>().values(), 1_000_000)
                    }
                    TimeUnit::Nanosecond => {
                        (c.as_primitive::<arrow::datatypes::TimestampNanosecondType>().values(), 1_000_000_000)
                    }
                };
                ColumnText::Timestamp(c, values, per_second)
            }
            DataType::Decimal128(_, scale) if *scale >= 0 => ColumnText::Decimal(c.as_primitive(), *scale as u32),
            _ => ColumnText::Other(c, ArrayFormatter::try_new(c, opts).map_err(|e| e.to_string())?),
        })
    }

    fn array(&self) -> &dyn Array {
        match self {
            ColumnText::I8(a) => *a,
            ColumnText::I16(a) => *a,
            ColumnText::I32(a) => *a,
            ColumnText::I64(a) => *a,
            ColumnText::U8(a) => *a,
            ColumnText::U16(a) => *a,
            ColumnText::U32(a) => *a,
            ColumnText::U64(a) => *a,
            ColumnText::Utf8(a) => *a,
            ColumnText::Date(a) => *a,
            ColumnText::Timestamp(a, ..) => *a,
            ColumnText::Decimal(a, _) => *a,
            ColumnText::Other(a, _) => *a,
        }
    }

    /// Whether row `row` is NULL.
    pub fn is_null(&self, row: usize) -> bool {
        self.array().is_null(row)
    }

    /// Append row `row`'s value (not NULL) to `out`.
    pub fn write(&self, row: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let mut ints = itoa::Buffer::new();
        match self {
            ColumnText::I8(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::I16(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::I32(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::I64(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::U8(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::U16(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::U32(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::U64(a) => out.extend_from_slice(ints.format(a.value(row)).as_bytes()),
            ColumnText::Utf8(a) => out.extend_from_slice(a.value(row).as_bytes()),
            ColumnText::Date(a) => write_date(i64::from(a.value(row)), out),
            ColumnText::Timestamp(_, values, per_second) => write_timestamp(values[row], *per_second, out),
            ColumnText::Decimal(a, scale) => write_decimal(a.value(row), *scale, out),
            ColumnText::Other(_, f) => write!(out, "{}", f.value(row)).map_err(|e| e.to_string())?,
        }
        Ok(())
    }
}

/// `n` as exactly `width` digits.
fn digits(mut n: u64, width: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + width, b'0');
    for i in (0..width).rev() {
        out[start + i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Days since 1970-01-01 as a civil date (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `yyyy-MM-dd`, as chrono writes `%Y-%m-%d` (years outside 0..=9999 with their sign).
fn write_date(days: i64, out: &mut Vec<u8>) {
    let (year, month, day) = civil(days);
    if (0..=9999).contains(&year) {
        digits(year as u64, 4, out);
    } else {
        let _ = write!(out, "{year:+05}");
    }
    out.push(b'-');
    digits(month, 2, out);
    out.push(b'-');
    digits(day, 2, out);
}

/// `yyyy-MM-dd HH:mm:ss` and the fraction as chrono's `%.f` writes it: nothing when zero, else
/// 3, 6 or 9 digits, the fewest that hold it.
fn write_timestamp(value: i64, per_second: i64, out: &mut Vec<u8>) {
    let seconds = value.div_euclid(per_second);
    let nanos = (value.rem_euclid(per_second) * (1_000_000_000 / per_second)) as u64;
    write_date(seconds.div_euclid(86_400), out);
    let secs = seconds.rem_euclid(86_400) as u64;
    out.push(b' ');
    digits(secs / 3600, 2, out);
    out.push(b':');
    digits(secs / 60 % 60, 2, out);
    out.push(b':');
    digits(secs % 60, 2, out);
    if nanos != 0 {
        out.push(b'.');
        if nanos.is_multiple_of(1_000_000) {
            digits(nanos / 1_000_000, 3, out);
        } else if nanos.is_multiple_of(1_000) {
            digits(nanos / 1_000, 6, out);
        } else {
            digits(nanos, 9, out);
        }
    }
}

/// A DECIMAL with exactly `scale` digits after the point.
fn write_decimal(value: i128, scale: u32, out: &mut Vec<u8>) {
    if value < 0 {
        out.push(b'-');
    }
    let magnitude = value.unsigned_abs();
    if scale == 0 {
        out.extend_from_slice(itoa::Buffer::new().format(magnitude).as_bytes());
        return;
    }
    let unit = 10u128.pow(scale);
    out.extend_from_slice(itoa::Buffer::new().format(magnitude / unit).as_bytes());
    out.push(b'.');
    let mut fraction = itoa::Buffer::new();
    let fraction = fraction.format(magnitude % unit).as_bytes();
    out.resize(out.len() + scale as usize - fraction.len(), b'0');
    out.extend_from_slice(fraction);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        BooleanArray, Float64Array, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
        TimestampSecondArray,
    };

    use super::*;

    /// Every value written as Arrow's formatter writes it with the body's options.
    fn same_as_arrow(column: ArrayRef) {
        let opts = super::super::format::options();
        let fast = ColumnText::new(&column, &opts).unwrap();
        let slow = ArrayFormatter::try_new(column.as_ref(), &opts).unwrap();
        for row in 0..column.len() {
            if column.is_null(row) {
                assert!(fast.is_null(row));
                continue;
            }
            let mut out = Vec::new();
            fast.write(row, &mut out).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                slow.value(row).to_string(),
                "{:?} row {row}",
                column.data_type()
            );
        }
    }

    #[test]
    fn fast_text_is_arrows_text() {
        let seconds =
            [0i64, 1, -1, 59, 86_399, 86_400, -86_401, 951_782_400, 1_704_103_200, 253_402_300_799, -62_135_596_800];
        same_as_arrow(Arc::new(TimestampSecondArray::from(seconds.to_vec())));
        let subsecond = [0i64, 1, -1, 999, 1_000, 1_500, 1_704_103_200_123, -1_704_103_200_120];
        same_as_arrow(Arc::new(TimestampMillisecondArray::from(subsecond.to_vec())));
        let micros = [0i64, 1, 10, 1_000, 1_000_000, 1_704_103_200_123_456, -1, -999_999, 1_704_103_200_120_000];
        same_as_arrow(Arc::new(TimestampMicrosecondArray::from(micros.to_vec())));
        let nanos = [0i64, 1, 1_000, 1_000_000, 1_704_103_200_123_456_789, -1];
        same_as_arrow(Arc::new(TimestampNanosecondArray::from(nanos.to_vec())));
        let days = [0i32, -1, 59, 60, 365, 10_957, 11_016, 19_723, -719_162, 2_932_896];
        same_as_arrow(Arc::new(Date32Array::from(days.to_vec())));
        let decimals = [0i128, 1, -1, 5, -5, 100, 12_345, -12_345, 99_999_999, i64::MAX as i128 * 1000];
        for scale in [0i8, 1, 2, 5, 10] {
            let a = Decimal128Array::from(decimals.to_vec()).with_precision_and_scale(38, scale).unwrap();
            same_as_arrow(Arc::new(a));
        }
        same_as_arrow(Arc::new(Int64Array::from(vec![Some(i64::MIN), None, Some(0), Some(i64::MAX)])));
        same_as_arrow(Arc::new(Int8Array::from(vec![i8::MIN, -1, 0, i8::MAX])));
        same_as_arrow(Arc::new(UInt64Array::from(vec![0, u64::MAX])));
        same_as_arrow(Arc::new(StringArray::from(vec![Some("a\tb"), None, Some(""), Some("ünïcode")])));
        same_as_arrow(Arc::new(BooleanArray::from(vec![true, false])));
        same_as_arrow(Arc::new(Float64Array::from(vec![1.5, -0.0, 1e20])));
    }
}
