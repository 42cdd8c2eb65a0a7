//! Derived datatypes: every constructor flattens its type map into byte blocks of one element
//! (offset, length, in typemap order, neighbours merged) with the element's lower bound and
//! extent, as MPI defines them. A message of `count` elements is then a `ch4_core` [`Layout`]
//! of byte blocks (element `k` shifted by `k * extent`), relative to its lowest byte, and the
//! device moves it as any layout: in place where the transport can, packed where it cannot.
//!
//! A datatype that is one block at offset 0 as long as its extent (`MPI_Type_contiguous` of a
//! predefined type, say) takes the same path as a predefined one: no layout at all.
//!
//! Not supported (an error that says so): type maps whose blocks overlap (MPI allows them in
//! send types only; a layout does not know which way it will be used).

use std::ffi::{c_char, c_int};

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::datatype::Layout;
use ch4_core::ErrorKind;

use crate::abi::{self, Handle};
use crate::call::{call, null_arg, put, put_string};
use crate::datatype::{self, raw, raw_mut};
use crate::state::State;

const TYPE_BIT: u64 = 1 << 60;

/// The C handle of derived datatype `i`.
fn type_out(i: usize) -> Handle {
    (i as u64 | TYPE_BIT) as Handle
}

/// The table index of a derived datatype handle.
fn type_in(h: Handle) -> Option<usize> {
    let raw = h as u64;
    (raw & TYPE_BIT != 0 && raw >> 61 == 0).then_some((raw & !TYPE_BIT) as usize)
}

/// One element of a datatype, in bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Desc {
    /// The element's data: (offset from the buffer address, length), in typemap order.
    pub blocks: Vec<(isize, usize)>,
    /// Bytes of data (the type's size).
    pub size: usize,
    /// Lower bound and extent (the stride between consecutive elements).
    pub lb: isize,
    /// The extent.
    pub extent: isize,
    /// How many predefined elements one element holds (for `MPI_Get_elements`).
    pub elements: usize,
    /// Whether it was committed (only committed types may be used in communication).
    pub committed: bool,
    /// Its name (`MPI_Type_set_name`).
    pub name: Option<String>,
}

impl Desc {
    /// A predefined datatype.
    fn predefined(dt: Handle) -> Option<Desc> {
        let (blocks, extent, elements): (Vec<(isize, usize)>, isize, usize) = match dt {
            0x229 | 0x22a => (vec![(0, 8), (8, 4)], 16, 2), // DOUBLE_INT, LONG_INT
            0x22c => (vec![(0, 2), (4, 4)], 8, 2),          // SHORT_INT
            0x22d => (vec![(0, 16), (16, 4)], 32, 2),       // LONG_DOUBLE_INT
            0x228 | 0x22b | 0x230..=0x232 => {
                let s = datatype::size_of(dt)?;
                (vec![(0, s)], s as isize, 2)
            }
            _ => {
                let s = datatype::size_of(dt)?;
                (vec![(0, s)], s as isize, 1)
            }
        };
        Some(Desc {
            size: blocks.iter().map(|b| b.1).sum(),
            blocks,
            lb: 0,
            extent,
            elements,
            committed: true,
            name: None,
        })
    }

    /// Whether `count` elements are one block at the buffer address.
    pub fn contiguous(&self) -> bool {
        self.lb == 0
            && self.extent == self.size as isize
            && (self.size == 0 || self.blocks == [(0, self.size)])
    }

    /// A type made of runs of copies of `old`: for each `(start, n)`, `n` copies one extent
    /// apart from byte `start`, in order. Displacements are computed in `i128` and must fit
    /// an address offset (an error otherwise, never a wrapped value).
    fn of_copies(old: &Desc, runs: impl Iterator<Item = (i128, usize)>) -> ch4::Result<Desc> {
        let fit = |v: i128| isize::try_from(v).map_err(|_| too_big());
        let mut blocks: Vec<(isize, usize)> = Vec::new();
        let (mut lo, mut hi) = (i128::MAX, i128::MIN);
        let mut copies = 0usize;
        for (start, n) in runs {
            for j in 0..n as i128 {
                let d = start + j * old.extent as i128;
                copies += 1;
                lo = lo.min(d + old.lb as i128);
                hi = hi.max(d + old.lb as i128 + old.extent as i128);
                for &(o, l) in &old.blocks {
                    append(&mut blocks, fit(d + o as i128)?, l);
                }
            }
        }
        if copies == 0 {
            (lo, hi) = (0, 0);
        }
        Ok(Desc {
            size: old.size.checked_mul(copies).ok_or_else(too_big)?,
            blocks,
            lb: fit(lo)?,
            extent: fit(hi - lo)?,
            elements: old.elements.checked_mul(copies).ok_or_else(too_big)?,
            committed: false,
            name: None,
        })
    }

