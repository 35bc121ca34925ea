"""Tests of the pure-Python Arrow IPC codec against pyarrow (a test-only dependency)."""

import struct
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from sluice_guest import ipc
from sluice_guest.ipc import (
    BOOL,
    DATE32,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    LARGE_UTF8,
    UTF8,
    Batch,
    DataType,
    Field,
    Schema,
    decimal128,
    read_stream,
    timestamp,
    write_stream,
)

# (codec type, pyarrow type, values without nulls)
CASES = [
    (BOOL, pa.bool_(), [True, False, False, True, True, True, False, True, False, True, True]),
    (INT8, pa.int8(), [-128, 127, 0, -1, 5]),
    (INT16, pa.int16(), [-32768, 32767, 0, -1, 300]),
    (INT32, pa.int32(), [-(2**31), 2**31 - 1, 0, -1, 70000]),
    (INT64, pa.int64(), [-(2**63), 2**63 - 1, 0, -1, 2**40]),
    (FLOAT32, pa.float32(), [1.5, -2.25, 0.0, float("inf"), 2.0**100]),
    (FLOAT64, pa.float64(), [1e300, -0.0, 0.1, float("-inf"), 2.5]),
    (
        decimal128(38, 10),
        pa.decimal128(38, 10),
        [
            Decimal("1234567890123456789012345678.0123456789"),
            Decimal("-9999999999999999999999999999.9999999999"),
            Decimal("0E-10"),
            Decimal("-0.0000000001"),
            Decimal("42.5000000000"),
        ],
    ),
    (decimal128(10, 2), pa.decimal128(10, 2), [Decimal("1.00"), Decimal("-12345678.90"), Decimal("0.01"), Decimal("0.00")]),
    (decimal128(5, 0), pa.decimal128(5, 0), [Decimal("99999"), Decimal("-99999"), Decimal("0"), Decimal("7")]),
    (DATE32, pa.date32(), [date(1970, 1, 1), date(1, 1, 1), date(9999, 12, 31), date(2024, 2, 29), date(1969, 12, 31)]),
    (
        timestamp("s"),
        pa.timestamp("s"),
        [datetime(1970, 1, 1), datetime(2024, 5, 6, 7, 8, 9), datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)],
    ),
    (
        timestamp("ms"),
        pa.timestamp("ms"),
        [datetime(2024, 5, 6, 7, 8, 9, 123000), datetime(1969, 12, 31, 23, 59, 59, 999000), datetime(1900, 1, 1)],
    ),
    (
        timestamp("us"),
        pa.timestamp("us"),
        [datetime(2024, 5, 6, 7, 8, 9, 123456), datetime(1969, 12, 31, 23, 59, 59, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)],
    ),
    (UTF8, pa.utf8(), ["", "abc", "héllo wörld", "日本語", "🦀🐍", "x" * 1000]),
    (UTF8, pa.utf8(), ["only", "ascii", "", "text"]),
    (LARGE_UTF8, pa.large_utf8(), ["", "abc", "naïve", "🦀"]),
]
CASE_IDS = [f"{t}-{i}" for i, (t, _, _) in enumerate(CASES)]


def with_nulls(values):
    """The values with None at the first and last rows and every third row in between."""
    out = list(values) + list(values)
    for i in range(0, len(out), 3):
        out[i] = None
    out[-1] = None
    return out


