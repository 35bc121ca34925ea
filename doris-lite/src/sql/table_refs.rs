//! Doris-only table references in a SELECT: `t TABLET(id, …)` (§4.4) and `t@incr(…)` (§5.4).
//! Each is cut out of the statement and replaced by a generated relation name, which the
//! executor registers with the rows it stands for.

use crate::sql::SqlError;

/// What a special reference reads.
#[derive(Debug, Clone, PartialEq)]
pub enum RefKind {
    /// Only these tablets.
    Tablets(Vec<i64>),
    /// Change records, with the `@incr` parameters as written (key, value).
    Incr(Vec<(String, String)>),
}

/// One special reference found in a statement.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecialRef {
    /// Database, when qualified.
    pub db: Option<String>,
    /// Table.
    pub table: String,
    /// What to read.
    pub kind: RefKind,
    /// The relation name put in its place (`__dl.refs.rN`).
    pub relation: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String, bool),
    Str(String),
    Punct(char),
}

/// Tokens with byte spans; comments and white space dropped.
fn tokenize(sql: &str) -> Vec<(Tok, usize, usize)> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = sql[i + 2..].find("*/").map(|j| i + 2 + j + 2).unwrap_or(b.len());
        } else if (c == b'-' && b.get(i + 1) == Some(&b'-')) || c == b'#' {
            i = sql[i..].find('\n').map(|j| i + j + 1).unwrap_or(b.len());
        } else if c == b'\'' || c == b'"' || c == b'`' {
            let start = i;
            let mut text = String::new();
            i += 1;
            while i < b.len() {
                if b[i] == b'\\' && c != b'`' && i + 1 < b.len() {
                    text.push(b[i + 1] as char);
                    i += 2;
                } else if b[i] == c {
                    if b.get(i + 1) == Some(&c) {
                        text.push(c as char);
                        i += 2;
                    } else {
                        i += 1;
                        break;
                    }
                } else {
                    let ch = sql[i..].chars().next().unwrap_or(' ');
                    text.push(ch);
                    i += ch.len_utf8();
                }
            }
            let tok = if c == b'`' { Tok::Ident(text, true) } else { Tok::Str(text) };
            out.push((tok, start, i));
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80) {
                i += 1;
            }
            out.push((Tok::Ident(sql[start..i].to_string(), false), start, i));
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push((Tok::Punct(ch), i, i + ch.len_utf8()));
            i += ch.len_utf8();
        }
    }
    out
}

/// Words after a table reference that are not an alias.
const NOT_ALIAS: &[&str] = &[
    "WHERE",
    "ORDER",
    "LIMIT",
    "GROUP",
    "HAVING",
    "JOIN",
    "LEFT",
    "RIGHT",
    "INNER",
    "FULL",
    "CROSS",
    "UNION",
    "ON",
    "USING",
    "PARTITION",
    "OFFSET",
    "NATURAL",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "QUALIFY",
    "FOR",
];

fn is_word(t: &Tok, w: &str) -> bool {
    matches!(t, Tok::Ident(s, false) if s.eq_ignore_ascii_case(w))
}

fn syntax(msg: impl Into<String>) -> SqlError {
    SqlError { code: 1064, message: msg.into() }
}

