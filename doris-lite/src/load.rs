//! Stream Load body parsing: headers (§1.5), CSV / JSON records, `columns` mapping with
//! expressions, `where`, merge types, sequence and partial columns, row accounting (§1.7).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::storage::{DELETE_SIGN, KeysType, RowOp, SEQUENCE_COL, TableSchema, TableWrite};
use crate::types::{DorisType, Value};

/// Body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// csv / csv_with_names / csv_with_names_and_types (header lines to skip).
    Csv(usize),
    /// json
    Json,
    /// arrow (an Arrow IPC stream; columns matched by name)
    Arrow,
    /// parquet (a whole Parquet file; columns matched by name)
    Parquet,
}

/// `merge_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeType {
    /// APPEND
    Append,
    /// DELETE
    Delete,
    /// MERGE
    Merge,
}

/// `group_commit` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupCommit {
    /// off_mode (or absent)
    Off,
    /// sync_mode
    Sync,
    /// async_mode
    Async,
}

/// One `columns` entry.
#[derive(Debug, Clone)]
pub enum ColumnMapping {
    /// A source field name.
    Source(String),
    /// `dst = expr`
    Derived(String, String),
}

/// Everything the headers say about a load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// label header.
    pub label: Option<String>,
    /// Format.
    pub format: Format,
    /// column_separator.
    pub column_separator: Vec<u8>,
    /// line_delimiter.
    pub line_delimiter: Vec<u8>,
    /// enclose.
    pub enclose: Option<u8>,
    /// escape.
    pub escape: Option<u8>,
    /// trim_double_quotes.
    pub trim_double_quotes: bool,
    /// skip_lines.
    pub skip_lines: usize,
    /// columns.
    pub columns: Option<Vec<ColumnMapping>>,
    /// where.
    pub where_expr: Option<String>,
    /// merge_type.
    pub merge_type: MergeType,
    /// delete (MERGE).
    pub delete_expr: Option<String>,
    /// function_column.sequence_col.
    pub sequence_col: Option<String>,
    /// partial_columns / unique_key_update_mode UPDATE_FIXED_COLUMNS.
    pub partial: bool,
    /// strict_mode.
    pub strict_mode: bool,
    /// max_filter_ratio.
    pub max_filter_ratio: f64,
    /// hidden_columns.
    pub hidden_columns: Vec<String>,
    /// jsonpaths.
    pub jsonpaths: Option<Vec<String>>,
    /// json_root.
    pub json_root: Option<String>,
    /// strip_outer_array.
    pub strip_outer_array: bool,
    /// read_json_by_line.
    pub read_json_by_line: bool,
    /// compress_type gz.
    pub gzip: bool,
    /// two_phase_commit.
    pub two_phase_commit: bool,
    /// group_commit.
    pub group_commit: GroupCommit,
    /// comment (echoed).
    pub comment: String,
    /// negative (AGGREGATE).
    pub negative: bool,
    /// partial_update_new_key_behavior: ERROR.
    pub new_key_error: bool,
}

