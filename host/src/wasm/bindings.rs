//! Host-side bindings of the WIT worlds.

wasmtime::component::bindgen!({
    world: "transform",
    path: "../wit",
});

pub mod decoder {
    wasmtime::component::bindgen!({
        world: "decoder",
        path: "../wit",
        with: {
            "sluice:plugin/types": super::sluice::plugin::types,
            "sluice:plugin/host": super::sluice::plugin::host,
        },
    });
}
