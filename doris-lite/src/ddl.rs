//! A small recursive-descent front-end for the Doris statements sqlparser cannot parse
//! (CREATE TABLE with key models, DISTRIBUTED BY, PROPERTIES, …) and for the statement
//! shapes doris-lite answers itself. Works over sqlparser's MySQL tokenizer.

use datafusion::sql::sqlparser::dialect::MySqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::storage::{AggType, Buckets, Column, DefaultValue, Distribution, KeysType};
use crate::types::DorisType;

/// A possibly qualified object name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    /// Database, when qualified.
    pub db: Option<String>,
    /// Object name.
    pub name: String,
}

/// `CREATE TABLE` as parsed.
#[derive(Debug, Clone)]
pub struct CreateTable {
    /// Target.
    pub name: ObjectName,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
    /// Columns in order.
    pub columns: Vec<Column>,
    /// Key model and key column names (None = default DUPLICATE on leading columns).
    pub keys: Option<(KeysType, Vec<String>)>,
    /// Table comment.
    pub comment: String,
    /// PARTITION BY clause text.
    pub partition: Option<String>,
    /// DISTRIBUTED BY (None = RANDOM BUCKETS AUTO semantics of the default).
    pub distribution: Option<Distribution>,
    /// PROPERTIES.
    pub properties: Vec<(String, String)>,
}

/// Where ALTER TABLE ADD COLUMN puts a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnPosition {
    /// At the end (of the value columns).
    Default,
    /// FIRST
    First,
    /// AFTER col
    After(String),
}

/// One ALTER TABLE operation.
#[derive(Debug, Clone)]
pub enum AlterOp {
    /// ADD COLUMN c … / ADD COLUMN (c1 …, c2 …)
    AddColumns(Vec<Column>, ColumnPosition),
    /// DROP COLUMN c
    DropColumn(String),
    /// MODIFY COLUMN c <type …> or MODIFY COLUMN c COMMENT '…'
    ModifyColumn(Box<Column>, bool, ColumnPosition),
    /// RENAME COLUMN a b
    RenameColumn(String, String),
    /// SET ("k" = "v")
    SetProperties(Vec<(String, String)>),
    /// RENAME new_name
    Rename(String),
    /// MODIFY COMMENT '…'
    ModifyComment(String),
    /// ENABLE FEATURE "name" [WITH PROPERTIES (…)]
    EnableFeature(String, Vec<(String, String)>),
}

/// Error of the front-end: a Doris-style syntax error text.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(pub String);

type PResult<T> = Result<T, SyntaxError>;

/// Token cursor with Doris helpers.
pub struct Parser<'a> {
    sql: &'a str,
    tokens: Vec<TokenWithSpan>,
    pos: usize,
}

