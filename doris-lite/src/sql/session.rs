//! Per-connection state: the user, the database in use and the session variables (`SET`, and
//! `@@name` in queries).

use std::collections::BTreeMap;

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::tokenizer::Token;
use datafusion::variable::VarProvider;

use super::{Executor, Outcome, SERVER_VERSION, SqlError, VERSION_COMMENT, done};
use crate::ddl::Parser;

/// Per-connection state.
#[derive(Debug, Clone)]
pub struct Session {
    /// Authenticated user.
    pub user: String,
    /// `USE`d database.
    pub db: Option<String>,
    /// Session variables (lower-case names).
    pub vars: BTreeMap<String, String>,
    /// Connection id.
    pub connection_id: u32,
}

/// Default session variables (name, value).
pub fn default_vars() -> BTreeMap<String, String> {
    let v: &[(&str, &str)] = &[
        ("auto_increment_increment", "1"),
        ("autocommit", "1"),
        ("character_set_client", "utf8mb4"),
        ("character_set_connection", "utf8mb4"),
        ("character_set_results", "utf8mb4"),
        ("character_set_server", "utf8mb4"),
        ("collation_connection", "utf8mb4_0900_bin"),
        ("collation_database", "utf8mb4_0900_bin"),
        ("collation_server", "utf8mb4_0900_bin"),
        ("enable_insert_strict", "true"),
        ("enable_unique_key_partial_update", "false"),
        ("exec_mem_limit", "2147483648"),
        ("group_commit", "off_mode"),
        ("init_connect", ""),
        ("insert_max_filter_ratio", "1.0"),
        ("interactive_timeout", "3600"),
        ("language", "/palo/share/english/"),
        ("license", "Apache License, Version 2.0"),
        ("lower_case_table_names", "0"),
        ("max_allowed_packet", "67108864"),
        ("net_buffer_length", "16384"),
        ("net_write_timeout", "600"),
        ("partial_update_new_key_behavior", "APPEND"),
        ("performance_schema", "0"),
        ("query_cache_size", "1048576"),
        ("query_cache_type", "0"),
        ("query_timeout", "900"),
        ("show_hidden_columns", "false"),
        ("sql_mode", "ONLY_FULL_GROUP_BY"),
        ("sql_select_limit", "9223372036854775807"),
        ("system_time_zone", "UTC"),
        ("time_zone", "UTC"),
        ("transaction_isolation", "REPEATABLE-READ"),
        ("transaction_read_only", "0"),
        ("tx_isolation", "REPEATABLE-READ"),
        ("tx_read_only", "0"),
        ("version", SERVER_VERSION),
        ("version_comment", VERSION_COMMENT),
        ("wait_timeout", "28800"),
    ];
    v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl Session {
    /// A new session for `user`.
    pub fn new(user: &str, connection_id: u32) -> Session {
        Session { user: user.to_string(), db: None, vars: default_vars(), connection_id }
    }

    /// Whether a boolean session variable is on.
    pub fn var_true(&self, name: &str) -> bool {
        self.vars.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }
}

#[derive(Debug)]
pub(super) struct SessionVars(pub(super) BTreeMap<String, String>);

fn var_key(names: &[String]) -> String {
    let joined = names.join(".");
    let s = joined.trim_start_matches('@').to_ascii_lowercase();
    for p in ["session.", "global.", "local."] {
        if let Some(r) = s.strip_prefix(p) {
            return r.to_string();
        }
    }
    s
}

impl VarProvider for SessionVars {
    fn get_value(&self, var_names: Vec<String>) -> datafusion::error::Result<ScalarValue> {
        let key = var_key(&var_names);
        Ok(match self.0.get(&key) {
            Some(v) => match v.parse::<i64>() {
                Ok(i) => ScalarValue::Int64(Some(i)),
                Err(_) => ScalarValue::Utf8(Some(v.clone())),
            },
            None => ScalarValue::Utf8(None),
        })
    }

    fn get_type(&self, var_names: &[String]) -> Option<DataType> {
        let key = var_key(var_names);
        Some(match self.0.get(&key) {
            Some(v) if v.parse::<i64>().is_ok() => DataType::Int64,
            _ => DataType::Utf8,
        })
    }
}

impl Executor {
    pub(super) fn set(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        loop {
            p.eat_kw("SESSION");
            p.eat_kw("GLOBAL");
            p.eat_kw("LOCAL");
            if p.eat_kw("NAMES") || p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
                let cs = p.literal_text().unwrap_or_else(|_| "utf8mb4".into());
                if p.eat_kw("COLLATE") {
                    let _ = p.literal_text();
                }
                for k in ["character_set_client", "character_set_connection", "character_set_results"] {
                    s.vars.insert(k.into(), cs.clone());
                }
            } else if p.eat_kw("PASSWORD") || p.eat_kw("TRANSACTION") {
                return Ok(done());
            } else {
                let raw = p.ident()?;
                let mut name = raw.trim_start_matches('@').to_string();
                while p.eat(&Token::Period) {
                    let part = p.ident()?;
                    name = format!("{name}.{part}");
                }
                let name = var_key(&[name]);
                if !p.eat(&Token::Eq) {
                    p.expect(&Token::Assignment)?;
                }
                let value = p.literal_text()?;
                let value = match value.to_ascii_uppercase().as_str() {
                    "ON" | "TRUE" => "true".to_string(),
                    "OFF" | "FALSE" => "false".to_string(),
                    _ => value,
                };
                if !raw.starts_with('@') || raw.starts_with("@@") {
                    s.vars.insert(name, value);
                }
            }
            if !p.eat(&Token::Comma) {
                break;
            }
        }
        p.expect_end()?;
        Ok(done())
    }
}
