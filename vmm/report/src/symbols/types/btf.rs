//! placeholder
use super::TypeError;
/// Why BTF could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// Too short.
    #[error("truncated")]
    Truncated,
}
/// Reads a layout.
pub fn linux_layout(_b: &[u8]) -> Result<introspect::os::LinuxLayout, TypeError> {
    Err(BtfError::Truncated.into())
}
