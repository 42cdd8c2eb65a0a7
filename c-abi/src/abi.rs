//! The standard ABI's representation (MPI 5.0, "Application Binary Interface"): handles are
//! pointer-sized values, the predefined ones the small integers the ABI's tables assign (the
//! same numbers as `include/mpi.h`, which a test compares with MPICH 5's `mpi_abi.h`), and
//! `MPI_Status` three public ints and five private ones.
//!
//! What ch4 makes of a handle that is not predefined: a communicator is `COMM_BASE` plus its
//! index in the library's table; a request is the device's request handle with the top bit set,
//! so it can never equal a predefined value.

use std::ffi::c_int;

use ch4_core::Status;

pub(crate) use crate::state::DevReq;

/// Any MPI handle as it crosses the ABI (a pointer to an incomplete struct in C).
pub type Handle = usize;

/// `MPI_COMM_NULL`, `MPI_COMM_WORLD`, `MPI_COMM_SELF`.
pub const COMM_NULL: Handle = 0x100;
/// `MPI_COMM_WORLD`.
pub const COMM_WORLD: Handle = 0x101;
/// `MPI_COMM_SELF`.
pub const COMM_SELF: Handle = 0x102;
/// Communicators the program makes are this plus their index in the library's table.
pub const COMM_BASE: Handle = 0x1000;

/// The handle of object `i` of a kind the library makes (a derived datatype, a group, an
/// operation): the kind's `bit`, one bit of its own above every predefined value and every
/// other kind's bit, plus the object's index in its table.
pub fn indexed(bit: u64, i: usize) -> Handle {
    (i as u64 | bit) as Handle
}

/// The table index of `h` if [`indexed`] made it with `bit`: that bit set and none above it.
pub fn index_of(h: Handle, bit: u64) -> Option<usize> {
    let raw = h as u64;
    (raw & bit != 0 && raw < bit << 1).then_some((raw & !bit) as usize)
}

/// `MPI_GROUP_NULL`.
pub const GROUP_NULL: Handle = 0x108;
/// `MPI_GROUP_EMPTY`.
pub const GROUP_EMPTY: Handle = 0x109;
/// `MPI_ERRHANDLER_NULL`.
pub const ERRHANDLER_NULL: Handle = 0x140;
/// `MPI_ERRORS_ARE_FATAL`.
pub const ERRORS_ARE_FATAL: Handle = 0x141;
/// `MPI_ERRORS_ABORT`.
pub const ERRORS_ABORT: Handle = 0x142;
/// `MPI_ERRORS_RETURN`.
pub const ERRORS_RETURN: Handle = 0x143;
/// `MPI_DATATYPE_NULL`.
pub const DATATYPE_NULL: Handle = 0x200;
/// `MPI_REQUEST_NULL`.
pub const REQUEST_NULL: Handle = 0x180;

/// The predefined reduction operations (`MPI_SUM` ...).
pub mod op {
    use super::Handle;
    /// `MPI_OP_NULL`.
    pub const NULL: Handle = 0x20;
    /// `MPI_SUM`.
    pub const SUM: Handle = 0x21;
    /// `MPI_MIN`.
    pub const MIN: Handle = 0x22;
    /// `MPI_MAX`.
    pub const MAX: Handle = 0x23;
    /// `MPI_PROD`.
    pub const PROD: Handle = 0x24;
    /// `MPI_BAND`.
    pub const BAND: Handle = 0x28;
    /// `MPI_BOR`.
    pub const BOR: Handle = 0x29;
    /// `MPI_BXOR`.
    pub const BXOR: Handle = 0x2a;
    /// `MPI_LAND`.
    pub const LAND: Handle = 0x30;
    /// `MPI_LOR`.
    pub const LOR: Handle = 0x31;
    /// `MPI_LXOR`.
    pub const LXOR: Handle = 0x32;
    /// `MPI_MINLOC`.
    pub const MINLOC: Handle = 0x38;
    /// `MPI_MAXLOC`.
    pub const MAXLOC: Handle = 0x39;

    /// Whether `h` is one of the predefined reduction operations above (`MPI_OP_NULL` is not).
    pub fn is_predefined(h: Handle) -> bool {
        matches!(
            h,
            SUM | MIN | MAX | PROD | BAND | BOR | BXOR | LAND | LOR | LXOR | MINLOC | MAXLOC
        )
    }
}

