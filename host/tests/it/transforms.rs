use sluice::wasm::{CacheOutcome, ComponentCache, PluginError, PluginLimits, PluginRuntime};
use sluice_guest::batch::Value;
use sluice_guest::types::{arrow_schema, parse_columns};

use crate::common::{batch, lines, load, plugin_dir, plugin_wasm, runtime};

#[test]
fn student_trans_prefixes_names_and_ages_students() {
    let plugin = load("student-trans", PluginLimits::default());
    let input = batch(
        "id INT, name VARCHAR(256), age INT",
        &[
            vec![Value::Int(1), Value::Str("James"), Value::Int(18)],
            vec![Value::Int(2), Value::Str("Emily"), Value::Int(28)],
            vec![Value::Int(3), Value::Null, Value::Null],
        ],
    );
    let mut inst = plugin.transform(&[], &input.schema()).unwrap();
    let out = inst.process(&input).unwrap();
    assert_eq!(lines(&out), ["+I 1 prefix_James 19", "+I 2 prefix_Emily 29", "+I 3 NULL NULL"]);
    // The instance is reused: a second batch works and the plugin's counter adds up.
    let out = inst.process(&input).unwrap();
    assert_eq!(out[0].num_rows(), 3);
    assert_eq!(inst.counters().get("rows"), Some(&6));
}

#[test]
fn student_trans_reads_its_prefix_from_config_and_rejects_unknown_keys() {
    let plugin = load("student-trans", PluginLimits::default());
    let input = batch("name VARCHAR(256), age INT", &[vec![Value::Str("James"), Value::Int(18)]]);
    let config = vec![("prefix".to_string(), "student_".to_string())];
    let out = plugin.transform(&config, &input.schema()).unwrap().process(&input).unwrap();
    assert_eq!(lines(&out), ["+I student_James 19"]);

    let err = plugin.transform(&[("prefx".into(), "x".into())], &input.schema()).err().expect("typo rejected");
    assert!(matches!(err, PluginError::Init { .. }), "{err}");
    assert!(err.to_string().contains("unknown config key `prefx`"), "{err}");
}

#[test]
fn student_trans_rejects_an_input_without_its_columns() {
    let plugin = load("student-trans", PluginLimits::default());
    let schema = arrow_schema(&parse_columns("id INT, age INT").unwrap());
    let err = plugin.transform(&[], &schema).err().expect("init fails");
    assert_eq!(err.to_string(), "plugin `student-trans`: init rejected the configuration: input needs a `name` column");
}

#[test]
fn a_plugin_crate_directory_is_built_and_loaded() {
    plugin_wasm("student-trans"); // make sure the build is fresh so this stays quick
    let plugin = runtime().load(&plugin_dir("student-trans"), PluginLimits::default()).unwrap();
    assert_eq!(plugin.name(), "student-trans");
    // Built into the plugins' own target dir, or into the one `SLUICE_PLUGIN_TARGET_DIR` names.
    let target = std::env::var_os("SLUICE_PLUGIN_TARGET_DIR")
        .map_or_else(|| plugin_dir("student-trans").join("../target"), std::path::PathBuf::from);
    let expected = target.join("wasm32-wasip2/release/student_trans.wasm");
    assert_eq!(plugin.file().canonicalize().unwrap(), expected.canonicalize().unwrap());
    let info = plugin.describe().unwrap();
    assert_eq!(info.config_keys[0].0, "prefix");
    assert_eq!(info.config_keys[0].1.as_deref(), Some("prefix_"));
}

#[test]
fn a_second_load_uses_the_compile_cache() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = plugin_wasm("passthrough");
    let first =
        PluginRuntime::new(ComponentCache::new(dir.path())).unwrap().load(&wasm, PluginLimits::default()).unwrap();
    assert_eq!(first.cache_outcome(), CacheOutcome::Compiled);
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "one compiled artifact is cached");
    // A new runtime (as after a restart) finds it.
    let second =
        PluginRuntime::new(ComponentCache::new(dir.path())).unwrap().load(&wasm, PluginLimits::default()).unwrap();
    assert_eq!(second.cache_outcome(), CacheOutcome::Hit);
    // Metering changes the compiled code, so it has its own cache entry.
    let metered = PluginLimits { fuel: Some(1_000_000_000), ..PluginLimits::default() };
    let third = PluginRuntime::new(ComponentCache::new(dir.path())).unwrap().load(&wasm, metered).unwrap();
    assert_eq!(third.cache_outcome(), CacheOutcome::Compiled);
    // A corrupt entry is recompiled, not trusted. (The loaded components map their files, so
    // they go first, and the garbage replaces each file as the cache itself writes: by rename.)
    drop((first, second, third));
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, b"garbage").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    let fourth =
        PluginRuntime::new(ComponentCache::new(dir.path())).unwrap().load(&wasm, PluginLimits::default()).unwrap();
    assert_eq!(fourth.cache_outcome(), CacheOutcome::Compiled);
    let input = batch("id BIGINT", &[vec![Value::Int(7)]]);
    assert_eq!(lines(&fourth.transform(&[], &input.schema()).unwrap().process(&input).unwrap()), ["+I 7"]);
}

#[test]
fn passthrough_keeps_every_doris_type() {
    let plugin = load("passthrough", PluginLimits::default());
    let columns = "b BOOLEAN, t TINYINT, s SMALLINT, i INT, l BIGINT, li LARGEINT, f FLOAT, d DOUBLE, \
                   dec DECIMAL(10,2), dt DATE, ts DATETIME(3), c CHAR(4), v VARCHAR(16), st STRING, j JSON, \
                   a ARRAY<INT>, m MAP<STRING,INT>, r STRUCT<x:INT>";
    let input = batch(
        columns,
        &[vec![
            Value::Bool(true),
            Value::Int(-8),
            Value::Int(300),
            Value::Int(70000),
            Value::Int(1 << 40),
            Value::Str("170141183460469231731687303715884105727"),
            Value::Float(1.5),
            Value::Float(2.25),
            Value::Str("12.34"),
            Value::Str("2024-02-29"),
            Value::Str("2024-02-29 01:02:03.456"),
            Value::Str("abcd"),
            Value::Str("varchar"),
            Value::Str("string"),
            Value::Str("{\"k\":1}"),
            Value::Str("[1,2]"),
            Value::Str("{\"a\":1}"),
            Value::Str("{\"x\":1}"),
        ]],
    );
    let mut inst = plugin.transform(&[], &input.schema()).unwrap();
    assert_eq!(inst.output_schema().as_ref(), input.schema().as_ref(), "types and doris_type metadata survive init");
    let out = inst.process(&input).unwrap();
    assert_eq!(out[0].data, input.data);
}
