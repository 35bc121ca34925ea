//! The DDL statements of the binlog, read with `sqlparser`'s MySQL dialect: what they do to the
//! tables the source follows. The source keeps each table's columns as of the binlog position it
//! reads (the row events carry values by position, not by name), so a statement is applied to
//! that copy, not read back from `information_schema` (which is the schema of now).

use sqlparser::ast::{
    AlterTableOperation, ColumnDef, ColumnOption, Expr, MySQLColumnPosition, ObjectName, ObjectType, Statement,
    TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use super::types::MysqlColumn;
use crate::runtime::Alter;

/// A table named by a statement: database (the statement's, or the session's) and name.
pub type Name = (String, String);

/// A column a statement defines, with what the Doris column takes from it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewColumn {
    pub column: MysqlColumn,
    pub default: Option<String>,
    pub comment: Option<String>,
    /// Declared `PRIMARY KEY` inline.
    pub primary: bool,
}

/// Where `ADD` / `CHANGE` / `MODIFY` put a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    Last,
    First,
    After(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum AlterOp {
    Add {
        column: NewColumn,
        place: Place,
        if_not_exists: bool,
    },
    Drop {
        name: String,
        if_exists: bool,
    },
    Rename {
        from: String,
        to: String,
    },
    /// `CHANGE from …` (`from` = the new name for `MODIFY`).
    Change {
        from: String,
        column: NewColumn,
        place: Option<Place>,
    },
    /// The primary key is set or dropped.
    PrimaryKey(Vec<String>),
}

/// What a statement does to tables.
#[derive(Debug, Clone, PartialEq)]
pub enum Ddl {
    Alter {
        table: Name,
        ops: Vec<AlterOp>,
    },
    Create {
        table: Name,
        columns: Vec<NewColumn>,
        primary_key: Vec<String>,
    },
    Truncate(Name),
    Drop(Name),
    Rename {
        from: Name,
        to: Name,
    },
    /// A statement about `table` that could not be read (the parser's message).
    Unreadable {
        table: Name,
        reason: String,
    },
}

/// The table statements in `sql`, run in database `db`; nothing for statements that are not
/// about tables (`CREATE USER`, `GRANT`, `FLUSH`, …).
pub fn parse(db: &str, sql: &str) -> Vec<Ddl> {
    let statements = match Parser::parse_sql(&MySqlDialect {}, sql) {
        Ok(s) => s,
        Err(e) => {
            return named_table(db, sql)
                .map(|table| Ddl::Unreadable { table, reason: e.to_string() })
                .into_iter()
                .collect();
        }
    };
    let mut out = Vec::new();
    for statement in statements {
        match statement {
            Statement::AlterTable(a) => {
                let table = name(db, &a.name);
                let mut ops = Vec::new();
                for op in a.operations {
                    match alter_op(op) {
                        Ok(Some(op)) => ops.push(op),
                        Ok(None) => {}
                        Err(reason) => {
                            out.push(Ddl::Unreadable { table: table.clone(), reason });
                            ops.clear();
                            break;
                        }
                    }
                }
                if !ops.is_empty() {
                    out.push(Ddl::Alter { table, ops });
                }
            }
            Statement::CreateTable(c) => {
                let table = name(db, &c.name);
                if c.query.is_some() || c.like.is_some() || c.clone.is_some() {
                    out.push(Ddl::Unreadable { table, reason: "CREATE TABLE … LIKE / AS SELECT".into() });
                    continue;
                }
                let columns: Vec<NewColumn> = c.columns.iter().map(new_column).collect();
                let mut primary_key: Vec<String> =
                    columns.iter().filter(|c| c.primary).map(|c| c.column.name.clone()).collect();
                for constraint in &c.constraints {
                    if let TableConstraint::PrimaryKey(pk) = constraint {
                        primary_key = pk.columns.iter().map(|c| expr_name(&c.column.expr)).collect();
                    }
                }
                out.push(Ddl::Create { table, columns, primary_key });
            }
            Statement::Truncate(t) => out.extend(t.table_names.iter().map(|t| Ddl::Truncate(name(db, &t.name)))),
            Statement::Drop { object_type: ObjectType::Table, names, .. } => {
                out.extend(names.iter().map(|n| Ddl::Drop(name(db, n))))
            }
            Statement::RenameTable(renames) => out
                .extend(renames.iter().map(|r| Ddl::Rename { from: name(db, &r.old_name), to: name(db, &r.new_name) })),
            _ => {}
        }
    }
    out
}

/// The table a statement the parser could not read is about, when it is a table statement.
fn named_table(db: &str, sql: &str) -> Option<Name> {
    static TABLE_STATEMENT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?is)^\s*(?:/\*.*?\*/\s*)*(?:ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE|CREATE\s+(?:OR\s+REPLACE\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?|TRUNCATE(?:\s+TABLE)?|DROP\s+TABLE(?:\s+IF\s+EXISTS)?|RENAME\s+TABLE)\s+((?:`[^`]+`|[\w$]+)(?:\s*\.\s*(?:`[^`]+`|[\w$]+))?)",
        )
        .expect("a valid pattern")
    });
    let text = TABLE_STATEMENT.captures(sql)?.get(1)?.as_str();
    let parts: Vec<String> = text.split('.').map(|p| p.trim().trim_matches('`').to_string()).collect();
    match parts.as_slice() {
        [t] => Some((db.to_string(), t.clone())),
        [d, t] => Some((d.clone(), t.clone())),
        _ => None,
    }
}

