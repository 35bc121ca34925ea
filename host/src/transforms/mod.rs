//! The transforms: WebAssembly plugins ([`wasm`]), lookup joins against Doris ([`lookup`]), and the
//! built-in normaliser of change events ([`normalize`]).

pub mod lookup;
pub mod normalize;
pub mod wasm;
