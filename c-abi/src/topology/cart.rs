//! Cartesian topologies (MPI 4.1 sections 8.5.1-8.5.5): `MPI_Cart_create`, `MPI_Dims_create`,
//! the queries `MPI_Cartdim_get`, `MPI_Cart_get`, `MPI_Cart_rank`, `MPI_Cart_coords`,
//! `MPI_Cart_shift`, and `MPI_Cart_sub` and `MPI_Cart_map`.
//!
//! A grid's ranks map to coordinates in row-major order (section 8.5.1). A Cartesian
//! communicator is a split of its parent that keeps the first `product(dims)` processes in
//! their order; `MPI_Cart_sub` splits it again by the coordinates of the dimensions dropped.

use std::ffi::c_int;

use ch4_core::ErrorKind;

use super::{
    adopt_with_topology, ints, no_topology, rank_size, topo_call, topology_of, TopoError, Topology,
};
use crate::abi::{self, Handle};
use crate::call::{null_arg, on_device, put};
use crate::state::State;

/// A Cartesian topology: the grid's dimensions, which of them wrap around, and the calling
/// process's rank in it.
#[derive(Clone, Debug)]
pub(crate) struct Cart {
    /// Processes along each dimension.
    pub dims: Vec<c_int>,
    /// Whether each dimension is periodic.
    pub periods: Vec<bool>,
    /// The calling process's rank in the grid (its rank in the communicator).
    pub rank: c_int,
}

impl Cart {
    /// Row-major coordinates of `rank`.
    fn coords_of(&self, rank: c_int) -> Vec<c_int> {
        let mut rest = rank;
        let mut out = vec![0; self.dims.len()];
        for i in (0..self.dims.len()).rev() {
            out[i] = rest % self.dims[i];
            rest /= self.dims[i];
        }
        out
    }

    /// The rank at `coords` (periodic dimensions wrap); `None` off a non-periodic edge.
    fn rank_at(&self, coords: &[c_int]) -> Option<c_int> {
        let mut r: c_int = 0;
        for (i, &x) in coords.iter().enumerate() {
            let d = self.dims[i];
            let x = if self.periods[i] {
                x.rem_euclid(d)
            } else if (0..d).contains(&x) {
                x
            } else {
                return None;
            };
            r = r * d + x;
        }
        Some(r)
    }

    /// The processes `disp` steps before and after the caller along dimension `d`
    /// (`MPI_Cart_shift`), `MPI_PROC_NULL` off a non-periodic edge. `d` is a dimension.
    pub(crate) fn shift(&self, d: usize, disp: c_int) -> (c_int, c_int) {
        let at = |delta: c_int| {
            let mut xs = self.coords_of(self.rank);
            xs[d] = xs[d].saturating_add(delta);
            self.rank_at(&xs).unwrap_or(abi::PROC_NULL)
        };
        (at(disp.saturating_neg()), at(disp))
    }

    /// The number of grid points.
    fn points(&self) -> i64 {
        self.dims.iter().map(|&x| i64::from(x)).product()
    }
}

/// Checks a grid's dimensions (`MPI_Cart_create`, `MPI_Cart_map`): each positive
/// (`MPI_ERR_DIMS` otherwise), and at most `size` points in all (`MPI_ERR_ARG`, as MPICH
/// reports a grid too large for its communicator); their product.
fn grid_points(dims: &[c_int], size: c_int) -> Result<i64, TopoError> {
    if let Some(d) = dims.iter().find(|&&x| x <= 0) {
        return Err(TopoError::new(
            abi::class::DIMS,
            format!("a dimension of {d}: each must be positive"),
        ));
    }
    let points: i64 = dims.iter().map(|&x| i64::from(x)).product();
    if points > i64::from(size) {
        return Err(TopoError::of(
            ErrorKind::Arg,
            format!("a grid of {points} points for {size} processes"),
        ));
    }
    Ok(points)
}

