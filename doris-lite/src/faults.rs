//! Debug points: named faults that tests switch on over HTTP (`/api/debug_point/…`, as Doris'
//! own debug points) or from Rust through [`crate::Handle::debug_points`].
//!
//! A point fires at most `execute` times (unlimited when absent) and each time with
//! `probability`; its parameters tune the fault (status, message, delay, …).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::engine::Engine;

/// The next stream load fails: params `status` (default `Fail`), `message`.
pub const STREAM_LOAD_FAIL: &str = "StreamLoad.fail";
/// A stream load commits but answers `Publish Timeout`; for 2PC, the commit call does.
pub const STREAM_LOAD_PUBLISH_TIMEOUT: &str = "StreamLoad.publish_timeout";
/// The connection is dropped after `after_bytes` of the body; nothing is loaded.
pub const STREAM_LOAD_CLOSE_MID_BODY: &str = "StreamLoad.close_mid_body";
/// The load answers after sleeping `ms`.
pub const STREAM_LOAD_STALL: &str = "StreamLoad.stall";
/// The load commits (or pre-commits), then the connection is dropped without a response.
pub const STREAM_LOAD_DROP_RESPONSE: &str = "StreamLoad.drop_response";
/// The load's body is read and thrown away: its rows are counted, not stored, and the
/// transaction (2PC too) commits an empty write (see [`crate::discard`]).
pub const STREAM_LOAD_DISCARD: &str = "StreamLoad.discard";
/// A 2PC commit fails with `status` / `msg`; the transaction stays PRECOMMITTED.
pub const TXN_COMMIT_FAIL: &str = "Txn.commit_fail";
/// A 2PC abort fails with `status` / `msg`; the transaction keeps its state.
pub const TXN_ABORT_FAIL: &str = "Txn.abort_fail";
/// Holds a transaction in flight on `table` (`db.tbl`) for `ms`.
pub const TXN_HOLD_IN_FLIGHT: &str = "Txn.hold_in_flight";
/// A Flight `DoGet` stream fails after `after_batches` batches.
pub const FLIGHT_DROP_STREAM: &str = "Flight.drop_stream";
/// A Flight `DoGet` stream starts after sleeping `ms` (a slow scan).
pub const FLIGHT_STALL: &str = "Flight.stall";
/// Closes every listener and connection and binds the same ports again after `ms`.
pub const SERVER_RESTART_LISTENERS: &str = "Server.restart_listeners";

/// Every debug point name.
pub const NAMES: [&str; 12] = [
    STREAM_LOAD_FAIL,
    STREAM_LOAD_PUBLISH_TIMEOUT,
    STREAM_LOAD_CLOSE_MID_BODY,
    STREAM_LOAD_STALL,
    STREAM_LOAD_DROP_RESPONSE,
    STREAM_LOAD_DISCARD,
    TXN_COMMIT_FAIL,
    TXN_ABORT_FAIL,
    TXN_HOLD_IN_FLIGHT,
    FLIGHT_DROP_STREAM,
    FLIGHT_STALL,
    SERVER_RESTART_LISTENERS,
];

/// How a debug point fires.
#[derive(Debug, Clone, PartialEq)]
pub struct DebugPoint {
    /// How many times it fires; `None` = until removed.
    pub execute: Option<u64>,
    /// Chance of firing each time it is reached (0..=1).
    pub probability: f64,
    /// Point-specific parameters.
    pub params: BTreeMap<String, String>,
}

impl Default for DebugPoint {
    fn default() -> Self {
        DebugPoint { execute: None, probability: 1.0, params: BTreeMap::new() }
    }
}

impl DebugPoint {
    /// A point that fires every time.
    pub fn always() -> DebugPoint {
        DebugPoint::default()
    }

    /// A point that fires `n` times.
    pub fn times(n: u64) -> DebugPoint {
        DebugPoint { execute: Some(n), ..DebugPoint::default() }
    }

    /// Adds a parameter.
    pub fn param(mut self, key: &str, value: impl ToString) -> DebugPoint {
        self.params.insert(key.to_string(), value.to_string());
        self
    }
}

/// The parameters of a point that fired.
#[derive(Debug, Clone, Default)]
pub struct Fired(BTreeMap<String, String>);

impl Fired {
    /// A string parameter or its default.
    pub fn str(&self, key: &str, default: &str) -> String {
        self.0.get(key).cloned().unwrap_or_else(|| default.to_string())
    }

    /// A numeric parameter or its default.
    pub fn u64(&self, key: &str, default: u64) -> u64 {
        self.0.get(key).and_then(|v| v.trim().parse().ok()).unwrap_or(default)
    }

    /// A duration given in ms.
    pub fn ms(&self, default: u64) -> Duration {
        Duration::from_millis(self.u64("ms", default))
    }
}

/// Debug point errors (HTTP code 1 with this message).
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum DebugPointError {
    /// Not one of [`NAMES`].
    #[error("unknown debug point [{0}]; valid names: {names}", names = NAMES.join(", "))]
    Unknown(String),
    /// A parameter is missing or malformed.
    #[error("debug point [{point}]: {message}")]
    BadParam {
        /// The point.
        point: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug)]
struct Armed {
    point: DebugPoint,
    fired: u64,
}

