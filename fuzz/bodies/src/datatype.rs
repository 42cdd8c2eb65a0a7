//! Datatype constructors' arguments: the counts, lengths, strides and displacements a program
//! (or the C library, for `MPI_Type_vector`, `_indexed` and the rest) hands to ch4-core's
//! layouts, and the packing every noncontiguous send and receive goes through.

use ch4_core::datatype::Layout;

use crate::input::Input;

/// The most buffer a layout may span for the body to pack it (larger ones are only built).
const EXTENT_MAX: usize = 1 << 16;

/// A vector or indexed layout from the input's arguments: it is built or refused with an
/// error (overflow, overlap), never a panic; one that fits [`EXTENT_MAX`] packs to exactly its
/// packed size, unpacks back to the bytes it covers whatever the pieces the packed stream comes
/// in, and never reads or writes past its extent (the buffers are exactly that long, for
/// AddressSanitizer). Input: a byte choosing the constructor, its arguments, then piece sizes.
pub fn datatypes(data: &[u8]) {
    let mut input = Input::new(data);
    let kind = input.u8();
    let layout = if kind & 1 == 0 {
        // Small arguments mostly, huge ones sometimes (the overflow checks).
        let arg = |input: &mut Input| -> usize {
            let v = input.u16() as usize;
            if v & 0x8000 != 0 {
                usize::MAX >> (v & 0x3F)
            } else {
                v & 0xFF
            }
        };
        let (count, blocklen, stride) = (arg(&mut input), arg(&mut input), arg(&mut input));
        match kind >> 1 & 3 {
            0 => Layout::vector::<u8>(count, blocklen, stride),
            1 => Layout::vector::<u32>(count, blocklen, stride),
            2 => Layout::vector::<[u8; 24]>(count, blocklen, stride),
            _ => Layout::contiguous::<u64>(count),
        }
    } else {
        let n = usize::from(input.u8() % 16);
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            let disp = input.u16() as usize;
            let len = usize::from(input.u8());
            let disp = if disp & 0x8000 != 0 {
                usize::MAX - (disp & 0xFF)
            } else {
                disp
            };
            blocks.push((disp, len));
        }
        if kind & 2 == 0 {
            Layout::indexed::<u8>(&blocks)
        } else {
            Layout::indexed::<u16>(&blocks)
        }
    };
    let Ok(layout) = layout else {
        return;
    };
    let extent = layout.extent_bytes();
    let packed = layout.packed_bytes();
    assert!(packed <= extent || layout.is_contiguous());
    if extent > EXTENT_MAX {
        return; // its blocks may be too many to walk in a fuzz run
    }
    assert_eq!(layout.blocks().map(|(_, len)| len).sum::<usize>(), packed);
    assert!(layout.check_fits(extent).is_ok());
    assert!(extent == 0 || layout.check_fits(extent - 1).is_err());
    let src: Vec<u8> = (0..extent).map(|i| (i * 131 + 7) as u8).collect();
    let wire = layout
        .pack(&src)
        .expect("a buffer of the layout's extent packs");
    assert_eq!(wire.len(), packed);
    // The packed stream in pieces, in order, then the other way round: the same buffer.
    let pieces = input.pieces();
    for reverse in [false, true] {
        let mut dst = vec![0u8; extent];
        let mut spans = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < packed {
            let n = pieces[i % pieces.len()].min(packed - at);
            spans.push((at, n));
            at += n;
            i += 1;
        }
        if reverse {
            spans.reverse();
        }
        for (at, n) in spans {
            let mut out = vec![0u8; n];
            assert_eq!(layout.pack_range(&src, at, &mut out).expect("in range"), n);
            assert_eq!(out, wire[at..at + n]);
            assert_eq!(layout.unpack_range(&mut dst, at, &out).expect("fits"), n);
        }
        for (off, len) in layout.blocks() {
            assert_eq!(dst[off..off + len], src[off..off + len]);
        }
    }
    // Past the end: nothing is written, nothing fails.
    let mut dst = vec![0u8; extent];
    assert_eq!(
        layout
            .unpack_range(&mut dst, packed, &[1, 2, 3])
            .expect("fits"),
        0
    );
}