/// `MPI_Cart_create`: processes past the grid's points get `MPI_COMM_NULL`; with
/// `ndims` 0, a grid of one point (MPI 4.1 section 8.5.1).
///
/// # Safety
/// `dims` and `periods` have `ndims` entries; `comm_cart` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut Handle,
) -> c_int {
    topo_call(comm_old, "MPI_Cart_create", |st| {
        if comm_cart.is_null() {
            return Err(TopoError::from(null_arg("the new communicator")));
        }
        // SAFETY: the caller's contract.
        let (d, p) = unsafe { (ints(ndims, dims, "dims")?, ints(ndims, periods, "periods")?) };
        let (c, fatal) = crate::comm::parent(st, comm_old)?;
        let (me, size) = rank_size(st, comm_old)?;
        let points = grid_points(d, size)?;
        let color = if i64::from(me) < points {
            0
        } else {
            abi::UNDEFINED
        };
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_split(b, c.id, color, me))?;
        let h = adopt_with_topology(st, new, fatal, |rank| {
            Topology::Cart(Cart {
                dims: d.to_vec(),
                periods: p.iter().map(|&x| x != 0).collect(),
                rank,
            })
        })?;
        // SAFETY: checked non-null.
        unsafe { comm_cart.write(h) };
        Ok(())
    })
}

/// The grid of communicator `comm`.
fn cart_of(st: &State, comm: Handle) -> Result<Cart, TopoError> {
    match topology_of(st, comm)? {
        Some(Topology::Cart(c)) => Ok(c),
        _ => Err(no_topology("Cartesian")),
    }
}

/// `MPI_Cart_coords`.
///
/// # Safety
/// `coords` has room for `maxdims` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_coords(
    comm: Handle,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Cart_coords", |st| {
        let c = cart_of(st, comm)?;
        if !(0..c.points()).contains(&i64::from(rank)) {
            return Err(TopoError::of(
                ErrorKind::Rank,
                format!("rank {rank} is not in the grid"),
            ));
        }
        let xs = c.coords_of(rank);
        if usize::try_from(maxdims).map_or(true, |m| m < xs.len()) {
            return Err(TopoError::of(
                ErrorKind::Arg,
                format!("maxdims {maxdims} is smaller than ndims {}", xs.len()),
            ));
        }
        // SAFETY: the caller's contract: room for `maxdims` >= ndims entries.
        unsafe { super::copy_out(&xs, maxdims, coords, "coords") }
    })
}

/// `MPI_Cart_rank`: coordinates outside a non-periodic dimension are `MPI_ERR_ARG`.
///
/// # Safety
/// `coords` has ndims entries; `rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_rank(
    comm: Handle,
    coords: *const c_int,
    rank: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Cart_rank", |st| {
        let c = cart_of(st, comm)?;
        // SAFETY: the caller's contract.
        let xs = unsafe { ints(c.dims.len() as c_int, coords, "coords") }?;
        let r = c.rank_at(xs).ok_or_else(|| {
            TopoError::of(
                ErrorKind::Arg,
                "coordinates outside a non-periodic dimension",
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(rank, r) };
        Ok(())
    })
}

/// `MPI_Cart_shift`: `MPI_PROC_NULL` off a non-periodic edge.
///
/// # Safety
/// `rank_source` and `rank_dest` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: Handle,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Cart_shift", |st| {
        let c = cart_of(st, comm)?;
        let d = usize::try_from(direction)
            .ok()
            .filter(|&d| d < c.dims.len())
            .ok_or_else(|| {
                TopoError::of(
                    ErrorKind::Arg,
                    format!(
                        "direction {direction} of a grid of {} dimensions",
                        c.dims.len()
                    ),
                )
            })?;
        let (source, dest) = c.shift(d, disp);
        // SAFETY: the caller's contract.
        unsafe {
            put(rank_source, source);
            put(rank_dest, dest);
        }
        Ok(())
    })
}

/// `MPI_Cartdim_get`.
///
/// # Safety
/// `ndims` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cartdim_get(comm: Handle, ndims: *mut c_int) -> c_int {
    topo_call(comm, "MPI_Cartdim_get", |st| {
        let c = cart_of(st, comm)?;
        // SAFETY: the caller's contract.
        unsafe { put(ndims, c.dims.len() as c_int) };
        Ok(())
    })
}

