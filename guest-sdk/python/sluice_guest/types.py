"""Doris column types and the Arrow fields that carry them across the plugin boundary.

The mapping is the one in ``wit/sluice.wit`` (and the Rust SDK's ``sluice_guest::types``):
integers, floats, DECIMAL, DATE and DATETIME have Arrow types of their own; LARGEINT, JSON,
ARRAY/MAP/STRUCT, CHAR(n) and VARCHAR(n) travel as utf8 with the Doris type in the field's
``doris_type`` metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ipc

DORIS_TYPE_KEY = "doris_type"

_PLAIN = {
    "BOOLEAN": ipc.BOOL,
    "BOOL": ipc.BOOL,
    "TINYINT": ipc.INT8,
    "SMALLINT": ipc.INT16,
    "INT": ipc.INT32,
    "INTEGER": ipc.INT32,
    "BIGINT": ipc.INT64,
    "FLOAT": ipc.FLOAT32,
    "DOUBLE": ipc.FLOAT64,
    "DATE": ipc.DATE32,
    "DATEV2": ipc.DATE32,
    "STRING": ipc.UTF8,
    "TEXT": ipc.UTF8,
}
_TAGGED = ("LARGEINT", "JSON", "JSONB", "VARIANT")
_NESTED = ("ARRAY", "MAP", "STRUCT")


@dataclass(frozen=True)
class Column:
    """A column as the host names it at ``init``: its name, Doris type and nullability."""

    name: str
    data_type: str
    nullable: bool = True

    def field(self) -> ipc.Field:
        """The Arrow field this column crosses the boundary as."""
        return doris_field(self.name, self.data_type, self.nullable)


def doris_field(name: str, doris_type: str, nullable: bool = True) -> ipc.Field:
    """The Arrow field for a column ``name`` of Doris type ``doris_type`` (``"VARCHAR(64)"``,
    ``"DECIMAL(10,2)"``, ``"DATETIME(3)"``, ``"ARRAY<INT>"`` …). An unknown type is a
    ``ValueError`` naming the column."""
    text = doris_type.strip()
    upper = text.upper()
    base, args = upper, []
    if "(" in upper and not upper.startswith(_NESTED):
        open_, close = upper.index("("), upper.rfind(")")
        if close < open_ or upper[close + 1 :].strip():
            raise ValueError(f"column `{name}`: type `{text}`: unbalanced parentheses")
        base = upper[:open_].strip()
        args = [a.strip() for a in upper[open_ + 1 : close].split(",")]

    def nums() -> list[int]:
        try:
            return [int(a) for a in args]
        except ValueError:
            raise ValueError(f"column `{name}`: type `{text}`: arguments must be integers") from None

    if base in _PLAIN and not args:
        return ipc.Field(name, _PLAIN[base], nullable)
    if base in ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"):
        return ipc.Field(name, _PLAIN[base], nullable)
    if base in _TAGGED and not args:
        tag = "JSON" if base == "JSONB" else base
        return ipc.Field(name, ipc.UTF8, nullable, {DORIS_TYPE_KEY: tag})
    if base.startswith(_NESTED):
        return ipc.Field(name, ipc.UTF8, nullable, {DORIS_TYPE_KEY: text})
    if base in ("DECIMAL", "DECIMALV3", "DECIMALV2", "NUMERIC"):
        n = nums()
        if not n:
            precision, scale = (27, 9) if base == "DECIMALV2" else (9, 0)
        else:
            precision, scale = n[0], n[1] if len(n) > 1 else 0
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"column `{name}`: type `{text}`: DECIMAL needs 1 <= precision <= 38 and scale <= precision")
        return ipc.Field(name, ipc.decimal128(precision, scale), nullable)
    if base in ("DATETIME", "DATETIMEV2", "TIMESTAMP"):
        n = nums()
        precision = n[0] if n else 0
        if not 0 <= precision <= 6:
            raise ValueError(f"column `{name}`: type `{text}`: DATETIME precision must be 0-6")
        unit = "s" if precision == 0 else "ms" if precision <= 3 else "us"
        return ipc.Field(name, ipc.timestamp(unit), nullable)
    if base in ("CHAR", "VARCHAR"):
        n = nums()
        if not n:
            return ipc.Field(name, ipc.UTF8, nullable, {DORIS_TYPE_KEY: base} if base == "CHAR" else {})
        return ipc.Field(name, ipc.UTF8, nullable, {DORIS_TYPE_KEY: f"{base}({n[0]})"})
    raise ValueError(f"column `{name}`: unknown Doris type `{text}`")


def doris_type(field: ipc.Field) -> str:
    """The Doris type of an Arrow field: its ``doris_type`` metadata, else the natural Doris
    type of its Arrow type."""
    tagged = field.metadata.get(DORIS_TYPE_KEY)
    if tagged:
        return tagged
    t = str(field.type)
    natural = {
        "bool": "BOOLEAN",
        "int8": "TINYINT",
        "int16": "SMALLINT",
        "int32": "INT",
        "int64": "BIGINT",
        "float32": "FLOAT",
        "float64": "DOUBLE",
        "date32": "DATE",
        "utf8": "STRING",
        "large_utf8": "STRING",
        "timestamp[s]": "DATETIME",
        "timestamp[ms]": "DATETIME(3)",
        "timestamp[us]": "DATETIME(6)",
    }
    if t in natural:
        return natural[t]
    if t.startswith("decimal128("):
        return "DECIMAL" + t[len("decimal128") :].replace(" ", "")
    raise ValueError(f"column `{field.name}`: Arrow type {t} has no Doris type")


def schema_of(columns: list[Column]) -> ipc.Schema:
    """The Arrow schema of a list of columns."""
    return ipc.Schema([c.field() for c in columns])


def columns_of(schema: ipc.Schema) -> list[Column]:
    """The columns of an Arrow schema, with their Doris types."""
    return [Column(f.name, doris_type(f), f.nullable) for f in schema.fields]
