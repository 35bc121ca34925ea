"""A plugin that misbehaves on purpose, in Python, for the sandbox's tests. `mode` picks it on
`process`: `loop` (never returns), `memory` (allocates until it is stopped), `exception` (raises
an uncaught ZeroDivisionError), `error` (refuses the batch naming row 0), or `ok` (passes it)."""

from sluice_guest import Error, Transform, export_transform


class Hostile(Transform):
    name = "hostile"
    description = "Misbehaves on purpose (tests)"
    config_keys = [("mode", "ok", "loop, memory, exception, error or ok")]
    example_input = "id BIGINT"

    def init(self, config, input):
        config.reject_unknown(["mode"])
        self.mode = config.get_or("mode", "ok")
        return input

    def process(self, batch):
        if self.mode == "loop":
            n = 0
            while True:
                n += 1
        if self.mode == "memory":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if self.mode == "exception":
            return [batch.replace_column("id", [1 // 0])]
        if self.mode == "error":
            raise Error("refusing this batch", 0)
        return [batch]


Transformer = export_transform(Hostile)