/// The debug points of one doris-lite instance (shared by every listener).
#[derive(Debug, Clone)]
pub struct DebugPoints {
    armed: Arc<Mutex<HashMap<&'static str, Armed>>>,
    engine: Arc<Engine>,
    restart: mpsc::UnboundedSender<Duration>,
    dice: Arc<AtomicU64>,
}

impl DebugPoints {
    /// Debug points acting on `engine`; `restart` receives listener restart requests.
    pub fn new(engine: Arc<Engine>, restart: mpsc::UnboundedSender<Duration>) -> DebugPoints {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x2545f4914f6cdd1d);
        DebugPoints { armed: Arc::default(), engine, restart, dice: Arc::new(AtomicU64::new(seed | 1)) }
    }

    fn name(name: &str) -> Result<&'static str, DebugPointError> {
        NAMES.iter().copied().find(|n| *n == name).ok_or_else(|| DebugPointError::Unknown(name.to_string()))
    }

    /// Arms `name`. `Txn.hold_in_flight` and `Server.restart_listeners` act at once instead.
    pub fn add(&self, name: &str, point: DebugPoint) -> Result<(), DebugPointError> {
        let name = Self::name(name)?;
        let bad = |message: String| DebugPointError::BadParam { point: name.to_string(), message };
        if !(0.0..=1.0).contains(&point.probability) {
            return Err(bad(format!("probability must be between 0 and 1, got {}", point.probability)));
        }
        let fired = Fired(point.params.clone());
        match name {
            TXN_HOLD_IN_FLIGHT => {
                let table = fired.str("table", "");
                let Some((db, tbl)) = table.split_once('.') else {
                    return Err(bad(format!("param table must be db.tbl, got [{table}]")));
                };
                let txn_id = self.engine.hold_in_flight(db, tbl).map_err(|e| bad(e.to_string()))?;
                let engine = self.engine.clone();
                let hold = fired.ms(1000);
                let reason = "debug point Txn.hold_in_flight released";
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => {
                        rt.spawn(async move {
                            tokio::time::sleep(hold).await;
                            engine.abort(txn_id, reason);
                        });
                    }
                    Err(_) => {
                        std::thread::spawn(move || {
                            std::thread::sleep(hold);
                            engine.abort(txn_id, reason);
                        });
                    }
                }
                Ok(())
            }
            SERVER_RESTART_LISTENERS => {
                let _ = self.restart.send(fired.ms(200));
                Ok(())
            }
            _ => {
                self.armed.lock().unwrap_or_else(|e| e.into_inner()).insert(name, Armed { point, fired: 0 });
                Ok(())
            }
        }
    }

    /// Disarms `name`.
    pub fn remove(&self, name: &str) -> Result<(), DebugPointError> {
        let name = Self::name(name)?;
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        Ok(())
    }

    /// Whether `name` is armed (a point added with `execute=N` disarms itself after N firings).
    pub fn is_armed(&self, name: &str) -> bool {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).contains_key(name)
    }

    /// Disarms every point.
    pub fn clear(&self) {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Whether `name` fires now; returns its parameters when it does.
    pub fn fire(&self, name: &'static str) -> Option<Fired> {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        let a = armed.get_mut(name)?;
        if a.point.probability < 1.0 && self.roll() >= a.point.probability {
            return None;
        }
        a.fired += 1;
        let params = Fired(a.point.params.clone());
        if a.point.execute.is_some_and(|n| a.fired >= n) {
            armed.remove(name);
        }
        Some(params)
    }

    /// A uniform number in [0, 1) (xorshift; fault dice need no cryptographic quality).
    fn roll(&self) -> f64 {
        let mut x = self.dice.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.dice.store(x, Ordering::Relaxed);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;

    fn points() -> DebugPoints {
        let (tx, _rx) = mpsc::unbounded_channel();
        DebugPoints::new(Arc::new(Engine::new(EngineConfig::default(), None).unwrap()), tx)
    }

    #[test]
    fn execute_counts_and_unknown_names() {
        let p = points();
        p.add(STREAM_LOAD_FAIL, DebugPoint::times(2).param("status", "Publish Timeout")).unwrap();
        assert_eq!(p.fire(STREAM_LOAD_FAIL).unwrap().str("status", "Fail"), "Publish Timeout");
        assert!(p.fire(STREAM_LOAD_FAIL).is_some());
        assert!(p.fire(STREAM_LOAD_FAIL).is_none());
        assert!(p.fire(STREAM_LOAD_STALL).is_none());
        let e = p.add("StreamLoad.nope", DebugPoint::always()).unwrap_err().to_string();
        assert!(e.starts_with("unknown debug point [StreamLoad.nope]; valid names: StreamLoad.fail, "), "{e}");
        p.add(STREAM_LOAD_STALL, DebugPoint { probability: 0.0, ..DebugPoint::always() }).unwrap();
        assert!((0..100).all(|_| p.fire(STREAM_LOAD_STALL).is_none()));
        p.add(STREAM_LOAD_STALL, DebugPoint { probability: 0.5, ..DebugPoint::always() }).unwrap();
        let n = (0..1000).filter(|_| p.fire(STREAM_LOAD_STALL).is_some()).count();
        assert!((350..650).contains(&n), "{n}");
        p.clear();
        assert!(p.fire(STREAM_LOAD_STALL).is_none());
    }
}