/// `MPI_Cart_get`.
///
/// # Safety
/// The arrays have room for `maxdims` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_get(
    comm: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Cart_get", |st| {
        let c = cart_of(st, comm)?;
        let n = c.dims.len();
        if usize::try_from(maxdims).map_or(true, |m| m < n) {
            return Err(TopoError::of(
                ErrorKind::Arg,
                format!("maxdims {maxdims} is smaller than ndims {n}"),
            ));
        }
        let periodic: Vec<c_int> = c.periods.iter().map(|&p| c_int::from(p)).collect();
        // SAFETY: the caller's contract: room for `maxdims` >= n entries in each.
        unsafe {
            super::copy_out(&c.dims, maxdims, dims, "dims")?;
            super::copy_out(&periodic, maxdims, periods, "periods")?;
            super::copy_out(&c.coords_of(c.rank), maxdims, coords, "coords")
        }
    })
}

/// `MPI_Cart_sub`: the sub-grid of the dimensions `remain_dims` keeps, through the caller
/// (MPI 4.1 section 8.5.6). The processes whose coordinates in the dropped dimensions are the
/// same form one, in the grid's order; with no dimension kept, each process is a grid of one
/// point of its own (a zero-dimensional topology).
///
/// # Safety
/// `remain_dims` has ndims entries; `newcomm` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_sub(
    comm: Handle,
    remain_dims: *const c_int,
    newcomm: *mut Handle,
) -> c_int {
    topo_call(comm, "MPI_Cart_sub", |st| {
        if newcomm.is_null() {
            return Err(TopoError::from(null_arg("the new communicator")));
        }
        let c = cart_of(st, comm)?;
        // SAFETY: the caller's contract.
        let keep = unsafe { ints(c.dims.len() as c_int, remain_dims, "remain_dims") }?;
        let xs = c.coords_of(c.rank);
        // The color: the row-major index of the caller's coordinates in the dropped
        // dimensions (below the grid's size, so it fits); the key: its rank, which orders
        // the sub-grid row-major too.
        let mut color: c_int = 0;
        let (mut dims, mut periods) = (Vec::new(), Vec::new());
        for (i, &k) in keep.iter().enumerate() {
            if k != 0 {
                dims.push(c.dims[i]);
                periods.push(c.periods[i]);
            } else {
                color = color * c.dims[i] + xs[i];
            }
        }
        let (p, fatal) = crate::comm::parent(st, comm)?;
        let new = on_device!(st, p.vci, |b| ch4_core::coll::new_split(
            b, p.id, color, c.rank
        ))?;
        let h = adopt_with_topology(st, new, fatal, |rank| {
            Topology::Cart(Cart {
                dims,
                periods,
                rank,
            })
        })?;
        // SAFETY: checked non-null.
        unsafe { newcomm.write(h) };
        Ok(())
    })
}

/// `MPI_Cart_map`: the rank the caller would have in such a grid over `comm`, its own rank
/// (no reordering), or `MPI_UNDEFINED` past the grid's points.
///
/// # Safety
/// `dims` and `periods` have `ndims` entries; `newrank` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_map(
    comm: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Cart_map", |st| {
        // SAFETY: the caller's contract.
        let d = unsafe {
            ints(ndims, periods, "periods")?;
            ints(ndims, dims, "dims")?
        };
        let (me, size) = rank_size(st, comm)?;
        let points = grid_points(d, size)?;
        if newrank.is_null() {
            return Err(TopoError::from(null_arg("newrank")));
        }
        let r = if i64::from(me) < points {
            me
        } else {
            abi::UNDEFINED
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newrank.write(r) };
        Ok(())
    })
}

