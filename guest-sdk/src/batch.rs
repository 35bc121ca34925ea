//! Columnar batches with row kinds, and their Arrow IPC encoding on the plugin boundary.

use std::collections::HashMap;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int8Builder,
    Int16Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder, TimestampMillisecondBuilder,
    TimestampSecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, NullArray, RecordBatch, RecordBatchOptions, StringArray};
pub use arrow_buffer::Buffer;
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::Error;

/// The name a plugin author knows an Arrow array type by (`StringArray`, not the generic type
/// it aliases).
fn array_name<A: 'static>() -> &'static str {
    use arrow_array::*;
    use std::any::TypeId;
    macro_rules! known {
        ($($t:ident),*) => {
            $(if TypeId::of::<A>() == TypeId::of::<$t>() { return stringify!($t); })*
        };
    }
    known!(
        StringArray,
        BooleanArray,
        Int8Array,
        Int16Array,
        Int32Array,
        Int64Array,
        Float32Array,
        Float64Array,
        Decimal128Array,
        Date32Array,
        TimestampSecondArray,
        TimestampMillisecondArray,
        TimestampMicrosecondArray
    );
    let name = std::any::type_name::<A>();
    name.split('<').next().and_then(|path| path.rsplit("::").next()).unwrap_or(name)
}

/// Where [`Batch::map_str`] writes one value: `push_str` pieces, or `write!` into it.
pub struct StrOut<'a>(&'a mut Vec<u8>);

impl StrOut<'_> {
    /// Append `s` to the value being written.
    #[inline]
    pub fn push_str(&mut self, s: &str) {
        append_bytes(self.0, s.as_bytes());
    }
}

impl std::fmt::Write for StrOut<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

/// Append `bytes` to `out`. Inside a WebAssembly component a copy whose length is not known when
/// the plugin is compiled is a call out of the sandbox (`memory.copy`), which costs more than
/// copying a name or a prefix; so a short piece is copied in pieces of fixed size (16, 8, 4, 2
/// and 1 bytes), which compile to plain loads and stores. Long pieces take the one call.
#[inline]
fn append_bytes(out: &mut Vec<u8>, mut bytes: &[u8]) {
    fn piece<const N: usize>(out: &mut Vec<u8>, bytes: &mut &[u8]) {
        if let Some((head, rest)) = bytes.split_first_chunk::<N>() {
            out.extend_from_slice(head);
            *bytes = rest;
        }
    }
    if bytes.len() >= 32 {
        out.extend_from_slice(bytes);
        return;
    }
    out.reserve(bytes.len());
    piece::<16>(out, &mut bytes);
    piece::<8>(out, &mut bytes);
    piece::<4>(out, &mut bytes);
    piece::<2>(out, &mut bytes);
    piece::<1>(out, &mut bytes);
}

/// What happened to a row (Flink's `RowKind`). The discriminants are the wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RowKind {
    Insert = 0,
    UpdateBefore = 1,
    UpdateAfter = 2,
    Delete = 3,
}

impl RowKind {
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => Self::Insert,
            1 => Self::UpdateBefore,
            2 => Self::UpdateAfter,
            3 => Self::Delete,
            _ => return None,
        })
    }

    /// Flink's short form: `+I`, `-U`, `+U`, `-D`.
    pub fn short(self) -> &'static str {
        match self {
            Self::Insert => "+I",
            Self::UpdateBefore => "-U",
            Self::UpdateAfter => "+U",
            Self::Delete => "-D",
        }
    }
}

/// A batch of rows for one target table: Arrow columns plus the kind of each row.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Target table (`db.table`); `None` is the pipeline's default table.
    pub table: Option<String>,
    pub data: RecordBatch,
    /// One kind per row, or empty when every row is an insert.
    pub row_kinds: Vec<RowKind>,
}

impl Batch {
    /// A batch of inserts for the default table.
    pub fn new(data: RecordBatch) -> Self {
        Self { table: None, data, row_kinds: Vec::new() }
    }

    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    pub fn num_rows(&self) -> usize {
        self.data.num_rows()
    }

    pub fn schema(&self) -> SchemaRef {
        self.data.schema()
    }

    pub fn row_kind(&self, row: usize) -> RowKind {
        self.row_kinds.get(row).copied().unwrap_or(RowKind::Insert)
    }

    /// The column `name`, or an error naming it.
    pub fn column(&self, name: &str) -> Result<&ArrayRef, Error> {
        self.data.column_by_name(name).ok_or_else(|| Error::new(format!("input has no column `{name}`")))
    }