/// Decodes `\xNN` escapes (and `\t`, `\n`) of separator headers.
pub fn decode_separator(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && (b[i + 1] == b'x' || b[i + 1] == b'X')
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 2..i + 4]).unwrap_or(""), 16)
        {
            out.push(v);
            i += 4;
            continue;
        }
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b't' => {
                    out.push(b'\t');
                    i += 2;
                    continue;
                }
                b'n' => {
                    out.push(b'\n');
                    i += 2;
                    continue;
                }
                b'r' => {
                    out.push(b'\r');
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn bool_header(v: Option<&str>) -> bool {
    v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Splits a `columns` header at top-level commas.
fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut cur = String::new();
    for ch in s.chars() {
        match quote {
            Some(q) => {
                if ch == q {
                    quote = None;
                }
            }
            None => match ch {
                '\'' | '"' => quote = Some(ch),
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(cur.trim().to_string());
                    cur.clear();
                    continue;
                }
                _ => {}
            },
        }
        cur.push(ch);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn unquote_ident(s: &str) -> String {
    s.trim().trim_matches('`').to_string()
}

/// Parses the Stream Load headers; `Err` is the `[ANALYSIS_ERROR]`/`[INVALID_ARGUMENT]` message.
pub fn parse_options(get: &dyn Fn(&str) -> Option<String>) -> Result<LoadOptions, String> {
    let format_raw = get("format").unwrap_or_else(|| "csv".into());
    let format = match format_raw.to_ascii_lowercase().as_str() {
        "" | "csv" => Format::Csv(0),
        "csv_with_names" => Format::Csv(1),
        "csv_with_names_and_types" => Format::Csv(2),
        "json" => Format::Json,
        "arrow" => Format::Arrow,
        "parquet" => Format::Parquet,
        "orc" => {
            return Err(format!("[NOT_IMPLEMENTED_ERROR]format {format_raw} is not supported by doris-lite yet"));
        }
        _ => {
            return Err(format!("[INVALID_ARGUMENT]unknown data format, format={format_raw}"));
        }
    };
    let strict_mode = match get("strict_mode") {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(_) => {
            return Err("[INVALID_ARGUMENT]Invalid strict mode format. Must be bool type".into());
        }
    };
    let max_filter_ratio = match get("max_filter_ratio") {
        None => 0.0,
        Some(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| format!("[INVALID_ARGUMENT]Invalid max_filter_ratio: {v}"))?,
    };
    if let Some(t) = get("timeout")
        && t.trim().parse::<u64>().is_err()
    {
        return Err("[INVALID_ARGUMENT]Invalid timeout format".into());
    }
    let merge_type = match get("merge_type").map(|m| m.to_ascii_uppercase()) {
        None => MergeType::Append,
        Some(m) if m == "APPEND" => MergeType::Append,
        Some(m) if m == "DELETE" => MergeType::Delete,
        Some(m) if m == "MERGE" => MergeType::Merge,
        Some(m) => return Err(format!("[INVALID_ARGUMENT]Invalid merge type {m}")),
    };
    let delete_expr = get("delete");
    if merge_type == MergeType::Merge && delete_expr.is_none() {
        return Err(
            "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = Excepted DELETE ON clause when merge type is MERGE."
                .into(),
        );
    }
    if merge_type != MergeType::Merge && delete_expr.is_some() {
        return Err("[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = not support DELETE ON clause when merge type is not MERGE.".into());
    }
    let enclose = match get("enclose") {
        None => None,
        Some(e) if e.len() == 1 => Some(e.as_bytes()[0]),
        Some(_) => {
            return Err("[INVALID_ARGUMENT]enclose must be single-char, actually is ".to_string());
        }
    };
    let escape = match get("escape") {
        None => None,
        Some(e) if e.len() == 1 => Some(e.as_bytes()[0]),
        Some(_) => return Err("[INVALID_ARGUMENT]escape must be single-char".into()),
    };
    let group_commit = match get("group_commit").map(|g| g.to_ascii_lowercase()) {
        None => GroupCommit::Off,
        Some(g) if g == "off_mode" => GroupCommit::Off,
        Some(g) if g == "sync_mode" => GroupCommit::Sync,
        Some(g) if g == "async_mode" => GroupCommit::Async,
        Some(_) => {
            return Err("[INVALID_ARGUMENT]group_commit can only be [async_mode, sync_mode, off_mode]".into());
        }
    };
    let label = get("label").filter(|l| !l.is_empty());
    if group_commit != GroupCommit::Off && label.is_some() {
        return Err("[INVALID_ARGUMENT]label and group_commit can't be set at the same time".into());
    }
    let compress = get("compress_type").map(|c| c.to_ascii_lowercase());
    let gzip = match compress.as_deref() {
        None | Some("") | Some("plain") => false,
        Some("gz") | Some("gzip") => true,
        Some(other) => {
            return Err(format!("[NOT_IMPLEMENTED_ERROR]compress_type {other} is not supported by doris-lite"));
        }
    };
    let partial = match get("unique_key_update_mode").map(|m| m.to_ascii_uppercase()) {
        Some(m) if m == "UPSERT" => false,
        Some(m) if m == "UPDATE_FIXED_COLUMNS" => true,
        Some(m) if m == "UPDATE_FLEXIBLE_COLUMNS" => {
            return Err("[NOT_IMPLEMENTED_ERROR]UPDATE_FLEXIBLE_COLUMNS is not supported by doris-lite".into());
        }
        Some(m) => {
            return Err(format!("[INVALID_ARGUMENT]Invalid unique_key_update_mode: {m}"));
        }
        None => bool_header(get("partial_columns").as_deref()),
    };
    let columns = get("columns").filter(|c| !c.trim().is_empty()).map(|c| {
        split_top_level(&c)
            .into_iter()
            .map(|e| match e.split_once('=') {
                Some((l, r)) if !r.starts_with('=') && !l.ends_with(['<', '>', '!']) => {
                    ColumnMapping::Derived(unquote_ident(l), r.trim().to_string())
                }
                _ => ColumnMapping::Source(unquote_ident(&e)),
            })
            .collect()
    });
    let jsonpaths = match get("jsonpaths") {
        None => None,
        Some(j) => Some(
            serde_json::from_str::<Vec<String>>(&j).map_err(|_| format!("[INVALID_ARGUMENT]Invalid json path: {j}"))?,
        ),
    };
    let strip_outer_array = bool_header(get("strip_outer_array").as_deref());
    let mut read_json_by_line = bool_header(get("read_json_by_line").as_deref());
    if get("read_json_by_line").is_none() && get("strip_outer_array").is_none() {
        read_json_by_line = true;
    }
    Ok(LoadOptions {
        label,
        format,
        column_separator: get("column_separator")
            .map(|s| decode_separator(&s))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| b"\t".to_vec()),
        line_delimiter: get("line_delimiter")
            .map(|s| decode_separator(&s))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| b"\n".to_vec()),
        enclose,
        escape,
        trim_double_quotes: bool_header(get("trim_double_quotes").as_deref()),
        skip_lines: get("skip_lines").and_then(|s| s.trim().parse().ok()).unwrap_or(0),
        columns,
        where_expr: get("where").filter(|w| !w.trim().is_empty()),
        merge_type,
        delete_expr,
        sequence_col: get("function_column.sequence_col"),
        partial,
        strict_mode,
        max_filter_ratio,
        hidden_columns: get("hidden_columns")
            .map(|h| h.split(',').map(unquote_ident).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default(),
        jsonpaths,
        json_root: get("json_root"),
        strip_outer_array,
        read_json_by_line,
        gzip,
        two_phase_commit: get("two_phase_commit").as_deref() == Some("true"),
        group_commit,
        comment: get("comment").unwrap_or_default(),
        negative: bool_header(get("negative").as_deref()),
        new_key_error: get("partial_update_new_key_behavior").is_some_and(|b| b.eq_ignore_ascii_case("ERROR")),
    })
}

/// The parsed and converted result of a load body.
#[derive(Debug)]
pub struct LoadOutcome {
    /// Rows to commit.
    pub write: TableWrite,
    /// NumberTotalRows.
    pub total: u64,
    /// NumberFilteredRows.
    pub filtered: u64,
    /// NumberUnselectedRows.
    pub unselected: u64,
    /// Error log lines.
    pub errors: Vec<String>,
}

/// A load-level failure (the whole request fails).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() == 1 {
        return hay.iter().position(|b| *b == needle[0]);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Splits one line into `out` (reused across lines to avoid per-row allocation).
fn split_fields<'a>(line: &'a [u8], sep: &[u8], enclose: Option<u8>, escape: Option<u8>, out: &mut Vec<&'a [u8]>) {
    out.clear();
    if enclose.is_none() {
        let mut rest = line;
        loop {
            match find(rest, sep) {
                Some(i) => {
                    out.push(&rest[..i]);
                    rest = &rest[i + sep.len()..];
                }
                None => {
                    out.push(rest);
                    return;
                }
            }
        }
    }
    let q = enclose.unwrap_or(b'"');
    let mut start = 0;
    let mut i = 0;
    let mut in_quote = false;
    while i < line.len() {
        let b = line[i];
        if Some(b) == escape && i + 1 < line.len() {
            i += 2;
            continue;
        }
        if b == q && (i == start || in_quote) {
            in_quote = !in_quote;
            i += 1;
            continue;
        }
        if !in_quote && line[i..].starts_with(sep) {
            out.push(&line[start..i]);
            i += sep.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push(&line[start..]);
}

fn csv_text<'a>(field: &'a [u8], opts: &LoadOptions) -> Result<Option<&'a str>, String> {
    let mut f = field;
    if f == b"\\N" {
        return Ok(None);
    }
    if let Some(q) = opts.enclose
        && f.len() >= 2
        && f[0] == q
        && f[f.len() - 1] == q
    {
        f = &f[1..f.len() - 1];
    }
    if opts.trim_double_quotes && f.len() >= 2 && f[0] == b'"' && f[f.len() - 1] == b'"' {
        f = &f[1..f.len() - 1];
    }
    std::str::from_utf8(f).map(Some).map_err(|_| "Invalid UTF-8 in field".to_string())
}

