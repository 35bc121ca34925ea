//! What `sluice verify` asks of a pipeline's ends: a source that can read its tables again by key
//! range, and a sink that can read back what it wrote. Both answer with the rows as the pipeline
//! carries them (Arrow, in the source table's schema), so the comparison is the pipeline's own
//! conversions, not a second copy of them.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use super::TableId;

/// A table a source mirrors.
#[derive(Debug, Clone)]
pub struct MirroredTable {
    pub id: TableId,
    /// The columns as the source sends them (and as the sink created them).
    pub schema: SchemaRef,
    /// The primary key's columns (none: rows are compared as a multiset).
    pub key: Vec<String>,
    /// The column the table is compared in ranges of (its key, or its composite key's first
    /// column), when it is an integer or a column the source and Doris order alike.
    pub range_key: Option<String>,
}

/// The most ranges a table is compared in.
pub const MAX_RANGES: u64 = 1000;

/// Keys per range compared: one range of both sides is held in memory at a time.
pub const RANGE_KEYS: u64 = 50_000;

/// A range of a table's range key: of an integer key, closed (an open end reaches past every
/// value); of another key column (dates, decimals, UUIDs, text), `[low, high)` between values read
/// from the source, which each side compares in its own order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRange {
    Ints {
        low: Option<i64>,
        high: Option<i64>,
    },
    /// `numeric`: the values are numbers, written as they are (else as literals of each side).
    Values {
        low: Option<String>,
        high: Option<String>,
        numeric: bool,
    },
}

impl Default for KeyRange {
    fn default() -> Self {
        KeyRange::ALL
    }
}

impl KeyRange {
    /// Every row.
    pub const ALL: KeyRange = KeyRange::Ints { low: None, high: None };

    /// `[low, high]` of `width`-wide ranges, the first open below and the last open above (so
    /// rows outside the source's bounds are still looked for in the copy); wider where that would
    /// make more than [`MAX_RANGES`] (a sparse key spread over all of `i64`).
    pub fn split(low: i64, high: i64, width: u64) -> Vec<KeyRange> {
        let span = high as i128 - low as i128 + 1;
        let width = (width.max(1) as i128).max(span.div_euclid(MAX_RANGES as i128) + 1);
        let mut out = Vec::new();
        let mut start = low as i128;
        while start <= high as i128 {
            let end = (start + width - 1).min(high as i128);
            out.push((Some(start as i64), Some(end as i64)));
            start = end + 1;
        }
        if let Some(first) = out.first_mut() {
            first.0 = None;
        }
        if let Some(last) = out.last_mut() {
            last.1 = None;
        }
        if out.is_empty() {
            out.push((None, None));
        }
        out.into_iter().map(|(low, high)| KeyRange::Ints { low, high }).collect()
    }

    /// The ranges between `values` (in order): the first open below, the last open above.
    pub fn between(values: &[String], numeric: bool) -> Vec<KeyRange> {
        if values.is_empty() {
            return vec![KeyRange::ALL];
        }
        let edges: Vec<Option<&String>> =
            std::iter::once(None).chain(values.iter().map(Some)).chain(std::iter::once(None)).collect();
        edges.windows(2).map(|w| KeyRange::Values { low: w[0].cloned(), high: w[1].cloned(), numeric }).collect()
    }

    /// ` WHERE …` on `column` (already quoted), or nothing for every row; a value that is not a
    /// number is written by `literal`.
    pub fn filter(&self, column: &str, literal: impl Fn(&str) -> String) -> String {
        let (low, high) = match self {
            KeyRange::Ints { low, high } => {
                (low.map(|l| format!("{column} >= {l}")), high.map(|h| format!("{column} <= {h}")))
            }
            KeyRange::Values { low, high, numeric } => {
                let number = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'.');
                let value = |v: &String| if *numeric && number(v) { v.clone() } else { literal(v) };
                (
                    low.as_ref().map(|l| format!("{column} >= {}", value(l))),
                    high.as_ref().map(|h| format!("{column} < {}", value(h))),
                )
            }
        };
        match (low, high) {
            (None, None) => String::new(),
            (Some(c), None) | (None, Some(c)) => format!(" WHERE {c}"),
            (Some(l), Some(h)) => format!(" WHERE {l} AND {h}"),
        }
    }
}

impl std::fmt::Display for KeyRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyRange::Ints { low, high } => {
                let end = |v: &Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
                write!(f, "[{}..{}]", end(low), end(high))
            }
            KeyRange::Values { low, high, .. } => {
                let end = |v: &Option<String>| v.as_ref().map(|v| format!("{v:?}")).unwrap_or_default();
                write!(f, "[{}..{})", end(low), end(high))
            }
        }
    }
}

