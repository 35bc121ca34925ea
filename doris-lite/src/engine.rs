//! The catalog, transactions and labels, DDL execution and the commit path shared by
//! Stream Load, INSERT and DELETE.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::ddl::{AlterOp, ColumnPosition, CreateTable, ObjectName, Parser, SyntaxError};
use crate::persist::{LogRecord, WriteAheadLog};
use crate::storage::{Buckets, Distribution, KeysType, Table, TableSchema, TableWrite, Tso};
use crate::types::{DorisType, Value};
use datafusion::sql::sqlparser::tokenizer::Token;

/// Engine-level limits and switches.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `stream_load_default_precommit_timeout_second`.
    pub precommit_timeout: Duration,
    /// `streaming_label_keep_max_second`.
    pub label_keep: Duration,
    /// `max_running_txn_num_per_db`.
    pub max_running_txn_per_db: usize,
    /// `streaming_load_max_mb`, in bytes.
    pub max_load_bytes: u64,
    /// `streaming_load_json_max_mb`, in bytes (JSON without `read_json_by_line`).
    pub max_json_bytes: u64,
    /// Run on a manual clock (commit times, TSO, TTL) that only [`Clock::advance`] moves.
    pub manual_clock: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            precommit_timeout: Duration::from_secs(3600),
            label_keep: Duration::from_secs(43200),
            max_running_txn_per_db: 10000,
            max_load_bytes: 10240 << 20,
            max_json_bytes: 100 << 20,
            manual_clock: false,
        }
    }
}

/// The wall clock behind commit times, the TSO and changelog TTLs.
#[derive(Debug)]
pub enum Clock {
    /// The system clock.
    System,
    /// A clock that stands still until advanced (ms since the epoch).
    Manual(AtomicI64),
}

impl Clock {
    /// Milliseconds since the epoch.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => Tso::now_ms(),
            Clock::Manual(ms) => ms.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward by `ms` (or to `to_ms` when given); returns the new time.
    pub fn advance(&self, ms: i64, to_ms: Option<i64>) -> Result<i64, EngineError> {
        match self {
            Clock::System => Err(EngineError::Other("the clock is the system clock; start with --clock manual".into())),
            Clock::Manual(now) => {
                let cur = now.load(Ordering::SeqCst);
                let next = to_ms.unwrap_or(cur + ms);
                if next < cur || ms < 0 {
                    return Err(EngineError::Other(format!("the clock cannot move backwards (now {cur} ms)")));
                }
                now.store(next, Ordering::SeqCst);
                Ok(next)
            }
        }
    }
}

/// Doris transaction states (§2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStatus {
    /// Begun, loading.
    Prepare,
    /// 2PC phase one done.
    Precommitted,
    /// Visible.
    Visible,
    /// Aborted.
    Aborted,
}

impl TxnStatus {
    /// The `TransactionStatus` name.
    pub fn name(&self) -> &'static str {
        match self {
            TxnStatus::Prepare => "PREPARE",
            TxnStatus::Precommitted => "PRECOMMITTED",
            TxnStatus::Visible => "VISIBLE",
            TxnStatus::Aborted => "ABORTED",
        }
    }
    /// `ExistingJobStatus` of a label conflict.
    pub fn job_status(&self) -> &'static str {
        match self {
            TxnStatus::Prepare => "RUNNING",
            TxnStatus::Precommitted => "PRECOMMITTED",
            _ => "FINISHED",
        }
    }
}

/// One transaction.
#[derive(Debug)]
pub struct Txn {
    /// Id.
    pub id: i64,
    /// Database.
    pub db: String,
    /// Table.
    pub table: String,
    /// Label.
    pub label: String,
    /// State.
    pub status: TxnStatus,
    /// Pre-committed data.
    pub write: Option<TableWrite>,
    /// When the state last changed.
    pub since: Instant,
    /// Abort reason.
    pub reason: String,
    /// Commit TSO.
    pub tso: i64,
    /// Whether it went through PRECOMMITTED (a two-phase Stream Load or a begun transaction).
    pub two_phase: bool,
}

/// A database.
#[derive(Debug, Default)]
pub struct Database {
    /// Id.
    pub id: i64,
    /// Tables by name.
    pub tables: BTreeMap<String, Table>,
    /// Labels → txn id.
    pub labels: HashMap<String, i64>,
    /// Views by name.
    pub views: BTreeMap<String, View>,
}

/// A view: a stored query, planned anew whenever it is read.
#[derive(Debug, Clone)]
pub struct View {
    /// Id (from the same allocator as tables).
    pub id: i64,
    /// Column names (and comments) given at creation; empty = the query's own names.
    pub columns: Vec<(String, String)>,
    /// COMMENT.
    pub comment: String,
    /// The defining query, as written.
    pub query: String,
}

/// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] name [(col [COMMENT 'c'], …)] [COMMENT 'c'] AS query`
/// or `ALTER VIEW name [(…)] AS query`, parsed.
#[derive(Debug)]
pub struct ViewDef {
    /// Name.
    pub name: ObjectName,
    /// OR REPLACE / ALTER.
    pub replace: bool,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
    /// ALTER VIEW (the view must exist).
    pub alter: bool,
    /// The view.
    pub view: View,
}

/// Parses a CREATE / ALTER VIEW statement.
pub fn parse_view(sql: &str) -> Result<ViewDef, EngineError> {
    let mut p = Parser::new(sql)?;
    let alter = p.eat_kw("ALTER");
    if !alter {
        p.expect_kw("CREATE")?;
    }
    let replace = alter || p.eat_kws(&["OR", "REPLACE"]);
    p.expect_kw("VIEW")?;
    let if_not_exists = !alter && p.eat_kws(&["IF", "NOT", "EXISTS"]);
    let name = p.object_name()?;
    let mut columns = Vec::new();
    if p.eat(&Token::LParen) {
        loop {
            let c = p.ident()?;
            let comment = if p.eat_kw("COMMENT") { p.string()? } else { String::new() };
            columns.push((c, comment));
            if !p.eat(&Token::Comma) {
                break;
            }
        }
        p.expect(&Token::RParen)?;
    }
    let comment = if p.eat_kw("COMMENT") { p.string()? } else { String::new() };
    p.expect_kw("AS")?;
    let query = p.rest().trim().to_string();
    if query.is_empty() {
        return Err(EngineError::Syntax(format!("Syntax error: a view needs a query after AS: {sql}")));
    }
    Ok(ViewDef { name, replace, if_not_exists, alter, view: View { id: 0, columns, comment, query } })
}

/// Everything behind the engine lock.
#[derive(Debug, Default)]
pub struct State {
    /// Databases by name.
    pub dbs: BTreeMap<String, Database>,
    /// Id allocator for databases, tables and tablets.
    pub next_id: i64,
    /// Timestamp oracle.
    pub tso: Tso,
    /// Transactions by id.
    pub txns: HashMap<i64, Txn>,
    /// Next transaction id.
    pub next_txn: i64,
    /// Error logs by file name.
    pub error_logs: HashMap<String, String>,
    /// Schema-change jobs, oldest first (`SHOW ALTER TABLE COLUMN`).
    pub alter_jobs: Vec<AlterJob>,
}

