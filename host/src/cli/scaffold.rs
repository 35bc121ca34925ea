//! `sluice plugin new <name> --lang rust|python|js`: a plugin directory that builds and passes
//! `sluice plugin test <name> --input <name>/rows.jsonl` as generated. It carries the guest SDK
//! and the WIT contract of this build of Sluice, so it builds anywhere, with no checkout.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::wasm::build::WIT;

/// Sample rows for `sluice plugin test`, matching the example input of every template.
const ROWS: &str = "{\"name\":\"James\",\"age\":18}\n{\"name\":\"Emily\",\"age\":28}\n";

const RUST_SDK: [(&str, &str); 7] = [
    ("src/lib.rs", include_str!("../../../guest-sdk/src/lib.rs")),
    ("src/batch.rs", include_str!("../../../guest-sdk/src/batch.rs")),
    ("src/bindings.rs", include_str!("../../../guest-sdk/src/bindings.rs")),
    ("src/config.rs", include_str!("../../../guest-sdk/src/config.rs")),
    ("src/json.rs", include_str!("../../../guest-sdk/src/json.rs")),
    ("src/rt.rs", include_str!("../../../guest-sdk/src/rt.rs")),
    ("src/types.rs", include_str!("../../../guest-sdk/src/types.rs")),
];
const RUST_SDK_MANIFEST: &str = include_str!("../../../guest-sdk/Cargo.toml");

/// Write a new plugin called `name` (a directory of that name under the current one) in `lang`.
pub fn new_plugin(name: &str, lang: &str) -> anyhow::Result<PathBuf> {
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if !valid {
        bail!(
            "plugin name `{name}`: use lower-case letters, digits, `-` and `_`, starting with a letter (e.g. `my-transform`)"
        );
    }
    let dir = PathBuf::from(name);
    if dir.exists() {
        bail!("{}: already exists; choose another name or remove it", dir.display());
    }
    let files = match lang {
        "rust" => rust_files(name),
        "python" => python_files(name),
        "js" => js_files(name),
        other => bail!("--lang {other}: plugins are scaffolded in `rust`, `python` or `js`"),
    };
    for (path, text) in files {
        write(&dir.join(path), &text)?;
    }
    Ok(dir)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("{}: cannot create it", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("{}: cannot write it", path.display()))
}

fn python_files(name: &str) -> Vec<(String, String)> {
    let manifest = "# A Sluice plugin in Python: `sluice plugin build .` builds app.py (and the guest SDK Sluice\n\
                    # brings) into a component of the `transform` world with componentize-py.\n\
                    [plugin]\nlanguage = \"python\"\nworld = \"transform\"\n";
    let app = format!(
        r#""""{name}: upper-cases `name`; every other column passes through.

Try it:  sluice plugin test {name} --input {name}/rows.jsonl
"""

from sluice_guest import Transform, counter_add, export_transform


class Plugin(Transform):
    name = "{name}"
    description = "Upper-cases `name`"
    example_input = "name VARCHAR(64), age INT"

    def process(self, batch):
        names = [None if n is None else n.upper() for n in batch.column("name")]
        counter_add("rows", batch.num_rows)
        return [batch.replace_column("name", names)]


Transformer = export_transform(Plugin)
"#
    );
    vec![("plugin.toml".into(), manifest.into()), ("app.py".into(), app), ("rows.jsonl".into(), ROWS.into())]
}

fn js_files(name: &str) -> Vec<(String, String)> {
    let manifest = "# A Sluice plugin in JavaScript: `sluice plugin build .` bundles app.js with the guest SDK\n\
                    # Sluice brings and apache-arrow (esbuild), and builds a component of the `transform`\n\
                    # world with componentize-js (`npm install` here first, or set $SLUICE_JS_TOOLS).\n\
                    [plugin]\nlanguage = \"js\"\nworld = \"transform\"\n";
    let package = format!(
        r#"{{
  "name": "{name}",
  "private": true,
  "type": "module",
  "devDependencies": {{
    "@bytecodealliance/componentize-js": "0.23.0",
    "apache-arrow": "21.2.0",
    "esbuild": "0.28.2"
  }}
}}
"#
    );
    let app = format!(
        r#"// {name}: upper-cases `name`; every other column passes through.
//
// Try it:  sluice plugin test {name} --input {name}/rows.jsonl
import {{ counterAdd, exportTransform }} from 'sluice-guest';

export const transformer = exportTransform({{
  name: '{name}',
  description: 'Upper-cases `name`',
  exampleInput: 'name VARCHAR(64), age INT',

  process(batch) {{
    const names = batch.column('name').map((n) => (n === null ? null : n.toUpperCase()));
    counterAdd('rows', batch.numRows);
    return [batch.replaceColumn('name', names)];
  }},
}});
"#
    );
    vec![
        ("plugin.toml".into(), manifest.into()),
        ("package.json".into(), package),
        ("app.js".into(), app),
        ("rows.jsonl".into(), ROWS.into()),
    ]
}

fn rust_files(name: &str) -> Vec<(String, String)> {
    let manifest = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
sluice-guest = {{ path = "sluice-guest" }}

# A workspace of its own: the plugin builds wherever it is.
[workspace]

[profile.release]
opt-level = 3
lto = true
codegen-units = 1
panic = "abort"
strip = "debuginfo"
"#
    );
    let lib = format!(
        r#"//! {name}: upper-cases `name`; every other column passes through.
//!
//! Try it:  sluice plugin test {name} --input {name}/rows.jsonl

use sluice_guest::prelude::*;

struct Plugin;

impl Transform for Plugin {{
    fn info() -> PluginInfo {{
        PluginInfo::new("{name}", "Upper-cases `name`").example_input("name VARCHAR(64), age INT")
    }}

    fn init(config: &Config, input: SchemaRef) -> Result<(Self, SchemaRef)> {{
        config.reject_unknown(&[])?;
        Ok((Plugin, input))
    }}

    fn process(&mut self, batch: Batch) -> Result<Vec<Batch>> {{
        let names: StringArray = batch.typed::<StringArray>("name")?.iter().map(|n| n.map(str::to_uppercase)).collect();
        counter_add("rows", batch.num_rows() as u64);
        Ok(vec![batch.replace_column("name", Arc::new(names))?])
    }}
}}

sluice_guest::export_transform!(Plugin);
"#
    );
    // The SDK as a path dependency: its own package, not a member of Sluice's plugin workspace.
    let sdk_manifest: String =
        RUST_SDK_MANIFEST.lines().filter(|l| !l.starts_with("workspace = ")).map(|l| format!("{l}\n")).collect();
    let mut files = vec![
        ("Cargo.toml".to_string(), manifest),
        ("src/lib.rs".to_string(), lib),
        ("rows.jsonl".to_string(), ROWS.to_string()),
        ("sluice-guest/Cargo.toml".to_string(), sdk_manifest),
        ("wit/sluice.wit".to_string(), WIT.to_string()),
    ];
    files.extend(RUST_SDK.iter().map(|(path, text)| (format!("sluice-guest/{path}"), text.to_string())));
    files
}