    /// The parts one after the other in the type map (`MPI_Type_create_struct`): the bounds
    /// span all parts that hold data.
    fn concat(parts: &[Desc]) -> ch4::Result<Desc> {
        let mut d = Desc {
            blocks: Vec::new(),
            size: 0,
            lb: 0,
            extent: 0,
            elements: 0,
            committed: false,
            name: None,
        };
        let (mut lo, mut hi) = (i128::MAX, i128::MIN);
        for p in parts.iter().filter(|p| p.elements > 0) {
            lo = lo.min(p.lb as i128);
            hi = hi.max(p.lb as i128 + p.extent as i128);
            d.size = d.size.checked_add(p.size).ok_or_else(too_big)?;
            d.elements = d.elements.checked_add(p.elements).ok_or_else(too_big)?;
            for &(o, l) in &p.blocks {
                append(&mut d.blocks, o, l);
            }
        }
        if d.elements > 0 {
            d.lb = isize::try_from(lo).map_err(|_| too_big())?;
            d.extent = isize::try_from(hi - lo).map_err(|_| too_big())?;
        }
        Ok(d)
    }

    /// The layout of `count` elements, and the byte offset (from the buffer address) where it
    /// starts. Its block list is allocated fallibly: a count too large for memory is an error.
    fn layout(&self, count: usize) -> ch4::Result<(isize, Layout)> {
        let n = self.blocks.len().checked_mul(count).ok_or_else(too_big)?;
        let mut all: Vec<(i128, usize)> = Vec::new();
        all.try_reserve_exact(n).map_err(|_| too_big())?;
        for k in 0..count as i128 {
            let shift = k * self.extent as i128;
            all.extend(self.blocks.iter().map(|&(o, l)| (o as i128 + shift, l)));
        }
        let base = all.iter().map(|b| b.0).min().unwrap_or(0);
        let mut rel: Vec<(usize, usize)> = Vec::new();
        rel.try_reserve_exact(n).map_err(|_| too_big())?;
        for &(o, l) in &all {
            rel.push((usize::try_from(o - base).map_err(|_| too_big())?, l));
        }
        let layout = Layout::indexed::<u8>(&rel).map_err(|e| {
            ch4::Error::new(
                e.kind(),
                format!("this datatype cannot be used here: {}", e.detail()),
            )
        })?;
        Ok((isize::try_from(base).map_err(|_| too_big())?, layout))
    }
}

/// Appends block `(o, l)`, merged into the last one when it continues it.
fn append(blocks: &mut Vec<(isize, usize)>, o: isize, l: usize) {
    match blocks.last_mut() {
        Some(prev) if prev.0.checked_add(prev.1 as isize) == Some(o) => prev.1 += l,
        _ => blocks.push((o, l)),
    }
}

#[cold]
fn too_big() -> ch4::Error {
    ch4::Error::new(ErrorKind::Count, "the datatype's size overflows")
}

/// The description of datatype `dt` (predefined or derived).
pub(crate) fn desc(st: &State, dt: Handle) -> ch4::Result<Desc> {
    if let Some(d) = Desc::predefined(dt) {
        return Ok(d);
    }
    type_in(dt)
        .and_then(|i| st.types.get(i).and_then(Option::as_ref))
        .cloned()
        .ok_or_else(|| datatype::bad_type(dt))
}

fn add_type(st: &mut State, d: Desc) -> Handle {
    match st.types.iter().position(Option::is_none) {
        Some(i) => {
            st.types[i] = Some(d);
            type_out(i)
        }
        None => {
            st.types.push(Some(d));
            type_out(st.types.len() - 1)
        }
    }
}

fn count_of(n: c_int, what: &str) -> ch4::Result<usize> {
    usize::try_from(n)
        .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("{what} {n} is negative")))
}