/// A schema-change job: an ALTER TABLE that rewrites data (a column's type or position). Light
/// changes (adding or dropping a value column, renames, comments, lengthening a VARCHAR) change
/// metadata only and make no job, as in Doris. doris-lite converts the rows at once, so every job
/// it lists is FINISHED.
#[derive(Debug, Clone)]
pub struct AlterJob {
    /// JobId.
    pub job_id: i64,
    /// Database.
    pub db: String,
    /// TableName (also the base index's name).
    pub table: String,
    /// CreateTime (ms).
    pub create_ms: i64,
    /// FinishTime (ms).
    pub finish_ms: i64,
    /// IndexId of the new index.
    pub index_id: i64,
    /// OriginIndexId.
    pub origin_index_id: i64,
    /// The table's schema version after the job.
    pub schema_version: i64,
    /// TransactionId (the watershed transaction).
    pub txn_id: i64,
}

/// Whether an ALTER TABLE operation rewrites data in Doris (a schema-change job) rather than
/// changing metadata only.
fn is_heavy(t: &Table, op: &AlterOp) -> bool {
    match op {
        AlterOp::ModifyColumn(col, false, pos) => {
            let Some(old) = t.schema.column_index(&col.name).map(|i| &t.schema.columns[i].ty) else { return false };
            let lengthened = match (old, &col.ty) {
                (DorisType::Varchar(a), DorisType::Varchar(b)) => b >= a,
                (DorisType::Varchar(_) | DorisType::String, DorisType::String) => true,
                (a, b) => a == b,
            };
            !lengthened || *pos != ColumnPosition::Default
        }
        _ => false,
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl State {
    /// Looks a database up.
    pub fn db(&self, db: &str) -> Result<&Database, EngineError> {
        self.dbs.get(db).ok_or_else(|| EngineError::UnknownDatabase(db.to_string()))
    }
    /// Looks a database up mutably.
    pub fn db_mut(&mut self, db: &str) -> Result<&mut Database, EngineError> {
        self.dbs.get_mut(db).ok_or_else(|| EngineError::UnknownDatabase(db.to_string()))
    }
    /// Looks a table up.
    pub fn table(&self, db: &str, table: &str) -> Result<&Table, EngineError> {
        self.db(db)?.tables.get(table).ok_or_else(|| EngineError::UnknownTable(table.to_string(), db.to_string()))
    }
    /// Looks a table up mutably.
    pub fn table_mut(&mut self, db: &str, table: &str) -> Result<&mut Table, EngineError> {
        self.db_mut(db)?
            .tables
            .get_mut(table)
            .ok_or_else(|| EngineError::UnknownTable(table.to_string(), db.to_string()))
    }
}

/// Errors of catalog and transaction operations; `mysql_code` gives the MySQL error number.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// 1049
    #[error("Unknown database '{0}'")]
    UnknownDatabase(String),
    /// 1007
    #[error("Can't create database '{0}'; database exists")]
    DatabaseExists(String),
    /// 1050
    #[error("Table '{0}' already exists")]
    TableExists(String),
    /// 1146 (table, db)
    #[error("Table [{0}] does not exist in database [{1}].")]
    UnknownTable(String, String),
    /// 1054 (column, table)
    #[error("Unknown column '{0}' in '{1}'")]
    UnknownColumn(String, String),
    /// 1046
    #[error("No database selected")]
    NoDatabase,
    /// 1064
    #[error("{0}")]
    Syntax(String),
    /// Label reuse.
    #[error("Label [{label}] has already been used, relate to txn [{txn_id}]")]
    LabelExists {
        /// Label.
        label: String,
        /// Existing txn.
        txn_id: i64,
        /// Its state.
        status: TxnStatus,
    },
    /// Anything else (1105).
    #[error("{0}")]
    Other(String),
}

impl EngineError {
    /// MySQL error number.
    pub fn mysql_code(&self) -> u16 {
        match self {
            EngineError::UnknownDatabase(_) => 1049,
            EngineError::DatabaseExists(_) => 1007,
            EngineError::TableExists(_) => 1050,
            EngineError::UnknownTable(..) => 1146,
            EngineError::UnknownColumn(..) => 1054,
            EngineError::NoDatabase => 1046,
            EngineError::Syntax(_) => 1064,
            _ => 1105,
        }
    }
}

impl From<SyntaxError> for EngineError {
    fn from(e: SyntaxError) -> Self {
        EngineError::Syntax(e.0)
    }
}

/// The engine: state behind one lock plus the optional write-ahead log.
#[derive(Debug)]
pub struct Engine {
    state: Mutex<State>,
    audit: Mutex<std::collections::VecDeque<AuditEntry>>,
    /// Limits.
    pub config: EngineConfig,
    wal: Option<Mutex<WriteAheadLog>>,
    /// Commit-time clock.
    pub clock: Clock,
}

/// One statement a client ran, as Doris' audit log (`fe.audit.log`) records it: who, where, over
/// which protocol, the statement, how it ended and how many rows it returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// When it finished (epoch ms, wall clock).
    pub time_ms: i64,
    /// User.
    pub user: String,
    /// Current database (empty when none).
    pub db: String,
    /// `mysql` or `arrow_flight_sql`.
    pub protocol: &'static str,
    /// The statement as sent.
    pub stmt: String,
    /// `EOF` (a result set), `OK` or `ERR`.
    pub state: &'static str,
    /// Rows returned to the client.
    pub return_rows: u64,
}

/// How many audit entries are kept (the oldest go first).
const AUDIT_KEEP: usize = 10_000;

impl Txn {
    /// A transaction read back from the commit log.
    fn replayed(
        id: i64,
        db: String,
        table: String,
        label: String,
        status: TxnStatus,
        write: Option<TableWrite>,
        tso: i64,
    ) -> Txn {
        let two_phase = status == TxnStatus::Precommitted;
        Txn { id, db, table, label, status, write, since: Instant::now(), reason: String::new(), tso, two_phase }
    }
}

/// Result of beginning a load.
#[derive(Debug, Clone)]
pub struct Begun {
    /// Txn id.
    pub txn_id: i64,
    /// Snapshot of the table schema to parse against.
    pub schema: TableSchema,
}

