//! The module graph of one source root, read from its files: every `crate::x`, `super::x` and
//! `self::x` path a file names in code (comments, strings and `#[cfg(test)]` items aside),
//! resolved to the module it reaches. Two checks run over it: no top-level module uses one on
//! its own floor or above (nor an item of the crate root), and no two modules of one folder use
//! each other, directly or around a longer loop.

use std::path::{Path, PathBuf};

/// One source root and its layers.
pub struct Root {
    /// The source folder, relative to the repository root (`images/refguest/src`).
    pub dir: &'static str,
    /// Each top-level module and its floor (0 is the bottom). The crate root (`lib.rs`,
    /// `main.rs`) sits above every floor and is not listed.
    pub floors: &'static [(&'static str, u8)],
    /// Breaks of the rules that are known and not yet mended, exactly as the checks word them
    /// (each with the issue that mends it): the checks fail on any other, and on one of these
    /// once it is gone, so that the list only shrinks.
    pub known: &'static [&'static str],
}

/// One Rust file of a root, read and resolved.
pub struct File {
    /// The file, as found.
    pub path: PathBuf,
    /// The module it is (`scenario/objects.rs` -> `["scenario", "objects"]`, `user/mod.rs` ->
    /// `["user"]`, `main.rs` -> `[]`).
    pub module: Vec<String>,
    /// Every module path the file's code names, resolved from the crate root.
    pub uses: Vec<Vec<String>>,
    /// Child modules the file declares under `#[cfg(test)]`.
    pub test_children: Vec<String>,
    /// Names the file puts at the crate root, each with the module that owns it: what a
    /// crate-root file re-exports (`pub use error::Error` gives `Error` to `error`) and the
    /// macros a module exports (`#[macro_export] macro_rules! println` in `serial.rs`).
    pub root_names: Vec<(String, String)>,
}

/// The module a file is, from its path below the root.
pub fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    if parts.last().is_some_and(|l| l == "mod")
        || parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main")
    {
        parts.pop();
    }
    parts
}

/// `text` with comments blanked and the contents of string and character literals emptied
/// (line breaks kept, so nothing a comment or a string says counts as a use).
pub fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2])))
            && matches!(at(i + 1), '"' | '#')
        {
            // A raw string: r"..." or r#"..."#, its end the quote and as many #.
            let mut k = i + 1;
            let mut hashes = 0;
            while at(k) == '#' {
                hashes += 1;
                k += 1;
            }
            if at(k) != '"' {
                out.push(c[i]);
                i += 1;
                continue;
            }
            k += 1;
            loop {
                if k >= c.len() {
                    break;
                }
                if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
                    k += 1 + hashes;
                    break;
                }
                if c[k] == '\n' {
                    out.push('\n');
                }
                k += 1;
            }
            out.push_str("\"\"");
            i = k;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if at(i) == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('"', '\'', '\x7f'); anything else after a quote is a lifetime.
            i += 1;
            if c[i] == '\\' {
                i += 1;
            }
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// `code` (comments already gone) without its `#[cfg(test)]` items, and the names of the
/// modules among them (`#[cfg(test)] mod tests;`).
pub fn without_test_items(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let mut item = rest[at + MARK.len()..].trim_start();
        // Further attributes of the same item.
        while item.starts_with("#[") {
            let end = item.find(']').map_or(item.len(), |e| e + 1);
            item = item[end..].trim_start();
        }
        let words: Vec<&str> = item
            .split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
            .filter(|w| !w.is_empty())
            .take(4)
            .collect();
        if let Some(m) = words.iter().position(|w| *w == "mod") {
            if words[..m]
                .iter()
                .all(|w| *w == "pub" || *w == "crate" || *w == "super")
            {
                if let Some(name) = words.get(m + 1) {
                    names.push(name.to_string());
                }
            }
        }
        // The item ends at its first `;` outside braces or at the brace that closes its body.
        let mut depth = 0usize;
        let mut end = item.len();
        for (k, ch) in item.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        // Keep the line count, so that nothing else moves.
        out.extend(item[..end].chars().filter(|ch| *ch == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, names)
}

/// The paths `code` names from `crate`, `super` or `self`, each as its leading segments
/// (`use crate::{a, b::C}` gives `crate a` and `crate b C`; `super::super::x` gives
/// `super super x`), each with the offset (in chars) where it starts. A path that continues
/// another (`a::self::b`) is not one.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let c: Vec<char> = code.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if !ident(c[i]) || i > 0 && ident(c[i - 1]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < c.len() && ident(c[i]) {
            i += 1;
        }
        let word: String = c[start..i].iter().collect();
        if !matches!(word.as_str(), "crate" | "super" | "self") {
            continue;
        }
        // Not the middle of a longer path.
        let before: String = c[..start]
            .iter()
            .rev()
            .take_while(|ch| !ch.is_whitespace())
            .collect();
        if before.starts_with("::") {
            continue;
        }
        let mut k = i;
        let mut prefix = vec![word];
        let mut found = Vec::new();
        read_path(&c, &mut k, &mut prefix, &mut found);
        out.extend(found.into_iter().map(|(p, _)| (start, p)));
        i = k.max(i);
    }
    out
}

