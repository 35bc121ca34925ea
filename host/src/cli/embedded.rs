//! The embedded doris-lite of `fenodes = "embedded"`: its start, `init_sql`, and the target tables
//! printed at the end of a bounded run, as `mysql` would show them.

use std::path::Path;

use anyhow::Context;

use crate::doris::StreamLoadClient;

/// The statements of an SQL file: split on `;` outside quotes; `--` comments dropped.
pub fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if quote.is_none() && trimmed.starts_with("--") {
            continue;
        }
        for c in line.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '\'' || c == '"' || c == '`' => quote = Some(c),
                None if c == ';' => {
                    if !cur.trim().is_empty() {
                        out.push(cur.trim().to_string());
                    }
                    cur.clear();
                    continue;
                }
                None => {}
            }
            cur.push(c);
        }
        cur.push('\n');
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The embedded doris-lite's MySQL port as a `doris.jdbc_url`.
pub fn jdbc_url(handle: &doris_lite::Handle) -> String {
    let addr = handle.query_addr();
    format!("jdbc:mysql://{}:{}", addr.ip(), addr.port())
}

/// Run `init_sql` (relative to the pipeline file) on the embedded doris-lite.
pub async fn run_init_sql(file: &Path, init: &Path, client: &StreamLoadClient) -> anyhow::Result<()> {
    let path = file.parent().unwrap_or(Path::new(".")).join(init);
    let text = std::fs::read_to_string(&path).with_context(|| format!("doris.init_sql: {}", path.display()))?;
    for stmt in statements(&text) {
        client
            .query("information_schema", &stmt)
            .await
            .with_context(|| format!("doris.init_sql {}: {}", path.display(), stmt.lines().next().unwrap_or("")))?;
    }
    Ok(())
}

/// `table` as the mysql CLI prints a result.
pub async fn print_table(client: &StreamLoadClient, table: &str) -> anyhow::Result<()> {
    let (db, _) = table.split_once('.').unwrap_or(("information_schema", table));
    let (names, rows) = client.query(db, &format!("SELECT * FROM {table} ORDER BY 1 LIMIT 50")).await?;
    let widths: Vec<usize> = (0..names.len())
        .map(|i| {
            rows.iter().map(|r| r.get(i).map_or(0, |v| v.chars().count())).chain([names[i].len()]).max().unwrap_or(0)
        })
        .collect();
    let rule = format!("+{}+", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
    // Numbers are right-aligned, as mysql prints them.
    let numeric: Vec<bool> = (0..names.len())
        .map(|i| rows.iter().all(|r| r.get(i).is_some_and(|v| v == "NULL" || v.parse::<f64>().is_ok())))
        .collect();
    let line = |cells: &[String], header: bool| {
        let cells: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((c, w), n)| if *n && !header { format!(" {c:>w$} ") } else { format!(" {c:<w$} ") })
            .collect();
        format!("|{}|", cells.join("|"))
    };
    println!("mysql> select * from {table};");
    println!("{rule}\n{}\n{rule}", line(&names, true));
    for r in &rows {
        println!("{}", line(r, false));
    }
    println!("{rule}\n{} rows in set", rows.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn statements_split_outside_quotes() {
        let sql = "-- setup\nCREATE DATABASE IF NOT EXISTS test;\nINSERT INTO t VALUES (1, 'a;b');\n\nSELECT 1";
        assert_eq!(
            super::statements(sql),
            ["CREATE DATABASE IF NOT EXISTS test", "INSERT INTO t VALUES (1, 'a;b')", "SELECT 1"]
        );
    }
}
