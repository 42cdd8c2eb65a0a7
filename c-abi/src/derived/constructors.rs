//! The datatype constructors, the standard's "Derived Datatypes" (MPI 4.1 section 5.1):
//! `MPI_Type_contiguous`, `MPI_Type_vector`, `MPI_Type_create_hvector`, `MPI_Type_indexed`,
//! `MPI_Type_create_indexed_block`, `MPI_Type_create_hindexed`,
//! `MPI_Type_create_hindexed_block`, `MPI_Type_create_struct`, `MPI_Type_create_resized` and
//! `MPI_Type_dup`, each with its `_c` form (counts and displacements as `MPI_Count`), and a
//! type's commit and free (`MPI_Type_commit`, `MPI_Type_free`).
//!
//! Each one is a recipe of runs of copies of its old type ([`Type::of_parts`]); the forms of
//! one constructor differ only in how they read their arguments, which they also keep as the
//! type's contents (`MPI_Type_get_contents`): ints for the int forms, large counts for the
//! `_c` forms, as MPI 4.1 table 5.1 lists them.

use std::ffi::c_int;

use ch4_core::ErrorKind;

use super::{
    add_type, array, big_count_of, combiner, count_of, desc, too_big, type_in, Contents, Desc,
    Part, Run, Type,
};
use crate::abi::{self, Handle};
use crate::call::{call, null_arg};
use crate::datatype;
use crate::state::State;

/// Makes a new type with `make`, writing its handle.
///
/// # Safety
/// `newtype` is writable.
pub(super) unsafe fn construct(
    func: &'static str,
    newtype: *mut Handle,
    make: impl FnOnce(&State) -> ch4::Result<Type>,
) -> c_int {
    call(abi::COMM_WORLD, func, |st| {
        if newtype.is_null() {
            return Err(null_arg("the new datatype"));
        }
        let t = make(st)?;
        let h = add_type(st, Desc::new(t));
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

/// The contents of a type made by `combiner` of old type `old`.
fn made(
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<isize>,
    counts: Vec<i64>,
    old: &Desc,
) -> Contents {
    Contents {
        combiner,
        ints,
        aints,
        counts,
        types: vec![old.clone()],
    }
}

/// A displacement of `d` extents of `old` in bytes (an error when it overflows an offset).
fn extents(d: i64, old: &Desc) -> ch4::Result<isize> {
    isize::try_from(d as i128 * old.extent as i128).map_err(|_| too_big())
}

/// An `MPI_Count` displacement in bytes.
fn bytes(d: i64) -> ch4::Result<isize> {
    isize::try_from(d).map_err(|_| too_big())
}

/// Copies of `old` at `runs`.
pub(super) fn copies(old: &Desc, runs: Vec<Run>, contents: Contents) -> ch4::Result<Type> {
    let parts = runs
        .into_iter()
        .map(|run| Part {
            ty: old.ty.clone(),
            run,
        })
        .collect();
    Type::of_parts(parts, contents)
}

/// `count` copies of `old` one after another.
pub(super) fn contiguous(old: &Desc, count: usize, contents: Contents) -> ch4::Result<Type> {
    copies(old, vec![Run::block(0, count)], contents)
}

/// `count` blocks of `blocklen` copies of `old`, `stride` bytes apart.
pub(super) fn hvector(
    old: &Desc,
    count: usize,
    blocklen: usize,
    stride: isize,
    contents: Contents,
) -> ch4::Result<Type> {
    let run = Run {
        start: 0,
        count,
        blocklen,
        stride,
    };
    copies(old, vec![run], contents)
}

/// Blocks of `lens[i]` copies of `old` at byte displacements `disps[i]`.
fn blocks(old: &Desc, lens: &[usize], disps: &[isize], contents: Contents) -> ch4::Result<Type> {
    let runs = lens
        .iter()
        .zip(disps)
        .map(|(&l, &d)| Run::block(d, l))
        .collect();
    copies(old, runs, contents)
}

/// Block lengths from C ints.
fn lengths(a: &[c_int]) -> ch4::Result<Vec<usize>> {
    a.iter().map(|&l| count_of(l, "block length")).collect()
}

/// Block lengths from `MPI_Count`s.
fn big_lengths(a: &[i64]) -> ch4::Result<Vec<usize>> {
    a.iter().map(|&l| big_count_of(l, "block length")).collect()
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
        construct("MPI_Type_contiguous", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(combiner::CONTIGUOUS, vec![count], vec![], vec![], &old);
            contiguous(&old, count_of(count, "count")?, c)
        })
    }
}

/// `MPI_Type_contiguous_c`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_contiguous_c(
    count: i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_contiguous_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(combiner::CONTIGUOUS, vec![], vec![], vec![count], &old);
            contiguous(&old, big_count_of(count, "count")?, c)
        })
    }
}

