"""dorisclient (DorisSession, from PyPI) against doris-lite with a password-protected user, used as
its docs show: DDL through `execute`, JSON Stream Loads through `streamload` (it asks the FE for a
BE with an empty PUT, follows the 307 itself, sends `Expect: 100-continue`), a sequence column, a
`merge_type=DELETE` load, UPDATE, reads through `read` (a DictCursor); a wrong password is refused
over MySQL and HTTP. Usage: dorisclient_workflow.py QUERY_PORT HTTP_PORT; prints OK."""
import sys

import pymysql
from DorisClient import DorisSession

from common import check


def main():
    port, http_port = int(sys.argv[1]), sys.argv[2]
    fe = [f"127.0.0.1:{http_port}"]
    s = DorisSession(fe, "shop", "etl", "s3cret-pw", mysql_port=port)
    s.execute(
        "CREATE TABLE orders (id INT, status VARCHAR(16), ver INT) UNIQUE KEY(id) "
        "DISTRIBUTED BY HASH(id) BUCKETS 2 PROPERTIES ('function_column.sequence_type' = 'int')"
    )
    s.execute("CREATE TABLE clicks (id INT, page VARCHAR(16)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")
    orders = [{"id": 1, "status": "new", "ver": 1}, {"id": 2, "status": "new", "ver": 1}, {"id": 3, "status": "new", "ver": 1}]
    check(s.streamload("orders", orders, sequence_col="ver"), True, "stream load of orders")
    # An older version of row 1 loses to the newer one already there (the sequence column).
    stale = [{"id": 1, "status": "stale", "ver": 0}, {"id": 2, "status": "paid", "ver": 2}]
    check(s.streamload("orders", stale, sequence_col="ver"), True, "stream load with older and newer versions")
    check(s.streamload("clicks", [{"id": 1, "page": "/"}, {"id": 1, "page": "/"}]), True, "stream load of clicks")
    check(s.streamload("orders", [{"id": 3, "ver": 9}], merge_type="DELETE", sequence_col="ver"), True, "a DELETE load")
    s.execute("UPDATE orders SET status = %s WHERE id = %s", ("shipped", 1))
    check(
        s.read("SELECT id, status, ver FROM orders ORDER BY id"),
        [{"id": 1, "status": "shipped", "ver": 1}, {"id": 2, "status": "paid", "ver": 2}],
        "orders",
    )
    check(s.read("SELECT count(*) AS n FROM clicks"), [{"n": 2}], "clicks keep both rows")

    try:
        pymysql.connect(host="127.0.0.1", port=port, user="etl", password="wrong", database="shop")
        print("MISMATCH: a wrong password was accepted over MySQL")
        sys.exit(1)
    except pymysql.err.OperationalError as e:
        check(e.args[0], 1045, "wrong password over MySQL")
    bad = DorisSession(fe, "shop", "etl", "wrong", mysql_port=port)
    try:
        bad._get_be("orders", {"Authorization": "Basic " + bad.Authorization, "Expect": "100-continue"})
        print("MISMATCH: a wrong password was given a BE over HTTP")
        sys.exit(1)
    except Exception as e:
        check("No available BE nodes" in str(e), True, f"wrong password over HTTP: {e}")
    print("OK")


main()