impl<'a> Parser<'a> {
    /// Tokenizes `sql` with the MySQL dialect (backticks, `"strings"`).
    pub fn new(sql: &'a str) -> PResult<Parser<'a>> {
        let dialect = MySqlDialect {};
        let tokens = Tokenizer::new(&dialect, sql)
            .tokenize_with_location()
            .map_err(|e| SyntaxError(format!("Syntax error: {e}")))?
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .collect();
        Ok(Parser { sql, tokens, pos: 0 })
    }

    /// Current token.
    pub fn peek(&self) -> &Token {
        self.peek_at(0)
    }

    /// Token `n` ahead.
    pub fn peek_at(&self, n: usize) -> &Token {
        self.tokens.get(self.pos + n).map(|t| &t.token).unwrap_or(&Token::EOF)
    }

    /// Advances.
    pub fn advance(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn unexpected<T>(&self, what: &str) -> PResult<T> {
        Err(SyntaxError(format!(
            "Syntax error in line 1:\n{}\nmismatched input '{}' expecting {what}",
            self.sql.trim(),
            self.peek()
        )))
    }

    /// A syntax error at the current token, expecting `what`.
    pub fn unexpected_here(&self, what: &str) -> PResult<()> {
        self.unexpected(what)
    }

    /// Is the current token the unquoted keyword `kw`?
    pub fn is_kw(&self, kw: &str) -> bool {
        self.is_kw_at(0, kw)
    }

    /// Keyword test `n` tokens ahead.
    pub fn is_kw_at(&self, n: usize, kw: &str) -> bool {
        matches!(self.peek_at(n), Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw))
    }

    /// Consumes `kw` if present.
    pub fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes the keyword sequence if all present.
    pub fn eat_kws(&mut self, kws: &[&str]) -> bool {
        if kws.iter().enumerate().all(|(i, k)| self.is_kw_at(i, k)) {
            self.pos += kws.len();
            true
        } else {
            false
        }
    }

    /// Requires `kw`.
    pub fn expect_kw(&mut self, kw: &str) -> PResult<()> {
        if self.eat_kw(kw) { Ok(()) } else { self.unexpected(&format!("'{kw}'")) }
    }

    /// Consumes `t` if present.
    pub fn eat(&mut self, t: &Token) -> bool {
        if self.peek() == t {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Requires `t`.
    pub fn expect(&mut self, t: &Token) -> PResult<()> {
        if self.eat(t) { Ok(()) } else { self.unexpected(&format!("'{t}'")) }
    }

    /// At the end (a trailing `;` is allowed).
    pub fn at_end(&mut self) -> bool {
        while self.eat(&Token::SemiColon) {}
        matches!(self.peek(), Token::EOF)
    }

    /// Requires the end of input.
    pub fn expect_end(&mut self) -> PResult<()> {
        if self.at_end() { Ok(()) } else { self.unexpected("<EOF>") }
    }

    /// An identifier (quoted or not).
    pub fn ident(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Token::Word(w) => {
                self.pos += 1;
                Ok(w.value)
            }
            _ => self.unexpected("an identifier"),
        }
    }

    /// `name` or `db.name`.
    pub fn object_name(&mut self) -> PResult<ObjectName> {
        let first = self.ident()?;
        if self.eat(&Token::Period) {
            let second = self.ident()?;
            if self.eat(&Token::Period) {
                // catalog.db.table: the catalog is ignored.
                let third = self.ident()?;
                return Ok(ObjectName { db: Some(second), name: third });
            }
            Ok(ObjectName { db: Some(first), name: second })
        } else {
            Ok(ObjectName { db: None, name: first })
        }
    }

    /// A string literal ('…' or "…").
    pub fn string(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => {
                self.pos += 1;
                Ok(s)
            }
            _ => self.unexpected("a string literal"),
        }
    }

    /// A literal rendered as text (string, number, NULL, TRUE/FALSE, word).
    pub fn literal_text(&mut self) -> PResult<String> {
        let neg = self.eat(&Token::Minus);
        let s = match self.advance() {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => s,
            Token::Number(n, _) => n,
            Token::Word(w) => w.value,
            _ => {
                self.pos -= 1;
                return self.unexpected("a literal");
            }
        };
        Ok(if neg { format!("-{s}") } else { s })
    }

    /// An unsigned integer.
    pub fn number(&mut self) -> PResult<u32> {
        match self.peek().clone() {
            Token::Number(n, _) => {
                self.pos += 1;
                n.parse().map_err(|_| SyntaxError(format!("Invalid number: {n}")))
            }
            _ => self.unexpected("a number"),
        }
    }

    /// The source text from the current token to the end (for handing to DataFusion).
    pub fn rest(&self) -> &'a str {
        match self.tokens.get(self.pos) {
            Some(t) => {
                let off = offset_of(self.sql, t.span.start.line, t.span.start.column);
                self.sql[off..].trim().trim_end_matches(';').trim_end()
            }
            None => "",
        }
    }

    /// `( ident, … )`
    pub fn ident_list(&mut self) -> PResult<Vec<String>> {
        self.expect(&Token::LParen)?;
        let mut v = Vec::new();
        loop {
            v.push(self.ident()?);
            if !self.eat(&Token::Comma) {
                break;
            }
        }
        self.expect(&Token::RParen)?;
        Ok(v)
    }

