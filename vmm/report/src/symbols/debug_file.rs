//! Separate debug files: a distribution strips its programs and libraries and ships their
//! `.symtab` and DWARF apart (Debian's `-dbgsym` packages, Fedora's `-debuginfo`), in a file
//! found by the program's GNU build id (`/usr/lib/debug/.build-id/ab/cdef....debug`) or by
//! the name and CRC-32 in its `.gnu_debuglink` section, in the places GDB looks: beside the
//! program, in its directory's `.debug/`, and under `/usr/lib/debug` at the program's own
//! directory. A debug file is used only when it is the program's: the same build id, or for a
//! program without one the CRC-32 its link names.

use object::Object;

use super::Module;

/// Where the debug tree is in a guest's root file system.
const DEBUG_ROOT: &str = "/usr/lib/debug";

/// What a stripped ELF file says about its debug file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugRef {
    /// The file's GNU build id, lowercase hex.
    pub build_id: Option<String>,
    /// `.gnu_debuglink`: the debug file's name and the CRC-32 of its bytes.
    pub link: Option<(String, u32)>,
}

impl DebugRef {
    /// What the ELF file `bytes` says about its debug file, when it lacks what one would add
    /// (a `.symtab` or DWARF line tables) and names one; None otherwise.
    pub fn of(bytes: &[u8]) -> Option<DebugRef> {
        let file = object::File::parse(bytes).ok()?;
        let has = |name| file.section_by_name(name).is_some();
        if has(".symtab") && has(".debug_line") {
            return None;
        }
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .map(introspect::os::linux::build_id::hex);
        let link = file.gnu_debuglink().ok().flatten().and_then(|(name, crc)| {
            let name = std::str::from_utf8(name).ok()?;
            // A file name, never a path that leaves the directories looked in.
            let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
            plain.then(|| (name.to_string(), crc))
        });
        (build_id.is_some() || link.is_some()).then_some(DebugRef { build_id, link })
    }

    /// The guest paths the debug file of the file at `path` (absolute) may have, in the order
    /// they are tried: by build id, then by link name beside it, in its `.debug/`, and under
    /// the debug tree at its directory. `path` itself is never one.
    pub fn candidates(&self, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(id) = self.build_id.as_deref().filter(|id| id.len() > 2) {
            out.push(format!(
                "{DEBUG_ROOT}/.build-id/{}/{}.debug",
                &id[..2],
                &id[2..]
            ));
        }
        if let Some((name, _)) = &self.link {
            let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
            out.push(format!("{dir}/{name}"));
            out.push(format!("{dir}/.debug/{name}"));
            out.push(format!("{DEBUG_ROOT}{dir}/{name}"));
        }
        out.retain(|c| c != path);
        out
    }

    /// True when `debug` (a candidate's bytes) is this file's debug file: its build id is this
    /// file's, or, for a file without one, its CRC-32 is the one the link names.
    pub fn accepts(&self, debug: &[u8]) -> bool {
        match (&self.build_id, &self.link) {
            (Some(id), _) => super::elf::build_id(debug).as_ref() == Some(id),
            (None, Some((_, crc))) => {
                let mut sum = flate2::Crc::new();
                sum.update(debug);
                sum.sum() == *crc
            }
            (None, None) => false,
        }
    }
}

/// Adds to `module` what its debug file `debug` has: the debug file's symbols when it has
/// more (its `.symtab` over the stripped file's `.dynsym`) and its line tables when the module
/// has none. Code bytes, range and build id stay the stripped file's: a debug file keeps its
/// program's addresses but not its code. False, `module` unchanged, when the two are linked at
/// different addresses (then the debug file is not this build's, whatever its id says).
pub fn add_debug(module: &mut Module, debug: Module) -> bool {
    if debug.base != module.base {
        return false;
    }
    if debug.symbols.len() > module.symbols.len() {
        module.symbols = debug.symbols;
    }
    if module.lines.is_empty() {
        module.lines = debug.lines;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(build_id: Option<&str>, link: Option<(&str, u32)>) -> DebugRef {
        DebugRef {
            build_id: build_id.map(String::from),
            link: link.map(|(n, c)| (n.to_string(), c)),
        }
    }

    #[test]
    fn candidates_are_tried_by_build_id_then_beside_in_dot_debug_and_under_the_tree() {
        let r = reference(Some("ab12cd"), Some(("burn.debug", 7)));
        assert_eq!(
            r.candidates("/usr/bin/burn"),
            [
                "/usr/lib/debug/.build-id/ab/12cd.debug",
                "/usr/bin/burn.debug",
                "/usr/bin/.debug/burn.debug",
                "/usr/lib/debug/usr/bin/burn.debug",
            ]
        );
        // A link naming the file itself is not tried.
        let itself = reference(None, Some(("burn", 7)));
        assert_eq!(
            itself.candidates("/bin/burn"),
            ["/bin/.debug/burn", "/usr/lib/debug/bin/burn"]
        );
    }

    #[test]
    fn a_debug_file_is_accepted_by_build_id_or_else_by_crc() {
        // The CRC-32 GNU's debuglink uses (zlib's) of the usual check string.
        let check = b"123456789";
        assert!(reference(None, Some(("x", 0xcbf4_3926))).accepts(check));
        assert!(!reference(None, Some(("x", 0xcbf4_3927))).accepts(check));
        assert!(!reference(None, None).accepts(check));
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        if let Some(id) = super::super::elf::build_id(&exe) {
            assert!(reference(Some(&id), None).accepts(&exe));
            assert!(
                !reference(Some("00"), Some(("x", 0))).accepts(&exe),
                "the id decides"
            );
        }
        assert!(!reference(Some("00"), None).accepts(check), "not ELF");
    }

    #[test]
    fn an_unstripped_file_or_garbage_wants_no_debug_file() {
        // The test binary has its .symtab and, in the dev profile, DWARF lines.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(DebugRef::of(&exe), None);
        assert_eq!(DebugRef::of(b"not an image"), None);
    }
}
