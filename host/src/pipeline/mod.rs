//! Pipeline files: the TOML model, loading with errors that name the file, line and key, the
//! component registry, and building a runnable pipeline from a file.

mod build;
mod load;
mod model;
pub mod registry;
mod units;

pub use build::{BuildContext, prepare, state_dir_of};
pub use load::{ConfigError, has_jdbc_url, load_file, load_str, read};
pub use model::*;
pub use registry::{Checked, SinkConfig, SourceConfig, TransformConfig};
pub use units::{ByteSize, Duration};