def pa_stream(data, **options):
    """``data`` (a pyarrow RecordBatch or Table) as IPC stream bytes written by pyarrow."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema, options=pa.ipc.IpcWriteOptions(**options)) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


def pa_read(data):
    """Read stream bytes with pyarrow, checking the result fully."""
    table = pa.ipc.open_stream(data).read_all()
    table.validate(full=True)
    return table


# ---------------------------------------------------------------------------------------------
# Round trips, every supported type, with and without nulls
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
@pytest.mark.parametrize(("dtype", "pa_type", "values"), CASES, ids=CASE_IDS)
def test_write_then_pyarrow_reads(dtype, pa_type, values, nulls):
    values = with_nulls(values) if nulls else values
    data = write_stream(Batch(Schema([Field("c", dtype)]), [values]))
    assert len(data) % 8 == 0
    table = pa_read(data)
    assert table.schema.field("c").type == pa_type
    assert table.column("c").to_pylist() == values
    assert table.column("c").null_count == values.count(None)


@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
@pytest.mark.parametrize(("dtype", "pa_type", "values"), CASES, ids=CASE_IDS)
def test_pyarrow_writes_then_read(dtype, pa_type, values, nulls):
    values = with_nulls(values) if nulls else values
    rb = pa.record_batch([pa.array(values, pa_type)], names=["c"])
    batch = read_stream(pa_stream(rb))
    assert batch.schema.fields == [Field("c", dtype, True, {})]
    assert batch.num_rows == len(values)
    assert batch.column("c") == values


@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
@pytest.mark.parametrize(("dtype", "pa_type", "values"), CASES, ids=CASE_IDS)
def test_round_trip_through_the_codec(dtype, pa_type, values, nulls):
    values = with_nulls(values) if nulls else values
    batch = Batch(Schema([Field("c", dtype)]), [values])
    back = read_stream(write_stream(batch))
    assert back == batch
    # Decimal values keep their scale.
    if dtype.name == "decimal128":
        assert all(v.as_tuple().exponent == -dtype.scale for v in back.column(0) if v is not None)


def test_all_types_in_one_batch_both_ways():
    fields = [Field(f"c{i}", dtype) for i, (dtype, _, _) in enumerate(CASES)]
    n = 20
    columns = [with_nulls((values * n)[:n]) for _, _, values in CASES]
    batch = Batch(Schema(fields), columns)
    table = pa_read(write_stream(batch))
    assert [table.column(i).to_pylist() for i in range(len(fields))] == batch.columns
    back = read_stream(pa_stream(table.to_batches()[0]))
    assert back == batch


def test_decimal_decodes_as_exact_decimal():
    # 38 significant digits survive (the default decimal context would round to 28).
    v = Decimal("12345678901234567890123456789.012345678")
    rb = pa.record_batch([pa.array([v], pa.decimal128(38, 9))], names=["d"])
    assert read_stream(pa_stream(rb)).column(0) == [v]
    assert str(read_stream(pa_stream(rb)).column(0)[0]) == "12345678901234567890123456789.012345678"


def test_decimal_accepts_int_str_float_and_rescales():
    batch = Batch(Schema([Field("d", decimal128(10, 3))]), [[Decimal("1.5"), 2, "-3.25", 0.1, Decimal("7.000000")]])
    assert pa_read(write_stream(batch)).column(0).to_pylist() == [
        Decimal("1.500"),
        Decimal("2.000"),
        Decimal("-3.250"),
        Decimal("0.100"),
        Decimal("7.000"),
    ]


def test_negative_decimal_scale():
    batch = Batch(Schema([Field("d", decimal128(5, -2))]), [[Decimal("1234500"), Decimal("-100")]])
    table = pa_read(write_stream(batch))
    assert table.schema.field("d").type == pa.decimal128(5, -2)
    assert table.column(0).to_pylist() == [Decimal("1234500"), Decimal("-100")]
    assert read_stream(pa_stream(table.to_batches()[0])).column(0) == [Decimal("1234500"), Decimal("-100")]


def test_temporal_columns_accept_raw_integers_and_read_raw():
    schema = Schema([Field("d", DATE32), Field("s", timestamp("s")), Field("ms", timestamp("ms")), Field("us", timestamp("us"))])
    batch = Batch(schema, [[0, 19000, None], [0, -1, 86400], [1500, None, -1], [1, 2, 3]])
    table = pa_read(write_stream(batch))
    assert table.column("d").to_pylist() == [date(1970, 1, 1), date(2022, 1, 8), None]
    assert table.column("s").to_pylist() == [datetime(1970, 1, 1), datetime(1969, 12, 31, 23, 59, 59), datetime(1970, 1, 2)]
    assert table.column("ms").to_pylist() == [datetime(1970, 1, 1, 0, 0, 1, 500000), None, datetime(1969, 12, 31, 23, 59, 59, 999000)]
    raw = read_stream(write_stream(batch), raw_temporal=True)
    assert raw.columns == batch.columns


def test_datetime_is_truncated_to_the_column_unit():
    batch = Batch(Schema([Field("t", timestamp("ms"))]), [[datetime(2024, 1, 1, 0, 0, 0, 123456)]])
    assert pa_read(write_stream(batch)).column(0).to_pylist() == [datetime(2024, 1, 1, 0, 0, 0, 123000)]


def test_null_slots_with_garbage_values_are_ignored():
    # Values under null slots are unspecified in Arrow: huge timestamps, out-of-range days,
    # invalid UTF-8 and non-canonical decimals must not break decoding.
    validity = pa.py_buffer(bytes([0b101]))
    ts = pa.Array.from_buffers(pa.timestamp("us"), 3, [validity, pa.py_buffer(struct.pack("<3q", 1, 2**62, 3))], null_count=1)
    days = pa.Array.from_buffers(pa.date32(), 3, [validity, pa.py_buffer(struct.pack("<3i", 1, -(2**31), 3))], null_count=1)
    text = pa.Array.from_buffers(
        pa.utf8(), 3, [validity, pa.py_buffer(struct.pack("<4i", 0, 1, 3, 4)), pa.py_buffer(b"a\xff\xfeb")], null_count=1
    )
    rb = pa.record_batch([ts, days, text], names=["ts", "d", "s"])
    batch = read_stream(pa_stream(rb))
    assert batch.column("ts") == [datetime(1970, 1, 1, 0, 0, 0, 1), None, datetime(1970, 1, 1, 0, 0, 0, 3)]
    assert batch.column("d") == [date(1970, 1, 2), None, date(1970, 1, 4)]
    assert batch.column("s") == ["a", None, "b"]


def test_lazy_read_decodes_a_column_when_asked_and_writes_untouched_ones_back_as_read():
    fields = [Field(f"c{i}", dtype) for i, (dtype, _, _) in enumerate(CASES)]
    n = 20
    columns = [with_nulls((values * n)[:n]) for _, _, values in CASES]
    data = write_stream(Batch(Schema(fields), columns))
    lazy = read_stream(data, lazy=True)
    assert all(isinstance(c, ipc._RawColumn) for c in lazy._columns)
    assert write_stream(lazy) == data  # nothing decoded, the same bytes
    assert lazy.column("c1") == columns[1]
    assert isinstance(lazy._columns[1], list) and isinstance(lazy._columns[0], ipc._RawColumn)
    assert pa_read(write_stream(lazy)).equals(pa_read(data))
    assert lazy.columns == columns and lazy == read_stream(data)


def test_lazy_read_reports_a_bad_value_when_its_column_is_read():
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array(["ok", "xx"], pa.utf8())})
    data = bytearray(pa_stream(table.to_batches()[0]))
    data[data.rindex(b"okxx") + 2] = 0xFF  # not UTF-8
    with pytest.raises(ValueError, match="column 's'"):
        read_stream(data)
    lazy = read_stream(data, lazy=True)
    assert lazy.column("id") == [1, 2]
    # The untouched column goes back as it came (a plugin passes on what it did not read).
    again = read_stream(write_stream(Batch(lazy.schema, [[3, 4], lazy._columns[1]])), lazy=True)
    assert again.column("id") == [3, 4] and bytes(again._columns[1].bufs[2]) == bytes(lazy._columns[1].bufs[2])
    with pytest.raises(ValueError, match="column 's'"):
        lazy.column("s")


def test_string_offsets_need_not_start_at_zero():
    # Some writers keep the offsets of a sliced array as they are (first offset not zero).
    offsets = memoryview(struct.pack("<3i", 3, 5, 9))
    data = memoryview(b"xxxabcdefyy")
    assert ipc._decode_column(UTF8, 2, 0, [memoryview(b""), offsets, data], False) == ["ab", "cdef"]
    data = memoryview("xxxabcdé".encode())
    offsets = memoryview(struct.pack("<3i", 3, 5, 9))
    assert ipc._decode_column(UTF8, 2, 0, [memoryview(b""), offsets, data], False) == ["ab", "cdé"]


def test_large_batch_with_nulls():
    n = 100_003
    ints = [None if i % 7 == 0 else i for i in range(n)]
    bools = [None if i % 5 == 0 else i % 3 == 0 for i in range(n)]
    text = [None if i % 11 == 0 else str(i) for i in range(n)]
    batch = Batch(Schema([Field("i", INT64), Field("b", BOOL), Field("s", UTF8)]), [ints, bools, text])
    data = write_stream(batch)
    table = pa_read(data)
    assert table.column("i").to_pylist() == ints
    assert table.column("b").to_pylist() == bools
    assert table.column("s").to_pylist() == text
    assert read_stream(data) == batch
    assert read_stream(pa_stream(table)) == batch


# ---------------------------------------------------------------------------------------------
# Schema: metadata, nullability, empty batches, framing
# ---------------------------------------------------------------------------------------------


def test_field_and_schema_metadata_and_nullability_both_ways():
    schema = Schema(
        [
            Field("big", UTF8, True, {"doris_type": "LARGEINT"}),
            Field("doc", UTF8, False, {"doris_type": "JSON", "note": "ünïcode ✓"}),
            Field("id", INT64, False),
        ],
        {"table": "db.t"},
    )
    batch = Batch(schema, [["170141183460469231731687303715884105727", None], ['{"a":1}', "[]"], [1, 2]])
    table = pa_read(write_stream(batch))
    assert table.schema.field("big").metadata == {b"doris_type": b"LARGEINT"}
    assert table.schema.field("doc").metadata == {b"doris_type": b"JSON", b"note": "ünïcode ✓".encode()}
    assert table.schema.field("id").metadata is None
    assert [f.nullable for f in table.schema] == [True, False, False]
    assert table.schema.metadata == {b"table": b"db.t"}
    back = read_stream(pa_stream(table.to_batches()[0]))
    assert back == batch


def test_pyarrow_schema_metadata_is_read():
    pa_schema = pa.schema(
        [pa.field("x", pa.int32(), nullable=False, metadata={"doris_type": "INT"})], metadata={"k": "v"}
    )
    batch = read_stream(pa_stream(pa.record_batch([pa.array([1, 2], pa.int32())], schema=pa_schema)))
    assert batch.schema == Schema([Field("x", INT32, False, {"doris_type": "INT"})], {"k": "v"})


@pytest.mark.parametrize(("dtype", "pa_type", "values"), CASES, ids=CASE_IDS)
def test_empty_batches(dtype, pa_type, values):
    schema = Schema([Field("c", dtype, metadata={"doris_type": "X"})])
    empty = Batch.empty(schema)
    table = pa_read(write_stream(empty))
    assert table.num_rows == 0
    assert table.schema.field("c").type == pa_type
    assert read_stream(write_stream(empty)) == empty
    # A zero-length record batch written by pyarrow …
    pa_schema = pa.schema([pa.field("c", pa_type, metadata={"doris_type": "X"})])
    assert read_stream(pa_stream(pa.record_batch([pa.array([], pa_type)], schema=pa_schema))) == empty
    # … and a stream with a schema but no record batch at all.
    sink = pa.BufferOutputStream()
    pa.ipc.new_stream(sink, pa_schema).close()
    assert read_stream(sink.getvalue().to_pybytes()) == empty


def test_batch_without_columns():
    batch = Batch(Schema([]), [], num_rows=4)
    table = pa_read(write_stream(batch))
    assert table.num_rows == 4 and table.num_columns == 0
    assert read_stream(write_stream(batch)) == batch


def test_legacy_framing_and_v4_metadata():
    rb = pa.record_batch([pa.array([1, None, 3], pa.int64()), pa.array(["a", "b", None])], names=["i", "s"])
    expected = [[1, None, 3], ["a", "b", None]]
    assert read_stream(pa_stream(rb, use_legacy_format=True)).columns == expected
    assert read_stream(pa_stream(rb, metadata_version=pa.ipc.MetadataVersion.V4)).columns == expected


def test_stream_without_end_marker_and_from_other_buffer_types():
    rb = pa.record_batch([pa.array([1, 2], pa.int16())], names=["i"])
    data = pa_stream(rb)
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    assert read_stream(data[:-8]).columns == [[1, 2]]
    assert read_stream(bytearray(data)).columns == [[1, 2]]
    assert read_stream(memoryview(data)).columns == [[1, 2]]


def test_writer_output_layout():
    batch = Batch(Schema([Field("s", UTF8), Field("i", INT32)]), [["a", None, "ccc"], [1, 2, None]])
    data = write_stream(batch)
    # Continuation marker and 8-byte-aligned metadata, end-of-stream marker.
    assert data[:4] == b"\xff\xff\xff\xff"
    assert struct.unpack_from("<i", data, 4)[0] % 8 == 0
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    reader = pa.ipc.open_stream(data)
    message_versions = []
    for message in pa.ipc.MessageReader.open_stream(data):
        message_versions.append(message.metadata_version)
    assert set(message_versions) == {pa.ipc.MetadataVersion.V5}
    assert reader.read_all().column("s").to_pylist() == ["a", None, "ccc"]


# ---------------------------------------------------------------------------------------------
# Slices written by pyarrow
# ---------------------------------------------------------------------------------------------


def sample_record_batch(n=40):
    arrays, names = [], []
    for i, (_, pa_type, values) in enumerate(CASES):
        arrays.append(pa.array(with_nulls((values * n)[:n]), pa_type))
        names.append(f"c{i}")
    return pa.record_batch(arrays, names=names)


@pytest.mark.parametrize(("offset", "length"), [(0, 40), (3, 10), (1, 0), (13, 27), (39, 1), (8, 16), (5, None)])
def test_reads_pyarrow_slices(offset, length):
    rb = sample_record_batch()
    sliced = rb.slice(offset, length)
    batch = read_stream(pa_stream(sliced))
    assert batch.num_rows == sliced.num_rows
    assert batch.columns == [c.to_pylist() for c in sliced.columns]


def test_reads_pyarrow_table_slice_of_chunked_data():
    table = pa.Table.from_batches([sample_record_batch(), sample_record_batch()]).slice(30, 25).combine_chunks()
    batch = read_stream(pa_stream(table.to_batches()[0]))
    assert batch.columns == [c.to_pylist() for c in table.columns]


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

UNSUPPORTED = [
    (pa.uint8(), "uint8"),
    (pa.uint64(), "uint64"),
    (pa.float16(), "float16"),
    (pa.binary(), "binary"),
    (pa.large_binary(), "large_binary"),
    (pa.list_(pa.int32()), "list"),
    (pa.struct([("a", pa.int32())]), "struct"),
    (pa.map_(pa.utf8(), pa.int32()), "map"),
    (pa.timestamp("ns"), "timestamp[ns]"),
    (pa.timestamp("ms", tz="UTC"), "timestamp[ms, tz=UTC]"),
    (pa.date64(), "date64"),
    (pa.time32("ms"), "time32[ms]"),
    (pa.decimal256(40, 2), "decimal256(40, 2)"),
    (pa.null(), "null"),
    (pa.duration("s"), "duration[s]"),
]


@pytest.mark.parametrize(("pa_type", "name"), UNSUPPORTED, ids=[n for _, n in UNSUPPORTED])
def test_unsupported_types_are_rejected_by_name(pa_type, name):
    rb = pa.record_batch([pa.array([1], pa.int64()), pa.array([None], pa_type)], names=["ok", "weird col"])
    with pytest.raises(ValueError) as e:
        read_stream(pa_stream(rb))
    assert "'weird col'" in str(e.value)
    assert f"unsupported Arrow type {name};" in str(e.value)


def test_dictionary_encoding_is_rejected():
    rb = pa.record_batch([pa.array(["a", "b", "a"]).dictionary_encode()], names=["tag"])
    with pytest.raises(ValueError, match=r"field 'tag' is dictionary-encoded \(utf8 values\)"):
        read_stream(pa_stream(rb))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_batches_are_rejected(codec):
    if not pa.Codec.is_available(codec):
        pytest.skip(f"pyarrow built without {codec}")
    rb = pa.record_batch([pa.array(list(range(100)), pa.int64())], names=["i"])
    with pytest.raises(ValueError, match=r"compressed Arrow IPC record batches \((LZ4_FRAME|ZSTD)\) are not supported"):
        read_stream(pa_stream(rb, compression=codec))


def test_more_than_one_record_batch_is_rejected():
    rb = pa.record_batch([pa.array([1], pa.int64())], names=["i"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rb.schema) as writer:
        writer.write(rb)
        writer.write(rb)
    with pytest.raises(ValueError, match="more than one record batch"):
        read_stream(sink.getvalue().to_pybytes())


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xff\xff\xff\x00\x00\x00\x00",
        b"\xff\xff\xff\xff\x10\x00\x00\x00abc",
        b"\x01\x02",
        b"\xff\xff\xff\xff\x08\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00",
    ],
    ids=["empty", "only-eos", "truncated", "stray", "bad-offsets"],
)
def test_malformed_streams_raise_value_error(data):
    with pytest.raises(ValueError):
        read_stream(data)


def test_truncated_streams_raise_value_error():
    rb = pa.record_batch([pa.array(["abc", "de"]), pa.array([1, 2], pa.int64())], names=["s", "i"])
    data = pa_stream(rb)
    for cut in range(1, len(data) - 8):
        try:
            read_stream(data[:cut])
        except ValueError:
            pass  # any error must be a ValueError
        else:
            # A cut exactly after the schema message is a valid schema-only stream.
            assert read_stream(data[:cut]).num_rows == 0


def test_out_of_range_dates_suggest_raw_mode():
    rb = pa.record_batch([pa.array([-800_000], pa.date32())], names=["d"])
    data = pa_stream(rb)
    with pytest.raises(ValueError, match=r"column 'd' \(date32\).*raw_temporal=True"):
        read_stream(data)
    assert read_stream(data, raw_temporal=True).column(0) == [-800_000]


def test_unsupported_data_types_cannot_be_built():
    with pytest.raises(ValueError, match="unsupported Arrow type 'uint8'"):
        DataType("uint8")
    with pytest.raises(ValueError, match="timestamp unit"):
        timestamp("ns")
    with pytest.raises(ValueError, match="precision"):
        decimal128(39, 2)
    with pytest.raises(ValueError, match="must be a DataType"):
        Field("x", "int64")


@pytest.mark.parametrize(
    ("dtype", "values", "message"),
    [
        (INT8, [1, 128], r"column 'c' \(int8\): row 1: cannot encode 128 \(int\)"),
        (INT64, [1, None, 2**63], r"row 2: cannot encode 9223372036854775808"),
        (INT32, [1, "2"], r"row 1: cannot encode '2' \(str\); expected an int"),
        (INT16, [1.5], r"row 0: cannot encode 1.5 \(float\)"),
        (FLOAT64, [1.0, "x"], r"row 1: cannot encode 'x' \(str\); expected a float"),
        (BOOL, [True, 1], r"row 1: cannot encode 1 \(int\); expected a bool"),
        (UTF8, ["a", None, 5], r"column 'c' \(utf8\): row 2: cannot encode 5 \(int\); expected a str"),
        (UTF8, ["a", "\ud800"], r"row 1: .*expected a str encodable as UTF-8"),
        (decimal128(5, 2), [Decimal("1.234")], r"row 0: .*more fractional digits than the scale"),
        (decimal128(5, 2), [Decimal("1234.5")], r"row 0: .*more digits than the precision"),
        (decimal128(5, 2), [Decimal("NaN")], r"row 0: cannot encode Decimal\('NaN'\)"),
        (decimal128(5, 2), [True], r"row 0: cannot encode True \(bool\)"),
        (DATE32, [date(2020, 1, 1), "2020-01-01"], r"row 1: cannot encode '2020-01-01' \(str\); expected a datetime.date"),
        (DATE32, [2**40], r"row 0: cannot encode 1099511627776"),
        (
            timestamp("us"),
            [datetime(2020, 1, 1, tzinfo=timezone.utc)],
            r"column 'c' \(timestamp\[us\]\): row 0: .*expected a naive datetime.datetime",
        ),
        (timestamp("s"), [date(2020, 1, 1)], r"row 0: cannot encode datetime.date\(2020, 1, 1\)"),
    ],
)
def test_bad_values_name_column_and_row(dtype, values, message):
    with pytest.raises(ValueError, match=message):
        write_stream(Batch(Schema([Field("c", dtype)]), [values]))


def test_non_nullable_column_with_null():
    with pytest.raises(ValueError, match=r"column 'id' is not nullable but holds 1 null value\(s\)"):
        write_stream(Batch(Schema([Field("id", INT64, nullable=False)]), [[1, None]]))


def test_batch_shape_is_checked():
    schema = Schema([Field("a", INT64), Field("b", INT64)])
    with pytest.raises(ValueError, match="2 fields but 1 columns"):
        Batch(schema, [[1]])
    with pytest.raises(ValueError, match="column 'b' has 1 values, expected 2"):
        Batch(schema, [[1, 2], [1]])


# ---------------------------------------------------------------------------------------------
# Throughput (printed, not asserted)
# ---------------------------------------------------------------------------------------------


def test_throughput(capsys):
    n = 8192
    schema = Schema([Field("id", INT64, False), Field("name", UTF8), Field("qty", INT32)])
    batch = Batch(
        schema,
        [list(range(n)), [f"user-{i:06d}" if i % 50 else None for i in range(n)], [i % 1000 for i in range(n)]],
    )
    data = write_stream(batch)
    assert read_stream(data) == batch

    def best(fn, repeat=20):
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    decode = best(lambda: read_stream(data))
    encode = best(lambda: write_stream(batch))
    with capsys.disabled():
        print(
            f"\n[throughput] {n} rows x (int64, utf8, int32): decode {n / decode:,.0f} rows/s ({decode * 1e3:.2f} ms), "
            f"encode {n / encode:,.0f} rows/s ({encode * 1e3:.2f} ms), "
            f"decode+encode {n / (decode + encode):,.0f} rows/s"
        )