fn name(db: &str, n: &ObjectName) -> Name {
    let parts: Vec<String> =
        n.0.iter().map(|p| p.as_ident().map_or_else(|| p.to_string(), |i| i.value.clone())).collect();
    match parts.as_slice() {
        [d, t] => (d.clone(), t.clone()),
        _ => (db.to_string(), parts.last().cloned().unwrap_or_default()),
    }
}

fn expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.clone(),
        other => other.to_string().trim_matches('`').to_string(),
    }
}

fn place(p: Option<MySQLColumnPosition>) -> Option<Place> {
    p.map(|p| match p {
        MySQLColumnPosition::First => Place::First,
        MySQLColumnPosition::After(i) => Place::After(i.value),
    })
}

fn alter_op(op: AlterTableOperation) -> Result<Option<AlterOp>, String> {
    Ok(Some(match op {
        AlterTableOperation::AddColumn { if_not_exists, column_def, column_position, .. } => AlterOp::Add {
            column: new_column(&column_def),
            place: place(column_position).unwrap_or(Place::Last),
            if_not_exists,
        },
        AlterTableOperation::DropColumn { column_names, if_exists, .. } => match column_names.as_slice() {
            [one] => AlterOp::Drop { name: one.value.clone(), if_exists },
            _ => return Err("DROP of several columns in one clause".into()),
        },
        AlterTableOperation::RenameColumn { old_column_name, new_column_name } => {
            AlterOp::Rename { from: old_column_name.value, to: new_column_name.value }
        }
        AlterTableOperation::ChangeColumn { old_name, new_name, data_type, options, column_position } => {
            let def = ColumnDef { name: new_name, data_type, options: option_defs(options) };
            AlterOp::Change { from: old_name.value, column: new_column(&def), place: place(column_position) }
        }
        AlterTableOperation::ModifyColumn { col_name, data_type, options, column_position } => {
            let from = col_name.value.clone();
            let def = ColumnDef { name: col_name, data_type, options: option_defs(options) };
            AlterOp::Change { from, column: new_column(&def), place: place(column_position) }
        }
        AlterTableOperation::AddConstraint { constraint: TableConstraint::PrimaryKey(pk), .. } => {
            AlterOp::PrimaryKey(pk.columns.iter().map(|c| expr_name(&c.column.expr)).collect())
        }
        AlterTableOperation::DropPrimaryKey { .. } => AlterOp::PrimaryKey(Vec::new()),
        AlterTableOperation::RenameTable { .. } => return Err("RENAME TO inside ALTER TABLE".into()),
        // Indexes, defaults, engine, charset, partitions, …: the columns stay as they are.
        _ => return Ok(None),
    }))
}

fn option_defs(options: Vec<ColumnOption>) -> Vec<sqlparser::ast::ColumnOptionDef> {
    options.into_iter().map(|option| sqlparser::ast::ColumnOptionDef { name: None, option }).collect()
}

