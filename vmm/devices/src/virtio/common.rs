//! The common configuration structure of the virtio-pci transport (virtio 1.2, 4.1.4.3):
//! feature windows, device status and per-queue setup registers. Reads and writes of any
//! width at any offset are decoded field by field; the writes that need the transport
//! (status changes, enabling a queue) come back as events.

use super::queue::QueueRegs;
use super::NO_VECTOR;

/// Size of the structure (up to and including queue_device).
pub const COMMON_CONFIG_LEN: usize = 0x38;

/// What a write asks of the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommonEvent {
    /// The driver wrote the device status (0 = reset).
    Status(u8),
    /// The driver wrote 1 to queue_enable of this queue.
    EnableQueue(usize),
}

/// The registers.
#[derive(Clone, Debug)]
pub struct CommonConfig {
    /// The device's features.
    pub device_features: u64,
    /// The features the driver wrote.
    pub driver_features: u64,
    device_feature_select: u32,
    driver_feature_select: u32,
    /// Device status.
    pub status: u8,
    /// config_msix_vector: the MSI-X vector of configuration-change notifications.
    pub config_vector: u16,
    /// MSI-X table entries: a vector register takes values below this, or reads back
    /// [`NO_VECTOR`] (the driver's sign that the mapping failed).
    vectors: u16,
    queue_select: u16,
    /// Per-queue registers.
    pub queues: Vec<QueueRegs>,
}

#[derive(Clone, Copy)]
enum Field {
    DeviceFeatureSelect,
    DeviceFeature,
    DriverFeatureSelect,
    DriverFeature,
    ConfigMsixVector,
    NumQueues,
    DeviceStatus,
    ConfigGeneration,
    QueueSelect,
    QueueSize,
    QueueMsixVector,
    QueueEnable,
    QueueNotifyOff,
    QueueDescLo,
    QueueDescHi,
    QueueAvailLo,
    QueueAvailHi,
    QueueUsedLo,
    QueueUsedHi,
}

/// (offset, size, field)
const FIELDS: [(usize, usize, Field); 19] = [
    (0x00, 4, Field::DeviceFeatureSelect),
    (0x04, 4, Field::DeviceFeature),
    (0x08, 4, Field::DriverFeatureSelect),
    (0x0c, 4, Field::DriverFeature),
    (0x10, 2, Field::ConfigMsixVector),
    (0x12, 2, Field::NumQueues),
    (0x14, 1, Field::DeviceStatus),
    (0x15, 1, Field::ConfigGeneration),
    (0x16, 2, Field::QueueSelect),
    (0x18, 2, Field::QueueSize),
    (0x1a, 2, Field::QueueMsixVector),
    (0x1c, 2, Field::QueueEnable),
    (0x1e, 2, Field::QueueNotifyOff),
    (0x20, 4, Field::QueueDescLo),
    (0x24, 4, Field::QueueDescHi),
    (0x28, 4, Field::QueueAvailLo),
    (0x2c, 4, Field::QueueAvailHi),
    (0x30, 4, Field::QueueUsedLo),
    (0x34, 4, Field::QueueUsedHi),
];

fn low(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(0)
}

fn high(v: u64) -> u32 {
    u32::try_from(v >> 32).unwrap_or(0)
}

fn set_low(v: &mut u64, x: u32) {
    *v = (*v & !0xffff_ffff) | u64::from(x);
}

fn set_high(v: &mut u64, x: u32) {
    *v = (*v & 0xffff_ffff) | (u64::from(x) << 32);
}

impl CommonConfig {
    /// Registers after reset for a device offering `features` with queues of these sizes and
    /// `vectors` MSI-X table entries (0: no MSI-X).
    pub fn new(device_features: u64, queue_max_sizes: &[u16], vectors: u16) -> Self {
        CommonConfig {
            device_features,
            driver_features: 0,
            device_feature_select: 0,
            driver_feature_select: 0,
            status: 0,
            config_vector: NO_VECTOR,
            vectors,
            queue_select: 0,
            queues: queue_max_sizes.iter().map(|m| QueueRegs::new(*m)).collect(),
        }
    }

    /// Back to the reset state (features offered and queue sizes kept).
    pub fn reset(&mut self) {
        let max: Vec<u16> = self.queues.iter().map(|q| q.max_size).collect();
        *self = CommonConfig::new(self.device_features, &max, self.vectors);
    }

    fn selected(&self) -> Option<&QueueRegs> {
        self.queues.get(usize::from(self.queue_select))
    }