/// `n` ints of a C array.
///
/// # Safety
/// `a` has `n` ints (or `n` is 0).
unsafe fn ints<'a>(a: *const c_int, n: usize) -> ch4::Result<&'a [c_int]> {
    if n == 0 {
        return Ok(&[]);
    }
    if a.is_null() {
        return Err(null_arg("an array argument"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(a, n) })
}

/// The send buffer of `count` elements of `dt` at `buf`, with the device's layout when the
/// type is not contiguous.
///
/// # Safety
/// The elements are readable (and unchanged) for as long as the request lives.
pub(crate) unsafe fn send_buf(
    st: &State,
    buf: *const u8,
    count: c_int,
    dt: Handle,
) -> ch4::Result<SendBuf> {
    let d = desc(st, dt)?;
    let n = count_of(count, "count")?;
    if !d.committed {
        return Err(uncommitted());
    }
    if d.contiguous() {
        // SAFETY: the caller's contract.
        return Ok(unsafe { SendBuf::borrowed(raw(buf, n * d.size)?) });
    }
    let (base, layout) = d.layout(n)?;
    let len = layout.extent_bytes();
    // SAFETY: the caller's contract: every byte of the elements is at buf + base + [0, len).
    unsafe { SendBuf::borrowed_with_layout(raw(buf.wrapping_offset(base), len)?, layout) }
}

/// The receive buffer of `count` elements of `dt` at `buf`.
///
/// # Safety
/// The elements are writable, and nobody else's, for as long as the request lives.
pub(crate) unsafe fn recv_buf(
    st: &State,
    buf: *mut u8,
    count: c_int,
    dt: Handle,
) -> ch4::Result<RecvBuf> {
    let d = desc(st, dt)?;
    let n = count_of(count, "count")?;
    if !d.committed {
        return Err(uncommitted());
    }
    if d.contiguous() {
        // SAFETY: the caller's contract.
        return Ok(unsafe { RecvBuf::borrowed(raw_mut(buf, n * d.size)?) });
    }
    let (base, layout) = d.layout(n)?;
    let len = layout.extent_bytes();
    // SAFETY: the caller's contract: every byte of the elements is at buf + base + [0, len).
    unsafe { RecvBuf::borrowed_with_layout(raw_mut(buf.wrapping_offset(base), len)?, layout) }
}

#[cold]
fn uncommitted() -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Buffer,
        "the datatype was not committed (MPI_Type_commit)",
    )
}

/// Makes a new type with `make` from `oldtype`'s description, writing its handle.
///
/// # Safety
/// `newtype` is writable.
unsafe fn construct(
    func: &'static str,
    oldtype: Handle,
    newtype: *mut Handle,
    make: impl FnOnce(&Desc) -> ch4::Result<Desc>,
) -> c_int {
    call(abi::COMM_WORLD, func, |st| {
        if newtype.is_null() {
            return Err(null_arg("the new datatype"));
        }
        let old = desc(st, oldtype)?;
        let new = make(&old)?;
        let h = add_type(st, new);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

/// `MPI_Type_contiguous`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_contiguous(
    count: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_contiguous", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            Desc::of_copies(old, std::iter::once((0, n)))
        })
    }
}

/// `MPI_Type_vector`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_vector", oldtype, newtype, |old| {
            let (n, b) = (
                count_of(count, "count")?,
                count_of(blocklength, "blocklength")?,
            );
            let s = stride as i128 * old.extent as i128;
            Desc::of_copies(old, (0..n as i128).map(|i| (i * s, b)))
        })
    }
}

/// `MPI_Type_create_hvector` (stride in bytes).
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hvector", oldtype, newtype, |old| {
            let (n, b) = (
                count_of(count, "count")?,
                count_of(blocklength, "blocklength")?,
            );
            Desc::of_copies(old, (0..n as i128).map(|i| (i * stride as i128, b)))
        })
    }
}

/// Blocks of copies: `lens[i]` copies of `old` from byte displacement `disps[i]`.
fn blocks_of(old: &Desc, lens: &[usize], disps: &[i128]) -> ch4::Result<Desc> {
    Desc::of_copies(old, disps.iter().zip(lens).map(|(&d, &l)| (d, l)))
}

/// `MPI_Type_indexed` (displacements in extents of `oldtype`).
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_indexed", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            let lens = ints(array_of_blocklengths, n)?
                .iter()
                .map(|&l| count_of(l, "block length"))
                .collect::<ch4::Result<Vec<_>>>()?;
            let disps: Vec<i128> = ints(array_of_displacements, n)?
                .iter()
                .map(|&d| d as i128 * old.extent as i128)
                .collect();
            blocks_of(old, &lens, &disps)
        })
    }
}

/// `MPI_Type_create_indexed_block`.
///
/// # Safety
/// `array_of_displacements` has `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_indexed_block", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            let lens = vec![count_of(blocklength, "blocklength")?; n];
            let disps: Vec<i128> = ints(array_of_displacements, n)?
                .iter()
                .map(|&d| d as i128 * old.extent as i128)
                .collect();
            blocks_of(old, &lens, &disps)
        })
    }
}