/// `MPI_Type_vector` (stride in extents of `oldtype`).
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
        construct("MPI_Type_vector", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(
                combiner::VECTOR,
                vec![count, blocklength, stride],
                vec![],
                vec![],
                &old,
            );
            let (n, b) = (
                count_of(count, "count")?,
                count_of(blocklength, "blocklength")?,
            );
            hvector(&old, n, b, extents(stride.into(), &old)?, c)
        })
    }
}

/// `MPI_Type_vector_c`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_vector_c(
    count: i64,
    blocklength: i64,
    stride: i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_vector_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(
                combiner::VECTOR,
                vec![],
                vec![],
                vec![count, blocklength, stride],
                &old,
            );
            let (n, b) = (
                big_count_of(count, "count")?,
                big_count_of(blocklength, "blocklength")?,
            );
            hvector(&old, n, b, extents(stride, &old)?, c)
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
        construct("MPI_Type_create_hvector", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(
                combiner::HVECTOR,
                vec![count, blocklength],
                vec![stride],
                vec![],
                &old,
            );
            let (n, b) = (
                count_of(count, "count")?,
                count_of(blocklength, "blocklength")?,
            );
            hvector(&old, n, b, stride, c)
        })
    }
}

/// `MPI_Type_create_hvector_c`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hvector_c(
    count: i64,
    blocklength: i64,
    stride: i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hvector_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(
                combiner::HVECTOR,
                vec![],
                vec![],
                vec![count, blocklength, stride],
                &old,
            );
            let (n, b) = (
                big_count_of(count, "count")?,
                big_count_of(blocklength, "blocklength")?,
            );
            hvector(&old, n, b, bytes(stride)?, c)
        })
    }
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
        construct("MPI_Type_indexed", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(count, "count")?;
            let lens = array(array_of_blocklengths, n)?;
            let disps = array(array_of_displacements, n)?;
            let ints = [&[count][..], lens, disps].concat();
            let c = made(combiner::INDEXED, ints, vec![], vec![], &old);
            let d = disps
                .iter()
                .map(|&d| extents(d.into(), &old))
                .collect::<ch4::Result<Vec<_>>>()?;
            blocks(&old, &lengths(lens)?, &d, c)
        })
    }
}

/// `MPI_Type_indexed_c`.
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_indexed_c(
    count: i64,
    array_of_blocklengths: *const i64,
    array_of_displacements: *const i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_indexed_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = big_count_of(count, "count")?;
            let lens = array(array_of_blocklengths, n)?;
            let disps = array(array_of_displacements, n)?;
            let counts = [&[count][..], lens, disps].concat();
            let c = made(combiner::INDEXED, vec![], vec![], counts, &old);
            let d = disps
                .iter()
                .map(|&d| extents(d, &old))
                .collect::<ch4::Result<Vec<_>>>()?;
            blocks(&old, &big_lengths(lens)?, &d, c)
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
        construct("MPI_Type_create_indexed_block", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(count, "count")?;
            let disps = array(array_of_displacements, n)?;
            let ints = [&[count, blocklength][..], disps].concat();
            let c = made(combiner::INDEXED_BLOCK, ints, vec![], vec![], &old);
            let lens = vec![count_of(blocklength, "blocklength")?; n];
            let d = disps
                .iter()
                .map(|&d| extents(d.into(), &old))
                .collect::<ch4::Result<Vec<_>>>()?;
            blocks(&old, &lens, &d, c)
        })
    }
}

