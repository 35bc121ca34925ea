//! Reading a pipeline file, with errors that name the file, line and key and say what is expected.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::component::{GivenName, Kind};
use super::model::{Connection, DEFAULT_DORIS, DorisSection, Entry, PipelineFile, PipelineSection};
use super::options::{EntryResult, first_line, humane, key_of};
use super::registry::{SINKS, SOURCES, TRANSFORMS};

/// The file before each `[[source]]`, `[[transform]]`, `[[sink]]` and connection is read by its
/// `type`; the spans let errors inside those tables point at their lines.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    pipeline: PipelineSection,
    #[serde(default)]
    doris: Option<DorisSection>,
    #[serde(default)]
    connections: std::collections::BTreeMap<String, Spanned<toml::Table>>,
    #[serde(default)]
    source: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    transform: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    sink: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    dead_letter: Option<Spanned<toml::Table>>,
    #[serde(default)]
    cluster: Option<super::model::ClusterSection>,
    #[serde(default)]
    verify: Option<super::model::VerifySection>,
}

/// The sink types a `[dead_letter]` may be.
const DEAD_LETTER_TYPES: [&str; 2] = ["doris", "file"];

type EntryError<'a> = dyn FnMut(&str, &std::ops::Range<usize>, Option<String>, String) -> ConfigError + 'a;

/// Take the `type` key out of `table`: one of `types`.
fn take_type<'t>(
    table: &mut toml::Table,
    types: impl Iterator<Item = &'t str> + Clone,
) -> Result<&'t str, (Option<String>, String)> {
    let expected = types.clone().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(", ");
    match table.remove("type") {
        Some(toml::Value::String(k)) => match types.clone().find(|t| *t == k) {
            Some(t) => Ok(t),
            None => Err((Some("type".into()), format!("expected one of {expected}, got \"{k}\""))),
        },
        Some(other) => Err((Some("type".into()), format!("expected one of {expected}, got {other}"))),
        None => Err((Some("type".into()), format!("missing; expected one of {expected}"))),
    }
}

/// An entry and the span of its table in the file.
type Located<T> = (Entry<T>, std::ops::Range<usize>);

/// Read each table of an array by its `type` key, and name each entry.
fn typed_entries<T: ?Sized + GivenName>(
    entries: &[Spanned<toml::Table>],
    section: &str,
    kinds: &[Kind<T>],
    text: &str,
    error: &mut EntryError<'_>,
) -> Result<Vec<Located<T>>, ConfigError> {
    let mut out: Vec<Located<T>> = Vec::new();
    for entry in entries {
        let span = entry.span();
        let mut table = entry.get_ref().clone();
        let kind = take_type(&mut table, kinds.iter().map(|k| k.name)).map_err(|(k, m)| error(section, &span, k, m))?;
        let read = kinds.iter().find(|k| k.name == kind).expect("a known type").read;
        let config = read(table).map_err(|(key, message)| error(section, &span, key, message))?;
        let name = match config.given_name() {
            Some(n) => n.to_string(),
            None => {
                let same = out.iter().filter(|(e, _)| e.kind == kind).count();
                if same == 0 { kind.to_string() } else { format!("{kind}-{}", same + 1) }
            }
        };
        if out.iter().any(|(e, _)| e.name == name) {
            return Err(error(section, &span, Some("name".into()), format!("another [[{section}]] is named `{name}`")));
        }
        out.push((Entry { kind, name, line: line_of(text, span.start), config }, span));
    }
    Ok(out)
}

/// A mistake in a pipeline file: `pipeline.toml:14: sink.enable_2pc: expected true or false, got "yes"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The dotted key at fault, when known.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": ")?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Read and check the pipeline file at `path`.
pub fn load_file(path: &Path) -> Result<PipelineFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        line: None,
        key: None,
        message: format!("cannot read the pipeline file: {e}"),
    })?;
    load_str(path, &text)
}

/// Parse and check pipeline text; `file` is only used in messages.
pub fn load_str(file: &Path, text: &str) -> Result<PipelineFile, ConfigError> {
    load_str_with(file, text, None)
}

