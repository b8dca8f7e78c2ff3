//! Downloads from HTTP(S) symbol servers: `GET URL/<name>/<key>/<name>` into a store.
//!
//! A download goes to a temporary file beside its place in the store and is renamed into
//! place only once complete and checked (GUID and age of a PDB, TimeDateStamp and
//! SizeOfImage of an image): a file of another build is deleted and reported. Connecting and
//! each read are bounded by timeouts; a connection error or a 5xx answer is retried a few
//! times with growing pauses, a 404 is "not there" at once; a body over the size limit is
//! abandoned. The library prints nothing: progress goes to a [`DownloadProgress`].
//!
//! The HTTP(S) client (ureq, rustls) is built with the `symbol-server` feature, on by default;
//! without it (the fuzz targets, a reader that must not reach the network) a server in a
//! symbol path fails each lookup with [`ServerError::NotBuiltIn`] and stores still work.

use std::path::PathBuf;
use std::time::Duration;

use super::store::CheckError;

// Client::fetch: downloads, or the error of a build without them.
#[cfg(feature = "symbol-server")]
mod http;
#[cfg(not(feature = "symbol-server"))]
mod offline;

/// Timeouts, retries and limits of downloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// Resolving and connecting, each.
    pub connect_timeout: Duration,
    /// Each read of the answer (a stalled server fails after this long without a byte).
    pub read_timeout: Duration,
    /// Tries after the first on a connection error or a 5xx answer.
    pub retries: u32,
    /// The pause before the first retry; it doubles before each next one.
    pub backoff: Duration,
    /// The largest file downloaded, in bytes.
    pub max_bytes: u64,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            retries: 3,
            backoff: Duration::from_millis(500),
            max_bytes: 2 << 30,
        }
    }
}

/// An HTTP(S) client for symbol servers ([`Client::fetch`]).
#[derive(Debug)]
pub struct Client {
    #[cfg(feature = "symbol-server")]
    agent: ureq::Agent,
    options: ServerOptions,
}

impl Client {
    /// A client with these options.
    pub fn new(options: ServerOptions) -> Self {
        Client {
            #[cfg(feature = "symbol-server")]
            agent: http::agent(&options),
            options,
        }
    }

    /// The options.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }
}

/// Told how downloads progress (the binary draws a bar; the library prints nothing).
pub trait DownloadProgress {
    /// `done` bytes of `url` have arrived, of `total` when the server said how many.
    fn progress(&mut self, url: &str, done: u64, total: Option<u64>);
    /// The download of `url` ended, complete or not.
    fn finished(&mut self, url: &str);
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl DownloadProgress for NoProgress {
    fn progress(&mut self, _url: &str, _done: u64, _total: Option<u64>) {}
    fn finished(&mut self, _url: &str) {}
}

/// Why a download failed (a 404 is not a failure: the server does not have the file).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The server answered with an error status (after the retries, for a 5xx).
    #[error("{url}: HTTP status {status}")]
    Status {
        /// The URL.
        url: String,
        /// The last status.
        status: u16,
    },
    /// No connection, a timeout, or a broken transfer (after the retries).
    #[error("{url}: download failed")]
    Transport {
        /// The URL.
        url: String,
        /// The last error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The file is larger than [`ServerOptions::max_bytes`].
    #[error("{url}: larger than the limit of {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The download could not be written into the store.
    #[error("cannot write {}", .0.display())]
    Write(PathBuf, #[source] std::io::Error),
    /// The server sent another build, or not a PDB or image at all; it was deleted.
    #[error("{url}: the file downloaded was deleted")]
    Rejected {
        /// The URL.
        url: String,
        /// What was wrong with it.
        #[source]
        source: CheckError,
    },
    /// This build has no HTTP client (report's `symbol-server` feature is off).
    #[error(
        "{url}: this build of hvprof cannot download (built without the symbol-server feature)"
    )]
    NotBuiltIn {
        /// The URL.
        url: String,
    },
}
