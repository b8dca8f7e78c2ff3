//! The HTTP(S) client for symbol servers (ureq with rustls): retries, limits, and a
//! download staged beside its place in the store and renamed in once checked.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::{Client, DownloadProgress, ServerError, ServerOptions};
use crate::symbols::store::Wanted;

/// How one try ended.
enum Try {
    Saved(PathBuf),
    NotFound,
    /// Worth another try (connection error, 5xx, broken transfer).
    Again(ServerError),
    Failed(ServerError),
}

/// The agent every download of a [`Client`] goes through.
pub(super) fn agent(options: &ServerOptions) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_resolve(Some(options.connect_timeout))
        .timeout_connect(Some(options.connect_timeout))
        .timeout_per_read(Some(options.read_timeout))
        .http_status_as_error(false)
        .user_agent(concat!("hvprof/", env!("CARGO_PKG_VERSION")))
        .build();
    ureq::Agent::new_with_config(config)
}

impl Client {
    /// Downloads `wanted` from the server at `base` (a URL without a trailing `/`) into
    /// `store` in symbol-server layout. `Ok(None)` when the server does not have it (404).
    pub fn fetch(
        &self,
        base: &str,
        wanted: &Wanted,
        store: &Path,
        progress: &mut dyn DownloadProgress,
    ) -> Result<Option<PathBuf>, ServerError> {
        let url = format!("{base}/{}", wanted.url_path());
        let mut pause = self.options.backoff;
        let mut tries_left = self.options.retries;
        loop {
            let outcome = self.try_once(&url, wanted, store, progress);
            progress.finished(&url);
            match outcome {
                Try::Saved(path) => return Ok(Some(path)),
                Try::NotFound => return Ok(None),
                Try::Failed(e) => return Err(e),
                Try::Again(e) if tries_left == 0 => return Err(e),
                Try::Again(e) => {
                    log::info!("{e}; trying again in {pause:?}");
                    std::thread::sleep(pause);
                    pause = pause.saturating_mul(2);
                    tries_left -= 1;
                }
            }
        }
    }

    fn try_once(
        &self,
        url: &str,
        wanted: &Wanted,
        store: &Path,
        progress: &mut dyn DownloadProgress,
    ) -> Try {
        let transport = |source: ureq::Error| ServerError::Transport {
            url: url.to_string(),
            source: Box::new(source),
        };
        let response = match self.agent.get(url).call() {
            Ok(r) => r,
            Err(e) => return Try::Again(transport(e)),
        };
        let status = response.status().as_u16();
        let failed = ServerError::Status {
            url: url.to_string(),
            status,
        };
        match status {
            200 => {}
            404 => return Try::NotFound,
            500..=599 => return Try::Again(failed),
            _ => return Try::Failed(failed),
        }
        let limit = self.options.max_bytes;
        let too_large = || {
            Try::Failed(ServerError::TooLarge {
                url: url.to_string(),
                limit,
            })
        };
        let total = response.body().content_length();
        if total.is_some_and(|n| n > limit) {
            return too_large();
        }
        let target = wanted.in_store(store);
        if let Some(Err(e)) = target.parent().map(std::fs::create_dir_all) {
            return Try::Failed(ServerError::Write(target, e));
        }
        let body = response.into_body().into_reader();
        let saved = files::atomic::stage(&target, files::atomic::Naming::InDir, |w| {
            save(body, w, &target, limit, |done| {
                progress.progress(url, done, total)
            })
        });
        // An uncommitted temporary is removed when dropped.
        match saved {
            // A device or FIFO at the store's path was written through: nothing to check
            // or keep.
            Ok(staged) if staged.temp_path().is_none() => Try::Failed(ServerError::Write(
                target,
                std::io::Error::other("not a regular file in the symbol store"),
            )),
            Ok(staged) => match wanted.check(staged.temp_path().unwrap_or(&target)) {
                Ok(()) => match staged.commit() {
                    Ok(path) => Try::Saved(path),
                    Err(e) => Try::Failed(ServerError::Write(target, e.into_io())),
                },
                Err(source) => Try::Failed(ServerError::Rejected {
                    url: url.to_string(),
                    source,
                }),
            },
            Err(Saving::TooLarge) => too_large(),
            Err(Saving::Read(e)) => Try::Again(transport(ureq::Error::Io(e))),
            Err(Saving::Write(e)) => Try::Failed(ServerError::Write(target, e)),
        }
    }
}

enum Saving {
    TooLarge,
    Read(std::io::Error),
    Write(std::io::Error),
}

impl From<std::io::Error> for Saving {
    fn from(e: std::io::Error) -> Self {
        Saving::Write(e)
    }
}

