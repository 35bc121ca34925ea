//! Snapshot chunks of a table with a single integer key, and a reader's cursor through its
//! share of them, shared by the database sources.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// At most this many chunks per table: a table whose keys spread wider gets wider chunks.
pub(crate) const MAX_CHUNKS: u64 = 16_384;

/// A piece of one table: key values `[start, start + step)` of its integer key (the first and
/// last chunks open-ended), or all of it. A chunk is known by its table and start, which do not
/// move when rows come and go (the step of a table is kept in the positions for the whole
/// snapshot), so a restored position names the same chunk.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub table: usize,
    /// `(start, end)`: `start` is a multiple of `step` (or `i64::MIN` for the first).
    pub range: Option<(i64, Option<i64>)>,
    /// The width of the table's chunks.
    pub step: u64,
}

impl Chunk {
    pub fn start(&self) -> i64 {
        self.range.map_or(i64::MIN, |(s, _)| s)
    }

    /// The width of the chunks of a table whose keys lie in `bounds`: `chunk_size`, doubled until
    /// the table has at most [`MAX_CHUNKS`] chunks (sparse keys, such as one row at
    /// `i64::MAX`, would make billions).
    pub fn step_for(bounds: Option<(i64, i64)>, chunk_size: u64) -> u64 {
        let mut step = chunk_size.clamp(1, 1 << 62);
        let Some((lo, hi)) = bounds else { return step };
        let width = (i128::from(hi) - i128::from(lo)).max(0) as u128;
        while width / u128::from(step) > u128::from(MAX_CHUNKS) && step < 1 << 62 {
            step *= 2;
        }
        step
    }

    /// The chunks of table `table`, whose keys lie in `bounds` (none: it is empty), cut at
    /// multiples of `step` whatever the lowest key is today.
    pub fn split(table: usize, bounds: Option<(i64, i64)>, step: u64) -> Vec<Chunk> {
        let open = |from: i64| Chunk { table, range: Some((from, None)), step };
        let Some((lo, hi)) = bounds else { return vec![open(i64::MIN)] };
        let width = i128::from(step.max(1));
        let mut chunks = Vec::new();
        let mut from = i64::MIN;
        let mut next = (i128::from(lo).div_euclid(width) + 1) * width;
        while next <= i128::from(hi) {
            let at = next as i64; // <= hi, so it fits
            chunks.push(Chunk { table, range: Some((from, Some(at))), step });
            from = at;
            next += width;
        }
        chunks.push(open(from));
        chunks
    }

    /// The whole table, in one piece (no integer key).
    pub fn whole(table: usize) -> Chunk {
        Chunk { table, range: None, step: 1 }
    }
}

/// Where a reader stands in its chunks: the chunk it reads (its table and start; none before the
/// first), and where in it the next page starts (the next key value, or the rows delivered for a
/// table without an integer key). Part of the reader's position.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChunkCursor {
    pub table: Option<String>,
    pub start: Option<i64>,
    pub cursor: Option<i64>,
    pub rows: u64,
    /// Every chunk of this reader is read.
    #[serde(default)]
    pub done: bool,
    /// Worker 0 reads the chunks of tables its log position did not know (a late snapshot).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// The chunk width of each table of the snapshot, the same for its whole life.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, u64>,
    /// Of a table read whole by a key that is not one integer: the key's values in the last row
    /// delivered, as text (the next page starts after them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
}

/// Pages of a table read in the order of a key that is not one integer (composite, text, dates):
/// each starts after the last row's key values, so no page skips over the rows before it.
pub(crate) struct Keyset {
    /// The key's columns, quoted.
    pub columns: Vec<String>,
    /// A value as a literal of the dialect.
    pub literal: fn(&str) -> String,
}