impl Engine {
    /// A new engine; replays `wal` when given.
    pub fn new(config: EngineConfig, wal: Option<WriteAheadLog>) -> Result<Engine, EngineError> {
        let mut state = State { next_id: 10000, next_txn: 1000, ..Default::default() };
        let records = match &wal {
            Some(w) => w.replay().map_err(|e| EngineError::Other(e.to_string()))?,
            None => Vec::new(),
        };
        for rec in records {
            match rec {
                LogRecord::Ddl { db, sql } => {
                    // A statement that failed at replay failed originally too: skip it.
                    let _ = ddl_in_state(&mut state, db.as_deref(), &sql);
                }
                LogRecord::Precommit { db, table, txn_id, label, write } => {
                    state.next_txn = state.next_txn.max(txn_id + 1);
                    if let Ok(d) = state.db_mut(&db) {
                        d.labels.insert(label.clone(), txn_id);
                    }
                    state.txns.insert(
                        txn_id,
                        Txn::replayed(txn_id, db, table, label, TxnStatus::Precommitted, Some(write), 0),
                    );
                }
                LogRecord::Abort { txn_id } => {
                    if let Some(t) = state.txns.get_mut(&txn_id) {
                        t.status = TxnStatus::Aborted;
                        t.write = None;
                        t.reason = "User Abort".into();
                    }
                }
                LogRecord::Commit { db, table, txn_id, label, tso, commit_ms, write } => {
                    state.tso.observe(tso);
                    state.next_txn = state.next_txn.max(txn_id + 1);
                    if let Ok(t) = state.table_mut(&db, &table) {
                        t.apply(write, tso, commit_ms).map_err(|e| {
                            EngineError::Other(format!("replaying the commit of label {label} into {db}.{table}: {e}"))
                        })?;
                    }
                    if let Ok(d) = state.db_mut(&db) {
                        d.labels.insert(label.clone(), txn_id);
                    }
                    state.txns.insert(txn_id, Txn::replayed(txn_id, db, table, label, TxnStatus::Visible, None, tso));
                }
            }
        }
        let clock = if config.manual_clock {
            // Starts at the real time, rounded down to a whole second.
            Clock::Manual(AtomicI64::new(Tso::now_ms() / 1000 * 1000))
        } else {
            Clock::System
        };
        Ok(Engine { state: Mutex::new(state), audit: Mutex::default(), config, wal: wal.map(Mutex::new), clock })
    }

    /// Records a statement in the audit log.
    pub fn audit(&self, mut entry: AuditEntry) {
        entry.time_ms = wall_ms();
        let mut log = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= AUDIT_KEEP {
            log.pop_front();
        }
        log.push_back(entry);
    }

    /// The audit log, oldest first.
    pub fn audit_log(&self) -> Vec<AuditEntry> {
        self.audit.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Locks the state (a poisoned lock is recovered: the state is only mutated under
    /// operations that cannot panic halfway).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self, rec: &LogRecord) -> Result<(), EngineError> {
        if let Some(w) = &self.wal {
            w.lock()
                .unwrap_or_else(|e| e.into_inner())
                .append(rec)
                .map_err(|e| EngineError::Other(format!("failed to write the commit log: {e}")))?;
        }
        Ok(())
    }

    /// Runs a DDL statement and logs it.
    pub fn ddl(&self, current_db: Option<&str>, sql: &str) -> Result<String, EngineError> {
        let mut st = self.lock();
        let msg = ddl_in_state(&mut st, current_db, sql)?;
        self.log(&LogRecord::Ddl { db: current_db.map(str::to_string), sql: sql.to_string() })?;
        Ok(msg)
    }

    fn sweep(&self, st: &mut State) {
        let now = Instant::now();
        let mut expired_labels = Vec::new();
        for t in st.txns.values_mut() {
            if t.status == TxnStatus::Precommitted && now.duration_since(t.since) > self.config.precommit_timeout {
                t.status = TxnStatus::Aborted;
                t.write = None;
                t.reason = "timeout by txn manager".into();
                t.since = now;
            }
            if matches!(t.status, TxnStatus::Visible | TxnStatus::Aborted)
                && now.duration_since(t.since) > self.config.label_keep
            {
                expired_labels.push((t.id, t.db.clone(), t.label.clone()));
            }
        }
        for (id, db, label) in expired_labels {
            st.txns.remove(&id);
            if let Some(d) = st.dbs.get_mut(&db)
                && d.labels.get(&label) == Some(&id)
            {
                d.labels.remove(&label);
            }
        }
    }

    /// Begins a load transaction under `label` (§1.10 label rules, §2.2 running limit).
    pub fn begin(&self, db: &str, table: &str, label: &str) -> Result<Begun, EngineError> {
        let mut st = self.lock();
        self.sweep(&mut st);
        let schema = st.table(db, table)?.schema.clone();
        if let Some(&id) = st.db(db)?.labels.get(label)
            && let Some(t) = st.txns.get(&id)
            && t.status != TxnStatus::Aborted
        {
            return Err(EngineError::LabelExists { label: label.to_string(), txn_id: id, status: t.status });
        }
        let running = st
            .txns
            .values()
            .filter(|t| t.db == db && matches!(t.status, TxnStatus::Prepare | TxnStatus::Precommitted))
            .count();
        if running >= self.config.max_running_txn_per_db {
            let db_id = st.db(db)?.id;
            return Err(EngineError::Other(format!(
                "current running txns on db {db_id} is {running}, larger than limit {}",
                self.config.max_running_txn_per_db
            )));
        }
        st.next_txn += 1;
        let id = st.next_txn;
        st.txns.insert(
            id,
            Txn {
                id,
                db: db.to_string(),
                table: table.to_string(),
                label: label.to_string(),
                status: TxnStatus::Prepare,
                write: None,
                since: Instant::now(),
                reason: String::new(),
                tso: 0,
                two_phase: false,
            },
        );
        st.db_mut(db)?.labels.insert(label.to_string(), id);
        Ok(Begun { txn_id: id, schema })
    }

    /// Aborts a PREPARE transaction after a failed load.
    pub fn abort(&self, txn_id: i64, reason: &str) {
        let mut st = self.lock();
        if let Some(t) = st.txns.get_mut(&txn_id) {
            t.status = TxnStatus::Aborted;
            t.write = None;
            t.reason = reason.to_string();
            t.since = Instant::now();
        }
    }

    /// Aborts the transaction if it is still PREPARE (its load never finished).
    pub fn abort_unfinished(&self, txn_id: i64, reason: &str) {
        let mut st = self.lock();
        if let Some(t) = st.txns.get_mut(&txn_id)
            && t.status == TxnStatus::Prepare
        {
            t.status = TxnStatus::Aborted;
            t.reason = reason.to_string();
            t.since = Instant::now();
        }
    }

    /// Commits a PREPARE transaction with its data; returns the TSO.
    pub fn commit(&self, txn_id: i64, write: TableWrite) -> Result<i64, EngineError> {
        let mut st = self.lock();
        self.commit_locked(&mut st, txn_id, write)
    }

    fn commit_locked(&self, st: &mut State, txn_id: i64, write: TableWrite) -> Result<i64, EngineError> {
        let (db, table, label) = match st.txns.get(&txn_id) {
            Some(t) if t.status == TxnStatus::Aborted => {
                return Err(EngineError::Other(format!(
                    "transaction [{txn_id}] is already aborted. abort reason: {}",
                    t.reason
                )));
            }
            Some(t) => (t.db.clone(), t.table.clone(), t.label.clone()),
            None => {
                return Err(EngineError::Other(format!("transaction [{txn_id}] not found")));
            }
        };
        let commit_ms = self.clock.now_ms();
        let tso = st.tso.allocate(commit_ms);
        // The table must still exist with the shape the rows were parsed against (an ALTER may
        // have run during the load).
        let ncols = st.table(&db, &table)?.schema.columns.len();
        let (ops, partial) = match &write {
            TableWrite::Rows { ops, partial } => (&ops[..], partial.as_ref()),
            TableWrite::Overwrite(ops) => (&ops[..], None),
            TableWrite::DeleteRowIds(_) => (&[][..], None),
        };
        if ops.iter().any(|o| o.values.len() != ncols) || partial.is_some_and(|p| p.len() != ncols) {
            return Err(EngineError::Other(format!(
                "the schema of table [{table}] changed during the load, please retry"
            )));
        }
        let rec = LogRecord::Commit { db: db.clone(), table: table.clone(), txn_id, label, tso, commit_ms, write };
        self.log(&rec)?;
        let LogRecord::Commit { write, .. } = rec else { unreachable!("constructed above") };
        st.table_mut(&db, &table)?.apply(write, tso, commit_ms).map_err(EngineError::Other)?;
        if let Some(t) = st.txns.get_mut(&txn_id) {
            t.status = TxnStatus::Visible;
            t.write = None;
            t.tso = tso;
            t.since = Instant::now();
        }
        Ok(tso)
    }

    /// Stores pre-committed data (2PC phase one), in the commit log first when there is one.
    pub fn precommit(&self, txn_id: i64, write: TableWrite) -> Result<(), EngineError> {
        let mut st = self.lock();
        let Some(t) = st.txns.get(&txn_id) else { return Ok(()) };
        // Aborted while its body was arriving (a 2PC abort by label): the load fails, as in Doris.
        if t.status == TxnStatus::Aborted {
            return Err(EngineError::Other(format!(
                "transaction [{txn_id}] is already aborted. abort reason: {}",
                t.reason
            )));
        }
        if self.wal.is_some() {
            let rec = LogRecord::Precommit {
                db: t.db.clone(),
                table: t.table.clone(),
                txn_id,
                label: t.label.clone(),
                write: write.clone(),
            };
            self.log(&rec)?;
        }
        if let Some(t) = st.txns.get_mut(&txn_id) {
            t.status = TxnStatus::Precommitted;
            t.two_phase = true;
            t.write = Some(write);
            t.since = Instant::now();
        }
        Ok(())
    }

    /// Resolves a 2PC operation target: by id, or by label within `db`.
    pub fn resolve_txn(&self, db: &str, txn_id: Option<i64>, label: Option<&str>) -> Result<i64, EngineError> {
        let mut st = self.lock();
        self.sweep(&mut st);
        st.db(db)?;
        match (txn_id, label) {
            (Some(id), _) => Ok(id),
            (None, Some(l)) => {
                st.db(db)?.labels.get(l).copied().ok_or_else(|| EngineError::Other(format!("label [{l}] not found")))
            }
            (None, None) => Err(EngineError::Other("No transaction id or label selected.".into())),
        }
    }

    /// 2PC commit of a PRECOMMITTED transaction, with Doris' phrases on failure.
    pub fn commit_2pc(&self, txn_id: i64) -> Result<(), EngineError> {
        let mut st = self.lock();
        self.sweep(&mut st);
        let Some(t) = st.txns.get_mut(&txn_id) else {
            return Err(EngineError::Other(format!("transaction [{txn_id}] not found")));
        };
        match t.status {
            TxnStatus::Precommitted => {
                let write = t.write.take().unwrap_or(TableWrite::Rows { ops: Vec::new(), partial: None });
                let res = self.commit_locked(&mut st, txn_id, write).map(|_| ());
                if let (Err(e), Some(t)) = (&res, st.txns.get_mut(&txn_id)) {
                    t.status = TxnStatus::Aborted;
                    t.reason = e.to_string();
                    t.since = Instant::now();
                }
                res
            }
            TxnStatus::Visible => {
                Err(EngineError::Other(format!("transaction [{txn_id}] is already visible, not pre-committed.")))
            }
            TxnStatus::Aborted => Err(EngineError::Other(format!(
                "transaction [{txn_id}] is already aborted. abort reason: {}",
                t.reason
            ))),
            TxnStatus::Prepare => {
                Err(EngineError::Other(format!("transaction [{txn_id}] is prepare, not pre-committed")))
            }
        }
    }

    /// 2PC abort.
    pub fn abort_2pc(&self, txn_id: i64) -> Result<(), EngineError> {
        let mut st = self.lock();
        self.sweep(&mut st);
        let Some(t) = st.txns.get_mut(&txn_id) else {
            return Err(EngineError::Other(format!("transaction [{txn_id}] not found")));
        };
        match t.status {
            TxnStatus::Visible => {
                Err(EngineError::Other(format!("transaction [{txn_id}] is already visible, could not abort.")))
            }
            TxnStatus::Aborted => Err(EngineError::Other(format!(
                "transaction [{txn_id}] is already aborted. abort reason: {}",
                t.reason
            ))),
            status => {
                t.status = TxnStatus::Aborted;
                t.write = None;
                t.reason = "User Abort".into();
                t.since = Instant::now();
                if status == TxnStatus::Precommitted {
                    self.log(&LogRecord::Abort { txn_id })?;
                }
                Ok(())
            }
        }
    }

    /// `get_load_state`: the TransactionStatus name of a label, `UNKNOWN` if none.
    pub fn label_state(&self, db: &str, label: &str) -> Result<&'static str, EngineError> {
        let mut st = self.lock();
        self.sweep(&mut st);
        let d = st.db(db)?;
        Ok(d.labels.get(label).and_then(|id| st.txns.get(id)).map(|t| t.status.name()).unwrap_or("UNKNOWN"))
    }