/// A column as a statement defines it. Its type is the statement's text (`INT UNSIGNED`,
/// `VARCHAR(20)`, `DECIMAL(38,10)`), which [`MysqlColumn::doris_type`] reads as it reads
/// `information_schema`'s.
fn new_column(def: &ColumnDef) -> NewColumn {
    let mut nullable = true;
    let mut default = None;
    let mut comment = None;
    let mut primary = false;
    let mut charset = None;
    for o in &def.options {
        match &o.option {
            ColumnOption::CharacterSet(c) => charset = Some(c.to_string().to_ascii_lowercase()),
            ColumnOption::NotNull => nullable = false,
            ColumnOption::Null => nullable = true,
            ColumnOption::PrimaryKey(_) => {
                primary = true;
                nullable = false;
            }
            ColumnOption::Default(e) => default = default_text(e),
            ColumnOption::Comment(c) => comment = Some(c.clone()),
            _ => {}
        }
    }
    NewColumn {
        column: MysqlColumn { name: def.name.value.clone(), column_type: def.data_type.to_string(), nullable, charset },
        default,
        comment,
        primary,
    }
}

/// A default as Doris takes it: literals unquoted, the current-time functions as
/// `CURRENT_TIMESTAMP`, `NULL` as none.
fn default_text(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => v.value.clone().into_string().or_else(|| {
            let text = v.value.to_string();
            (!text.eq_ignore_ascii_case("null")).then_some(text)
        }),
        Expr::UnaryOp { .. } => Some(e.to_string().replace(' ', "")),
        other => {
            let text = other.to_string();
            let bare = text.trim_end_matches("()").to_ascii_uppercase();
            if ["CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP", "SYSDATE"]
                .iter()
                .any(|f| bare == *f || bare.starts_with(&format!("{f}(")))
            {
                Some("CURRENT_TIMESTAMP".into())
            } else {
                Some(text)
            }
        }
    }
}

/// A table's columns and key as the source keeps them.
pub struct Shape<'a> {
    pub columns: &'a mut Vec<MysqlColumn>,
    pub primary_key: &'a mut Vec<String>,
}

/// Apply `ops` to a table, returning what changed for the sink. `doris` names a column's
/// Doris type (for `MODIFY`, which matters only when that type changes).
pub fn apply(shape: Shape<'_>, ops: &[AlterOp], doris: impl Fn(&MysqlColumn) -> String) -> Result<Vec<Alter>, String> {
    let Shape { columns, primary_key } = shape;
    let find = |columns: &[MysqlColumn], n: &str| columns.iter().position(|c| c.name.eq_ignore_ascii_case(n));
    let put = |columns: &mut Vec<MysqlColumn>, column: MysqlColumn, place: &Place| -> Result<(), String> {
        let at = match place {
            Place::Last => columns.len(),
            Place::First => 0,
            Place::After(a) => find(columns, a).ok_or_else(|| format!("AFTER `{a}`: no such column"))? + 1,
        };
        columns.insert(at, column);
        Ok(())
    };
    let mut out = Vec::new();
    for op in ops {
        match op {
            AlterOp::Add { column, place, if_not_exists } => {
                if find(columns, &column.column.name).is_some() {
                    if *if_not_exists {
                        continue;
                    }
                    return Err(format!("ADD `{}`: the column exists", column.column.name));
                }
                put(columns, column.column.clone(), place)?;
                out.push(Alter::AddColumn {
                    name: column.column.name.clone(),
                    default: column.default.clone(),
                    comment: column.comment.clone(),
                });
            }
            AlterOp::Drop { name, if_exists } => {
                let Some(i) = find(columns, name) else {
                    if *if_exists {
                        continue;
                    }
                    return Err(format!("DROP `{name}`: no such column"));
                };
                let gone = columns.remove(i);
                primary_key.retain(|k| !k.eq_ignore_ascii_case(&gone.name));
                out.push(Alter::DropColumn { name: gone.name });
            }
            AlterOp::Rename { from, to } => {
                let i = find(columns, from).ok_or_else(|| format!("RENAME `{from}`: no such column"))?;
                rename(columns, primary_key, i, to, &mut out);
            }
            AlterOp::Change { from, column, place } => {
                let i = find(columns, from).ok_or_else(|| format!("CHANGE `{from}`: no such column"))?;
                rename(columns, primary_key, i, &column.column.name, &mut out);
                let before = doris(&columns[i]);
                columns[i] = column.column.clone();
                if doris(&columns[i]) != before {
                    out.push(Alter::ModifyColumn { name: column.column.name.clone(), from: before });
                }
                if let Some(place) = place {
                    let moved = columns.remove(i);
                    put(columns, moved, place)?;
                }
            }
            AlterOp::PrimaryKey(key) => {
                if !key.iter().map(|k| k.to_ascii_lowercase()).eq(primary_key.iter().map(|k| k.to_ascii_lowercase())) {
                    *primary_key = key.clone();
                    out.push(Alter::Unsupported {
                        reason: format!(
                            "the primary key became ({}); a Doris table's key cannot change: create the table again",
                            key.join(", ")
                        ),
                    });
                }
            }
        }
    }
    Ok(out)
}