/// Finds `TABLET(...)` and `@incr(...)` references; returns the statement with each replaced by
/// its relation (aliased to the table name unless the statement gives an alias) and the refs.
pub fn extract(sql: &str) -> Result<(String, Vec<SpecialRef>), SqlError> {
    let toks = tokenize(sql);
    let mut refs = Vec::new();
    let mut out = String::with_capacity(sql.len());
    let mut copied = 0;
    let mut i = 0;
    while i < toks.len() {
        // A table name: ident (. ident)*, then `@incr (` or `TABLET (`.
        let Tok::Ident(_, _) = &toks[i].0 else {
            i += 1;
            continue;
        };
        let mut parts = vec![i];
        let mut j = i + 1;
        while j + 1 < toks.len() && toks[j].0 == Tok::Punct('.') && matches!(toks[j + 1].0, Tok::Ident(..)) {
            parts.push(j + 1);
            j += 2;
        }
        let incr = j + 2 < toks.len()
            && toks[j].0 == Tok::Punct('@')
            && is_word(&toks[j + 1].0, "incr")
            && toks[j + 2].0 == Tok::Punct('(');
        let tablet = j + 1 < toks.len()
            && is_word(&toks[j].0, "TABLET")
            && toks[j + 1].0 == Tok::Punct('(')
            && !matches!(&toks[i].0, Tok::Ident(w, false) if w.eq_ignore_ascii_case("FROM") || w.eq_ignore_ascii_case("JOIN"));
        if !incr && !tablet {
            i = j.max(i + 1);
            continue;
        }
        let names: Vec<String> = parts
            .iter()
            .map(|&p| match &toks[p].0 {
                Tok::Ident(s, _) => s.clone(),
                _ => String::new(),
            })
            .collect();
        let (db, table) = match names.as_slice() {
            [t] => (None, t.clone()),
            [.., d, t] => (Some(d.clone()), t.clone()),
            [] => (None, String::new()),
        };
        let open = if incr { j + 2 } else { j + 1 };
        let mut k = open + 1;
        let kind = if incr {
            let mut params = Vec::new();
            loop {
                match toks.get(k).map(|t| &t.0) {
                    Some(Tok::Punct(')')) => break,
                    Some(Tok::Str(key)) => {
                        if toks.get(k + 1).map(|t| &t.0) != Some(&Tok::Punct('=')) {
                            return Err(syntax("Unsupported parameter in incr query"));
                        }
                        let Some(Tok::Str(val)) = toks.get(k + 2).map(|t| &t.0) else {
                            return Err(syntax("Unsupported parameter in incr query"));
                        };
                        params.push((key.clone(), val.clone()));
                        k += 3;
                        if toks.get(k).map(|t| &t.0) == Some(&Tok::Punct(',')) {
                            k += 1;
                        }
                    }
                    _ => return Err(syntax("Unsupported parameter in incr query")),
                }
            }
            RefKind::Incr(params)
        } else {
            let mut ids = Vec::new();
            loop {
                match toks.get(k).map(|t| &t.0) {
                    Some(Tok::Punct(')')) if !ids.is_empty() => break,
                    Some(Tok::Ident(n, false)) => {
                        let id = n.parse::<i64>().map_err(|_| syntax(format!("Invalid tablet id: {n}")))?;
                        ids.push(id);
                        k += 1;
                        if toks.get(k).map(|t| &t.0) == Some(&Tok::Punct(',')) {
                            k += 1;
                        }
                    }
                    _ => return Err(syntax("Syntax error: expected tablet ids in TABLET(...)")),
                }
            }
            RefKind::Tablets(ids)
        };
        let close = k;
        let relation = format!("__dl.refs.r{}", refs.len());
        out.push_str(&sql[copied..toks[i].1]);
        out.push_str(&relation);
        let has_alias = match toks.get(close + 1).map(|t| &t.0) {
            Some(Tok::Ident(w, quoted)) => *quoted || !NOT_ALIAS.iter().any(|k| w.eq_ignore_ascii_case(k)),
            _ => false,
        };
        if !has_alias {
            out.push_str(&format!(" AS `{}`", table.replace('`', "``")));
        }
        copied = toks[close].2;
        refs.push(SpecialRef { db, table, kind, relation });
        i = close + 1;
    }
    out.push_str(&sql[copied..]);
    Ok((out, refs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flink_tablet_form() {
        let sql = "/* ApplicationName=Flink ArrowFlightSQL Query */ SELECT `k`,`v` FROM `test`.`t`  TABLET(10002,10003)  WHERE k > 1 LIMIT 5";
        let (out, refs) = extract(sql).unwrap();
        assert_eq!(
            out,
            "/* ApplicationName=Flink ArrowFlightSQL Query */ SELECT `k`,`v` FROM __dl.refs.r0 AS `t`  WHERE k > 1 LIMIT 5"
        );
        assert_eq!(refs[0].db.as_deref(), Some("test"));
        assert_eq!(refs[0].table, "t");
        assert_eq!(refs[0].kind, RefKind::Tablets(vec![10002, 10003]));
    }

    #[test]
    fn incr_params_alias_and_quotes() {
        let sql = "SELECT * FROM db.t@incr('startTimestamp' = '2024-01-01 10:03:00', \"incrementType\"=\"DETAIL\") x ORDER BY 1";
        let (out, refs) = extract(sql).unwrap();
        assert_eq!(out, "SELECT * FROM __dl.refs.r0 x ORDER BY 1");
        assert_eq!(
            refs[0].kind,
            RefKind::Incr(vec![
                ("startTimestamp".into(), "2024-01-01 10:03:00".into()),
                ("incrementType".into(), "DETAIL".into())
            ])
        );
        let (out, refs) = extract("select count(*) from t@incr()").unwrap();
        assert_eq!(out, "select count(*) from __dl.refs.r0 AS `t`");
        assert_eq!(refs[0].kind, RefKind::Incr(vec![]));
        assert!(extract("select * from t@incr(startTimestamp = 1)").is_err());
        // Strings that merely look like references are left alone.
        let (out, refs) = extract("select 't@incr(1)', 'x TABLET(1)'").unwrap();
        assert_eq!((out.as_str(), refs.len()), ("select 't@incr(1)', 'x TABLET(1)'", 0));
    }
}
