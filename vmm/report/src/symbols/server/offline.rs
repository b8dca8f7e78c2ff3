//! The client of a build without HTTP (report's `symbol-server` feature off): every download
//! fails with [`ServerError::NotBuiltIn`], so a symbol path's local stores still serve.

use std::path::{Path, PathBuf};

use super::{DownloadProgress, ServerError, ServerOptions};
use crate::symbols::store::Wanted;

/// A symbol-server client that cannot download.
#[derive(Debug)]
pub struct Client {
    options: ServerOptions,
}

impl Client {
    /// A client with these options.
    pub fn new(options: ServerOptions) -> Self {
        Client { options }
    }

    /// The options.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Fails: this build has no HTTP client.
    pub fn fetch(
        &self,
        base: &str,
        wanted: &Wanted,
        _store: &Path,
        _progress: &mut dyn DownloadProgress,
    ) -> Result<Option<PathBuf>, ServerError> {
        Err(ServerError::NotBuiltIn {
            url: format!("{base}/{}", wanted.url_path()),
        })
    }
}
