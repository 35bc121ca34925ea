//! The embedded doris-lite of `fenodes = "embedded"`: its start, `init_sql`, and the target tables
//! printed at the end of a bounded run, as `mysql` would show them.

use std::path::Path;

use anyhow::Context;

use crate::doris::{Credentials, FeClient};

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

/// The doris-lite of `fenodes = "embedded"`, running in this process. Only a `sluice` built with
/// the `embedded` feature (the default) carries it.
pub struct EmbeddedDoris {
    #[cfg(feature = "embedded")]
    handle: doris_lite::Handle,
    #[cfg(not(feature = "embedded"))]
    never: std::convert::Infallible,
}

impl EmbeddedDoris {
    /// Start it with its data under `data_dir`, and say where it listens.
    #[cfg(feature = "embedded")]
    pub async fn start(data_dir: std::path::PathBuf) -> anyhow::Result<EmbeddedDoris> {
        std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let config = doris_lite::Config { data_dir: Some(data_dir), ..doris_lite::Config::ephemeral() };
        let handle = doris_lite::DorisLite::start(config).await.context("starting the embedded doris-lite")?;
        eprintln!(
            "embedded doris-lite: FE http://{}  ·  mysql -h {} -P {} -u root",
            handle.fe_http_addr(),
            handle.query_addr().ip(),
            handle.query_addr().port()
        );
        Ok(EmbeddedDoris { handle })
    }

    #[cfg(not(feature = "embedded"))]
    pub async fn start(_data_dir: std::path::PathBuf) -> anyhow::Result<EmbeddedDoris> {
        anyhow::bail!(
            "doris.fenodes = \"embedded\": this sluice is built without the embedded doris-lite (a production build); point `fenodes` at your Doris FEs, or build with `cargo build --release -p sluice --features embedded`"
        )
    }

    /// The FE's HTTP address.
    pub fn fe_http_addr(&self) -> std::net::SocketAddr {
        #[cfg(feature = "embedded")]
        return self.handle.fe_http_addr();
        #[cfg(not(feature = "embedded"))]
        match self.never {}
    }

    /// Its MySQL port as a `doris.jdbc_url`.
    pub fn jdbc_url(&self) -> String {
        #[cfg(feature = "embedded")]
        return format!("jdbc:mysql://{}:{}", self.handle.query_addr().ip(), self.handle.query_addr().port());
        #[cfg(not(feature = "embedded"))]
        match self.never {}
    }

    /// A client of its FE.
    pub fn client(&self) -> anyhow::Result<FeClient> {
        let timeout = std::time::Duration::from_secs(30);
        let fe = vec![self.fe_http_addr().to_string()];
        Ok(FeClient::new(fe, Credentials::new("root", ""), timeout, timeout)?)
    }

    pub async fn stop(self) {
        #[cfg(feature = "embedded")]
        self.handle.stop().await;
        #[cfg(not(feature = "embedded"))]
        match self.never {}
    }
}

/// Run `init_sql` (relative to the pipeline file) on the embedded doris-lite.
pub async fn run_init_sql(file: &Path, init: &Path, client: &FeClient) -> anyhow::Result<()> {
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
pub async fn print_table(client: &FeClient, table: &str) -> anyhow::Result<()> {
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
