//! Statement text by MySQL's lexical rules: tokens with their byte ranges, splitting a text
//! into statements, prepared statements' `?` placeholders and string literals.

use datafusion::sql::sqlparser::tokenizer::Token;

use super::SqlError;

/// The tokens of a statement with their byte ranges in it (MySQL's lexical rules: quotes,
/// backslash escapes, comments).
pub(crate) fn token_ranges(sql: &str) -> Result<Vec<(Token, std::ops::Range<usize>)>, SqlError> {
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;
    let dialect = datafusion::sql::sqlparser::dialect::MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError { code: 1064, message: format!("Syntax error: {e}") })?;
    Ok(tokens
        .into_iter()
        .map(|t| {
            let start = crate::ddl::offset_of(sql, t.span.start.line, t.span.start.column);
            let end = crate::ddl::offset_of(sql, t.span.end.line, t.span.end.column);
            (t.token, start..end.max(start))
        })
        .collect())
}

/// The statements of one query text (`a; b`), split at the semicolons outside quotes and
/// comments; empty statements are dropped. A text that does not tokenize is one statement (its
/// error comes from running it).
pub fn split_statements(sql: &str) -> Vec<&str> {
    let Ok(tokens) = token_ranges(sql) else { return vec![sql] };
    let mut out = Vec::new();
    let mut start = 0;
    for (t, r) in &tokens {
        if *t == Token::SemiColon {
            out.push(&sql[start..r.start]);
            start = r.end;
        }
    }
    out.push(&sql[start..]);
    let kept: Vec<&str> = out.into_iter().filter(|s| !strip_leading_comments(s.trim()).trim().is_empty()).collect();
    if kept.is_empty() { vec![sql] } else { kept }
}

/// The byte ranges of the `?` placeholders of a prepared statement.
pub fn placeholders(sql: &str) -> Result<Vec<std::ops::Range<usize>>, SqlError> {
    Ok(token_ranges(sql)?
        .into_iter()
        .filter(|(t, _)| matches!(t, Token::Placeholder(p) if p == "?"))
        .map(|(_, r)| r)
        .collect())
}

/// `sql` with each placeholder replaced by its SQL literal, in order.
pub fn bind(sql: &str, holes: &[std::ops::Range<usize>], literals: &[String]) -> String {
    let mut out = String::with_capacity(sql.len() + literals.iter().map(String::len).sum::<usize>());
    let mut at = 0;
    for (r, lit) in holes.iter().zip(literals) {
        out.push_str(&sql[at..r.start]);
        out.push_str(lit);
        at = r.end;
    }
    out.push_str(&sql[at..]);
    out
}

/// A string as a MySQL string literal.
pub fn quote_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

pub(super) fn strip_leading_comments(sql: &str) -> &str {
    let mut s = sql.trim_start();
    loop {
        if let Some(r) = s.strip_prefix("/*") {
            match r.find("*/") {
                Some(i) => s = r[i + 2..].trim_start(),
                None => return s,
            }
        } else if s.starts_with("--") || s.starts_with('#') {
            match s.find('\n') {
                Some(i) => s = s[i + 1..].trim_start(),
                None => return "",
            }
        } else {
            return s;
        }
    }
}
