//! Symbol paths in the syntax of `_NT_SYMBOL_PATH`, as WinDbg reads it.
//!
//! Entries are separated by `;` and searched in order (empty entries are ignored):
//!
//! | entry | what |
//! | --- | --- |
//! | `DIR` | a directory: `DIR/<name>/<key>/<name>` (symbol-server layout), then `DIR/<name>` |
//! | `srv*URL` | a symbol server, downloading into the default cache |
//! | `srv*CACHE*URL` | the same, downloading into CACHE |
//! | `srv*D1*D2*URL` | downstream stores D1, D2 searched in order, then the server; what is found is copied into every downstream store before it |
//! | `srv*STORE`, `srv*D1*STORE` | a local (or mounted UNC) store in symbol-server layout instead of a server |
//! | `srv*` | the default cache and Microsoft's public symbol server (WinDbg's `.symfix`) |
//! | `symsrv*symsrv.dll*...` | the same as `srv*...` |
//! | `cache*DIR`, `cache*` | DIR (or the default cache) is searched, and keeps a copy of what the entries to its right find |
//!
//! An empty downstream element (`srv**URL`) is the default cache:
//! `$XDG_CACHE_HOME/hvprof/symbols`, else `~/.cache/hvprof/symbols`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Microsoft's public symbol server, which `srv*` alone names.
pub const MICROSOFT_SYMBOL_SERVER: &str = "https://msdl.microsoft.com/download/symbols";

/// Where a `srv*` entry gets what its downstream stores lack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// An HTTP(S) symbol server: its base URL, without a trailing `/`.
    Http(String),
    /// A store in symbol-server layout on a file system (local or mounted).
    Store(PathBuf),
}

/// One entry of a symbol path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A plain directory: symbol-server layout, then flat.
    Dir(PathBuf),
    /// `srv*`: downstream stores searched (and filled) in order, then the upstream.
    Server {
        /// The downstream stores, in search order; what is found further on is copied into
        /// each of them.
        downstream: Vec<PathBuf>,
        /// The server or store behind them.
        upstream: Upstream,
    },
    /// `cache*DIR`: searched, and given a copy of what the entries after it find.
    Cache(PathBuf),
}

/// A parsed symbol path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolPath {
    entries: Vec<Entry>,
}

/// Why a symbol path does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// One entry is malformed.
    #[error("symbol path entry {entry:?}: {why}")]
    Entry {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An entry needs the default cache, and there is no home to put it in.
    #[error(
        "symbol path entry {0:?} needs the default cache, but neither XDG_CACHE_HOME nor HOME \
         is set: name a cache directory (srv*CACHE*URL)"
    )]
    NoDefaultCache(String),
}

/// The default cache from the environment: `$XDG_CACHE_HOME/hvprof/symbols`, else
/// `$HOME/.cache/hvprof/symbols`.
pub fn default_cache() -> Option<PathBuf> {
    default_cache_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// [`default_cache`] from given values of `XDG_CACHE_HOME` and `HOME`. A relative or empty
/// `XDG_CACHE_HOME` is ignored, as the XDG base directory specification says.
pub fn default_cache_from(xdg: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let xdg = xdg.map(PathBuf::from).filter(|p| p.is_absolute());
    let home = home
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache"));
    xdg.or(home).map(|c| c.join("hvprof").join("symbols"))
}

/// True for an element naming a server rather than a directory.
fn is_url(s: &str) -> bool {
    s.contains("://")
}

/// A server element checked: http or https with a host. The trailing `/` is dropped.
fn url(entry: &str, s: &str) -> Result<String, PathError> {
    let bad = |why| PathError::Entry {
        entry: entry.to_string(),
        why,
    };
    let lower = s.to_ascii_lowercase();
    let rest = ["http://", "https://"]
        .iter()
        .find_map(|scheme| lower.strip_prefix(scheme))
        .ok_or_else(|| bad("only http:// and https:// symbol servers are supported"))?;
    if rest.trim_start_matches('/').is_empty() || rest.starts_with('/') {
        return Err(bad("the server URL has no host"));
    }
    Ok(s.trim_end_matches('/').to_string())
}

impl SymbolPath {
    /// A path of one plain directory (what `--symbol-dir DIR` meant).
    pub fn from_dir(dir: impl Into<PathBuf>) -> Self {
        SymbolPath {
            entries: vec![Entry::Dir(dir.into())],
        }
    }

    /// The entries, in search order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// True when it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when some entry is an HTTP(S) server.
    pub fn has_server(&self) -> bool {
        self.entries.iter().any(|e| {
            matches!(
                e,
                Entry::Server {
                    upstream: Upstream::Http(_),
                    ..
                }
            )
        })
    }

    /// Parses `s`, with `default_cache` standing for an empty cache element (see
    /// [`default_cache`]; `None` makes such an element an error).
    pub fn parse(s: &str, default_cache: Option<&Path>) -> Result<Self, PathError> {
        let mut entries = Vec::new();
        for entry in s.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            entries.push(parse_entry(entry, default_cache)?);
        }
        Ok(SymbolPath { entries })
    }
}

