//! Pipeline files: the TOML model, loading with errors that name the file, line and key, the
//! component registry, and building a runnable pipeline from a file.

mod build;
mod load;
mod model;
pub mod registry;
mod units;

pub use build::{
    BuildContext, Confinement, Placement, Replay, prepare, prepare_clustered, prepare_in, prepare_replay, state_dir_of,
};
pub use load::{ConfigError, has_jdbc_url, load_file, load_str, load_str_with, read, read_connection};
pub use model::*;
pub use registry::{Checked, Reach, SinkConfig, SourceConfig, TransformConfig, doris_reach};
pub use units::{ByteSize, Duration};