    /// The committed rows of a table as one Arrow batch (visible columns; hidden ones too when
    /// asked), for embedding hosts and the Flight SQL surface of part 2.
    pub fn snapshot(
        &self,
        db: &str,
        table: &str,
        with_hidden: bool,
    ) -> Result<arrow::record_batch::RecordBatch, EngineError> {
        let mut st = self.lock();
        st.table_mut(db, table)?.snapshot(with_hidden, false).map_err(EngineError::Other)
    }

    /// Tablet ids of a table, in bucket order.
    pub fn tablet_ids(&self, db: &str, table: &str) -> Result<Vec<i64>, EngineError> {
        Ok(self.lock().table(db, table)?.tablets.iter().map(|t| t.id).collect())
    }

    /// Change records with `from_tso <= tso < to_tso` (changelog tables), in
    /// (TSO, LSN) order.
    pub fn changes(
        &self,
        db: &str,
        table: &str,
        from_tso: i64,
        to_tso: i64,
    ) -> Result<Vec<crate::storage::ChangeRecord>, EngineError> {
        let st = self.lock();
        let t = st.table(db, table)?;
        Ok(t.changelog.iter().filter(|r| r.tso >= from_tso && r.tso < to_tso).cloned().collect())
    }

    /// The latest allocated TSO.
    pub fn current_tso(&self) -> i64 {
        self.lock().tso.current(self.clock.now_ms())
    }

    /// Begins a transaction on `db.table` that no load drives (the `Txn.hold_in_flight` debug
    /// point); [`Engine::abort`] ends it.
    pub fn hold_in_flight(&self, db: &str, table: &str) -> Result<i64, EngineError> {
        let label = format!("__debug_point_hold_{}", self.lock().next_txn + 1);
        Ok(self.begin(db, table, &label)?.txn_id)
    }

