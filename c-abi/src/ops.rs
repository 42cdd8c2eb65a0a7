//! Reduction operations, the standard's "User-Defined Reduction Operations": `MPI_Op_create`,
//! `MPI_Op_free`, `MPI_Op_commutative` and `MPI_Reduce_local`, and the fold every reduction
//! applies, predefined or the program's.
//!
//! A program's operation is its C function, `MPI_User_function`, which computes
//! `inoutvec[i] = invec[i] op inoutvec[i]`. The device's reductions fold `other` into `acc` as
//! `acc = acc op other`, where `acc` holds the lower ranks (see `ch4_core::coll::reduce`): for
//! an operation that commutes, the function runs in place with `acc` as its `inoutvec`; for one
//! that does not, on a copy of `other`, which then becomes `acc`, so the order is the one MPI
//! prescribes. The reductions that would change that order (a tree rooted elsewhere than rank
//! 0) run in rank order for such an operation (`ch4_core::coll::reduce_in_order`).

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use crate::abi::{self, op, Handle};
use crate::call::{call, null_arg};
use crate::datatype::{self, Fold};
use crate::state::State;

/// The C type of a program's operation (`MPI_User_function` in `mpi.h`).
pub(crate) type UserFunction = unsafe extern "C" fn(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    dt: *mut Handle,
);

/// The C type of a program's operation of the big-count form (`MPI_User_function_c`, given
/// to `MPI_Op_create_c`): its length is an `MPI_Count`.
pub(crate) type UserFunctionC =
    unsafe extern "C" fn(invec: *mut c_void, inoutvec: *mut c_void, len: *mut i64, dt: *mut Handle);

/// A program's function, of either form.
#[derive(Clone, Copy)]
enum Function {
    /// `MPI_User_function` (`MPI_Op_create`).
    Int(UserFunction),
    /// `MPI_User_function_c` (`MPI_Op_create_c`).
    Big(UserFunctionC),
}

impl Function {
    /// Computes `inoutvec[i] = invec[i] op inoutvec[i]` for `len` elements of `dt`, element
    /// `i` at byte `i × stride` of each vector. The int form is called on pieces of at most
    /// `INT_MAX` elements, so that a length beyond an int is never cut.
    ///
    /// # Safety
    /// Both vectors hold `len` elements of `dt` at that stride, `inoutvec` writable and
    /// `invec` only read, as the standard's rule for the function says (MPI 4.1, 6.9.5).
    unsafe fn apply(
        self,
        invec: *mut c_void,
        inoutvec: *mut c_void,
        len: usize,
        stride: isize,
        dt: Handle,
    ) {
        let mut dt = dt;
        match self {
            Function::Big(f) => {
                let mut n = len as i64;
                // SAFETY: the caller's contract.
                unsafe { f(invec, inoutvec, &mut n, &mut dt) };
            }
            Function::Int(f) => {
                let mut done = 0usize;
                while done < len || len == 0 {
                    let piece = (len - done).min(c_int::MAX as usize);
                    let mut n = piece as c_int;
                    let at = (done as isize).wrapping_mul(stride);
                    // SAFETY: the caller's contract: elements `done..done + piece` of both
                    // vectors, at `at` bytes from their starts.
                    unsafe {
                        f(
                            invec.cast::<u8>().wrapping_offset(at).cast(),
                            inoutvec.cast::<u8>().wrapping_offset(at).cast(),
                            &mut n,
                            &mut dt,
                        )
                    };
                    done += piece;
                    if len == 0 {
                        break;
                    }
                }
            }
        }
    }
}

/// An operation the program created.
#[derive(Clone, Copy)]
pub(crate) struct UserOp {
    function: Function,
    commutes: bool,
}

/// Operations the program makes are this bit plus their index in the library's table (no
/// other handle kind uses it, and it is far above the predefined operations).
const OP_BIT: u64 = 1 << 58;

fn op_out(i: usize) -> Handle {
    abi::indexed(OP_BIT, i)
}

fn op_in(h: Handle) -> Option<usize> {
    abi::index_of(h, OP_BIT)
}

fn bad_op(h: Handle) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Op,
        format!("operation {h:#x} is not a reduction operation (or was freed)"),
    )
}

/// The operation behind `h`, when the program created it.
fn user_op(st: &State, h: Handle) -> ch4::Result<Option<UserOp>> {
    match op_in(h) {
        Some(i) => st.ops.cloned(i).map(Some).ok_or_else(|| bad_op(h)),
        None => Ok(None),
    }
}

