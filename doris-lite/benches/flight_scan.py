"""Flight SQL scan throughput of doris-lite, measured with pyarrow as the client, against a
baseline that reads the same data over the same number of streams.

    python flight_scan.py FLIGHT_PORT DB TABLE TABLET_ID[,TABLET_ID…]
    python flight_scan.py --serve DIR        # (used by the above) the baseline server

For each stream count N in 1, 2, 4 and the number of tablets, the same read is timed two ways:

- doris-lite: for N = 1, a full-table scan (`SELECT * FROM DB.TABLE`) over one stream; for N > 1,
  one `TABLET(id)` query per tablet, N of them at a time (N concurrent streams until every tablet
  is read). Each stream: connect, authenticate, GetFlightInfo, DoGet, read to the end.
- baseline: pyarrow's own Flight server, in a process of its own (as doris-lite is), serving from
  memory the very Arrow data doris-lite returned for the same query, batch for batch: for N = 1,
  the full-table scan's result over one stream; for N > 1, each tablet's result over a stream of its
  own, N at a time. Each stream: connect, GetFlightInfo, DoGet, read to the end. What the baseline
  costs is gRPC over loopback and the client's decoding, which doris-lite's figure includes as well.

Each figure is the median of 3 repeats, doris-lite and baseline taking turns to go first. Printed
per N: seconds, rows/s and MB/s (Arrow bytes received) of each side, and

- "doris-lite / baseline": doris-lite's rows/s over the baseline's at the SAME N: the share of a
  do-nothing Flight server's speed that doris-lite reaches with as many streams (1.00 = as fast);
- "N / 1 stream": each side's rows/s with N streams over its own with one (the parallel scaling).

Before all that, the first scan, which builds doris-lite's per-tablet Arrow snapshot, is timed on
its own; the rows each side returns are checked to be the table's.
"""

import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.flight as fl

REPEAT = 3


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, data):
    return bytes([num << 3 | 2]) + _varint(len(data)) + data


def command(sql):
    any_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return _field(1, any_url) + _field(2, _field(1, sql.encode()))


def read(port, cmd, auth):
    """One stream: connect, (authenticate,) GetFlightInfo for the command, DoGet; the table."""
    c = fl.FlightClient("grpc://127.0.0.1:%s" % port)
    o = fl.FlightCallOptions(headers=[c.authenticate_basic_token("root", "")] if auth else [])
    info = c.get_flight_info(fl.FlightDescriptor.for_command(cmd), o)
    t = c.do_get(info.endpoints[0].ticket, o).read_all()
    c.close()
    return t


class Source:
    """A Flight server to scan: its port, the command of each stream, and whether it authenticates."""

    def __init__(self, port, full, parts, auth):
        self.port, self.full, self.parts, self.auth = port, full, parts, auth

    def scan(self, n):
        """The table over n concurrent streams: rows and Arrow bytes received."""
        cmds = [self.full] if n == 1 else self.parts
        with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
            tables = list(ex.map(lambda cmd: read(self.port, cmd, self.auth), cmds))
        return sum(t.num_rows for t in tables), sum(t.nbytes for t in tables)


class TableServer(fl.FlightServerBase):
    """The baseline: serves named tables from memory, the name being both command and ticket."""

    def __init__(self, tables):
        super().__init__("grpc://127.0.0.1:0")
        self.tables = tables

    def get_flight_info(self, context, descriptor):
        t = self.tables[descriptor.command.decode()]
        return fl.FlightInfo(t.schema, descriptor, [fl.FlightEndpoint(descriptor.command, [])],
                             t.num_rows, t.nbytes)

    def do_get(self, context, ticket):
        return fl.RecordBatchStream(self.tables[ticket.ticket.decode()])


def serve(folder):
    """Loads every NAME.arrow of folder into memory, serves it as NAME and prints the port."""
    tables = {}
    for f in sorted(os.listdir(folder)):
        with pa.OSFile(os.path.join(folder, f)) as src:
            tables[f[:-len(".arrow")]] = pa.ipc.open_file(src).read_all()
    server = TableServer(tables)
    print(server.port, flush=True)
    server.serve()


