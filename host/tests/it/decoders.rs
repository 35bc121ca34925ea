use sluice::wasm::{PluginError, PluginLimits};
use sluice_guest::types::{arrow_schema, parse_columns};

use crate::common::{lines, load};

fn schema(columns: &str) -> arrow::datatypes::SchemaRef {
    arrow_schema(&parse_columns(columns).unwrap())
}

/// The seed's op_type decoder (`plugin`, named `name` in its errors): deletes and upserts, the
/// bad message named, a value that does not fit its column refused. The Rust and the Python
/// builds must pass the same checks.
pub fn decodes_op_type_messages_as_the_seed_says(plugin: &sluice::wasm::Plugin, name: &str) {
    let mut dec = plugin.decoder(&[], &schema("id BIGINT, name VARCHAR(64), score DECIMAL(5,1)")).unwrap();
    let out = dec
        .decode(&[
            r#"{"op_type":"delete","data":{"id":1,"name":"zhangsan"}}"#,
            r#"{"op_type":"insert","data":{"id":2,"name":"lisi","score":9.5,"extra":true}}"#,
            r#"{"op_type":"update","data":{"id":3,"name":"wangwu","score":"10.25"}}"#,
        ])
        .unwrap();
    assert_eq!(lines(&out), ["-D 1 zhangsan NULL", "+I 2 lisi 9.5", "+I 3 wangwu 10.3"]);
    let mut dec = plugin.decoder(&[], &schema("id BIGINT, name VARCHAR(64)")).unwrap();
    let err = dec.decode(&[r#"{"op_type":"insert","data":{"id":1}}"#, "{not json"]).unwrap_err();
    assert!(matches!(err, PluginError::Rejected { .. }), "{err}");
    let text = err.to_string();
    let prefix = format!("plugin `{name}`: batch 1 (2 messages): the plugin rejected it: row 1: invalid JSON");
    assert!(text.starts_with(&prefix), "{text}");
    // A value that does not fit its column is an error too, not silent loss.
    let err = dec.decode(&[r#"{"op_type":"insert","data":{"id":"abc"}}"#]).unwrap_err().to_string();
    assert!(err.contains("row 0: column `id`: `abc` is not an integer"), "{err}");
}

#[test]
fn op_type_messages_become_upserts_and_deletes_and_bad_ones_are_named() {
    decodes_op_type_messages_as_the_seed_says(
        &load("op-type-delete-sign", PluginLimits::default()),
        "op-type-delete-sign",
    );
}

#[test]
fn debezium_events_become_row_changes() {
    let plugin = load("debezium-json", PluginLimits::default());
    let config = vec![("key".to_string(), "id".to_string())];
    let mut dec = plugin.decoder(&config, &schema("id BIGINT, name VARCHAR(64)")).unwrap();
    let out = dec
        .decode(&[
            r#"{"before":null,"after":{"id":1,"name":"a"},"op":"r"}"#,
            r#"{"before":null,"after":{"id":2,"name":"b"},"op":"c"}"#,
            r#"{"before":{"id":2,"name":"b"},"after":{"id":2,"name":"bb"},"op":"u"}"#,
            r#"{"before":{"id":2,"name":"bb"},"after":{"id":3,"name":"bb"},"op":"u"}"#,
            r#"{"before":{"id":1,"name":"a"},"after":null,"op":"d"}"#,
            "",
            r#"{"schema":{},"payload":{"before":null,"after":{"id":4,"name":"env"},"op":"c"}}"#,
        ])
        .unwrap();
    assert_eq!(lines(&out), ["+I 1 a", "+I 2 b", "-U 2 b", "+U 2 bb", "-D 2 bb", "+I 3 bb", "-D 1 a", "+I 4 env"]);
}

#[test]
fn debezium_decoder_checks_its_config_and_events() {
    let plugin = load("debezium-json", PluginLimits::default());
    let err = plugin.decoder(&[("key".into(), "nope".into())], &schema("id BIGINT")).err().unwrap().to_string();
    assert!(err.contains("config `key`: column `nope` is not in the declared schema"), "{err}");
    let mut dec = plugin.decoder(&[], &schema("id BIGINT")).unwrap();
    let err = dec.decode(&[r#"{"after":{"id":1},"op":"x"}"#]).unwrap_err().to_string();
    assert!(err.contains("row 0: unknown op `x`"), "{err}");
    let err = dec.decode(&[r#"{"before":null,"op":"d"}"#]).unwrap_err().to_string();
    assert!(err.contains("op `d` needs a `before` image"), "{err}");
}

#[test]
fn a_transform_is_not_accepted_where_a_decoder_is_needed() {
    let plugin = load("student-trans", PluginLimits::default());
    let err = plugin.decoder(&[], &schema("id BIGINT")).err().unwrap().to_string();
    assert!(err.ends_with("it is a transform plugin, but a decoder plugin is needed here"), "{err}");
}
