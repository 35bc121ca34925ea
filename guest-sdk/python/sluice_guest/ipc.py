"""Arrow IPC stream codec for Sluice plugins, in pure Python.

Batches cross the host/plugin boundary as an Arrow IPC *stream*: one Schema message followed
by one RecordBatch message (see ``wit/sluice.wit``). This module reads and writes that format
with the standard library only, so it runs inside a WebAssembly component where neither
pyarrow nor any C extension is available.

Supported Arrow types (the subset Sluice uses for Doris columns):

========================  ======================  ==========================================
Arrow type                :class:`DataType`       Python value
========================  ======================  ==========================================
bool                      ``BOOL``                ``bool``
int8/16/32/64             ``INT8`` … ``INT64``    ``int``
float32/64                ``FLOAT32/FLOAT64``     ``float``
decimal128(p, s)          ``decimal128(p, s)``    ``decimal.Decimal`` (exponent ``-s``)
date32                    ``DATE32``              ``datetime.date``
timestamp (s/ms/us)       ``timestamp(unit)``     naive ``datetime.datetime``
utf8                      ``UTF8``                ``str``
large_utf8                ``LARGE_UTF8``          ``str``
========================  ======================  ==========================================

``None`` is a null in every column. ``read_stream(data, raw_temporal=True)`` keeps date32 as
days since 1970-01-01 and timestamps as ticks since the epoch in their unit (``int``), which
is faster and covers values outside Python's ``datetime`` range (years 1–9999).

Anything else (dictionary encoding, compressed bodies, nested, binary, unsigned, time-zone
aware or nanosecond timestamps, …) is rejected with a :class:`ValueError` naming the field.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass, field as _dc_field
from datetime import date, datetime, timedelta
from decimal import Context, Decimal
from functools import partial
from itertools import accumulate, repeat
from operator import is_not

__all__ = [
    "DataType",
    "Field",
    "Schema",
    "Batch",
    "read_stream",
    "write_stream",
    "decimal128",
    "timestamp",
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FLOAT32",
    "FLOAT64",
    "DATE32",
    "UTF8",
    "LARGE_UTF8",
]

# ---------------------------------------------------------------------------------------------
# Data types and the in-memory representation
# ---------------------------------------------------------------------------------------------

_TIME_UNITS = ("s", "ms", "us")
_SIMPLE_TYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "float32",
    "float64",
    "date32",
    "utf8",
    "large_utf8",
)
_SUPPORTED = "bool, int8, int16, int32, int64, float32, float64, decimal128(p, s), date32, " \
    "timestamp[s|ms|us] without time zone, utf8, large_utf8"


@dataclass(frozen=True)
class DataType:
    """An Arrow data type from the supported subset.

    Use the module constants (``INT64``, ``UTF8`` …) and the constructors :func:`decimal128`
    and :func:`timestamp` rather than building instances directly. ``str(t)`` gives the
    pyarrow spelling (``int64``, ``decimal128(10, 2)``, ``timestamp[ms]``).
    """

    name: str
    precision: int | None = None
    scale: int | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        if self.name == "decimal128":
            if not isinstance(self.precision, int) or not 1 <= self.precision <= 38:
                raise ValueError(f"decimal128 precision must be 1..38, not {self.precision!r}")
            if not isinstance(self.scale, int) or isinstance(self.scale, bool):
                raise ValueError(f"decimal128 scale must be an int, not {self.scale!r}")
        elif self.name == "timestamp":
            if self.unit not in _TIME_UNITS:
                raise ValueError(f"timestamp unit must be one of s, ms, us, not {self.unit!r}")
        elif self.name not in _SIMPLE_TYPES:
            raise ValueError(f"unsupported Arrow type {self.name!r}; supported types: {_SUPPORTED}")
        if self.name != "decimal128" and (self.precision is not None or self.scale is not None):
            raise ValueError(f"{self.name} takes no precision or scale")
        if self.name != "timestamp" and self.unit is not None:
            raise ValueError(f"{self.name} takes no unit")

    def __str__(self) -> str:
        if self.name == "decimal128":
            return f"decimal128({self.precision}, {self.scale})"
        if self.name == "timestamp":
            return f"timestamp[{self.unit}]"
        return self.name


BOOL = DataType("bool")
INT8 = DataType("int8")
INT16 = DataType("int16")
INT32 = DataType("int32")
INT64 = DataType("int64")
FLOAT32 = DataType("float32")
FLOAT64 = DataType("float64")
DATE32 = DataType("date32")
UTF8 = DataType("utf8")
LARGE_UTF8 = DataType("large_utf8")


def decimal128(precision: int, scale: int) -> DataType:
    """``decimal128(precision, scale)``: values are ``decimal.Decimal``."""
    return DataType("decimal128", precision=precision, scale=scale)


def timestamp(unit: str) -> DataType:
    """A time-zone-naive timestamp in ``"s"``, ``"ms"`` or ``"us"``: values are ``datetime``."""
    return DataType("timestamp", unit=unit)


@dataclass
class Field:
    """One column of a schema.

    ``metadata`` is the Arrow field's custom key/value metadata, e.g.
    ``{"doris_type": "LARGEINT"}``; it is kept on read and written back.
    """

    name: str
    type: DataType
    nullable: bool = True
    metadata: dict[str, str] = _dc_field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.type, DataType):
            raise ValueError(f"field {self.name!r}: type must be a DataType, not {self.type!r}")


@dataclass
class Schema:
    """An ordered list of fields, with optional schema-level custom metadata."""

    fields: list[Field]
    metadata: dict[str, str] = _dc_field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def index(self, name: str) -> int:
        """Position of the field called ``name``; ``KeyError`` when there is none."""
        for i, f in enumerate(self.fields):
            if f.name == name:
                return i
        raise KeyError(name)

    def field(self, key: int | str) -> Field:
        """The field at a position or with a name."""
        return self.fields[key if isinstance(key, int) else self.index(key)]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self):
        return iter(self.fields)


class Batch:
    """A columnar batch: a :class:`Schema` and one Python list per field.

    ``columns[i][r]`` is the value of field ``i`` in row ``r`` (``None`` for null), with the
    Python types listed in the module documentation. Every column has ``num_rows`` values;
    ``num_rows`` only needs to be given for a batch without columns.

    A batch read with ``read_stream(…, lazy=True)`` decodes a column when it is first asked
    for (``column``, ``columns``); a column never asked for is written back by
    :func:`write_stream` as the very buffers it was read from.
    """

    __slots__ = ("schema", "_columns", "num_rows")

    def __init__(self, schema: Schema, columns: list, num_rows: int | None = None):
        if len(columns) != len(schema.fields):
            raise ValueError(f"the schema has {len(schema.fields)} fields but {len(columns)} columns were given")
        columns = [c if isinstance(c, (list, _RawColumn)) else list(c) for c in columns]
        if num_rows is None:
            num_rows = len(columns[0]) if columns else 0
        for f, c in zip(schema.fields, columns):
            if len(c) != num_rows:
                raise ValueError(f"column {f.name!r} has {len(c)} values, expected {num_rows}")
        self.schema = schema
        self._columns = columns
        self.num_rows = num_rows

    @property
    def columns(self) -> list[list]:
        """Every column's values (decoding those not decoded yet)."""
        for i in range(len(self._columns)):
            self._decoded(i)
        return self._columns

    def _decoded(self, i: int) -> list:
        c = self._columns[i]
        if isinstance(c, _RawColumn):
            c = self._columns[i] = c.decode()
        return c

    @classmethod
    def empty(cls, schema: Schema) -> Batch:
        """A batch with ``schema`` and no rows."""
        return cls(schema, [[] for _ in schema.fields], 0)

    @property
    def num_columns(self) -> int:
        return len(self._columns)

    def column(self, key: int | str) -> list:
        """The values of the column at a position or with a name."""
        return self._decoded(key if isinstance(key, int) else self.schema.index(key))

    def __len__(self) -> int:
        return self.num_rows

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return (self.schema, self.num_rows, self.columns) == (other.schema, other.num_rows, other.columns)

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.type}" for f in self.schema.fields)
        return f"Batch({self.num_rows} rows; {cols})"


