//! Snapshot chunks of a table — ranges of a single integer key, or ranges between key values read
//! from the table (composite, text, date, UUID keys, or a chosen `chunk_key_column`) — and a
//! reader's cursor through its share of them, shared by the database sources.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

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
    /// A chunk between key values read from the table ([`Cut`]), when `range` is none.
    pub cut: Option<Arc<Cut>>,
    /// A table whose key values are still being read ([`Cutting`]): the entry stands for a
    /// reader's chunks of it not yet known, the next at `cut`'s ordinal, then every `step`-th.
    pub feed: Option<watch::Receiver<Cutting>>,
}

/// The key values a table is cut at, as they are read: a reader takes each of its chunks as soon
/// as the chunk's end is known, so a table's first rows move while the rest of it is cut.
#[derive(Debug, Default)]
pub(crate) struct Cutting {
    pub values: Vec<Vec<String>>,
    /// Every value is read.
    pub done: bool,
    /// Why reading them stopped, and whether a restart may get past it.
    pub failed: Option<(String, bool)>,
}

/// The next chunk of a lazy entry ([`Chunk::feed`]), as far as the values cut so far tell.
#[derive(Debug)]
pub(crate) enum Next {
    /// Its end is not read yet.
    Wait,
    /// The chunk, and the entry of the reader's chunks after it (none: it was the table's last).
    Chunk(Chunk, Option<Chunk>),
    /// The table has no more chunks of this reader.
    Spent,
}

/// Chunk `ordinal` of a table cut at key values: its rows from key `from` (none: the first chunk)
/// up to, not including, key `to` (none: the last). The values are kept in the positions while
/// the table is read, so a restart reads the same chunks however the table changed since.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cut {
    pub ordinal: i64,
    pub from: Option<Vec<String>>,
    pub to: Option<Vec<String>>,
}

impl Chunk {
    pub fn start(&self) -> i64 {
        match (&self.cut, self.range) {
            (Some(cut), _) => cut.ordinal,
            (None, range) => range.map_or(i64::MIN, |(s, _)| s),
        }
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
        let open = |from: i64| Chunk { table, range: Some((from, None)), step, cut: None, feed: None };
        let Some((lo, hi)) = bounds else { return vec![open(i64::MIN)] };
        let width = i128::from(step.max(1));
        let mut chunks = Vec::new();
        let mut from = i64::MIN;
        let mut next = (i128::from(lo).div_euclid(width) + 1) * width;
        while next <= i128::from(hi) {
            let at = next as i64; // <= hi, so it fits
            chunks.push(Chunk { table, range: Some((from, Some(at))), step, cut: None, feed: None });
            from = at;
            next += width;
        }
        chunks.push(open(from));
        chunks
    }

    /// The whole table, in one piece (no integer key).
    pub fn whole(table: usize) -> Chunk {
        Chunk { table, range: None, step: 1, cut: None, feed: None }
    }

    /// The chunks of table `table` between the key values `bounds` (in key order): one more than
    /// there are bounds.
    pub fn between(table: usize, bounds: &[Vec<String>]) -> Vec<Chunk> {
        let edges: Vec<Option<&Vec<String>>> =
            std::iter::once(None).chain(bounds.iter().map(Some)).chain(std::iter::once(None)).collect();
        edges.windows(2).enumerate().map(|(i, w)| Chunk::cut(table, i, w[0].cloned(), w[1].cloned())).collect()
    }

    fn cut(table: usize, ordinal: usize, from: Option<Vec<String>>, to: Option<Vec<String>>) -> Chunk {
        let cut = Some(Arc::new(Cut { ordinal: ordinal as i64, from, to }));
        Chunk { table, range: None, step: 1, cut, feed: None }
    }

    /// The chunks of table `table`, cut at the values `feed` gives as they are read: one entry,
    /// which [`resume`] deals to every reader.
    pub fn lazy(table: usize, feed: watch::Receiver<Cutting>) -> Chunk {
        Chunk { feed: Some(feed), ..Chunk::cut(table, 0, None, None) }
    }

    /// This lazy entry for reader `worker` of `readers`: its chunks are every `readers`-th from
    /// ordinal `worker`.
    fn lazy_for(&self, worker: usize, readers: usize) -> Chunk {
        Chunk { step: readers.max(1) as u64, ..self.lazy_at(worker) }
    }