    /// Ids of the transactions on `db.table` that are not finished (PREPARE or PRECOMMITTED).
    pub fn in_flight(&self, db: &str, table: &str) -> Vec<i64> {
        let st = self.lock();
        let mut ids: Vec<i64> = st
            .txns
            .values()
            .filter(|t| {
                t.db == db && t.table == table && matches!(t.status, TxnStatus::Prepare | TxnStatus::Precommitted)
            })
            .map(|t| t.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Keeps a rejected-rows log and returns its file name.
    pub fn store_error_log(&self, text: String) -> String {
        let mut st = self.lock();
        let name = format!(
            "__shard_{}/error_log_insert_stmt_{:016x}_{:016x}",
            st.error_logs.len() % 16,
            self.clock.now_ms(),
            st.next_txn
        );
        st.error_logs.insert(name.clone(), text);
        name
    }
}

fn resolve_db<'a>(name: &'a ObjectName, current: Option<&'a str>) -> Result<&'a str, EngineError> {
    name.db.as_deref().or(current).ok_or(EngineError::NoDatabase)
}

fn build_schema(ct: &CreateTable) -> Result<TableSchema, EngineError> {
    let mut columns = ct.columns.clone();
    if columns.is_empty() {
        return Err(EngineError::Other("Table should have at least one column".into()));
    }
    let (keys_type, key_names) = match &ct.keys {
        Some((k, names)) => (*k, names.clone()),
        None => {
            let names: Vec<String> =
                columns.iter().take_while(|c| c.ty.can_be_key()).take(3).map(|c| c.name.clone()).collect();
            (KeysType::Duplicate, names)
        }
    };
    for (i, k) in key_names.iter().enumerate() {
        match columns.get(i) {
            Some(c) if c.name.eq_ignore_ascii_case(k) => {}
            _ => {
                if !columns.iter().any(|c| c.name.eq_ignore_ascii_case(k)) {
                    return Err(EngineError::Other(format!("Key column[{k}] doesn't exist.")));
                }
                return Err(EngineError::Other(format!(
                    "Key columns should be a ordered prefix of the schema. KeyColumns[{i}] (starts from zero) is {k}, but corresponding column is {} in the previous columns declaration.",
                    columns.get(i).map(|c| c.name.as_str()).unwrap_or("")
                )));
            }
        }
        if !columns[i].ty.can_be_key() {
            return Err(EngineError::Other(format!(
                "The olap table first column could not be float, double, string or array, struct, map, please use decimal or varchar instead. column: {k}"
            )));
        }
    }
    let key_count = key_names.len();
    for (i, c) in columns.iter_mut().enumerate() {
        let is_key = i < key_count;
        match (keys_type, is_key, c.agg) {
            (KeysType::Aggregate, false, None) => {
                return Err(EngineError::Other(format!(
                    "The column[{}] must specify an aggregation type in AGGREGATE KEY table",
                    c.name
                )));
            }
            (KeysType::Aggregate, false, Some(_)) => {}
            (_, _, Some(_)) => {
                return Err(EngineError::Other(format!("Key column {} can not set aggregation type", c.name)));
            }
            _ => {}
        }
    }
    let distribution = match &ct.distribution {
        Some(Distribution::Hash(cols, b)) => {
            for c in cols {
                if !columns.iter().any(|x| x.name.eq_ignore_ascii_case(c)) {
                    return Err(EngineError::Other(format!("Distribution column[{c}] is not found")));
                }
            }
            Distribution::Hash(cols.clone(), *b)
        }
        Some(Distribution::Random(b)) => {
            if keys_type != KeysType::Duplicate {
                return Err(EngineError::Other("Random distribution for non-duplicate table is unsupported".into()));
            }
            Distribution::Random(*b)
        }
        None if keys_type == KeysType::Duplicate => Distribution::Random(Buckets::Auto),
        None => Distribution::Hash(key_names.clone(), Buckets::Auto),
    };
    let schema = TableSchema {
        columns,
        keys_type,
        key_count,
        distribution,
        comment: ct.comment.clone(),
        partition_clause: ct.partition.clone(),
        properties: ct.properties.clone(),
    };
    if let Some(c) = schema.property("function_column.sequence_col") {
        if keys_type != KeysType::Unique {
            return Err(EngineError::Other("sequence column only support UNIQUE_KEYS".into()));
        }
        if schema.column_index(c).is_none() {
            return Err(EngineError::Other(format!("The specified sequence column[{c}] not exists")));
        }
    }
    if schema.changelog_enabled() {
        if keys_type == KeysType::Aggregate {
            return Err(EngineError::Other("Only duplicate and mow table model support binlog<Row>".into()));
        }
        if keys_type == KeysType::Duplicate && schema.changelog_historical() {
            return Err(EngineError::Other("Duplicate table model don't support record historical value".into()));
        }
    }
    check_ttl(&schema.properties)?;
    if schema.property("binlog.format").is_some_and(|f| f != "ROW" && f.eq_ignore_ascii_case("row")) {
        return Err(EngineError::Other(format!(
            "Invalid binlog format value: {}",
            schema.property("binlog.format").unwrap_or_default()
        )));
    }
    Ok(schema)
}

/// `changelog.ttl_seconds` / `binlog.ttl_seconds` must be a positive number of seconds.
fn check_ttl(props: &[(String, String)]) -> Result<(), EngineError> {
    for (k, v) in props {
        if (k == "changelog.ttl_seconds" || k == "binlog.ttl_seconds") && !v.trim().parse::<i64>().is_ok_and(|n| n > 0)
        {
            return Err(EngineError::Other(format!("ROW {k} must be greater than 0")));
        }
    }
    Ok(())
}

/// Executes one DDL statement against the state; returns an info string.
pub fn ddl_in_state(st: &mut State, current: Option<&str>, sql: &str) -> Result<String, EngineError> {
    let mut p = Parser::new(sql)?;
    if p.is_kw_at(1, "VIEW") && (p.is_kw("ALTER") || p.is_kw("CREATE")) || p.is_kw_at(1, "OR") {
        let def = parse_view(sql)?;
        let db = resolve_db(&def.name, current)?.to_string();
        let name = def.name.name.clone();
        if st.db(&db)?.tables.contains_key(&name) {
            return Err(EngineError::TableExists(name));
        }
        let existing = st.db(&db)?.views.get(&name).map(|v| v.id);
        let id = match existing {
            Some(_) if def.if_not_exists => return Ok(String::new()),
            Some(_) if !def.replace => return Err(EngineError::TableExists(name)),
            None if def.alter => return Err(EngineError::UnknownTable(name, db)),
            Some(id) => id,
            None => {
                st.next_id += 1;
                st.next_id
            }
        };
        st.db_mut(&db)?.views.insert(name, View { id, ..def.view });
        return Ok(String::new());
    }
    if p.is_kw("DROP") && p.is_kw_at(1, "VIEW") {
        p.advance();
        p.advance();
        let ie = p.eat_kws(&["IF", "EXISTS"]);
        let name = p.object_name()?;
        p.expect_end()?;
        let db = resolve_db(&name, current)?.to_string();
        if st.db_mut(&db)?.views.remove(&name.name).is_none() && !ie {
            return Err(EngineError::UnknownTable(name.name, db));
        }
        return Ok(String::new());
    }
    if p.eat_kw("CREATE") {
        if p.eat_kw("DATABASE") || p.eat_kw("SCHEMA") {
            let ine = p.eat_kws(&["IF", "NOT", "EXISTS"]);
            let name = p.ident()?;
            if p.eat_kw("PROPERTIES") {
                p.properties()?;
            }
            p.expect_end()?;
            if st.dbs.contains_key(&name) {
                return if ine { Ok(String::new()) } else { Err(EngineError::DatabaseExists(name)) };
            }
            st.next_id += 1;
            let id = st.next_id;
            st.dbs.insert(name, Database { id, ..Default::default() });
            return Ok(String::new());
        }
        p.eat_kw("EXTERNAL");
        p.expect_kw("TABLE")?;
        let ine = p.eat_kws(&["IF", "NOT", "EXISTS"]);
        let name = p.object_name()?;
        let db = resolve_db(&name, current)?.to_string();
        st.db(&db)?;
        let schema = if p.eat_kw("LIKE") {
            let src = p.object_name()?;
            p.expect_end()?;
            let sdb = resolve_db(&src, current)?;
            st.table(sdb, &src.name)?.schema.clone()
        } else {
            let ct = p.create_table_body(name.clone(), ine)?;
            build_schema(&ct)?
        };
        if st.db(&db)?.tables.contains_key(&name.name) || st.db(&db)?.views.contains_key(&name.name) {
            return if ine { Ok(String::new()) } else { Err(EngineError::TableExists(name.name)) };
        }
        st.next_id += 1;
        let id = st.next_id;
        let table = Table::new(id, name.name.clone(), schema, &mut st.next_id);
        st.db_mut(&db)?.tables.insert(name.name, table);
        return Ok(String::new());
    }
    if p.eat_kw("DROP") {
        if p.eat_kw("DATABASE") || p.eat_kw("SCHEMA") {
            let ie = p.eat_kws(&["IF", "EXISTS"]);
            let name = p.ident()?;
            p.eat_kw("FORCE");
            p.expect_end()?;
            if st.dbs.remove(&name).is_none() && !ie {
                return Err(EngineError::Other(format!("Can't drop database '{name}'; database doesn't exist")));
            }
            return Ok(String::new());
        }
        p.expect_kw("TABLE")?;
        let ie = p.eat_kws(&["IF", "EXISTS"]);
        let name = p.object_name()?;
        p.eat_kw("FORCE");
        p.expect_end()?;
        let db = resolve_db(&name, current)?.to_string();
        let d = st.db_mut(&db)?;
        if d.tables.remove(&name.name).is_none() && !ie {
            return Err(EngineError::UnknownTable(name.name, db));
        }
        return Ok(String::new());
    }
    if p.eat_kw("TRUNCATE") {
        p.eat_kw("TABLE");
        let name = p.object_name()?;
        p.expect_end()?;
        let db = resolve_db(&name, current)?.to_string();
        st.table_mut(&db, &name.name)?.truncate();
        return Ok(String::new());
    }
    if p.eat_kw("ALTER") {
        p.expect_kw("TABLE")?;
        let name = p.object_name()?;
        let db = resolve_db(&name, current)?.to_string();
        let ops = p.alter_ops()?;
        let t = st.table(&db, &name.name)?;
        let heavy = ops.iter().any(|op| is_heavy(t, op));
        let origin_index_id = t.id;
        let create_ms = wall_ms();
        for op in ops {
            alter(st, &db, &name.name, op)?;
        }
        if heavy {
            st.next_id += 2;
            let schema_version = 1 + st.alter_jobs.iter().filter(|j| j.db == db && j.table == name.name).count() as i64;
            let job = AlterJob {
                job_id: st.next_id - 1,
                db,
                table: name.name,
                create_ms,
                finish_ms: wall_ms(),
                index_id: st.next_id,
                origin_index_id,
                schema_version,
                txn_id: st.next_txn,
            };
            st.alter_jobs.push(job);
        }
        return Ok(String::new());
    }
    Err(EngineError::Syntax(format!("Unsupported DDL statement: {sql}")))
}

fn alter(st: &mut State, db: &str, table: &str, op: AlterOp) -> Result<(), EngineError> {
    let changelog = st.table(db, table)?.schema.changelog_enabled();
    let not_allowed =
        || EngineError::Other("Not allowed to perform current operation on Table With binlog<row>".into());
    if let AlterOp::Rename(new) = &op {
        let d = st.db_mut(db)?;
        if d.tables.contains_key(new) {
            return Err(EngineError::TableExists(new.clone()));
        }
        if let Some(mut t) = d.tables.remove(table) {
            t.name = new.clone();
            t.touch();
            d.tables.insert(new.clone(), t);
        }
        return Ok(());
    }
    let t = st.table_mut(db, table)?;
    match op {
        AlterOp::AddColumns(cols, pos) => {
            let mut insert_at = match &pos {
                ColumnPosition::Default => t.schema.columns.len(),
                ColumnPosition::First => 0,
                ColumnPosition::After(c) => {
                    t.schema.column_index(c).ok_or_else(|| EngineError::UnknownColumn(c.clone(), table.to_string()))?
                        + 1
                }
            };
            insert_at = insert_at.max(t.schema.key_count);
            for (at, mut c) in (insert_at..).zip(cols) {
                if t.schema.column_index(&c.name).is_some() {
                    return Err(EngineError::Other(format!(
                        "Can not add column which already exists in base table: {}",
                        c.name
                    )));
                }
                if t.schema.keys_type == KeysType::Aggregate && c.agg.is_none() {
                    c.agg = Some(crate::storage::AggType::Replace);
                }
                let fill = c.default_value().unwrap_or(Value::Null);
                t.schema.columns.insert(at, c);
                t.map_rows(|row| row.insert(at, fill.clone())).map_err(EngineError::Other)?;
            }
        }
        AlterOp::DropColumn(c) => {
            let i =
                t.schema.column_index(&c).ok_or_else(|| EngineError::UnknownColumn(c.clone(), table.to_string()))?;
            if i < t.schema.key_count && t.schema.keys_type != KeysType::Duplicate {
                return Err(EngineError::Other(format!("Can not drop key column in Unique data model table: {c}")));
            }
            if t.schema.columns.len() == 1 {
                return Err(EngineError::Other("Do not allow remove all columns".into()));
            }
            t.schema.columns.remove(i);
            if i < t.schema.key_count {
                t.schema.key_count -= 1;
            }
            t.map_rows(|row| {
                row.remove(i);
            })
            .map_err(EngineError::Other)?;
        }
        AlterOp::ModifyColumn(col, comment_only, pos) => {
            let i = t
                .schema
                .column_index(&col.name)
                .ok_or_else(|| EngineError::UnknownColumn(col.name.clone(), table.to_string()))?;
            if comment_only {
                t.schema.columns[i].comment = col.comment.clone();
                t.touch();
                return Ok(());
            }
            if changelog {
                return Err(not_allowed());
            }
            let old_ty = t.schema.columns[i].ty.clone();
            let new_ty = col.ty.clone();
            let mut newc = *col;
            if i < t.schema.key_count {
                newc.agg = None;
            } else if t.schema.keys_type == KeysType::Aggregate && newc.agg.is_none() {
                newc.agg = t.schema.columns[i].agg;
            }
            if newc == t.schema.columns[i] && pos == ColumnPosition::Default {
                // Doris' schema change refuses a column definition equal to the one in place.
                return Err(EngineError::Other("Nothing is changed. please check your alter stmt.".into()));
            }
            t.schema.columns[i] = newc;
            if old_ty != new_ty {
                t.map_rows(|row| {
                    let v = old_ty.render(&row[i]).and_then(|s| new_ty.parse_text(&s).ok()).unwrap_or(Value::Null);
                    row[i] = v;
                })
                .map_err(EngineError::Other)?;
            }
            let target = match pos {
                ColumnPosition::Default => None,
                ColumnPosition::First => Some(0),
                ColumnPosition::After(a) => t.schema.column_index(&a).map(|x| if x < i { x + 1 } else { x }),
            };
            if let Some(to) = target
                && to != i
            {
                let to = to.max(t.schema.key_count.min(i));
                let c = t.schema.columns.remove(i);
                t.schema.columns.insert(to, c);
                t.map_rows(|row| {
                    let v = row.remove(i);
                    row.insert(to, v);
                })
                .map_err(EngineError::Other)?;
            }
            t.touch();
        }
        AlterOp::RenameColumn(a, b) => {
            if changelog {
                return Err(not_allowed());
            }
            let i =
                t.schema.column_index(&a).ok_or_else(|| EngineError::UnknownColumn(a.clone(), table.to_string()))?;
            if t.schema.column_index(&b).is_some() {
                return Err(EngineError::Other(format!("Column name[{b}] is already used")));
            }
            t.schema.columns[i].name = b.clone();
            if let Distribution::Hash(cols, _) = &mut t.schema.distribution {
                for c in cols.iter_mut() {
                    if c.eq_ignore_ascii_case(&a) {
                        *c = b.clone();
                    }
                }
            }
            for (k, v) in t.schema.properties.iter_mut() {
                if k == "function_column.sequence_col" && v.eq_ignore_ascii_case(&a) {
                    *v = b.clone();
                }
            }
            t.touch();
        }
        AlterOp::SetProperties(props) => {
            check_ttl(&props)?;
            for (k, v) in props {
                if (k == "binlog.enable" || k == "changelog.enable") && changelog && v == "false" {
                    return Err(EngineError::Other("can't disable binlog when format is [Row]".into()));
                }
                match t.schema.properties.iter_mut().find(|(x, _)| *x == k) {
                    Some(e) => e.1 = v,
                    None => t.schema.properties.push((k, v)),
                }
            }
            t.touch();
        }
        AlterOp::ModifyComment(c) => {
            t.schema.comment = c;
            t.touch();
        }
        AlterOp::EnableFeature(feature, props) => {
            let unique = t.schema.keys_type == KeysType::Unique;
            match feature.to_ascii_uppercase().as_str() {
                // The delete sign is always there on UNIQUE tables.
                "BATCH_DELETE" if unique => {}
                "BATCH_DELETE" => {
                    return Err(EngineError::Other("Batch delete only supported in unique tables.".into()));
                }
                "SEQUENCE_LOAD" if !unique => {
                    return Err(EngineError::Other("Sequence load only supported in unique tables.".into()));
                }
                "SEQUENCE_LOAD" => {
                    let Some((_, ty)) = props.iter().find(|(k, _)| k == "function_column.sequence_type") else {
                        return Err(EngineError::Other(
                            "Sequence load need property function_column.sequence_type".into(),
                        ));
                    };
                    DorisType::from_parts(ty, &[], ty).map_err(EngineError::Other)?;
                    if t.schema.has_sequence() {
                        return Err(EngineError::Other(
                            "Can not enable sequence column support, already supported sequence column.".into(),
                        ));
                    }
                    t.schema.properties.push(("function_column.sequence_type".into(), ty.clone()));
                    t.touch();
                }
                "UPDATE_FLEXIBLE_COLUMNS" => {
                    return Err(EngineError::Other(format!(
                        "doris-lite does not support flexible partial updates (UPDATE_FLEXIBLE_COLUMNS) on table `{table}`"
                    )));
                }
                _ => return Err(EngineError::Other(format!("unknown feature name: {feature}"))),
            }
        }
        AlterOp::Rename(_) => {}
    }
    Ok(())
}

/// Renders `SHOW CREATE TABLE` the way Doris does.
pub fn show_create_table(t: &Table) -> String {
    let s = &t.schema;
    let mut out = format!("CREATE TABLE `{}` (\n", t.name);
    let cols: Vec<String> = s
        .columns
        .iter()
        .map(|c| {
            let mut line = format!("  `{}` {}", c.name, c.ty.sql_name());
            if let Some(a) = c.agg {
                line.push(' ');
                line.push_str(a.sql());
            }
            line.push_str(if c.nullable { " NULL" } else { " NOT NULL" });
            if c.auto_increment {
                line.push_str(" AUTO_INCREMENT(1)");
            }
            match &c.default {
                Some(crate::storage::DefaultValue::Literal(v)) => line.push_str(&format!(" DEFAULT \"{v}\"")),
                Some(crate::storage::DefaultValue::Null) => line.push_str(" DEFAULT NULL"),
                Some(crate::storage::DefaultValue::CurrentTimestamp(p)) => match p {
                    Some(p) => line.push_str(&format!(" DEFAULT CURRENT_TIMESTAMP({p})")),
                    None => line.push_str(" DEFAULT CURRENT_TIMESTAMP"),
                },
                None => {}
            }
            if !c.comment.is_empty() {
                line.push_str(&format!(" COMMENT '{}'", c.comment.replace('\'', "\\'")));
            }
            line
        })
        .collect();
    out.push_str(&cols.join(",\n"));
    out.push_str("\n) ENGINE=OLAP\n");
    let keys: Vec<String> = s.columns[..s.key_count].iter().map(|c| format!("`{}`", c.name)).collect();
    out.push_str(&format!("{} KEY({})\n", s.keys_type.sql(), keys.join(", ")));
    if s.comment.is_empty() {
        out.push_str("COMMENT 'OLAP'\n");
    } else {
        out.push_str(&format!("COMMENT '{}'\n", s.comment.replace('\'', "\\'")));
    }
    if let Some(p) = &s.partition_clause {
        out.push_str(p);
        out.push('\n');
    }
    let buckets = |b: &Buckets| match b {
        Buckets::Fixed(n) => n.to_string(),
        Buckets::Auto => "AUTO".into(),
    };
    match &s.distribution {
        Distribution::Hash(cols, b) => {
            let cols: Vec<String> = cols.iter().map(|c| format!("`{c}`")).collect();
            out.push_str(&format!("DISTRIBUTED BY HASH({}) BUCKETS {}\n", cols.join(", "), buckets(b)));
        }
        Distribution::Random(b) => {
            out.push_str(&format!("DISTRIBUTED BY RANDOM BUCKETS {}\n", buckets(b)));
        }
    }
    let mut props: Vec<(String, String)> = Vec::new();
    let mut replication = None;
    for (k, v) in &s.properties {
        if k == "replication_num" {
            replication = Some(format!("tag.location.default: {v}"));
        } else if k == "replication_allocation" {
            replication = Some(v.clone());
        } else {
            props.push((k.clone(), v.clone()));
        }
    }
    let mut all =
        vec![("replication_allocation".to_string(), replication.unwrap_or_else(|| "tag.location.default: 1".into()))];
    all.extend(props);
    if s.keys_type == KeysType::Unique && !all.iter().any(|(k, _)| k == "enable_unique_key_merge_on_write") {
        all.push(("enable_unique_key_merge_on_write".into(), "true".into()));
    }
    if !all.iter().any(|(k, _)| k == "light_schema_change") {
        all.push(("light_schema_change".into(), "true".into()));
    }
    let props: Vec<String> = all.iter().map(|(k, v)| format!("\"{k}\" = \"{v}\"")).collect();
    out.push_str("PROPERTIES (\n");
    out.push_str(&props.join(",\n"));
    out.push_str("\n);");
    out
}

/// `DESC` type spelling (upper-case like Doris' DESC output).
pub fn desc_type(ty: &DorisType) -> String {
    ty.sql_name().to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        let e = Engine::new(EngineConfig::default(), None).unwrap();
        e.ddl(None, "CREATE DATABASE test").unwrap();
        e.ddl(Some("test"), "CREATE TABLE t (id INT, v VARCHAR(10)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2")
            .unwrap();
        e
    }

    #[test]
    fn a_load_aborted_while_its_body_arrives_cannot_precommit() {
        let e = engine();
        let t = e.begin("test", "t", "l1").unwrap().txn_id;
        e.abort_2pc(t).unwrap();
        let err = e.precommit(t, TableWrite::Rows { ops: vec![], partial: None }).unwrap_err().to_string();
        assert!(err.contains(&format!("transaction [{t}] is already aborted. abort reason: User Abort")), "{err}");
        assert_eq!(e.lock().txns[&t].status, TxnStatus::Aborted);
    }

    #[test]
    fn precommitted_and_aborted_transactions_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Engine::new(EngineConfig::default(), Some(WriteAheadLog::open(dir.path()).unwrap())).unwrap();
        let (kept, dropped) = {
            let e = open();
            e.ddl(None, "CREATE DATABASE test").unwrap();
            e.ddl(Some("test"), "CREATE TABLE t (id INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1").unwrap();
            let a = e.begin("test", "t", "keep").unwrap();
            e.precommit(a.txn_id, TableWrite::Rows { ops: vec![], partial: None }).unwrap();
            let b = e.begin("test", "t", "drop").unwrap();
            e.precommit(b.txn_id, TableWrite::Rows { ops: vec![], partial: None }).unwrap();
            e.abort_2pc(b.txn_id).unwrap();
            (a.txn_id, b.txn_id)
        };
        let e = open();
        assert_eq!(e.label_state("test", "keep").unwrap(), "PRECOMMITTED");
        assert_eq!(e.label_state("test", "drop").unwrap(), "ABORTED");
        e.commit_2pc(kept).unwrap();
        assert_eq!(e.label_state("test", "keep").unwrap(), "VISIBLE");
        assert!(e.commit_2pc(dropped).unwrap_err().to_string().contains("is already aborted"));
    }