/// `MPI_Type_create_indexed_block_c`.
///
/// # Safety
/// `array_of_displacements` has `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_indexed_block_c(
    count: i64,
    blocklength: i64,
    array_of_displacements: *const i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_indexed_block_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = big_count_of(count, "count")?;
            let disps = array(array_of_displacements, n)?;
            let counts = [&[count, blocklength][..], disps].concat();
            let c = made(combiner::INDEXED_BLOCK, vec![], vec![], counts, &old);
            let lens = vec![big_count_of(blocklength, "blocklength")?; n];
            let d = disps
                .iter()
                .map(|&d| extents(d, &old))
                .collect::<ch4::Result<Vec<_>>>()?;
            blocks(&old, &lens, &d, c)
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
        construct("MPI_Type_create_hindexed", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(count, "count")?;
            let lens = array(array_of_blocklengths, n)?;
            let disps = array(array_of_displacements, n)?;
            let ints = [&[count][..], lens].concat();
            let c = made(combiner::HINDEXED, ints, disps.to_vec(), vec![], &old);
            blocks(&old, &lengths(lens)?, disps, c)
        })
    }
}

/// `MPI_Type_create_hindexed_c`.
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed_c(
    count: i64,
    array_of_blocklengths: *const i64,
    array_of_displacements: *const i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hindexed_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = big_count_of(count, "count")?;
            let lens = array(array_of_blocklengths, n)?;
            let disps = array(array_of_displacements, n)?;
            let counts = [&[count][..], lens, disps].concat();
            let c = made(combiner::HINDEXED, vec![], vec![], counts, &old);
            let d = disps
                .iter()
                .map(|&d| bytes(d))
                .collect::<ch4::Result<Vec<_>>>()?;
            blocks(&old, &big_lengths(lens)?, &d, c)
        })
    }
}

/// `MPI_Type_create_hindexed_block` (MPI 4.1 section 5.1.2: blocks of one length at byte
/// displacements).
///
/// # Safety
/// `array_of_displacements` has `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hindexed_block", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(count, "count")?;
            let disps = array(array_of_displacements, n)?;
            let c = made(
                combiner::HINDEXED_BLOCK,
                vec![count, blocklength],
                disps.to_vec(),
                vec![],
                &old,
            );
            let lens = vec![count_of(blocklength, "blocklength")?; n];
            blocks(&old, &lens, disps, c)
        })
    }
}

/// `MPI_Type_create_hindexed_block_c`.
///
/// # Safety
/// `array_of_displacements` has `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block_c(
    count: i64,
    blocklength: i64,
    array_of_displacements: *const i64,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hindexed_block_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = big_count_of(count, "count")?;
            let disps = array(array_of_displacements, n)?;
            let counts = [&[count, blocklength][..], disps].concat();
            let c = made(combiner::HINDEXED_BLOCK, vec![], vec![], counts, &old);
            let lens = vec![big_count_of(blocklength, "blocklength")?; n];
            let d = disps
                .iter()
                .map(|&d| bytes(d))
                .collect::<ch4::Result<Vec<_>>>()?;
            blocks(&old, &lens, &d, c)
        })
    }
}

