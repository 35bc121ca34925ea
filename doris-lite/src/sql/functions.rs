//! MySQL date functions with MySQL's semantics, which Doris has and DataFusion lacks or spells
//! differently: `date_add` / `adddate` / `date_sub` / `subdate` with `INTERVAL`, `datediff`,
//! `curdate`, `unix_timestamp`, `str_to_date` (MySQL's format specifiers).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Date32Array, Int64Array, TimestampMicrosecondArray};
use arrow::compute::kernels::numeric;
use arrow::datatypes::{DataType, Field, FieldRef, IntervalUnit, TimeUnit, TimestampMicrosecondType};
use chrono::{NaiveDate, NaiveDateTime};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;

const MICROS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

/// Registers the functions of this module.
pub fn register(ctx: &SessionContext) {
    for (name, negate) in [("date_add", false), ("adddate", false), ("date_sub", true), ("subdate", true)] {
        ctx.register_udf(ScalarUDF::from(DateArith {
            name,
            negate,
            signature: Signature::any(2, Volatility::Immutable),
        }));
    }
    ctx.register_udf(ScalarUDF::from(DateDiff { signature: Signature::any(2, Volatility::Immutable) }));
    ctx.register_udf(ScalarUDF::from(UnixTimestamp {
        signature: Signature::one_of(vec![TypeSignature::Nullary, TypeSignature::Any(1)], Volatility::Volatile),
    }));
    ctx.register_udf(ScalarUDF::from(StrToDate { signature: Signature::any(2, Volatility::Immutable) }));
    if let Ok(current_date) = ctx.udf("current_date") {
        ctx.register_udf(current_date.as_ref().clone().with_aliases(["curdate"]));
    }
}

/// A date or datetime argument as microsecond timestamps (strings parsed as Doris does).
fn as_micros(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(arrow::compute::cast(a, &MICROS)?)
}

/// `date_add(d, INTERVAL n unit)` and its kin: a DATE stays a DATE, anything else is a DATETIME.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateArith {
    name: &'static str,
    negate: bool,
    signature: Signature,
}

impl ScalarUDFImpl for DateArith {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, t: &[DataType]) -> Result<DataType> {
        Ok(if t.first() == Some(&DataType::Date32) { DataType::Date32 } else { MICROS })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ts = as_micros(&arrays[0])?;
        let interval = match arrays[1].data_type() {
            DataType::Interval(_) => arrow::compute::cast(&arrays[1], &DataType::Interval(IntervalUnit::MonthDayNano))?,
            // `adddate(d, n)`: n days.
            t if t.is_integer() => {
                let days = arrow::compute::cast(&arrays[1], &DataType::Int64)?;
                let micros = numeric::mul(&days, &Int64Array::new_scalar(86_400_000_000))?;
                arrow::compute::cast(&micros, &DataType::Duration(TimeUnit::Microsecond))?
            }
            t => {
                return Err(DataFusionError::Plan(format!(
                    "{}: the second argument must be INTERVAL n unit or a number of days, not {t}",
                    self.name
                )));
            }
        };
        let out = if self.negate { numeric::sub(&ts, &interval)? } else { numeric::add(&ts, &interval)? };
        let want = self.return_type(&[arrays[0].data_type().clone()])?;
        Ok(ColumnarValue::Array(arrow::compute::cast(&out, &want)?))
    }
}

/// `datediff(a, b)`: the days from b's date to a's (times of day ignored), as MySQL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateDiff {
    signature: Signature,
}

impl ScalarUDFImpl for DateDiff {
    fn name(&self) -> &str {
        "datediff"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let day = |a: &ArrayRef| -> Result<ArrayRef> {
            let d = arrow::compute::cast(&as_micros(a)?, &DataType::Date32)?;
            Ok(arrow::compute::cast(&d, &DataType::Int32)?)
        };
        Ok(ColumnarValue::Array(numeric::sub(&day(&arrays[0])?, &day(&arrays[1])?)?))
    }
}

/// `unix_timestamp()` (now) and `unix_timestamp(d)`: whole seconds since the epoch.
#[derive(Debug, PartialEq, Eq, Hash)]
struct UnixTimestamp {
    signature: Signature,
}

impl ScalarUDFImpl for UnixTimestamp {
    fn name(&self) -> &str {
        "unix_timestamp"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.is_empty() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            return Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::Int64(Some(now))));
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ts = as_micros(&arrays[0])?;
        let ts = ts.as_primitive::<TimestampMicrosecondType>();
        let out: Int64Array = ts.iter().map(|v| v.map(|us| us.div_euclid(1_000_000))).collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `str_to_date(s, fmt)` with MySQL's specifiers: a DATETIME when the format has a time of day,
/// else a DATE; NULL where the text does not match (as MySQL).
#[derive(Debug, PartialEq, Eq, Hash)]
struct StrToDate {
    signature: Signature,
}

/// MySQL's `%` specifiers as chrono's, and whether the format has a time of day.
fn chrono_format(mysql: &str) -> (String, bool) {
    let mut out = String::with_capacity(mysql.len() + 8);
    let mut time = false;
    let mut chars = mysql.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            out.push_str("%%");
            break;
        };
        let (to, is_time) = match spec {
            'Y' => ("%Y", false),
            'y' => ("%y", false),
            'm' | 'c' => ("%m", false),
            'd' | 'e' => ("%d", false),
            'M' => ("%B", false),
            'b' => ("%b", false),
            'W' => ("%A", false),
            'a' => ("%a", false),
            'j' => ("%j", false),
            'H' | 'k' => ("%H", true),
            'h' | 'I' | 'l' => ("%I", true),
            'i' => ("%M", true),
            's' | 'S' => ("%S", true),
            'f' => ("%6f", true),
            'p' => ("%p", true),
            'T' => ("%H:%M:%S", true),
            'r' => ("%I:%M:%S %p", true),
            '%' => ("%%", false),
            other => {
                out.push(other);
                continue;
            }
        };
        out.push_str(to);
        time |= is_time;
    }
    (out, time)
}