# ---------------------------------------------------------------------------------------------
# Arrow constants (format/Schema.fbs, format/Message.fbs)
# ---------------------------------------------------------------------------------------------

_CONTINUATION = 0xFFFFFFFF
_METADATA_V4 = 3
_METADATA_V5 = 4

_HEADER_SCHEMA = 1
_HEADER_DICTIONARY_BATCH = 2
_HEADER_RECORD_BATCH = 3
_HEADER_NAMES = {4: "Tensor", 5: "SparseTensor"}

# Members of the `Type` union.
_T_INT = 2
_T_FLOAT = 3
_T_UTF8 = 5
_T_BOOL = 6
_T_DECIMAL = 7
_T_DATE = 8
_T_TIMESTAMP = 10
_T_LARGE_UTF8 = 20
_TYPE_NAMES = {
    1: "null",
    4: "binary",
    11: "interval",
    12: "list",
    13: "struct",
    14: "union",
    15: "fixed_size_binary",
    16: "fixed_size_list",
    17: "map",
    18: "duration",
    19: "large_binary",
    21: "large_list",
    22: "run_end_encoded",
    23: "binary_view",
    24: "utf8_view",
    25: "list_view",
    26: "large_list_view",
}
_UNIT_CODES = {"s": 0, "ms": 1, "us": 2}
_UNIT_NAMES = ("s", "ms", "us", "ns")
_FLOAT_PRECISION = {"float32": 1, "float64": 2}
_INT_TYPES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_COMPRESSION_CODECS = {0: "LZ4_FRAME", 1: "ZSTD"}

# array/memoryview formats per fixed-width physical type. 'i' and 'q' are 4 and 8 bytes on
# every platform CPython supports, including wasm32 (where 'l' is 4 bytes, so it is avoided).
_FMT = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "float32": "f",
    "float64": "d",
    "date32": "i",
    "timestamp": "q",
}
if (array("h").itemsize, array("i").itemsize, array("q").itemsize) != (2, 4, 8):
    raise ImportError("sluice_guest.ipc needs 2-, 4- and 8-byte 'h', 'i' and 'q' array items")
_NATIVE_LE = sys.byteorder == "little"

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_EPOCH = datetime(1970, 1, 1)
_TICK = {"s": timedelta(seconds=1), "ms": timedelta(milliseconds=1), "us": timedelta(microseconds=1)}
# timedelta(days, seconds, microseconds, milliseconds): a tick count as a timedelta.
_TO_TIMEDELTA = {"s": partial(timedelta, 0), "ms": partial(timedelta, 0, 0, 0), "us": partial(timedelta, 0, 0)}
_DECIMAL_CONTEXT = Context(prec=100)
_BIT_BOOL = {"0": False, "1": True}
_BYTE_TO_DIGIT = bytes.maketrans(b"\x00\x01", b"01")


