//! The array constructors (MPI 4.1 sections 5.1.3 and 5.1.4): `MPI_Type_create_subarray`, a
//! box inside an n-dimensional array, and `MPI_Type_create_darray`, one process's share of
//! an array distributed by blocks or cyclically over a process grid (the file views of
//! MPI-IO and the halo exchanges of stencil codes), with their `_c` forms.
//!
//! Both are built as the standard defines them, one dimension at a time from the fastest
//! varying one (the last for `MPI_ORDER_C`, the first for `MPI_ORDER_FORTRAN`): the next
//! dimension's type is runs of copies of the last one, resized to span that whole
//! dimension, so that every level's extent is one full row of the level below. The result
//! spans the whole array: lower bound 0, extent the product of the sizes times the old
//! type's extent. A cyclic dimension is one strided run plus the last, shorter block, so the
//! cost does not grow with the array.

use std::ffi::c_int;
use std::sync::Arc;

use ch4_core::ErrorKind;

use super::constructors::construct;
use super::{array, combiner, count_of, desc, too_big, Contents, Desc, Part, Run, Type};
use crate::abi::Handle;

/// `MPI_ORDER_C` and `MPI_ORDER_FORTRAN`.
const ORDER_C: c_int = 12;
const ORDER_FORTRAN: c_int = 15;
/// `MPI_DISTRIBUTE_NONE`, `_BLOCK`, `_CYCLIC`, `_DFLT_DARG`.
const DISTRIBUTE_NONE: c_int = 16;
const DISTRIBUTE_BLOCK: c_int = 17;
const DISTRIBUTE_CYCLIC: c_int = 18;
const DISTRIBUTE_DFLT_DARG: c_int = 19;

fn bad(what: String) -> ch4::Error {
    ch4::Error::new(ErrorKind::Arg, what)
}

/// The dimensions from the fastest varying to the slowest.
fn fastest_first(ndims: usize, order: c_int) -> ch4::Result<Vec<usize>> {
    match order {
        ORDER_C => Ok((0..ndims).rev().collect()),
        ORDER_FORTRAN => Ok((0..ndims).collect()),
        o => Err(bad(format!(
            "order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"
        ))),
    }
}

/// `n * bytes` as a byte offset, or an error when it overflows one.
fn times(n: usize, bytes: isize) -> ch4::Result<isize> {
    isize::try_from(n as i128 * bytes as i128).map_err(|_| too_big())
}

/// Runs of copies of `ty` under the bounds `0` and `extent`.
fn level(ty: Arc<Type>, runs: Vec<Run>, extent: isize) -> ch4::Result<Arc<Type>> {
    let parts = runs
        .into_iter()
        .map(|run| Part {
            ty: ty.clone(),
            run,
        })
        .collect();
    let t = Arc::new(Type::of_parts(parts, Contents::default())?);
    Ok(Arc::new(Type::resized(&t, 0, extent, Contents::default())))
}

/// The subarray of `subsizes` from `starts` in an array of `sizes` elements of `old`.
fn subarray(
    old: &Desc,
    sizes: &[usize],
    subsizes: &[usize],
    starts: &[usize],
    order: c_int,
    contents: Contents,
) -> ch4::Result<Type> {
    if sizes.is_empty() {
        return Err(bad("a subarray of no dimensions".into()));
    }
    for i in 0..sizes.len() {
        if sizes[i] == 0
            || starts[i]
                .checked_add(subsizes[i])
                .map_or(true, |e| e > sizes[i])
        {
            return Err(bad(format!(
                "dimension {i}: size {}, subsize {}, start {} (the subarray must lie inside \
                 the array, and every size be positive)",
                sizes[i], subsizes[i], starts[i]
            )));
        }
    }
    let mut ty = old.ty.clone();
    let mut row = old.extent;
    for d in fastest_first(sizes.len(), order)? {
        let run = Run::block(times(starts[d], ty.extent)?, subsizes[d]);
        row = times(sizes[d], row)?;
        ty = level(ty, vec![run], row)?;
    }
    Ok(Type::resized(&ty, 0, row, contents))
}

