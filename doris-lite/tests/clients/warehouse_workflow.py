"""A warehouse day with mysql-connector-python (Oracle's official driver, from PyPI) and curl as the
Doris manual uses it: Stream Loads of CSV (through a URL with a trailing slash) and of Parquet
written by pyarrow, a view over the loaded table, `group_concat`, `INSERT OVERWRITE` of a summary,
the column changes a whole-database sync issues (ADD with a default, a comment and a position,
DROP, RENAME, MODIFY) each followed by a Stream Load in the new shape, `SHOW ALTER TABLE COLUMN`,
`ENABLE FEATURE "SEQUENCE_LOAD"`, `SHOW DATA` and `information_schema.tables`.
Usage: warehouse_workflow.py QUERY_PORT HTTP_PORT; prints OK."""
import datetime
import json
import os
import subprocess
import sys
import tempfile

import mysql.connector
import pyarrow as pa
import pyarrow.parquet as pq

from common import check


def stream_load(http_port, table, path, *headers, slash=""):
    """curl as the Doris manual shows it; returns the reply's JSON."""
    # `-T` would append the file's name to a URL that ends in a slash; `--data-binary` keeps it.
    body = ["-X", "PUT", "--data-binary", f"@{path}", "-H", "Expect: 100-continue"] if slash else ["-T", path]
    args = ["curl", "-sS", "--location-trusted", "-u", "root:", *body]
    for h in headers:
        args += ["-H", h]
    args.append(f"http://127.0.0.1:{http_port}/api/wh/{table}/_stream_load{slash}")
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def load_text(http_port, table, text, *headers, slash=""):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    try:
        reply = stream_load(http_port, table, f.name, *headers, slash=slash)
    finally:
        os.unlink(f.name)
    check(reply["Status"], "Success", f"stream load into {table}: {reply}")
    return reply