fn json_scalar_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(if *b { "1".into() } else { "0".into() }),
        other => Some(other.to_string()),
    }
}

fn json_path_get<'v>(root: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    let p = path.trim().strip_prefix('$').unwrap_or(path);
    let mut cur = root;
    for part in p.split('.').filter(|s| !s.is_empty()) {
        let (name, idx) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// Source field names in record order.
fn source_names(schema: &TableSchema, opts: &LoadOptions) -> Vec<String> {
    match &opts.columns {
        Some(cols) => cols
            .iter()
            .filter_map(|c| match c {
                ColumnMapping::Source(s) => Some(s.clone()),
                ColumnMapping::Derived(..) => None,
            })
            .collect(),
        None => {
            let mut v: Vec<String> = schema.columns.iter().map(|c| c.name.clone()).collect();
            v.extend(opts.hidden_columns.iter().cloned());
            v
        }
    }
}

/// A CSV record or the reason it was filtered.
pub type CsvRecord<'r, 'a> = Result<&'r [Option<&'a str>], String>;

/// Splits a CSV body into records as chunks arrive; a line that straddles two chunks is
/// carried over, so a load is parsed while it is still being received.
#[derive(Debug, Default)]
pub struct CsvSplitter {
    carry: Vec<u8>,
    line_no: usize,
    skip: usize,
}

impl CsvSplitter {
    /// A splitter for `opts` (header lines of `csv_with_names*` and `skip_lines` are skipped).
    pub fn new(opts: &LoadOptions) -> CsvSplitter {
        let header = match opts.format {
            Format::Csv(h) => h,
            _ => 0,
        };
        CsvSplitter { carry: Vec::new(), line_no: 0, skip: header.max(opts.skip_lines) }
    }

    /// Feeds the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8], opts: &LoadOptions, ncols: usize, sink: &mut dyn FnMut(CsvRecord)) {
        let delim = opts.line_delimiter.as_slice();
        if self.carry.is_empty() {
            let used = self.complete_lines(chunk, opts, ncols, sink);
            self.carry.extend_from_slice(&chunk[used..]);
            return;
        }
        let (head, rest) = match find(chunk, delim) {
            Some(i) => chunk.split_at(i + delim.len()),
            None => (chunk, &chunk[chunk.len()..]),
        };
        let mut carry = std::mem::take(&mut self.carry);
        carry.extend_from_slice(head);
        let used = self.complete_lines(&carry, opts, ncols, sink);
        carry.drain(..used);
        self.carry = carry;
        if !rest.is_empty() {
            // `head` ended with a delimiter, so the carry is now empty.
            let used = self.complete_lines(rest, opts, ncols, sink);
            self.carry.extend_from_slice(&rest[used..]);
        }
    }

    /// Ends the body: a last line without a delimiter is a record too.
    pub fn finish(&mut self, opts: &LoadOptions, ncols: usize, sink: &mut dyn FnMut(CsvRecord)) {
        let last = std::mem::take(&mut self.carry);
        if !last.is_empty() {
            let mut fields = Vec::with_capacity(ncols + 1);
            let mut texts = Vec::with_capacity(ncols + 1);
            self.line(&last, opts, ncols, &mut fields, &mut texts, sink);
        }
    }

    /// Handles every complete line of `buf`; returns where the incomplete tail starts.
    fn complete_lines(
        &mut self,
        buf: &[u8],
        opts: &LoadOptions,
        ncols: usize,
        sink: &mut dyn FnMut(CsvRecord),
    ) -> usize {
        let delim = opts.line_delimiter.as_slice();
        let mut fields: Vec<&[u8]> = Vec::with_capacity(ncols + 1);
        let mut texts: Vec<Option<&str>> = Vec::with_capacity(ncols + 1);
        let mut pos = 0;
        while let Some(i) = find(&buf[pos..], delim) {
            let line = &buf[pos..pos + i];
            pos += i + delim.len();
            self.line(line, opts, ncols, &mut fields, &mut texts, sink);
        }
        pos
    }

    fn line<'a>(
        &mut self,
        line: &'a [u8],
        opts: &LoadOptions,
        ncols: usize,
        fields: &mut Vec<&'a [u8]>,
        texts: &mut Vec<Option<&'a str>>,
        sink: &mut dyn FnMut(CsvRecord),
    ) {
        let line = if opts.line_delimiter == b"\n" { line.strip_suffix(b"\r").unwrap_or(line) } else { line };
        self.line_no += 1;
        if self.line_no <= self.skip || line.is_empty() {
            return;
        }
        split_fields(line, &opts.column_separator, opts.enclose, opts.escape, fields);
        if fields.len() != ncols {
            let cmp = if fields.len() > ncols { "more" } else { "less" };
            sink(Err(format!(
                "Reason: actual column number in csv file is  {cmp} than  schema column number.actual number: {}, schema column number: {}; line delimiter: [{}], column separator: [{}], result values:[{}]. src line [{}]; ",
                fields.len(),
                ncols,
                String::from_utf8_lossy(&opts.line_delimiter).escape_default(),
                String::from_utf8_lossy(&opts.column_separator).escape_default(),
                fields.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect::<Vec<_>>().join(", "),
                String::from_utf8_lossy(line)
            )));
            return;
        }
        texts.clear();
        for f in fields.iter() {
            match csv_text(f, opts) {
                Ok(v) => texts.push(v),
                Err(e) => {
                    sink(Err(format!("Reason: {e}. src line [{}]; ", String::from_utf8_lossy(line))));
                    return;
                }
            }
        }
        sink(Ok(texts));
    }
}

