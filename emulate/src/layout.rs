//! Fixed addresses in the emulated process (see the crate documentation's table): where
//! the image, the runner, its far function and the argument buffers live.

/// Where the image is linked and mapped.
pub const IMAGE_BASE: u64 = 0x1000_0000;
/// Where the runner program is linked (the image must end below it).
pub const RUNNER_BASE: u64 = 0x1100_0000;
/// The largest image an emulated run accepts.
pub const IMAGE_LIMIT: u64 = RUNNER_BASE - IMAGE_BASE;
/// Where the runner's `elfjit_far_add` is linked: more than 4 GiB from the image.
pub const FAR_ADDRESS: u64 = 0x2_1000_0000;
/// Where the argument buffers are mapped.
pub const BUFFER_BASE: u64 = 0x4_0000_0000;
/// Segment alignment of emulated images.
pub const PAGE_SIZE: u64 = 0x1_0000;