/// Error classes (the standard's numbering).
pub mod class {
    use std::ffi::c_int;
    /// `MPI_SUCCESS`.
    pub const SUCCESS: c_int = 0;
    /// `MPI_ERR_BUFFER`.
    pub const BUFFER: c_int = 1;
    /// `MPI_ERR_COUNT`.
    pub const COUNT: c_int = 2;
    /// `MPI_ERR_TYPE`.
    pub const TYPE: c_int = 3;
    /// `MPI_ERR_ROOT`.
    pub const ROOT: c_int = 8;
    /// `MPI_ERR_OP`.
    pub const OP: c_int = 10;
    /// `MPI_ERR_TAG`.
    pub const TAG: c_int = 4;
    /// `MPI_ERR_COMM`.
    pub const COMM: c_int = 5;
    /// `MPI_ERR_RANK`.
    pub const RANK: c_int = 6;
    /// `MPI_ERR_REQUEST`.
    pub const REQUEST: c_int = 7;
    /// `MPI_ERR_TOPOLOGY`.
    pub const TOPOLOGY: c_int = 11;
    /// `MPI_ERR_DIMS`.
    pub const DIMS: c_int = 12;
    /// `MPI_ERR_ARG`.
    pub const ARG: c_int = 13;
    /// `MPI_ERR_TRUNCATE`.
    pub const TRUNCATE: c_int = 15;
    /// `MPI_ERR_OTHER`.
    pub const OTHER: c_int = 16;
    /// `MPI_ERR_INTERN`.
    pub const INTERN: c_int = 17;
    /// `MPI_ERR_PENDING`.
    pub const PENDING: c_int = 18;
    /// `MPI_ERR_IN_STATUS`.
    pub const IN_STATUS: c_int = 19;
    /// `MPI_ERR_INFO_KEY`.
    pub const INFO_KEY: c_int = 31;
    /// `MPI_ERR_INFO_NOKEY`.
    pub const INFO_NOKEY: c_int = 32;
    /// `MPI_ERR_INFO_VALUE`.
    pub const INFO_VALUE: c_int = 33;
    /// `MPI_ERR_INFO`.
    pub const INFO: c_int = 34;
    /// `MPI_ERR_NO_MEM`.
    pub const NO_MEM: c_int = 39;
    /// `MPI_ERR_UNSUPPORTED_OPERATION`.
    pub const UNSUPPORTED_OPERATION: c_int = 55;
    /// `MPI_ERR_PROC_ABORTED`.
    pub const PROC_ABORTED: c_int = 58;
    /// `MPI_ERR_LASTCODE`: codes run up to here.
    pub const LASTCODE: c_int = 0x3fff;
}

/// `MPI_INFO_NULL`.
pub const INFO_NULL: Handle = 0x130;
/// `MPI_INFO_ENV`: the library's info of how the process was started (see `info`).
pub const INFO_ENV: Handle = 0x131;
/// `MPI_MAX_INFO_KEY`: a key's buffer, its NUL included.
pub const MAX_INFO_KEY: usize = 256;
/// `MPI_MAX_INFO_VAL`: a value's buffer, its NUL included.
pub const MAX_INFO_VAL: usize = 1024;

