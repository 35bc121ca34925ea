"""Writing a Sluice transform or decoder in Python.

A transform is a class with ``init`` and ``process``; a decoder one with ``init`` and ``decode``.
``export_transform`` / ``export_decoder`` turn it into the class ``componentize-py`` exports for the
WIT world (``transform`` or ``decoder``)::

    from sluice_guest import Transform, export_transform

    class Shout(Transform):
        def process(self, batch):
            return [batch.replace_column("name", [n and n.upper() for n in batch.column("name")])]

    Transformer = export_transform(Shout)

Batches are columns of Python values (:mod:`sluice_guest.ipc`), with the row kinds and the
target table of the WIT ``batch``. An :class:`Error` raised by the plugin fails the batch with its
message (and row); any other exception fails it too, named with its type.
"""

from __future__ import annotations

import json
import traceback
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Iterable, Iterator

from . import ipc
from .types import Column, columns_of, schema_of

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3
"""Row kinds, as the WIT ``batch.row-kinds`` encodes them (Flink's ``+I``, ``-U``, ``+U``, ``-D``)."""


class Error(Exception):
    """What a plugin raises to refuse a batch: the host fails it with ``message`` (and the row)."""

    def __init__(self, message: str, row: int | None = None):
        super().__init__(message)
        self.message = message
        self.row = row

    def at_row(self, row: int) -> Error:
        """The same error, naming the input row (or message) at fault."""
        return Error(self.message, row)


class Config:
    """The plugin's settings from the pipeline file (``[transform.config]``), as text."""

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        self.values = dict(pairs)

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def get_or(self, key: str, default: str) -> str:
        return self.values.get(key, default)

    def parse_or(self, key: str, default, parse=int):
        """``parse`` of the value of ``key``, or ``default`` when it is not set."""
        if key not in self.values:
            return default
        try:
            return parse(self.values[key])
        except (TypeError, ValueError) as e:
            raise Error(f"config `{key}` = {self.values[key]!r}: {e}") from None

    def reject_unknown(self, known: Iterable[str]) -> None:
        """Fail on a key the plugin does not know (a typo must not be ignored)."""
        known = list(known)
        for key in self.values:
            if key not in known:
                raise Error(f"unknown config key `{key}`; known keys: {', '.join(known) or 'none'}")


class Batch(ipc.Batch):
    """A batch for one target table: columns, one row kind per row, and the table (``None``:
    the pipeline's sink table)."""

    __slots__ = ("row_kinds", "table")

    def __init__(self, schema, columns, row_kinds=None, table=None, num_rows=None):
        super().__init__(schema, columns, num_rows)
        self.row_kinds = list(row_kinds) if row_kinds else []
        self.table = table

    def kind(self, row: int) -> int:
        return self.row_kinds[row] if self.row_kinds else INSERT

    def replace_column(self, name: str, values: list) -> Batch:
        """This batch with the column ``name`` holding ``values`` (same type)."""
        i = self.schema.index(name) if name in self.schema.names else None
        if i is None:
            raise Error(f"the batch has no column `{name}`; its columns are {', '.join(self.schema.names)}")
        columns = list(self._columns)
        columns[i] = values
        return Batch(self.schema, columns, self.row_kinds, self.table, self.num_rows)

    def rows(self) -> Iterator[dict]:
        """Each row as a dict of column name to value."""
        names = self.schema.names
        for values in zip(*self.columns):
            yield dict(zip(names, values))

    def to_table(self, table: str | None) -> Batch:
        """The same rows, routed to ``table`` (``db.table``)."""
        return Batch(self.schema, self._columns, self.row_kinds, table, self.num_rows)


class BatchBuilder:
    """Builds a batch row by row, converting JSON-style values (text, numbers) to the types of
    ``schema``: what a decoder needs."""

    def __init__(self, schema: ipc.Schema, table: str | None = None):
        self.schema = schema
        self.table = table
        self.columns: list[list] = [[] for _ in schema.fields]
        self.kinds: list[int] = []
        self._convert = [_converter(f) for f in schema.fields]

    def push(self, row: dict, kind: int = INSERT) -> None:
        """Append a row given as a dict (missing columns are null)."""
        for f, column, convert in zip(self.schema.fields, self.columns, self._convert):
            value = row.get(f.name)
            if value is None and not f.nullable:
                self._undo(len(self.kinds))
                raise Error(f"column `{f.name}` is NOT NULL and the row has no value for it")
            try:
                column.append(None if value is None else convert(value))
            except (TypeError, ValueError, InvalidOperation, OverflowError) as e:
                self._undo(len(self.kinds))
                raise Error(f"column `{f.name}`: {e}") from None
        self.kinds.append(kind)

    def _undo(self, n: int) -> None:
        for column in self.columns:
            del column[n:]

    def finish(self) -> Batch:
        kinds = self.kinds if any(self.kinds) else []
        return Batch(self.schema, self.columns, kinds, self.table, len(self.kinds))


def _converter(f: ipc.Field):
    t = str(f.type)
    if t in ("int8", "int16", "int32", "int64"):
        return _to_int
    if t in ("float32", "float64"):
        return float
    if t == "bool":
        return _to_bool
    if t.startswith("decimal128"):
        # Rounded half away from zero to the column's scale, as Doris rounds on load.
        step = Decimal(1).scaleb(-f.type.scale)
        return lambda v: _to_decimal(v).quantize(step, rounding=ROUND_HALF_UP)
    if t == "date32":
        return lambda v: v if isinstance(v, date) else date.fromisoformat(str(v))
    if t.startswith("timestamp"):
        return lambda v: v if isinstance(v, datetime) else datetime.fromisoformat(str(v))
    return _to_text


