//! Little-endian field codecs and the `wire_struct!` macro that defines a `repr(C)` struct
//! together with its byte codec. The macro asserts at compile time that the fields add up to
//! the declared size, so the struct has no implicit padding and field `k` sits at the sum of
//! the sizes before it: the Rust layout, the C layout in docs/abi.md and the codec agree.

/// A fixed-size wire layout.
pub trait Wire: Sized {
    /// Bytes on the wire (equal to `size_of::<Self>()`).
    const SIZE: usize;
    /// Reads from the first `SIZE` bytes; `None` if `bytes` is shorter.
    fn decode(bytes: &[u8]) -> Option<Self>;
    /// Writes into the first `SIZE` bytes; `None` if `out` is shorter.
    fn encode(&self, out: &mut [u8]) -> Option<usize>;
}

/// A scalar field (u16, u32, u64), little-endian.
pub trait Field: Sized {
    /// Reads at `*at` and advances it. The caller guarantees the bytes are there.
    fn get(bytes: &[u8], at: &mut usize) -> Self;
    /// Writes at `*at` and advances it. The caller guarantees the bytes are there.
    fn put(&self, bytes: &mut [u8], at: &mut usize);
}

macro_rules! field {
    ($ty:ty, $n:expr) => {
        impl Field for $ty {
            #[inline]
            fn get(bytes: &[u8], at: &mut usize) -> Self {
                let mut raw = [0u8; $n];
                raw.copy_from_slice(&bytes[*at..*at + $n]);
                *at += $n;
                <$ty>::from_le_bytes(raw)
            }
            #[inline]
            fn put(&self, bytes: &mut [u8], at: &mut usize) {
                bytes[*at..*at + $n].copy_from_slice(&self.to_le_bytes());
                *at += $n;
            }
        }
    };
}
field!(u16, 2);
field!(u32, 4);
field!(u64, 8);

/// Defines a `#[repr(C)]` struct of scalar fields with a [`Wire`] impl and size assertions.
/// Exported so agents define their own messages (e.g. the Windows IOCTL layouts) the same way.
#[macro_export]
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident ($size:expr) {
            $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
        #[repr(C)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        const _: () = assert!(core::mem::size_of::<$name>() == $size);
        const _: () = assert!(0 $(+ core::mem::size_of::<$ty>())* == $size);

        impl $crate::abi::wire::Wire for $name {
            const SIZE: usize = $size;

            #[allow(unused_variables, unused_mut)]
            fn decode(bytes: &[u8]) -> Option<Self> {
                let bytes = bytes.get(..$size)?;
                let mut at = 0usize;
                $(let $field = <$ty as $crate::abi::wire::Field>::get(bytes, &mut at);)*
                Some($name { $($field,)* })
            }

            #[allow(unused_variables, unused_mut)]
            fn encode(&self, out: &mut [u8]) -> Option<usize> {
                let out = out.get_mut(..$size)?;
                let mut at = 0usize;
                $($crate::abi::wire::Field::put(&self.$field, out, &mut at);)*
                Some($size)
            }
        }
    };
}