    #[test]
    fn labels_and_2pc() {
        let e = engine();
        let b = e.begin("test", "t", "l1").unwrap();
        e.precommit(b.txn_id, TableWrite::Rows { ops: vec![], partial: None }).unwrap();
        match e.begin("test", "t", "l1") {
            Err(EngineError::LabelExists { status, txn_id, .. }) => {
                assert_eq!(status.job_status(), "PRECOMMITTED");
                assert_eq!(txn_id, b.txn_id);
            }
            other => panic!("unexpected {other:?}"),
        }
        e.commit_2pc(b.txn_id).unwrap();
        let err = e.commit_2pc(b.txn_id).unwrap_err().to_string();
        assert_eq!(err, format!("transaction [{}] is already visible, not pre-committed.", b.txn_id));
        assert_eq!(e.label_state("test", "l1").unwrap(), "VISIBLE");
        let b2 = e.begin("test", "t", "l2").unwrap();
        e.abort(b2.txn_id, "bad data");
        // Aborted labels can be reused.
        e.begin("test", "t", "l2").unwrap();
    }

    #[test]
    fn changes_and_tablets_for_part_two() {
        let e = engine();
        e.ddl(Some("test"), "CREATE TABLE c (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3 PROPERTIES (\"changelog.enable\" = \"true\")").unwrap();
        let row = |k, v| crate::storage::RowOp {
            values: vec![Value::Int(k), Value::Int(v)],
            delete: false,
            seq: Value::Null,
        };
        let b = e.begin("test", "c", "a").unwrap();
        let t1 = e.commit(b.txn_id, TableWrite::Rows { ops: vec![row(1, 1), row(2, 2)], partial: None }).unwrap();
        let b = e.begin("test", "c", "b").unwrap();
        let t2 = e.commit(b.txn_id, TableWrite::Rows { ops: vec![row(1, 5)], partial: None }).unwrap();
        assert!(t2 > t1);
        assert_eq!(e.changes("test", "c", t1, t2).unwrap().len(), 2);
        let later = e.changes("test", "c", t2, i64::MAX).unwrap();
        assert_eq!(
            later.iter().map(|r| r.op).collect::<Vec<_>>(),
            vec![crate::storage::ChangeOp::UpdateBefore, crate::storage::ChangeOp::UpdateAfter]
        );
        assert_eq!(e.tablet_ids("test", "c").unwrap().len(), 3);
        assert_eq!(e.snapshot("test", "c", false).unwrap().num_rows(), 2);
        assert!(e.current_tso() >= t2);
    }

