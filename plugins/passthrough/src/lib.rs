//! Returns every batch unchanged — the answer is the input's own bytes, nothing is encoded again:
//! the plugin-boundary benchmark's measure of the boundary itself.

use sluice_guest::prelude::*;

struct Passthrough;

impl Transform for Passthrough {
    fn info() -> PluginInfo {
        PluginInfo::new("passthrough", "Returns every batch unchanged")
    }

    fn init(_config: &Config, input: SchemaRef) -> Result<(Self, SchemaRef)> {
        Ok((Passthrough, input))
    }

    fn process(&mut self, batch: Batch) -> Result<Vec<Batch>> {
        Ok(vec![batch])
    }
}

sluice_guest::export_transform!(Passthrough);