/// A `[connections.<name>]` table, by its `type`.
pub fn read_connection(mut t: toml::Table) -> EntryResult<Connection> {
    let kinds = super::registry::CONNECTIONS;
    let kind = take_type(&mut t, kinds.iter().map(|k| k.name))?;
    let entry = kinds.iter().find(|k| k.name == kind).expect("take_type returns a registered type");
    Ok(Arc::unwrap_or_clone((entry.read)(t)?))
}

/// [`load_str`] for a pipeline whose connections are given by a server (`sluice serve`): the
/// text may define none of its own, nor set its state dir (a `[cluster]` is checked against the
/// tenant's grants instead).
pub fn load_str_with(
    file: &Path,
    text: &str,
    server: Option<&std::collections::BTreeMap<String, Connection>>,
) -> Result<PipelineFile, ConfigError> {
    let error = |line: Option<usize>, key: Option<String>, message: String| ConfigError {
        file: file.to_path_buf(),
        line,
        key,
        message,
    };
    let deserializer = toml::Deserializer::parse(text)
        .map_err(|e| error(e.span().map(|s| line_of(text, s.start)), None, first_line(e.message()).to_string()))?;
    let raw: RawFile = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = key_of(e.path());
        let inner = e.into_inner();
        let line = inner.span().map(|s| line_of(text, s.start));
        error(line, key, humane(first_line(inner.message())))
    })?;
    let mut entry_error = |section: &str, span: &std::ops::Range<usize>, key: Option<String>, message: String| {
        let full_key = match &key {
            Some(k) => format!("{section}.{k}"),
            None => section.to_string(),
        };
        let line = key
            .as_deref()
            .and_then(|k| find_key_line(table_text(text, span.start), k))
            .map(|l| l + line_of(text, span.start) - 1)
            .unwrap_or_else(|| line_of(text, span.start));
        error(Some(line), Some(full_key), message)
    };
    let mut connections = std::collections::BTreeMap::new();
    if let Some(granted) = server {
        let names = granted.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        let own = if raw.doris.is_some() { Some("doris".to_string()) } else { None }
            .or_else(|| raw.connections.keys().next().map(|k| format!("connections.{k}")));
        if let Some(key) = own {
            return Err(error(
                find_key_line(text, &key),
                Some(key),
                format!(
                    "connections are the server's: remove this section and name one you are granted with `connection = \"…\"` ({names})"
                ),
            ));
        }
        if raw.pipeline.state_dir.is_some() {
            let key = "pipeline.state_dir".to_string();
            return Err(error(
                find_key_line(text, &key),
                Some(key),
                "the server keeps the state of its pipelines; remove this key".into(),
            ));
        }
        connections.extend(granted.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let base = file.parent().unwrap_or(Path::new(""));
    if let Some(mut d) = raw.doris {
        d.resolve_paths(base);
        connections.insert(DEFAULT_DORIS.to_string(), Connection::Doris(d));
    }
    for (name, table) in &raw.connections {
        let section = format!("connections.{name}");
        let span = table.span();
        let mut conn = read_connection(table.get_ref().clone()).map_err(|(k, m)| entry_error(&section, &span, k, m))?;
        if let Connection::Doris(d) = &mut conn {
            d.resolve_paths(base);
        }
        if name == DEFAULT_DORIS && connections.contains_key(DEFAULT_DORIS) {
            return Err(entry_error(
                &section,
                &span,
                None,
                "[doris] already defines the connection `doris`; rename one".into(),
            ));
        }
        connections.insert(name.clone(), conn);
    }
    let source = typed_entries(&raw.source, "source", SOURCES, text, &mut entry_error)?;
    let transform = typed_entries(&raw.transform, "transform", TRANSFORMS, text, &mut entry_error)?;
    let sink = typed_entries(&raw.sink, "sink", SINKS, text, &mut entry_error)?;
    let dead_letter_kinds: Vec<Kind<_>> = SINKS
        .iter()
        .filter(|k| DEAD_LETTER_TYPES.contains(&k.name))
        .map(|k| Kind { name: k.name, read: k.read })
        .collect();
    let dead_letter =
        match typed_entries(raw.dead_letter.as_slice(), "dead_letter", &dead_letter_kinds, text, &mut entry_error)?
            .pop()
        {
            Some((mut entry, span)) => {
                // Its name is its key in checkpoints.
                entry.name = "dead_letter".into();
                if sink.iter().any(|(s, _)| s.name == entry.name) {
                    return Err(entry_error(
                        "dead_letter",
                        &span,
                        None,
                        "a [[sink]] is named `dead_letter` too; rename it".into(),
                    ));
                }
                Some((entry, span))
            }
            None => None,
        };
    let spans: Vec<(&str, std::ops::Range<usize>)> = source
        .iter()
        .map(|(_, s)| ("source", s.clone()))
        .chain(transform.iter().map(|(_, s)| ("transform", s.clone())))
        .chain(sink.iter().map(|(_, s)| ("sink", s.clone())))
        .chain(dead_letter.iter().map(|(_, s)| ("dead_letter", s.clone())))
        .collect();
    let parsed = PipelineFile {
        pipeline: raw.pipeline,
        connections,
        source: source.into_iter().map(|(e, _)| e).collect(),
        transform: transform.into_iter().map(|(e, _)| e).collect(),
        sink: sink.into_iter().map(|(e, _)| e).collect(),
        dead_letter: dead_letter.map(|(e, _)| e),
        cluster: raw.cluster,
        verify: raw.verify,
    };
    validate(&parsed).map_err(|(key, message)| error(find_key_line(text, &key), Some(key), message))?;
    let checks = parsed
        .source
        .iter()
        .map(|e| e.config.validate(&parsed))
        .chain(parsed.transform.iter().map(|e| e.config.validate(&parsed)))
        .chain(parsed.sink.iter().map(|e| e.config.validate(&parsed)))
        .chain(parsed.dead_letter.iter().map(|e| e.config.validate(&parsed)));
    for (check, (section, span)) in checks.zip(&spans) {
        let Err((key, message)) = check else { continue };
        // A key of the entry's own table is looked for there; another (`doris.jdbc_url`) in the file.
        // A dead-letter target is a sink: its keys are the sink's.
        let own = key.strip_prefix(&format!("{section}.")).or_else(|| match *section {
            "dead_letter" => key.strip_prefix("sink."),
            _ => None,
        });
        match own {
            Some(own) => return Err(entry_error(section, span, Some(own.to_string()), message)),
            None => return Err(error(find_key_line(text, &key), Some(key), message)),
        }
    }
    Ok(parsed)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

/// The text of the table whose header starts at `start`: up to the next `[` header.
fn table_text(text: &str, start: usize) -> &str {
    let rest = &text[start.min(text.len())..];
    let body = rest.find('\n').map_or(rest.len(), |i| i + 1);
    let end = rest[body..].find("\n[").map_or(rest.len(), |i| body + i + 1);
    &rest[..end]
}

/// The line where `key` is assigned: a line whose dotted key is a tail of `key` (`max_rows = …`,
/// `buffer_flush.max_rows = …`), else one that assigns a part of it (`fields.age = { min = 1 }`).
fn find_key_line(text: &str, key: &str) -> Option<usize> {
    let segments: Vec<&str> = key.split('.').collect();
    let assigned = |l: &str| -> Option<String> {
        let (k, _) = l.split_once('=')?;
        let k = k.trim();
        (!k.starts_with('[') && !k.is_empty()).then(|| k.replace(['"', ' '], ""))
    };
    let is_tail = |k: &str| (0..segments.len()).any(|i| segments[i..].join(".") == k);
    let is_part =
        |k: &str| (0..segments.len()).any(|i| (i + 1..=segments.len()).any(|j| segments[i..j].join(".") == k));
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .position(|l| assigned(l).is_some_and(|k| is_tail(&k)))
        .or_else(|| lines.iter().position(|l| assigned(l).is_some_and(|k| is_part(&k))))
        // A key that is missing: the section it belongs in.
        .or_else(|| {
            let (one, many) = (format!("[{}]", segments[0]), format!("[[{}]]", segments[0]));
            lines.iter().position(|l| l.trim() == one || l.trim() == many)
        })
        .map(|i| i + 1)
}

/// Checks of the file as a whole that serde cannot express (each component checks its own
/// options). Returns the key at fault and what is wrong.
fn validate(p: &PipelineFile) -> Result<(), (String, String)> {
    let name = &p.pipeline.name;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(("pipeline.name".into(), format!("{name:?} must be letters, digits, `-` or `_`")));
    }
    if p.pipeline.parallelism == 0 {
        return Err(("pipeline.parallelism".into(), "must be at least 1".into()));
    }
    if p.pipeline.checkpoint_interval.0 < std::time::Duration::from_millis(100) {
        return Err(("pipeline.checkpoint_interval".into(), "must be at least 100ms".into()));
    }
    if p.pipeline.checkpoint_timeout.0 < std::time::Duration::from_millis(100) {
        return Err(("pipeline.checkpoint_timeout".into(), "must be at least 100ms".into()));
    }
    if p.source.is_empty() {
        return Err(("source".into(), "a pipeline needs at least one [[source]]".into()));
    }
    if p.source.len() > 1 {
        return Err(("source".into(), format!("a pipeline reads one [[source]] (found {})", p.source.len())));
    }
    if p.sink.is_empty() {
        return Err(("sink".into(), "a pipeline needs at least one [[sink]]".into()));
    }
    if let Some(c) = &p.cluster {
        validate_cluster(c, p)?;
    }
    if let Some(v) = &p.verify {
        if v.every.0 < std::time::Duration::from_secs(1) {
            return Err(("verify.every".into(), "must be at least 1s".into()));
        }
        if let Some(why) = crate::verify::not_a_mirror(p) {
            return Err(("verify".into(), why));
        }
    }
    let mut embedded = 0;
    for (name, c) in &p.connections {
        let Connection::Doris(d) = c else { continue };
        let key = if name == DEFAULT_DORIS { "doris".to_string() } else { format!("connections.{name}") };
        validate_doris(d).map_err(|(k, m)| (format!("{key}.{}", k.trim_start_matches("doris.")), m))?;
        if d.fenodes.is_embedded() {
            embedded += 1;
            if embedded > 1 {
                return Err((format!("{key}.fenodes"), "only one Doris connection can be \"embedded\"".into()));
            }
        }
    }
    Ok(())
}

fn validate_cluster(c: &super::model::ClusterSection, p: &PipelineFile) -> Result<(), (String, String)> {
    if let Some(url) = &c.etcd {
        sluice_cluster::parse_etcd_url(url).map_err(|e| ("cluster.etcd".into(), e.to_string()))?;
    }
    let scheme = c.store.split_once("://").map(|(s, _)| s);
    if !matches!(scheme, Some("s3" | "file")) {
        return Err((
            "cluster.store".into(),
            format!("{:?}: write s3://bucket/prefix, or file:///dir for a directory every process shares", c.store),
        ));
    }
    if c.lease_ttl.0 < std::time::Duration::from_secs(2) {
        return Err(("cluster.lease_ttl".into(), "must be at least 2s".into()));
    }
    if c.capacity == 0 {
        return Err(("cluster.capacity".into(), "must be at least 1".into()));
    }
    if let Some(member) = &c.member
        && (member.is_empty() || member.contains('/'))
    {
        return Err(("cluster.member".into(), format!("{member:?} must be a non-empty name without `/`")));
    }
    for (name, conn) in &p.connections {
        if let Connection::Doris(d) = conn
            && d.fenodes.is_embedded()
        {
            let key =
                if name == DEFAULT_DORIS { "doris.fenodes".to_string() } else { format!("connections.{name}.fenodes") };
            return Err((
                key,
                "a clustered pipeline writes to a Doris every one of its processes reaches; \"embedded\" is one process's own — give the FE addresses".into(),
            ));
        }
    }
    Ok(())
}

fn validate_doris(d: &DorisSection) -> Result<(), (String, String)> {
    if !d.fenodes.is_embedded() {
        let addrs = d.fenodes.addresses();
        if addrs.is_empty() {
            return Err((
                "doris.fenodes".into(),
                "expected \"embedded\" or FE addresses such as [\"127.0.0.1:8030\"]".into(),
            ));
        }
        for a in addrs.iter().chain(&d.benodes) {
            let ok = a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(("doris.fenodes".into(), format!("expected host:port, got {a:?}")));
            }
        }
    }
    if d.init_sql.is_some() && !d.fenodes.is_embedded() {
        return Err((
            "doris.init_sql".into(),
            "only runs on the embedded doris-lite (`fenodes = \"embedded\"`); create tables in your Doris instead"
                .into(),
        ));
    }
    if d.password.is_some() && d.password_env.is_some() {
        return Err(("doris.password_env".into(), "set either `password` or `password_env`, not both".into()));
    }
    if let Some(url) = &d.jdbc_url
        && !url.starts_with("jdbc:mysql://")
    {
        return Err(("doris.jdbc_url".into(), format!("expected jdbc:mysql://host:port, got {url:?}")));
    }
    validate_tls(d)
}