/// `MPI_Type_create_hindexed` (displacements in bytes).
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hindexed", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            let lens = ints(array_of_blocklengths, n)?
                .iter()
                .map(|&l| count_of(l, "block length"))
                .collect::<ch4::Result<Vec<_>>>()?;
            if n > 0 && array_of_displacements.is_null() {
                return Err(null_arg("the displacements"));
            }
            let disps: Vec<i128> = if n == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(array_of_displacements, n)
                    .iter()
                    .map(|&d| d as i128)
                    .collect()
            };
            blocks_of(old, &lens, &disps)
        })
    }
}

/// `MPI_Type_create_struct`.
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const isize,
    array_of_types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_create_struct", |st| {
        if newtype.is_null() {
            return Err(null_arg("the new datatype"));
        }
        let n = count_of(count, "count")?;
        // SAFETY: the caller's contract: `n` entries each.
        let lens = unsafe { ints(array_of_blocklengths, n) }?;
        if n > 0 && (array_of_displacements.is_null() || array_of_types.is_null()) {
            return Err(null_arg("the displacements or the types"));
        }
        let (disps, types) = if n == 0 {
            (&[][..], &[][..])
        } else {
            // SAFETY: the caller's contract.
            unsafe {
                (
                    std::slice::from_raw_parts(array_of_displacements, n),
                    std::slice::from_raw_parts(array_of_types, n),
                )
            }
        };
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let old = desc(st, types[i])?;
            let len = count_of(lens[i], "block length")?;
            parts.push(Desc::of_copies(
                &old,
                std::iter::once((disps[i] as i128, len)),
            )?);
        }
        let h = add_type(st, Desc::concat(&parts)?);
        // SAFETY: checked non-null.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

/// `MPI_Type_create_resized`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_resized(
    oldtype: Handle,
    lb: isize,
    extent: isize,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_resized", oldtype, newtype, |old| {
            Ok(Desc {
                lb,
                extent,
                committed: false,
                name: None,
                ..old.clone()
            })
        })
    }
}

/// `MPI_Type_dup`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_dup(oldtype: Handle, newtype: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_dup", oldtype, newtype, |old| {
            Ok(Desc {
                committed: true,
                ..old.clone()
            })
        })
    }
}

/// `MPI_Type_commit`.
///
/// # Safety
/// `datatype` is readable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_commit", |st| {
        if datatype.is_null() {
            return Err(null_arg("the datatype"));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { datatype.read() };
        if Desc::predefined(h).is_some() {
            return Ok(());
        }
        match type_in(h).and_then(|i| st.types.get_mut(i).and_then(Option::as_mut)) {
            Some(d) => {
                d.committed = true;
                Ok(())
            }
            None => Err(datatype::bad_type(h)),
        }
    })
}

/// `MPI_Type_free`: the handle becomes `MPI_DATATYPE_NULL`; predefined types cannot be freed.
///
/// # Safety
/// `datatype` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_free", |st| {
        if datatype.is_null() {
            return Err(null_arg("the datatype"));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { datatype.read() };
        match type_in(h).filter(|&i| st.types.get(i).is_some_and(Option::is_some)) {
            Some(i) => {
                st.types[i] = None;
                // SAFETY: the caller's contract.
                unsafe { datatype.write(0x200) };
                Ok(())
            }
            None => Err(ch4::Error::new(
                ErrorKind::Arg,
                "only a derived datatype can be freed",
            )),
        }
    })
}

/// `MPI_Type_size`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size(datatype: Handle, size: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_size", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, c_int::try_from(d.size).unwrap_or(abi::UNDEFINED)) };
        Ok(())
    })
}

/// `MPI_Type_size_c` / `MPI_Type_size_x`: the size as an `MPI_Count`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size_c(datatype: Handle, size: *mut i64) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_size_c", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, d.size as i64) };
        Ok(())
    })
}

/// `MPI_Type_size_x`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size_x(datatype: Handle, size: *mut i64) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Type_size_c(datatype, size) }
}

/// `MPI_Type_get_extent`.
///
/// # Safety
/// `lb` and `extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent(
    datatype: Handle,
    lb: *mut isize,
    extent: *mut isize,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_extent", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(lb, d.lb);
            put(extent, d.extent);
        }
        Ok(())
    })
}