    /// The column `name` as a concrete Arrow array type, e.g. `batch.typed::<Int32Array>("age")`.
    pub fn typed<A: Array + 'static>(&self, name: &str) -> Result<&A, Error> {
        let col = self.column(name)?;
        col.as_any()
            .downcast_ref::<A>()
            .ok_or_else(|| Error::new(format!("column `{name}` is {}, not {}", col.data_type(), array_name::<A>())))
    }

    /// A new string column made from the string column `name`: `f` writes each non-null value's
    /// replacement into `out`; nulls stay null. The values are written straight into the new
    /// column's buffer, with no allocation per row: the fast way to rewrite text in a plugin
    /// (formatting a `String` per row costs several times more inside WebAssembly).
    ///
    /// ```
    /// # use sluice_guest::prelude::*;
    /// # fn f(batch: &Batch) -> Result<StringArray> {
    /// let prefixed = batch.map_str("name", |name, out| {
    ///     out.push_str("prefix_");
    ///     out.push_str(name);
    /// })?;
    /// # Ok(prefixed) }
    /// ```
    pub fn map_str(&self, name: &str, mut f: impl FnMut(&str, &mut StrOut<'_>)) -> Result<StringArray, Error> {
        let input = self.typed::<StringArray>(name)?;
        let mut values = Vec::with_capacity(input.value_data().len() + input.len() * 8);
        let mut offsets = Vec::with_capacity(input.len() + 1);
        offsets.push(0i32);
        for value in input {
            if let Some(value) = value {
                f(value, &mut StrOut(&mut values));
            }
            // Lengths only grow: if the last fits in an i32 (checked below), every one does.
            offsets.push(values.len() as i32);
        }
        if i32::try_from(values.len()).is_err() {
            return Err(Error::new(format!("the new `{name}` column holds more than 2 GiB of text in one batch")));
        }
        // SAFETY: the offsets start at 0 and never decrease, the last is the length of `values`,
        // and every value is a sequence of whole `&str` pieces, so valid UTF-8 between offsets.
        let array = unsafe {
            StringArray::new_unchecked(
                OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)),
                Buffer::from_vec(values),
                input.nulls().cloned(),
            )
        };
        Ok(array)
    }

    /// Iterate the rows, each giving access to its values by column name.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        (0..self.num_rows()).map(move |index| Row { batch: self, index })
    }

    /// Keep only the rows for which `keep` is true (row kinds follow their rows).
    pub fn filter(&self, keep: impl Fn(Row<'_>) -> bool) -> Result<Batch, Error> {
        let mask: arrow_array::BooleanArray = self.rows().map(|r| Some(keep(r))).collect();
        let data = arrow_select::filter::filter_record_batch(&self.data, &mask)?;
        let row_kinds = if self.row_kinds.is_empty() {
            Vec::new()
        } else {
            self.row_kinds.iter().zip(mask.values().iter()).filter(|(_, k)| *k).map(|(r, _)| *r).collect()
        };
        Ok(Batch { table: self.table.clone(), data, row_kinds })
    }

    /// Encode for the plugin boundary: `(table, arrow IPC stream bytes, row-kind codes)`.
    pub fn to_wire(&self) -> Result<WireBatch, Error> {
        self.wire(&self.data)
    }

    /// This batch's table and row kinds with `data` (its columns, or references to them).
    fn wire(&self, data: &RecordBatch) -> Result<WireBatch, Error> {
        let codes = self.row_kinds.iter().map(|k| *k as u8).collect();
        Ok((self.table.clone(), encode_ipc(data)?, codes))
    }

    /// [`Batch::to_wire`] for a transform's answer to a batch whose columns were `input`: a column
    /// that is one of `input`'s arrays itself (untouched by the plugin) crosses back as a
    /// reference to it (see [`INPUT_COLUMN_KEY`]) instead of its values.
    pub fn to_wire_against(&self, input: &[ArrayRef]) -> Result<WireBatch, Error> {
        let rows = self.num_rows();
        let schema = self.data.schema();
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (field, column) in schema.fields().iter().zip(self.data.columns()) {
            match input.iter().position(|i| std::sync::Arc::ptr_eq(i, column)) {
                Some(index) => {
                    let reference = HashMap::from([(INPUT_COLUMN_KEY.to_string(), index.to_string())]);
                    fields.push(Field::new(field.name(), DataType::Null, true).with_metadata(reference));
                    columns.push(std::sync::Arc::new(NullArray::new(rows)) as ArrayRef);
                }
                None => {
                    fields.push(field.as_ref().clone());
                    columns.push(column.clone());
                }
            }
        }
        if columns.iter().zip(self.data.columns()).all(|(a, b)| std::sync::Arc::ptr_eq(a, b)) {
            return self.to_wire();
        }
        let schema = std::sync::Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        self.wire(&RecordBatch::try_new_with_options(schema, columns, &options)?)
    }

    /// Decode from the plugin boundary, checking that the row kinds fit the rows.
    pub fn from_wire(table: Option<String>, ipc: Vec<u8>, codes: Vec<u8>) -> Result<Batch, Error> {
        Self::from_decoded(table, decode_ipc(ipc)?, codes)
    }

    /// A batch from decoded columns and row-kind codes, checking that they fit together.
    pub fn from_decoded(table: Option<String>, data: RecordBatch, codes: Vec<u8>) -> Result<Batch, Error> {
        if !codes.is_empty() && codes.len() != data.num_rows() {
            return Err(Error::new(format!("batch has {} rows but {} row kinds", data.num_rows(), codes.len())));
        }
        let row_kinds = codes
            .iter()
            .map(|c| {
                RowKind::from_code(*c).ok_or_else(|| Error::new(format!("invalid row kind code {c} (expected 0-3)")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Batch { table, data, row_kinds })
    }
}

/// A batch as it crosses the plugin boundary: `(table, arrow IPC stream bytes, row-kind codes)`.
pub type WireBatch = (Option<String>, Vec<u8>, Vec<u8>);

/// The plugin's side of one `process` call, as the guest runtime makes it: the input's columns
/// are read in place from its bytes ([`decode_host_ipc`]), `process` runs, and its answer is
/// encoded — a batch handed back untouched as the input's own bytes (nothing is encoded again),
/// the input's columns as references to them ([`Batch::to_wire_against`]). Native code can run a
/// transform behind exactly this contract.
pub fn answer_call(
    input: WireBatch,
    process: impl FnOnce(Batch) -> Result<Vec<Batch>, Error>,
) -> Result<Vec<WireBatch>, Error> {
    let (table, bytes, codes) = input;
    let whole = Buffer::from_vec(bytes);
    let data = decode_host_ipc(whole.clone())?;
    let batch = Batch::from_decoded(table, data, codes)?;
    let before = Fingerprint::of(&batch);
    let out = process(batch)?;
    if let [only] = out.as_slice()
        && before.matches(only)
    {
        let (table, codes) = (only.table.clone(), only.row_kinds.iter().map(|k| *k as u8).collect());
        drop(out);
        drop(before);
        let bytes = whole.into_vec::<u8>().unwrap_or_else(|shared| shared.as_slice().to_vec());
        return Ok(vec![(table, bytes, codes)]);
    }
    out.iter().map(|b| b.to_wire_against(&before.columns)).collect()
}

/// What identifies an input batch: its schema and column arrays (by pointer), table and row kinds.
struct Fingerprint {
    schema: SchemaRef,
    columns: Vec<ArrayRef>,
    table: Option<String>,
    row_kinds: Vec<RowKind>,
}

impl Fingerprint {
    fn of(batch: &Batch) -> Self {
        Self {
            schema: batch.data.schema(),
            columns: batch.data.columns().to_vec(),
            table: batch.table.clone(),
            row_kinds: batch.row_kinds.clone(),
        }
    }

    /// Whether `batch` is the input, untouched.
    fn matches(&self, batch: &Batch) -> bool {
        std::sync::Arc::ptr_eq(&self.schema, &batch.data.schema())
            && self.columns.len() == batch.data.num_columns()
            && self.columns.iter().zip(batch.data.columns()).all(|(a, b)| std::sync::Arc::ptr_eq(a, b))
            && self.table == batch.table
            && self.row_kinds == batch.row_kinds
    }
}

impl Batch {
    /// The host's reading of one batch of a transform's answer to `input` (its bytes and its
    /// batch): the input itself when the answer is its bytes, else the answer decoded with every
    /// check and its references to input columns resolved ([`resolve_input_columns`]).
    pub fn from_answer(answer: WireBatch, input: Option<(&[u8], &RecordBatch)>) -> Result<Batch, Error> {
        let (table, bytes, codes) = answer;
        match input {
            Some((sent, data)) if sent == bytes.as_slice() => Batch::from_decoded(table, data.clone(), codes),
            _ => {
                let data = resolve_input_columns(decode_ipc(bytes)?, input.map(|(_, data)| data))?;
                Batch::from_decoded(table, data, codes)
            }
        }
    }
}

/// The field metadata key by which a column of a transform's output says that it is the input
/// batch's column at this index (`"0"`, `"1"`, …), unchanged. Such a column crosses as an Arrow
/// `Null` column, which has no buffers; the host puts its own input column in its place
/// ([`resolve_input_columns`]). A plugin that rewrites two columns of twenty sends two.
pub const INPUT_COLUMN_KEY: &str = "sluice:input-column";

/// Put the input's columns in place of the references to them in a transform's decoded output
/// (see [`INPUT_COLUMN_KEY`]). A reference to a column the input does not have, from a batch of
/// another length, or where there is no input, is an error.
pub fn resolve_input_columns(output: RecordBatch, input: Option<&RecordBatch>) -> Result<RecordBatch, Error> {
    let schema = output.schema();
    if !schema.fields().iter().any(|f| f.metadata().contains_key(INPUT_COLUMN_KEY)) {
        return Ok(output);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(output.columns()) {
        let Some(reference) = field.metadata().get(INPUT_COLUMN_KEY) else {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
            continue;
        };
        let bad =
            |why: &str| Error::new(format!("column `{}` refers to input column {reference:?}: {why}", field.name()));
        let input = input.ok_or_else(|| bad("there is no input batch here"))?;
        if field.data_type() != &DataType::Null {
            return Err(bad("a reference must be a Null column"));
        }
        if input.num_rows() != output.num_rows() {
            return Err(bad(&format!("the input has {} rows, this batch {}", input.num_rows(), output.num_rows())));
        }
        let index: usize = reference.parse().map_err(|_| bad("not a column index"))?;
        let source = input.schema();
        let Some(source_field) = source.fields().get(index) else {
            return Err(bad(&format!("the input has {} columns", source.fields().len())));
        };
        // The input's field under the output's name: its type, nullability and Doris type metadata.
        fields.push(source_field.as_ref().clone().with_name(field.name()));
        columns.push(input.column(index).clone());
    }
    let schema = std::sync::Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let options = RecordBatchOptions::new().with_row_count(Some(output.num_rows()));
    Ok(RecordBatch::try_new_with_options(schema, columns, &options)?)
}

/// One row of a batch.
#[derive(Clone, Copy)]
pub struct Row<'a> {
    batch: &'a Batch,
    index: usize,
}

impl<'a> Row<'a> {
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn kind(&self) -> RowKind {
        self.batch.row_kind(self.index)
    }

    /// The value of column `name` in this row.
    pub fn get(&self, name: &str) -> Result<Value<'a>, Error> {
        Ok(value_at(self.batch.column(name)?, self.index))
    }

    /// The values of every column, in schema order.
    pub fn values(&self) -> Vec<Value<'a>> {
        self.batch.data.columns().iter().map(|c| value_at(c, self.index)).collect()
    }
}

/// A single value, borrowed from its batch where it is text.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Unscaled value and scale: `Decimal(1234, 2)` is 12.34.
    Decimal(i128, i8),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 00:00:00 (no time zone).
    DateTime(i64),
    Str(&'a str),
    /// Owned text, for values a plugin computes.
    String(String),
}

impl Value<'_> {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

impl std::fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Bool(b) => write!(f, "{}", *b as u8),
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Decimal(v, s) => f.write_str(&format_decimal(*v, *s)),
            Value::Date(d) => f.write_str(&format_date(*d)),
            Value::DateTime(us) => f.write_str(&format_datetime_micros(*us)),
            Value::Str(s) => f.write_str(s),
            Value::String(s) => f.write_str(s),
        }
    }
}

