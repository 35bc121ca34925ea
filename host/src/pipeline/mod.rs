//! Pipeline files: the TOML model, loading with errors that name the file, line and key, the
//! component registry, and building a runnable pipeline from a file.

mod build;
pub mod component;
mod load;
mod model;
mod options;
pub mod registry;
mod units;

pub use build::{
    BuildContext, ClusterArgs, Confinement, Placement, Replay, cluster_settings, prepare, prepare_clustered,
    prepare_in, prepare_replay, state_dir_of,
};
pub use component::{Checked, LetterStore, Reach, SinkConfig, SourceConfig, TransformConfig, doris_reach};
pub use load::{ConfigError, load_file, load_str, load_str_with, read_connection};
pub use model::*;
pub use options::{EntryResult, read};
pub use units::{ByteSize, Duration};