    /// `( "k" = "v", … )`
    pub fn properties(&mut self) -> PResult<Vec<(String, String)>> {
        self.expect(&Token::LParen)?;
        let mut v = Vec::new();
        if self.eat(&Token::RParen) {
            return Ok(v);
        }
        loop {
            let k = self.string()?;
            self.expect(&Token::Eq)?;
            let val = self.literal_text()?;
            v.push((k, val));
            if !self.eat(&Token::Comma) {
                break;
            }
        }
        self.expect(&Token::RParen)?;
        Ok(v)
    }

    /// Skips a balanced parenthesised group, returning its text.
    fn skip_group(&mut self) -> PResult<String> {
        let mut depth = 0usize;
        let mut out = String::new();
        loop {
            let t = self.advance();
            match &t {
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                Token::EOF => return self.unexpected("')'"),
                _ => {}
            }
            push_token(&mut out, &t);
            if depth == 0 {
                return Ok(out);
            }
        }
    }

    /// A Doris type: `INT`, `VARCHAR(10)`, `DECIMAL(10,2)`, `ARRAY<INT>`, `MAP<K,V>`, ….
    pub fn data_type(&mut self) -> PResult<DorisType> {
        let name = self.ident()?;
        let mut raw = name.clone();
        let mut args = Vec::new();
        if self.eat(&Token::LParen) {
            raw.push('(');
            loop {
                if self.eat(&Token::Mul) {
                    raw.push('*');
                } else {
                    let n = self.number()?;
                    raw.push_str(&n.to_string());
                    args.push(n);
                }
                if self.eat(&Token::Comma) {
                    raw.push(',');
                } else {
                    break;
                }
            }
            self.expect(&Token::RParen)?;
            raw.push(')');
        } else if matches!(self.peek(), Token::Lt) {
            let mut depth = 0i32;
            loop {
                let t = self.advance();
                match &t {
                    Token::Lt => depth += 1,
                    Token::Gt => depth -= 1,
                    Token::ShiftRight => depth -= 2,
                    Token::EOF => return self.unexpected("'>'"),
                    _ => {}
                }
                match &t {
                    Token::Word(w) => raw.push_str(&w.value),
                    other => raw.push_str(&other.to_string()),
                }
                if depth <= 0 {
                    break;
                }
            }
        }
        DorisType::from_parts(&name, &args, &raw).map_err(SyntaxError)
    }

    /// A column definition.
    pub fn column_def(&mut self) -> PResult<Column> {
        let name = self.ident()?;
        let ty = self.data_type()?;
        let mut col = Column {
            name,
            ty,
            nullable: true,
            default: None,
            comment: String::new(),
            agg: None,
            auto_increment: false,
        };
        let mut explicit_null = None;
        loop {
            if self.eat_kw("KEY") {
                continue;
            }
            if let Token::Word(w) = self.peek()
                && w.quote_style.is_none()
                && let Some(a) = AggType::parse(&w.value)
            {
                self.pos += 1;
                col.agg = Some(a);
                continue;
            }
            if self.eat_kws(&["NOT", "NULL"]) {
                explicit_null = Some(false);
            } else if self.eat_kw("NULL") {
                explicit_null = Some(true);
            } else if self.eat_kw("AUTO_INCREMENT") {
                col.auto_increment = true;
                if matches!(self.peek(), Token::LParen) {
                    self.skip_group()?;
                }
            } else if self.eat_kw("DEFAULT") {
                col.default = Some(if self.eat_kw("NULL") {
                    DefaultValue::Null
                } else if self.eat_kw("CURRENT_TIMESTAMP") || self.eat_kw("NOW") {
                    let mut p = None;
                    if self.eat(&Token::LParen) {
                        if !matches!(self.peek(), Token::RParen) {
                            p = Some(self.number()? as u8);
                        }
                        self.expect(&Token::RParen)?;
                    }
                    DefaultValue::CurrentTimestamp(p)
                } else {
                    DefaultValue::Literal(self.literal_text()?)
                });
            } else if self.eat_kws(&["ON", "UPDATE"]) {
                self.ident()?;
                if matches!(self.peek(), Token::LParen) {
                    self.skip_group()?;
                }
            } else if self.eat_kw("COMMENT") {
                col.comment = self.string()?;
            } else {
                break;
            }
        }
        // Doris: columns are NULL unless NOT NULL; key columns of the auto-increment kind are NOT NULL.
        col.nullable = explicit_null.unwrap_or(!col.auto_increment);
        Ok(col)
    }

