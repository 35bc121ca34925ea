"""Returns every batch unchanged, in Python: the baseline of the plugin boundary benchmark (the
batch is still decoded from and encoded to Arrow IPC, as every Python plugin's is)."""

from sluice_guest import Transform, export_transform


class Passthrough(Transform):
    name = "passthrough"
    description = "Returns every batch unchanged (benchmark baseline)"

    def process(self, batch):
        return [batch]


Transformer = export_transform(Passthrough)
