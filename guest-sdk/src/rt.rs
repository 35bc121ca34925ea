//! The glue between the generated bindings and the `Transform` / `Decode` traits. Used by the
//! export macros; plugin authors never call it directly.

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::batch::{Batch, Buffer, decode_host_ipc};
use crate::bindings::transform::sluice::plugin::{host, types as wit};
use crate::types::{ColumnDef, DorisType, arrow_schema, columns_of};
use crate::{Config, Decode, Error, PluginInfo, Transform};

/// Per-instance plugin state, set by `init`.
pub type State<T> = LocalKey<RefCell<Option<T>>>;

/// Log at info level through the host.
pub fn info(message: &str) {
    host::log(host::Level::Info, message);
}

/// Log at debug level through the host.
pub fn debug(message: &str) {
    host::log(host::Level::Debug, message);
}

/// Log at warn level through the host.
pub fn warn(message: &str) {
    host::log(host::Level::Warn, message);
}

/// Log at error level through the host.
pub fn error(message: &str) {
    host::log(host::Level::Error, message);
}

/// Add to one of the plugin's metric counters.
pub fn counter_add(name: &str, delta: u64) {
    host::counter_add(name, delta);
}

fn to_wit_error(e: Error) -> wit::PluginError {
    wit::PluginError { message: e.message, row: e.row }
}

pub fn describe(info: PluginInfo) -> wit::PluginInfo {
    wit::PluginInfo {
        name: info.name,
        description: info.description,
        config_keys: info
            .config_keys
            .into_iter()
            .map(|(name, default_value, description)| wit::ConfigKey { name, default_value, description })
            .collect(),
        example_input: info.example_input,
    }
}

fn schema_from_wit(schema: wit::Schema) -> Result<arrow_schema::SchemaRef, Error> {
    let columns = schema
        .columns
        .into_iter()
        .map(|c| Ok(ColumnDef::new(c.name, DorisType::parse(&c.data_type)?, c.nullable)))
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(arrow_schema(&columns))
}

fn schema_to_wit(schema: &arrow_schema::Schema) -> Result<wit::Schema, Error> {
    Ok(wit::Schema {
        columns: columns_of(schema)?
            .into_iter()
            .map(|c| wit::Column { name: c.name, data_type: c.doris_type.to_string(), nullable: c.nullable })
            .collect(),
    })
}

/// Encode a plugin's answer; columns that are `input`'s own arrays cross as references to them.
fn batches_to_wit(batches: Vec<Batch>, input: &[arrow_array::ArrayRef]) -> Result<Vec<wit::Batch>, Error> {
    batches
        .into_iter()
        .map(|b| {
            let (table, arrow_ipc, row_kinds) = b.to_wire_against(input)?;
            Ok(wit::Batch { table, arrow_ipc, row_kinds })
        })
        .collect()
}