/// `MPI_Dims_create`: a balanced factorization of `nnodes` into `ndims` dimensions, the
/// nonzero entries of `dims` kept.
///
/// # Safety
/// `dims` has `ndims` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    topo_call(abi::COMM_WORLD, "MPI_Dims_create", |_| {
        let n = usize::try_from(ndims)
            .map_err(|_| TopoError::new(abi::class::DIMS, "ndims is negative"))?;
        if n == 0 {
            return Ok(());
        }
        if dims.is_null() {
            return Err(TopoError::from(null_arg("dims")));
        }
        // SAFETY: the caller's contract.
        let d = unsafe { std::slice::from_raw_parts_mut(dims, n) };
        dims_create(nnodes, d)
    })
}

/// Fills the zero entries of `d` so that all multiply to `nnodes`, as close to each other as
/// the factors allow, in non-increasing order (MPI 4.1 section 8.5.2); `MPI_ERR_DIMS` when the
/// fixed entries cannot be completed.
fn dims_create(nnodes: c_int, d: &mut [c_int]) -> Result<(), TopoError> {
    if nnodes <= 0 || d.iter().any(|&x| x < 0) {
        return Err(TopoError::new(
            abi::class::DIMS,
            "nnodes must be positive and dims not negative",
        ));
    }
    let fixed: i64 = d
        .iter()
        .filter(|&&x| x > 0)
        .map(|&x| i64::from(x))
        .product();
    if i64::from(nnodes) % fixed != 0 {
        return Err(TopoError::new(
            abi::class::DIMS,
            format!("{nnodes} processes do not divide by the fixed dimensions' product {fixed}"),
        ));
    }
    let free: Vec<usize> = (0..d.len()).filter(|&i| d[i] == 0).collect();
    if free.is_empty() {
        return if fixed == i64::from(nnodes) {
            Ok(())
        } else {
            Err(TopoError::new(
                abi::class::DIMS,
                "dims do not multiply to nnodes",
            ))
        };
    }
    let mut rest = i64::from(nnodes) / fixed;
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= rest {
        while rest % p == 0 {
            factors.push(p);
            rest /= p;
        }
        p += 1;
    }
    if rest > 1 {
        factors.push(rest);
    }
    let mut out = vec![1i64; free.len()];
    for f in factors.into_iter().rev() {
        if let Some(m) = out.iter_mut().min() {
            *m *= f;
        }
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    for (i, v) in free.into_iter().zip(out) {
        d[i] = v as c_int;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_row_major_and_periodic_dimensions_wrap() {
        let c = Cart {
            dims: vec![2, 3],
            periods: vec![false, true],
            rank: 4,
        };
        assert_eq!(c.coords_of(4), vec![1, 1]);
        assert_eq!(c.rank_at(&[1, 1]), Some(4));
        assert_eq!(c.rank_at(&[1, 3]), Some(3), "wraps");
        assert_eq!(c.rank_at(&[2, 0]), None, "off the edge");
        for r in 0..6 {
            assert_eq!(c.rank_at(&c.coords_of(r)), Some(r));
        }
        assert_eq!(
            c.shift(0, 1),
            (1, abi::PROC_NULL),
            "rank 4 is on the last row"
        );
        assert_eq!(c.shift(1, 1), (3, 5));
        assert_eq!(c.shift(1, 2), (5, 3), "wraps both ways");
    }

    #[test]
    fn a_grids_neighbours_are_minus_then_plus_by_dimension() {
        let c = Cart {
            dims: vec![2, 3],
            periods: vec![false, true],
            rank: 0,
        };
        let (sources, dests) = Topology::Cart(c).neighbours();
        assert_eq!(sources, vec![abi::PROC_NULL, 3, 2, 1]);
        assert_eq!(sources, dests);
    }

    #[test]
    fn dims_are_balanced_and_keep_the_fixed_ones() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 3, 0];
        dims_create(24, &mut d).unwrap();
        assert_eq!(d, [4, 3, 2]);
        let mut d = [0, 0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1, 1]);
        assert_eq!(
            dims_create(10, &mut [3, 0]).map_err(|e| e.class),
            Err(abi::class::DIMS)
        );
    }
}