fn validate_tls(d: &DorisSection) -> Result<(), (String, String)> {
    if !d.enable_tls {
        let set = [
            ("tls_ca_certificate_path", d.tls_ca_certificate_path.is_some()),
            ("tls_client_certificate_path", d.tls_client_certificate_path.is_some()),
            ("tls_client_key_path", d.tls_client_key_path.is_some()),
            ("tls_skip_hostname_verification", d.tls_skip_hostname_verification),
            ("tls_excluded_protocols", !d.tls_excluded_protocols.is_empty()),
        ];
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err((format!("doris.{key}"), "TLS is off: set `enable_tls = true` too, or remove this key".into()));
        }
        return Ok(());
    }
    if d.fenodes.is_embedded() {
        return Err((
            "doris.enable_tls".into(),
            "the embedded doris-lite serves plain HTTP; run `doris-lite --tls-cert … --tls-key …` and name its FE in `fenodes`".into(),
        ));
    }
    match (&d.tls_client_certificate_path, &d.tls_client_key_path) {
        (Some(_), None) => {
            return Err(("doris.tls_client_key_path".into(), "a client certificate needs its private key".into()));
        }
        (None, Some(_)) => {
            return Err(("doris.tls_client_certificate_path".into(), "a client key needs its certificate".into()));
        }
        _ => {}
    }
    if let Some(p) = d.tls_excluded_protocols.iter().find(|p| !matches!(p.as_str(), "http" | "arrowflight" | "mysql")) {
        return Err((
            "doris.tls_excluded_protocols".into(),
            format!(
                "{p:?} is not a protocol Sluice speaks to Doris over TLS; expected `http`, `mysql` or `arrowflight`"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[pipeline]
name = "student-trans"
checkpoint_interval = "1s"

[doris]
fenodes = ["127.0.0.1:8030"]
password_env = "DORIS_PW"

[[source]]
type = "datagen"
schema = "id BIGINT, name VARCHAR(64), age INT"
number_of_rows = 100
fields.id.kind = "sequence"
fields.age = { min = 1, max = 99 }

[[transform]]
type = "wasm"
plugin = "../plugins/student-trans"
config.prefix = "p_"
limits.timeout = "1s"

[[sink]]
type = "doris"
table = "test.student_trans"
buffer_flush.max_rows = 1000
properties.format = "json"
"#;

    fn err(text: &str) -> String {
        load_str(Path::new("pipeline.toml"), text).unwrap_err().to_string()
    }

    const CHANGELOG: &str = r#"[pipeline]
name = "c"

[doris]
fenodes = ["127.0.0.1:8030"]

[[source]]
type = "doris"
table = "test.student"
scan.mode = "initial"

[[sink]]
type = "doris"
table = "test.mirror"
"#;

    #[test]
    fn changelog_options_are_checked_naming_the_key() {
        assert!(load_str(Path::new("pipeline.toml"), CHANGELOG).is_ok());
        let with = |extra: &str| {
            err(&CHANGELOG.replace("scan.mode = \"initial\"", &format!("scan.mode = \"initial\"\n{extra}")))
        };
        let negative = with("changelog.visible_wait_timeout = \"-1s\"");
        assert!(negative.starts_with("pipeline.toml:11: source.changelog.visible_wait_timeout: "), "{negative}");
        let fast = with("changelog.poll_interval = \"500ms\"");
        assert!(fast.ends_with("source.changelog.poll_interval: must be at least 1s"), "{fast}");
        let kind = with("changelog.increment_type = \"full\"");
        assert!(kind.starts_with("pipeline.toml:11: source.changelog.increment_type: "), "{kind}");
        assert!(kind.contains("min_delta"), "{kind}");
        let no_key = with("dedup = true");
        assert!(no_key.ends_with("source.dedup: needs the table's primary key: add `primary_key = \"id\"` (comma separated for several columns)"), "{no_key}");
        let snapshot = err(&CHANGELOG.replace("scan.mode = \"initial\"", "primary_key = \"id\"\ndedup = true"));
        assert!(snapshot.contains("source.dedup: normalises change events; a `snapshot` scan has none"), "{snapshot}");
        let ts = with("scan.timestamp = \"yesterday\"");
        assert!(ts.ends_with("source.scan.timestamp: expected \"yyyy-MM-dd HH:mm:ss\", got \"yesterday\""), "{ts}");
    }

    const LOOKUP: &str = r#"
[[transform]]
type = "lookup"
table = "dim.dim_city"
keys = ["city"]
cache.max_rows = 100000
cache.ttl = "300s"
"#;

    #[test]
    fn a_lookup_reads_with_the_connectors_defaults() {
        let text = GOOD.replace("password_env", "jdbc_url = \"jdbc:mysql://127.0.0.1:9030\"\npassword_env") + LOOKUP;
        let p = load_str(Path::new("pipeline.toml"), &text).unwrap();
        let l: &crate::transforms::lookup::LookupTransform = p.transform[1].config.as_any().downcast_ref().unwrap();
        assert_eq!((l.cache.max_rows, l.cache.ttl.0.as_secs(), l.max_retries), (100000, 300, 1));
        assert_eq!((l.jdbc.read.batch.size, l.jdbc.read.batch.queue_size, l.jdbc.read.thread_size), (128, 256, 3));
        assert!(l.jdbc.is_async && l.cache.cache_missing_key && l.join == crate::transforms::lookup::JoinKind::Left);

        let no_url = GOOD.to_string() + LOOKUP;
        assert!(
            err(&no_url).starts_with("pipeline.toml:6: doris.jdbc_url: a lookup reads its table over MySQL"),
            "{}",
            err(&no_url)
        );
        // The embedded doris-lite's query port stands in for `jdbc_url`.
        let embedded = no_url.replace("fenodes = [\"127.0.0.1:8030\"]", "fenodes = \"embedded\"");
        assert!(load_str(Path::new("pipeline.toml"), &embedded).is_ok(), "{}", err(&embedded));
        let typo = text.replace("cache.ttl", "cache.tll");
        assert!(err(&typo).starts_with("pipeline.toml:35: transform.cache.tll: unknown key `tll`"), "{}", err(&typo));
        let zero = text.replace("cache.max_rows = 100000", "jdbc.read.batch.size = 0");
        assert_eq!(err(&zero), "pipeline.toml:34: transform.jdbc.read.batch.size: must be at least 1");
    }

    #[test]
    fn a_good_file_loads_with_defaults() {
        let p = load_str(Path::new("pipeline.toml"), GOOD).unwrap();
        assert_eq!(p.pipeline.parallelism, 1);
        assert_eq!(p.pipeline.checkpoint_interval, super::super::Duration::from_secs(1));
        assert_eq!(p.pipeline.checkpoint_timeout, super::super::Duration::from_secs(600));
        let sink: &crate::sinks::doris::DorisSink = p.sink[0].config.as_any().downcast_ref().unwrap();
        assert!(sink.enable_2pc && sink.enable_delete && sink.ignore.update_before);
        assert_eq!(sink.buffer_flush.max_rows, 1000);
        assert_eq!(sink.buffer_size.0, 1024 * 1024);
        let w: &crate::transforms::wasm::WasmTransform = p.transform[0].config.as_any().downcast_ref().unwrap();
        assert_eq!(w.limits.timeout, std::time::Duration::from_secs(1));
        assert_eq!(w.limits.memory, 256 * 1024 * 1024);
        let (_, doris) = p.doris(None).unwrap();
        assert_eq!(doris.request_retries, 3);
        assert!(doris.auto_redirect);
    }

    #[test]
    fn a_dead_letter_target_is_a_file_or_a_doris_table_named_by_its_section() {
        let with = |section: &str| format!("{GOOD}\n{section}");
        let p = load_str(Path::new("pipeline.toml"), &with("[dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n"))
            .unwrap();
        let d = p.dead_letter.expect("read");
        assert_eq!((d.kind, d.name.as_str()), ("file", "dead_letter"));
        let e = err(&with("[dead_letter]\ntype = \"blackhole\"\n"));
        assert!(e.ends_with("dead_letter.type: expected one of \"doris\", \"file\", got \"blackhole\""), "{e}");
        let e = err(&with("[dead_letter]\ntype = \"file\"\n"));
        assert!(e.ends_with("dead_letter: missing required key `path`"), "{e}");
        let e = err(&with("[dead_letter]\ntype = \"doris\"\ntable = \"nodb\"\n"));
        assert!(e.contains("dead_letter.table: expected `db.table`, got \"nodb\""), "{e}");
    }

    #[test]
    fn a_verify_section_is_read_and_its_mistakes_are_named() {
        let without_transform = GOOD.replace("[[transform]]\ntype = \"wasm\"\nplugin = \"../plugins/student-trans\"\nconfig.prefix = \"p_\"\nlimits.timeout = \"1s\"\n", "");
        let with = |section: &str| format!("{without_transform}\n{section}");
        let p = load_str(Path::new("pipeline.toml"), &with("[verify]\nevery = \"1h\"\n")).unwrap();
        let v = p.verify.expect("read");
        assert_eq!((v.every.0, v.samples, v.rate), (std::time::Duration::from_secs(3600), 10, None));
        assert_eq!(err(&with("[verify]\nevery = \"10ms\"\n")), "pipeline.toml:25: verify.every: must be at least 1s");
        let e = err(&with("[verify]\nevery = \"1h\"\nsample = 3\n"));
        assert_eq!(
            e,
            "pipeline.toml:26: verify.sample: unknown key `sample`, expected one of `every`, `samples`, `rate`"
        );
        let e = err(&format!("{GOOD}\n[verify]\nevery = \"1h\"\n"));
        assert!(
            e.starts_with("pipeline.toml:29: verify: transforms wasm change the rows between source and Doris"),
            "{e}"
        );
    }

    #[test]
    fn a_cluster_section_is_read_and_its_mistakes_are_named() {
        let with = |section: &str| format!("{GOOD}\n{section}");
        let p = load_str(
            Path::new("pipeline.toml"),
            &with("[cluster]\netcd = \"etcd://10.0.0.1:2379,10.0.0.2:2379\"\nstore = \"s3://state/p\"\n"),
        )
        .unwrap();
        let c = p.cluster.expect("read");
        assert_eq!(
            (c.store.as_str(), c.lease_ttl.0, c.member),
            ("s3://state/p", std::time::Duration::from_secs(10), None)
        );
        let e = err(&with("[cluster]\nstore = \"ftp://state/p\"\n"));
        assert!(e.starts_with("pipeline.toml:30: cluster.store: \"ftp://state/p\": write s3://bucket/prefix"), "{e}");
        let e = err(&with("[cluster]\netcd = \"etcd://10.0.0.1\"\nstore = \"s3://state/p\"\n"));
        assert!(
            e.starts_with("pipeline.toml:30: cluster.etcd: cluster address `etcd://10.0.0.1`: `10.0.0.1` needs a port"),
            "{e}"
        );
        let e = err(&with("[cluster]\nstore = \"s3://state/p\"\nlease_ttl = \"1s\"\n"));
        assert_eq!(e, "pipeline.toml:31: cluster.lease_ttl: must be at least 2s");
        let e = err(&with("[cluster]\nstore = \"s3://state/p\"\ncapacity = 0\n"));
        assert_eq!(e, "pipeline.toml:31: cluster.capacity: must be at least 1");
        let embedded = with("[cluster]\nstore = \"s3://state/p\"\n")
            .replace("fenodes = [\"127.0.0.1:8030\"]", "fenodes = \"embedded\"");
        let e = err(&embedded);
        assert!(e.starts_with("pipeline.toml:7: doris.fenodes: a clustered pipeline writes to a Doris every one of its processes reaches"), "{e}");
        let e = err(&with("[cluster]\nstore = \"s3://state/p\"\nmembers = 3\n"));
        assert!(e.contains("cluster.members: unknown key `members`"), "{e}");
    }

    #[test]
    fn mistakes_name_file_line_and_key() {
        let bad_bool = GOOD.replace("properties.format = \"json\"", "enable_2pc = \"yes\"");
        assert_eq!(err(&bad_bool), "pipeline.toml:27: sink.enable_2pc: expected true or false, got \"yes\"");

        let typo = GOOD.replace("buffer_flush.max_rows = 1000", "buffer_flush.max_row = 1000");
        let e = err(&typo);
        assert!(
            e.starts_with(
                "pipeline.toml:26: sink.buffer_flush.max_row: unknown key `max_row`, expected one of `max_rows`"
            ),
            "{e}"
        );

        let tight =
            GOOD.replace("checkpoint_interval = \"1s\"", "checkpoint_interval = \"1s\"\ncheckpoint_timeout = \"0s\"");
        assert_eq!(err(&tight), "pipeline.toml:5: pipeline.checkpoint_timeout: must be at least 100ms");
        let bad_duration = GOOD.replace("checkpoint_interval = \"1s\"", "checkpoint_interval = \"often\"");
        assert_eq!(
            err(&bad_duration),
            "pipeline.toml:4: pipeline.checkpoint_interval: expected a duration such as \"10s\" or \"500ms\", got \"often\""
        );

        let bad_type = GOOD.replace("type = \"datagen\"", "type = \"mongodb\"");
        assert_eq!(
            err(&bad_type),
            "pipeline.toml:11: source.type: expected one of \"datagen\", \"file\", \"doris\", \"mysql\", \"postgres\", \"kafka\", got \"mongodb\""
        );

        let bad_schema = GOOD.replace("age INT\"", "age INTEGRAL\"");
        assert!(
            err(&bad_schema)
                .starts_with("pipeline.toml:12: source.schema: column `age`: unknown Doris type `INTEGRAL`")
        );

        let bad_table = GOOD.replace("table = \"test.student_trans\"", "table = \"student_trans\"");
        assert_eq!(err(&bad_table), "pipeline.toml:25: sink.table: expected `db.table`, got \"student_trans\"");

        let no_doris = GOOD.replace("[doris]\nfenodes = [\"127.0.0.1:8030\"]\npassword_env = \"DORIS_PW\"\n", "");
        assert_eq!(
            err(&no_doris),
            "pipeline.toml:20: sink: needs a Doris connection: add a [doris] section with `fenodes`"
        );

        let bad_field = GOOD.replace("fields.age", "fields.agee");
        assert!(err(&bad_field).contains("source.fields.agee: `agee` is not a column of the source schema"));

        let syntax = GOOD.replace("name = \"student-trans\"", "name = student-trans");
        assert!(err(&syntax).starts_with("pipeline.toml:3: "), "{}", err(&syntax));
    }
}