    fn field(&self, f: Field) -> u32 {
        let q = self.selected();
        let qv = |g: fn(&QueueRegs) -> u32| q.map_or(0, g);
        match f {
            Field::DeviceFeatureSelect => self.device_feature_select,
            Field::DeviceFeature => match self.device_feature_select {
                0 => low(self.device_features),
                1 => high(self.device_features),
                _ => 0,
            },
            Field::DriverFeatureSelect => self.driver_feature_select,
            Field::DriverFeature => match self.driver_feature_select {
                0 => low(self.driver_features),
                1 => high(self.driver_features),
                _ => 0,
            },
            Field::ConfigMsixVector => u32::from(self.config_vector),
            Field::QueueMsixVector => u32::from(q.map_or(NO_VECTOR, |q| q.vector)),
            Field::NumQueues => u32::try_from(self.queues.len()).unwrap_or(0),
            Field::DeviceStatus => u32::from(self.status),
            Field::ConfigGeneration => 0,
            Field::QueueSelect => u32::from(self.queue_select),
            // A queue that does not exist reads as size 0 (the driver stops there).
            Field::QueueSize => qv(|q| u32::from(q.size)),
            Field::QueueEnable => qv(|q| u32::from(q.enabled)),
            Field::QueueNotifyOff => q.map_or(0, |_| u32::from(self.queue_select)),
            Field::QueueDescLo => qv(|q| low(q.desc)),
            Field::QueueDescHi => qv(|q| high(q.desc)),
            Field::QueueAvailLo => qv(|q| low(q.avail)),
            Field::QueueAvailHi => qv(|q| high(q.avail)),
            Field::QueueUsedLo => qv(|q| low(q.used)),
            Field::QueueUsedHi => qv(|q| high(q.used)),
        }
    }

    fn image(&self) -> [u8; COMMON_CONFIG_LEN] {
        let mut img = [0u8; COMMON_CONFIG_LEN];
        for (off, size, f) in FIELDS {
            img[off..off + size].copy_from_slice(&self.field(f).to_le_bytes()[..size]);
        }
        img
    }

