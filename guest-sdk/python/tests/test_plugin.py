"""The plugin-author side of the Python guest SDK, natively: Doris types as Arrow fields,
config, batches, and the builder a decoder uses."""

from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from sluice_guest import (
    DELETE,
    INSERT,
    BatchBuilder,
    Column,
    Config,
    Error,
    doris_field,
    doris_type,
    read_stream,
    write_stream,
)
from sluice_guest.plugin import Batch, _describe
from sluice_guest.types import schema_of


@pytest.mark.parametrize(
    "doris, arrow, tag",
    [
        ("BOOLEAN", pa.bool_(), None),
        ("TINYINT", pa.int8(), None),
        ("SMALLINT", pa.int16(), None),
        ("INT", pa.int32(), None),
        ("BIGINT", pa.int64(), None),
        ("LARGEINT", pa.utf8(), "LARGEINT"),
        ("FLOAT", pa.float32(), None),
        ("DOUBLE", pa.float64(), None),
        ("DECIMAL(10,2)", pa.decimal128(10, 2), None),
        ("DECIMALV2", pa.decimal128(27, 9), None),
        ("DATE", pa.date32(), None),
        ("DATETIME", pa.timestamp("s"), None),
        ("DATETIME(3)", pa.timestamp("ms"), None),
        ("DATETIME(6)", pa.timestamp("us"), None),
        ("CHAR(4)", pa.utf8(), "CHAR(4)"),
        ("VARCHAR(64)", pa.utf8(), "VARCHAR(64)"),
        ("STRING", pa.utf8(), None),
        ("JSON", pa.utf8(), "JSON"),
        ("ARRAY<INT>", pa.utf8(), "ARRAY<INT>"),
        ("MAP<STRING, INT>", pa.utf8(), "MAP<STRING, INT>"),
    ],
)
def test_doris_types_travel_as_the_wit_table_says(doris, arrow, tag):
    field = doris_field("c", doris)
    batch = read_stream(write_stream(Batch(schema_of([Column("c", doris)]), [[None]])))
    table = pa.ipc.open_stream(write_stream(batch)).read_all()
    assert table.schema.field("c").type == arrow
    metadata = table.schema.field("c").metadata or {}
    assert metadata.get(b"doris_type") == (tag.encode() if tag else None)
    assert field.metadata.get("doris_type") == tag
    # Back to the Doris type the host gave (STRING stays STRING, tagged types keep their text).
    assert doris_type(field) == (tag or {"DECIMALV2": "DECIMAL(27,9)"}.get(doris, doris))


def test_an_unknown_or_malformed_doris_type_names_the_column():
    with pytest.raises(ValueError, match=r"column `x`: unknown Doris type `GEOMETRY`"):
        doris_field("x", "GEOMETRY")
    with pytest.raises(ValueError, match=r"column `d`: type `DECIMAL\(40,2\)`: DECIMAL needs"):
        doris_field("d", "DECIMAL(40,2)")
    with pytest.raises(ValueError, match=r"DATETIME precision must be 0-6"):
        doris_field("t", "DATETIME(7)")


def test_config_reads_parses_and_rejects_unknown_keys():
    config = Config([("prefix", "p_"), ("size", "12")])
    assert config.get_or("prefix", "x") == "p_" and config.get_or("other", "x") == "x"
    assert config.parse_or("size", 1) == 12 and config.parse_or("missing", 7) == 7
    with pytest.raises(Error, match=r"config `prefix` = 'p_': invalid literal"):
        config.parse_or("prefix", 0)
    with pytest.raises(Error, match=r"unknown config key `size`; known keys: prefix"):
        config.reject_unknown(["prefix"])


def test_a_batch_replaces_columns_keeps_kinds_and_routes():
    schema = schema_of([Column("id", "BIGINT"), Column("name", "VARCHAR(8)")])
    batch = Batch(schema, [[1, 2], ["a", None]], [INSERT, DELETE])
    out = batch.replace_column("name", ["A", None]).to_table("db.t")
    assert out.columns == [[1, 2], ["A", None]] and out.row_kinds == [INSERT, DELETE] and out.table == "db.t"
    assert list(out.rows()) == [{"id": 1, "name": "A"}, {"id": 2, "name": None}]
    with pytest.raises(Error, match=r"the batch has no column `age`; its columns are id, name"):
        batch.replace_column("age", [1, 2])


def test_the_builder_converts_json_values_to_the_column_types():
    columns = "id BIGINT NOT NULL, ok BOOLEAN, score DECIMAL(5,1), day DATE, at DATETIME(3), tags ARRAY<INT>, n VARCHAR(8)"
    schema = schema_of([Column(c.split()[0], " ".join(c.split()[1:]).replace(" NOT NULL", ""), "NOT NULL" not in c) for c in columns.split(", ")])
    b = BatchBuilder(schema)
    b.push({"id": "7", "ok": "true", "score": "10.25", "day": "2026-11-30", "at": "2026-11-30 12:34:56.789", "tags": [1, 2], "n": 5})
    b.push({"id": 8}, DELETE)
    out = b.finish()
    assert out.columns == [
        [7, 8],
        [True, None],
        [Decimal("10.3"), None],
        [date(2026, 11, 30), None],
        [datetime(2026, 11, 30, 12, 34, 56, 789000), None],
        ["[1,2]", None],
        ["5", None],
    ]
    assert out.row_kinds == [INSERT, DELETE]
    table = pa.ipc.open_stream(write_stream(out)).read_all()
    assert table.column("score").to_pylist() == [Decimal("10.3"), None]
    with pytest.raises(Error, match=r"column `id`: `abc` is not an integer"):
        b.push({"id": "abc"})
    with pytest.raises(Error, match=r"column `id` is NOT NULL and the row has no value for it"):
        b.push({"ok": True})
    # A refused row leaves nothing behind.
    assert b.finish().num_rows == 2 and all(len(c) == 2 for c in b.finish().columns)


def test_an_uncaught_exception_is_one_line_with_where_it_was_raised():
    def process():
        return {}["missing"]

    try:
        process()
    except KeyError as e:
        text = _describe(e)
    assert text.startswith("KeyError: 'missing' (at test_plugin.py:") and text.endswith(", in process)")