    /// This lazy entry, its next chunk at `ordinal`.
    fn lazy_at(&self, ordinal: usize) -> Chunk {
        Chunk { step: self.step, feed: self.feed.clone(), ..Chunk::cut(self.table, ordinal, None, None) }
    }

    /// What a lazy entry yields once `values` are cut (`done`: all of them).
    pub fn next_cut(&self, values: &[Vec<String>], done: bool) -> Next {
        let k = self.start().max(0) as usize;
        if k > values.len() || (k == values.len() && !done) {
            return if done { Next::Spent } else { Next::Wait };
        }
        let to = values.get(k).cloned();
        let last = to.is_none();
        let chunk = Chunk::cut(self.table, k, k.checked_sub(1).map(|j| values[j].clone()), to);
        Next::Chunk(chunk, (!last).then(|| self.lazy_at(k + self.step as usize)))
    }
}

/// Rows per chunk of a table cut at key values: `chunk_size`, more when the table would have
/// more than [`MAX_CUTS`] chunks (its bounds are kept in the positions while it is read).
pub(crate) fn rows_per_cut(chunk_size: u64, estimated_rows: Option<u64>) -> u64 {
    chunk_size.max(1).max(estimated_rows.unwrap_or(0).div_ceil(MAX_CUTS))
}

/// The key values each table cut at them is cut at, by table name.
pub(crate) type Cuts = BTreeMap<String, Vec<Vec<String>>>;

/// At most about this many chunks per table cut at key values.
pub(crate) const MAX_CUTS: u64 = 2048;

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
    /// The key values each table cut at them is cut at ([`Chunk::between`]), for the tables this
    /// reader has chunks of still to read (a restart finds a table none keeps read, or reads it
    /// whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuts: Option<BTreeMap<String, Vec<Vec<String>>>>,
    /// The tables of `cuts` whose values were still being read: those kept are the first of them
    /// (a restart reads the rest on from the last).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub cutting: BTreeSet<String>,
}

/// The key values a restored run's tables are cut at, by table name, and whether they are all of
/// them (else the first, and the rest are read on from the last).
pub(crate) type Kept = BTreeMap<String, (Vec<Vec<String>>, bool)>;

/// Rows compared with key values in the order of a key that is not one integer (composite, text,
/// dates): the pages of such a key each start after the last row's key values, so no page skips
/// over the rows before it, and its chunks lie between key values read from the table.
pub(crate) struct Keyset {
    /// The key's columns, quoted.
    pub columns: Vec<String>,
    /// The same, as named.
    pub names: Vec<String>,
    /// A value of each column as a literal of the dialect.
    pub literals: Vec<Literal>,
}

/// A column's value (as the text Doris gets) as a literal of the server's SQL.
pub(crate) type Literal = fn(&str) -> String;

/// How rows compare with key values ([`Keyset::compare`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// After them.
    After,
    /// At or after them.
    From,
    /// Before them.
    Before,
}

impl Keyset {
    /// `(c1, c2, …) > (v1, v2, …)` (or `>=`, `<`), spelled out — `c1 > v1 OR (c1 = v1 AND (c2 > v2
    /// OR …))` — behind a bound on the first column alone, which any server's index takes.
    pub fn compare(&self, values: &[String], bound: Bound) -> String {
        let (strict, last) = match bound {
            Bound::After => (">", ">"),
            Bound::From => (">", ">="),
            Bound::Before => ("<", "<"),
        };
        let mut out = String::new();
        for (i, ((c, v), literal)) in self.columns.iter().zip(values).zip(&self.literals).enumerate().rev() {
            let v = literal(v);
            out = if i == self.columns.len() - 1 {
                format!("{c} {last} {v}")
            } else {
                format!("{c} {strict} {v} OR ({c} = {v} AND ({out}))")
            };
        }
        match (self.columns.first(), values.first()) {
            (Some(c), Some(v)) if self.columns.len() > 1 => {
                format!("{c} {strict}= {} AND ({out})", (self.literals[0])(v))
            }
            _ => out,
        }
    }

