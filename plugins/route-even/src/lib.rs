//! Routes the rows whose `id` is even to another table (`table`): each batch comes out as two,
//! the even rows with `batch.table` set, the odd ones where they were going. An example of
//! routing, and the peer of the host's routing tests.

use sluice_guest::prelude::*;

struct RouteEven {
    table: String,
}

impl Transform for RouteEven {
    fn info() -> PluginInfo {
        PluginInfo::new("route-even", "Sends rows with an even `id` to `table`")
            .config_key("table", None, "the `db.table` the even rows go to")
            .example_input("id BIGINT, name VARCHAR(64)")
    }

    fn init(config: &Config, input: SchemaRef) -> Result<(Self, SchemaRef)> {
        config.reject_unknown(&["table"])?;
        let table = config.get("table").ok_or_else(|| Error::new("set `table`: where the even rows go"))?;
        input.field_with_name("id").map_err(|_| Error::new("input needs an `id` column"))?;
        Ok((RouteEven { table: table.to_string() }, input))
    }

    fn process(&mut self, batch: Batch) -> Result<Vec<Batch>> {
        let even = |r: Row<'_>| r.get("id").ok().and_then(|v| v.as_i64()).is_some_and(|id| id % 2 == 0);
        let evens = batch.filter(even)?.with_table(self.table.clone());
        let odds = batch.filter(|r| !even(r))?;
        Ok([odds, evens].into_iter().filter(|b| b.num_rows() > 0).collect())
    }
}

sluice_guest::export_transform!(RouteEven);