impl FromStr for SymbolPath {
    type Err = PathError;

    /// Parses `s` with the default cache from the environment.
    fn from_str(s: &str) -> Result<Self, PathError> {
        SymbolPath::parse(s, default_cache().as_deref())
    }
}

fn parse_entry(entry: &str, default_cache: Option<&Path>) -> Result<Entry, PathError> {
    let bad = |why| PathError::Entry {
        entry: entry.to_string(),
        why,
    };
    let cache_dir = |s: &str| -> Result<PathBuf, PathError> {
        match s {
            "" => default_cache
                .map(Path::to_path_buf)
                .ok_or_else(|| PathError::NoDefaultCache(entry.to_string())),
            s if is_url(s) => Err(bad("a URL can only be the last element of srv*")),
            s => Ok(PathBuf::from(s)),
        }
    };
    let parts: Vec<&str> = entry.split('*').collect();
    let (keyword, rest) = match parts.as_slice() {
        [dir] if is_url(dir) => return Err(bad("a server needs srv* before it (srv*URL)")),
        [dir] => return Ok(Entry::Dir(PathBuf::from(dir))),
        [keyword, rest @ ..] => (keyword.to_ascii_lowercase(), rest),
        [] => return Err(bad("empty")),
    };
    let elements = match (keyword.as_str(), rest) {
        ("cache", [dir]) if is_url(dir) => return Err(bad("cache* takes a directory, not a URL")),
        ("cache", [dir]) => return Ok(Entry::Cache(cache_dir(dir)?)),
        ("cache", _) => return Err(bad("cache* takes one directory")),
        ("srv", elements) => elements,
        ("symsrv", [dll, elements @ ..]) if dll.eq_ignore_ascii_case("symsrv.dll") => elements,
        ("symsrv", _) => return Err(bad("expected symsrv*symsrv.dll*...")),
        _ => {
            return Err(bad(
                "expected a directory, srv*, symsrv*symsrv.dll* or cache*",
            ))
        }
    };
    let (last, downstream) = match elements {
        [] | [""] => (MICROSOFT_SYMBOL_SERVER, &[][..]),
        [downstream @ .., last] => (*last, downstream),
    };
    let mut downstream = downstream
        .iter()
        .map(|d| cache_dir(d))
        .collect::<Result<Vec<_>, _>>()?;
    let upstream = if is_url(last) {
        if downstream.is_empty() {
            downstream.push(cache_dir("")?);
        }
        Upstream::Http(url(entry, last)?)
    } else if last.is_empty() {
        return Err(bad(
            "the last element of srv* is empty: give a URL or a store",
        ));
    } else {
        Upstream::Store(PathBuf::from(last))
    };
    Ok(Entry::Server {
        downstream,
        upstream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CACHE: &str = "/home/u/.cache/hvprof/symbols";

    fn parse(s: &str) -> Result<Vec<Entry>, PathError> {
        SymbolPath::parse(s, Some(Path::new(CACHE))).map(|p| p.entries)
    }

    fn server(downstream: &[&str], upstream: Upstream) -> Entry {
        Entry::Server {
            downstream: downstream.iter().map(PathBuf::from).collect(),
            upstream,
        }
    }

    fn http(u: &str) -> Upstream {
        Upstream::Http(u.into())
    }

    #[test]
    fn plain_directories_and_empty_entries() {
        assert_eq!(
            parse(" /syms ;;C:\\syms;").unwrap(),
            [Entry::Dir("/syms".into()), Entry::Dir("C:\\syms".into())]
        );
        assert_eq!(parse("").unwrap(), []);
        assert!(SymbolPath::parse(";;", None).unwrap().is_empty());
        assert_eq!(
            SymbolPath::from_dir("/d").entries(),
            [Entry::Dir("/d".into())]
        );
    }

    #[test]
    fn servers_with_and_without_caches() {
        let u = "https://msdl.microsoft.com/download/symbols";
        assert_eq!(
            parse(&format!("srv*/c*{u}/")).unwrap(),
            [server(&["/c"], http(u))]
        );
        assert_eq!(
            parse(&format!("SRV*{u}")).unwrap(),
            [server(&[CACHE], http(u))]
        );
        assert_eq!(parse("srv*").unwrap(), [server(&[CACHE], http(u))]);
        assert_eq!(parse("srv").unwrap(), [Entry::Dir("srv".into())]);
        assert_eq!(
            parse("srv**http://127.0.0.1:8000").unwrap(),
            [server(&[CACHE], http("http://127.0.0.1:8000"))]
        );
        assert_eq!(
            parse("srv*/a*/b*http://h/s").unwrap(),
            [server(&["/a", "/b"], http("http://h/s"))]
        );
        assert_eq!(
            parse("symsrv*SymSrv.dll*/a*http://h").unwrap(),
            [server(&["/a"], http("http://h"))]
        );
        assert!(SymbolPath::parse("srv*http://h", None).is_err());
        assert!(SymbolPath::parse("srv*/c*http://h", None)
            .unwrap()
            .has_server());
    }

    #[test]
    fn local_stores_and_caches() {
        assert_eq!(
            parse("srv*\\\\host\\share").unwrap(),
            [server(&[], Upstream::Store("\\\\host\\share".into()))]
        );
        assert_eq!(
            parse("srv*/down*/store").unwrap(),
            [server(&["/down"], Upstream::Store("/store".into()))]
        );
        assert_eq!(
            parse("cache*/c;/d;cache*").unwrap(),
            [
                Entry::Cache("/c".into()),
                Entry::Dir("/d".into()),
                Entry::Cache(CACHE.into())
            ]
        );
        assert!(!SymbolPath::parse("srv*/a*/b", None).unwrap().has_server());
    }

    #[test]
    fn malformed_entries_are_errors_naming_them() {
        for bad in [
            "srv*http://a*/dir",
            "srv*ftp://h/x",
            "srv*http://",
            "srv*https:///x",
            "srv*/c*",
            "symsrv*other.dll*http://h",
            "symsrv*",
            "cache*/a*/b",
            "cache*http://h",
            "http://h/s",
            "foo*bar",
        ] {
            let e = parse(&format!("/ok;{bad}")).unwrap_err();
            assert!(e.to_string().contains(bad), "{bad}: {e}");
        }
        let e = SymbolPath::parse("cache*", None).unwrap_err();
        assert_eq!(e, PathError::NoDefaultCache("cache*".into()));
    }

    #[test]
    fn the_default_cache_follows_xdg_then_home() {
        let os = |s: &str| Some(OsString::from(s));
        let want = |s: &str| Some(PathBuf::from(s));
        assert_eq!(
            default_cache_from(os("/x"), os("/h")),
            want("/x/hvprof/symbols")
        );
        assert_eq!(
            default_cache_from(os("rel"), os("/h")),
            want("/h/.cache/hvprof/symbols")
        );
        assert_eq!(
            default_cache_from(None, os("/h")),
            want("/h/.cache/hvprof/symbols")
        );
        assert_eq!(default_cache_from(os(""), os("")), None);
        assert_eq!(default_cache_from(None, None), None);
    }
}
