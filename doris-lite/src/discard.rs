//! Discarding Stream Loads (`--discard-stream-loads`, debug point `StreamLoad.discard`): the body
//! is received to the end and thrown away, and the load is answered as any other — a real
//! transaction, its label, 2PC — with an empty write. It shows what a client achieves when the
//! server costs nothing, since parsing makes doris-lite's own ingest slower than the clients it
//! tests.
//!
//! Rows are counted, not parsed, so `NumberTotalRows` = `NumberLoadedRows` is approximate:
//! - CSV and JSON lines count their non-empty lines (after the `csv_with_names*` header and
//!   `skip_lines`); a line Doris would filter (wrong column count, bad value, `where`) counts as
//!   loaded, and so does a line holding only `\r` or blanks.
//! - A JSON document counts the elements of its top-level array with `strip_outer_array`, else 1;
//!   `json_root` is not followed and the document is not otherwise checked.
//! - An Arrow stream counts the rows of its batches (decoded, not converted).
//!
//! `LoadBytes` (the bytes received, compressed when `compress_type` is `gz`), the `TxnId` and the
//! label are exact; `NumberFilteredRows` and `NumberUnselectedRows` are always 0.

use std::io::Read;

use serde::de::IgnoredAny;

use crate::load::{Format, LoadError, LoadOptions, LoadOutcome};
use crate::storage::TableWrite;

/// What a body's rows are counted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One row per non-empty line (CSV, JSON lines).
    Lines,
    /// One JSON document.
    JsonDocument {
        /// Its top-level array holds the rows.
        strip_outer_array: bool,
    },
    /// An Arrow IPC stream or a Parquet file.
    Batches(Format),
}

/// Counts the rows of a body that is not stored, chunk by chunk as it arrives.
#[derive(Debug)]
pub struct RowCounter {
    shape: Shape,
    gzip: bool,
    /// The body, for what can only be counted whole (gz, JSON documents, Arrow).
    buffered: Vec<u8>,
    lines: LineCounter,
}

impl RowCounter {
    /// A counter for a load with these headers.
    pub fn new(opts: &LoadOptions) -> RowCounter {
        let (shape, delimiter, skip) = match opts.format {
            Format::Csv(header) => (Shape::Lines, opts.line_delimiter.clone(), header.max(opts.skip_lines)),
            // doris-lite splits JSON lines on `\n` whatever the line_delimiter (see load.rs).
            Format::Json if opts.read_json_by_line => (Shape::Lines, b"\n".to_vec(), 0),
            Format::Json => (Shape::JsonDocument { strip_outer_array: opts.strip_outer_array }, Vec::new(), 0),
            Format::Arrow | Format::Parquet => (Shape::Batches(opts.format), Vec::new(), 0),
        };
        RowCounter { shape, gzip: opts.gzip, buffered: Vec::new(), lines: LineCounter::new(delimiter, skip as u64) }
    }

    /// The next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.shape == Shape::Lines && !self.gzip {
            self.lines.feed(chunk);
        } else {
            self.buffered.extend_from_slice(chunk);
        }
    }

    /// Ends the body: the outcome of a load that applies nothing.
    pub fn finish(mut self) -> Result<LoadOutcome, LoadError> {
        let rows = self.rows()?;
        Ok(LoadOutcome {
            write: TableWrite::Rows { ops: Vec::new(), partial: None },
            total: rows,
            filtered: 0,
            unselected: 0,
            errors: Vec::new(),
        })
    }

    fn rows(&mut self) -> Result<u64, LoadError> {
        let gz_error = |e: std::io::Error| LoadError(format!("[INTERNAL_ERROR]failed to decompress gz data: {e}"));
        let body = std::mem::take(&mut self.buffered);
        let body = if self.gzip {
            let mut gz = flate2::read::MultiGzDecoder::new(&body[..]);
            if self.shape == Shape::Lines {
                // Count while decompressing rather than holding the whole text.
                let mut buf = vec![0u8; 256 << 10];
                loop {
                    let n = gz.read(&mut buf).map_err(gz_error)?;
                    if n == 0 {
                        break;
                    }
                    self.lines.feed(&buf[..n]);
                }
                return Ok(self.lines.finish());
            }
            let mut out = Vec::with_capacity(body.len() * 4);
            gz.read_to_end(&mut out).map_err(gz_error)?;
            out
        } else {
            body
        };
        match self.shape {
            Shape::Lines => Ok(self.lines.finish()),
            Shape::JsonDocument { strip_outer_array } => Ok(json_document_rows(&body, strip_outer_array)),
            Shape::Batches(format) => batch_rows(&body, format),
        }
    }
}

/// Rows of one JSON document: its top-level array's length with `strip_outer_array`, else 1.
fn json_document_rows(body: &[u8], strip_outer_array: bool) -> u64 {
    if strip_outer_array && let Ok(elements) = serde_json::from_slice::<Vec<IgnoredAny>>(body) {
        return elements.len() as u64;
    }
    1
}

/// Rows of an Arrow IPC stream or a Parquet file.
fn batch_rows(body: &[u8], format: Format) -> Result<u64, LoadError> {
    let mut rows = 0u64;
    for batch in crate::load::record_batches(body, format)? {
        rows += batch?.num_rows() as u64;
    }
    Ok(rows)
}

/// Counts non-empty lines as chunks arrive, as `CsvSplitter` would split them, without
/// copying the body (except for multi-byte delimiters, which are rare).
#[derive(Debug)]
struct LineCounter {
    delimiter: Vec<u8>,
    /// Lines still to skip (header, `skip_lines`), empty or not.
    skip: u64,
    rows: u64,
    /// The current, unterminated line has bytes (single-byte delimiter).
    line_open: bool,
    /// The unterminated line (multi-byte delimiter, which may straddle two chunks).
    carry: Vec<u8>,
}

