"""Flight SQL scan throughput of doris-lite, measured with pyarrow as the client.

    python flight_scan.py FLIGHT_PORT DB TABLE TABLET_ID[,TABLET_ID…]

Prints, for a full-table scan over one stream and for parallel `TABLET(...)` streams, the
seconds, rows/s and MB/s (Arrow bytes received), plus a baseline measured in the same run:
the same table served from memory by pyarrow's own Flight server (gRPC, loopback and client
decoding alone).
"""

import concurrent.futures
import statistics
import sys
import time

import pyarrow as pa
import pyarrow.flight as fl


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


def connect(port):
    c = fl.FlightClient("grpc://127.0.0.1:%s" % port)
    return c, fl.FlightCallOptions(headers=[c.authenticate_basic_token("root", "")])


def scan(port, sql):
    c, o = connect(port)
    info = c.get_flight_info(fl.FlightDescriptor.for_command(command(sql)), o)
    t = c.do_get(info.endpoints[0].ticket, o).read_all()
    c.close()
    return t.num_rows, t.nbytes


class TableServer(fl.FlightServerBase):
    """Serves one table for any ticket: the baseline."""

    def __init__(self, table):
        super().__init__("grpc://127.0.0.1:0")
        self.table = table

    def do_get(self, context, ticket):
        return fl.RecordBatchStream(self.table)


def timed(fn, repeat=3):
    runs = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


def report(name, secs, rows, nbytes):
    print("%-30s %7.3f s  %12.0f rows/s  %8.1f MB/s  (%d rows, %.1f MB)"
          % (name, secs, rows / secs, nbytes / secs / 1e6, rows, nbytes / 1e6))
    return rows / secs


def main():
    port, db, table, tablets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    full_sql = "SELECT * FROM `%s`.`%s`" % (db, table)

    t0 = time.perf_counter()
    rows, nbytes = scan(port, full_sql)
    print("%-30s %7.3f s  (builds the per-tablet Arrow snapshot)" % ("first scan", time.perf_counter() - t0))

    # Baseline: the same Arrow data from pyarrow's Flight server.
    c, o = connect(port)
    info = c.get_flight_info(fl.FlightDescriptor.for_command(command(full_sql)), o)
    local = c.do_get(info.endpoints[0].ticket, o).read_all()
    server = TableServer(pa.Table.from_batches(local.combine_chunks().to_batches(max_chunksize=65536)))

    def baseline():
        bc = fl.FlightClient("grpc://127.0.0.1:%d" % server.port)
        t = bc.do_get(fl.Ticket(b"all")).read_all()
        bc.close()
        return t.num_rows, t.nbytes

    secs, (brows, bbytes) = timed(baseline)
    base = report("baseline: pyarrow Flight server", secs, brows, bbytes)

    secs, (rows, nbytes) = timed(lambda: scan(port, full_sql))
    one = report("full scan, 1 stream", secs, rows, nbytes)

    def parallel(n):
        sqls = ["/* ApplicationName=Flink ArrowFlightSQL Query */ SELECT * FROM `%s`.`%s`  TABLET(%s)"
                % (db, table, t) for t in tablets]
        with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
            parts = list(ex.map(lambda s: scan(port, s), sqls))
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    best = one
    for n in (2, 4, len(tablets)):
        secs, (rows, nbytes) = timed(lambda: parallel(n))
        best = max(best, report("TABLET scans, %d streams" % n, secs, rows, nbytes))
    print("best / baseline: %.2f" % (best / base))
    server.shutdown()


if __name__ == "__main__":
    main()