/// `MPI_ANY_SOURCE`.
pub const ANY_SOURCE: c_int = -1;
/// `MPI_ANY_TAG`.
pub const ANY_TAG: c_int = -2;
/// `MPI_PROC_NULL`.
pub const PROC_NULL: c_int = -3;
/// `MPI_UNDEFINED`.
pub const UNDEFINED: c_int = -32766;
/// `MPI_COMM_TYPE_SHARED`: `MPI_Comm_split_type` by shared memory (the node).
pub const COMM_TYPE_SHARED: c_int = 221;
/// `MPI_COMM_TYPE_HW_GUIDED`: `MPI_Comm_split_type` by the hardware level an info key names.
pub const COMM_TYPE_HW_GUIDED: c_int = 223;
/// `MPI_COMM_TYPE_HW_UNGUIDED`: `MPI_Comm_split_type` by the next hardware level down.
pub const COMM_TYPE_HW_UNGUIDED: c_int = 222;
/// `MPI_COMM_TYPE_RESOURCE_GUIDED`: `MPI_Comm_split_type` by the resource an info key names.
pub const COMM_TYPE_RESOURCE_GUIDED: c_int = 224;
/// `MPI_IDENT`: the same communicator or group.
pub const IDENT: c_int = 201;
/// `MPI_CONGRUENT`: the same members in the same order, another context.
pub const CONGRUENT: c_int = 202;
/// `MPI_SIMILAR`: the same members in another order.
pub const SIMILAR: c_int = 203;
/// `MPI_UNEQUAL`.
pub const UNEQUAL: c_int = 204;
/// `MPI_CART`.
pub const CART: c_int = 211;
/// `MPI_GRAPH`.
pub const GRAPH: c_int = 212;
/// `MPI_DIST_GRAPH`.
pub const DIST_GRAPH: c_int = 213;
/// `MPI_UNWEIGHTED`: the address that stands for "no weights" in the distributed graph
/// functions.
pub const UNWEIGHTED: usize = 10;
/// `MPI_WEIGHTS_EMPTY`: the address that stands for "weighted, but no edges here".
pub const WEIGHTS_EMPTY: usize = 11;
/// `MPI_THREAD_SINGLE`.
pub const THREAD_SINGLE: c_int = 0;
/// `MPI_THREAD_SERIALIZED`.
pub const THREAD_SERIALIZED: c_int = 2048;
/// `MPI_THREAD_MULTIPLE`.
pub const THREAD_MULTIPLE: c_int = 4096;
/// `MPI_IN_PLACE`.
pub const IN_PLACE: usize = 1;
/// `MPI_MAX_PROCESSOR_NAME`, `MPI_MAX_ERROR_STRING`, `MPI_MAX_LIBRARY_VERSION_STRING`,
/// `MPI_MAX_OBJECT_NAME`.
pub const MAX_PROCESSOR_NAME: usize = 256;
/// `MPI_MAX_ERROR_STRING`.
pub const MAX_ERROR_STRING: usize = 512;
/// `MPI_MAX_LIBRARY_VERSION_STRING`.
pub const MAX_LIBRARY_VERSION_STRING: usize = 8192;
/// `MPI_MAX_OBJECT_NAME`.
pub const MAX_OBJECT_NAME: usize = 128;

/// `MPI_Status` as the ABI lays it out. ch4 keeps the byte count in the first two private
/// words and whether the operation was cancelled in the third.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MpiStatus {
    /// `MPI_SOURCE`.
    pub source: c_int,
    /// `MPI_TAG`.
    pub tag: c_int,
    /// `MPI_ERROR`.
    pub error: c_int,
    /// `MPI_internal`.
    pub internal: [c_int; 5],
}

impl MpiStatus {
    /// The C status of a device status (`error` is the caller's: MPI sets it only in the
    /// functions that complete several requests).
    #[inline(always)]
    pub fn of(st: &Status, error: c_int) -> MpiStatus {
        let bytes = st.bytes as u64;
        MpiStatus {
            source: rank_out(st.source),
            tag: tag_out(st.tag),
            error,
            internal: [
                bytes as c_int,
                (bytes >> 32) as c_int,
                c_int::from(st.cancelled),
                0,
                0,
            ],
        }
    }

    /// Writes `st` through `out` (unless null), leaving its `MPI_ERROR` as it was: functions
    /// that complete one operation do not set it (MPI's rule; MPICH's tests check it). The
    /// exception is the *empty* status of a null or inactive request (`requests::INACTIVE`:
    /// source `MPI_ANY_SOURCE`, tag `MPI_ANY_TAG`, which no message has), whose `MPI_ERROR`
    /// is `MPI_SUCCESS` by definition (MPI 4.1, section 3.7.3; MPICH's `MPIR_Status_set_empty`
    /// writes it too; a cancelled receive's status is not empty and keeps the field):
    /// `MPI_Request_get_status(MPI_REQUEST_NULL, ...)` must not hand back what the caller's
    /// stack held there.
    ///
    /// # Safety
    /// `out` is null or valid for a read and a write.
    #[inline(always)]
    pub unsafe fn put(out: *mut MpiStatus, st: &Status) {
        // SAFETY: the caller's contract.
        if let Some(o) = unsafe { out.as_mut() } {
            let error = if *st == crate::requests::INACTIVE {
                class::SUCCESS
            } else {
                o.error
            };
            *o = MpiStatus::of(st, error);
        }
    }

