//! Finding the doorbell in the resources PnP assigns to the ACPI device `HVPR0001`
//! (IRP_MN_START_DEVICE's `AllocatedResourcesTranslated`, a `CM_RESOURCE_LIST`).
//!
//! x64 layout (wdm.h, packed to 4): `CM_RESOURCE_LIST { ULONG Count; CM_FULL_RESOURCE_DESCRIPTOR
//! List[Count]; }`; a full descriptor is `InterfaceType`, `BusNumber` (4 + 4), then
//! `CM_PARTIAL_RESOURCE_LIST { USHORT Version, Revision; ULONG Count; descriptors[Count] }`; a
//! partial descriptor is 20 bytes: `UCHAR Type; UCHAR ShareDisposition; USHORT Flags;` and a
//! 16-byte union whose `Port` form is `{ PHYSICAL_ADDRESS Start; ULONG Length; }`.

use profile_core::abi::DOORBELL_PORT_COUNT;

/// `CmResourceTypePort`.
pub const CM_RESOURCE_TYPE_PORT: u8 = 1;
/// `CM_RESOURCE_PORT_IO`: the range is in I/O space (not memory-mapped).
pub const CM_RESOURCE_PORT_IO: u16 = 1;
/// Bytes of a `CM_PARTIAL_RESOURCE_DESCRIPTOR`.
pub const PARTIAL_DESCRIPTOR_SIZE: usize = 20;
/// Bytes before the first partial descriptor of a full descriptor.
pub const FULL_DESCRIPTOR_HEADER: usize = 16;

/// Limits against a corrupt list (real lists hold one full descriptor with a handful of
/// partial ones).
const MAX_FULL: u32 = 16;
const MAX_PARTIAL: u32 = 256;

/// The doorbell's I/O range.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PortRange {
    /// First port.
    pub base: u16,
    /// Ports in the range.
    pub length: u32,
}

/// Where parsing stopped.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ResourceError {
    /// The list is shorter than its counts say.
    Truncated,
    /// A count beyond any real list.
    TooMany,
}

fn u32_at(list: &[u8], at: usize) -> Result<u32, ResourceError> {
    let b = list.get(at..at + 4).ok_or(ResourceError::Truncated)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Bytes the `CM_RESOURCE_LIST` at the start of `list` occupies, read from its counts (the
/// driver uses this to bound the kernel's list before parsing it with [`find_doorbell`]).
/// `read_u32(offset)` reads a little-endian `u32` at `offset` of the list.
pub fn list_len<F: FnMut(usize) -> u32>(mut read_u32: F) -> Result<usize, ResourceError> {
    let full = read_u32(0);
    if full > MAX_FULL {
        return Err(ResourceError::TooMany);
    }
    let mut at = 4usize;
    for _ in 0..full {
        let partial = read_u32(at + 12);
        if partial > MAX_PARTIAL {
            return Err(ResourceError::TooMany);
        }
        at += FULL_DESCRIPTOR_HEADER + partial as usize * PARTIAL_DESCRIPTOR_SIZE;
    }
    Ok(at)
}

/// The first I/O-port range of at least [`DOORBELL_PORT_COUNT`] ports in the list, if any.
pub fn find_doorbell(list: &[u8]) -> Result<Option<PortRange>, ResourceError> {
    let full = u32_at(list, 0)?;
    if full > MAX_FULL {
        return Err(ResourceError::TooMany);
    }
    let mut at = 4usize;
    for _ in 0..full {
        let partial = u32_at(list, at + 12)?;
        if partial > MAX_PARTIAL {
            return Err(ResourceError::TooMany);
        }
        at += FULL_DESCRIPTOR_HEADER;
        for _ in 0..partial {
            let d = list
                .get(at..at + PARTIAL_DESCRIPTOR_SIZE)
                .ok_or(ResourceError::Truncated)?;
            at += PARTIAL_DESCRIPTOR_SIZE;
            let kind = d[0];
            let flags = u16::from_le_bytes([d[2], d[3]]);
            let start = u64::from_le_bytes([d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11]]);
            let length = u32::from_le_bytes([d[12], d[13], d[14], d[15]]);
            if kind != CM_RESOURCE_TYPE_PORT || flags & CM_RESOURCE_PORT_IO == 0 {
                continue;
            }
            let base = match u16::try_from(start) {
                Ok(base) => base,
                Err(_) => continue,
            };
            let fits = u32::from(base) + length <= 0x1_0000;
            if length >= u32::from(DOORBELL_PORT_COUNT) && fits {
                return Ok(Some(PortRange { base, length }));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial(kind: u8, flags: u16, start: u64, length: u32) -> Vec<u8> {
        let mut d = vec![kind, 1];
        d.extend_from_slice(&flags.to_le_bytes());
        d.extend_from_slice(&start.to_le_bytes());
        d.extend_from_slice(&length.to_le_bytes());
        d.extend_from_slice(&[0; 4]);
        d
    }

    fn list(partials: &[Vec<u8>]) -> Vec<u8> {
        let mut l = 1u32.to_le_bytes().to_vec();
        l.extend_from_slice(&15u32.to_le_bytes()); // InterfaceType: ACPIBus
        l.extend_from_slice(&0u32.to_le_bytes());
        l.extend_from_slice(&1u16.to_le_bytes());
        l.extend_from_slice(&1u16.to_le_bytes());
        l.extend_from_slice(&u32::try_from(partials.len()).unwrap().to_le_bytes());
        for p in partials {
            l.extend_from_slice(p);
        }
        l
    }

    fn reader(l: &[u8]) -> impl FnMut(usize) -> u32 + '_ {
        move |at| u32_at(l, at).unwrap_or(0)
    }

    #[test]
    fn finds_the_io_range_after_other_resources() {
        let l = list(&[
            partial(3, 0, 0xFED0_0000, 0x400),           // memory
            partial(CM_RESOURCE_TYPE_PORT, 0, 0x6A0, 8), // memory-mapped "port"
            partial(CM_RESOURCE_TYPE_PORT, CM_RESOURCE_PORT_IO, 0x6B0, 4), // too short
            partial(CM_RESOURCE_TYPE_PORT, CM_RESOURCE_PORT_IO, 0x6A0, 8),
        ]);
        assert_eq!(list_len(reader(&l)), Ok(l.len()));
        assert_eq!(
            find_doorbell(&l),
            Ok(Some(PortRange {
                base: 0x6A0,
                length: 8
            }))
        );
    }

    #[test]
    fn no_port_and_malformed_lists() {
        let l = list(&[partial(2, 0, 9, 1)]);
        assert_eq!(find_doorbell(&l), Ok(None));
        assert_eq!(
            find_doorbell(&l[..l.len() - 1]),
            Err(ResourceError::Truncated)
        );
        let beyond = list(&[partial(
            CM_RESOURCE_TYPE_PORT,
            CM_RESOURCE_PORT_IO,
            0xFFFC,
            8,
        )]);
        assert_eq!(find_doorbell(&beyond), Ok(None));
        let mut many = l.clone();
        many[0] = 200;
        assert_eq!(find_doorbell(&many), Err(ResourceError::TooMany));
        assert_eq!(list_len(reader(&many)), Err(ResourceError::TooMany));
        assert_eq!(find_doorbell(&[]), Err(ResourceError::Truncated));
    }
}