impl LineCounter {
    fn new(delimiter: Vec<u8>, skip: u64) -> LineCounter {
        LineCounter { delimiter, skip, rows: 0, line_open: false, carry: Vec::new() }
    }

    fn feed(&mut self, chunk: &[u8]) {
        match self.delimiter.as_slice() {
            [] => {}
            &[d] => self.feed_byte_delimited(chunk, d),
            _ => self.feed_multi_byte_delimited(chunk),
        }
    }

    fn feed_byte_delimited(&mut self, mut buf: &[u8], d: u8) {
        while self.skip > 0 {
            match buf.iter().position(|b| *b == d) {
                Some(i) => {
                    buf = &buf[i + 1..];
                    self.skip -= 1;
                    self.line_open = false;
                }
                None => {
                    self.line_open |= !buf.is_empty();
                    return;
                }
            }
        }
        let (Some(&first), Some(&last)) = (buf.first(), buf.last()) else { return };
        // A delimiter ends a row unless the byte before it is a delimiter too (an empty line).
        // One branch-free pass, which the compiler vectorizes.
        let inner = buf[1..].iter().zip(buf).filter(|(b, prev)| **b == d && **prev != d).count();
        self.rows += inner as u64 + u64::from(first == d && self.line_open);
        self.line_open = last != d;
    }

    fn feed_multi_byte_delimited(&mut self, chunk: &[u8]) {
        let n = self.delimiter.len();
        // The carry was searched already, but for a delimiter that its end begins.
        let mut from = self.carry.len().saturating_sub(n - 1);
        self.carry.extend_from_slice(chunk);
        let carry = std::mem::take(&mut self.carry);
        let mut line_start = 0;
        while let Some(i) = carry[from..].windows(n).position(|w| w == self.delimiter) {
            let end = from + i;
            self.line(end > line_start);
            line_start = end + n;
            from = line_start;
        }
        self.carry = carry;
        self.carry.drain(..line_start);
    }

    fn line(&mut self, non_empty: bool) {
        if self.skip > 0 {
            self.skip -= 1;
        } else if non_empty {
            self.rows += 1;
        }
    }

    /// A last line without a delimiter is a row too.
    fn finish(&mut self) -> u64 {
        let open = self.line_open || !self.carry.is_empty();
        self.line(open);
        self.carry.clear();
        self.line_open = false;
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse_options;

    fn count(headers: &[(&str, &str)], chunks: &[&[u8]]) -> u64 {
        let opts = parse_options(&|k: &str| headers.iter().find(|(h, _)| *h == k).map(|(_, v)| v.to_string()))
            .expect("valid headers");
        let mut c = RowCounter::new(&opts);
        for chunk in chunks {
            c.feed(chunk);
        }
        c.finish().expect("countable").total
    }

    #[test]
    fn csv_lines_are_counted_across_chunk_boundaries() {
        assert_eq!(count(&[], &[b"1\ta\n2\tb\n3\tc\n"]), 3);
        assert_eq!(count(&[], &[b"1\ta\n2\t", b"b\n3\tc"]), 3);
        assert_eq!(count(&[], &[b"1\ta\n", b"\n", b"\n2\tb\n\n"]), 2);
        assert_eq!(count(&[], &[b"\n\n1\n"]), 1);
        assert_eq!(count(&[], &[b""]), 0);
        let body = b"1,a\n\n2,b\n3,c";
        for split in 0..=body.len() {
            assert_eq!(count(&[], &[&body[..split], &body[split..]]), 3, "split at {split}");
        }
    }

    #[test]
    fn header_skip_lines_and_multi_byte_delimiters() {
        assert_eq!(count(&[("format", "csv_with_names")], &[b"k,v\n1,a\n2,b\n"]), 2);
        assert_eq!(count(&[("format", "csv_with_names_and_types")], &[b"k,v\nINT,", b"STRING\n1,a\n"]), 1);
        assert_eq!(count(&[("skip_lines", "2")], &[b"\n", b"x\n1\n2"]), 2);
        let body = b"1,a||2,b||||3,c";
        for split in 0..=body.len() {
            assert_eq!(count(&[("line_delimiter", "||")], &[&body[..split], &body[split..]]), 3, "split at {split}");
        }
    }

    #[test]
    fn json_arrow_and_gzip_bodies() {
        let lines = [("format", "json"), ("read_json_by_line", "true")];
        assert_eq!(count(&lines, &[b"{\"k\":1}\n{\"k\":2}\n"]), 2);
        let array = [("format", "json"), ("strip_outer_array", "true")];
        assert_eq!(count(&array, &[b"[{\"k\":1},", b"{\"k\":2},{\"k\":3}]"]), 3);
        assert_eq!(count(&[("format", "json"), ("strip_outer_array", "false")], &[b"{\"k\":1}"]), 1);

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"1,a\n2,b\n3,c\n").unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(count(&[("compress_type", "gz")], &[&gz[..5], &gz[5..]]), 3);

        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "k",
            arrow::datatypes::DataType::Int32,
            false,
        )]));
        let col: arrow::array::ArrayRef = std::sync::Arc::new(arrow::array::Int32Array::from(vec![1, 2, 3, 4]));
        let batch = arrow::record_batch::RecordBatch::try_new(schema.clone(), vec![col]).unwrap();
        let mut ipc = Vec::new();
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &schema).unwrap();
        w.write(&batch).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        assert_eq!(count(&[("format", "arrow")], &[&ipc]), 8);
    }
}