class _Malformed(Exception):
    """Internal: the bytes are not a well-formed Arrow IPC stream."""


# ---------------------------------------------------------------------------------------------
# Minimal flatbuffers reader
# ---------------------------------------------------------------------------------------------

_u8 = struct.Struct("<B").unpack_from
_i16 = struct.Struct("<h").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from


class _Table:
    """A flatbuffers table at absolute position ``pos`` of ``buf``, read through its vtable.

    Field accessors take the field's slot (its index in the schema, counting a union as two
    slots: the type tag, then the value) and return the default when the field is absent.
    """

    __slots__ = ("buf", "pos", "vt", "vt_len")

    def __init__(self, buf: memoryview, pos: int):
        if pos < 0 or pos + 4 > len(buf):
            raise _Malformed("table offset out of bounds")
        vt = pos - _i32(buf, pos)[0]
        if vt < 0 or vt + 4 > len(buf):
            raise _Malformed("vtable offset out of bounds")
        self.buf = buf
        self.pos = pos
        self.vt = vt
        self.vt_len = _u16(buf, vt)[0]

    def _at(self, slot: int) -> int:
        o = 4 + 2 * slot
        if o + 2 > self.vt_len:
            return 0
        rel = _u16(self.buf, self.vt + o)[0]
        return self.pos + rel if rel else 0

    def scalar(self, slot: int, unpack, default):
        p = self._at(slot)
        return unpack(self.buf, p)[0] if p else default

    def _deref(self, slot: int) -> int:
        p = self._at(slot)
        return p + _u32(self.buf, p)[0] if p else 0

    def table(self, slot: int) -> _Table | None:
        p = self._deref(slot)
        return _Table(self.buf, p) if p else None

    def string(self, slot: int) -> str | None:
        p = self._deref(slot)
        if not p:
            return None
        n = _u32(self.buf, p)[0]
        if p + 4 + n > len(self.buf):
            raise _Malformed("string out of bounds")
        return str(self.buf[p + 4 : p + 4 + n], "utf-8")

    def vector(self, slot: int) -> tuple[int, int] | None:
        """``(position of the first element, element count)``, or None when absent."""
        p = self._deref(slot)
        return (p + 4, _u32(self.buf, p)[0]) if p else None

    def tables(self, slot: int) -> list[_Table]:
        v = self.vector(slot)
        if v is None:
            return []
        start, n = v
        return [_Table(self.buf, start + 4 * i + _u32(self.buf, start + 4 * i)[0]) for i in range(n)]

    def key_values(self, slot: int) -> dict[str, str]:
        return {kv.string(0) or "": kv.string(1) or "" for kv in self.tables(slot)}


# ---------------------------------------------------------------------------------------------
# Minimal flatbuffers writer
# ---------------------------------------------------------------------------------------------
#
# A table is described as a list of ``(slot, kind, value)``: ``kind`` is a struct format
# character for a scalar ("B" ubyte/bool, "h" short, "i" int, "q" long), or "table", "string",
# "tables" (vector of tables) or "structs" (vector of 16-byte structs, value = (bytes, count)).
# Objects are laid out front to back: a table, then the objects it refers to (flatbuffers
# offsets to sub-objects point forward, vtable offsets may point either way). Every scalar is
# aligned to its size relative to the start of the buffer.

_SCALAR_SIZE = {"B": 1, "h": 2, "i": 4, "q": 8}


class _Builder:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray(4)  # root offset, patched by finish()

    def _pad(self, align: int, extra: int = 0) -> None:
        rem = (len(self.buf) + extra) % align
        if rem:
            self.buf += bytes(align - rem)

    def finish(self, root: list) -> bytes:
        pos = self._table(root)
        struct.pack_into("<I", self.buf, 0, pos)
        self._pad(8)
        return bytes(self.buf)

    def _table(self, fields: list) -> int:
        laid = []  # (slot, kind, value, offset within the table)
        cur = 4  # after the vtable offset
        for slot, kind, value in sorted(fields, key=lambda f: -_SCALAR_SIZE.get(f[1], 4)):
            size = _SCALAR_SIZE.get(kind, 4)
            cur = (cur + size - 1) // size * size
            laid.append((slot, kind, value, cur))
            cur += size
        nslots = max((f[0] for f in fields), default=-1) + 1
        slots = [0] * nslots
        for slot, _, _, off in laid:
            slots[slot] = off
        buf = self.buf
        self._pad(2)
        vt_pos = len(buf)
        buf += struct.pack(f"<HH{nslots}H", 4 + 2 * nslots, cur, *slots)
        self._pad(8)
        pos = len(buf)
        buf += bytes(cur)
        struct.pack_into("<i", buf, pos, pos - vt_pos)
        for slot, kind, value, off in laid:
            if kind in _SCALAR_SIZE:
                struct.pack_into("<" + kind, buf, pos + off, value)
        for slot, kind, value, off in laid:
            if kind in _SCALAR_SIZE:
                continue
            if kind == "table":
                child = self._table(value)
            elif kind == "string":
                child = self._string(value)
            elif kind == "tables":
                child = self._tables(value)
            else:
                child = self._structs(*value)
            struct.pack_into("<I", buf, pos + off, child - (pos + off))
        return pos

    def _string(self, s: str) -> int:
        data = s.encode("utf-8")
        self._pad(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(data)) + data + b"\0"
        return pos

    def _tables(self, tables: list[list]) -> int:
        self._pad(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(tables)) + bytes(4 * len(tables))
        for i, t in enumerate(tables):
            child = self._table(t)
            at = pos + 4 + 4 * i
            struct.pack_into("<I", self.buf, at, child - at)
        return pos

    def _structs(self, payload: bytes, count: int) -> int:
        self._pad(8, extra=4)  # elements (after the 4-byte count) start 8-aligned
        pos = len(self.buf)
        self.buf += struct.pack("<I", count) + payload
        return pos


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read_stream(data: bytes | bytearray | memoryview, *, raw_temporal: bool = False, lazy: bool = False) -> Batch:
    """Decode an Arrow IPC stream holding one schema and at most one record batch.

    Both the current framing (``0xFFFFFFFF``, int32 metadata length) and the legacy one (int32
    length only) are accepted, with or without an end-of-stream marker. A stream without a
    record batch decodes to an empty batch. Raises ``ValueError`` for malformed input and for
    anything outside the supported subset (naming the field and its type).

    With ``raw_temporal=True``, date32 values are days since 1970-01-01 and timestamps are
    ticks since 1970-01-01T00:00:00 in the column's unit, as ``int``.

    With ``lazy=True``, the stream's structure is checked now and each column's values when the
    column is first asked for (a bad value raises then); ``data`` must not change meanwhile.
    """
    try:
        return _read_stream(memoryview(data).cast("B"), raw_temporal, lazy)
    except _Malformed as e:
        raise ValueError(f"malformed Arrow IPC stream: {e}") from None
    except struct.error as e:
        raise ValueError(f"malformed Arrow IPC stream: truncated or out-of-bounds data ({e})") from None