impl Keyset {
    /// `(c1, c2, …) > (v1, v2, …)`, spelled out: `c1 > v1 OR (c1 = v1 AND (c2 > v2 OR …))`.
    fn after(&self, values: &[String]) -> String {
        let mut out = String::new();
        for (i, (c, v)) in self.columns.iter().zip(values).enumerate().rev() {
            let v = (self.literal)(v);
            out = if i == self.columns.len() - 1 {
                format!("{c} > {v}")
            } else {
                format!("{c} > {v} OR ({c} = {v} AND ({out}))")
            };
        }
        out
    }
}

/// The chunks of worker `worker` of `readers` that `at` has not read, and whether `at` stands
/// inside the first of them (else it starts that chunk afresh). Chunks go to workers by their
/// start, so a chunk stays with its worker across runs whatever the tables' bounds are then;
/// `name` gives a chunk's table name (chunks are in table-name, then start, order).
pub(crate) fn resume(
    chunks: &[Chunk],
    readers: usize,
    worker: usize,
    at: &ChunkCursor,
    name: impl Fn(usize) -> String,
) -> (VecDeque<Chunk>, bool) {
    let n = readers.max(1) as i128;
    let mine = |c: &Chunk| match c.range {
        Some((s, _)) if s != i64::MIN => {
            i128::from(s).div_euclid(i128::from(c.step.max(1))).rem_euclid(n) as usize == worker
        }
        _ => c.table % readers.max(1) == worker,
    };
    let mut out: VecDeque<Chunk> = chunks.iter().filter(|c| mine(c)).cloned().collect();
    let key = |c: &Chunk| (name(c.table), c.start());
    if at.done {
        out.clear();
    } else if let (Some(table), Some(start)) = (&at.table, at.start) {
        while out.front().is_some_and(|c| key(c) < (table.clone(), start)) {
            out.pop_front();
        }
    }
    let inside = out.front().is_some_and(|c| Some(key(c)) == at.table.clone().zip(at.start));
    (out, inside)
}

impl ChunkCursor {
    /// The reader begins `chunk` of table `name`, unless it is already in it.
    pub fn enter(&mut self, name: &str, chunk: &Chunk) {
        if self.table.is_none() {
            self.table = Some(name.to_string());
            self.start = Some(chunk.start());
        }
    }

    /// What follows `SELECT … FROM t` for the next page of `chunk`: a key range on the quoted
    /// integer `key` (keyset pages), the rows after the last one delivered in `keyset`'s order, or
    /// rows after those delivered in the quoted `order`.
    pub fn page(
        &self,
        chunk: &Chunk,
        key: Option<&str>,
        keyset: Option<&Keyset>,
        order: Option<&str>,
        page_rows: u64,
    ) -> String {
        match (chunk.range, key) {
            (Some((from, to)), Some(key)) => {
                let start = self.cursor.unwrap_or(from);
                let below = to.map(|to| format!(" AND {key} < {to}")).unwrap_or_default();
                format!(" WHERE {key} >= {start}{below} ORDER BY {key} LIMIT {page_rows}")
            }
            // (A position of an earlier version may stand inside such a table by rows: on by them.)
            _ if keyset.is_some() && (self.rows == 0 || self.after.is_some()) => {
                let keyset = keyset.expect("matched");
                let filter = self.after.as_ref().map(|a| format!(" WHERE {}", keyset.after(a))).unwrap_or_default();
                format!("{filter} ORDER BY {} LIMIT {page_rows}", keyset.columns.join(", "))
            }
            _ => {
                let order = order.map(|o| format!(" ORDER BY {o}")).unwrap_or_default();
                format!("{order} LIMIT {page_rows} OFFSET {}", self.rows)
            }
        }
    }

    /// A page of `n` rows was read, the last with integer key `last_key` (or, read by a
    /// [`Keyset`], key values `last_values`): a short page ends the chunk (on to the next of
    /// `chunks`, named by `name`), a full one moves the cursor on.
    pub fn advance(
        &mut self,
        chunks: &mut VecDeque<Chunk>,
        (n, page_rows): (u64, u64),
        last_key: Option<i64>,
        last_values: Option<Vec<String>>,
        name: impl Fn(usize) -> String,
    ) {
        if n < page_rows {
            chunks.pop_front();
            let next = chunks.front().map(|c| (name(c.table), c.start()));
            *self = ChunkCursor {
                done: next.is_none(),
                late: self.late && next.is_some(),
                table: next.as_ref().map(|n| n.0.clone()),
                start: next.map(|n| n.1),
                steps: std::mem::take(&mut self.steps),
                ..ChunkCursor::default()
            };
        } else {
            self.rows += n;
            self.cursor = last_key.map(|k| k.saturating_add(1));
            self.after = last_values;
        }
    }