/// A range's rows as one number that either side can compute: each row as text — its values
/// joined by `|`, NULL as `N`, a text value as `<bytes>:<value>`, a number or date as written —
/// hashed, and the hashes summed (the rows counted beside). The source's server computes it
/// ([`MirrorSource::fingerprint`]), Sluice the same of Doris' rows: equal, the range agrees (but
/// for a chance of 1 in 2^32 per differing row); unequal, its rows are compared one by one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub hash: RowHash,
    /// Per column of the table's schema: whether its values are text (written with their length).
    pub text: Vec<bool>,
    pub rows: u64,
    pub sum: i128,
}

/// How a row's text is hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowHash {
    /// CRC-32 (zlib's, MySQL's `CRC32()`), unsigned.
    Crc32,
    /// PostgreSQL's `hashtext(row)` (Bob Jenkins' lookup3), signed.
    PgHashText,
}

/// A source whose tables can be read again, range by range.
#[async_trait]
pub trait MirrorSource: Send + Sync {
    /// The tables it reads.
    fn tables(&self) -> Vec<MirroredTable>;
    /// The ranges `table` is compared in: each small enough to hold in memory.
    async fn ranges(&self, table: &MirroredTable) -> anyhow::Result<Vec<KeyRange>>;
    /// The rows of `table` in `range`, as the pipeline would send them.
    async fn read(&self, table: &MirroredTable, range: &KeyRange) -> anyhow::Result<RecordBatch>;
    /// The columns of `table` its copy does not have by design, each with why (not drift: a
    /// comparison names them apart).
    async fn unmirrored(&self, _table: &MirroredTable) -> anyhow::Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// `range`'s [`Fingerprint`] as the source's server computes it, when it can write every
    /// column of `table` as Sluice writes Doris' values (none: the rows are compared).
    async fn fingerprint(&self, _table: &MirroredTable, _range: &KeyRange) -> anyhow::Result<Option<Fingerprint>> {
        Ok(None)
    }
}

/// A sink whose tables can be read back.
#[async_trait]
pub trait MirrorTarget: Send + Sync {
    /// Where the rows of source table `table` go (`db.table`).
    fn target(&self, table: &TableId) -> String;
    /// `columns` of `target` in `range` of `key` (none: every row), as stored.
    async fn read(
        &self,
        target: &str,
        columns: &[String],
        key: Option<&str>,
        range: &KeyRange,
    ) -> anyhow::Result<Vec<RecordBatch>>;
}

#[cfg(test)]
mod tests {
    use super::KeyRange;

    #[test]
    fn ranges_cover_every_key_and_are_open_at_the_ends() {
        let ends = |r: &KeyRange| match r {
            KeyRange::Ints { low, high } => (*low, *high),
            KeyRange::Values { .. } => panic!("{r}"),
        };
        let r = KeyRange::split(1, 10, 4);
        assert_eq!(r.iter().map(ToString::to_string).collect::<Vec<_>>(), ["[..4]", "[5..8]", "[9..]"]);
        assert_eq!(KeyRange::split(5, 5, 100), [KeyRange::ALL]);
        assert_eq!(KeyRange::split(i64::MAX - 1, i64::MAX, 1).len(), 2);
        // A key spread over all of i64 is cut into at most MAX_RANGES ranges, not 10^14.
        let sparse = KeyRange::split(i64::MIN, i64::MAX, 50_000);
        assert!(sparse.len() <= super::MAX_RANGES as usize && sparse.len() > 900, "{}", sparse.len());
        assert_eq!((ends(&sparse[0]).0, ends(&sparse[sparse.len() - 1]).1), (None, None));
        assert!(sparse.windows(2).all(|w| ends(&w[0]).1.unwrap() + 1 == ends(&w[1]).0.unwrap()));
        let quote = |v: &str| format!("'{v}'");
        assert_eq!(r[1].filter("`id`", quote), " WHERE `id` >= 5 AND `id` <= 8");
        assert_eq!(r[0].filter("k", quote), " WHERE k <= 4");
        assert_eq!(KeyRange::ALL.filter("k", quote), "");
    }

    #[test]
    fn ranges_between_values_are_half_open() {
        let quote = |v: &str| format!("'{v}'");
        let days = KeyRange::between(&["2024-01-01".into(), "2024-02-01".into()], false);
        assert_eq!(
            days.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["[..\"2024-01-01\")", "[\"2024-01-01\"..\"2024-02-01\")", "[\"2024-02-01\"..)"]
        );
        assert_eq!(days[0].filter("d", quote), " WHERE d < '2024-01-01'");
        assert_eq!(days[1].filter("d", quote), " WHERE d >= '2024-01-01' AND d < '2024-02-01'");
        let amounts = KeyRange::between(&["-12.50".into()], true);
        assert_eq!(amounts[1].filter("a", quote), " WHERE a >= -12.50");
        assert_eq!(KeyRange::between(&[], true), [KeyRange::ALL]);
    }
}
