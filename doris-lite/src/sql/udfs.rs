//! Scalar functions Doris users expect on every query: `if`, MySQL's `date_format` and
//! `from_unixtime` (in the session time zone), and the session's `database()`, `user()`,
//! `connection_id()`; the date functions of [`super::functions`] join them.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility, create_udf,
};
use datafusion::prelude::SessionContext;

use super::{SERVER_VERSION, Session};
use crate::types::format_datetime;

/// Doris' `if(cond, a, b)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DorisIf {
    signature: Signature,
}

impl ScalarUDFImpl for DorisIf {
    fn name(&self) -> &str {
        "if"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, t: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(if t[1] == DataType::Null { t[2].clone() } else { t[1].clone() })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let ret = args.return_field.data_type().clone();
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let cond = arrow::compute::cast(&arrays[0], &DataType::Boolean)?;
        let a = arrow::compute::cast(&arrays[1], &ret)?;
        let b = arrow::compute::cast(&arrays[2], &ret)?;
        Ok(ColumnarValue::Array(arrow::compute::kernels::zip::zip(cond.as_boolean(), &a, &b)?))
    }
}

/// Doris' `from_unixtime(seconds[, format])` returning text in the session time zone.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DorisFromUnixtime {
    signature: Signature,
    /// Session time zone offset from UTC.
    offset_us: i64,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Formats microseconds since the epoch with a MySQL `DATE_FORMAT` pattern (the specifiers mean
/// what MySQL's manual says: `%i` minutes, `%s` seconds, `%M` the month's name, …).
pub fn mysql_date_format(us: i64, fmt: &str) -> String {
    let full = format_datetime(us, 6);
    let (date, time) = full.split_at(10);
    let time = &time[1..];
    let num = |s: &str| s.parse::<u32>().unwrap_or(0);
    let (month, day, hour) = (num(&date[5..7]), num(&date[8..10]), num(&time[0..2]));
    let days = us.div_euclid(86_400_000_000);
    // 1970-01-01 was a Thursday.
    let weekday = (days + 4).rem_euclid(7) as usize;
    let year_day = {
        let jan1 = crate::types::parse_date(&format!("{}-01-01", &date[0..4])).unwrap_or(days as i32) as i64;
        days - jan1 + 1
    };
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let ampm = if hour < 12 { "AM" } else { "PM" };
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&date[0..4]),
            Some('y') => out.push_str(&date[2..4]),
            Some('m') => out.push_str(&date[5..7]),
            Some('c') => out.push_str(&month.to_string()),
            Some('M') => out.push_str(MONTHS[(month as usize).saturating_sub(1) % 12]),
            Some('b') => out.push_str(&MONTHS[(month as usize).saturating_sub(1) % 12][..3]),
            Some('d') => out.push_str(&date[8..10]),
            Some('e') => out.push_str(&day.to_string()),
            Some('D') => {
                let suffix = match (day % 10, day % 100) {
                    (_, 11..=13) => "th",
                    (1, _) => "st",
                    (2, _) => "nd",
                    (3, _) => "rd",
                    _ => "th",
                };
                out.push_str(&format!("{day}{suffix}"));
            }
            Some('W') => out.push_str(WEEKDAYS[weekday]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('w') => out.push_str(&weekday.to_string()),
            Some('j') => out.push_str(&format!("{year_day:03}")),
            Some('H') => out.push_str(&time[0..2]),
            Some('k') => out.push_str(&hour.to_string()),
            Some('h') | Some('I') => out.push_str(&format!("{hour12:02}")),
            Some('l') => out.push_str(&hour12.to_string()),
            Some('p') => out.push_str(ampm),
            Some('i') => out.push_str(&time[3..5]),
            Some('s') | Some('S') => out.push_str(&time[6..8]),
            Some('f') => out.push_str(&time[9..15]),
            Some('T') => out.push_str(&time[0..8]),
            Some('r') => out.push_str(&format!("{hour12:02}:{} {ampm}", &time[3..8])),
            Some(other) => out.push(other),
            None => out.push('%'),
        }
    }
    out
}

/// Doris' `date_format(datetime, format)`, with MySQL's specifiers (DataFusion's own
/// `date_format` is strftime's).
#[derive(Debug, PartialEq, Eq, Hash)]
struct DorisDateFormat {
    signature: Signature,
}

impl ScalarUDFImpl for DorisDateFormat {
    fn name(&self) -> &str {
        "date_format"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ts = arrow::compute::cast(&arrays[0], &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None))?;
        let ts = ts.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        let fmts = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let fmts = fmts.as_string::<i32>();
        let out: arrow::array::StringArray = (0..ts.len())
            .map(|i| (!ts.is_null(i) && !fmts.is_null(i)).then(|| mysql_date_format(ts.value(i), fmts.value(i))))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

impl ScalarUDFImpl for DorisFromUnixtime {
    fn name(&self) -> &str {
        "from_unixtime"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let secs = arrow::compute::cast(&arrays[0], &DataType::Float64)?;
        let secs = secs.as_primitive::<arrow::datatypes::Float64Type>();
        let fmts = match arrays.get(1) {
            Some(f) => Some(arrow::compute::cast(f, &DataType::Utf8)?),
            None => None,
        };
        let out: arrow::array::StringArray = (0..secs.len())
            .map(|i| {
                if secs.is_null(i) {
                    return None;
                }
                let us = (secs.value(i) * 1_000_000.0).floor() as i64 + self.offset_us;
                let fmt = match &fmts {
                    Some(f) if f.is_null(i) => return None,
                    Some(f) => f.as_string::<i32>().value(i).to_string(),
                    None => "%Y-%m-%d %H:%i:%s".to_string(),
                };
                Some(mysql_date_format(us, &fmt))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// Registers the scalar functions Doris users expect that DataFusion lacks or spells differently.
pub fn register_doris_functions(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::from(DorisIf { signature: Signature::any(3, Volatility::Immutable) }));
    ctx.register_udf(ScalarUDF::from(DorisDateFormat { signature: Signature::any(2, Volatility::Immutable) }));
    register_from_unixtime(ctx, 0);
    super::functions::register(ctx);
}

pub(super) fn register_from_unixtime(ctx: &SessionContext, offset_ms: i64) {
    ctx.register_udf(ScalarUDF::from(DorisFromUnixtime {
        signature: Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], Volatility::Immutable),
        offset_us: offset_ms * 1000,
    }));
}

pub(super) fn register_session_functions(ctx: &SessionContext, session: &Session) {
    let consts: [(&str, Option<String>); 5] = [
        ("database", session.db.clone()),
        ("schema", session.db.clone()),
        ("version", Some(SERVER_VERSION.to_string())),
        ("current_user", Some(format!("'{}'@'%'", session.user))),
        ("user", Some(format!("'{}'@'%'", session.user))),
    ];
    for (name, value) in consts {
        let f = create_udf(
            name,
            vec![],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(value.clone())))),
        );
        ctx.register_udf(f);
    }
    let id = session.connection_id as i64;
    ctx.register_udf(create_udf(
        "connection_id",
        vec![],
        DataType::Int64,
        Volatility::Stable,
        Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(id))))),
    ));
}