def _messages(mv: memoryview):
    """Yield ``(Message table, body)`` for each message up to the end-of-stream marker."""
    pos, end = 0, len(mv)
    while pos < end:
        if pos + 4 > end:
            raise _Malformed(f"{end - pos} stray byte(s) at the end of the stream")
        length = _i32(mv, pos)[0]
        pos += 4
        if length == -1:  # continuation marker, then the metadata length
            if pos + 4 > end:
                raise _Malformed("truncated message length")
            length = _i32(mv, pos)[0]
            pos += 4
        if length == 0:
            return  # end of stream
        if length < 0 or pos + length > end:
            raise _Malformed("message metadata length exceeds the data")
        meta = mv[pos : pos + length]
        pos += length
        message = _Table(meta, _u32(meta, 0)[0])
        body_len = message.scalar(3, _i64, 0)
        if body_len < 0 or pos + body_len > end:
            raise _Malformed("message body length exceeds the data")
        yield message, mv[pos : pos + body_len]
        pos += body_len


def _read_stream(mv: memoryview, raw_temporal: bool, lazy: bool) -> Batch:
    schema = None
    batch = None
    for message, body in _messages(mv):
        version = message.scalar(0, _i16, 0)
        if version < _METADATA_V4:
            raise ValueError(f"Arrow IPC metadata version V{version + 1} is not supported (V4 or V5 required)")
        kind = message.scalar(1, _u8, 0)
        header = message.table(2)
        if header is None:
            raise _Malformed("message without a header")
        if kind == _HEADER_SCHEMA:
            if schema is not None:
                raise ValueError("the Arrow IPC stream holds more than one schema message")
            schema = _read_schema(header)
        elif kind == _HEADER_RECORD_BATCH:
            if schema is None:
                raise ValueError("the Arrow IPC stream has a record batch before its schema")
            if batch is not None:
                raise ValueError("the Arrow IPC stream holds more than one record batch")
            batch = _read_record_batch(schema, header, body, raw_temporal, lazy)
        elif kind == _HEADER_DICTIONARY_BATCH:
            raise ValueError("dictionary batches (dictionary-encoded columns) are not supported")
        else:
            raise ValueError(f"unsupported Arrow IPC message type {_HEADER_NAMES.get(kind, kind)}")
    if schema is None:
        raise ValueError("the Arrow IPC stream is empty (no schema message)")
    return batch if batch is not None else Batch.empty(schema)


def _describe_type(type_id: int, t: _Table | None) -> str:
    """The pyarrow-style name of any Arrow type, for error messages."""
    if t is None:
        return _TYPE_NAMES.get(type_id, f"type #{type_id}")
    if type_id == _T_INT:
        return f"{'int' if t.scalar(1, _u8, 0) else 'uint'}{t.scalar(0, _i32, 0)}"
    if type_id == _T_FLOAT:
        return ("float16", "float32", "float64")[t.scalar(0, _i16, 0) % 3]
    if type_id == _T_UTF8:
        return "utf8"
    if type_id == _T_LARGE_UTF8:
        return "large_utf8"
    if type_id == _T_BOOL:
        return "bool"
    if type_id == _T_DECIMAL:
        return f"decimal{t.scalar(2, _i32, 128)}({t.scalar(0, _i32, 0)}, {t.scalar(1, _i32, 0)})"
    if type_id == _T_DATE:
        return "date32" if t.scalar(0, _i16, 1) == 0 else "date64"
    if type_id == 9:  # Time
        return f"time{t.scalar(1, _i32, 32)}[{_UNIT_NAMES[t.scalar(0, _i16, 1) % 4]}]"
    if type_id == _T_TIMESTAMP:
        unit = _UNIT_NAMES[t.scalar(0, _i16, 0) % 4]
        tz = t.string(1)
        return f"timestamp[{unit}, tz={tz}]" if tz else f"timestamp[{unit}]"
    if type_id == 18:  # Duration
        return f"duration[{_UNIT_NAMES[t.scalar(0, _i16, 1) % 4]}]"
    if type_id == 15:  # FixedSizeBinary
        return f"fixed_size_binary[{t.scalar(0, _i32, 0)}]"
    return _TYPE_NAMES.get(type_id, f"type #{type_id}")