impl From<files::atomic::WriteError> for Saving {
    fn from(e: files::atomic::WriteError) -> Self {
        Saving::Write(e.into_io())
    }
}

/// Copies `body` into `file` (for `path`), at most `limit` bytes, telling `progress`.
fn save(
    mut body: impl Read,
    file: &mut impl Write,
    path: &Path,
    limit: u64,
    mut progress: impl FnMut(u64),
) -> Result<(), Saving> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut done = 0u64;
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Saving::Read(e)),
        };
        done = done.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        if done > limit {
            return Err(Saving::TooLarge);
        }
        file.write_all(&buf[..n]).map_err(Saving::Write)?;
        progress(done);
    }
    log::debug!("{}: {done} bytes", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::symbols::pdb::PdbId;
    use crate::symbols::server::NoProgress;
    use crate::symbols::testdata::{fake_pdb, temp_dir, Loopback};

    fn id() -> PdbId {
        PdbId {
            guid: "00112233445566778899AABBCCDDEEFF".into(),
            age: 1,
        }
    }

    fn client(retries: u32, max_bytes: u64) -> Client {
        Client::new(ServerOptions {
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(2),
            retries,
            backoff: Duration::from_millis(5),
            max_bytes,
        })
    }

    #[derive(Default)]
    struct Seen {
        progress: Vec<(u64, Option<u64>)>,
        finished: usize,
    }

    impl DownloadProgress for Seen {
        fn progress(&mut self, _url: &str, done: u64, total: Option<u64>) {
            self.progress.push((done, total));
        }
        fn finished(&mut self, _url: &str) {
            self.finished += 1;
        }
    }

    #[test]
    fn a_500_is_retried_and_the_200_after_it_saved() {
        let d = temp_dir("server-retry");
        let body = fake_pdb(&id());
        let server = Loopback::serve(vec![(500, b"busy".to_vec()), (200, body.clone())]);
        let w = Wanted::pdb("a.pdb", id());
        let mut seen = Seen::default();
        let got = client(2, 1 << 20)
            .fetch(&server.url, &w, &d, &mut seen)
            .unwrap();
        assert_eq!(got, Some(w.in_store(&d)));
        assert_eq!(std::fs::read(w.in_store(&d)).unwrap(), body);
        assert_eq!(server.requests().len(), 2);
        let total = u64::try_from(body.len()).unwrap();
        assert_eq!(seen.progress.last(), Some(&(total, Some(total))));
        assert_eq!(seen.finished, 2, "each try ends");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_404_is_not_found_at_once_and_a_lasting_5xx_fails_after_the_retries() {
        let d = temp_dir("server-status");
        let w = Wanted::pdb("a.pdb", id());
        let missing = Loopback::serve(vec![(404, Vec::new())]);
        assert_eq!(
            client(3, 1 << 20)
                .fetch(&missing.url, &w, &d, &mut NoProgress)
                .unwrap(),
            None
        );
        assert_eq!(missing.requests().len(), 1);
        let down = Loopback::serve(vec![(503, Vec::new())]);
        let e = client(2, 1 << 20)
            .fetch(&down.url, &w, &d, &mut NoProgress)
            .unwrap_err();
        assert!(matches!(e, ServerError::Status { status: 503, .. }), "{e}");
        assert_eq!(down.requests().len(), 3, "the first try and two retries");
        let forbidden = Loopback::serve(vec![(403, Vec::new())]);
        let e = client(2, 1 << 20)
            .fetch(&forbidden.url, &w, &d, &mut NoProgress)
            .unwrap_err();
        assert!(e.to_string().contains("HTTP status 403"), "{e}");
        assert_eq!(forbidden.requests().len(), 1, "a 4xx is not retried");
        assert!(!w.in_store(&d).exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_over_the_limit_is_abandoned() {
        let d = temp_dir("server-limit");
        let server = Loopback::serve(vec![(200, fake_pdb(&id()))]);
        let w = Wanted::pdb("a.pdb", id());
        let e = client(0, 1000)
            .fetch(&server.url, &w, &d, &mut NoProgress)
            .unwrap_err();
        assert!(
            matches!(e, ServerError::TooLarge { limit: 1000, .. }),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_server_is_a_transport_error_after_the_retries() {
        let d = temp_dir("server-none");
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let w = Wanted::pdb("a.pdb", id());
        let e = client(1, 1 << 20)
            .fetch(&format!("http://127.0.0.1:{port}"), &w, &d, &mut NoProgress)
            .unwrap_err();
        assert!(matches!(e, ServerError::Transport { .. }), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
