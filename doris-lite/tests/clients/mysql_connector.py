"""mysql-connector-python (Oracle's official driver, from PyPI) against doris-lite, used as its
docs show: a connection without a database, DDL, inserts with parameters, reads, UPDATE, a delete
with a table alias, server-side prepared statements (`cursor(prepared=True)`), several statements
in one query, and a connection to `internal.<db>`. Usage: mysql_connector.py PORT; prints OK."""
import datetime
import decimal
import sys

import mysql.connector

from common import check


def main():
    port = int(sys.argv[1])
    # No database: the driver's handshake carries an empty name, which Doris ignores.
    conn = mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="")
    cur = conn.cursor()
    cur.execute("SELECT DATABASE()")
    check(cur.fetchall(), [(None,)], "no database selected")
    cur.execute("CREATE DATABASE IF NOT EXISTS shop")
    cur.execute(
        "CREATE TABLE shop.users (id BIGINT, name VARCHAR(64), score INT) UNIQUE KEY(id) "
        "DISTRIBUTED BY HASH(id) BUCKETS 2 PROPERTIES ('replication_num' = '1')"
    )
    cur.execute(
        "CREATE TABLE shop.events (id BIGINT, kind VARCHAR(16)) DUPLICATE KEY(id) "
        "DISTRIBUTED BY HASH(id) BUCKETS 2 PROPERTIES ('replication_num' = '1')"
    )
    cur.executemany(
        "INSERT INTO shop.users VALUES (%s, %s, %s)", [(1, "ann", 10), (2, "bob", 20), (999, "zed", 0)]
    )
    cur.execute("INSERT INTO shop.events VALUES (1, 'a'), (2, 'b'), (999, 'z')")
    conn.commit()
    cur.execute("SELECT id, name, score FROM shop.users ORDER BY id")
    check(cur.fetchall(), [(1, "ann", 10), (2, "bob", 20), (999, "zed", 0)], "users")
    # A delete with a table alias removes the matching row only.
    cur.execute("DELETE FROM shop.events e WHERE e.id = 999")
    cur.execute("SELECT id FROM shop.events ORDER BY id")
    check(cur.fetchall(), [(1,), (2,)], "events after the aliased delete")
    cur.execute("DELETE FROM shop.users WHERE users.id = 999")
    cur.execute("SELECT count(*) FROM shop.users")
    check(cur.fetchall(), [(2,)], "users after the qualified delete")
    # UPDATE on the UNIQUE table: the matching row only; the DUPLICATE table refuses it.
    cur.execute("UPDATE shop.users SET score = score + %s WHERE id = %s", (5, 2))
    check(cur.rowcount, 1, "rows updated")
    cur.execute("SELECT id, score FROM shop.users ORDER BY id")
    check(cur.fetchall(), [(1, 10), (2, 25)], "users after the update")
    try:
        cur.execute("UPDATE shop.events SET kind = 'x' WHERE id = 1")
        print("MISMATCH: an UPDATE of a DUPLICATE table succeeded")
        sys.exit(1)
    except mysql.connector.Error as e:
        check((e.errno, "Only unique table could be updated." in e.msg), (1105, True), "update of a DUPLICATE table")

    # Server-side prepared statements: parameters of each type bound, results in their types.
    cur.execute(
        "CREATE TABLE shop.orders (id INT, amount DECIMAL(10, 2), at DATETIME, day DATE, note VARCHAR(32)) "
        "DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
    )
    pc = conn.cursor(prepared=True)
    at = datetime.datetime(2026, 12, 2, 10, 30, 15)
    pc.execute(
        "INSERT INTO shop.orders VALUES (?, ?, ?, ?, ?)",
        (7, decimal.Decimal("12.50"), at, datetime.date(2026, 12, 2), "it's ?"),
    )
    pc.execute("INSERT INTO shop.orders VALUES (?, ?, ?, ?, ?)", (8, decimal.Decimal("1.25"), None, None, None))
    pc.execute("SELECT id, amount, at, day, note FROM shop.orders WHERE id >= ? AND note = ? ORDER BY id", (1, "it's ?"))
    check(
        pc.fetchall(),
        [(7, decimal.Decimal("12.50"), at, datetime.date(2026, 12, 2), "it's ?")],
        "a prepared SELECT with parameters",
    )
    pc.execute("SELECT id, note FROM shop.orders WHERE id = ?", (8,))
    check(pc.fetchall(), [(8, None)], "a prepared SELECT of NULLs")
    pc.execute("UPDATE shop.users SET name = ? WHERE id = ?", ("bobby", 2))
    pc.close()

    # Several statements in one query, each with its own result.
    results = []
    cur.execute("SELECT 1; SELECT name FROM shop.users WHERE id = 2; DELETE FROM shop.orders WHERE id = 8")
    while True:
        results.append(cur.fetchall() if cur.with_rows else cur.rowcount)
        if not cur.nextset():
            break
    check(results, [[(1,)], [("bobby",)], 1], "three results of one multi-statement query")
    cur.execute("SELECT count(*) FROM shop.orders")
    check(cur.fetchall(), [(1,)], "the multi-statement DELETE ran")
    conn.close()
    # The internal catalog's database, as a connect URL names it.
    conn = mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="", database="internal.shop")
    cur = conn.cursor()
    cur.execute("SELECT name FROM users ORDER BY id")
    check(cur.fetchall(), [("ann",), ("bobby",)], "users through internal.shop")
    conn.close()
    try:
        mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="", database="nope")
        print("MISMATCH: a connection to an unknown database succeeded")
        sys.exit(1)
    except mysql.connector.Error as e:
        check(e.errno, 1049, "unknown database error code")
    print("OK")


main()
