//! Finding PDBs and images through a [`SymbolPath`]: its entries in order, copies into the
//! caches and downstream stores before the entry that found a file, downloads from servers,
//! and a record of every PDB not found.
//!
//! Each file is looked up once per [`Finder`]: a module mapped in several address spaces, or
//! a PDB that two profiles need, costs one search (and at most one download).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::path::{Entry, SymbolPath, Upstream};
use super::pdb::PdbId;
use super::server::{Client, DownloadProgress, NoProgress, ServerOptions};
use super::store::{self, Wanted};

/// A PDB that no entry of the symbol path had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPdb {
    /// The module that names it.
    pub module: String,
    /// The PDB's file name.
    pub pdb: String,
    /// Its GUID (32 hex digits, symbol-server order).
    pub guid: String,
    /// Its age.
    pub age: u32,
    /// What went wrong beyond not being there (a failed download, a file of another
    /// build), if anything.
    pub problems: Vec<String>,
}

impl std::fmt::Display for MissingPdb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} GUID {} age {}",
            self.module, self.pdb, self.guid, self.age
        )?;
        for p in &self.problems {
            write!(f, " ({p})")?;
        }
        Ok(())
    }
}

/// Looks files up through a symbol path, remembering what it found and what it did not.
pub struct Finder {
    path: SymbolPath,
    options: ServerOptions,
    client: Option<Client>,
    progress: Box<dyn DownloadProgress>,
    images: bool,
    seen: HashMap<(String, String), Option<PathBuf>>,
    missing: Vec<MissingPdb>,
}

impl std::fmt::Debug for Finder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finder")
            .field("path", &self.path)
            .field("images", &self.images)
            .field("missing", &self.missing)
            .finish_non_exhaustive()
    }
}

impl Finder {
    /// A finder searching `path`, with the default [`ServerOptions`], no progress reports,
    /// and PDBs only.
    pub fn new(path: SymbolPath) -> Self {
        Finder {
            path,
            options: ServerOptions::default(),
            client: None,
            progress: Box::new(NoProgress),
            images: false,
            seen: HashMap::new(),
            missing: Vec::new(),
        }
    }

    /// Downloads with these timeouts, retries and limit.
    pub fn with_options(mut self, options: ServerOptions) -> Self {
        self.options = options;
        self.client = None;
        self
    }

    /// Reports downloads to `progress`.
    pub fn with_progress(mut self, progress: Box<dyn DownloadProgress>) -> Self {
        self.progress = progress;
        self
    }

    /// Also looks up the images of modules found in guest memory (their code, for
    /// disassembly), not only their PDBs.
    pub fn with_images(mut self, images: bool) -> Self {
        self.images = images;
        self
    }

    /// True when images are looked up too.
    pub fn wants_images(&self) -> bool {
        self.images
    }

    /// The symbol path.
    pub fn path(&self) -> &SymbolPath {
        &self.path
    }

    /// The PDBs not found so far.
    pub fn missing(&self) -> &[MissingPdb] {
        &self.missing
    }

    /// The PDB `name` with identity `id`, which `module` names; recorded as missing when no
    /// entry has it.
    pub fn find_pdb(&mut self, module: &str, name: &str, id: &PdbId) -> Option<PathBuf> {
        let wanted = Wanted::pdb(name, id.clone());
        let slot = (wanted.name.clone(), wanted.key());
        if let Some(found) = self.seen.get(&slot) {
            return found.clone();
        }
        let (found, problems) = self.find(&wanted);
        if found.is_none() {
            log::info!("{module}: no {name} with GUID {} age {}", id.guid, id.age);
            self.missing.push(MissingPdb {
                module: module.to_string(),
                pdb: name.to_string(),
                guid: id.guid.clone(),
                age: id.age,
                problems,
            });
        }
        self.seen.insert(slot, found.clone());
        found
    }

    /// The PE image `name` with this TimeDateStamp and SizeOfImage.
    pub fn find_image(&mut self, name: &str, timestamp: u32, size: u32) -> Option<PathBuf> {
        let wanted = Wanted::image(name, timestamp, size);
        let slot = (wanted.name.clone(), wanted.key());
        if let Some(found) = self.seen.get(&slot) {
            return found.clone();
        }
        let (found, problems) = self.find(&wanted);
        for p in problems {
            log::warn!("{name}: {p}");
        }
        self.seen.insert(slot, found.clone());
        found
    }

    /// Searches every entry in order; returns the file and what went wrong on the way.
    fn find(&mut self, wanted: &Wanted) -> (Option<PathBuf>, Vec<String>) {
        if let Some(why) = wanted.refusal() {
            log::warn!("{:?}: not looked up: {why}", wanted.name);
            return (None, vec![format!("not looked up: {why}")]);
        }
        let mut caches: Vec<PathBuf> = Vec::new();
        let mut problems = Vec::new();
        let entries = self.path.entries().to_vec();
        for entry in &entries {
            let found = match entry {
                Entry::Cache(dir) => {
                    if let Some(p) = wanted.look_in(dir, false) {
                        return (Some(p), problems);
                    }
                    caches.push(dir.clone());
                    continue;
                }
                Entry::Dir(dir) => wanted.look_in(dir, true),
                Entry::Server {
                    downstream,
                    upstream,
                } => self.search_server(wanted, downstream, upstream, &mut problems),
            };
            if let Some(p) = found {
                copy_into(&p, wanted, &caches);
                return (Some(p), problems);
            }
        }
        (None, problems)
    }

    /// A `srv*` entry: its downstream stores in order, then its upstream; what is found is
    /// copied into the downstream stores before the one that had it.
    fn search_server(
        &mut self,
        wanted: &Wanted,
        downstream: &[PathBuf],
        upstream: &Upstream,
        problems: &mut Vec<String>,
    ) -> Option<PathBuf> {
        for (i, store) in downstream.iter().enumerate() {
            if let Some(p) = wanted.look_in(store, false) {
                copy_into(&p, wanted, &downstream[..i]);
                return Some(p);
            }
        }
        let (found, rest) = match upstream {
            Upstream::Store(dir) => (wanted.look_in(dir, false), downstream),
            Upstream::Http(url) => {
                let [first, rest @ ..] = downstream else {
                    return None; // the parser always gives a server a downstream store
                };
                let client = self
                    .client
                    .get_or_insert_with(|| Client::new(self.options.clone()));
                match client.fetch(url, wanted, first, self.progress.as_mut()) {
                    Ok(found) => (found, rest),
                    Err(e) => {
                        let text = crate::chain::with_causes(&e);
                        log::warn!("{text}");
                        problems.push(text);
                        (None, rest)
                    }
                }
            }
        };
        let found = found?;
        copy_into(&found, wanted, rest);
        Some(found)
    }
}

/// Copies `found` into each store that lacks it; a failure only warns.
fn copy_into(found: &Path, wanted: &Wanted, stores: &[PathBuf]) {
    for store in stores {
        let target = wanted.in_store(store);
        if target == found || target.is_file() {
            continue;
        }
        if let Err(e) = store::install(found, wanted, store) {
            log::warn!(
                "cannot copy {} into {}: {e}",
                found.display(),
                store.display()
            );
        }
    }
}

#[cfg(test)]
mod tests;
