//! placeholder
use super::TypeError;
/// Reads a layout.
pub fn linux_layout(_f: &object::File) -> Result<introspect::os::LinuxLayout, TypeError> {
    Err(TypeError::NoTypes)
}