/// The inline modules of `code` (`mod name { ... }`): where each body starts and ends (in
/// chars) and its name, outer ones first.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let c: Vec<char> = code.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 < c.len() {
        let word = c[i..i + 3].iter().collect::<String>() == "mod";
        if !word || i > 0 && ident(c[i - 1]) || ident(c[i + 3]) {
            i += 1;
            continue;
        }
        let mut k = i + 3;
        while k < c.len() && c[k].is_whitespace() {
            k += 1;
        }
        let s = k;
        while k < c.len() && ident(c[k]) {
            k += 1;
        }
        let name: String = c[s..k].iter().collect();
        while k < c.len() && c[k].is_whitespace() {
            k += 1;
        }
        if name.is_empty() || c.get(k) != Some(&'{') {
            i = k.max(i + 1);
            continue;
        }
        let open = k;
        let mut depth = 0;
        while k < c.len() {
            match c[k] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        out.push((open, k, name));
        // Inner modules are found by going on from inside this one.
        i = open + 1;
    }
    out
}

/// Reads `::seg::seg` or `::{a, b::c}` after `prefix` from `c[*k..]` into `out`, each path
/// with the name it brings in (its last segment, or what follows `as`).
fn read_path(
    c: &[char],
    k: &mut usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, String)>,
) {
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let skip_ws = |k: &mut usize| {
        while *k < c.len() && c[*k].is_whitespace() {
            *k += 1;
        }
    };
    loop {
        let mut j = *k;
        skip_ws(&mut j);
        if !(c.get(j) == Some(&':') && c.get(j + 1) == Some(&':')) {
            break;
        }
        j += 2;
        skip_ws(&mut j);
        if c.get(j) == Some(&'{') {
            j += 1;
            loop {
                skip_ws(&mut j);
                if j >= c.len() || c[j] == '}' {
                    j += 1;
                    break;
                }
                if c[j] == ',' {
                    j += 1;
                    continue;
                }
                let s = j;
                while j < c.len() && ident(c[j]) {
                    j += 1;
                }
                if s == j {
                    // `*` or anything else: the group itself is used.
                    j += 1;
                    out.push((prefix.clone(), String::new()));
                    continue;
                }
                let word: String = c[s..j].iter().collect();
                let mut sub = prefix.clone();
                if word != "self" {
                    sub.push(word);
                }
                read_path(c, &mut j, &mut sub, out);
            }
            *k = j;
            return;
        }
        let s = j;
        while j < c.len() && ident(c[j]) {
            j += 1;
        }
        if s == j {
            break;
        }
        prefix.push(c[s..j].iter().collect());
        *k = j;
    }
    let mut name = prefix.last().cloned().unwrap_or_default();
    // `path as name`.
    let mut j = *k;
    skip_ws(&mut j);
    if c.get(j) == Some(&'a')
        && c.get(j + 1) == Some(&'s')
        && !c.get(j + 2).copied().is_some_and(ident)
    {
        j += 2;
        skip_ws(&mut j);
        let s = j;
        while j < c.len() && ident(c[j]) {
            j += 1;
        }
        name = c[s..j].iter().collect();
        *k = j;
    }
    out.push((prefix.clone(), name));
}

/// A path from `paths`, named in the module `module`, resolved from the crate root; `None`
/// when it climbs above the root or does not start at `crate`, `super` or `self`.
pub fn resolve(path: &[String], module: &[String]) -> Option<Vec<String>> {
    let mut here: Vec<String> = module.to_vec();
    let mut segs = path.iter().peekable();
    match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            here.clear();
            segs.next();
        }
        Some("self") => {
            segs.next();
        }
        Some("super") => {
            // In `a/b.rs` and in `a/b/mod.rs` alike (module a::b) `super` is `a`.
            while segs.peek().is_some_and(|s| *s == "super") {
                segs.next();
                here.pop()?;
            }
        }
        _ => return None,
    }
    here.extend(segs.cloned());
    Some(here)
}