fn value_at(col: &ArrayRef, i: usize) -> Value<'_> {
    if col.is_null(i) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Boolean => Value::Bool(col.as_boolean().value(i)),
        DataType::Int8 => Value::Int(col.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => Value::Int(col.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => Value::Int(col.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => Value::Int(col.as_primitive::<Int64Type>().value(i)),
        DataType::Float32 => Value::Float(col.as_primitive::<Float32Type>().value(i).into()),
        DataType::Float64 => Value::Float(col.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, s) => Value::Decimal(col.as_primitive::<Decimal128Type>().value(i), *s),
        DataType::Date32 => Value::Date(col.as_primitive::<Date32Type>().value(i)),
        DataType::Timestamp(TimeUnit::Second, _) => {
            Value::DateTime(col.as_primitive::<TimestampSecondType>().value(i) * 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            Value::DateTime(col.as_primitive::<TimestampMillisecondType>().value(i) * 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            Value::DateTime(col.as_primitive::<TimestampMicrosecondType>().value(i))
        }
        DataType::Utf8 => Value::Str(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Value::Str(col.as_string::<i64>().value(i)),
        _ => Value::Null,
    }
}

/// Builds a batch row by row against a fixed schema. Values are converted to each column's type;
/// a value that does not fit is an error naming the column.
pub struct BatchBuilder {
    schema: SchemaRef,
    columns: Vec<Box<dyn ArrayBuilder>>,
    row_kinds: Vec<RowKind>,
    any_non_insert: bool,
}

impl BatchBuilder {
    pub fn new(schema: SchemaRef) -> Result<Self, Error> {
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                builder_for(f.data_type())
                    .ok_or_else(|| Error::new(format!("column `{}`: unsupported type {}", f.name(), f.data_type())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { schema, columns, row_kinds: Vec::new(), any_non_insert: false })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn len(&self) -> usize {
        self.row_kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.row_kinds.is_empty()
    }

    /// Append one row; `values` are in schema order.
    pub fn push(&mut self, kind: RowKind, values: &[Value<'_>]) -> Result<(), Error> {
        if values.len() != self.columns.len() {
            return Err(Error::new(format!(
                "row has {} values, schema has {} columns",
                values.len(),
                self.columns.len()
            )));
        }
        for (i, v) in values.iter().enumerate() {
            let field = self.schema.field(i);
            if v.is_null() && !field.is_nullable() {
                return Err(Error::new(format!("column `{}` is NOT NULL but the value is null", field.name())));
            }
            append(self.columns[i].as_mut(), field.data_type(), v)
                .map_err(|e| Error::new(format!("column `{}`: {}", field.name(), e.message)))?;
        }
        self.any_non_insert |= kind != RowKind::Insert;
        self.row_kinds.push(kind);
        Ok(())
    }

    /// Finish into a batch for the default table and start over.
    pub fn finish(&mut self) -> Result<Batch, Error> {
        let columns: Vec<ArrayRef> = self.columns.iter_mut().map(|b| b.finish()).collect();
        let rows = self.row_kinds.len();
        let data = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        let kinds = std::mem::take(&mut self.row_kinds);
        let row_kinds = if self.any_non_insert { kinds } else { Vec::new() };
        self.any_non_insert = false;
        Ok(Batch { table: None, data, row_kinds })
    }
}

fn builder_for(t: &DataType) -> Option<Box<dyn ArrayBuilder>> {
    Some(match t {
        DataType::Boolean => Box::new(BooleanBuilder::new()),
        DataType::Int8 => Box::new(Int8Builder::new()),
        DataType::Int16 => Box::new(Int16Builder::new()),
        DataType::Int32 => Box::new(Int32Builder::new()),
        DataType::Int64 => Box::new(Int64Builder::new()),
        DataType::Float32 => Box::new(Float32Builder::new()),
        DataType::Float64 => Box::new(Float64Builder::new()),
        DataType::Decimal128(p, s) => Box::new(Decimal128Builder::new().with_precision_and_scale(*p, *s).ok()?),
        DataType::Date32 => Box::new(Date32Builder::new()),
        DataType::Timestamp(TimeUnit::Second, None) => Box::new(TimestampSecondBuilder::new()),
        DataType::Timestamp(TimeUnit::Millisecond, None) => Box::new(TimestampMillisecondBuilder::new()),
        DataType::Timestamp(TimeUnit::Microsecond, None) => Box::new(TimestampMicrosecondBuilder::new()),
        DataType::Utf8 => Box::new(StringBuilder::new()),
        _ => return None,
    })
}

macro_rules! downcast {
    ($b:expr, $t:ty) => {
        $b.as_any_mut().downcast_mut::<$t>().ok_or_else(|| Error::new("internal: builder type mismatch"))?
    };
}

fn append(b: &mut dyn ArrayBuilder, t: &DataType, v: &Value<'_>) -> Result<(), Error> {
    let mismatch = || Error::new(format!("cannot store {v:?} as {t}"));
    let int = |lo: i64, hi: i64| -> Result<Option<i64>, Error> {
        match v {
            Value::Null => Ok(None),
            Value::Int(x) if (lo..=hi).contains(x) => Ok(Some(*x)),
            Value::Int(x) => Err(Error::new(format!("{x} is out of range for {t}"))),
            Value::Bool(x) => Ok(Some(*x as i64)),
            Value::Str(_) | Value::String(_) => {
                let s = v.as_str().unwrap_or_default().trim();
                let x: i64 = s.parse().map_err(|_| Error::new(format!("`{s}` is not an integer")))?;
                if (lo..=hi).contains(&x) {
                    Ok(Some(x))
                } else {
                    Err(Error::new(format!("{x} is out of range for {t}")))
                }
            }
            _ => Err(mismatch()),
        }
    };
    let float = || -> Result<Option<f64>, Error> {
        match v {
            Value::Null => Ok(None),
            Value::Float(x) => Ok(Some(*x)),
            Value::Int(x) => Ok(Some(*x as f64)),
            Value::Decimal(x, s) => Ok(Some(*x as f64 / 10f64.powi(*s as i32))),
            Value::Str(_) | Value::String(_) => {
                let s = v.as_str().unwrap_or_default().trim();
                s.parse().map(Some).map_err(|_| Error::new(format!("`{s}` is not a number")))
            }
            _ => Err(mismatch()),
        }
    };
    match t {
        DataType::Boolean => {
            let x = match v {
                Value::Null => None,
                Value::Bool(x) => Some(*x),
                Value::Int(x) => Some(*x != 0),
                Value::Str(_) | Value::String(_) => {
                    match v.as_str().unwrap_or_default().to_ascii_lowercase().as_str() {
                        "true" | "1" => Some(true),
                        "false" | "0" => Some(false),
                        other => return Err(Error::new(format!("`{other}` is not a boolean"))),
                    }
                }
                _ => return Err(mismatch()),
            };
            downcast!(b, BooleanBuilder).append_option(x)
        }
        DataType::Int8 => {
            downcast!(b, Int8Builder).append_option(int(i8::MIN.into(), i8::MAX.into())?.map(|x| x as i8))
        }
        DataType::Int16 => {
            downcast!(b, Int16Builder).append_option(int(i16::MIN.into(), i16::MAX.into())?.map(|x| x as i16))
        }
        DataType::Int32 => {
            downcast!(b, Int32Builder).append_option(int(i32::MIN.into(), i32::MAX.into())?.map(|x| x as i32))
        }
        DataType::Int64 => downcast!(b, Int64Builder).append_option(int(i64::MIN, i64::MAX)?),
        DataType::Float32 => downcast!(b, Float32Builder).append_option(float()?.map(|x| x as f32)),
        DataType::Float64 => downcast!(b, Float64Builder).append_option(float()?),
        DataType::Decimal128(p, s) => {
            let x = match v {
                Value::Null => None,
                Value::Int(x) => Some(rescale(*x as i128, 0, *s)?),
                Value::Decimal(x, from) => Some(rescale(*x, *from, *s)?),
                Value::Float(x) => Some((x * 10f64.powi(*s as i32)).round() as i128),
                Value::Str(_) | Value::String(_) => Some(parse_decimal(v.as_str().unwrap_or_default(), *s)?),
                _ => return Err(mismatch()),
            };
            if let Some(x) = x
                && x.unsigned_abs() >= 10u128.pow(*p as u32)
            {
                return Err(Error::new(format!("{} does not fit DECIMAL({p},{s})", format_decimal(x, *s))));
            }
            downcast!(b, Decimal128Builder).append_option(x)
        }
        DataType::Date32 => {
            let x = match v {
                Value::Null => None,
                Value::Date(d) => Some(*d),
                Value::DateTime(us) => Some(us.div_euclid(86_400_000_000) as i32),
                Value::Int(d) => Some(*d as i32),
                Value::Str(_) | Value::String(_) => Some(parse_date(v.as_str().unwrap_or_default())?),
                _ => return Err(mismatch()),
            };
            downcast!(b, Date32Builder).append_option(x)
        }
        DataType::Timestamp(unit, None) => {
            let micros = match v {
                Value::Null => None,
                Value::DateTime(us) => Some(*us),
                Value::Date(d) => Some(*d as i64 * 86_400_000_000),
                Value::Int(ms) => Some(ms * 1_000), // epoch milliseconds, as Debezium and JSON producers send
                Value::Str(_) | Value::String(_) => Some(parse_datetime_micros(v.as_str().unwrap_or_default())?),
                _ => return Err(mismatch()),
            };
            match unit {
                TimeUnit::Second => {
                    downcast!(b, TimestampSecondBuilder).append_option(micros.map(|m| m.div_euclid(1_000_000)))
                }
                TimeUnit::Millisecond => {
                    downcast!(b, TimestampMillisecondBuilder).append_option(micros.map(|m| m.div_euclid(1_000)))
                }
                _ => downcast!(b, TimestampMicrosecondBuilder).append_option(micros),
            }
        }
        DataType::Utf8 => match v {
            Value::Null => downcast!(b, StringBuilder).append_null(),
            Value::Str(s) => downcast!(b, StringBuilder).append_value(s),
            Value::String(s) => downcast!(b, StringBuilder).append_value(s),
            other => downcast!(b, StringBuilder).append_value(other.to_string()),
        },
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn rescale(x: i128, from: i8, to: i8) -> Result<i128, Error> {
    let diff = to as i32 - from as i32;
    if diff >= 0 {
        x.checked_mul(10i128.pow(diff as u32)).ok_or_else(|| Error::new("decimal overflow"))
    } else {
        Ok(x / 10i128.pow((-diff) as u32))
    }
}

/// Parse decimal text (`-12.345`) into an unscaled integer at `scale`, rounding half away from zero.
pub fn parse_decimal(text: &str, scale: i8) -> Result<i128, Error> {
    let t = text.trim();
    let bad = || Error::new(format!("`{t}` is not a decimal number"));
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part.bytes().chain(frac_part.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let scale = scale.max(0) as usize;
    let mut value: i128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes().chain(std::iter::repeat(b'0')).take(scale)) {
        value = value.checked_mul(10).and_then(|v| v.checked_add((b - b'0') as i128)).ok_or_else(bad)?;
    }
    if frac_part.len() > scale && frac_part.as_bytes()[scale] >= b'5' {
        value += 1;
    }
    Ok(if neg { -value } else { value })
}

pub fn format_decimal(v: i128, scale: i8) -> String {
    if scale <= 0 {
        return v.to_string();
    }
    let s = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = if s.len() <= scale { format!("{}{s}", "0".repeat(scale + 1 - s.len())) } else { s };
    let (i, f) = padded.split_at(padded.len() - scale);
    format!("{}{i}.{f}", if v < 0 { "-" } else { "" })
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
}

/// Parse `yyyy-MM-dd` into days since the epoch.
pub fn parse_date(text: &str) -> Result<i32, Error> {
    let t = text.trim();
    let bad = || Error::new(format!("`{t}` is not a date (expected yyyy-MM-dd)"));
    let mut it = t.splitn(3, '-');
    let y: i64 = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let m: u32 = it.next().and_then(|s| s.parse().ok()).filter(|m| (1..=12).contains(m)).ok_or_else(bad)?;
    let d: u32 = it.next().and_then(|s| s.parse().ok()).filter(|d| (1..=31).contains(d)).ok_or_else(bad)?;
    Ok(days_from_civil(y, m, d) as i32)
}

/// Parse `yyyy-MM-dd[ HH:mm:ss[.ffffff]]` (or with `T`) into microseconds since the epoch.
pub fn parse_datetime_micros(text: &str) -> Result<i64, Error> {
    let t = text.trim().trim_end_matches('Z');
    let bad = || Error::new(format!("`{t}` is not a datetime (expected yyyy-MM-dd HH:mm:ss[.SSSSSS])"));
    let (date, time) = t.split_once([' ', 'T']).unwrap_or((t, "00:00:00"));
    let days = parse_date(date).map_err(|_| bad())? as i64;
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut parts = hms.split(':');
    let mut next = |max: i64| -> Result<i64, Error> {
        parts.next().and_then(|s| s.parse::<i64>().ok()).filter(|v| (0..=max).contains(v)).ok_or_else(bad)
    };
    let (h, mi, s) = (next(23)?, next(59)?, next(59)?);
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let micros: i64 = format!("{:0<6}", &frac[..frac.len().min(6)]).parse().map_err(|_| bad())?;
    Ok(((days * 24 + h) * 60 + mi) * 60_000_000 + s * 1_000_000 + micros)
}

pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

pub fn format_datetime_micros(us: i64) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    let (h, mi, s, f) = (rem / 3_600_000_000, rem / 60_000_000 % 60, rem / 1_000_000 % 60, rem % 1_000_000);
    let base = format!("{} {h:02}:{mi:02}:{s:02}", format_date(days as i32));
    if f == 0 { base } else { format!("{base}.{}", format!("{f:06}").trim_end_matches('0')) }
}

/// Encode a record batch as an Arrow IPC stream (schema message + one batch).
pub fn encode_ipc(batch: &RecordBatch) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Decode an Arrow IPC stream holding exactly one record batch, without copying the column data.
pub fn decode_ipc(bytes: Vec<u8>) -> Result<RecordBatch, Error> {
    decode_ipc_buffer(Buffer::from_vec(bytes))
}

/// [`decode_ipc`] from a shared buffer: the columns point into it.
pub fn decode_ipc_buffer(buffer: Buffer) -> Result<RecordBatch, Error> {
    decode_stream(arrow_ipc::reader::StreamDecoder::new(), buffer)
}

/// [`decode_ipc_buffer`] for the bytes of a plugin's input, which the host encoded from a batch it
/// holds: the layout is still read with every check, but the values (UTF-8, offsets) are not
/// validated again. A plugin trusts its host; the host validates everything a plugin returns.
pub fn decode_host_ipc(buffer: Buffer) -> Result<RecordBatch, Error> {
    // SAFETY: the host encodes these bytes with arrow's own writer from arrays it validated.
    let decoder = unsafe { arrow_ipc::reader::StreamDecoder::new().with_skip_validation(true) };
    decode_stream(decoder, buffer)
}

fn decode_stream(mut decoder: arrow_ipc::reader::StreamDecoder, mut buffer: Buffer) -> Result<RecordBatch, Error> {
    let mut batch = None;
    let mut schema = None;
    while !buffer.is_empty() {
        if let Some(b) = decoder.decode(&mut buffer)?
            && batch.replace(b).is_some()
        {
            return Err(Error::new("the Arrow IPC stream holds more than one record batch"));
        }
        if schema.is_none() {
            schema = decoder.schema();
        }
    }
    decoder.finish()?;
    match (batch, schema.or_else(|| decoder.schema())) {
        (Some(b), _) => Ok(b),
        (None, Some(s)) => Ok(RecordBatch::new_empty(s)),
        (None, None) => Err(Error::new("the Arrow IPC stream is empty (no schema message)")),
    }
}

/// Replace the schema of a batch by an equivalent one (same column types), e.g. to rename columns.
pub fn with_schema(batch: &RecordBatch, schema: SchemaRef) -> Result<RecordBatch, Error> {
    Ok(RecordBatch::try_new_with_options(
        schema,
        batch.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DorisType, arrow_schema, parse_columns};

    fn sample() -> Batch {
        let schema = arrow_schema(
            &parse_columns("id BIGINT, name VARCHAR(16), amount DECIMAL(10,2), d DATE, ts DATETIME(3)").unwrap(),
        );
        let mut b = BatchBuilder::new(schema).unwrap();
        b.push(
            RowKind::Insert,
            &[
                Value::Int(1),
                Value::Str("a"),
                Value::Str("12.345"),
                Value::Str("2024-02-29"),
                Value::Str("2024-02-29 12:34:56.789"),
            ],
        )
        .unwrap();
        b.push(RowKind::Delete, &[Value::Int(2), Value::Null, Value::Int(-3), Value::Null, Value::Null]).unwrap();
        b.finish().unwrap()
    }

    #[test]
    fn builder_converts_values_and_keeps_row_kinds() {
        let batch = sample();
        let rows: Vec<Vec<String>> = batch.rows().map(|r| r.values().iter().map(|v| v.to_string()).collect()).collect();
        assert_eq!(rows[0], ["1", "a", "12.35", "2024-02-29", "2024-02-29 12:34:56.789"]);
        assert_eq!(rows[1], ["2", "NULL", "-3.00", "NULL", "NULL"]);
        assert_eq!(batch.row_kinds, vec![RowKind::Insert, RowKind::Delete]);
    }

    #[test]
    fn map_str_writes_each_value_and_keeps_nulls() {
        use std::fmt::Write;
        let batch = sample();
        let mut seen = Vec::new();
        let out = batch
            .map_str("name", |name, out| {
                seen.push(name.to_string());
                out.push_str("<");
                write!(out, "{name}{}", name.len()).unwrap();
                out.push_str(">");
            })
            .unwrap();
        assert_eq!(out.iter().collect::<Vec<_>>(), [Some("<a1>"), None]);
        assert_eq!(seen, ["a"], "f is called for non-null values only");
        let err = batch.map_str("id", |_, _| {}).unwrap_err();
        assert_eq!(err.message, "column `id` is Int64, not StringArray");
    }

    #[test]
    fn append_bytes_copies_every_length_exactly() {
        let text: Vec<u8> = (0..70u8).map(|i| b'a' + i % 26).collect();
        for len in 0..text.len() {
            let mut out = b"<".to_vec();
            append_bytes(&mut out, &text[..len]);
            out.push(b'>');
            assert_eq!(&out[1..=len], &text[..len], "length {len}");
            assert_eq!(out.len(), len + 2, "length {len}");
        }
    }

    #[test]
    fn untouched_columns_cross_back_as_references_to_the_input() {
        let input = sample().with_table("db.t");
        let names = input.map_str("name", |n, out| out.push_str(n)).unwrap();
        let output = input.replace_column("name", std::sync::Arc::new(names)).unwrap();
        let (table, ipc, codes) = output.to_wire_against(input.data.columns()).unwrap();
        let (_, full, _) = output.to_wire().unwrap();
        assert!(ipc.len() < full.len(), "{} bytes against {}", ipc.len(), full.len());
        let sent = decode_ipc(ipc).unwrap();
        assert_eq!(sent.column(0).data_type(), &DataType::Null, "id is a reference");
        assert_eq!(sent.column(1).data_type(), &DataType::Utf8, "name crosses with its values");
        let back =
            Batch::from_decoded(table, resolve_input_columns(sent.clone(), Some(&input.data)).unwrap(), codes).unwrap();
        assert_eq!(back.data, output.data);
        assert_eq!(back.table.as_deref(), Some("db.t"));
        assert_eq!(back.row_kinds, output.row_kinds);
        assert!(std::sync::Arc::ptr_eq(back.data.column(0), input.data.column(0)), "the input's own array");

        // A referred column keeps its field's Doris type (metadata) and takes the output's name.
        let schema = arrow_schema(&parse_columns("doc JSON, n INT").unwrap());
        let columns: Vec<ArrayRef> = vec![
            std::sync::Arc::new(StringArray::from(vec!["{}"])),
            std::sync::Arc::new(arrow_array::Int32Array::from(vec![1])),
        ];
        let json_input = RecordBatch::try_new(schema, columns).unwrap();
        let renamed = std::sync::Arc::new(Schema::new(vec![
            json_input.schema().field(0).clone().with_name("body"),
            json_input.schema().field(1).clone(),
        ]));
        let out = Batch::new(RecordBatch::try_new(renamed.clone(), json_input.columns().to_vec()).unwrap());
        let (_, ipc, _) = out.to_wire_against(json_input.columns()).unwrap();
        let back = resolve_input_columns(decode_ipc(ipc).unwrap(), Some(&json_input)).unwrap();
        assert_eq!(back.schema(), renamed);
        assert_eq!(DorisType::from_arrow_field(back.schema().field(0)).unwrap().to_string(), "JSON");

        let err = resolve_input_columns(sent.clone(), None).unwrap_err();
        assert_eq!(err.message, "column `id` refers to input column \"0\": there is no input batch here");
        let one_column = input.data.project(&[1]).unwrap();
        let err = resolve_input_columns(sent, Some(&one_column)).unwrap_err();
        assert_eq!(err.message, "column `amount` refers to input column \"2\": the input has 1 columns");
        // A batch with every column new is sent whole.
        let (_, whole, _) = output.to_wire_against(&[]).unwrap();
        assert_eq!(whole, full);
    }

    #[test]
    fn wire_round_trip_keeps_everything() {
        let batch = sample().with_table("db.t");
        let (table, ipc, codes) = batch.to_wire().unwrap();
        let back = Batch::from_wire(table, ipc, codes).unwrap();
        assert_eq!(back.table.as_deref(), Some("db.t"));
        assert_eq!(back.data, batch.data);
        assert_eq!(back.row_kinds, batch.row_kinds);
    }

    #[test]
    fn malformed_wire_input_is_an_error_not_a_panic() {
        assert!(Batch::from_wire(None, vec![1, 2, 3], vec![]).is_err());
        let (_, ipc, _) = sample().to_wire().unwrap();
        let err = Batch::from_wire(None, ipc.clone(), vec![0]).unwrap_err();
        assert!(err.message.contains("2 rows but 1 row kinds"), "{err}");
        assert!(Batch::from_wire(None, ipc, vec![0, 9]).unwrap_err().message.contains("invalid row kind code 9"));
    }

    #[test]
    fn filter_keeps_rows_and_their_kinds() {
        let kept = sample().filter(|r| r.get("id").unwrap().as_i64() == Some(2)).unwrap();
        assert_eq!(kept.num_rows(), 1);
        assert_eq!(kept.row_kinds, vec![RowKind::Delete]);
    }

    #[test]
    fn values_out_of_range_name_the_column() {
        let schema = arrow_schema(&parse_columns("age TINYINT, d DECIMAL(3,1)").unwrap());
        let mut b = BatchBuilder::new(schema).unwrap();
        let err = b.push(RowKind::Insert, &[Value::Int(300), Value::Null]).unwrap_err();
        assert!(err.message.contains("column `age`") && err.message.contains("out of range"), "{err}");
        let err = b.push(RowKind::Insert, &[Value::Int(1), Value::Str("123.4")]).unwrap_err();
        assert!(err.message.contains("does not fit DECIMAL(3,1)"), "{err}");
    }

    #[test]
    fn dates_round_trip() {
        for d in ["1970-01-01", "2000-02-29", "1969-12-31", "9999-12-31"] {
            assert_eq!(format_date(parse_date(d).unwrap()), d);
        }
        assert_eq!(
            format_datetime_micros(parse_datetime_micros("1999-12-31T23:59:59.5").unwrap()),
            "1999-12-31 23:59:59.5"
        );
    }
}
