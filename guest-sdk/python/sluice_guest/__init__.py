"""Python guest SDK for Sluice plugins (WebAssembly components built with componentize-py).

:mod:`sluice_guest.plugin` is what a plugin author uses (``Transform``, ``Decoder``, ``Batch``,
``BatchBuilder``, ``Config``, ``Error``, ``export_transform`` / ``export_decoder``);
:mod:`sluice_guest.ipc` converts the Arrow IPC bytes of a ``batch`` on the plugin boundary to
and from Python lists, using the standard library only; :mod:`sluice_guest.types` maps Doris
column types to Arrow fields.
"""

from .ipc import (
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
    DataType,
    Field,
    Schema,
    decimal128,
    read_stream,
    timestamp,
    write_stream,
)
from .plugin import (
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    Batch,
    BatchBuilder,
    Config,
    Decoder,
    Error,
    Transform,
    counter_add,
    export_decoder,
    export_transform,
    log,
)
from .types import Column, doris_field, doris_type

__all__ = [
    "DELETE",
    "INSERT",
    "UPDATE_AFTER",
    "UPDATE_BEFORE",
    "BatchBuilder",
    "Column",
    "Config",
    "Decoder",
    "Error",
    "Transform",
    "counter_add",
    "doris_field",
    "doris_type",
    "export_decoder",
    "export_transform",
    "log",
    "BOOL",
    "DATE32",
    "FLOAT32",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "LARGE_UTF8",
    "UTF8",
    "Batch",
    "DataType",
    "Field",
    "Schema",
    "decimal128",
    "read_stream",
    "timestamp",
    "write_stream",
]
