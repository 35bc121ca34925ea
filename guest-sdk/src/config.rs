//! Plugin configuration: the `[transform.config]` table of the pipeline file, as text.

use std::str::FromStr;

use crate::Error;

/// Configuration values by key.
#[derive(Debug, Clone, Default)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    pub fn new(entries: Vec<(String, String)>) -> Self {
        Self { entries }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The value of `key`, or `default`.
    pub fn get_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// The value of `key` parsed as `T`, or `default`; a value that does not parse is an error
    /// naming the key.
    pub fn parse_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, Error> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| {
                Error::new(format!("config `{key}`: cannot parse `{v}` as {}", std::any::type_name::<T>()))
            }),
        }
    }

    /// The value of `key`, or an error saying it is required.
    pub fn require(&self, key: &str) -> Result<&str, Error> {
        self.get(key).ok_or_else(|| Error::new(format!("config `{key}` is required")))
    }

    /// Every key that is not in `known`: plugins call this to reject typos.
    pub fn reject_unknown(&self, known: &[&str]) -> Result<(), Error> {
        match self.entries.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            Some((k, _)) => Err(Error::new(format!("unknown config key `{k}` (known keys: {})", known.join(", ")))),
            None => Ok(()),
        }
    }

    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_defaults_and_errors() {
        let c = Config::new(vec![("prefix".into(), "p_".into()), ("n".into(), "x".into())]);
        assert_eq!(c.get_or("prefix", "d"), "p_");
        assert_eq!(c.get_or("other", "d"), "d");
        assert_eq!(c.parse_or("missing", 3u32).unwrap(), 3);
        assert!(c.parse_or("n", 3u32).unwrap_err().message.contains("config `n`"));
        assert!(c.reject_unknown(&["prefix"]).unwrap_err().message.contains("unknown config key `n`"));
    }
}