    /// The byte count the status records.
    #[inline(always)]
    pub fn bytes(&self) -> u64 {
        (self.internal[0] as u32 as u64) | ((self.internal[1] as u32 as u64) << 32)
    }
}

/// A rank from C to the device: the ABI's sentinels are the device's own values (see
/// `ch4_core::PROC_NULL`), so it passes through.
#[inline(always)]
pub fn rank_in(r: c_int) -> ch4_core::Rank {
    r
}

/// A tag from C to the device (the same values, see [`rank_in`]).
#[inline(always)]
pub fn tag_in(t: c_int) -> ch4_core::Tag {
    t
}

/// A rank from the device to C.
#[inline(always)]
pub fn rank_out(r: ch4_core::Rank) -> c_int {
    r
}

/// A tag from the device to C.
#[inline(always)]
pub fn tag_out(t: ch4_core::Tag) -> c_int {
    t
}

const _: () = {
    assert!(ch4_core::ANY_SOURCE == ANY_SOURCE);
    assert!(ch4_core::ANY_TAG == ANY_TAG);
    assert!(ch4_core::PROC_NULL == PROC_NULL);
};

const REQUEST_BIT: u64 = 1 << 63;
const PERSISTENT_BIT: u64 = 1 << 62;
const MESSAGE_BIT: u64 = 1 << 61;

/// `MPI_MESSAGE_NULL`.
pub const MESSAGE_NULL: Handle = 0x128;
/// `MPI_MESSAGE_NO_PROC`: what a matched probe of `MPI_PROC_NULL` returns.
pub const MESSAGE_NO_PROC: Handle = 0x129;

/// The C handle of matched-probe message `i`.
pub fn message_out(i: usize) -> Handle {
    (i as u64 | MESSAGE_BIT) as Handle
}

/// The index of a matched-probe message handle.
pub fn message_in(h: Handle) -> Option<usize> {
    let raw = h as u64;
    (raw & MESSAGE_BIT != 0 && raw & (REQUEST_BIT | PERSISTENT_BIT) == 0)
        .then_some((raw & !MESSAGE_BIT) as usize)
}

/// A request as the library sees a C handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Req {
    /// `MPI_REQUEST_NULL`.
    Null,
    /// A request of the device of a VCI.
    Device(DevReq),
    /// A persistent request: its index in the library's table.
    Persistent(usize),
    /// A generalized request (`MPI_Grequest_start`, and the library's own, `MPI_Buffer_iflush`):
    /// its index in the library's table (see `grequests`).
    Generalized(usize),
    /// A partitioned request (`MPI_Psend_init`, `MPI_Precv_init`): its index in the library's
    /// table (see `pt2pt::partitioned`).
    Partitioned(usize),
}

/// The kinds of the library's own requests that are not the device's nor persistent
/// point-to-point ones: a bit of their own under [`PERSISTENT_BIT`], so that the completion
/// functions' first test (the device's kind) is the same one test it was.
const GREQUEST_BIT: u64 = 1 << 60;
/// See [`GREQUEST_BIT`].
const PARTITIONED_BIT: u64 = 1 << 59;

/// The C handle of generalized request `i`.
pub fn grequest_out(i: usize) -> Handle {
    (i as u64 | PERSISTENT_BIT | GREQUEST_BIT) as Handle
}

/// The C handle of partitioned request `i`.
pub fn partitioned_out(i: usize) -> Handle {
    (i as u64 | PERSISTENT_BIT | PARTITIONED_BIT) as Handle
}

/// The C handle of persistent request `i`.
pub fn persistent_out(i: usize) -> Handle {
    (i as u64 | PERSISTENT_BIT) as Handle
}

/// Where a device request's VCI sits in its C handle: above the pool index, which the
/// device's request ceiling (2^22 requests, `DeviceConfig::requests`) keeps below bit 24, and
/// below the generation (bit 32 up). The one index the ceiling does not bound,
/// [`ReqHandle::DONE`]'s, has all 32 bits set; it names no request on any VCI, so it travels
/// as it is, on VCI 0.
pub(crate) const VCI_SHIFT: u32 = 24;
/// The VCI bits (up to 64 VCIs, `CH4_NUM_VCIS`'s maximum).
pub(crate) const VCI_MASK: u64 = 0x3f << VCI_SHIFT;
/// The index bits of a handle.
pub(crate) const INDEX_MASK: u64 = 0xffff_ffff;

