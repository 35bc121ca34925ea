//! Every component Sluice has, once: its `type` in a pipeline file and how its entry is read.
//! A component owns its options, their checks and how it is built (in its own folder under
//! `sources/`, `transforms/` or `sinks/`, against the traits of [`super::component`]); adding one
//! is a line here.

use std::sync::Arc;

use super::component::{Kind, SinkConfig, SourceConfig, TransformConfig, sink, source, transform};
use super::model::Connection;
use super::options::{EntryResult, read};

/// The sources, by `type`.
pub const SOURCES: &[Kind<dyn SourceConfig>] = &[
    source::<crate::sources::datagen::DatagenSource>("datagen"),
    source::<crate::sources::file::FileSource>("file"),
    source::<crate::sources::doris::DorisSource>("doris"),
    source::<crate::sources::mysql::MysqlSource>("mysql"),
    source::<crate::sources::postgres::PostgresSource>("postgres"),
    source::<crate::sources::kafka::KafkaSource>("kafka"),
];

/// The transforms, by `type`.
pub const TRANSFORMS: &[Kind<dyn TransformConfig>] = &[
    transform::<crate::transforms::wasm::WasmTransform>("wasm"),
    transform::<crate::transforms::lookup::LookupTransform>("lookup"),
];

/// The sinks, by `type`.
pub const SINKS: &[Kind<dyn SinkConfig>] = &[
    sink::<crate::sinks::doris::DorisSink>("doris"),
    sink::<crate::sinks::blackhole::BlackholeSink>("blackhole"),
    sink::<crate::sinks::file::FileSink>("file"),
];

/// The connections (`[connections.<name>]`), by `type`: what each one's table is read into.
pub const CONNECTIONS: &[Kind<Connection>] = &[
    connection("doris", |t| Ok(Arc::new(Connection::Doris(read(t)?)))),
    connection("mysql", |t| Ok(Arc::new(Connection::Mysql(read(t)?)))),
    connection("postgres", |t| Ok(Arc::new(Connection::Postgres(read(t)?)))),
    connection("kafka", |t| Ok(Arc::new(Connection::Kafka(read(t)?)))),
];

const fn connection(name: &'static str, read: fn(toml::Table) -> EntryResult<Arc<Connection>>) -> Kind<Connection> {
    Kind { name, read }
}
