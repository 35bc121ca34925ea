//! The lookup cache: off, per key with a TTL and a size bound, or the whole table.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{CacheMode, LookupCache};

/// A key's values, each in its canonical text, in the order of the join keys.
pub(super) type Key = Box<[String]>;

/// The value columns of every dimension row with one key; empty when the key has none.
pub(super) type Matches = Arc<Vec<Vec<Option<String>>>>;

pub(super) enum KeyCache {
    Off,
    /// Keys with their rows and when they expire (`ttl` after they were fetched, on the
    /// [`Clock`]).
    Partial {
        cache: moka::sync::Cache<Key, (Matches, Instant)>,
        missing: bool,
        ttl: Duration,
        max_rows: u64,
    },
    /// The whole table, read again in the background once it is older than `ttl`.
    Full {
        table: FullTable,
        ttl: Duration,
    },
}

/// The cache's time: the machine's monotonic clock, plus however far [`Clock::advance`] moved it
/// on. Entries expire by this clock, so a test can expire them without waiting.
#[derive(Default)]
pub struct Clock {
    ahead_nanos: AtomicU64,
}

impl Clock {
    pub fn now(&self) -> Instant {
        Instant::now() + Duration::from_nanos(self.ahead_nanos.load(Ordering::Relaxed))
    }

    /// Move this cache's time on by `by`: what would expire by then expires now.
    pub fn advance(&self, by: Duration) {
        self.ahead_nanos.fetch_add(by.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }
}

/// Every row of the dimension, grouped by key.
pub(super) type Rows = Arc<HashMap<Key, Matches>>;

/// The snapshot of `cache.mode = "full"`: served to every batch while a reload runs.
#[derive(Default)]
pub(super) struct FullTable {
    /// The rows being served and when to read the table again; `None` before the first load.
    pub snapshot: std::sync::RwLock<Option<(Rows, Instant)>>,
    /// Held during the first load, so the batches that arrive meanwhile wait for it.
    pub first: tokio::sync::Mutex<()>,
    /// A reload is running (there is at most one).
    pub reloading: AtomicBool,
}

impl FullTable {
    /// The rows served at `now` and whether they are due to be read again.
    pub fn current(&self, now: Instant) -> Option<(Rows, bool)> {
        let snapshot = self.snapshot.read().expect("snapshot lock");
        snapshot.as_ref().map(|(rows, next)| (rows.clone(), now >= *next))
    }

    /// Serve `rows` from now on, until `next`.
    pub fn replace(&self, rows: Rows, next: Instant) {
        *self.snapshot.write().expect("snapshot lock") = Some((rows, next));
    }

    /// Keep the rows but read again no earlier than `next` (after a failed reload).
    pub fn postpone(&self, next: Instant) {
        if let Some((_, at)) = self.snapshot.write().expect("snapshot lock").as_mut() {
            *at = next;
        }
    }
}

impl KeyCache {
    pub fn new(cfg: &LookupCache) -> KeyCache {
        let ttl = cfg.ttl.0;
        match cfg.mode {
            CacheMode::Full => KeyCache::Full { table: Default::default(), ttl },
            CacheMode::Partial if cfg.max_rows <= 0 => KeyCache::Off,
            CacheMode::Partial => {
                let max_rows = cfg.max_rows as u64;
                let cache = moka::sync::Cache::builder().max_capacity(max_rows).build();
                KeyCache::Partial { cache, missing: cfg.cache_missing_key, ttl, max_rows }
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            KeyCache::Off => "no cache".into(),
            KeyCache::Partial { missing, ttl, max_rows, .. } => format!(
                "cache {max_rows} keys for {}{}",
                humantime::format_duration(*ttl),
                if *missing { "" } else { ", missing keys not cached" }
            ),
            KeyCache::Full { ttl, .. } => {
                format!("whole table cached, read again every {}", humantime::format_duration(*ttl))
            }
        }
    }

    /// The rows of `key` unless they expired by `now`.
    pub fn get(&self, key: &Key, now: Instant) -> Option<Matches> {
        let KeyCache::Partial { cache, .. } = self else { return None };
        match cache.get(key) {
            Some((matches, expires)) if now < expires => Some(matches),
            Some(_) => {
                cache.invalidate(key);
                None
            }
            None => None,
        }
    }

    /// Keep the rows of `key`, fetched at `now`.
    pub fn put(&self, key: Key, matches: Matches, now: Instant) {
        if let KeyCache::Partial { cache, missing, ttl, .. } = self
            && (*missing || !matches.is_empty())
        {
            cache.insert(key, (matches, now + *ttl));
        }
    }
}