/// The elements of a dimension of `g` that coordinate `r` of `p` owns, as runs of copies of
/// a type of extent `tx`.
fn share(
    distrib: c_int,
    darg: c_int,
    g: usize,
    p: usize,
    r: usize,
    tx: isize,
) -> ch4::Result<Vec<Run>> {
    match distrib {
        DISTRIBUTE_NONE => {
            if p != 1 {
                return Err(bad(format!(
                    "a dimension of MPI_DISTRIBUTE_NONE over {p} processes (it must be 1)"
                )));
            }
            Ok(vec![Run::block(0, g)])
        }
        DISTRIBUTE_BLOCK => {
            let b = if darg == DISTRIBUTE_DFLT_DARG {
                g.div_ceil(p)
            } else {
                count_of(darg, "distribution argument")?
            };
            if b == 0 || b.checked_mul(p).map_or(true, |all| all < g) {
                return Err(bad(format!(
                    "blocks of {b} over {p} processes do not cover a dimension of {g}"
                )));
            }
            let start = (r * b).min(g);
            let n = b.min(g - start);
            Ok(vec![Run::block(times(start, tx)?, n)])
        }
        DISTRIBUTE_CYCLIC => {
            let k = if darg == DISTRIBUTE_DFLT_DARG {
                1
            } else {
                count_of(darg, "distribution argument")?
            };
            if k == 0 {
                return Err(bad("a cyclic distribution of blocks of 0".into()));
            }
            let first = r.saturating_mul(k);
            if first >= g {
                return Ok(Vec::new());
            }
            let cycle = p.checked_mul(k).ok_or_else(too_big)?;
            // Whole blocks, one a cycle, then the last block if it is cut short.
            let whole = if g - first >= k {
                (g - first - k) / cycle + 1
            } else {
                0
            };
            let mut runs = vec![Run {
                start: times(first, tx)?,
                count: whole,
                blocklen: k,
                stride: times(cycle, tx)?,
            }];
            let next = first + whole * cycle;
            if next < g {
                runs.push(Run::block(times(next, tx)?, g - next));
            }
            Ok(runs)
        }
        d => Err(bad(format!(
            "distribution {d} is not an MPI_DISTRIBUTE_ value"
        ))),
    }
}

/// Process `rank`'s share of an array of `gsizes` elements of `old` distributed over a grid
/// of `psizes` processes (ranked in row-major order, as a Cartesian topology ranks them).
fn darray(
    old: &Desc,
    size: c_int,
    rank: c_int,
    gsizes: &[usize],
    distribs: &[c_int],
    dargs: &[c_int],
    psizes: &[c_int],
    order: c_int,
    contents: Contents,
) -> ch4::Result<Type> {
    let n = gsizes.len();
    let psizes = psizes
        .iter()
        .map(|&p| count_of(p, "process grid size"))
        .collect::<ch4::Result<Vec<_>>>()?;
    let procs = psizes.iter().try_fold(1usize, |a, &p| a.checked_mul(p));
    if n == 0 || procs != Some(count_of(size, "size")?) || gsizes.contains(&0) {
        return Err(bad(format!(
            "a grid of {psizes:?} processes for {size} processes, or an array of sizes \
             {gsizes:?}"
        )));
    }
    let rank = count_of(rank, "rank")?;
    if rank >= procs.unwrap_or(0) {
        return Err(bad(format!("rank {rank} of {size} processes")));
    }
    // Row-major coordinates of `rank` in the grid.
    let mut coords = vec![0usize; n];
    let mut left = rank;
    for d in (0..n).rev() {
        coords[d] = left % psizes[d];
        left /= psizes[d];
    }
    let mut ty = old.ty.clone();
    for d in fastest_first(n, order)? {
        let runs = share(
            distribs[d],
            dargs[d],
            gsizes[d],
            psizes[d],
            coords[d],
            ty.extent,
        )?;
        let extent = times(gsizes[d], ty.extent)?;
        ty = level(ty, runs, extent)?;
    }
    Ok(Type::resized(&ty, 0, ty.extent, contents))
}

/// `MPI_Type_create_subarray`.
///
/// # Safety
/// The arrays have `ndims` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_subarray(
    ndims: c_int,
    array_of_sizes: *const c_int,
    array_of_subsizes: *const c_int,
    array_of_starts: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_subarray", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(ndims, "ndims")?;
            let (sizes, subsizes, starts) = (
                array(array_of_sizes, n)?,
                array(array_of_subsizes, n)?,
                array(array_of_starts, n)?,
            );
            let c = Contents {
                combiner: combiner::SUBARRAY,
                ints: [&[ndims][..], sizes, subsizes, starts, &[order]].concat(),
                types: vec![old.clone()],
                ..Contents::default()
            };
            let u = |a: &[c_int]| {
                a.iter()
                    .map(|&v| count_of(v, "a size or start"))
                    .collect::<ch4::Result<Vec<_>>>()
            };
            subarray(&old, &u(sizes)?, &u(subsizes)?, &u(starts)?, order, c)
        })
    }
}

