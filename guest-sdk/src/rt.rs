//! The glue between the generated bindings and the `Transform` / `Decode` traits. Used by the
//! export macros; plugin authors never call it directly.

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::batch::{Batch, answer_call};
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
        let input = (input.table, input.arrow_ipc, input.row_kinds);
        let answer = answer_call(input, |batch| plugin.process(batch)).map_err(to_wit_error)?;
        Ok(answer.into_iter().map(|(table, arrow_ipc, row_kinds)| wit::Batch { table, arrow_ipc, row_kinds }).collect())
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