/// The fold of operation `op_h` over elements of `dt` for the device's reductions, and
/// whether the operation commutes (every predefined one does).
pub(crate) fn reduction(st: &State, op_h: Handle, dt: Handle) -> ch4::Result<(Fold, bool)> {
    let Some(user) = user_op(st, op_h)? else {
        return Ok((datatype::reduction(op_h, dt)?, true));
    };
    let Some(elem) = datatype::reduce_elem(dt) else {
        return Ok((derived_reduction(st, user, dt)?, user.commutes));
    };
    let mut copy: Vec<u8> = Vec::new();
    let fold = move |acc: &mut [u8], other: &[u8]| {
        let n = acc.len().min(other.len());
        let len = n / elem;
        if user.commutes {
            // SAFETY: the program gave MPI_Op_create a function of its type; both vectors
            // hold `len` elements of `dt`, `inoutvec` is written, `invec` only read (the
            // standard's rule for the function), and both outlive the call.
            unsafe {
                user.function.apply(
                    other.as_ptr().cast_mut().cast(),
                    acc.as_mut_ptr().cast(),
                    len,
                    elem as isize,
                    dt,
                )
            };
        } else {
            copy.clear();
            copy.extend_from_slice(&other[..n]);
            // SAFETY: as above, with `copy` (a private copy of `other`) written.
            unsafe {
                user.function.apply(
                    acc.as_mut_ptr().cast(),
                    copy.as_mut_ptr().cast(),
                    len,
                    elem as isize,
                    dt,
                )
            };
            acc[..n].copy_from_slice(&copy);
        }
    };
    Ok((Box::new(fold), user.commutes))
}

/// The fold of the program's operation `user` over elements of derived datatype `dt`: the
/// device's reductions hold packed bytes, while the function expects elements laid out as the
/// datatype describes them (MPI 4.1, section 6.9.5), so both operands are unpacked into
/// scratch buffers in the datatype's layout, the function runs there, and the result is
/// packed back.
fn derived_reduction(st: &State, user: UserOp, dt: Handle) -> ch4::Result<Fold> {
    let d = crate::derived::desc(st, dt)?;
    let (ty, size, extent) = (d.ty.clone(), d.size, d.extent);
    if size == 0 {
        return Ok(Box::new(|_: &mut [u8], _: &[u8]| {}));
    }
    // The blocks of `n` elements (offset from element 0, length) in typemap order, kept for
    // the `n` of the last call: every fold of one reduction has the same.
    let mut layout: (usize, Vec<(isize, usize)>, isize, usize) = (0, Vec::new(), 0, 0);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let fold = move |acc: &mut [u8], other: &[u8]| {
        let n = acc.len().min(other.len()) / size;
        if n == 0 {
            return;
        }
        if layout.0 != n || layout.1.is_empty() {
            let mut blocks = Vec::new();
            let walked = ty.for_merged_blocks(n, &mut |o, l| {
                blocks.push((o, l));
                Ok(())
            });
            if walked.is_err() {
                return;
            }
            let low = blocks.iter().map(|&(o, _)| o).min().unwrap_or(0);
            let high = blocks
                .iter()
                .map(|&(o, l)| o + l as isize)
                .max()
                .unwrap_or(0);
            layout = (n, blocks, low, (high - low) as usize);
        }
        let (_, blocks, low, span) = &layout;
        let unpack = |packed: &[u8], out: &mut Vec<u8>| {
            out.clear();
            out.resize(*span, 0);
            let mut at = 0;
            for &(o, l) in blocks {
                let p = (o - low) as usize;
                out[p..p + l].copy_from_slice(&packed[at..at + l]);
                at += l;
            }
        };
        unpack(acc, &mut a);
        unpack(other, &mut b);
        // The function computes `invec op inoutvec` into `inoutvec`: for `acc op other`,
        // `acc` is the first operand when the operation does not commute.
        let (invec, inout) = if user.commutes {
            (&mut b, &mut a)
        } else {
            (&mut a, &mut b)
        };
        // SAFETY: the program gave MPI_Op_create a function of MPI_User_function's type; both
        // scratch buffers hold `len` elements of `dt` laid out as `dt` says, element 0 at
        // `-low` from their start (`low` is the offset of the lowest block, so the function
        // touches nothing outside them), `inoutvec` is written and `invec` only read, and
        // both outlive the call.
        unsafe {
            user.function.apply(
                invec.as_mut_ptr().wrapping_offset(-low).cast(),
                inout.as_mut_ptr().wrapping_offset(-low).cast(),
                n,
                extent,
                dt,
            )
        };
        let result: &Vec<u8> = inout;
        let mut at = 0;
        for &(o, l) in blocks {
            let p = (o - low) as usize;
            acc[at..at + l].copy_from_slice(&result[p..p + l]);
            at += l;
        }
    };
    Ok(Box::new(fold))
}

