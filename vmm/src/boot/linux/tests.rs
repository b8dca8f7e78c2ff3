use super::*;

/// A bzImage of one setup sector and a 0x800-byte protected-mode kernel whose payload is
/// bytes 0x100..0x700 of it: boot protocol 2.15, 64-bit entry.
fn bzimage() -> Vec<u8> {
    let mut f = vec![0u8; 0xc00];
    f[0x1f1] = 1;
    f[0x1f4..0x1f8].copy_from_slice(&0x80u32.to_le_bytes());
    f[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    f[0x202..0x206].copy_from_slice(b"HdrS");
    f[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    f[0x211] = 1;
    f[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
    f[0x236..0x238].copy_from_slice(&1u16.to_le_bytes());
    f[0x248..0x24c].copy_from_slice(&0x100u32.to_le_bytes());
    f[0x24c..0x250].copy_from_slice(&0x600u32.to_le_bytes());
    f
}

#[test]
fn consistent_header_passes() {
    assert_eq!(check_header(&bzimage()), Ok(()));
    // Padding after the kernel is allowed.
    let mut f = bzimage();
    f.extend([0; 100]);
    assert_eq!(check_header(&f), Ok(()));
}

#[test]
fn truncated_kernel_is_refused() {
    let f = bzimage();
    assert_eq!(
        check_header(&f[..0xbff]),
        Err(BzImageError::Truncated {
            syssize: 0x80,
            need: 0x800,
            have: 0x7ff
        })
    );
    // Cut inside the setup code: one sector of two.
    assert_eq!(
        check_header(&f[..0x300]),
        Err(BzImageError::Setup {
            sects: 1,
            setup: 0x400,
            len: 0x300
        })
    );
    assert!(matches!(
        check_header(&f[..0x100]),
        Err(BzImageError::Setup { .. })
    ));
}

#[test]
fn setup_sects_0_means_4() {
    let mut f = bzimage();
    f[0x1f1] = 0;
    // 5 x 512 = 0xa00 leaves 0x200 bytes of the file for a 0x800-byte kernel.
    assert_eq!(
        check_header(&f),
        Err(BzImageError::Truncated {
            syssize: 0x80,
            need: 0x800,
            have: 0x200
        })
    );
    f[0x1f4..0x1f8].copy_from_slice(&0x20u32.to_le_bytes());
    f[0x24c..0x250].copy_from_slice(&0x100u32.to_le_bytes());
    assert_eq!(check_header(&f), Ok(()));
}

#[test]
fn setup_sects_255_past_the_end() {
    let mut f = bzimage();
    f[0x1f1] = 255;
    assert_eq!(
        check_header(&f),
        Err(BzImageError::Setup {
            sects: 255,
            setup: 256 * 512,
            len: 0xc00
        })
    );
}

#[test]
fn boot_flag_and_syssize_are_checked() {
    let mut f = bzimage();
    f[0x1fe] = 0;
    assert_eq!(check_header(&f), Err(BzImageError::BootFlag(0xaa00)));
    let mut f = bzimage();
    f[0x1f4..0x1f8].fill(0);
    assert_eq!(check_header(&f), Err(BzImageError::NoKernel));
    f[0x1f4..0x1f8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        check_header(&f),
        Err(BzImageError::Truncated { need, .. }) if need == u64::from(u32::MAX) * 16
    ));
}

#[test]
fn payload_must_lie_in_the_kernel() {
    let mut f = bzimage();
    f[0x24c..0x250].copy_from_slice(&0x700u32.to_le_bytes());
    assert_eq!(
        check_header(&f),
        Ok(()),
        "0x100 + 0x700 = the kernel's 0x800"
    );
    f[0x24c..0x250].copy_from_slice(&0x701u32.to_le_bytes());
    assert_eq!(
        check_header(&f),
        Err(BzImageError::Payload {
            offset: 0x100,
            length: 0x701,
            kernel: 0x800
        })
    );
    f[0x248..0x250].fill(0xff);
    assert!(matches!(
        check_header(&f),
        Err(BzImageError::Payload { .. })
    ));
    // Before protocol 2.08 the fields do not exist.
    f[0x206..0x208].copy_from_slice(&0x0207u16.to_le_bytes());
    assert_eq!(check_header(&f), Ok(()));
}

#[test]
fn every_prefix_is_checked_without_panicking() {
    let f = bzimage();
    for cut in 0..f.len() {
        assert!(check_header(&f[..cut]).is_err(), "a {cut}-byte prefix");
    }
}

#[test]
fn loader_errors_print_their_message_once() {
    let e = linux_loader::loader::Error::Bzimage(linux_loader::loader::bzimage::Error::Underflow);
    // linux-loader's error shows its source's text and has it as its source too, so an
    // error chain printed it twice.
    let source = std::error::Error::source(&e).unwrap().to_string();
    assert!(e.to_string().contains(&source));
    let shown = BootError::Linux(Path::new("k").to_owned(), loader_message(&e)).to_string();
    assert_eq!(
        shown,
        "k: cannot load the bzImage: Kernel Loader: Underflow occurred during an arithmetic operation"
    );
    assert!(
        std::error::Error::source(&BootError::Linux(Path::new("k").to_owned(), source)).is_none()
    );
}

#[test]
fn syssize_is_16_bits_before_protocol_2_04() {
    let mut f = bzimage();
    f[0x206..0x208].copy_from_slice(&0x0203u16.to_le_bytes());
    // The upper half is something else in these versions.
    f[0x1f6..0x1f8].fill(0xff);
    assert_eq!(check_header(&f), Ok(()));
    f[0x206..0x208].copy_from_slice(&0x0204u16.to_le_bytes());
    assert!(matches!(
        check_header(&f),
        Err(BzImageError::Truncated { .. })
    ));
}
