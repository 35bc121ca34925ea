//! The sources: one module per `type`, each owning its options, their checks and its split
//! enumerator and readers (see [`crate::runtime::source`]).

pub mod datagen;
pub mod doris;
pub mod file;
pub mod mysql;

use serde::{Deserialize, Serialize};

/// The position of a reader that counts the rows it delivered.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RowPosition {
    rows: u64,
}

impl crate::runtime::Position for RowPosition {}