    fn buckets(&mut self) -> PResult<Buckets> {
        if self.eat_kw("BUCKETS") {
            if self.eat_kw("AUTO") { Ok(Buckets::Auto) } else { Ok(Buckets::Fixed(self.number()?)) }
        } else {
            Ok(Buckets::Auto)
        }
    }

    /// `CREATE TABLE` after the `CREATE TABLE` keywords (LIKE handled by the caller).
    pub fn create_table_body(&mut self, name: ObjectName, if_not_exists: bool) -> PResult<CreateTable> {
        self.expect(&Token::LParen)?;
        let mut columns = Vec::new();
        loop {
            if self.is_kw("INDEX") {
                // Inverted / bloom indexes: accepted and ignored.
                while !matches!(self.peek(), Token::Comma | Token::RParen | Token::EOF) {
                    if matches!(self.peek(), Token::LParen) {
                        self.skip_group()?;
                    } else {
                        self.advance();
                    }
                }
            } else {
                columns.push(self.column_def()?);
            }
            if !self.eat(&Token::Comma) {
                break;
            }
        }
        self.expect(&Token::RParen)?;
        let mut ct = CreateTable {
            name,
            if_not_exists,
            columns,
            keys: None,
            comment: String::new(),
            partition: None,
            distribution: None,
            properties: Vec::new(),
        };
        loop {
            if self.at_end() {
                break;
            }
            if self.eat_kw("ENGINE") {
                self.expect(&Token::Eq)?;
                self.ident()?;
            } else if self.is_kw("DUPLICATE") || self.is_kw("UNIQUE") || self.is_kw("AGGREGATE") {
                let kt = match self.ident()?.to_ascii_uppercase().as_str() {
                    "DUPLICATE" => KeysType::Duplicate,
                    "UNIQUE" => KeysType::Unique,
                    _ => KeysType::Aggregate,
                };
                self.expect_kw("KEY")?;
                ct.keys = Some((kt, self.ident_list()?));
            } else if self.eat_kws(&["CLUSTER", "BY"]) {
                self.ident_list()?;
            } else if self.eat_kw("COMMENT") {
                ct.comment = self.string()?;
            } else if self.is_kw("PARTITION") || self.is_kw("AUTO") {
                let mut text = String::new();
                while !(self.is_kw("DISTRIBUTED")
                    || self.is_kw("PROPERTIES")
                    || self.is_kw("ROLLUP")
                    || matches!(self.peek(), Token::EOF | Token::SemiColon))
                {
                    if matches!(self.peek(), Token::LParen) {
                        let g = self.skip_group()?;
                        text.push_str(&g);
                    } else {
                        let t = self.advance();
                        push_token(&mut text, &t);
                    }
                }
                ct.partition = Some(text.trim().to_string());
            } else if self.eat_kws(&["DISTRIBUTED", "BY"]) {
                if self.eat_kw("HASH") {
                    let cols = self.ident_list()?;
                    let b = self.buckets()?;
                    ct.distribution = Some(Distribution::Hash(cols, b));
                } else if self.eat_kw("RANDOM") {
                    let b = self.buckets()?;
                    ct.distribution = Some(Distribution::Random(b));
                } else {
                    return self.unexpected("HASH or RANDOM");
                }
            } else if self.eat_kw("ROLLUP") {
                self.skip_group()?;
            } else if self.eat_kw("PROPERTIES") {
                ct.properties = self.properties()?;
            } else {
                return self.unexpected("a table clause");
            }
        }
        Ok(ct)
    }