    /// `ORDER BY` of the key.
    pub fn order(&self) -> String {
        self.columns.join(", ")
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
        _ if c.feed.is_some() => true,
        _ if c.cut.is_some() => c.start().rem_euclid(n as i64) as usize == worker,
        Some((s, _)) if s != i64::MIN => {
            i128::from(s).div_euclid(i128::from(c.step.max(1))).rem_euclid(n) as usize == worker
        }
        _ => c.table % readers.max(1) == worker,
    };
    let mut out: VecDeque<Chunk> = chunks
        .iter()
        .filter(|c| mine(c))
        .map(|c| if c.feed.is_some() { c.lazy_for(worker, readers) } else { c.clone() })
        .collect();
    let key = |c: &Chunk| (name(c.table), c.start());
    if at.done {
        out.clear();
    } else if let (Some(table), Some(start)) = (&at.table, at.start) {
        while let Some(c) = out.front_mut().filter(|c| key(c) < (table.clone(), start)) {
            // The lazy entry of the table the reader stands in goes on from its chunk.
            if c.feed.is_some() && name(c.table) == *table {
                *c = c.lazy_at(start as usize);
                break;
            }
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

    /// What follows `SELECT … FROM t` for the next page of `chunk`, and the most rows it gives
    /// (none: the rest of the chunk): a key range on the quoted integer `key` (keyset pages), or
    /// the rows of the chunk's [`Cut`] (between values of `cut_by`) — after the last one delivered
    /// in `keyset`'s order, else all at once — or rows after those delivered in the quoted `order`.
    pub fn page(
        &self,
        chunk: &Chunk,
        key: Option<&str>,
        (keyset, cut_by): (Option<&Keyset>, Option<&Keyset>),
        order: Option<&str>,
        page_rows: u64,
    ) -> (String, Option<u64>) {
        let filter = |f: Vec<String>| if f.is_empty() { String::new() } else { format!(" WHERE {}", f.join(" AND ")) };
        let mut filters = Vec::new();
        if let (Some(cut), Some(by)) = (&chunk.cut, cut_by) {
            filters.extend(cut.from.as_ref().map(|v| by.compare(v, Bound::From)));
            if let Some(to) = &cut.to {
                let before = by.compare(to, Bound::Before);
                // The first chunk of a column that is not the key holds its NULLs too.
                let nulls = cut.from.is_none() && keyset.is_none_or(|k| k.columns != by.columns);
                filters.push(if nulls { format!("({before} OR {} IS NULL)", by.columns[0]) } else { before });
            }
        }
        match (chunk.range, key) {
            (Some((from, to)), Some(key)) => {
                let start = self.cursor.unwrap_or(from);
                let below = to.map(|to| format!(" AND {key} < {to}")).unwrap_or_default();
                (format!(" WHERE {key} >= {start}{below} ORDER BY {key} LIMIT {page_rows}"), Some(page_rows))
            }
            // (A position of an earlier version may stand inside such a table by rows: on by them.)
            _ if keyset.is_some() && (self.rows == 0 || self.after.is_some()) => {
                let keyset = keyset.expect("matched");
                filters.extend(self.after.as_ref().map(|a| keyset.compare(a, Bound::After)));
                (format!("{} ORDER BY {} LIMIT {page_rows}", filter(filters), keyset.order()), Some(page_rows))
            }
            // A chunk of a table without a key: read in one statement.
            _ if chunk.cut.is_some() => (filter(filters), None),
            _ => {
                let order = order.map(|o| format!(" ORDER BY {o}")).unwrap_or_default();
                (format!("{order} LIMIT {page_rows} OFFSET {}", self.rows), Some(page_rows))
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
            self.next_chunk(chunks, name);
        } else {
            self.rows += n;
            self.cursor = last_key.map(|k| k.saturating_add(1));
            self.after = last_values;
        }
    }

    /// The chunk in front of `chunks` (or a lazy entry that has no more) is done with: on to the
    /// next, named by `name`.
    pub fn next_chunk(&mut self, chunks: &mut VecDeque<Chunk>, name: impl Fn(usize) -> String) {
        let read = chunks.pop_front();
        let next = chunks.front().map(|c| (name(c.table), c.start()));
        let mut cuts = self.cuts.take();
        let mut cutting = std::mem::take(&mut self.cutting);
        // The bounds of a table whose chunks this reader has all read are no longer kept.
        if let (Some(cuts), Some(read)) = (cuts.as_mut(), read)
            && next.as_ref().is_none_or(|(t, _)| *t != name(read.table))
        {
            cuts.remove(&name(read.table));
            cutting.remove(&name(read.table));
        }
        *self = ChunkCursor {
            cuts,
            cutting,
            done: next.is_none(),
            late: self.late && next.is_some(),
            table: next.as_ref().map(|n| n.0.clone()),
            start: next.map(|n| n.1),
            steps: std::mem::take(&mut self.steps),
            ..ChunkCursor::default()
        };
    }

    /// Every chunk is read.
    pub fn finish(&mut self) {
        *self = ChunkCursor { done: true, ..ChunkCursor::default() };
    }

    /// The key values the tables of a snapshot under way are cut at, as its positions keep them:
    /// all of a table's where a position has them all, else the most any position has.
    pub fn restored_cuts<'a>(positions: impl IntoIterator<Item = &'a ChunkCursor>) -> Kept {
        let mut kept = Kept::new();
        for p in positions {
            for (table, values) in p.cuts.iter().flatten() {
                let all = !p.cutting.contains(table);
                let better = kept.get(table).is_none_or(|(had, had_all)| !had_all && (all || values.len() > had.len()));
                if better {
                    kept.insert(table.clone(), (values.clone(), all));
                }
            }
        }
        kept
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
            names: vec!["a".into(), "b".into(), "c".into()],
            literals: vec![|v| format!("'{}'", v.replace('\'', "''")); 3],
        };
        let mut at = super::ChunkCursor::default();
        let whole = Chunk::whole(0);
        let page = |at: &super::ChunkCursor| at.page(&whole, None, (Some(&keyset), None), Some("`a`"), 10).0;
        assert_eq!(page(&at), " ORDER BY `a`, `b`, `c` LIMIT 10");
        let mut chunks = std::collections::VecDeque::from([whole.clone()]);
        at.advance(&mut chunks, (10, 10), None, Some(vec!["x".into(), "it's".into(), "3".into()]), |_| "t".into());
        assert_eq!(
            page(&at),
            " WHERE `a` >= 'x' AND (`a` > 'x' OR (`a` = 'x' AND (`b` > 'it''s' OR (`b` = 'it''s' AND (`c` > '3'))))) ORDER BY `a`, `b`, `c` LIMIT 10"
        );
        // A position inside the table by rows (an earlier version's) goes on by them.
        let by_rows = super::ChunkCursor { rows: 20, ..Default::default() };
        assert_eq!(page(&by_rows), " ORDER BY `a` LIMIT 10 OFFSET 20");
        at.advance(&mut chunks, (3, 10), None, None, |_| "t".into());
        assert!(at.done && at.after.is_none(), "a short page ends the table");
    }

    #[test]
    fn chunks_between_key_values_page_inside_their_bounds() {
        let keyset = super::Keyset {
            columns: vec!["a".into(), "b".into()],
            names: vec!["a".into(), "b".into()],
            literals: vec![|v| format!("'{v}'"); 2],
        };
        let bounds = vec![vec!["k".to_string(), "1".to_string()], vec!["p".to_string(), "7".to_string()]];
        let chunks = Chunk::between(3, &bounds);
        assert_eq!(chunks.iter().map(Chunk::start).collect::<Vec<_>>(), vec![0, 1, 2]);
        let mut at = super::ChunkCursor::default();
        let by_key = (Some(&keyset), Some(&keyset));
        let sql = |at: &super::ChunkCursor, c: &Chunk| at.page(c, None, by_key, None, 10).0;
        assert_eq!(
            sql(&at, &chunks[0]),
            " WHERE a <= 'k' AND (a < 'k' OR (a = 'k' AND (b < '1'))) ORDER BY a, b LIMIT 10"
        );
        assert_eq!(
            sql(&at, &chunks[1]),
            " WHERE a >= 'k' AND (a > 'k' OR (a = 'k' AND (b >= '1'))) AND a <= 'p' AND (a < 'p' OR (a = 'p' AND (b < '7'))) ORDER BY a, b LIMIT 10"
        );
        let mut left = std::collections::VecDeque::from(vec![chunks[2].clone()]);
        at.cuts = Some([("t".to_string(), bounds.clone())].into());
        at.advance(&mut left, (10, 10), None, Some(vec!["q".into(), "2".into()]), |_| "t".into());
        assert_eq!(
            sql(&at, &chunks[2]),
            " WHERE a >= 'p' AND (a > 'p' OR (a = 'p' AND (b >= '7'))) AND a >= 'q' AND (a > 'q' OR (a = 'q' AND (b > '2'))) ORDER BY a, b LIMIT 10"
        );
        at.advance(&mut left, (2, 10), None, None, |_| "t".into());
        assert!(at.done && at.cuts.as_ref().is_some_and(|c| c.is_empty()), "{at:?}");

        // Cut at a column that is not a key: its NULLs are in the first chunk, read in one go.
        let by =
            super::Keyset { columns: vec!["d".into()], names: vec!["d".into()], literals: vec![|v| format!("'{v}'")] };
        let chunks = Chunk::between(0, &[vec!["2024-01-01".to_string()]]);
        let fresh = super::ChunkCursor::default();
        assert_eq!(
            fresh.page(&chunks[0], None, (None, Some(&by)), None, 10),
            (" WHERE (d < '2024-01-01' OR d IS NULL)".into(), None)
        );
        assert_eq!(
            fresh.page(&chunks[1], None, (None, Some(&by)), None, 10),
            (" WHERE d >= '2024-01-01'".into(), None)
        );
        // Chunks go to readers by their ordinal.
        let (mine, _) = super::resume(&chunks, 2, 1, &fresh, |_| "t".into());
        assert_eq!(mine.iter().map(Chunk::start).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_table_still_being_cut_deals_each_chunk_once_its_end_is_read() {
        use super::{ChunkCursor, Cutting, Next, resume};
        let v = |s: &str| vec![s.to_string()];
        let ends = |c: &Chunk| c.cut.as_ref().map(|c| (c.ordinal, c.from.clone(), c.to.clone()));
        let (_tx, feed) = tokio::sync::watch::channel(Cutting::default());
        let lazy = Chunk::lazy(0, feed);
        // Reader 1 of 2 takes chunks 1, 3, 5 …
        let (mine, inside) = resume(std::slice::from_ref(&lazy), 2, 1, &ChunkCursor::default(), |_| "t".into());
        assert!(!inside);
        assert_eq!((mine[0].start(), mine[0].step), (1, 2));
        assert!(matches!(mine[0].next_cut(&[v("a")], false), Next::Wait), "chunk 1 ends at the second value");
        let Next::Chunk(chunk, Some(after)) = mine[0].next_cut(&[v("a"), v("b")], false) else { panic!() };
        assert_eq!(ends(&chunk), Some((1, Some(v("a")), Some(v("b")))));
        assert_eq!((after.start(), after.step, after.feed.is_some()), (3, 2, true));
        // Cut into 3 chunks: reader 1 has none after chunk 1; reader 0's last is open-ended.
        assert!(matches!(after.next_cut(&[v("a"), v("b")], true), Next::Spent));
        let (theirs, _) = resume(std::slice::from_ref(&lazy), 2, 0, &ChunkCursor::default(), |_| "t".into());
        let Next::Chunk(_, Some(second)) = theirs[0].next_cut(&[v("a"), v("b")], true) else { panic!() };
        let Next::Chunk(last, None) = second.next_cut(&[v("a"), v("b")], true) else { panic!() };
        assert_eq!(ends(&last), Some((2, Some(v("b")), None)));
        // A reader restored inside chunk 3 goes on from it.
        let at = ChunkCursor { table: Some("t".into()), start: Some(3), rows: 4096, ..Default::default() };
        let (mine, inside) = resume(&[lazy], 2, 1, &at, |_| "t".into());
        assert!(inside);
        assert_eq!(mine[0].start(), 3);
    }

    #[test]
    fn a_restored_run_cuts_on_from_the_most_values_any_position_kept() {
        let v = |s: &str| vec![s.to_string()];
        let at = |values: Vec<Vec<String>>, cutting: bool| super::ChunkCursor {
            cuts: Some([("t".to_string(), values)].into()),
            cutting: if cutting { ["t".to_string()].into() } else { Default::default() },
            ..Default::default()
        };
        let partial = [at(vec![v("a")], true), at(vec![v("a"), v("b")], true)];
        assert_eq!(super::ChunkCursor::restored_cuts(&partial)["t"], (vec![v("a"), v("b")], false));
        let complete = [at(vec![v("a"), v("b"), v("c")], false), at(vec![v("a")], true)];
        assert_eq!(super::ChunkCursor::restored_cuts(&complete)["t"], (vec![v("a"), v("b"), v("c")], true));
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
