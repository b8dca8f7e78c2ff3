//! The client of a build without HTTP (report's `symbol-server` feature off): every download
//! fails with [`ServerError::NotBuiltIn`], so a symbol path's local stores still serve.

use std::path::{Path, PathBuf};

use super::{Client, DownloadProgress, ServerError};
use crate::symbols::store::Wanted;

impl Client {
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
