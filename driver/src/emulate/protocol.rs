//! The bytes exchanged with the runner over its stdin and stdout.
//!
//! Every target elfjit emulates is little-endian, so every field is a little-endian
//! 64-bit word, whatever the host. `runner.c` reads and writes the same layout.
//!
//! ```text
//! request = REQUEST_MAGIC, image_base, image_size,
//!           code_offset, code_size, rodata_offset, rodata_size, data_offset, data_size,
//!           shim, args_size, buffers_base, buffers_size       (13 words)
//!           image bytes, argument block, buffer contents
//! reply   = REPLY_MAGIC, return value (8 bytes), call time in ns (3 words)
//!           buffer contents after the call (buffers_size bytes)
//! ```

/// First word of a request ("ELJQR1" little-endian).
pub const REQUEST_MAGIC: u64 = 0x3152_514a_4c45;
/// First word of a reply ("ELJRP1" little-endian).
pub const REPLY_MAGIC: u64 = 0x3150_524a_4c45;
/// The largest argument block the runner accepts (bytes).
pub const MAX_ARGS_SIZE: usize = 4096;
/// Size of the request header.
pub const REQUEST_HEADER: usize = 13 * 8;
/// Size of the reply header.
pub const REPLY_HEADER: usize = 3 * 8;

/// Offset and size (whole pages) of one segment within the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentRange {
    /// Offset from the image base.
    pub offset: u64,
    /// Mapped bytes (0 for an empty segment).
    pub size: u64,
}

/// Everything the runner needs for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The target address the image was linked at.
    pub image_base: u64,
    /// The linked image (its length is a whole number of pages).
    pub image: &'a [u8],
    /// Code (read/execute), read-only data, writable data.
    pub segments: [SegmentRange; 3],
    /// Target address of `__elfjit_shim`.
    pub shim: u64,
    /// The packed argument block the shim unpacks.
    pub args: &'a [u8],
    /// Target address of the buffer region.
    pub buffers_base: u64,
    /// The buffer region's initial contents (the buffers at their offsets).
    pub buffers: &'a [u8],
}

impl Request<'_> {
    /// The request as sent on the runner's stdin (tests; the runner is sent
    /// [`Request::header`] and the three byte ranges without copying them into one).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            REQUEST_HEADER + self.image.len() + self.args.len() + self.buffers.len(),
        );
        out.extend_from_slice(&self.header());
        out.extend_from_slice(self.image);
        out.extend_from_slice(self.args);
        out.extend_from_slice(self.buffers);
        out
    }

    /// The 13 header words; the image, argument block and buffers follow them.
    pub fn header(&self) -> [u8; REQUEST_HEADER] {
        let words = [
            REQUEST_MAGIC,
            self.image_base,
            self.image.len() as u64,
            self.segments[0].offset,
            self.segments[0].size,
            self.segments[1].offset,
            self.segments[1].size,
            self.segments[2].offset,
            self.segments[2].size,
            self.shim,
            self.args.len() as u64,
            self.buffers_base,
            self.buffers.len() as u64,
        ];
        let mut out = [0u8; REQUEST_HEADER];
        for (slot, w) in out.chunks_exact_mut(8).zip(words) {
            slot.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// The runner's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The 8 bytes the shim stored for the return value (little-endian; unused bytes are
    /// whatever the runner's slot held, zero).
    pub ret: [u8; 8],
    /// The call's duration, measured in the runner.
    pub call_ns: u64,
    /// The buffer region after the call.
    pub buffers: Vec<u8>,
}

fn word(bytes: &[u8], index: usize) -> Option<u64> {
    let b = bytes.get(index * 8..index * 8 + 8)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

impl Reply {
    /// Parses a reply for a request whose buffer region was `buffers_size` bytes; the
    /// error says what is wrong with it.
    pub fn decode(bytes: &[u8], buffers_size: usize) -> Result<Reply, String> {
        let expected = REPLY_HEADER + buffers_size;
        if bytes.is_empty() {
            return Err("the runner sent no reply".into());
        }
        if word(bytes, 0) != Some(REPLY_MAGIC) {
            return Err("the runner's reply does not start with the reply magic".into());
        }
        if bytes.len() != expected {
            return Err(format!(
                "the runner's reply is {} bytes, expected {expected}",
                bytes.len()
            ));
        }
        let ret = word(bytes, 1).unwrap_or(0).to_le_bytes();
        let call_ns = word(bytes, 2).unwrap_or(0);
        Ok(Reply {
            ret,
            call_ns,
            buffers: bytes.get(REPLY_HEADER..).unwrap_or(&[]).to_vec(),
        })
    }

    /// The reply as the runner writes it (used by tests).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REPLY_HEADER + self.buffers.len());
        out.extend_from_slice(&REPLY_MAGIC.to_le_bytes());
        out.extend_from_slice(&self.ret);
        out.extend_from_slice(&self.call_ns.to_le_bytes());
        out.extend_from_slice(&self.buffers);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_matches_the_runner() {
        let image = [0xaau8; 16];
        let req = Request {
            image_base: 0x1000_0000,
            image: &image,
            segments: [
                SegmentRange {
                    offset: 0,
                    size: 0x1_0000,
                },
                SegmentRange::default(),
                SegmentRange {
                    offset: 0x2_0000,
                    size: 0x1_0000,
                },
            ],
            shim: 0x1000_0040,
            args: &[1, 2, 3],
            buffers_base: 0x4_0000_0000,
            buffers: &[9; 5],
        };
        let bytes = req.encode();
        assert_eq!(bytes.len(), REQUEST_HEADER + 16 + 3 + 5);
        let words: Vec<u64> = (0..13).map(|i| word(&bytes, i).unwrap()).collect();
        assert_eq!(
            words,
            [
                REQUEST_MAGIC,
                0x1000_0000,
                16,
                0,
                0x1_0000,
                0,
                0,
                0x2_0000,
                0x1_0000,
                0x1000_0040,
                3,
                0x4_0000_0000,
                5
            ]
        );
        assert_eq!(&bytes[..6], b"ELJQR1");
        assert_eq!(&bytes[REQUEST_HEADER..REQUEST_HEADER + 16], &image);
        assert_eq!(&bytes[REQUEST_HEADER + 16..REQUEST_HEADER + 19], &[1, 2, 3]);
        assert_eq!(&bytes[REQUEST_HEADER + 19..], &[9; 5]);
    }

    #[test]
    fn reply_round_trips_and_rejects_malformed() {
        let reply = Reply {
            ret: 42u64.to_le_bytes(),
            call_ns: 1234,
            buffers: vec![1, 2, 3, 4],
        };
        let bytes = reply.encode();
        assert_eq!(&bytes[..6], b"ELJRP1");
        assert_eq!(Reply::decode(&bytes, 4).unwrap(), reply);
        assert!(Reply::decode(&[], 4).unwrap_err().contains("no reply"));
        assert!(Reply::decode(&bytes, 5)
            .unwrap_err()
            .contains("expected 29"));
        assert!(Reply::decode(&bytes[..20], 0)
            .unwrap_err()
            .contains("bytes"));
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(Reply::decode(&bad, 4).unwrap_err().contains("magic"));
        assert!(Reply::decode(b"garbage", 0).is_err());
    }
}