fn rename(columns: &mut [MysqlColumn], primary_key: &mut [String], i: usize, to: &str, out: &mut Vec<Alter>) {
    let from = columns[i].name.clone();
    if from == to {
        return;
    }
    for k in primary_key.iter_mut().filter(|k| k.eq_ignore_ascii_case(&from)) {
        *k = to.to_string();
    }
    columns[i].name = to.to_string();
    out.push(Alter::RenameColumn { from, to: to.to_string() });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, t: &str) -> MysqlColumn {
        MysqlColumn { name: name.into(), column_type: t.into(), nullable: true, charset: None }
    }

    fn doris(c: &MysqlColumn) -> String {
        c.doris_type().map(|t| t.to_string()).unwrap_or_default()
    }

    #[test]
    fn alter_statements_change_the_columns_the_rows_are_read_with() {
        let mut columns = vec![col("id", "int(11)"), col("name", "varchar(20)"), col("old", "int")];
        let mut key = vec!["id".to_string()];
        let ddl = parse(
            "app",
            "ALTER TABLE users ADD COLUMN age INT NOT NULL DEFAULT 18 COMMENT 'years' AFTER id, DROP COLUMN old, \
             CHANGE name full_name VARCHAR(40), RENAME COLUMN age TO years",
        );
        let [Ddl::Alter { table, ops }] = ddl.as_slice() else { panic!("{ddl:?}") };
        assert_eq!(table, &("app".to_string(), "users".to_string()));
        let out = apply(Shape { columns: &mut columns, primary_key: &mut key }, ops, doris).unwrap();
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id", "years", "full_name"]);
        assert_eq!(
            out,
            [
                Alter::AddColumn { name: "age".into(), default: Some("18".into()), comment: Some("years".into()) },
                Alter::DropColumn { name: "old".into() },
                Alter::RenameColumn { from: "name".into(), to: "full_name".into() },
                Alter::ModifyColumn { name: "full_name".into(), from: "VARCHAR(80)".into() },
                Alter::RenameColumn { from: "age".into(), to: "years".into() },
            ]
        );
        assert!(!columns[1].nullable);
    }

    #[test]
    fn create_truncate_drop_and_unreadable_statements_name_their_tables() {
        let ddl = parse(
            "app",
            "CREATE TABLE `app`.`orders` (id BIGINT UNSIGNED NOT NULL, at DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3), note TEXT, PRIMARY KEY (id))",
        );
        let [Ddl::Create { table, columns, primary_key }] = ddl.as_slice() else { panic!("{ddl:?}") };
        assert_eq!(table.1, "orders");
        assert_eq!(primary_key, &["id"]);
        assert_eq!(columns[0].column.doris_type().unwrap().to_string(), "LARGEINT");
        assert_eq!(columns[1].default.as_deref(), Some("CURRENT_TIMESTAMP"));
        assert_eq!(parse("app", "TRUNCATE TABLE t1"), [Ddl::Truncate(("app".into(), "t1".into()))]);
        assert_eq!(
            parse("app", "DROP TABLE IF EXISTS `t2` /* generated by server */"),
            [Ddl::Drop(("app".into(), "t2".into()))]
        );
        assert!(parse("app", "CREATE USER x IDENTIFIED BY 'y'").is_empty());
        assert!(parse("app", "GRANT ALL ON *.* TO x").is_empty());
        let odd = parse("app", "ALTER TABLE other.t3 ADD SPATIAL INDEX g (shape) ALGORITHM=INPLACE WEIRD");
        assert!(
            matches!(odd.as_slice(), [Ddl::Unreadable { table, .. }] if table == &("other".into(), "t3".into())),
            "{odd:?}"
        );
    }

    #[test]
    fn a_change_of_the_primary_key_is_unsupported() {
        let mut columns = vec![col("id", "int"), col("k", "int")];
        let mut key = vec!["id".to_string()];
        let ddl = parse("d", "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (k)");
        let [Ddl::Alter { ops, .. }] = ddl.as_slice() else { panic!("{ddl:?}") };
        let out = apply(Shape { columns: &mut columns, primary_key: &mut key }, ops, doris).unwrap();
        assert!(matches!(out.last(), Some(Alter::Unsupported { reason }) if reason.contains("(k)")), "{out:?}");
    }
}
