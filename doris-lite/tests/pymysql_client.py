"""Drives doris-lite with pymysql the way a Doris user would (quick start of the Flink
connector docs). Usage: python pymysql_client.py PORT. Exits non-zero on any mismatch."""
import sys

import pymysql

STUDENT_DDL = """CREATE TABLE test.student (
    `id` INT,
    `name` VARCHAR(256),
    `age` INT
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 1
PROPERTIES (
    "replication_allocation" = "tag.location.default: 3"
);"""

STUDENT_TRANS_DDL = STUDENT_DDL.replace("test.student", "test.student_trans")


def check(got, want, what):
    if got != want:
        print(f"MISMATCH {what}: got {got!r}, want {want!r}")
        sys.exit(1)


def main():
    port = int(sys.argv[1])
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="")
    cur = conn.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS test")
    cur.execute(STUDENT_DDL)
    cur.execute(STUDENT_TRANS_DDL)
    cur.execute('INSERT INTO test.student values(1, "James", 18);')
    cur.execute('INSERT INTO test.student values(2, "Emily", 28);')
    conn.commit()
    cur.execute("select * from test.student order by id")
    check(cur.fetchall(), ((1, "James", 18), (2, "Emily", 28)), "select")
    cur.execute("SHOW CREATE TABLE test.student")
    name, ddl = cur.fetchone()
    check(name, "student", "show create table name")
    if "UNIQUE KEY(`id`)" not in ddl or "DISTRIBUTED BY HASH(`id`) BUCKETS 1" not in ddl:
        print("MISMATCH show create table:", ddl)
        sys.exit(1)
    cur.execute(
        "SELECT COLUMN_NAME,DATA_TYPE,COLUMN_SIZE,DECIMAL_DIGITS FROM `information_schema`.`COLUMNS` "
        "WHERE `TABLE_SCHEMA`=%s AND `TABLE_NAME`=%s",
        ("test", "student"),
    )
    check(cur.fetchall(), (("id", "int", 10, 0), ("name", "varchar", 256, None), ("age", "int", 10, 0)), "columns")
    dict_cur = conn.cursor(pymysql.cursors.DictCursor)
    dict_cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_NAME = 'student_trans' LIMIT 1")
    check(dict_cur.fetchall(), [{"COLUMN_NAME": "id"}], "dict cursor column name")
    n = cur.execute("INSERT INTO test.student_trans SELECT id, concat('prefix_', name), age + 1 FROM test.student")
    check(n, 2, "insert select affected rows")
    cur.execute("select * from test.student_trans order by id")
    check(cur.fetchall(), ((1, "prefix_James", 19), (2, "prefix_Emily", 29)), "student_trans")
    try:
        cur.execute("SELECT * FROM test.missing")
        print("MISMATCH: no error for a missing table")
        sys.exit(1)
    except pymysql.err.ProgrammingError as e:
        check(e.args[0], 1146, "missing table code")
    except pymysql.err.MySQLError as e:
        check(e.args[0], 1146, "missing table code")
    cur.execute("SELECT 1")
    check(cur.fetchall(), ((1,),), "still serving")
    conn.close()
    print("OK")


if __name__ == "__main__":
    main()