/// `MPI_Type_create_subarray_c`.
///
/// # Safety
/// The arrays have `ndims` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_subarray_c(
    ndims: c_int,
    array_of_sizes: *const i64,
    array_of_subsizes: *const i64,
    array_of_starts: *const i64,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_subarray_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(ndims, "ndims")?;
            let (sizes, subsizes, starts) = (
                array(array_of_sizes, n)?,
                array(array_of_subsizes, n)?,
                array(array_of_starts, n)?,
            );
            let c = Contents {
                combiner: combiner::SUBARRAY,
                ints: vec![ndims, order],
                counts: [sizes, subsizes, starts].concat(),
                types: vec![old.clone()],
                ..Contents::default()
            };
            let u = |a: &[i64]| {
                a.iter()
                    .map(|&v| super::big_count_of(v, "a size or start"))
                    .collect::<ch4::Result<Vec<_>>>()
            };
            subarray(&old, &u(sizes)?, &u(subsizes)?, &u(starts)?, order, c)
        })
    }
}

/// `MPI_Type_create_darray`.
///
/// # Safety
/// The arrays have `ndims` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const c_int,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_darray", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(ndims, "ndims")?;
            let (gsizes, distribs, dargs, psizes) = (
                array(array_of_gsizes, n)?,
                array(array_of_distribs, n)?,
                array(array_of_dargs, n)?,
                array(array_of_psizes, n)?,
            );
            let c = Contents {
                combiner: combiner::DARRAY,
                ints: [
                    &[size, rank, ndims][..],
                    gsizes,
                    distribs,
                    dargs,
                    psizes,
                    &[order],
                ]
                .concat(),
                types: vec![old.clone()],
                ..Contents::default()
            };
            let g = gsizes
                .iter()
                .map(|&v| count_of(v, "a global size"))
                .collect::<ch4::Result<Vec<_>>>()?;
            darray(&old, size, rank, &g, distribs, dargs, psizes, order, c)
        })
    }
}

/// `MPI_Type_create_darray_c`.
///
/// # Safety
/// The arrays have `ndims` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_darray_c(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const i64,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_darray_c", newtype, |st| {
            let old = desc(st, oldtype)?;
            let n = count_of(ndims, "ndims")?;
            let (gsizes, distribs, dargs, psizes) = (
                array(array_of_gsizes, n)?,
                array(array_of_distribs, n)?,
                array(array_of_dargs, n)?,
                array(array_of_psizes, n)?,
            );
            let c = Contents {
                combiner: combiner::DARRAY,
                ints: [&[size, rank, ndims][..], distribs, dargs, psizes, &[order]].concat(),
                counts: gsizes.to_vec(),
                types: vec![old.clone()],
                ..Contents::default()
            };
            let g = gsizes
                .iter()
                .map(|&v| super::big_count_of(v, "a global size"))
                .collect::<ch4::Result<Vec<_>>>()?;
            darray(&old, size, rank, &g, distribs, dargs, psizes, order, c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> Desc {
        Desc::predefined(0x209).unwrap()
    }

    fn blocks(t: &Type) -> Vec<(isize, usize)> {
        let mut v = Vec::new();
        t.for_merged_blocks(1, &mut |o, l| {
            v.push((o, l));
            Ok(())
        })
        .unwrap();
        v
    }

    #[test]
    fn a_subarray_is_its_rows_inside_the_whole_array() {
        // A 2x3 box from (1, 1) of a 4x5 array of ints, C order.
        let t = subarray(
            &int(),
            &[4, 5],
            &[2, 3],
            &[1, 1],
            ORDER_C,
            Contents::default(),
        )
        .unwrap();
        assert_eq!((t.lb, t.extent, t.size), (0, 80, 24));
        assert_eq!(blocks(&t), vec![(24, 12), (44, 12)]);
        let f = subarray(
            &int(),
            &[4, 5],
            &[2, 3],
            &[1, 1],
            ORDER_FORTRAN,
            Contents::default(),
        )
        .unwrap();
        assert_eq!(blocks(&f), vec![(20, 8), (36, 8), (52, 8)]);
    }

    #[test]
    fn a_cyclic_darray_takes_every_pth_block_and_the_short_last_one() {
        // 1-D, 10 ints, cyclic(3) over 2 processes: rank 1 owns 3..6 and 9..10.
        let t = darray(
            &int(),
            2,
            1,
            &[10],
            &[DISTRIBUTE_CYCLIC],
            &[3],
            &[2],
            ORDER_C,
            Contents::default(),
        )
        .unwrap();
        assert_eq!((t.lb, t.extent, t.size), (0, 40, 16));
        assert_eq!(blocks(&t), vec![(12, 12), (36, 4)]);
        // 2-D block x block over a 2x2 grid: rank 3 owns rows 2..4, columns 2..4 of 4x4.
        let b = darray(
            &int(),
            4,
            3,
            &[4, 4],
            &[DISTRIBUTE_BLOCK, DISTRIBUTE_BLOCK],
            &[DISTRIBUTE_DFLT_DARG, DISTRIBUTE_DFLT_DARG],
            &[2, 2],
            ORDER_C,
            Contents::default(),
        )
        .unwrap();
        assert_eq!(blocks(&b), vec![(40, 8), (56, 8)]);
        assert_eq!(b.extent, 64);
    }
}