def _read_type(type_id: int, t: _Table | None) -> DataType | None:
    """The DataType for a supported Arrow type, else None."""
    if type_id == _T_UTF8:
        return UTF8
    if type_id == _T_BOOL:
        return BOOL
    if type_id == _T_LARGE_UTF8:
        return LARGE_UTF8
    if t is None:
        return None
    if type_id == _T_INT:
        if t.scalar(1, _u8, 0):
            return {8: INT8, 16: INT16, 32: INT32, 64: INT64}.get(t.scalar(0, _i32, 0))
    elif type_id == _T_FLOAT:
        return {1: FLOAT32, 2: FLOAT64}.get(t.scalar(0, _i16, 0))
    elif type_id == _T_DECIMAL:
        precision, scale = t.scalar(0, _i32, 0), t.scalar(1, _i32, 0)
        if t.scalar(2, _i32, 128) == 128 and 1 <= precision <= 38:
            return decimal128(precision, scale)
    elif type_id == _T_DATE:
        if t.scalar(0, _i16, 1) == 0:
            return DATE32
    elif type_id == _T_TIMESTAMP:
        unit = t.scalar(0, _i16, 0)
        if 0 <= unit < 3 and not t.string(1):
            return timestamp(_UNIT_NAMES[unit])
    return None


def _read_schema(header: _Table) -> Schema:
    if header.scalar(0, _i16, 0) != 0:
        raise ValueError("big-endian Arrow IPC data is not supported")
    fields = []
    for f in header.tables(1):
        name = f.string(0) or ""
        type_id = f.scalar(2, _u8, 0)
        type_table = f.table(3)
        if f.table(4) is not None:
            raise ValueError(
                f"field {name!r} is dictionary-encoded ({_describe_type(type_id, type_table)} values); "
                "dictionary encoding is not supported"
            )
        dtype = _read_type(type_id, type_table)
        if dtype is None:
            raise ValueError(
                f"field {name!r} has unsupported Arrow type {_describe_type(type_id, type_table)}; "
                f"supported types: {_SUPPORTED}"
            )
        fields.append(Field(name, dtype, bool(f.scalar(1, _u8, 0)), f.key_values(6)))
    return Schema(fields, header.key_values(2))


def _read_record_batch(schema: Schema, header: _Table, body: memoryview, raw_temporal: bool, lazy: bool) -> Batch:
    compression = header.table(3)
    if compression is not None:
        codec = compression.scalar(0, _u8, 0)
        raise ValueError(
            f"compressed Arrow IPC record batches ({_COMPRESSION_CODECS.get(codec, codec)}) are not supported; "
            "write the stream without compression"
        )
    num_rows = header.scalar(0, _i64, 0)
    nodes = _read_structs(header, 1)
    buffers = _read_structs(header, 2)
    if len(nodes) < 2 * len(schema.fields):
        raise _Malformed("fewer field nodes than fields")
    columns = []
    b = 0
    for i, f in enumerate(schema.fields):
        length, null_count = nodes[2 * i], nodes[2 * i + 1]
        if length != num_rows:
            raise _Malformed(f"column {f.name!r} has {length} values in a batch of {num_rows} rows")
        nbufs = 3 if f.type.name in ("utf8", "large_utf8") else 2
        if len(buffers) < 2 * (b + nbufs):
            raise _Malformed("fewer buffers than the schema needs")
        bufs = [_body_slice(body, buffers[2 * j], buffers[2 * j + 1]) for j in range(b, b + nbufs)]
        b += nbufs
        raw = _RawColumn(f, length, null_count, bufs, raw_temporal)
        columns.append(raw if lazy else raw.decode())
    return Batch(schema, columns, num_rows)


class _RawColumn:
    """A column as read from a record batch: its buffers, decoded on demand."""

    __slots__ = ("field", "n", "null_count", "bufs", "raw_temporal")

    def __init__(self, field: Field, n: int, null_count: int, bufs: list[memoryview], raw_temporal: bool):
        self.field, self.n, self.null_count, self.bufs, self.raw_temporal = field, n, null_count, bufs, raw_temporal

    def __len__(self) -> int:
        return self.n

    def decode(self) -> list:
        f = self.field
        try:
            return _decode_column(f.type, self.n, self.null_count, self.bufs, self.raw_temporal)
        except _Malformed as e:
            raise ValueError(f"malformed Arrow IPC stream: column {f.name!r}: {e}") from None
        except struct.error as e:
            raise ValueError(f"malformed Arrow IPC stream: column {f.name!r}: truncated data ({e})") from None
        except (OverflowError, ValueError) as e:
            raise ValueError(
                f"column {f.name!r} ({f.type}): {e}"
                + ("; read with raw_temporal=True to get the values as integers" if f.type.name in ("date32", "timestamp") else "")
            ) from None

    def reusable_for(self, f: Field) -> bool:
        """Whether these buffers can be written back as column ``f`` unchanged."""
        return f.type == self.field.type and (f.nullable or self.null_count == 0)


