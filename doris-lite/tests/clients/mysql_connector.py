"""mysql-connector-python (Oracle's official driver, from PyPI) against doris-lite, used as its
docs show: a connection without a database, DDL, inserts with parameters, reads, a delete with a
table alias, and a connection to `internal.<db>`. Usage: mysql_connector.py PORT; prints OK."""
import sys

import mysql.connector


def check(got, want, what):
    if got != want:
        print(f"MISMATCH {what}: got {got!r}, want {want!r}")
        sys.exit(1)


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
    conn.close()
    # The internal catalog's database, as a connect URL names it.
    conn = mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="", database="internal.shop")
    cur = conn.cursor()
    cur.execute("SELECT name FROM users ORDER BY id")
    check(cur.fetchall(), [("ann",), ("bob",)], "users through internal.shop")
    conn.close()
    try:
        mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="", database="nope")
        print("MISMATCH: a connection to an unknown database succeeded")
        sys.exit(1)
    except mysql.connector.Error as e:
        check(e.errno, 1049, "unknown database error code")
    print("OK")


main()
