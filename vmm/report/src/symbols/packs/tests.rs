//! The packs' lookups on trees and archives written here.

mod windows {
    use super::super::*;
    use crate::symbols::testdata::temp_dir;

    const GUID: &str = "BBED7C2955FBE4522AAA23F4B8677AD9";

    fn put(p: PathBuf) -> PathBuf {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"{}").unwrap();
        p
    }

    #[test]
    fn packs_are_found_in_volatility_layout_with_or_without_its_prefix_in_path_order() {
        let d = temp_dir("packs");
        let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
        let in_a = put(a.join(format!("symbols/windows/ntkrnlmp.pdb/{GUID}-1.json.xz")));
        let in_b = put(b.join(format!("ntkrnlmp.pdb/{GUID}-1.json")));
        let in_b_gz = put(b.join(format!("ntkrnlmp.pdb/{GUID}-1.json.gz")));
        // Another age, another GUID, another PDB name, a directory where a file should be.
        put(c.join(format!("ntkrnlmp.pdb/{GUID}-2.json.xz")));
        put(c.join("ntkrnlmp.pdb/00000000000000000000000000000000-1.json.xz"));
        put(c.join(format!("ntoskrnl.pdb/{GUID}-1.json.xz")));
        std::fs::create_dir_all(c.join(format!("ntkrnlmp.pdb/{GUID}-1.json"))).unwrap();
        let path = SymbolPath::parse(
            &format!(
                "{};{};{};srv*{}",
                c.display(),
                b.display(),
                a.display(),
                a.display()
            ),
            None,
        )
        .unwrap();
        let id = |guid: &str, age| PdbId {
            guid: guid.into(),
            age,
        };
        assert_eq!(
            windows_isf_files(&path, "ntkrnlmp.pdb", &id(&GUID.to_lowercase(), 1)),
            [in_b_gz, in_b, in_a].map(PackFile::File)
        );
        assert!(windows_isf_files(&path, "ntkrnlmp.pdb", &id(GUID, 3)).is_empty());
        // Names and GUIDs from a hostile guest that would leave the directory.
        assert!(windows_isf_files(&path, "../ntkrnlmp.pdb", &id(GUID, 1)).is_empty());
        assert!(windows_isf_files(&path, "ntkrnlmp.pdb", &id("../../x", 1)).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

mod linux {
    use super::super::*;
    use crate::symbols::testdata::temp_dir;
    use crate::symbols::types::isf::tests::{fixtures, xz};

    const BANNER: &str = "Linux version 6.1.0-13-amd64 (debian-kernel@lists.debian.org) \
                          (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)\n\0";

    pub(super) fn b64(data: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in data.chunks(3) {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..=c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i)) as usize & 63]));
            }
            for _ in c.len()..3 {
                out.push('=');
            }
        }
        out
    }

    /// A Linux table whose banner is `banner` and whose task_struct is `size` bytes.
    fn table(banner: &str, size: u64) -> Vec<u8> {
        let mut v = fixtures::linux();
        v["symbols"]["linux_banner"]["constant_data"] = b64(banner.as_bytes()).into();
        v["user_types"]["task_struct"]["size"] = size.into();
        serde_json::to_vec(&v).unwrap()
    }

    fn put(p: PathBuf, bytes: &[u8]) -> PathBuf {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn path(dirs: &[&Path]) -> SymbolPath {
        let s: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        SymbolPath::parse(&s.join(";"), None).unwrap()
    }

    #[test]
    fn the_helper_encodes_base64_as_the_reader_decodes_it() {
        for s in ["", "L", "Li", "Lin", "Linux version\n\0"] {
            let e = b64(s.as_bytes());
            assert_eq!(banner::base64(e.as_bytes()).unwrap(), s.as_bytes(), "{e}");
        }
    }

    #[test]
    fn the_table_whose_banner_matches_is_read_plain_or_xz() {
        let d = temp_dir("linux-packs");
        let other = "Linux version 5.10.0-26-amd64 (debian-kernel@lists.debian.org) #1 SMP\n\0";
        put(d.join("symbols/linux/5.10.json"), &table(other, 0x2000));
        let want = put(
            d.join("symbols/linux/debian/6.1.json.xz"),
            &xz(&table(BANNER, 0x2400)),
        );
        let p = path(&[&d]);
        // What guest memory holds: the banner up to its NUL, newline included.
        let guest = BANNER.trim_end_matches('\0').as_bytes().to_vec();
        let m =
            linux_isf_layout(&p, &[b"Linux version 4.19\n".to_vec(), guest], &|| false).unwrap();
        assert_eq!(m.file, PackFile::File(want));
        assert_eq!(m.banner, 1);
        assert_eq!(m.layout.task_struct.size, 0x2400);
        assert_eq!(m.banner_address, Some(0xffff_ffff_8220_0100));
        // The other file matches its own banner only, exactly.
        let m = linux_isf_layout(&p, &[other.as_bytes().to_vec()], &|| false).unwrap();
        assert_eq!(m.layout.task_struct.size, 0x2000);
        let prefix = &BANNER.as_bytes()[..40];
        assert!(linux_isf_layout(&p, &[prefix.to_vec()], &|| false).is_err());
        // A lookup told to stop reads no file.
        let err = linux_isf_layout(&p, &[other.as_bytes().to_vec()], &|| true).unwrap_err();
        assert!(err.contains("stopped"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_match_and_malformed_files_are_passed_over() {
        let d = temp_dir("linux-packs-bad");
        // Beside the pack's tree, in the directory itself: a corrupt xz file, a non-JSON file,
        // a Windows table, a Linux table without a banner, then the one that matches.
        put(d.join("a.json.xz"), b"\xfd7zXZ\0 corrupt");
        put(d.join("b.json"), b"not json");
        let mut win = fixtures::win10();
        win["symbols"]["linux_banner"] = serde_json::json!({"address": 0});
        put(d.join("c.json"), &serde_json::to_vec(&win).unwrap());
        let mut nobanner = fixtures::linux();
        nobanner["symbols"]
            .as_object_mut()
            .unwrap()
            .remove("linux_banner");
        put(d.join("d.json"), &serde_json::to_vec(&nobanner).unwrap());
        put(d.join("e.json.gz.txt"), &table(BANNER, 0x2400));
        let p = path(&[&d]);
        let guest = BANNER.as_bytes().to_vec();
        let err = linux_isf_layout(&p, std::slice::from_ref(&guest), &|| false).unwrap_err();
        assert!(err.contains("none of the 4 Linux ISF files"), "{err}");
        let want = put(d.join("f.json"), &table(BANNER, 0x2400));
        assert_eq!(
            linux_isf_layout(&p, &[guest], &|| false).unwrap().file,
            PackFile::File(want)
        );
        // A banner that matches but a table that does not read is no match either.
        let mut broken = fixtures::linux();
        broken["symbols"]["linux_banner"]["constant_data"] = b64(b"Linux version 7\n").into();
        broken["user_types"]
            .as_object_mut()
            .unwrap()
            .remove("task_struct");
        put(d.join("g.json"), &serde_json::to_vec(&broken).unwrap());
        assert!(linux_isf_layout(&p, &[b"Linux version 7".to_vec()], &|| false).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_examined_are_capped_and_subdirectories_bounded() {
        let d = temp_dir("linux-packs-cap");
        for i in 0..5 {
            put(d.join(format!("symbols/linux/{i}.json")), b"{}");
        }
        put(d.join("symbols/linux/a/b/c/deep.json"), b"{}");
        put(d.join("symbols/linux/a/b/shallow.json"), b"{}");
        put(d.join("sub/not-searched.json"), b"{}");
        let (files, more) = linux_isf_files(&path(&[&d]), 3);
        assert_eq!(files.len(), 3);
        assert!(more);
        let (files, more) = linux_isf_files(&path(&[&d]), 100);
        assert!(!more);
        let names: Vec<_> = files
            .iter()
            .map(|f| match f {
                PackFile::File(f) => f.strip_prefix(&d).unwrap().display().to_string(),
                other => panic!("{other}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "symbols/linux/0.json",
                "symbols/linux/1.json",
                "symbols/linux/2.json",
                "symbols/linux/3.json",
                "symbols/linux/4.json",
                "symbols/linux/a/b/shallow.json"
            ]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

mod zipped {
    use std::io::Write;

    use zip::write::SimpleFileOptions;
    use zip::CompressionMethod;

    use super::super::zipped::Archive;
    use super::super::*;
    use crate::symbols::testdata::temp_dir;
    use crate::symbols::types::isf::tests::{fixtures, xz};

    const GUID: &str = "BBED7C2955FBE4522AAA23F4B8677AD9";

    /// Writes a zip archive at `path`: each member stored or deflated; a name ending in `/` is
    /// a directory.
    fn zip(path: &Path, members: &[(&str, &[u8], CompressionMethod)]) -> PathBuf {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        for (name, bytes, method) in members {
            let options = SimpleFileOptions::default().compression_method(*method);
            if name.ends_with('/') {
                w.add_directory(*name, options).unwrap();
            } else {
                w.start_file(*name, options).unwrap();
                w.write_all(bytes).unwrap();
            }
        }
        w.finish().unwrap();
        path.to_path_buf()
    }

    fn zipped(archive: &Path, member: &str) -> PackFile {
        PackFile::Zipped {
            archive: archive.to_path_buf(),
            member: member.into(),
        }
    }

    fn path(dirs: &[&Path]) -> SymbolPath {
        let s: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        SymbolPath::parse(&s.join(";"), None).unwrap()
    }

    #[test]
    fn windows_tables_are_found_in_zipped_packs_after_the_trees_of_their_directory() {
        use CompressionMethod::{Deflated, Stored};
        let d = temp_dir("zipped-windows");
        let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
        let table = xz(&serde_json::to_vec(&fixtures::win10()).unwrap());
        // Volatility's layout, under windows/ in symbols/windows.zip, deflated.
        let in_a = zip(
            &a.join("symbols/windows.zip"),
            &[
                ("windows/", b"", Stored),
                ("windows/ntkrnlmp.pdb/", b"", Stored),
                (
                    &format!("windows/ntkrnlmp.pdb/{GUID}-1.json.xz"),
                    &table,
                    Deflated,
                ),
                (
                    &format!("windows/ntkrnlmp.pdb/{GUID}-2.json.xz"),
                    &table,
                    Deflated,
                ),
            ],
        );
        // Without the prefix, stored, beside a tree that holds the same build.
        std::fs::create_dir_all(b.join("ntkrnlmp.pdb")).unwrap();
        let tree = b.join(format!("ntkrnlmp.pdb/{GUID}-1.json"));
        std::fs::write(&tree, b"{}").unwrap();
        let in_b = zip(
            &b.join("windows.zip"),
            &[(&format!("ntkrnlmp.pdb/{GUID}-1.json"), b"{}", Stored)],
        );
        // Not an archive, and a link to one: passed over.
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("windows.zip"), b"PK\x03\x04 not a zip").unwrap();
        std::os::unix::fs::symlink(&in_a, c.join("symbols.zip")).unwrap();
        std::fs::create_dir_all(c.join("symbols")).unwrap();
        std::os::unix::fs::symlink(&in_a, c.join("symbols/windows.zip")).unwrap();
        let p = path(&[&c, &b, &a]);
        let id = PdbId {
            guid: GUID.to_lowercase(),
            age: 1,
        };
        let found = windows_isf_files(&p, "ntkrnlmp.pdb", &id);
        let want_a = zipped(&in_a, &format!("windows/ntkrnlmp.pdb/{GUID}-1.json.xz"));
        assert_eq!(
            found,
            [
                PackFile::File(tree),
                zipped(&in_b, &format!("ntkrnlmp.pdb/{GUID}-1.json")),
                want_a.clone(),
            ]
        );
        assert_eq!(found[1].read().unwrap(), b"{}");
        // Read back whole, and read as the layout it holds.
        let bytes = want_a.read().unwrap();
        assert_eq!(bytes, table);
        let layout = isf::windows_layout_for(&bytes, "ntkrnlmp.pdb", &id).unwrap();
        assert_eq!(layout.eprocess.unique_process_id, 0x440);
        assert_eq!(
            want_a.to_string(),
            format!("{}!windows/ntkrnlmp.pdb/{GUID}-1.json.xz", in_a.display())
        );
        // Names from a hostile guest are refused before any archive is opened.
        let id = PdbId {
            guid: "../../x".into(),
            age: 1,
        };
        assert!(windows_isf_files(&p, "ntkrnlmp.pdb", &id).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_linux_table_is_found_by_its_banner_in_a_zipped_pack() {
        use CompressionMethod::{Deflated, Stored};
        let d = temp_dir("zipped-linux");
        let banner = "Linux version 6.1.0-13-amd64 (debian-kernel@lists.debian.org) #1 SMP\n";
        let table = |b: &str, size: u64| {
            let mut v = fixtures::linux();
            v["symbols"]["linux_banner"]["constant_data"] =
                super::linux::b64(format!("{b}\0").as_bytes()).into();
            v["user_types"]["task_struct"]["size"] = size.into();
            serde_json::to_vec(&v).unwrap()
        };
        let other = "Linux version 5.10.0-26-amd64 #1 SMP\n";
        let archive = zip(
            &d.join("symbols/linux.zip"),
            &[
                ("linux/", b"", Stored),
                ("linux/README.txt", b"not a table", Deflated),
                ("linux/debian/5.10.json", &table(other, 0x2000), Deflated),
                (
                    "linux/debian/6.1.json.xz",
                    &xz(&table(banner, 0x2400)),
                    Stored,
                ),
            ],
        );
        let p = path(&[&d]);
        let (files, more) = linux_isf_files(&p, 100);
        assert!(!more);
        assert_eq!(
            files,
            [
                zipped(&archive, "linux/debian/5.10.json"),
                zipped(&archive, "linux/debian/6.1.json.xz")
            ]
        );
        let (files, more) = linux_isf_files(&p, 1);
        assert_eq!((files.len(), more), (1, true));
        let m = linux_isf_layout(&p, &[banner.as_bytes().to_vec()], &|| false).unwrap();
        assert_eq!(m.file, zipped(&archive, "linux/debian/6.1.json.xz"));
        assert_eq!(m.layout.task_struct.size, 0x2400);
        let m = linux_isf_layout(&p, &[other.as_bytes().to_vec()], &|| false).unwrap();
        assert_eq!(m.layout.task_struct.size, 0x2000);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn members_are_bounded_checked_against_their_crc_and_must_be_files() {
        use CompressionMethod::{Deflated, Stored};
        let d = temp_dir("zipped-bounds");
        let zeros = vec![0u8; 1 << 20];
        let payload = b"the member's own bytes, stored".to_vec();
        let path = zip(
            &d.join("windows.zip"),
            &[
                ("bomb.json", &zeros, Deflated),
                ("dir/", b"", Stored),
                ("stored.json", &payload, Stored),
            ],
        );
        let mut a = Archive::open(&path).unwrap();
        // 1 MiB of zeros deflates to about a kilobyte: its size, not its compressed size, counts.
        assert!(std::fs::metadata(&path).unwrap().len() < 16 << 10);
        let err = a.read("bomb.json", 64 << 10).unwrap_err();
        assert!(err.contains("limit"), "{err}");
        assert_eq!(a.read("bomb.json", 1 << 20).unwrap().len(), 1 << 20);
        assert!(a.read("dir/", 1 << 20).is_err());
        assert!(a.read("absent.json", 1 << 20).is_err());
        // A stored member whose bytes changed after it was written fails its CRC.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(payload.len())
            .position(|w| w == payload.as_slice())
            .unwrap();
        bytes[at] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let mut a = Archive::open(&path).unwrap();
        assert!(a.read("stored.json", 1 << 20).is_err());
        // Anything but a regular file is not opened.
        assert!(Archive::open(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