def _read_structs(header: _Table, slot: int) -> tuple[int, ...]:
    """A vector of 16-byte (long, long) structs, flattened."""
    v = header.vector(slot)
    if v is None:
        return ()
    start, n = v
    return struct.unpack_from(f"<{2 * n}q", header.buf, start)


def _body_slice(body: memoryview, offset: int, length: int) -> memoryview:
    if offset < 0 or length < 0 or offset + length > len(body):
        raise _Malformed("buffer out of the message body")
    return body[offset : offset + length]


def _unpack(buf: memoryview, fmt: str, n: int) -> list:
    """The first ``n`` little-endian values of format ``fmt`` in ``buf``, as a list."""
    size = struct.calcsize(fmt)
    if len(buf) < n * size:
        raise _Malformed(f"values buffer holds {len(buf)} bytes, {n * size} needed")
    if _NATIVE_LE:
        return buf[: n * size].cast(fmt).tolist()
    a = array(fmt, buf[: n * size])
    a.byteswap()
    return a.tolist()


def _bits(buf: memoryview, n: int) -> str:
    """The first ``n`` bits of an LSB-first bitmap as a string of '0'/'1' (char i = bit i)."""
    nbytes = (n + 7) >> 3
    if len(buf) < nbytes:
        raise _Malformed(f"bitmap holds {len(buf)} bytes, {nbytes} needed")
    return format(int.from_bytes(buf[:nbytes], "little"), "b")[::-1].ljust(n, "0")[:n]


def _decode_column(dtype: DataType, n: int, null_count: int, bufs: list[memoryview], raw_temporal: bool) -> list:
    if n == 0:
        return []
    validity = None
    if null_count:
        if len(bufs[0]) == 0:
            if null_count != n:
                raise _Malformed(f"{null_count} nulls but no validity bitmap")
            validity = "0" * n
        else:
            validity = _bits(bufs[0], n)
    kind = dtype.name

    if kind == "bool":
        values = list(map(_BIT_BOOL.__getitem__, _bits(bufs[1], n)))
    elif kind in ("utf8", "large_utf8"):
        values = _decode_strings(bufs[1], bufs[2], n, "i" if kind == "utf8" else "q", validity)
    elif kind == "decimal128":
        if len(bufs[1]) < 16 * n:
            raise _Malformed(f"values buffer holds {len(bufs[1])} bytes, {16 * n} needed")
        words = bufs[1][: 16 * n]
        if _NATIVE_LE:
            lows = words.cast("Q")[0::2].tolist()
            highs = words.cast("q")[1::2].tolist()
        else:
            lows = [int.from_bytes(words[i : i + 8], "little") for i in range(0, 16 * n, 16)]
            highs = [int.from_bytes(words[i + 8 : i + 16], "little", signed=True) for i in range(0, 16 * n, 16)]
        scale = -dtype.scale
        ctx = _DECIMAL_CONTEXT
        if validity is None:
            return [Decimal((h << 64) | lo).scaleb(scale, ctx) for lo, h in zip(lows, highs)]
        return [Decimal((h << 64) | lo).scaleb(scale, ctx) if c == "1" else None for lo, h, c in zip(lows, highs, validity)]
    else:
        values = _unpack(bufs[1], _FMT[kind], n)
        if not raw_temporal and kind in ("date32", "timestamp"):
            # Values in null slots are unspecified: convert the valid ones only.
            if kind == "date32":
                convert = date.fromordinal
                values = list(map(_EPOCH_ORDINAL.__add__, values))
            else:
                convert = _EPOCH.__add__
                values = list(map(_TO_TIMEDELTA[dtype.unit], values)) if validity is None else [
                    _TO_TIMEDELTA[dtype.unit](v) if c == "1" else None for v, c in zip(values, validity)
                ]
            if validity is None:
                return list(map(convert, values))
            return [convert(v) if c == "1" else None for v, c in zip(values, validity)]

    if validity is None:
        return values
    return [v if c == "1" else None for v, c in zip(values, validity)]


