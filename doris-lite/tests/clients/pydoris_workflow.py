"""pydoris (Apache Doris' Python client, from PyPI) against doris-lite, used as its docs show: the
`doris://` SQLAlchemy dialect (over mysqlclient) creates a UNIQUE and a DUPLICATE table from
`Table` objects with its `pydoris_*` options, inserts, reads, updates and deletes through SQLAlchemy
Core, reflects the tables; `pydoris.doris_client.DorisClient` Stream Loads CSV and JSON through the
FE. Usage: pydoris_workflow.py QUERY_PORT HTTP_PORT; prints OK."""
import sys

from pydoris.doris_client import DorisClient
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, create_engine, inspect, select, text

from common import check


def main():
    port, http_port = int(sys.argv[1]), sys.argv[2]
    with create_engine(f"pydoris://root:@127.0.0.1:{port}").begin() as conn:
        conn.execute(text("CREATE DATABASE IF NOT EXISTS shop"))
    engine = create_engine(f"pydoris://root:@127.0.0.1:{port}/shop")
    meta = MetaData()
    users = Table(
        "users",
        meta,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("name", String(64)),
        Column("score", Integer),
        comment="people",
        pydoris_key_type="UNIQUE",
        pydoris_distributed_by="HASH(`id`)",
        pydoris_buckets=2,
        pydoris_properties={"replication_num": "1", "enable_unique_key_merge_on_write": "true"},
    )
    events = Table(
        "events",
        meta,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("kind", String(16)),
        pydoris_key_type="DUPLICATE",
        pydoris_distributed_by="HASH(`id`)",
        pydoris_buckets=1,
    )
    meta.create_all(engine)
    # create_all again: has_table sees them and creates nothing.
    meta.create_all(engine)

    with engine.begin() as conn:
        conn.execute(users.insert(), [{"id": 1, "name": "ann", "score": 10}, {"id": 2, "name": "bob", "score": 20}])
        conn.execute(events.insert(), [{"id": 1, "kind": "a"}, {"id": 1, "kind": "b"}])
    # Stream Load through the FE, as pydoris' own client does it (307 to the BE, Expect: 100-continue).
    client = DorisClient("127.0.0.1", http_port, "root", "")
    client.options.set_csv_format(",").set_auto_uuid_label()
    check(client.write("shop", "users", "3,cat,30\n4,dan,40\n"), True, "CSV Stream Load")
    json_client = DorisClient("127.0.0.1", http_port, "root", "")
    json_client.options.set_json_format().set_auto_uuid_label()
    check(json_client.write("shop", "events", '{"id": 2, "kind": "c"}\n'), True, "JSON Stream Load")
    bad = DorisClient("127.0.0.1", http_port, "root", "")
    bad.options.set_csv_format(",").set_label("fixed-label")
    check(bad.write("shop", "users", "5,eve,50\n"), True, "a labelled load")
    check(bad.write("shop", "users", "6,fay,60\n"), False, "the same label again is refused")

    with engine.begin() as conn:
        rows = conn.execute(select(users.c.id, users.c.name, users.c.score).order_by(users.c.id)).all()
        check([tuple(r) for r in rows], [(1, "ann", 10), (2, "bob", 20), (3, "cat", 30), (4, "dan", 40), (5, "eve", 50)], "users")
        r = conn.execute(users.update().where(users.c.id == 2).values(score=users.c.score + 5, name="bobby"))
        check(r.rowcount, 1, "rows updated")
        r = conn.execute(users.delete().where(users.c.id == 3))
        check(r.rowcount, 1, "rows deleted")
        rows = conn.execute(select(users.c.id, users.c.name, users.c.score).where(users.c.id <= 3).order_by(users.c.id)).all()
        check([tuple(r) for r in rows], [(1, "ann", 10), (2, "bobby", 25)], "users after update and delete")
        rows = conn.execute(select(events.c.kind).order_by(events.c.kind)).all()
        check([r[0] for r in rows], ["a", "b", "c"], "events (DUPLICATE keeps both id 1 rows)")

    insp = inspect(engine)
    check(sorted(insp.get_table_names()), ["events", "users"], "table names")
    check(insp.has_table("users"), True, "has_table users")
    check(insp.has_table("nope"), False, "has_table nope")
    cols = insp.get_columns("users")
    check([(c["name"], str(c["type"]), c["nullable"]) for c in cols],
          [("id", "BIGINT", False), ("name", "VARCHAR(64)", True), ("score", "INTEGER", True)], "reflected columns")
    check(insp.get_table_comment("users"), {"text": "people"}, "table comment")
    check("shop" in insp.get_schema_names(), True, "schema names")
    reflected = Table("users", MetaData(), autoload_with=engine)
    check([c.name for c in reflected.columns], ["id", "name", "score"], "autoloaded table")
    with engine.connect() as conn:
        check(conn.execute(select(reflected.c.name).where(reflected.c.id == 1)).scalar(), "ann", "read through the reflected table")
    print("OK")


main()
