//! Symbol tables of guest images: function symbols from ELF files (the reference guest, Linux
//! kernels), looked up by guest-virtual address.

use object::{Object, ObjectSymbol, SymbolKind};

/// One symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Start address.
    pub addr: u64,
    /// Size in bytes (0 if unknown: it then extends to the next symbol).
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

/// A sorted symbol table.
#[derive(Debug, Clone, Default)]
pub struct Symbols {
    syms: Vec<Symbol>,
}

/// The image could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read symbols")]
pub struct SymbolError(#[source] pub object::Error);

impl Symbols {
    /// The function symbols of an ELF (or other object-crate format) image.
    pub fn from_image(bytes: &[u8]) -> Result<Self, SymbolError> {
        let file = object::File::parse(bytes).map_err(SymbolError)?;
        let mut syms: Vec<Symbol> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                Some(Symbol {
                    addr: s.address(),
                    size: s.size(),
                    name: rustc_demangle::demangle(name).to_string(),
                })
            })
            .collect();
        syms.sort_by_key(|s| (s.addr, std::cmp::Reverse(s.size)));
        syms.dedup_by_key(|s| s.addr);
        Ok(Symbols { syms })
    }

    /// The symbols of the kernel a VM booted, or none if its image has no readable table.
    pub fn for_kernel(spec: &crate::boot::KernelSpec) -> Self {
        let bytes = match spec.embedded {
            Some(b) => std::borrow::Cow::Borrowed(b),
            None => match std::fs::read(&spec.kernel) {
                Ok(b) => std::borrow::Cow::Owned(b),
                Err(_) => return Symbols::default(),
            },
        };
        Symbols::from_image(&bytes).unwrap_or_default()
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol containing `addr`, and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let i = self
            .syms
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let s = &self.syms[i];
        let offset = addr - s.addr;
        let inside = if s.size > 0 {
            offset < s.size
        } else {
            self.syms.get(i + 1).is_none_or(|n| addr < n.addr)
        };
        inside.then_some((s, offset))
    }

    /// `name+0xoff` for `addr`, or the bare address.
    pub fn describe(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some((s, 0)) => s.name.clone(),
            Some((s, off)) => format!("{}+{off:#x}", s.name),
            None => format!("{addr:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Symbols {
        Symbols {
            syms: vec![
                Symbol {
                    addr: 0x1000,
                    size: 0x10,
                    name: "a".into(),
                },
                Symbol {
                    addr: 0x1020,
                    size: 0,
                    name: "b".into(),
                },
                Symbol {
                    addr: 0x1040,
                    size: 0x8,
                    name: "c".into(),
                },
            ],
        }
    }

    #[test]
    fn lookup_respects_sizes_and_gaps() {
        let t = table();
        assert_eq!(t.describe(0x1000), "a");
        assert_eq!(t.describe(0x100f), "a+0xf");
        assert_eq!(t.describe(0x1010), "0x1010");
        assert_eq!(t.describe(0x103f), "b+0x1f");
        assert_eq!(t.describe(0x1048), "0x1048");
        assert_eq!(t.describe(0xfff), "0xfff");
    }

    #[test]
    fn the_embedded_reference_guest_has_symbols() {
        let s = Symbols::from_image(crate::demo::REFGUEST_ELF).unwrap();
        assert!(s.len() > 10);
    }
}
