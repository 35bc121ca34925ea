//! A deliberately misbehaving transform, for testing the host's sandbox limits only.
//! `mode` picks the misbehaviour on `process`: `loop` (never returns), `memory` (allocates until
//! it is stopped), `trap` (panics, which aborts the instance), `malformed` (returns bytes that are
//! not Arrow IPC), `kinds` (returns a row-kind code that does not exist), `error` (returns a plugin
//! error), `reject` (rejects the first row whose `id` is a multiple of 10, as a plugin that finds
//! a bad row does), `ok` (behaves).

use sluice_guest::bindings::transform::exports::sluice::plugin::transformer::Guest;
use sluice_guest::bindings::transform::sluice::plugin::types as wit;
use sluice_guest::prelude::*;

thread_local! {
    static MODE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

struct Hostile;

impl Guest for Hostile {
    fn describe() -> wit::PluginInfo {
        sluice_guest::rt::describe(PluginInfo::new("hostile", "Misbehaves on purpose, for sandbox tests").config_key(
            "mode",
            Some("ok"),
            "loop, memory, trap, malformed, kinds, error, reject or ok",
        ))
    }

    fn init(config: wit::Config, input: wit::Schema) -> Result<wit::Schema, wit::PluginError> {
        let mode = Config::new(config).get_or("mode", "ok").to_string();
        MODE.with(|m| *m.borrow_mut() = mode);
        Ok(input)
    }

    fn process(input: wit::Batch) -> Result<Vec<wit::Batch>, wit::PluginError> {
        match MODE.with(|m| m.borrow().clone()).as_str() {
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => panic!("hostile plugin panics on purpose"),
            "malformed" => Ok(vec![wit::Batch { table: None, arrow_ipc: b"not arrow".to_vec(), row_kinds: vec![] }]),
            "kinds" => Ok(vec![wit::Batch { row_kinds: vec![7; 1], ..input }]),
            "error" => Err(wit::PluginError { message: "refusing this batch".into(), row: Some(0) }),
            "reject" => {
                let batch = Batch::from_wire(input.table.clone(), input.arrow_ipc.clone(), input.row_kinds.clone())
                    .map_err(|e| wit::PluginError { message: e.message, row: None })?;
                let tenth =
                    batch.rows().find(|r| r.get("id").ok().and_then(|v| v.as_i64()).is_some_and(|id| id % 10 == 0));
                match tenth {
                    Some(r) => Err(wit::PluginError {
                        message: "ids that are multiples of 10 are refused".into(),
                        row: Some(r.index() as u32),
                    }),
                    None => Ok(vec![input]),
                }
            }
            _ => Ok(vec![input]),
        }
    }
}

sluice_guest::bindings::transform::export_transform_world!(Hostile with_types_in sluice_guest::bindings::transform);
