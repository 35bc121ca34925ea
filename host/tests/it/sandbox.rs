//! Hostile plugins fail with their named limit, and a neighbouring plugin keeps serving meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice::wasm::{PluginError, PluginLimits};
use sluice_guest::batch::Value;

use crate::common::{batch, lines, load};

fn hostile(mode: &str, limits: PluginLimits) -> Result<Vec<sluice::Batch>, PluginError> {
    let plugin = load("hostile", limits);
    let input = batch("id BIGINT", &[vec![Value::Int(1)]]);
    let mut inst = plugin.transform(&[("mode".into(), mode.into())], &input.schema()).unwrap();
    let result = inst.process(&input);
    if matches!(
        result,
        Err(PluginError::Timeout { .. }
            | PluginError::MemoryLimit { .. }
            | PluginError::Trap { .. }
            | PluginError::OutOfFuel { .. })
    ) {
        // A trapped instance refuses further work instead of running from a broken state.
        let again = inst.process(&input).unwrap_err();
        assert!(matches!(again, PluginError::Poisoned { .. }), "{again}");
    }
    result
}

fn limits() -> PluginLimits {
    PluginLimits { memory: 64 * 1024 * 1024, timeout: Duration::from_secs(1), fuel: None }
}

#[test]
fn an_infinite_loop_hits_the_wall_time_limit_while_another_plugin_keeps_working() {
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let neighbour = {
        let (stop, served) = (stop.clone(), served.clone());
        std::thread::spawn(move || {
            let plugin = load("student-trans", PluginLimits::default());
            let input = batch("name VARCHAR(256), age INT", &[vec![Value::Str("James"), Value::Int(18)]]);
            let mut inst = plugin.transform(&[], &input.schema()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(lines(&inst.process(&input).unwrap()), ["+I prefix_James 19"]);
                served.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // The neighbour is serving before the hostile call starts…
    let deadline = Instant::now() + Duration::from_secs(120);
    while served.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "the neighbouring plugin never served a batch");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The hostile plugin is compiled and instantiated first: only its looping call is counted.
    let plugin = load("hostile", limits());
    let input = batch("id BIGINT", &[vec![Value::Int(1)]]);
    let mut inst = plugin.transform(&[("mode".into(), "loop".into())], &input.schema()).unwrap();
    let before = served.load(Ordering::Relaxed);
    let err = inst.process(&input).unwrap_err();
    let during = served.load(Ordering::Relaxed) - before;
    assert!(matches!(inst.process(&input).unwrap_err(), PluginError::Poisoned { .. }));
    stop.store(true, Ordering::Relaxed);
    neighbour.join().expect("the neighbouring plugin never failed");
    assert!(matches!(err, PluginError::Timeout { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "plugin `hostile`: batch 1 (1 rows): exceeded its wall-time limit of 1s per call; the plugin may loop \
         forever — fix it or raise `limits.timeout`"
    );
    // …and kept serving while the loop ran for its second: a lock shared by all instances would
    // let it finish at most the one call it was in.
    assert!(during >= 2, "the neighbour served {during} batches while the hostile plugin looped");
}

#[test]
fn a_memory_hog_hits_the_memory_limit() {
    let err = hostile("memory", limits()).unwrap_err();
    assert!(matches!(err, PluginError::MemoryLimit { limit: 67_108_864, .. }), "{err}");
    assert!(err.to_string().contains("exceeded its memory limit of 67108864 bytes"), "{err}");
}

#[test]
fn a_trap_is_reported_with_the_plugins_last_words() {
    let err = hostile("trap", limits()).unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    let text = err.to_string();
    assert!(text.starts_with("plugin `hostile`: batch 1 (1 rows): trapped:"), "{text}");
    assert!(text.contains("hostile plugin panics on purpose"), "{text}");
}

#[test]
fn malformed_output_is_rejected_and_nothing_is_passed_on() {
    let err = hostile("malformed", limits()).unwrap_err();
    assert!(matches!(err, PluginError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains("returned malformed output: output batch 0:"), "{err}");
    let err = hostile("kinds", limits()).unwrap_err();
    assert!(err.to_string().contains("invalid row kind code 7"), "{err}");
}

#[test]
fn a_plugin_error_fails_the_batch_with_its_message() {
    let err = hostile("error", limits()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin `hostile`: batch 1 (1 rows): the plugin rejected it: row 0: refusing this batch"
    );
}

#[test]
fn fuel_bounds_the_work_of_one_call() {
    // The wall-time limit is far away: only the fuel can stop the loop.
    let metered = PluginLimits { fuel: Some(50_000_000), timeout: Duration::from_secs(300), ..limits() };
    let err = hostile("loop", metered).unwrap_err();
    assert!(matches!(err, PluginError::OutOfFuel { limit: 50_000_000, .. }), "{err}");
    // A well-behaved plugin under the same budget is fine.
    assert_eq!(hostile("ok", PluginLimits { fuel: Some(50_000_000), ..limits() }).unwrap()[0].num_rows(), 1);
}
