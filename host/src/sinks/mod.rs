//! The sinks: one module per `type`, each owning its options, their checks, its writer and its
//! committer (see [`crate::runtime::sink`]).

pub mod blackhole;
pub mod doris;
pub mod file;
