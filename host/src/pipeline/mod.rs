//! Pipeline files: the TOML model, loading with errors that name the file, line and key, and the
//! checks that need no Doris connection.

mod load;
mod model;
mod units;

pub use load::{ConfigError, load_file, load_str};
pub use model::*;
pub use units::{ByteSize, Duration};
