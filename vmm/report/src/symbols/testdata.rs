//! Files for the symbol-path tests: the smallest PDB the pdb crate reads an identity from,
//! the headers of a PE image (made by introspect's PE builder), and scratch directories.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use introspect::testimage::ImageBuilder;

use super::pdb::PdbId;

const PAGE: usize = 4096;

/// A PDB (MSF 7.00) of five 4 KiB pages holding only the PDB information stream (stream 1)
/// with `id`'s GUID and age: header, free page map, the page list of the stream table, the
/// stream table, the stream.
pub fn fake_pdb(id: &PdbId) -> Vec<u8> {
    let mut f = vec![0u8; 5 * PAGE];
    let put = |f: &mut Vec<u8>, at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
    f[..32].copy_from_slice(b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0");
    put(&mut f, 32, 4096); // page size
    put(&mut f, 36, 1); // free page map
    put(&mut f, 40, 5); // pages used
    put(&mut f, 44, 16); // stream table bytes: count, two sizes, stream 1's page
    put(&mut f, 52, 2); // the page listing the stream table's pages
    put(&mut f, 2 * PAGE, 3);
    let table = 3 * PAGE;
    put(&mut f, table, 2); // streams
    put(&mut f, table + 4, 0);
    put(&mut f, table + 8, 32); // stream 1: the information stream's bytes
    put(&mut f, table + 12, 4);
    let info = 4 * PAGE;
    put(&mut f, info, 20_000_404); // VC70
    put(&mut f, info + 4, 0x5eed_0001); // signature
    put(&mut f, info + 8, id.age);
    f[info + 12..info + 28].copy_from_slice(&guid_bytes(&id.guid));
    f
}

/// A GUID's 32 hex digits (symbol-server order) as the 16 bytes a PDB or CodeView record
/// stores: Data1..Data3 little-endian, Data4 as is.
fn guid_bytes(hex: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    b[0..4].reverse();
    b[4..6].reverse();
    b[6..8].reverse();
    b
}

/// The headers of a PE32+ image with this TimeDateStamp and SizeOfImage, and nothing else.
pub fn fake_pe(timestamp: u32, size: u32) -> Vec<u8> {
    ImageBuilder::new(size as usize)
        .timestamp(timestamp)
        .build_headers()
}

/// A fresh scratch directory under the system's temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("hvprof-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_fake_pdb_has_the_identity_it_was_made_with() {
    let id = PdbId {
        guid: "0123456789ABCDEF0011223344556677".into(),
        age: 7,
    };
    assert_eq!(super::pdb::id(&fake_pdb(&id)).unwrap(), id);
}

/// A one-thread HTTP/1.1 server on loopback answering every request in turn with the next
/// of its answers (the last one repeats), and recording the paths asked for.
pub struct Loopback {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Loopback {
    /// Serves `answers` (status, body).
    pub fn serve(answers: Vec<(u16, Vec<u8>)>) -> Self {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for (i, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                seen.lock().unwrap().push(path);
                loop {
                    let mut header = String::new();
                    match reader.read_line(&mut header) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if header == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                let (status, body) = &answers[i.min(answers.len() - 1)];
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body);
            }
        });
        Loopback { url, requests }
    }

    /// The paths asked for so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}
