//! Tests of [`Finder`]: local stores, caches, a loopback symbol server, and the record of
//! what was not found.

use std::time::Duration;

use super::*;
use crate::symbols::testdata::{fake_pdb, fake_pe, temp_dir, Loopback};

const GUID: &str = "00112233445566778899AABBCCDDEEFF";

fn id(age: u32) -> PdbId {
    PdbId {
        guid: GUID.into(),
        age,
    }
}

fn finder(path: &str) -> Finder {
    Finder::new(SymbolPath::parse(path, None).unwrap()).with_options(ServerOptions {
        retries: 1,
        backoff: Duration::from_millis(1),
        ..ServerOptions::default()
    })
}

/// Puts a fake PDB with `id` into `store` in symbol-server layout.
fn put(store: &Path, id: &PdbId) -> PathBuf {
    let w = Wanted::pdb("a.pdb", id.clone());
    let p = w.in_store(store);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, fake_pdb(id)).unwrap();
    p
}

#[test]
fn entries_are_searched_in_order_and_a_store_fills_the_downstream_ones() {
    let d = temp_dir("find-order");
    let (down, store) = (d.join("down"), d.join("store"));
    let in_store = put(&store, &id(1));
    let path = format!(
        "{};srv*{}*{}",
        d.join("empty").display(),
        down.display(),
        store.display()
    );
    let mut f = finder(&path);
    assert_eq!(f.find_pdb("a", "a.pdb", &id(1)), Some(in_store.clone()));
    let copied = Wanted::pdb("a.pdb", id(1)).in_store(&down);
    assert_eq!(std::fs::read(&copied).unwrap(), fake_pdb(&id(1)));
    std::fs::remove_file(&in_store).unwrap();
    assert_eq!(finder(&path).find_pdb("a", "a.pdb", &id(1)), Some(copied));
    assert!(f.missing().is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_cache_entry_keeps_what_the_entries_after_it_find() {
    let d = temp_dir("find-cache");
    let plain = d.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("a.pdb"), fake_pdb(&id(4))).unwrap();
    let cache = d.join("cache");
    let path = format!("cache*{};{}", cache.display(), plain.display());
    assert_eq!(
        finder(&path).find_pdb("a", "a.pdb", &id(4)),
        Some(plain.join("a.pdb"))
    );
    let cached = Wanted::pdb("a.pdb", id(4)).in_store(&cache);
    assert!(cached.is_file());
    std::fs::remove_file(plain.join("a.pdb")).unwrap();
    assert_eq!(finder(&path).find_pdb("a", "a.pdb", &id(4)), Some(cached));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_server_download_lands_in_the_cache_once() {
    let d = temp_dir("find-server");
    let server = Loopback::serve(vec![(200, fake_pdb(&id(2)))]);
    let cache = d.join("cache");
    let path = format!("srv*{}*{}/", cache.display(), server.url);
    let mut f = finder(&path);
    let want = Wanted::pdb("a.pdb", id(2)).in_store(&cache);
    assert_eq!(f.find_pdb("a", "a.pdb", &id(2)), Some(want.clone()));
    assert_eq!(f.find_pdb("b", "a.pdb", &id(2)), Some(want.clone()));
    assert_eq!(
        server.requests(),
        [format!("/a.pdb/{GUID}2/a.pdb")],
        "one request, at the symbol-server path"
    );
    assert_eq!(std::fs::read(&want).unwrap(), fake_pdb(&id(2)));
    assert_eq!(finder(&path).find_pdb("a", "a.pdb", &id(2)), Some(want));
    assert_eq!(
        server.requests().len(),
        1,
        "the cache answers the next finder"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_download_of_another_build_is_deleted_and_reported() {
    let d = temp_dir("find-mismatch");
    let server = Loopback::serve(vec![(200, fake_pdb(&id(3)))]);
    let cache = d.join("cache");
    let mut f = finder(&format!("srv*{}*{}", cache.display(), server.url));
    assert_eq!(f.find_pdb("app", "a.pdb", &id(2)), None);
    let slot = Wanted::pdb("a.pdb", id(2)).in_store(&cache);
    let left = std::fs::read_dir(slot.parent().unwrap()).unwrap().count();
    assert_eq!(left, 0, "the download is deleted");
    let [m] = f.missing() else {
        panic!("{:?}", f.missing())
    };
    let text = m.to_string();
    assert!(
        text.starts_with(&format!("app: a.pdb GUID {GUID} age 2")),
        "{text}"
    );
    assert!(text.contains("age 3"), "names what it got: {text}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn what_is_not_found_is_recorded_once_with_its_identity() {
    let d = temp_dir("find-missing");
    let server = Loopback::serve(vec![(404, Vec::new())]);
    let path = format!(
        "{};srv*{}*{}",
        d.display(),
        d.join("c").display(),
        server.url
    );
    let mut f = finder(&path);
    assert_eq!(f.find_pdb("app", "a.pdb", &id(9)), None);
    assert_eq!(f.find_pdb("app", "a.pdb", &id(9)), None);
    assert_eq!(server.requests().len(), 1, "a 404 is not retried");
    assert_eq!(
        f.missing(),
        [MissingPdb {
            module: "app".into(),
            pdb: "a.pdb".into(),
            guid: GUID.into(),
            age: 9,
            problems: Vec::new(),
        }]
    );
    assert_eq!(
        Finder::new(SymbolPath::default()).find_pdb("m", "a.pdb", &id(1)),
        None
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn images_are_found_by_timestamp_and_size_and_not_recorded_as_missing() {
    let d = temp_dir("find-image");
    let w = Wanted::image("app.exe", 0x5eed_0001, 0x3000);
    let p = w.in_store(&d);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, fake_pe(0x5eed_0001, 0x3000)).unwrap();
    let mut f = finder(&format!("srv*{}", d.display())).with_images(true);
    assert!(f.wants_images());
    assert_eq!(f.find_image("app.exe", 0x5eed_0001, 0x3000), Some(p));
    assert_eq!(f.find_image("app.exe", 0x5eed_0002, 0x3000), None);
    assert!(f.missing().is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_hostile_pdb_name_is_not_looked_up() {
    let d = temp_dir("find-hostile");
    let server = Loopback::serve(vec![(200, fake_pdb(&id(1)))]);
    let mut f = finder(&format!(
        "{};srv*{}*{}",
        d.display(),
        d.join("c").display(),
        server.url
    ));
    assert_eq!(f.find_pdb("evil", "..", &id(1)), None);
    assert!(server.requests().is_empty());
    assert!(
        f.missing()[0].to_string().contains("not looked up"),
        "{:?}",
        f.missing()
    );
    std::fs::remove_dir_all(&d).unwrap();
}
