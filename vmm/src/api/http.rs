//! A minimal HTTP/1.1 request parser and response writer for the control API: requests one
//! after another on a connection (pipelined), `Content-Length` bodies only, bounded sizes. A
//! pure function of bytes (fuzzed).

/// Largest request head (request line + headers) accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Method, upper case as sent.
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// The query string, without its `?` (empty without one).
    pub query: String,
    /// The body.
    pub body: Vec<u8>,
}

/// Why bytes are not a request (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// More bytes are needed.
    #[error("incomplete request")]
    Incomplete,
    /// The head or body is too large.
    #[error("request too large")]
    TooLarge,
    /// Not HTTP/1.x or malformed.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// Parses one request from the start of `buf`. Returns the request and the bytes it used.
///
/// Every prefix of a request it accepts is [`ParseError::Incomplete`], so the server can parse
/// what it has read so far whatever the pieces it arrives in.
pub fn parse(buf: &[u8]) -> Result<(Request, usize), ParseError> {
    let head_end = match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(p) => p,
        // Too large only once no terminator can start within MAX_HEAD: a head of exactly
        // MAX_HEAD bytes is accepted, so its terminator's first three bytes are not too many.
        None if buf.len() >= MAX_HEAD + 4 => return Err(ParseError::TooLarge),
        None => return Err(ParseError::Incomplete),
    };
    if head_end > MAX_HEAD {
        return Err(ParseError::TooLarge);
    }
    let head =
        std::str::from_utf8(&buf[..head_end]).map_err(|_| ParseError::Malformed("not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines
        .next()
        .ok_or(ParseError::Malformed("no request line"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::Malformed("request line"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(ParseError::Malformed("request line"));
    }
    let mut length = 0usize;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or(ParseError::Malformed("header"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value
                .parse()
                .map_err(|_| ParseError::Malformed("content-length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ParseError::Malformed("transfer-encoding is not supported"));
        }
    }
    if length > MAX_BODY {
        return Err(ParseError::TooLarge);
    }
    let body_start = head_end + 4;
    let end = body_start.checked_add(length).ok_or(ParseError::TooLarge)?;
    let body = buf
        .get(body_start..end)
        .ok_or(ParseError::Incomplete)?
        .to_vec();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok((
        Request {
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            body,
        },
        end,
    ))
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// JSON body.
    pub body: String,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, body: String) -> Self {
        Response { status, body }
    }

    /// An error response `{"error": message}`.
    pub fn error(status: u16, message: &str) -> Self {
        let body = serde_json::json!({ "error": message }).to_string();
        Response { status, body }
    }

    /// The bytes on the wire; `close` says the connection closes after it (`Connection: close`),
    /// else that the next pipelined request will be answered (`Connection: keep-alive`).
    pub fn to_bytes(&self, close: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            201 => "Created",
            204 => "No Content",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            409 => "Conflict",
            413 => "Payload Too Large",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Error",
        };
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n{}",
            self.status,
            self.body.len(),
            if close { "close" } else { "keep-alive" },
            self.body
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_with_body() {
        let raw = b"POST /v1/profiles/host HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
        let (r, used) = parse(raw).unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.body.as_slice()),
            ("POST", "/v1/profiles/host", &b"{}"[..])
        );
        assert_eq!(used, raw.len());
    }

    #[test]
    fn incomplete_and_malformed_requests() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(ParseError::Incomplete));
        assert_eq!(
            parse(b"PUT /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"),
            Err(ParseError::Incomplete)
        );
        assert!(matches!(
            parse(b"GET x HTTP/1.1\r\n\r\n"),
            Err(ParseError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / SPDY\r\n\r\n"),
            Err(ParseError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nContent-Length: nope\r\n\r\n"),
            Err(ParseError::Malformed(_))
        ));
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"),
            Err(ParseError::TooLarge)
        );
        assert_eq!(parse(&vec![b'a'; MAX_HEAD + 4]), Err(ParseError::TooLarge));
    }

    #[test]
    fn every_prefix_of_a_largest_head_is_incomplete() {
        let mut raw = b"GET / HTTP/1.1\r\nX: ".to_vec();
        raw.resize(MAX_HEAD, b'a');
        raw.extend_from_slice(b"\r\n\r\n");
        let (_, used) = parse(&raw).expect("a head of MAX_HEAD bytes is accepted");
        assert_eq!(used, raw.len());
        for k in 0..raw.len() {
            assert_eq!(parse(&raw[..k]), Err(ParseError::Incomplete), "prefix {k}");
        }
        raw.insert(20, b'a');
        assert_eq!(parse(&raw), Err(ParseError::TooLarge));
    }

    #[test]
    fn the_query_string_is_kept_apart_from_the_path() {
        let (r, _) = parse(b"GET /v1/stats?x=1&y HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.query.as_str()), ("/v1/stats", "x=1&y"));
        let (r, _) = parse(b"GET /v1/stats HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.query.as_str()), ("/v1/stats", ""));
    }

    #[test]
    fn response_has_length_and_status() {
        let b = String::from_utf8(Response::json(200, "{}".into()).to_bytes(true)).unwrap();
        assert!(b.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(b.contains("Content-Length: 2\r\n"));
        assert!(b.contains("Connection: close\r\n"));
        assert!(b.ends_with("\r\n\r\n{}"));
        let b = String::from_utf8(Response::json(200, "{}".into()).to_bytes(false)).unwrap();
        assert!(b.contains("Connection: keep-alive\r\n"));
    }
}
