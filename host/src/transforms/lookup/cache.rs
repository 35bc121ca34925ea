//! The lookup cache: off, per key with a TTL and a size bound, or the whole table.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{CacheMode, LookupCache};

/// A key's values, each in its canonical text, in the order of the join keys.
pub(super) type Key = Box<[String]>;

/// The value columns of every dimension row with one key; empty when the key has none.
pub(super) type Matches = Arc<Vec<Vec<Option<String>>>>;

pub(super) enum KeyCache {
    Off,
    /// Keys with their rows, expiring `ttl` after they were fetched.
    Partial {
        cache: moka::sync::Cache<Key, Matches>,
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
    /// The rows served now and whether they are due to be read again.
    pub fn current(&self) -> Option<(Rows, bool)> {
        let snapshot = self.snapshot.read().expect("snapshot lock");
        snapshot.as_ref().map(|(rows, next)| (rows.clone(), Instant::now() >= *next))
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
                let cache = moka::sync::Cache::builder().max_capacity(max_rows).time_to_live(ttl).build();
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

    pub fn get(&self, key: &Key) -> Option<Matches> {
        match self {
            KeyCache::Partial { cache, .. } => cache.get(key),
            _ => None,
        }
    }

    pub fn put(&self, key: Key, matches: Matches) {
        if let KeyCache::Partial { cache, missing, .. } = self
            && (*missing || !matches.is_empty())
        {
            cache.insert(key, matches);
        }
    }
}
