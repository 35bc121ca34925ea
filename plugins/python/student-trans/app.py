"""The Flink Doris quick start's transform, in Python: `name -> concat(prefix, name)`,
`age -> age + 1`. Every other column passes through unchanged."""

from sluice_guest import Error, Transform, counter_add, export_transform


class StudentTrans(Transform):
    name = "student-trans"
    description = "Prefixes `name` and adds one to `age`, as the Flink Doris quick start"
    config_keys = [("prefix", "prefix_", "text put in front of every name")]
    example_input = "name VARCHAR(256), age INT"

    def init(self, config, input):
        config.reject_unknown(["prefix"])
        for column, expected in (("name", "utf8"), ("age", "int32")):
            if column not in input.names:
                raise Error(f"input needs a `{column}` column")
            got = str(input.field(column).type)
            if got != expected:
                raise Error(f"column `{column}` must be {expected}, got {got}")
        self.prefix = config.get_or("prefix", "prefix_")
        return input

    def process(self, batch):
        prefix = self.prefix
        names = [None if n is None else prefix + n for n in batch.column("name")]
        ages = [None if a is None else min(a + 1, 2**31 - 1) for a in batch.column("age")]
        out = batch.replace_column("name", names).replace_column("age", ages)
        counter_add("rows", out.num_rows)
        return [out]


Transformer = export_transform(StudentTrans)
