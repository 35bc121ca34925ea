"""sqlalchemy-doris (a SQLAlchemy dialect for Doris, from PyPI) against doris-lite, used as its
README shows: `doris+pymysql://`, tables declared with `doris_unique_key` / `doris_duplicate_key`,
`doris_distributed_by=HASH(...)` and `doris_properties`, created with `create_all` (its
`has_table` runs DESCRIBE and reads a missing table from Doris' "Unknown table" error), Core insert
/ select / update / delete, and reflection. Usage: sqlalchemy_doris_workflow.py QUERY_PORT; prints OK."""
import sys

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, create_engine, inspect, select, text
from sqlalchemy_doris import HASH

from common import check


def main():
    port = int(sys.argv[1])
    with create_engine(f"doris+pymysql://root:@127.0.0.1:{port}").begin() as conn:
        conn.execute(text("CREATE DATABASE IF NOT EXISTS lab"))
    engine = create_engine(f"doris+pymysql://root:@127.0.0.1:{port}/lab")
    meta = MetaData()
    scores = Table(
        "scores",
        meta,
        Column("id", BigInteger),
        Column("name", String(64)),
        Column("score", Integer),
        doris_unique_key="id",
        doris_distributed_by=HASH("id", buckets=2),
        doris_properties={"replication_allocation": "tag.location.default: 1"},
    )
    visits = Table(
        "visits",
        meta,
        Column("id", BigInteger),
        Column("page", String(32)),
        doris_duplicate_key=("id", "page"),
        doris_distributed_by=HASH("id"),
    )
    meta.create_all(engine)
    meta.create_all(engine)  # both exist now: nothing to create
    insp = inspect(engine)
    check(sorted(insp.get_table_names()), ["scores", "visits"], "table names")
    check((insp.has_table("scores"), insp.has_table("missing")), (True, False), "has_table")

    with engine.begin() as conn:
        conn.execute(scores.insert(), [{"id": i, "name": f"n{i}", "score": i * 10} for i in range(1, 6)])
        conn.execute(visits.insert(), [{"id": 1, "page": "/"}, {"id": 1, "page": "/"}, {"id": 2, "page": "/a"}])
        r = conn.execute(scores.update().where(scores.c.score >= 40).values(score=scores.c.score * 2))
        check(r.rowcount, 2, "rows updated")
        r = conn.execute(scores.delete().where(scores.c.id.in_([1, 2])))
        check(r.rowcount, 2, "rows deleted")
        rows = conn.execute(select(scores).order_by(scores.c.id)).all()
        check([tuple(r) for r in rows], [(3, "n3", 30), (4, "n4", 80), (5, "n5", 100)], "scores")
        n = conn.execute(select(visits.c.id).where(visits.c.page == "/")).all()
        check(len(n), 2, "DUPLICATE keeps both identical visits")

    cols = insp.get_columns("visits")
    check([(c["name"], c["nullable"]) for c in cols], [("id", True), ("page", True)], "reflected columns")
    reflected = Table("scores", MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        check(conn.execute(select(reflected.c.name).where(reflected.c.id == 4)).scalar(), "n4", "reflected read")
    print("OK")


main()