    /// Reads at `offset`; bytes past the structure read as zero.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        crate::bytes::read_padded(&self.image(), offset, data);
    }

    /// Writes at `offset`: every field the write touches takes its new value (partial
    /// writes merge with the current value).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Vec<CommonEvent> {
        let Ok(start) = usize::try_from(offset) else {
            return Vec::new();
        };
        let mut img = self.image();
        let end = start.saturating_add(data.len());
        for (i, b) in data.iter().enumerate() {
            if let Some(slot) = img.get_mut(start + i) {
                *slot = *b;
            }
        }
        let mut events = Vec::new();
        for (off, size, f) in FIELDS {
            if off >= end || off + size <= start {
                continue;
            }
            let mut v = [0u8; 4];
            v[..size].copy_from_slice(&img[off..off + size]);
            if let Some(e) = self.set_field(f, u32::from_le_bytes(v)) {
                events.push(e);
            }
        }
        events
    }

    /// What a vector register holds after the driver writes `v`: `v` if the table has that
    /// entry, else [`NO_VECTOR`].
    fn vector(&self, v: u32) -> u16 {
        match u16::try_from(v & 0xffff) {
            Ok(v) if v < self.vectors => v,
            _ => NO_VECTOR,
        }
    }

    fn set_field(&mut self, f: Field, v: u32) -> Option<CommonEvent> {
        let features_locked = self.status & super::STATUS_FEATURES_OK != 0;
        let index = usize::from(self.queue_select);
        let can_enable = self.queues.get(index).is_some_and(|q| !q.enabled);
        let q = self.queues.get_mut(index).filter(|q| !q.enabled);
        match f {
            Field::DeviceFeatureSelect => self.device_feature_select = v,
            Field::DriverFeatureSelect => self.driver_feature_select = v,
            Field::DriverFeature if !features_locked => match self.driver_feature_select {
                0 => set_low(&mut self.driver_features, v),
                1 => set_high(&mut self.driver_features, v),
                _ => {}
            },
            Field::DeviceStatus => {
                return Some(CommonEvent::Status(u8::try_from(v & 0xff).unwrap_or(0)))
            }
            Field::QueueSelect => self.queue_select = u16::try_from(v & 0xffff).unwrap_or(0),
            Field::ConfigMsixVector => self.config_vector = self.vector(v),
            Field::QueueMsixVector => {
                let vector = self.vector(v);
                if let Some(q) = self.queues.get_mut(index) {
                    q.vector = vector;
                }
            }
            Field::QueueEnable if v == 1 && can_enable => {
                return Some(CommonEvent::EnableQueue(index));
            }
            // Setup registers of an enabled queue are read-only.
            Field::QueueSize => {
                if let Some(q) = q {
                    q.size = u16::try_from(v & 0xffff).unwrap_or(0);
                }
            }
            Field::QueueDescLo => q.into_iter().for_each(|q| set_low(&mut q.desc, v)),
            Field::QueueDescHi => q.into_iter().for_each(|q| set_high(&mut q.desc, v)),
            Field::QueueAvailLo => q.into_iter().for_each(|q| set_low(&mut q.avail, v)),
            Field::QueueAvailHi => q.into_iter().for_each(|q| set_high(&mut q.avail, v)),
            Field::QueueUsedLo => q.into_iter().for_each(|q| set_low(&mut q.used, v)),
            Field::QueueUsedHi => q.into_iter().for_each(|q| set_high(&mut q.used, v)),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CommonConfig {
        CommonConfig::new(0x1_0000_0204, &[256], 2)
    }

    fn read32(c: &CommonConfig, off: u64) -> u32 {
        let mut b = [0; 4];
        c.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn feature_windows() {
        let mut c = cfg();
        assert_eq!(read32(&c, 4), 0x204);
        c.write(0, &1u32.to_le_bytes());
        assert_eq!(read32(&c, 4), 1);
        c.write(0, &2u32.to_le_bytes());
        assert_eq!(read32(&c, 4), 0);
        c.write(8, &1u32.to_le_bytes());
        c.write(0xc, &1u32.to_le_bytes());
        c.write(8, &0u32.to_le_bytes());
        c.write(0xc, &0x200u32.to_le_bytes());
        assert_eq!(c.driver_features, 0x1_0000_0200);
        // Locked once FEATURES_OK is set.
        c.status = super::super::STATUS_FEATURES_OK;
        c.write(0xc, &0u32.to_le_bytes());
        assert_eq!(c.driver_features, 0x1_0000_0200);
    }

    #[test]
    fn queue_registers_in_any_width() {
        let mut c = cfg();
        let mut b = [0; 2];
        c.read(0x18, &mut b);
        assert_eq!(u16::from_le_bytes(b), 256);
        c.write(0x18, &16u16.to_le_bytes());
        c.write(0x20, &0x1000u32.to_le_bytes());
        c.write(0x24, &0x2u32.to_le_bytes());
        // A single byte and a 64-bit write.
        c.write(0x29, &[0x20]);
        c.write(0x30, &0x0000_0001_0000_3000u64.to_le_bytes());
        let q = c.queues[0];
        assert_eq!(
            (q.size, q.desc, q.avail, q.used),
            (16, 0x2_0000_1000, 0x2000, 0x1_0000_3000)
        );
        assert_eq!(
            c.write(0x1c, &1u16.to_le_bytes()),
            vec![CommonEvent::EnableQueue(0)]
        );
        assert_eq!(c.write(0x1c, &0u16.to_le_bytes()), vec![]);
        assert_eq!(read32(&c, 0x10), 0x0001_ffff, "no MSI-X vector, one queue");
    }

    #[test]
    fn msix_vectors_take_table_entries_and_refuse_the_rest() {
        let mut c = cfg();
        let read16 = |c: &CommonConfig, off| {
            let mut b = [0; 2];
            c.read(off, &mut b);
            u16::from_le_bytes(b)
        };
        c.write(0x10, &1u16.to_le_bytes());
        c.write(0x1a, &0u16.to_le_bytes());
        assert_eq!((read16(&c, 0x10), read16(&c, 0x1a)), (1, 0));
        assert_eq!(c.queues[0].vector, 0);
        // Beyond the table (2 entries): NO_VECTOR, the driver's sign the mapping failed.
        c.write(0x10, &2u16.to_le_bytes());
        c.write(0x1a, &0x7fffu16.to_le_bytes());
        assert_eq!((read16(&c, 0x10), read16(&c, 0x1a)), (NO_VECTOR, NO_VECTOR));
        // A queue that does not exist has no vector.
        c.write(0x16, &5u16.to_le_bytes());
        c.write(0x1a, &1u16.to_le_bytes());
        assert_eq!(read16(&c, 0x1a), NO_VECTOR);
        // Reset forgets the mapping; a device without MSI-X refuses every vector.
        c.write(0x16, &0u16.to_le_bytes());
        c.write(0x1a, &1u16.to_le_bytes());
        c.reset();
        assert_eq!(
            (c.config_vector, c.queues[0].vector),
            (NO_VECTOR, NO_VECTOR)
        );
        let mut none = CommonConfig::new(0, &[8], 0);
        none.write(0x10, &0u16.to_le_bytes());
        assert_eq!(none.config_vector, NO_VECTOR);
    }

    #[test]
    fn missing_queue_reads_zero_and_ignores_writes() {
        let mut c = cfg();
        c.write(0x16, &5u16.to_le_bytes());
        let mut b = [0; 2];
        c.read(0x18, &mut b);
        assert_eq!(b, [0, 0]);
        assert_eq!(c.write(0x1c, &1u16.to_le_bytes()), vec![]);
        c.write(0x20, &0x1000u32.to_le_bytes());
        assert_eq!(c.queues[0].desc, 0);
    }

    #[test]
    fn enabled_queue_is_read_only() {
        let mut c = cfg();
        c.queues[0].enabled = true;
        c.write(0x18, &8u16.to_le_bytes());
        c.write(0x20, &0x1000u32.to_le_bytes());
        assert_eq!(c.queues[0].size, 256);
        assert_eq!(c.queues[0].desc, 0);
    }

    #[test]
    fn status_write_is_an_event_and_reads_past_the_end_are_zero() {
        let mut c = cfg();
        assert_eq!(c.write(0x14, &[3]), vec![CommonEvent::Status(3)]);
        let mut b = [0xff; 8];
        c.read(0x36, &mut b);
        assert_eq!(b, [0; 8]);
        assert!(c.write(0x100, &[1]).is_empty());
        assert!(c.write(u64::MAX, &[1]).is_empty());
    }
}