def start_baseline(named_tables):
    """Starts the baseline server process serving named_tables (name -> table, batches as they
    are); returns the process and its port."""
    with tempfile.TemporaryDirectory() as folder:
        for name, t in named_tables.items():
            with pa.OSFile(os.path.join(folder, name + ".arrow"), "wb") as sink:
                with pa.ipc.new_file(sink, t.schema) as w:
                    w.write_table(t)
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", folder],
                                stdout=subprocess.PIPE, text=True)
        port = proc.stdout.readline().strip()  # the tables are loaded: the files may go
    if not port:
        raise SystemExit("the baseline server did not start")
    return proc, port


def timed_pair(fa, fb):
    """Median seconds of fa and of fb over REPEAT turns, alternating which runs first; the
    results of their last runs."""
    secs = ([], [])
    results = [None, None]
    for i in range(REPEAT):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            results[j] = (fa, fb)[j]()
            secs[j].append(time.perf_counter() - t0)
    return [(statistics.median(s), r) for s, r in zip(secs, results)]


def report(name, secs, rows, nbytes):
    print("  %-26s %7.3f s  %12.0f rows/s  %8.1f MB/s  (%d rows, %.1f MB)"
          % (name, secs, rows / secs, nbytes / secs / 1e6, rows, nbytes / 1e6))
    return rows / secs


def main():
    port, db, table, tablets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    full_sql = "SELECT * FROM `%s`.`%s`" % (db, table)
    tablet_sqls = ["/* ApplicationName=Flink ArrowFlightSQL Query */ SELECT * FROM `%s`.`%s`  TABLET(%s)"
                   % (db, table, t) for t in tablets]

    t0 = time.perf_counter()
    full = read(port, command(full_sql), True)
    print("%-28s %7.3f s  (builds the per-tablet Arrow snapshot)" % ("first scan", time.perf_counter() - t0))

    # The baseline serves what doris-lite returned for each query, batch for batch.
    named = {"full": full}
    for i, s in enumerate(tablet_sqls):
        named["tablet%d" % i] = read(port, command(s), True)
    total = full.num_rows
    if sum(named["tablet%d" % i].num_rows for i in range(len(tablets))) != total:
        raise SystemExit("the TABLET scans returned %d rows, the full scan %d"
                         % (sum(named["tablet%d" % i].num_rows for i in range(len(tablets))), total))
    proc, bport = start_baseline(named)
    del named, full

    doris = Source(port, command(full_sql), [command(s) for s in tablet_sqls], True)
    base = Source(bport, b"full", [b"tablet%d" % i for i in range(len(tablets))], False)
    ratios, one = [], None
    try:
        for n in sorted({1, 2, 4, len(tablets)}):
            if n > len(tablets):
                continue
            (d_secs, (d_rows, d_bytes)), (b_secs, (b_rows, b_bytes)) = timed_pair(
                lambda: doris.scan(n), lambda: base.scan(n))
            if d_rows != total or b_rows != total:
                raise SystemExit("%d streams: doris-lite returned %d rows, the baseline %d; the table has %d"
                                 % (n, d_rows, b_rows, total))
            if n == 1:
                print("1 stream (the whole table):")
            else:
                print("%d streams (%d tablets, %d at a time):" % (n, len(tablets), n))
            d = report("doris-lite " + ("full scan" if n == 1 else "TABLET scans"), d_secs, d_rows, d_bytes)
            b = report("baseline: pyarrow Flight", b_secs, b_rows, b_bytes)
            line = "  doris-lite / baseline: %.2f" % (d / b)
            if one:
                line += ";  %d / 1 stream: doris-lite %.2f, baseline %.2f" % (n, d / one[0], b / one[1])
            print(line)
            one = one or (d, b)
            ratios.append("%d: %.2f" % (n, d / b))
    finally:
        proc.terminate()
        proc.wait()
    print("doris-lite / baseline at equal stream counts (streams: ratio): %s" % ",  ".join(ratios))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        main()