/// `MPI_Op_create`.
///
/// # Safety
/// `user_fn` is a function of `MPI_User_function`'s type (or null, which is refused); `op` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_create(
    user_fn: Option<UserFunction>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_create", |st| {
        let function = Function::Int(user_fn.ok_or_else(|| null_arg("the user function"))?);
        // SAFETY: the caller's contract.
        unsafe { op_create(st, function, commute, op) }
    })
}

/// `MPI_Op_create_c`: an operation whose function takes an `MPI_Count` length
/// (`MPI_User_function_c`).
///
/// # Safety
/// `user_fn` is a function of `MPI_User_function_c`'s type (or null, which is refused); `op`
/// is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_create_c(
    user_fn: Option<UserFunctionC>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_create_c", |st| {
        let function = Function::Big(user_fn.ok_or_else(|| null_arg("the user function"))?);
        // SAFETY: the caller's contract.
        unsafe { op_create(st, function, commute, op) }
    })
}

/// Adds the program's operation; its handle goes through `op`.
///
/// # Safety
/// `op` is null or writable.
unsafe fn op_create(
    st: &State,
    function: Function,
    commute: c_int,
    op: *mut Handle,
) -> ch4::Result<()> {
    if op.is_null() {
        return Err(null_arg("the operation"));
    }
    let i = st.ops.insert(UserOp {
        function,
        commutes: commute != 0,
    });
    // SAFETY: checked non-null; the caller's contract.
    unsafe { op.write(op_out(i)) };
    Ok(())
}

/// `MPI_Op_free`: frees an operation the program created and sets the handle to
/// `MPI_OP_NULL`; a predefined one is refused.
///
/// # Safety
/// `op` is a readable and writable handle.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_free(op: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_free", |st| {
        if op.is_null() {
            return Err(null_arg("the operation"));
        }
        // SAFETY: checked non-null; the caller's contract.
        let h = unsafe { op.read() };
        let i = op_in(h).ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Arg,
                format!("operation {h:#x} is predefined (or not an operation): it cannot be freed"),
            )
        })?;
        st.ops.remove(i).ok_or_else(|| bad_op(h))?;
        // SAFETY: as above.
        unsafe { op.write(op::NULL) };
        Ok(())
    })
}

/// `MPI_Op_commutative`.
///
/// # Safety
/// `commute` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_commutative(op: Handle, commute: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_commutative", |st| {
        if commute.is_null() {
            return Err(null_arg("the result"));
        }
        let commutes = match user_op(st, op)? {
            Some(u) => u.commutes,
            None if op::is_predefined(op) => true,
            None => return Err(bad_op(op)),
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { commute.write(c_int::from(commutes)) };
        Ok(())
    })
}

/// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf`, element by element, in this process.
///
/// # Safety
/// Both buffers hold `count` elements of `datatype`; `inoutbuf` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Reduce_local", |st| {
        // SAFETY: the caller's contract.
        unsafe { reduce_local(st, inbuf, inoutbuf, i64::from(count), datatype, op) }
    })
}

/// `MPI_Reduce_local_c`: `MPI_Reduce_local` of an `MPI_Count` of elements.
///
/// # Safety
/// As `MPI_Reduce_local`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: i64,
    datatype: Handle,
    op: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Reduce_local_c", |st| {
        // SAFETY: the caller's contract.
        unsafe { reduce_local(st, inbuf, inoutbuf, count, datatype, op) }
    })
}

/// The body of `MPI_Reduce_local` for either form's count: a count whose bytes no buffer can
/// hold is `MPI_ERR_COUNT`.
///
/// # Safety
/// As `MPI_Reduce_local`.
unsafe fn reduce_local(
    st: &State,
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: i64,
    datatype: Handle,
    op: Handle,
) -> ch4::Result<()> {
    let elem = datatype::reduce_elem(datatype).ok_or_else(|| datatype::bad_type(datatype))?;
    let n = usize::try_from(count)
        .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("count {count} is negative")))?;
    let len = n
        .checked_mul(elem)
        .filter(|&l| l <= isize::MAX as usize)
        .ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Count,
                format!("count {count} is more bytes than a buffer can hold"),
            )
        })?;
    // SAFETY: the caller's contract: `count` elements of `elem` bytes each.
    let input = unsafe { datatype::raw(inbuf, len) }?;
    // SAFETY: as above, writable.
    let inout = unsafe { datatype::raw_mut(inoutbuf, len) }?;
    if let Some(user) = user_op(st, op)? {
        // SAFETY: as in `reduction`: the program's function on its own buffers.
        unsafe {
            user.function.apply(
                input.as_ptr().cast_mut().cast(),
                inout.as_mut_ptr().cast(),
                n,
                elem as isize,
                datatype,
            )
        };
        return Ok(());
    }
    // Every predefined operation commutes: in op inout = inout op in.
    datatype::reduction(op, datatype)?(inout, input);
    Ok(())
}