/// The record batches of an `arrow` (IPC stream) or `parquet` (file) body.
pub(crate) fn record_batches(
    body: &[u8],
    format: Format,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch, LoadError>> + '_>, LoadError> {
    if format == Format::Parquet {
        let bad = |e: parquet::errors::ParquetError| {
            LoadError(format!("[DATA_QUALITY_ERROR]failed to read the parquet file: {e}"))
        };
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(body))
                .map_err(bad)?
                .build()
                .map_err(bad)?;
        return Ok(Box::new(
            reader
                .map(|b| b.map_err(|e| LoadError(format!("[DATA_QUALITY_ERROR]failed to read the parquet file: {e}")))),
        ));
    }
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
        .map_err(|e| LoadError(format!("[DATA_QUALITY_ERROR]failed to read the arrow stream: {e}")))?;
    Ok(Box::new(
        reader.map(|b| b.map_err(|e| LoadError(format!("[DATA_QUALITY_ERROR]failed to read the arrow stream: {e}")))),
    ))
}

/// Parses the body into records of field texts. Records that cannot be split are filtered
/// with their reason.
fn for_each_record(
    body: &[u8],
    opts: &LoadOptions,
    names: &[String],
    on_record: &mut dyn FnMut(&[Option<&str>]),
) -> Result<(Vec<String>, u64), LoadError> {
    let mut errors = Vec::new();
    let mut bad = 0u64;
    match opts.format {
        Format::Csv(_) => {
            let mut splitter = CsvSplitter::new(opts);
            splitter.feed(body, opts, names.len(), &mut |r| match r {
                Ok(rec) => on_record(rec),
                Err(e) => {
                    bad += 1;
                    errors.push(e);
                }
            });
            splitter.finish(opts, names.len(), &mut |r| match r {
                Ok(rec) => on_record(rec),
                Err(e) => {
                    bad += 1;
                    errors.push(e);
                }
            });
        }
        Format::Arrow | Format::Parquet => {
            let fmt = FormatOptions::default();
            for batch in record_batches(body, opts.format)? {
                let batch = batch?;
                let schema = batch.schema();
                let cols: Vec<Option<usize>> = names
                    .iter()
                    .map(|n| schema.fields().iter().position(|f| f.name().eq_ignore_ascii_case(n)))
                    .collect();
                let formatters: Vec<ArrayFormatter> = batch
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &fmt))
                    .collect::<Result<_, _>>()
                    .map_err(|e| LoadError(format!("[DATA_QUALITY_ERROR]unsupported arrow column: {e}")))?;
                let mut owned: Vec<Option<String>> = Vec::with_capacity(names.len());
                for row in 0..batch.num_rows() {
                    owned.clear();
                    for c in &cols {
                        owned
                            .push(c.and_then(|i| crate::sql::cell_text(batch.column(i).as_ref(), &formatters[i], row)));
                    }
                    let texts: Vec<Option<&str>> = owned.iter().map(|t| t.as_deref()).collect();
                    on_record(&texts);
                }
            }
        }
        Format::Json => {
            let text = std::str::from_utf8(body)
                .map_err(|_| LoadError("[DATA_QUALITY_ERROR]Invalid UTF-8 in json body".into()))?;
            let parse_doc = |s: &str, docs: &mut Vec<serde_json::Value>, errors: &mut Vec<String>, bad: &mut u64| {
                match serde_json::from_str::<serde_json::Value>(s) {
                    Ok(mut v) => {
                        if let Some(root) = &opts.json_root {
                            v = json_path_get(&v, root).cloned().unwrap_or(serde_json::Value::Null);
                        }
                        match v {
                            serde_json::Value::Array(a) if opts.strip_outer_array => docs.extend(a),
                            serde_json::Value::Array(_) => {
                                *bad += 1;
                                errors.push(format!("Reason: JSON data is array-object, `strip_outer_array` must be TRUE.. src line [{s}]; "));
                            }
                            other => docs.push(other),
                        }
                    }
                    Err(e) => {
                        *bad += 1;
                        errors.push(format!(
                            "Reason: Parse json data for JsonDoc failed. code: 14, error info: {e}. src line [{s}]; "
                        ));
                    }
                }
            };
            let pieces: Vec<&str> = if opts.read_json_by_line {
                text.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect()
            } else {
                vec![text.trim()]
            };
            // Objects are read straight into the fields unless paths pick the values.
            let fields = (opts.jsonpaths.is_none() && opts.json_root.is_none())
                .then(|| crate::json_fields::JsonFields::new(names));
            let mut read = Vec::new();
            for piece in pieces {
                if let Some(fields) = &fields
                    && fields.read(piece, &mut read)
                {
                    let texts: Vec<Option<&str>> = read.iter().map(|t| t.as_deref()).collect();
                    on_record(&texts);
                    continue;
                }
                let mut docs = Vec::new();
                parse_doc(piece, &mut docs, &mut errors, &mut bad);
                for doc in docs.iter() {
                    let serde_json::Value::Object(obj) = doc else {
                        bad += 1;
                        errors.push(format!("Reason: Expect json object, but got {doc}. src line [{doc}]; "));
                        continue;
                    };
                    let rec: Vec<Option<String>> = match &opts.jsonpaths {
                        Some(paths) => paths.iter().map(|p| json_path_get(doc, p).and_then(json_scalar_text)).collect(),
                        None => names
                            .iter()
                            .map(|n| {
                                obj.get(n)
                                    .or_else(|| obj.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v))
                                    .and_then(json_scalar_text)
                            })
                            .collect(),
                    };
                    let texts: Vec<Option<&str>> = rec.iter().map(|t| t.as_deref()).collect();
                    on_record(&texts);
                }
            }
        }
    }
    Ok((errors, bad))
}