/// Every `.rs` file below `dir`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One file, `rel` its path below the source root and `text` its contents.
pub fn parse(rel: &Path, text: &str) -> File {
    let module = module_of(rel);
    let (code, test_children) = without_test_items(&code_only(text));
    let inline = inline_modules(&code);
    let uses = paths(&code)
        .iter()
        .filter_map(|(at, p)| {
            // Inside `mod name { ... }`, `self` and `super` start from `name`.
            let mut here = module.clone();
            here.extend(
                inline
                    .iter()
                    .filter(|(s, e, _)| s < at && at < e)
                    .map(|(_, _, n)| n.clone()),
            );
            resolve(p, &here)
        })
        .filter(|p| !p.is_empty())
        .collect();
    let mut root_names = Vec::new();
    if let Some(own) = module.first() {
        for name in exported_macros(&code) {
            root_names.push((name, own.clone()));
        }
    } else {
        root_names = reexports(&code);
    }
    File {
        path: rel.to_path_buf(),
        module,
        uses,
        test_children,
        root_names,
    }
}

/// The names of the `#[macro_export]` macros `code` defines.
pub fn exported_macros(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[macro_export]") {
        rest = &rest[at + "#[macro_export]".len()..];
        let mut words = rest
            .split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
            .filter(|w| !w.is_empty());
        if words.next() == Some("macro_rules") {
            if let Some(name) = words.next() {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// What the crate-root file `code` imports or re-exports (every module below the root can
/// name either through `crate::`): each name (its last segment) and the first
/// segment of its path (`pub use images::{ImageCache, KERNEL_SPACE}`: both to `images`).
pub fn reexports(code: &str) -> Vec<(String, String)> {
    let c: Vec<char> = code.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = code[i..].find("use ").map(|k| i + k) {
        i = at + 4;
        // Private or public: a `use` at the crate root is visible to every module below it.
        if at > 0 && ident(code[..at].chars().last().unwrap()) {
            continue;
        }
        // `use` sits at a char boundary (ASCII), so byte and char offsets agree only for
        // ASCII text before it: count chars.
        let mut k = code[..i].chars().count();
        while k < c.len() && c[k].is_whitespace() {
            k += 1;
        }
        let s = k;
        while k < c.len() && ident(c[k]) {
            k += 1;
        }
        let mut first = vec![c[s..k].iter().collect::<String>()];
        let mut found = Vec::new();
        read_path(&c, &mut k, &mut first, &mut found);
        for (p, name) in found {
            if p.len() > 1 {
                out.push((name, p[0].clone()));
            }
        }
    }
    out
}

/// The files that are part of the build, the modules declared under `#[cfg(test)]` (and
/// every file below them) left out.
pub fn without_test_modules(files: Vec<File>) -> Vec<File> {
    let tests: Vec<Vec<String>> = files
        .iter()
        .flat_map(|f| {
            f.test_children
                .iter()
                .map(|t| [f.module.clone(), vec![t.clone()]].concat())
        })
        .collect();
    files
        .into_iter()
        .filter(|f| !tests.iter().any(|t| f.module.starts_with(t)))
        .collect()
}

/// Every file of the source folder `dir` (below the repository's top folder `repo`) that is
/// part of its build, each named by its path from `repo`.
pub fn read_root(repo: &Path, dir: &str) -> Vec<File> {
    let src = repo.join(dir);
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    // A main.rs beside a lib.rs is a crate of its own (the binary): it reaches the library by
    // its name, never by `crate::`, and its imports are not names of the library's root.
    if src.join("lib.rs").is_file() {
        paths.retain(|p| p != &src.join("main.rs"));
    }
    let files = paths
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let rel = p.strip_prefix(&src).unwrap();
            let mut f = parse(rel, &text);
            f.path = Path::new(dir).join(rel);
            f
        })
        .collect();
    without_test_modules(files)
}

impl Root {
    fn floor(&self, module: &str) -> Option<u8> {
        self.floors
            .iter()
            .find(|(m, _)| *m == module)
            .map(|(_, f)| *f)
    }

    /// Every file's use of a module on its own floor or above, or of the crate root's items,
    /// and every top-level module without a floor.
    pub fn upward_uses<'a>(&self, files: &'a [File]) -> Vec<String> {
        let names: Vec<&(String, String)> = files.iter().flat_map(|f| &f.root_names).collect();
        // A crate-root name that a module owns is a use of that module; one the root takes
        // from another crate names no module of this one.
        let owner = |name: &'a str| -> Option<&'a str> {
            match names.iter().find(|(n, _)| n == name) {
                Some((_, m)) if self.floor(m).is_some() => Some(m.as_str()),
                Some(_) => None,
                None => Some(name),
            }
        };
        let mut wrong = Vec::new();
        for f in files {
            let Some(own) = f.module.first() else {
                continue;
            };
            let Some(floor) = self.floor(own) else {
                wrong.push(format!(
                    "{}: module {own} has no floor in the table",
                    f.path.display()
                ));
                continue;
            };
            for used in &f.uses {
                let Some(to) = owner(&used[0]) else { continue };
                if to == own {
                    continue;
                }
                match self.floor(to) {
                    Some(t) if t < floor => {}
                    Some(t) => wrong.push(format!(
                        "{}: {own} (floor {floor}) uses crate::{} (floor {t})",
                        f.path.display(),
                        used.join("::")
                    )),
                    None => wrong.push(format!(
                        "{}: {own} uses crate::{}, an item of the crate root (or a module with no floor)",
                        f.path.display(),
                        used.join("::")
                    )),
                }
            }
        }
        wrong.sort();
        wrong.dedup();
        wrong
    }

    /// What [`Root::upward_uses`] and [`Root::circles`] find in this root's files, set against
    /// its known breaks: the new ones, and the known ones no longer found.
    pub fn check(&self, repo: &Path) -> (Vec<String>, Vec<String>) {
        let files = read_root(repo, self.dir);
        assert!(
            files.iter().filter(|f| !f.uses.is_empty()).count() > 1,
            "{}: no module of this root uses another: is it the right folder?",
            self.dir
        );
        let circles = Self::circles(&files)
            .into_iter()
            .map(|c| format!("{}/{c}", self.dir));
        let found: Vec<String> = self
            .upward_uses(&files)
            .into_iter()
            .chain(circles)
            .collect();
        let new = found
            .iter()
            .filter(|w| !self.known.contains(&w.as_str()))
            .cloned()
            .collect();
        let gone = self
            .known
            .iter()
            .filter(|k| !found.iter().any(|w| w == *k))
            .map(|k| k.to_string())
            .collect();
        (new, gone)
    }

    /// In every folder below the crate root, the sibling modules each sibling uses.
    pub fn sibling_edges(files: &[File], folder: &[String]) -> Vec<(String, String)> {
        let siblings: Vec<&String> = files
            .iter()
            .filter(|f| f.module.len() > folder.len() && f.module.starts_with(folder))
            .map(|f| &f.module[folder.len()])
            .collect();
        let mut edges = Vec::new();
        for f in files
            .iter()
            .filter(|f| f.module.len() > folder.len() && f.module.starts_with(folder))
        {
            let own = &f.module[folder.len()];
            for used in &f.uses {
                if used.len() > folder.len() && used.starts_with(folder) {
                    let to = &used[folder.len()];
                    if to != own && siblings.contains(&to) {
                        edges.push((own.clone(), to.clone()));
                    }
                }
            }
        }
        edges.sort();
        edges.dedup();
        edges
    }

    /// Every folder below the crate root with an import circle among its modules.
    pub fn circles(files: &[File]) -> Vec<String> {
        let mut folders: Vec<&[String]> = files
            .iter()
            .flat_map(|f| (1..f.module.len()).map(move |n| &f.module[..n]))
            .collect();
        folders.sort();
        folders.dedup();
        let mut found = Vec::new();
        for folder in folders {
            if let Some(c) = circle(&Self::sibling_edges(files, folder)) {
                found.push(format!("{}: {}", folder.join("::"), c.join(" -> ")));
            }
        }
        found
    }
}

/// A circle in `edges`, if any, as the modules along it.
pub fn circle(edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &[(String, String)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut c = path[at..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.iter().any(|d| d == n) {
            return None;
        }
        path.push(n.to_string());
        for (_, to) in edges.iter().filter(|(from, _)| from == n) {
            if let Some(c) = visit(to, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(n.to_string());
        None
    }
    let mut done = Vec::new();
    edges
        .iter()
        .find_map(|(from, _)| visit(from, edges, &mut Vec::new(), &mut done))
}

#[cfg(test)]
mod tests;
