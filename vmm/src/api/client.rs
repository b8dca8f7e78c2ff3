//! A client of the control API, as `hvprof top` attaches to a running hvprof: one request a
//! connection (the server answers it and closes), the answer read to its end within a
//! deadline and up to [`MAX_ANSWER`] bytes, its JSON body returned or its error message.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest answer read (a whole-space profile's counts are the largest).
pub const MAX_ANSWER: u64 = 256 << 20;

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at the socket (or it is not one, or not ours).
    #[error("cannot connect to {}: {}", .0.display(), .1)]
    Connect(PathBuf, #[source] std::io::Error),
    /// Sending or reading failed, or the deadline passed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// The answer is larger than [`MAX_ANSWER`].
    #[error("{0}: an answer over {MAX_ANSWER} bytes")]
    TooLarge(String),
    /// Not an HTTP/1.1 answer with a JSON body.
    #[error("{0}: not an answer of hvprof's API")]
    Malformed(String),
    /// The server refused the request.
    #[error("{what}: {status} {message}")]
    Refused {
        /// The request.
        what: String,
        /// Its HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
}

/// A client of the API socket at a path.
#[derive(Debug, Clone)]
pub struct ApiClient {
    path: PathBuf,
    timeout: Duration,
}

impl ApiClient {
    /// A client of the socket at `path`, each request bounded by `timeout`.
    pub fn new(path: &Path, timeout: Duration) -> Self {
        ApiClient {
            path: path.to_owned(),
            timeout,
        }
    }

    /// GET `target` (a path with its query).
    pub fn get(&self, target: &str) -> Result<serde_json::Value, ClientError> {
        self.request("GET", target, b"")
    }

    /// PUT `target`, no body.
    pub fn put(&self, target: &str) -> Result<serde_json::Value, ClientError> {
        self.request("PUT", target, b"")
    }

    /// POST `body` to `target`.
    pub fn post(
        &self,
        target: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ClientError> {
        self.request("POST", target, body.to_string().as_bytes())
    }

    fn request(
        &self,
        method: &str,
        target: &str,
        body: &[u8],
    ) -> Result<serde_json::Value, ClientError> {
        let what = format!("{method} {target}");
        let io = |e| ClientError::Io(what.clone(), e);
        let mut s = UnixStream::connect(&self.path)
            .map_err(|e| ClientError::Connect(self.path.clone(), e))?;
        s.set_read_timeout(Some(self.timeout)).map_err(io)?;
        s.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let head = format!(
            "{method} {target} HTTP/1.1\r\nHost: hvprof\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).map_err(io)?;
        s.write_all(body).map_err(io)?;
        let mut answer = Vec::new();
        (&mut s)
            .take(MAX_ANSWER + 1)
            .read_to_end(&mut answer)
            .map_err(io)?;
        if answer.len() as u64 > MAX_ANSWER {
            return Err(ClientError::TooLarge(what));
        }
        parse_answer(&what, &answer)
    }
}

/// The JSON body of an HTTP/1.1 answer, or the server's refusal.
fn parse_answer(what: &str, answer: &[u8]) -> Result<serde_json::Value, ClientError> {
    let malformed = || ClientError::Malformed(what.to_string());
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(malformed)?;
    let head = std::str::from_utf8(&answer[..end]).map_err(|_| malformed())?;
    let status: u16 = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|l| l.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(malformed)?;
    let body: serde_json::Value =
        serde_json::from_slice(&answer[end + 4..]).map_err(|_| malformed())?;
    if status >= 400 {
        let message = body["error"].as_str().unwrap_or("refused").to_string();
        return Err(ClientError::Refused {
            what: what.to_string(),
            status,
            message,
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_json_or_as_the_servers_refusal() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"state\":1}";
        assert_eq!(parse_answer("GET /v1/vm", ok).unwrap()["state"], 1);
        let no = b"HTTP/1.1 404 Not Found\r\n\r\n{\"error\":\"no such profile\"}";
        let e = parse_answer("GET /v1/profiles/host/9", no).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GET /v1/profiles/host/9: 404 no such profile"
        );
        for bad in [
            &b""[..],
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.0 2x\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\n\r\n{",
        ] {
            assert!(matches!(
                parse_answer("x", bad),
                Err(ClientError::Malformed(_))
            ));
        }
    }
}