/// `MPI_Type_get_true_extent`: the span of the data itself.
///
/// # Safety
/// `true_lb` and `true_extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_true_extent(
    datatype: Handle,
    true_lb: *mut isize,
    true_extent: *mut isize,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_true_extent", |st| {
        let d = desc(st, datatype)?;
        let lo = d.blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let hi = d
            .blocks
            .iter()
            .map(|b| b.0 + b.1 as isize)
            .max()
            .unwrap_or(0);
        // SAFETY: the caller's contract.
        unsafe {
            put(true_lb, lo);
            put(true_extent, hi - lo);
        }
        Ok(())
    })
}

/// `MPI_Type_get_name`: a predefined type's MPI name, a derived type's given name (or none).
///
/// # Safety
/// `type_name` has `MPI_MAX_OBJECT_NAME` bytes; `resultlen` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_name(
    datatype: Handle,
    type_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_name", |st| {
        let name = match datatype::name_of(datatype) {
            Some(n) => n.to_string(),
            None => desc(st, datatype)?.name.unwrap_or_default(),
        };
        // SAFETY: the caller's contract.
        unsafe { put_string(&name, type_name, abi::MAX_OBJECT_NAME, resultlen) };
        Ok(())
    })
}

/// `MPI_Type_set_name` (derived types).
///
/// # Safety
/// `type_name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_set_name(datatype: Handle, type_name: *const c_char) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_set_name", |st| {
        if type_name.is_null() {
            return Err(null_arg("the name"));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { std::ffi::CStr::from_ptr(type_name) }
            .to_string_lossy()
            .into_owned();
        match type_in(datatype).and_then(|i| st.types.get_mut(i).and_then(Option::as_mut)) {
            Some(d) => {
                d.name = Some(name);
                Ok(())
            }
            None => Err(ch4::Error::new(
                ErrorKind::Arg,
                "a predefined datatype's name cannot be changed",
            )),
        }
    })
}

/// The element count of `bytes` of `dt` (`MPI_Get_count`): `None` when not whole.
pub(crate) fn count_in(st: &State, bytes: u64, dt: Handle) -> ch4::Result<Option<u64>> {
    let d = desc(st, dt)?;
    Ok(if d.size == 0 {
        Some(0)
    } else if bytes % d.size as u64 == 0 {
        Some(bytes / d.size as u64)
    } else {
        None
    })
}

/// The predefined elements in `bytes` of `dt` (`MPI_Get_elements`): whole elements of the
/// type, plus the predefined elements of a partial one.
pub(crate) fn elements_in(st: &State, bytes: u64, dt: Handle) -> ch4::Result<Option<u64>> {
    let d = desc(st, dt)?;
    if d.size == 0 {
        return Ok(Some(0));
    }
    let whole = bytes / d.size as u64;
    let mut rest = bytes % d.size as u64;
    let mut n = whole * d.elements as u64;
    if rest > 0 {
        // A partial element counts the basic elements that arrived whole: with one basic size
        // per block (blocks of a single predefined type), a division.
        let basic = (d.size / d.elements.max(1)) as u64;
        if basic == 0 || rest % basic != 0 {
            return Ok(None);
        }
        n += rest / basic;
        rest = 0;
    }
    Ok((rest == 0).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_of_ints_is_strided_blocks_with_the_standards_extent() {
        let int = Desc::predefined(0x209).unwrap();
        let v = Desc::of_copies(&int, (0..3).map(|i| (i * 5 * 4, 2))).unwrap();
        assert_eq!(v.blocks, vec![(0, 8), (20, 8), (40, 8)]);
        assert_eq!((v.size, v.lb, v.extent, v.elements), (24, 0, 48, 6));
        let (base, layout) = v.layout(2).unwrap();
        assert_eq!(base, 0);
        assert_eq!(layout.packed_bytes(), 48);
        assert_eq!(layout.extent_bytes(), 48 + 48);
        assert!(!v.contiguous());
        let c = Desc::of_copies(&int, std::iter::once((0, 4))).unwrap();
        assert!(c.contiguous(), "{c:?}");
        // A stride that does not fit an address offset is an error, not a wrapped value.
        let e = Desc::of_copies(&int, (0..2).map(|i| (i * (i64::MAX as i128) * 4, 1)));
        assert_eq!(e.unwrap_err().kind(), ErrorKind::Count);
    }

    #[test]
    fn the_gapped_pairs_and_handles() {
        let di = Desc::predefined(0x229).unwrap();
        assert_eq!((di.size, di.extent, di.elements), (12, 16, 2));
        assert!(!di.contiguous());
        assert_eq!(type_in(type_out(7)), Some(7));
        assert_eq!(type_in(0x209), None);
        assert_eq!(type_in(abi::request_out(ch4_core::ReqHandle::DONE)), None);
    }
}
