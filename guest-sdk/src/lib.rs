//! Write Sluice transforms and CDC decoders as WebAssembly components.
//!
//! A transform is one small trait impl and one macro call:
//!
//! ```ignore
//! use sluice_guest::prelude::*;
//!
//! struct Upper;
//!
//! impl Transform for Upper {
//!     fn init(_config: &Config, input: SchemaRef) -> Result<(Self, SchemaRef)> {
//!         Ok((Upper, input))
//!     }
//!     fn process(&mut self, batch: Batch) -> Result<Vec<Batch>> {
//!         let names = batch.typed::<StringArray>("name")?;
//!         let upper: StringArray = names.iter().map(|n| n.map(str::to_uppercase)).collect();
//!         Ok(vec![batch.replace_column("name", Arc::new(upper))?])
//!     }
//! }
//!
//! sluice_guest::export_transform!(Upper);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` and point a pipeline's
//! `[[transform]]` at the crate directory or the `.wasm` file.

pub mod batch;
pub mod config;
#[cfg(feature = "json")]
pub mod json;
pub mod types;

#[cfg(feature = "bindings")]
pub mod bindings;
#[cfg(feature = "bindings")]
#[doc(hidden)]
pub mod rt;

use std::fmt;

pub use config::Config;

/// An error a plugin reports; the host fails the batch and names the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub message: String,
    /// The input row or message at fault, when known.
    pub row: Option<u32>,
}

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), row: None }
    }

    /// Attach the index of the row or message at fault.
    pub fn at_row(mut self, row: usize) -> Self {
        self.row = Some(row as u32);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.row {
            Some(row) => write!(f, "row {row}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::new(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a plugin says about itself (shown by `sluice plugin inspect`).
#[derive(Debug, Clone, Default)]
pub struct PluginInfo {
    pub name: String,
    pub description: String,
    /// `(name, default, description)` of every configuration key.
    pub config_keys: Vec<(String, Option<String>, String)>,
    /// Input columns the plugin expects, in Doris syntax.
    pub example_input: Option<String>,
}

impl PluginInfo {
    pub fn new(name: &str, description: &str) -> Self {
        Self { name: name.into(), description: description.into(), ..Self::default() }
    }

    pub fn config_key(mut self, name: &str, default: Option<&str>, description: &str) -> Self {
        self.config_keys.push((name.into(), default.map(Into::into), description.into()));
        self
    }

    pub fn example_input(mut self, columns: &str) -> Self {
        self.example_input = Some(columns.into());
        self
    }
}

/// A transform plugin: batches in, batches out.
pub trait Transform: Sized + 'static {
    /// Describe the plugin; the default names it after the crate-less type name.
    fn info() -> PluginInfo {
        PluginInfo::new(std::any::type_name::<Self>().rsplit("::").next().unwrap_or("transform"), "")
    }

    /// Read the configuration, check the input schema and declare the output schema.
    fn init(config: &Config, input: arrow_schema::SchemaRef) -> Result<(Self, arrow_schema::SchemaRef)>;

    /// Transform one batch into zero or more batches (one per target table).
    fn process(&mut self, batch: batch::Batch) -> Result<Vec<batch::Batch>>;
}

/// A CDC-event decoder plugin: raw messages in, batches with row kinds out.
pub trait Decode: Sized + 'static {
    fn info() -> PluginInfo {
        PluginInfo::new(std::any::type_name::<Self>().rsplit("::").next().unwrap_or("decoder"), "")
    }

    /// Read the configuration and the schema declared in the pipeline; return the output schema.
    fn init(config: &Config, declared: arrow_schema::SchemaRef) -> Result<(Self, arrow_schema::SchemaRef)>;

    /// Decode messages, in order, into batches.
    fn decode(&mut self, messages: &[&[u8]]) -> Result<Vec<batch::Batch>>;
}

impl batch::Batch {
    /// A copy of this batch with column `name` replaced by `array` (same length; the type may change).
    pub fn replace_column(&self, name: &str, array: arrow_array::ArrayRef) -> Result<batch::Batch> {
        let schema = self.data.schema();
        let index = schema.index_of(name).map_err(|_| Error::new(format!("input has no column `{name}`")))?;
        let mut fields: Vec<arrow_schema::FieldRef> = schema.fields().iter().cloned().collect();
        let old = &fields[index];
        if old.data_type() != array.data_type() {
            fields[index] =
                std::sync::Arc::new(arrow_schema::Field::new(name, array.data_type().clone(), old.is_nullable()));
        }
        let mut columns = self.data.columns().to_vec();
        columns[index] = array;
        let data = arrow_array::RecordBatch::try_new(
            std::sync::Arc::new(arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone())),
            columns,
        )?;
        Ok(batch::Batch { table: self.table.clone(), data, row_kinds: self.row_kinds.clone() })
    }
}

/// Everything a plugin author usually needs.
pub mod prelude {
    pub use crate::batch::{Batch, BatchBuilder, Row, RowKind, StrOut, Value};
    pub use crate::types::{ColumnDef, DorisType, arrow_schema, parse_columns};
    pub use crate::{Config, Decode, Error, PluginInfo, Result, Transform};
    pub use arrow_array::{self, Array, ArrayRef, RecordBatch};
    pub use arrow_array::{
        BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int8Array, Int16Array, Int32Array,
        Int64Array, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampSecondArray,
    };
    pub use arrow_schema::{self, DataType, Field, Schema, SchemaRef};
    pub use std::sync::Arc;

    #[cfg(feature = "bindings")]
    pub use crate::rt::{counter_add, debug, error, info, warn};
}