    /// `ALTER TABLE name` operations after the name.
    pub fn alter_ops(&mut self) -> PResult<Vec<AlterOp>> {
        let mut ops = Vec::new();
        loop {
            if self.eat_kw("ADD") {
                self.expect_kw("COLUMN")?;
                let cols = if matches!(self.peek(), Token::LParen) {
                    self.advance();
                    let mut cols = Vec::new();
                    loop {
                        cols.push(self.column_def()?);
                        if !self.eat(&Token::Comma) {
                            break;
                        }
                    }
                    self.expect(&Token::RParen)?;
                    cols
                } else {
                    vec![self.column_def()?]
                };
                let pos = self.position()?;
                ops.push(AlterOp::AddColumns(cols, pos));
            } else if self.eat_kw("DROP") {
                self.expect_kw("COLUMN")?;
                ops.push(AlterOp::DropColumn(self.ident()?));
            } else if self.eat_kw("MODIFY") {
                if self.eat_kw("COMMENT") {
                    ops.push(AlterOp::ModifyComment(self.string()?));
                } else {
                    self.expect_kw("COLUMN")?;
                    if self.is_kw_at(1, "COMMENT") {
                        let name = self.ident()?;
                        self.expect_kw("COMMENT")?;
                        let comment = self.string()?;
                        let col = Column {
                            name,
                            ty: DorisType::String,
                            nullable: true,
                            default: None,
                            comment,
                            agg: None,
                            auto_increment: false,
                        };
                        ops.push(AlterOp::ModifyColumn(Box::new(col), true, ColumnPosition::Default));
                    } else {
                        let col = self.column_def()?;
                        let pos = self.position()?;
                        ops.push(AlterOp::ModifyColumn(Box::new(col), false, pos));
                    }
                }
            } else if self.eat_kw("RENAME") {
                if self.eat_kw("COLUMN") {
                    let a = self.ident()?;
                    let b = self.ident()?;
                    ops.push(AlterOp::RenameColumn(a, b));
                } else {
                    ops.push(AlterOp::Rename(self.ident()?));
                }
            } else if self.eat_kw("SET") {
                ops.push(AlterOp::SetProperties(self.properties()?));
            } else if self.eat_kws(&["ENABLE", "FEATURE"]) {
                let feature = self.string()?;
                let props = if self.eat_kws(&["WITH", "PROPERTIES"]) { self.properties()? } else { Vec::new() };
                ops.push(AlterOp::EnableFeature(feature, props));
            } else {
                return self.unexpected("ADD, DROP, MODIFY, RENAME, SET or ENABLE FEATURE");
            }
            if !self.eat(&Token::Comma) {
                break;
            }
        }
        self.expect_end()?;
        Ok(ops)
    }

    fn position(&mut self) -> PResult<ColumnPosition> {
        if self.eat_kw("FIRST") {
            Ok(ColumnPosition::First)
        } else if self.eat_kw("AFTER") {
            Ok(ColumnPosition::After(self.ident()?))
        } else {
            // `ADD COLUMN … TO rollup` and PROPERTIES are ignored.
            if self.eat_kw("TO") || self.eat_kw("IN") {
                self.ident()?;
            }
            Ok(ColumnPosition::Default)
        }
    }
}

/// Lower-cases backtick-quoted identifiers: Doris column names are case-insensitive and the
/// DataFusion side registers every name in lower case (unquoted names are normalised there).
pub fn lower_quoted_idents(sql: &str) -> String {
    let dialect = MySqlDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        return sql.to_string();
    };
    let mut out = sql.to_string();
    // Replace from the end so earlier offsets stay valid.
    for t in tokens.iter().rev() {
        if let Token::Word(w) = &t.token
            && w.quote_style == Some('`')
            && w.value.chars().any(|c| c.is_ascii_uppercase())
        {
            let start = offset_of(sql, t.span.start.line, t.span.start.column);
            let end = offset_of(sql, t.span.end.line, t.span.end.column);
            if end > start && end <= out.len() {
                out.replace_range(start..end, &format!("`{}`", w.value.to_ascii_lowercase()));
            }
        }
    }
    out
}