/// What C handle `h` is; an error for anything that was never a request.
#[inline(always)]
pub fn req_in(h: Handle) -> Result<Req, ()> {
    let raw = h as u64;
    if let Some(r) = device_request(h) {
        Ok(Req::Device(r))
    } else if raw & PERSISTENT_BIT != 0 {
        let index = (raw & !(PERSISTENT_BIT | GREQUEST_BIT | PARTITIONED_BIT)) as usize;
        Ok(match raw & (GREQUEST_BIT | PARTITIONED_BIT) {
            0 => Req::Persistent(index),
            GREQUEST_BIT => Req::Generalized(index),
            PARTITIONED_BIT => Req::Partitioned(index),
            _ => return Err(()),
        })
    } else if h == REQUEST_NULL {
        Ok(Req::Null)
    } else {
        Err(())
    }
}

/// The device request behind C handle `h`, if it is one: the check the completion functions
/// make first, since almost every request a program waits for is one.
#[inline(always)]
pub fn device_request(h: Handle) -> Option<DevReq> {
    let raw = h as u64;
    (raw & REQUEST_BIT != 0).then(|| DevReq::from_packed(raw & !REQUEST_BIT))
}

/// The C handle of a device request.
#[inline(always)]
pub fn request_out(r: DevReq) -> Handle {
    (r.packed() | REQUEST_BIT) as Handle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_indexed_handle_is_read_back_only_with_its_own_bit() {
        let (low, high) = (1u64 << 58, 1u64 << 60);
        let h = indexed(low, 7);
        assert_eq!(index_of(h, low), Some(7));
        assert_eq!(index_of(h, high), None, "another kind's bit");
        assert_eq!(
            index_of(indexed(high, 7), low),
            None,
            "a bit above the kind's"
        );
        assert_eq!(index_of(op::SUM, low), None, "a predefined handle");
    }
    use ch4_core::ReqHandle;

    #[test]
    fn the_wildcards_and_sentinels_cross_both_ways() {
        assert_eq!(rank_in(PROC_NULL), ch4_core::PROC_NULL);
        assert_eq!(rank_in(ANY_SOURCE), ch4_core::ANY_SOURCE);
        assert_eq!(rank_out(ch4_core::PROC_NULL), PROC_NULL);
        assert_eq!(tag_in(ANY_TAG), ch4_core::ANY_TAG);
        assert_eq!(tag_out(ch4_core::ANY_TAG), ANY_TAG);
        assert_eq!(rank_in(7), 7);
        assert_eq!(tag_in(7), 7);
    }

    #[test]
    fn requests_never_collide_with_the_null_request() {
        for h in [
            ReqHandle::DONE,
            ReqHandle::from_raw(0),
            ReqHandle::from_raw(0x180),
            ReqHandle::from_raw((7 << 32) | 0x3f_ffff),
        ] {
            for vci in [0, 1, 63] {
                let c = request_out(DevReq::new(h, vci));
                assert_ne!(c, REQUEST_NULL);
                let Ok(Req::Device(r)) = req_in(c) else {
                    panic!("{c:#x} is not a device request");
                };
                let vci = if h == ReqHandle::DONE { 0 } else { vci };
                assert_eq!((r.handle(), r.vci()), (h, vci));
                if vci == 0 {
                    assert_eq!(r.handle_at::<false>(), h);
                }
            }
        }
        assert_eq!(req_in(REQUEST_NULL), Ok(Req::Null));
        assert_eq!(req_in(persistent_out(3)), Ok(Req::Persistent(3)));
        assert_eq!(req_in(grequest_out(3)), Ok(Req::Generalized(3)));
        assert_eq!(req_in(partitioned_out(3)), Ok(Req::Partitioned(3)));
        assert_eq!(req_in(0x1234), Err(()));
    }

    #[test]
    fn the_request_ceiling_leaves_room_for_the_vci() {
        let max = ch4_core::core::DeviceConfig::default().requests.max as u64;
        assert!(max <= 1 << VCI_SHIFT);
    }

    #[test]
    fn a_status_keeps_counts_beyond_32_bits() {
        let st = Status {
            bytes: (5usize << 32) | 7,
            ..Status::EMPTY
        };
        assert_eq!(MpiStatus::of(&st, 0).bytes(), (5u64 << 32) | 7);
        assert_eq!(std::mem::size_of::<MpiStatus>(), 32);
    }
}