/// What identifies an input batch: its schema and column arrays (by pointer), table and row kinds.
struct Fingerprint {
    schema: arrow_schema::SchemaRef,
    columns: Vec<arrow_array::ArrayRef>,
    table: Option<String>,
    row_kinds: Vec<crate::batch::RowKind>,
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

fn not_initialised() -> wit::PluginError {
    to_wit_error(Error::new("the host called the plugin before init"))
}

pub fn transform_init<T: Transform>(
    state: &'static State<T>,
    config: Vec<(String, String)>,
    input: wit::Schema,
) -> Result<wit::Schema, wit::PluginError> {
    let run = || -> Result<wit::Schema, Error> {
        let (plugin, output) = T::init(&Config::new(config), schema_from_wit(input)?)?;
        state.with(|s| *s.borrow_mut() = Some(plugin));
        schema_to_wit(&output)
    };
    run().map_err(to_wit_error)
}

pub fn transform_process<T: Transform>(
    state: &'static State<T>,
    input: wit::Batch,
) -> Result<Vec<wit::Batch>, wit::PluginError> {
    state.with(|s| {
        let mut guard = s.borrow_mut();
        let plugin = guard.as_mut().ok_or_else(not_initialised)?;
        // The columns are read in place from the input bytes; when the plugin hands the batch
        // back untouched, those bytes are the answer and nothing is encoded again.
        let whole = Buffer::from_vec(input.arrow_ipc);
        let data = decode_host_ipc(whole.clone()).map_err(to_wit_error)?;
        let batch = Batch::from_decoded(input.table, data, input.row_kinds).map_err(to_wit_error)?;
        let before = Fingerprint::of(&batch);
        let out = plugin.process(batch).map_err(to_wit_error)?;
        if let [only] = out.as_slice()
            && before.matches(only)
        {
            let (table, row_kinds) = (only.table.clone(), only.row_kinds.iter().map(|k| *k as u8).collect());
            drop(out);
            drop(before);
            let arrow_ipc = whole.into_vec::<u8>().unwrap_or_else(|shared| shared.as_slice().to_vec());
            return Ok(vec![wit::Batch { table, arrow_ipc, row_kinds }]);
        }
        batches_to_wit(out, &before.columns).map_err(to_wit_error)
    })
}

pub fn decoder_init<T: Decode>(
    state: &'static State<T>,
    config: Vec<(String, String)>,
    declared: wit::Schema,
) -> Result<wit::Schema, wit::PluginError> {
    let run = || -> Result<wit::Schema, Error> {
        let (plugin, output) = T::init(&Config::new(config), schema_from_wit(declared)?)?;
        state.with(|s| *s.borrow_mut() = Some(plugin));
        schema_to_wit(&output)
    };
    run().map_err(to_wit_error)
}

pub fn decoder_decode<T: Decode>(
    state: &'static State<T>,
    input: wit::Messages,
) -> Result<Vec<wit::Batch>, wit::PluginError> {
    let offsets = &input.offsets;
    let mut messages = Vec::with_capacity(offsets.len().saturating_sub(1));
    for (i, w) in offsets.windows(2).enumerate() {
        let (start, end) = (w[0] as usize, w[1] as usize);
        if start > end || end > input.data.len() {
            return Err(to_wit_error(
                Error::new(format!("message offsets {start}..{end} are out of bounds")).at_row(i),
            ));
        }
        messages.push(&input.data[start..end]);
    }
    state.with(|s| {
        let mut guard = s.borrow_mut();
        let plugin = guard.as_mut().ok_or_else(not_initialised)?;
        plugin.decode(&messages).and_then(|out| batches_to_wit(out, &[])).map_err(to_wit_error)
    })
}

/// Export a [`Transform`](crate::Transform) implementation as the plugin's `transform` world.
#[macro_export]
macro_rules! export_transform {
    ($plugin:ty) => {
        const _: () = {
            ::std::thread_local! {
                static STATE: ::std::cell::RefCell<::std::option::Option<$plugin>> =
                    const { ::std::cell::RefCell::new(None) };
            }
            struct Exports;
            use $crate::bindings::transform::exports::sluice::plugin::transformer::Guest;
            use $crate::bindings::transform::sluice::plugin::types as wit;
            impl Guest for Exports {
                fn describe() -> wit::PluginInfo {
                    $crate::rt::describe(<$plugin as $crate::Transform>::info())
                }
                fn init(config: wit::Config, input: wit::Schema) -> Result<wit::Schema, wit::PluginError> {
                    $crate::rt::transform_init::<$plugin>(&STATE, config, input)
                }
                fn process(input: wit::Batch) -> Result<Vec<wit::Batch>, wit::PluginError> {
                    $crate::rt::transform_process::<$plugin>(&STATE, input)
                }
            }
    $crate::bindings::transform::export_transform_world!(Exports with_types_in $crate::bindings::transform);
        };
    };
}

/// Export a [`Decode`](crate::Decode) implementation as the plugin's `decoder` world.
#[macro_export]
macro_rules! export_decoder {
    ($plugin:ty) => {
        const _: () = {
            ::std::thread_local! {
                static STATE: ::std::cell::RefCell<::std::option::Option<$plugin>> =
                    const { ::std::cell::RefCell::new(None) };
            }
            struct Exports;
            use $crate::bindings::decoder::exports::sluice::plugin::event_decoder::Guest;
            use $crate::bindings::transform::sluice::plugin::types as wit;
            impl Guest for Exports {
                fn describe() -> wit::PluginInfo {
                    $crate::rt::describe(<$plugin as $crate::Decode>::info())
                }
                fn init(config: wit::Config, declared: wit::Schema) -> Result<wit::Schema, wit::PluginError> {
                    $crate::rt::decoder_init::<$plugin>(&STATE, config, declared)
                }
                fn decode(input: wit::Messages) -> Result<Vec<wit::Batch>, wit::PluginError> {
                    $crate::rt::decoder_decode::<$plugin>(&STATE, input)
                }
            }
    $crate::bindings::decoder::export_decoder_world!(Exports with_types_in $crate::bindings::decoder);
        };
    };
}