    /// Every chunk is read.
    pub fn finish(&mut self) {
        *self = ChunkCursor { done: true, ..ChunkCursor::default() };
    }

    /// The chunk widths a run uses: those of the restored positions, the same for every reader.
    pub fn restored_steps<'a>(positions: impl IntoIterator<Item = &'a ChunkCursor>) -> BTreeMap<String, u64> {
        positions.into_iter().flat_map(|p| p.steps.iter().map(|(k, v)| (k.clone(), *v))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Chunk, MAX_CHUNKS};

    #[test]
    fn chunks_cut_at_multiples_of_the_size() {
        let starts = |b, n| Chunk::split(0, b, n).iter().map(|c| c.range.unwrap()).collect::<Vec<_>>();
        assert_eq!(starts(Some((3, 25)), 10), vec![(i64::MIN, Some(10)), (10, Some(20)), (20, None)]);
        assert_eq!(starts(Some((5, 5)), 10), vec![(i64::MIN, None)]);
        assert_eq!(starts(None, 10), vec![(i64::MIN, None)]);
        assert_eq!(
            starts(Some((i64::MAX - 5, i64::MAX)), 4),
            vec![(i64::MIN, Some(i64::MAX - 3)), (i64::MAX - 3, None)]
        );
    }

    #[test]
    fn a_key_that_is_not_one_integer_pages_after_the_last_row() {
        let keyset = super::Keyset {
            columns: vec!["`a`".into(), "`b`".into(), "`c`".into()],
            literal: |v| format!("'{}'", v.replace('\'', "''")),
        };
        let mut at = super::ChunkCursor::default();
        let whole = Chunk::whole(0);
        assert_eq!(at.page(&whole, None, Some(&keyset), None, 10), " ORDER BY `a`, `b`, `c` LIMIT 10");
        let mut chunks = std::collections::VecDeque::from([whole.clone()]);
        at.advance(&mut chunks, (10, 10), None, Some(vec!["x".into(), "it's".into(), "3".into()]), |_| "t".into());
        assert_eq!(
            at.page(&whole, None, Some(&keyset), None, 10),
            " WHERE `a` > 'x' OR (`a` = 'x' AND (`b` > 'it''s' OR (`b` = 'it''s' AND (`c` > '3')))) ORDER BY `a`, `b`, `c` LIMIT 10"
        );
        // A position inside the table by rows (an earlier version's) goes on by them.
        let by_rows = super::ChunkCursor { rows: 20, ..Default::default() };
        assert_eq!(by_rows.page(&whole, None, Some(&keyset), Some("`a`"), 10), " ORDER BY `a` LIMIT 10 OFFSET 20");
        at.advance(&mut chunks, (3, 10), None, None, |_| "t".into());
        assert!(at.done && at.after.is_none(), "a short page ends the table");
    }

    #[test]
    fn sparse_keys_get_wider_chunks_not_billions() {
        let step = Chunk::step_for(Some((1001, i64::MAX)), 8096);
        let chunks = Chunk::split(0, Some((1001, i64::MAX)), step);
        assert!(chunks.len() as u64 <= MAX_CHUNKS + 1, "{}", chunks.len());
        assert_eq!(step % 8096, 0);
        assert!(Chunk::step_for(Some((i64::MIN, i64::MAX)), 1) as u128 * u128::from(MAX_CHUNKS) >= u64::MAX as u128);
        assert_eq!(Chunk::step_for(Some((1, 1_000_000)), 8096), 8096);
    }
}