/// How a table column gets its value.
#[derive(Debug, Clone)]
enum Source {
    Field(usize),
    Expr(usize),
    Default,
}

/// Converts records into a table write with Doris' row accounting. Records can be fed one at
/// a time while the body is still arriving; `finish` evaluates expressions and returns the
/// outcome.
pub struct LoadBuilder<'s> {
    schema: &'s TableSchema,
    opts: &'s LoadOptions,
    names: Vec<String>,
    derived: Vec<(String, String)>,
    sources: Vec<Source>,
    seq_type: Option<DorisType>,
    seq_field: Option<usize>,
    delete_field: Option<usize>,
    delete_derived: Option<usize>,
    needs_exprs: bool,
    defaults: Vec<Result<Value, String>>,
    sum_negate: Vec<bool>,
    errors: Vec<String>,
    filtered: u64,
    unselected: u64,
    total: u64,
    ops: Vec<RowOp>,
    records: Vec<Vec<Option<String>>>,
}

fn analysis(msg: impl std::fmt::Display) -> LoadError {
    LoadError(format!("[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = {msg}"))
}

impl<'s> LoadBuilder<'s> {
    /// Validates the headers against the table and plans the column mapping.
    pub fn new(schema: &'s TableSchema, opts: &'s LoadOptions) -> Result<LoadBuilder<'s>, LoadError> {
        let unique = schema.keys_type == KeysType::Unique;
        if opts.merge_type != MergeType::Append && !unique {
            return Err(analysis("load by MERGE or DELETE is only supported in unique tables."));
        }
        if opts.sequence_col.is_some() && !schema.has_sequence() {
            return Err(analysis("There is no sequence column in the table."));
        }
        if schema.sequence_type().is_some()
            && opts.sequence_col.is_none()
            && !opts.hidden_columns.iter().any(|h| h.eq_ignore_ascii_case(SEQUENCE_COL))
        {
            return Err(analysis("Table has sequence column, need to specify the sequence column"));
        }
        if opts.partial && !unique {
            return Err(analysis("Partial update is only allowed on unique table with merge-on-write enabled."));
        }
        let names = source_names(schema, opts);
        let derived: Vec<(String, String)> = opts
            .columns
            .iter()
            .flatten()
            .filter_map(|c| match c {
                ColumnMapping::Derived(d, e) => Some((d.clone(), e.clone())),
                _ => None,
            })
            .collect();
        let field_index = |n: &str| names.iter().position(|x| x.eq_ignore_ascii_case(n));
        let mut sources: Vec<Source> = Vec::with_capacity(schema.columns.len());
        for c in &schema.columns {
            if let Some(i) = derived.iter().position(|(d, _)| d.eq_ignore_ascii_case(&c.name)) {
                sources.push(Source::Expr(i));
            } else if let Some(i) = field_index(&c.name) {
                sources.push(Source::Field(i));
            } else {
                sources.push(Source::Default);
            }
        }
        for (d, _) in &derived {
            if schema.column_index(d).is_none()
                && !d.eq_ignore_ascii_case(DELETE_SIGN)
                && !d.eq_ignore_ascii_case(SEQUENCE_COL)
            {
                return Err(analysis(format!("Unknown column '{d}' in 'table list'")));
            }
        }
        if opts.partial {
            for (i, src) in sources.iter().enumerate().take(schema.key_count) {
                if matches!(src, Source::Default) {
                    return Err(analysis(format!(
                        "Partial update should include all key columns, missing: {}",
                        schema.columns[i].name
                    )));
                }
            }
        }
        let seq_type =
            schema.sequence_type().or_else(|| schema.sequence_column().map(|i| schema.columns[i].ty.clone()));
        let seq_field = opts.sequence_col.as_deref().and_then(field_index).or_else(|| field_index(SEQUENCE_COL));
        if let Some(s) = &opts.sequence_col
            && field_index(s).is_none()
            && !derived.iter().any(|(d, _)| d.eq_ignore_ascii_case(s))
        {
            return Err(analysis(format!("Unknown column '{s}' in 'sequence column'")));
        }
        let delete_field = field_index(DELETE_SIGN);
        let delete_derived = derived.iter().position(|(d, _)| d.eq_ignore_ascii_case(DELETE_SIGN));
        let needs_exprs = !derived.is_empty() || opts.where_expr.is_some() || opts.delete_expr.is_some();
        let defaults = schema.columns.iter().map(|c| c.default_value()).collect();
        let sum_negate =
            schema.columns.iter().map(|c| opts.negative && c.agg == Some(crate::storage::AggType::Sum)).collect();
        Ok(LoadBuilder {
            schema,
            opts,
            names,
            derived,
            sources,
            seq_type,
            seq_field,
            delete_field,
            delete_derived,
            needs_exprs,
            defaults,
            sum_negate,
            errors: Vec::new(),
            filtered: 0,
            unselected: 0,
            total: 0,
            ops: Vec::new(),
            records: Vec::new(),
        })
    }

    /// Number of source fields a record must have.
    pub fn field_count(&self) -> usize {
        self.names.len()
    }

    /// Whether the body can be parsed chunk by chunk (CSV, not compressed).
    pub fn streams_csv(&self) -> bool {
        matches!(self.opts.format, Format::Csv(_)) && !self.opts.gzip
    }

    /// Whether records convert independently of each other (no expressions), so a body can be
    /// split and parsed on several threads.
    pub fn parallelizable(&self) -> bool {
        self.streams_csv() && !self.needs_exprs
    }

    /// Appends the results of a builder that parsed the next part of the body.
    fn absorb(&mut self, other: LoadBuilder<'_>) {
        self.ops.extend(other.ops);
        self.errors.extend(other.errors);
        self.filtered += other.filtered;
        self.unselected += other.unselected;
        self.total += other.total;
        self.records.extend(other.records);
    }

    /// Parses a whole CSV body on `threads` threads, splitting it at line boundaries; the
    /// records keep their order.
    pub fn feed_csv_parallel(&mut self, body: &[u8], threads: usize) -> Result<(), LoadError> {
        let delim = self.opts.line_delimiter.as_slice();
        let mut cuts = vec![0usize];
        for t in 1..threads.max(1) {
            let from = (body.len() * t / threads).max(*cuts.last().unwrap_or(&0));
            match find(&body[from..], delim) {
                Some(i) => cuts.push(from + i + delim.len()),
                None => break,
            }
        }
        cuts.push(body.len());
        cuts.dedup();
        let ncols = self.names.len();
        let (schema, opts) = (self.schema, self.opts);
        let parts: Vec<Result<LoadBuilder<'_>, LoadError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = cuts
                .windows(2)
                .enumerate()
                .map(|(i, w)| {
                    let part = &body[w[0]..w[1]];
                    scope.spawn(move || {
                        let mut b = LoadBuilder::new(schema, opts)?;
                        let mut sp = if i == 0 { CsvSplitter::new(opts) } else { CsvSplitter::default() };
                        sp.feed(part, opts, ncols, &mut |r| b.csv(r));
                        sp.finish(opts, ncols, &mut |r| b.csv(r));
                        Ok(b)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(LoadError("[INTERNAL_ERROR]a parser thread panicked".into()))))
                .collect()
        });
        for p in parts {
            self.absorb(p?);
        }
        Ok(())
    }

    fn convert(&self, ty: &DorisType, text: Option<&str>, nullable: bool, name: &str) -> Result<Value, String> {
        match text {
            None => {
                if nullable {
                    Ok(Value::Null)
                } else {
                    Err(format!("null value for not null column, column={name}"))
                }
            }
            Some(t) => match ty.parse_text(t) {
                Ok(v) => Ok(v),
                // Over-long strings are always filtered; failed conversions become NULL
                // unless strict mode is on.
                Err(e)
                    if self.opts.strict_mode
                        || !nullable
                        || matches!(ty, DorisType::Char(_) | DorisType::Varchar(_) | DorisType::Json) =>
                {
                    Err(e)
                }
                Err(_) => Ok(Value::Null),
            },
        }
    }

    /// The fast path: every target column comes straight from a field.
    fn fast(&self, rec: &[Option<&str>]) -> Result<RowOp, String> {
        let mut values = Vec::with_capacity(self.schema.columns.len());
        for (ci, c) in self.schema.columns.iter().enumerate() {
            let v = match &self.sources[ci] {
                Source::Field(i) => self.convert(&c.ty, rec[*i], c.nullable, &c.name)?,
                _ => self.defaults[ci].clone()?,
            };
            values.push(if self.sum_negate[ci] { v.negate() } else { v });
        }
        let seq = match (&self.seq_type, self.seq_field) {
            (Some(t), Some(i)) => self.convert(t, rec[i], true, "sequence")?,
            _ => Value::Null,
        };
        let delete = match self.opts.merge_type {
            MergeType::Delete => true,
            _ => self
                .delete_field
                .and_then(|i| rec[i])
                .is_some_and(|s| s.trim() != "0" && !s.trim().eq_ignore_ascii_case("false")),
        };
        Ok(RowOp { values, delete, seq })
    }

    /// One well-formed source record.
    pub fn record(&mut self, rec: &[Option<&str>]) {
        self.total += 1;
        if self.needs_exprs {
            self.records.push(rec.iter().map(|t| t.map(str::to_string)).collect());
            return;
        }
        match self.fast(rec) {
            Ok(op) => self.ops.push(op),
            Err(e) => {
                self.filtered += 1;
                self.errors.push(format!("Reason: {e}. src line [{}]; ", render_record(rec)));
            }
        }
    }

    /// A record that could not be parsed (filtered with `reason`).
    pub fn bad_record(&mut self, reason: String) {
        self.total += 1;
        self.filtered += 1;
        self.errors.push(reason);
    }

    /// A CSV splitter result.
    pub fn csv(&mut self, r: CsvRecord) {
        match r {
            Ok(rec) => self.record(rec),
            Err(e) => self.bad_record(e),
        }
    }

    /// Parses a whole (decompressed) body.
    pub fn feed_body(&mut self, body: &[u8]) -> Result<(), LoadError> {
        let opts = self.opts;
        let names = self.names.clone();
        let mut good: Vec<Vec<Option<String>>> = Vec::new();
        let streaming_ok = !self.needs_exprs;
        let (errors, bad) = if streaming_ok {
            let mut ops = std::mem::take(&mut self.ops);
            let mut conv_errors = Vec::new();
            let mut filtered = 0u64;
            let mut total = 0u64;
            let res = for_each_record(body, opts, &names, &mut |rec| {
                total += 1;
                match self.fast(rec) {
                    Ok(op) => ops.push(op),
                    Err(e) => {
                        filtered += 1;
                        conv_errors.push(format!("Reason: {e}. src line [{}]; ", render_record(rec)));
                    }
                }
            });
            self.ops = ops;
            self.total += total;
            self.filtered += filtered;
            self.errors.extend(conv_errors);
            res?
        } else {
            for_each_record(body, opts, &names, &mut |rec| {
                good.push(rec.iter().map(|t| t.map(str::to_string)).collect());
            })?
        };
        self.total += good.len() as u64 + bad;
        self.records.extend(good);
        self.filtered += bad;
        self.errors.extend(errors);
        Ok(())
    }

    /// Evaluates expressions (if any) and returns the write and the accounting.
    pub async fn finish(mut self) -> Result<LoadOutcome, LoadError> {
        let partial_mask: Option<Vec<bool>> =
            self.opts.partial.then(|| self.sources.iter().map(|s| !matches!(s, Source::Default)).collect());
        if self.needs_exprs {
            self.eval_exprs().await?;
        }
        Ok(LoadOutcome {
            write: TableWrite::Rows { ops: self.ops, partial: partial_mask },
            total: self.total,
            filtered: self.filtered,
            unselected: self.unselected,
            errors: self.errors,
        })
    }

    async fn eval_exprs(&mut self) -> Result<(), LoadError> {
        let schema = self.schema;
        let names = &self.names;
        let records = std::mem::take(&mut self.records);
        // Type the source fields that name table columns, keep the rest as text, and let
        // DataFusion evaluate the `columns` expressions, `where` and `delete`.
        let mut field_types: Vec<Option<DorisType>> =
            names.iter().map(|n| schema.column_index(n).map(|i| schema.columns[i].ty.clone())).collect();
        if let (Some(t), Some(i)) = (&self.seq_type, self.seq_field) {
            field_types[i] = Some(t.clone());
        }
        // Temporary fields: numbers when every value is numeric, so `tmp * 2` works.
        for (fi, ft) in field_types.iter_mut().enumerate() {
            if ft.is_some() {
                continue;
            }
            let mut any = false;
            let mut all_int = true;
            let mut all_num = true;
            for t in records.iter().filter_map(|r| r[fi].as_deref()) {
                any = true;
                let t = t.trim();
                if t.parse::<i64>().is_err() {
                    all_int = false;
                    if t.parse::<f64>().is_err() {
                        all_num = false;
                        break;
                    }
                }
            }
            if any && all_int {
                *ft = Some(DorisType::BigInt);
            } else if any && all_num {
                *ft = Some(DorisType::Double);
            }
        }
        let mut kept: Vec<(usize, Vec<Value>)> = Vec::new();
        'rec2: for (ri, rec) in records.iter().enumerate() {
            let mut vals = Vec::with_capacity(names.len());
            for (fi, n) in names.iter().enumerate() {
                let text = rec[fi].as_deref();
                let v = match &field_types[fi] {
                    Some(t) => {
                        let nullable = schema.column_index(n).map(|i| schema.columns[i].nullable).unwrap_or(true);
                        self.convert(t, text, nullable, n)
                    }
                    None => Ok(text.map(|s| Value::Str(s.into())).unwrap_or(Value::Null)),
                };
                match v {
                    Ok(v) => vals.push(v),
                    Err(e) => {
                        self.filtered += 1;
                        self.errors.push(format!("Reason: {e}. src line [{}]; ", render_record(rec)));
                        continue 'rec2;
                    }
                }
            }
            kept.push((ri, vals));
        }
        let fields: Vec<Field> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Field::new(
                    n.to_ascii_lowercase(),
                    field_types[i].as_ref().map(|t| t.arrow_type()).unwrap_or(arrow::datatypes::DataType::Utf8),
                    true,
                )
            })
            .collect();
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(names.len());
        for (i, _) in names.iter().enumerate() {
            let ty = field_types[i].clone().unwrap_or(DorisType::String);
            arrays.push(crate::storage::build_array(&ty, kept.iter().map(|(_, v)| &v[i])).map_err(LoadError)?);
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .map_err(|e| LoadError(format!("[INTERNAL_ERROR]{e}")))?;
        let derived = &self.derived;
        let mut select: Vec<String> =
            derived.iter().enumerate().map(|(i, (_, e))| format!("({e}) AS __e{i}")).collect();
        select.push(format!("({}) AS __where", self.opts.where_expr.as_deref().unwrap_or("true")));
        select.push(format!("({}) AS __delete", self.opts.delete_expr.as_deref().unwrap_or("false")));
        let result = eval_select(batch, &select.join(", ")).await?;
        if result.len() != kept.len() {
            return Err(LoadError("[INTERNAL_ERROR]expression evaluation changed the row count".into()));
        }
        'rec3: for (ri, (orig, vals)) in kept.iter().enumerate() {
            let rec = &records[*orig];
            let where_ok = result[ri][derived.len()].as_deref() == Some("true");
            if !where_ok {
                self.unselected += 1;
                continue;
            }
            let mut values = Vec::with_capacity(schema.columns.len());
            for (ci, c) in schema.columns.iter().enumerate() {
                let v = match &self.sources[ci] {
                    Source::Field(i) => Ok(vals[*i].clone()),
                    Source::Expr(i) => self.convert(&c.ty, result[ri][*i].as_deref(), c.nullable, &c.name),
                    Source::Default => self.defaults[ci].clone(),
                };
                match v {
                    Ok(v) => values.push(v),
                    Err(e) => {
                        self.filtered += 1;
                        self.errors.push(format!("Reason: {e}. src line [{}]; ", render_record(rec)));
                        continue 'rec3;
                    }
                }
            }
            let seq = match (&self.seq_type, self.seq_field) {
                (Some(_), Some(i)) => vals[i].clone(),
                _ => Value::Null,
            };
            let delete = match self.opts.merge_type {
                MergeType::Delete => true,
                MergeType::Merge => result[ri][derived.len() + 1].as_deref() == Some("true"),
                MergeType::Append => match (self.delete_derived, self.delete_field) {
                    (Some(d), _) => result[ri][d].as_deref().is_some_and(|s| s != "0" && s != "false"),
                    (None, Some(f)) => rec[f].as_deref().is_some_and(|s| s.trim() != "0"),
                    _ => false,
                },
            };
            self.ops.push(RowOp { values, delete, seq });
        }
        Ok(())
    }
}

