//! The cost of the plugin boundary: native Rust against WASM, for a passthrough and for the
//! quick-start transform, on batches of the reference shape
//! `id BIGINT, name VARCHAR, age INT, amount DECIMAL(10,2), ts DATETIME(3)`.
//!
//! Run with `cargo bench -p sluice --bench plugin_boundary`. Every figure comes from the same run.
//! A batch crosses the boundary as Arrow IPC both ways (the host encodes, the guest decodes, the
//! guest encodes its answer, the host decodes it), so the native baseline for the passthrough is
//! that same round trip in plain Rust: `wasm/native` of the passthrough is what WASM costs beyond
//! the encoding it needs, and the boundary cost is WASM passthrough minus native passthrough. The
//! Arc clone (what a passthrough costs without any boundary) is shown for scale, without a ratio.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Decimal128Array, Int32Array, Int64Array, StringArray, TimestampMillisecondArray};
use arrow::record_batch::RecordBatch;
use sluice::Batch;
use sluice::wasm::{ComponentCache, PluginLimits, PluginRuntime};
use sluice_guest::batch::{decode_ipc, encode_ipc};
use sluice_guest::types::{arrow_schema, parse_columns};

const SHAPE: &str = "id BIGINT, name VARCHAR(64), age INT, amount DECIMAL(10,2), ts DATETIME(3)";

fn reference_batch(rows: usize) -> Batch {
    let schema = arrow_schema(&parse_columns(SHAPE).expect("shape parses"));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..rows as i64)),
        Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("student-{i:06}")))),
        Arc::new(Int32Array::from_iter_values((0..rows).map(|i| (i % 80) as i32))),
        Arc::new(
            Decimal128Array::from_iter_values((0..rows).map(|i| (i as i128) * 101))
                .with_precision_and_scale(10, 2)
                .expect("valid decimal"),
        ),
        Arc::new(TimestampMillisecondArray::from_iter_values((0..rows).map(|i| 1_700_000_000_000 + i as i64))),
    ];
    Batch::new(RecordBatch::try_new(schema, columns).expect("batch builds"))
}

/// The quick-start transform in plain Rust: what `student-trans` does, without the boundary.
fn native_student_trans(batch: &Batch) -> Vec<Batch> {
    let names = batch.typed::<StringArray>("name").expect("name");
    let ages = batch.typed::<Int32Array>("age").expect("age");
    let names: StringArray = names.iter().map(|n| n.map(|n| format!("prefix_{n}"))).collect();
    let ages: Int32Array = ages.iter().map(|a| a.map(|a| a + 1)).collect();
    let out = batch
        .replace_column("name", Arc::new(names))
        .and_then(|b| b.replace_column("age", Arc::new(ages)))
        .expect("columns replaced");
    vec![out]
}

/// A batch through IPC there and back, as it crosses the plugin boundary, in plain Rust.
fn native_ipc_round_trip(batch: &Batch) -> RecordBatch {
    let there = decode_ipc(encode_ipc(&batch.data).expect("encodes")).expect("decodes");
    decode_ipc(encode_ipc(&there).expect("encodes")).expect("decodes")
}

/// Median time per call over several rounds of about `budget` each.
fn measure(mut f: impl FnMut() -> usize, budget: Duration) -> Duration {
    for _ in 0..3 {
        std::hint::black_box(f());
    }
    let mut samples = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        let mut calls = 0u32;
        while start.elapsed() < budget / 7 || calls < 3 {
            std::hint::black_box(f());
            calls += 1;
        }
        samples.push(start.elapsed() / calls);
    }
    samples.sort();
    samples[samples.len() / 2]
}

fn plugins_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins")
}

fn main() {
    let cache = ComponentCache::new(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"));
    let runtime = PluginRuntime::new(cache).expect("runtime");
    let load = |name: &str| runtime.load(&plugins_dir().join(name), PluginLimits::default()).expect("plugin loads");
    let passthrough = load("passthrough");
    let student = load("student-trans");

    println!("plugin boundary benchmark: rows of ({SHAPE}), median per call");
    println!("{:<26} {:>7} {:>12} {:>14} {:>12}", "case", "rows", "ns/row", "rows/s", "wasm/native");
    for rows in [1024usize, 8192] {
        let batch = reference_batch(rows);
        let schema = batch.schema();
        let mut wasm_pass = passthrough.transform(&[], &schema).expect("init");
        let mut wasm_student = student.transform(&[], &schema).expect("init");
        // Same output, both ways.
        assert_eq!(wasm_student.process(&batch).expect("runs")[0].data, native_student_trans(&batch)[0].data);

        let budget = Duration::from_millis(1500);
        assert_eq!(native_ipc_round_trip(&batch), batch.data);
        let arc_clone = measure(|| vec![batch.clone()].len(), budget);
        let native_pass = measure(|| native_ipc_round_trip(&batch).num_rows(), budget);
        let wasm_pass_t = measure(|| wasm_pass.process(&batch).expect("runs").len(), budget);
        let native_st = measure(|| native_student_trans(&batch).len(), budget);
        let wasm_st = measure(|| wasm_student.process(&batch).expect("runs").len(), budget);

        let per_row = |d: Duration| d.as_nanos() as f64 / rows as f64;
        let line = |name: &str, d: Duration, ratio: Option<f64>| {
            let ns = per_row(d);
            let ratio = ratio.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into());
            println!("{name:<26} {rows:>7} {ns:>12.2} {:>14.0} {ratio:>12}", 1e9 / ns);
        };
        line("native Arc clone", arc_clone, None);
        line("native passthrough (IPC)", native_pass, None);
        line("wasm passthrough", wasm_pass_t, Some(per_row(wasm_pass_t) / per_row(native_pass)));
        line("native student-trans", native_st, None);
        line("wasm student-trans", wasm_st, Some(per_row(wasm_st) / per_row(native_st)));
        println!(
            "{:<26} {rows:>7} {:>12.2}   (target at 8192 rows: <= 25 ns/row)",
            "boundary cost",
            per_row(wasm_pass_t) - per_row(native_pass)
        );
    }
}
