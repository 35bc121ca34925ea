//! The Flink Doris quick start's transform: `name -> concat(prefix, name)`, `age -> age + 1`.
//! Every other column passes through unchanged.

use sluice_guest::prelude::*;

struct StudentTrans {
    prefix: String,
}

impl Transform for StudentTrans {
    fn info() -> PluginInfo {
        PluginInfo::new("student-trans", "Prefixes `name` and adds one to `age`, as the Flink Doris quick start")
            .config_key("prefix", Some("prefix_"), "text put in front of every name")
            .example_input("name VARCHAR(256), age INT")
    }

    fn init(config: &Config, input: SchemaRef) -> Result<(Self, SchemaRef)> {
        config.reject_unknown(&["prefix"])?;
        for (column, expected) in [("name", DataType::Utf8), ("age", DataType::Int32)] {
            let field =
                input.field_with_name(column).map_err(|_| Error::new(format!("input needs a `{column}` column")))?;
            if field.data_type() != &expected {
                return Err(Error::new(format!("column `{column}` must be {expected}, got {}", field.data_type())));
            }
        }
        let prefix = config.get_or("prefix", "prefix_").to_string();
        Ok((StudentTrans { prefix }, input))
    }

    fn process(&mut self, batch: Batch) -> Result<Vec<Batch>> {
        let prefix = &self.prefix;
        let names = batch.map_str("name", |name, out| {
            out.push_str(prefix);
            out.push_str(name);
        })?;
        let ages: Int32Array = batch.typed::<Int32Array>("age")?.unary(|age: i32| age.saturating_add(1));
        let out = batch.replace_column("name", Arc::new(names))?.replace_column("age", Arc::new(ages))?;
        sluice_guest::prelude::counter_add("rows", out.num_rows() as u64);
        Ok(vec![out])
    }
}

sluice_guest::export_transform!(StudentTrans);