impl ScalarUDFImpl for StrToDate {
    fn name(&self) -> &str {
        "str_to_date"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> Result<DataType> {
        Ok(MICROS)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let format = args.scalar_arguments.get(1).copied().flatten().and_then(|v| v.try_as_str().flatten());
        let ty = match format {
            Some(f) if !chrono_format(f).1 => DataType::Date32,
            _ => MICROS,
        };
        Ok(Arc::new(Field::new(self.name(), ty, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let want = args.return_field.data_type().clone();
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let formats = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let formats = formats.as_string::<i32>();
        let parse = |i: usize| -> Option<NaiveDateTime> {
            if texts.is_null(i) || formats.is_null(i) {
                return None;
            }
            let (fmt, time) = chrono_format(formats.value(i));
            let text = texts.value(i).trim();
            if time {
                NaiveDateTime::parse_from_str(text, &fmt).ok()
            } else {
                NaiveDate::parse_from_str(text, &fmt).ok().and_then(|d| d.and_hms_opt(0, 0, 0))
            }
        };
        let out: ArrayRef = if want == DataType::Date32 {
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
            Arc::new(
                (0..texts.len())
                    .map(|i| parse(i).map(|t| (t.date() - epoch).num_days() as i32))
                    .collect::<Date32Array>(),
            )
        } else {
            Arc::new(
                (0..texts.len())
                    .map(|i| parse(i).map(|t| t.and_utc().timestamp_micros()))
                    .collect::<TimestampMicrosecondArray>(),
            )
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// Rewrites MySQL's `group_concat([DISTINCT] expr [, sep | SEPARATOR sep] [ORDER BY …])` into
/// DataFusion's `string_agg` (or `array_agg` when DISTINCT) (Doris' default separator is `", "`). Text that does not tokenize
/// is returned unchanged, so its error comes from the planner.
pub fn rewrite_group_concat(sql: &str) -> String {
    use datafusion::sql::sqlparser::tokenizer::Token;
    if !sql.to_ascii_lowercase().contains("group_concat") {
        return sql.to_string();
    }
    let Ok(tokens) = crate::sql::token_ranges(sql) else { return sql.to_string() };
    let solid: Vec<&(Token, std::ops::Range<usize>)> =
        tokens.iter().filter(|(t, _)| !matches!(t, Token::Whitespace(_))).collect();
    let is_word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.value.eq_ignore_ascii_case(w));
    for (i, (t, r)) in solid.iter().enumerate() {
        if !is_word(t, "group_concat") || !matches!(solid.get(i + 1), Some((Token::LParen, _))) {
            continue;
        }
        // The matching parenthesis, and the top-level markers inside.
        let mut depth = 0;
        let (mut comma, mut separator, mut order, mut close) = (None, None, None, None);
        for (j, (tj, _)) in solid.iter().enumerate().skip(i + 1) {
            match tj {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                }
                Token::Comma if depth == 1 && comma.is_none() && separator.is_none() => comma = Some(j),
                _ if depth == 1 && is_word(tj, "SEPARATOR") => separator = Some(j),
                _ if depth == 1
                    && is_word(tj, "ORDER")
                    && matches!(solid.get(j + 1), Some((t, _)) if is_word(t, "BY")) =>
                {
                    order = Some(j)
                }
                _ => {}
            }
        }
        let Some(close) = close else { return sql.to_string() };
        let mut first = i + 2;
        let distinct = solid.get(first).is_some_and(|(t, _)| is_word(t, "DISTINCT"));
        if distinct {
            first += 1;
        }
        let expr_end = [comma, separator, order].into_iter().flatten().min().unwrap_or(close);
        if first >= expr_end {
            return sql.to_string();
        }
        let text = |a: usize, b: usize| sql[solid[a].1.start..solid[b - 1].1.end].to_string();
        let expr = rewrite_group_concat(&text(first, expr_end));
        // MySQL writes `expr [ORDER BY …] [SEPARATOR s]`, Doris also `expr, s [ORDER BY …]`: each
        // clause runs to the next marker after it, or to the closing parenthesis.
        let end_of =
            |at: usize| [comma, separator, order].into_iter().flatten().filter(|&m| m > at).min().unwrap_or(close);
        let sep = match comma.or(separator) {
            Some(at) if at + 1 < end_of(at) => text(at + 1, end_of(at)),
            Some(_) => return sql.to_string(),
            None => "', '".to_string(),
        };
        let order_by = order.map(|o| format!(" {}", text(o, end_of(o)))).unwrap_or_default();
        // DataFusion sorts a DISTINCT aggregate only by its own argument: the distinct values are
        // gathered in their own type (so numbers sort as numbers), then joined.
        let replaced = if distinct {
            format!("array_to_string(array_agg(DISTINCT {expr}{order_by}), {sep})")
        } else {
            format!("string_agg(CAST({expr} AS VARCHAR), {sep}{order_by})")
        };
        let rest = rewrite_group_concat(&sql[solid[close].1.end..]);
        return format!("{}{replaced}{rest}", &sql[..r.start]);
    }
    sql.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_specifiers_become_chrono_ones() {
        assert_eq!(chrono_format("%Y-%m-%d %H:%i:%s"), ("%Y-%m-%d %H:%M:%S".into(), true));
        assert_eq!(chrono_format("%d/%c/%Y"), ("%d/%m/%Y".into(), false));
        assert_eq!(chrono_format("%M %e, %Y %r"), ("%B %d, %Y %I:%M:%S %p".into(), true));
    }
}