def main():
    port, http_port = int(sys.argv[1]), sys.argv[2]
    conn = mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="")
    cur = conn.cursor()
    cur.execute("CREATE DATABASE wh")
    cur.execute("USE wh")
    cur.execute(
        "CREATE TABLE sales (id BIGINT, region VARCHAR(16), amount DECIMAL(10, 2), day DATE) "
        "DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4"
    )
    cur.execute(
        "CREATE TABLE customers (id INT, name VARCHAR(32), score INT) UNIQUE KEY(id) "
        "DISTRIBUTED BY HASH(id) BUCKETS 2"
    )

    # CSV through the URL with a trailing slash, as Doris' router accepts it.
    reply = load_text(
        http_port, "sales", "1,north,10.50,2026-12-01\n2,south,20.00,2026-12-01\n3,north,5.25,2026-12-02\n",
        "column_separator:,", "label:sales-csv-1", slash="/",
    )
    check(reply["NumberLoadedRows"], 3, "CSV rows loaded")
    # Parquet from pyarrow: columns matched by name, in another order.
    table = pa.table({
        "day": pa.array([datetime.date(2026, 12, 3)] * 2, pa.date32()),
        "amount": pa.array([7.75, 100.0]),
        "region": ["south", "east"],
        "id": pa.array([4, 5], pa.int64()),
    })
    path = os.path.join(tempfile.mkdtemp(), "sales.parquet")
    pq.write_table(table, path)
    reply = stream_load(http_port, "sales", path, "format:parquet", "label:sales-parquet-1")
    check((reply["Status"], reply["NumberLoadedRows"]), ("Success", 2), f"parquet load {reply}")
    cur.execute("SELECT id, region, amount, day FROM sales ORDER BY id")
    got = [(r[0], r[1], str(r[2]), str(r[3])) for r in cur.fetchall()]
    check(got, [
        (1, "north", "10.50", "2026-12-01"), (2, "south", "20.00", "2026-12-01"), (3, "north", "5.25", "2026-12-02"),
        (4, "south", "7.75", "2026-12-03"), (5, "east", "100.00", "2026-12-03"),
    ], "sales after the CSV and Parquet loads")
    # A body that is not Parquet is an error, and nothing is loaded.
    with tempfile.NamedTemporaryFile("w", suffix=".parquet", delete=False) as f:
        f.write("1,north\n")
    reply = stream_load(http_port, "sales", f.name, "format:parquet")
    check((reply["Status"], "parquet" in reply["Message"]), ("Fail", True), f"a broken parquet body: {reply}")

    # A view, group_concat, and INSERT OVERWRITE of a summary table.
    cur.execute(
        "CREATE VIEW region_totals (region, total COMMENT 'sum of amounts') COMMENT 'per region' AS "
        "SELECT region, sum(amount) FROM sales GROUP BY region"
    )
    cur.execute("SELECT region, total FROM region_totals ORDER BY region")
    check([(r, str(t)) for r, t in cur.fetchall()],
          [("east", "100.00"), ("north", "15.75"), ("south", "27.75")], "the view")
    cur.execute("SHOW FULL TABLES")
    check(cur.fetchall(), [("customers", "BASE TABLE"), ("region_totals", "VIEW"), ("sales", "BASE TABLE")],
          "SHOW FULL TABLES")
    cur.execute("SELECT group_concat(DISTINCT region ORDER BY region SEPARATOR '|') FROM sales")
    check(cur.fetchall(), [("east|north|south",)], "group_concat")
    cur.execute("SELECT group_concat(id ORDER BY id) FROM sales WHERE region = 'north'")
    check(cur.fetchall(), [("1, 3",)], "group_concat with Doris' default separator")
    cur.execute(
        "CREATE TABLE summary (region VARCHAR(16), total DECIMAL(12, 2)) UNIQUE KEY(region) "
        "DISTRIBUTED BY HASH(region) BUCKETS 1"
    )
    cur.execute("INSERT INTO summary VALUES ('stale', 1)")
    cur.execute("INSERT OVERWRITE TABLE summary SELECT region, total FROM region_totals WHERE total > 20")
    cur.execute("SELECT region, total FROM summary ORDER BY region")
    check([(r, str(t)) for r, t in cur.fetchall()], [("east", "100.00"), ("south", "27.75")],
          "summary after INSERT OVERWRITE")

    # The column changes a whole-database sync issues, each followed by a load in the new shape.
    load_text(http_port, "customers", "1,ann,10\n2,bob,20\n", "column_separator:,")
    cur.execute("ALTER TABLE customers ADD COLUMN tier VARCHAR(8) DEFAULT 'std' COMMENT 'level' AFTER name")
    load_text(http_port, "customers", "3,cy,gold,30\n", "column_separator:,")
    cur.execute("SELECT id, name, tier, score FROM customers ORDER BY id")
    check(cur.fetchall(), [(1, "ann", "std", 10), (2, "bob", "std", 20), (3, "cy", "gold", 30)], "after ADD COLUMN")
    cur.execute("SHOW FULL COLUMNS FROM customers")
    cols = {r[0]: r for r in cur.fetchall()}
    check((cols["tier"][5], cols["tier"][8]), ("std", "level"), "the added column's default and comment")
    cur.execute("ALTER TABLE customers DROP COLUMN score")
    load_text(http_port, "customers", "4,dee,silver\n", "column_separator:,")
    cur.execute("ALTER TABLE customers RENAME COLUMN name full_name")
    load_text(http_port, "customers", '{"id": 5, "full_name": "eve", "tier": "gold"}', "format:json")
    cur.execute("ALTER TABLE customers MODIFY COLUMN tier VARCHAR(32) COMMENT 'loyalty level'")
    load_text(http_port, "customers", "6,fay,platinum-plus\n", "column_separator:,")
    cur.execute("SELECT id, full_name, tier FROM customers ORDER BY id")
    check(cur.fetchall(), [
        (1, "ann", "std"), (2, "bob", "std"), (3, "cy", "gold"), (4, "dee", "silver"), (5, "eve", "gold"),
        (6, "fay", "platinum-plus"),
    ], "after DROP, RENAME and MODIFY")
    cur.execute("ALTER TABLE sales MODIFY COLUMN amount DECIMAL(12, 2)")
    cur.execute("SHOW ALTER TABLE COLUMN FROM wh WHERE TableName = 'sales'")
    names = [d[0] for d in cur.description]
    jobs = [dict(zip(names, r)) for r in cur.fetchall()]
    check([(j["TableName"], j["State"]) for j in jobs], [("sales", "FINISHED")], "SHOW ALTER TABLE COLUMN")
    load_text(http_port, "sales", "6,west,123456789.99,2026-12-03\n", "column_separator:,")
    cur.execute("SELECT amount FROM sales WHERE id = 6")
    check([str(r[0]) for r in cur.fetchall()], ["123456789.99"], "a load into the widened column")

    # ENABLE FEATURE "SEQUENCE_LOAD": a later load with an older sequence value loses.
    cur.execute(
        'ALTER TABLE customers ENABLE FEATURE "SEQUENCE_LOAD" WITH PROPERTIES '
        '("function_column.sequence_type" = "int")'
    )
    load_text(http_port, "customers", "1,ann,gold,5\n", "column_separator:,",
              "columns: id, full_name, tier, ver", "function_column.sequence_col: ver")
    load_text(http_port, "customers", "1,ann,bronze,3\n", "column_separator:,",
              "columns: id, full_name, tier, ver", "function_column.sequence_col: ver")
    cur.execute("SELECT tier FROM customers WHERE id = 1")
    check(cur.fetchall(), [("gold",)], "the newer sequence value kept")
    try:
        cur.execute('ALTER TABLE sales ENABLE FEATURE "BATCH_DELETE"')
        print("MISMATCH: BATCH_DELETE enabled on a DUPLICATE table")
        sys.exit(1)
    except mysql.connector.Error as e:
        check("Batch delete only supported in unique tables" in e.msg, True, f"BATCH_DELETE refusal: {e.msg}")

    # What is stored, as SHOW DATA and information_schema.tables report it.
    cur.execute("SHOW DATA")
    names = [d[0] for d in cur.description]
    rows = {r[0]: dict(zip(names, r)) for r in cur.fetchall()}
    check(sorted(k for k in rows if k in ("customers", "sales", "summary")), ["customers", "sales", "summary"],
          "SHOW DATA lists the tables")
    check("Total" in rows, True, "SHOW DATA has its Total row")
    cur.execute("SHOW DATA FROM wh.sales")
    names = [d[0] for d in cur.description]
    first = dict(zip(names, cur.fetchall()[0]))
    check(str(first["RowCount"]), "6", "SHOW DATA FROM sales row count")
    cur.execute(
        "SELECT TABLE_NAME, TABLE_TYPE, ENGINE, TABLE_ROWS, TABLE_COLLATION, TABLE_COMMENT "
        "FROM information_schema.tables WHERE TABLE_SCHEMA = 'wh' ORDER BY TABLE_NAME"
    )
    got = cur.fetchall()
    check([(r[0], r[1]) for r in got], [
        ("customers", "BASE TABLE"), ("region_totals", "VIEW"), ("sales", "BASE TABLE"), ("summary", "BASE TABLE"),
    ], "information_schema.tables")
    check([r[3] for r in got if r[0] == "sales"], [6], "information_schema.tables TABLE_ROWS")
    cur.execute("SELECT * FROM information_schema.tables WHERE TABLE_NAME = 'sales'")
    check(len(cur.description), 21, "information_schema.tables has MySQL's 21 columns")
    conn.close()
    print("OK")


main()
