//! Generated bindings for the `transform` and `decoder` worlds of `wit/sluice.wit`.

/// Bindings of the `transform` world.
pub mod transform {
    wit_bindgen::generate!({
        world: "transform",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_transform_world",
        default_bindings_module: "sluice_guest::bindings::transform",
    });
}

/// Bindings of the `decoder` world; shares the types and host imports of `transform`.
pub mod decoder {
    wit_bindgen::generate!({
        world: "decoder",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_decoder_world",
        default_bindings_module: "sluice_guest::bindings::decoder",
        with: {
            "sluice:plugin/types@0.1.0": super::transform::sluice::plugin::types,
            "sluice:plugin/host@0.1.0": super::transform::sluice::plugin::host,
        },
    });
}
