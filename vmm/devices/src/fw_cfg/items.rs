//! Building fw_cfg's items: numbered items and named files, and the file directory that
//! lists the files (sorted by name, as QEMU).

use std::collections::BTreeMap;

use super::{keys, Item, ID_DMA, ID_TRADITIONAL};

/// A file name's maximum length, including its terminating NUL.
pub const FILE_NAME_LEN: usize = 56;

/// Errors adding items.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FwCfgError {
    /// The file name is empty or does not fit the directory entry.
    #[error("fw_cfg file name {0:?} must be 1 to 55 bytes")]
    Name(String),
    /// Two files with one name.
    #[error("fw_cfg file {0:?} added twice")]
    Duplicate(String),
    /// A file larger than the directory's 32-bit size field.
    #[error("fw_cfg file {0:?} is larger than 4 GiB")]
    TooLarge(String),
}

/// Collects items; [`FwCfgBuilder::build`] assigns file keys and writes the directory.
#[derive(Debug, Default)]
pub struct FwCfgBuilder {
    items: BTreeMap<u16, Item>,
    files: BTreeMap<String, Item>,
}

impl FwCfgBuilder {
    /// A builder with the signature and the interface ID (traditional and DMA).
    pub fn new() -> Self {
        let mut b = FwCfgBuilder::default();
        b.add_item(keys::SIGNATURE, b"QEMU".to_vec());
        b.add_item(keys::ID, (ID_TRADITIONAL | ID_DMA).to_le_bytes().to_vec());
        b
    }

    /// Sets the numbered item `key`.
    pub fn add_item(&mut self, key: u16, data: Vec<u8>) {
        self.items.insert(
            key,
            Item {
                data,
                writable: false,
            },
        );
    }

    /// Adds a read-only file.
    pub fn add_file(&mut self, name: &str, data: Vec<u8>) -> Result<(), FwCfgError> {
        self.insert_file(name, data, false)
    }

    /// Adds a file the guest may write through DMA.
    pub fn add_writable_file(&mut self, name: &str, data: Vec<u8>) -> Result<(), FwCfgError> {
        self.insert_file(name, data, true)
    }

    fn insert_file(&mut self, name: &str, data: Vec<u8>, writable: bool) -> Result<(), FwCfgError> {
        if name.is_empty() || name.len() >= FILE_NAME_LEN || name.contains('\0') {
            return Err(FwCfgError::Name(name.into()));
        }
        if u32::try_from(data.len()).is_err() {
            return Err(FwCfgError::TooLarge(name.into()));
        }
        if self.files.contains_key(name) {
            return Err(FwCfgError::Duplicate(name.into()));
        }
        self.files.insert(name.into(), Item { data, writable });
        Ok(())
    }

    /// The items by key, with the files from `FILE_FIRST` on (in name order) and the
    /// directory at `FILE_DIR`: a big-endian u32 count, then per file a big-endian u32 size,
    /// u16 key, u16 reserved and a NUL-padded 56-byte name.
    pub fn build(self) -> BTreeMap<u16, Item> {
        let FwCfgBuilder { mut items, files } = self;
        let count = u32::try_from(files.len()).unwrap_or(u32::MAX);
        let mut dir = count.to_be_bytes().to_vec();
        for (key, (name, item)) in (keys::FILE_FIRST..).zip(files) {
            let size = u32::try_from(item.data.len()).unwrap_or(u32::MAX);
            dir.extend_from_slice(&size.to_be_bytes());
            dir.extend_from_slice(&key.to_be_bytes());
            dir.extend_from_slice(&[0, 0]);
            let mut n = [0u8; FILE_NAME_LEN];
            n[..name.len()].copy_from_slice(name.as_bytes());
            dir.extend_from_slice(&n);
            items.insert(key, item);
        }
        items.insert(
            keys::FILE_DIR,
            Item {
                data: dir,
                writable: false,
            },
        );
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_and_duplicates_are_refused() {
        let mut b = FwCfgBuilder::new();
        assert!(matches!(b.add_file("", vec![]), Err(FwCfgError::Name(_))));
        let long = "x".repeat(56);
        assert!(matches!(
            b.add_file(&long, vec![]),
            Err(FwCfgError::Name(_))
        ));
        b.add_file("etc/a", vec![1]).unwrap();
        assert_eq!(
            b.add_file("etc/a", vec![2]),
            Err(FwCfgError::Duplicate("etc/a".into()))
        );
    }

    #[test]
    fn empty_directory_has_a_zero_count() {
        let items = FwCfgBuilder::new().build();
        assert_eq!(items[&keys::FILE_DIR].data, vec![0, 0, 0, 0]);
        assert_eq!(items[&keys::SIGNATURE].data, b"QEMU");
    }
}