/// Converts a whole load body into a table write with Doris' row accounting.
pub async fn build_write(schema: &TableSchema, opts: &LoadOptions, body: &[u8]) -> Result<LoadOutcome, LoadError> {
    let mut b = LoadBuilder::new(schema, opts)?;
    b.feed_body(body)?;
    b.finish().await
}

fn render_record<S: AsRef<str>>(rec: &[Option<S>]) -> String {
    rec.iter().map(|f| f.as_ref().map(|s| s.as_ref()).unwrap_or("\\N")).collect::<Vec<_>>().join(",")
}

/// Evaluates `SELECT <select> FROM src` in DataFusion; cells come back as text.
async fn eval_select(batch: RecordBatch, select: &str) -> Result<Vec<Vec<Option<String>>>, LoadError> {
    let config = SessionConfig::new().with_target_partitions(1).set_str("datafusion.sql_parser.dialect", "MySQL");
    let ctx = SessionContext::new_with_config(config);
    crate::sql::register_doris_functions(&ctx);
    let table =
        MemTable::try_new(batch.schema(), vec![vec![batch]]).map_err(|e| LoadError(format!("[INTERNAL_ERROR]{e}")))?;
    ctx.register_table("src", Arc::new(table)).map_err(|e| LoadError(format!("[INTERNAL_ERROR]{e}")))?;
    let df = ctx.sql(&crate::ddl::lower_quoted_idents(&format!("SELECT {select} FROM src"))).await.map_err(|e| {
        LoadError(format!("[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = {}", crate::sql::clean_df_error(&e)))
    })?;
    let batches = df.collect().await.map_err(|e| {
        LoadError(format!("[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = {}", crate::sql::clean_df_error(&e)))
    })?;
    let mut rows = Vec::new();
    let fmt = FormatOptions::default();
    for b in &batches {
        let formatters: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &fmt))
            .collect::<Result<_, _>>()
            .map_err(|e| LoadError(format!("[INTERNAL_ERROR]{e}")))?;
        for r in 0..b.num_rows() {
            rows.push(
                b.columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(c, f)| if c.is_null(r) { None } else { Some(f.value(r).to_string()) })
                    .collect(),
            );
        }
    }
    Ok(rows)
}