fn push_token(out: &mut String, t: &Token) {
    let s = match t {
        Token::Word(w) if w.quote_style.is_some() => format!("`{}`", w.value),
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    let glue = matches!(t, Token::LParen | Token::RParen | Token::Comma) || out.ends_with('(') || out.is_empty();
    if !glue {
        out.push(' ');
    }
    out.push_str(&s);
}

/// Byte offset of a 1-based (line, column-in-chars) position.
pub(crate) fn offset_of(sql: &str, line: u64, column: u64) -> usize {
    let mut cur_line = 1u64;
    let mut cur_col = 1u64;
    for (i, ch) in sql.char_indices() {
        if cur_line == line && cur_col == column {
            return i;
        }
        if ch == '\n' {
            cur_line += 1;
            cur_col = 1;
        } else {
            cur_col += 1;
        }
    }
    sql.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STUDENT: &str = "CREATE TABLE test.student (
    `id` INT,
    `name` VARCHAR(256),
    `age` INT
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 1
PROPERTIES (
    \"replication_allocation\" = \"tag.location.default: 3\"
);";

    #[test]
    fn parses_quick_start_ddl() {
        let mut p = Parser::new(STUDENT).unwrap();
        p.expect_kw("CREATE").unwrap();
        p.expect_kw("TABLE").unwrap();
        let name = p.object_name().unwrap();
        let ct = p.create_table_body(name, false).unwrap();
        assert_eq!(ct.name.db.as_deref(), Some("test"));
        assert_eq!(ct.columns.len(), 3);
        assert_eq!(ct.columns[1].ty, DorisType::Varchar(256));
        assert_eq!(ct.keys, Some((KeysType::Unique, vec!["id".to_string()])));
        assert_eq!(ct.distribution, Some(Distribution::Hash(vec!["id".into()], Buckets::Fixed(1))));
        assert_eq!(ct.properties[0].1, "tag.location.default: 3");
    }

    #[test]
    fn parses_aggregate_partition_and_complex_types() {
        let sql = "CREATE TABLE IF NOT EXISTS t (k1 DATE NOT NULL, k2 BIGINT, a ARRAY<ARRAY<INT>>, \
                   v BIGINT SUM DEFAULT \"0\" COMMENT 'x', m MAP<STRING,INT> REPLACE) ENGINE=OLAP \
                   AGGREGATE KEY(k1, k2) COMMENT 'c' PARTITION BY RANGE(k1) (PARTITION p1 VALUES LESS THAN (\"2024-01-01\")) \
                   DISTRIBUTED BY RANDOM BUCKETS AUTO PROPERTIES (\"replication_num\" = \"1\")";
        let mut p = Parser::new(sql).unwrap();
        p.expect_kw("CREATE").unwrap();
        p.expect_kw("TABLE").unwrap();
        assert!(p.eat_kws(&["IF", "NOT", "EXISTS"]));
        let name = p.object_name().unwrap();
        let ct = p.create_table_body(name, true).unwrap();
        assert_eq!(ct.columns[3].agg, Some(AggType::Sum));
        assert!(!ct.columns[0].nullable);
        assert!(ct.partition.unwrap().starts_with("PARTITION BY RANGE"));
        assert_eq!(ct.distribution, Some(Distribution::Random(Buckets::Auto)));
        assert_eq!(ct.comment, "c");
    }

    #[test]
    fn lowers_quoted_identifiers_only() {
        assert_eq!(
            lower_quoted_idents("SELECT `COLUMN_NAME` FROM `information_schema`.`COLUMNS` WHERE `TABLE_SCHEMA`='Test'"),
            "SELECT `column_name` FROM `information_schema`.`columns` WHERE `table_schema`='Test'"
        );
    }

    #[test]
    fn rest_returns_source_text() {
        let mut p = Parser::new("INSERT INTO t\n  VALUES (1, \"x\")").unwrap();
        p.advance();
        p.advance();
        p.advance();
        assert_eq!(p.rest(), "VALUES (1, \"x\")");
    }
}