    #[test]
    fn ddl_errors() {
        let e = engine();
        assert!(matches!(e.ddl(None, "CREATE DATABASE test"), Err(EngineError::DatabaseExists(_))));
        assert!(matches!(
            e.ddl(Some("test"), "CREATE TABLE t (id INT) DUPLICATE KEY(id)"),
            Err(EngineError::TableExists(_))
        ));
        e.ddl(Some("test"), "ALTER TABLE t ADD COLUMN (a INT, b INT DEFAULT \"7\") AFTER id").unwrap();
        let st = e.lock();
        let names: Vec<&str> = st.table("test", "t").unwrap().schema.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["id", "a", "b", "v"]);
        let ddl = show_create_table(st.table("test", "t").unwrap());
        assert!(ddl.contains("UNIQUE KEY(`id`)"), "{ddl}");
        assert!(ddl.contains("`b` int NULL DEFAULT \"7\""), "{ddl}");
        drop(st);
        // A MODIFY that changes nothing is refused, as Doris' schema change refuses it.
        let same = e.ddl(Some("test"), "ALTER TABLE t MODIFY COLUMN v VARCHAR(10) NULL").unwrap_err().to_string();
        assert!(same.contains("Nothing is changed. please check your alter stmt."), "{same}");
        e.ddl(Some("test"), "ALTER TABLE t MODIFY COLUMN v VARCHAR(20) NULL").unwrap();
    }
}