/// Header names are case-insensitive; a map for tests and non-HTTP callers.
pub fn options_from_map(h: &HashMap<String, String>) -> Result<LoadOptions, String> {
    let get = |k: &str| h.iter().find(|(x, _)| x.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone());
    parse_options(&get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators() {
        assert_eq!(decode_separator("\\x01"), vec![1u8]);
        assert_eq!(decode_separator("||"), b"||".to_vec());
        assert_eq!(decode_separator("\\t"), b"\t".to_vec());
    }

    #[test]
    fn fields_with_enclose() {
        let mut f = Vec::new();
        split_fields(b"1,\"a,b\",3", b",", Some(b'"'), None, &mut f);
        assert_eq!(f.len(), 3);
        assert_eq!(f[1], b"\"a,b\"");
    }

    #[test]
    fn splitter_handles_lines_and_delimiters_across_chunks() {
        let mut h = HashMap::new();
        h.insert("column_separator".to_string(), ",".to_string());
        h.insert("line_delimiter".to_string(), "||".to_string());
        let opts = options_from_map(&h).unwrap();
        let body = b"1,a||22,bb||333,ccc||4,d";
        for cut in 1..body.len() {
            for cut2 in cut..body.len() {
                let mut sp = CsvSplitter::new(&opts);
                let mut got: Vec<String> = Vec::new();
                let mut sink =
                    |r: CsvRecord| got.push(r.unwrap().iter().map(|f| f.unwrap_or("")).collect::<Vec<_>>().join("/"));
                sp.feed(&body[..cut], &opts, 2, &mut sink);
                sp.feed(&body[cut..cut2], &opts, 2, &mut sink);
                sp.feed(&body[cut2..], &opts, 2, &mut sink);
                sp.finish(&opts, 2, &mut sink);
                assert_eq!(got, vec!["1/a", "22/bb", "333/ccc", "4/d"], "cuts {cut} {cut2}");
            }
        }
    }

    #[tokio::test]
    async fn parallel_parse_keeps_order_and_header_skip() {
        let schema = TableSchema {
            columns: vec![crate::storage::Column {
                name: "k".into(),
                ty: DorisType::Int,
                nullable: true,
                default: None,
                comment: String::new(),
                agg: None,
                auto_increment: false,
            }],
            keys_type: KeysType::Duplicate,
            key_count: 1,
            distribution: crate::storage::Distribution::Random(crate::storage::Buckets::Auto),
            comment: String::new(),
            partition_clause: None,
            properties: Vec::new(),
        };
        let mut h = HashMap::new();
        h.insert("format".to_string(), "csv_with_names".to_string());
        let opts = options_from_map(&h).unwrap();
        let body: String = std::iter::once("k\n".to_string()).chain((0..1000).map(|i| format!("{i}\n"))).collect();
        for threads in [1, 2, 3, 7] {
            let mut b = LoadBuilder::new(&schema, &opts).unwrap();
            b.feed_csv_parallel(body.as_bytes(), threads).unwrap();
            let out = b.finish().await.unwrap();
            assert_eq!(out.total, 1000);
            let TableWrite::Rows { ops, .. } = out.write else { panic!() };
            let ks: Vec<Value> = ops.into_iter().map(|o| o.values[0].clone()).collect();
            assert_eq!(ks, (0..1000).map(Value::Int).collect::<Vec<_>>(), "threads {threads}");
        }
    }

    #[test]
    fn columns_header() {
        let mut h = HashMap::new();
        h.insert("columns".to_string(), "k1, tmp, v1 = tmp * 2, v2 = concat('a,b', tmp)".to_string());
        let o = options_from_map(&h).unwrap();
        let cols = o.columns.unwrap();
        assert_eq!(cols.len(), 4);
        assert!(matches!(&cols[2], ColumnMapping::Derived(d, e) if d == "v1" && e == "tmp * 2"));
    }
}
