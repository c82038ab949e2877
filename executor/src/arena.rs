//! Host memory blocks: one aligned, fallibly allocated buffer per region (the arena, the
//! weights region, the host spill pool, and each tensor of the reference run), filled with
//! poison at allocation so never-written bytes are recognisable.

use super::data::{self, POISON_WORD};
use super::ExecError;

/// Base alignment of every buffer: 256 bytes, as `cudaMalloc` guarantees and the graphs'
/// default alignment, so offsets aligned in the plan are aligned in memory too.
pub const BASE_ALIGN: usize = 256;

#[derive(Clone, Copy)]
#[repr(C, align(256))]
struct Block([u8; BASE_ALIGN]);

// SAFETY: Block is a plain byte array with size == alignment (no padding, no invalid bit
// patterns, no pointers), which is exactly what Zeroable and Pod require.
unsafe impl bytemuck::Zeroable for Block {}
// SAFETY: see above.
unsafe impl bytemuck::Pod for Block {}

/// One aligned allocation of `len` bytes (rounded up to [`BASE_ALIGN`] internally).
pub struct AlignedBuf {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedBuf {
    /// Allocates `len` poisoned bytes; `what` names the region in the error.
    pub fn new(len: u64, what: &str) -> Result<Self, ExecError> {
        let oom = || ExecError::OutOfMemory {
            what: what.to_string(),
            bytes: len,
        };
        let len_us = usize::try_from(len).map_err(|_| oom())?;
        let n = len_us.div_ceil(BASE_ALIGN);
        let mut blocks = Vec::new();
        blocks.try_reserve_exact(n).map_err(|_| oom())?;
        let mut poison = [0u8; BASE_ALIGN];
        data::poison(&mut poison);
        debug_assert_eq!(&poison[..4], &POISON_WORD.to_le_bytes());
        blocks.resize(n, Block(poison));
        Ok(AlignedBuf {
            blocks,
            len: len_us,
        })
    }

    /// Bytes actually allocated (the length rounded up to the block size).
    pub fn allocated(&self) -> u64 {
        (self.blocks.len() * BASE_ALIGN) as u64
    }

    /// The buffer's bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<Block, u8>(&self.blocks)[..self.len]
    }

    /// The buffer's bytes, mutably.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<Block, u8>(&mut self.blocks)[..self.len]
    }
}

/// Splits `buf` into the sub-slices `ranges` (sorted by start, pairwise disjoint, in
/// bounds), in order; `None` if they are not.
pub fn split_disjoint<'a>(
    buf: &'a mut [u8],
    ranges: &[(usize, usize)],
) -> Option<Vec<&'a mut [u8]>> {
    let mut out = Vec::with_capacity(ranges.len());
    let mut rest: &'a mut [u8] = buf;
    let mut cursor = 0usize;
    for &(lo, hi) in ranges {
        if lo < cursor || hi < lo || hi - cursor > rest.len() {
            return None;
        }
        let taken = std::mem::take(&mut rest);
        let (_, tail) = taken.split_at_mut(lo - cursor);
        let (mid, tail) = tail.split_at_mut(hi - lo);
        out.push(mid);
        rest = tail;
        cursor = hi;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_poisoned_and_sized_as_asked() {
        let b = AlignedBuf::new(1000, "t").unwrap();
        assert_eq!(b.bytes().len(), 1000);
        assert_eq!(b.allocated(), 1024);
        assert_eq!(b.bytes().as_ptr() as usize % BASE_ALIGN, 0);
        assert_eq!(&b.bytes()[4..8], &POISON_WORD.to_le_bytes());
    }

    #[test]
    fn an_impossible_allocation_is_an_error_not_an_abort() {
        assert!(matches!(
            AlignedBuf::new(u64::MAX, "arena"),
            Err(ExecError::OutOfMemory { .. })
        ));
    }

    #[test]
    fn split_disjoint_refuses_overlaps_and_out_of_bounds_ranges() {
        let mut b = vec![0u8; 10];
        assert_eq!(
            split_disjoint(&mut b, &[(0, 2), (2, 5), (8, 10)])
                .unwrap()
                .len(),
            3
        );
        assert!(split_disjoint(&mut b, &[(0, 3), (2, 5)]).is_none());
        assert!(split_disjoint(&mut b, &[(8, 11)]).is_none());
    }
}