def _decode_strings(offsets_buf: memoryview, data_buf: memoryview, n: int, fmt: str, validity: str | None) -> list:
    offsets = _unpack(offsets_buf, fmt, n + 1)
    lo, hi = offsets[0], offsets[-1]
    if lo < 0 or hi < lo or hi > len(data_buf):
        raise _Malformed("string offsets out of the data buffer")
    data = bytes(data_buf[:hi])
    slices = map(slice, offsets, offsets[1:])
    if data.isascii():
        return list(map(data.decode("ascii").__getitem__, slices))
    try:
        return list(map(bytes.decode, map(data.__getitem__, slices)))
    except UnicodeDecodeError:
        if validity is None:
            raise ValueError("invalid UTF-8 in a utf8 column") from None
    # Bytes under null slots may be anything: decode only the valid slots.
    try:
        return [data[a:b].decode() if c == "1" else None for a, b, c in zip(offsets, offsets[1:], validity)]
    except UnicodeDecodeError:
        raise ValueError("invalid UTF-8 in a utf8 column") from None


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def write_stream(batch: Batch) -> bytes:
    """Encode ``batch`` as an Arrow IPC stream: schema message, one record batch, end marker.

    The output uses metadata version V5, little-endian buffers aligned to 8 bytes and no
    compression; a column without nulls is written without a validity bitmap. Raises
    ``ValueError`` naming the column and row when a value does not fit its column's type, or
    when a non-nullable column holds ``None``.
    """
    schema = batch.schema
    n = batch.num_rows
    body: list = []
    nodes = array("q")
    buffers = array("q")
    offset = 0
    for i, f in enumerate(schema.fields):
        col = batch._columns[i]
        if isinstance(col, _RawColumn) and col.reusable_for(f):
            null_count, bufs = col.null_count, col.bufs
        else:
            col = batch._decoded(i)
            if len(col) != n:
                raise ValueError(f"column {f.name!r} has {len(col)} values, expected {n}")
            null_count, bufs = _encode_column(f, col, n)
        nodes.extend((n, null_count))
        for buf in bufs:
            size = len(buf) * (buf.itemsize if isinstance(buf, array) else 1)
            buffers.extend((offset, size))
            body.append(buf)
            pad = -size % 8
            if pad:
                body.append(bytes(pad))
            offset += size + pad
    if not _NATIVE_LE:
        nodes.byteswap()
        buffers.byteswap()
    record_batch = [
        (0, "q", n),
        (1, "structs", (nodes.tobytes(), len(nodes) // 2)),
        (2, "structs", (buffers.tobytes(), len(buffers) // 2)),
    ]
    return b"".join(
        [
            _frame(_message(_HEADER_SCHEMA, _schema_table(schema), 0)),
            _frame(_message(_HEADER_RECORD_BATCH, record_batch, offset)),
            *body,
            b"\xff\xff\xff\xff\x00\x00\x00\x00",
        ]
    )


def _message(header_type: int, header: list, body_length: int) -> bytes:
    return _Builder().finish([(0, "h", _METADATA_V5), (1, "B", header_type), (2, "table", header), (3, "q", body_length)])


def _frame(metadata: bytes) -> bytes:
    # _Builder output is already a multiple of 8 bytes, so the body that follows is aligned.
    return struct.pack("<Ii", _CONTINUATION, len(metadata)) + metadata


def _key_values(metadata: dict[str, str]) -> list:
    return [[(0, "string", str(k)), (1, "string", str(v))] for k, v in metadata.items()]


def _type_table(t: DataType) -> tuple[int, list]:
    kind = t.name
    if kind in _INT_TYPES:
        return _T_INT, [(0, "i", _INT_TYPES[kind]), (1, "B", 1)]
    if kind in _FLOAT_PRECISION:
        return _T_FLOAT, [(0, "h", _FLOAT_PRECISION[kind])]
    if kind == "bool":
        return _T_BOOL, []
    if kind == "utf8":
        return _T_UTF8, []
    if kind == "large_utf8":
        return _T_LARGE_UTF8, []
    if kind == "decimal128":
        return _T_DECIMAL, [(0, "i", t.precision), (1, "i", t.scale), (2, "i", 128)]
    if kind == "date32":
        return _T_DATE, [(0, "h", 0)]
    if kind == "timestamp":
        return _T_TIMESTAMP, [(0, "h", _UNIT_CODES[t.unit])]
    raise ValueError(f"unsupported Arrow type {t}")  # unreachable: DataType validates


def _schema_table(schema: Schema) -> list:
    fields = []
    for f in schema.fields:
        if not isinstance(f.type, DataType):
            raise ValueError(f"field {f.name!r}: type must be a DataType, not {f.type!r}")
        type_id, type_table = _type_table(f.type)
        entry = [
            (0, "string", f.name),
            (1, "B", 1 if f.nullable else 0),
            (2, "B", type_id),
            (3, "table", type_table),
            (5, "tables", []),
        ]
        if f.metadata:
            entry.append((6, "tables", _key_values(f.metadata)))
        fields.append(entry)
    table = [(1, "tables", fields)]
    if schema.metadata:
        table.append((2, "tables", _key_values(schema.metadata)))
    return table


def _pack_bits(flags: bytes, n: int) -> bytes:
    """Pack a bytes object of 0/1 values into an LSB-first bitmap of ``ceil(n / 8)`` bytes."""
    return int(flags.translate(_BYTE_TO_DIGIT)[::-1], 2).to_bytes((n + 7) >> 3, "little")


def _fixed(fmt: str, values: list) -> array:
    a = array(fmt, values)
    if not _NATIVE_LE:
        a.byteswap()
    return a


def _value_error(f: Field, col: list, ok, expected: str) -> ValueError:
    """A ValueError naming the first value of ``col`` that ``ok`` rejects."""
    for row, v in enumerate(col):
        if v is not None and not ok(v):
            return ValueError(
                f"column {f.name!r} ({f.type}): row {row}: cannot encode {v!r} ({type(v).__name__}); expected {expected}"
            )
    return ValueError(f"column {f.name!r} ({f.type}): cannot encode the values; expected {expected}")


def _int_ok(bits: int):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return lambda v: isinstance(v, int) and lo <= v <= hi


def _encode_column(f: Field, col: list, n: int) -> tuple[int, list]:
    """``(null count, [validity, buffers…])`` for one column."""
    if n == 0:
        if f.type.name == "utf8":
            return 0, [b"", bytes(4), b""]  # a single zero offset
        if f.type.name == "large_utf8":
            return 0, [b"", bytes(8), b""]
        return 0, [b"", b""]
    null_count = col.count(None)
    validity = b""
    if null_count:
        if not f.nullable:
            raise ValueError(f"column {f.name!r} is not nullable but holds {null_count} null value(s)")
        validity = _pack_bits(bytes(map(is_not, col, repeat(None))), n)
    kind = f.type.name

    if kind in _INT_TYPES:
        values = [0 if v is None else v for v in col] if null_count else col
        try:
            return null_count, [validity, _fixed(_FMT[kind], values)]
        except (TypeError, OverflowError):
            raise _value_error(f, col, _int_ok(_INT_TYPES[kind]), f"an int in the {kind} range") from None

    if kind in _FLOAT_PRECISION:
        values = [0.0 if v is None else v for v in col] if null_count else col
        try:
            return null_count, [validity, _fixed(_FMT[kind], values)]
        except (TypeError, OverflowError):
            raise _value_error(f, col, lambda v: isinstance(v, (int, float)) and _fits_float(_FMT[kind], v), "a float") from None

    if kind == "bool":
        if not set(map(type, col)) <= {bool, type(None)}:
            raise _value_error(f, col, lambda v: isinstance(v, bool), "a bool")
        return null_count, [validity, _pack_bits(bytes(map(bool, col)), n)]

    if kind in ("utf8", "large_utf8"):
        return null_count, [validity, *_encode_strings(f, col, null_count, "i" if kind == "utf8" else "q")]

    if kind == "decimal128":
        return null_count, [validity, _encode_decimals(f, col)]

    if kind == "date32":
        try:
            days = [0 if v is None else _to_days(v) for v in col]
            return null_count, [validity, _fixed("i", days)]
        except (TypeError, OverflowError):
            raise _value_error(f, col, _date_ok, "a datetime.date or an int of days since 1970-01-01") from None

    if kind == "timestamp":
        tick = _TICK[f.type.unit]
        try:
            ticks = [0 if v is None else _to_ticks(v, tick) for v in col]
            return null_count, [validity, _fixed("q", ticks)]
        except (TypeError, OverflowError, ValueError):
            raise _value_error(
                f, col, lambda v: _timestamp_ok(v, tick), f"a naive datetime.datetime or an int of {f.type.unit} since the epoch"
            ) from None

    raise ValueError(f"column {f.name!r}: unsupported Arrow type {f.type}")  # unreachable: DataType validates


def _fits_float(fmt: str, v) -> bool:
    try:
        array(fmt, [v])
        return True
    except (TypeError, OverflowError):
        return False


def _encode_strings(f: Field, col: list, null_count: int, fmt: str) -> list:
    values = ["" if v is None else v for v in col] if null_count else col
    try:
        joined = "".join(values)
    except TypeError:
        raise _value_error(f, col, lambda v: isinstance(v, str), "a str") from None
    if joined.isascii():
        data = joined.encode("ascii")
        lengths = map(len, values)
    else:
        try:
            encoded = list(map(str.encode, values))
        except UnicodeEncodeError:  # lone surrogates
            raise _value_error(f, col, _utf8_ok, "a str encodable as UTF-8") from None
        data = b"".join(encoded)
        lengths = map(len, encoded)
    if fmt == "i" and len(data) > 0x7FFFFFFF:
        raise ValueError(f"column {f.name!r}: {len(data)} bytes of text exceed the 2 GiB limit of utf8; use large_utf8")
    return [_fixed(fmt, accumulate(lengths, initial=0)), data]


def _utf8_ok(v) -> bool:
    try:
        v.encode()
        return True
    except UnicodeEncodeError:
        return False


def _to_unscaled(v, scale: int, limit: int) -> int:
    """The integer ``v * 10**scale``; ValueError if that loses digits or exceeds ``limit``."""
    if isinstance(v, float):
        v = Decimal(repr(v))  # the shortest decimal that reads back as the float
    elif isinstance(v, str):
        v = Decimal(v)
    elif isinstance(v, bool) or not isinstance(v, (int, Decimal)):
        raise TypeError
    num, den = v.as_integer_ratio()  # raises for NaN and infinity
    if scale >= 0:
        num *= 10**scale
    else:
        den *= 10**-scale
    q, r = divmod(num, den)
    if r:
        raise ValueError("it has more fractional digits than the scale")
    if not -limit < q < limit:
        raise ValueError("it has more digits than the precision")
    return q


def _encode_decimals(f: Field, col: list) -> bytes:
    scale, limit = f.type.scale, 10**f.type.precision
    out = []
    for row, v in enumerate(col):
        if v is None:
            out.append(bytes(16))
            continue
        try:
            out.append(_to_unscaled(v, scale, limit).to_bytes(16, "little", signed=True))
        except (TypeError, ValueError, OverflowError, ArithmeticError) as e:
            why = f" ({e})" if isinstance(e, ValueError) and str(e).startswith("it ") else ""
            raise ValueError(
                f"column {f.name!r} ({f.type}): row {row}: cannot encode {v!r} ({type(v).__name__}){why}; "
                "expected a decimal.Decimal, int, str or float"
            ) from None
    return b"".join(out)


def _to_days(v) -> int:
    if isinstance(v, date):
        return v.toordinal() - _EPOCH_ORDINAL
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise TypeError


def _date_ok(v) -> bool:
    try:
        array("i", [_to_days(v)])
        return True
    except (TypeError, OverflowError):
        return False


def _to_ticks(v, tick: timedelta) -> int:
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            raise ValueError("time-zone-aware datetime")
        return (v - _EPOCH) // tick
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise TypeError


def _timestamp_ok(v, tick: timedelta) -> bool:
    try:
        array("q", [_to_ticks(v, tick)])
        return True
    except (TypeError, OverflowError, ValueError):
        return False