/// A struct of `lens[i]` copies of `types[i]` at byte displacement `disps[i]`.
fn structure(
    st: &State,
    lens: &[usize],
    disps: &[isize],
    types: &[Handle],
    mut contents: Contents,
) -> ch4::Result<Type> {
    let mut parts = Vec::with_capacity(types.len());
    for ((&l, &d), &t) in lens.iter().zip(disps).zip(types) {
        let old = desc(st, t)?;
        parts.push(Part {
            ty: old.ty.clone(),
            run: Run::block(d, l),
        });
        contents.types.push(old);
    }
    let mut t = Type::of_parts(parts, contents)?;
    t.pad();
    Ok(t)
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
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_struct", newtype, |st| {
            let n = count_of(count, "count")?;
            let lens = array(array_of_blocklengths, n)?;
            let disps = array(array_of_displacements, n)?;
            let types = array(array_of_types, n)?;
            let c = Contents {
                combiner: combiner::STRUCT,
                ints: [&[count][..], lens].concat(),
                aints: disps.to_vec(),
                ..Contents::default()
            };
            structure(st, &lengths(lens)?, disps, types, c)
        })
    }
}

/// `MPI_Type_create_struct_c`.
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_struct_c(
    count: i64,
    array_of_blocklengths: *const i64,
    array_of_displacements: *const i64,
    array_of_types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_struct_c", newtype, |st| {
            let n = big_count_of(count, "count")?;
            let lens = array(array_of_blocklengths, n)?;
            let disps = array(array_of_displacements, n)?;
            let types = array(array_of_types, n)?;
            let c = Contents {
                combiner: combiner::STRUCT,
                counts: [&[count][..], lens, disps].concat(),
                ..Contents::default()
            };
            let d = disps
                .iter()
                .map(|&d| bytes(d))
                .collect::<ch4::Result<Vec<_>>>()?;
            structure(st, &big_lengths(lens)?, &d, types, c)
        })
    }
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
        construct("MPI_Type_create_resized", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(combiner::RESIZED, vec![], vec![lb, extent], vec![], &old);
            Ok(Type::resized(&old.ty, lb, extent, c))
        })
    }
}

/// `MPI_Type_create_resized_c`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_resized_c(
    oldtype: Handle,
    lb: i64,
    extent: i64,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_resized_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let c = made(combiner::RESIZED, vec![], vec![], vec![lb, extent], &old);
            Ok(Type::resized(&old.ty, bytes(lb)?, bytes(extent)?, c))
        })
    }
}

/// `MPI_Type_dup`: the same type under a new handle, committed if the old one was.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_dup(oldtype: Handle, newtype: *mut Handle) -> c_int {
    let code = call(abi::COMM_WORLD, "MPI_Type_dup", |st| {
        if newtype.is_null() {
            return Err(null_arg("the new datatype"));
        }
        let old = desc(st, oldtype)?;
        let c = made(combiner::DUP, vec![], vec![], vec![], &old);
        let mut t = Type::resized(&old.ty, old.lb, old.extent, c);
        t.sticky = old.sticky;
        let mut d = Desc::new(t);
        d.committed = old.committed;
        let h = add_type(st, d);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newtype.write(h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::attributes::after_type_dup(code, oldtype, newtype) }
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
        match type_in(h).and_then(|i| st.types.with(i, |d| d.committed = true)) {
            Some(()) => Ok(()),
            None => Err(datatype::bad_type(h)),
        }
    })
}

/// `MPI_Type_free`: the handle becomes `MPI_DATATYPE_NULL`; predefined types cannot be freed.
/// Types made from this one keep what they need of it.
///
/// # Safety
/// `datatype` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    let deleted = unsafe { crate::attributes::before_type_free(datatype) };
    if deleted != crate::abi::class::SUCCESS {
        return deleted;
    }
    call(abi::COMM_WORLD, "MPI_Type_free", |st| {
        if datatype.is_null() {
            return Err(null_arg("the datatype"));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { datatype.read() };
        match type_in(h).and_then(|i| st.types.remove(i)) {
            Some(_) => {
                // SAFETY: the caller's contract.
                unsafe { datatype.write(abi::DATATYPE_NULL) };
                Ok(())
            }
            None => Err(ch4::Error::new(
                ErrorKind::Arg,
                "only a derived datatype can be freed",
            )),
        }
    })
}
