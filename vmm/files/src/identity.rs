//! Which paths are the same file: by device and inode, never by name (`D/profile.json`,
//! `./D/../D/profile.json` and a hard link to it are one file).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A file's identity: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file at `path` (links followed), or None where nothing is there.
    pub fn of(path: &Path) -> Option<FileId> {
        std::fs::metadata(path).ok().map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// The identity of an open file.
    pub fn of_file(file: &std::fs::File) -> std::io::Result<FileId> {
        let m = file.metadata()?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// An output that is one of the command's inputs.
#[derive(Debug, thiserror::Error)]
#[error("{} is {} (the same file), an input of this command: write the output elsewhere", .output.display(), .input.display())]
pub struct OutputIsInput {
    /// The output, as given.
    pub output: PathBuf,
    /// The input it is, as given.
    pub input: PathBuf,
}

/// Refuses any output that is the same file as any input. Paths where nothing exists yet
/// are no input's: an output that will be created cannot be one.
pub fn distinct_outputs<'a>(
    inputs: impl IntoIterator<Item = &'a Path>,
    outputs: impl IntoIterator<Item = &'a Path>,
) -> Result<(), OutputIsInput> {
    let inputs: Vec<(FileId, &Path)> = inputs
        .into_iter()
        .filter_map(|p| FileId::of(p).map(|id| (id, p)))
        .collect();
    for out in outputs {
        let Some(id) = FileId::of(out) else { continue };
        if let Some((_, input)) = inputs.iter().find(|(i, _)| *i == id) {
            return Err(OutputIsInput {
                output: out.to_path_buf(),
                input: input.to_path_buf(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn the_same_file_by_another_name_is_caught() {
        let d = TestDir::new("identity");
        let input = d.path().join("profile.json");
        std::fs::write(&input, b"{}").unwrap();
        let other = d.path().join("other.json");
        std::fs::write(&other, b"{}").unwrap();
        let dotted = d.path().join(".").join("profile.json");
        let linked = d.path().join("hard.json");
        std::fs::hard_link(&input, &linked).unwrap();
        for out in [&input, &dotted, &linked] {
            let e = distinct_outputs([input.as_path()], [out.as_path()]).unwrap_err();
            assert_eq!(e.input, input);
            assert!(e.to_string().contains("an input of this command"), "{e}");
        }
        distinct_outputs([input.as_path()], [other.as_path()]).unwrap();
        distinct_outputs([input.as_path()], [d.path().join("new.json").as_path()]).unwrap();
    }
}