def _to_int(v) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise ValueError(f"`{v}` is not an integer")


def _to_decimal(v) -> Decimal:
    if isinstance(v, bool) or not isinstance(v, (int, float, str, Decimal)):
        raise ValueError(f"`{v}` is not a decimal number")
    try:
        d = Decimal(str(v).strip())
    except InvalidOperation:
        raise ValueError(f"`{v}` is not a decimal number") from None
    if not d.is_finite():
        raise ValueError(f"`{v}` is not a decimal number")
    return d


def _to_bool(v) -> bool:
    if isinstance(v, bool):
        return v
    if v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    raise ValueError(f"{v!r} is not a boolean")


def _to_text(v) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))


class Transform:
    """Base class of a transform. Override ``process``; ``init`` keeps the input schema unless
    overridden (return the output columns' schema when they change)."""

    name = "python-transform"
    description = ""
    config_keys: list[tuple[str, str | None, str]] = []
    example_input: str | None = None

    def init(self, config: Config, input: ipc.Schema) -> ipc.Schema:
        config.reject_unknown(k for k, _, _ in self.config_keys)
        return input

    def process(self, batch: Batch) -> list[Batch]:
        return [batch]


class Decoder:
    """Base class of a decoder. ``init`` gets the declared schema; ``decode`` a list of
    messages (``bytes``) and returns batches with row kinds."""

    name = "python-decoder"
    description = ""
    config_keys: list[tuple[str, str | None, str]] = []
    example_input: str | None = None

    def init(self, config: Config, declared: ipc.Schema) -> ipc.Schema:
        config.reject_unknown(k for k, _, _ in self.config_keys)
        return declared

    def decode(self, messages: list[bytes]) -> list[Batch]:
        raise Error("decode is not implemented")


# --- the component's exports ------------------------------------------------------------------


def _info(plugin, types):
    keys = [types.ConfigKey(k, d, text) for k, d, text in plugin.config_keys]
    return types.PluginInfo(plugin.name, plugin.description, keys, plugin.example_input)


def _failed(e: BaseException, types, Err):
    """The WIT error for an exception raised by the plugin."""
    if isinstance(e, Error):
        return Err(types.PluginError(e.message, e.row))
    return Err(types.PluginError(_describe(e), None))


def _describe(e: BaseException) -> str:
    """One line for an uncaught exception: its type, message and where it was raised (from the
    frames alone: a component has no source files to read)."""
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    frames = list(traceback.walk_tb(e.__traceback__))
    if frames:
        frame, line = frames[-1]
        code = frame.f_code
        text += f" (at {code.co_filename.rsplit('/', 1)[-1]}:{line}, in {code.co_name})"
    return text


def _wit_schema(schema: ipc.Schema, types):
    return types.Schema([types.Column(c.name, c.data_type, c.nullable) for c in columns_of(schema)])


def _from_wit(batch) -> Batch:
    # Lazily: columns the plugin never reads go back as the buffers they came in.
    b = ipc.read_stream(batch.arrow_ipc, lazy=True)
    return Batch(b.schema, b._columns, batch.row_kinds, batch.table, b.num_rows)


def _to_wit(batch: ipc.Batch, types):
    kinds = getattr(batch, "row_kinds", None) or []
    return types.Batch(getattr(batch, "table", None), ipc.write_stream(batch), bytes(kinds))


def _init(plugin, config, wit_schema, types, Err):
    """``plugin.init`` with the WIT config and schema; its result (or error) as WIT values."""
    try:
        schema = schema_of([Column(c.name, c.data_type, c.nullable) for c in wit_schema.columns])
        return _wit_schema(plugin.init(Config(config), schema), types)
    except Exception as e:
        raise _failed(e, types, Err) from None


def export_transform(cls: type[Transform]):
    """The ``Transformer`` class componentize-py exports for the ``transform`` world."""
    from componentize_py_types import Err
    from wit_world import exports
    from wit_world.imports import types

    class Transformer(exports.Transformer):
        plugin = cls()

        def describe(self):
            return _info(self.plugin, types)

        def init(self, config, input):
            return _init(self.plugin, config, input, types, Err)

        def process(self, input):
            try:
                return [_to_wit(b, types) for b in self.plugin.process(_from_wit(input))]
            except Exception as e:
                raise _failed(e, types, Err) from None

    return Transformer


def export_decoder(cls: type[Decoder]):
    """The ``EventDecoder`` class componentize-py exports for the ``decoder`` world."""
    from componentize_py_types import Err
    from wit_world import exports
    from wit_world.imports import types

    class EventDecoder(exports.EventDecoder):
        plugin = cls()

        def describe(self):
            return _info(self.plugin, types)

        def init(self, config, declared):
            return _init(self.plugin, config, declared, types, Err)

        def decode(self, input):
            try:
                data, offsets = bytes(input.data), input.offsets
                messages = [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
                return [_to_wit(b, types) for b in self.plugin.decode(messages)]
            except Exception as e:
                raise _failed(e, types, Err) from None

    return EventDecoder


def log(level: str, message: str) -> None:
    """A line in the host's log, tagged with the plugin's name (``trace`` … ``error``)."""
    from wit_world.imports import host  # imported with the exports, before any call

    host.log(getattr(host.Level, level.upper()), message)


def counter_add(name: str, delta: int) -> None:
    """Add ``delta`` to the plugin's counter ``name`` (``sluice_plugin_<name>_total``)."""
    from wit_world.imports import host

    host.counter_add(name, delta)
